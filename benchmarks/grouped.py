"""Every grouped conv layer of torchvision's RegNet-Y-400MF (groups of 8 channels): the blocked kernels
the direct family now offers against its NCHW kernel (the only one before), and against ONNX Runtime's
own per-node time.

For each grouped, non-depthwise conv of the network (exported by torch with random weights, see
``benchmarks/networks.py``), with the epilogue the build fuses into it, every direct candidate
(``kernels.conv2d``: each pair of blocks dividing the channels per group, and NCHW) is built,
checked against numpy and timed cold, as the measurer times it, in interleaved rounds: each round
times every kernel of every layer once, then runs ORT's profiled session, so that interference on a
shared machine hits all alike. Each kernel's time is its best round (a round: the median of 10 cold
runs), as ORT's is the node's fastest run in its own profile. Writes ``benchmarks/results/grouped.md``.

Usage::

    python -m benchmarks.grouped --python /work/wt-bench/.venv-bench/bin/python   # torch exports
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TVM_NUM_THREADS", "2")

import numpy as np

from benchmarks.depthwise import cold_rounds, compiled_kernel, flops, produced_by
from benchmarks.networks import MODELS, export_torchvision
from benchmarks.ort_layers import match_convs, node_times
from benchmarks.runtimes import onnxruntime_options

RESULTS = Path(__file__).resolve().parent / "results"
NETWORK = "regnet_y_400mf"


def grouped_layers(path: Path) -> list[dict]:
    """The grouped (not depthwise) conv layers of an ONNX network: ``{"layer", "workload"}``."""
    from layoutopt.tvm import extract_layout_graph, load_model
    from layoutopt.tvm.kernels.workload import is_depthwise

    graph = extract_layout_graph(load_model(path, [1, 3, 224, 224]))
    return [{"layer": node.name, "workload": node.workload} for node in graph.layout_nodes()
            if node.op == "relax.nn.conv2d" and node.workload["groups"] > 1
            and not is_depthwise(node.workload)]


def time_layers(path: Path, rounds: int, blocks: list[int], target, directory: str) -> list[dict]:
    import onnxruntime as ort

    from layoutopt.tvm.graph.graph import Choice
    from layoutopt.tvm.kernels import conv2d_candidates

    layers = grouped_layers(path)
    options = onnxruntime_options(int(os.environ["TVM_NUM_THREADS"]), directory)
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    feed = {session.get_inputs()[0].name: np.random.default_rng(1).standard_normal((1, 3, 224, 224),
                                                                                    dtype="float32")}
    kernels = {}
    for index, layer in enumerate(layers):
        for candidate in conv2d_candidates(layer["workload"], blocks=blocks, algorithms=["direct"]):
            kernels[index, Choice(candidate).label] = compiled_kernel(layer["workload"], candidate, target)
        print(f"built {index + 1}/{len(layers)}", file=sys.stderr, flush=True)

    def between(_round: int) -> None:  # ORT's profiled runs, in the same rounds
        for _ in range(5):
            session.run(None, feed)

    samples = cold_rounds(kernels, rounds, between)
    records = match_convs([{**layer, "choice": "", "algorithm": "direct", "in_network": None}
                           for layer in layers], node_times(session.end_profiling()))
    return [{"workload": layer["workload"], "ort": record["engine"],
             "times": {label: min(values) for (i, label), values in samples.items() if i == index}}
            for index, (layer, record) in enumerate(zip(layers, records, strict=True))]


def write_table(rows: list[dict], out: Path, stamp: str, loads: tuple[float, float], rounds: int) -> None:
    from layoutopt.tvm.kernels import describe_workload

    lines = [
        "# Grouped conv layers (RegNet-Y-400MF): blocked kernels against NCHW and ONNX Runtime", "",
        f"*{stamp}*", "",
        produced_by("python -m benchmarks.grouped", rounds, loads)
        + " Each kernel timed cold (weights and output flushed, input warm), "
        "its best round (a round: the median of 10 runs); ORT: the conv node's fastest run in its own "
        "profile of the whole network, profiled between our rounds. Times in µs. `NCHW / best`: what "
        "the blocked kernels gain over the only kernel grouped convs had before; `ORT / best` above 1: "
        "ours is faster. Weights random (torchvision's architecture, exported by torch).", "",
        "| layer | NCHW | best blocked (layouts) | NCHW / best | GFLOP/s | ORT | ORT / best |",
        "|---|---|---|---|---|---|---|",
    ]
    gains, versus_ort = [], []
    for row in rows:
        nchw = row["times"]["NCHW->NCHW"]
        blocked = {k: t for k, t in row["times"].items() if k != "NCHW->NCHW"}
        label = min(blocked, key=blocked.get)
        best = blocked[label]
        gains.append(nchw / best)
        ort = row["ort"]
        versus_ort += [ort / best] if ort else []
        gflops = flops(row["workload"]) * row["workload"]["kernel"][1] / best / 1e9  # x channels per group
        cells = [describe_workload(row["workload"]), f"{nchw * 1e6:.1f}", f"{best * 1e6:.1f} ({label})",
                 f"{nchw / best:.2f}x", f"{gflops:.1f}", f"{ort * 1e6:.1f}" if ort else "-",
                 f"{ort / best:.2f}x" if ort else "-"]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", f"{len(rows)} grouped layers: the best blocked kernel is "
              f"{min(gains):.2f}-{max(gains):.2f}x faster than NCHW (median {np.median(gains):.2f}x); "
              "against ORT's node, median "
              f"{np.median(versus_ort):.2f}x, lowest {min(versus_ort):.2f}x, "
              f"{sum(v >= 1 for v in versus_ort)} of {len(versus_ort)} layers at least as fast.", ""]
    out.write_text("\n".join(lines))
    print("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default=sys.executable, help="an interpreter with torch, to export")
    parser.add_argument("--blocks", default="4,8,16", type=lambda text: [int(b) for b in text.split(",")])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--out", default=str(RESULTS / "grouped.md"))
    args = parser.parse_args(argv)
    from layoutopt.machine import stamp_line
    from layoutopt.tvm import resolve_target

    path = export_torchvision(NETWORK, MODELS / f"{NETWORK}.onnx", python=args.python)
    start = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="layoutopt-grouped-") as directory:
        rows = time_layers(path, args.rounds, args.blocks, resolve_target(None), directory)
    write_table(rows, Path(args.out), stamp_line(), (start, os.getloadavg()[0]), args.rounds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

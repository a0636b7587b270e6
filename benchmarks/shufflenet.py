"""ShuffleNet v1 (groups 3 and 8, written in ONNX by ``benchmarks.onnx_written``): its grouped 1x1 convs
per kernel, and the tuned build end to end beside ONNX Runtime, OpenVINO and b*.

Per layer: for each grouped 1x1 conv of the network (with the epilogue the build fuses into it), the
fastest kernel of each kind (the direct blocked kernel, the GEMM per group blocked, and the direct and
GEMM kernels in NCHW) is built, checked against numpy and timed cold, as the measurer times it, in
interleaved rounds, ONNX Runtime's profiled session running between the rounds (each kernel's time:
its best round, a round the median of 10 cold runs; ORT's: the node's fastest run in its profile).

End to end: ``tune_and_build`` with the defaults (every algorithm a choice, the guard), the build
handed back and b* (the faster of NCHW8c and NCHW16c everywhere) exported and timed side by side
with ONNX Runtime and OpenVINO on the ``.onnx`` file (``benchmarks.runtimes``). Writes
``benchmarks/results/shufflenet.md`` (and ``shufflenet.json``).

Usage::

    python -m benchmarks.shufflenet                    # both, groups 3 and 8
    python -m benchmarks.shufflenet --skip-end-to-end  # the per-layer table only
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TVM_NUM_THREADS", "2")

import numpy as np

from benchmarks.kernel_timing import cold_rounds, compiled_kernel, produced_by
from benchmarks.onnx_written import shufflenet_v1
from benchmarks.ort_layers import match_convs, node_times
from benchmarks.runtimes import markdown, onnxruntime_options, start_engines, time_side_by_side

RESULTS = Path(__file__).resolve().parent / "results"
SIZE = 224
#: the kinds of kernel a grouped 1x1 conv has, by how a candidate shows it
KINDS = ("direct blocked", "gemm blocked", "direct NCHW", "gemm NCHW")


def kind(candidate: dict) -> str:
    layout = "NCHW" if candidate["in"] == "NCHW" else "blocked"
    return f"{candidate.get('algorithm', 'direct')} {layout}"


def grouped_layers(path: Path) -> list[dict]:
    """The grouped 1x1 conv layers of the network: ``{"layer", "workload"}`` (with its epilogue)."""
    from layoutopt.tvm import extract_layout_graph, load_model

    graph = extract_layout_graph(load_model(path, [1, 3, SIZE, SIZE]))
    return [{"layer": node.name, "workload": node.workload} for node in graph.layout_nodes()
            if node.op == "relax.nn.conv2d" and node.workload["groups"] > 1
            and node.workload["kernel"][2:] == [1, 1]]


def time_layers(path: Path, rounds: int, target, directory: str) -> list[dict]:
    """Each grouped 1x1 layer's best time per kind of kernel (label and seconds) and ORT's node time."""
    import onnxruntime as ort

    from layoutopt.tvm.graph.graph import Choice
    from layoutopt.tvm.kernels import conv2d_candidates

    layers = grouped_layers(path)
    distinct: dict[str, int] = {}  # ShuffleNet repeats its units: each distinct workload timed once
    for index, layer in enumerate(layers):
        distinct.setdefault(json.dumps(layer["workload"], sort_keys=True), index)
    kernels = {}
    for index in distinct.values():
        for candidate in conv2d_candidates(layers[index]["workload"]):
            kernels[index, Choice(candidate).label] = (kind(candidate), compiled_kernel(
                layers[index]["workload"], candidate, target))
        print(f"built layer {index + 1}/{len(layers)}", file=sys.stderr, flush=True)
    options = onnxruntime_options(int(os.environ["TVM_NUM_THREADS"]), directory)
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    feed = {session.get_inputs()[0].name: np.random.default_rng(1).standard_normal((1, 3, SIZE, SIZE),
                                                                                    dtype="float32")}

    def between(_round: int) -> None:  # ORT's profiled runs, in the same rounds
        for _ in range(5):
            session.run(None, feed)

    samples = cold_rounds({key: value[1] for key, value in kernels.items()}, rounds, between)
    records = match_convs([{**layer, "choice": "", "algorithm": "gemm", "in_network": None}
                           for layer in layers], node_times(session.end_profiling()))
    rows = []
    for index, (layer, record) in enumerate(zip(layers, records, strict=True)):
        timed = distinct[json.dumps(layer["workload"], sort_keys=True)]
        best: dict[str, tuple[str, float]] = {}
        for (i, label), (kernel_kind, _) in kernels.items():
            if i == timed and (kernel_kind not in best or min(samples[i, label]) < best[kernel_kind][1]):
                best[kernel_kind] = (label, min(samples[i, label]))
        repeat_of = None if timed == index else layers[timed]["layer"]
        rows.append({"layer": layer["layer"], "workload": layer["workload"], "best": best,
                     "ort": record["engine"], "repeat_of": repeat_of})
    return rows


def layer_table(rows: list[dict], groups: int) -> list[str]:
    from layoutopt.tvm.kernels import describe_workload

    lines = [f"### ShuffleNet v1, {groups} groups: grouped 1x1 layers (µs)", "",
             "| layer | " + " | ".join(KINDS) + " | ORT | ORT / best |", "|---" * (len(KINDS) + 3) + "|"]
    versus_ort, gemm_gains = [], []
    for row in rows:
        if row["repeat_of"]:
            continue
        best = row["best"]
        fastest = min(seconds for _, seconds in best.values())
        cells = [describe_workload(row["workload"])]
        for name in KINDS:
            if name in best:
                label, seconds = best[name]
                mark = "**" if seconds == fastest else ""
                cells.append(f"{mark}{seconds * 1e6:.1f}{mark} ({label.split('[')[0]})")
            else:
                cells.append("-")
        ort = row["ort"]
        cells += [f"{ort * 1e6:.1f}" if ort else "-", f"{ort / fastest:.2f}x" if ort else "-"]
        versus_ort += [ort / fastest] if ort else []
        before = min(best[name][1] for name in ("direct blocked", "direct NCHW") if name in best)
        gemm_gains.append(before / fastest)
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", f"{len(gemm_gains)} distinct layers (each repeated unit timed once): the fastest kernel "
              f"is {min(gemm_gains):.2f}-{max(gemm_gains):.2f}x the fastest direct one (median "
              f"{np.median(gemm_gains):.2f}x); against ORT's node, median {np.median(versus_ort):.2f}x, "
              f"{sum(v >= 1 for v in versus_ort)} of {len(versus_ort)} at least as fast.", ""]
    return lines


def end_to_end(path: Path, name: str, args: argparse.Namespace) -> dict:
    """Tune, export the build handed back and b*, time them beside ORT and OpenVINO."""
    from layoutopt.tvm import export_library, load_model, tune_and_build

    result = tune_and_build(load_model(path, [1, 3, SIZE, SIZE]), cache=args.cache, progress=True)
    builds = Path(args.builds)
    builds.mkdir(parents=True, exist_ok=True)
    libraries = {"handed_back": result.export(builds / f"{name}.so", model=str(path))[0]}
    best_fixed = result.baselines["best_fixed"]
    if best_fixed.executable is not result.executable:
        libraries["best_fixed"] = export_library(best_fixed.executable, builds / f"{name}.best_fixed.so")
    inputs = [np.random.default_rng(1).standard_normal((1, 3, SIZE, SIZE)).astype("float32")]
    with start_engines(path, inputs, libraries, int(os.environ["TVM_NUM_THREADS"])) as (engines, failed):
        side = time_side_by_side(engines, args.rounds, versions={n: e.version for n, e in engines.items()})
    # the tuned solution's kernels of the grouped 1x1 convs, by label
    grouped: dict[str, int] = {}
    for layer in grouped_layers(path):
        label = result.solution.labels[layer["layer"]]
        grouped[label] = grouped.get(label, 0) + 1
    return {"name": name, "chosen": result.chosen, "failed": failed, "side_by_side": side.as_dict(),
            "markdown": markdown(side, "handed_back"), "grouped_choices": grouped}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", default="3,8", type=lambda text: [int(g) for g in text.split(",")])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--layer-rounds", type=int, default=7)
    parser.add_argument("--cache", default=None, help="cost cache (default: layoutopt's)")
    parser.add_argument("--builds", default=str(Path(tempfile.gettempdir()) / "layoutopt-shufflenet"))
    parser.add_argument("--skip-end-to-end", action="store_true")
    parser.add_argument("--out", default=str(RESULTS / "shufflenet.md"))
    args = parser.parse_args(argv)
    from layoutopt.machine import stamp_line
    from layoutopt.tvm import resolve_target

    target = resolve_target(None)
    lines = ["# ShuffleNet v1: grouped 1x1 convs per group, channel shuffles folded", "",
             f"*{stamp_line()}*", ""]
    records = []
    with tempfile.TemporaryDirectory(prefix="layoutopt-shufflenet-") as directory:
        for groups in args.groups:
            path = shufflenet_v1(Path(directory) / f"shufflenet_v1_g{groups}.onnx", groups=groups, size=SIZE)
            start = os.getloadavg()[0]
            rows = time_layers(path, args.layer_rounds, target, directory)
            lines += [produced_by("python -m benchmarks.shufflenet", args.layer_rounds,
                                  (start, os.getloadavg()[0])), "", *layer_table(rows, groups)]
            record = {"groups": groups, "layers": rows}
            if not args.skip_end_to_end:
                timed = end_to_end(path, f"shufflenet_v1_g{groups}", args)
                choices = ", ".join(f"{label} x{count}" for label, count in timed["grouped_choices"].items())
                lines += [f"### ShuffleNet v1, {groups} groups, end to end (handed back: {timed['chosen']})",
                          "", *timed["markdown"], "",
                          f"The tuned solution's grouped 1x1 kernels: {choices}.", ""]
                record["end_to_end"] = {k: v for k, v in timed.items() if k != "markdown"}
            records.append(record)
            Path(args.out).write_text("\n".join(lines) + "\n")
            print("\n".join(lines), flush=True)
    Path(args.out).with_suffix(".json").write_text(json.dumps(records, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

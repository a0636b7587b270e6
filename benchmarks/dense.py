"""Every dense layer of the PP-OCRv4 recogniser, and a classifier's GEMV: each weight layout the dense
family offers, timed as the measurer times it.

The recogniser (``ch_PP-OCRv4_rec_infer.onnx`` of rapidocr-onnxruntime, at 48x320, fetched as
``benchmarks.real_models`` fetches it) ends in a dense layer from 40x120 to 6625 characters, which no
block of 8, 16 or 32 divides: before the packed weights were padded, the plain ``NK`` weight was its
only candidate. For each distinct dense workload of the model (and MobileNetV2's 1280 -> 1000 GEMV),
every candidate (``NK`` and ``NK{b}n``, :meth:`layoutopt.tvm.kernels.dense.Dense.candidates`) is built,
checked against numpy and timed cold (weights and output flushed,
:class:`layoutopt.tvm.measure.runner.LocalRunner`)
in interleaved rounds: each round times every kernel once, so that interference on a shared machine
hits all alike. Each kernel's time is its best round (a round: the median of 10 cold runs). Writes
``benchmarks/results/dense.md``.

Usage::

    python -m benchmarks.dense            # needs the tvm extra; downloads the recogniser's wheel once
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("TVM_NUM_THREADS", "2")

from benchmarks.depthwise import cold_rounds, compiled_kernel, produced_by

RESULTS = Path(__file__).resolve().parent / "results"
MODEL = "ppocr_rec"
#: a classifier head's GEMV beside the recogniser's layers (MobileNetV2's and EfficientNet-B0's)
GEMV = {"op": "dense", "data": [1, 1280], "weight": [1000, 1280], "dtype": "float32"}


def dense_workloads(models: Path) -> list[dict]:
    """The distinct dense workloads of the recogniser, in program order, then :data:`GEMV`."""
    from benchmarks.real_models import MODELS, fetch
    from layoutopt.tvm import extract_layout_graph, load_model

    model = MODELS[MODEL]
    graph = extract_layout_graph(load_model(fetch(model, models), list(model.shape)))
    found = []
    for node in graph.layout_nodes():
        if node.kind == "target" and node.op == "relax.matmul" and node.workload not in found:
            found.append(node.workload)
    return [*found, GEMV]


def time_candidates(workloads: list[dict], rounds: int, target) -> list[dict]:
    from layoutopt.tvm.kernels import dense_candidates

    kernels = {}
    for index, workload in enumerate(workloads):
        for candidate in dense_candidates(workload):
            kernels[index, candidate["weight"]] = compiled_kernel(workload, candidate, target)
        print(f"built {index + 1}/{len(workloads)}", file=sys.stderr, flush=True)
    samples = cold_rounds(kernels, rounds)
    return [{"workload": workload,
             "times": {weight: min(values) for (i, weight), values in samples.items() if i == index}}
            for index, workload in enumerate(workloads)]


def write_table(rows: list[dict], out: Path, stamp: str, loads: tuple[float, float], rounds: int) -> None:
    weights = ["NK", "NK8n", "NK16n", "NK32n"]
    lines = [
        "# Dense layers: plain and packed weights (the PP-OCRv4 recogniser, a classifier's GEMV)", "",
        f"*{stamp}*", "",
        produced_by("python -m benchmarks.dense", rounds, loads)
        + " Each kernel timed cold (weights and output flushed, input warm), "
        "its best round (a round: the median of 10 runs). Times in µs; `-`: not a candidate (a block "
        "wider than the features padded to the narrowest). `NK / best`: what the best packed weight "
        "gains over the plain one.", "",
        "| dense (M x K -> N) | " + " | ".join(weights) + " | best | GFLOP/s | NK / best |",
        "|---|" + "---|" * (len(weights) + 3),
    ]
    for row in rows:
        workload, times = row["workload"], row["times"]
        (m, k), n = workload["data"], workload["weight"][0]
        packed = {w: t for w, t in times.items() if w != "NK"}
        best = min(packed, key=packed.get)
        cells = [f"{m} x {k} -> {n}", *(f"{times[w] * 1e6:.1f}" if w in times else "-" for w in weights),
                 best, f"{2 * m * k * n / packed[best] / 1e9:.1f}", f"{times['NK'] / packed[best]:.2f}x"]
        lines.append("| " + " | ".join(cells) + " |")
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=str(Path.home() / ".cache" / "layoutopt" / "models"),
                        help="where the packages' .onnx files are kept (as benchmarks.real_models)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--out", default=str(RESULTS / "dense.md"))
    args = parser.parse_args(argv)
    from layoutopt.machine import stamp_line
    from layoutopt.tvm import resolve_target

    workloads = dense_workloads(Path(args.models))
    start = os.getloadavg()[0]
    rows = time_candidates(workloads, args.rounds, resolve_target(None))
    write_table(rows, Path(args.out), stamp_line(), (start, os.getloadavg()[0]), args.rounds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

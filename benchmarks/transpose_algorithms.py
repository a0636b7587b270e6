"""Opt-in benchmark: ConvTranspose kernels side by side, the per-phase direct kernel against GEMM + col2im
(and TVM's own NCHW legalization), on the transposed convs detectors and segmenters use.

Every candidate of each workload (:func:`layoutopt.tvm.kernels.candidates`, blocks 8 and 16) is built,
checked against numpy and timed cold, as the measurer times kernels (:class:`layoutopt.tvm.LocalRunner`),
in interleaved rounds (one timing of each kernel per round; the kernel's time is its median over the
rounds): on a shared machine interference comes in episodes, and the kernels of a workload see the
same ones. Writes ``results/transpose_algorithms.md``.

Usage (the ``tvm`` extra; a few minutes on 2 cores)::

    python -m benchmarks.transpose_algorithms
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

RESULTS = Path(__file__).parent / "results"

#: (what, workload): PP-OCR's 2x2 heads, the 4x4 / 3x3 stride-2 upsamplers of segmentation and GAN
#: decoders, a depthwise (learned bilinear) upsampler
WORKLOADS = [
    ("PP-OCR head 2x2 s2", {"data": [1, 24, 80, 80], "kernel": [24, 24, 2, 2], "strides": [2, 2]}),
    ("PP-OCR head 2x2 s2, 1 channel", {"data": [1, 24, 160, 160], "kernel": [24, 1, 2, 2],
                                       "strides": [2, 2]}),
    ("4x4 s2 p1", {"data": [1, 64, 40, 40], "kernel": [64, 64, 4, 4], "strides": [2, 2],
                   "padding": [1] * 4}),
    ("3x3 s2 p1 op1", {"data": [1, 64, 40, 40], "kernel": [64, 64, 3, 3], "strides": [2, 2],
                       "padding": [1] * 4, "output_padding": [1, 1]}),
    ("3x3 s2 p1 op1, 128->64", {"data": [1, 128, 20, 20], "kernel": [128, 64, 3, 3], "strides": [2, 2],
                                "padding": [1] * 4, "output_padding": [1, 1]}),
    ("depthwise 4x4 s2 p1", {"data": [1, 64, 40, 40], "kernel": [64, 1, 4, 4], "strides": [2, 2],
                             "padding": [1] * 4, "groups": 64}),
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--output", default=str(RESULTS / "transpose_algorithms.md"))
    args = parser.parse_args(argv)
    os.environ.setdefault("TVM_NUM_THREADS", "2")

    from layoutopt.machine import stamp_line
    from layoutopt.tvm import LocalRunner, import_tvm, resolve_target
    from layoutopt.tvm.kernels import build_kernel, candidates, check_kernel, validate_workload

    tvm = import_tvm()
    target, runner = resolve_target(None), LocalRunner(repeat=1)
    load = os.getloadavg()[0]
    lines = ["# ConvTranspose kernels: per-phase direct, GEMM + col2im, TVM's own", "",
             f"Written by `python -m benchmarks.transpose_algorithms`. {stamp_line()}. Load average "
             f"{load:.2f} at the start. **A shared machine**: compare within a workload (its kernels were "
             f"timed in the same {args.rounds} interleaved rounds, cold, each the median of "
             f"{runner.cold_runs} runs a round), not across workloads or with other runs.", "",
             "| workload | kernel | ms | vs fastest |", "|---|---|---|---|"]
    for what, spec in WORKLOADS:
        workload = validate_workload({"op": "conv2d_transpose", **spec})
        kernels = {}
        for candidate in candidates(workload, blocks=[8, 16]):
            kernel = build_kernel(workload, candidate, target)
            executable = tvm.compile(kernel.module, target=target)
            check_kernel(kernel, executable, target=target)
            label = ", ".join(f"{k}={v}" for k, v in candidate.items())
            kernels[label] = (executable.mod, kernel.device_args(kernel.logical_inputs(), tvm.cpu()))
        times: dict[str, list[float]] = {label: [] for label in kernels}
        for _ in range(args.rounds):
            for label, (module, device_args) in kernels.items():
                times[label] += runner.time(module, tvm.cpu(), "kernel", device_args)
        medians = {label: statistics.median(values) for label, values in times.items()}
        fastest = min(medians.values())
        for label, seconds in sorted(medians.items(), key=lambda item: item[1]):
            lines.append(f"| {what} | {label} | {seconds * 1e3:.3f} | {seconds / fastest:.2f}x |")
        print("\n".join(lines[-len(medians):]), flush=True)
    lines += ["", f"Load average {os.getloadavg()[0]:.2f} at the end."]
    Path(args.output).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

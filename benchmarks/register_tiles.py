"""Register tiles per ISA: which ``reg_n`` each blocked conv kernel runs fastest with, against the heuristic.

For each target (the host's, and an AVX2 one when the host has AVX-512: AVX2 code runs on an
AVX-512 host), each layer and each output block, every register tile width that fits is built and
timed in interleaved rounds (one run of each per round, median), together with the width
:func:`layoutopt.tvm.kernels.register_tile` picks. Reports GFLOP/s, the share of the target ISA's
FMA peak (``benchmarks/roofline.fma_peak_gflops``) and how far the heuristic's pick is from the best.

Usage::

    python -m benchmarks.register_tiles              # writes benchmarks/results/register_tiles.md
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

os.environ.setdefault("TVM_NUM_THREADS", "2")

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"

#: (name, [N, C, H, W], [O, C, KH, KW], stride, padding): ResNet-50 and VGG layers, all widths
LAYERS = [
    ("resnet 3x3 64@56", [1, 64, 56, 56], [64, 64, 3, 3], 1, 1),
    ("resnet 1x1 256->64@56", [1, 256, 56, 56], [64, 256, 1, 1], 1, 0),
    ("resnet 3x3 128@28", [1, 128, 28, 28], [128, 128, 3, 3], 1, 1),
    ("resnet 3x3 256@14", [1, 256, 14, 14], [256, 256, 3, 3], 1, 1),
    ("resnet 1x1 256->1024@14", [1, 256, 14, 14], [1024, 256, 1, 1], 1, 0),
    ("resnet 3x3 512@7", [1, 512, 7, 7], [512, 512, 3, 3], 1, 1),
    ("vgg 3x3 64@224", [1, 64, 224, 224], [64, 64, 3, 3], 1, 1),
]


def workload(data, kernel, stride, padding) -> dict:
    return {"op": "conv2d", "data": data, "kernel": kernel, "strides": [stride] * 2, "padding": [padding] * 4,
            "dilation": [1, 1], "groups": 1, "dtype": "float32"}


def flops(wl) -> float:
    from layoutopt.tvm.kernels import conv2d_output_shape

    n, o, oh, ow = conv2d_output_shape(wl)
    return 2.0 * n * o * oh * ow * wl["kernel"][1] * wl["kernel"][2] * wl["kernel"][3]


def time_tiles(wl, block: int, tiles: list[int], target, rounds: int) -> dict[int, float]:
    """Median seconds of the kernel ``NCHW{block}c -> NCHW{block}c`` per register tile width."""
    import tvm

    from layoutopt.tvm.kernels import build_kernel

    timers = {}
    for reg_n in tiles:
        kernel = build_kernel(wl, {"in": f"NCHW{block}c", "out": f"NCHW{block}c", "reg_n": reg_n}, target)
        module = tvm.compile(kernel.module, target=target).mod
        args = kernel.device_args(kernel.logical_inputs(), tvm.cpu())
        timers[reg_n] = (module.time_evaluator(kernel.name, tvm.cpu(), number=0, repeat=1, min_repeat_ms=40),
                         args)
    samples: dict[int, list[float]] = {reg_n: [] for reg_n in tiles}
    for _ in range(rounds):
        for reg_n, (timer, args) in timers.items():
            samples[reg_n].append(timer(*args).mean)
    return {reg_n: float(np.median(values)) for reg_n, values in samples.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--blocks", default="8,16,32")
    args = parser.parse_args(argv)

    from benchmarks.roofline import fma_peak_gflops
    from layoutopt.machine import stamp_line
    from layoutopt.tvm import resolve_target
    from layoutopt.tvm.kernels import conv2d_output_shape, isa_name, register_tile, vector_registers

    host = resolve_target("llvm")
    targets = [host]
    if isa_name(host) == "AVX-512":
        targets.append(resolve_target({"kind": "llvm", "mcpu": "haswell"}))
    blocks = [int(b) for b in args.blocks.split(",")]
    lines = [
        "# Register tiles per ISA: measured best vs the heuristic",
        "",
        f"*{stamp_line()}*",
        "",
        "Produced by `python -m benchmarks.register_tiles`. Each row: one blocked conv (in and out in",
        "the same block), every register tile width that fits timed in interleaved rounds; GFLOP/s of",
        "the heuristic's pick and of the best, and the best's share of the target ISA's FMA peak",
        "(2 threads). Ratios within a row are measured side by side; rows were measured one after",
        "the other.",
        "",
    ]
    for target in targets:
        isa = isa_name(target)
        peak = fma_peak_gflops(isa=isa)
        lanes, registers = vector_registers(target)
        lines += [f"## {isa} (llvm mcpu {target.attrs['mcpu']}; {registers} registers of {lanes} floats; "
                  f"FMA peak {peak:.1f} GFLOP/s)", "",
                  "| layer | block | heuristic reg_n | its GFLOP/s | best reg_n | best GFLOP/s "
                  "| best / heuristic | best % of peak |", "|---|---|---|---|---|---|---|---|"]
        for name, data, kernel, stride, padding in LAYERS:
            wl = workload(data, kernel, stride, padding)
            width = conv2d_output_shape(wl)[3]
            for block in blocks:
                if data[1] % block or kernel[0] % block:
                    continue
                per_column = -(-block // lanes)
                fitting = [d for d in range(1, 17) if d * per_column <= registers - per_column and d <= width]
                pick = register_tile(width, block, target)
                seconds = time_tiles(wl, block, sorted({*fitting, pick}), target, args.rounds)
                best = min(seconds, key=seconds.get)
                gflops = {d: flops(wl) / s / 1e9 for d, s in seconds.items()}
                lines.append(f"| {name} | {block}c | {pick} | {gflops[pick]:.1f} | {best} "
                             f"| {gflops[best]:.1f} | {seconds[pick] / seconds[best]:.2f}x "
                             f"| {100 * gflops[best] / peak:.0f}% |")
                print(lines[-1], flush=True)
        lines.append("")
    (RESULTS / "register_tiles.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()

"""The 1x1 GEMM's register tiles of schedule version 11 against version 10's, on torchvision's mobile
backbones (MobileNetV2, MobileNetV3-large, EfficientNet-B0, RegNet-Y-400MF).

On AVX2 (16 ymm registers, blocks of 8 channels), :func:`layoutopt.tvm.kernels.isa.gemm_register_tile`
puts tiles of 2 pixels first (each pixel's broadcast stays live across the tile's blocks). Version 10
took only columns that divide the output width, so an odd width (the 7x7 maps of the last stage) had
no 2-pixel tile and ran a row of 7 pixels times one block: 7 FMAs per 8 loads. Version 11 lets a row's
last tile be partial on odd widths (7 = 2 + 2 + 2 + 1), over block counts that divide the channels.
(Version 10 against 9, the registers counted: 54 kernels, median 1.18x; this file's git history.)

For every 1x1 GEMM layer of the networks whose tile the two rules set differently (output blocks of 8),
both kernels are built, checked against numpy and timed cold (weights and output flushed), as the
measurer times them, in interleaved rounds; each kernel's time is its best round (a round: the
median of 10 cold runs). On AVX-512 the rule is unchanged and no layer differs. Writes
``benchmarks/results/gemm_tiles.md``.

Usage::

    python -m benchmarks.gemm_tiles --python /work/wt-bench/.venv-bench/bin/python   # torch exports
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any
from unittest import mock

os.environ.setdefault("TVM_NUM_THREADS", "2")

from benchmarks.depthwise import cold_rounds, compiled_kernel, flops, produced_by
from benchmarks.networks import MODELS, export_torchvision

RESULTS = Path(__file__).resolve().parent / "results"
NETWORKS = ("mobilenet_v2", "mobilenet_v3_large", "efficientnet_b0", "regnet_y_400mf")


def tile_before_v11(out_h: int, out_w: int, out_outer: int, out_block: int, target: Any = None,
                    partial_blocks: bool = False, in_channels: int | None = None) -> tuple[int, int, int]:
    """Version 10's rule: columns that divide the width; on AVX2 the registers counted for blocks of
    one vector only."""
    from layoutopt.tvm.kernels import isa

    lanes, registers = isa.vector_registers(target)
    return isa._tile_of_dividing_columns(out_h, out_w, out_outer, -(-out_block // lanes), registers,
                                         partial_blocks)


def differing_layers(paths: dict[str, Path], target) -> list[dict]:
    """The networks' distinct 1x1 GEMM (workload, candidate) pairs of one input and output block
    whose tile the two rules set differently, with both tiles."""
    from layoutopt.tvm import extract_layout_graph, load_model
    from layoutopt.tvm.kernels import conv2d_candidates, conv2d_output_shape, layout_block
    from layoutopt.tvm.kernels.isa import gemm_register_tile

    found = []
    for network, path in paths.items():
        graph = extract_layout_graph(load_model(path, [1, 3, 224, 224]))
        for node in graph.layout_nodes():
            if node.op != "relax.nn.conv2d":
                continue
            for candidate in conv2d_candidates(node.workload, algorithms=["gemm"]):
                block = layout_block(candidate["out"])
                same_blocks = block is not None and layout_block(candidate["in"]) == block
                if candidate.get("algorithm") != "gemm" or not same_blocks:
                    continue
                _, channels, out_h, out_w = conv2d_output_shape(node.workload)
                shape = (out_h, out_w, -(-channels // block), block, target)
                in_channels = node.workload["kernel"][1]
                tiles = [tile_before_v11(*shape, partial_blocks=True),
                         gemm_register_tile(*shape, partial_blocks=True, in_channels=in_channels)]
                entry = {"network": network, "workload": node.workload, "candidate": candidate,
                         "tiles": tiles}
                if tiles[0] != tiles[1] and not any(f["workload"] == node.workload
                                                    and f["candidate"] == candidate for f in found):
                    found.append(entry)
    return found


def time_tiles(layers: list[dict], rounds: int, target) -> list[dict]:
    from layoutopt.tvm.kernels import gemm

    kernels = {}
    for index, layer in enumerate(layers):
        with mock.patch.object(gemm, "gemm_register_tile", tile_before_v11):
            kernels[index, "before"] = compiled_kernel(layer["workload"], layer["candidate"], target)
        kernels[index, "now"] = compiled_kernel(layer["workload"], layer["candidate"], target)
        print(f"built {index + 1}/{len(layers)}", file=sys.stderr, flush=True)
    samples = cold_rounds(kernels, rounds)
    return [{**layer, "before": min(samples[index, "before"]), "now": min(samples[index, "now"])}
            for index, layer in enumerate(layers)]


def write_table(rows: list[dict], out: Path, stamp: str, loads: tuple[float, float], rounds: int) -> None:
    import numpy as np

    from layoutopt.tvm.kernels import describe_workload

    lines = [
        "# 1x1 GEMM register tiles: schedule version 11 against 10 (torchvision's mobile backbones)", "",
        f"*{stamp}*", "",
        produced_by("python -m benchmarks.gemm_tiles", rounds, loads)
        + " Every 1x1 GEMM layer and block whose register tile version 11's rule (a partial last tile "
        "in each row of an odd width, on AVX2) sets differently from version 10's; "
        "tiles as (rows, columns, blocks). Each kernel timed cold (weights and output flushed), its "
        "best round (a round: the median of 10 runs). Times in µs; above 1, version 11's tile is faster.",
        "",
        "| network | layer | layouts | v10 tile | µs | v11 tile | µs | GFLOP/s | v10 / v11 |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    gains = []
    for row in rows:
        gains.append(row["before"] / row["now"])
        gflops = flops(row["workload"]) * row["workload"]["kernel"][1] / row["now"] / 1e9
        cells = [row["network"], describe_workload(row["workload"]),
                 f"{row['candidate']['in']}->{row['candidate']['out']}",
                 str(tuple(row["tiles"][0])), f"{row['before'] * 1e6:.1f}", str(tuple(row["tiles"][1])),
                 f"{row['now'] * 1e6:.1f}", f"{gflops:.1f}", f"{gains[-1]:.2f}x"]
        lines.append("| " + " | ".join(cells) + " |")
    if gains:
        slower = sum(g < 1 for g in gains)
        lines += ["", f"{len(rows)} kernels: version 11's tile runs at {min(gains):.2f}-{max(gains):.2f}x "
                  f"version 10's speed (median {np.median(gains):.2f}x); {slower} slower.", ""]
    else:
        lines += ["", "No 1x1 GEMM layer's tile differs on this machine.", ""]
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default=sys.executable, help="an interpreter with torch, to export")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--out", default=str(RESULTS / "gemm_tiles.md"))
    args = parser.parse_args(argv)
    from layoutopt.machine import stamp_line
    from layoutopt.tvm import resolve_target

    target = resolve_target(None)
    paths = {name: export_torchvision(name, MODELS / f"{name}.onnx", python=args.python) for name in NETWORKS}
    layers = differing_layers(paths, target)
    start = os.getloadavg()[0]
    rows = time_tiles(layers, args.rounds, target)
    write_table(rows, Path(args.out), stamp_line(), (start, os.getloadavg()[0]), args.rounds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

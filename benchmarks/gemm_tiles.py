"""The 1x1 GEMM's register tiles with a partial last tile of channel blocks, against the tiles of
dividing block counts only (the rule before schedule version 9), on torchvision's RegNet-Y-400MF.

RegNet's 104 channels are 13 blocks of 8 and its 440 are 55: among block counts that divide them,
only one block fits beside four or more pixels, so the GEMM's tile was pixels x 1 block.
:func:`layoutopt.tvm.kernels.isa.gemm_register_tile` with ``partial_blocks`` (what the 1x1 GEMM uses
now) allows a count that does not divide, the last tile partial. For every 1x1 GEMM layer of the
network and every block the candidates offer where the two rules pick different tiles, both kernels
are built, checked against numpy and timed cold (weights and output flushed), as the measurer times
them, in interleaved rounds; each kernel's time is its best round (a round: the median of 10 cold
runs). Writes ``benchmarks/results/gemm_tiles.md``.

Usage::

    python -m benchmarks.gemm_tiles --python /work/wt-bench/.venv-bench/bin/python   # torch exports
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from unittest import mock

os.environ.setdefault("TVM_NUM_THREADS", "2")

from benchmarks.depthwise import cold_rounds, compiled_kernel, flops, produced_by
from benchmarks.networks import MODELS, export_torchvision

RESULTS = Path(__file__).resolve().parent / "results"
NETWORK = "regnet_y_400mf"


def differing_layers(path: Path, target) -> list[dict]:
    """The network's distinct 1x1 GEMM (workload, candidate) pairs of one input and output block
    whose tile changes with ``partial_blocks``, with both tiles."""
    from layoutopt.tvm import extract_layout_graph, load_model
    from layoutopt.tvm.kernels import conv2d_candidates, conv2d_output_shape, layout_block
    from layoutopt.tvm.kernels.isa import gemm_register_tile

    graph = extract_layout_graph(load_model(path, [1, 3, 224, 224]))
    found = []
    for node in graph.layout_nodes():
        if node.op != "relax.nn.conv2d":
            continue
        for candidate in conv2d_candidates(node.workload, algorithms=["gemm"]):
            block = layout_block(candidate["out"])
            same_blocks = block is not None and layout_block(candidate["in"]) == block
            if candidate.get("algorithm") != "gemm" or not same_blocks:
                continue
            _, channels, out_h, out_w = conv2d_output_shape(node.workload)
            tiles = [gemm_register_tile(out_h, out_w, channels // block, block, target, partial_blocks=p)
                     for p in (False, True)]
            entry = {"workload": node.workload, "candidate": candidate, "tiles": tiles}
            if tiles[0] != tiles[1] and entry not in found:
                found.append(entry)
    return found


def time_tiles(layers: list[dict], rounds: int, target) -> list[dict]:
    from layoutopt.tvm.kernels import gemm, isa

    kernels = {}
    for index, layer in enumerate(layers):
        # the rule before version 9: the GEMM's call without partial_blocks
        with mock.patch.object(gemm, "gemm_register_tile", lambda *args, **_: isa.gemm_register_tile(*args)):
            kernels[index, "dividing"] = compiled_kernel(layer["workload"], layer["candidate"], target)
        kernels[index, "partial"] = compiled_kernel(layer["workload"], layer["candidate"], target)
        print(f"built {index + 1}/{len(layers)}", file=sys.stderr, flush=True)
    samples = cold_rounds(kernels, rounds)
    return [{**layer, "dividing": min(samples[index, "dividing"]), "partial": min(samples[index, "partial"])}
            for index, layer in enumerate(layers)]


def write_table(rows: list[dict], out: Path, stamp: str, loads: tuple[float, float], rounds: int) -> None:
    import numpy as np

    from layoutopt.tvm.kernels import describe_workload

    lines = [
        "# 1x1 GEMM tiles with a partial last tile of channel blocks (RegNet-Y-400MF)", "",
        f"*{stamp}*", "",
        produced_by("python -m benchmarks.gemm_tiles", rounds, loads)
        + " Every 1x1 GEMM layer and block whose tile changes when a block "
        "count that does not divide the output's is allowed (`partial_blocks`, schedule version 9); "
        "tiles as (rows, columns, blocks). Each kernel timed cold (weights and output flushed), its "
        "best round (a round: the median of 10 runs). Times in µs; above 1, the partial tile is faster.",
        "",
        "| layer | layouts | dividing tile | µs | partial tile | µs | GFLOP/s | dividing / partial |",
        "|---|---|---|---|---|---|---|---|",
    ]
    gains = []
    for row in rows:
        gains.append(row["dividing"] / row["partial"])
        gflops = flops(row["workload"]) * row["workload"]["kernel"][1] / row["partial"] / 1e9
        cells = [describe_workload(row["workload"]), f"{row['candidate']['in']}->{row['candidate']['out']}",
                 str(tuple(row["tiles"][0])), f"{row['dividing'] * 1e6:.1f}", str(tuple(row["tiles"][1])),
                 f"{row['partial'] * 1e6:.1f}", f"{gflops:.1f}", f"{gains[-1]:.2f}x"]
        lines.append("| " + " | ".join(cells) + " |")
    if gains:
        lines += ["", f"{len(rows)} kernels: the partial tile is {min(gains):.2f}-{max(gains):.2f}x the "
                  f"dividing one's speed (median {np.median(gains):.2f}x).", ""]
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
    path = export_torchvision(NETWORK, MODELS / f"{NETWORK}.onnx", python=args.python)
    layers = differing_layers(path, target)
    start = os.getloadavg()[0]
    rows = time_tiles(layers, args.rounds, target)
    write_table(rows, Path(args.out), stamp_line(), (start, os.getloadavg()[0]), args.rounds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

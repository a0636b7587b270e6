"""Conv2d algorithms side by side: the direct NCHWc kernel against Winograd and the 1x1 packed GEMM.

Per layer and target, every candidate of each kernel family (direct; Winograd F(2x2,3x3),
F(4x4,3x3), F(6x6,3x3); GEMM for 1x1 convs) over the block pairs of ``--blocks`` is built with the
layer's fused epilogue (bias, residual add, relu, as ``FuseOps`` fuses them in a build), checked
against numpy and timed once (screening); then the fastest candidate of each family is timed again
in ``--rounds`` interleaved rounds, and its numerical error measured on realistic data (post-ReLU
activations, He-initialised weights) against a float64 direct convolution.

Layers: every distinct 3x3 stride-1 conv of ResNet-50 (:func:`layoutopt.tvm.models.resnet`, with the
epilogues its build fuses) and of VGG-19 (bias + relu), and ResNet-50's 1x1 convs. Targets: the host
CPU and an AVX2 one (``znver3``; its code runs on an AVX-512 host too), 2 threads.

Writes ``benchmarks/results/algorithms.md`` and ``algorithms.csv`` (stamped with date, machine, ISA
and versions).

Usage::

    python -m benchmarks.algorithms                               # the run behind results/algorithms.md
    python -m benchmarks.algorithms --layers resnet3x3 --targets host --rounds 3
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("TVM_NUM_THREADS", "2")

import numpy as np  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"

#: VGG-19's 3x3 convs (all stride 1, padding 1, BN folded into a bias, then relu): (C, K, size, count)
VGG19_3X3 = [
    (3, 64, 224, 1), (64, 64, 224, 1), (64, 128, 112, 1), (128, 128, 112, 1), (128, 256, 56, 1),
    (256, 256, 56, 3), (256, 512, 28, 1), (512, 512, 28, 3), (512, 512, 14, 4),
]
#: the AVX2 target compiled for beside the host's (AMD Zen 3: 16 ymm registers of 8 floats)
AVX2_TARGET = {"kind": "llvm", "mcpu": "znver3"}
#: Winograd output tile sizes compared
TILES = (2, 4, 6)


def conv_workload(channels: int, out_channels: int, size: int, kernel: int = 3, stride: int = 1,
                  epilogue: Sequence[str] = ("bias", "relu")) -> dict[str, Any]:
    """A square conv2d workload (padding keeps the size at stride 1)."""
    pad = kernel // 2
    return {"op": "conv2d", "data": [1, channels, size, size], "kernel": [out_channels, channels, kernel, kernel],
            "strides": [stride, stride], "padding": [pad] * 4, "dilation": [1, 1], "groups": 1,
            "dtype": "float32", "epilogue": list(epilogue)}


def resnet50_layers(kernel_size: int) -> list[tuple[dict[str, Any], int]]:
    """ResNet-50's distinct conv2d workloads (with their fused epilogues) of a kernel size, with counts:
    3x3 stride-1 ones, or all 1x1 ones."""
    from layoutopt.tvm import extract_layout_graph, models

    counts: dict[str, int] = {}
    for node in extract_layout_graph(models.resnet(depth=50)).layout_nodes():
        workload = node.workload
        if workload.get("op") != "conv2d" or workload["kernel"][2] != kernel_size:
            continue
        if kernel_size == 3 and workload["strides"] != [1, 1]:
            continue
        key = json.dumps(workload, sort_keys=True)
        counts[key] = counts.get(key, 0) + 1
    return [(json.loads(key), count) for key, count in counts.items()]


def layer_sets() -> dict[str, Any]:
    return {
        "resnet3x3": lambda: resnet50_layers(3),
        "vgg3x3": lambda: [(conv_workload(c, k, s), n) for c, k, s, n in VGG19_3X3],
        "resnet1x1": lambda: resnet50_layers(1),
    }


def describe(workload: dict[str, Any]) -> str:
    n, c, h, w = workload["data"]
    k, _, kh, kw = workload["kernel"]
    stride = workload["strides"][0]
    epilogue = "+".join(workload.get("epilogue", [])) or "-"
    return f"{c}->{k} {kh}x{kw}{' s' + str(stride) if stride > 1 else ''} @{h}x{w} ({epilogue})"


# --------------------------------------------------------------------------------------------------
# kernels of every family, built with the workload's fused epilogue


def families(workload: dict[str, Any], blocks: Sequence[int]) -> dict[str, list[dict[str, Any]]]:
    """Candidates per compared variant: ``direct``, ``winograd F2`` ..., ``gemm``."""
    from layoutopt.tvm import kernels
    from layoutopt.tvm.kernels import gemm, winograd

    workload = kernels.validate_workload(workload)
    variants = {"direct": kernels.conv2d_candidates(workload, blocks=blocks, include_nchw=False)}
    if winograd.applies(workload):
        for tile in TILES:
            variants[f"winograd F{tile}"] = winograd.candidates(workload, blocks=blocks, tiles=[tile])
    if gemm.applies(workload):
        variants["gemm"] = gemm.candidates(workload, blocks=blocks, orders=gemm.ORDERS)
    return {name: cands for name, cands in variants.items() if cands}


def build(workload: dict[str, Any], candidate: dict[str, Any], target) -> tuple[Any, Any]:
    """``(executable, kernel)``: the compiled kernel of any family and its :class:`Kernel` record."""
    import tvm

    from layoutopt.tvm import kernels

    kernel = kernels.build_kernel(workload, candidate, target)
    return tvm.compile(kernel.module, target=target), kernel


def realistic_inputs(workload: dict[str, Any], seed: int = 1) -> list[np.ndarray]:
    """Post-ReLU activations, He-initialised weights, a small bias and a residual of the output's scale."""
    from layoutopt.tvm import kernels

    rng = np.random.default_rng(seed)
    o, c, kh, kw = workload["kernel"]
    data = np.maximum(rng.standard_normal(workload["data"]), 0).astype("float32")
    weight = (rng.standard_normal(workload["kernel"]) * math.sqrt(2.0 / (c * kh * kw))).astype("float32")
    extra = []
    for shape in kernels.epilogue_shapes(workload.get("epilogue", []), kernels.conv2d_output_shape(workload)):
        scale = 0.1 if shape[2:] == [1, 1] else 1.0
        extra.append((rng.standard_normal(shape) * scale).astype("float32"))
    return [data, weight, *extra]


class _CpuMeter:
    """Cores used by other processes while a block runs (from /proc/stat, minus this process)."""

    def __enter__(self):
        self.start = (self._busy(), time.process_time(), time.perf_counter())
        return self

    def __exit__(self, *exc):
        busy, own, now = self._busy(), time.process_time(), time.perf_counter()
        elapsed = max(now - self.start[2], 1e-9)
        self.others = max(0.0, (busy - self.start[0]) - (own - self.start[1])) / elapsed

    @staticmethod
    def _busy() -> float:
        try:
            with open("/proc/stat") as stat:
                fields = [int(v) for v in stat.readline().split()[1:]]
        except OSError:
            return 0.0
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
        return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def measure_layer(workload: dict[str, Any], target, blocks: Sequence[int], rounds: int,
                  log=print) -> list[dict[str, Any]]:
    """Screen every candidate of every variant, then time the best of each in interleaved rounds."""
    import tvm

    from layoutopt.tvm import kernels
    from layoutopt.tvm._tvm import one_blas_thread

    device = tvm.cpu()
    inputs = [np.random.default_rng(0).uniform(-1, 1, s).astype("float32")
              for s in kernels.conv2d.logical_shapes(kernels.validate_workload(workload))]
    reference = (inputs, kernels.reference_output(kernels.validate_workload(workload), inputs))
    realistic = realistic_inputs(workload)
    exact = kernels.reference_output(kernels.validate_workload(workload), realistic)
    best: dict[str, dict[str, Any]] = {}
    with one_blas_thread():
        for variant, cands in families(workload, blocks).items():
            for candidate in cands:
                started = time.perf_counter()
                executable, kernel = build(workload, candidate, target)
                built = time.perf_counter() - started
                args = kernel.device_args(inputs, device)
                kernels.check_kernel(kernel, executable, reference=reference, args=args)
                seconds = _time(executable, kernel, args, device, repeat=3, min_repeat_ms=10)
                if variant not in best or seconds < best[variant]["screen_ms"] / 1e3:
                    best[variant] = {"variant": variant, "candidate": candidate, "screen_ms": seconds * 1e3,
                                     "build_s": built, "executable": executable, "kernel": kernel, "args": args}
        times: dict[str, list[float]] = {v: [] for v in best}
        with _CpuMeter() as meter:
            for _ in range(rounds):
                for variant, entry in best.items():
                    times[variant].append(_time(entry["executable"], entry["kernel"], entry["args"], device,
                                                repeat=3, min_repeat_ms=20))
    rows = []
    for variant, entry in best.items():
        kernel = entry["kernel"]
        args = kernel.device_args(realistic, device)
        entry["executable"].mod[kernel.name](*args)
        actual = kernel.unpack_output(args[-1].numpy())
        error = float(np.max(np.abs(actual - exact)) / np.max(np.abs(exact)))
        rows.append({
            "variant": variant, "candidate": entry["candidate"], "best_ms": min(times[variant]) * 1e3,
            "median_ms": float(np.median(times[variant])) * 1e3, "build_s": entry["build_s"],
            "error": error, "others_cpu": meter.others,
        })
    direct = next(r for r in rows if r["variant"] == "direct")
    for row in rows:
        row["speedup"] = direct["best_ms"] / row["best_ms"]
        row["median_speedup"] = float(np.median([d / a for d, a in zip(times["direct"], times[row["variant"]],
                                                                        strict=True)]))
    log(f"  {describe(workload)}: " + ", ".join(f"{r['variant']} {r['best_ms']:.3f} ms x{r['speedup']:.2f}"
                                                  for r in rows) + f" (others {meter.others:.2f} cores)")
    return rows


def _time(executable, kernel, args, device, repeat: int, min_repeat_ms: int) -> float:
    timer = executable.mod.time_evaluator(kernel.name, device, number=0, repeat=repeat, min_repeat_ms=min_repeat_ms)
    return min(float(r) for r in timer(*args).results)


# --------------------------------------------------------------------------------------------------
# report


def write_outputs(results: list[dict[str, Any]], stamp: str, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    fields = ["set", "target", "isa", "layer", "count", "variant", "candidate", "best_ms", "median_ms", "speedup",
              "median_speedup", "error", "build_s", "others_cpu"]
    with open(out / "algorithms.csv", "w", newline="") as handle:
        handle.write(f"# {stamp}\n")
        writer = csv.DictWriter(handle, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        for row in results:
            writer.writerow({**row, "candidate": json.dumps(row["candidate"], sort_keys=True)})
    lines = ["# Conv2d algorithms: direct NCHWc vs Winograd vs 1x1 GEMM", "", f"*{stamp}*", "",
             "Command: `python -m benchmarks.algorithms` (see its docstring). Each cell: the best candidate's",
             "time in ms (min over interleaved rounds) and its speed-up over the best direct kernel of the same",
             "layer and target; the best block pair per family was found by a screening pass. `err`: max",
             "relative error (max |out - ref| / max |ref|) on realistic data against a float64 direct conv.",
             ""]
    for target_name in dict.fromkeys(r["target"] for r in results):
        isa = next(r["isa"] for r in results if r["target"] == target_name)
        for set_name in dict.fromkeys(r["set"] for r in results):
            rows = [r for r in results if r["target"] == target_name and r["set"] == set_name]
            if not rows:
                continue
            variants = list(dict.fromkeys(r["variant"] for r in rows))
            lines += [f"## {set_name}, target {target_name} ({isa})", "",
                      "| layer | count | " + " | ".join(variants) + " | best | others' cores |",
                      "|---|---|" + "---|" * len(variants) + "---|---|"]
            totals = {v: 0.0 for v in variants}
            best_total = 0.0
            for layer in dict.fromkeys(r["layer"] for r in rows):
                cells, by_variant = [], {r["variant"]: r for r in rows if r["layer"] == layer}
                count = next(iter(by_variant.values()))["count"]
                for variant in variants:
                    row = by_variant.get(variant)
                    if row is None:
                        cells.append("-")
                        continue
                    totals[variant] += row["best_ms"] * count
                    block = row["candidate"]
                    blocks = f"{block['in'][4:]}/{block['out'][4:]}"
                    cells.append(f"{row['best_ms']:.3f} (x{row['speedup']:.2f}, {blocks}, err {row['error']:.0e})")
                winner = min(by_variant.values(), key=lambda r: r["best_ms"])
                best_total += winner["best_ms"] * count
                others = max(r["others_cpu"] for r in by_variant.values())
                lines.append(f"| {layer} | {count} | " + " | ".join(cells) + f" | {winner['variant']} | {others:.2f} |")
            direct_total = totals.get("direct", float("nan"))
            lines.append("| **total x count** | | " + " | ".join(
                f"{totals[v]:.2f}" if all(v in {r['variant'] for r in rows if r['layer'] == layer}
                                          for layer in {r['layer'] for r in rows}) else "-"
                for v in variants) + f" | {best_total:.2f} (x{direct_total / best_total:.2f}) | |")
            lines.append("")
    (out / "algorithms.md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", default="resnet3x3,vgg3x3,resnet1x1", help=f"any of {sorted(layer_sets())}")
    parser.add_argument("--targets", default="host,avx2", help="host, avx2, or an llvm mcpu name")
    parser.add_argument("--blocks", default="16,32", help="channel blocks of the candidates (AVX-512 host)")
    parser.add_argument("--avx2-blocks", default="8,16", help="channel blocks of the candidates on AVX2 targets")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args(argv)
    from layoutopt.tvm._tvm import resolve_target
    from layoutopt.tvm.kernels import isa_name
    from layoutopt.machine import stamp_line

    results = []
    for target_name in args.targets.split(","):
        spec = None if target_name == "host" else AVX2_TARGET if target_name == "avx2" else \
            {"kind": "llvm", "mcpu": target_name}
        target = resolve_target(spec)
        mcpu = str(target.attrs.get("mcpu", ""))
        isa = isa_name(target)
        blocks = [int(b) for b in (args.blocks if isa == "AVX-512" else args.avx2_blocks).split(",")]
        for set_name in args.layers.split(","):
            print(f"{set_name} on {mcpu} ({isa}), blocks {blocks}", flush=True)
            for workload, count in layer_sets()[set_name]():
                for row in measure_layer(workload, target, blocks, args.rounds):
                    results.append({**row, "set": set_name, "target": mcpu, "isa": isa,
                                    "layer": describe(workload), "count": count})
    write_outputs(results, stamp_line(), Path(args.out))
    print((Path(args.out) / "algorithms.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

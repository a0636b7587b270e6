"""Conv2d algorithms side by side: the direct NCHWc kernel against Winograd and the 1x1 packed GEMM.

Per layer and target, every candidate of each kernel family over the block pairs of ``--blocks``
(direct; Winograd F(2x2,3x3), F(4x4,3x3), F(6x6,3x3), both schedule orders; GEMM for 1x1 convs,
both orders) is built with the layer's fused epilogue (bias, residual add, relu, as ``FuseOps``
fuses them in a build), checked against numpy and timed once (screening); then the fastest
candidate of each family is timed again in ``--rounds`` interleaved rounds, and its numerical error
measured on realistic data (post-ReLU activations, He-initialised weights) against a float64
direct convolution.

Layers: every distinct 3x3 stride-1 conv of ResNet-50 (:func:`layoutopt.tvm.frontend.models.resnet`, with the
epilogues its build fuses) and of VGG-19 (bias + relu), and ResNet-50's 1x1 convs. Targets: the host
CPU and an AVX2 one (``znver3``: its code runs on an AVX-512 host too).

Timing: 2 threads, wall clock (TVM's ``time_evaluator``); or, with ``--cpu-time``, one thread timed
by this process's CPU time, which the other processes of a shared machine do not inflate.

Writes ``benchmarks/results/algorithms.md`` and ``algorithms.csv`` (``algorithms_cputime.*`` with
``--cpu-time``), stamped with date, machine, ISA and versions.

Usage::

    python -m benchmarks.algorithms                   # the runs behind results/algorithms*.md
    python -m benchmarks.algorithms --cpu-time
    python -m benchmarks.algorithms --layers resnet3x3 --targets host --rounds 3
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

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
#: time kernels by this process's CPU time on one thread (``--cpu-time``) instead of wall clock
CPU_TIME = False


def vgg_workload(channels: int, out_channels: int, size: int) -> dict[str, Any]:
    """A VGG 3x3 conv (stride 1, padding 1) with its bias + relu epilogue."""
    return {"op": "conv2d", "data": [1, channels, size, size], "kernel": [out_channels, channels, 3, 3],
            "strides": [1, 1], "padding": [1, 1, 1, 1], "dilation": [1, 1], "groups": 1, "dtype": "float32",
            "epilogue": ["bias", "relu"]}


def resnet50_layers(kernel_size: int) -> list[tuple[dict[str, Any], int]]:
    """ResNet-50's distinct conv2d workloads (with their fused epilogues) and their counts: the 3x3
    stride-1 ones, or all 1x1 ones."""
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


#: layer set name -> its (workload, count) pairs
LAYER_SETS: dict[str, Callable[[], list[tuple[dict[str, Any], int]]]] = {
    "resnet3x3": lambda: resnet50_layers(3),
    "vgg3x3": lambda: [(vgg_workload(c, k, size), n) for c, k, size, n in VGG19_3X3],
    "resnet1x1": lambda: resnet50_layers(1),
}


def describe(workload: dict[str, Any]) -> str:
    """The workload's name with its fused epilogue: ``3x3 64->64 @56x56 (bias+relu)``."""
    from layoutopt.tvm.kernels import describe_workload

    return f"{describe_workload(workload)} ({'+'.join(workload.get('epilogue', [])) or '-'})"


# --------------------------------------------------------------------------------------------------
# measuring


def variants(workload: dict[str, Any], blocks: Sequence[int]) -> dict[str, list[dict[str, Any]]]:
    """The compared variants and their candidates: ``direct``, ``winograd F2`` ... ``F6``, ``gemm``."""
    from layoutopt.tvm import kernels
    from layoutopt.tvm.kernels import gemm, winograd

    workload = kernels.validate_workload(workload)
    found = {"direct": kernels.conv2d_candidates(workload, blocks=blocks, include_nchw=False)}
    if winograd.FAMILY.applies(workload):
        for tile in TILES:
            found[f"winograd F{tile}"] = winograd.FAMILY.candidates(workload, blocks=blocks, tiles=[tile])
    if gemm.FAMILY.applies(workload):
        found["gemm"] = gemm.FAMILY.candidates(workload, blocks=blocks, orders=gemm.ORDERS)
    return {name: cands for name, cands in found.items() if cands}


def realistic_inputs(workload: dict[str, Any], seed: int = 1) -> list[np.ndarray]:
    """Post-ReLU activations, He-initialised weights, a small bias and a residual of unit scale."""
    from layoutopt.tvm import kernels

    rng = np.random.default_rng(seed)
    _, channels, kh, kw = workload["kernel"]
    data = np.maximum(rng.standard_normal(workload["data"]), 0).astype("float32")
    scale = math.sqrt(2.0 / (channels * kh * kw))
    weight = (rng.standard_normal(workload["kernel"]) * scale).astype("float32")
    out = kernels.conv2d_output_shape(workload)
    extra = [(rng.standard_normal(shape) * (0.1 if shape[2:] == [1, 1] else 1.0)).astype("float32")
             for shape in kernels.epilogue_shapes(workload.get("epilogue", []), out)]
    return [data, weight, *extra]


class OtherProcesses:
    """Cores the other processes of the machine used while a block ran (``/proc/stat``'s busy time
    minus this process's CPU time)."""

    def __enter__(self) -> OtherProcesses:
        self.start = (self._busy(), time.process_time(), time.perf_counter())
        self.cores = 0.0
        return self

    def __exit__(self, *exc: object) -> None:
        busy, own, now = self._busy(), time.process_time(), time.perf_counter()
        self.cores = max(0.0, (busy - self.start[0]) - (own - self.start[1])) / max(now - self.start[2], 1e-9)

    @staticmethod
    def _busy() -> float:
        try:
            with open("/proc/stat") as stat:
                fields = [int(v) for v in stat.readline().split()[1:9]]
        except OSError:  # not Linux: reported as 0
            return 0.0
        return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def seconds_per_run(executable, name: str, args, repeat: int, min_repeat_ms: int) -> float:
    """The best of ``repeat`` repeats of at least ``min_repeat_ms`` each: wall clock (TVM's
    time_evaluator) or, with :data:`CPU_TIME`, this process's CPU time per run."""
    import tvm

    if not CPU_TIME:
        timer = executable.mod.time_evaluator(name, tvm.cpu(), number=0, repeat=repeat,
                                              min_repeat_ms=min_repeat_ms)
        return min(float(r) for r in timer(*args).results)
    run = executable.mod[name]
    run(*args)
    started = time.process_time()
    run(*args)
    calls = max(1, math.ceil(min_repeat_ms / 1e3 / max(time.process_time() - started, 1e-6)))
    best = math.inf
    for _ in range(repeat):
        started = time.process_time()
        for _ in range(calls):
            run(*args)
        best = min(best, (time.process_time() - started) / calls)
    return best


def measure_layer(workload: dict[str, Any], target, blocks: Sequence[int],
                  rounds: int) -> list[dict[str, Any]]:
    """Screen every candidate of every variant, then time the fastest of each in interleaved rounds
    and measure its error on realistic data; one row per variant."""
    import tvm

    from layoutopt.tvm import kernels, one_blas_thread

    workload = kernels.validate_workload(workload)
    rng = np.random.default_rng(0)
    shapes = kernels.conv2d.FAMILY.logical_shapes(workload)
    inputs = [rng.uniform(-1, 1, shape).astype("float32") for shape in shapes]
    reference = (inputs, kernels.reference_output(workload, inputs))
    best: dict[str, dict[str, Any]] = {}
    with one_blas_thread():
        for variant, cands in variants(workload, blocks).items():
            for candidate in cands:
                started = time.perf_counter()
                kernel = kernels.build_kernel(workload, candidate, target)
                executable = tvm.compile(kernel.module, target=target)
                built = time.perf_counter() - started
                args = kernel.device_args(inputs, tvm.cpu())
                kernels.check_kernel(kernel, executable, reference=reference, args=args)
                seconds = seconds_per_run(executable, kernel.name, args, repeat=3, min_repeat_ms=10)
                if variant not in best or seconds < best[variant]["screen"]:
                    best[variant] = {"candidate": candidate, "screen": seconds, "build_s": built,
                                     "executable": executable, "kernel": kernel, "args": args}
        times: dict[str, list[float]] = {variant: [] for variant in best}
        with OtherProcesses() as others:
            for _ in range(rounds):
                for variant, entry in best.items():
                    run = (entry["executable"], entry["kernel"].name, entry["args"])
                    times[variant].append(seconds_per_run(*run, repeat=3, min_repeat_ms=20))
    realistic = realistic_inputs(workload)
    exact = kernels.reference_output(workload, realistic)
    rows = []
    for variant, entry in best.items():
        kernel = entry["kernel"]
        args = kernel.device_args(realistic, tvm.cpu())
        entry["executable"].mod[kernel.name](*args)
        actual = kernel.unpack_output(args[-1].numpy())
        error = float(np.max(np.abs(actual - exact)) / np.max(np.abs(exact)))
        best_ms, median_ms = min(times[variant]) * 1e3, float(np.median(times[variant])) * 1e3
        rows.append({"variant": variant, "candidate": entry["candidate"], "best_ms": best_ms,
                     "median_ms": median_ms, "build_s": entry["build_s"], "error": error,
                     "others_cpu": others.cores})
    for row in rows:
        row["speedup"] = rows[0]["best_ms"] / row["best_ms"]  # rows[0] is the direct kernel's
        row["median_speedup"] = float(np.median([d / a for d, a in zip(times["direct"], times[row["variant"]],
                                                                        strict=True)]))
    print(f"  {describe(workload)}: " + ", ".join(f"{r['variant']} {r['best_ms']:.3f} ms x{r['speedup']:.2f}"
                                                  for r in rows) + f" (others {others.cores:.2f} cores)",
          flush=True)
    return rows


def network_errors(depth: int = 50, tiles: Sequence[int] = TILES, target=None) -> list[dict[str, Any]]:
    """Whole-network error of each algorithm: ResNet-``depth`` (:func:`layoutopt.tvm.frontend.models.resnet`,
    He-initialised) built with every 3x3 stride-1 conv as Winograd F(m x m) (and every 1x1 conv as a
    GEMM; the rest direct NCHW16c), against TVM's default build of the untouched model, as
    :func:`layoutopt.tvm.tune_and_build` checks a build (max |out - ref| / max |ref|, seeded input)."""
    from layoutopt.tvm import apply_layouts, build, extract_layout_graph, models
    from layoutopt.tvm.evaluate.check import relative_error
    from layoutopt.tvm.evaluate.timing import random_inputs, run
    from layoutopt.tvm.kernels import gemm, winograd

    mod = models.resnet(depth=depth)
    inputs = random_inputs(mod)
    reference = run(build(mod, target), inputs)
    convs = [node for node in extract_layout_graph(mod).layout_nodes() if node.workload.get("op") == "conv2d"]

    def choice(workload: dict[str, Any], algorithm: str, tile: int) -> dict[str, Any]:
        blocks = {"in": "NCHW3c" if workload["data"][1] == 3 else "NCHW16c", "out": "NCHW16c"}
        if algorithm == "winograd" and winograd.FAMILY.applies(workload):
            return {**blocks, "algorithm": "winograd", "tile": tile}
        if algorithm != "direct" and gemm.FAMILY.applies(workload):
            return {**blocks, "algorithm": "gemm"}
        return blocks

    rows = []
    for algorithm, tile in [("direct", 0), ("gemm", 0), *(("winograd", t) for t in tiles)]:
        choices = {node.binding: choice(node.workload, algorithm, tile) for node in convs}
        error = relative_error(run(build(apply_layouts(mod, choices), target), inputs), reference)
        name = f"winograd F{tile} (+ gemm 1x1)" if algorithm == "winograd" else algorithm
        count = sum("algorithm" in c and c["algorithm"] != "gemm" for c in choices.values())
        rows.append({"variant": name, "winograd_convs": count, "error": error})
        print(f"  ResNet-{depth}, {name}: max relative error {error:.2e}", flush=True)
    return rows


# --------------------------------------------------------------------------------------------------
# report


def _blocks(candidate: dict[str, Any]) -> str:
    """``16/32`` (in/out blocks), with the schedule order when not the default: ``16/32 tiles``."""
    order = f" {candidate['order']}" if "order" in candidate else ""
    return f"{candidate['in'][4:-1]}/{candidate['out'][4:-1]}{order}"


def _cell(row: dict[str, Any]) -> str:
    return f"{row['best_ms']:.3f} x{row['speedup']:.2f} {_blocks(row['candidate'])}"


def _table(rows: list[dict[str, Any]]) -> list[str]:
    """Markdown tables of one target and layer set: times and speed-ups, then errors."""
    names = list(dict.fromkeys(r["variant"] for r in rows))
    layers = list(dict.fromkeys(r["layer"] for r in rows))
    by = {(r["layer"], r["variant"]): r for r in rows}
    lines = ["| layer | count | " + " | ".join(names) + " | fastest | others' cores |",
             "|---|---|" + "---|" * len(names) + "---|---|"]
    for layer in layers:
        present = [by[layer, v] for v in names if (layer, v) in by]
        cells = [_cell(by[layer, v]) if (layer, v) in by else "-" for v in names]
        fastest = min(present, key=lambda r: r["best_ms"])
        lines.append(f"| {layer} | {present[0]['count']} | " + " | ".join(cells)
                     + f" | {fastest['variant']} | {max(r['others_cpu'] for r in present):.2f} |")

    def total(variant: str) -> str:
        if not all((layer, variant) in by for layer in layers):
            return "-"
        return f"{sum(by[layer, variant]['best_ms'] * by[layer, variant]['count'] for layer in layers):.2f}"

    fastest_total = sum(min(by[layer, v]["best_ms"] for v in names if (layer, v) in by)
                        * by[layer, "direct"]["count"] for layer in layers)
    direct_total = float(total("direct"))
    lines += ["| **total** | | " + " | ".join(total(v) for v in names)
              + f" | {fastest_total:.2f} (x{direct_total / fastest_total:.2f}) | |", "",
              "| error | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for layer in layers:
        lines.append(f"| {layer} | " + " | ".join(f"{by[layer, v]['error']:.1e}" if (layer, v) in by else "-"
                                                  for v in names) + " |")
    return [*lines, ""]


def write_outputs(results: list[dict[str, Any]], stamp: str, out: Path, name: str, timing: str) -> None:
    """``<name>.csv`` (every row) and ``<name>.md`` (per target and layer set: times, speed-ups,
    winning blocks, the count-weighted total of each variant, numerical errors)."""
    out.mkdir(parents=True, exist_ok=True)
    fields = ["set", "target", "isa", "layer", "count", "variant", "candidate", "best_ms", "median_ms",
              "speedup", "median_speedup", "error", "build_s", "others_cpu"]
    with open(out / f"{name}.csv", "w", newline="") as handle:
        handle.write(f"# {stamp}; {timing}\n")
        writer = csv.DictWriter(handle, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        for row in results:
            writer.writerow({**row, "candidate": json.dumps(row["candidate"], sort_keys=True)})
    lines = [
        "# Conv2d algorithms: direct NCHWc vs Winograd vs 1x1 GEMM", "", f"*{stamp}*", "",
        f"Timing: {timing}. Command: `python -m benchmarks.algorithms` (see its docstring).", "",
        "Each cell: the family's fastest candidate in ms (the best of the interleaved rounds), its speed-up",
        "over the fastest direct kernel of the same layer and target, and its blocks (in/out, the schedule",
        "order when not the default). `total`: the sum of time x count over the layers (their share of one",
        "inference). `error`: max |out - ref| / max |ref| against a float64 direct conv, on post-ReLU",
        "activations and He-initialised weights. `others' cores`: the cores other processes used during",
        "the rounds; on a shared 2-core machine they inflate wall-clock times (the `--cpu-time` report,",
        "one thread timed by its own CPU time, is robust to them).", "",
    ]
    for target in dict.fromkeys(r["target"] for r in results):
        for layer_set in dict.fromkeys(r["set"] for r in results):
            rows = [r for r in results if r["target"] == target and r["set"] == layer_set]
            if rows:
                lines += [f"## {layer_set}, target {target} ({rows[0]['isa']})", "", *_table(rows)]
    (out / f"{name}.md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    global CPU_TIME
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", default="resnet3x3,vgg3x3,resnet1x1", help=f"any of {sorted(LAYER_SETS)}")
    parser.add_argument("--targets", default="host,avx2", help="host, avx2, or an llvm mcpu name")
    parser.add_argument("--blocks", default="16,32", help="the candidates' channel blocks on AVX-512 targets")
    parser.add_argument("--avx2-blocks", default="8,16", help="the candidates' channel blocks elsewhere")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument("--cpu-time", action="store_true",
                        help="one thread, timed by this process's CPU time (writes algorithms_cputime.*)")
    parser.add_argument("--network-error", action="store_true",
                        help="only each algorithm's whole-network error on ResNet-50 (algorithms_error.md)")
    args = parser.parse_args(argv)
    CPU_TIME = args.cpu_time
    os.environ["TVM_NUM_THREADS"] = "1" if args.cpu_time else "2"  # before TVM starts its thread pool
    from layoutopt.machine import stamp_line
    from layoutopt.tvm import resolve_target
    from layoutopt.tvm.kernels import isa_name

    if args.network_error:
        rows = network_errors()
        lines = [
            "# Whole-network error of each conv2d algorithm", "", f"*{stamp_line()}*", "",
            "ResNet-50 (`layoutopt.tvm.models.resnet`, He-initialised, BN folded into biases) built with",
            "every 3x3 stride-1 conv as the variant's kernel (1x1 convs as GEMMs beside Winograd), against",
            "TVM's default build of the untouched model: max |out - ref| / max |ref| on the logits, seeded",
            "input, as a tuned build is checked (tolerance 1e-4). Command: `python -m benchmarks.algorithms",
            "--network-error`.", "", "| build | Winograd convs | max relative error |", "|---|---|---|",
            *(f"| {r['variant']} | {r['winograd_convs']} | {r['error']:.2e} |" for r in rows),
        ]
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "algorithms_error.md").write_text("\n".join(lines) + "\n")
        print("\n".join(lines))
        return 0
    results = []
    for target_name in args.targets.split(","):
        spec = {"host": None, "avx2": AVX2_TARGET}.get(target_name, {"kind": "llvm", "mcpu": target_name})
        target = resolve_target(spec)
        mcpu, isa = str(target.attrs.get("mcpu", "")), isa_name(target)
        blocks = [int(b) for b in (args.blocks if isa == "AVX-512" else args.avx2_blocks).split(",")]
        for layer_set in args.layers.split(","):
            print(f"{layer_set} on {mcpu} ({isa}), blocks {blocks}", flush=True)
            for workload, count in LAYER_SETS[layer_set]():
                for row in measure_layer(workload, target, blocks, args.rounds):
                    results.append({**row, "set": layer_set, "target": mcpu, "isa": isa,
                                    "layer": describe(workload), "count": count})
    name = "algorithms_cputime" if args.cpu_time else "algorithms"
    timing = ("one thread, this process's CPU time" if args.cpu_time else "2 threads, wall clock") + \
        f", best of 3 repeats of >= 20 ms per round, {args.rounds} interleaved rounds"
    write_outputs(results, stamp_line(), Path(args.out), name, timing)
    print((Path(args.out) / f"{name}.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

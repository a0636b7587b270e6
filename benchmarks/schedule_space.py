"""How much each kernel family's schedule space holds over its heuristic, per layer of ResNet-50 and
MobileNetV2.

For every unique conv2d and dense workload of the networks (torch exports, ``benchmarks/networks.py``,
extracted with the epilogues a build fuses into them), the kernels b* and the tuned builds run on the
target: the fixed layout's kernel (NCHW16c on AVX-512, NCHW8c on AVX2, as
``layoutopt.tvm.building.baselines.fixed_layout_assignment`` picks it; depthwise convs by their own family),
the 1x1 GEMM and Winograd (F(2x2) and F(4x4)) kernels in the same layouts where they apply, and the
dense layer with its weight packed in vectors of the target's width. For each kernel:

1. **sweep**: every point of its schedule space (``KernelFamily.space``), or a seeded sample of at
   most ``--sample`` of them (the heuristic's point first), measured as the measurer measures a
   tune's kernels (``layoutopt.tvm.Measurer``: compiled in worker processes, checked against numpy,
   timed cold and alone; ``--passes`` passes), into a cost cache (a rerun measures only what it lacks);
2. **re-timing**: the ``--finalists`` fastest points of the sweep and the heuristic's, of every
   kernel of a workload, timed side by side in ``--rounds`` interleaved rounds (each kernel cold as
   the measurer times it: ``LocalRunner``, the median of 10 runs a round), so that the winner of a
   noisy sweep is not taken on its word. A kernel's best is its fastest in the rounds (the heuristic's
   point when no finalist beats it), its speed-up the median of the per-round ratios.

Per network, the kernels' times summed with each workload weighted by how often the network runs it:
b*'s kernels with their heuristic schedules against their best points, and the fastest algorithm per
layer, heuristic against searched (what a perfect search could gain end to end on the kernels; the
layout transforms and other ops are not counted). Then which knob values the best points take, per
family, for a search to sample. Writes ``benchmarks/results/schedule_space.md``, ``.csv`` (a row per
kernel) and ``.points.csv`` (every point swept, with its time).

Usage::

    python -m benchmarks.schedule_space --python .venv-bench/bin/python     # torch exports the networks
    python -m benchmarks.schedule_space --mcpu znver3 --out benchmarks/results/avx2/schedule_space.md
    python -m benchmarks.schedule_space --full                               # every point: hours
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("TVM_NUM_THREADS", "2")

from benchmarks.kernel_timing import cold_rounds, compiled_kernel
from benchmarks.networks import MODELS, export_onnx, export_torchvision
from benchmarks.roofline import fma_peak_gflops, workload_flops

RESULTS = Path(__file__).resolve().parent / "results"
#: the networks and how to export them: the seed network's recipe, or a torchvision constructor
NETWORKS = {"resnet50_v1": None, "mobilenet_v2": "mobilenet_v2"}
#: algorithms searched beside the fixed layout's own kernel, in its layouts, where they apply
ALGORITHMS = ("gemm", "winograd")
#: points per kernel at which a random search's gain is read off the sweep (:func:`budget_curve`)
BUDGETS = (2, 4, 8, 16, 32, 64)


@dataclass
class Kernel:
    """One (workload, base candidate) of the networks, its space, its sweep and its re-timing."""

    workload: dict[str, Any]
    base: dict[str, Any]
    fixed: bool  # the kernel b* runs (the fixed layout's, heuristic schedule)
    counts: Counter = field(default_factory=Counter)  # network -> how many of its nodes run it
    today: list[dict[str, Any]] = field(default_factory=list)  # its candidates today (Winograd: 2 orders)
    space: Any = None
    swept: list[tuple[dict[str, Any], float]] = field(default_factory=list)  # (point, seconds) of the sweep
    default: float = float("nan")  # seconds of the fastest of today's candidates in the rounds
    best: float = float("nan")  # of the best point in the rounds
    best_point: dict[str, Any] | None = None
    speedup: float = float("nan")  # median of the per-round ratios heuristic / best
    load: float = float("nan")  # the 1-minute load average when its rounds began

    @property
    def today_points(self) -> list[dict[str, Any]]:
        """The points of the candidates offered today (the heuristic's schedule; Winograd's two orders)."""
        return [self.space.point(candidate) for candidate in self.today]

    @property
    def algorithm(self) -> str:
        return self.base.get("algorithm", "direct") if self.workload["op"] == "conv2d" else "dense"

    @property
    def kind(self) -> str:
        """The kernel as a table names it: algorithm, layouts, Winograd's tile, a dense weight layout."""
        if self.workload["op"] == "dense":
            return f"dense {self.base['weight']}"
        tile = f" F{self.base['tile']}" if "tile" in self.base else ""
        return f"{self.algorithm}{tile} {self.base['in']}->{self.base['out']}"


def network_graph(network: str, python: str):
    from layoutopt.tvm import extract_layout_graph, load_model

    if NETWORKS[network] is None:
        path = export_onnx(network, python=python)
    else:
        path = export_torchvision(NETWORKS[network], MODELS / f"{network}.onnx", python=python)
    return extract_layout_graph(load_model(path, [1, 3, 224, 224]))


def network_kernels(networks: list[str], target, python: str) -> list[Kernel]:
    """The unique (workload, base candidate) kernels of the networks' conv2d and dense layers: b*'s, and
    the other algorithms' in the same layouts, each with how often each network runs it."""
    from layoutopt.tvm.building.baselines import fixed_layout_assignment
    from layoutopt.tvm.kernels import vector_registers

    lanes, _ = vector_registers(target)
    found: dict[str, Kernel] = {}
    for network in networks:
        graph = network_graph(network, python)
        fixed = fixed_layout_assignment(graph, f"NCHW{lanes}c")
        for node in graph.layout_nodes():
            workload = node.workload or {}
            if workload.get("op") == "conv2d":
                chosen = _without_order(node.candidates[fixed[node.name]])
                layouts = (chosen["in"], chosen["out"])
                today = [c for c in node.candidates if (c["in"], c["out"]) == layouts
                         and (_without_order(c) == chosen or c.get("algorithm") in ALGORITHMS)]
            elif workload.get("op") == "dense":
                chosen, today = None, [c for c in node.candidates if c.get("weight") == f"NK{lanes}n"]
            else:
                continue
            counted = set()
            for candidate in today:  # a base candidate per kernel, and its candidates of other orders
                base = _without_order(candidate)
                key = json.dumps([workload, base], sort_keys=True)
                kernel = found.setdefault(key, Kernel(workload, base, base == chosen))
                if candidate not in kernel.today:
                    kernel.today.append(dict(candidate))
                if key not in counted:
                    kernel.counts[network] += 1
                    counted.add(key)
    return list(found.values())


def _without_order(candidate: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in candidate.items() if key != "order"}


def sweep(kernels: list[Kernel], target, args) -> None:
    """Measure each kernel's points (all, or a seeded sample) with the measurer, into ``args.cache``."""
    from layoutopt.tvm import Measurer
    from layoutopt.tvm.kernels import family

    tasks, owners = [], []
    for kernel in kernels:
        kernel.space = family(kernel.workload, kernel.base).space(kernel.workload, kernel.base, target)
        points = kernel.space.points() if args.full else kernel.space.sample(args.sample, seed=args.seed)
        points += [point for point in kernel.today_points if point not in points]
        for point in points:
            tasks.append((kernel.workload, kernel.space.candidate(kernel.base, point)))
            owners.append((kernel, point))
    print(f"sweeping {len(tasks)} points of {len(kernels)} kernels", file=sys.stderr, flush=True)
    with Measurer(target=target, cache=args.cache, passes=args.passes, progress=True) as measurer:
        results = measurer.measure(tasks, desc="sweeping schedule spaces")
    for (kernel, point), result in zip(owners, results, strict=True):
        kernel.swept.append((point, result.cost))


def retime(kernels: list[Kernel], target, args) -> None:
    """Per workload, today's candidates of each of its kernels (the heuristic's point; Winograd's in
    both orders) and the sweep's ``args.finalists`` fastest other points, timed in interleaved rounds;
    each kernel's heuristic (the fastest of today's candidates), best and speed-up."""
    by_workload: dict[str, list[Kernel]] = defaultdict(list)
    for kernel in kernels:
        by_workload[json.dumps(kernel.workload, sort_keys=True)].append(kernel)
    for index, group in enumerate(by_workload.values()):
        compiled, points = {}, {}
        for k, kernel in enumerate(group):
            today = kernel.today_points
            ranked = sorted((cost, i) for i, (point, cost) in enumerate(kernel.swept)
                            if point not in today and cost < float("inf"))
            for j, point in enumerate(today + [kernel.swept[i][0] for _, i in ranked[: args.finalists]]):
                points[k, j] = point
                compiled[k, j] = compiled_kernel(kernel.workload, kernel.space.candidate(kernel.base, point),
                                                 target)
        load = os.getloadavg()[0]
        samples = cold_rounds(compiled, args.rounds)
        for k, kernel in enumerate(group):
            mine = {j: samples[k, j] for (kk, j) in samples if kk == k}
            heuristic = min(range(len(kernel.today)), key=lambda j: statistics.median(mine[j]))
            best = min(mine, key=lambda j: statistics.median(mine[j]))
            kernel.default, kernel.best = (statistics.median(mine[j]) for j in (heuristic, best))
            kernel.best_point, kernel.load = points[k, best], load
            ratios = [h / b for h, b in zip(mine[heuristic], mine[best], strict=True)]
            kernel.speedup = statistics.median(ratios)
        done = ", ".join(f"{kernel.kind} {kernel.speedup:.2f}x" for kernel in group)
        print(f"re-timed workload {index + 1}/{len(by_workload)} (load {load:.1f}): {done}",
              file=sys.stderr, flush=True)


def changed(kernel: Kernel) -> str:
    """The best point's knobs that differ from the heuristic's (``default``: none)."""
    if kernel.best_point is None:
        return "-"
    default = kernel.space.default()
    differing = {k: v for k, v in kernel.best_point.items() if v != default[k]}
    text = ", ".join(f"{k}={v}" for k, v in differing.items()) or "default"
    return text + (" (today's)" if differing and kernel.best_point in kernel.today_points else "")


def layer_name(workload: dict[str, Any]) -> str:
    from layoutopt.tvm.kernels import describe_workload
    from layoutopt.tvm.kernels.epilogue import step_name

    steps = [step_name(step) for step in workload.get("epilogue", [])]
    return describe_workload(workload) + (f" +{'+'.join(steps)}" if steps else "")


def network_table(network: str, kernels: list[Kernel], peak: float) -> list[str]:
    lines = [f"### {network}", "",
             "| layer | runs | kernel | space | swept | heuristic µs | GFLOP/s | best point | best µs "
             "| heuristic / best | best % of peak | load |", "|---" * 12 + "|"]
    for kernel in kernels:
        if not kernel.counts[network]:
            continue
        flops = workload_flops(kernel.workload)
        best_gflops = flops / kernel.best / 1e9
        mark = " (b*)" if kernel.fixed else ""
        lines.append(f"| {layer_name(kernel.workload)} | {kernel.counts[network]} | {kernel.kind}{mark} "
                     f"| {kernel.space.size} | {len(kernel.swept)} | {kernel.default * 1e6:.1f} "
                     f"| {flops / kernel.default / 1e9:.1f} | {changed(kernel)} | {kernel.best * 1e6:.1f} "
                     f"| {kernel.speedup:.2f}x | {100 * best_gflops / peak:.0f}% | {kernel.load:.1f} |")
    return [*lines, ""]


def network_sums(network: str, kernels: list[Kernel]) -> str:
    """One row: b*'s kernels summed (heuristic, best), and the fastest kernel per layer summed."""
    mine = [k for k in kernels if k.counts[network]]
    fixed = [k for k in mine if k.fixed]
    fixed_heuristic = sum(k.counts[network] * k.default for k in fixed)
    fixed_best = sum(k.counts[network] * k.best for k in fixed)
    per_layer: dict[str, list[Kernel]] = defaultdict(list)
    for kernel in mine:
        per_layer[json.dumps(kernel.workload, sort_keys=True)].append(kernel)
    heuristic = sum(min(k.default for k in group) * group[0].counts[network] for group in per_layer.values())
    best = sum(min(k.best for k in group) * group[0].counts[network] for group in per_layer.values())
    return (f"| {network} | {len(mine)} | {fixed_heuristic * 1e3:.2f} | {fixed_best * 1e3:.2f} "
            f"| {fixed_heuristic / fixed_best:.3f}x | {heuristic * 1e3:.2f} | {best * 1e3:.2f} "
            f"| {heuristic / best:.3f}x |")


def winners(kernels: list[Kernel], threshold: float) -> list[str]:
    """Per family: how many kernels the search speeds up by ``threshold`` or more, and which knob values
    their best points take (against the heuristic's)."""
    lines = [f"| family | kernels | faster by {100 * (threshold - 1):.0f}% or more | median / max speed-up "
             "| knob values of those best points (the heuristic's in brackets: how often) "
             "| rank of the best in the sweep (median) |",
             "|---|---|---|---|---|---|"]
    for algorithm in dict.fromkeys(k.algorithm for k in kernels):
        mine = [k for k in kernels if k.algorithm == algorithm]
        faster = [k for k in mine if k.speedup >= threshold]
        values: dict[str, Counter] = defaultdict(Counter)
        defaults: dict[str, Counter] = defaultdict(Counter)
        for kernel in faster:
            for knob, value in kernel.best_point.items():
                values[knob][value] += 1
                defaults[knob][kernel.space.default()[knob]] += 1
        knobs = "; ".join(
            f"{knob}: " + ", ".join(f"{v} x{n}" for v, n in values[knob].most_common())
            + " [" + ", ".join(f"{v} x{n}" for v, n in defaults[knob].most_common()) + "]"
            for knob in values) or "-"
        ranks = [1 + sorted(c for _, c in k.swept).index(next(c for p, c in k.swept if p == k.best_point))
                 for k in faster if any(p == k.best_point for p, _ in k.swept)]
        speedups = [k.speedup for k in mine]
        lines.append(f"| {algorithm} | {len(mine)} | {len(faster)} | {statistics.median(speedups):.2f}x / "
                     f"{max(speedups):.2f}x | {knobs} | {statistics.median(ranks) if ranks else '-'} |")
    return [*lines, ""]


def budget_curve(kernels: list[Kernel], budgets: tuple[int, ...]) -> list[str]:
    """Per family: what a random search of ``n`` points per kernel keeps of the re-timed gains. The
    sample is drawn in a random order, the heuristic's point first, so its first ``n`` points are a
    sample of ``n``: a kernel keeps its speed-up where its best point is among them, else counts 1.00
    (a lower bound: another of the ``n`` may beat the heuristic too). Geometric mean over the kernels."""
    largest = max(len(k.swept) for k in kernels)
    shown = [n for n in budgets if n < largest] + [largest]
    lines = ["| family | kernels | " + " | ".join(f"{n} points" for n in shown) + " |",
             "|---|---|" + "---|" * len(shown)]
    for algorithm in dict.fromkeys(k.algorithm for k in kernels):
        mine = [k for k in kernels if k.algorithm == algorithm]
        found = [next(i for i, (point, _) in enumerate(k.swept) if point == k.best_point) for k in mine]
        cells = []
        for n in shown:
            kept = [max(1.0, k.speedup) if at < n else 1.0 for k, at in zip(mine, found, strict=True)]
            cells.append(f"{statistics.geometric_mean(kept):.3f}x")
        lines.append(f"| {algorithm} | {len(mine)} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def write_csv(kernels: list[Kernel], path: Path, peak: float) -> None:
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["layer", "kernel", "b*", "runs", "space", "swept", "heuristic_s", "best_s",
                         "speedup", "best_point", "best_gflops", "best_peak_share", "load", "workload",
                         "base_candidate"])
        for kernel in kernels:
            flops = workload_flops(kernel.workload)
            writer.writerow([layer_name(kernel.workload), kernel.kind, int(kernel.fixed),
                             json.dumps(dict(kernel.counts)), kernel.space.size, len(kernel.swept),
                             f"{kernel.default:.4g}", f"{kernel.best:.4g}", f"{kernel.speedup:.4f}",
                             json.dumps(kernel.best_point), f"{flops / kernel.best / 1e9:.2f}",
                             f"{flops / kernel.best / 1e9 / peak:.3f}", f"{kernel.load:.2f}",
                             json.dumps(kernel.workload),
                             json.dumps(kernel.base)])
    with open(path.with_suffix(".points.csv"), "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["layer", "kernel", "point", "is_default", "seconds"])
        for kernel in kernels:
            for point, cost in kernel.swept:
                writer.writerow([layer_name(kernel.workload), kernel.kind, json.dumps(point),
                                 int(point == kernel.space.default()), f"{cost:.4g}"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default=sys.executable, help="an interpreter with torch, to export")
    parser.add_argument("--networks", default=",".join(NETWORKS))
    parser.add_argument("--mcpu", default=None, help="the llvm CPU to compile for (default: this host's)")
    parser.add_argument("--sample", type=int, default=32,
                        help="points swept per kernel, the heuristic's first")
    parser.add_argument("--full", action="store_true", help="sweep every point of every space")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--passes", type=int, default=2, help="the sweep's timing passes per point")
    parser.add_argument("--finalists", type=int, default=3, help="sweep winners re-timed per kernel")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--peak", type=float, default=None,
                        help="the FMA peak (GFLOP/s) to take for the share of peak instead of the highest "
                        "measured (on a busy machine, e.g. benchmarks/results/roofline.md's of a quiet one)")
    parser.add_argument("--threshold", type=float, default=1.03, help="a speed-up that counts as a win")
    parser.add_argument("--cache", default=None,
                        help="cost cache (default: the tune's, under XDG_CACHE_HOME)")
    parser.add_argument("--note", action="append", default=[], help="a line for the header (repeatable)")
    parser.add_argument("--out", default=str(RESULTS / "schedule_space.md"))
    args = parser.parse_args(argv)

    from layoutopt.machine import stamp_line
    from layoutopt.tvm import resolve_target
    from layoutopt.tvm.cli import default_cache_path
    from layoutopt.tvm.kernels import isa_name, vector_registers

    started, start_load = time.monotonic(), os.getloadavg()[0]
    args.cache = args.cache or str(default_cache_path())
    target = resolve_target({"kind": "llvm", "mcpu": args.mcpu} if args.mcpu else None)
    isa, (lanes, registers) = isa_name(target), vector_registers(target)
    networks = args.networks.split(",")
    kernels = network_kernels(networks, target, args.python)
    # the FMA peak on one thread, times the threads (on a shared machine two threads rarely get two
    # cores at once), before the sweep, between it and the rounds, and after them: the highest counts
    threads = int(os.environ["TVM_NUM_THREADS"])
    peaks = [threads * fma_peak_gflops(1, isa=isa)]
    sweep(kernels, target, args)
    peaks.append(threads * fma_peak_gflops(1, isa=isa))
    retime(kernels, target, args)
    peaks.append(threads * fma_peak_gflops(1, isa=isa))
    peak = args.peak or max(peaks)
    minutes, end_load = (time.monotonic() - started) / 60, os.getloadavg()[0]
    sampled = ("every point" if args.full
               else f"a seeded sample of at most {args.sample} points (seed {args.seed})")
    command = " ".join(["python -m benchmarks.schedule_space", *(sys.argv[1:] if argv is None else argv)])
    lines = [
        "# Schedule spaces: what each kernel's space holds over its heuristic", "",
        f"*{stamp_line()}*", "",
        f"Produced by `{command}` in {minutes:.0f} min; target llvm mcpu {target.attrs['mcpu']} ({isa}: "
        f"{registers} registers of {lanes} floats); load average {start_load:.1f} at the start, "
        f"{end_load:.1f} at the end. FMA peak on {threads} threads (`benchmarks/roofline.py`'s, one thread's "
        f"times {threads}) measured before, between and after: {min(peaks):.1f}-{max(peaks):.1f} GFLOP/s; "
        f"the share of peak is of {peak:.1f} GFLOP/s ({'--peak' if args.peak else 'the highest'}).",
        *args.note, "",
        f"Sweep: {sampled} per kernel, measured cold by the measurer ({args.passes} pass(es)); then the "
        f"heuristic's point and the sweep's {args.finalists} fastest others of every kernel of a workload "
        f"re-timed cold in {args.rounds} interleaved rounds: *heuristic / best* is the median of the "
        "per-round ratios, 1.00x where no point beat the heuristic's (its best point is then `default`). "
        "Times are the rounds' medians; GFLOP/s counts the layer's multiply-adds twice (a direct conv's: "
        "Winograd does 2.25x (F2) to 4x (F4) fewer, so its share of peak may pass 100%). *heuristic*: the "
        "fastest of the kernel's candidates today (the heuristic's schedule; Winograd's in both of its "
        "orders, which are candidates already); *load*: the 1-minute load average as its rounds began. "
        "(b*) marks the kernel b* runs.",
        "",
        "## Per network: the kernels summed, each workload as often as the network runs it", "",
        "| network | kernels | b*'s kernels, heuristic ms | searched ms | gain | fastest kernel per layer, "
        "heuristic ms | searched ms | gain |", "|---|---|---|---|---|---|---|---|",
        *(network_sums(network, kernels) for network in networks), "",
        "b*'s kernels: the fixed layout's, as b* runs them. Fastest kernel per layer: the fastest of the "
        "layer's kernels in these layouts (direct or depthwise, GEMM, Winograd; the dense layer packed), "
        "heuristic schedules against searched ones (times of different kernels of a layer come from the same "
        "rounds). "
        "Layout transforms and the other ops are not counted.", "",
        "## Which knob values win", "",
        *winners(kernels, args.threshold),
        "## What a random search of n points per kernel keeps of the gains (re-timed speed-ups)", "",
        *budget_curve(kernels, BUDGETS),
        "## Per layer", "",
    ]
    for network in networks:
        lines += network_table(network, kernels, peak)
    out = Path(args.out)
    out.write_text("\n".join(lines) + "\n")
    write_csv(kernels, out.with_suffix(".csv"), peak)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""How long it takes to measure ResNet-50's layout problem, from an empty cost cache and from a full one.

Builds ResNet-50 in Relax with seeded random weights (:func:`layoutopt.tvm.frontend.models.resnet`, the real
shapes: 1x3x224x224, 53 conv2d; no download, no torch), then:

1. extracts the layout graph and counts nodes, edges, choices and distinct measurements;
2. with ``--compare-with REV``, measures it from an empty cache with layoutopt as it was at git
   revision REV (``git archive``, run in a subprocess), for a before/after figure on one machine;
3. measures the extracted graph (:func:`layoutopt.tvm.measure.problem.measure_graph`) with an empty cache
   (every kernel candidate and every layout transform is built, checked against numpy and timed) -
   target <= 10 minutes on 2 cores;
4. runs :func:`layoutopt.tvm.build_problem` (extraction and measurement) with the now full cache, in
   this process and in a fresh one (a real "second run", including ``import tvm``) - target <= 10 s;
5. times each step of measuring one kernel (schedule, compile, machine code, export, reference,
   check, one timing pass) on a seeded sample of the kernels: where the time goes;
6. times a sample of kernels from an exported library (as the timing worker now loads them) and
   from TVM's in-memory JIT module (as the old worker ran them), interleaved: the same code?
7. solves the problem and compares the optimum with uniform NCHW16c, as a sanity check of the costs.

Writes ``benchmarks/results/measure_resnet50.md`` (stamped with date, machine and versions) and
prints it.

Usage::

    python benchmarks/measure_resnet50.py                    # fresh cache in a temporary directory
    python benchmarks/measure_resnet50.py --compare-with cf0a4ba     # before/after, side by side
    python benchmarks/measure_resnet50.py --depth 101 --orders oc,rows --output resnet101.md
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import layoutopt
from layoutopt.machine import stamp
from layoutopt.tvm import build_problem, extract_layout_graph, models, prepare
from layoutopt.tvm.building.baselines import fixed_layout_assignment
from layoutopt.tvm.measure.cache import CostCache, CostContext, record_cost, task_key
from layoutopt.tvm.measure.problem import kernel_tasks, measure_graph, transform_tasks

RESULTS = Path(__file__).resolve().parent / "results"
REPOSITORY = Path(__file__).resolve().parent.parent

_CACHED_RUN = """
import sys, time
start = time.perf_counter()
from layoutopt.tvm import build_problem, models
candidates = eval(sys.argv[2])
mod = models.resnet(depth=int(sys.argv[3]))
graph, costs, meta = build_problem(mod, candidates=candidates, cache=sys.argv[1], progress=False)
assert meta.stats.measured == 0, meta.stats
print(time.perf_counter() - start)
"""

#: the same empty-cache measurement, run with another revision's layoutopt (first on sys.path)
_EMPTY_RUN = """
import json, os, sys, time
if __name__ == "__main__":
    import layoutopt
    from layoutopt.tvm import build_problem, models
    candidates = eval(sys.argv[2])
    mod = models.resnet(depth=int(sys.argv[3]))
    load = os.getloadavg()[0]
    start = time.perf_counter()
    graph, costs, meta = build_problem(mod, candidates=candidates, cache=sys.argv[1], progress=False)
    # the measure metadata was a dict before it was a record (MeasureMeta): REV may be either
    stats = meta["stats"] if isinstance(meta, dict) else meta.stats.to_json()
    print(json.dumps({"seconds": time.perf_counter() - start, "stats": stats, "load_before": load,
                      "load_after": os.getloadavg()[0], "layoutopt": layoutopt.__file__}))
"""


def load_average() -> str:
    try:
        return ", ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def run_revision(revision: str, cache: Path, candidates, depth: int) -> dict:
    """Measure from an empty cache with layoutopt as it was at ``revision`` (a subprocess)."""
    with tempfile.TemporaryDirectory(prefix="layoutopt-before-") as tree:
        archive = subprocess.run(["git", "-C", str(REPOSITORY), "archive", revision, "layoutopt"],
                                 capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", tree], input=archive, check=True)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([tree, os.environ.get("PYTHONPATH", "")])}
        done = subprocess.run([sys.executable, "-c", _EMPTY_RUN, str(cache), repr(candidates), str(depth)],
                              capture_output=True, text=True, check=True, env=env, cwd=tree)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["layoutopt"].startswith(tree), result["layoutopt"]  # the old code ran, not this one
    return result


def step_profile(tasks: list[tuple[dict, dict]], sample: int, seed: int = 0) -> dict[str, float]:
    """Mean seconds per kernel of each step of measuring it, on ``sample`` tasks drawn with ``seed``."""
    from layoutopt.tvm import import_tvm, one_blas_thread, resolve_target
    from layoutopt.tvm.kernels import build_kernel, check_kernel, reference_output, validate_workload
    from layoutopt.tvm.measure.runner import LocalRunner

    tvm = import_tvm()
    target, runner = resolve_target(None), LocalRunner()
    chosen = random.Random(seed).sample(tasks, min(sample, len(tasks)))
    steps = collections.defaultdict(float)
    references: dict[str, tuple] = {}
    with tempfile.TemporaryDirectory() as directory, one_blas_thread():
        for i, (workload, candidate) in enumerate(chosen):
            workload = validate_workload(dict(workload))
            clock = time.perf_counter()

            def lap(step: str) -> None:
                nonlocal clock
                now = time.perf_counter()
                steps[step] += now - clock
                clock = now

            kernel = build_kernel(workload, candidate, target)
            lap("schedule (TE + s_tir)")
            executable = tvm.compile(kernel.module, target=target)
            lap("compile (TIR passes, LLVM IR)")
            module = executable.mod
            module[kernel.name]
            lap("machine code (in-memory, at the first call)")
            executable.export_library(os.path.join(directory, f"k{i}.so"))
            lap("export (machine code + link)")
            key = task_key(workload, {})
            if key not in references:
                inputs = kernel.logical_inputs()
                references[key] = (inputs, reference_output(workload, inputs).astype(kernel.dtype))
            lap("numpy reference (once per workload)")
            args = kernel.device_args(references[key][0], tvm.cpu())
            check_kernel(kernel, module, reference=references[key], args=args)
            lap("pack inputs + check")
            runner.time(module, tvm.cpu(), kernel.name, args)
            lap("one timing pass (time_evaluator)")
    return {step: seconds / len(chosen) for step, seconds in steps.items()}


def library_vs_jit(tasks: list[tuple[dict, dict]], sample: int, rounds: int = 4, seed: int = 1
                   ) -> list[float]:
    """Per kernel: its time from an exported library (how kernels are timed now, loaded by the timing
    worker) over its time from TVM's in-memory JIT module (how they were timed before), each the best
    median of ``rounds`` interleaved rounds, in this process."""
    from layoutopt.tvm import import_tvm, one_blas_thread, resolve_target
    from layoutopt.tvm.kernels import build_kernel, validate_workload
    from layoutopt.tvm.measure.runner import LocalRunner

    tvm = import_tvm()
    target, runner = resolve_target(None), LocalRunner()
    kernels = []
    with tempfile.TemporaryDirectory() as directory:
        for i, (workload, candidate) in enumerate(random.Random(seed).sample(tasks, min(sample, len(tasks)))):
            kernel = build_kernel(validate_workload(dict(workload)), candidate, target)
            executable = tvm.compile(kernel.module, target=target)
            path = os.path.join(directory, f"k{i}.so")
            executable.export_library(path)
            modules = {"jit": executable.mod, "library": tvm.runtime.load_module(path)}
            kernels.append((kernel, modules, kernel.device_args(kernel.logical_inputs(), tvm.cpu())))
        best = [{"jit": np.inf, "library": np.inf} for _ in kernels]
        with one_blas_thread():
            for round_ in range(rounds):
                for i, (kernel, modules, args) in enumerate(kernels):
                    for way in (["jit", "library"] if (round_ + i) % 2 == 0 else ["library", "jit"]):
                        seconds = float(np.median(runner.time(modules[way], tvm.cpu(), kernel.name, args)))
                        best[i][way] = min(best[i][way], seconds)
    return [b["library"] / b["jit"] for b in best]


def cost_ratios(before: Path, after: Path, context: CostContext) -> tuple[int, list[float]]:
    """How many kernels both caches measured for the target of ``context``, and the after/before ratios
    of their costs."""
    old = {task_key(r["workload"], r["candidate"]): record_cost(r) for r in CostCache(before)
           if r["target"] == context.target_key}
    new = {task_key(r["workload"], r["candidate"]): record_cost(r) for r in CostCache(after)
           if r["target"] == context.target_key}
    ratios = [new[k] / old[k] for k in old.keys() & new.keys() if np.isfinite(old[k]) and np.isfinite(new[k])]
    return len(old.keys() & new.keys()), ratios


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", help="cost cache (.jsonl); default: a fresh one in a temporary directory")
    parser.add_argument("--blocks", default="", help="channel blocks, e.g. 8,16,32 (default 4,8,16,32,64)")
    parser.add_argument("--orders", default="oc", help="conv loop orders, e.g. oc,rows (default oc)")
    parser.add_argument("--depth", type=int, default=50, help="ResNet depth (18, 34, 50, 101, 152)")
    parser.add_argument("--compare-with", metavar="REV", help="also measure with layoutopt at git REV")
    parser.add_argument("--profile-sample", type=int, default=60, help="kernels timed step by step")
    parser.add_argument("--ab-sample", type=int, default=40, help="kernels timed from a library and JIT")
    parser.add_argument("--output", default=str(RESULTS / "measure_resnet50.md"), help="markdown report path")
    args = parser.parse_args(argv)
    blocks = [int(b) for b in args.blocks.split(",")] if args.blocks else None
    orders = [o for o in args.orders.split(",") if o]
    candidates = blocks if orders == ["oc"] else {"blocks": blocks or [4, 8, 16, 32, 64], "orders": orders}
    workdir = tempfile.TemporaryDirectory(prefix="layoutopt-resnet50-")
    cache = Path(args.cache) if args.cache else Path(workdir.name) / "costs.jsonl"
    started = stamp()
    load_before = load_average()

    # 1. extraction
    start = time.perf_counter()
    mod = models.resnet(depth=args.depth)
    built = time.perf_counter() - start
    start = time.perf_counter()
    mod = prepare(mod)
    graph = extract_layout_graph(mod, candidates, prepared=True)
    extract_seconds = time.perf_counter() - start
    kinds = collections.Counter(node.kind for node in graph.layout_nodes())
    convs = sum(1 for node in graph.layout_nodes() if node.op == "relax.nn.conv2d")
    targets = [node for node in graph.layout_nodes() if node.kind == "target"]
    kernels = {task_key(workload, candidate): (workload, candidate) for workload, candidate in
               kernel_tasks(graph)}
    workloads = {task_key(node.workload, {}) for node in targets}
    transforms = transform_tasks(graph)
    by_kind = ", ".join(f"{kind} {count}" for kind, count in sorted(kinds.items()))

    # 2. the same measurement with the code of another revision, before this one's (same machine)
    before = None
    if args.compare_with:
        before_cache = Path(workdir.name) / "before.jsonl"
        before = run_revision(args.compare_with, before_cache, candidates, args.depth)

    # 3. empty cache (unless the user gave a cache that is already filled)
    load_cold = os.getloadavg()[0]
    start = time.perf_counter()
    costs, meta = measure_graph(graph, cache=cache, progress=None)
    cold_seconds = time.perf_counter() - start
    cold_stats = meta.stats.to_json()
    load_cold_after = os.getloadavg()[0]

    # 4. full cache, in this process and in a fresh one
    start = time.perf_counter()
    _, warm_costs, warm_meta = build_problem(models.resnet(depth=args.depth), candidates=candidates,
                                             cache=cache)
    warm_seconds = time.perf_counter() - start
    assert warm_meta.stats.measured == 0
    assert all(np.array_equal(warm_costs.nodes[n], costs.nodes[n]) for n in graph)
    fresh = subprocess.run([sys.executable, "-c", _CACHED_RUN, str(cache), repr(candidates), str(args.depth)],
                           capture_output=True, text=True, check=True)
    fresh_seconds = float(fresh.stdout.strip().splitlines()[-1])

    # 5. where the time of one kernel goes
    steps = {}
    if args.profile_sample:
        steps = step_profile(list(kernels.values()) + transforms, args.profile_sample)

    # 6. the timing worker loads exported libraries; the old one ran TVM's in-memory JIT module
    ab = library_vs_jit(list(kernels.values()) + transforms, args.ab_sample) if args.ab_sample else []

    # 7. solve, and compare with uniform NCHW16c
    solution = layoutopt.solve(graph, costs)
    uniform = layoutopt.evaluate(graph, costs, fixed_layout_assignment(graph, "NCHW16c"))
    kernel_total = sum(costs.nodes[n][solution.assignment[n]] for n in graph)
    failures = meta.failures[:10]

    def rate(stats: dict, seconds: float) -> str:
        return f"{stats['measured'] / seconds:.2f}" if seconds else "-"

    rows = []
    if before is not None:
        b = before["stats"]
        rows.append(f"| empty cache, layoutopt at `{args.compare_with}` (before) | {before['seconds']:.1f} | "
                    f"{b['measured']} | {rate(b, before['seconds'])} | {b['failed']} | - | "
                    f"{before['load_before']:.2f} / {before['load_after']:.2f} |")
    rows.append(f"| empty cache (this code) | {cold_seconds:.1f} | {cold_stats['measured']} | "
                f"{rate(cold_stats, cold_seconds)} | {cold_stats['failed']} | compile "
                f"{cold_stats['compile_seconds']:.1f} s on {cold_stats['workers']} workers, then time "
                f"{cold_stats['time_seconds']:.1f} s on {cold_stats['devices']} | "
                f"{load_cold:.2f} / {load_cold_after:.2f} |")
    lines = [
        f"# Measuring ResNet-{args.depth}'s layout problem (`benchmarks/measure_resnet50.py`)",
        "",
        f"- date: {started['date']}; machine: {started['machine']}",
        f"- versions: {started['versions']}",
        f"- load average before the run (1, 5, 15 min): {load_before}; after: {load_average()} "
        "(other jobs shared the machine when this is above ~0.1)",
        f"- target: `{meta.context.target_key}`; {started['threads']}",
        f"- candidate blocks: {blocks or 'default {4, 8, 16, 32, 64} + C when C < 8'}; conv loop orders: "
        f"{', '.join(orders)}",
        "",
        "## Extraction",
        "",
        "| what | count |",
        "|---|---|",
        f"| problem nodes | {graph.number_of_nodes()} ({by_kind}) |",
        f"| conv2d nodes | {convs} |",
        f"| edges | {graph.number_of_edges()} |",
        f"| choices (sum over nodes) | {sum(len(d['choices']) for _, d in graph.nodes(data=True))} |",
        f"| distinct kernel workloads | {len(workloads)} |",
        f"| distinct kernel candidates (workload x candidate) | {len(kernels)} |",
        f"| distinct layout transforms (shape x src x dst) | {len(transforms)} |",
        "",
        f"Building the Relax model took {built:.2f} s; prepare + extract {extract_seconds:.2f} s.",
        "",
        "## Measurement",
        "",
        "Both empty-cache runs build, check and time every kernel the same way (`time_evaluator`, "
        "min_repeat_ms=20 x 3 repeats, a second pass over all kernels; each conv2d with its fused epilogue); "
        "the older code builds, checks and times each kernel in turn in one worker process, this code "
        "compiles them ahead in batches on every core, then checks and times them alone.",
        "",
        "| run | seconds | measured | kernels/s | failed | phases | load average before / after |",
        "|---|---|---|---|---|---|---|",
        *rows,
        f"| full cache, same process | {warm_seconds:.2f} | 0 | - | {warm_meta.stats.failed} | "
        f"{warm_meta.stats.cached} from the cache | - |",
        f"| full cache, fresh process (incl. `import tvm`) | {fresh_seconds:.2f} | 0 | - | - | all from the "
        "cache | - |",
        "",
    ]
    if before is not None:
        common, ratios = cost_ratios(Path(workdir.name) / "before.jsonl", cache, meta.context)
        quartiles = np.percentile(ratios, [25, 50, 75]) if ratios else [float("nan")] * 3
        lines += [
            f"Speed-up of the empty-cache measurement: {before['seconds'] / cold_seconds:.2f}x "
            f"({rate(before['stats'], before['seconds'])} -> {rate(cold_stats, cold_seconds)} kernels/s).",
            "",
            f"Same costs? Over the {common} kernels both runs measured, this run's cost / the older "
            f"code's: median {quartiles[1]:.3f} (quartiles {quartiles[0]:.3f}-{quartiles[2]:.3f}; "
            "two measurements of the same kernel on a shared machine, minutes apart).",
            "",
        ]
    if steps:
        total = sum(steps.values())
        lines += [
            f"## Where the time of one kernel goes ({args.profile_sample} kernels drawn at random, "
            "each step timed in this process)",
            "",
            "| step | ms per kernel | share |",
            "|---|---|---|",
            *[f"| {step} | {seconds * 1e3:.1f} | {seconds / total:.0%} |" for step, seconds in steps.items()],
            "",
            "Measuring a kernel in turn pays schedule + compile + machine code + check + two timing passes, "
            "all in one process. Compiling ahead moves schedule + compile + export (machine code and link) "
            "to a pool on every core; the timing passes stay serial and alone on this machine.",
            "",
        ]
    if ab:
        q = np.percentile(ab, [10, 25, 50, 75, 90])
        lines += [
            "## The same kernel from an exported library and from the in-memory JIT module",
            "",
            f"{len(ab)} kernels drawn at random, each timed 4x both ways in interleaved rounds (best median "
            f"each way): library / JIT median {q[2]:.3f}, quartiles {q[1]:.3f}-{q[3]:.3f}, 10th-90th "
            f"percentiles {q[0]:.3f}-{q[4]:.3f}. Timing the kernels from the libraries the compile pool "
            "exports measures the same code as before.",
            "",
        ]
    lines += [
        "## Solution (sanity check of the costs)",
        "",
        f"- `layoutopt.solve` ({solution.method}): status {solution.status}, predicted "
        f"{solution.objective * 1e3:.3f} ms (kernels {kernel_total * 1e3:.3f} ms, transforms "
        f"{(solution.objective - kernel_total) * 1e3:.3f} ms), solved in {solution.solve_time * 1e3:.1f} ms",
        f"- uniform NCHW16c (first conv NCHW3c->NCHW16c): predicted {uniform * 1e3:.3f} ms "
        f"({uniform / solution.objective:.3f}x the optimum)",
        f"- failures: {len(meta.failures)}"
        + "".join(f"\n  - {f.workload['op']} {f.candidate}: {f.error}" for f in failures),
        "",
    ]
    report = "\n".join(lines)
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(report)
    print(report)
    print(f"written to {output}")
    workdir.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""How long it takes to measure ResNet-50's layout problem, from an empty cost cache and from a full one.

Builds ResNet-50 in Relax with seeded random weights (:func:`layoutopt.tvm.models.resnet`, the real
shapes: 1x3x224x224, 53 conv2d; no download, no torch), then:

1. extracts the layout graph and counts nodes, edges, choices and distinct measurements;
2. runs :func:`layoutopt.tvm.build_problem` with an empty cache (every kernel candidate and every
   layout transform is built, checked against numpy and timed) - target <= 10 minutes on 2 cores;
3. runs it again with the now full cache, in this process and in a fresh one (a real "second run",
   including ``import tvm``) - target <= 10 s;
4. solves the problem and compares the optimum with uniform NCHW16c, as a sanity check of the costs.

Writes ``benchmarks/results/measure_resnet50.md`` (stamped with date, machine and versions) and
prints it.

Usage::

    python benchmarks/measure_resnet50.py                    # fresh cache in a temporary directory
    python benchmarks/measure_resnet50.py --cache costs.jsonl --blocks 8,16,32
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import layoutopt
from layoutopt.machine import stamp
from layoutopt.tvm import build_problem, extract_layout_graph, models, prepare
from layoutopt.tvm.baselines import fixed_layout_assignment
from layoutopt.tvm.cache import task_key
from layoutopt.tvm.problem import kernel_tasks, transform_tasks

RESULTS = Path(__file__).resolve().parent / "results"

_CACHED_RUN = """
import sys, time
start = time.perf_counter()
from layoutopt.tvm import build_problem, models
blocks = [int(b) for b in sys.argv[2].split(",")] if sys.argv[2] else None
mod = models.resnet(depth=int(sys.argv[3]))
graph, costs, meta = build_problem(mod, candidates=blocks, cache=sys.argv[1], progress=False)
assert meta["stats"]["measured"] == 0, meta["stats"]
print(time.perf_counter() - start)
"""


def load_average() -> str:
    try:
        return ", ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", help="cost cache (.jsonl); default: a fresh one in a temporary directory")
    parser.add_argument("--blocks", default="", help="channel blocks, e.g. 8,16,32 (default 4,8,16,32,64)")
    parser.add_argument("--depth", type=int, default=50, help="ResNet depth (18, 34, 50, 101, 152)")
    parser.add_argument("--output", default=str(RESULTS / "measure_resnet50.md"), help="markdown report path")
    args = parser.parse_args(argv)
    blocks = [int(b) for b in args.blocks.split(",")] if args.blocks else None
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
    graph = extract_layout_graph(mod, blocks, prepared=True)
    extract_seconds = time.perf_counter() - start
    kinds = collections.Counter(node.kind for node in graph.layout_nodes())
    convs = sum(1 for node in graph.layout_nodes() if node.op == "relax.nn.conv2d")
    targets = [node for node in graph.layout_nodes() if node.kind == "target"]
    kernels = {task_key(workload, candidate) for workload, candidate in kernel_tasks(graph)}
    workloads = {task_key(node.workload, {}) for node in targets}
    transforms = transform_tasks(graph)
    by_kind = ", ".join(f"{kind} {count}" for kind, count in sorted(kinds.items()))

    # 2. empty cache (unless the user gave a cache that is already filled)
    start = time.perf_counter()
    graph, costs, meta = build_problem(mod, candidates=blocks, cache=cache, prepared=True, progress=None)
    cold_seconds = time.perf_counter() - start
    cold_stats = meta["stats"]

    # 3. full cache, in this process and in a fresh one
    start = time.perf_counter()
    _, warm_costs, warm_meta = build_problem(models.resnet(depth=args.depth), candidates=blocks, cache=cache)
    warm_seconds = time.perf_counter() - start
    assert warm_meta["stats"]["measured"] == 0
    assert all(np.array_equal(warm_costs.nodes[n], costs.nodes[n]) for n in graph)
    fresh = subprocess.run([sys.executable, "-c", _CACHED_RUN, str(cache), args.blocks, str(args.depth)],
                           capture_output=True, text=True, check=True)
    fresh_seconds = float(fresh.stdout.strip().splitlines()[-1])

    # 4. solve, and compare with uniform NCHW16c
    solution = layoutopt.solve(graph, costs)
    uniform = layoutopt.evaluate(graph, costs, fixed_layout_assignment(graph, "NCHW16c"))
    kernel_total = sum(costs.nodes[n][solution.assignment[n]] for n in graph)
    failures = meta["failures"][:10]

    lines = [
        f"# Measuring ResNet-{args.depth}'s layout problem (`benchmarks/measure_resnet50.py`)",
        "",
        f"- date: {started['date']}; machine: {started['machine']}",
        f"- versions: {started['versions']}",
        f"- load average before the run (1, 5, 15 min): {load_before}; after: {load_average()} "
        "(other jobs shared the machine when this is above ~0.1)",
        f"- target: `{meta['target']}`; {started['threads']}",
        f"- candidate blocks: {blocks or 'default {4, 8, 16, 32, 64} + C when C < 8'}",
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
        "| run | seconds | measured | from cache | failed | target |",
        "|---|---|---|---|---|---|",
        f"| empty cache | {cold_seconds:.1f} | {cold_stats['measured']} | {cold_stats['cached']} | "
        f"{cold_stats['failed']} | <= 600 s |",
        f"| full cache, same process | {warm_seconds:.2f} | 0 | {warm_meta['stats']['cached']} | "
        f"{warm_meta['stats']['failed']} | <= 10 s |",
        f"| full cache, fresh process (incl. `import tvm`) | {fresh_seconds:.2f} | 0 | all | - | <= 10 s |",
        "",
        f"Per measurement: {cold_seconds / max(1, cold_stats['measured']):.3f} s on average (build, numpy "
        "check, `time_evaluator` with min_repeat_ms=20 x 3 repeats, timed again in a second pass, in an "
        "isolated worker process; each conv2d with its fused epilogue).",
        "",
        "## Solution (sanity check of the costs)",
        "",
        f"- `layoutopt.solve` ({solution.method}): status {solution.status}, predicted "
        f"{solution.objective * 1e3:.3f} ms (kernels {kernel_total * 1e3:.3f} ms, transforms "
        f"{(solution.objective - kernel_total) * 1e3:.3f} ms), solved in {solution.solve_time * 1e3:.1f} ms",
        f"- uniform NCHW16c (first conv NCHW3c->NCHW16c): predicted {uniform * 1e3:.3f} ms "
        f"({uniform / solution.objective:.3f}x the optimum)",
        f"- failures: {len(meta['failures'])}"
        + "".join(f"\n  - {f['workload']['op']} {f['candidate']}: {f['error']}" for f in failures),
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

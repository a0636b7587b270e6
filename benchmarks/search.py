"""The searched build against the heuristic-schedule build, side by side, on a network (MobileNetV2).

One tune's chain of stages (``layoutopt.tvm.tune.stages``) run three times on the same extraction:

- **heuristic**: today's tune (``trials=0``): one heuristic schedule per (algorithm, layout pair);
- **searched, top-k 1** and **top-k 4**: each workload's schedules searched first
  (``stages.search``: successive halving over seeded samples of the kernel families' schedule
  spaces, ``--trials`` points per workload beyond the heuristic's, into the cost cache), and the k
  fastest per (algorithm, in, out) offered to the solver as each node's choices.

Each solution is built and checked against the untouched model (float64), then the builds are timed
side by side in ``--rounds`` interleaved rounds (``compare_builds``: per-round ratios to the heuristic
build, with their 95 % interval; more rounds when a ratio is not settled). No in-network calibration,
no guard: the solver's own answer on the measured costs. Writes ``benchmarks/results/search.md`` and
``.csv``, stamped with the date, CPU, load and versions.

Usage::

    python -m benchmarks.search --python /path/to/python-with-torch     # exports MobileNetV2 once
    python -m benchmarks.search --trials 16 --blocks 8,16,32,64 --rounds 40
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("TVM_NUM_THREADS", "2")

from benchmarks.networks import MODELS, export_torchvision

RESULTS = Path(__file__).resolve().parent / "results"


def searched_schedules(graph, assignment, target) -> int:
    """How many target nodes of the solution run another schedule than their family's heuristic point."""
    from layoutopt.tvm.kernels import family

    count = 0
    for node in graph.layout_nodes():
        if node.kind == "target":
            candidate = dict(node.choices[assignment[node.name]].candidate)
            space = family(node.workload, candidate).space(node.workload, candidate, target)
            count += space.point(candidate) != space.default()
    return count


def layer_rounds(solutions, base: str, other: str, target, rounds: int) -> list[dict]:
    """Per target node whose kernel differs between the ``base`` and ``other`` solutions: both kernels
    re-timed cold and alone in ``rounds`` interleaved rounds (as ``benchmarks.schedule_space`` re-times
    its finalists), beside the costs each solution was chosen with."""
    if not rounds or other not in solutions:
        return []
    from benchmarks.kernel_timing import cold_rounds, compiled_kernel
    from layoutopt.tvm.kernels import describe_workload
    from layoutopt.tvm.measure.cache import task_key

    (graph_a, solved_a), (graph_b, solved_b) = solutions[base], solutions[other]
    rows, kernels = [], {}
    for node in graph_a.layout_nodes():
        if node.kind != "target":
            continue
        a = graph_a.choice(node.name, solved_a.solution.assignment[node.name])
        b = graph_b.choice(node.name, solved_b.solution.assignment[node.name])
        if dict(a.candidate) == dict(b.candidate):
            continue
        keys = []
        for candidate in (dict(a.candidate), dict(b.candidate)):
            key = task_key(node.workload, candidate)
            if key not in kernels:
                kernels[key] = compiled_kernel(node.workload, candidate, target)
            keys.append(key)
        index = list(solved_b.problem.nodes).index(node.name)
        rows.append({"layer": str(node.name), "workload": describe_workload(node.workload),
                     "base": a.label, "other": b.label, "keys": keys,
                     "base_cost": solved_a.measured.meta.measured[keys[0]],
                     "other_cost": solved_b.measured.meta.measured[keys[1]],
                     "other_predicted": float(solved_b.problem.node_costs[index][
                         solved_b.solution.assignment[node.name]])})
    print(f"re-timing {len(kernels)} kernels of {len(rows)} layers in {rounds} rounds", file=sys.stderr,
          flush=True)
    samples = cold_rounds(kernels, rounds)
    for row in rows:
        first, second = (samples[key] for key in row["keys"])
        row["base_retimed"] = statistics.median(first)
        row["other_retimed"] = statistics.median(second)
        row["ratio"] = statistics.median(x / y for x, y in zip(first, second, strict=True))
    return rows


def layer_lines(rows: list[dict], rounds: int) -> list[str]:
    total_costs = sum(r["base_cost"] for r in rows), sum(r["other_predicted"] for r in rows)
    total_retimed = sum(r["base_retimed"] for r in rows), sum(r["other_retimed"] for r in rows)
    return [
        "", "## Per layer: the heuristic build's kernel against the searched build's (top-k 1)", "",
        f"Every layer whose kernel differs, both kernels re-timed cold and alone in {rounds} interleaved "
        "rounds (*re-timed*: medians; *heuristic / searched*: the median of the per-round ratios, above 1 "
        "the searched kernel is faster), beside the costs the solutions were chosen with (*solver's cost*: "
        "the heuristic kernel's from the cost cache, the fastest of its two passes; the searched kernel's "
        "its paired-rounds cost, the heuristic point's cost over the median paired ratio, or the cost "
        "cache's where it is a heuristic point itself).", "",
        f"Summed over these {len(rows)} layers (each once): solver's costs {total_costs[0] * 1e3:.3f} ms "
        f"(heuristic) against {total_costs[1] * 1e3:.3f} ms (searched), "
        f"{total_costs[0] / total_costs[1]:.2f}x; re-timed "
        f"{total_retimed[0] * 1e3:.3f} ms against {total_retimed[1] * 1e3:.3f} ms, "
        f"{total_retimed[0] / total_retimed[1]:.2f}x.", "",
        "| layer | workload | heuristic kernel | searched kernel | solver's cost µs (h / s) "
        "| re-timed µs (h / s) "
        "| heuristic / searched |", "|---|---|---|---|---|---|---|",
        *(f"| {r['layer']} | {r['workload']} | {r['base']} | {r['other']} | {r['base_cost'] * 1e6:.1f} / "
          f"{r['other_predicted'] * 1e6:.1f} "
          f"| {r['base_retimed'] * 1e6:.1f} / {r['other_retimed'] * 1e6:.1f} "
          f"| {r['ratio']:.2f}x |" for r in rows),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default=sys.executable, help="an interpreter with torch, to export")
    parser.add_argument("--network", default="mobilenet_v2", help="a torchvision constructor")
    parser.add_argument("--trials", type=int, default=8, help="points searched per workload")
    parser.add_argument("--top-k", default="1,4", help="k values to build, comma-separated")
    parser.add_argument("--search-time", type=float, default=None)
    parser.add_argument("--blocks", default="8,16,32", help="channel blocks of the candidates")
    parser.add_argument("--rounds", type=int, default=30, help="interleaved timing rounds")
    parser.add_argument("--cache", default=None,
                        help="cost cache (default: the tune's, under XDG_CACHE_HOME; a rerun measures only "
                        "what it lacks)")
    parser.add_argument("--layer-rounds", type=int, default=9,
                        help="interleaved cold rounds of the per-layer re-timing (0: none)")
    parser.add_argument("--out", default=str(RESULTS / "search.md"))
    args = parser.parse_args(argv)

    from layoutopt.machine import stamp_line
    from layoutopt.tvm import load_model, resolve_target
    from layoutopt.tvm.cli import default_cache_path
    from layoutopt.tvm.evaluate.timing import compare_builds
    from layoutopt.tvm.measure.runner import LocalRunner
    from layoutopt.tvm.tune import stages

    args.cache = args.cache or str(default_cache_path())
    started, start_load = time.monotonic(), os.getloadavg()[0]
    path = export_torchvision(args.network, MODELS / f"{args.network}.onnx", python=args.python)
    mod = load_model(path, [1, 3, 224, 224])
    target = resolve_target(None)
    blocks = [int(b) for b in args.blocks.split(",")]
    options = stages.TuneOptions(cache=args.cache, candidates={"blocks": blocks}, guard=False, baselines=(),
                                 calibrate=0, profile=False, repeat=args.rounds, seed=0, progress=True)
    extracted = stages.extract(mod, target, LocalRunner(), options)
    rows, builds, solutions = [], {}, {}

    def tune(name: str, opts: stages.TuneOptions) -> None:
        t0 = time.monotonic()
        searched = stages.search(extracted, opts)
        search_seconds = time.monotonic() - t0
        measured = stages.measure(searched, opts)
        solved = stages.solve(measured, opts)
        variant = stages.build_variant(searched, name, name, solved.solution.assignment, opts)
        builds[name] = variant.executable
        solutions[name] = (searched.graph, solved)
        knobbed = searched_schedules(searched.graph, solved.solution.assignment, target)
        stats = searched.search
        rows.append({"build": name, "trials": opts.trials, "top_k": opts.top_k if opts.trials else "-",
                     "choices": sum(len(n.choices) for n in searched.graph.layout_nodes()),
                     "searched": stats.searched if stats else 0, "from_cache": stats.cached if stats else 0,
                     "cut": stats.cut if stats else 0, "search_s": round(search_seconds, 1),
                     "solve_ms": round(solved.solution.solve_time * 1e3, 1) if solved.solution.solve_time
                     else "", "predicted_ms": solved.solution.objective * 1e3,
                     "non_default_schedules": knobbed, "error": variant.max_relative_error,
                     "finalists_retimed": (stats.retimed + stats.retimed_cached) if stats else 0,
                     "kept": stats.kept if stats else 0, "dropped": stats.dropped if stats else 0})
        print(f"{name}: predicted {solved.solution.objective * 1e3:.3f} ms, {knobbed} layers on searched "
              f"schedules", file=sys.stderr, flush=True)

    tune("heuristic", options)
    for k in [int(k) for k in args.top_k.split(",")]:
        tune(f"searched_k{k}", replace(options, trials=args.trials, top_k=k, search_time=args.search_time))
    load_before = os.getloadavg()[0]
    samples, ratios = compare_builds(builds, extracted.inputs, "heuristic", args.rounds)
    load_after = os.getloadavg()[0]
    for row in rows:
        values = sorted(samples[row["build"]])
        row["measured_ms"] = values[len(values) // 2] * 1e3
        ratio = ratios.get(row["build"])
        row["speedup"] = 1.0 if ratio is None else 1 / ratio.median
        row["interval"] = "-" if ratio is None else f"{1 / ratio.high:.3f}-{1 / ratio.low:.3f}"
        row["rounds"] = len(values)
    per_layer = layer_rounds(solutions, "heuristic", "searched_k1", target, args.layer_rounds)
    minutes = (time.monotonic() - started) / 60
    command = " ".join(["python -m benchmarks.search", *(sys.argv[1:] if argv is None else argv)])
    lines = [
        f"# Schedule search: the searched build against the heuristic build ({args.network})", "",
        f"*{stamp_line()}*", "",
        f"Produced by `{command}` in {minutes:.0f} min (cost cache {args.cache}); target llvm mcpu "
        f"{target.attrs['mcpu']}; candidates of blocks {blocks}, all conv2d algorithms; load average "
        f"{start_load:.1f} at the start, {load_before:.1f} before the timing rounds, {load_after:.1f} after "
        "(the machine is shared: 2 cores, other sessions running).", "",
        "Each build is the solver's answer on its measured (isolated, cold) costs, checked against the "
        "untouched model in float64; no calibration, no guard. *speed-up*: the heuristic build's latency "
        "over this build's, the median of the per-round ratios of the interleaved rounds, with its 95 % "
        "interval. *searched / from cache / cut*: the search's schedule points measured now, found in "
        "the cost cache (today's candidates measured by the search's round 0 count here), cut by the time "
        "budget. *layers on searched schedules*: layers whose chosen kernel is not the heuristic's point. "
        "*finalists kept / dropped*: the searched points re-timed beside their heuristic point in paired "
        "rounds that became choices (faster in 3 rounds of 4) or not; *re-timed kernels*: kernels timed "
        "in those rounds (the heuristic points included).",
        "",
        "| build | trials | top-k | choices | searched | from cache | cut | search s | solve ms "
        "| predicted ms | measured ms | speed-up [95 %] | rounds | layers on searched schedules "
        "| finalists kept / dropped | re-timed kernels |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['build']} | {r['trials']} | {r['top_k']} | {r['choices']} | {r['searched']} "
                     f"| {r['from_cache']} | {r['cut']} | {r['search_s']} | {r['solve_ms']} "
                     f"| {r['predicted_ms']:.3f} | {r['measured_ms']:.3f} | {r['speedup']:.3f}x "
                     f"[{r['interval']}] | {r['rounds']} | {r['non_default_schedules']} "
                     f"| {r['kept']} / {r['dropped']} | {r['finalists_retimed']} |")
    if per_layer:
        lines += layer_lines(per_layer, args.layer_rounds)
    out = Path(args.out)
    out.write_text("\n".join(lines) + "\n")
    with open(out.with_suffix(".csv"), "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=[*rows[0], "load_before", "load_after", "stamp"])
        writer.writeheader()
        for r in rows:
            writer.writerow({**r, "load_before": load_before, "load_after": load_after,
                             "stamp": stamp_line()})
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

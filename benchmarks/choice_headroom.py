"""How much the graph-level choice *can* pay on this host, by the cost model: the best fixed layout's
predicted time over the optimum's.

The guard hands back the best fixed layout (b*) when the tuned build is no faster, and the issue's bar
for "the choice pays" is 1.1x over b*. Whether any assignment can reach it is a question the cost model
answers before anything is built: price b* with the measured kernel and transform costs, solve the
layout problem exactly, and divide. A certified lower bound of the optimum gives an upper bound of the
headroom (what the model allows at best); the solution found gives what is reached. The headroom splits
in two factors:

- *kernels*: b* against the same fixed layout with each node's fastest kernel in those layouts (the 1x1
  GEMM, Winograd, the schedule knobs: what b*'s direct-kernel rule leaves);
- *layouts*: that against the optimum (blocks differing from node to node, and the transforms between).

Kernels come from the cost cache (``real_models.py``'s tunes fill it; a kernel missing there is measured
here, on this host). Nothing is built or timed. With ``--rows``, the measured speed-up over b* of each
model's row in a ``real_models*.json`` is set beside the prediction.

Usage::

    python -m benchmarks.choice_headroom --only mobilenet_v2,regnet_y_400mf \\
        --rows benchmarks/results/real_models_znver4.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

from benchmarks import append_section
from benchmarks.real_models import MODELS, fetch, timing_cells

os.environ.setdefault("TVM_NUM_THREADS", "2")
#: the fixed layouts b* picks from (layoutopt.tvm.building.baselines.BEST_FIXED), as layouts
FIXED = {"nchw8c": "NCHW8c", "nchw16c": "NCHW16c"}
#: the models of real_models.py this benchmark takes by default: the mobile backbones
MOBILE = ("mobilenet_v2", "mobilenet_v3_large", "shufflenet_v2_x1_0", "efficientnet_b0", "regnet_y_400mf",
          "ppocr_cls", "orientation")


def headroom(mod, cache: str | Path | None, time_limit: float = 60.0, candidates: dict | None = None) -> dict:
    """A Relax module's predicted times (seconds), from the kernels' measured costs: each fixed layout
    with b*'s kernels and with the fastest kernels in its layouts, the optimum found and its certified
    lower bound; how many layout nodes the optimum runs in another kernel than b*, and the nodes whose
    kernel in b* has no cost (its measurement failed: b* cannot be priced).

    Example::

        row = headroom(models.chain((8, 16, 8)), "costs.jsonl")
        row["nchw16c_predicted"] / row["lower_bound"]      # at most this much over NCHW16c, by the model
    """
    from layoutopt import Problem, solve_problem
    from layoutopt.tvm import resolve_target
    from layoutopt.tvm.building.baselines import fixed_layout_assignment
    from layoutopt.tvm.measure.runner import LocalRunner
    from layoutopt.tvm.tune.stages import TuneOptions, extract, measure

    options = TuneOptions(cache=cache, check=False, guard=False, baselines=(), candidates=candidates)
    measured = measure(extract(mod, resolve_target("llvm"), LocalRunner(), options), options)
    graph = measured.extracted.graph
    problem = Problem.from_graph(graph, measured.costs)
    algorithms = sorted({choice.record.algorithm for node in graph.layout_nodes() for choice in node.choices})

    def predicted(assignment: dict) -> float:
        return problem.evaluate([assignment[n] for n in problem.nodes])

    fixed = {name: fixed_layout_assignment(graph, layout) for name, layout in FIXED.items()}
    free = {name: fixed_layout_assignment(graph, layout, problem, prefer=algorithms)
            for name, layout in FIXED.items()}
    best = min(fixed, key=lambda name: predicted(fixed[name]))
    found = [solve_problem(problem, "auto"), solve_problem(problem, "cpsat", time_limit=time_limit)]
    optimum = min(found, key=lambda s: s.objective)
    return {
        "layout_nodes": len(problem.nodes), "best_fixed": best,
        **{f"{name}_predicted": predicted(a) for name, a in fixed.items()},
        **{f"{name}_fastest_kernels_predicted": predicted(a) for name, a in free.items()},
        "optimum": optimum.objective, "optimum_method": optimum.method,
        "lower_bound": max(s.lower_bound for s in found),
        "nodes_unlike_best_fixed": sum(optimum.assignment[n] != fixed[best][n] for n in problem.nodes),
        "unpriced_in_best_fixed": [str(n) for i, n in enumerate(problem.nodes)
                                   if not math.isfinite(problem.node_costs[i][fixed[best][n]])],
        "cost_stats": measured.meta.stats.to_json(),
    }


def table(rows: list[dict], measured: dict[str, dict]) -> list[str]:
    """The markdown table of :func:`headroom`'s rows (ms; ratios over the optimum's bound or value)."""
    lines = ["| model | b* (predicted ms) | b*, fastest kernels in its layouts | optimum found | lower bound "
             "| headroom: b* / bound | of which kernels | of which layouts | nodes unlike b* "
             + ("| measured vs b* (handed back) " if measured else "") + "|",
             "|---" * (9 + bool(measured)) + "|"]
    for row in rows:
        best = row["best_fixed"]
        b_star, free = row[f"{best}_predicted"], row[f"{best}_fastest_kernels_predicted"]
        bound = row["lower_bound"] if 0 < row["lower_bound"] < math.inf else None  # CP-SAT's limit hit
        optimum = [f"{row['optimum'] * 1e3:.3f}", f"{row['lower_bound'] * 1e3:.3f}"]
        nodes = f"{row['nodes_unlike_best_fixed']} of {row['layout_nodes']}"
        if row["unpriced_in_best_fixed"]:  # a kernel of b* failed its measurement: no ratio to give
            failed = f"- (b*'s kernel of {', '.join(row['unpriced_in_best_fixed'])} failed its measurement)"
            cells = [row["model"], failed, "-", *optimum, "-", "-", "-", nodes]
        else:
            ratio = f"**{b_star / bound:.3f}x**" if bound else "no bound"
            cells = [row["model"], f"{b_star * 1e3:.3f} ({best})", f"{free * 1e3:.3f}", *optimum,
                     f"{ratio} ({b_star / row['optimum']:.3f}x found)", f"{b_star / free:.3f}x",
                     f"{free / (bound or row['optimum']):.3f}x", nodes]
        if measured:
            timed = measured.get(row["model"])  # timing_cells' seventh cell: the speed-up over b*
            cells.append(f"{timing_cells(timed)[6]} ({timed['chosen']})" if timed and "side_by_side" in timed
                         else "-")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    from layoutopt.machine import stamp_line
    from layoutopt.tvm import load_model
    from layoutopt.tvm.kernels import SCHEDULE_VERSION

    cache = Path.home() / ".cache" / "layoutopt"
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default=",".join(MOBILE),
                        help=f"comma-separated models of real_models.py (default: {', '.join(MOBILE)})")
    parser.add_argument("--cache", default=str(cache / "costs.jsonl"))
    parser.add_argument("--models", default=str(cache / "models"), help="where the .onnx files are kept")
    parser.add_argument("--time-limit", type=float, default=60.0, help="CP-SAT's seconds per model")
    parser.add_argument("--rows", default=None, help="a real_models*.json whose measured 'vs b*' to show")
    parser.add_argument("--out", default=None, help="append the section to this markdown file")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    if unknown := [n for n in names if n not in MODELS]:
        parser.error(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(MODELS)}")
    measured = {r["model"]: r for r in json.loads(Path(args.rows).read_text())} if args.rows else {}
    rows = []
    for name in names:
        spec = MODELS[name]
        mod = load_model(fetch(spec, Path(args.models)), list(spec.shape))
        row = headroom(mod, args.cache, args.time_limit)
        rows.append({"model": name, "schedules": SCHEDULE_VERSION, **row})
    lines = [f"## The choice's headroom, predicted ({', '.join(names)})", "",
             f"*{stamp_line()}; cost cache {Path(args.cache).name}, schedule version {SCHEDULE_VERSION}*", "",
             "`python -m benchmarks.choice_headroom`: each model's layout problem priced with its measured "
             "(cold, isolated) kernel and transform costs. b*: the faster, predicted, of NCHW8c and NCHW16c "
             "everywhere, with the guard's kernels (direct and depthwise, default knobs); the headroom is "
             "its time over the optimum's certified lower bound: no assignment of the candidates beats b* "
             "by more, by the model. It splits into *kernels* (b* against the same layouts with each "
             "node's fastest kernel) and *layouts* (that against the bound).", "",
             *table(rows, measured)]
    append_section(lines, args.out)
    if args.out:  # the rows beside it, merged by model
        store = Path(args.out).with_suffix(".json")
        kept = {r["model"]: r for r in json.loads(store.read_text())} if store.exists() else {}
        kept.update((r["model"], r) for r in rows)
        store.write_text(json.dumps(list(kept.values()), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""How honest is a toulbar2 time limit? ``python -m benchmarks.toulbar2_time_limit``.

Side by side in one run, on instances toulbar2 cannot finish: toulbar2's own ``timeLimit`` (CPU
seconds, whole seconds only, so a limit ``t`` becomes ``ceil(t)``) against layoutopt's ``toulbar2``
back-end (a wall-clock alarm), on the machine as found and with one extra busy process per core.
Reports wall time / requested limit. Writes ``benchmarks/results/toulbar2_time_limit.{md,csv}``.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import networkx as nx
import numpy as np

import layoutopt
from layoutopt import Problem
from layoutopt.machine import stamp
from layoutopt.solvers.scaling import scale_costs

HERE = Path(__file__).resolve().parent
LIMITS = (0.1, 0.3, 1.0, 2.5)
LOADS = ("as found", "+1 busy process per core")


def hard_instance(seed: int) -> Problem:
    """Uniform random costs on a random 6-regular graph of 80 nodes, 8 choices: no structure."""
    rng = np.random.default_rng(seed)
    graph = nx.random_regular_graph(6, 80, seed=seed)
    costs = {"nodes": {v: rng.uniform(0, 10, 8) for v in graph},
             "edges": {e: rng.uniform(0, 10, (8, 8)) for e in graph.edges}}
    return Problem.from_graph(graph, costs)


def native_time_limit(problem: Problem, limit: float) -> float:
    """Wall time of pytoulbar2's ``Solve(timeLimit=...)`` on the same integer model."""
    import pytoulbar2

    start = time.perf_counter()
    scaled = scale_costs(problem)
    cfn = pytoulbar2.CFN(None, resolution=0, verbose=-1)
    for i, size in enumerate(problem.sizes):
        cfn.CFN.wcsp.makeEnumeratedVariable(str(i), 0, size - 1)
    for nodes, costs in scaled.node_tables:
        cfn.CFN.wcsp.postUnaryVecConstraints(np.array(nodes, dtype=np.int64), costs)
    for edges, costs in scaled.edge_tables:
        cfn.CFN.wcsp.postMultBinaryVecConstraints(np.array(edges, dtype=np.int64), costs)
    try:
        cfn.Solve(timeLimit=max(1, math.ceil(limit)))
    finally:
        cfn.CFN.timerStop()
    return time.perf_counter() - start


def layoutopt_time_limit(problem: Problem, limit: float) -> float:
    start = time.perf_counter()
    layoutopt.solve_problem(problem, "toulbar2", time_limit=limit)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(HERE / "results"))
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args(argv)

    rows = []
    load_average = os.getloadavg()[0]
    for load in LOADS:
        busy = []
        if load != LOADS[0]:  # one spinning process per core: the solver loses about half a core
            spin = [sys.executable, "-c", "while True: pass"]
            busy = [subprocess.Popen(spin) for _ in range(os.cpu_count() or 1)]
        try:
            for limit in LIMITS:
                for repeat in range(args.repeats):
                    problem = hard_instance(repeat)
                    native = native_time_limit(problem, limit)
                    ours = layoutopt_time_limit(problem, limit)
                    rows.append({"load": load, "limit_s": limit, "repeat": repeat,
                                 "native_wall_s": round(native, 4), "layoutopt_wall_s": round(ours, 4)})
                    print(rows[-1], flush=True)
        finally:
            for process in busy:
                process.kill()
                process.wait()

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "toulbar2_time_limit.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    info = stamp()
    lines = [
        "# toulbar2 time limits: wall time / requested limit",
        "",
        f"{info['date']}; {info['machine']}; {info['versions']}",
        "",
        "Instance: uniform random costs, random 6-regular graph, 80 nodes, 8 choices (never solved in time).",
        "`native`: pytoulbar2 `Solve(timeLimit=ceil(limit))` (CPU seconds). `layoutopt`: the `toulbar2`",
        f"back-end (wall-clock alarm). Load average when the run started: {load_average:.1f}.",
        "",
        "| load | limit | native wall / limit | layoutopt wall / limit |",
        "|---|---|---|---|",
    ]
    for load in LOADS:
        for limit in LIMITS:
            mine = [r for r in rows if r["load"] == load and r["limit_s"] == limit]
            native = max(r["native_wall_s"] for r in mine) / limit
            ours = max(r["layoutopt_wall_s"] for r in mine) / limit
            lines.append(f"| {load} | {limit:g} s | {native:.2f}x | {ours:.3f}x |")
    lines += ["", f"Worst of {args.repeats} runs per cell."]
    (out / "toulbar2_time_limit.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())

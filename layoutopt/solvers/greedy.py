"""``greedy``: each node's fastest kernel, then a repair of forbidden pairs.

This is the "per-operator best kernel" (TVM's *history best*) baseline: it ignores
transform costs except where they are forbidden (``inf``).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from ..problem import Problem
from . import register
from .base import Solver, SolverResult


def local_costs(problem: Problem, i: int, assignment: np.ndarray) -> np.ndarray:
    """Cost of each choice of node ``i`` given its neighbours' current choices."""
    total = problem.node_costs[i].copy()
    for j in problem.neighbors(i):
        total += problem.edge(i, j)[:, assignment[j]]
    return total


@register
class Greedy(Solver):
    """Per-node argmin, then repair: while a node sits on a forbidden entry, move it to its
    locally cheapest choice (at most ``max_repair_rounds`` sweeps)."""

    name = "greedy"
    exact = False
    options: ClassVar[dict[str, Any]] = {"max_repair_rounds": 20}

    def solve(self, problem: Problem, time_limit: float | None, **options: Any) -> SolverResult:
        rounds = int(options.get("max_repair_rounds", 20))
        assignment = np.array([int(np.argmin(c)) for c in problem.node_costs], dtype=np.int64)
        repairs = 0
        for _ in range(rounds):
            bad = {
                n for (i, j), m in problem.edges.items() if not np.isfinite(m[assignment[i], assignment[j]])
                for n in (i, j)
            }
            if not bad:
                break
            for i in sorted(bad):
                best = int(np.argmin(local_costs(problem, i, assignment)))
                if best != assignment[i]:
                    assignment[i] = best
                    repairs += 1
        feasible = np.isfinite(problem.evaluate(assignment))
        return SolverResult(
            assignment,
            "feasible" if feasible else "infeasible",
            message="" if feasible else "greedy repair found no allowed assignment (not a proof)",
            stats={"repairs": repairs},
        )

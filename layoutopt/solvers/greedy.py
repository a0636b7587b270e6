"""``greedy``: each node's fastest kernel, then a repair of forbidden pairs.

This is the "per-operator best kernel" (TVM's *history best*) baseline: it ignores
transform costs except where they are forbidden (``inf``).

Example:
    >>> import networkx as nx, layoutopt
    >>> sol = layoutopt.solve(nx.path_graph(2), {"nodes": {0: [1, 2], 1: [3, 1]},
    ...                                          "edges": {(0, 1): [[0, 5], [5, 0]]}}, method="greedy")
    >>> sol.assignment, sol.objective, sol.status
    ({0: 0, 1: 1}, 7.0, 'feasible')
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from ..problem import Problem
from .base import Deadline, Option, Solver, SolverResult, register
from .budget import repair


def local_costs(problem: Problem, i: int, assignment: np.ndarray) -> np.ndarray:
    """Cost of each choice of node ``i`` given its neighbours' current choices."""
    total = problem.node_costs[i].copy()
    for j in problem.neighbors(i):
        total += problem.edge(i, j)[:, assignment[j]]
    return total


@register
class Greedy(Solver):
    """Per-node argmin, then repair: while a node sits on a forbidden entry, move it to its
    locally cheapest choice (at most ``max_repair_rounds`` sweeps, and no sweep after the time limit).
    Under a memory budget, an assignment over it is then repaired (:func:`~.budget.repair`: lighter
    choices, the least cost per byte saved first), or none is returned."""

    name = "greedy"
    exact = False
    options: ClassVar[dict[str, Option]] = {
        "max_repair_rounds": Option.integer(20, "sweeps of the repair of forbidden pairs", minimum=0),
    }

    def solve(self, problem: Problem, deadline: Deadline, options: Mapping[str, Any]) -> SolverResult:
        packed = problem._packing
        # each node's first cheapest choice, for every node at once
        cheapest = np.flatnonzero(packed.node_flat == np.repeat(packed.node_min, packed.node_size))
        assignment = cheapest[np.searchsorted(cheapest, packed.node_start)] - packed.node_start
        repairs = 0
        pairs = np.stack([packed.edge_i, packed.edge_j])
        for _ in range(options["max_repair_rounds"]):
            if deadline.expired():
                break
            rows, cols = assignment[packed.edge_i], assignment[packed.edge_j]
            forbidden = packed.edge_flat[packed.edge_start + rows * packed.edge_cols + cols] == np.inf
            if not forbidden.any():
                break
            for i in np.unique(pairs[:, forbidden]).tolist():
                best = int(np.argmin(local_costs(problem, i, assignment)))
                if best != assignment[i]:
                    assignment[i] = best
                    repairs += 1
        feasible = np.isfinite(problem.evaluate(assignment))
        stats = {"repairs": repairs}
        if feasible and not problem.fits(assignment):
            # the cheapest choices hold too much: lighter ones, the least cost per byte saved first
            if not repair(problem, assignment, deadline):
                return SolverResult(None, "infeasible", None, "greedy found no assignment within the "
                                    "memory budget (not a proof)", stats)
            stats["memory_repaired"] = True
        return SolverResult(
            assignment,
            "feasible" if feasible else "infeasible",
            message="" if feasible else "greedy repair found no allowed assignment (not a proof)",
            stats=stats,
        )

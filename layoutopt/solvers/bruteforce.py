"""``bruteforce``: enumerate every assignment. The reference that tests check others against."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..errors import ProblemError
from ..problem import Problem, sum_down
from .base import Deadline, Solver, SolverResult, register

MAX_ASSIGNMENTS = 10**6


@register
class BruteForce(Solver):
    """Exhaustive search over the full cost tensor (numpy broadcasting).

    Refuses problems with more than ``10**6`` assignments; under a memory budget the assignments over
    it are masked out (exact). Under a time limit it adds the cost
    tables one by one; if the time runs out first, it returns the best assignment of the tables
    added so far with a certified bound (their minimum plus the least entry of every other table).

    Example:
        >>> import networkx as nx, layoutopt
        >>> costs = {"nodes": {0: [1, -2], 1: [3, 1]}, "edges": {(0, 1): [[0, 5], [5, 0]]}}
        >>> layoutopt.solve(nx.path_graph(2), costs, method="bruteforce").objective
        -1.0
    """

    name = "bruteforce"
    exact = True

    def solve(self, problem: Problem, deadline: Deadline, options: Mapping[str, Any]) -> SolverResult:
        sizes = problem.sizes
        free = [i for i, k in enumerate(sizes) if k > 1]  # K=1 nodes have no choice
        digits = math.fsum(math.log10(sizes[i]) for i in free)
        if digits > math.log10(MAX_ASSIGNMENTS) + 1e-9:
            raise ProblemError(
                f"bruteforce refuses 10^{digits:.1f} assignments (more than {MAX_ASSIGNMENTS:.0e}); "
                f"use method='auto' or 'dp'"
            )
        count = math.prod(sizes[i] for i in free)
        axis = {i: a for a, i in enumerate(free)}
        shape = [sizes[i] for i in free]

        def expand(values: np.ndarray, axes: list[int]) -> np.ndarray:
            view = [1] * len(shape)
            for a, size in zip(axes, values.shape, strict=True):
                view[a] = size
            order = np.argsort(axes)  # np.reshape needs the axes in increasing order
            return values.transpose(order).reshape(view) if len(axes) > 1 else values.reshape(view)

        # Every table as (axes, values), those without a free node folded into a constant.
        tables: list[tuple[list[int], np.ndarray]] = []
        constants = []
        for i, c in enumerate(problem.node_costs):
            if i in axis:
                tables.append(([axis[i]], c))
            else:
                constants.append(float(c[0]))
        for (i, j), m in problem.edges.items():
            kept = [axis[n] for n in (i, j) if n in axis]
            sub = m[tuple(slice(None) if n in axis else 0 for n in (i, j))]
            if kept:
                tables.append((kept, sub))
            else:
                constants.append(float(sub))
        total = np.zeros(shape)
        added = 0
        for axes, values in tables:
            if deadline.expired():
                break
            total = total + expand(values, axes)
            added += 1
        if problem.memory_budget is not None:  # the assignments over the budget are out
            memory = np.zeros(shape)
            for i, vector in enumerate(problem.node_memory):
                if i in axis:
                    memory = memory + expand(vector, [axis[i]])
            fixed = math.fsum(float(vector[0]) for i, vector in enumerate(problem.node_memory)
                              if i not in axis)
            # the tensor's float sums may round either way: a margin of their rounding keeps every
            # assignment within the budget by its exact sum (Problem.fits); those over it are dropped below
            largest = math.fsum(float(vector.max()) for vector in problem.node_memory)
            margin = len(problem) * 2.0**-50 * largest
            total = np.where(memory + fixed <= problem.memory_budget + margin, total, math.inf)

        def unravel(flat: int) -> np.ndarray:
            assignment = np.zeros(len(problem), dtype=np.int64)
            for a, k in enumerate(np.unravel_index(flat, shape) if shape else ()):
                assignment[free[a]] = k
            return assignment

        flat = int(np.argmin(total)) if total.size else 0
        assignment = unravel(flat)
        while total.size and total.flat[flat] < math.inf and not problem.fits(assignment):
            total.flat[flat] = math.inf  # within the budget by the tensor's float sum, not by the exact one
            flat = int(np.argmin(total))
            assignment = unravel(flat)
        best = float(total.flat[flat]) if total.size else 0.0
        stats = {"assignments": count, "tables_added": added, "tables": len(tables)}
        rest = [float(values.min()) for _, values in tables[added:]]
        bound = sum_down([best, *constants, *rest])
        if added < len(tables):
            return SolverResult(assignment, "feasible", bound,
                                f"time limit reached after adding {added} of {len(tables)} cost tables; "
                                "lower_bound is their minimum plus the least entry of the others", stats)
        if not math.isfinite(bound):
            what = "costs inf" if problem.memory_budget is None else "costs inf or is over the memory budget"
            return SolverResult(None, "infeasible", math.inf, f"every assignment {what}", stats)
        return SolverResult(assignment, "optimal", bound, stats=stats)

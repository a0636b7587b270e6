"""``bruteforce``: enumerate every assignment. The reference that tests check others against."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..errors import ProblemError
from ..problem import Problem
from . import register
from .base import Solver, SolverResult

MAX_ASSIGNMENTS = 10**6


@register
class BruteForce(Solver):
    """Exhaustive search over the full cost tensor (numpy broadcasting).

    Refuses problems with more than ``10**6`` assignments.
    """

    name = "bruteforce"
    exact = True

    def solve(self, problem: Problem, time_limit: float | None, **options: Any) -> SolverResult:
        free = [i for i, k in enumerate(problem.sizes) if k > 1]  # K=1 nodes have no choice
        count = math.prod(problem.sizes[i] for i in free)
        if count > MAX_ASSIGNMENTS:
            raise ProblemError(
                f"bruteforce refuses {count:.3g} assignments (> {MAX_ASSIGNMENTS:.0e}); "
                f"use method='auto' or 'dp'"
            )
        axis = {i: a for a, i in enumerate(free)}
        shape = [problem.sizes[i] for i in free]
        total = np.zeros(shape)
        constant = 0.0

        def expand(values: np.ndarray, axes: list[int]) -> np.ndarray:
            view = [1] * len(shape)
            for a, size in zip(axes, values.shape, strict=True):
                view[a] = size
            order = np.argsort(axes)  # np.reshape needs the axes in increasing order
            return values.transpose(order).reshape(view) if len(axes) > 1 else values.reshape(view)

        for i, c in enumerate(problem.node_costs):
            if i in axis:
                total = total + expand(c, [axis[i]])
            else:
                constant += c[0]
        for (i, j), m in problem.edges.items():
            kept = [(axis[n], dim) for dim, n in enumerate((i, j)) if n in axis]
            sub = m[tuple(slice(None) if n in axis else 0 for n in (i, j))]
            if kept:
                total = total + expand(sub, [a for a, _ in kept])
            else:
                constant += float(sub)
        flat = int(np.argmin(total)) if total.size else 0
        best = float(total.flat[flat]) + constant if total.size else constant
        assignment = np.zeros(len(problem), dtype=np.int64)
        for a, k in enumerate(np.unravel_index(flat, shape) if shape else ()):
            assignment[free[a]] = k
        if not math.isfinite(best):
            return SolverResult(None, "infeasible", math.inf, "every assignment costs inf",
                                {"assignments": count})
        return SolverResult(assignment, "optimal", best, stats={"assignments": count})

"""``auto``: exact whenever an engine proves the optimum in time, else the best heuristic answer.

The plan, in order:

1. **Exact reductions** (:func:`~layoutopt.solvers.reductions.reduce`). When they leave no
   kernel (series-parallel graphs: ResNet, Inception, SSD shapes) the answer is optimal.
2. **Variable elimination** (``dp``) on the kernel when the largest table of its min-fill
   order has at most ``dp_max_table`` entries (checked symbolically first).
3. Otherwise an **exact engine on the kernel**: ``toulbar2`` when installed (HBFS with soft
   arc consistency bounds: the fastest exact solver measured on these problems), else
   ``cpsat``, with 90 % of the time left. When it stops early its best assignment (or, if
   it has none, its ``pbqp`` fallback, made before its search starts unless that is cheap)
   is returned as ``"feasible"`` with the engine's certified lower bound (or, when it has
   none, the sum of the kernel's node minima, valid because costs are non-negative).

``stats["engine"]`` names what ran (``"reductions"``, ``"dp"``, ``"toulbar2"`` or
``"cpsat"``); ``stats`` also holds the reduction counts and the time of each phase.

Example:
    >>> import networkx as nx, layoutopt
    >>> g = nx.path_graph(3)
    >>> costs = {"nodes": {0: [1, 2], 1: [3, 1], 2: [0, 4]},
    ...          "edges": {(0, 1): [[0, 5], [5, 0]], (1, 2): [[0, 1], [1, 0]]}}
    >>> sol = layoutopt.solve(g, costs)
    >>> sol.objective, sol.status, sol.stats["engine"]
    (4.0, 'optimal', 'reductions')
"""

from __future__ import annotations

import math
import time
from typing import Any, ClassVar

import numpy as np

from ..errors import ProblemError
from ..problem import Problem
from . import get_solver, register, registered
from .base import Solver, SolverResult
from .dp import TableTooLarge, eliminate, elimination_order
from .reductions import reduce


def exact_engine() -> str:
    """The exact engine ``auto`` runs on a kernel too wide for ``dp``."""
    if "toulbar2" in registered() and get_solver("toulbar2").is_available():
        return "toulbar2"
    return "cpsat"


@register
class Auto(Solver):
    """Reductions, then dp or an exact engine on the kernel (see the module docstring).

    Options:
        dp_max_table: use variable elimination when its largest table has at most this
            many entries; above, use the exact engine.
    """

    name = "auto"
    exact = True
    options: ClassVar[dict[str, Any]] = {"dp_max_table": 1e5}

    def solve(self, problem: Problem, time_limit: float | None, **options: Any) -> SolverResult:
        start = time.perf_counter()
        cap = options.get("dp_max_table", 1e5)
        if isinstance(cap, bool) or not isinstance(cap, (int, float)) or not cap >= 0:
            raise ProblemError(f"dp_max_table must be a non-negative number of entries, got {cap!r}")
        reduction = reduce(problem)
        stats: dict[str, Any] = dict(reduction.stats)
        stats["reduce_time"] = time.perf_counter() - start
        if reduction.infeasible is not None:
            stats["engine"] = "reductions"
            return SolverResult(None, "infeasible", math.inf, reduction.infeasible, stats)
        kernel = reduction.kernel
        if not len(kernel):
            stats["engine"] = "reductions"
            return SolverResult(reduction.expand([]), "optimal", reduction.constant, "", stats)

        try:
            order, largest = elimination_order(kernel, cap)
        except TableTooLarge:
            pass
        else:
            stats["engine"] = "dp"
            stats["largest_table"] = largest
            phase = time.perf_counter()
            choices, value = eliminate(kernel, order)
            stats["engine_time"] = time.perf_counter() - phase
            if choices is None:
                return SolverResult(None, "infeasible", math.inf, "every assignment costs inf", stats)
            return SolverResult(reduction.expand(choices), "optimal", reduction.lower_bound(value), "", stats)

        return self._solve_kernel(problem, reduction, time_limit, start, stats)

    def _solve_kernel(self, problem, reduction, time_limit, start, stats) -> SolverResult:
        kernel = reduction.kernel
        engine = exact_engine()
        stats["engine"] = engine
        solver_cls = get_solver(engine)
        remaining = None
        if time_limit is not None:
            # Keep back a tenth of what is left: the engine's stop, the expansion and the
            # recomputation of the objective run after its deadline.
            remaining = max(0.9 * (time_limit - (time.perf_counter() - start)), 1e-3)
        phase = time.perf_counter()
        result = solver_cls().solve(kernel, remaining, **solver_cls.options)
        stats["engine_time"] = time.perf_counter() - phase
        stats["engine_stats"] = result.stats

        if result.status == "optimal":  # the front end sets lower_bound to the recomputed objective
            lower = None if result.lower_bound is None else reduction.lower_bound(result.lower_bound)
            return SolverResult(reduction.expand(result.assignment), "optimal", lower, result.message, stats)
        # Both engines return their pbqp fallback when the search found nothing in time.
        candidates = [] if result.assignment is None else [np.asarray(result.assignment)]
        values = [kernel.evaluate(a) for a in candidates]
        bound = result.lower_bound
        if bound is None or not bound > -math.inf:
            bound = math.fsum(float(c.min()) for c in kernel.node_costs)  # costs are >= 0
        if not values or not math.isfinite(min(values)):
            if result.status == "infeasible" and bound == math.inf:
                return SolverResult(None, "infeasible", math.inf, result.message, stats)
            message = result.message or f"{engine} found no allowed assignment within the time limit"
            return SolverResult(None, "infeasible", None, message, stats)
        best = reduction.expand(candidates[0])
        return SolverResult(best, "feasible", reduction.lower_bound(bound), result.message, stats)

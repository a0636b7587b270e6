"""The one entry point: :func:`solve`, plus :func:`methods`."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any

import networkx as nx
import numpy as np

from .errors import ProblemError
from .problem import Costs, Problem
from .solution import Solution
from .solvers import get_solver, registered
from .solvers.base import SolverResult

__all__ = ["methods", "solve", "solve_problem"]


def methods() -> list[str]:
    """Names of the methods available in this environment (their extras installed).

    Example:
        >>> "pbqp" in methods() and "bruteforce" in methods()
        True
    """
    return [name for name in registered() if get_solver(name).is_available()]


def _check_time_limit(time_limit: Any) -> float | None:
    if time_limit is None:
        return None
    if isinstance(time_limit, bool) or not isinstance(time_limit, (int, float, np.number)):
        raise ProblemError(f"time_limit must be a number of seconds or None, not {time_limit!r}")
    if not time_limit > 0 or math.isnan(time_limit):
        raise ProblemError(f"time_limit must be positive, got {time_limit!r}")
    return float(time_limit)


def solve(
    graph: nx.Graph,
    costs: Costs | Mapping | None = None,
    method: str = "auto",
    time_limit: float | None = None,
    **options: Any,
) -> Solution:
    """Choose one option per node of ``graph`` minimising node plus edge costs.

    Args:
        graph: a networkx ``Graph``/``DiGraph`` (direction does not change the objective;
            a multigraph's parallel edges are summed). Node attribute ``"choices"`` may hold
            a label per choice.
        costs: ``{"nodes": {node: vector}, "edges": {(u, v): matrix}}`` or a
            :class:`~layoutopt.Costs`; ``None`` reads the ``"cost"`` node and edge attributes.
            ``edges[(u, v)]`` has shape ``(len(nodes[u]), len(nodes[v]))``; ``(v, u)`` with
            the transposed matrix is accepted too. ``+inf`` forbids a choice or pair.
        method: a name from :func:`methods` (``"auto"``, ``"pbqp"``, ``"dp"``, ``"cpsat"``,
            ``"mip"``, ``"greedy"``, ``"bruteforce"``, ``"toulbar2"``).
        time_limit: wall-clock budget in seconds, or None.
        **options: method-specific options (unknown ones raise ProblemError).

    Returns:
        A :class:`~layoutopt.Solution`; ``objective`` is recomputed from ``costs``.

    Raises:
        ProblemError: bad input, naming the node, edge, method or option at fault.

    Example:
        >>> import networkx as nx, layoutopt
        >>> g = nx.DiGraph([("conv1", "conv2")])
        >>> g.nodes["conv1"]["choices"] = g.nodes["conv2"]["choices"] = ["NCHW8c", "NCHW16c"]
        >>> sol = layoutopt.solve(g, {"nodes": {"conv1": [2.0, 1.0], "conv2": [1.0, 1.5]},
        ...                           "edges": {("conv1", "conv2"): [[0, 0.2], [0.2, 0]]}})
        >>> sol.labels, sol.objective, sol.status
        ({'conv1': 'NCHW16c', 'conv2': 'NCHW8c'}, 2.2, 'optimal')
    """
    start = time.perf_counter()
    solver_cls = get_solver(method)
    time_limit = _check_time_limit(time_limit)
    _check_options(solver_cls, options)
    problem = Problem.from_graph(graph, costs)
    return solve_problem(problem, method, time_limit, _start=start, **options)


def _check_options(solver_cls: type, options: Mapping[str, Any]) -> None:
    unknown = set(options) - set(solver_cls.options)
    if unknown:
        accepted = ", ".join(sorted(solver_cls.options)) or "none"
        raise ProblemError(
            f"unknown option(s) {', '.join(sorted(unknown))} for method {solver_cls.name!r}; "
            f"accepted: {accepted}"
        )
    solver_cls.validate_options({**solver_cls.options, **options})


def solve_problem(
    problem: Problem,
    method: str = "auto",
    time_limit: float | None = None,
    *,
    _start: float | None = None,
    **options: Any,
) -> Solution:
    """Like :func:`solve`, on an already validated :class:`~layoutopt.Problem`.

    Useful to run several methods on one instance without validating it each time.

    Example:
        >>> import networkx as nx
        >>> p = Problem.from_graph(nx.path_graph(2), {"nodes": {0: [1, 2], 1: [3, 1]},
        ...                                           "edges": {(0, 1): [[0, 5], [5, 0]]}})
        >>> solve_problem(p, "bruteforce").objective
        3.0
    """
    start = time.perf_counter() if _start is None else _start
    solver_cls = get_solver(method)
    time_limit = _check_time_limit(time_limit)
    _check_options(solver_cls, options)
    solver_cls.check_available()
    options = {**solver_cls.options, **options}

    culprit = problem.infeasibility_culprit()
    if culprit is not None:
        result = SolverResult(None, "infeasible", math.inf, culprit)
    else:
        remaining = None if time_limit is None else max(time_limit - (time.perf_counter() - start), 1e-3)
        result = solver_cls().solve(problem, remaining, **options)
    return _finish(problem, result, method, solver_cls.exact, start)


def _finish(problem: Problem, result: SolverResult, method: str, exact: bool, start: float) -> Solution:
    """Recompute the objective from the original costs and make the status honest."""
    if result.assignment is None:
        lower = result.lower_bound if result.lower_bound is not None else -math.inf
        return Solution({}, {}, math.inf, lower, "infeasible", method,
                        time.perf_counter() - start, result.message, result.stats)

    index = [int(k) for k in result.assignment]
    objective = problem.evaluate(index)
    status = result.status
    lower = -math.inf if result.lower_bound is None else float(result.lower_bound)
    message = result.message
    if not math.isfinite(objective):
        status = "infeasible"
        if lower < math.inf:
            message = message or "no allowed assignment was found (infeasibility not proven)"
    elif status == "optimal":
        if not exact and lower < objective:
            status = "feasible"  # a heuristic's "optimal" must come with a matching bound
        else:
            lower = objective
    elif status == "infeasible":
        status = "feasible"
    if math.isfinite(objective) and lower > objective + 1e-9 * max(1.0, abs(objective)):
        raise AssertionError(  # a solver bug, never user error: refuse to hide it
            f"method {method!r} reported lower bound {lower} above its objective {objective}"
        )
    assignment = dict(zip(problem.nodes, index, strict=True))
    labels = {n: problem.label(i, k) for i, (n, k) in enumerate(assignment.items())}
    return Solution(assignment, labels, objective, lower, status, method,
                    time.perf_counter() - start, message, result.stats)

"""The one entry point: :func:`solve` (:func:`solve_problem` for a built Problem), and :func:`methods`."""

from __future__ import annotations

import math
import numbers
import time
from collections.abc import Mapping
from typing import Any

import networkx as nx
import numpy as np

from .errors import InternalError, ProblemError
from .problem import Costs, Problem, format_bytes
from .solution import OPTIMALITY_TOLERANCE, Solution
from .solvers import get_solver, registered
from .solvers.base import Deadline, Solver, SolverResult
from .solvers.budget import infeasible_message, precheck, smallest_memory

__all__ = ["check_method", "check_time_limit", "methods", "solve", "solve_problem"]


def methods() -> list[str]:
    """Names of the methods available in this environment (their extras installed).

    Example:
        >>> "pbqp" in methods() and "bruteforce" in methods()
        True
    """
    return [name for name in registered() if get_solver(name).is_available()]


def check_method(method: str = "auto", time_limit: float | None = None, **options: Any) -> None:
    """Raise :class:`~layoutopt.ProblemError` now if :func:`solve` would refuse ``method``,
    ``time_limit`` or ``options``: for callers with expensive work to do before they solve.

    Example:
        >>> check_method("pbqp", time_limit=10)
        >>> check_method("simplex")
        Traceback (most recent call last):
        ...
        layoutopt.errors.ProblemError: unknown method 'simplex'...
    """
    _prepare(method, time_limit, options)


def check_time_limit(time_limit: Any) -> float | None:
    """A ``time_limit`` as :func:`solve` takes it: seconds, or None for no limit (``inf`` too).

    Raises:
        ProblemError: not a positive number of seconds (for callers that check before running).

    Example:
        >>> check_time_limit(2), check_time_limit(float("inf"))
        (2.0, None)
    """
    if time_limit is None:
        return None
    if isinstance(time_limit, (bool, np.bool_)) or not isinstance(time_limit, numbers.Real):
        raise ProblemError(f"time_limit must be a number of seconds or None, not {time_limit!r}")
    if not time_limit > 0:  # also NaN
        raise ProblemError(f"time_limit must be positive, got {time_limit!r}")
    return None if time_limit == math.inf else float(time_limit)


def _prepare(method: Any, time_limit: Any, options: Mapping[str, Any]) -> tuple[type[Solver], float | None,
                                                                                dict[str, Any]]:
    """Check the call's arguments, once, before any work: the method, its options, the time limit."""
    solver_cls = get_solver(method)
    time_limit = check_time_limit(time_limit)
    resolved = solver_cls.resolve_options(options)
    solver_cls.check_available()
    return solver_cls, time_limit, resolved


def solve(
    graph: nx.Graph,
    costs: Costs | Mapping | None = None,
    method: str = "auto",
    time_limit: float | None = None,
    *,
    memory: Mapping | None = None,
    memory_budget: float | None = None,
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
            the transposed matrix is accepted too. Costs are finite reals (negative ones too);
            ``+inf`` forbids a choice or pair.
        method: a name from :func:`methods` (``"auto"``, ``"pbqp"``, ``"dp"``, ``"cpsat"``,
            ``"mip"``, ``"greedy"``, ``"bruteforce"``, ``"toulbar2"``).
        time_limit: wall-clock budget in seconds for the whole call (validation and model
            building included), or None (or ``inf``) for none.
        memory: bytes per choice, shaped like ``costs["nodes"]``: ``{"nodes": {node: vector}}``
            (non-negative finite numbers; a node left out holds 0 bytes). None reads the
            ``"memory"`` node attribute where a node has one.
        memory_budget: the most bytes the chosen choices may hold together, or None (None reads
            ``graph.graph["memory_budget"]``; no budget without either). A budget below the smallest
            allowed assignment's memory gives ``status="infeasible"`` with that figure in ``message``.
        **options: method-specific options (unknown ones and bad values raise ProblemError).

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
    solver_cls, time_limit, resolved = _prepare(method, time_limit, options)
    problem = Problem.from_graph(graph, costs, memory, memory_budget)
    return _run(problem, solver_cls, Deadline(time_limit, start), resolved, start)


def solve_problem(
    problem: Problem,
    method: str = "auto",
    time_limit: float | None = None,
    **options: Any,
) -> Solution:
    """Like :func:`solve`, on a :class:`~layoutopt.Problem` built (and so validated) once.

    The way to run several methods, or several solves, on one instance without validating its
    costs each time. The problem's memory figures and budget (``Problem.from_graph(...,
    memory=..., memory_budget=...)``, :meth:`~layoutopt.Problem.with_memory_budget`) hold.

    Example:
        >>> import networkx as nx
        >>> p = Problem.from_graph(nx.path_graph(2), {"nodes": {0: [1, 2], 1: [3, 1]},
        ...                                           "edges": {(0, 1): [[0, 5], [5, 0]]}})
        >>> solve_problem(p, "bruteforce").objective, solve_problem(p, "pbqp").objective
        (3.0, 3.0)
    """
    start = time.perf_counter()
    if not isinstance(problem, Problem):
        raise ProblemError(f"solve_problem takes a layoutopt.Problem (see Problem.from_graph), "
                           f"not {type(problem).__name__}; layoutopt.solve takes a graph and costs")
    solver_cls, time_limit, resolved = _prepare(method, time_limit, options)
    return _run(problem, solver_cls, Deadline(time_limit, start), resolved, start)


def _run(problem: Problem, solver_cls: type[Solver], deadline: Deadline, options: dict[str, Any],
         start: float) -> Solution:
    culprit = problem.infeasibility_culprit()
    if culprit is not None:
        result = SolverResult(None, "infeasible", math.inf, culprit)
    else:
        result = precheck(problem, deadline) or solver_cls().solve(problem, deadline, options)
        if result.assignment is None and result.lower_bound == math.inf and problem.memory_budget is not None:
            result.message = _budget_reason(problem, deadline, result.message)
    return _finish(problem, result, solver_cls.name, start)


def _budget_reason(problem: Problem, deadline: Deadline, message: str) -> str:
    """The message of a problem proven infeasible under a budget: the budget's fault when the smallest
    allowed assignment needs more (found by forbidden pairs only a solve sees), else the solver's."""
    smallest = smallest_memory(problem, deadline)
    if math.isfinite(smallest.memory) and smallest.proven and smallest.memory > problem.memory_budget:
        return infeasible_message(smallest.memory, problem.memory_budget)
    return message


def _finish(problem: Problem, result: SolverResult, method: str, start: float) -> Solution:
    """Recompute the objective from the original costs and decide the status from the bound, for
    every method alike: ``"optimal"`` exactly when the certified bound is within the tolerance."""
    if result.assignment is None:
        lower = result.lower_bound if result.lower_bound is not None else -math.inf
        return Solution({}, {}, math.inf, lower, "infeasible", method,
                        time.perf_counter() - start, result.message, result.stats)

    index = np.asarray(result.assignment, dtype=np.int64).tolist()
    objective = problem.evaluate(index)
    memory = None if problem.memory_flat is None else problem.memory_of(index)
    lower = -math.inf if result.lower_bound is None else float(result.lower_bound)
    message = result.message
    if memory is not None and problem.memory_budget is not None and memory > problem.memory_budget:
        status = "infeasible"
        if result.status == "optimal":  # a solver bug, never user error
            raise InternalError(f"method {method!r} claimed optimal an assignment of {memory!r} bytes, over "
                                f"the memory budget of {problem.memory_budget!r}")
        message = message or (f"the assignment found needs {format_bytes(memory)}, over the memory budget of "
                              f"{format_bytes(problem.memory_budget)} (infeasibility not proven)")
    elif not math.isfinite(objective):
        status = "infeasible"
        if lower < math.inf:
            message = message or "no allowed assignment was found (infeasibility not proven)"
    else:
        tolerance = OPTIMALITY_TOLERANCE * problem.magnitude(index)
        if lower > objective:
            if lower - objective > tolerance:  # a solver bug, never user error: refuse to hide it
                raise InternalError(
                    f"method {method!r} reported lower bound {lower!r} above its objective {objective!r}"
                )
            lower = objective  # an exact float engine's rounding (its sums run in another order)
        if objective - lower <= tolerance:
            status, message = "optimal", ""
        else:
            status = "feasible"
            if result.status == "optimal" and not message:
                message = (f"{method}'s proof leaves a certified gap of {objective - lower:.3g}, above the "
                           f"optimality tolerance ({tolerance:.3g})")
    assignment = dict(zip(problem.nodes, index, strict=True))
    labels = {n: k if names is None else names[k]  # Problem.label, without a call per node
              for n, k, names in zip(problem.nodes, index, problem.labels, strict=True)}
    return Solution(assignment, labels, objective, lower, status, method,
                    time.perf_counter() - start, message, result.stats, memory)

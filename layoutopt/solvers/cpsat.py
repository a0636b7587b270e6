"""``cpsat``: OR-Tools CP-SAT on the marginal (local-polytope) encoding.

The encoding (:mod:`~layoutopt.solvers.marginal`) has a Boolean per allowed node choice and per
finite edge entry; forbidden entries get no variable, never a big-M. CP-SAT needs integer costs:
they are scaled by a power of two and rounded (:mod:`~layoutopt.solvers.scaling`), and the bound
reported is certified for the original float costs (the scaled bound minus the largest possible
rounding error).

Parameters: CP-SAT's default portfolio stalls on 2 cores (its only full-problem worker's LP misses
the exactly-one constraints presolve creates, and the bound never closes on the ResNet-50 and
DenseNet-121 presets). The ``max_lp`` subsolver with probing
off proves both optimal within seconds, so on 1-2 workers it is the only full-problem subsolver;
with more workers it is added in front of CP-SAT's default portfolio.
"""

from __future__ import annotations

import math
import os
import time
from typing import Any, ClassVar

import numpy as np

from ..errors import ProblemError
from ..problem import Problem
from . import get_solver, register, registered
from .base import Solver, SolverResult
from .marginal import marginal_model
from .scaling import scale_costs, status_from_bound

__all__ = ["CpSat", "available_cores", "heuristic_assignment"]


def available_cores() -> int:
    """Cores this process may run on (CPU affinity when the platform reports it)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def heuristic_assignment(problem: Problem) -> np.ndarray | None:
    """A quick allowed assignment to warm-start exact solvers: ``pbqp`` when registered, else ``greedy``.

    Returns None when the heuristic finds no assignment of finite cost.

    Example:
        >>> import networkx as nx
        >>> p = Problem.from_graph(nx.path_graph(2), {"nodes": {0: [1, 2], 1: [3, 1]},
        ...                                           "edges": {(0, 1): [[0, 5], [5, 0]]}})
        >>> heuristic_assignment(p).tolist() in ([0, 0], [1, 1])
        True
    """
    name = "pbqp" if "pbqp" in registered() else "greedy"
    result = get_solver(name)().solve(problem, None, **get_solver(name).options)
    if result.assignment is None:
        return None
    assignment = np.asarray(result.assignment, dtype=np.int64)
    return assignment if math.isfinite(problem.evaluate(assignment)) else None


def _positive_int_or_none(name: str, value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ProblemError(f"option {name} must be a positive integer or None, not {value!r}")
    return int(value)


@register
class CpSat(Solver):
    """OR-Tools CP-SAT, warm-started from a heuristic solution.

    Options:
        num_workers: CP-SAT worker threads (default: every available core).
        hint: warm-start from the ``pbqp`` (or ``greedy``) solution (default True).

    Example:
        >>> import networkx as nx, layoutopt
        >>> costs = {"nodes": {0: [1.0, 2.0], 1: [3.0, 1.0]}, "edges": {(0, 1): [[0.0, 5.0], [5.0, 0.0]]}}
        >>> sol = layoutopt.solve(nx.path_graph(2), costs, method="cpsat", num_workers=1)
        >>> sol.assignment, sol.objective, sol.status
        ({0: 1, 1: 1}, 3.0, 'optimal')
    """

    name = "cpsat"
    exact = True
    options: ClassVar[dict[str, Any]] = {"num_workers": None, "hint": True}

    @classmethod
    def validate_options(cls, options: dict[str, Any]) -> None:
        _positive_int_or_none("num_workers", options["num_workers"])

    def solve(self, problem: Problem, time_limit: float | None, **options: Any) -> SolverResult:
        from ortools.sat.python import cp_model

        start = time.perf_counter()
        workers = _positive_int_or_none("num_workers", options.get("num_workers")) or available_cores()
        scaled = scale_costs(problem)
        encoding = marginal_model(scaled.node_costs, scaled.edges)

        model = cp_model.CpModel()
        x = [model.new_bool_var("") for _ in range(encoding.literal_node.size)]
        y = [model.new_bool_var("") for _ in range(encoding.pair_first.size)]
        for literals in encoding.node_literals:
            model.add_exactly_one([x[t] for t in literals])
        for literal, pairs in encoding.marginals:
            model.add(cp_model.LinearExpr.sum([y[p] for p in pairs]) == x[literal])
        # Objective and hint go straight into the proto, in bulk: the per-variable Python API costs
        # about a second on DenseNet-121-sized models. Variable t of the proto is x[t], then the y's.
        costs = np.concatenate([encoding.literal_cost, encoding.pair_cost]).astype(np.int64)
        used = np.flatnonzero(costs)
        model.proto.objective.vars.extend(used.tolist())
        model.proto.objective.coeffs.extend(costs[used].tolist())

        hint = heuristic_assignment(problem) if options.get("hint", True) else None
        if hint is not None:
            x_values, y_values = encoding.literal_values(hint)
            model.proto.solution_hint.vars.extend(range(len(x) + len(y)))
            model.proto.solution_hint.values.extend(np.concatenate([x_values, y_values]).tolist())

        solver = cp_model.CpSolver()
        solver.parameters.num_workers = workers
        if workers <= 2:  # see the module docstring
            solver.parameters.subsolvers.append("max_lp")
        else:
            solver.parameters.extra_subsolvers.append("max_lp")
        solver.parameters.cp_model_probing_level = 0
        build_time = time.perf_counter() - start
        if time_limit is not None:
            solver.parameters.max_time_in_seconds = max(time_limit - build_time, 1e-3)
        status = solver.solve(model)

        stats = {
            "build_time": build_time,
            "cpsat_status": solver.status_name(status),
            "cpsat_wall_time": solver.wall_time,
            "variables": len(x) + len(y),
            "scale": scaled.scale,
            "rounding_error": scaled.rounding_error,
            "workers": workers,
        }
        if status == cp_model.INFEASIBLE:
            return SolverResult(None, "infeasible", math.inf,
                                "cpsat proved that every assignment uses a forbidden (inf) entry", stats)
        if status == cp_model.MODEL_INVALID:  # a bug in this module, not user error
            raise RuntimeError(f"cpsat built an invalid model: {model.validate()}")
        lower = scaled.lower_bound(solver.best_objective_bound)
        if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            values = np.array(solver.response_proto.solution, dtype=np.int64)[: len(x)]
            assignment = encoding.assignment(values)
        else:  # UNKNOWN: the time ran out before a first solution
            assignment = hint
        if assignment is None:
            return SolverResult(None, "infeasible", lower,
                                "cpsat found no allowed assignment within the time limit "
                                "(infeasibility not proven)", stats)
        objective = problem.evaluate(assignment)
        lower = min(lower, objective)
        result_status = status_from_bound(objective, lower)  # a bound meeting the incumbent is a proof
        if result_status == "optimal":
            message = ""
        elif status == cp_model.OPTIMAL:
            message = "optimal for the integer-rounded costs; lower_bound accounts for the rounding"
        else:
            message = "time limit reached; lower_bound is cpsat's best bound"
        return SolverResult(assignment, result_status, lower, message, stats)

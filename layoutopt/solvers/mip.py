"""``mip``: the marginal encoding as a mixed-integer program, through OR-Tools' ``pywraplp``.

Same formulation as ``cpsat`` (:mod:`~layoutopt.solvers.marginal`): binary ``x`` per allowed node
choice, continuous ``y`` in ``[0, 1]`` per finite edge entry (integral ``x`` forces ``y``), no
variable for forbidden entries. The local-polytope LP is nearly tight on layout problems, so a MIP
run is essentially "LP + proof".

MIP solvers use *absolute* tolerances, so the objective is multiplied by a power of two (exact in
float64) that brings its largest possible value to about 10**6 (:func:`~.scaling.cost_scale`). The
relative MIP gap is set to 0 (pywraplp's default is 1e-4). The reported bound is the MIP solver's
best bound, valid up to its numerical tolerances (not certified like ``cpsat``'s and ``toulbar2``'s).
"""

from __future__ import annotations

import math
import time
from typing import Any, ClassVar

import numpy as np

from ..errors import ProblemError
from ..problem import Problem
from . import register
from .base import Solver, SolverResult
from .cpsat import heuristic_assignment
from .marginal import marginal_model
from .scaling import cost_scale, status_from_bound

__all__ = ["BACKENDS", "Mip"]

#: ``backend=`` values and their pywraplp solver ids (all three ship with OR-Tools 9.15 wheels).
BACKENDS = {"scip": "SCIP", "cbc": "CBC", "highs": "HIGHS"}

#: Largest possible objective after scaling: a magnitude at which 1e-6-ish tolerances are negligible.
MIP_OBJECTIVE_BUDGET = 2.0**20


def _create_solver(backend: Any):
    from ortools.linear_solver import pywraplp

    if backend not in BACKENDS:
        raise ProblemError(f"unknown mip backend {backend!r}; valid backends: {', '.join(BACKENDS)}")
    solver = pywraplp.Solver.CreateSolver(BACKENDS[backend])
    if solver is None:
        available = [name for name, sid in BACKENDS.items() if pywraplp.Solver.CreateSolver(sid) is not None]
        raise ProblemError(
            f"mip backend {backend!r} is not available in this OR-Tools build; "
            f"available: {', '.join(available) or 'none'}"
        )
    solver.SuppressOutput()  # HiGHS prints a banner on stdout otherwise
    return solver


def _solve_highs(solver, x: list, time_limit: float | None) -> tuple[int, np.ndarray, float]:
    """Solve through a model request: OR-Tools 9.15's pywraplp cannot silence HiGHS (it prints a
    banner on stdout), cannot set its gaps, and crashes on ``SetHint``, so HiGHS gets no warm start.

    Returns the pywraplp status code (the response codes share its numbering), x values and bound.
    """
    from ortools.linear_solver import linear_solver_pb2, pywraplp

    request = linear_solver_pb2.MPModelRequest()
    solver.ExportModelToProto(request.model)
    request.solver_type = linear_solver_pb2.MPModelRequest.HIGHS_MIXED_INTEGER_PROGRAMMING
    request.enable_internal_solver_output = False
    request.solver_specific_parameters = "output_flag=false\nmip_rel_gap=0\nmip_abs_gap=0"
    if time_limit is not None:
        request.solver_time_limit_seconds = time_limit
    response = linear_solver_pb2.MPSolutionResponse()
    pywraplp.Solver.SolveWithProto(request, response)
    values = np.array(response.variable_value[: len(x)]) if response.variable_value else np.zeros(len(x))
    return int(response.status), values, response.best_objective_bound


@register
class Mip(Solver):
    """A MIP solver through OR-Tools, warm-started (where the backend supports hints).

    Options:
        backend: ``"scip"`` (default), ``"cbc"`` or ``"highs"``.

    Example:
        >>> import networkx as nx, layoutopt
        >>> costs = {"nodes": {0: [1.0, 2.0], 1: [3.0, 1.0]}, "edges": {(0, 1): [[0.0, 5.0], [5.0, 0.0]]}}
        >>> sol = layoutopt.solve(nx.path_graph(2), costs, method="mip", backend="highs")
        >>> sol.assignment, sol.objective, sol.status
        ({0: 1, 1: 1}, 3.0, 'optimal')
    """

    name = "mip"
    exact = True
    options: ClassVar[dict[str, Any]] = {"backend": "scip"}

    @classmethod
    def validate_options(cls, options: dict[str, Any]) -> None:
        if options["backend"] not in BACKENDS:
            raise ProblemError(
                f"unknown mip backend {options['backend']!r}; valid backends: {', '.join(BACKENDS)}"
            )

    def solve(self, problem: Problem, time_limit: float | None, **options: Any) -> SolverResult:
        from ortools.linear_solver import pywraplp

        start = time.perf_counter()
        backend = options.get("backend", "scip")
        solver = _create_solver(backend)
        scale = cost_scale(problem, MIP_OBJECTIVE_BUDGET)
        encoding = marginal_model([c * scale for c in problem.node_costs],
                                  {key: m * scale for key, m in problem.edges.items()})

        x = [solver.BoolVar("") for _ in range(encoding.literal_node.size)]
        y = [solver.NumVar(0.0, 1.0, "") for _ in range(encoding.pair_first.size)]
        for literals in encoding.node_literals:
            row = solver.Constraint(1.0, 1.0)
            for t in literals:
                row.SetCoefficient(x[t], 1.0)
        for literal, pairs in encoding.marginals:
            row = solver.Constraint(0.0, 0.0)
            row.SetCoefficient(x[literal], -1.0)
            for p in pairs:
                row.SetCoefficient(y[p], 1.0)
        objective = solver.Objective()
        for var, cost in zip(x + y, np.concatenate([encoding.literal_cost, encoding.pair_cost]).tolist(),
                             strict=True):
            if cost:
                objective.SetCoefficient(var, cost)
        objective.SetMinimization()

        hint = heuristic_assignment(problem)
        build_time = time.perf_counter() - start
        remaining = None if time_limit is None else max(time_limit - build_time, 1e-3)
        if backend == "highs":
            status, x_values, bound = _solve_highs(solver, x, remaining)
        else:
            if hint is not None:
                x_values, y_values = encoding.literal_values(hint)
                solver.SetHint(x + y, np.concatenate([x_values, y_values]).astype(float).tolist())
            parameters = pywraplp.MPSolverParameters()
            parameters.SetDoubleParam(parameters.RELATIVE_MIP_GAP, 0.0)
            if remaining is not None:
                solver.SetTimeLimit(max(int(remaining * 1000), 1))
            status = solver.Solve(parameters)
            solved = status in (pywraplp.Solver.OPTIMAL, pywraplp.Solver.FEASIBLE)
            # Reading values without a solution makes OR-Tools log "No solution exists" on stderr.
            x_values = np.array([v.solution_value() for v in x]) if solved else None
            bound = objective.BestBound() if solved else -math.inf

        stats = {"backend": backend, "build_time": build_time, "mip_status": status,
                 "variables": len(x) + len(y), "constraints": solver.NumConstraints(), "scale": scale}
        if status == pywraplp.Solver.INFEASIBLE:
            return SolverResult(None, "infeasible", math.inf,
                                f"mip ({backend}) proved that every assignment uses a forbidden (inf) entry",
                                stats)
        if status in (pywraplp.Solver.OPTIMAL, pywraplp.Solver.FEASIBLE):
            assignment = encoding.assignment(x_values)
            lower = bound / scale
            message = ""
        else:  # NOT_SOLVED (time limit before a first solution) or ABNORMAL
            assignment, lower = hint, -math.inf
            message = f"mip ({backend}) stopped without a solution (status {status}); using the warm start"
        if assignment is None:
            return SolverResult(None, "infeasible", lower,
                                f"mip ({backend}) found no allowed assignment within the time limit "
                                f"(infeasibility not proven)", stats)
        value = problem.evaluate(assignment)
        lower = min(lower, value)
        result_status = status_from_bound(value, lower)  # a bound meeting the incumbent is a proof
        if result_status == "optimal":
            message = ""
        elif not message:
            message = f"time limit reached; lower_bound is the {backend} best bound"
        return SolverResult(assignment, result_status, lower, message, stats)

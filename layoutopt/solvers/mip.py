"""``mip``: the marginal encoding as a mixed-integer program, through OR-Tools' ``pywraplp``.

Same formulation as ``cpsat`` (:mod:`~layoutopt.solvers.marginal`): binary ``x`` per allowed node
choice, continuous ``y`` in ``[0, 1]`` per finite edge entry (integral ``x`` forces ``y``), no
variable for forbidden entries. The local-polytope LP is nearly tight on layout problems, so a MIP
run is essentially "LP + proof".

MIP solvers use *absolute* tolerances, so each table is shifted by its least entry and multiplied by
a power of two (exact in float64) that brings the largest possible objective to about 10**6
(:func:`~.scaling.scale_costs` without rounding). The relative MIP gap is set to 0 (pywraplp's default
is 1e-4). The reported bound is the MIP solver's best bound, valid up to its numerical tolerances (not
certified like ``cpsat``'s and ``toulbar2``'s). Under a time limit the model build stops at the
deadline too, and the ``pbqp`` warm start is returned with the trivial bound. A memory budget is one
more row (the chosen choices' figures, scaled by a power of two); an answer the solver's tolerance let
over the true budget is repaired (:func:`~.budget.repair`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from .._gc import paused_gc
from ..errors import ProblemError
from ..problem import Problem
from .base import Deadline, Option, Solver, SolverResult, heuristic_assignment, register, run_until
from .budget import integer_memory, repair
from .marginal import marginal_model
from .scaling import scale_costs

__all__ = ["BACKENDS", "Mip"]

#: ``backend=`` values and their pywraplp solver ids (all three ship with OR-Tools 9.15 wheels).
BACKENDS = {"scip": "SCIP", "cbc": "CBC", "highs": "HIGHS"}

#: Largest possible objective after scaling: a magnitude at which 1e-6-ish tolerances are negligible.
MIP_OBJECTIVE_BUDGET = 2.0**20

#: coefficients set between two looks at the clock while building the model
_CHECK_EVERY = 2000


def _create_solver(backend: str):
    from ortools.linear_solver import pywraplp

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
    options: ClassVar[dict[str, Option]] = {
        "backend": Option.one_of("scip", tuple(BACKENDS), "the MIP solver pywraplp runs"),
    }

    def solve(self, problem: Problem, deadline: Deadline, options: Mapping[str, Any]) -> SolverResult:
        with paused_gc():
            return self._solve(problem, deadline, options)

    def _solve(self, problem: Problem, deadline: Deadline, options: Mapping[str, Any]) -> SolverResult:
        start = time.perf_counter()
        backend = options["backend"]
        hint = heuristic_assignment(problem, deadline)
        scaled = scale_costs(problem, MIP_OBJECTIVE_BUDGET, incumbent=hint, integral=False)
        stats: dict[str, Any] = {"backend": backend, "exponent": scaled.exponent}

        def out_of_time() -> SolverResult:
            stats["build_time"] = time.perf_counter() - start
            if hint is None:
                return SolverResult(None, "infeasible", None, f"time limit reached while building the mip "
                                    f"({backend}) model, before any assignment was found", stats)
            return SolverResult(hint, "feasible", problem.trivial_lower_bound(),
                                f"time limit reached while building the mip ({backend}) model; the "
                                "assignment is pbqp's, lower_bound the sum of the least costs", stats)

        from ortools.linear_solver import pywraplp  # after the fallback: OR-Tools' first import takes time

        solver = _create_solver(backend)
        encoding = None if deadline.expired() else marginal_model(scaled.node_costs, scaled.edges, deadline)
        if encoding is None:
            return out_of_time()
        x = [solver.BoolVar("") for _ in range(encoding.literal_node.size)]
        y: list = []
        while len(y) < encoding.pair_first.size:
            chunk = min(_CHECK_EVERY, encoding.pair_first.size - len(y))
            y.extend(solver.NumVar(0.0, 1.0, "") for _ in range(chunk))
            if deadline.expired():
                return out_of_time()

        def add_equalities(rows) -> bool:
            """Add ``sum(coefficient * variable) == value`` for each ``(value, terms)`` of ``rows``;
            False when the deadline passed on the way (checked every ``_CHECK_EVERY`` terms)."""
            count = 0
            for value, terms in rows:
                row = solver.Constraint(value, value)
                for variable, coefficient in terms:
                    row.SetCoefficient(variable, coefficient)
                count += len(terms)
                if count > _CHECK_EVERY:
                    count = 0
                    if deadline.expired():
                        return False
            return True

        whole = integer_memory(problem) if problem.memory_budget is not None else None
        if whole is not None:
            # the budget, one row. Integer figures (exactly, after a power of two) meet the budget rounded
            # down to their unit, so that a total a rounding error over a fractional budget is not taken
            # within the solver's tolerance; then a power of two (exact) brings the budget (or the largest
            # figure) near the objective's magnitude, where the solver's absolute tolerances are
            # negligible and no coefficient reaches its infinity
            units, budget = ((whole.flat, float(whole.budget)) if whole.exact
                             else (problem.memory_flat, problem.memory_budget))
            exponent = 20 - math.frexp(max(budget, float(units.max())))[1]
            figures = np.ldexp(units[problem._packing.node_start[encoding.literal_node]
                                     + encoding.literal_choice], exponent)
            row = solver.Constraint(-solver.infinity(), math.ldexp(budget, exponent))
            for t in np.flatnonzero(figures).tolist():
                row.SetCoefficient(x[t], float(figures[t]))
        one_choice = ((1.0, [(x[t], 1.0) for t in literals]) for literals in encoding.node_literals)
        marginals = ((0.0, [(x[literal], -1.0), *((y[p], 1.0) for p in pairs)])
                     for literal, pairs in encoding.marginals)
        if not add_equalities(one_choice) or not add_equalities(marginals):
            return out_of_time()
        objective = solver.Objective()
        costs = np.concatenate([encoding.literal_cost, encoding.pair_cost])
        variables = x + y
        for count, t in enumerate(np.flatnonzero(costs).tolist()):
            objective.SetCoefficient(variables[t], float(costs[t]))
            if count % _CHECK_EVERY == 0 and deadline.expired():
                return out_of_time()
        objective.SetMinimization()

        if hint is not None and backend != "highs" and not deadline.expired():
            x_values, y_values = encoding.literal_values(hint)
            solver.SetHint(x + y, np.concatenate([x_values, y_values]).astype(float).tolist())
        build_time = time.perf_counter() - start
        remaining = deadline.remaining()
        if remaining is not None and remaining <= 0:
            return out_of_time()

        def run() -> tuple[int, np.ndarray | None, float]:
            if backend == "highs":
                return _solve_highs(solver, x, remaining)
            parameters = pywraplp.MPSolverParameters()
            parameters.SetDoubleParam(parameters.RELATIVE_MIP_GAP, 0.0)
            if remaining is not None:
                solver.SetTimeLimit(max(int(remaining * 1000), 1))
            status = solver.Solve(parameters)
            solved = status in (pywraplp.Solver.OPTIMAL, pywraplp.Solver.FEASIBLE)
            # Reading values without a solution makes OR-Tools log "No solution exists" on stderr.
            x_values = np.array([v.solution_value() for v in x]) if solved else None
            return status, x_values, (objective.BestBound() if solved else -math.inf)

        stats.update(build_time=build_time, variables=len(x) + len(y), constraints=solver.NumConstraints())
        outcome = run() if remaining is None else run_until(run, deadline)
        if outcome is None:
            stats["killed"] = True
            return SolverResult(hint, "feasible", problem.trivial_lower_bound(),
                                f"mip ({backend}) overran the time limit and was stopped; the assignment is "
                                "pbqp's, lower_bound the sum of the least costs", stats)
        status, x_values, bound = outcome
        stats["mip_status"] = status
        limited = "time limit reached" if remaining is not None else "stopped early"
        distrusted = status == pywraplp.Solver.INFEASIBLE and (
            hint is not None or (backend == "cbc" and remaining is not None))
        if status == pywraplp.Solver.INFEASIBLE and not distrusted:
            over = "" if problem.memory_budget is None else " or is over the memory budget"
            return SolverResult(None, "infeasible", math.inf, f"mip ({backend}) proved that every "
                                f"assignment uses a forbidden (inf) entry{over}", stats)
        if distrusted:
            # Not a proof: CBC reports INFEASIBLE when its time limit stops it before a first solution
            # (seen in the test suite on a busy machine), and no backend may deny the warm start.
            status = pywraplp.Solver.NOT_SOLVED
            stats["infeasible_not_trusted"] = True
        if status in (pywraplp.Solver.OPTIMAL, pywraplp.Solver.FEASIBLE):
            assignment = encoding.assignment(x_values)
            lower = max(scaled.lower_bound(bound), problem.trivial_lower_bound())
            message = "" if status == pywraplp.Solver.OPTIMAL else (
                f"{limited}; lower_bound is the {backend} best bound")
        else:  # NOT_SOLVED (time limit before a first solution) or ABNORMAL
            assignment, lower = hint, problem.trivial_lower_bound()
            reported = ("reported infeasible, which is no proof here" if distrusted
                        else f"{limited} without a solution (status {status})")
            message = (f"mip ({backend}) {reported}; using the warm start, lower_bound is the sum of the "
                       "least costs")
        if assignment is None:
            return SolverResult(None, "infeasible", None,
                                f"mip ({backend}) found no allowed assignment (infeasibility not proven)",
                                stats)
        if not problem.fits(assignment):  # over the budget within the solver's tolerance: repaired
            assignment = np.asarray(assignment, dtype=np.int64).copy()
            stats["memory_repaired"] = True
            if not repair(problem, assignment, deadline):
                assignment = hint
            if assignment is None:
                return SolverResult(None, "infeasible", None, f"mip ({backend})'s answer is over the memory "
                                    "budget beyond its tolerance, and no repair fits", stats)
            status = pywraplp.Solver.FEASIBLE
            message = f"mip ({backend})'s answer was over the memory budget within its tolerance: repaired"
        value = problem.evaluate(assignment)
        # the MIP's bound is only as good as its tolerances: never above the incumbent it proved
        lower = min(lower, value)
        claim = "optimal" if status == pywraplp.Solver.OPTIMAL else "feasible"
        return SolverResult(assignment, claim, lower, message, stats)

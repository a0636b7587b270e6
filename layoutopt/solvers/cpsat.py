"""``cpsat``: OR-Tools CP-SAT on the marginal (local-polytope) encoding.

The encoding (:mod:`~layoutopt.solvers.marginal`) has a Boolean per allowed node choice and per
finite edge entry; forbidden entries get no variable, never a big-M. CP-SAT needs integer costs:
they are shifted, scaled by a power of two and rounded (:mod:`~layoutopt.solvers.scaling`; with the
``pbqp`` incumbent pruning entries when the costs span too many orders of magnitude), and the bound
reported is certified for the original float costs (the scaled bound minus the largest possible
rounding error). Under a time limit the model build stops at the deadline too, and the ``pbqp``
assignment is returned with the trivial bound.

Parameters: CP-SAT's default portfolio stalls on 2 cores (its only full-problem worker's LP misses
the exactly-one constraints presolve creates, and the bound never closes on the ResNet-50 and
DenseNet-121 presets). The ``max_lp`` subsolver with probing
off proves both optimal within seconds, so on 1-2 workers it is the only full-problem subsolver;
with more workers it is added in front of CP-SAT's default portfolio.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from ..errors import InternalError
from ..problem import Problem
from . import register
from .base import Deadline, Option, Solver, SolverResult, available_cores, heuristic_assignment
from .marginal import marginal_model
from .scaling import scale_costs

__all__ = ["CpSat"]

#: constraints added between two looks at the clock while building the model
_CHECK_EVERY = 2000


@register
class CpSat(Solver):
    """OR-Tools CP-SAT, warm-started from the ``pbqp`` solution.

    Example:
        >>> import networkx as nx, layoutopt
        >>> costs = {"nodes": {0: [1.0, 2.0], 1: [3.0, 1.0]}, "edges": {(0, 1): [[0.0, 5.0], [5.0, 0.0]]}}
        >>> sol = layoutopt.solve(nx.path_graph(2), costs, method="cpsat", num_workers=1)
        >>> sol.assignment, sol.objective, sol.status
        ({0: 1, 1: 1}, 3.0, 'optimal')
    """

    name = "cpsat"
    exact = True
    options: ClassVar[dict[str, Option]] = {
        "num_workers": Option.integer(None, "CP-SAT worker threads (None: every available core)",
                                      allow_none=True),
        "hint": Option.boolean(True, "warm-start from the pbqp solution"),
    }

    def solve(self, problem: Problem, deadline: Deadline, options: Mapping[str, Any]) -> SolverResult:
        from ortools.sat.python import cp_model

        start = time.perf_counter()
        workers = options["num_workers"] or available_cores()
        scaled = scale_costs(problem)
        incumbent = None
        if options["hint"] or scaled.coarse:
            incumbent = heuristic_assignment(problem, deadline)
        if scaled.coarse and incumbent is not None:
            scaled = scale_costs(problem, incumbent=incumbent)
        stats: dict[str, Any] = {"exponent": scaled.exponent, "rounding_error": scaled.rounding_error,
                                 "pruned": scaled.pruned, "workers": workers}

        def out_of_time(where: str) -> SolverResult:
            stats["build_time"] = time.perf_counter() - start
            if incumbent is None:
                return SolverResult(None, "infeasible", None,
                                    f"time limit reached {where}, before any assignment was found", stats)
            return SolverResult(incumbent, "feasible", problem.trivial_lower_bound(),
                                f"time limit reached {where}; the assignment is pbqp's, lower_bound the "
                                "sum of the least costs", stats)

        encoding = marginal_model(scaled.node_costs, scaled.edges)
        model = cp_model.CpModel()
        x = [model.new_bool_var("") for _ in range(encoding.literal_node.size)]
        y = [model.new_bool_var("") for _ in range(encoding.pair_first.size)]
        for count, literals in enumerate(encoding.node_literals):
            model.add_exactly_one([x[t] for t in literals])
            if count % _CHECK_EVERY == 0 and deadline.expired():
                return out_of_time("while building the cpsat model")
        for count, (literal, pairs) in enumerate(encoding.marginals):
            model.add(cp_model.LinearExpr.sum([y[p] for p in pairs]) == x[literal])
            if count % _CHECK_EVERY == 0 and deadline.expired():
                return out_of_time("while building the cpsat model")
        # Objective and hint go straight into the proto, in bulk: the per-variable Python API costs
        # about a second on DenseNet-121-sized models. Variable t of the proto is x[t], then the y's.
        costs = np.concatenate([encoding.literal_cost, encoding.pair_cost]).astype(np.int64)
        used = np.flatnonzero(costs)
        model.proto.objective.vars.extend(used.tolist())
        model.proto.objective.coeffs.extend(costs[used].tolist())
        if incumbent is not None and options["hint"]:
            x_values, y_values = encoding.literal_values(incumbent)
            model.proto.solution_hint.vars.extend(range(len(x) + len(y)))
            model.proto.solution_hint.values.extend(np.concatenate([x_values, y_values]).tolist())

        solver = cp_model.CpSolver()
        solver.parameters.num_workers = workers
        if workers <= 2:  # see the module docstring
            solver.parameters.subsolvers.append("max_lp")
        else:
            solver.parameters.extra_subsolvers.append("max_lp")
        solver.parameters.cp_model_probing_level = 0
        stats["build_time"] = time.perf_counter() - start
        stats["variables"] = len(x) + len(y)
        remaining = deadline.remaining()
        if remaining is not None:
            if remaining <= 0:
                return out_of_time("after building the cpsat model")
            solver.parameters.max_time_in_seconds = remaining
        status = solver.solve(model)
        stats["cpsat_status"] = solver.status_name(status)
        stats["cpsat_wall_time"] = solver.wall_time

        if status == cp_model.INFEASIBLE:
            return SolverResult(None, "infeasible", math.inf,
                                "cpsat proved that every assignment uses a forbidden (inf) entry", stats)
        if status == cp_model.MODEL_INVALID:  # a bug in this module, not user error
            raise InternalError(f"cpsat built an invalid model: {model.validate()}")
        lower = scaled.lower_bound(solver.best_objective_bound)
        if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            values = np.array(solver.response_proto.solution, dtype=np.int64)[: len(x)]
            assignment = encoding.assignment(values)
        else:  # UNKNOWN: the time ran out before a first solution
            assignment = incumbent
        if assignment is None:
            return SolverResult(None, "infeasible", lower,
                                "cpsat found no allowed assignment within the time limit "
                                "(infeasibility not proven)", stats)
        if status == cp_model.OPTIMAL:
            message = "" if not scaled.rounding_error else (
                f"optimal for the integer-rounded costs; lower_bound accounts for their rounding "
                f"(at most {scaled.rounding_error:.3g})")
            return SolverResult(assignment, "optimal", lower, message, stats)
        return SolverResult(assignment, "feasible", lower,
                            "time limit reached; lower_bound is cpsat's best bound", stats)

"""``cpsat``: OR-Tools CP-SAT on the marginal (local-polytope) encoding.

The encoding (:mod:`~layoutopt.solvers.marginal`) has a Boolean per allowed node choice and per
finite edge entry; forbidden entries get no variable, never a big-M. CP-SAT needs integer costs:
they are shifted, scaled by a power of two and rounded (:mod:`~layoutopt.solvers.scaling`; with the
``pbqp`` incumbent pruning entries when the costs span too many orders of magnitude), and the bound
reported is certified for the original float costs (the scaled bound minus the largest possible
rounding error). Under a time limit the model build stops at the deadline too, and the ``pbqp``
assignment is returned with the trivial bound. A memory budget is one more linear constraint over the
choice literals (integer figures, :func:`~.budget.integer_memory`), so it is solved exactly.

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

from .._gc import paused_gc
from ..errors import InternalError
from ..machine import usable_cores
from ..problem import Problem
from .base import (
    Deadline,
    Option,
    Solver,
    SolverResult,
    heuristic_assignment,
    register,
    run_until,
)
from .budget import integer_memory, repair
from .marginal import marginal_model
from .scaling import scale_costs

__all__ = ["CpSat"]

#: constraints added between two looks at the clock while building the model
_CHECK_EVERY = 2000
#: Boolean variables added at once (parsed from text: 50,000 took 0.08-0.11 s on a 2 GHz Skylake core,
#: past a 0.5-s limit by as much; 10,000 keep the look at the clock within ~0.02 s)
_VARIABLE_CHUNK = 10_000

#: CP-SAT's model loading (before its own clock starts), as a share of the time it took to build the
#: model here (measured on DenseNet-shaped models of 150 to 2000 nodes: 0.25 to 0.35)
LOAD_SHARE = 0.4
#: CP-SAT 9.15 answered "infeasible" for a feasible problem whose budget row had figures near 2**41 (a
#: figure of 1.4424876831655755 bytes, made exact by scaling); with figures up to 2**30 it proved the
#: optimum. Larger figures are scaled down (rounded down; the answer is then checked against the true
#: budget and repaired), as for toulbar2
LARGEST_FIGURE = 2**30


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
        with paused_gc():
            return self._solve(problem, deadline, options)

    def _solve(self, problem: Problem, deadline: Deadline, options: Mapping[str, Any]) -> SolverResult:
        start = time.perf_counter()
        workers = options["num_workers"] or usable_cores()
        scaled = scale_costs(problem)
        incumbent = None
        if options["hint"] or scaled.coarse:
            incumbent = heuristic_assignment(problem, deadline)
        if scaled.coarse and incumbent is not None:
            scaled = scale_costs(problem, incumbent=incumbent)
        stats: dict[str, Any] = {"exponent": scaled.exponent, "rounding_error": scaled.rounding_error,
                                 "pruned": scaled.pruned, "workers": workers}

        def out_of_time(where: str = "while building the cpsat model") -> SolverResult:
            stats["build_time"] = time.perf_counter() - start
            if incumbent is None:
                return SolverResult(None, "infeasible", None,
                                    f"time limit reached {where}, before any assignment was found", stats)
            return SolverResult(incumbent, "feasible", problem.trivial_lower_bound(),
                                f"time limit reached {where}; the assignment is pbqp's, lower_bound the "
                                "sum of the least costs", stats)

        from ortools.sat.python import cp_model  # after the fallback: its first import takes ~0.5 s

        if deadline.expired():
            return out_of_time("before building the cpsat model")
        encoding = marginal_model(scaled.node_costs, scaled.edges, deadline)
        if encoding is None:
            return out_of_time()
        # The model goes straight into the proto: CP-SAT's per-variable Python API costs seconds at
        # 2000 nodes. Variable t is x[t] (a node choice), then come the y's (edge pairs).
        model = cp_model.CpModel()
        proto = model.proto
        literals, pairs = encoding.literal_node.size, encoding.pair_first.size
        for chunk in range(0, literals + pairs, _VARIABLE_CHUNK):  # Boolean variables, in bulk
            count = min(_VARIABLE_CHUNK, literals + pairs - chunk)
            proto.merge_text_format("variables { domain: 0 domain: 1 }\n" * count)
            if deadline.expired():
                return out_of_time()
        for count, node_literals in enumerate(encoding.node_literals):
            proto.constraints.add().exactly_one.literals.extend(node_literals.tolist())
            if count % _CHECK_EVERY == 0 and deadline.expired():
                return out_of_time()
        for count, (literal, members) in enumerate(encoding.marginals):
            linear = proto.constraints.add().linear  # sum of the pairs' y == x
            linear.vars.extend([*(literals + members).tolist(), literal])
            linear.coeffs.extend([*([1] * members.size), -1])
            linear.domain.extend([0, 0])
            if count % _CHECK_EVERY == 0 and deadline.expired():
                return out_of_time()
        memory = integer_memory(problem, LARGEST_FIGURE)
        if memory is not None:  # the budget: sum of the chosen literals' figures <= budget
            figures = memory.of_literals(problem, encoding.literal_node, encoding.literal_choice)
            used = np.flatnonzero(figures)
            linear = proto.constraints.add().linear
            linear.vars.extend(used.tolist())
            linear.coeffs.extend(figures[used].astype(np.int64).tolist())
            linear.domain.extend([-(2**62), memory.budget])
            stats["memory_exponent"] = memory.exponent
        costs = np.concatenate([encoding.literal_cost, encoding.pair_cost]).astype(np.int64)
        used = np.flatnonzero(costs)
        proto.objective.vars.extend(used.tolist())
        proto.objective.coeffs.extend(costs[used].tolist())
        if incumbent is not None and options["hint"]:
            x_values, y_values = encoding.literal_values(incumbent)
            proto.solution_hint.vars.extend(range(literals + pairs))
            proto.solution_hint.values.extend(np.concatenate([x_values, y_values]).tolist())

        solver = cp_model.CpSolver()
        solver.parameters.num_workers = workers
        if workers <= 2:  # see the module docstring
            solver.parameters.subsolvers.append("max_lp")
        else:
            solver.parameters.extra_subsolvers.append("max_lp")
        solver.parameters.cp_model_probing_level = 0
        build_time = stats["build_time"] = time.perf_counter() - start
        stats["variables"] = literals + pairs
        remaining = deadline.remaining()

        def run() -> tuple[str, float, list[int], float]:  # plain values: they may cross a pipe
            status = solver.solve(model)
            values = list(solver.response_proto.solution)[:literals] if status in (
                cp_model.OPTIMAL, cp_model.FEASIBLE) else []
            return solver.status_name(status), solver.best_objective_bound, values, solver.wall_time

        if remaining is None:
            outcome = run()
        else:
            # CP-SAT loads the model before its clock starts: measured, about 0.3 times the time it took
            # to build it here. Its own limit leaves room for that; a forked child killed at the
            # deadline is the backstop.
            budget = remaining - LOAD_SHARE * build_time
            if budget <= 0:
                return out_of_time("after building the cpsat model")
            solver.parameters.max_time_in_seconds = budget
            outcome = run_until(run, deadline)
            if outcome is None:
                return out_of_time("while cpsat was loading the model")
        status, best_bound, solution, stats["cpsat_wall_time"] = outcome
        stats["cpsat_status"] = status

        if status == "INFEASIBLE":
            over = "" if memory is None else " or is over the memory budget"
            proof = f"cpsat proved that every assignment uses a forbidden (inf) entry{over}"
            return SolverResult(None, "infeasible", math.inf, proof, stats)
        if status == "MODEL_INVALID":  # a bug in this module, not user error
            raise InternalError(f"cpsat built an invalid model: {model.validate()}")
        lower = scaled.lower_bound(best_bound)
        if status in ("OPTIMAL", "FEASIBLE"):
            assignment = encoding.assignment(np.array(solution, dtype=np.int64))
        else:  # UNKNOWN: the time ran out before a first solution
            assignment = incumbent
        if assignment is None:
            return SolverResult(None, "infeasible", lower,
                                "cpsat found no allowed assignment within the time limit "
                                "(infeasibility not proven)", stats)
        if not problem.fits(assignment):  # figures rounded down let it over the true budget: repaired
            assignment = np.asarray(assignment, dtype=np.int64).copy()
            stats["memory_repaired"] = True
            if not repair(problem, assignment, deadline):
                assignment = incumbent
            if assignment is None:
                return SolverResult(None, "infeasible", lower, "cpsat's answer is over the memory budget "
                                    "once its figures are not rounded, and no repair fits", stats)
            return SolverResult(assignment, "feasible", lower, "cpsat's answer was over the memory budget by "
                                "the rounding of the figures: repaired", stats)
        if status == "OPTIMAL":
            message = "" if not scaled.rounding_error else (
                f"optimal for the integer-rounded costs; lower_bound accounts for their rounding "
                f"(at most {scaled.rounding_error:.3g})")
            return SolverResult(assignment, "optimal", lower, message, stats)
        return SolverResult(assignment, "feasible", lower,
                            "time limit reached; lower_bound is cpsat's best bound", stats)

"""``pbqp``: the Scholz/Eckstein PBQP heuristic (exact unless RN is needed).

The exact reductions of :mod:`layoutopt.solvers.reductions` (pruning, R1, R0, RI, RII) run
until every node left has degree >= 3. Then one **RN** step fixes one node and the exact
reductions resume, until the graph is empty; back-propagation then gives every reduced node
its argmin given its neighbours.

**RN rule.** The node taken is the one whose decision is the *most certain*: each live node's
choices are estimated as ``c_y[k] + sum_j min_l (C_yj[k, l] + c_j[l])`` (own cost plus each
neighbour's best reply), and the node with the largest margin between its best and second-best
estimate goes first (ties: lowest index) and gets its *locally minimal* choice (the argmin of that
estimate). The margins live in a lazy max-heap (no scan): a node touched
by a reduction is re-estimated only when it reaches the top. The estimate is finite only when every
neighbour keeps an allowed choice, so RN never empties a neighbour's domain directly; domain
pruning then propagates the consequences.

A kernel of at most ``SMALL_KERNEL`` (64) nodes whose min-fill elimination tables stay
within ``SMALL_TABLE`` (1e4) entries is instead solved exactly by variable elimination (the
``dp`` engine; SSD's concat heads leave such a kernel), so RN only runs on kernels that are
large or wide. When RN was never needed the answer is optimal and reported as such. When an RN choice
leads to a dead end (an empty domain further away), a CP-SAT feasibility search (OR-Tools)
finds an allowed assignment instead, so the method is never infeasible when a feasible
assignment exists. With ``polish=True`` (default), an ICM sweep (each node in turn moves to
its best choice given its neighbours, until no move helps) runs when RN was used.

Example:
    >>> import networkx as nx, layoutopt
    >>> g = nx.complete_graph(4)
    >>> costs = {"nodes": {i: [1.0, 2.0] for i in g}, "edges": {e: [[0, 1], [1, 0]] for e in g.edges}}
    >>> sol = layoutopt.solve(g, costs, method="pbqp")
    >>> sol.objective, sol.stats["RN"], sol.stats["kernel_dp"]  # a kernel this small goes to dp
    (4.0, 0, 4)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from ..problem import Problem
from .base import Deadline, Option, Solver, SolverResult, register
from .budget import lagrangian
from .dp import TableTooLarge, eliminate, elimination_order
from .reductions import Infeasible, WorkingGraph

#: kernels up to this many nodes are tried with variable elimination before RN ...
SMALL_KERNEL = 64
#: ... when its largest table has at most this many entries
SMALL_TABLE = 1e4


def _solve_small_kernel(graph: WorkingGraph) -> tuple[list[int] | None, dict[str, Any], str | None] | None:
    """Solve a small kernel exactly by variable elimination; None when its tables are too big."""
    nodes = graph.live_nodes()
    kernel, domains = graph.kernel(nodes)
    try:
        order, _ = elimination_order(kernel, SMALL_TABLE)
    except TableTooLarge:
        return None
    kernel_choices, _ = eliminate(kernel, order)
    counts = {**graph.counts, "kernel_dp": len(nodes)}
    if kernel_choices is None:
        return None, counts, "every assignment of the reduced kernel costs inf"
    return graph.expand(nodes, domains, kernel_choices), counts, None


def run_pbqp(problem: Problem, prune: bool = False, deadline: Deadline | None = None
             ) -> tuple[list[int] | None, dict[str, Any], str | None]:
    """Reductions + RN + back-propagation on ``problem``.

    With ``prune``, forbidden choices are removed (arc consistency) before and after each
    RN step; that costs time and is only needed after a dead end. Past ``deadline``, RN stops
    re-estimating the nodes a step touched (each step then costs only its reductions).

    Returns ``(assignment or None, stats, infeasibility message)``; the assignment is None
    when the reductions proved infeasibility (message set) or when an RN choice ran into a
    dead end (message None).
    """
    graph = WorkingGraph(problem)
    try:
        graph.reduce_exact()
        if 0 < graph.n_alive <= SMALL_KERNEL:
            solved = _solve_small_kernel(graph)
            if solved is not None:
                return solved
        if graph.n_alive and prune:
            graph.prune_all()
            graph.reduce_exact()
        deadline_at = math.inf if deadline is None or deadline.at is None else deadline.at
        graph.reduce_by_rn(deadline_at)
    except Infeasible as exc:
        if graph.counts["RN"] == 0:  # only exact steps so far: a proof
            return None, graph.counts, str(exc)
        return None, graph.counts, None
    return graph.expand(), graph.counts, None


def icm(problem: Problem, assignment: np.ndarray, max_sweeps: int = 10,
        deadline: Deadline | None = None) -> int:
    """Iterated conditional modes: move nodes to their best reply until none improves (or the
    deadline passes: checked after each sweep).

    Works in place on an int64 array; returns the number of moves. Never makes the objective worse.
    """
    from . import _engine

    packed = problem._packing
    indptr, edge, side = _engine.incidence(packed.edge_i, packed.edge_j, len(problem))
    local = np.empty_like(packed.node_flat)
    known = np.zeros(len(problem), dtype=np.bool_)
    pending = packed.node_size > 1
    moves = 0
    for _ in range(max_sweeps):
        moved = _engine.icm_sweep(packed.node_flat, packed.node_start, packed.node_size, packed.edge_flat,
                                  packed.edge_start, packed.edge_i, packed.edge_j, indptr, edge, side,
                                  assignment, local, known, pending)
        moves += moved
        if not moved or (deadline is not None and deadline.expired()):
            break
    return moves


def feasible_assignment(problem: Problem, deadline: Deadline) -> tuple[list[int] | None, bool]:
    """An allowed (finite) assignment by a CP-SAT feasibility search.

    Returns ``(assignment, proven)``: ``(None, True)`` when CP-SAT proved that none exists,
    ``(None, False)`` when it ran out of time.
    """
    from ortools.sat.python import cp_model

    model = cp_model.CpModel()
    variables = []
    for i, c in enumerate(problem.node_costs):
        allowed = np.flatnonzero(np.isfinite(c)).tolist()
        variables.append(model.NewIntVarFromDomain(cp_model.Domain.FromValues(allowed), f"x{i}"))
    for (i, j), m in problem.edges.items():
        if math.isinf(m.max()):
            pairs = np.argwhere(np.isfinite(m)).tolist()
            model.AddAllowedAssignments([variables[i], variables[j]], pairs)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    remaining = deadline.remaining()
    if remaining is not None:
        if remaining <= 0:
            return None, False
        solver.parameters.max_time_in_seconds = remaining
    status = solver.Solve(model)
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return [int(solver.Value(v)) for v in variables], True
    return None, status == cp_model.INFEASIBLE


def _priced_pbqp(problem: Problem, deadline: Deadline) -> tuple[np.ndarray | None, float]:
    """pbqp's answer on ``problem`` and a certified bound on its optimum: the answer's own cost when no
    RN step was needed (then it is optimal), else the sum of the least costs. The inner engine of the
    Lagrangian search under a memory budget."""
    choices, counts, infeasible = run_pbqp(problem, deadline=deadline)
    if choices is None and infeasible is None:
        choices, counts, infeasible = run_pbqp(problem, prune=True, deadline=deadline)
    if infeasible is not None:
        return None, math.inf
    if choices is None:
        return None, problem.trivial_lower_bound()
    assignment = np.array(choices, dtype=np.int64)
    value = problem.evaluate(assignment)
    if not math.isfinite(value):
        return None, problem.trivial_lower_bound()
    return assignment, value if counts["RN"] == 0 else problem.trivial_lower_bound()


@register
class PBQP(Solver):
    """PBQP reductions with the most-certain-node / locally-minimal RN rule (see the module docstring).

    Options:
        polish: run an ICM local search after the reductions when RN was used.

    Under a memory budget: the Lagrangian multiplier search (:func:`~.budget.lagrangian`) with pbqp as
    the inner engine, its answer polished within the budget; the bound is the dual one where pbqp's
    answers were exact (no RN), else built on the sum of the least costs.
    """

    name = "pbqp"
    exact = False
    options: ClassVar[dict[str, Option]] = {
        "polish": Option.boolean(True, "run an ICM local search after the reductions when RN was used"),
    }

    def solve(self, problem: Problem, deadline: Deadline, options: Mapping[str, Any]) -> SolverResult:
        if problem.memory_budget is not None:
            return lagrangian(problem, _priced_pbqp, deadline, "pbqp")
        choices, counts, infeasible = run_pbqp(problem, deadline=deadline)
        if choices is None and infeasible is None:  # RN hit a dead end: retry with pruning
            choices, counts, infeasible = run_pbqp(problem, prune=True, deadline=deadline)
            counts["pruned_retry"] = True
        stats: dict[str, Any] = dict(counts)
        if infeasible is not None:
            return SolverResult(None, "infeasible", math.inf, infeasible, stats)
        assignment = None if choices is None else np.array(choices, dtype=np.int64)
        objective = math.inf if assignment is None else problem.evaluate(assignment)
        if not math.isfinite(objective):
            fallback, proven = feasible_assignment(problem, deadline)
            stats["feasibility_search"] = True
            if fallback is None:
                if proven:
                    return SolverResult(None, "infeasible", math.inf,
                                        "no assignment avoids every forbidden (inf) entry", stats)
                return SolverResult(None, "infeasible", None,
                                    "no allowed assignment found within the time limit", stats)
            assignment = np.array(fallback, dtype=np.int64)
        if counts["RN"] == 0 and not stats.get("feasibility_search"):
            return SolverResult(assignment, "optimal", objective, "", stats)
        if options["polish"] and not deadline.expired():
            stats["icm_moves"] = icm(problem, assignment, deadline=deadline)
        return SolverResult(assignment, "feasible", None, "", stats)

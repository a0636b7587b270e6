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

import heapq
import math
from collections.abc import Mapping
from itertools import accumulate
from typing import Any, ClassVar

import numpy as np

from ..problem import Problem
from . import register
from .base import Deadline, Option, Solver, SolverResult
from .dp import TableTooLarge, eliminate, elimination_order
from .reductions import Infeasible, WorkingGraph, kernel_problem


def _rn_estimate(graph: WorkingGraph, y: int) -> np.ndarray:
    """Each choice of ``y``'s own cost plus every neighbour's best reply to it."""
    row = graph.adj[y]
    vec = graph.vec
    # One wide (K_y, sum K_j) matrix and a segmented min instead of a loop over neighbours:
    # DenseNet nodes have ~25 of them.
    wide = np.concatenate(list(row.values()), axis=1) + np.concatenate([vec[j] for j in row])
    starts = list(accumulate([vec[j].size for j in row][:-1], initial=0))
    return np.minimum.reduceat(wide, starts, axis=1).sum(axis=1) + vec[y]


def _confidence(estimate: np.ndarray) -> float:
    """How much the locally minimal choice beats the runner-up (inf: it is the only allowed one)."""
    if estimate.size < 2:
        return math.inf
    best, second = sorted(estimate.tolist())[:2]  # K <= a few dozen: cheaper than numpy here
    return 0.0 if best == math.inf else second - best


#: kernels up to this many nodes are tried with variable elimination before RN ...
SMALL_KERNEL = 64
#: ... when its largest table has at most this many entries
SMALL_TABLE = 1e4


def _solve_small_kernel(graph: WorkingGraph) -> tuple[list[int] | None, dict[str, Any], str | None] | None:
    """Solve a small kernel exactly by variable elimination; None when its tables are too big."""
    nodes = graph.live_nodes()
    kernel, domains = kernel_problem(graph, nodes)
    try:
        order, _ = elimination_order(kernel, SMALL_TABLE)
    except TableTooLarge:
        return None
    kernel_choices, _ = eliminate(kernel, order)
    graph.counts["kernel_dp"] = len(nodes)
    if kernel_choices is None:
        return None, graph.counts, "every assignment of the reduced kernel costs inf"
    choices: list[int | None] = [None] * len(graph.vec)
    for i, k, domain in zip(nodes, kernel_choices, domains, strict=True):
        choices[i] = int(domain[k])
    return graph.backpropagate(choices), graph.counts, None


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
        _reduce_by_rn(graph, deadline or Deadline(None))
    except Infeasible as exc:
        if graph.counts["RN"] == 0:  # only exact steps so far: a proof
            return None, graph.counts, str(exc)
        return None, graph.counts, None
    choices = graph.backpropagate([None] * len(problem))
    return choices, graph.counts, None


def _reduce_by_rn(graph: WorkingGraph, deadline: Deadline) -> None:
    """RN until the graph is empty: fix the most confident node, then the exact reductions again.

    The confidences live in a lazy max-heap: a node whose estimate may have changed (it or a
    neighbour was touched by a reduction) is only re-estimated when it reaches the top.
    """
    alive = graph.alive
    adj = graph.adj
    estimates: dict[int, np.ndarray] = {}
    key: dict[int, float] = {}
    heap: list[tuple[float, int]] = []
    stale = [False] * len(alive)

    def push(y: int) -> None:
        estimate = _rn_estimate(graph, y)
        estimates[y] = estimate
        key[y] = -_confidence(estimate)
        heapq.heappush(heap, (key[y], y))

    for y in graph.live_nodes():
        push(y)
    graph.changed.clear()
    graph.changed_vectors.clear()
    while graph.n_alive:
        priority, y = heapq.heappop(heap)
        if not alive[y] or priority != key[y]:
            continue  # removed, or an outdated entry
        if stale[y] and not deadline.expired():
            stale[y] = False
            push(y)
            continue
        estimate = estimates[y]
        if estimate.size != graph.vec[y].size:  # a stale estimate, past the deadline: the vector shrank
            estimate = _rn_estimate(graph, y)
        graph.fix(y, int(estimate.argmin()), "RN")
        graph.reduce_exact()
        # y's estimate reads its vector, its matrices and its neighbours' vectors
        for x in graph.changed:
            stale[x] = True
        for x in graph.changed_vectors:
            stale[x] = True
            for j in adj[x]:
                stale[j] = True
        graph.changed.clear()
        graph.changed_vectors.clear()


def _local_costs(problem: Problem, assignment: np.ndarray) -> list[np.ndarray]:
    """Each node's cost per choice given its neighbours' choices in ``assignment``, in bulk.

    Gathers, from the flat copy of the costs, column ``assignment[j]`` of every edge ``(i, j)`` for
    node ``i`` and row ``assignment[i]`` for node ``j``, and sums them per node entry.
    """
    packed = problem._packing
    choice = np.asarray(assignment, dtype=np.int64)
    first, second, cols, start = packed.edge_i, packed.edge_j, packed.edge_cols, packed.edge_start
    rows = packed.node_size[first]
    # for node i: entries start + k * cols + choice[j], k < rows
    edge_of = np.repeat(np.arange(first.size), rows)
    k = np.arange(edge_of.size) - np.repeat(np.cumsum(rows) - rows, rows)
    source_i = start[edge_of] + k * cols[edge_of] + choice[second][edge_of]
    target_i = packed.node_start[first][edge_of] + k
    # for node j: entries start + choice[i] * cols + l, l < cols
    edge_of = np.repeat(np.arange(first.size), cols)
    lane = np.arange(edge_of.size) - np.repeat(np.cumsum(cols) - cols, cols)
    source_j = start[edge_of] + choice[first][edge_of] * cols[edge_of] + lane
    target_j = packed.node_start[second][edge_of] + lane
    sums = np.bincount(np.concatenate([target_i, target_j]),
                       weights=packed.edge_flat[np.concatenate([source_i, source_j])],
                       minlength=packed.node_flat.size)
    flat = packed.node_flat + sums
    return [flat[s:s + n] for s, n in zip(packed.node_start.tolist(), packed.node_size.tolist(), strict=True)]


def icm(problem: Problem, assignment: np.ndarray, max_sweeps: int = 10,
        deadline: Deadline | None = None) -> int:
    """Iterated conditional modes: move nodes to their best reply until none improves (or the
    deadline passes: checked after each sweep).

    Works in place; returns the number of moves. Never makes the objective worse.
    """
    node_costs = problem.node_costs
    nbrs = problem._adjacency  # type: ignore[attr-defined]
    matrices: list[list[np.ndarray]] = [[] for _ in nbrs]  # aligned with nbrs (same edge order)
    for (i, j), m in problem.edges.items():
        matrices[i].append(m)
        matrices[j].append(m.T)
    # A node's cost per choice given its neighbours' choices is cached, and the node is looked at
    # again only once a neighbour moved: the same moves as visiting every node every sweep, since a
    # node whose neighbours stayed put has no better reply than last time.
    local: list[np.ndarray | None] = list(_local_costs(problem, assignment))
    pending = [c.size > 1 for c in node_costs]
    moves = 0
    for _ in range(max_sweeps):
        changed = False
        for i, row in enumerate(nbrs):
            if not pending[i]:
                continue
            pending[i] = False
            costs = local[i]
            if costs is None:
                costs = node_costs[i].copy()
                for j, m in zip(row, matrices[i], strict=True):
                    costs += m[:, assignment[j]]
                local[i] = costs
            best = int(costs.argmin())
            if costs[best] < costs[assignment[i]]:
                assignment[i] = best
                moves += 1
                changed = True
                for j in row:
                    local[j] = None
                    pending[j] = node_costs[j].size > 1
        if not changed or (deadline is not None and deadline.expired()):
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


@register
class PBQP(Solver):
    """PBQP reductions with the most-certain-node / locally-minimal RN rule (see the module docstring).

    Options:
        polish: run an ICM local search after the reductions when RN was used.
    """

    name = "pbqp"
    exact = False
    options: ClassVar[dict[str, Option]] = {
        "polish": Option.boolean(True, "run an ICM local search after the reductions when RN was used"),
    }

    def solve(self, problem: Problem, deadline: Deadline, options: Mapping[str, Any]) -> SolverResult:
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

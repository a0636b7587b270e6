"""``dp``: exact variable (bucket) elimination after the exact PBQP reductions.

The reductions (:func:`~layoutopt.solvers.reductions.reduce`) remove every node of degree
<= 2; the kernel left is eliminated variable by variable along a min-degree order, or a
min-fill one where its tables are smaller on a small kernel (min-fill's cost grows fast), both
from :mod:`networkx.algorithms.approximation.treewidth`. Eliminating ``v`` adds up the factors
that mention it into one numpy table over ``v`` and its current neighbours and minimises
``v`` out, keeping the argmin for back-propagation.

The largest table is computed symbolically *before* anything is allocated; when it exceeds
``max_table_size`` entries a :class:`~layoutopt.ProblemError` says so and suggests another
method. Series-parallel graphs (ResNet, Inception, SSD shapes) have tiny kernels; DenseNet's
treewidth (~25) is out of reach of any elimination DP.

Example:
    >>> import networkx as nx, layoutopt
    >>> g = nx.complete_graph(4)
    >>> costs = {"nodes": {i: [1.0, 2.0] for i in g}, "edges": {e: [[0, 1], [1, 0]] for e in g.edges}}
    >>> sol = layoutopt.solve(g, costs, method="dp")
    >>> sol.objective, sol.status
    (4.0, 'optimal')
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from functools import reduce as fold
from typing import Any, ClassVar

import numpy as np
from networkx.algorithms.approximation.treewidth import MinDegreeHeuristic, min_fill_in_heuristic

from ..errors import ProblemError
from ..problem import Problem, sum_down
from .base import Deadline, Option, Solver, SolverResult, get_solver, register
from .budget import lagrangian
from .reductions import reduce

__all__ = ["DP", "OutOfTime", "TableTooLarge", "eliminate", "elimination_order"]

#: kernels of at most this many nodes also try a min-fill order, which often has smaller tables
#: than min-degree's but costs O(n^2 d^2): 2.9 ms on a 78-node kernel whose min-degree order takes 0.25
MIN_FILL_LIMIT = 100
#: ... and only this many when the min-degree order does not fit: of 188 synthetic and random
#: kernels of 2-100 nodes (cap 1e5), min-fill fitted on 2 of the 111 where min-degree did not (of
#: 20 and 22 nodes), and min-degree on 2 where min-fill did not
MIN_FILL_RESCUE = 40


class TableTooLarge(ProblemError):
    """The elimination order needs a table above the allowed size."""


def elimination_order(problem: Problem, max_table_size: float = math.inf) -> tuple[list[int], float]:
    """An elimination order of ``problem`` and its largest table: the better of min-degree and, on
    small kernels (:data:`MIN_FILL_LIMIT`, :data:`MIN_FILL_RESCUE`), min-fill.

    The largest table is the biggest ``prod K`` over a node and its neighbours at the time it
    is eliminated. Stops early and raises :class:`TableTooLarge` as soon as a table exceeds
    ``max_table_size``, so that checking a hopeless instance stays cheap.

    Example:
        >>> import networkx as nx
        >>> g = nx.cycle_graph(4)
        >>> p = Problem.from_graph(g, {"nodes": {i: [0, 1, 2] for i in g},
        ...                            "edges": {e: [[1] * 3] * 3 for e in g.edges}})
        >>> elimination_order(p)[1]
        27.0
    """
    try:
        best = _order(problem, "min-degree", max_table_size)
    except TableTooLarge as exc:
        if len(problem) > MIN_FILL_RESCUE:
            raise
        try:
            return _order(problem, "min-fill", max_table_size)
        except TableTooLarge:
            raise exc from None
    if len(problem) <= MIN_FILL_LIMIT and best[1] > 1:
        try:  # capped at min-degree's largest table: it stops as soon as it cannot do better
            filled = _order(problem, "min-fill", best[1])
        except TableTooLarge:
            return best
        if filled[1] < best[1]:
            return filled
    return best


def _order(problem: Problem, heuristic: str, max_table_size: float) -> tuple[list[int], float]:
    """The order of one ``heuristic`` ("min-degree" or "min-fill", from networkx), its largest table."""
    sizes = problem.sizes
    graph = {i: set(problem.neighbors(i)) for i in range(len(problem))}
    pick = MinDegreeHeuristic(graph).best_node if heuristic == "min-degree" else min_fill_in_heuristic
    order: list[int] = []
    largest = 0.0

    def eliminate_symbolically(v: int) -> None:
        nonlocal largest
        nbrs = graph.pop(v)
        table = float(sizes[v]) * math.prod(float(sizes[u]) for u in nbrs)
        largest = max(largest, table)
        if largest > max_table_size:
            raise TableTooLarge(
                f"variable elimination needs a table of {table:.3g} entries (node "
                f"{problem.nodes[v]!r} and {len(nbrs)} neighbours), above max_table_size="
                f"{max_table_size:.3g}; use method='auto', 'toulbar2' or 'cpsat' instead"
            )
        for u in nbrs:
            graph[u].discard(v)
            graph[u].update(nbrs)
            graph[u].discard(u)
        order.append(v)

    v = pick(graph)
    while v is not None:
        eliminate_symbolically(v)
        v = pick(graph) if graph else None
    for v in list(graph):  # the heuristics stop when what is left is a clique
        eliminate_symbolically(v)
    return order, largest


def _aligned(scope: tuple[int, ...], table: np.ndarray, target: dict[int, int], ndim: int) -> np.ndarray:
    """``table`` (axes in ``scope`` order) as a broadcastable view over the ``target`` axes."""
    axes = [target[v] for v in scope]
    order = sorted(range(len(axes)), key=axes.__getitem__)
    shape = [1] * ndim
    for v, size in zip(scope, table.shape, strict=True):
        shape[target[v]] = size
    return table.transpose(order).reshape(shape)


class OutOfTime(Exception):
    """The deadline passed during :func:`eliminate`; ``lower_bound`` is what it had proved."""

    def __init__(self, lower_bound: float, eliminated: int) -> None:
        super().__init__(f"time limit reached after eliminating {eliminated} nodes")
        self.lower_bound = lower_bound
        self.eliminated = eliminated


#: seconds per table entry and factor of one elimination step (measured: ~1 ns; generous), to stop
#: before a step that cannot finish by the deadline
_SECONDS_PER_ENTRY = 5e-9


def eliminate(problem: Problem, order: list[int], deadline: Deadline | None = None) -> tuple[list[int] | None,
                                                                                             float]:
    """Bucket elimination of ``problem`` along ``order``: ``(optimal assignment, optimum)``.

    Returns ``(None, inf)`` when every assignment is forbidden.

    Raises:
        OutOfTime: the deadline passes first (or the next step would not finish by it), with the
            bound proved so far: the eliminated part's value plus the least entry of every factor left.
    """
    rank = {v: r for r, v in enumerate(order)}
    sizes = problem.sizes
    buckets: list[list[tuple[tuple[int, ...], np.ndarray]]] = [[] for _ in order]
    for v, c in enumerate(problem.node_costs):
        buckets[rank[v]].append(((v,), c))
    for (i, j), m in problem.edges.items():
        buckets[min(rank[i], rank[j])].append(((i, j), m))
    constants: list[float] = []
    steps = []
    for r, v in enumerate(order):
        factors = buckets[r]
        others = sorted({u for scope, _ in factors for u in scope if u != v}, key=rank.__getitem__)
        if deadline is not None and deadline.at is not None:
            work = len(factors) * sizes[v] * math.prod(sizes[u] for u in others) * _SECONDS_PER_ENTRY
            remaining = deadline.remaining()
            if remaining is not None and work > remaining:
                left = [float(t.min()) for bucket in buckets[r:] for _, t in bucket]
                raise OutOfTime(sum_down([*constants, *left]), r)
        target = {v: 0, **{u: a + 1 for a, u in enumerate(others)}}
        total = fold(np.add, (_aligned(scope, t, target, len(target)) for scope, t in factors))
        arg = total.argmin(axis=0)
        best = total.min(axis=0)
        steps.append((v, tuple(others), arg))
        if others:
            buckets[rank[others[0]]].append((tuple(others), best))
        else:
            constants.append(float(best))
    constant = math.fsum(constants) if all(map(math.isfinite, constants)) else math.inf
    if not math.isfinite(constant):
        return None, math.inf
    choices = [0] * len(order)
    for v, others, arg in reversed(steps):
        choices[v] = int(arg[tuple(choices[u] for u in others)])
    return choices, constant


def _exact(problem: Problem, max_table_size: float, deadline: Deadline) -> tuple[list[int] | None, float]:
    """The optimum of ``problem`` (reductions, then elimination) and its value: the inner engine of the
    Lagrangian search under a memory budget. ``(None, bound so far)`` when the deadline stops it."""
    reduction = reduce(problem)
    if reduction.infeasible is not None:
        return None, math.inf
    order, _ = elimination_order(reduction.kernel, max_table_size)
    try:
        choices, value = eliminate(reduction.kernel, order, deadline)
    except OutOfTime as stop:
        return None, reduction.lower_bound(stop.lower_bound)
    if choices is None:
        return None, math.inf
    return reduction.expand(choices), reduction.lower_bound(value)


@register
class DP(Solver):
    """Exact: PBQP reductions, then variable elimination of the kernel (see the module docstring).

    Under a time limit, when the elimination cannot finish in time, it returns ``greedy``'s
    assignment with the bound the elimination had proved. Under a memory budget it runs the Lagrangian
    multiplier search (:func:`~.budget.lagrangian`) with itself as the exact inner engine: the best
    assignment within the budget it meets and the best dual bound, ``"optimal"`` only when they meet.
    """

    name = "dp"
    exact = True
    options: ClassVar[dict[str, Option]] = {
        "max_table_size": Option.number(
            2e7, "largest elimination table allowed, in entries (8 bytes each); beyond it a ProblemError is "
            "raised before allocating", inclusive=False),
    }

    def solve(self, problem: Problem, deadline: Deadline, options: Mapping[str, Any]) -> SolverResult:
        if problem.memory_budget is not None:
            return lagrangian(problem, lambda priced, until: _exact(priced, options["max_table_size"], until),
                              deadline, "dp")
        reduction = reduce(problem)
        stats: dict[str, Any] = dict(reduction.stats)
        if reduction.infeasible is not None:
            return SolverResult(None, "infeasible", math.inf, reduction.infeasible, stats)
        kernel = reduction.kernel
        order, largest = elimination_order(kernel, options["max_table_size"])
        stats["largest_table"] = largest
        try:
            choices, value = eliminate(kernel, order, deadline)
        except OutOfTime as stop:
            stats["eliminated"] = stop.eliminated
            fallback = get_solver("greedy")
            result = fallback().solve(problem, Deadline(None), fallback.resolve_options())
            return SolverResult(result.assignment, "feasible", reduction.lower_bound(stop.lower_bound),
                                f"dp stopped at the time limit after eliminating {stop.eliminated} of "
                                f"{len(order)} kernel nodes; the assignment is greedy's, lower_bound is what "
                                f"the elimination proved", stats)
        if choices is None:
            return SolverResult(None, "infeasible", math.inf, "every assignment costs inf", stats)
        assignment = reduction.expand(choices)
        return SolverResult(assignment, "optimal", reduction.lower_bound(value), "", stats)

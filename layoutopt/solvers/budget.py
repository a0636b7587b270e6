"""The memory budget: what every back-end shares to honour it.

A problem with a ``memory_budget`` (:class:`~layoutopt.Problem`) asks for the least-cost assignment
whose choices' memory figures add up to at most the budget: PBQP plus one global knapsack constraint.
The exact reductions of ``pbqp``/``dp``/``auto`` are not valid under it as they stand (a reduced node's
choice is fixed by back-propagation from its neighbours, whatever its memory), so the back-ends take
the budget in one of three ways:

* **as a constraint** of the model (``cpsat``, ``mip``: a linear row over the choice literals;
  ``toulbar2``: its knapsack global constraint; ``bruteforce``: a mask), with the figures made
  integers by :func:`integer_memory` where the engine needs them (rounded down, with the budget rounded
  down too: never a truly feasible assignment cut off, so the engine's bound stays certified; an
  answer that the rounding let over the true budget is repaired);
* **through a Lagrangian multiplier search** (``dp``, ``pbqp``: :func:`lagrangian`): the unconstrained
  engine on the costs ``c + lambda * memory`` for a few multipliers, each answer within the budget an
  incumbent, and each ``L(lambda) - lambda * budget`` a certified lower bound on the constrained
  optimum (weak duality) when the engine's own bound on ``L(lambda)`` is;
* **by repair** (``greedy``, and every fallback): :func:`repair` moves nodes to lighter choices at the
  least cost per byte saved until the assignment fits; :func:`polish` then takes the moves that lower
  the cost and keep it within the budget.

:func:`smallest_memory` finds the least memory any allowed assignment needs (the sum of every node's
lightest allowed choice, unless forbidden pairs rule that out: then an exact solve of the memory
alone), for the "infeasible: the smallest assignment needs N MB" answer and as every method's last
fallback (it fits whenever anything does).

Example:
    >>> import networkx as nx, layoutopt
    >>> costs = {"nodes": {0: [1.0, 3.0], 1: [1.0, 2.0]}, "edges": {(0, 1): [[0.0, 1.0], [1.0, 0.0]]}}
    >>> memory = {"nodes": {0: [50, 10], 1: [50, 10]}}
    >>> layoutopt.solve(nx.path_graph(2), costs, memory=memory, memory_budget=60).labels
    {0: 0, 1: 1}
    >>> layoutopt.solve(nx.path_graph(2), costs, memory=memory, memory_budget=15).message
    'infeasible: the smallest assignment needs 2e-05 MB (20 bytes), above the memory budget of ...'
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..problem import Problem, _Packed, format_bytes, sum_down
from .base import Deadline, SolverResult

__all__ = ["IntegerMemory", "Smallest", "integer_memory", "lagrangian", "local_costs_all", "penalised",
           "polish", "precheck", "repair", "smallest_memory"]

#: the most multipliers :func:`lagrangian` tries (each is one unconstrained solve)
MAX_PROBES = 40
#: the most doublings of the multiplier while looking for one whose answer fits
MAX_DOUBLINGS = 60
#: rounds of :func:`repair` and :func:`polish` (each moves several nodes at once)
MAX_ROUNDS = 200


def _starts(problem: Problem) -> tuple[np.ndarray, np.ndarray]:
    packed = problem._packing
    return packed.node_start, packed.node_size


def _memory(problem: Problem) -> np.ndarray:
    packed = problem._packing
    return problem.memory_flat if problem.memory_flat is not None else np.zeros(packed.node_flat.size)


# --- the least memory -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Smallest:
    """The least memory an allowed assignment needs: ``memory`` (bytes), an assignment that needs it
    (None when none is allowed, or none was found in time) and whether ``memory`` is proven least
    (else it is a lower bound: the sum of every node's lightest allowed choice)."""

    memory: float
    assignment: np.ndarray | None
    proven: bool


def smallest_memory(problem: Problem, deadline: Deadline | None = None) -> Smallest:
    """The least memory an allowed (finite-cost) assignment of ``problem`` needs (see :class:`Smallest`).

    Memory adds up over the nodes, so the sum of each node's lightest allowed choice is the answer
    when those choices (ties broken by cost) avoid every forbidden pair; otherwise the memory alone is
    minimised over the allowed assignments by ``auto`` (the forbidden entries kept, every other cost
    0). The result is kept on the problem.

    Example:
        >>> import networkx as nx
        >>> inf = math.inf
        >>> p = Problem.from_graph(nx.path_graph(2), {"nodes": {0: [1, 1], 1: [1, 1]},
        ...                                           "edges": {(0, 1): [[inf, 0], [0, inf]]}},
        ...                        memory={"nodes": {0: [1, 5], 1: [2, 9]}})
        >>> found = smallest_memory(p)   # 1 + 2 is forbidden: 1 + 9 or 5 + 2
        >>> found.memory, found.assignment.tolist(), found.proven
        (7.0, [1, 0], True)
    """
    cached = problem.__dict__.get("_smallest")
    if cached is not None:
        return cached
    packed = problem._packing
    memory = _memory(problem)
    allowed = packed.node_flat < math.inf
    if not allowed.any() or (np.add.reduceat(allowed, packed.node_start) == 0).any():
        return Smallest(math.inf, None, True)
    masked = np.where(allowed, memory, math.inf)
    least = np.minimum.reduceat(masked, packed.node_start)
    # each node's lightest allowed choice, the cheapest of those on a tie
    lightest = masked == np.repeat(least, packed.node_size)
    key = np.where(lightest, packed.node_flat, math.inf)
    owner = np.repeat(np.arange(len(problem)), packed.node_size)
    order = np.lexsort((key, owner))
    first = order[np.searchsorted(owner[order], np.arange(len(problem)))]
    assignment = (first - packed.node_start).astype(np.int64)
    total = math.fsum(least.tolist())
    if math.isfinite(problem.evaluate(assignment)):
        found = Smallest(total, assignment, True)
    else:
        found = _solve_memory(problem, masked, deadline, total)
    if found.proven:
        object.__setattr__(problem, "_smallest", found)
    return found


def _solve_memory(problem: Problem, masked: np.ndarray, deadline: Deadline | None, lower: float) -> Smallest:
    """Minimise the memory alone over the allowed assignments, exactly (``auto``)."""
    from .base import get_solver

    packed = problem._packing
    edges = np.where(packed.edge_flat < math.inf, 0.0, math.inf)
    memory_only = Problem._on_packing(problem.nodes, problem.labels,
                                      _with_flats(packed, masked, edges), np.zeros(packed.edge_i.size, bool))
    auto = get_solver("auto")
    options = auto.resolve_options({"second_search": False})
    result = auto().solve(memory_only, deadline or Deadline(None), options)
    if result.assignment is None:
        if result.lower_bound == math.inf:  # proven: nothing is allowed
            return Smallest(math.inf, None, True)
        return Smallest(lower, None, False)
    assignment = np.asarray(result.assignment, dtype=np.int64)
    value = problem.memory_of(assignment)
    proven = result.status == "optimal" and result.lower_bound is not None and result.lower_bound >= value
    return Smallest(value, assignment, proven or value <= lower)


def _with_flats(packed: _Packed, node_flat: np.ndarray, edge_flat: np.ndarray | None = None) -> _Packed:
    """``packed`` with other node costs (and edge costs), their extremes recomputed."""
    node_flat.flags.writeable = False
    changes: dict[str, Any] = {"node_flat": node_flat}
    if node_flat.size:
        changes.update(node_min=np.minimum.reduceat(node_flat, packed.node_start),
                       node_max=np.maximum.reduceat(node_flat, packed.node_start))
    if edge_flat is not None:
        edge_flat.flags.writeable = False
        changes["edge_flat"] = edge_flat
        if edge_flat.size:
            changes.update(edge_min=np.minimum.reduceat(edge_flat, packed.edge_start),
                           edge_max=np.maximum.reduceat(edge_flat, packed.edge_start))
    return dataclasses.replace(packed, **changes)


def infeasible_message(smallest: float, budget: float) -> str:
    """The message of a budget below the smallest assignment's memory."""
    return (f"infeasible: the smallest assignment needs {format_bytes(smallest)}, above the memory budget "
            f"of {format_bytes(budget)}")


def precheck(problem: Problem, deadline: Deadline | None = None) -> SolverResult | None:
    """``status="infeasible"`` when no allowed assignment fits the budget (proven), else None.

    Example:
        >>> import networkx as nx
        >>> p = Problem.from_graph(nx.empty_graph(1), {"nodes": {0: [1, 2]}, "edges": {}},
        ...                        memory={"nodes": {0: [10, 20]}}, memory_budget=5)
        >>> precheck(p).message
        'infeasible: the smallest assignment needs 1e-05 MB (10 bytes), above the memory budget of ...'
    """
    budget = problem.memory_budget
    if budget is None:
        return None
    smallest = smallest_memory(problem, deadline)
    if smallest.memory > budget and smallest.memory < math.inf:
        # a lower bound above the budget proves it too; the exact figure goes into the message
        return SolverResult(None, "infeasible", math.inf, infeasible_message(smallest.memory, budget),
                            {"smallest_memory": smallest.memory})
    return None


# --- integers for the engines that need them --------------------------------------------------------


#: the largest total of integer memory figures handed to an engine (CP-SAT and toulbar2 add them in
#: int64; the costs' own budget, :data:`~.scaling.INTEGER_COST_BUDGET`, is the same)
INTEGER_MEMORY_BUDGET = 2**48


@dataclass(frozen=True)
class IntegerMemory:
    """Integer memory figures (``flat``, laid out like the node costs) and an integer ``budget`` for an
    engine: ``floor(figure * 2**exponent)`` and ``floor(budget * 2**exponent)``. Every assignment within
    the true budget is within the integer one (so an engine's bound stays certified); ``exact`` says the
    converse holds too (every figure an integer after scaling)."""

    flat: np.ndarray
    budget: int
    exponent: int
    exact: bool

    def of_literals(self, problem: Problem, nodes: np.ndarray, choices: np.ndarray) -> np.ndarray:
        """The figures of the choice literals ``(nodes[t], choices[t])``."""
        return self.flat[problem._packing.node_start[nodes] + choices]


def integer_memory(problem: Problem, largest_figure: float = INTEGER_MEMORY_BUDGET) -> IntegerMemory | None:
    """The integer figures for an engine, or None when the budget binds nothing (every assignment fits).
    Their total stays below :data:`INTEGER_MEMORY_BUDGET`, and each figure below ``largest_figure``.

    Example:
        >>> import networkx as nx
        >>> p = Problem.from_graph(nx.empty_graph(2), {"nodes": {0: [1, 2], 1: [1, 2]}, "edges": {}},
        ...                        memory={"nodes": {0: [0.5, 1.5], 1: [1, 2]}}, memory_budget=3)
        >>> scaled = integer_memory(p)
        >>> scaled.flat.tolist(), scaled.budget, scaled.exact
        ([1.0, 3.0, 2.0, 4.0], 6, True)
    """
    from .scaling import _exact_exponent

    budget = problem.memory_budget
    if budget is None:
        return None
    packed = problem._packing
    memory = _memory(problem)
    largest = math.fsum(np.maximum.reduceat(memory, packed.node_start).tolist()) if memory.size else 0.0
    if largest <= budget:
        return None
    exponent = max(min(_exact_exponent(memory), 1074), -1074)
    exponent = min(exponent, math.frexp(INTEGER_MEMORY_BUDGET)[1] - 1 - math.frexp(largest)[1],
                   math.frexp(largest_figure)[1] - 1 - math.frexp(float(memory.max()))[1])
    scaled = np.ldexp(memory, exponent)
    flat = np.floor(scaled)
    flat.flags.writeable = False
    return IntegerMemory(flat, math.floor(math.ldexp(budget, exponent)), exponent,
                         bool(np.array_equal(flat, scaled)))


# --- local search within the budget ------------------------------------------------------------------


def local_costs_all(problem: Problem, assignment: np.ndarray) -> np.ndarray:
    """Every choice's cost given the neighbours' current choices (its own cost plus its edges'), laid out
    like the node costs: what moving one node alone would cost.

    Example:
        >>> import networkx as nx
        >>> p = Problem.from_graph(nx.path_graph(2), {"nodes": {0: [1, 2], 1: [3, 1]},
        ...                                           "edges": {(0, 1): [[0, 5], [5, 0]]}})
        >>> local_costs_all(p, np.array([0, 0])).tolist()   # node 0: 1 + 0, 2 + 5; node 1: 3 + 0, 1 + 5
        [1.0, 7.0, 3.0, 6.0]
    """
    from .reductions import _ranges

    packed = problem._packing
    total = packed.node_flat.copy()
    if not packed.edge_i.size:
        return total
    i, j, cols = packed.edge_i, packed.edge_j, packed.edge_cols
    k, edge = _ranges(packed.node_size[i])  # node i's choice k meets column assignment[j]
    np.add.at(total, packed.node_start[i][edge] + k,
              packed.edge_flat[packed.edge_start[edge] + k * cols[edge] + assignment[j][edge]])
    k, edge = _ranges(cols)  # node j's choice k meets row assignment[i]
    np.add.at(total, packed.node_start[j][edge] + k,
              packed.edge_flat[packed.edge_start[edge] + assignment[i][edge] * cols[edge] + k])
    return total


def _moves(problem: Problem, assignment: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per choice: ``(owner node, cost change, memory change, local costs)`` of moving its node to it."""
    packed = problem._packing
    local = local_costs_all(problem, assignment)
    owner = np.repeat(np.arange(len(problem)), packed.node_size)
    current = packed.node_start + assignment
    memory = _memory(problem)
    with np.errstate(invalid="ignore"):
        delta = local - local[current][owner]
    return owner, delta, memory - memory[current][owner], local


def _apply_independent(problem: Problem, assignment: np.ndarray, ranked: np.ndarray, owner: np.ndarray,
                       memory_delta: np.ndarray, slack: float, stop_when_fits: bool) -> tuple[int, float]:
    """Apply the ranked moves (flat choice indices) of nodes no other move of this round touches, while
    the memory stays within ``slack`` (or, for a repair, until it does). Returns (moves, memory change)."""
    packed = problem._packing
    touched = np.zeros(len(problem), dtype=bool)
    moved, change = 0, 0.0
    for flat in ranked.tolist():
        node = int(owner[flat])
        if touched[node]:
            continue
        step = float(memory_delta[flat])
        if not stop_when_fits and change + step > slack:
            continue
        assignment[node] = flat - int(packed.node_start[node])
        change += step
        moved += 1
        touched[node] = True
        touched[problem.neighbors(node)] = True
        if stop_when_fits and change <= slack:
            break
    return moved, change


def repair(problem: Problem, assignment: np.ndarray, deadline: Deadline | None = None) -> bool:
    """Move nodes (in place) to lighter allowed choices, the least cost per byte saved first, until the
    assignment fits the budget; returns whether it does. Never makes an allowed assignment forbidden.

    Example:
        >>> import networkx as nx
        >>> p = Problem.from_graph(nx.empty_graph(2), {"nodes": {0: [1, 5], 1: [1, 2]}, "edges": {}},
        ...                        memory={"nodes": {0: [10, 1], 1: [10, 1]}}, memory_budget=12)
        >>> x = np.array([0, 0]); repair(p, x), x.tolist()   # node 1 saves 9 bytes for 1, node 0 for 4
        (True, [0, 1])
    """
    budget = problem.memory_budget
    if budget is None:
        return True
    for _ in range(MAX_ROUNDS):
        excess = problem.memory_of(assignment) - budget
        if excess <= 0:
            return True
        if deadline is not None and deadline.expired():
            return False
        owner, delta, memory_delta, local = _moves(problem, assignment)
        useful = (memory_delta < 0) & (local < math.inf)
        if not useful.any():
            return False
        candidates = np.flatnonzero(useful)
        ratio = np.maximum(delta[candidates], 0.0) / -memory_delta[candidates]
        # each node's best ratio, then the nodes in that order
        order = candidates[np.lexsort((memory_delta[candidates], ratio))]
        moved, _ = _apply_independent(problem, assignment, order, owner, memory_delta, -excess, True)
        if not moved:
            return False
    return problem.fits(assignment)


def polish(problem: Problem, assignment: np.ndarray, deadline: Deadline | None = None) -> int:
    """Iterated best replies within the budget, in place: moves that lower the cost and keep the
    assignment within the budget (several non-adjacent nodes a round), until none helps; returns the
    number of moves. The assignment must fit already.

    Example:
        >>> import networkx as nx
        >>> p = Problem.from_graph(nx.empty_graph(2), {"nodes": {0: [5, 1], 1: [5, 1]}, "edges": {}},
        ...                        memory={"nodes": {0: [1, 10], 1: [1, 10]}}, memory_budget=11)
        >>> x = np.array([0, 0]); polish(p, x), x.tolist(), p.evaluate(x)   # one move fits, not two
        (1, [1, 0], 6.0)
    """
    moves = 0
    budget = math.inf if problem.memory_budget is None else problem.memory_budget
    for _ in range(MAX_ROUNDS):
        if deadline is not None and deadline.expired():
            break
        slack = budget - problem.memory_of(assignment)
        owner, delta, memory_delta, _ = _moves(problem, assignment)
        candidates = np.flatnonzero((delta < 0) & (memory_delta <= slack))
        if not candidates.size:
            break
        order = candidates[np.argsort(delta[candidates], kind="stable")]
        before = problem.evaluate(assignment)
        saved = assignment.copy()
        moved, _ = _apply_independent(problem, assignment, order, owner, memory_delta, slack, False)
        if not moved or not problem.evaluate(assignment) < before or not problem.fits(assignment):
            assignment[:] = saved  # float rounding of the local figures: keep what is known to be better
            break
        moves += moved
    return moves


# --- the Lagrangian multiplier search --------------------------------------------------------------


def penalised(problem: Problem, multiplier: float) -> tuple[Problem, float]:
    """The unconstrained problem with node costs ``c + multiplier * memory``, and a bound on how far
    its float costs may be from those exact sums over any assignment (for a certified bound).

    Example:
        >>> import networkx as nx
        >>> p = Problem.from_graph(nx.empty_graph(1), {"nodes": {0: [1, 2]}, "edges": {}},
        ...                        memory={"nodes": {0: [10, 0]}}, memory_budget=5)
        >>> q, error = penalised(p, 0.5)
        >>> q.node_costs[0].tolist(), q.memory_budget, error < 1e-12
        ([6.0, 2.0], None, True)
    """
    packed = problem._packing
    memory = _memory(problem)
    with np.errstate(invalid="ignore"):
        costs = packed.node_flat + multiplier * memory
    # each entry rounds twice (the product, the sum): at most 2**-52 of its magnitude
    magnitude = np.where(np.isfinite(costs), np.abs(packed.node_flat) + multiplier * memory, 0.0)
    largest = np.maximum.reduceat(magnitude, packed.node_start).tolist() if costs.size else []
    error = math.fsum(largest) * 2.0**-51
    problem = Problem._on_packing(problem.nodes, problem.labels, _with_flats(packed, costs),
                                  np.zeros(packed.edge_i.size, bool))
    return problem, error


#: an unconstrained engine for :func:`lagrangian`: ``(problem, deadline) -> (assignment or None, a
#: certified lower bound on its optimum, or -inf)``
Inner = Callable[[Problem, Deadline], tuple[np.ndarray | None, float]]


def lagrangian(problem: Problem, inner: Inner, deadline: Deadline, engine: str) -> SolverResult:
    """The least-cost assignment within the budget that the multiplier search finds, with the best
    Lagrangian bound (see the module docstring); the front end decides from them whether it is optimal.

    The multipliers: 0 first (the unconstrained optimum, which may fit); then doubled from the ratio
    of the costs' spread to the memory's until the answer fits; then, between the last multiplier whose
    answer is over the budget and the first whose answer fits, where those two answers' lines
    ``cost + lambda * (memory - budget)`` cross (Kelley's cutting planes on the concave dual: with an
    exact ``inner`` it ends at the dual optimum, where no new answer lies below the two lines).
    """
    budget = problem.memory_budget
    assert budget is not None
    stats: dict[str, Any] = {"probes": 0, "multiplier": 0.0}
    best: list[Any] = [None, math.inf]  # assignment, cost
    bound = [-math.inf]

    def probe(multiplier: float) -> tuple[np.ndarray | None, float, float]:
        stats["probes"] += 1
        priced, error = penalised(problem, multiplier)
        assignment, lower = inner(priced, deadline)
        if lower > -math.inf:
            price = math.nextafter(multiplier * budget, math.inf)
            bound[0] = max(bound[0], sum_down([lower, -price, -error]) if lower < math.inf else math.inf)
        if assignment is None:
            return None, math.inf, math.inf
        assignment = np.asarray(assignment, dtype=np.int64)
        value, memory = problem.evaluate(assignment), problem.memory_of(assignment)
        if memory <= budget and value < best[1]:
            best[0], best[1] = assignment.copy(), value
            stats["multiplier"] = multiplier
        return assignment, value, memory

    def result(message: str = "") -> SolverResult:
        assignment = best[0]
        if assignment is None or not math.isfinite(best[1]):
            smallest = smallest_memory(problem, deadline)
            assignment = None if smallest.assignment is None else smallest.assignment.copy()
            if assignment is not None and not problem.fits(assignment):
                assignment = None
        if assignment is not None:
            stats["polish_moves"] = polish(problem, assignment, deadline)
        lower = None if bound[0] == -math.inf else bound[0]
        if assignment is None:
            proof = lower == math.inf
            found = (f"{engine} proved that every assignment uses a forbidden (inf) entry" if proof else
                     f"{engine} found no assignment within the memory budget{message and f' ({message})'}")
            return SolverResult(None, "infeasible", math.inf if proof else lower, found, stats)
        return SolverResult(assignment, "feasible", lower, message, stats)

    x, value, memory = probe(0.0)
    if x is None or memory <= budget or bound[0] == math.inf:
        return result()
    packed = problem._packing
    spread = np.where(packed.node_flat < math.inf, packed.node_flat, np.nan)
    memory_flat = _memory(problem)
    cost_spread = float(np.nansum(np.fmax.reduceat(spread, packed.node_start)
                                  - np.fmin.reduceat(spread, packed.node_start)))
    memory_spread = float((np.maximum.reduceat(memory_flat, packed.node_start)
                           - np.minimum.reduceat(memory_flat, packed.node_start)).sum())
    low = (0.0, value, memory)
    multiplier = max(cost_spread, 1e-300) / max(memory_spread, 1e-300)
    high = None
    for _ in range(MAX_DOUBLINGS):
        if deadline.expired():
            return result("time limit reached during the multiplier search")
        x, value, memory = probe(multiplier)
        if x is not None and memory <= budget:
            high = (multiplier, value, memory)
            break
        if x is not None:
            low = (multiplier, value, memory)
        multiplier *= 2.0
    if high is None:
        return result("no multiplier made the unconstrained answer fit")
    while stats["probes"] < MAX_PROBES and not deadline.expired():
        (lam_low, value_low, memory_low), (lam_high, value_high, memory_high) = low, high
        if memory_low <= memory_high:
            break
        crossing = (value_high - value_low) / (memory_low - memory_high)
        if not lam_low < crossing < lam_high:
            # at an end: the lines cross where a probe was made already (the dual optimum, for an exact
            # engine); beyond the ends only for a heuristic engine, whose lines need not enclose it
            break
        expected = value_low + crossing * (memory_low - budget)  # the two lines' value there
        x, value, memory = probe(crossing)
        if x is None:
            break
        if value + crossing * (memory - budget) >= expected - 1e-12 * (abs(expected) + abs(value)):
            break  # nothing below the two lines: the dual optimum
        if memory <= budget:
            high = (crossing, value, memory)
        else:
            low = (crossing, value, memory)
    return result("" if not deadline.expired() else "time limit reached during the multiplier search")

"""Power-of-two scaling of float costs, for the back-ends that need integers or sane magnitudes.

CP-SAT and toulbar2 work on integer costs; MIP solvers use absolute tolerances (an absolute gap of
1e-6 means nothing when costs are seconds). Both are served by one scale factor ``s``, a power of
two chosen so that the largest possible objective, ``sum_i max_k c_i[k] + sum_ij max_kl C_ij[k, l]``
over finite entries, is at most a *budget*. Multiplying by a power of two is exact in float64, so
the only error is the rounding to integers, which :func:`scale_costs` measures exactly:

* every finite cost ``c`` becomes ``round(c * s)``; ``inf`` stays ``inf`` (forbidden);
* ``rounding_error`` is ``sum over nodes and edges of max |round(c * s) / s - c|``, so for EVERY
  assignment ``|scaled objective / s - objective| <= rounding_error``;
* hence a lower bound ``B`` on the scaled optimum certifies ``B / s - rounding_error`` for the original
  costs (:meth:`ScaledCosts.lower_bound`), and an assignment optimal for the scaled costs is within
  ``2 * rounding_error`` of the true optimum.

With the default budget of 2**48 the per-term error is at most ``0.5 * 2**-48`` (about 2e-15) of the
objective's upper bound; costs that are integers (e.g. nanoseconds) or multiples of ``1 / s`` are
represented exactly and ``rounding_error`` is 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import ProblemError
from ..problem import Problem
from ..solution import Status

__all__ = [
    "INTEGER_COST_BUDGET",
    "OPTIMALITY_TOLERANCE",
    "ScaledCosts",
    "cost_scale",
    "scale_costs",
    "status_from_bound",
]

#: Largest scaled objective for the integer back-ends. CP-SAT and toulbar2 (whose forbidden cost is
#: about 2**58.8) use int64 costs; 2**48 leaves room for sums and offsets while keeping ~15
#: significant digits per cost.
INTEGER_COST_BUDGET = 2**48

#: Relative gap under which an assignment proven optimal for the *scaled* costs is reported
#: ``"optimal"`` for the original ones (the scaling error is far smaller on realistic sizes).
OPTIMALITY_TOLERANCE = 1e-9


@dataclass
class _Tables:
    """Cost tables of one shape stacked along a first axis, with the keys they belong to."""

    keys: list
    costs: np.ndarray


def _stack_by_shape(keys: list, tables: list[np.ndarray]) -> list[_Tables]:
    groups: dict[tuple[int, ...], tuple[list, list]] = {}
    for key, table in zip(keys, tables, strict=True):
        members = groups.setdefault(table.shape, ([], []))
        members[0].append(key)
        members[1].append(table)
    return [_Tables(group_keys, np.stack(group_tables)) for group_keys, group_tables in groups.values()]


def _masked_tables(problem: Problem) -> tuple[list[_Tables], list[_Tables]]:
    """Node and edge tables grouped by shape, with every edge entry that involves a forbidden node
    choice set to ``inf`` too: such entries can never be chosen, and masking them keeps huge
    irrelevant values out of the scaling."""
    allowed = [np.isfinite(c) for c in problem.node_costs]
    node_tables = _stack_by_shape(list(range(len(problem))), list(problem.node_costs))
    edge_tables = _stack_by_shape(list(problem.edges), list(problem.edges.values()))
    for group in edge_tables:
        first = np.stack([allowed[i] for i, _ in group.keys])
        second = np.stack([allowed[j] for _, j in group.keys])
        mask = first[:, :, None] & second[:, None, :]
        if not mask.all():
            group.costs[...] = np.where(mask, group.costs, np.inf)
    return node_tables, edge_tables


def _largest_objective(groups: list[_Tables]) -> float:
    """Upper bound of any finite objective: the sum of each table's largest finite entry."""
    maxima = []
    for group in groups:
        flat = group.costs.reshape(len(group.keys), -1)
        maxima.append(np.where(np.isfinite(flat), flat, 0.0).max(axis=1))
    try:
        total = math.fsum(np.concatenate(maxima).tolist()) if maxima else 0.0
    except OverflowError:
        total = math.inf
    if not math.isfinite(total):
        raise ProblemError("the costs are too large: their sum overflows float64")
    return total


def cost_scale(problem: Problem, budget: float = INTEGER_COST_BUDGET) -> float:
    """The power of two ``s`` such that the largest possible objective times ``s`` is at most ``budget``.

    Example:
        >>> import networkx as nx
        >>> p = Problem.from_graph(nx.path_graph(2), {"nodes": {0: [1, 2], 1: [3, 1]},
        ...                                           "edges": {(0, 1): [[0, 5], [5, 0]]}})
        >>> cost_scale(p, budget=1024)  # largest objective is 2 + 3 + 5 = 10
        64.0
    """
    node_tables, edge_tables = _masked_tables(problem)
    return _scale_for(_largest_objective(node_tables + edge_tables), budget)


def _scale_for(total: float, budget: float) -> float:
    if total == 0:
        return 1.0
    _, exponent = math.frexp(budget / total)  # budget / total = m * 2**exponent with 0.5 <= m < 1
    return math.ldexp(1.0, exponent - 1)


@dataclass(frozen=True)
class ScaledCosts:
    """Integer-valued costs (float64 arrays holding integers or ``inf``) and what the rounding cost.

    ``node_costs[i]`` and ``edges[(i, j)]`` mirror :class:`~layoutopt.Problem`'s (edge entries that
    involve a forbidden node choice are ``inf``); ``node_tables`` and ``edge_tables`` hold the same
    arrays stacked by shape as ``(keys, stacked)`` pairs, for solvers that take tables in bulk. See
    the module docstring for the guarantees.
    """

    scale: float
    node_costs: tuple[np.ndarray, ...]
    edges: dict[tuple[int, int], np.ndarray]
    rounding_error: float
    node_tables: list[tuple[list[int], np.ndarray]]
    edge_tables: list[tuple[list[tuple[int, int]], np.ndarray]]

    def lower_bound(self, scaled_bound: float) -> float:
        """A lower bound on the original optimum from a lower bound on the scaled one (certified)."""
        if not math.isfinite(scaled_bound):
            return float(scaled_bound)
        bound = scaled_bound / self.scale - self.rounding_error
        return math.nextafter(bound, -math.inf) if self.rounding_error else bound  # round down


def scale_costs(problem: Problem, budget: float = INTEGER_COST_BUDGET) -> ScaledCosts:
    """Scale ``problem``'s costs by :func:`cost_scale` and round them to integers.

    Example:
        >>> import networkx as nx
        >>> p = Problem.from_graph(nx.path_graph(2), {"nodes": {0: [0.1, 2], 1: [3, 1]},
        ...                                           "edges": {(0, 1): [[0, 5], [5, 0]]}})
        >>> scaled = scale_costs(p, budget=1024)
        >>> scaled.scale, scaled.node_costs[0], round(scaled.rounding_error, 9)  # 0.1 -> 6 / 64
        (64.0, array([  6., 128.]), 0.00625)
    """
    node_tables, edge_tables = _masked_tables(problem)
    scale = _scale_for(_largest_objective(node_tables + edge_tables), budget)
    errors = []
    for group in node_tables + edge_tables:
        # Forbidden (inf) entries stay inf and carry no error; the arithmetic runs on finite values
        # only (inf - inf would be NaN, with a RuntimeWarning).
        finite = np.isfinite(group.costs)
        costs = np.where(finite, group.costs, 0.0)
        rounded = np.rint(costs * scale)
        deviation = np.abs(rounded / scale - costs).reshape(len(group.keys), -1)
        errors.append(deviation.max(axis=1))
        group.costs = np.where(finite, rounded, np.inf)
    # Each float operation above may round down by an ulp; a relative 1e-9 covers millions of terms.
    error = math.fsum(np.concatenate(errors).tolist()) * (1 + 1e-9) if errors else 0.0
    node_costs: list[np.ndarray] = [np.zeros(0)] * len(problem)
    for group in node_tables:
        for k, i in enumerate(group.keys):
            node_costs[i] = group.costs[k]
    by_key = {key: group.costs[k] for group in edge_tables for k, key in enumerate(group.keys)}
    edges = {key: by_key[key] for key in problem.edges}
    return ScaledCosts(scale, tuple(node_costs), edges, error,
                       [(g.keys, g.costs) for g in node_tables], [(g.keys, g.costs) for g in edge_tables])


def status_from_bound(objective: float, lower_bound: float) -> Status:
    """``"optimal"`` when ``objective`` is within :data:`OPTIMALITY_TOLERANCE` of ``lower_bound``.

    Example:
        >>> status_from_bound(10.0, 10.0 - 1e-12), status_from_bound(10.0, 9.0)
        ('optimal', 'feasible')
    """
    if objective - lower_bound <= OPTIMALITY_TOLERANCE * max(1.0, abs(objective)):
        return "optimal"
    return "feasible"

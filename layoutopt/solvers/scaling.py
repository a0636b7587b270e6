"""Integer costs for the back-ends that need them (CP-SAT, toulbar2, the ``.wcsp`` export) and sane
magnitudes for those with absolute tolerances (MIP): the one cost-scaling mechanism of the library.

Three exact or measured steps turn the float costs of a :class:`~layoutopt.Problem` into non-negative
integers:

1. **Shift** each node's and edge's table by its least allowed entry ``m_t`` (so negative costs are
   fine, and the magnitudes left are the spreads within each table). The sum of the shifts is the
   ``offset`` added back to every objective. Entries that can never be chosen (an edge entry at a
   forbidden node choice) are forbidden too, so they neither widen a spread nor reach a solver.
2. **Prune** (optional, given an ``incumbent`` assignment): an entry whose shifted value alone exceeds
   ``incumbent cost - sum of the shifts`` lies on no assignment better than the incumbent, so it is
   forbidden. One huge entry (``1e14`` among costs of ``1``) then no longer decides the resolution.
3. **Scale** by ``2**exponent`` and round to integers. Scaling by a power of two is exact (``ldexp``,
   also far outside the range of ``2.0**e``); the exponent is the smallest that represents every cost
   exactly (integer costs keep exponent 0) unless that would take the largest possible objective
   above the *budget*, in which case it is the largest within the budget.

``rounding_error`` is a certified bound, computed with exact float arithmetic (TwoSum), on
``|offset + scaled cost * 2**-exponent - cost|`` summed over the tables, for **every** assignment:

* a lower bound ``B`` on the scaled optimum certifies ``offset + B * 2**-exponent - rounding_error``
  for the original costs (:meth:`ScaledCosts.lower_bound`, rounded down);
* an assignment optimal for the scaled costs is within ``2 * rounding_error`` of the true optimum.

The front end calls a solution optimal when its certified bound is within the optimality tolerance
(:data:`layoutopt.solution.OPTIMALITY_TOLERANCE`) of its objective; :meth:`ScaledCosts.coarse` says
when the rounding alone may exceed it, so that a back-end prunes with an incumbent first.

Example:
    >>> import networkx as nx
    >>> from layoutopt import Problem
    >>> p = Problem.from_graph(nx.path_graph(2), {"nodes": {0: [-1.5, 2], 1: [3, 1]},
    ...                                           "edges": {(0, 1): [[0, 5], [5, 0]]}})
    >>> scaled = scale_costs(p)
    >>> scaled.exponent, scaled.offset, scaled.node_costs[0].tolist(), scaled.rounding_error
    (1, -0.5, [0.0, 7.0], 0.0)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..problem import Problem, sum_down
from ..solution import OPTIMALITY_TOLERANCE

__all__ = ["INTEGER_COST_BUDGET", "ScaledCosts", "scale_costs"]

#: Largest scaled objective for the integer back-ends. CP-SAT and toulbar2 (whose forbidden cost is
#: about 2**58.8) use int64 costs; 2**48 leaves room for sums while keeping ~15 significant digits.
INTEGER_COST_BUDGET = 2**48

#: Every float is an integer multiple of 2**-1074, so no larger exponent is ever needed.
_MAX_EXPONENT = 1074


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
    choice set to ``inf`` too: such entries can never be chosen."""
    allowed = [np.isfinite(c) for c in problem.node_costs]
    node_tables = _stack_by_shape(list(range(len(problem))), list(problem.node_costs))
    edge_tables = _stack_by_shape(list(problem.edges), list(problem.edges.values()))
    for group in edge_tables:
        first = np.stack([allowed[i] for i, _ in group.keys])
        second = np.stack([allowed[j] for _, j in group.keys])
        mask = first[:, :, None] & second[:, None, :]
        if not mask.all():
            group.costs = np.where(mask, group.costs, np.inf)
    return node_tables, edge_tables


def _flat(group: _Tables) -> np.ndarray:
    return group.costs.reshape(len(group.keys), -1)


def _least(group: _Tables) -> np.ndarray:
    """Each table's least entry (``inf`` for a table that forbids everything: shifted by 0)."""
    least = _flat(group).min(axis=1)
    return np.where(least < math.inf, least, 0.0)


def _two_difference(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``d = fl(a - b)`` and its exact rounding error ``e`` (``a - b == d + e`` exactly; Knuth's TwoSum)."""
    d = a - b
    virtual = d - a
    e = (a - (d - virtual)) + (-b - virtual)
    return d, e


def _exact_exponent(values: np.ndarray) -> int:
    """The least ``e`` making every finite value times ``2**e`` an integer (``-1074`` for all zeros)."""
    finite = values[np.isfinite(values) & (values != 0)]
    if not finite.size:
        return -_MAX_EXPONENT
    mantissa, exponent = np.frexp(finite)  # value = mantissa * 2**exponent, 0.5 <= |mantissa| < 1
    digits = np.abs(np.ldexp(mantissa, 53)).astype(np.int64)  # an integer: 53 bits hold any mantissa
    trailing = np.log2((digits & -digits).astype(np.float64)).astype(np.int64)
    return int((53 - exponent - trailing).max())


@dataclass(frozen=True)
class ScaledCosts:
    """Non-negative integer-valued costs (float64 arrays of integers, or ``inf``) and what the scaling
    cost; see the module docstring for the guarantees.

    ``node_costs[i]`` and ``edges[(i, j)]`` mirror :class:`~layoutopt.Problem`'s; ``node_tables`` and
    ``edge_tables`` hold the same arrays stacked by shape as ``(keys, stacked)`` pairs, for solvers
    that take tables in bulk. ``original cost ~= offset + scaled cost * 2**-exponent``.
    """

    exponent: int
    offset: float  #: sum of the per-table shifts (its rounding is part of ``rounding_error``)
    node_costs: tuple[np.ndarray, ...]
    edges: dict[tuple[int, int], np.ndarray]
    rounding_error: float
    node_tables: list[tuple[list[int], np.ndarray]]
    edge_tables: list[tuple[list[tuple[int, int]], np.ndarray]]
    #: entries forbidden by the incumbent's bound
    pruned: int = 0
    #: the sum of the absolute shifts, the scale of the objectives' float rounding
    shift_magnitude: float = 0.0

    @property
    def scale(self) -> float:
        """``2**exponent`` (``inf`` or 0 where that is outside the float range; the arithmetic here
        uses the exponent)."""
        try:
            return math.ldexp(1.0, self.exponent)
        except OverflowError:
            return math.inf

    def unscaled(self, scaled_value: float) -> float:
        """``scaled_value * 2**-exponent``, exactly when representable."""
        return math.ldexp(scaled_value, -self.exponent)

    def lower_bound(self, scaled_bound: float) -> float:
        """A certified lower bound on the original optimum from a lower bound on the scaled one.

        Example:
            >>> import networkx as nx
            >>> from layoutopt import Problem
            >>> p = Problem.from_graph(nx.path_graph(2), {"nodes": {0: [0.1, 2], 1: [3, 1]},
            ...                                           "edges": {(0, 1): [[0, 5], [5, 0]]}})
            >>> scaled = scale_costs(p, budget=1024)
            >>> scaled.lower_bound(scaled.cost([0, 1]) ) <= p.evaluate([0, 1])
            True
        """
        if not math.isfinite(scaled_bound):
            return float(scaled_bound)
        return sum_down([self.offset, self.unscaled(scaled_bound), -self.rounding_error])

    def cost(self, assignment: Sequence[int]) -> float:
        """The scaled (integer) cost of ``assignment``: exact, the scaled costs are integers below 2**53."""
        total = math.fsum(float(c[k]) for c, k in zip(self.node_costs, assignment, strict=True))
        return total + math.fsum(float(m[assignment[i], assignment[j]]) for (i, j), m in self.edges.items())

    @property
    def coarse(self) -> bool:
        """Whether the rounding alone may exceed the optimality tolerance on an objective about the size
        of the shifts (then a back-end should prune with an incumbent: ``scale_costs(..., incumbent=)``)."""
        return 2 * self.rounding_error > 0.1 * OPTIMALITY_TOLERANCE * self.shift_magnitude


def scale_costs(
    problem: Problem,
    budget: float = INTEGER_COST_BUDGET,
    incumbent: Sequence[int] | None = None,
    integral: bool = True,
) -> ScaledCosts:
    """Shift, prune (given ``incumbent``), scale and round ``problem``'s costs (see the module docstring).

    With ``integral=False`` the scaled costs are not rounded (for MIP solvers, which need magnitudes,
    not integers); ``rounding_error`` then covers the shift's float rounding only.

    Example:
        >>> import networkx as nx
        >>> from layoutopt import Problem
        >>> p = Problem.from_graph(nx.path_graph(2), {"nodes": {0: [0.1, 2], 1: [3, 1]},
        ...                                           "edges": {(0, 1): [[0, 5], [5, 0]]}})
        >>> scaled = scale_costs(p, budget=1024)  # spreads 1.9 + 2 + 5: 2**6 times that fits
        >>> scaled.exponent, scaled.node_costs[0].tolist(), scaled.rounding_error < 1 / 2**6
        (6, [0.0, 122.0], True)
        >>> scale_costs(p, budget=1024, incumbent=[1, 1]).edges[(0, 1)].tolist()  # 5 > 3 - (0.1 + 1)
        [[0.0, inf], [inf, 0.0]]
    """
    node_tables, edge_tables = _masked_tables(problem)
    groups = node_tables + edge_tables
    shifts = [_least(group) for group in groups]
    shift_list = np.concatenate(shifts).tolist() if shifts else []
    offset = math.fsum(shift_list)
    offset_error = abs(math.fsum([*shift_list, -offset]))  # the exact residual, rounded: at most an ulp
    pruned = 0
    if incumbent is not None and math.isfinite(problem.evaluate(incumbent)):
        # An entry whose shifted value exceeds (incumbent cost - sum of the shifts) lies on no assignment
        # as good as the incumbent. The margin covers the float rounding of both sides, so the
        # incumbent's own entries always stay.
        slack = 1e-12 * (problem.magnitude(incumbent) + math.fsum(map(abs, shift_list)))
        threshold = (problem.evaluate(incumbent) - math.fsum(shift_list)) + slack
        for group, least in zip(groups, shifts, strict=True):
            shape = group.costs.shape
            flat = _flat(group)
            over = (flat - least[:, None]) > threshold
            if over.any():
                pruned += int(over.sum())
                group.costs = np.where(over, np.inf, flat).reshape(shape)
    spreads = []
    for group, least in zip(groups, shifts, strict=True):
        flat = _flat(group)
        finite = np.isfinite(flat)
        spread = np.where(finite, flat - least[:, None], 0.0)
        spreads.append(spread)
    largest = math.fsum(np.concatenate([s.max(axis=1) for s in spreads]).tolist()) if spreads else 0.0
    exponent = max(min(_exact_exponent(np.concatenate([s.ravel() for s in spreads])) if spreads else 0,
                       _MAX_EXPONENT), 0)
    if largest > 0:
        # largest < 2**p and 2**(q - 1) <= budget, so largest * 2**(q - 1 - p) < budget (in exponents:
        # budget / largest itself may overflow)
        exponent = min(exponent, math.frexp(budget)[1] - 1 - math.frexp(largest)[1])
    errors = []
    for group, least in zip(groups, shifts, strict=True):
        # Forbidden (inf) entries stay inf and carry no error; the arithmetic runs on finite values only.
        shape = group.costs.shape
        flat = _flat(group)
        finite = np.isfinite(flat)
        difference, shift_error = _two_difference(np.where(finite, flat, 0.0),
                                                  np.where(finite, least[:, None], 0.0))
        scaled = np.ldexp(difference, exponent)
        if integral:
            scaled = np.rint(scaled)
        # ldexp(scaled, -e) - difference is exact (Sterbenz), so the error is that plus the shift's
        deviation = np.abs(np.ldexp(scaled, -exponent) - difference) + np.abs(shift_error)
        errors.append(np.where(finite, deviation, 0.0).max(axis=1))
        group.costs = np.where(finite, scaled, np.inf).reshape(shape)
    # Each table's deviation is exact up to one rounding of the sums here: 1 + 2**-50 covers them.
    error = math.fsum([*(np.concatenate(errors).tolist() if errors else []), offset_error]) * (1 + 2**-50)
    node_costs: list[np.ndarray] = [np.zeros(0)] * len(problem)
    for group in node_tables:
        for k, i in enumerate(group.keys):
            node_costs[i] = group.costs[k]
    by_key = {key: group.costs[k] for group in edge_tables for k, key in enumerate(group.keys)}
    edges = {key: by_key[key] for key in problem.edges}
    return ScaledCosts(exponent, offset, tuple(node_costs), edges, error,
                       [(g.keys, g.costs) for g in node_tables], [(g.keys, g.costs) for g in edge_tables],
                       pruned, math.fsum(map(abs, shift_list)))

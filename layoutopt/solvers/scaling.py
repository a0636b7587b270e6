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
    """Non-negative integer-valued costs (float64 integers, or ``inf``) and what the scaling cost; see
    the module docstring for the guarantees. ``original cost ~= offset + scaled cost * 2**-exponent``.

    ``flat`` holds every scaled table, laid out like the problem's own flat copy (the nodes' vectors,
    then the edges' matrices); :attr:`node_costs` and :attr:`edges` mirror :class:`~layoutopt.Problem`'s,
    and :attr:`node_tables` and :attr:`edge_tables` give the same tables stacked by shape as
    ``(keys, stacked)`` pairs, for solvers that take tables in bulk.
    """

    exponent: int
    offset: float  #: sum of the per-table shifts (its rounding is part of ``rounding_error``)
    flat: np.ndarray
    rounding_error: float
    #: entries forbidden by the incumbent's bound
    pruned: int
    #: the sum of the absolute shifts, the scale of the objectives' float rounding
    shift_magnitude: float
    problem: Problem

    @property
    def scale(self) -> float:
        """``2**exponent`` (``inf`` or 0 where that is outside the float range; the arithmetic here
        uses the exponent)."""
        try:
            return math.ldexp(1.0, self.exponent)
        except OverflowError:
            return math.inf

    def _node_segments(self) -> tuple[list[int], list[int]]:
        packed = self.problem._packing
        return packed.node_start.tolist(), packed.node_size.tolist()

    @property
    def node_costs(self) -> tuple[np.ndarray, ...]:
        starts, sizes = self._node_segments()
        return tuple(self.flat[s:s + k] for s, k in zip(starts, sizes, strict=True))

    @property
    def edges(self) -> dict[tuple[int, int], np.ndarray]:
        packed = self.problem._packing
        base = packed.node_flat.size
        return {key: self.flat[base + s:base + s + m.size].reshape(m.shape)
                for key, m, s in zip(self.problem.edges, self.problem.edges.values(),
                                     packed.edge_start.tolist(), strict=True)}

    @property
    def node_tables(self) -> list[tuple[list[int], np.ndarray]]:
        packed = self.problem._packing
        tables = []
        for size in np.unique(packed.node_size).tolist():
            keys = np.flatnonzero(packed.node_size == size)
            tables.append((keys.tolist(), self.flat[packed.node_start[keys][:, None] + np.arange(size)]))
        return tables

    @property
    def edge_tables(self) -> list[tuple[list[tuple[int, int]], np.ndarray]]:
        packed = self.problem._packing
        rows, cols = packed.node_size[packed.edge_i], packed.edge_cols
        keys = list(self.problem.edges)
        tables = []
        for r, c in sorted(set(zip(rows.tolist(), cols.tolist(), strict=True))):
            members = np.flatnonzero((rows == r) & (cols == c))
            starts = packed.node_flat.size + packed.edge_start[members]
            tables.append(([keys[e] for e in members.tolist()],
                           self.flat[starts[:, None] + np.arange(r * c)].reshape(-1, r, c)))
        return tables

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
            >>> scaled.lower_bound(scaled.cost([0, 1])) <= p.evaluate([0, 1])
            True
        """
        if not math.isfinite(scaled_bound):
            return float(scaled_bound)
        return sum_down([self.offset, self.unscaled(scaled_bound), -self.rounding_error])

    def cost(self, assignment: Sequence[int]) -> float:
        """The scaled (integer) cost of ``assignment``: exact, the scaled costs are integers below 2**53."""
        packed = self.problem._packing
        choice = np.asarray(assignment, dtype=np.int64)
        entries = [packed.node_start + choice]
        if packed.edge_i.size:
            pair = choice[packed.edge_i] * packed.edge_cols + choice[packed.edge_j]
            entries.append(packed.node_flat.size + packed.edge_start + pair)
        return math.fsum(self.flat[np.concatenate(entries)].tolist())

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

    Every step runs on the problem's flat copy of its tables at once (segment reductions), not table
    by table. With ``integral=False`` the scaled costs are not rounded (for MIP solvers, which need
    magnitudes, not integers); ``rounding_error`` then covers the shift's float rounding only.

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
    packed = problem._packing
    sizes = np.concatenate([packed.node_size, packed.node_size[packed.edge_i] * packed.edge_cols])
    starts = np.zeros(sizes.size, dtype=np.int64)
    np.cumsum(sizes[:-1], out=starts[1:])
    values = np.concatenate([packed.node_flat, packed.edge_flat])
    if packed.edge_i.size:
        # an edge entry at a forbidden node choice can never be chosen: forbidden too
        allowed = packed.node_flat < math.inf
        edge_sizes = sizes[len(problem):]
        owner = np.repeat(np.arange(edge_sizes.size), edge_sizes)
        local = np.arange(owner.size) - np.repeat(packed.edge_start, edge_sizes)
        cols = packed.edge_cols[owner]
        usable = (allowed[packed.node_start[packed.edge_i][owner] + local // cols]
                  & allowed[packed.node_start[packed.edge_j][owner] + local % cols])
        values[packed.node_flat.size:][~usable] = math.inf
    table_of = np.repeat(np.arange(sizes.size), sizes)
    finite = values < math.inf
    least = np.minimum.reduceat(values, starts) if sizes.size else np.zeros(0)
    least[~(least < math.inf)] = 0.0  # a table that forbids everything is shifted by 0
    shift_list = least.tolist()
    offset = math.fsum(shift_list)
    offset_error = abs(math.fsum([*shift_list, -offset]))  # the exact residual, rounded: at most an ulp
    shift_magnitude = math.fsum(np.abs(least).tolist())
    shift = least[table_of]
    pruned = 0
    if incumbent is not None and math.isfinite(problem.evaluate(incumbent)):
        # An entry whose shifted value exceeds (incumbent cost - sum of the shifts) lies on no assignment
        # as good as the incumbent. The margin covers the float rounding of both sides, so the
        # incumbent's own entries always stay.
        slack = 1e-12 * (problem.magnitude(incumbent) + shift_magnitude)
        threshold = (problem.evaluate(incumbent) - offset) + slack
        over = finite & ((values - shift) > threshold)
        pruned = int(over.sum())
        if pruned:
            values[over] = math.inf
            finite &= ~over
    difference, shift_error = _two_difference(np.where(finite, values, 0.0), np.where(finite, shift, 0.0))
    spreads = np.maximum.reduceat(difference, starts) if sizes.size else np.zeros(0)
    largest = math.fsum(spreads.tolist())
    exponent = max(min(_exact_exponent(difference), _MAX_EXPONENT), 0)
    if largest > 0:
        # largest < 2**p and 2**(q - 1) <= budget, so largest * 2**(q - 1 - p) < budget (in exponents:
        # budget / largest itself may overflow)
        exponent = min(exponent, math.frexp(budget)[1] - 1 - math.frexp(largest)[1])
    scaled = np.ldexp(difference, exponent)
    if integral:
        scaled = np.rint(scaled)
    # ldexp(scaled, -e) - difference is exact (Sterbenz), so the error is that plus the shift's
    deviation = np.abs(np.ldexp(scaled, -exponent) - difference) + np.abs(shift_error)
    errors = np.maximum.reduceat(deviation, starts).tolist() if sizes.size else []
    # Each table's deviation is exact up to one rounding of the sums here: 1 + 2**-50 covers it.
    error = math.fsum([*errors, offset_error]) * (1 + 2**-50)
    flat = np.where(finite, scaled, math.inf)
    flat.flags.writeable = False
    return ScaledCosts(exponent, offset, flat, error, pruned, shift_magnitude, problem)

"""The marginal (local-polytope) encoding shared by the ``cpsat`` and ``mip`` back-ends.

Variables:

* ``x[i, a]`` (Boolean): node ``i`` takes choice ``a``; only for *allowed* (finite-cost) choices, and
  exactly one per node.
* ``y[ij, a, b]`` (Boolean in CP-SAT, continuous in ``[0, 1]`` in a MIP): edge ``ij`` takes the pair
  ``(a, b)``; only for FINITE entries between allowed choices, with the marginal constraints
  ``sum_b y[ij, a, b] = x[i, a]`` and ``sum_a y[ij, a, b] = x[j, b]``.

A forbidden (``inf``) entry has no variable, so the constraints exclude it without any big-M. Given
integral ``x`` the constraints force ``y`` to the one pair chosen, so a continuous ``y`` is exact.
Edges whose allowed block is finite and *separable* (``C[a, b] = r[a] + s[b]``, e.g. constant or
all zero) need no ``y``: ``r`` and ``s`` are folded into the node costs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .base import Deadline

__all__ = ["MarginalModel", "marginal_model"]


@dataclass(frozen=True)
class MarginalModel:
    """Flat arrays describing the encoding; literal ``t`` is ``x[node[t], choice[t]]``.

    Attributes:
        literal_node, literal_choice, literal_cost: one entry per ``x`` literal.
        node_literals: for each node, the indices of its literals (the exactly-one constraint).
        pair_first, pair_second, pair_cost: one entry per ``y``: the literals of the two endpoints'
            choices and the entry's cost.
        marginals: ``(literal, pairs)`` rows meaning ``sum(y[pairs]) == x[literal]`` (``pairs`` may be
            empty, which forbids the literal).
    """

    literal_node: np.ndarray
    literal_choice: np.ndarray
    literal_cost: np.ndarray
    node_literals: list[np.ndarray]
    pair_first: np.ndarray
    pair_second: np.ndarray
    pair_cost: np.ndarray
    marginals: list[tuple[int, np.ndarray]]

    def assignment(self, literal_values: np.ndarray) -> np.ndarray:
        """Choice index per node from the literals' values (the largest one wins, for LP noise)."""
        return np.array(
            [self.literal_choice[lits[np.argmax(literal_values[lits])]] for lits in self.node_literals],
            dtype=np.int64,
        )

    def literal_values(self, assignment: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """0/1 values of ``x`` and ``y`` for an assignment (for solver hints)."""
        chosen = np.zeros(self.literal_node.size, dtype=np.int64)
        lookup = {(int(i), int(a)): t for t, (i, a) in enumerate(zip(self.literal_node, self.literal_choice,
                                                                      strict=True))}
        for i, a in enumerate(assignment):
            t = lookup.get((i, int(a)))
            if t is not None:
                chosen[t] = 1
        pairs = chosen[self.pair_first] & chosen[self.pair_second]
        return chosen, pairs


def marginal_model(
    node_costs: Sequence[np.ndarray],
    edges: dict[tuple[int, int], np.ndarray],
    deadline: Deadline | None = None,
) -> MarginalModel | None:
    """Build the encoding from node cost vectors and ``{(i, j): matrix}`` (``inf`` = forbidden).

    Returns None when ``deadline`` passes first.

    Example:
        >>> model = marginal_model([np.array([1.0, np.inf]), np.array([0.0, 2.0])],
        ...                        {(0, 1): np.array([[0.0, np.inf], [1.0, 1.0]])})
        >>> model.literal_choice.tolist(), model.pair_cost.tolist(), len(model.marginals)
        ([0, 0, 1], [0.0], 3)
    """
    node_costs = [np.asarray(c, dtype=np.float64).copy() for c in node_costs]
    allowed = [np.flatnonzero(np.isfinite(c)) for c in node_costs]
    first_literal = np.zeros(len(node_costs) + 1, dtype=np.int64)
    first_literal[1:] = np.cumsum([a.size for a in allowed])

    pair_first, pair_second, pair_cost, marginals = [], [], [], []
    pair_count = 0
    for count, ((i, j), matrix) in enumerate(edges.items()):
        if count % 64 == 63 and deadline is not None and deadline.expired():
            return None
        block = matrix[np.ix_(allowed[i], allowed[j])]
        if block.size == 0:
            continue
        if np.isfinite(block).all():
            rows, cols = block[:, 0], block[0, :] - block[0, 0]
            if np.array_equal(block, rows[:, None] + cols[None, :]):
                node_costs[i][allowed[i]] += rows
                node_costs[j][allowed[j]] += cols
                continue
        a, b = np.nonzero(np.isfinite(block))
        first = first_literal[i] + a
        second = first_literal[j] + b
        ids = np.arange(pair_count, pair_count + a.size)
        pair_count += a.size
        pair_first.append(first)
        pair_second.append(second)
        pair_cost.append(block[a, b])
        # Rows of one endpoint: the y's sharing its literal, grouped by a stable sort.
        endpoints = ((a, block.shape[0], first_literal[i]), (b, block.shape[1], first_literal[j]))
        for literals, count, base in endpoints:
            order = np.argsort(literals, kind="stable")
            bounds = np.searchsorted(literals[order], np.arange(count + 1))
            marginals.extend((int(base + r), ids[order[bounds[r]:bounds[r + 1]]]) for r in range(count))

    literal_node = np.repeat(np.arange(len(node_costs)), [a.size for a in allowed])
    literal_choice = np.concatenate(allowed) if allowed else np.zeros(0, dtype=np.int64)
    literal_cost = np.concatenate([c[a] for c, a in zip(node_costs, allowed, strict=True)]) if allowed else (
        np.zeros(0))
    node_literals = [np.arange(first_literal[i], first_literal[i + 1]) for i in range(len(node_costs))]

    def flat(parts: list[np.ndarray], dtype: type) -> np.ndarray:
        return np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype=dtype)

    return MarginalModel(
        literal_node, literal_choice.astype(np.int64), literal_cost, node_literals,
        flat(pair_first, np.int64), flat(pair_second, np.int64), flat(pair_cost, np.float64),
        marginals,
    )

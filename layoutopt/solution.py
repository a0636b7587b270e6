"""The result of :func:`layoutopt.solve`: one type for every method."""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any, Literal

Status = Literal["optimal", "feasible", "infeasible"]

#: A solution is ``"optimal"`` when ``objective - lower_bound`` is at most this fraction of the sum of
#: the absolute values of its objective's terms (each node's and edge's cost at the chosen choices):
#: for non-negative costs, a relative gap of at most 1e-9. Relative, so that the status does not
#: depend on the unit of the costs (seconds or nanoseconds), and far above float64's rounding.
OPTIMALITY_TOLERANCE = 1e-9


@dataclass
class Solution:
    """A choice per node, its cost and what is known about its optimality.

    Attributes:
        assignment: node -> chosen index into the node's cost vector (empty when no
            assignment could be formed, e.g. a node has no allowed choice).
        labels: node -> label of the chosen choice (``graph.nodes[n]["choices"]``), or the
            index when the node has no labels.
        objective: total cost of ``assignment``, recomputed in float64 from the original
            costs (``inf`` when the assignment uses a forbidden entry).
        lower_bound: a certified lower bound on the optimum: within the optimality tolerance
            (:data:`OPTIMALITY_TOLERANCE`) of ``objective`` when the solution is optimal (equal
            to it when the method's arithmetic is exact, e.g. integer costs), ``inf`` when the
            problem is proven infeasible, and ``-inf`` when the method proves nothing.
        status: ``"optimal"`` (proven: ``objective - lower_bound`` within the tolerance),
            ``"feasible"`` (finite objective, optimality not proven) or ``"infeasible"`` (the
            returned assignment is forbidden; infeasibility of the *problem* is proven exactly
            when ``lower_bound == inf``).
        method: the method that produced the solution (``auto`` reports what it ran in
            ``stats["engine"]``).
        solve_time: wall time of the whole ``solve`` call, in seconds.
        message: a human-readable note (culprit of an infeasibility, a timeout...).
        stats: method-specific counters (reductions applied, nodes explored...).
        memory: bytes the assignment's choices hold together (their memory figures), or None when the
            problem has none. Under a ``memory_budget`` every solution that is not ``"infeasible"``
            keeps within it, and ``lower_bound`` bounds the optimum *within the budget*.

    Example:
        >>> import networkx as nx, layoutopt
        >>> g = nx.path_graph(2)
        >>> sol = layoutopt.solve(g, {"nodes": {0: [1, 2], 1: [3, 1]},
        ...                           "edges": {(0, 1): [[0, 5], [5, 0]]}})
        >>> sol.assignment, sol.objective, sol.status
        ({0: 1, 1: 1}, 3.0, 'optimal')
    """

    assignment: dict[Hashable, int]
    labels: dict[Hashable, Any]
    objective: float
    lower_bound: float
    status: Status
    method: str
    solve_time: float = 0.0
    message: str = ""
    stats: dict[str, Any] = field(default_factory=dict)
    memory: float | None = None

    @property
    def gap(self) -> float:
        """Relative gap ``(objective - lower_bound) / objective`` (0 when proven optimal)."""
        if self.status == "optimal":
            return 0.0
        if not math.isfinite(self.objective) or not math.isfinite(self.lower_bound):
            return math.inf
        if self.objective == 0:
            return 0.0 if self.lower_bound >= 0 else math.inf
        return max(0.0, (self.objective - self.lower_bound) / abs(self.objective))

    def __repr__(self) -> str:
        return (
            f"Solution(status={self.status!r}, objective={self.objective:.6g}, "
            f"lower_bound={self.lower_bound:.6g}, method={self.method!r}, "
            f"nodes={len(self.assignment)}, solve_time={self.solve_time * 1e3:.2f} ms)"
        )

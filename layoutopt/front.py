"""The cost-memory Pareto front of a layout problem: :func:`memory_front`.

Each choice carries a memory figure besides its cost (``memory={"nodes": {node: [bytes]}}``, as
:func:`layoutopt.solve` takes it). The front is every assignment that no other beats on both the
cost and the memory: from the unconstrained optimum (the fastest, holding the most memory of the
front) down to the least-memory assignment. :func:`memory_front` walks it by the epsilon-constraint
method: solve under a budget, then under a budget below the memory the answer held, until the
smallest assignment's memory is reached; with an exact method each point is the least cost under
its budget. ``points`` caps the solves: the budgets then step down by at least
``(most - least) / (points - 1)`` bytes, and points between the steps are skipped.

Example:
    >>> import networkx as nx
    >>> costs = {"nodes": {0: [1.0, 2.0, 4.0], 1: [1.0, 3.0]}, "edges": {(0, 1): [[0, 1], [1, 0], [0, 0]]}}
    >>> memory = {"nodes": {0: [40, 20, 10], 1: [30, 5]}}
    >>> front = memory_front(nx.path_graph(2), costs, memory)
    >>> [(point.objective, point.memory) for point in front]     # fastest first, smallest last
    [(2.0, 70.0), (4.0, 50.0), (5.0, 25.0), (7.0, 15.0)]
    >>> front[-1].assignment
    {0: 2, 1: 1}
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

import networkx as nx

from .api import solve_problem
from .errors import ProblemError
from .problem import Problem
from .solution import Solution
from .solvers.budget import smallest_memory

__all__ = ["FrontPoint", "memory_front"]


@dataclass(frozen=True)
class FrontPoint:
    """One point of the front: the ``solution`` found under ``budget`` bytes; its ``objective`` (cost)
    and ``memory`` (bytes its choices hold); ``proven``: the method proved it the least cost under
    the budget (else it is the best found)."""

    budget: float
    solution: Solution = field(repr=False)

    @property
    def objective(self) -> float:
        return self.solution.objective

    @property
    def memory(self) -> float:
        return float(self.solution.memory)

    @property
    def assignment(self) -> dict[Hashable, int]:
        return self.solution.assignment

    @property
    def proven(self) -> bool:
        return self.solution.status == "optimal"


def memory_front(graph: nx.Graph, costs: Mapping, memory: Mapping, method: str = "auto", points: int = 12,
                 time_limit: float | None = None, **options: Any) -> list[FrontPoint]:
    """The cost-memory Pareto front of a layout problem, fastest first (see the module's docstring).

    Args:
        graph, costs, memory: as :func:`layoutopt.solve` takes them (``memory`` required).
        method: the solve method under each budget; an exact one (``auto``, ``cpsat``, ``mip``,
            ``toulbar2``) makes every point the least cost under its budget.
        points: the most solves (2 or more): the budgets step down by at least a ``points - 1``-th of
            the span between the smallest and the unconstrained optimum's memory.
        time_limit: seconds per solve.
        options: passed to each solve.

    Returns:
        The points, by decreasing memory and increasing cost, none dominated by another.

    Raises:
        ProblemError: no memory figures, too few points, or no feasible assignment at all.
    """
    if memory is None:
        raise ProblemError("memory_front needs the memory figures (memory={'nodes': {node: [bytes]}})")
    if points < 2:
        raise ProblemError(f"memory_front: points={points}; need 2 or more (the two ends of the front)")
    problem = Problem.from_graph(graph, costs, memory)
    found: list[FrontPoint] = []
    budget = math.inf
    step = 0.0
    least = None
    for _ in range(points + 1):
        solution = solve_problem(problem.with_memory_budget(budget), method=method, time_limit=time_limit,
                                 **options)
        if not solution.assignment or not math.isfinite(solution.objective):
            if not found:
                raise ProblemError(f"memory_front: no feasible assignment ({solution.message})")
            break  # below the smallest assignment's memory
        found.append(FrontPoint(budget, solution))
        if least is None:  # the smallest assignment's memory, once the span is known
            least = float(smallest_memory(problem).memory)
            step = max(1.0, (solution.memory - least) / (points - 1))
        if solution.memory <= least:
            break
        budget = max(least, min(solution.memory - 1.0, solution.memory - step))
    return _nondominated(found)


def _nondominated(found: list[FrontPoint]) -> list[FrontPoint]:
    """Each assignment once, none that another beats (or ties) on both cost and memory, fastest first."""
    front: list[FrontPoint] = []
    for point in sorted(found, key=lambda p: (p.objective, p.memory)):
        if not front or point.memory < front[-1].memory:
            front.append(point)
    return front

"""The topological-order DP of TVM's graph tuner (``DPTuner``), re-implemented here as its RFC describes it.

This is this repository's re-implementation of the idea, not TVM's code: TVM's graph tuner
(RFC "Graph tuner", apache/tvm#1585; ``tvm.autotvm.graph_tuner.DPTuner``) is not run. It is the
``tvm-dp`` baseline of :mod:`layoutopt.baselines` (``layoutopt bench`` runs it beside the methods).

The DP visits the operators in topological order. The DP *stage* of an operator holds the best
cost of everything visited so far for every combination of choices of the operators whose
output is still needed: the operators with *open fan-out* (a consumer not visited yet),
plus the current one. An operator leaves the state, minimised out, once its last consumer
has been visited; back-tracking the argmins recovers the assignment.

The DP is exact, but its state is the product of the choice counts of the open operators:
a frontier of 13 operators with ~8 choices is ~10^11 states (SSD's detection heads keep
their sources open until the final concats), and DenseNet's concats keep ~25 operators open
(~10^21 states). :func:`assignment` therefore computes the frontier profile first and refuses,
with the state counts, past ``state_cap`` instead of exhausting memory.

Example:
    >>> from layoutopt.baselines import solve_baseline
    >>> from layoutopt.generators import generate
    >>> sol = solve_baseline("tvm-dp", *generate("resnet50", max_choices=4))
    >>> sol.status, sol.stats["max_live"]
    ('optimal', 3)
    >>> profile(*generate("densenet121"))["log10_max_states"] > 15
    True
"""

from __future__ import annotations

import math
import time
from collections.abc import Hashable, Mapping
from typing import Any

import networkx as nx
import numpy as np

from .errors import ProblemError
from .problem import Costs, Problem

__all__ = ["StateCapExceeded", "assignment", "profile", "state_counts"]

#: default largest DP table (entries): 10^7 float64 = 80 MB
STATE_CAP = 10**7


class StateCapExceeded(ProblemError):
    """The DP would need more states than the cap; ``stats`` holds the frontier profile."""

    def __init__(self, message: str, stats: dict[str, Any]) -> None:
        super().__init__(message)
        self.stats = stats


def _order(graph: nx.Graph, problem: Problem) -> list[int]:
    """Topological order (ties broken by insertion order), as the graph tuner walks the graph."""
    position = {n: i for i, n in enumerate(graph.nodes)}
    if graph.is_directed() and nx.is_directed_acyclic_graph(graph):
        ordered = nx.lexicographical_topological_sort(graph, key=position.__getitem__)
    else:
        ordered = list(graph.nodes)
    return [problem.index[n] for n in ordered]  # type: ignore[attr-defined]


_Step = tuple[int, list[int], list[int]]


def _plan(problem: Problem, order: list[int]) -> tuple[list[_Step], dict[str, Any]]:
    """Per step: (node, state axes after adding it, nodes closed at this step), and the state counts."""
    rank = {v: k for k, v in enumerate(order)}
    last_use = {v: max([rank[v], *(rank[u] for u in problem.neighbors(v))]) for v in order}
    sizes = problem.sizes
    live: list[int] = []
    steps = []
    states = []  # exact Python integers: the counts overflow float precision on DenseNet
    for k, v in enumerate(order):
        axes = [*live, v]
        states.append(math.prod(sizes[u] for u in axes))
        closed = [u for u in axes if last_use[u] <= k]
        steps.append((v, axes, closed))
        live = [u for u in axes if last_use[u] > k]
    largest = max(states, default=1)
    stats = {
        "max_live": max((len(axes) for _, axes, _ in steps), default=0),
        "log10_max_states": round(math.log10(largest), 3),
        "max_states": largest,
        "total_states": sum(states),
    }
    return steps, stats


def state_counts(graph: nx.Graph, problem: Problem) -> dict[str, Any]:
    """The DP's state counts on a validated problem, without running it.

    Returns:
        ``{"max_live": largest number of operators in a state (the frontier, plus the
        current one), "log10_max_states": log10 of the largest table, "max_states",
        "total_states": sum of every stage's table size}``.
    """
    return _plan(problem, _order(graph, problem))[1]


def profile(graph: nx.Graph, costs: Mapping | Costs | None = None) -> dict[str, Any]:
    """:func:`state_counts` of ``graph`` with ``costs`` (see :func:`layoutopt.solve` for their forms)."""
    return state_counts(graph, Problem.from_graph(graph, costs))


def assignment(
    graph: nx.Graph, problem: Problem, time_limit: float | None = None, state_cap: int = STATE_CAP
) -> dict[Hashable, int]:
    """An optimal assignment by the topological-order DP; refuses past ``state_cap`` table entries.

    The ``tvm-dp`` baseline's function (see :mod:`layoutopt.baselines` for the contract).

    Raises:
        StateCapExceeded: the largest DP table would exceed ``state_cap`` entries (its
            ``stats`` and message give the state counts).
        TimeoutError: ``time_limit`` seconds elapsed between two stages.
    """
    start = time.perf_counter()
    steps, stats = _plan(problem, _order(graph, problem))
    if stats["max_states"] > state_cap:
        raise StateCapExceeded(
            f"topological-order DP needs 10^{stats['log10_max_states']:.1f} states "
            f"({stats['max_live']} operators in one state), over the cap of {state_cap:.0e}",
            stats,
        )
    sizes = problem.sizes
    table = np.zeros(())
    axes: list[int] = []
    eliminated: list[tuple[int, list[int], np.ndarray]] = []  # (node, axes left, argmin over it)
    for v, new_axes, closed in steps:
        if time_limit is not None and time.perf_counter() - start > time_limit:
            raise TimeoutError(f"topological-order DP exceeded the time limit of {time_limit:g} s")
        table = table[..., None] + problem.node_costs[v].reshape([1] * len(axes) + [sizes[v]])
        axes = new_axes
        for u in problem.neighbors(v):
            if u in axes[:-1]:
                shape = [1] * len(axes)
                shape[axes.index(u)], shape[-1] = sizes[u], sizes[v]
                table = table + problem.edge(u, v).reshape(shape)
        for u in closed:
            a = axes.index(u)
            best = np.argmin(table, axis=a)
            table = np.take_along_axis(table, np.expand_dims(best, a), axis=a).squeeze(a)
            axes = axes[:a] + axes[a + 1:]
            eliminated.append((u, list(axes), best))
    chosen = np.zeros(len(problem), dtype=np.int64)
    for u, left, best in reversed(eliminated):
        chosen[u] = best[tuple(chosen[w] for w in left)]
    return dict(zip(problem.nodes, chosen.tolist(), strict=True))

"""Shared hypothesis strategies: small random layout-selection instances, as users give them.

A module of its own rather than conftest.py: tests/tvm has a conftest too, and `from conftest import`
would pick whichever was imported first.
"""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
from hypothesis import strategies as st


@st.composite
def cost_arrays(draw, shape: tuple[int, ...], inf_share: float = 0.15) -> np.ndarray:
    """Costs of ``shape``: small integers (ties are common, and ties are where solvers disagree),
    sometimes non-dyadic floats (exercising the integer scaling), negative about a third of the time
    (PBQP is defined over the reals), with some ``inf``."""
    size = math.prod(shape)
    low = draw(st.sampled_from([0, 0, -1]))  # -1: negative values allowed
    if draw(st.booleans()):
        values = draw(st.lists(st.integers(9 * low, 9), min_size=size, max_size=size))
    else:
        values = draw(st.lists(st.floats(100 * low, 100, allow_nan=False, allow_infinity=False),
                               min_size=size, max_size=size))
    array = np.array(values, dtype=float).reshape(shape)
    # A seeded mask: hypothesis-drawn floats cluster at 0 and would forbid nearly everything.
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    array[rng.random(shape) < inf_share] = math.inf
    return array


@st.composite
def instances(draw, max_nodes: int = 6, max_choices: int = 3, inf_share: float = 0.15,
              kinds: tuple[str, ...] = ("graph", "digraph", "multidigraph")):
    """``(graph, costs)`` as :func:`layoutopt.solve` takes them.

    Covers isolated nodes, disconnected graphs, K=1 nodes, all-zero matrices and ``inf`` entries;
    a ``Graph`` sometimes gives an edge's matrix as ``(v, u)`` transposed; a ``DiGraph`` may hold both
    ``u -> v`` and ``v -> u``; a ``MultiDiGraph`` has parallel edges and carries its costs as ``"cost"``
    attributes (``costs`` is then None).
    """
    kind = draw(st.sampled_from(kinds))
    n = draw(st.integers(1, max_nodes))
    graph = {"graph": nx.Graph, "digraph": nx.DiGraph, "multidigraph": nx.MultiDiGraph}[kind]()
    graph.add_nodes_from(range(n))
    sizes = {i: draw(st.integers(1, max_choices)) for i in range(n)}
    for u in range(n):
        for v in range(u + 1, n):
            count = draw(st.integers(0, 2 if kind == "multidigraph" else 1))
            for _ in range(count):
                graph.add_edge(*((v, u) if kind != "graph" and draw(st.booleans()) else (u, v)))
            if kind == "digraph" and count and draw(st.integers(0, 4)) == 0:
                graph.add_edge(v, u)  # both directions: their matrices are summed

    def matrix(u, v):
        if draw(st.integers(0, 9)) == 0:
            return np.zeros((sizes[u], sizes[v]))
        return draw(cost_arrays((sizes[u], sizes[v]), inf_share))

    node_costs = {i: draw(cost_arrays((sizes[i],), inf_share)) for i in range(n)}
    if kind == "multidigraph":
        for i, c in node_costs.items():
            graph.nodes[i]["cost"] = c
        for u, v, key in graph.edges(keys=True):
            graph.edges[u, v, key]["cost"] = matrix(u, v)
        return graph, None
    edge_costs = {}
    for u, v in graph.edges:
        if kind == "graph" and draw(st.booleans()):
            edge_costs[(v, u)] = matrix(u, v).T
        else:
            edge_costs[(u, v)] = matrix(u, v)
    return graph, {"nodes": node_costs, "edges": edge_costs}


def uniform_problem(graph: nx.Graph, choices: int, seed: int = 0, high: float = 10.0):
    """``graph`` with ``choices`` per node and uniform random costs in ``[0, high)`` everywhere."""
    from layoutopt import Problem

    rng = np.random.default_rng(seed)
    costs = {"nodes": {v: rng.uniform(0, high, choices) for v in graph},
             "edges": {e: rng.uniform(0, high, (choices, choices)) for e in graph.edges}}
    return Problem.from_graph(graph, costs)


def frustrated_problem(nodes: int = 60, choices: int = 6, degree: int = 6, seed: int = 0):
    """A hard instance for every exact method (uniform random costs on a random regular graph: no
    structure, a loose LP relaxation), to exercise time limits. Builds in milliseconds."""
    return uniform_problem(nx.random_regular_graph(degree, nodes, seed=seed), choices, seed)

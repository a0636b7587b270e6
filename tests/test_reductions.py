"""The exact PBQP reductions: kernel optimum + constant == optimum, expand rebuilds it."""

import math

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import layoutopt
from layoutopt import Problem
from layoutopt.generators import generate
from layoutopt.solvers.reductions import WorkingGraph, reduce


@st.composite
def small_problems(draw, max_nodes=7, max_choices=3, inf_share=0.15):
    """Random small PBQP instances: inf entries, isolated nodes, K=1 nodes, disconnected
    graphs, zero matrices, negative costs, Graph or DiGraph."""
    n = draw(st.integers(1, max_nodes))
    directed = draw(st.booleans())
    graph = nx.DiGraph() if directed else nx.Graph()
    graph.add_nodes_from(range(n))
    pairs = [(u, v) for u in range(n) for v in range(u + 1, n)]
    for u, v in pairs:
        if draw(st.booleans()):
            graph.add_edge(*((v, u) if directed and draw(st.booleans()) else (u, v)))
    sizes = {i: draw(st.integers(1, max_choices)) for i in range(n)}

    low = draw(st.sampled_from([0, -5]))  # negative costs too, in some instances

    def values(shape):
        flat = draw(st.lists(st.integers(low, 9), min_size=math.prod(shape), max_size=math.prod(shape)))
        arr = np.array(flat, dtype=float).reshape(shape)
        forbid = draw(st.lists(st.booleans(), min_size=arr.size, max_size=arr.size))
        rng = np.random.default_rng(abs(sum(flat)))
        arr[np.array(forbid).reshape(shape) & (rng.random(shape) < inf_share * 2)] = math.inf
        return arr

    costs = {
        "nodes": {i: values((sizes[i],)) for i in range(n)},
        "edges": {
            (u, v): (np.zeros((sizes[u], sizes[v])) if draw(st.integers(0, 9)) == 0
                     else values((sizes[u], sizes[v])))
            for u, v in graph.edges
        },
    }
    return Problem.from_graph(graph, costs)


def brute(problem):
    return layoutopt.solve_problem(problem, "bruteforce")


@settings(max_examples=150, deadline=None)
@given(small_problems())
def test_kernel_optimum_plus_constant_is_the_optimum(problem):
    reference = brute(problem)
    reduction = reduce(problem)
    if reduction.infeasible is not None:
        assert reference.status == "infeasible"
        return
    kernel = brute(reduction.kernel)
    if kernel.status == "infeasible":
        assert reference.status == "infeasible"
        return
    assert reference.status == "optimal"
    assert kernel.objective + reduction.constant == pytest.approx(reference.objective)
    full = reduction.expand([kernel.assignment[n] for n in reduction.kernel.nodes])
    assert problem.evaluate(full) == pytest.approx(reference.objective)


def test_kernel_nodes_keep_degree_three_and_labels():
    graph = nx.complete_graph(4)
    graph.add_edge(3, "leaf")
    for n in graph:
        graph.nodes[n]["choices"] = ["a", "b"]
    costs = {"nodes": {n: [1.0, 2.0] for n in graph}, "edges": {e: [[0, 1], [1, 0]] for e in graph.edges}}
    costs["nodes"]["leaf"] = [1.0, 1.5]
    reduction = reduce(Problem.from_graph(graph, costs))
    assert set(reduction.kernel.nodes) == {0, 1, 2, 3}
    assert all(len(reduction.kernel.neighbors(i)) == 3 for i in range(4))
    assert reduction.stats["RI"] == 1 and reduction.stats["kernel_nodes"] == 4
    assert reduction.kernel.labels[0] == ["a", "b"]
    assert reduction.expand([1, 1, 1, 1]) == [1, 1, 1, 1, 1]
    with pytest.raises(ValueError, match="kernel assignment has 2 entries"):
        reduction.expand([0, 1])


@pytest.mark.parametrize("family", ["resnet", "inception"])
def test_series_parallel_graphs_reduce_completely(family):
    graph, costs = generate(family, nodes=120, max_choices=6, seed=2)
    problem = Problem.from_graph(graph, costs)
    reduction = reduce(problem)
    assert len(reduction.kernel) == 0 and reduction.stats["RN"] == 0
    assert reduction.stats["RII"] > 0
    assignment = reduction.expand([])
    assert problem.evaluate(assignment) == pytest.approx(reduction.constant)


def test_zero_edges_are_dropped_and_single_choice_nodes_folded():
    graph = nx.complete_graph(4)
    costs = {"nodes": {0: [5.0], 1: [1.0, 2.0], 2: [2.0, 1.0], 3: [0.0, 0.0]},
             "edges": {e: np.zeros((len([5.0]) if e[0] == 0 else 2, 2)) for e in graph.edges}}
    costs["edges"][(0, 1)] = [[3.0, 0.0]]
    reduction = reduce(Problem.from_graph(graph, costs))
    assert reduction.stats["dropped_edges"] == 5  # every zero matrix
    assert reduction.stats["R1"] == 1
    assert len(reduction.kernel) == 0 and reduction.constant == pytest.approx(5.0 + 2.0 + 1.0 + 0.0)


def test_infeasibility_found_by_the_reductions_names_a_node():
    graph = nx.path_graph(3)
    # every edge allows some pair and every node has a finite cost, yet edge (0, 1) needs
    # node 1 = 0 and edge (1, 2) needs node 1 = 1
    costs = {"nodes": {0: [1.0, 1.0], 1: [1.0, 1.0], 2: [1.0, 1.0]},
             "edges": {(0, 1): [[0, math.inf], [0, math.inf]], (1, 2): [[math.inf, math.inf], [0, math.inf]]}}
    reduction = reduce(Problem.from_graph(graph, costs))
    assert reduction.infeasible is not None and "node" in reduction.infeasible
    with pytest.raises(ValueError, match="infeasible"):
        reduction.expand([])


def test_pruning_removes_forbidden_choices_and_propagates():
    graph = nx.complete_graph(4)
    costs = {"nodes": {i: [1.0, 2.0, 3.0] for i in graph}, "edges": {e: np.ones((3, 3)) for e in graph.edges}}
    costs["nodes"][0] = [math.inf, 1.0, 1.0]
    # choice 2 of node 1 only pairs with node 0's forbidden choice 0
    costs["edges"][(0, 1)] = np.array([[1.0, 1, 1], [1, 1, math.inf], [1, 1, math.inf]])
    working = WorkingGraph(Problem.from_graph(graph, costs))
    working.prune_all()
    assert working.domain(0).tolist() == [1, 2]
    assert working.domain(1).tolist() == [0, 1]
    assert working.vector(1).tolist() == [1.0, 2.0]
    kernel, domains = working.kernel(working.live_nodes())
    assert [d.tolist() for d in domains] == [[1, 2], [0, 1], [0, 1, 2], [0, 1, 2]]
    assert kernel.edge(0, 1).shape == (2, 2) and kernel.edge(1, 0).shape == (2, 2)
    assert working.counts["pruned"] == 2

"""The cost-memory Pareto front (:func:`layoutopt.front.memory_front`) against brute-force enumeration."""

import itertools
import math

import networkx as nx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import instances

from layoutopt import Problem, ProblemError
from layoutopt.front import memory_front


def _brute_front(problem: Problem) -> list[tuple[float, float]]:
    """Every (cost, memory) no other assignment beats or ties on both, fastest first."""
    pairs = set()
    for assignment in itertools.product(*(range(size) for size in problem.sizes)):
        cost = problem.evaluate(list(assignment))
        if math.isfinite(cost):
            pairs.add((cost, problem.memory_of(list(assignment))))
    front: list[tuple[float, float]] = []
    for cost, memory in sorted(pairs):
        if not front or memory < front[-1][1]:
            front.append((cost, memory))
    return front


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=instances(max_nodes=5, max_choices=3, inf_share=0.1), data=st.data())
def test_front_is_the_brute_force_front(case, data):
    graph, costs = case
    problem = Problem.from_graph(graph, costs)
    memory = {"nodes": {node: data.draw(st.lists(st.integers(0, 30), min_size=size, max_size=size))
                        for node, size in zip(problem.nodes, problem.sizes, strict=True)}}
    expected = _brute_front(Problem.from_graph(graph, costs, memory))
    if not expected:
        with pytest.raises(ProblemError, match="no feasible assignment"):
            memory_front(graph, costs, memory, method="bruteforce")
        return
    front = memory_front(graph, costs, memory, method="bruteforce", points=1000)  # every point
    found = [(point.objective, point.memory) for point in front]
    assert [m for _, m in found] == [m for _, m in expected]
    assert [c for c, _ in found] == pytest.approx([c for c, _ in expected], rel=1e-9, abs=1e-9)
    assert all(point.proven and point.memory <= point.budget for point in front)


def test_few_points_keep_both_ends():
    graph = nx.empty_graph(6)
    costs = {"nodes": {n: [1.0, 2.0, 3.0, 4.0] for n in graph}, "edges": {}}
    memory = {"nodes": {n: [40, 30, 20, 10] for n in graph}}
    full = memory_front(graph, costs, memory, method="bruteforce", points=1000)
    assert len(full) == 19  # memory 240 down to 60 in steps of 10
    few = memory_front(graph, costs, memory, method="bruteforce", points=4)
    assert len(few) <= 5 and few[0].memory == 240 and few[-1].memory == 60
    assert {(p.objective, p.memory) for p in few} <= {(p.objective, p.memory) for p in full}


def test_bad_arguments():
    graph = nx.path_graph(2)
    costs = {"nodes": {0: [1.0], 1: [1.0]}, "edges": {}}
    with pytest.raises(ProblemError, match="memory figures"):
        memory_front(graph, costs, None)
    with pytest.raises(ProblemError, match="points=1"):
        memory_front(graph, costs, {"nodes": {0: [1], 1: [1]}}, points=1)

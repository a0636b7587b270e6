"""The synthetic generators: deterministic, exact sizes, legal choices, always feasible."""

import math

import networkx as nx
import numpy as np
import pytest

import layoutopt
from layoutopt import ProblemError
from layoutopt.generators import FAMILIES, PRESETS, REGIMES, generate


def assert_same_instance(a, b):
    (ga, ca), (gb, cb) = a, b
    assert list(ga.nodes) == list(gb.nodes)
    assert list(ga.edges) == list(gb.edges)
    for n in ga.nodes:
        assert ga.nodes[n]["choices"] == gb.nodes[n]["choices"]
        assert np.array_equal(ca.nodes[n], cb.nodes[n])
    for e in ga.edges:
        assert np.array_equal(ca.edges[e], cb.edges[e])


@pytest.mark.parametrize("family", list(FAMILIES))
def test_deterministic_per_seed(family):
    first = generate(family, nodes=60, max_choices=8, seed=7, regime="hard")
    assert_same_instance(first, generate(family, nodes=60, max_choices=8, seed=7, regime="hard"))
    other = generate(family, nodes=60, max_choices=8, seed=8, regime="hard")
    assert any(
        not np.array_equal(first[1].nodes[n], other[1].nodes[n])
        for n in first[0].nodes
        if n in other[1].nodes
    )


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("nodes", [20, 137, 2000])
def test_exact_size_dag_and_feasible(family, nodes):
    graph, costs = generate(family, nodes=nodes, seed=1)
    assert graph.number_of_nodes() == nodes
    assert nx.is_directed_acyclic_graph(graph) and nx.is_weakly_connected(graph)
    sizes = [len(c) for c in costs.nodes.values()]
    assert min(sizes) >= 2 and max(sizes) <= 16
    problem = layoutopt.Problem.from_graph(graph, costs)  # labels match costs, shapes are right
    reference = problem.assignment_from(graph.graph["reference_assignment"])
    assert math.isfinite(problem.evaluate(reference))
    forbidden_nodes = sum(int(np.isinf(c).sum()) for c in costs.nodes.values())
    assert 0 < forbidden_nodes < 0.1 * sum(sizes)


@pytest.mark.parametrize("max_choices", [1, 2, 5])
def test_choice_bounds(max_choices):
    _, costs = generate("inception", nodes=100, max_choices=max_choices, seed=3)
    sizes = [len(c) for c in costs.nodes.values()]
    assert max(sizes) <= max_choices
    assert min(sizes) >= min(2, max_choices)


def test_presets_have_the_real_networks_shape():
    shapes = {name: generate(name)[0] for name in ("resnet50", "inception", "densenet121", "ssd")}
    assert {n: (g.number_of_nodes(), g.number_of_edges()) for n, g in shapes.items()} == {
        "resnet50": (71, 86), "inception": (80, 106), "densenet121": (183, 717), "ssd": (67, 89),
    }
    assert max(d for _, d in shapes["densenet121"].in_degree()) == 25
    assert sorted(d for _, d in shapes["ssd"].in_degree())[-2:] == [6, 6]  # the two head concats
    assert PRESETS["googlenet"] == PRESETS["inception"]


def test_labels_and_edge_cost_model():
    graph, costs = generate("resnet", nodes=40, seed=2, regime="noinf")
    for (u, v), matrix in costs.edges.items():
        out_blocks = [label.split("->")[-1] for label in graph.nodes[u]["choices"]]
        in_blocks = [label.split("->")[0] for label in graph.nodes[v]["choices"]]
        same = np.equal.outer(np.array(out_blocks, dtype=object), np.array(in_blocks, dtype=object))
        assert (matrix[same] == 0).all() and (matrix[~same] > 0).all()
    assert all(np.isfinite(c).all() for c in costs.nodes.values())
    assert all(np.isfinite(m).all() for m in costs.edges.values())


def test_regimes_scale_transforms():
    normal = generate("random", nodes=50, seed=4, regime="noinf")[1]
    xhard = generate("random", nodes=50, seed=4, regime="xhard")[1]
    mean = lambda costs: np.mean([m[np.isfinite(m) & (m > 0)].mean() for m in costs.edges.values()  # noqa: E731
                                  if (np.isfinite(m) & (m > 0)).any()])
    assert 5 < mean(xhard) / mean(normal) < 20
    assert set(REGIMES) == {"normal", "hard", "xhard", "noinf"}


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"family": "vgg"}, "unknown family 'vgg'"),
        ({"family": "resnet", "regime": "easy"}, "unknown regime 'easy'"),
        ({"family": "resnet", "nodes": 1}, "nodes must be"),
        ({"family": "ssd", "nodes": 5}, "family 'ssd' needs at least"),
        ({"family": "resnet", "max_choices": 0}, "max_choices"),
        ({"family": "resnet", "seed": -1}, "seed"),
        ({"family": "resnet50", "nodes": 100}, "preset 'resnet50' has 71 nodes"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ProblemError, match=match):
        generate(**kwargs)

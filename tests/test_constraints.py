"""Pins and forbids: applied to the costs, respected by every exact method, clear errors."""

from __future__ import annotations

import math

import networkx as nx
import pytest

import layoutopt
from layoutopt import ProblemError
from layoutopt.constraints import constrain, explain_infeasible, parse_constraints

LABELS = ["NCHW8c->NCHW8c", "NCHW16c->NCHW16c[order=oc]", "NCHW16c->NCHW16c[order=rows]", "NCHW->NCHW"]


def chain():
    graph = nx.DiGraph([("a", "b"), ("b", "c")])
    for node in graph:
        graph.nodes[node]["choices"] = list(LABELS)
    costs = {
        "nodes": {"a": [1.0, 0.5, 0.6, 3.0], "b": [1.0, 0.4, 0.3, 3.0], "c": [0.2, 1.0, 1.0, 3.0]},
        "edges": {edge: [[0 if i == j else 0.1 for j in range(4)] for i in range(4)]
                  for edge in graph.edges},
    }
    return graph, costs


@pytest.mark.parametrize("method", ["bruteforce", "dp", "pbqp", "auto"])
def test_a_pin_is_kept_and_a_forbid_avoided_by_every_method(method):
    graph, costs = chain()
    free = layoutopt.solve(graph, costs, method="bruteforce")
    assert free.labels["b"] == LABELS[2]
    constrained = constrain(graph, costs, pin=["c=NCHW->NCHW"], forbid={"b": "NCHW16c->NCHW16c[order=rows]"})
    solution = layoutopt.solve(graph, constrained, method=method)
    assert solution.labels["c"] == "NCHW->NCHW" and solution.labels["b"] != LABELS[2]
    assert solution.objective == layoutopt.solve(graph, constrained, method="bruteforce").objective


def test_a_label_without_knobs_names_every_kernel_in_those_layouts():
    graph, costs = chain()
    statements = parse_constraints(graph, forbid=["b=NCHW16c->NCHW16c"])
    assert statements == [("forbid", "b", "NCHW16c->NCHW16c", (1, 2))]
    assert constrain(graph, costs, statements=statements).nodes["b"] == [1.0, math.inf, math.inf, 3.0]
    pinned = constrain(graph, costs, pin={"a": ["NCHW8c->NCHW8c", "NCHW->NCHW"]})
    assert pinned.nodes["a"] == [1.0, math.inf, math.inf, 3.0]
    assert costs["nodes"]["a"] == [1.0, 0.5, 0.6, 3.0]  # the caller's costs are left alone


@pytest.mark.parametrize(
    ("pin", "forbid", "message"),
    [
        (["conv9=NCHW->NCHW"], None, "no layer 'conv9'"),
        (["bb=NCHW->NCHW"], None, "did you mean b"),
        (["b=NCHW4c->NCHW4c"], None, "has no choice 'NCHW4c->NCHW4c'; its choices are NCHW8c->NCHW8c"),
        (None, ["b"], "expected LAYER=CHOICE"),
        (None, ["b="], "expected LAYER=CHOICE"),
    ],
)
def test_unknown_layers_and_choices_are_clear_errors(pin, forbid, message):
    graph, _ = chain()
    with pytest.raises(ProblemError, match=message):
        parse_constraints(graph, pin, forbid)


def test_an_infeasible_pin_is_named():
    graph, costs = chain()
    costs["edges"][("a", "b")][0][1] = math.inf  # 8c -> 16c[oc] cannot be converted
    costs["edges"][("a", "b")][0][2] = math.inf
    statements = parse_constraints(graph, pin=["a=NCHW8c->NCHW8c", "b=NCHW16c->NCHW16c"])
    assert layoutopt.solve(graph, constrain(graph, costs, statements=statements)).status == "infeasible"
    message = explain_infeasible(graph, costs, statements)
    assert message.startswith("pin a=NCHW8c->NCHW8c with pin b=NCHW16c->NCHW16c") and "('a', 'b')" in message


def test_forbidding_every_choice_of_a_node_is_named():
    graph, costs = chain()
    statements = parse_constraints(graph, forbid=[f"c={label}" for label in LABELS])
    message = explain_infeasible(graph, costs, statements)
    assert "node 'c' has no allowed choice" in message and "forbid c=NCHW->NCHW" in message

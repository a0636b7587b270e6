"""Pins and forbids: applied to the costs, respected by every exact method, clear errors."""

from __future__ import annotations

import math
import re

import networkx as nx
import pytest

import layoutopt
from layoutopt import ProblemError
from layoutopt.constraints import (
    Constraint,
    allows,
    constrain,
    explain_infeasible,
    parse_constraint_texts,
    parse_constraints,
)

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
    assert statements == [Constraint("forbid", "b", "NCHW16c->NCHW16c", (1, 2))]
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


def test_forbids_leaving_only_failed_kernels_are_named():
    graph, costs = chain()
    costs["nodes"]["c"][0] = math.inf  # its NCHW8c kernel failed: the forbids leave nothing that runs
    statements = parse_constraints(graph, forbid=[f"c={label}" for label in LABELS[1:]])
    message = explain_infeasible(graph, costs, statements)
    assert "node 'c' has no allowed choice" in message and "forbid c=NCHW->NCHW" in message


@pytest.mark.parametrize(
    ("pin", "forbid", "message"),
    [  # a pin and a forbid on the same choice, as texts or as mappings
        (["b=NCHW8c->NCHW8c"], ["b=NCHW8c->NCHW8c"],
         "pin b=NCHW8c->NCHW8c contradicts forbid b=NCHW8c->NCHW8c: every choice of layer 'b' the pin"),
        ({"b": "NCHW8c->NCHW8c"}, {"b": ["NCHW->NCHW", "NCHW8c->NCHW8c"]},
         "pin b=NCHW8c->NCHW8c contradicts forbid b=NCHW8c->NCHW8c:"),
        # a pin whose every kernel is forbidden, one knob at a time
        (["b=NCHW16c->NCHW16c"], ["b=NCHW16c->NCHW16c[order=oc]", "b=NCHW16c->NCHW16c[order=rows]"],
         "pin b=NCHW16c->NCHW16c contradicts forbid b=NCHW16c->NCHW16c[order=oc], "
         "forbid b=NCHW16c->NCHW16c[order=rows]"),
        (["b=NCHW16c->NCHW16c[order=rows]"], ["b=NCHW16c->NCHW16c"],
         "pin b=NCHW16c->NCHW16c[order=rows] contradicts forbid b=NCHW16c->NCHW16c:"),
        # two pins of one layer, each forbidden: nothing left
        (["b=NCHW8c->NCHW8c", "b=NCHW->NCHW"], ["b=NCHW->NCHW", "b=NCHW8c->NCHW8c"],
         "pin b=NCHW8c->NCHW8c contradicts forbid b=NCHW8c->NCHW8c"),
        # forbids of every choice of a layer
        (None, [f"c={label}" for label in LABELS],
         "every choice of layer 'c' is forbidden: forbid c=NCHW8c->NCHW8c, "
         "forbid c=NCHW16c->NCHW16c[order=oc], forbid c=NCHW16c->NCHW16c[order=rows], forbid c=NCHW->NCHW"),
    ],
)
def test_contradicting_pins_and_forbids_are_refused_naming_the_layer_and_choice(pin, forbid, message):
    graph, _ = chain()
    with pytest.raises(ProblemError, match=re.escape(message)) as refused:
        parse_constraints(graph, pin, forbid)
    assert "\n" not in str(refused.value)


def test_pins_and_forbids_that_leave_a_choice_are_kept():
    graph, costs = chain()
    # one loop order of a layout pair: the pin names two kernels, the forbid one of them
    statements = parse_constraints(graph, pin=["b=NCHW16c->NCHW16c"],
                                   forbid=["b=NCHW16c->NCHW16c[order=rows]"])
    assert constrain(graph, costs, statements=statements).nodes["b"] == [math.inf, 0.4, math.inf, math.inf]
    # forbids of other layers, and forbids of all but one choice, are no contradiction
    parse_constraints(graph, pin=["a=NCHW->NCHW"], forbid=["b=NCHW->NCHW", *(f"c={x}" for x in LABELS[1:])])


def test_contradicting_texts_are_refused_without_the_graph():
    assert parse_constraint_texts(["a=x"], {"b": ["x", "y"]}) == [("pin", "a", "x"), ("forbid", "b", "x"),
                                                                   ("forbid", "b", "y")]
    with pytest.raises(ProblemError, match="pin a=x contradicts forbid a=x"):
        parse_constraint_texts(["a=x", "b=y"], ["a=x"])
    with pytest.raises(ProblemError, match="expected LAYER=CHOICE"):
        parse_constraint_texts(["a"])


def test_a_statement_is_a_record_read_by_name_not_a_tuple_unpacked_by_position():
    graph, _ = chain()
    pin, forbid = parse_constraints(graph, pin=["a=NCHW16c->NCHW16c"], forbid=["b=NCHW->NCHW"])
    assert (pin.kind, pin.node, pin.choice, pin.indices) == ("pin", "a", "NCHW16c->NCHW16c", (1, 2))
    assert pin.pins and not forbid.pins and str(forbid) == "forbid b=NCHW->NCHW"
    assert not isinstance(pin, tuple)
    with pytest.raises(ProblemError, match="kind must be 'pin' or 'forbid'"):
        Constraint("ban", "a", "NCHW->NCHW", (3,))


@pytest.mark.parametrize(
    ("pin", "forbid"),
    [(["b=NCHW16c->NCHW16c"], ["b=NCHW16c->NCHW16c[order=rows]"]),  # pinned and forbidden: the rest
     (["b=NCHW8c->NCHW8c", "b=NCHW->NCHW"], None),  # two pins of one layer: either
     (None, ["a=NCHW8c->NCHW8c", "c=NCHW->NCHW", "c=NCHW8c->NCHW8c"]),
     (["a=NCHW->NCHW"], ["b=NCHW->NCHW"])],
)
def test_the_constrained_costs_and_allows_agree_choice_by_choice(pin, forbid):
    graph, costs = chain()
    statements = parse_constraints(graph, pin, forbid)
    constrained = constrain(graph, costs, statements=statements)
    for node in graph:
        allowed = [allows(statements, node, k) for k in range(len(LABELS))]
        assert [math.isfinite(c) for c in constrained.nodes[node]] == allowed, node
        assert any(allowed), node

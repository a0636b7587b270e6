"""The operator rules (:mod:`layoutopt.tvm.ops`): one description per Relax op that extraction, the
rewrite, the profile and the build all read."""

from __future__ import annotations

import json
from collections import defaultdict
from types import MappingProxyType

import numpy as np
import pytest

pytest.importorskip("tvm")  # the tvm extra; CI installs it

from rule_snapshot import DATA, models, snapshot_of

from layoutopt import Costs, ProblemError
from layoutopt.tvm import extract_layout_graph
from layoutopt.tvm._tvm import import_tvm
from layoutopt.tvm.building.apply import apply_assignment, apply_layouts, op_list
from layoutopt.tvm.building.baselines import fixed_layout_assignment
from layoutopt.tvm.building.builder import build, legalize
from layoutopt.tvm.evaluate.profile import call_category, profile_calls, time_breakdown
from layoutopt.tvm.evaluate.timing import random_inputs, run
from layoutopt.tvm.graph.graph import KINDS
from layoutopt.tvm.measure.problem import transform_edge_costs
from layoutopt.tvm.ops import (
    RULES,
    OpRule,
    categories,
    is_tensor_constant,
    op_name,
    register,
    rules_for,
    static_shape,
    unregister,
)
from layoutopt.tvm.ops.common import four_d_input, kernel_family
from layoutopt.tvm.ops.concat import SplitRule
from layoutopt.tvm.ops.conv2d import Conv2dRule
from layoutopt.tvm.ops.elementwise import UnaryRule

pytestmark = pytest.mark.tvm

SNAPSHOT = json.loads(DATA.read_text())
DIRECT = {"blocks": [8, 16], "algorithms": ["direct"]}


@pytest.fixture(scope="module")
def snapshot_models():
    return models()


@pytest.mark.parametrize("name", sorted(SNAPSHOT))
def test_the_graph_and_rewrite_are_those_the_code_before_the_rules_made(name, snapshot_models):
    # the workloads byte for byte (a cost cache written before still hits), the choices, the edges, and
    # the same program rewritten and legalized for three assignments
    assert snapshot_of(snapshot_models[name]) == SNAPSHOT[name]


# ------------------------------------------------------------------------------------------------
# a toy op, registered from this file alone


def _legalize_floor(bb, call):
    """``relax.floor`` -> ``topi.floor`` under a name of its own, so that the build shows it ran."""
    tvm = import_tvm()
    return bb.call_te(tvm.topi.floor, call.args[0], primfunc_name_hint="toy_floor")


class FloorRule(OpRule):
    """``relax.floor`` (a boundary without this rule) as a layout-following elementwise op, with its
    own legalization and profile category."""

    name = "toy_floor"
    ops = frozenset({"relax.floor"})
    category, symbols = "floor", ("toy_floor",)
    legalizers = MappingProxyType({"relax.floor": _legalize_floor})

    def carrier(self, call, op, is_data, source):
        return four_d_input(call, is_data)


def floor_model(seed: int = 0):
    """data -> conv1 -> floor -> conv2."""
    from tvm import relax

    rng = np.random.default_rng(seed)
    bb = relax.BlockBuilder()
    x = relax.Var("data", relax.TensorType((1, 8, 6, 6), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            w1 = relax.const(rng.standard_normal((16, 8, 3, 3)).astype("float32"))
            w2 = relax.const(rng.standard_normal((16, 16, 1, 1)).astype("float32"))
            y = bb.emit(relax.op.nn.conv2d(x, w1, padding=1), "conv1")
            z = bb.emit(relax.op.floor(y), "floor")
            out = bb.emit_output(relax.op.nn.conv2d(z, w2), "conv2")
        bb.emit_func_output(out)
    return bb.get()


@pytest.fixture
def floor_rule():
    rule = register(FloorRule())
    yield rule
    unregister(rule)


def test_without_its_rule_the_toy_op_is_a_boundary():
    graph = extract_layout_graph(floor_model(), DIRECT)
    assert graph.layout_node("floor").kind == "boundary" and "floor" not in graph.following
    assert "floor" not in [category for category, _ in categories()]


def test_a_toy_op_registered_here_goes_through_extract_apply_build_and_profile(floor_rule):
    tvm = import_tvm()
    mod = floor_model()
    # extract: it follows conv1's layout, no node of its own
    graph = extract_layout_graph(mod, DIRECT)
    assert list(graph) == ["data", "conv1", "conv2", "output:conv2"]
    assert graph.following == {"floor": "conv1"}
    # apply: it runs blocked between the two convs, no transform around it
    choices = {"conv1": "NCHW8c->NCHW16c", "conv2": "NCHW16c->NCHW8c"}
    tuned = apply_layouts(mod, choices)
    assert op_list(tuned) == ["relax.layout_transform", "relax.call_tir", "relax.floor", "relax.call_tir",
                              "relax.layout_transform"]
    floor = next(b.value for b in tuned["main"].body.blocks[0].bindings if b.var.name == "floor")
    assert [int(d) for d in floor.ty.shape] == [1, 1, 6, 6, 16]
    # build: its own legalization, and the numbers of the untouched model
    assert "toy_floor" in [gv.name_hint for gv, _ in legalize(tuned, "llvm").functions_items()]
    executable = build(tuned, "llvm", fuse=False)
    inputs = random_inputs(mod)
    ours = run(executable, inputs)
    theirs = run(tvm.compile(mod, "llvm"), inputs)
    assert np.allclose(ours, theirs, atol=1e-4)
    # profile: its calls under its own category
    calls = profile_calls(executable, inputs, repeat=1)
    assert [call_category(call.symbol) for call in calls if "vm.builtin" not in call.symbol] == [
        "layout_transform", "conv2d", "floor", "conv2d", "layout_transform"]
    assignment = {node: graph.nodes[node]["choices"].index(label) if label else 0
                  for node, label in {"data": None, "conv1": choices["conv1"], "conv2": choices["conv2"],
                                      "output:conv2": None}.items()}
    costs = Costs({node: np.ones(len(graph.nodes[node]["choices"])) for node in graph},
                  transform_edge_costs(graph, defaultdict(float)))
    rows = {row.category: row for row in time_breakdown(calls, graph, costs, assignment)}
    assert rows["floor"].calls == 1 and rows["floor"].predicted is None and rows["floor"].measured > 0


# ------------------------------------------------------------------------------------------------
# the contract every registered rule keeps (scikit-learn's estimator checks, for operator rules)


class _Context:
    """What extraction hands a rule, for a model's ``main`` read as a whole: its parameters and
    computed bindings are data, its constants weights."""

    def __init__(self, blocks=(8, 16)):
        self.blocks, self.given_blocks = list(blocks), None
        self.conv_options = {"orders": ["oc"], "algorithms": ["direct"]}
        self.candidates = None

    def shape(self, expr, where: str):
        return static_shape(expr)

    def is_data(self, expr) -> bool:
        return isinstance(expr, import_tvm().relax.Var)

    def is_weight(self, expr) -> bool:
        return is_tensor_constant(expr)


def _corpus(mods):
    """(model, binding name, call, op name) of every call of the snapshot's models and of their
    rewrites to NCHW8c (which hold the layout transforms)."""
    tvm = import_tvm()
    found = []
    for model, mod in mods.items():
        graph = extract_layout_graph(mod, DIRECT)
        variants = {model: graph.mod}
        assignment = fixed_layout_assignment(graph, "NCHW8c")
        variants[f"{model}@NCHW8c"] = apply_assignment(graph.mod, graph, assignment)
        for name, variant in variants.items():
            for block in variant["main"].body.blocks:
                for binding in block.bindings:
                    if isinstance(binding.value, tvm.relax.Call):
                        found.append((name, binding.var.name, binding.value, op_name(binding.value, variant)))
    return found


@pytest.fixture(scope="module")
def corpus(snapshot_models):
    return _corpus(snapshot_models)


def _inputs(call) -> list:
    relax = import_tvm().relax
    out = []
    for arg in call.args:
        fields = arg.fields if isinstance(arg, relax.Tuple) else [arg]
        out.extend(f for f in fields if isinstance(f, relax.Var))
    return out


def check_rule(rule: OpRule, corpus: list, mods: dict) -> None:
    """The contract of a registered ``rule``, checked on every call of ``corpus`` (from :func:`_corpus`
    of the modules ``mods``) it matches; AssertionError naming the call that breaks it."""
    # its description: reachable by the ops it names, legalizing only those, a category its symbols give
    assert sum(r.name == rule.name for r in RULES) == 1
    assert rule.ops is None or all(rule in rules_for(op) for op in rule.ops)
    assert rule.ops is None or set(rule.legalizers) <= set(rule.ops)
    assert bool(rule.symbols) <= bool(rule.category)
    assert not (rule.kernel or rule.in_network) or rule.category
    for symbol in rule.symbols:
        assert call_category(f"fused_{symbol}_add3") == rule.category, symbol
    # its answers, on every call of the corpus it matches: there is at least one
    matched = [(model, name, call, op) for model, name, call, op in corpus if rule.matches(call, op)]
    assert matched, f"no call of the corpus is {rule.name}'s: the contract would check nothing"
    ctx = _Context()
    for model, name, call, op in matched:
        where = f"{model}: {name} = {op}"
        assert rule.ops is None or op in rule.ops, where
        inputs = _inputs(call)
        carrier = rule.carrier(call, op, ctx.is_data, None)
        assert carrier is None or any(carrier.same_as(v) for v in inputs), where  # one of its operands
        node = rule.extract(call, op, name, inputs, ctx)
        if node is None:
            continue
        # the workload is the cost cache's key: plain data that reads back as itself
        assert node.kind in KINDS and node.workload["op"], where
        assert json.loads(json.dumps(node.workload)) == node.workload, where
        assert node.inputs is None or all(any(v.same_as(w) for w in inputs) for v in node.inputs), where
        if node.kind == "target":
            # a measured kernel: its category is its workload's op, and every candidate its family's
            assert rule.kernel and node.workload["op"] == rule.category, where
            assert node.candidates, where
            for candidate in node.candidates:
                kernel_family(name, node.workload, candidate)  # raises naming the node if not
        else:
            assert (node.layouts or ["NCHW"])[-1] == "NCHW", where  # plain NCHW is always a choice
            shapes = rule.call_shapes(node.workload, "NCHW")
            # a node timed in the network is found by its inputs' and output's shapes
            assert shapes is None or len(shapes) == len(node.workload["shapes"]) + 1, where
    # a node's chosen candidates rewrite through this rule, and what it emits builds
    for model, name, call, op in matched:
        if "@" in model or rule.extract(call, op, name, _inputs(call), ctx) is None:
            continue
        graph = extract_layout_graph(mods[model], DIRECT)
        if name not in graph or graph.layout_node(name).kind not in ("target", "multi"):
            continue
        for choice in (graph.layout_node(name).choices[0], graph.layout_node(name).choices[-1]):
            rewritten = apply_layouts(graph.mod, {name: choice.candidate})
            legalize(rewritten, "llvm")  # raises if the rewrite emitted what the build cannot take
        break  # one node per rule: the rewrite's numbers are the other tests' (test_apply, fuzz)


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.name)
def test_every_rule_keeps_the_contract(rule, corpus, snapshot_models):
    check_rule(rule, corpus, snapshot_models)


def test_the_toy_rule_keeps_the_contract_too(floor_rule, corpus, snapshot_models):
    mods = {"floor": floor_model()}
    check_rule(floor_rule, corpus + _corpus(mods), {**snapshot_models, **mods})


class _TupleSections(SplitRule):
    """A split whose workload holds a tuple: the cache would read it back as a list, and miss."""

    name = "broken_split"

    def extract(self, call, op, name, inputs, ctx):
        node = super().extract(call, op, name, inputs, ctx)
        if node is not None:
            node.workload["sections"] = tuple(node.workload["sections"])
        return node


class _WrongCategory(Conv2dRule):
    """A conv whose profile category is not its workload's op: its kernels' time would go elsewhere."""

    name, category, symbols = "broken_conv2d", "convolution", ("convolution",)


class _ForeignCarrier(UnaryRule):
    """A unary op naming as its carrier a value it does not read."""

    name = "broken_unary"

    def carrier(self, call, op, is_data, source):
        return call if super().carrier(call, op, is_data, source) is not None else None


@pytest.mark.parametrize("broken", [_TupleSections, _WrongCategory, _ForeignCarrier],
                         ids=lambda cls: cls.name)
def test_the_contract_catches_a_rule_that_breaks_it(broken, corpus, snapshot_models):
    saved = list(RULES)
    try:
        rule = register(broken())
        with pytest.raises(AssertionError):
            check_rule(rule, corpus, snapshot_models)
    finally:
        RULES[:] = saved


def test_a_rule_cannot_legalize_an_op_it_does_not_match():
    class Greedy(OpRule):
        name, ops = "greedy", frozenset({"relax.floor"})
        legalizers = MappingProxyType({"relax.ceil": _legalize_floor})

    with pytest.raises(ProblemError, match=r"'greedy' legalizes \['relax.ceil'\]"):
        register(Greedy())
    assert "greedy" not in [rule.name for rule in RULES]

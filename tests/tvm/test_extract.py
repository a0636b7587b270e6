"""Layout-graph extraction from Relax modules: node classes, edges, choices, errors."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

pytest.importorskip("tvm")  # the tvm extra; CI installs it

import layoutopt
from layoutopt.tvm import extract_layout_graph, models, prepare
from layoutopt.tvm.building.apply import apply_layouts, count_layout_transforms, expected_transforms
from layoutopt.tvm.graph.graph import candidate_label

pytestmark = pytest.mark.tvm

BLOCKS = [8, 16]
#: the direct kernels only: the tests of the graph's structure name every choice
DIRECT = {"blocks": BLOCKS, "algorithms": ["direct"]}


def kinds(graph):
    return {node.name: node.kind for node in graph.layout_nodes()}


def conv_choices(in_channels, out_channels, blocks=BLOCKS, orders=("oc",)):
    ins = [b for b in blocks if in_channels % b == 0] or [in_channels]
    outs = [b for b in blocks if out_channels % b == 0]
    pairs = [f"NCHW{i}c->NCHW{o}c" for i, o in itertools.product(ins, outs)]
    knobs = ["" if order == "oc" else f"[order={order}]" for order in orders]
    return [pair + knob for pair in pairs for knob in knobs] + ["NCHW->NCHW"]


def test_chain_nodes_edges_and_layouts():
    graph = extract_layout_graph(models.chain((16, 16), in_channels=8, size=8), DIRECT)
    assert kinds(graph) == {"data": "input", "conv1": "target", "conv2": "target", "output:gv": "output"}
    assert sorted(graph.edges) == [("conv1", "conv2"), ("conv2", "output:gv"), ("data", "conv1")]
    conv1 = graph.layout_node("conv1")
    assert conv1.binding == "conv1" and conv1.op == "relax.nn.conv2d"
    assert conv1.workload == {
        "op": "conv2d", "data": [1, 8, 8, 8], "kernel": [16, 8, 3, 3], "strides": [1, 1],
        "padding": [1, 1, 1, 1], "dilation": [1, 1], "groups": 1, "dtype": "float32",
        "epilogue": ["bias", "relu"],  # what FuseOps fuses into it: measured fused
    }
    assert conv1.labels == conv_choices(8, 16)
    assert conv1.layouts == [tuple(label.split("[")[0].split("->")) for label in conv1.labels]
    assert graph.nodes["data"]["choices"] == ["NCHW"]
    assert graph.layout_node("output:gv").layouts == [("NCHW", "NCHW")]
    assert list(graph.layout_edge("conv1", "conv2").shape) == [1, 16, 8, 8]
    # bias and relu follow conv1's layout: they are not nodes
    following = graph.following
    assert following["conv1_bias"] == following["conv1_relu"] == "conv1"


def test_loop_orders_are_choices_when_asked_for():
    mod = models.chain((16, 16), in_channels=8, size=8)
    graph = extract_layout_graph(mod, {**DIRECT, "orders": ["oc", "rows"]})
    choices = graph.nodes["conv1"]["choices"]
    assert choices == conv_choices(8, 16, orders=("oc", "rows"))
    assert choices[:2] == ["NCHW8c->NCHW8c", "NCHW8c->NCHW8c[order=rows]"]
    assert graph.layout_node("conv1").candidates[1] == {"in": "NCHW8c", "out": "NCHW8c", "order": "rows"}
    # a choice's layouts leave out its knobs: both orders have the same edges
    assert graph.layout_node("conv1").layouts[:2] == [("NCHW8c", "NCHW8c")] * 2
    for bad in ({"blocks": BLOCKS, "orders": ["diagonal"]}, {"block": BLOCKS}):
        with pytest.raises(layoutopt.ProblemError, match="candidate options"):
            extract_layout_graph(mod, bad)


def test_residual_add_is_a_multi_input_node_with_its_own_choices():
    graph = extract_layout_graph(models.residual(channels=16, size=8), DIRECT)
    assert sorted(k for k, v in kinds(graph).items() if v == "target") == ["conv0", "conv1", "conv2"]
    add = graph.layout_node("add")
    assert add.kind == "multi" and add.labels == ["NCHW8c", "NCHW16c", "NCHW"]
    assert add.layouts == [("NCHW8c", "NCHW8c"), ("NCHW16c", "NCHW16c"), ("NCHW", "NCHW")]
    assert add.workload == {"op": "add", "shapes": [[1, 16, 8, 8]] * 2, "dtype": "float32"}
    assert sorted(graph.predecessors("add")) == ["conv0", "conv2"]  # the skip comes from conv0 via its relu
    assert list(graph.successors("conv0")) == ["conv1", "add"]
    # 3 input channels: C itself is a block (C < 8)
    assert graph.nodes["conv0"]["choices"] == ["NCHW3c->NCHW8c", "NCHW3c->NCHW16c", "NCHW->NCHW"]
    assert graph.number_of_nodes() == 6 and graph.number_of_edges() == 6


def test_concat_of_three_branches():
    graph = extract_layout_graph(models.concat3((8, 16, 8), in_channels=8, size=8), DIRECT)
    concat = graph.layout_node("concat")
    # a common block must divide every input's channels (8, 16, 8): 16 does not divide 8
    assert concat.kind == "multi" and concat.labels == ["NCHW8c", "NCHW"]
    assert concat.workload["axis"] == 1 and concat.workload["shapes"] == [[1, 8, 8, 8], [1, 16, 8, 8],
                                                                                [1, 8, 8, 8]]
    assert sorted(graph.predecessors("concat")) == ["branch1", "branch2", "branch3"]
    # the max pool in branch 3 follows the stem's layout: stem -> branch3 is an edge
    assert graph.following["branch3_pool"] == "stem"
    assert sorted(graph.successors("stem")) == ["branch1", "branch2", "branch3"]
    assert list(graph.layout_edge("concat", "head").shape) == [1, 32, 8, 8]
    assert graph.nodes["head"]["choices"] == conv_choices(32, 8)
    assert graph.number_of_nodes() == 8 and graph.number_of_edges() == 9


def test_flatten_dense_head():
    graph = extract_layout_graph(models.dense_head(channels=16, in_channels=8, size=8, classes=16), DIRECT)
    assert kinds(graph) == {"data": "input", "conv1": "target", "flatten": "boundary", "dense": "target",
                            "gv": "boundary", "output:gv": "output"}
    # the pooled tensor reaches the flatten boundary: its shape is the one after pooling
    assert list(graph.layout_edge("conv1", "flatten").shape) == [1, 16, 4, 4]
    dense = graph.layout_node("dense")
    assert dense.workload == {"op": "dense", "data": [1, 256], "weight": [16, 256], "dtype": "float32"}
    assert dense.labels == [f"NCHW->NCHW[weight={w}]" for w in ("NK", "NK8n", "NK16n")]
    assert set(dense.layouts) == {("NCHW", "NCHW")}
    assert graph.nodes["flatten"]["choices"] == ["NCHW"]
    assert graph.layout_node("flatten").op == "relax.reshape"


def test_every_algorithm_is_a_choice_by_default_where_it_applies():
    graph = extract_layout_graph(models.resnet(depth=50), BLOCKS)
    algorithms = {name: {choice.record.algorithm for choice in node.choices}
                  for name, node in ((n, graph.layout_node(n)) for n in graph) if node.kind == "target"}
    assert algorithms["layer1_0_conv2"] == {"direct", "winograd"}  # 3x3 stride 1
    assert algorithms["layer1_0_conv1"] == {"direct", "gemm"}  # 1x1
    assert algorithms["layer2_0_conv2"] == {"direct"}  # 3x3 stride 2: neither applies
    assert algorithms["conv1"] == {"direct"}  # the 7x7 stem


def test_resnet50_counts():
    graph = extract_layout_graph(models.resnet(depth=50), {"algorithms": ["direct"]})
    kind = kinds(graph)
    convs = [n for n in graph if graph.layout_node(n).op == "relax.nn.conv2d"]
    assert len(convs) == 53 and sum(v == "multi" for v in kind.values()) == 16
    assert [kind[n] for n in ("data", "flatten", "fc")] == ["input", "boundary", "target"]
    assert "avgpool" in graph.following  # the global mean keeps the last block's layout
    # default blocks {4, 8, 16, 32, 64} plus C = 3 for the stem's input
    assert graph.nodes["conv1"]["choices"][:2] == ["NCHW3c->NCHW4c", "NCHW3c->NCHW8c"]
    assert len(graph.nodes["layer1_0_conv2"]["choices"]) == 26


def _onnx_model():
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)

    def init(name, shape, positive=False):
        value = rng.standard_normal(shape).astype("float32")
        return numpy_helper.from_array(np.abs(value) + 0.5 if positive else value, name)

    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
        helper.make_node("BatchNormalization", ["c1", "s", "bb", "m", "v"], ["bn"]),
        helper.make_node("Relu", ["bn"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
        helper.make_node("Add", ["c2", "r1"], ["a"]),
        helper.make_node("MaxPool", ["a"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "wd", "bd"], ["y"], transB=1),
    ]
    inits = [init("w1", (16, 8, 3, 3)), init("b1", (16,)), init("s", (16,)), init("bb", (16,)),
             init("m", (16,)), init("v", (16,), positive=True), init("w2", (16, 16, 3, 3)),
             init("wd", (10, 256)), init("bd", (10,))]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 8, 8])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])]
    graph = helper.make_graph(nodes, "net", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model


def test_onnx_import_batch_norm_follows_and_names_are_unique():
    from tvm.relax.frontend.onnx import from_onnx

    mod = prepare(from_onnx(_onnx_model()))
    names = [b.var.name for blk in mod["main"].body.blocks for b in blk.bindings]
    assert len(set(names)) == len(names)
    assert prepare(mod)["main"].body.blocks[0].bindings[-1].var.name == names[-1]  # idempotent
    graph = extract_layout_graph(mod, BLOCKS, prepared=True)
    ops = sorted((node.kind, node.op) for node in graph.layout_nodes())
    assert ops == [("boundary", "relax.add"), ("boundary", "relax.reshape"), ("input", "input"),
                   ("multi", "relax.add"), ("output", "output"), ("target", "relax.matmul"),
                   ("target", "relax.nn.conv2d"), ("target", "relax.nn.conv2d")]
    # the decomposed batch norm (subtract/divide/multiply/add by per-channel constants) follows conv1
    assert len(graph.following) >= 5


def test_prepare_computes_batch_norm_constants_in_numpy_as_tvm_would():
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    from layoutopt.tvm.evaluate.check import relative_error
    from layoutopt.tvm.evaluate.timing import run
    from layoutopt.tvm.frontend.normalise import (
        _NUMPY_FOLDS,
        _NUMPY_RESHAPES,
        _decompose_batch_norms,
        fold_elementwise_constants,
    )

    def constant_calls(mod):  # numpy-foldable calls whose arguments are all constants
        bound, count = {}, 0
        for binding in (b for block in mod["main"].body.blocks for b in block.bindings):
            value = binding.value
            bound[binding.var] = value
            op = getattr(value, "op", None)
            args = [bound.get(a, a) for a in getattr(value, "args", [])][:1 if op in reshapes else None]
            constant = all(isinstance(a, tvm.ir.expr.Constant) for a in args)
            count += bool(op in [*reshapes, *folds] and args and constant)
        return count

    folds, reshapes = ([tvm.ir.Op.get(name) for name in names] for names in (_NUMPY_FOLDS, _NUMPY_RESHAPES))
    imported = from_onnx(_onnx_model())
    decomposed = _decompose_batch_norms(imported)
    assert constant_calls(decomposed) >= 3  # sqrt(var + eps) and the rest, for TVM to compile one by one
    assert constant_calls(fold_elementwise_constants(decomposed)) == 0
    data = np.random.default_rng(5).standard_normal((1, 8, 8, 8)).astype("float32")
    target = tvm.target.Target({"kind": "llvm"})
    by_tvm = run(tvm.compile(relax.transform.FoldConstant()(decomposed), target=target), [data])
    assert relative_error(run(tvm.compile(prepare(imported), target=target), [data]), by_tvm) < 1e-6


def test_weights_kept_as_parameters_are_bound_by_prepare():
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    mod, params = relax.frontend.detach_params(from_onnx(_onnx_model(), keep_params_in_input=True))
    weights = mod["main"].params[1:]
    by_name = {param.name: value for param, value in zip(weights, params["main"], strict=True)}
    bound = extract_layout_graph(prepare(mod, by_name), DIRECT)
    expected = sorted(node.kind for node in bound.layout_nodes())
    assert expected.count("target") == 3 and "x" in bound
    # detach_params' own output and a positional list give the same graph
    for given in (params, params["main"]):
        graph = extract_layout_graph(prepare(mod, given), DIRECT)
        assert sorted(node.kind for node in graph.layout_nodes()) == expected
    # left unbound, conv2d still chooses layouts (its weight parameter is re-laid out at run time)
    unbound = extract_layout_graph(mod, DIRECT)
    convs = [n for n in unbound.layout_nodes() if n.op == "relax.nn.conv2d" and n.kind == "target"]
    assert len(convs) == 2
    with pytest.raises(layoutopt.ProblemError, match=r"params: 2 arrays given for main's 9 weight"):
        prepare(mod, params["main"][:2])


def _relax_module(build, shape=(1, 8, 8, 8)):
    import tvm
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, "float32"))
    rng = np.random.default_rng(1)

    def const(*dims):
        return relax.const(rng.standard_normal(dims).astype("float32"))

    with bb.function("main", [x]):
        with bb.dataflow():
            # a final relu (it follows) takes the name gv, so the built nodes keep theirs
            out = bb.emit_output(relax.op.nn.relu(build(bb, x, const, relax.op)))
        bb.emit_func_output(out)
    assert isinstance(bb.get(), tvm.IRModule)
    return bb.get()


def test_unsupported_op_becomes_a_boundary():
    def build(bb, x, const, op):
        y = bb.emit(op.nn.conv2d(x, const(16, 8, 3, 3), padding=1), "conv1")
        y = bb.emit(op.nn.softmax(y, axis=1), "softmax")
        y = bb.emit(op.add(y, const(1, 16, 8, 8)), "full_bias")  # not per-channel: not layout-following
        return bb.emit(op.nn.conv2d(y, const(8, 16, 1, 1)), "conv2")

    graph = extract_layout_graph(_relax_module(build), DIRECT)
    assert graph.layout_node("softmax").kind == "boundary" and graph.nodes["softmax"]["choices"] == ["NCHW"]
    assert graph.layout_node("full_bias").kind == "boundary"
    assert list(graph.edges) == [("x", "conv1"), ("conv1", "softmax"), ("softmax", "full_bias"),
                                 ("full_bias", "conv2"), ("conv2", "output:gv")]


def test_broadcast_multiply_gets_blocked_choices_channel_broadcast_does_not():
    def build(bb, x, const, op):
        y = bb.emit(op.nn.conv2d(x, const(16, 8, 3, 3), padding=1), "conv1")
        scale = bb.emit(op.mean(y, axis=[2, 3], keepdims=True), "squeeze")  # (1, 16, 1, 1), follows y
        excite = bb.emit(op.multiply(y, scale), "excite")  # SE block: blocked layouts still work
        spatial = bb.emit(op.mean(y, axis=[1], keepdims=True), "spatial")  # (1, 1, 8, 8)
        return bb.emit(op.multiply(excite, spatial), "attend")  # broadcast over channels: NCHW only

    graph = extract_layout_graph(_relax_module(build), DIRECT)
    assert graph.nodes["excite"]["choices"] == ["NCHW8c", "NCHW16c", "NCHW"]
    # the global mean keeps conv1's layout: both of excite's operands come from conv1
    assert "squeeze" not in graph and graph.following["squeeze"] == "conv1"
    shapes = sorted(list(value.shape) for value in graph.layout_edge("conv1", "excite").values)
    assert shapes == [[1, 16, 1, 1], [1, 16, 8, 8]]
    assert graph.nodes["attend"]["choices"] == ["NCHW"]


def test_depthwise_conv_is_a_target_with_blocked_choices():
    def build(bb, x, const, op):
        y = bb.emit(op.nn.conv2d(x, const(16, 8, 1, 1)), "conv1")
        return bb.emit(op.nn.conv2d(y, const(16, 1, 3, 3), padding=1, groups=16), "depthwise")

    graph = extract_layout_graph(_relax_module(build), DIRECT)
    depthwise = graph.layout_node("depthwise")
    assert depthwise.kind == "target" and depthwise.workload["groups"] == 16
    # the depthwise family's kernels in equal in/out blocks, or the direct NCHW one
    assert depthwise.labels == ["NCHW8c->NCHW8c[algorithm=depthwise]",
                                "NCHW16c->NCHW16c[algorithm=depthwise]", "NCHW->NCHW"]
    assert list(graph.predecessors("depthwise")) == ["conv1"]


def test_a_value_read_twice_by_one_node_is_one_edge_value():
    def build(bb, x, const, op):
        y = bb.emit(op.nn.conv2d(x, const(16, 8, 3, 3), padding=1), "conv1")
        r = bb.emit(op.nn.relu(y), "relu")
        return bb.emit(op.concat([y, r], axis=1), "concat")

    graph = extract_layout_graph(_relax_module(build), DIRECT)
    # conv1 reaches concat twice, as two different values (conv1 and relu): one edge, two values
    assert [v.name for v in graph.layout_edge("conv1", "concat").values] == ["conv1", "relu"]


def test_an_elementwise_op_of_two_values_of_one_producer_follows_its_layout():
    def build(bb, x, const, op):
        y = bb.emit(op.nn.conv2d(x, const(16, 8, 3, 3), padding=1), "conv1")
        gate = bb.emit(op.sigmoid(y), "gate")
        return bb.emit(op.multiply(y, gate), "silu")

    graph = extract_layout_graph(_relax_module(build), DIRECT)
    # x * sigmoid(x): both operands arrive in conv1's layout, nothing to choose; fused into conv1
    assert "silu" not in graph and graph.following["silu"] == "conv1"
    assert graph.layout_node("conv1").workload["epilogue"] == ["sigmoid", ["multiply", "@0"], "relu"]


def test_custom_candidates_and_labels():
    calls = []

    def only_16(workload):
        calls.append(workload["op"])
        return [{"in": "NCHW16c", "out": "NCHW16c", "reg_n": 4}, {"in": "NCHW", "out": "NCHW"}]

    graph = extract_layout_graph(models.chain((16, 16), in_channels=16), only_16)
    assert calls == ["conv2d", "conv2d"]
    assert graph.nodes["conv2"]["choices"] == ["NCHW16c->NCHW16c[reg_n=4]", "NCHW->NCHW"]
    assert graph.layout_node("conv2").candidates[0]["reg_n"] == 4
    assert candidate_label({"in": "NCHW4c", "out": "NCHW8c"}) == "NCHW4c->NCHW8c"
    with pytest.raises(layoutopt.ProblemError, match=r"conv1.*candidates must be"):
        extract_layout_graph(models.chain((16,)), lambda workload: [])


@pytest.mark.parametrize("bad", [[0, 8], [], ["8"], 8.5, [True]])
def test_bad_candidate_blocks(bad):
    with pytest.raises(layoutopt.ProblemError, match="candidates must be"):
        extract_layout_graph(models.chain((16,)), bad)


def test_dynamic_shape_is_a_clear_error():
    import tvm

    n = tvm.tirx.Var("n", "int64")

    def build(bb, x, const, op):
        return bb.emit(op.nn.conv2d(x, const(16, 8, 3, 3), padding=1), "conv1")

    with pytest.raises(layoutopt.ProblemError, match=r"input 'x' has a dynamic or unknown shape.*static"):
        extract_layout_graph(_relax_module(build, shape=(n, 8, 8, 8)))


def test_missing_main_no_supported_op_and_not_a_module():
    import tvm

    with pytest.raises(layoutopt.ProblemError, match="no 'main' function"):
        extract_layout_graph(tvm.IRModule({}))
    with pytest.raises(layoutopt.ProblemError, match="not dict"):
        extract_layout_graph({"main": None})

    def relu_only(bb, x, const, op):
        return bb.emit(op.nn.relu(x), "relu")

    with pytest.raises(layoutopt.ProblemError, match="no supported op"):
        extract_layout_graph(_relax_module(relu_only))


@pytest.mark.parametrize("make", [lambda: models.residual(16, 8), lambda: models.concat3((8, 16, 8)),
                                  lambda: models.dense_head(16), lambda: models.resnet(18, width=8, size=16)])
def test_rewrite_emits_exactly_the_transforms_the_graph_predicts(make):
    mod = prepare(make())
    graph = extract_layout_graph(mod, BLOCKS, prepared=True)
    rng = np.random.default_rng(0)
    for _ in range(4):
        assignment = {n: int(rng.integers(len(d["choices"]))) for n, d in graph.nodes(data=True)}
        choices = {node.binding: node.layouts[assignment[node.name]] for node in graph.layout_nodes()
                   if node.decides}
        emitted = count_layout_transforms(apply_layouts(mod, choices))
        assert emitted == expected_transforms(graph, assignment), assignment


def test_each_conv_carries_the_epilogue_fuse_ops_gives_it():
    graph = extract_layout_graph(models.residual(channels=16, size=8), DIRECT)
    epilogue = {n: graph.layout_node(n).workload.get("epilogue") for n in ("conv0", "conv1", "conv2")}
    # conv0's relu is read twice (conv1 and the skip): the chain ends there; conv2 takes the add
    assert epilogue == {"conv0": ["bias", "relu"], "conv1": ["bias", "relu"],
                        "conv2": ["bias", "add", "relu"]}
    unfused = extract_layout_graph(models.residual(channels=16, size=8), BLOCKS, fuse=False)
    assert not any("epilogue" in node.workload for node in unfused.layout_nodes())


def test_a_residual_add_joins_one_conv_only():
    # in a downsampling block both operands of the add come from a conv read only there; FuseOps
    # fuses the add into one of them, and it must be costed once
    graph = extract_layout_graph(models.resnet(depth=50, width=8, size=32, classes=10))
    adds = [n for n in graph.layout_nodes() if n.kind == "multi" and n.op == "relax.add"]
    with_add = [n for n in graph.layout_nodes() if "add" in n.workload.get("epilogue", [])]
    assert len(adds) == 16 and len(with_add) == len(adds)


def test_other_algorithms_are_choices_where_they_apply_and_the_fixed_rule_takes_them():
    from layoutopt.problem import Costs, Problem
    from layoutopt.tvm.building.baselines import winograd_nchw16c

    options = {"blocks": [8, 16], "algorithms": ["direct", "winograd", "gemm"]}
    graph = extract_layout_graph(models.residual(channels=16, size=8), options)
    conv1 = graph.layout_node("conv1")  # 3x3 stride 1: Winograd applies; no 1x1 conv: no GEMM
    algorithms = {choice.record.algorithm for choice in conv1.choices}
    assert algorithms == {"direct", "winograd"}
    assert "NCHW16c->NCHW16c" in conv1.labels  # the direct kernels stay
    costs = Costs({node.name: [1.0 if c.record.algorithm == "winograd" else 2.0
                               for c in node.choices] for node in graph.layout_nodes()},
                  {edge: np.zeros((len(graph.layout_node(edge[0]).choices),
                                   len(graph.layout_node(edge[1]).choices))) for edge in graph.edges})
    rule = winograd_nchw16c(graph, Problem.from_graph(graph, costs))
    chosen = graph.choice("conv1", rule["conv1"])
    assert chosen.candidate["algorithm"] == "winograd" and chosen.out_layout == "NCHW16c"
    with pytest.raises(layoutopt.ProblemError, match="algorithms"):
        extract_layout_graph(models.residual(channels=16, size=8), {"algorithms": ["fft"]})

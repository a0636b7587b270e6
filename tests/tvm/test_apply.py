"""The layout rewrite pass: numerics, transform placement, identity on all-NCHW, clear errors."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tvm")

from layoutopt import ProblemError
from layoutopt.solution import Solution
from layoutopt.tvm import models
from layoutopt.tvm.building.apply import (
    ApplyLayouts,
    apply_layouts,
    apply_solution,
    count_layout_transforms,
    expected_transforms,
    op_list,
    parse_choice,
)
from layoutopt.tvm.building.builder import build
from layoutopt.tvm.evaluate.check import relative_error
from layoutopt.tvm.evaluate.timing import random_inputs, run
from layoutopt.tvm.frontend.normalise import prepare
from layoutopt.tvm.graph.extract import extract_layout_graph

pytestmark = pytest.mark.tvm

NETS = {
    "chain": lambda: models.chain((16, 32), in_channels=8, size=8),
    "residual": lambda: models.residual(channels=16, size=8),
    "concat": lambda: models.concat3((8, 16, 8), in_channels=8, size=8),
}


@pytest.fixture(scope="module")
def tvm():
    import tvm

    return tvm


@pytest.fixture(scope="module")
def reference_outputs(tvm):
    """Each net's untouched output from TVM's default build (an independent code path)."""
    outputs = {}
    for name, make in NETS.items():
        mod = prepare(make())
        inputs = random_inputs(mod, seed=1)
        outputs[name] = (inputs, run(tvm.compile(mod, target=_target()), inputs))
    return outputs


def _target():
    from layoutopt.tvm import resolve_target

    return resolve_target("llvm")


def _legalized_and_fused(mod):
    """``mod`` as build(fuse=True) has it just before schedule_module."""
    import tvm

    from layoutopt.tvm.ops import legalizers

    relax = tvm.relax
    with _target():
        legalize = {"relax.nn.conv2d": legalizers()["relax.nn.conv2d"]}
        mod = relax.transform.LegalizeOps(customize_legalize_map=legalize)(mod)
        return relax.transform.FuseTIR()(relax.transform.FuseOps()(relax.transform.AnnotateTIROpPattern()(
            relax.transform.FoldConstant()(mod))))


def _legalized(mod):
    """``mod`` as build(fuse=False) has it just before schedule_module."""
    import tvm

    from layoutopt.tvm.ops import legalizers

    with _target():
        legalize = {"relax.nn.conv2d": legalizers()["relax.nn.conv2d"]}
        mod = tvm.relax.transform.LegalizeOps(customize_legalize_map=legalize)(mod)
        return tvm.relax.transform.FoldConstant()(mod)


def conv_kernels(mod) -> int:
    """How many calls of ``main`` run a blocked conv kernel (``call_tir`` of a conv2d_NCHWc function)."""
    return sum(1 for b in mod["main"].body.blocks[0].bindings
               if "conv2d_NCHWc" in str(getattr(b.value, "args", [""])[0]))


def tvm_constant():
    import tvm

    return tvm.ir.expr.Constant


def _solution(assignment) -> Solution:
    return Solution(dict(assignment), {}, 0.0, 0.0, "feasible", "test")


def _random_assignment(graph, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {node: int(rng.integers(len(data["choices"]))) for node, data in graph.nodes(data=True)}


@pytest.mark.parametrize("net", sorted(NETS))
@pytest.mark.parametrize("seed", [0, 1])
def test_random_solution_keeps_numerics_and_places_the_implied_transforms(net, seed, reference_outputs):
    mod = prepare(NETS[net]())
    graph = extract_layout_graph(mod, prepared=True, candidates=[4, 8, 16])
    assignment = _random_assignment(graph, seed)
    new_mod = apply_solution(mod, graph, _solution(assignment))

    assert count_layout_transforms(new_mod) == expected_transforms(graph, assignment)
    assert expected_transforms(graph, assignment) > 0  # the random choices really mix layouts
    inputs, expected = reference_outputs[net]
    assert relative_error(run(build(new_mod, fuse=bool(seed)), inputs), expected) < 1e-4


def test_uniform_blocked_solution_needs_transforms_only_at_the_boundaries(reference_outputs):
    mod = prepare(NETS["residual"]())
    graph = extract_layout_graph(mod, prepared=True, candidates=[8])
    # conv0 reads the 3-channel image (NCHW3c), everything else runs in NCHW8c
    assignment = {}
    for node in graph.layout_nodes():
        wanted = [k for k, (i, o) in enumerate(node.layouts) if o in ("NCHW8c",) or not node.decides]
        assignment[node.name] = wanted[0]
    new_mod = apply_solution(mod, graph, _solution(assignment))
    # image NCHW -> NCHW3c, and the output NCHW8c -> NCHW: nothing in between
    assert count_layout_transforms(new_mod) == 2
    assert conv_kernels(new_mod) == 3 and "relax.nn.conv2d" not in op_list(new_mod)
    inputs, expected = reference_outputs["residual"]
    assert relative_error(run(build(new_mod), inputs), expected) < 1e-4
    # the conv epilogues (bias, relu, the residual add) fused into the tiles compute the same
    assert relative_error(run(build(new_mod, fuse=True), inputs), expected) < 1e-4


def test_a_value_read_in_one_foreign_layout_by_two_consumers_is_transformed_once():
    mod = prepare(NETS["concat"]())
    choices = {"stem": "NCHW8c->NCHW8c", "branch1": "NCHW4c->NCHW8c", "branch2": "NCHW4c->NCHW16c",
               "branch3": "NCHW8c->NCHW8c", "concat": "NCHW8c", "head": "NCHW8c->NCHW8c"}
    new_mod = apply_layouts(mod, choices)
    # stem's output: NCHW8c -> NCHW4c once (shared by branch1 and branch2); branch2 16c -> 8c for
    # concat; the image NCHW -> NCHW8c; the output NCHW8c -> NCHW
    assert count_layout_transforms(new_mod) == 4


def test_all_nchw_solution_returns_the_original_program(tvm):
    mod = prepare(NETS["residual"]())
    graph = extract_layout_graph(mod, prepared=True, candidates=[8])
    nchw = {node.name: node.layouts.index(("NCHW", "NCHW")) for node in graph.layout_nodes()}
    tvm.ir.assert_structural_equal(apply_solution(mod, graph, _solution(nchw)), mod)
    passed = ApplyLayouts({node: "NCHW->NCHW" for node in ("conv0", "conv1", "conv2", "add")})(mod)
    tvm.ir.assert_structural_equal(passed, mod)
    assert op_list(passed) == op_list(mod)


def test_pass_composes_in_a_user_pipeline(tvm, reference_outputs):
    mod = prepare(NETS["chain"]())
    pipeline = tvm.transform.Sequential([
        ApplyLayouts({"conv1": "NCHW8c->NCHW16c", "conv2": "NCHW16c->NCHW32c"}),
        tvm.relax.transform.FoldConstant(),
    ])
    new_mod = pipeline(mod)
    assert count_layout_transforms(new_mod) == 2
    inputs, expected = reference_outputs["chain"]
    assert relative_error(run(build(new_mod), inputs), expected) < 1e-4


def test_weights_are_packed_at_compile_time():
    mod = prepare(NETS["chain"]())
    new_mod = apply_layouts(mod, {"conv1": "NCHW8c->NCHW16c"})
    conv = next(b.value for b in new_mod["main"].body.blocks[0].bindings if b.var.name == "conv1")
    data, weight = conv.args[1].fields  # call_tir(conv2d_NCHWc, (data, weight))
    assert [int(d) for d in data.ty.shape] == [1, 1, 8, 8, 8]
    assert isinstance(weight, tvm_constant())  # OIHW8i16o, packed by numpy: no transform op
    assert [int(d) for d in weight.ty.shape] == [1, 1, 3, 3, 8, 16]


@pytest.mark.parametrize(
    ("choices", "message"),
    [
        ({"conv1": "NHWC"}, "unknown layout|neither"),
        ({"conv1": "NCHW8c->NCHW64c"}, "conv1.*does not divide"),
        ({"conv9": "NCHW8c->NCHW8c"}, "not bindings of main"),
        ({"conv1": "NCHW->NCHW16c"}, "conv1.*both be blocked or both be NCHW"),
        ({"conv1": {"in": "NCHW8c", "out": "NCHW8c", "algorithm": "fft"}}, "unknown algorithm 'fft'"),
        ({"conv1": 3}, "is not a layout"),
        ({"conv1_relu": "NCHW8c"}, "can only run in NCHW"),
    ],
)
def test_bad_choices_raise_clear_errors(choices, message):
    mod = prepare(NETS["chain"]())
    with pytest.raises(ProblemError, match=message):
        apply_layouts(mod, choices)


def test_parse_choice_forms():
    assert parse_choice("c", ("NCHW8c", "NCHW16c")) == {"in": "NCHW8c", "out": "NCHW16c"}
    knobs = {"in": "NCHW8c", "out": "NCHW4c", "reg_n": 8}
    assert parse_choice("c", knobs) == knobs
    assert parse_choice("add", "NCHW16c") == {"in": "NCHW16c", "out": "NCHW16c"}
    assert parse_choice("dense", {"in": "NC", "out": "NC", "weight": "NK8n"})["in"] == "NCHW"
    with pytest.raises(ProblemError, match="node 'c'"):
        parse_choice("c", "NCHW8c->NCHW8c->NCHW8c")


def test_parse_choice_reads_the_labels_the_graph_prints():
    # the graph prints a choice's knobs in brackets; parse_choice refused them ("is not of the form")
    assert parse_choice("c", "NCHW16c->NCHW16c[order=rows]") == {"in": "NCHW16c", "out": "NCHW16c",
                                                                 "order": "rows"}
    assert parse_choice("c", "NCHW16c->NCHW[tile=4,oc_block=16,algorithm=winograd]") == {
        "in": "NCHW16c", "out": "NCHW", "algorithm": "winograd", "oc_block": 16, "tile": 4}
    assert parse_choice("fc", "NCHW->NCHW[weight=NK16n]") == {"in": "NCHW", "out": "NCHW", "weight": "NK16n"}
    for bad, message in [("NCHW16c->NCHW16c[order=rows", "not a label"),
                         ("NCHW16c->NCHW16c[tile]", "KEY=VALUE"),
                         ("NCHW16c->NHWC8c[order=rows]", "neither 'NCHW'")]:
        with pytest.raises(ProblemError, match=f"node 'c'.*{message}"):
            parse_choice("c", bad)


def test_a_pin_by_the_graphs_label_applies_that_kernel():
    from layoutopt.tvm.kernels import CANDIDATE_ANNOTATION

    mod = prepare(NETS["chain"]())
    graph = extract_layout_graph(mod, {"blocks": [8, 16], "orders": ["oc", "rows"]}, prepared=True)
    labels = {name: graph.layout_node(name).labels for name in ("conv1", "conv2")}
    rows, winograd = "NCHW8c->NCHW16c[order=rows]", "NCHW16c->NCHW16c[algorithm=winograd,tile=2]"
    assert rows in labels["conv1"] and winograd in labels["conv2"]
    new_mod = apply_layouts(mod, {"conv1": rows, "conv2": winograd})
    script = new_mod.script()
    assert CANDIDATE_ANNOTATION in script and '"order": "rows"' in script and '"tile": 2' in script
    assert any(gv.name_hint.startswith("conv2d_winograd") for gv in new_mod.get_global_vars())


def test_infeasible_solution_is_refused():
    mod = prepare(NETS["chain"]())
    graph = extract_layout_graph(mod, prepared=True, candidates=[8])
    empty = Solution({}, {}, float("inf"), float("inf"), "infeasible", "test")
    with pytest.raises(ProblemError, match="no assignment"):
        apply_solution(mod, graph, empty)


@pytest.mark.parametrize("weight,classes", [("NK", 32), ("NK16n", 32), ("NK8n", 13), ("NK16n", 13)])
def test_dense_runs_the_measured_kernel_for_its_weight_layout(tvm, weight, classes):
    # 13 classes: the packed weight's last block is padded, the bias added after the padding is dropped
    mod = prepare(models.dense_head(channels=16, size=8, classes=classes))
    inputs = random_inputs(mod, seed=2)
    expected = run(tvm.compile(mod, target=_target()), inputs)
    new_mod = apply_layouts(mod, {"dense": {"in": "NC", "out": "NC", "weight": weight},
                                  "conv1": "NCHW8c->NCHW16c"})
    kernels = {gv.name_hint for gv in new_mod.get_global_vars()} - {"main", "conv2d_NCHWc"}
    assert kernels == {"dense" if weight == "NK" else "dense_pack"}
    assert "relax.matmul" not in op_list(new_mod)
    assert relative_error(run(build(new_mod), inputs), expected) < 1e-4


def _conv_op_conv(middle: str):
    """conv1 (8->16) -> ``middle`` -> conv2 (16->16): one op the rewrite and extraction must agree on."""
    net = models._NetBuilder(8, 8, seed=3)
    relax = net.relax

    def body(x):
        x = net.conv(x, 16, name="conv1", relu=False, bias=False)
        if middle == "bias_first":  # the constant FIRST: still a per-channel bias, layout-following
            x = net.emit(relax.op.add(net.const((16, 1, 1), 16), x), "bias")
        elif middle == "nhwc_pool":  # a pool declared NHWC: a boundary (plain NCHW in and out)
            x = net.emit(relax.op.nn.max_pool2d(x, 1, 1, 0, layout="NHWC"), "pool")
        elif middle == "dropout":  # a tuple output: a boundary
            pair = net.emit(relax.op.nn.dropout(x, 0.5), "drop")
            x = net.emit(relax.TupleGetItem(pair, 0), "drop0")
        return net.conv(x, 16, name="conv2", relu=False, bias=False)

    return net.finish(body)


@pytest.mark.parametrize(("middle", "transforms"), [("bias_first", 2), ("nhwc_pool", 4), ("dropout", 4)])
def test_extraction_and_rewrite_classify_every_op_alike(tvm, middle, transforms):
    mod = prepare(_conv_op_conv(middle))
    graph = extract_layout_graph(mod, prepared=True, candidates=[8])
    kinds = {node.op: node.kind for node in graph.layout_nodes()}
    if middle == "bias_first":
        assert "relax.add" not in kinds  # follows conv1: no node
    else:
        assert kinds.get("relax.nn.max_pool2d" if middle == "nhwc_pool" else "relax.nn.dropout") == "boundary"
    blocked = {node.name: node.layouts.index(("NCHW8c", "NCHW8c"))
               for node in graph.layout_nodes() if ("NCHW8c", "NCHW8c") in node.layouts}
    assignment = {node: blocked.get(node, 0) for node in graph}
    new_mod = apply_solution(mod, graph, _solution(assignment))
    # bias_first: image -> 8c, output 8c -> NCHW; a boundary in the middle adds 8c -> NCHW -> 8c
    assert count_layout_transforms(new_mod) == expected_transforms(graph, assignment) == transforms
    inputs = random_inputs(mod, seed=2)
    expected = run(tvm.compile(mod, target=_target()), inputs)
    assert relative_error(run(build(new_mod), inputs), expected) < 1e-4


def test_fused_build_finishes_the_epilogue_in_the_conv_tile_leaving_the_input_alone(tvm):
    from layoutopt.tvm.kernels import schedule_module

    original = prepare(models.residual(channels=32, size=8))
    mod = apply_layouts(original, {"conv0": "NCHW3c->NCHW32c", "conv1": "NCHW32c->NCHW4c",
                                   "conv2": "NCHW4c->NCHW32c", "add": "NCHW32c"})
    target = _target()
    fused = _legalized_and_fused(mod)
    before = fused.script()
    scheduled = schedule_module(fused, target)
    assert fused.script() == before  # the caller's module is not modified in place
    convs = [f.script() for f in scheduled.functions.values()
             if isinstance(f, tvm.tirx.PrimFunc) and "conv2d_NCHWc" in f.script()]
    # conv1 (4-wide output block, one vector per column) finishes bias + relu in its register tile,
    # its output never stored ("local"); 32-wide blocks (2+ vectors per column) run the epilogue after
    kept_in_tile = ['"local"' in script for script in convs]
    assert sorted(kept_in_tile) == [False, False, True]
    inputs = random_inputs(original, seed=4)
    expected = run(tvm.compile(original, target=target), inputs)
    assert relative_error(run(build(mod, fuse=True), inputs), expected) < 1e-4


def test_a_flattened_concat_is_vectorised_in_pieces_and_builds(tvm):
    # SSD's heads: reshapes to (1, N) fused into one concat. Vectorising the whole N-long row
    # (331776 here) made one giant vector that aborted LLVM, killing the process.
    import re

    from layoutopt.tvm.kernels import MAX_VECTOR_LOOP, schedule_module

    relax = tvm.relax
    a = relax.Var("a", relax.TensorType((1, 324, 32, 32), "float32"))
    b = relax.Var("b", relax.TensorType((1, 16, 32, 32), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [a, b]):
        with bb.dataflow():
            flat = [bb.emit(relax.op.reshape(x, (1, -1))) for x in (a, b)]
            out = bb.emit_output(relax.op.concat(flat, axis=1))
        bb.emit_func_output(out)
    mod = bb.get()
    script = schedule_module(_legalized_and_fused(mod)).script()
    widths = [int(w) for w in re.findall(r"T\.vectorized\(T\.int64\((\d+)\)\)", script)]
    assert widths and max(widths) <= MAX_VECTOR_LOOP
    inputs = random_inputs(mod, seed=5)
    (result,) = run(build(mod, fuse=True), inputs)
    np.testing.assert_array_equal(result, np.concatenate([x.reshape(1, -1) for x in inputs], axis=1))


def test_a_conv_schedule_knob_reaches_the_build_on_its_own_kernel(tvm):
    from layoutopt.tvm.kernels import CANDIDATE_ANNOTATION, schedule_module

    original = prepare(models.residual(channels=32, size=8))
    rows = {"in": "NCHW16c", "out": "NCHW16c", "order": "rows"}
    # conv1 and conv2 have equal shapes: the knob rides on conv1's own kernel (its block annotation),
    # so only conv1 runs rows outside, in fused and unfused builds alike
    choices = {"conv0": "NCHW3c->NCHW16c", "conv1": rows, "conv2": "NCHW16c->NCHW16c", "add": "NCHW16c"}

    def orders(mod, fuse):
        lowered = _legalized_and_fused(mod) if fuse else _legalized(mod)
        functions = schedule_module(lowered, _target()).functions.values()
        scripts = [f.script() for f in functions if isinstance(f, tvm.tirx.PrimFunc)]
        scripts = [script for script in scripts if "conv2d_NCHWc" in script]
        return sorted("n_oh_oc_chunk_fused" in script for script in scripts)

    mod = apply_layouts(original, choices)
    assert CANDIDATE_ANNOTATION in mod.script() and '"order": "rows"' in mod.script()
    assert orders(mod, fuse=True) == orders(mod, fuse=False) == [False, False, True]
    inputs = random_inputs(original, seed=6)
    expected = run(tvm.compile(original, target=_target()), inputs)
    assert relative_error(run(build(mod, fuse=True), inputs), expected) < 1e-4
    assert relative_error(run(build(mod, fuse=False), inputs), expected) < 1e-4


def test_a_depthwise_conv_runs_blocked_and_computes_the_same(tvm):
    net = models._NetBuilder(8, 8, seed=7)

    def body(x):
        x = net.conv(x, 16, name="conv1")
        x = net.conv(x, 16, groups=16, name="depthwise")
        return net.conv(x, 16, name="conv2")

    mod = prepare(net.finish(body))
    new_mod = apply_layouts(mod, {"conv1": "NCHW8c->NCHW8c", "conv2": "NCHW8c->NCHW8c",
                                  "depthwise": "NCHW8c->NCHW8c[algorithm=depthwise]"})
    assert count_layout_transforms(new_mod) == 2  # image in, output out: the depthwise stays in 8c
    assert "depthwise_conv2d_NCHWc" in {gv.name_hint for gv in new_mod.get_global_vars()}
    inputs = random_inputs(mod, seed=8)
    expected = run(tvm.compile(mod, target=_target()), inputs)
    assert relative_error(run(build(new_mod), inputs), expected) < 1e-4


def test_a_clip_with_number_bounds_follows_a_blocked_layout(tvm):
    """``R.clip(x, 0, 6)``'s bounds are TIR IntImm, which TVM 0.27 also calls ``Constant``: the rewrite
    took them for tensor constants to repack (``'int' object has no attribute 'numpy'`` on a real
    OCR model, whose HardSigmoid imports as such a clip)."""
    net = models._NetBuilder(8, 8, seed=3)

    def body(x):
        x = net.conv(x, 16, name="conv1", relu=False)
        x = net.emit(net.relax.op.clip(x, 0, 6), "relu6")
        x = net.emit(net.relax.op.divide(x, net.relax.const(6.0, "float32")), "scaled")
        return net.conv(x, 16, name="conv2", relu=False)

    mod = prepare(net.finish(body))
    graph = extract_layout_graph(mod, prepared=True, candidates=[8])
    assert set(graph.following) >= {"relu6", "scaled"}  # both follow conv1's layout: no node
    new_mod = apply_layouts(mod, {"conv1": "NCHW8c->NCHW8c", "conv2": "NCHW8c->NCHW8c"})
    assert count_layout_transforms(new_mod) == 2  # image in, output out
    inputs = random_inputs(mod, seed=4)
    expected = run(tvm.compile(mod, target=_target()), inputs)
    assert relative_error(run(build(new_mod), inputs), expected) < 1e-4

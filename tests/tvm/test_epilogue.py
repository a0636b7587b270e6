"""The epilogue is part of the kernel, measured as it is built: every elementwise chain FuseOps fuses
into a conv (bias, ReLU6, hard-swish, hard-sigmoid, SiLU, leaky ReLU, GELU, per-channel scale and
shift, the residual add) is captured in the conv's workload, computed by its kernel, and the kernel a
build runs is one that was measured."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tvm")  # the tvm extra; CI installs it

from onnx_models import activation_onnx, mobile_fpn_onnx, mobilenet_v3_block_onnx  # tests/tvm is on sys.path

from layoutopt import ProblemError
from layoutopt.tvm import extract_layout_graph, load_model, prepare, resolve_target
from layoutopt.tvm._tvm import import_tvm
from layoutopt.tvm.building import builder
from layoutopt.tvm.building.apply import apply_assignment, apply_layouts
from layoutopt.tvm.building.baselines import fixed_layout_assignment
from layoutopt.tvm.evaluate.check import relative_error
from layoutopt.tvm.evaluate.timing import random_inputs, run
from layoutopt.tvm.kernels import build_kernel, validate_workload
from layoutopt.tvm.kernels.common import (
    annotated_candidate,
    annotated_workload,
    binds_values,
    block_names,
    inline_into_last,
)
from layoutopt.tvm.kernels.epilogue import apply_numpy, sigmoid_te, validate_epilogue
from layoutopt.tvm.kernels.kernel import kernel_tensors
from layoutopt.tvm.kernels.module import family_of_function, schedule_primfunc
from layoutopt.tvm.measure.cache import task_key
from layoutopt.tvm.measure.problem import kernel_tasks
from layoutopt.tvm.ops import fused_epilogues

pytestmark = pytest.mark.tvm

HARD_SWISH = ["bias", ["add", 3.0], ["clip", 0.0, 6.0], ["divide", 6.0], ["multiply", "@1"]]
RELU6 = ["bias", ["maximum", 0.0], ["minimum", 6.0]]


def test_steps_are_validated_and_named_in_errors():
    assert validate_epilogue([["leaky_relu", 1], "scale", ["divide", "channel"]]) == \
        [["leaky_relu", 1.0], "scale", ["divide", "channel"]]
    for steps, message in [
        (["bias", "swish"], "step 2 'swish': unknown step"),
        ([["multiply", "@2"]], "names no earlier value of the chain"),
        ([["add", "channel"]], "write 'bias'"),
        ([["clip", 0.0]], "clip takes 2 number"),
        ([["divide", float("nan")]], "not a finite number"),
        ("relu", "must be a list of steps"),
    ]:
        with pytest.raises(ProblemError, match=message):
            validate_epilogue(steps)


def test_numpy_reference_of_the_activations():
    x = np.linspace(-8.0, 8.0, 33)
    hard_swish = apply_numpy(HARD_SWISH, x, [np.zeros(1)])
    np.testing.assert_allclose(hard_swish, x * np.clip(x + 3, 0, 6) / 6)
    np.testing.assert_allclose(apply_numpy(["sigmoid", ["multiply", "@0"]], x, []), x / (1 + np.exp(-x)))
    gelu = apply_numpy([["divide", np.sqrt(2.0)], "erf", ["add", 1.0], ["multiply", "@0"], ["multiply", 0.5]],
                       x, [])
    np.testing.assert_allclose(gelu, apply_numpy(["gelu"], x, []), rtol=1e-12)
    operands = [np.full(1, 2.0), np.full(1, 4.0)]
    shift = apply_numpy([["subtract", "channel"], ["divide", "channel"]], x, operands)

    np.testing.assert_allclose(shift, (x - 2) / 4)


def test_each_activation_of_a_mobile_block_is_in_its_convs_workload():
    graph = extract_layout_graph(_model(mobilenet_v3_block_onnx), prepared=True)
    epilogues = [node.workload.get("epilogue") for node in graph.layout_nodes() if node.kind == "target"]
    assert epilogues == [
        HARD_SWISH,  # stem
        HARD_SWISH, HARD_SWISH,  # expand, depthwise
        ["bias", "relu"],  # squeeze
        # the hard-sigmoid gate, and the excite multiply FuseOps fuses after it
        ["bias", ["multiply", 0.1666666716337204], ["add", 0.5], ["clip", 0.0, 1.0],
         ["broadcast_multiply", 8, 8]],
        ["bias", "add"],  # project + residual
        RELU6, RELU6,  # expand, depthwise 5x5 s2 (Clip(0, 6) as maximum/minimum)
        ["relu", ["subtract", "channel"], ["divide", "channel"], "scale", "bias"],  # relu, then a batch norm
        ["bias", ["leaky_relu", 0.10000000149011612]],
        ["bias", "sigmoid", ["multiply", "@1"]],  # SiLU
        ["bias", ["divide", 1.4142135381698608], "erf", ["add", 1.0], ["multiply", "@1"], ["multiply", 0.5]],
    ]
    # hard-swish's and SiLU's multiplies read two values of one conv's chain: they follow its layout
    multi = [node.op for node in graph.layout_nodes() if node.kind == "multi"]
    assert multi == ["relax.multiply", "relax.add"]  # squeeze-excite's (map x gate), the residual add


def test_a_value_read_outside_the_chain_ends_it():
    # mobile_fpn's squeeze-excite multiply reads the depthwise conv's ReLU6 output twice (the mean and
    # the multiply): the chain stops there; its stem's hard-swish is fused whole
    graph = extract_layout_graph(_model(mobile_fpn_onnx), prepared=True)
    epilogues = {node.name: node.workload.get("epilogue") for node in graph.layout_nodes()
                 if node.kind == "target"}
    assert epilogues["lv"] == HARD_SWISH and epilogues["lv7"] == RELU6
    unfused = extract_layout_graph(_model(mobile_fpn_onnx), prepared=True, fuse=False)
    assert not any("epilogue" in node.workload for node in unfused.layout_nodes())


def test_a_winograd_conv_followed_by_gelu_builds_and_computes_what_tvm_computes():
    """The Winograd schedule inlined its epilogue consumer by consumer: GELU's ``x * (1 + erf(x / √2))``
    reads the biased conv twice, and the build failed (``T_add_intermediate is used before its
    definition``); an epilogue is inlined as a whole now."""
    tvm = import_tvm()
    relax = tvm.relax
    rng = np.random.default_rng(0)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 16, 8, 8), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            weight = relax.const(rng.standard_normal((16, 16, 3, 3)).astype("float32") * 0.1)
            conv = bb.emit(relax.op.nn.conv2d(x, weight, padding=1), "conv")
            y = bb.emit(relax.op.add(conv, relax.const(rng.standard_normal((1, 16, 1, 1)).astype("float32"))))
            erf = bb.emit(relax.op.erf(bb.emit(relax.op.divide(y, relax.const(np.float32(np.sqrt(2.0)))))))
            gelu = bb.emit(relax.op.multiply(y, bb.emit(relax.op.add(erf, relax.const(np.float32(1.0))))))
            output = bb.emit_output(relax.op.multiply(gelu, relax.const(np.float32(0.5))))
        bb.emit_func_output(output)
    mod = prepare(bb.get())
    assert fused_epilogues(mod["main"])["conv"][-3:] == [["add", 1.0], ["multiply", "@1"], ["multiply", 0.5]]
    target = resolve_target(None)
    inputs = random_inputs(mod, seed=2)
    built = builder.build(apply_layouts(mod, {"conv": "NCHW8c->NCHW8c[algorithm=winograd,tile=2]"}), target)
    assert relative_error(run(built, inputs), run(tvm.compile(mod, target=target), inputs)) < 1e-4


def _activation_model(name: str):
    """``activation_onnx`` for one activation, as a writer of ``path`` alone, named for its file."""
    def write(path):
        return activation_onnx(path, name, size=16)

    write.__name__ = f"{name}_onnx"
    return write


GELU = ["bias", ["divide", 1.4142135381698608], "erf", ["add", 1.0], ["multiply", "@1"], ["multiply", 0.5]]
MISH = ["bias", "exp", ["add", 1.0], "log", "tanh", ["multiply", "@1"]]


@pytest.mark.parametrize("model, expected", [
    (mobile_fpn_onnx, [HARD_SWISH, RELU6]), (mobilenet_v3_block_onnx, [HARD_SWISH, RELU6]),
    (_activation_model("gelu"), [GELU]), (_activation_model("mish"), [MISH]),
], ids=["mobile_fpn", "mobilenet_v3", "gelu", "mish"])
@pytest.mark.parametrize("layout, prefer", [("NCHW8c", ()), ("NCHW16c", ("winograd", "gemm"))],
                         ids=["8c", "16c"])
def test_every_fused_conv_of_a_build_runs_a_kernel_that_was_measured(model, expected, layout, prefer,
                                                                     monkeypatch):
    tvm = import_tvm()
    target = resolve_target(None)
    graph = extract_layout_graph(_model(model), prepared=True)
    measured = {task_key(validate_workload(workload), candidate)
                for workload, candidate in kernel_tasks(graph)}
    assignment = fixed_layout_assignment(graph, layout, prefer=prefer)
    scheduled = []  # what build() hands to schedule_module: its legalized, fused module
    schedule_module = builder.schedule_module
    monkeypatch.setattr(builder, "schedule_module",
                        lambda mod, tgt: scheduled.append(mod) or schedule_module(mod, tgt))
    builder.build(apply_assignment(graph.mod, graph, assignment), target)

    convs = [node for node in graph.layout_nodes() if node.op == "relax.nn.conv2d"]
    checked = []
    for gvar, func in scheduled[0].functions_items():
        if not isinstance(func, tvm.tirx.PrimFunc):
            continue
        sch = tvm.s_tir.Schedule(func)
        names = block_names(sch)
        family = family_of_function(sch, names)
        if family is None or family.op != "conv2d":
            continue
        main = next(name for name in names if name in family.main_blocks)
        workload = annotated_workload(sch, sch.get_sblock(main))
        candidate = annotated_candidate(sch, sch.get_sblock(main))
        assert workload is not None, f"{gvar.name_hint}: a conv kernel of the build carries no workload"
        assert task_key(validate_workload(workload), candidate) in measured, gvar.name_hint
        _assert_computes_the_measured_kernel(func, workload, candidate, target, gvar.name_hint)
        checked.append(workload.get("epilogue", []))
    # every conv of the graph was built as one of these fused kernels, none left in TVM's own NCHW conv
    assert len(checked) == len(convs)
    assert all(epilogue in checked for epilogue in expected)


def _model(write):
    return prepare(load_model(write(Path(_tmp()) / f"{write.__name__}.onnx"), [1, 3, 16, 16]))


def _tmp() -> str:
    import tempfile

    return tempfile.mkdtemp(prefix="layoutopt-epilogue-")


def _op_blocks(sch) -> list[str]:
    """A function's block names without the numbers FuseTIR and TE append to repeated ops."""
    return [re.sub(r"_?\d+$", "", name) for name in block_names(sch)]


def _assert_computes_the_measured_kernel(func, workload, candidate, target, name: str) -> None:
    """The build's fused function has the measured kernel's ops, in order, and computes its output
    from the same inputs."""
    tvm = import_tvm()
    with target:
        measured = tvm.te.create_prim_func(kernel_tensors(tvm, workload, candidate))
    assert _op_blocks(tvm.s_tir.Schedule(func)) == _op_blocks(tvm.s_tir.Schedule(measured)), name
    kernel = build_kernel(workload, candidate, target)
    shapes = [tuple(int(d) for d in param.shape) for param in func.params]
    assert shapes == [tuple(shape) for shape in kernel.arg_shapes], name
    with target:
        built = schedule_primfunc(func, target, strict=True).with_attr("global_symbol", "kernel")
    outputs = []
    rng = np.random.default_rng(0)
    arrays = [rng.uniform(-1, 1, shape).astype("float32") for shape in shapes]
    for module in (tvm.IRModule({"kernel": built}), kernel.module):
        args = [tvm.runtime.tensor(array) for array in arrays]
        tvm.compile(module, target=target).mod["kernel"](*args)
        outputs.append(args[-1].numpy())
    np.testing.assert_allclose(outputs[0], outputs[1], rtol=1e-6, atol=1e-6, err_msg=name)


def test_the_sigmoid_is_vectorised_and_float32_accurate_over_its_whole_range():
    tvm = import_tvm()
    x = tvm.te.placeholder((4096,), name="x")
    lib = tvm.compile(tvm.IRModule({"main": tvm.te.create_prim_func([x, sigmoid_te(tvm, x)])}), target="llvm")
    values = np.linspace(-120, 120, 4096).astype("float32")
    values[:8] = [-1e30, 1e30, -89.0, 89.0, -88.0, 88.0, 1e-30, 0.0]  # beyond fast_exp's clamp, tiny, zero
    out = tvm.runtime.tensor(np.zeros(4096, "float32"))
    lib["main"](tvm.runtime.tensor(values), out)
    with np.errstate(over="ignore"):
        truth = 1.0 / (1.0 + np.exp(-values.astype(np.float64)))
    got = out.numpy()
    assert np.isfinite(got).all() and np.abs(got - truth).max() < 1e-6  # absolute: values in [0, 1]
    held = truth > 1e-30  # relative, where float32 holds the value
    assert (np.abs(got - truth)[held] / truth[held]).max() < 1e-5
    assert "expf" not in lib.mod.inspect_source("asm")  # no libm call per element: vectorised


def test_builds_compute_sigmoid_and_silu_vectorised_as_tvm_computes_them():
    tvm = import_tvm()
    relax = tvm.relax
    rng = np.random.default_rng(0)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 8, 6, 6), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            weight = relax.const(rng.standard_normal((16, 8, 3, 3)).astype("float32"))
            conv = bb.emit(relax.op.nn.conv2d(x, weight, padding=1))
            silu = bb.emit(relax.op.multiply(conv, bb.emit(relax.op.sigmoid(conv))))  # fused into the conv
            gate = bb.emit(relax.op.nn.silu(silu))  # relax.nn.silu, then a sigmoid of large values
            large = bb.emit(relax.op.multiply(gate, relax.const(np.float32(30))))
            out = bb.emit_output(relax.op.sigmoid(large))
        bb.emit_func_output(out)
    mod = bb.get()
    target = resolve_target(None)
    inputs = random_inputs(mod, seed=1)
    expected = run(tvm.compile(mod, target=target), inputs)
    graph = extract_layout_graph(prepare(mod), prepared=True)
    assignment = fixed_layout_assignment(graph, "NCHW8c")
    built = builder.build(apply_assignment(graph.mod, graph, assignment), target)
    assert relative_error(run(built, inputs), expected) < 1e-5
    assert "expf" not in built.mod.imports[0].inspect_source("asm")


@pytest.mark.parametrize("axis", [-1, 1, 0])
def test_builds_compute_softmax_vectorised_along_any_axis(axis):
    tvm = import_tvm()
    relax = tvm.relax
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((3, 7, 13), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.nn.softmax(x, axis=axis))
        bb.emit_func_output(out)
    values = np.random.default_rng(2).uniform(-60, 60, (3, 7, 13)).astype("float32")
    values[0, 0, :] = 0.0  # a row of ties
    built = builder.build(bb.get(), resolve_target(None))
    (got,) = run(built, [values])
    shifted = values.astype(np.float64) - values.max(axis=axis, keepdims=True)
    truth = np.exp(shifted) / np.exp(shifted).sum(axis=axis, keepdims=True)
    assert np.abs(got - truth).max() < 1e-6 and np.allclose(got.sum(axis=axis), 1.0, atol=1e-5)
    assert "expf" not in built.mod.imports[0].inspect_source("asm")


def test_chained_sigmoids_compile_without_the_expression_blowing_up():
    # each sigmoid's input is bound once (Let), so the TIR grows linearly; but TVM's simplifier substitutes
    # bound values, so four chained and all inlined into one expression took 215 s to compile (three
    # 1.6 s). The schedules' inline_into_last computes all but the last binding block one vector at a
    # time in the last block's loop instead: four chained compile like one
    tvm = import_tvm()
    x = tvm.te.placeholder((64,), name="x")
    y = x
    for times_input in (False, True, False, True):
        y = sigmoid_te(tvm, y, times_input=times_input)
    sch = tvm.s_tir.Schedule(tvm.te.create_prim_func([x, y]))
    names = block_names(sch)
    assert len(names) == 4 and all(binds_values(sch, name) for name in names)
    inline_into_last(sch, names)
    assert block_names(sch) == names  # none of them inlined into another
    assert len(str(sch.mod)) < 8000
    lib = tvm.compile(sch.mod, target="llvm")
    values = np.linspace(-8, 8, 64).astype("float32")
    out = tvm.runtime.tensor(np.zeros(64, "float32"))
    lib["main"](tvm.runtime.tensor(values), out)
    expected = values.astype(np.float64)
    for step in ("sigmoid", "silu", "sigmoid", "silu"):
        expected = apply_numpy([step], expected, [])
    assert np.abs(out.numpy() - expected).max() < 1e-6

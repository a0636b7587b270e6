"""Kernels: candidates, numerics against numpy, real schedules, schedule_module, clear errors."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tvm")

from layoutopt import ProblemError
from layoutopt.tvm import kernels
from layoutopt.tvm._tvm import import_tvm, resolve_target, target_key
from layoutopt.tvm.kernels import (
    build_kernel,
    check_kernel,
    conv2d_candidates,
    dense_candidates,
    layout_transform_workload,
    pack_data,
    register_tile,
    schedule_module,
    unpack_data,
    validate_workload,
)

pytestmark = pytest.mark.tvm


def conv(data, kernel, strides=(1, 1), padding=(1, 1, 1, 1), groups=1):
    return {
        "op": "conv2d",
        "data": list(data),
        "kernel": list(kernel),
        "strides": list(strides),
        "padding": list(padding),
        "dilation": [1, 1],
        "groups": groups,
        "dtype": "float32",
    }


@pytest.fixture(scope="module")
def target():
    return resolve_target("llvm")


# -- candidates ------------------------------------------------------------------------------------


def test_conv2d_candidates_use_dividing_blocks_and_nchw():
    cands = conv2d_candidates(conv([1, 16, 8, 8], [32, 16, 3, 3]), algorithms=["direct"])
    pairs = {(c["in"], c["out"]) for c in cands}
    assert len(cands) == len(pairs) == 3 * 4 + 1 and not any("order" in c for c in cands)
    assert ("NCHW16c", "NCHW32c") in pairs and ("NCHW", "NCHW") in pairs
    assert ("NCHW32c", "NCHW32c") not in pairs  # 32 does not divide 16 input channels
    # asked for, each blocked pair comes in both loop orders, the default first
    both = conv2d_candidates(conv([1, 16, 8, 8], [32, 16, 3, 3]), orders=["oc", "rows"],
                             algorithms=["direct"])
    assert len(both) == 2 * 3 * 4 + 1
    assert both[:2] == [{"in": "NCHW4c", "out": "NCHW4c"}, {"in": "NCHW4c", "out": "NCHW4c", "order": "rows"}]
    with pytest.raises(ProblemError, match="loop orders"):
        conv2d_candidates(conv([1, 16, 8, 8], [32, 16, 3, 3]), orders=["diagonal"])
    # by default every algorithm that applies comes after the direct kernels: Winograd for a 3x3 stride 1
    default = conv2d_candidates(conv([1, 16, 8, 8], [32, 16, 3, 3]))
    assert default[:len(cands)] == cands
    assert {c.get("algorithm") for c in default[len(cands):]} == {"winograd"}


@pytest.mark.parametrize("candidate, message", [
    ({"in": "NCHW", "out": "NCHW", "order": "rows"}, "only a blocked conv2d"),
    ({"in": "NCHW8c", "out": "NCHW8c", "order": "columns"}, "order='columns' is not among"),
])
def test_bad_loop_order_is_refused(candidate, message):
    with pytest.raises(ProblemError, match=message):
        kernels.validate_candidate(kernels.validate_workload(conv([1, 16, 8, 8], [16, 16, 3, 3])), candidate)


@pytest.mark.parametrize("epilogue", [None, ["bias", "relu"]])
def test_loop_order_knob_decides_the_parallel_loop_nest(epilogue, target):
    workload = conv([1, 16, 8, 8], [16, 16, 3, 3]) | ({"epilogue": epilogue} if epilogue else {})

    def parallel_loops(candidate):
        script = build_kernel(workload, candidate, target).module.script()
        return [line.split()[1] for line in script.splitlines() if "T.parallel" in line and "chunk" in line]

    assert parallel_loops({"in": "NCHW8c", "out": "NCHW8c"}) == ["n_oc_chunk_oh_fused"]
    assert parallel_loops({"in": "NCHW8c", "out": "NCHW8c", "order": "rows"}) == ["n_oh_oc_chunk_fused"]


def test_small_channel_counts_get_their_own_block():
    ins = {c["in"] for c in conv2d_candidates(conv([1, 3, 16, 16], [8, 3, 7, 7], (2, 2), (3, 3, 3, 3)))}
    assert ins == {"NCHW3c", "NCHW"}


def test_candidate_blocks_are_configurable():
    cands = conv2d_candidates(
        conv([1, 16, 8, 8], [16, 16, 1, 1], padding=(0, 0, 0, 0)), blocks=[8], include_nchw=False
    )
    # a 1x1 conv: the direct kernel, then the packed GEMM
    block8 = {"in": "NCHW8c", "out": "NCHW8c"}
    assert cands == [block8, {**block8, "algorithm": "gemm"}]


def test_depthwise_gets_equal_blocks_and_grouped_the_blocks_of_a_group():
    depthwise = conv2d_candidates(conv([1, 16, 8, 8], [16, 1, 3, 3], groups=16), blocks=[4, 8, 32])
    assert [(c["in"], c["out"]) for c in depthwise] == [
        ("NCHW4c", "NCHW4c"),
        ("NCHW8c", "NCHW8c"),
        ("NCHW", "NCHW"),
    ]
    # 4 input and 2 output channels per group: blocks of 4 in, none out (no block below 4 is made up)
    assert conv2d_candidates(conv([1, 16, 8, 8], [8, 4, 3, 3], groups=4)) == [{"in": "NCHW", "out": "NCHW"}]
    # RegNet's groups of 8 (and 16 out): every pair of dividing blocks, blocked first, NCHW last
    workload = conv([1, 32, 8, 8], [64, 8, 3, 3], groups=4)
    grouped = conv2d_candidates(workload, blocks=[4, 8, 16, 32])
    assert [(c["in"], c["out"]) for c in grouped] == [
        (f"NCHW{i}c", f"NCHW{o}c") for i in (4, 8) for o in (4, 8, 16)] + [("NCHW", "NCHW")]
    assert not any("algorithm" in c for c in grouped)  # Winograd and GEMM stay ungrouped
    direct = kernels.FAMILIES["conv2d", "direct"]
    for candidate, message in [
        ({"in": "NCHW16c", "out": "NCHW8c"}, "input, in each of its 4 groups: block 16 does not"),
        ({"in": "NCHW8c", "out": "NCHW32c"}, "output, in each of its 4 groups: block 32 does not"),
    ]:
        with pytest.raises(ProblemError, match=message):
            direct.validate_candidate(workload, candidate)
    assert direct.weight_shape(workload, {"in": "NCHW8c", "out": "NCHW16c"}) == (4, 1, 3, 3, 8, 16)


def test_dense_candidates_pack_the_weight_in_blocks_no_wider_than_its_padded_features():
    cands = dense_candidates({"op": "dense", "data": [1, 64], "weight": [24, 64], "dtype": "float32"})
    assert [c["weight"] for c in cands] == ["NK", "NK8n", "NK16n"]
    cands = dense_candidates({"op": "dense", "data": [40, 120], "weight": [6625, 120], "dtype": "float32"})
    assert [c["weight"] for c in cands] == ["NK", "NK8n", "NK16n", "NK32n"]


# -- numerics and schedules ------------------------------------------------------------------------

WORKLOADS = {
    "conv3x3": conv([1, 16, 6, 6], [32, 16, 3, 3]),
    "conv7x7s2_c3": conv([1, 3, 12, 12], [8, 3, 7, 7], (2, 2), (3, 3, 3, 3)),
    "conv1x1s2_asym": conv([1, 8, 7, 7], [16, 8, 1, 1], (2, 2), (0, 1, 1, 0)),
    "depthwise": conv([1, 16, 6, 6], [16, 1, 3, 3], groups=16),
    "grouped": conv([1, 8, 6, 6], [8, 2, 3, 3], groups=4),
    # blocked grouped kernels: prime sizes, stride 2 on odd sizes, 1x1, output chunks wider than input's
    "grouped_blocked": conv([1, 32, 13, 11], [48, 8, 3, 3], groups=4),
    "grouped_s2_odd": conv([1, 48, 15, 9], [48, 8, 3, 3], (2, 2), groups=6),
    "grouped_1x1_asym": conv([1, 32, 7, 5], [64, 16, 1, 1], padding=(0, 1, 1, 0), groups=2),
    "dense": {"op": "dense", "data": [2, 32], "weight": [16, 32], "dtype": "float32"},
}


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_every_candidate_matches_numpy(name, target):
    tvm = import_tvm()
    workload = WORKLOADS[name]
    cands = (
        kernels.candidates(workload, blocks=[4, 8, 16])
        if workload["op"] == "conv2d"
        else kernels.candidates(workload)
    )
    inputs = build_kernel(workload, cands[0], target).logical_inputs(seed=3)
    reference = (inputs, kernels.reference_output(workload, inputs))
    assert np.abs(reference[1]).max() > 0.1  # a zero reference would check nothing
    for candidate in cands:
        kernel = build_kernel(workload, candidate, target)
        error = check_kernel(kernel, tvm.compile(kernel.module, target=target), reference=reference)
        assert error < 1e-5, (candidate, error)


@pytest.mark.parametrize(
    "src,dst", [("NCHW", "NCHW8c"), ("NCHW16c", "NCHW4c"), ("NCHW4c", "NCHW"), ("NCHW8c", "NCHW16c")]
)
def test_layout_transforms_move_every_element(src, dst, target):
    kernel = build_kernel(layout_transform_workload([1, 16, 3, 5], src, dst), {}, target)
    assert check_kernel(kernel, target=target) == 0.0


def test_a_wrong_result_is_caught(target):
    workload = WORKLOADS["conv3x3"]
    kernel = build_kernel(workload, {"in": "NCHW8c", "out": "NCHW16c"}, target)
    inputs = kernel.logical_inputs()
    wrong = kernels.reference_output(workload, inputs)
    wrong[0, 5, 2, 3] += 1.0
    with pytest.raises(ProblemError, match="wrong result"):
        check_kernel(kernel, target=target, reference=(inputs, wrong))


@pytest.mark.parametrize("candidate", [{"in": "NCHW8c", "out": "NCHW16c"}, {"in": "NCHW", "out": "NCHW"}])
def test_kernels_are_really_scheduled(candidate, target):
    script = build_kernel(WORKLOADS["conv3x3"], candidate, target).module.script()
    assert "T.parallel" in script and "T.vectorized" in script


def test_reg_n_knob_changes_the_register_tile(target):
    workload = conv([1, 8, 8, 16], [8, 8, 3, 3])
    tiles = {
        n: build_kernel(workload, {"in": "NCHW8c", "out": "NCHW8c", "reg_n": n}, target).module.script()
        for n in (4, 8)
    }
    assert tiles[4] != tiles[8]
    check_kernel(build_kernel(workload, {"in": "NCHW8c", "out": "NCHW8c", "reg_n": 4}, target), target=target)


def test_pack_and_unpack_are_inverse():
    array = np.arange(2 * 16 * 3 * 2, dtype="float32").reshape(2, 16, 3, 2)
    packed = pack_data(array, "NCHW8c")
    assert packed.shape == (2, 2, 3, 2, 8) and packed[0, 1, 2, 1, 3] == array[0, 11, 2, 1]
    np.testing.assert_array_equal(unpack_data(packed, "NCHW8c"), array)


def test_schedule_module_schedules_a_legalized_relax_model(target):
    tvm = import_tvm()
    relax = tvm.relax
    rng = np.random.default_rng(0)
    builder = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 8, 12, 12), "float32"))
    weight = relax.const(rng.standard_normal((16, 8, 3, 3)).astype("float32"))
    head = relax.const(rng.standard_normal((16, 5)).astype("float32"))
    with builder.function("main", [x]):
        with builder.dataflow():
            y = builder.emit(relax.op.nn.relu(relax.op.nn.conv2d(x, weight, padding=1)))
            blocked = builder.emit(
                relax.op.layout_transform(y, index_map=lambda n, c, h, w: (n, c // 4, h, w, c % 4))
            )
            pooled = builder.emit(relax.op.nn.max_pool2d(blocked, 3, strides=2, padding=1, layout="NCHW4c"))
            plain = builder.emit(
                relax.op.layout_transform(pooled, index_map=lambda n, c, h, w, b: (n, c * 4 + b, h, w))
            )
            mean = builder.emit(relax.op.mean(plain, axis=[2, 3]))
            out = builder.emit_output(relax.op.matmul(mean, head))
        builder.emit_func_output(out)
    with target:
        legalized = relax.transform.LegalizeOps()(builder.get())
    scheduled = schedule_module(legalized, target)
    tvm.ir.assert_structural_equal(kernels.ScheduleModule(target)(legalized), scheduled)  # the pass form
    assert not any(
        f.attrs.get("tirx.is_scheduled")
        for f in legalized.functions.values()
        if isinstance(f, tvm.tirx.PrimFunc)
    )  # the input module is left alone
    funcs = {gv.name_hint: f for gv, f in scheduled.functions_items() if isinstance(f, tvm.tirx.PrimFunc)}
    assert len(funcs) == 7 and all(f.attrs.get("tirx.is_scheduled") for f in funcs.values())
    assert "T.parallel" in funcs["conv2d"].script()
    data = rng.standard_normal((1, 8, 12, 12)).astype("float32")
    outputs = []
    for mod in (legalized, scheduled):
        vm = relax.VirtualMachine(tvm.compile(mod, target=target), tvm.cpu())
        outputs.append(vm["main"](tvm.runtime.tensor(data)).numpy())
    np.testing.assert_allclose(outputs[1], outputs[0], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("pool", ["avg", "max", "mean"])
def test_pooling_in_a_channel_block_is_vectorised_along_the_block_and_matches_the_unscheduled(pool, target):
    tvm = import_tvm()
    relax = tvm.relax
    data = np.random.default_rng(1).standard_normal((1, 3, 9, 9, 16)).astype("float32")
    builder = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(data.shape, "float32"))
    with builder.function("main", [x]):
        with builder.dataflow():
            if pool == "avg":
                y = relax.op.nn.avg_pool2d(x, 3, 1, 1, layout="NCHW16c", count_include_pad=False)
            elif pool == "max":
                y = relax.op.nn.max_pool2d(x, 3, 2, 0, layout="NCHW16c")
            else:
                y = relax.op.mean(x, axis=[2, 3], keepdims=True)
            out = builder.emit_output(y)
        builder.emit_func_output(out)
    with target:
        legalized = relax.transform.LegalizeOps()(builder.get())
    scheduled = schedule_module(legalized, target)
    (func,) = [f for f in scheduled.functions.values() if isinstance(f, tvm.tirx.PrimFunc)]
    script = func.script()
    # the channel block is the vector: innermost, inside the window's reduction loops
    assert "T.parallel" in script and script.count("T.vectorized(T.int64(16))") >= 2  # init and update
    outputs = []
    for mod in (legalized, scheduled):
        vm = relax.VirtualMachine(tvm.compile(mod, target=target), tvm.cpu())
        outputs.append(vm["main"](tvm.runtime.tensor(data)).numpy())
    np.testing.assert_allclose(outputs[1], outputs[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", ["softmax", "layer_norm", "mean", "max"])
@pytest.mark.parametrize("shape", [(3, 67), (2, 5, 64), (40, 211)])
def test_a_reduction_along_the_contiguous_axis_runs_on_vectors_of_partial_results(op, shape, target):
    """softmax's max and sum, a layer norm's moments: rfactor over vector lanes, the lengths no
    multiple of the lanes (67, 211) ending in one predicated step."""
    tvm = import_tvm()
    relax = tvm.relax
    data = np.random.default_rng(3).standard_normal(shape).astype("float32")
    builder = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(data.shape, "float32"))
    ones, zeros = (relax.const(np.full(shape[-1], v, "float32")) for v in (1.0, 0.0))
    with builder.function("main", [x]):
        with builder.dataflow():
            y = {"softmax": lambda: relax.op.nn.softmax(x, axis=-1),
                 "layer_norm": lambda: relax.op.nn.layer_norm(x, ones, zeros, axes=[-1]),
                 "mean": lambda: relax.op.mean(x, axis=[-1], keepdims=True),
                 "max": lambda: relax.op.max(x, axis=[-1])}[op]()
            out = builder.emit_output(y)
        builder.emit_func_output(out)
    with target:
        legalized = relax.transform.LegalizeOps()(builder.get())
    scheduled = schedule_module(legalized, target)
    lanes, _ = kernels.isa.vector_registers(target)
    reductions = [f.script() for f in scheduled.functions.values()
                  if isinstance(f, tvm.tirx.PrimFunc) and "_rf" in f.script()]
    assert reductions and all(f"T.vectorized({lanes})" in s or f"T.vectorized(T.int64({lanes}))" in s
                              for s in reductions)
    outputs = []
    for mod in (legalized, scheduled):
        vm = relax.VirtualMachine(tvm.compile(mod, target=target), tvm.cpu())
        outputs.append(vm["main"](tvm.runtime.tensor(data)).numpy())
    np.testing.assert_allclose(outputs[1], outputs[0], rtol=1e-5, atol=1e-6)
    expected = {"softmax": lambda a: np.exp(a - a.max(-1, keepdims=True)) / np.exp(
                    a - a.max(-1, keepdims=True)).sum(-1, keepdims=True),
                "layer_norm": lambda a: (a - a.mean(-1, keepdims=True)) / np.sqrt(
                    a.var(-1, keepdims=True) + 1e-5),
                "mean": lambda a: a.mean(-1, keepdims=True),
                "max": lambda a: a.max(-1)}[op](data.astype("float64"))
    np.testing.assert_allclose(outputs[1], expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("epilogue", [False, True])
def test_a_concat_copies_each_input_in_its_own_loop_with_its_followers_inlined(epilogue, target):
    tvm = import_tvm()
    relax = tvm.relax
    rng = np.random.default_rng(2)
    blocks = [4, 2, 2, 2, 1]
    data = [rng.standard_normal((1, b, 6, 6, 16)).astype("float32") for b in blocks]
    scale = relax.const(rng.standard_normal((1, sum(blocks), 1, 1, 16)).astype("float32"))
    builder = relax.BlockBuilder()
    xs = [relax.Var(f"x{i}", relax.TensorType(d.shape, "float32")) for i, d in enumerate(data)]
    with builder.function("main", xs):
        with builder.dataflow():
            y = relax.op.concat(xs, axis=1)
            if epilogue:  # a folded batch norm and relu, as DenseNet's layers start
                y = relax.op.nn.relu(relax.op.add(relax.op.multiply(builder.emit(y), scale), scale))
            out = builder.emit_output(y)
        builder.emit_func_output(out)
    with target:
        legalized = relax.transform.LegalizeOps()(builder.get())
        fused = relax.transform.FuseTIR()(relax.transform.FuseOps()(
            relax.transform.AnnotateTIROpPattern()(legalized)))
    scheduled = schedule_module(fused, target)
    (func,) = [f for f in scheduled.functions.values() if isinstance(f, tvm.tirx.PrimFunc)]
    script = func.script()
    # one loop nest per input, each vectorised, under one parallel loop; the followers inlined
    assert script.count("T.parallel") == 1 and script.count("T.vectorized") == len(blocks)
    assert "T_multiply" not in script and "sblock_alloc_buffer" not in script
    outputs = []
    for mod in (legalized, scheduled):
        vm = relax.VirtualMachine(tvm.compile(mod, target=target), tvm.cpu())
        outputs.append(vm["main"](*[tvm.runtime.tensor(d) for d in data]).numpy())
    np.testing.assert_allclose(outputs[1], outputs[0], rtol=1e-6, atol=1e-6)


def test_a_concat_along_the_innermost_axis_keeps_the_generic_schedule(target):
    tvm = import_tvm()
    relax = tvm.relax
    builder = relax.BlockBuilder()
    xs = [relax.Var(f"x{i}", relax.TensorType((2, 3, 4 + i), "float32")) for i in range(3)]
    with builder.function("main", xs):
        with builder.dataflow():
            out = builder.emit_output(relax.op.concat(xs, axis=2))
        builder.emit_func_output(out)
    with target:
        legalized = relax.transform.LegalizeOps()(builder.get())
    scheduled = schedule_module(legalized, target)
    (func,) = [f for f in scheduled.functions.values() if isinstance(f, tvm.tirx.PrimFunc)]
    assert func.attrs.get("tirx.is_scheduled") and "T.parallel" in func.script()
    data = [np.arange(2 * 3 * (4 + i), dtype="float32").reshape(2, 3, 4 + i) for i in range(3)]
    vm = relax.VirtualMachine(tvm.compile(scheduled, target=target), tvm.cpu())
    np.testing.assert_array_equal(vm["main"](*[tvm.runtime.tensor(d) for d in data]).numpy(),
                                  np.concatenate(data, axis=2))


# -- targets and errors ----------------------------------------------------------------------------


def test_llvm_targets_get_the_host_cpu():
    tvm = import_tvm()
    host = tvm.target.codegen.llvm_get_system_cpu()
    for spec in (None, "llvm", {"kind": "llvm"}, '{"kind": "llvm", "mcpu": "native"}'):
        assert str(resolve_target(spec).attrs["mcpu"]) == host
    legacy = resolve_target("llvm -mcpu=skylake -num-cores=2")
    assert str(legacy.attrs["mcpu"]) == "skylake"
    assert target_key(resolve_target(legacy)) == target_key(legacy)


@pytest.mark.parametrize(
    "bad,message",
    [
        ("cuda", "kind 'llvm'"),
        ("foo", "kind 'llvm'"),
        ({"kind": "llvm", "no_such_option": 1}, "not a valid TVM target"),
        ({"kind": "llvm", "mcpu": "nonsense"}, "does not know the CPU"),
        ("llvm mcpu", "cannot parse option"),
        ("{not json", "not valid JSON"),
        (42, "must be None, a string"),
    ],
)
def test_bad_targets_are_clear_errors(bad, message):
    with pytest.raises(ProblemError, match=message):
        resolve_target(bad)


@pytest.mark.parametrize(
    "workload,message",
    [
        (conv([1, 16, 8, 8], [16, 8, 3, 3]), "expects 8 input channels"),
        (conv([1, 16, 2, 2], [16, 16, 5, 5], padding=(0, 0, 0, 0)), "empty output"),
        (conv([1, 16, 8, 8], [16, 16, 3, 3], strides=(0, 1)), "strides"),
        (conv([1, 16, 8], [16, 16, 3, 3]), "data"),
        (conv([1, 16, 8, 8], [16, 4, 3, 3], groups=3), "groups=3"),
        ({"op": "dense", "data": [1, 8], "weight": [4, 6]}, "reduction size"),
        ({"op": "softmax"}, "not one of"),
        (
            {"op": "layout_transform", "shape": [1, 12, 4, 4], "src": "NCHW", "dst": "NCHW8c"},
            "does not divide",
        ),
        ({"op": "layout_transform", "shape": [1, 16, 4, 4], "src": "NCHW8c", "dst": "NCHW8c"}, "itself"),
        ({"op": "layout_transform", "shape": [1, 16, 4, 4], "src": "NHWC", "dst": "NCHW8c"}, "neither"),
        ({"op": "conv2d", "data": [1, 16, 8, 8]}, "malformed"),
    ],
)
def test_bad_workloads_are_clear_errors(workload, message):
    with pytest.raises(ProblemError, match=message):
        validate_workload(workload)


@pytest.mark.parametrize(
    "candidate,message",
    [
        ({"in": "NCHW32c", "out": "NCHW8c"}, "does not divide the 16"),
        ({"in": "NCHW", "out": "NCHW8c"}, "both be blocked"),
        ({"in": "NCHW8c"}, "needs 'in' and 'out'"),
        ({"in": "NCHW8c", "out": "NCHW8c", "reg_n": 0}, "reg_n"),
    ],
)
def test_bad_candidates_are_clear_errors(candidate, message):
    with pytest.raises(ProblemError, match=message):
        build_kernel(WORKLOADS["conv3x3"], candidate)


def test_import_is_lazy_and_a_missing_tvm_is_a_clear_error():
    import subprocess
    import sys

    lazy = "import sys, layoutopt, layoutopt.tvm; assert 'tvm' not in sys.modules, 'tvm imported eagerly'"
    assert subprocess.run([sys.executable, "-c", lazy], capture_output=True).returncode == 0
    missing = (
        "import sys; sys.modules['tvm'] = None\n"
        "try:\n    import layoutopt.tvm\nexcept ImportError as exc:\n    print(type(exc).__name__, exc)"
    )
    out = subprocess.run([sys.executable, "-c", missing], capture_output=True, text=True).stdout
    assert out.startswith("MissingExtraError") and "pip install 'layoutopt[tvm]'" in out


@pytest.mark.parametrize("weight", ["NK", "NK8n"])
def test_schedule_module_schedules_unscheduled_kernels_like_the_measured_ones(weight, target):
    tvm = import_tvm()
    workload = WORKLOADS["dense"]
    candidate = {"in": "NC", "out": "NC", "weight": weight}
    measured = build_kernel(workload, candidate, target)
    with target:
        tensors = kernels.kernel.kernel_tensors(tvm, workload, candidate)
    raw = tvm.IRModule({"kernel": tvm.te.create_prim_func(tensors).with_attr("global_symbol", "kernel")})
    scheduled = schedule_module(raw, target)
    assert scheduled["kernel"].attrs.get("tirx.is_scheduled") and "T.parallel" in scheduled["kernel"].script()
    tvm.ir.assert_structural_equal(scheduled["kernel"].body, measured.module["kernel"].body)


def test_every_lazily_exported_name_resolves():
    import layoutopt.tvm

    missing = [name for name in layoutopt.tvm.__all__ if getattr(layoutopt.tvm, name, None) is None]
    assert not missing
    with pytest.raises(AttributeError, match="no attribute 'nonexistent'"):
        _ = layoutopt.tvm.nonexistent


@pytest.mark.parametrize(
    ("mcpu", "width", "block", "reg_n"),
    [("znver4", 56, 16, 14), ("znver4", 56, 32, 8), ("znver4", 56, 64, 4), ("znver4", 14, 64, 4),
     ("znver4", 7, 64, 4), ("haswell", 56, 16, 6), ("haswell", 28, 8, 14), ("haswell", 7, 16, 4),
     ("haswell", 7, 32, 2), ("haswell", 14, 64, 1), ("znver4", 28, None, 14), ("znver4", 28, 32, 7),
     # the fewest tiles, the columns split evenly over them: a partial last tile rather than one column
     ("znver4", 17, 16, 9), ("znver4", 73, 16, 13), ("znver4", 71, 16, 12), ("znver4", 17, 64, 4),
     ("znver4", 5, 16, 5), ("znver4", 1, 16, 1)],
)
def test_register_tile_fits_the_accumulators_in_the_target_registers(mcpu, width, block, reg_n):
    # AVX-512 has 32 zmm of 16 floats, AVX2 16 ymm of 8: a 64-wide block takes 4 zmm per column
    target = {"kind": "llvm", "mcpu": mcpu}
    assert register_tile(width, block, target) == reg_n
    lanes, registers = kernels.vector_registers(target)
    per_column = -(-block // lanes) if block else 1
    accumulators = reg_n * per_column
    # beside one weight row and a broadcast, and never more than 16 accumulators (unless one column is)
    assert accumulators <= max(per_column, min(16, registers - per_column - 1))


def test_measured_kernel_uses_the_register_tile_of_the_build(target):
    workload = conv([1, 16, 14, 14], [64, 16, 3, 3])
    default = build_kernel(workload, {"in": "NCHW16c", "out": "NCHW64c"}, target).module.script()
    tile = register_tile(14, 64, target)
    assert tile < 7  # not AutoTVM's widest divisor: 7 x 64 floats do not fit in the registers
    knob = build_kernel(workload, {"in": "NCHW16c", "out": "NCHW64c", "reg_n": tile}, target).module.script()
    # the same loops; only the candidate annotation on the conv block names the knob
    assert without_annotations(default) == without_annotations(knob)


def without_annotations(script: str) -> str:
    return "\n".join(line for line in script.splitlines() if "T.sblock_attr" not in line)


@pytest.mark.parametrize("epilogue", [["bias"], ["bias", "relu"], ["bias", "add", "relu"]])
@pytest.mark.parametrize(
    "candidate",
    [{"in": "NCHW8c", "out": "NCHW16c"}, {"in": "NCHW16c", "out": "NCHW32c"}, {"in": "NCHW", "out": "NCHW"}],
)
def test_a_conv_with_its_fused_epilogue_matches_numpy(epilogue, candidate, target):
    workload = {**conv([1, 16, 7, 7], [32, 16, 3, 3]), "epilogue": epilogue}
    kernel = build_kernel(workload, candidate, target)
    # data, weight, then one operand per bias / add, each in the output's layout
    assert len(kernel.arg_shapes) == 3 + len([s for s in epilogue if s != "relu"])
    assert check_kernel(kernel, target=target) < 1e-5
    inputs = kernel.logical_inputs()
    plain = kernels.reference_output(conv([1, 16, 7, 7], [32, 16, 3, 3]), inputs[:2])
    fused = kernels.reference_output(workload, inputs)
    assert not np.allclose(plain, fused)  # the epilogue really is part of the reference


#: one target per vector ISA: the schedules depend on the target compiled for, never on the host, so
#: tests that only build (and do not run) kernels check both on any host
AVX512, AVX2 = {"kind": "llvm", "mcpu": "znver4"}, {"kind": "llvm", "mcpu": "znver3"}


@pytest.mark.parametrize(("isa", "one_vector", "wider"), [(AVX512, "NCHW16c", "NCHW64c"),
                                                          (AVX2, "NCHW8c", "NCHW16c")])
def test_a_one_vector_output_block_finishes_its_epilogue_in_the_register_tile(isa, one_vector, wider):
    # the build's rule (kernels.conv2d.schedule_nchwc): in the tile when the output block is one
    # vector register (16 floats on AVX-512, 8 on AVX2), after the conv for wider blocks
    workload = {**conv([1, 16, 14, 14], [64, 16, 3, 3]), "epilogue": ["bias", "add", "relu"]}
    in_tile = build_kernel(workload, {"in": "NCHW16c", "out": one_vector}, isa).module.script()
    after = build_kernel(workload, {"in": "NCHW16c", "out": wider}, isa).module.script()
    assert 'scope="local"' in in_tile and 'scope="local"' not in after


def test_vector_registers_and_isa_come_from_the_target_not_the_host():
    assert kernels.vector_registers(AVX512) == (16, 32) and kernels.isa_name(AVX512) == "AVX-512"
    assert kernels.vector_registers(AVX2) == (8, 16) and kernels.isa_name(AVX2) == "AVX2"
    arm = {"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "cortex-a72"}
    assert kernels.vector_registers(arm) == (4, 32) and kernels.isa_name(arm) == "NEON"


def test_an_unknown_epilogue_step_is_a_clear_error():
    with pytest.raises(ProblemError, match=r"epilogue step 2 'swish': unknown step"):
        validate_workload({**conv([1, 8, 8, 8], [8, 8, 3, 3]), "epilogue": ["bias", "swish"]})
    # no epilogue: no key, so plain convolutions keep their cache keys
    assert "epilogue" not in validate_workload({**conv([1, 8, 8, 8], [8, 8, 3, 3]), "epilogue": []})


@pytest.mark.parametrize("epilogue", [[], ["bias", "add", "relu"]])
@pytest.mark.parametrize(("isa", "candidate"), [(AVX512, {"in": "NCHW16c", "out": "NCHW16c"}),
                                                (AVX512, {"in": "NCHW8c", "out": "NCHW64c"}),
                                                (AVX2, {"in": "NCHW8c", "out": "NCHW8c"}),
                                                (AVX2, {"in": "NCHW16c", "out": "NCHW16c"})])
def test_a_prime_width_gets_a_partial_register_tile_and_stays_correct(epilogue, isa, candidate, target):
    workload = {**conv([1, 16, 17, 17], [64, 16, 3, 3]), "epilogue": epilogue}
    tile = register_tile(17, kernels.layout_block(candidate["out"]), isa)
    assert tile > 1
    assert f"T.unroll({tile})" in build_kernel(workload, candidate, isa).module.script()
    # and the same partial tile computes the right numbers (on the host's own ISA, which can run it)
    host = {**candidate, "reg_n": tile}
    assert check_kernel(build_kernel(workload, host, target), target=target) < 1e-5

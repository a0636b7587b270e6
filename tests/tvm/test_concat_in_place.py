"""Concats done in place: their producers write into the output at their offsets, the copy removed,
the numbers unchanged; a concat that cannot be done so stays a kernel and computes the same."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tvm")

from layoutopt.tvm import apply_assignment, extract_layout_graph, models, prepare
from layoutopt.tvm.building.baselines import fixed_layout_assignment
from layoutopt.tvm.building.builder import compile_module
from layoutopt.tvm.building.storage import concat_fits_in_place

pytestmark = pytest.mark.tvm


def _module(shape, body):
    """A Relax module whose ``main`` takes one float32 tensor ``x`` of ``shape`` and returns what
    ``body(emit, op, x)`` returns (``emit`` binds an expression in ``main``'s dataflow block)."""
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(body(bb.emit, relax.op, x))
        bb.emit_func_output(out)
    return bb.get()


def _read_again(emit, op, x):  # an input also read after the concat keeps its value there
    a = emit(op.nn.relu(x))
    c = emit(op.concat([a, emit(op.exp(x))], 1))
    return emit(op.add(emit(op.nn.relu(c)), emit(op.concat([emit(op.negative(a)), a], 1))))


def _read_again_np(x):
    a = np.maximum(x, 0)
    return np.concatenate([a, np.exp(x)], 1) + np.concatenate([-a, a], 1)


def _parameter(emit, op, x):  # the function's own input cannot move
    return emit(op.nn.relu(emit(op.concat([x, emit(op.exp(x))], 1))))


def _parameter_np(x):
    return np.maximum(np.concatenate([x, np.exp(x)], 1), 0)


def _returned(emit, op, x):  # the function's result is not in the plan
    return emit(op.concat([emit(op.nn.relu(x)), emit(op.exp(x))], 1))


def _returned_np(x):
    return np.concatenate([np.maximum(x, 0), np.exp(x)], 1)


def _twice(emit, op, x):  # one tensor wanted at two offsets
    a = emit(op.exp(x))
    return emit(op.nn.relu(emit(op.concat([a, a], 1))))


def _twice_np(x):
    return np.concatenate([np.exp(x)] * 2, 1)


def _nested(emit, op, x):  # the inner concat goes in place, the outer one (of a moved tensor) stays
    inner = emit(op.concat([emit(op.nn.relu(x)), emit(op.exp(x))], 1))
    return emit(op.nn.relu(emit(op.concat([inner, emit(op.negative(x))], 1))))


def _nested_np(x):
    return np.maximum(np.concatenate([np.maximum(x, 0), np.exp(x), -x], 1), 0)


def _two(emit, op, x):  # two computed inputs: what fits depends on the shape
    return emit(op.nn.relu(emit(op.concat([emit(op.exp(x)), emit(op.negative(x))], 1))))


def _two_np(x):
    return np.maximum(np.concatenate([np.exp(x), -x], 1), 0)


def _rows(emit, op, x):  # three inputs, along the third axis of a 1x1xHxW tensor
    y = emit(op.reshape(x, (1, 1, 6, 8)))
    return emit(op.nn.relu(emit(op.concat([emit(op.exp(y)), emit(op.negative(y)), emit(op.sigmoid(y))], 2))))


def _rows_np(x):
    y = x.reshape(1, 1, 6, 8)
    return np.maximum(np.concatenate([np.exp(y), -y, 1 / (1 + np.exp(-y))], 2), 0)


# name: (input shape, Relax body, its numpy twin, how many concats go in place)
CASES = {
    "read_again": ((1, 4, 6, 8), _read_again, _read_again_np, 1),  # the second concat reads a moved input
    "parameter_input": ((1, 4, 6, 8), _parameter, _parameter_np, 0),
    "returned": ((1, 4, 6, 8), _returned, _returned_np, 0),
    "same_tensor_twice": ((1, 4, 6, 8), _twice, _twice_np, 0),
    "nested": ((1, 4, 6, 8), _nested, _nested_np, 1),
    "one_image": ((1, 4, 6, 8), _two, _two_np, 1),
    "two_images": ((2, 4, 6, 8), _two, _two_np, 0),  # each input is two ranges of the output
    # 3x5x5 floats: the second input would start 300 bytes in, off the kernels' 64-byte alignment
    "unaligned": ((1, 3, 5, 5), _two, _two_np, 0),
    "rows": ((1, 48), _rows, _rows_np, 1),
}


@pytest.mark.parametrize("name", CASES)
def test_a_concat_goes_in_place_only_where_it_can_and_the_numbers_match_numpy_and_the_copying_build(name):
    import tvm

    shape, body, numpy_twin, in_place = CASES[name]
    mod = _module(shape, body)
    x = np.random.default_rng(0).standard_normal(shape).astype("float32")
    outputs = {}
    for enabled in (True, False):
        compiled = compile_module(mod, "llvm", in_place_concat=enabled)
        assert compiled.concats_in_place == (in_place if enabled else 0)
        vm = tvm.relax.VirtualMachine(compiled.executable, tvm.cpu())
        outputs[enabled] = vm["main"](tvm.runtime.tensor(x)).numpy()
    np.testing.assert_allclose(outputs[True], numpy_twin(x.astype("float64")), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(outputs[True], outputs[False])


@pytest.mark.parametrize("layout", ["NCHW", "NCHW8c"])
def test_a_blocked_channel_concat_goes_in_place_and_moves_fewer_bytes(layout):
    import tvm

    mod = prepare(models.concat3((8, 16, 8), in_channels=8, size=8))
    graph = extract_layout_graph(mod, [8])
    rewritten = apply_assignment(mod, graph, fixed_layout_assignment(graph, layout))
    x = np.random.default_rng(1).standard_normal((1, 8, 8, 8)).astype("float32")
    builds = {on: compile_module(rewritten, "llvm", in_place_concat=on) for on in (True, False)}
    assert builds[True].concats_in_place == 1 and builds[False].concats_in_place == 0
    # the concat read 32 channels and wrote 32, 8x8 floats each
    assert builds[False].bytes_moved - builds[True].bytes_moved == 2 * 32 * 8 * 8 * 4
    outputs = [tvm.relax.VirtualMachine(builds[on].executable, tvm.cpu())["main"](tvm.runtime.tensor(x))
               .numpy() for on in (True, False)]
    np.testing.assert_array_equal(outputs[0], outputs[1])


def test_inputs_fit_in_place_only_where_every_axis_before_the_concats_has_extent_one():
    assert concat_fits_in_place([(1, 2, 4, 4, 8), (1, 1, 4, 4, 8)], 1)
    assert concat_fits_in_place([(1, 1, 3, 4), (1, 1, 5, 4)], 2)
    assert not concat_fits_in_place([(1, 2, 3, 4), (1, 2, 5, 4)], 2)
    assert not concat_fits_in_place([(2, 2, 4), (2, 1, 4)], 1)
    assert not concat_fits_in_place([(1, 2, 4)], 1)  # one input: nothing to place


def test_a_tune_builds_its_concat_in_place_checks_it_and_says_so(tmp_path):
    from layoutopt.tvm import tune_and_build

    result = tune_and_build(models.concat3((8, 16, 8), in_channels=8, size=8), cache=tmp_path / "costs.jsonl",
                            guard=False, baselines=(), calibrate=0, profile=False, repeat=2)
    assert result.tuned.concats_in_place == 1
    assert result.tuned.max_relative_error < 1e-4  # checked against the untouched model
    assert "1 concats in place" in result.summary()

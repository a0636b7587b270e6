"""Grouped convolutions in blocked layouts (RegNet, ResNeXt): the direct family's blocked kernel with a
group offset, on random graphs against TVM's own build of the untouched model. (Odd shapes against
numpy: ``test_kernels.py``'s ``grouped_*`` workloads.)"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tvm")  # the tvm extra; CI installs it

from hypothesis import given, settings
from hypothesis import strategies as st

from layoutopt.tvm import apply_assignment, build, extract_layout_graph, prepare, resolve_target
from layoutopt.tvm._tvm import import_tvm
from layoutopt.tvm.evaluate.check import relative_error
from layoutopt.tvm.evaluate.timing import random_inputs, run
from layoutopt.tvm.kernels.common import block_names

pytestmark = pytest.mark.tvm


@settings(max_examples=4, deadline=None)
@given(st.data())
def test_random_graphs_of_grouped_convs_compute_what_tvm_computes(data):
    tvm = import_tvm()
    relax = tvm.relax
    rng = np.random.default_rng(data.draw(st.integers(0, 1000), label="seed"))
    width = data.draw(st.sampled_from([8, 16]), label="channels per group")
    groups = data.draw(st.sampled_from([2, 3, 4]), label="groups")
    channels = width * groups
    size = (data.draw(st.integers(5, 11), label="height"), data.draw(st.integers(5, 11), label="width"))
    layers = data.draw(st.lists(st.tuples(st.sampled_from([1, 3]), st.sampled_from([1, 2]), st.booleans()),
                                min_size=1, max_size=3), label="layers: kernel, stride, residual")
    x = relax.Var("x", relax.TensorType((1, channels, *size), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            y = x
            for kernel, stride, residual in layers:
                weight = rng.standard_normal((channels, width, kernel, kernel)).astype("float32") / width
                bias = relax.const(rng.standard_normal((1, channels, 1, 1)).astype("float32") * 0.1)
                out = bb.emit(relax.op.nn.conv2d(y, relax.const(weight), strides=stride, padding=kernel // 2,
                                                 groups=groups))
                out = bb.emit(relax.op.nn.relu(bb.emit(relax.op.add(out, bias))))
                y = bb.emit(relax.op.add(out, y)) if residual and stride == 1 else out
            output = bb.emit_output(y)
        bb.emit_func_output(output)
    mod = bb.get()
    target = resolve_target(None)
    inputs = random_inputs(mod, seed=1)
    expected = run(tvm.compile(mod, target=target), inputs)
    graph = extract_layout_graph(prepare(mod), {"blocks": [4, 8, 16]}, prepared=True)
    choices = {node.name: node.choices for node in graph.layout_nodes()}
    convs = [node for node in graph.layout_nodes() if node.op == "relax.nn.conv2d"]
    assert len(convs) == len(layers)
    assert all(any(c.in_layout != "NCHW" for c in node.choices) for node in convs)  # blocked offered
    assignment = {name: data.draw(st.integers(0, len(found) - 1), label=name)
                  for name, found in choices.items()}
    built = build(apply_assignment(graph.mod, graph, assignment), target)
    assert relative_error(run(built, inputs), expected) < 1e-4


def test_a_grouped_conv_in_a_blocked_layout_runs_the_blocked_kernel():
    """Not TVM's NCHW group conv behind layout transforms: the build's conv is the NCHWc kernel."""
    tvm = import_tvm()
    from layoutopt.tvm import models
    from layoutopt.tvm.building.baselines import fixed_layout_assignment

    mod = prepare(models.chain((32, 32), in_channels=32, size=8, groups=4))
    graph = extract_layout_graph(mod, {"blocks": [8]}, prepared=True)
    applied = apply_assignment(mod, graph, fixed_layout_assignment(graph, "NCHW8c"))
    blocks = [block_names(tvm.s_tir.Schedule(func)) for func in applied.functions.values()
              if isinstance(func, tvm.tirx.PrimFunc)]
    assert any("conv2d_NCHWc" in names for names in blocks)
    assert not any("group_conv2d_nchw" in names for names in blocks)  # TVM's NCHW group conv is gone

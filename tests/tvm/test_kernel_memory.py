"""The memory figure of every kernel family (:meth:`KernelFamily.memory`): its resident bytes are those
of the arrays the family itself packs (``pack_weight``, ``pack_inputs``), its workspace what the
scheduled kernel allocates."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tvm")  # the tvm extra; CI installs it

from test_families import CASES  # tests/tvm is on sys.path

from layoutopt.tvm import kernels
from layoutopt.tvm._tvm import import_tvm
from layoutopt.tvm.kernels import FAMILIES
from layoutopt.tvm.kernels.common import allocated_bytes
from layoutopt.tvm.kernels.kernel import build_kernel

pytestmark = pytest.mark.tvm

AVX512 = {"kind": "llvm", "mcpu": "skylake-avx512"}
WINOGRAD = FAMILIES["conv2d", "winograd"]


def _packed_constants(family, workload, candidate) -> int:
    """Bytes of the constants the family's own packing produces from float32 logical inputs."""
    inputs = [np.ones(shape, np.float32) for shape in family.logical_shapes(workload)]
    packed = family.pack_inputs(workload, candidate, inputs)
    names = [p.op.name for p in family.placeholders(import_tvm(), workload, candidate)]
    resident = {p.op.name for p in family.resident_inputs(import_tvm(), workload, candidate)}
    assert len(names) == len(packed)
    return sum(array.nbytes for name, array in zip(names, packed, strict=True) if name in resident)


@pytest.mark.parametrize("case", [name for name in CASES if name != "transform"])
def test_resident_bytes_are_the_packed_arrays(case):
    family, workload, candidate, _ = CASES[case]
    workspace = family.workspace(workload, candidate, AVX512)
    assert workspace == allocated_bytes(build_kernel(workload, candidate, AVX512).module)
    resident = family.memory(workload, candidate, AVX512) - workspace
    assert resident == _packed_constants(family, workload, candidate)
    weight_families = ("conv2d", "conv2d_transpose", "dense")
    assert (resident > 0) == (workload["op"] in (*weight_families, "onnx_resize"))


def test_padding_and_transformed_weights_are_counted():
    wl = kernels.validate_workload({"op": "conv2d", "data": [1, 16, 8, 8], "kernel": [16, 16, 3, 3],
                                    "strides": [1, 1], "padding": [1, 1, 1, 1], "dilation": [1, 1]})
    weight = 16 * 16 * 9 * 4

    def resident(candidate):
        family = kernels.family(wl, candidate)
        return family.memory(wl, candidate, AVX512) - family.workspace(wl, candidate, AVX512)

    assert resident({"in": "NCHW16c", "out": "NCHW16c"}) == weight
    for tile, ratio in ((2, 16 / 9), (4, 4.0), (6, 64 / 9)):
        candidate = {"in": "NCHW16c", "out": "NCHW16c", "algorithm": "winograd", "tile": tile}
        assert resident(candidate) == pytest.approx(ratio * weight)
    # 12 output channels padded to a block of 8: 16 filters stored
    padded = {**wl, "kernel": [12, 16, 3, 3]}
    family = kernels.family(padded, {"in": "NCHW16c", "out": "NCHW", "oc_block": 8})
    candidate = {"in": "NCHW16c", "out": "NCHW", "oc_block": 8}
    assert family.memory(padded, candidate, AVX512) - family.workspace(padded, candidate, AVX512) == weight
    # a dense layer of 1000 features in blocks of 16 stores 1008
    dense = kernels.validate_workload({"op": "dense", "data": [1, 64], "weight": [1000, 64]})
    for layout, features in (("NK", 1000), ("NK16n", 1008)):
        candidate = {"in": "NC", "out": "NC", "weight": layout}
        figure = FAMILIES["dense", "direct"].memory(dense, candidate, AVX512)
        assert figure - FAMILIES["dense", "direct"].workspace(dense, candidate, AVX512) == features * 64 * 4


def test_workspace_follows_the_schedule():
    wl = kernels.validate_workload({"op": "conv2d", "data": [1, 64, 28, 28], "kernel": [64, 64, 3, 3],
                                    "strides": [1, 1], "padding": [1, 1, 1, 1], "dilation": [1, 1]})
    whole = {"in": "NCHW16c", "out": "NCHW16c", "algorithm": "winograd", "tile": 4}
    grouped = {**whole, "order": "tiles"}  # transforms a group of tile rows at a time
    # the whole transformed input (6 x 6 x 49 tiles x 64 channels) at least, for the default order
    assert WINOGRAD.workspace(wl, whole, AVX512) >= 36 * 49 * 64 * 4
    assert WINOGRAD.workspace(wl, grouped, AVX512) < WINOGRAD.workspace(wl, whole, AVX512) / 4


def test_a_transform_holds_both_copies():
    family = FAMILIES["layout_transform", "direct"]
    wl = kernels.layout_transform_workload([1, 24, 5, 5], "NCHW8c", "NCHW")
    source = family.pack_inputs(wl, {}, [np.ones((1, 24, 5, 5), np.float32)])[0]
    output = family.reference(wl, [np.ones((1, 24, 5, 5), np.float32)])
    assert family.memory(wl, {}) == source.nbytes + output.nbytes

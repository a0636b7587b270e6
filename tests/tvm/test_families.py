"""The kernel family interface: every family implements it, its reference matches its compute, and a
new family plugs in by registering alone."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tvm")  # the tvm extra; CI installs it

from layoutopt import ProblemError
from layoutopt.tvm import kernels
from layoutopt.tvm._tvm import import_tvm, resolve_target
from layoutopt.tvm.kernels import FAMILIES, KernelFamily
from layoutopt.tvm.kernels.common import block_names
from layoutopt.tvm.kernels.convolution import Conv2dFamily
from layoutopt.tvm.kernels.module import family_of_function
from layoutopt.tvm.kernels.padded import PaddedKernels
from layoutopt.tvm.kernels.workload import EPILOGUE_STEPS

pytestmark = pytest.mark.tvm

DIRECT, DEPTHWISE, WINOGRAD, GEMM = (FAMILIES["conv2d", algorithm]
                                     for algorithm in ("direct", "depthwise", "winograd", "gemm"))
DENSE, TRANSFORM = FAMILIES["dense", "direct"], FAMILIES["layout_transform", "direct"]
TRANSPOSED, RESIZE = FAMILIES["conv2d_transpose", "direct"], FAMILIES["resize2d", "direct"]
ONNX_RESIZE = FAMILIES["onnx_resize", "direct"]
TRANSPOSED_GEMM = FAMILIES["conv2d_transpose", "gemm"]


def conv(data, kernel, padding=1, strides=1, groups=1, epilogue=("bias", "add", "relu")):
    return kernels.validate_workload({
        "op": "conv2d", "data": list(data), "kernel": list(kernel), "strides": [strides] * 2,
        "padding": [padding] * 4, "dilation": [1, 1], "groups": groups, "epilogue": list(epilogue)})


def transposed(data, kernel, strides=2, padding=0, output_padding=0, groups=1, epilogue=("bias", "relu")):
    return kernels.validate_workload({
        "op": "conv2d_transpose", "data": list(data), "kernel": list(kernel), "strides": [strides] * 2,
        "padding": [padding] * 4, "output_padding": [output_padding] * 2, "groups": groups,
        "epilogue": list(epilogue)})


def resize(data, size, method="linear", mode="half_pixel", rounding=""):
    return kernels.validate_workload({
        "op": "resize2d", "data": list(data), "size": list(size), "method": method,
        "coordinate_transformation_mode": mode, "rounding_method": rounding})


BLOCKS = [8, 16]
BOTH_ORDERS = {"blocks": BLOCKS, "orders": ["oc", "rows"]}

#: (family, workload, candidate, options of the family's candidates that offer it): a small workload
#: of each kind each family computes
CASES = {
    "direct-blocked": (DIRECT, conv([1, 16, 7, 9], [32, 16, 3, 3]), {"in": "NCHW8c", "out": "NCHW16c"},
                       {"blocks": BLOCKS}),
    "direct-rows": (DIRECT, conv([1, 16, 6, 6], [16, 16, 1, 1], padding=0),
                    {"in": "NCHW16c", "out": "NCHW8c", "order": "rows"}, BOTH_ORDERS),
    "direct-nchw": (DIRECT, conv([1, 8, 7, 7], [12, 8, 3, 3], strides=2), {"in": "NCHW", "out": "NCHW"},
                    {"blocks": BLOCKS}),
    "direct-depthwise": (DIRECT, conv([1, 16, 8, 8], [16, 1, 3, 3], groups=16),
                         {"in": "NCHW", "out": "NCHW"}, {"blocks": BLOCKS}),
    "depthwise": (DEPTHWISE, conv([1, 16, 9, 7], [16, 1, 5, 5], padding=2, strides=2, groups=16,
                                  epilogue=("bias", ["add", 3.0], ["clip", 0.0, 6.0], ["divide", 6.0],
                                            ["multiply", "@1"], "add")),
                  {"in": "NCHW8c", "out": "NCHW8c", "algorithm": "depthwise"}, {"blocks": BLOCKS}),
    "direct-grouped": (DIRECT, conv([1, 16, 8, 8], [8, 4, 3, 3], groups=4, epilogue=()),
                       {"in": "NCHW", "out": "NCHW"}, {"blocks": BLOCKS}),
    "winograd": (WINOGRAD, conv([1, 16, 9, 7], [16, 16, 3, 3]),
                 {"in": "NCHW8c", "out": "NCHW16c", "algorithm": "winograd", "tile": 2}, {"blocks": BLOCKS}),
    "gemm": (GEMM, conv([1, 16, 6, 10], [32, 16, 1, 1], padding=0, strides=2),
             {"in": "NCHW16c", "out": "NCHW8c", "algorithm": "gemm", "order": "rows"}, BOTH_ORDERS),
    "padded-direct": (PaddedKernels(DIRECT), conv([1, 16, 8, 8], [12, 16, 3, 3], epilogue=("bias", "relu")),
                      {"in": "NCHW16c", "out": "NCHW", "oc_block": 8}, {"blocks": BLOCKS}),
    "padded-winograd": (PaddedKernels(WINOGRAD), conv([1, 16, 8, 8], [12, 16, 3, 3]),
                        {"in": "NCHW8c", "out": "NCHW", "oc_block": 16, "algorithm": "winograd", "tile": 4},
                        {"blocks": BLOCKS}),
    "dense": (DENSE, kernels.validate_workload({"op": "dense", "data": [2, 32], "weight": [24, 32]}),
              {"in": "NC", "out": "NC", "weight": "NK"}, {}),
    "dense-packed": (DENSE, kernels.validate_workload({"op": "dense", "data": [1, 32], "weight": [24, 32]}),
                     {"in": "NC", "out": "NC", "weight": "NK8n"}, {}),
    # a prime number of rows (a tile of one row) and features a block pads (13 -> 16)
    "dense-padded": (DENSE, kernels.validate_workload({"op": "dense", "data": [7, 19], "weight": [13, 19]}),
                     {"in": "NC", "out": "NC", "weight": "NK16n"}, {}),
    "dense-row-tiles": (DENSE, kernels.validate_workload({"op": "dense", "data": [12, 24],
                                                          "weight": [40, 24]}),
                        {"in": "NC", "out": "NC", "weight": "NK8n"}, {}),
    "transform": (TRANSFORM, kernels.layout_transform_workload([1, 24, 5, 5], "NCHW8c", "NCHW"), {}, {}),
    "transposed-blocked": (TRANSPOSED, transposed([1, 16, 5, 7], [16, 8, 3, 3], padding=1, output_padding=1),
                           {"in": "NCHW16c", "out": "NCHW8c"}, {"blocks": BLOCKS}),
    "transposed-padded": (TRANSPOSED, transposed([1, 8, 7, 5], [8, 1, 2, 2]),
                          {"in": "NCHW8c", "out": "NCHW", "oc_block": 8}, {"blocks": BLOCKS}),
    "transposed-gemm": (TRANSPOSED_GEMM, transposed([1, 8, 7, 5], [8, 16, 3, 3], padding=1, output_padding=1,
                                                    epilogue=("bias", "add", "relu")),
                        {"in": "NCHW8c", "out": "NCHW16c", "algorithm": "gemm"}, {"blocks": BLOCKS}),
    "transposed-depthwise": (TRANSPOSED, transposed([1, 16, 5, 5], [16, 1, 4, 4], padding=1, groups=16),
                             {"in": "NCHW8c", "out": "NCHW8c"}, {"blocks": BLOCKS}),
    "resize-nearest": (RESIZE, resize([1, 16, 5, 7], [10, 14], "nearest_neighbor", "asymmetric", "floor"),
                       {"in": "NCHW8c", "out": "NCHW8c"}, {"blocks": BLOCKS}),
    "resize-linear": (RESIZE, resize([1, 16, 7, 5], [11, 13]), {"in": "NCHW16c", "out": "NCHW16c"},
                      {"blocks": BLOCKS}),
    "onnx-resize-cubic": (ONNX_RESIZE, kernels.validate_workload(
        {"op": "onnx_resize", "data": [1, 16, 5, 7], "size": [7, 10], "mode": "cubic", "scale": [1.5, 1.5]}),
        {"in": "NCHW8c", "out": "NCHW8c"}, {"blocks": BLOCKS}),
}


def test_every_registered_family_implements_the_interface():
    for key, family in FAMILIES.items():
        assert isinstance(family, KernelFamily) and family.key == key
        assert not type(family).__abstractmethods__
        assert set(family.epilogue) <= set(EPILOGUE_STEPS)
    covered = {family.key for family, *_ in CASES.values()}
    assert covered == set(FAMILIES)  # the cases below run every registered family
    # a function is scheduled by the one family whose main block it holds
    blocks = [block for family in FAMILIES.values() for block in family.main_blocks]
    assert len(blocks) == len(set(blocks))


def test_a_family_missing_a_part_cannot_be_made():
    class Incomplete(Conv2dFamily):
        algorithm = "incomplete"

        def candidates(self, workload, **options):
            return []

    with pytest.raises(TypeError, match="abstract"):
        Incomplete()


def run_through_the_interface(family: KernelFamily, workload, candidate, target):
    """Build ``candidate`` by the family's own placeholders, output (compute + epilogue) and
    schedule; run it on packed random inputs and give ``(output, reference)`` in logical form."""
    tvm = import_tvm()
    with target:
        inputs = family.placeholders(tvm, workload, candidate)
        output = family.output(tvm, inputs, workload, candidate)
        func = tvm.te.create_prim_func([*inputs, output])
        found = family_of_function(tvm.s_tir.Schedule(func), block_names(tvm.s_tir.Schedule(func)))
        sch = family.schedule(func, target)
    # a build schedules the function by this family (padded: by its inner one; without main blocks:
    # by the generic schedule)
    expected = family.inner if isinstance(family, PaddedKernels) else family if family.main_blocks else None
    assert found is expected
    executable = tvm.compile(tvm.IRModule({"kernel": sch.mod["main"].with_attr("global_symbol", "kernel")}),
                             target=target)
    rng = np.random.default_rng(0)
    logical = [rng.uniform(-1, 1, size=shape).astype(workload["dtype"])
               for shape in family.logical_shapes(workload)]
    args = [tvm.runtime.tensor(array) for array in family.pack_inputs(workload, candidate, logical)]
    args.append(tvm.runtime.tensor(np.zeros([int(d) for d in output.shape], workload["dtype"])))
    executable.mod["kernel"](*args)
    return family.unpack_output(workload, candidate, args[-1].numpy()), family.reference(workload, logical)


@pytest.mark.parametrize("case", list(CASES))
def test_each_familys_compute_matches_its_numpy_reference(case):
    family, workload, candidate, options = CASES[case]
    assert family.applies(workload) and candidate in family.candidates(workload, **options)
    family.validate_candidate(workload, candidate)
    output, expected = run_through_the_interface(family, workload, candidate, resolve_target(None))
    assert output.shape == expected.shape
    np.testing.assert_allclose(output, expected, rtol=1e-4, atol=1e-4 * max(1.0, np.abs(expected).max()))


# -- a new family: one class and one entry in the registry ----------------------------------------


class NchwConv(Conv2dFamily):
    """A plain NCHW conv2d written as one TE compute of its own: the least a new family can be."""

    algorithm = "toy"
    main_blocks = ("toy_conv",)

    def __init__(self):
        self.scheduled = 0

    def applies(self, workload):
        return super().applies(workload) and workload["groups"] == 1 and workload["strides"] == [1, 1]

    def candidates(self, workload, **options):
        return [{"in": "NCHW", "out": "NCHW", "algorithm": "toy"}] if self.applies(workload) else []

    def validate_candidate(self, workload, candidate):
        if candidate != {"in": "NCHW", "out": "NCHW", "algorithm": "toy"} or not self.applies(workload):
            raise ProblemError(f"toy candidate {candidate!r}: not a toy kernel of {workload!r}")

    def weight_shape(self, workload, candidate):
        return tuple(workload["kernel"])

    def pack_weight(self, workload, candidate, weight):
        return weight

    def compute(self, tvm, inputs, workload, candidate):
        te = tvm.te
        data, weight = inputs[:2]
        top, left, bottom, right = workload["padding"]
        padded = tvm.topi.nn.pad(data, [0, 0, top, left], [0, 0, bottom, right])
        _, out_channels, out_h, out_w = kernels.conv2d_output_shape(workload)
        c, y, x = (te.reduce_axis((0, extent), name=name) for extent, name in
                   zip(workload["kernel"][1:], "cyx", strict=True))
        def output(n, o, h, w):
            return te.sum(padded[n, c, h + y, w + x] * weight[o, c, y, x], axis=[c, y, x])

        return te.compute((workload["data"][0], out_channels, out_h, out_w), output, name="toy_conv")

    def schedule(self, func, target):
        self.scheduled += 1
        sch = import_tvm().s_tir.Schedule(func)
        sch.parallel(sch.get_loops(sch.get_sblock("toy_conv"))[0])
        return sch


def test_a_new_family_plugs_in_by_registering_alone(monkeypatch):
    toy = NchwConv()
    monkeypatch.setitem(FAMILIES, ("conv2d", "toy"), toy)
    workload = conv([1, 8, 6, 6], [8, 8, 3, 3])
    candidate = {"in": "NCHW", "out": "NCHW", "algorithm": "toy"}
    assert candidate in kernels.conv2d_candidates(workload, blocks=[8], algorithms=["direct", "toy"])
    assert kernels.family(workload, candidate) is toy
    kernel = kernels.build_kernel(workload, candidate, target=resolve_target(None))
    assert toy.scheduled == 1  # the build schedules it by its own schedule
    assert kernels.check_kernel(kernel, target=resolve_target(None)) < 1e-4  # with its fused epilogue

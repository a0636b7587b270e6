"""Measurable kernels of the conv2d algorithm families (``candidate["algorithm"]``): Winograd, 1x1 GEMM.

:func:`build_kernel` is :func:`layoutopt.tvm.kernels.build_kernel` for a candidate with an
``"algorithm"`` key: the family's compute with the workload's fused epilogue, its schedule, and a
:class:`~layoutopt.tvm.kernels.Kernel` whose inputs are packed with the family's weight transform, so
that :func:`~layoutopt.tvm.kernels.check_kernel` checks it against numpy.

Example::

    wl = {"op": "conv2d", "data": [1, 16, 8, 8], "kernel": [16, 16, 3, 3], "strides": [1, 1],
          "padding": [1, 1, 1, 1], "dilation": [1, 1], "groups": 1, "dtype": "float32"}
    kernel = build_kernel(wl, {"in": "NCHW16c", "out": "NCHW16c", "algorithm": "winograd", "tile": 2})
    check_kernel(kernel)       # ~1e-7
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from ..errors import ProblemError
from . import kernels, kernels_gemm, kernels_winograd
from ._tvm import import_tvm, resolve_target

__all__ = ["FAMILIES", "AlgorithmKernel", "build_kernel", "family"]

#: ``candidate["algorithm"]`` -> the module implementing that conv2d kernel family
FAMILIES: dict[str, ModuleType] = {
    kernels_winograd.ALGORITHM: kernels_winograd,
    kernels_gemm.ALGORITHM: kernels_gemm,
}


def family(candidate: dict[str, Any]) -> ModuleType:
    """The family module of an algorithm candidate; ProblemError if its algorithm is unknown."""
    found = FAMILIES.get(candidate.get("algorithm")) if isinstance(candidate, dict) else None
    if found is None:
        raise ProblemError(f"conv2d candidate {candidate!r}: unknown algorithm (known: {sorted(FAMILIES)})")
    return found


@dataclass
class AlgorithmKernel(kernels.Kernel):
    """A :class:`~layoutopt.tvm.kernels.Kernel` whose weight goes through its family's
    ``weight_transform``."""

    def pack_inputs(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        data, weight, *extra = inputs
        cand = self.candidate
        return [kernels.pack_data(data, cand["in"]), family(cand).weight_transform(weight, cand),
                *(kernels.pack_data(x, cand["out"]) for x in extra)]


def build_kernel(workload: dict[str, Any], candidate: dict[str, Any], target: Any = None) -> AlgorithmKernel:
    """Build the scheduled (not compiled) kernel of an algorithm candidate, with the workload's
    fused epilogue (bias, residual add, relu).

    Example::

        kernel = build_kernel(wl, {"in": "NCHW16c", "out": "NCHW32c", "algorithm": "winograd", "tile": 4})
        executable = tvm.compile(kernel.module, target=resolve_target(None))
    """
    tvm = import_tvm()
    workload = kernels.validate_workload(workload)
    candidate = dict(candidate)
    module = family(candidate)
    module.validate_candidate(workload, candidate)
    target = resolve_target(target)
    te, dtype = tvm.te, workload["dtype"]
    with target:
        data = te.placeholder(kernels._layout_shape(workload["data"], candidate["in"]), dtype=dtype, name="data")
        weight = te.placeholder(module.weight_shape(workload, candidate), dtype=dtype, name="weight")
        out = module.compute(tvm, data, weight, workload, candidate)
        operands = [
            te.placeholder(kernels._layout_shape(shape, candidate["out"]), dtype=dtype, name=f"epilogue_in{i}")
            for i, shape in enumerate(kernels._workload_epilogue_shapes(workload))
        ]
        remaining = iter(operands)
        for step in workload.get("epilogue", []):
            out = tvm.topi.nn.relu(out) if step == "relu" else tvm.topi.add(out, next(remaining))
        tensors = [data, weight, *operands, out]
        sch = tvm.s_tir.Schedule(te.create_prim_func(tensors))
        try:
            module.schedule(sch, target)
        except tvm.s_tir.ScheduleError as exc:
            raise ProblemError(f"cannot schedule conv2d {workload} with {candidate}: {exc}") from None
        name = "kernel"
        scheduled = sch.mod["main"].with_attr("global_symbol", name).with_attr("tirx.is_scheduled", True)
    shapes = [tuple(int(d) for d in t.shape) for t in tensors]
    return AlgorithmKernel(workload, candidate, tvm.IRModule({name: scheduled}), name, shapes, dtype)

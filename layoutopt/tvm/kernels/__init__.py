"""CPU kernels for every workload kind: candidates, TE compute, hand-written schedules, numpy references.

The package is laid out by job:

- :mod:`.workload`: the plain-data schema (workloads, layouts, packing) with no TVM import;
- one module per kernel family, each with its candidates, numpy reference, compute and schedule:
  :mod:`.conv2d` (direct: NCHW, NCHWc, depthwise NCHWc), :mod:`.winograd` (Winograd F(m x m, 3x3)
  conv2d, ``"algorithm": "winograd"``), :mod:`.gemm` (1x1 conv2d as a packed GEMM,
  ``"algorithm": "gemm"``), :mod:`.dense`, :mod:`.transform` (layout transforms);
  :data:`~.kernel.FAMILIES` maps ``(op, algorithm)`` to them, and :mod:`.padded` runs a blocked
  conv2d family on padded output channels (``"oc_block"``) where no block divides them;
- :mod:`.isa`: what the *target* CPU offers (vector width, registers, register tiles);
- :mod:`.kernel`: one measurable kernel (:func:`build_kernel`, :func:`check_kernel`);
- :mod:`.module`: the schedule rules and :func:`schedule_module`, which schedules a legalized Relax
  module with the very code that schedules the measured kernels.

A *workload* is a JSON-able dict describing one operator instance and a *candidate* a JSON-able dict
choosing its kernel (layouts, algorithm, schedule knobs); both are cost-cache keys, so they stay
plain data (see :mod:`.workload` and each family for their forms).

Example::

    wl = {"op": "conv2d", "data": [1, 16, 8, 8], "kernel": [16, 16, 3, 3], "strides": [1, 1],
          "padding": [1, 1, 1, 1], "dilation": [1, 1], "groups": 1, "dtype": "float32"}
    cands = conv2d_candidates(wl)              # [{"in": "NCHW4c", "out": "NCHW4c"}, ...]
    kernel = build_kernel(wl, cands[0], target="llvm")
    max_error = check_kernel(kernel)           # ~1e-6
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...errors import ProblemError
from . import conv2d, dense, transform
from .common import CANDIDATE_ANNOTATION, MAX_VECTOR_LOOP
from .conv2d import DEFAULT_ORDERS
from .conv2d import ORDERS as CONV2D_ORDERS
from .conv2d import SCHEDULE_KNOBS as CONV2D_SCHEDULE_KNOBS
from .conv2d import pack_kernel as pack_conv2d_kernel
from .isa import isa_name, register_tile, vector_registers
from .kernel import (
    FAMILIES,
    RELATIVE_TOLERANCE,
    Kernel,
    build_kernel,
    check_kernel,
    family,
    reference_output,
    validate_candidate,
)
from .module import RULES, Rule, ScheduleModule, schedule_module
from .workload import (
    DEFAULT_BLOCKS,
    EPILOGUE_STEPS,
    NCHW,
    channel_blocks,
    conv2d_output_shape,
    describe_workload,
    epilogue_shapes,
    layout_block,
    layout_shape,
    layout_transform_workload,
    pack_data,
    plain_layout,
    unpack_data,
    validate_workload,
)

#: Version of the hand-written schedules and of how they are timed. It is part of every cost-cache
#: key (see ``Measurer``), so timings of kernels built by an older schedule, or timed in a way now
#: known to be wrong, are never reused: bump it whenever either changes. 3: the measuring worker
#: runs BLAS on one thread; times of version 2 were inflated.
#: 4: a partial register tile for prime output widths above 8 (:func:`register_tile`).
#: 5: register tiles of up to 14 columns and 16 accumulators (:func:`register_tile`).
SCHEDULE_VERSION = 5

#: the conv2d algorithms whose kernels are choices unless asked otherwise: all of them (each only
#: where it applies). Winograd and the 1x1 GEMM pay where their preferred layouts meet the graph's:
#: 1.34x over the best fixed layout on ResNet-50, 2.66x on VGG-19 (benchmarks/results/e2e.md), for
#: about twice the kernels to measure.
DEFAULT_ALGORITHMS = ("direct", "winograd", "gemm")

#: dense weight blocks (the packed output-feature block is the vector width)
DEFAULT_DENSE_BLOCKS = dense.DEFAULT_BLOCKS

__all__ = [
    "CANDIDATE_ANNOTATION",
    "CONV2D_ORDERS",
    "CONV2D_SCHEDULE_KNOBS",
    "DEFAULT_ALGORITHMS",
    "DEFAULT_BLOCKS",
    "DEFAULT_DENSE_BLOCKS",
    "DEFAULT_ORDERS",
    "EPILOGUE_STEPS",
    "FAMILIES",
    "MAX_VECTOR_LOOP",
    "NCHW",
    "RELATIVE_TOLERANCE",
    "RULES",
    "SCHEDULE_VERSION",
    "Kernel",
    "Rule",
    "ScheduleModule",
    "build_kernel",
    "candidates",
    "channel_blocks",
    "check_kernel",
    "conv2d",
    "conv2d_candidates",
    "conv2d_output_shape",
    "dense",
    "dense_candidates",
    "describe_workload",
    "epilogue_shapes",
    "family",
    "isa_name",
    "layout_block",
    "layout_shape",
    "layout_transform_workload",
    "pack_conv2d_kernel",
    "pack_data",
    "plain_layout",
    "reference_output",
    "register_tile",
    "schedule_module",
    "transform",
    "unpack_data",
    "validate_candidate",
    "validate_workload",
    "vector_registers",
]


def conv2d_candidates(workload: dict[str, Any], algorithms: Sequence[str] = DEFAULT_ALGORITHMS,
                      **options: Any) -> list[dict[str, Any]]:
    """Kernel candidates of a conv2d: the direct ones (see :func:`.conv2d.candidates`: ``blocks``,
    ``include_nchw``, ``orders``), then those of every other algorithm in ``algorithms`` that applies
    (:data:`FAMILIES`: ``"winograd"`` for 3x3 stride-1 convs, ``"gemm"`` for 1x1 ones), over the
    same ``blocks``.

    Example::

        conv2d_candidates(wl, blocks=[8, 16], algorithms=["direct"])
        # [{'in': 'NCHW8c', 'out': 'NCHW8c'}, {'in': 'NCHW8c', 'out': 'NCHW16c'}, ...,
        #  {'in': 'NCHW', 'out': 'NCHW'}]
        conv2d_candidates(wl, blocks=[8, 16], orders=["oc", "rows"], algorithms=["direct"])
        # [{'in': 'NCHW8c', 'out': 'NCHW8c'}, {'in': 'NCHW8c', 'out': 'NCHW8c', 'order': 'rows'}, ...]
        conv2d_candidates(wl, blocks=[16])   # a 3x3 stride-1 conv: direct, then Winograd
        # [..., {'in': 'NCHW16c', 'out': 'NCHW16c', 'algorithm': 'winograd', 'tile': 4}, ...]
    """
    workload = validate_workload(workload)
    found = conv2d.candidates(workload, **options) if "direct" in algorithms else []
    for algorithm in algorithms:
        if algorithm == "direct":
            continue
        kernels = FAMILIES.get(("conv2d", algorithm))
        if kernels is None:
            raise ProblemError(f"unknown conv2d algorithm {algorithm!r}; known: "
                               f"{sorted(a for op, a in FAMILIES if op == 'conv2d')}")
        if kernels.applies(workload):
            blocks = options.get("blocks")
            found += kernels.candidates(workload) if blocks is None else kernels.candidates(workload, blocks)
    if not found:
        found = conv2d.candidates(workload, **options)  # no other algorithm applies: direct kernels
    return found


def dense_candidates(workload: dict[str, Any], **options: Any) -> list[dict[str, Any]]:
    """Weight-layout candidates of a dense layer (see :func:`.dense.candidates`).

    Example::

        dense_candidates({"op": "dense", "data": [1, 2048], "weight": [1000, 2048], "dtype": "float32"})
        # [{'in': 'NC', 'out': 'NC', 'weight': 'NK'}, {'in': 'NC', 'out': 'NC', 'weight': 'NK8n'}]
    """
    return dense.candidates(validate_workload(workload), **options)


def candidates(workload: dict[str, Any], **options: Any) -> list[dict[str, Any]]:
    """Candidates of any workload kind (layout transforms have the single candidate ``{}``).

    Example::

        candidates({"op": "dense", "data": [1, 64], "weight": [24, 64], "dtype": "float32"})
    """
    op = validate_workload(workload)["op"]
    if op == "conv2d":
        return conv2d_candidates(workload, **options)
    if op == "dense":
        return dense_candidates(workload, **options)
    return [{}]


"""CPU kernels for every workload kind: candidates, TE compute, hand-written schedules, numpy references.

The package is laid out by job:

- :mod:`.workload`: the plain-data schema (workloads, layouts, packing) with no TVM import;
  :mod:`.candidate`: the :class:`Candidate` record of a candidate dict, and its label;
- :mod:`.family`: the :class:`KernelFamily` interface (candidates, schedule space, numpy reference,
  compute, schedule, packing, fused epilogue) that every kernel family implements, one module each:
  :mod:`.conv2d` (direct: NCHW, NCHWc), :mod:`.depthwise` (depthwise NCHWc,
  ``"algorithm": "depthwise"``), :mod:`.winograd` (Winograd F(m x m, 3x3)
  conv2d, ``"algorithm": "winograd"``), :mod:`.gemm` (1x1 conv2d as a packed GEMM,
  ``"algorithm": "gemm"``), :mod:`.dense`, :mod:`.transform` (layout transforms); the conv2d
  families share :mod:`.convolution`, and :mod:`.padded` runs a blocked conv2d family on padded
  output channels (``"oc_block"``) where no block divides them; :mod:`.epilogue`: the elementwise
  steps fused after a kernel (bias, activations, residual add), their TE and numpy reference;
- :mod:`.space`: :class:`ScheduleSpace`, the knobs a family's schedule takes for one workload and
  target, the values worth searching and the heuristic's point (:meth:`KernelFamily.space`);
- :mod:`.registry`: :data:`FAMILIES` maps ``(op, algorithm)`` to the families (a new family is one
  line there), and the candidates of a workload over them;
- :mod:`.isa`: what the *target* CPU offers (vector width, registers, register tiles);
- :mod:`.kernel`: one measurable kernel (:func:`build_kernel`, :func:`check_kernel`);
- :mod:`.module`: :func:`schedule_module`, which schedules a legalized Relax module with the very
  code (each kernel family's schedule) that schedules the measured kernels.

A *workload* is a JSON-able dict describing one operator instance and a *candidate* a JSON-able dict
choosing its kernel (layouts, algorithm, schedule knobs); both are cost-cache keys, so they stay
plain data (see :mod:`.workload` and each family for their forms).

Example:
    >>> wl = {"op": "conv2d", "data": [1, 16, 8, 8], "kernel": [16, 16, 3, 3], "strides": [1, 1],
    ...       "padding": [1, 1, 1, 1], "dilation": [1, 1], "groups": 1, "dtype": "float32"}
    >>> cands = conv2d_candidates(wl)
    >>> cands[:2], sorted({Candidate.from_json(c).algorithm for c in cands})
    ([{'in': 'NCHW4c', 'out': 'NCHW4c'}, {'in': 'NCHW4c', 'out': 'NCHW8c'}], ['direct', 'winograd'])
    >>> kernel = build_kernel(wl, cands[0], target="llvm")
    >>> check_kernel(kernel) < 1e-5            # max relative error against numpy
    True
"""

from __future__ import annotations

from . import conv2d, dense, transform
from .candidate import Candidate
from .common import CANDIDATE_ANNOTATION, MAX_VECTOR_LOOP
from .conv2d import DEFAULT_ORDERS
from .conv2d import ORDERS as CONV2D_ORDERS
from .conv2d import SCHEDULE_KNOBS as CONV2D_SCHEDULE_KNOBS
from .conv2d import pack_kernel as pack_conv2d_kernel
from .family import KernelFamily
from .isa import isa_name, register_tile, vector_registers
from .kernel import RELATIVE_TOLERANCE, Kernel, build_kernel, check_kernel, reference_output
from .module import ScheduleModule, schedule_module
from .registry import (
    DEFAULT_ALGORITHMS,
    FAMILIES,
    LOOP_ORDERS,
    candidates,
    conv2d_candidates,
    dense_candidates,
    family,
    validate_candidate,
    with_loop_order,
)
from .space import ScheduleSpace
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
#: 6: depthwise kernels of their own family (:mod:`.depthwise`: no padded copy, MLAS-style tiles);
#: every elementwise epilogue step fused and measured (:mod:`.epilogue`), finished in the tile.
#: 7: the sigmoid (fused, SiLU's, a gate's) vectorised with its own float32 exp
#: (:func:`.epilogue.sigmoid_te`), not one libm ``expf`` call per element.
#: 8: packed dense kernels tiled over rows and feature blocks, blocks padding the features (:mod:`.dense`).
#: 9: 1x1 GEMM tiles of several channel blocks where no such count divides them, the last tile partial.
#: 10: AVX2's 1x1 GEMM tiles count the live broadcasts and put 2-pixel tiles first; dense loops blocks-outer.
#: 11: on AVX2, 1x1 GEMM tiles of 2 pixels or more on odd widths too, a row's last tile partial.
#: 12: injective loops (epilogues after the tile, padded outputs' unpack, the build's elementwise ops)
#: vectorised in pieces of up to 64 lanes (:func:`.common.vector_lanes`), not one vector per row.
#: 13: exp, log, tanh, erf (GELU), softplus and small integer powers vectorised as the sigmoid is
#: (:mod:`.transcendental`), fused or not, not one libm call per element; the sigmoid's exp over the
#: whole float32 range; an epilogue the register tile does not finish runs in one pass after the
#: kernel (:func:`.common.schedule_epilogue`), not one pass per step.
SCHEDULE_VERSION = 13

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
    "LOOP_ORDERS",
    "MAX_VECTOR_LOOP",
    "NCHW",
    "RELATIVE_TOLERANCE",
    "SCHEDULE_VERSION",
    "Candidate",
    "Kernel",
    "KernelFamily",
    "ScheduleModule",
    "ScheduleSpace",
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
    "with_loop_order",
]

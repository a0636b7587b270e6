"""Depthwise conv2d in ``NCHW{b}c`` (one filter per channel): register tiles in the manner of ONNX
Runtime's MLAS NCHWc depthwise kernel, and no padded copy of the input.

A depthwise conv does ``KH * KW`` multiply-adds per output value, against ``KH * KW * C * O`` for a
dense conv's: it is bound by loads, not by FMAs. The kernel here keeps, per register tile, a strip of
``reg_n`` output columns by one channel block in accumulators; for each kernel row it walks the
tile's input columns, each loaded once and multiplied into every accumulator that uses it (the
kernel-column and tile-column loops are unrolled, so LLVM keeps one load per input column); the
work is split over channel blocks times chunks of output rows (:func:`row_chunk`). The epilogue
(bias, activations, residual add: :mod:`.epilogue`) is finished in the tile.

The old kernel (the direct family's) first copied the whole input into a zero-padded buffer, a
pass over memory as large as the conv's own. Here the padding is in the indexing: a tap outside
the input reads ``0`` (clamped address, guarded load), and the guard is marked ``likely``, so that
TVM's loop partitioning (in its default lowering) gives the interior tiles a loop with no guard at
all. Side by side on znver3 (AVX2, 2 threads, ``notes/depthwise.md``), the same
kernel fed by a padded copy ran up to 1.7x slower on MobileNets' stride-1 layers and 1.5-2.3x on
their stride-2 ones (there the copy moves four times the bytes the kernel writes).

Candidates are ``{"in": "NCHW{b}c", "out": "NCHW{b}c", "algorithm": "depthwise"}`` for every block
``b`` dividing the channels, with an optional ``"reg_n"`` knob (default
:func:`~layoutopt.tvm.kernels.isa.depthwise_register_tile`). The direct family offers them for a
depthwise conv beside its plain NCHW kernel (:meth:`.conv2d.DirectConv2d.candidates`).

Example:
    >>> wl = {"op": "conv2d", "data": [1, 32, 9, 9], "kernel": [32, 1, 3, 3], "strides": [2, 2],
    ...       "padding": [1, 1, 1, 1], "dilation": [1, 1], "groups": 32, "dtype": "float32"}
    >>> [c["in"] for c in FAMILY.candidates(wl, blocks=[8, 16, 64])]
    ['NCHW8c', 'NCHW16c']
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from ...errors import ProblemError
from .._tvm import import_tvm
from .common import (
    annotated_candidate,
    block_names,
    finish_register_tile,
    kernel_annotations,
    parallel_vectorize,
    register_tile_output,
    schedule_epilogue,
)
from .convolution import LOOP_ORDERS, Conv2dFamily, checked_orders
from .isa import depthwise_register_tile, vector_registers
from .space import ScheduleSpace, check_knobs, divisors, registers_hold
from .workload import (
    DEFAULT_BLOCKS,
    channel_blocks,
    check_divides,
    conv2d_output_shape,
    is_depthwise,
    layout_block,
    validate_workload,
)

__all__ = ["FAMILY", "MAIN_BLOCK", "MIN_PARALLEL_CHUNKS", "ORDERS", "SCHEDULE_KNOBS", "DepthwiseConv2d",
           "row_chunk"]

#: the name of the kernel's main block
MAIN_BLOCK = "depthwise_conv2d_NCHWc"
#: candidate keys that change the schedule, not the layouts (its :meth:`space <DepthwiseConv2d.space>`,
#: in this order): ``reg_n``, the register tile's width in columns (default
#: :func:`~.isa.depthwise_register_tile`); ``oc_tile``, the channel blocks in the tile (default 1:
#: more give the FMAs of a narrow map independent accumulators, though no load is shared between
#: blocks); ``row_chunk``, the output rows per parallel work item (default :func:`row_chunk`); and
#: the parallel loop ``order`` (the direct family's :data:`~.conv2d.ORDERS`): over channel blocks, then
#: chunks of rows (``"oc"``, the default), or rows first (``"rows"``: each thread writes the rows a
#: kernel split by rows, such as a 1x1 conv in its ``"rows"`` order, reads next, and reads the rows it
#: wrote; see :func:`~.registry.with_loop_order`)
SCHEDULE_KNOBS = ("reg_n", "oc_tile", "row_chunk", "order")
#: values of the ``order`` knob, the default first
ORDERS = LOOP_ORDERS
#: the fewest parallel work items (channel block x chunk of rows) :func:`row_chunk` leaves, where the
#: layer has as many rows: enough to balance the threads of a CPU of a few cores. Fewer and larger
#: items pay less per item: TVM 0.27 allocates a register tile's buffer from its workspace pool in
#: every parallel iteration (a call out and back, ~50-70 ns), as much as a 7-wide row of a
#: depthwise 3x3 conv takes to compute.
MIN_PARALLEL_CHUNKS = 64


def row_chunk(items: int, rows: int) -> int:
    """Output rows per parallel work item: the largest divisor of ``rows`` that still leaves
    ``items`` (batch times channel blocks) times ``rows / chunk`` at least :data:`MIN_PARALLEL_CHUNKS`
    work items (1 when even single rows leave fewer).

    Example:
        >>> row_chunk(4, 112), row_chunk(120, 7), row_chunk(2, 7)
        (7, 7, 1)
    """
    fitting = [d for d in range(1, rows + 1) if rows % d == 0 and items * (rows // d) >= MIN_PARALLEL_CHUNKS]
    return max(fitting, default=1)


# --------------------------------------------------------------------------------------------------
# compute


def _tap(tvm, data, workload: dict[str, Any], n, c, y, x, k, ry, rx):
    """The input value under kernel tap (ry, rx) of output (y, x): 0 in the padding, read at a clamped
    (always valid) address behind a ``likely`` guard; only the guards that can fail are emitted."""
    tirx = tvm.tirx
    _, _, height, width = workload["data"]
    _, _, kernel_h, kernel_w = workload["kernel"]
    _, _, out_h, out_w = conv2d_output_shape(workload)
    (sh, sw), (dh, dw) = workload["strides"], workload["dilation"]
    top, left, _, _ = workload["padding"]
    guards = []

    def clamped(position, before: int, last_read: int, extent: int):
        if before > 0:
            guards.append(position >= 0)
            position = tirx.max(position, 0)
        if last_read >= extent:
            guards.append(position < extent)
            position = tirx.min(position, extent - 1)
        return position

    row = clamped(y * sh + ry * dh - top, top, (out_h - 1) * sh + (kernel_h - 1) * dh - top, height)
    column = clamped(x * sw + rx * dw - left, left, (out_w - 1) * sw + (kernel_w - 1) * dw - left, width)
    value = data[n, c, row, column, k]
    if not guards:
        return value
    return tirx.if_then_else(tirx.likely(tirx.all(*guards)), value, tirx.const(0.0, data.dtype))


def depthwise_nchwc(tvm, data, kernel, workload: dict[str, Any], candidate: dict[str, Any]):
    """The depthwise conv of ``data`` ``(N, C/b, H, W, b)`` by ``kernel`` ``(C/b, KH, KW, b)``: a TE
    tensor ``(N, C/b, OH, OW, b)`` whose block (:data:`MAIN_BLOCK`) carries the workload and candidate."""
    te = tvm.te
    batch, _, out_h, out_w = conv2d_output_shape(workload)
    chunks, kernel_h, kernel_w, block = (int(d) for d in kernel.shape)
    ry = te.reduce_axis((0, kernel_h), name="ry")
    rx = te.reduce_axis((0, kernel_w), name="rx")
    return te.compute(
        (batch, chunks, out_h, out_w, block),
        lambda n, c, y, x, k: te.sum(_tap(tvm, data, workload, n, c, y, x, k, ry, rx) * kernel[c, ry, rx, k],
                                     axis=[ry, rx]),
        name=MAIN_BLOCK,
        attrs=kernel_annotations(workload, candidate),
    )


# --------------------------------------------------------------------------------------------------
# schedule


def schedule_depthwise(func, target):
    """A ``[reg_n x block]`` register tile accumulated over (kernel row, kernel column), the kernel
    column and the tile's columns unrolled, the block vectorised, parallel over (batch, channel
    block, chunk of rows: :func:`row_chunk`); the fused epilogue finished in the tile. (A padding
    stage before the kernel, which its compute has none of, would be parallel and vectorised on its own.)"""
    tvm = import_tvm()
    sch = tvm.s_tir.Schedule(func)
    names = block_names(sch)
    for name in [name for name in names if "pad" in name]:
        parallel_vectorize(sch, sch.get_sblock(name))
        names.remove(name)
    conv = sch.get_sblock(MAIN_BLOCK)
    knobs = annotated_candidate(sch, conv) or {}
    batch, chunks, height, width, block = (int(d) for d in sch.get(conv).writes[0].source.shape)
    n, occ, oh, ow, ocb, ry, rx = sch.get_loops(conv)
    kernel_w = int(sch.get(rx).extent)
    reg_n = int(knobs.get("reg_n") or depthwise_register_tile(width, block, kernel_w, target))
    oho, ohi = sch.split(oh, [None, int(knobs.get("row_chunk") or row_chunk(batch * chunks, height))])
    owo, owi = sch.split(ow, [None, reg_n])
    blocks = []  # the tile's loop over channel blocks, when it has several
    if knobs.get("oc_tile", 1) > 1:
        occ, occi = sch.split(occ, [None, int(knobs["oc_tile"])])
        blocks = [occi]
    outer = (n, oho, occ) if knobs.get("order", ORDERS[0]) == "rows" else (n, occ, oho)
    sch.reorder(*outer, ohi, owo, ry, rx, *blocks, owi, ocb)
    tile, epilogue = register_tile_output(sch, conv, [name for name in names if name != MAIN_BLOCK])
    finish_register_tile(sch, tile, owo, outer, ocb, owi)
    for loop in (rx, *blocks):
        sch.unroll(loop)
    schedule_epilogue(sch, epilogue, set())
    sch.decompose_reduction(conv, ry)
    return sch


# --------------------------------------------------------------------------------------------------
# the family


class DepthwiseConv2d(Conv2dFamily):
    """Depthwise conv2d (groups = input channels = output channels) in NCHW{b}c, blocks as choices
    (see the module's docstring)."""

    algorithm = "depthwise"
    main_blocks = (MAIN_BLOCK,)

    def applies(self, workload: dict[str, Any]) -> bool:
        """A depthwise conv2d of more than one channel."""
        workload = validate_workload(workload)
        return workload["op"] == "conv2d" and workload["groups"] > 1 and is_depthwise(workload)

    def candidates(self, workload: dict[str, Any], blocks: Iterable[int] = DEFAULT_BLOCKS,
                   orders: Iterable[str] = ORDERS[:1], **options: Any) -> list[dict[str, Any]]:
        """One kernel per block of ``blocks`` dividing the channels (the channel count itself when
        below 8), in and out in that block, once per loop order in ``orders`` (the default order has
        no ``"order"`` key); none where it does not apply. Other options do not concern it.

        Example:
            >>> wl = {"op": "conv2d", "data": [1, 16, 5, 5], "kernel": [16, 1, 3, 3], "groups": 16}
            >>> [c.get("order", "oc") for c in FAMILY.candidates(wl, blocks=[16], orders=["oc", "rows"])]
            ['oc', 'rows']
        """
        if not self.applies(workload):
            return []
        orders = checked_orders(orders, ORDERS, "depthwise loop")
        return [{"in": f"NCHW{b}c", "out": f"NCHW{b}c", "algorithm": self.algorithm,
                 **({} if order == ORDERS[0] else {"order": order})}
                for b in channel_blocks(workload["data"][1], blocks) for order in orders]

    def validate_candidate(self, workload: dict[str, Any], candidate: dict[str, Any]) -> None:
        """Raise ProblemError unless ``candidate`` is one of its kernels for ``workload``."""
        what = f"depthwise candidate {candidate!r}"
        if not self.applies(workload):
            raise ProblemError(f"{what}: the workload is no depthwise conv2d (groups = channels > 1)")
        if not isinstance(candidate, dict) or "in" not in candidate or "out" not in candidate:
            raise ProblemError(f"{what} needs 'in' and 'out' layouts")
        block = layout_block(candidate["in"])
        if block is None or candidate["out"] != candidate["in"]:
            raise ProblemError(f"{what}: in and out must be the same blocked layout NCHW<b>c")
        check_divides(block, workload["data"][1], what)
        unknown = sorted(set(candidate) - {"in", "out", "algorithm", *SCHEDULE_KNOBS})
        if unknown:
            raise ProblemError(f"{what}: unknown keys {unknown} (knobs: {list(SCHEDULE_KNOBS)})")
        check_knobs(candidate, self.knob_domain(workload, candidate), what)

    def knob_domain(self, workload: dict[str, Any], candidate: dict[str, Any]) -> dict[str, tuple]:
        """The values each knob may take on any target (:func:`~.space.check_knobs`): ``reg_n`` up to
        the output width, ``oc_tile`` dividing the channel blocks, ``row_chunk`` dividing the output
        rows, ``order`` among :data:`ORDERS`."""
        _, channels, out_h, out_w = conv2d_output_shape(workload)
        return {"reg_n": tuple(range(1, out_w + 1)),
                "oc_tile": divisors(channels // layout_block(candidate["out"])),
                "row_chunk": divisors(out_h), "order": ORDERS}

    def space(self, workload: dict[str, Any], candidate: dict[str, Any], target: Any = None) -> ScheduleSpace:
        """Its knobs (:data:`SCHEDULE_KNOBS`) on ``target``: tile widths dividing the output width (a
        partial tile, its columns predicated, ran 2-4x slower: :func:`~.isa.depthwise_register_tile`) of
        4 accumulators or more (or the heuristic's count), ``oc_tile`` blocks whose accumulators and
        kernel-row weights fit the registers; rows per work item that leave 8 work items or more
        (or the heuristic's count).

        Example:
            >>> wl = {"op": "conv2d", "data": [1, 960, 7, 7], "kernel": [960, 1, 3, 3], "strides": [1, 1],
            ...       "padding": [1, 1, 1, 1], "dilation": [1, 1], "groups": 960, "dtype": "float32"}
            >>> space = FAMILY.space(wl, {"in": "NCHW16c", "out": "NCHW16c", "algorithm": "depthwise"},
            ...                      {"kind": "llvm", "mcpu": "znver4"})
            >>> space.default(), dict(space.knobs)["oc_tile"], space.size
            ({'reg_n': 7, 'oc_tile': 1, 'row_chunk': 1, 'order': 'oc'}, (1, 2, 3, 4, 5, 6), 24)
        """
        domain = self.knob_domain(workload, candidate)
        lanes, registers = vector_registers(target)
        block = layout_block(candidate["out"])
        per_column = -(-block // lanes)
        batch, channels, out_h, out_w = conv2d_output_shape(workload)
        kernel_w = workload["kernel"][3]
        default = {"reg_n": depthwise_register_tile(out_w, block, kernel_w, target), "oc_tile": 1,
                   "row_chunk": row_chunk(batch * channels // block, out_h), "order": ORDERS[0]}
        fewest = min(4, default["reg_n"] * per_column)

        def fits(point: dict[str, Any]) -> bool:
            accumulators = point["reg_n"] * point["oc_tile"] * per_column
            items = batch * channels // block // point["oc_tile"] * (out_h // point["row_chunk"])
            return (accumulators >= fewest and items >= 8
                    and registers_hold(accumulators, point["oc_tile"] * kernel_w * per_column + 1, registers))

        return ScheduleSpace.build({**domain, "reg_n": divisors(out_w)}, default, fits)

    def weight_shape(self, workload: dict[str, Any], candidate: dict[str, Any]) -> tuple[int, ...]:
        """``(C/b, KH, KW, b)``: one vector of ``b`` filters per tap."""
        block = layout_block(candidate["out"])
        channels, _, kernel_h, kernel_w = workload["kernel"]
        return (channels // block, kernel_h, kernel_w, block)

    def pack_weight(self, workload: dict[str, Any], candidate: dict[str, Any],
                    weight: np.ndarray) -> np.ndarray:
        """The ``(C, 1, KH, KW)`` weight as ``(C/b, KH, KW, b)``.

        Example:
            >>> wl = {"op": "conv2d", "data": [1, 16, 5, 5], "kernel": [16, 1, 3, 3], "groups": 16}
            >>> FAMILY.pack_weight(wl, {"out": "NCHW8c"}, np.zeros((16, 1, 3, 3))).shape
            (2, 3, 3, 8)
        """
        channels, _, kernel_h, kernel_w = np.shape(weight)
        block = layout_block(candidate["out"])
        check_divides(block, channels, f"depthwise weight for {candidate!r}")
        packed = np.reshape(weight, (channels // block, block, kernel_h, kernel_w))
        return np.ascontiguousarray(packed.transpose(0, 2, 3, 1))

    def compute(self, tvm: Any, inputs: Sequence, workload: dict[str, Any], candidate: dict[str, Any]) -> Any:
        """:func:`depthwise_nchwc` of the data and packed weight (the first two ``inputs``)."""
        return depthwise_nchwc(tvm, inputs[0], inputs[1], workload, candidate)

    def schedule(self, func: Any, target: Any) -> Any:
        """:func:`schedule_depthwise`."""
        return schedule_depthwise(func, target)


#: the family (:data:`~layoutopt.tvm.kernels.registry.FAMILIES` registers it)
FAMILY = DepthwiseConv2d()

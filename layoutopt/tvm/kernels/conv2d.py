"""Direct conv2d: plain NCHW and channel-blocked NCHWc (AutoTVM's x86 template).

Candidates are ``{"in": "NCHW16c", "out": "NCHW8c"}`` (blocked, any pair of dividing blocks) or
``{"in": "NCHW", "out": "NCHW"}``; a blocked one may add schedule knobs (:data:`SCHEDULE_KNOBS`).
Where no block of 8 or more divides the output channels, ``{"in": "NCHW16c", "out": "NCHW",
"oc_block": 16}`` runs the blocked kernel on padded output channels (:mod:`.padded`).
A grouped convolution runs blocked too when the blocks divide its channels per group (RegNet's and
ResNeXt's groups of 8 or 16 channels): then each output chunk belongs to one group and reads that
group's input chunks only, and the kernel is the ungrouped one with a group offset on the input chunk.
A depthwise one (one channel per group) runs in NCHW{b}c by the depthwise family's kernels
(:mod:`.depthwise`), which :meth:`DirectConv2d.candidates` offers beside NCHW.

Example:
    >>> wl = {"op": "conv2d", "data": [1, 16, 8, 8], "kernel": [16, 16, 3, 3], "strides": [1, 1],
    ...       "padding": [1, 1, 1, 1], "dilation": [1, 1], "groups": 1, "dtype": "float32"}
    >>> [f"{c['in']}->{c['out']}" for c in FAMILY.candidates(wl, blocks=[8, 16])]
    ['NCHW8c->NCHW8c', 'NCHW8c->NCHW16c', 'NCHW16c->NCHW8c', 'NCHW16c->NCHW16c', 'NCHW->NCHW']
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from ...errors import ProblemError
from .._tvm import import_tvm
from . import depthwise
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
from .isa import register_tile, vector_registers
from .space import ScheduleSpace, check_knobs, divisors, even_splits, registers_hold
from .workload import (
    DEFAULT_BLOCKS,
    NCHW,
    channel_blocks,
    check_divides,
    conv2d_output_shape,
    is_depthwise,
    layout_block,
    padded_pairs,
)

__all__ = [
    "DEFAULT_ORDERS",
    "FAMILY",
    "MAIN_BLOCKS",
    "ORDERS",
    "REDUCTIONS",
    "SCHEDULE_KNOBS",
    "DirectConv2d",
    "pack_kernel",
]

#: Knobs of a blocked conv2d candidate that change its schedule, not its layouts (its :meth:`space
#: <DirectConv2d.space>`, in this order):
#:
#: - ``reg_n``: the register tile's width in output columns (default
#:   :func:`~layoutopt.tvm.kernels.isa.register_tile`);
#: - ``oc_tile``: output-channel blocks in the register tile (default 1): ``reg_n x oc_tile`` vectors
#:   accumulate, and each input value, broadcast once, feeds ``oc_tile`` FMAs (AutoTVM's NCHWc
#:   template had one block; MLAS's NCHWc kernel several);
#: - ``reduction``: the reduction's outermost loop (convs with a kernel window above 1x1):
#:   ``"ic"`` (default, AutoTVM's: input-channel chunks outside the kernel window, each chunk's
#:   input rows read for every tap) or ``"kernel"`` (the window outside the chunks);
#: - ``unroll_kw``: 1 puts the kernel-width loop inside the input-channel block and unrolls it
#:   (AutoTVM's ``unroll_kw``: the taps of one row share the input values of neighbouring columns);
#:   kernels at least 2 wide; default 0;
#: - ``order``: the parallel loop nest runs over output-channel chunks, then rows (``"oc"``,
#:   AutoTVM's, the default), or rows, then chunks (``"rows"``). Chunks outside re-read the whole
#:   input once per chunk; rows outside keep one input row (all channels) in cache while every chunk
#:   uses it. Neither wins everywhere: on SSD's 128x128 maps a 1x1 256->64 conv at 16c ran 6.94 ms
#:   chunks-outside and 3.26 ms rows-outside, and a 1x1 128->512 at 64x64 3.22 vs 3.42 ms. But which
#:   wins depends on how much of the shared L3 the other tenants leave: on a shared VM the two passes
#:   of one measurement flipped it, and whole networks built with the faster order per kernel were no
#:   faster (SSD 257 vs 259 ms, ResNet-50 40.0 vs 39.3 ms); so it is a candidate only when asked for
#:   (``orders=``), as it doubles the blocked convs to measure.
SCHEDULE_KNOBS = ("reg_n", "oc_tile", "reduction", "unroll_kw", "order")
#: values of the ``reduction`` knob, the default first
REDUCTIONS = ("ic", "kernel")
#: values of the ``order`` knob, the default first
ORDERS = LOOP_ORDERS
#: the loop orders of blocked conv2d candidates unless asked for others
DEFAULT_ORDERS = ORDERS[:1]

#: the main block of every direct conv compute (TVM's own legalization names them so too:
#: ``DepthwiseConv2d`` is TOPI's plain NCHW depthwise conv)
MAIN_BLOCKS = ("conv2d_NCHWc", "conv2d_nchw", "group_conv2d_nchw", "DepthwiseConv2d")
_PAD_BLOCKS = ("pad_temp", "PaddedInput", "data_pad")


# --------------------------------------------------------------------------------------------------
# numpy: weights


def pack_kernel(kernel: np.ndarray, candidate: dict[str, Any]) -> np.ndarray:
    """OIHW weights in the layout the candidate's kernel reads: ``OIHW{ib}i{ob}o`` (shape O/ob, I/ib,
    KH, KW, ib, ob) for a blocked conv2d, OIHW unchanged for NCHW. A grouped conv's I is its channels
    per group, so the same packing serves it.

    Example:
        >>> pack_kernel(np.zeros((32, 16, 3, 3)), {"in": "NCHW8c", "out": "NCHW16c"}).shape
        (2, 2, 3, 3, 8, 16)
    """
    in_block, out_block = layout_block(candidate["in"]), layout_block(candidate["out"])
    if in_block is None:
        return np.ascontiguousarray(kernel)
    o, i, kh, kw = kernel.shape
    packed = kernel.reshape(o // out_block, out_block, i // in_block, in_block, kh, kw)
    return np.ascontiguousarray(packed.transpose(0, 2, 4, 5, 3, 1))


# --------------------------------------------------------------------------------------------------
# compute


def _padded(tvm, data, padding):
    top, left, bottom, right = padding
    if not any(padding):
        return data
    return tvm.topi.nn.pad(data, [0, 0, top, left, 0], [0, 0, bottom, right, 0], name="data_pad")


def _conv2d_nchwc(tvm, data, kernel, workload, candidate):
    # the compute of topi.nn.conv2d_NCHWc (same loops: n, oc chunk, oh, ow, oc block | ic, kh, kw),
    # written here so that its block carries the candidate. Grouped: ic runs over the channels of one
    # group, and an output chunk (inside one group: the blocks divide the channels per group) reads
    # from its group's first input chunk on; ungrouped, that offset is 0
    te = tvm.te
    dtype = workload["dtype"]
    in_block = int(data.shape[4])
    out_chunks, in_chunks, kernel_h, kernel_w, _, out_block = (int(d) for d in kernel.shape)
    out_chunks_per_group = out_chunks // workload["groups"]
    batch, _, out_h, out_w = conv2d_output_shape(workload)
    (sh, sw), (dh, dw) = workload["strides"], workload["dilation"]
    padded = _padded(tvm, data, workload["padding"])
    ic = te.reduce_axis((0, in_chunks * in_block), name="ic")
    ry = te.reduce_axis((0, kernel_h), name="kh")
    rx = te.reduce_axis((0, kernel_w), name="kw")

    def first_chunk(oc_chunk):
        return 0 if workload["groups"] == 1 else oc_chunk // out_chunks_per_group * in_chunks

    return te.compute(
        (batch, out_chunks, out_h, out_w, out_block),
        lambda n, oc_chunk, oh, ow, oc_block: te.sum(
            padded[n, first_chunk(oc_chunk) + ic // in_block, oh * sh + ry * dh, ow * sw + rx * dw,
                   ic % in_block].astype(dtype)
            * kernel[oc_chunk, ic // in_block, ry, rx, ic % in_block, oc_block].astype(dtype),
            axis=[ic, ry, rx],
        ),
        name="conv2d_NCHWc",
        attrs=kernel_annotations(workload, candidate),
    )


# --------------------------------------------------------------------------------------------------
# schedules: each takes the PrimFunc holding the kernel (alone, or fused with its epilogue) and
# returns its Schedule


def _write_shape(sch, block) -> list[int]:
    return [int(d) for d in sch.get(block).writes[0].source.shape]


def _read_shape(sch, block, ndim: int) -> list[int]:
    """The shape of the first buffer of ``ndim`` dimensions the block reads (a packed kernel: 6)."""
    return next([int(d) for d in region.source.shape] for region in sch.get(block).reads
                if len(region.source.shape) == ndim)


def schedule_nchwc(func, target):
    """AutoTVM's ``schedule_conv_NCHWc_cpu_common``: a ``[reg_n x oc_block]`` register tile accumulated
    over (ic outer, kh, kw, ic inner), parallel over (n, oc outer, oh) (or (n, oh, oc outer): the
    ``order`` knob), the oc block vectorised, and the fused epilogue (bias, relu, residual add)
    finished in the tile when the output block is one vector wide. The candidate's knobs
    (:data:`SCHEDULE_KNOBS`) reshape the tile and the reduction's loops.

    With wider output blocks (4 zmm per column at 64c) the epilogue's operands spill the
    accumulators: a fused 64c residual block measured slower in the tile than with its epilogue run
    after the conv, so there it runs after.
    """
    tvm = import_tvm()
    sch = tvm.s_tir.Schedule(func)
    conv = sch.get_sblock("conv2d_NCHWc")
    knobs = annotated_candidate(sch, conv) or {}
    # the packed kernel (O/ob, I/ib, KH, KW, ib, ob) gives the blocks, whoever wrote the compute
    *_, in_block, out_block = _read_shape(sch, conv, 6)
    out_width = _write_shape(sch, conv)[3]
    tile = {**_DEFAULT_KNOBS, **{k: v for k, v in knobs.items() if k in SCHEDULE_KNOBS}}
    tile["reg_n"] = int(knobs.get("reg_n") or register_tile(out_width, out_block, target))
    try:
        _schedule_nchwc(sch, in_block, tile, out_block <= vector_registers(target)[0])
    except tvm.s_tir.ScheduleError:  # the epilogue does not fit in the tile: run it after the conv
        sch = tvm.s_tir.Schedule(func)
        _schedule_nchwc(sch, in_block, tile, False)
    return sch


#: the knobs' values where a candidate sets none (``reg_n``'s: :func:`~.isa.register_tile`)
_DEFAULT_KNOBS = {"oc_tile": 1, "reduction": REDUCTIONS[0], "unroll_kw": 0, "order": ORDERS[0]}


def _schedule_nchwc(sch, in_block: int, tile: dict[str, Any], fuse_epilogue: bool) -> None:
    names = block_names(sch)
    conv = sch.get_sblock("conv2d_NCHWc")
    if "data_pad" in names:
        parallel_vectorize(sch, sch.get_sblock("data_pad"))
    n, occ, oh, ow, ocb, ic, kh, kw = sch.get_loops(conv)
    owo, owi = sch.split(ow, [None, tile["reg_n"]])
    ico, ici = sch.split(ic, [None, in_block])
    blocks = []  # the tile's loop over output-channel blocks, when it has several
    if tile["oc_tile"] > 1:
        occ, occi = sch.split(occ, [None, tile["oc_tile"]])
        blocks = [occi]
    outer = (n, oh, occ) if tile["order"] == "rows" else (n, occ, oh)
    reduction = [kh, kw, ico, ici] if tile["reduction"] == "kernel" else [ico, kh, kw, ici]
    if tile["unroll_kw"]:
        reduction = [loop for loop in reduction if loop != kw] + [kw]
    # each input value is broadcast once per column, then multiplied by every block's weights
    sch.reorder(*outer, owo, *reduction, owi, *blocks, ocb)
    epilogue = [name for name in names if name not in ("conv2d_NCHWc", "data_pad")]
    written, epilogue = register_tile_output(sch, conv, epilogue, fuse_epilogue)
    finish_register_tile(sch, written, owo, outer, ocb, owi)
    for loop in blocks + ([kw] if tile["unroll_kw"] else []):
        sch.unroll(loop)
    schedule_epilogue(sch, epilogue, set())
    # must come last: before parallel/vectorize it breaks the "compact dataflow" check
    sch.decompose_reduction(conv, reduction[0])


def schedule_nchw(func, target=None):
    """Plain NCHW (conv, grouped, depthwise): vectorise along output columns (contiguous input rows for
    stride 1) and keep a [filters x columns] register tile, parallel over (n, filter outer, row)."""
    sch = import_tvm().s_tir.Schedule(func)
    names = block_names(sch)
    block_name = next(n for n in names if n in MAIN_BLOCKS)
    conv = sch.get_sblock(block_name)
    out_width = _write_shape(sch, conv)[3]
    for pad in _PAD_BLOCKS:
        if pad in names:
            parallel_vectorize(sch, sch.get_sblock(pad))
    n, f, y, x, *reduction = sch.get_loops(conv)
    columns = max(d for d in range(1, 17) if out_width % d == 0)
    filters_extent = int(sch.get(f).extent)
    filters = max(d for d in (1, 2, 4, 8) if filters_extent % d == 0)
    fo, fi = sch.split(f, [None, filters])
    xo, xi = sch.split(x, [None, columns])
    sch.reorder(n, fo, y, xo, *reduction, fi, xi)
    tile = sch.cache_write(conv, 0, "global")
    sch.reverse_compute_at(tile, xo)
    sch.parallel(sch.fuse(n, fo, y))
    sch.vectorize(sch.get_loops(tile)[-1])
    sch.vectorize(xi)
    sch.unroll(fi)
    schedule_epilogue(sch, names, {block_name, *_PAD_BLOCKS})
    sch.decompose_reduction(conv, reduction[0])
    return sch


# --------------------------------------------------------------------------------------------------
# the family


class DirectConv2d(Conv2dFamily):
    """Direct conv2d: plain NCHW (grouped and depthwise too), channel-blocked NCHWc (grouped too, where
    the blocks divide the channels per group: see the module's docstring)."""

    main_blocks = MAIN_BLOCKS

    def candidates(
        self,
        workload: dict[str, Any],
        blocks: Iterable[int] = DEFAULT_BLOCKS,
        include_nchw: bool = True,
        orders: Iterable[str] = DEFAULT_ORDERS,
    ) -> list[dict[str, Any]]:
        """Direct kernels of a (validated) conv2d: every (NCHW{ic}c, NCHW{oc}c) pair with dividing blocks,
        once per loop order in ``orders`` (see :data:`SCHEDULE_KNOBS`; the default order has no
        ``"order"`` key and comes first), the same on padded output channels where no block of 8 or more
        divides them (:func:`~.workload.padded_pairs`), and NCHW.

        A grouped conv gets the pairs of blocks (from ``blocks``) dividing its input and output
        channels per group (none: NCHW only); a depthwise one the depthwise family's blocked kernels
        (:mod:`.depthwise`, equal in/out blocks) before NCHW.

        Example:
            >>> grouped = {"op": "conv2d", "data": [1, 32, 8, 8], "kernel": [32, 8, 3, 3], "strides": [1, 1],
            ...            "padding": [1, 1, 1, 1], "dilation": [1, 1], "groups": 4, "dtype": "float32"}
            >>> [f"{c['in']}->{c['out']}" for c in FAMILY.candidates(grouped, blocks=[4, 8, 16])]
            ['NCHW4c->NCHW4c', 'NCHW4c->NCHW8c', 'NCHW8c->NCHW4c', 'NCHW8c->NCHW8c', 'NCHW->NCHW']
        """
        orders = checked_orders(orders, ORDERS, "conv2d loop")
        blocks = list(blocks)
        groups, channels, out_channels = workload["groups"], workload["data"][1], workload["kernel"][0]
        found: list[dict[str, Any]] = []
        if groups == 1:
            pairs = itertools.product(channel_blocks(channels, blocks), channel_blocks(out_channels, blocks))
            layouts = [(ic, {"out": f"NCHW{oc}c"}) for ic, oc in pairs]
            layouts += [(ic, {"out": NCHW, "oc_block": oc}) for ic, oc in padded_pairs(workload, blocks)]
        elif is_depthwise(workload):
            layouts = []
            found += depthwise.FAMILY.candidates(workload, blocks, orders)
        else:  # blocks of the tensor's own list only: not a group's width below 8 (an odd layout)
            pairs = itertools.product(*([b for b in blocks if (c // groups) % b == 0]
                                        for c in (channels, out_channels)))
            layouts = [(ic, {"out": f"NCHW{oc}c"}) for ic, oc in pairs]
        for ic, out in layouts:
            for order in orders:
                knobs = {} if order == ORDERS[0] else {"order": order}
                found.append({"in": f"NCHW{ic}c", **out, **knobs})
        if include_nchw or not found:
            found.append({"in": NCHW, "out": NCHW})
        return found

    def validate_candidate(self, workload: dict[str, Any], candidate: dict[str, Any]) -> None:
        """Raise ProblemError unless ``candidate`` is a valid direct kernel of ``workload``."""
        what = f"conv2d candidate {candidate!r}"
        if not isinstance(candidate, dict) or "in" not in candidate or "out" not in candidate:
            raise ProblemError(f"{what} needs 'in' and 'out' layouts")
        in_block, out_block = layout_block(candidate["in"]), layout_block(candidate["out"])
        # (a 1-channel conv of one group is a plain one: the depthwise family takes groups > 1)
        if in_block is not None and workload["groups"] > 1 and is_depthwise(workload):
            raise ProblemError(f"{what}: a depthwise conv's blocked kernels are the depthwise family's "
                               "('algorithm': 'depthwise')")
        groups = workload["groups"]
        per_group = f", in each of its {groups} groups" if groups > 1 else ""
        check_divides(in_block, workload["data"][1] // groups, f"{what} input{per_group}")
        check_divides(out_block, workload["kernel"][0] // groups, f"{what} output{per_group}")
        if (in_block is None) != (out_block is None):
            raise ProblemError(f"{what}: in and out must both be blocked or both be NCHW")
        knobs = sorted(set(candidate) & set(SCHEDULE_KNOBS))
        if knobs and in_block is None:
            raise ProblemError(f"{what}: only a blocked conv2d has schedule knobs ({knobs})")
        unknown = sorted(set(candidate) - {"in", "out", *SCHEDULE_KNOBS})
        if unknown:
            raise ProblemError(f"{what}: unknown keys {unknown} (knobs: {list(SCHEDULE_KNOBS)})")
        if in_block is not None:
            check_knobs(candidate, self.knob_domain(workload, candidate), what)

    def knob_domain(self, workload: dict[str, Any], candidate: dict[str, Any]) -> dict[str, tuple]:
        """The values each knob of a blocked candidate may take on any target (:func:`~.space.check_knobs`):
        ``reg_n`` up to the output width, ``oc_tile`` dividing the output chunks (of a group), the
        ``reduction`` and ``unroll_kw`` where the kernel window has more than one tap (and column)."""
        out_block = layout_block(candidate["out"])
        out_width = conv2d_output_shape(workload)[3]
        chunks = workload["kernel"][0] // workload["groups"] // out_block
        kernel_h, kernel_w = workload["kernel"][2:]
        domain: dict[str, tuple] = {"reg_n": tuple(range(1, out_width + 1)), "oc_tile": divisors(chunks)}
        if kernel_h * kernel_w > 1:
            domain["reduction"] = REDUCTIONS
        if kernel_w > 1:
            domain["unroll_kw"] = (0, 1)
        domain["order"] = ORDERS
        return domain

    def space(self, workload: dict[str, Any], candidate: dict[str, Any], target: Any = None) -> ScheduleSpace:
        """The blocked kernel's knobs (:data:`SCHEDULE_KNOBS`) on ``target``; NCHW has none.

        ``reg_n`` takes the widths that split the row evenly (:func:`~.space.even_splits`), ``oc_tile``
        the divisors of the output chunks, such that the ``reg_n x oc_tile`` accumulators fit the
        target's registers beside ``oc_tile`` weight vectors and a broadcast input, and number at least
        4 (fewer leave the FMA pipes idle), or as many as the heuristic's.

        Example:
            >>> wl = {"op": "conv2d", "data": [1, 64, 7, 7], "kernel": [64, 64, 3, 3], "strides": [1, 1],
            ...       "padding": [1, 1, 1, 1], "dilation": [1, 1], "groups": 1, "dtype": "float32"}
            >>> avx512 = {"kind": "llvm", "mcpu": "znver4"}
            >>> space = FAMILY.space(wl, {"in": "NCHW16c", "out": "NCHW16c"}, avx512)
            >>> space.names, space.default()["reg_n"], dict(space.knobs)["oc_tile"], space.size
            (('reg_n', 'oc_tile', 'reduction', 'unroll_kw', 'order'), 7, (1, 2, 4), 80)
        """
        out_block = layout_block(candidate["out"])
        if layout_block(candidate["in"]) is None:
            return ScheduleSpace()
        domain = self.knob_domain(workload, candidate)
        lanes, registers = vector_registers(target)
        per_column = -(-out_block // lanes)
        out_width = conv2d_output_shape(workload)[3]
        default = {name: _DEFAULT_KNOBS.get(name) for name in domain}
        default["reg_n"] = register_tile(out_width, out_block, target)
        fewest = min(4, default["reg_n"] * per_column)

        def fits(point: dict[str, Any]) -> bool:
            accumulators = point["reg_n"] * point["oc_tile"] * per_column
            return accumulators >= fewest and registers_hold(accumulators, point["oc_tile"] * per_column + 1,
                                                             registers)

        return ScheduleSpace.build({**domain, "reg_n": even_splits(out_width)}, default, fits)

    def weight_shape(self, workload: dict[str, Any], candidate: dict[str, Any]) -> tuple[int, ...]:
        """OIHW for NCHW; ``(O/ob, I/ib, KH, KW, ib, ob)`` blocked (:func:`pack_kernel`; I: channels per
        group)."""
        in_block, out_block = layout_block(candidate["in"]), layout_block(candidate["out"])
        o, i, kh, kw = workload["kernel"]
        if in_block is None:
            return (o, i, kh, kw)
        return (o // out_block, i // in_block, kh, kw, in_block, out_block)

    def pack_weight(self, workload: dict[str, Any], candidate: dict[str, Any],
                    weight: np.ndarray) -> np.ndarray:
        """:func:`pack_kernel` of the OIHW weight."""
        return pack_kernel(weight, candidate)

    def compute(self, tvm, inputs: Sequence, workload: dict[str, Any], candidate: dict[str, Any]):
        """The conv's output tensor (no epilogue) from the :meth:`placeholders` ``inputs`` (data and
        kernel first) in the candidate's layouts.

        Blocked kernels' main block carries the candidate as its
        :data:`~layoutopt.tvm.kernels.common.CANDIDATE_ANNOTATION`, where the scheduler finds the knobs.
        """
        topi = tvm.topi
        data, kernel = inputs[:2]
        dtype = workload["dtype"]
        strides, padding, dilation = workload["strides"], workload["padding"], workload["dilation"]
        if layout_block(candidate["in"]) is None:
            if workload["groups"] == 1:
                return topi.nn.conv2d_nchw(data, kernel, strides, padding, dilation, out_dtype=dtype)
            if is_depthwise(workload):
                return topi.nn.depthwise_conv2d_nchw(data, kernel, strides, padding, dilation,
                                                     out_dtype=dtype)
            return topi.nn.group_conv2d_nchw(data, kernel, strides, padding, dilation, workload["groups"],
                                             dtype)
        return _conv2d_nchwc(tvm, data, kernel, workload, candidate)

    def schedule(self, func, target):
        """The direct conv2d schedule the PrimFunc's main block asks for (blocked or plain)."""
        if "conv2d_NCHWc" in block_names(import_tvm().s_tir.Schedule(func)):
            return schedule_nchwc(func, target)
        return schedule_nchw(func, target)


#: the family (:data:`~layoutopt.tvm.kernels.registry.FAMILIES` registers it)
FAMILY = DirectConv2d()

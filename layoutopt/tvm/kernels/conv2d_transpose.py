"""ConvTranspose (``relax.nn.conv2d_transpose``) as stride² direct sub-convolutions in blocked layouts.

A transposed convolution scatters each input pixel, times the kernel, onto the output: output row
``y`` (``y + pad_top = q * s + p``) gathers input rows ``q - j`` through kernel rows ``p + j * s``,
``j < ceil(KH / s)``. Each of the ``s x s`` output phases ``(p_y, p_x)`` is thus a direct
convolution of the input with a ``ceil(KH/s) x ceil(KW/s)`` sub-kernel: this family computes all of
them in one blocked kernel, the phase of each output pixel choosing its sub-kernel
(:func:`pack_weight` lays the weight out per phase, at compile time). Nothing is multiplied by the
zeros that TVM's generic legalization inserts between input pixels (stride² of the work, and the
zero-filled copy of the input). For a kernel the stride divides (2x2 or 4x4 with stride 2) every
tap is a real one; for 3x3 with stride 2 the sub-kernels are padded to 2x2 with zero taps (16
multiplies for 9 taps, against 36 with zero insertion).

For a kernel as large as its stride (PP-OCR's 2x2 stride-2 heads) each output pixel reads exactly
one input pixel: the kernel *is* GEMM + col2im, its scatter written in the output's indexing, with no
column buffer (GEMM + col2im with a column buffer, as ONNX Runtime runs it, writes ``KH*KW/s²``
times the output and reads it back).

Candidates (``"in"``/``"out"`` layouts, ``NCHW{b}c``; ``dilation`` 1):

- ``{"in": "NCHW8c", "out": "NCHW16c"}``: ungrouped, any dividing pair of blocks;
- ``{"in": "NCHW8c", "out": "NCHW", "oc_block": 8}``: where no block of 8 or more divides the output
  channels (a detector's 1-channel probability map), the kernel runs on filters zero-padded to the
  block and writes the real channels out as NCHW (``unpack_channels``, as :mod:`.padded` does for
  conv2d);
- ``{"in": "NCHW8c", "out": "NCHW8c"}`` for a depthwise one (``groups == C == O``), equal blocks;
- ``{"in": "NCHW", "out": "NCHW"}``: TVM's own legalization (zero insertion, generic schedule), the
  only kernel of other grouped or dilated ones.

Where the kernel overlaps itself (3x3 or 4x4 with stride 2), GEMM + col2im
(:mod:`.conv2d_transpose_gemm`, ``"algorithm": "gemm"``) is a choice beside these, and measured faster.

The workload (:func:`~.workload.validate_workload`) holds the weight as Relax and ONNX do, IOHW:
``{"op": "conv2d_transpose", "data": [N,C,H,W], "kernel": [C, O/groups, KH, KW], "strides": [s,s],
"padding": [top,left,bottom,right], "output_padding": [oh,ow], "dilation": [1,1], "groups": g}``,
with an optional fused ``"epilogue"`` (:data:`~.workload.EPILOGUE_STEPS`).

Example:
    >>> wl = {"op": "conv2d_transpose", "data": [1, 24, 80, 80], "kernel": [24, 24, 2, 2],
    ...       "strides": [2, 2], "dilation": [1, 1], "groups": 1}
    >>> [f"{c['in']}->{c['out']}" for c in FAMILY.candidates(wl, blocks=[8])]
    ['NCHW8c->NCHW8c', 'NCHW->NCHW']
    >>> pack_weight(np.zeros((24, 24, 3, 3)), {"in": "NCHW8c", "out": "NCHW8c"}, [2, 2]).shape
    (3, 3, 2, 2, 2, 2, 8, 8)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from ...errors import ProblemError
from .._tvm import import_tvm
from .common import (
    block_names,
    finish_register_tile,
    inline_into_last,
    parallel_vectorize,
    register_tile_output,
)
from .convolution import apply_epilogue
from .family import KernelFamily
from .isa import register_tile, vector_registers
from .padded import UNPACK_BLOCK
from .workload import (
    DEFAULT_BLOCKS,
    EPILOGUE_STEPS,
    NCHW,
    PADDED_BLOCKS,
    channel_blocks,
    check_divides,
    conv2d_transpose_output_shape,
    epilogue_shapes,
    layout_block,
    layout_shape,
    pack_data,
    unpack_data,
    vector_out_blocks,
)

__all__ = ["FAMILY", "MAIN_BLOCKS", "Conv2dTranspose", "is_depthwise_transpose", "pack_weight",
           "phase_taps", "transpose_reference"]

#: the main blocks of the blocked kernels: ungrouped, depthwise
MAIN_BLOCKS = ("conv2d_transpose_NCHWc", "conv2d_transpose_depthwise_NCHWc")


def phase_taps(kernel: int, stride: int) -> int:
    """Taps of each phase's sub-kernel along one axis: ``ceil(kernel / stride)``.

    Example:
        >>> phase_taps(2, 2), phase_taps(3, 2), phase_taps(4, 2)
        (1, 2, 2)
    """
    return -(-kernel // stride)


def is_depthwise_transpose(workload: dict[str, Any]) -> bool:
    """A transposed conv with one input and one output channel per group (``groups == C == O``)."""
    channels = workload["data"][1]
    return workload["groups"] == channels > 1 and workload["kernel"][1] == 1


def _out_channels(workload: dict[str, Any]) -> int:
    return workload["kernel"][1] * workload["groups"]


def _padded_channels(workload: dict[str, Any], candidate: dict[str, Any]) -> int:
    """The output channels its kernel computes: the real ones, or rounded up to ``oc_block``."""
    out_channels = _out_channels(workload)
    block = candidate.get("oc_block")
    return -(-out_channels // block) * block if block else out_channels


# --------------------------------------------------------------------------------------------------
# numpy: the reference and the weight


def transpose_reference(workload: dict[str, Any], inputs: Sequence[np.ndarray]) -> np.ndarray:
    """The logical NCHW output of a conv2d_transpose workload (with its epilogue), in float64 numpy,
    by the definition: each input pixel times the kernel added onto the output at ``stride`` steps.

    Example:
        >>> wl = {"data": [1, 1, 2, 2], "kernel": [1, 1, 2, 2], "strides": [2, 2], "padding": [0, 0, 0, 0],
        ...       "output_padding": [0, 0], "dilation": [1, 1], "groups": 1}
        >>> transpose_reference(wl, [np.arange(4.0).reshape(1, 1, 2, 2), np.ones((1, 1, 2, 2))])[0, 0]
        array([[0., 0., 1., 1.],
               [0., 0., 1., 1.],
               [2., 2., 3., 3.],
               [2., 2., 3., 3.]])
    """
    data, kernel, *extra = inputs
    n, channels, height, width = data.shape
    _, per_group, kernel_h, kernel_w = kernel.shape
    groups = workload["groups"]
    (sh, sw), (dh, dw) = workload["strides"], workload["dilation"]
    top, left, _, _ = workload["padding"]
    _, out_channels, out_h, out_w = conv2d_transpose_output_shape(workload)
    full_h = max((height - 1) * sh + dh * (kernel_h - 1) + 1, top + out_h)
    full_w = max((width - 1) * sw + dw * (kernel_w - 1) + 1, left + out_w)
    full = np.zeros((n, groups, per_group, full_h, full_w))
    grouped = data.astype(np.float64).reshape(n, groups, channels // groups, height, width)
    weight = kernel.astype(np.float64).reshape(groups, channels // groups, per_group, kernel_h, kernel_w)
    for ky in range(kernel_h):
        for kx in range(kernel_w):
            contribution = np.einsum("ngchw,gco->ngohw", grouped, weight[..., ky, kx])
            full[..., ky * dh: ky * dh + (height - 1) * sh + 1: sh,
                 kx * dw: kx * dw + (width - 1) * sw + 1: sw] += contribution
    out = full[..., top: top + out_h, left: left + out_w].reshape(n, out_channels, out_h, out_w)
    return apply_epilogue(workload, out, extra)


def pack_weight(weight: np.ndarray, candidate: dict[str, Any], strides: Sequence[int],
                depthwise: bool = False) -> np.ndarray:
    """An IOHW transposed-conv weight laid out per output phase for the candidate's blocked kernel.

    Ungrouped: ``(O/ob, C/ib, sh, sw, Jh, Jw, ib, ob)``, where ``[.., py, px, jy, jx, ..]`` holds kernel
    tap ``(py + (Jh-1-jy)*sh, px + (Jw-1-jx)*sw)`` (zero past the kernel) and ``J = ceil(K / s)``: the
    sub-kernel of phase ``(py, px)``, its taps in the order the kernel reads the input. With an
    ``"oc_block"`` the filters are zero-padded up to the block. Depthwise (``(C, 1, KH, KW)``):
    ``(C/b, sh, sw, Jh, Jw, b)``.

    Example:
        >>> pack_weight(np.zeros((16, 1, 4, 4)), {"in": "NCHW8c", "out": "NCHW8c"}, [2, 2], True).shape
        (2, 2, 2, 2, 2, 8)
    """
    weight = np.asarray(weight)
    sh, sw = (int(s) for s in strides)
    channels, per_group, kernel_h, kernel_w = weight.shape
    taps_h, taps_w = phase_taps(kernel_h, sh), phase_taps(kernel_w, sw)
    out_block = candidate.get("oc_block") or layout_block(candidate["out"])
    in_block = layout_block(candidate["in"])
    out_channels = channels if depthwise else -(-per_group // out_block) * out_block
    taps = np.zeros((channels, out_channels if not depthwise else 1, taps_h * sh, taps_w * sw), weight.dtype)
    taps[:, :per_group, :kernel_h, :kernel_w] = weight
    # (C, O, Jh, sh, Jw, sw), taps j counted backwards: the sub-kernel reads input rows q, q+1, ...
    taps = taps.reshape(channels, taps.shape[1], taps_h, sh, taps_w, sw)[:, :, ::-1, :, ::-1, :]
    if depthwise:  # (C/b, b, Jh, sh, Jw, sw) -> (C/b, sh, sw, Jh, Jw, b)
        blocked = taps[:, 0].reshape(channels // out_block, out_block, taps_h, sh, taps_w, sw)
        return np.ascontiguousarray(blocked.transpose(0, 3, 5, 2, 4, 1))
    blocked = taps.reshape(channels // in_block, in_block, out_channels // out_block, out_block,
                           taps_h, sh, taps_w, sw)
    # (cc, ci, oc, ob, jy, py, jx, px) -> (oc, cc, py, px, jy, jx, ci, ob)
    return np.ascontiguousarray(blocked.transpose(2, 0, 5, 7, 4, 6, 1, 3))


# --------------------------------------------------------------------------------------------------
# TE compute


def _phase_compute(tvm, data, weight, workload: dict[str, Any], candidate: dict[str, Any],
                   depthwise: bool):
    """Every output phase's sub-convolution in one blocked compute (see the module's docstring)."""
    te = tvm.te
    sh, sw = workload["strides"]
    top, left, _, _ = workload["padding"]
    height, width = workload["data"][2:]
    batch, _, out_h, out_w = conv2d_transpose_output_shape(workload)
    kernel_h, kernel_w = workload["kernel"][2:]
    taps_h, taps_w = phase_taps(kernel_h, sh), phase_taps(kernel_w, sw)
    # input rows q - j for j < J: J - 1 zero rows above, and below as many as the last output row
    # reads past the input (output padding)
    bottom = max(0, (out_h - 1 + top) // sh - (height - 1))
    right = max(0, (out_w - 1 + left) // sw - (width - 1))
    pads = (taps_h - 1, taps_w - 1, bottom, right)
    padded = data
    if any(pads):
        padded = tvm.topi.nn.pad(data, [0, 0, pads[0], pads[1], 0], [0, 0, bottom, right, 0], name="data_pad")
    # the output row's input row and phase by truncating division (the same, all indices being
    # non-negative): TVM 0.27's simplifier rewrites floordiv(floormod(f, H) + top, sh), which the
    # parallel loop fusing (n, chunk, row) makes of a floordiv, into floordiv(floormod(f + top, H),
    # sh), wrong on the last row (caught by the numpy check: 4x4 stride 2, padding 1, 8 channels)
    def row(y):
        return tvm.tirx.truncdiv(y + top, sh)

    def row_phase(y):
        return tvm.tirx.truncmod(y + top, sh)

    jy = te.reduce_axis((0, taps_h), name="jy")
    jx = te.reduce_axis((0, taps_w), name="jx")
    out_block = int(weight.shape[-1])
    out_chunks = int(weight.shape[0])
    if depthwise:
        return te.compute(
            (batch, out_chunks, out_h, out_w, out_block),
            lambda n, c, y, x, b: te.sum(
                padded[n, c, row(y) + jy, (x + left) // sw + jx, b]
                * weight[c, row_phase(y), (x + left) % sw, jy, jx, b], axis=[jy, jx]),
            name=MAIN_BLOCKS[1],
        )
    in_block = int(data.shape[4])
    c = te.reduce_axis((0, workload["data"][1]), name="ic")
    return te.compute(
        (batch, out_chunks, out_h, out_w, out_block),
        lambda n, o, y, x, b: te.sum(
            padded[n, c // in_block, row(y) + jy, (x + left) // sw + jx, c % in_block]
            * weight[o, c // in_block, row_phase(y), (x + left) % sw, jy, jx, c % in_block, b],
            axis=[c, jy, jx]),
        name=MAIN_BLOCKS[0],
    )


# --------------------------------------------------------------------------------------------------
# schedule


def transpose_register_tile(out_width: int, out_block: int, stride: int, target: Any = None) -> int:
    """Output columns per register tile: :func:`~.isa.register_tile`'s, rounded down to a multiple of
    the stride, so that every tile starts on the same column phase and its unrolled columns'
    input and weight indices fold to constants.

    Example:
        >>> transpose_register_tile(160, 8, 2, {"kind": "llvm", "mcpu": "znver3"})  # whole phases
        14
    """
    columns = register_tile(out_width, out_block, target)
    return max(stride, columns - columns % stride)


def schedule_transpose(func, target):
    """The blocked transposed conv: a ``[columns x out_block]`` register tile of one output row
    (:func:`transpose_register_tile`) accumulated over (input chunk, taps, input block), parallel over
    (n, output chunk, row), the output block vectorised and the tile's columns unrolled; the fused
    epilogue finished in the tile when the output block is one vector wide; a padded output's NCHW
    unpack and the epilogue after it in one pass."""
    tvm = import_tvm()
    try:
        return _schedule_transpose(func, target, fuse_epilogue=True)
    except tvm.s_tir.ScheduleError:  # the epilogue does not fit in the tile: run it after the conv
        return _schedule_transpose(func, target, fuse_epilogue=False)


def _schedule_transpose(func, target, fuse_epilogue: bool):
    tvm = import_tvm()
    sch = tvm.s_tir.Schedule(func)
    names = block_names(sch)
    main = next(name for name in names if name in MAIN_BLOCKS)
    depthwise = main == MAIN_BLOCKS[1]
    conv = sch.get_sblock(main)
    _, _, _, out_w, out_block = (int(d) for d in sch.get(conv).writes[0].source.shape)
    weight = next(r.source for r in sch.get(conv).reads if len(r.source.shape) == (6 if depthwise else 8))
    stride_w = int(weight.shape[2 if depthwise else 3])  # (.., sh, sw, Jh, Jw, ..)
    columns = transpose_register_tile(out_w, out_block, stride_w, target)
    if "data_pad" in names:
        parallel_vectorize(sch, sch.get_sblock("data_pad"))
    loops = sch.get_loops(conv)
    n, oc, y, x, b = loops[:5]
    xo, xi = sch.split(x, [None, columns])
    if depthwise:
        jy, jx = loops[5:]
        sch.reorder(n, oc, y, xo, jy, jx, xi, b)
        first_reduction = jy
    else:
        c, jy, jx = loops[5:]
        in_block = int(next(r.source.shape[4] for r in sch.get(conv).reads if len(r.source.shape) == 5))
        co, ci = sch.split(c, [None, in_block])
        sch.reorder(n, oc, y, xo, co, jy, jx, ci, xi, b)
        first_reduction = co
    rest = [name for name in names if name not in (main, "data_pad")]
    fuse = fuse_epilogue and UNPACK_BLOCK not in rest and out_block <= vector_registers(target)[0]
    tile, rest = register_tile_output(sch, conv, rest, fuse)
    finish_register_tile(sch, tile, xo, (n, oc, y), b, xi)
    inline_into_last(sch, rest)
    sch.decompose_reduction(conv, first_reduction)
    return sch


# --------------------------------------------------------------------------------------------------
# the family


class Conv2dTranspose(KernelFamily):
    """ConvTranspose by per-phase direct sub-convolutions in blocked layouts (see the module's docstring)."""

    op = "conv2d_transpose"
    main_blocks = MAIN_BLOCKS
    resident = ("kernel",)
    epilogue = EPILOGUE_STEPS

    def candidates(self, workload: dict[str, Any], blocks: Iterable[int] = DEFAULT_BLOCKS,
                   include_nchw: bool = True) -> list[dict[str, Any]]:
        """Every (NCHW{ib}c, NCHW{ob}c) pair of dividing ``blocks`` of an ungrouped transposed conv;
        where no block of 8 or more divides its output channels, also ``NCHW`` out from padded blocks
        (:data:`~.workload.PADDED_BLOCKS` among ``blocks``); equal blocks for a depthwise one; then
        ``NCHW`` (TVM's own kernel), the only one of other grouped or dilated convs."""
        blocks = list(blocks)
        channels, out_channels = workload["data"][1], _out_channels(workload)
        found: list[dict[str, Any]] = []
        if workload["dilation"] == [1, 1] and workload["groups"] == 1:
            ins = channel_blocks(channels, blocks)
            found = [{"in": f"NCHW{ib}c", "out": f"NCHW{ob}c"}
                     for ib in ins for ob in channel_blocks(out_channels, blocks)]
            if not vector_out_blocks(out_channels, blocks):
                found += [{"in": f"NCHW{ib}c", "out": NCHW, "oc_block": ob}
                          for ib in ins for ob in PADDED_BLOCKS if ob in blocks]
        elif workload["dilation"] == [1, 1] and is_depthwise_transpose(workload):
            found = [{"in": f"NCHW{b}c", "out": f"NCHW{b}c"} for b in channel_blocks(channels, blocks)]
        if include_nchw or not found:
            found.append({"in": NCHW, "out": NCHW})
        return found

    def validate_candidate(self, workload: dict[str, Any], candidate: dict[str, Any]) -> None:
        """Raise ProblemError unless ``candidate`` is one of this family's kernels for ``workload``."""
        what = f"conv2d_transpose candidate {candidate!r}"
        if not isinstance(candidate, dict) or "in" not in candidate or "out" not in candidate:
            raise ProblemError(f"{what} needs 'in' and 'out' layouts")
        unknown = sorted(set(candidate) - {"in", "out", "oc_block"})
        if unknown:
            raise ProblemError(f"{what}: unknown keys {unknown}")
        in_block, out_block = layout_block(candidate["in"]), layout_block(candidate["out"])
        padded = candidate.get("oc_block")
        if in_block is None:
            if out_block is not None or padded is not None:
                raise ProblemError(f"{what}: an NCHW input takes TVM's own kernel, NCHW out")
            return
        if workload["dilation"] != [1, 1]:
            raise ProblemError(f"{what}: a dilated transposed conv has the NCHW kernel only")
        check_divides(in_block, workload["data"][1], f"{what} input")
        out_channels = _out_channels(workload)
        if padded is not None:
            if isinstance(padded, bool) or not isinstance(padded, int) or padded < 2 or out_block is not None:
                raise ProblemError(f"{what}: 'oc_block' must be an integer block of 2 or more, 'out' NCHW")
            if out_channels % padded == 0:
                raise ProblemError(f"{what}: block {padded} divides the {out_channels} output channels: "
                                   f"use 'out': 'NCHW{padded}c'")
        elif out_block is None:
            raise ProblemError(f"{what}: a blocked input needs a blocked output (or 'oc_block')")
        else:
            check_divides(out_block, out_channels, f"{what} output")
        if workload["groups"] > 1 and not (is_depthwise_transpose(workload) and in_block == out_block):
            raise ProblemError(f"{what}: grouped transposed convs have the NCHW kernel only "
                               "(depthwise: equal blocks)")

    def logical_shapes(self, workload: dict[str, Any]) -> list[list[int]]:
        """NCHW data, IOHW kernel, then each epilogue operand."""
        return [workload["data"], workload["kernel"],
                *epilogue_shapes(workload.get("epilogue", []), conv2d_transpose_output_shape(workload))]

    def reference(self, workload: dict[str, Any], inputs: Sequence[np.ndarray]) -> np.ndarray:
        """:func:`transpose_reference`."""
        return transpose_reference(workload, inputs)

    def pack_weight(self, workload: dict[str, Any], candidate: dict[str, Any],
                    weight: np.ndarray) -> np.ndarray:
        """:func:`pack_weight` for a blocked candidate; the IOHW weight itself for NCHW."""
        if layout_block(candidate["in"]) is None:
            return np.ascontiguousarray(weight)
        return pack_weight(weight, candidate, workload["strides"], workload["groups"] > 1)

    def _weight_shape(self, workload: dict[str, Any], candidate: dict[str, Any]) -> tuple[int, ...]:
        in_block = layout_block(candidate["in"])
        if in_block is None:
            return tuple(workload["kernel"])
        (sh, sw), (kh, kw) = workload["strides"], workload["kernel"][2:]
        taps = (sh, sw, phase_taps(kh, sh), phase_taps(kw, sw))
        if workload["groups"] > 1:
            return (workload["data"][1] // in_block, *taps, in_block)
        out_block = candidate.get("oc_block") or layout_block(candidate["out"])
        return (_padded_channels(workload, candidate) // out_block, workload["data"][1] // in_block, *taps,
                in_block, out_block)

    def pack_inputs(self, workload: dict[str, Any], candidate: dict[str, Any],
                    inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """The data in the input layout, the packed weight, the epilogue operands in the output layout."""
        data, kernel, *extra = inputs
        return [pack_data(data, candidate["in"]), self.pack_weight(workload, candidate, kernel),
                *(pack_data(x, candidate["out"]) for x in extra)]

    def unpack_output(self, workload: dict[str, Any], candidate: dict[str, Any],
                      output: np.ndarray) -> np.ndarray:
        """The output buffer as a logical NCHW array."""
        return unpack_data(output, candidate["out"])

    def placeholders(self, tvm, workload: dict[str, Any], candidate: dict[str, Any]) -> list:
        """The data in the input layout, the weight of :meth:`pack_weight`, the epilogue operands in the
        output layout."""
        te = tvm.te
        dtype = workload["dtype"]
        out = conv2d_transpose_output_shape(workload)
        return [
            te.placeholder(layout_shape(workload["data"], candidate["in"]), dtype=dtype, name="data"),
            te.placeholder(self._weight_shape(workload, candidate), dtype=dtype, name="kernel"),
            *(te.placeholder(layout_shape(shape, candidate["out"]), dtype=dtype, name=f"epilogue_in{i}")
              for i, shape in enumerate(epilogue_shapes(workload.get("epilogue", []), out))),
        ]

    def compute(self, tvm, inputs: Sequence, workload: dict[str, Any], candidate: dict[str, Any]):
        """The output (no epilogue): TVM's legalization of ``relax.nn.conv2d_transpose`` for NCHW,
        else the per-phase blocked kernel (with a padded output, its real channels written as NCHW)."""
        topi = tvm.topi
        data, kernel = inputs[:2]
        if layout_block(candidate["in"]) is None:  # as relax's legalizer writes it
            if workload["dilation"] != [1, 1]:
                kernel = topi.nn.dilate(kernel, [1, 1, *workload["dilation"]], name="kernel_dilate")
            return topi.nn.group_conv2d_transpose_nchw(
                data, kernel, workload["strides"], workload["padding"], workload["dtype"],
                workload["output_padding"], workload["groups"])
        out = _phase_compute(tvm, data, kernel, workload, candidate, workload["groups"] > 1)
        block = candidate.get("oc_block")
        if block is None:
            return out
        return tvm.te.compute(conv2d_transpose_output_shape(workload),
                              lambda n, c, y, x: out[n, c // block, y, x, c % block], name=UNPACK_BLOCK)

    def schedule(self, func, target):
        """:func:`schedule_transpose`."""
        return schedule_transpose(func, target)


#: the family (:data:`~layoutopt.tvm.kernels.registry.FAMILIES` registers it)
FAMILY = Conv2dTranspose()

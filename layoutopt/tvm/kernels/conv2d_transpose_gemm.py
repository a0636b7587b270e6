"""ConvTranspose as a packed GEMM then col2im, in blocked layouts (candidates ``"algorithm": "gemm"``).

Every input pixel times the whole kernel is a GEMM: ``cols[pixel, (o, ky, kx)] = sum_c data[pixel, c]
* weight[c, o, ky, kx]``, computed by the 1x1 conv's packed GEMM schedule
(:func:`~.gemm.schedule_gemm`: its register tile of pixels times output blocks). col2im then adds
up, for each output pixel, the taps that land on it (``ceil(KH/s) x ceil(KW/s)`` of them, only the
real ones), vectorised along the output block, the fused epilogue in the same pass.

Against the per-phase direct kernel (:mod:`.conv2d_transpose`) it multiplies no zero taps (a 3x3
stride-2 kernel's phases padded to 2x2) and its GEMM has the better register tile, but it writes the
``KH*KW`` columns of every input pixel and reads them back. Measured cold on znver3
(``notes/transpose_algorithms.md``, a shared host: ratios within a workload), 64 -> 64
channels at 40x40: the fastest GEMM + col2im ran 3.9x faster than the fastest direct kernel on 3x3
stride 2, 1.4x on 4x4 stride 2, and 2.8x on 3x3 stride 2 from 128 channels at 20x20. Where the kernel
is as large as its stride (PP-OCR's 2x2 stride-2 heads) each output pixel takes one tap and the direct
kernel *is* this GEMM with its col2im folded into the output's indexing (a first version of this
family with its column buffer ran 4.5x slower there, warm). So it is a candidate only where the
kernel overlaps itself (a kernel side larger than its stride), for ungrouped, undilated transposed
convs, beside the direct ones: the solver picks.

Example:
    >>> wl = {"op": "conv2d_transpose", "data": [1, 64, 40, 40], "kernel": [64, 64, 3, 3],
    ...       "strides": [2, 2], "dilation": [1, 1], "groups": 1}
    >>> FAMILY.candidates(wl, blocks=[16])
    [{'in': 'NCHW16c', 'out': 'NCHW16c', 'algorithm': 'gemm'}]
    >>> FAMILY.applies({**wl, "kernel": [64, 64, 2, 2]})      # no overlap: the direct kernel is the GEMM
    False
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from ...errors import ProblemError
from .._tvm import import_tvm
from .common import CANDIDATE_ANNOTATION, inline_into_last
from .conv2d_transpose import Conv2dTranspose, phase_taps
from .gemm import schedule_gemm
from .workload import (
    DEFAULT_BLOCKS,
    channel_blocks,
    check_divides,
    conv2d_transpose_output_shape,
    layout_block,
    vector_out_blocks,
)

__all__ = ["ALGORITHM", "FAMILY", "MAIN_BLOCKS", "TransposeGemm", "pack_columns_weight"]

#: the candidates' ``"algorithm"`` value
ALGORITHM = "gemm"
#: the GEMM block (its col2im is ``conv2d_transpose_col2im``)
MAIN_BLOCKS = ("conv2d_transpose_gemm",)


def pack_columns_weight(weight: np.ndarray, out_block: int) -> np.ndarray:
    """An IOHW weight ``(C, O, KH, KW)`` as the GEMM's ``(O/ob*KH*KW, C, ob)``: column block
    ``(o // ob * KH + ky) * KW + kx`` holds filters ``o`` of that block at tap ``(ky, kx)``.

    Example:
        >>> pack_columns_weight(np.zeros((16, 8, 3, 3)), 8).shape
        (9, 16, 8)
    """
    channels, out_channels, kernel_h, kernel_w = weight.shape
    blocked = np.asarray(weight).reshape(channels, out_channels // out_block, out_block, kernel_h, kernel_w)
    return np.ascontiguousarray(blocked.transpose(1, 3, 4, 0, 2).reshape(-1, channels, out_block))


class TransposeGemm(Conv2dTranspose):
    """ConvTranspose as GEMM + col2im (see the module's docstring)."""

    algorithm = ALGORITHM
    main_blocks = MAIN_BLOCKS

    def applies(self, workload: dict[str, Any]) -> bool:
        """An ungrouped, undilated transposed conv whose kernel is larger than its stride along an axis,
        with an output block of 8 or more."""
        kernel, strides = workload["kernel"][2:], workload["strides"]
        return (workload["op"] == self.op and workload["groups"] == 1 and workload["dilation"] == [1, 1]
                and any(k > s for k, s in zip(kernel, strides, strict=True))
                and bool(vector_out_blocks(workload["kernel"][1], DEFAULT_BLOCKS)))

    def candidates(self, workload: dict[str, Any], blocks: Iterable[int] = DEFAULT_BLOCKS,
                   include_nchw: bool = True) -> list[dict[str, Any]]:
        """Every (NCHW{ib}c, NCHW{ob}c) pair of dividing ``blocks``, output blocks of 8 or more (the GEMM
        is vectorised along them); none where it does not apply. ``include_nchw`` is the direct
        family's option: this family has no NCHW kernel."""
        if not self.applies(workload):
            return []
        blocks = list(blocks)
        return [{"in": f"NCHW{ib}c", "out": f"NCHW{ob}c", "algorithm": ALGORITHM}
                for ib in channel_blocks(workload["data"][1], blocks)
                for ob in vector_out_blocks(workload["kernel"][1], blocks)]

    def validate_candidate(self, workload: dict[str, Any], candidate: dict[str, Any]) -> None:
        """ProblemError unless it applies and ``candidate`` is one of its blocked kernels."""
        what = f"conv2d_transpose gemm candidate {candidate!r}"
        if not self.applies(workload):
            raise ProblemError(f"{what}: GEMM + col2im takes an ungrouped, undilated transposed conv whose "
                               "kernel is larger than its stride")
        unknown = sorted(set(candidate) - {"in", "out", "algorithm"})
        if unknown or candidate.get("algorithm") != ALGORITHM:
            raise ProblemError(f"{what}: expected keys in, out and algorithm 'gemm' only")
        in_block, out_block = layout_block(candidate["in"]), layout_block(candidate["out"])
        if in_block is None or out_block is None:
            raise ProblemError(f"{what}: the kernel takes blocked layouts NCHW<b>c in and out")
        check_divides(in_block, workload["data"][1], f"{what} input")
        check_divides(out_block, workload["kernel"][1], f"{what} output")

    def pack_weight(self, workload: dict[str, Any], candidate: dict[str, Any],
                    weight: np.ndarray) -> np.ndarray:
        """:func:`pack_columns_weight` by the candidate's output block."""
        return pack_columns_weight(weight, layout_block(candidate["out"]))

    def _weight_shape(self, workload: dict[str, Any], candidate: dict[str, Any]) -> tuple[int, ...]:
        channels, out_channels, kernel_h, kernel_w = workload["kernel"]
        out_block = layout_block(candidate["out"])
        return (out_channels // out_block * kernel_h * kernel_w, channels, out_block)

    def compute(self, tvm, inputs: Sequence, workload: dict[str, Any], candidate: dict[str, Any]):
        """The GEMM's columns ``(N, O/ob*KH*KW, H, W, ob)`` (the block carrying the candidate), then
        col2im: each output pixel's real taps added up, ``(N, O/ob, OH, OW, ob)``."""
        te, tirx = tvm.te, tvm.tirx
        data, weight = inputs[:2]
        in_block = int(data.shape[4])
        blocks, channels, out_block = (int(d) for d in weight.shape)
        batch, out_channels, out_h, out_w = conv2d_transpose_output_shape(workload)
        height, width = workload["data"][2:]
        kernel_h, kernel_w = workload["kernel"][2:]
        sh, sw = workload["strides"]
        top, left, _, _ = workload["padding"]
        c = te.reduce_axis((0, channels), name="c")
        columns = te.compute(
            (batch, blocks, height, width, out_block),
            lambda n, k, y, x, b: te.sum(data[n, c // in_block, y, x, c % in_block] * weight[k, c, b],
                                         axis=c),
            name=MAIN_BLOCKS[0],
            attrs={CANDIDATE_ANNOTATION: dict(candidate)},
        )

        def col2im(n, o, y, x, b):
            # output row y + top = q * sh + p takes kernel rows p + j * sh from input rows q - j
            # (truncating division: every index is non-negative, see conv2d_transpose)
            q_y, p_y = tirx.truncdiv(y + top, sh), tirx.truncmod(y + top, sh)
            q_x, p_x = tirx.truncdiv(x + left, sw), tirx.truncmod(x + left, sw)
            total = tirx.const(0.0, workload["dtype"])
            for j_y in range(phase_taps(kernel_h, sh)):
                for j_x in range(phase_taps(kernel_w, sw)):
                    ky, kx, iy, ix = p_y + j_y * sh, p_x + j_x * sw, q_y - j_y, q_x - j_x
                    inside = tirx.all(ky < kernel_h, kx < kernel_w, iy >= 0, iy < height, ix >= 0, ix < width)
                    value = columns[n, (o * kernel_h + te.min(ky, kernel_h - 1)) * kernel_w
                                    + te.min(kx, kernel_w - 1),
                                    te.max(te.min(iy, height - 1), 0), te.max(te.min(ix, width - 1), 0), b]
                    total = total + tirx.if_then_else(inside, value, tirx.const(0.0, workload["dtype"]))
            return total

        return te.compute((batch, out_channels // out_block, out_h, out_w, out_block), col2im,
                          name="conv2d_transpose_col2im")

    def schedule(self, func, target):
        """The GEMM by :func:`~.gemm.schedule_gemm`; col2im and the fused epilogue in one pass after it,
        parallel over (n, output chunk, row), vectorised along the output block."""
        sch = import_tvm().s_tir.Schedule(func)
        schedule_gemm(sch, sch.get_sblock(MAIN_BLOCKS[0]), target, inline_into_last)
        return sch


#: the family (:data:`~layoutopt.tvm.kernels.registry.FAMILIES` registers it)
FAMILY = TransposeGemm()

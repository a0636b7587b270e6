"""1x1 conv2d as a packed GEMM, NCHW{ib}c in, NCHW{ob}c out, any stride (candidates ``"algorithm": "gemm"``).

A 1x1 convolution is a GEMM ``out[pixel, k] = sum_c data[pixel, c] * weight[c, k]``. The direct
NCHWc kernel computes it with AutoTVM's register tile: at most 8 consecutive output columns of one
row times one output-channel block. This family tiles the GEMM itself (:func:`~.isa.gemm_register_tile`):
``rows x columns`` output pixels (whole rows when the map is narrow) times several output-channel
blocks when the pixel tile is short, chosen for the most FMAs per load that the target's vector
registers hold. The weight is packed ``(O/ob, I, ob)`` (:func:`weight_transform`: the bytes of the
direct kernel's ``OIHW{ib}i{ob}o`` for a 1x1 kernel); the fused epilogue (bias, residual add,
relu) is finished in the register tile.

How it compares with the direct kernel on ResNet-50's 1x1 layers, per ISA, in time and in error:
``benchmarks/results/algorithms.md`` and ``algorithms_error.md``.

The same GEMM also runs in plain NCHW (``{"in": "NCHW", "out": "NCHW", "algorithm": "gemm"}``, stride 1),
vectorised along the pixels instead: ``out[k, pixel] = sum_c weight[k, c] * data[c, pixel]``, a
register tile of one output channel times whole vectors of contiguous pixels
(:func:`~.isa.pixel_register_tile`), each weight broadcast, the weight OIHW as it comes. It is for the
channel counts no block divides (ShuffleNetV2's 58, 116, 232: 29 times 2, 4, 8), which otherwise run
the direct NCHW kernel (vectorised along one row's columns, 14 of them at 28x28, which LLVM splits
into scalar inserts) or a 4-channel block; ONNX Runtime runs them so too (its NCHWc transformer
leaves convs whose channels are not a multiple of 4 in NCHW, to its SGEMM). It applies where the
output map has a run of 8 pixels that tiles it (:func:`~.isa.pixel_tiles`: 28x28, 56x56; not 14x14
or 7x7). On ShuffleNetV2's 1x1 58->58 at 28x28 (znver3, 2 threads, warm) it ran 0.072 ms where the
direct NCHW kernel ran 0.33.

Grouped 1x1 convs (ShuffleNet v1's, groups of 3 or 8) run the same GEMM per group: blocked where the
blocks divide the channels per group (each output block then reads its own group's input blocks, a
register tile never spans two groups), and in NCHW (each output channel reads its group's input
channels: any channel count). ``benchmarks/results/shufflenet.md`` has them on ShuffleNet v1.

Example:
    >>> wl = {"op": "conv2d", "data": [1, 64, 56, 56], "kernel": [256, 64, 1, 1], "strides": [1, 1],
    ...       "padding": [0, 0, 0, 0], "dilation": [1, 1], "groups": 1, "dtype": "float32"}
    >>> FAMILY.applies(wl)
    True
    >>> for candidate in FAMILY.candidates(wl, blocks=[16]):   # blocked, then NCHW
    ...     print(candidate)
    {'in': 'NCHW16c', 'out': 'NCHW16c', 'algorithm': 'gemm'}
    {'in': 'NCHW', 'out': 'NCHW', 'algorithm': 'gemm'}
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from ...errors import ProblemError
from .._tvm import import_tvm
from .common import (
    CANDIDATE_ANNOTATION,
    annotated_candidate,
    annotated_workload,
    block_names,
    kernel_annotations,
    register_tile_output,
    schedule_epilogue,
)
from .convolution import LOOP_ORDERS, BlockedConv2dAlgorithm, blocked_weight
from .isa import (
    MAX_ACCUMULATORS,
    MIN_PIXEL_LANES,
    gemm_register_tile,
    gemm_tile_fits,
    pixel_register_tile,
    pixel_tiles,
    vector_registers,
)
from .space import ScheduleSpace, check_knobs, divisors, even_splits
from .workload import DEFAULT_BLOCKS, NCHW, conv2d_output_shape, is_depthwise, layout_block, validate_workload

__all__ = ["ALGORITHM", "FAMILY", "MAIN_BLOCKS", "NCHW_CANDIDATE", "NCHW_KNOBS", "ORDERS", "SCHEDULE_KNOBS",
           "Gemm", "schedule_gemm", "schedule_gemm_nchw", "weight_transform"]

#: the candidates' ``"algorithm"`` value
ALGORITHM = "gemm"
#: the GEMM block (carrying the candidate as its ``CANDIDATE_ANNOTATION``), by which
#: :mod:`~layoutopt.tvm.kernels.module` recognises the kernel
MAIN_BLOCKS = ("conv2d_1x1_gemm", "conv2d_1x1_gemm_nchw")
#: the candidate of the GEMM in plain NCHW, vectorised along the pixels
NCHW_CANDIDATE = {"in": NCHW, "out": NCHW, "algorithm": ALGORITHM}
#: values of the ``"order"`` schedule knob, the default first: the parallel loops run over
#: output-channel blocks, then pixel tiles (``"oc"``), or pixel tiles, then channel blocks (``"rows"``)
ORDERS = LOOP_ORDERS
#: the schedule knobs of a blocked candidate (its :meth:`space <Gemm.space>`, in this order): the
#: register tile's rows, columns and output-channel blocks (default :func:`~.isa.gemm_register_tile`),
#: then ``order``. The NCHW kernel's: :data:`NCHW_KNOBS`.
SCHEDULE_KNOBS = ("reg_h", "reg_n", "oc_tile", "order")
#: the schedule knobs of the NCHW candidate: its pixel tile's rows and columns and the vector's lanes
#: (default :func:`~.isa.pixel_register_tile`)
NCHW_KNOBS = ("reg_h", "reg_n", "lanes")
#: the vector widths (floats) the NCHW kernel may run its pixels in
PIXEL_LANES = (4, 8, 16)


def weight_transform(kernel_oihw: np.ndarray, candidate: dict[str, Any]) -> np.ndarray:
    """The OIHW 1x1 weight packed ``(O/ob, I, ob)`` for ``candidate`` (``ob`` its output block).

    Example:
        >>> weight_transform(np.ones((32, 16, 1, 1), "float32"), {"in": "NCHW16c", "out": "NCHW16c",
        ...                  "algorithm": "gemm"}).shape
        (2, 16, 16)
    """
    kernel_oihw, out_block, o, i = blocked_weight(kernel_oihw, candidate, (1, 1), "gemm weight_transform")
    return np.ascontiguousarray(kernel_oihw.reshape(o // out_block, out_block, i).transpose(0, 2, 1))


class Gemm(BlockedConv2dAlgorithm):
    """1x1 conv2d as a packed GEMM (see the module's docstring)."""

    algorithm = ALGORITHM
    main_blocks = MAIN_BLOCKS
    orders = ORDERS
    options = SCHEDULE_KNOBS[:-1]
    requirement = "the GEMM kernel needs a 1x1, unpadded conv2d, not depthwise"

    def fits(self, workload: dict[str, Any]) -> bool:
        """A 1x1 unpadded kernel, any stride (``FAMILY.applies(wl)``: see the module's example)."""
        return workload["kernel"][2:] == [1, 1] and not any(workload["padding"])

    def applies(self, workload: dict[str, Any]) -> bool:
        """A 1x1 unpadded conv2d, ungrouped or grouped but not depthwise (one GEMM per group).

        Example:
            >>> wl = {"op": "conv2d", "data": [1, 60, 28, 28], "kernel": [240, 20, 1, 1], "strides": [1, 1],
            ...       "padding": [0, 0, 0, 0], "dilation": [1, 1], "groups": 3, "dtype": "float32"}
            >>> FAMILY.applies(wl), FAMILY.applies({**wl, "kernel": [60, 1, 1, 1], "groups": 60})
            (True, False)
        """
        workload = validate_workload(workload)
        return workload["op"] == "conv2d" and not is_depthwise(workload) and self.fits(workload)

    def fits_nchw(self, workload: dict[str, Any]) -> bool:
        """Does the NCHW kernel (vectorised along the pixels) compute this conv: a 1x1, unpadded,
        stride-1 conv (grouped or not, not depthwise) whose output map some :func:`~.isa.pixel_tiles`
        tile covers?

        Example:
            >>> wl = {"op": "conv2d", "data": [1, 58, 28, 28], "kernel": [58, 58, 1, 1], "strides": [1, 1],
            ...       "padding": [0, 0, 0, 0], "dilation": [1, 1], "groups": 1, "dtype": "float32"}
            >>> FAMILY.fits_nchw(wl), FAMILY.fits_nchw({**wl, "data": [1, 58, 14, 14]})
            (True, False)
        """
        _, _, out_h, out_w = conv2d_output_shape(workload)
        return self.applies(workload) and workload["strides"] == [1, 1] and bool(pixel_tiles(out_h, out_w))

    def candidates(self, workload: dict[str, Any], blocks: Iterable[int] = DEFAULT_BLOCKS,
                   orders: Iterable[str] = ORDERS[:1]) -> list[dict[str, Any]]:
        """GEMM candidates of a 1x1 conv2d: every (NCHW{ib}c, NCHW{ob}c) pair of dividing ``blocks``
        (output blocks of 8 or more: the GEMM is vectorised along them), once per loop order in
        ``orders`` (the default order has no ``"order"`` key), then :data:`NCHW_CANDIDATE` where it
        :meth:`fits_nchw`; none where it does not apply.

        Example:
            >>> wl = {"op": "conv2d", "data": [1, 32, 7, 7], "kernel": [64, 32, 1, 1], "strides": [1, 1],
            ...       "padding": [0, 0, 0, 0], "dilation": [1, 1], "groups": 1, "dtype": "float32"}
            >>> for candidate in FAMILY.candidates(wl, blocks=[16, 32]):
            ...     print(candidate)
            {'in': 'NCHW16c', 'out': 'NCHW16c', 'algorithm': 'gemm'}
            {'in': 'NCHW16c', 'out': 'NCHW32c', 'algorithm': 'gemm'}
            {'in': 'NCHW32c', 'out': 'NCHW16c', 'algorithm': 'gemm'}
            {'in': 'NCHW32c', 'out': 'NCHW32c', 'algorithm': 'gemm'}
            >>> FAMILY.candidates({**wl, "kernel": [64, 32, 3, 3], "padding": [1, 1, 1, 1]})   # not 1x1
            []
            >>> FAMILY.candidates({**wl, "data": [1, 58, 28, 28], "kernel": [58, 58, 1, 1]})  # no block: NCHW
            [{'in': 'NCHW', 'out': 'NCHW', 'algorithm': 'gemm'}]
        """
        nchw = [dict(NCHW_CANDIDATE)] if self.fits_nchw(workload) else []
        return self.blocked_candidates(workload, blocks, orders) + nchw

    def validate_candidate(self, workload: dict[str, Any], candidate: dict[str, Any]) -> None:
        """ProblemError unless ``candidate`` is one of its blocked kernels of ``workload``, or its NCHW
        kernel (:data:`NCHW_CANDIDATE`, with a pixel tile's :data:`NCHW_KNOBS` or none) where it
        :meth:`fits_nchw`."""
        if not _is_nchw(candidate):
            return super().validate_candidate(workload, candidate)
        what = f"{self.algorithm} candidate {candidate!r} of {workload!r}"
        plain = {key: value for key, value in candidate.items() if key not in NCHW_KNOBS}
        if plain != NCHW_CANDIDATE:
            raise ProblemError(f"{what}: the NCHW GEMM is {NCHW_CANDIDATE} (no other keys than its knobs "
                               f"{list(NCHW_KNOBS)})")
        if not self.fits_nchw(workload):
            raise ProblemError(f"{what}: the NCHW GEMM needs a 1x1, unpadded, stride-1 conv2d, not "
                               "depthwise, whose output map a whole number of 8-pixel vectors tiles (part "
                               "of a row, or whole rows)")
        _, _, out_h, out_w = conv2d_output_shape(workload)
        domain = {"reg_h": divisors(out_h), "reg_n": divisors(out_w), "lanes": PIXEL_LANES}
        check_knobs(candidate, domain, what)
        if all(key in candidate for key in NCHW_KNOBS):  # (a knob it omits is the target's default)
            _check_pixel_tile(out_h, out_w, *(candidate[key] for key in NCHW_KNOBS), what)

    def knob_domain(self, workload: dict[str, Any], candidate: dict[str, Any]) -> dict[str, tuple]:
        """The values each knob of a blocked candidate may take on any target: ``reg_h`` dividing the
        output rows, ``reg_n`` up to the output width, ``oc_tile`` up to the output blocks (a last tile
        may be partial, of columns and of blocks), ``order`` among :data:`ORDERS`."""
        _, out_channels, out_h, out_w = conv2d_output_shape(workload)
        out_outer = out_channels // layout_block(candidate["out"]) // workload["groups"]
        # a grouped GEMM's tile takes whole blocks of one group: a count dividing the group's
        tiles = tuple(range(1, out_outer + 1)) if workload["groups"] == 1 else divisors(out_outer)
        return {"reg_h": divisors(out_h), "reg_n": tuple(range(1, out_w + 1)), "oc_tile": tiles,
                "order": ORDERS}

    def space(self, workload: dict[str, Any], candidate: dict[str, Any], target: Any = None) -> ScheduleSpace:
        """Its knobs on ``target``. Blocked (:data:`SCHEDULE_KNOBS`): columns splitting the row evenly
        (:func:`~.space.even_splits`), several rows only with whole rows, block counts splitting the
        output blocks evenly, a partial last tile of columns or of blocks but not both (those ran
        0.3-0.6x: :func:`~.isa.gemm_register_tile`), 4 accumulators or more (or the heuristic's count)
        that :func:`~.isa.gemm_tile_fits` the target's registers. NCHW (:data:`NCHW_KNOBS`): every
        :func:`~.isa.pixel_tiles` tile in vectors of the target's width or 8, its accumulators beside a
        broadcast weight and a load.

        Example:
            >>> wl = {"op": "conv2d", "data": [1, 1024, 14, 14], "kernel": [256, 1024, 1, 1],
            ...       "strides": [1, 1], "padding": [0, 0, 0, 0], "dilation": [1, 1], "groups": 1}
            >>> space = FAMILY.space(wl, {"in": "NCHW16c", "out": "NCHW16c", "algorithm": "gemm"},
            ...                      {"kind": "llvm", "mcpu": "znver4"})
            >>> space.default(), space.size
            ({'reg_h': 1, 'reg_n': 7, 'oc_tile': 2, 'order': 'oc'}, 50)
        """
        _, out_channels, out_h, out_w = conv2d_output_shape(workload)
        lanes, registers = vector_registers(target)
        if _is_nchw(candidate):
            rows, columns, vector = pixel_register_tile(out_h, out_w, target)
            most = min(MAX_ACCUMULATORS, registers - 2)
            tiles = {(r, c, width): None for width in dict.fromkeys((lanes, MIN_PIXEL_LANES))
                     for r, c in pixel_tiles(out_h, out_w, width, most)}
            return ScheduleSpace.build({"reg_h": sorted({r for r, _, _ in tiles}),
                                        "reg_n": sorted({c for _, c, _ in tiles}),
                                        "lanes": sorted({w for _, _, w in tiles})},
                                       {"reg_h": rows, "reg_n": columns, "lanes": vector},
                                       lambda p: (p["reg_h"], p["reg_n"], p["lanes"]) in tiles)
        out_block = layout_block(candidate["out"])
        groups = workload["groups"]
        out_outer = out_channels // out_block // groups  # (a grouped GEMM tiles one group's blocks)
        per_block = -(-out_block // lanes)
        rows, columns, blocks = gemm_register_tile(out_h, out_w, out_outer, out_block, target,
                                                   partial_blocks=groups == 1,
                                                   in_channels=workload["kernel"][1])
        fewest = min(4, rows * columns * blocks * per_block)

        def fits(point: dict[str, Any]) -> bool:
            pixels = point["reg_h"] * point["reg_n"]
            partial = bool(out_w % point["reg_n"]), bool(out_outer % point["oc_tile"])
            return ((point["reg_h"] == 1 or point["reg_n"] == out_w) and not all(partial)
                    and pixels * point["oc_tile"] * per_block >= fewest
                    and gemm_tile_fits(pixels, point["oc_tile"], out_block, target))

        return ScheduleSpace.build({"reg_h": divisors(out_h), "reg_n": even_splits(out_w),
                                    "oc_tile": even_splits(out_outer) if groups == 1 else divisors(out_outer),
                                    "order": ORDERS},
                                   {"reg_h": rows, "reg_n": columns, "oc_tile": blocks, "order": ORDERS[0]},
                                   fits)

    def weight_shape(self, workload: dict[str, Any], candidate: dict[str, Any]) -> tuple[int, ...]:
        """``(O/ob, I, ob)``: :func:`weight_transform`'s output (I: the input channels per group); OIHW
        for the NCHW kernel."""
        if _is_nchw(candidate):
            return tuple(workload["kernel"])
        out_block = layout_block(candidate["out"])
        o, i = workload["kernel"][:2]
        return (o // out_block, i, out_block)

    def pack_weight(self, workload: dict[str, Any], candidate: dict[str, Any],
                    weight: np.ndarray) -> np.ndarray:
        """:func:`weight_transform`; the OIHW weight unchanged for the NCHW kernel."""
        if _is_nchw(candidate):
            return np.ascontiguousarray(weight)
        return weight_transform(weight, candidate)

    def compute(self, tvm, inputs: Sequence, workload: dict[str, Any], candidate: dict[str, Any]):
        """The 1x1 conv2d as a TE tensor of shape (N, O/ob, OH, OW, ob), from the data
        (N, C/ib, H, W, ib) and weight (O/ob, C, ob) placeholders (NCHW kernel: NCHW from NCHW data and
        the OIHW weight), without its epilogue; the block carries ``candidate`` as its
        ``CANDIDATE_ANNOTATION``."""
        te = tvm.te
        data, weight = inputs[:2]
        self.validate_candidate(workload, candidate)
        groups = workload["groups"]
        out_channels = workload["kernel"][0]
        if _is_nchw(candidate):
            per_group = workload["kernel"][1]
            c = te.reduce_axis((0, per_group), name="c")

            def first_channel(k):  # of output channel k's group
                return 0 if groups == 1 else k // (out_channels // groups) * per_group

            return te.compute(
                conv2d_output_shape(workload),
                lambda n, k, y, x: te.sum(data[n, first_channel(k) + c, y, x] * weight[k, c, 0, 0], axis=c),
                name=MAIN_BLOCKS[1],
                attrs=kernel_annotations(workload, candidate),
            )
        in_block = int(data.shape[4])
        out_outer, channels, out_block = (int(d) for d in weight.shape)
        batch, _, out_h, out_w = conv2d_output_shape(workload)
        stride_h, stride_w = workload["strides"]
        c = te.reduce_axis((0, channels), name="c")

        def first_block(ko):  # the first input block of output block ko's group
            return 0 if groups == 1 else ko // (out_outer // groups) * (channels // in_block)

        return te.compute(
            (batch, out_outer, out_h, out_w, out_block),
            lambda n, ko, y, x, ki: te.sum(
                data[n, first_block(ko) + c // in_block, y * stride_h, x * stride_w, c % in_block]
                * weight[ko, c, ki], axis=c
            ),
            name=MAIN_BLOCKS[0],
            attrs=kernel_annotations(workload, candidate),
        )

    def schedule(self, func, target: Any = None):
        """The schedule of a PrimFunc holding :meth:`compute`, optionally followed by a fused
        elementwise epilogue; returns the ``s_tir.Schedule``.

        Parallel over (n, channel-block group, pixel-row group) (order ``"oc"``) or over (n, pixel-row
        group, channel-block group) (order ``"rows"``); per :func:`~.isa.gemm_register_tile` tile, the
        reduction over the input channels with the tile's accumulators in registers, then the epilogue
        written from the tile, vectorised along the output block.
        """
        sch = import_tvm().s_tir.Schedule(func)
        conv = _main_block(sch)
        scheduler = schedule_gemm_nchw if sch.get(conv).name_hint == MAIN_BLOCKS[1] else schedule_gemm
        scheduler(sch, conv, target, lambda sch, names: schedule_epilogue(sch, names, set()))
        return sch


def schedule_gemm(sch, conv, target: Any, finish: Callable[[Any, list[str]], None]) -> None:
    """Schedule the GEMM block ``conv`` of ``sch`` (loops ``(n, ko, y, x, ki | c)``, input
    ``(N, C/ib, H, W, ib)``, output vectorised along its block ``ki``; its candidate's ``"order"`` on
    its annotation) as :meth:`Gemm.schedule` describes; the blocks after it that the register tile
    cannot finish go to ``finish(sch, names)`` (:func:`~.common.schedule_epilogue`: each on its
    own; :func:`~.common.inline_into_last`: one pass).
    """
    main = sch.get(conv).name_hint
    candidate = annotated_candidate(sch, conv) or {}
    rows_outer = candidate.get("order", ORDERS[0]) == "rows"
    _, out_outer, out_h, out_w, out_block = (int(d) for d in sch.get(conv).writes[0].source.shape)
    in_block = next(int(r.source.shape[4]) for r in sch.get(conv).reads if len(r.source.shape) == 5)
    n, ko, y, x, ki, c = sch.get_loops(conv)
    # a grouped GEMM's tile takes blocks of one group (they share its input broadcasts): a count
    # dividing the group's
    groups = int((annotated_workload(sch, conv) or {}).get("groups", 1))
    rows, columns, blocks = gemm_register_tile(out_h, out_w, out_outer // groups, out_block, target,
                                               partial_blocks=groups == 1, in_channels=int(sch.get(c).extent))
    rows, columns, blocks = (int(candidate.get("reg_h", rows)), int(candidate.get("reg_n", columns)),
                             int(candidate.get("oc_tile", blocks)))
    koo, koi = sch.split(ko, [None, blocks])
    yo, yi = sch.split(y, [None, rows])
    xo, xi = sch.split(x, [None, columns])
    # (c outer, c inner) by the input block: the data index (c // ib, c % ib) becomes two loop
    # variables; one loop over c would compute a division per reduction step
    co, ci = sch.split(c, [None, in_block])
    outer = (n, yo, koo) if rows_outer else (n, koo, yo)
    sch.reorder(*outer, xo, co, ci, koi, yi, xi, ki)
    # the fused epilogue (bias, relu, residual add) is finished per register tile. Unlike the direct
    # kernel's, also for blocks wider than a vector: with bias + add + relu, 1x1 convs at 56x56 ran
    # 1.4-1.9x faster so, at 14x14 1.1x, and at 7x7 0.93-1.05x (one thread, AVX-512)
    epilogue = [name for name in block_names(sch) if name != main]
    tile, epilogue = register_tile_output(sch, conv, epilogue)
    sch.reverse_compute_at(tile, xo)
    sch.parallel(sch.fuse(*outer))
    sch.vectorize(sch.get_loops(tile)[-1])
    for loop in (koi, yi, xi):
        sch.unroll(loop)
    sch.vectorize(ki)
    finish(sch, epilogue)
    sch.decompose_reduction(conv, co)


def schedule_gemm_nchw(sch, conv, target: Any, finish: Callable[[Any, list[str]], None]) -> None:
    """Schedule the NCHW GEMM block ``conv`` of ``sch`` (loops ``(n, k, y, x | c)``) by its
    :func:`~.isa.pixel_register_tile` tile: parallel over (n, pixel tile, output channel); per tile,
    the reduction over the input channels into one accumulator per vector of ``lanes`` contiguous
    pixels, then the epilogue written from the tile, vectorised along the pixels; ``finish`` as
    :func:`schedule_gemm`'s.
    """
    main = sch.get(conv).name_hint
    _, _, out_h, out_w = (int(d) for d in sch.get(conv).writes[0].source.shape)
    candidate = annotated_candidate(sch, conv) or {}
    tile_shape = pixel_register_tile(out_h, out_w, target)
    if tile_shape is None:
        raise ProblemError(f"gemm schedule: no pixel tile covers the {out_h}x{out_w} output of {main}")
    rows, columns, lanes = (int(candidate.get(knob, value)) for knob, value in zip(NCHW_KNOBS, tile_shape,
                                                                                   strict=True))
    _check_pixel_tile(out_h, out_w, rows, columns, lanes, f"gemm schedule of {main}")
    n, k, y, x, c = sch.get_loops(conv)
    yo, yi = sch.split(y, [None, rows])
    xo, xi = sch.split(x, [None, columns])
    # channels inside pixel tiles: the tile's input (all channels) stays in L1 while each uses it
    sch.reorder(n, yo, xo, k, c, yi, xi)
    # the tile's pixels are contiguous (part of a row, or whole rows): one run cut into vectors, each
    # one load (the flattened index y * W + x simplifies back to the run's offset)
    vectors, lane = sch.split(sch.fuse(yi, xi), [None, lanes])
    epilogue = [name for name in block_names(sch) if name != main]
    tile, epilogue = register_tile_output(sch, conv, epilogue)
    sch.reverse_compute_at(tile, k, preserve_unit_loops=True)  # (rows, columns) stay two loops
    sch.parallel(sch.fuse(n, yo, xo, k))
    *_, tile_rows, tile_columns = sch.get_loops(tile)
    sch.vectorize(sch.split(sch.fuse(tile_rows, tile_columns), [None, lanes])[1])
    sch.unroll(vectors)
    sch.vectorize(lane)
    finish(sch, epilogue)
    sch.decompose_reduction(conv, c)


def _check_pixel_tile(out_h: int, out_w: int, rows: int, columns: int, lanes: int, what: str) -> None:
    """ProblemError naming ``what`` unless ``rows`` x ``columns`` is a run of whole ``lanes``-wide vectors
    that tiles the output map (:func:`~.isa.pixel_tiles`)."""
    tiles = pixel_tiles(out_h, out_w, lanes, out_h * out_w)
    if (rows, columns) not in tiles:
        raise ProblemError(f"{what}: the pixel tile reg_h x reg_n = {rows} x {columns} must be a run of "
                           f"whole {lanes}-lane vectors that tiles the {out_h}x{out_w} map: one of {tiles}")


def _is_nchw(candidate: dict[str, Any]) -> bool:
    return candidate.get("in") == NCHW and candidate.get("out") == NCHW


def _main_block(sch):
    for block in sch.get_child_blocks(sch.get_sblock("root")):
        if sch.get(block).name_hint in MAIN_BLOCKS and CANDIDATE_ANNOTATION in sch.get(block).annotations:
            return block
    raise ProblemError(f"gemm schedule: no {MAIN_BLOCKS[0]} block carrying {CANDIDATE_ANNOTATION}")


#: the family (:data:`~layoutopt.tvm.kernels.registry.FAMILIES` registers it)
FAMILY = Gemm()

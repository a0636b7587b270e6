"""1x1 conv2d as a packed GEMM, NCHW{ib}c in, NCHW{ob}c out, any stride (candidates ``"algorithm": "gemm"``).

A 1x1 convolution is a GEMM ``out[pixel, k] = sum_c data[pixel, c] * weight[c, k]``. The direct
NCHWc kernel computes it with AutoTVM's register tile: at most 8 consecutive output columns of one
row times one output-channel block. This family tiles the GEMM itself (:func:`register_tile`):
``rows x columns`` output pixels (whole rows when the map is narrow) times several output-channel
blocks when the pixel tile is short, chosen for the most FMAs per load that the target's vector
registers hold. The weight is packed ``(O/ob, I, ob)`` (:func:`weight_transform`: the bytes of the
direct kernel's ``OIHW{ib}i{ob}o`` for a 1x1 kernel); the fused epilogue (bias, residual add,
relu) is finished in the register tile.

Measured (``benchmarks/results/algorithms.md``): ResNet-50's 1x1 layers ran 1.0-1.3x faster than the
best direct kernel, most at 56x56 and 28x28; numerically the same as the direct kernel.

Example::

    wl = {"op": "conv2d", "data": [1, 64, 56, 56], "kernel": [256, 64, 1, 1], "strides": [1, 1],
          "padding": [0, 0, 0, 0], "dilation": [1, 1], "groups": 1, "dtype": "float32"}
    applies(wl)                                  # True
    candidates(wl, blocks=[16])                  # [{'in': 'NCHW16c', 'out': 'NCHW16c', 'algorithm': 'gemm'}]
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from ...errors import ProblemError
from .._tvm import import_tvm
from . import conv2d
from .common import (
    CANDIDATE_ANNOTATION,
    annotated_candidate,
    block_names,
    register_tile_output,
    schedule_epilogue,
)
from .isa import vector_registers
from .workload import (
    DEFAULT_BLOCKS,
    channel_blocks,
    check_divides,
    conv2d_output_shape,
    layout_block,
    validate_workload,
    vector_out_blocks,
)

__all__ = ["ALGORITHM", "MAIN_BLOCKS", "ORDERS", "applies", "candidates", "compute", "register_tile",
           "schedule", "validate_candidate", "weight_shape", "weight_transform"]

#: the candidates' ``"algorithm"`` value
ALGORITHM = "gemm"
#: the GEMM block (carrying the candidate as its ``CANDIDATE_ANNOTATION``), by which
#: :data:`~layoutopt.tvm.kernels.module.RULES` recognises the kernel
MAIN_BLOCKS = ("conv2d_1x1_gemm",)
#: values of the ``"order"`` schedule knob, the default first: the parallel loops run over
#: output-channel blocks, then pixel tiles (``"oc"``), or pixel tiles, then channel blocks (``"rows"``)
ORDERS = ("oc", "rows")


def applies(workload: dict[str, Any]) -> bool:
    """Is ``workload`` a 1x1, unpadded, ungrouped conv2d (any stride)?

    Example::

        applies({"op": "conv2d", "data": [1, 64, 56, 56], "kernel": [256, 64, 1, 1], "strides": [2, 2],
                 "padding": [0, 0, 0, 0], "dilation": [1, 1], "groups": 1})     # True
    """
    workload = validate_workload(workload)
    return (
        workload["op"] == "conv2d"
        and workload["kernel"][2:] == [1, 1]
        and workload["groups"] == 1
        and not any(workload["padding"])
    )


def candidates(
    workload: dict[str, Any],
    blocks: Iterable[int] = DEFAULT_BLOCKS,
    orders: Iterable[str] = ORDERS[:1],
) -> list[dict[str, Any]]:
    """GEMM candidates of a 1x1 conv2d: every (NCHW{ib}c, NCHW{ob}c) pair of dividing ``blocks``
    (output blocks of 8 or more: the GEMM is vectorised along them), once per loop order in
    ``orders`` (the default order has no ``"order"`` key); none if :func:`applies` is false.

    Example::

        candidates(wl, blocks=[16, 32])
        # [{'in': 'NCHW16c', 'out': 'NCHW16c', 'algorithm': 'gemm'}, ...,
        #  {'in': 'NCHW32c', 'out': 'NCHW32c', 'algorithm': 'gemm'}]
    """
    if not applies(workload):
        return []
    orders = checked_orders(orders, ORDERS, ALGORITHM)
    return [{"in": f"NCHW{ib}c", "out": f"NCHW{ob}c", "algorithm": ALGORITHM,
             **({} if order == ORDERS[0] else {"order": order})}
            for ib, ob in block_pairs(workload, blocks) for order in orders]


def block_pairs(workload: dict[str, Any], blocks: Iterable[int]) -> list[tuple[int, int]]:
    """(input block, output block) pairs of a conv2d among the dividing ``blocks`` (see
    :func:`~layoutopt.tvm.kernels.channel_blocks`), output blocks of 8 or more: the GEMM kernels are
    vectorised along the output block, and a 4-lane vector leaves most of an AVX register idle."""
    blocks = list(blocks)
    outs = vector_out_blocks(workload["kernel"][0], blocks)
    return [(ib, ob) for ib in channel_blocks(workload["data"][1], blocks) for ob in outs]


def checked_orders(orders: Iterable[str], known: Sequence[str], family: str) -> list[str]:
    """``orders`` as a list; ProblemError when empty or naming an order not in ``known``."""
    orders = list(orders)
    unknown = sorted(set(orders) - set(known))
    if unknown or not orders:
        raise ProblemError(f"{family} orders {unknown or orders} are not in {tuple(known)}")
    return orders


def validate_candidate(workload: dict[str, Any], candidate: dict[str, Any]) -> None:
    """Raise ProblemError unless ``candidate`` is a GEMM candidate valid for ``workload``."""
    what = f"gemm candidate {candidate!r} of {workload!r}"
    if not applies(workload):
        raise ProblemError(f"{what}: the GEMM kernel needs a 1x1, unpadded conv2d with groups 1")
    if candidate.get("algorithm") != ALGORITHM:
        raise ProblemError(f"{what}: 'algorithm' must be {ALGORITHM!r}")
    check_blocked(workload, candidate, what, ORDERS, {"algorithm"})


def check_blocked(workload: dict[str, Any], candidate: dict[str, Any], what: str, orders: Sequence[str],
                  knobs: set[str]) -> None:
    """ProblemError unless ``candidate`` has blocked in/out layouts dividing the channels, an order
    among ``orders`` (if any) and no keys but in, out, order and ``knobs``."""
    in_block, out_block = layout_block(candidate["in"]), layout_block(candidate["out"])
    if in_block is None or out_block is None:
        raise ProblemError(f"{what}: the kernel takes blocked layouts NCHW<b>c in and out")
    check_divides(in_block, workload["data"][1], f"{what} input")
    check_divides(out_block, workload["kernel"][0], f"{what} output")
    if candidate.get("order", orders[0]) not in orders:
        raise ProblemError(f"{what}: 'order' must be one of {tuple(orders)}")
    unknown = sorted(set(candidate) - {"in", "out", "order", *knobs})
    if unknown:
        raise ProblemError(f"{what}: unknown keys {unknown}")


def weight_transform(kernel_oihw: np.ndarray, candidate: dict[str, Any]) -> np.ndarray:
    """The OIHW 1x1 weight packed ``(O/ob, I, ob)`` for ``candidate`` (``ob`` its output block).

    Example::

        weight_transform(np.ones((32, 16, 1, 1), "float32"), {"in": "NCHW16c", "out": "NCHW16c",
                         "algorithm": "gemm"}).shape          # (2, 16, 16)
    """
    kernel_oihw = np.asarray(kernel_oihw)
    if kernel_oihw.ndim != 4 or kernel_oihw.shape[2:] != (1, 1):
        raise ProblemError(f"gemm weight_transform needs an OIHW 1x1 kernel, not shape {kernel_oihw.shape}")
    out_block = layout_block(candidate["out"])
    o, i = kernel_oihw.shape[:2]
    check_divides(out_block, o, f"gemm weight_transform for {candidate}")
    return np.ascontiguousarray(kernel_oihw.reshape(o // out_block, out_block, i).transpose(0, 2, 1))


def weight_shape(workload: dict[str, Any], candidate: dict[str, Any]) -> tuple[int, ...]:
    """Shape of :func:`weight_transform`'s output for ``workload`` and ``candidate``."""
    out_block = layout_block(candidate["out"])
    o, i = workload["kernel"][:2]
    return (o // out_block, i, out_block)


#: the logical inputs are the direct conv's (NCHW data, OIHW weight, epilogue operands), and so is the
#: numpy reference
logical_shapes = conv2d.logical_shapes
reference = conv2d.reference


def pack_weight(workload: dict[str, Any], candidate: dict[str, Any], weight: np.ndarray) -> np.ndarray:
    """The OIHW weight of a (validated) workload packed for the candidate's kernel (what the rewrite
    stores as the constant): :func:`weight_transform`."""
    return weight_transform(weight, candidate)


def pack_inputs(workload: dict[str, Any], candidate: dict[str, Any], inputs: Sequence[np.ndarray]) -> list:
    """Logical inputs in the kernel's layouts: data, packed weight, epilogue operands in the output's."""
    return conv2d.pack_inputs_with(pack_weight, workload, candidate, inputs)


unpack_output = conv2d.unpack_output


def placeholders(tvm, workload: dict[str, Any], candidate: dict[str, Any]) -> list:
    """TE placeholders of the kernel's inputs: data (N, C/ib, H, W, ib), packed weight (O/ob, C, ob),
    epilogue operands in the output's layout."""
    return conv2d.placeholders_with(tvm, weight_shape(workload, candidate), workload, candidate)


def compute(tvm, inputs: Sequence, workload: dict[str, Any], candidate: dict[str, Any]):
    """The 1x1 conv2d of a (validated) ``workload`` as a TE tensor of shape (N, O/ob, OH, OW, ob), from
    the :func:`placeholders` data (N, C/ib, H, W, ib) and weight (O/ob, C, ob), without its epilogue;
    the block carries ``candidate`` as its ``CANDIDATE_ANNOTATION``."""
    te = tvm.te
    data, weight = inputs[:2]
    validate_candidate(workload, candidate)
    in_block = int(data.shape[4])
    out_outer, channels, out_block = (int(d) for d in weight.shape)
    batch, _, out_h, out_w = conv2d_output_shape(workload)
    stride_h, stride_w = workload["strides"]
    c = te.reduce_axis((0, channels), name="c")
    return te.compute(
        (batch, out_outer, out_h, out_w, out_block),
        lambda n, ko, y, x, ki: te.sum(
            data[n, c // in_block, y * stride_h, x * stride_w, c % in_block] * weight[ko, c, ki], axis=c
        ),
        name=MAIN_BLOCKS[0],
        attrs={CANDIDATE_ANNOTATION: dict(candidate)},
    )


def register_tile(out_h: int, out_w: int, out_outer: int, out_block: int,
                  target: Any = None) -> tuple[int, int, int]:
    """``(rows, columns, blocks)``: the register tile of output pixels (rows x columns) times output
    channel blocks.

    Each reduction step of a tile loads ``blocks * ceil(out_block / lanes)`` weight vectors and
    broadcasts one input value per pixel for ``pixels * blocks * ceil(out_block / lanes)`` FMAs into
    as many accumulators. Among the tiles whose accumulators fill at most 3/4 of the target's vector
    registers (all but one weight row's when that leaves fewer than 4 pixels), those that reuse each
    weight vector for at least 4 pixels come first (fewer, and the weight panel streams through the
    cache once per pixel: a 1-pixel x 8-block tile ran 3x slower than the direct kernel); then one
    covering all pixels (the weight streams once: Winograd's small GEMMs); then the most FMAs per
    load; then the most accumulators. ``columns`` divides the output width, ``rows`` (more than one
    only when a tile spans whole rows) the height, ``blocks`` the number of output-channel blocks.

    Example::

        register_tile(7, 7, 32, 16, {"kind": "llvm", "mcpu": "znver4"})     # (1, 7, 2)
    """
    lanes, registers = vector_registers(target)
    per_block = -(-out_block // lanes)
    best = _best_tile(out_h, out_w, out_outer, per_block, max(per_block, registers * 3 // 4))
    if best[0] * best[1] < 4:  # as the direct kernel's register_tile: a wider tile beside one weight row
        best = _best_tile(out_h, out_w, out_outer, per_block, registers - per_block)
    return best


def _best_tile(out_h: int, out_w: int, out_outer: int, per_block: int, budget: int) -> tuple[int, int, int]:
    best, best_key = (1, 1, 1), (0, False, -1.0, 0)
    for columns in (d for d in range(1, out_w + 1) if out_w % d == 0):
        row_options = [1] if columns < out_w else [r for r in range(1, out_h + 1) if out_h % r == 0]
        for rows in row_options:
            pixels = rows * columns
            for blocks in (d for d in range(1, out_outer + 1) if out_outer % d == 0):
                accumulators = pixels * blocks * per_block
                if accumulators > budget:
                    continue
                loads = blocks * per_block + pixels
                key = (min(pixels, 4), pixels == out_h * out_w, accumulators / loads, accumulators)
                if key > best_key:
                    best, best_key = (rows, columns, blocks), key
    return best


def schedule(func, target: Any = None):
    """The schedule of a PrimFunc holding :func:`compute`, optionally followed by a fused elementwise
    epilogue; returns the ``s_tir.Schedule``.

    Parallel over (n, channel-block group, pixel-row group) (order ``"oc"``) or over (n, pixel-row
    group, channel-block group) (order ``"rows"``); per :func:`register_tile` tile, the reduction over
    the input channels with the tile's accumulators in registers, then the epilogue written from the
    tile, vectorised along the output block.

    Example::

        inputs = placeholders(tvm, wl, cand)
        sch = schedule(te.create_prim_func([*inputs, compute(tvm, inputs, wl, cand)]), target)
    """
    sch = import_tvm().s_tir.Schedule(func)
    conv = _main_block(sch)
    candidate = annotated_candidate(sch, conv) or {}
    rows_outer = candidate.get("order", ORDERS[0]) == "rows"
    _, out_outer, out_h, out_w, out_block = (int(d) for d in sch.get(conv).writes[0].source.shape)
    rows, columns, blocks = register_tile(out_h, out_w, out_outer, out_block, target)
    in_block = next(int(r.source.shape[4]) for r in sch.get(conv).reads if len(r.source.shape) == 5)
    n, ko, y, x, ki, c = sch.get_loops(conv)
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
    epilogue = [name for name in block_names(sch) if name not in MAIN_BLOCKS]
    tile, epilogue = register_tile_output(sch, conv, epilogue)
    sch.reverse_compute_at(tile, xo)
    sch.parallel(sch.fuse(*outer))
    sch.vectorize(sch.get_loops(tile)[-1])
    for loop in (koi, yi, xi):
        sch.unroll(loop)
    sch.vectorize(ki)
    schedule_epilogue(sch, epilogue, set())
    sch.decompose_reduction(conv, co)
    return sch


def _main_block(sch):
    for block in sch.get_child_blocks(sch.get_sblock("root")):
        if sch.get(block).name_hint in MAIN_BLOCKS and CANDIDATE_ANNOTATION in sch.get(block).annotations:
            return block
    raise ProblemError(f"gemm schedule: no {MAIN_BLOCKS[0]} block carrying {CANDIDATE_ANNOTATION}")

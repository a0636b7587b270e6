"""Winograd F(m x m, 3 x 3) conv2d, NCHW{ib}c in, NCHW{ob}c out (candidates ``"algorithm": "winograd"``).

A 3x3, stride-1, undilated, ungrouped conv2d computes each ``m x m`` output tile from an ``alpha x
alpha`` input tile (``alpha = m + 2``) with ``alpha**2`` multiplications per (input, output) channel
pair instead of ``9 m**2``: 2.25x fewer for F(2x2,3x3), 4x for F(4x4,3x3), 5.06x for F(6x6,3x3).
One PrimFunc runs three stages:

1. input transform ``V = B^T d B`` of every tile and input channel, vectorised along the channels
   (two separable passes; the matrices' zeros are skipped, their +-1 entries cost no multiplication);
2. ``alpha**2`` GEMMs ``M[e, v] = V[e, v] @ U[e, v]`` over the input channels, ``U = G g G^T`` being
   the weight transformed at compile time in float64 (:func:`weight_transform`), vectorised along
   the output block with a register tile of several tiles and channel blocks
   (:func:`~.isa.gemm_register_tile`);
3. output transform ``Y = A^T M A`` into the NCHW{ob}c output, with the conv's fused elementwise
   epilogue (bias, residual add, relu) inlined into it.

The ``"order"`` knob (:data:`ORDERS`, see :func:`schedule`) arranges the stages: as three parallel
stages (the GEMMs parallel over tile positions), or per group of tiles (everything in cache; pays
on large maps with few channels). The transform matrices are TVM's
(``topi.nn.winograd_transform_matrices``: Cook-Toom with the interpolation points of Barabasz et al.,
chosen for accuracy).

How each tile size compares with the best direct kernel on ResNet-50's and VGG-19's 3x3 layers,
per ISA, and the numerical error of each (max |out - ref| / max |ref| against a float64 direct conv,
per layer and over a whole ResNet-50): ``benchmarks/results/algorithms.md`` and
``algorithms_error.md``. The larger the tile, the fewer the multiplications and the more digits lost,
every one of them within the 1e-4 a build is checked at; F(6x6), which loses the most, is offered
only when asked for (:data:`DEFAULT_TILES`).

Example:
    >>> wl = {"op": "conv2d", "data": [1, 32, 14, 14], "kernel": [32, 32, 3, 3], "strides": [1, 1],
    ...       "padding": [1, 1, 1, 1], "dilation": [1, 1], "groups": 1, "dtype": "float32"}
    >>> FAMILY.applies(wl)
    True
    >>> for candidate in FAMILY.candidates(wl, blocks=[16], tiles=[4]):
    ...     print(candidate)
    {'in': 'NCHW16c', 'out': 'NCHW16c', 'algorithm': 'winograd', 'tile': 4}
    {'in': 'NCHW16c', 'out': 'NCHW16c', 'algorithm': 'winograd', 'tile': 4, 'order': 'tiles'}
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from ...errors import ProblemError
from .._tvm import import_tvm
from .common import (
    annotated_candidate,
    block_names,
    is_elementwise_after,
    kernel_annotations,
    nested_bindings,
    schedule_epilogue,
)
from .convolution import BlockedConv2dAlgorithm, blocked_weight
from .isa import gemm_register_tile, gemm_tile_fits, vector_registers
from .space import ScheduleSpace, divisors
from .workload import (
    DEFAULT_BLOCKS,
    conv2d_output_shape,
    layout_block,
)

__all__ = [
    "ALGORITHM",
    "DEFAULT_TILES",
    "FAMILY",
    "MAIN_BLOCKS",
    "ORDERS",
    "SCHEDULE_KNOBS",
    "Winograd",
    "transform_matrices",
    "weight_transform",
]

#: the candidates' ``"algorithm"`` value
ALGORITHM = "winograd"
#: output tile sizes ``m`` of F(m x m, 3 x 3) offered by default. F(6x6) loses a digit more than F(4x4)
#: and its gain is uneven (``benchmarks/results/algorithms.md``: fastest on some layers of one host, not
#: on another's), so it is offered only when asked for, with ``tiles=``
DEFAULT_TILES = (2, 4)
#: values of the ``"order"`` schedule knob, the default first (see :func:`schedule`): ``"positions"``
#: (three stages; the GEMMs parallel over the tile positions) or ``"tiles"`` (everything per group of
#: tiles). Neither wins everywhere: on 56x56 maps with 64 channels "tiles" ran 1.2x faster, on
#: 28x28 and smaller "positions" 1.1-1.3x (F(4x4), one thread, AVX-512)
ORDERS = ("positions", "tiles")
#: the knobs of a candidate that change its schedule (its :meth:`space <Winograd.space>`, in this
#: order): the GEMMs' register tile of ``reg_h`` rows x ``reg_n`` columns of tiles x ``oc_tile`` output
#: blocks (default :func:`~.isa.gemm_register_tile`: how many tiles each weight vector is loaded
#: for), then ``order``. (The tile size ``"tile"`` is the algorithm's: it changes the numbers.)
SCHEDULE_KNOBS = ("reg_h", "reg_n", "oc_tile", "order")
#: the most transformed input a group of the ``"tiles"`` order holds (see :func:`group_rows`): half of
#: the smallest L2 of the x86 CPUs in use (512 KB, AMD Zen 3), for it to stay there while the whole
#: transformed weight streams past it
GROUP_BYTES = 256 * 1024
#: the largest transformed weight the ``"tiles"`` order streams past groups of one register tile each
GROUP_WEIGHT_BYTES = 1024 * 1024
#: block annotation naming each block's role in the kernel (``"input_rows"``, ``"input"``, ``"gemm"``,
#: ``"output_rows"``, ``"output"``): the schedule finds its blocks by role, in a fused function too
STAGE_ANNOTATION = "layoutopt_winograd_stage"
#: the main block (the GEMMs, carrying the candidate as its ``CANDIDATE_ANNOTATION``), by which
#: :mod:`~layoutopt.tvm.kernels.module` recognises the kernel
MAIN_BLOCKS = ("winograd_gemm",)

_INPUT_ROWS, _INPUT, _GEMM, _OUTPUT_ROWS, _OUTPUT = (
    "input_rows", "input", "gemm", "output_rows", "output"
)


@functools.cache
def transform_matrices(tile: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(A, B, G)`` of F(tile x tile, 3 x 3) as float64 arrays of shapes (alpha, tile), (alpha, alpha),
    (alpha, 3): ``Y = A^T [(G g G^T) * (B^T d B)] A``. TVM's matrices (those behind
    ``topi.nn.winograd_transform_matrices``), computed in float64.

    Example:
        F(2x2, 3x3): a 4x4 input tile ``d`` and a 3x3 weight ``g`` give the 2x2 valid correlation.

        >>> A, B, G = transform_matrices(2)
        >>> A.shape, B.shape, G.shape
        ((4, 2), (4, 4), (4, 3))
        >>> rng = np.random.default_rng(0)
        >>> d, g = rng.standard_normal((4, 4)), rng.standard_normal((3, 3))
        >>> Y = A.T @ ((G @ g @ G.T) * (B.T @ d @ B)) @ A
        >>> np.allclose(Y, [[np.sum(d[i:i + 3, j:j + 3] * g) for j in range(2)] for i in range(2)])
        True
    """
    import_tvm()
    from tvm.topi.nn.winograd_util import _cook_toom_convolution, _interpolation_points

    a, b, g = _cook_toom_convolution(_interpolation_points(tile + 3 - 2), tile, 3)
    return (np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64), np.asarray(g, dtype=np.float64))


def weight_transform(kernel_oihw: np.ndarray, candidate: dict[str, Any]) -> np.ndarray:
    """The OIHW 3x3 weight transformed and packed for ``candidate``: ``U = G g G^T`` per (o, i), in
    float64, laid out ``(O/ob, alpha, alpha, I, ob)`` (``ob`` the output block) and cast back to the
    weight's dtype.

    Example:
        >>> weight_transform(np.ones((32, 16, 3, 3), "float32"), {"in": "NCHW16c", "out": "NCHW16c",
        ...                  "algorithm": "winograd", "tile": 4}).shape
        (2, 6, 6, 16, 16)
    """
    kernel_oihw, out_block, o, i = blocked_weight(kernel_oihw, candidate, (3, 3), "winograd weight_transform")
    _, _, g = transform_matrices(int(candidate["tile"]))
    u = np.einsum("ea,oiab,vb->evio", g, kernel_oihw.astype(np.float64), g, optimize=True)
    alpha = g.shape[0]
    u = u.reshape(alpha, alpha, i, o // out_block, out_block).transpose(3, 0, 1, 2, 4)
    return np.ascontiguousarray(u.astype(kernel_oihw.dtype))


def _combination(tvm, coefficients: Sequence[float], term, dtype: str):
    """``sum_k coefficients[k] * term(k)`` as a TIR expression: zeros skipped, +-1 as add/sub, and the
    positive terms first so that no negation is needed (unless every term is negative)."""
    nonzero = sorted(((k, float(c)) for k, c in enumerate(coefficients) if c != 0), key=lambda kc: kc[1] < 0)
    if not nonzero:
        return tvm.tirx.const(0, dtype)
    negate = nonzero[0][1] < 0  # all negative: sum the magnitudes, negate once

    def magnitude(k: int, coef: float):
        return term(k) if abs(coef) == 1 else term(k) * tvm.tirx.const(abs(coef), dtype)

    total = magnitude(*nonzero[0])
    for k, coef in nonzero[1:]:
        total = total + magnitude(k, coef) if (coef > 0) != negate else total - magnitude(k, coef)
    return total * tvm.tirx.const(-1, dtype) if negate else total


def _pick(tvm, index, expressions: Sequence[Any]):
    """``expressions[index]`` for a loop variable ``index``: a Select chain that folds to one branch
    once the loop over ``index`` is unrolled (the schedule unrolls every such loop)."""
    chosen = expressions[-1]
    for position in range(len(expressions) - 2, -1, -1):
        chosen = tvm.tirx.Select(index == position, expressions[position], chosen)
    return chosen


def _stage(role: str) -> dict[str, Any]:
    return {STAGE_ANNOTATION: role}


def _tiles(workload: dict[str, Any], tile: int) -> tuple[int, int]:
    """Rows and columns of output tiles. Above 8, the columns are rounded up until a register tile of
    4 to 8 of them divides them (19 -> 20): a prime count (F(6x6) at 112x112: 19) left one-tile
    register tiles, and the kernel ran several times slower; the extra tiles read zero padding and
    write nothing."""
    _, _, out_h, out_w = conv2d_output_shape(workload)
    tiles_w = -(-out_w // tile)
    while tiles_w > 8 and not any(tiles_w % d == 0 for d in range(4, 9)):
        tiles_w += 1
    return -(-out_h // tile), tiles_w


def input_transform(tvm, data, workload: dict[str, Any], tile: int):
    """Stage 1: ``V[e, v, n, y, x, c] = (B^T d B)[e, v]`` of the ``alpha x alpha`` input tile at tile
    (y, x), from the (N, C/ib, H, W, ib) ``data`` placeholder, rows then columns."""
    te, topi = tvm.te, tvm.topi
    dtype = workload["dtype"]
    alpha = tile + 2
    _, b_matrix, _ = transform_matrices(tile)
    batch, _, height, width, in_block = (int(d) for d in data.shape)
    channels = workload["data"][1]
    tiles_h, tiles_w = _tiles(workload, tile)
    top, left, _, _ = workload["padding"]
    after_h = tiles_h * tile + 2 - height - top
    after_w = tiles_w * tile + 2 - width - left
    padded = data
    if top or left or after_h or after_w:
        padded = topi.nn.pad(data, [0, 0, top, left, 0], [0, 0, after_h, after_w, 0], name="winograd_pad")

    def input_rows(e, b, n, y, x, c):
        def term(a):
            return padded[n, c // in_block, y * tile + a, x * tile + b, c % in_block]
        return _pick(tvm, e, [_combination(tvm, b_matrix[:, col], term, dtype) for col in range(alpha)])

    shape = (alpha, alpha, batch, tiles_h, tiles_w, channels)
    rows = te.compute(shape, input_rows, name="winograd_input_rows", attrs=_stage(_INPUT_ROWS))

    def input_tiles(e, v, n, y, x, c):
        def term(b):
            return rows[e, b, n, y, x, c]
        return _pick(tvm, v, [_combination(tvm, b_matrix[:, col], term, dtype) for col in range(alpha)])

    return te.compute(shape, input_tiles, name="winograd_input", attrs=_stage(_INPUT))


def gemm_output(tvm, transformed, weight, workload: dict[str, Any], candidate: dict[str, Any]):
    """Stages 2 and 3: the ``alpha**2`` GEMMs over the input channels, then ``Y = A^T M A`` into the
    (N, O/ob, OH, OW, ob) output."""
    te = tvm.te
    dtype = workload["dtype"]
    tile = int(candidate["tile"])
    a_matrix, _, _ = transform_matrices(tile)
    alpha, _, batch, tiles_h, tiles_w, channels = (int(d) for d in transformed.shape)
    out_outer, _, _, _, out_block = (int(d) for d in weight.shape)
    _, out_channels, out_h, out_w = conv2d_output_shape(workload)
    reduce_c = te.reduce_axis((0, channels), name="c")
    gemm = te.compute(
        (alpha, alpha, batch, tiles_h, tiles_w, out_channels),
        lambda e, v, n, y, x, k: te.sum(
            transformed[e, v, n, y, x, reduce_c] * weight[k // out_block, e, v, reduce_c, k % out_block],
            axis=reduce_c,
        ),
        name="winograd_gemm",
        attrs={**_stage(_GEMM), **kernel_annotations(workload, candidate)},
    )

    def output_rows(a, n, y, x, j, k):
        def term(b):
            return gemm[a, b, n, y, x, k]
        return _pick(tvm, j, [_combination(tvm, a_matrix[:, col], term, dtype) for col in range(tile)])

    # (j before k: the channels stay the contiguous, vectorised axis)
    half = te.compute((alpha, batch, tiles_h, tiles_w, tile, out_channels), output_rows,
                      name="winograd_output_rows", attrs=_stage(_OUTPUT_ROWS))

    def output(n, ko, oh, ow, ki):
        def term(a):
            return half[a, n, oh // tile, ow // tile, ow % tile, ko * out_block + ki]
        rows = [_combination(tvm, a_matrix[:, row], term, dtype) for row in range(tile)]
        return _pick(tvm, oh % tile, rows)

    return te.compute((batch, out_outer, out_h, out_w, out_block), output, name="winograd_output",
                      attrs=_stage(_OUTPUT))


# --------------------------------------------------------------------------------------------------
# schedule
# --------------------------------------------------------------------------------------------------


def _stage_blocks(sch) -> dict[str, Any]:
    found = {}
    for block in sch.get_child_blocks(sch.get_sblock("root")):
        role = sch.get(block).annotations.get(STAGE_ANNOTATION)
        if role is not None:
            found[str(role)] = block
    return found


class Winograd(BlockedConv2dAlgorithm):
    """Winograd F(m x m, 3 x 3) conv2d (see the module's docstring); its own option ``"tile"``: ``m``."""

    algorithm = ALGORITHM
    main_blocks = MAIN_BLOCKS
    orders = ORDERS
    options = ("tile", *SCHEDULE_KNOBS[:-1])
    requirement = "Winograd needs a 3x3 conv2d with stride 1, dilation 1, groups 1"

    def fits(self, workload: dict[str, Any]) -> bool:
        """A 3x3 kernel, stride 1, dilation 1, any padding (``FAMILY.applies(wl)``: see the module's
        example)."""
        return (workload["kernel"][2:] == [3, 3] and workload["strides"] == [1, 1]
                and workload["dilation"] == [1, 1])

    def candidates(self, workload: dict[str, Any], blocks: Iterable[int] = DEFAULT_BLOCKS,
                   tiles: Iterable[int] = DEFAULT_TILES,
                   orders: Iterable[str] = ORDERS) -> list[dict[str, Any]]:
        """Winograd candidates of a conv2d: every (NCHW{ib}c, NCHW{ob}c) pair of dividing ``blocks``, for
        every tile size in ``tiles`` and schedule order in ``orders`` (the default order has no
        ``"order"`` key); none where it does not apply.

        Output blocks below 8 are left out: the GEMM is vectorised along the output block, and a
        4-lane vector leaves most of an AVX register idle. Where no block of 8 or more divides the
        output channels, the GEMMs run on padded ones (``"out": "NCHW", "oc_block": b``, :mod:`.padded`).
        """
        variants = [{"tile": int(tile)} for tile in sorted(set(tiles))]
        return self.blocked_candidates(workload, blocks, orders, variants, padded=True)

    def check_options(self, candidate: dict[str, Any], what: str) -> None:
        """The ``"tile"`` must be an output tile size 2-6."""
        if candidate.get("tile") not in (2, 3, 4, 5, 6):
            raise ProblemError(f"{what}: 'tile' must be an output tile size 2-6")

    def knob_domain(self, workload: dict[str, Any], candidate: dict[str, Any]) -> dict[str, tuple]:
        """The values each knob may take on any target: register tiles dividing the rows and columns of
        tiles (:func:`_tiles`) and the output blocks, ``order`` among :data:`ORDERS`."""
        tiles_h, tiles_w = _tiles(workload, int(candidate["tile"]))
        out_outer = workload["kernel"][0] // layout_block(candidate["out"])
        return {"reg_h": divisors(tiles_h), "reg_n": divisors(tiles_w), "oc_tile": divisors(out_outer),
                "order": ORDERS}

    def space(self, workload: dict[str, Any], candidate: dict[str, Any], target: Any = None) -> ScheduleSpace:
        """Its knobs (:data:`SCHEDULE_KNOBS`) on ``target``: register tiles of the :meth:`knob_domain`,
        several rows of tiles only with whole rows, of 4 accumulators or more (or the heuristic's
        count) that :func:`~.isa.gemm_tile_fits` the target's registers; both orders.

        Example:
            >>> wl = {"op": "conv2d", "data": [1, 256, 14, 14], "kernel": [256, 256, 3, 3], "strides": [1, 1],
            ...       "padding": [1, 1, 1, 1], "dilation": [1, 1], "groups": 1, "dtype": "float32"}
            >>> candidate = {"in": "NCHW16c", "out": "NCHW16c", "algorithm": "winograd", "tile": 4}
            >>> space = FAMILY.space(wl, candidate, {"kind": "llvm", "mcpu": "znver4"})
            >>> space.default(), space.size
            ({'reg_h': 4, 'reg_n': 4, 'oc_tile': 1, 'order': 'positions'}, 24)
        """
        domain = self.knob_domain(workload, candidate)
        tiles_h, tiles_w = _tiles(workload, int(candidate["tile"]))
        out_block = layout_block(candidate["out"])
        out_outer = workload["kernel"][0] // out_block
        per_block = -(-out_block // vector_registers(target)[0])
        rows, columns, blocks = gemm_register_tile(tiles_h, tiles_w, out_outer, out_block, target)
        fewest = min(4, rows * columns * blocks * per_block)

        def fits(point: dict[str, Any]) -> bool:
            pixels = point["reg_h"] * point["reg_n"]
            return ((point["reg_h"] == 1 or point["reg_n"] == tiles_w)
                    and pixels * point["oc_tile"] * per_block >= fewest
                    and gemm_tile_fits(pixels, point["oc_tile"], out_block, target))

        return ScheduleSpace.build(domain, {"reg_h": rows, "reg_n": columns, "oc_tile": blocks,
                                            "order": ORDERS[0]}, fits)

    def weight_shape(self, workload: dict[str, Any], candidate: dict[str, Any]) -> tuple[int, ...]:
        """``(O/ob, alpha, alpha, I, ob)``: :func:`weight_transform`'s output."""
        alpha = int(candidate["tile"]) + 2
        out_block = layout_block(candidate["out"])
        o, i = workload["kernel"][:2]
        return (o // out_block, alpha, alpha, i, out_block)

    def pack_weight(self, workload: dict[str, Any], candidate: dict[str, Any],
                    weight: np.ndarray) -> np.ndarray:
        """:func:`weight_transform`."""
        return weight_transform(weight, candidate)

    def compute(self, tvm, inputs: Sequence, workload: dict[str, Any], candidate: dict[str, Any]):
        """The Winograd conv2d as a TE tensor of shape (N, O/ob, OH, OW, ob), without its epilogue.

        ``inputs`` starts with the data (N, C/ib, H, W, ib) and transformed weight
        (O/ob, alpha, alpha, C, ob) placeholders. The GEMM block carries ``candidate`` as its
        ``CANDIDATE_ANNOTATION`` and every stage its role as :data:`STAGE_ANNOTATION`, which
        :meth:`schedule` reads.
        """
        data, weight = inputs[:2]
        self.validate_candidate(workload, candidate)
        transformed = input_transform(tvm, data, workload, int(candidate["tile"]))
        return gemm_output(tvm, transformed, weight, workload, candidate)

    def schedule(self, func, target: Any = None):
        """The schedule of a PrimFunc holding :meth:`compute`, optionally followed by a fused elementwise
        epilogue (bias, residual add, relu: inlined into the output transform); returns the
        ``s_tir.Schedule``.

        Every stage is vectorised along the channels (the input transform along the input block, the
        GEMM and output transform along the output block) with its loops over tile positions unrolled.
        The GEMM's register tile is :func:`~.isa.gemm_register_tile`'s. The candidate's ``"order"``
        (:data:`ORDERS`) arranges the stages:

        - ``"positions"``: three parallel stages: input transform (over tile rows), the ``alpha**2``
          GEMMs (over the tile positions (e, v): a position's weight slice stays in cache for all
          tiles), output transform and epilogue (over channel blocks and tile rows);
        - ``"tiles"``: one parallel loop over groups of tiles, each running its input transform, then
          for every output-channel block its GEMMs and output transform: the transformed input and the
          GEMM results stay in cache, but every group streams the whole transformed weight.
        """
        sch = import_tvm().s_tir.Schedule(func)
        stages = _stage_blocks(sch)
        missing = {_INPUT_ROWS, _INPUT, _GEMM, _OUTPUT_ROWS, _OUTPUT} - set(stages)
        if missing:
            raise ProblemError(f"winograd schedule: blocks {sorted(missing)} not found in the PrimFunc")
        candidate = annotated_candidate(sch, stages[_GEMM]) or {}
        tile = int(candidate["tile"])
        out_block = int(sch.get(stages[_OUTPUT]).writes[0].source.shape[4])
        gemm_shape = sch.get(stages[_GEMM]).writes[0].source.shape
        _, _, _, tiles_h, tiles_w, out_channels = (int(d) for d in gemm_shape)
        out_outer = out_channels // out_block
        rows, columns, blocks = gemm_register_tile(tiles_h, tiles_w, out_outer, out_block, target)
        register_tile = (int(candidate.get("reg_h", rows)), int(candidate.get("reg_n", columns)),
                         int(candidate.get("oc_tile", blocks)))
        _inline_epilogue(sch, stages[_OUTPUT])
        if candidate.get("order", ORDERS[0]) == "tiles":
            channels = int(sch.get(stages[_INPUT]).writes[0].source.shape[5])
            rows = group_rows(tiles_h, tiles_w, tile + 2, channels, out_channels, register_tile[0])
            group, at_tiles = _schedule_output(sch, stages, tile, register_tile, rows)
            _schedule_gemm(sch, stages, register_tile, at_tiles)
            _schedule_input(sch, stages, target, group)
        else:
            _schedule_output(sch, stages, tile, (1, 1, 1), None)
            _schedule_gemm(sch, stages, register_tile, None)
            _schedule_input(sch, stages, target, None)
        return sch


#: the family (:data:`~layoutopt.tvm.kernels.registry.FAMILIES` registers it)
FAMILY = Winograd()


def _input_vector(sch, rows_block, channels: int, target: Any) -> int:
    lanes, _ = vector_registers(target)
    in_block = _input_block(sch, rows_block) or channels
    return max(d for d in range(1, min(in_block, 4 * lanes) + 1) if in_block % d == 0 and channels % d == 0)


def _schedule_padding(sch, rows_block, at) -> None:
    """The zero-padded input, computed under the input transform's loop ``at`` (a tile row, or a group
    of tiles): copied there while it is needed, the padded rows stay in cache for the transform.

    Inlining the padding into the transform's reads instead (a bounds check on every load of the
    unrolled transform) made TVM's simplifier take several times longer to compile the kernel; a
    padded copy of the whole input, in a stage of its own, made the kernel slower than inlined at
    28x28 and 56x56."""
    for producer in sch.get_producers(rows_block):
        if "pad" in sch.get(producer).name_hint:
            sch.compute_at(producer, at)
            sch.vectorize(sch.get_loops(producer)[-1])


def _schedule_input(sch, stages: dict[str, Any], target: Any, group) -> None:
    """The input transform: a parallel stage over tile rows (``group`` None), or the transform of one
    group of tiles computed under the loop ``group``. Per tile, a vector of channels goes through
    the unrolled row and column passes; the zero padding is copied per tile row or group."""
    rows_block, block = stages[_INPUT_ROWS], stages[_INPUT]
    if group is None:
        e, v, n, y, x, c = sch.get_loops(block)
        tiles = [x]
    else:
        sch.compute_at(block, group)
        e, v, *tiles, c = _loops_below(sch, block, group)
    co, ci = sch.split(c, [None, _input_vector(sch, rows_block, int(sch.get(c).extent), target)])
    sch.reorder(*([n, y] if group is None else []), *tiles, co, e, v, ci)
    if group is None:
        group = sch.fuse(n, y)
        sch.parallel(group)
    sch.compute_at(rows_block, co)
    sch.unroll(e)
    sch.unroll(v)
    sch.vectorize(ci)
    row_e, row_b, row_c = sch.get_loops(rows_block)[-3:]
    sch.unroll(row_e)
    sch.unroll(row_b)
    sch.vectorize(row_c)
    _schedule_padding(sch, rows_block, group)


def _schedule_output(sch, stages: dict[str, Any], tile: int, register_tile: tuple[int, int, int],
                     group_rows: int | None):
    """The output transform (the epilogue inlined into it), vectorised along the output block, per
    tile: parallel over (n, channel block, tile row) (``group_rows`` None); or over groups of tiles,
    then their channel blocks and register tiles: returns the loops under which the group's input
    transform and each register tile's GEMM go.

    A group is one register tile (``group_rows`` 0: its transformed input stays in L1, the whole
    transformed weight streams past it) or ``group_rows`` rows of tiles (the transformed weight
    streams once per group: fewer, larger groups)."""
    rows, columns, blocks = register_tile
    n, ko, oh, ow, ki = sch.get_loops(stages[_OUTPUT])
    y, i = sch.split(oh, [None, tile])
    x, j = sch.split(ow, [None, tile])
    if group_rows is None:
        sch.reorder(n, ko, y, x, i, j, ki)
        sch.parallel(sch.fuse(n, ko, y))
        loops, at = None, x
    elif group_rows == 0:
        koo, koi = sch.split(ko, [None, blocks])
        yt, yi = sch.split(y, [None, rows])
        xt, xi = sch.split(x, [None, columns])
        sch.reorder(n, yt, xt, koo, koi, yi, xi, i, j, ki)
        group = sch.fuse(n, yt, xt)
        sch.parallel(group)
        loops, at = (group, koo), xi
    else:
        koo, koi = sch.split(ko, [None, blocks])
        yg, yt, yi = sch.split(y, [None, group_rows // rows, rows])
        xt, xi = sch.split(x, [None, columns])
        sch.reorder(n, yg, koo, yt, xt, koi, yi, xi, i, j, ki)
        group = sch.fuse(n, yg)
        sch.parallel(group)
        loops, at = (group, xt), xi
    sch.unroll(i)
    sch.unroll(j)
    sch.vectorize(ki)
    sch.compute_at(stages[_OUTPUT_ROWS], at)
    a, jj, k = sch.get_loops(stages[_OUTPUT_ROWS])[-3:]
    sch.unroll(a)
    sch.unroll(jj)
    sch.vectorize(k)
    return loops


def group_rows(tiles_h: int, tiles_w: int, alpha: int, channels: int, out_channels: int, rows: int) -> int:
    """Tile rows per group of the ``"tiles"`` order, 0 for groups of one register tile.

    A transformed weight (``alpha**2 x channels x out_channels`` floats) of at most
    :data:`GROUP_WEIGHT_BYTES` stays in L2 while it streams past every group: then each register
    tile is a group, its transformed input in L1. A larger one is streamed from L3 once per group, so
    groups span whole rows: a multiple of the register tile's ``rows`` dividing the tile rows, as
    many as keep the group's transformed input within :data:`GROUP_BYTES`, and at least two groups
    when possible (the groups are the parallel tasks). Neither grouping wins everywhere: on VGG's
    large maps, register-tile groups were faster at 64 channels and row groups at 128 (F(4x4), one
    thread, AVX-512).

    Example:
        >>> group_rows(14, 14, 6, 32, 32, 1)       # a 147 KB weight: groups of one register tile
        0
        >>> group_rows(28, 28, 6, 128, 128, 1)     # 2.4 MB: groups of 1 row of 28 tiles (516 KB each)
        1
    """
    if alpha * alpha * channels * out_channels * 4 <= GROUP_WEIGHT_BYTES:
        return 0
    options = [g for g in range(rows, tiles_h + 1, rows) if tiles_h % g == 0]
    if tiles_h // rows >= 2:
        options = [g for g in options if tiles_h // g >= 2]
    fitting = [g for g in options if alpha * alpha * g * tiles_w * channels * 4 <= GROUP_BYTES]
    return max(fitting) if fitting else min(options)


def _schedule_gemm(sch, stages: dict[str, Any], register_tile: tuple[int, int, int], at_tiles) -> None:
    """The GEMMs over the input channels into a register tile of (blocks x rows x columns) tiles x
    output block: a parallel stage over the tile positions (e, v) (``at_tiles`` None), or under the
    loop ``at_tiles`` for one register tile's tiles and channel blocks."""
    rows, columns, blocks = register_tile
    gemm = stages[_GEMM]
    out_block = int(sch.get(stages[_OUTPUT]).writes[0].source.shape[4])
    if at_tiles is None:
        e, v, n, y, x, k, c = sch.get_loops(gemm)
        ko, koi, ki = sch.split(k, [None, blocks, out_block])
        yo, yi = sch.split(y, [None, rows])
        xo, xi = sch.split(x, [None, columns])
        sch.reorder(e, v, ko, n, yo, xo, c, koi, yi, xi, ki)
        sch.parallel(sch.fuse(e, v))
        tiles, at = [yi, xi], xo
    else:
        sch.compute_at(gemm, at_tiles)
        # loops below: e, v, the register tile's tiles (extent-1 loops are not made), its channels, c
        e, v, *tiles, k, c = _loops_below(sch, gemm, at_tiles)
        koi, ki = sch.split(k, [None, out_block])
        sch.reorder(e, v, c, koi, *tiles, ki)
        at = v
    accumulators = sch.cache_write(gemm, 0, "local")
    sch.reverse_compute_at(accumulators, at)
    sch.vectorize(sch.get_loops(accumulators)[-1])
    for loop in (koi, *tiles):
        sch.unroll(loop)
    sch.vectorize(ki)
    if at_tiles is not None:
        sch.set_scope(accumulators, 0, "local")  # the register tile's GEMM results: a small stack buffer
    sch.decompose_reduction(gemm, c)


def _inline_epilogue(sch, output) -> None:
    """Inline the elementwise blocks FuseOps put after the conv (bias, activations, residual add) into
    ``output``: the middle ones into the last (an activation may read a value twice: hard-swish,
    SiLU), the last into ``output``."""
    tvm = import_tvm()
    stages = {sch.get(block).name_hint for block in _stage_blocks(sch).values()}
    names = [name for name in block_names(sch) if name not in stages and "pad" not in name]
    # (not the NCHW unpack of padded output channels: inlined, it breaks the stages' affine loops)
    elementwise = []
    for name in names:
        if not is_elementwise_after(sch, name, output):
            break
        elementwise.append(name)
    if nested_bindings(sch, elementwise):  # Mish's exp, log and tanh: one pass after the transform
        elementwise = []
    try:
        for name in elementwise[:-1]:
            sch.compute_inline(sch.get_sblock(name))
        if elementwise:
            sch.reverse_compute_inline(sch.get_sblock(elementwise[-1]))
    except tvm.s_tir.ScheduleError:
        pass
    # the blocks that could not be inlined, and every block after them, on their own
    schedule_epilogue(sch, [name for name in block_names(sch) if name not in stages and "pad" not in name],
                      set())


def _loops_below(sch, block, outer) -> list:
    loops = sch.get_loops(block)
    position = next(i for i, loop in enumerate(loops) if sch.get(loop).same_as(sch.get(outer)))
    return loops[position + 1:]


def _input_block(sch, rows_block) -> int | None:
    # the data block ib, read from the shape of the (possibly padded) data buffer the transform reads
    for region in sch.get(rows_block).reads:
        shape = region.source.shape
        if len(shape) == 5:
            return int(shape[4])
    return None

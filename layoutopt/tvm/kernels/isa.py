"""What the *target* CPU offers the schedules: vector width, register count, register tiles.

Everything here reads the llvm target being compiled for, never the host running the code: a
kernel for an AVX2 device built on an AVX-512 machine must get AVX2's tiles (and the test suite runs
on both kinds of host).

Example:
    >>> vector_registers({"kind": "llvm", "mcpu": "znver3"})    # AVX2: 16 ymm registers of 8 floats
    (8, 16)
    >>> isa_name({"kind": "llvm", "mcpu": "znver4"}), isa_name({"kind": "llvm", "mcpu": "znver3"})
    ('AVX-512', 'AVX2')
"""

from __future__ import annotations

from typing import Any

from .._tvm import import_tvm, resolve_target

__all__ = ["depthwise_register_tile", "gemm_register_tile", "gemm_tile_fits", "isa_name",
           "pixel_register_tile", "pixel_tiles", "register_tile", "vector_registers"]


def _target(target: Any):
    tvm = import_tvm()
    if target is None:
        current = tvm.target.Target.current(allow_none=True)
        return current if current is not None else resolve_target(None)
    return resolve_target(target)


def _is_arm(target) -> bool:
    triple = str(target.attrs.get("mtriple", "") or "")
    return triple.startswith(("aarch64", "arm64"))


def vector_registers(target: Any = None) -> tuple[int, int]:
    """``(float32 lanes per vector register, vector registers)`` of the CPU ``target``.

    AVX-512: 16 lanes, 32 zmm; AVX2/AVX: 8 lanes, 16 ymm; aarch64 NEON: 4 lanes, 32 registers;
    plain SSE x86: 4 lanes, 16 xmm. ``None``: the target in scope (``with target:``), else the host.

    Example:
        >>> vector_registers({"kind": "llvm", "mcpu": "haswell"})
        (8, 16)
        >>> vector_registers({"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "cortex-a72"})
        (4, 32)
    """
    tvm = import_tvm()
    target = _target(target)
    if _is_arm(target):
        return 4, 32
    has = tvm.target.codegen.target_has_features  # (llvm_get_vector_width reads the host, not the target)
    if has("avx512f", target):
        return 16, 32
    return (8, 16) if has("avx", target) else (4, 16)


def isa_name(target: Any = None) -> str:
    """The vector ISA the target compiles for: ``"AVX-512"``, ``"AVX2"``, ``"AVX"``, ``"SSE"`` or ``"NEON"``.

    Example:
        >>> isa_name({"kind": "llvm", "mcpu": "znver3"})
        'AVX2'
    """
    tvm = import_tvm()
    target = _target(target)
    if _is_arm(target):
        return "NEON"
    has = tvm.target.codegen.target_has_features
    for feature, name in (("avx512f", "AVX-512"), ("avx2", "AVX2"), ("avx", "AVX")):
        if has(feature, target):
            return name
    return "SSE"


#: at most this many output columns per register tile (the tile is unrolled)
MAX_TILE_COLUMNS = 14
#: at most this many accumulator registers: past it, more columns gained nothing measurable
#: (notes/register_tiles.md: 14-16 accumulators were best on AVX-512 and AVX2 alike)
MAX_ACCUMULATORS = 16


def register_tile(out_width: int, out_block: int | None, target: Any = None) -> int:
    """Output columns per register tile (``reg_n``) of a blocked conv2d, so that its accumulators fit.

    A tile holds ``reg_n x out_block`` floats, ``reg_n * ceil(out_block / lanes)`` vector registers.
    Beside them the reduction needs one output block of weights and one broadcast input, so the
    accumulators get ``registers - ceil(out_block / lanes) - 1`` registers at most (else LLVM spills
    inside the reduction loop: the 64-wide blocks with AutoTVM's ``reg_n = 8`` did), and at most
    :data:`MAX_ACCUMULATORS`: about 14 independent FMAs keep both FMA pipes busy, and measured, the
    best tiles had 14-16 accumulators on AVX-512 and AVX2 alike (``notes/register_tiles.md``:
    each blocked conv's best tile against this rule's, per ISA; the old cap of 8 columns was much
    slower). Within that, the tile count is the fewest possible, and the columns split the width
    evenly over them (a partial last tile is fine: on Inception's 17-wide maps a one-column tile ran
    several times slower than a 6-column one with a partial last tile). The measured kernel and the
    built program both use it, so they run the same tile.

    Example:
        >>> register_tile(56, 16, {"kind": "llvm", "mcpu": "znver4"})     # 14 zmm accumulators
        14
        >>> register_tile(56, 64, {"kind": "llvm", "mcpu": "znver4"})     # 4 x 4 zmm
        4
        >>> register_tile(56, 16, {"kind": "llvm", "mcpu": "znver3"})     # 6 x 2 ymm
        6
    """
    lanes, registers = vector_registers(target)
    per_column = -(-(out_block or lanes) // lanes)
    accumulators = min(MAX_ACCUMULATORS, registers - per_column - 1)
    widest = max(1, min(MAX_TILE_COLUMNS, accumulators // per_column, out_width))
    tiles = -(-out_width // widest)
    return -(-out_width // tiles)


def depthwise_register_tile(out_width: int, block: int, kernel_w: int, target: Any = None) -> int:
    """Output columns per register tile of a depthwise conv (:mod:`.depthwise`): a divisor of the
    output width (a partial tile, its columns predicated in the unrolled loop, ran 2-4x slower) whose
    accumulators take at most half the vector registers but one: the other half holds the kernel
    row's weights and the input columns each of them multiplies (``kernel_w`` of them, for a tile
    ``reg_n + kernel_w - 1`` columns wide). Measured on znver3 (AVX2, 2 threads, cold, interleaved),
    7 columns of 8 channels ran 105 and 109 us on MobileNetV2's 3x3 layers at 112 and 56, where 8
    columns ran 126 and 138 us and 14 columns 217 and 250 us; 2 columns of 16 channels 56 us at 14x14,
    where 7 ran 97 us.

    When that leaves a tile narrower than half its room (a prime width: 7), the next wider divisor is
    taken if its accumulators fit beside one weight and one input vector (as a dense conv's,
    :func:`register_tile`): the weights are reloaded from L1, cheaper than a tile that reuses no input
    load.

    Example:
        >>> avx2, avx512 = {"kind": "llvm", "mcpu": "znver3"}, {"kind": "llvm", "mcpu": "znver4"}
        >>> depthwise_register_tile(56, 8, 3, avx2), depthwise_register_tile(14, 16, 3, avx2)
        (7, 2)
        >>> depthwise_register_tile(56, 16, 3, avx512)    # one zmm a column: more columns fit
        14
    """
    lanes, registers = vector_registers(target)
    per_column = -(-block // lanes)
    room = max(per_column, min(MAX_ACCUMULATORS, registers // 2 - 1))
    divisors = [d for d in range(1, min(out_width, MAX_TILE_COLUMNS) + 1) if out_width % d == 0]
    columns = max((d for d in divisors if d * per_column <= room), default=1)
    if 2 * columns * per_column < room:
        wider = [d for d in divisors if d > columns and d * per_column <= min(MAX_ACCUMULATORS,
                                                                               registers - per_column - 1)]
        columns = min(wider, default=columns)
    return columns


#: what a GEMM tile over a partial last group of channel blocks pays for its predicated loops, as a
#: factor on its FMAs per load (see :func:`gemm_register_tile`)
PARTIAL_TILE_COST = 1.1
#: the weight panel (input channels x a tile's output channels) above which a GEMM tile's weights
#: stream from L2 for each pixel tile: a 32 KiB L1d (see :func:`gemm_register_tile`)
STREAMED_PANEL_BYTES = 32 * 1024


def gemm_register_tile(out_h: int, out_w: int, out_outer: int, out_block: int,
                       target: Any = None, partial_blocks: bool = False,
                       in_channels: int | None = None) -> tuple[int, int, int]:
    """``(rows, columns, blocks)``: the register tile of a GEMM vectorised along its output block
    (the 1x1 conv's, :mod:`.gemm`; Winograd's per tile position, :mod:`.winograd`; the packed dense's,
    :mod:`.dense`, its rows as pixels): output pixels (rows x columns) times output channel blocks.

    Each reduction step of a tile loads ``blocks * ceil(out_block / lanes)`` weight vectors and
    broadcasts one input value per pixel for ``pixels * blocks * ceil(out_block / lanes)`` FMAs into
    as many accumulators. Among the tiles that fit the vector registers, those that reuse each weight
    vector for enough pixels come first (fewer, and the weight panel streams through the cache once
    per pixel or two: a 1-pixel x 8-block tile ran several times slower than the direct kernel); then
    one covering all pixels (the weight streams once: Winograd's small GEMMs); then the most FMAs per
    load; then the most accumulators, then the most pixels. ``columns`` divides the output width
    (but see odd widths below), ``rows`` (more than one only when a tile spans whole rows) the height,
    ``blocks`` the number of output-channel blocks.

    What fits, and what comes first:

    * On a 16-register file (AVX2), measured on Zen 3: the accumulators, one register per pixel (one
      in all for a one-block tile) and a block's weight vectors leave one register free. AVX2 has no
      broadcast operand: LLVM keeps each pixel's broadcast live across the blocks, and spilled
      accumulators where they did not fit: 4 pixels x 3 blocks of 8 (12 + 4 + 1) reloaded 17 vectors
      from the stack in its inner loop. Blocks of 8 channels put tiles of 2 pixels or more first:
      4-pixel tiles hold 2 blocks (4 FMAs per 3 loads), 2-pixel ones up to 6 (3 per 2); blocks of 16
      (two vectors) put 4 pixels or more first. Partial last tiles of blocks are allowed wherever they
      do more FMAs per load, counted over the whole GEMM, than the best tile of dividing blocks by
      :data:`PARTIAL_TILE_COST`. On an odd width no 2-pixel tile divides a row, so a row's last tile
      may be partial there (7 = 2 + 2 + 2 + 1, or 4 + 3: the columns split the row evenly), over
      dividing blocks, at the same cost factor (tiles partial both ways ran 0.3-0.6x). Blocks of
      several vectors whose weight panel (``in_channels`` x the tile's channels) exceeds
      :data:`STREAMED_PANEL_BYTES` keep the rule below where its tile has more pixels: the panel
      streams from L2 once per pixel tile, and a row of 7 pixels x one 16-channel block (17 registers)
      ran 1.1-1.3x faster there than 2 x 2 blocks at 14x14 (and than 4 + 3 x 1 at 7x7), while 2 x 2
      ran up to 2x faster on panels that fit L1. Blocks of 8 gained on every panel size: 2 x 5
      blocks ran 1.05-1.08x faster than 7 x 1 on 7x7 maps with panels of 69-180 KiB (cold, paired
      rounds). Measured (``notes/gemm_tiles.md``): version 10 (blocks of 8) ran the 1x1
      layers of four mobile backbones a median 1.18x faster than the rule below, up to 1.56x on 14x14
      and 28x28 maps; version 11's partial rows and wider blocks against version 10's in that file.
      Winograd's and the dense's tiles of 16-channel blocks keep the rule below (not measured with
      this one).
    * Otherwise (AVX-512, and blocks of several vectors on AVX2 without ``partial_blocks``), measured
      on Skylake and Zen 4: accumulators in at most 3/4 of the registers (all but one weight row's
      when that leaves fewer than 4 pixels), 4 pixels or more first. AVX-512's FMAs take a broadcast
      memory operand: the pixels' values need no register. With ``partial_blocks``, where no count of
      blocks above one divides ``out_outer`` and fits beside the pixels, a count that does not divide
      it is allowed, the last tile partial (RegNet's 104 channels are 13 blocks of 8, which only
      one-block tiles divide).

    ``partial_blocks``: the caller's schedule computes partial last tiles, of blocks and of a row's
    columns (the 1x1 GEMM's does; Winograd's and the dense's do not). ``in_channels``: the GEMM's
    reduction length, which sizes the weight panel (unknown: the panel is taken to fit).

    Example:
        >>> gemm_register_tile(7, 7, 32, 16, {"kind": "llvm", "mcpu": "znver4"})
        (1, 7, 2)
        >>> avx2 = {"kind": "llvm", "mcpu": "znver3"}
        >>> [gemm_register_tile(28, 28, 15, 8, avx2), gemm_register_tile(28, 28, 4, 8, avx2)]
        [(1, 2, 5), (1, 4, 2)]
        >>> [gemm_register_tile(56, 56, 13, 8, avx2, partial_blocks=p) for p in (False, True)]
        [(1, 8, 1), (1, 2, 5)]
        >>> [gemm_register_tile(7, 7, 20, 8, avx2, partial_blocks=p) for p in (False, True)]  # 2+2+2+1
        [(1, 7, 1), (1, 2, 5)]
    """
    lanes, registers = vector_registers(target)
    per_block = -(-out_block // lanes)
    if registers < 32 and (per_block == 1 or partial_blocks):  # (wider blocks: measured on the 1x1 GEMM only)
        tile = _best_gemm_tile(out_h, out_w, out_outer, per_block, registers - 1, partial_blocks,
                               broadcasts_live=True, few_pixels=2 if per_block == 1 else 4,
                               partial_columns=partial_blocks and out_w % 2 == 1)
        panel = None if in_channels is None else in_channels * tile[2] * out_block * 4
        if per_block == 1 or panel is None or panel <= STREAMED_PANEL_BYTES:
            return tile
        # blocks of several vectors whose weight panel streams from L2 once per pixel tile: a whole-row
        # tile passes over it fewer times, and ran faster even where its accumulators spilled
        rows = _tile_of_dividing_columns(out_h, out_w, out_outer, per_block, registers, partial_blocks)
        return rows if rows[0] * rows[1] > tile[0] * tile[1] else tile
    return _tile_of_dividing_columns(out_h, out_w, out_outer, per_block, registers, partial_blocks)


def _tile_of_dividing_columns(out_h: int, out_w: int, out_outer: int, per_block: int, registers: int,
                              partial_blocks: bool) -> tuple[int, int, int]:
    """Version 10's rule (:func:`gemm_register_tile`): columns that divide the width; the registers
    counted for blocks of one vector on AVX2 only, elsewhere accumulators in 3/4 of the registers."""
    if registers < 32 and per_block == 1:
        return _best_gemm_tile(out_h, out_w, out_outer, per_block, registers - 1, partial_blocks,
                               broadcasts_live=True, few_pixels=2)
    best = _best_gemm_tile(out_h, out_w, out_outer, per_block, max(per_block, registers * 3 // 4),
                           partial_blocks)
    if best[0] * best[1] < 4:  # as the direct kernel's register_tile: a wider tile beside one weight row
        best = _best_gemm_tile(out_h, out_w, out_outer, per_block, registers - per_block, partial_blocks)
    return best


def _best_gemm_tile(out_h: int, out_w: int, out_outer: int, per_block: int, budget: int,
                    partial_blocks: bool = False, broadcasts_live: bool = False,
                    few_pixels: int = 4, partial_columns: bool = False) -> tuple[int, int, int]:
    """The best tile (see :func:`gemm_register_tile`) whose accumulators, plus the inputs a
    reduction step holds (:func:`_held`), take at most ``budget`` registers; tiles of ``few_pixels``
    pixels or more first. With ``partial_columns``, a row's last tile may be partial too (columns
    that do not divide the width), over dividing blocks only: tiles partial both ways ran 0.34-0.6x
    of the row-of-7 tile on 7x7 maps, where partial columns alone ran 1.1-1.4x."""
    best, best_key = (1, 1, 1), (0, False, -1.0, False, 0.0, 0)
    for columns in range(1, out_w + 1):
        divides_width = out_w % columns == 0
        row_tiles = -(-out_w // columns)
        if not divides_width and not (partial_columns and columns == -(-out_w // row_tiles)):
            continue  # the columns split a row evenly over its tiles (7: 4 + 3, not 6 + 1)
        row_options = [1] if columns < out_w else [r for r in range(1, out_h + 1) if out_h % r == 0]
        for rows in row_options:
            pixels = rows * columns
            fitting = [b for b in range(1, out_outer + 1)
                       if pixels * b * per_block + _held(pixels, b, per_block, broadcasts_live) <= budget]
            dividing = [b for b in fitting if out_outer % b == 0]
            partial = partial_blocks and divides_width and (broadcasts_live or dividing == [1])
            for blocks in fitting if partial else dividing:
                # over the whole GEMM: a partial last tile loads each pixel's input as a full one does,
                # and its predicated loops cost about a tenth (RegNet's 104->208 at 28x28: 2 pixels x 6
                # of its 26 blocks ran 217 us, 4 x 2 blocks 194 us)
                block_tiles = -(-out_outer // blocks)
                average_pixels = rows * out_w / row_tiles
                accumulators = average_pixels * out_outer * per_block / block_tiles  # per tile, on average
                loads = out_outer * per_block / block_tiles + average_pixels
                divides = out_outer % blocks == 0 and divides_width
                key = (min(pixels, few_pixels), pixels == out_h * out_w,
                       accumulators / loads / (1.0 if divides else PARTIAL_TILE_COST), divides, accumulators,
                       pixels)
                if key > best_key:
                    best, best_key = (rows, columns, blocks), key
    return best


def _held(pixels: int, blocks: int, per_block: int, broadcasts_live: bool) -> int:
    """Vector registers a reduction step holds beside the accumulators: none with broadcast operands;
    without, one block's weight vectors and each pixel's broadcast, live across the blocks (one at a
    time in a one-block tile: each is used once)."""
    return per_block + (pixels if blocks > 1 else 1) if broadcasts_live else 0


def gemm_tile_fits(pixels: int, blocks: int, out_block: int, target: Any = None) -> bool:
    """Does a GEMM register tile of ``pixels`` x ``blocks`` output blocks (of ``out_block`` channels)
    hold its accumulators in the target's vector registers, beside one block's weight vectors and,
    on a 16-register file (AVX2: no broadcast memory operand), the broadcast inputs LLVM keeps live
    (one per pixel across several blocks, as :func:`gemm_register_tile` counts them)? What a search
    over GEMM tiles (:meth:`.gemm.Gemm.space`) may try: fitting, not the rule's preference.

    Example:
        >>> avx512, avx2 = {"kind": "llvm", "mcpu": "znver4"}, {"kind": "llvm", "mcpu": "znver3"}
        >>> gemm_tile_fits(7, 4, 16, avx512), gemm_tile_fits(7, 5, 16, avx512), gemm_tile_fits(2, 6, 8, avx2)
        (True, False, True)
    """
    lanes, registers = vector_registers(target)
    per_block = -(-out_block // lanes)
    held = _held(pixels, blocks, per_block, broadcasts_live=True) if registers < 32 else per_block
    return pixels * blocks * per_block + held <= registers


#: the narrowest vector a pixel-vectorised kernel uses (an AVX2 register; AVX-512 uses it too where
#: no 16-pixel run tiles the map)
MIN_PIXEL_LANES = 8


def pixel_tiles(out_h: int, out_w: int, lanes: int = MIN_PIXEL_LANES,
                most: int = MAX_ACCUMULATORS) -> list[tuple[int, int]]:
    """``(rows, columns)`` pixel tiles of an NCHW output map that are whole vectors of ``lanes``
    contiguous pixels, at most ``most`` vectors: part of one row (``columns`` divides the width), or
    whole rows (``rows`` divides the height). A tile is a rectangle of the map, so that the epilogue
    written from it covers exactly the pixels computed; its pixels are contiguous in memory, so that
    each vector is one load. Empty when no such tile exists (a 14x14 or 7x7 map has no run of 8 pixels
    that tiles it).

    Example:
        >>> pixel_tiles(28, 28), pixel_tiles(28, 28, 16)    # two rows: 7 ymm; four rows: 7 zmm
        ([(2, 28), (4, 28)], [(4, 28)])
        >>> pixel_tiles(56, 56), pixel_tiles(14, 14)
        ([(1, 8), (1, 56), (2, 56)], [])
    """
    longest = lanes * most
    tiles = [(1, c) for c in range(lanes, min(out_w, longest) + 1, lanes) if out_w % c == 0]
    tiles += [(r, out_w) for r in range(2, out_h + 1)
              if out_h % r == 0 and (r * out_w) % lanes == 0 and r * out_w <= longest]
    return tiles


def pixel_register_tile(out_h: int, out_w: int, target: Any = None) -> tuple[int, int, int] | None:
    """``(rows, columns, lanes)``: the register tile of a GEMM vectorised along the pixels of an NCHW
    output (:mod:`.gemm`'s NCHW kernel), one output channel times the longest :func:`pixel_tiles` tile
    whose accumulators leave a register for the broadcast weight and one for a load (and at most
    :data:`MAX_ACCUMULATORS`); in vectors of the target's width where such a tile exists, else of
    :data:`MIN_PIXEL_LANES`; None when neither has one.

    One output channel, because more measured slower: on znver3 (AVX2, 2 threads), ShuffleNetV2's 1x1
    58->58 at 28x28 ran 0.072 ms with 1 channel x 7 vectors, 0.092 with 2 x 7, 0.103 with 2 x 14,
    and the 116->116 at 28x28 0.34, 0.35 and 0.41 ms with 1, 2 and 4 channels of 7 vectors. Each
    weight is one broadcast, cheap beside the vector loads, and the input tile stays in L1 while every
    channel uses it (the parallel loop runs channels inside pixel tiles).

    Example:
        >>> pixel_register_tile(28, 28, {"kind": "llvm", "mcpu": "znver3"})   # 14 ymm of 4 rows
        (4, 28, 8)
        >>> pixel_register_tile(28, 28, {"kind": "llvm", "mcpu": "znver4"})   # 7 zmm of 4 rows
        (4, 28, 16)
    """
    lanes, registers = vector_registers(target)
    most = min(MAX_ACCUMULATORS, registers - 2)
    for width in dict.fromkeys((lanes, min(lanes, MIN_PIXEL_LANES))):
        tiles = pixel_tiles(out_h, out_w, width, most)
        if tiles:
            rows, columns = max(tiles, key=lambda tile: tile[0] * tile[1])
            return rows, columns, width
    return None

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

__all__ = ["depthwise_register_tile", "gemm_register_tile", "isa_name", "register_tile", "vector_registers"]


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
#: (benchmarks/results/register_tiles.md: 14-16 accumulators were best on AVX-512 and AVX2 alike)
MAX_ACCUMULATORS = 16


def register_tile(out_width: int, out_block: int | None, target: Any = None) -> int:
    """Output columns per register tile (``reg_n``) of a blocked conv2d, so that its accumulators fit.

    A tile holds ``reg_n x out_block`` floats, ``reg_n * ceil(out_block / lanes)`` vector registers.
    Beside them the reduction needs one output block of weights and one broadcast input, so the
    accumulators get ``registers - ceil(out_block / lanes) - 1`` registers at most (else LLVM spills
    inside the reduction loop: the 64-wide blocks with AutoTVM's ``reg_n = 8`` did), and at most
    :data:`MAX_ACCUMULATORS`: about 14 independent FMAs keep both FMA pipes busy, and measured, the
    best tiles had 14-16 accumulators on AVX-512 and AVX2 alike (``benchmarks/results/register_tiles.md``:
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


def gemm_register_tile(out_h: int, out_w: int, out_outer: int, out_block: int,
                       target: Any = None) -> tuple[int, int, int]:
    """``(rows, columns, blocks)``: the register tile of a GEMM vectorised along its output block
    (the 1x1 conv's, :mod:`.gemm`; Winograd's per tile position, :mod:`.winograd`): output pixels
    (rows x columns) times output channel blocks.

    Each reduction step of a tile loads ``blocks * ceil(out_block / lanes)`` weight vectors and
    broadcasts one input value per pixel for ``pixels * blocks * ceil(out_block / lanes)`` FMAs into
    as many accumulators. Among the tiles whose accumulators fill at most 3/4 of the target's vector
    registers (all but one weight row's when that leaves fewer than 4 pixels), those that reuse each
    weight vector for at least 4 pixels come first (fewer, and the weight panel streams through the
    cache once per pixel: a 1-pixel x 8-block tile ran several times slower than the direct kernel); then one
    covering all pixels (the weight streams once: Winograd's small GEMMs); then the most FMAs per
    load; then the most accumulators. ``columns`` divides the output width, ``rows`` (more than one
    only when a tile spans whole rows) the height, ``blocks`` the number of output-channel blocks.

    Example:
        >>> gemm_register_tile(7, 7, 32, 16, {"kind": "llvm", "mcpu": "znver4"})
        (1, 7, 2)
    """
    lanes, registers = vector_registers(target)
    per_block = -(-out_block // lanes)
    best = _best_gemm_tile(out_h, out_w, out_outer, per_block, max(per_block, registers * 3 // 4))
    if best[0] * best[1] < 4:  # as the direct kernel's register_tile: a wider tile beside one weight row
        best = _best_gemm_tile(out_h, out_w, out_outer, per_block, registers - per_block)
    return best


def _best_gemm_tile(out_h: int, out_w: int, out_outer: int, per_block: int,
                    budget: int) -> tuple[int, int, int]:
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

"""What the *target* CPU offers the schedules: vector width, register count, register tiles.

Everything here reads the llvm target being compiled for, never the host running the code: a
kernel for an AVX2 device built on an AVX-512 machine must get AVX2's tiles (and the test suite runs
on both kinds of host).

Example::

    vector_registers({"kind": "llvm", "mcpu": "znver3"})    # (8, 16): AVX2, 16 ymm of 8 floats
    isa_name({"kind": "llvm", "mcpu": "znver4"})            # 'AVX-512'
"""

from __future__ import annotations

from typing import Any

from .._tvm import import_tvm, resolve_target

__all__ = ["isa_name", "register_tile", "vector_registers"]


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

    Example::

        vector_registers({"kind": "llvm", "mcpu": "haswell"})     # (8, 16)
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

    Example::

        isa_name({"kind": "llvm", "mcpu": "znver3"})     # 'AVX2'
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


def register_tile(out_width: int, out_block: int | None, target: Any = None) -> int:
    """Output columns per register tile (``reg_n``) of a blocked conv2d, so that its accumulators fit.

    A tile holds ``reg_n x out_block`` floats, ``reg_n * ceil(out_block / lanes)`` vector
    registers. At most 3/4 of the register file goes to accumulators (the rest holds the weight
    vectors and the broadcast input), else LLVM spills inside the reduction loop - the 64-wide
    blocks with AutoTVM's ``reg_n = 8`` did, fused or not; but when that leaves under a quarter of
    the registers accumulating (too few independent FMAs), a wider tile that still fits beside one
    weight row is taken. ``reg_n`` divides the output width (at most 8), except for a prime width
    above 8 (Inception's 17, 71, 73): a one-column tile ran 3-4x slower there than a 6-column tile
    with a partial last tile (1x1 768->192 conv at 17x17, 16c: 1.44 vs 0.38 ms), so the widest tile
    that fits and wastes the fewest padded columns is taken. The measured kernel and the built
    program both use it, so they run the same tile.

    Example::

        register_tile(56, 16, {"kind": "llvm", "mcpu": "znver4"})     # 8
        register_tile(56, 64, {"kind": "llvm", "mcpu": "znver4"})     # 4
    """
    lanes, registers = vector_registers(target)
    per_column = -(-(out_block or lanes) // lanes)
    divisors = [d for d in range(1, 9) if out_width % d == 0]
    budget = max(per_column, registers * 3 // 4)
    reg_n = max(d for d in divisors if d * per_column <= budget)
    if reg_n * per_column < registers // 4:
        wider = [d for d in divisors if d * per_column <= registers - per_column]
        reg_n = max([reg_n, *wider])
    if reg_n == 1 and out_width > 8:
        fitting = [d for d in range(4, 9) if d * per_column <= budget]
        if fitting:
            reg_n = min(fitting, key=lambda d: (-(-out_width // d) * d, -d))
    return reg_n

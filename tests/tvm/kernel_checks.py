"""Building a kernel for a vector ISA and checking it against numpy, for the kernel tests: the two
targets they compile for, and the check that runs only where this host can run the code."""

from __future__ import annotations

from layoutopt.tvm import kernels
from layoutopt.tvm._tvm import import_tvm, resolve_target
from layoutopt.tvm.kernels import build_kernel

AVX512 = {"kind": "llvm", "mcpu": "skylake-avx512"}
AVX2 = {"kind": "llvm", "mcpu": "znver3"}


def host_runs(target) -> bool:
    """Can this machine run code compiled for ``target`` (an AVX-512 target needs an AVX-512 host)?"""
    tvm = import_tvm()
    host = resolve_target(None)
    has = tvm.target.codegen.target_has_features
    return not has("avx512f", resolve_target(target)) or has("avx512f", host)


def build_and_check(workload, candidate, target) -> float:
    """Build for ``target``; run and compare against numpy when this host can run it (else compile only)."""
    tvm = import_tvm()
    kernel = build_kernel(workload, candidate, target)
    executable = tvm.compile(kernel.module, target=resolve_target(target))
    if not host_runs(target):
        return 0.0
    return kernels.check_kernel(kernel, executable)

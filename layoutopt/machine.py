"""Where, when and with what a result was measured: the stamp every benchmark output carries.

Timings mean little without the machine behind them, and the machines here change from day to
day (an AVX2 CPU one day, an AVX-512 one the next), so every report, CSV and plot is stamped by
:func:`stamp`: the date, the CPU model, its ISA, LLVM's name for it (when TVM is installed), the
usable cores, the thread count TVM was told to use, and the versions of Python and the packages.

TVM is imported only when it is installed, and only to ask LLVM for the CPU name.

Example:
    >>> info = stamp()
    >>> list(info)
    ['date', 'machine', 'threads', 'versions']
    >>> info["versions"].startswith("Python ")
    True
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import importlib.metadata
import importlib.util
import os
import platform
from collections.abc import Iterable

__all__ = ["cpu_model", "cpu_name", "default_tvm_threads", "isa", "llvm_mcpu", "stamp", "stamp_line",
           "usable_cores"]

#: packages named in every stamp when installed (callers add their own, e.g. torch)
PACKAGES = ("layoutopt", "numpy", "numba", "networkx", "ortools", "pytoulbar2", "highspy", "apache-tvm")


def _cpuinfo() -> dict[str, str]:
    """The first processor's fields of /proc/cpuinfo ({} where there is none)."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if not line.strip():
                    if fields:
                        break
                    continue
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return fields


def cpu_model() -> str:
    """The CPU's marketing name, e.g. ``'AMD EPYC 9R14'`` (``platform.processor()`` off Linux)."""
    return _cpuinfo().get("model name") or platform.processor() or platform.machine() or "unknown CPU"


def cpu_name() -> str:
    """The CPU's name as cost records carry it: its model name and, when TVM is installed, LLVM's name
    for it (the target string alone, ``llvm -mcpu=...``, names a family that hosts of different speeds
    share), e.g. ``'Intel(R) Xeon(R) Processor (rocketlake)'``.

    Example:
        >>> cpu_name().startswith(cpu_model())
        True
    """
    mcpu = llvm_mcpu()
    return f"{cpu_model()} ({mcpu})" if mcpu else cpu_model()


def isa() -> str:
    """The widest vector ISA of the CPU: ``'AVX-512'``, ``'AVX2'``, ``'AVX'``, ``'SVE'``, ``'NEON'``...

    Read from the CPU flags of /proc/cpuinfo (``avx512f``, ``avx2``; ``sve``, ``asimd`` on Arm);
    without them, from LLVM's feature list when TVM is installed; else ``'unknown ISA'``.

    Example:
        >>> isa() in ("AVX-512", "AVX2", "AVX", "SSE4.2", "SVE", "NEON", "unknown ISA")
        True
    """
    info = _cpuinfo()
    flags = set((info.get("flags") or info.get("Features") or "").split())
    if not flags:
        flags = _llvm_features()
    for flag, name in (("avx512f", "AVX-512"), ("avx2", "AVX2"), ("avx", "AVX"), ("sse4_2", "SSE4.2"),
                       ("sve", "SVE"), ("asimd", "NEON"), ("neon", "NEON")):
        if flag in flags:
            return name
    return "unknown ISA"


@functools.lru_cache(maxsize=1)
def _tvm():
    """The ``tvm`` module when it is installed, else None (imported once, on first use)."""
    if importlib.util.find_spec("tvm") is None:
        return None
    default_tvm_threads()
    try:
        import tvm
    except ImportError:  # installed but broken: the stamp goes without LLVM's name for the CPU
        return None
    return tvm


def default_tvm_threads() -> None:
    """Set ``TVM_NUM_THREADS`` to :func:`usable_cores` unless the user set it: TVM sizes its thread pool
    from it when it starts, so this runs before the first ``import tvm`` (here, and in
    ``layoutopt.tvm``'s ``import_tvm``, which the core must not import: it sits above the core).

    Example:
        >>> default_tvm_threads()
        >>> int(os.environ["TVM_NUM_THREADS"]) >= 1
        True
    """
    if "TVM_NUM_THREADS" not in os.environ:
        os.environ["TVM_NUM_THREADS"] = str(usable_cores())


def llvm_mcpu() -> str | None:
    """LLVM's name for this CPU (``-mcpu``, e.g. ``'znver4'``), or None when TVM is not installed."""
    tvm = _tvm()
    return None if tvm is None else str(tvm.target.codegen.llvm_get_system_cpu())


def _llvm_features() -> set[str]:
    tvm = _tvm()
    if tvm is None:
        return set()
    with contextlib.suppress(Exception):  # an LLVM without the query: no features known
        target = tvm.target.Target({"kind": "llvm", "mcpu": llvm_mcpu()})
        return {str(f).lstrip("+") for f in tvm.target.codegen.llvm_get_cpu_features(target)}
    return set()


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask), which a container may set below the count."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _versions(packages: Iterable[str]) -> str:
    found = []
    for package in dict.fromkeys(packages):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            found.append(f"{package} {importlib.metadata.version(package)}")
    return ", ".join([f"Python {platform.python_version()}", *found])


def stamp(packages: Iterable[str] = ()) -> dict[str, str]:
    """Date, machine, thread count and versions, for every benchmark output and report.

    Args:
        packages: more packages to name beside :data:`PACKAGES` (when installed).

    Returns:
        ``{"date": "2026-12-01 09:30 UTC", "machine": "AMD EPYC 9R14 (x86_64, AVX-512, llvm
        znver4), 2 cores, Linux-6.1", "threads": "TVM_NUM_THREADS=2", "versions": "Python 3.11.7,
        layoutopt 0.1.0, numpy ..."}``. ``threads`` is what the environment sets (``unset``: TVM
        picks its own); ``llvm`` is left out when TVM is not installed.
    """
    mcpu = llvm_mcpu()
    details = [platform.machine(), isa(), *([f"llvm {mcpu}"] if mcpu else [])]
    cores = usable_cores()
    threads = os.environ.get("TVM_NUM_THREADS")
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{cpu_model()} ({', '.join(details)}), {cores} core{'s' * (cores != 1)}, "
        f"{platform.platform(terse=True)}",
        "threads": f"TVM_NUM_THREADS={threads}" if threads else "TVM_NUM_THREADS unset",
        "versions": _versions([*PACKAGES, *packages]),
    }


def stamp_line(info: dict[str, str] | None = None) -> str:
    """The stamp on one line: ``date; machine; threads; versions`` (a fresh :func:`stamp` by default).

    Example:
        >>> stamp_line({"date": "2026-12-01 09:30 UTC", "machine": "M", "threads": "T", "versions": "V"})
        '2026-12-01 09:30 UTC; M; T; V'
    """
    return "; ".join((info or stamp()).values())

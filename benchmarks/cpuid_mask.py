"""Run ONNX Runtime and PyTorch as if the host had no AVX-512: CPUID answers with its AVX-512 bits cleared.

An AVX2 comparison needs every contender on AVX2. TVM builds for any CPU (``llvm -mcpu=znver3``), but
ONNX Runtime's MLAS and PyTorch's oneDNN choose their kernels at run time from what the CPUID
instruction reports, and MLAS has no switch to stop it choosing AVX-512. Linux can make CPUID fault
(``arch_prctl(ARCH_SET_CPUID, 0)``, on CPUs and hypervisors with the ``cpuid_fault`` flag); a SIGSEGV
handler then runs the real instruction and hands back its answer without the AVX-512 (and AMX) bits.
The setting is per thread, inherited by threads and forks started afterwards (not across exec), so it must
come first in a process, before any library reads CPUID (numpy does on import).

This is a benchmark tool, not part of layoutopt: it compiles a small C file with the system's ``cc``
into ``~/.cache/layoutopt`` on first use.

Example::

    python -c "import benchmarks.cpuid_mask as m; m.hide_avx512(); import numpy; ..."
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import subprocess
import tempfile
from pathlib import Path

__all__ = ["HIDE_AVX512", "MASKED_FEATURES", "PRELUDE", "available", "hide_avx512", "library"]

#: set in a benchmark's environment to the compiled mask (:func:`library`) when its child processes
#: (ONNX Runtime, OpenVINO, PyTorch) must run without AVX-512: a TVM target without it on an AVX-512 host
HIDE_AVX512 = "LAYOUTOPT_HIDE_AVX512"

#: Python code those children run first, before numpy or a runtime reads CPUID
PRELUDE = f"""
import os, sys
if os.environ.get({HIDE_AVX512!r}):
    sys.path.insert(0, {str(Path(__file__).resolve().parent.parent)!r})
    from benchmarks.cpuid_mask import hide_avx512
    hide_avx512(os.environ[{HIDE_AVX512!r}])
"""

# CPUID leaf 7 bits that name AVX-512 and AMX features: (subleaf, register, bit) -> name
MASKED_FEATURES = {
    (0, "ebx", 16): "avx512f", (0, "ebx", 17): "avx512dq", (0, "ebx", 21): "avx512ifma",
    (0, "ebx", 26): "avx512pf", (0, "ebx", 27): "avx512er", (0, "ebx", 28): "avx512cd",
    (0, "ebx", 30): "avx512bw", (0, "ebx", 31): "avx512vl",
    (0, "ecx", 1): "avx512vbmi", (0, "ecx", 6): "avx512vbmi2", (0, "ecx", 11): "avx512vnni",
    (0, "ecx", 12): "avx512bitalg", (0, "ecx", 14): "avx512vpopcntdq",
    (0, "edx", 2): "avx512_4vnniw", (0, "edx", 3): "avx512_4fmaps", (0, "edx", 8): "avx512_vp2intersect",
    (0, "edx", 22): "amx_bf16", (0, "edx", 23): "avx512_fp16", (0, "edx", 24): "amx_tile",
    (0, "edx", 25): "amx_int8",
    (1, "eax", 5): "avx512_bf16",
}


def _masks() -> str:
    """C initialisers of the AND-masks per (subleaf, register)."""
    masks = {(sub, reg): 0xFFFFFFFF for sub in (0, 1) for reg in ("eax", "ebx", "ecx", "edx")}
    for (sub, reg, bit) in MASKED_FEATURES:
        masks[sub, reg] &= ~(1 << bit) & 0xFFFFFFFF
    return "\n".join(f"#define MASK_{sub}_{reg.upper()} 0x{value:08x}u"
                     for (sub, reg), value in masks.items())


_SOURCE = r"""
#define _GNU_SOURCE
#include <asm/prctl.h>
#include <cpuid.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

@MASKS@

static struct sigaction previous;

static void on_fault(int sig, siginfo_t *info, void *context) {
    greg_t *regs = ((ucontext_t *)context)->uc_mcontext.gregs;
    const unsigned char *ip = (const unsigned char *)regs[REG_RIP];
    if (ip[0] == 0x0f && ip[1] == 0xa2) {  /* CPUID: answer it, less the masked bits */
        unsigned leaf = (unsigned)regs[REG_RAX], sub = (unsigned)regs[REG_RCX], a, b, c, d;
        syscall(SYS_arch_prctl, ARCH_SET_CPUID, 1);  /* this thread may run CPUID again */
        __cpuid_count(leaf, sub, a, b, c, d);
        syscall(SYS_arch_prctl, ARCH_SET_CPUID, 0);
        if (leaf == 7 && sub == 0) { a &= MASK_0_EAX; b &= MASK_0_EBX; c &= MASK_0_ECX; d &= MASK_0_EDX; }
        if (leaf == 7 && sub == 1) { a &= MASK_1_EAX; b &= MASK_1_EBX; c &= MASK_1_ECX; d &= MASK_1_EDX; }
        regs[REG_RAX] = a; regs[REG_RBX] = b; regs[REG_RCX] = c; regs[REG_RDX] = d;
        regs[REG_RIP] += 2;
        return;
    }
    /* a real fault: whatever handled it before */
    if (previous.sa_flags & SA_SIGINFO) { previous.sa_sigaction(sig, info, context); return; }
    if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) {
        previous.sa_handler(sig);
        return;
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

/* 0 on success, else errno of the failing call (EINVAL, ENODEV: no CPUID faulting here) */
int layoutopt_hide_avx512(void) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = on_fault;
    action.sa_flags = SA_SIGINFO;  /* a fault inside the handler then kills the process */
    sigemptyset(&action.sa_mask);
    if (sigaction(SIGSEGV, &action, &previous) != 0) return -1;
    if (syscall(SYS_arch_prctl, ARCH_SET_CPUID, 0) != 0) { sigaction(SIGSEGV, &previous, NULL); return -2; }
    return 0;
}
"""


def available() -> bool:
    """Whether this host can fault on CPUID (Linux x86-64 with the ``cpuid_fault`` flag)."""
    try:
        return " cpuid_fault" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


def library() -> Path:
    """The compiled mask (built once per source version into ``~/.cache/layoutopt``)."""
    source = _SOURCE.replace("@MASKS@", _masks())
    digest = hashlib.sha256(source.encode()).hexdigest()[:12]
    target = Path.home() / ".cache" / "layoutopt" / f"cpuid_mask-{digest}.so"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as tmp:
            c_file, built = Path(tmp) / "cpuid_mask.c", Path(tmp) / "cpuid_mask.so"
            c_file.write_text(source)
            compiler = os.environ.get("CC", "cc")
            try:
                subprocess.run([compiler, "-O2", "-shared", "-fPIC", "-o", str(built), str(c_file)],
                               check=True, capture_output=True, text=True)
            except FileNotFoundError:
                raise RuntimeError(f"no C compiler {compiler!r} (set CC) to build the CPUID mask") from None
            except subprocess.CalledProcessError as exc:
                raise RuntimeError(f"{compiler} could not build the CPUID mask:\n{exc.stderr}") from None
            os.replace(built, target)  # atomic: a crash never leaves half a library under the final name
    return target


def hide_avx512(path: str | os.PathLike | None = None) -> None:
    """From now on, CPUID in this thread and the threads (and forks) it starts reports no AVX-512.

    Call it before importing numpy, ONNX Runtime or torch. ``path``: the compiled library
    (:func:`library`), when the caller built it already.

    Raises:
        RuntimeError: the host cannot fault on CPUID.
    """
    if not available():
        raise RuntimeError("this host cannot make CPUID fault (no 'cpuid_fault' in /proc/cpuinfo), "
                           "so ONNX Runtime's AVX-512 kernels cannot be hidden")
    code = ctypes.CDLL(str(path or library())).layoutopt_hide_avx512()
    if code != 0:
        raise RuntimeError(f"arch_prctl(ARCH_SET_CPUID) or sigaction failed ({code})")

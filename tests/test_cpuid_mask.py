"""benchmarks.cpuid_mask: the AVX2 comparison hides AVX-512 from the other contenders' CPUID."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import cpuid_mask

ROOT = Path(__file__).resolve().parent.parent
HOST_HAS_AVX512 = " avx512f" in Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else False

pytestmark = pytest.mark.skipif(
    not (cpuid_mask.available() and HOST_HAS_AVX512 and shutil.which(os.environ.get("CC", "cc"))),
    reason="needs an AVX-512 host that can fault on CPUID (cpuid_fault) and a C compiler")


def _run(code: str) -> subprocess.CompletedProcess:
    prelude = (f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
               "from benchmarks.cpuid_mask import hide_avx512\n")
    return subprocess.run([sys.executable, "-c", prelude + code], capture_output=True, text=True, timeout=120)


def _avx512f_in_numpy(hide: bool) -> str:
    done = _run(("hide_avx512()\n" if hide else "") +
                "import numpy as np\nprint(np._core._multiarray_umath.__cpu_features__['AVX512F'])")
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_numpy_imported_after_the_mask_sees_no_avx512():
    assert _avx512f_in_numpy(hide=False) == "True"
    assert _avx512f_in_numpy(hide=True) == "False"


def test_threads_started_after_the_mask_see_no_avx512_and_other_leaves_are_intact():
    # leaf 7's AVX2 bit (ebx 5) survives, AVX-512F (ebx 16) does not, in a thread started afterwards
    done = _run(
        "import threading\n"
        "hide_avx512()\n"
        "seen = []\n"
        "def first_import():\n"  # numpy reads CPUID on its first import, here in the new thread
        "    import numpy as np\n"
        "    seen.append(np._core._multiarray_umath.__cpu_features__)\n"
        "t = threading.Thread(target=first_import)\n"
        "t.start(); t.join()\n"
        "print(seen[0]['AVX512F'], seen[0]['AVX2'], seen[0]['FMA3'])\n"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True", "True"]


def test_a_real_segfault_still_kills_the_process():
    # the handler answers CPUID only; any other fault goes on to the default action
    done = _run("hide_avx512()\nimport ctypes\nctypes.string_at(0)\n")
    assert done.returncode == -11

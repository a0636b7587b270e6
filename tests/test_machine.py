"""The machine stamp: CPU model, ISA, cores, threads and versions, read from the machine itself."""

import pytest

from layoutopt import machine


@pytest.mark.parametrize(("flags", "expected"), [
    ("fpu sse4_2 avx avx2 fma avx512f avx512bw", "AVX-512"),
    ("fpu sse4_2 avx avx2 fma", "AVX2"),
    ("fp asimd evtstrm aes", "NEON"),
    ("fp asimd sve sve2", "SVE"),
])
def test_isa_is_the_widest_vector_extension_in_the_flags(monkeypatch, flags, expected):
    key = "Features" if "asimd" in flags else "flags"
    monkeypatch.setattr(machine, "_cpuinfo", lambda: {"model name": "Test CPU", key: flags})
    assert machine.isa() == expected


def test_the_stamp_names_the_cpu_its_isa_the_threads_set_and_the_versions(monkeypatch):
    monkeypatch.setattr(machine, "_cpuinfo", lambda: {"model name": "AMD EPYC 9R14", "flags": "avx2 avx512f"})
    monkeypatch.setenv("TVM_NUM_THREADS", "3")
    info = machine.stamp(packages=["pytest"])
    assert info["machine"].startswith("AMD EPYC 9R14 (") and "AVX-512" in info["machine"]
    assert f"{machine.usable_cores()} core" in info["machine"]
    mcpu = machine.llvm_mcpu()
    assert mcpu is None or f"llvm {mcpu}" in info["machine"]
    assert info["threads"] == "TVM_NUM_THREADS=3"
    versions = info["versions"]
    assert versions.startswith("Python 3.") and "numpy " in versions and "pytest " in versions
    assert info["date"].endswith(" UTC")
    assert machine.stamp_line(info) == "; ".join(info[k] for k in ("date", "machine", "threads", "versions"))

"""benchmarks.host_drift: windows of the same work timed over a busy run, written stamped."""

from __future__ import annotations

import re

from benchmarks.host_drift import main, run_phase


def test_each_window_has_its_medians_and_samples():
    rows = run_phase(1.0, 2)  # a sample takes ~20 ms: half-second windows never stay empty
    assert [start for start, *_ in rows] == [0.0, 0.5]
    assert all(matmul > 0 and loop > 0 and samples >= 1 for _, matmul, loop, samples in rows)


def test_the_report_is_stamped_and_names_the_spread(tmp_path):
    out = tmp_path / "drift.md"
    assert main(["--seconds", "0.3", "--pause", "0", "--windows", "1", "--out", str(out)]) == 0
    text = out.read_text()
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", text)
    assert len(re.findall(r"^\| [12] \| 0 \|", text, flags=re.M)) == 2
    assert re.search(r"loop: slowest window / fastest = \d+\.\d\dx", text)

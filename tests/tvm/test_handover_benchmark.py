"""``benchmarks/handover.py``: a kernel timed between its neighbours, on a real solution file."""

from __future__ import annotations

import pytest

pytest.importorskip("tvm")  # the tvm extra; CI installs it

from benchmarks import handover
from layoutopt.tvm import models, tune_and_build

pytestmark = pytest.mark.tvm


def test_the_middle_kernel_is_timed_in_both_loop_orders_and_bad_layers_are_named(tmp_path, capsys):
    result = tune_and_build(models.chain((8, 8, 8)), cache=tmp_path / "costs.jsonl", guard=False,
                            baselines=(), calibrate=0, profile=False, check=False, repeat=2,
                            candidates={"blocks": [8], "algorithms": ["direct"]})
    _, solution = result.export(tmp_path / "chain.so")
    out = tmp_path / "handover.md"
    assert handover.main(["--solution", str(solution), "--layers", "conv1,conv2,conv3", "--rounds", "3",
                          "--out", str(out)]) == 0
    rows = [line for line in out.read_text().splitlines() if line.startswith("| oc |")
            or line.startswith("| rows |")]
    assert len(rows) == 2 and all(len(row.split("|")) == 7 for row in rows)  # 5 cells each
    assert all(float(cell) > 0 for row in rows for cell in row.split("|")[2:6])
    for layers, message in (("conv1,conv2", "give three layers"), ("conv1,conv2,conv9", "no layer conv9")):
        with pytest.raises(SystemExit):
            handover.main(["--solution", str(solution), "--layers", layers, "--out", ""])
        assert message in capsys.readouterr().err

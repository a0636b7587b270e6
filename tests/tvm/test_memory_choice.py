"""Memory as part of the choice on a tiny model (issue 49): a tuned build under a memory budget stays
within it, a tighter budget changes the choice or is refused, ``layoutopt tune --memory-budget`` and
``--pareto``."""

from __future__ import annotations

import re

import numpy as np
import pytest

pytest.importorskip("tvm")

from onnx_models import tiny_conv_onnx  # tests/tvm is on sys.path

from layoutopt import ProblemError
from layoutopt.cli import main
from layoutopt.problem import format_bytes
from layoutopt.tvm import load_model, tune_and_build
from layoutopt.tvm.building.memory import estimate_memory
from layoutopt.tvm.frontend.normalise import prepare
from layoutopt.tvm.kernels import family
from layoutopt.tvm.measure.problem import memory_figures
from layoutopt.tvm.tune.report import write_report

pytestmark = pytest.mark.tvm

#: a 3x3 conv (direct and Winograd kernels, whose transformed weights hold 1.8-7.1x the weight) and a
#: 1x1 one (direct and GEMM), blocks 8 and 16; the tests share its measurements
CANDIDATES = {"blocks": [8, 16]}
QUICK = {"candidates": CANDIDATES, "calibrate": 0, "baselines": (), "repeat": 2, "profile": False}


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    folder = tmp_path_factory.mktemp("memory")
    return tiny_conv_onnx(folder / "tiny.onnx"), folder / "costs.jsonl"


def test_a_tuned_build_stays_within_its_budget(shared, tmp_path):
    model, cache = shared
    mod = load_model(model, [1, 4, 8, 8])
    free = tune_and_build(mod, cache=cache, memory_budget="1GB", guard=False, check=False, **QUICK)
    assert 0 < free.memory <= 1e9
    figures = memory_figures(free.graph, None)["nodes"]
    assert free.memory == sum(figures[node][choice] for node, choice in free.solution.assignment.items())
    assert "memory: the kernels handed back hold" in free.summary()
    # the rewritten module's constants are the figure's weights (as packed or transformed) and the
    # constants no layout changes (the bias)
    resident = logical = 0
    for node in free.graph.layout_nodes():
        if node.kind == "target":
            candidate = dict(node.choices[free.solution.assignment[node.name]].candidate)
            kernels = family(node.workload, candidate)
            resident += kernels.memory(node.workload, candidate) - kernels.workspace(node.workload, candidate)
            logical += int(np.prod(node.workload["kernel"])) * 4
    others = estimate_memory(prepare(mod)).weights - logical
    assert 0 < resident <= free.memory
    assert estimate_memory(free.module).weights == resident + others
    report = write_report(free, tmp_path / "report")["markdown"].read_text()
    assert f"Memory: the kernels handed back hold {format_bytes(free.memory)}" in report
    budget = free.memory - 1  # below what the fastest assignment holds
    try:
        tight = tune_and_build(mod, cache=cache, memory_budget=budget, **QUICK)  # checked, and the guard's
    except ProblemError as exc:  # the fastest was the smallest already
        assert "smallest assignment needs" in str(exc)
    else:
        assert tight.memory <= budget
        assert tight.solution.assignment != free.solution.assignment
        assert tight.solution.objective >= free.solution.objective * (1 - 1e-9)
    with pytest.raises(ProblemError, match=r"^memory budget: infeasible: the smallest assignment needs"):
        tune_and_build(mod, cache=cache, memory_budget=100, guard=False, check=False, **QUICK)


def test_tune_memory_budget_and_pareto_from_the_command_line(tmp_path, shared, capsys):
    model, cache = shared
    base = ["tune", str(model), "--input-shape", "1,4,8,8", "--blocks", "8,16", "--cache", str(cache),
            "--repeat", "2"]
    assert main([*base, "--pareto", "4", "--report", str(tmp_path / "report")]) == 0
    out = capsys.readouterr().out
    assert "latency-memory front of" in out and "| point | budget MB |" in out
    rows = [line for line in out.splitlines() if re.match(r"\| \d+ \|", line)]
    memory = [float(row.split("|")[4]) for row in rows]
    assert 1 <= len(rows) <= 5 and memory == sorted(memory, reverse=True)
    assert (tmp_path / "report" / "front.md").read_text().count("\n| ") == len(rows) + 1
    assert (tmp_path / "report" / "front.png").stat().st_size > 1000
    built = re.findall(r"point (\d+): figure ([\d.]+) MB, module constants ([\d.]+) MB", out)
    assert [int(i) for i, _, _ in built][:1] == [0]  # the fastest point is built, checked and timed
    assert all(np.isfinite(float(figure)) for _, figure, _ in built)

    assert main([*base, "--memory-budget", "1B", "--report", ""]) == 2
    err = capsys.readouterr().err
    assert err.startswith("layoutopt tune: error: memory budget: infeasible: the smallest assignment needs")
    assert len(err.strip().splitlines()) == 1
    assert main([*base, "--memory-budget", "40 parsecs", "--report", ""]) == 2
    assert "memory size '40 parsecs'" in capsys.readouterr().err
    budget = min(memory) * 1e6 * 1.001  # the smallest point of the front fits
    quick = ["--baselines", "", "--no-check", "--report", ""]
    assert main([*base, "--memory-budget", f"{budget:.0f}", *quick]) == 0
    out = capsys.readouterr().out
    held = re.search(r"memory: the kernels handed back hold [\d.e+-]+ MB \((\d+) bytes\)", out)
    assert held and int(held.group(1)) <= budget

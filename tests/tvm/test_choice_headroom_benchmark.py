"""``benchmarks/choice_headroom.py``: b* priced by the cost model against the certified optimum."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("tvm")  # the tvm extra; CI installs it

from benchmarks import choice_headroom
from layoutopt import Problem, solve_problem
from layoutopt.tvm import models, resolve_target
from layoutopt.tvm.measure.runner import LocalRunner
from layoutopt.tvm.tune.stages import TuneOptions, extract, measure

pytestmark = pytest.mark.tvm

CANDIDATES = {"blocks": [8, 16], "algorithms": ["direct", "gemm"]}


def test_the_headroom_is_bounded_by_the_optimum_that_brute_force_finds(tmp_path):
    cache = tmp_path / "costs.jsonl"
    mod = models.chain((16, 8, 16), size=6)
    row = choice_headroom.headroom(mod, cache, time_limit=30, candidates=CANDIDATES)
    options = TuneOptions(cache=cache, check=False, guard=False, baselines=(), candidates=CANDIDATES)
    measured = measure(extract(mod, resolve_target("llvm"), LocalRunner(), options), options)
    exact = solve_problem(Problem.from_graph(measured.extracted.graph, measured.costs), "bruteforce")
    assert measured.meta.stats.measured == 0  # the headroom's own measurements were cached
    assert row["optimum"] == pytest.approx(exact.objective, rel=1e-9)
    assert row["lower_bound"] == pytest.approx(exact.objective, rel=1e-6)  # certified: proven optimal
    best = row["best_fixed"]
    assert best in ("nchw8c", "nchw16c") and row["unpriced_in_best_fixed"] == []
    # each step can only remove time: b* >= b* with its layouts' fastest kernels >= the optimum
    assert row[f"{best}_predicted"] >= row[f"{best}_fastest_kernels_predicted"] >= row["optimum"] - 1e-12
    lines = choice_headroom.table([{"model": "chain", **row}], {})
    cells = [c.strip() for c in lines[-1].strip("|").split("|")]
    headroom = row[f"{best}_predicted"] / row["lower_bound"]
    assert cells[0] == "chain" and cells[5].startswith(f"**{headroom:.3f}x**")


def test_a_best_fixed_layout_that_cannot_be_priced_names_its_node_instead_of_a_ratio():
    row = {"model": "m", "layout_nodes": 3, "best_fixed": "nchw16c", "nchw16c_predicted": math.inf,
           "nchw16c_fastest_kernels_predicted": math.inf, "optimum": 1e-3, "lower_bound": 1e-3,
           "nodes_unlike_best_fixed": 1, "unpriced_in_best_fixed": ["lv580"]}
    line = choice_headroom.table([row], {})[-1]
    assert "lv580 failed its measurement" in line and "inf" not in line

"""The schedule search (the graph tuner's step 1): budgets, resume, workloads searched once, top-k
choices reaching the solver and the build, cache keys with knobs and the CPU's name.

Tiny workloads (3x3 convs of 8 channels at 8x8) and short timings: these check the machinery."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest

pytest.importorskip("tvm")

from layoutopt import ProblemError
from layoutopt.tvm import extract_layout_graph, models
from layoutopt.tvm.measure.problem import kernel_tasks, transform_tasks
from layoutopt.tvm.measure.runner import LocalRunner
from layoutopt.tvm.measure.search import search_schedules, searched_graph

pytestmark = pytest.mark.tvm

#: short timings: these tests check the machinery, not the numbers
FAST = LocalRunner(repeat=2, min_repeat_ms=1, cold_runs=2)
#: blocked direct kernels of one block, and NCHW: two base candidates per conv, one with a space
OPTIONS = {"blocks": [8], "algorithms": ["direct"]}


def graph_of(channels=(8, 8)):
    return extract_layout_graph(models.chain(channels), OPTIONS)


def search(graph, cache, **budget):
    return search_schedules(kernel_tasks(graph), cache=cache, runner=FAST, progress=False, **budget)


def test_trials_bound_the_points_measured_per_workload_beyond_todays(tmp_path):
    graph = graph_of()  # conv1 and conv2: one workload, searched once
    result = search(graph, tmp_path / "c.jsonl", trials=3)
    (measured,) = result.measured.values()
    assert len(measured) == 2 + 3  # today's two candidates, then three points of the NCHW8c space
    assert result.stats.workloads == 1 and result.stats.searched == 5 and result.stats.cut == 0
    knobs = [candidate for candidate, _ in measured if set(candidate) - {"in", "out"}]
    assert len(knobs) == 3 and all(c["in"] == "NCHW8c" and "order" not in c for c in knobs)
    assert all(math.isfinite(cost) for _, cost in measured)
    assert search(graph, None, trials=0).measured == {}  # no search
    # every point is a cache record keyed by its knobs and this CPU's name
    from layoutopt.machine import cpu_name
    from layoutopt.tvm.measure.cache import CostCache, CostContext

    cache = CostCache(tmp_path / "c.jsonl")
    records = [r for r in cache if r["workload"]["op"] == "conv2d"]
    assert sorted(json.dumps(r["candidate"], sort_keys=True) for r in records) == sorted(
        json.dumps(c, sort_keys=True) for c, _ in measured)
    for r in records:
        context = CostContext.from_record(r)
        assert r["cpu"] == context.cpu == cpu_name()
        assert CostCache.record_key(r) == context.key(r["workload"], r["candidate"])
        assert all(json.dumps(key) in CostCache.record_key(r) for key in r["candidate"])
        elsewhere = replace(context, cpu="another CPU")
        assert cache.get(elsewhere, r["workload"], r["candidate"]) is None
        assert cache.other_cpus(elsewhere, r["workload"], r["candidate"]) == [cpu_name()]


def test_the_time_budget_cuts_the_search_after_todays_candidates_and_says_so(tmp_path):
    result = search(graph_of(), tmp_path / "c.jsonl", trials=4, search_time=1e-3)
    (measured,) = result.measured.values()
    assert len(measured) == 2  # round 0 (today's candidates) is never cut
    assert result.stats.cut == 4 and result.stats.stopped
    assert "4 cut by the time budget" in result.stats.describe()
    with pytest.raises(ProblemError, match="search_time"):
        search(graph_of(), None, trials=4, search_time=0)
    with pytest.raises(ProblemError, match="trials"):
        search(graph_of(), None, trials=-1)


def test_a_rerun_measures_nothing_new_and_a_shared_workload_is_searched_once(tmp_path):
    cache = tmp_path / "c.jsonl"
    first = search(graph_of((8, 8)), cache, trials=3)
    again = search(graph_of((8, 8)), cache, trials=3)
    assert again.stats.searched == 0 and again.stats.cached == first.stats.searched == 5
    assert again.measured == first.measured  # the same decisions, replayed from the cache
    # a second model: its conv1 (8 -> 8) is the first model's workload, its conv2 (8 -> 16) is new
    other = search(graph_of((8, 16)), cache, trials=3)
    assert other.stats.workloads == 2 and other.stats.cached == 5 and other.stats.searched == 5


def test_top_k_per_algorithm_and_layout_pair_become_the_nodes_choices(tmp_path):
    graph = graph_of()
    result = search(graph, tmp_path / "c.jsonl", trials=3, rounds=0)  # no re-timing: the search's costs
    (measured,) = result.measured.values()
    blocked = sorted((cost, i) for i, (c, cost) in enumerate(measured) if c["in"] == "NCHW8c")
    fastest = measured[blocked[0][1]][0]
    for k in (1, 2, 8):
        node = searched_graph(graph, result, k).layout_node("conv1")
        assert node.labels[-1] == "NCHW->NCHW" and len(node.labels) == min(k, 4) + 1
        assert node.candidates[: min(k, 4)] == [measured[i][0] for _, i in blocked[:k]]  # fastest first
        assert node.candidates[0] == fastest
        knobs = ",".join(f"{key}={fastest[key]}" for key in sorted(fastest) if key not in ("in", "out"))
        assert node.labels[0] == "NCHW8c->NCHW8c" + (f"[{knobs}]" if knobs else "")
    assert graph.layout_node("conv1").labels == ["NCHW8c->NCHW8c", "NCHW->NCHW"]  # the original kept


def test_a_searched_schedule_reaches_the_solver_and_builds_with_its_knobs(tmp_path):
    """Every schedule measured as a choice (top-k 8): pinned to one that is not the heuristic's, the
    solution carries it and the build runs it, checked against the untouched model."""
    from layoutopt.tvm import resolve_target
    from layoutopt.tvm.tune import stages

    options = stages.TuneOptions(cache=str(tmp_path / "c.jsonl"), candidates=OPTIONS, trials=3, top_k=8,
                                 calibrate=0, profile=False, guard=False, baselines=(), search_rounds=0)
    extracted = stages.extract(models.chain((8, 8)), resolve_target("llvm"), FAST, options)
    searched = stages.search(extracted, options)
    assert searched.search.workloads == 1 and searched.search.searched == 5
    labels = searched.graph.layout_node("conv1").labels
    knobbed = next(label for label in labels if "[" in label)  # a schedule that is not the heuristic's
    assert knobbed.startswith("NCHW8c->NCHW8c[") and len(labels) == 5
    pinned = stages.search(extracted, replace(options, pin={"conv1": knobbed}))
    solved = stages.solve(stages.measure(pinned, options), options)
    transforms = len(transform_tasks(pinned.graph))  # every kernel found in the cache: the search's
    assert solved.measured.meta.stats.measured == transforms
    assert solved.solution.labels["conv1"] == knobbed
    variant = stages.build_variant(pinned, "layoutopt", "tuned", solved.solution.assignment, options)
    assert variant.max_relative_error < options.rtol  # checked against the untouched model
    candidate = pinned.graph.choice("conv1", solved.solution.assignment["conv1"]).candidate
    knobs = {key: value for key, value in candidate.items() if key not in ("in", "out")}
    script = variant.module.script()
    assert knobs and all(f'"{key}": {value!r}'.replace("'", '"') in script for key, value in knobs.items())


def test_tune_and_build_searches_and_says_what_it_searched(tmp_path):
    from layoutopt.tvm import tune_and_build

    kwargs = {"cache": tmp_path / "c.jsonl", "candidates": OPTIONS, "guard": False, "baselines": (),
              "calibrate": 0, "profile": False, "repeat": 3, "runner": FAST}
    result = tune_and_build(models.chain((8, 8)), trials=2, **kwargs)
    assert result.search.searched == 4 and result.search.cut == 0
    assert "schedule search: 1 workloads, 4 configs searched, 0 from the cost cache" in result.summary()
    from layoutopt.tvm.tune.report import write_report

    report = write_report(result, tmp_path / "report")["markdown"].read_text()
    assert "Schedules: schedule search: 1 workloads, 4 configs searched" in report
    again = tune_and_build(models.chain((8, 8)), trials=2, search_time=600, **kwargs)
    assert again.search.searched == 0 and again.search.cached == 4
    from layoutopt.tvm.tune import stages

    untouched = object()
    assert stages.search(untouched, stages.TuneOptions()) is untouched  # trials=0 (the default): no search
    with pytest.raises(ProblemError, match="top_k"):
        tune_and_build(models.chain((8, 8)), trials=2, top_k=0, **kwargs)


def test_paired_rounds_drop_a_lucky_point_keep_a_truly_faster_one_and_are_not_redone(tmp_path, monkeypatch):
    """Two searched points made lucky in the cost cache (costs a third and half the heuristic point's):
    re-timed side by side with the heuristic point, the first is slower in every round (dropped, not a
    choice), the second 1.25x faster in every round despite the rounds' drift (kept, at the heuristic
    point's cost over 1.25, which the solver's cost vector carries). A rerun re-times nothing."""
    from layoutopt.tvm import resolve_target
    from layoutopt.tvm.measure.cache import CostCache, task_key
    from layoutopt.tvm.measure.measure import Measurer
    from layoutopt.tvm.tune import stages

    path = tmp_path / "c.jsonl"
    options = stages.TuneOptions(cache=str(path), candidates=OPTIONS, trials=3, top_k=1, calibrate=0,
                                 profile=False, guard=False, baselines=(), check=False, search_rounds=0)
    extracted = stages.extract(models.chain((8, 8)), resolve_target("llvm"), FAST, options)
    stages.search(extracted, options)  # measures today's candidates and three searched points
    cache = CostCache(path)
    records = [r for r in cache if r["workload"]["op"] == "conv2d" and r["candidate"]["in"] == "NCHW8c"]
    default = next(r for r in records if set(r["candidate"]) == {"in", "out"})
    lucky, faster = [r for r in records if r is not default][:2]
    default_cost = default["median"] if not default.get("pass_medians") else min(default["pass_medians"])
    for record, share in ((lucky, 3), (faster, 2)):  # lucky once: the search's costs say they win
        cache.put({**record, "median": default_cost / share, "pass_medians": None})
    drift = [1.0, 1.6, 0.9, 1.3, 1.0]  # the machine's load, round by round: it hits all kernels alike
    calls = []

    def paired(self, tasks, rounds, desc=""):
        tasks = list(tasks)
        calls.append([candidate for _, candidate in tasks])
        assert rounds == 5 and tasks[0][1] == default["candidate"]  # the heuristic point is timed too
        scale = {json.dumps(lucky["candidate"]): 1.2, json.dumps(faster["candidate"]): 0.8}
        return [[10e-6 * d * scale.get(json.dumps(candidate), 1.0) for d in drift] for _, candidate in tasks]

    monkeypatch.setattr(Measurer, "time_rounds", paired)
    retimed = stages.search(extracted, replace(options, search_rounds=5, top_k=2))
    assert len(calls) == 1 and lucky["candidate"] in calls[0] and faster["candidate"] in calls[0]
    stats = retimed.search
    assert stats.kept == 1 and stats.dropped == len(calls[0]) - 2 and stats.retimed == len(calls[0])
    node = retimed.graph.layout_node("conv1")
    assert node.candidates == [faster["candidate"], default["candidate"], {"in": "NCHW", "out": "NCHW"}]
    measured = stages.measure(retimed, options)
    costs = measured.costs.nodes["conv1"]
    assert costs[0] == pytest.approx(default_cost / 1.25) and costs[1] == pytest.approx(default_cost)
    assert measured.meta.measured[task_key(node.workload, faster["candidate"])] == pytest.approx(
        default_cost / 2)  # the cache's lucky cost stays the measurement's, not the solver's
    # the rerun: the paired rounds are in the cost cache, nothing is timed again
    monkeypatch.setattr(Measurer, "time_rounds", lambda *args, **kwargs: pytest.fail("re-timed again"))
    again = stages.search(extracted, replace(options, search_rounds=5, top_k=2))
    assert again.search.retimed == 0 and again.search.retimed_cached == len(calls[0])
    assert again.graph.layout_node("conv1").candidates == node.candidates
    assert again.search_costs == retimed.search_costs
    paired_records = [r for r in CostCache(path) if r["workload"]["op"] == "paired_rounds"]
    assert len(paired_records) == 1 and len(paired_records[0]["round_times"]) == len(calls[0])

"""The JSON-lines cost cache: round trip, latest wins, torn and garbage lines, infinite costs."""

from __future__ import annotations

import json
import math

import pytest

pytest.importorskip("tvm")

from layoutopt import ProblemError
from layoutopt.tvm.cache import CostCache, record_cost

pytestmark = pytest.mark.tvm

TARGET, VERSION = '{"kind": "llvm", "mcpu": "znver4"}', "0.27.0.post1"
WORKLOAD = {
    "op": "layout_transform",
    "shape": [1, 16, 4, 4],
    "src": "NCHW",
    "dst": "NCHW8c",
    "dtype": "float32",
}


def record(median, candidate=None, **extra):
    return {
        "target": TARGET,
        "tvm": VERSION,
        "workload": WORKLOAD,
        "candidate": candidate or {},
        "median": median,
        "results": [median] if median else [],
        "error": None,
        **extra,
    }


def test_round_trip_through_the_file(tmp_path):
    path = tmp_path / "sub" / "costs.jsonl"
    cache = CostCache(path)
    assert cache.get(TARGET, VERSION, WORKLOAD, {}) is None
    cache.put(record(1.5e-3))
    reopened = CostCache(path)
    got = reopened.get(TARGET, VERSION, dict(reversed(list(WORKLOAD.items()))), {})  # key order is irrelevant
    assert got["median"] == 1.5e-3 and "timestamp" in got
    assert len(reopened) == 1 and reopened.skipped_lines == 0


def test_keys_separate_target_version_and_candidate(tmp_path):
    cache = CostCache(tmp_path / "c.jsonl")
    cache.put(record(1.0))
    assert cache.get(TARGET, "0.28", WORKLOAD, {}) is None
    assert cache.get('{"kind": "llvm", "mcpu": "skylake"}', VERSION, WORKLOAD, {}) is None
    assert cache.get(TARGET, VERSION, {**WORKLOAD, "dst": "NCHW4c"}, {}) is None


def test_latest_record_wins(tmp_path):
    path = tmp_path / "c.jsonl"
    cache = CostCache(path)
    cache.put(record(2.0))
    cache.put(record(1.0))
    assert CostCache(path).get(TARGET, VERSION, WORKLOAD, {})["median"] == 1.0
    assert len(path.read_text().splitlines()) == 2  # append-only


def test_torn_last_line_is_ignored_and_appending_continues_cleanly(tmp_path):
    path = tmp_path / "c.jsonl"
    CostCache(path).put(record(1.0))
    whole = json.dumps(record(2.0, {"x": 1}))
    with open(path, "a") as handle:
        handle.write(whole[: len(whole) // 2])  # what a kill -9 in the middle of a write leaves
    cache = CostCache(path)
    assert cache.skipped_lines == 1 and len(cache) == 1
    cache.put(record(3.0, {"x": 2}))
    again = CostCache(path)
    assert again.skipped_lines == 1  # the torn fragment stays on a line of its own
    assert again.get(TARGET, VERSION, WORKLOAD, {"x": 2})["median"] == 3.0
    assert again.get(TARGET, VERSION, WORKLOAD, {})["median"] == 1.0


def test_garbage_lines_are_skipped_not_fatal(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text('not json\n{"target": "t"}\n\n' + json.dumps(record(4.0)) + "\n")
    cache = CostCache(path)
    assert cache.skipped_lines == 2 and cache.get(TARGET, VERSION, WORKLOAD, {})["median"] == 4.0


def test_failures_are_stored_as_null_and_cost_inf(tmp_path):
    path = tmp_path / "c.jsonl"
    CostCache(path).put({**record(math.inf), "error": "worker crashed (SIGSEGV)"})
    stored = CostCache(path).get(TARGET, VERSION, WORKLOAD, {})
    assert stored["median"] is None and stored["error"] == "worker crashed (SIGSEGV)"
    assert record_cost(stored) == math.inf
    assert record_cost(record(2e-3)) == 2e-3


def test_memory_only_cache_writes_nothing(tmp_path):
    cache = CostCache()
    cache.put(record(1.0))
    assert len(cache) == 1 and not list(tmp_path.iterdir())


def test_a_directory_is_not_a_cache(tmp_path):
    with pytest.raises(ProblemError, match="is a directory"):
        CostCache(tmp_path)

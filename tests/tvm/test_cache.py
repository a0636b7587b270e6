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


def test_a_device_keys_its_costs_apart_and_local_keys_stay_as_they_were(tmp_path):
    # the key of a cost measured on this machine, as caches already on users' disks hold it
    assert CostCache.key(TARGET, VERSION, WORKLOAD, {"in": "NCHW"}) == (
        '["{\\"kind\\": \\"llvm\\", \\"mcpu\\": \\"znver4\\"}","0.27.0.post1"]'
        '[{"dst":"NCHW8c","dtype":"float32","op":"layout_transform","shape":[1,16,4,4],"src":"NCHW"},'
        '{"in":"NCHW"}]')
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps(record(1.0)) + "\n")  # a record written before devices were keyed
    cache = CostCache(path)
    assert cache.get(TARGET, VERSION, WORKLOAD, {})["median"] == 1.0
    assert cache.get(TARGET, VERSION, WORKLOAD, {}, device="rpc:pi") is None
    cache.put(record(2.0, device="rpc:pi"))
    reopened = CostCache(path)
    assert reopened.get(TARGET, VERSION, WORKLOAD, {}, device="rpc:pi")["median"] == 2.0
    assert reopened.get(TARGET, VERSION, WORKLOAD, {})["median"] == 1.0  # both kept, apart
    assert reopened.get(TARGET, VERSION, WORKLOAD, {}, device="rpc:other") is None and len(reopened) == 2


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


# -- writes that must not lose work (issue 12) ----------------------------------------------------


def _unprivileged(function):
    """Run ``function()`` as an unprivileged user (root ignores file modes): in a forked child that
    drops to nobody when this process is root, in-process otherwise. Returns its result or raises
    what it raised, as ``(type name, message)``."""
    import os
    import pickle

    if os.geteuid() != 0:
        try:
            return function()
        except Exception as exc:
            return (type(exc).__name__, str(exc))
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.setgid(65534)
            os.setuid(65534)
            try:
                outcome = function()
            except Exception as exc:
                outcome = (type(exc).__name__, str(exc))
            os.write(write, pickle.dumps(outcome))
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as handle:
        data = handle.read()
    os.waitpid(pid, 0)
    return pickle.loads(data)


def test_a_record_the_cache_returned_can_be_put_back(tmp_path):
    path = tmp_path / "c.jsonl"
    cache = CostCache(path)
    returned = cache.put(record(1e-3, results=[math.inf, 1e-3, 1.1e-3]))
    assert returned["results"] == [None, 1e-3, 1.1e-3]
    cache.put({**returned, "pass_medians": [1e-3, 0.9e-3]})  # TypeError before: isfinite(None)
    stored = CostCache(path).get(TARGET, VERSION, WORKLOAD, {})
    assert stored["results"] == [None, 1e-3, 1.1e-3] and record_cost(stored) == 0.9e-3


def test_non_finite_pass_medians_are_written_and_do_not_count(tmp_path):
    path = tmp_path / "c.jsonl"
    CostCache(path).put(record(1e-3, pass_medians=[1e-3, math.inf, math.nan]))  # ValueError before
    stored = CostCache(path).get(TARGET, VERSION, WORKLOAD, {})
    assert stored["pass_medians"] == [1e-3, None, None]
    assert record_cost(stored) == 1e-3


def test_a_nan_median_in_the_file_is_skipped_not_a_cost(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps(record(1.0)).replace("1.0", "NaN", 1) + "\n")
    cache = CostCache(path)
    assert cache.skipped_lines == 1 and cache.get(TARGET, VERSION, WORKLOAD, {}) is None
    assert record_cost({"median": math.nan, "error": None}) == math.inf


def test_a_parent_path_that_is_a_file_is_refused_when_opened(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(ProblemError, match="cannot write cost cache"):
        CostCache(tmp_path / "file" / "costs.jsonl")  # FileExistsError at the first put before


@pytest.fixture
def shared_dir():
    """A directory every user may enter (pytest's tmp_path sits in a root-only one)."""
    import shutil
    import tempfile
    from pathlib import Path

    path = Path(tempfile.mkdtemp(prefix="layoutopt-cache-test-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_a_read_only_cache_file_is_refused_when_opened(shared_dir):
    path = shared_dir / "c.jsonl"
    CostCache(path).put(record(1.0))
    path.chmod(0o444)
    outcome = _unprivileged(lambda: len(CostCache(path)))
    assert outcome[0] == "ProblemError" and "cannot write cost cache" in outcome[1]


def test_an_unreadable_directory_is_a_problem_error(shared_dir):
    locked = shared_dir / "locked"
    locked.mkdir()
    (locked / "c.jsonl").write_text(json.dumps(record(1.0)) + "\n")
    locked.chmod(0o000)
    try:
        outcome = _unprivileged(lambda: len(CostCache(locked / "c.jsonl")))
    finally:
        locked.chmod(0o755)
    assert outcome[0] == "ProblemError" and "c.jsonl" in outcome[1]  # PermissionError before


def test_a_write_failing_mid_run_keeps_the_record_in_memory(tmp_path):
    directory = tmp_path / "d"
    cache = CostCache(directory / "c.jsonl")
    (directory / "c.jsonl").unlink(missing_ok=True)
    directory.rmdir()
    directory.write_text("now a file")  # appending fails even for root
    kept = cache.put(record(2e-3))
    assert cache.get(TARGET, VERSION, WORKLOAD, {}) is kept and "NotADirectoryError" in cache.write_error


def test_a_second_timing_pass_after_a_non_finite_repeat_is_kept(tmp_path, monkeypatch):
    """A second timing pass puts back the record the cache returned (its inf repeat now None)."""
    from layoutopt.tvm.measure import Measurer

    measurer = Measurer(cache=tmp_path / "c.jsonl")
    first = measurer._result(measurer.cache.put({**record(1e-3, results=[math.inf, 1e-3, 1e-3]),
                                                 "target": measurer.target_key, "tvm": measurer.tvm_version}),
                             cached=False)
    again = measurer._add_pass(first, {"median": 0.8e-3, "results": [0.8e-3], "load_average": 0.1})
    assert again.cost == 0.8e-3 and again.record["pass_medians"] == [1e-3, 0.8e-3]
    stored = CostCache(tmp_path / "c.jsonl").get(measurer.target_key, measurer.tvm_version, WORKLOAD, {})
    assert stored["pass_medians"] == [1e-3, 0.8e-3]
    measurer.close()

"""The JSON-lines cost cache: round trip, latest wins, torn and garbage lines, infinite costs."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from importlib import metadata

import pytest

pytest.importorskip("tvm")

from layoutopt import ProblemError
from layoutopt.tvm._tvm import target_key
from layoutopt.tvm.kernels import SCHEDULE_VERSION
from layoutopt.tvm.measure.cache import CostCache, CostContext, record_cost
from layoutopt.tvm.measure.runner import LocalRunner

pytestmark = pytest.mark.tvm

CONTEXT = CostContext({"kind": "llvm", "mcpu": "znver4"}, "0.27.0.post1", schedules=5)
TARGET, VERSION = CONTEXT.target_key, CONTEXT.version_key
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
    assert cache.get(CONTEXT, WORKLOAD, {}) is None
    cache.put(record(1.5e-3))
    reopened = CostCache(path)
    got = reopened.get(CONTEXT, dict(reversed(list(WORKLOAD.items()))), {})  # key order is irrelevant
    assert got["median"] == 1.5e-3 and "timestamp" in got
    assert len(reopened) == 1 and reopened.skipped_lines == 0


def test_keys_separate_target_version_and_candidate(tmp_path):
    cache = CostCache(tmp_path / "c.jsonl")
    cache.put(record(1.0))
    assert cache.get(replace(CONTEXT, tvm="0.28"), WORKLOAD, {}) is None
    assert cache.get(replace(CONTEXT, schedules=6), WORKLOAD, {}) is None
    assert cache.get(replace(CONTEXT, timing="warm"), WORKLOAD, {}) is None
    assert cache.get(replace(CONTEXT, target={"kind": "llvm", "mcpu": "skylake"}), WORKLOAD, {}) is None
    assert cache.get(CONTEXT, {**WORKLOAD, "dst": "NCHW4c"}, {}) is None


def test_a_device_keys_its_costs_apart_and_local_keys_stay_as_they_were(tmp_path):
    # the key of a cost measured on this machine, as caches already on users' disks hold it
    assert CostCache.key(TARGET, VERSION, WORKLOAD, {"in": "NCHW"}) == (
        '["{\\"kind\\": \\"llvm\\", \\"mcpu\\": \\"znver4\\"}","0.27.0.post1+schedules.5+cold"]'
        '[{"dst":"NCHW8c","dtype":"float32","op":"layout_transform","shape":[1,16,4,4],"src":"NCHW"},'
        '{"in":"NCHW"}]')
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps(record(1.0)) + "\n")  # a record written before devices were keyed
    cache = CostCache(path)
    assert cache.get(CONTEXT, WORKLOAD, {})["median"] == 1.0
    assert cache.get(replace(CONTEXT, device="rpc:pi"), WORKLOAD, {}) is None
    cache.put(record(2.0, device="rpc:pi"))
    reopened = CostCache(path)
    assert reopened.get(replace(CONTEXT, device="rpc:pi"), WORKLOAD, {})["median"] == 2.0
    assert reopened.get(CONTEXT, WORKLOAD, {})["median"] == 1.0  # both kept, apart
    assert reopened.get(replace(CONTEXT, device="rpc:other"), WORKLOAD, {}) is None and len(reopened) == 2


def test_latest_record_wins(tmp_path):
    path = tmp_path / "c.jsonl"
    cache = CostCache(path)
    cache.put(record(2.0))
    cache.put(record(1.0))
    assert CostCache(path).get(CONTEXT, WORKLOAD, {})["median"] == 1.0
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
    assert again.get(CONTEXT, WORKLOAD, {"x": 2})["median"] == 3.0
    assert again.get(CONTEXT, WORKLOAD, {})["median"] == 1.0


def test_garbage_lines_are_skipped_not_fatal(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text('not json\n{"target": "t"}\n\n' + json.dumps(record(4.0)) + "\n")
    cache = CostCache(path)
    assert cache.skipped_lines == 2 and cache.get(CONTEXT, WORKLOAD, {})["median"] == 4.0


def test_failures_are_stored_as_null_and_cost_inf(tmp_path):
    path = tmp_path / "c.jsonl"
    CostCache(path).put({**record(math.inf), "error": "worker crashed (SIGSEGV)"})
    stored = CostCache(path).get(CONTEXT, WORKLOAD, {})
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
    stored = CostCache(path).get(CONTEXT, WORKLOAD, {})
    assert stored["results"] == [None, 1e-3, 1.1e-3] and record_cost(stored) == 0.9e-3


def test_non_finite_pass_medians_are_written_and_do_not_count(tmp_path):
    path = tmp_path / "c.jsonl"
    CostCache(path).put(record(1e-3, pass_medians=[1e-3, math.inf, math.nan]))  # ValueError before
    stored = CostCache(path).get(CONTEXT, WORKLOAD, {})
    assert stored["pass_medians"] == [1e-3, None, None]
    assert record_cost(stored) == 1e-3


def test_a_nan_median_in_the_file_is_skipped_not_a_cost(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps(record(1.0)).replace("1.0", "NaN", 1) + "\n")
    cache = CostCache(path)
    assert cache.skipped_lines == 1 and cache.get(CONTEXT, WORKLOAD, {}) is None
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
    assert cache.get(CONTEXT, WORKLOAD, {}) is kept and "NotADirectoryError" in cache.write_error


def test_a_second_timing_pass_after_a_non_finite_repeat_is_kept(tmp_path, monkeypatch):
    """A second timing pass puts back the record the cache returned (its inf repeat now None)."""
    from layoutopt.tvm.measure.measure import Measurer
    from layoutopt.tvm.measure.worker import Timing

    measurer = Measurer(cache=tmp_path / "c.jsonl")
    first = measurer._result(measurer.cache.put({**record(1e-3, results=[math.inf, 1e-3, 1e-3]),
                                                 **measurer.context.record_fields()}), cached=False)
    again = measurer._add_pass(first, Timing(0.8e-3, (0.8e-3,), load_average=0.1))
    assert again.cost == 0.8e-3 and again.record["pass_medians"] == [1e-3, 0.8e-3]
    stored = CostCache(tmp_path / "c.jsonl").get(measurer.context, WORKLOAD, {})
    assert stored["pass_medians"] == [1e-3, 0.8e-3]
    measurer.close()


#: lines of a cost cache written by layoutopt before the cost context was a record (commit e285486, on
#: an AVX2 host): two passes of a cold transform, a failed kernel, and a warm timing of one pass
WRITTEN_BEFORE = [
    '{"build_seconds": 0.0951, "candidate": {}, "check_error": 0.0, "cpu_seconds": 0.1112, "error": null, '
    '"load_average": 2.39, "median": 2.2317500000000003e-06, "pass_medians": [2.2317500000000003e-06, '
    '2.46725e-06], "results": [3.161e-06, 1.3025000000000002e-06, 2.9255e-06, 2.009e-06], "run_seconds": '
    '0.0238, "runner": "this machine", "target": "{\\"kind\\": \\"llvm\\", \\"mcpu\\": \\"znver3\\"}", '
    '"timestamp": "2026-12-01T16:11:50+00:00", "tvm": "0.27.0.post1+schedules.5+cold", "workload": {"dst": '
    '"NCHW8c", "dtype": "float32", "op": "layout_transform", "shape": [1, 16, 4, 4], "src": "NCHW"}}',
    '{"build_seconds": 0.1668, "candidate": {}, "error": "RuntimeError: device is on fire", "median": null, '
    '"results": [], "runner": "this machine", "target": "{\\"kind\\": \\"llvm\\", \\"mcpu\\": '
    '\\"znver3\\"}", "timestamp": "2026-12-01T16:12:06+00:00", "tvm": "0.27.0.post1+schedules.5+cold", '
    '"workload": {"dst": "NCHW4c", "dtype": "float32", "op": "layout_transform", "shape": [1, 16, 4, 4], '
    '"src": "NCHW"}}',
    '{"build_seconds": 0.163, "candidate": {}, "check_error": 0.0, "cpu_seconds": 0.1644, "error": null, '
    '"load_average": 2.39, "median": 1.11984926686217e-05, "results": [1.2062865102639297e-05, '
    '1.0334120234604104e-05], "run_seconds": 0.0392, "runner": "this machine", "target": "{\\"kind\\": '
    '\\"llvm\\", \\"mcpu\\": \\"znver3\\"}", "timestamp": "2026-12-01T16:11:54+00:00", "tvm": '
    '"0.27.0.post1+schedules.5", "workload": {"dst": "NCHW8c", "dtype": "float32", "op": "layout_transform", '
    '"shape": [1, 16, 4, 4], "src": "NCHW"}}',
]


def test_records_written_before_the_cost_context_are_found_under_the_same_keys(tmp_path):
    path = tmp_path / "before.jsonl"
    path.write_text("\n".join(WRITTEN_BEFORE) + "\n")
    cache = CostCache(path)
    assert len(cache) == 3 and cache.skipped_lines == 0
    cold = CostContext({"kind": "llvm", "mcpu": "znver3"}, "0.27.0.post1", schedules=5)
    warm = replace(cold, timing="warm")
    to_8c, to_4c = WORKLOAD, {**WORKLOAD, "dst": "NCHW4c"}
    assert record_cost(cache.get(cold, to_8c, {})) == 2.2317500000000003e-06
    assert cache.get(cold, to_4c, {})["error"] == "RuntimeError: device is on fire"
    assert record_cost(cache.get(warm, to_8c, {})) == 1.11984926686217e-05
    for line in WRITTEN_BEFORE:  # each record's context, read back, writes its fields byte for byte
        written = json.loads(line)
        context = CostContext.from_record(written)
        assert context in (cold, warm) and context.key(written["workload"], written["candidate"]) == (
            CostCache.record_key(written))
        assert context.record_fields() == {"target": written["target"], "tvm": written["tvm"]}


@dataclass
class RaisingRunner(LocalRunner):
    def load(self, path, name):
        raise RuntimeError("device is on fire")


def test_the_measurer_keys_and_writes_records_as_before(tmp_path):
    """The cache key of the measurer's context is the one the code before it built from the TVM version,
    the schedule version and the timing, plus this CPU's name; its records carry the same fields, and
    the CPU's; a record written before (no CPU) is found by the measurer as before."""
    from layoutopt.machine import cpu_name
    from layoutopt.tvm.measure.measure import Measurer

    for cold in (True, False):
        with Measurer(cache=tmp_path / "c.jsonl", runner=LocalRunner(cold=cold)) as measurer:
            target = target_key(measurer.target)
            version = metadata.version("apache-tvm")
            before = f"{version}+schedules.{SCHEDULE_VERSION}" + ("+cold" if cold else "")
            assert measurer.context.record_fields() == {"target": target, "tvm": before, "cpu": cpu_name()}
            assert measurer.context.key(WORKLOAD, {}) == CostCache.key(target, before, WORKLOAD, {},
                                                                        cpu=cpu_name())
            legacy = {"target": target, "tvm": before, "workload": WORKLOAD, "candidate": {"old": 1},
                      "median": 3e-6, "results": [3e-6], "error": None}
            measurer.cache.put(legacy)
            assert measurer.lookup(WORKLOAD, {"old": 1}).cost == 3e-6  # found as before
    fast = LocalRunner(repeat=2, min_repeat_ms=1, cold_runs=2)
    for runner, written in ((fast, WRITTEN_BEFORE[0]), (RaisingRunner(), WRITTEN_BEFORE[1])):
        with Measurer(cache=tmp_path / f"{type(runner).__name__}.jsonl", runner=runner, progress=False) as m:
            (result,) = m.measure([(WORKLOAD, {})])
        assert sorted(result.record) == sorted([*json.loads(written), "cpu"]), result.error
        assert result.record["cpu"] == cpu_name()


def test_a_cache_moved_to_another_cpu_is_not_reused_silently(tmp_path, caplog):
    """Records of another CPU are not reused: counted, said, measured again; both CPUs' records stay."""
    from layoutopt.tvm.measure.measure import Measurer

    path = tmp_path / "moved.jsonl"
    fast = LocalRunner(repeat=2, min_repeat_ms=1, cold_runs=2)
    with Measurer(cache=path, runner=fast, progress=False) as measurer:
        elsewhere = replace(measurer.context, cpu="AMD EPYC 9R14 (znver4)")
        measurer.cache.put({**elsewhere.record_fields(), "workload": WORKLOAD, "candidate": {},
                            "median": 1.0, "results": [1.0], "error": None})
        assert measurer.lookup(WORKLOAD, {}) is None
        assert measurer.cache.other_cpus(measurer.context, WORKLOAD, {}) == ["AMD EPYC 9R14 (znver4)"]
        with caplog.at_level("WARNING"):
            (result,) = measurer.measure([(WORKLOAD, {})])
        assert measurer.stats.other_cpu == 1 and measurer.stats.measured == 1 and result.cost < 1.0
        assert "another CPU (AMD EPYC 9R14 (znver4))" in caplog.text
        measurer.measure([(WORKLOAD, {})])
        assert measurer.stats.cached == 1 and measurer.stats.other_cpu == 0  # its own record now
    reread = CostCache(path)
    assert reread.get(elsewhere, WORKLOAD, {})["median"] == 1.0  # the other CPU's record is kept
    assert record_cost(reread.get(measurer.context, WORKLOAD, {})) == result.cost
    cpu = replace(CONTEXT, cpu="Xeon (rocketlake)")
    assert CostContext.from_record(cpu.record_fields()) == cpu and cpu.key(WORKLOAD, {}) != CONTEXT.key(
        WORKLOAD, {})
    with pytest.raises(ProblemError, match="cost context cpu"):
        replace(CONTEXT, cpu="")


def test_each_timing_has_a_version_field_of_its_own_that_reads_back():
    for timing, suffix in (("cold", "+cold"), ("handoff", "+handoff"), ("warm", "")):
        context = CostContext({"kind": "llvm"}, "0.27", 5, timing)
        assert context.version_key == "0.27+schedules.5" + suffix
        assert CostContext.from_record(context.record_fields()) == context


def test_a_cost_context_is_checked_and_a_foreign_record_is_named():
    with pytest.raises(ProblemError, match="timing 'tepid'"):
        CostContext({"kind": "llvm"}, "0.27", 5, timing="tepid")
    with pytest.raises(ProblemError, match="expected apache-tvm's version"):
        CostContext({"kind": "llvm"}, "0.27+schedules.5", 5)
    with pytest.raises(ProblemError, match=r"tvm '0\.27\.0\.post1': not the fields of a cost context"):
        CostContext.from_record({"target": TARGET, "tvm": "0.27.0.post1"})  # before the schedule versions

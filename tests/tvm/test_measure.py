"""The measurer: finite costs, cache hits, duplicates, crashes/hangs/errors recorded, kill -9 and resume."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass

import pytest

pytest.importorskip("tvm")

from layoutopt import ProblemError
from layoutopt.isolation import WorkerStartError
from layoutopt.tvm.kernels import layout_transform_workload
from layoutopt.tvm.measure.measure import Measurer
from layoutopt.tvm.measure.runner import LocalRunner, RPCRunner, parse_rpc_address

pytestmark = pytest.mark.tvm

#: short timings: these tests check the machinery, not the numbers
FAST = LocalRunner(repeat=2, min_repeat_ms=1, cold_runs=2)


@dataclass
class CrashingRunner(LocalRunner):
    """Kills the worker the way a segfaulting kernel would."""

    def load(self, path, name):
        os.abort()


@dataclass
class HangingRunner(LocalRunner):
    def load(self, path, name):
        time.sleep(600)


@dataclass
class RaisingRunner(LocalRunner):
    def load(self, path, name):
        raise RuntimeError("device is on fire")


def transforms(count):
    layouts = ["NCHW", "NCHW4c", "NCHW8c", "NCHW16c"]
    pairs = [(s, d) for s in layouts for d in layouts if s != d]
    return [
        (layout_transform_workload([1, 16, 4, 2 + i // len(pairs)], *pairs[i % len(pairs)]), {})
        for i in range(count)
    ]


def test_costs_are_positive_finite_medians(tiny_conv, tmp_path):
    candidates = [{"in": "NCHW8c", "out": "NCHW16c"}, {"in": "NCHW", "out": "NCHW"}]
    with Measurer(
        cache=tmp_path / "c.jsonl", runner=LocalRunner(repeat=3, min_repeat_ms=2), progress=False, passes=1
    ) as m:
        results = m.measure([(tiny_conv, c) for c in candidates] + transforms(1))
    assert [r.candidate for r in results[:2]] == candidates
    for result in results:
        assert result.ok and not result.cached and 0 < result.cost < 0.1
        assert len(result.results) == 3 and min(result.results) <= result.cost <= max(result.results)
        assert result.record["check_error"] < 1e-5 and result.record["build_seconds"] > 0
        assert result.record["cpu_seconds"] > 0 and result.record["load_average"] >= 0
    assert m.stats.measured == 3 and m.stats.failed == 0


def test_every_kernel_is_timed_once_per_pass_and_costs_its_fastest_pass(tiny_conv, tmp_path):
    tasks = [(tiny_conv, {"in": "NCHW8c", "out": "NCHW8c"}), *transforms(2)]
    with Measurer(cache=tmp_path / "c.jsonl", runner=FAST, progress=False, passes=3) as m:
        results = m.measure(tasks)
        assert m.worker_starts == 1
    for result in results:
        passes = result.record["pass_medians"]
        assert len(passes) == 3 and len(result.results) == 3 * FAST.repeat
        assert result.ok and result.cost == min(passes) and result.record["median"] == passes[0]
    with Measurer(cache=tmp_path / "c.jsonl", runner=FAST, progress=False) as again:  # the cache keeps them
        assert [r.cost for r in again.measure(tasks)] == [r.cost for r in results]
        assert again.worker_starts == 0


@dataclass
class LoggingRunner(LocalRunner):
    """Logs ``[event, pid, start, end]`` of every library export and every timing to a file."""

    log: str = ""

    def export(self, executable, path):
        started = time.time()
        super().export(executable, path)
        self._log("export", started)

    def time(self, module, device, name, args):
        started = time.time()
        results = super().time(module, device, name, args)
        self._log("time", started)
        return results

    def _log(self, event, started):
        with open(self.log, "a") as log:
            log.write(json.dumps([event, os.getpid(), started, time.time()]) + "\n")


def test_kernels_are_compiled_ahead_on_every_worker_and_timed_alone_afterwards(tmp_path):
    log = tmp_path / "events.jsonl"
    runner = LoggingRunner(repeat=2, min_repeat_ms=1, log=str(log))
    tasks = transforms(12)  # two libraries of up to 8 kernels
    with Measurer(runner=runner, progress=False, workers=2, passes=2) as m:
        results = m.measure(tasks)
    assert all(r.ok for r in results) and m.stats.workers == 2 and m.stats.devices == 1
    events = [json.loads(line) for line in log.read_text().splitlines()]
    exports = [e for e in events if e[0] == "export"]
    timings = [e for e in events if e[0] == "time"]
    assert len(exports) == 2 and len({pid for _, pid, _, _ in exports}) == 2  # both workers compiled
    assert len(timings) == 2 * len(tasks) and len({pid for _, pid, _, _ in timings}) == 1  # one timed
    # never while compiling
    assert max(end for *_, end in exports) <= min(start for _, _, start, _ in timings)
    assert m.stats.compile_seconds > 0 and m.stats.time_seconds > 0


@dataclass
class CrashingOnceRunner(LocalRunner):
    """Kills the compiling worker at its first library export, the way a crashing compiler would."""

    marker: str = ""

    def export(self, executable, path):
        if not os.path.exists(self.marker):
            open(self.marker, "w").close()
            os.abort()
        super().export(executable, path)


def test_a_batch_whose_worker_dies_is_compiled_again_kernel_by_kernel(tmp_path):
    runner = CrashingOnceRunner(repeat=1, min_repeat_ms=1, marker=str(tmp_path / "crashed"))
    tasks = transforms(3)  # one library of three kernels: its worker dies, then each is compiled alone
    with Measurer(runner=runner, progress=False, passes=1) as m:
        results = m.measure(tasks)
    assert all(r.ok for r in results), [r.error for r in results]
    assert m.worker_starts == 2  # the crash cost one worker


@dataclass
class BlasThreadsRunner(LocalRunner):
    """Reports the measuring worker's BLAS libraries and their thread counts through the error message."""

    def load(self, path, name):
        from threadpoolctl import threadpool_info

        blas = [f"{pool['internal_api']}={pool['num_threads']}" for pool in threadpool_info()
                if pool["user_api"] == "blas"]
        raise RuntimeError("BLAS " + " ".join(blas))


def test_the_worker_runs_blas_on_one_thread_so_it_cannot_compete_with_the_kernel(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "2")  # the caller's setting must not reach the worker
    with Measurer(runner=BlasThreadsRunner(), progress=False) as m:
        (result,) = m.measure(transforms(1))
    assert not result.ok
    blas = result.error.split("BLAS ", 1)[1].split()
    assert blas and all(pool.endswith("=1") for pool in blas), result.error  # numpy's BLAS is loaded


def test_cache_hits_skip_measurement(tiny_conv, tmp_path):
    tasks = [(tiny_conv, {"in": "NCHW8c", "out": "NCHW8c"}), *transforms(2)]
    with Measurer(cache=tmp_path / "c.jsonl", runner=FAST, progress=False) as first:
        measured = first.measure(tasks)
    with Measurer(cache=tmp_path / "c.jsonl", runner=FAST, progress=False) as second:
        again = second.measure(tasks + transforms(3)[2:])
        assert second.worker_starts == 1  # only the one new transform was run
    assert [r.cost for r in again[:3]] == [r.cost for r in measured] and all(r.cached for r in again[:3])
    assert not again[3].cached and second.stats.cached == 3 and second.stats.measured == 1
    with Measurer(cache=tmp_path / "c.jsonl", runner=FAST, progress=False) as third:
        third.measure(tasks)
        assert third.worker_starts == 0  # a full cache never starts TVM's worker


def test_times_from_another_schedule_version_are_not_reused(tmp_path, monkeypatch):
    from layoutopt.tvm.measure import measure

    tasks = transforms(1)
    with Measurer(cache=tmp_path / "c.jsonl", runner=FAST, progress=False) as old:
        old.measure(tasks)
    monkeypatch.setattr(measure, "SCHEDULE_VERSION", measure.SCHEDULE_VERSION + 1)
    with Measurer(cache=tmp_path / "c.jsonl", runner=FAST, progress=False) as new:
        (result,) = new.measure(tasks)
    assert not result.cached and new.stats.measured == 1


def test_duplicates_are_measured_once(tmp_path):
    task = transforms(1)[0]
    with Measurer(runner=FAST, progress=False) as m:
        results = m.measure([task, task, (dict(reversed(list(task[0].items()))), {})])
    assert (m.stats.requested, m.stats.measured) == (3, 1)
    assert results[0] is results[1] is results[2]


@pytest.mark.parametrize(
    "runner,reason",
    [
        (CrashingRunner(), "worker process died (killed by SIGABRT"),
        (RaisingRunner(), "RuntimeError: device is on fire"),
    ],
)
def test_a_failing_kernel_is_recorded_as_inf_with_its_reason(runner, reason, tmp_path):
    path = tmp_path / "c.jsonl"
    tasks = transforms(2)
    with Measurer(cache=path, runner=runner, progress=False) as m:
        results = m.measure(tasks)
    assert all(r.cost == math.inf and not r.ok and reason in r.error for r in results)
    assert m.stats.failed == 2
    stored = [json.loads(line) for line in path.read_text().splitlines()]
    assert [s["median"] for s in stored] == [None, None] and reason in stored[0]["error"]
    # the failure is remembered; the run goes on with a healthy runner, and retry_failed re-measures
    with Measurer(cache=path, runner=FAST, progress=False) as m:
        assert m.measure(tasks)[0].cost == math.inf
    with Measurer(cache=path, runner=FAST, progress=False, retry_failed=True) as m:
        assert all(r.ok for r in m.measure(tasks))


def test_a_hanging_kernel_times_out_and_the_run_goes_on(tmp_path):
    tasks = transforms(2)
    with Measurer(runner=HangingRunner(), timeout=1.0, progress=False) as m:
        started = time.monotonic()
        results = m.measure(tasks[:1])
        assert time.monotonic() - started < 30
        assert results[0].cost == math.inf and "timed out" in results[0].error
        m.runner, m.timeout = FAST, 120.0  # a healthy kernel may take seconds to build on a busy machine
        assert m.measure(tasks[1:])[0].ok and m.worker_starts == 2  # restarted after the kill


RESUME_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from layoutopt.tvm.measure.measure import Measurer
    from layoutopt.tvm.measure.runner import LocalRunner
    tasks = json.loads(sys.argv[2])
    runner = LocalRunner(repeat=2, min_repeat_ms=20, cold=False)  # slow enough to be killed midway
    with Measurer(cache=sys.argv[1], runner=runner, progress=False) as m:
        m.measure(tasks)
    """
)


def test_a_run_killed_with_sigkill_resumes_where_it_stopped(tmp_path):
    path = tmp_path / "c.jsonl"
    tasks = transforms(12)
    run = subprocess.Popen(
        [sys.executable, "-c", RESUME_SCRIPT, str(path), json.dumps(tasks)],
        start_new_session=True,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while not (path.exists() and len(path.read_bytes().splitlines()) >= 3):
        assert run.poll() is None, "the measuring run ended before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.02)
    os.killpg(run.pid, signal.SIGKILL)  # the run and its worker, mid-measurement
    run.wait()
    done_before = len([line for line in path.read_bytes().splitlines() if line.endswith(b"}")])
    assert 3 <= done_before < len(tasks)
    with Measurer(cache=path, runner=LocalRunner(repeat=2, min_repeat_ms=1, cold=False), progress=False) as m:
        results = m.measure(tasks)
    assert all(r.ok for r in results)
    assert m.stats.measured == len(tasks) - done_before
    # killed in the first pass: the kernels timed before the kill get their second pass now
    assert m.stats.retimed == done_before and m.stats.cached == 0
    assert all(len(r.record["pass_medians"]) == 2 for r in results)


def test_a_kernel_cached_with_fewer_passes_is_timed_again_for_the_passes_it_lacks(tiny_conv, tmp_path):
    path = tmp_path / "c.jsonl"
    tasks = [(tiny_conv, {"in": "NCHW8c", "out": "NCHW8c"}), *transforms(2)]
    # timed once, as by a run killed between its passes
    with Measurer(cache=path, runner=FAST, progress=False, passes=1) as once:
        first = once.measure(tasks[:2])
    with Measurer(cache=path, runner=FAST, progress=False, passes=2) as full:
        full.measure(tasks[2:])  # a kernel with both passes already
    lines = path.read_bytes().splitlines()
    with Measurer(cache=path, runner=FAST, progress=False, passes=2) as resumed:
        results = resumed.measure(tasks)
        stats = resumed.stats
        assert (stats.retimed, stats.cached, stats.measured, stats.failed) == (2, 1, 0, 0)
    for before, after in zip(first, results[:2], strict=True):
        passes = after.record["pass_medians"]
        assert len(passes) == 2 and passes[0] == before.cost and after.cost == min(passes)
        assert len(after.results) == 2 * FAST.repeat and not after.cached and after.ok
        assert after.record["check_error"] == before.record["check_error"]  # checked once, not again
    assert results[2].cached and len(results[2].record["pass_medians"]) == 2
    # appended, never rewritten: the one-pass records are still there, before their two-pass ones
    grown = path.read_bytes().splitlines()
    assert grown[: len(lines)] == lines and len(grown) == len(lines) + 2
    with Measurer(cache=path, runner=FAST, progress=False, passes=2) as again:
        assert [r.cost for r in again.measure(tasks)] == [r.cost for r in results]
        assert again.stats.cached == 3 and again.stats.retimed == 0 and again.worker_starts == 0
    # fewer passes asked than cached: nothing to add
    with Measurer(cache=path, runner=FAST, progress=False, passes=1) as fewer:
        fewer.measure(tasks)
        assert fewer.stats.cached == 3 and fewer.worker_starts == 0


class _Timings:
    def __init__(self, results):
        self.results = results


class RecordingModule:
    """Stands for a loaded kernel library: records how it is asked to be timed."""

    def __init__(self):
        self.asked = []

    def time_evaluator(self, name, device, **settings):
        self.asked.append(settings)
        return lambda *args: _Timings([float(i) for i in range(1, settings["repeat"] + 1)])


def test_cold_timing_flushes_all_but_the_input_before_each_single_run():
    module = RecordingModule()
    assert LocalRunner(repeat=2, cold_runs=3).time(module, None, "k", []) == [2.0, 5.0]  # medians of 3
    assert module.asked[-1] == {"number": 1, "repeat": 6, "f_preproc": "cache_flush_cpu_non_first_arg"}
    warm = LocalRunner(repeat=2, min_repeat_ms=5, cold=False)
    assert warm.time(module, None, "k", []) == [1.0, 2.0] and "f_preproc" not in module.asked[-1]
    assert warm.timing == "warm" and LocalRunner().timing == "cold"
    # the flush runs where the kernel runs: TVM's runtime (local, or behind an RPC server) has it
    import tvm

    assert tvm.get_global_func("cache_flush_cpu_non_first_arg", allow_missing=True) is not None


def test_handoff_timing_writes_the_input_afresh_before_each_run():
    import numpy as np
    import tvm
    from tvm.script import tirx as T

    # a kernel that adds 1 to its only argument, the input: timed cold, every run (TVM's untimed first
    # run included) adds 1 to what the last run left; handed over, every run starts from the input given
    @T.prim_func
    def bump(a: T.handle):
        T.func_attr({"global_symbol": "bump"})
        data = T.match_buffer(a, (4099,), "float32")  # no multiple of the copy's chunks
        for i in range(4099):
            data[i] = data[i] + T.float32(1)

    module = tvm.compile(tvm.IRModule({"bump": bump}), target="llvm").mod
    start = np.random.default_rng(0).standard_normal(4099).astype("float32")
    for runner, runs in ((LocalRunner(repeat=2, cold_runs=3), 1 + 2 * 3),
                         (LocalRunner(repeat=2, cold_runs=3, handoff=True), 1)):
        tensor = tvm.runtime.tensor(start, tvm.cpu())
        assert len(runner.time(module, tvm.cpu(), "bump", [tensor])) == 2
        np.testing.assert_allclose(tensor.numpy(), start + runs, rtol=1e-6)
    assert LocalRunner(handoff=True).timing == "handoff"


def test_cold_warm_and_handoff_costs_are_cached_apart(tiny_conv, tmp_path):
    path, task = tmp_path / "c.jsonl", [(tiny_conv, {"in": "NCHW8c", "out": "NCHW8c"})]
    with Measurer(cache=path, runner=LocalRunner(repeat=2, cold_runs=3), progress=False, passes=1) as m:
        (cold,) = m.measure(task)
    with Measurer(cache=path, runner=LocalRunner(repeat=2, min_repeat_ms=1, cold=False),
                  progress=False, passes=1) as m:
        (warm,) = m.measure(task)
        (again,) = m.measure(task)
    with Measurer(cache=path, runner=LocalRunner(repeat=2, cold_runs=3, handoff=True), progress=False,
                  passes=1) as m:
        (handoff,) = m.measure(task)
    assert cold.ok and warm.ok and not cold.cached and not warm.cached and again.cached
    assert handoff.ok and not handoff.cached and handoff.record["tvm"].endswith("+handoff")
    assert cold.record["tvm"].endswith("+cold") and not warm.record["tvm"].endswith("+cold")
    assert len(cold.results) == 2 and again.cost == warm.cost


def test_bad_settings_and_tasks_are_clear_errors_before_anything_runs(tiny_conv):
    with pytest.raises(ProblemError, match="kind 'llvm'"):
        Measurer(target="cuda")
    with pytest.raises(ProblemError, match="repeat >= 1"):
        LocalRunner(repeat=0)
    with pytest.raises(ProblemError, match="cold_runs >= 1"):
        LocalRunner(cold_runs=0)
    with pytest.raises(ProblemError, match="cold must be True or False"):
        LocalRunner(cold="no")
    with pytest.raises(ProblemError, match=r"handoff timing .* needs cold=True"):
        LocalRunner(cold=False, handoff=True)
    with pytest.raises(ProblemError, match="unknown timing 'tepid'; known: cold, handoff, warm"):
        LocalRunner.timing_settings("tepid")
    with pytest.raises(ProblemError, match="times kernels on this machine only"):
        RPCRunner("127.0.0.1:1", "board", handoff=True)  # said before the tracker is asked
    with pytest.raises(ProblemError, match="timeout"):
        Measurer(timeout=0)
    with pytest.raises(ProblemError, match="passes must be a positive integer"):
        Measurer(passes=0)
    with pytest.raises(ProblemError, match="runner must be"):
        Measurer(runner="local")
    with Measurer(progress=False) as m:
        with pytest.raises(ProblemError, match="does not divide"):
            m.measure([(tiny_conv, {"in": "NCHW32c", "out": "NCHW8c"})])
        with pytest.raises(ProblemError, match="expects 8 input channels"):
            m.measure([({**tiny_conv, "kernel": [16, 8, 3, 3]}, {"in": "NCHW", "out": "NCHW"})])
        assert m.worker_starts == 0


@pytest.mark.parametrize("address", ["localhost", "host:", ":9190", "host:99999", "host:port"])
def test_bad_rpc_addresses_are_clear_errors(address):
    with pytest.raises(ProblemError, match="HOST:PORT"):
        parse_rpc_address(address)
    with pytest.raises(ProblemError, match="HOST:PORT"):
        RPCRunner(address, key="dev")
    with pytest.raises(ProblemError, match="key"):
        RPCRunner("127.0.0.1:9190")


def test_a_worker_that_cannot_start_fails_the_run_instead_of_caching_failures(tmp_path, monkeypatch):
    broken = tmp_path / "broken" / "tvm"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise ImportError('this TVM is broken')\n")
    monkeypatch.syspath_prepend(str(broken.parent))  # the workers get this sys.path; this process has TVM
    path = tmp_path / "c.jsonl"
    with (
        Measurer(cache=path, runner=FAST, progress=False) as m,
        pytest.raises(WorkerStartError, match=r"initializer failed: .*apache-tvm"),
    ):
        m.measure(transforms(1))
    assert not path.exists()


ORPHAN_SCRIPT = textwrap.dedent(
    """
    import sys, time
    from layoutopt.tvm.measure.measure import Measurer
    sys.path.insert(0, sys.argv[1])
    from test_measure import HangingRunner, transforms
    m = Measurer(runner=HangingRunner(), timeout=600, progress=False)
    lane = m._lane(0)
    lane.start()  # in the lane's own thread, as every call
    print(lane.worker.pid, flush=True)
    m.measure(transforms(1))
    """
)


def _alive(pid):
    try:
        with open(f"/proc/{pid}/status") as status:
            return "zombie" not in status.read()
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signal is Linux-only")
def test_the_worker_dies_with_a_killed_parent_even_inside_a_hanging_kernel():
    run = subprocess.Popen(
        [sys.executable, "-c", ORPHAN_SCRIPT, os.path.dirname(__file__)], stdout=subprocess.PIPE, text=True
    )
    worker = int(run.stdout.readline())
    time.sleep(0.5)  # the worker is now inside the hanging runner
    assert _alive(worker)
    run.kill()
    run.wait()
    deadline = time.monotonic() + 20
    try:
        while _alive(worker):
            assert time.monotonic() < deadline, "the worker outlived its killed parent"
            time.sleep(0.1)
    finally:
        if _alive(worker):  # do not leave a sleeping orphan behind when the test fails
            os.kill(worker, signal.SIGKILL)

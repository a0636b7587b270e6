"""The measuring worker: requests and answers as records, one lane per worker, errors as one line."""

from __future__ import annotations

import json
import pickle

import pytest

pytest.importorskip("tvm")

from layoutopt.tvm.kernels import layout_transform_workload
from layoutopt.tvm.measure import measure
from layoutopt.tvm.measure.cache import task_key
from layoutopt.tvm.measure.runner import LocalRunner
from layoutopt.tvm.measure.worker import (
    BuildResult,
    CompileRequest,
    KernelTask,
    Lane,
    MeasureRequest,
    Reply,
    RetimeRequest,
    RunResult,
    Timing,
)

pytestmark = pytest.mark.tvm

FAST = LocalRunner(repeat=2, min_repeat_ms=1, cold_runs=2)


def test_a_lane_compiles_checks_times_and_retimes_a_kernel_through_records(tmp_path):
    from layoutopt.tvm._tvm import resolve_target, target_key

    workload = layout_transform_workload([1, 16, 4, 4], "NCHW", "NCHW8c")
    task = KernelTask(task_key(workload, {}), workload, {})
    target = json.loads(target_key(resolve_target(None)))
    lane = Lane(0)
    try:
        built = lane.submit(CompileRequest(FAST, target, (task,), str(tmp_path)), 120, "compiling").result()
        assert isinstance(built, Reply) and built.ok, built.error
        build = built.value[task.key]
        assert isinstance(build, BuildResult) and build.ok and build.function == "kernel_0"
        assert build.library.startswith(str(tmp_path)) and build.build_seconds > 0
        assert build.arg_shapes == ((1, 16, 4, 4), (1, 2, 4, 4, 8)) and build.dtype == "float32"

        ran = lane.submit(MeasureRequest(FAST, task, build, check=True, keep=True), 120, "timing").result()
        assert ran.ok and isinstance(ran.value, RunResult), ran.error
        assert ran.value.check_error == 0.0 and len(ran.value.timing.results) == FAST.repeat
        fields = ran.value.record_fields(build)
        assert fields["median"] == ran.value.timing.median > 0
        assert fields["build_seconds"] == build.build_seconds

        again = lane.submit(RetimeRequest(task.key), 120, "timing again").result()
        assert again.ok and isinstance(again.value, Timing) and len(again.value.results) == FAST.repeat

        # a kernel the worker does not hold: the worker's error comes back as one line, the worker lives
        missing = lane.submit(RetimeRequest("no such kernel"), 120, "timing again").result()
        assert not missing.ok and missing.error.startswith("KeyError") and "\n" not in missing.error
        assert lane.worker.starts == 1
    finally:
        lane.close()


def test_a_request_that_outlives_its_timeout_is_an_error_reply_naming_what_it_did(tmp_path):
    from test_measure import HangingRunner  # tests/tvm is on sys.path

    workload = layout_transform_workload([1, 8, 2, 2], "NCHW", "NCHW8c")
    task = KernelTask(task_key(workload, {}), workload, {})
    build = BuildResult(str(tmp_path / "k.so"), "kernel_0", ((1, 8, 2, 2), (1, 1, 2, 2, 8)), "float32")
    lane = Lane(0)
    try:
        reply = lane.submit(MeasureRequest(HangingRunner(), task, build, check=False, keep=False), 1.0,
                            "checking and timing the kernel").result()
    finally:
        lane.close()
    assert reply == Reply(error="timed out: checking and timing the kernel took longer than 1 s; "
                                "worker killed")


def test_requests_and_answers_cross_processes_pickled():
    workload = layout_transform_workload([1, 8, 2, 2], "NCHW", "NCHW8c")
    task = KernelTask("key", workload, {})
    build = BuildResult("k.so", "kernel_0", ((1, 8, 2, 2),), "float32", build_seconds=0.1,
                        build_cpu_seconds=0.2)
    for record in (CompileRequest(FAST, {"kind": "llvm"}, (task,), "/tmp"),
                   MeasureRequest(FAST, task, build, check=True, keep=False), RetimeRequest("key"),
                   Reply(RunResult(Timing(1e-3, (1e-3, 2e-3), 0.5), None, 0.1, 0.2))):
        assert pickle.loads(pickle.dumps(record)) == record
    # a failed kernel's record fields are those the cache always had
    assert RunResult.failure_fields("boom", BuildResult(error="boom")) == {
        "median": None, "results": [], "error": "boom", "build_seconds": None}


def test_the_measure_module_keeps_the_orchestration_and_exports_no_runner_class():
    assert set(measure.__all__) == {"MeasureResult", "MeasureStats", "Measurer"}
    for name in ("RPCRunner", "parse_rpc_address", "_WorkerState", "_serve", "_Lane"):
        assert not hasattr(measure, name), name
    stats = measure.MeasureStats()
    assert set(stats.to_json()) == {"requested", "cached", "retimed", "measured", "failed", "seconds",
                                    "compile_seconds", "time_seconds", "workers", "devices", "other_cpu"}

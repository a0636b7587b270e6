"""Measuring, checking and timing through TVM's RPC tracker, on loopback: a tracker and a farm of two
servers started by the tests (conftest.py)."""

from __future__ import annotations

import gc
import json
import math
import socket
import threading
import time

import pytest

pytest.importorskip("tvm")

from onnx_models import tiny_conv_onnx

from conftest import RPC_DEVICES, _free_port
from layoutopt import ProblemError
from layoutopt.cli import main
from layoutopt.tvm import build, models, tune_and_build
from layoutopt.tvm.evaluate.profile import profile_builds
from layoutopt.tvm.evaluate.timing import random_inputs, run
from layoutopt.tvm.kernels import layout_transform_workload
from layoutopt.tvm.measure import runner
from layoutopt.tvm.measure.measure import Measurer
from layoutopt.tvm.measure.runner import LocalRunner, RPCRunner

pytestmark = pytest.mark.tvm


def test_kernels_are_uploaded_checked_and_timed_on_a_farm_of_rpc_devices_in_parallel(rpc_tracker, tiny_conv,
                                                                                     tmp_path):
    address, key = rpc_tracker
    runner = RPCRunner(address, key, repeat=2, min_repeat_ms=2)
    tasks = [
        (tiny_conv, {"in": "NCHW8c", "out": "NCHW16c"}),
        (tiny_conv, {"in": "NCHW", "out": "NCHW"}),
        (layout_transform_workload([1, 16, 8, 8], "NCHW", "NCHW16c"), {}),
    ]
    with Measurer(cache=tmp_path / "rpc.jsonl", runner=runner, progress=False) as measurer:
        results = measurer.measure(tasks)
    for result in results:
        assert result.ok, result.error
        # two passes, the second timed again on the device holding it, without re-uploading
        assert 0 < result.cost < 0.1 and len(result.results) == 4 and len(result.record["pass_medians"]) == 2
        # the output was read back from the device and compared with numpy
        assert result.record["check_error"] < 1e-5
        assert result.record["runner"] == f"RPC tracker {address} key {key!r}"
    # one worker per device, each holding its session for the whole run (a worker without a device of
    # its own would wait in the tracker's queue until the timeout), one of them also compiling
    assert measurer.stats.devices == RPC_DEVICES and measurer.worker_starts == RPC_DEVICES
    # an explicit (cross) compiler links the library that is uploaded
    linked = RPCRunner(address, key, cc="g++", repeat=1, min_repeat_ms=1)
    with Measurer(runner=linked, progress=False) as measurer:
        assert measurer.measure(tasks[2:])[0].ok


def test_an_unknown_device_key_is_a_recorded_failure_not_a_crash(rpc_tracker, tmp_path):
    address, _ = rpc_tracker
    runner = RPCRunner(address, "no-such-device", session_timeout=1, repeat=1, min_repeat_ms=1)
    with Measurer(runner=runner, timeout=3, progress=False) as measurer:
        result = measurer.measure([(layout_transform_workload([1, 8, 2, 2], "NCHW", "NCHW8c"), {})])[0]
    # the tracker queues the request until such a device registers: the timeout ends the wait
    assert result.cost == math.inf and "timed out" in result.error


def remote_target() -> dict:
    """A target whose flags differ from the host's: an AVX2 CPU, which an AVX2 or AVX-512 host runs."""
    import tvm

    mcpu = "broadwell" if tvm.target.codegen.llvm_get_system_cpu() == "haswell" else "haswell"
    return {"kind": "llvm", "mcpu": mcpu}


def test_closing_the_runner_gives_the_device_back_even_with_the_collector_idle(rpc_tracker):
    # a build run through a VirtualMachine leaves its remote objects in reference cycles; the session
    # (the device) lives until they are freed. With the collector idle (as it may be at any moment of a
    # long process) close() must still give the device back, else a measuring worker waits for it.
    address, key = rpc_tracker
    runner = RPCRunner(address, key, repeat=1, min_repeat_ms=1)
    mod = models.chain()

    def free() -> int:
        return runner.summary()["queue_info"].get(key, {}).get("free", 0)

    gc.collect()
    gc.disable()
    try:
        run(build(mod, target=remote_target()), random_inputs(mod), runner)
        assert free() == RPC_DEVICES - 1  # the device is held while the build is loaded
        runner.close()
        deadline = time.monotonic() + 20  # the server registers with the tracker again when freed
        while free() < RPC_DEVICES and time.monotonic() < deadline:
            time.sleep(0.1)
        assert free() == RPC_DEVICES
    finally:
        gc.enable()


def test_tune_and_build_checks_times_and_hands_back_builds_for_the_device(rpc_tracker, tmp_path, monkeypatch):
    address, key = rpc_tracker
    runner = RPCRunner(address, key, repeat=1, min_repeat_ms=1)
    loaded, exported = [], []
    load_build, export = RPCRunner.load_build, RPCRunner.export

    def spy_load(self, executable):  # every build that runs in this process, and the device it runs on
        module, device = load_build(self, executable)
        loaded.append((executable, repr(device)))
        return module, device

    def spy_export(self, executable, path):  # (kernels are exported in the measuring workers)
        exported.append(executable)
        export(self, executable, path)

    monkeypatch.setattr(RPCRunner, "load_build", spy_load)
    monkeypatch.setattr(RPCRunner, "export", spy_export)
    target = remote_target()
    result = tune_and_build(models.residual(channels=16, size=8), target=target, runner=runner,
                            candidates={"blocks": [8, 16], "algorithms": ["direct"]}, baselines=(), repeat=2,
                            cache=tmp_path / "c.jsonl")
    assert result.ran_on == f"RPC tracker {address} key {key!r}" and target["mcpu"] in result.target
    assert result.meta.stats.devices == RPC_DEVICES and result.meta.context.target["mcpu"] == target["mcpu"]
    # every kernel timed: a session the tune itself held (the reference build) starved no worker
    assert result.meta.stats.failed == 0 and result.meta.stats.measured == result.meta.stats.requested
    # the reference (TVM's default build of the untouched model, and the untouched model in float64: the
    # check's truth), the tuned build and b*'s members were all built for the target, exported, uploaded
    # and run on the device, each uploaded once
    assert len({id(executable) for executable, _ in loaded}) == len(exported) == 5
    assert all("remote" in device for _, device in loaded)
    assert result.tuned.max_relative_error < 1e-4 and result.baselines["nchw16c"].max_relative_error < 1e-4
    assert result.tuned.measured > 0 and result.baselines["best_fixed"].measured > 0
    assert result.chosen in ("layoutopt", "best_fixed")
    # the calls of a build cannot be timed one by one over RPC: no profile, said so, nothing made up
    assert result.tuned.breakdown is None and all(layer.in_network is None for layer in result.layers)
    with pytest.raises(ProblemError, match="cannot be timed one by one on RPC tracker"):
        profile_builds({"tuned": result.executable}, [], runner=runner)
    assert f"checked and timed on RPC tracker {address}" in result.summary()


def test_the_tune_command_with_rpc_measures_checks_and_times_on_the_device(rpc_tracker, tmp_path, capsys):
    address, key = rpc_tracker
    model = tiny_conv_onnx(tmp_path / "tiny.onnx")
    cache = tmp_path / "c.jsonl"
    target = remote_target()
    argv = ["tune", str(model), "--input-shape", "1,4,8,8", "--blocks", "4,8", "--target", json.dumps(target),
            "--rpc", address, "--key", key, "--cache", str(cache), "--baselines", "", "--repeat", "2",
            "--report", ""]
    assert main(argv) == 0
    out = capsys.readouterr().out
    where = f"on RPC tracker {address} key {key!r}"
    assert f"applying the solution, building and checking {where}" in out
    assert f"timing the builds side by side {where}" in out and f"checked and timed {where}" in out
    assert "not calibrated nor profiled" in out and "handed back:" in out
    records = [json.loads(line) for line in cache.read_text().splitlines()]
    assert records and all(r["runner"] == f"RPC tracker {address} key {key!r}" for r in records)
    assert not [r for r in records if r.get("error")]  # no kernel starved of a device
    assert all(json.loads(r["target"])["mcpu"] == target["mcpu"] for r in records)


def test_costs_measured_here_are_never_reused_for_a_device_nor_the_other_way(rpc_tracker, tmp_path):
    address, key = rpc_tracker
    path, tasks = tmp_path / "c.jsonl", [(layout_transform_workload([1, 16, 4, 4], "NCHW", "NCHW8c"), {})]
    here, device = LocalRunner(repeat=1, min_repeat_ms=1), RPCRunner(address, key, repeat=1, min_repeat_ms=1)
    with Measurer(cache=path, runner=here, progress=False, passes=1) as measurer:
        (local,) = measurer.measure(tasks)
        assert measurer.stats.measured == 1 and "device" not in local.record
    with Measurer(cache=path, runner=device, progress=False, passes=1) as measurer:  # same target, same task
        (remote,) = measurer.measure(tasks)
        assert measurer.stats.measured == 1 and measurer.stats.cached == 0
    assert remote.record["device"] == f"rpc:{key}" and remote.record["target"] == local.record["target"]
    for place, record in ((here, local.record), (device, remote.record)):  # each finds its own again
        with Measurer(cache=path, runner=place, progress=False, passes=1) as measurer:
            (again,) = measurer.measure(tasks)
            assert again.cached and again.record == record and measurer.worker_starts == 0
    other_board = RPCRunner(address, "another-board", repeat=1, min_repeat_ms=1)
    assert Measurer(cache=path, runner=other_board, progress=False).lookup(*tasks[0]) is None


def _serve_once(listener: socket.socket, answer: bytes) -> None:
    connection, _ = listener.accept()
    with connection:
        connection.recv(4)
        connection.sendall(answer)


@pytest.mark.parametrize("answer", [None, b"HTTP", b""], ids=["nothing", "not-a-tracker", "hang-up"])
def test_a_tracker_that_cannot_be_reached_is_refused_when_the_runner_is_made(answer, monkeypatch):
    with pytest.raises(ProblemError, match=r"RPC tracker 127\.0\.0\.1:\d+: cannot reach it \(.*refused"):
        RPCRunner(f"127.0.0.1:{_free_port()}", "board")  # nothing listens there
    monkeypatch.setattr(runner, "TRACKER_TIMEOUT", 0.5)
    with socket.create_server(("127.0.0.1", 0)) as listener:
        address = f"127.0.0.1:{listener.getsockname()[1]}"
        if answer is not None:  # else it accepts the connection and never answers
            threading.Thread(target=_serve_once, args=(listener, answer), daemon=True).start()
        reason = {None: "timed out", b"HTTP": "not a TVM RPC tracker", b"": "connection reset"}[answer]
        expected = f"RPC tracker {address}: cannot reach it \\(.*{reason}"
        with pytest.raises(ProblemError, match=expected) as refused:
            RPCRunner(address, "board")
    assert "\n" not in str(refused.value)


def test_the_tune_command_refuses_an_unreachable_tracker_before_loading_the_model(tmp_path, capsys):
    model = tiny_conv_onnx(tmp_path / "tiny.onnx")
    argv = ["tune", str(model), "--input-shape", "1,4,8,8", "--rpc", f"127.0.0.1:{_free_port()}",
            "--key", "board", "--cache", "none", "--report", ""]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("layoutopt tune: error: RPC tracker 127.0.0.1:")
    assert "cannot reach it" in captured.err
    assert len(captured.err.strip().splitlines()) == 1 and "Traceback" not in captured.err
    assert "cost cache" not in captured.out  # refused before the model was loaded


def test_the_schedule_search_measures_on_the_rpc_devices_under_their_key(rpc_tracker, tiny_conv, tmp_path):
    """The search goes through the measurer and its runner: on the farm, its records keyed by the device."""
    from layoutopt.tvm.measure.cache import CostCache
    from layoutopt.tvm.measure.search import search_schedules

    address, key = rpc_tracker
    runner = RPCRunner(address, key, repeat=2, min_repeat_ms=2)
    tasks = [(tiny_conv, {"in": "NCHW8c", "out": "NCHW8c"})]
    result = search_schedules(tasks, cache=tmp_path / "rpc.jsonl", runner=runner, trials=2, progress=False)
    (measured,) = result.measured.values()
    assert len(measured) == 3 and all(math.isfinite(cost) for _, cost in measured)
    records = list(CostCache(tmp_path / "rpc.jsonl"))
    assert all(r["device"] == f"rpc:{key}" and "cpu" not in r for r in records)
    kernels = [r for r in records if r["workload"]["op"] != "paired_rounds"]
    paired = [r for r in records if r["workload"]["op"] == "paired_rounds"]  # finalists re-timed on the farm
    assert len(kernels) == 3 and len(paired) == (result.stats.retimed > 0)
    assert all(math.isfinite(t) for r in paired for row in r["round_times"] for t in row)
    again = search_schedules(tasks, cache=tmp_path / "rpc.jsonl", runner=runner, trials=2, progress=False)
    assert again.stats.searched == 0 and again.stats.retimed == 0

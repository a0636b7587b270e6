"""Measuring through TVM's RPC tracker, on loopback: a tracker and a server started by the test."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("tvm")

from conftest import RPC_DEVICES

from layoutopt.tvm.kernels import layout_transform_workload
from layoutopt.tvm.measure import Measurer, RPCRunner

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
    assert measurer.stats["devices"] == RPC_DEVICES and measurer.worker_starts == RPC_DEVICES
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

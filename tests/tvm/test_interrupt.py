"""Ctrl-C during ``layoutopt tune``: one line saying how to resume, exit code 130, the cost cache whole,
the measuring workers gone."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("tvm")

from onnx_models import tiny_conv_onnx  # tests/tvm is on sys.path

import layoutopt
from layoutopt.tvm.measure.cache import CostCache

pytestmark = pytest.mark.tvm

ROOT = Path(layoutopt.__file__).resolve().parent.parent


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process groups and SIGINT as on Linux")
def test_ctrl_c_while_measuring_prints_one_line_keeps_the_cache_and_stops_the_workers(tmp_path):
    model, cache = tiny_conv_onnx(tmp_path / "tiny.onnx"), tmp_path / "costs.jsonl"
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path}
    run = subprocess.Popen(
        [sys.executable, "-m", "layoutopt.cli", "tune", str(model), "--input-shape", "1,4,8,8",
         "--cache", str(cache), "--report", "", "--baselines", "", "--repeat", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path,
        start_new_session=True,  # its own process group, as a terminal's foreground job
    )
    try:
        deadline = time.monotonic() + 600
        while not (cache.exists() and len(cache.read_bytes().splitlines()) >= 2):
            assert run.poll() is None, f"the run ended before it could be interrupted: {run.communicate()}"
            assert time.monotonic() < deadline, "nothing was measured in 10 minutes"
            time.sleep(0.02)
        os.killpg(run.pid, signal.SIGINT)  # a terminal's Ctrl-C reaches the run and its workers
        out, err = run.communicate(timeout=300)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
    assert run.returncode == 130, err
    assert "kernels and transforms:" not in out  # interrupted while measuring
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    last = err.rstrip("\n").splitlines()[-1].split("\r")[-1]  # after the progress bar's last redraw
    assert last == ("layoutopt tune: interrupted; every kernel measured so far is in the cost cache "
                    f"{cache}: rerun the same command to resume")
    # every line of the cache parses: no torn record
    data = cache.read_bytes()
    assert data.endswith(b"\n") and all(json.loads(line)["target"] for line in data.splitlines())
    assert CostCache(cache).skipped_lines == 0 and len(CostCache(cache)) >= 2
    # the measuring workers stopped with the run: nothing is left of its process group
    deadline = time.monotonic() + 30
    while _group_alive(run.pid):
        assert time.monotonic() < deadline, "a worker outlived the interrupted run"
        time.sleep(0.1)

"""Shared fixtures of the TVM tests: tiny workloads and a loopback RPC tracker + server."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pytest

#: a conv small enough to build and time in a fraction of a second
TINY_CONV = {
    "op": "conv2d",
    "data": [1, 16, 8, 8],
    "kernel": [16, 16, 3, 3],
    "strides": [1, 1],
    "padding": [1, 1, 1, 1],
    "dilation": [1, 1],
    "groups": 1,
    "dtype": "float32",
}


@pytest.fixture
def tiny_conv() -> dict:
    return {key: list(value) if isinstance(value, list) else value for key, value in TINY_CONV.items()}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _stop(process: subprocess.Popen) -> None:
    # each helper runs in its own session: end its whole group (the RPC server forks a child)
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


#: RPC servers the loopback tracker has under its key: a farm of two "devices" (this CPU)
RPC_DEVICES = 2


@pytest.fixture(scope="session")
def rpc_tracker():
    """``(address, key)`` of a TVM RPC tracker on loopback with :data:`RPC_DEVICES` CPU servers
    registered under ``key``."""
    pytest.importorskip("tornado", reason="TVM's RPC tracker needs tornado (in the tvm extra)")
    pytest.importorskip("cloudpickle", reason="TVM's RPC tracker needs cloudpickle (in the tvm extra)")
    import tvm.rpc

    port, key = _free_port(), "layoutopt-test"
    common = {"start_new_session": True, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    tracker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tvm.exec.rpc_tracker",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--port-end",
            str(port + 1),
        ],
        **common,
    )
    servers = []
    try:
        deadline = time.monotonic() + 60
        while True:  # wait for the port first: connect_tracker itself retries only every 5 s
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or tracker.poll() is not None:
                    raise
                time.sleep(0.1)
        session = tvm.rpc.connect_tracker("127.0.0.1", port)
        for _ in range(RPC_DEVICES):
            server_port = _free_port()
            servers.append(subprocess.Popen(
                [sys.executable, "-m", "tvm.exec.rpc_server", "--tracker", f"127.0.0.1:{port}", "--key", key,
                 "--host", "127.0.0.1", "--port", str(server_port), "--port-end", str(server_port + 1)],
                **common,
            ))
        while session.summary()["queue_info"].get(key, {}).get("free", 0) < RPC_DEVICES:
            if time.monotonic() > deadline or any(server.poll() is not None for server in servers):
                raise RuntimeError("the RPC servers did not register with the tracker")
            time.sleep(0.2)
        yield f"127.0.0.1:{port}", key
    finally:
        for server in servers:
            _stop(server)
        _stop(tracker)

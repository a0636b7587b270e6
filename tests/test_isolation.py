"""The crash-tolerant worker process: answers, exceptions, crashes, overruns, start-up failures."""

import os
import signal
import sys
import time

import pytest

from layoutopt.isolation import IsolatedWorker, WorkerDied, WorkerStartError

# --- functions run in the worker (imported there by name) ------------------------------------------


def pid() -> int:
    return os.getpid()


def fails(message: str):
    raise KeyError(message)


def exits(code: int):
    print("about to exit", file=sys.stderr, flush=True)
    os._exit(code)


def segfaults():
    os.kill(os.getpid(), signal.SIGSEGV)


def sleeps(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def unpicklable():
    return lambda: None


def broken_initializer():
    raise RuntimeError("cannot set up")


# --------------------------------------------------------------------------------------------------


def test_a_worker_answers_keeps_its_process_and_reraises_exceptions_with_their_traceback():
    with IsolatedWorker() as worker:
        first = worker.call(pid, timeout=60)
        assert first != os.getpid() and worker.call(pid, timeout=60) == first  # one persistent process
        with pytest.raises(KeyError, match="no such layout") as info:
            worker.call(fails, "no such layout")
        assert "in fails" in str(info.value.__cause__)  # the worker-side traceback
        with pytest.raises(RuntimeError, match="cannot be sent back"):
            worker.call(unpicklable)
        assert worker.call(pid) == first == worker.pid and worker.starts == 1  # exceptions cost no process


def test_crashes_and_overruns_cost_one_call_and_the_next_call_gets_a_new_worker():
    with IsolatedWorker(capture_stderr=True) as worker:
        first = worker.call(pid, timeout=60)
        with pytest.raises(WorkerDied, match=r"exit code 3: about to exit") as info:
            worker.call(exits, 3, timeout=60)
        assert info.value.exitcode == 3 and not info.value.timed_out
        with pytest.raises(WorkerDied, match="killed by SIGSEGV") as info:
            worker.call(segfaults, timeout=60)
        assert info.value.exitcode == -signal.SIGSEGV
        started = time.monotonic()
        with pytest.raises(WorkerDied, match=r"no answer within 0.5 s; worker killed") as info:
            worker.call(sleeps, 60, timeout=0.5)
        assert info.value.timed_out and time.monotonic() - started < 30
        assert worker.call(sleeps, 0.01, timeout=60) == 0.01
        assert worker.call(pid) != first and worker.starts == 4
        os.kill(worker.pid, signal.SIGKILL)  # dead between two calls: the next call starts a new one
        time.sleep(0.2)
        assert worker.call(pid, timeout=60) == worker.pid and worker.starts == 5


def test_a_worker_that_cannot_start_says_why():
    worker = IsolatedWorker(broken_initializer)
    with pytest.raises(WorkerStartError, match="initializer failed: RuntimeError: cannot set up"):
        worker.call(pid)
    assert not worker.alive
    worker.close()


def solve_with_limit(method: str) -> str:
    import layoutopt
    from layoutopt.generators import generate

    return layoutopt.solve(*generate("resnet", nodes=20, max_choices=3), method=method, time_limit=20).status


def test_time_limited_cpsat_and_mip_run_in_a_worker():
    """run_until forks a child; a worker is daemonic, and multiprocessing refused it children (the bench
    recorded every time-limited cpsat and mip solve as an error)."""
    worker = IsolatedWorker()
    try:
        for method in ("cpsat", "mip"):
            assert worker.call(solve_with_limit, method, timeout=120) == "optimal"
    finally:
        worker.close()

"""Run calls in a worker process of their own, so that a crash or a hang costs one call, not the run.

Native code (OR-Tools, toulbar2, TVM's compiled kernels) can kill the interpreter or hang where
Python cannot interrupt it. :class:`IsolatedWorker` runs each call in a persistent worker
process, waits at most ``timeout`` seconds for its answer, and when the worker dies or overruns,
kills it and raises :class:`WorkerDied`; the next call starts a fresh worker. What a worker
keeps between calls (imports, warm caches, loaded kernels) lives in its module globals, or in
what its ``initializer`` sets up.

The worker is a ``multiprocessing`` process started with ``spawn``: a fresh interpreter, which
inherits no threads or locks from the caller (OR-Tools, TVM and BLAS start threads), and gets
the caller's ``sys.path``, so a function defined in a script or a test module can be sent.
Spawning imports the caller's main module in the worker: a script that starts workers keeps its
work under ``if __name__ == "__main__":``.
``concurrent.futures.ProcessPoolExecutor`` does not do here: before Python 3.14 it cannot kill
the worker of one overrunning call, and a crash breaks its pool without the exit code.

Example:
    >>> import math
    >>> with IsolatedWorker() as worker:
    ...     worker.call(math.sqrt, 16.0, timeout=60)
    4.0
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sys
import tempfile
import traceback
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

__all__ = ["IsolatedWorker", "WorkerDied", "WorkerStartError"]

T = TypeVar("T")


class WorkerDied(RuntimeError):
    """The worker process ended before answering a call: it crashed, or overran its timeout and was killed.

    Attributes:
        exitcode: the process's exit code (negative: the signal that ended it), None if unknown.
        timed_out: True when the worker was killed for overrunning the call's timeout.
    """

    def __init__(self, message: str, exitcode: int | None = None, timed_out: bool = False) -> None:
        super().__init__(message)
        self.exitcode = exitcode
        self.timed_out = timed_out


class WorkerStartError(RuntimeError):
    """The worker process could not start: its initializer raised, or it died or hung on the way up."""


class RemoteTraceback(Exception):
    """The worker-side traceback of an exception a call raised (set as that exception's ``__cause__``)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def _die_with_parent(parent: int) -> None:
    """Have Linux kill this worker when its parent dies, even if a call hangs holding the GIL.

    (Linux sends the signal when the parent *thread* that started the worker exits: an
    IsolatedWorker must not outlive the thread that made its first call.)
    """
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    if os.getppid() != parent:  # the parent died before the signal was armed
        os._exit(1)


def _serve(connection, initializer, initargs, stderr_path: str | None, parent: int | None) -> None:
    """The worker process: set up, then answer ``(function, args, kwargs)`` requests until told to stop."""
    if parent is not None:
        _die_with_parent(parent)
    if stderr_path is not None:  # file descriptor 2 itself, so native code's messages land there too
        fd = os.open(stderr_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.dup2(fd, 2)
        os.close(fd)
    try:
        if initializer is not None:
            initializer(*initargs)
    except Exception:
        connection.send(("failed", traceback.format_exc()))
        return
    connection.send(("ready", os.getpid()))
    while True:
        try:
            request = connection.recv()
        except EOFError:  # the caller is gone
            return
        if request is None:
            return
        function, args, kwargs = request
        try:
            reply = ("ok", function(*args, **kwargs))
        except Exception as exc:  # SystemExit and KeyboardInterrupt end the worker: a death, not an answer
            reply = ("raised", exc, traceback.format_exc())
        try:
            connection.send(reply)
        except Exception as exc:  # the answer does not pickle: say so instead of dying
            connection.send(("raised", RuntimeError(f"the call's answer cannot be sent back from the worker: "
                                                    f"{type(exc).__name__}: {exc}"), traceback.format_exc()))


def _main_hint() -> str:
    """Why a worker may die at start when a script started it: spawn imports the script first."""
    if getattr(sys.modules.get("__main__"), "__file__", None) is None:
        return ""
    return ("; if a script started it, its work must be under `if __name__ == \"__main__\":` "
            "(a spawned worker imports the script first)")


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "exit code unknown"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


class IsolatedWorker:
    """A persistent worker process that runs calls for the caller; replaced after a crash or an overrun.

    Args:
        initializer: called once in each new worker process, with ``initargs``, before its first
            call (imports and set-up whose time no call's timeout should pay).
        initargs: arguments of ``initializer``.
        startup_timeout: seconds a new worker may take to start and run ``initializer``.
        capture_stderr: send the worker's standard error (file descriptor 2, so native code's too)
            to a file, and end a :class:`WorkerDied` message with its last lines: why it died.
        die_with_parent: on Linux, the worker is killed when the caller's process dies, even
            while a call hangs.

    The worker is a daemonic process: it may start subprocesses but no ``multiprocessing`` children.
    Functions, arguments and answers travel pickled: functions must be importable by name.

    Example:
        >>> worker = IsolatedWorker()
        >>> worker.call(divmod, 7, 2, timeout=60), worker.starts, worker.pid is not None
        ((3, 1), 1, True)
        >>> worker.close()
        >>> worker.pid is None
        True
    """

    def __init__(
        self,
        initializer: Callable[..., Any] | None = None,
        initargs: Iterable[Any] = (),
        startup_timeout: float = 300.0,
        capture_stderr: bool = False,
        die_with_parent: bool = True,
    ) -> None:
        self.initializer = initializer
        self.initargs = tuple(initargs)
        self.startup_timeout = float(startup_timeout)
        self.die_with_parent = bool(die_with_parent)
        #: how many worker processes were started (a crash or an overrun costs one more)
        self.starts = 0
        self._context = multiprocessing.get_context("spawn")
        self._process: Any = None
        self._connection: Any = None
        self._stderr_path: str | None = None
        if capture_stderr:
            handle, self._stderr_path = tempfile.mkstemp(prefix="layoutopt-worker-", suffix=".stderr")
            os.close(handle)

    def __enter__(self) -> IsolatedWorker:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    @property
    def alive(self) -> bool:
        """Whether a worker process is running (one starts on the next call otherwise)."""
        return self._process is not None and self._process.is_alive()

    @property
    def pid(self) -> int | None:
        """The worker process's id, None when none is running."""
        return self._process.pid if self.alive else None

    def start(self) -> None:
        """Start the worker process now unless one is running (calls start one when needed).

        Raises:
            WorkerStartError: it could not start.
        """
        if self._process is not None and not self._process.is_alive():
            self._reap()  # died between calls (e.g. killed from outside): start afresh
        if self._process is None:
            self._start()

    def _start(self) -> None:
        if self._stderr_path is not None:
            open(self._stderr_path, "wb").close()  # this process's lines only
        parent_end, child_end = self._context.Pipe()
        parent = os.getpid() if self.die_with_parent else None
        process = self._context.Process(
            target=_serve,
            args=(child_end, self.initializer, self.initargs, self._stderr_path, parent),
            name="layoutopt-isolated-worker",
            daemon=True,  # ended with the caller at exit, not waited for
        )
        process.start()
        child_end.close()  # the worker's death then reads as end-of-file here
        self._process, self._connection = process, parent_end
        self.starts += 1
        try:
            if not parent_end.poll(self.startup_timeout):
                self.kill()
                raise WorkerStartError(f"the worker process did not start within {self.startup_timeout:g} s")
            status, detail = parent_end.recv()
        except (EOFError, OSError):
            reason = f"the worker process died while starting ({self._reap()}){_main_hint()}"
            raise WorkerStartError(reason) from None
        if status != "ready":
            self.kill()
            last = [line for line in str(detail).splitlines() if line.strip()][-1:]
            raise WorkerStartError(f"the worker's initializer failed: {''.join(last).strip()}")

    def call(
        self, function: Callable[..., T], /, *args: Any, timeout: float | None = None, **kwargs: Any
    ) -> T:
        """``function(*args, **kwargs)`` in the worker process, its answer or its exception.

        Args:
            timeout: seconds to wait for the answer (from sending the call; the worker's start-up
                is not counted), None to wait as long as it takes. The worker is killed when
                they run out.

        Raises:
            WorkerDied: the worker crashed, or overran ``timeout`` and was killed (``timed_out``).
            WorkerStartError: a new worker could not start.
            Exception: whatever ``function`` raised, with the worker's traceback as ``__cause__``.
        """
        self.start()
        connection = self._connection
        try:
            connection.send((function, args, kwargs))  # pickling errors reach the caller as they are
            if not connection.poll(timeout):
                self.kill()
                raise WorkerDied(f"no answer within {timeout:g} s; worker killed", timed_out=True)
            reply = connection.recv()
        except (EOFError, OSError):
            process = self._process
            reason = self._reap()
            raise WorkerDied(f"worker process died ({reason})",
                             exitcode=process.exitcode if process is not None else None) from None
        if reply[0] == "ok":
            return reply[1]
        _, error, remote_traceback = reply
        raise error from RemoteTraceback(remote_traceback)

    def _reap(self) -> str:
        """Collect a dead (or dying) worker; return how it ended, with its last stderr lines."""
        process = self._process
        if process is None:
            return "no worker"
        process.join(5)
        if process.is_alive():
            process.kill()
            process.join()
        reason = _describe_exit(process.exitcode)
        self._forget()
        tail = self._stderr_tail()
        return f"{reason}: {tail}" if tail else reason

    def _stderr_tail(self, lines: int = 3) -> str:
        if self._stderr_path is None:
            return ""
        try:
            with open(self._stderr_path, encoding="utf-8", errors="replace") as handle:
                text = handle.read()
        except OSError:
            return ""
        interesting = [line.strip() for line in text.splitlines() if line.strip()]
        return " | ".join(interesting[-lines:])[:500]

    def _forget(self) -> None:
        if self._connection is not None:
            self._connection.close()
        self._process = self._connection = None

    def kill(self) -> None:
        """Kill the worker process now (a new one starts on the next call)."""
        if self._process is not None:
            self._process.kill()
            self._process.join()
            self._forget()

    def interrupt(self) -> None:
        """Kill the worker process from any thread, changing nothing else here: the thread waiting in
        :meth:`call` then gets :class:`WorkerDied` at once, and cleans up as after a crash (for a
        caller interrupted by Ctrl-C, whose workers must not finish their calls first)."""
        process = self._process
        if process is not None:
            with contextlib.suppress(ValueError):  # closed by the calling thread meanwhile
                process.kill()  # SIGKILL, unless that thread has already reaped it

    def close(self) -> None:
        """Ask the worker to exit (killing it if it does not within 5 s) and clean up."""
        if self._process is not None:
            with contextlib.suppress(OSError):
                self._connection.send(None)
            self._process.join(5)
            self.kill()
        if self._stderr_path is not None:
            with contextlib.suppress(OSError):
                os.unlink(self._stderr_path)
            self._stderr_path = None

"""Measure (workload, candidate) kernels with TVM's own timer, isolated, cached and resumable.

Every kernel is built, checked against numpy and timed by ``time_evaluator`` inside one persistent
worker process (``import tvm`` costs ~1.2 s, so the worker is reused). A kernel that crashes the worker
or runs past the timeout is recorded as failed (cost ``inf``, reason stored); the worker is restarted
and the run goes on. Results are appended to a :class:`~layoutopt.tvm.cache.CostCache` as they come,
so a killed run resumes where it stopped.

Where kernels run is a :class:`Runner`: :class:`LocalRunner` (this machine) or :class:`RPCRunner`
(a device registered with TVM's RPC tracker, ``python -m tvm.exec.rpc_tracker`` /
``python -m tvm.exec.rpc_server --tracker HOST:PORT --key KEY``).

Example::

    from layoutopt.tvm import Measurer, conv2d_candidates
    with Measurer(target="llvm", cache="costs.jsonl") as measurer:
        results = measurer.measure([(workload, c) for c in conv2d_candidates(workload)])
    best = min(results, key=lambda r: r.cost)
    best.candidate, best.cost          # ({'in': 'NCHW16c', 'out': 'NCHW16c'}, 0.00121)
"""

from __future__ import annotations

import json
import logging
import math
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import tempfile
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from ..errors import ProblemError
from ..machine import usable_cores
from ._tvm import first_line
from .cache import CostCache, record_cost
from .kernels import SCHEDULE_VERSION, validate_candidate, validate_workload

__all__ = ["LocalRunner", "MeasureResult", "Measurer", "RPCRunner", "Runner", "parse_rpc_address"]

logger = logging.getLogger(__name__)

_HEADER = struct.Struct("<Q")
#: seconds allowed for the worker to start (it imports TVM)
_STARTUP_TIMEOUT = 120.0


# --------------------------------------------------------------------------------------------------
# runners: where and how a built kernel is timed (they run inside the worker process)
# --------------------------------------------------------------------------------------------------


@dataclass(kw_only=True)
class Runner:
    """Times a compiled kernel with TVM's ``time_evaluator``; subclasses decide where it runs.

    ``number`` runs make one repeat; ``number=0`` lets TVM grow it until a repeat lasts at least
    ``min_repeat_ms`` (each repeat then averages many runs, which tames noise on shared machines).
    The reported cost is the median of ``repeat`` repeats. Runners are small picklable settings
    objects: they are sent to the measuring worker, where :meth:`load` is called.

    A custom runner overrides :meth:`load` (and :meth:`close` if it holds resources).
    """

    number: int = 0
    repeat: int = 3
    min_repeat_ms: float = 20.0

    def __post_init__(self) -> None:
        if self.number < 0 or self.repeat < 1 or self.min_repeat_ms < 0:
            raise ProblemError(
                f"{type(self).__name__}: need number >= 0, repeat >= 1, min_repeat_ms >= 0, got "
                f"number={self.number}, repeat={self.repeat}, min_repeat_ms={self.min_repeat_ms}"
            )

    def load(self, executable: Any, name: str) -> tuple[Any, Any]:
        """Make ``executable`` runnable and return ``(runtime module, device)``."""
        raise NotImplementedError

    def time(self, module: Any, device: Any, name: str, args: Sequence[Any]) -> list[float]:
        """Seconds per run of ``module[name](*args)``, one value per repeat."""
        timer = module.time_evaluator(
            name,
            device,
            number=max(1, self.number),
            repeat=self.repeat,
            min_repeat_ms=math.ceil(self.min_repeat_ms) if self.number == 0 else 0,
        )
        return [float(r) for r in timer(*args).results]

    def close(self) -> None:
        """Release sessions or files (called when the worker stops)."""

    def describe(self) -> str:
        """Where kernels run, for messages."""
        return "this machine"


@dataclass
class LocalRunner(Runner):
    """Run kernels on this machine's CPU.

    Example::

        Measurer(runner=LocalRunner(repeat=5, min_repeat_ms=50))
    """

    def load(self, executable: Any, name: str) -> tuple[Any, Any]:
        from ._tvm import import_tvm

        return getattr(executable, "mod", executable), import_tvm().cpu()


@dataclass
class RPCRunner(Runner):  # tracker and key are positional, the timing settings keyword-only
    """Run kernels on a device registered with a TVM RPC tracker under ``key``.

    The kernel is compiled here for the measurer's target (give the device's, e.g.
    ``{"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "cortex-a72"}``), exported as a shared
    library, uploaded and timed on the device. One session is kept for the whole run.

    Args:
        tracker: ``"HOST:PORT"`` of the tracker (``python -m tvm.exec.rpc_tracker``).
        key: the device key the RPC servers registered with (``rpc_server --key KEY``).
        priority, session_timeout: passed to the tracker request (seconds; 0 = no limit).
        cc: the (cross) compiler that links the uploaded library, e.g. ``"aarch64-linux-gnu-g++"``
            for an ARM board; default: the host's C++ compiler.

    Example::

        Measurer(target=device_target, runner=RPCRunner("10.0.0.2:9190", "rasp4b"))
    """

    tracker: str = "127.0.0.1:9190"
    key: str = ""
    priority: int = 1
    session_timeout: float = 0.0
    cc: str | None = None
    _session: Any = field(default=None, init=False, repr=False, compare=False)
    _workdir: Any = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        parse_rpc_address(self.tracker)
        if not self.key:
            raise ProblemError("RPCRunner needs the device key the RPC servers registered with (--key)")

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_session"] = state["_workdir"] = None  # sessions and temp dirs do not cross processes
        return state

    def _connect(self):
        from ._tvm import import_tvm

        tvm = import_tvm()
        host, port = parse_rpc_address(self.tracker)
        try:
            tracker = tvm.rpc.connect_tracker(host, port)
            self._session = tracker.request(
                self.key, priority=self.priority, session_timeout=int(self.session_timeout)
            )
        except Exception as exc:
            raise RuntimeError(
                f"RPC tracker {self.tracker} key {self.key!r}: {first_line(exc, with_type=True)}"
            ) from None
        self._workdir = tempfile.TemporaryDirectory(prefix="layoutopt-rpc-")
        return self._session

    def load(self, executable: Any, name: str) -> tuple[Any, Any]:
        session = self._session or self._connect()
        path = Path(self._workdir.name) / f"{name}_{os.getpid()}_{time.monotonic_ns()}.so"
        fcompile = None
        if self.cc:
            from tvm.support.cc import cross_compiler

            fcompile = cross_compiler(self.cc)
        executable.export_library(str(path), fcompile=fcompile)
        session.upload(str(path))
        module = session.load_module(path.name)
        path.unlink()
        return module, session.cpu()

    def close(self) -> None:
        self._session = None
        if self._workdir is not None:
            self._workdir.cleanup()
            self._workdir = None

    def describe(self) -> str:
        return f"RPC tracker {self.tracker} key {self.key!r}"


def parse_rpc_address(address: str) -> tuple[str, int]:
    """``"HOST:PORT"`` -> ``(host, port)``, or ProblemError.

    Example::

        parse_rpc_address("127.0.0.1:9190")     # ('127.0.0.1', 9190)
    """
    host, sep, port = str(address).rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ProblemError(f"RPC tracker address {address!r} must look like HOST:PORT, e.g. 127.0.0.1:9190")
    return host, int(port)


# --------------------------------------------------------------------------------------------------
# results
# --------------------------------------------------------------------------------------------------


@dataclass
class MeasureResult:
    """One measured (workload, candidate): ``cost`` in seconds (see
    :func:`~layoutopt.tvm.cache.record_cost`), ``inf`` if it failed.

    Attributes:
        results: the seconds of every repeat; ``error``: why it failed (None if it did not);
        cached: True if it came from the cache; ``record``: the full cache record.
    """

    workload: dict[str, Any]
    candidate: dict[str, Any]
    cost: float
    results: list[float]
    error: str | None
    cached: bool
    record: dict[str, Any]

    @property
    def ok(self) -> bool:
        """True if the kernel built, checked and ran."""
        return self.error is None and math.isfinite(self.cost)


# --------------------------------------------------------------------------------------------------
# the worker process
# --------------------------------------------------------------------------------------------------


class _WorkerState:
    """What the worker keeps between tasks: the numpy references of recent workloads, and the
    kernels of the current :meth:`Measurer.measure` call, loaded and ready to be timed again."""

    def __init__(self) -> None:
        self.references: OrderedDict[str, Any] = OrderedDict()
        self.runners: dict[bytes, Runner] = {}
        self.loaded: dict[str, tuple[Runner, Any, Any, Any]] = {}

    def reference(self, kernel) -> tuple[list, Any]:
        from .kernels import reference_output

        key = json.dumps(kernel.workload, sort_keys=True)
        if key not in self.references:
            inputs = kernel.logical_inputs()
            self.references[key] = (inputs, reference_output(kernel.workload, inputs).astype(kernel.dtype))
            while len(self.references) > 4:
                self.references.popitem(last=False)
        self.references.move_to_end(key)
        return self.references[key]

    def retime(self, key: str) -> dict:
        """Time a kernel kept by :meth:`measure` again (no build, no check)."""
        import numpy as np

        runner, module, device, kernel = self.loaded[key]
        args = kernel.device_args(kernel.logical_inputs(), device)
        load_average = os.getloadavg()[0]
        results = runner.time(module, device, kernel.name, args)
        return {"median": float(np.median(results)), "results": results,
                "load_average": round(load_average, 2)}

    def forget(self) -> None:
        self.loaded.clear()

    def runner(self, runner: Runner) -> Runner:
        # keep one live instance per runner configuration so RPC sessions survive across tasks
        key = pickle.dumps(runner)
        return self.runners.setdefault(key, runner)

    def measure(
        self, runner: Runner, target_spec: dict, workload: dict, candidate: dict, check: bool,
        keep: str = "",
    ) -> dict:
        import numpy as np

        from ._tvm import import_tvm, resolve_target
        from .kernels import build_kernel, check_kernel

        tvm = import_tvm()
        runner = self.runner(runner)
        started, cpu_started = time.perf_counter(), time.process_time()
        target = resolve_target(target_spec)
        kernel = build_kernel(workload, candidate, target)
        executable = tvm.compile(kernel.module, target=target)
        built = time.perf_counter()
        module, device = runner.load(executable, kernel.name)
        inputs, expected = self.reference(kernel)
        args = kernel.device_args(inputs, device)
        check_error = None
        if check:
            check_error = check_kernel(kernel, module, device=device, reference=(inputs, expected), args=args)
        load_average = os.getloadavg()[0]
        results = runner.time(module, device, kernel.name, args)
        if keep:
            self.loaded[keep] = (runner, module, device, kernel)
        return {
            "median": float(np.median(results)),
            "results": results,
            "error": None,
            "check_error": check_error,
            # other work on the machine inflates every timing: keep the evidence with the number
            "load_average": round(load_average, 2),
            # CPU time of all worker threads: what this task costs on an otherwise idle machine
            "cpu_seconds": round(time.process_time() - cpu_started, 4),
            "build_seconds": round(built - started, 4),
            "run_seconds": round(time.perf_counter() - built, 4),
        }


def _die_with_parent(parent: int) -> None:
    """Have Linux kill this worker when its parent dies, even if a kernel hangs holding the GIL.

    (Linux sends the signal when the parent *thread* that started the worker exits: a Measurer
    must not outlive the thread that first measured with it.)
    """
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    if os.getppid() != parent:  # the parent died before the request was registered
        os._exit(1)


def _worker_main() -> None:
    """Serve measurement requests on stdin/stdout (pickled, length-prefixed) until stdin closes."""
    _die_with_parent(int(os.environ.get("LAYOUTOPT_PARENT_PID", os.getppid())))
    channel_in = os.fdopen(os.dup(0), "rb")
    channel_out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything TVM or LLVM prints goes to stderr, never into the protocol
    state = _WorkerState()

    def reply(value: Any) -> None:
        data = pickle.dumps(value)
        channel_out.write(_HEADER.pack(len(data)) + data)
        channel_out.flush()

    from ._tvm import import_tvm

    import_tvm()
    reply(("ready", os.getpid()))
    while True:
        header = channel_in.read(_HEADER.size)
        if len(header) < _HEADER.size:
            break
        request = pickle.loads(channel_in.read(_HEADER.unpack(header)[0]))
        kind, *arguments = request
        try:
            reply(("ok", getattr(state, kind)(*arguments)))
        except Exception as exc:
            reply(("error", first_line(exc, with_type=True)))
    for runner in state.runners.values():
        runner.close()


class _WorkerDied(Exception):
    """The worker crashed or was killed for running too long; the message says which."""


#: Set in the measuring worker's environment. Its numpy references and checks run on a BLAS whose
#: idle threads busy-wait for a while after each call; beside TVM's own two threads on a 2-core CPU
#: they inflate the kernel being timed. One BLAS thread never competes with it (in-process timings
#: use :func:`~layoutopt.tvm._tvm.one_blas_thread` for the same reason).
WORKER_BLAS_THREADS = {"OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "BLIS_NUM_THREADS": "1"}


class _Worker:
    """A persistent measuring subprocess, restarted after a crash or a timeout."""

    def __init__(self) -> None:
        self.process: subprocess.Popen | None = None
        self.stderr = None
        self.starts = 0

    def _start(self) -> None:
        if self.stderr is not None:
            self.stderr.close()
        # lives as long as the worker process: its tail explains a crash
        self.stderr = tempfile.TemporaryFile()  # noqa: SIM115
        env = dict(os.environ)
        # the worker must import what the caller can (e.g. a custom Runner defined in a script)
        env["PYTHONPATH"] = os.pathsep.join(p for p in [*sys.path, env.get("PYTHONPATH", "")] if p)
        env["LAYOUTOPT_PARENT_PID"] = str(os.getpid())
        env.update(WORKER_BLAS_THREADS)
        code = "from layoutopt.tvm.measure import _worker_main; _worker_main()"
        self.process = subprocess.Popen(
            [sys.executable, "-c", code],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            env=env,
        )
        self.starts += 1
        try:
            status, _ = self._receive(_STARTUP_TIMEOUT, "starting the worker")
        except _WorkerDied as died:
            # not a kernel's fault: fail the run instead of caching a failure for every kernel
            raise RuntimeError(f"the layoutopt measuring worker could not start: {died}") from None
        if status != "ready":
            raise RuntimeError(f"the layoutopt measuring worker could not start: {status}")

    def call(self, request: tuple, timeout: float) -> tuple[str, Any]:
        if self.process is None or self.process.poll() is not None:
            self._start()
        assert self.process is not None and self.process.stdin is not None
        data = pickle.dumps(request)
        try:
            self.process.stdin.write(_HEADER.pack(len(data)) + data)
            self.process.stdin.flush()
        except (BrokenPipeError, OSError):
            raise _WorkerDied(self._death_reason()) from None
        return self._receive(timeout, f"the kernel ran longer than the {timeout:g} s timeout")

    def _receive(self, timeout: float, timeout_reason: str) -> tuple[str, Any]:
        assert self.process is not None and self.process.stdout is not None
        fd = self.process.stdout.fileno()
        deadline = time.monotonic() + timeout
        buffer = b""
        needed = _HEADER.size
        while len(buffer) < needed:
            remaining = deadline - time.monotonic()
            ready, _, _ = select.select([fd], [], [], max(0.0, remaining))
            if not ready:
                self.kill()
                raise _WorkerDied(f"timed out: {timeout_reason}")
            chunk = os.read(fd, max(65536, needed - len(buffer)))
            if not chunk:
                raise _WorkerDied(self._death_reason())
            buffer += chunk
            if needed == _HEADER.size and len(buffer) >= _HEADER.size:
                needed += _HEADER.unpack(buffer[: _HEADER.size])[0]
        return pickle.loads(buffer[_HEADER.size : needed])

    def _death_reason(self) -> str:
        assert self.process is not None
        try:
            code = self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.kill()
            code = None
        tail = self._stderr_tail()
        if code is not None and code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            reason = f"worker crashed ({name})"
        else:
            reason = f"worker exited with code {code}"
        self.process = None
        return f"{reason}: {tail}" if tail else reason

    def _stderr_tail(self, lines: int = 3) -> str:
        if self.stderr is None:
            return ""
        self.stderr.seek(0)
        text = self.stderr.read().decode(errors="replace")
        interesting = [line.strip() for line in text.splitlines() if line.strip()]
        return " | ".join(interesting[-lines:])[:500]

    def kill(self) -> None:
        if self.process is not None:
            if self.process.poll() is None:
                self.process.kill()
            self.process.wait()
            self.process = None

    def close(self) -> None:
        if self.process is not None:
            try:
                assert self.process.stdin is not None
                self.process.stdin.close()  # the worker exits at end of input
                self.process.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                pass
            self.kill()
        if self.stderr is not None:
            self.stderr.close()
            self.stderr = None


# --------------------------------------------------------------------------------------------------
# the measurer
# --------------------------------------------------------------------------------------------------


def _warn_if_busy() -> None:
    cores = usable_cores()
    load = os.getloadavg()[0]
    if load > cores / 2:
        logger.warning(
            "layoutopt: load average %.1f on %d cores: other work will inflate the kernel timings "
            "(each record keeps its load_average; for reliable costs, measure into a fresh cache "
            "on a quiet machine)",
            load,
            cores,
        )


class Measurer:
    """Measure kernels once, in an isolated worker, remembering every result in a cost cache.

    Args:
        target: the llvm target (see :func:`~layoutopt.tvm.resolve_target`; default: this CPU).
        cache: a :class:`~layoutopt.tvm.cache.CostCache`, a ``.jsonl`` path, or None (memory only).
        runner: where kernels run (default :class:`LocalRunner`).
        timeout: seconds one kernel may take to build, check and time before it is declared hung.
        check: compare every kernel's output with numpy (a wrong kernel is recorded as failed).
        progress: show a tqdm progress bar (None: only when stderr is a terminal).
        retry_failed: measure again the kernels the cache records as failed.
        passes: how many times each kernel is timed, in separate passes over all the kernels of a
            :meth:`measure` call (built and checked once); its cost is the fastest pass's median.
            On a shared or virtualised machine, interference comes in episodes of seconds that
            slow every kernel timed meanwhile by up to 2x; a second pass, minutes later, rarely
            falls in the same episode. Cached kernels are not timed again.

    Raises:
        ProblemError: a bad target, runner setting, workload or candidate (before anything runs).

    Example::

        with Measurer(cache="costs.jsonl", runner=RPCRunner("127.0.0.1:9190", key="pi")) as m:
            m.measure([(wl, {"in": "NCHW16c", "out": "NCHW16c"})])[0].cost
    """

    def __init__(
        self,
        target: Any = None,
        cache: CostCache | str | os.PathLike[str] | None = None,
        runner: Runner | None = None,
        timeout: float = 60.0,
        check: bool = True,
        progress: bool | None = None,
        retry_failed: bool = False,
        passes: int = 2,
    ) -> None:
        from ._tvm import resolve_target, target_key

        self.target = resolve_target(target)
        self.target_key = target_key(self.target)
        # The schedule version rides along with TVM's: a cached time is only valid for the same
        # compiler AND the same hand-written schedule.
        self.tvm_version = f"{metadata.version('apache-tvm')}+schedules.{SCHEDULE_VERSION}"
        self.cache = cache if isinstance(cache, CostCache) else CostCache(cache)
        self.runner = runner if runner is not None else LocalRunner()
        if not isinstance(self.runner, Runner):
            raise ProblemError(f"runner must be a layoutopt.tvm.Runner, not {type(self.runner).__name__}")
        if not timeout > 0:
            raise ProblemError(f"timeout must be positive seconds, got {timeout!r}")
        self.timeout = float(timeout)
        if int(passes) != passes or passes < 1:
            raise ProblemError(f"passes must be a positive integer, got {passes!r}")
        self.passes = int(passes)
        self.check = bool(check)
        self.progress = progress
        self.retry_failed = bool(retry_failed)
        #: counts of the last :meth:`measure` call: requested, cached, measured, failed, seconds
        self.stats: dict[str, float] = {}
        self._worker = _Worker()

    def __enter__(self) -> Measurer:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def close(self) -> None:
        """Stop the worker process."""
        self._worker.close()

    def lookup(self, workload: Mapping[str, Any], candidate: Mapping[str, Any]) -> MeasureResult | None:
        """The cached result of (workload, candidate), or None if it still has to be measured."""
        workload = validate_workload(dict(workload))
        record = self.cache.get(self.target_key, self.tvm_version, workload, dict(candidate))
        if record is None or (self.retry_failed and record.get("error")):
            return None
        return self._result(record, cached=True)

    def measure(
        self, tasks: Iterable[tuple[Mapping[str, Any], Mapping[str, Any]]], desc: str = "measuring kernels"
    ) -> list[MeasureResult]:
        """Results for every ``(workload, candidate)`` task, in order; only uncached ones are run.

        Duplicate tasks are measured once. A failing kernel gives ``cost == inf`` and ``error``.
        """
        from tqdm.auto import tqdm

        started = time.perf_counter()
        normalized = []
        for workload, candidate in tasks:
            workload = validate_workload(dict(workload))
            candidate = dict(candidate)
            validate_candidate(workload, candidate)
            normalized.append((workload, candidate))
        results: dict[str, MeasureResult] = {}
        missing: dict[str, tuple[dict, dict]] = {}
        for workload, candidate in normalized:
            key = self.cache.key(self.target_key, self.tvm_version, workload, candidate)
            if key in results or key in missing:
                continue
            cached = self.lookup(workload, candidate)
            if cached is None:
                missing[key] = (workload, candidate)
            else:
                results[key] = cached
        failed = 0
        if missing:
            _warn_if_busy()
        disable = None if self.progress is None else not self.progress
        with tqdm(total=len(missing) * self.passes, desc=desc, unit="kernel", disable=disable,
                  leave=False) as bar:
            keep = self.passes > 1
            for key, (workload, candidate) in missing.items():
                results[key] = self._measure_one(workload, candidate, key if keep else "")
                failed += not results[key].ok
                bar.update()
            for _ in range(1, self.passes):
                for key in reversed(list(missing)):  # reversed: neighbours get different moments
                    if results[key].ok:
                        results[key] = self._time_again(key, results[key])
                    bar.update()
            if keep and missing:
                self._call(("forget",))
        self.stats = {
            "requested": len(normalized),
            "cached": len(results) - len(missing),
            "measured": len(missing),
            "failed": failed,
            "seconds": time.perf_counter() - started,
        }
        return [results[self.cache.key(self.target_key, self.tvm_version, w, c)] for w, c in normalized]

    def _call(self, request: tuple) -> tuple[str, Any]:
        try:
            return self._worker.call(request, self.timeout)
        except _WorkerDied as died:
            return "error", str(died)

    def _measure_one(self, workload: dict, candidate: dict, keep: str = "") -> MeasureResult:
        target_spec = json.loads(self.target_key)
        request = ("measure", self.runner, target_spec, workload, candidate, self.check, keep)
        status, value = self._call(request)
        outcome = value if status == "ok" else {"median": None, "results": [], "error": str(value)}
        record = self.cache.put(
            {
                "target": self.target_key,
                "tvm": self.tvm_version,
                "workload": workload,
                "candidate": candidate,
                "runner": self.runner.describe(),
                **outcome,
            }
        )
        return self._result(record, cached=False)

    def _time_again(self, key: str, result: MeasureResult) -> MeasureResult:
        """One more pass over a kernel the worker still holds; the record keeps every pass's median."""
        status, value = self._call(("retime", key))
        if status != "ok":  # e.g. the worker restarted after a crash and lost it: keep what we have
            return result
        record = dict(result.record)
        record["pass_medians"] = [*record.get("pass_medians", [record["median"]]), value["median"]]
        record["results"] = [*record.get("results", []), *value["results"]]
        record["load_average"] = max(record.get("load_average", 0.0), value["load_average"])
        return self._result(self.cache.put(record), cached=False)

    @staticmethod
    def _result(record: dict[str, Any], cached: bool) -> MeasureResult:
        return MeasureResult(
            workload=record["workload"],
            candidate=record["candidate"],
            cost=record_cost(record),
            results=list(record.get("results") or []),
            error=record.get("error"),
            cached=cached,
            record=record,
        )

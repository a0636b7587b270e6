"""Measure (workload, candidate) kernels with TVM's own timer, isolated, cached and resumable.

Kernels are compiled ahead, then timed alone:

1. **compile**, in a pool of worker processes on every core: each worker builds a batch of
   kernels, compiles them into one library and exports it (:meth:`Runner.export`);
2. **time**, with nothing else running: one worker per device (:meth:`Runner.devices`: one on this
   machine, one per RPC server of a farm) loads each kernel, checks it once against numpy and
   times it with ``time_evaluator``; a later pass times every kernel again (see ``passes``).

Compiling never overlaps timing on this machine: it would disturb the kernel being timed. The
kernels go through in rounds of a few hundred (compile, then time), so a killed run loses at
most one round's compiling; results are appended to a :class:`~layoutopt.tvm.cache.CostCache`
as they come, so it resumes where it stopped: a kernel the cache holds with fewer timing passes than
asked (a run killed between its passes) is timed again for the passes it lacks.

Ctrl-C (KeyboardInterrupt) in the caller stops the workers at once (SIGKILL), whatever they are
doing, and records nothing for the kernels they held: the cache keeps every record written before,
whole. The workers themselves never take SIGINT (a terminal sends it to the whole process group).

Every worker is a :class:`~layoutopt.isolation.IsolatedWorker` (reused: ``import tvm`` costs
~1.2 s). A kernel that crashes its worker or runs past the timeout is recorded as failed (cost
``inf``, reason stored); the worker is replaced and the run goes on. Where kernels run is a
:class:`~layoutopt.tvm.runner.Runner`: :class:`~layoutopt.tvm.runner.LocalRunner` (this
machine) or :class:`~layoutopt.tvm.runner.RPCRunner` (devices registered with TVM's RPC tracker).

Example::

    from layoutopt.tvm import Measurer, conv2d_candidates
    with Measurer(target="llvm", cache="costs.jsonl") as measurer:
        results = measurer.measure([(workload, c) for c in conv2d_candidates(workload)])
    best = min(results, key=lambda r: r.cost)
    best.candidate, best.cost          # ({'in': 'NCHW16c', 'out': 'NCHW16c'}, 0.00121)
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import pickle
import signal
import tempfile
import time
from collections import OrderedDict, defaultdict, deque
from collections.abc import Hashable, Iterable, Iterator, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from ..errors import ProblemError
from ..isolation import IsolatedWorker, WorkerDied
from ..machine import usable_cores
from ._tvm import first_line
from .cache import CostCache, record_cost
from .kernels import SCHEDULE_VERSION, validate_candidate, validate_workload
from .runner import LocalRunner, RPCRunner, Runner, parse_rpc_address

__all__ = ["LocalRunner", "MeasureResult", "Measurer", "RPCRunner", "Runner", "parse_rpc_address"]

logger = logging.getLogger(__name__)

#: seconds allowed for a worker to start (it imports TVM)
_STARTUP_TIMEOUT = 120.0
#: kernels compiled into one library: one LLVM module and one link for several kernels
_BATCH = 8
#: kernels compiled, then timed, per round: what a killed run may lose of its compiling
_ROUND = 256


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
# the worker processes
# --------------------------------------------------------------------------------------------------


class _WorkerState:
    """What a worker keeps between calls: its BLAS limit, the numpy references of recent workloads,
    the libraries it loaded, and the kernels of the current :meth:`Measurer.measure` call, loaded
    and ready to be timed again."""

    def __init__(self) -> None:
        from ._tvm import one_blas_thread

        # numpy's references and checks run on a BLAS whose idle threads busy-wait for a while
        # after each call; beside TVM's threads on a small CPU they would inflate the kernel timed
        self.blas = contextlib.ExitStack()
        self.blas.enter_context(one_blas_thread())
        self.references: OrderedDict[str, Any] = OrderedDict()
        self.runners: dict[bytes, Runner] = {}
        self.libraries: dict[tuple[bytes, str], tuple[Any, Any]] = {}
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

    def runner(self, runner: Runner) -> tuple[bytes, Runner]:
        # one live instance per runner configuration, so that an RPC session serves every kernel
        key = pickle.dumps(runner)
        return key, self.runners.setdefault(key, runner)

    def compile(self, runner: Runner, target_spec: dict, tasks: list[tuple[str, dict, dict]],
                directory: str) -> dict[str, dict]:
        """Build ``(key, workload, candidate)`` tasks and compile them into one library in ``directory``.

        Returns, per key, where its kernel is (``library``, ``function``, ``arg_shapes``, ``dtype``)
        and this call's seconds shared among them, or the ``error`` that stopped it. A library that
        fails to compile is compiled again kernel by kernel, so that one bad kernel fails alone.
        """
        from ._tvm import resolve_target
        from .kernels import build_kernel

        started, cpu_started = time.perf_counter(), time.process_time()
        target = resolve_target(target_spec)
        outcomes: dict[str, dict] = {}
        kernels = {}
        for key, workload, candidate in tasks:
            try:
                kernels[key] = build_kernel(workload, candidate, target)
            except Exception as exc:
                outcomes[key] = {"error": first_line(exc, with_type=True)}
        groups = [kernels]
        while groups:
            group = groups.pop()
            try:
                outcomes.update(self._library(runner, target, group, directory))
            except Exception as exc:
                if len(group) == 1:
                    outcomes.update({key: {"error": first_line(exc, with_type=True)} for key in group})
                else:
                    groups.extend({key: kernel} for key, kernel in group.items())
        share = len(tasks) or 1
        for outcome in outcomes.values():
            outcome["build_seconds"] = round((time.perf_counter() - started) / share, 4)
            outcome["build_cpu_seconds"] = round((time.process_time() - cpu_started) / share, 4)
        return outcomes

    @staticmethod
    def _library(runner: Runner, target: Any, kernels: dict[str, Any], directory: str) -> dict[str, dict]:
        from ._tvm import import_tvm

        if not kernels:
            return {}
        tvm = import_tvm()
        functions, located = {}, {}
        for i, (key, kernel) in enumerate(kernels.items()):
            name = f"kernel_{i}"
            functions[name] = kernel.module[kernel.name].with_attr("global_symbol", name)
            located[key] = {"function": name, "arg_shapes": kernel.arg_shapes, "dtype": kernel.dtype}
        executable = tvm.compile(tvm.IRModule(functions), target=target)
        path = Path(directory) / f"kernels_{os.getpid()}_{time.monotonic_ns()}.so"
        runner.export(executable, path)
        return {key: {"library": str(path), **where} for key, where in located.items()}

    def measure(self, runner: Runner, key: str, compiled: dict, workload: dict, candidate: dict,
                check: bool, keep: bool) -> dict:
        """Load a compiled kernel where ``runner`` runs code, check it once and time it."""
        import numpy as np

        from .kernels import Kernel, check_kernel

        started, cpu_started = time.perf_counter(), time.process_time()
        runner_key, runner = self.runner(runner)
        library = (runner_key, compiled["library"])
        if library not in self.libraries:
            self.libraries[library] = runner.load(compiled["library"], compiled["function"])
        module, device = self.libraries[library]
        kernel = Kernel(workload, candidate, None, compiled["function"],
                        [tuple(shape) for shape in compiled["arg_shapes"]], compiled["dtype"])
        inputs, expected = self.reference(kernel)
        args = kernel.device_args(inputs, device)
        check_error = None
        if check:
            check_error = check_kernel(kernel, module, device=device, reference=(inputs, expected), args=args)
        load_average = os.getloadavg()[0]
        results = runner.time(module, device, kernel.name, args)
        if keep:
            self.loaded[key] = (runner, module, device, kernel)
        return {
            "median": float(np.median(results)),
            "results": results,
            "error": None,
            "check_error": check_error,
            # other work on the machine inflates every timing: keep the evidence with the number
            "load_average": round(load_average, 2),
            "cpu_seconds": round(time.process_time() - cpu_started, 4),
            "run_seconds": round(time.perf_counter() - started, 4),
        }

    def retime(self, key: str) -> dict:
        """Time a kernel kept by :meth:`measure` again (no build, no check)."""
        import numpy as np

        runner, module, device, kernel = self.loaded[key]
        args = kernel.device_args(self.reference(kernel)[0], device)
        load_average = os.getloadavg()[0]
        results = runner.time(module, device, kernel.name, args)
        return {"median": float(np.median(results)), "results": results,
                "load_average": round(load_average, 2)}

    def forget(self) -> None:
        self.loaded.clear()
        self.libraries.clear()

    def close(self) -> None:
        """Release the runners' sessions (a worker process ends without running ``atexit``)."""
        self.forget()
        for runner in self.runners.values():
            runner.close()
        self.runners.clear()


_STATE: _WorkerState | None = None


def _start_worker() -> None:
    """A measuring worker's initializer: BLAS on one thread, TVM imported, an empty state; Ctrl-C
    ignored (the caller stops the worker: see :func:`_block_interrupts`)."""
    global _STATE
    from ._tvm import import_tvm

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    import_tvm()
    _STATE = _WorkerState()


def _serve(kind: str, *args: Any) -> tuple[str, Any]:
    """Run one request in a measuring worker: ``("ok", answer)`` or ``("error", one line)``."""
    assert _STATE is not None, "the measuring worker was not initialised"
    try:
        return "ok", getattr(_STATE, kind)(*args)
    except Exception as exc:  # TVM's errors need not pickle: send their text
        return "error", first_line(exc, with_type=True)


class _Lane:
    """One measuring worker and the one thread that talks to it.

    Linux ends a worker when the *thread* that started it exits (its parent-death signal), so every
    call, and every restart after a crash, goes through this lane's own long-lived thread.
    """

    def __init__(self, index: int) -> None:
        self.worker = IsolatedWorker(_start_worker, startup_timeout=_STARTUP_TIMEOUT, capture_stderr=True)
        self._thread = ThreadPoolExecutor(1, thread_name_prefix=f"layoutopt-measuring-{index}",
                                          initializer=_block_interrupts)

    def start(self) -> None:
        """Start the worker now (it starts on the first call otherwise)."""
        self._thread.submit(self.worker.start).result()

    def submit(self, kind: str, args: tuple, timeout: float, doing: str) -> Future:
        """``_serve(kind, *args)`` in the worker; the future's answer is ``(status, value)``."""
        return self._thread.submit(self._call, kind, args, timeout, doing)

    def _call(self, kind: str, args: tuple, timeout: float, doing: str) -> tuple[str, Any]:
        try:
            return self.worker.call(_serve, kind, *args, timeout=timeout)
        except WorkerDied as died:  # WorkerStartError is not a kernel's fault: it ends the run
            if died.timed_out:
                return "error", f"timed out: {doing} took longer than {timeout:g} s; worker killed"
            return "error", str(died)

    def interrupt(self) -> None:
        """Kill the worker now, from the caller's thread: the call it is in fails at once (Ctrl-C)."""
        self.worker.interrupt()

    def close(self) -> None:
        def stop() -> None:
            if self.worker.alive:  # one last call: the worker's runners hold sessions
                with contextlib.suppress(WorkerDied):
                    self.worker.call(_serve, "close", timeout=30)
            self.worker.close()

        self._thread.submit(stop).result()
        self._thread.shutdown()


def _block_interrupts() -> None:
    """A lane's thread blocks SIGINT, and so do the workers it spawns (they inherit its signal mask):
    Ctrl-C at a terminal, sent to the whole process group, then interrupts only the caller's main
    thread, which stops the workers (:meth:`Measurer.close`) instead of each printing a traceback."""
    if hasattr(signal, "pthread_sigmask"):
        from multiprocessing import resource_tracker

        # started at the first spawn otherwise, and starting it unblocks SIGINT in the thread
        resource_tracker.ensure_running()
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})


#: a job for the lanes: (tag, lane or None for any, kind, args, timeout, what it does)
_Job = tuple[Hashable, "int | None", str, tuple, float, str]


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
    """Measure kernels once, in isolated workers, remembering every result in a cost cache.

    Args:
        target: the llvm target (see :func:`~layoutopt.tvm.resolve_target`; default: this CPU).
        cache: a :class:`~layoutopt.tvm.cache.CostCache`, a ``.jsonl`` path, or None (memory only).
        runner: where kernels run (default :class:`LocalRunner`).
        timeout: seconds one kernel may take to build, or to check and time, before it is declared hung.
        check: compare every kernel's output with numpy (a wrong kernel is recorded as failed).
        progress: show a tqdm progress bar (None: only when stderr is a terminal).
        retry_failed: measure again the kernels the cache records as failed.
        passes: how many times each kernel is timed, in separate passes over all the kernels of a
            :meth:`measure` call (built and checked once); its cost is the fastest pass's median.
            On a shared or virtualised machine, interference comes in episodes of seconds that
            slow every kernel timed meanwhile by up to 2x; a second pass, minutes later, rarely
            falls in the same episode. Cached kernels are not timed again, unless the cache holds
            fewer passes of one (a run killed between them): it is then compiled again and timed
            for the passes it lacks, which are added to its record (``stats["retimed"]``).
        workers: processes compiling kernels ahead of their timing (default: one per usable core).

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
        workers: int | None = None,
    ) -> None:
        from ._tvm import resolve_target, target_key

        self.target = resolve_target(target)
        self.target_key = target_key(self.target)
        self.cache = cache if isinstance(cache, CostCache) else CostCache(cache)
        self.runner = runner if runner is not None else LocalRunner()
        if not isinstance(self.runner, Runner):
            raise ProblemError(f"runner must be a layoutopt.tvm.Runner, not {type(self.runner).__name__}")
        #: the device the costs are for, in every cache key beside the target (None: this machine)
        self.device = self.runner.device_name
        # The schedule version and the timing ride along with TVM's: a cached time is only valid
        # for the same compiler, the same hand-written schedule and the same cache state (cold/warm)
        self.tvm_version = (f"{metadata.version('apache-tvm')}+schedules.{SCHEDULE_VERSION}"
                            + ("+cold" if self.runner.timing == "cold" else ""))
        if not timeout > 0:
            raise ProblemError(f"timeout must be positive seconds, got {timeout!r}")
        self.timeout = float(timeout)
        if int(passes) != passes or passes < 1:
            raise ProblemError(f"passes must be a positive integer, got {passes!r}")
        self.passes = int(passes)
        if workers is not None and (int(workers) != workers or workers < 1):
            raise ProblemError(f"workers must be a positive integer, got {workers!r}")
        self.workers = int(workers) if workers is not None else usable_cores()
        self.check = bool(check)
        self.progress = progress
        self.retry_failed = bool(retry_failed)
        #: counts of the last :meth:`measure` call: requested, cached (every pass from the cache),
        #: retimed (from the cache, timed again for the passes it lacked), measured, failed, seconds;
        #: compile_seconds and time_seconds (the two phases), workers and devices used
        self.stats: dict[str, float] = {}
        self._lanes: list[_Lane] = []
        self._closed_starts = 0

    def __enter__(self) -> Measurer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc_info: Any) -> None:
        self.close(interrupted=exc_type is not None and not issubclass(exc_type, Exception))

    def close(self, interrupted: bool = False) -> None:
        """Stop the worker processes (their RPC sessions are closed first).

        Args:
            interrupted: kill them at once, whatever they are doing (on Ctrl-C: a kernel may compile
                or time for minutes); the result of a call a worker was in is not recorded.
        """
        lanes, self._lanes = self._lanes, []
        if interrupted:
            for lane in lanes:
                lane.interrupt()
        for lane in lanes:
            lane.close()
            self._closed_starts += lane.worker.starts

    @property
    def worker_starts(self) -> int:
        """Worker processes started so far (a crash or a timeout costs one more)."""
        return self._closed_starts + sum(lane.worker.starts for lane in self._lanes)

    def _lane(self, index: int) -> _Lane:
        while len(self._lanes) <= index:
            self._lanes.append(_Lane(len(self._lanes)))
        return self._lanes[index]

    def _key(self, workload: Mapping[str, Any], candidate: Mapping[str, Any]) -> str:
        return self.cache.key(self.target_key, self.tvm_version, workload, candidate, self.device)

    def lookup(self, workload: Mapping[str, Any], candidate: Mapping[str, Any]) -> MeasureResult | None:
        """The cached result of (workload, candidate), or None if it still has to be measured (it may
        lack timing passes: :meth:`passes_missing`)."""
        workload = validate_workload(dict(workload))
        record = self.cache.get(self.target_key, self.tvm_version, workload, dict(candidate), self.device)
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
        incomplete: dict[str, tuple[dict, dict]] = {}  # cached, but lacking passes
        for workload, candidate in normalized:
            key = self._key(workload, candidate)
            if key in results or key in missing:
                continue
            cached = self.lookup(workload, candidate)
            if cached is None:
                missing[key] = (workload, candidate)
            else:
                results[key] = cached
                if self.passes_missing(cached.record):
                    incomplete[key] = (workload, candidate)
        self.stats = {"compile_seconds": 0.0, "time_seconds": 0.0, "workers": 0, "devices": 0}
        if missing or incomplete:
            _warn_if_busy()
            disable = None if self.progress is None else not self.progress
            timings = len(missing) * self.passes + sum(self.passes_missing(results[key].record)
                                                       for key in incomplete)
            with tqdm(total=timings, desc=desc, unit="kernel", disable=disable, leave=False) as bar:
                self._measure_missing(missing, incomplete, results, bar)
        retimed = sum(not results[key].cached for key in incomplete)
        self.stats.update({
            "requested": len(normalized),
            "cached": len(results) - len(missing) - retimed,
            "retimed": retimed,
            "measured": len(missing),
            "failed": sum(not results[key].ok for key in missing),
            "seconds": time.perf_counter() - started,
        })
        return [results[self._key(w, c)] for w, c in normalized]

    def passes_missing(self, record: Mapping[str, Any]) -> int:
        """How many timing passes a cached record lacks (0 for a failed kernel: it has no time).

        Example::

            Measurer(passes=2).passes_missing({"median": 1e-3, "error": None})       # 1
        """
        if record.get("error") or record.get("median") is None:
            return 0
        return max(0, self.passes - len(record.get("pass_medians") or [record["median"]]))

    def _measure_missing(self, missing: dict[str, tuple[dict, dict]],
                         incomplete: dict[str, tuple[dict, dict]], results: dict[str, MeasureResult],
                         bar: Any) -> None:
        """Compile ``missing`` and ``incomplete`` in rounds on every worker, time each round alone, then
        the later passes (until each kernel has ``passes``)."""
        tasks = {**missing, **incomplete}
        keys = list(tasks)
        devices = min(self.runner.devices(), len(keys))
        workers = max(1, min(self.workers, math.ceil(min(len(keys), _ROUND) / _BATCH)))
        self.stats.update(workers=workers, devices=devices)
        device_of: dict[str, int] = {}
        with tempfile.TemporaryDirectory(prefix="layoutopt-kernels-") as directory:
            for first in range(0, len(keys), _ROUND):
                round_keys = keys[first : first + _ROUND]
                with self._phase("compile_seconds"):
                    compiled = self._compile(round_keys, tasks, directory, workers)
                with self._phase("time_seconds"):
                    self._first_pass(round_keys, tasks, incomplete, compiled, devices, results, device_of,
                                     bar)
            with self._phase("time_seconds"):
                for _ in range(1, self.passes):
                    # reversed: neighbours get different moments; each kernel on the device holding it
                    jobs = [(key, device_of[key], "retime", (key,), self.timeout, "timing the kernel again")
                            for key in reversed(keys) if key in device_of and results[key].ok
                            and self.passes_missing(results[key].record)]
                    for key, _, status, value in self._run(jobs, devices):
                        if status == "ok":  # else e.g. the worker restarted after a crash and lost it
                            results[key] = self._add_pass(results[key], value)
                        bar.update()
                lanes = [self._lane(i) for i in range(devices)]  # their libraries go with the directory
                for future in [lane.submit("forget", (), self.timeout, "forgetting") for lane in lanes]:
                    future.result()

    @contextlib.contextmanager
    def _phase(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.stats[name] += time.perf_counter() - started

    def _first_pass(self, keys: list[str], tasks: dict[str, tuple[dict, dict]],
                    incomplete: Mapping[str, tuple[dict, dict]], compiled: dict[str, dict], devices: int,
                    results: dict[str, MeasureResult], device_of: dict[str, int], bar: Any) -> None:
        """Check and time the compiled kernels of ``keys`` on ``devices`` workers; record each result.

        A kernel of ``incomplete`` (cached, lacking passes) is not checked again, and its timing is
        added to its record as one more pass; should it fail now, its record stays as it was."""
        jobs: list[_Job] = []
        for key in keys:
            outcome = compiled[key]
            passes_left = self.passes_missing(results[key].record) if key in incomplete else self.passes
            if "error" in outcome:  # it did not build
                if key not in incomplete:
                    failure = {"median": None, "results": [], "error": outcome["error"],
                               "build_seconds": outcome.get("build_seconds")}
                    results[key] = self._record(tasks[key], failure)
                bar.update(passes_left)
            else:
                check = self.check and key not in incomplete
                args = (self.runner, key, outcome, *tasks[key], check, passes_left > 1)
                jobs.append((key, None, "measure", args, self.timeout, "checking and timing the kernel"))
        for key, device, status, value in self._run(jobs, devices):
            if key in incomplete:
                passes_left = self.passes_missing(results[key].record)
                if status == "ok":
                    results[key] = self._add_pass(results[key], value)
                    device_of[key] = device
                    bar.update()
                else:
                    logger.warning("layoutopt: timing a cached kernel again failed (%s); its record keeps "
                                   "the passes it had", value)
                    bar.update(passes_left)
                continue
            build = compiled[key]
            if status == "ok":  # CPU time of every thread of both workers: its cost on an idle machine
                cpu_seconds = round(value["cpu_seconds"] + build["build_cpu_seconds"], 4)
                outcome = {**value, "cpu_seconds": cpu_seconds}
            else:
                outcome = {"median": None, "results": [], "error": str(value)}
            results[key] = self._record(tasks[key], {**outcome, "build_seconds": build["build_seconds"]})
            device_of[key] = device
            bar.update(1 if results[key].ok else self.passes)

    def _compile(self, keys: list[str], tasks: dict[str, tuple[dict, dict]], directory: str,
                 workers: int) -> dict[str, dict]:
        """Build and compile ``keys`` in batches on ``workers`` workers; per key, where its kernel is
        or why it failed. A batch whose worker dies is compiled again kernel by kernel."""
        target_spec = json.loads(self.target_key)
        outcomes: dict[str, dict] = {}
        batches = [keys[i : i + _BATCH] for i in range(0, len(keys), _BATCH)]
        while batches:
            jobs: list[_Job] = [
                (tuple(batch), None, "compile",
                 (self.runner, target_spec, [(key, *tasks[key]) for key in batch], directory),
                 self.timeout * len(batch), "compiling")
                for batch in batches]
            batches = []
            for batch, _, status, value in self._run(jobs, workers):
                if status == "ok":
                    outcomes.update(value)
                elif len(batch) > 1:
                    batches.extend([key] for key in batch)
                else:
                    outcomes[batch[0]] = {"error": str(value)}
        return outcomes

    def _run(self, jobs: list[_Job], lanes: int) -> Iterator[tuple[Hashable, int, str, Any]]:
        """Run ``jobs`` on the lanes, one at a time per lane, each on its own lane or on any of the
        first ``lanes``; yield ``(tag, lane, status, value)`` as they finish."""
        shared: deque[_Job] = deque()
        own: dict[int, deque[_Job]] = defaultdict(deque)
        for job in jobs:
            (shared if job[1] is None else own[job[1]]).append(job)
        running: dict[Future, tuple[Hashable, int]] = {}

        def feed(lane: int) -> None:
            queue = own[lane] if own[lane] else (shared if lane < lanes else None)
            if queue:
                tag, _, kind, args, timeout, doing = queue.popleft()
                running[self._lane(lane).submit(kind, args, timeout, doing)] = (tag, lane)

        for lane in sorted(set(range(lanes)) | set(own)):
            feed(lane)
        while running:
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                tag, lane = running.pop(future)
                status, value = future.result()  # WorkerStartError ends the run: no kernel's fault
                feed(lane)
                yield tag, lane, status, value

    def _record(self, task: tuple[dict, dict], outcome: dict[str, Any]) -> MeasureResult:
        workload, candidate = task
        record = self.cache.put({
            "target": self.target_key,
            "tvm": self.tvm_version,
            "workload": workload,
            "candidate": candidate,
            **({"device": self.device} if self.device is not None else {}),
            "runner": self.runner.describe(),
            **outcome,
        })
        return self._result(record, cached=False)

    def _add_pass(self, result: MeasureResult, value: dict[str, Any]) -> MeasureResult:
        """One more pass's timing of a kernel; the record keeps every pass's median."""
        record = dict(result.record)
        record["pass_medians"] = [*(record.get("pass_medians") or [record["median"]]), value["median"]]
        record["results"] = [*(record.get("results") or []), *value["results"]]
        record["load_average"] = max(record.get("load_average") or 0.0, value["load_average"])
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

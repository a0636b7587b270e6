"""Measure (workload, candidate) kernels with TVM's own timer, isolated, cached and resumable.

Kernels are compiled ahead, then timed alone:

1. **compile**, in a pool of worker processes on every core: each worker builds a batch of
   kernels, compiles them into one library and exports it (:meth:`Runner.export`);
2. **time**, with nothing else running: one worker per device (:meth:`Runner.devices`: one on this
   machine, one per RPC server of a farm) loads each kernel, checks it once against numpy and
   times it with ``time_evaluator``; a later pass times every kernel again (see ``passes``).

Compiling never overlaps timing on this machine: it would disturb the kernel being timed. The
kernels go through in rounds of a few hundred (compile, then time), so a killed run loses at
most one round's compiling; results are appended to a :class:`~layoutopt.tvm.measure.cache.CostCache`
as they come, so it resumes where it stopped: a kernel the cache holds with fewer timing passes than
asked (a run killed between its passes) is timed again for the passes it lacks.

Ctrl-C (KeyboardInterrupt) in the caller stops the workers at once (SIGKILL), whatever they are
doing, and records nothing for the kernels they held: the cache keeps every record written before,
whole. The workers themselves never take SIGINT (a terminal sends it to the whole process group).

Every worker is a :class:`~layoutopt.isolation.IsolatedWorker` (reused: ``import tvm`` costs
~1.2 s) running :mod:`layoutopt.tvm.measure.worker`, asked by request records and answering with result
records. A kernel that crashes its worker or runs past the timeout is recorded as failed (cost
``inf``, reason stored); the worker is replaced and the run goes on. Where kernels run is a
:class:`~layoutopt.tvm.measure.runner.Runner`: :class:`~layoutopt.tvm.measure.runner.LocalRunner` (this
machine) or :class:`~layoutopt.tvm.measure.runner.RPCRunner` (devices registered with TVM's RPC tracker).

Example:
    Two kernels of a tiny conv (``conv1`` of a two-conv model: 3x3, 8 -> 8 channels at 8x8, with its
    bias and relu) measured into a cost cache; measuring them again finds them there:

    >>> from layoutopt.tvm import Measurer, conv2d_candidates, extract_layout_graph, models
    >>> workload = extract_layout_graph(models.chain((8, 8))).layout_node("conv1").workload
    >>> tasks = [(workload, c) for c in conv2d_candidates(workload, blocks=[8], algorithms=["direct"])]
    >>> with Measurer(target="llvm", cache="costs.jsonl") as measurer:
    ...     results = measurer.measure(tasks)
    ...     again = measurer.measure(tasks)
    >>> [(result.candidate, result.ok) for result in results]
    [({'in': 'NCHW8c', 'out': 'NCHW8c'}, True), ({'in': 'NCHW', 'out': 'NCHW'}, True)]
    >>> best = min(results, key=lambda r: r.cost)     # which one wins is this CPU's answer
    >>> best.cost > 0, measurer.stats.cached, [r.cost for r in again] == [r.cost for r in results]
    (True, 2, True)
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import tempfile
import time
from collections import defaultdict, deque
from collections.abc import Hashable, Iterable, Iterator, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import asdict, dataclass
from importlib import metadata
from typing import Any

from ...errors import ProblemError
from ...machine import cpu_name, usable_cores
from ..kernels import SCHEDULE_VERSION, validate_candidate, validate_workload
from .cache import CostCache, CostContext, record_cost
from .runner import LocalRunner, Runner
from .worker import (
    BuildResult,
    CompileRequest,
    ForgetRequest,
    KernelTask,
    Lane,
    MeasureRequest,
    Reply,
    Request,
    RetimeRequest,
    RunResult,
    Timing,
)

__all__ = ["MeasureResult", "MeasureStats", "Measurer"]

logger = logging.getLogger(__name__)

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
    :func:`~layoutopt.tvm.measure.cache.record_cost`), ``inf`` if it failed.

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


@dataclass(frozen=True)
class MeasureStats:
    """The counts of one :meth:`Measurer.measure` call: tasks ``requested``; ``cached`` (every pass
    from the cache); ``retimed`` (from the cache, timed again for the passes it lacked); ``measured``
    (built, checked and timed now) and of those ``failed``; its wall ``seconds``, of which
    ``compile_seconds`` and ``time_seconds`` in the two phases; the ``workers`` compiling and the
    ``devices`` timing; ``other_cpu``: tasks measured now whose only records in the cache were of
    another CPU (not reused: :meth:`~layoutopt.tvm.measure.cache.CostCache.other_cpus`).

    Example:
        >>> MeasureStats(requested=20, cached=5, measured=15).to_json()["measured"]
        15
    """

    requested: int = 0
    cached: int = 0
    retimed: int = 0
    measured: int = 0
    failed: int = 0
    seconds: float = 0.0
    compile_seconds: float = 0.0
    time_seconds: float = 0.0
    workers: int = 0
    devices: int = 0
    other_cpu: int = 0

    def to_json(self) -> dict[str, Any]:
        """The counts as a JSON object (what ``meta["stats"]`` was before this record)."""
        return asdict(self)


@dataclass(frozen=True)
class Job:
    """A request for the lanes: ``tag`` names it in the answers, ``lane`` is the one it must run on
    (None: any), ``doing`` what it does in a timeout's message."""

    tag: Hashable
    request: Request
    timeout: float
    doing: str
    lane: int | None = None


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
        cache: a :class:`~layoutopt.tvm.measure.cache.CostCache`, a ``.jsonl`` path, or None (memory only).
        runner: where kernels run (default :class:`~layoutopt.tvm.measure.runner.LocalRunner`).
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
            for the passes it lacks, which are added to its record (``stats.retimed``).
        workers: processes compiling kernels ahead of their timing (default: one per usable core).

    Raises:
        ProblemError: a bad target, runner setting, workload or candidate (before anything runs).

    Example:
        Warm timings in one pass, on this machine (a device behind a TVM RPC tracker would be
        ``runner=RPCRunner("HOST:PORT", "pi")``, its costs cached under ``"device": "rpc:pi"``):

        >>> from layoutopt.tvm import LocalRunner
        >>> measurer = Measurer(cache="costs.jsonl", runner=LocalRunner(cold=False), passes=1)
        >>> measurer.context.timing, measurer.context.device     # cached apart from cold timings
        ('warm', None)
        >>> Measurer(passes=0)
        Traceback (most recent call last):
        ...
        layoutopt.errors.ProblemError: passes must be a positive integer, got 0
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
        from .._tvm import resolve_target, target_key

        self.target = resolve_target(target)
        self.cache = cache if isinstance(cache, CostCache) else CostCache(cache)
        self.runner = runner if runner is not None else LocalRunner()
        if not isinstance(self.runner, Runner):
            raise ProblemError(f"runner must be a layoutopt.tvm.Runner, not {type(self.runner).__name__}")
        #: what the costs are valid for, in every cache key: a cached time is only reused for the same
        #: target, compiler, hand-written schedules, timing (cold/warm), device (None: this machine) and
        #: CPU (this machine's; an RPC device's key names its own)
        device = self.runner.device_name
        self.context = CostContext(json.loads(target_key(self.target)), metadata.version("apache-tvm"),
                                   SCHEDULE_VERSION, self.runner.timing, device,
                                   cpu_name() if device is None else None)
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
        #: the counts of the last :meth:`measure` call
        self.stats = MeasureStats()
        self._phases: dict[str, float] = {}  # the current call's seconds per phase, workers and devices
        self._lanes: list[Lane] = []
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

    def _lane(self, index: int) -> Lane:
        while len(self._lanes) <= index:
            self._lanes.append(Lane(len(self._lanes)))
        return self._lanes[index]

    def _key(self, workload: Mapping[str, Any], candidate: Mapping[str, Any]) -> str:
        return self.context.key(workload, candidate)

    def lookup(self, workload: Mapping[str, Any], candidate: Mapping[str, Any]) -> MeasureResult | None:
        """The cached result of (workload, candidate), or None if it still has to be measured (it may
        lack timing passes: :meth:`passes_missing`)."""
        workload = validate_workload(dict(workload))
        record = self.cache.get(self.context, workload, dict(candidate))
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
        self._phases = {"compile_seconds": 0.0, "time_seconds": 0.0, "workers": 0, "devices": 0}
        others = {key: self.cache.other_cpus(self.context, *task) for key, task in missing.items()}
        others = {key: cpus for key, cpus in others.items() if cpus}
        if others:
            logger.warning("layoutopt: cost cache %s holds %d of these kernels measured on another CPU (%s), "
                           "not this one (%s): measuring them again", self.cache.path or "in memory",
                           len(others), ", ".join(sorted({c for cpus in others.values() for c in cpus})),
                           self.context.cpu)
        if missing or incomplete:
            _warn_if_busy()
            disable = None if self.progress is None else not self.progress
            timings = len(missing) * self.passes + sum(self.passes_missing(results[key].record)
                                                       for key in incomplete)
            with tqdm(total=timings, desc=desc, unit="kernel", disable=disable, leave=False) as bar:
                self._measure_missing(missing, incomplete, results, bar)
        retimed = sum(not results[key].cached for key in incomplete)
        self.stats = MeasureStats(requested=len(normalized), cached=len(results) - len(missing) - retimed,
                                  retimed=retimed, measured=len(missing),
                                  failed=sum(not results[key].ok for key in missing),
                                  seconds=time.perf_counter() - started, other_cpu=len(others),
                                  **self._phases)
        return [results[self._key(w, c)] for w, c in normalized]

    def time_rounds(self, tasks: Iterable[tuple[Mapping[str, Any], Mapping[str, Any]]], rounds: int,
                    desc: str = "timing kernels side by side") -> list[list[float]]:
        """Time every ``(workload, candidate)`` of ``tasks`` afresh, side by side: compiled once, then
        timed in ``rounds`` interleaved rounds, each kernel once per round (every other round in the
        reverse order), so that a slow episode of the machine hits them all alike. The cost cache is
        neither read nor written (the caller keeps what it needs); kernels are not checked again.

        Returns:
            per task, in order, its median seconds in each round (all ``inf`` when it failed to build
            or to run in some round).

        Example:
            >>> from layoutopt.tvm import LocalRunner, conv2d_candidates, extract_layout_graph, models
            >>> workload = extract_layout_graph(models.chain((8, 8))).layout_node("conv1").workload
            >>> candidates = conv2d_candidates(workload, blocks=[8], algorithms=["direct"])
            >>> tasks = [(workload, c) for c in candidates]
            >>> with Measurer(runner=LocalRunner(repeat=2, min_repeat_ms=1, cold_runs=2)) as measurer:
            ...     times = measurer.time_rounds(tasks, rounds=3)
            >>> [len(t) for t in times], all(0 < x < 1 for t in times for x in t)
            ([3, 3], True)
        """
        if int(rounds) != rounds or rounds < 1:
            raise ProblemError(f"rounds must be a positive integer, got {rounds!r}")
        rounds = int(rounds)
        by_key: dict[str, tuple[dict, dict]] = {}
        keys = []
        for workload, candidate in tasks:
            workload, candidate = validate_workload(dict(workload)), dict(candidate)
            validate_candidate(workload, candidate)
            key = self._key(workload, candidate)
            by_key.setdefault(key, (workload, candidate))
            keys.append(key)
        unique = list(by_key)
        times: dict[str, list[float]] = {key: [] for key in unique}
        if unique:
            self.runner.close()
            devices = min(self.runner.devices(), len(unique))
            workers = max(1, min(self.workers, math.ceil(len(unique) / _BATCH)))
            from tqdm.auto import tqdm

            disable = None if self.progress is None else not self.progress
            with tempfile.TemporaryDirectory(prefix="layoutopt-kernels-") as directory, \
                    tqdm(total=len(unique) * rounds, desc=desc, unit="kernel", disable=disable,
                         leave=False) as bar:
                compiled = self._compile(unique, by_key, directory, workers)
                device_of: dict[str, int] = {}
                jobs = [Job(key, MeasureRequest(self.runner, KernelTask(key, *by_key[key]), compiled[key],
                                                check=False, keep=rounds > 1),
                            self.timeout, "timing the kernel") for key in unique if compiled[key].ok]
                for job, device, reply in self._run(jobs, devices):
                    if reply.ok:
                        times[job.tag].append(reply.value.timing.median)
                        device_of[job.tag] = device
                    bar.update()
                for number in range(1, rounds):
                    order = unique[::-1] if number % 2 else unique
                    jobs = [Job(key, RetimeRequest(key), self.timeout, "timing the kernel again",
                                lane=device_of[key]) for key in order if key in device_of]
                    for job, _, reply in self._run(jobs, devices):
                        if reply.ok:
                            times[job.tag].append(reply.value.median)
                        else:  # its worker restarted: the kernels it kept are gone
                            device_of.pop(job.tag, None)
                        bar.update()
                lanes = [self._lane(i) for i in range(devices)]
                for future in [lane.submit(ForgetRequest(), self.timeout, "forgetting") for lane in lanes]:
                    future.result()
        full = {key: t if len(t) == rounds and all(math.isfinite(x) for x in t) else [math.inf] * rounds
                for key, t in times.items()}
        return [list(full[key]) for key in keys]

    def passes_missing(self, record: Mapping[str, Any]) -> int:
        """How many timing passes a cached record lacks (0 for a failed kernel: it has no time).

        Example:
            >>> measurer = Measurer(passes=2)
            >>> measurer.passes_missing({"median": 1e-3, "error": None})     # timed in one pass of two
            1
            >>> measurer.passes_missing({"median": 1e-3, "pass_medians": [1e-3, 9e-4], "error": None})
            0
            >>> measurer.passes_missing({"median": None, "error": "timed out"})   # a failure has no time
            0
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
        # the caller's own session (a reference build it ran on the device, say) would hold a device
        # of the farm: a worker asking for it would wait until its kernel timed out
        self.runner.close()
        devices = min(self.runner.devices(), len(keys))
        workers = max(1, min(self.workers, math.ceil(min(len(keys), _ROUND) / _BATCH)))
        self._phases.update(workers=workers, devices=devices)
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
                    jobs = [Job(key, RetimeRequest(key), self.timeout, "timing the kernel again",
                                lane=device_of[key])
                            for key in reversed(keys) if key in device_of and results[key].ok
                            and self.passes_missing(results[key].record)]
                    for job, _, reply in self._run(jobs, devices):
                        if reply.ok:  # else e.g. the worker restarted after a crash and lost it
                            results[job.tag] = self._add_pass(results[job.tag], reply.value)
                        bar.update()
                lanes = [self._lane(i) for i in range(devices)]  # their libraries go with the directory
                for future in [lane.submit(ForgetRequest(), self.timeout, "forgetting") for lane in lanes]:
                    future.result()

    @contextlib.contextmanager
    def _phase(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self._phases[name] += time.perf_counter() - started

    def _first_pass(self, keys: list[str], tasks: dict[str, tuple[dict, dict]],
                    incomplete: Mapping[str, tuple[dict, dict]], compiled: dict[str, BuildResult],
                    devices: int, results: dict[str, MeasureResult], device_of: dict[str, int],
                    bar: Any) -> None:
        """Check and time the compiled kernels of ``keys`` on ``devices`` workers; record each result.

        A kernel of ``incomplete`` (cached, lacking passes) is not checked again, and its timing is
        added to its record as one more pass; should it fail now, its record stays as it was."""
        jobs: list[Job] = []
        for key in keys:
            build = compiled[key]
            passes_left = self.passes_missing(results[key].record) if key in incomplete else self.passes
            if not build.ok:
                if key not in incomplete:
                    results[key] = self._record(tasks[key], RunResult.failure_fields(build.error, build))
                bar.update(passes_left)
            else:
                request = MeasureRequest(self.runner, KernelTask(key, *tasks[key]), build,
                                         check=self.check and key not in incomplete, keep=passes_left > 1)
                jobs.append(Job(key, request, self.timeout, "checking and timing the kernel"))
        for job, device, reply in self._run(jobs, devices):
            key = job.tag
            if key in incomplete:
                if reply.ok:
                    results[key] = self._add_pass(results[key], reply.value.timing)
                    device_of[key] = device
                    bar.update()
                else:
                    logger.warning("layoutopt: timing a cached kernel again failed (%s); its record keeps "
                                   "the passes it had", reply.error)
                    bar.update(self.passes_missing(results[key].record))
                continue
            build = compiled[key]
            if reply.ok:
                outcome = reply.value.record_fields(build)
            else:
                outcome = RunResult.failure_fields(reply.error, build)
            results[key] = self._record(tasks[key], outcome)
            device_of[key] = device
            bar.update(1 if results[key].ok else self.passes)

    def _compile(self, keys: list[str], tasks: dict[str, tuple[dict, dict]], directory: str,
                 workers: int) -> dict[str, BuildResult]:
        """Build and compile ``keys`` in batches on ``workers`` workers; per key, where its kernel is
        or why it failed. A batch whose worker dies is compiled again kernel by kernel."""
        target = dict(self.context.target)
        outcomes: dict[str, BuildResult] = {}
        batches = [keys[i : i + _BATCH] for i in range(0, len(keys), _BATCH)]
        while batches:
            jobs = [Job(tuple(batch), CompileRequest(self.runner, target, tuple(KernelTask(key, *tasks[key])
                                                                                for key in batch), directory),
                        self.timeout * len(batch), "compiling")
                    for batch in batches]
            batches = []
            for job, _, reply in self._run(jobs, workers):
                if reply.ok:
                    outcomes.update(reply.value)
                elif len(job.tag) > 1:
                    batches.extend([key] for key in job.tag)
                else:
                    outcomes[job.tag[0]] = BuildResult(error=reply.error)
        return outcomes

    def _run(self, jobs: list[Job], lanes: int) -> Iterator[tuple[Job, int, Reply]]:
        """Run ``jobs`` on the lanes, one at a time per lane, each on its own lane or on any of the
        first ``lanes``; yield ``(job, lane, reply)`` as they finish."""
        shared: deque[Job] = deque()
        own: dict[int, deque[Job]] = defaultdict(deque)
        for job in jobs:
            (shared if job.lane is None else own[job.lane]).append(job)
        running: dict[Future, tuple[Job, int]] = {}

        def feed(lane: int) -> None:
            queue = own[lane] if own[lane] else (shared if lane < lanes else None)
            if queue:
                job = queue.popleft()
                running[self._lane(lane).submit(job.request, job.timeout, job.doing)] = (job, lane)

        for lane in sorted(set(range(lanes)) | set(own)):
            feed(lane)
        while running:
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                job, lane = running.pop(future)
                reply = future.result()  # WorkerStartError ends the run: no kernel's fault
                feed(lane)
                yield job, lane, reply

    def _record(self, task: tuple[dict, dict], outcome: dict[str, Any]) -> MeasureResult:
        workload, candidate = task
        record = self.cache.put({**self.context.record_fields(), "workload": workload, "candidate": candidate,
                                 "runner": self.runner.describe(), **outcome})
        return self._result(record, cached=False)

    def _add_pass(self, result: MeasureResult, timing: Timing) -> MeasureResult:
        """One more pass's timing of a kernel; the record keeps every pass's median."""
        record = dict(result.record)
        record["pass_medians"] = [*(record.get("pass_medians") or [record["median"]]), timing.median]
        record["results"] = [*(record.get("results") or []), *timing.results]
        record["load_average"] = max(record.get("load_average") or 0.0, timing.load_average)
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

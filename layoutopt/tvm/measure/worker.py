"""The measuring worker: what runs inside the processes a :class:`~layoutopt.tvm.measure.measure.Measurer`
starts.

A worker is an :class:`~layoutopt.isolation.IsolatedWorker` (a process that may crash or hang without
harm to the caller) that imports TVM once and keeps a :class:`WorkerState` between calls. It is
asked to do one thing at a time by a :class:`Request`, and answers with a :class:`Reply`:

* :class:`CompileRequest`: build a batch of kernels (:class:`KernelTask`) and compile them into one
  library; a :class:`BuildResult` per kernel (where its function is, or why it did not build);
* :class:`MeasureRequest`: load a compiled kernel where the runner runs code, check it once against
  numpy and time it; a :class:`RunResult` (as meta_schedule's ``BuilderResult`` / ``RunnerResult``);
* :class:`RetimeRequest`: time a kernel kept by a :class:`MeasureRequest` again; a :class:`Timing`;
* :class:`ForgetRequest`, :class:`CloseRequest`: drop the kernels loaded, release the runners.

Every request and answer is a record: they cross the process boundary pickled. :class:`Lane` is the
caller's side of one worker: the one thread that talks to it.

Example:
    One lane compiles a tiny conv (``conv1`` of a two-conv model: 3x3, 8 -> 8 channels at 8x8, with its
    bias and relu) as an ``NCHW8c`` kernel into a library in this directory, then checks and times it,
    as a :class:`~layoutopt.tvm.measure.measure.Measurer` does with every kernel:

    >>> from layoutopt.tvm import LocalRunner, extract_layout_graph, models
    >>> from layoutopt.tvm.measure.cache import task_key
    >>> workload = extract_layout_graph(models.chain((8, 8))).layout_node("conv1").workload
    >>> candidate = {"in": "NCHW8c", "out": "NCHW8c"}
    >>> task = KernelTask(task_key(workload, candidate), workload, candidate)
    >>> lane = Lane(0)
    >>> compiled = lane.submit(CompileRequest(LocalRunner(), {"kind": "llvm"}, (task,), "."), 60, "compiling")
    >>> build = compiled.result().value[task.key]
    >>> build.ok, build.arg_shapes       # data, weight, bias, output: in blocks of 8 channels
    (True, ((1, 1, 8, 8, 8), (1, 1, 3, 3, 8, 8), (1, 1, 1, 1, 8), (1, 1, 8, 8, 8)))
    >>> request = MeasureRequest(LocalRunner(), task, build, check=True, keep=False)
    >>> run = lane.submit(request, 60, "checking and timing").result().value
    >>> run.check_error < 1e-5, run.timing.median > 0     # its error against numpy; seconds
    (True, True)
    >>> lane.close()
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import signal
import time
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ...isolation import IsolatedWorker, WorkerDied
from .._tvm import first_line
from .runner import Runner

__all__ = ["BuildResult", "CloseRequest", "CompileRequest", "ForgetRequest", "KernelTask", "Lane",
           "MeasureRequest", "Reply", "Request", "RetimeRequest", "RunResult", "Timing", "WorkerState"]

#: seconds allowed for a worker to start (it imports TVM)
STARTUP_TIMEOUT = 120.0


# --------------------------------------------------------------------------------------------------
# the records: tasks, requests and their answers
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KernelTask:
    """One kernel to build and time: its cost-cache ``key``, ``workload`` and ``candidate`` dict."""

    key: str
    workload: dict[str, Any]
    candidate: dict[str, Any]


@dataclass(frozen=True)
class BuildResult:
    """A kernel compiled ahead: the ``library`` and ``function`` holding it, its ``arg_shapes`` and
    ``dtype``; or the ``error`` that stopped its build. ``build_seconds`` and ``build_cpu_seconds`` are
    its share of its batch's wall and CPU seconds (None when its worker died: nothing was timed).

    Example:
        >>> BuildResult(error="TVMError: cannot split").ok
        False
    """

    library: str | None = None
    function: str | None = None
    arg_shapes: tuple[tuple[int, ...], ...] = ()
    dtype: str | None = None
    error: str | None = None
    build_seconds: float | None = None
    build_cpu_seconds: float | None = None

    @property
    def ok(self) -> bool:
        """True if the kernel built and compiled."""
        return self.error is None


@dataclass(frozen=True)
class Timing:
    """One timing pass of a kernel: the ``median`` of its repeats (seconds), every repeat's seconds
    (``results``) and the machine's 1-minute ``load_average`` just before (other work inflates every
    timing: the evidence stays with the number)."""

    median: float
    results: tuple[float, ...]
    load_average: float


@dataclass(frozen=True)
class RunResult:
    """A kernel checked and timed once: its first :class:`Timing`, ``check_error`` (its output's error
    against numpy, None unchecked), and the worker's ``cpu_seconds`` and ``run_seconds`` for it.

    Example:
        >>> run = RunResult(Timing(1e-3, (1e-3,), load_average=0.5), 0.0, cpu_seconds=0.2, run_seconds=0.3)
        >>> build = BuildResult("k.so", "kernel_0", build_seconds=0.1, build_cpu_seconds=0.1)
        >>> fields = run.record_fields(build)
        >>> fields["cpu_seconds"], fields["results"], fields["error"]
        (0.3, [0.001], None)
    """

    timing: Timing
    check_error: float | None
    cpu_seconds: float
    run_seconds: float

    def record_fields(self, build: BuildResult) -> dict[str, Any]:
        """The measurement's fields of a cost-cache record (with the build's seconds): the CPU time of
        both workers, every thread, is the kernel's cost on an idle machine."""
        return {"median": self.timing.median, "results": list(self.timing.results), "error": None,
                "check_error": self.check_error, "load_average": self.timing.load_average,
                "cpu_seconds": round(self.cpu_seconds + (build.build_cpu_seconds or 0.0), 4),
                "run_seconds": self.run_seconds, "build_seconds": build.build_seconds}

    @staticmethod
    def failure_fields(error: str, build: BuildResult) -> dict[str, Any]:
        """The measurement's fields of a cost-cache record of a kernel that failed to build, check or
        run (with the build's seconds, None when its worker died)."""
        return {"median": None, "results": [], "error": error, "build_seconds": build.build_seconds}


class Request:
    """Something a measuring worker is asked to do: :meth:`run` on the worker's state."""

    def run(self, state: WorkerState) -> Any:
        raise NotImplementedError


@dataclass(frozen=True)
class CompileRequest(Request):
    """Build ``tasks`` for ``target`` (its JSON dict) and compile them into one library in
    ``directory``; the answer is ``{key: BuildResult}``."""

    runner: Runner
    target: dict[str, Any]
    tasks: tuple[KernelTask, ...]
    directory: str

    def run(self, state: WorkerState) -> dict[str, BuildResult]:
        return state.compile(self)


@dataclass(frozen=True)
class MeasureRequest(Request):
    """Load the kernel of ``task`` that ``build`` compiled where ``runner`` runs code, check it against
    numpy (``check``) and time it; ``keep`` it loaded for :class:`RetimeRequest`. Answer: a
    :class:`RunResult`."""

    runner: Runner
    task: KernelTask
    build: BuildResult
    check: bool
    keep: bool

    def run(self, state: WorkerState) -> RunResult:
        return state.measure(self)


@dataclass(frozen=True)
class RetimeRequest(Request):
    """Time the kernel kept under ``key`` again (no build, no check). Answer: a :class:`Timing`."""

    key: str

    def run(self, state: WorkerState) -> Timing:
        return state.retime(self.key)


@dataclass(frozen=True)
class ForgetRequest(Request):
    """Drop the kernels and libraries loaded (their directory is about to go)."""

    def run(self, state: WorkerState) -> None:
        state.forget()


@dataclass(frozen=True)
class CloseRequest(Request):
    """Release the runners' sessions (a worker process ends without running ``atexit``)."""

    def run(self, state: WorkerState) -> None:
        state.close()


@dataclass(frozen=True)
class Reply:
    """A worker's answer to a request: its ``value``, or the ``error`` (one line) that stopped it.

    Example:
        >>> Reply(error="timed out").ok, Reply(value={}).ok
        (False, True)
    """

    value: Any = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


# --------------------------------------------------------------------------------------------------
# the worker's side
# --------------------------------------------------------------------------------------------------


class WorkerState:
    """What a worker keeps between calls: its BLAS limit, the numpy references of recent workloads,
    the libraries it loaded, and the kernels of the current :meth:`Measurer.measure` call, loaded
    and ready to be timed again."""

    def __init__(self) -> None:
        from .._tvm import one_blas_thread

        # numpy's references and checks run on a BLAS whose idle threads busy-wait for a while
        # after each call; beside TVM's threads on a small CPU they would inflate the kernel timed
        self.blas = contextlib.ExitStack()
        self.blas.enter_context(one_blas_thread())
        self.references: OrderedDict[str, Any] = OrderedDict()
        self.runners: dict[bytes, Runner] = {}
        self.libraries: dict[tuple[bytes, str], tuple[Any, Any]] = {}
        self.loaded: dict[str, tuple[Runner, Any, Any, Any]] = {}

    def reference(self, kernel) -> tuple[list, Any]:
        from ..kernels import reference_output

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

    def compile(self, request: CompileRequest) -> dict[str, BuildResult]:
        """Build the request's tasks and compile them into one library in its directory.

        Every result gets this call's seconds shared among its tasks. A library that fails to compile
        is compiled again kernel by kernel, so that one bad kernel fails alone.
        """
        from .._tvm import resolve_target
        from ..kernels import build_kernel

        started, cpu_started = time.perf_counter(), time.process_time()
        target = resolve_target(request.target)
        results: dict[str, BuildResult] = {}
        kernels = {}
        for task in request.tasks:
            try:
                kernels[task.key] = build_kernel(task.workload, task.candidate, target)
            except Exception as exc:
                results[task.key] = BuildResult(error=first_line(exc, with_type=True))
        groups = [kernels]
        while groups:
            group = groups.pop()
            try:
                results.update(self._library(request.runner, target, group, request.directory))
            except Exception as exc:
                if len(group) == 1:
                    results.update({key: BuildResult(error=first_line(exc, with_type=True)) for key in group})
                else:
                    groups.extend({key: kernel} for key, kernel in group.items())
        share = len(request.tasks) or 1
        seconds = round((time.perf_counter() - started) / share, 4)
        cpu_seconds = round((time.process_time() - cpu_started) / share, 4)
        return {key: replace(result, build_seconds=seconds, build_cpu_seconds=cpu_seconds)
                for key, result in results.items()}

    @staticmethod
    def _library(runner: Runner, target: Any, kernels: dict[str, Any],
                 directory: str) -> dict[str, BuildResult]:
        from .._tvm import import_tvm

        if not kernels:
            return {}
        tvm = import_tvm()
        functions, names = {}, {}
        for i, (key, kernel) in enumerate(kernels.items()):
            names[key] = f"kernel_{i}"
            functions[names[key]] = kernel.module[kernel.name].with_attr("global_symbol", names[key])
        executable = tvm.compile(tvm.IRModule(functions), target=target)
        path = Path(directory) / f"kernels_{os.getpid()}_{time.monotonic_ns()}.so"
        runner.export(executable, path)
        return {key: BuildResult(str(path), names[key], tuple(tuple(shape) for shape in kernel.arg_shapes),
                                 kernel.dtype)
                for key, kernel in kernels.items()}

    def measure(self, request: MeasureRequest) -> RunResult:
        """Load a compiled kernel where the request's runner runs code, check it once and time it."""
        from ..kernels import Kernel, check_kernel

        started, cpu_started = time.perf_counter(), time.process_time()
        build, task = request.build, request.task
        runner_key, runner = self.runner(request.runner)
        library = (runner_key, build.library)
        if library not in self.libraries:
            self.libraries[library] = runner.load(build.library, build.function)
        module, device = self.libraries[library]
        kernel = Kernel(task.workload, task.candidate, None, build.function, list(build.arg_shapes),
                        build.dtype)
        inputs, expected = self.reference(kernel)
        args = kernel.device_args(inputs, device)
        check_error = None
        if request.check:
            check_error = check_kernel(kernel, module, device=device, reference=(inputs, expected), args=args)
        timing = self._time(runner, module, device, kernel, args)
        if request.keep:
            self.loaded[task.key] = (runner, module, device, kernel)
        return RunResult(timing, check_error, cpu_seconds=round(time.process_time() - cpu_started, 4),
                         run_seconds=round(time.perf_counter() - started, 4))

    def retime(self, key: str) -> Timing:
        """Time a kernel kept by :meth:`measure` again (no build, no check)."""
        runner, module, device, kernel = self.loaded[key]
        args = kernel.device_args(self.reference(kernel)[0], device)
        return self._time(runner, module, device, kernel, args)

    @staticmethod
    def _time(runner: Runner, module: Any, device: Any, kernel: Any, args: list) -> Timing:
        import numpy as np

        load_average = os.getloadavg()[0]
        results = runner.time(module, device, kernel.name, args)
        return Timing(float(np.median(results)), tuple(results), round(load_average, 2))

    def forget(self) -> None:
        self.loaded.clear()
        self.libraries.clear()

    def close(self) -> None:
        """Release the runners' sessions (a worker process ends without running ``atexit``)."""
        self.forget()
        for runner in self.runners.values():
            runner.close()
        self.runners.clear()


_STATE: WorkerState | None = None


def _start_worker() -> None:
    """A measuring worker's initializer: BLAS on one thread, TVM imported, an empty state; Ctrl-C
    ignored (the caller stops the worker: see :func:`_block_interrupts`)."""
    global _STATE
    from .._tvm import import_tvm

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    import_tvm()
    _STATE = WorkerState()


def _serve(request: Request) -> Reply:
    """Run one request in a measuring worker."""
    assert _STATE is not None, "the measuring worker was not initialised"
    try:
        return Reply(request.run(_STATE))
    except Exception as exc:  # TVM's errors need not pickle: send their text
        return Reply(error=first_line(exc, with_type=True))


# --------------------------------------------------------------------------------------------------
# the caller's side of one worker
# --------------------------------------------------------------------------------------------------


class Lane:
    """One measuring worker and the one thread that talks to it.

    Linux ends a worker when the *thread* that started it exits (its parent-death signal), so every
    call, and every restart after a crash, goes through this lane's own long-lived thread.
    """

    def __init__(self, index: int) -> None:
        self.worker = IsolatedWorker(_start_worker, startup_timeout=STARTUP_TIMEOUT, capture_stderr=True)
        self._thread = ThreadPoolExecutor(1, thread_name_prefix=f"layoutopt-measuring-{index}",
                                          initializer=_block_interrupts)

    def start(self) -> None:
        """Start the worker now (it starts on the first call otherwise)."""
        self._thread.submit(self.worker.start).result()

    def submit(self, request: Request, timeout: float, doing: str) -> Future[Reply]:
        """Run ``request`` in the worker; ``doing`` says what it does in a timeout's message."""
        return self._thread.submit(self._call, request, timeout, doing)

    def _call(self, request: Request, timeout: float, doing: str) -> Reply:
        try:
            return self.worker.call(_serve, request, timeout=timeout)
        except WorkerDied as died:  # WorkerStartError is not a kernel's fault: it ends the run
            if died.timed_out:
                return Reply(error=f"timed out: {doing} took longer than {timeout:g} s; worker killed")
            return Reply(error=str(died))

    def interrupt(self) -> None:
        """Kill the worker now, from the caller's thread: the call it is in fails at once (Ctrl-C)."""
        self.worker.interrupt()

    def close(self) -> None:
        def stop() -> None:
            if self.worker.alive:  # one last call: the worker's runners hold sessions
                with contextlib.suppress(WorkerDied):
                    self.worker.call(_serve, CloseRequest(), timeout=30)
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

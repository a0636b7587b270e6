"""The exported TVM library beside ONNX Runtime and OpenVINO, timed side by side as users run them.

A claim "faster than ONNX Runtime / OpenVINO" holds only if the engines were timed in the same
interleaved rounds, on what a user deploys (notes/measuring.md). This module does that:

* each engine runs in a child process of its own (:class:`RuntimeServer`), loaded the way a user
  loads it: the exported library by ``tvm.runtime.load_module`` and ``relax.VirtualMachine``
  (``TVM_NUM_THREADS``), ONNX Runtime and OpenVINO on the original ``.onnx`` file. Apart, no engine's
  idle threads (OpenMP, TBB or a thread pool spinning) share a process with another's runs, and a crash
  costs one engine;
* :func:`time_side_by_side` warms each engine up, checks every engine's outputs against the reference's
  (ONNX Runtime's) on the same input, then times ``rounds`` rounds, each engine ``runs`` runs a round
  (their median is the round's sample), the order rotated from round to round;
* the :class:`SideBySide` it returns gives each engine's median over the rounds and, paired round by
  round, the median of the per-round ratios with its 95 % interval
  (:class:`layoutopt.tvm.evaluate.timing.Ratio`):
  the ratio is what survives a shared host's speed episodes; where median and ratio disagree, the rounds
  were noisy. It stamps the 1-minute load average before and after, the CPU time other processes took
  during the rounds, and the machine (:func:`layoutopt.machine.stamp`), and is not
  :attr:`~SideBySide.publishable` when the load was above the number of cores before the rounds or
  others took more than :data:`MAX_OTHERS_CORES` during them.

Usage (the ``real-models`` extra: onnxruntime and openvino)::

    python -m benchmarks.runtimes det.onnx --library handed_back=det.so --library best_fixed=det.b.so

Example::

    with start_engines("det.onnx", inputs, {"handed_back": "det.so"}, threads=2) as (engines, failed):
        result = time_side_by_side(engines)
    result.latency("openvino").median, result.speedup("handed_back", over="onnxruntime").median
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from benchmarks.cpuid_mask import PRELUDE
from layoutopt.errors import ProblemError
from layoutopt.machine import stamp, usable_cores
from layoutopt.tvm.evaluate.check import relative_error
from layoutopt.tvm.evaluate.timing import Latency, Ratio, rotated

#: the engine the others' outputs are checked against
ONNXRUNTIME = "onnxruntime"
OPENVINO = "openvino"
#: what each engine is: ``tvm`` for an exported library, else the runtime on the ``.onnx`` file
KINDS = ("tvm", ONNXRUNTIME, OPENVINO)
#: measuring.md's method: 3 warm-up runs, then 15 rounds of 7 runs (a round's sample is their median)
WARMUP, ROUNDS, RUNS = 3, 15, 7
#: where the children find this package when it is not installed
_ROOT = Path(__file__).resolve().parent.parent
#: cores' worth of CPU time other processes (and the hypervisor's steal) may take during the rounds
#: before the figures are not to be published. A quiet host reads 0.01-0.05 (kernel threads).
MAX_OTHERS_CORES = 0.25
#: rounds shorter than this leave the others' CPU unknown: ``/proc`` counts in ticks of 10 ms
MIN_ACCOUNTED_SECONDS = 1.0
#: the longest wait, after an engine's turn, for its process to stop burning CPU (:func:`wait_until_idle`)
IDLE_WAIT_SECONDS = 1.0


class Engine(Protocol):
    """What :func:`time_side_by_side` times: a model ready to run on one fixed input. An engine that
    runs in a process of its own says which in a ``pid`` attribute, so that its CPU time counts as
    the rounds' own and not as other work on the host."""

    def time(self, runs: int) -> list[float]:
        """Seconds of each of ``runs`` runs, back to back."""
        ...

    def outputs(self) -> list[np.ndarray]:
        """The outputs of a run, in the model's output order."""
        ...


@dataclass(frozen=True)
class SideBySide:
    """Engines timed in the same interleaved rounds.

    ``seconds[name][i]`` is engine ``name``'s median of its ``runs`` runs in round ``i``; ``errors`` each
    engine's max relative error against ``reference``'s outputs on the same input; the load averages
    are the 1-minute ones before the warm-up and after the last round; ``max_load`` is the load above
    which the figures are not to be published (the number of cores: 2 on 2 cores). ``others_cores`` is
    the CPU time the rest of the host took during the rounds (steal included), in cores: the machine's
    busy time less the engines' and this process's, over the rounds' wall time (None where
    ``/proc`` is missing). ``idle_cores[name]`` is what engine ``name``'s process burnt while the
    others ran (a runtime's threads spinning after its runs), in cores: work that slows the engine
    being timed, which neither figure above counts as other work.

    The load after the rounds counts the engines' own threads: after 40 s of rounds on 2 threads the
    1-minute average reads about 1.2 more than the host's other work. So the load after decides only
    where ``others_cores`` is unknown.

    Example:
        >>> result = SideBySide({"so": [1.0, 1.1, 0.9], "onnxruntime": [1.2, 1.3, 1.2]}, runs=7, warmup=3,
        ...                     load_before=0.4, load_after=2.5, max_load=2.0, errors={"so": 1e-6},
        ...                     reference="onnxruntime", stamp={}, versions={}, others_cores=0.4)
        >>> result.latency("so").median, round(result.speedup("so", over="onnxruntime").median, 3)
        (1.0, 1.2)
        >>> result.publishable, result.refusal
        (False, 'other processes took 0.4 cores during the rounds, above 0.25: not for publishing')
    """

    seconds: dict[str, list[float]]
    runs: int
    warmup: int
    load_before: float
    load_after: float
    max_load: float
    errors: dict[str, float]
    reference: str | None
    stamp: dict[str, str]
    versions: dict[str, str]
    others_cores: float | None = None
    idle_cores: dict[str, float] = field(default_factory=dict)

    def latency(self, name: str) -> Latency:
        """Engine ``name``'s median over the rounds (and the spread of its round samples)."""
        return Latency.of(self._seconds(name))

    def speedup(self, name: str, over: str) -> Ratio:
        """How many times faster ``name`` ran than ``over``: the median of the per-round ratios
        ``over / name`` with its 95 % interval (above 1: ``name`` is faster)."""
        return Ratio.of(self._seconds(over), self._seconds(name))

    def _seconds(self, name: str) -> list[float]:
        if name not in self.seconds:
            raise ValueError(f"no engine {name!r} was timed; timed: {', '.join(self.seconds)}")
        return self.seconds[name]

    @property
    def publishable(self) -> bool:
        """Whether the host was quiet enough: the 1-minute load at most ``max_load`` before the rounds,
        and other processes within :data:`MAX_OTHERS_CORES` during them (:attr:`refusal` says why not)."""
        return self.refusal is None

    @property
    def refusal(self) -> str | None:
        """Why these figures are not to be published (None when they may be)."""
        loads = [(self.load_before, "before")]
        if self.others_cores is None:
            loads.append((self.load_after, "after the rounds"))
        busy = [f"{load:g} {when}" for load, when in loads if load > self.max_load]
        reasons = [f"load average {' and '.join(busy)}, above {self.max_load:g}"] if busy else []
        if self.others_cores is not None and self.others_cores > MAX_OTHERS_CORES:
            reasons.append(f"other processes took {self.others_cores:g} cores during the rounds, "
                           f"above {MAX_OTHERS_CORES:g}")
        return f"{'; '.join(reasons)}: not for publishing" if reasons else None

    @property
    def rounds(self) -> int:
        return min((len(values) for values in self.seconds.values()), default=0)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready record (:meth:`from_dict` reads it back)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, record: Mapping[str, Any]) -> SideBySide:
        return cls(**record)


def time_side_by_side(engines: Mapping[str, Engine], rounds: int = ROUNDS, runs: int = RUNS,
                      warmup: int = WARMUP, reference: str | None = ONNXRUNTIME,
                      max_load: float | None = None, settle: float = 0.0,
                      loadavg: Callable[[], tuple[float, float, float]] = os.getloadavg,
                      sleep: Callable[[float], None] = time.sleep,
                      versions: Mapping[str, str] | None = None,
                      cpu_clock: Callable[[Sequence[int]], tuple[float, float, float] | None] | None = None,
                      ) -> SideBySide:
    """Time ``engines`` in ``rounds`` interleaved rounds of ``runs`` runs each (the round's sample is
    their median), the order rotated each round (:func:`layoutopt.tvm.evaluate.timing.rotated`), after
    ``warmup`` runs of each; every engine's outputs are checked against ``reference``'s first.

    The load average is stamped before the warm-up and after the last round. Before, it waits up to
    ``settle`` seconds for the load to fall to ``max_load`` (default: the usable cores), so that the
    work that just ended here (a tuning's compile workers) has left the average; a load that stays
    above marks the result as not :attr:`~SideBySide.publishable`. During the rounds, ``cpu_clock``
    (default :func:`cpu_seconds`, on ``/proc``) gives the CPU time other processes took. After each
    turn of an engine in a process of its own, the next turn waits for that process to go idle (TVM's
    thread pool spins after its runs), up to :data:`IDLE_WAIT_SECONDS`.

    Raises:
        ValueError: no engine, or a count below 1.
        ProblemError: an engine's outputs differ in number or shape from the reference's.

    Example::

        result = time_side_by_side({"handed_back": so, "onnxruntime": ort, "openvino": ov})
    """
    if not engines:
        raise ValueError("time_side_by_side needs at least one engine")
    for count, what in ((rounds, "rounds"), (runs, "runs")):
        if count < 1:
            raise ValueError(f"time_side_by_side: {what} must be at least 1, not {count}")
    max_load = float(usable_cores() if max_load is None else max_load)
    load_before = _settled_load(max_load, settle, loadavg, sleep)
    for engine in engines.values():
        if warmup > 0:
            engine.time(warmup)
    errors: dict[str, float] = {}
    if reference is not None and reference in engines:
        expected = engines[reference].outputs()
        for name, engine in engines.items():
            if name != reference:
                try:
                    errors[name] = relative_error(engine.outputs(), expected)
                except ProblemError as exc:
                    raise ProblemError(f"{name}'s outputs do not compare with {reference}'s: {exc}") from None
    seconds: dict[str, list[float]] = {name: [] for name in engines}
    pids = {name: pid for name, pid in ((n, getattr(e, "pid", None)) for n, e in engines.items()) if pid}
    ours = [os.getpid(), *pids.values()]
    clock = cpu_clock or cpu_seconds
    # each engine's CPU time and the wall time over the other engines' turns: what it burns there
    during_others = {name: [0.0, 0.0] for name in pids}
    started = clock(ours)
    for round_ in range(rounds):
        for name in rotated(list(engines), round_):
            before = {other: cpu_seconds([pid]) for other, pid in pids.items() if other != name}
            seconds[name].append(float(np.median(engines[name].time(runs))))
            for other, then in before.items():
                now = cpu_seconds([pids[other]])
                if then is not None and now is not None:
                    during_others[other][0] += now[0] - then[0]
                    during_others[other][1] += now[2] - then[2]
            if name in pids:
                wait_until_idle(pids[name], sleep)
    ended = clock(ours)
    others = None  # unknown without /proc, or over rounds too short for its 10 ms ticks to tell
    if started is not None and ended is not None and ended[0] - started[0] >= MIN_ACCOUNTED_SECONDS:
        wall, busy, own = (e - s for s, e in zip(started, ended, strict=True))
        others = round(max(0.0, busy - own) / wall, 3)
    idle = {name: round(cpu / wall, 3) for name, (wall, cpu) in during_others.items()
            if wall >= MIN_ACCOUNTED_SECONDS}
    load_after = round(float(loadavg()[0]), 2)
    return SideBySide(seconds, runs, warmup, round(load_before, 2), load_after, max_load, errors,
                      reference if reference in engines else None,
                      stamp([ONNXRUNTIME, OPENVINO, "onnxslim"]), dict(versions or {}), others, idle)


def wait_until_idle(pid: int, sleep: Callable[[float], None] = time.sleep, poll: float = 0.05,
                    quiet_polls: int = 2) -> None:
    """Wait until process ``pid`` burns no CPU over ``quiet_polls`` polls in a row, at most
    :data:`IDLE_WAIT_SECONDS`.

    TVM's thread pool spins after a run (``TVM_THREAD_POOL_SPIN_COUNT``): about one core for 250 ms
    after each turn (sampled every 50 ms on DBNet 320's build: 0.96, 0.78, 0.51, 0.99, 0.99, 0.2, then
    0), 0.15-0.28 cores on average over the other engines' turns, which slowed whichever engine came
    next (10 ms runs: its whole turn). Waiting here keeps each engine's turn to itself, as a deployment
    has it, without changing how any engine is configured. ``/proc`` counts in 10 ms ticks and the
    spinning comes in bursts, so one quiet poll is not proof enough."""
    last = cpu_seconds([pid])
    quiet = 0
    for _ in range(round(IDLE_WAIT_SECONDS / poll) if last is not None else 0):
        sleep(poll)
        now = cpu_seconds([pid])
        if now is None:
            return
        quiet = quiet + 1 if now[2] == last[2] else 0
        if quiet >= quiet_polls:
            return
        last = now


def cpu_seconds(pids: Sequence[int]) -> tuple[float, float, float] | None:
    """``(now, the machine's busy CPU seconds so far, those of processes pids)``, from ``/proc``
    (``now`` on the monotonic clock, in seconds); None where ``/proc`` is missing (not Linux).

    The machine's count is every core's time not idle and not waiting on I/O, the hypervisor's steal
    included (a neighbour on a shared host). A process's count covers all its threads; one that has
    exited counts 0.

    Example:
        >>> import os
        >>> now, machine, ours = cpu_seconds([os.getpid()])
        >>> machine >= ours > 0
        True
    """
    now = time.monotonic()
    try:
        with open("/proc/stat", encoding="ascii") as handle:
            fields = [int(v) for v in handle.readline().split()[1:]]
    except OSError:
        return None
    tick = os.sysconf("SC_CLK_TCK")
    user, nice, system, _idle, _iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    busy = (user + nice + system + irq + softirq + steal) / tick
    own = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
                after_name = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        own += int(after_name[11]) + int(after_name[12])  # utime, stime (fields 14 and 15)
    return now, busy, own / tick


def _settled_load(max_load: float, settle: float, loadavg: Callable[[], tuple[float, float, float]],
                  sleep: Callable[[float], None], poll: float = 5.0) -> float:
    """The 1-minute load average, after waiting up to ``settle`` seconds for it to fall to ``max_load``
    (the kernel updates it every 5 seconds)."""
    load = float(loadavg()[0])
    waited = 0.0
    while load > max_load and waited < settle:
        step = min(poll, settle - waited)
        sleep(step)
        waited += step
        load = float(loadavg()[0])
    return load


# ---------------------------------------------------------------------------------------------
# the engines, each in a child process


class EngineError(RuntimeError):
    """An engine could not load its model or run it (the child's own message, in one line)."""


class RuntimeServer:
    """One engine in a child process of its own: loads the model (``kind`` ``tvm``: an exported
    library; ``onnxruntime`` or ``openvino``: the ``.onnx`` file), runs it once on the input and keeps
    the outputs, then times runs on request.

    Example::

        with RuntimeServer("openvino", "det.onnx", "inputs.npz", threads=2) as engine:
            engine.time(7), engine.outputs(), engine.version
    """

    def __init__(self, kind: str, model: str | os.PathLike, inputs: str | os.PathLike, threads: int,
                 name: str | None = None) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown engine kind {kind!r}; known: {', '.join(KINDS)}")
        self.name = name or kind
        self._outputs = Path(inputs).with_name(f"{self.name}.outputs.npz")
        spec = {"model": str(model), "inputs": str(inputs), "outputs": str(self._outputs), "threads": threads}
        environment = {**os.environ, "TVM_NUM_THREADS": str(threads), "OMP_WAIT_POLICY": "PASSIVE",
                       "PYTHONPATH": os.pathsep.join([str(_ROOT), os.environ.get("PYTHONPATH", "")])}
        self._process = subprocess.Popen([sys.executable, "-c", _CHILD, kind, json.dumps(spec)],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                         env=environment)
        self.pid = self._process.pid
        try:
            self.version = str(self._answer(None)["version"])
        except EngineError:
            self.close()
            raise

    def _answer(self, request: dict | None) -> dict:
        assert self._process.stdin is not None and self._process.stdout is not None
        try:
            if request is not None:
                self._process.stdin.write(json.dumps(request) + "\n")
                self._process.stdin.flush()
            line = self._process.stdout.readline()
        except BrokenPipeError:
            line = ""
        if not line:
            raise EngineError(f"{self.name}: its process exited (code {self._process.wait()}); "
                              "its stderr above says why")
        answer = json.loads(line)
        if "error" in answer:
            raise EngineError(f"{self.name}: {answer['error']}")
        return answer

    def time(self, runs: int) -> list[float]:
        return [float(s) for s in self._answer({"time": runs})["seconds"]]

    def outputs(self) -> list[np.ndarray]:
        with np.load(self._outputs) as saved:
            return [saved[f"arr_{i}"] for i in range(len(saved.files))]

    def profile(self, runs: int, prefix: str | os.PathLike) -> str:
        """The profile file of ``runs`` profiled runs: ONNX Runtime's own
        (:func:`benchmarks.ort_layers.node_times` reads it), or OpenVINO's nodes with every run's time
        (:func:`benchmarks.ort_layers.openvino_node_times`)."""
        return str(self._answer({"profile": runs, "prefix": str(prefix)})["file"])

    def close(self) -> None:
        if self._process.stdin is not None and not self._process.stdin.closed:
            with contextlib.suppress(BrokenPipeError):
                self._process.stdin.close()
        try:
            self._process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()

    def __enter__(self) -> RuntimeServer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@contextlib.contextmanager
def start_engines(onnx_model: str | os.PathLike, inputs: Sequence[np.ndarray],
                  libraries: Mapping[str, str | os.PathLike], threads: int,
                  runtimes: Sequence[str] = (ONNXRUNTIME, OPENVINO),
                  ) -> Iterator[tuple[dict[str, RuntimeServer], dict[str, str]]]:
    """Start the exported ``libraries`` (name -> ``.so``) and the ``runtimes`` on ``onnx_model``, each
    on ``inputs`` with ``threads`` threads, in child processes; yields the engines that started and,
    for those that did not, why (name -> one line). Every child ends on leaving.

    Example::

        with start_engines("m.onnx", [x], {"handed_back": "m.so"}, threads=2) as (engines, failed):
            result = time_side_by_side(engines)
    """
    started: dict[str, RuntimeServer] = {}
    failed: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="layoutopt-runtimes-") as directory:
        saved = Path(directory) / "inputs.npz"
        np.savez(saved, *[np.ascontiguousarray(x) for x in inputs])
        wanted = [(name, "tvm", Path(path)) for name, path in libraries.items()]
        wanted += [(runtime, runtime, Path(onnx_model)) for runtime in runtimes]
        try:
            for name, kind, model in wanted:
                try:
                    started[name] = RuntimeServer(kind, model, saved, threads, name=name)
                except EngineError as exc:
                    failed[name] = str(exc)
            yield started, failed
        finally:
            for engine in started.values():
                engine.close()


# ---------------------------------------------------------------------------------------------
# the child's side: only the runtime it runs, numpy and this module's top (no TVM in the others)

#: the child's program: first hide AVX-512 from CPUID when asked (before numpy or a runtime reads it)
_CHILD = PRELUDE + """
import json
from benchmarks.runtimes import serve
serve(sys.argv[1], json.loads(sys.argv[2]))
"""


@dataclass
class _Loaded:
    run: Callable[[], Any]  # one inference, as a user calls it
    outputs: Callable[[Any], list[np.ndarray]]  # a run's result as numpy arrays
    version: str
    profile: Callable[[int, str], str] | None = None


def onnxruntime_options(threads: int, profile_prefix: str | None = None):
    """ONNX Runtime's session options for every comparison here: ``threads`` intra-op threads, one
    inter-op, all graph optimisations (its NCHWc transformer among them), idle threads not spinning
    (they would spin through the other engines' turns).

    Example::

        session = ort.InferenceSession("m.onnx", onnxruntime_options(2), providers=["CPUExecutionProvider"])
    """
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if profile_prefix:
        options.enable_profiling = True
        options.profile_file_prefix = profile_prefix
    return options


def _load_onnxruntime(spec: Mapping[str, Any], inputs: list[np.ndarray]) -> _Loaded:
    import onnxruntime as ort

    def session(profile_prefix: str | None = None):
        return ort.InferenceSession(spec["model"], onnxruntime_options(spec["threads"], profile_prefix),
                                    providers=["CPUExecutionProvider"])

    main = session()
    feeds = {i.name: x for i, x in zip(main.get_inputs(), inputs, strict=True)}

    def profile(runs: int, prefix: str) -> str:
        profiling = session(prefix)
        for _ in range(runs):
            profiling.run(None, feeds)
        return profiling.end_profiling()

    return _Loaded(lambda: main.run(None, feeds), list, ort.__version__, profile)


def _load_openvino(spec: Mapping[str, Any], inputs: list[np.ndarray]) -> _Loaded:
    import openvino as ov

    core = ov.Core()
    model = core.read_model(spec["model"])
    model.reshape({port.get_any_name(): list(x.shape) for port, x in zip(model.inputs, inputs, strict=True)})
    # f32: without the hint it may run bf16 on CPUs that have it, and the numbers no longer match
    config = {"INFERENCE_NUM_THREADS": spec["threads"], "PERFORMANCE_HINT": "LATENCY",
              "INFERENCE_PRECISION_HINT": "f32"}
    compiled = core.compile_model(model, "CPU", config)
    request = compiled.create_infer_request()

    def outputs(result) -> list[np.ndarray]:
        return [np.array(result[port]) for port in compiled.outputs]

    @functools.cache
    def profiling():  # compiled once: a compiled model's first runs repack its weights
        return core.compile_model(model, "CPU", {**config, "PERF_COUNT": True})

    def profile(runs: int, prefix: str) -> str:
        profiled = profiling().create_infer_request()
        profiled.infer(inputs, share_inputs=True)  # warm-up, not kept
        nodes: dict[str, dict[str, Any]] = {}
        for _ in range(runs):
            profiled.infer(inputs, share_inputs=True)
            for info in profiled.profiling_info:
                if info.status == ov.ProfilingInfo.Status.EXECUTED:
                    nodes.setdefault(info.node_name, {"node": info.node_name, "type": info.node_type,
                                                      "exec_type": info.exec_type, "runs": []}
                                     )["runs"].append(info.real_time.total_seconds())
        # the shapes of each node as it runs (its fused nodes keep no ONNX name: a conv with its batch
        # norm folded in is named after the multiply), logical (NCHW, grouped weights 5-D)
        for op in profiling().get_runtime_model().get_ordered_ops():
            if op.get_friendly_name() in nodes:
                nodes[op.get_friendly_name()].update(
                    inputs=[_static_shape(port) for port in op.inputs()],
                    outputs=[_static_shape(port) for port in op.outputs()])
        path = f"{prefix}_openvino_profile.json"
        Path(path).write_text(json.dumps(list(nodes.values())))
        return path

    # inputs shared, not copied: as ONNX Runtime and TVM take them
    return _Loaded(lambda: request.infer(inputs, share_inputs=True), outputs, ov.__version__.split("-")[0],
                   profile)


def _static_shape(port) -> list[int]:
    shape = port.get_partial_shape()
    return [int(d) for d in shape.to_shape()] if shape.is_static else []


def _load_tvm(spec: Mapping[str, Any], inputs: list[np.ndarray]) -> _Loaded:
    # a deployed process has TVM's runtime only: keep tvm_ffi from importing torch when it is installed
    sys.modules.setdefault("torch", None)  # type: ignore[arg-type]
    import tvm
    from tvm import relax

    library = tvm.runtime.load_module(spec["model"])
    main = relax.VirtualMachine(library, tvm.cpu())["main"]
    args = [tvm.runtime.tensor(x) for x in inputs]

    def outputs(result) -> list[np.ndarray]:
        if hasattr(result, "numpy"):
            return [result.numpy()]
        return [array for item in result for array in outputs(item)]

    return _Loaded(lambda: main(*args), outputs, tvm.__version__)


_LOADERS = {"tvm": _load_tvm, ONNXRUNTIME: _load_onnxruntime, OPENVINO: _load_openvino}


def serve(kind: str, spec: Mapping[str, Any]) -> None:
    """The child's loop (see :class:`RuntimeServer`): load, run once and save the outputs, answer
    ``{"version"}``; then for each request line ``{"time": n}`` answer ``{"seconds": [...]}`` (or
    ``{"profile": n, "prefix": p}``: ``{"file"}``), until stdin closes. Failures answer ``{"error"}``."""
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # whatever a runtime prints goes to stderr, never into the answers

    def answer(record: dict) -> None:
        protocol.write(json.dumps(record) + "\n")

    try:
        with np.load(spec["inputs"]) as saved:
            inputs = [saved[f"arr_{i}"] for i in range(len(saved.files))]
        loaded = _LOADERS[kind](spec, inputs)
        np.savez(spec["outputs"], *loaded.outputs(loaded.run()))
    except Exception as exc:  # the child's answer names it; the parent raises EngineError
        answer({"error": f"loading {spec['model']} failed: {type(exc).__name__}: {_first_line(exc)}"})
        return
    answer({"version": loaded.version})
    for line in sys.stdin:
        request = json.loads(line)
        try:
            if "profile" in request:
                if loaded.profile is None:
                    raise ValueError(f"{kind} does not profile")
                answer({"file": loaded.profile(int(request["profile"]), request["prefix"])})
                continue
            seconds = []
            for _ in range(int(request["time"])):
                start = time.perf_counter()
                loaded.run()
                seconds.append(time.perf_counter() - start)
            answer({"seconds": seconds})
        except Exception as exc:
            answer({"error": f"{type(exc).__name__}: {_first_line(exc)}"})


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0] if lines else "no message"


# ---------------------------------------------------------------------------------------------
# command line: exported libraries timed again, with no tuning


def markdown(result: SideBySide, subject: str) -> list[str]:
    """A table of every engine's median (ms, with the spread of its round samples), ``subject``'s
    speed-up over it (median of the per-round ratios, 95 % interval) and its error against the
    reference; then the load, the machine and whether the figures may be published."""
    lines = [f"| engine | version | ms (25th-75th) | {subject} speed-up over it [95 %] "
             f"| max rel. err vs {result.reference or '-'} |", "|---|---|---|---|---|"]
    for name in result.seconds:
        latency = result.latency(name)
        ratio = result.speedup(subject, over=name)
        error = result.errors.get(name)
        lines.append(f"| {name} | {result.versions.get(name, '-')} | {latency.median * 1e3:.3f} "
                     f"({latency.low * 1e3:.3f}-{latency.high * 1e3:.3f}) "
                     f"| {ratio.median:.3f}x [{ratio.low:.3f}-{ratio.high:.3f}] "
                     f"| {'-' if error is None else f'{error:.1e}'} |")
    lines += ["", f"{result.rounds} interleaved rounds of {result.runs} runs (after {result.warmup} warm-up "
              f"runs); load average {result.load_before:g} before, {result.load_after:g} after; "
              f"{others_text(result)}; {result.stamp.get('machine', '?')}; {result.stamp.get('date', '?')}.",
              f"**{result.refusal}.**" if result.refusal else "The host was quiet (load at most "
              f"{result.max_load:g} before, other processes within {MAX_OTHERS_CORES:g} cores): publishable."]
    return lines


def others_text(result: SideBySide) -> str:
    """The CPU other processes took during the rounds, as the tables print it."""
    if result.others_cores is None:
        return "other processes' CPU not measured"
    idle = ", ".join(f"{name} {cores:.2f}" for name, cores in result.idle_cores.items())
    return f"other processes {result.others_cores:.2f} cores" + (
        f"; the engines between their turns (cores): {idle}" if idle else "")


def _named_path(text: str) -> tuple[str, Path]:
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"{text!r}: give NAME=PATH, e.g. handed_back=model.so")
    return name, Path(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("onnx", type=Path, help="the original model, run by ONNX Runtime and OpenVINO")
    parser.add_argument("--library", type=_named_path, action="append", default=[], metavar="NAME=PATH",
                        help="an exported TVM library (repeatable; the first is the one compared)")
    parser.add_argument("--input-shape", default=None,
                        help="comma-separated shape of the (single) input; default: the model's, if static")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--runs", type=int, default=RUNS)
    parser.add_argument("--settle", type=float, default=60.0,
                        help="seconds to wait for the load average to fall to the core count first")
    parser.add_argument("--no-openvino", action="store_true")
    args = parser.parse_args(argv)
    if not args.onnx.is_file():
        parser.error(f"no model file {str(args.onnx)!r}")
    for name, path in args.library:
        if not path.is_file():
            parser.error(f"--library {name}: no file {str(path)!r}")
    names, static = _inputs(args.onnx)
    if len(names) != 1:
        parser.error(f"{args.onnx} has {len(names)} inputs ({', '.join(names)}); this command feeds one")
    shape = [int(d) for d in args.input_shape.split(",")] if args.input_shape else static
    if shape is None:
        parser.error(f"{args.onnx}: input {names[0]!r} has no static shape; give --input-shape")
    inputs = [np.random.default_rng(1).standard_normal(shape).astype("float32")]
    runtimes = (ONNXRUNTIME,) if args.no_openvino else (ONNXRUNTIME, OPENVINO)
    with start_engines(args.onnx, inputs, dict(args.library), args.threads, runtimes) as (engines, failed):
        for name, reason in failed.items():
            print(f"{name} did not start: {reason}", file=sys.stderr)
        if not engines:
            return 1
        versions = {name: engine.version for name, engine in engines.items()}
        result = time_side_by_side(engines, args.rounds, args.runs, settle=args.settle, versions=versions)
    subject = args.library[0][0] if args.library else next(iter(result.seconds))
    print("\n".join(markdown(result, subject)))
    return 0


def _inputs(path: Path) -> tuple[list[str], list[int] | None]:
    """The model's input names, and the first one's shape when every dimension is a number."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    initializers = {i.name for i in graph.initializer}
    inputs = [i for i in graph.input if i.name not in initializers]
    if not inputs:
        return [], None
    dims = [d.dim_value if d.HasField("dim_value") else None for d in inputs[0].type.tensor_type.shape.dim]
    return [i.name for i in inputs], None if None in dims else dims


if __name__ == "__main__":
    sys.exit(main())

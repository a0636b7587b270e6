"""Where compiled code runs: this machine's CPU, or devices behind a TVM RPC tracker.

A :class:`Runner` is the one answer to "where does it run" for everything layoutopt executes:

* kernels, measured by :class:`~layoutopt.tvm.measure.measure.Measurer`: compiled here (in a pool, on every
  core), exported with :meth:`Runner.export`, then loaded with :meth:`Runner.load` and timed with
  :meth:`Runner.time` inside a measuring worker process, one worker per device
  (:meth:`Runner.devices`);
* whole builds, checked, timed and profiled by :func:`~layoutopt.tvm.tune_and_build` (through
  :mod:`layoutopt.tvm.evaluate.timing` and :mod:`layoutopt.tvm.evaluate.profile`): :meth:`Runner.load_build`
  makes a
  built model runnable where the runner runs code.

:class:`LocalRunner` runs on this machine's CPU; :class:`RPCRunner` on a device registered with
TVM's RPC tracker (``python -m tvm.exec.rpc_tracker`` /
``python -m tvm.exec.rpc_server --tracker HOST:PORT --key KEY``), for which everything is compiled
here for the device's target, exported as a shared library (with a cross compiler if given),
uploaded and run there.

Example:
    A Raspberry Pi 4 registered as ``rasp4b`` with the tracker at ``HOST:PORT``: with
    ``runner = RPCRunner("HOST:PORT", "rasp4b", cc="aarch64-linux-gnu-g++")``,
    ``tune_and_build(mod, target=device, runner=runner)`` measures, checks and times on the board.
    Where no tracker answers, the runner is refused when it is made:

    >>> from layoutopt.tvm import RPCRunner, resolve_target
    >>> device = {"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "cortex-a72"}
    >>> resolve_target(device).attrs["mtriple"]       # compiled here, for the board
    'aarch64-linux-gnu'
    >>> RPCRunner("127.0.0.1:1", "rasp4b", cc="aarch64-linux-gnu-g++")
    Traceback (most recent call last):
    ...
    layoutopt.errors.ProblemError: RPC tracker 127.0.0.1:1: cannot reach it (...); is `python -m
    tvm.exec.rpc_tracker` running there?
"""

from __future__ import annotations

import functools
import gc
import math
import os
import socket
import statistics
import struct
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import ProblemError
from .._tvm import first_line, import_tvm
from .cache import TIMINGS

__all__ = ["TRACKER_TIMEOUT", "LocalRunner", "RPCRunner", "Runner", "parse_rpc_address"]

#: seconds an RPC tracker has to accept a connection and answer a summary request
TRACKER_TIMEOUT = 5.0


@dataclass(kw_only=True)
class Runner:
    """Where compiled code runs, and how a kernel is timed there (TVM's ``time_evaluator``).

    Kernels are timed **cold** by default (``cold=True``): before each run, every argument but the
    first (the input, which the layer before has just written) is flushed from the CPU caches, as
    the network leaves them: each layer's weights were last read an inference ago, and its output
    buffer last touched as long ago. A kernel timed warm and alone is one the network never runs:
    a Winograd conv streaming megabytes of transformed weights runs about twice as fast warm as cold
    or inside ResNet-50 (``benchmarks/results/e2e-notes.md``), and warm timings lead the solver to it
    over one that is faster there. Each repeat of a cold timing is the median of ``cold_runs`` single
    runs.

    Handed over (``handoff=True``, cold only, this machine only): cold, and the input is also written
    just before each run by the device's thread pool, each thread a contiguous part of it, as the layer
    before leaves it in a network. Each thread then reads what the other has just written wherever its
    part of the work differs from the writer's, which a kernel timed cold never does: on hosts where
    reading lines another core has just written costs twice as much as reading one's own, in-network
    kernels run up to 1.5x their cold isolated times (``notes/cross_core.md``).

    Warm (``cold=False``): ``number`` runs make one repeat; ``number=0`` lets TVM grow it until a
    repeat lasts at least ``min_repeat_ms`` (each repeat then averages many runs, which tames noise
    on shared machines).

    A kernel's reported cost is the median of ``repeat`` repeats. Runners are small picklable
    settings objects: they are sent to the measuring workers, where :meth:`load` is called.

    A custom runner overrides :meth:`load` and :meth:`load_build` (and :meth:`close` if it holds
    resources, :meth:`export` if its libraries need another linker).
    """

    number: int = 0
    repeat: int = 3
    min_repeat_ms: float = 20.0
    cold: bool = True
    cold_runs: int = 10
    handoff: bool = False
    _builds: dict[int, tuple[Any, Any, Any]] = field(default_factory=dict, init=False, repr=False,
                                                     compare=False)

    #: whether the calls of a running build can be timed one by one (the VM's instrument hook calls
    #: back into Python, which only works in this process)
    profiles_builds = False

    def __post_init__(self) -> None:
        if self.number < 0 or self.repeat < 1 or self.min_repeat_ms < 0 or self.cold_runs < 1:
            raise ProblemError(
                f"{type(self).__name__}: need number >= 0, repeat >= 1, min_repeat_ms >= 0, "
                f"cold_runs >= 1, got number={self.number}, repeat={self.repeat}, "
                f"min_repeat_ms={self.min_repeat_ms}, cold_runs={self.cold_runs}"
            )
        for flag in ("cold", "handoff"):
            if not isinstance(getattr(self, flag), bool):
                raise ProblemError(f"{type(self).__name__}: {flag} must be True or False, got "
                                   f"{getattr(self, flag)!r}")
        if self.handoff and not self.cold:
            raise ProblemError(f"{type(self).__name__}: handoff timing is cold timing with the input "
                               "written just before each run; it needs cold=True")

    @property
    def timing(self) -> str:
        """``"cold"``, ``"handoff"`` or ``"warm"``: how :meth:`time` treats the caches (cached costs of
        each are kept apart)."""
        return ("handoff" if self.handoff else "cold") if self.cold else "warm"

    @staticmethod
    def timing_settings(timing: str) -> dict[str, bool]:
        """The ``cold`` and ``handoff`` settings of a runner whose :attr:`timing` is ``timing``.

        Example:
            >>> LocalRunner(**Runner.timing_settings("handoff")).timing
            'handoff'
        """
        if timing not in TIMINGS:
            raise ProblemError(f"unknown timing {timing!r}; known: {', '.join(TIMINGS)}")
        return {"cold": timing != "warm", "handoff": timing == "handoff"}

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_builds": {}}  # loaded builds do not cross processes

    def export(self, executable: Any, path: str | os.PathLike[str]) -> None:
        """Write ``executable`` (a compiled kernel library or model) as a shared library that
        :meth:`load` can run."""
        executable.export_library(str(path))

    def load(self, path: str, name: str) -> tuple[Any, Any]:
        """Make the library :meth:`export` wrote at ``path`` runnable; ``(runtime module, device)``."""
        raise NotImplementedError

    def load_build(self, executable: Any) -> tuple[Any, Any]:
        """Make a built model (``tvm.runtime.Executable``) runnable: ``(module, device)`` for
        ``tvm.relax.VirtualMachine``. By default it is exported to a temporary file and loaded, once
        per executable until :meth:`close` (checking, timing and profiling a build load it again)."""
        loaded = self._builds.get(id(executable))
        if loaded is None:
            with tempfile.TemporaryDirectory(prefix="layoutopt-build-") as directory:
                path = Path(directory) / f"build_{os.getpid()}_{time.monotonic_ns()}.so"
                self.export(executable, path)
                # the executable is kept with it, so that its id cannot name another one meanwhile
                loaded = self._builds[id(executable)] = (executable, *self.load(str(path), "build"))
        return loaded[1], loaded[2]

    def time(self, module: Any, device: Any, name: str, args: Sequence[Any]) -> list[float]:
        """Seconds per run of ``module[name](*args)``, one value per repeat."""
        if self.cold:
            # TVM runs the flush before each repeat, outside the timed region: one run per repeat
            preproc = _handoff_preproc(args[0]) if self.handoff else _FLUSH
            timer = module.time_evaluator(name, device, number=1, repeat=self.repeat * self.cold_runs,
                                          f_preproc=preproc)
            runs = [float(r) for r in timer(*args).results]
            return [statistics.median(runs[i:i + self.cold_runs])
                    for i in range(0, len(runs), self.cold_runs)]
        timer = module.time_evaluator(
            name,
            device,
            number=max(1, self.number),
            repeat=self.repeat,
            min_repeat_ms=math.ceil(self.min_repeat_ms) if self.number == 0 else 0,
        )
        return [float(r) for r in timer(*args).results]

    def devices(self) -> int:
        """How many devices time kernels at once without disturbing each other (one measuring
        worker each): 1 for this machine."""
        return 1

    def close(self) -> None:
        """Release sessions and loaded builds (called when a measuring worker stops, and when
        :func:`~layoutopt.tvm.tune_and_build` is done with its builds)."""
        self._builds.clear()

    def describe(self) -> str:
        """Where code runs, for messages."""
        return "this machine"

    @property
    def device_name(self) -> str | None:
        """The device whose costs this runner measures, as the cost cache keys them beside the target:
        None for this machine (local keys stay as they always were), else a name that keeps a device's
        costs apart from this machine's and from other devices' (the class, unless a subclass says
        better: :class:`RPCRunner` gives its device key)."""
        return f"{type(self).__module__}.{type(self).__qualname__}"


@dataclass
class LocalRunner(Runner):
    """Run on this machine's CPU.

    Example:
        >>> from layoutopt.tvm import build, models
        >>> from layoutopt.tvm.evaluate.timing import random_inputs, run
        >>> runner = LocalRunner(repeat=5, cold_runs=20)    # e.g. Measurer(runner=runner)
        >>> runner.timing, runner.describe()
        ('cold', 'this machine')
        >>> [y.shape for y in run(build(models.chain()), random_inputs(models.chain()), runner)]
        [(1, 16, 8, 8)]
    """

    profiles_builds = True

    def load(self, path: str, name: str) -> tuple[Any, Any]:
        tvm = import_tvm()
        return tvm.runtime.load_module(path), tvm.cpu()

    def load_build(self, executable: Any) -> tuple[Any, Any]:
        return executable, import_tvm().cpu()  # the VM compiles it in memory: no file, no linker

    @property
    def device_name(self) -> None:
        return None


@dataclass
class RPCRunner(Runner):  # tracker and key are positional, the timing settings keyword-only
    """Run on devices registered with a TVM RPC tracker under ``key``.

    Code is compiled here for the target given (the device's, e.g.
    ``{"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "cortex-a72"}``), exported as a shared
    library, uploaded and run on a device. Every measuring worker keeps one session (one device)
    for its whole run; a farm of devices registered under one key measures in parallel.

    The tracker is asked for its summary when the runner is made: an unreachable tracker, or a port
    where something else answers, is a :class:`~layoutopt.ProblemError` within
    :data:`TRACKER_TIMEOUT` seconds, before anything is built or measured (TVM's own client retries
    for a minute). Costs measured through it are cached under the device key and the target
    (:attr:`device_name`), apart from this machine's.

    Args:
        tracker: ``"HOST:PORT"`` of the tracker (``python -m tvm.exec.rpc_tracker``).
        key: the device key the RPC servers registered with (``rpc_server --key KEY``).
        priority, session_timeout: passed to the tracker request (seconds; 0 = no limit).
        cc: the (cross) compiler that links the uploaded libraries, e.g. ``"aarch64-linux-gnu-g++"``
            for an ARM board; default: the host's C++ compiler.

    Raises:
        ProblemError: a bad address, no key, or a tracker that does not answer.

    Example:
        With a tracker at ``10.0.0.2:9190``, ``Measurer(target=device, runner=RPCRunner("10.0.0.2:9190",
        "rasp4b"))`` measures on the boards registered as ``rasp4b``. Bad settings are refused at once:

        >>> RPCRunner("10.0.0.2", "rasp4b")
        Traceback (most recent call last):
        ...
        layoutopt.errors.ProblemError: RPC tracker address '10.0.0.2' must look like HOST:PORT, e.g.
        127.0.0.1:9190
        >>> RPCRunner("10.0.0.2:9190")
        Traceback (most recent call last):
        ...
        layoutopt.errors.ProblemError: RPCRunner needs the device key the RPC servers registered with (--key)
    """

    tracker: str = "127.0.0.1:9190"
    key: str = ""
    priority: int = 1
    session_timeout: float = 0.0
    cc: str | None = None
    _session: Any = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.handoff:
            raise ProblemError(_HANDOFF_REMOTE)
        parse_rpc_address(self.tracker)
        if not self.key:
            raise ProblemError("RPCRunner needs the device key the RPC servers registered with (--key)")
        self.summary()  # now, not after a minute of TVM's retries in the middle of a run

    @property
    def device_name(self) -> str:
        return f"rpc:{self.key}"

    def time(self, module: Any, device: Any, name: str, args: Sequence[Any]) -> list[float]:
        if self.handoff:  # checked here too: a runner unpickled or changed after it was made
            raise ProblemError(_HANDOFF_REMOTE)
        return super().time(module, device, name, args)

    def summary(self) -> dict[str, Any]:
        """The tracker's summary (``server_info``, ``queue_info``), asked with a timeout.

        Raises:
            ProblemError: the tracker cannot be reached, or what answers is no TVM RPC tracker.
        """
        rpc_base = import_tvm().rpc.base
        host, port = parse_rpc_address(self.tracker)
        try:  # TVM's TrackerSession, with a timeout: its client retries for a minute, then waits forever
            with socket.create_connection((host, port), timeout=TRACKER_TIMEOUT) as sock:
                sock.sendall(struct.pack("<i", rpc_base.RPC_TRACKER_MAGIC))
                if struct.unpack("<i", rpc_base.recvall(sock, 4))[0] != rpc_base.RPC_TRACKER_MAGIC:
                    raise ConnectionError("what answers there is not a TVM RPC tracker")
                rpc_base.sendjson(sock, [rpc_base.TrackerCode.SUMMARY])
                code, summary = rpc_base.recvjson(sock)
                if code != rpc_base.TrackerCode.SUCCESS or not isinstance(summary, dict):
                    raise ConnectionError(f"the tracker answered {code!r} to a summary request")
        except (OSError, ValueError, TypeError, struct.error) as exc:  # refused, timed out, reset, garbled
            raise ProblemError(f"RPC tracker {self.tracker}: cannot reach it ({first_line(exc)}); is "
                               "`python -m tvm.exec.rpc_tracker` running there?") from None
        return summary

    def __getstate__(self) -> dict[str, Any]:
        return {**super().__getstate__(), "_session": None}  # sessions do not cross processes

    def _tracker(self):
        host, port = parse_rpc_address(self.tracker)
        return import_tvm().rpc.connect_tracker(host, port)

    def _connect(self):
        self.summary()  # a tracker gone since: say so now, not after TVM's minute of retries
        try:
            self._session = self._tracker().request(
                self.key, priority=self.priority, session_timeout=int(self.session_timeout)
            )
        except Exception as exc:
            raise RuntimeError(
                f"RPC tracker {self.tracker} key {self.key!r}: {first_line(exc, with_type=True)}"
            ) from None
        return self._session

    def export(self, executable: Any, path: str | os.PathLike[str]) -> None:
        fcompile = None
        if self.cc:
            from tvm.support.cc import cross_compiler

            fcompile = cross_compiler(self.cc)
        executable.export_library(str(path), fcompile=fcompile)

    def load(self, path: str, name: str) -> tuple[Any, Any]:
        session = self._session or self._connect()
        session.upload(path)
        return session.load_module(Path(path).name), session.cpu()

    def devices(self) -> int:
        """The servers registered under the key, busy or free, as MetaSchedule's RPC runner counts
        them (at least 1: a request for a key no server has registered yet waits for one).

        Raises:
            ProblemError: the tracker cannot be reached (before anything is measured).
        """
        servers = self.summary().get("server_info", [])
        return max(1, sum(1 for server in servers if server.get("key") == f"server:{self.key}"))

    def close(self) -> None:
        super().close()
        self._session = None
        # the session ends only when its last remote object is freed, and a build run through a
        # VirtualMachine leaves them in reference cycles: collect now, or the device stays held and a
        # measuring worker waits for it until its kernel times out
        gc.collect()

    def describe(self) -> str:
        return f"RPC tracker {self.tracker} key {self.key!r}"


def parse_rpc_address(address: str) -> tuple[str, int]:
    """``"HOST:PORT"`` -> ``(host, port)``, or ProblemError.

    Example:
        >>> parse_rpc_address("127.0.0.1:9190")
        ('127.0.0.1', 9190)
    """
    host, sep, port = str(address).rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ProblemError(f"RPC tracker address {address!r} must look like HOST:PORT, e.g. 127.0.0.1:9190")
    return host, int(port)


#: TVM's own pre-run step of cold timings: every argument but the first flushed from the CPU caches
_FLUSH = "cache_flush_cpu_non_first_arg"
#: the pre-run step of handoff timings, registered in this process when first needed
_HANDOFF = "layoutopt.runner.handoff"
_HANDOFF_REMOTE = ("RPCRunner: handoff timing writes each kernel's input from this process's thread pool, so "
                   "it times kernels on this machine only (LocalRunner); use cold timing on RPC devices")
#: the input the next handoff timing rewrites before each run: (its flat view, a pristine copy, writer)
_handoff_input: list[Any] = []


def _handoff_preproc(first: Any) -> str:
    """Get the handoff pre-run step ready for timings whose first argument is ``first``; its name.

    The step flushes the other arguments as cold timing does, then copies a pristine copy of ``first``
    into it with a kernel parallel over the thread pool (TVM gives each thread a contiguous part of a
    parallel loop), so that each part is in the cache of the thread that wrote it, and nowhere else.
    """
    tvm = import_tvm()
    if tvm.get_global_func(_HANDOFF, allow_missing=True) is None:
        flush = tvm.get_global_func(_FLUSH)

        def handoff(*args: Any) -> None:
            flush(*args)
            view, pristine, writer = _handoff_input
            writer(pristine, view)

        tvm.register_global_func(_HANDOFF, handoff)
    size = math.prod(int(d) for d in first.shape)
    view = first._create_view((size,))
    pristine = tvm.runtime.tensor(view.numpy(), first.device)
    _handoff_input[:] = [view, pristine, _parallel_copy(str(first.dtype))]
    return _HANDOFF


@functools.cache
def _parallel_copy(dtype: str) -> Any:
    """A compiled copy of one flat ``dtype`` tensor into another, parallel over the thread pool."""
    tvm = import_tvm()
    size = tvm.te.var("size", "int64")
    source = tvm.te.placeholder((size,), dtype, name="source")
    copy = tvm.te.compute((size,), lambda i: source[i], name="copy")
    sch = tvm.s_tir.Schedule(tvm.te.create_prim_func([source, copy]))
    outer, _ = sch.split(sch.get_loops(sch.get_sblock("copy"))[0], factors=[None, 256])
    sch.parallel(outer)
    return tvm.compile(sch.mod, target="llvm")["main"]

"""Append-only JSON-lines cache of measured kernel costs, safe against ``kill -9`` at any moment.

One line per measurement, keyed by what the cost is valid for (a :class:`CostContext`: the target,
the TVM version with the schedule version and the timing, the device for costs measured elsewhere
than on this machine: ``"device": "rpc:KEY"`` for an RPC device key; records measured here have no
``device`` and keep their keys; and the CPU measured on, ``"cpu"``, as :func:`~layoutopt.machine.cpu_name`
names it), the workload and the candidate (its schedule knobs included)::

    {"target": "{\\"kind\\": \\"llvm\\", \\"mcpu\\": \\"znver4\\"}", "tvm": "0.27.0.post1+schedules.5+cold",
     "cpu": "AMD EPYC 9R14 (znver4)", "workload": {...}, "candidate": {...}, "median": 0.00121,
     "results": [0.00120, 0.00121, 0.00125], "error": null, "timestamp": "2026-11-29T14:20:01+00:00", ...}

``median`` is in seconds, ``null`` when the measurement failed (``error`` then says why; the cost is
infinite). Each record is written with one ``write`` and ``fsync``-ed, so a killed run leaves at worst
one torn last line, which is skipped (with a warning) when the file is read again. The latest record of
a key wins, so re-measuring simply appends.

A cache moved to another host is not reused silently: a record of another CPU is not found
(:meth:`CostCache.other_cpus` names them, and the measurer counts them); records written before the
CPU was recorded (no ``cpu`` field) are found as before, for any CPU of the same target.

Example:
    A dense kernel's cost, stored by one run and found by the next (in a cache of its own here, so
    that its made-up cost meets no example that measures):

    >>> context = CostContext({"kind": "llvm", "mcpu": "znver4"}, tvm="0.27.0.post1", schedules=5)
    >>> workload = {"op": "dense", "data": [1, 64], "weight": [24, 64], "dtype": "float32"}
    >>> candidate = {"in": "NC", "out": "NC", "weight": "NK8n"}
    >>> cache = CostCache("measured.jsonl")
    >>> cache.get(context, workload, candidate) is None     # not measured yet
    True
    >>> _ = cache.put({**context.record_fields(), "workload": workload, "candidate": candidate,
    ...                "median": 1.2e-3, "results": [1.2e-3, 1.3e-3], "error": None})
    >>> record = CostCache("measured.jsonl").get(context, workload, candidate)    # the next run
    >>> record["median"], record_cost(record), record["tvm"]
    (0.0012, 0.0012, '0.27.0.post1+schedules.5+cold')
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ...errors import ProblemError
from ...records import check_fields, json_kind, parse_json

__all__ = ["TIMINGS", "CostCache", "CostContext", "CostRecord", "record_cost", "task_key"]

logger = logging.getLogger(__name__)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def task_key(workload: Mapping[str, Any], candidate: Mapping[str, Any]) -> str:
    """The string naming one (workload, candidate) task: canonical JSON, so dict key order does not
    matter. :meth:`CostContext.key` prefixes it with what the cost is valid for.

    Example:
        >>> a = task_key({"op": "dense", "data": [1, 8]}, {"weight": "NK"})
        >>> a == task_key({"data": [1, 8], "op": "dense"}, {"weight": "NK"})
        True
    """
    return _canonical([workload, candidate])


def record_cost(record: Mapping[str, Any]) -> float:
    """The cost of a cache record in seconds: its median (the fastest of its passes' medians when it was
    timed in several passes, ``pass_medians``), or ``inf`` if the measurement failed.

    Only finite, non-negative numbers count: a pass whose median was not finite is stored as ``null``
    and skipped; a record with none left costs ``inf``.

    Example:
        >>> record_cost({"median": 2e-3, "pass_medians": [2e-3, None, 1.5e-3], "error": None})
        0.0015
        >>> record_cost({"median": None, "error": "worker crashed (SIGSEGV)"})
        inf
    """
    median = record.get("median")
    if record.get("error") or not _is_cost(median):
        return math.inf
    passes = [m for m in (record.get("pass_medians") or [median]) if _is_cost(m)]
    return float(min(passes)) if passes else math.inf


#: how a kernel is timed: ``"cold"`` (weights and output flushed from the caches before each run),
#: ``"handoff"`` (cold, the input written by the thread pool just before each run) or ``"warm"`` (see
#: :class:`~layoutopt.tvm.measure.runner.Runner`)
TIMINGS = ("cold", "handoff", "warm")
#: the cache's version field: TVM's version, the schedule version, and ``+cold`` or ``+handoff`` (none for
#: warm timings)
_VERSION_FIELD = re.compile(r"(?P<tvm>.+)\+schedules\.(?P<schedules>\d+)(?:\+(?P<timing>cold|handoff))?")


@dataclass(frozen=True)
class CostContext:
    """What a cached cost is valid for: a time is reused only for the same ``target`` (the resolved
    target's JSON dict), compiler (``tvm``, apache-tvm's version), hand-written schedules
    (``schedules``, :data:`~layoutopt.tvm.kernels.SCHEDULE_VERSION`), ``timing`` (one of
    :data:`TIMINGS`), ``device`` (None: this machine; ``"rpc:KEY"``: an RPC device key) and ``cpu``
    (the CPU measured on, :func:`~layoutopt.machine.cpu_name`; None: not recorded, as before it was).

    A record stores them in the fields of the caches written before this record existed, byte for
    byte: ``"target"`` (:attr:`target_key`), ``"tvm"`` (:attr:`version_key`, which packs TVM's
    version, the schedules and the timing) and, for another device, ``"device"``.

    Example:
        >>> context = CostContext({"mcpu": "znver4", "kind": "llvm"}, "0.27.0.post1", schedules=5)
        >>> context.target_key, context.version_key
        ('{"kind": "llvm", "mcpu": "znver4"}', '0.27.0.post1+schedules.5+cold')
        >>> print(context.key({"op": "dense"}, {}))
        ["{\\"kind\\": \\"llvm\\", \\"mcpu\\": \\"znver4\\"}","0.27.0.post1+schedules.5+cold"]...
        >>> CostContext.from_record(context.record_fields()) == context
        True
        >>> replace(context, cpu="AMD EPYC 9R14 (znver4)").record_fields()["cpu"]
        'AMD EPYC 9R14 (znver4)'
    """

    target: Mapping[str, Any]
    tvm: str
    schedules: int
    timing: str = "cold"
    device: str | None = None
    cpu: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.target, Mapping) or not isinstance(self.target.get("kind"), str):
            raise ProblemError(f"cost context target {self.target!r}: expected a target's JSON dict")
        if not isinstance(self.tvm, str) or not self.tvm or "+" in self.tvm:
            raise ProblemError(f"cost context tvm {self.tvm!r}: expected apache-tvm's version")
        if isinstance(self.schedules, bool) or not isinstance(self.schedules, int) or self.schedules < 0:
            raise ProblemError(f"cost context schedules {self.schedules!r}: expected a schedule version")
        if self.timing not in TIMINGS:
            raise ProblemError(f"cost context timing {self.timing!r}: expected one of {TIMINGS}")
        if self.device is not None and not isinstance(self.device, str):
            raise ProblemError(f"cost context device {self.device!r}: expected a string or None")
        if self.cpu is not None and (not isinstance(self.cpu, str) or not self.cpu):
            raise ProblemError(f"cost context cpu {self.cpu!r}: expected a CPU's name or None")
        object.__setattr__(self, "target", MappingProxyType(dict(self.target)))

    def __hash__(self) -> int:
        return hash((self.target_key, self.tvm, self.schedules, self.timing, self.device, self.cpu))

    def __reduce__(self) -> tuple:
        # a mappingproxy does not pickle: the context crosses processes and is deep-copied as its fields
        return type(self), (dict(self.target), self.tvm, self.schedules, self.timing, self.device, self.cpu)

    @property
    def target_key(self) -> str:
        """The record's ``"target"`` field: the target's JSON with sorted keys (as
        :func:`~layoutopt.tvm._tvm.target_key` writes it)."""
        return json.dumps(dict(self.target), sort_keys=True)

    @property
    def version_key(self) -> str:
        """The record's ``"tvm"`` field: ``TVM+schedules.N``, then ``+cold`` or ``+handoff`` (nothing for
        warm timings, as caches older than cold timing wrote it)."""
        return f"{self.tvm}+schedules.{self.schedules}" + ("" if self.timing == "warm" else f"+{self.timing}")

    def key(self, workload: Mapping[str, Any], candidate: Mapping[str, Any]) -> str:
        """The string a record of (workload, candidate) in this context is stored under."""
        return CostCache.key(self.target_key, self.version_key, workload, candidate, self.device, self.cpu)

    def record_fields(self) -> dict[str, Any]:
        """The fields a record of this context carries (``device`` only for another device, ``cpu`` when
        known)."""
        return {"target": self.target_key, "tvm": self.version_key,
                **({"device": self.device} if self.device is not None else {}),
                **({"cpu": self.cpu} if self.cpu is not None else {})}

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> CostContext:
        """The context of a cache record (its ``target``, ``tvm``, ``device`` and ``cpu`` fields).

        Raises:
            ProblemError: a field that no context writes (e.g. a ``tvm`` field without the schedule
                version, from a cache older than the schedule versions).
        """
        found = _VERSION_FIELD.fullmatch(str(record.get("tvm")))
        try:
            target = parse_json(record["target"])
        except (KeyError, TypeError, ProblemError):
            target = None
        if found is None or not isinstance(target, dict):
            raise ProblemError(f"cost record target {record.get('target')!r}, tvm {record.get('tvm')!r}: not "
                               "the fields of a cost context (written by another layoutopt version?)")
        return cls(target, found["tvm"], int(found["schedules"]), found["timing"] or "warm",
                   record.get("device"), record.get("cpu"))

    def to_json(self) -> dict[str, Any]:
        """The context as a JSON object, its target as a JSON object too.

        Example:
            >>> CostContext({"kind": "llvm"}, "0.27", 5, "warm").to_json()
            {'target': {'kind': 'llvm'}, 'tvm': '0.27', 'schedules': 5, 'timing': 'warm', 'device': None,
             'cpu': None}
        """
        return {"target": dict(self.target), "tvm": self.tvm, "schedules": self.schedules,
                "timing": self.timing, "device": self.device, "cpu": self.cpu}


def _is_cost(value: Any) -> bool:
    """A finite, non-negative number (not a boolean; an integer too large for a float is not one)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value) and value >= 0
    except OverflowError:
        return False


#: the fields of a record layoutopt reads, and their JSON types (a record's other fields, such as the
#: runner, the kernel's check error and the seconds spent, are kept as written)
_REQUIRED = {"target": (str,), "tvm": (str,), "workload": (dict,), "candidate": (dict,)}
_OPTIONAL = {"median": (float, type(None)), "results": (list,), "pass_medians": (list, type(None)),
             "error": (str, type(None)), "device": (str, type(None)), "cpu": (str, type(None)),
             "load_average": (float, type(None)),
             "timestamp": (str,)}


@dataclass(frozen=True)
class CostRecord:
    """One measurement of the cache, checked (:meth:`from_json`): what it is valid for (``context``),
    the ``workload`` and ``candidate`` measured, its ``median`` (seconds; None when it failed, ``error``
    saying why), every repeat's seconds (``results``), each timing pass's median (``pass_medians``), the
    load average it was timed under, and the record as written (``fields``, its other fields included).

    Example:
        >>> fields = {"target": '{"kind": "llvm"}', "tvm": "0.27+schedules.12+cold", "workload": {},
        ...           "candidate": {}, "median": 1e-3, "pass_medians": 1e-3}
        >>> CostRecord.from_json(fields, "line 7")
        Traceback (most recent call last):
        ...
        layoutopt.errors.ProblemError: line 7: 'pass_medians' must be a list or null, not a number (0.001)
        >>> CostRecord.from_json({**fields, "pass_medians": [1e-3, None]}).cost
        0.001
    """

    context: CostContext
    workload: dict[str, Any]
    candidate: dict[str, Any]
    median: float | None = None
    results: tuple[float | None, ...] = ()
    pass_medians: tuple[float | None, ...] | None = None
    error: str | None = None
    load_average: float | None = None
    fields: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, value: Any, where: str = "cost record") -> CostRecord:
        """The record of a JSON object, its fields checked: the one validation of a cache line (read or
        written). Raises ProblemError naming the field at fault."""
        check_fields(value, where, _REQUIRED, _OPTIONAL, extra=True)
        context = CostContext.from_record(value)
        for name in ("median", "load_average"):
            if value.get(name) is not None and not _is_cost(value[name]):
                raise ProblemError(f"{where}: {name!r} must be a finite number >= 0 or null, not "
                                   f"{json_kind(value[name])}")
        for name in ("results", "pass_medians"):
            items = value.get(name) or []
            bad = next((item for item in items if item is not None and not _is_cost(item)), None)
            if bad is not None or any(isinstance(item, bool) for item in items):
                raise ProblemError(f"{where}: {name!r} must hold finite numbers >= 0 (or null), not "
                                   f"{json_kind(bad)}")
        passes = value.get("pass_medians")
        return cls(context, value["workload"], value["candidate"], value.get("median"),
                   tuple(value.get("results") or ()), None if passes is None else tuple(passes),
                   value.get("error"), value.get("load_average"), dict(value))

    @property
    def key(self) -> str:
        """The string the record is stored under (:meth:`CostContext.key`)."""
        return self.context.key(self.workload, self.candidate)

    @property
    def cost(self) -> float:
        """:func:`record_cost` of the record."""
        return record_cost(self.fields)

    def to_json(self) -> dict[str, Any]:
        """The record as written."""
        return dict(self.fields)


def _reason(message: str) -> str:
    """A skipped line's reason without the value at fault: ``"cost record: 'median' must be ..., not
    a string ("fast")"`` -> ``"'median' must be ..."``, so that reasons count together."""
    if message.startswith("cost record target"):  # CostContext.from_record names the fields' values
        return "target and tvm fields of no cost context (another layoutopt's?)"
    reason = message.removeprefix("cost record: ").split(", not ")[0]
    return reason.split(" (")[0] if reason.startswith("not valid JSON") else reason


def _json_safe(value: Any) -> Any:
    """``value`` with every non-finite float (anywhere in lists and dicts) replaced by None: JSON has no
    inf or NaN, and a record must never fail to be written over one."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {key: _json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(item) for item in value]
    return value


class CostCache:
    """Measured costs kept in memory and appended to a JSON-lines file (``path=None``: memory only).

    Args:
        path: the ``.jsonl`` file; its directory is created when the cache is opened, the file at the
            first :meth:`put`.

    Raises:
        ProblemError: ``path`` is a directory, cannot be read, or cannot be written (checked when the
            cache is opened, before anything is measured into it).

    Example:
        A run killed while appending leaves a torn last line: the next run skips it and appends on a
        fresh line; the latest record of a kernel wins.

        >>> context = CostContext({"kind": "llvm", "mcpu": "znver4"}, "0.27.0.post1", schedules=5)
        >>> workload, candidate = {"op": "dense", "data": [1, 8], "weight": [4, 8]}, {"weight": "NK"}
        >>> record = {**context.record_fields(), "workload": workload, "candidate": candidate,
        ...           "median": 2e-5, "results": [2e-5], "error": None}
        >>> _ = CostCache("measured.jsonl").put(record)
        >>> with open("measured.jsonl", "a") as file:      # killed in the middle of a line
        ...     _ = file.write('{"target": "{')
        >>> cache = CostCache("measured.jsonl")
        >>> cache, cache.skipped_lines
        (CostCache('measured.jsonl', 1 records), 1)
        >>> _ = cache.put({**record, "median": 1.9e-5})     # measured again
        >>> CostCache("measured.jsonl").get(context, workload, candidate)["median"]
        1.9e-05
    """

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = Path(path) if path is not None else None
        self._records: dict[str, dict[str, Any]] = {}
        self._cpus: dict[str, set[str]] = {}  # the key without its CPU -> the CPUs it has records of
        #: lines skipped when the file was read, by reason (torn by a kill, edited by hand, junk...)
        self.skipped: Counter[str] = Counter()
        #: lines read as records (a later record of the same kernel replaces an earlier one)
        self.loaded_lines = 0
        #: why appending to the file failed during the run, if it did (the records stay in memory)
        self.write_error: str | None = None
        if self.path is not None:
            self._load()
            self._check_writable()

    @staticmethod
    def key(target: str, tvm_version: str, workload: Mapping[str, Any], candidate: Mapping[str, Any],
            device: str | None = None, cpu: str | None = None) -> str:
        """The string a record is stored under (canonical JSON, so dict key order does not matter), from
        the record's ``target`` and ``tvm`` fields (see :meth:`CostContext.key`).

        ``device`` (None: this machine) keeps the costs of another device apart, ``cpu`` (None: not
        recorded) those of another CPU; without them, the keys are those of the caches written before
        devices and CPUs were keyed.

        Example:
            >>> CostCache.key("llvm", "0.27", {"op": "dense"}, {})
            '["llvm","0.27"][{"op":"dense"},{}]'
            >>> CostCache.key("llvm", "0.27", {"op": "dense"}, {}, device="rpc:pi")
            '["llvm","0.27","rpc:pi"][{"op":"dense"},{}]'
            >>> CostCache.key("llvm", "0.27", {"op": "dense"}, {}, cpu="AMD EPYC 9R14 (znver4)")
            '["llvm","0.27","cpu:AMD EPYC 9R14 (znver4)"][{"op":"dense"},{}]'
        """
        context = ([str(target), str(tvm_version)] + ([str(device)] if device is not None else [])
                   + ([f"cpu:{cpu}"] if cpu is not None else []))
        return _canonical(context) + task_key(workload, candidate)

    @classmethod
    def record_key(cls, record: Mapping[str, Any]) -> str:
        """The key of a record (its target, tvm, workload, candidate, device and cpu fields)."""
        return cls.key(record["target"], record["tvm"], record["workload"], record["candidate"],
                       record.get("device"), record.get("cpu"))

    def _load(self) -> None:
        assert self.path is not None
        try:
            if self.path.is_dir():
                raise ProblemError(f"cost cache {str(self.path)!r} is a directory, not a .jsonl file")
            if not self.path.exists():
                return
            data = self.path.read_bytes()
        except OSError as exc:
            raise ProblemError(f"cannot read cost cache {str(self.path)!r}: {exc}") from None
        for line in data.split(b"\n"):
            if not line.strip():
                continue
            try:
                record = CostRecord.from_json(parse_json(line))
                key = record.key
            except ProblemError as exc:
                self.skipped[_reason(str(exc))] += 1
                continue
            self.loaded_lines += 1
            self._store(key, record)
        if self.skipped:
            logger.warning("cost cache %s: %s (torn by a kill, edited by hand, or not a cost record)",
                           self.path, self.describe_skipped())

    @property
    def skipped_lines(self) -> int:
        """How many lines were skipped when the file was read."""
        return sum(self.skipped.values())

    def describe_skipped(self) -> str:
        """How many lines were skipped when the file was read, and why, in one phrase.

        Example:
            >>> cache = CostCache()
            >>> cache.skipped.update({"not valid JSON": 2, "'median' must be a finite number >= 0": 1})
            >>> cache.describe_skipped()
            "skipped 3 lines: 2 not valid JSON, 1 'median' must be a finite number >= 0"
        """
        if not self.skipped:
            return "skipped no line"
        reasons = ", ".join(f"{count} {reason}" for reason, count in self.skipped.most_common())
        return f"skipped {self.skipped_lines} line{'s' if self.skipped_lines != 1 else ''}: {reasons}"

    def _store(self, key: str, record: CostRecord) -> None:
        self._records[key] = record.fields
        if record.context.cpu is not None:
            anywhere = replace(record.context, cpu=None).key(record.workload, record.candidate)
            self._cpus.setdefault(anywhere, set()).add(record.context.cpu)

    def get(self, context: CostContext, workload: Mapping[str, Any],
            candidate: Mapping[str, Any]) -> dict[str, Any] | None:
        """The latest record of (workload, candidate) in ``context``, or ``None`` if it was never measured.

        A context with a ``cpu`` also finds a record written before CPUs were recorded (none for
        that kernel on its own CPU), never one of another CPU (:meth:`other_cpus`).

        Example:
            >>> here = CostContext({"kind": "llvm"}, "0.27", 5, cpu="Xeon (rocketlake)")
            >>> cache = CostCache()
            >>> _ = cache.put({**replace(here, cpu="EPYC (znver4)").record_fields(), "workload": {},
            ...                "candidate": {}, "median": 1e-3})
            >>> cache.get(here, {}, {}) is None, cache.other_cpus(here, {}, {})
            (True, ['EPYC (znver4)'])
            >>> _ = cache.put({**replace(here, cpu=None).record_fields(), "workload": {}, "candidate": {},
            ...                "median": 2e-3})              # a record of before: no CPU
            >>> cache.get(here, {}, {})["median"]
            0.002
        """
        found = self._records.get(context.key(workload, candidate))
        if found is None and context.cpu is not None:
            found = self._records.get(replace(context, cpu=None).key(workload, candidate))
        return found

    def other_cpus(self, context: CostContext, workload: Mapping[str, Any],
                   candidate: Mapping[str, Any]) -> list[str]:
        """The other CPUs than ``context.cpu`` the cache holds records of (workload, candidate) for, in
        ``context`` otherwise (sorted): what :meth:`get` does not reuse."""
        anywhere = replace(context, cpu=None).key(workload, candidate)
        return sorted(self._cpus.get(anywhere, set()) - {context.cpu})

    def _check_writable(self) -> None:
        """Refuse now, before anything is measured, a file that the first :meth:`put` could not append to."""
        assert self.path is not None
        try:
            if self.path.exists():
                os.close(os.open(self.path, os.O_WRONLY | os.O_APPEND))
            else:  # created at the first put; its directory now
                self.path.parent.mkdir(parents=True, exist_ok=True)
                if not os.access(self.path.parent, os.W_OK | os.X_OK):
                    raise PermissionError(13, "Permission denied")
        except OSError as exc:  # read-only file or directory, a parent that is a file, no permission...
            raise ProblemError(f"cannot write cost cache {str(self.path)!r}: {exc.strerror or exc}") from None

    def put(self, record: Mapping[str, Any]) -> dict[str, Any]:
        """Store ``record`` (needs target, tvm, workload, candidate; device if not measured here) and
        append it durably to the file.

        Adds a ``timestamp`` if missing; non-finite floats are stored as ``null`` (JSON has no inf), so a
        record the cache returned can be put back. Should appending fail mid-run (a full disk), the
        record is still kept in memory, the run goes on and :attr:`write_error` says why.
        """
        record = _json_safe(dict(record))
        record.setdefault("timestamp", datetime.now(timezone.utc).isoformat(timespec="seconds"))
        checked = CostRecord.from_json(record, "cost record to store")  # what is read back must load
        line = (json.dumps(record, sort_keys=True, allow_nan=False) + "\n").encode()
        self._store(checked.key, replace(checked, fields=record))
        if self.path is not None:
            try:
                self._append(line)
            except OSError as exc:
                if self.write_error is None:
                    logger.warning("cost cache %s: cannot append (%s); results are kept in memory only",
                                   self.path, exc)
                self.write_error = f"{type(exc).__name__}: {exc}"
        return record

    def _append(self, line: bytes) -> None:
        assert self.path is not None
        # O_APPEND + one write per record: concurrent writers interleave whole lines, and a kill leaves
        # at most a torn tail. If the previous run was killed mid-line, start on a fresh line.
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            size = os.fstat(fd).st_size
            if size and not self._ends_with_newline(size):
                line = b"\n" + line
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)

    def _ends_with_newline(self, size: int) -> bool:
        assert self.path is not None
        with open(self.path, "rb") as handle:
            handle.seek(size - 1)
            return handle.read(1) == b"\n"

    def __len__(self) -> int:
        return len(self._records)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(list(self._records.values()))

    def __repr__(self) -> str:
        where = str(self.path) if self.path is not None else "memory"
        return f"CostCache({where!r}, {len(self)} records)"

"""The small interface every solver back-end implements, and what back-ends share.

A back-end is a class registered by name (like CVXPY's solver classes). It receives a validated
:class:`~layoutopt.problem.Problem`, a :class:`Deadline` and its options, already checked against
its :class:`Option` specs, and returns a :class:`SolverResult` holding index choices.
:func:`layoutopt.solve` does validation, timing and the recomputation of the objective from the
original costs, so back-ends stay small.

Also here, for every back-end that needs them: :func:`heuristic_assignment` (a warm start and a
fallback for the exact engines) and :func:`run_until` (an engine that does not keep its own time limit).
"""

from __future__ import annotations

import contextlib
import importlib.util
import math
import numbers
import os
import signal
import sys
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any, ClassVar

import numpy as np

from ..errors import MissingExtraError, ProblemError
from ..problem import Problem
from ..solution import Status

__all__ = [
    "Deadline",
    "Option",
    "Solver",
    "SolverResult",
    "get_solver",
    "heuristic_assignment",
    "register",
    "registered",
    "run_until",
]


@dataclass
class SolverResult:
    """What a back-end returns.

    ``assignment`` is one choice index per node (``None`` when the back-end proved the
    problem infeasible or found nothing). ``lower_bound`` is a certified bound on the optimum
    (``None`` when the back-end proves nothing). ``status`` is the back-end's claim; the
    front end checks it against the recomputed objective and the bound.
    """

    assignment: np.ndarray | list[int] | None
    status: Status
    lower_bound: float | None = None
    message: str = ""
    stats: dict[str, Any] = field(default_factory=dict)


class Deadline:
    """A wall-clock budget that runs out at one instant (``None``: no limit).

    Back-ends receive one and check :meth:`expired` between their steps, so that the whole call,
    model building included, stays within the user's ``time_limit``.

    Example:
        >>> Deadline(None).remaining() is None, Deadline(60).remaining() > 59
        (True, True)
        >>> Deadline(0.0).expired()
        True
    """

    __slots__ = ("at",)

    #: seconds beyond which a budget counts as no limit (about 31 years: the engines' clocks take ints)
    FOREVER = 1e9

    def __init__(self, seconds: float | None, start: float | None = None) -> None:
        #: the ``time.perf_counter()`` instant the budget runs out, or None
        self.at = None if seconds is None else (time.perf_counter() if start is None else start) + seconds

    def remaining(self) -> float | None:
        """Seconds left (0 when expired), or None without a limit (or more than :data:`FOREVER` left)."""
        if self.at is None:
            return None
        left = self.at - time.perf_counter()
        return None if left > self.FOREVER else max(left, 0.0)

    def expired(self) -> bool:
        return self.at is not None and time.perf_counter() >= self.at

    def share(self, fraction: float) -> Deadline:
        """A deadline ``fraction`` of the remaining time from now (for a step that must leave time)."""
        remaining = self.remaining()
        return Deadline(None if remaining is None else fraction * remaining)

    def later(self, seconds: float) -> Deadline:
        """A deadline ``seconds`` after this one."""
        later = Deadline(None)
        later.at = None if self.at is None else self.at + seconds
        return later


# --- options ------------------------------------------------------------------------------------


def _boolean(name: str, value: Any) -> bool:
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise ProblemError(f"option {name} must be True or False, not {value!r}")


def _integer(minimum: int, allow_none: bool = False) -> Callable[[str, Any], int | None]:
    def check(name: str, value: Any) -> int | None:
        if value is None and allow_none:
            return None
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral) or value < minimum:
            kind = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
            raise ProblemError(
                f"option {name} must be {kind}{' or None' if allow_none else ''}, not {value!r}")
        return int(value)

    return check


def _number(minimum: float, inclusive: bool) -> Callable[[str, Any], float]:
    def check(name: str, value: Any) -> float:
        if (isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real)
                or math.isnan(value) or not (value >= minimum if inclusive else value > minimum)):
            relation = ">=" if inclusive else ">"
            raise ProblemError(f"option {name} must be a number {relation} {minimum:g}, not {value!r}")
        return float(value)

    return check


def _one_of(*allowed: str) -> Callable[[str, Any], str]:
    def check(name: str, value: Any) -> str:
        if isinstance(value, str) and value in allowed:
            return value
        raise ProblemError(f"option {name}: unknown value {value!r}; valid values: {', '.join(allowed)}")

    return check


@dataclass(frozen=True)
class Option:
    """One keyword option of a back-end: its default, the check its values must pass, what it does.

    ``check(name, value)`` returns the value to use or raises :class:`~layoutopt.ProblemError`
    naming the option. Build the common ones with the constructors below.

    Example:
        >>> Option.boolean(True, "warm start").check("hint", False)
        False
        >>> Option.integer(20, "sweeps", minimum=0).check("max_repair_rounds", -5)
        Traceback (most recent call last):
        ...
        layoutopt.errors.ProblemError: option max_repair_rounds must be an integer >= 0, not -5
    """

    default: Any
    check: Callable[[str, Any], Any]
    doc: str = ""

    @classmethod
    def boolean(cls, default: bool, doc: str) -> Option:
        return cls(default, _boolean, doc)

    @classmethod
    def integer(cls, default: int | None, doc: str, minimum: int = 1, allow_none: bool = False) -> Option:
        return cls(default, _integer(minimum, allow_none), doc)

    @classmethod
    def number(cls, default: float, doc: str, minimum: float = 0.0, inclusive: bool = True) -> Option:
        return cls(default, _number(minimum, inclusive), doc)

    @classmethod
    def one_of(cls, default: str, allowed: tuple[str, ...], doc: str) -> Option:
        return cls(default, _one_of(*allowed), doc)


class Solver(ABC):
    """Base class of the solver back-ends.

    Subclasses set ``name``, ``exact`` (whether the back-end proves optimality),
    ``requires`` (import names of optional packages, with the pip extra that brings them)
    and ``options`` (name -> :class:`Option`), and implement :meth:`solve`.
    """

    name: ClassVar[str]
    exact: ClassVar[bool]
    #: (import name, extra) pairs; the back-end is unavailable when one is missing.
    requires: ClassVar[tuple[tuple[str, str], ...]] = ()
    #: accepted options: their defaults and checks; anything else is a ProblemError.
    options: ClassVar[Mapping[str, Option]] = {}

    @classmethod
    def is_available(cls) -> bool:
        return all(importlib.util.find_spec(module) is not None for module, _ in cls.requires)

    @classmethod
    def check_available(cls) -> None:
        for module, extra in cls.requires:
            if importlib.util.find_spec(module) is None:
                raise MissingExtraError(module, extra, f"method {cls.name!r}")

    @classmethod
    def resolve_options(cls, given: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Every option's value: the checked ``given`` one, else its default.

        Raises:
            ProblemError: an unknown option, or a value its check refuses.
        """
        given = given or {}
        unknown = set(given) - set(cls.options)
        if unknown:
            accepted = ", ".join(sorted(cls.options)) or "none"
            raise ProblemError(
                f"unknown option(s) {', '.join(sorted(map(str, unknown)))} for method {cls.name!r}; "
                f"accepted: {accepted}"
            )
        return {name: spec.check(name, given[name]) if name in given else spec.default
                for name, spec in cls.options.items()}

    @abstractmethod
    def solve(self, problem: Problem, deadline: Deadline, options: Mapping[str, Any]) -> SolverResult:
        """Solve ``problem`` before ``deadline``; ``options`` come from :meth:`resolve_options`."""


# --- shared by several back-ends ------------------------------------------------------------------


#: seconds the fallback heuristic may run past the deadline (a fallback is worth that much of the
#: slack a time limit allows, ``limit * 1.1 + 0.1`` s)
FALLBACK_GRACE = 0.05


def heuristic_assignment(problem: Problem, deadline: Deadline | None = None) -> np.ndarray | None:
    """A quick allowed assignment, to warm-start the exact engines and to fall back on: ``pbqp``
    (which cuts corners past ``deadline`` plus :data:`FALLBACK_GRACE`); under a memory budget, its
    Lagrangian search (:func:`.budget.lagrangian`), whose answer fits.

    Returns None when it finds no assignment of finite cost (or runs out of time).

    Example:
        >>> import networkx as nx
        >>> p = Problem.from_graph(nx.path_graph(2), {"nodes": {0: [1, 2], 1: [3, 1]},
        ...                                           "edges": {(0, 1): [[0, 5], [5, 0]]}})
        >>> heuristic_assignment(p).tolist()
        [1, 1]
    """
    pbqp = get_solver("pbqp")
    deadline = (deadline or Deadline(None)).later(FALLBACK_GRACE)
    result = pbqp().solve(problem, deadline, pbqp.resolve_options())
    if result.assignment is None:
        return None
    assignment = np.asarray(result.assignment, dtype=np.int64)
    return assignment if math.isfinite(problem.evaluate(assignment)) and problem.fits(assignment) else None


#: seconds an engine may overrun the deadline before :func:`run_until` stops it (its own limit comes first)
OVERRUN = 0.05


def run_until(run: Callable[[], Any], deadline: Deadline) -> Any | None:
    """``run()`` in a forked child process, killed when ``deadline`` (plus :data:`OVERRUN`) passes.

    For engines whose own time limit is not kept: CBC and HiGHS overrun theirs by seconds (their root
    LP does not look at the clock) and pywraplp cannot interrupt them; CP-SAT loads its model before its
    clock starts. Returns ``run()``'s value (it must pickle), or None when the child was stopped (or
    died). The child inherits the built model; where ``fork`` does not exist, ``run()`` runs in this
    process.

    Example:
        >>> run_until(lambda: 6 * 7, Deadline(5.0)), run_until(lambda: time.sleep(5), Deadline(0.1))
        (42, None)
    """
    if not hasattr(os, "fork"):
        return run()
    # A bare fork, not multiprocessing: it works in daemonic processes too (an IsolatedWorker's, such
    # as the bench's, which may have no multiprocessing children: cpsat and mip failed there)
    read_end, write_end = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: answers through the pipe, leaves by os._exit
        code = 1
        try:
            os.close(read_end)
            with Connection(write_end, readable=False) as sender:
                sender.send(run())
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    receiver = Connection(read_end, writable=False)
    try:
        remaining = deadline.remaining()
        if receiver.poll(None if remaining is None else remaining + OVERRUN):
            return receiver.recv()
        return None
    except (EOFError, OSError):  # the child died without an answer
        return None
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        receiver.close()


# -- the registry of back-ends (filled by importing them: ``layoutopt.solvers`` imports them all) --

_REGISTRY: dict[str, type[Solver]] = {}


def register(cls: type[Solver]) -> type[Solver]:
    """Class decorator: make a back-end available as ``solve(method=cls.name)``."""
    _REGISTRY[cls.name] = cls
    return cls


def get_solver(name: str) -> type[Solver]:
    """The back-end class registered as ``name``; ProblemError for an unknown name."""
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise ProblemError(
            f"unknown method {name!r}; known methods: {', '.join(sorted(_REGISTRY))}"
        ) from None


def registered() -> list[str]:
    """Every registered method name, available or not."""
    return sorted(_REGISTRY)

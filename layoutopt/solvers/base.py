"""The small interface every solver back-end implements.

A back-end is a class registered by name (like CVXPY's solver classes). It receives a
validated :class:`~layoutopt.problem.Problem` and returns a :class:`SolverResult` holding
index choices; :func:`layoutopt.solve` does validation, timing and the recomputation of the
objective from the original costs, so back-ends stay small.
"""

from __future__ import annotations

import importlib.util
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from ..errors import MissingExtraError
from ..problem import Problem
from ..solution import Status


@dataclass
class SolverResult:
    """What a back-end returns.

    ``assignment`` is one choice index per node (``None`` when the back-end proved the
    problem infeasible or found nothing). ``lower_bound`` is a proven bound on the optimum
    (``None`` when the back-end proves nothing). ``status`` is the back-end's claim; the
    front end downgrades it if the recomputed objective disagrees.
    """

    assignment: np.ndarray | list[int] | None
    status: Status
    lower_bound: float | None = None
    message: str = ""
    stats: dict[str, Any] = field(default_factory=dict)


class Solver(ABC):
    """Base class of the solver back-ends.

    Subclasses set ``name``, ``exact`` (whether a returned ``"optimal"`` is a proof),
    ``requires`` (import names of optional packages, with the pip extra that brings them)
    and ``options`` (accepted keyword options with their defaults), and implement
    :meth:`solve`.
    """

    name: ClassVar[str]
    exact: ClassVar[bool]
    #: (import name, extra) pairs; the back-end is unavailable when one is missing.
    requires: ClassVar[tuple[tuple[str, str], ...]] = ()
    #: accepted options and their defaults; anything else is a ProblemError.
    options: ClassVar[Mapping[str, Any]] = {}

    @classmethod
    def is_available(cls) -> bool:
        return all(importlib.util.find_spec(module) is not None for module, _ in cls.requires)

    @classmethod
    def check_available(cls) -> None:
        for module, extra in cls.requires:
            if importlib.util.find_spec(module) is None:
                raise MissingExtraError(module, extra, f"method {cls.name!r}")

    @classmethod
    def validate_options(cls, options: Mapping[str, Any]) -> None:
        """Check option *values* (names are checked by the front end) before any work starts.

        Raise :class:`~layoutopt.ProblemError` naming the option at fault. The default accepts all.
        """
        return None

    @abstractmethod
    def solve(self, problem: Problem, time_limit: float | None, **options: Any) -> SolverResult:
        """Solve ``problem`` within ``time_limit`` seconds (None: no limit)."""

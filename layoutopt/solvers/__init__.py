"""Solver back-ends, registered by name.

Each back-end lives in its own module and registers itself with :func:`register`.
:func:`layoutopt.solve` looks methods up here.
"""

from __future__ import annotations

from ..errors import ProblemError
from .base import Solver, SolverResult

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


# Importing a module registers its back-end. Heavy solver libraries are imported lazily
# inside each back-end's solve(), so this stays cheap.
from . import auto, bruteforce, cpsat, dp, greedy, mip, pbqp, toulbar2  # noqa: E402, F401

__all__ = ["Solver", "SolverResult", "get_solver", "register", "registered"]

"""Solver back-ends, registered by name.

Each back-end lives in its own module and registers itself with :func:`register` (the registry
is :mod:`.base`'s, so that a back-end imports nothing of this package's ``__init__``).
:func:`layoutopt.solve` looks methods up here.
"""

from __future__ import annotations

# Importing a module registers its back-end. Heavy solver libraries are imported lazily
# inside each back-end's solve(), so this stays cheap.
from . import auto, bruteforce, cpsat, dp, greedy, mip, pbqp, toulbar2  # noqa: F401
from .base import Solver, SolverResult, get_solver, register, registered

__all__ = ["Solver", "SolverResult", "get_solver", "register", "registered"]

"""Errors raised by layoutopt.

Two kinds, so that callers can tell *who* is at fault:

- :class:`ProblemError` (a ``ValueError``): the user's input is wrong (a graph, a cost, a file, an
  option, a time limit). The message names the node, edge, file or option at fault; fix the input.
- :class:`InternalError` (a ``RuntimeError``): layoutopt itself failed a check it makes on its own
  work (a solver reporting a bound above its own objective, a model a back-end rejects, a kernel
  computing wrong numbers, a rewrite producing a wrong graph). Never the user's fault: report it.

:class:`MissingExtraError` (an ``ImportError``) says which optional extra to install.

Example:
    >>> import layoutopt
    >>> issubclass(layoutopt.ProblemError, ValueError), issubclass(layoutopt.InternalError, RuntimeError)
    (True, True)
"""

from __future__ import annotations


class ProblemError(ValueError):
    """Bad input: the message names the node, edge, file, method or option at fault."""


class InternalError(RuntimeError):
    """A failure inside layoutopt (a solver or rewrite bug, wrong numbers from a kernel): not user error."""


class MissingExtraError(ImportError):
    """An optional dependency (an *extra*) is not installed."""

    def __init__(self, package: str, extra: str, purpose: str) -> None:
        super().__init__(
            f"{purpose} needs the '{package}' package, which is not installed. "
            f"Install it with: pip install 'layoutopt[{extra}]'"
        )
        self.package = package
        self.extra = extra

"""Errors raised by layoutopt."""

from __future__ import annotations


class ProblemError(ValueError):
    """Bad input: the message names the node, edge, method or option at fault."""


class MissingExtraError(ImportError):
    """An optional dependency (an *extra*) is not installed."""

    def __init__(self, package: str, extra: str, purpose: str) -> None:
        super().__init__(
            f"{purpose} needs the '{package}' package, which is not installed. "
            f"Install it with: pip install 'layoutopt[{extra}]'"
        )
        self.package = package
        self.extra = extra

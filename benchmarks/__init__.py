"""Benchmarks of layoutopt (run from a checkout): ``python -m benchmarks.solvers``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path


def append_section(lines: Sequence[str], out: str | Path | None) -> str:
    """Print a markdown section (its ``lines``) and append it, with a blank line after, to ``out``
    (None: print only): the results files of the per-build diagnostics gather one section a run.

    Example:
        >>> text = append_section(["## a build", "", "| x |"], None)
        ## a build
        <BLANKLINE>
        | x |
        <BLANKLINE>
    """
    text = "\n".join(lines) + "\n"
    if out is not None:
        with open(out, "a", encoding="utf-8") as handle:
            handle.write(text + "\n")
    print(text)
    return text

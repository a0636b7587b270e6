"""The grammar of a choice's label: one formatter, one parser.

A node's choices are named by labels (the graph's ``"choices"`` attribute, what ``Solution.labels``
reports, what ``--pin``/``--forbid`` and the solution files name). A layout-selection label is one of::

    LAYOUT                          one layout in and out (a multi-input op's common layout, a boundary)
    IN->OUT                         the layouts a kernel reads and writes
    IN->OUT[KEY=VALUE,...]          and its other options (algorithm, schedule knobs...), keys sorted

Layouts and keys are words (letters, digits, ``_``); a value is an integer or a word that is not
one (``tile=4``, ``order=rows``, ``weight=NK16n``). :func:`format_label` writes a label,
:func:`parse_label` reads it back: ``parse_label(format_label(*label)) == label`` for every label
the formatter accepts. Labels of other problems (any string) are names, not statements in this
grammar: :func:`parse_label` refuses them, and :mod:`layoutopt.constraints` then matches them as
plain text.

Example:
    >>> format_label("NCHW16c", "NCHW16c", {"tile": 4, "algorithm": "winograd"})
    'NCHW16c->NCHW16c[algorithm=winograd,tile=4]'
    >>> parse_label("NCHW16c->NCHW16c[algorithm=winograd,tile=4]")
    Label(in_layout='NCHW16c', out_layout='NCHW16c', options={'algorithm': 'winograd', 'tile': 4})
    >>> parse_label("NCHW8c")
    Label(in_layout='NCHW8c', out_layout='NCHW8c', options={})
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, NamedTuple

from .errors import ProblemError

__all__ = ["Label", "format_label", "parse_label"]

_WORD = r"[A-Za-z0-9_]+"
_INTEGER = re.compile(r"^-?[0-9]+$")
_IS_WORD = re.compile(rf"^{_WORD}$")
_LABEL = re.compile(rf"^(?P<in>{_WORD})(?:->(?P<out>{_WORD}))?(?:\[(?P<options>[^\[\]]*)\])?$")
_OPTION = re.compile(rf"^(?P<key>{_WORD})=(?P<value>-[0-9]+|{_WORD})$")


class Label(NamedTuple):
    """A parsed label: the layouts a choice reads and writes, and its other options by key."""

    in_layout: str
    out_layout: str
    options: dict[str, int | str]

    @property
    def layouts(self) -> tuple[str, str]:
        """``(in_layout, out_layout)``."""
        return self.in_layout, self.out_layout


def _check_word(text: Any, what: str) -> str:
    if not isinstance(text, str) or not _IS_WORD.match(text):
        raise ProblemError(f"{what} {text!r} cannot be written in a label: it must be a word "
                           "(letters, digits, '_')")
    return text


def _value_text(key: str, value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, str) and _IS_WORD.match(value) and not _INTEGER.match(value):
        return value
    raise ProblemError(f"option {key}={value!r} cannot be written in a label: a value must be an "
                       "integer or a word that is not one")


def format_label(in_layout: str, out_layout: str | None = None,
                 options: Mapping[str, Any] | None = None) -> str:
    """The label of a choice: ``IN->OUT``, then its ``options`` in brackets, keys sorted; ``LAYOUT``
    alone when ``out_layout`` is None (one layout in and out, no options).

    Raises:
        ProblemError: a layout, key or value the grammar cannot write (so that it would not parse back).

    Example:
        >>> format_label("NCHW16c", "NCHW", {"oc_block": 16})
        'NCHW16c->NCHW[oc_block=16]'
        >>> format_label("NCHW8c")
        'NCHW8c'
    """
    _check_word(in_layout, "layout")
    if out_layout is None:
        if options:
            raise ProblemError(f"label of layout {in_layout!r}: options {dict(options)!r} need the "
                               "'IN->OUT' form")
        return in_layout
    text = f"{in_layout}->{_check_word(out_layout, 'layout')}"
    if options:
        pairs = [f"{_check_word(key, 'option key')}={_value_text(key, options[key])}"
                 for key in sorted(options)]
        text += "[" + ",".join(pairs) + "]"
    return text


def parse_label(text: str) -> Label:
    """Read a label written by :func:`format_label` (its options in any order).

    Raises:
        ProblemError: text that is not a label of this grammar, saying what is wrong.

    Example:
        >>> parse_label("NCHW->NCHW[weight=NK16n]").options
        {'weight': 'NK16n'}
    """
    match = _LABEL.match(text) if isinstance(text, str) else None
    if match is None:
        raise ProblemError(f"choice {text!r} is not a label 'LAYOUT', 'IN->OUT' or 'IN->OUT[KEY=VALUE,...]'")
    in_layout = match.group("in")
    out_layout = match.group("out")
    options: dict[str, int | str] = {}
    if match.group("options") is not None:
        if out_layout is None:
            raise ProblemError(f"choice {text!r}: options in brackets follow an 'IN->OUT' pair")
        for item in match.group("options").split(","):
            option = _OPTION.match(item)
            if option is None:
                raise ProblemError(f"choice {text!r}: option {item!r} is not KEY=VALUE")
            key, value = option.group("key"), option.group("value")
            if key in options:
                raise ProblemError(f"choice {text!r}: option {key!r} is given twice")
            options[key] = int(value) if _INTEGER.match(value) else value
    return Label(in_layout, in_layout if out_layout is None else out_layout, options)

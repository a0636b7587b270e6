"""JSON records: the one schema check of the files layoutopt writes and reads back (solution files,
the cost cache), each failure a :class:`~layoutopt.ProblemError` naming where and the field.

:func:`parse_json` reads JSON text strictly (no bare ``NaN``/``Infinity``, no number beyond float64,
no nesting deeper than :data:`MAX_DEPTH`, no invalid UTF-8); :func:`check_fields` checks an object's
fields and their JSON types; :class:`FlatRecord` is a dataclass written as an object of its
scalar fields, read back through :func:`check_fields`.

Example:
    >>> check_fields({"name": "conv1", "cost": "fast"}, "layer 'conv1'", {"name": (str,), "cost": (float,)})
    Traceback (most recent call last):
    ...
    layoutopt.errors.ProblemError: layer 'conv1': 'cost' must be a number, not a string ("fast")
    >>> parse_json(b"[" * 200_000)
    Traceback (most recent call last):
    ...
    layoutopt.errors.ProblemError: JSON nested deeper than 64 levels
"""

from __future__ import annotations

import dataclasses
import json
import math
import typing
from collections.abc import Mapping
from typing import Any

from .errors import ProblemError

__all__ = ["JSON_TYPES", "MAX_DEPTH", "FlatRecord", "check_fields", "is_json", "json_kind", "parse_json"]

#: a JSON value's Python type -> its name in messages
JSON_TYPES = {str: "a string", bool: "true or false", int: "an integer", float: "a number",
              dict: "an object", list: "a list", type(None): "null"}
#: the deepest nesting :func:`parse_json` reads: a record of layoutopt's nests a few levels; a line
#: of 200,000 ``[`` would otherwise end in a ``RecursionError`` (or take the interpreter's stack)
MAX_DEPTH = 64


def is_json(value: Any, types: tuple[type, ...]) -> bool:
    """Whether ``value`` is a JSON value of one of ``types`` (an integer is a number, true is not).

    Example:
        >>> is_json(3, (float,)), is_json(True, (int,)), is_json(None, (str, type(None)))
        (True, False, True)
    """
    if isinstance(value, bool):
        return bool in types
    return isinstance(value, types) or (isinstance(value, int) and float in types)


def json_kind(value: Any) -> str:
    """What ``value`` is, for a message: its JSON type's name and its text, cut at 60 characters.

    Example:
        >>> json_kind([1, 2])
        'a list ([1, 2])'
    """
    try:
        text = json.dumps(value, default=repr) if is_json(value, tuple(JSON_TYPES)) else repr(value)
    except (ValueError, RecursionError):  # a nesting too deep to print
        text = "..."
    text = text if len(text) <= 60 else text[:57] + "..."
    name = next((name for t, name in JSON_TYPES.items() if is_json(value, (t,))), type(value).__name__)
    return f"{name} ({text})"


def check_fields(value: Any, where: str, required: Mapping[str, tuple[type, ...]],
                 optional: Mapping[str, tuple[type, ...]] | None = None,
                 extra: bool = False) -> dict[str, Any]:
    """``value`` if it is a JSON object with every ``required`` field and each of its fields of their
    types; with ``extra``, fields outside ``required`` and ``optional`` are allowed (unchecked), else
    refused. A :class:`~layoutopt.ProblemError` names ``where`` and the field otherwise."""
    optional = optional or {}
    if not isinstance(value, dict):
        raise ProblemError(f"{where} must be an object, not {json_kind(value)}")
    known = {**required, **optional}
    unknown = [key for key in value if key not in known]
    if unknown and not extra:
        raise ProblemError(f"{where}: unknown field {unknown[0]!r} (known: {', '.join(known)})")
    for key, types in known.items():
        if key not in value:
            if key in required:
                raise ProblemError(f"{where}: missing {key!r}")
        elif not is_json(value[key], types):
            expected = " or ".join(JSON_TYPES[t] for t in types)
            raise ProblemError(f"{where}: {key!r} must be {expected}, not {json_kind(value[key])}")
    return value


class FlatRecord:
    """A dataclass written as a JSON object of its fields as they are (strings, numbers, booleans or
    null, as their type hints say); a field with a default may be missing from the object."""

    @classmethod
    def from_json(cls, value: Any, where: str):
        hints = typing.get_type_hints(cls)
        required, optional = {}, {}
        for item in dataclasses.fields(cls):
            types = typing.get_args(hints[item.name]) or (hints[item.name],)
            has_default = item.default is not dataclasses.MISSING
            (optional if has_default else required)[item.name] = types
        return cls(**check_fields(value, where, required, optional))

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _reject_constant(token: str) -> Any:
    raise ValueError(f"bare {token} is not JSON")


def _finite_float(token: str) -> float:
    value = float(token)
    if not math.isfinite(value):
        raise ValueError(f"the number {token[:20]} is beyond the float64 range")
    return value


def _depth(text: str) -> int:
    """The deepest nesting of brackets in ``text`` outside strings (an upper bound where it is not JSON)."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def parse_json(data: bytes | str) -> Any:
    """The JSON value of ``data``, read strictly: ProblemError (a short reason, no position) for invalid
    UTF-8, invalid JSON, bare ``NaN``/``Infinity``, numbers beyond float64 (``1e400``, integers too)
    and nesting deeper than :data:`MAX_DEPTH`.

    Example:
        >>> parse_json('{"median": 1e-3}')
        {'median': 0.001}
        >>> parse_json('{"median": NaN}')
        Traceback (most recent call last):
        ...
        layoutopt.errors.ProblemError: not valid JSON (bare NaN is not JSON)
    """
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
    except UnicodeDecodeError:
        raise ProblemError("not UTF-8 text") from None
    if _depth(text) > MAX_DEPTH:
        raise ProblemError(f"JSON nested deeper than {MAX_DEPTH} levels")
    try:
        return json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float,
                          parse_int=_bounded_int)
    except json.JSONDecodeError as exc:
        raise ProblemError(f"not valid JSON ({exc.msg})") from None
    except (ValueError, RecursionError) as exc:
        raise ProblemError(f"not valid JSON ({exc})") from None


def _bounded_int(token: str) -> int:
    value = int(token)
    try:
        float(value)
    except OverflowError:  # Python reads 10**400, which no float holds
        raise ValueError(f"the integer {token[:20]}... is beyond the float64 range") from None
    return value

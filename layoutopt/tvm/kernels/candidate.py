"""The kernel candidate as a record: :class:`Candidate`, and its JSON form and label.

A *candidate* chooses a workload's kernel: the layouts it reads and writes, the kernel family
(``"algorithm"`` within the op, absent for ``"direct"``) and that family's options (schedule knobs
such as ``order``, ``reg_n`` or Winograd's ``tile``, a padded output's ``oc_block``, a dense weight
layout). Its JSON form, the candidate dict, is a cost-cache key (canonical JSON, see
:func:`~layoutopt.tvm.measure.cache.task_key`) and what the families, the graph's choices and the solution
files hold: :meth:`Candidate.to_json` gives exactly the dict :meth:`Candidate.from_json` read.
Its label is written and read by the one label grammar of :mod:`layoutopt.labels`. No TVM import.

Example:
    >>> c = Candidate.from_json({"in": "NCHW16c", "out": "NCHW16c", "algorithm": "winograd", "tile": 4})
    >>> c.algorithm, c.in_layout, dict(c.knobs)
    ('winograd', 'NCHW16c', {'tile': 4})
    >>> c.label
    'NCHW16c->NCHW16c[algorithm=winograd,tile=4]'
    >>> Candidate.from_label(c.label) == c
    True
    >>> Candidate.from_json({"in": "NCHW8c", "out": "NCHW16c"}).algorithm
    'direct'
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from ...errors import ProblemError
from ...labels import format_label, parse_label
from .workload import plain_layout

__all__ = ["ALGORITHM_KEY", "DIRECT", "Candidate", "algorithm_of"]

#: the algorithm of a candidate without an ``"algorithm"`` key: its op's direct kernel
DIRECT = "direct"
#: the candidate dict's key naming the kernel family within the workload's op
ALGORITHM_KEY = "algorithm"
_LAYOUT_KEYS = ("in", "out")


def algorithm_of(candidate: Mapping[str, Any]) -> str:
    """The kernel family a candidate dict names within its op (``"direct"`` when it names none).

    Example:
        >>> algorithm_of({"in": "NCHW16c", "out": "NCHW16c", "algorithm": "gemm"}), algorithm_of({})
        ('gemm', 'direct')
    """
    return candidate.get(ALGORITHM_KEY, DIRECT)


@dataclass(frozen=True)
class Candidate:
    """One kernel candidate: ``in_layout`` -> ``out_layout`` by ``algorithm`` with ``knobs`` (every
    other key of the candidate dict, in its order: schedule knobs, ``tile``, ``oc_block``, a dense
    ``weight`` layout...). Immutable and hashable.

    Example:
        >>> Candidate("NCHW16c", "NCHW", knobs={"oc_block": 16}).to_json()
        {'in': 'NCHW16c', 'out': 'NCHW', 'oc_block': 16}
    """

    in_layout: str
    out_layout: str
    algorithm: str = DIRECT
    knobs: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for what, value in (("in", self.in_layout), ("out", self.out_layout), ("algorithm", self.algorithm)):
            if not isinstance(value, str) or not value:
                raise ProblemError(f"candidate {what} {value!r} must be a non-empty string")
        reserved = sorted(set(self.knobs) & {*_LAYOUT_KEYS, ALGORITHM_KEY})
        if reserved:
            raise ProblemError(f"candidate knobs {dict(self.knobs)!r}: {reserved} are not knobs")
        object.__setattr__(self, "knobs", MappingProxyType(dict(self.knobs)))

    def __hash__(self) -> int:
        return hash((self.in_layout, self.out_layout, self.algorithm, tuple(sorted(self.knobs.items()))))

    @property
    def oc_block(self) -> int | None:
        """The output block of a kernel run on padded output channels (see :mod:`.padded`), or None."""
        return self.knobs.get("oc_block")

    @classmethod
    def from_json(cls, candidate: Mapping[str, Any]) -> Candidate:
        """The record of a candidate dict; ProblemError unless it has string ``"in"`` and ``"out"``
        layouts (and a string ``"algorithm"``, when it has one).

        Example:
            >>> Candidate.from_json({"in": "NC", "out": "NC", "weight": "NK16n"}).knobs
            mappingproxy({'weight': 'NK16n'})
        """
        if not isinstance(candidate, Mapping) or any(key not in candidate for key in _LAYOUT_KEYS):
            raise ProblemError(f"candidate {candidate!r} must be a dict with 'in' and 'out' layouts")
        knobs = {str(k): v for k, v in candidate.items() if k not in (*_LAYOUT_KEYS, ALGORITHM_KEY)}
        try:
            return cls(candidate["in"], candidate["out"], algorithm_of(candidate), knobs)
        except ProblemError as exc:
            raise ProblemError(f"candidate {dict(candidate)!r}: {exc}") from None

    def to_json(self) -> dict[str, Any]:
        """The candidate dict (the cost-cache key): ``in``, ``out``, ``algorithm`` unless direct, the
        knobs.

        Example:
            >>> Candidate("NCHW8c", "NCHW8c", knobs={"order": "rows"}).to_json()
            {'in': 'NCHW8c', 'out': 'NCHW8c', 'order': 'rows'}
        """
        algorithm = {} if self.algorithm == DIRECT else {ALGORITHM_KEY: self.algorithm}
        return {"in": self.in_layout, "out": self.out_layout, **algorithm, **self.knobs}

    @property
    def label(self) -> str:
        """The label naming this candidate among a node's choices (:func:`~layoutopt.labels.format_label`):
        ``IN->OUT``, then the algorithm and knobs in brackets, keys sorted. Plain layouts are written
        ``NCHW``, as every plain layout of a layout graph (a dense layer's ``NC`` too).

        Example:
            >>> Candidate("NC", "NC", knobs={"weight": "NK16n"}).label
            'NCHW->NCHW[weight=NK16n]'
        """
        plain = self.in_graph_spelling()
        options = {k: v for k, v in plain.to_json().items() if k not in _LAYOUT_KEYS}
        return format_label(plain.in_layout, plain.out_layout, options)

    @classmethod
    def from_label(cls, text: str) -> Candidate:
        """The candidate a label names (:func:`~layoutopt.labels.parse_label`); a single layout
        ``"NCHW16c"`` is ``NCHW16c -> NCHW16c``.

        Example:
            >>> Candidate.from_label("NCHW16c->NCHW8c[order=rows]").to_json()
            {'in': 'NCHW16c', 'out': 'NCHW8c', 'order': 'rows'}
        """
        parsed = parse_label(text)
        return cls.from_json({"in": parsed.in_layout, "out": parsed.out_layout, **parsed.options})

    def in_graph_spelling(self) -> Candidate:
        """This candidate with its plain layouts written ``NCHW`` (a dense layer's ``NC``), as a layout
        graph and a label write them.

        Example:
            >>> Candidate("NC", "NC", knobs={"weight": "NK"}).in_graph_spelling().in_layout
            'NCHW'
        """
        return replace(self, in_layout=plain_layout(self.in_layout), out_layout=plain_layout(self.out_layout))

"""Schedule spaces: a kernel family's schedule knobs, the values worth searching, the heuristic's point.

A kernel family's :meth:`~.family.KernelFamily.space` is the finite set of schedules a search may try
for one (workload, candidate, target): an ordered list of named discrete knobs, each with the values
allowed for this workload on this target, a joint constraint (the register tile's accumulators
fit the target's vector registers, say), and the heuristic's point, :meth:`ScheduleSpace.default`.
A point is a dict ``{knob: value}``; the searched kernel is the base candidate with the point's
knobs as extra keys (:meth:`ScheduleSpace.candidate`), which ride on the kernel's main block into the
build as every candidate does (:data:`~.common.CANDIDATE_ANNOTATION`), where the schedule reads them.

Two sets of values per knob:

- the **domain** (:func:`check_knobs`): every value the schedule builds a correct kernel with, for
  any target; a family's ``validate_candidate`` refuses a value outside it (a register tile wider
  than the output row, an order it does not know);
- the **space**: the values worth measuring on one target, pruned of tiles whose accumulators cannot
  fit its registers (which the target, not the host, decides: :func:`~.isa.vector_registers`) and of
  shapes the schedules are known to run badly. Every point of a space lies in the domain.

A search engine drives it as it likes: :meth:`~ScheduleSpace.points` enumerates it,
:meth:`~ScheduleSpace.sample` draws a seeded subset (successive halving over a sampled grid), and
:attr:`~ScheduleSpace.knobs` gives the categorical choices of an ask/tell engine (optuna), whose
proposals :meth:`~ScheduleSpace.is_valid` screens.

Example:
    >>> space = ScheduleSpace.build({"reg_n": (7, 14, 28), "oc_tile": (1, 2)}, {"reg_n": 14, "oc_tile": 1},
    ...                             valid=lambda p: p["reg_n"] * p["oc_tile"] <= 28)
    >>> space.size, space.default()
    (5, {'reg_n': 14, 'oc_tile': 1})
    >>> space.points()[:3]
    [{'reg_n': 7, 'oc_tile': 1}, {'reg_n': 7, 'oc_tile': 2}, {'reg_n': 14, 'oc_tile': 1}]
    >>> base = {"in": "NCHW16c", "out": "NCHW16c"}
    >>> space.candidate(base, {"reg_n": 7, "oc_tile": 2})      # the default's values need no key
    {'in': 'NCHW16c', 'out': 'NCHW16c', 'reg_n': 7, 'oc_tile': 2}
    >>> space.candidate(base, space.default()) == base
    True
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import ProblemError

__all__ = ["ScheduleSpace", "check_knobs", "divisors", "even_splits", "registers_hold"]


@dataclass(frozen=True)
class ScheduleSpace:
    """A finite space of schedule points: ``knobs`` (ordered ``(name, values)`` pairs, only values some
    valid point takes), the heuristic's point ``default_point`` (``(name, value)`` pairs) and every valid
    point (``valid_points``, value tuples in knob order, the default among them). Make one with
    :meth:`build`; the empty space (no knobs) has one point, ``{}``.

    Example:
        >>> ScheduleSpace().size, ScheduleSpace().points(), ScheduleSpace().candidate({"in": "NC"}, {})
        (1, [{}], {'in': 'NC'})
    """

    knobs: tuple[tuple[str, tuple[Any, ...]], ...] = ()
    default_point: tuple[tuple[str, Any], ...] = ()
    valid_points: tuple[tuple[Any, ...], ...] = ((),)

    @classmethod
    def build(cls, knobs: Mapping[str, Iterable[Any]], default: Mapping[str, Any],
              valid: Callable[[dict[str, Any]], bool] | None = None) -> ScheduleSpace:
        """The space of the points of ``knobs`` (name -> values, in the order the knobs are to be named)
        that ``valid`` accepts (None: all), and ``default``, the heuristic's point, which is a point
        whatever ``valid`` says (its values are added to the knobs' where missing).

        Raises:
            ProblemError: ``default`` names other knobs than ``knobs``.

        Example:
            >>> ScheduleSpace.build({"order": ("oc", "rows")}, {"order": "oc"}).size
            2
            >>> ScheduleSpace.build({"reg_n": (4, 8)}, {"reg_n": 6}).knobs    # the default is a point
            (('reg_n', (4, 6, 8)),)
        """
        names = list(knobs)
        if sorted(default) != sorted(names):
            raise ProblemError(f"schedule space: the default point {dict(default)} must name the knobs "
                               f"{names}")
        values = {name: _with_default(list(dict.fromkeys(knobs[name])), default[name]) for name in names}
        default_values = tuple(default[name] for name in names)
        points = [combination for combination in itertools.product(*(values[name] for name in names))
                  if combination == default_values
                  or valid is None or valid(dict(zip(names, combination, strict=True)))]
        used = [tuple(v for v in values[name] if any(point[i] == v for point in points))
                for i, name in enumerate(names)]
        return cls(tuple(zip(names, used, strict=True)), tuple(zip(names, default_values, strict=True)),
                   tuple(points))

    @property
    def names(self) -> tuple[str, ...]:
        """The knobs' names, in order."""
        return tuple(name for name, _ in self.knobs)

    @property
    def size(self) -> int:
        """How many valid points it holds (1 for the empty space)."""
        return len(self.valid_points)

    def default(self) -> dict[str, Any]:
        """The heuristic's point: the kernel the base candidate builds."""
        return dict(self.default_point)

    def points(self) -> list[dict[str, Any]]:
        """Every valid point, in the order of the knobs' values (the first knob outermost)."""
        return [dict(zip(self.names, values, strict=True)) for values in self.valid_points]

    def is_valid(self, point: Mapping[str, Any]) -> bool:
        """Is ``point`` (every knob named, no other) one of its points?

        Example:
            >>> space = ScheduleSpace.build({"reg_n": (4, 8)}, {"reg_n": 8}, valid=lambda p: p["reg_n"] > 4)
            >>> space.is_valid({"reg_n": 8}), space.is_valid({"reg_n": 4}), space.is_valid({})
            (True, False, False)
        """
        if sorted(point) != sorted(self.names):
            return False
        values = tuple(point[name] for name in self.names)
        return any(_same(values, valid) for valid in self.valid_points)

    def sample(self, n: int, seed: int = 0) -> list[dict[str, Any]]:
        """The default point, then ``n - 1`` other valid points drawn at random (without repeats) from
        ``seed``, in the order drawn: a sample's first ``m`` points are the sample of ``m`` (a search
        that grows its budget keeps what it measured); all of them (the default first) when it holds
        ``n`` or fewer.

        Example:
            >>> space = ScheduleSpace.build({"a": range(10), "b": range(10)}, {"a": 0, "b": 0})
            >>> [space.sample(3, seed=1) == space.sample(3, seed=1), len(space.sample(3)), space.sample(3)[0]]
            [True, 3, {'a': 0, 'b': 0}]
            >>> space.sample(20, seed=1)[:5] == space.sample(5, seed=1)
            True
        """
        if int(n) != n or n < 1:
            raise ProblemError(f"schedule space sample: n must be a positive integer, got {n!r}")
        default = tuple(value for _, value in self.default_point)
        others = [i for i, point in enumerate(self.valid_points) if not _same(point, default)]
        chosen = np.random.default_rng(seed).permutation(len(others))[: int(n) - 1]
        picked = [self.valid_points[others[i]] for i in chosen]
        return [dict(zip(self.names, values, strict=True)) for values in (default, *picked)]

    def candidate(self, base: Mapping[str, Any], point: Mapping[str, Any]) -> dict[str, Any]:
        """The candidate dict of ``point``: ``base`` without any knob key of this space, plus the point's
        knobs whose values differ from the default's (so the default point is the base candidate itself,
        and shares its cost-cache entry).

        Raises:
            ProblemError: ``point`` is not one of its points.
        """
        if not self.is_valid(point):
            raise ProblemError(f"schedule point {dict(point)} is not in the space of {dict(base)} "
                               f"(knobs: {dict(self.knobs)})")
        default = self.default()
        plain = {key: value for key, value in base.items() if key not in default}
        return {**plain, **{name: point[name] for name in self.names if not _same((point[name],),
                                                                                   (default[name],))}}

    def point(self, candidate: Mapping[str, Any]) -> dict[str, Any]:
        """The point a candidate dict names: its knob keys, the default's values for those it omits.

        Example:
            >>> ScheduleSpace.build({"reg_n": (4, 8), "order": ("oc", "rows")}, {"reg_n": 8, "order": "oc"}
            ...                     ).point({"in": "NCHW16c", "out": "NCHW16c", "reg_n": 4})
            {'reg_n': 4, 'order': 'oc'}
        """
        return {name: candidate.get(name, value) for name, value in self.default_point}


def _same(a: Sequence[Any], b: Sequence[Any]) -> bool:
    """Equal values of equal types (``True`` is not ``1`` here: knob values are JSON)."""
    return len(a) == len(b) and all(type(x) is type(y) and x == y for x, y in zip(a, b, strict=True))


def _with_default(values: list[Any], default: Any) -> list[Any]:
    if any(_same((value,), (default,)) for value in values):
        return values
    try:
        return sorted([*values, default])
    except TypeError:
        return [*values, default]


def check_knobs(candidate: Mapping[str, Any], domain: Mapping[str, Sequence[Any]], what: str) -> None:
    """ProblemError naming ``what`` unless each of the ``domain``'s knobs that ``candidate`` sets has a
    value among the domain's (equal and of the same type: ``True`` is not the integer 1).

    Example:
        >>> check_knobs({"in": "NCHW16c", "reg_n": 7}, {"reg_n": range(1, 15)}, "conv2d candidate")
        >>> check_knobs({"reg_n": 20}, {"reg_n": range(1, 15)}, "conv2d candidate")
        Traceback (most recent call last):
        ...
        layoutopt.errors.ProblemError: conv2d candidate: reg_n=20 is not among its values here (1..14)
    """
    for name, allowed in domain.items():
        if name in candidate and not any(_same((candidate[name],), (value,)) for value in allowed):
            raise ProblemError(f"{what}: {name}={candidate[name]!r} is not among its values here "
                               f"({_describe(allowed)})")


def _describe(values: Sequence[Any]) -> str:
    values = list(values)
    if len(values) > 3 and all(type(v) is int for v in values) and values == list(range(values[0],
                                                                                     values[-1] + 1)):
        return f"{values[0]}..{values[-1]}"
    return ", ".join(repr(v) for v in values) or "none"


def divisors(extent: int) -> tuple[int, ...]:
    """The divisors of ``extent``, ascending.

    Example:
        >>> divisors(12), divisors(7)
        ((1, 2, 3, 4, 6, 12), (1, 7))
    """
    return tuple(d for d in range(1, extent + 1) if extent % d == 0)


def even_splits(extent: int, most: int | None = None) -> list[int]:
    """The widths that split ``extent`` evenly over the fewest tiles of that width: ``ceil(extent / t)``
    for every tile count ``t`` (every divisor among them), at most ``most``; ascending. A width between
    two of them makes as many tiles as the next one up, with a smaller last tile.

    Example:
        >>> even_splits(56, 16), even_splits(7)
        ([1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14], [1, 2, 3, 4, 7])
    """
    widths = {-(-extent // tiles) for tiles in range(1, extent + 1)}
    return sorted(w for w in widths if most is None or w <= most)


def registers_hold(accumulators: int, held: int, registers: int) -> bool:
    """Do ``accumulators`` vector registers, beside the ``held`` ones a reduction step keeps live
    (weight vectors, broadcast inputs), fit the target's ``registers`` without spilling?

    Example:
        >>> registers_hold(28, 3, 32), registers_hold(14, 3, 16)
        (True, False)
    """
    return accumulators + held <= registers

"""The figures of a run: gaps to the best known objective, per-method summaries, auto vs toulbar2."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

from .records import FAILED, SOLVED, Record

__all__ = ["best_known", "summarize"]


def best_known(records: Sequence[Record]) -> dict[str, float]:
    """The least objective found per instance, over every solved record.

    Example:
        >>> best_known([Record("a", "synthetic", 2, 1, "greedy", "feasible", objective=3.0),
        ...             Record("a", "synthetic", 2, 1, "dp", "optimal", objective=2.0)])
        {'a': 2.0}
    """
    best: dict[str, float] = {}
    for r in records:
        if r.status in SOLVED and math.isfinite(r.objective):
            best[r.instance] = min(best.get(r.instance, math.inf), r.objective)
    return best


def summarize(records: Sequence[Record]) -> dict[str, Any]:
    """Fill each record's ``gap`` (to the instance's best known objective) and compute the figures.

    Returns:
        ``{"methods": {method: {"runs", "optimal", "failures", "mean_gap", "median_gap",
        "max_gap", "geomean_time"}}, "auto_vs_toulbar2": {...} or None}`` where gaps are
        fractions over the instances the method solved, and the ``auto_vs_toulbar2`` entry
        compares wall times on the instances both proved optimal.

    Example:
        >>> records = [Record("a", "synthetic", 2, 1, "greedy", "feasible", objective=3.0, wall_time=0.1),
        ...            Record("a", "synthetic", 2, 1, "dp", "optimal", objective=2.0, wall_time=0.2)]
        >>> summarize(records)["methods"]["greedy"]["mean_gap"]
        0.5
    """
    best = best_known(records)
    for r in records:
        b = best.get(r.instance)
        if b is not None and math.isfinite(r.objective):
            r.gap = (r.objective - b) / b if b > 0 else float(r.objective > b)
        else:
            r.gap = math.nan
    methods: dict[str, Any] = {}
    for name in dict.fromkeys(r.method for r in records):
        mine = [r for r in records if r.method == name]
        gaps = [r.gap for r in mine if not math.isnan(r.gap)]
        times = [r.wall_time for r in mine if r.status in SOLVED and r.wall_time > 0]
        methods[name] = {
            "runs": len(mine),
            "optimal": sum(r.status == "optimal" for r in mine),
            "failures": sum(r.status in FAILED for r in mine),
            "mean_gap": statistics.fmean(gaps) if gaps else math.nan,
            "median_gap": statistics.median(gaps) if gaps else math.nan,
            "max_gap": max(gaps) if gaps else math.nan,
            "geomean_time": statistics.geometric_mean(times) if times else math.nan,
        }
    return {"methods": methods, "auto_vs_toulbar2": _compare(records, "auto", "toulbar2")}


def _compare(records: Sequence[Record], mine: str, theirs: str) -> dict[str, Any] | None:
    by = {(r.instance, r.method): r for r in records}
    instances = list(dict.fromkeys(r.instance for r in records))
    both = [i for i in instances if (i, mine) in by and (i, theirs) in by]
    if not both:
        return None
    ratios = {}
    not_proved = [i for i in both if by[(i, mine)].status != "optimal"]
    for i in both:
        a, b = by[(i, mine)], by[(i, theirs)]
        if a.status == "optimal" and b.status == "optimal":
            ratios[i] = a.wall_time / b.wall_time
    return {
        "instances": len(both),
        "proved": len(both) - len(not_proved),
        "not_proved": not_proved,
        "ratios": ratios,
        "median_ratio": statistics.median(ratios.values()) if ratios else math.nan,
        "max_ratio": max(ratios.values()) if ratios else math.nan,
        "total_ratio": (
            sum(by[(i, mine)].wall_time for i in ratios) / sum(by[(i, theirs)].wall_time for i in ratios)
            if ratios
            else math.nan
        ),
        "slower": {i: q for i, q in ratios.items() if q > 1.0},
        "cpu_total_ratio": (
            sum(by[(i, mine)].cpu_time for i in ratios) / sum(by[(i, theirs)].cpu_time for i in ratios)
            if ratios
            else math.nan
        ),
    }

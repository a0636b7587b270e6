"""Baselines the tuned build is compared with (and guarded by): fixed layouts, fixed rules, greedy.

Each :class:`Baseline` turns a measured layout graph into an assignment of choice indices, which
:func:`~layoutopt.tvm.tune_and_build` builds, checks and times beside the tuned build. ``best_fixed``
(b*) is the faster, *measured*, of all-NCHW8c and all-NCHW16c: the best single fixed layout on the
host, and the guard the tuned build must beat to be handed back.

Example::

    assignment = BASELINES["nchw16c"].assign(graph, costs)
    layoutopt.evaluate(graph, costs, assignment)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..api import solve
from .graph import LayoutGraph
from .kernels import layout_block

__all__ = ["BASELINES", "BEST_FIXED", "Baseline", "fixed_layout_assignment"]


def fixed_layout_assignment(
    graph: LayoutGraph, layout: str = "NCHW16c", costs: Any = None, algorithms: Sequence[str] = ("direct",)
) -> dict[Hashable, int]:
    """For every node, the choice closest to running in ``layout`` throughout.

    A node whose channels ``layout``'s block does not divide takes the nearest block it offers
    (e.g. the 3-channel image into the first conv: ``NCHW3c->NCHW16c``). This is the TVM default
    "one layout everywhere" heuristic. Only choices of the given ``algorithms`` count (direct
    convolution by default), unless a node has none. Among choices of the same layouts (schedule
    knobs, such as a conv's loop order), the first, the default schedule, is taken; or, given the
    ``costs`` (:class:`~layoutopt.Costs`), the cheapest.

    Example::

        assignment = fixed_layout_assignment(graph, "NCHW16c")
        layoutopt.evaluate(graph, costs, assignment)
    """
    target_block = layout_block(layout) or 1

    def distance(block: int | None) -> float:
        return abs(math.log2((block or 1) / target_block))

    assignment = {}
    for node in graph.layout_nodes():
        choices = node.choices
        allowed = [k for k, c in enumerate(choices) if c.candidate.get("algorithm", "direct") in algorithms]
        cost = costs.nodes[node.name] if costs is not None else np.zeros(len(choices))
        assignment[node.name] = min(
            allowed or range(len(choices)),
            key=lambda k: (distance(layout_block(choices[k].out_layout)),
                           distance(layout_block(choices[k].in_layout)), cost[k]),
        )
    return assignment


@dataclass(frozen=True)
class Baseline:
    """A way of choosing every node's kernel without the solver.

    ``assign(graph, costs)`` returns an assignment of choice indices; None for builds that are not
    a layout assignment (TVM's default build). ``members``: a baseline that is the faster, measured,
    of other baselines (``best_fixed``).
    """

    name: str
    description: str
    assign: Callable[[LayoutGraph, Any], dict[Hashable, int]] | None = None
    members: tuple[str, ...] = ()


def _fixed(layout: str, tuned: bool = False) -> Callable[[LayoutGraph, Any], dict[Hashable, int]]:
    return lambda graph, costs: fixed_layout_assignment(graph, layout, costs if tuned else None)


def _greedy(graph: LayoutGraph, costs: Any) -> dict[Hashable, int]:
    return solve(graph, costs, method="greedy").assignment


#: the fixed layouts ``best_fixed`` (b*) picks from, by their measured latency
BEST_FIXED = ("nchw8c", "nchw16c")

#: name -> :class:`Baseline`, the ones :func:`~layoutopt.tvm.tune_and_build` knows
BASELINES: dict[str, Baseline] = {b.name: b for b in (
    Baseline("default", "TVM's default Relax build for llvm (no schedules)"),
    Baseline("nchw8c", "one fixed layout everywhere: NCHW8c (nearest block where 8 does not divide)",
             _fixed("NCHW8c")),
    Baseline("nchw16c", "one fixed layout everywhere: NCHW16c (nearest block where 16 does not divide)",
             _fixed("NCHW16c")),
    Baseline("best_fixed", "the faster, measured here, of NCHW8c and NCHW16c everywhere (b*)",
             members=BEST_FIXED),
    Baseline("nchw16c_tuned", "NCHW16c everywhere, each kernel in its fastest measured schedule (loop order)",
             _fixed("NCHW16c", tuned=True)),
    Baseline("greedy", "each op's fastest kernel, ignoring transforms (history best)", _greedy),
)}

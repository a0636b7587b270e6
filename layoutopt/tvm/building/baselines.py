"""The TVM side's baselines: fixed layouts everywhere, registered in :mod:`layoutopt.baselines`.

Registered here (beside the library's ``greedy`` and ``tvm-dp``): ``nchw8c``, ``nchw16c`` (one
layout everywhere, TVM's default heuristic), ``nchw16c_tuned`` (the same layouts, each kernel in
its fastest measured schedule) and ``winograd_nchw8c`` / ``winograd_nchw16c`` (the fixed rule:
Winograd wherever a conv offers it, the fixed layout everywhere).
:func:`~layoutopt.tvm.tune_and_build` also knows builds that are not assignments of the layout
problem: ``default`` (TVM's unscheduled default build) and the :data:`COMPOSITES`, each the faster,
*measured*, of its members: ``winograd_fixed`` (the faster fixed rule) and ``best_fixed`` (b*, the
faster of ``nchw8c`` and ``nchw16c``: the best single fixed layout on the host, and the guard the
tuned build must beat to be handed back).

Example:
    >>> from layoutopt.baselines import solve_baseline
    >>> from layoutopt.tvm import build_problem, models
    >>> graph, costs, meta = build_problem(models.chain((8, 8)), cache="costs.jsonl")   # measures
    >>> fixed = solve_baseline("nchw16c", graph, costs)
    >>> fixed.objective > 0, fixed.status       # predicted seconds of NCHW16c everywhere
    (True, 'feasible')
    >>> fixed.objective >= solve_baseline("nchw16c_tuned", graph, costs).objective
    True
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence

import numpy as np

from ...baselines import register_baseline
from ...problem import Problem
from ..graph.graph import LayoutGraph
from ..kernels import layout_block

__all__ = ["BEST_FIXED", "BUILDS", "COMPOSITES", "fixed_layout_assignment"]

#: the fixed-layout baselines ``best_fixed`` (b*) picks from, by their measured latency
BEST_FIXED = ("nchw8c", "nchw16c")

#: builds that are the faster, measured, of registered baselines: name -> members
COMPOSITES = {"best_fixed": BEST_FIXED, "winograd_fixed": ("winograd_nchw8c", "winograd_nchw16c")}

#: builds :func:`~layoutopt.tvm.tune_and_build` knows beyond the registered baselines: name -> description
BUILDS = {
    "default": "TVM's default Relax build for llvm (no schedules)",
    "best_fixed": "the faster, measured here, of NCHW8c and NCHW16c everywhere (b*)",
    "winograd_fixed": "the faster, measured here, of Winograd wherever it applies with NCHW8c or NCHW16c "
                      "everywhere else (the fixed rule)",
}


def fixed_layout_assignment(
    graph: LayoutGraph, layout: str = "NCHW16c", problem: Problem | None = None,
    algorithms: Sequence[str] = ("direct", "depthwise"), prefer: Sequence[str] = (),
) -> dict[Hashable, int]:
    """For every node, the choice closest to running in ``layout`` throughout.

    A node whose channels ``layout``'s block does not divide takes the nearest block it offers
    (e.g. the 3-channel image into the first conv: ``NCHW3c->NCHW16c``; SSD's 324-channel heads:
    ``NCHW16c->NCHW`` computed in padded blocks of 16, where the kernels offer it). This is TVM's default
    "one layout everywhere" heuristic. Only choices of the given ``algorithms`` count (direct
    convolution by default: a depthwise conv's blocked direct kernels are the depthwise family's),
    unless a node has none. Among choices of the same layouts (schedule
    knobs, such as a conv's loop order), the first, the default schedule, is taken; or, given the
    measured ``problem``, the cheapest. ``prefer``: algorithms (e.g. ``("winograd",)``) taken
    instead wherever a node offers one in the same layouts (the cheapest measured among them).

    Example:
        >>> from layoutopt.tvm import extract_layout_graph, models
        >>> graph = extract_layout_graph(models.chain())    # conv1: 8 -> 16 channels, conv2: 16 -> 16
        >>> def labels(assignment):
        ...     return {node: graph.nodes[node]["choices"][k] for node, k in assignment.items()}
        >>> labels(fixed_layout_assignment(graph, "NCHW16c"))
        {'data': 'NCHW', 'conv1': 'NCHW8c->NCHW16c', 'conv2': 'NCHW16c->NCHW16c', 'output:gv': 'NCHW'}
        >>> labels(fixed_layout_assignment(graph, "NCHW16c", prefer=("winograd",)))["conv2"]
        'NCHW16c->NCHW16c[algorithm=winograd,tile=2]'
    """
    target_block = layout_block(layout) or 1

    def distance(block: int | None) -> float:
        return abs(math.log2((block or 1) / target_block))

    assignment = {}
    for node in graph.layout_nodes():
        choices = node.choices
        allowed = [k for k, c in enumerate(choices) if c.record.algorithm in algorithms]
        cost = (problem.node_costs[problem.index[node.name]] if problem is not None
                else np.zeros(len(choices)))
        chosen = min(
            allowed or range(len(choices)),
            key=lambda k: (distance(layout_block(choices[k].out_layout)),
                           distance(layout_block(choices[k].in_layout)),
                           distance(choices[k].record.oc_block), cost[k]),
        )
        layouts = (choices[chosen].in_layout, choices[chosen].out_layout)
        preferred = [k for k, c in enumerate(choices) if c.record.algorithm in prefer
                     and (c.in_layout, c.out_layout) == layouts]
        assignment[node.name] = min(preferred, key=lambda k: cost[k]) if preferred else chosen
    return assignment


def nchw8c(graph: LayoutGraph, problem: Problem, time_limit: float | None = None) -> dict[Hashable, int]:
    """NCHW8c everywhere (:func:`fixed_layout_assignment`)."""
    return fixed_layout_assignment(graph, "NCHW8c")


def nchw16c(graph: LayoutGraph, problem: Problem, time_limit: float | None = None) -> dict[Hashable, int]:
    """NCHW16c everywhere (:func:`fixed_layout_assignment`)."""
    return fixed_layout_assignment(graph, "NCHW16c")


def nchw16c_tuned(graph: LayoutGraph, problem: Problem,
                  time_limit: float | None = None) -> dict[Hashable, int]:
    """NCHW16c everywhere, each kernel in its fastest measured schedule."""
    return fixed_layout_assignment(graph, "NCHW16c", problem)


def winograd_nchw8c(graph: LayoutGraph, problem: Problem,
                    time_limit: float | None = None) -> dict[Hashable, int]:
    """NCHW8c everywhere, Winograd wherever a conv offers it in those layouts (its fastest tile)."""
    return fixed_layout_assignment(graph, "NCHW8c", problem, prefer=("winograd",))


def winograd_nchw16c(graph: LayoutGraph, problem: Problem,
                     time_limit: float | None = None) -> dict[Hashable, int]:
    """NCHW16c everywhere, Winograd wherever a conv offers it in those layouts (its fastest tile)."""
    return fixed_layout_assignment(graph, "NCHW16c", problem, prefer=("winograd",))


register_baseline("winograd_nchw8c", winograd_nchw8c, replace=True,
                  description="Winograd wherever it applies, NCHW8c everywhere (the fixed rule)")
register_baseline("winograd_nchw16c", winograd_nchw16c, replace=True,
                  description="Winograd wherever it applies, NCHW16c everywhere (the fixed rule)")
register_baseline("nchw8c", nchw8c, replace=True,
                  description="one fixed layout everywhere: NCHW8c (nearest block where 8 does not divide)")
register_baseline("nchw16c", nchw16c, replace=True,
                  description="one fixed layout everywhere: NCHW16c (nearest block where 16 does not divide)")
register_baseline("nchw16c_tuned", nchw16c_tuned, replace=True,
                  description="NCHW16c everywhere, each kernel in its fastest measured schedule (loop order)")

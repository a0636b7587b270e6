"""The guard: which builds are timed beside the tuned one, and which of them is handed back.

The tuned build is always timed beside the best fixed layout (b*, the faster of all-NCHW8c and
all-NCHW16c) and, when the convs offer Winograd, beside the fixed rule "Winograd wherever it
applies" (:func:`guard_rules`); the fastest build timed side by side that keeps the pins and forbids is
handed back (:func:`fastest_build`): a cost model that misleads the solver can cost the user a
comparison, never speed.

Example:
    >>> from layoutopt.tvm import extract_layout_graph, models
    >>> guard_rules(extract_layout_graph(models.chain()))      # its 3x3 convs offer Winograd
    ['best_fixed', 'winograd_fixed']
    >>> baseline_builds(["greedy"], guard_rules(extract_layout_graph(models.chain())))
    ['greedy', 'nchw8c', 'nchw16c', 'best_fixed', 'winograd_nchw8c', 'winograd_nchw16c', 'winograd_fixed']
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence

from ...baselines import baselines as registered_baselines
from ...constraints import Constraint, allows
from ...errors import ProblemError
from ..building.baselines import BUILDS, COMPOSITES
from ..graph.graph import LayoutGraph
from .result import TUNED, Variant

__all__ = ["baseline_builds", "fastest_build", "guard_rules", "respects"]


def baseline_builds(baselines: Sequence[str], guards: Sequence[str] = ()) -> list[str]:
    """The baselines to build, each once, the guard's fixed rules included: a composite's members
    before it.

    Example:
        >>> baseline_builds(["greedy"], ["best_fixed"])
        ['greedy', 'nchw8c', 'nchw16c', 'best_fixed']
    """
    known = [*registered_baselines(), *BUILDS]
    unknown = sorted(set(baselines) - set(known))
    if unknown:
        raise ProblemError(f"unknown baseline(s) {unknown}; known: {', '.join(known)}")
    names = list(dict.fromkeys([*baselines, *guards]))
    for composite, members in COMPOSITES.items():
        if composite in names:
            names.remove(composite)
            names += [*members, composite]
    return list(dict.fromkeys(names))


def guard_rules(graph: LayoutGraph) -> list[str]:
    """The fixed rules the guard times the tuned build beside: b*, and the Winograd rule when a conv
    offers Winograd (an algorithm the tuned build may pick, so the fixed rule is a fair bar).

    Example:
        >>> from layoutopt.tvm import extract_layout_graph, models
        >>> guard_rules(extract_layout_graph(models.chain(), {"algorithms": ["direct"]}))
        ['best_fixed']
    """
    offers_winograd = any(choice.record.algorithm == "winograd"
                          for node in graph.layout_nodes() for choice in node.choices)
    return ["best_fixed", *(["winograd_fixed"] if offers_winograd else [])]


def fastest_build(graph: LayoutGraph, variants: Mapping[str, Variant], aliases: Mapping[str, str],
                  constraints: Sequence[Constraint], say: Callable[[str], None] = print) -> str:
    """The name of the fastest build timed side by side that keeps the pins and forbids: the tuned
    build unless another one measured faster, round by round (the median of its per-round ratio to
    the tuned build below 1). A composite's member is named by its composite (b* rather than
    nchw16c); TVM's default build, timed once apart, never competes.

    Example:
        NCHW16c everywhere (b*'s member here) ran 0.9x the tuned build's latency in each of 9 rounds:

        >>> from layoutopt.constraints import parse_constraints
        >>> from layoutopt.tvm import extract_layout_graph, fixed_layout_assignment, models
        >>> from layoutopt.tvm.evaluate.timing import Ratio
        >>> graph = extract_layout_graph(models.chain())
        >>> b16 = Variant("nchw16c", "NCHW16c everywhere", None, versus_tuned=Ratio.of([0.9] * 9, [1.0] * 9),
        ...               assignment=fixed_layout_assignment(graph, "NCHW16c"))
        >>> fastest_build(graph, {"nchw16c": b16}, {"best_fixed": "nchw16c"}, [])
        best_fixed measured faster than the tuned build (0.900x its latency, round by round, 95 % interval
        0.900-0.900): handing it back
        'best_fixed'
        >>> fastest_build(graph, {"nchw16c": b16}, {"best_fixed": "nchw16c"},
        ...               parse_constraints(graph, pin=["conv1=NCHW8c->NCHW8c"]))
        best_fixed measured faster than the tuned build, but breaks a pin or forbid
        'layoutopt'
    """
    composite_of = {member: composite for composite, member in aliases.items()}
    rivals = [v for name, v in variants.items() if name not in COMPOSITES and name != "default"
              and v.versus_tuned is not None and v.versus_tuned.median < 1.0]
    for variant in sorted(rivals, key=lambda v: v.versus_tuned.median):
        name, ratio = composite_of.get(variant.name, variant.name), variant.versus_tuned
        if respects(graph, variant.assignment, constraints):
            verdict = "" if ratio.settled else ", within the noise"
            say(f"{name} measured faster than the tuned build ({ratio.median:.3f}x its latency, round "
                f"by round, 95 % interval {ratio.low:.3f}-{ratio.high:.3f}{verdict}): handing it back")
            return name
        say(f"{name} measured faster than the tuned build, but breaks a pin or forbid")
    return TUNED


def respects(graph: LayoutGraph, assignment: Mapping[Hashable, int] | None,
             constraints: Sequence[Constraint]) -> bool:
    """Whether ``assignment`` keeps every pin and avoids every forbidden choice.

    Example:
        >>> from layoutopt.constraints import parse_constraints
        >>> from layoutopt.tvm import extract_layout_graph, fixed_layout_assignment, models
        >>> graph = extract_layout_graph(models.chain())
        >>> pin = parse_constraints(graph, pin=["conv1=NCHW8c->NCHW8c"])
        >>> respects(graph, fixed_layout_assignment(graph, "NCHW8c"), pin)
        True
        >>> respects(graph, fixed_layout_assignment(graph, "NCHW16c"), pin)
        False
    """
    if assignment is None:
        return False
    return all(allows(constraints, statement.node, assignment[statement.node]) for statement in constraints)



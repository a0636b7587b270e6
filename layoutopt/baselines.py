"""Baselines: the ways of choosing layouts that layoutopt is compared against, registered by name.

A baseline is a function ``(graph, problem, time_limit) -> {node: choice index}``:

- ``graph``: the layout graph (networkx). A node's ``"choices"`` attribute labels its choices;
  the TVM adapters' graphs carry more (:class:`~layoutopt.tvm.graph.graph.LayoutGraph`: each node's
  record, ``graph.layout_node(node)``, with its choices' layouts and kernels), which a fixed-layout
  baseline such as "NCHW16c everywhere" reads.
- ``problem``: the validated :class:`~layoutopt.Problem` of the graph and its costs
  (``problem.index[node]`` is the node's position, ``problem.node_costs[i]`` its cost vector).
- ``time_limit``: seconds, or None; a baseline that can run long stops by raising TimeoutError.

It returns a choice for every node. A baseline that declines an instance (e.g. one too large
for it) raises :class:`~layoutopt.ProblemError`; a ``stats`` attribute on that error is kept
by the benchmark harness.

:func:`register_baseline` adds one, :func:`get_baseline` looks one up, :func:`baselines` lists
them, and :func:`solve_baseline` runs one and returns a :class:`~layoutopt.Solution` whose
objective is recomputed from the costs, as :func:`layoutopt.solve` does. The harness
(``layoutopt bench``) runs them beside the methods; the TVM adapters build and time them.

Registered here:

- ``greedy``: each node's fastest choice, then a repair of forbidden pairs (the per-op best
  kernel, TVM's "history best"; the ``greedy`` method).
- ``tvm-dp``: the topological-order DP of TVM's graph tuner (``DPTuner``), as this repository
  re-implements it (:mod:`layoutopt.topological_dp`): not TVM's code.

Example:
    >>> import networkx as nx
    >>> def first_choices(graph, problem, time_limit=None):
    ...     return {node: 0 for node in graph}
    >>> _ = register_baseline("first-choices", first_choices, description="every node's first choice")
    >>> costs = {"nodes": {0: [1, 2], 1: [3, 1]}, "edges": {(0, 1): [[0, 5], [5, 0]]}}
    >>> sol = solve_baseline("first-choices", nx.path_graph(2), costs)
    >>> sol.assignment, sol.objective, sol.status
    ({0: 0, 1: 0}, 4.0, 'feasible')
    >>> solve_baseline("tvm-dp", nx.path_graph(2), costs).objective
    3.0
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any

import networkx as nx
import numpy as np

from . import topological_dp
from .api import solve_problem
from .errors import ProblemError
from .problem import Costs, Problem
from .solution import Solution

__all__ = ["Baseline", "baselines", "get_baseline", "register_baseline", "solve_baseline"]

#: ``(graph, problem, time_limit) -> {node: choice index}``
BaselineFunction = Callable[[nx.Graph, Problem, "float | None"], Mapping[Hashable, int]]


@dataclass(frozen=True)
class Baseline:
    """A registered baseline (see the module docstring for the function's contract).

    Attributes:
        name: its name in reports (a column of the harness's tables, a build of the TVM report).
        function: ``(graph, problem, time_limit) -> {node: choice index}``.
        description: one line saying how it chooses, and whose idea it is.
        exact: its assignment is optimal, so :func:`solve_baseline` reports it ``"optimal"``
            with a matching lower bound.
        stats: ``(graph, problem) -> dict`` of figures to report beside it (the DP's state
            counts), or None.
    """

    name: str
    function: BaselineFunction
    description: str
    exact: bool = False
    stats: Callable[[nx.Graph, Problem], dict[str, Any]] | None = None


_REGISTRY: dict[str, Baseline] = {}


def register_baseline(
    name: str,
    function: BaselineFunction,
    *,
    description: str,
    exact: bool = False,
    stats: Callable[[nx.Graph, Problem], dict[str, Any]] | None = None,
    replace: bool = False,
) -> Baseline:
    """Make ``function`` available as the baseline ``name``; return its :class:`Baseline`.

    A module-level function (not a lambda) can also run in the harness's worker processes.

    Raises:
        ProblemError: ``name`` is taken by another function and ``replace`` is False.

    Example:
        >>> def everything_first(graph, problem, time_limit=None):
        ...     return dict.fromkeys(graph, 0)
        >>> register_baseline("everything-first", everything_first, description="choice 0").name
        'everything-first'
    """
    known = _REGISTRY.get(name)
    if known is not None and known.function is not function and not replace:
        raise ProblemError(f"baseline {name!r} is already registered ({known.description}); "
                           "pass replace=True to replace it")
    entry = Baseline(name, function, description, exact, stats)
    _REGISTRY[name] = entry
    return entry


def get_baseline(name: str) -> Baseline:
    """The baseline registered as ``name``; ProblemError naming the known ones otherwise.

    Example:
        >>> get_baseline("tvm-dp").exact
        True
    """
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise ProblemError(f"unknown baseline {name!r}; known baselines: {', '.join(baselines())}") from None


def baselines() -> list[str]:
    """The registered baseline names, sorted.

    Example:
        >>> {"greedy", "tvm-dp"} <= set(baselines())
        True
    """
    return sorted(_REGISTRY)


def solve_baseline(
    baseline: str | Baseline,
    graph: nx.Graph,
    costs: Costs | Mapping | None = None,
    time_limit: float | None = None,
) -> Solution:
    """Run a baseline: its assignment as a :class:`~layoutopt.Solution`, objective recomputed.

    Args:
        baseline: a registered name, or a :class:`Baseline`.
        graph, costs: as for :func:`layoutopt.solve`.
        time_limit: seconds passed on to the baseline, or None.

    Returns:
        ``method`` is the baseline's name; ``status`` is ``"optimal"`` for an exact baseline,
        ``"feasible"`` otherwise, ``"infeasible"`` when the assignment costs ``inf``; ``stats``
        holds the baseline's figures.

    Raises:
        ProblemError: bad input, an unknown baseline, an assignment that misses a node or names
            a choice out of range, the baseline declining the instance, or a memory budget.

    Example:
        >>> import networkx as nx
        >>> costs = {"nodes": {0: [1, 2], 1: [3, 1]}, "edges": {(0, 1): [[0, 5], [5, 0]]}}
        >>> solve_baseline("greedy", nx.path_graph(2), costs).objective  # blind to the transform
        7.0
    """
    start = time.perf_counter()
    entry = baseline if isinstance(baseline, Baseline) else get_baseline(baseline)
    if time_limit is not None and not time_limit > 0:
        raise ProblemError(f"time_limit must be positive seconds or None, got {time_limit!r}")
    problem = Problem.from_graph(graph, costs)
    if problem.memory_budget is not None:  # a baseline would ignore it: its answer would not mean anything
        raise ProblemError(f"baseline {entry.name!r} does not take a memory budget (the graph has one)")
    chosen = entry.function(graph, problem, time_limit)
    if not isinstance(chosen, Mapping):
        raise ProblemError(f"baseline {entry.name!r} returned a {type(chosen).__name__}, "
                           "not a mapping node -> choice index")
    index = problem.assignment_from(chosen)
    objective = problem.evaluate(index)
    feasible = math.isfinite(objective)
    if entry.exact:
        status, lower = ("optimal", objective) if feasible else ("infeasible", math.inf)
        message = "" if feasible else "every assignment costs inf"
    else:
        status, lower = ("feasible" if feasible else "infeasible"), -math.inf
        message = "" if feasible else f"baseline {entry.name!r} chose a forbidden choice or pair"
    assignment = dict(zip(problem.nodes, index, strict=True))
    return Solution(
        assignment=assignment,
        labels={n: problem.label(i, k) for i, (n, k) in enumerate(assignment.items())},
        objective=objective,
        lower_bound=lower,
        status=status,
        method=entry.name,
        solve_time=time.perf_counter() - start,
        message=message,
        stats=entry.stats(graph, problem) if entry.stats is not None else {},
    )


def _greedy(graph: nx.Graph, problem: Problem, time_limit: float | None = None) -> dict[Hashable, int]:
    solution = solve_problem(problem, "greedy", time_limit)
    # no assignment when a node has no allowed choice at all: then each node's cheapest, inf or not
    return solution.assignment or {n: int(np.argmin(c)) for n, c in zip(problem.nodes, problem.node_costs,
                                                                          strict=True)}


register_baseline(
    "greedy",
    _greedy,
    description="each op's fastest choice, ignoring transforms, then a repair of forbidden pairs "
    "(per-op best kernel, TVM's history best)",
)
register_baseline(
    "tvm-dp",
    topological_dp.assignment,
    description="topological-order DP after TVM's graph tuner (DPTuner): this repository's "
    "re-implementation of the idea, not TVM's code",
    exact=True,
    stats=topological_dp.state_counts,
)

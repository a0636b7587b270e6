"""Costs as the network runs them: calibrate the isolated kernel measurements with in-network profiles.

A kernel timed alone, warm, and chosen as the minimum over many noisy candidates is not the kernel
the network runs: in the network its weights and inputs come from memory other layers used, and the
minimum of ~30 noisy timings is biased low (the winner's curse). Every build that
:func:`~layoutopt.tvm.tune_and_build` profiles (:mod:`layoutopt.tvm.profile`: each call timed where
it runs) tells, for each layer, what its chosen kernel really costs there, and for each inserted
transform what it costs. :class:`Calibration` gathers those observations; :meth:`Calibration.costs`
turns them into costs for the solver:

- an observed (node, choice) costs what was observed (the median over the builds that ran it);
  a multi-input op that runs as a kernel of its own (a concat: an add is fused into a conv) is
  observed too, although measured at 0: its other layouts take the median of its observed ones;
- another choice of a node with observations costs its isolated time scaled by the node's
  observed in-network / isolated ratio: the median ratio of its observed choices of the same
  algorithm (direct, Winograd and GEMM kernels use the caches differently), else of all of them;
- a node with no observation, and a transform never observed, is scaled by the median ratio of
  its kind (conv2d / dense / transforms) over the whole network, so that the calibrated costs stay
  comparable.

Solving again with the calibrated costs, building, profiling and repeating until the chosen
assignment is one already observed is the loop :func:`~layoutopt.tvm.tune_and_build` runs
(``calibrate=``): its prediction is then an in-network measurement, checked by the next profile.

Example::

    calibration = Calibration(graph, costs)
    calibration.observe(assignment, profile_calls(executable, inputs))
    solution = layoutopt.solve(graph, calibration.costs())
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from ..problem import Costs, Problem
from ..solution import Solution
from .cache import task_key
from .graph import LayoutGraph
from .kernels import layout_shape
from .problem import transform_edge_costs, transform_workload
from .profile import Call, call_category, layer_times

__all__ = ["Calibration", "calibrated_solution", "multi_input_times", "transform_calls"]


def transform_calls(calls: Sequence[Call], graph: LayoutGraph,
                    assignment: Mapping[Hashable, int]) -> dict[str, list[float]]:
    """In-network seconds of each layout transform the build of ``assignment`` inserted, keyed by
    the :func:`~layoutopt.tvm.cache.task_key` of its workload.

    A transform call is matched by its argument shapes (the source tensor in the source layout, the
    destination in the destination layout) to the transforms the graph's edges predict.

    Example::

        transform_calls(profile_calls(ex, inputs), graph, assignment)    # {task key: [seconds, ...]}
    """
    wanted: dict[tuple, str] = {}
    for producer, consumer in graph.edges:
        src = graph.choice(producer, assignment[producer]).out_layout
        dst = graph.choice(consumer, assignment[consumer]).in_layout
        edge = graph.layout_edge(producer, consumer)
        for value in edge.values if src != dst else ():
            workload = transform_workload(value.shape, src, dst, edge.dtype)
            if workload is not None:
                signature = tuple(sorted((layout_shape(value.shape, src), layout_shape(value.shape, dst))))
                wanted[signature] = task_key(workload, {})
    found: dict[str, list[float]] = defaultdict(list)
    for call in calls:
        if call_category(call.symbol) == "layout_transform":
            key = wanted.get(tuple(sorted(call.shapes)))
            if key is not None:
                found[key].append(call.seconds)
    return dict(found)


def multi_input_times(calls: Sequence[Call], graph: LayoutGraph,
                      assignment: Mapping[Hashable, int]) -> dict[Hashable, float]:
    """In-network seconds of the multi-input ops (concat) that ran as kernels of their own in the build
    of ``assignment``, matched by their inputs' and output's shapes in the chosen layout.

    Example::

        multi_input_times(profile_calls(ex, inputs), graph, assignment)    # {'concat': 0.0012, ...}
    """
    remaining = [(call, sorted(call.shapes)) for call in calls if call_category(call.symbol) == "concat"]
    times = {}
    for node in graph.layout_nodes():
        shapes = node.workload.get("shapes") or []
        if node.kind != "multi" or node.workload.get("op") != "concat" or not shapes:
            continue
        if any(shape is None or len(shape) != 4 for shape in shapes):
            continue
        axis = node.workload.get("axis", 1)
        out = list(shapes[0])
        out[axis] = sum(shape[axis] for shape in shapes)
        layout = node.choices[assignment[node.name]].out_layout
        wanted = sorted(layout_shape(shape, layout) for shape in [*shapes, out])
        for i, (call, have) in enumerate(remaining):
            if have == wanted:
                times[node.name] = call.seconds
                del remaining[i]
                break
    return times


def _median_ratio(pairs: Sequence[tuple[float, float]]) -> float | None:
    """The median of observed / isolated over pairs with a positive, finite isolated time."""
    ratios = [observed / isolated for observed, isolated in pairs if 0 < isolated < np.inf]
    return float(np.median(ratios)) if ratios else None


class Calibration:
    """In-network observations of a layout graph's kernels and transforms, and the costs they imply.

    Args:
        graph: the layout graph.
        costs: its isolated measurements (node vectors and edge matrices, seconds), as
            :func:`~layoutopt.tvm.build_problem` returns them.
        measured: the isolated cost of every measured task (``meta["measured"]`` of
            :func:`~layoutopt.tvm.build_problem`), transforms included.
        target: the target the kernels were built for (to match the profiled calls).
    """

    def __init__(self, graph: LayoutGraph, costs: Costs, measured: Mapping[str, float],
                 target: Any = None) -> None:
        self.graph, self.isolated, self.measured, self.target = graph, costs, dict(measured), target
        #: (node, choice index) -> in-network seconds, one per profiled build that ran it
        self.kernels: dict[tuple[Hashable, int], list[float]] = defaultdict(list)
        #: transform task key -> in-network seconds, one per profiled build that ran it
        self.transforms: dict[str, list[float]] = defaultdict(list)
        #: the assignments observed so far
        self.assignments: list[dict[Hashable, int]] = []

    def observe(self, assignment: Mapping[Hashable, int], calls: Sequence[Call]) -> None:
        """Record the profile ``calls`` of the build of ``assignment``."""
        for node, seconds in layer_times(calls, self.graph, assignment, self.target).items():
            self.kernels[node, assignment[node]].append(seconds)
        for node, seconds in multi_input_times(calls, self.graph, assignment).items():
            self.kernels[node, assignment[node]].append(seconds)
        for key, seconds in transform_calls(calls, self.graph, assignment).items():
            self.transforms[key].append(float(np.median(seconds)))
        self.assignments.append(dict(assignment))

    def observed(self, assignment: Mapping[Hashable, int]) -> bool:
        """Whether the build of ``assignment`` was profiled already."""
        return dict(assignment) in self.assignments

    def _algorithm(self, node: Hashable, k: int) -> str:
        return self.graph.choice(node, k).record.algorithm

    def costs(self) -> Costs:
        """The isolated costs, calibrated by every observation so far (see the module docstring)."""
        observed = {key: float(np.median(seconds)) for key, seconds in self.kernels.items()}
        per_node: dict[Hashable, list[tuple[float, float]]] = defaultdict(list)
        per_algorithm: dict[tuple[Hashable, str], list[tuple[float, float]]] = defaultdict(list)
        for (node, k), seconds in observed.items():
            pair = (seconds, float(np.asarray(self.isolated.nodes[node])[k]))
            per_node[node].append(pair)
            per_algorithm[node, self._algorithm(node, k)].append(pair)
        node_ratio = {node: _median_ratio(pairs) for node, pairs in per_node.items()}
        algorithm_ratio = {key: _median_ratio(pairs) for key, pairs in per_algorithm.items()}
        per_kind: dict[str, list[tuple[float, float]]] = defaultdict(list)
        for node, pairs in per_node.items():
            per_kind[self.graph.layout_node(node).workload.get("op", "")] += pairs
        kind_ratio = {kind: _median_ratio(pairs) for kind, pairs in per_kind.items()}
        nodes = {}
        for node, vector in self.isolated.nodes.items():
            op = self.graph.layout_node(node).workload.get("op", "")
            ratio = node_ratio.get(node) or kind_ratio.get(op) or 1.0
            calibrated = np.array(vector, dtype=float)
            for k in range(len(calibrated)):
                calibrated[k] *= algorithm_ratio.get((node, self._algorithm(node, k))) or ratio
            seen = [observed[node, k] for k in range(len(calibrated)) if (node, k) in observed]
            if seen and not np.any(calibrated):  # measured at 0 (a concat): its observed median
                calibrated[:] = float(np.median(seen))
            for k in range(len(calibrated)):
                if (node, k) in observed:
                    calibrated[k] = observed[node, k]
            nodes[node] = calibrated
        seen = {key: float(np.median(seconds)) for key, seconds in self.transforms.items()}
        ratio = _median_ratio([(s, self.measured.get(key, 0.0)) for key, s in seen.items()]) or 1.0
        transforms = {key: seen.get(key, seconds * ratio) for key, seconds in self.measured.items()}
        return Costs(nodes, transform_edge_costs(self.graph, transforms))


def calibrated_solution(calibration: Calibration, rounds: int,
                         build_and_observe: Callable[[Mapping[Hashable, int]], None],
                         solve_costs: Callable[[Costs], Solution],
                         own: Callable[[], list[Mapping[Hashable, int]]]) -> tuple[Solution, Costs]:
    """Solve with the calibrated costs, build and profile the new assignment, and again, until the
    assignment chosen is one already profiled or ``rounds`` builds were made; then solve once more
    with every observation in. Returns the solution and the costs it was chosen with.

    When the rounds ran out before the choice settled, the answer is the cheapest, under those
    costs, of layoutopt's own profiled assignments (``own()``): its prediction is then an in-network
    measurement, not an extrapolation. The solution is ``feasible``, keeps the solver's lower
    bound (still valid) and says so in its ``message``.

    Example::

        solution, costs = calibrated_solution(calibration, 2, build_and_observe,
                                              lambda costs: layoutopt.solve(graph, costs), own)
    """
    for built in range(rounds + 1):
        costs = calibration.costs()
        solution = solve_costs(costs)
        if calibration.observed(solution.assignment):
            return solution, costs
        if built < rounds:
            build_and_observe(solution.assignment)
    problem = Problem.from_graph(calibration.graph, costs)
    objective, index = min(((problem.evaluate(index), index)
                            for index in ([a[n] for n in problem.nodes] for a in own())),
                           key=lambda priced: priced[0])
    message = (f"in-network calibration did not settle in {rounds} round(s): handing on the cheapest "
               f"assignment profiled ({objective * 1e3:.3f} ms predicted; "
               f"the calibrated optimum, never built, is {solution.objective * 1e3:.3f} ms)")
    assignment = dict(zip(problem.nodes, index, strict=True))
    return replace(solution, assignment=assignment,
                   labels={n: problem.label(i, k) for i, (n, k) in enumerate(assignment.items())},
                   objective=objective, status="feasible", message=message), costs

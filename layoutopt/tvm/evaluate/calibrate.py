"""Costs as the network runs them: calibrate the isolated kernel measurements with in-network profiles.

A kernel timed alone (cold, by default, as :class:`~layoutopt.tvm.measure.runner.Runner` explains) and
chosen as the minimum over many noisy candidates is not the kernel the network runs: in the network
its weights and inputs come from memory other layers used, and the minimum of ~30 noisy timings is
biased low (the winner's curse). Every build that
:func:`~layoutopt.tvm.tune_and_build` profiles (:mod:`layoutopt.tvm.evaluate.profile`: each call timed where
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

Example:
    >>> import layoutopt
    >>> from layoutopt.tvm import apply_assignment, build, build_problem, models
    >>> from layoutopt.tvm.evaluate.profile import KernelShapes, observe, profile_calls
    >>> from layoutopt.tvm.evaluate.timing import random_inputs
    >>> graph, costs, meta = build_problem(models.chain((8, 8)), cache="costs.jsonl")
    >>> assignment = layoutopt.solve(graph, costs).assignment
    >>> calls = profile_calls(build(apply_assignment(graph.mod, graph, assignment)), random_inputs(graph.mod))
    >>> calibration = Calibration(graph, costs, meta.measured)
    >>> calibration.observe(observe(calls, graph, assignment, KernelShapes("llvm")))
    >>> calibrated = calibration.costs()        # conv1's chosen kernel costs what it took in the network
    >>> chosen = assignment["conv1"]
    >>> float(calibrated.nodes["conv1"][chosen]) == calibration.kernels["conv1", chosen][0]
    True
    >>> solution = layoutopt.solve(graph, calibrated)
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import replace

import numpy as np

from ...problem import Costs, Problem
from ...solution import Solution
from ..graph.graph import LayoutGraph
from ..measure.problem import transform_edge_costs
from .profile import Observation

__all__ = ["Calibration", "calibrated_solution"]


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
        measured: the isolated cost of every measured task (``meta.measured`` of
            :func:`~layoutopt.tvm.build_problem`), transforms included.
    """

    def __init__(self, graph: LayoutGraph, costs: Costs, measured: Mapping[str, float]) -> None:
        self.graph, self.isolated, self.measured = graph, costs, dict(measured)
        #: (node, choice index) -> in-network seconds, one per profiled build that ran it
        self.kernels: dict[tuple[Hashable, int], list[float]] = defaultdict(list)
        #: transform task key -> in-network seconds, one per profiled build that ran it
        self.transforms: dict[str, list[float]] = defaultdict(list)
        #: the assignments observed so far
        self.assignments: list[dict[Hashable, int]] = []

    def observe(self, observation: Observation) -> None:
        """Record what the profile of one build said (:func:`~layoutopt.tvm.evaluate.profile.observe`)."""
        assignment = observation.assignment
        for node, seconds in observation.kernels.items():
            self.kernels[node, assignment[node]].append(seconds)
        for key, seconds in observation.transforms.items():
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

    Example:
        As :func:`~layoutopt.tvm.tune_and_build` does: the baselines' builds observed first, then
        layoutopt's own.

        >>> import layoutopt
        >>> from layoutopt.tvm import apply_assignment, build, build_problem, fixed_layout_assignment, models
        >>> from layoutopt.tvm.evaluate.profile import KernelShapes, observe, profile_calls
        >>> from layoutopt.tvm.evaluate.timing import random_inputs
        >>> graph, costs, meta = build_problem(models.chain((8, 8)), cache="costs.jsonl")
        >>> calibration, profiled = Calibration(graph, costs, meta.measured), []
        >>> def build_and_observe(assignment):
        ...     calls = profile_calls(build(apply_assignment(graph.mod, graph, assignment)),
        ...                           random_inputs(graph.mod))
        ...     calibration.observe(observe(calls, graph, assignment, KernelShapes("llvm")))
        ...     profiled.append(assignment)
        >>> build_and_observe(fixed_layout_assignment(graph, "NCHW8c"))      # a baseline's build
        >>> build_and_observe(layoutopt.solve(graph, costs).assignment)     # the first solution's
        >>> solution, calibrated = calibrated_solution(calibration, 2, build_and_observe,
        ...                                            lambda costs: layoutopt.solve(graph, costs),
        ...                                            own=lambda: profiled[1:])    # not the baseline's
        >>> calibration.observed(solution.assignment), 2 <= len(profiled) <= 4
        (True, True)
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

"""What a tune hands back: :class:`TuneResult`, its builds (:class:`Variant`) and layers (:class:`Layer`).

Example:
    >>> from layoutopt.tvm import models, tune_and_build
    >>> result = tune_and_build(models.chain((8, 8)), cache="costs.jsonl", baselines=(), calibrate=0,
    ...                         candidates={"algorithms": ["direct"]})   # b*: the guard's one rule here
    >>> [variant.name for variant in result.variants()]
    ['layoutopt', 'nchw8c', 'nchw16c', 'best_fixed']
    >>> b_star = result.baselines["best_fixed"]     # b*'s latency over the tuned build's, round by round
    >>> b_star.versus_tuned.median == result.speedup("best_fixed"), b_star.versus_tuned.rounds >= 30
    (True, True)
    >>> result.tuned.predicted == result.solution.objective, result.tuned.max_relative_error < 1e-4
    (True, True)
    >>> [layer.node for layer in result.layers][:2]     # the output too when a transform feeds it
    ['conv1', 'conv2']
    >>> all(layer.choice == result.solution.labels[layer.node] for layer in result.layers)
    True
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np

from ...problem import Costs, Problem, format_bytes
from ...solution import Solution
from ..evaluate.check import Reference
from ..evaluate.profile import Category, Observation
from ..evaluate.timing import Noise, Ratio
from ..graph.graph import LayoutGraph
from ..kernels import describe_workload
from ..kernels.module import Fallback
from ..measure.problem import MeasureMeta
from ..measure.search import SearchStats

__all__ = ["TUNED", "Layer", "TuneResult", "Variant", "layer_table", "ms"]

#: the name of the tuned build among a result's variants
TUNED = "layoutopt"


@dataclass(frozen=True)
class Variant:
    """One build of the model: how its kernels were chosen, what the cost model predicts, what it took.

    ``module`` is the rewritten Relax module and ``executable`` its build (None for TVM's default
    build). Times are in seconds; ``predicted`` is the layout problem's objective (kernel plus transform
    times; ops outside the problem, such as pooling, are not in it); ``measured`` the median latency
    over interleaved rounds, ``spread`` its 25th-75th percentiles; ``versus_tuned`` its latency over
    the tuned build's, paired round by round (a :class:`~layoutopt.tvm.evaluate.timing.Ratio`: what the guard
    decides on). ``observation`` what its in-network profile said, matched to the layout graph
    (:func:`~layoutopt.tvm.evaluate.profile.observe`). ``max_relative_error`` its check
    (:mod:`layoutopt.tvm.evaluate.check`: against the untouched model in float64). ``fallbacks`` the functions
    of
    the build no schedule rule covered (unscheduled or serial), with their in-network time once
    profiled. ``bytes_moved`` the bytes its calls read and write per inference
    (:func:`~layoutopt.tvm.building.memory.bytes_moved`). ``storage`` its storage plan
    (:mod:`~layoutopt.tvm.building.storage`), ``concats_in_place`` how many concats its producers write in
    place
    (:func:`~layoutopt.tvm.building.storage.concat_in_place`), ``loop_order`` the parallel loop order of its
    conv kernels (``"oc"``: each kernel's own; ``"rows"``: every kernel that has the order, see
    :func:`~layoutopt.tvm.kernels.with_loop_order`). ``None`` when not applicable.
    Each stage of :mod:`layoutopt.tvm.tune.stages` fills in its part, as a new record
    (``dataclasses.replace``).
    """

    name: str
    description: str
    predicted: float | None
    measured: float | None = None
    transforms: int | None = None
    max_relative_error: float | None = None
    assignment: dict[Hashable, int] | None = None
    breakdown: list[Category] | None = None
    spread: tuple[float, float] | None = None
    versus_tuned: Ratio | None = None
    module: Any = field(default=None, repr=False)
    executable: Any = field(default=None, repr=False)
    observation: Observation | None = field(default=None, repr=False)
    fallbacks: tuple[Fallback, ...] = ()
    bytes_moved: int | None = None
    storage: str = "relax"
    concats_in_place: int = 0
    loop_order: str = "oc"

    @property
    def in_network(self) -> float | None:
        """Seconds the calls the layout problem models (kernels, transforms) took in the running
        network, to set beside ``predicted``; None when the build was not profiled."""
        if not self.breakdown:
            return None
        return sum(c.measured for c in self.breakdown if c.predicted is not None)


@dataclass
class Layer:
    """One problem node of the tuned model, with its choice and what it costs: ``kernel_time`` the
    cost the solver used (calibrated in the network when calibration ran), ``isolated_time`` the
    kernel measured alone, ``in_network`` the time of its call in the final profile."""

    node: Hashable
    op: str
    kind: str
    workload: str
    choice: str
    kernel_time: float
    best_choice: str
    best_kernel_time: float
    transform_time: float
    transforms_in: int
    in_network: float | None = None
    isolated_time: float | None = None


@dataclass
class TuneResult:
    """What :func:`tune_and_build` returns.

    Attributes:
        executable: the build handed back (``tvm.runtime.Executable`` for ``relax.VirtualMachine``):
            the tuned one, or whichever build timed beside it measured faster (see ``chosen``).
        module: the rewritten Relax ``IRModule`` it was built from.
        chosen: the name of the variant handed back (:data:`TUNED` or a baseline's).
        solution: the :class:`~layoutopt.Solution` of the layout problem.
        graph, costs: the layout graph and the costs the final solution was chosen with (seconds):
            the measured ones calibrated in the network (see ``calibrate``), or the measured ones.
        isolated_costs: the costs as measured kernel by kernel, before calibration.
        tuned: the tuned :class:`Variant` (predicted and measured latency, transforms, error).
        baselines: name -> :class:`Variant` for each baseline built.
        layers: per-layer table (:class:`Layer`), in graph order.
        timings: seconds spent per stage (prepare, check rewrite, reference, measure, solve, build,
            each baseline's build, calibrate, time, profile).
        meta: the measurement's :class:`~layoutopt.tvm.measure.problem.MeasureMeta` (what a cost is valid for,
            counts, failures, every measured task's cost).
        ran_on: where the builds were checked, timed and profiled (the runner's description).
        reference: what the builds' outputs were checked against
            (:class:`~layoutopt.tvm.evaluate.check.Reference`:
            the untouched model in float64, and its float32 build's own error), None unchecked.
        noise: how noisy the timing rounds were (:class:`~layoutopt.tvm.evaluate.timing.Noise`).
        memory: bytes the handed-back build's kernels hold (weights as packed, workspaces:
            :func:`~layoutopt.tvm.measure.problem.memory_figures`), when tuned under a ``memory_budget``
            (else None), which is the budget.
    """

    executable: Any
    module: Any
    solution: Solution
    graph: LayoutGraph
    costs: Costs
    tuned: Variant
    baselines: dict[str, Variant] = field(default_factory=dict)
    layers: list[Layer] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    meta: MeasureMeta | None = None
    target: str = ""
    chosen: str = TUNED
    isolated_costs: Costs | None = None
    fuse: bool = True
    storage: str = "relax"
    ran_on: str = "this machine"
    reference: Reference | None = field(default=None, repr=False)
    noise: Noise | None = None
    search: SearchStats | None = None
    memory: float | None = None
    memory_budget: float | None = None

    def export(self, library: str | Path, solution: str | Path | None = None,
               model: str | None = None) -> tuple[Path, Path]:
        """Write the build handed back as a shared library, and the solution file that rebuilds it
        (:mod:`layoutopt.tvm.deploy.solution_file`; default ``model.so`` -> ``model.solution.json`` beside
        it).

        Returns the two paths (both checked before either is written). ``tvm.runtime.load_module(library)``
        loads the library back, for ``relax.VirtualMachine``;
        :func:`~layoutopt.tvm.deploy.solution_file.build_from_solution` rebuilds it with no measurement.

        Example:
            >>> import numpy as np, tvm
            >>> from layoutopt.tvm import models, tune_and_build
            >>> result = tune_and_build(models.chain((8, 8)), cache="costs.jsonl", guard=False, baselines=(),
            ...                         calibrate=0, check=False)   # quick: the tuned build alone, unchecked
            >>> library, solution = result.export("chain.so", model="chain")
            >>> library.name, solution.name
            ('chain.so', 'chain.solution.json')
            >>> vm = tvm.relax.VirtualMachine(tvm.runtime.load_module(str(library)), tvm.cpu())
            >>> vm["main"](tvm.runtime.tensor(np.ones((1, 8, 8, 8), "float32"))).numpy().shape
            (1, 8, 8, 8)
        """
        from ..deploy.solution_file import export

        return export(self, library, solution, model)

    @property
    def handed_back(self) -> Variant | None:
        """The :class:`Variant` handed back (``chosen``)."""
        return self.tuned if self.chosen == self.tuned.name else self.baselines.get(self.chosen)

    def variants(self) -> list[Variant]:
        """The tuned variant, then the baselines."""
        return [self.tuned, *self.baselines.values()]

    def speedup(self, baseline: str) -> float | None:
        """Latency of ``baseline`` over the tuned build's (> 1: tuned is faster): the median of their
        per-round ratios when timed side by side, else the ratio of their medians (TVM's default
        build, timed apart)."""
        other = self.baselines.get(baseline)
        if other is not None and other.versus_tuned is not None:
            return other.versus_tuned.median
        if other is None or other.measured is None or not self.tuned.measured:
            return None
        return other.measured / self.tuned.measured

    def describe_memory(self) -> str:
        """What the handed-back build's kernels hold (:attr:`memory`), and the budget when tuned under
        one; empty without figures. The summary and the report print it."""
        if self.memory is None:
            return ""
        budget = ("" if self.memory_budget is None
                  else f", within the budget of {format_bytes(self.memory_budget)}")
        return (f"the kernels handed back hold {format_bytes(self.memory)} (weights as packed or "
                f"transformed, and workspace){budget}")

    def summary(self) -> str:
        """A few lines: predicted vs measured latency, the speed-ups over each baseline, and which
        build was handed back."""
        lines = [_variant_line(self.tuned)]
        for variant in self.baselines.values():
            speedup, ratio = self.speedup(variant.name), variant.versus_tuned
            interval = f" [{ratio.low:.2f}-{ratio.high:.2f}]" if ratio else ""
            suffix = f"   layoutopt speed-up {speedup:.2f}x{interval}" if speedup else ""
            lines.append(_variant_line(variant) + suffix)
        if self.chosen != TUNED:
            lines.append(f"handed back: {self.chosen} (it measured faster than the tuned build)")
        else:
            lines.append(f"handed back: {TUNED}")
        fell_back = self.handed_back.fallbacks if self.handed_back is not None else ()
        lines.append("functions no schedule rule covered: " + ("none" if not fell_back else
                     "; ".join(f.describe() for f in fell_back)))
        if self.memory is not None:
            lines.append(f"memory: {self.describe_memory()}")
        if self.noise is not None and self.noise.rounds:
            lines.append(f"timing: {self.noise.describe()}")
        if self.search is not None:
            lines.append(self.search.describe())
        if self.reference is not None:
            lines.append(f"check: {self.reference.describe()}")
        else:
            lines.append("check: none (outputs not compared with the untouched model)")
        lines.append(f"checked and timed on {self.ran_on}, target {self.target}")
        return "\n".join(lines)


def ms(seconds: float | None) -> str:
    """Seconds as milliseconds with three decimals, ``-`` when absent or not finite.

    Example:
        >>> ms(0.0123456), ms(None)
        ('12.346', '-')
    """
    return "-" if seconds is None or not math.isfinite(seconds) else f"{seconds * 1e3:.3f}"


def _variant_line(variant: Variant) -> str:
    spread = (f" [{ms(variant.spread[0])}-{ms(variant.spread[1])}]" if variant.spread else "")
    return (f"{variant.name:<14} predicted {ms(variant.predicted):>9} ms"
            f"   measured {ms(variant.measured):>9} ms{spread}"
            f"   transforms {variant.transforms if variant.transforms is not None else '-':>3}"
            + ("" if variant.bytes_moved is None else f"   moves {variant.bytes_moved / 1e6:.2f} MB")
            + (f"   {variant.concats_in_place} concats in place" if variant.concats_in_place else "")
            + (f"   convs {variant.loop_order} first" if variant.loop_order != "oc" else "")
            + ("" if variant.max_relative_error is None else f"   error {variant.max_relative_error:.1e}"))


def layer_table(graph: LayoutGraph, problem: Problem, assignment: Mapping[Hashable, int],
                isolated: Costs | None = None) -> list[Layer]:
    """Per problem node: choice, kernel time (and its isolated measurement), fastest kernel,
    transforms on its inputs.

    Target and multi-input ops always have a row; boundary and output nodes only when a transform
    feeds them.

    Example:
        The layers of NCHW16c everywhere, priced with a tune's costs:

        >>> from layoutopt.tvm import fixed_layout_assignment, models, tune_and_build
        >>> result = tune_and_build(models.chain((8, 8)), cache="costs.jsonl", guard=False, baselines=(),
        ...                         calibrate=0, check=False)   # quick: the tuned build alone, unchecked
        >>> layers = layer_table(result.graph, Problem.from_graph(result.graph, result.costs),
        ...                      fixed_layout_assignment(result.graph, "NCHW16c"))
        >>> [(layer.node, layer.choice, layer.transforms_in) for layer in layers]   # 16 does not divide 8
        [('conv1', 'NCHW8c->NCHW8c', 1), ('conv2', 'NCHW8c->NCHW8c', 0), ('output:gv', 'NCHW', 1)]
    """
    index = {node: i for i, node in enumerate(problem.nodes)}
    layers = []
    for name in nx.topological_sort(graph):
        node = graph.layout_node(name)
        i = index[name]
        k = assignment[name]
        best = int(np.argmin(problem.node_costs[i]))
        transform_time, transforms = 0.0, 0
        for pred in graph.predecessors(name):
            cost = float(problem.edge(index[pred], i)[assignment[pred], k])
            transform_time += cost
            transforms += cost > 0
        if not node.decides and not transforms:
            continue
        alone = float(np.asarray(isolated.nodes[name])[k]) if isolated is not None else None
        layers.append(Layer(name, node.op, node.kind, describe_workload(node.workload), node.labels[k],
                            float(problem.node_costs[i][k]), node.labels[best],
                            float(problem.node_costs[i][best]), transform_time, transforms,
                            isolated_time=alone))
    return layers

"""Turn a Relax model into a measured layout problem, ready for :func:`layoutopt.solve`.

:func:`build_problem` is the two steps in one call: :func:`~layoutopt.tvm.graph.extract.extract_layout_graph`
extracts the layout graph, and :func:`measure_graph` measures every distinct kernel (workload x
candidate) and every distinct layout transform (logical shape x source layout x destination layout)
of a layout graph once through a :class:`~layoutopt.tvm.measure.measure.Measurer` (cached and resumable,
locally or on an RPC device), and fills the costs, in seconds:

* a target node's vector holds its candidates' measured kernel times (``inf`` where a kernel failed
  to build, check or run; the reason is in ``meta.failures``);
* multi-input, boundary, input and output nodes cost 0 in every layout: element-wise ops and concat
  move the same bytes whatever the layout, so only the transforms into their common layout differ
  (and those are on the edges);
* an edge matrix entry ``[k, l]`` is the time to transform the tensor(s) arriving at the consumer from
  the producer's output layout under choice ``k`` to the consumer's input layout under choice ``l``:
  0 when equal, the measured ``layout_transform`` otherwise, ``inf`` when a block does not divide the
  channels or the transform failed.

What the measurement found beside the costs is a :class:`MeasureMeta`. :func:`memory_figures` gives
the memory each choice holds (``{"nodes": {node: [bytes per choice]}}``, shaped like the costs'
nodes), from the same workload and candidate records: ``layoutopt.solve(graph, costs,
memory=..., memory_budget=...)`` takes it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

import numpy as np

from ...problem import Costs
from ..graph.extract import Candidates, extract_layout_graph
from ..graph.graph import LayoutGraph
from ..kernels import family, layout_block, layout_transform_workload
from .cache import CostContext, task_key
from .measure import Measurer, MeasureResult, MeasureStats
from .runner import Runner

__all__ = ["MeasureFailure", "MeasureMeta", "build_problem", "kernel_tasks", "measure_graph",
           "memory_figures", "transform_edge_costs", "transform_tasks", "transform_workload"]

_NO_CANDIDATE: dict[str, Any] = {}  # a layout transform has a single (empty) candidate


@dataclass(frozen=True)
class MeasureFailure:
    """A kernel or transform that failed to build, check or run (its cost is ``inf``), and why."""

    workload: dict[str, Any]
    candidate: dict[str, Any]
    error: str

    def to_json(self) -> dict[str, Any]:
        """The failure as the JSON object ``meta["failures"]`` listed before this record."""
        return {"workload": self.workload, "candidate": self.candidate, "error": self.error}


@dataclass(frozen=True)
class MeasureMeta:
    """What measuring a layout graph found beside its costs (:func:`measure_graph`).

    Attributes:
        context: what the costs are valid for, and the key of their cost-cache records
            (:class:`~layoutopt.tvm.measure.cache.CostContext`): ``context.target`` is the target's JSON dict,
            ``context.device`` the device the costs are for (None: this machine; ``"rpc:KEY"``).
        stats: the measurement's counts and seconds (:class:`~layoutopt.tvm.measure.measure.MeasureStats`).
        failures: every distinct kernel and transform that failed (:class:`MeasureFailure`).
        measured: the isolated cost in seconds of every kernel and transform measured, keyed by
            :func:`~layoutopt.tvm.measure.cache.task_key`.
        seconds: wall seconds per step: ``"measure"``, and ``"extract"`` from :func:`build_problem`.

    Example:
        >>> from layoutopt.tvm.measure.cache import CostContext
        >>> meta = MeasureMeta(CostContext({"kind": "llvm", "mcpu": "znver3"}, "0.27.0.post1", 5))
        >>> meta.context.target["mcpu"], meta.stats.measured, meta.to_json()["context"]["timing"]
        ('znver3', 0, 'cold')
    """

    context: CostContext
    stats: MeasureStats = field(default_factory=MeasureStats)
    failures: tuple[MeasureFailure, ...] = ()
    measured: Mapping[str, float] = field(default_factory=dict)
    seconds: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "failures", tuple(self.failures))
        object.__setattr__(self, "measured", MappingProxyType(dict(self.measured)))
        object.__setattr__(self, "seconds", MappingProxyType(dict(self.seconds)))

    def to_json(self) -> dict[str, Any]:
        """The metadata as a JSON object (e.g. beside a benchmark's results)."""
        return {"context": self.context.to_json(), "stats": self.stats.to_json(),
                "failures": [failure.to_json() for failure in self.failures], "measured": dict(self.measured),
                "seconds": dict(self.seconds)}


def build_problem(
    mod,
    target: Any = "llvm",
    candidates: Candidates = None,
    cache: Any = None,
    runner: Runner | None = None,
    *,
    timeout: float = 60.0,
    check: bool = True,
    progress: bool | None = None,
    fuse: bool = True,
) -> tuple[LayoutGraph, Costs, MeasureMeta]:
    """Extract ``mod``'s layout graph and measure its costs; returns ``(graph, costs, meta)``.

    Args:
        mod: a Relax ``IRModule`` with static shapes (``from_onnx``, ``from_exported_program``,
            :mod:`layoutopt.tvm.frontend.models`), which :func:`~layoutopt.tvm.prepare` normalises first.
        target, cache, runner, timeout, check, progress: as :func:`measure_graph` takes them.
        candidates: channel blocks to try (default ``(4, 8, 16, 32, 64)``, plus ``C`` when ``C < 8``),
            options ``{"blocks": [...], "orders": ["oc", "rows"], "algorithms": [...]}``, or a function
            ``workload -> list of candidate dicts`` for conv2d/dense nodes (see
            :func:`~layoutopt.tvm.extract_layout_graph`).
        fuse: measure each conv2d with the elementwise epilogue a fused build gives it (see
            :func:`~layoutopt.tvm.extract_layout_graph`); False for unfused builds.

    Returns:
        ``graph``: the :class:`~layoutopt.tvm.graph.graph.LayoutGraph` (node keys are binding names of
        ``graph.mod``, the prepared module to rewrite); ``costs`` and ``meta`` as :func:`measure_graph`
        returns them, ``meta.seconds`` with the extraction's too.

    Raises:
        ProblemError: a bad module, shape, target, runner or candidate set (before measuring).

    Example:
        >>> import layoutopt
        >>> from layoutopt.tvm import build_problem, models
        >>> graph, costs, meta = build_problem(models.chain((8, 8)), cache="costs.jsonl")
        >>> solution = layoutopt.solve(graph, costs)      # its labels are this CPU's answer
        >>> solution.status, list(solution.labels), solution.objective > 0     # seconds
        ('optimal', ['data', 'conv1', 'conv2', 'output:gv'], True)
        >>> meta.stats.requested, len(meta.measured), meta.failures, sorted(meta.seconds)
        (32, 19, (), ['extract', 'measure'])

        The 32 tasks are conv1's and conv2's 13 kernels (the same ones: measured once) and the 6
        distinct transforms of the edges: 19 costs.
    """
    started = time.perf_counter()
    graph = extract_layout_graph(mod, candidates, fuse=fuse)
    extract_seconds = time.perf_counter() - started
    costs, meta = measure_graph(graph, target, cache, runner, timeout=timeout, check=check, progress=progress)
    return graph, costs, replace(meta, seconds={"extract": extract_seconds, **meta.seconds})


def measure_graph(
    graph: LayoutGraph,
    target: Any = "llvm",
    cache: Any = None,
    runner: Runner | None = None,
    *,
    timeout: float = 60.0,
    check: bool = True,
    progress: bool | None = None,
    node_costs: Mapping[str, float] | None = None,
) -> tuple[Costs, MeasureMeta]:
    """Measure the costs of a layout graph's choices; returns ``(costs, meta)``.

    Args:
        graph: a layout graph (:func:`~layoutopt.tvm.extract_layout_graph`), measured as extracted.
        target: the CPU to measure for (see :func:`~layoutopt.tvm.resolve_target`).
        cache: a ``.jsonl`` path or :class:`~layoutopt.tvm.measure.cache.CostCache` keeping every
            measurement; a rerun measures only what is missing. None: memory only.
        runner: where kernels run: :class:`~layoutopt.tvm.measure.runner.LocalRunner` (default) or
            :class:`~layoutopt.tvm.measure.runner.RPCRunner` for a device behind a TVM RPC tracker.
        timeout: seconds one kernel may take to build, check and run before it counts as failed.
        check: compare every kernel's output with numpy once (a wrong kernel counts as failed).
        progress: show a progress bar with an ETA (None: when stderr is a terminal).
        node_costs: seconds that replace the measured cost of a node's choice, keyed by
            :func:`~layoutopt.tvm.measure.cache.task_key` of (its node's workload, its candidate): the
            schedule search's re-timed finalists
            (:meth:`~layoutopt.tvm.measure.search.SearchResult.retimed_cost`).
            ``meta.measured`` keeps what the cache measured.

    Returns:
        ``costs``: a :class:`~layoutopt.Costs` of node vectors and edge matrices in seconds;
        ``meta``: a :class:`MeasureMeta`.

    Raises:
        ProblemError: a bad target, runner, workload or candidate (before measuring).

    Example:
        >>> from layoutopt.tvm import extract_layout_graph, measure_graph, models
        >>> graph = extract_layout_graph(models.chain((8, 8)))
        >>> costs, meta = measure_graph(graph, cache="costs.jsonl")
        >>> costs.nodes["conv1"].shape, costs.edges["conv1", "conv2"].shape     # 13 kernels each
        ((13,), (13, 13))
        >>> meta.failures, meta.context.target["kind"], meta.context.timing
        ((), 'llvm', 'cold')
    """
    started = time.perf_counter()
    tasks = kernel_tasks(graph) + transform_tasks(graph)
    with Measurer(target=target, cache=cache, runner=runner, timeout=timeout, check=check,
                  progress=progress) as measurer:
        results = measurer.measure(tasks, desc="measuring kernels and transforms")
    # results come in task order; key them by the tasks as extracted (the measurer normalises its copy)
    cost = {task_key(wl, candidate): r.cost for (wl, candidate), r in zip(tasks, results, strict=True)}
    chosen = {**cost, **(node_costs or {})}
    vectors: dict[Any, np.ndarray] = {}
    for node in graph.layout_nodes():
        if node.kind == "target":
            vectors[node.name] = np.array([chosen[task_key(node.workload, choice.candidate)]
                                           for choice in node.choices])
        else:
            vectors[node.name] = np.zeros(len(node.choices))
    meta = MeasureMeta(measurer.context, measurer.stats, _failures(results), cost,
                       {"measure": time.perf_counter() - started})
    return Costs(vectors, transform_edge_costs(graph, cost)), meta


def memory_figures(graph: LayoutGraph, target: Any = None) -> dict[str, dict[Any, np.ndarray]]:
    """Bytes each choice of each node holds, shaped like the costs' node vectors: a target node's
    candidate holds its kernel's :meth:`~layoutopt.tvm.kernels.KernelFamily.memory` for ``target`` (its
    weight as packed or transformed, padded channels included, and the workspace the scheduled kernel
    allocates), every other node 0 in each layout. Each distinct kernel is figured once. A kernel
    that cannot be built for ``target`` (its measured cost is ``inf``: never chosen) holds 0.

    Not counted: the activations (the same tensors whichever kernels run; Relax plans their storage)
    and the layout transforms on the edges (a transform's source and destination are alive together,
    :meth:`~layoutopt.tvm.kernels.transform.LayoutTransform.memory`, but only while it runs, and the
    model's memory is per choice, not per pair of choices).

    Example:
        >>> from layoutopt.tvm import extract_layout_graph, models
        >>> graph = extract_layout_graph(models.chain((8, 8)), {"blocks": [8], "algorithms": ["direct"]})
        >>> memory = memory_figures(graph, {"kind": "llvm", "mcpu": "skylake-avx512"})
        >>> [choice.label for choice in graph.layout_node("conv2").choices]
        ['NCHW8c->NCHW8c', 'NCHW->NCHW']
        >>> memory["nodes"]["conv2"]    # the 8x8x3x3 weight (2304 bytes) and each kernel's workspace
        array([5504, 7808])
        >>> memory["nodes"]["data"]     # the input: no kernel
        array([0])
    """
    from ...errors import ProblemError

    figures: dict[str, int] = {}
    nodes: dict[Any, np.ndarray] = {}
    for node in graph.layout_nodes():
        if node.kind != "target":
            nodes[node.name] = np.zeros(len(node.choices), dtype=np.int64)
            continue
        row = []
        for choice in node.choices:
            key = task_key(node.workload, choice.candidate)
            if key not in figures:
                candidate = dict(choice.candidate)
                try:
                    figures[key] = family(node.workload, candidate).memory(node.workload, candidate, target)
                except (ProblemError, ValueError, RuntimeError):  # no such kernel here: never chosen
                    figures[key] = 0
            row.append(figures[key])
        nodes[node.name] = np.array(row, dtype=np.int64)
    return {"nodes": nodes}


def _failures(results: Sequence[MeasureResult]) -> tuple[MeasureFailure, ...]:
    """Every distinct (workload, candidate) that failed, in task order."""
    distinct = {task_key(r.workload, r.candidate): r for r in results}
    return tuple(MeasureFailure(r.workload, r.candidate, r.error) for r in distinct.values() if not r.ok)


def kernel_tasks(graph: LayoutGraph) -> list[tuple[dict, dict]]:
    """Every target node's (workload, candidate) kernel, in graph order (repeats included).

    Example:
        >>> from layoutopt.tvm import extract_layout_graph, models
        >>> graph = extract_layout_graph(models.chain((8, 8)), {"blocks": [8], "algorithms": ["direct"]})
        >>> tasks = kernel_tasks(graph)
        >>> [(workload["op"], candidate) for workload, candidate in tasks]     # conv1's, then conv2's
        [('conv2d', {'in': 'NCHW8c', 'out': 'NCHW8c'}), ('conv2d', {'in': 'NCHW', 'out': 'NCHW'}),
         ('conv2d', {'in': 'NCHW8c', 'out': 'NCHW8c'}), ('conv2d', {'in': 'NCHW', 'out': 'NCHW'})]
        >>> tasks[0] == tasks[2]        # the same workload: measured once
        True
    """
    return [(node.workload, dict(choice.candidate)) for node in graph.layout_nodes() if node.kind == "target"
            for choice in node.choices]


def transform_workload(shape: Sequence[int] | None, src: str, dst: str, dtype: str) -> dict[str, Any] | None:
    """The layout_transform workload of one (logical shape, src, dst), or None when it is impossible.

    Example:
        >>> transform_workload([1, 64, 56, 56], "NCHW8c", "NCHW16c", "float32")
        {'op': 'layout_transform', 'shape': [1, 64, 56, 56], 'src': 'NCHW8c', 'dst': 'NCHW16c',
         'dtype': 'float32'}
        >>> transform_workload([1, 12, 8, 8], "NCHW", "NCHW8c", "float32") is None    # 8 does not divide 12
        True
    """
    if shape is None or len(shape) != 4:
        return None  # only 4-D tensors have blocked layouts
    if any(block is not None and shape[1] % block for block in (layout_block(src), layout_block(dst))):
        return None
    return layout_transform_workload(shape, src, dst, dtype)


def _layout_pairs(graph: LayoutGraph, producer, consumer):
    """(row, column, src, dst) for every entry of the edge's matrix whose layouts differ."""
    outs = [choice.out_layout for choice in graph.layout_node(producer).choices]
    ins = [choice.in_layout for choice in graph.layout_node(consumer).choices]
    for row, src in enumerate(outs):
        for column, dst in enumerate(ins):
            if src != dst:
                yield row, column, src, dst


def transform_tasks(graph: LayoutGraph) -> list[tuple[dict, dict]]:
    """Every distinct layout transform the graph's edges may need, as ``(workload, {})`` tasks.

    Example:
        >>> from layoutopt.tvm import extract_layout_graph, models
        >>> graph = extract_layout_graph(models.chain((8, 8)), {"blocks": [8], "algorithms": ["direct"]})
        >>> [(workload["shape"], workload["src"], workload["dst"]) for workload, _ in transform_tasks(graph)]
        [([1, 8, 8, 8], 'NCHW', 'NCHW8c'), ([1, 8, 8, 8], 'NCHW8c', 'NCHW')]
    """
    tasks: dict[tuple, tuple[dict, dict]] = {}
    for producer, consumer in graph.edges:
        edge = graph.layout_edge(producer, consumer)
        for _, _, src, dst in _layout_pairs(graph, producer, consumer):
            for value in edge.values:
                workload = transform_workload(value.shape, src, dst, edge.dtype)
                if workload is not None:
                    tasks.setdefault(task_key(workload, _NO_CANDIDATE), (workload, _NO_CANDIDATE))
    return list(tasks.values())


def transform_edge_costs(graph: LayoutGraph,
                         transform_costs: Mapping[str, float]) -> dict[tuple, np.ndarray]:
    """Every edge's matrix from the costs of single transforms (keyed by
    :func:`~layoutopt.tvm.measure.cache.task_key` of their workload): 0 where the layouts agree, the sum of
    the transforms of every tensor on the edge otherwise, ``inf`` where a block does not divide.

    Example:
        The measured costs are :func:`measure_graph`'s ``meta.measured``; here every transform takes
        2 microseconds:

        >>> from layoutopt.tvm import extract_layout_graph, models
        >>> from layoutopt.tvm.measure.cache import task_key
        >>> graph = extract_layout_graph(models.chain((8, 8)), {"blocks": [8], "algorithms": ["direct"]})
        >>> seconds = {task_key(workload, candidate): 2e-6 for workload, candidate in transform_tasks(graph)}
        >>> [choice.label for choice in graph.layout_node("conv1").choices]
        ['NCHW8c->NCHW8c', 'NCHW->NCHW']
        >>> transform_edge_costs(graph, seconds)["conv1", "conv2"]
        array([[0.e+00, 2.e-06],
               [2.e-06, 0.e+00]])
    """
    return {(u, v): _edge_matrix(graph, u, v, transform_costs) for u, v in graph.edges}


def _edge_matrix(graph: LayoutGraph, producer, consumer, transform_costs: Mapping) -> np.ndarray:
    edge = graph.layout_edge(producer, consumer)
    matrix = np.zeros((len(graph.layout_node(producer).choices), len(graph.layout_node(consumer).choices)))
    for row, column, src, dst in _layout_pairs(graph, producer, consumer):
        total = 0.0
        for value in edge.values:  # every distinct tensor on this path is transformed separately
            workload = transform_workload(value.shape, src, dst, edge.dtype)
            total += math.inf if workload is None else transform_costs[task_key(workload, _NO_CANDIDATE)]
        matrix[row, column] = total
    return matrix

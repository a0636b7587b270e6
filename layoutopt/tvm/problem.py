"""Turn a Relax model into a measured layout problem, ready for :func:`layoutopt.solve`.

:func:`build_problem` extracts the layout graph (:func:`~layoutopt.tvm.extract.extract_layout_graph`),
measures every distinct kernel (workload x candidate) and every distinct layout transform
(logical shape x source layout x destination layout) once through a
:class:`~layoutopt.tvm.measure.Measurer` (cached and resumable, locally or on an RPC device), and
fills the costs, in seconds:

* a target node's vector holds its candidates' measured kernel times (``inf`` where a kernel failed
  to build, check or run; the reason is in ``meta["failures"]``);
* multi-input, boundary, input and output nodes cost 0 in every layout: element-wise ops and concat
  move the same bytes whatever the layout, so only the transforms into their common layout differ
  (and those are on the edges);
* an edge matrix entry ``[k, l]`` is the time to transform the tensor(s) arriving at the consumer from
  the producer's output layout under choice ``k`` to the consumer's input layout under choice ``l``:
  0 when equal, the measured ``layout_transform`` otherwise, ``inf`` when a block does not divide the
  channels or the transform failed.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..problem import Costs
from .cache import task_key
from .extract import Candidates, extract_layout_graph
from .graph import LayoutGraph
from .kernels import layout_block, layout_transform_workload
from .measure import Measurer, Runner

__all__ = ["build_problem", "kernel_tasks", "transform_edge_costs", "transform_tasks",
           "transform_workload"]

_NO_CANDIDATE: dict[str, Any] = {}  # a layout transform has a single (empty) candidate


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
    prepared: bool = False,
    fuse: bool = True,
    graph: LayoutGraph | None = None,
) -> tuple[LayoutGraph, Costs, dict[str, Any]]:
    """Extract ``mod``'s layout graph and measure its costs; returns ``(graph, costs, meta)``.

    Args:
        mod: a Relax ``IRModule`` with static shapes (``from_onnx``, ``from_exported_program``,
            :mod:`layoutopt.tvm.models`); :func:`~layoutopt.tvm.prepare` is applied unless
            ``prepared``.
        target: the CPU to measure for (see :func:`~layoutopt.tvm.resolve_target`).
        candidates: channel blocks to try (default ``(4, 8, 16, 32, 64)``, plus ``C`` when ``C < 8``),
            options ``{"blocks": [...], "orders": ["oc", "rows"]}``, or a function
            ``workload -> list of candidate dicts`` for conv2d/dense nodes (see
            :func:`~layoutopt.tvm.extract_layout_graph`).
        cache: a ``.jsonl`` path or :class:`~layoutopt.tvm.cache.CostCache` keeping every
            measurement; a rerun measures only what is missing. None: memory only.
        runner: where kernels run: :class:`~layoutopt.tvm.measure.LocalRunner` (default) or
            :class:`~layoutopt.tvm.measure.RPCRunner` for a device behind a TVM RPC tracker.
        timeout: seconds one kernel may take to build, check and run before it counts as failed.
        check: compare every kernel's output with numpy once (a wrong kernel counts as failed).
        progress: show a progress bar with an ETA (None: when stderr is a terminal).
        prepared: ``mod`` already went through :func:`~layoutopt.tvm.prepare`.
        fuse: measure each conv2d with the elementwise epilogue a fused build gives it (see
            :func:`~layoutopt.tvm.extract_layout_graph`); False for unfused builds.
        graph: ``mod``'s layout graph, already extracted (e.g. to check it before measuring); it is
            measured as it is (``candidates`` and ``fuse`` were its extraction's).

    Returns:
        ``graph``: the :class:`~layoutopt.tvm.graph.LayoutGraph` (see
        :func:`~layoutopt.tvm.extract_layout_graph`; node keys are binding names of ``graph.mod``, the
        prepared module to rewrite);
        ``costs``: a :class:`~layoutopt.Costs` of node vectors and edge matrices in seconds;
        ``meta``: ``{"stats": measurement counts and seconds (see
        :attr:`~layoutopt.tvm.measure.Measurer.stats`), "failures": [{"workload", "candidate",
        "error"}], "target": target key, "tvm": TVM version, "device": the device the costs are for
        (None: this machine; ``"rpc:KEY"``), "seconds": {"extract", "measure"},
        "measured": {task key (:func:`~layoutopt.tvm.cache.task_key`): seconds} of every kernel and
        transform}``.

    Raises:
        ProblemError: a bad module, shape, target, runner or candidate set (before measuring).

    Example::

        import layoutopt
        from layoutopt.tvm import build_problem, models
        graph, costs, meta = build_problem(models.residual(16, 8), candidates=[8, 16], cache="costs.jsonl")
        solution = layoutopt.solve(graph, costs)
        solution.labels["conv1"], solution.objective      # e.g. ('NCHW->NCHW', 7.3e-05): seconds
        meta["stats"]     # {'requested': 20, 'cached': 0, 'retimed': 0, 'measured': 15, 'failed': 0, ...}
    """
    started = time.perf_counter()
    if graph is None:
        graph = extract_layout_graph(mod, candidates, prepared=prepared, fuse=fuse)
    extracted = time.perf_counter()
    kernels = kernel_tasks(graph)
    transforms = transform_tasks(graph)
    with Measurer(target=target, cache=cache, runner=runner, timeout=timeout, check=check,
                  progress=progress) as measurer:
        results = measurer.measure(kernels + transforms, desc="measuring kernels and transforms")
        stats = dict(measurer.stats)
        target_key, tvm_version, device = measurer.target_key, measurer.tvm_version, measurer.device
    # results come in task order; key them by the tasks as extracted (the measurer normalises its copy)
    tasks = kernels + transforms
    cost = {task_key(wl, candidate): r.cost for (wl, candidate), r in zip(tasks, results, strict=True)}

    node_costs: dict[Any, np.ndarray] = {}
    for node in graph.layout_nodes():
        if node.kind == "target":
            node_costs[node.name] = np.array([cost[task_key(node.workload, choice.candidate)]
                                              for choice in node.choices])
        else:
            node_costs[node.name] = np.zeros(len(node.choices))
    edge_costs = transform_edge_costs(graph, cost)

    failures = [{"workload": r.workload, "candidate": r.candidate, "error": r.error}
                for r in dict((task_key(r.workload, r.candidate), r) for r in results).values() if not r.ok]
    meta = {
        "stats": stats,
        "failures": failures,
        "target": target_key,
        "tvm": tvm_version,
        "device": device,
        "seconds": {"extract": extracted - started, "measure": time.perf_counter() - extracted},
        "measured": cost,
    }
    return graph, Costs(node_costs, edge_costs), meta


def kernel_tasks(graph: LayoutGraph) -> list[tuple[dict, dict]]:
    """Every target node's (workload, candidate) kernel, in graph order (repeats included).

    Example::

        tasks = kernel_tasks(extract_layout_graph(models.chain((16, 16)), [8, 16]))
    """
    return [(node.workload, dict(choice.candidate)) for node in graph.layout_nodes() if node.kind == "target"
            for choice in node.choices]


def transform_workload(shape: Sequence[int] | None, src: str, dst: str, dtype: str) -> dict[str, Any] | None:
    """The layout_transform workload of one (logical shape, src, dst), or None when it is impossible.

    Example::

        transform_workload([1, 64, 56, 56], "NCHW8c", "NCHW16c", "float32")["op"]    # 'layout_transform'
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

    Example::

        tasks = transform_tasks(extract_layout_graph(models.chain((16, 16)), [8, 16]))
        tasks[0][0]     # {'op': 'layout_transform', 'shape': [1, 8, 8, 8], 'src': 'NCHW', 'dst': 'NCHW8c'...}
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
    :func:`~layoutopt.tvm.cache.task_key` of their workload): 0 where the layouts agree, the sum of
    the transforms of every tensor on the edge otherwise, ``inf`` where a block does not divide.

    Example::

        edges = transform_edge_costs(graph, meta["measured"])
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

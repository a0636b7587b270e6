"""Observing a build in the network: every call of ``main`` timed inside the running network, and
matched, once, to the layout graph's kernels and transforms.

The layout problem prices each kernel and transform alone (cold, by default:
:class:`~layoutopt.tvm.measure.runner.Runner`); in the network they run between other kernels, and ops
outside the model (pooling, concat, the VM's own builtins) take time too. :func:`profile_calls` times
each call in place (through the VM's instrument hook, as TVM 0.27's Relax VM has no profiler);
:func:`time_breakdown` sets those times beside the prediction per category of op, and :func:`observe`
gives each conv2d/dense layer and each layout transform its in-network time.

Example:
    >>> from layoutopt.tvm import apply_assignment, build, build_problem, fixed_layout_assignment, models
    >>> from layoutopt.tvm.evaluate.timing import random_inputs
    >>> graph, costs, meta = build_problem(models.chain((8, 8)), cache="costs.jsonl")
    >>> assignment = fixed_layout_assignment(graph, "NCHW8c")
    >>> calls = profile_calls(build(apply_assignment(graph.mod, graph, assignment)), random_inputs(graph.mod))
    >>> for row in time_breakdown(calls, graph, costs, assignment):
    ...     print(row.category, row.calls, "predicted" if row.predicted is not None else "outside the model")
    conv2d 2 predicted
    layout_transform 2 predicted
    vm builtins ... outside the model
"""

from __future__ import annotations

import functools
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import networkx as nx
import numpy as np

from ...errors import ProblemError
from ...problem import Problem
from .._tvm import import_tvm, one_blas_thread, resolve_target
from ..graph.graph import LayoutGraph
from ..kernels import layout_shape
from ..measure.cache import task_key
from ..measure.runner import LocalRunner, Runner
from ..ops import RULES, categories, kernel_categories, rules_for

__all__ = ["OTHER", "Call", "Category", "KernelShapes", "Observation", "call_category", "layer_calls",
           "observe", "profile_builds", "profile_calls", "time_breakdown"]

#: the calls that are no op's: the VM's own builtins (allocations, shape checks...), after every rule's
_NON_OP_CATEGORIES = (("vm builtins", ("vm.builtin",)),)
#: the category of every call no rule names
OTHER = "other (elementwise, reshape...)"


@dataclass
class Call:
    """One call made by ``main``: the function's symbol, its argument shapes (inputs, then the output
    buffer) and its time in seconds: the fastest of the profiled runs (see :func:`profile_builds`)."""

    symbol: str
    shapes: tuple[tuple[int, ...], ...]
    seconds: float


@dataclass
class Category:
    """A kind of op: predicted (the layout problem's share, None for ops outside it) and measured
    in-network seconds, and how many calls ran."""

    category: str
    predicted: float | None
    measured: float
    calls: int


def _category_rules() -> list[tuple[str, tuple[str, ...]]]:
    """(category, substrings of a call's symbol), first match wins: the operator rules', the VM's."""
    return [*categories(), *_NON_OP_CATEGORIES]


def call_category(symbol: str) -> str:
    """The category of a call, from its symbol: the first operator rule's category (in registry order,
    :func:`~layoutopt.tvm.ops.categories`: a fused function is named after its ops,
    ``fused_conv2d_NCHWc_add_relu``, its anchor op first) whose symbol part it holds, the VM's builtins,
    else :data:`OTHER`.

    Example:
        >>> call_category("fused_conv2d_NCHWc_add_relu3"), call_category("vm.builtin.alloc_tensor")
        ('conv2d', 'vm builtins')
    """
    for category, parts in _category_rules():
        if any(part in symbol for part in parts):
            return category
    return OTHER


def profile_calls(executable, inputs: Sequence[np.ndarray], repeat: int = 5,
                  runner: Runner | None = None,
                  statistic: Callable[[Sequence[float]], float] = min) -> list[Call]:
    """Time every call of ``main`` where it runs, ``repeat`` times after a warm-up; the fastest run of
    each call (see :func:`profile_builds`).

    The sum of the calls is not the latency (measure that with
    :func:`~layoutopt.tvm.evaluate.timing.measure_latency`): the hook pauses the VM between calls, TVM's
    worker
    threads may fall asleep there, and a kernel then pays their wake-up (on a model of hundreds of
    small kernels the calls add up to more than the latency). Each kernel's time is otherwise what it
    is in the network: its inputs and weights as cold or warm as the program leaves them.

    Example:
        >>> from layoutopt.tvm import build, models
        >>> from layoutopt.tvm.evaluate.timing import random_inputs
        >>> calls = profile_calls(build(models.chain()), random_inputs(models.chain()))
        >>> [call.shapes for call in calls if call_category(call.symbol) == "conv2d"]   # with bias, relu
        [((1, 8, 8, 8), (16, 8, 3, 3), (1, 16, 1, 1), (1, 16, 8, 8)),
         ((1, 16, 8, 8), (16, 16, 3, 3), (1, 16, 1, 1), (1, 16, 8, 8))]
        >>> all(call.seconds > 0 for call in calls)
        True
    """
    return profile_builds({"build": executable}, inputs, repeat, runner, statistic)["build"]


def profile_builds(executables: Mapping[str, Any], inputs: Sequence[np.ndarray],
                   repeat: int = 5, runner: Runner | None = None,
                   statistic: Callable[[Sequence[float]], float] = min) -> dict[str, list[Call]]:
    """:func:`profile_calls` for several builds, in interleaved rounds (one run of each per round), as
    :func:`~layoutopt.tvm.measure_latencies` times them: on a shared machine interference comes in
    episodes, and builds profiled one after the other would not see the same ones.

    Each call's time is the fastest of its ``repeat`` runs. The host's interference only ever adds
    time (a core shared with another tenant runs slower for seconds at a time), so the fastest run is
    the call's own cost, and it holds still where the median moves (``benchmarks/results/e2e-notes.md``
    measured both). The calibrated costs and the in-network check are made of these times.
    ``statistic`` (``statistics.median``, say) takes each call's ``repeat`` times instead: to set them
    beside another engine's per-node times, which do not follow the host's fast spells the way our
    fastest runs do (``benchmarks.ort_layers``).

    Raises:
        ProblemError: ``runner`` cannot time the calls of a running build (the VM's instrument hook
            calls back into Python: an RPC device cannot).

    Example:
        >>> from layoutopt.tvm import apply_layouts, build, models
        >>> from layoutopt.tvm.evaluate.timing import random_inputs
        >>> mod = models.chain()
        >>> builds = {"tuned": build(apply_layouts(mod, {"conv1": "NCHW8c->NCHW16c", "conv2": "NCHW16c"})),
        ...           "nchw": build(mod)}
        >>> profiles = profile_builds(builds, random_inputs(mod), repeat=3)
        >>> for name, calls in profiles.items():
        ...     print(name, [call_category(call.symbol) for call in calls if "vm" not in call.symbol])
        tuned ['layout_transform', 'conv2d', 'conv2d', 'layout_transform']
        nchw ['conv2d', 'conv2d']
    """
    tvm = import_tvm()
    runner = runner or LocalRunner()
    if not runner.profiles_builds:
        raise ProblemError(f"the calls of a running build cannot be timed one by one on {runner.describe()}: "
                           "the VM's instrument hook calls back into Python, in this process only")
    runs: dict[str, list[list[tuple[str, tuple, float]]]] = {name: [] for name in executables}
    started: list[float] = []

    def instrument(_func, symbol, before_run, _ret, *call_args, runs_of=None):
        if before_run:
            started.append(time.perf_counter())
        else:
            elapsed = time.perf_counter() - started.pop()
            shapes = tuple(tuple(int(d) for d in a.shape) for a in call_args if hasattr(a, "shape"))
            runs_of[-1].append((str(symbol), shapes, elapsed))
        return 0  # VMInstrumentReturnKind.NO_OP: run the call

    machines, args = {}, []
    for name, executable in executables.items():
        module, device = runner.load_build(executable)
        vm = tvm.relax.VirtualMachine(module, device)
        args = args or [tvm.runtime.tensor(x, device) for x in inputs]
        vm.set_instrument(functools.partial(instrument, runs_of=runs[name]))
        machines[name] = vm
    with one_blas_thread():
        for _ in range(repeat + 1):  # the first round warms up (first touch of the constants)
            for name, vm in machines.items():
                runs[name].append([])
                vm["main"](*args)
    profiles = {}
    for name, measured in runs.items():
        timed = measured[1:]
        profiles[name] = [Call(symbol, shapes, float(statistic([run[i][2] for run in timed])))
                          for i, (symbol, shapes, _) in enumerate(timed[0])]
    return profiles


def time_breakdown(calls: Sequence[Call], graph: LayoutGraph, costs: Any,
                   assignment: Mapping[Hashable, int]) -> list[Category]:
    """Predicted vs in-network time per category of op, for the build of ``assignment``.

    Predicted: the chosen kernels' costs (conv2d, conv2d_transpose, dense), the transforms on the edges
    (layout_transform) and, once calibrated in the network, the concats; the other categories are
    outside the layout problem (``None``).

    Example:
        >>> from layoutopt.tvm import apply_assignment, build, build_problem, fixed_layout_assignment, models
        >>> from layoutopt.tvm.evaluate.timing import random_inputs
        >>> graph, costs, meta = build_problem(models.chain((8, 8)), cache="costs.jsonl")
        >>> assignment = fixed_layout_assignment(graph, "NCHW8c")
        >>> executable = build(apply_assignment(graph.mod, graph, assignment))
        >>> breakdown = time_breakdown(profile_calls(executable, random_inputs(graph.mod)), graph, costs,
        ...                            assignment)
        >>> [(row.category, row.calls, row.predicted is not None, row.measured > 0) for row in breakdown]
        [('conv2d', 2, True, True), ('layout_transform', 2, True, True), ('vm builtins', ..., False, True)]
    """
    problem = Problem.from_graph(graph, costs)
    index = {node: i for i, node in enumerate(problem.nodes)}
    predicted: dict[str, float] = defaultdict(float)
    kernels = kernel_categories()
    in_network = {rule.category for rule in RULES if rule.in_network}
    for node in graph.layout_nodes():
        op = node.workload.get("op")
        cost = float(problem.node_costs[index[node.name]][assignment[node.name]])
        if (node.kind == "target" and op in kernels) or (op in in_network and cost > 0):
            predicted[op] += cost  # a concat is costed once calibrated in the network
    for producer, consumer in graph.edges:
        edge = problem.edge(index[producer], index[consumer])
        predicted["layout_transform"] += float(edge[assignment[producer], assignment[consumer]])
    measured: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    for call in calls:
        category = call_category(call.symbol)
        measured[category] += call.seconds
        counts[category] += 1
    order = [*dict.fromkeys(name for name, _ in _category_rules()), OTHER]
    return [Category(name, predicted.get(name),
                     measured.get(name, 0.0), counts.get(name, 0))
            for name in order if name in measured or name in predicted]


class KernelShapes:
    """The argument shapes of each kernel (workload, candidate): its inputs in the kernel's layouts, then
    its output, its fused epilogue's operands included, as the measurer built it
    (:func:`~layoutopt.tvm.kernels.kernel_tensors`: the compute alone, never scheduled nor compiled).
    Each kernel's shapes are worked out once, whatever the number of profiles matched against them.

    Example:
        >>> shapes = KernelShapes("llvm")
        >>> workload = {"op": "conv2d", "data": [1, 8, 8, 8], "kernel": [8, 8, 3, 3], "strides": [1, 1],
        ...             "padding": [1, 1, 1, 1], "dilation": [1, 1], "groups": 1, "dtype": "float32",
        ...             "epilogue": ["bias", "relu"]}
        >>> shapes(workload, {"in": "NCHW8c", "out": "NCHW8c"})     # data, weight, bias, output
        [(1, 1, 8, 8, 8), (1, 1, 3, 3, 8, 8), (1, 1, 1, 1, 8), (1, 1, 8, 8, 8)]
    """

    def __init__(self, target: Any = None) -> None:
        self.target = target
        self._shapes: dict[str, list[tuple[int, ...]]] = {}

    def __call__(self, workload: Mapping[str, Any], candidate: Mapping[str, Any]) -> list[tuple[int, ...]]:
        key = task_key(workload, candidate)
        if key not in self._shapes:
            from ..kernels.kernel import kernel_tensors
            from ..kernels.workload import validate_workload

            tvm = import_tvm()
            with resolve_target(self.target):
                tensors = kernel_tensors(tvm, validate_workload(dict(workload)), dict(candidate))
            self._shapes[key] = [tuple(int(d) for d in tensor.shape) for tensor in tensors]
        return self._shapes[key]


@dataclass(frozen=True)
class Observation:
    """What the profile of the build of ``assignment`` says about the layout problem, matched once:
    ``kernels``, the in-network seconds of each node's kernel (conv2d and dense layers, and the
    multi-input ops that ran as kernels of their own: concat), and ``transforms``, those of each layout
    transform the build inserted (keyed by the :func:`~layoutopt.tvm.measure.cache.task_key` of its
    workload)."""

    assignment: dict[Hashable, int]
    kernels: dict[Hashable, float]
    transforms: dict[str, list[float]]


def observe(calls: Sequence[Call], graph: LayoutGraph, assignment: Mapping[Hashable, int],
            shapes: KernelShapes) -> Observation:
    """Match the profile ``calls`` of the build of ``assignment`` to the graph's nodes and transforms.

    A layer is matched to the call of its kernel by argument shapes (``shapes``), layers sharing a kernel
    taking its calls in program order; a layer whose kernel ran with another epilogue than extracted (a
    residual add that did not fuse because the add runs in another layout) is matched by its data,
    weight and output shapes alone. A transform is matched by its source and destination shapes to the
    transforms the edges imply; a concat by its inputs' and output's shapes in its chosen layout.

    Example:
        >>> import layoutopt
        >>> from layoutopt.tvm import apply_assignment, build, build_problem, models
        >>> from layoutopt.tvm.evaluate.timing import random_inputs
        >>> graph, costs, meta = build_problem(models.chain((8, 8)), cache="costs.jsonl")
        >>> assignment = layoutopt.solve(graph, costs).assignment
        >>> executable = build(apply_assignment(graph.mod, graph, assignment))
        >>> observation = observe(profile_calls(executable, random_inputs(graph.mod)), graph, assignment,
        ...                       KernelShapes("llvm"))
        >>> sorted(observation.kernels), all(seconds > 0 for seconds in observation.kernels.values())
        (['conv1', 'conv2'], True)
    """
    kernels = _layer_times(calls, graph, assignment, shapes)
    kernels.update(_multi_input_times(calls, graph, assignment))
    return Observation(dict(assignment), kernels, _transform_calls(calls, graph, assignment))


def _layer_times(calls: Sequence[Call], graph: LayoutGraph, assignment: Mapping[Hashable, int],
                 shapes: KernelShapes) -> dict[Hashable, float]:
    """In-network seconds of each conv2d/dense layer of the build of ``assignment``."""
    layers = [(name, graph.layout_node(name).workload, graph.choice(name, assignment[name]).candidate)
              for name in nx.topological_sort(graph) if graph.layout_node(name).kind == "target"]
    return layer_calls(calls, layers, shapes)


def layer_calls(calls: Sequence[Call],
                layers: Sequence[tuple[Hashable, Mapping[str, Any], Mapping[str, Any]]],
                shapes: KernelShapes) -> dict[Hashable, float]:
    """In-network seconds of each kernel layer ``(name, workload, candidate)`` (in program order) of a
    build profiled as ``calls``: each layer takes the first remaining kernel call whose argument shapes
    are its kernel's (:class:`KernelShapes`), layers sharing a kernel taking its calls in program order;
    then a layer whose kernel ran with another epilogue than extracted (a residual add that did not fuse
    because the add runs in another layout) the first by its data, weight and output shapes alone.
    Layers no call matched are left out.

    Example (a solution file's layers: ``[(s.layer, s.workload, s.candidate) for s in
    load_solution(path).layers if s.kind == "target"]``):
        >>> from layoutopt.tvm import apply_assignment, build, build_problem, fixed_layout_assignment, models
        >>> from layoutopt.tvm.evaluate.timing import random_inputs
        >>> graph, costs, meta = build_problem(models.chain((8, 8)), cache="costs.jsonl")
        >>> assignment = fixed_layout_assignment(graph, "NCHW8c")
        >>> executable = build(apply_assignment(graph.mod, graph, assignment))
        >>> calls = profile_calls(executable, random_inputs(graph.mod))
        >>> layers = [(name, graph.layout_node(name).workload, graph.choice(name, assignment[name]).candidate)
        ...           for name in ("conv1", "conv2")]
        >>> times = layer_calls(calls, layers, KernelShapes("llvm"))
        >>> sorted(times), all(seconds > 0 for seconds in times.values())
        (['conv1', 'conv2'], True)
    """
    remaining = [(call, Counter(call.shapes)) for call in calls
                 if call_category(call.symbol) in kernel_categories()]
    wanted = [(name, shapes(workload, candidate)) for name, workload, candidate in layers]
    times: dict[Hashable, float] = {}
    for exact in (True, False):  # exact matches first, so that a fallback never takes another's call
        for name, arg_shapes in wanted:
            if name in times:
                continue
            need = Counter(arg_shapes if exact else [arg_shapes[0], arg_shapes[1], arg_shapes[-1]])
            for i, (call, have) in enumerate(remaining):
                if (have == need) if exact else not (need - have):
                    times[name] = call.seconds
                    del remaining[i]
                    break
    return times


def _transform_calls(calls: Sequence[Call], graph: LayoutGraph,
                     assignment: Mapping[Hashable, int]) -> dict[str, list[float]]:
    """In-network seconds of each layout transform the build of ``assignment`` inserted, by task key."""
    from ..measure.problem import transform_workload

    wanted: dict[tuple, str] = {}
    for producer, consumer in graph.edges:
        src = graph.choice(producer, assignment[producer]).out_layout
        dst = graph.choice(consumer, assignment[consumer]).in_layout
        edge = graph.layout_edge(producer, consumer)
        for value in edge.values if src != dst else ():
            workload = transform_workload(value.shape, src, dst, edge.dtype)
            if workload is not None:
                # in order, source first: a transform and its reverse (NCHW -> NCHW8c into the first conv,
                # NCHW8c -> NCHW out of the last) move tensors of the same two shapes
                shapes = layout_shape(value.shape, src), layout_shape(value.shape, dst)
                wanted[shapes] = task_key(workload, {})
    found: dict[str, list[float]] = defaultdict(list)
    for call in calls:
        if call_category(call.symbol) == "layout_transform":
            key = wanted.get((call.shapes[0], call.shapes[-1])) if call.shapes else None
            if key is not None:
                found[key].append(call.seconds)
    return dict(found)


def _multi_input_times(calls: Sequence[Call], graph: LayoutGraph,
                       assignment: Mapping[Hashable, int]) -> dict[Hashable, float]:
    """In-network seconds of the multi-input nodes that ran as kernels of their own (a concat: an
    ``in_network`` operator rule's), matched by the shapes of the call its rule says it runs as."""
    remaining = [(call, call_category(call.symbol), sorted(call.shapes)) for call in calls]
    times = {}
    for node in graph.layout_nodes():
        if node.kind != "multi":
            continue
        layout = node.choices[assignment[node.name]].out_layout
        found = next(((rule.category, shapes) for rule in rules_for(node.op) if rule.in_network
                      if (shapes := rule.call_shapes(node.workload, layout)) is not None), None)
        if found is None:
            continue
        category, wanted = found[0], sorted(found[1])
        for i, (call, called, have) in enumerate(remaining):
            if called == category and have == wanted:
                times[node.name] = call.seconds
                del remaining[i]
                break
    return times

"""One call from a Relax model to a layout-tuned, verified, timed TVM build: :func:`tune_and_build`.

extract -> measure (:func:`layoutopt.tvm.build_problem`) -> :func:`layoutopt.solve` -> apply
(:func:`layoutopt.tvm.apply_solution`) -> :func:`layoutopt.tvm.build` -> check the outputs against the
untouched model on random inputs -> time it. Baselines (a fixed ``NCHW16c`` layout everywhere, the
per-op fastest kernel ignoring transforms, TVM's default build) are built and timed the same way.

Example::

    from layoutopt.tvm import models, tune_and_build
    result = tune_and_build(models.default_model(), target="llvm", cache="costs.jsonl")
    print(result.summary())
    vm = tvm.relax.VirtualMachine(result.executable, tvm.cpu())
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np

from ..api import solve
from ..errors import ProblemError
from ..problem import Problem
from ..solution import Solution
from ._tvm import import_tvm, one_blas_thread, resolve_target
from .apply import apply_solution, build, count_layout_transforms, layout_block
from .profile import Category, layer_times, profile_builds, time_breakdown

__all__ = [
    "BASELINES",
    "Layer",
    "TuneResult",
    "Variant",
    "fixed_layout_assignment",
    "load_model",
    "measure_latencies",
    "measure_latency",
    "random_inputs",
    "relative_error",
    "tune_and_build",
]

#: baselines :func:`tune_and_build` knows: name -> description
BASELINES = {
    "default": "TVM's default Relax build for llvm (no schedules)",
    "nchw16c": "one fixed layout everywhere: NCHW16c (nearest block where 16 does not divide)",
    "nchw16c_tuned": "NCHW16c everywhere, each kernel in its fastest measured schedule (loop order)",
    "greedy": "each op's fastest kernel, ignoring transforms (history best)",
}


@dataclass
class Variant:
    """One build of the model: how its layouts were chosen, what the cost model predicts, what it took.

    Times are in seconds; ``predicted`` is the layout problem's objective (kernel plus transform
    times; ops outside the model, such as pooling, are not in it). ``None`` when not applicable.
    """

    name: str
    description: str
    predicted: float | None
    measured: float | None
    transforms: int | None = None
    max_relative_error: float | None = None
    assignment: dict[Hashable, int] | None = None
    breakdown: list[Category] | None = None


@dataclass
class Layer:
    """One problem node of the tuned model, with its choice and what it costs."""

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


@dataclass
class TuneResult:
    """What :func:`tune_and_build` returns.

    Attributes:
        executable: the tuned build (``tvm.runtime.Executable`` for ``relax.VirtualMachine``).
        module: the rewritten Relax ``IRModule`` it was built from.
        solution: the :class:`~layoutopt.Solution` of the layout problem.
        graph, costs: the layout graph and its measured costs (seconds).
        tuned: the tuned :class:`Variant` (predicted and measured latency, transforms, error).
        baselines: name -> :class:`Variant` for each baseline asked for.
        layers: per-layer table (:class:`Layer`), in graph order.
        timings: seconds spent per stage (prepare, measure, solve, apply, build, check, time).
        meta: what :func:`~layoutopt.tvm.build_problem` returned alongside the costs.
    """

    executable: Any
    module: Any
    solution: Solution
    graph: nx.DiGraph
    costs: Any
    tuned: Variant
    baselines: dict[str, Variant] = field(default_factory=dict)
    layers: list[Layer] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    meta: Any = None
    target: str = ""

    def speedup(self, baseline: str) -> float | None:
        """Measured latency of ``baseline`` divided by the tuned one (> 1: tuned is faster)."""
        other = self.baselines.get(baseline)
        if other is None or other.measured is None or not self.tuned.measured:
            return None
        return other.measured / self.tuned.measured

    def summary(self) -> str:
        """A few lines: predicted vs measured latency and the speed-ups over each baseline."""
        lines = [_variant_line(self.tuned)]
        for variant in self.baselines.values():
            speedup = self.speedup(variant.name)
            suffix = f"   layoutopt speed-up {speedup:.2f}x" if speedup else ""
            lines.append(_variant_line(variant) + suffix)
        return "\n".join(lines)


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None or not math.isfinite(seconds) else f"{seconds * 1e3:.3f} ms"


def _variant_line(variant: Variant) -> str:
    return (f"{variant.name:<10} predicted {_ms(variant.predicted):>12}"
            f"   measured {_ms(variant.measured):>12}"
            f"   transforms {variant.transforms if variant.transforms is not None else '-':>3}")


# ----------------------------------------------------------------------------------------------
# inputs, checking, timing


def random_inputs(mod, seed: int = 0) -> list[np.ndarray]:
    """One seeded random array per parameter of ``mod["main"]`` (static shapes required).

    Example::

        (x,) = random_inputs(models.chain())     # shape (1, 8, 8, 8), float32
    """
    tvm = import_tvm()
    rng = np.random.default_rng(seed)
    arrays = []
    for param in mod["main"].params:
        ty = param.ty
        if not isinstance(ty, tvm.relax.TensorType) or ty.shape is None:
            raise ProblemError(f"input {param.name!r} is not a tensor with a known shape")
        try:
            shape = [int(s) for s in ty.shape]
        except (TypeError, ValueError):
            raise ProblemError(
                f"input {param.name!r} has a dynamic shape {ty.shape}; give a static one"
            ) from None
        arrays.append(rng.standard_normal(shape).astype(str(ty.dtype)))
    return arrays


def _virtual_machine(executable):
    tvm = import_tvm()
    return tvm.relax.VirtualMachine(executable, tvm.cpu())


def _to_numpy(value) -> list[np.ndarray]:
    if hasattr(value, "numpy"):
        return [value.numpy()]
    return [array for item in value for array in _to_numpy(item)]


def run(executable, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Run ``main`` of a built module on numpy ``inputs``; the outputs as a flat list of arrays."""
    tvm = import_tvm()
    vm = _virtual_machine(executable)
    return _to_numpy(vm["main"](*[tvm.runtime.tensor(x) for x in inputs]))


def relative_error(outputs: Sequence[np.ndarray], references: Sequence[np.ndarray]) -> float:
    """Largest ``max|out - ref| / max|ref|`` over the outputs (0 for identical outputs).

    Example:
        >>> relative_error([np.array([1.0, 2.0])], [np.array([1.0, 2.5])])
        0.2
    """
    if len(outputs) != len(references):
        raise ProblemError(f"the build returns {len(outputs)} outputs, the reference {len(references)}")
    worst = 0.0
    for out, ref in zip(outputs, references, strict=True):
        if out.shape != ref.shape:
            raise ProblemError(f"output shape {out.shape} differs from the reference's {ref.shape}")
        scale = float(np.max(np.abs(ref))) or 1.0
        worst = max(worst, float(np.max(np.abs(out.astype(np.float64) - ref))) / scale)
    return worst


def measure_latency(
    executable, inputs: Sequence[np.ndarray], repeat: int = 5, min_repeat_ms: int = 200
) -> float:
    """Median end-to-end latency of ``main`` in seconds, timed by TVM's own ``time_evaluator``.

    Example::

        seconds = measure_latency(build(mod), random_inputs(mod))
    """
    tvm = import_tvm()
    vm = _virtual_machine(executable)
    args = [tvm.runtime.tensor(x) for x in inputs]
    with one_blas_thread():
        vm["main"](*args)  # warm up (first-touch of the constants, thread pool start)
        timer = vm.time_evaluator("main", tvm.cpu(), number=1, repeat=repeat, min_repeat_ms=min_repeat_ms)
        return float(np.median(timer(*args).results))


# ----------------------------------------------------------------------------------------------
# baselines


def fixed_layout_assignment(
    graph: nx.DiGraph, layout: str = "NCHW16c", costs: Any = None
) -> dict[Hashable, int]:
    """For every node, the choice closest to running in ``layout`` throughout.

    A node whose channels ``layout``'s block does not divide takes the nearest block it offers
    (e.g. the 3-channel image into the first conv: ``NCHW3c->NCHW16c``). This is the TVM default
    "one layout everywhere" heuristic. Among choices of the same layouts (schedule knobs, such as
    a conv's loop order), the first, the default schedule, is taken; or, given the ``costs``
    (:class:`~layoutopt.Costs`), the cheapest.

    Example::

        assignment = fixed_layout_assignment(graph, "NCHW16c")
        layoutopt.evaluate(graph, costs, assignment)
    """
    target_block = layout_block(layout) or 0

    def distance(pair: tuple[str, str]) -> tuple[float, float]:
        blocks = [layout_block(x) or 0 for x in pair]
        return (abs(math.log2((blocks[1] or 1) / (target_block or 1))),
                abs(math.log2((blocks[0] or 1) / (target_block or 1))))

    assignment = {}
    for node, data in graph.nodes(data=True):
        layouts = data.get("layouts") or [("NCHW", "NCHW")]
        cost = costs.nodes[node] if costs is not None else np.zeros(len(layouts))
        assignment[node] = min(range(len(layouts)), key=lambda k: (distance(tuple(layouts[k])), cost[k]))
    return assignment


# ----------------------------------------------------------------------------------------------
# model loading (the CLI's front door)


def load_model(
    path: str | Path | None = None,
    input_shape: Mapping[str, Sequence[int]] | Sequence[int] | None = None,
):
    """A Relax module from an ONNX file, a ``torch.export`` ``.pt2`` file, or the embedded default.

    Args:
        path: ``MODEL.onnx``, ``MODEL.pt2`` (needs torch), or None for
            :func:`layoutopt.tvm.models.default_model`.
        input_shape: one shape (for a single-input model) or ``{input name: shape}``; ONNX inputs
            with symbolic dimensions need it.

    Raises:
        ProblemError: unreadable file, unknown format, a shape that does not fit the model.

    Example::

        mod = load_model("resnet50.onnx", input_shape=[1, 3, 224, 224])
    """
    if path is None:
        from .models import default_model

        if input_shape is not None:
            raise ProblemError("--input-shape applies to a model file; the default model has a fixed input")
        return default_model()
    path = Path(path)
    if not path.is_file():
        raise ProblemError(f"model file {str(path)!r} does not exist")
    suffix = path.suffix.lower()
    if suffix == ".onnx":
        return _load_onnx(path, input_shape)
    if suffix in (".pt2", ".pt"):
        return _load_exported_program(path, input_shape)
    raise ProblemError(
        f"model {str(path)!r}: unknown format {suffix!r}; expected .onnx or .pt2 (torch.export)"
    )


def _load_onnx(path: Path, input_shape):
    try:
        import onnx
    except ImportError:
        from ..errors import MissingExtraError

        raise MissingExtraError("onnx", "tvm", "loading ONNX models") from None
    import_tvm()
    from tvm.relax.frontend.onnx import from_onnx

    try:
        model = onnx.load(str(path))
    except Exception as exc:  # onnx raises DecodeError, OSError... with no file name
        raise ProblemError(f"model {str(path)!r} is not a readable ONNX file: {exc}") from None
    initializers = {init.name for init in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in initializers]
    declared = {
        i.name: [d.dim_value if d.HasField("dim_value") else None for d in i.type.tensor_type.shape.dim]
        for i in inputs
    }
    shapes = _match_shapes(str(path), declared, input_shape)
    try:
        mod = from_onnx(model, shape_dict=shapes, keep_params_in_input=False)
    except Exception as exc:  # a shape the graph cannot take surfaces deep inside the importer
        raise ProblemError(f"model {str(path)!r} could not be imported with input shapes {shapes}: "
                           f"{_first_line(exc)}") from None
    return mod


def _match_shapes(where: str, declared: Mapping[str, list], input_shape) -> dict[str, list[int]]:
    if input_shape is None:
        given = {}
    elif isinstance(input_shape, Mapping):
        given = {str(k): list(v) for k, v in input_shape.items()}
    else:
        if len(declared) != 1:
            raise ProblemError(f"model {where!r} has {len(declared)} inputs ({', '.join(declared)}); "
                               "give --input-shape NAME=1,3,224,224 for each")
        given = {next(iter(declared)): list(input_shape)}
    unknown = set(given) - set(declared)
    if unknown:
        raise ProblemError(f"model {where!r} has no input named {sorted(unknown)[0]!r}; "
                           f"its inputs are {', '.join(declared)}")
    shapes = {}
    for name, dims in declared.items():
        shape = given.get(name)
        if shape is None:
            if any(d is None or d <= 0 for d in dims):
                raise ProblemError(f"model {where!r}: input {name!r} has symbolic dimensions {dims}; "
                                   "give --input-shape")
            shape = dims
        if any(not isinstance(d, (int, np.integer)) or d <= 0 for d in shape):
            raise ProblemError(f"model {where!r}: input shape {shape} for {name!r} must be positive integers")
        fits = len(shape) == len(dims) and all(
            d is None or d <= 0 or d == s for d, s in zip(dims, shape, strict=True)
        )
        if not fits:
            raise ProblemError(f"model {where!r}: input {name!r} is declared {dims}, "
                               f"which the given shape {list(shape)} does not fit")
        shapes[name] = [int(d) for d in shape]
    return shapes


def _load_exported_program(path: Path, input_shape):
    try:
        import torch
    except ImportError:
        from ..errors import MissingExtraError

        raise MissingExtraError("torch", "torch", "loading torch.export (.pt2) models") from None
    import_tvm()
    from tvm.relax.frontend.torch import from_exported_program

    if input_shape is not None:
        raise ProblemError(f"model {str(path)!r}: a torch.export program has fixed input shapes; "
                           "export it again for another shape")
    try:
        program = torch.export.load(str(path))
    except Exception as exc:
        raise ProblemError(f"model {str(path)!r} is not a readable torch.export file: {exc}") from None
    return from_exported_program(program, keep_params_as_input=False)


def _first_line(exc: BaseException) -> str:
    lines = [line for line in str(exc).splitlines() if line.strip()]
    return lines[-1] if lines else type(exc).__name__


# ----------------------------------------------------------------------------------------------
# the one call


def tune_and_build(
    mod,
    target: Any = "llvm",
    method: str = "auto",
    cache: str | Path | None = None,
    runner: Any = None,
    *,
    candidates: Any = None,
    time_limit: float | None = None,
    baselines: Sequence[str] = ("nchw16c", "greedy"),
    check: bool = True,
    rtol: float = 1e-4,
    seed: int = 0,
    repeat: int = 5,
    fuse: bool = True,
    profile: bool = True,
    progress: bool | Callable[[str], None] = False,
) -> TuneResult:
    """Extract, measure, solve, apply and build ``mod``; verify the outputs and time the build.

    Args:
        mod: a Relax ``IRModule`` (e.g. from ``from_onnx`` / ``from_exported_program``, or
            :mod:`layoutopt.tvm.models`).
        target: CPU target (see :func:`~layoutopt.tvm.resolve_target`).
        method: the :func:`layoutopt.solve` method.
        cache: cost cache file (JSON lines), or None for an in-memory run.
        runner: where kernels are measured (default: this machine; an RPC runner for a device farm).
        candidates: candidate kernels per op (default: blocks {4, 8, 16, 32, 64} and C when C < 8;
            ``{"blocks": ..., "orders": ["oc", "rows"]}`` adds the convs' loop orders: see
            :func:`~layoutopt.tvm.extract_layout_graph`).
        time_limit: seconds for the solver.
        baselines: names from :data:`BASELINES` to build and time beside the tuned model.
        check: compare every build's outputs with TVM's default build of the untouched model on
            seeded random inputs; :class:`~layoutopt.ProblemError` if the error exceeds ``rtol``.
        rtol: tolerance of ``max|out - ref| / max|ref|``.
        repeat: timing repeats (the median is reported).
        fuse: fuse each conv2d's elementwise epilogue into it (see :func:`~layoutopt.tvm.build`), in
            the tuned build and the baselines alike; the kernels are then measured fused too.
        profile: time every call of each build inside the running network
            (:func:`~layoutopt.tvm.profile.profile_calls`): the variants' ``breakdown`` (predicted vs
            in-network time per category of op) and the layers' ``in_network`` kernel times.
        progress: True to print stage messages (measurement shows its own progress bar), or a
            callable receiving them.

    Returns:
        A :class:`TuneResult`.

    Example::

        result = tune_and_build(models.default_model(), cache="costs.jsonl")
        result.tuned.measured, result.speedup("nchw16c")
    """
    from .extract import prepare
    from .problem import build_problem

    unknown = set(baselines) - set(BASELINES)
    if unknown:
        raise ProblemError(f"unknown baseline(s) {sorted(unknown)}; known: {', '.join(BASELINES)}")
    say = progress if callable(progress) else (print if progress else (lambda _message: None))
    target = resolve_target(target)
    timings: dict[str, float] = {}

    def stage(name: str):
        return _Stage(timings, name)

    with stage("prepare"):
        mod = prepare(mod)
        inputs = random_inputs(mod, seed)
    say("measuring kernels and layout transforms ...")
    with stage("measure"):
        graph, costs, meta = build_problem(mod, target=target, candidates=candidates, cache=cache,
                                           runner=runner, progress=bool(progress) or None, prepared=True,
                                           epilogues=fuse)
    problem = Problem.from_graph(graph, costs)
    say(f"solving ({len(problem.nodes)} nodes, {len(problem.edges)} edges, method {method!r}) ...")
    with stage("solve"):
        solution = solve(graph, costs, method=method, time_limit=time_limit)
    if not solution.assignment or not math.isfinite(solution.objective):
        raise ProblemError(f"the layout problem has no feasible solution: {solution.message}")

    reference = None
    if check or "default" in baselines:
        say("building TVM's default build of the untouched model (reference) ...")
        with stage("reference"):
            default_ex = import_tvm().compile(mod, target=target)
            reference = run(default_ex, inputs) if check else None

    executables = {}

    def make_variant(name: str, description: str, assignment: Mapping[Hashable, int]):
        new_mod = apply_solution(mod, graph, _as_solution(assignment))
        executable = build(new_mod, target, fuse=fuse)
        error = relative_error(run(executable, inputs), reference) if check else None
        if error is not None and not error <= rtol:
            raise ProblemError(f"the {name} build's outputs differ from the untouched model's by {error:.3g} "
                               f"(relative), above rtol={rtol:g}: a layout rewrite bug, please report it")
        executables[name] = executable
        variant = Variant(name, description, problem.evaluate([assignment[n] for n in problem.nodes]),
                          None, count_layout_transforms(new_mod), error, dict(assignment))
        return variant, new_mod, executable

    say("applying the solution, building and checking ...")
    with stage("build"):
        tuned, tuned_mod, tuned_ex = make_variant("layoutopt", f"layoutopt, method {method!r}",
                                                   solution.assignment)
    variants = {}
    for name in baselines:
        say(f"baseline {name}: {BASELINES[name]} ...")
        with stage(f"baseline {name}"):
            if name == "default":
                # ~100x slower than the rest: timed once, not in the interleaved rounds
                latency = measure_latency(default_ex, inputs, repeat=1, min_repeat_ms=0)
                variants[name] = Variant(name, BASELINES[name], None, latency, 0, 0.0 if check else None)
            elif name in ("nchw16c", "nchw16c_tuned"):
                fixed = fixed_layout_assignment(graph, "NCHW16c", costs if name == "nchw16c_tuned" else None)
                variants[name] = make_variant(name, BASELINES[name], fixed)[0]
            else:
                greedy = solve(graph, costs, method="greedy")
                variants[name] = make_variant(name, BASELINES[name], greedy.assignment)[0]
    say("timing the builds side by side ...")
    with stage("time"):
        latencies = measure_latencies(executables, inputs, repeat)
    for variant in [tuned, *variants.values()]:
        if variant.name in latencies:
            variant.measured = latencies[variant.name]
    layers = layer_table(graph, problem, solution.assignment)
    if profile:
        say("profiling the builds: each call's time in the network ...")
        with stage("profile"):
            profiles = profile_builds(executables, inputs)
            for variant in [tuned, *variants.values()]:
                if variant.name in profiles:
                    calls = profiles[variant.name]
                    variant.breakdown = time_breakdown(calls, graph, costs, variant.assignment)
            in_network = layer_times(profiles[tuned.name], graph, solution.assignment, target)
            for layer in layers:
                layer.in_network = in_network.get(layer.node)
    return TuneResult(tuned_ex, tuned_mod, solution, graph, costs, tuned, variants, layers, timings, meta,
                      str(target))


def measure_latencies(executables: Mapping[str, Any], inputs: Sequence[np.ndarray], repeat: int = 5,
                      min_repeat_ms: int = 100) -> dict[str, float]:
    """Median latency of each build, timed in interleaved rounds (one repeat of each build per round).

    On a shared machine the load drifts; interleaving exposes every build to the same drift, which
    keeps their ratios honest where back-to-back timing would not.

    Example::

        measure_latencies({"tuned": ex1, "nchw16c": ex2}, random_inputs(mod))
    """
    tvm = import_tvm()
    device = tvm.cpu()
    timers, args = {}, [tvm.runtime.tensor(x) for x in inputs]
    for name, executable in executables.items():
        vm = _virtual_machine(executable)
        vm["main"](*args)  # warm up
        timers[name] = vm.time_evaluator("main", device, number=1, repeat=1, min_repeat_ms=min_repeat_ms)
    samples: dict[str, list[float]] = {name: [] for name in executables}
    with one_blas_thread():
        for _ in range(repeat):
            for name, timer in timers.items():
                samples[name].extend(timer(*args).results)
    return {name: float(np.median(values)) for name, values in samples.items()}


class _Stage:
    def __init__(self, timings: dict[str, float], name: str):
        self.timings, self.name = timings, name

    def __enter__(self):
        self.start = time.perf_counter()

    def __exit__(self, *exc):
        self.timings[self.name] = time.perf_counter() - self.start


def _as_solution(assignment: Mapping[Hashable, int]) -> Solution:
    return Solution(dict(assignment), {}, math.nan, -math.inf, "feasible", "fixed")


def layer_table(graph: nx.DiGraph, problem: Problem, assignment: Mapping[Hashable, int]) -> list[Layer]:
    """Per problem node: choice, kernel time, fastest kernel, transforms on its inputs.

    Target and multi-input ops always have a row; boundary and output nodes only when a transform
    feeds them.
    """
    index = {node: i for i, node in enumerate(problem.nodes)}
    layers = []
    for node in nx.topological_sort(graph) if graph.is_directed() else graph.nodes:
        data = graph.nodes[node]
        i = index[node]
        k = assignment[node]
        labels = list(data.get("choices") or range(len(problem.node_costs[i])))
        best = int(np.argmin(problem.node_costs[i]))
        transform_time, transforms = 0.0, 0
        for pred in graph.predecessors(node) if graph.is_directed() else graph.neighbors(node):
            j = index[pred]
            cost = float(problem.edge(j, i)[assignment[pred], k])
            transform_time += cost
            transforms += cost > 0
        if data.get("kind") not in ("target", "multi") and not transforms:
            continue
        layers.append(Layer(node, str(data.get("op", "")), str(data.get("kind")),
                            _describe_workload(data.get("workload")), str(labels[k]),
                            float(problem.node_costs[i][k]), str(labels[best]),
                            float(problem.node_costs[i][best]),
                            transform_time, transforms))
    return layers


def _describe_workload(workload: Mapping | None) -> str:
    if not workload:
        return ""
    if workload.get("op") == "conv2d":
        _, c, h, w = workload["data"]
        o, _, kh, kw = workload["kernel"]
        stride = workload.get("strides", [1, 1])[0]
        groups = workload.get("groups", 1)
        text = f"{kh}x{kw} {c}->{o} @{h}x{w}" + (f" s{stride}" if stride != 1 else "")
        return text + (f" g{groups}" if groups != 1 else "")
    if workload.get("op") == "dense":
        return f"dense {workload['data'][1]}->{workload['weight'][0]}"
    shape = workload.get("shape") or workload.get("data")
    return f"{workload.get('op', '')} {shape}" if shape else str(workload.get("op", ""))

"""One call from a Relax model to a layout-tuned, verified, timed TVM build: :func:`tune_and_build`.

extract -> measure (:func:`layoutopt.tvm.build_problem`) -> :func:`layoutopt.solve` -> apply
(:func:`layoutopt.tvm.apply_assignment`) -> :func:`layoutopt.tvm.build` -> check the outputs against
the untouched model on random inputs -> time it beside the baselines
(:mod:`layoutopt.tvm.baselines`), in interleaved rounds -> profile every call.

Everything runs where the ``runner`` runs code (:mod:`layoutopt.tvm.runner`): on this machine by
default; with an :class:`~layoutopt.tvm.runner.RPCRunner`, the kernels and then the whole builds
(for the target given: the device's) are exported, uploaded, checked and timed on the device.

The guard: the tuned build is always timed beside the best fixed layout (b*, the faster of all-NCHW8c
and all-NCHW16c) and, when the convs offer Winograd, beside the fixed rule "Winograd wherever it
applies"; the result hands back the fastest build timed (``result.chosen`` says which): a cost model
that misleads the solver can cost the user a comparison, never speed.

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
from contextlib import closing, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np

from ..api import check_method, solve
from ..baselines import baselines as registered_baselines
from ..baselines import get_baseline
from ..constraints import Constraint, constrain, explain_infeasible, parse_constraints
from ..errors import ProblemError
from ..problem import Costs, Problem
from ..solution import Solution
from ._tvm import import_tvm, resolve_target
from .apply import apply_assignment, build, check_rewrite, count_layout_transforms
from .baselines import BUILDS, COMPOSITES
from .calibrate import Calibration
from .graph import LayoutGraph
from .kernels import describe_workload
from .profile import Category, layer_times, profile_builds, time_breakdown
from .runner import LocalRunner
from .timing import Latency, Ratio, compare_builds, measure_latency, random_inputs, relative_error, run

__all__ = ["TUNED", "Layer", "TuneResult", "Variant", "layer_table", "tune_and_build"]

#: the name of the tuned build among a result's variants
TUNED = "layoutopt"


@dataclass
class Variant:
    """One build of the model: how its kernels were chosen, what the cost model predicts, what it took.

    ``module`` is the rewritten Relax module and ``executable`` its build (None for TVM's default
    build). Times are in seconds; ``predicted`` is the layout problem's objective (kernel plus transform
    times; ops outside the problem, such as pooling, are not in it); ``measured`` the median latency
    over interleaved rounds, ``spread`` its 25th-75th percentiles; ``versus_tuned`` its latency over
    the tuned build's, paired round by round (a :class:`~layoutopt.tvm.timing.Ratio`: what the guard
    decides on). ``None`` when not applicable.
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
        timings: seconds spent per stage (prepare, measure, solve, apply, build, check, time).
        meta: what :func:`~layoutopt.tvm.build_problem` returned alongside the costs.
        ran_on: where the builds were checked, timed and profiled (the runner's description).
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
    meta: Any = None
    target: str = ""
    chosen: str = TUNED
    isolated_costs: Costs | None = None
    fuse: bool = True
    ran_on: str = "this machine"

    def export(self, library: str | Path, solution: str | Path | None = None,
               model: str | None = None) -> tuple[Path, Path]:
        """Write the build handed back as a shared library, and the solution file that rebuilds it
        (:mod:`layoutopt.tvm.deploy`; default ``model.so`` -> ``model.solution.json`` beside it).

        Returns the two paths. ``tvm.runtime.load_module(library)`` loads the library back, for
        ``relax.VirtualMachine``; :func:`~layoutopt.tvm.deploy.build_from_solution` rebuilds it with no
        measurement.

        Example::

            library, solution = result.export("model.so", model="model.onnx")
            vm = tvm.relax.VirtualMachine(tvm.runtime.load_module(str(library)), tvm.cpu())
        """
        from .deploy import export_library, save_solution, solution_path

        solution = Path(solution) if solution is not None else solution_path(library)
        return export_library(self.executable, library), save_solution(self, solution, model)

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
            f"   transforms {variant.transforms if variant.transforms is not None else '-':>3}")


@contextmanager
def _stage(timings: dict[str, float], name: str):
    started = time.perf_counter()
    try:
        yield
    finally:
        timings[name] = time.perf_counter() - started


def _baseline_names(baselines: Sequence[str], guards: Sequence[str] = ()) -> list[str]:
    """The baselines to build, each once, the guard's fixed rules included: a composite's members
    before it."""
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


def tune_and_build(
    mod,
    target: Any = "llvm",
    method: str = "auto",
    cache: str | Path | None = None,
    runner: Any = None,
    *,
    candidates: Any = None,
    time_limit: float | None = None,
    baselines: Sequence[str] = ("greedy",),
    guard: bool = True,
    check: bool = True,
    rtol: float = 1e-4,
    seed: int = 0,
    repeat: int = 30,
    fuse: bool = True,
    profile: bool = True,
    calibrate: int = 2,
    pin: Any = None,
    forbid: Any = None,
    progress: bool | Callable[[str], None] = False,
) -> TuneResult:
    """Extract, measure, solve, apply and build ``mod``; verify the outputs and time the build.

    Args:
        mod: a Relax ``IRModule`` (e.g. from ``from_onnx`` / ``from_exported_program``, or
            :mod:`layoutopt.tvm.models`).
        target: CPU target (see :func:`~layoutopt.tvm.resolve_target`).
        method: the :func:`layoutopt.solve` method.
        cache: cost cache file (JSON lines), or None for an in-memory run.
        runner: where kernels are measured and the builds checked, timed and profiled (default: this
            machine; :class:`~layoutopt.tvm.runner.RPCRunner` for a device or a farm of them, the
            ``target`` being the device's: builds are exported, uploaded and run there; their calls
            cannot be profiled there, so neither ``profile`` nor ``calibrate`` apply).
        candidates: candidate kernels per op (default: blocks {4, 8, 16, 32, 64} and C when C < 8;
            ``{"blocks": ..., "orders": ["oc", "rows"]}`` adds the convs' loop orders: see
            :func:`~layoutopt.tvm.extract_layout_graph`).
        time_limit: seconds for the solver.
        baselines: names of registered baselines (:func:`layoutopt.baselines.baselines`: greedy,
            tvm-dp, nchw8c, nchw16c, nchw16c_tuned...) or of :data:`~layoutopt.tvm.baselines.BUILDS`
            (default, best_fixed) to build and time beside the tuned model.
        guard: also build the best fixed layout (``best_fixed``: the faster of all-NCHW8c and
            all-NCHW16c) and, when a conv offers Winograd, the fixed rule (``winograd_fixed``), time
            them beside the tuned build, and hand back the fastest build timed (a baseline or the
            isolated-cost build included) that keeps the pins and forbids.
        check: compare every build's outputs with TVM's default build of the untouched model on
            seeded random inputs; :class:`~layoutopt.ProblemError` if the error exceeds ``rtol``.
        rtol: tolerance of ``max|out - ref| / max|ref|``.
        repeat: interleaved timing rounds, one run of each build per round (the median is reported,
            with its spread; the guard decides on per-round ratios, and times a close pair for
            ``repeat`` more rounds: :func:`~layoutopt.tvm.timing.compare_builds`). With 40 rounds on
            Inception-v3, the tuned build's ratio to NCHW16c read 0.797, 0.813, 0.809 and 0.792 in
            four repetitions while the medians moved 1.3x with the host's drift.
        fuse: fuse each conv2d's elementwise epilogue into it (see :func:`~layoutopt.tvm.build`), in
            the tuned build and the baselines alike; the kernels are then measured fused too.
        profile: time every call of each build inside the running network
            (:func:`~layoutopt.tvm.profile.profile_calls`): the variants' ``breakdown`` (predicted vs
            in-network time per category of op) and the layers' ``in_network`` kernel times.
        calibrate: rounds of in-network calibration (0: none). Every build is profiled in the
            network and the costs calibrated with what it ran (:mod:`layoutopt.tvm.calibrate`); the
            problem is solved again, and a new assignment built and profiled, until the one chosen
            was profiled already or the rounds run out (then the cheapest assignment profiled is
            handed on, ``feasible``, with a ``message``). Every variant's ``predicted`` is then its
            objective under the calibrated costs (checked by the final profile, a fresh run); the
            first solution, when it differs, is kept as the variant ``layoutopt_isolated``.
        pin, forbid: per-node control (:mod:`layoutopt.constraints`): ``{layer: choice}`` (or
            ``{layer: [choices]}``), or ``["LAYER=CHOICE", ...]`` as the command line's ``--pin`` and
            ``--forbid`` give them; choices by label (``"NCHW16c->NCHW16c"`` names every kernel in
            those layouts). A forbidden choice costs ``inf``, a pinned node every other choice; an
            unknown layer or choice is refused before measuring; a pin that leaves no feasible
            assignment is named. The best fixed layout is handed back instead of the tuned build only
            if it respects them too.
        progress: True to print stage messages (measurement shows its own progress bar), or a
            callable receiving them.

    Returns:
        A :class:`TuneResult`.

    Example::

        result = tune_and_build(models.default_model(), cache="costs.jsonl")
        result.tuned.measured, result.speedup("best_fixed"), result.chosen
    """
    from .extract import extract_layout_graph, prepare
    from .problem import build_problem

    _baseline_names(baselines)  # an unknown name fails now, not after the measurement
    check_method(method, time_limit)
    say = progress if callable(progress) else (print if progress else (lambda _message: None))
    target = resolve_target(target)
    timings: dict[str, float] = {}

    with _stage(timings, "prepare"):
        mod = prepare(mod)
        inputs = random_inputs(mod, seed)
        graph = extract_layout_graph(mod, candidates, prepared=True, fuse=fuse)
        constraints = parse_constraints(graph, pin, forbid)
        names = _baseline_names(baselines, _guard_rules(graph) if guard else ())
    say("checking the rewrite and the build's legalization on a fixed layout ...")
    with _stage(timings, "check rewrite"):
        check_rewrite(mod, graph, target)
    say("measuring kernels and layout transforms ...")
    with _stage(timings, "measure"):
        graph, costs, meta = build_problem(mod, target=target, cache=cache, runner=runner,
                                           progress=bool(progress) or None, prepared=True, graph=graph)
    stats = meta["stats"]
    say(f"kernels and transforms: {stats['measured']} measured, {stats['cached']} from the cost cache"
        + (f", {stats['failed']} failed" if stats["failed"] else ""))
    isolated = costs
    say(f"solving ({graph.number_of_nodes()} nodes, {graph.number_of_edges()} edges, method {method!r}) ...")
    with _stage(timings, "solve"):
        solution = _solve(graph, costs, method, time_limit, constraints)

    place = runner if runner is not None else LocalRunner()
    with closing(place):  # it may hold a device session and the builds it loaded
        where = f" on {place.describe()}"
        reference = None
        if check or "default" in names:
            say(f"building TVM's default build of the untouched model (reference){where} ...")
            with _stage(timings, "reference"):
                default_ex = import_tvm().compile(mod, target=target)
                reference = run(default_ex, inputs, place) if check else None

        def make_variant(name: str, description: str, assignment: Mapping[Hashable, int]) -> Variant:
            new_mod = apply_assignment(mod, graph, assignment)
            executable = build(new_mod, target, fuse=fuse)
            error = relative_error(run(executable, inputs, place), reference) if check else None
            if error is not None and not error <= rtol:
                raise ProblemError(f"the {name} build's outputs differ from the untouched model's by "
                                   f"{error:.3g} (relative), above rtol={rtol:g}: a layout rewrite bug, "
                                   "please report it")
            return Variant(name, description, None, transforms=count_layout_transforms(new_mod),
                           max_relative_error=error, assignment=dict(assignment), module=new_mod,
                           executable=executable)

        say(f"applying the solution, building and checking{where} ...")
        with _stage(timings, "build"):
            tuned = make_variant(TUNED, f"layoutopt, method {method!r}", solution.assignment)
        variants: dict[str, Variant] = {}
        for name in names:
            if name in COMPOSITES:
                continue  # picked from its members once they are timed
            description = BUILDS.get(name) or get_baseline(name).description
            say(f"baseline {name}: {description} ...")
            with _stage(timings, f"baseline {name}"):
                if name == "default":  # TVM's default build: ~100x slower, timed once, not interleaved
                    latency = measure_latency(default_ex, inputs, repeat=1, min_repeat_ms=0, runner=place)
                    variants[name] = Variant(name, description, None, latency, 0, 0.0 if check else None)
                else:
                    assignment = get_baseline(name).function(graph, Problem.from_graph(graph, isolated), None)
                    variants[name] = make_variant(name, description, assignment)

        if (calibrate or profile) and not place.profiles_builds:
            say(f"not calibrated nor profiled: the calls of a running build cannot be timed one by one"
                f"{where}")
            calibrate, profile = 0, False
        if calibrate:
            say("calibrating the costs with every build's in-network profile ...")
            with _stage(timings, "calibrate"):
                calibration = Calibration(graph, isolated, meta["measured"], target)
                builds = [tuned, *(v for v in variants.values() if v.executable is not None)]
                profiles = profile_builds({v.name: v.executable for v in builds}, inputs, runner=place)
                for variant in builds:
                    calibration.observe(variant.assignment, profiles[variant.name])
                first = tuned

                def build_and_observe(assignment: Mapping[Hashable, int]) -> None:
                    say("the calibrated costs choose another assignment: building and profiling it ...")
                    builds.append(make_variant(TUNED, "", assignment))
                    # profiled beside every earlier build, as they were: a build profiled alone ran
                    # 15-25 % slower (benchmarks/results/profile_repro.md), which biased the costs
                    # against every new assignment
                    profiles = profile_builds({str(i): v.executable for i, v in enumerate(builds)}, inputs,
                                              runner=place)
                    for i, variant in enumerate(builds):
                        calibration.observe(variant.assignment, profiles[str(i)])

                solution, costs = _calibrated_solution(
                    calibration, calibrate, build_and_observe,
                    lambda costs: _solve(graph, costs, method, time_limit, constraints),
                    own=lambda: [v.assignment for v in builds if v.name == TUNED])  # first included
                if solution.message:
                    say(solution.message)
                final = next(v for v in reversed(builds) if v.assignment == solution.assignment)
                tuned = replace(final, name=TUNED,
                                description=f"layoutopt, method {method!r}, costs calibrated in the network")
                if first.assignment != solution.assignment:
                    isolated_description = "layoutopt on the isolated measurements"
                    variants["layoutopt_isolated"] = replace(first, name="layoutopt_isolated",
                                                             description=isolated_description)
        problem = Problem.from_graph(graph, costs)
        for variant in [tuned, *variants.values()]:
            if variant.assignment is not None and variant.predicted is None:
                variant.predicted = problem.evaluate([variant.assignment[n] for n in problem.nodes])

        executables = {v.name: v.executable for v in [tuned, *variants.values()] if v.executable is not None}
        say(f"timing the builds side by side{where} ...")
        with _stage(timings, "time"):
            samples, ratios = compare_builds(executables, inputs, TUNED, repeat, runner=place)
        for variant in [tuned, *variants.values()]:
            if variant.name in samples:
                latency = Latency.of(samples[variant.name])
                variant.measured, variant.spread = latency.median, (latency.low, latency.high)
                variant.versus_tuned = ratios.get(variant.name)
        aliases: dict[str, str] = {}  # b* (and the like) -> the member build it is
        for composite in (name for name in names if name in COMPOSITES):  # the faster member, measured
            members = COMPOSITES[composite]
            fastest = aliases[composite] = min(members, key=lambda m: variants[m].versus_tuned.median)
            variants[composite] = replace(variants[fastest], name=composite,
                                          description=f"{BUILDS[composite]}: {fastest}")
        chosen = _fastest_build(graph, tuned, variants, aliases, constraints, say) if guard else TUNED
        layers = layer_table(graph, problem, solution.assignment, isolated)
        if profile:
            say("profiling the builds: each call's time in the network ...")
            with _stage(timings, "profile"):
                profiles = profile_builds(executables, inputs, runner=place)
                for variant in [tuned, *variants.values()]:
                    calls = profiles.get(aliases.get(variant.name, variant.name))
                    if calls:
                        variant.breakdown = time_breakdown(calls, graph, costs, variant.assignment)
                in_network = layer_times(profiles[TUNED], graph, solution.assignment, target)
                for layer in layers:
                    layer.in_network = in_network.get(layer.node)
        handed_back = tuned if chosen == TUNED else variants[chosen]
        return TuneResult(handed_back.executable, handed_back.module, solution, graph, costs, tuned, variants,
                          layers, timings, meta, str(target), chosen, isolated, fuse, place.describe())


def _solve(graph: LayoutGraph, costs: Costs, method: str, time_limit: float | None,
           constraints: list[Constraint] = ()) -> Solution:
    """Solve with the pins and forbids applied to the costs; a ProblemError when nothing is feasible."""
    constrained = constrain(graph, costs, statements=list(constraints)) if constraints else costs
    solution = solve(graph, constrained, method=method, time_limit=time_limit)
    if not solution.assignment or not math.isfinite(solution.objective):
        if constraints and Problem.from_graph(graph, costs).infeasibility_culprit() is None:
            raise ProblemError(explain_infeasible(graph, costs, list(constraints)))
        raise ProblemError(f"the layout problem has no feasible solution: {solution.message}")
    return solution


def _calibrated_solution(calibration: Calibration, rounds: int,
                         build_and_observe: Callable[[Mapping[Hashable, int]], None],
                         solve_costs: Callable[[Costs], Solution],
                         own: Callable[[], list[Mapping[Hashable, int]]]) -> tuple[Solution, Costs]:
    """Solve with the calibrated costs, build and profile the new assignment, and again, until the
    assignment chosen is one already profiled or ``rounds`` builds were made; then solve once more
    with every observation in. Returns the solution and the costs it was chosen with.

    When the rounds ran out before the choice settled, the answer is the cheapest, under those
    costs, of layoutopt's own profiled assignments (``own()``): its prediction is then an in-network
    measurement, not an extrapolation. The solution is ``feasible``, keeps the solver's lower
    bound (still valid) and says so in its ``message``."""
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


def _guard_rules(graph: LayoutGraph) -> list[str]:
    """The fixed rules the guard times the tuned build beside: b*, and the Winograd rule when a conv
    offers Winograd (an algorithm the tuned build may pick, so the fixed rule is a fair bar)."""
    offers_winograd = any(choice.record.algorithm == "winograd"
                          for node in graph.layout_nodes() for choice in node.choices)
    return ["best_fixed", *(["winograd_fixed"] if offers_winograd else [])]


def _fastest_build(graph: LayoutGraph, tuned: Variant, variants: Mapping[str, Variant],
                   aliases: Mapping[str, str], constraints: Sequence[Constraint],
                   say: Callable[[str], None]) -> str:
    """The name of the fastest build timed side by side that keeps the pins and forbids: the tuned
    build unless another one measured faster, round by round (the median of its per-round ratio to
    the tuned build below 1). A composite's member is named by its composite (b* rather than
    nchw16c); TVM's default build, timed once apart, never competes."""
    composite_of = {member: composite for composite, member in aliases.items()}
    rivals = [v for name, v in variants.items() if name not in COMPOSITES and name != "default"
              and v.versus_tuned is not None and v.versus_tuned.median < 1.0]
    for variant in sorted(rivals, key=lambda v: v.versus_tuned.median):
        name, ratio = composite_of.get(variant.name, variant.name), variant.versus_tuned
        if _respects(graph, variant.assignment, constraints):
            verdict = "" if ratio.settled else ", within the noise"
            say(f"{name} measured faster than the tuned build ({ratio.median:.3f}x its latency, round "
                f"by round, 95 % interval {ratio.low:.3f}-{ratio.high:.3f}{verdict}): handing it back")
            return name
        say(f"{name} measured faster than the tuned build, but breaks a pin or forbid")
    return TUNED


def _respects(graph: LayoutGraph, assignment: Mapping[Hashable, int] | None,
              constraints: Sequence[Constraint]) -> bool:
    """Whether ``assignment`` keeps every pin and avoids every forbidden choice."""
    if assignment is None:
        return False
    pinned: dict[Hashable, set[int]] = {}
    for kind, node, _, indices in constraints:
        if kind == "pin":
            pinned.setdefault(node, set()).update(indices)
        elif assignment[node] in indices:
            return False
    return all(assignment[node] in allowed for node, allowed in pinned.items())


def layer_table(graph: LayoutGraph, problem: Problem, assignment: Mapping[Hashable, int],
                isolated: Costs | None = None) -> list[Layer]:
    """Per problem node: choice, kernel time (and its isolated measurement), fastest kernel,
    transforms on its inputs.

    Target and multi-input ops always have a row; boundary and output nodes only when a transform
    feeds them.

    Example::

        layers = layer_table(result.graph, Problem.from_graph(result.graph, result.costs),
                             result.solution.assignment)
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

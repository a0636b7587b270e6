"""The stages of a tune, each a function of the previous stage's record.

:func:`~layoutopt.tvm.tune_and_build` is the chain of them, as ``tvm.transform.Sequential`` runs passes
or CVXPY's ``Chain`` runs reductions::

    extract  -> Extracted  prepared module, layout graph, inputs, pins and forbids, the reference
    search   -> Extracted  with ``trials``, each workload's schedules searched; the top-k per
                           (algorithm, layout pair) become the nodes' choices (cached, resumable)
    measure  -> Measured   the costs of every kernel and transform (cached, resumable)
    solve    -> Solved     the layout problem (built once) and its solution
    build    -> Built      the tuned build and the baselines, each checked against the reference
    calibrate-> Built      costs calibrated with every build's in-network profile, solved again
    storage  -> Built      with ``storage="auto"``, the tuned build also with a storage per shape
    order    -> Built      with ``loop_order="auto"``, the tuned build also with its convs rows first
    time     -> Timed      every build timed in the same interleaved rounds; ratios, noise
    profile  -> Timed      every call of every build timed in the network
    choose   -> TuneResult the guard's pick, exportable

A benchmark (or a user) can run a prefix of the chain and stop, e.g. after :func:`measure` to look at
costs, or after :func:`solve` to compare methods, and every record says what the next stage needs.

Example:
    >>> from layoutopt.tvm import models, resolve_target
    >>> from layoutopt.tvm.measure.runner import LocalRunner
    >>> from layoutopt.tvm.tune.stages import TuneOptions, extract, measure, solve
    >>> options = TuneOptions(method="dp", cache="costs.jsonl", check=False)   # quick: outputs unchecked
    >>> extracted = extract(models.chain((8, 8)), resolve_target("llvm"), LocalRunner(), options)
    >>> solved = solve(measure(extracted, options), options)
    >>> solved.solution.status, list(solved.solution.labels)
    ('optimal', ['data', 'conv1', 'conv2', 'output:gv'])
"""

from __future__ import annotations

import math
import numbers
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ... import api
from ...baselines import get_baseline
from ...constraints import Constraint, constrain, explain_infeasible, parse_constraints
from ...errors import ProblemError
from ...problem import Costs, Problem, parse_bytes
from ...solution import Solution
from .._tvm import import_tvm
from ..building.apply import apply_assignment, count_layout_transforms
from ..building.baselines import BUILDS, COMPOSITES
from ..building.builder import check_rewrite, compile_module
from ..building.memory import check_memory
from ..building.storage import TUNE_STORAGE, check_storage_plan
from ..evaluate.calibrate import Calibration, calibrated_solution
from ..evaluate.check import Reference, first_divergence
from ..evaluate.origin import ModelOrigin, check_import
from ..evaluate.profile import KernelShapes, observe, profile_builds, time_breakdown
from ..evaluate.timing import Latency, Noise, compare_builds, measure_latency, random_inputs, run
from ..graph.graph import LayoutGraph
from ..kernels import LOOP_ORDERS
from ..measure.cache import CostCache, task_key
from ..measure.problem import MeasureMeta, kernel_tasks, measure_graph, memory_figures
from ..measure.runner import Runner
from ..measure.search import ROUNDS, SearchStats, check_search, search_schedules, searched_graph
from .guard import baseline_builds, fastest_build, guard_rules
from .result import TUNED, TuneResult, Variant, layer_table

__all__ = ["TUNE_LOOP_ORDERS", "Built", "Extracted", "Measured", "Solved", "Timed", "TuneOptions",
           "assignment_memory", "build_variants", "calibrate", "choose", "extract", "measure", "profile",
           "search", "solve", "time_variants", "with_loop_order_rival", "with_storage_rival"]


@dataclass(frozen=True)
class TuneOptions:
    """How to tune: every option of :func:`~layoutopt.tvm.tune_and_build` but the model, the target and
    the runner.

    Attributes:
        method: the :func:`layoutopt.solve` method.
        cache: cost cache file (JSON lines), or None for an in-memory run.
        candidates: candidate kernels per op (default: blocks {4, 8, 16, 32, 64} and C when C < 8;
            ``{"blocks": ..., "orders": ["oc", "rows"]}`` adds the convs' loop orders: see
            :func:`~layoutopt.tvm.extract_layout_graph`).
        time_limit: seconds for the solver.
        baselines: names of registered baselines (:func:`layoutopt.baselines.baselines`: greedy,
            tvm-dp, nchw8c, nchw16c, nchw16c_tuned...) or of :data:`~layoutopt.tvm.building.baselines.BUILDS`
            (default, best_fixed) to build and time beside the tuned model.
        guard: also build the best fixed layout (``best_fixed``: the faster of all-NCHW8c and
            all-NCHW16c) and, when a conv offers Winograd, the fixed rule (``winograd_fixed``), time
            them beside the tuned build, and hand back the fastest build timed (a baseline or the
            isolated-cost build included) that keeps the pins and forbids.
        check: compare every build's outputs, on seeded random inputs, with the untouched model
            computed in float64 (:class:`~layoutopt.tvm.evaluate.check.Reference`); a build may be off by
            ``rtol`` or by :data:`~layoutopt.tvm.evaluate.check.ROUNDING_GROWTH` times the untouched float32
            build's own error, whichever is larger. A baseline that fails is dropped with a warning;
            a tuned build that fails raises :class:`~layoutopt.ProblemError` naming the first value
            that diverges; an untouched model that gives NaN/inf on the input cannot be checked
            (:class:`~layoutopt.ProblemError`).
        rtol: tolerance of ``max|out - ref| / max|ref|`` per output.
        repeat: interleaved timing rounds, one run of each build per round (the median is reported,
            with its spread; the guard decides on per-round ratios, and when a pair is close every
            build is timed for ``repeat`` more rounds: :func:`~layoutopt.tvm.evaluate.timing.compare_builds`).
            Paired ratios hold still where medians move with the host's drift
            (``benchmarks/results/e2e-notes.md``).
        fuse: fuse each conv2d's elementwise epilogue into it (see :func:`~layoutopt.tvm.build`), in
            the tuned build and the baselines alike; the kernels are then measured fused too.
        storage: the storage plan of every build, ``"relax"`` or ``"by_shape"`` (see
            :mod:`~layoutopt.tvm.building.storage`: faster where a core pays to take over lines the other core
            wrote, slower where it does not; ``notes/storage_plan.md`` tells which on a host), or
            ``"auto"``: every build with Relax's plan, and the tuned build also by shape
            (``layoutopt_by_shape``), timed beside the others for the guard to pick.
        loop_order: the parallel loop order of every build's conv kernels: ``"oc"`` (each kernel's
            own: over output-channel chunks first), ``"rows"`` (every kernel that has the order over
            rows first, so that each thread reads, layer after layer, the rows it wrote:
            :func:`~layoutopt.tvm.kernels.with_loop_order`), or ``"auto"``: every build in its own
            order, and the tuned build also rows first (``layoutopt_rows``), timed beside the others
            for the guard to pick.
        profile: time every call of each build inside the running network
            (:func:`~layoutopt.tvm.evaluate.profile.profile_calls`): the variants' ``breakdown`` (predicted vs
            in-network time per category of op) and the layers' ``in_network`` kernel times.
        calibrate: rounds of in-network calibration (0: none). Every build is profiled in the
            network and the costs calibrated with what it ran (:mod:`layoutopt.tvm.evaluate.calibrate`); the
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
        trials: schedule points searched per workload beyond today's candidates
            (:func:`~layoutopt.tvm.measure.search.search_schedules`: successive halving over seeded samples
            of each kernel family's schedule space); 0: no search, one heuristic schedule per kernel.
        search_time: seconds for the whole search (None: no limit); what it cuts is counted and said.
        top_k: with a search, the fastest schedules per (algorithm, input layout, output layout) each node
            offers the solver (:func:`~layoutopt.tvm.measure.search.searched_graph`), which then picks
            layouts, algorithms and schedules together. The fixed-layout baselines take the first of
            their layouts' choices: with a search, the fastest searched schedule.
        search_rounds: with a search, the paired rounds in which each arm's finalists are timed again
            beside its heuristic schedule; a searched schedule becomes a choice only if it wins them
            (see :mod:`~layoutopt.tvm.measure.search`); 0: no re-timing, the search's costs as they are.
        memory_budget: the most bytes the chosen kernels may hold together (their weights as packed
            or transformed, and their workspaces: :func:`~layoutopt.tvm.measure.problem.memory_figures`),
            as a number or a size such as ``"40MB"`` (:func:`~layoutopt.problem.parse_bytes`), or None
            for no budget. Every solve honours it, and the guard hands back no build above it;
            a budget below the smallest assignment's memory is refused with that figure.

    Every option is checked when the options are made, whoever makes them: a bad one raises
    :class:`~layoutopt.ProblemError` naming it, before any model is loaded or kernel measured.

    Example:
        >>> TuneOptions(method="dp", repeat=10).calibrate
        2
        >>> TuneOptions(memory_budget="40MB").memory_budget
        40000000.0
        >>> TuneOptions(repeat=0)
        Traceback (most recent call last):
        ...
        layoutopt.errors.ProblemError: repeat must be an integer of at least 1, got 0
    """

    method: str = "auto"
    cache: Any = None
    candidates: Any = None
    time_limit: float | None = None
    baselines: tuple[str, ...] = ("greedy",)
    guard: bool = True
    check: bool = True
    rtol: float = 1e-4
    seed: int = 0
    repeat: int = 30
    fuse: bool = True
    profile: bool = True
    calibrate: int = 2
    pin: Any = None
    forbid: Any = None
    progress: bool | Callable[[str], None] = False
    storage: str = "relax"
    loop_order: str = "oc"
    trials: int = 0
    search_time: float | None = None
    top_k: int = 1
    search_rounds: int = ROUNDS
    memory_budget: float | str | None = None

    def __post_init__(self) -> None:
        # every option is checked here, once, whoever builds the options (tune_and_build, the command
        # line, a benchmark): a bad one is refused before a model is loaded or a kernel measured
        api.check_method(self.method, self.time_limit)
        object.__setattr__(self, "baselines", tuple(self.baselines))
        baseline_builds(self.baselines)
        check_storage_plan(self.storage, TUNE_STORAGE)
        if self.loop_order not in TUNE_LOOP_ORDERS:
            raise ProblemError(f"loop_order {self.loop_order!r}: expected one of {TUNE_LOOP_ORDERS}")
        check_search(self.trials, self.search_time, self.top_k)
        for name, least in (("repeat", 1), ("calibrate", 0), ("search_rounds", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < least:
                raise ProblemError(f"{name} must be an integer of at least {least}, got {value!r}")
        if isinstance(self.rtol, bool) or not (isinstance(self.rtol, numbers.Real) and self.rtol > 0):
            raise ProblemError(f"rtol must be a positive tolerance, got {self.rtol!r}")
        if self.memory_budget is not None:
            object.__setattr__(self, "memory_budget", parse_bytes(self.memory_budget))

    def say(self, message: str) -> None:
        """Hand a stage message to ``progress`` (printed when it is True)."""
        if callable(self.progress):
            self.progress(message)
        elif self.progress:
            print(message)


@dataclass(frozen=True)
class Extracted:
    """The model ready to measure: ``mod`` the prepared module every rewrite starts from, its layout
    ``graph``, the check's ``inputs`` and ``reference`` (None unchecked), the pins and forbids, the
    baselines to build (the guard's included), where builds run (``runner``), TVM's default build of
    the untouched model (``untouched``, when the check or the ``default`` baseline needs it) and a log
    of seconds per stage (``timings``, shared along the chain)."""

    mod: Any
    graph: LayoutGraph
    inputs: tuple[np.ndarray, ...]
    constraints: tuple[Constraint, ...]
    builds: tuple[str, ...]
    target: Any
    runner: Runner
    reference: Reference | None = field(default=None, repr=False)
    untouched: Any = field(default=None, repr=False)
    timings: dict[str, float] = field(default_factory=dict, repr=False)
    search: SearchStats | None = None  # the schedule search's counts, when it ran (:func:`search`)
    #: the search's re-timed finalists' costs (seconds, by task_key of (node workload, candidate)): they
    #: replace the cost cache's for those choices (:func:`measure`)
    search_costs: Mapping[str, float] = field(default_factory=dict, repr=False)

    @property
    def where(self) -> str:
        return f" on {self.runner.describe()}"


@dataclass(frozen=True)
class Measured:
    """The measured layout problem: ``costs`` in seconds and ``meta`` as
    :func:`~layoutopt.tvm.measure.problem.measure_graph` returns them; ``shapes``, the argument shapes of the
    measured kernels, which in-network profiles are matched against; ``memory``, the bytes each choice
    holds (:func:`~layoutopt.tvm.measure.problem.memory_figures`), when a memory budget asked for them."""

    extracted: Extracted
    costs: Costs
    meta: MeasureMeta
    shapes: KernelShapes = field(repr=False, default_factory=KernelShapes)
    memory: Mapping | None = field(repr=False, default=None)


@dataclass(frozen=True)
class Solved:
    """A solution of the layout problem, with the ``costs`` it was chosen with (the measured ones, or
    calibrated ones after :func:`calibrate`) and their :class:`~layoutopt.Problem`, built once."""

    measured: Measured
    costs: Costs
    problem: Problem
    solution: Solution


@dataclass(frozen=True)
class Built:
    """The tuned build and the baselines, every one checked (a baseline that failed the check is not
    here); each variant's ``predicted`` is its objective under ``solved.costs``."""

    solved: Solved
    tuned: Variant
    baselines: dict[str, Variant]

    def variants(self) -> list[Variant]:
        return [self.tuned, *self.baselines.values()]


@dataclass(frozen=True)
class Timed:
    """The builds timed side by side: every variant's ``measured``, ``spread`` and ``versus_tuned`` come
    from the same interleaved rounds; ``aliases`` maps a composite (b*) to the member it is."""

    built: Built
    noise: Noise
    aliases: dict[str, str]


@contextmanager
def _stage(timings: dict[str, float], name: str):
    started = time.perf_counter()
    try:
        yield
    finally:
        timings[name] = time.perf_counter() - started


def extract(mod, target: Any, runner: Runner, options: TuneOptions, origin: ModelOrigin | None = None
            ) -> Extracted:
    """Prepare ``mod``, extract its layout graph, parse the pins and forbids, try the rewrite on a fixed
    layout, and build the check's reference, TVM's import checked against the model file ``origin``
    came from (:func:`~layoutopt.tvm.evaluate.origin.check_import`; a mismatch raises
    :class:`~layoutopt.tvm.evaluate.origin.ImportMismatch`): everything that can fail before a kernel is
    measured.

    Example:
        >>> from layoutopt.tvm import models, resolve_target
        >>> from layoutopt.tvm.measure.runner import LocalRunner
        >>> extracted = extract(models.chain((8, 8)), resolve_target("llvm"), LocalRunner(), TuneOptions())
        >>> list(extracted.graph), extracted.inputs[0].shape
        (['data', 'conv1', 'conv2', 'output:gv'], (1, 8, 8, 8))
        >>> extracted.builds       # the default baseline, then the guard's fixed rules and their members
        ('greedy', 'nchw8c', 'nchw16c', 'best_fixed', 'winograd_nchw8c', 'winograd_nchw16c', 'winograd_fixed')
        >>> extracted.reference.untouched_error < 1e-5      # TVM's float32 build against float64
        True
    """
    from ..frontend.normalise import prepare
    from ..graph.extract import extract_layout_graph

    check_memory(mod)  # before anything is allocated: the inputs, their float64 draw, the largest op
    timings: dict[str, float] = {}
    with _stage(timings, "prepare"):
        mod = prepare(mod)
        inputs = tuple(random_inputs(mod, options.seed))
        graph = extract_layout_graph(mod, options.candidates, prepared=True, fuse=options.fuse)
        constraints = tuple(parse_constraints(graph, options.pin, options.forbid))
        builds = tuple(baseline_builds(options.baselines, guard_rules(graph) if options.guard else ()))
    options.say("checking the rewrite and the build's legalization on a fixed layout ...")
    with _stage(timings, "check rewrite"):
        check_rewrite(mod, graph, target)
    reference = untouched = None
    if options.check or "default" in builds:
        options.say(f"building TVM's default build of the untouched model (reference) on "
                    f"{runner.describe()} ...")
        with _stage(timings, "reference"):
            untouched = import_tvm().compile(mod, target=target)
            if options.check:
                reference = Reference.of(mod, inputs, target, runner, options.rtol, untouched)
                if origin is not None:
                    options.say(f"running {origin.path} with a runtime independent of TVM ...")
                imported = check_import(origin, mod, inputs, reference, target, runner)
                reference = replace(reference, imported=imported)
                options.say(reference.describe())
    return Extracted(mod, graph, inputs, constraints, builds, target, runner, reference, untouched, timings)


def search(extracted: Extracted, options: TuneOptions) -> Extracted:
    """With ``options.trials``, search each workload's schedules
    (:func:`~layoutopt.tvm.measure.search.search_schedules`, into the cost cache) and give every target node
    the ``options.top_k`` fastest per (algorithm, in, out) as its choices (the pins and forbids read
    again on them); else ``extracted`` as it is.

    Example:
        >>> from layoutopt.tvm import models, resolve_target
        >>> from layoutopt.tvm.measure.runner import LocalRunner
        >>> options = TuneOptions(cache="costs.jsonl", check=False, trials=2, top_k=2, search_rounds=0,
        ...                       candidates={"blocks": [8], "algorithms": ["direct"]})
        >>> searched = search(extract(models.chain((8, 8)), resolve_target("llvm"), LocalRunner(), options),
        ...                   options)       # no paired rounds: the two fastest searched points are choices
        >>> len(searched.graph.layout_node("conv1").labels), searched.search.workloads   # 2 of NCHW8c, NCHW
        (3, 1)
    """
    if not options.trials:
        return extracted
    budget = f", at most {options.search_time:g} s" if options.search_time else ""
    options.say(f"searching schedules: {options.trials} points per workload beyond the heuristic's{budget}"
                f"{extracted.where} ...")
    with _stage(extracted.timings, "search"):
        result = search_schedules(kernel_tasks(extracted.graph), extracted.target, options.cache,
                                  extracted.runner, trials=options.trials, search_time=options.search_time,
                                  seed=options.seed, progress=bool(options.progress) or None,
                                  top_k=options.top_k, rounds=options.search_rounds)
        graph = searched_graph(extracted.graph, result, options.top_k)
        search_costs = {}
        for node in graph.layout_nodes():
            for choice in node.choices if node.kind == "target" else ():
                cost = result.retimed_cost(node.workload, choice.candidate)
                if cost is not None:
                    search_costs[task_key(node.workload, choice.candidate)] = cost
        constraints = tuple(parse_constraints(graph, options.pin, options.forbid))
    options.say(result.stats.describe())
    return replace(extracted, graph=graph, constraints=constraints, search=result.stats,
                   search_costs=search_costs)


def measure(extracted: Extracted, options: TuneOptions) -> Measured:
    """Measure every kernel and layout transform of the graph
    (:func:`~layoutopt.tvm.measure.problem.measure_graph`).

    Example:
        >>> from layoutopt.tvm import models, resolve_target
        >>> from layoutopt.tvm.measure.runner import LocalRunner
        >>> options = TuneOptions(cache="costs.jsonl", check=False)
        >>> measured = measure(extract(models.chain((8, 8)), resolve_target("llvm"), LocalRunner(), options),
        ...                    options)
        >>> stats = measured.meta.stats        # conv1 and conv2 have the same workload: measured once
        >>> stats.requested, stats.measured + stats.cached, stats.failed
        (32, 19, 0)
    """
    cache = options.cache
    if cache is not None and not isinstance(cache, CostCache):
        cache = CostCache(cache)  # opened here: the lines it skips are said before measuring
    if cache is not None and cache.skipped:
        options.say(f"cost cache {cache.path}: {cache.describe_skipped()}")
    options.say("measuring kernels and layout transforms ...")
    with _stage(extracted.timings, "measure"):
        costs, meta = measure_graph(extracted.graph, extracted.target, cache, extracted.runner,
                                    progress=bool(options.progress) or None,
                                    node_costs=extracted.search_costs)
    stats = meta.stats
    options.say(f"kernels and transforms: {stats.measured} measured, {stats.cached} from the cost cache"
                + (f", {stats.retimed} from the cache timed again for the pass a killed run left out"
                   if stats.retimed else "")
                + (f", {stats.failed} failed" if stats.failed else "")
                + (f", {stats.other_cpu} measured again: the cache had them of another CPU only"
                   if stats.other_cpu else ""))
    memory = None
    if options.memory_budget is not None:
        options.say("figuring the memory of every kernel (weights as packed, workspace) ...")
        with _stage(extracted.timings, "memory"):
            memory = memory_figures(extracted.graph, extracted.target)
    return Measured(extracted, costs, meta, KernelShapes(extracted.target), memory)


def solve(measured: Measured, options: TuneOptions, costs: Costs | None = None) -> Solved:
    """Solve the layout problem (with ``costs``, default the measured ones) under the pins and forbids.

    Raises:
        ProblemError: nothing is feasible; naming the pin or forbid at fault when one is.

    Example:
        >>> from layoutopt.tvm import models, resolve_target
        >>> from layoutopt.tvm.measure.runner import LocalRunner
        >>> options = TuneOptions(cache="costs.jsonl", check=False, pin={"conv1": "NCHW8c->NCHW8c"})
        >>> measured = measure(extract(models.chain((8, 8)), resolve_target("llvm"), LocalRunner(), options),
        ...                    options)
        >>> solved = solve(measured, options)
        >>> solved.solution.labels["conv1"], solved.solution.objective > 0     # predicted seconds
        ('NCHW8c->NCHW8c', True)
    """
    graph, constraints = measured.extracted.graph, list(measured.extracted.constraints)
    costs = measured.costs if costs is None else costs
    options.say(f"solving ({graph.number_of_nodes()} nodes, {graph.number_of_edges()} edges, "
                f"method {options.method!r}) ...")
    with _stage(measured.extracted.timings, "solve"):
        constrained = constrain(graph, costs, statements=constraints) if constraints else costs
        solution = api.solve(graph, constrained, method=options.method, time_limit=options.time_limit,
                             **_budget(measured, options))
    if options.memory_budget is not None and solution.status == "infeasible":
        raise ProblemError(f"memory budget: {solution.message}")
    if not solution.assignment or not math.isfinite(solution.objective):
        if constraints and Problem.from_graph(graph, costs).infeasibility_culprit() is None:
            raise ProblemError(explain_infeasible(graph, costs, constraints))
        raise ProblemError(f"the layout problem has no feasible solution: {solution.message}")
    return Solved(measured, costs, Problem.from_graph(graph, costs), solution)


def _budget(measured: Measured, options: TuneOptions) -> dict[str, Any]:
    """:func:`layoutopt.solve`'s ``memory`` and ``memory_budget`` under ``options.memory_budget``."""
    if options.memory_budget is None:
        return {}
    if measured.memory is None:
        raise ProblemError("a memory budget needs the memory figures: measure with the budget in the options")
    return {"memory": measured.memory, "memory_budget": options.memory_budget}


def assignment_memory(measured: Measured, assignment: Mapping[Hashable, int] | None) -> float | None:
    """Bytes ``assignment``'s choices hold by ``measured.memory`` (None without figures or assignment).

    Example:
        >>> from layoutopt.tvm import models, resolve_target
        >>> from layoutopt.tvm.measure.runner import LocalRunner
        >>> options = TuneOptions(cache="costs.jsonl", check=False, memory_budget=1e6)
        >>> measured = measure(extract(models.chain((8, 8)), resolve_target("llvm"), LocalRunner(), options),
        ...                    options)
        >>> solved = solve(measured, options)
        >>> 0 < assignment_memory(measured, solved.solution.assignment) <= 1e6
        True
    """
    if measured.memory is None or assignment is None:
        return None
    return float(sum(measured.memory["nodes"][node][choice] for node, choice in assignment.items()
                     if node in measured.memory["nodes"]))


def build_variant(extracted: Extracted, name: str, description: str, assignment: Mapping[Hashable, int],
                  options: TuneOptions, storage: str | None = None, loop_order: str | None = None
                  ) -> Variant | None:
    """The checked build of ``assignment`` (with the ``storage`` plan and the kernels' ``loop_order``, by
    default the options' own, Relax's plan and each kernel's order for ``"auto"``): None (with a warning)
    for a baseline that fails the check, a :class:`~layoutopt.ProblemError` naming the first value that
    diverges for the tuned build.

    Example:
        >>> from layoutopt.tvm import models, resolve_target
        >>> from layoutopt.tvm.measure.runner import LocalRunner
        >>> options = TuneOptions(cache="costs.jsonl")
        >>> extracted = extract(models.chain((8, 8)), resolve_target("llvm"), LocalRunner(), options)
        >>> solved = solve(measure(extracted, options), options)
        >>> variant = build_variant(extracted, "layoutopt", "tuned", solved.solution.assignment, options)
        >>> variant.assignment == solved.solution.assignment, variant.max_relative_error < 1e-4
        (True, True)
    """
    loop_order = loop_order or (LOOP_ORDERS[0] if options.loop_order == "auto" else options.loop_order)
    new_mod = apply_assignment(extracted.mod, extracted.graph, assignment, loop_order=loop_order)
    storage = storage or ("relax" if options.storage == "auto" else options.storage)
    compiled = compile_module(new_mod, extracted.target, fuse=options.fuse, storage=storage)
    executable = compiled.executable
    verdict = None
    if extracted.reference is not None:
        verdict = extracted.reference.judge(run(executable, extracted.inputs, extracted.runner))
        if not verdict.passed:
            if name != TUNED:
                options.say(f"warning: {verdict.describe(name)}: dropped from the comparison")
                return None
            raise ProblemError(f"{verdict.describe(name)}; {_divergence(extracted, assignment, options)}. "
                               "A layout rewrite bug: please report it (--no-check, or check=False, "
                               "builds without the check)")
    return Variant(name, description, None, transforms=count_layout_transforms(new_mod),
                   max_relative_error=None if verdict is None else verdict.error,
                   assignment=dict(assignment), module=new_mod, executable=executable,
                   fallbacks=compiled.fallbacks, bytes_moved=compiled.bytes_moved, storage=storage,
                   concats_in_place=compiled.concats_in_place, loop_order=loop_order)


#: the tuned build with a storage per tensor shape, timed beside the others with ``storage="auto"``
BY_SHAPE = "layoutopt_by_shape"


def with_storage_rival(built: Built, options: TuneOptions) -> Built:
    """With ``options.storage == "auto"``, ``built`` and the tuned assignment built again with a storage
    per tensor shape (the variant ``layoutopt_by_shape``), for the guard to time beside the others;
    else ``built`` as it is.

    Example:
        >>> from layoutopt.tvm import models, resolve_target
        >>> from layoutopt.tvm.measure.runner import LocalRunner
        >>> options = TuneOptions(cache="costs.jsonl", baselines=(), guard=False, calibrate=0, check=False,
        ...                       storage="auto")
        >>> solved = solve(measure(extract(models.chain((8, 8)), resolve_target("llvm"), LocalRunner(),
        ...                                options), options), options)
        >>> built = with_storage_rival(build_variants(solved, options), options)
        >>> built.tuned.storage, built.baselines["layoutopt_by_shape"].storage
        ('relax', 'by_shape')
    """
    if options.storage != "auto":
        return built
    return _with_rival(built, options, BY_SHAPE, "a storage per tensor shape", "build by shape",
                       storage="by_shape")


#: what ``loop_order=`` takes: a loop order of every build, or ``"auto"`` (see :class:`TuneOptions`)
TUNE_LOOP_ORDERS = (*LOOP_ORDERS, "auto")
#: the tuned build with every conv kernel's loops over rows first, timed beside the others with
#: ``loop_order="auto"``
ROWS_FIRST = "layoutopt_rows"


def with_loop_order_rival(built: Built, options: TuneOptions) -> Built:
    """With ``options.loop_order == "auto"``, ``built`` and the tuned assignment built again with every
    conv kernel that has the order parallel over rows first (the variant ``layoutopt_rows``), for the
    guard to time beside the others; else ``built`` as it is.

    The kernels are measured in their own order, each alone; a network whose kernels all split the
    rows between the threads hands each thread, layer after layer, the rows it wrote itself. What
    that saves depends on what taking over the other core's lines costs on the host, so it is
    measured, build against build.

    Example:
        >>> from layoutopt.tvm import models, resolve_target
        >>> from layoutopt.tvm.measure.runner import LocalRunner
        >>> options = TuneOptions(cache="costs.jsonl", baselines=(), guard=False, calibrate=0, check=False,
        ...                       loop_order="auto")
        >>> solved = solve(measure(extract(models.chain((8, 8)), resolve_target("llvm"), LocalRunner(),
        ...                                options), options), options)
        >>> built = with_loop_order_rival(build_variants(solved, options), options)
        >>> built.tuned.loop_order, built.baselines["layoutopt_rows"].loop_order
        ('oc', 'rows')
    """
    if options.loop_order != "auto":
        return built
    return _with_rival(built, options, ROWS_FIRST, "every conv parallel over rows first", "build rows first",
                       loop_order="rows")


def _with_rival(built: Built, options: TuneOptions, name: str, how: str, stage: str,
                **settings: str) -> Built:
    """``built`` and the tuned assignment built again ``how`` (``settings``: :func:`build_variant`'s
    ``storage`` or ``loop_order``) as the baseline ``name``, unless that build fails its check."""
    extracted = built.solved.measured.extracted
    options.say(f"building the tuned assignment with {how} ...")
    with _stage(extracted.timings, stage):
        rival = build_variant(extracted, name, f"layoutopt's build, {how}", built.tuned.assignment, options,
                              **settings)
    if rival is None:  # failed its check: said, and dropped
        return built
    return _priced(Built(built.solved, built.tuned, {**built.baselines, name: rival}))


def _divergence(extracted: Extracted, assignment: Mapping[Hashable, int], options: TuneOptions) -> str:
    """:func:`~layoutopt.tvm.evaluate.check.first_divergence`, or why it could not say."""
    try:
        return first_divergence(extracted.mod, extracted.graph, assignment, extracted.target,
                                extracted.inputs, extracted.runner, options.rtol, options.fuse)
    except Exception as exc:  # the diagnosis of a failure must not hide the failure
        return f"the first value that diverges could not be found ({exc})"


def build_variants(solved: Solved, options: TuneOptions) -> Built:
    """Build and check the tuned assignment and every baseline (TVM's default build timed once, apart).

    Example:
        >>> from layoutopt.tvm import models, resolve_target
        >>> from layoutopt.tvm.measure.runner import LocalRunner
        >>> options = TuneOptions(cache="costs.jsonl", baselines=("nchw16c",), guard=False, check=False)
        >>> solved = solve(measure(extract(models.chain((8, 8)), resolve_target("llvm"), LocalRunner(),
        ...                                options), options), options)
        >>> built = build_variants(solved, options)
        >>> list(built.baselines), built.tuned.max_relative_error     # unchecked: no error to say
        (['nchw16c'], None)
        >>> built.tuned.predicted <= built.baselines["nchw16c"].predicted     # the solution is optimal
        True
    """
    extracted = solved.measured.extracted
    options.say(f"applying the solution, building and checking{extracted.where} ...")
    with _stage(extracted.timings, "build"):
        tuned = build_variant(extracted, TUNED, f"layoutopt, method {options.method!r}",
                              solved.solution.assignment, options)
    baselines: dict[str, Variant] = {}
    for name in extracted.builds:
        if name in COMPOSITES:
            continue  # picked from its members once they are timed
        description = BUILDS.get(name) or get_baseline(name).description
        options.say(f"baseline {name}: {description} ...")
        with _stage(extracted.timings, f"baseline {name}"):
            if name == "default":  # ~100x slower than the others: timed once, not interleaved
                latency = measure_latency(extracted.untouched, extracted.inputs, repeat=1, min_repeat_ms=0,
                                          runner=extracted.runner)
                error = extracted.reference.untouched_error if extracted.reference is not None else None
                baselines[name] = Variant(name, description, None, latency, 0, error)
                continue
            assignment = get_baseline(name).function(extracted.graph, _measured_problem(solved), None)
            variant = build_variant(extracted, name, description, assignment, options)
            if variant is not None:
                baselines[name] = variant
    return _priced(Built(solved, tuned, baselines))


def _measured_problem(solved: Solved) -> Problem:
    """The problem of the measured (isolated) costs: what the baselines are chosen by."""
    return solved.problem if solved.costs is solved.measured.costs else Problem.from_graph(
        solved.measured.extracted.graph, solved.measured.costs)


def _priced(built: Built) -> Built:
    """Every variant's ``predicted``: its objective under the costs the solution was chosen with."""
    problem = built.solved.problem

    def priced(variant: Variant) -> Variant:
        if variant.assignment is None:
            return variant
        return replace(variant, predicted=problem.evaluate([variant.assignment[n] for n in problem.nodes]))

    return Built(built.solved, priced(built.tuned), {name: priced(v) for name, v in built.baselines.items()})


def calibrate(built: Built, options: TuneOptions) -> Built:
    """Calibrate the costs with every build's in-network profile, solve again, build and profile the new
    assignment, until the one chosen was profiled already or ``options.calibrate`` rounds ran out
    (:func:`~layoutopt.tvm.evaluate.calibrate.calibrated_solution`). The first solution, when it differs,
    stays
    as the variant ``layoutopt_isolated``. With no rounds, ``built`` as it is.

    Example:
        >>> from layoutopt.tvm import models, resolve_target
        >>> from layoutopt.tvm.measure.runner import LocalRunner
        >>> options = TuneOptions(cache="costs.jsonl", baselines=("nchw16c",), guard=False, calibrate=1,
        ...                       check=False)
        >>> solved = solve(measure(extract(models.chain((8, 8)), resolve_target("llvm"), LocalRunner(),
        ...                                options), options), options)
        >>> built = build_variants(solved, options)
        >>> calibrated = calibrate(built, options)
        >>> calibrated.solved.costs is built.solved.costs      # costs as the builds ran in the network
        False
        >>> calibrated.tuned.predicted == calibrated.solved.solution.objective
        True
    """
    if not options.calibrate:
        return built
    solved, extracted = built.solved, built.solved.measured.extracted
    options.say("calibrating the costs with every build's in-network profile ...")
    with _stage(extracted.timings, "calibrate"):
        calibration = Calibration(extracted.graph, solved.costs, solved.measured.meta.measured)
        builds = [built.tuned, *(v for v in built.baselines.values() if v.executable is not None)]
        _observe(calibration, builds, solved.measured)

        def build_and_observe(assignment: Mapping[Hashable, int]) -> None:
            options.say("the calibrated costs choose another assignment: building and profiling it ...")
            builds.append(build_variant(extracted, TUNED, "", assignment, options))
            _observe(calibration, builds, solved.measured)

        def solve_costs(costs: Costs) -> Solution:
            return solve(solved.measured, replace(options, progress=False), costs).solution

        solution, costs = calibrated_solution(calibration, options.calibrate, build_and_observe, solve_costs,
                                              own=lambda: [v.assignment for v in builds if v.name == TUNED])
    if solution.message:
        options.say(solution.message)
    final = next(v for v in reversed(builds) if v.assignment == solution.assignment)
    tuned = replace(final, name=TUNED,
                    description=f"layoutopt, method {options.method!r}, costs calibrated in the network")
    baselines = dict(built.baselines)
    if built.tuned.assignment != solution.assignment:
        baselines["layoutopt_isolated"] = replace(built.tuned, name="layoutopt_isolated",
                                                  description="layoutopt on the isolated measurements")
    calibrated = Solved(solved.measured, costs, Problem.from_graph(extracted.graph, costs), solution)
    return _priced(Built(calibrated, tuned, baselines))


def _observe(calibration: Calibration, builds: Sequence[Variant], measured: Measured) -> None:
    """Profile every build side by side and hand what each profile says to the calibration. Every build
    is profiled again beside the new one: a build profiled alone ran 15-25 % slower
    (notes/profile_repro.md), which biased the costs against every new assignment."""
    extracted = measured.extracted
    profiles = profile_builds({str(i): v.executable for i, v in enumerate(builds)}, extracted.inputs,
                              runner=extracted.runner)
    for i, variant in enumerate(builds):
        calibration.observe(observe(profiles[str(i)], extracted.graph, variant.assignment, measured.shapes))


def time_variants(built: Built, options: TuneOptions) -> Timed:
    """Time every build side by side in interleaved rounds
    (:func:`~layoutopt.tvm.evaluate.timing.compare_builds`):
    each variant's latency, spread and ratio to the tuned build, all from the same rounds; a composite
    (b*) becomes the faster of its members.

    Example:
        >>> from layoutopt.tvm import models, resolve_target
        >>> from layoutopt.tvm.measure.runner import LocalRunner
        >>> options = TuneOptions(cache="costs.jsonl", candidates={"algorithms": ["direct"]}, baselines=(),
        ...                       calibrate=0, check=False, repeat=10)
        >>> solved = solve(measure(extract(models.chain((8, 8)), resolve_target("llvm"), LocalRunner(),
        ...                                options), options), options)
        >>> timed = time_variants(build_variants(solved, options), options)
        >>> list(timed.built.baselines)      # b* is the faster of its members, in these rounds
        ['nchw8c', 'nchw16c', 'best_fixed']
        >>> timed.aliases["best_fixed"] in ("nchw8c", "nchw16c"), timed.noise.rounds >= 10
        (True, True)
    """
    extracted = built.solved.measured.extracted
    executables = {v.name: v.executable for v in built.variants() if v.executable is not None}
    options.say(f"timing the builds side by side{extracted.where} ...")
    with _stage(extracted.timings, "time"):
        samples, ratios = compare_builds(executables, extracted.inputs, TUNED, options.repeat,
                                         runner=extracted.runner)

    def timed(variant: Variant) -> Variant:
        if variant.name not in samples:
            return variant
        latency = Latency.of(samples[variant.name])
        return replace(variant, measured=latency.median, spread=(latency.low, latency.high),
                       versus_tuned=ratios.get(variant.name))

    baselines = {name: timed(v) for name, v in built.baselines.items()}
    aliases: dict[str, str] = {}  # b* (and the like) -> the member build it is
    for composite in (name for name in extracted.builds if name in COMPOSITES):
        members = [m for m in COMPOSITES[composite] if m in baselines]  # a member may have failed its check
        if members:
            fastest = aliases[composite] = min(members, key=lambda m: baselines[m].versus_tuned.median)
            baselines[composite] = replace(baselines[fastest], name=composite,
                                           description=f"{BUILDS[composite]}: {fastest}")
    return Timed(Built(built.solved, timed(built.tuned), baselines), Noise.of(samples), aliases)


def profile(timed: Timed, options: TuneOptions) -> Timed:
    """Time every call of every build inside the running network: each variant's ``breakdown``
    (predicted vs in-network per category of op). With ``options.profile`` off, ``timed`` as it is.

    Example:
        >>> from layoutopt.tvm import models, resolve_target
        >>> from layoutopt.tvm.measure.runner import LocalRunner
        >>> options = TuneOptions(cache="costs.jsonl", baselines=(), guard=False, calibrate=0, check=False,
        ...                       repeat=3)
        >>> solved = solve(measure(extract(models.chain((8, 8)), resolve_target("llvm"), LocalRunner(),
        ...                                options), options), options)
        >>> profiled = profile(time_variants(build_variants(solved, options), options), options)
        >>> [(row.category, row.calls) for row in profiled.built.tuned.breakdown][0]
        ('conv2d', 2)
    """
    if not options.profile:
        return timed
    built, extracted = timed.built, timed.built.solved.measured.extracted
    executables = {v.name: v.executable for v in built.variants()
                   if v.executable is not None and v.name not in timed.aliases}
    options.say("profiling the builds: each call's time in the network ...")
    with _stage(extracted.timings, "profile"):
        profiles = profile_builds(executables, extracted.inputs, runner=extracted.runner)

    def profiled(variant: Variant) -> Variant:
        calls = profiles.get(timed.aliases.get(variant.name, variant.name))
        if not calls:
            return variant
        observation = observe(calls, extracted.graph, variant.assignment, built.solved.measured.shapes)
        breakdown = time_breakdown(calls, extracted.graph, built.solved.costs, variant.assignment)
        fell_back = tuple(replace(f, seconds=sum(c.seconds for c in calls if c.symbol == f.symbol))
                          for f in variant.fallbacks)
        return replace(variant, breakdown=breakdown, observation=observation, fallbacks=fell_back)

    baselines = {name: profiled(v) for name, v in built.baselines.items()}
    return replace(timed, built=Built(built.solved, profiled(built.tuned), baselines))


def choose(timed: Timed, options: TuneOptions) -> TuneResult:
    """The guard's pick (:func:`~layoutopt.tvm.tune.guard.fastest_build`: the tuned build unless another one
    timed beside it measured faster and keeps the pins and forbids), with the layer table.

    Example:
        >>> from layoutopt.tvm import models, resolve_target
        >>> from layoutopt.tvm.measure.runner import LocalRunner
        >>> options = TuneOptions(cache="costs.jsonl", candidates={"algorithms": ["direct"]}, baselines=(),
        ...                       calibrate=0, check=False, repeat=10, pin={"conv1": "NCHW->NCHW"})
        >>> extracted = extract(models.chain((8, 8)), resolve_target("llvm"), LocalRunner(), options)
        >>> built = build_variants(solve(measure(extracted, options), options), options)
        >>> result = choose(profile(time_variants(built, options), options), options)
        >>> result.chosen, result.solution.labels["conv1"]     # b* breaks the pin: it is never handed back
        ('layoutopt', 'NCHW->NCHW')
    """
    built = timed.built
    solved = built.solved
    measured, extracted = solved.measured, solved.measured.extracted
    graph = extracted.graph
    chosen = TUNED
    if options.guard:
        rivals = built.baselines
        if options.memory_budget is not None:  # a build above the budget is never handed back
            rivals = {name: v for name, v in rivals.items()
                      if (assignment_memory(measured, v.assignment) or 0.0) <= options.memory_budget}
        chosen = fastest_build(graph, rivals, timed.aliases, extracted.constraints, options.say)
    layers = layer_table(graph, solved.problem, solved.solution.assignment, measured.costs)
    if built.tuned.observation is not None:
        in_network = built.tuned.observation.kernels
        layers = [replace(layer, in_network=in_network.get(layer.node)) for layer in layers]
    handed_back = built.tuned if chosen == TUNED else built.baselines[chosen]
    return TuneResult(executable=handed_back.executable, module=handed_back.module,
                      solution=solved.solution, graph=graph, costs=solved.costs, tuned=built.tuned,
                      baselines=built.baselines, layers=layers, timings=extracted.timings, meta=measured.meta,
                      target=str(extracted.target), chosen=chosen, isolated_costs=measured.costs,
                      fuse=options.fuse, storage=handed_back.storage, ran_on=extracted.runner.describe(),
                      reference=extracted.reference,
                      noise=timed.noise, search=extracted.search,
                      memory=assignment_memory(measured, handed_back.assignment),
                      memory_budget=options.memory_budget)

"""Search each workload's schedules on the machine (the graph tuner's step 1): :func:`search_schedules`.

Every kernel family declares its schedule space (:meth:`~layoutopt.tvm.kernels.KernelFamily.space`):
the knobs its schedule takes for one (workload, candidate) on the target, and the heuristic's point.
This module measures points of those spaces with the :class:`~layoutopt.tvm.measure.measure.Measurer`
(cold timings, the same workers, cache and runner as the measure stage: an RPC runner measures on the
device unchanged), and :func:`searched_graph` hands the ``k`` fastest schedules of every (algorithm,
input layout, output layout) of a node to the solver as its choices, which then picks layouts,
algorithms and schedules together.

**The engine: successive halving over seeded samples of the spaces.** Per workload, the *arms* are its
base candidates (a node's candidates without their schedule knobs: one per layout pair and
algorithm, Winograd's tile, a padded block, a dense weight layout), and the resource an arm is given
is how many points of its space are measured (:meth:`~.ScheduleSpace.sample`: the heuristic's
point first, then a seeded random order whose prefixes are samples too, so an arm given more keeps
what it had). Round 0 measures the candidates of today (the heuristic's points, which the measure
stage measures anyway; not counted in the budget). Then, over ``1 + log2(arms)`` rounds, the
surviving arms, ranked by their fastest point so far, share the round's part of ``trials`` (the
best-ranked first), and the slower half is dropped: the layout pairs whose kernels are fast get the
deep searches, the slow ones keep their heuristic schedule. This is Karnin et al.'s successive
halving (ICML 2013) over a sampled grid, the engine the issue names beside MetaSchedule and optuna:

- MetaSchedule (its XGBoost model and evolutionary search) segfaults in this TVM wheel
  (``../shared/notes/tvm.md``), and searches its own schedule rules, not our families' knobs;
- optuna's TPE is not a dependency, and per workload the budget is a few dozen points over spaces of
  2-200 points of a handful of categorical knobs, where a model-based sampler has little to learn
  from; ``benchmarks/results/schedule_space.md`` shows a random sample of 16-32 points keeping most
  of the gain of the whole sweep;
- halving spends the budget where it matters to the solver: the kernels that can win.

The parallel loop order (the ``order`` knob of the direct, GEMM and depthwise convs) is not searched:
a build sets it for all its kernels (``loop_order``), whatever the candidate says.

**The finalists re-timed, side by side (against the winner's curse).** A point's search cost is the
faster of two timing passes, and the search keeps the fastest of some twenty points per workload: on a
loaded machine, that picks the luckiest measurement, not the fastest kernel
(``benchmarks/results/search-notes.md``: predicted 1.5-1.65x, the searched 1x1 kernels re-timed at
0.58-0.84x of the heuristic's). So after the halving, per arm, its ``top_k + 2`` fastest searched
points (those whose search cost beats the heuristic's point at all) and the heuristic's point are
timed again together, afresh (not from the cache), by the same measurer: compiled once, then
``rounds`` interleaved rounds, each kernel once per round (:meth:`~.Measurer.time_rounds`), so that
an episode of load hits them all alike. A searched point becomes a choice only if it is faster than
the heuristic's point in at least three rounds of four (the lower quartile, nearest rank, of its
per-round ratios ``default / point`` above 1: with 5 rounds, faster in 4; a point no faster than
the default wins in 4 of 5 rounds 19 % of the time by chance, but then its cost, below, is about the
default's, so a wrong keep costs little, while the 0.6-0.8x points of the notes fail it all but
surely; a median above 1 would keep a tie half the time). A kept point costs
``cost(default) / median ratio``: the default's cost as the measure stage measures every other
kernel (cold, fastest of two passes), scaled by the paired ratio, so that it competes with the other
nodes' and transforms' costs on the same footing (its own re-timed median, taken in other moments,
would not be). The other searched points are not offered: a node's choices are today's candidates
and the kept points (:meth:`SearchResult.top_k`). Each workload's re-timing is one cost-cache record
(workload ``{"op": "paired_rounds", ...}``, written when its rounds are done), so a rerun re-times
nothing, and a killed run loses at most the workload in flight. ``rounds=0``: no re-timing, the
fastest search costs taken as they are.

**Budgets.** ``trials``: points measured per workload beyond today's candidates (0: no search);
``search_time``: seconds for the whole search, checked between batches of measurements (a batch in
flight ends first): what it cuts is counted (:attr:`SearchStats.cut`). Round 0 is never cut.

**Cache and resume.** Every point measured is a (workload, candidate) task whose candidate dict carries
its knobs (:meth:`~.ScheduleSpace.candidate`), so the cost cache keys it with them. A rerun replays the
same decisions from the cached costs and measures only what is missing; a workload searched for one
model is found in the cache by the next (searched once); within one search, a workload several nodes
share is searched once.

Example:
    The two convs of a tiny chain share a workload: searched once, 3 points beyond the heuristic's:

    >>> from layoutopt.tvm import extract_layout_graph, models
    >>> from layoutopt.tvm.measure.problem import kernel_tasks
    >>> graph = extract_layout_graph(models.chain((8, 8)), {"blocks": [8], "algorithms": ["direct"]})
    >>> result = search_schedules(kernel_tasks(graph), cache="costs.jsonl", trials=3, top_k=2)
    >>> result.stats.workloads, result.stats.searched + result.stats.cached, result.stats.cut
    (1, 5, 0)
    >>> finalists = result.retimed[next(iter(result.retimed))]    # re-timed beside the heuristic's point
    >>> len(finalists) <= 3 and all(len(r.ratios) == 5 and "reg_n" not in r.default for r in finalists)
    True
    >>> choices = searched_graph(graph, result, k=2).layout_node("conv1").labels
    >>> kept = sum(r.kept for r in finalists)    # how many beat it: this machine's answer
    >>> len(choices) == min(2, 1 + kept) + 1, choices[-1]     # NCHW8c's best two, then NCHW
    (True, 'NCHW->NCHW')
    >>> again = search_schedules(kernel_tasks(graph), cache="costs.jsonl", trials=3, top_k=2)  # resumed
    >>> again.stats.searched, again.stats.retimed, again.retimed == result.retimed
    (0, 0, True)
"""

from __future__ import annotations

import json
import math
import os
import statistics
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from ...errors import ProblemError
from ..graph.graph import Choice, LayoutGraph
from ..kernels import LOOP_ORDERS, Candidate, ScheduleSpace, family, validate_candidate, validate_workload
from .cache import task_key
from .measure import Measurer, MeasureResult
from .runner import Runner

__all__ = ["Retimed", "SearchResult", "SearchStats", "check_search", "search_schedules", "searched_graph"]

#: tasks measured per call of the measurer: the search's deadline is checked between calls
BATCH = 24
#: the finalists' paired re-timing: rounds (each finalist timed once per round), and the points re-timed
#: per arm beyond the top-k
ROUNDS = 5
MARGIN = 2
#: the workload ``op`` of a cost-cache record of a workload's paired rounds
PAIRED = "paired_rounds"


@dataclass(frozen=True)
class SearchStats:
    """The counts of one search: ``workloads`` searched (distinct), their ``arms`` (base candidates
    with a space to search); points measured now (``searched``, of which ``failed``), found in the
    cost cache (``cached``), planned but ``cut`` by ``search_time``; records of the same kernels
    measured on ``other_cpu`` (not reused); wall ``seconds``; whether the deadline ``stopped`` it.

    Example:
        >>> SearchStats(workloads=2, searched=10, cached=4, cut=3).describe()
        'schedule search: 2 workloads, 10 configs searched, 4 from the cost cache, 3 cut by the time budget'
    """

    workloads: int = 0
    arms: int = 0
    searched: int = 0
    cached: int = 0
    failed: int = 0
    cut: int = 0
    other_cpu: int = 0
    seconds: float = 0.0
    stopped: bool = False
    retimed: int = 0
    retimed_cached: int = 0
    kept: int = 0
    dropped: int = 0

    def describe(self) -> str:
        """One line for a tune's log and summary."""
        text = (f"schedule search: {self.workloads} workloads, {self.searched} configs searched, "
                f"{self.cached} from the cost cache, {self.cut} cut by the time budget")
        if self.kept or self.dropped:
            text += (f"; finalists re-timed beside the heuristic's ({self.retimed} kernels now, "
                     f"{self.retimed_cached} from the cache): {self.kept} kept, {self.dropped} dropped")
        if self.failed:
            text += f", {self.failed} failed"
        if self.other_cpu:
            text += f", {self.other_cpu} cached for another CPU not reused"
        return text

    def to_json(self) -> dict[str, Any]:
        """The counts as a JSON object."""
        return asdict(self)


@dataclass(frozen=True)
class Retimed:
    """A searched point timed again side by side with its arm's heuristic point (``default``, whose
    cost as measured normally is ``default_cost``): ``ratios``, per round, the default's time over the
    point's (above 1: the point faster; 0 when either failed).

    Example:
        >>> lucky = Retimed({"reg_n": 4}, {}, 1e-3, (1.3, 0.8, 0.9, 1.1, 0.7))    # faster in 2 rounds of 5
        >>> lucky.kept
        False
        >>> fast = Retimed({"reg_n": 8}, {}, 1e-3, (1.3, 1.25, 0.95, 1.2, 1.3))   # in 4 of 5
        >>> fast.kept, round(fast.cost * 1e3, 3)                # the default's cost over the median ratio
        (True, 0.8)
    """

    candidate: dict[str, Any]
    default: dict[str, Any]
    default_cost: float
    ratios: tuple[float, ...]

    @property
    def ratio(self) -> float:
        """The median per-round ratio (the default's time over the point's)."""
        return float(statistics.median(self.ratios)) if self.ratios else 0.0

    @property
    def kept(self) -> bool:
        """Whether the point becomes a choice: faster than the default in at least three rounds of four
        (the lower quartile of the ratios, nearest rank, above 1; see the module's notes)."""
        if not self.ratios:
            return False
        return sorted(self.ratios)[math.ceil(len(self.ratios) / 4) - 1] > 1

    @property
    def cost(self) -> float:
        """The point's cost on the footing of the others: the default's cost over the median ratio."""
        return self.default_cost / self.ratio if self.ratio > 0 else math.inf


@dataclass(frozen=True)
class SearchResult:
    """Every (workload, candidate) the search measured, with its cost (seconds, ``inf`` when it failed),
    by workload (:func:`~layoutopt.tvm.measure.cache.task_key` of the workload alone), the finalists
    re-timed side by side with the heuristic's points (``retimed``, by workload: every workload searched
    when the re-timing ran, its finalists possibly none), and the counts."""

    measured: Mapping[str, tuple[tuple[dict[str, Any], float], ...]] = field(default_factory=dict)
    stats: SearchStats = field(default_factory=SearchStats)
    retimed: Mapping[str, tuple[Retimed, ...]] = field(default_factory=dict)

    def retimed_cost(self, workload: Mapping[str, Any], candidate: Mapping[str, Any]) -> float | None:
        """The cost of a kept point (:attr:`Retimed.cost`), None for any other candidate (its cost is
        the cost cache's).

        Example:
            >>> wl = {"op": "dense", "data": [1, 8], "weight": [8, 8], "dtype": "float32"}
            >>> point = Retimed({"in": "NC", "out": "NC", "weight": "NK8n"}, {}, 2e-6, (2.0,) * 5)
            >>> result = SearchResult(retimed={task_key(wl, {}): (point,)})
            >>> result.retimed_cost(wl, point.candidate), result.retimed_cost(wl, {})
            (1e-06, None)
        """
        key = task_key(validate_workload(dict(workload)), {})
        for retimed in self.retimed.get(key, ()):
            if retimed.kept and retimed.candidate == dict(candidate):
                return retimed.cost
        return None

    def top_k(self, workload: Mapping[str, Any], candidates: Sequence[Mapping[str, Any]],
              k: int) -> list[dict[str, Any]]:
        """A node's choices after the search: for every (algorithm, in, out) of ``candidates`` (in the
        order they first come), the ``k`` fastest points measured of it, fastest first; ``candidates``
        as they are where the workload was not searched, and a group's own candidates where none of
        its points ran. Where the finalists were re-timed (:attr:`retimed`), the points are
        ``candidates`` (today's, on their measured costs) and the kept finalists (on their scaled
        costs, :attr:`Retimed.cost`) only.

        Example:
            >>> wl = {"op": "dense", "data": [1, 8], "weight": [8, 8]}
            >>> a, b = {"in": "NC", "out": "NC", "weight": "NK"}, {"in": "NC", "out": "NC", "weight": "NK8n"}
            >>> result = SearchResult({task_key(wl, {}): ((a, 2e-6), (b, 1e-6))})
            >>> result.top_k(wl, [a, b], k=1)
            [{'in': 'NC', 'out': 'NC', 'weight': 'NK8n'}]
        """
        check_search(0, top_k=k)
        key = task_key(dict(workload), {})
        measured = self.measured.get(key)
        if not measured:
            return [dict(c) for c in candidates]
        if key in self.retimed:
            today = [dict(c) for c in candidates]
            measured = tuple((c, cost) for c, cost in measured if c in today) + tuple(
                (r.candidate, r.cost) for r in self.retimed[key] if r.kept)
        chosen: list[dict[str, Any]] = []
        for group in dict.fromkeys(_group(c) for c in candidates):
            ranked = sorted((cost, i) for i, (c, cost) in enumerate(measured)
                            if _group(c) == group and math.isfinite(cost))
            if ranked:
                chosen += [dict(measured[i][0]) for _, i in ranked[: int(k)]]
            else:
                chosen += [dict(c) for c in candidates if _group(c) == group]
        return chosen


def _group(candidate: Mapping[str, Any]) -> tuple[str, str, str]:
    record = Candidate.from_json(candidate)
    return record.algorithm, record.in_layout, record.out_layout


@dataclass
class _Arm:
    """One base candidate of a workload: its space, its points in the order they are measured (the
    heuristic's, today's others, then the seeded sample), how many were asked, their costs."""

    base: dict[str, Any]
    space: ScheduleSpace
    order: list[dict[str, Any]]
    today: int  # points of today's candidates, at the front of ``order``
    asked: int = 0
    costs: dict[int, float] = field(default_factory=dict)

    @property
    def best(self) -> float:
        return min(self.costs.values(), default=math.inf)

    @property
    def left(self) -> int:
        return len(self.order) - self.asked

    def candidate(self, index: int) -> dict[str, Any]:
        return self.space.candidate(self.base, self.order[index])


@dataclass
class _Workload:
    """The successive halving of one workload's arms."""

    workload: dict[str, Any]
    arms: list[_Arm]
    trials: int
    spent: int = 0
    survivors: list[int] = field(default_factory=list)
    rounds_left: int = 0
    halve: bool = False  # whether the next round drops the slower half first (every round but the first)

    def start(self) -> list[tuple[int, int]]:
        """Round 0: every arm's points of today's candidates."""
        asks = [(a, i) for a, arm in enumerate(self.arms) for i in range(arm.today)]
        for arm in self.arms:
            arm.asked = arm.today
        self.survivors = [a for a, arm in enumerate(self.arms) if arm.left]
        self.rounds_left = 1 + int(math.log2(len(self.survivors))) if self.survivors else 0
        return asks

    def next_round(self) -> list[tuple[int, int]]:
        """The next round's (arm, point) asks: the survivors ranked by their best cost so far (the slower
        half dropped, but in the first round) share the round's part of the budget, best first. Empty
        when done."""
        budget = self.trials - self.spent
        if not self.survivors or budget <= 0 or self.rounds_left <= 0:
            return []
        ranked = sorted(self.survivors, key=lambda a: (self.arms[a].best, a))
        if self.halve:
            ranked = ranked[: max(1, math.ceil(len(ranked) / 2))]
        self.halve = True
        ranked = [a for a in ranked if self.arms[a].left]
        if not ranked:
            return []
        share = budget if self.rounds_left == 1 else max(1, budget // self.rounds_left)
        per_arm, extra = divmod(share, len(ranked))
        asks = []
        for position, a in enumerate(ranked):
            arm = self.arms[a]
            n = min(arm.left, per_arm + (position < extra))
            asks += [(a, arm.asked + i) for i in range(n)]
            arm.asked += n
        self.spent += len(asks)
        self.rounds_left -= 1
        self.survivors = ranked
        return asks

    def unasked(self) -> int:
        """How many more points the budget would have measured (what a deadline cuts)."""
        return min(self.trials - self.spent, sum(self.arms[a].left for a in self.survivors))


def _arms(workload: dict[str, Any], candidates: Sequence[dict[str, Any]], target: Any,
          seed: int) -> list[_Arm]:
    """The base candidates of a workload's candidates, each with its space and the order of its points."""
    arms: dict[str, _Arm] = {}
    for candidate in candidates:
        space = _searched_space(family(workload, candidate).space(workload, candidate, target))
        base = space.candidate(candidate, space.default()) if space.names else dict(candidate)
        key = task_key({}, base)
        if key not in arms:
            sample = space.sample(space.size, seed=seed)
            arms[key] = _Arm(base, space, sample[:1], 1)
        arm = arms[key]
        point = space.point(candidate)
        if space.is_valid(point) and point not in arm.order:
            arm.order.append(point)
            arm.today += 1
    for arm in arms.values():
        arm.order += [p for p in arm.space.sample(arm.space.size, seed=seed) if p not in arm.order]
    return list(arms.values())


def _searched_space(space: ScheduleSpace) -> ScheduleSpace:
    """``space`` with the parallel loop order fixed to the heuristic's where it is a build-wide
    :data:`~layoutopt.tvm.kernels.LOOP_ORDERS` order (a build sets it for every kernel)."""
    default = space.default()
    if "order" not in default or default["order"] not in LOOP_ORDERS:
        return space
    index = space.names.index("order")
    kept = tuple(point for point in space.valid_points if point[index] == default["order"])
    knobs = tuple((name, tuple(v for v in values if name != "order" or v == default["order"]))
                  for name, values in space.knobs)
    return replace(space, knobs=knobs, valid_points=kept)


def check_search(trials: int, search_time: float | None = None, top_k: int = 1) -> None:
    """ProblemError naming the option at fault unless ``trials`` is a non-negative integer,
    ``search_time`` positive seconds or None and ``top_k`` a positive integer.

    Example:
        >>> check_search(16, 60.0, 4)
        >>> check_search(16, top_k=0)
        Traceback (most recent call last):
        ...
        layoutopt.errors.ProblemError: top_k must be a positive integer, got 0
    """
    if isinstance(trials, bool) or int(trials) != trials or trials < 0:
        raise ProblemError(f"trials must be a non-negative integer, got {trials!r}")
    if search_time is not None and not search_time > 0:
        raise ProblemError(f"search_time must be positive seconds or None, got {search_time!r}")
    if isinstance(top_k, bool) or int(top_k) != top_k or top_k < 1:
        raise ProblemError(f"top_k must be a positive integer, got {top_k!r}")


def search_schedules(
    tasks: Iterable[tuple[Mapping[str, Any], Mapping[str, Any]]],
    target: Any = None,
    cache: Any = None,
    runner: Runner | None = None,
    *,
    trials: int = 32,
    search_time: float | None = None,
    seed: int = 0,
    progress: bool | None = None,
    timeout: float = 60.0,
    measurer: Measurer | None = None,
    top_k: int = 1,
    rounds: int = ROUNDS,
) -> SearchResult:
    """Search the schedules of every workload of ``tasks`` (``(workload, candidate)`` pairs, e.g.
    :func:`~layoutopt.tvm.measure.problem.kernel_tasks` of a layout graph; repeats and layout
    transforms are fine: a workload is searched once, one without knobs not at all) by successive
    halving (see the module's notes).

    Args:
        tasks: the candidates of today per workload (their heuristic schedules: round 0).
        target, cache, runner, timeout: as :class:`~layoutopt.tvm.measure.measure.Measurer` takes them
            (or a ``measurer`` to measure with, left open).
        trials: points measured per workload beyond today's candidates (0: none, no search).
        search_time: seconds for the whole search (None: no limit); what it cuts is counted.
        seed: the samples' seed (the same seed, the same points: a rerun replays from the cache).
        progress: show the measurer's progress bars (None: when stderr is a terminal).
        top_k: the choices per (algorithm, in, out) the result will give: ``top_k + 2`` finalists per
            arm are re-timed.
        rounds: the finalists' paired rounds (0: no re-timing; see the module's notes).

    Returns:
        A :class:`SearchResult` (its ``stats``: searched, from the cache, cut...).

    Raises:
        ProblemError: a negative budget, a bad workload or candidate (before anything is measured).
    """
    check_search(trials, search_time, top_k)
    if isinstance(rounds, bool) or int(rounds) != rounds or rounds < 0:
        raise ProblemError(f"rounds must be a non-negative integer, got {rounds!r}")
    started = time.monotonic()
    deadline = None if search_time is None else started + float(search_time)
    grouped: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]] = {}
    for workload, candidate in tasks:
        workload, candidate = validate_workload(dict(workload)), dict(candidate)
        if workload["op"] == "layout_transform":
            continue
        validate_candidate(workload, candidate)
        entry = grouped.setdefault(task_key(workload, {}), (workload, []))
        if candidate not in entry[1]:
            entry[1].append(candidate)
    own = measurer is None
    if own:
        measurer = Measurer(target=target, cache=cache, runner=runner, timeout=timeout, progress=progress)
    try:
        return _search(measurer, grouped, int(trials), seed, deadline, started, int(top_k) + MARGIN,
                       int(rounds))
    finally:
        if own:
            measurer.close()


def _search(measurer: Measurer, grouped: Mapping[str, tuple[dict[str, Any], list[dict[str, Any]]]],
            trials: int, seed: int, deadline: float | None, started: float, finalists: int,
            paired_rounds: int) -> SearchResult:
    searches = {}
    if trials:
        for key, (workload, candidates) in grouped.items():
            arms = _arms(workload, candidates, measurer.target, seed)
            if any(len(arm.order) > arm.today for arm in arms):
                searches[key] = _Workload(workload, arms, trials)
    counts = {"searched": 0, "cached": 0, "failed": 0, "other_cpu": 0}
    cut, stopped = 0, False
    asks = {key: search.start() for key, search in searches.items()}
    rounds = 0
    while any(asks.values()):
        done = _measure_round(measurer, searches, asks, counts, deadline if rounds else None, rounds)
        if done is not None:  # the deadline: what is left is cut
            cut += done + sum(search.unasked() for search in searches.values())
            stopped = True
            break
        rounds += 1
        asks = {key: search.next_round() for key, search in searches.items()}
    measured = {key: tuple((search.arms[a].candidate(i), cost) for a, arm in enumerate(search.arms)
                           for i, cost in arm.costs.items())
                for key, search in searches.items()}
    retimed: dict[str, tuple[Retimed, ...]] = {}
    retiming = {"retimed": 0, "retimed_cached": 0}
    for key, search in searches.items() if paired_rounds else ():
        finals = _finalists(search, finalists)
        if finals and deadline is not None and time.monotonic() >= deadline:
            cut += sum(len(points) for _, points in finals)  # not re-timed: not offered
            stopped = True
            finals = []
        retimed[key] = _retime(measurer, search.workload, finals, paired_rounds, retiming)
    kept = sum(r.kept for found in retimed.values() for r in found)
    stats = SearchStats(workloads=len(searches), arms=sum(sum(1 for arm in s.arms if len(arm.order) > 1)
                                                          for s in searches.values()),
                        cut=cut, seconds=time.monotonic() - started, stopped=stopped, **counts, **retiming,
                        kept=kept, dropped=sum(map(len, retimed.values())) - kept)
    return SearchResult(measured, stats, retimed)


def _finalists(search: _Workload, finalists: int) -> list[tuple[_Arm, list[int]]]:
    """Per arm whose heuristic point ran, its ``finalists`` fastest searched points (by search cost)
    among those faster than the heuristic's point (a point slower even at its luckiest is not worth
    re-timing)."""
    chosen = []
    for arm in search.arms:
        default = arm.costs.get(0, math.inf)
        points = sorted((cost, i) for i, cost in arm.costs.items() if i >= arm.today and cost < default)
        if math.isfinite(default) and points:
            chosen.append((arm, [i for _, i in points[:finalists]]))
    return chosen


def _retime(measurer: Measurer, workload: dict[str, Any], finals: list[tuple[_Arm, list[int]]], rounds: int,
            counts: dict[str, int]) -> tuple[Retimed, ...]:
    """Time the finalists of one workload again with their arms' heuristic points in ``rounds`` paired
    rounds (or find those rounds in the cost cache), and judge each point against its default."""
    if not finals:
        return ()
    kernels: list[dict[str, Any]] = []
    for arm, points in finals:
        for candidate in [arm.candidate(0), *(arm.candidate(i) for i in points)]:
            if candidate not in kernels:
                kernels.append(candidate)
    record_workload = {"op": PAIRED, "workload": workload}
    record_candidate = {"kernels": kernels, "rounds": rounds}
    record = measurer.cache.get(measurer.context, record_workload, record_candidate)
    if record is not None and len(record.get("round_times") or ()) == len(kernels):
        times = [[math.inf if t is None else float(t) for t in row] for row in record["round_times"]]
        counts["retimed_cached"] += len(kernels)
    else:
        times = measurer.time_rounds([(workload, c) for c in kernels], rounds,
                                     desc="re-timing the finalists side by side")
        measurer.cache.put({**measurer.context.record_fields(), "workload": record_workload,
                            "candidate": record_candidate, "round_times": times, "median": None,
                            "error": None, "runner": measurer.runner.describe(),
                            "load_average": round(os.getloadavg()[0], 2)})
        counts["retimed"] += len(kernels)
    timed = {json.dumps(c, sort_keys=True): row for c, row in zip(kernels, times, strict=True)}
    found = []
    for arm, points in finals:
        default = arm.candidate(0)
        base = timed[json.dumps(default, sort_keys=True)]
        for i in points:
            candidate = arm.candidate(i)
            mine = timed[json.dumps(candidate, sort_keys=True)]
            ratios = tuple(d / p if math.isfinite(d) and math.isfinite(p) and p > 0 else 0.0
                           for d, p in zip(base, mine, strict=True))
            found.append(Retimed(candidate, default, arm.costs[0], ratios))
    return tuple(found)


def _measure_round(measurer: Measurer, searches: Mapping[str, _Workload],
                   asks: Mapping[str, list[tuple[int, int]]], counts: dict[str, int], deadline: float | None,
                   round_number: int) -> int | None:
    """Measure one round's asks in batches, recording each point's cost on its arm; the number of asks
    left unmeasured when ``deadline`` passed (None: all measured)."""
    flat = [(key, a, i) for key, mine in asks.items() for a, i in mine]
    for first in range(0, len(flat), BATCH if deadline is not None else max(1, len(flat))):
        if deadline is not None and time.monotonic() >= deadline:
            return len(flat) - first
        batch = flat[first: first + (BATCH if deadline is not None else len(flat))]
        tasks = [(searches[key].workload, searches[key].arms[a].candidate(i)) for key, a, i in batch]
        results: list[MeasureResult] = measurer.measure(
            tasks, desc=f"searching schedules, round {round_number}")
        stats = measurer.stats
        counts["searched"] += stats.measured
        counts["cached"] += stats.cached + stats.retimed
        counts["failed"] += stats.failed
        counts["other_cpu"] += stats.other_cpu
        for (key, a, i), result in zip(batch, results, strict=True):
            searches[key].arms[a].costs[i] = result.cost
    return None


def searched_graph(graph: LayoutGraph, result: SearchResult, k: int = 1) -> LayoutGraph:
    """A copy of ``graph`` whose target nodes choose among the ``k`` fastest searched schedules of each
    of their (algorithm, in, out) (:meth:`SearchResult.top_k`), labelled with their knobs
    (``NCHW16c->NCHW16c[oc_tile=2,reg_n=4]``); other nodes as they were.

    Example:
        >>> from layoutopt.tvm import extract_layout_graph, models
        >>> graph = extract_layout_graph(models.chain((8, 8)), {"blocks": [8], "algorithms": ["direct"]})
        >>> searched_graph(graph, SearchResult()).layout_node("conv1").labels    # nothing searched
        ['NCHW8c->NCHW8c', 'NCHW->NCHW']
    """
    new = graph.copy()
    for node in graph.layout_nodes():
        if node.kind != "target":
            continue
        chosen = result.top_k(node.workload, node.candidates, k)
        if chosen != node.candidates:
            new.replace_choices(node.name, tuple(Choice(candidate) for candidate in chosen))
    return new

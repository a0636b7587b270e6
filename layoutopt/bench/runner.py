"""Running a suite: every method (and baseline) on every instance, each failure recorded, not fatal.

By default each runner (a method name or a :class:`~layoutopt.baselines.Baseline`) has its own
worker process (:class:`~layoutopt.isolation.IsolatedWorker`), so that a crash or an overrun of
one solver is a record, and the worker is replaced for the next instance.
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
import traceback
from collections.abc import Sequence
from typing import Any

from ..baselines import Baseline, get_baseline, solve_baseline
from .records import Record
from .stats import summarize
from .suite import InstanceSpec

__all__ = ["REPEAT_BELOW", "run"]

#: methods that are references for tests, not contenders
EXCLUDED_BY_DEFAULT = ("bruteforce",)
#: solves faster than this (seconds) are repeated and their best time kept: on a shared VM a core's
#: speed flips by ~1.45x about every second, so one sample of a solve this short is mostly noise
#: (pbqp on densenet_10000: 241 ms as one sample, 165-175 ms as the best of three)
REPEAT_BELOW = 0.5
#: a tiny instance each runner solves once, untimed, before its first timed call, so that
#: imports and solver start-up are not billed to the first instance of the suite
WARM_UP = InstanceSpec("warm-up", family="resnet", nodes=20, max_choices=4)
#: seconds a fresh worker process may take to import layoutopt (a loaded CI machine is slow)
STARTUP_TIMEOUT = 300.0

Runner = str | Baseline  # a method name, or a baseline


def _name(runner: Runner) -> str:
    return runner if isinstance(runner, str) else runner.name


def _solve(runner: Runner, graph, costs, time_limit: float | None):
    if isinstance(runner, Baseline):
        return solve_baseline(runner, graph, costs, time_limit)
    import layoutopt

    return layoutopt.solve(graph, costs, method=runner, time_limit=time_limit)


def _call(
    spec: InstanceSpec, runner: Runner, time_limit: float | None, cache: dict, repeats: int = 1
) -> dict[str, Any]:
    """Solve one instance with one runner; never raises.

    A solve faster than :data:`REPEAT_BELOW` seconds is repeated up to ``repeats`` times in
    all and its best wall time kept: a millisecond timing is otherwise mostly noise.
    """
    from ..errors import ProblemError

    warmed = cache.setdefault("warmed up", set())
    if _name(runner) not in warmed:
        warmed.add(_name(runner))
        with contextlib.suppress(Exception):
            _solve(runner, *WARM_UP.load(), time_limit)
    if spec not in cache:
        cache.pop(cache.pop("instance", None), None)  # one instance at a time: the suite's order
        graph, costs = spec.load()
        cache["instance"] = spec
        cache[spec] = (graph, costs, graph.number_of_nodes(), graph.number_of_edges())
    graph, costs, n, m = cache[spec]
    out: dict[str, Any] = {"nodes": n, "edges": m}
    start, cpu = time.perf_counter(), time.process_time()
    try:
        solution = _solve(runner, graph, costs, time_limit)
        out["wall_time"], out["cpu_time"] = time.perf_counter() - start, time.process_time() - cpu
        for _ in range(repeats - 1):
            if out["wall_time"] >= REPEAT_BELOW:
                break
            start, cpu = time.perf_counter(), time.process_time()
            _solve(runner, graph, costs, time_limit)
            out["wall_time"] = min(out["wall_time"], time.perf_counter() - start)
            out["cpu_time"] = min(out["cpu_time"], time.process_time() - cpu)
        out.update(
            status=solution.status,
            objective=solution.objective,
            lower_bound=solution.lower_bound,
            message=solution.message,
            stats=_plain(solution.stats),
        )
    except Exception as exc:
        out["wall_time"], out["cpu_time"] = time.perf_counter() - start, time.process_time() - cpu
        out.update(
            status="refused" if isinstance(exc, ProblemError) else "error",  # declined, or a bug
            message=f"{type(exc).__name__}: {exc}".strip(),
            stats=_plain(getattr(exc, "stats", {})),
        )
        if not isinstance(exc, (ValueError, TimeoutError, ImportError)):
            out["message"] += " | " + traceback.format_exc(limit=-2).strip().replace("\n", " / ")
    return out


def _plain(stats: Any) -> dict[str, Any]:
    """The JSON-like scalars of a stats dict (safe to pickle and to write to CSV)."""
    if not isinstance(stats, dict):
        return {}
    return {str(k): v for k, v in stats.items() if isinstance(v, (str, int, float, bool)) or v is None}


# --- the worker side of isolated runs: one process per runner, its instance cache in a global ----------

_WORKER_CACHE: dict = {}


def _prepare_worker() -> None:
    import layoutopt  # noqa: F401  (start-up is not billed to the first call's deadline)

    from .. import generators  # noqa: F401


def _call_in_worker(spec: InstanceSpec, runner: Runner, time_limit: float | None, repeats: int):
    return _call(spec, runner, time_limit, _WORKER_CACHE, repeats)


class _Workers:
    """An isolated worker per runner, started on its first call."""

    def __init__(self) -> None:
        self._workers: dict[str, Any] = {}

    def call(
        self, spec: InstanceSpec, runner: Runner, time_limit: float | None, grace: float, repeats: int
    ) -> dict[str, Any]:
        from ..isolation import IsolatedWorker, WorkerDied, WorkerStartError

        # Loading the instance, the untimed warm-up and the solver's own overshoot get slack.
        deadline = None if time_limit is None else 2 * time_limit + grace + repeats * REPEAT_BELOW
        name = _name(runner)
        if name not in self._workers:
            self._workers[name] = IsolatedWorker(_prepare_worker, startup_timeout=STARTUP_TIMEOUT)
        worker = self._workers[name]
        try:
            return worker.call(_call_in_worker, spec, runner, time_limit, repeats, timeout=deadline)
        except WorkerDied as died:
            return {"status": "killed" if died.timed_out else "crash", "message": str(died)}
        except WorkerStartError as failed:
            return {"status": "crash", "message": str(failed)}

    def close(self) -> None:
        for worker in self._workers.values():
            worker.close()
        self._workers.clear()


def _default_methods() -> list[str]:
    import layoutopt

    return [m for m in layoutopt.methods() if m not in EXCLUDED_BY_DEFAULT]


def run(
    instances: Sequence[InstanceSpec],
    methods: Sequence[str] | None = None,
    time_limit: float | None = 60.0,
    baselines: Sequence[str | Baseline] | None = None,
    isolate: bool = True,
    progress: bool = True,
    grace: float = 30.0,
    repeats: int = 3,
) -> list[Record]:
    """Solve every instance with every method (and baseline); one :class:`Record` each.

    Args:
        instances: the suite.
        methods: registered method names; None for every available one except
            ``bruteforce``.
        time_limit: seconds per solve, passed to each method.
        baselines: registered baseline names (see :mod:`layoutopt.baselines`) or
            :class:`~layoutopt.baselines.Baseline` objects, run beside the methods.
        isolate: run each runner in its own worker process, so that a crash or a hang is
            recorded instead of ending the run.
        progress: show a tqdm progress bar (on stderr).
        grace: extra seconds, beyond twice the limit, before an isolated worker is killed.
        repeats: solves faster than :data:`REPEAT_BELOW` run this many times; the best
            wall and CPU times are kept.

    Returns:
        The records, gaps filled in (see :func:`~layoutopt.bench.summarize`).
    """
    runners: dict[str, Runner] = {m: m for m in (_default_methods() if methods is None else methods)}
    for baseline in baselines or ():
        entry = get_baseline(baseline) if isinstance(baseline, str) else baseline
        runners[entry.name] = entry
    jobs = [(spec, name) for spec in instances for name in runners]
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(jobs), unit="solve", file=sys.stderr)
    pool = _Workers() if isolate else None
    cache: dict = {}
    records = []
    shape: dict[InstanceSpec, tuple[int, int]] = {}
    try:
        for spec, name in jobs:
            if bar is not None:
                bar.set_description(f"{spec.name} {name}")
            if pool is None:
                outcome = _call(spec, runners[name], time_limit, cache, repeats)
            else:
                outcome = pool.call(spec, runners[name], time_limit, grace, repeats)
            if "nodes" in outcome:
                shape[spec] = (outcome["nodes"], outcome["edges"])
            n, m = shape.get(spec, (0, 0))
            records.append(
                Record(
                    spec.name,
                    spec.group,
                    n,
                    m,
                    name,
                    outcome["status"],
                    objective=outcome.get("objective", math.inf),
                    lower_bound=outcome.get("lower_bound", -math.inf),
                    wall_time=outcome.get("wall_time", math.nan),
                    cpu_time=outcome.get("cpu_time", math.nan),
                    message=outcome.get("message", ""),
                    stats=outcome.get("stats", {}),
                )
            )
            if bar is not None:
                bar.update()
    finally:
        if pool is not None:
            pool.close()
        if bar is not None:
            bar.close()
    for r in records:  # a crash before the first answer leaves the shape unknown
        if r.nodes == 0 and any(s.name == r.instance for s in shape):
            r.nodes, r.edges = next(v for s, v in shape.items() if s.name == r.instance)
    summarize(records)
    return records

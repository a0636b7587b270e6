"""The solver-comparison harness: every method on every instance of a suite, side by side.

:func:`run` solves each instance with each method through the public API
(:func:`layoutopt.solve`) under a time limit and records wall time, objective, the gap to
the best known objective, the proven lower bound and the status. A method that raises,
crashes the interpreter or overruns its limit is recorded as a failure, not fatal: by
default each method runs in its own worker process (``isolate=True``), restarted after a
crash or a kill. :func:`write_report` writes a markdown table in the shape of a paper's
table, a CSV and two PNG plots (solve time against size, log-log; optimality gaps of the
heuristics), each stamped with the date, the machine and the package versions.

Instances are :class:`InstanceSpec` objects: a generator call (see
:mod:`layoutopt.generators`) or a JSON problem file (see :mod:`layoutopt.io`), so a worker
rebuilds an instance from its few-byte description. :func:`synthetic_suite` is the
standard synthetic suite; :func:`file_suite` loads every ``*.json`` of a directory (the
real, TVM-measured instances live in ``benchmarks/instances/``).

Besides the registered methods, a run may include *baselines*: ``name -> "module:function"``
with ``function(graph, costs, time_limit) -> Solution`` (the TVM graph tuner's DP in
``benchmarks/baselines/tvm_dp.py`` is one). An exception carrying a ``stats`` dict keeps
those stats in the record (the DP reports its state counts when it refuses).

Example:
    >>> from layoutopt import bench
    >>> suite = bench.synthetic_suite(sizes=[20], families=["resnet"], presets=False)
    >>> records = bench.run(suite, methods=["greedy", "bruteforce"], time_limit=5,
    ...                     isolate=False, progress=False)
    >>> [(r.method, r.status) for r in records]
    [('greedy', 'feasible'), ('bruteforce', 'refused')]
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import datetime
import importlib
import importlib.metadata
import importlib.util
import math
import multiprocessing
import os
import platform
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "InstanceSpec",
    "Record",
    "file_suite",
    "run",
    "summarize",
    "synthetic_suite",
    "write_report",
]

#: sizes of the standard synthetic suite
SIZES = (20, 50, 100, 200, 500, 1000, 2000)
#: methods that are references for tests, not contenders
EXCLUDED_BY_DEFAULT = ("bruteforce",)


@dataclass(frozen=True)
class InstanceSpec:
    """How to build one instance: a generator call, or a JSON problem file (``path``).

    Example:
        >>> graph, costs = InstanceSpec("resnet50", family="resnet50").load()
        >>> graph.number_of_nodes()
        71
    """

    name: str
    family: str | None = None
    nodes: int | None = None
    seed: int = 0
    regime: str = "normal"
    max_choices: int = 16
    path: str | None = None
    group: str = "synthetic"

    def load(self):
        """``(graph, costs)`` of the instance."""
        if self.path is not None:
            from .io import read_json

            return read_json(self.path)
        from .generators import generate

        return generate(
            self.family, nodes=self.nodes, max_choices=self.max_choices, seed=self.seed, regime=self.regime
        )


def synthetic_suite(
    sizes: Iterable[int] = SIZES,
    families: Iterable[str] = ("resnet", "inception", "densenet", "ssd", "random"),
    regimes: Iterable[str] = ("normal",),
    seeds: Iterable[int] = (0,),
    presets: bool = True,
) -> list[InstanceSpec]:
    """The synthetic suite: the named presets (real networks' sizes), then every family x size.

    Example:
        >>> [s.name for s in synthetic_suite(sizes=[50], families=["ssd"], regimes=["normal", "hard"])][:5]
        ['resnet50', 'inception', 'densenet121', 'ssd', 'ssd_50']
    """
    from .generators import generate  # noqa: F401  (fail early if the generators are broken)

    specs = []
    regimes, seeds = list(regimes), list(seeds)
    for regime in regimes:
        prefix = "" if regime == "normal" else f"{regime}_"
        for seed in seeds:
            suffix = "" if len(seeds) == 1 else f"_s{seed}"
            if presets:
                for preset in ("resnet50", "inception", "densenet121", "ssd"):
                    specs.append(
                        InstanceSpec(
                            f"{prefix}{preset}{suffix}",
                            family=preset,
                            seed=seed,
                            regime=regime,
                            group="preset",
                        )
                    )
            for family in families:
                for n in sizes:
                    specs.append(
                        InstanceSpec(
                            f"{prefix}{family}_{n}{suffix}", family=family, nodes=n, seed=seed, regime=regime
                        )
                    )
    return specs


def file_suite(directory: str | os.PathLike, group: str = "real") -> list[InstanceSpec]:
    """Every ``*.json`` problem file of ``directory`` (sorted by name), or [] if there is none."""
    folder = Path(directory)
    if not folder.is_dir():
        return []
    return [InstanceSpec(p.stem, path=str(p), group=group) for p in sorted(folder.glob("*.json"))]


# --- running ----------------------------------------------------------------------------------


@dataclass
class Record:
    """One method on one instance.

    ``status`` is a solution status (``"optimal"``, ``"feasible"``, ``"infeasible"``) or a
    failure: ``"refused"`` (the method raised a ProblemError: it declines the instance, e.g. a
    size cap), ``"error"`` (any other exception), ``"crash"`` (the worker process died) or
    ``"killed"`` (it overran its time limit and was stopped).
    """

    instance: str
    group: str
    nodes: int
    edges: int
    method: str
    status: str
    objective: float = math.inf
    lower_bound: float = -math.inf
    wall_time: float = math.nan
    cpu_time: float = math.nan  # CPU seconds of the process (all threads): robust to a loaded machine
    gap: float = math.nan  # to the best known objective of the instance, filled by summarize()
    message: str = ""
    stats: dict[str, Any] = field(default_factory=dict)


#: solves faster than this (seconds) are repeated and their best time kept
REPEAT_BELOW = 0.2
#: statuses of a record that are not a solution
FAILED = ("refused", "error", "crash", "killed", "infeasible")
#: a tiny instance each runner solves once, untimed, before its first timed call, so that
#: imports and solver start-up are not billed to the first instance of the suite
WARM_UP = InstanceSpec("warm-up", family="resnet", nodes=20, max_choices=4)


def _solve(runner: str, graph, costs, time_limit: float | None):
    import layoutopt

    if ":" in runner:
        module, function = runner.split(":")
        return getattr(importlib.import_module(module), function)(graph, costs, time_limit)
    return layoutopt.solve(graph, costs, method=runner, time_limit=time_limit)


def _call(
    spec: InstanceSpec, runner: str, time_limit: float | None, cache: dict, repeats: int = 1
) -> dict[str, Any]:
    """Solve one instance with one runner (a method name or "module:function"); never raises.

    A solve faster than :data:`REPEAT_BELOW` seconds is repeated up to ``repeats`` times in
    all and its best wall time kept: a millisecond timing is otherwise mostly noise.
    """
    from .errors import ProblemError

    warmed = cache.setdefault("warmed up", set())
    if runner not in warmed:
        warmed.add(runner)
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


def _worker(connection) -> None:
    import layoutopt  # noqa: F401  (start-up is not billed to the first call's deadline)

    from . import generators  # noqa: F401

    connection.send("ready")
    cache: dict = {}
    while True:
        try:
            request = connection.recv()
        except EOFError:
            return
        if request is None:
            return
        spec, runner, time_limit, repeats = request
        connection.send(_call(spec, runner, time_limit, cache, repeats))


#: seconds a fresh worker process may take to import layoutopt (a loaded CI machine is slow)
STARTUP_TIMEOUT = 300.0


class _Isolated:
    """A worker process per runner; restarted after a crash or a kill."""

    def __init__(self) -> None:
        self._context = multiprocessing.get_context("spawn")
        self._workers: dict[str, tuple[Any, Any]] = {}

    def _worker_for(self, runner: str):
        if runner not in self._workers:
            parent, child = self._context.Pipe()
            process = self._context.Process(target=_worker, args=(child,), daemon=True)
            process.start()
            child.close()
            self._workers[runner] = (process, parent)
            if not parent.poll(STARTUP_TIMEOUT) or parent.recv() != "ready":
                raise EOFError
        return self._workers[runner]

    def call(
        self, spec: InstanceSpec, runner: str, time_limit: float | None, grace: float, repeats: int
    ) -> dict[str, Any]:
        # Loading the instance, the untimed warm-up and the solver's own overshoot get slack.
        deadline = None if time_limit is None else 2 * time_limit + grace + repeats * REPEAT_BELOW
        try:
            process, connection = self._worker_for(runner)
            connection.send((spec, runner, time_limit, repeats))
            if connection.poll(deadline):
                return connection.recv()
            outcome = {"status": "killed", "message": f"no answer within {deadline:g} s; worker killed"}
        except (EOFError, OSError):
            outcome = {"status": "crash", "message": "worker process died"}
        process = self._workers.pop(runner)[0]
        process.kill()  # a worker that overran or lost its pipe is not reused
        process.join(5)
        if outcome["status"] == "crash":
            outcome["message"] += f" (exit code {process.exitcode})"
        return outcome

    def close(self) -> None:
        for process, connection in self._workers.values():
            with contextlib.suppress(OSError):
                connection.send(None)
            process.join(5)
            if process.is_alive():
                process.kill()
        self._workers.clear()


def _default_methods() -> list[str]:
    import layoutopt

    return [m for m in layoutopt.methods() if m not in EXCLUDED_BY_DEFAULT]


def run(
    instances: Sequence[InstanceSpec],
    methods: Sequence[str] | None = None,
    time_limit: float | None = 60.0,
    baselines: dict[str, str] | None = None,
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
        baselines: extra runners, ``name -> "module:function"`` (see the module docstring).
        isolate: run each runner in its own worker process, so that a crash or a hang is
            recorded instead of ending the run.
        progress: show a tqdm progress bar (on stderr).
        grace: extra seconds, beyond twice the limit, before an isolated worker is killed.
        repeats: solves faster than :data:`REPEAT_BELOW` run this many times; the best
            wall and CPU times are kept.

    Returns:
        The records, gaps filled in (see :func:`summarize`).
    """
    runners = {m: m for m in (_default_methods() if methods is None else methods)}
    runners.update(baselines or {})
    jobs = [(spec, name) for spec in instances for name in runners]
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(jobs), unit="solve", file=sys.stderr)
    pool = _Isolated() if isolate else None
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


# --- analysis ---------------------------------------------------------------------------------


def _best_known(records: Sequence[Record]) -> dict[str, float]:
    best: dict[str, float] = {}
    for r in records:
        if r.status in ("optimal", "feasible") and math.isfinite(r.objective):
            best[r.instance] = min(best.get(r.instance, math.inf), r.objective)
    return best


def summarize(records: Sequence[Record]) -> dict[str, Any]:
    """Fill each record's ``gap`` (to the instance's best known objective) and compute the figures.

    Returns:
        ``{"methods": {method: {"runs", "optimal", "failures", "mean_gap", "median_gap",
        "max_gap", "geomean_time"}}, "auto_vs_toulbar2": {...} or None}`` where gaps are
        fractions over the instances the method solved, and the ``auto_vs_toulbar2`` entry
        compares wall times on the instances both proved optimal.
    """
    best = _best_known(records)
    for r in records:
        b = best.get(r.instance)
        if b is not None and math.isfinite(r.objective):
            r.gap = (r.objective - b) / b if b > 0 else float(r.objective > b)
        else:
            r.gap = math.nan
    methods: dict[str, Any] = {}
    for name in dict.fromkeys(r.method for r in records):
        mine = [r for r in records if r.method == name]
        gaps = [r.gap for r in mine if not math.isnan(r.gap)]
        times = [r.wall_time for r in mine if r.status in ("optimal", "feasible") and r.wall_time > 0]
        methods[name] = {
            "runs": len(mine),
            "optimal": sum(r.status == "optimal" for r in mine),
            "failures": sum(r.status in FAILED for r in mine),
            "mean_gap": statistics.fmean(gaps) if gaps else math.nan,
            "median_gap": statistics.median(gaps) if gaps else math.nan,
            "max_gap": max(gaps) if gaps else math.nan,
            "geomean_time": statistics.geometric_mean(times) if times else math.nan,
        }
    return {"methods": methods, "auto_vs_toulbar2": _compare(records, "auto", "toulbar2")}


def _compare(records: Sequence[Record], mine: str, theirs: str) -> dict[str, Any] | None:
    by = {(r.instance, r.method): r for r in records}
    instances = list(dict.fromkeys(r.instance for r in records))
    both = [i for i in instances if (i, mine) in by and (i, theirs) in by]
    if not both:
        return None
    ratios = {}
    not_proved = [i for i in both if by[(i, mine)].status != "optimal"]
    for i in both:
        a, b = by[(i, mine)], by[(i, theirs)]
        if a.status == "optimal" and b.status == "optimal":
            ratios[i] = a.wall_time / b.wall_time
    return {
        "instances": len(both),
        "proved": len(both) - len(not_proved),
        "not_proved": not_proved,
        "ratios": ratios,
        "median_ratio": statistics.median(ratios.values()) if ratios else math.nan,
        "max_ratio": max(ratios.values()) if ratios else math.nan,
        "total_ratio": (
            sum(by[(i, mine)].wall_time for i in ratios) / sum(by[(i, theirs)].wall_time for i in ratios)
            if ratios
            else math.nan
        ),
        "slower": {i: q for i, q in ratios.items() if q > 1.0},
        "cpu_total_ratio": (
            sum(by[(i, mine)].cpu_time for i in ratios) / sum(by[(i, theirs)].cpu_time for i in ratios)
            if ratios
            else math.nan
        ),
    }


# --- reports ----------------------------------------------------------------------------------


def stamp() -> dict[str, str]:
    """Date, machine and package versions, for every output."""
    versions = []
    for package in ("layoutopt", "numpy", "networkx", "ortools", "pytoulbar2", "highspy"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            versions.append(f"{package} {importlib.metadata.version(package)}")
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.platform(terse=True)}",
        "versions": f"Python {platform.python_version()}, " + ", ".join(versions),
    }


def _fmt_time(seconds: float) -> str:
    if math.isnan(seconds):
        return "-"
    if seconds < 1.0:
        return f"{seconds * 1e3:.3g}ms"
    return f"{seconds:.3g}s"


def _fmt_gap(gap: float) -> str:
    return f"{100 * gap:.2f}%" if not math.isnan(gap) else "-"


def _cell(r: Record, exact: bool, fastest: bool) -> str:
    if r.status == "optimal":
        text = _fmt_time(r.wall_time)
        return f"**{text}**" if fastest else text
    if r.status == "feasible":
        gap = f"+{_fmt_gap(r.gap)}" if r.gap > 0 else "best"
        return f"TO ({gap})" if exact else f"{_fmt_time(r.wall_time)} ({gap})"
    return r.status


def _is_exact(method: str) -> bool:
    try:
        from .solvers import get_solver

        return bool(get_solver(method).exact)
    except Exception:
        return True


def markdown(
    records: Sequence[Record], title: str = "Solver comparison", time_limit: float | None = None
) -> str:
    """The report as markdown: the results table, a summary per method, the targets, failures."""
    summary = summarize(records)
    info = stamp()
    methods = list(summary["methods"])
    exact = {m: _is_exact(m) for m in methods}
    by = {(r.instance, r.method): r for r in records}
    instances = list(dict.fromkeys(r.instance for r in records))
    lines = [
        f"# {title}",
        "",
        f"- **Date:** {info['date']}",
        f"- **Machine:** {info['machine']}",
        f"- **Versions:** {info['versions']}",
        f"- **Time limit:** {time_limit:g} s per solve" if time_limit else "- **Time limit:** none",
        "- Wall time of one `layoutopt.solve` call (validation and model building included; a "
        f"solve under {REPEAT_BELOW:g} s is repeated, 3 times by default, and its best time kept). "
        "Cells: time when proven optimal (**bold**: fastest proof); `time (+g%)` for a heuristic, `g` its "
        "gap to the best known objective; `TO (+g%)` an exact method stopped at the limit with its "
        "incumbent; `refused`, `error`, `crash`, `killed`: see Failures. Best known: the least objective "
        "found, `*` when some exact method proved it optimal.",
        "",
        "| instance | n/m | best known | " + " | ".join(methods) + " |",
        "|---|---|---|" + "---|" * len(methods),
    ]
    best = _best_known(records)
    for inst in instances:
        row = [by[(inst, m)] for m in methods if (inst, m) in by]
        proved = [r.wall_time for r in row if r.status == "optimal"]
        fastest = min(proved) if proved else math.nan
        cells = []
        for m in methods:
            r = by.get((inst, m))
            cells.append(
                "" if r is None else _cell(r, exact[m], r.status == "optimal" and r.wall_time == fastest)
            )
        known = f"{best[inst]:.7g}{'*' if proved else ''}" if inst in best else "-"
        lines.append(f"| {inst} | {row[0].nodes}/{row[0].edges} | {known} | " + " | ".join(cells) + " |")

    lines += [
        "",
        "## Summary per method",
        "",
        "Gaps are to the best known objective of each instance, over the instances the method solved.",
        "",
        "| method | exact | runs | proved optimal | failures | mean gap | median gap | max gap "
        "| geo-mean time |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for m, s in summary["methods"].items():
        lines.append(
            f"| {m} | {'yes' if exact[m] else 'no'} | {s['runs']} | {s['optimal']} | {s['failures']} | "
            f"{_fmt_gap(s['mean_gap'])} | {_fmt_gap(s['median_gap'])} | {_fmt_gap(s['max_gap'])} | "
            f"{_fmt_time(s['geomean_time'])} |"
        )

    lines += ["", "## Targets", ""]
    cmp = summary["auto_vs_toulbar2"]
    if cmp is None:
        lines.append("- `auto` vs `toulbar2`: not both in this run.")
    else:
        lines.append(
            f"- `auto` proved optimality on {cmp['proved']}/{cmp['instances']} instances"
            + (f" (not on: {', '.join(cmp['not_proved'])})" if cmp["not_proved"] else "")
            + "."
        )
        lines.append(
            f"- `auto` time / `toulbar2` time, on the {len(cmp['ratios'])} instances both proved: median "
            f"{cmp['median_ratio']:.2f}x, max {cmp['max_ratio']:.2f}x, total {cmp['total_ratio']:.2f}x "
            f"(target <= 1.0x); slower than toulbar2 on {len(cmp['slower'])}"
            + (": " + ", ".join(f"{i} ({q:.2f}x)" for i, q in cmp["slower"].items()) if cmp["slower"] else "")
            + f". CPU time (robust to load): total {cmp['cpu_total_ratio']:.2f}x."
        )
    if "pbqp" in summary["methods"]:
        s = summary["methods"]["pbqp"]
        lines.append(
            f"- `pbqp` gap: mean {_fmt_gap(s['mean_gap'])}, median {_fmt_gap(s['median_gap'])}, "
            f"max {_fmt_gap(s['max_gap'])} (target: mean <= 0.5 %)."
        )
        worst = sorted((r for r in records if r.method == "pbqp" and r.gap > 0.005), key=lambda r: -r.gap)
        if worst:
            lines.append(
                "  Over 0.5 %: " + ", ".join(f"{r.instance} ({_fmt_gap(r.gap)})" for r in worst) + "."
            )

    dp = [r for r in records if "max_live" in r.stats]
    if dp:
        lines += [
            "",
            "## Topological-order DP (TVM graph tuner) state counts",
            "",
            "`live`: operators in the largest DP state (open fan-out plus the current one); `states`: the "
            "largest DP table; `total`: all stages' tables.",
            "",
            "| instance | n | live | log10 states | log10 total | outcome |",
            "|---|---|---|---|---|---|",
        ]
        for r in dp:
            total = r.stats.get("total_states", 0)
            outcome = _fmt_time(r.wall_time) if r.status == "optimal" else _cell(r, True, False)
            lines.append(
                f"| {r.instance} | {r.nodes} | {r.stats['max_live']} | {r.stats['log10_max_states']:.1f} "
                f"| {math.log10(total) if total else 0:.1f} | {outcome} |"
            )

    failures = [r for r in records if r.status in FAILED]
    if failures:
        lines += ["", "## Failures", ""]
        for r in failures:
            message = r.message.replace("|", "/").replace("\n", " ")
            lines.append(f"- {r.instance} / {r.method}: {r.status}: {message[:300]}")
    return "\n".join(lines) + "\n"


CSV_FIELDS = (
    "instance",
    "group",
    "nodes",
    "edges",
    "method",
    "status",
    "objective",
    "lower_bound",
    "wall_time",
    "cpu_time",
    "gap",
    "message",
    "stats",
)


def write_csv(records: Sequence[Record], path: str | os.PathLike) -> None:
    """One row per record, after ``#``-comment lines with the stamp (``pandas.read_csv(comment="#")``)."""
    import json

    with open(path, "w", newline="", encoding="utf-8") as handle:
        for key, value in stamp().items():
            handle.write(f"# {key}: {value}\n")
        writer = csv.DictWriter(handle, fieldnames=CSV_FIELDS)
        writer.writeheader()
        for r in records:
            row = asdict(r)
            row["stats"] = json.dumps(row["stats"], sort_keys=True, default=str)
            writer.writerow({k: row[k] for k in CSV_FIELDS})


def plot(records: Sequence[Record], time_path: str | os.PathLike, gap_path: str | os.PathLike) -> None:
    """Solve time against size (log-log, one line per method: the median per size) and the
    distribution of the optimality gaps of the heuristics (non-exact methods)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    info = stamp()
    footer = f"{info['date']} | {info['machine']}\n{info['versions']}"
    methods = list(dict.fromkeys(r.method for r in records))

    fig, ax = plt.subplots(figsize=(8, 5.5))
    for m in methods:
        solved = [
            r for r in records if r.method == m and r.status in ("optimal", "feasible") and r.wall_time > 0
        ]
        if not solved:
            continue
        sizes = sorted({r.nodes for r in solved})
        medians = [statistics.median(r.wall_time for r in solved if r.nodes == n) for n in sizes]
        (line,) = ax.plot(sizes, medians, marker="o", label=m)
        ax.scatter(
            [r.nodes for r in solved], [r.wall_time for r in solved], s=8, alpha=0.35, color=line.get_color()
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("nodes")
    ax.set_ylabel("wall time of solve (s)")
    ax.set_title("Solve time against size (line: median per size; dots: instances)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.text(0.01, 0.005, footer, fontsize=6, color="gray")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    fig.savefig(time_path, dpi=120)
    plt.close(fig)

    heuristics = [m for m in methods if not _is_exact(m)]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    data = [[100 * r.gap for r in records if r.method == m and not math.isnan(r.gap)] for m in heuristics]
    kept = [(m, d) for m, d in zip(heuristics, data, strict=True) if d]
    if kept:
        ax.boxplot([d for _, d in kept], tick_labels=[m for m, _ in kept], showmeans=True)
        ax.set_yscale("symlog", linthresh=0.01)
    ax.set_ylabel("gap to the best known objective (%)")
    ax.set_title("Optimality gaps of the heuristics (triangle: mean)")
    ax.grid(True, axis="y", alpha=0.3)
    fig.text(0.01, 0.005, footer, fontsize=6, color="gray")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    fig.savefig(gap_path, dpi=120)
    plt.close(fig)


def write_report(
    records: Sequence[Record],
    out_dir: str | os.PathLike,
    stem: str = "solvers",
    plots: bool = True,
    time_limit: float | None = None,
) -> list[Path]:
    """Write ``<stem>.md``, ``<stem>.csv`` and (with ``plots``) ``<stem>.time.png`` and
    ``<stem>.gaps.png`` under ``out_dir``; return their paths."""
    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"{stem}.md", folder / f"{stem}.csv"]
    paths[0].write_text(markdown(records, time_limit=time_limit), encoding="utf-8")
    write_csv(records, paths[1])
    if plots:
        paths += [folder / f"{stem}.time.png", folder / f"{stem}.gaps.png"]
        plot(records, paths[2], paths[3])
    return paths


# --- command line (``layoutopt bench`` and ``python -m benchmarks.solvers``) --------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The harness's options, shared by ``layoutopt bench`` and ``python -m benchmarks.solvers``."""
    parser.add_argument(
        "--suite",
        choices=("synthetic", "presets", "tiny", "files"),
        default="synthetic",
        help="synthetic: presets + families x sizes; presets: the four real-sized ones; "
        "tiny: a few seconds' smoke run; files: only the --instances directory",
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), metavar="N")
    parser.add_argument("--families", nargs="+", default=["resnet", "inception", "densenet", "ssd", "random"])
    parser.add_argument("--regimes", nargs="+", default=["normal"], help="normal, hard, xhard, noinf")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument(
        "--instances",
        metavar="DIR",
        help="also run every *.json problem file of DIR (e.g. benchmarks/instances)",
    )
    parser.add_argument("--methods", nargs="+", help="default: every available method but bruteforce")
    parser.add_argument("--no-baselines", action="store_true", help="skip the TVM graph-tuner DP baseline")
    parser.add_argument("--time-limit", type=float, default=60.0, metavar="S", help="seconds per solve")
    parser.add_argument("--out", default="benchmarks/results", metavar="DIR", help="output directory")
    parser.add_argument("--stem", default="solvers", help="output file names: STEM.md, STEM.csv, STEM.*.png")
    parser.add_argument("--no-plots", action="store_true")
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="run solvers in this process (faster start; a crash ends the run)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


#: baselines run by default when importable (they live in the repository's benchmarks/ package)
DEFAULT_BASELINES = {"tvm-dp": "benchmarks.baselines.tvm_dp:solve"}


def _available_baselines() -> dict[str, str]:
    found = {}
    for name, target in DEFAULT_BASELINES.items():
        module = target.split(":")[0]
        try:
            if importlib.util.find_spec(module) is not None:
                found[name] = target
        except ModuleNotFoundError:
            pass
    return found


def suite_from_args(args: argparse.Namespace) -> list[InstanceSpec]:
    """The instances the options select."""
    if args.suite == "tiny":
        specs = synthetic_suite(sizes=[20], families=["resnet", "densenet", "random"], presets=False)
    elif args.suite == "presets":
        specs = [s for s in synthetic_suite(sizes=[], regimes=args.regimes, seeds=args.seeds)]
    elif args.suite == "synthetic":
        specs = synthetic_suite(args.sizes, args.families, args.regimes, args.seeds)
    else:
        specs = []
    if args.instances:
        specs += file_suite(args.instances)
    return specs


def run_from_args(args: argparse.Namespace, out: Callable[[str], Any] = print) -> int:
    """Run the harness as the options say; print where the outputs went."""
    from .errors import ProblemError

    specs = suite_from_args(args)
    if not specs:
        raise ProblemError(
            "the selected suite is empty (for --suite files, give --instances DIR with *.json)"
        )
    baselines = {} if args.no_baselines else _available_baselines()
    for name in set(DEFAULT_BASELINES) - set(baselines) if not args.no_baselines else ():
        out(f"note: baseline {name!r} ({DEFAULT_BASELINES[name]}) is not importable here; run "
            "`python -m benchmarks.solvers` from a checkout to include it")
    records = run(
        specs,
        methods=args.methods,
        time_limit=args.time_limit,
        baselines=baselines,
        isolate=not args.in_process,
        progress=not args.quiet,
    )
    paths = write_report(
        records, args.out, stem=args.stem, plots=not args.no_plots, time_limit=args.time_limit
    )
    out(
        markdown(records, time_limit=args.time_limit).split("\n## Summary per method")[0].split("\n\n", 2)[-1]
    )
    out("wrote " + ", ".join(str(p) for p in paths))
    return 0


def bundled_instances() -> dict[str, Path]:
    """The problem files shipped in ``layoutopt/data`` (name -> path).

    They are generator presets written with :func:`layoutopt.io.write_json`, e.g.
    ``write_json("layoutopt/data/resnet50.json", *generate("resnet50"))``.
    """
    import importlib.resources

    folder = importlib.resources.files("layoutopt") / "data"
    return {Path(str(p)).stem: Path(str(p)) for p in folder.iterdir() if str(p).endswith(".json")}


def comparison_table(records: Sequence[Record]) -> str:
    """A plain-text table of one instance's records: status, objective, gap, bound and time per method."""
    summarize(records)
    rows = [("method", "status", "objective", "gap to best", "lower bound", "time")]
    for r in records:
        solved = r.status in ("optimal", "feasible")
        rows.append(
            (
                r.method,
                r.status,
                f"{r.objective:,.0f}" if solved else "-",
                _fmt_gap(r.gap) if solved else "-",
                f"{r.lower_bound:,.0f}" if math.isfinite(r.lower_bound) else "-",
                _fmt_time(r.wall_time),
            )
        )
    widths = [max(len(row[k]) for row in rows) for k in range(len(rows[0]))]
    lines = [
        "  ".join(
            cell.ljust(w) if k < 2 else cell.rjust(w)
            for k, (cell, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    notes = [f"  {r.method}: {r.message}" for r in records if r.status in FAILED and r.message]
    return "\n".join(lines + (["", "notes:", *notes] if notes else []))


def add_parser(subparsers) -> None:
    """Register ``bench`` and ``demo`` on the ``layoutopt`` command's subparsers."""
    parser = subparsers.add_parser(
        "bench",
        help="compare every solver on an instance suite (markdown, CSV, PNG)",
        description="Run every available method (and the TVM graph-tuner DP baseline, from a checkout) on "
        "an instance suite under a time limit; write STEM.md, STEM.csv and plots under --out.",
    )
    add_arguments(parser)
    parser.set_defaults(run=run_from_args)

    parser = subparsers.add_parser(
        "demo",
        help="solve a bundled DNN-shaped instance with every method and compare",
        description="Solve a bundled ResNet-50-shaped layout problem (synthetic costs) with every available "
        "method and print a comparison table.",
    )
    parser.add_argument(
        "--instance", default="resnet50", help="a bundled instance: resnet50 (default) or ssd"
    )
    parser.add_argument("--time-limit", type=float, default=10.0, metavar="S", help="seconds per method")
    parser.set_defaults(run=_run_demo)


def _run_demo(args: argparse.Namespace) -> int:
    from .errors import ProblemError

    bundled = bundled_instances()
    if args.instance not in bundled:
        raise ProblemError(f"no bundled instance {args.instance!r}; bundled: {', '.join(sorted(bundled))}")
    spec = InstanceSpec(args.instance, path=str(bundled[args.instance]), group="bundled")
    graph, _ = spec.load()
    print(
        f"layoutopt demo: {args.instance} ({graph.number_of_nodes()} operators, {graph.number_of_edges()} "
        f"edges; synthetic roofline costs in ns; {spec.path})"
    )
    print("Each method chooses a layout per operator; objective = kernel times + layout transforms.\n")
    records = run(
        [spec], time_limit=args.time_limit, baselines=_available_baselines(), isolate=False, progress=False
    )
    print(comparison_table(records))
    return 0

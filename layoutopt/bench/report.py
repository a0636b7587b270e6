"""The reports of a run: a markdown table in the shape of a paper's, a CSV, two PNG plots, a text table.

Every output is stamped with the date, the machine and the versions (:func:`layoutopt.machine.stamp`).
"""

from __future__ import annotations

import csv
import json
import math
import os
import statistics
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from ..machine import stamp
from .records import FAILED, SOLVED, Record
from .runner import REPEAT_BELOW
from .stats import best_known, summarize

__all__ = ["comparison_table", "markdown", "plot", "write_csv", "write_report"]


def _fmt_time(seconds: float) -> str:
    if math.isnan(seconds):
        return "-"
    if seconds < 1.0:
        return f"{seconds * 1e3:.3g}ms"
    return f"{seconds:.3g}s"


def _fmt_gap(gap: float) -> str:
    return f"{100 * gap:.2f}%" if not math.isnan(gap) else "-"


#: an exact method's unproved answer counts as stopped by the time limit from this share of the limit on
#: (before it, the method ended without a proof: dp's multiplier search under a memory budget)
_STOPPED_SHARE = 0.9


def _cell(r: Record, exact: bool, fastest: bool, time_limit: float | None = None) -> str:
    if r.status == "optimal":
        text = _fmt_time(r.wall_time)
        return f"**{text}**" if fastest else text
    if r.status == "feasible":
        gap = f"+{_fmt_gap(r.gap)}" if r.gap > 0 else "best"
        stopped = exact and (time_limit is None or r.wall_time >= _STOPPED_SHARE * time_limit)
        return f"TO ({gap})" if stopped else f"{_fmt_time(r.wall_time)} ({gap})"
    return r.status


def _is_exact(method: str) -> bool:
    from ..baselines import baselines, get_baseline
    from ..solvers import get_solver, registered

    if method in registered():
        return bool(get_solver(method).exact)
    if method in baselines():
        return get_baseline(method).exact
    return True  # an unregistered runner: judged by its status alone


def _baselines_run(methods: Sequence[str]) -> dict[str, str]:
    """The registered baselines among ``methods`` -> what each is (tvm-dp: whose idea, whose code)."""
    from ..baselines import baselines, get_baseline
    from ..solvers import registered

    return {m: get_baseline(m).description for m in methods if m in baselines() and m not in registered()}


def markdown(
    records: Sequence[Record], title: str = "Solver comparison", time_limit: float | None = None,
    notes: Sequence[str] = (),
) -> str:
    """The report as markdown: the results table, a summary per method, the targets, failures
    (``notes``: more lines for the header, e.g. how loaded the machine was)."""
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
        f"- **Threads:** {info['threads']}",
        f"- **Versions:** {info['versions']}",
        f"- **Time limit:** {time_limit:g} s per solve" if time_limit else "- **Time limit:** none",
        *(f"- {note}" for note in notes),
        "- Wall time of one `layoutopt.solve` call (validation and model building included; a "
        f"solve under {REPEAT_BELOW:g} s is repeated, 3 times by default, and its best time kept). "
        "Cells: time when proven optimal (**bold**: fastest proof); `time (+g%)` for a heuristic, `g` its "
        "gap to the best known objective (also an exact method's answer it ended without proving, as `dp` "
        "under a memory budget, whose multiplier search leaves a duality gap); `TO (+g%)` an exact method "
        "stopped at the limit with its "
        "incumbent; `refused`, `error`, `crash`, `killed`: see Failures. Best known: the least objective "
        "found, `*` when some exact method proved it optimal.",
        *(f"- Baseline `{name}`: {what}." for name, what in _baselines_run(methods).items()),
        "",
        "| instance | n/m | best known | " + " | ".join(methods) + " |",
        "|---|---|---|" + "---|" * len(methods),
    ]
    best = best_known(records)
    for inst in instances:
        row = [by[(inst, m)] for m in methods if (inst, m) in by]
        proved = [r.wall_time for r in row if r.status == "optimal"]
        fastest = min(proved) if proved else math.nan
        cells = []
        for m in methods:
            r = by.get((inst, m))
            cells.append(
                "" if r is None else _cell(r, exact[m], r.status == "optimal" and r.wall_time == fastest,
                                           time_limit)
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
            "## Topological-order DP (tvm-dp: this repository's re-implementation of TVM's DPTuner idea) "
            "state counts",
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
            r for r in records if r.method == m and r.status in SOLVED and r.wall_time > 0
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
    title: str = "Solver comparison",
    notes: Sequence[str] = (),
) -> list[Path]:
    """Write ``<stem>.md``, ``<stem>.csv`` and (with ``plots``) ``<stem>.time.png`` and
    ``<stem>.gaps.png`` under ``out_dir``; return their paths."""
    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"{stem}.md", folder / f"{stem}.csv"]
    paths[0].write_text(markdown(records, title, time_limit, notes), encoding="utf-8")
    write_csv(records, paths[1])
    if plots:
        paths += [folder / f"{stem}.time.png", folder / f"{stem}.gaps.png"]
        plot(records, paths[2], paths[3])
    return paths


def comparison_table(records: Sequence[Record]) -> str:
    """A plain-text table of one instance's records: status, objective, gap, bound and time per method.

    Example:
        >>> print(comparison_table([Record("a", "synthetic", 2, 1, "greedy", "feasible", objective=3.0,
        ...                                wall_time=0.001)]))
        method  status    objective  gap to best  lower bound  time
        ------  --------  ---------  -----------  -----------  ----
        greedy  feasible          3        0.00%            -   1ms
    """
    summarize(records)
    rows = [("method", "status", "objective", "gap to best", "lower bound", "time")]
    for r in records:
        solved = r.status in SOLVED
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
    notes += [f"  {name}: {what}" for name, what in _baselines_run([r.method for r in records]).items()]
    return "\n".join(lines + (["", "notes:", *notes] if notes else []))


"""Issue 2's core targets, measured side by side with toulbar2: ``python -m benchmarks.core``.

Runs, through the public API (:func:`layoutopt.solve`, validation included) and the
solver-comparison harness (:mod:`layoutopt.bench`, one worker process per method):

1. **exact**: ``auto``, ``toulbar2`` and ``pbqp`` on the synthetic suite (the four named
   presets and every family at 20..2000 nodes, normal regime);
2. **quality**: ``auto``, ``toulbar2`` and ``pbqp`` on extra DenseNet and random instances
   (hard regime, three seeds), where the RN heuristic fires;
3. **scaling**: ``pbqp`` alone at 5,000 and 10,000 nodes;
4. **anytime**: ``auto`` under a short ``time_limit`` on a heavy-tail instance (xhard
   DenseNet), checking that it answers within the limit (+10 %) with a certified bound;
5. **random K=16** (issue 13): ``auto`` and ``toulbar2`` under a 5 s limit on 40 random graphs
   (250 to 2000 nodes, average degree 3, 16 choices, uniform integer costs 0..99 on every node and
   edge entry: dense costs, no DNN structure, the LP relaxation loose), the kind of the random PBQP
   instances of the register-allocation literature; with ``--pbqp-graphs DIR``, also every LLVM
   PBQP register-allocation graph dump (``llc -regalloc=pbqp -pbqp-dump-graphs``, ``*.pbqpgraph``)
   in ``DIR``.

and writes ``benchmarks/results/core.md`` (the targets, hit or missed, then the full
tables) and ``core.csv`` (one row per solve), stamped with the date, the machine (CPU model and
ISA) and the package versions. ``--quick`` runs a small subset (for a smoke test).
"""

from __future__ import annotations

import argparse
import math
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

import networkx as nx
import numpy as np

from layoutopt import bench
from layoutopt.io import write_json
from layoutopt.machine import stamp as machine_stamp

HERE = Path(__file__).resolve().parent
SERIES_PARALLEL = ("resnet", "inception", "ssd")


def random_k16(nodes: int, seed: int, degree: float = 3.0, choices: int = 16):
    """A random PBQP instance without DNN structure: a G(n, m) graph of average ``degree``, ``choices``
    per node, uniform integer costs 0..99 on every node and edge entry."""
    rng = np.random.default_rng(seed)
    graph = nx.gnm_random_graph(nodes, int(degree * nodes / 2), seed=seed)
    costs = {"nodes": {v: rng.integers(0, 100, choices).astype(float) for v in graph},
             "edges": {e: rng.integers(0, 100, (choices, choices)).astype(float) for e in graph.edges}}
    return graph, costs


_NODE = re.compile(r"^(\d+) \(([^)]*)\): \[(.*)\]$")
_EDGE = re.compile(r"^(\d+) \([^)]*\) (\d+) rows / (\d+) \([^)]*\) (\d+) cols:$")


def read_llvm_pbqp_graph(path: Path):
    """``(graph, costs)`` from an LLVM PBQP register-allocation graph dump (``-pbqp-dump-graphs``):
    ``N (CLASS:%reg): [ costs ]`` per node (choice 0 is spilling; ``INF`` forbids), then per edge a
    header ``N (..) R rows / M (..) C cols:`` and ``R`` rows ``[ costs ]``. Costs may be negative
    (coalescing preferences)."""

    def values(text: str) -> list[float]:
        return [math.inf if v.strip() == "INF" else float(v) for v in text.strip(" []").split(",")]

    graph, nodes, edges = nx.Graph(), {}, {}
    lines = path.read_text().splitlines()
    k = 0
    while k < len(lines):
        line = lines[k].strip()
        node, edge = _NODE.match(line), _EDGE.match(line)
        if node:
            nodes[int(node[1])] = values(node[3])
            graph.add_node(int(node[1]), register=node[2])
        elif edge:
            u, v, rows = int(edge[1]), int(edge[3]), int(edge[2])
            matrix = [values(row) for row in lines[k + 1:k + 1 + rows]]
            k += rows
            if (u, v) in edges or (v, u) in edges:  # LLVM may list a pair twice: the costs add up
                key = (u, v) if (u, v) in edges else (v, u)
                extra = np.array(matrix) if key == (u, v) else np.array(matrix).T
                edges[key] = np.array(edges[key]) + extra
            else:
                graph.add_edge(u, v)
                edges[(u, v)] = matrix
        k += 1
    return graph, {"nodes": nodes, "edges": edges}


def side_suite(directory: Path, quick: bool, pbqp_graphs: str | None) -> list[bench.InstanceSpec]:
    """The random K=16 instances (and the LLVM graphs, if given) as JSON problem files in
    ``directory``, for the harness."""
    specs = []
    sizes, seeds = ((250,), (0, 1)) if quick else ((250, 500, 1000, 2000), tuple(range(10)))
    for nodes in sizes:
        for seed in seeds:
            path = directory / f"k16_{nodes}_s{seed}.json"
            write_json(path, *random_k16(nodes, seed))
            specs.append(bench.InstanceSpec(path.stem, path=str(path), group="random_k16"))
    for dump in sorted(Path(pbqp_graphs).glob("*.pbqpgraph")) if pbqp_graphs else []:
        path = directory / f"llvm_{dump.stem.replace('.', '_')}.json"
        write_json(path, *read_llvm_pbqp_graph(dump))
        specs.append(bench.InstanceSpec(path.stem, path=str(path), group="llvm_regalloc"))
    return specs


#: which time the verdicts use: "cpu" (process CPU time, robust to other jobs on a shared machine)
#: or "wall"; both are in the tables and the CSV
CLOCK = "cpu"


def clock(record: bench.Record) -> float:
    return record.cpu_time if CLOCK == "cpu" else record.wall_time


def family_of(record: bench.Record) -> str:
    name = record.instance.split("_s")[0]
    for prefix in ("hard_", "xhard_"):
        name = name.removeprefix(prefix)
    presets = {"resnet50": "resnet", "inception": "inception", "densenet121": "densenet", "ssd": "ssd"}
    return presets.get(name, name.split("_")[0])


def by_method(records, method):
    return {r.instance: r for r in records if r.method == method}


def fmt_ms(seconds: float) -> str:
    return "-" if math.isnan(seconds) else f"{seconds * 1e3:.1f} ms"


def family_ratios(auto: dict, tb2: dict) -> dict[str, tuple[float, float, str]]:
    """Per family, over the instances both proved: (total auto time / total toulbar2 time, the worst
    instance's ratio, that instance)."""
    out: dict[str, tuple[float, float, str]] = {}
    families: dict[str, list[str]] = {}
    for i, r in auto.items():
        if i in tb2 and r.status == "optimal" and tb2[i].status == "optimal":
            families.setdefault(family_of(r), []).append(i)
    for family, names in families.items():
        total = sum(clock(auto[i]) for i in names) / sum(clock(tb2[i]) for i in names)
        worst = max(names, key=lambda i: clock(auto[i]) / clock(tb2[i]))
        out[family] = (total, clock(auto[worst]) / clock(tb2[worst]), worst)
    return out


def side_rows(side) -> list[tuple[str, str, str, str]]:
    """Rows for the random K=16 and LLVM register-allocation instances (auto vs toulbar2 at 5 s)."""
    rows = []
    auto, tb2 = by_method(side, "auto"), by_method(side, "toulbar2")
    for group, label in (("random_k16", "random K=16 graphs (250-2000 nodes)"),
                         ("llvm_regalloc", "LLVM PBQP register-allocation graphs")):
        names = [i for i, r in auto.items() if r.group == group and i in tb2]
        if not names:
            continue

        def worse(a, b):  # a's objective above b's beyond the tolerance
            return a.objective > b.objective + 1e-9 * max(abs(b.objective), 1.0)

        auto_worse = [i for i in names if worse(auto[i], tb2[i])]
        tb2_worse = [i for i in names if worse(tb2[i], auto[i])]
        proven = [sum(r[i].status == "optimal" for i in names) for r in (auto, tb2)]
        worst = max((100 * (auto[i].objective - tb2[i].objective) / abs(tb2[i].objective), i) for i in names
                    if math.isfinite(auto[i].objective) and tb2[i].objective)
        rows.append((f"auto never worse than toulbar2 at 5 s: {label}", "0 worse",
                     f"{len(names)} instances: auto worse on {len(auto_worse)}, better on {len(tb2_worse)}; "
                     f"proved optimal: auto {proven[0]}, toulbar2 {proven[1]}; largest auto - toulbar2: "
                     f"{worst[0]:+.3f}% ({worst[1]})",
                     "hit" if not auto_worse else "missed"))
    return rows


def target_rows(exact, quality, scaling, anytime) -> list[tuple[str, str, str, str]]:
    """(target, goal, measured, verdict) rows."""
    rows = []
    auto, tb2, pbqp = (by_method(exact, m) for m in ("auto", "toulbar2", "pbqp"))

    def worst_time(instances):
        times = [clock(auto[i]) for i in instances if auto[i].status == "optimal"]
        unproved = [i for i in instances if auto[i].status != "optimal"]
        return (max(times) if times else math.nan), unproved

    small = [i for i, r in auto.items() if r.group == "preset" and family_of(r) in SERIES_PARALLEL]
    small += [i for i, r in auto.items() if family_of(r) in SERIES_PARALLEL and r.nodes <= 150
              and r.group != "preset"]
    t, unproved = worst_time(small)
    rows.append(("auto proves optimum, ResNet/Inception/SSD <= 150 nodes", "<= 5 ms",
                 f"max {fmt_ms(t)} over {len(small)} instances"
                 + (f", unproved: {unproved}" if unproved else ""),
                 "hit" if t <= 5e-3 and not unproved else f"missed ({t / 5e-3:.1f}x)"))
    dense = [i for i, r in auto.items() if r.instance == "densenet121"]
    if dense:
        r = auto[dense[0]]
        ok = r.status == "optimal" and clock(r) <= 0.03
        rows.append(("auto proves optimum, DenseNet-121 (183 nodes)", "<= 30 ms",
                     f"{fmt_ms(clock(r))} ({r.status}; toulbar2 {fmt_ms(clock(tb2[dense[0]]))})",
                     "hit" if ok else f"missed ({clock(r) / 0.03:.1f}x)"))
    large = [i for i, r in auto.items() if r.nodes >= 2000]
    t, unproved = worst_time(large)
    per_family = ", ".join(
        f"{family_of(auto[i])} {fmt_ms(clock(auto[i]))} ({auto[i].status})" for i in large)
    rows.append(("auto at 2000 nodes", "<= 200 ms", per_family,
                 "hit" if t <= 0.2 and not unproved else "missed"))
    both = [i for i in auto if i in tb2 and auto[i].status == "optimal" and tb2[i].status == "optimal"]
    if both:
        ratios = [clock(auto[i]) / clock(tb2[i]) for i in both]
        total = sum(clock(auto[i]) for i in both) / sum(clock(tb2[i]) for i in both)
        slower = sorted(((clock(auto[i]) / clock(tb2[i]), i) for i in both), reverse=True)[:3]
        rows.append(("auto time vs toulbar2 (both optimal)", "<= 1.0x",
                     f"total {total:.2f}x, median {statistics.median(ratios):.2f}x, max {max(ratios):.2f}x "
                     f"over {len(both)} instances; worst: "
                     + ", ".join(f"{i} {q:.2f}x" for q, i in slower),
                     "hit" if total <= 1.0 else "missed"))
    for suite, records in (("exact", exact), ("quality", quality)):
        per_family = family_ratios(by_method(records, "auto"), by_method(records, "toulbar2"))
        if per_family:
            rows.append((f"auto time vs toulbar2 on every family ({suite} suite, both optimal)",
                         "<= 1.0x each",
                         "; ".join(f"{f} total {t:.2f}x (worst {w:.2f}x {i})" for f, (t, w, i) in
                                   sorted(per_family.items())),
                         "hit" if all(t <= 1.0 for t, _, _ in per_family.values()) else "missed"))
    big = auto.get("densenet_2000")
    if big is not None:
        rows.append(("auto proves densenet_2000 (normal regime)", "<= 10 s",
                     f"{big.wall_time:.2f} s wall, {clock(big):.2f} s {CLOCK}, {big.status}; toulbar2: "
                     f"{tb2['densenet_2000'].status} after {tb2['densenet_2000'].wall_time:.2f} s",
                     "hit" if big.status == "optimal" and big.wall_time <= 10 else "missed"))
    not_both = [i for i in auto if i in tb2 and (auto[i].status != "optimal" or tb2[i].status != "optimal")]
    if not_both:
        rows.append(("instances not proved by auto or toulbar2 within the limit", "-",
                     ", ".join(f"{i} (auto {auto[i].status} gap {100 * bench_gap(auto[i]):.2f}%, toulbar2 "
                               f"{tb2[i].status})" for i in not_both), "-"))

    sp_gaps = [r.gap for i, r in pbqp.items() if family_of(r) in SERIES_PARALLEL and not math.isnan(r.gap)]
    sp_rn = sum(r.status != "optimal" for i, r in pbqp.items() if family_of(r) in SERIES_PARALLEL)
    rows.append(("pbqp gap, series-parallel (ResNet/Inception/SSD)", "0 %",
                 f"max {100 * max(sp_gaps):.2g}% over {len(sp_gaps)} instances ({sp_rn} needed RN)",
                 "hit" if max(sp_gaps) <= 1e-12 else "missed"))
    other = [r for r in (*pbqp.values(), *by_method(quality, "pbqp").values())
             if family_of(r) not in SERIES_PARALLEL and not math.isnan(r.gap)]
    proven = {r.instance for rs in (exact, quality) for r in rs
              if r.status == "optimal" and r.method != "pbqp"}
    for regime in ("normal", "hard"):
        gaps = [r.gap for r in other if r.instance in proven
                and (r.instance.startswith("hard_") == (regime == "hard"))]
        if gaps:
            rows.append((f"pbqp gap elsewhere, {regime} regime (DenseNet, random; vs the proven optimum)",
                         "median <= 0.5 %, max <= 2 %",
                         f"median {100 * statistics.median(gaps):.3f}%, max {100 * max(gaps):.3f}% "
                         f"over {len(gaps)} instances",
                         "hit" if statistics.median(gaps) <= 0.005 and max(gaps) <= 0.02 else "missed"))
    infeasible = [r.instance for rs in (exact, quality, scaling) for r in rs
                  if r.method == "pbqp" and r.status != "feasible" and r.status != "optimal"]
    rows.append(("pbqp never infeasible (every instance is feasible)", "0 failures",
                 f"{len(infeasible)} failures" + (f": {infeasible}" if infeasible else ""),
                 "hit" if not infeasible else "missed"))
    rates = [(clock(r) / r.nodes * 1000, r) for r in (*pbqp.values(), *scaling)
             if r.method == "pbqp" and r.nodes >= 1000]
    families = sorted({family_of(r) for _, r in rates})
    if rates:
        per_family = ", ".join(f"{f} {max(q for q, r in rates if family_of(r) == f) * 1e3:.1f}"
                               for f in families)
        rows.append(("pbqp time per 1000 nodes, worst per family (>= 1000 nodes)", "<= 20 ms",
                     per_family + " ms", "hit" if max(q for q, _ in rates) <= 0.02 else "missed"))
        worst_rate, worst = max(rates, key=lambda x: x[0])
        rows.append(("pbqp time per 1000 nodes (>= 1000 nodes)", "<= 20 ms",
                     f"max {worst_rate * 1e3:.1f} ms ({worst.instance}), median "
                     f"{statistics.median(q for q, _ in rates) * 1e3:.1f} ms",
                     "hit" if worst_rate <= 0.02 else f"missed ({worst_rate / 0.02:.1f}x)"))
    ten_k = [r for r in scaling if r.nodes >= 10_000]
    if ten_k:
        t = max(clock(r) for r in ten_k)
        rows.append(("pbqp at 10,000 nodes", "< 1 s",
                     ", ".join(f"{family_of(r)} {clock(r):.2f} s" for r in ten_k),
                     "hit" if t < 1.0 else "missed"))
    for limit, r in anytime:
        ok = (r.status in ("optimal", "feasible") and r.wall_time <= 1.1 * limit
              and math.isfinite(r.lower_bound))
        rows.append((f"auto anytime, {r.instance}, time_limit={limit:g} s",
                     "answer + bound within limit +10 %",
                     f"{r.wall_time:.3f} s, {r.status}, certified gap "
                     f"{100 * (r.objective - r.lower_bound) / r.objective:.3f}%",
                     "hit" if ok else "missed"))
    return rows


def load_average() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def bench_gap(r: bench.Record) -> float:
    if not math.isfinite(r.objective) or not math.isfinite(r.lower_bound) or r.objective == 0:
        return math.nan
    return (r.objective - r.lower_bound) / r.objective


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.core", description=__doc__.split("\n\n")[0])
    parser.add_argument("--time-limit", type=float, default=20.0, help="seconds per exact solve (default 20)")
    parser.add_argument("--quick", action="store_true", help="a small subset, for a smoke test")
    parser.add_argument("--out", default=str(HERE / "results"), help="output directory")
    parser.add_argument("--pbqp-graphs", metavar="DIR",
                        help="also compare auto and toulbar2 on the LLVM PBQP graph dumps (*.pbqpgraph) "
                        "in DIR")
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu",
                        help="time the verdicts use (default cpu: the machine may be shared)")
    args = parser.parse_args(argv)
    global CLOCK
    CLOCK = args.clock

    sizes = (20, 100) if args.quick else bench.SIZES
    methods = ["auto", "toulbar2", "pbqp"]
    started = time.perf_counter()
    exact = bench.run(bench.synthetic_suite(sizes=sizes, presets=not args.quick), methods=methods,
                      time_limit=args.time_limit)
    quality_suite = bench.synthetic_suite(
        sizes=(100,) if args.quick else (100, 200, 500), families=("densenet", "random"),
        regimes=("hard",), seeds=(0,) if args.quick else (0, 1, 2), presets=False)
    quality = bench.run(quality_suite, methods=methods, time_limit=args.time_limit)
    scale_sizes = (2000,) if args.quick else (5000, 10_000)
    scaling = bench.run(bench.synthetic_suite(sizes=scale_sizes, families=("resnet", "densenet", "random"),
                                              presets=False), methods=["pbqp"], time_limit=args.time_limit)
    with tempfile.TemporaryDirectory() as directory:
        side = bench.run(side_suite(Path(directory), args.quick, args.pbqp_graphs),
                         methods=["auto", "toulbar2"], time_limit=5.0, repeats=1)
    anytime = []
    heavy_nodes = 300 if args.quick else 2000
    heavy = bench.InstanceSpec(f"xhard_densenet_{heavy_nodes}", family="densenet", nodes=heavy_nodes,
                               regime="xhard")
    for limit in (0.5, 2.0):
        (record,) = bench.run([heavy], methods=["auto"], time_limit=limit, repeats=1, progress=False)
        anytime.append((limit, record))
    elapsed = time.perf_counter() - started

    stamp = machine_stamp()
    rows = target_rows(exact, quality, scaling, anytime) + side_rows(side)
    lines = [
        "# Core solvers: issue 2's targets (auto, pbqp) side by side with toulbar2",
        "",
        f"- date: {stamp['date']}",
        f"- machine: {stamp['machine']}",
        f"- versions: {stamp['versions']}",
        f"- command: `python -m benchmarks.core{' --quick' if args.quick else ''}` "
        f"(time limit {args.time_limit:g} s per exact solve; {elapsed / 60:.1f} min in all)",
        f"- times: through `layoutopt.solve` (validation included), best of 3 below "
        f"{bench.runner.REPEAT_BELOW:g} s, each method "
        f"in its own worker process. The verdicts use **{CLOCK} time**: the machine was shared with "
        f"other jobs (load average {load_average()}), which inflates wall times; the anytime rows use "
        f"wall time. The tables below show wall times; the CSV has both.",
        "",
        "## Targets",
        "",
        "| target | goal | measured | verdict |",
        "|---|---|---|---|",
        *[f"| {t} | {g} | {m} | {v} |" for t, g, m, v in rows],
        "",
        bench.markdown(exact, title="Exact suite (normal regime)", time_limit=args.time_limit),
        "",
        bench.markdown(quality, title="Quality suite (hard regime, DenseNet and random)",
                       time_limit=args.time_limit),
        "",
        bench.markdown(scaling, title="pbqp scaling", time_limit=args.time_limit),
        "",
        bench.markdown(side, title="Random K=16 and register-allocation instances, auto vs toulbar2",
                       time_limit=5.0),
        "",
    ]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = "core.quick" if args.quick else "core"
    (out / f"{stem}.md").write_text("\n".join(lines), encoding="utf-8")
    all_records = exact + quality + scaling + side + [r for _, r in anytime]
    bench.write_csv(all_records, out / f"{stem}.csv")
    print("\n".join(f"{v:>10}  {t}: {m}" for t, _, m, v in rows))
    print(f"wrote {out / f'{stem}.md'} and {out / f'{stem}.csv'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

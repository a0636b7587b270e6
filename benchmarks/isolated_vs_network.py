"""Does a kernel's isolated cost hold inside the network? Each chosen kernel of an exported build timed
alone, as the cost model measured it, and inside the running build, in the same interleaved rounds.

A row of ``real_models.md`` divides the build's calls timed in the network by the objective its costs
predicted. Those costs were measured minutes before, in another of the host's spells (compute-bound code runs
up to 2x apart from one spell to the next here: ``host_drift.py``), so that ratio mixes the cost model's error
with the host's drift. This benchmark takes the drift out: in each round, every kernel layer of the build's
solution file is timed alone with the measurer's two cold protocols (``LocalRunner``: cold caches but the
input, the median of its repeats; and ``LocalRunner(handoff=True)``, where the thread pool has just written
the input, as the layer before does in the network), then the build is profiled (each call timed where it
runs, the median of ``--runs`` runs); the two sides of a round share its spell, and each layer's ratio (in
network / isolated) is paired round by round, with its 95 % interval. Grouped by kernel family and algorithm,
those ratios say what the model gets wrong about the network. The costs the solution was chosen with (its
layers' ``predicted_cost``: calibrated in the network where the tune calibrated) are set beside this run's
isolated times. Whole runs with no profiler, and the kernels run back to back on buffers of their own, tell
the profiler's share and the share of the data passed between layers.

Usage::

    python -m benchmarks.isolated_vs_network --library B.so --solution B.solution.json --rounds 15
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import append_section

os.environ.setdefault("TVM_NUM_THREADS", "2")

from layoutopt.tvm.evaluate.timing import Ratio

RESULTS = Path(__file__).resolve().parent / "results"


def layer_group(workload: Mapping[str, Any], candidate: Mapping[str, Any]) -> str:
    """The kernel family and algorithm a layer's ratio is grouped by, e.g. ``"conv2d gemm"``.

    Example:
        >>> layer_group({"op": "conv2d", "groups": 1}, {"in": "NCHW8c", "out": "NCHW8c", "algorithm": "gemm"})
        'conv2d gemm'
        >>> layer_group({"op": "dense"}, {"in": "NC", "out": "NC"})
        'dense direct'
    """
    return f"{workload['op']} {candidate.get('algorithm', 'direct')}"


def paired_groups(isolated: Mapping[str, Sequence[float]], network: Mapping[str, Sequence[float | None]],
                  groups: Mapping[str, str]) -> list[dict[str, Any]]:
    """Per group (and ``"all"``, last), each side's median over the rounds of the group's per-round sum
    (seconds) and their ratio, in network / isolated, paired by round with its 95 % interval. A round
    where a layer of the group matched no call in the network is left out of that group.

    Example:
        >>> iso = {"a": [1.0, 1.0, 1.0], "b": [2.0, 2.0, 2.0]}
        >>> net = {"a": [1.2, 1.1, None], "b": [2.0, 2.2, 2.4]}
        >>> rows = paired_groups(iso, net, {"a": "x", "b": "y"})
        >>> [(row["group"], row["rounds"], round(row["ratio"].median, 3)) for row in rows]
        [('y', 3, 1.1), ('x', 2, 1.15), ('all', 2, 1.083)]
    """
    members: dict[str, list[str]] = defaultdict(list)
    for layer, group in groups.items():
        members[group].append(layer)
    rows = []
    ordered = sorted(members, key=lambda g: -sum(np.median(isolated[layer]) for layer in members[g]))
    for group, layers in [*((g, members[g]) for g in ordered), ("all", list(groups))]:
        rounds = [i for i in range(min(len(isolated[layer]) for layer in layers))
                  if all(network[layer][i] is not None for layer in layers)]
        if not rounds:
            continue
        iso = [sum(isolated[layer][i] for layer in layers) for i in rounds]
        net = [sum(network[layer][i] for layer in layers) for i in rounds]  # type: ignore[misc]
        rows.append({"group": group, "layers": len(layers), "rounds": len(rounds),
                     "isolated": float(np.median(iso)), "network": float(np.median(net)),
                     "ratio": Ratio.of(net, iso)})
    return rows


def _one_pass(calls: Sequence[tuple[Any, Sequence[Any]]]) -> float:
    """Seconds to run each ``(function, arguments)`` once, in order."""
    started = time.perf_counter()
    for function, arguments in calls:
        function(*arguments)
    return time.perf_counter() - started


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--library", type=Path, required=True, help="the exported build (.so)")
    parser.add_argument("--solution", type=Path, required=True, help="the solution file it was built from")
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--runs", type=int, default=10, help="profiled runs of the build per round")
    parser.add_argument("--layers", action="store_true", help="also a row per layer")
    parser.add_argument("--out", type=Path, default=RESULTS / "isolated_vs_network.md",
                        help="markdown appended here")
    args = parser.parse_args(argv)
    for path in (args.library, args.solution):
        if not path.is_file():
            parser.error(f"no file {str(path)!r}")

    import tvm

    from layoutopt.machine import stamp_line
    from layoutopt.tvm import LocalRunner, load_solution, resolve_target
    from layoutopt.tvm.evaluate.profile import KernelShapes, call_category, layer_calls, profile_calls
    from layoutopt.tvm.evaluate.timing import time_builds
    from layoutopt.tvm.kernels import build_kernel
    from layoutopt.tvm.measure.worker import WorkerState

    record = load_solution(args.solution)
    target = resolve_target(record.target)
    layers = [layer for layer in record.layers if layer.kind == "target"]
    kernels = {layer.layer: build_kernel(layer.workload, layer.candidate, target) for layer in layers}
    runner = LocalRunner()  # the measurer's default protocol: cold, the median of its repeats
    protocols = {"cold": runner, "handoff": LocalRunner(handoff=True)}
    with tempfile.TemporaryDirectory() as directory:  # one library, compiled and loaded as the measurer's
        compiled = WorkerState._library(runner, target, kernels, directory)
        library, device = runner.load(next(iter(compiled.values())).library, "kernels")
    args_of = {name: kernel.device_args(kernel.logical_inputs(), device) for name, kernel in kernels.items()}
    symbol = {name: result.function for name, result in compiled.items()}
    build = tvm.runtime.load_module(str(args.library))
    inputs = [np.random.default_rng(1).standard_normal(spec.shape).astype(spec.dtype)
              for spec in record.inputs.values()]
    wanted = [(layer.layer, layer.workload, layer.candidate) for layer in layers]
    shapes = KernelShapes(record.target)
    isolated = {protocol: {layer.layer: [] for layer in layers} for protocol in protocols}
    network: dict[str, list[float | None]] = {layer.layer: [] for layer in layers}
    whole: list[float] = []  # the build's median whole run in each round, no profiler
    called: list[float] = []  # the sum of its profiled calls in each round, VM builtins apart
    # the kernel layers run back to back, each on buffers of its own: the network's kernels, with no
    # layer reading what another (and so the other thread) has just written
    apart: list[float] = []
    passes = [(library[symbol[name]], args_of[name]) for name in kernels]
    load = os.getloadavg()[0]
    for index in range(args.rounds):
        # the order alternates, so that neither side always runs right after the other
        for side in (("isolated", "network") if index % 2 == 0 else ("network", "isolated")):
            if side == "isolated":
                for protocol, timer in protocols.items():
                    for name in kernels:
                        repeats = timer.time(library, device, symbol[name], args_of[name])
                        isolated[protocol][name].append(statistics.median(repeats))
            else:
                whole.append(statistics.median(time_builds({"build": build}, inputs, args.runs)["build"]))
                apart.append(statistics.median(_one_pass(passes) for _ in range(args.runs)))
                calls = profile_calls(build, inputs, repeat=args.runs, statistic=statistics.median)
                called.append(sum(c.seconds for c in calls if call_category(c.symbol) != "vm builtins"))
                times = layer_calls(calls, wanted, shapes)
                for name in kernels:
                    network[name].append(times.get(name))
        print(f"round {index + 1} of {args.rounds}", file=sys.stderr)

    # a layer no call of the network matched in any round (its kernel fused otherwise than extracted)
    # would leave its group with no complete round: it is named, and left out of the sums
    unmatched = [layer.layer for layer in layers if all(t is None for t in network[layer.layer])]
    layers = [layer for layer in layers if layer.layer not in unmatched]
    groups = {layer.layer: layer_group(layer.workload, layer.candidate) for layer in layers}
    predicted = {layer.layer: layer.predicted_cost for layer in layers}
    lines = [f"## {args.library.name}: each kernel alone and in the network, in the same rounds", "",
             f"*{stamp_line()}; load average {load:.1f} before, {os.getloadavg()[0]:.1f} after*", "",
             f"`python -m benchmarks.isolated_vs_network --library {args.library.name} --solution "
             f"{args.solution.name} --rounds {args.rounds} --runs {args.runs}`: {len(layers)} kernel layers"
             + (f" ({len(unmatched)} more matched no call of the network: {', '.join(map(str, unmatched))})"
                if unmatched else "") + ". "
             "Isolated, two protocols of the measurer, each the median of its repeats: cold (caches "
             "flushed but the input, which the kernel's own last run left in its threads' caches) and "
             "handoff (cold, and the thread pool writes the input just before each run, each thread a "
             f"contiguous part). In network: each call's median over {args.runs} profiled runs of the build. "
             "Sums per round; each ratio paired by round, with its 95 % interval. 'Solution's costs' are the "
             "costs the solution was chosen with (calibrated in the network where the tune calibrated) over "
             "this run's cold times.", "",
             "| kernels | layers | cold ms | handoff ms | in network ms | in network / cold "
             "| in network / handoff | solution's costs / cold |",
             "|---|---|---|---|---|---|---|---|"]
    by_protocol = {protocol: paired_groups(isolated[protocol], network, groups) for protocol in protocols}
    for row, handed in zip(by_protocol["cold"], by_protocol["handoff"], strict=True):
        names = [n for n, g in groups.items() if row["group"] in ("all", g)]
        tuned = [predicted[n] for n in names]
        chosen_with = (f"{sum(tuned) / sum(float(np.median(isolated['cold'][n])) for n in names):.3f}"
                       if all(t is not None for t in tuned) else "-")
        lines.append(f"| {row['group']} | {row['layers']} | {row['isolated'] * 1e3:.3f} "
                     f"| {handed['isolated'] * 1e3:.3f} | {row['network'] * 1e3:.3f} "
                     f"| {row['ratio'].text} | {handed['ratio'].text} | {chosen_with} |")
    if args.layers:
        lines += ["", "| layer | kernels | choice | cold us | handoff us | in network us | in network / cold "
                  "| in network / handoff |", "|---|---|---|---|---|---|---|---|"]
        for layer in layers:
            row, handed = (paired_groups(isolated[protocol], network, {layer.layer: groups[layer.layer]})[-1]
                           for protocol in ("cold", "handoff"))
            lines.append(f"| {layer.layer} | {groups[layer.layer]} | {layer.label} "
                         f"| {row['isolated'] * 1e6:.1f} | {handed['isolated'] * 1e6:.1f} "
                         f"| {row['network'] * 1e6:.1f} | {row['ratio'].median:.2f} "
                         f"| {handed['ratio'].median:.2f} |")
    profiled, flowing = Ratio.of(whole, called), Ratio.of(whole, apart)
    lines += ["", f"Whole runs of the build, no profiler (median of {args.runs} per round): "
              f"{np.median(whole) * 1e3:.3f} ms; its profiled calls (VM builtins apart) summed "
              f"{np.median(called) * 1e3:.3f} ms, whole run / calls {profiled.text}; its kernel layers run "
              f"back to back, each on buffers of its own, {np.median(apart) * 1e3:.3f} ms, whole run / back "
              f"to back {flowing.text}."]
    # each round on its own: on a host whose whole runs switch between a fast and a slow mode, the
    # rounds show which side each mode moves
    lines += ["", "| round | kernels cold ms | kernels handoff ms | kernels in network ms "
              "| in network / cold | in network / handoff | whole run ms | back to back ms |",
              "|---|---|---|---|---|---|---|---|"]
    for index in range(args.rounds):
        cold, handoff = (sum(isolated[protocol][layer.layer][index] for layer in layers)
                         for protocol in ("cold", "handoff"))
        net = [network[layer.layer][index] for layer in layers]
        in_network = sum(net) if None not in net else None  # type: ignore[arg-type]
        lines.append(f"| {index + 1} | {cold * 1e3:.3f} | {handoff * 1e3:.3f} | "
                     + (f"{in_network * 1e3:.3f} | {in_network / cold:.3f} | {in_network / handoff:.3f}"
                        if in_network else "- | - | -")
                     + f" | {whole[index] * 1e3:.3f} | {apart[index] * 1e3:.3f} |")
    append_section(lines, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

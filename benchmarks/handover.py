"""A kernel between two others, as the network runs it: what writing lines both cores hold costs.

Relax's memory plan ping-pongs between storages: a kernel writes B, the kernel after it reads B and
writes A, the next one reads A and writes B again. A 1x1 conv split over output-channel chunks reads
*all* of its input on both threads, so by the time the kernel in the middle writes B again, every line
of B is held by both cores, and each write waits for the other core's copy to be dropped. The measurer's
cold and handoff protocols never time a kernel so. This benchmark takes three consecutive layers of an
exported build's solution file (PRODUCER writes MIDDLE's input, NEXT reads MIDDLE's output), compiles
them as the measurer does, each on buffers of its own, and times MIDDLE, single runs in interleaved
rounds:

- *output just read by NEXT*: PRODUCER writes the input, NEXT reads the output buffer (its last write
  MIDDLE's own), then MIDDLE runs: the network's order;
- *output last written by itself*: PRODUCER writes the input, then MIDDLE runs (its output buffer last
  touched by its own previous run);
- *cold*: the measurer's protocol (caches flushed but the input).

Both orders of MIDDLE's parallel loops are timed where its family has them (``kernels.with_loop_order``),
each with PRODUCER and NEXT in the same order.

Usage::

    python -m benchmarks.handover --solution M.solution.json --layers lv179,lv195,lv211
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import append_section

os.environ.setdefault("TVM_NUM_THREADS", "2")
RESULTS = Path(__file__).parent / "results"
CASES = ("output just read by NEXT", "output last written by itself", "cold")


def _seconds(function, args) -> float:
    started = time.perf_counter()
    function(*args)
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--solution", type=Path, required=True, help="an exported build's solution file")
    parser.add_argument("--layers", required=True, help="PRODUCER,MIDDLE,NEXT: three layers in a row")
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--out", default=str(RESULTS / "handover.md"),
                        help="append the section to this markdown file ('' : print only)")
    args = parser.parse_args(argv)
    names = args.layers.split(",")
    if len(names) != 3:
        parser.error(f"--layers {args.layers!r}: give three layers, PRODUCER,MIDDLE,NEXT")
    import tvm

    from layoutopt.machine import stamp_line
    from layoutopt.tvm import LocalRunner, load_solution, resolve_target
    from layoutopt.tvm.kernels import LOOP_ORDERS, build_kernel, with_loop_order
    from layoutopt.tvm.measure.worker import WorkerState

    record = load_solution(args.solution)
    layers = {layer.layer: layer for layer in record.layers}
    missing = [name for name in names if name not in layers]
    if missing:
        parser.error(f"{args.solution}: no layer {', '.join(missing)}")
    target = resolve_target(record.target)
    runner = LocalRunner()
    kernels = {}
    for name in names:
        workload = layers[name].workload
        for order in LOOP_ORDERS:
            candidate = with_loop_order(workload, layers[name].candidate, order)
            kernels[name, order] = build_kernel(workload, candidate, target)
    symbols = {key: f"k{index}" for index, key in enumerate(kernels)}
    with tempfile.TemporaryDirectory() as directory:
        compiled = WorkerState._library(runner, target, {symbols[key]: k for key, k in kernels.items()},
                                        directory)
        library, device = runner.load(next(iter(compiled.values())).library, "kernels")
    flush = tvm.get_global_func("cache_flush_cpu_non_first_arg")
    producer, middle, following = names
    seconds = {(order, case): [] for order in LOOP_ORDERS for case in CASES}
    for order in LOOP_ORDERS:
        run = {name: library[compiled[symbols[name, order]].function] for name in names}
        own = {name: kernels[name, order].device_args(kernels[name, order].logical_inputs(), device)
               for name in names}
        if tuple(own[producer][-1].shape) != tuple(own[middle][0].shape) or \
                tuple(own[middle][-1].shape) != tuple(own[following][0].shape):
            parser.error(f"{args.layers}: not three layers in a row (each one's output the next one's input)")
        middle_args = own[middle]
        writes_input = [*own[producer][:-1], middle_args[0]]
        reads_output = [middle_args[-1], *own[following][1:]]
        for _ in range(args.rounds):
            run[producer](*writes_input)
            run[following](*reads_output)
            seconds[order, CASES[0]].append(_seconds(run[middle], middle_args))
            run[producer](*writes_input)
            seconds[order, CASES[1]].append(_seconds(run[middle], middle_args))
            flush(*middle_args)
            seconds[order, CASES[2]].append(_seconds(run[middle], middle_args))
    lines = [f"## {args.solution.name}: {middle} between {producer} and {following}", "",
             f"*{stamp_line()}; load average {os.getloadavg()[0]:.2f} after*", "",
             f"`python -m benchmarks.handover --solution {args.solution.name} --layers {args.layers} "
             f"--rounds {args.rounds}`: {middle} ({layers[middle].label}) timed in single runs, the median "
             f"of {args.rounds} rounds, us; the three kernels in one loop order at a time.", "",
             "| loop order | " + " | ".join(CASES) + " | just read / own |", "|---|---|---|---|---|"]
    for order in LOOP_ORDERS:
        medians = [statistics.median(seconds[order, case]) for case in CASES]
        lines.append(f"| {order} | " + " | ".join(f"{m * 1e6:.1f}" for m in medians)
                     + f" | {medians[0] / medians[1]:.2f} |")
    append_section(lines, args.out or None)
    return 0


if __name__ == "__main__":
    sys.exit(main())

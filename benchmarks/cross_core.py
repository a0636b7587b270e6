"""What sets the host's slow mode? Reading what the other thread has just written, beside a build's runs.

On this host an exported build's whole runs switch between two speeds (MobileNetV2: about 6 and 9 ms, in
stretches of seconds) while its kernels timed one by one do not (``isolated_vs_network.md``). This
benchmark times, in alternating windows of one process, (1) a cross-core probe: two TVM kernels on 2
threads, the first writing a ``[2, N]`` tensor (thread ``t`` writes row ``t``), the second reading row
``t`` (what the same thread wrote) or row ``1 - t`` (what the other thread wrote), and (2) whole runs of
an exported build. Where the network's slow windows are those in which reading the other thread's data
costs more, the slow mode is the data the network's layers pass from one thread to the other.

Writes ``benchmarks/results/cross_core.md`` (appended), stamped.

Usage::

    python -m benchmarks.cross_core --library M.so --input-shape 1,3,224,224 --windows 80
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import append_section

os.environ.setdefault("TVM_NUM_THREADS", "2")

RESULTS = Path(__file__).resolve().parent / "results"


def probe_kernels(elements: int, target: Any) -> Any:
    """The probe's library: ``produce(a, b)`` writes ``b[t] = 2 a[t]`` on thread ``t``;
    ``read_own(b, c)`` computes ``c[t] = b[t] + 1`` and ``read_other(b, c)`` ``c[t] = b[1 - t] + 1``,
    each parallel over the 2 rows (TVM gives each thread a contiguous part of a parallel loop) and
    vectorised along them."""
    import tvm
    from tvm import te

    data = te.placeholder((2, elements), name="data")
    produced = te.placeholder((2, elements), name="produced")
    shape = (2, elements)
    kernels = {"produce": [data, te.compute(shape, lambda i, j: data[i, j] * 2.0, name="out")],
               "read_own": [produced, te.compute(shape, lambda i, j: produced[i, j] + 1.0, name="out")],
               "read_other": [produced, te.compute(shape, lambda i, j: produced[1 - i, j] + 1.0, name="out")]}
    functions = {}
    for name, tensors in kernels.items():
        sch = tvm.s_tir.Schedule(te.create_prim_func(tensors))
        rows, columns = sch.get_loops(sch.get_sblock("out"))
        sch.parallel(rows)
        sch.vectorize(sch.split(columns, [None, 8])[1])
        functions[name] = sch.mod["main"].with_attr("global_symbol", name)
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "probe.so"
        tvm.compile(tvm.IRModule(functions), target=target).export_library(str(path))
        return tvm.runtime.load_module(str(path))


def probe(library: Any, arrays: Sequence[Any], pairs: int = 100) -> tuple[float, float]:
    """Median seconds of ``read_own`` and of ``read_other``, each right after ``produce``."""
    data, produced, out = arrays
    own, other = [], []
    for _ in range(pairs):
        for reader, times in (("read_own", own), ("read_other", other)):
            library["produce"](data, produced)
            started = time.perf_counter()
            library[reader](produced, out)
            times.append(time.perf_counter() - started)
    return statistics.median(own), statistics.median(other)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--library", type=Path, required=True, help="an exported build (.so)")
    parser.add_argument("--input-shape", required=True, help="its single input's shape, e.g. 1,3,224,224")
    parser.add_argument("--windows", type=int, default=80)
    parser.add_argument("--runs", type=int, default=8, help="whole runs of the build per window")
    parser.add_argument("--elements", type=int, default=65536, help="floats per thread (256 KB)")
    parser.add_argument("--out", type=Path, default=RESULTS / "cross_core.md")
    args = parser.parse_args(argv)
    if not args.library.is_file():
        parser.error(f"no file {str(args.library)!r}")

    import tvm

    from layoutopt.machine import stamp_line
    from layoutopt.tvm import resolve_target

    library = probe_kernels(args.elements, resolve_target(None))
    arrays = [tvm.runtime.tensor(np.random.default_rng(0).random((2, args.elements), dtype=np.float32)),
              *(tvm.runtime.tensor(np.zeros((2, args.elements), np.float32)) for _ in range(2))]
    vm = tvm.relax.VirtualMachine(tvm.runtime.load_module(str(args.library)), tvm.cpu())
    shape = [int(d) for d in args.input_shape.split(",")]
    data = tvm.runtime.tensor(np.random.default_rng(1).standard_normal(shape).astype("float32"))
    for _ in range(5):
        vm["main"](data)
    windows = []
    for _ in range(args.windows):
        own, other = probe(library, arrays)
        runs = []
        for _ in range(args.runs):
            started = time.perf_counter()
            vm["main"](data)
            runs.append(time.perf_counter() - started)
        windows.append((own, other, statistics.median(runs)))
    table = np.array(windows)
    ratio = table[:, 1] / table[:, 0]
    correlation = np.corrcoef(table[:, 2], ratio)[0, 1]
    kilobytes = args.elements * 4 // 1024
    command = (f"python -m benchmarks.cross_core --library {args.library.name} "
               f"--input-shape {args.input_shape} --windows {args.windows}")
    lines = [f"## {args.library.name}: the cross-core probe beside whole runs", "", f"*{stamp_line()}*", "",
             f"`{command}`: {args.windows} windows, each 100 probe pairs ({kilobytes} KB per thread), "
             f"then {args.runs} whole runs of the build (medians). Correlation of the build's time with "
             f"the probe's other / own: {correlation:.2f}.", "",
             "| probe's other / own | windows | build ms | probe: read own us | read the other thread's us |",
             "|---|---|---|---|---|"]
    for low, high in ((0.0, 1.25), (1.25, 1.5), (1.5, np.inf)):
        selected = (ratio >= low) & (ratio < high)
        if selected.any():
            own, other, build = (float(np.median(table[selected, k])) for k in range(3))
            label = f"below {high}" if low == 0 else f"{low} and above" if high == np.inf else f"{low}-{high}"
            lines.append(f"| {label} | {int(selected.sum())} | {build * 1e3:.2f} | {own * 1e6:.1f} | "
                         f"{other * 1e6:.1f} |")
    append_section(lines, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Is this host steady enough to check a prediction to 5 %? Its speed over minutes, nothing else run.

A fixed float32 matmul (numpy's BLAS: the host's widest vectors) and a fixed pure-Python loop are
timed back to back, continuously, for ``--seconds`` after an idle pause, twice. Each line of the
output is one window of that run: the median time of each workload in it. On a steady host every
window reads the same; a host whose cores are shared with other tenants reads up to 2x apart from
one window to the next, and then an in-network profile taken a minute after calibration can miss
the calibrated prediction by as much, whatever the cost model.

Writes ``benchmarks/results/host_drift.md``, stamped. About ``2 * (pause + seconds)`` seconds.

Usage::

    python -m benchmarks.host_drift                 # 2 x (30 s idle + 90 s busy)
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).parent / "results"


def _matmul(a: np.ndarray) -> float:
    start = time.perf_counter()
    for _ in range(4):
        a @ a
    return time.perf_counter() - start


def _python_loop() -> float:
    start = time.perf_counter()
    total = 0
    for i in range(200_000):
        total += i
    return time.perf_counter() - start


def run_phase(seconds: float, windows: int) -> list[tuple[float, float, float, int]]:
    """``(window start s, matmul ms, loop ms, samples)`` per window of a busy run of ``seconds``."""
    a = np.random.default_rng(0).standard_normal((512, 512)).astype("float32")
    samples = []
    start = time.perf_counter()
    while (now := time.perf_counter() - start) < seconds:
        samples.append((now, _matmul(a), _python_loop()))
    width = seconds / windows
    rows = []
    for w in range(windows):
        inside = [s for s in samples if w * width <= s[0] < (w + 1) * width]
        if inside:
            rows.append((w * width, 1e3 * float(np.median([s[1] for s in inside])),
                         1e3 * float(np.median([s[2] for s in inside])), len(inside)))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=90.0, help="busy seconds per phase")
    parser.add_argument("--pause", type=float, default=30.0, help="idle seconds before each phase")
    parser.add_argument("--windows", type=int, default=9, help="windows per phase")
    parser.add_argument("--out", default=str(RESULTS / "host_drift.md"))
    args = parser.parse_args(argv)
    from layoutopt.machine import stamp_line

    lines = ["# Host drift: the same work timed over minutes (`benchmarks/host_drift.py`)", "",
             f"*{stamp_line()}*", "",
             "Median ms per window of a 512x512 float32 matmul (4 products, numpy's BLAS) and of a "
             f"200,000-step Python loop, timed back to back for {args.seconds:.0f} s after "
             f"{args.pause:.0f} s idle, twice. Nothing else ran.", "",
             "| phase | window from (s) | matmul ms | loop ms | samples |", "|---|---|---|---|---|"]
    phases = []
    for phase in (1, 2):
        time.sleep(args.pause)
        rows = run_phase(args.seconds, args.windows)
        phases.append(rows)
        lines += [f"| {phase} | {t:.0f} | {mm:.2f} | {loop:.2f} | {n} |" for t, mm, loop, n in rows]
    every = [row for rows in phases for row in rows]
    for column, name in ((1, "matmul"), (2, "loop")):
        values = [row[column] for row in every]
        lines.append(f"\n{name}: slowest window / fastest = {max(values) / min(values):.2f}x")
    text = "\n".join(lines) + "\n"
    Path(args.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

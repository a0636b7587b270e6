"""Compare every solver on the instance suite: ``python -m benchmarks.solvers [options]``.

A thin wrapper over :mod:`layoutopt.bench` (the same options as ``layoutopt bench``) that,
run from the repository, also includes the problem files of ``benchmarks/instances/`` (the
real, TVM-measured instances) and writes to ``benchmarks/results/solvers.*``.

Examples::

    python -m benchmarks.solvers                      # the whole suite, 60 s per solve
    python -m benchmarks.solvers --suite tiny --time-limit 5 --out /tmp/bench
    python -m benchmarks.solvers --suite files        # only benchmarks/instances/*.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from layoutopt import bench

HERE = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> int:
    summary = __doc__.split("\n\n")[0]
    parser = argparse.ArgumentParser(prog="python -m benchmarks.solvers", description=summary)
    bench.add_arguments(parser)
    parser.set_defaults(out=str(HERE / "results"), instances=str(HERE / "instances"))
    return bench.run_from_args(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())

"""The solver-comparison harness: every method on every instance of a suite, side by side.

:func:`run` solves each instance with each method through the public API
(:func:`layoutopt.solve`) under a time limit and records wall time, objective, the gap to
the best known objective, the proven lower bound and the status. A method that raises,
crashes the interpreter or overruns its limit is recorded as a failure, not fatal: by
default each method runs in its own worker process (``isolate=True``), replaced after a
crash or a kill. :func:`write_report` writes a markdown table in the shape of a paper's
table, a CSV and two PNG plots (solve time against size, log-log; optimality gaps of the
heuristics), each stamped with the date, the machine and the package versions.

Besides the registered methods, a run may include *baselines* from :mod:`layoutopt.baselines`
(``tvm-dp``, this repository's re-implementation of the DP idea of TVM's graph tuner, is run by
default). An exception carrying a ``stats`` dict keeps those stats in the record (the DP reports
its state counts when it refuses).

The package, by job:

- :mod:`~layoutopt.bench.suite`: which instances (:class:`InstanceSpec`: a generator call or
  a problem file; the synthetic suite; the bundled files);
- :mod:`~layoutopt.bench.runner`: running them (:func:`run`, worker processes, repeats);
- :mod:`~layoutopt.bench.records`: what a run produces (:class:`Record`, its statuses);
- :mod:`~layoutopt.bench.stats`: gaps and per-method figures (:func:`summarize`);
- :mod:`~layoutopt.bench.report`: markdown, CSV, plots and the demo's text table;
- :mod:`~layoutopt.bench.cli` and :mod:`~layoutopt.bench.demo`: ``layoutopt bench`` and
  ``layoutopt demo``.

Example:
    >>> from layoutopt import bench
    >>> suite = bench.synthetic_suite(sizes=[20], families=["resnet"], presets=False)
    >>> records = bench.run(suite, methods=["greedy", "bruteforce"], time_limit=5,
    ...                     isolate=False, progress=False)
    >>> [(r.method, r.status) for r in records]
    [('greedy', 'feasible'), ('bruteforce', 'refused')]
"""

from __future__ import annotations

from .cli import DEFAULT_BASELINES, add_arguments, run_from_args, suite_from_args
from .records import FAILED, SOLVED, Record
from .report import comparison_table, markdown, plot, write_csv, write_report
from .runner import REPEAT_BELOW, run
from .stats import best_known, summarize
from .suite import (
    BUDGET_SHARES,
    SIZES,
    InstanceSpec,
    budget_suite,
    bundled_instances,
    file_suite,
    synthetic_suite,
)

__all__ = [
    "BUDGET_SHARES",
    "DEFAULT_BASELINES",
    "FAILED",
    "REPEAT_BELOW",
    "SIZES",
    "SOLVED",
    "InstanceSpec",
    "Record",
    "add_arguments",
    "best_known",
    "budget_suite",
    "bundled_instances",
    "comparison_table",
    "file_suite",
    "markdown",
    "plot",
    "run",
    "run_from_args",
    "suite_from_args",
    "summarize",
    "synthetic_suite",
    "write_csv",
    "write_report",
]

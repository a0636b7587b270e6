"""``layoutopt bench`` and ``python -m benchmarks.solvers``: the harness's options, and a run from them."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from .report import markdown, write_report
from .runner import run
from .suite import BUDGET_SHARES, SIZES, InstanceSpec, budget_suite, file_suite, synthetic_suite

__all__ = ["DEFAULT_BASELINES", "add_arguments", "add_parser", "run_from_args", "suite_from_args"]

#: baselines run beside the methods unless ``--no-baselines`` (see :mod:`layoutopt.baselines`)
DEFAULT_BASELINES = ("tvm-dp",)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The harness's options, shared by ``layoutopt bench`` and ``python -m benchmarks.solvers``."""
    parser.add_argument(
        "--suite",
        choices=("synthetic", "presets", "tiny", "files", "budget"),
        default="synthetic",
        help="synthetic: presets + families x sizes; presets: the four real-sized ones; "
        "tiny: a few seconds' smoke run; files: only the --instances directory; budget: presets + "
        "families x sizes + the --instances files, each under memory budgets (--budget-shares)",
    )
    parser.add_argument(
        "--budget-shares", type=float, nargs="+", default=list(BUDGET_SHARES), metavar="S",
        help="with --suite budget: where each budget lies, from the smallest assignment's memory (0) to "
        "the unconstrained optimum's (1); default: %(default)s",
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), metavar="N")
    parser.add_argument("--families", nargs="+", default=["resnet", "inception", "densenet", "ssd", "random"])
    parser.add_argument("--regimes", nargs="+", default=["normal"], help="normal, hard, xhard, noinf")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument(
        "--instances",
        metavar="DIR",
        help="also run every *.json problem file of DIR (the format `layoutopt solve` reads)",
    )
    parser.add_argument("--methods", nargs="+", help="default: every available method but bruteforce")
    parser.add_argument(
        "--no-baselines",
        action="store_true",
        help="skip the tvm-dp baseline (this repository's re-implementation of the DP idea of TVM's graph "
        "tuner, not TVM's code)",
    )
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
    parser.add_argument("--note", action="append", default=[], metavar="TEXT",
                        help="a line for the report's header (e.g. how loaded the machine was); repeatable")


def suite_from_args(args: argparse.Namespace) -> list[InstanceSpec]:
    """The instances the options select."""
    if args.suite == "tiny":
        specs = synthetic_suite(sizes=[20], families=["resnet", "densenet", "random"], presets=False)
    elif args.suite == "presets":
        specs = synthetic_suite(sizes=[], regimes=args.regimes, seeds=args.seeds)
    elif args.suite in ("synthetic", "budget"):
        specs = synthetic_suite(args.sizes, args.families, args.regimes, args.seeds)
    else:
        specs = []
    if args.instances:
        specs += file_suite(args.instances)
    if args.suite == "budget":
        specs = budget_suite(specs, args.budget_shares)
    return specs


def run_from_args(args: argparse.Namespace, out: Callable[[str], Any] = print) -> int:
    """Run the harness as the options say; print where the outputs went."""
    from ..errors import ProblemError

    specs = suite_from_args(args)
    if not specs:
        raise ProblemError(
            "the selected suite is empty (for --suite files, give --instances DIR with *.json)"
        )
    records = run(
        specs,
        methods=args.methods,
        time_limit=args.time_limit,
        baselines=() if args.no_baselines else DEFAULT_BASELINES,
        isolate=not args.in_process,
        progress=not args.quiet,
    )
    budget = args.suite == "budget"
    notes = list(args.note)
    if budget:
        notes.insert(0, "Memory budgets: synthetic figures anti-correlated with cost "
                     "(`generators.memory_figures`), each instance's budget `memN` N % of the way from its "
                     "smallest assignment's memory to its unconstrained optimum's "
                     "(`generators.constrain_memory`). Gaps are to the best known objective *within the "
                     "budget*.")
    title = "Solver comparison under memory budgets" if budget else "Solver comparison"
    paths = write_report(records, args.out, stem=args.stem, plots=not args.no_plots,
                         time_limit=args.time_limit, title=title, notes=notes)
    out(
        markdown(records, time_limit=args.time_limit).split("\n## Summary per method")[0].split("\n\n", 2)[-1]
    )
    out("wrote " + ", ".join(str(p) for p in paths))
    return 0


def add_parser(subparsers) -> None:
    """Register ``bench`` on the ``layoutopt`` command's subparsers."""
    parser = subparsers.add_parser(
        "bench",
        help="compare every solver on an instance suite (markdown, CSV, PNG)",
        description="Run every available method, and the tvm-dp baseline (this repository's "
        "re-implementation of the DP idea of TVM's graph tuner), on an instance suite under a time limit; "
        "write STEM.md, STEM.csv and plots under --out.",
    )
    add_arguments(parser)
    parser.set_defaults(run=run_from_args)

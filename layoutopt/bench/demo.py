"""``layoutopt demo``: every method (and the tvm-dp baseline) on a bundled DNN-shaped instance."""

from __future__ import annotations

import argparse

from .cli import DEFAULT_BASELINES
from .report import comparison_table
from .runner import run
from .suite import InstanceSpec, bundled_instances

__all__ = ["add_parser", "run_demo"]


def add_parser(subparsers) -> None:
    """Register ``demo`` on the ``layoutopt`` command's subparsers."""
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
    parser.set_defaults(run=run_demo)


def run_demo(args: argparse.Namespace) -> int:
    """Solve the bundled instance ``args.instance`` with every method; print the comparison table."""
    from ..api import check_time_limit
    from ..errors import ProblemError

    check_time_limit(args.time_limit)  # refused up front, not by every method in turn
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
        [spec], time_limit=args.time_limit, baselines=DEFAULT_BASELINES, isolate=False, progress=False
    )
    print(comparison_table(records))
    return 0

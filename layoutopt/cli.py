"""The ``layoutopt`` command line: thin wrappers over the library.

Each subcommand lives beside the code it drives and exposes ``add_parser(subparsers)``,
which registers the subcommand and sets ``run=<callable(args) -> int>`` as its default.
Those modules must stay cheap to import (no TVM, no OR-Tools at import time).
"""

from __future__ import annotations

import argparse
import importlib
import sys

from .errors import MissingExtraError, ProblemError

#: modules that contribute subcommands, in help order
COMMAND_MODULES = ("layoutopt.io", "layoutopt.bench.cli", "layoutopt.bench.demo", "layoutopt.tvm.cli")

#: commands of modules that need an optional extra: without it they still exist and explain how
#: to install it, instead of vanishing from the command line
EXTRA_COMMANDS = {"layoutopt.tvm.cli": ("tune", "build")}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="layoutopt",
        description="Graph-level kernel and data-layout selection for DNN graphs.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except MissingExtraError as exc:
            for command in EXTRA_COMMANDS.get(name, ()):
                _add_missing_extra(subparsers, command, exc)
            continue
        module.add_parser(subparsers)
    return parser


def _add_missing_extra(subparsers, command: str, error: MissingExtraError) -> None:
    def run(_args: argparse.Namespace) -> int:
        print(f"layoutopt {command}: error: {error}", file=sys.stderr)
        return 2

    stub = subparsers.add_parser(command, help=f"(unavailable: needs the {error.extra!r} extra)")
    stub.add_argument("args", nargs=argparse.REMAINDER)
    stub.set_defaults(run=run)


def main(argv: list[str] | None = None) -> int:
    """Run the ``layoutopt`` command; bad input (a ProblemError) prints one line and returns 2."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args) or 0)
    except (ProblemError, MissingExtraError) as exc:
        print(f"layoutopt {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

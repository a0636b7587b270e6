"""The ``layoutopt`` command line: thin wrappers over the library.

Each subcommand lives beside the code it drives and exposes ``add_parser(subparsers)``,
which registers the subcommand and sets ``run=<callable(args) -> int>`` as its default.
Those modules must stay cheap to import (no TVM, no OR-Tools at import time).
"""

from __future__ import annotations

import argparse
import importlib
import sys

#: modules that contribute subcommands, in help order
COMMAND_MODULES = ()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="layoutopt",
        description="Graph-level kernel and data-layout selection for DNN graphs.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())

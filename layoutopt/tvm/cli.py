"""``layoutopt tune``: measure, solve, build and report on a model, from the command line.

Thin: it parses arguments and calls :func:`layoutopt.tvm.tune_and_build` and
:func:`layoutopt.tvm.report.write_report`. Importing it imports neither TVM nor the solvers.

Example (shell)::

    layoutopt tune                                   # the embedded default model, no download
    layoutopt tune resnet50.onnx --input-shape 1,3,224,224 --cache costs.jsonl
    layoutopt tune model.onnx --rpc 127.0.0.1:9190 --key rasp4 \
        --target '{"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "cortex-a72"}'
        # measured, checked and timed on the devices registered under rasp4
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

__all__ = ["add_parser", "default_cache_path", "parse_input_shapes", "run"]


def default_cache_path() -> Path:
    """``$XDG_CACHE_HOME/layoutopt/costs.jsonl`` (``~/.cache/...`` by default): reruns skip measuring.

    Example::

        default_cache_path()     # PosixPath('/root/.cache/layoutopt/costs.jsonl')
    """
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "layoutopt" / "costs.jsonl"


def parse_input_shapes(values: list[str] | None):
    """``["1,3,224,224"]`` -> ``[1, 3, 224, 224]``; ``["x=1,3,8,8", "y=1,4"]`` -> ``{"x": [...], ...}``.

    Example:
        >>> parse_input_shapes(["data=1,3,32,32"])
        {'data': [1, 3, 32, 32]}
    """
    from ..errors import ProblemError

    if not values:
        return None
    named, unnamed = {}, []
    for value in values:
        name, _, dims = value.rpartition("=")
        try:
            shape = [int(d) for d in dims.replace("x", ",").split(",") if d.strip()]
        except ValueError:
            raise ProblemError(
                f"--input-shape {value!r}: expected [NAME=]D0,D1,... with integer dims"
            ) from None
        if not shape or any(d <= 0 for d in shape):
            raise ProblemError(f"--input-shape {value!r}: dims must be positive integers")
        if name:
            named[name] = shape
        else:
            unnamed.append(shape)
    if unnamed and (named or len(unnamed) > 1):
        raise ProblemError(
            "--input-shape: name every shape (NAME=D0,D1,...) when the model has several inputs"
        )
    return unnamed[0] if unnamed else named


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register ``tune`` on the ``layoutopt`` command's subparsers."""
    parser = subparsers.add_parser(
        "tune",
        help="choose layouts for a model with TVM: measure, solve, build, verify, report",
        description="Measure every kernel candidate and layout transform of MODEL with TVM, choose the "
        "layouts that make the whole graph fastest, build it, check its outputs against the untouched "
        "model, time it against baselines and write a report. Without MODEL, an embedded ResNet-style "
        "model is used (no download).",
    )
    parser.add_argument("model", nargs="?", help="MODEL.onnx or a torch.export MODEL.pt2 (default: embedded)")
    parser.add_argument("--input-shape", action="append", metavar="[NAME=]1,3,224,224",
                        help="input shape (repeat with NAME= for several inputs)")
    parser.add_argument("--target", default="llvm",
                        help="TVM target: 'llvm' (this CPU), or a JSON dict such as "
                        "'{\"kind\": \"llvm\", \"mcpu\": \"skylake-avx512\"}'")
    parser.add_argument("--method", default="auto", help="layoutopt.solve method (default: auto)")
    parser.add_argument("--time-limit", type=float, default=None, help="solver time limit in seconds")
    parser.add_argument("--cache", default=None,
                        help=f"cost cache file (default: {default_cache_path()}); 'none' to disable")
    parser.add_argument("--blocks", default=None, metavar="4,8,16,32,64",
                        help="channel blocks to try (default: 4,8,16,32,64 and C when C < 8)")
    parser.add_argument("--orders", default="oc", metavar="oc,rows",
                        help="loop orders of blocked conv kernels to measure, each a choice of its own "
                             "(default: oc, AutoTVM's; oc,rows measures both, doubling the conv kernels)")
    parser.add_argument("--rpc", metavar="HOST:PORT",
                        help="measure the kernels, check and time the builds on the devices of the TVM RPC "
                        "tracker at HOST:PORT (give --target the devices' target)")
    parser.add_argument("--key", help="device key registered at the RPC tracker (with --rpc)")
    parser.add_argument("--baselines", default="greedy",
                        help="comma-separated baselines to build and time beside the best fixed layout "
                        "(b*: the faster of nchw8c and nchw16c, always built: the faster of it and the tuned "
                        "build is handed back): greedy, nchw16c_tuned, default (TVM's unscheduled default "
                        "build: slow on big models); '' for none")
    parser.add_argument("--no-check", action="store_true",
                        help="skip comparing outputs with TVM's default build of the untouched model")
    parser.add_argument("--repeat", type=int, default=5, help="timing repeats (median reported)")
    parser.add_argument("--report", default="layoutopt-report", metavar="DIR",
                        help="directory for report.md and report.png ('' to skip)")
    parser.set_defaults(run=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """Run ``layoutopt tune``; returns the exit status (2 on a user error, with a one-line message)."""
    from ..errors import MissingExtraError, ProblemError

    try:
        return _run(args)
    except (ProblemError, MissingExtraError) as exc:
        print(f"layoutopt tune: error: {exc}", file=sys.stderr)
        return 2


def _runner(args: argparse.Namespace):
    from ..errors import ProblemError

    if args.key and not args.rpc:
        raise ProblemError("--key needs --rpc HOST:PORT (the tracker the device is registered with)")
    if not args.rpc:
        return None
    if not args.key:
        raise ProblemError("--rpc needs --key (the device key registered at the tracker)")
    from .runner import RPCRunner

    return RPCRunner(tracker=args.rpc, key=args.key)


def _candidates(blocks_text: str | None, orders_text: str = "oc"):
    from ..errors import ProblemError
    from .kernels import CONV2D_ORDERS

    orders = [o.strip() for o in orders_text.split(",") if o.strip()]
    if not orders or any(o not in CONV2D_ORDERS for o in orders):
        raise ProblemError(f"--orders {orders_text!r}: expected loop orders from {CONV2D_ORDERS}")
    blocks = _blocks(blocks_text)
    return blocks if orders == ["oc"] else {"blocks": blocks, "orders": orders}


def _blocks(blocks_text: str | None):
    from ..errors import ProblemError

    if not blocks_text:
        return None
    try:
        blocks = sorted({int(b) for b in blocks_text.split(",") if b.strip()})
    except ValueError:
        raise ProblemError(
            f"--blocks {blocks_text!r}: expected comma-separated integers such as 8,16"
        ) from None
    if not blocks or blocks[0] < 1:
        raise ProblemError(f"--blocks {blocks_text!r}: blocks must be positive")
    return blocks


def _run(args: argparse.Namespace) -> int:
    from .load import load_model
    from .report import breakdown_markdown, write_report
    from .tune import tune_and_build

    cache = None if str(args.cache).lower() == "none" else Path(args.cache or default_cache_path())
    if cache is not None:
        cache.parent.mkdir(parents=True, exist_ok=True)
    baselines = [b.strip() for b in args.baselines.split(",") if b.strip()]
    runner = _runner(args)
    mod = load_model(args.model, parse_input_shapes(args.input_shape))
    print(f"layoutopt tune: {args.model or 'embedded default model'}; cost cache {cache or 'off'}")
    result = tune_and_build(mod, target=args.target, method=args.method, cache=cache, runner=runner,
                            candidates=_candidates(args.blocks, args.orders), time_limit=args.time_limit,
                            baselines=baselines, check=not args.no_check, repeat=args.repeat, progress=True)
    print()
    print(_layer_table(result))
    print()
    print(result.summary())
    if result.tuned.breakdown:
        print("\nwhere the time goes (ms, each call timed in the network):")
        print(breakdown_markdown(result))
    if args.report:
        paths = write_report(result, args.report, model=args.model or "embedded default model")
        print(f"\nreport: {paths['markdown']} and {paths['plot']}")
    return 0


def _layer_table(result) -> str:
    rows = [("layer", "workload", "chosen layouts", "kernel ms", "in network ms", "transforms in")]
    for layer in result.layers:
        in_network = "" if layer.in_network is None else f"{layer.in_network * 1e3:.3f}"
        rows.append((str(layer.node), layer.workload, layer.choice, f"{layer.kernel_time * 1e3:.3f}",
                     in_network, str(layer.transforms_in or "")))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
                     for row in rows)

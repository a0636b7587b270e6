"""``layoutopt tune``: measure, solve, build and report on a model, from the command line.

Thin: it parses arguments and calls :func:`layoutopt.tvm.tune_and_build` and
:func:`layoutopt.tvm.tune.report.write_report`. Importing it imports neither TVM nor the solvers.

Example:
    Command lines, as the shell gives them to ``layoutopt`` (parsed here, not run):

    >>> import shlex
    >>> from layoutopt.cli import build_parser
    >>> def parse(command_line):
    ...     return build_parser().parse_args(shlex.split(command_line))
    >>> parse("tune").model is None                  # the embedded default model, no download
    True
    >>> parse("tune resnet50.onnx --input-shape 1,3,224,224 --cache costs.jsonl").input_shape
    ['1,3,224,224']
    >>> args = parse('''tune model.onnx --rpc 127.0.0.1:9190 --key rasp4
    ...     --target '{"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "cortex-a72"}' ''')
    >>> args.rpc, args.key       # measured, checked and timed on the devices registered under rasp4
    ('127.0.0.1:9190', 'rasp4')
    >>> parse("tune det.onnx --input-shape 1,3,320,320 --pin conv_out=NCHW16c->NCHW16c -o det.so").pin
    ['conv_out=NCHW16c->NCHW16c']
    >>> parse("tune mobilenet.onnx --memory-budget 40MB").memory_budget    # the fastest that fits
    '40MB'
    >>> parse("tune mobilenet.onnx --pareto").pareto    # the latency-memory front, 12 solves at most
    12
    >>> parse("build det.onnx --solution det.solution.json -o det.so").solution   # rebuild, no measurement
    'det.solution.json'
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import fields
from pathlib import Path

__all__ = ["add_parser", "default_cache_path", "parse_input_shapes", "run"]


def default_cache_path() -> Path:
    """``$XDG_CACHE_HOME/layoutopt/costs.jsonl`` (``~/.cache/...`` by default): reruns skip measuring.

    Example:
        >>> default_cache_path().parts[-2:]      # under ~/.cache unless XDG_CACHE_HOME says otherwise
        ('layoutopt', 'costs.jsonl')
    """
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "layoutopt" / "costs.jsonl"


def parse_input_shapes(values: list[str] | None):
    """``["1,3,224,224"]`` -> ``[1, 3, 224, 224]``; ``["x=1,3,8,8", "y=1,4"]`` -> ``{"x": [...], ...}``.

    Dims are separated by ``,`` or ``x`` (``1x3x224x224``); every one must be a positive integer
    (``1,x,224`` and ``1,3x`` are errors, not ``[1, 224]`` and ``[1, 3]``), and a name may be given once.

    Example:
        >>> parse_input_shapes(["data=1,3,32,32"])
        {'data': [1, 3, 32, 32]}
        >>> parse_input_shapes(["1x3x8x8"])
        [1, 3, 8, 8]
    """
    import re

    from ..errors import ProblemError

    if not values:
        return None
    named, unnamed = {}, []
    for value in values:
        name, _, dims = value.rpartition("=")
        pieces = re.split(r"[,x]", dims.strip())
        if not all(re.fullmatch(r"\s*\d+\s*", piece) for piece in pieces):
            raise ProblemError(f"--input-shape {value!r}: expected [NAME=]D0,D1,... with integer dims")
        shape = [int(piece) for piece in pieces]
        if any(d <= 0 for d in shape):
            raise ProblemError(f"--input-shape {value!r}: dims must be positive integers")
        if name:
            if name in named:
                raise ProblemError(f"--input-shape: input {name!r} is given twice "
                                   f"({','.join(map(str, named[name]))} and {dims})")
            named[name] = shape
        else:
            unnamed.append(shape)
    if unnamed and (named or len(unnamed) > 1):
        raise ProblemError(
            "--input-shape: name every shape (NAME=D0,D1,...) when the model has several inputs"
        )
    return unnamed[0] if unnamed else named


def _add_model_options(parser: argparse.ArgumentParser, shapes: str, target: str) -> None:
    """MODEL, --input-shape and --target, which ``tune`` and ``build`` share (their help says how
    each uses them)."""
    parser.add_argument("model", nargs="?", help="MODEL.onnx or a torch.export MODEL.pt2 (default: embedded)")
    parser.add_argument("--input-shape", action="append", metavar="[NAME=]1,3,224,224",
                        help=f"input shape ({shapes})")
    parser.add_argument("--target", default="llvm", help=f"TVM target: {target}")


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register ``tune`` on the ``layoutopt`` command's subparsers."""
    from .building.storage import TUNE_STORAGE
    from .measure.cache import TIMINGS
    from .measure.search import ROUNDS
    from .tune.stages import TUNE_LOOP_ORDERS

    parser = subparsers.add_parser(
        "tune",
        help="choose layouts for a model with TVM: measure, solve, build, verify, report",
        description="Measure every kernel candidate and layout transform of MODEL with TVM, choose the "
        "layouts that make the whole graph fastest, build it, check its outputs against the untouched "
        "model, time it against baselines and write a report. Without MODEL, an embedded ResNet-style "
        "model is used (no download).",
    )
    _add_model_options(parser, shapes="repeat with NAME= for several inputs",
                       target="'llvm' (this CPU), or a JSON dict such as "
                              "'{\"kind\": \"llvm\", \"mcpu\": \"skylake-avx512\"}'")
    parser.add_argument("--method", default="auto", help="layoutopt.solve method (default: auto)")
    parser.add_argument("--time-limit", type=float, default=None, help="solver time limit in seconds")
    parser.add_argument("--cache", default=None,
                        help=f"cost cache file (default: {default_cache_path()}); 'none' to disable")
    parser.add_argument("--blocks", default=None, metavar="4,8,16,32,64",
                        help="channel blocks to try (default: 4,8,16,32,64 and C when C < 8)")
    parser.add_argument("--algorithms", default=None, metavar="direct,winograd,gemm",
                        help="conv2d algorithms whose kernels are choices where they apply (default: all; "
                        "winograd: 3x3 stride-1 convs, gemm: 1x1 convs; direct: the direct kernel only)")
    parser.add_argument("--orders", default="oc", metavar="oc,rows",
                        help="loop orders of blocked conv kernels to measure, each a choice of its own "
                             "(default: oc, AutoTVM's; oc,rows measures both, doubling the conv kernels)")
    parser.add_argument("--rpc", metavar="HOST:PORT",
                        help="measure the kernels, check and time the builds on the devices of the TVM RPC "
                        "tracker at HOST:PORT (give --target the devices' target)")
    parser.add_argument("--key", help="device key registered at the RPC tracker (with --rpc)")
    parser.add_argument("--timing", choices=TIMINGS, default="cold",
                        help="how kernels are timed: cold (default: weights and output flushed before each "
                             "run, as the network leaves them), handoff (cold, and the input written by the "
                             "thread pool just before each run, as the layer before leaves it; this machine "
                             "only) or warm (caches as the last run left them)")
    parser.add_argument("--baselines", default="greedy",
                        help="comma-separated baselines to build and time beside the best fixed layout "
                        "(b*: the faster of nchw8c and nchw16c, always built, and with Winograd the fixed "
                        "rule winograd_fixed; the fastest build timed is handed back): greedy, "
                        "nchw16c_tuned, default (TVM's unscheduled default build: slow on big models); "
                        "'' for none")
    parser.add_argument("--storage", choices=TUNE_STORAGE, default="relax",
                        help="storage plan of every build: relax (default: Relax's, tensors of any "
                             "shape share storage) or by_shape (a storage per tensor shape: faster where a "
                             "core pays to take over lines the other core wrote, slower where it does not) "
                             "or auto (the tuned build with each, the faster handed back)")
    parser.add_argument("--loop-order", choices=TUNE_LOOP_ORDERS, default="oc",
                        help="parallel loops of every build's conv kernels: oc (default: each kernel's own, "
                             "output-channel chunks first), rows (every conv that can, rows first: each "
                             "thread reads the rows it wrote in the layer before) or auto (the tuned build "
                             "with each, the faster handed back)")
    parser.add_argument("--trials", type=int, default=0, metavar="N",
                        help="schedule points searched per workload beyond the heuristic's (successive "
                        "halving over each kernel's schedule space, into the cost cache; default 0: no "
                        "search)")
    parser.add_argument("--search-time", type=float, default=None, metavar="S",
                        help="seconds for the whole schedule search (default: no limit)")
    parser.add_argument("--top-k", type=int, default=1, metavar="K",
                        help="with --trials, the fastest schedules per algorithm and layout pair each layer "
                        "offers the solver (default 1)")
    parser.add_argument("--search-rounds", type=int, default=ROUNDS, metavar="N",
                        help="with --trials, the paired rounds in which each layer's fastest searched "
                        "schedules are timed again beside the heuristic's; one is offered only if it wins "
                        f"them (default {ROUNDS}; 0: the search's own times as they are)")
    parser.add_argument("--no-check", action="store_true",
                        help="skip comparing every build's outputs with the untouched model in float64")
    parser.add_argument("--rtol", type=float, default=1e-4,
                        help="tolerance of the output check: max|out - ref| / max|ref| per output (default "
                             "1e-4, or the untouched float32 build's own error times a growth factor, "
                             "if larger)")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the random inputs the builds are checked and timed on (default 0)")
    parser.add_argument("--no-guard", action="store_true",
                        help="hand back the tuned build even where a fixed layout (b*, the Winograd rule) "
                             "timed faster; they are still built and timed unless --baselines ''")
    parser.add_argument("--no-fuse", action="store_true",
                        help="do not fuse each conv's elementwise epilogue into it (measured and built "
                             "unfused, baselines too)")
    parser.add_argument("--no-profile", action="store_true",
                        help="do not time each call inside the running builds (no per-layer in-network "
                             "times, no breakdown); implies --calibrate 0")
    parser.add_argument("--calibrate", type=int, default=2, metavar="ROUNDS",
                        help="rounds of in-network calibration: profile each build, calibrate the costs "
                             "with what it ran and solve again (default 2; 0: none)")
    parser.add_argument("--repeat", type=int, default=30,
                        help="interleaved timing rounds, one run of each build per round (median "
                             "reported; the guard compares builds by their per-round ratios)")
    parser.add_argument("--report", default="layoutopt-report", metavar="DIR",
                        help="directory for report.md and report.png ('' to skip)")
    parser.add_argument("--pin", action="append", metavar="LAYER=CHOICE",
                        help="allow only this choice for LAYER (e.g. conv1=NCHW16c->NCHW16c); repeatable")
    parser.add_argument("--forbid", action="append", metavar="LAYER=CHOICE",
                        help="never choose CHOICE for LAYER (e.g. a kernel known to misbehave); repeatable")
    parser.add_argument("--memory-budget", metavar="SIZE",
                        help="the most memory the chosen kernels may hold together, their weights as packed "
                             "or transformed and their workspaces (e.g. 40MB, 1.5GiB, or bytes): the "
                             "fastest assignment that fits; refused, with the smallest assignment's memory, "
                             "when none does")
    parser.add_argument("--pareto", nargs="?", type=int, const=12, default=None, metavar="POINTS",
                        help="instead of one build: the latency-memory Pareto front from the measured costs "
                             "(at most POINTS solves, default 12, with an exact method), its fastest, "
                             "smallest and middle points built, checked and timed; a table, and front.md "
                             "and front.png in the --report directory")
    parser.add_argument("-o", "--output", metavar="MODEL.so",
                        help="write the build handed back as a shared library, and beside it "
                             "MODEL.solution.json, from which 'layoutopt build' rebuilds it unmeasured")
    parser.set_defaults(run=run)
    _add_build_parser(subparsers)
    return parser


def _add_build_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "build",
        help="rebuild a tuned model from its solution file, with no measurement",
        description="Apply the kernels and layouts of a solution file (written by 'layoutopt tune -o') to "
        "MODEL and build it as a shared library, measuring nothing. Refuses, naming what differs, when "
        "MODEL or the target is not the one the solution was tuned for.",
    )
    _add_model_options(parser, shapes="default: the solution file's",
                       target="default: this CPU; must be the solution's: give its JSON to cross-build "
                              "for the device it was tuned on")
    parser.add_argument("--solution", required=True, metavar="MODEL.solution.json",
                        help="the solution file 'layoutopt tune -o' wrote")
    parser.add_argument("-o", "--output", required=True, metavar="MODEL.so", help="the library to write")
    parser.set_defaults(run=_run_build)
    return parser


def run(args: argparse.Namespace) -> int:
    """Run ``layoutopt tune``; returns the exit status (2 on a user error, with a one-line message; 130
    on Ctrl-C, saying how to resume)."""
    return _guarded("tune", _run, args, interrupted=_resume_hint(args.cache))


def _run_build(args: argparse.Namespace) -> int:
    return _guarded("build", _build, args)


def _guarded(command: str, function, args: argparse.Namespace, interrupted: str = "") -> int:
    from ..errors import MissingExtraError, ProblemError

    try:
        return function(args)
    except (ProblemError, MissingExtraError) as exc:
        print(f"layoutopt {command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C: the measuring workers are stopped on the way out
        print(f"layoutopt {command}: interrupted" + (f"; {interrupted}" if interrupted else ""),
              file=sys.stderr)
        return 130


def _resume_hint(cache_text: str | None) -> str:
    """What a rerun after Ctrl-C starts from, for ``--cache cache_text``."""
    if cache_text is not None and cache_text.strip().lower() == "none":
        return "nothing measured was kept (--cache none): a rerun measures everything again"
    path = Path(cache_text) if cache_text else default_cache_path()
    return f"every kernel measured so far is in the cost cache {path}: rerun the same command to resume"


def _library_path(text: str | None, with_solution: bool = False) -> Path | None:
    """``-o MODEL.so``: checked now, with the solution file written beside it when
    ``with_solution`` (each must be a file that can be written), written at the end."""
    from ..errors import ProblemError
    from .deploy.solution_file import check_writable, solution_path

    if not text:
        return None
    path = Path(text)
    if path.suffix not in (".so", ".dylib", ".dll"):
        raise ProblemError(f"-o {text!r}: the library needs a .so name (e.g. model.so)")
    if path.is_dir():
        raise ProblemError(f"-o {text!r} is a directory; name the library file, e.g. {text}/model.so")
    check_writable(path, "-o")
    if with_solution:
        check_writable(solution_path(path), f"-o {text!r}: the solution file")
    return path


@contextmanager
def _warnings_in_one_line(command: str) -> Iterator[None]:
    """Python warnings raised inside the block, printed as ``layoutopt COMMAND: warning: ...``."""

    def show(message, category, filename, lineno, file=None, line=None) -> None:
        print(f"layoutopt {command}: warning: {message}", file=sys.stderr)

    with warnings.catch_warnings():
        warnings.showwarning = show
        yield


def _build(args: argparse.Namespace) -> int:
    from ._tvm import resolve_target
    from .deploy.solution_file import build_from_solution, export_library, load_solution
    from .frontend.load import load_model

    solution = load_solution(args.solution)
    target = resolve_target(args.target)
    output = _library_path(args.output)
    shapes, shapes_from = parse_input_shapes(args.input_shape), None
    if shapes is None and args.model and Path(args.model).suffix.lower() == ".onnx":  # .pt2: fixed shapes
        shapes = {name: list(spec.shape) for name, spec in solution.inputs.items()}
        shapes_from = f"solution file {args.solution!r}"
    mod = load_model(args.model, shapes or None, shapes_from=shapes_from)
    with _warnings_in_one_line("build"):
        executable, _ = build_from_solution(mod, solution, target)
    export_library(executable, output)
    handed_back = solution.handed_back.name if solution.handed_back else "?"
    print(f"layoutopt build: {output} ({len(solution.layers)} layers as in {args.solution}, "
          f"the {handed_back} build; nothing measured)")
    return 0


def _runner(args: argparse.Namespace):
    from ..errors import ProblemError

    if args.key and not args.rpc:
        raise ProblemError("--key needs --rpc HOST:PORT (the tracker the device is registered with)")
    from .measure.runner import LocalRunner, RPCRunner

    settings = LocalRunner.timing_settings(args.timing)
    if not args.rpc:
        return LocalRunner(**settings)
    if not args.key:
        raise ProblemError("--rpc needs --key (the device key registered at the tracker)")
    return RPCRunner(tracker=args.rpc, key=args.key, **settings)


def _candidates(blocks_text: str | None, orders_text: str = "oc", algorithms_text: str | None = None):
    from ..errors import ProblemError
    from .kernels import CONV2D_ORDERS, FAMILIES

    orders = [o.strip() for o in orders_text.split(",") if o.strip()]
    if not orders or any(o not in CONV2D_ORDERS for o in orders):
        raise ProblemError(f"--orders {orders_text!r}: expected loop orders from {CONV2D_ORDERS}")
    blocks = _blocks(blocks_text)
    if algorithms_text is None:
        return blocks if orders == ["oc"] else {"blocks": blocks, "orders": orders}
    algorithms = [a.strip() for a in algorithms_text.split(",") if a.strip()]
    known = sorted(algorithm for op, algorithm in FAMILIES if op == "conv2d")
    if not algorithms or set(algorithms) - set(known):
        raise ProblemError(f"--algorithms {algorithms_text!r}: expected conv2d algorithms from {known}")
    return {"blocks": blocks, "orders": orders, "algorithms": algorithms}


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


def _cache(text: str | None):
    """``--cache``: a :class:`~layoutopt.tvm.measure.cache.CostCache` (opened now: a path that cannot be read
    or
    written is refused before anything is measured), or None for ``none``."""
    from .measure.cache import CostCache

    if text is not None and text.strip().lower() == "none":
        return None
    return CostCache(Path(text) if text else default_cache_path())


def _output_directory(text: str, option: str) -> Path | None:
    """A directory the run will write into at its end, created now so that a bad one fails first."""
    from ..errors import ProblemError

    if not text:
        return None
    path = Path(text)
    try:
        path.mkdir(parents=True, exist_ok=True)
        if not os.access(path, os.W_OK | os.X_OK):
            raise PermissionError(13, "not writable")
    except OSError as exc:
        raise ProblemError(f"{option} {text!r}: cannot write there ({exc.strerror or exc})") from None
    return path


def _run(args: argparse.Namespace) -> int:
    from ..constraints import parse_constraint_texts
    from ..errors import ProblemError
    from ._tvm import resolve_target
    from .building.memory import check_memory
    from .frontend.load import load_with_origin
    from .tune.report import breakdown_markdown, write_report
    from .tune.stages import TuneOptions
    from .tune.tune import tune_and_build

    # everything the command line says is checked before the model is loaded or a kernel measured: the
    # options once, where tune_and_build checks them (TuneOptions), then what only the command line has
    target = resolve_target(args.target)
    shapes = parse_input_shapes(args.input_shape)
    baselines = [b.strip() for b in args.baselines.split(",") if b.strip()]
    candidates = _candidates(args.blocks, args.orders, args.algorithms)
    options = TuneOptions(method=args.method, candidates=candidates, time_limit=args.time_limit,
                          baselines=baselines, guard=not args.no_guard, check=not args.no_check,
                          rtol=args.rtol, seed=args.seed, repeat=args.repeat, fuse=not args.no_fuse,
                          profile=not args.no_profile, calibrate=0 if args.no_profile else args.calibrate,
                          pin=args.pin, forbid=args.forbid, progress=True, storage=args.storage,
                          loop_order=args.loop_order, trials=args.trials, search_time=args.search_time,
                          top_k=args.top_k, search_rounds=args.search_rounds,
                          memory_budget=args.memory_budget)
    if args.pareto is not None and (options.memory_budget is not None or args.output):
        raise ProblemError("--pareto walks every budget and hands back no build: drop --memory-budget and -o")
    if args.pareto is not None and args.pareto < 2:
        raise ProblemError(f"--pareto {args.pareto}: need 2 points or more (the two ends of the front)")
    parse_constraint_texts(args.pin, args.forbid)  # their form and contradictions; layers once loaded
    runner = _runner(args)  # an RPC tracker is asked now
    report = _output_directory(args.report, "--report")
    output = _library_path(args.output, with_solution=True)
    cache = _cache(args.cache)
    mod, origin = load_with_origin(args.model, shapes)
    check_memory(mod)  # before any input or activation is allocated
    where = cache.path if cache is not None else "off"
    print(f"layoutopt tune: {args.model or 'embedded default model'}; cost cache {where}")
    if args.pareto is not None:
        return _front(args, mod, origin, target, cache, runner, candidates, report)
    given = {field.name: getattr(options, field.name) for field in fields(options)}
    result = tune_and_build(mod, target=target, runner=runner, origin=origin, **{**given, "cache": cache})
    print()
    print(_layer_table(result))
    print()
    print(result.summary())
    shown = list(dict.fromkeys([result.chosen, "best_fixed"]))  # every build's: the report
    breakdown = breakdown_markdown(result, shown)
    if breakdown:
        print(f"\nwhere the time goes (ms, each call timed in the network; {' and '.join(shown)}):")
        print(breakdown)
    if report is not None:
        paths = write_report(result, report, model=args.model or "embedded default model")
        print(f"\nreport: {paths['markdown']} and {paths['plot']}")
    if output is not None:
        library, solution = result.export(output, model=args.model or "embedded default model")
        print(f"library: {library} (the {result.chosen} build); solution: {solution}")
    return 0


def _front(args: argparse.Namespace, mod, origin, target, cache, runner, candidates, report) -> int:
    """``layoutopt tune --pareto``: the front's table, its built points, and the report files."""
    from .tune.front import describe_built, memory_front

    front = memory_front(mod, target, cache, runner, candidates=candidates, method=args.method,
                         points=args.pareto, time_limit=args.time_limit, check=not args.no_check,
                         repeat=args.repeat, progress=True, origin=origin)
    model = args.model or "embedded default model"
    print(f"\nlatency-memory front of {model} ({len(front.points)} points; memory: the chosen kernels' "
          "weights as packed and their workspace):")
    print(front.table())
    print(describe_built(front))
    if report is not None:
        (report / "front.md").write_text(f"# Latency-memory front of {model}\n\ntarget {front.target}\n\n"
                                         f"{front.table()}\n\n{describe_built(front)}\n")
        front.plot(report / "front.png", title=f"latency-memory front: {Path(model).name}")
        print(f"\nfront: {report / 'front.md'} and {report / 'front.png'}")
    return 0


def _layer_table(result) -> str:
    """The layers of the build handed back (the one ``-o`` writes), under a line saying which it is;
    in-network times only for the tuned build (the one profiled layer by layer)."""
    from .tune.report import handed_back_layers

    layers = handed_back_layers(result)
    variant = result.handed_back
    profiled = any(layer.in_network is not None for layer in layers)
    rows = [("layer", "workload", "layouts and kernel", "kernel ms", *(["in network ms"] if profiled else []),
             "transforms in")]
    for layer in layers:
        in_network = ["" if layer.in_network is None else f"{layer.in_network * 1e3:.3f}"] if profiled else []
        rows.append((str(layer.node), layer.workload, layer.choice, f"{layer.kernel_time * 1e3:.3f}",
                     *in_network, str(layer.transforms_in or "")))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    table = "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
                      for row in rows)
    return f"layers of the build handed back: {result.chosen} ({variant.description})\n{table}"

"""Opt-in benchmark: the PP-OCRv4 detector's ConvTranspose and Resize calls before and after they ran in
blocked layouts, beside ONNX Runtime's own per-node times.

Before (``--before REV``, the revision whose code the fixed-layout builds are made with, e.g. the
commit before ConvTranspose and Resize got blocked kernels): the two ConvTranspose calls run TVM's
generic legalization (zero insertion, no schedule) and every resize is a plain-NCHW boundary, each
with a layout transform into NCHW and one back. After: this checkout's code, ConvTranspose as a
target node running its per-phase blocked kernel (or its GEMM + col2im, where the kernel overlaps),
resizes following the blocked layout. Both at one fixed layout everywhere (``NCHW8c`` and
``NCHW16c``, the members of b*), so that the difference is these ops alone.

The "before" builds are made by a child process running the revision's ``layoutopt`` (``git
archive``), the "after" ones here; every build is exported as a library and loaded as a user loads
it. Then, in this process, the calls of every build are timed inside the running network
(:func:`layoutopt.tvm.evaluate.profile.profile_builds`: interleaved rounds, each call's fastest run), and ONNX
Runtime's per-node times are read from its own profile (:func:`benchmarks.ort_layers.node_times`).
Last, the libraries, ONNX Runtime and OpenVINO are timed whole, side by side in interleaved rounds
(:func:`benchmarks.runtimes.time_side_by_side`).

Usage (the ``tvm`` and ``real-models`` extras; a few minutes on 2 cores)::

    python -m benchmarks.detector_ops --before e285486            # writes results/detector_ops.md
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from benchmarks.ort_layers import node_times
from benchmarks.real_models import MODELS, fetch
from benchmarks.runtimes import ONNXRUNTIME, start_engines, time_side_by_side
from layoutopt.machine import stamp

RESULTS = Path(__file__).parent / "results"
REPO = Path(__file__).resolve().parent.parent
MODEL = "ppocr_det"
LAYOUTS = ("NCHW8c", "NCHW16c")
#: the calls and ONNX Runtime nodes this benchmark is about
OPS = {"ConvTranspose": "conv2d_transpose", "Resize": "resize"}


def export_fixed_builds(model: Path, shape: Sequence[int], layouts: Sequence[str], directory: Path) -> None:
    """Build ``model`` at each of ``layouts`` everywhere with the ``layoutopt`` this process imports and
    export each as ``directory/<layout>.so`` (the public API of both revisions only)."""
    from layoutopt.tvm import (
        apply_assignment,
        build,
        export_library,
        extract_layout_graph,
        fixed_layout_assignment,
        load_model,
    )

    graph = extract_layout_graph(load_model(model, list(shape)))
    for layout in layouts:
        export_library(build(apply_assignment(graph.mod, graph, fixed_layout_assignment(graph, layout))),
                       directory / f"{layout}.so")


def export_before(revision: str, model: Path, shape: Sequence[int], directory: Path) -> None:
    """:func:`export_fixed_builds` with ``revision``'s ``layoutopt``, in a child process."""
    source = directory / "source"
    source.mkdir()
    archive = subprocess.run(["git", "-C", str(REPO), "archive", revision, "layoutopt"], check=True,
                             capture_output=True).stdout
    with tempfile.NamedTemporaryFile(suffix=".tar") as tar:
        tar.write(archive)
        tar.flush()
        with tarfile.open(tar.name) as opened:
            opened.extractall(source, filter="data")
    code = ("import sys; from pathlib import Path; from benchmarks.detector_ops import export_fixed_builds; "
            f"export_fixed_builds(Path({str(model)!r}), {list(shape)!r}, {list(LAYOUTS)!r}, "
            f"Path({str(directory)!r}))")
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(source), str(REPO)])}
    subprocess.run([sys.executable, "-c", code], check=True, env=environment, cwd=directory)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", help="the revision the 'before' builds are made with (required unless "
                        "--render)")
    parser.add_argument("--models", default=str(Path(tempfile.gettempdir()) / "layoutopt-models"))
    parser.add_argument("--repeat", type=int, default=20, help="profiled runs of each build (interleaved)")
    parser.add_argument("--rounds", type=int, default=15, help="side-by-side rounds of the whole networks")
    parser.add_argument("--output", default=str(RESULTS / "detector_ops.md"))
    parser.add_argument("--render", action="store_true",
                        help="only write the markdown again from the JSON beside --output")
    args = parser.parse_args(argv)
    output = Path(args.output)
    if args.render:
        output.write_text("\n".join(markdown(json.loads(output.with_suffix(".json").read_text()))) + "\n")
        return 0

    from layoutopt.tvm import import_tvm
    from layoutopt.tvm.evaluate.profile import profile_builds

    if not args.before:
        parser.error("--before REV is required")
    tvm = import_tvm()
    threads = int(os.environ.setdefault("TVM_NUM_THREADS", "2"))
    model = MODELS[MODEL]
    path = fetch(model, Path(args.models))
    inputs = [np.random.default_rng(1).standard_normal(model.shape).astype("float32")]
    with tempfile.TemporaryDirectory(prefix="detector-ops-") as scratch:
        before, after = Path(scratch) / "before", Path(scratch) / "after"
        before.mkdir()
        after.mkdir()
        export_before(args.before, path, model.shape, before)
        export_fixed_builds(path, model.shape, LAYOUTS, after)
        libraries = {f"{when} {layout}": str(directory / f"{layout}.so")
                     for layout in LAYOUTS for when, directory in (("before", before), ("after", after))}
        loaded = {name: tvm.runtime.load_module(library) for name, library in libraries.items()}
        load_before = os.getloadavg()[0]
        profiles = profile_builds(loaded, inputs, repeat=args.repeat)
        with start_engines(path, inputs, libraries, threads) as (engines, failed):
            if failed:
                raise RuntimeError(f"engines that did not start: {failed}")
            ort_nodes = node_times(engines[ONNXRUNTIME].profile(args.repeat, Path(scratch) / "ort"))
            side = time_side_by_side(engines, args.rounds, settle=0.0,
                                     versions={n: engine.version for n, engine in engines.items()})
    report = {"stamp": stamp(("onnxruntime", "openvino")), "before": args.before, "threads": threads,
              "repeat": args.repeat,
              "load": [load_before, os.getloadavg()[0]], "profiles": {
                  name: {"calls": [[c.symbol, [list(s) for s in c.shapes], c.seconds] for c in calls
                                   if any(op in c.symbol for op in (*OPS.values(), "layout_transform"))],
                         "total": sum(c.seconds for c in calls)}
                  for name, calls in profiles.items()},
              "onnxruntime_nodes": [n for n in ort_nodes if n["op"] in OPS],
              "onnxruntime_total": sum(n["seconds"] for n in ort_nodes), "side_by_side": side.as_dict()}
    output.with_suffix(".json").write_text(json.dumps(report, indent=1))
    output.write_text("\n".join(markdown(report)) + "\n")
    print(output.read_text())
    return 0


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.3f}"


def logical_shape(shape: Sequence[int]) -> tuple[int, ...]:
    """A tensor's logical NCHW shape from its shape in ``NCHW`` or ``NCHW{b}c``.

    Example:
        >>> logical_shape((1, 12, 20, 20, 8)), logical_shape((1, 24, 80, 80))
        ((1, 96, 20, 20), (1, 24, 80, 80))
    """
    if len(shape) == 5:
        n, outer, h, w, block = shape
        return (n, outer * block, h, w)
    return tuple(shape)


def matching_nodes(shapes: Sequence[Sequence[int]], nodes: list[dict]) -> list[dict]:
    """ONNX Runtime's nodes (taken from ``nodes``) whose first input has the logical shape of one of a
    call's arguments: the op the call runs (our neck's three 80x80 resizes run fused with their
    concat in one call; ORT runs three Resize nodes)."""
    found = []
    for shape in shapes:
        match = next((n for n in nodes if tuple(n["inputs"][0]) == logical_shape(shape)), None)
        if match is not None:
            nodes.remove(match)
            found.append(match)
    return found


def matching_calls(shapes: Sequence[Sequence[int]], calls: list) -> list:
    """The calls (taken from ``calls``: ``[symbol, shapes, seconds]``) whose first argument has the
    logical shape of one of ``shapes``: in another build, the same op, fused otherwise or not at all."""
    found = []
    for shape in shapes:
        match = next((c for c in calls if logical_shape(c[1][0]) == logical_shape(shape)), None)
        if match is not None:
            calls.remove(match)
            found.append(match)
    return found


def markdown(report: dict) -> list[str]:
    """The report as markdown: per call running a ConvTranspose or a Resize, its in-network time in each
    build beside ONNX Runtime's nodes for the same op; then the layout transforms, the sum of the calls
    and the whole networks side by side."""
    from benchmarks.runtimes import SideBySide

    profiles = {name: profile["calls"] for name, profile in report["profiles"].items()}
    builds = list(profiles)
    info = report["stamp"]
    lines = [
        "# PP-OCRv4 detector: ConvTranspose and Resize in blocked layouts, before and after",
        "",
        f"Written by `python -m benchmarks.detector_ops --before {report['before']}`. {info['date']}; "
        f"{info['machine']}; {info['threads']}; {info['versions']}. Load average "
        f"{report['load'][0]:.2f} before, {report['load'][1]:.2f} after.",
        "",
        "**The machine was shared** with other jobs while this ran (2 cores, other tenants busy): single "
        "timings are noisy. Compare the columns side by side: every build's calls were timed in the same "
        f"interleaved rounds (each call's fastest of {report['repeat']} runs in the network), ONNX "
        "Runtime's nodes in its own profile (the fastest of as many runs; 2 threads, `ORT_ENABLE_ALL`), "
        "the whole networks in interleaved rounds.",
        "",
        f"`{MODEL}` (`{MODELS[MODEL].member}`) at 1x3x320x320. *before*: revision `{report['before']}`: "
        "ConvTranspose on TVM's generic legalization (zero insertion, unscheduled) and every resize a "
        "plain-NCHW boundary with layout transforms around it. *after*: ConvTranspose a target node on its "
        "blocked per-phase kernel, resizes following the blocked layout with a scheduled kernel. Both with "
        "one fixed layout everywhere, so that only these ops differ. ms per call; a row is one call of "
        "the *after* builds, beside the calls of each build and the ONNX Runtime nodes that run the same "
        "ops (matched by their inputs' shapes): the neck's three 80x80 resizes run fused with their "
        "concat in one call *after*, in three calls *before* (their concat apart), in three Resize nodes "
        "in ONNX Runtime (its Concat apart).",
        "",
        "| call (ours, after) | input | " + " | ".join(builds) + " | ONNX Runtime nodes | ORT ms |",
        "|---|---|" + "---|" * len(builds) + "---|---|",
    ]
    for ort_op, op in OPS.items():
        nodes = [n for n in report["onnxruntime_nodes"] if n["op"] == ort_op]
        ours = {name: [c for c in calls if op in c[0]] for name, calls in profiles.items()}
        remaining = {name: list(calls) for name, calls in ours.items()}
        total = 0.0
        for symbol, shapes, _ in ours[builds[-1]]:
            matched = matching_nodes(shapes[:-1], nodes)
            total += sum(n["seconds"] for n in matched)
            cells = [_ms(sum(c[2] for c in matching_calls(shapes[:-1], remaining[name])) or None)
                     for name in builds]
            lines.append(f"| `{symbol}` | {logical_shape(shapes[0])} | " + " | ".join(cells) + " | "
                         + ", ".join(n["node"] for n in matched) + " | "
                         + _ms(sum(n["seconds"] for n in matched) if matched else None) + " |")
        sums = [_ms(sum(c[2] for c in ours[name])) for name in builds]
        lines.append(f"| **every {ort_op}** | | " + " | ".join(f"**{t}**" for t in sums)
                     + f" | | **{_ms(total)}** |")
    lines.append("| layout transforms | | " + " | ".join(
        _ms(sum(c[2] for c in profiles[name] if "layout_transform" in c[0])) for name in builds) + " | | |")
    sums = [_ms(report["profiles"][name]["total"]) for name in builds]
    lines.append("| sum of every call | | " + " | ".join(sums)
                 + f" | every node | {_ms(report['onnxruntime_total'])} |")
    side = SideBySide.from_dict(report["side_by_side"])
    lines += ["", "Whole networks (the exported libraries, ONNX Runtime and OpenVINO on the `.onnx` file), "
              "side by side: median over the rounds, ms; speed-up over ONNX Runtime, the median of the "
              "per-round ratios with its 95 % interval; max relative error against ONNX Runtime's outputs.",
              "",
              "| engine | ms | vs ONNX Runtime | error |", "|---|---|---|---|"]
    for name in side.seconds:
        ratio = side.speedup(name, over=ONNXRUNTIME) if name != ONNXRUNTIME else None
        error = side.errors.get(name)
        lines.append(f"| {name} | {_ms(side.latency(name).median)} | "
                     + ("" if ratio is None else f"{ratio.median:.2f}x [{ratio.low:.2f}-{ratio.high:.2f}]")
                     + f" | {'-' if error is None else f'{error:.1e}'} |")
    return lines


if __name__ == "__main__":
    sys.exit(main())

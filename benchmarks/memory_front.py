"""Opt-in benchmark: the latency-memory front of real CNNs, and ONNX Runtime's peak memory beside it.

For each model: measure every kernel and transform (:mod:`layoutopt.tvm.tune.stages`), figure each
choice's memory (:func:`layoutopt.tvm.measure.problem.memory_figures`: weights as packed or
transformed, padded channels included, and each kernel's workspace), walk the front with ``auto``
(:func:`layoutopt.front.memory_front`), then build, check against the untouched model and time side
by side, in interleaved rounds:

* ``optimum``: the unconstrained optimum (the fastest predicted, the most memory of the front);
* ``at_nchw8c`` and ``at_nchw16c``: the fastest assignment within the memory of NCHW8c (NCHW16c)
  everywhere; the one whose fixed layout measured faster is the row "at b*'s memory";
* ``smallest``: the fastest of the assignments holding the least memory;
* ``nchw8c``, ``nchw16c``: the fixed layouts themselves (b* is the faster, measured).

Each build's memory is also measured: the build is exported as a library, loaded in a fresh process
and run once; the figure given is the peak resident set (``VmHWM``) minus the resident set before the
library was loaded. ONNX Runtime is measured the same way on the ``.onnx`` (2 threads, its default
CPU arena): the session created and run once. Both include the weights, the activations (arena or
Relax's planned storage) and the workspaces; tracemalloc would see neither (native allocations).

Usage (the models: MobileNetV2 from ``--mobilenet`` (the torchvision export the real-models
benchmark writes, ``~/.cache/layoutopt/models/mobilenet_v2.onnx``), ResNet-50 and VGG-16 written by
:mod:`benchmarks.onnx_written`)::

    .venv/bin/python -m benchmarks.memory_front --models mobilenet_v2,resnet50 --cache /tmp/costs.jsonl

Writes ``benchmarks/results/memory_front.{md,csv,png}`` (rows of the models run are replaced).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

RESULTS = Path(__file__).parent / "results"
MOBILENET = Path.home() / ".cache" / "layoutopt" / "models" / "mobilenet_v2.onnx"
SHAPE = [1, 3, 224, 224]
COLUMNS = ["model", "build", "predicted_ms", "measured_ms", "figure_mb", "module_constants_mb", "rss_peak_mb",
           "transforms", "max_rel_error", "load"]

#: run in a fresh process: load a build (or an ONNX Runtime session), run it once, print the peak RSS
#: above the RSS before loading
_PEAK = textwrap.dedent("""
    import json, sys
    import numpy as np
    def status(key):
        for line in open("/proc/self/status"):
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    kind, path, shape = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    x = np.random.default_rng(0).standard_normal(shape).astype("float32")
    if kind == "tvm":
        import tvm
        from tvm import relax
        before = status("VmRSS")
        vm = relax.VirtualMachine(tvm.runtime.load_module(path), tvm.cpu())
        vm["main"](tvm.runtime.tensor(x))
    else:
        import onnxruntime as ort
        options = ort.SessionOptions()
        options.intra_op_num_threads = 2
        options.inter_op_num_threads = 1
        before = status("VmRSS")
        session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        session.run(None, {session.get_inputs()[0].name: x})
    print(json.dumps({"before": before, "peak": status("VmHWM")}))
""")


def peak_rss(kind: str, path: str | Path, shape: list[int]) -> float:
    """Bytes: peak RSS of a fresh process that loads ``path`` and runs it once, above its RSS before."""
    env = {**os.environ, "TVM_NUM_THREADS": "2", "OMP_NUM_THREADS": "2"}
    out = subprocess.run([sys.executable, "-c", _PEAK, kind, str(path), json.dumps(shape)], check=True,
                         capture_output=True, text=True, env=env).stdout
    found = json.loads(out.strip().splitlines()[-1])
    return float(found["peak"] - found["before"])


def _model_path(name: str, folder: Path, mobilenet: Path) -> Path:
    from benchmarks import onnx_written

    if name == "mobilenet_v2":
        return mobilenet
    path = folder / f"{name}.onnx"
    if not path.exists():
        {"resnet50": onnx_written.resnet50, "vgg16": onnx_written.vgg16}[name](path)
    return path


def run_model(name: str, path: Path, cache: str, points: int, repeat: int,
              say=print) -> tuple[list, list, dict]:
    """The rows of one model (see :data:`COLUMNS`), its front ``[(memory MB, predicted ms)]`` and what
    its budgeted solves took (:func:`solve_summary`)."""
    from layoutopt import solve_problem
    from layoutopt.baselines import get_baseline
    from layoutopt.front import memory_front
    from layoutopt.problem import Problem
    from layoutopt.tvm import load_model, resolve_target
    from layoutopt.tvm.building.memory import estimate_memory
    from layoutopt.tvm.evaluate.timing import Latency, compare_builds
    from layoutopt.tvm.measure.problem import memory_figures
    from layoutopt.tvm.measure.runner import LocalRunner
    from layoutopt.tvm.tune import stages
    from layoutopt.tvm.tune.result import TUNED

    mod = load_model(path, SHAPE)
    options = stages.TuneOptions(cache=cache, baselines=(), guard=False, repeat=repeat, profile=False,
                                 calibrate=0, progress=say)
    target = resolve_target("llvm")
    extracted = stages.extract(mod, target, LocalRunner(), options)
    measured = stages.measure(extracted, options)
    graph, costs = extracted.graph, measured.costs
    say(f"{name}: figuring every kernel's memory ...")
    memory = memory_figures(graph, target)
    problem = Problem.from_graph(graph, costs, memory)
    say(f"{name}: walking the front ({points} solves at most) ...")
    front = memory_front(graph, costs, memory, points=points)
    budgeted = [point.solution for point in front[1:]]  # the first point is the unconstrained solve
    assignments = {"optimum": front[0].assignment, "smallest": front[-1].assignment}
    for fixed in ("nchw8c", "nchw16c"):
        chosen = get_baseline(fixed).function(graph, problem, None)
        assignments[fixed] = chosen
        at = solve_problem(problem.with_memory_budget(problem.memory_of([chosen[n] for n in problem.nodes])))
        assignments[f"at_{fixed}"] = at.assignment
        budgeted.append(at)
    variants = {}
    for build, assignment in assignments.items():
        say(f"{name}: building and checking {build} ...")
        variants[build] = stages.build_variant(extracted, TUNED, build, assignment, options)
    say(f"{name}: timing {len(variants)} builds side by side ...")
    samples, _ = compare_builds({b: v.executable for b, v in variants.items()}, extracted.inputs, "optimum",
                                repeat)
    load = os.getloadavg()[0]
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for build, variant in variants.items():
            library = Path(folder) / f"{build}.so"
            variant.executable.export_library(str(library))
            order = [assignments[build][n] for n in problem.nodes]
            rows.append({"model": name, "build": build, "predicted_ms": problem.evaluate(order) * 1e3,
                         "measured_ms": Latency.of(samples[build]).median * 1e3,
                         "figure_mb": problem.memory_of(order) / 1e6,
                         "module_constants_mb": estimate_memory(variant.module).weights / 1e6,
                         "rss_peak_mb": peak_rss("tvm", library, SHAPE) / 1e6,
                         "transforms": variant.transforms, "max_rel_error": variant.max_relative_error,
                         "load": load})
    rows.append({"model": name, "build": "onnxruntime", "rss_peak_mb": peak_rss("ort", path, SHAPE) / 1e6,
                 "load": load})
    return rows, [(p.memory / 1e6, p.objective * 1e3) for p in front], solve_summary(budgeted, problem)


def solve_summary(solutions: list, problem) -> dict:
    """What the budgeted solves by ``auto`` took on a model's problem: how many, the longest (ms), the
    statuses, and the problem's size."""
    statuses: dict[str, int] = {}
    for solution in solutions:
        statuses[solution.status] = statuses.get(solution.status, 0) + 1
    return {"count": len(solutions), "max_ms": max((s.solve_time * 1e3 for s in solutions), default=0.0),
            "statuses": statuses, "nodes": len(problem.nodes),
            "choices": sum(len(c) for c in problem.node_costs)}


def markdown(rows: list[dict], fronts: dict, stamp: str, solves: dict | None = None) -> str:
    """The results page: per model, the builds side by side, b* named."""
    lines = ["# Latency-memory front (issue 49)", "", f"*{stamp}*", "",
             "Memory *figure*: what the chosen kernels hold by the model's own count (weights as packed or "
             "transformed, padded channels included, plus each kernel's workspace; "
             "`layoutopt.tvm.measure.problem.memory_figures`). *Module constants*: the constants of the "
             "rewritten Relax module (`estimate_memory(...).weights`: the packed weights, biases and other "
             "constants). *Peak RSS*: a fresh process loads the exported build (or an ONNX Runtime session, "
             "2 threads, default CPU arena), runs it once; its peak resident set (VmHWM) above its resident "
             "set before loading: weights, activations and workspaces together.", ""]
    for model in dict.fromkeys(row["model"] for row in rows):
        mine = {row["build"]: row for row in rows if row["model"] == model}
        fixed = [b for b in ("nchw8c", "nchw16c") if b in mine]
        best = min(fixed, key=lambda b: mine[b]["measured_ms"]) if fixed else None
        lines += [f"## {model}", "", f"b* (the faster fixed layout, measured): **{best}**; load "
                  f"{mine['optimum']['load']:.1f} while timed.", "",
                  "| build | predicted ms | measured ms | figure MB | module constants MB | peak RSS MB | "
                  "transforms |", "|---|---|---|---|---|---|---|"]
        for build, row in mine.items():
            label = {"optimum": "unconstrained optimum", "smallest": "smallest feasible memory",
                     f"at_{best}": f"fastest within b*'s memory ({best})"}.get(build, build)
            shown = ("predicted_ms", "measured_ms", "figure_mb", "module_constants_mb", "rss_peak_mb",
                     "transforms")
            cells = [label] + [("" if row.get(c) is None else f"{row[c]:.3f}" if isinstance(row[c], float)
                                else str(row[c])) for c in shown]
            lines.append("| " + " | ".join(cells) + " |")
        front = fronts.get(model, [])
        if front:
            lines += ["", f"Front ({len(front)} points, memory MB -> predicted ms): "
                      + ", ".join(f"{m:.2f} -> {t:.2f}" for m, t in front), ""]
        solved = (solves or {}).get(model)
        if solved:
            statuses = ", ".join(f"{n} {status}" for status, n in solved["statuses"].items())
            lines += [f"Budgeted solves by `auto` on its problem ({solved['nodes']} nodes, "
                      f"{solved['choices']} choices): {solved['count']}, the longest "
                      f"{solved['max_ms']:.1f} ms ({statuses}).", ""]
    return "\n".join(lines) + "\n"


def plot(fronts: dict, rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(fronts), figsize=(6 * len(fronts), 4.5), squeeze=False)
    for ax, (model, front) in zip(axes[0], fronts.items(), strict=True):
        ax.step([m for m, _ in front], [t for _, t in front], where="post", alpha=0.6)
        ax.plot([m for m, _ in front], [t for _, t in front], "o", label="front (predicted)")
        mine = [r for r in rows if r["model"] == model and r.get("measured_ms") is not None]
        ax.plot([r["figure_mb"] for r in mine], [r["measured_ms"] for r in mine], "s", color="tab:red",
                label="built (measured)")
        for r in mine:
            ax.annotate(r["build"], (r["figure_mb"], r["measured_ms"]), fontsize=7)
        ax.set_title(model)
        ax.set_xlabel("memory figure, MB (weights as packed + workspace)")
        ax.set_ylabel("latency, ms")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    from layoutopt.machine import stamp_line

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mobilenet_v2,resnet50")
    parser.add_argument("--mobilenet", default=str(MOBILENET), help="MobileNetV2's .onnx")
    parser.add_argument("--cache", default="/tmp/memory_front_costs.jsonl")
    parser.add_argument("--points", type=int, default=12)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--out", default=str(RESULTS / "memory_front"))
    args = parser.parse_args(argv)
    out = Path(args.out)
    saved = out.with_suffix(".json")
    state = json.loads(saved.read_text()) if saved.exists() else {"rows": [], "fronts": {}}
    with tempfile.TemporaryDirectory() as folder:
        for name in [m.strip() for m in args.models.split(",") if m.strip()]:
            path = _model_path(name, Path(folder), Path(args.mobilenet))
            rows, front, solved = run_model(name, path, args.cache, args.points, args.repeat)
            state["rows"] = [r for r in state["rows"] if r["model"] != name] + rows
            state["fronts"][name] = front
            state.setdefault("solves", {})[name] = solved
            saved.write_text(json.dumps(state, indent=1))
            stamp = stamp_line()
            page = markdown(state["rows"], state["fronts"], stamp, state.get("solves"))
            out.with_suffix(".md").write_text(page)
            with out.with_suffix(".csv").open("w", newline="") as handle:
                writer = csv.DictWriter(handle, COLUMNS, extrasaction="ignore")
                writer.writeheader()
                writer.writerows(state["rows"])
            plot(state["fronts"], state["rows"], out.with_suffix(".png"))
            print(f"{name}: written to {out.with_suffix('.md')}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

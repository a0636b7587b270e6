"""End-to-end latency: layoutopt-tuned TVM builds against fixed layouts, greedy, PyTorch and ONNX Runtime.

Batch 1, float32, ``TVM_NUM_THREADS`` threads (2 unless set; PyTorch and ONNX Runtime get as many).
Per network, in one child process, side by side:

* (a) TVM's default Relax build for llvm (no schedules), timed once (it is ~100x slower);
* (b) TVM, NCHW16c everywhere (nearest block where 16 does not divide the channels), default schedules;
* (b') the same layouts, each conv in its faster measured loop order (the schedule knob of
  ``layoutopt.tvm.kernels.CONV2D_SCHEDULE_KNOBS``): what schedule tuning alone gives;
* (c) TVM, each op's fastest kernel ignoring transforms (greedy / "history best");
* (d) TVM, layouts chosen by layoutopt (an exact method); (b)-(d) fuse each conv's elementwise
  epilogue into it (finished in the register tile for output blocks of one vector, after the conv
  otherwise: see ``layoutopt.tvm.kernels``), and (d') is (d)'s layouts built unfused (one kernel
  per op, exactly the kernels the costs were measured on);
* (e) PyTorch eager on the CPU (``OMP_WAIT_POLICY=PASSIVE``; without it OpenMP spinning breaks on
  2-vCPU VMs);
* (f) ONNX Runtime on the CPU (all graph optimisations).

Networks are torchvision architectures with seeded random weights (no download), exported to ONNX
once; TVM imports that ONNX file (``relax.frontend.onnx``) and ONNX Runtime runs it, so (a)-(d) and (f)
run the same graph. PyTorch and ONNX Runtime are timed in subprocesses so that their thread pools
cannot disturb TVM's timings. Needs torch and torchvision (see notes/tvm.md section 4): run it with a
Python that has them, e.g. a separate benchmark venv with layoutopt installed.

Usage (``/work/benchvenv`` is such a venv: torch 2.13, torchvision, layoutopt editable)::

    python -m benchmarks.e2e --networks resnet50_v1 --cache ~/.cache/layoutopt/e2e.jsonl
    python -m benchmarks.e2e --networks resnet50_v1,vgg19_bn,inception_v3,densenet201,ssd_resnet50_512 \
        --blocks 8,16,32,64 --orders oc,rows       # the run behind results/e2e.md

A cost cache holds kernel times for one schedule: after a change to the kernels' schedules
(``layoutopt/tvm/kernels.py``), measure into a fresh ``--cache`` file.

Writes ``benchmarks/results/e2e.md``, ``e2e.csv`` and ``e2e.png``, and per-network tune reports
``e2e-<network>.md/.png``. A run measures the networks of ``--networks`` and keeps the other rows of
``e2e.json`` from earlier runs, so each row carries its own stamp (date, machine, threads, versions).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TVM_NUM_THREADS", "2")
os.environ.setdefault("OMP_NUM_THREADS", os.environ["TVM_NUM_THREADS"])
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

RESULTS = Path(__file__).resolve().parent / "results"

from benchmarks.networks import MODEL_SNIPPET, NETWORKS, export_onnx, input_shape  # noqa: E402

VARIANTS = [
    ("default", "(a) TVM default build"),
    ("nchw16c", "(b) TVM NCHW16c everywhere"),
    ("nchw16c_tuned", "(b') NCHW16c, tuned schedules"),
    ("greedy", "(c) TVM per-op fastest (greedy)"),
    ("layoutopt", "(d) TVM + layoutopt (exact)"),
    ("layoutopt_unfused", "(d') same layouts, no epilogue fusion"),
    ("torch", "(e) PyTorch eager"),
    ("onnxruntime", "(f) ONNX Runtime"),
]


# ---------------------------------------------------------------------------------------------
# models (torch side, run in a subprocess too so torch never shares this process with TVM timings)

_TORCH_SNIPPET = MODEL_SNIPPET + r"""
import time
import numpy as np
ctor, kwargs, size, repeat, threads = json.loads(sys.argv[1])
torch.set_num_threads(threads)
model, x = build_model(ctor, kwargs), torch.randn(1, 3, size, size)
with torch.inference_mode():
    for _ in range(3):
        model(x)
    times = []
    for _ in range(repeat):
        start = time.perf_counter(); model(x); times.append(time.perf_counter() - start)
print(json.dumps({"seconds": float(np.median(times)), "torch": torch.__version__,
                  "torchvision": torchvision.__version__}))
"""

_ORT_SNIPPET = r"""
import json, sys, time
import numpy as np, onnxruntime as ort
path, size, repeat, threads = json.loads(sys.argv[1])
options = ort.SessionOptions()
options.intra_op_num_threads = threads
options.inter_op_num_threads = 1
options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
data = np.random.default_rng(0).standard_normal((1, 3, size, size)).astype("float32")
x = {session.get_inputs()[0].name: data}
for _ in range(3):
    session.run(None, x)
times = []
for _ in range(repeat):
    start = time.perf_counter(); session.run(None, x); times.append(time.perf_counter() - start)
print(json.dumps({"seconds": float(np.median(times)), "onnxruntime": ort.__version__}))
"""


def _subprocess_json(snippet: str, payload: list, timeout: float = 3600) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", snippet, json.dumps(payload)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "OMP_WAIT_POLICY": "PASSIVE"},
    )
    if done.returncode != 0:
        raise RuntimeError(
            done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "subprocess failed"
        )
    return json.loads(done.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------------------------
# one network


def run_network(network: str, args: argparse.Namespace) -> dict:
    from layoutopt.machine import stamp
    from layoutopt.tvm import build, load_model, tune_and_build
    from layoutopt.tvm.report import write_report
    from layoutopt.tvm.timing import measure_latencies, random_inputs

    size = input_shape(network)[-1]
    threads = int(os.environ["TVM_NUM_THREADS"])  # the count actually set, for TVM, PyTorch and ORT alike
    row: dict = {"network": network, "threads": threads, "load_before": os.getloadavg()[0],
                 "blocks": ",".join(map(str, args.blocks)) if args.blocks else "4,8,16,32,64"}
    onnx_path = export_onnx(network, Path(args.models))
    start = time.perf_counter()
    mod = load_model(onnx_path, input_shape=input_shape(network))
    result = tune_and_build(
        mod,
        method=args.method,
        cache=args.cache,
        candidates={"blocks": args.blocks, "orders": args.orders.split(",")},
        baselines=("nchw16c", "nchw16c_tuned", "greedy", *(("default",) if not args.skip_default else ())),
        repeat=args.repeat,
        progress=True,
        time_limit=args.time_limit,
    )
    row["tune_seconds"] = time.perf_counter() - start
    row["layoutopt"] = result.tuned.measured
    row["layoutopt_predicted"] = result.tuned.predicted
    row["layoutopt_transforms"] = result.tuned.transforms
    row["max_relative_error"] = max(
        v.max_relative_error or 0.0 for v in [result.tuned, *result.baselines.values()]
    )
    row["solver"] = f"{result.solution.method}/{result.solution.stats.get('engine', result.solution.method)}"
    row["status"] = result.solution.status
    for name, variant in result.baselines.items():
        row[name] = variant.measured
        row[f"{name}_predicted"] = variant.predicted
        row[f"{name}_transforms"] = variant.transforms
    row["timings"] = {k: round(v, 1) for k, v in result.timings.items()}
    # where each build's time goes, every call timed in the network (layoutopt.tvm.profile)
    row["breakdown"] = {variant.name: [dataclasses.asdict(c) for c in variant.breakdown]
                        for variant in [result.tuned, *result.baselines.values()] if variant.breakdown}
    # the same layouts built without epilogue fusion: what fusion is worth, and the kernels as measured
    # (timed in rounds interleaved with the fused build; reported scaled to (d)'s own measurement)
    unfused = build(result.module, result.target, fuse=False)
    pair = measure_latencies({"fused": result.executable, "unfused": unfused}, random_inputs(result.module),
                             repeat=args.repeat)
    row["layoutopt_unfused"] = result.tuned.measured * pair["unfused"] / pair["fused"]
    write_report(result, args.out, name=f"e2e-{network}", model=network)
    ctor, kwargs, _ = NETWORKS[network]
    torch_info = _subprocess_json(_TORCH_SNIPPET, [ctor, kwargs, size, args.repeat_eager, threads])
    row["torch"] = torch_info["seconds"]
    ort_info = _subprocess_json(_ORT_SNIPPET, [str(onnx_path), size, args.repeat_eager, threads])
    row["onnxruntime"] = ort_info["seconds"]
    row["load_after"] = os.getloadavg()[0]
    row["versions"] = {
        "torch": torch_info["torch"],
        "torchvision": torch_info["torchvision"],
        "onnxruntime": ort_info["onnxruntime"],
    }
    row["stamp"] = stamp()  # this row's own date and machine: rows of several runs share the table
    return row


# ---------------------------------------------------------------------------------------------
# outputs


def _ms(value) -> str:
    return "-" if value is None else f"{value * 1e3:.1f}"


def _load(row: dict) -> str:
    before, after = row.get("load_before"), row.get("load_after")
    return "-" if before is None or after is None else f"{before:.1f} / {after:.1f}"


def _threads(rows: list[dict]) -> str:
    """The thread count of the rows, for titles: one number, or the distinct ones."""
    counts = sorted({str(row.get("threads", "?")) for row in rows})
    return f"{counts[0]} threads" if len(counts) == 1 else f"{' or '.join(counts)} threads (see each row)"


def _measured(row: dict) -> list[str]:
    """When, where and with what a row was measured: date, machine, threads, versions."""
    info = row.get("stamp") or {}
    versions = info.get("versions", "?") + "".join(f", {k} {v}" for k, v in row.get("versions", {}).items())
    return [info.get("date", "?"), info.get("machine", "?"), str(row.get("threads", "?")), versions]


def write_outputs(rows: list[dict], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "e2e.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["# each row's date, machine, threads and versions are in its last columns"])
        writer.writerow(
            [
                "network",
                *[name for name, _ in VARIANTS],
                "layoutopt_predicted",
                "layoutopt_transforms",
                "nchw16c_transforms",
                "greedy_transforms",
                "max_relative_error",
                "solver",
                "status",
                "date",
                "machine",
                "threads",
                "versions",
            ]
        )
        for row in rows:
            writer.writerow(
                [
                    row["network"],
                    *[row.get(name) for name, _ in VARIANTS],
                    row.get("layoutopt_predicted"),
                    row.get("layoutopt_transforms"),
                    row.get("nchw16c_transforms"),
                    row.get("greedy_transforms"),
                    row.get("max_relative_error"),
                    row.get("solver"),
                    row.get("status"),
                    *_measured(row),
                ]
            )
    header = (
        "| network | "
        + " | ".join(label for _, label in VARIANTS)
        + " | (d) vs (b) | (d) vs (b') | (d) vs (c) | (d) vs (e) "
        "| (d) vs (f) |"
    )
    lines = [
        f"# End-to-end latency, batch 1, float32, {_threads(rows)} (ms, median)",
        "",
        "Produced by `benchmarks/e2e.py`, each network in its own child process; a run keeps the rows of",
        "the networks it did not measure, so rows may come from different runs, days and machines: each",
        "row's date, machine, thread count and versions are in the last table. Every TVM build's outputs",
        "were checked against TVM's default build of the untouched model (max relative error in e2e.csv).",
        "Speed-ups are (other) / (d): above 1 means layoutopt's build is faster. The machine is shared:",
        "the load average (2 cores) around each network is in the second table; kernel costs measured",
        "under load are noisy, and an exact solution of noisy costs is only as good as they are.",
        "",
        header,
        "|---" * (len(VARIANTS) + 6) + "|",
    ]
    for row in rows:
        tuned = row.get("layoutopt")
        ratios = [
            f"{row[o] / tuned:.2f}x" if row.get(o) and tuned else "-"
            for o in ("nchw16c", "nchw16c_tuned", "greedy", "torch", "onnxruntime")
        ]
        lines.append(
            f"| {row['network']} | "
            + " | ".join(_ms(row.get(name)) for name, _ in VARIANTS)
            + " | "
            + " | ".join(ratios)
            + " |"
        )
    lines += [
        "",
        "Predicted (layout problem objective) vs measured, transforms inserted:",
        "",
        "| network | (d) predicted | (d) measured | (d) transforms | (b) predicted | (b) transforms "
        "| (c) predicted | (c) transforms | solver | blocks | tune time (s) | load avg before / after |",
        "|---" * 12 + "|",
    ]
    for row in (r for r in rows if not r.get("error")):  # failures: listed below
        lines.append(
            f"| {row['network']} | {_ms(row.get('layoutopt_predicted'))} | {_ms(row.get('layoutopt'))} "
            f"| {row.get('layoutopt_transforms')} | {_ms(row.get('nchw16c_predicted'))} "
            f"| {row.get('nchw16c_transforms')} | {_ms(row.get('greedy_predicted'))} "
            f"| {row.get('greedy_transforms')} | {row.get('solver')} ({row.get('status')}) "
            f"| {row.get('blocks', '-')} | {row.get('tune_seconds', 0):.0f} | {_load(row)} |"
        )
    lines += _breakdown_table(rows)
    lines += ["", "When and where each row was measured:", "",
              "| network | date | machine | threads | versions |", "|---" * 5 + "|"]
    lines += [f"| {row['network']} | " + " | ".join(_measured(row)) + " |" for row in rows]
    failed = [row for row in rows if row.get("error")]
    if failed:
        lines += ["", "Failed:", ""] + [f"- {row['network']}: {row['error']}" for row in failed]
    lines += ["", "![e2e](e2e.png)", ""]
    (out / "e2e.md").write_text("\n".join(lines))
    _plot(rows, out / "e2e.png")


def _breakdown_table(rows: list[dict]) -> list[str]:
    """Where (d)'s and (b)'s time goes: every call of the build timed inside the running network."""
    profiled = [row for row in rows if (row.get("breakdown") or {}).get("layoutopt")]
    if not profiled:
        return []
    from layoutopt.tvm.profile import OTHER

    outside = ("pool", "concat", OTHER, "vm builtins")
    lines = [
        "",
        "Where the time goes (ms): each call of the build timed inside the running network (median of",
        "5 runs), beside the layout problem's prediction for the convs and the transforms; pooling,",
        "concat, the elementwise ops left outside a conv and the VM's builtins are outside the problem.",
        "",
        "| network | build | conv2d predicted | conv2d in network | transforms predicted "
        "| transforms in network | pool | concat | other ops | VM builtins | all calls | measured latency |",
        "|---" * 12 + "|",
    ]
    for row in profiled:
        for build, label in (("layoutopt", "(d)"), ("nchw16c", "(b)"), ("nchw16c_tuned", "(b')")):
            categories = {c["category"]: c for c in row["breakdown"].get(build, [])}
            if not categories:
                continue

            def total(names: tuple[str, ...], key: str, categories=categories) -> str:
                found = [categories[name][key] for name in names if name in categories]
                return _ms(sum(found)) if found else "-"

            lines.append(
                f"| {row['network']} | {label} | {total(('conv2d', 'dense'), 'predicted')} "
                f"| {total(('conv2d', 'dense'), 'measured')} | {total(('layout_transform',), 'predicted')} "
                f"| {total(('layout_transform',), 'measured')} | "
                + " | ".join(total((name,), "measured") for name in outside)
                + f" | {total(tuple(categories), 'measured')} | {_ms(row.get(build))} |"
            )
    return lines


def _plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [(name, label) for name, label in VARIANTS if name != "default"]
    fig, ax = plt.subplots(figsize=(max(6.0, 2.2 * len(rows) + 2), 4.5))
    width = 0.8 / len(shown)
    for k, (name, label) in enumerate(shown):
        xs = [i + (k - (len(shown) - 1) / 2) * width for i in range(len(rows))]
        ax.bar(xs, [(row.get(name) or 0) * 1e3 for row in rows], width, label=label)
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([row["network"] for row in rows])
    ax.set_ylabel("latency (ms, lower is better)")
    ax.set_title(f"batch 1, float32, {_threads(rows)} ((a) TVM default build omitted: ~100x slower)",
                 fontsize=9)
    ax.legend(fontsize=7)
    dates = sorted(row["stamp"]["date"] for row in rows if row.get("stamp"))
    machines = sorted({row["stamp"]["machine"] for row in rows if row.get("stamp")})
    measured = f"measured {dates[0]} to {dates[-1]}" if dates else "measured: see e2e.md"
    fig.text(0.01, 0.01, f"{measured}; {' / '.join(machines)}"[:200], fontsize=5)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _run_network_in_a_child(network: str, argv: list[str]) -> dict:
    """One network in its own process: a failure, even an abort inside LLVM, costs its row only.

    The child's stderr (its progress bars) is passed on as it comes; its tail names the failure."""
    with tempfile.TemporaryDirectory() as tmp:
        row_file = Path(tmp) / "row.json"
        child = subprocess.Popen([sys.executable, "-m", "benchmarks.e2e", *argv, "--networks", network,
                                  "--row-file", str(row_file)], stderr=subprocess.PIPE, text=True)
        assert child.stderr is not None
        tail = ""
        for chunk in iter(lambda: child.stderr.read(4096), ""):
            sys.stderr.write(chunk)
            sys.stderr.flush()
            tail = (tail + chunk)[-8192:]
        returncode = child.wait()
        if returncode == 0 and row_file.exists():
            return json.loads(row_file.read_text())
    lines = [line for line in tail.splitlines() if line.strip() and "kernel/s" not in line]
    reason = lines[-1].strip() if lines else "no message"
    print(f"{network} failed (exit code {returncode}): {reason}", flush=True)
    from layoutopt.machine import stamp

    return {"network": network, "error": f"exit code {returncode}: {reason[:300]}",
            "threads": int(os.environ["TVM_NUM_THREADS"]), "stamp": stamp()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--networks", default="resnet50_v1", help=f"comma-separated, from {', '.join(NETWORKS)}"
    )
    parser.add_argument("--method", default="auto", help="exact layoutopt method (default auto)")
    parser.add_argument("--cache", default=str(Path.home() / ".cache" / "layoutopt" / "e2e.jsonl"))
    parser.add_argument("--blocks", default=None, help="channel blocks (default 4,8,16,32,64 + C<8)")
    parser.add_argument("--orders", default="oc,rows",
                        help="loop orders of blocked convs, each a choice (default oc,rows: both, for (b'))")
    parser.add_argument("--repeat", type=int, default=10, help="TVM timing repeats")
    parser.add_argument("--repeat-eager", type=int, default=30, help="PyTorch / ONNX Runtime runs")
    parser.add_argument("--time-limit", type=float, default=600.0)
    parser.add_argument("--skip-default", action="store_true", help="skip (a), the unscheduled TVM build")
    parser.add_argument(
        "--models",
        default=str(Path.home() / ".cache" / "layoutopt" / "models"),
        help="where the exported ONNX files are kept (not committed: ~100 MB each)",
    )
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument("--row-file", help=argparse.SUPPRESS)  # internal: one network, its row to this file
    args = parser.parse_args(argv)
    args.blocks = [int(b) for b in args.blocks.split(",")] if args.blocks else None
    Path(args.cache).parent.mkdir(parents=True, exist_ok=True)

    if args.row_file:  # the child process of one network (see below)
        Path(args.row_file).write_text(json.dumps(run_network(args.networks, args), default=str))
        return 0

    rows = []
    partial = Path(args.out) / "e2e.json"
    if partial.exists():  # networks measured by an earlier run stay in the table
        rows = [r for r in json.loads(partial.read_text()) if r["network"] not in args.networks.split(",")]
    for network in args.networks.split(","):
        if network not in NETWORKS:
            parser.error(f"unknown network {network!r}")
        print(f"== {network}", flush=True)
        rows.append(_run_network_in_a_child(network, argv if argv is not None else sys.argv[1:]))
        rows.sort(key=lambda r: list(NETWORKS).index(r["network"]))
        partial.parent.mkdir(parents=True, exist_ok=True)
        partial.write_text(json.dumps(rows, indent=1, default=str))
        write_outputs(rows, Path(args.out))
        print(json.dumps(rows[-1], indent=1, default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

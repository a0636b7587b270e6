"""End-to-end latency: layoutopt-tuned TVM builds against fixed layouts, greedy, PyTorch and ONNX Runtime.

Batch 1, float32, ``TVM_NUM_THREADS`` threads (2 unless set; PyTorch and ONNX Runtime get as many).
Per network, in one child process, side by side:

* (a) TVM's default Relax build for llvm (no schedules), timed once (it is ~100x slower);
* (b8), (b16) TVM with NCHW8c / NCHW16c everywhere (nearest block where it does not divide the
  channels), and (b*) the faster of the two as measured: the best single fixed layout on the host;
* (c) TVM, each op's fastest kernel ignoring transforms (greedy / "history best");
* (d0) TVM, kernels chosen by layoutopt on the kernels' isolated measurements, and (d) after
  in-network calibration (``layoutopt.tvm.evaluate.calibrate``; (d0) appears when the two differ); (b)-(d)
  fuse each conv's elementwise epilogue into it;
* (e) PyTorch eager on the CPU (``OMP_WAIT_POLICY=PASSIVE``; without it OpenMP spinning breaks on
  2-vCPU VMs);
* (f) ONNX Runtime on the CPU (all graph optimisations, idle threads not spinning:
  :func:`benchmarks.runtimes.onnxruntime_options`).

Networks are torchvision architectures with seeded random weights (no download), exported to ONNX
once; TVM imports that ONNX file (``relax.frontend.onnx``) and ONNX Runtime runs it, so (a)-(d) and (f)
run the same graph. ONNX Runtime runs in a subprocess (:class:`benchmarks.runtimes.RuntimeServer`: its
threads idle while TVM runs) on the TVM builds' input, timed in the same interleaved rounds as they are;
PyTorch is timed after, in a subprocess too. Needs torch, torchvision and onnxruntime:
``bash scripts/setup-bench-venv.sh`` creates ``.venv-bench``.

Usage::

    .venv-bench/bin/python -m benchmarks.e2e --networks resnet50_v1 --cache ~/.cache/layoutopt/e2e.jsonl
    .venv-bench/bin/python -m benchmarks.e2e \
        --networks resnet50_v1,vgg19_bn,inception_v3,densenet201,ssd_resnet50_512 --blocks 8,16,32,64

``--target znver3`` builds every TVM variant for another CPU (here AVX2) and runs it on this host; on
an AVX-512 host, ONNX Runtime and PyTorch then run with AVX-512 hidden from CPUID
(:mod:`benchmarks.cpuid_mask`), so that every contender uses AVX2 (``benchmarks/results/avx2/``).

A cost cache holds kernel times for one schedule: after a change to the kernels' schedules
(``layoutopt/tvm/kernels/``), measure into a fresh ``--cache`` file.

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
from collections import Counter
from pathlib import Path

os.environ.setdefault("TVM_NUM_THREADS", "2")
os.environ.setdefault("OMP_NUM_THREADS", os.environ["TVM_NUM_THREADS"])
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

RESULTS = Path(__file__).resolve().parent / "results"

from benchmarks.cpuid_mask import HIDE_AVX512, PRELUDE  # noqa: E402
from benchmarks.networks import MODEL_SNIPPET, NETWORKS, export_onnx, input_shape  # noqa: E402
from benchmarks.ort_layers import markdown as ort_markdown  # noqa: E402
from benchmarks.ort_layers import match_convs, node_times, other_seconds  # noqa: E402
from benchmarks.ort_layers import summary_cells as ort_summary_cells  # noqa: E402
from benchmarks.runtimes import ONNXRUNTIME, start_engines  # noqa: E402

VARIANTS = [
    ("default", "(a) TVM default build"),
    ("nchw8c", "(b8) TVM NCHW8c everywhere"),
    ("nchw16c", "(b16) TVM NCHW16c everywhere"),
    ("best_fixed", "(b*) best fixed layout"),
    ("winograd_fixed", "(w) fixed rule: Winograd + best fixed layout"),
    ("greedy", "(c) TVM per-op fastest (greedy)"),
    ("layoutopt_isolated", "(d0) layoutopt, isolated costs"),
    ("layoutopt", "(d) layoutopt, calibrated"),
    ("torch", "(e) PyTorch eager"),
    ("onnxruntime", "(f) ONNX Runtime"),
]


# ---------------------------------------------------------------------------------------------
# models (torch side, run in a subprocess too so torch never shares this process with TVM timings)

_TORCH_SNIPPET = PRELUDE + MODEL_SNIPPET + r"""
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
    import numpy as np

    from layoutopt.machine import stamp
    from layoutopt.tvm import load_model, resolve_target, tune_and_build
    from layoutopt.tvm.building.baselines import COMPOSITES
    from layoutopt.tvm.evaluate.timing import Ratio, random_inputs, time_builds
    from layoutopt.tvm.kernels.isa import isa_name
    from layoutopt.tvm.tune.report import write_report

    size = input_shape(network)[-1]
    threads = int(os.environ["TVM_NUM_THREADS"])  # the count actually set, for TVM, PyTorch and ORT alike
    row: dict = {"network": network, "threads": threads, "load_before": os.getloadavg()[0],
                 "blocks": ",".join(map(str, args.blocks)) if args.blocks else "4,8,16,32,64",
                 "algorithms": args.algorithms, "orders": args.orders}
    given = args.target
    target = resolve_target(given if given is None or given.lstrip().startswith(("{", "llvm"))
                            else {"kind": "llvm", "mcpu": given})
    row["target"] = f"{target.attrs['mcpu']} ({isa_name(target)})"
    # Compare like with like: without AVX-512 in TVM's target, ONNX Runtime and PyTorch go without too.
    if isa_name(None) == "AVX-512" and isa_name(target) != "AVX-512":
        from benchmarks.cpuid_mask import available, library

        if not available():
            raise SystemExit(f"--target {given}: TVM builds without AVX-512, but this host cannot hide its "
                             f"AVX-512 from ONNX Runtime and PyTorch (no CPUID faulting)")
        os.environ[HIDE_AVX512] = str(library())
        row["others_isa"] = "AVX2 (AVX-512 hidden from CPUID)"
    onnx_path = export_onnx(network, Path(args.models))
    start = time.perf_counter()
    mod = load_model(onnx_path, input_shape=input_shape(network))
    result = tune_and_build(
        mod,
        target=target,
        method=args.method,
        cache=args.cache,
        candidates={"blocks": args.blocks, "orders": args.orders.split(","),
                    "algorithms": args.algorithms.split(",")},
        baselines=("greedy", *(("default",) if not args.skip_default else ())),
        repeat=args.repeat,
        progress=print,
        time_limit=args.time_limit,
    )
    row["tune_seconds"] = time.perf_counter() - start
    row["chosen"] = result.chosen
    row["max_relative_error"] = max(v.max_relative_error or 0.0 for v in result.variants())
    row["solver"] = f"{result.solution.method}/{result.solution.stats.get('engine', result.solution.method)}"
    row["status"] = result.solution.status
    row["timings"] = {k: round(v, 1) for k, v in result.timings.items()}
    for variant in result.variants():
        row[f"{variant.name}_predicted"] = variant.predicted
        row[f"{variant.name}_transforms"] = variant.transforms
        if variant.in_network is not None:  # predicted vs in-network for what the problem models
            row[f"{variant.name}_in_network"] = variant.in_network
    # where each build's time goes, every call timed in the network (layoutopt.tvm.evaluate.profile)
    row["breakdown"] = {variant.name: [dataclasses.asdict(c) for c in variant.breakdown]
                        for variant in result.variants() if variant.breakdown}
    row["layers"] = [dataclasses.asdict(layer) for layer in result.layers]
    # every TVM build and ONNX Runtime side by side, in the same interleaved rounds
    builds = {v.name: v.executable for v in result.variants()
              if v.executable is not None and v.name not in COMPOSITES}  # a composite is one of its members
    inputs = random_inputs(result.module)
    with (start_engines(onnx_path, inputs, {}, threads, runtimes=(ONNXRUNTIME,)) as (engines, failed),
          tempfile.TemporaryDirectory() as tmp):
        if ONNXRUNTIME not in engines:
            raise RuntimeError(failed[ONNXRUNTIME])
        onnxruntime = engines[ONNXRUNTIME]
        samples = time_builds(builds, inputs, args.repeat,
                              others={"onnxruntime": lambda: onnxruntime.time(1)[0]})
        # ORT's own per-node profile beside the tuned build's in-network one, conv layer by conv layer
        ort_nodes = node_times(onnxruntime.profile(5, Path(tmp) / "ort"))
    # the tuned build's conv2d layers with their candidates: which algorithm each runs
    convs = {node: result.graph.choice(node, k) for node, k in result.tuned.assignment.items()
             if result.graph.layout_node(node).op == "relax.nn.conv2d"}
    row["ort_layers"] = match_convs(_conv_layers(result, convs), ort_nodes)
    row["ort_other_nodes"] = other_seconds(ort_nodes)
    for name, values in samples.items():
        row[name] = float(np.median(values))
        row[f"{name}_spread"] = [float(np.percentile(values, 25)), float(np.percentile(values, 75))]
        ratio = Ratio.of(values, samples["layoutopt"])  # paired round by round: the comparison itself
        row[f"{name}_vs_layoutopt"] = [ratio.median, ratio.low, ratio.high]
    for composite in (c for c in COMPOSITES if c in result.baselines):
        member = result.baselines[composite].description.rsplit(": ", 1)[-1]
        row[composite], row[f"{composite}_is"] = row[member], member
        row[f"{composite}_vs_layoutopt"] = row[f"{member}_vs_layoutopt"]
    row["algorithms_chosen"] = dict(Counter(choice.record.algorithm for choice in convs.values()))
    if "default" in result.baselines:
        row["default"] = result.baselines["default"].measured
    report = write_report(result, args.out, name=f"e2e-{network}", model=network)
    with open(report["markdown"], "a") as handle:
        lines = ort_markdown(row["ort_layers"], ort_nodes)
        handle.write("\n## Conv layers against ONNX Runtime\n\n" + "\n".join(lines) + "\n")
    ctor, kwargs, _ = NETWORKS[network]
    torch_info = _subprocess_json(_TORCH_SNIPPET, [ctor, kwargs, size, args.repeat_eager, threads])
    row["torch"] = torch_info["seconds"]
    row["load_after"] = os.getloadavg()[0]
    row["versions"] = {
        "torch": torch_info["torch"],
        "torchvision": torch_info["torchvision"],
        "onnxruntime": onnxruntime.version,
    }
    row["stamp"] = stamp()  # this row's own date and machine: rows of several runs share the table
    return row


def _conv_layers(result, convs: dict) -> list[dict]:
    """The tuned build's conv2d layers (``convs``: node -> its Choice) as
    :func:`benchmarks.ort_layers.match_convs` takes them."""
    return [{"layer": str(layer.node), "workload": result.graph.layout_node(layer.node).workload,
             "choice": layer.choice, "algorithm": convs[layer.node].record.algorithm,
             "in_network": layer.in_network}
            for layer in result.layers if layer.node in convs]


# ---------------------------------------------------------------------------------------------
# outputs


def _ms(value) -> str:
    return "-" if value is None else f"{value * 1e3:.1f}"


def _speedup(row: dict, other: str) -> str:
    """(other) / (d), the median of the per-round ratios with its 95 % interval; a row from before
    paired ratios were kept gives the ratio of the medians."""
    paired = row.get(f"{other}_vs_layoutopt")
    if paired:
        return f"{paired[0]:.2f}x [{paired[1]:.2f}-{paired[2]:.2f}]"
    tuned = row.get("layoutopt")
    return f"{row[other] / tuned:.2f}x" if row.get(other) and tuned else "-"


def _load(row: dict) -> str:
    before, after = row.get("load_before"), row.get("load_after")
    return "-" if before is None or after is None else f"{before:.1f} / {after:.1f}"


def _threads(rows: list[dict]) -> str:
    """The thread count of the rows, for titles: one number, or the distinct ones."""
    counts = sorted({str(row.get("threads", "?")) for row in rows})
    return f"{counts[0]} threads" if len(counts) == 1 else f"{' or '.join(counts)} threads (see each row)"


def _measured(row: dict) -> list[str]:
    """When, where and with what a row was measured: date, machine (and the target TVM built for),
    threads, versions."""
    info = row.get("stamp") or {}
    versions = info.get("versions", "?") + "".join(f", {k} {v}" for k, v in row.get("versions", {}).items())
    machine = info.get("machine", "?") + (f"; TVM built for {row['target']}" if row.get("target") else "")
    if row.get("others_isa"):
        machine += f"; ONNX Runtime and PyTorch on {row['others_isa']}"
    return [info.get("date", "?"), machine, str(row.get("threads", "?")), versions]


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
                "layoutopt_in_network",
                "layoutopt_transforms",
                "best_fixed_is",
                "chosen",
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
                    row.get("layoutopt_in_network"),
                    row.get("layoutopt_transforms"),
                    row.get("best_fixed_is"),
                    row.get("chosen"),
                    row.get("max_relative_error"),
                    row.get("solver"),
                    row.get("status"),
                    *_measured(row),
                ]
            )
    header = ("| network | " + " | ".join(label for _, label in VARIANTS)
              + " | handed back | convs of (d) by algorithm | (d) vs (b*) | (d) vs (w) | (d) vs (d0) "
              "| (d) vs (f) |")
    lines = [
        f"# End-to-end latency, batch 1, float32, {_threads(rows)} (ms, median)",
        "",
        "Produced by `benchmarks/e2e.py`, each network in its own child process; a run keeps the rows of",
        "the networks it did not measure, so rows may come from different runs, days and machines: each",
        "row's date, machine, thread count and versions are in the last table. Within a row, every TVM",
        "build and ONNX Runtime were timed side by side in the same interleaved rounds (PyTorch after",
        "them). Every TVM build's outputs were checked against TVM's default build of the untouched",
        "model (max relative error in e2e.csv). (b*) is the faster of (b8) and (b16), measured; (w),",
        "with Winograd among the choices, the faster of Winograd wherever it applies with NCHW8c or",
        "NCHW16c elsewhere; (d0) is layoutopt on the kernels' isolated measurements, (d) after",
        "in-network calibration; 'handed back' is the build `tune_and_build` returns (the fastest build",
        "timed). Speed-ups are (other) / (d), the median of the per-round ratios with its 95 %",
        "confidence interval: above 1 means layoutopt's build is faster.",
        "",
        header,
        "|---" * (len(VARIANTS) + 7) + "|",
    ]
    for row in rows:
        ratios = [_speedup(row, other) for other in ("best_fixed", "winograd_fixed", "layoutopt_isolated",
                                                     "onnxruntime")]
        algorithms = ", ".join(f"{k} {v}" for k, v in sorted(row.get("algorithms_chosen", {}).items())) or "-"
        lines.append(f"| {row['network']} | " + " | ".join(_ms(row.get(name)) for name, _ in VARIANTS)
                     + f" | {row.get('chosen', '-')} | {algorithms} | " + " | ".join(ratios) + " |")
    lines += [
        "",
        "Predicted vs in network: the layout problem's objective for each build's assignment (the",
        "costs calibrated in the network for (d); the same costs priced for the others) beside the sum",
        "of the build's modelled calls (kernels and transforms) timed inside the running network:",
        "",
        "| network | (d) predicted | (d) in network | (d) in network / predicted | (d0) predicted "
        "| (d0) in network | (b*) predicted | (b*) in network | (b*) is | transforms (d) / (b*) "
        "| solver | tune time (s) | load avg before / after |",
        "|---" * 13 + "|",
    ]
    for row in (r for r in rows if not r.get("error")):  # failures: listed below
        predicted, in_network = row.get("layoutopt_predicted"), row.get("layoutopt_in_network")
        ratio = f"{in_network / predicted:.3f}" if predicted and in_network else "-"
        fixed = row.get("best_fixed_is", "nchw16c")
        lines.append(
            f"| {row['network']} | {_ms(predicted)} | {_ms(in_network)} | {ratio} "
            f"| {_ms(row.get('layoutopt_isolated_predicted'))} "
            f"| {_ms(row.get('layoutopt_isolated_in_network'))} "
            f"| {_ms(row.get(f'{fixed}_predicted'))} | {_ms(row.get(f'{fixed}_in_network'))} | {fixed} "
            f"| {row.get('layoutopt_transforms')} / {row.get(f'{fixed}_transforms')} "
            f"| {row.get('solver')} ({row.get('status')}) | {row.get('tune_seconds', 0):.0f} | {_load(row)} |"
        )
    lines += _breakdown_table(rows)
    compared = [row for row in rows if row.get("ort_layers")]
    if compared:
        lines += ["", "Conv layers against ONNX Runtime: (d)'s conv calls timed in its network, ONNX",
                  "Runtime's conv nodes in its own profile, each the fastest of 5 runs (ms; per layer in",
                  "`e2e-<network>.md`):",
                  "", "| network | matched | (d) convs | ORT convs | ORT / (d) | layers (d) wins "
                  "| where ORT gains most (ms) | ORT's other nodes |", "|---" * 8 + "|"]
        lines += [f"| {row['network']} | " + " | ".join(ort_summary_cells(row["ort_layers"]))
                  + f" | {_ms(row.get('ort_other_nodes'))} |" for row in compared]
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
    from layoutopt.tvm.evaluate.profile import OTHER

    outside = ("pool", "concat", OTHER, "vm builtins")
    lines = [
        "",
        "Where the time goes (ms): each call of the build timed inside the running network (the fastest",
        "of 5 runs), beside the layout problem's prediction for the convs and the transforms; pooling,",
        "concat, the elementwise ops left outside a conv and the VM's builtins are outside the problem.",
        "",
        "| network | build | conv2d predicted | conv2d in network | transforms predicted "
        "| transforms in network | pool | concat | other ops | VM builtins | all calls | measured latency |",
        "|---" * 12 + "|",
    ]
    for row in profiled:
        for build, label in (("layoutopt", "(d)"), ("layoutopt_isolated", "(d0)"), ("nchw8c", "(b8)"),
                             ("nchw16c", "(b16)")):
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
    parser.add_argument("--orders", default="oc",
                        help="loop orders of blocked convs, each a choice (default oc; oc,rows: both)")
    parser.add_argument("--algorithms", default="direct,winograd,gemm",
                        help="conv2d algorithms offered as choices (default all: direct,winograd,gemm; with "
                             "winograd the fixed rule (w) is built too)")
    parser.add_argument("--repeat", type=int, default=30,
                        help="interleaved timing rounds, one run of each build and ONNX Runtime per round")
    parser.add_argument("--repeat-eager", type=int, default=30, help="PyTorch / ONNX Runtime runs")
    parser.add_argument("--time-limit", type=float, default=600.0)
    parser.add_argument("--skip-default", action="store_true", help="skip (a), the unscheduled TVM build")
    parser.add_argument(
        "--models",
        default=str(Path.home() / ".cache" / "layoutopt" / "models"),
        help="where the exported ONNX files are kept (not committed: ~100 MB each)",
    )
    parser.add_argument("--target", default=None,
                        help="llvm CPU to build the TVM variants for, an mcpu name (znver3: AVX2) or a "
                             "target JSON; default this host. A CPU older than the host runs here too; "
                             "for a target without AVX-512 on an AVX-512 host, ONNX Runtime and PyTorch "
                             "run with AVX-512 hidden from CPUID (benchmarks/cpuid_mask.py)")
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

"""Every depthwise layer of torchvision's MobileNetV2 and MobileNetV3-large: before and after, against
ONNX Runtime's own per-node time, and as a share of the ISA's FMA peak.

For each depthwise conv of the networks (exported by torch with random weights, see
``benchmarks/networks.py``), with the epilogue the build fuses into it (``layoutopt.tvm.ops``):

* **after**: this code's kernel (``kernels.depthwise``), for each block of ``--blocks``;
* **before**: the kernel of layoutopt at git revision ``--before`` (extracted with ``git archive`` and
  imported beside this one, in this process), its compute and schedule as that revision's build ran
  them: the padded copy of the input, the same epilogue after the register tile;
* **ONNX Runtime**: the conv node's fastest run in ORT's own profile of the whole network
  (``benchmarks/ort_layers.py``; ORT fuses the activation into the conv node).

Every kernel is timed cold, as the measurer times it (weights and output flushed, the input warm),
in interleaved rounds: each round times every kernel of a layer once and runs ORT's profiled
session, so that interference on a shared machine hits all of them alike. Times are medians over
the rounds (ORT's: the minimum over its profiled runs, as its profile keeps). Writes
``benchmarks/results/depthwise.md``.

Usage::

    python -m benchmarks.depthwise --python /work/wt-bench/.venv-bench/bin/python   # torch exports
"""

from __future__ import annotations

import argparse
import importlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TVM_NUM_THREADS", "2")

import numpy as np

from benchmarks.networks import MODELS, export_torchvision
from benchmarks.ort_layers import match_convs, node_times
from benchmarks.runtimes import onnxruntime_options

RESULTS = Path(__file__).resolve().parent / "results"
REPOSITORY = Path(__file__).resolve().parent.parent
NETWORKS = ("mobilenet_v2", "mobilenet_v3_large")


def import_revision(revision: str, directory: str):
    """layoutopt as it was at git ``revision``, imported as the package ``layoutopt_before``."""
    archive = subprocess.run(["git", "-C", str(REPOSITORY), "archive", revision, "layoutopt"],
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", directory], input=archive, check=True)
    os.rename(Path(directory) / "layoutopt", Path(directory) / "layoutopt_before")
    sys.path.insert(0, directory)
    return importlib.import_module("layoutopt_before.tvm.kernels")


def depthwise_layers(path: Path) -> list[dict]:
    """The depthwise conv layers of an ONNX network: ``{"layer", "workload"}`` (epilogue included)."""
    from layoutopt.tvm import extract_layout_graph, load_model
    from layoutopt.tvm.kernels.workload import is_depthwise

    graph = extract_layout_graph(load_model(path, [1, 3, 224, 224]))
    return [{"layer": node.name, "workload": node.workload} for node in graph.layout_nodes()
            if node.op == "relax.nn.conv2d" and node.workload["groups"] > 1 and is_depthwise(node.workload)]


def flops(workload: dict) -> float:
    from layoutopt.tvm.kernels import conv2d_output_shape

    n, channels, out_h, out_w = conv2d_output_shape(workload)
    return 2.0 * n * channels * out_h * out_w * workload["kernel"][2] * workload["kernel"][3]


def compiled_kernel(workload: dict, candidate: dict, target):
    """The candidate's kernel of this code: ``(module, name, args)``, checked against numpy (1e-4)."""
    import tvm

    from layoutopt.tvm.kernels import build_kernel, check_kernel

    kernel = build_kernel(workload, candidate, target)
    module = tvm.compile(kernel.module, target=target).mod
    args = kernel.device_args(kernel.logical_inputs(), tvm.cpu())
    assert check_kernel(kernel, module, args=args) < 1e-4, (workload, candidate)
    return module, kernel.name, args


def cold_rounds(kernels: dict, rounds: int, between=None) -> dict:
    """Each kernel of ``kernels`` (key -> :func:`compiled_kernel`'s ``(module, name, args)``) timed as
    the measurer times it (cold: weights and output flushed, the median of 10 runs a round), in
    ``rounds`` interleaved rounds, so that interference on a shared machine hits all alike: key -> one
    time per round. ``between(round_index)`` runs after each round (another engine's runs)."""
    import tvm

    from layoutopt.tvm.measure.runner import LocalRunner

    runner = LocalRunner(repeat=1, cold_runs=10)
    samples: dict = {key: [] for key in kernels}
    for round_index in range(rounds):
        for key, (module, name, args) in kernels.items():
            samples[key] += runner.time(module, tvm.cpu(), name, args)
        if between is not None:
            between(round_index)
    return samples


def produced_by(command: str, rounds: int, loads: tuple[float, float]) -> str:
    """The first sentence of a kernel table's preamble: what wrote it, and how it was timed."""
    return (f"Produced by `{command}` ({rounds} interleaved rounds, {os.environ['TVM_NUM_THREADS']} threads; "
            f"load average {loads[0]:.1f} at the start, {loads[1]:.1f} at the end).")


def after_kernel(workload: dict, block: int, target):
    """This code's depthwise kernel in ``NCHW{block}c``: :func:`compiled_kernel`."""
    layout = f"NCHW{block}c"
    return compiled_kernel(workload, {"in": layout, "out": layout, "algorithm": "depthwise"}, target)


def _compiled_and_checked(func, workload: dict, packed: list, unpack, target):
    """``(module, name, args)`` of a PrimFunc computing ``workload``: compiled, run once on ``packed``
    (the packing of seeded logical inputs, see :func:`_logical_inputs`), checked against numpy."""
    import tvm

    from layoutopt.tvm.kernels import FAMILIES

    module = tvm.compile(tvm.IRModule({"kernel": func.with_attr("global_symbol", "kernel")}),
                         target=target).mod
    args = [tvm.runtime.tensor(a) for a in packed]
    args.append(tvm.runtime.tensor(np.zeros([int(d) for d in func.params[-1].shape], "float32")))
    module["kernel"](*args)
    expected = FAMILIES["conv2d", "depthwise"].reference(workload, _logical_inputs(workload))
    got = unpack(args[-1].numpy())
    assert np.abs(got - expected).max() <= 1e-3 * max(1.0, np.abs(expected).max()), workload
    return module, "kernel", args


def _logical_inputs(workload: dict) -> list[np.ndarray]:
    from layoutopt.tvm.kernels import FAMILIES

    rng = np.random.default_rng(0)
    return [rng.uniform(-1, 1, shape).astype("float32")
            for shape in FAMILIES["conv2d", "depthwise"].logical_shapes(workload)]


def padded_copy_kernel(workload: dict, block: int, target):
    """This code's kernel fed by a zero-padded copy of its input, as the old kernel was (a stage of its
    own, parallel and vectorised): what the copy costs, beside :func:`after_kernel`."""
    import tvm

    from layoutopt.tvm.kernels import FAMILIES, epilogue
    from layoutopt.tvm.kernels.depthwise import depthwise_nchwc
    from layoutopt.tvm.kernels.module import schedule_primfunc

    family = FAMILIES["conv2d", "depthwise"]
    candidate = {"in": f"NCHW{block}c", "out": f"NCHW{block}c", "algorithm": "depthwise"}
    top, left, bottom, right = workload["padding"]
    n, channels, height, width = workload["data"]
    inner = {**workload, "data": [n, channels, height + top + bottom, width + left + right],
             "padding": [0, 0, 0, 0]}
    with target:
        data, weight, *operands = family.placeholders(tvm, workload, candidate)
        padded = tvm.topi.nn.pad(data, [0, 0, top, left, 0], [0, 0, bottom, right, 0], name="data_pad")
        out = epilogue.apply_te(tvm, workload.get("epilogue", []),
                                depthwise_nchwc(tvm, padded, weight, inner, candidate), operands)
        func = schedule_primfunc(tvm.te.create_prim_func([data, weight, *operands, out]), target,
                                 strict=True)
    packed = family.pack_inputs(workload, candidate, _logical_inputs(workload))
    return _compiled_and_checked(func, workload, packed,
                                 lambda output: family.unpack_output(workload, candidate, output), target)


def before_kernel(before, workload: dict, block: int, target):
    """The revision's blocked depthwise kernel, with the epilogue its build fused after it."""
    import tvm

    from layoutopt.tvm.kernels import FAMILIES, epilogue

    old = before.FAMILIES["conv2d", "direct"]
    candidate = {"in": f"NCHW{block}c", "out": f"NCHW{block}c"}
    plain = {key: value for key, value in workload.items() if key != "epilogue"}
    with target:
        data, weight = old.placeholders(tvm, plain, candidate)
        operands = FAMILIES["conv2d", "depthwise"].placeholders(tvm, workload, candidate)[2:]
        out = epilogue.apply_te(tvm, workload.get("epilogue", []),
                                old.compute(tvm, [data, weight], plain, candidate), operands)
        func = old.schedule(tvm.te.create_prim_func([data, weight, *operands, out]), target).mod["main"]
    data, weight, *extra = _logical_inputs(workload)
    packed = [before.pack_data(data, candidate["in"]),
              before.pack_conv2d_kernel(weight, candidate, workload["groups"]),
              *(before.pack_data(x, candidate["out"]) for x in extra)]
    return _compiled_and_checked(func, workload, packed,
                                 lambda output: before.unpack_data(output, candidate["out"]), target)


def time_network(network: str, before, args, target, directory: str, peaks: list[float]) -> list[dict]:
    """One row per depthwise layer of ``network``: its kernels before and after, per block, and ORT's
    node, timed in the same interleaved rounds; the FMA peak measured again every 7 rounds (into
    ``peaks``)."""
    import onnxruntime as ort

    from benchmarks.roofline import fma_peak_gflops
    from layoutopt.tvm.kernels import describe_workload, isa_name

    threads = int(os.environ["TVM_NUM_THREADS"])
    path = export_torchvision(network, MODELS / f"{network}.onnx", python=args.python)
    layers = depthwise_layers(path)
    session = ort.InferenceSession(str(path), onnxruntime_options(threads, str(Path(directory) / network)),
                                   providers=["CPUExecutionProvider"])
    image = np.random.default_rng(1).standard_normal((1, 3, 224, 224)).astype("float32")
    feed = {session.get_inputs()[0].name: image}
    kernels = {}
    for index, layer in enumerate(layers):
        for block in (b for b in args.blocks if layer["workload"]["data"][1] % b == 0):
            kernels[index, "before", block] = before_kernel(before, layer["workload"], block, target)
            kernels[index, "after", block] = after_kernel(layer["workload"], block, target)
            if block == args.blocks[0]:
                kernels[index, "padded copy", block] = padded_copy_kernel(layer["workload"], block, target)
        print(f"{network}: built {index + 1}/{len(layers)}", file=sys.stderr, flush=True)

    def between(round_index: int) -> None:  # ORT's profiled runs, and now and then the FMA peak
        if round_index % 7 == 6:
            peaks.append(threads * fma_peak_gflops(1, isa_name(target)))
        for _ in range(5):
            session.run(None, feed)

    samples = cold_rounds(kernels, args.rounds, between)
    records = match_convs([{"layer": layer["layer"], "workload": layer["workload"], "choice": "",
                            "algorithm": "depthwise", "in_network": None} for layer in layers],
                          node_times(session.end_profiling()))
    rows = []
    for index, (layer, record) in enumerate(zip(layers, records, strict=True)):
        # each kernel's best round (a round: the median of 10 cold runs), as ORT's profile keeps each
        # node's fastest run; and the median of the rounds, to show the spread
        times = {(side, block): float(np.min(values))
                 for (i, side, block), values in samples.items() if i == index}
        spread = {(side, block): float(np.median(values))
                  for (i, side, block), values in samples.items() if i == index}
        rows.append({"network": network, "layer": describe_workload(layer["workload"]),
                     "epilogue": layer["workload"].get("epilogue", []), "flops": flops(layer["workload"]),
                     "times": times, "medians": spread, "ort": record["engine"]})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default=sys.executable, help="an interpreter with torch, to export")
    parser.add_argument("--before", default="e285486", help="git revision of the 'before' kernels")
    parser.add_argument("--blocks", default="8,16", type=lambda text: [int(b) for b in text.split(",")])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--networks", default=",".join(NETWORKS))
    parser.add_argument("--out", default=str(RESULTS / "depthwise.md"))
    args = parser.parse_args(argv)
    from benchmarks.roofline import fma_peak_gflops
    from layoutopt.machine import stamp_line
    from layoutopt.tvm import resolve_target
    from layoutopt.tvm.kernels import isa_name

    target = resolve_target(None)
    threads = int(os.environ["TVM_NUM_THREADS"])
    isa = isa_name(target)
    # the FMA peak and the load, before, during and after. The peak is timed on one thread, times the
    # threads (it scales linearly: 99.97 and 198.8 GFLOP/s on this AVX2 host, quiet): one thread more
    # often gets a core to itself on a shared machine, and the best of the measurements is the machine's
    peaks, loads = [threads * fma_peak_gflops(1, isa)], [os.getloadavg()[0]]
    rows = []
    with tempfile.TemporaryDirectory(prefix="layoutopt-depthwise-") as directory:
        before = import_revision(args.before, directory)
        for network in args.networks.split(","):
            rows += time_network(network, before, args, target, directory, peaks)
    peaks.append(threads * fma_peak_gflops(1, isa))
    loads.append(os.getloadavg()[0])
    write_table(rows, Path(args.out), stamp_line(), peaks, loads, isa, threads, args)
    return 0


def _activation(steps: list) -> str:
    """A short name for a layer's epilogue."""
    names = {"relu": "ReLU"}
    text = str(steps)
    if "['divide', 6.0]" in text:
        return "hard-swish"
    if "['minimum', 6.0]" in text:
        return "ReLU6"
    return ", ".join(names.get(step, str(step)) for step in steps if step != "bias") or "none"


def write_table(rows: list[dict], out: Path, stamp: str, peaks: list[float], loads: list[float], isa: str,
                threads: int, args) -> None:
    """The markdown table: per layer, before / after per block, ORT, share of peak, after vs ORT."""
    peak = max(peaks)
    lines = [
        "# Depthwise layers: before and after, against ONNX Runtime",
        "",
        f"*{stamp}*",
        "",
        f"Produced by `python -m benchmarks.depthwise` ({args.rounds} interleaved rounds, {threads} "
        "threads). The machine was shared with other jobs (2 cores, other sessions running): timings are "
        "noisy; compare side by side (each row's kernels and ORT were timed in the same rounds, in one "
        f"process), not across runs. Load average {loads[0]:.1f} at the start, {loads[1]:.1f} at the end. "
        f"{isa} FMA peak on {threads} threads (`benchmarks/roofline.py`; one thread's, times {threads}), "
        f"measured {len(peaks)} times before, between and after the rounds: {min(peaks):.1f} to "
        f"{peak:.1f} GFLOP/s; the share of peak is of the highest, the machine's.",
        "",
        f"Before: layoutopt `{args.before}`'s blocked depthwise kernel (a padded copy of the input, then a "
        "register tile; the epilogue after it), as its build ran it. After: `kernels.depthwise`. "
        f"`+ copy`: the new kernel fed by a padded copy of its input (a stage of its own, parallel and "
        f"vectorised), block {args.blocks[0]}: what the copy the old kernel made costs. Our kernels timed "
        "cold (weights and output flushed, input warm): each its best round (a round: the median of 10 "
        "runs), as ORT's time is the conv node's fastest run in its own profile of the whole network "
        "(activation fused into the node), profiled between our rounds; `median` is the best block's "
        "median over the rounds. Times in µs; `ORT / after` above 1: ours is faster. `% of peak`: the "
        "best block's GFLOP/s (2 FLOPs per multiply-add) over the FMA peak.",
        "",
    ]
    blocks = sorted({block for row in rows for (side, block) in row["times"] if side == "after"})
    first = args.blocks[0]
    header = ["network", "layer", "epilogue", *(f"before {b}c" for b in blocks),
              *(f"after {b}c" for b in blocks), f"{first}c + copy", "best after", "median", "% of peak",
              "ORT", "ORT / after", "after / before"]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    ratios = {}
    for row in rows:
        before = {b: row["times"].get(("before", b)) for b in blocks}
        after = {b: row["times"].get(("after", b)) for b in blocks}
        best_after = min(t for t in after.values() if t)
        best_block = next(b for b in blocks if after[b] == best_after)
        best_before = min(t for t in before.values() if t)
        ort = row["ort"]
        ratio = ort / best_after if ort else None
        ratios.setdefault(row["network"], []).append(ratio)
        copy = row["times"].get(("padded copy", first))
        cells = [row["network"], row["layer"], _activation(row["epilogue"]),
                 *(f"{before[b] * 1e6:.1f}" if before[b] else "-" for b in blocks),
                 *(f"{after[b] * 1e6:.1f}" if after[b] else "-" for b in blocks),
                 f"{copy * 1e6:.1f}" if copy else "-",
                 f"{best_after * 1e6:.1f}", f"{row['medians']['after', best_block] * 1e6:.1f}",
                 f"{100 * row['flops'] / best_after / 1e9 / peak:.1f}%",
                 f"{ort * 1e6:.1f}" if ort else "-", f"{ratio:.2f}x" if ratio else "-",
                 f"{best_after / best_before:.2f}x"]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "| network | layers | median ORT / after | lowest | layers at least as fast as ORT "
              "| ... by the median of the rounds |", "|---|---|---|---|---|---|"]
    for network, values in ratios.items():
        found = [v for v in values if v]
        by_median = [row["ort"] / min(t for (side, _), t in row["medians"].items() if side == "after")
                     for row in rows if row["network"] == network and row["ort"]]
        lines.append(f"| {network} | {len(values)} | {np.median(found):.2f}x | {min(found):.2f}x "
                     f"| {sum(v >= 1 for v in found)} of {len(found)} "
                     f"| {sum(v >= 1 for v in by_median)} of {len(by_median)} |")
    speedups = [min(t for (side, _), t in row["times"].items() if side == "before")
                / min(t for (side, _), t in row["times"].items() if side == "after") for row in rows]
    copies = {stride: [row["times"]["padded copy", first] / row["times"]["after", first] for row in rows
                       if ("padded copy", first) in row["times"] and (" s2 " in row["layer"]) == stride]
              for stride in (False, True)}
    lines += ["", f"The new kernels ran {min(speedups):.2f}-{max(speedups):.2f}x faster than the old ones "
              "(each side's best block)."]
    if copies[False] and copies[True]:
        lines[-1] += (f" Fed by a padded copy of its input, the new {first}c kernel ran "
                      f"{min(copies[False]):.2f}-{max(copies[False]):.2f}x slower on the stride-1 layers and "
                      f"{min(copies[True]):.2f}-{max(copies[True]):.2f}x on the stride-2 ones: what the copy "
                      "costs.")
    lines += ["", "Each kernel is timed alone; ORT's nodes in its running network (the input of a layer "
              "warm from the layer before, as our timing leaves it; the weights and output of ours flushed)."]
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    raise SystemExit(main())

"""Layer by layer against ONNX Runtime and OpenVINO: each engine's own per-node profile beside
layoutopt's in-network profile.

A whole-network ratio says who is faster, not where. ONNX Runtime times every node it runs when its
session profiles (``SessionOptions.enable_profiling``; :func:`node_times` reads the file); OpenVINO
when compiled with ``PERF_COUNT`` (its infer request's ``profiling_info`` with each node's shapes from
its runtime model, which :mod:`benchmarks.runtimes` writes to a file; :func:`openvino_node_times`
reads it). layoutopt times every call of its build inside the running
network (:func:`layoutopt.tvm.profile.profile_calls`, matched to the solution's layers by
:func:`layoutopt.tvm.profile.layer_calls`). Each side keeps each node's fastest run.
:func:`match_convs` pairs each conv2d layer of the tuned build with the engine's node running the same
convolution (same input, weight and output shapes, in program order among equal shapes) and
:func:`markdown` groups the pairs by kernel shape and algorithm, so that a table shows which layers
each side wins.

Both engines fuse nodes (a conv with its activation or residual add: ONNX Runtime's ``FusedConv``) and
run convs in blocked layouts with reorder nodes between; the match uses shapes only, so it holds across
those rewrites.

Usage (the ``real-models`` extra; the library and solution file that ``benchmarks.real_models`` or
``layoutopt export`` wrote)::

    python -m benchmarks.ort_layers MODEL.onnx --library M.so --solution M.solution.json

Example::

    nodes = node_times("onnxruntime_profile.json")
    records = match_convs(layers, nodes)         # layers: dicts with workload, choice, in_network
    print("\\n".join(markdown(records, nodes)))
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict, deque
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from layoutopt.tvm.kernels.workload import conv2d_output_shape

#: ONNX Runtime ops that run a convolution (``FusedConv``: with its activation or residual add); OpenVINO's
#: are read as ``Conv`` (:func:`openvino_node_times`)
CONV_OPS = ("Conv", "FusedConv")
#: OpenVINO's node types of a convolution
OPENVINO_CONV_TYPES = ("Convolution", "GroupConvolution")


def node_times(profile: str | Path) -> list[dict[str, Any]]:
    """Each node of an ONNX Runtime profile with its fastest run, in the order the nodes first ran.

    Returns dicts ``{"node", "op", "inputs", "outputs", "seconds"}``: the shapes are lists of ints,
    one per tensor argument.

    Example::

        node_times(session.end_profiling())[0]
        # {'node': 'Conv_0', 'op': 'Conv', 'inputs': [[1, 3, 224, 224], [64, 3, 7, 7], [64]], ...}
    """
    events = json.loads(Path(profile).read_text())
    nodes: dict[str, dict[str, Any]] = {}
    for event in events:
        name = event.get("name", "")
        if event.get("cat") != "Node" or not name.endswith("_kernel_time"):
            continue
        args = event.get("args", {})
        node = nodes.setdefault(name[: -len("_kernel_time")], {
            "node": name[: -len("_kernel_time")],
            "op": args.get("op_name", ""),
            "inputs": _shapes(args.get("input_type_shape", [])),
            "outputs": _shapes(args.get("output_type_shape", [])),
            "seconds": float("inf"),
        })
        node["seconds"] = min(node["seconds"], float(event["dur"]) * 1e-6)
    return list(nodes.values())


def openvino_node_times(profile: str | Path) -> list[dict[str, Any]]:
    """Each node of an OpenVINO profile (the file :mod:`benchmarks.runtimes` writes: one record
    ``{"node", "type", "exec_type", "seconds", "inputs", "outputs"}`` per executed node, its fastest run
    and its shapes as it runs) in :func:`node_times`'s form. Its conv nodes (``Convolution``,
    ``GroupConvolution``) become ``Conv`` with an OIHW weight shape: a grouped weight
    ``(G, O/G, I/G, KH, KW)`` is ``(O, I/G, KH, KW)``, as ONNX has it.

    Example::

        nodes = openvino_node_times(engines["openvino"].profile(20, "/tmp/ov"))
        [n for n in nodes if n["op"] == "Conv"][0]["inputs"][1]     # the weight's shape: [32, 3, 3, 3]
    """
    nodes = []
    for record in json.loads(Path(profile).read_text()):
        inputs = [list(shape) for shape in record.get("inputs", [])]
        op = record["type"]
        if op in OPENVINO_CONV_TYPES and len(inputs) >= 2:
            op = "Conv"
            if len(inputs[1]) == 5:
                groups, per_group, *rest = inputs[1]
                inputs[1] = [groups * per_group, *rest]
        nodes.append({"node": record["node"], "op": op, "inputs": inputs,
                      "outputs": [list(shape) for shape in record.get("outputs", [])],
                      "seconds": record["seconds"]})
    return nodes


def _shapes(arguments: Iterable[Mapping[str, Any]]) -> list[list[int]]:
    """ORT writes each argument as ``{"float": [dims]}``."""
    return [[int(d) for d in next(iter(argument.values()), [])] for argument in arguments]


def _ort_conv_key(node: Mapping[str, Any]) -> tuple | None:
    if node["op"] not in CONV_OPS or len(node["inputs"]) < 2 or not node["outputs"]:
        return None
    data, weight, output = node["inputs"][0], node["inputs"][1], node["outputs"][0]
    if len(data) != 4 or len(weight) != 4 or len(output) != 4:
        return None
    return tuple(data[1:]), tuple(weight), tuple(output[1:])


def conv_key(workload: Mapping[str, Any]) -> tuple:
    """What identifies a conv2d on both sides: input (C, H, W), OIHW weight, output (O, OH, OW)."""
    _, out_channels, out_h, out_w = conv2d_output_shape(workload)
    return tuple(workload["data"][1:]), tuple(workload["kernel"]), (out_channels, out_h, out_w)


def match_convs(layers: Sequence[Mapping[str, Any]],
                nodes: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Pair each conv layer with the engine's node of the same shapes (the n-th layer of a shape with
    the n-th node of it: both run in program order).

    ``layers``: dicts with ``"workload"`` (the conv2d workload dict), ``"layer"``, ``"choice"`` (its
    label), ``"algorithm"`` (its candidate's) and ``"in_network"`` (seconds). Returns one record per
    layer: those keys but the workload, ``"group"`` (see :func:`group_of`), ``"engine"`` (the node's
    seconds, None when no node matched) and ``"engine_op"``.

    Example::

        match_convs([{"layer": "lv", "workload": wl, "choice": "NCHW16c->NCHW16c", "algorithm": "direct",
                      "in_network": 4e-4}], node_times(profile))[0]["engine"]      # 3.5e-4
    """
    queues: dict[tuple, deque] = defaultdict(deque)
    for node in nodes:
        key = _ort_conv_key(node)
        if key is not None:
            queues[key].append(node)
    records = []
    for layer in layers:
        workload = layer["workload"]
        queue = queues.get(conv_key(workload))
        node = queue.popleft() if queue else None
        algorithm = layer["algorithm"]
        records.append({
            "layer": layer["layer"], "choice": layer["choice"], "algorithm": algorithm,
            "group": group_of(workload, algorithm), "in_network": layer["in_network"],
            "engine": None if node is None else node["seconds"],
            "engine_op": None if node is None else node["op"],
        })
    return records


def other_seconds(nodes: Sequence[Mapping[str, Any]]) -> float:
    """The engine's time outside its convs: reorders, pooling, gemm, elementwise nodes."""
    return sum(n["seconds"] for n in nodes if n["op"] not in CONV_OPS)


def group_of(workload: Mapping[str, Any], algorithm: str) -> str:
    """The kernel shape and algorithm a layer is summed under: ``"3x3 s2 direct"``, ``"1x1 gemm"``."""
    kh, kw = workload["kernel"][2:]
    stride = max(workload["strides"])
    groups = workload.get("groups", 1)
    kind = f"{kh}x{kw}" + (f" s{stride}" if stride > 1 else "") + (" grouped" if groups > 1 else "")
    return f"{kind} {algorithm}"


def markdown(records: Sequence[Mapping[str, Any]], nodes: Sequence[Mapping[str, Any]],
             engine: str = "ONNX Runtime") -> list[str]:
    """Markdown lines: the totals by group, then every matched layer (ms; ratio engine / layoutopt,
    above 1 where layoutopt's layer is faster), then the engine's time outside its convs."""
    matched = [r for r in records if r["engine"] is not None and r["in_network"] is not None]
    if not matched:
        return [f"No conv layer matched a node of {engine}'s profile."]
    groups: dict[str, list] = defaultdict(list)
    for record in matched:
        groups[record["group"]].append(record)
    ours, theirs = (sum(r[k] for r in matched) for k in ("in_network", "engine"))
    lines = [f"{len(matched)} of {len(records)} conv layers matched an {engine} node; each side's "
             "time is the node's fastest run inside its own running network (ms).", "",
             f"| kernel, algorithm (layoutopt) | layers | layoutopt | {engine} | {engine} / layoutopt "
             "| layers faster in layoutopt |", "|---|---|---|---|---|---|"]
    for group, members in sorted(groups.items(), key=lambda item: -sum(r["in_network"] for r in item[1])):
        a, b = (sum(r[k] for r in members) for k in ("in_network", "engine"))
        wins = sum(r["in_network"] < r["engine"] for r in members)
        lines.append(f"| {group} | {len(members)} | {a * 1e3:.3f} | {b * 1e3:.3f} | {b / a:.2f}x "
                     f"| {wins} of {len(members)} |")
    wins = sum(r["in_network"] < r["engine"] for r in matched)
    lines.append(f"| all convs | {len(matched)} | {ours * 1e3:.3f} | {theirs * 1e3:.3f} "
                 f"| {theirs / ours:.2f}x | {wins} of {len(matched)} |")
    lines += ["", f"{engine}'s other nodes (reorders, pooling, gemm, elementwise): "
              f"{other_seconds(nodes) * 1e3:.3f} ms.",
              "", f"| layer | layoutopt choice | layoutopt | {engine} op | {engine} | {engine} / layoutopt |",
              "|---|---|---|---|---|---|"]
    lines += [f"| {r['layer']} | {r['choice']} | {r['in_network'] * 1e3:.3f} | {r['engine_op']} "
              f"| {r['engine'] * 1e3:.3f} | {r['engine'] / r['in_network']:.2f}x |"
              for r in matched]
    return lines


def summary_cells(records: Sequence[Mapping[str, Any]]) -> list[str]:
    """One network's cells for a table across networks: matched layers, both conv totals (ms), their
    ratio, the layers layoutopt wins, and the group where the engine gains most (ms)."""
    matched = [r for r in records if r["engine"] is not None and r["in_network"] is not None]
    if not matched:
        return [f"0 of {len(records)}", "-", "-", "-", "-", "-"]
    ours, theirs = (sum(r[k] for r in matched) for k in ("in_network", "engine"))
    lost: dict[str, float] = defaultdict(float)
    for record in matched:
        lost[record["group"]] += record["in_network"] - record["engine"]
    group, most = max(lost.items(), key=lambda item: item[1])
    wins = sum(r["in_network"] < r["engine"] for r in matched)
    return [f"{len(matched)} of {len(records)}", f"{ours * 1e3:.2f}", f"{theirs * 1e3:.2f}",
            f"{theirs / ours:.2f}x", f"{wins}", f"{group} (+{most * 1e3:.2f})" if most > 0 else "none"]


def build_layers(library: str | Path, solution: str | Path, inputs: Sequence[Any],
                 runs: int = 20) -> list[dict[str, Any]]:
    """The conv2d layers of an exported build (``library``, the ``solution`` file it was built from),
    each with its in-network time in the running library (:func:`layoutopt.tvm.profile.profile_calls`,
    the fastest of ``runs`` runs), as :func:`match_convs` takes them."""
    import tvm

    from layoutopt.tvm import load_solution
    from layoutopt.tvm.profile import KernelShapes, layer_calls, profile_calls

    record = load_solution(solution)
    targets = [layer for layer in record.layers if layer.kind == "target"]
    calls = profile_calls(tvm.runtime.load_module(str(library)), inputs, repeat=runs)
    times = layer_calls(calls, [(layer.layer, layer.workload, layer.candidate) for layer in targets],
                        KernelShapes(record.target))
    return [{"layer": layer.layer, "workload": layer.workload, "choice": layer.label,
             "algorithm": layer.candidate.get("algorithm", "direct"), "in_network": times.get(layer.layer)}
            for layer in targets if layer.workload["op"] == "conv2d"]


def fastest_nodes(profiles: Sequence[Sequence[Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """Several profiles of the same network merged: each node (by name) with its fastest run, in the
    order of the first profile. Example: ``fastest_nodes([node_times(a), node_times(b)])``."""
    merged: dict[str, dict[str, Any]] = {}
    for nodes in profiles:
        for node in nodes:
            if node["node"] not in merged or node["seconds"] < merged[node["node"]]["seconds"]:
                merged[node["node"]] = {**merged.get(node["node"], node), "seconds": node["seconds"]}
    return list(merged.values())


def main(argv: Sequence[str] | None = None) -> int:
    import argparse
    import os
    import tempfile

    import numpy as np

    from benchmarks.runtimes import ONNXRUNTIME, OPENVINO, _inputs, start_engines
    from layoutopt.machine import stamp_line

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("onnx", type=Path, help="the original model, run by ONNX Runtime and OpenVINO")
    parser.add_argument("--library", type=Path, required=True, help="the exported build (.so)")
    parser.add_argument("--solution", type=Path, required=True, help="the solution file it was built from")
    parser.add_argument("--input-shape", default=None,
                        help="comma-separated shape of the (single) input; default: the model's, if static")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3,
                        help="interleaved rounds: each side profiled in turn, each node's fastest kept")
    parser.add_argument("--runs", type=int, default=10, help="profiled runs of each side per round")
    parser.add_argument("--out", type=Path, default=None, help="append the tables to this markdown file")
    args = parser.parse_args(argv)
    for option, value in (("--rounds", args.rounds), ("--runs", args.runs), ("--threads", args.threads)):
        if value < 1:
            parser.error(f"{option} must be at least 1, not {value}")
    for what, path in (("model", args.onnx), ("--library", args.library), ("--solution", args.solution)):
        if not path.is_file():
            parser.error(f"{what}: no file {str(path)!r}")
    names, static = _inputs(args.onnx)
    shape = [int(d) for d in args.input_shape.split(",")] if args.input_shape else static
    if len(names) != 1 or shape is None:
        parser.error(f"{args.onnx}: give --input-shape for its single input (inputs: {', '.join(names)})")
    os.environ.setdefault("TVM_NUM_THREADS", str(args.threads))
    inputs = [np.random.default_rng(1).standard_normal(shape).astype("float32")]
    readers = {ONNXRUNTIME: ("ONNX Runtime", node_times), OPENVINO: ("OpenVINO", openvino_node_times)}
    ours: list[list[dict[str, Any]]] = []
    theirs: dict[str, list[list[dict[str, Any]]]] = {engine: [] for engine in readers}
    load = os.getloadavg()[0]
    # rounds interleave the sides: a shared host's slow spells then fall on each, and each node keeps
    # its fastest run over the rounds
    with (start_engines(args.onnx, inputs, {}, args.threads, tuple(readers)) as (engines, failed),
          tempfile.TemporaryDirectory() as tmp):
        for name, reason in failed.items():
            print(f"{name} did not start: {reason}", file=sys.stderr)
        for index in range(args.rounds):
            layers = build_layers(args.library, args.solution, inputs, args.runs)
            ours.append([{"node": layer["layer"], "seconds": layer["in_network"]} for layer in layers
                         if layer["in_network"] is not None])
            for engine in engines:
                theirs[engine].append(readers[engine][1](engines[engine].profile(
                    args.runs, Path(tmp) / f"{engine}{index}")))
    fastest = {node["node"]: node["seconds"] for node in fastest_nodes(ours)}
    layers = [{**layer, "in_network": fastest.get(layer["layer"])} for layer in layers]
    lines = [f"## {args.onnx.stem}: conv layers against ONNX Runtime and OpenVINO", "",
             f"*{stamp_line()}; load average {load:.1f} before, {os.getloadavg()[0]:.1f} after*", "",
             f"`python -m benchmarks.ort_layers {args.onnx.name} --library {args.library.name} --solution "
             f"{args.solution.name}`: {args.rounds} interleaved rounds of {args.runs} profiled runs of each "
             f"side, each in its own process, {args.threads} threads.", ""]
    for engine, profiles in theirs.items():
        if profiles:
            label, nodes = readers[engine][0], fastest_nodes(profiles)
            lines += [f"### {label}", "", *markdown(match_convs(layers, nodes), nodes, label), ""]
    text = "\n".join(lines) + "\n"
    if args.out:
        with open(args.out, "a") as handle:
            handle.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Layer by layer against ONNX Runtime: its own per-node profile beside layoutopt's in-network profile.

A whole-network ratio says who is faster, not where. ONNX Runtime times every node it runs when
its session profiles (``SessionOptions.enable_profiling``); layoutopt times every call of its build
inside the running network (:func:`layoutopt.tvm.profile.profile_builds`). Both keep each node's
fastest run. This module reads ONNX Runtime's profile file (:func:`node_times`), pairs each conv2d
layer of the tuned build with the ORT node running the same convolution (:func:`match_convs`: same
input, weight and output shapes, in program order among equal shapes) and groups the pairs by
kernel shape and algorithm (:func:`markdown`), so that a table shows which layers each side wins.

ONNX Runtime fuses nodes (a conv with its relu, or with the residual add: ``FusedConv``) and, on
x86, runs convs in its own blocked layout (``NCHWc``) with reorder nodes between; the match uses
shapes only, so it holds across those rewrites. Needs nothing but the profile file: no onnxruntime
import here.

Example::

    nodes = node_times("onnxruntime_profile.json")
    records = match_convs(layers, nodes)         # layers: dicts with workload, choice, in_network
    print("\\n".join(markdown(records, nodes)))
"""

from __future__ import annotations

import json
from collections import defaultdict, deque
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from layoutopt.tvm.kernels.workload import conv2d_output_shape

#: ONNX Runtime ops that run a convolution (``FusedConv``: with its activation or residual add)
CONV_OPS = ("Conv", "FusedConv")


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
    """Pair each conv layer with ONNX Runtime's node of the same shapes (the n-th layer of a shape with
    the n-th node of it: both run in program order).

    ``layers``: dicts with ``"workload"`` (the conv2d workload dict), ``"layer"``, ``"choice"`` (its
    label), ``"algorithm"`` (its candidate's) and ``"in_network"`` (seconds). Returns one record per
    layer: those keys but the workload, ``"group"`` (see :func:`group_of`), ``"onnxruntime"``
    (seconds, None when no node matched) and ``"ort_op"``.

    Example::

        match_convs([{"layer": "lv", "workload": wl, "choice": "NCHW16c->NCHW16c", "algorithm": "direct",
                      "in_network": 4e-4}], node_times(profile))[0]["onnxruntime"]      # 3.5e-4
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
            "onnxruntime": None if node is None else node["seconds"],
            "ort_op": None if node is None else node["op"],
        })
    return records


def other_seconds(nodes: Sequence[Mapping[str, Any]]) -> float:
    """ONNX Runtime's time outside its convs: reorders, pooling, gemm, elementwise nodes."""
    return sum(n["seconds"] for n in nodes if n["op"] not in CONV_OPS)


def group_of(workload: Mapping[str, Any], algorithm: str) -> str:
    """The kernel shape and algorithm a layer is summed under: ``"3x3 s2 direct"``, ``"1x1 gemm"``."""
    kh, kw = workload["kernel"][2:]
    stride = max(workload["strides"])
    groups = workload.get("groups", 1)
    kind = f"{kh}x{kw}" + (f" s{stride}" if stride > 1 else "") + (" grouped" if groups > 1 else "")
    return f"{kind} {algorithm}"


def markdown(records: Sequence[Mapping[str, Any]], nodes: Sequence[Mapping[str, Any]]) -> list[str]:
    """Markdown lines: the totals by group, then every matched layer (ms; ratio ORT / layoutopt,
    above 1 where layoutopt's layer is faster), then ORT's time outside its convs."""
    matched = [r for r in records if r["onnxruntime"] is not None and r["in_network"] is not None]
    if not matched:
        return ["No conv layer matched a node of ONNX Runtime's profile."]
    groups: dict[str, list] = defaultdict(list)
    for record in matched:
        groups[record["group"]].append(record)
    ours, theirs = (sum(r[k] for r in matched) for k in ("in_network", "onnxruntime"))
    lines = [f"{len(matched)} of {len(records)} conv layers matched an ONNX Runtime node; each side's "
             "time is the node's fastest run inside its own running network (ms).", "",
             "| kernel, algorithm (layoutopt) | layers | layoutopt | ONNX Runtime | ORT / layoutopt "
             "| layers faster in layoutopt |", "|---|---|---|---|---|---|"]
    for group, members in sorted(groups.items(), key=lambda item: -sum(r["in_network"] for r in item[1])):
        a, b = (sum(r[k] for r in members) for k in ("in_network", "onnxruntime"))
        wins = sum(r["in_network"] < r["onnxruntime"] for r in members)
        lines.append(f"| {group} | {len(members)} | {a * 1e3:.3f} | {b * 1e3:.3f} | {b / a:.2f}x "
                     f"| {wins} of {len(members)} |")
    wins = sum(r["in_network"] < r["onnxruntime"] for r in matched)
    lines.append(f"| all convs | {len(matched)} | {ours * 1e3:.3f} | {theirs * 1e3:.3f} "
                 f"| {theirs / ours:.2f}x | {wins} of {len(matched)} |")
    lines += ["", "ONNX Runtime's other nodes (reorders, pooling, gemm, elementwise): "
              f"{other_seconds(nodes) * 1e3:.3f} ms.",
              "", "| layer | layoutopt choice | layoutopt | ORT op | ONNX Runtime | ORT / layoutopt |",
              "|---|---|---|---|---|---|"]
    lines += [f"| {r['layer']} | {r['choice']} | {r['in_network'] * 1e3:.3f} | {r['ort_op']} "
              f"| {r['onnxruntime'] * 1e3:.3f} | {r['onnxruntime'] / r['in_network']:.2f}x |"
              for r in matched]
    return lines


def summary_cells(records: Sequence[Mapping[str, Any]]) -> list[str]:
    """One network's cells for a table across networks: matched layers, both conv totals (ms), their
    ratio, the layers layoutopt wins, and the group where ORT gains most (ms)."""
    matched = [r for r in records if r["onnxruntime"] is not None and r["in_network"] is not None]
    if not matched:
        return [f"0 of {len(records)}", "-", "-", "-", "-", "-"]
    ours, theirs = (sum(r[k] for r in matched) for k in ("in_network", "onnxruntime"))
    lost: dict[str, float] = defaultdict(float)
    for record in matched:
        lost[record["group"]] += record["in_network"] - record["onnxruntime"]
    group, most = max(lost.items(), key=lambda item: item[1])
    wins = sum(r["in_network"] < r["onnxruntime"] for r in matched)
    return [f"{len(matched)} of {len(records)}", f"{ours * 1e3:.2f}", f"{theirs * 1e3:.2f}",
            f"{theirs / ours:.2f}x", f"{wins}", f"{group} (+{most * 1e3:.2f})" if most > 0 else "none"]

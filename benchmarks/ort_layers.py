"""Layer by layer against ONNX Runtime and OpenVINO: each engine's own per-node profile beside
layoutopt's in-network profile.

A whole-network ratio says who is faster, not where. ONNX Runtime times every node it runs when its
session profiles (``SessionOptions.enable_profiling``; :func:`node_times` reads the file); OpenVINO
when compiled with ``PERF_COUNT`` (its infer request's ``profiling_info`` with each node's shapes from
its runtime model, which :mod:`benchmarks.runtimes` writes to a file; :func:`openvino_node_times`
reads it). layoutopt times every call of its build inside the running
network (:func:`layoutopt.tvm.evaluate.profile.profile_calls`, matched to the solution's layers by
:func:`layoutopt.tvm.evaluate.profile.layer_calls`). The command line takes each node's median over the runs
of
a round, on both sides: a TVM build's fastest runs follow the host's fast spells (on a shared 2-core
host a network's runs take 4.7 ms in one and 9 ms in the next), OpenVINO's per-node times do not (the
sum of its nodes' fastest runs stayed at 6.3 ms while its fastest runs took 4.8), so fastest against
fastest flatters the TVM build. The rounds interleave the sides, and each layer's ratio is paired
round by round (:func:`paired_rounds`).
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
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import append_section
from layoutopt.tvm.evaluate.timing import Ratio
from layoutopt.tvm.kernels.workload import conv2d_output_shape

#: ONNX Runtime ops that run a convolution (``FusedConv``: with its activation or residual add); OpenVINO's
#: are read as ``Conv`` (:func:`openvino_node_times`)
CONV_OPS = ("Conv", "FusedConv")
#: OpenVINO's node types of a convolution
OPENVINO_CONV_TYPES = ("Convolution", "GroupConvolution")
#: what sums a node's runs into one time: ``min`` (its fastest) or ``statistics.median``
Statistic = Callable[[Sequence[float]], float]


def node_times(profile: str | Path, statistic: Statistic = min) -> list[dict[str, Any]]:
    """Each node of an ONNX Runtime profile with its fastest run (or ``statistic`` of its runs), in the
    order the nodes first ran.

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
            "runs": [],
        })
        node["runs"].append(float(event["dur"]) * 1e-6)
    return [{**_without_runs(node), "seconds": float(statistic(node["runs"]))} for node in nodes.values()]


def _without_runs(node: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in node.items() if key != "runs"}


def openvino_node_times(profile: str | Path, statistic: Statistic = min) -> list[dict[str, Any]]:
    """Each node of an OpenVINO profile (the file :mod:`benchmarks.runtimes` writes: one record
    ``{"node", "type", "exec_type", "runs", "inputs", "outputs"}`` per executed node: every run's time
    and its shapes as it runs; files written before 2026-12-02 hold its fastest run as ``"seconds"``)
    in :func:`node_times`'s form, with ``statistic`` of its runs. Its conv nodes (``Convolution``,
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
                      "seconds": float(statistic(record.get("runs") or [record["seconds"]]))})
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


def paired_rounds(rounds: Sequence[Sequence[Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """The :func:`match_convs` records of several interleaved rounds (the same layers, in the same order,
    each round), one per layer: each side's time its median over the rounds where both sides ran it,
    with the per-round times kept (``"ours_rounds"``, ``"engine_rounds"``) so that :func:`markdown`
    pairs them round by round.

    A layer's fastest run over all rounds may come from a fast spell of the host on one side and a slow
    one on the other; its ratio within each round compares the two sides in the same spell. A round
    where a side did not run the layer counts as None in its lists.

    Example::

        records = paired_rounds([match_convs(layers, nodes) for layers, nodes in rounds])
        records[0]["engine_rounds"]       # the engine's time of the first layer in each round
    """
    combined = []
    for per_round in zip(*rounds, strict=True):
        # None where a side did not run the layer that round: the lists stay aligned with the rounds
        both = [r["in_network"] is not None and r["engine"] is not None for r in per_round]
        ours = [r["in_network"] if ok else None for r, ok in zip(per_round, both, strict=True)]
        theirs = [r["engine"] if ok else None for r, ok in zip(per_round, both, strict=True)]
        combined.append({**per_round[0], "ours_rounds": ours, "engine_rounds": theirs,
                         "in_network": _median([t for t in ours if t is not None]),
                         "engine": _median([t for t in theirs if t is not None])})
    return combined


def _median(values: Sequence[float]) -> float | None:
    return float(np.median(values)) if values else None


def _ratio_text(records: Sequence[Mapping[str, Any]]) -> str:
    """The engine's time over ours for ``records`` together: paired round by round (the median of the
    per-round ratios of the sums, with its 95 % interval) when they carry their rounds, else the ratio
    of the sums."""
    if all(r.get("ours_rounds") for r in records):
        # the rounds where every one of the records ran on both sides
        rounds = [i for i in range(min(len(r["ours_rounds"]) for r in records))
                  if all(r["ours_rounds"][i] is not None for r in records)]
        if rounds:
            ratio = Ratio.of([sum(r["engine_rounds"][i] for r in records) for i in rounds],
                             [sum(r["ours_rounds"][i] for r in records) for i in rounds])
            return f"{ratio.median:.2f}x [{ratio.low:.2f}-{ratio.high:.2f}]"
    return f"{sum(r['engine'] for r in records) / sum(r['in_network'] for r in records):.2f}x"


def markdown(records: Sequence[Mapping[str, Any]], nodes: Sequence[Mapping[str, Any]] | None,
             engine: str = "ONNX Runtime") -> list[str]:
    """Markdown lines: the totals by group, then every matched layer (ms; ratio engine / layoutopt,
    above 1 where layoutopt's layer is faster; paired round by round, with its 95 % interval, for
    records from :func:`paired_rounds`), then the engine's time outside its convs in ``nodes``
    (``None``: the caller reports it, paired with ours, as :func:`main` does)."""
    matched = [r for r in records if r["engine"] is not None and r["in_network"] is not None]
    if not matched:
        return [f"No conv layer matched a node of {engine}'s profile."]
    groups: dict[str, list] = defaultdict(list)
    for record in matched:
        groups[record["group"]].append(record)
    ours, theirs = (sum(r[k] for r in matched) for k in ("in_network", "engine"))
    each = ("each side's time is the median over the rounds of the node's time in the round, inside "
            "its own running network (ms); the ratio is paired round by round"
            if all(r.get("ours_rounds") for r in matched) else
            "each side's time is the node's fastest run inside its own running network (ms)")
    lines = [f"{len(matched)} of {len(records)} conv layers matched an {engine} node; {each}.", "",
             f"| kernel, algorithm (layoutopt) | layers | layoutopt | {engine} | {engine} / layoutopt "
             "| layers faster in layoutopt |", "|---|---|---|---|---|---|"]
    for group, members in sorted(groups.items(), key=lambda item: -sum(r["in_network"] for r in item[1])):
        a, b = (sum(r[k] for r in members) for k in ("in_network", "engine"))
        wins = sum(r["in_network"] < r["engine"] for r in members)
        lines.append(f"| {group} | {len(members)} | {a * 1e3:.3f} | {b * 1e3:.3f} | {_ratio_text(members)} "
                     f"| {wins} of {len(members)} |")
    wins = sum(r["in_network"] < r["engine"] for r in matched)
    lines.append(f"| all convs | {len(matched)} | {ours * 1e3:.3f} | {theirs * 1e3:.3f} "
                 f"| {_ratio_text(matched)} | {wins} of {len(matched)} |")
    if nodes is not None:
        lines += ["", f"{engine}'s other nodes (reorders, pooling, gemm, elementwise): "
                  f"{other_seconds(nodes) * 1e3:.3f} ms."]
    lines += ["", f"| layer | layoutopt choice | layoutopt | {engine} op | {engine} | {engine} / layoutopt |",
              "|---|---|---|---|---|---|"]
    lines += [f"| {r['layer']} | {r['choice']} | {r['in_network'] * 1e3:.3f} | {r['engine_op']} "
              f"| {r['engine'] * 1e3:.3f} | {_ratio_text([r])} |"
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
                 runs: int = 20, statistic: Statistic = min) -> tuple[list[dict[str, Any]], float]:
    """The conv2d layers of an exported build (``library``, the ``solution`` file it was built from),
    each with its in-network time in the running library
    (:func:`layoutopt.tvm.evaluate.profile.profile_calls`,
    the fastest of ``runs`` runs, or ``statistic`` of them), as :func:`match_convs` takes them; and the
    seconds of the build's other calls (transforms, pooling, dense, elementwise) together. The VM's
    builtins are left out: in the profile they take about the timer's own cost (a whole run takes
    0.98 of its kernels' times without them, MobileNetV2's build)."""
    import tvm

    from layoutopt.tvm import load_solution
    from layoutopt.tvm.evaluate.profile import KernelShapes, call_category, layer_calls, profile_calls

    record = load_solution(solution)
    targets = [layer for layer in record.layers if layer.kind == "target"]
    calls = profile_calls(tvm.runtime.load_module(str(library)), inputs, repeat=runs, statistic=statistic)
    times = layer_calls(calls, [(layer.layer, layer.workload, layer.candidate) for layer in targets],
                        KernelShapes(record.target))
    layers = [{"layer": layer.layer, "workload": layer.workload, "choice": layer.label,
               "algorithm": layer.candidate.get("algorithm", "direct"), "in_network": times.get(layer.layer)}
              for layer in targets if layer.workload["op"] == "conv2d"]
    convs = sum(layer["in_network"] or 0.0 for layer in layers)
    return layers, sum(call.seconds for call in calls if call_category(call.symbol) != "vm builtins") - convs


def main(argv: Sequence[str] | None = None) -> int:
    import argparse
    import os
    import statistics
    import tempfile

    import numpy as np

    from benchmarks.runtimes import ONNXRUNTIME, OPENVINO, _inputs, start_engines, wait_until_idle
    from layoutopt.machine import stamp_line
    from layoutopt.tvm.evaluate.timing import rotated

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("onnx", type=Path, help="the original model, run by ONNX Runtime and OpenVINO")
    parser.add_argument("--library", type=Path, required=True, help="the exported build (.so)")
    parser.add_argument("--solution", type=Path, required=True, help="the solution file it was built from")
    parser.add_argument("--input-shape", default=None,
                        help="comma-separated shape of the (single) input; default: the model's, if static")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=9,
                        help="interleaved rounds: each side profiled in turn, ratios paired by round")
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
    ours = "layoutopt"
    records: dict[str, list[list[dict[str, Any]]]] = {engine: [] for engine in readers}
    others: dict[str, list[tuple[float, float]]] = {engine: [] for engine in readers}
    load = os.getloadavg()[0]
    # interleaved rounds, the order rotated: the host's slow spells last seconds, so each layer's ratio
    # is taken within a round, where both sides ran in the same spell. After each side's turn its process
    # must go idle (TVM's thread pool spins for ~250 ms), so that no side slows the next one's.
    with (start_engines(args.onnx, inputs, {}, args.threads, tuple(readers)) as (engines, failed),
          tempfile.TemporaryDirectory() as tmp):
        for name, reason in failed.items():
            print(f"{name} did not start: {reason}", file=sys.stderr)
        for index in range(args.rounds):
            nodes: dict[str, list[dict[str, Any]]] = {}
            for side in rotated([ours, *engines], index):
                if side == ours:
                    layers, ours_other = build_layers(args.library, args.solution, inputs, args.runs,
                                                      statistics.median)
                    wait_until_idle(os.getpid())
                else:
                    profile = engines[side].profile(args.runs, Path(tmp) / f"{side}{index}")
                    nodes[side] = readers[side][1](profile, statistics.median)
                    wait_until_idle(engines[side].pid)
            for engine, engine_nodes in nodes.items():
                records[engine].append(match_convs(layers, engine_nodes))
                others[engine].append((ours_other, other_seconds(engine_nodes)))
            print(f"round {index + 1} of {args.rounds}", file=sys.stderr)
    lines = [f"## {args.onnx.stem}: conv layers against ONNX Runtime and OpenVINO", "",
             f"*{stamp_line()}; load average {load:.1f} before, {os.getloadavg()[0]:.1f} after*", "",
             f"`python -m benchmarks.ort_layers {args.onnx.name} --library {args.library.name} --solution "
             f"{args.solution.name}`: {args.rounds} interleaved rounds of {args.runs} profiled runs of each "
             f"side (each node's median over a round's runs), each engine in its own process, "
             f"{args.threads} threads.", ""]
    for engine, rounds in records.items():
        if rounds:
            label = readers[engine][0]
            ours_other, theirs_other = zip(*others[engine], strict=True)
            other = Ratio.of(theirs_other, ours_other)
            table = markdown(paired_rounds(rounds), None, label)
            lines += [f"### {label}", "", *table,
                      "", "Outside the convs (medians over the rounds): layoutopt's other calls (VM "
                      f"builtins apart) "
                      f"{np.median(ours_other) * 1e3:.3f} ms, {label}'s other nodes "
                      f"{np.median(theirs_other) * 1e3:.3f} ms; {label} / layoutopt {other.median:.2f}x "
                      f"[{other.low:.2f}-{other.high:.2f}].", ""]
    append_section(lines, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

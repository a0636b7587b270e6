"""What the operator rules make of a set of small models, as plain data: the layout graph's nodes (kind,
op, workload, choices), the following ops, the edges, each kernel's cost-cache key, and digests of the
rewrite and legalization of fixed assignments. ``test_op_rules.py`` compares it with
``data/rule_snapshot.json``, written by the code before the rules moved into ``layoutopt.tvm.ops``: a cost
cache written by that code must still hit (the workloads byte for byte), and the rewrite emit the same
program.

Run ``python tests/tvm/rule_snapshot.py`` (from the repository) to write the snapshot again; only when the
workloads or the rewrite are meant to change.
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

DATA = Path(__file__).parent / "data" / "rule_snapshot.json"

CONV = {"op": "conv", "out": 8, "kernel": [3, 3], "stride": [1, 1], "dilation": [1, 1], "pads": [1, 1, 1, 1],
        "groups": 1, "bias": True}
#: fuzz specs (:mod:`fuzz_graphs`) covering the ops the ONNX import writes
SPECS = {
    "pool_resize_concat": {"input": [3, 8, 8], "seed": 1, "ops": [
        CONV, {"op": "pool", "kind": "MaxPool", "kernel": [2, 2], "stride": [2, 2], "pads": [0, 0, 0, 0],
               "ceil": 0, "count_include_pad": 0},
        {"op": "resize", "mode": "nearest", "coordinates": "asymmetric", "nearest_mode": "floor",
         "exclude_outside": 0, "scales": [2.0, 2.0]},
        {"op": "concat", "with": 1}, {"op": "act", "kind": "HardSwish"}, CONV]},
    "split_slice_binary": {"input": [4, 6, 6], "seed": 2, "ops": [
        CONV, {"op": "split", "sections": [4, 4], "take": 1, "swap_concat": True},
        {"op": "slice", "start": 0, "end": 4}, {"op": "binary", "kind": "Mul", "operand": "channel"},
        {"op": "binary", "kind": "Sub", "operand": "scalar"},
        {"op": "conv", "out": 8, "kernel": [1, 1], "stride": [1, 1], "dilation": [1, 1], "pads": [0, 0, 0, 0],
         "groups": 1, "bias": False},
        {"op": "binary", "kind": "Add", "operand": "tensor", "with": 1}, CONV]},
    "se_layernorm_head": {"input": [8, 8, 8], "seed": 3, "ops": [
        CONV, {"op": "conv", "out": 8, "kernel": [3, 3], "stride": [1, 1], "dilation": [1, 1],
               "pads": [1, 1, 1, 1], "groups": 8, "bias": True},
        {"op": "se", "reduced": 2, "gate": "HardSigmoid"}, {"op": "act", "kind": "GELU"},
        {"op": "layernorm", "written_out": True}, {"op": "act", "kind": "LeakyRelu"},
        {"op": "head", "out": 10}]},
    "transpose_avgpool": {"input": [4, 5, 5], "seed": 4, "ops": [
        CONV, {"op": "conv_transpose", "out": 8, "kernel": [2, 2], "stride": [2, 2], "pads": [0, 0, 0, 0],
               "output_padding": [0, 0], "groups": 1, "bias": True},
        {"op": "act", "kind": "SiLU"},
        {"op": "pool", "kind": "AveragePool", "kernel": [3, 3], "stride": [1, 1], "pads": [1, 1, 1, 1],
         "ceil": 0, "count_include_pad": 1},
        {"op": "conv_transpose", "out": 8, "kernel": [3, 3], "stride": [2, 2], "pads": [1, 1, 1, 1],
         "output_padding": [1, 1], "groups": 8, "bias": False},
        {"op": "resize", "mode": "linear", "coordinates": "half_pixel", "nearest_mode": "floor",
         "exclude_outside": 0, "sizes": [7, 9]}, {"op": "act", "kind": "Tanh"}, CONV]},
    "cubic_resize_clip": {"input": [3, 6, 6], "seed": 5, "ops": [
        CONV, {"op": "act", "kind": "Clip"},
        {"op": "resize", "mode": "cubic", "coordinates": "align_corners", "nearest_mode": "floor",
         "exclude_outside": 1, "scales": [1.5, 1.5]}, {"op": "act", "kind": "Sigmoid"}, CONV]},
}


def models() -> dict[str, Any]:
    """name -> a Relax module (the ONNX ones imported as the tune imports them)."""
    sys.path.insert(0, str(Path(__file__).parent))
    from fuzz_graphs import build_model
    from onnx_models import mobile_fpn_onnx, mobilenet_v3_block_onnx
    from test_split import c2f, shuffle_block

    from layoutopt.tvm import models as zoo
    from layoutopt.tvm.frontend.load import load_model
    from layoutopt.tvm.frontend.shuffle import fold_channel_shuffles

    found = {"chain": zoo.chain(), "residual": zoo.residual(), "concat3": zoo.concat3(),
             "dense_head": zoo.dense_head(), "c2f": c2f([16, 48]), "shuffle": shuffle_block()}
    found["shuffle_folded"] = fold_channel_shuffles(shuffle_block())
    with tempfile.TemporaryDirectory() as folder:
        found["mobile_fpn"] = load_model(mobile_fpn_onnx(Path(folder) / "fpn.onnx"), {"x": [1, 3, 16, 16]})
        found["mobilenet_v3"] = load_model(mobilenet_v3_block_onnx(Path(folder) / "mv3.onnx"))
        for name, spec in SPECS.items():
            path = Path(folder) / f"{name}.onnx"
            path.write_bytes(build_model(spec).SerializeToString())
            found[name] = load_model(path)
    return found


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _constants(mod) -> list:
    """The constants ``main``'s calls take, in order (packed weights included)."""
    from layoutopt.tvm.relax_expr import is_tensor_constant

    found = []
    for block in mod["main"].body.blocks:
        for binding in block.bindings:
            args = getattr(binding.value, "args", None) or []
            for arg in args:
                fields = getattr(arg, "fields", None)
                found.extend(a for a in (fields if fields is not None else [arg]) if is_tensor_constant(a))
    return found


def snapshot_of(mod) -> dict[str, Any]:
    """The plain-data snapshot of one model (see the module's docstring)."""
    import tvm_ffi

    from layoutopt.tvm import extract_layout_graph
    from layoutopt.tvm.building.apply import apply_assignment
    from layoutopt.tvm.building.baselines import fixed_layout_assignment
    from layoutopt.tvm.building.builder import legalize
    from layoutopt.tvm.measure.cache import task_key

    graph = extract_layout_graph(mod, {"blocks": [4, 8, 16]})
    nodes = []
    for node in graph.layout_nodes():
        nodes.append({"name": node.name, "kind": node.kind, "binding": node.binding, "op": node.op,
                      "workload": json.dumps(node.workload, sort_keys=False),
                      "choices": len(node.choices),
                      "labels": _digest("\n".join(str(choice) for choice in node.choices)),
                      "keys": _digest("\n".join(task_key(node.workload, choice.candidate)
                                                 for choice in node.choices))})
    edges = [[p, c, str(graph.layout_edge(p, c))] for p, c in graph.edges]
    rewrites = {}
    assignments = {"first": {node: 0 for node in graph},
                   "NCHW8c": fixed_layout_assignment(graph, "NCHW8c"),
                   "last": {node: len(graph.nodes[node]["choices"]) - 1 for node in graph}}
    for name, assignment in assignments.items():
        rewritten = apply_assignment(graph.mod, graph, assignment)
        legalized = legalize(rewritten, "llvm")
        rewrites[name] = {
            "main": _digest(rewritten["main"].script()),
            "hash": str(tvm_ffi.structural_hash(rewritten)),
            "constants": _digest("".join(_digest(constant.value.numpy().tobytes().hex())
                                         for constant in _constants(rewritten))),
            "functions": sorted(gv.name_hint for gv, _ in legalized.functions_items()),
        }
    return {"nodes": nodes, "following": graph.following, "edges": edges, "rewrites": rewrites}


def snapshot() -> dict[str, Any]:
    return {name: snapshot_of(mod) for name, mod in models().items()}


if __name__ == "__main__":
    DATA.parent.mkdir(exist_ok=True)
    DATA.write_text(json.dumps(snapshot(), indent=1) + "\n")
    print(f"wrote {DATA}")

"""Take a tuning result somewhere: a compiled library, and a solution file to rebuild it from.

:func:`save_solution` writes what :func:`~layoutopt.tvm.tune_and_build` chose as JSON: per layer its
workload, algorithm, layouts, knobs (the candidate dict the kernel was measured as) and predicted
cost; the target, the TVM and layoutopt versions, the objective, and which build was handed back (the
tuned one, or the best fixed layout when that measured faster: the file holds the layers of the build
handed back). :func:`build_from_solution` rebuilds that build for the same model with no
measurement (what the old graph tuner's ``apply_graph_best`` did), refusing clearly, and naming what
differs, when the model or the target is not the one the file was tuned for.
:func:`export_library` writes the ``.so`` that ``tvm.runtime.load_module`` loads.

Example::

    result = tune_and_build(mod, cache="costs.jsonl")
    result.export("model.so")                     # model.so + model.solution.json
    executable = build_from_solution(mod, "model.solution.json")      # later: no measurement
    lib = tvm.runtime.load_module("model.so")
    vm = tvm.relax.VirtualMachine(lib, tvm.cpu())
"""

from __future__ import annotations

import json
import math
from collections.abc import Hashable, Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

from ..errors import ProblemError
from ..io import check_json_document, read_json_document
from ._tvm import first_line, import_tvm, resolve_target, target_key
from .graph import LayoutGraph

__all__ = ["FORMAT", "build_from_solution", "export_library", "load_solution", "save_solution",
           "solution_path", "solution_record"]

#: the ``format`` field of a solution file; ``version`` is bumped when its meaning changes
FORMAT = "layoutopt-solution"
VERSION = 1


def solution_path(library: str | Path) -> Path:
    """The solution file written beside a library: ``model.so`` -> ``model.solution.json``.

    Example:
        >>> str(solution_path("out/model.so"))
        'out/model.solution.json'
    """
    library = Path(library)
    return library.with_name(f"{library.stem}.solution.json")


def _versions() -> dict[str, str]:
    from .kernels import SCHEDULE_VERSION

    return {"tvm": str(import_tvm().__version__), "layoutopt": metadata.version("layoutopt"),
            "schedules": str(SCHEDULE_VERSION)}


def _inputs(mod) -> dict[str, dict[str, Any]]:
    tvm = import_tvm()
    inputs = {}
    for param in mod["main"].params:
        ty = param.ty
        if isinstance(ty, tvm.relax.TensorType) and ty.shape is not None:
            inputs[param.name] = {"shape": [int(s) for s in ty.shape], "dtype": str(ty.dtype)}
    return inputs


def _finite(value: float | None) -> float | None:
    return float(value) if value is not None and math.isfinite(value) else None


def _layers(graph: LayoutGraph, assignment: Mapping[Hashable, int], costs) -> list[dict[str, Any]]:
    layers = []
    for node in graph.layout_nodes():
        if not node.decides:
            continue
        k = assignment[node.name]
        candidate = dict(node.choices[k].candidate)
        knobs = {key: value for key, value in candidate.items() if key not in ("in", "out", "algorithm")}
        cost = None
        if costs is not None and node.name in costs.nodes:
            cost = _finite(float(list(costs.nodes[node.name])[k]))
        layers.append({
            "layer": str(node.name),
            "binding": node.binding,
            "op": node.op,
            "kind": node.kind,
            "workload": _plain(node.workload),
            "algorithm": node.choices[k].record.algorithm if node.kind == "target" else None,
            "in": node.choices[k].in_layout,
            "out": node.choices[k].out_layout,
            "knobs": knobs,
            "candidate": candidate,
            "label": node.choices[k].label,
            "predicted_cost": cost,
        })
    return layers


def solution_record(result, model: str | None = None) -> dict[str, Any]:
    """The solution file's content (a JSON-able dict) for a :class:`~layoutopt.tvm.TuneResult`.

    Example::

        record = solution_record(result, model="det.onnx")
        record["handed_back"], record["layers"][0]["candidate"]
    """
    variant = result.tuned if result.chosen == result.tuned.name else result.baselines[result.chosen]
    return {
        "format": FORMAT,
        "version": VERSION,
        "model": {"name": model, "inputs": _inputs(result.graph.mod)},
        "target": json.loads(result.meta["target"]),
        "versions": _versions(),
        "fuse": bool(result.fuse),
        "handed_back": {"name": result.chosen, "description": variant.description,
                        "predicted": _finite(variant.predicted), "measured": _finite(variant.measured)},
        "objective": {"method": result.solution.method, "status": result.solution.status,
                      "tuned_predicted": _finite(result.tuned.predicted),
                      "tuned_measured": _finite(result.tuned.measured), "unit": "seconds"},
        "layers": _layers(result.graph, variant.assignment, result.costs),
    }


def save_solution(result, path: str | Path, model: str | None = None) -> Path:
    """Write :func:`solution_record` of ``result`` to ``path`` (JSON); returns the path.

    Example::

        save_solution(result, "model.solution.json", model="model.onnx")
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(solution_record(result, model), indent=1, allow_nan=False) + "\n")
    except OSError as exc:
        raise ProblemError(f"cannot write the solution file {str(path)!r}: {exc.strerror or exc}") from None
    return path


def load_solution(path: str | Path | Mapping[str, Any]) -> dict[str, Any]:
    """Read and check a solution file (or take its dict as it is).

    Raises:
        ProblemError: an unreadable file, not a layoutopt solution, or a version this layoutopt does
            not read.

    Example::

        solution = load_solution("model.solution.json")
        solution["target"], len(solution["layers"])
    """
    if isinstance(path, Mapping):
        where = "the solution"
        record = check_json_document(dict(path), where, FORMAT, VERSION, "solution")
    else:
        where, record = f"solution file {str(path)!r}", read_json_document(path, FORMAT, VERSION, "solution")
    for key in ("target", "layers", "model"):
        if key not in record:
            raise ProblemError(f"{where} has no {key!r}")
    return record


def _plain(value: Any) -> Any:
    """``value`` as it reads back from JSON (tuples as lists)."""
    return json.loads(json.dumps(value))


def _differences(expected: Mapping[str, Any], found: Mapping[str, Any]) -> list[str]:
    keys = sorted(set(expected) | set(found))
    return [f"{key}: {expected.get(key)!r} in the file, {found.get(key)!r} here"
            for key in keys if expected.get(key) != found.get(key)]


def _check_target(solution: Mapping[str, Any], target) -> None:
    found = json.loads(target_key(target))
    differences = _differences(solution["target"], found)
    if differences:
        raise ProblemError(
            "the target is not the one the solution was tuned for (" + "; ".join(differences) + "); "
            f"give --target '{json.dumps(solution['target'])}' to build for the file's target"
        )


def _check_model(solution: Mapping[str, Any], graph: LayoutGraph) -> None:
    inputs = _inputs(graph.mod)
    saved_inputs = solution["model"].get("inputs") or {}
    if saved_inputs and saved_inputs != inputs:
        differences = _differences({k: v["shape"] for k, v in saved_inputs.items()},
                                   {k: v["shape"] for k, v in inputs.items()})
        raise ProblemError("the model's inputs are not the ones the solution was tuned for ("
                           + "; ".join(f"input {d}" for d in differences) + ")")
    nodes = {node.binding: node for node in graph.layout_nodes() if node.decides}
    saved = {layer["binding"]: layer for layer in solution["layers"]}
    for binding, layer in saved.items():
        node = nodes.get(binding)
        if node is None:
            raise ProblemError(f"the model has no layer {binding!r} ({layer['op']}) that the solution "
                               "file chooses a kernel for: not the model it was tuned on")
        workload = _plain(node.workload)
        if node.op != layer["op"] or workload != layer["workload"]:
            differences = _differences(layer["workload"], workload)
            raise ProblemError(f"layer {binding!r} differs from the solution file's: "
                               + ("; ".join(differences) or f"op {layer['op']!r} there, {node.op!r} here"))
    missing = sorted(set(nodes) - set(saved))
    if missing:
        raise ProblemError(f"the model has {len(missing)} layer(s) the solution file does not cover "
                           f"({', '.join(missing[:5])}): not the model it was tuned on")


def build_from_solution(mod, solution: str | Path | Mapping[str, Any], target: Any = None):
    """Rebuild, with no measurement, the build a solution file describes, for ``mod``.

    Args:
        mod: the model the solution was tuned on (a Relax ``IRModule``, as for
            :func:`~layoutopt.tvm.tune_and_build`); its weights may differ, its layers may not.
        solution: a solution file (see :func:`save_solution`) or its dict.
        target: the CPU to build for (default: this host, see :func:`~layoutopt.tvm.resolve_target`);
            it must be the file's (give the file's own target to cross-build for the tuned device).

    Returns:
        ``(executable, module)``: the ``tvm.runtime.Executable`` (for ``relax.VirtualMachine`` or
        :func:`export_library`) and the rewritten Relax module it was built from.

    Raises:
        ProblemError: the model or the target does not match the file (naming the layer, input or
            target field that differs), or the file is not a solution.

    Example::

        executable, module = build_from_solution(load_model("det.onnx", [1, 3, 320, 320]),
                                                 "det.solution.json")
    """
    from .apply import apply_layouts, build
    from .extract import extract_layout_graph, prepare

    record = load_solution(solution)
    target = resolve_target(target)
    _check_target(record, target)
    prepared = prepare(mod)
    fuse = bool(record.get("fuse", True))
    graph = extract_layout_graph(prepared, prepared=True, fuse=fuse)
    _check_model(record, graph)
    choices = {layer["binding"]: layer["candidate"] for layer in record["layers"]}
    new_mod = apply_layouts(prepared, choices)
    return build(new_mod, target, fuse=fuse), new_mod


def export_library(executable, path: str | Path) -> Path:
    """Write a built model as a shared library (``tvm.runtime.load_module`` loads it back).

    Example::

        export_library(result.executable, "model.so")
        vm = tvm.relax.VirtualMachine(tvm.runtime.load_module("model.so"), tvm.cpu())
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        executable.export_library(str(path))
    except OSError as exc:
        raise ProblemError(f"cannot write the library {str(path)!r}: {exc.strerror or exc}") from None
    except Exception as exc:  # the linker's error, in one line
        raise ProblemError(f"exporting the library {str(path)!r} failed: {first_line(exc)}") from None
    return path

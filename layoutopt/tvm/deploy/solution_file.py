"""Take a tuning result somewhere: a compiled library, and a solution file to rebuild it from.

A solution file is a :class:`SolutionFile` record written as JSON (:func:`save_solution`): per layer
its workload and the kernel candidate it runs (algorithm, layouts, schedule knobs: the dict the kernel
was measured as) and its predicted cost; the model's inputs, the target, the TVM, layoutopt and
schedule versions, the objective, and which build was handed back (the tuned one, or a fixed rule
when that measured faster: the file holds the layers of the build handed back). Reading one
(:func:`load_solution`) checks it against its schema, naming the layer and the field at fault.
:func:`build_from_solution` rebuilds that build for the same model with no measurement (what the old
graph tuner's ``apply_graph_best`` did), refusing clearly, and naming what differs, when the model or
the target is not the one the file was tuned for, or when this layoutopt's schedules are not the ones
that were measured. :func:`export_library` writes the ``.so`` that ``tvm.runtime.load_module`` loads.

Example:
    >>> SolutionFile.from_json({"format": "layoutopt-solution", "version": 2, "model": {"inputs": {}},
    ...     "target": {"kind": "llvm"}, "versions": {"tvm": "0.27", "layoutopt": "0.1", "schedules": "5"},
    ...     "layers": [{"layer": "conv1", "kind": "target", "workload": {}, "candidate": {}}]})
    Traceback (most recent call last):
    ...
    layoutopt.errors.ProblemError: the solution: layer 'conv1': missing 'op'

In full:
    >>> import numpy as np, tvm
    >>> from layoutopt.tvm import models, tune_and_build
    >>> mod = models.chain((8, 8))
    >>> result = tune_and_build(mod, cache="costs.jsonl", guard=False, baselines=(), calibrate=0,
    ...                         check=False)     # quick: the tuned build alone, unchecked
    >>> library, solution = result.export("model.so")          # model.so + model.solution.json
    >>> executable, module = build_from_solution(mod, solution)  # later: no measurement
    >>> lib = tvm.runtime.load_module("model.so")              # on the device: TVM's runtime only
    >>> vm = tvm.relax.VirtualMachine(lib, tvm.cpu())
    >>> x = tvm.runtime.tensor(np.ones((1, 8, 8, 8), "float32"))
    >>> rebuilt = tvm.relax.VirtualMachine(executable, tvm.cpu())
    >>> np.array_equal(vm["main"](x).numpy(), rebuilt["main"](x).numpy())    # the same build
    True
"""

from __future__ import annotations

import json
import math
import os
import warnings
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, ClassVar

from ...errors import ProblemError
from ...io import check_json_document, read_json_document
from ...records import FlatRecord as _FlatRecord
from ...records import check_fields as _fields
from ...records import is_json as _is
from ...records import json_kind as _kind
from .._tvm import first_line, import_tvm, resolve_target, target_key, without_scope_saving_lines
from ..building.storage import STORAGE_PLANS
from ..graph.graph import Choice, LayoutGraph, candidate_label

__all__ = ["FORMAT", "VERSION", "Check", "HandedBack", "ModelInput", "Objective", "SolutionFile",
           "SolutionLayer", "SolutionVersionWarning", "Versions", "build_from_solution", "check_writable",
           "export", "export_library", "load_solution", "save_solution", "solution_path"]

#: the ``format`` field of a solution file
FORMAT = "layoutopt-solution"
#: the version written. 2: a layer's kernel is its ``candidate`` alone; version 1 repeated the
#: candidate's layouts, algorithm, knobs and label (and the layer's name as ``binding``) beside it
VERSION = 2
#: the versions read: a version 1 file's repeated fields must agree with its candidates
READS = (1, 2)


class SolutionVersionWarning(UserWarning):
    """The solution file was written by another TVM or layoutopt version than this one."""


def solution_path(library: str | Path) -> Path:
    """The solution file written beside a library: ``model.so`` -> ``model.solution.json``.

    Example:
        >>> str(solution_path("out/model.so"))
        'out/model.solution.json'
    """
    library = Path(library)
    return library.with_name(f"{library.stem}.solution.json")


# -- the schema -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Versions(_FlatRecord):
    """What the file was written with: TVM and layoutopt versions, and
    :data:`~layoutopt.tvm.kernels.SCHEDULE_VERSION` (the schedules the costs were measured with)."""

    tvm: str
    layoutopt: str
    schedules: str

    @classmethod
    def here(cls) -> Versions:
        """This installation's versions."""
        from ..kernels import SCHEDULE_VERSION

        return cls(str(import_tvm().__version__), metadata.version("layoutopt"), str(SCHEDULE_VERSION))


@dataclass(frozen=True)
class HandedBack(_FlatRecord):
    """The build the file describes: the tuned one (``layoutopt``) or the fixed rule handed back
    instead; its predicted and measured latency (seconds)."""

    name: str
    description: str = ""
    predicted: float | None = None
    measured: float | None = None


@dataclass(frozen=True)
class Objective(_FlatRecord):
    """How the layout problem was solved, and the tuned build's predicted and measured latency."""

    method: str
    status: str
    tuned_predicted: float | None = None
    tuned_measured: float | None = None
    unit: str = "seconds"


@dataclass(frozen=True)
class Check(_FlatRecord):
    """How far the build handed back is from the model's numbers (:mod:`layoutopt.tvm.evaluate.check`), on the
    tune's seeded input: its largest relative error against the ``reference`` (``"float64"``: the
    untouched model computed in float64; ``"float32"``: TVM's float32 build of it, when the model could
    not be widened), TVM's untouched float32 build's error against the same reference, and the bound a
    build had to stay within; what TVM's import of the model was compared with (``imported``: a runtime
    independent of TVM, e.g. ``"ONNX Runtime 1.32.0"``; None when nothing was) and that runtime's error
    against the same reference (``imported_error``)."""

    reference: str
    max_relative_error: float | None = None
    untouched_error: float | None = None
    bound: float | None = None
    imported: str | None = None
    imported_error: float | None = None


@dataclass(frozen=True)
class ModelInput:
    """One input of the model: its static shape and dtype."""

    shape: tuple[int, ...]
    dtype: str

    def to_json(self) -> dict[str, Any]:
        return {"shape": list(self.shape), "dtype": self.dtype}

    @classmethod
    def from_json(cls, value: Any, where: str) -> ModelInput:
        _fields(value, where, {"shape": (list,), "dtype": (str,)})
        shape = value["shape"]
        if not all(_is(d, (int,)) and d > 0 for d in shape):
            raise ProblemError(f"{where}: 'shape' must be a list of positive integers, not {_kind(shape)}")
        return cls(tuple(shape), value["dtype"])


#: the fields of a version 1 layer that repeated its candidate (and its name, as ``binding``)
_VERSION_1_REPEATS = {"binding": (str,), "algorithm": (str, type(None)), "in": (str,), "out": (str,),
                      "knobs": (dict,), "label": (str,)}


@dataclass(frozen=True)
class SolutionLayer:
    """One layer whose kernel the build chooses: its name in the layout graph (its Relax binding),
    op, kind (``"target"`` kernels, ``"multi"``-input ops' common layout), workload, the kernel
    candidate it runs (the cost-cache key: ``"in"``/``"out"`` layouts, an ``"algorithm"`` and schedule
    knobs) and its predicted cost in seconds."""

    layer: str
    op: str
    kind: str
    workload: dict[str, Any]
    candidate: dict[str, Any]
    predicted_cost: float | None = None

    @property
    def label(self) -> str:
        """The choice's label, as the layout graph gives it: the candidate's
        (:func:`~layoutopt.tvm.graph.graph.candidate_label`), a multi-input op's common layout alone."""
        if self.kind == "multi":
            return Choice.layout(Choice(self.candidate).in_layout).label
        return candidate_label(self.candidate)

    def to_json(self) -> dict[str, Any]:
        return {"layer": self.layer, "op": self.op, "kind": self.kind, "workload": self.workload,
                "candidate": self.candidate, "predicted_cost": self.predicted_cost}

    @classmethod
    def from_json(cls, value: Any, where: str, version: int = VERSION) -> SolutionLayer:
        """The layer of a JSON entry of a file of ``version``; errors name ``where`` and the field."""
        required = {"layer": (str,), "op": (str,), "kind": (str,), "workload": (dict,), "candidate": (dict,)}
        optional = {"predicted_cost": (float, type(None)), **(_VERSION_1_REPEATS if version == 1 else {})}
        _fields(value, where, required, optional)
        if value["kind"] not in ("target", "multi"):
            raise ProblemError(f"{where}: 'kind' must be \"target\" or \"multi\", not {_kind(value['kind'])}")
        candidate = value["candidate"]
        _fields(candidate, f"{where}: 'candidate'", {"in": (str,), "out": (str,)},
                {key: (str, float, bool) for key in candidate if key not in ("in", "out")})
        layer = cls(value["layer"], value["op"], value["kind"], dict(value["workload"]), dict(candidate),
                    value.get("predicted_cost"))
        for key in _VERSION_1_REPEATS:
            if version == 1 and key in value and value[key] != layer._repeated(key):
                raise ProblemError(
                    f"{where}: {key!r} is {_kind(value[key])}, but its 'candidate' {json.dumps(candidate)} "
                    f"says {json.dumps(layer._repeated(key))}: the candidate is what a build reads; "
                    f"edit it, or delete {key!r}"
                )
        return layer

    def _repeated(self, key: str) -> Any:
        """What a version 1 file wrote in ``key`` beside this layer's candidate."""
        choice = Choice(self.candidate)
        return {
            "binding": self.layer,
            "algorithm": choice.record.algorithm if self.kind == "target" else None,
            "in": choice.in_layout,
            "out": choice.out_layout,
            "knobs": {k: v for k, v in self.candidate.items() if k not in ("in", "out", "algorithm")},
            "label": self.label,
        }[key]


@dataclass(frozen=True)
class SolutionFile:
    """A solution file (:func:`save_solution`, :func:`load_solution`): what a tune handed back, and
    what :func:`build_from_solution` needs to rebuild it with no measurement.

    ``model`` is the model's name as it was given (informational); ``inputs`` its input shapes;
    ``target`` the target the kernels were measured for (its JSON dict); ``layers`` every layer whose
    kernel the build chooses, in graph order. A section added later is an optional field (default
    None, left out of the JSON when None), so that the files written before it still read.

    Example:
        >>> from layoutopt.tvm import models, tune_and_build
        >>> result = tune_and_build(models.chain((8, 8)), cache="costs.jsonl", guard=False, baselines=(),
        ...                         calibrate=0, check=False)   # quick: the tuned build alone, unchecked
        >>> solution = SolutionFile.from_result(result, model="chain")
        >>> solution.handed_back.name, solution.inputs["data"].shape
        ('layoutopt', (1, 8, 8, 8))
        >>> [(layer.layer, layer.kind) for layer in solution.layers]
        [('conv1', 'target'), ('conv2', 'target')]
        >>> SolutionFile.from_json(solution.to_json()) == solution
        True
    """

    model: str | None
    inputs: dict[str, ModelInput]
    target: dict[str, Any]
    versions: Versions
    layers: tuple[SolutionLayer, ...]
    fuse: bool = True
    storage: str = "relax"
    handed_back: HandedBack | None = None
    objective: Objective | None = None
    check: Check | None = None

    #: the optional sections: JSON name -> the record class that reads it
    SECTIONS: ClassVar[dict[str, type[_FlatRecord]]] = {"handed_back": HandedBack, "objective": Objective,
                                                         "check": Check}

    def to_json(self) -> dict[str, Any]:
        """The JSON document (a dict) of the file."""
        document = {"format": FORMAT, "version": VERSION,
                    "model": {"name": self.model,
                              "inputs": {name: spec.to_json() for name, spec in self.inputs.items()}},
                    "target": self.target, "versions": self.versions.to_json(), "fuse": self.fuse}
        if self.storage != "relax":  # files of Relax's plan read as they did before storage plans
            document["storage"] = self.storage
        for name in self.SECTIONS:
            if getattr(self, name) is not None:
                document[name] = getattr(self, name).to_json()
        document["layers"] = [layer.to_json() for layer in self.layers]
        return document

    @classmethod
    def from_json(cls, document: Any, where: str = "the solution") -> SolutionFile:
        """The record of a JSON document, checked against the schema of its version (1 or 2).

        Raises:
            ProblemError: naming ``where`` (the file), the layer and the field at fault: not a
                solution, a version this layoutopt does not read, a missing, unknown or mistyped
                field, a layer given twice, a version 1 layer whose repeated fields disagree with its
                candidate.
        """
        check_json_document(document, where, FORMAT, READS, "solution")
        required = {"format": (str,), "version": (int,), "model": (dict,), "target": (dict,),
                    "versions": (dict,), "layers": (list,)}
        _fields(document, where, required, {"fuse": (bool,), "storage": (str,),
                                            **{name: (dict,) for name in cls.SECTIONS}})
        if document.get("storage", "relax") not in STORAGE_PLANS:
            raise ProblemError(f"{where}: 'storage' is {document['storage']!r}, not a storage plan this "
                               f"layoutopt knows ({', '.join(STORAGE_PLANS)})")
        model = _fields(document["model"], f"{where}: 'model'", {"inputs": (dict,)},
                        {"name": (str, type(None))})
        inputs = {name: ModelInput.from_json(spec, f"{where}: model input {name!r}")
                  for name, spec in model["inputs"].items()}
        layers: dict[str, SolutionLayer] = {}
        for number, entry in enumerate(document["layers"]):
            name = entry.get("layer") if isinstance(entry, dict) else None
            named = f"layer {name!r}" if isinstance(name, str) else f"layers[{number}]"
            layer = SolutionLayer.from_json(entry, f"{where}: {named}", document["version"])
            if layer.layer in layers:
                raise ProblemError(f"{where}: layer {layer.layer!r} is given twice (layers[{number}] and an "
                                   "earlier entry): which kernel to build would be a guess")
            layers[layer.layer] = layer
        sections = {name: record.from_json(document[name], f"{where}: {name!r}")
                    for name, record in cls.SECTIONS.items() if name in document}
        return cls(model.get("name"), inputs, dict(document["target"]),
                   Versions.from_json(document["versions"], f"{where}: 'versions'"), tuple(layers.values()),
                   document.get("fuse", True), document.get("storage", "relax"), **sections)

    @classmethod
    def from_result(cls, result, model: str | None = None) -> SolutionFile:
        """The record of a :class:`~layoutopt.tvm.TuneResult`: the layers of the build it hands back.

        Example:
            >>> from layoutopt.tvm import models, tune_and_build
            >>> result = tune_and_build(models.chain((8, 8)), cache="costs.jsonl", guard=False, baselines=(),
            ...                         calibrate=0, check=False)   # quick: the tuned build alone, unchecked
            >>> record = SolutionFile.from_result(result, model="chain")
            >>> record.model, record.handed_back.name, record.layers[0].layer
            ('chain', 'layoutopt', 'conv1')
            >>> chosen = result.solution.assignment["conv1"]
            >>> record.layers[0].candidate == result.graph.choice("conv1", chosen).candidate
            True
        """
        variant = result.handed_back
        return cls(
            model=model,
            inputs=_inputs(result.graph.mod),
            target=dict(result.meta.context.target),
            versions=Versions.here(),
            layers=_layers(result.graph, variant.assignment, result.costs, variant.loop_order),
            fuse=bool(result.fuse),
            storage=result.storage,
            handed_back=HandedBack(result.chosen, variant.description, _finite(variant.predicted),
                                   _finite(variant.measured)),
            objective=Objective(result.solution.method, result.solution.status,
                                _finite(result.tuned.predicted), _finite(result.tuned.measured)),
            check=_check(result.reference, variant.max_relative_error),
        )


def _check(reference, error: float | None) -> Check | None:
    """The ``check`` section of a build checked against ``reference`` (None unchecked)."""
    if reference is None:
        return None
    imported = reference.imported
    return Check(reference.kind, _finite(error), _finite(reference.untouched_error),
                 _finite(max(reference.bounds, default=reference.rtol)),
                 imported.runtime if imported is not None else None,
                 _finite(imported.error) if imported is not None else None)


def _inputs(mod) -> dict[str, ModelInput]:
    tvm = import_tvm()
    inputs = {}
    for param in mod["main"].params:
        ty = param.ty
        if isinstance(ty, tvm.relax.TensorType) and ty.shape is not None:
            inputs[param.name] = ModelInput(tuple(int(s) for s in ty.shape), str(ty.dtype))
    return inputs


def _finite(value: float | None) -> float | None:
    return float(value) if value is not None and math.isfinite(value) else None


def _layers(graph: LayoutGraph, assignment: Mapping[Hashable, int], costs,
            loop_order: str | None = None) -> tuple[SolutionLayer, ...]:
    """The solution file's layers: each deciding node's candidate as built (``loop_order``: see
    :meth:`~layoutopt.tvm.graph.graph.LayoutGraph.decisions`), with its cost."""
    candidates = graph.decisions(assignment, loop_order)
    layers = []
    for node in graph.layout_nodes():
        if not node.decides:
            continue
        k = assignment[node.name]
        cost = None
        if costs is not None and node.name in costs.nodes:
            cost = _finite(float(list(costs.nodes[node.name])[k]))
        layers.append(SolutionLayer(str(node.name), node.op, node.kind, _plain(node.workload),
                                    _plain(candidates[node.binding]), cost))
    return tuple(layers)


# -- writing and reading ----------------------------------------------------------------------------


def check_writable(path: str | Path, what: str) -> Path:
    """Refuse now, in one line naming ``what`` and ``path``, a file that could not be written later:
    a directory in its place, a parent that cannot be created, a place that cannot be written (as
    ``/proc/x.so``, which root's ``os.access`` calls writable). Parent directories are created;
    the file is opened for writing (created, then removed, when it does not exist yet), not changed.

    Example:
        >>> check_writable("/proc/x.so", "-o")
        Traceback (most recent call last):
        ...
        layoutopt.errors.ProblemError: -o '/proc/x.so': cannot write there (No such file or directory)
    """
    path = Path(path)
    if path.is_dir():
        raise ProblemError(f"{what} {str(path)!r} is a directory, not a file")
    if path.exists() and not path.is_file():  # a FIFO or a device would block or swallow the output
        raise ProblemError(f"{what} {str(path)!r} is not a regular file")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists():
            with open(path, "ab"):
                pass
        else:
            with open(path, "xb"):
                pass
            path.unlink()
    except OSError as exc:
        raise ProblemError(f"{what} {str(path)!r}: cannot write there ({exc.strerror or exc})") from None
    return path


def save_solution(result, path: str | Path, model: str | None = None) -> Path:
    """Write the :class:`SolutionFile` of ``result`` (a :class:`~layoutopt.tvm.TuneResult`, or the
    record itself) to ``path`` as JSON; returns the path. The file is replaced whole: a crash
    leaves the old one or the new one, never half of it.

    Example:
        >>> from layoutopt.tvm import models, tune_and_build
        >>> result = tune_and_build(models.chain((8, 8)), cache="costs.jsonl", guard=False, baselines=(),
        ...                         calibrate=0, check=False)   # quick: the tuned build alone, unchecked
        >>> save_solution(result, "chain.solution.json", model="chain")
        PosixPath('chain.solution.json')
        >>> import json
        >>> document = json.loads(open("chain.solution.json").read())
        >>> document["format"], document["version"], document["model"]["name"]
        ('layoutopt-solution', 2, 'chain')
    """
    path = Path(path)
    record = result if isinstance(result, SolutionFile) else SolutionFile.from_result(result, model)
    text = json.dumps(record.to_json(), indent=1, allow_nan=False) + "\n"
    partial = path.with_name(f".{path.name}.partial")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial.write_text(text)
        os.replace(partial, path)
    except OSError as exc:
        raise ProblemError(f"cannot write the solution file {str(path)!r}: {exc.strerror or exc}") from None
    return path


def load_solution(path: str | Path | Mapping[str, Any] | SolutionFile) -> SolutionFile:
    """Read and check a solution file (or its JSON dict, or take the record as it is).

    Raises:
        ProblemError: an unreadable file, not a layoutopt solution, a version this layoutopt does
            not read, or a document that breaks the schema (naming the layer and the field).

    Example:
        >>> from layoutopt.tvm import models, tune_and_build
        >>> result = tune_and_build(models.chain((8, 8)), cache="costs.jsonl", guard=False, baselines=(),
        ...                         calibrate=0, check=False)   # quick: the tuned build alone, unchecked
        >>> solution = load_solution(save_solution(result, "chain.solution.json"))
        >>> solution.target == dict(result.meta.context.target), len(solution.layers)
        (True, 2)
        >>> load_solution({"format": "layoutopt-solution", "version": 3})
        Traceback (most recent call last):
        ...
        layoutopt.errors.ProblemError: ...version 3...
    """
    if isinstance(path, SolutionFile):
        return path
    if isinstance(path, Mapping):
        return SolutionFile.from_json(dict(path))
    where = f"solution file {str(path)!r}"
    return SolutionFile.from_json(read_json_document(path, FORMAT, READS, "solution"), where)


# -- rebuilding -------------------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    """``value`` as it reads back from JSON (tuples as lists)."""
    return json.loads(json.dumps(value))


def _differences(expected: Mapping[str, Any], found: Mapping[str, Any]) -> list[str]:
    keys = sorted(set(expected) | set(found))
    return [f"{key}: {expected.get(key)!r} in the file, {found.get(key)!r} here"
            for key in keys if expected.get(key) != found.get(key)]


def _check_versions(solution: SolutionFile) -> None:
    """Refuse a file measured with other schedules; warn of another TVM or layoutopt."""
    here = Versions.here()
    if solution.versions.schedules != here.schedules:
        raise ProblemError(
            f"the solution was tuned with schedule version {solution.versions.schedules}, this layoutopt "
            f"has schedule version {here.schedules}: its kernels are not the ones measured; tune again"
        )
    for name in ("tvm", "layoutopt"):
        theirs, ours = getattr(solution.versions, name), getattr(here, name)
        if theirs != ours:
            package = "TVM" if name == "tvm" else name
            warnings.warn(f"the solution was tuned with {package} {theirs}, this is {package} {ours}: "
                          "the build may not be the one measured", SolutionVersionWarning, stacklevel=3)


def _check_target(solution: SolutionFile, target) -> None:
    found = json.loads(target_key(target))
    differences = _differences(solution.target, found)
    if differences:
        raise ProblemError(
            "the target is not the one the solution was tuned for (" + "; ".join(differences) + "); "
            f"give --target '{json.dumps(solution.target)}' to build for the file's target"
        )


def _check_model(solution: SolutionFile, graph: LayoutGraph) -> None:
    """Refuse a model whose inputs or layers are not the file's, or a multi-input op's candidate that
    is not one of its common layouts (a kernel's candidate is checked by the rewrite)."""
    inputs = _inputs(graph.mod)
    if solution.inputs and solution.inputs != inputs:
        differences = _differences({k: list(v.shape) for k, v in solution.inputs.items()},
                                   {k: list(v.shape) for k, v in inputs.items()})
        raise ProblemError("the model's inputs are not the ones the solution was tuned for ("
                           + "; ".join(f"input {d}" for d in differences) + ")")
    nodes = {str(node.name): node for node in graph.layout_nodes() if node.decides}
    for layer in solution.layers:
        node = nodes.get(layer.layer)
        if node is None:
            raise ProblemError(f"the model has no layer {layer.layer!r} ({layer.op}) that the solution "
                               "file chooses a kernel for: not the model it was tuned on")
        workload = _plain(node.workload)
        if node.op != layer.op or workload != layer.workload:
            differences = _differences(layer.workload, workload)
            raise ProblemError(f"layer {layer.layer!r} differs from the solution file's: "
                               + ("; ".join(differences) or f"op {layer.op!r} there, {node.op!r} here"))
        if node.kind != layer.kind:
            raise ProblemError(f"layer {layer.layer!r}: 'kind' is {layer.kind!r} in the solution file, "
                               f"{node.kind!r} here: not the model it was tuned on")
        if node.kind == "multi" and dict(layer.candidate) not in node.candidates:
            raise ProblemError(f"layer {layer.layer!r}: 'candidate' {json.dumps(layer.candidate)} is not one "
                               f"of its common layouts ({', '.join(node.labels)})")
    missing = sorted(set(nodes) - {layer.layer for layer in solution.layers})
    if missing:
        raise ProblemError(f"the model has {len(missing)} layer(s) the solution file does not cover "
                           f"({', '.join(missing[:5])}): not the model it was tuned on")


def build_from_solution(mod, solution: str | Path | Mapping[str, Any] | SolutionFile, target: Any = None,
                        storage: str | None = None, in_place_concat: bool = True):
    """Rebuild, with no measurement, the build a solution file describes, for ``mod``.

    Args:
        mod: the model the solution was tuned on (a Relax ``IRModule``, as for
            :func:`~layoutopt.tvm.tune_and_build`); its weights may differ, its layers may not.
        solution: a solution file (see :func:`save_solution`), its dict or its :class:`SolutionFile`.
        target: the CPU to build for (default: this host, see :func:`~layoutopt.tvm.resolve_target`);
            it must be the file's (give the file's own target to cross-build for the tuned device).
        storage: the storage plan (see :func:`~layoutopt.tvm.building.builder.build`); None: the file's.
        in_place_concat: concats done in place where they can be (see
            :func:`~layoutopt.tvm.building.builder.build`).

    Returns:
        ``(executable, module)``: the ``tvm.runtime.Executable`` (for ``relax.VirtualMachine`` or
        :func:`export_library`) and the rewritten Relax module it was built from.

    Raises:
        ProblemError: the model or the target does not match the file (naming the layer, input or
            target field that differs), a layer's candidate its kernel cannot run, schedules of
            another version than this layoutopt's, or a file that is not a solution.

    Warns:
        SolutionVersionWarning: the file was written with another TVM or layoutopt version.

    Example:
        >>> from layoutopt.tvm import models, tune_and_build
        >>> result = tune_and_build(models.chain((8, 8)), cache="costs.jsonl", guard=False, baselines=(),
        ...                         calibrate=0, check=False)   # quick: the tuned build alone, unchecked
        >>> path = save_solution(result, "chain.solution.json")
        >>> executable, module = build_from_solution(models.chain((8, 8), seed=1), path)   # other weights
        >>> build_from_solution(models.chain((16, 16)), path)
        Traceback (most recent call last):
        ...
        layoutopt.errors.ProblemError: ...
    """
    from ..building.apply import apply_layouts
    from ..building.builder import build
    from ..frontend.normalise import prepare
    from ..graph.extract import extract_layout_graph

    record = load_solution(solution)
    _check_versions(record)
    target = resolve_target(target)
    _check_target(record, target)
    prepared = prepare(mod)
    graph = extract_layout_graph(prepared, prepared=True, fuse=record.fuse)
    _check_model(record, graph)
    new_mod = apply_layouts(prepared, {layer.layer: dict(layer.candidate) for layer in record.layers})
    return build(new_mod, target, fuse=record.fuse, storage=storage or record.storage,
                 in_place_concat=in_place_concat), new_mod


# -- exporting --------------------------------------------------------------------------------------


def _compiler_message(exc: BaseException) -> str:
    """What the compiler or linker said, on one line: TVM's ``Compilation error:`` puts its output
    on the lines after that header, then the command line."""
    text = str(exc)
    if not text.startswith("Compilation error:"):
        return first_line(exc)
    output = [line.strip() for line in text.split("Command line:")[0].splitlines()[1:] if line.strip()]
    said = [line for line in output if not line.startswith("collect2:")] or output  # "ld returned 1"
    return "the compiler says: " + "; ".join(said[:3]) if said else first_line(exc)


def export_library(executable, path: str | Path) -> Path:
    """Write a built model as a shared library (``tvm.runtime.load_module`` loads it back).

    Raises:
        ProblemError: the library cannot be written, with the compiler's or the linker's own words
            (e.g. ``cannot open output file``).

    Example:
        >>> import numpy as np, tvm
        >>> from layoutopt.tvm import build, models
        >>> export_library(build(models.chain()), "chain.so")
        PosixPath('chain.so')
        >>> vm = tvm.relax.VirtualMachine(tvm.runtime.load_module("chain.so"), tvm.cpu())
        >>> vm["main"](tvm.runtime.tensor(np.ones((1, 8, 8, 8), "float32"))).numpy().shape
        (1, 16, 8, 8)
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with without_scope_saving_lines():
            executable.export_library(str(path))
    except OSError as exc:
        raise ProblemError(f"cannot write the library {str(path)!r}: {exc.strerror or exc}") from None
    except Exception as exc:  # the linker's error, in one line
        raise ProblemError(f"exporting the library {str(path)!r} failed: {_compiler_message(exc)}") from None
    return path


def export(result, library: str | Path, solution: str | Path | None = None,
           model: str | None = None) -> tuple[Path, Path]:
    """Write the build ``result`` hands back as a shared library, and its solution file (default
    ``model.so`` -> ``model.solution.json`` beside it); both paths are checked before either is
    written. Returns the two paths (what :meth:`~layoutopt.tvm.TuneResult.export` does).

    Example:
        >>> from layoutopt.tvm import models, tune_and_build
        >>> result = tune_and_build(models.chain((8, 8)), cache="costs.jsonl", guard=False, baselines=(),
        ...                         calibrate=0, check=False)   # quick: the tuned build alone, unchecked
        >>> export(result, "out/chain.so", model="chain")
        (PosixPath('out/chain.so'), PosixPath('out/chain.solution.json'))
    """
    solution = Path(solution) if solution is not None else solution_path(library)
    check_writable(library, "the library")
    check_writable(solution, "the solution file")
    return export_library(result.executable, library), save_solution(result, solution, model)

"""Load a model as a Relax module: an ONNX file, a ``torch.export`` program, or the embedded default.

The command line's front door: every problem with the file or the shapes given for it is a
:class:`~layoutopt.ProblemError` naming the file, raised before anything is measured.

Example:
    >>> import onnx
    >>> onnx.save(onnx.parser.parse_model('''<ir_version: 8, opset_import: ["" : 13]>
    ...     relu (float[N, 4, 8, 8] x) => (float[N, 4, 8, 8] y) { y = Relu(x) }'''), "relu.onnx")
    >>> load_model("relu.onnx", input_shape=[1, 4, 8, 8])["main"].params[0].ty
    R.Tensor((1, 4, 8, 8), dtype="float32")
    >>> load_model("relu.onnx", input_shape=[1, 3, 8, 8])
    Traceback (most recent call last):
    ...
    layoutopt.errors.ProblemError: model 'relu.onnx': input 'x' is declared [None, 4, 8, 8], which the given
    shape [1, 3, 8, 8] does not fit
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import ProblemError
from .._tvm import first_line, import_tvm

__all__ = ["ModelOrigin", "OnnxOrigin", "TorchOrigin", "fold_shapes", "load_model", "load_with_origin"]


@dataclass(frozen=True)
class OnnxOrigin:
    """A model loaded from an ONNX file: its ``path``, the ``model`` (``onnx.ModelProto``) as TVM's
    frontend imported it (its shape computations folded) and the input ``shapes`` it was given."""

    path: str
    model: Any = field(repr=False)
    shapes: Mapping[str, Sequence[int]] = field(default_factory=dict)


@dataclass(frozen=True)
class TorchOrigin:
    """A model loaded from a ``torch.export`` program (``.pt2``) at ``path``."""

    path: str


#: where a model came from: what :func:`~layoutopt.tvm.evaluate.origin.check_import` compares
#: TVM's import of it with
ModelOrigin = OnnxOrigin | TorchOrigin


def load_model(
    path: str | Path | None = None,
    input_shape: Mapping[str, Sequence[int]] | Sequence[int] | None = None,
    *,
    fold: bool = True,
    shapes_from: str | None = None,
):
    """A Relax module from an ONNX file, a ``torch.export`` ``.pt2`` file, or the embedded default.

    Args:
        path: ``MODEL.onnx``, ``MODEL.pt2`` (needs torch), or None for
            :func:`layoutopt.tvm.frontend.models.default_model`.
        input_shape: one shape (for a single-input model) or ``{input name: shape}``; ONNX inputs
            with symbolic dimensions need it.
        fold: an ONNX model that computes shapes at run time (``Shape`` ops feeding ``Reshape``,
            ``Expand``..., as exporters write dynamic batch and image sizes) has those subgraphs folded
            for the given static input shapes first (:func:`fold_shapes`, with onnxslim from the
            ``tvm`` extra): TVM's ONNX frontend cannot import most of them.
        shapes_from: where ``input_shape`` came from, named when it does not fit (default: "the
            given shape"; e.g. ``"solution file 'det.solution.json'"``).

    Raises:
        ProblemError: unreadable file, unknown format, a shape that does not fit the model, a model
            TVM's frontend cannot import (naming the node and its op, in one line).

    Example:
        >>> load_model()["main"].params[0].ty          # no file: the embedded default model
        R.Tensor((1, 3, 56, 56), dtype="float32")
        >>> load_model("resnet50.onnx", [1, 3, 224, 224])
        Traceback (most recent call last):
        ...
        layoutopt.errors.ProblemError: model file 'resnet50.onnx' does not exist

        A model that computes shapes at run time: :func:`fold_shapes`' example.
    """
    return load_with_origin(path, input_shape, fold=fold, shapes_from=shapes_from)[0]


def load_with_origin(
    path: str | Path | None = None,
    input_shape: Mapping[str, Sequence[int]] | Sequence[int] | None = None,
    *,
    fold: bool = True,
    shapes_from: str | None = None,
) -> tuple[Any, ModelOrigin | None]:
    """:func:`load_model`, and where the module came from: an :class:`OnnxOrigin`
    or :class:`TorchOrigin` (None for the embedded default), which
    ``tune_and_build(mod, origin=...)`` checks TVM's import against
    (:func:`~layoutopt.tvm.evaluate.origin.check_import`).

    Example:
        >>> import onnx
        >>> onnx.save(onnx.parser.parse_model('''<ir_version: 8, opset_import: ["" : 13]>
        ...     relu (float[N, 4, 8, 8] x) => (float[N, 4, 8, 8] y) { y = Relu(x) }'''), "relu.onnx")
        >>> mod, origin = load_with_origin("relu.onnx", [1, 4, 8, 8])
        >>> origin.path, dict(origin.shapes)
        ('relu.onnx', {'x': [1, 4, 8, 8]})
    """
    if path is None:
        from .models import default_model

        if input_shape is not None:
            raise ProblemError("--input-shape applies to a model file; the default model has a fixed input")
        return default_model(), None
    path = Path(path)
    if not path.is_file():
        raise ProblemError(f"model file {str(path)!r} does not exist")
    suffix = path.suffix.lower()
    if suffix == ".onnx":
        mod, model, shapes = _load_onnx(path, input_shape, fold, shapes_from)
        return mod, OnnxOrigin(str(path), model, shapes)
    if suffix in (".pt2", ".pt"):
        return _load_exported_program(path, input_shape), TorchOrigin(str(path))
    raise ProblemError(
        f"model {str(path)!r}: unknown format {suffix!r}; expected .onnx or .pt2 (torch.export)"
    )


def _load_onnx(path: Path, input_shape, fold: bool = True, shapes_from: str | None = None):
    try:
        import onnx
    except ImportError:
        from ...errors import MissingExtraError

        raise MissingExtraError("onnx", "tvm", "loading ONNX models") from None
    from .onnx_import import quiet_import

    try:
        model = onnx.load(str(path))
    except Exception as exc:  # onnx raises DecodeError, OSError... with no file name
        raise ProblemError(f"model {str(path)!r} is not a readable ONNX file: {exc}") from None
    if not model.ir_version and not model.HasField("graph"):  # an empty file parses as an empty model
        what = "is empty (0 bytes)" if path.stat().st_size == 0 else "holds no IR version and no graph"
        raise ProblemError(f"model {str(path)!r} {what}: not an ONNX model")
    initializers = {init.name for init in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in initializers]
    declared = {
        i.name: [d.dim_value if d.HasField("dim_value") else None for d in i.type.tensor_type.shape.dim]
        for i in inputs
    }
    shapes = _match_shapes(str(path), declared, input_shape, shapes_from)
    computes_shapes = any(node.op_type in _SHAPE_OPS for node in model.graph.node)
    if fold and computes_shapes:
        model = fold_shapes(model, shapes, where=str(path))
    try:
        mod = quiet_import(model, shapes)
    except ProblemError as exc:  # a node layoutopt's own converters refuse (they name it)
        raise ProblemError(f"model {str(path)!r} with input shapes {shapes}: {exc}") from None
    except Exception as exc:  # a shape the graph cannot take, an op the frontend lacks...
        hint = ""
        if computes_shapes and not fold:
            hint = " (the model computes shapes at run time: load it with fold=True)"
        raise ProblemError(f"model {str(path)!r} with input shapes {shapes}: {_import_failure(exc)}{hint}") \
            from None
    return mod, model, shapes


#: ONNX ops whose output is a tensor's shape: a model with them computes shapes at run time
_SHAPE_OPS = frozenset({"Shape", "Size"})


def _import_failure(exc: BaseException) -> str:
    """One line naming the frontend, and the ONNX node (name and op) it failed on when known.

    The frontend converts node by node in ``_construct_nodes``; the node it was converting is that
    frame's local ``node``.
    """
    tvm = import_tvm()
    frontend = f"TVM {tvm.__version__}'s ONNX frontend (tvm.relax.frontend.onnx)"
    node = None
    trace = exc.__traceback__
    while trace is not None:
        candidate = trace.tb_frame.f_locals.get("node")
        if trace.tb_frame.f_code.co_name == "_construct_nodes" and hasattr(candidate, "op_type"):
            node = candidate
        trace = trace.tb_next
    if node is not None:
        return f"{frontend} cannot import node {node.name!r} (op {node.op_type}): {first_line(exc)}"
    return f"{frontend} cannot import it: {first_line(exc)}"


def fold_shapes(model, shapes: Mapping[str, Sequence[int]], where: str = "the model"):
    """``model`` (an ``onnx.ModelProto``) with its inputs fixed to ``shapes`` and every subgraph that
    computes a shape folded to a constant, by onnxslim (in the ``tvm`` extra).

    Example:
        >>> import onnx
        >>> model = onnx.parser.parse_model('''<ir_version: 8, opset_import: ["" : 13]>
        ...     flatten (float[N, 4, 2, 2] x) => (float[N, 16] y)
        ...             <int64[1] zero = {0}, int64[1] one = {1}, int64[1] rest = {16}> {
        ...         shape = Shape(x)
        ...         batch = Slice(shape, zero, one)
        ...         target = Concat<axis = 0>(batch, rest)
        ...         y = Reshape(x, target)
        ...     }''')
        >>> [node.op_type for node in fold_shapes(model, {"x": [1, 4, 2, 2]}).graph.node]
        ['Reshape']
        >>> onnx.save(model, "flatten.onnx")      # load_model folds it before TVM's frontend reads it
        >>> print(load_model("flatten.onnx", [1, 4, 2, 2]).script())
        # from tvm.script import ir as I
        ...
            def main(x: R.Tensor((1, 4, 2, 2), dtype="float32")) -> R.Tensor((1, 16), dtype="float32"):
                ...
                    gv: R.Tensor((1, 16), dtype="float32") = R.reshape(x, R.shape([1, 16]))
        ...
    """
    try:
        import onnxslim
    except ImportError:
        from ...errors import MissingExtraError

        raise MissingExtraError("onnxslim", "tvm", f"folding the shape computations of {where}") from None
    specs = [f"{name}:{','.join(str(d) for d in shape)}" for name, shape in shapes.items()]
    try:
        return onnxslim.slim(model, input_shapes=specs)
    except Exception as exc:
        raise ProblemError(f"model {where!r}: folding its shape computations for {dict(shapes)} "
                           f"(onnxslim) failed: {first_line(exc, with_type=True)}") from None


def _match_shapes(where: str, declared: Mapping[str, list], input_shape,
                  shapes_from: str | None = None) -> dict[str, list[int]]:
    """The static shape of every input: the one given where given (``shapes_from`` names where it
    came from), else the declared one; ProblemError naming the input that does not fit."""
    origin = f" (from {shapes_from})" if shapes_from else ""
    if input_shape is None:
        given = {}
    elif isinstance(input_shape, Mapping):
        given = {str(k): list(v) for k, v in input_shape.items()}
    else:
        if len(declared) != 1:
            raise ProblemError(f"model {where!r} has {len(declared)} inputs ({', '.join(declared)}); "
                               "give --input-shape NAME=1,3,224,224 for each")
        given = {next(iter(declared)): list(input_shape)}
    unknown = set(given) - set(declared)
    if unknown:
        raise ProblemError(f"model {where!r} has no input named {sorted(unknown)[0]!r}{origin}; "
                           f"its inputs are {', '.join(declared)}")
    shapes = {}
    for name, dims in declared.items():
        shape = given.get(name)
        if shape is None:
            if any(d is None or d <= 0 for d in dims):
                raise ProblemError(f"model {where!r}: input {name!r} has symbolic dimensions {dims}; "
                                   "give --input-shape")
            shape = dims
        if any(not isinstance(d, (int, np.integer)) or d <= 0 for d in shape):
            raise ProblemError(f"model {where!r}: input shape {shape} for {name!r}{origin} must be positive "
                               "integers")
        fits = len(shape) == len(dims) and all(
            d is None or d <= 0 or d == s for d, s in zip(dims, shape, strict=True)
        )
        if not fits:
            raise ProblemError(f"model {where!r}: input {name!r} is declared {dims}, "
                               f"which the {'shape' if shapes_from else 'given shape'} {list(shape)}{origin} "
                               "does not fit")
        shapes[name] = [int(d) for d in shape]
    return shapes


def _load_exported_program(path: Path, input_shape):
    try:
        import torch
    except ImportError:
        from ...errors import MissingExtraError

        raise MissingExtraError("torch", "torch", "loading torch.export (.pt2) models") from None
    import_tvm()
    from tvm.relax.frontend.torch import from_exported_program

    if input_shape is not None:
        raise ProblemError(f"model {str(path)!r}: a torch.export program has fixed input shapes; "
                           "export it again for another shape")
    try:
        program = torch.export.load(str(path))
    except Exception as exc:
        raise ProblemError(f"model {str(path)!r} is not a readable torch.export file: {exc}") from None
    return from_exported_program(program, keep_params_as_input=False)

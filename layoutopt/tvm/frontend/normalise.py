"""Normalise a Relax model as the frontends produce it, before its layout graph is extracted: :func:`prepare`.

Batch norm folded into its conv or decomposed into per-channel constant arithmetic (computed in numpy),
constants folded, the ONNX frontend's ``Clip`` written as ``maximum``/``minimum`` (which follow layouts),
binding names made unique (layout graph nodes are keyed by them).

Example:
    >>> import onnx
    >>> from tvm.relax.frontend.onnx import from_onnx
    >>> model = onnx.parser.parse_model('''<ir_version: 8, opset_import: ["" : 13]>
    ...     conv_bn_relu6 (float[1, 2, 4, 4] x) => (float[1, 2, 4, 4] y)
    ...         <float[2, 2, 1, 1] w = {1, 0, 0, 1}, float[2] scale = {1, 2}, float[2] shift = {0, 1},
    ...          float[2] mean = {0, 0}, float[2] var = {1, 1}, float low = {0}, float high = {6}> {
    ...         c = Conv(x, w)
    ...         n = BatchNormalization(c, scale, shift, mean, var)
    ...         y = Clip(n, low, high)
    ...     }''')
    >>> print(prepare(from_onnx(model)).script())    # batch norm in the conv and a bias; Clip as max/min
    # from tvm.script import ir as I
    ...
            with R.dataflow():
                lv5: R.Tensor((1, 2, 4, 4), dtype="float32") = R.nn.conv2d(x, ...)
                lv2: R.Tensor((1, 2, 4, 4), dtype="float32") = R.add(lv5, metadata["ir.GenericConst"][1])
                lv7: R.Tensor((1, 2, 4, 4), dtype="float32") = R.maximum(lv2, R.const(0.0, "float32"))
                gv: R.Tensor((1, 2, 4, 4), dtype="float32") = R.minimum(lv7, R.const(6.0, "float32"))
                R.output(gv)
    ...
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ...errors import ProblemError
from .._tvm import first_line, import_tvm
from ..ops import is_tensor_constant, static_shape
from .shuffle import fold_channel_shuffles

__all__ = ["channel_shuffles_as_take", "clip_bounds_as_ops", "fold_elementwise_constants",
           "layer_norms_as_one_op", "main_function", "prepare"]



def prepare(mod, params: Mapping[str, Any] | Sequence[Any] | None = None):
    """Normalise a Relax module for extraction and rewriting; returns a new ``IRModule``.

    Runs, on the module (``main`` must exist):

    * ``BindParams("main", ...)`` when ``params`` is given, so that weights kept as function
      parameters become constants: a mapping ``{parameter name: array}``, a list of arrays for the
      parameters after the model inputs (``num_input``), or what ``relax.frontend.detach_params``
      returns (``{"main": [arrays]}``), e.g. after ``from_onnx(..., keep_params_in_input=True)``;
    * ``FoldBatchnormToConv2D`` (batch norm right after a conv2d goes into its weights),
      ``DecomposeOpsForInference`` (other batch norms become per-channel constant arithmetic,
      which follows layouts), ``CanonicalizeBindings``, :func:`fold_elementwise_constants` (their
      constant arithmetic in numpy), ``FoldConstant`` and ``DeadCodeElimination``;
    * :func:`clip_bounds_as_ops` (the ONNX frontend's ``Clip`` as Relax ``maximum``/``minimum``);
    * :func:`channel_shuffles_as_take` (ShuffleNet's reshape -> transpose -> reshape as one gather of
      channels, which follows layouts), then :func:`~layoutopt.tvm.frontend.shuffle.fold_channel_shuffles`
      (folded into the conv after it, or moved past the per-channel ops before it);
    * :func:`layer_norms_as_one_op` (a layer norm written out as mean, subtract, power, mean, add,
      sqrt, divide, multiply and add, as exporters write it, as one ``layer_norm``: one kernel);
    * renaming of duplicate binding names in ``main`` (``lv7``, ``lv7`` -> ``lv7``, ``lv7_1``, as
      TVMScript prints them): layout graph nodes are keyed by binding name, so names must be unique.

    The rewrite (:mod:`layoutopt.tvm.building.apply`) must run on the module this returns, so that node
    names match bindings. It is deterministic: preparing twice gives the same names.

    Example:
        Weights kept as parameters (``keep_params_in_input=True``) bound as constants, by name:

        >>> import onnx
        >>> from tvm.relax.frontend.onnx import from_onnx
        >>> model = onnx.parser.parse_model('''<ir_version: 8, opset_import: ["" : 13]>
        ...     conv (float[1, 2, 4, 4] x) => (float[1, 2, 4, 4] y) <float[2, 2, 1, 1] w = {1, 0, 0, 1}> {
        ...         y = Conv(x, w)
        ...     }''')
        >>> mod = from_onnx(model, keep_params_in_input=True)
        >>> [param.name for param in mod["main"].params]
        ['x', 'w']
        >>> mod = prepare(mod, {"w": np.eye(2, dtype="float32").reshape(2, 2, 1, 1)})
        >>> [param.name for param in mod["main"].params]
        ['x']
    """
    tvm = import_tvm()
    relax = tvm.relax
    main_function(mod)
    if params:
        try:
            mod = relax.transform.BindParams("main", _params_by_name(mod["main"], params))(mod)
        except ProblemError:
            raise
        except Exception as exc:  # TVM's message is a long C++ trace
            raise ProblemError(f"cannot bind params to main: {first_line(exc)}") from None
    fold = tvm.transform.Sequential([relax.transform.FoldConstant(), relax.transform.DeadCodeElimination()])
    try:
        mod = clip_bounds_as_ops(fold(fold_elementwise_constants(_decompose_batch_norms(mod))))
        mod = layer_norms_as_one_op(fold_channel_shuffles(channel_shuffles_as_take(mod)))
    except Exception as exc:
        raise ProblemError(f"normalising the module failed: {first_line(exc)}") from None
    return _unique_names(mod)


def _decompose_batch_norms(mod):
    """:func:`prepare`'s first passes: batch norms into conv weights or per-channel arithmetic."""
    tvm = import_tvm()
    relax = tvm.relax
    return tvm.transform.Sequential([
        relax.transform.FoldBatchnormToConv2D(),
        relax.transform.DecomposeOpsForInference(),
        relax.transform.CanonicalizeBindings(),
    ])(mod)


#: Relax ops on constants that :func:`fold_elementwise_constants` computes with numpy
_NUMPY_FOLDS: dict[str, Callable[..., np.ndarray]] = {
    "relax.add": np.add, "relax.subtract": np.subtract, "relax.multiply": np.multiply,
    "relax.divide": np.divide, "relax.sqrt": np.sqrt,
}
#: ... and those that only give their first argument's data another shape (the call's)
_NUMPY_RESHAPES = ("relax.reshape", "relax.expand_dims", "relax.squeeze")


def fold_elementwise_constants(mod):
    """``mod`` with the elementwise arithmetic and reshapes of constants in ``main`` computed in
    numpy and bound as constants; part of :func:`prepare`, before TVM's ``FoldConstant``.

    ``FoldBatchnormToConv2D`` and ``DecomposeOpsForInference`` leave up to eight per batch norm (the
    scale ``gamma / sqrt(var + eps)`` into the weights, the shift into a bias), and ``FoldConstant``
    compiles and runs each one as a kernel of its own: tens of seconds for the 53 batch norms of a
    ResNet-50 written in ONNX (``benchmarks/onnx_written.py``), where numpy takes milliseconds. Ops it
    does not know, non-float results (integer division and overflow follow TVM's rules, not numpy's)
    and results without the call's static shape are left to ``FoldConstant``.

    Example:
        >>> import onnx
        >>> from tvm import relax
        >>> from tvm.relax.frontend.onnx import from_onnx
        >>> model = onnx.parser.parse_model('''<ir_version: 8, opset_import: ["" : 13]>
        ...     bn (float[1, 2, 4, 4] x) => (float[1, 2, 4, 4] y)
        ...         <float[2] scale = {1, 2}, float[2] shift = {0, 1}, float[2] mean = {0, 0},
        ...          float[2] var = {1, 1}> {
        ...         y = BatchNormalization(x, scale, shift, mean, var)
        ...     }''')
        >>> mod = relax.transform.DecomposeOpsForInference()(from_onnx(model))
        >>> folded = fold_elementwise_constants(mod)
        >>> [(op, mod.script().count(op), folded.script().count(op)) for op in ("R.expand_dims(", "R.sqrt(")]
        [('R.expand_dims(', 4, 0), ('R.sqrt(', 1, 0)]
    """
    tvm = import_tvm()
    relax = tvm.relax
    reshapes = [tvm.ir.Op.get(name) for name in _NUMPY_RESHAPES]
    folds = {tvm.ir.Op.get(name): function for name, function in _NUMPY_FOLDS.items()}

    @relax.expr_functor.mutator
    class _Folder(relax.expr_functor.PyExprMutator):
        def value(self, arg) -> np.ndarray | float | None:
            if isinstance(arg, relax.Var):
                arg = self.lookup_binding(arg)
            if arg is None or not isinstance(arg, tvm.ir.expr.Constant):
                return None
            if is_tensor_constant(arg):
                return arg.value.numpy()
            # a scalar argument (batch norm's epsilon) is a FloatImm or IntImm holding a Python number
            return arg.value if isinstance(arg.value, int | float) else None

        def visit_call_(self, call):
            call = super().visit_call_(call)
            shape = static_shape(call)
            reshape = call.op in reshapes
            if shape is None or not (reshape or call.op in folds):
                return call
            dtype = str(call.ty.dtype)
            if not dtype.startswith("float"):
                return call
            values = [self.value(arg) for arg in call.args[:1 if reshape else None]]
            if any(v is None for v in values) or not isinstance(values[0], np.ndarray):
                return call
            with np.errstate(all="ignore"):  # inf and NaN come out as TVM's kernels would give them
                result = np.reshape(values[0], shape) if reshape else folds[call.op](*values)
            result = np.asarray(result).astype(dtype, copy=False)
            if list(result.shape) != shape:
                return call
            return relax.const(result, dtype)

    return _with_main(mod, _Folder(mod).visit_expr(mod["main"]))


def clip_bounds_as_ops(mod):
    """``mod`` with each clip bound the ONNX frontend imported as a TOPI ``call_tir`` (``maximum``
    or ``minimum`` of a tensor and a scalar constant, once constants are folded) written as the
    Relax op itself; part of :func:`prepare`.

    TVM's ONNX frontend imports ``Clip`` (ReLU6, hard-swish) with ``emit_te(topi.maximum, ...)``:
    opaque calls that the layout model must treat as plain-NCHW boundaries, a pair of layout
    transforms around every one. ``relax.maximum``/``relax.minimum`` by a scalar follow their input's
    layout instead (and legalize to the same TOPI computation).

    Example:
        >>> import onnx
        >>> from tvm import relax
        >>> from tvm.relax.frontend.onnx import from_onnx
        >>> model = onnx.parser.parse_model('''<ir_version: 8, opset_import: ["" : 13]>
        ...     relu6 (float[1, 2, 4, 4] x) => (float[1, 2, 4, 4] y) <float low = {0}, float high = {6}> {
        ...         y = Clip(x, low, high)
        ...     }''')
        >>> mod = relax.transform.FoldConstant()(from_onnx(model))
        >>> mod.script().count("R.call_tir("), clip_bounds_as_ops(mod).script().count("R.call_tir(")
        (2, 0)
    """
    tvm = import_tvm()
    relax = tvm.relax
    call_tir = tvm.ir.Op.get("relax.call_tir")
    ops = {"maximum": relax.op.maximum, "minimum": relax.op.minimum}

    @relax.expr_functor.mutator
    class _ClipBounds(relax.expr_functor.PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            if call.op != call_tir or not isinstance(call.args[0], tvm.ir.GlobalVar):
                return call
            op = ops.get(call.args[0].name_hint.rstrip("0123456789_"))
            args = call.args[1]
            if op is None or not isinstance(args, relax.Tuple) or len(args.fields) != 2:
                return call
            tensor, bound = args.fields
            shape = static_shape(tensor) if isinstance(tensor, relax.Var) else None
            if _scalar(bound) is None or shape is None or shape != static_shape(call) or \
                    str(tensor.ty.dtype) != str(call.ty.dtype):
                return call
            return op(tensor, bound)

    return relax.transform.DeadCodeElimination()(_with_main(mod, _ClipBounds(mod).visit_expr(mod["main"])))


def channel_shuffles_as_take(mod):
    """``mod`` with each channel shuffle (``reshape`` to ``(N, g, C/g, H, W)``, ``permute_dims`` of axes 1
    and 2, ``reshape`` back to ``(N, C, H, W)``, as ShuffleNet writes it) as one ``take`` of the
    channels in their shuffled order; part of :func:`prepare`.

    As three ops the shuffle is a run of plain-NCHW boundaries (a round trip through NCHW in a blocked
    build); as a gather of channels it follows its input's layout (in a blocked layout: a permutation
    of blocks and lanes, :mod:`layoutopt.tvm.building.apply`). Channel ``c`` of the output is channel
    ``(c % g) * (C / g) + c // g`` of the input.

    Example:
        >>> import numpy as np
        >>> from tvm import relax
        >>> bb = relax.BlockBuilder()
        >>> x = relax.Var("x", relax.TensorType((1, 6, 4, 4), "float32"))
        >>> with bb.function("main", [x]):
        ...     with bb.dataflow():
        ...         grouped = bb.emit(relax.op.reshape(x, (1, 2, 3, 4, 4)))
        ...         swapped = bb.emit(relax.op.permute_dims(grouped, [0, 2, 1, 3, 4]))
        ...         out = bb.emit_output(relax.op.reshape(swapped, (1, 6, 4, 4)))
        ...     _ = bb.emit_func_output(out)
        >>> shuffled = channel_shuffles_as_take(bb.get())
        >>> [b.value.op.name for b in shuffled["main"].body.blocks[0].bindings if hasattr(b.value, "op")]
        ['relax.take']
        >>> shuffled["main"].body.blocks[0].bindings[0].value.args[1].value.numpy().tolist()
        [0, 3, 1, 4, 2, 5]
    """
    tvm = import_tvm()
    relax = tvm.relax
    reshape, permute = tvm.ir.Op.get("relax.reshape"), tvm.ir.Op.get("relax.permute_dims")

    @relax.expr_functor.mutator
    class _Shuffles(relax.expr_functor.PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            out = static_shape(call)
            lookup = self.lookup_binding
            transposed = _bound_call(call.args[0], permute, lookup) if call.op == reshape else None
            grouped = _bound_call(transposed.args[0], reshape, lookup) if transposed is not None else None
            if grouped is None or out is None or len(out) != 4:
                return call
            data, five = grouped.args[0], static_shape(grouped)
            axes = [int(a) for a in transposed.attrs.axes] if transposed.attrs.axes is not None else None
            if static_shape(data) != out or five is None or len(five) != 5 or axes != [0, 2, 1, 3, 4] or \
                    five[0] != out[0] or five[1] * five[2] != out[1] or five[3:] != out[2:]:
                return call
            groups, channels = five[1], out[1]
            order = np.arange(channels)
            source = (order % groups) * (channels // groups) + order // groups
            return relax.op.take(data, relax.const(source.astype("int64")), axis=1)

    return relax.transform.DeadCodeElimination()(_with_main(mod, _Shuffles(mod).visit_expr(mod["main"])))


def layer_norms_as_one_op(mod):
    """``mod`` with each layer norm written out op by op, ``(x - mean(x)) / sqrt(mean((x - mean(x)) ** 2)
    + eps) * gamma + beta`` over the last axes (as Paddle's and PyTorch's ONNX exporters write it), as one
    ``relax.nn.layer_norm``; part of :func:`prepare`.

    Written out, a norm runs as four or five kernels, each a pass over the tensor (PP-OCRv4's
    recogniser: five norms of 40 x 120 in 0.22 ms, znver3); as one op it is one kernel. Both means must
    reduce the same trailing axes with ``keepdims``, the power be 2, and ``eps``, ``gamma`` and ``beta``
    constants (``gamma`` and ``beta`` of the normalised axes' shape, leading ones aside).

    Example:
        >>> from tvm import relax
        >>> bb, x = relax.BlockBuilder(), relax.Var("x", relax.TensorType((1, 4, 6), "float32"))
        >>> const = lambda value: relax.const(np.full((6,), value, "float32"))
        >>> with bb.function("main", [x]):
        ...     with bb.dataflow():
        ...         centred = bb.emit(relax.op.subtract(x, relax.op.mean(x, [-1], keepdims=True)))
        ...         variance = relax.op.mean(relax.op.power(centred, relax.const(2.0)), [-1], keepdims=True)
        ...         scale = relax.op.sqrt(relax.op.add(variance, relax.const(1e-5)))
        ...         out = bb.emit_output(relax.op.add(relax.op.multiply(relax.op.divide(centred, scale),
        ...                                                             const(2.0)), const(1.0)))
        ...     _ = bb.emit_func_output(out)
        >>> norm = layer_norms_as_one_op(bb.get())["main"].body.blocks[0].bindings[-1].value
        >>> norm.op.name, [int(a) for a in norm.attrs.axes], round(float(norm.attrs.epsilon), 6)
        ('relax.nn.layer_norm', [2], 1e-05)
    """
    tvm = import_tvm()
    relax = tvm.relax
    ops = {name: tvm.ir.Op.get(f"relax.{name}")
           for name in ("add", "multiply", "divide", "sqrt", "mean", "power", "subtract")}

    @relax.expr_functor.mutator
    class _LayerNorms(relax.expr_functor.PyExprMutator):
        def bound(self, expr, name):
            return _bound_call(expr, ops[name], self.lookup_binding)

        def either(self, call, name):
            """``(the argument that is a call of ``name``, the other)``, or ``(None, None)``."""
            for first, second in (call.args, call.args[::-1]):
                inner = self.bound(first, name)
                if inner is not None:
                    return inner, second
            return None, None

        def visit_call_(self, call):
            call = super().visit_call_(call)
            return self.layer_norm(call) if call.op == ops["add"] else call

        def layer_norm(self, call):
            scaled, beta = self.either(call, "multiply")
            normed, gamma = self.either(scaled, "divide") if scaled is not None else (None, None)
            if normed is None:
                return call
            centred, scale = normed.args
            difference = self.bound(centred, "subtract")
            mean = self.bound(difference.args[1], "mean") if difference is not None else None
            root = self.bound(scale, "sqrt")
            shifted = self.bound(root.args[0], "add") if root is not None else None
            variance, eps = self.either(shifted, "mean") if shifted is not None else (None, None)
            squared = self.bound(variance.args[0], "power") if variance is not None else None
            shape = static_shape(call)
            if mean is None or squared is None or shape is None:
                return call
            data = difference.args[0]
            axes = _trailing_axes(mean, len(shape))
            if not (mean.args[0].same_as(data) and squared.args[0].same_as(centred)) or axes is None \
                    or axes != _trailing_axes(variance, len(shape)) or static_shape(data) != shape:
                return call
            epsilon, power = _scalar(eps), _scalar(squared.args[1])
            weights = [_of_shape(w, shape[len(shape) - len(axes):]) for w in (gamma, beta)]
            if epsilon is None or power != 2.0 or weights[0] is None or weights[1] is None:
                return call
            return relax.op.nn.layer_norm(data, relax.const(weights[0]), relax.const(weights[1]), axes,
                                          epsilon=epsilon)

    return relax.transform.DeadCodeElimination()(_with_main(mod, _LayerNorms(mod).visit_expr(mod["main"])))


def _bound_call(expr, op, lookup):
    """The call of ``op`` that ``expr`` is, or that the variable ``expr`` is bound to (``lookup``: a
    mutator's ``lookup_binding``), else None."""
    relax = import_tvm().relax
    value = lookup(expr) if isinstance(expr, relax.Var) else expr
    return value if isinstance(value, relax.Call) and value.op == op else None


def _trailing_axes(mean, ndim: int) -> list[int] | None:
    """The axes a ``keepdims`` mean reduces, when they are the last ones (a layer norm's), else None."""
    if mean.attrs.axis is None or not mean.attrs.keepdims:
        return None
    axes = sorted(int(a) % ndim for a in mean.attrs.axis)
    return axes if axes == list(range(ndim - len(axes), ndim)) else None


def _scalar(expr) -> float | None:
    """The value of a one-element tensor constant, else None."""
    if not is_tensor_constant(expr):
        return None
    value = expr.value.numpy()
    return float(value.reshape(())) if value.size == 1 else None


def _of_shape(expr, shape: list[int]) -> np.ndarray | None:
    """A tensor constant as an array of ``shape`` (leading ones dropped), else None."""
    if expr is None or not is_tensor_constant(expr):
        return None
    value = expr.value.numpy()
    squeezed = [d for d in shape if d != 1]
    if value.size != int(np.prod(shape)) or [d for d in value.shape if d != 1] != squeezed:
        return None
    return np.ascontiguousarray(value.reshape(shape))


def _params_by_name(main, params) -> dict[str, Any]:
    """``params`` (see :func:`prepare`) as ``{parameter name: array}``."""
    if isinstance(params, Mapping) and set(params) == {"main"} and not isinstance(params["main"], Mapping):
        params = params["main"]  # relax.frontend.detach_params(mod)[1]
    if isinstance(params, Mapping):
        return {str(name): value for name, value in params.items()}
    values = list(params)
    if not main.attrs or "num_input" not in main.attrs:
        raise ProblemError(
            "params: main has no 'num_input' attribute telling inputs from weights; "
            "give a mapping {parameter name: array} instead"
        )
    weights = list(main.params)[int(main.attrs["num_input"]):]
    if len(values) != len(weights):
        raise ProblemError(
            f"params: {len(values)} arrays given for main's {len(weights)} weight parameters "
            f"({', '.join(p.name for p in weights[:5])}...); give a mapping {{name: array}} instead"
        )
    return {param.name: value for param, value in zip(weights, values, strict=True)}


def main_function(mod):
    """``mod["main"]`` as a Relax function, or a ProblemError saying what is there instead."""
    tvm = import_tvm()
    if not isinstance(mod, tvm.IRModule):
        raise ProblemError(
            f"expected a tvm IRModule (e.g. from relax.frontend.onnx.from_onnx), not {type(mod).__name__}"
        )
    names = sorted(gv.name_hint for gv in mod.get_global_vars())
    if "main" not in names:
        raise ProblemError(f"the module has no 'main' function (it has: {', '.join(names) or 'nothing'})")
    main = mod["main"]
    if not isinstance(main, tvm.relax.Function):
        raise ProblemError(f"'main' is a {type(main).__name__}, not a Relax function")
    return main


def _unique_names(mod):
    """Give every Var defined in ``main`` a distinct name (the first keeps its own)."""
    tvm = import_tvm()
    relax = tvm.relax
    main = mod["main"]
    names = [p.name for p in main.params] + [b.var.name for blk in main.body.blocks for b in blk.bindings]
    if len(set(names)) == len(names):
        return mod

    @relax.expr_functor.mutator
    class _Renamer(relax.expr_functor.PyExprMutator):
        def __init__(self, module):
            super().__init__(module)
            self.taken: set[str] = set()

        def _fresh(self, var, cls):
            name = var.name
            if name in self.taken:
                suffix = 1
                while f"{name}_{suffix}" in self.taken:
                    suffix += 1
                new = cls(f"{name}_{suffix}", var.ty)
                self.set_var_remap(var, new)
                var = new
            self.taken.add(var.name)
            return var

        def visit_var_def_(self, var):
            return self._fresh(var, relax.Var)

        def visit_dataflow_var_def_(self, var):
            return self._fresh(var, relax.DataflowVar)

    return _with_main(mod, _Renamer(mod).visit_expr(main))


def _with_main(mod, main):
    """``mod`` with ``main`` in place of its own (a mutator's output), the other functions kept."""
    tvm = import_tvm()
    functions = dict(mod.functions_items())
    functions[mod.get_global_var("main")] = main
    return tvm.IRModule(functions, attrs=mod.attrs)

"""Apply a layout solution to a Relax module, and build the result for the CPU.

:func:`ApplyLayouts` is a Relax pass (usable inside your own ``tvm.transform.Sequential``) that follows
the layout model of :mod:`layoutopt.tvm` (the one extraction costs):

* a **target op** (conv2d) runs in its chosen ``(in, out)`` layout: data ``NCHW{ic}c``, kernel
  ``OIHW{ic}i{oc}o`` re-laid out at compile time (numpy) when it is a constant, output ``NCHW{oc}c``;
* **layout-following ops** (unary elementwise, per-channel constant bias/scale, pooling) run in
  whatever layout their input arrives in, their per-channel constants repacked to match;
* a **multi-input op** (add, concat...) runs in its chosen common layout, every input converted to it;
* everything else (reshape, softmax, the function's outputs, unknown ops) gets plain ``NCHW``.

A ``relax.op.layout_transform`` is inserted only where a producer's layout differs from what its
consumer needs, once per (value, destination layout): two consumers reading one value in the same
foreign layout share the transform. A solution that keeps everything in ``NCHW`` gives back the
original program (structurally equal).

:func:`build` then legalizes blocked conv2d (TVM's own legalizer refuses it), schedules every kernel
(:func:`layoutopt.tvm.kernels.schedule_module`) and lowers for the Relax VM.

Example::

    import numpy as np, tvm
    from layoutopt.tvm import ApplyLayouts, build
    mod = ApplyLayouts({"conv1": ("NCHW", "NCHW16c"), "conv2": ("NCHW16c", "NCHW16c")})(mod)
    vm = tvm.relax.VirtualMachine(build(mod, "llvm"), tvm.cpu())
    out = vm["main"](tvm.runtime.tensor(np.zeros((1, 3, 32, 32), "float32")))
"""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import ProblemError
from ._tvm import import_tvm, resolve_target
from .kernels import (
    CONV2D_SCHEDULE_KNOBS,
    SCHEDULES_ATTR,
    _epilogue_shapes,
    _layout_shape,
    conv2d_schedule_key,
    layout_block,
    pack_conv2d_kernel,
    pack_data,
    schedule_module,
)

__all__ = [
    "NCHW",
    "ApplyLayouts",
    "apply_layouts",
    "apply_solution",
    "build",
    "count_layout_transforms",
    "expected_transforms",
    "parse_choice",
]

NCHW = "NCHW"
_DENSE_WEIGHT = re.compile(r"NK(?:([1-9][0-9]*)n)?")

#: unary elementwise ops: any layout, same layout out
UNARY_OPS = frozenset({
    "relax.nn.relu", "relax.nn.gelu", "relax.nn.gelu_tanh", "relax.nn.silu", "relax.nn.leakyrelu",
    "relax.nn.prelu_scalar", "relax.sigmoid", "relax.tanh", "relax.clip", "relax.exp", "relax.sqrt",
    "relax.rsqrt", "relax.negative", "relax.abs", "relax.square", "relax.erf", "relax.astype",
    "relax.nn.dropout", "relax.hard_sigmoid", "relax.nn.relu6",
})
#: binary elementwise ops: layout-following with a per-channel or scalar constant operand,
#: multi-input ops when both operands are tensors computed by the graph
BINARY_OPS = frozenset({
    "relax.add", "relax.multiply", "relax.subtract", "relax.divide", "relax.maximum", "relax.minimum",
    "relax.power",
})
#: pooling ops: re-emitted with ``layout=`` the input's layout
POOL_OPS = frozenset({"relax.nn.max_pool2d", "relax.nn.avg_pool2d"})
#: ops that combine several computed tensors in one common layout
CONCAT_OPS = frozenset({"relax.concat"})


def parse_choice(node: Hashable, choice: Any) -> tuple[str, str]:
    """Normalise one node's choice to an ``(in_layout, out_layout)`` pair.

    Accepted forms: a pair ``("NCHW16c", "NCHW8c")``, a label ``"NCHW16c->NCHW8c"``, a single layout
    ``"NCHW16c"`` (a multi-input op's common layout: in and out equal) or a candidate dict
    ``{"in": ..., "out": ...}`` (its other keys, such as a dense ``"weight"`` layout, are knobs the
    rewrite reads separately). A dense layer's plain ``"NC"`` counts as ``"NCHW"``.

    Example:
        >>> parse_choice("conv1", "NCHW16c->NCHW8c"), parse_choice("add", "NCHW8c")
        (('NCHW16c', 'NCHW8c'), ('NCHW8c', 'NCHW8c'))
    """
    if isinstance(choice, Mapping):
        pair = (choice.get("in"), choice.get("out"))
    elif isinstance(choice, str):
        pair = tuple(choice.split("->")) if "->" in choice else (choice, choice)
    elif isinstance(choice, (tuple, list)) and len(choice) == 2:
        pair = tuple(choice)
    else:
        raise ProblemError(
            f"node {node!r}: choice {choice!r} is not a layout, an (in, out) pair, a label 'IN->OUT' "
            "or a candidate dict"
        )
    if len(pair) != 2:
        raise ProblemError(f"node {node!r}: choice {choice!r} is not of the form 'IN->OUT'")
    pair = tuple(NCHW if layout == "NC" else layout for layout in pair)
    for layout in pair:
        try:
            layout_block(layout)
        except ProblemError as exc:
            raise ProblemError(f"node {node!r}: {exc}") from None
    return str(pair[0]), str(pair[1])


def _transform_index_map(src: str, dst: str) -> Callable:
    src_block, dst_block = layout_block(src), layout_block(dst)
    if src_block is None:
        return lambda n, c, h, w: (n, c // dst_block, h, w, c % dst_block)
    if dst_block is None:
        return lambda n, co, h, w, ci: (n, co * src_block + ci, h, w)
    return lambda n, co, h, w, ci: (
        n, (co * src_block + ci) // dst_block, h, w, (co * src_block + ci) % dst_block,
    )


# ----------------------------------------------------------------------------------------------
# the rewriter


def _static_shape(expr) -> list[int] | None:
    """The static shape of a tensor-typed expression, or None (tuples, dynamic shapes...)."""
    tvm = import_tvm()
    ty = expr.ty
    if not isinstance(ty, tvm.relax.TensorType) or ty.shape is None:
        return None
    try:
        return [int(s) for s in ty.shape]
    except (TypeError, ValueError, AttributeError):
        return None


def layout_carrier(call, op: str | None, is_data: Callable[[Any], bool] | None = None):
    """The computed operand whose layout a layout-following op keeps, or None when ``call`` is not one.

    The one classification extraction (:mod:`layoutopt.tvm.extract`) and the rewrite both use, so
    that the graph costs exactly the program the rewrite emits. Layout-following are:

    * a unary elementwise op (:data:`UNARY_OPS`) of a 4-D tensor returning one 4-D tensor (dropout's
      tuple output is not: a boundary);
    * max/avg pooling declared ``NCHW`` in and out (an ``NHWC`` pool is a boundary);
    * a binary elementwise op (:data:`BINARY_OPS`) of ONE computed 4-D tensor and one per-channel or
      scalar constant, in either order (``add(bias, x)`` as well as ``add(x, bias)``).

    ``is_data(var)`` tells computed tensors from other Vars (extraction's unbound weights); default:
    every Var is data.

    Example::

        layout_carrier(relu_call, "relax.nn.relu")   # the Var relu reads
    """
    tvm = import_tvm()
    relax = tvm.relax
    if op not in UNARY_OPS and op not in POOL_OPS and op not in BINARY_OPS:
        return None
    is_data = is_data or (lambda _var: True)
    args = list(call.args)
    if op in BINARY_OPS:
        tensors = [a for a in args if isinstance(a, relax.Var)]
        constants = [a for a in args if isinstance(a, tvm.ir.expr.Constant)]
        if len(tensors) != 1 or len(constants) != 1 or not is_data(tensors[0]):
            return None
        shape = _static_shape(tensors[0])
        ok = shape is not None and len(shape) == 4 and _per_channel(constants[0], shape[1])
        return tensors[0] if ok and _static_shape(call) == shape else None
    if not args or not isinstance(args[0], relax.Var) or not is_data(args[0]):
        return None
    shape = _static_shape(args[0])
    out_shape = _static_shape(call)
    if shape is None or len(shape) != 4 or out_shape is None or len(out_shape) != 4:
        return None  # e.g. dropout returns a tuple
    if op in POOL_OPS and (str(call.attrs.layout), str(call.attrs.out_layout)) != (NCHW, NCHW):
        return None
    return args[0]


class _Rewriter:
    """Rebuilds ``main`` binding by binding; ``env`` maps each original Var to (new Var, layout)."""

    def __init__(self, choices: Mapping[str, tuple[str, str]], knobs: Mapping[str, dict] | None = None,
                 context=None, epilogues: Mapping[str, Sequence[str]] | None = None):
        self.tvm = import_tvm()
        self.knobs = knobs or {}
        self.epilogues = epilogues or {}
        self.relax = self.tvm.relax
        self.choices = choices
        self.bb = self.relax.BlockBuilder(context)  # context: the module's other functions
        self.env: dict[Any, tuple[Any, str | None]] = {}
        self.converted: dict[tuple[Any, str], Any] = {}  # (original Var, layout) -> transformed Var
        self.used: set[str] = set()
        self.transforms = 0
        self.schedules: list[tuple[str, str, dict]] = []  # per blocked conv: full key, core key, knobs
        self.outputs: set[Any] = set()  # rewritten Vars that are outputs of the dataflow block

    # -- values in a requested layout ---------------------------------------------------------
    def value(self, expr, layout: str | None):
        """``expr`` of the original program, rewritten and delivered in ``layout`` (None: as is)."""
        relax = self.relax
        if isinstance(expr, relax.Var):
            new, current = self.env[expr]
            if layout is None or current is None or current == layout:
                return new
            key = (expr, layout)
            if key not in self.converted:
                channels = _static_shape(expr)[1]
                block = layout_block(layout)
                if block is not None and channels % block:
                    raise ProblemError(
                        f"value {expr.name!r} has {channels} channels, which layout {layout!r} cannot hold "
                        "(the block must divide the channel count)"
                    )
                transformed = relax.op.layout_transform(new, index_map=_transform_index_map(current, layout))
                self.converted[key] = self.bb.emit(transformed, name_hint=f"{expr.name}_{layout}")
                self.transforms += 1
            return self.converted[key]
        if isinstance(expr, self.tvm.ir.expr.Constant) and layout not in (None, NCHW):
            return self.constant_in(expr, layout)
        if isinstance(expr, relax.Tuple):
            return relax.Tuple([self.value(field, layout) for field in expr.fields])
        return expr

    def constant_in(self, const, layout: str):
        """A constant operand of an elementwise op on an ``NCHW`` tensor, repacked for ``layout``."""
        array = const.value.numpy()
        if array.ndim < 3 or array.size == 1:
            if array.size == 1:
                return const  # a scalar broadcasts in any layout
            raise ProblemError(f"cannot repack a constant of shape {array.shape} for layout {layout!r}")
        while array.ndim < 4:
            array = array[None]
        return self.relax.const(pack_data(array, layout), str(array.dtype))

    def layout_of(self, expr) -> str | None:
        if isinstance(expr, self.relax.Var):
            return self.env[expr][1]
        return None

    def emit(self, var, value, layout: str | None):
        shape = _static_shape(var)
        layout = layout if shape is not None and len(shape) == 4 else None
        if not isinstance(var, self.relax.DataflowVar) and layout in (NCHW, None):
            # an output of the dataflow block stays one, under its own name: an all-NCHW rewrite
            # then reproduces the original program exactly
            new = self.bb.emit_output(value, name_hint=var.name)
            self.outputs.add(new)
        else:
            new = self.bb.emit(value, name_hint=var.name)
        self.env[var] = (new, layout)

    # -- one binding --------------------------------------------------------------------------
    def binding(self, var, value) -> None:
        relax = self.relax
        name = var.name
        op = value.op.name if isinstance(value, relax.Call) and isinstance(value.op, self.tvm.ir.Op) else None
        choice = self.choices.get(name)
        if choice is not None:
            self.used.add(name)
            if op == "relax.nn.conv2d":
                return self.conv2d(var, value, choice)
            if op in BINARY_OPS or op in CONCAT_OPS:
                return self.common_layout(var, value, choice[1])
            if op == "relax.matmul" and choice == (NCHW, NCHW) and "weight" in self.knobs.get(name, {}):
                return self.dense(var, value, str(self.knobs[name]["weight"]))
            if choice != (NCHW, NCHW):
                raise ProblemError(
                    f"node {name!r}: layout {choice} was chosen for op {op or type(value).__name__!r}, "
                    "which this pass can only run in NCHW"
                )
        follow = self.following_layout(value, op) if isinstance(value, relax.Call) else None
        if follow is not None:
            return self.layout_following(var, value, op, follow)
        self.boundary(var, value)

    def following_layout(self, value, op: str | None) -> str | None:
        """The layout a layout-following op keeps (its computed input's), or None when it is not one."""
        carrier = layout_carrier(value, op)
        return None if carrier is None else self.layout_of(carrier)

    def layout_following(self, var, value, op: str, layout: str) -> None:
        args = [self.value(a, layout) for a in value.args]
        if op in POOL_OPS:
            attrs = value.attrs
            pool = self.relax.op.nn.max_pool2d if op == "relax.nn.max_pool2d" else self.relax.op.nn.avg_pool2d
            call = pool(args[0], list(attrs.pool_size), list(attrs.strides), list(attrs.padding),
                        list(attrs.dilation), bool(attrs.ceil_mode), bool(attrs.count_include_pad),
                        layout=layout, out_layout=layout)
        else:
            call = self.relax.Call(value.op, args, value.attrs, value.ty_args)
        self.emit(var, call, layout)

    def common_layout(self, var, value, layout: str) -> None:
        args = [self.value(a, layout) for a in value.args]
        self.emit(var, self.relax.Call(value.op, args, value.attrs, value.ty_args), layout)

    def boundary(self, var, value) -> None:
        relax = self.relax
        if isinstance(value, relax.Call):
            new_value = relax.Call(value.op, [self.value(a, NCHW) for a in value.args], value.attrs,
                                   value.ty_args)
        elif isinstance(value, relax.TupleGetItem):
            new_value = relax.TupleGetItem(self.value(value.tuple_value, None), value.index)
        elif isinstance(value, relax.Var):  # an alias keeps its source's layout
            new, layout = self.env[value]
            if isinstance(var, relax.DataflowVar):
                self.env[var] = (new, layout)
            else:
                self.emit(var, new, layout)
            return
        elif isinstance(value, (relax.Tuple, self.tvm.ir.expr.Constant, relax.ShapeExpr)):
            new_value = self.value(value, NCHW)
        else:
            raise ProblemError(
                f"binding {var.name!r}: {type(value).__name__} is not supported by ApplyLayouts"
            )
        self.emit(var, new_value, NCHW)

    def conv2d(self, var, call, choice: tuple[str, str]) -> None:
        relax = self.relax
        attrs = call.attrs
        name = var.name
        in_layout, out_layout = choice
        if choice == (NCHW, NCHW):
            return self.boundary(var, call)
        if NCHW in choice:
            raise ProblemError(
                f"node {name!r}: conv2d choice {in_layout}->{out_layout} mixes plain and blocked layouts; "
                "use NCHW->NCHW or blocked layouts on both sides"
            )
        if attrs.data_layout != NCHW or attrs.kernel_layout != "OIHW" or int(attrs.groups) != 1:
            raise ProblemError(
                f"node {name!r}: only NCHW/OIHW conv2d with groups=1 can take a blocked layout "
                f"(this one is {attrs.data_layout}/{attrs.kernel_layout}, groups={int(attrs.groups)})"
            )
        in_block, out_block = layout_block(in_layout), layout_block(out_layout)
        out_channels, in_channels = _static_shape(call.args[1])[:2]
        if in_channels % in_block or out_channels % out_block:
            raise ProblemError(
                f"node {name!r}: blocks {in_block}/{out_block} do not divide the conv2d's "
                f"{in_channels} input / {out_channels} output channels"
            )
        data = self.value(call.args[0], in_layout)
        weight = call.args[1]
        if isinstance(weight, self.tvm.ir.expr.Constant):
            packed = pack_conv2d_kernel(weight.value.numpy(), in_block, out_block)
            weight = relax.const(packed, str(packed.dtype))
        else:  # a runtime parameter: repack it in the program (FoldConstant removes it once bound)
            def pack(o, i, h, w):
                return o // out_block, i // in_block, h, w, i % in_block, o % out_block

            weight = self.bb.emit(relax.op.layout_transform(self.value(weight, None), index_map=pack),
                                  name_hint=f"{name}_weight")
        new = relax.op.nn.conv2d(
            data, weight, list(attrs.strides), list(attrs.padding), list(attrs.dilation), 1,
            data_layout=in_layout, kernel_layout=f"OIHW{in_block}i{out_block}o", out_layout=out_layout,
            out_dtype=_out_dtype(attrs, None),
        )
        self.emit(var, new, out_layout)
        # for schedule_module, which sees the conv's PrimFunc only: keyed by its parameters' shapes
        out = _static_shape(var)  # logical NCHW
        core = [_layout_shape(_static_shape(call.args[0]), in_layout), _static_shape(weight),
                _layout_shape(out, out_layout)]
        operands = _epilogue_shapes(self.epilogues.get(name, ()), out)
        fused = core + [_layout_shape(shape, out_layout) for shape in operands]
        knobs = {k: v for k, v in self.knobs.get(name, {}).items() if k in CONV2D_SCHEDULE_KNOBS}
        self.schedules.append((conv2d_schedule_key(fused), conv2d_schedule_key(core), knobs))

    def dense(self, var, call, weight_layout: str) -> None:
        """``matmul(x, W)`` by a constant ``(K, N)`` weight -> the measured dense kernel for the layout.

        ``NK``: ``topi.nn.dense`` on the transposed weight; ``NK{b}n``: the packed-weight kernel
        (weight ``(N/b, K, b)``, ``b`` output features contiguous). Weights are repacked here, in numpy.
        """
        relax, te = self.relax, self.tvm.te
        weight = call.args[1]
        match = _DENSE_WEIGHT.fullmatch(weight_layout)
        constant = isinstance(weight, self.tvm.ir.expr.Constant)
        if match is None or not constant or len(_static_shape(weight)) != 2:
            raise ProblemError(
                f"node {var.name!r}: dense weight layout {weight_layout!r} needs a constant 2-D weight and "
                "'NK' or 'NK<b>n'"
            )
        data = self.value(call.args[0], None)
        w_nk = np.ascontiguousarray(weight.value.numpy().T)
        block = int(match.group(1)) if match.group(1) else None
        if block is None:
            new = self.bb.call_te(self.tvm.topi.nn.dense, data, relax.const(w_nk, str(w_nk.dtype)),
                                  primfunc_name_hint="dense")
        else:
            features, reduction = w_nk.shape
            if features % block:
                raise ProblemError(f"node {var.name!r}: block {block} does not divide {features} features")
            packed = w_nk.reshape(features // block, block, reduction).transpose(0, 2, 1)
            packed = np.ascontiguousarray(packed)

            def dense_pack(x, w):
                k = te.reduce_axis((0, reduction), name="k")
                return te.compute((x.shape[0], features), lambda i, j: te.sum(
                    x[i, k] * w[j // block, k, j % block], axis=k), name="T_dense_pack")

            new = self.bb.call_te(dense_pack, data, relax.const(packed, str(packed.dtype)),
                                  primfunc_name_hint="dense_pack")
        self.emit(var, new, None)

    # -- the function -------------------------------------------------------------------------
    def function(self, func):
        relax = self.relax
        body = func.body
        if not isinstance(body, relax.SeqExpr):
            raise ProblemError("ApplyLayouts expects 'main' in normal form (a SeqExpr body)")
        params = list(func.params)
        for param in params:
            self.env[param] = (param, NCHW if len(_static_shape(param) or ()) == 4 else None)
        with self.bb.function("main", params, attrs=dict(func.attrs) if func.attrs else None,
                              pure=bool(func.is_pure)):
            with self.bb.dataflow():
                for block in body.blocks:
                    for binding in block.bindings:
                        if not isinstance(binding, relax.VarBinding):
                            raise ProblemError(
                                f"binding {binding.var.name!r}: match_cast is not supported by ApplyLayouts"
                            )
                        self.binding(binding.var, binding.value)
                result = self.result(body.body)
            self.bb.emit_func_output(result)
        return self.bb.get()  # main plus the PrimFuncs of call_te (dense)

    def result(self, expr):
        relax = self.relax
        if isinstance(expr, relax.Tuple):
            return relax.Tuple([self.result(f) for f in expr.fields])
        value = self.value(expr, NCHW)
        if isinstance(value, relax.Var) and value not in self.outputs:
            value = self.bb.emit_output(value, name_hint=expr.name if isinstance(expr, relax.Var) else "")
        return value


def _per_channel(const, channels: int) -> bool:
    """True for a constant that broadcasts along channels only: scalar, ``(C,1,1)``, ``(1,C,1,1)``."""
    shape = tuple(int(s) for s in const.value.shape)
    if int(np.prod(shape, dtype=np.int64)) == 1:
        return True
    if len(shape) < 3 or len(shape) > 4:
        return False
    padded = (1,) * (4 - len(shape)) + shape
    return padded[0] == 1 and padded[2] == 1 and padded[3] == 1 and padded[1] == channels


def _normalise_choices(choices: Mapping[Hashable, Any]) -> tuple[dict[str, tuple[str, str]], dict[str, dict]]:
    """``(binding -> (in, out), binding -> knobs of a candidate dict)``."""
    if not isinstance(choices, Mapping):
        raise ProblemError(f"choices must map binding names to layouts, not {type(choices).__name__}")
    pairs = {str(node): parse_choice(node, choice) for node, choice in choices.items()}
    knobs = {
        str(node): {k: v for k, v in choice.items() if k not in ("in", "out")}
        for node, choice in choices.items() if isinstance(choice, Mapping)
    }
    return pairs, knobs


def apply_layouts(mod, choices: Mapping[Hashable, Any], strict: bool = True,
                  epilogues: Mapping[Hashable, Sequence[str]] | None = None):
    """Rewrite ``mod["main"]`` to the chosen layouts; the function form of :func:`ApplyLayouts`.

    Args:
        mod: a Relax ``IRModule`` with a ``main`` function (e.g. after :func:`layoutopt.tvm.prepare`).
        choices: binding name of a problem node -> its choice (see :func:`parse_choice`).
        strict: raise :class:`~layoutopt.ProblemError` when a choice names no binding of ``main``.
        epilogues: binding name of a conv2d -> the elementwise steps ``FuseOps`` fuses into it (its
            workload's ``"epilogue"``, see :func:`~layoutopt.tvm.extract_layout_graph`). They make a
            conv's schedule knobs its own: without them, convs of equal shapes share their knobs.

    Returns:
        A new ``IRModule``; with every choice ``NCHW`` it is structurally equal to ``mod``. Schedule
        knobs of blocked convs' candidate dicts (``"order": "rows"``) go into its attribute
        :data:`~layoutopt.tvm.kernels.SCHEDULES_ATTR`, where :func:`build` (its
        :func:`~layoutopt.tvm.schedule_module`) finds them.

    Example::

        new_mod = apply_layouts(mod, {"conv1": "NCHW8c->NCHW16c"})
    """
    tvm = import_tvm()
    normalised, knobs = _normalise_choices(choices)
    if "main" not in [gv.name_hint for gv in mod.get_global_vars()]:
        raise ProblemError("the module has no 'main' function to rewrite")
    bindings = {b.var.name for block in mod["main"].body.blocks for b in block.bindings}
    missing = sorted(set(normalised) - bindings)
    if strict and missing:
        raise ProblemError(
            f"choices name {len(missing)} node(s) that are not bindings of main: {', '.join(missing[:5])}"
        )
    others = tvm.IRModule({gv: func for gv, func in mod.functions.items() if gv.name_hint != "main"})
    rewriter = _Rewriter(normalised, knobs, others, {str(k): list(v) for k, v in (epilogues or {}).items()})
    new_mod = rewriter.function(mod["main"])
    if mod.attrs:
        new_mod = new_mod.with_attrs(mod.attrs)
    if any(knobs for _, _, knobs in rewriter.schedules):
        # every blocked conv's knobs ({}: the defaults), for schedule_module (see SCHEDULES_ATTR): by
        # the fused function's shapes, and by the conv's own for unfused builds (where convs of equal
        # shapes are one function: the first one's knobs)
        table = dict(mod.attrs.get(SCHEDULES_ATTR, {})) if mod.attrs else {}
        for _, core, knobs in reversed(rewriter.schedules):
            table[core] = knobs
        table.update((full, knobs) for full, core, knobs in rewriter.schedules if full != core)
        new_mod = new_mod.with_attr(SCHEDULES_ATTR, table)
    return new_mod


def ApplyLayouts(choices: Mapping[Hashable, Any], strict: bool = True,
                 epilogues: Mapping[Hashable, Sequence[str]] | None = None):
    """A Relax module pass applying layout ``choices`` (see :func:`apply_layouts`).

    Example::

        seq = tvm.transform.Sequential([ApplyLayouts({"conv1": "NCHW16c->NCHW16c"}),
                                        tvm.relax.transform.FoldConstant()])
        mod = seq(mod)
    """
    tvm = import_tvm()
    _normalise_choices(choices)  # fail early, at pass creation

    @tvm.transform.module_pass(opt_level=0, name="layoutopt.ApplyLayouts")
    def _apply(mod, _ctx):
        return apply_layouts(mod, choices, strict=strict, epilogues=epilogues)

    return _apply


def apply_solution(mod, graph, solution):
    """Apply a :class:`~layoutopt.Solution` of the layout graph extracted from ``mod``.

    Each problem node's chosen index is mapped to its ``(in, out)`` pair through the node's
    ``"layouts"`` attribute; input/output/boundary nodes (single choice NCHW) need no rewrite.

    Example::

        graph, costs, meta = layoutopt.tvm.build_problem(mod)
        new_mod = apply_solution(mod, graph, layoutopt.solve(graph, costs))
    """
    return apply_layouts(mod, solution_choices(graph, solution), epilogues=solution_epilogues(graph))


def solution_epilogues(graph) -> dict[str, list[str]]:
    """``{binding: epilogue}`` of the graph's conv2d nodes that fuse one (their workload's ``"epilogue"``),
    for :func:`apply_layouts`.

    Example::

        apply_layouts(mod, solution_choices(graph, solution), epilogues=solution_epilogues(graph))
    """
    return {str(data.get("binding", node)): list(data["workload"]["epilogue"])
            for node, data in graph.nodes(data=True) if (data.get("workload") or {}).get("epilogue")}


def solution_choices(graph, solution) -> dict[str, Any]:
    """``{binding: candidate}`` for the target and multi-input nodes of a solved layout graph.

    The candidate is the node's ``"candidates"`` entry (a dict with ``in``/``out`` and knobs such as
    a dense weight layout) when the graph has them, else its ``(in, out)`` pair from ``"layouts"``.
    """
    if not solution.assignment:
        raise ProblemError(f"the solution has no assignment (status {solution.status!r}): nothing to apply")
    choices = {}
    for node, index in solution.assignment.items():
        data = graph.nodes[node]
        if data.get("kind") not in ("target", "multi"):
            continue
        candidates = data.get("candidates")
        choices[str(data.get("binding", node))] = (
            dict(candidates[index]) if candidates else tuple(data["layouts"][index])
        )
    return choices


def expected_transforms(graph, assignment: Mapping[Hashable, int]) -> int:
    """How many ``layout_transform`` calls the rewrite of ``assignment`` must contain, per the graph.

    One per (value, destination layout) pair whose producer's out layout differs from a consumer's
    in layout, read off the edges' ``"values"``: what :func:`apply_solution` inserts.

    Example::

        expected_transforms(graph, solution.assignment) == count_layout_transforms(new_mod)
    """
    needed = set()
    for producer, consumer, data in graph.edges(data=True):
        out_layout = graph.nodes[producer]["layouts"][assignment[producer]][1]
        in_layout = graph.nodes[consumer]["layouts"][assignment[consumer]][0]
        if out_layout != in_layout:
            for value in data.get("values") or [{"value": (producer, consumer)}]:
                needed.add((value["value"], in_layout))
    return len(needed)


def count_layout_transforms(mod) -> int:
    """Number of ``relax.layout_transform`` calls in ``mod["main"]``.

    Example::

        count_layout_transforms(apply_layouts(mod, {"conv1": "NCHW16c->NCHW16c"}))   # 2
    """
    return sum(1 for op in op_list(mod) if op == "relax.layout_transform")


def op_list(mod) -> list[str]:
    """The op names of ``main``'s bindings, in order (calls only)."""
    tvm = import_tvm()
    ops = []
    for block in mod["main"].body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, tvm.relax.Call) and isinstance(value.op, tvm.ir.Op):
                ops.append(value.op.name)
    return ops


# ----------------------------------------------------------------------------------------------
# build


def _out_dtype(attrs, default: str | None) -> str | None:
    dtype = str(attrs.out_dtype) if attrs.out_dtype is not None else ""
    return default if dtype in ("", "None", "void") else dtype


def _legalize_conv2d(bb, call):
    """Blocked conv2d -> ``topi.nn.conv2d_NCHWc`` (TVM's legalizer leaves it, and codegen then fails)."""
    tvm = import_tvm()
    from tvm.relax.transform.legalize_ops.nn import _nn_conv2d

    attrs = call.attrs
    if len(attrs.data_layout) == 4 and len(attrs.kernel_layout) == 4:
        return _nn_conv2d(bb, call)
    out_dtype = _out_dtype(attrs, str(call.args[0].ty.dtype))
    return bb.call_te(
        tvm.topi.nn.conv2d_NCHWc, call.args[0], call.args[1], list(attrs.strides), list(attrs.padding),
        list(attrs.dilation), attrs.data_layout, attrs.out_layout, out_dtype,
        primfunc_name_hint="conv2d_NCHWc",
    )


def build(mod, target=None, fuse: bool = False):
    """Legalize, schedule every kernel, lower and compile ``mod`` for the CPU ``target``.

    Args:
        mod: a Relax module, e.g. from :func:`apply_layouts`.
        target: CPU target (see :func:`~layoutopt.tvm.resolve_target`).
        fuse: run ``FuseOps``/``FuseTIR``: each conv2d's elementwise epilogue (bias, relu, residual
            add) joins it, finished inside its register tile where the output block is one vector
            wide (see :func:`~layoutopt.tvm.kernels.schedule_module`); unfused, every op is its own
            kernel, exactly the kernels the costs were measured on.

    Returns a ``tvm.runtime.Executable`` for ``tvm.relax.VirtualMachine``.

    Example::

        ex = build(apply_layouts(mod, choices), "llvm")
        vm = tvm.relax.VirtualMachine(ex, tvm.cpu())
    """
    tvm = import_tvm()
    from tvm.relax.backend.cpu_generic import pipeline as cpu

    target = resolve_target(target)
    relax = tvm.relax
    with target:
        mod = relax.transform.LegalizeOps(customize_legalize_map={"relax.nn.conv2d": _legalize_conv2d})(mod)
        mod = relax.transform.FoldConstant()(mod)
        if fuse:
            mod = relax.transform.AnnotateTIROpPattern()(mod)
            mod = relax.transform.FuseOps()(mod)
            mod = relax.transform.FuseTIR()(mod)
        mod = schedule_module(mod, target)
        mod = tvm.transform.Sequential(cpu.dataflow_lower_passes(target) + cpu.finalize_passes(target))(mod)
    return tvm.compile(mod, target=target, relax_pipeline=None)

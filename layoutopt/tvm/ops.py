"""Which Relax ops follow their input's layout, which combine several, and which need plain NCHW.

The one classification extraction (:mod:`layoutopt.tvm.extract`) and the rewrite
(:mod:`layoutopt.tvm.apply`) both use, so that the layout graph costs exactly the program the
rewrite emits; and which elementwise ops after a conv ``FuseOps`` fuses into its kernel
(:class:`EpilogueChains`), so that the kernel is measured with them.

Example::

    layout_carrier(relu_call, "relax.nn.relu")   # the Var relu reads: relu runs in its layout
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ._tvm import import_tvm
from .kernels import NCHW

__all__ = ["BINARY_OPS", "CONCAT_OPS", "EPILOGUE_BINARY", "EPILOGUE_UNARY", "POOL_OPS", "UNARY_OPS",
           "EpilogueChains", "conv2d_workload", "dense_workload", "epilogue_step", "fused_epilogues",
           "is_tensor_constant", "layout_carrier", "static_shape", "var_uses"]

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


def static_shape(expr) -> list[int] | None:
    """The static shape of a tensor-typed expression, or None (tuples, dynamic shapes...)."""
    tvm = import_tvm()
    ty = expr.ty
    if not isinstance(ty, tvm.relax.TensorType) or ty.shape is None:
        return None
    try:
        return [int(s) for s in ty.shape]
    except (TypeError, ValueError, AttributeError):
        return None


def is_tensor_constant(expr) -> bool:
    """True for a Relax tensor constant (a weight, a bias, a scalar tensor such as ``R.const(6.0)``).

    In TVM 0.27 ``tvm.ir.expr.Constant`` is also the base class of TIR's ``IntImm``/``FloatImm``, the
    plain numbers some ops take as arguments (``R.clip(x, 0, 6)``'s bounds, as the ONNX frontend
    writes HardSigmoid and Clip): those hold a Python number, not a tensor, and have no layout.

    Example::

        is_tensor_constant(relax.const(np.ones((1, 8, 1, 1), "float32")))   # True
        is_tensor_constant(relax.op.clip(x, 0, 6).args[1])                  # False: an IntImm
    """
    tvm = import_tvm()
    return isinstance(expr, tvm.ir.expr.Constant) and isinstance(expr.ty, tvm.relax.TensorType)


def layout_carrier(call, op: str | None, is_data: Callable[[Any], bool] | None = None,
                   source: Callable[[Any], Hashable] | None = None):
    """The computed operand whose layout a layout-following op keeps, or None when ``call`` is not one.

    The one classification extraction (:mod:`layoutopt.tvm.extract`) and the rewrite both use, so
    that the graph costs exactly the program the rewrite emits. Layout-following are:

    * a unary elementwise op (:data:`UNARY_OPS`) of a 4-D tensor returning one 4-D tensor (dropout's
      tuple output is not: a boundary);
    * max/avg pooling declared ``NCHW`` in and out (an ``NHWC`` pool is a boundary);
    * a binary elementwise op (:data:`BINARY_OPS`) of ONE computed 4-D tensor and one per-channel or
      scalar constant, in either order (``add(bias, x)`` as well as ``add(x, bias)``);
    * a binary elementwise op of two computed 4-D tensors of its output's shape that come from the
      same producer (``source(var)``: the node whose output layout a value carries), so arrive in one
      layout: ``x * sigmoid(x)`` (SiLU), hard-swish's ``x * clip(x + 3, 0, 6) / 6``. Without
      ``source``, two computed operands make no layout-following op.

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
        constants = [a for a in args if is_tensor_constant(a)]
        if len(tensors) == 2 and source is not None and all(is_data(t) for t in tensors):
            shape = static_shape(call)
            same = source(tensors[0]) == source(tensors[1])
            return tensors[0] if same and shape is not None and len(shape) == 4 and all(
                static_shape(t) == shape for t in tensors) else None
        if len(tensors) != 1 or len(constants) != 1 or not is_data(tensors[0]):
            return None
        shape = static_shape(tensors[0])
        ok = shape is not None and len(shape) == 4 and per_channel(constants[0], shape[1])
        return tensors[0] if ok and static_shape(call) == shape else None
    if not args or not isinstance(args[0], relax.Var) or not is_data(args[0]):
        return None
    shape = static_shape(args[0])
    out_shape = static_shape(call)
    if shape is None or len(shape) != 4 or out_shape is None or len(out_shape) != 4:
        return None  # e.g. dropout returns a tuple
    if op in POOL_OPS and (str(call.attrs.layout), str(call.attrs.out_layout)) != (NCHW, NCHW):
        return None
    return args[0]


def per_channel(const, channels: int) -> bool:
    """True for a constant that broadcasts along channels only: scalar, ``(C,1,1)``, ``(1,C,1,1)``."""
    shape = tuple(int(s) for s in const.value.shape)
    if int(np.prod(shape, dtype=np.int64)) == 1:
        return True
    if len(shape) < 3 or len(shape) > 4:
        return False
    padded = (1,) * (4 - len(shape)) + shape
    return padded[0] == 1 and padded[2] == 1 and padded[3] == 1 and padded[1] == channels


def conv2d_workload(call) -> dict[str, Any]:
    """The kernel workload (:mod:`layoutopt.tvm.kernels.workload`) of an NCHW/OIHW ``relax.nn.conv2d``
    call with static shapes, without epilogue.

    Example::

        conv2d_workload(call)   # {'op': 'conv2d', 'data': [1, 64, 56, 56], 'kernel': [64, 64, 3, 3], ...}
    """
    attrs = call.attrs
    return {
        "op": "conv2d", "data": static_shape(call.args[0]), "kernel": static_shape(call.args[1]),
        "strides": [int(s) for s in attrs.strides], "padding": [int(p) for p in attrs.padding],
        "dilation": [int(d) for d in attrs.dilation], "groups": int(attrs.groups),
        "dtype": str(call.args[0].ty.dtype),
    }


def dense_workload(call) -> dict[str, Any]:
    """The dense workload of a ``relax.matmul(x, W)`` call by a 2-D ``(K, N)`` weight (held ``(N, K)``).

    Example::

        dense_workload(call)    # {'op': 'dense', 'data': [1, 2048], 'weight': [1000, 2048], ...}
    """
    data, weight = static_shape(call.args[0]), static_shape(call.args[1])
    return {"op": "dense", "data": data, "weight": [weight[1], weight[0]],
            "dtype": str(call.args[0].ty.dtype)}


# ------------------------------------------------------------------------------------------------
# fused epilogues: the elementwise chain FuseOps fuses into each conv's kernel

#: Relax unary ops a fused epilogue may hold, by their epilogue step
#: (:mod:`layoutopt.tvm.kernels.epilogue`)
EPILOGUE_UNARY = {
    "relax.nn.relu": "relu", "relax.sigmoid": "sigmoid", "relax.tanh": "tanh", "relax.erf": "erf",
    "relax.exp": "exp", "relax.nn.gelu": "gelu", "relax.nn.gelu_tanh": "gelu_tanh", "relax.nn.silu": "silu",
}
#: Relax binary ops a fused epilogue may hold (with a scalar, a per-channel constant, a residual or an
#: earlier value of the chain), by their epilogue step
EPILOGUE_BINARY = {
    "relax.add": "add", "relax.subtract": "subtract", "relax.multiply": "multiply", "relax.divide": "divide",
    "relax.maximum": "maximum", "relax.minimum": "minimum",
}
#: the binary steps whose operands may come in either order
_COMMUTATIVE = ("add", "multiply", "maximum", "minimum")


def _prim_number(arg) -> float | None:
    """The number an ``IntImm``/``FloatImm`` argument holds (``R.clip``'s bounds), else None."""
    tvm = import_tvm()
    return float(arg.value) if isinstance(arg, (tvm.tirx.IntImm, tvm.tirx.FloatImm)) else None


def epilogue_step(call, op: str | None, values: Sequence, is_data: Callable[[Any], bool] | None = None
                  ) -> tuple[Any, list[int]] | None:
    """The epilogue step (:mod:`layoutopt.tvm.kernels.epilogue`) ``call`` applies to the running value
    of a conv's fused chain, with the indices of the chain's values it reads; None when it is none.

    ``values`` are the chain's values so far (Vars): the conv's output, then each step's; ``call``
    must read the last, and compute a tensor of its shape and dtype from it and at most one of: a
    scalar or per-channel constant, an earlier value of the chain, or (an ``add``) another computed
    tensor of its shape, the residual; or multiply a computed feature map by it, broadcast from
    ``(N, O, 1, 1)`` (a squeeze-excite gate). ``is_data`` tells computed tensors from other Vars (default:
    every Var is one). A non-commutative op (subtract, divide) must have the running value first.

    Example::

        epilogue_step(add_call, "relax.add", [conv_var])        # ('bias', [0])
        epilogue_step(mul_call, "relax.multiply", [conv, b, t])  # (['multiply', '@1'], [2, 1])
    """
    tvm = import_tvm()
    head = values[-1]
    shape = static_shape(head)
    args = list(call.args)
    if shape is None or not isinstance(call.ty, tvm.relax.TensorType) or \
            str(call.ty.dtype) != str(head.ty.dtype) or \
            not any(isinstance(arg, tvm.relax.Var) and arg.same_as(head) for arg in args[:2]):
        return None
    last = len(values) - 1
    if static_shape(call) != shape:
        step = _broadcast_multiply(call, op, head, shape, is_data)
        return None if step is None else (step, [last])
    if op in EPILOGUE_UNARY and len(args) == 1:
        return EPILOGUE_UNARY[op], [last]
    if op == "relax.clip" and len(args) == 3 and args[0].same_as(head):
        bounds = [_prim_number(arg) for arg in args[1:]]
        return (["clip", *bounds], [last]) if None not in bounds else None
    if op == "relax.nn.leakyrelu" and len(args) == 1:
        return ["leaky_relu", float(call.attrs.alpha)], [last]
    if op not in EPILOGUE_BINARY or len(args) != 2:
        return None
    name = EPILOGUE_BINARY[op]
    head_first = args[0].same_as(head)
    other = args[1] if head_first else args[0]
    if not head_first and name not in _COMMUTATIVE:
        return None
    earlier = next((index for index, value in enumerate(values) if value.same_as(other)), None)
    if earlier is not None:
        return [name, f"@{earlier}"], [last, earlier]
    if is_tensor_constant(other):
        if int(np.prod(other.value.shape, dtype=np.int64)) == 1:
            return [name, float(other.value.numpy().reshape(-1)[0])], [last]
        if not per_channel(other, shape[1]):
            return None
        return {"add": "bias", "multiply": "scale"}.get(name, [name, "channel"]), [last]
    is_data = is_data or (lambda _var: True)
    if name == "add" and isinstance(other, tvm.relax.Var) and is_data(other) and static_shape(other) == shape:
        return "add", [last]
    return None


def _broadcast_multiply(call, op: str | None, head, shape: list[int], is_data) -> list | None:
    """``multiply(map, head)`` of a computed ``(N, O, H, W)`` map by a running value ``(N, O, 1, 1)``
    (a squeeze-excite gate) as the ``broadcast_multiply`` step, else None."""
    tvm = import_tvm()
    out = static_shape(call)
    others = [arg for arg in call.args if not arg.same_as(head)]
    if op != "relax.multiply" or len(others) != 1 or out is None or len(shape) != 4 or shape[2:] != [1, 1]:
        return None
    other = others[0]
    if not isinstance(other, tvm.relax.Var) or not (is_data or (lambda _var: True))(other) or \
            static_shape(other) != out or out[:2] != shape[:2]:
        return None
    return ["broadcast_multiply", out[2], out[3]]


@dataclass
class _Chain:
    """One conv's chain: its values (the conv's output, then each step's), steps, and the chain
    values each step reads."""

    values: list
    steps: list = field(default_factory=list)
    reads: list[list[int]] = field(default_factory=list)

    def fused_length(self, uses: Mapping[Any, int]) -> int:
        """How many steps ``FuseOps`` fuses: the longest prefix whose every value but its last is read
        by the prefix's steps only (``uses``: each Var's reads in the whole function)."""
        fused = 0
        for length in range(1, len(self.steps) + 1):
            reads = Counter(index for step in self.reads[:length] for index in step)
            if all(uses.get(self.values[index], 0) == reads[index] for index in range(length)):
                fused = length
        return fused


class EpilogueChains:
    """The elementwise chain after each conv2d that ``FuseOps`` fuses into its kernel, followed
    binding by binding: what the conv's workload ``"epilogue"`` lists, so that its kernel is measured
    as the build runs it.

    A chain grows by each binding that applies an epilogue step (:func:`epilogue_step`) to its running
    value; FuseOps fuses it as far as every value but the last is read inside the chain only
    (:meth:`epilogues`). A binding reading the running values of several chains joins the first
    whose step it is (one conv per fused kernel): a residual add of two convs its first operand's, a
    squeeze-excite multiply (map times gate) the gate conv's.

    Example::

        chains = EpilogueChains(uses)
        chains.start("conv", conv_var)
        for var, call, op in later_bindings:
            chains.binding(var, call, op)
        chains.epilogues()     # {'conv': ['bias', ['maximum', 0.0], ['minimum', 6.0]]}
    """

    def __init__(self, uses: Mapping[Any, int], is_data: Callable[[Any], bool] | None = None):
        self.uses = uses
        self.is_data = is_data
        self.chains: dict[str, _Chain] = {}
        self.member: dict[Any, str] = {}  # Var -> the conv whose chain holds it

    def start(self, conv: str, var) -> None:
        """A chain for the conv bound to ``var`` (its node key ``conv``)."""
        self.chains[conv] = _Chain([var])
        self.member[var] = conv

    def binding(self, var, call, op: str | None) -> None:
        """``var = call``: a step of the chain whose running value it reads first, if it is one."""
        for arg in call.args:
            conv = self.member.get(arg)
            if conv is None or not self.chains[conv].values[-1].same_as(arg):
                continue
            chain = self.chains[conv]
            found = epilogue_step(call, op, chain.values, self.is_data)
            if found is not None:
                step, reads = found
                chain.values.append(var)
                chain.steps.append(step)
                chain.reads.append(reads)
                self.member[var] = conv
                return

    def epilogues(self) -> dict[str, list]:
        """Each conv's fused epilogue: its chain's steps as far as ``FuseOps`` fuses them."""
        return {conv: chain.steps[: chain.fused_length(self.uses)] for conv, chain in self.chains.items()}


def var_uses(function) -> Counter:
    """How many times ``function``'s body reads each Var (its result included)."""
    tvm = import_tvm()
    uses: Counter = Counter()
    tvm.relax.analysis.post_order_visit(
        function.body, lambda expr: uses.update([expr]) if isinstance(expr, tvm.relax.Var) else None)
    return uses


def fused_epilogues(function) -> dict[str, list]:
    """The epilogue ``FuseOps`` fuses into each NCHW/OIHW conv2d by a constant weight of a Relax
    ``function`` (``main`` of a prepared module): binding name -> steps (:class:`EpilogueChains`).

    Example::

        fused_epilogues(prepare(mod)["main"])   # {'lv': ['bias', 'relu'], 'lv7': ['bias', ...], ...}
    """
    tvm = import_tvm()
    relax = tvm.relax
    chains = EpilogueChains(var_uses(function))
    for block in function.body.blocks:
        for binding in block.bindings:
            value = binding.value
            if not isinstance(value, relax.Call):
                continue
            op = value.op.name if isinstance(value.op, tvm.ir.Op) else None
            attrs = value.attrs
            if op == "relax.nn.conv2d" and is_tensor_constant(value.args[1]) and \
                    (attrs.data_layout, attrs.kernel_layout, attrs.out_layout) == (NCHW, "OIHW", NCHW):
                chains.start(binding.var.name, binding.var)
            else:
                chains.binding(binding.var, value, op)
    return chains.epilogues()

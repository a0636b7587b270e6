"""Elementwise ops: unary ones follow their input's layout; binary ones follow it with a per-channel or
scalar constant (a bias, a folded batch norm) or of two values of one producer (SiLU's
``x * sigmoid(x)``), and are multi-input nodes (one common layout) of two computed tensors; and the
epilogue ``FuseOps`` fuses into each conv's kernel, followed binding by binding (:class:`EpilogueChains`),
so that the kernel is measured with it. Their legalizations compute sigmoid, SiLU, exp, log, tanh, erf,
GELU, softplus and small powers vectorised (:mod:`layoutopt.tvm.kernels.transcendental`), a division by
a scalar constant as a multiply.

Example:
    >>> from layoutopt.tvm import models
    >>> calls = {b.var.name: b.value for b in models.chain()["main"].body.blocks[0].bindings}
    >>> UnaryRule().carrier(calls["conv1_relu"], "relax.nn.relu", lambda v: True, None).name
    'conv1_bias'
    >>> BinaryRule().carrier(calls["conv1_bias"], "relax.add", lambda v: True, None).name  # + a bias
    'conv1'
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from .._tvm import import_tvm
from ..kernels.epilogue import divide_te, sigmoid_te
from ..kernels.transcendental import LEGALIZERS as TRANSCENDENTAL_LEGALIZERS
from ..relax_expr import is_tensor_constant, scalar_value, static_shape
from .common import common_layout_node, four_d_input
from .rule import Node, OpRule

__all__ = [
    "BINARY_OPS",
    "EPILOGUE_BINARY",
    "EPILOGUE_UNARY",
    "UNARY_OPS",
    "BinaryRule",
    "EpilogueChains",
    "UnaryRule",
    "epilogue_step",
    "per_channel",
]

#: unary elementwise ops: any layout, same layout out
UNARY_OPS = frozenset({
    "relax.nn.relu", "relax.nn.gelu", "relax.nn.gelu_tanh", "relax.nn.silu", "relax.nn.leakyrelu",
    "relax.nn.prelu_scalar", "relax.sigmoid", "relax.tanh", "relax.clip", "relax.exp", "relax.sqrt",
    "relax.rsqrt", "relax.negative", "relax.abs", "relax.square", "relax.erf", "relax.log", "relax.astype",
    "relax.nn.dropout", "relax.hard_sigmoid", "relax.nn.relu6", "relax.nn.softplus",
})
#: binary elementwise ops: layout-following with a per-channel or scalar constant operand,
#: multi-input ops when both operands are tensors computed by the graph
BINARY_OPS = frozenset({
    "relax.add", "relax.multiply", "relax.subtract", "relax.divide", "relax.maximum", "relax.minimum",
    "relax.power",
})


def _legalize_sigmoid(bb, call):
    """``relax.sigmoid`` -> :func:`~layoutopt.tvm.kernels.epilogue.sigmoid_te` (vectorised), as the
    kernels measured with a fused sigmoid compute it."""
    tvm = import_tvm()
    return bb.call_te(lambda x: sigmoid_te(tvm, x), call.args[0], primfunc_name_hint="sigmoid")


def _legalize_silu(bb, call):
    """``relax.nn.silu`` -> ``x * sigmoid(x)`` with the vectorised sigmoid (:func:`_legalize_sigmoid`)."""
    tvm = import_tvm()
    return bb.call_te(lambda x: sigmoid_te(tvm, x, times_input=True), call.args[0], primfunc_name_hint="silu")


def _legalize_divide(bb, call):
    """``relax.divide`` by a scalar constant -> :func:`~layoutopt.tvm.kernels.epilogue.divide_te` (a
    multiply by the reciprocal, as a fused ``["divide", c]`` step computes it); other divisions ->
    TVM's legalization."""
    tvm = import_tvm()
    divisor = scalar_value(call.args[1])
    data = call.args[0]
    if divisor is None or static_shape(data) is None or static_shape(data) != static_shape(call):
        return tvm.ir.Op.get("relax.divide").get_attr("FLegalize")(bb, call)
    return bb.call_te(lambda x: divide_te(tvm, x, divisor), data, primfunc_name_hint="divide")


class UnaryRule(OpRule):
    """A unary elementwise op (:data:`UNARY_OPS`) of a 4-D tensor returning one 4-D tensor follows its
    input's layout (dropout's tuple output does not: a boundary)."""

    name = "unary"
    ops = UNARY_OPS
    legalizers = MappingProxyType({
        "relax.sigmoid": _legalize_sigmoid, "relax.nn.silu": _legalize_silu,
        **{op: f for op, f in TRANSCENDENTAL_LEGALIZERS.items() if op in UNARY_OPS}})

    def carrier(self, call, op, is_data, source):
        return four_d_input(call, is_data)


class BinaryRule(OpRule):
    """A binary elementwise op (:data:`BINARY_OPS`): of ONE computed 4-D tensor and one per-channel or
    scalar constant, in either order (``add(bias, x)`` as well as ``add(x, bias)``), it follows the
    tensor's layout, as it does of two computed 4-D tensors of its output's shape from the same
    producer (``source(var)``), which arrive in one layout (``x * sigmoid(x)``; hard-swish's
    ``x * clip(x + 3, 0, 6) / 6``); of two computed tensors otherwise it is a multi-input node, one
    common layout for its inputs and output (blocked where no input broadcasts over channels)."""

    name = "binary"
    ops = BINARY_OPS
    legalizers = MappingProxyType({
        "relax.divide": _legalize_divide,
        **{op: f for op, f in TRANSCENDENTAL_LEGALIZERS.items() if op in BINARY_OPS}})

    def carrier(self, call, op, is_data, source):
        relax = import_tvm().relax
        args = list(call.args)
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

    def extract(self, call, op, name, inputs, ctx) -> Node | None:
        relax = import_tvm().relax
        if not all(isinstance(a, relax.Var) for a in call.args):
            return None  # a tensor and a constant that is not per-channel: a boundary
        out_shape = ctx.shape(call, f"binding {name!r}")
        shapes = [ctx.shape(v, f"input {v.name!r} of {name!r}") for v in call.args]
        workload: dict[str, Any] = {"op": op.rsplit(".", 1)[-1], "shapes": shapes,
                                    "dtype": str(call.ty.dtype)}
        # broadcasting over channels (an input with C = 1) cannot be blocked
        blocked = out_shape is not None and len(out_shape) == 4 and all(
            s is not None and len(s) == 4 for s in shapes) and all(s[1] == out_shape[1] for s in shapes)
        return common_layout_node(workload, shapes, blocked, ctx.blocks)

    def rewrite(self, rw, var, call, op, choice) -> bool:
        return self.follow(rw, var, call, op, choice["out"])


def per_channel(const, channels: int) -> bool:
    """True for a constant that broadcasts along channels only: scalar, ``(C,1,1)``, ``(1,C,1,1)``."""
    shape = tuple(int(s) for s in const.value.shape)
    if int(np.prod(shape, dtype=np.int64)) == 1:
        return True
    if len(shape) < 3 or len(shape) > 4:
        return False
    padded = (1,) * (4 - len(shape)) + shape
    return padded[0] == 1 and padded[2] == 1 and padded[3] == 1 and padded[1] == channels


# ------------------------------------------------------------------------------------------------
# fused epilogues: the elementwise chain FuseOps fuses into each conv's kernel

#: Relax unary ops a fused epilogue may hold, by their epilogue step
#: (:mod:`layoutopt.tvm.kernels.epilogue`)
EPILOGUE_UNARY = {
    "relax.nn.relu": "relu", "relax.sigmoid": "sigmoid", "relax.tanh": "tanh", "relax.erf": "erf",
    "relax.exp": "exp", "relax.log": "log", "relax.nn.gelu": "gelu", "relax.nn.gelu_tanh": "gelu_tanh",
    "relax.nn.silu": "silu",
}
#: Relax binary ops a fused epilogue may hold (with a scalar, a per-channel constant, a residual or an
#: earlier value of the chain), by their epilogue step
EPILOGUE_BINARY = {
    "relax.add": "add", "relax.subtract": "subtract", "relax.multiply": "multiply", "relax.divide": "divide",
    "relax.maximum": "maximum", "relax.minimum": "minimum", "relax.power": "power",
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

    Example:
        >>> from layoutopt.tvm import models
        >>> bindings = {b.var.name: b for b in models.chain()["main"].body.blocks[0].bindings}
        >>> epilogue_step(bindings["conv1_bias"].value, "relax.add", [bindings["conv1"].var])
        ('bias', [0])
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
        if (value := scalar_value(other)) is not None:
            return [name, value], [last]
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

    Example:
        >>> from layoutopt.tvm import models
        >>> from layoutopt.tvm.relax_expr import var_uses
        >>> main = models.chain()["main"]
        >>> bindings = {b.var.name: b for b in main.body.blocks[0].bindings}
        >>> chains = EpilogueChains(var_uses(main))
        >>> chains.start("conv1", bindings["conv1"].var)
        >>> for name in ("conv1_bias", "conv1_relu"):
        ...     chains.binding(bindings[name].var, bindings[name].value, bindings[name].value.op.name)
        >>> chains.epilogues()
        {'conv1': ['bias', 'relu']}
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
        """``var = call``: a step of the chain whose running value it reads first, if it is one; of the
        running values it reads, one read nowhere else first (``add(shortcut, y)``: the shortcut is read
        by the next conv too, so ``FuseOps`` fuses the add into ``y``'s kernel, whatever the order)."""
        args = sorted(call.args, key=lambda arg: self.uses.get(arg, 0) != 1)
        for arg in args:
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

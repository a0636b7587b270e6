"""A kernel's fused epilogue: the elementwise steps after a conv that ``FuseOps`` fuses into its kernel.

A conv2d workload's ``"epilogue"`` lists them in order, one Relax op per step, as plain data (the
workload is a cost-cache key). A step is:

- ``"bias"`` / ``"scale"``: ``+`` / ``*`` a per-channel constant, an operand of shape ``(1, O, 1, 1)``
  (a conv's bias, a folded batch norm's shift and scale); ``[op, "channel"]``: the other binary ops
  of :data:`BINARY_STEPS` by such an operand (a batch norm that could not be folded into a conv,
  decomposed: subtract the mean, divide by the deviation);
- ``"add"``: ``+`` a tensor of the output's shape, an operand (the residual add);
- a unary op (:data:`UNARY_STEPS`): ``"relu"``, ``"sigmoid"``, ``"tanh"``, ``"erf"``, ``"exp"``,
  ``"log"``, ``"gelu"``, ``"gelu_tanh"``, ``"silu"`` (the transcendental ones vectorised:
  :mod:`.transcendental`);
- ``["clip", lo, hi]`` and ``["leaky_relu", alpha]``;
- ``["broadcast_multiply", H, W]``: a ``(N, O, H, W)`` feature map (an operand) times the running
  value, ``(N, O, 1, 1)``, which it broadcasts to: the kernel's output is then that map's shape (a
  squeeze-excite gate's conv, into which ``FuseOps`` fuses the excite multiply);
- ``[op, value]`` with ``op`` one of :data:`BINARY_STEPS`: the running value ``op`` a scalar ``value``,
  or ``op`` an earlier value of the chain when ``value`` is ``"@k"`` (``"@0"``: the conv's output,
  ``"@k"``: the value after step ``k``). That is how an activation reading its input twice fuses.

The activations of mobile CNNs, as TVM's ONNX frontend and :func:`~layoutopt.tvm.prepare` write them
(each after the conv's ``"bias"``, its value ``"@1"``):

============================== =============================================================
activation                     steps
============================== =============================================================
ReLU6, ``Clip(0, 6)``          ``["maximum", 0.0], ["minimum", 6.0]``
hard-sigmoid                   ``["multiply", 0.2], ["add", 0.5], ["clip", 0.0, 1.0]``
hard-swish                     ``["add", 3.0], ["clip", 0.0, 6.0], ["divide", 6.0], ["multiply", "@1"]``
SiLU (``x * sigmoid(x)``)      ``"sigmoid", ["multiply", "@1"]``
GELU (erf form)                ``["divide", 1.4142135], "erf", ["add", 1.0], ["multiply", "@1"],
                               ["multiply", 0.5]``
GELU (tanh form)               ``["power", 3.0], ["multiply", 0.044715], ["add", "@1"],
                               ["multiply", 0.7978846], "tanh", ["add", 1.0], ["multiply", "@1"],
                               ["multiply", 0.5]``
Mish (ONNX's, as TVM imports)  ``"exp", ["add", 1.0], "log", "tanh", ["multiply", "@1"]``
leaky ReLU                     ``["leaky_relu", 0.1]``
============================== =============================================================

Each step's TE (:func:`apply_te`) is the TOPI computation Relax's legalization gives its op, so the
kernel measured computes what the build's fused function computes; :func:`apply_numpy` is its
float64 reference.

Example:
    >>> validate_epilogue(["bias", ["clip", 0, 6], ["multiply", "@1"]])
    ['bias', ['clip', 0.0, 6.0], ['multiply', '@1']]
    >>> epilogue_shapes(["bias", "relu", "add"], [1, 8, 4, 4])
    [[1, 8, 1, 1], [1, 8, 4, 4]]
    >>> apply_numpy(["bias", ["maximum", 0.0]], np.array([[-2.0, 1.0]]), [np.array([[0.5, 0.5]])]).tolist()
    [[0.0, 1.5]]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ...errors import ProblemError
from . import transcendental

__all__ = ["BINARY_STEPS", "BROADCAST_MULTIPLY", "CHANNEL", "EPILOGUE_STEPS", "OPERAND_STEPS", "UNARY_STEPS",
           "apply_numpy", "apply_te", "epilogue_shapes", "step_name", "takes_operand", "validate_epilogue"]

#: named steps taking an operand of the kernel: per-channel ``"bias"`` and ``"scale"``, the residual
#: ``"add"`` (``[op, "channel"]`` takes one too: :func:`takes_operand`)
OPERAND_STEPS = ("bias", "scale", "add")
#: the value of a binary step by a per-channel operand (``"bias"`` and ``"scale"`` for add and multiply)
CHANNEL = "channel"
#: unary steps, written as their name alone
UNARY_STEPS = ("relu", "sigmoid", "tanh", "erf", "exp", "log", "gelu", "gelu_tanh", "silu")
#: binary steps with a scalar or an earlier value of the chain: ``[op, value]``
BINARY_STEPS = ("add", "subtract", "multiply", "divide", "maximum", "minimum", "power")
#: the names of every step an epilogue may hold (a step's name: :func:`step_name`)
EPILOGUE_STEPS = tuple(dict.fromkeys((*OPERAND_STEPS, *UNARY_STEPS, *BINARY_STEPS, "clip", "leaky_relu",
                                      "broadcast_multiply")))

#: parameterised steps other than the binary ones: name -> number of numeric parameters
_PARAMETERS = {"clip": 2, "leaky_relu": 1}
#: the step multiplying a feature map by the running value broadcast over it: ``[name, H, W]``
BROADCAST_MULTIPLY = "broadcast_multiply"


def step_name(step: Any) -> str:
    """The name of a step: the string itself, or the first item of a list.

    Example:
        >>> step_name("bias"), step_name(["clip", 0.0, 6.0])
        ('bias', 'clip')
    """
    return step if isinstance(step, str) else str(step[0])


def takes_operand(step: Any) -> bool:
    """Does ``step`` read an operand of the kernel (a per-channel constant or the residual)?

    Example:
        >>> [takes_operand(step) for step in ("bias", "relu", ["divide", "channel"], ["divide", 6.0])]
        [True, False, True, False]
    """
    if isinstance(step, str):
        return step in OPERAND_STEPS
    return step[0] == BROADCAST_MULTIPLY or list(step[1:]) == [CHANNEL]


def validate_epilogue(steps: Any) -> list[Any]:
    """``steps`` normalised (lists, numbers as floats), or ProblemError naming the step at fault.

    Example:
        >>> validate_epilogue([("leaky_relu", 1), ["divide", 6]])
        [['leaky_relu', 1.0], ['divide', 6.0]]
    """
    if isinstance(steps, (str, bytes)) or not isinstance(steps, Sequence):
        raise ProblemError(f"conv2d epilogue {steps!r} must be a list of steps")
    normal: list[Any] = []
    for index, step in enumerate(steps, start=1):
        normal.append(_validate_step(step, index, len(normal)))
    return normal


def _validate_step(step: Any, index: int, earlier: int) -> Any:
    what = f"conv2d epilogue step {index} {step!r}"
    if isinstance(step, str):
        if step in OPERAND_STEPS or step in UNARY_STEPS:
            return step
        raise ProblemError(f"{what}: unknown step (known: {', '.join(EPILOGUE_STEPS)})")
    if not isinstance(step, Sequence) or not step or not isinstance(step[0], str):
        raise ProblemError(f"{what}: a step is a name or a list [name, parameters...]")
    name, *parameters = step
    if name in BINARY_STEPS:
        if len(parameters) != 1:
            raise ProblemError(f"{what}: {name} takes one value (a number, '@k' for a value of the chain, "
                           f"or {CHANNEL!r})")
        value = parameters[0]
        if value == CHANNEL:
            if name in ("add", "multiply"):
                raise ProblemError(f"{what}: write {'bias' if name == 'add' else 'scale'!r} for {name} by a "
                                   "per-channel constant")
            return [name, CHANNEL]
        if isinstance(value, str):
            if not (value.startswith("@") and value[1:].isdigit() and int(value[1:]) <= earlier):
                raise ProblemError(f"{what}: {value!r} names no earlier value of the chain "
                                   f"(@0 to @{earlier})")
            return [name, f"@{int(value[1:])}"]
        return [name, _number(value, what)]
    if name == BROADCAST_MULTIPLY:
        if len(parameters) != 2 or any(isinstance(v, bool) or not isinstance(v, int) or v < 1
                                       for v in parameters):
            raise ProblemError(f"{what}: {name} takes the map's height and width (positive integers)")
        return [name, *parameters]
    if name in _PARAMETERS:
        if len(parameters) != _PARAMETERS[name]:
            raise ProblemError(f"{what}: {name} takes {_PARAMETERS[name]} number(s)")
        return [name, *(_number(value, what) for value in parameters)]
    raise ProblemError(f"{what}: unknown step (known: {', '.join(EPILOGUE_STEPS)})")


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ProblemError(f"{what}: {value!r} is not a finite number")
    return float(value)


def epilogue_shapes(steps: Sequence[Any], out: Sequence[int]) -> list[list[int]]:
    """Logical shapes of an epilogue's operands, in order, for a kernel of logical output ``out``:
    ``(1, O, 1, 1)`` per per-channel step, the running value's per ``"add"``, the map's per
    ``"broadcast_multiply"`` (the others take none).

    Example:
        >>> epilogue_shapes(["bias", "add", "relu"], [1, 64, 56, 56])
        [[1, 64, 1, 1], [1, 64, 56, 56]]
    """
    batch, channels = int(out[0]), int(out[1])
    shapes, spatial = [], [int(out[2]), int(out[3])]
    for step in steps:
        if step == "add":
            shapes.append([batch, channels, *spatial])
        elif step_name(step) == BROADCAST_MULTIPLY:
            spatial = [int(step[1]), int(step[2])]
            shapes.append([batch, channels, *spatial])
        elif takes_operand(step):
            shapes.append([1, channels, 1, 1])
    return shapes


def _chain_index(value: str) -> int:
    return int(value[1:])


def _erf(values: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(values)


def _sigmoid(values: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-values))


_NUMPY_UNARY = {
    "relu": lambda x: np.maximum(x, 0.0),
    "sigmoid": _sigmoid,
    "tanh": np.tanh,
    "erf": _erf,
    "exp": np.exp,
    "log": np.log,
    "gelu": lambda x: x * (0.5 + _erf(x * math.sqrt(0.5)) * 0.5),
    "gelu_tanh": lambda x: 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * x * (1 + 0.044715 * x * x))),
    "silu": lambda x: x * _sigmoid(x),
}
_NUMPY_BINARY = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide,
                 "maximum": np.maximum, "minimum": np.minimum, "power": np.power}


def apply_numpy(steps: Sequence[Any], out: np.ndarray, operands: Sequence[np.ndarray]) -> np.ndarray:
    """A kernel's numpy output with the (validated) epilogue ``steps`` applied; ``operands`` in order."""
    values = [out]
    remaining = iter(operands)
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        for step in steps:
            x = values[-1]
            name = step_name(step)
            if step in ("bias", "add"):
                x = x + next(remaining)
            elif step == "scale":
                x = x * next(remaining)
            elif isinstance(step, str):
                x = _NUMPY_UNARY[step](x)
            elif name == "clip":
                x = np.clip(x, step[1], step[2])
            elif name == "leaky_relu":
                x = np.where(x > 0, x, x * step[1])
            elif name == BROADCAST_MULTIPLY:
                x = next(remaining) * x
            else:
                value = step[1]
                other = next(remaining) if value == CHANNEL else \
                    values[_chain_index(value)] if isinstance(value, str) else value
                x = _NUMPY_BINARY[name](x, other)
            values.append(x)
    return values[-1]


def sigmoid_te(tvm: Any, x: Any, times_input: bool = False) -> Any:
    """``1 / (1 + exp(-x))`` (``x * sigmoid(x)``, SiLU, with ``times_input``), vectorisable: what the
    build computes for ``relax.sigmoid`` and ``relax.nn.silu``
    (:func:`layoutopt.tvm.building.builder.legalize`)
    and a fused step computes.

    TOPI's own sigmoid lowers to one call of libm's ``expf`` per element, which LLVM cannot vectorise:
    a SiLU after a 1x1 conv of 96 channels at 112x112 took 2.9 ms on znver3 beside the conv's 0.41 ms,
    and 0.99 ms with a vectorised ``exp`` (now :func:`.transcendental.sigmoid`: within 3 ulp over the
    whole float32 range). Its intermediates are bound once (``Let``): with TOPI's ``fast_exp``, whose
    body reads its input several times, three sigmoids chained in one conv's epilogue took 6 s to
    build and four ran out of time. Bound once, the TIR grows linearly; TVM's simplifier still
    substitutes the bound values, so the schedules never inline two such functions into one
    expression (:func:`.common.nested_bindings`). Other dtypes than float32 keep TOPI's sigmoid.

    Example:
        >>> import tvm
        >>> x = tvm.te.placeholder((4,), name="x")
        >>> [int(d) for d in sigmoid_te(tvm, x).shape]
        [4]
    """
    if str(x.dtype) != "float32":
        gate = tvm.topi.sigmoid(x)
        return tvm.topi.multiply(x, gate) if times_input else gate

    def gate(value):
        return value * transcendental.sigmoid(value) if times_input else transcendental.sigmoid(value)

    return transcendental.pointwise_te(tvm, x, gate, "T_silu" if times_input else "T_sigmoid")


def softmax_te(tvm: Any, x: Any, axis: int = -1) -> Any:
    """``softmax(x)`` along ``axis`` with the vectorised ``exp`` of :func:`sigmoid_te`: what the build
    computes for ``relax.nn.softmax`` (:func:`layoutopt.tvm.building.builder.legalize`). TOPI's calls libm's
    ``expf`` once per element: the recogniser's softmax over 40 x 6625 class scores took 0.54 ms (znver3).
    The blocks keep TOPI's names. Other dtypes than float32 keep TOPI's softmax.

    Example:
        >>> import tvm
        >>> x = tvm.te.placeholder((2, 3, 5), name="x")
        >>> [int(d) for d in softmax_te(tvm, x, axis=1).shape]
        [2, 3, 5]
    """
    if str(x.dtype) != "float32":
        return tvm.topi.nn.softmax(x, axis=axis)
    te = tvm.te
    axis = axis % len(x.shape)
    reduced = [d for i, d in enumerate(x.shape) if i != axis]

    def across(index, k):  # the full index of x from a reduced one and a position along the axis
        return (*index[:axis], k, *index[axis:])

    def without_axis(index):  # the reduced index of a full one
        return (*index[:axis], *index[axis + 1:])

    k = te.reduce_axis((0, x.shape[axis]), name="k")
    largest = te.compute(reduced, lambda *i: te.max(x(*across(i, k)), axis=k), name="T_softmax_maxelem")
    exp = te.compute(x.shape, lambda *i: transcendental.exp(x(*i) - largest(*without_axis(i))),
                     name="T_softmax_exp")
    k = te.reduce_axis((0, x.shape[axis]), name="k")
    total = te.compute(reduced, lambda *i: te.sum(exp(*across(i, k)), axis=k), name="T_softmax_expsum")
    return te.compute(x.shape, lambda *i: exp(*i) / total(*without_axis(i)), name="T_softmax_norm")


def divide_te(tvm: Any, x: Any, divisor: float) -> Any:
    """``x / divisor`` for a constant ``divisor``, as the build computes ``relax.divide`` by a scalar
    constant (:func:`layoutopt.tvm.building.builder.legalize`): ``x`` times the float32 reciprocal, one
    multiply
    instead of a division (at most 1 ulp apart). Exact GELU as exporters write it divides by sqrt 2:
    a vector division per 16 outputs, as costly as several FMAs. Zero, a divisor whose reciprocal is
    no normal float32, and other dtypes than float32 keep TOPI's division.

    Example:
        >>> import tvm
        >>> x = tvm.te.placeholder((4,), name="x")
        >>> divide_te(tvm, x, 4.0).op.name
        'T_divide'
    """
    limits = np.finfo(np.float32)
    if str(x.dtype) != "float32" or divisor == 0 or not limits.tiny <= abs(1.0 / divisor) <= limits.max:
        return tvm.topi.divide(x, tvm.tirx.const(divisor, x.dtype))
    factor = tvm.tirx.const(1.0 / divisor, "float32")
    return tvm.te.compute(x.shape, lambda *i: x(*i) * factor, name="T_divide", tag="elemwise")


def _te_unary(tvm, name: str, x):
    """The TE of a unary step: what the build legalizes its op to (:mod:`.transcendental`'s vectorised
    functions, TOPI's ReLU)."""
    if name == "relu":
        return tvm.topi.nn.relu(x)
    if name in ("sigmoid", "silu"):
        return sigmoid_te(tvm, x, times_input=name == "silu")
    if name == "gelu":
        return transcendental.gelu_te(tvm, x)
    if name == "gelu_tanh":
        return transcendental.gelu_tanh_te(tvm, x)
    return transcendental.unary_te(tvm, name, x)


def apply_te(tvm: Any, steps: Sequence[Any], out: Any, operands: Sequence[Any]) -> Any:
    """The TE tensor of ``out`` with the (validated) epilogue ``steps`` applied; ``operands`` are the
    placeholders of its operand steps, in order. Each step is the TOPI computation Relax legalizes its
    op to, so that a measured kernel computes what the build's fused function computes.

    Example:
        >>> import tvm
        >>> conv = tvm.te.placeholder((1, 4, 2, 2), name="conv")
        >>> bias = tvm.te.placeholder((1, 4, 1, 1), name="bias")
        >>> out = apply_te(tvm, ["bias", ["maximum", 0.0], ["minimum", 6.0]], conv, [bias])   # ReLU6
        >>> [int(d) for d in out.shape], out.op.name
        ([1, 4, 2, 2], 'T_minimum')
    """
    topi = tvm.topi
    values = [out]
    remaining = iter(operands)
    for step in steps:
        x = values[-1]
        name = step_name(step)
        if step in ("bias", "add"):
            x = topi.add(x, next(remaining))
        elif step == "scale":
            x = topi.multiply(x, next(remaining))
        elif isinstance(step, str):
            x = _te_unary(tvm, step, x)
        elif name == "clip":
            x = topi.clip(x, step[1], step[2])
        elif name == "leaky_relu":
            x = topi.nn.leaky_relu(x, step[1])
        elif name == BROADCAST_MULTIPLY:
            x = topi.multiply(next(remaining), x)
        elif name == "power" and not isinstance(step[1], str):
            x = transcendental.power_te(tvm, x, step[1])
        elif name == "divide" and not isinstance(step[1], str):
            x = divide_te(tvm, x, step[1])
        else:
            value = step[1]
            other = next(remaining) if value == CHANNEL else \
                values[_chain_index(value)] if isinstance(value, str) else tvm.tirx.const(value, x.dtype)
            x = getattr(topi, name)(x, other)
        values.append(x)
    return values[-1]

"""Vectorisable float32 ``exp``, ``log``, ``erf``, ``tanh`` and sigmoid as TIR expressions, and the build's
elementwise ops made of them.

TVM's LLVM code generation lowers ``exp``, ``log``, ``erf``, ``tanh`` (through ``expf``), the sigmoid,
``pow`` and the trigonometric functions to one libm call per element: LLVM cannot vectorise a loop
around them, so a conv whose fused epilogue holds one runs an order of magnitude slower than without
(exact GELU after a 1x1 conv 48->96 at 160x160: 19-24 ms against 1.1-1.4 ms on znver4). Here each is
written as arithmetic the vector unit runs, as MLAS, oneDNN, Eigen and SLEEF do: range reduction
through the float's bits, polynomials, selects for the special values.

Accuracy over the whole float32 range (every exponent of both signs, denormals, +-0, +-inf, NaN), in
ulps of the exact value, measured against float64 references by ``tests/tvm/test_transcendental.py``
(znver4, with FMA, AVX2 code and without FMA alike; the test's bounds in brackets):

- ``exp``: Cody-Waite reduction by ln 2, Cephes' polynomial, the power of two in two halves (results
  that are denormal or overflow round once); 0.99 ulp [1.5].
- ``log``: the exponent taken from the bits (denormals scaled first), Cephes' polynomial on
  ``[sqrt(1/2), sqrt(2))``; 0.77 ulp [1.5].
- ``tanh``: ``x + x^3 P(x^2)`` below 0.625, ``(1 - u) / (1 + u)`` with ``u = exp(-2|x|)`` above;
  1.49 ulp [2].
- ``erf``: ``x + x R(x^2)`` below 0.875, ``1 - exp(E(|x|))`` above, ``E`` a polynomial fit of
  ``log(erfc)`` on ``[0.875, 3.95]`` (past 3.95, erf is 1 in float32); 1.26 ulp [2].
- sigmoid: ``e / (1 + e)`` or ``1 / (1 + e)`` with ``e = exp(-|x|)`` (no overflow, denormal tails kept);
  2.25 ulp [3].

The polynomials of ``tanh`` and ``erf`` are minimax fits made for this module (Lawson's iteration, a
weighted least-squares fit reweighted by its error, on float64 samples of ``math.erf``, ``math.erfc``
and ``numpy.tanh``, then checked in float32 arithmetic); ``exp`` and ``log`` keep Cephes'
coefficients. Each
intermediate is bound once (``Let``), so an expression inlined into a chain grows linearly.

Example:
    >>> import numpy as np, tvm
    >>> x = tvm.te.placeholder((4,), name="x")
    >>> lib = tvm.compile(tvm.te.create_prim_func([x, unary_te(tvm, "erf", x)]), target="llvm")
    >>> out = tvm.runtime.tensor(np.zeros(4, "float32"))
    >>> lib(tvm.runtime.tensor(np.array([0.0, 0.5, -2.0, np.inf], "float32")), out)
    >>> out.numpy().tolist()
    [0.0, 0.5204998850822449, -0.9953222870826721, 1.0]
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable
from typing import Any

from .._tvm import import_tvm

__all__ = ["LEGALIZERS", "LIBM_FUNCTIONS", "UNARY", "erf", "exp", "libm_calls", "log", "pointwise_te",
           "sigmoid", "tanh", "unary_te"]

F32 = "float32"

#: Cephes' float32 ``exp``: ln 2 in two parts (Cody-Waite; the first has few bits, so ``n * high`` is
#: exact), the polynomial's coefficients, highest degree first
_LN2_HIGH, _LN2_LOW = 0.693359375, -2.12194440e-4
_EXP_POLYNOMIAL = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1,
                   5.0000001201e-1)
#: past these, exp is +inf or rounds to 0 in float32 (exp(-104) < 2**-150)
_EXP_LOW, _EXP_HIGH = -104.0, 89.0

#: Cephes' float32 ``log(1 + m) = m - m^2 / 2 + m^3 P(m)`` on ``[sqrt(1/2) - 1, sqrt(2) - 1)``
_LOG_POLYNOMIAL = (7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1, 1.4249322787e-1,
                   -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1, 3.3333331174e-1)
_SQRT_HALF = 0.70710678118654752
_FLOAT32_MIN_NORMAL = 1.17549435e-38

#: ``tanh(x) = x + x^3 P(x^2)`` below :data:`_TANH_SPLIT` (a minimax fit; Cephes' differs in the
#: last digit); above, ``(1 - u) / (1 + u)``, ``u = exp(-2|x|)``, |x| clamped where tanh is 1 in float32
_TANH_SPLIT, _TANH_ONE = 0.625, 9.5
_TANH_POLYNOMIAL = (-5.704917479306459e-3, 2.0639028400182724e-2, -5.3739696741104126e-2,
                    1.3331441581249237e-1, -3.333328068256378e-1)

#: ``erf(x) = x + x R(x^2)`` below :data:`_ERF_SPLIT`; above, ``1 - exp(E(|x|))``, ``E`` a fit of
#: ``log(erfc)`` on ``[_ERF_SPLIT, _ERF_ONE]`` (erfc(3.95) < half an ulp of 1: erf is 1 beyond)
_ERF_SPLIT, _ERF_ONE = 0.875, 3.95
_ERF_SMALL = (-6.203199154697359e-4, 5.032171495258808e-3, -2.679145708680153e-2, 1.1282455176115036e-1,
              -3.761255145072937e-1, 1.2837915122509003e-1)
_ERF_LOG_ERFC = (1.9990361761301756e-4, -3.082017647102475e-3, 2.2381115704774857e-2, -1.0425037145614624e-1,
                 -6.368204355239868e-1, -1.1278895139694214, -1.4418420323636383e-4)


def _const(value: float) -> Any:
    return import_tvm().tirx.const(value, F32)


def _bind(value: Any, body: Callable[[Any], Any], name: str, dtype: str = F32) -> Any:
    """``body(v)`` with ``v`` (of ``dtype``) bound once to ``value`` (a ``Let``): however often ``body``
    reads it, ``value``'s expression is written once."""
    tirx = import_tvm().tirx
    var = tirx.Var(name, dtype)
    return tirx.Let(var, value, body(var))


def _horner(coefficients, t) -> Any:
    """The polynomial of ``coefficients`` (highest degree first) at ``t`` (LLVM contracts each step
    into one FMA)."""
    result = _const(coefficients[0])
    for coefficient in coefficients[1:]:
        result = result * t + _const(coefficient)
    return result


#: 1.5 * 2**23: ``x + _ROUNDING`` rounds ``x`` (|x| < 2**22) to the nearest integer ``n``, which the
#: sum's low mantissa bits then hold: ``bits(x + _ROUNDING) - bits(_ROUNDING) = n``
_ROUNDING = 12582912.0
_ROUNDING_BITS = 0x4B400000


def _power_of_two(exponent) -> Any:
    """``2 ** exponent`` for an int32 ``exponent`` of a normal float32 (-126 to 127), from its bits."""
    tirx = import_tvm().tirx
    biased = exponent + tirx.const(127, "int32")
    return tirx.reinterpret(F32, tirx.shift_left(biased, tirx.const(23, "int32")))


def _exp_reduced(value, scale: Callable[[Any, Any], Any], ln2_parts=(_LN2_HIGH, _LN2_LOW)) -> Any:
    """``exp(value)`` (|value| < 2**21): ``value = n ln 2 + r`` with ``|r| <= ln 2 / 2`` (ln 2 the sum of
    ``ln2_parts``), Cephes' polynomial of ``r``, then ``scale(mantissa, n)`` (``n`` an int32) puts
    the power of two on. ``n`` is rounded by adding :data:`_ROUNDING` and read from the sum's bits:
    no floor, no conversion."""
    tirx = import_tvm().tirx

    def reduced(shifted):
        n_float = shifted - _const(_ROUNDING)
        n = tirx.reinterpret("int32", shifted) - tirx.const(_ROUNDING_BITS, "int32")

        def polynomial(r):
            return _bind(r * r, lambda r2: _horner(_EXP_POLYNOMIAL, r) * r2 + r + _const(1.0), "r2")

        rest = value
        for part in ln2_parts:
            rest = rest - n_float * _const(part)
        return _bind(rest, lambda r: scale(polynomial(r), n), "r")

    return _bind(value * _const(1.4426950408889634) + _const(_ROUNDING), reduced, "shifted")


def _exp_moderate(value) -> Any:
    """``exp(value)`` for ``value`` known to lie in ``[-20, 0]`` (a normal result; no special value):
    what ``erf`` and ``tanh`` take the exponential of. ln 2 is one float32 there: its rounding error
    (2e-9) times ``|n| <= 29`` stays below an ulp of ``r``, one FMA fewer."""
    return _exp_reduced(value, lambda mantissa, n: mantissa * _power_of_two(n), (math.log(2.0),))


def exp(value) -> Any:
    """``exp(value)`` of a float32 TIR expression, vectorisable: within 1 ulp over the whole float32
    range, denormal results and overflow to inf included, NaN kept.

    Example:
        >>> import tvm
        >>> str(exp(tvm.tirx.Var("x", "float32")).ty)
        'float32'
    """
    tirx = import_tvm().tirx

    def scaled(mantissa, n):
        # two halves, each a normal power of two: a result past float32's range rounds once, in the
        # last multiplication (to a denormal, to zero or to inf)
        half = tirx.shift_right(n, tirx.const(1, "int32"))
        return mantissa * _power_of_two(half) * _power_of_two(n - half)

    def finite(x):
        clamped = tirx.max(tirx.min(x, _const(_EXP_HIGH)), _const(_EXP_LOW))
        return tirx.Select(tirx.isnan(x), x, _exp_reduced(clamped, scaled))

    return _bind(value, finite, "x")


def log(value) -> Any:
    """``log(value)`` of a float32 TIR expression, vectorisable: within 1 ulp over the positive floats
    (denormals included); ``log(0) = -inf``, ``log(inf) = inf``, NaN for negative values and NaN.

    Example:
        >>> import tvm
        >>> str(log(tvm.tirx.Var("x", "float32")).ty)
        'float32'
    """
    tirx = import_tvm().tirx
    i32 = "int32"

    def logarithm(x):
        denormal = x < _const(_FLOAT32_MIN_NORMAL)
        scaled = tirx.Select(denormal, x * _const(2.0**23), x)

        def from_bits(bits):
            # x = m * 2**e, m in [0.5, 1): the exponent field, and the mantissa with the exponent of 0.5
            exponent = tirx.Cast(F32, tirx.shift_right(bits, tirx.const(23, i32)) - tirx.const(126, i32))
            exponent = exponent - tirx.Select(denormal, _const(23.0), _const(0.0))
            fraction = tirx.bitwise_and(bits, tirx.const(0x007FFFFF, i32))
            mantissa = tirx.reinterpret(F32, tirx.bitwise_or(fraction, tirx.const(0x3F000000, i32)))

            def reduced(small):  # m in [sqrt(1/2), sqrt(2)): log(x) = e ln 2 + log(1 + (m - 1))
                e = exponent - tirx.Select(small, _const(1.0), _const(0.0))
                m = tirx.Select(small, mantissa + mantissa, mantissa) - _const(1.0)
                return _bind(m, lambda m: _bind(e, lambda e: _bind(m * m, lambda z: (
                    m + (m * z * _horner(_LOG_POLYNOMIAL, m) + e * _const(_LN2_LOW) - _const(0.5) * z)
                    + e * _const(_LN2_HIGH)), "z"), "e"), "m")

            return _bind(mantissa < _const(_SQRT_HALF), reduced, "small", "bool")

        result = _bind(tirx.reinterpret(i32, scaled), from_bits, "bits", i32)
        result = tirx.Select(x == _const(0.0), _const(-math.inf), result)
        result = tirx.Select(x < _const(0.0), _const(math.nan), result)
        result = tirx.Select(x == _const(math.inf), x, result)
        return tirx.Select(tirx.isnan(x), x, result)

    return _bind(value, logarithm, "x")


def tanh(value) -> Any:
    """``tanh(value)`` of a float32 TIR expression, vectorisable: within 2 ulp over the whole float32 range
    (``tanh(-0) = -0``, +-1 at +-inf, NaN kept).

    Example:
        >>> import tvm
        >>> str(tanh(tvm.tirx.Var("x", "float32")).ty)
        'float32'
    """
    tirx = import_tvm().tirx

    def hyperbolic(x):
        def large(u):  # u = exp(-2|x|) in (0, 0.29]
            return tirx.copysign((_const(1.0) - u) / (_const(1.0) + u), x)

        def branches(magnitude):
            far = _bind(_exp_moderate(_const(-2.0) * tirx.min(magnitude, _const(_TANH_ONE))), large, "u")
            # copysign: x + x^3 P gives +0 for -0 (-0 + +0)
            near = _bind(x * x, lambda z: tirx.copysign(x * z * _horner(_TANH_POLYNOMIAL, z) + x, x), "z")
            # NaN fails the comparison: it takes the polynomial, which keeps it
            return tirx.Select(magnitude >= _const(_TANH_SPLIT), far, near)

        return _bind(tirx.abs(x), branches, "magnitude")

    return _bind(value, hyperbolic, "x")


def erf(value) -> Any:
    """``erf(value)`` of a float32 TIR expression, vectorisable: within 2 ulp over the whole float32 range
    (``erf(-0) = -0``, +-1 at +-inf, NaN kept; no division).

    Example:
        >>> import tvm
        >>> str(erf(tvm.tirx.Var("x", "float32")).ty)
        'float32'
    """
    tirx = import_tvm().tirx

    def error_function(x):
        def branches(magnitude):
            far = _bind(tirx.min(magnitude, _const(_ERF_ONE)), lambda clamped: tirx.copysign(
                _const(1.0) - _exp_moderate(_horner(_ERF_LOG_ERFC, clamped)), x), "clamped")
            near = _bind(x * x, lambda z: x * _horner(_ERF_SMALL, z) + x, "z")
            # NaN fails the comparison: it takes the polynomial, which keeps it
            return tirx.Select(magnitude >= _const(_ERF_SPLIT), far, near)

        return _bind(tirx.abs(x), branches, "magnitude")

    return _bind(value, error_function, "x")


def sigmoid(value) -> Any:
    """``1 / (1 + exp(-value))`` of a float32 TIR expression, vectorisable: within 3 ulp over the whole
    float32 range (the denormal tail below -87 included), NaN kept.

    Example:
        >>> import tvm
        >>> str(sigmoid(tvm.tirx.Var("x", "float32")).ty)
        'float32'
    """
    tirx = import_tvm().tirx

    def logistic(x):
        # e = exp(-|x|) never overflows: sigmoid(x) = 1 / (1 + e) for x >= 0, e / (1 + e) below
        return _bind(exp(-tirx.abs(x)), lambda e: tirx.Select(x < _const(0.0), e, _const(1.0))
                     / (_const(1.0) + e), "e")

    return _bind(value, logistic, "x")


#: the vectorised float32 unary functions, by their epilogue step name
UNARY: dict[str, Callable[[Any], Any]] = {"exp": exp, "log": log, "tanh": tanh, "erf": erf,
                                          "sigmoid": sigmoid}


def pointwise_te(tvm: Any, x: Any, scalar: Callable[[Any], Any], name: str) -> Any:
    """``scalar(v)`` of each element ``v`` of ``x``, the element bound once (``Let``): inlining ``x``'s
    expression into it copies it once, however often ``scalar`` uses ``v``.

    Example:
        >>> import tvm
        >>> x = tvm.te.placeholder((3,), name="x")
        >>> pointwise_te(tvm, x, lambda v: v * v, "T_square").op.name
        'T_square'
    """
    tirx = tvm.tirx

    def element(*index):
        value = tirx.Var("value", x.dtype)
        return tirx.Let(value, x(*index), scalar(value))

    return tvm.te.compute(x.shape, element, name=name, tag="elemwise")


def unary_te(tvm: Any, name: str, x: Any) -> Any:
    """The TE tensor of the unary function ``name`` (:data:`UNARY`) of ``x``, vectorised for float32;
    other dtypes get TOPI's (libm) function. The block is named as TOPI names it (``T_erf``...).

    Example:
        >>> import tvm
        >>> x = tvm.te.placeholder((2, 3), name="x")
        >>> unary_te(tvm, "tanh", x).op.name
        'T_tanh'
    """
    if str(x.dtype) != F32:
        return getattr(tvm.topi, name)(x)
    return pointwise_te(tvm, x, UNARY[name], f"T_{name}")


def gelu_te(tvm: Any, x: Any) -> Any:
    """``x * (0.5 + 0.5 erf(x / sqrt 2))``, Relax's ``nn.gelu`` as TVM legalizes it, with the vectorised
    erf (other dtypes: TOPI's)."""
    if str(x.dtype) != F32:
        return x * (0.5 + tvm.topi.erf(x * math.sqrt(0.5)) * 0.5)
    return pointwise_te(tvm, x, lambda v: v * (_const(0.5) + erf(v * _const(math.sqrt(0.5))) * _const(0.5)),
                        "T_gelu")


def gelu_tanh_te(tvm: Any, x: Any) -> Any:
    """``0.5 x (1 + tanh(sqrt(2 / pi) x (1 + 0.044715 x^2)))``, Relax's ``nn.gelu_tanh``, with the
    vectorised tanh (other dtypes: TOPI's)."""
    def gelu(v, hyperbolic=tanh):
        inner = _const(math.sqrt(2.0 / math.pi)) * v * (_const(1.0) + _const(0.044715) * v * v)
        return _const(0.5) * v * (_const(1.0) + hyperbolic(inner))

    if str(x.dtype) != F32:
        return tvm.te.compute(x.shape, lambda *i: 0.5 * x(*i) * (1.0 + tvm.tirx.tanh(
            math.sqrt(2.0 / math.pi) * x(*i) * (1.0 + 0.044715 * x(*i) * x(*i)))), name="T_gelu_tanh")
    return pointwise_te(tvm, x, gelu, "T_gelu_tanh")


def softplus_te(tvm: Any, x: Any, beta: float = 1.0, threshold: float = 20.0) -> Any:
    """``log(1 + exp(beta x)) / beta`` (``x`` where ``beta x > threshold``), Relax's ``nn.softplus`` as
    TOPI computes it, with the vectorised exp and log (other dtypes: TOPI's)."""
    if str(x.dtype) != F32:
        return tvm.topi.nn.softplus(x, beta, threshold)
    tirx = tvm.tirx

    def softplus(v):
        scaled = _const(beta) * v
        return tirx.Select(scaled > _const(threshold), v,
                           _const(1.0 / beta) * log(_const(1.0) + exp(scaled)))

    return pointwise_te(tvm, x, softplus, "T_softplus")


#: integer exponents a ``power`` by a constant is computed for by multiplication (2 rounds once, as
#: LLVM folds ``pow(x, 2)``; up to 4, at most 2 roundings)
_INTEGER_POWERS = (2, 3, 4)


def power_te(tvm: Any, x: Any, exponent: float) -> Any:
    """``x ** exponent`` for a constant ``exponent`` of :data:`_INTEGER_POWERS` by multiplication (the
    tanh-GELU exporters write, ``Pow(x, 3)``); TOPI's ``power`` (libm's ``powf``) for any other."""
    if exponent not in _INTEGER_POWERS:
        return tvm.topi.power(x, tvm.tirx.const(exponent, x.dtype))

    def power(v):
        square = v * v
        return {2: square, 3: square * v, 4: _bind(square, lambda s: s * s, "square")}[int(exponent)]

    return pointwise_te(tvm, x, power, "T_power")


def _legalize_unary(name: str) -> Callable[[Any, Any], Any]:
    def legalize(bb, call):
        tvm = import_tvm()
        return bb.call_te(lambda x: unary_te(tvm, name, x), call.args[0], primfunc_name_hint=name)

    legalize.__doc__ = f"``relax.{name}`` -> :func:`unary_te` (vectorised float32 ``{name}``)."
    return legalize


def _legalize_gelu(bb, call):
    """``relax.nn.gelu`` -> :func:`gelu_te`."""
    tvm = import_tvm()
    return bb.call_te(lambda x: gelu_te(tvm, x), call.args[0], primfunc_name_hint="gelu")


def _legalize_gelu_tanh(bb, call):
    """``relax.nn.gelu_tanh`` -> :func:`gelu_tanh_te`."""
    tvm = import_tvm()
    return bb.call_te(lambda x: gelu_tanh_te(tvm, x), call.args[0], primfunc_name_hint="gelu_tanh")


def _legalize_softplus(bb, call):
    """``relax.nn.softplus`` -> :func:`softplus_te`."""
    tvm = import_tvm()
    beta, threshold = float(call.attrs.beta), float(call.attrs.threshold)
    return bb.call_te(lambda x: softplus_te(tvm, x, beta, threshold), call.args[0],
                      primfunc_name_hint="softplus")


def _legalize_power(bb, call):
    """``relax.power`` by a scalar constant of :data:`_INTEGER_POWERS` -> :func:`power_te`; any other
    power -> TVM's own legalization (``FLegalize``)."""
    tvm = import_tvm()
    from ..relax_expr import scalar_value

    exponent = scalar_value(call.args[1])
    data = call.args[0]
    if exponent in _INTEGER_POWERS and str(call.ty.dtype) == str(data.ty.dtype) and \
            str(call.ty.shape) == str(data.ty.shape):
        return bb.call_te(lambda x: power_te(tvm, x, exponent), data, primfunc_name_hint="power")
    return tvm.ir.Op.get("relax.power").get_attr("FLegalize")(bb, call)


#: the Relax ops the build legalizes to the vectorised functions of this module (the others by TVM)
LEGALIZERS: dict[str, Callable[[Any, Any], Any]] = {
    "relax.exp": _legalize_unary("exp"),
    "relax.log": _legalize_unary("log"),
    "relax.tanh": _legalize_unary("tanh"),
    "relax.erf": _legalize_unary("erf"),
    "relax.nn.gelu": _legalize_gelu,
    "relax.nn.gelu_tanh": _legalize_gelu_tanh,
    "relax.nn.softplus": _legalize_softplus,
    "relax.power": _legalize_power,
}

#: libm's scalar functions TVM's code generation may call per element (float32 and float64 names)
LIBM_FUNCTIONS = frozenset(
    f"{name}{suffix}" for suffix in ("f", "")
    for name in ("exp", "exp2", "exp10", "expm1", "log", "log2", "log10", "log1p", "erf", "erfc", "tanh",
                 "sinh", "cosh", "sin", "cos", "sincos", "tan", "asin", "acos", "atan", "atan2", "asinh",
                 "acosh", "atanh", "pow", "cbrt", "fmod"))

_CALL = re.compile(r"\bcall[lq]?\s+\*?([A-Za-z_][\w.]*)")


def libm_calls(assembly: str) -> Counter:
    """The calls to libm's scalar math functions (:data:`LIBM_FUNCTIONS`) in x86 ``assembly`` (a
    compiled module's ``inspect_source("asm")``), by function: each is one call per element of a loop
    that could run in vectors.

    Example:
        >>> libm_calls("vmulps %zmm1, %zmm2, %zmm0\\n\\tcall\\terff@PLT\\n\\tcallq *__tvm_f@GOTPCREL(%rip)")
        Counter({'erff': 1})
    """
    calls: Counter = Counter()
    for target in _CALL.findall(assembly):
        name = target.split("@")[0]
        if name in LIBM_FUNCTIONS:
            calls[name] += 1
    return calls

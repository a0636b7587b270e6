"""Relax expression helpers every floor of ``layoutopt.tvm`` uses: static shapes, tensor constants,
the number a scalar constant holds, how often a function reads each Var.

Floor 0 (beside ``_tvm``): it imports nothing else of ``layoutopt.tvm``, so that the kernel families,
the operator rules and the passes can all use it.

Example:
    >>> from tvm import relax
    >>> x = relax.Var("x", relax.TensorType((1, 8, 4, 4), "float32"))
    >>> static_shape(x)
    [1, 8, 4, 4]
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from ._tvm import import_tvm

__all__ = ["is_tensor_constant", "scalar_value", "static_shape", "var_uses"]


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

    Example:
        >>> from tvm import relax
        >>> is_tensor_constant(relax.const(np.ones((1, 8, 1, 1), "float32")))
        True
        >>> x = relax.Var("x", relax.TensorType((1, 8, 4, 4), "float32"))
        >>> is_tensor_constant(relax.op.clip(x, 0, 6).args[1])      # an IntImm
        False
    """
    tvm = import_tvm()
    return isinstance(expr, tvm.ir.expr.Constant) and isinstance(expr.ty, tvm.relax.TensorType)


def scalar_value(expr) -> float | None:
    """The number a one-element Relax tensor constant holds (``R.const(6.0)``), else None.

    Example:
        >>> from tvm import relax
        >>> scalar_value(relax.const(np.float32(6.0))), scalar_value(relax.const(np.ones(2, "float32")))
        (6.0, None)
    """
    if not is_tensor_constant(expr) or int(np.prod(expr.value.shape, dtype=np.int64)) != 1:
        return None
    return float(expr.value.numpy().reshape(-1)[0])


def var_uses(function) -> Counter:
    """How many times ``function``'s body reads each Var (its result included)."""
    tvm = import_tvm()
    uses: Counter = Counter()
    tvm.relax.analysis.post_order_visit(
        function.body, lambda expr: uses.update([expr]) if isinstance(expr, tvm.relax.Var) else None)
    return uses

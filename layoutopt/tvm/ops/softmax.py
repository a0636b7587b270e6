"""Softmax: a boundary of the layout graph (it runs in ``NCHW``), legalized with its ``exp``
vectorised (:func:`~layoutopt.tvm.kernels.epilogue.softmax_te`).

Example:
    >>> from tvm import relax
    >>> x = relax.Var("x", relax.TensorType((1, 10), "float32"))
    >>> SoftmaxRule().matches(relax.op.nn.softmax(x), "relax.nn.softmax")
    True
"""

from __future__ import annotations

from types import MappingProxyType

from .._tvm import import_tvm
from ..kernels.epilogue import softmax_te
from .rule import OpRule

__all__ = ["SoftmaxRule"]


def _legalize_softmax(bb, call):
    """``relax.nn.softmax`` -> :func:`~layoutopt.tvm.kernels.epilogue.softmax_te` (its ``exp`` vectorised)."""
    tvm = import_tvm()
    return bb.call_te(lambda x: softmax_te(tvm, x, int(call.attrs.axis)), call.args[0],
                      primfunc_name_hint="softmax")


class SoftmaxRule(OpRule):
    """``relax.nn.softmax``: no layout of its own (a boundary), its own legalization."""

    name = "softmax"
    ops = frozenset({"relax.nn.softmax"})
    legalizers = MappingProxyType({"relax.nn.softmax": _legalize_softmax})

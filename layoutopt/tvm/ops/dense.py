"""matmul by a constant 2-D weight (a dense layer): a target node whose choices are packed weight
layouts (:func:`~layoutopt.tvm.kernels.dense_candidates`), rewritten to the measured dense kernel with
its weight repacked at compile time.

Example:
    >>> from layoutopt.tvm import models
    >>> calls = {b.var.name: b.value for b in models.dense_head()["main"].body.blocks[0].bindings}
    >>> DenseRule().matches(calls["dense"], "relax.matmul")
    True
"""

from __future__ import annotations

from typing import Any

from ...errors import ProblemError
from ..kernels import dense, dense_candidates
from ..relax_expr import is_tensor_constant, static_shape
from .rule import Node, OpRule

__all__ = ["DenseRule", "dense_workload"]


def dense_workload(call) -> dict[str, Any]:
    """The dense workload of a ``relax.matmul(x, W)`` call by a 2-D ``(K, N)`` weight (held ``(N, K)``).

    Example:
        >>> from layoutopt.tvm import models
        >>> calls = {b.var.name: b.value for b in models.dense_head()["main"].body.blocks[0].bindings}
        >>> dense_workload(calls["dense"])     # relax.matmul(flatten, W) with W of shape (256, 10)
        {'op': 'dense', 'data': [1, 256], 'weight': [10, 256], 'dtype': 'float32'}
    """
    data, weight = static_shape(call.args[0]), static_shape(call.args[1])
    return {"op": "dense", "data": data, "weight": [weight[1], weight[0]],
            "dtype": str(call.args[0].ty.dtype)}


class DenseRule(OpRule):
    """``relax.matmul(x, W)`` of a computed 2-D ``x`` by a constant ``(K, N)`` weight: a target node
    (``NK``: TVM's dense on the transposed weight; ``NK{b}n``: the packed-weight kernel)."""

    name = "dense"
    ops = frozenset({"relax.matmul"})
    category, symbols, kernel = "dense", ("matmul", "dense"), True

    def extract(self, call, op, name, inputs, ctx) -> Node | None:
        data, weight = call.args[0], call.args[1]
        if not ctx.is_data(data) or not ctx.is_weight(weight):
            return None
        data_shape = ctx.shape(data, f"input of matmul {name!r}")
        weight_shape = ctx.shape(weight, f"weight of matmul {name!r}")
        if len(data_shape) != 2 or len(weight_shape) != 2:
            return None
        return self.target(dense_workload(call), ctx, data)

    def candidates(self, workload, ctx) -> list[dict[str, Any]]:
        # the blocks the user chose also restrict dense weight blocks
        return dense_candidates(workload, blocks=ctx.given_blocks) if ctx.given_blocks else \
            dense_candidates(workload)

    def rewrite(self, rw, var, call, op, choice) -> bool:
        """``matmul(x, W)`` -> the measured dense kernel of the candidate, the weight repacked here, in
        numpy; False for a choice without a ``weight`` layout (``NCHW``: TVM's own matmul)."""
        if "weight" not in choice:
            return False
        weight = call.args[1]
        if not is_tensor_constant(weight) or len(static_shape(weight) or ()) != 2:
            raise ProblemError(f"node {var.name!r}: a dense kernel {choice} needs a constant 2-D weight")
        workload = dense_workload(call)
        try:
            dense.FAMILY.validate_candidate(workload, choice)
        except ProblemError as exc:
            raise ProblemError(f"node {var.name!r}: {exc}") from None
        packed = dense.FAMILY.pack_weight(workload, choice, weight.value.numpy().T)
        tvm = rw.tvm
        new = rw.bb.call_te(lambda x, w: dense.FAMILY.compute(tvm, [x, w], workload, choice),
                            rw.value(call.args[0], None), rw.relax.const(packed, str(packed.dtype)),
                            primfunc_name_hint="dense" if choice["weight"] == "NK" else "dense_pack")
        rw.emit(var, new, None)
        return True

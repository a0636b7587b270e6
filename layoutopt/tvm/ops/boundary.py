"""The catch-all: any call no other rule makes a node of (reshape, softmax, a mean over channels, an
unknown op) is a boundary node, run in plain ``NCHW``.

Example:
    >>> from tvm import relax
    >>> x = relax.Var("x", relax.TensorType((1, 8, 2, 2), "float32"))
    >>> BoundaryRule().matches(relax.op.reshape(x, (1, 32)), "relax.reshape")
    True
"""

from __future__ import annotations

from .rule import Node, OpRule

__all__ = ["BoundaryRule"]


class BoundaryRule(OpRule):
    """Any call (``ops`` None): a boundary node with the single choice ``NCHW``; last in the registry."""

    name = "boundary"
    ops = None

    def extract(self, call, op, name, inputs, ctx) -> Node | None:
        shapes = [ctx.shape(v, f"input {v.name!r} of {name!r}") for v in inputs]
        named = op or (call.op.name_hint if hasattr(call.op, "name_hint") else type(call.op).__name__)
        return Node("boundary", {"op": named.rsplit(".", 1)[-1], "shapes": shapes}, op=named)

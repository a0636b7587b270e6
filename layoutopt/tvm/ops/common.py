"""What several operator rules share: the one 4-D computed input of a layout-following op, a common
layout node's blocked layouts, and the kernel family of a chosen candidate.

Example:
    >>> [f"{b}" for b in blocked_layouts(16, [8, 16, 32], lambda b: 48 % b == 0)]
    ['NCHW8c', 'NCHW16c']
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ...errors import ProblemError
from .._tvm import import_tvm
from ..kernels import NCHW, channel_blocks, family
from ..relax_expr import static_shape
from .rule import Node

__all__ = ["blocked_layouts", "common_layout_node", "four_d_input", "kernel_family"]


def four_d_input(call, is_data: Callable[[Any], bool]):
    """The first operand of ``call`` when it is a computed 4-D tensor and ``call`` returns one 4-D
    tensor (what a unary op, a pool or a resize keep the layout of), else None.

    Example:
        >>> from tvm import relax
        >>> x = relax.Var("x", relax.TensorType((1, 8, 4, 4), "float32"))
        >>> normalize = relax.BlockBuilder().normalize
        >>> four_d_input(normalize(relax.op.nn.relu(x)), lambda v: True).name
        'x'
        >>> four_d_input(normalize(relax.op.nn.dropout(x)), lambda v: True) is None   # a tuple out
        True
    """
    relax = import_tvm().relax
    args = list(call.args)
    if not args or not isinstance(args[0], relax.Var) or not is_data(args[0]):
        return None
    shape, out_shape = static_shape(args[0]), static_shape(call)
    if shape is None or len(shape) != 4 or out_shape is None or len(out_shape) != 4:
        return None  # e.g. dropout returns a tuple
    return args[0]


def blocked_layouts(channels: int, blocks: Sequence[int], fits: Callable[[int], bool]) -> list[str]:
    """``NCHW{b}c`` for each channel block ``b`` of ``blocks`` tried for ``channels``
    (:func:`~layoutopt.tvm.kernels.channel_blocks`) that ``fits``."""
    return [f"NCHW{b}c" for b in channel_blocks(channels, blocks) if fits(b)]


def common_layout_node(workload: dict[str, Any], shapes: list, blocked: bool, blocks: Sequence[int]) -> Node:
    """A multi-input node: one common layout of its inputs (``shapes``) and output, ``NCHW{b}c`` for the
    blocks dividing every input's channels where ``blocked``, and ``NCHW``.

    Example:
        >>> common_layout_node({"op": "add"}, [[1, 16, 4, 4], [1, 16, 4, 4]], True, [8, 16, 32]).layouts
        ['NCHW8c', 'NCHW16c', 'NCHW']
    """
    layouts = []
    if blocked:
        counts = {s[1] for s in shapes}
        layouts = blocked_layouts(min(counts), blocks, lambda b: all(c % b == 0 for c in counts))
    return Node("multi", workload, layouts=[*layouts, NCHW])


def kernel_family(name: str, workload: dict[str, Any], candidate: dict[str, Any]):
    """The kernel family computing node ``name``'s chosen ``candidate``, checked; ProblemError naming
    the node otherwise.

    Example:
        >>> workload = {"op": "dense", "data": [1, 16], "weight": [8, 16], "dtype": "float32"}
        >>> kernel_family("fc", workload, {"in": "NC", "out": "NC", "weight": "NK"}).op
        'dense'
    """
    try:
        kernels = family(workload, candidate)
        kernels.validate_candidate(workload, candidate)
    except ProblemError as exc:
        raise ProblemError(f"node {name!r}: {exc}") from None
    return kernels

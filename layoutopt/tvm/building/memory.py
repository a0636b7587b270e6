"""Will a model fit in memory? An estimate from its static shapes, checked before anything is allocated.

A huge input shape (``1x3x20000x20000``: 4.8 GB of float32, drawn in float64 first) would otherwise end
in numpy's ``MemoryError`` deep inside a run, after minutes of work. :func:`check_memory` refuses it
first, with the estimate and the limit.

The estimate is a **lower bound** of what tuning needs at its peak, from the Relax module's static
shapes (nothing is allocated to compute it):

* the inputs, drawn as float64 random numbers and then cast (``random_inputs``): each input's bytes,
  plus 8 bytes per element while it is drawn;
* the weights (the module's constants);
* twice the largest op's inputs and output together: the reference build (TVM's default build of the
  untouched model) and the build checked against it each run it, and each keeps its own buffers.

Builds timed side by side, and the measuring worker's copies of a kernel's tensors, need more. The
limit is the memory available to new processes without swapping (Linux's ``MemAvailable``, else the
free physical pages); where neither is known, nothing is refused. A model whose lower bound already
exceeds it cannot be tuned here.

Example:
    >>> from layoutopt.tvm import models
    >>> check_memory(models.chain(size=20000), limit=64 * 2**30)    # a 20000x20000 input, 64 GiB
    Traceback (most recent call last):
    ...
    layoutopt.errors.ProblemError: the model needs at least 141 GB of memory to tune, above the 68.7 GB
    available (the limit given); give it a smaller input shape. Estimate: inputs 12.8 GB + their float64
    draw 25.6 GB + weights 14 kB + 2 x 51.2 GB for the inputs and output of its largest op, conv1_bias
    (relax.add)
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ...errors import ProblemError
from .._tvm import import_tvm

__all__ = ["MemoryEstimate", "available_memory", "bytes_moved", "check_memory", "estimate_memory"]

#: bytes per element of the float64 draw the random inputs are cast from
_DRAW_BYTES = 8


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes a model needs at least to be tuned (see the module's docstring for the rule).

    Attributes:
        inputs: the inputs' bytes; ``drawn``: their elements' bytes as float64, while drawn;
        weights: the constants' bytes; ``largest_op``: the binding whose inputs and output together
        are the largest, ``largest_op_bytes`` their bytes.
    """

    inputs: int
    drawn: int
    weights: int
    largest_op: str
    largest_op_bytes: int

    @property
    def total(self) -> int:
        """The lower bound: inputs, their float64 draw, weights, and the largest op twice."""
        return self.inputs + self.drawn + self.weights + 2 * self.largest_op_bytes

    def describe(self) -> str:
        """The estimate's terms, for messages.

        Example:
            >>> MemoryEstimate(4_000_000, 8_000_000, 1_500, "conv1 (relax.nn.conv2d)", 20_000_000).describe()
            'inputs 4 MB + their float64 draw 8 MB + weights 1.5 kB + 2 x 20 MB for the inputs and ...'
        """
        return (f"inputs {_size(self.inputs)} + their float64 draw {_size(self.drawn)} + weights "
                f"{_size(self.weights)} + 2 x {_size(self.largest_op_bytes)} for the inputs and output of "
                f"its largest op, {self.largest_op}")


def _size(count: float) -> str:
    """Bytes in decimal units, 3 significant digits.

    Example:
        >>> _size(96e9), _size(1440), _size(12)
        ('96 GB', '1.44 kB', '12 B')
    """
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= scale:
            return f"{count / scale:.3g} {unit}"
    return f"{count:.0f} B"


def _bytes(ty, per_element: int | None = None) -> int:
    """Bytes of a value of Relax type ``ty`` (``per_element`` bytes each if given, else its dtype's): a
    tensor with a static shape, or a tuple of them; 0 for anything else (a shape, an object, a dynamic
    dim: the shape checks elsewhere say so)."""
    tvm = import_tvm()
    if isinstance(ty, tvm.relax.TupleType):
        return sum(_bytes(field, per_element) for field in ty.fields)
    if not isinstance(ty, tvm.relax.TensorType) or ty.shape is None:
        return 0
    try:
        elements = math.prod(int(dim) for dim in ty.shape)
    except (TypeError, ValueError):
        return 0
    if per_element is None:
        dtype = tvm.runtime.DataType(str(ty.dtype))
        per_element = math.ceil(dtype.bits * dtype.lanes / 8)
    return elements * per_element


def _call_bindings(main) -> Iterator:
    """The bindings of a Relax function's blocks whose value is a call (an op or a ``call_tir``)."""
    tvm = import_tvm()
    for block in getattr(main.body, "blocks", []):
        for binding in block.bindings:
            if isinstance(binding.value, tvm.relax.Call):
                yield binding


def estimate_memory(mod) -> MemoryEstimate:
    """The lower bound of the memory tuning ``mod`` needs, from its ``main``'s static shapes.

    Example:
        >>> from layoutopt.tvm import models
        >>> estimate = estimate_memory(models.chain())    # input (1, 8, 8, 8), convs to 16 channels
        >>> estimate
        MemoryEstimate(inputs=2048, drawn=4096, weights=13952, largest_op='conv1_bias (relax.add)',
                       largest_op_bytes=8192)
        >>> estimate.total
        36480
    """
    tvm = import_tvm()
    main = mod["main"]
    constants: dict[int, int] = {}

    def visit(expr) -> None:  # tensor constants, each once (a Python wrapper is made per visit)
        if isinstance(expr, tvm.ir.expr.Constant):
            constants.setdefault(expr.__chandle__(), _bytes(expr.ty))

    tvm.relax.analysis.post_order_visit(main, visit)
    largest, largest_bytes = "", 0
    for binding in _call_bindings(main):
        value = binding.value
        step = _bytes(binding.var.ty) + sum(_bytes(arg.ty) for arg in value.args
                                            if not isinstance(arg, tvm.ir.expr.Constant))
        if step > largest_bytes:
            op = value.op.name if isinstance(value.op, tvm.ir.Op) else "call"
            largest, largest_bytes = f"{binding.var.name} ({op})", step
    return MemoryEstimate(inputs=sum(_bytes(param.ty) for param in main.params),
                          drawn=sum(_bytes(param.ty, _DRAW_BYTES) for param in main.params),
                          weights=sum(constants.values()), largest_op=largest, largest_op_bytes=largest_bytes)


def bytes_moved(mod) -> int:
    """Bytes the calls of ``mod``'s ``main`` read and write per inference: every tensor argument of
    every call (weights included) and every call's output, from their static shapes, summed. On a
    fused module (one call per fused kernel: :func:`~layoutopt.tvm.building.builder.compile_module` counts it
    so) it is the traffic at the kernels' boundaries, what a build's memory-bound parts scale with; it
    is not a count of DRAM traffic (a tensor read from cache counts the same).

    Example:
        >>> from layoutopt.tvm import models
        >>> bytes_moved(models.chain())    # two convs, each then a bias add and a relu, not fused
        61056
    """
    return sum(_bytes(binding.var.ty) + sum(_bytes(arg.ty) for arg in binding.value.args)
               for binding in _call_bindings(mod["main"]))


def available_memory() -> tuple[int, str] | None:
    """``(bytes, source)``: the memory new processes can get without swapping, or None if unknown.

    Example:
        >>> available, source = available_memory()    # on Linux
        >>> available > 0, source
        (True, 'MemAvailable in /proc/meminfo')
    """
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            name, _, value = line.partition(":")
            if name == "MemAvailable" and value.split()[1:] == ["kB"]:
                return int(value.split()[0]) * 1024, "MemAvailable in /proc/meminfo"
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"), "free physical pages"
    except (AttributeError, ValueError, OSError):
        return None


def check_memory(mod, limit: int | None = None) -> MemoryEstimate:
    """Refuse ``mod`` before anything is allocated when tuning it cannot fit in memory.

    Args:
        mod: the Relax module to tune (static shapes).
        limit: bytes allowed; default: :func:`available_memory` (no check when unknown).

    Returns:
        The :class:`MemoryEstimate` (a lower bound of the peak).

    Raises:
        ProblemError: the estimate exceeds the limit; the message gives both, and the estimate's terms.

    Example:
        >>> from layoutopt.tvm import models
        >>> check_memory(models.default_model()).total     # fine: about 3 MB
        3122344
        >>> check_memory(models.chain(size=2048), limit=2**30)
        Traceback (most recent call last):
        ...
        layoutopt.errors.ProblemError: the model needs at least 1.48 GB of memory to tune, above the 1.07 GB
        available (the limit given); give it a smaller input shape. Estimate: ...
    """
    estimate = estimate_memory(mod)
    if limit is None:
        available = available_memory()
        if available is None:
            return estimate
        limit, source = available
    else:
        source = "the limit given"
    if estimate.total > limit:
        raise ProblemError(
            f"the model needs at least {_size(estimate.total)} of memory to tune, above the {_size(limit)} "
            f"available ({source}); give it a smaller input shape. Estimate: {estimate.describe()}"
        )
    return estimate

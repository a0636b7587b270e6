"""The registry of kernel families (:data:`FAMILIES`), and the candidates of a workload over them.

Every family implements :class:`~.family.KernelFamily`; a new one is a module defining its
``FAMILY`` and one line in :data:`FAMILIES`. :func:`family` finds the family of a (workload,
candidate) pair, :func:`candidates` the candidates of a workload over the families of its op.

Example:
    >>> FAMILIES["conv2d", "winograd"]
    <kernel family conv2d/winograd>
    >>> sorted(algorithm for op, algorithm in FAMILIES if op == "conv2d")
    ['depthwise', 'direct', 'gemm', 'winograd']
    >>> sorted(algorithm for op, algorithm in FAMILIES if op == "conv2d_transpose")
    ['direct', 'gemm']
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Any

from ...errors import ProblemError
from . import (
    conv2d,
    conv2d_transpose,
    conv2d_transpose_gemm,
    dense,
    depthwise,
    gemm,
    onnx_resize,
    resize,
    transform,
    winograd,
)
from .candidate import DIRECT, algorithm_of
from .convolution import LOOP_ORDERS
from .family import KernelFamily
from .padded import PaddedKernels
from .workload import NCHW, validate_workload

__all__ = ["DEFAULT_ALGORITHMS", "FAMILIES", "LOOP_ORDERS", "candidates", "conv2d_candidates",
           "dense_candidates", "family", "validate_candidate", "with_loop_order"]

#: ``(op, algorithm)`` -> the kernel family computing that op by that algorithm
FAMILIES: dict[tuple[str, str], KernelFamily] = {found.key: found for found in (
    conv2d.FAMILY,
    depthwise.FAMILY,
    winograd.FAMILY,
    gemm.FAMILY,
    dense.FAMILY,
    transform.FAMILY,
    conv2d_transpose.FAMILY,
    conv2d_transpose_gemm.FAMILY,
    resize.FAMILY,
    onnx_resize.FAMILY,
)}

#: the conv2d algorithms whose kernels are choices unless asked otherwise: all of them (each only
#: where it applies). Winograd and the 1x1 GEMM pay where their preferred layouts meet the graph's
#: (``benchmarks/results/e2e.md``), for about twice the kernels to measure.
DEFAULT_ALGORITHMS = ("direct", "winograd", "gemm")


@cache
def _padded(inner: KernelFamily) -> PaddedKernels:
    return PaddedKernels(inner)


def family(workload: dict[str, Any], candidate: dict[str, Any]) -> KernelFamily:
    """The kernel family of a (validated) workload's candidate; ProblemError if unknown. A conv2d
    candidate with an ``"oc_block"`` gets its family on padded output channels (:class:`PaddedKernels`).

    Example:
        >>> wl = {"op": "conv2d"}
        >>> family(wl, {"in": "NCHW16c", "out": "NCHW16c"})
        <kernel family conv2d/direct>
        >>> family(wl, {"in": "NCHW16c", "out": "NCHW", "oc_block": 16, "algorithm": "winograd"})
        <kernel family conv2d/winograd on padded output channels>
    """
    if not isinstance(candidate, dict):
        raise ProblemError(f"{workload['op']} candidate {candidate!r} must be a dict")
    algorithm = algorithm_of(candidate)
    found = FAMILIES.get((workload["op"], algorithm))
    if found is None:
        known = sorted(a for op, a in FAMILIES if op == workload["op"])
        raise ProblemError(f"{workload['op']} candidate {candidate!r}: unknown algorithm {algorithm!r} "
                           f"(known: {', '.join(known)})")
    if "oc_block" in candidate and workload["op"] == "conv2d":
        return _padded(found)
    return found


def validate_candidate(workload: dict[str, Any], candidate: dict[str, Any]) -> None:
    """Raise ProblemError unless ``candidate`` is valid for the (validated) ``workload``."""
    family(workload, candidate).validate_candidate(workload, candidate)


def with_loop_order(workload: dict[str, Any], candidate: dict[str, Any], order: str) -> dict[str, Any]:
    """``candidate`` with its parallel loop ``order`` (:data:`LOOP_ORDERS`) where its family takes that
    order (the blocked direct, GEMM and depthwise convs), else ``candidate`` as it is.

    A build takes one order for all its kernels (``build_variant(..., loop_order=)``): each thread
    then reads the rows or channel chunks it wrote itself in the layer before, where kernels of
    mixed orders hand lines from one core to the other at every layer (``real_models-notes.md``).

    Example:
        >>> wl = {"op": "conv2d", "data": [1, 16, 8, 8], "kernel": [16, 1, 3, 3], "strides": [1, 1],
        ...       "padding": [1, 1, 1, 1], "dilation": [1, 1], "groups": 16}
        >>> with_loop_order(wl, {"in": "NCHW16c", "out": "NCHW16c", "algorithm": "depthwise"}, "rows")
        {'in': 'NCHW16c', 'out': 'NCHW16c', 'algorithm': 'depthwise', 'order': 'rows'}
        >>> with_loop_order(wl, {"in": "NCHW", "out": "NCHW"}, "rows")    # plain NCHW: no such order
        {'in': 'NCHW', 'out': 'NCHW'}
    """
    if order not in LOOP_ORDERS:
        raise ProblemError(f"loop order {order!r}: expected one of {LOOP_ORDERS}")
    workload = validate_workload(workload)
    current = candidate.get("order", LOOP_ORDERS[0])
    if workload["op"] != "conv2d" or current == order or current not in LOOP_ORDERS:
        return candidate  # already so, or an order of the family's own (Winograd's)
    ordered = {**candidate, "order": order}
    if order == LOOP_ORDERS[0]:
        del ordered["order"]  # the default order has no key
    try:
        validate_candidate(workload, ordered)
    except ProblemError:  # Winograd's orders are its own; NCHW kernels have none
        return candidate
    return ordered


def conv2d_candidates(workload: dict[str, Any], algorithms: Sequence[str] = DEFAULT_ALGORITHMS,
                      **options: Any) -> list[dict[str, Any]]:
    """Kernel candidates of a conv2d: the direct ones (see :meth:`.conv2d.DirectConv2d.candidates`:
    ``blocks``, ``include_nchw``, ``orders``; for a depthwise conv, the blocked kernels of
    :mod:`.depthwise` and NCHW), then those of every other algorithm in ``algorithms`` that applies
    (:data:`FAMILIES`: ``"winograd"`` for 3x3 stride-1 convs, ``"gemm"`` for 1x1 ones, blocked and
    NCHW), over the same ``blocks``, each candidate once; ``include_nchw=False`` drops every plain
    NCHW kernel.

    Example:
        >>> wl = {"op": "conv2d", "data": [1, 16, 8, 8], "kernel": [16, 16, 3, 3], "strides": [1, 1],
        ...       "padding": [1, 1, 1, 1], "dilation": [1, 1], "groups": 1}
        >>> conv2d_candidates(wl, blocks=[16], algorithms=["direct"])
        [{'in': 'NCHW16c', 'out': 'NCHW16c'}, {'in': 'NCHW', 'out': 'NCHW'}]
        >>> conv2d_candidates(wl, blocks=[16])[2]     # a 3x3 stride-1 conv: direct, then Winograd
        {'in': 'NCHW16c', 'out': 'NCHW16c', 'algorithm': 'winograd', 'tile': 2}
    """
    workload = validate_workload(workload)
    direct = FAMILIES["conv2d", DIRECT]
    found = direct.candidates(workload, **options) if DIRECT in algorithms else []
    for algorithm in algorithms:
        if algorithm == DIRECT:
            continue
        kernels = FAMILIES.get(("conv2d", algorithm))
        if kernels is None:
            raise ProblemError(f"unknown conv2d algorithm {algorithm!r}; known: "
                               f"{sorted(a for op, a in FAMILIES if op == 'conv2d')}")
        if kernels.applies(workload):
            blocks = options.get("blocks")
            more = kernels.candidates(workload, **({} if blocks is None else {"blocks": blocks}))
            if not options.get("include_nchw", True):  # no plain NCHW kernel of any algorithm then
                more = [c for c in more if (c["in"], c["out"]) != (NCHW, NCHW)]
            found += [candidate for candidate in more if candidate not in found]  # the direct ones' too
    if not found:
        found = direct.candidates(workload, **options)  # no other algorithm applies: direct kernels
    return found


def dense_candidates(workload: dict[str, Any], **options: Any) -> list[dict[str, Any]]:
    """Weight-layout candidates of a dense layer (see :meth:`.dense.Dense.candidates`).

    Example:
        >>> wl = {"op": "dense", "data": [1, 2048], "weight": [1000, 2048], "dtype": "float32"}
        >>> [c["weight"] for c in dense_candidates(wl)]    # 16 and 32 pad 1000 features to 1008 and 1024
        ['NK', 'NK8n', 'NK16n', 'NK32n']
    """
    return FAMILIES["dense", DIRECT].candidates(validate_workload(workload), **options)


def candidates(workload: dict[str, Any], algorithms: Sequence[str] | None = None,
               **options: Any) -> list[dict[str, Any]]:
    """Candidates of any workload kind (layout transforms have the single candidate ``{}``): a conv2d's
    by :func:`conv2d_candidates`, another op's from each of its families that applies, the direct
    one's first, each of the others only if named in ``algorithms`` (None: every one).

    Example:
        >>> candidates({"op": "dense", "data": [1, 64], "weight": [8, 64], "dtype": "float32"})
        [{'in': 'NC', 'out': 'NC', 'weight': 'NK'}, {'in': 'NC', 'out': 'NC', 'weight': 'NK8n'}]
        >>> wl = {"op": "conv2d_transpose", "data": [1, 16, 8, 8], "kernel": [16, 16, 4, 4],
        ...       "strides": [2, 2]}
        >>> [c.get("algorithm", "direct") for c in candidates(wl, blocks=[16])]
        ['direct', 'direct', 'gemm']
    """
    workload = validate_workload(workload)
    if workload["op"] == "conv2d":
        return conv2d_candidates(workload, **({} if algorithms is None else {"algorithms": algorithms}),
                                 **options)
    found = FAMILIES[workload["op"], DIRECT].candidates(workload, **options)
    for (op, algorithm), kernels in FAMILIES.items():
        wanted = algorithms is None or algorithm in algorithms
        if op == workload["op"] and algorithm != DIRECT and wanted and kernels.applies(workload):
            found += kernels.candidates(workload, **options)
    return found

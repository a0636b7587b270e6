"""What every conv2d kernel family shares: :class:`Conv2dFamily` and the blocked algorithms' base.

Every conv2d family (direct, depthwise, Winograd, 1x1 GEMM, and any of them on padded output
channels) reads the same logical inputs (NCHW data, OIHW weight, then one operand per bias, scale or
residual-add step of the fused epilogue), computes the same numpy reference, takes its data in the
candidate's input layout and its epilogue operands in its output layout, and writes its output in
the output layout.
A family differs by its weight (:meth:`~Conv2dFamily.weight_shape`, :meth:`~Conv2dFamily.pack_weight`),
candidates, compute and schedule. :class:`BlockedConv2dAlgorithm` adds what the algorithms beside
the direct kernel share (NCHW{ib}c in, NCHW{ob}c out, vectorised along the output block, an
``"order"`` knob): their candidates and checks.

Example:
    >>> wl = {"op": "conv2d", "data": [1, 16, 8, 8], "kernel": [32, 16, 1, 1], "strides": [1, 1],
    ...       "padding": [0, 0, 0, 0], "dilation": [1, 1], "groups": 1, "epilogue": ["bias", "relu"]}
    >>> block_pairs(wl, [4, 8, 16])
    [(4, 8), (4, 16), (8, 8), (8, 16), (16, 8), (16, 16)]
"""

from __future__ import annotations

import itertools
from abc import abstractmethod
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar

import numpy as np

from ...errors import ProblemError
from .candidate import algorithm_of
from .epilogue import apply_numpy
from .family import KernelFamily
from .space import check_knobs
from .workload import (
    EPILOGUE_STEPS,
    NCHW,
    channel_blocks,
    check_divides,
    conv2d_output_shape,
    epilogue_shapes,
    layout_block,
    layout_shape,
    pack_data,
    padded_pairs,
    unpack_data,
    validate_workload,
    vector_out_blocks,
)

__all__ = ["LOOP_ORDERS", "BlockedConv2dAlgorithm", "Conv2dFamily", "apply_epilogue", "block_pairs",
           "blocked_weight", "check_blocked", "checked_orders", "conv2d_reference"]

#: the parallel loop orders of the blocked direct, GEMM and depthwise convs, the default first: over
#: output-channel chunks, then rows (``"oc"``), or rows, then chunks (``"rows"``)
LOOP_ORDERS = ("oc", "rows")


def conv2d_reference(workload: dict[str, Any], inputs: Sequence[np.ndarray]) -> np.ndarray:
    """The logical NCHW output of a conv2d workload (with its epilogue) computed in float64 numpy
    from logical inputs: data, OIHW kernel, then one operand per bias/add step.

    Example:
        >>> wl = {"data": [1, 2, 3, 3], "kernel": [1, 2, 1, 1], "strides": [1, 1], "padding": [0, 0, 0, 0],
        ...       "dilation": [1, 1], "groups": 1, "epilogue": ["relu"]}
        >>> float(conv2d_reference(wl, [np.ones((1, 2, 3, 3)), -np.ones((1, 2, 1, 1))]).max())
        0.0
    """
    data, kernel, *extra = inputs
    n, c, _, _ = data.shape
    out = np.zeros(conv2d_output_shape(workload), dtype=np.float64)
    _, o, out_h, out_w = out.shape
    groups = workload["groups"]
    (sh, sw), (dh, dw) = workload["strides"], workload["dilation"]
    top, left, bottom, right = workload["padding"]
    padded = np.pad(data, ((0, 0), (0, 0), (top, bottom), (left, right)))
    padded = padded.reshape(n, groups, c // groups, *padded.shape[2:])
    grouped = kernel.reshape(groups, o // groups, *kernel.shape[1:]).astype(np.float64)
    for y, x in itertools.product(range(kernel.shape[2]), range(kernel.shape[3])):
        patch = padded[
            :, :, :, y * dh : y * dh + sh * (out_h - 1) + 1 : sh, x * dw : x * dw + sw * (out_w - 1) + 1 : sw
        ]
        out += np.einsum("ngihw,goi->ngohw", patch, grouped[:, :, :, y, x], optimize=True).reshape(out.shape)
    return apply_epilogue(workload, out, extra)


def apply_epilogue(workload: dict[str, Any], out: np.ndarray, operands: Sequence[np.ndarray]) -> np.ndarray:
    """A conv's numpy output with its workload's epilogue applied (:func:`.epilogue.apply_numpy`;
    the operands of its bias, scale and residual steps in order)."""
    return apply_numpy(workload.get("epilogue", []), out, operands)


class Conv2dFamily(KernelFamily):
    """A conv2d kernel family: the logical inputs, reference, packing, placeholders and fused
    epilogue every conv2d family shares; a family supplies its weight's packed shape and packing,
    its candidates, compute and schedule."""

    op: ClassVar[str] = "conv2d"
    epilogue: ClassVar[tuple[str, ...]] = EPILOGUE_STEPS
    resident: ClassVar[tuple[str, ...]] = ("kernel",)

    @abstractmethod
    def weight_shape(self, workload: dict[str, Any], candidate: dict[str, Any]) -> tuple[int, ...]:
        """The shape of the weight its kernel reads (what :meth:`pack_weight` returns)."""

    @abstractmethod
    def pack_weight(self, workload: dict[str, Any], candidate: dict[str, Any],
                    weight: np.ndarray) -> np.ndarray:
        """The OIHW weight laid out (or transformed) for the candidate's kernel."""

    def logical_shapes(self, workload: dict[str, Any]) -> list[list[int]]:
        """NCHW data, OIHW kernel, then each epilogue operand."""
        return [workload["data"], workload["kernel"],
                *epilogue_shapes(workload.get("epilogue", []), conv2d_output_shape(workload))]

    def reference(self, workload: dict[str, Any], inputs: Sequence[np.ndarray]) -> np.ndarray:
        """:func:`conv2d_reference`: every conv2d family computes the same convolution."""
        return conv2d_reference(workload, inputs)

    def pack_inputs(self, workload: dict[str, Any], candidate: dict[str, Any],
                    inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """The data in the candidate's input layout, the weight by :meth:`pack_weight`, the epilogue
        operands in the output's layout."""
        data, kernel, *extra = inputs
        return [pack_data(data, candidate["in"]), self.pack_weight(workload, candidate, kernel),
                *(pack_data(x, candidate["out"]) for x in extra)]

    def unpack_output(self, workload: dict[str, Any], candidate: dict[str, Any],
                      output: np.ndarray) -> np.ndarray:
        """The output buffer as a logical NCHW array."""
        return unpack_data(output, candidate["out"])

    def placeholders(self, tvm: Any, workload: dict[str, Any], candidate: dict[str, Any]) -> list:
        """The data in the candidate's input layout, the weight of :meth:`weight_shape`, the epilogue
        operands in the output's layout."""
        te = tvm.te
        dtype = workload["dtype"]
        data = te.placeholder(layout_shape(workload["data"], candidate["in"]), dtype=dtype, name="data")
        kernel = te.placeholder(tuple(self.weight_shape(workload, candidate)), dtype=dtype, name="kernel")
        out = conv2d_output_shape(workload)
        operands = [
            te.placeholder(layout_shape(shape, candidate["out"]), dtype=dtype, name=f"epilogue_in{i}")
            for i, shape in enumerate(epilogue_shapes(workload.get("epilogue", []), out))
        ]
        return [data, kernel, *operands]


def blocked_weight(kernel_oihw: np.ndarray, candidate: dict[str, Any], size: tuple[int, int],
                   what: str) -> tuple[np.ndarray, int, int, int]:
    """``(weight, out_block, O, I)`` of an OIHW weight of kernel ``size`` that a blocked kernel packs
    by the candidate's output block; ProblemError naming ``what`` for another shape or a block that
    does not divide O.

    Example:
        >>> blocked_weight(np.zeros((32, 16, 1, 1)), {"out": "NCHW16c"}, (1, 1), "gemm")[1:]
        (16, 32, 16)
    """
    kernel_oihw = np.asarray(kernel_oihw)
    if kernel_oihw.ndim != 4 or kernel_oihw.shape[2:] != size:
        raise ProblemError(f"{what} needs an OIHW {size[0]}x{size[1]} kernel, not shape {kernel_oihw.shape}")
    out_block = layout_block(candidate["out"])
    o, i = kernel_oihw.shape[:2]
    check_divides(out_block, o, f"{what} for {candidate}")
    return kernel_oihw, out_block, o, i


def block_pairs(workload: dict[str, Any], blocks: Iterable[int]) -> list[tuple[int, int]]:
    """(input block, output block) pairs of a conv2d among the dividing ``blocks`` (see
    :func:`~.workload.channel_blocks`), output blocks of 8 or more: the kernels vectorised along the
    output block leave most of an AVX register idle with a 4-lane one
    (:func:`~.workload.vector_out_blocks`). A grouped conv's blocks, from ``blocks`` only, divide its
    channels per group (each block then lies in one group); where no block of 8 or more divides its
    outputs per group (ShuffleNet v1's bottlenecks: 12 or 20), the narrower ones do.

    Example:
        >>> grouped = {"data": [1, 60, 8, 8], "kernel": [240, 20, 1, 1], "groups": 3}
        >>> block_pairs(grouped, [4, 8, 16])
        [(4, 8), (4, 16)]
        >>> block_pairs({**grouped, "data": [1, 240, 8, 8], "kernel": [60, 80, 1, 1]}, [4, 8, 16])
        [(4, 4), (8, 4), (16, 4)]
    """
    blocks = list(blocks)
    groups = workload.get("groups", 1)
    if groups == 1:
        return [(ib, ob) for ib in channel_blocks(workload["data"][1], blocks)
                for ob in vector_out_blocks(workload["kernel"][0], blocks)]
    ins, outs = ([b for b in channel_blocks(c // groups, blocks) if b in blocks]
                 for c in (workload["data"][1], workload["kernel"][0]))
    outs = vector_out_blocks(workload["kernel"][0] // groups, outs) or outs
    return [(ib, ob) for ib in ins for ob in outs]


def checked_orders(orders: Iterable[str], known: Sequence[str], family: str) -> list[str]:
    """``orders`` as a list; ProblemError when empty or naming an order not in ``known``.

    Example:
        >>> checked_orders(["rows"], ("oc", "rows"), "conv2d loop")
        ['rows']
    """
    orders = list(orders)
    unknown = sorted(set(orders) - set(known))
    if unknown or not orders:
        raise ProblemError(f"{family} orders {unknown or orders} are not in {tuple(known)}")
    return orders


def check_blocked(workload: dict[str, Any], candidate: dict[str, Any], what: str, orders: Sequence[str],
                  knobs: set[str]) -> None:
    """ProblemError unless ``candidate`` has blocked in/out layouts dividing the channels, an order
    among ``orders`` (if any) and no keys but in, out, order and ``knobs``."""
    in_block, out_block = layout_block(candidate["in"]), layout_block(candidate["out"])
    if in_block is None or out_block is None:
        raise ProblemError(f"{what}: the kernel takes blocked layouts NCHW<b>c in and out")
    groups = workload.get("groups", 1)
    per_group = f", in each of its {groups} groups" if groups > 1 else ""
    check_divides(in_block, workload["data"][1] // groups, f"{what} input{per_group}")
    check_divides(out_block, workload["kernel"][0] // groups, f"{what} output{per_group}")
    if candidate.get("order", orders[0]) not in orders:
        raise ProblemError(f"{what}: 'order' must be one of {tuple(orders)}")
    unknown = sorted(set(candidate) - {"in", "out", "order", *knobs})
    if unknown:
        raise ProblemError(f"{what}: unknown keys {unknown}")


class BlockedConv2dAlgorithm(Conv2dFamily):
    """A conv2d algorithm beside the direct kernel, for the ungrouped convs whose shape it
    :meth:`fits`: NCHW{ib}c in, NCHW{ob}c out (output blocks of 8 or more), an ``"order"`` knob among
    :attr:`orders`, its own options (:attr:`options`, checked by :meth:`check_options`)."""

    #: values of the ``"order"`` schedule knob, the default (never written in a candidate) first
    orders: ClassVar[tuple[str, ...]]
    #: the candidate keys of its own beside in, out, algorithm and order
    options: ClassVar[tuple[str, ...]] = ()
    #: what :meth:`applies` asks of a conv2d, for the error naming a workload it refuses
    requirement: ClassVar[str]

    @abstractmethod
    def fits(self, workload: dict[str, Any]) -> bool:
        """Can it compute a (validated, ungrouped) conv2d of this kernel size, stride, padding, dilation?"""

    def applies(self, workload: dict[str, Any]) -> bool:
        """Is ``workload`` an ungrouped conv2d that it :meth:`fits`?"""
        workload = validate_workload(workload)
        return workload["op"] == "conv2d" and workload["groups"] == 1 and self.fits(workload)

    def check_options(self, candidate: dict[str, Any], what: str) -> None:
        """ProblemError unless the candidate's own :attr:`options` are valid (by default: none to check)."""

    def knob_domain(self, workload: dict[str, Any], candidate: dict[str, Any]) -> dict[str, tuple]:
        """The values each schedule knob of a (blocked, checked) candidate may take on any target,
        which :meth:`validate_candidate` holds it to (:func:`~.space.check_knobs`); by default the
        ``order``'s."""
        return {"order": self.orders}

    def blocked_candidates(self, workload: dict[str, Any], blocks: Iterable[int], orders: Iterable[str],
                           variants: Sequence[dict[str, Any]] = ({},), padded: bool = False
                           ) -> list[dict[str, Any]]:
        """Its candidates: for each of ``variants`` (its own options), every (NCHW{ib}c, NCHW{ob}c) pair
        of dividing ``blocks`` (:func:`block_pairs`), then with ``padded`` the padded output pairs
        (``"out": "NCHW", "oc_block": b``: :func:`~.workload.padded_pairs`), once per order in
        ``orders`` (the default order has no ``"order"`` key); none if it does not apply."""
        if not self.applies(workload):
            return []
        orders = checked_orders(orders, self.orders, self.algorithm)
        blocks = list(blocks)
        layouts = [(ib, {"out": f"NCHW{ob}c"}) for ib, ob in block_pairs(workload, blocks)]
        if padded:
            layouts += [(ib, {"out": NCHW, "oc_block": ob}) for ib, ob in padded_pairs(workload, blocks)]
        return [{"in": f"NCHW{ib}c", **out, "algorithm": self.algorithm, **variant,
                 **({} if order == self.orders[0] else {"order": order})}
                for variant in variants for ib, out in layouts for order in orders]

    def validate_candidate(self, workload: dict[str, Any], candidate: dict[str, Any]) -> None:
        """ProblemError unless it applies to ``workload`` and ``candidate`` is one of its blocked kernels."""
        what = f"{self.algorithm} candidate {candidate!r} of {workload!r}"
        if not self.applies(workload):
            raise ProblemError(f"{what}: {self.requirement}")
        if algorithm_of(candidate) != self.algorithm:
            raise ProblemError(f"{what}: 'algorithm' must be {self.algorithm!r}")
        self.check_options(candidate, what)
        check_blocked(workload, candidate, what, self.orders, {"algorithm", *self.options})
        check_knobs(candidate, self.knob_domain(workload, candidate), what)

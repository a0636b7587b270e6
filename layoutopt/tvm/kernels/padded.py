"""Padded output channels: a blocked conv2d kernel for a conv whose output channels no block divides.

SSD's class heads have 324 and 486 output channels (81 classes times 4 or 6 anchors). No block of 8
or more divides them, so they could only run as plain NCHW direct convs, vectorised along the rows:
a quarter of SSD-ResNet50-512's time went to one of them (3x3 1024->324 at 32x32), at a third of
what the blocked kernels sustain (``benchmarks/results/e2e-notes.md``, sixth pass, before and
after). A candidate with ``"oc_block": b`` instead
runs a blocked family's kernel (direct or Winograd) on the weight zero-padded to ``ceil(O/b)*b``
filters and writes the first ``O`` channels out as plain NCHW, in one more stage of the same
PrimFunc (``unpack_channels``); the conv's fused epilogue (bias, relu...) then runs on the NCHW
output. Its input may be any dividing block::

    {"in": "NCHW16c", "out": "NCHW", "oc_block": 16}                                 # direct
    {"in": "NCHW16c", "out": "NCHW", "oc_block": 16, "algorithm": "winograd", "tile": 4}

The padded filters cost their share of the FMAs (324 -> 336: 3.7 %); the output leaves in the
layout the heads' consumers (transpose, reshape, concat) read anyway.

Example:
    >>> wl = {"op": "conv2d", "data": [1, 32, 8, 8], "kernel": [12, 32, 3, 3], "strides": [1, 1],
    ...       "padding": [1, 1, 1, 1], "dilation": [1, 1], "groups": 1}
    >>> padded_pairs(wl, blocks=[8, 16])
    [(8, 8), (8, 16), (16, 8), (16, 16)]
    >>> blocked_equivalent(wl, {"in": "NCHW16c", "out": "NCHW", "oc_block": 8})[0]["kernel"]
    [16, 32, 3, 3]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import ProblemError
from .convolution import Conv2dFamily
from .space import ScheduleSpace
from .workload import NCHW, PADDED_BLOCKS, conv2d_output_shape, padded_pairs

__all__ = ["PADDED_BLOCKS", "UNPACK_BLOCK", "PaddedKernels", "blocked_equivalent", "padded_pairs"]

#: the name of the stage writing the NCHW output from the padded blocked one
UNPACK_BLOCK = "unpack_channels"


def blocked_equivalent(workload: dict[str, Any], candidate: dict[str, Any]
                       ) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(workload, candidate)`` of the blocked kernel a padded candidate runs: the filters padded to a
    multiple of ``oc_block``, the output ``NCHW{oc_block}c``, no epilogue (it runs on the NCHW output)."""
    block = candidate["oc_block"]
    out_channels, *rest = workload["kernel"]
    padded = {**workload, "kernel": [-(-out_channels // block) * block, *rest]}
    padded.pop("epilogue", None)
    blocked = {k: v for k, v in candidate.items() if k != "oc_block"}
    blocked["out"] = f"NCHW{block}c"
    return padded, blocked


@dataclass(frozen=True, repr=False)
class PaddedKernels(Conv2dFamily):
    """A blocked conv2d family (``inner``: the direct or the Winograd family) run on padded output
    channels and written out as NCHW: the kernel family of the candidates with an ``"oc_block"``
    (:func:`~layoutopt.tvm.kernels.registry.family` picks it). Its logical inputs, reference,
    packing of data and epilogue operands are every conv2d family's; its weight, compute and
    schedule the inner family's on the padded workload, then the NCHW unpack.

    Example:
        >>> from layoutopt.tvm.kernels import conv2d
        >>> wl = {"op": "conv2d", "data": [1, 32, 8, 8], "kernel": [12, 32, 3, 3], "strides": [1, 1],
        ...       "padding": [1, 1, 1, 1], "dilation": [1, 1], "groups": 1, "dtype": "float32"}
        >>> padded = PaddedKernels(conv2d.FAMILY)
        >>> padded, padded.applies(wl)
        (<kernel family conv2d/direct on padded output channels>, True)
        >>> weight = padded.pack_weight(wl, {"in": "NCHW16c", "out": "NCHW", "oc_block": 8},
        ...                             np.ones((12, 32, 3, 3), "float32"))
        >>> weight.shape, weight[:, :, :, :, :, 4:].any(axis=(1, 2, 3, 4, 5))   # filters 12-15: zero
        ((2, 2, 3, 3, 16, 8), array([ True, False]))
    """

    inner: Conv2dFamily

    @property
    def algorithm(self) -> str:  # type: ignore[override]
        """The inner family's."""
        return self.inner.algorithm

    def __repr__(self) -> str:
        return f"<kernel family conv2d/{self.algorithm} on padded output channels>"

    def applies(self, workload: dict[str, Any]) -> bool:
        """Where the inner family applies and no vector-wide block divides the output channels."""
        return self.inner.applies(workload) and bool(padded_pairs(workload, PADDED_BLOCKS))

    def candidates(self, workload: dict[str, Any], **options: Any) -> list[dict[str, Any]]:
        """The inner family's candidates on padded output channels (those with an ``"oc_block"``)."""
        return [c for c in self.inner.candidates(workload, **options) if "oc_block" in c]

    def validate_candidate(self, workload: dict[str, Any], candidate: dict[str, Any]) -> None:
        what = f"conv2d candidate {candidate!r}"
        block = candidate.get("oc_block")
        if isinstance(block, bool) or not isinstance(block, int) or block < 2:
            raise ProblemError(f"{what}: 'oc_block' must be an integer block of 2 or more")
        if candidate.get("out") != NCHW:
            raise ProblemError(f"{what}: a padded kernel writes its output as 'NCHW'")
        if workload["groups"] != 1:
            raise ProblemError(f"{what}: only an ungrouped conv2d has padded output blocks")
        if workload["kernel"][0] % block == 0:
            raise ProblemError(f"{what}: block {block} divides the {workload['kernel'][0]} output channels, "
                               f"so nothing needs padding: use 'out': 'NCHW{block}c'")
        self.inner.validate_candidate(*blocked_equivalent(workload, candidate))

    def space(self, workload: dict[str, Any], candidate: dict[str, Any], target: Any = None) -> ScheduleSpace:
        """The inner family's space on the padded filters."""
        return self.inner.space(*blocked_equivalent(workload, candidate), target)

    def weight_shape(self, workload: dict[str, Any], candidate: dict[str, Any]) -> tuple[int, ...]:
        """The inner kernel's weight shape on the padded filters."""
        return self.inner.weight_shape(*blocked_equivalent(workload, candidate))

    def pack_weight(self, workload: dict[str, Any], candidate: dict[str, Any],
                    weight: np.ndarray) -> np.ndarray:
        """The OIHW weight with zero filters appended up to the block, packed by the blocked kernel."""
        padded_workload, blocked = blocked_equivalent(workload, candidate)
        padded = np.zeros((padded_workload["kernel"][0], *weight.shape[1:]), dtype=weight.dtype)
        padded[: weight.shape[0]] = weight
        return self.inner.pack_weight(padded_workload, blocked, padded)

    def compute(self, tvm, inputs, workload: dict[str, Any], candidate: dict[str, Any]):
        """The blocked kernel's padded output, then its first ``O`` channels as NCHW."""
        padded = self.inner.compute(tvm, inputs[:2], *blocked_equivalent(workload, candidate))
        block = candidate["oc_block"]
        return tvm.te.compute(conv2d_output_shape(workload),
                              lambda n, c, y, x: padded[n, c // block, y, x, c % block], name=UNPACK_BLOCK)

    def schedule(self, func, target):
        """The inner family's schedule (the unpack stage is scheduled with its epilogue)."""
        return self.inner.schedule(func, target)

"""Layout transforms between ``NCHW`` and ``NCHW{b}c`` layouts: what a mismatched edge costs.

The single candidate is ``{}``; the kernel is ``topi.layout_transform``, parallel and vectorised.

Example:
    >>> wl = {"op": "layout_transform", "shape": [1, 32, 7, 7], "src": "NCHW", "dst": "NCHW16c"}
    >>> FAMILY.candidates(wl), FAMILY.logical_shapes(wl)
    ([{}], [[1, 32, 7, 7]])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ...errors import ProblemError
from .._tvm import import_tvm
from .common import schedule_injective
from .family import KernelFamily, tensor_bytes
from .workload import layout_shape, pack_data, unpack_data

__all__ = ["FAMILY", "LayoutTransform"]


class LayoutTransform(KernelFamily):
    """A tensor re-laid out from the workload's ``src`` layout to its ``dst`` layout."""

    op = "layout_transform"

    def candidates(self, workload: dict[str, Any], **options: Any) -> list[dict[str, Any]]:
        """The single candidate ``{}``."""
        return [{}]

    def validate_candidate(self, workload: dict[str, Any], candidate: dict[str, Any]) -> None:
        """Layout transforms take no candidate options."""
        if candidate:
            raise ProblemError(f"layout_transform candidate {candidate!r}: layout transforms take no "
                               "candidate options (use {})")

    def reference(self, workload: dict[str, Any], inputs: Sequence[np.ndarray]) -> np.ndarray:
        """The logical tensor itself: a transform moves elements, it changes none."""
        return inputs[0]

    def logical_shapes(self, workload: dict[str, Any]) -> list[list[int]]:
        """The logical NCHW tensor."""
        return [workload["shape"]]

    def pack_inputs(self, workload: dict[str, Any], candidate: dict[str, Any],
                    inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """The tensor in the source layout."""
        return [pack_data(inputs[0], workload["src"])]

    def unpack_output(self, workload: dict[str, Any], candidate: dict[str, Any],
                      output: np.ndarray) -> np.ndarray:
        """The destination-layout output as a logical NCHW array."""
        return unpack_data(output, workload["dst"])

    def placeholders(self, tvm, workload: dict[str, Any], candidate: dict[str, Any]) -> list:
        """The source tensor in its layout."""
        return [tvm.te.placeholder(layout_shape(workload["shape"], workload["src"]), dtype=workload["dtype"],
                                   name="src")]

    def memory(self, workload: dict[str, Any], candidate: dict[str, Any], target: Any = None) -> int:
        """A transform holds two copies of its tensor at once: the source's bytes and the
        destination's.

        Example:
            >>> wl = {"op": "layout_transform", "shape": [1, 16, 8, 8], "src": "NCHW", "dst": "NCHW8c",
            ...       "dtype": "float32"}
            >>> FAMILY.memory(wl, {})      # 2 x 16 x 8 x 8 x 4 bytes
            8192
        """
        return sum(tensor_bytes(layout_shape(workload["shape"], layout), workload["dtype"])
                   for layout in (workload["src"], workload["dst"]))

    def compute(self, tvm, inputs: Sequence, workload: dict[str, Any], candidate: dict[str, Any]):
        """The tensor in the destination layout."""
        return tvm.topi.layout_transform(inputs[0], workload["src"], workload["dst"])

    def schedule(self, func, target=None):
        """Every block parallel and vectorised."""
        sch = import_tvm().s_tir.Schedule(func)
        schedule_injective(sch)
        return sch


#: the family (:data:`~layoutopt.tvm.kernels.registry.FAMILIES` registers it)
FAMILY = LayoutTransform()

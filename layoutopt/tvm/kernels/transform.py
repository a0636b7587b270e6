"""Layout transforms between ``NCHW`` and ``NCHW{b}c`` layouts: what a mismatched edge costs.

The single candidate is ``{}``; the kernel is ``topi.layout_transform``, parallel and vectorised.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ...errors import ProblemError
from .common import schedule_injective
from .workload import layout_shape, pack_data, unpack_data

__all__ = ["reference", "validate_candidate"]


def validate_candidate(workload: dict[str, Any], candidate: dict[str, Any]) -> None:
    """Layout transforms take no candidate options."""
    if candidate:
        raise ProblemError(f"layout_transform candidate {candidate!r}: layout transforms take no "
                           "candidate options (use {})")


def reference(workload: dict[str, Any], inputs: Sequence[np.ndarray]) -> np.ndarray:
    """The logical tensor itself: a transform moves elements, it changes none."""
    return inputs[0]


def logical_shapes(workload: dict[str, Any]) -> list[list[int]]:
    """The logical NCHW tensor."""
    return [workload["shape"]]


def pack_inputs(workload: dict[str, Any], candidate: dict[str, Any], inputs: Sequence[np.ndarray]) -> list:
    """The tensor in the source layout."""
    return [pack_data(inputs[0], workload["src"])]


def unpack_output(workload: dict[str, Any], candidate: dict[str, Any], output: np.ndarray) -> np.ndarray:
    """The destination-layout output as a logical NCHW array."""
    return unpack_data(output, workload["dst"])


def placeholders(tvm, workload: dict[str, Any], candidate: dict[str, Any]) -> list:
    """The source tensor in its layout."""
    return [tvm.te.placeholder(layout_shape(workload["shape"], workload["src"]), dtype=workload["dtype"],
                               name="src")]


def compute(tvm, inputs: Sequence, workload: dict[str, Any], candidate: dict[str, Any]):
    """The tensor in the destination layout."""
    return tvm.topi.layout_transform(inputs[0], workload["src"], workload["dst"])


def schedule(func, target=None):
    """Every block parallel and vectorised."""
    from .._tvm import import_tvm

    sch = import_tvm().s_tir.Schedule(func)
    schedule_injective(sch)
    return sch

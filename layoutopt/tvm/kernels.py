"""CPU kernels for every workload kind: TE compute, a hand-written ``s_tir`` schedule, a numpy reference.

A *workload* is a JSON-able dict describing one operator instance and a *candidate* a JSON-able dict
choosing its layouts (and optional schedule knobs); both are cache keys, so they stay plain data:

- conv2d: ``{"op": "conv2d", "data": [N,C,H,W], "kernel": [O,C/groups,KH,KW], "strides": [sh,sw],
  "padding": [top,left,bottom,right], "dilation": [dh,dw], "groups": g, "dtype": "float32"}``,
  candidate ``{"in": "NCHW16c", "out": "NCHW8c"}`` or ``{"in": "NCHW", "out": "NCHW"}``; a blocked one
  may add schedule knobs (:data:`CONV2D_SCHEDULE_KNOBS`): ``"order": "rows"`` (output rows outside the
  channel chunks) and ``"reg_n"`` (register tile width).
- dense: ``{"op": "dense", "data": [M,K], "weight": [N,K], "dtype": "float32"}``, candidate
  ``{"in": "NC", "out": "NC", "weight": "NK"}`` or a packed weight ``"NK16n"``.
- layout_transform: ``{"op": "layout_transform", "shape": [N,C,H,W], "src": "NCHW16c", "dst": "NCHW8c",
  "dtype": "float32"}``, single candidate ``{}``.

MetaSchedule segfaults in apache-tvm 0.27 and Relax schedules nothing on CPU by default (an
unscheduled conv is ~100x slower), so the schedules here are ports of AutoTVM's x86 templates.
:func:`schedule_module` applies the same schedules to a legalized Relax module.

Example::

    wl = {"op": "conv2d", "data": [1, 16, 8, 8], "kernel": [16, 16, 3, 3], "strides": [1, 1],
          "padding": [1, 1, 1, 1], "dilation": [1, 1], "groups": 1, "dtype": "float32"}
    cands = conv2d_candidates(wl)              # [{"in": "NCHW4c", "out": "NCHW4c"}, ...]
    kernel = build_kernel(wl, cands[0], target="llvm")
    max_error = check_kernel(kernel)           # ~1e-6
"""

from __future__ import annotations

import itertools
import logging
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ProblemError
from ._tvm import import_tvm, resolve_target

#: Version of the hand-written schedules and of how they are timed. It is part of every cost-cache
#: key (see ``Measurer``), so timings of kernels built by an older schedule, or timed in a way now
#: known to be wrong, are never reused: bump it whenever either changes. 3: the measuring worker
#: runs BLAS on one thread (``measure.WORKER_BLAS_THREADS``); times of version 2 were inflated.
#: 4: a partial register tile for prime output widths above 8 (:func:`register_tile`).
SCHEDULE_VERSION = 4

__all__ = [
    "DEFAULT_BLOCKS",
    "Kernel",
    "ScheduleModule",
    "build_kernel",
    "candidates",
    "check_kernel",
    "conv2d_candidates",
    "conv2d_output_shape",
    "dense_candidates",
    "layout_block",
    "layout_transform_workload",
    "pack_conv2d_kernel",
    "pack_data",
    "reference_output",
    "schedule_module",
    "unpack_data",
    "validate_candidate",
    "validate_workload",
]

logger = logging.getLogger(__name__)

#: channel blocks tried by default (plus C itself when C < 8), each kept only where it divides C
DEFAULT_BLOCKS = (4, 8, 16, 32, 64)
#: dense weight blocks (the packed output-feature block is the vector width)
DEFAULT_DENSE_BLOCKS = (8, 16, 32)
#: largest relative error accepted against the numpy reference (float32, reductions up to ~5000 terms)
RELATIVE_TOLERANCE = 1e-3

#: Elementwise steps a conv2d workload's ``epilogue`` may list, in order, as ``FuseOps`` fuses them
#: into the convolution's kernel: ``bias`` (+ a per-channel constant), ``add`` (+ another tensor of
#: the output's shape: a residual), ``relu``. The kernel is then measured as the build runs it.
EPILOGUE_STEPS = ("bias", "add", "relu")

#: Knobs of a blocked conv2d candidate that change its schedule, not its layouts. ``order``: the
#: parallel loop nest runs over output-channel chunks, then rows (``"oc"``, AutoTVM's, the default),
#: or rows, then chunks (``"rows"``). Chunks outside re-read the whole input once per chunk; rows
#: outside keep one input row (all channels) in cache while every chunk uses it. Neither wins
#: everywhere: on SSD's 128x128 maps a 1x1 256->64 conv at 16c ran 6.94 ms chunks-outside and 3.26
#: ms rows-outside, and a 1x1 128->512 at 64x64 3.22 vs 3.42 ms. But which wins depends on how much
#: of the shared L3 the other tenants leave: on this VM the two passes of one measurement flipped
#: it, and whole networks built with the faster order per kernel were no faster (SSD 257 vs 259
#: ms, ResNet-50 40.0 vs 39.3 ms); so it is a candidate only when asked for (``orders=``), as it
#: doubles the blocked convs to measure. ``reg_n``: the register tile width (default
#: :func:`register_tile`).
CONV2D_SCHEDULE_KNOBS = ("order", "reg_n")
#: values of the ``order`` knob, the default first
CONV2D_ORDERS = ("oc", "rows")
#: the loop orders of blocked conv2d candidates unless asked for others
DEFAULT_ORDERS = ("oc",)
#: the module attribute through which :func:`~layoutopt.tvm.apply_layouts` hands each blocked conv's
#: schedule knobs to :func:`schedule_module`: ``{conv2d_schedule_key(...): {"order": "rows"}}``
SCHEDULES_ATTR = "layoutopt.conv2d_schedules"

_BLOCKED = re.compile(r"^NCHW([1-9][0-9]*)c$")
_DENSE_WEIGHT = re.compile(r"^NK(?:([1-9][0-9]*)n)?$")
_SCHEDULED = "tirx.is_scheduled"


# --------------------------------------------------------------------------------------------------
# layouts and workloads
# --------------------------------------------------------------------------------------------------


def layout_block(layout: str) -> int | None:
    """The channel block of ``"NCHW{b}c"`` (``None`` for plain ``"NCHW"``); ProblemError otherwise.

    Example::

        layout_block("NCHW16c")   # 16
    """
    if layout == "NCHW":
        return None
    match = _BLOCKED.match(layout) if isinstance(layout, str) else None
    if match is None:
        raise ProblemError(f"layout {layout!r} is neither 'NCHW' nor 'NCHW<b>c' (e.g. 'NCHW16c')")
    return int(match.group(1))


def _layout_shape(nchw: Sequence[int], layout: str) -> tuple[int, ...]:
    n, c, h, w = nchw
    block = layout_block(layout)
    if block is None:
        return (n, c, h, w)
    return (n, c // block, h, w, block)


def _check_divides(block: int | None, channels: int, what: str) -> None:
    if block is not None and channels % block:
        raise ProblemError(f"{what}: block {block} does not divide the {channels} channels")


def validate_workload(workload: dict[str, Any]) -> dict[str, Any]:
    """Check a workload dict and return it normalised (plain ints and lists), or raise ProblemError.

    Example::

        validate_workload({"op": "dense", "data": [1, 8], "weight": [4, 8], "dtype": "float32"})
    """
    if not isinstance(workload, dict) or "op" not in workload:
        raise ProblemError(f"workload {workload!r} must be a dict with an 'op' key")
    op = workload["op"]
    checker = _VALIDATORS.get(op)
    if checker is None:
        raise ProblemError(f"workload op {op!r} is not one of {sorted(_VALIDATORS)}")
    try:
        return checker(workload)
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, ProblemError):
            raise
        raise ProblemError(f"malformed {op} workload {workload!r}: {exc!r}") from None


def _ints(value: Any, length: int, what: str, minimum: int) -> list[int]:
    items = list(value)
    if len(items) != length or any(int(v) != v or int(v) < minimum for v in items):
        raise ProblemError(f"{what} must be {length} integers >= {minimum}, got {value!r}")
    return [int(v) for v in items]


def _dtype(workload: dict[str, Any]) -> str:
    dtype = workload.get("dtype", "float32")
    if dtype not in ("float32", "float64"):
        raise ProblemError(f"workload dtype {dtype!r} is not supported (float32 or float64)")
    return dtype


def _validate_conv2d(workload: dict[str, Any]) -> dict[str, Any]:
    data = _ints(workload["data"], 4, "conv2d 'data' shape [N,C,H,W]", 1)
    kernel = _ints(workload["kernel"], 4, "conv2d 'kernel' shape [O,C/groups,KH,KW]", 1)
    strides = _ints(workload.get("strides", [1, 1]), 2, "conv2d 'strides'", 1)
    padding = list(workload.get("padding", [0, 0, 0, 0]))
    if len(padding) == 2:
        padding = padding * 2
    padding = _ints(padding, 4, "conv2d 'padding' [top,left,bottom,right]", 0)
    dilation = _ints(workload.get("dilation", [1, 1]), 2, "conv2d 'dilation'", 1)
    groups = int(workload.get("groups", 1))
    channels, out_channels = data[1], kernel[0]
    if groups < 1 or channels % groups or out_channels % groups:
        raise ProblemError(
            f"conv2d groups={groups} must divide the {channels} input and {out_channels} output channels"
        )
    if kernel[1] * groups != channels:
        raise ProblemError(
            f"conv2d kernel {kernel} expects {kernel[1] * groups} input channels, data {data} has {channels}"
        )
    normal = {
        "op": "conv2d",
        "data": data,
        "kernel": kernel,
        "strides": strides,
        "padding": padding,
        "dilation": dilation,
        "groups": groups,
        "dtype": _dtype(workload),
    }
    out = conv2d_output_shape(normal)
    if out[2] < 1 or out[3] < 1:
        raise ProblemError(
            f"conv2d workload {workload!r} has an empty output {out}: kernel larger than padded input"
        )
    epilogue = list(workload.get("epilogue") or [])
    unknown = [step for step in epilogue if step not in EPILOGUE_STEPS]
    if unknown:
        raise ProblemError(f"conv2d epilogue steps {unknown} are not among {list(EPILOGUE_STEPS)}")
    if epilogue:  # absent when empty, so plain convolutions keep their cache keys
        normal["epilogue"] = epilogue
    return normal


def _validate_dense(workload: dict[str, Any]) -> dict[str, Any]:
    data = _ints(workload["data"], 2, "dense 'data' shape [M,K]", 1)
    weight = _ints(workload["weight"], 2, "dense 'weight' shape [N,K]", 1)
    if data[1] != weight[1]:
        raise ProblemError(f"dense data {data} and weight {weight} disagree on the reduction size K")
    return {"op": "dense", "data": data, "weight": weight, "dtype": _dtype(workload)}


def _validate_layout_transform(workload: dict[str, Any]) -> dict[str, Any]:
    shape = _ints(workload["shape"], 4, "layout_transform 'shape' [N,C,H,W]", 1)
    src, dst = workload["src"], workload["dst"]
    if src == dst:
        raise ProblemError(f"layout_transform from {src!r} to itself is free: nothing to measure")
    for layout in (src, dst):
        _check_divides(layout_block(layout), shape[1], f"layout_transform {src}->{dst} of shape {shape}")
    return {"op": "layout_transform", "shape": shape, "src": src, "dst": dst, "dtype": _dtype(workload)}


_VALIDATORS = {
    "conv2d": _validate_conv2d,
    "dense": _validate_dense,
    "layout_transform": _validate_layout_transform,
}


def conv2d_output_shape(workload: dict[str, Any]) -> tuple[int, int, int, int]:
    """Logical NCHW output shape of a conv2d workload."""
    n, _, h, w = workload["data"]
    o, _, kh, kw = workload["kernel"]
    (sh, sw), (dh, dw) = workload["strides"], workload["dilation"]
    top, left, bottom, right = workload["padding"]
    out_h = (h + top + bottom - dh * (kh - 1) - 1) // sh + 1
    out_w = (w + left + right - dw * (kw - 1) - 1) // sw + 1
    return (n, o, out_h, out_w)


def layout_transform_workload(
    shape: Sequence[int], src: str, dst: str, dtype: str = "float32"
) -> dict[str, Any]:
    """The workload dict for transforming a tensor of logical NCHW ``shape`` from ``src`` to ``dst``.

    Example::

        layout_transform_workload([1, 64, 56, 56], "NCHW", "NCHW16c")
    """
    return validate_workload(
        {"op": "layout_transform", "shape": [int(s) for s in shape], "src": src, "dst": dst, "dtype": dtype}
    )


# --------------------------------------------------------------------------------------------------
# candidates
# --------------------------------------------------------------------------------------------------


def channel_blocks(channels: int, blocks: Iterable[int] = DEFAULT_BLOCKS) -> list[int]:
    """Blocks from ``blocks`` dividing ``channels``, plus ``channels`` itself when it is below 8."""
    chosen = {int(b) for b in blocks if int(b) > 0 and channels % int(b) == 0}
    if channels < 8:
        chosen.add(channels)
    return sorted(chosen)


def conv2d_candidates(
    workload: dict[str, Any],
    blocks: Iterable[int] = DEFAULT_BLOCKS,
    include_nchw: bool = True,
    orders: Iterable[str] = DEFAULT_ORDERS,
) -> list[dict[str, Any]]:
    """Kernel candidates of a conv2d: every (NCHW{ic}c, NCHW{oc}c) pair with dividing blocks, once per
    loop order in ``orders`` (see :data:`CONV2D_SCHEDULE_KNOBS`; the default order has no ``"order"``
    key and comes first), and NCHW.

    Grouped convolutions only get the plain NCHW kernel, and depthwise ones NCHW plus equal in/out blocks.

    Example::

        conv2d_candidates(wl, blocks=[8, 16])
        # [{'in': 'NCHW8c', 'out': 'NCHW8c'}, {'in': 'NCHW8c', 'out': 'NCHW16c'}, ...,
        #  {'in': 'NCHW', 'out': 'NCHW'}]
        conv2d_candidates(wl, blocks=[8, 16], orders=["oc", "rows"])
        # [{'in': 'NCHW8c', 'out': 'NCHW8c'}, {'in': 'NCHW8c', 'out': 'NCHW8c', 'order': 'rows'}, ...]
    """
    orders = list(orders)
    unknown = sorted(set(orders) - set(CONV2D_ORDERS))
    if unknown or not orders:
        raise ProblemError(f"conv2d loop orders {unknown or orders} are not in {CONV2D_ORDERS}")
    workload = validate_workload(workload)
    blocks = list(blocks)
    channels, out_channels = workload["data"][1], workload["kernel"][0]
    groups = workload["groups"]
    found: list[dict[str, Any]] = []
    if groups == 1:
        for ic, oc in itertools.product(
            channel_blocks(channels, blocks), channel_blocks(out_channels, blocks)
        ):
            for order in orders:
                knobs = {} if order == CONV2D_ORDERS[0] else {"order": order}
                found.append({"in": f"NCHW{ic}c", "out": f"NCHW{oc}c", **knobs})
    elif _is_depthwise(workload):
        for block in channel_blocks(channels, blocks):
            found.append({"in": f"NCHW{block}c", "out": f"NCHW{block}c"})
    if include_nchw or not found:
        found.append({"in": "NCHW", "out": "NCHW"})
    return found


def dense_candidates(
    workload: dict[str, Any], blocks: Iterable[int] = DEFAULT_DENSE_BLOCKS
) -> list[dict[str, Any]]:
    """Weight-layout candidates of a dense layer: plain ``NK`` and packed ``NK{b}n`` for dividing blocks.

    Example::

        dense_candidates({"op": "dense", "data": [1, 2048], "weight": [1000, 2048], "dtype": "float32"})
        # [{'in': 'NC', 'out': 'NC', 'weight': 'NK'}, {'in': 'NC', 'out': 'NC', 'weight': 'NK8n'}]
    """
    workload = validate_workload(workload)
    features = workload["weight"][0]
    found = [{"in": "NC", "out": "NC", "weight": "NK"}]
    found += [
        {"in": "NC", "out": "NC", "weight": f"NK{b}n"} for b in sorted(set(blocks)) if features % b == 0
    ]
    return found


def candidates(workload: dict[str, Any], **options: Any) -> list[dict[str, Any]]:
    """Candidates of any workload kind (layout transforms have the single candidate ``{}``)."""
    op = validate_workload(workload)["op"]
    if op == "conv2d":
        return conv2d_candidates(workload, **options)
    if op == "dense":
        return dense_candidates(workload, **options)
    return [{}]


def _is_depthwise(workload: dict[str, Any]) -> bool:
    return workload["groups"] == workload["data"][1] == workload["kernel"][0]


def validate_candidate(workload: dict[str, Any], candidate: dict[str, Any]) -> None:
    """Raise ProblemError unless ``candidate`` is valid for the (validated) ``workload``."""
    what = f"{workload['op']} candidate {candidate!r}"
    if workload["op"] == "conv2d":
        if not isinstance(candidate, dict) or "in" not in candidate or "out" not in candidate:
            raise ProblemError(f"{what} needs 'in' and 'out' layouts")
        in_block, out_block = layout_block(candidate["in"]), layout_block(candidate["out"])
        _check_divides(in_block, workload["data"][1], f"{what} input")
        _check_divides(out_block, workload["kernel"][0], f"{what} output")
        if (in_block is None) != (out_block is None):
            raise ProblemError(f"{what}: in and out must both be blocked or both be NCHW")
        if (
            workload["groups"] > 1
            and in_block is not None
            and not (_is_depthwise(workload) and in_block == out_block)
        ):
            raise ProblemError(
                f"{what}: grouped convolutions have NCHW kernels only (depthwise: equal blocks)"
            )
        reg_n = candidate.get("reg_n", 1)
        if int(reg_n) != reg_n or reg_n < 1:
            raise ProblemError(f"{what}: reg_n must be a positive integer")
        order = candidate.get("order", CONV2D_ORDERS[0])
        if order not in CONV2D_ORDERS:
            raise ProblemError(f"{what}: order must be one of {CONV2D_ORDERS}")
        if order != CONV2D_ORDERS[0] and (in_block is None or workload["groups"] > 1):
            raise ProblemError(f"{what}: only a blocked conv2d with groups=1 has a loop order to choose")
    elif workload["op"] == "layout_transform":
        if candidate:
            raise ProblemError(f"{what}: layout transforms take no candidate options (use {{}})")
    elif workload["op"] == "dense":
        match = _DENSE_WEIGHT.match(str(candidate.get("weight", "NK")))
        if match is None:
            raise ProblemError(f"{what}: weight layout must be 'NK' or 'NK<b>n'")
        if match.group(1) and workload["weight"][0] % int(match.group(1)):
            raise ProblemError(
                f"{what}: block {match.group(1)} does not divide {workload['weight'][0]} features"
            )


# --------------------------------------------------------------------------------------------------
# numpy packing and references
# --------------------------------------------------------------------------------------------------


def pack_data(array: np.ndarray, layout: str) -> np.ndarray:
    """Re-lay a logical NCHW array out as ``layout`` (``NCHW`` or ``NCHW{b}c``).

    Example::

        pack_data(np.zeros((1, 32, 7, 7)), "NCHW16c").shape    # (1, 2, 7, 7, 16)
    """
    block = layout_block(layout)
    if block is None:
        return np.ascontiguousarray(array)
    n, c, h, w = array.shape
    _check_divides(block, c, f"pack_data to {layout}")
    return np.ascontiguousarray(array.reshape(n, c // block, block, h, w).transpose(0, 1, 3, 4, 2))


def unpack_data(array: np.ndarray, layout: str) -> np.ndarray:
    """Inverse of :func:`pack_data`: a logical NCHW array."""
    if layout_block(layout) is None:
        return array
    n, outer, h, w, block = array.shape
    return np.ascontiguousarray(array.transpose(0, 1, 4, 2, 3).reshape(n, outer * block, h, w))


def pack_conv2d_kernel(kernel: np.ndarray, in_block: int, out_block: int) -> np.ndarray:
    """OIHW weights -> ``OIHW{in_block}i{out_block}o`` (shape O/ob, I/ib, KH, KW, ib, ob) for conv2d_NCHWc."""
    o, i, kh, kw = kernel.shape
    packed = kernel.reshape(o // out_block, out_block, i // in_block, in_block, kh, kw)
    return np.ascontiguousarray(packed.transpose(0, 2, 4, 5, 3, 1))


def _pack_depthwise_kernel(kernel: np.ndarray, block: int) -> np.ndarray:
    # OIHW with I == 1 -> (O/b, 1, KH, KW, 1, b), the layout topi.nn.depthwise_conv2d_NCHWc reads
    o, _, kh, kw = kernel.shape
    return np.ascontiguousarray(
        kernel.reshape(o // block, block, 1, kh, kw).transpose(0, 2, 3, 4, 1)[..., None, :]
    )


def _pack_dense_weight(weight: np.ndarray, block: int) -> np.ndarray:
    n, k = weight.shape
    return np.ascontiguousarray(weight.reshape(n // block, block, k).transpose(0, 2, 1))


def reference_output(workload: dict[str, Any], inputs: Sequence[np.ndarray]) -> np.ndarray:
    """The logical (NCHW / NC) output of ``workload`` computed with numpy from logical inputs."""
    op = workload["op"]
    if op == "layout_transform":
        return inputs[0]
    if op == "dense":
        data, weight = inputs
        return data @ weight.T
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
    operands = iter(extra)
    for step in workload.get("epilogue", []):
        out = np.maximum(out, 0.0) if step == "relu" else out + next(operands)  # bias broadcasts
    return out


def _epilogue_shapes(steps: Sequence[str], out: Sequence[int]) -> list[list[int]]:
    """Logical shapes of an epilogue's operands, in order, for a conv of logical output shape ``out``:
    (1, O, 1, 1) per bias, the output per add (relu takes none)."""
    shapes = {"bias": [1, out[1], 1, 1], "add": list(out)}
    return [shapes[step] for step in steps if step in shapes]


def _workload_epilogue_shapes(workload: dict[str, Any]) -> list[list[int]]:
    return _epilogue_shapes(workload.get("epilogue", []), conv2d_output_shape(workload))


# --------------------------------------------------------------------------------------------------
# kernels: compute + schedule
# --------------------------------------------------------------------------------------------------


@dataclass
class Kernel:
    """A scheduled single-kernel module plus what is needed to feed and check it.

    ``module`` holds one PrimFunc named ``name``; ``arg_shapes`` lists its buffers (inputs, then the
    output); ``pack_inputs`` turns logical numpy inputs into the kernel's layouts and ``unpack_output``
    maps its output back to the logical layout.
    """

    workload: dict[str, Any]
    candidate: dict[str, Any]
    module: Any
    name: str
    arg_shapes: list[tuple[int, ...]]
    dtype: str

    def logical_inputs(self, seed: int = 0) -> list[np.ndarray]:
        """Random logical inputs (NCHW data, OIHW / NK weights) of the right shapes."""
        rng = np.random.default_rng(seed)
        wl = self.workload
        if wl["op"] == "conv2d":
            shapes = [wl["data"], wl["kernel"], *_workload_epilogue_shapes(wl)]
        elif wl["op"] == "dense":
            shapes = [wl["data"], wl["weight"]]
        else:
            shapes = [wl["shape"]]
        return [rng.uniform(-1, 1, size=s).astype(self.dtype) for s in shapes]

    def pack_inputs(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Logical inputs -> the arrays the kernel takes (without the output buffer)."""
        wl, cand = self.workload, self.candidate
        if wl["op"] == "layout_transform":
            return [pack_data(inputs[0], wl["src"])]
        if wl["op"] == "dense":
            block = _dense_block(cand)
            return [inputs[0], inputs[1] if block is None else _pack_dense_weight(inputs[1], block)]
        data, kernel, *extra = inputs
        in_block, out_block = layout_block(cand["in"]), layout_block(cand["out"])
        if in_block is None:
            packed = [data, kernel]
        elif wl["groups"] > 1:
            packed = [pack_data(data, cand["in"]), _pack_depthwise_kernel(kernel, out_block)]
        else:
            packed = [pack_data(data, cand["in"]), pack_conv2d_kernel(kernel, in_block, out_block)]
        # epilogue operands: the bias as a (1, C, 1, 1) tensor, the residual as the output, both in
        # the output's layout
        return packed + [pack_data(x, cand["out"]) for x in extra]

    def device_args(self, inputs: Sequence[np.ndarray], device: Any) -> list[Any]:
        """The kernel's arguments on ``device``: the packed ``inputs``, then a zeroed output buffer."""
        tvm = import_tvm()
        args = [tvm.runtime.tensor(a, device) for a in self.pack_inputs(inputs)]
        args.append(tvm.runtime.tensor(np.zeros(self.arg_shapes[-1], dtype=self.dtype), device))
        return args

    def unpack_output(self, output: np.ndarray) -> np.ndarray:
        """The kernel's output buffer -> the logical NCHW / NC array."""
        wl = self.workload
        if wl["op"] == "layout_transform":
            return unpack_data(output, wl["dst"])
        if wl["op"] == "dense":
            return output
        return unpack_data(output, self.candidate["out"])


def _dense_block(candidate: dict[str, Any]) -> int | None:
    match = _DENSE_WEIGHT.match(str(candidate.get("weight", "NK")))
    return int(match.group(1)) if match and match.group(1) else None


def build_kernel(workload: dict[str, Any], candidate: dict[str, Any], target: Any = None) -> Kernel:
    """Create the TE compute of (workload, candidate) and apply its CPU schedule (not compiled yet).

    Compile with ``tvm.compile(kernel.module, target)``; raises ProblemError for bad workloads/candidates.

    Example::

        kernel = build_kernel(wl, {"in": "NCHW16c", "out": "NCHW16c"})
        executable = tvm.compile(kernel.module, target=resolve_target("llvm"))
    """
    tvm = import_tvm()
    workload = validate_workload(workload)
    candidate = dict(candidate or {})
    validate_candidate(workload, candidate)
    target = resolve_target(target)
    if workload.get("epilogue"):
        return _build_fused_conv2d(tvm, workload, candidate, target)
    te = tvm.te
    dtype = workload["dtype"]
    op = workload["op"]
    with target:
        if op == "layout_transform":
            shape = workload["shape"]
            src = te.placeholder(_layout_shape(shape, workload["src"]), dtype=dtype, name="src")
            out = tvm.topi.layout_transform(src, workload["src"], workload["dst"])
            tensors, scheduler = [src, out], _schedule_injective
        elif op == "dense":
            tensors, scheduler = _dense_compute(tvm, workload, candidate)
        else:
            tensors, scheduler = _conv2d_compute(tvm, workload, candidate)
        name = "kernel"
        func = te.create_prim_func(tensors).with_attr("global_symbol", name)
        sch = tvm.s_tir.Schedule(func)
        try:
            scheduler(sch, candidate)
        except tvm.s_tir.ScheduleError as exc:
            raise ProblemError(f"cannot schedule {op} {workload} with {candidate}: {exc}") from None
        module = tvm.IRModule(
            {name: sch.mod["main"].with_attr("global_symbol", name).with_attr(_SCHEDULED, True)}
        )
    shapes = [tuple(int(d) for d in t.shape) for t in tensors]
    return Kernel(workload, candidate, module, name, shapes, dtype)


def _build_fused_conv2d(tvm, workload: dict[str, Any], candidate: dict[str, Any], target) -> Kernel:
    """A conv2d with its elementwise epilogue in one function, scheduled by the very code that
    schedules the fused functions of a build (:func:`_schedule_primfunc`), so its time is the
    time of the kernel the build runs."""
    te, topi = tvm.te, tvm.topi
    dtype = workload["dtype"]
    with target:
        tensors, _ = _conv2d_compute(tvm, workload, candidate)
        out = tensors[-1]
        inputs = tensors[:-1]
        operands = [
            te.placeholder(_layout_shape(shape, candidate["out"]), dtype=dtype, name=f"epilogue_in{i}")
            for i, shape in enumerate(_workload_epilogue_shapes(workload))
        ]
        inputs += operands
        operands = iter(operands)
        for step in workload["epilogue"]:
            out = topi.nn.relu(out) if step == "relu" else topi.add(out, next(operands))
        func = te.create_prim_func([*inputs, out])
        scheduled = _schedule_primfunc(func, target, _schedule_knobs(candidate))
        if scheduled is None:
            raise ProblemError(f"cannot schedule conv2d {workload} with {candidate} and its epilogue")
        name = "kernel"
        module = tvm.IRModule({name: scheduled.with_attr("global_symbol", name)})
    shapes = [tuple(int(d) for d in t.shape) for t in [*inputs, out]]
    return Kernel(workload, candidate, module, name, shapes, dtype)


def _conv2d_compute(tvm, workload, candidate):
    te, topi = tvm.te, tvm.topi
    dtype = workload["dtype"]
    data_shape, kernel_shape = workload["data"], workload["kernel"]
    strides, padding, dilation = workload["strides"], workload["padding"], workload["dilation"]
    in_block, out_block = layout_block(candidate["in"]), layout_block(candidate["out"])
    out_width = conv2d_output_shape(workload)[3]
    reg_n = int(candidate.get("reg_n") or register_tile(out_width, out_block))
    if in_block is None:
        data = te.placeholder(data_shape, dtype=dtype, name="data")
        kernel = te.placeholder(kernel_shape, dtype=dtype, name="kernel")
        if workload["groups"] == 1:
            out = topi.nn.conv2d_nchw(data, kernel, strides, padding, dilation, out_dtype=dtype)
        elif _is_depthwise(workload):
            out = topi.nn.depthwise_conv2d_nchw(data, kernel, strides, padding, dilation, out_dtype=dtype)
        else:
            out = topi.nn.group_conv2d_nchw(
                data, kernel, strides, padding, dilation, workload["groups"], dtype
            )
        return [data, kernel, out], lambda sch, _c: _schedule_conv2d_nchw(sch, out_width)
    o, i, kh, kw = kernel_shape
    data = te.placeholder(_layout_shape(data_shape, candidate["in"]), dtype=dtype, name="data")
    if workload["groups"] > 1:  # depthwise, in_block == out_block
        kernel = te.placeholder((o // out_block, 1, kh, kw, 1, out_block), dtype=dtype, name="kernel")
        out = _depthwise_nchwc(tvm, data, kernel, strides, padding, dilation)
        return [data, kernel, out], lambda sch, _c: _schedule_depthwise_nchwc(sch, reg_n)
    kernel = te.placeholder(
        (o // out_block, i // in_block, kh, kw, in_block, out_block), dtype=dtype, name="kernel"
    )
    out = topi.nn.conv2d_NCHWc(
        data, kernel, strides, padding, dilation, candidate["in"], candidate["out"], dtype
    )
    rows_outer = candidate.get("order") == "rows"
    return [data, kernel, out], lambda sch, _c: _schedule_conv2d_nchwc(sch, in_block, reg_n,
                                                                       rows_outer=rows_outer)


def _depthwise_nchwc(tvm, data, kernel, strides, padding, dilation):
    # topi.nn.depthwise_conv2d_NCHWc is an unregistered generic function in 0.27: write the compute
    te = tvm.te
    _, _, height, width, _ = (int(d) for d in data.shape)
    _, _, kernel_h, kernel_w, _, _ = (int(d) for d in kernel.shape)
    (sh, sw), (dh, dw) = strides, dilation
    top, left, bottom, right = padding
    out_h = (height + top + bottom - dh * (kernel_h - 1) - 1) // sh + 1
    out_w = (width + left + right - dw * (kernel_w - 1) - 1) // sw + 1
    padded = data
    if any(padding):
        padded = tvm.topi.nn.pad(data, [0, 0, top, left, 0], [0, 0, bottom, right, 0], name="data_pad")
    ry = te.reduce_axis((0, kernel_h), name="ry")
    rx = te.reduce_axis((0, kernel_w), name="rx")
    shape = (int(data.shape[0]), int(data.shape[1]), out_h, out_w, int(data.shape[4]))
    return te.compute(
        shape,
        lambda n, c, y, x, b: te.sum(
            padded[n, c, y * sh + ry * dh, x * sw + rx * dw, b] * kernel[c, 0, ry, rx, 0, b], axis=[ry, rx]
        ),
        name="DepthwiseConv2d",
    )


def _dense_compute(tvm, workload, candidate):
    te, topi = tvm.te, tvm.topi
    dtype = workload["dtype"]
    data = te.placeholder(workload["data"], dtype=dtype, name="data")
    block = _dense_block(candidate)
    n, k = workload["weight"]
    if block is None:
        weight = te.placeholder((n, k), dtype=dtype, name="weight")
        out = topi.nn.dense(data, weight, out_dtype=dtype)
        return [data, weight, out], lambda sch, _c: _schedule_dense(sch, None)
    weight = te.placeholder((n // block, k, block), dtype=dtype, name="weight")
    # topi.nn.dense_pack is broken in 0.27 (NameError inside); the compute is three lines
    reduce_k = te.reduce_axis((0, k), name="k")
    out = te.compute(
        (workload["data"][0], n),
        lambda i, j: te.sum(data[i, reduce_k] * weight[j // block, reduce_k, j % block], axis=reduce_k),
        name="T_dense_pack",
    )
    return [data, weight, out], lambda sch, _c: _schedule_dense(sch, block)


def _vector_registers(target: Any = None) -> tuple[int, int]:
    """``(float32 lanes per vector register, vector registers)`` of the CPU target."""
    tvm = import_tvm()
    target = resolve_target(target) if target is not None else tvm.target.Target.current(allow_none=True)
    if target is None:
        return 8, 16
    has = tvm.target.codegen.target_has_features  # (llvm_get_vector_width reads the host, not the target)
    try:
        if has("avx512f", target):
            return 16, 32  # 32 zmm
        return (8, 16) if has("avx", target) else (4, 16)  # ymm / xmm (and NEON-sized) registers
    except Exception:  # not an x86 target
        return 4, 16


def register_tile(out_width: int, out_block: int | None, target: Any = None) -> int:
    """Output columns per register tile (``reg_n``) of a blocked conv2d, so that its accumulators fit.

    A tile holds ``reg_n x out_block`` floats, ``reg_n * ceil(out_block / lanes)`` vector
    registers. At most 3/4 of the register file goes to accumulators (the rest holds the weight
    vectors and the broadcast input), else LLVM spills inside the reduction loop - the 64-wide
    blocks with AutoTVM's ``reg_n = 8`` did, fused or not; but when that leaves under a quarter of
    the registers accumulating (too few independent FMAs), a wider tile that still fits beside one
    weight row is taken. ``reg_n`` divides the output width (at most 8), except for a prime width
    above 8 (Inception's 17, 71, 73): a one-column tile ran 3-4x slower there than a 6-column tile
    with a partial last tile (1x1 768->192 conv at 17x17, 16c: 1.44 vs 0.38 ms), so the widest tile
    that fits and wastes the fewest padded columns is taken. The measured kernel and the built
    program both use it, so they run the same tile.

    Example::

        register_tile(56, 16, "llvm -mcpu=znver4"), register_tile(56, 64, "llvm -mcpu=znver4")   # (8, 4)
    """
    lanes, registers = _vector_registers(target)
    per_column = -(-(out_block or lanes) // lanes)
    divisors = [d for d in range(1, 9) if out_width % d == 0]
    reg_n = max(d for d in divisors if d * per_column <= max(per_column, registers * 3 // 4))
    if reg_n * per_column < registers // 4:
        wider = [d for d in divisors if d * per_column <= registers - per_column]
        reg_n = max([reg_n, *wider])
    if reg_n == 1 and out_width > 8:
        fitting = [d for d in range(4, 9) if d * per_column <= max(per_column, registers * 3 // 4)]
        if fitting:
            reg_n = min(fitting, key=lambda d: (-(-out_width // d) * d, -d))
    return reg_n


def _block_names(sch) -> list[str]:
    return [sch.get(b).name_hint for b in sch.get_child_blocks(sch.get_sblock("root"))]


#: the widest innermost loop vectorised whole. LLVM splits a wide vector into register-sized pieces,
#: fine for the rows of NCHW tensors (up to 518 here); but a flattened tensor (SSD's heads: 12 reshapes
#: to (1, N) fused into one concat, N = 331776) made one giant vector, and LLVM aborted the process
#: ("Cannot implicitly convert a scalable size to a fixed-width size"). Longer loops are split.
MAX_VECTOR_LOOP = 1024


def _parallel_vectorize(sch, block, max_parallel_loops: int = 3) -> None:
    """Parallelise the outer spatial loops of an injective block and vectorise its innermost loop
    (split first, if longer than :data:`MAX_VECTOR_LOOP`, into a parallel outer part and 64 lanes or
    fewer: the largest divisor, so that no tail is left)."""
    loops = sch.get_loops(block)
    extent = sch.get(loops[-1]).extent if loops else None
    if isinstance(extent, import_tvm().tirx.IntImm) and extent.value > MAX_VECTOR_LOOP:
        lanes = max(d for d in range(1, 65) if extent.value % d == 0)
        loops = [*loops[:-1], *sch.split(loops[-1], [None, lanes])]
    if len(loops) > 1:
        outer = loops[: min(max_parallel_loops, len(loops) - 1)]
        sch.parallel(sch.fuse(*outer) if len(outer) > 1 else outer[0])
    if loops:
        sch.vectorize(loops[-1])


def _schedule_injective(sch, _candidate=None) -> None:
    for name in _block_names(sch):
        _parallel_vectorize(sch, sch.get_sblock(name))


def _schedule_conv2d_nchwc(sch, in_block: int, reg_n: int, block_name: str = "conv2d_NCHWc",
                           fuse_epilogue: bool = True, rows_outer: bool = False) -> None:
    # AutoTVM's schedule_conv_NCHWc_cpu_common: a [reg_n x oc_block] register tile accumulated over
    # (ic outer, kh, kw, ic inner), parallel over (n, oc outer, oh), oc block vectorised; rows_outer:
    # parallel over (n, oh, oc outer) instead (the "order" knob, see CONV2D_SCHEDULE_KNOBS).
    names = _block_names(sch)
    conv = sch.get_sblock(block_name)
    if "data_pad" in names:
        _parallel_vectorize(sch, sch.get_sblock("data_pad"))
    n, occ, oh, ow, ocb, ic, kh, kw = sch.get_loops(conv)
    owo, owi = sch.split(ow, [None, reg_n])
    ico, ici = sch.split(ic, [None, in_block])
    outer = (n, oh, occ) if rows_outer else (n, occ, oh)
    sch.reorder(*outer, owo, ico, kh, kw, ici, owi, ocb)
    epilogue = [name for name in names if name not in (block_name, "data_pad")]
    if fuse_epilogue and epilogue and all(_is_elementwise_after(sch, name, conv) for name in epilogue):
        # a fused epilogue (bias, relu, residual add...) is finished per register tile, right after the
        # tile's accumulation: the conv's own output never leaves the tile, and the output tensor is
        # written once instead of being re-read by every elementwise op
        for name in epilogue[:-1]:
            sch.compute_inline(sch.get_sblock(name))
        tile = sch.get_sblock(epilogue[-1])
        sch.set_scope(conv, 0, "local")
        epilogue = []
    else:
        tile = sch.cache_write(conv, 0, "global")
    _finish_register_tile(sch, tile, owo, outer, ocb, owi)
    _schedule_epilogue(sch, epilogue, set())
    # must come last: before parallel/vectorize it breaks the "compact dataflow" check
    sch.decompose_reduction(conv, ico)


def _finish_register_tile(sch, tile, owo, outer: tuple, ocb, owi) -> None:
    """The blocked convolutions' common tail: the output tile (``[reg_n, oc_bn]``) is written per
    ``owo`` step, the outer loops run in parallel, the channel block is vectorised and the row
    of ``reg_n`` columns unrolled."""
    sch.reverse_compute_at(tile, owo)
    sch.parallel(sch.fuse(*outer))
    sch.vectorize(sch.get_loops(tile)[-1])
    sch.vectorize(ocb)
    sch.unroll(owi)


def _schedule_depthwise_nchwc(sch, reg_n: int, block_name: str = "DepthwiseConv2d") -> None:
    names = _block_names(sch)
    conv = sch.get_sblock(block_name)
    if "data_pad" in names:
        _parallel_vectorize(sch, sch.get_sblock("data_pad"))
    n, occ, oh, ow, ocb, kh, kw = sch.get_loops(conv)
    owo, owi = sch.split(ow, [None, reg_n])
    sch.reorder(n, occ, oh, owo, kh, kw, owi, ocb)
    tile = sch.cache_write(conv, 0, "global")
    _finish_register_tile(sch, tile, owo, (n, occ, oh), ocb, owi)
    _schedule_epilogue(sch, names, {block_name, "data_pad"})
    sch.decompose_reduction(conv, kh)


def _schedule_conv2d_nchw(sch, out_width: int, block_name: str | None = None) -> None:
    # Plain NCHW: vectorise along output columns (contiguous input rows for stride 1) and keep a
    # [filters x columns] register tile, parallel over (n, filter outer, output row).
    names = _block_names(sch)
    block_name = block_name or next(
        n for n in names if n in ("conv2d_nchw", "group_conv2d_nchw", "DepthwiseConv2d")
    )
    conv = sch.get_sblock(block_name)
    for pad in ("pad_temp", "PaddedInput", "data_pad"):
        if pad in names:
            _parallel_vectorize(sch, sch.get_sblock(pad))
    loops = sch.get_loops(conv)
    n, f, y, x, *reduction = loops
    columns = max(d for d in range(1, 17) if out_width % d == 0)
    filters_extent = int(sch.get(f).extent)
    filters = max(d for d in (1, 2, 4, 8) if filters_extent % d == 0)
    fo, fi = sch.split(f, [None, filters])
    xo, xi = sch.split(x, [None, columns])
    sch.reorder(n, fo, y, xo, *reduction, fi, xi)
    tile = sch.cache_write(conv, 0, "global")
    sch.reverse_compute_at(tile, xo)
    sch.parallel(sch.fuse(n, fo, y))
    sch.vectorize(sch.get_loops(tile)[-1])
    sch.vectorize(xi)
    sch.unroll(fi)
    _schedule_epilogue(sch, names, {block_name, "pad_temp", "PaddedInput", "data_pad"})
    sch.decompose_reduction(conv, reduction[0])


def _schedule_dense(sch, block: int | None) -> None:
    names = _block_names(sch)
    name = next(n for n in names if n in ("T_matmul_NT", "T_dense_pack", "matmul"))
    dense = sch.get_sblock(name)
    loops = sch.get_loops(dense)
    if block is None:
        # weight rows are contiguous along K: parallel over outputs, reduce with a vectorisable rfactor
        i, j, k = loops
        sch.parallel(sch.fuse(i, j))
        _, ki = sch.split(k, [None, 16]) if int(sch.get(k).extent) % 16 == 0 else (k, None)
        if ki is not None:
            factor = sch.rfactor(ki, 0)
            sch.vectorize(sch.get_loops(factor)[-1])
    else:
        # packed (N/b, K, b): the b output features of one K step are contiguous -> vectorise over them
        i, j, k = loops
        jo, ji = sch.split(j, [None, block])
        sch.reorder(i, jo, k, ji)
        tile = sch.cache_write(dense, 0, "global")
        sch.reverse_compute_at(tile, jo)
        sch.parallel(sch.fuse(i, jo))
        sch.vectorize(ji)
        sch.vectorize(sch.get_loops(tile)[-1])
        sch.decompose_reduction(dense, k)
    _schedule_epilogue(sch, names, {name})


def _schedule_epilogue(sch, names: Sequence[str], done: set[str]) -> None:
    # blocks fused after the main kernel (bias, relu, add...) or a separate unpack step
    for name in names:
        if name not in done:
            block = sch.get_sblock(name)
            if _is_spatial(sch, block):
                _parallel_vectorize(sch, block)


def _is_elementwise_after(sch, name: str, producer) -> bool:
    """Does block ``name`` write a tensor of the producer's shape (bias, relu, add: not a layout
    transform, which FuseOps also fuses and which a register tile of the producer cannot finish)?"""
    block = sch.get_sblock(name)
    shape = [int(d) for d in sch.get(block).writes[0].source.shape]
    return _is_spatial(sch, block) and shape == [int(d) for d in sch.get(producer).writes[0].source.shape]


def _is_spatial(sch, block) -> bool:
    return all(int(v.iter_type) == 0 for v in sch.get(block).iter_vars)


# --------------------------------------------------------------------------------------------------
# checking
# --------------------------------------------------------------------------------------------------


def check_kernel(
    kernel: Kernel,
    executable: Any = None,
    target: Any = None,
    device: Any = None,
    reference: tuple[list[np.ndarray], np.ndarray] | None = None,
    args: Sequence[Any] | None = None,
) -> float:
    """Run ``kernel`` once and return its max error relative to the numpy reference (ProblemError if too big).

    ``executable`` is the compiled ``kernel.module`` or its runtime module, possibly remote (compiled here
    if omitted); ``reference`` is ``(logical_inputs, expected_output)`` to reuse one numpy reference
    across the candidates of a workload; ``args`` the device arrays already holding the packed inputs
    (the last one receives the output).

    Example::

        check_kernel(build_kernel(wl, {"in": "NCHW8c", "out": "NCHW8c"}))   # 2.4e-07
    """
    tvm = import_tvm()
    if executable is None:
        executable = tvm.compile(kernel.module, target=resolve_target(target))
    module = executable.mod if isinstance(executable, tvm.runtime.Executable) else executable
    device = device or tvm.cpu()
    if reference is None:
        inputs = kernel.logical_inputs()
        reference = (inputs, reference_output(kernel.workload, inputs))
    inputs, expected = reference
    if args is None:
        args = kernel.device_args(inputs, device)
    module[kernel.name](*args)
    actual = kernel.unpack_output(args[-1].numpy())
    scale = max(1.0, float(np.max(np.abs(expected))))
    error = float(np.max(np.abs(actual - expected))) / scale if actual.shape == expected.shape else math.inf
    if not error <= RELATIVE_TOLERANCE:
        raise ProblemError(
            f"{kernel.workload['op']} {kernel.workload} with {kernel.candidate}: wrong result, "
            f"max relative error {error:.3g} > {RELATIVE_TOLERANCE}"
        )
    return error


# --------------------------------------------------------------------------------------------------
# scheduling a whole legalized Relax module
# --------------------------------------------------------------------------------------------------


def _schedule_knobs(candidate: dict[str, Any]) -> dict[str, Any]:
    return {k: candidate[k] for k in CONV2D_SCHEDULE_KNOBS if k in candidate}


def conv2d_schedule_key(shapes: Iterable[Sequence[int]]) -> str:
    """How :func:`schedule_module` recognises a blocked conv2d: the shapes of its PrimFunc's
    parameters, in any order. With the conv's data, packed kernel and output only (the *core* key),
    it names every conv of those shapes; adding its fused epilogue's operands (bias, residual) tells
    apart convs of equal shapes that fuse different epilogues (they are different PrimFuncs).

    Example:
        >>> conv2d_schedule_key([[1, 4, 56, 56, 16], [4, 4, 3, 3, 16, 16], [1, 4, 56, 56, 16]])
        '1x4x56x56x16|1x4x56x56x16|4x4x3x3x16x16'
    """
    return "|".join(sorted("x".join(str(int(d)) for d in shape) for shape in shapes))


def _primfunc_schedule_keys(func) -> tuple[str, str] | None:
    """``(full key, core key)`` (:func:`conv2d_schedule_key`) of a blocked conv2d PrimFunc, fused or
    not, None for other functions: the data is its first 5-D parameter, the kernel its 6-D one, the
    output its last."""
    shapes = [_param_shape(func, i) for i in range(len(func.params))]
    data = next((shape for shape in shapes if len(shape) == 5), None)
    kernel = next((shape for shape in shapes if len(shape) == 6), None)
    if data is None or kernel is None or len(shapes[-1]) != 5:
        return None
    return conv2d_schedule_key(shapes), conv2d_schedule_key([data, kernel, shapes[-1]])


def _schedule_primfunc(func, target, knobs: dict[str, Any] | None = None):
    """Return ``func`` scheduled (and marked ``tirx.is_scheduled``), or ``None`` if not recognised.

    ``knobs``: a blocked conv2d's schedule knobs (:data:`CONV2D_SCHEDULE_KNOBS`), if not the defaults.
    """
    tvm = import_tvm()
    sch = tvm.s_tir.Schedule(func)
    names = _block_names(sch)
    knobs = knobs or {}
    try:
        if "conv2d_NCHWc" in names:
            # the packed kernel (O/ob, I/ib, KH, KW, ib, ob) gives the blocks, also in a fused function
            kernel = next(shape for shape in map(lambda i: _param_shape(func, i), range(len(func.params)))
                          if len(shape) == 6)
            out_width = int(_param_shape(func, len(func.params) - 1)[3])
            reg_n = int(knobs.get("reg_n") or register_tile(out_width, kernel[5], target))
            rows_outer = knobs.get("order") == "rows"
            # the epilogue goes in the register tile only when the tile holds one vector per column:
            # with wider output blocks (4 zmm per column at 64c) the epilogue's operands (residual,
            # bias) spill the accumulators, and a fused 64c residual block measured 8-25 % slower
            # than the same conv with its epilogue run after it
            in_tile = kernel[5] <= _vector_registers(target)[0]
            try:
                _schedule_conv2d_nchwc(sch, kernel[4], reg_n, fuse_epilogue=in_tile, rows_outer=rows_outer)
            except tvm.s_tir.ScheduleError:  # the epilogue does not fit in the tile: after the conv
                sch = tvm.s_tir.Schedule(func)
                _schedule_conv2d_nchwc(sch, kernel[4], reg_n, fuse_epilogue=False, rows_outer=rows_outer)
        elif "DepthwiseConv2d" in names and len(_param_shape(func, 0)) == 5:
            out = _param_shape(func, len(func.params) - 1)
            _schedule_depthwise_nchwc(sch, register_tile(int(out[3]), int(out[4]), target))
        elif any(n in names for n in ("conv2d_nchw", "group_conv2d_nchw", "DepthwiseConv2d")):
            out_width = int(_param_shape(func, len(func.params) - 1)[3])
            _schedule_conv2d_nchw(sch, out_width)
        elif "T_matmul_NT" in names and _is_plain_dense(sch):
            _schedule_dense(sch, None)
        elif "T_dense_pack" in names:  # the packed-weight dense of dense candidates "NK{b}n"
            weight = next(
                shape
                for shape in map(lambda i: _param_shape(func, i), range(len(func.params)))
                if len(shape) == 3
            )
            _schedule_dense(sch, weight[2])
        else:
            _schedule_generic(sch, names)
    except (tvm.s_tir.ScheduleError, ValueError, StopIteration) as exc:
        logger.warning("layoutopt: left %s unscheduled: %s", func.attrs.get("global_symbol", "?"), exc)
        return None
    return sch.mod["main"].with_attr(_SCHEDULED, True)


def _param_shape(func, index: int) -> list[int]:
    param = func.params[index]
    buffer = func.buffer_map[param] if hasattr(func, "buffer_map") else param
    return [int(s) for s in buffer.shape]


def _is_plain_dense(sch) -> bool:
    return len(sch.get_loops(sch.get_sblock("T_matmul_NT"))) == 3


def _schedule_generic(sch, names: Sequence[str]) -> None:
    """Injective blocks: parallel + vectorise; pads inlined; reductions (pooling, mean, matmul): parallel
    over their spatial loops, which is what matters on a 2-core CPU."""
    for name in names:
        block = sch.get_sblock(name)
        if "pad" in name and len(names) > 1:
            try:
                sch.compute_inline(block)
                continue
            except Exception:  # not inlinable (e.g. it is the output): schedule it like the rest
                pass
        if _is_spatial(sch, block):
            _parallel_vectorize(sch, block)
        else:
            iter_types = [int(v.iter_type) for v in sch.get(block).iter_vars]
            loops = sch.get_loops(block)
            spatial = [loop for loop, kind in zip(loops, iter_types, strict=False) if kind == 0]
            leading = []
            for loop in spatial[:3]:
                if loop != loops[len(leading)]:
                    break
                leading.append(loop)
            if leading:
                sch.parallel(sch.fuse(*leading) if len(leading) > 1 else leading[0])


def schedule_module(mod, target: Any = None):
    """Schedule every PrimFunc of a legalized module that is not yet marked ``tirx.is_scheduled``.

    Recognises conv2d_NCHWc, depthwise, plain NCHW conv2d and dense by block name, and gives every other
    function the generic CPU schedule (parallel outer loops, vectorised inner loop, pads inlined). A
    conv2d_NCHWc fused with its elementwise epilogue (``FuseOps``) gets the measured kernel's register
    tile (:func:`register_tile`), the epilogue finished per tile when the output block is one vector
    wide, after the conv otherwise. A blocked conv whose chosen candidate had schedule knobs (such as
    ``"order": "rows"``) gets them from the module attribute :data:`SCHEDULES_ATTR`, which
    :func:`~layoutopt.tvm.apply_layouts` writes. Call it after ``relax.transform.LegalizeOps`` and
    before the lowering passes.

    Example::

        with target:
            mod = relax.transform.LegalizeOps(customize_legalize_map=...)(mod)
        mod = schedule_module(mod, target)
        executable = tvm.compile(mod, target=target)
    """
    tvm = import_tvm()
    target = resolve_target(target)
    knob_table = dict(mod.attrs.get(SCHEDULES_ATTR, {})) if mod.attrs else {}
    updates = {}
    with target:
        for gvar, func in mod.functions_items():
            if not isinstance(func, tvm.tirx.PrimFunc) or int(
                func.attrs.get(_SCHEDULED, 0) if func.attrs else 0
            ):
                continue
            keys = _primfunc_schedule_keys(func) if knob_table else None
            found = next((knob_table[key] for key in keys or () if key in knob_table), None)
            knobs = None if found is None else {str(k): _plain_value(v) for k, v in found.items()}
            scheduled = _schedule_primfunc(func, target, knobs)
            if scheduled is not None:
                updates[gvar] = scheduled
    if not updates:
        return mod
    mod = mod.clone()  # never modify the caller's module in place
    for gvar, func in updates.items():
        mod[gvar] = func
    return mod


def _plain_value(value: Any) -> Any:
    """A knob read back from a module attribute (a TVM string or integer) as a Python value."""
    text = str(value)
    return int(text) if text.lstrip("-").isdigit() else text


def ScheduleModule(target: Any = None):
    """:func:`schedule_module` as a TVM module pass, to put in a ``tvm.transform.Sequential``.

    Example::

        seq = tvm.transform.Sequential([relax.transform.LegalizeOps(), ScheduleModule(target)])
    """
    tvm = import_tvm()
    return tvm.transform.module_pass(
        lambda mod, _ctx: schedule_module(mod, target), opt_level=0, name="layoutopt.ScheduleModule"
    )

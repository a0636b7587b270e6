"""ONNX ``Resize`` with ONNX's semantics, in plain or channel-blocked layouts: the ``onnx_resize`` family.

Why not ``relax.image.resize2d``: TVM's legalization (``topi.image.resize2d``) maps an output index to
a source position with ``in_size / out_size``, never with the ``scales`` an ONNX model gives; the two
differ whenever ``in_size * scale`` is not a whole number (a scale of 1.5, or 0.5 on an odd size), and
``align_corners`` onto an axis of size 1 divides by zero. It also lacks ``half_pixel_symmetric``, and
its cubic and crop-and-resize modes follow their own rules at the borders. An ONNX resize is therefore
computed from per-axis *tables* (:func:`resize_tables`): for every output row (column), the source
rows (columns) it reads and their weights, computed in float32 exactly as ONNX Runtime computes them
(``onnxruntime/core/providers/cpu/tensor/upsamplebase.h`` and ``upsample.cc``: the coordinate
transformation, the nearest rounding, the linear weights of the clamped position, Keys' cubic
coefficients renormalised with ``exclude_outside``, ``tf_crop_and_resize``'s extrapolation). The
kernel (:meth:`OnnxResize.compute`) gathers through the tables, ``taps x taps`` reads per output
element (1 nearest, 2 linear, 4 cubic), in ``NCHW`` or ``NCHW{b}c`` (a channel block per read: one
vector); :func:`resize_reference` is the same sum in float64.

In a Relax module an ONNX resize is an ``R.call_tir`` of the kernel's PrimFunc (:func:`emit`), whose
inputs are the data and the tables (constants), and whose ``layoutopt.onnx_resize`` attribute holds the
workload (:func:`workload_of`): the rewrite re-emits it in the blocked layout its input arrives in, the
float64 reference widens it, and TVM's default build computes it right as it is. It is marked
injective (``op_pattern``), as ``take`` is, so that ``FuseOps`` fuses it with its neighbours.

The workload (``{"op": "onnx_resize", ...}``, see :func:`~.workload.validate_workload`) is the node's
semantics, defaults filled in: ``data`` (NCHW), ``size`` (OH, OW), ``mode`` (``nearest``, ``linear``,
``cubic``), ``coordinate_transformation_mode``, ``nearest_mode`` (``""``: Resize-10's and Upsample's
rounding), ``scale`` (the scale of H and W the coordinates use: the model's, or output / input for
``sizes``), ``roi`` (H start, W start, H end, W end; ``tf_crop_and_resize``), ``cubic_coeff_a``,
``exclude_outside``, ``extrapolation_value``.

Example:
    A scale of 1.5 on 3 rows gives 4 rows (ONNX: floor(3 x 1.5)); ``half_pixel`` maps row 1 to
    (1 + 0.5) / 1.5 - 0.5 = 0.5, which ``round_prefer_floor`` sends to row 0 (TVM's in/out = 3/4 would
    give 0.625: row 1):

    >>> wl = {"op": "onnx_resize", "data": [1, 1, 3, 1], "size": [4, 1], "mode": "nearest",
    ...       "coordinate_transformation_mode": "half_pixel", "nearest_mode": "round_prefer_floor",
    ...       "scale": [1.5, 1.0]}
    >>> rows, _ = resize_tables(validate_workload(wl))
    >>> rows.index[:, 0].tolist()
    [0, 0, 1, 2]
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import ProblemError
from .._tvm import import_tvm
from .resize import Resize
from .workload import (
    NCHW,
    layout_block,
    layout_shape,
    validate_workload,
)

__all__ = ["FAMILY", "MAIN_BLOCKS", "WORKLOAD_ATTR", "AxisTable", "OnnxResize", "emit", "resize_reference",
           "resize_tables", "table_arrays", "tvm_equivalent", "workload_of"]

#: the kernel's block (its compute's name)
MAIN_BLOCKS = ("onnx_resize",)
#: the PrimFunc attribute holding the workload (JSON) of an ONNX resize in a Relax module
WORKLOAD_ATTR = "layoutopt.onnx_resize"
#: TVM's ``OpPatternKind`` of an injective op (``kInjective``): each output element from its inputs
#: alone, as ``take``; without it ``AnnotateTIROpPattern`` calls the table reads opaque
_INJECTIVE = 2

_F32 = np.float32
#: how close to a half a nearest position's fraction is a tie (see :func:`_nearest_index`)
_TIE = _F32(1e-6)


@dataclass(frozen=True)
class AxisTable:
    """How one axis of an ONNX resize reads its input: per output index, the source indices
    (``index``, int32 ``[out, taps]``, clamped to the input), their weights (``weight``, float32
    ``[out, taps]``; None for nearest: one tap of weight 1) and, for ``tf_crop_and_resize``, whether
    the source position lies inside the input (``inside``, int32 ``[out]``; else the output is the
    extrapolation value)."""

    index: np.ndarray
    weight: np.ndarray | None = None
    inside: np.ndarray | None = None

    @property
    def taps(self) -> int:
        return int(self.index.shape[1])

    def matrix(self, in_size: int) -> np.ndarray:
        """The ``[out, in]`` float64 matrix this axis applies (rows outside the input all zero).

        Example:
            >>> AxisTable(np.array([[0], [0], [1]], "int32")).matrix(2).tolist()
            [[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]]
        """
        out = np.zeros((self.index.shape[0], in_size))
        weight = np.ones(self.index.shape) if self.weight is None else self.weight.astype(np.float64)
        rows = np.arange(self.index.shape[0])
        for tap in range(self.taps):
            np.add.at(out, (rows, self.index[:, tap]), weight[:, tap])
        if self.inside is not None:
            out[self.inside == 0] = 0.0
        return out


def _source_positions(workload: dict[str, Any], axis: int) -> np.ndarray:
    """The float32 source position of every output index along ``axis`` (0: H, 1: W), as ONNX Runtime's
    ``GetOriginalCoordinateFromResizedCoordinate`` computes it."""
    length_original = _F32(workload["data"][2 + axis])
    length_resized = _F32(workload["size"][axis])
    scale = _F32(workload["scale"][axis])
    out = np.arange(workload["size"][axis], dtype=_F32)
    mode = workload["coordinate_transformation_mode"]
    half = _F32(0.5)
    if mode == "asymmetric":
        return out / scale
    if mode == "half_pixel":
        return (out + half) / scale - half
    if mode == "pytorch_half_pixel":
        return (out + half) / scale - half if length_resized > 1 else np.zeros_like(out)
    if mode == "tf_half_pixel_for_nn":
        return (out + half) / scale
    if mode == "align_corners":
        if length_resized == 1:
            return np.zeros_like(out)
        return out * (length_original - _F32(1)) / (length_resized - _F32(1))
    if mode == "half_pixel_symmetric":  # ONNX Runtime computes the last steps in double
        adjustment = length_resized / (scale * length_original)
        offset = (length_original / _F32(2)) * (_F32(1) - adjustment)
        return (np.float64(offset) + (out.astype(np.float64) + 0.5) / np.float64(scale) - 0.5).astype(_F32)
    if mode == "tf_crop_and_resize":
        start, end = _F32(workload["roi"][axis]), _F32(workload["roi"][2 + axis])
        if length_resized > 1:
            return start * (length_original - _F32(1)) + (out * (end - start) * (length_original - _F32(1))
                                                           ) / (length_resized - _F32(1))
        return np.full_like(out, _F32(0.5 * (float(start) + float(end)) * float(length_original - 1)))
    raise ProblemError(f"onnx_resize coordinate_transformation_mode {mode!r} is unknown")


def _round_half_away(x: np.ndarray) -> np.ndarray:
    """``std::round``: halves away from zero (numpy's round takes them to even)."""
    whole = np.trunc(x)
    return whole + np.where(np.abs(x - whole) >= _F32(0.5), np.sign(x), _F32(0))


def _nearest_index(position: np.ndarray, nearest_mode: str, downsampling: bool) -> np.ndarray:
    if nearest_mode in ("round_prefer_floor", "round_prefer_ceil"):
        # a position within _TIE of a half is a tie (ONNX Runtime since its fix of GH28291: a float32
        # position such as (4 + 0.5) / 0.3f - 0.5 = 14.499999 is meant to be 14.5), taken down or up
        fraction = position - np.floor(position)
        tie = np.abs(fraction - _F32(0.5)) <= _TIE
        broken = np.floor(position) + (0 if nearest_mode == "round_prefer_floor" else 1)
        return np.where(tie, broken, _round_half_away(position))
    if nearest_mode == "floor":
        return np.floor(position)
    if nearest_mode == "ceil":
        return np.ceil(position)
    if nearest_mode == "":  # Resize-10 and Upsample: ceil when downsampling, else truncate
        return np.ceil(position) if downsampling else np.trunc(position)
    raise ProblemError(f"onnx_resize nearest_mode {nearest_mode!r} is unknown")


def _cubic_coefficients(s: np.ndarray, a: np.float32) -> np.ndarray:
    """Keys' cubic convolution weights of the 4 taps around a position of fraction ``s`` (float32, as
    ONNX Runtime's ``GetCubicCoeffs`` computes them), ``[len(s), 4]``."""
    s = np.abs(s)
    one, two, three, four, five, eight = (_F32(v) for v in (1, 2, 3, 4, 5, 8))
    far_left, near_right, far_right = s + one, one - s, two - s
    return np.stack([
        ((a * far_left - five * a) * far_left + eight * a) * far_left - four * a,
        ((a + two) * s - (a + three)) * s * s + one,
        ((a + two) * near_right - (a + three)) * near_right * near_right + one,
        ((a * far_right - five * a) * far_right + eight * a) * far_right - four * a,
    ], axis=1).astype(_F32)


def axis_table(workload: dict[str, Any], axis: int) -> AxisTable:
    """The :class:`AxisTable` of ``axis`` (0: H, 1: W) of a validated ``onnx_resize`` workload."""
    in_size, out_size = workload["data"][2 + axis], workload["size"][axis]
    out = np.arange(out_size)
    identity = workload["scale"][axis] == 1.0 or (workload["size"] == workload["data"][2:])
    mode = workload["mode"]
    if identity:  # ONNX Runtime copies an axis of scale 1 (and the whole tensor when no size changes)
        index = np.minimum(out, in_size - 1)[:, None].astype(np.int32)
        return AxisTable(index, None if mode == "nearest" else np.ones(index.shape, _F32))
    position = _source_positions(workload, axis)
    inside = None
    if workload["coordinate_transformation_mode"] == "tf_crop_and_resize":
        inside = ((position >= 0) & (position <= _F32(in_size - 1))).astype(np.int32)
    if mode == "nearest":
        index = _nearest_index(position, workload["nearest_mode"], workload["scale"][axis] < 1.0)
        return AxisTable(np.clip(index, 0, in_size - 1).astype(np.int32)[:, None], None, inside)
    if mode == "linear":  # the position clamped to the input, then its two neighbours
        clamped = np.clip(position, _F32(0), _F32(in_size - 1))
        low = np.minimum(np.trunc(clamped).astype(np.int64), in_size - 1)
        high = np.minimum(low + 1, in_size - 1)
        to_low, to_high = np.abs(clamped - low.astype(_F32)), np.abs(clamped - high.astype(_F32))
        # each neighbour weighs the other's distance
        weight = np.stack([to_high, to_low], axis=1).astype(_F32)
        weight[low == high] = _F32(0.5)
        return AxisTable(np.stack([low, high], axis=1).astype(np.int32), weight, inside)
    start = np.floor(position).astype(np.int64)
    taps = start[:, None] + np.arange(-1, 3)[None, :]
    weight = _cubic_coefficients(position - np.floor(position), _F32(workload["cubic_coeff_a"]))
    if workload["exclude_outside"]:  # taps outside the input weigh 0, the others are renormalised
        weight = np.where((taps < 0) | (taps >= in_size), _F32(0), weight)
        total = weight.sum(axis=1, dtype=_F32, keepdims=True)
        weight = np.divide(weight, total, out=np.zeros_like(weight), where=total != 0).astype(_F32)
    return AxisTable(np.clip(taps, 0, in_size - 1).astype(np.int32), weight, inside)


def resize_tables(workload: dict[str, Any]) -> tuple[AxisTable, AxisTable]:
    """The row and column tables (:class:`AxisTable`) of a validated ``onnx_resize`` workload."""
    return axis_table(workload, 0), axis_table(workload, 1)


def table_arrays(workload: dict[str, Any]) -> list[np.ndarray]:
    """The tables as the kernel takes them after the data: row and column indices, then (linear and
    cubic) their weights, then (``tf_crop_and_resize``) whether each row and column lies inside."""
    rows, columns = resize_tables(workload)
    arrays = [rows.index, columns.index]
    if workload["mode"] != "nearest":
        arrays += [rows.weight, columns.weight]
    if workload["coordinate_transformation_mode"] == "tf_crop_and_resize":
        arrays += [_inside(rows), _inside(columns)]
    return arrays


def _inside(table: AxisTable) -> np.ndarray:
    return table.inside if table.inside is not None else np.ones(table.index.shape[0], np.int32)


#: ONNX's nearest roundings that ``topi.image.resize2d`` computes under the same name
_TOPI_ROUNDING = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def tvm_equivalent(workload: dict[str, Any]) -> dict[str, Any] | None:
    """The attributes of a ``relax.image.resize2d`` that TVM's legalization computes exactly as the
    ``onnx_resize`` ``workload`` (the same source rows and columns, weights within 1e-6; see
    :func:`~.resize.resize_reference`, which mirrors ``topi``), or None where it does not (a scale
    that the sizes do not give, cubic, ``half_pixel_symmetric``, ``tf_crop_and_resize``, ``align_corners``
    onto one row...). A resize TVM computes right keeps TVM's own op.

    Example:
        >>> wl = {"op": "onnx_resize", "data": [1, 8, 5, 7], "mode": "nearest",
        ...       "coordinate_transformation_mode": "half_pixel", "nearest_mode": "round_prefer_floor"}
        >>> tvm_equivalent(validate_workload({**wl, "size": [10, 14], "scale": [2.0, 2.0]}))["method"]
        'nearest_neighbor'
        >>> tvm_equivalent(validate_workload({**wl, "size": [7, 10], "scale": [1.5, 1.5]})) is None
        True
    """
    from .resize import RESIZE_MODES, _axis

    mode, coordinates = workload["mode"], workload["coordinate_transformation_mode"]
    if mode == "cubic" or coordinates not in RESIZE_MODES:
        return None
    if mode == "nearest" and workload["nearest_mode"] not in _TOPI_ROUNDING:
        return None
    attrs = {"method": "nearest_neighbor" if mode == "nearest" else "linear",
             "coordinate_transformation_mode": coordinates,
             "rounding_method": workload["nearest_mode"] if mode == "nearest" else ""}
    try:
        topi_workload = validate_workload({"op": "resize2d", "data": workload["data"],
                                           "size": workload["size"], **attrs, "dtype": workload["dtype"]})
    except ProblemError:  # align_corners onto one row: topi divides by zero
        return None
    for axis, table in enumerate(resize_tables(workload)):
        in_size, out_size = workload["data"][2 + axis], workload["size"][axis]
        theirs = _axis(out_size, in_size, topi_workload)
        matrix = np.zeros((out_size, in_size))
        rows = np.arange(out_size)
        if mode == "nearest":
            matrix[rows, theirs[0]] = 1.0
        else:
            low, high, weight = theirs
            np.add.at(matrix, (rows, low), 1 - weight)
            np.add.at(matrix, (rows, high), weight)
        if not np.allclose(matrix, table.matrix(in_size), rtol=0, atol=1e-6):
            return None
    return attrs


def resize_reference(workload: dict[str, Any], inputs: Sequence[np.ndarray]) -> np.ndarray:
    """The logical NCHW output of an ``onnx_resize`` workload, in float64 numpy, from its tables.

    Example:
        >>> wl = validate_workload({"op": "onnx_resize", "data": [1, 1, 2, 2], "size": [3, 3],
        ...                         "mode": "linear", "coordinate_transformation_mode": "align_corners",
        ...                         "scale": [1.5, 1.5]})
        >>> resize_reference(wl, [np.arange(4.0).reshape(1, 1, 2, 2)])[0, 0]
        array([[0. , 0.5, 1. ],
               [1. , 1.5, 2. ],
               [2. , 2.5, 3. ]])
    """
    data = np.asarray(inputs[0], dtype=np.float64)
    rows, columns = resize_tables(workload)
    height, width = data.shape[2:]
    out = np.einsum("yh,nchw,xw->ncyx", rows.matrix(height), data, columns.matrix(width))
    if rows.inside is not None or columns.inside is not None:
        inside = _inside(rows)[:, None] * _inside(columns)[None, :]
        out = np.where(inside.astype(bool), out, workload["extrapolation_value"])
    return out


def compute(tvm, data, tables: Sequence, workload: dict[str, Any], layout: str):
    """The TE output of an ``onnx_resize`` in ``layout`` (``NCHW`` or ``NCHW{b}c``), ``data`` in that
    layout and ``tables`` the placeholders of :func:`table_arrays` (any float dtype of ``data``): per
    output element, ``row taps x column taps`` reads weighted by the tables."""
    te = tvm.te
    nearest = workload["mode"] == "nearest"
    crop = workload["coordinate_transformation_mode"] == "tf_crop_and_resize"
    row_index, column_index = tables[0], tables[1]
    row_weight, column_weight = (None, None) if nearest else (tables[2], tables[3])
    row_inside, column_inside = (tables[-2], tables[-1]) if crop else (None, None)
    row_taps, column_taps = int(row_index.shape[1]), int(column_index.shape[1])  # 1 on an axis of scale 1
    dtype = data.dtype
    shape = layout_shape([*workload["data"][:2], *workload["size"]], layout)
    blocked = layout_block(layout) is not None

    def element(n, c, y, x, *lane):
        def read(i, j):
            return data[(n, c, row_index[y, i], column_index[x, j], *lane)]

        if nearest:
            value = read(0, 0)
        else:  # each row of taps along W first, then those along H: ONNX Runtime's order for cubic
            value = None
            for i in range(row_taps):
                along = None
                for j in range(column_taps):
                    term = column_weight[x, j].astype(dtype) * read(i, j)
                    along = term if along is None else along + term
                term = row_weight[y, i].astype(dtype) * along
                value = term if value is None else value + term
        if crop:
            outside = tvm.tirx.any(row_inside[y] == 0, column_inside[x] == 0)
            value = tvm.tirx.if_then_else(outside, tvm.tirx.const(workload["extrapolation_value"], dtype),
                                          value)
        return value

    if blocked:
        return te.compute(shape, lambda n, c, y, x, lane: element(n, c, y, x, lane), name=MAIN_BLOCKS[0])
    return te.compute(shape, lambda n, c, y, x: element(n, c, y, x), name=MAIN_BLOCKS[0])


def emit(bb, data, workload: dict[str, Any], layout: str = NCHW, tables: Sequence | None = None):
    """Emit an ONNX resize into the Relax block builder ``bb``: ``R.call_tir`` of its kernel in ``layout``
    on ``data`` (a Relax expression in that layout) and ``tables`` (Relax constants; default: made
    from the workload), the PrimFunc carrying the workload (:data:`WORKLOAD_ATTR`) and marked injective.
    Returns the call, unbound."""
    tvm = import_tvm()
    if tables is None:
        tables = [tvm.relax.const(array) for array in table_arrays(workload)]

    def kernel(x, *placeholders):
        return compute(tvm, x, placeholders, workload, layout)

    return bb.call_te(kernel, data, *tables, primfunc_name_hint="onnx_resize",
                      primfunc_attrs={WORKLOAD_ATTR: json.dumps(workload, sort_keys=True),
                                      "op_pattern": _INJECTIVE})


def workload_of(call, functions) -> dict[str, Any] | None:
    """The workload of a Relax ``call_tir`` of an ONNX resize kernel (:func:`emit`), looking the callee
    up in ``functions`` (an ``IRModule``, or a mapping of GlobalVars to functions); None for any other
    value."""
    tvm = import_tvm()
    if not isinstance(call, tvm.relax.Call) or not isinstance(call.op, tvm.ir.Op):
        return None
    if call.op.name != "relax.call_tir" or not isinstance(call.args[0], tvm.ir.GlobalVar):
        return None
    try:
        func = functions[call.args[0]]
    except (KeyError, ValueError, tvm.error.TVMError):  # not in this module
        return None
    text = func.attrs.get(WORKLOAD_ATTR) if isinstance(func, tvm.tirx.PrimFunc) and func.attrs else None
    return None if text is None else json.loads(str(text))


class OnnxResize(Resize):
    """An ONNX ``Resize`` with ONNX's semantics, in plain or channel-blocked layouts (see the module's
    docstring): :class:`~.resize.Resize`'s candidates, packing and schedule, with its own tables."""

    op = "onnx_resize"
    main_blocks = MAIN_BLOCKS

    def reference(self, workload: dict[str, Any], inputs: Sequence[np.ndarray]) -> np.ndarray:
        """:func:`resize_reference`."""
        return resize_reference(workload, inputs)

    def pack_inputs(self, workload: dict[str, Any], candidate: dict[str, Any],
                    inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """The input in the candidate's layout, then the tables (:func:`table_arrays`)."""
        return [*super().pack_inputs(workload, candidate, inputs), *table_arrays(workload)]

    def placeholders(self, tvm, workload: dict[str, Any], candidate: dict[str, Any]) -> list:
        """The input in the candidate's layout, then the tables."""
        return [*super().placeholders(tvm, workload, candidate),
                *(tvm.te.placeholder(array.shape, dtype=str(array.dtype), name=f"table{i}")
                  for i, array in enumerate(table_arrays(workload)))]

    def resident_inputs(self, tvm, workload: dict[str, Any], candidate: dict[str, Any]) -> list:
        """The tables (:func:`table_arrays`): constants of the build."""
        return self.placeholders(tvm, workload, candidate)[1:]

    def compute(self, tvm, inputs: Sequence, workload: dict[str, Any], candidate: dict[str, Any]):
        """:func:`compute` in the candidate's layout."""
        return compute(tvm, inputs[0], inputs[1:], workload, candidate["in"])


#: the family (:data:`~layoutopt.tvm.kernels.registry.FAMILIES` registers it)
FAMILY = OnnxResize()

"""The output check of a build: how far its numbers are from the model's, and whether that is a bug.

A build is judged against the **float64 truth**: TVM's default build of the untouched model with every
float32 tensor (inputs, weights, intermediate values) in float64 (:func:`float64_module`). Beside it,
the untouched model's own float32 build (TVM's default) is measured against the same truth: that is
how much float32 rounding alone moves this model's outputs on this input. A build passes when its
error is within ``rtol`` or within :data:`ROUNDING_GROWTH` times the untouched build's own error: a
tuned build sums in another order (and Winograd transforms its tiles), which moves the rounding, not
the meaning.

Why not the float32 default build as the reference: on a model whose branches cancel
(``y = conv_a(x) - conv_b(x)`` with nearly equal weights) float32 rounding leaves the default build
itself far from the truth (tenths of ``max|truth|``), and a correct tuned build as far from the
default build: a check against the default build calls that a rewrite bug
(``tests/tvm/test_check.py`` builds such a model).

Non-finite values: an output that is NaN or inf where the truth is finite is an error of ``inf`` (the
build fails). A model whose untouched float32 build already gives NaN/inf on the check's input cannot
be checked on it: :class:`Reference` refuses it, saying so.

Example:
    >>> from layoutopt.tvm import apply_layouts, build, models
    >>> from layoutopt.tvm.evaluate.timing import random_inputs, run
    >>> mod = models.chain()
    >>> inputs = random_inputs(mod)
    >>> reference = Reference.of(mod, inputs, "llvm")
    >>> reference.kind, reference.untouched_error < 1e-5, reference.bounds     # float32 rounding is tiny
    ('float64', True, (0.0001,))
    >>> verdict = reference.judge(run(build(apply_layouts(mod, {"conv2": "NCHW16c"})), inputs))
    >>> verdict.passed, verdict.error < 1e-5
    (True, True)
    >>> reference.judge([np.full((1, 16, 8, 8), np.nan, "float32")]).describe("broken")
    'the broken build is off by NaN/inf where the reference is finite, above its bound 0.0001'
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import ProblemError
from .._tvm import first_line, import_tvm
from ..kernels import onnx_resize
from ..ops import is_tensor_constant

__all__ = ["ROUNDING_GROWTH", "ImportCheck", "Reference", "Verdict", "first_divergence", "float64_module",
           "non_finite", "relative_error"]

#: how many times the untouched float32 build's own error (against float64) a build may be off before
#: the check calls it wrong: summation order and Winograd's tile transforms move float32 rounding by
#: a few times, never by the orders of magnitude of a wrong layout (errors of order 1)
ROUNDING_GROWTH = 10.0


def relative_error(outputs: Sequence[np.ndarray], references: Sequence[np.ndarray]) -> float:
    """Largest ``max|out - ref| / max|ref|`` over the outputs (0 for identical outputs); ``inf`` where
    an output is NaN or inf and the reference is finite.

    Raises:
        ProblemError: the outputs and references differ in number or shape, or a reference is not finite
            (nothing can be judged against it).

    Example:
        >>> relative_error([np.array([1.0, 2.0])], [np.array([1.0, 2.5])])
        0.2
        >>> relative_error([np.array([1.0, np.nan])], [np.ones(2)])
        inf
    """
    if len(outputs) != len(references):
        raise ProblemError(f"the build returns {len(outputs)} outputs, the reference {len(references)}")
    worst = 0.0
    for index, (out, ref) in enumerate(zip(outputs, references, strict=True)):
        if out.shape != ref.shape:
            raise ProblemError(f"output {index}'s shape {out.shape} differs from the reference's {ref.shape}")
        ref = np.asarray(ref, np.float64)
        if not np.all(np.isfinite(ref)):
            raise ProblemError(f"reference output {index} is not finite ({non_finite(ref)}): nothing to "
                               "compare with")
        out = np.asarray(out, np.float64)
        if not np.all(np.isfinite(out)):
            return math.inf
        scale = float(np.max(np.abs(ref), initial=0.0)) or 1.0
        worst = max(worst, float(np.max(np.abs(out - ref), initial=0.0)) / scale)
    return worst


def non_finite(array: np.ndarray) -> str:
    """How many values of ``array`` are NaN and how many infinite, in words.

    Example:
        >>> non_finite(np.array([1.0, np.nan, np.inf, -np.inf]))
        '1 NaN and 2 inf of 4 values'
    """
    nan = int(np.count_nonzero(np.isnan(array)))
    inf = int(np.count_nonzero(np.isinf(array)))
    return f"{nan} NaN and {inf} inf of {array.size} values"


@dataclass(frozen=True)
class Verdict:
    """A build's check: per output, its ``errors`` against the reference and the ``bounds`` they had to
    stay within."""

    errors: tuple[float, ...]
    bounds: tuple[float, ...]

    @property
    def passed(self) -> bool:
        return all(error <= bound for error, bound in zip(self.errors, self.bounds, strict=True))

    @property
    def error(self) -> float:
        """The largest error over the outputs."""
        return max(self.errors, default=0.0)

    def describe(self, name: str) -> str:
        """One line on the build's worst output (against its bound).

        Example:
            >>> Verdict((0.5, np.inf), (1e-4, 1e-4)).describe("nchw8c")  # doctest: +ELLIPSIS
            'the nchw8c build is off by NaN/inf where the reference is finite (output 1), above its bound...'
        """
        worst = max(range(len(self.errors)), key=lambda i: self.errors[i] / self.bounds[i], default=0)
        error, bound = (self.errors[worst], self.bounds[worst]) if self.errors else (0.0, 0.0)
        amount = "NaN/inf where the reference is finite" if math.isinf(error) else f"{error:.3g} (relative)"
        where = f" (output {worst})" if len(self.errors) > 1 else ""
        return f"the {name} build is off by {amount}{where}, {'within' if error <= bound else 'above'} " \
               f"its bound {bound:.3g}"


@dataclass(frozen=True)
class ImportCheck:
    """What TVM's build of the untouched model was compared with: the ``runtime`` (None: nothing
    independent of TVM, ``why`` says why), its largest error against the check's truth and the bound.

    Example:
        >>> ImportCheck("ONNX Runtime 1.32.0", 3.1e-7, 1e-4).describe()
        'ONNX Runtime 1.32.0 agrees with it within 3.1e-07 (bound 0.0001)'
        >>> ImportCheck(None, why="a bare IRModule").describe()
        'no reference independent of TVM (a bare IRModule)'
    """

    runtime: str | None
    error: float | None = None
    bound: float | None = None
    why: str = ""

    def describe(self) -> str:
        if self.runtime is None:
            return f"no reference independent of TVM ({self.why})"
        return f"{self.runtime} agrees with it within {self.error:.2g} (bound {self.bound:.2g})"


@dataclass(frozen=True)
class Reference:
    """What builds are checked against, on one input.

    Attributes:
        truth: the reference outputs (float64 when ``kind`` is ``"float64"``).
        untouched: the untouched model's float32 outputs (TVM's default build).
        untouched_errors: per output, :func:`relative_error` of ``untouched`` against ``truth`` (0 when
            ``truth`` is ``untouched`` itself): float32 rounding alone, on this model and input.
        kind: ``"float64"`` (TVM's default build of :func:`float64_module`), or ``"float32"`` when the
            model could not be computed in float64 (``note`` says why).
        rtol: the tolerance every build gets whatever the untouched build's error.
        imported: what TVM's import of the model was compared with, a runtime independent of TVM
            (:func:`~layoutopt.tvm.evaluate.origin.check_import`; None: not compared).
    """

    truth: tuple[np.ndarray, ...]
    untouched: tuple[np.ndarray, ...]
    untouched_errors: tuple[float, ...]
    kind: str
    rtol: float = 1e-4
    note: str = ""
    imported: ImportCheck | None = None

    @classmethod
    def of(cls, mod, inputs: Sequence[np.ndarray], target: Any, runner: Any = None, rtol: float = 1e-4,
           untouched_executable: Any = None) -> Reference:
        """Build and run the untouched model in float32 (or take ``untouched_executable``, its default
        build) and in float64, on ``inputs``, where ``runner`` runs code.

        Raises:
            ProblemError: the untouched float32 model gives NaN or inf on these inputs.

        Example:
            >>> from layoutopt.tvm import models
            >>> from layoutopt.tvm.evaluate.timing import random_inputs
            >>> reference = Reference.of(models.dense_head(), random_inputs(models.dense_head()), "llvm")
            >>> reference.truth[0].dtype, 0 < reference.untouched_error < 1e-5   # float32 rounding alone
            (dtype('float64'), True)
        """
        from .timing import run

        tvm = import_tvm()
        executable = untouched_executable or tvm.compile(mod, target=target)
        untouched = tuple(run(executable, inputs, runner))
        for index, output in enumerate(untouched):
            if not np.all(np.isfinite(output)):
                raise ProblemError(
                    f"the untouched model itself produces NaN/inf on this input (output {index}: "
                    f"{non_finite(output)}), so its outputs cannot check a build; rerun without the "
                    "check (--no-check, or check=False) to build anyway")
        itself = (0.0,) * len(untouched)
        try:
            wide = float64_module(mod)
            truth = tuple(run(tvm.compile(wide, target=target),
                              [x.astype(np.float64) if x.dtype == np.float32 else x for x in inputs], runner))
        except ProblemError as exc:
            return cls(untouched, untouched, itself, "float32", rtol, note=str(exc))
        if not all(np.all(np.isfinite(t)) for t in truth):
            return cls(untouched, untouched, itself, "float32", rtol,
                       note="the float64 model gives NaN/inf where float32 does not")
        errors = tuple(relative_error([u], [t]) for u, t in zip(untouched, truth, strict=True))
        return cls(truth, untouched, errors, "float64", rtol)

    @property
    def untouched_error(self) -> float:
        """The untouched float32 build's largest error over the outputs."""
        return max(self.untouched_errors, default=0.0)

    @property
    def bounds(self) -> tuple[float, ...]:
        """Per output, the largest error a build may have: ``rtol``, or more where float32 rounding
        alone moves the untouched build further (:data:`ROUNDING_GROWTH` times its error)."""
        return tuple(max(self.rtol, ROUNDING_GROWTH * error) for error in self.untouched_errors)

    def judge(self, outputs: Sequence[np.ndarray]) -> Verdict:
        """The :class:`Verdict` on a build's outputs."""
        if len(outputs) != len(self.truth):
            raise ProblemError(f"the build returns {len(outputs)} outputs, the reference {len(self.truth)}")
        errors = tuple(relative_error([out], [ref]) for out, ref in zip(outputs, self.truth, strict=True))
        return Verdict(errors, self.bounds)

    def describe(self) -> str:
        """One line: what the reference is and how far float32 rounding alone moves the model."""
        bound = max(self.bounds, default=self.rtol)
        imported = "" if self.imported is None else f"; {self.imported.describe()}"
        if self.kind == "float64":
            return (f"outputs checked against the untouched model computed in float64 (TVM's float32 "
                    f"build of it is off by {self.untouched_error:.2g}; a build may be off by {bound:.2g})"
                    f"{imported}")
        return (f"outputs checked against TVM's float32 build of the untouched model, within {bound:.2g} "
                f"(no float64 reference: {self.note}){imported}")


def first_divergence(mod, graph, assignment, target: Any, inputs: Sequence[np.ndarray], runner: Any = None,
                     rtol: float = 1e-4, fuse: bool = True) -> str:
    """Where the build of ``assignment`` first goes wrong: the first binding of ``main``, in program
    order, whose value (returned as an extra output, in ``NCHW``) fails the check against the same
    value of the untouched model. Three builds (the probed rewrite, the probed untouched model in
    float32 and in float64): for a failed check, not for every build.

    Returns one line naming the binding, its layer's choice when it is a layout node, and its error.

    Example:
        On a build that is right, it says so; on a wrong one it names the value, e.g. "the first value
        that diverges is 'conv1_bias': off by 0.5 against the untouched model (bound 0.0001)".

        >>> from layoutopt.tvm import extract_layout_graph, fixed_layout_assignment, models
        >>> from layoutopt.tvm.evaluate.timing import random_inputs
        >>> graph = extract_layout_graph(models.chain())
        >>> first_divergence(graph.mod, graph, fixed_layout_assignment(graph, "NCHW16c"), "llvm",
        ...                  random_inputs(graph.mod))
        'no value of main diverges on its own when returned (the divergence needs the fused build)'
    """
    from ..building.apply import apply_assignment, apply_layouts
    from ..building.builder import build
    from .timing import run

    tvm = import_tvm()
    names = [binding.var.name for block in mod["main"].body.blocks for binding in block.bindings
             if isinstance(binding.var.ty, tvm.relax.TensorType)]
    reference = Reference.of(apply_layouts(mod, {}, probes=names), inputs, target, runner, rtol)
    outputs = run(build(apply_assignment(mod, graph, assignment, probes=names), target, fuse=fuse), inputs,
                  runner)
    verdict = reference.judge(outputs)
    offset = len(outputs) - len(names)  # the model's own outputs come first
    for i, name in enumerate(names):
        error, bound = verdict.errors[offset + i], verdict.bounds[offset + i]
        if error > bound:
            choice = (f" (choice {graph.layout_node(name).labels[assignment[name]]})"
                      if name in graph and name in assignment else "")
            amount = "NaN/inf where the reference is finite" if math.isinf(error) else f"off by {error:.3g}"
            return (f"the first value that diverges is {name!r}{choice}: {amount} against the untouched "
                    f"model (bound {bound:.3g})")
    return "no value of main diverges on its own when returned (the divergence needs the fused build)"


def float64_module(mod):
    """``mod`` with ``main`` computed in float64: float32 inputs, constants and every float32 ``dtype``
    or ``out_dtype`` attribute widened; the rest (integer tensors, shapes) as it is. Layer norms are
    written out (TOPI has no float64 one); ONNX resizes (:mod:`~layoutopt.tvm.kernels.onnx_resize`)
    get their kernel in float64.

    Raises:
        ProblemError: ``main`` holds something this widening does not cover (a ``match_cast``, a call
            whose result type is given explicitly, e.g. ``call_tir``), naming it.

    Example:
        >>> from layoutopt.tvm import models
        >>> wide = float64_module(models.chain())
        >>> wide["main"].params[0].ty, "float32" in wide.script()
        (R.Tensor((1, 8, 8, 8), dtype="float64"), False)
        >>> tvm = import_tvm()
        >>> vm = tvm.relax.VirtualMachine(tvm.compile(wide, "llvm"), tvm.cpu())
        >>> vm["main"](tvm.runtime.tensor(np.ones((1, 8, 8, 8)))).numpy().dtype
        dtype('float64')
    """
    tvm = import_tvm()
    relax = tvm.relax
    func = mod["main"]
    body = func.body
    if not isinstance(body, relax.SeqExpr):
        raise ProblemError("float64 reference: 'main' is not in normal form (a SeqExpr body)")
    env: dict[Any, Any] = {}

    def widen_type(ty):
        if isinstance(ty, relax.TensorType) and str(ty.dtype) == "float32":
            return relax.TensorType(ty.shape, "float64") if ty.shape is not None else relax.TensorType(
                ndim=ty.ndim, dtype="float64")
        return ty

    def widen(expr):
        if isinstance(expr, relax.Var):
            return env[expr]
        if is_tensor_constant(expr):
            array = expr.value.numpy()
            return relax.const(array.astype(np.float64), "float64") if array.dtype == np.float32 else expr
        if isinstance(expr, relax.Tuple):
            return relax.Tuple([widen(field) for field in expr.fields])
        if isinstance(expr, relax.TupleGetItem):
            return relax.TupleGetItem(widen(expr.tuple_value), expr.index)
        if isinstance(expr, relax.Call):
            resize = onnx_resize.workload_of(expr, mod)
            if resize is not None:  # its kernel again, in float64 (the tables stay: indices, float32 weights)
                data, *tables = expr.args[1].fields
                return onnx_resize.emit(bb, widen(data), {**resize, "dtype": "float64"}, tables=tables)
            if not isinstance(expr.op, tvm.ir.Op):
                raise ProblemError(f"float64 reference: a call of {expr.op} is not covered")
            if expr.ty_args:
                raise ProblemError(f"float64 reference: {expr.op.name} gives its result type explicitly")
            return relax.Call(expr.op, [widen(a) for a in expr.args], _widened_attrs(tvm, expr.attrs))
        return expr  # shapes, numbers, strings: no dtype to widen

    bb = relax.BlockBuilder()
    params = []
    for param in func.params:
        new = relax.Var(param.name, widen_type(param.ty))
        env[param] = new
        params.append(new)
    try:
        with bb.function("main", params):
            with bb.dataflow():
                for block in body.blocks:
                    for binding in block.bindings:
                        if not isinstance(binding, relax.VarBinding):
                            raise ProblemError(f"float64 reference: binding {binding.var.name!r} is a "
                                               "match_cast")
                        value = widen(binding.value)
                        env[binding.var] = bb.emit(value, name_hint=binding.var.name)
                result = bb.emit_output(widen(body.body))
            bb.emit_func_output(result)
    except ProblemError:
        raise
    except Exception as exc:  # TVM's type inference refuses a widened call
        raise ProblemError(f"float64 reference: {first_line(exc)}") from None
    # TOPI's layer_norm computes float32 and float16 only: written out (mean, variance, ...) it runs in
    # float64 (batch norms first as at inference, so that only layer norms are left to decompose)
    transform = relax.transform
    return transform.DecomposeOpsForTraining()(transform.DecomposeOpsForInference()(bb.get()))


def _widened_attrs(tvm, attrs):
    """``attrs`` with every float32 dtype field as float64 (a new attrs node), or ``attrs`` itself."""
    if attrs is None:
        return None
    info = getattr(attrs, "__tvm_ffi_type_info__", None)
    if info is None:
        return attrs
    fields = {field.name: getattr(attrs, field.name) for field in info.fields}
    widened = {name: "float64" for name, value in fields.items()
               if "dtype" in name and value is not None and str(value) == "float32"}
    if not widened:
        return attrs
    return tvm.ir.make_node(info.type_key, **{**fields, **widened})

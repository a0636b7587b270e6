"""Build a (rewritten) Relax module for the CPU, and try a rewrite's build before measuring anything.

:func:`build` legalizes (blocked conv2d included: TVM's own legalizer refuses them), fuses, schedules every
kernel (:func:`layoutopt.tvm.kernels.schedule_module`) and lowers for the Relax VM; :func:`legalize` is its
first step alone, and :func:`check_rewrite` runs the rewrite and that step on a fixed layout, in seconds,
before a kernel is measured.

Example:
    >>> import numpy as np, tvm
    >>> from layoutopt.tvm import apply_layouts, models
    >>> executable = build(apply_layouts(models.chain(), {"conv2": "NCHW16c->NCHW16c"}), "llvm")
    >>> vm = tvm.relax.VirtualMachine(executable, tvm.cpu())
    >>> vm["main"](tvm.runtime.tensor(np.zeros((1, 8, 8, 8), "float32"))).numpy().shape
    (1, 16, 8, 8)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...errors import ProblemError
from .._tvm import first_line, import_tvm, resolve_target
from ..graph.graph import LayoutGraph
from ..kernels import schedule_module
from ..kernels.module import Fallback, fallbacks
from ..ops import legalizers, static_shape
from .apply import apply_assignment
from .memory import bytes_moved
from .storage import check_storage_plan, concat_in_place, keep_concats_apart, split_storage_by_shape

__all__ = ["Compiled", "build", "check_rewrite", "compile_module", "legalize"]

#: ops that may remain after legalization: the VM runs them itself
_VM_OPS = frozenset({"relax.shape_of", "relax.null_value", "relax.print", "relax.assert_op",
                     "relax.tensor_to_shape", "relax.shape_to_tensor", "relax.hint_on_device",
                     "relax.to_vdevice"})


def fold_reshapes(mod):
    """``mod`` with each chain of reshapes made one reshape, and a reshape to its input's own shape
    dropped (static shapes only).

    Importers write such chains: the PP-OCRv4 recogniser reshapes its 40x6625 logits to 1x40x6625 and
    back before its softmax, which FuseOps made one kernel copying the tensor twice through an
    intermediate, its indices taken modulo 6625 (146 us of a 12 ms network). A reshape is no kernel
    when the VM can make it a view (``RewriteDataflowReshape``), but not one that reads another
    reshape's output inside a fused function.

    Example:
        >>> from tvm import relax
        >>> bb = relax.BlockBuilder()
        >>> x = relax.Var("x", relax.TensorType((40, 66), "float32"))
        >>> with bb.function("main", [x]):
        ...     with bb.dataflow():
        ...         y = bb.emit(relax.op.reshape(x, (1, 40, 66)))
        ...         z = bb.emit_output(relax.op.reshape(y, (2640,)))
        ...     bb.emit_func_output(z)
        I.GlobalVar("main")
        >>> [str(binding.value) for binding in fold_reshapes(bb.get())["main"].body.blocks[0].bindings]
        ['R.reshape(x, R.shape([2640]))']
    """
    tvm = import_tvm()
    from tvm.relax.dpl import is_op, rewrite_call, wildcard

    data, reshape = wildcard(), is_op("relax.reshape")
    chain, single = reshape(reshape(data, wildcard()), wildcard()), reshape(data, wildcard())

    def rewrite(expr, matches):
        source = matches[data]
        before, after = static_shape(source), static_shape(expr)
        if before is None or after is None:
            return expr
        if before == after:
            return source
        return expr if source.same_as(expr.args[0]) else tvm.relax.op.reshape(source, after)

    folded = mod.clone()  # the caller's module stays as it was
    for gvar, func in mod.functions_items():
        if isinstance(func, tvm.relax.Function):
            # chains first (a chain's last reshape then reads the first one's input), then identities
            folded[gvar] = rewrite_call(single, rewrite, rewrite_call(chain, rewrite, func))
    # the inner reshapes of a chain are left unused
    return tvm.relax.transform.DeadCodeElimination()(folded)


def legalize(mod, target=None):
    """The build's first step: every Relax op becomes a TIR PrimFunc (a blocked conv2d through this
    module's legalizer: TVM's refuses it; sigmoid, SiLU, softmax, exp, log, tanh, erf, GELU, softplus
    and small integer powers through this module's too, vectorised, a division by a scalar constant as
    a multiply; sort, scan and sampling ops through TVM's dispatchers).

    Raises :class:`~layoutopt.ProblemError` naming an op that no legalization covers (the VM could
    not run it, and :func:`build` would fail at code generation).

    Example:
        >>> from layoutopt.tvm import apply_layouts, models
        >>> legalized = legalize(apply_layouts(models.chain(), {"conv2": "NCHW16c->NCHW16c"}), "llvm")
        >>> sorted(gvar.name_hint for gvar, _ in legalized.functions_items())
        ['add', 'add1', 'conv2d', 'conv2d_NCHWc', 'main', 'relu', 'relu1', 'te_layout_transform',
         'te_layout_transform1']
    """
    tvm = import_tvm()
    target = resolve_target(target)
    relax = tvm.relax
    with target:  # sort, scan and sampling ops have no legalization: TVM's pipeline dispatches them first
        mod = relax.backend.DispatchSortScan()(relax.backend.DispatchSampling()(mod))
        # the operator rules' own legalizations (layoutopt.tvm.ops), TVM's for every other op
        mod = relax.transform.LegalizeOps(customize_legalize_map=legalizers())(mod)
    for block in mod["main"].body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, tvm.relax.Call) and isinstance(value.op, tvm.ir.Op):
                name = value.op.name
                if not name.startswith(("relax.call_", "relax.builtin.", "relax.memory.", "relax.vm.")) and \
                        name not in _VM_OPS:
                    raise ProblemError(f"binding {binding.var.name!r}: op {name!r} has no legalization "
                                       f"for {target.kind.name} in TVM {tvm.__version__}: the model cannot "
                                       "be built")
    return mod


def check_rewrite(mod, graph: LayoutGraph, target=None, layout: str = "NCHW16c") -> None:
    """Rewrite ``mod`` to one fixed blocked ``layout`` and legalize it: what the measurement's result
    will go through, tried in seconds before anything is measured, so that an op the rewrite or
    the build cannot handle fails now, not after the measurement.

    Raises :class:`~layoutopt.ProblemError` saying which step failed and why.

    Example:
        >>> from layoutopt.tvm import extract_layout_graph, models
        >>> graph = extract_layout_graph(models.residual())
        >>> check_rewrite(graph.mod, graph, "llvm")       # fine: nothing raised
    """
    from .baselines import fixed_layout_assignment

    try:
        legalize(apply_assignment(mod, graph, fixed_layout_assignment(graph, layout)), target)
    except ProblemError as exc:
        raise ProblemError(f"checking the rewrite before measuring ({layout} everywhere): {exc}") from None
    except Exception as exc:  # a TVM error deep inside a pass: one line, not a C++ backtrace
        raise ProblemError(f"checking the rewrite before measuring ({layout} everywhere): "
                           f"{first_line(exc, with_type=True)}") from None


def build(mod, target=None, fuse: bool = True, storage: str = "relax", in_place_concat: bool = True):
    """Legalize, schedule every kernel, lower and compile ``mod`` for the CPU ``target``.

    Args:
        mod: a Relax module, e.g. from :func:`~layoutopt.tvm.building.apply.apply_layouts`.
        target: CPU target (see :func:`~layoutopt.tvm.resolve_target`).
        fuse: run ``FuseOps``/``FuseTIR``: each conv2d's elementwise epilogue (bias, relu, residual
            add) joins it, finished inside its register tile where the output block is one vector
            wide (see :func:`~layoutopt.tvm.kernels.schedule_module`), as the kernels were measured
            (``extract_layout_graph(..., fuse=True)``); unfused, every op is its own kernel.
        storage: the storage plan: ``"relax"`` (Relax's ``StaticPlanBlockMemory``) or ``"by_shape"``
            (that plan, then a storage per tensor shape: :mod:`~layoutopt.tvm.building.storage`).
        in_place_concat: let the producers of a concat write into its output where its inputs lie one
            after another there (one image, a channel concat), with no copy
            (:func:`~layoutopt.tvm.building.storage.concat_in_place`); else every concat is a kernel.

    Returns a ``tvm.runtime.Executable`` for ``tvm.relax.VirtualMachine`` (:func:`compile_module` also
    says which functions no schedule rule covered).

    Example:
        >>> import numpy as np, tvm
        >>> from layoutopt.tvm import models
        >>> x = tvm.runtime.tensor(np.ones((1, 8, 8, 8), "float32"))
        >>> fused = tvm.relax.VirtualMachine(build(models.chain(), "llvm"), tvm.cpu())
        >>> unfused = tvm.relax.VirtualMachine(build(models.chain(), "llvm", fuse=False), tvm.cpu())
        >>> np.allclose(fused["main"](x).numpy(), unfused["main"](x).numpy(), atol=1e-5)
        True
    """
    return compile_module(mod, target, fuse, storage, in_place_concat).executable


@dataclass(frozen=True)
class Compiled:
    """A build: its ``executable``, the functions of it that took a fallback (no schedule rule
    covered them: :class:`~layoutopt.tvm.kernels.module.Fallback`), the bytes its calls read and
    write per inference (:func:`~layoutopt.tvm.building.memory.bytes_moved` of the fused module, less the
    concats done in place), and how many concat calls were done in place."""

    executable: Any
    fallbacks: tuple[Fallback, ...] = ()
    bytes_moved: int | None = None
    concats_in_place: int = 0


def compile_module(mod, target=None, fuse: bool = True, storage: str = "relax",
                   in_place_concat: bool = True) -> Compiled:
    """:func:`build`, keeping what the scheduler said: which functions run unscheduled or serial.

    Example:
        >>> from layoutopt.tvm import apply_layouts, models
        >>> compiled = compile_module(apply_layouts(models.chain(), {"conv1": "NCHW8c->NCHW8c"}), "llvm")
        >>> compiled.fallbacks      # every function got a parallel schedule
        ()
        >>> compiled.bytes_moved    # each fused call's inputs (weights too) and output, summed
        40576
    """
    tvm = import_tvm()
    from tvm.relax.backend.cpu_generic import pipeline as cpu

    check_storage_plan(storage)
    target = resolve_target(target)
    relax = tvm.relax
    mod = legalize(fold_reshapes(mod), target)
    with target:
        mod = relax.transform.FoldConstant()(mod)
        if fuse:
            mod = relax.transform.AnnotateTIROpPattern()(mod)
            if in_place_concat:
                mod = keep_concats_apart(mod)
            mod = relax.transform.FuseOps()(mod)
            mod = relax.transform.FuseTIR()(mod)
        moved = bytes_moved(mod)  # one call per fused kernel, before calls become VM instructions
        mod = schedule_module(mod, target)
        # an elementwise step whose intermediates are Let-bound (the vectorised sigmoid) and that a
        # schedule inlines into two consumers (a split's halves) defines each Let variable twice:
        # renamed apart, as TIR's well-formedness (checked by every later Schedule) wants it
        mod = tvm.tirx.transform.ConvertSSA()(mod)
        left = tuple(fallbacks(mod))
        finalize = list(cpu.finalize_passes(target))
        removed: list[int] = []  # the bytes each removed concat would have read and written

        def in_place(m, _):
            m, saved = concat_in_place(m)
            removed.extend(saved)
            return m

        # right after Relax's plan, before its storages are lowered and killed (a pipeline with no plan
        # has no storage to place tensors in)
        names = [p.info.name for p in finalize]
        at = names.index("StaticPlanBlockMemory") + 1 if "StaticPlanBlockMemory" in names else None
        if storage == "by_shape" and at is not None:  # after the concats: the tensors they placed stay
            finalize.insert(at, tvm.transform.module_pass(lambda m, _: split_storage_by_shape(m),
                                                          opt_level=0, name="SplitStorageByShape"))
        if in_place_concat and at is not None:
            finalize.insert(at, tvm.transform.module_pass(in_place, opt_level=0, name="ConcatInPlace"))
        mod = tvm.transform.Sequential(cpu.dataflow_lower_passes(target) + finalize)(mod)
    return Compiled(tvm.compile(mod, target=target, relax_pipeline=None), left, moved - sum(removed),
                    len(removed))

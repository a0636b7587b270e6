"""Schedule every function of a legalized Relax module: each kernel by its family, and the module pass.

Relax's CPU pipeline schedules nothing (an unscheduled conv runs orders of magnitude slower) and
MetaSchedule segfaults in apache-tvm 0.27, so each PrimFunc gets a hand-written schedule here: a
function holding a registered kernel family's main block (:attr:`~.family.KernelFamily.main_blocks`, among
:data:`~.registry.FAMILIES`; a fused function keeps the blocks of the functions it fused, so a conv
fused with its epilogue is found by its conv block) gets that family's schedule, and everything
else the generic CPU schedule (parallel outer loops, vectorised inner loop, pads inlined).

A kernel's schedule knobs ride on its main block (:data:`~layoutopt.tvm.kernels.common.CANDIDATE_ANNOTATION`,
set by the family's compute): each function is scheduled with its own knobs, in fused builds and
unfused ones alike.

Example:
    >>> import numpy as np, tvm
    >>> from tvm import relax
    >>> from layoutopt.tvm import models, resolve_target
    >>> target = resolve_target("llvm")
    >>> with target:
    ...     mod = relax.transform.LegalizeOps()(models.chain())
    >>> scheduled = schedule_module(mod, target)
    >>> vm = relax.VirtualMachine(tvm.compile(scheduled, target=target), tvm.cpu())
    >>> untouched = relax.VirtualMachine(tvm.compile(models.chain(), target=target), tvm.cpu())
    >>> x = tvm.runtime.tensor(np.random.default_rng(0).standard_normal((1, 8, 8, 8)).astype("float32"))
    >>> np.allclose(vm["main"](x).numpy(), untouched["main"](x).numpy(), atol=1e-5)
    True
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from ...errors import ProblemError
from .._tvm import first_line, import_tvm, resolve_target
from .common import (
    SCHEDULED_ATTR,
    block_names,
    is_spatial,
    nested_bindings,
    parallel_over,
    parallel_vectorize,
)
from .family import KernelFamily
from .isa import vector_registers
from .registry import FAMILIES

__all__ = ["FALLBACKS_ATTR", "Fallback", "ScheduleModule", "fallbacks", "family_of_function",
           "schedule_module", "schedule_primfunc"]

#: the module attribute where :func:`schedule_module` lists the functions that took a fallback
FALLBACKS_ATTR = "layoutopt.fallbacks"


@dataclass(frozen=True)
class Fallback:
    """A function of a build that no schedule rule covered: left ``unscheduled`` (its rule raised: the
    serial loops TVM lowered it to), or scheduled with no parallel loop (``serial``: one core of the
    two does nothing). ``seconds``: its time in the running network, once profiled."""

    symbol: str
    reason: str
    seconds: float | None = None

    def describe(self) -> str:
        """One line, e.g. ``fused_mean_divide: serial (no parallel loop), 0.012 ms in the network``."""
        where = "" if self.seconds is None else f", {self.seconds * 1e3:.3f} ms in the network"
        return f"{self.symbol}: {self.reason}{where}"


def fallbacks(mod) -> list[Fallback]:
    """The functions of a module :func:`schedule_module` scheduled that took a fallback.

    Example:
        >>> from layoutopt.tvm import models, resolve_target
        >>> from layoutopt.tvm.building.builder import legalize
        >>> target = resolve_target("llvm")
        >>> fallbacks(schedule_module(legalize(models.chain(), target), target))    # every rule covers it
        []
    """
    listed = mod.attrs.get(FALLBACKS_ATTR) if mod.attrs else None
    return [Fallback(str(entry[0]), str(entry[1])) for entry in listed or ()]

logger = logging.getLogger(__name__)


def family_of_function(sch, names: Sequence[str]) -> KernelFamily | None:
    """The registered kernel family whose schedule takes the function of ``sch`` (block ``names``):
    the first in :data:`~.registry.FAMILIES` with a main block among them that
    :meth:`~.family.KernelFamily.accepts` it; None for the generic schedule."""
    for found in FAMILIES.values():
        if any(name in found.main_blocks for name in names) and found.accepts(sch):
            return found
    return None


def schedule_primfunc(func, target: Any, strict: bool = False):
    """``func`` scheduled by its kernel family (:func:`family_of_function`; or the generic schedule) and
    marked ``tirx.is_scheduled``.

    A schedule that fails leaves the function unscheduled with a warning and returns None; with
    ``strict``, it raises :class:`~layoutopt.ProblemError` instead (a kernel being measured must run
    the schedule the build would give it, or not at all).
    """
    scheduled = _scheduled(func, target, strict)
    return None if isinstance(scheduled, Fallback) else scheduled[0]


def _scheduled(func, target: Any, strict: bool):
    """``(scheduled func, runs in parallel)``, or the :class:`Fallback` of a function left unscheduled."""
    tvm = import_tvm()
    sch = tvm.s_tir.Schedule(func)
    names: Sequence[str] = []
    where = func.attrs.get("global_symbol", "?") if func.attrs else "?"
    try:
        names = block_names(sch)  # a function without a root block (sort, scan) has none to schedule
        found = family_of_function(sch, names)
        if found is not None:
            sch = found.schedule(func, target)
        else:
            concat = schedule_concat(sch, names)
            if concat is not None:
                sch = concat
            else:
                schedule_generic(sch, names)
    except (tvm.s_tir.ScheduleError, ValueError, StopIteration) as exc:
        if strict:
            raise ProblemError(f"cannot schedule {where} (blocks {names}): {exc}") from None
        logger.warning("layoutopt: left %s unscheduled: %s", where, first_line(exc))
        return Fallback(str(where), f"unscheduled ({first_line(exc)})")
    parallel = any(inst.kind.name == "Parallel" for inst in sch.trace.insts)
    # an elementwise block inlined where it is read twice (GELU reads its input twice) copies the
    # variables its expression binds (``Let``: the vectorised exp, erf...): each copy gets its own
    ssa = tvm.tirx.transform.ConvertSSA()(tvm.IRModule({"main": sch.mod["main"]}))["main"]
    return ssa.with_attr(SCHEDULED_ATTR, True), parallel


def schedule_generic(sch, names: Sequence[str]) -> None:
    """Injective blocks: parallel + vectorise; pads inlined; reductions (pooling, mean, matmul): see
    :func:`schedule_reduction`."""
    for name in names:
        block = sch.get_sblock(name)
        if "pad" in name and len(names) > 1:
            try:
                sch.compute_inline(block)
                continue
            except Exception:  # not inlinable (e.g. it is the output): schedule it like the rest
                pass
        if is_spatial(sch, block):
            parallel_vectorize(sch, block)
        else:
            schedule_reduction(sch, block)


def schedule_concat(sch, names: Sequence[str]) -> Any:
    """A concat and the elementwise ops fused after it (a folded batch norm and relu in DenseNet): the
    followers inlined into the concat, then one loop nest per input instead of one chain of selects
    per element. Returns the schedule so made, on a copy of ``sch``; None, leaving ``sch`` as it
    was, when the function is not of that shape (no concat, a follower that is no elementwise op, a
    concat along the innermost axis).

    TOPI's concat picks each element's input through a chain of ``if_then_else`` as long as the list
    of inputs, and the generic schedule wrote every follower to its own buffer: on DenseNet-201, whose
    concats take up to 48 inputs, that cost a good share of the build's time
    (``benchmarks/results/e2e-notes.md``, eighth pass, has the times before and after).
    """
    concats = [name for name in names if name.startswith("T_concat")]
    if len(concats) != 1 or nested_bindings(sch, names):
        return None
    scheduled = sch.copy()  # a shape this rule cannot take shows up as a schedule error on the copy
    try:
        _partition_concat(scheduled, concats[0], [name for name in names if name != concats[0]])
    except (import_tvm().s_tir.ScheduleError, ValueError):
        return None
    return scheduled


def _partition_concat(sch, concat: str, followers: Sequence[str]) -> None:
    """Inline ``followers`` into the concat block, parallelise the axes before the concat axis with
    the first one after it, partition the concat axis at the inputs' boundaries (each piece then
    reads one input: the selects fold away) and vectorise each piece's innermost loop."""
    block = sch.get_sblock(concat)
    axis, extents = _concat_pieces(sch, block)
    for name in followers:
        sch.reverse_compute_inline(sch.get_sblock(name))
    loops = sch.get_loops(block)
    if axis >= len(loops) - 1 or not is_spatial(sch, block):
        raise ValueError("a concat along its innermost axis keeps the generic schedule")
    leading = [*loops[:axis], loops[axis + 1]]
    sch.reorder(*leading, loops[axis], *loops[axis + 2:])
    parallel_over(sch, leading)
    for piece in sch.loop_partition(loops[axis], [*extents[:-1], None]):
        for leaf in sch.get_child_blocks(piece):
            while sch.get_child_blocks(leaf):  # the partition wraps each piece's block in one of its own
                leaf = sch.get_child_blocks(leaf)[0]
            sch.vectorize(sch.get_loops(leaf)[-1])


def _concat_pieces(sch, block) -> tuple[int, list[int]]:
    """The concat axis of ``block`` and its inputs' extents along it, in output order: each input is
    read at the output index minus its offset on that axis."""
    tvm = import_tvm()
    analyzer = tvm.sym.Analyzer()
    stmt = sch.get(block)
    written = stmt.writes[0].region
    offsets: dict[int, list[int]] = {}
    for read in stmt.reads:
        shifts = [analyzer.simplify(w.min - r.min) for w, r in zip(written, read.region, strict=True)]
        for axis, shift in enumerate(shifts):
            if not isinstance(shift, tvm.tirx.IntImm):
                raise ValueError(f"concat input {read.source.name} is not read at a constant offset")
            offsets.setdefault(axis, []).append(int(shift))
    moved = [axis for axis, shifts in offsets.items() if any(shifts)]
    if len(moved) != 1 or len(stmt.reads) < 2:
        raise ValueError("not a concat along one axis")
    axis = moved[0]
    order = sorted(range(len(stmt.reads)), key=lambda r: offsets[axis][r])
    return axis, [int(stmt.reads[r].source.shape[axis]) for r in order]


def schedule_reduction(sch, block) -> None:
    """A reduction outside the kernels (pooling, mean, softmax's max and sum...): parallel over its
    leading spatial loops and vectorised where a vector can run:

    - along the reduction, when it walks the inputs' contiguous axis (softmax, layer norm, a mean
      over the last axis: :func:`_vectorize_across_lanes`). On znver3, softmax over 40 x 6625 took
      165 us instead of 311, over 8 x 40 x 40 16 us instead of 24, a mean over the same 40 x 6625
      27 us instead of 141;
    - across outputs, when its innermost spatial loop runs along the output's contiguous axis (the
      channel block of an NCHWc pool): that loop moved inside the reduction and vectorised, one
      vector accumulator per output position instead of one scalar per channel: several times
      faster on Inception-v3's blocked avg-pools (``benchmarks/results/e2e-notes.md``, eighth pass;
      max-pools, which LLVM vectorised already, kept their times)."""
    iter_vars = sch.get(block).iter_vars
    loops = sch.get_loops(block)
    kinds = [int(v.iter_type) for v in iter_vars]
    spatial = [loop for loop, kind in zip(loops, kinds, strict=False) if kind == 0]
    reduction = [loop for loop, kind in zip(loops, kinds, strict=False) if kind != 0]
    if _reduces_contiguous_axis(sch, block, loops, kinds):
        try:  # on a copy first: a reduction rfactor cannot take keeps the rules below
            _vectorize_across_lanes(sch.copy(), block, spatial, reduction[0])
        except import_tvm().s_tir.ScheduleError:
            logger.debug("layoutopt: rfactor refused block %s", sch.get(block).name_hint)
        else:
            _vectorize_across_lanes(sch, block, spatial, reduction[0])
            return
    if _vectorizable_reduction(sch, block, loops, kinds):
        leading = spatial[:-1][:3]
        sch.reorder(*spatial[:-1], *reduction, spatial[-1])
        # parallel and vectorise before decomposing: the update block alone is no reduction block
        parallel_over(sch, leading)
        sch.vectorize(spatial[-1])
        init = sch.decompose_reduction(block, reduction[0])
        sch.vectorize(sch.get_loops(init)[-1])
        return
    leading = []
    for loop in spatial[:3]:
        if loop != loops[len(leading)]:
            break
        leading.append(loop)
    if leading:
        parallel_over(sch, leading)


def _reduces_contiguous_axis(sch, block, loops, kinds: Sequence[int]) -> bool:
    """One loop per block axis, spatial ones first, then one reduction loop of at least two vectors
    that walks the last, contiguous dimension of every buffer the block reads (softmax's max and
    sum, a layer norm's mean and variance, a mean over the last axis)."""
    tvm = import_tvm()
    if len(loops) != len(kinds) or kinds.count(0) != len(kinds) - 1 or kinds[-1] == 0:
        return False
    extent = sch.get(loops[-1]).extent
    lanes, _ = vector_registers()
    if not isinstance(extent, tvm.tirx.IntImm) or extent.value < 2 * lanes:
        return False
    block_stmt = sch.get(block)
    k = block_stmt.iter_vars[-1].var
    reads = [read for read in block_stmt.reads if read.source.name != block_stmt.writes[0].source.name]
    return bool(reads) and all(read.region[-1].min.same_as(k) and int(read.region[-1].extent) == 1
                               for read in reads)


def _vectorize_across_lanes(sch, block, spatial: Sequence, reduce) -> None:
    """Reduce one vector of partial results per output along the contiguous axis (``rfactor``), then
    the vector's lanes: the reduction LLVM leaves scalar (one dependent ``add`` or ``max`` per element)
    becomes one vector op per ``lanes`` elements. A length that is no multiple of the lanes is
    partitioned: all full vectors, then one predicated step."""
    lanes, _ = vector_registers()
    length = int(sch.get(reduce).extent)
    outer, inner = sch.split(reduce, [None, lanes])
    partial = sch.rfactor(inner, factor_axis=len(spatial))
    # the partial block: spatial loops, outer (a reduction), inner (now spatial: one lane each).
    # Parallel and vectorised before decomposing (the update block alone is no reduction block);
    # the partition copies the vector loop into both pieces, and the lowering drops the whole
    # vectors' predicate, which their range proves true.
    loops = sch.get_loops(partial)
    outer, inner = loops[-2], loops[-1]
    if spatial:
        parallel_over(sch, loops[: min(3, len(spatial))])
    sch.vectorize(inner)
    init = sch.decompose_reduction(partial, outer)
    sch.vectorize(sch.get_loops(init)[-1])
    if length % lanes:
        sch.loop_partition(outer, [length // lanes, None])
    final = sch.get_loops(block)
    if len(final) > 1:
        parallel_over(sch, final[: min(3, len(final) - 1)])


def _vectorizable_reduction(sch, block, loops, kinds: Sequence[int]) -> bool:
    """One loop per block axis, spatial ones first; the last spatial axis a short constant loop
    (2-64) that indexes the output's last, contiguous dimension."""
    tvm = import_tvm()
    spatial_count = kinds.count(0)
    if len(loops) != len(kinds) or not 2 <= spatial_count < len(kinds) or any(kinds[:spatial_count]):
        return False
    inner = sch.get(loops[spatial_count - 1])
    if not isinstance(inner.extent, tvm.tirx.IntImm) or not 2 <= inner.extent.value <= 64:
        return False
    block_stmt = sch.get(block)
    last = block_stmt.writes[0].region[-1]
    inner_var = block_stmt.iter_vars[spatial_count - 1].var
    return last.min.same_as(inner_var) and int(last.extent) == 1


def schedule_module(mod, target: Any = None):
    """Schedule every PrimFunc of a legalized module that is not yet marked ``tirx.is_scheduled``.

    Kernels are recognised by their family's main block (:func:`family_of_function`): blocked,
    depthwise and plain conv2d, Winograd, the 1x1 GEMM, dense, and every kernel family registered in
    :data:`~.registry.FAMILIES`; every other function gets the generic CPU schedule. A conv2d fused
    with its elementwise epilogue (``FuseOps``) gets the measured kernel's register tile, the
    epilogue finished per tile when the output block is one vector wide, after the conv otherwise.
    Call it after ``relax.transform.LegalizeOps`` and before the lowering passes.

    Example:
        A classifier head: its conv and dense by their families, the pool and the rest generically.

        >>> from tvm import relax
        >>> from layoutopt.tvm import models, resolve_target
        >>> target = resolve_target({"kind": "llvm", "mcpu": "znver3"})
        >>> with target:
        ...     legalized = relax.transform.LegalizeOps()(models.dense_head())
        >>> scheduled = schedule_module(legalized, target)
        >>> sorted((gvar.name_hint, bool(func.attrs.get("tirx.is_scheduled")))
        ...        for gvar, func in scheduled.functions_items() if gvar.name_hint != "main")
        [('add', True), ('add1', True), ('conv2d', True), ('matmul', True), ('max_pool2d', True),
         ('relu', True), ('reshape', True)]
    """
    tvm = import_tvm()
    target = resolve_target(target)
    updates, fell_back = {}, []
    with target:
        for gvar, func in mod.functions_items():
            if not isinstance(func, tvm.tirx.PrimFunc) or int(func.attrs.get(SCHEDULED_ATTR, 0) if func.attrs
                                                               else 0):
                continue
            scheduled = _scheduled(func, target, strict=False)
            if isinstance(scheduled, Fallback):
                fell_back.append(replace(scheduled, symbol=gvar.name_hint))
                continue
            updates[gvar], parallel = scheduled
            if not parallel and _has_loops(func):
                fell_back.append(Fallback(gvar.name_hint, "serial (no parallel loop)"))
    if not updates and not fell_back:
        return mod
    mod = mod.clone()  # never modify the caller's module in place
    for gvar, func in updates.items():
        mod[gvar] = func
    if fell_back:
        mod = mod.with_attr(FALLBACKS_ATTR, [[f.symbol, f.reason] for f in fell_back])
    return mod


def _has_loops(func) -> bool:
    """Whether ``func`` computes anything in a loop (a scalar function has nothing to run in parallel)."""
    return any(int(d) > 1 for param in func.params for d in getattr(param, "shape", None) or ())


def ScheduleModule(target: Any = None):
    """:func:`schedule_module` as a TVM module pass, to put in a ``tvm.transform.Sequential``.

    Example:
        >>> import tvm
        >>> from tvm import relax
        >>> from layoutopt.tvm import models, resolve_target
        >>> target = resolve_target("llvm")
        >>> seq = tvm.transform.Sequential([relax.transform.LegalizeOps(), ScheduleModule(target)])
        >>> with target:
        ...     executable = tvm.compile(seq(models.chain()), target=target)
    """
    tvm = import_tvm()
    return tvm.transform.module_pass(
        lambda mod, _ctx: schedule_module(mod, target), opt_level=0, name="layoutopt.ScheduleModule"
    )

"""Storage plans: which tensors of a build share memory, and why it matters on two threads.

Relax's ``StaticPlanBlockMemory`` gives a tensor the storage of one whose last use has passed, whatever
its shape: a 1x1 conv's 384-channel output may land in lines a 64-channel tensor filled, which the
thread pool split between its two threads otherwise. Where a core writing lines the other core wrote
last pays for taking them over (on this project's VMs, in the host's "slow mode", a depthwise layer
whose output lines the other thread wrote ran 1.9-3.6x its time: ``real_models-notes.md``), such reuse
costs more than the memory it saves.

:func:`split_storage_by_shape` is a pass to run right after ``StaticPlanBlockMemory``: it keeps the
plan's lifetimes but gives each shape (and dtype) among the tensors that share a storage a storage of
its own, so memory passes only between tensors of one shape, which the same kinds of kernel write
split alike. It costs memory (a storage per shape instead of one per plan slot) and, where handing
lines over is cheap, the cache misses of a larger footprint: on MobileNetV2 (AMD Zen 4, 2 threads) it
ran 1.26-1.50x faster than Relax's plan in the slow mode and 0.94x in the fast one
(``notes/storage_plan.md``). :func:`~layoutopt.tvm.building.builder.compile_module` takes it as
``storage="by_shape"``.

:func:`concat_in_place`, run at the same point, gives a concat whose inputs lie one after another in its
output (one image) a storage of its own with each input at its offset, so that the producers write
there and the concat's copy is removed; ``build`` does so by default (``in_place_concat=True``).

Example:
    >>> import numpy as np, tvm
    >>> from layoutopt.tvm import build, models
    >>> x = tvm.runtime.tensor(np.ones((1, 8, 8, 8), "float32"))
    >>> planned, by_shape = (tvm.relax.VirtualMachine(build(models.chain(), "llvm", storage=s), tvm.cpu())
    ...                      for s in ("relax", "by_shape"))
    >>> np.array_equal(planned["main"](x).numpy(), by_shape["main"](x).numpy())
    True
"""

from __future__ import annotations

import math
import warnings
from typing import Any

from ...errors import ProblemError
from .._tvm import first_line, import_tvm
from ..ops.concat import CONCAT_IN_PLACE, concat_fits_in_place

#: the storage plans :func:`~layoutopt.tvm.building.builder.compile_module` knows
STORAGE_PLANS = ("relax", "by_shape")
#: what a tune takes: a plan, or ``"auto"`` (the tuned build with each plan, the guard's pick)
TUNE_STORAGE = (*STORAGE_PLANS, "auto")


def check_storage_plan(storage: str, known: tuple[str, ...] = STORAGE_PLANS) -> str:
    """``storage`` if it is one of ``known``, else a :class:`~layoutopt.ProblemError` naming it.

    Example:
        >>> check_storage_plan("by_shape"), check_storage_plan("auto", TUNE_STORAGE)
        ('by_shape', 'auto')
    """
    if storage not in known:
        raise ProblemError(f"unknown storage plan {storage!r}; known: {', '.join(known)}")
    return storage


def _is_call(tvm: Any, value: Any, op: str) -> bool:
    return isinstance(value, tvm.relax.Call) and isinstance(value.op, tvm.ir.Op) and value.op.name == op


def _tensor_key(alloc: Any) -> tuple[tuple[int, ...], str]:
    """(shape, dtype) of an ``R.memory.alloc_tensor(storage, offset, shape, dtype, ...)`` call."""
    _, _, shape, dtype = alloc.args[:4]
    return tuple(int(d) for d in shape.values), str(dtype.value)


def _nbytes(tvm: Any, key: tuple[tuple[int, ...], str]) -> int:
    """The bytes of a tensor of ``key`` = (shape, dtype)."""
    shape, dtype = key
    return math.prod(shape) * tvm.runtime.DataType(dtype).bits // 8


def _with_args(tvm: Any, call: Any, first: list[Any]) -> Any:
    """``call`` with its first ``len(first)`` arguments replaced by ``first`` (a storage, a size...)."""
    return tvm.relax.Call(call.op, [*first, *call.args[len(first):]], call.attrs, call.ty_args)


def _with_blocks(tvm: Any, func: Any, blocks: list[Any]) -> Any:
    """``func`` with its body's binding blocks replaced by ``blocks``."""
    return tvm.relax.Function(func.params, tvm.relax.SeqExpr(blocks, func.body.body), func.ret_ty,
                              func.is_pure, func.attrs)


def split_storage_by_shape_in(func: Any) -> Any:
    """:func:`split_storage_by_shape` for one Relax function (returned unchanged if it plans nothing)."""
    tvm = import_tvm()
    relax = tvm.relax
    if not isinstance(func, relax.Function) or not isinstance(func.body, relax.SeqExpr):
        return func
    bindings = [b for block in func.body.blocks for b in block.bindings if isinstance(b, relax.VarBinding)]
    storages = {b.var for b in bindings if _is_call(tvm, b.value, "relax.memory.alloc_storage")}
    # each planned storage: the (shape, dtype) of the tensors placed in it, in order of appearance
    shapes: dict[Any, list[tuple[tuple[int, ...], str]]] = {}
    at_offsets = set()  # storages holding a tensor at an offset (a concat's inputs): left alone
    for b in bindings:
        if _is_call(tvm, b.value, "relax.memory.alloc_tensor") and b.value.args[0] in storages:
            key = _tensor_key(b.value)
            if int(b.value.args[1].value) != 0:
                at_offsets.add(b.value.args[0])
            elif key not in shapes.setdefault(b.value.args[0], []):
                shapes[b.value.args[0]].append(key)
    for storage in at_offsets:
        shapes.pop(storage, None)
    if all(len(keys) <= 1 for keys in shapes.values()):
        return func
    split: dict[tuple[Any, tuple[tuple[int, ...], str]], Any] = {}
    blocks = []
    for block in func.body.blocks:
        rewritten = []
        for b in block.bindings:
            value = b.value if isinstance(b, relax.VarBinding) else None
            if value is not None and b.var in shapes:
                for key in shapes[b.var]:  # one storage per shape, where the shared one was
                    var = relax.Var(f"storage_{len(split)}", b.var.ty)
                    size = relax.ShapeExpr([_nbytes(tvm, key)])
                    rewritten.append(relax.VarBinding(var, _with_args(tvm, value, [size])))
                    split[b.var, key] = var
            elif value is not None and _is_call(tvm, value, "relax.memory.alloc_tensor") \
                    and value.args[0] in shapes:
                storage = split[value.args[0], _tensor_key(value)]
                rewritten.append(relax.VarBinding(b.var, _with_args(tvm, value, [storage])))
            else:
                rewritten.append(b)
        kind = relax.DataflowBlock if isinstance(block, relax.DataflowBlock) else relax.BindingBlock
        blocks.append(kind(rewritten))
    return _with_blocks(tvm, func, blocks)


def split_storage_by_shape(mod: Any) -> Any:
    """Give each shape among the tensors that share a planned storage a storage of its own.

    Run on a module ``StaticPlanBlockMemory`` has planned (``R.memory.alloc_storage`` and
    ``R.memory.alloc_tensor`` at offset 0); each Relax function's storages are split, the lifetimes
    kept, so a storage passes only between tensors of one shape and dtype (see the module's
    docstring). A storage holding a tensor at an offset (a concat done in place) is left as it is.

    Example:
        >>> import tvm
        >>> from tvm.relax.backend.cpu_generic import pipeline
        >>> from layoutopt.tvm import models
        >>> lowered = tvm.transform.Sequential(pipeline.dataflow_lower_passes(tvm.target.Target("llvm")))(
        ...     tvm.relax.transform.LegalizeOps()(models.chain((8, 16, 16, 8))))
        >>> planned = tvm.relax.transform.StaticPlanBlockMemory()(lowered)
        >>> [m["main"].script().count("alloc_storage") for m in (planned, split_storage_by_shape(planned))]
        [2, 4]
    """
    tvm = import_tvm()
    out = tvm.IRModule(dict(mod.functions), attrs=mod.attrs)
    for gvar, func in mod.functions.items():
        if isinstance(func, tvm.relax.Function):
            out[gvar] = split_storage_by_shape_in(func)
    return out


#: the alignment TVM's kernels assume of a tensor's data (``kAllocAlignment``): an input placed at an
#: offset that is no multiple of it keeps its own storage
_ALIGNMENT = 64


def _written_params(tvm: Any, func: Any) -> set[int]:
    """The positions of ``func``'s buffer parameters one of its blocks writes (every position if it
    has no blocks to read that from)."""
    sch = tvm.s_tir.Schedule(func)
    try:
        stack = [sch.get_sblock("root")]
    except tvm.s_tir.ScheduleError:
        return set(range(len(func.params)))
    stored: list[Any] = []  # the buffers written: in TVM 0.27 a PrimFunc's parameters are its buffers
    while stack:
        for child in sch.get_child_blocks(stack.pop()):
            stored += [region.source for region in sch.get(child).writes]
            stack.append(child)
    return {i for i, param in enumerate(func.params) if any(param.same_as(buffer) for buffer in stored)}


class _Uses:
    """Where each tensor of a lowered Relax function is read and written, its aliases resolved."""

    def __init__(self, tvm: Any, mod: Any, bindings: list[Any], body: Any) -> None:
        relax = tvm.relax
        self.root: dict[Any, Any] = {}
        self.tuples: dict[Any, list[Any]] = {}
        self.escapes: set[Any] = set()  # used where this pass cannot follow it
        self.writes: dict[Any, list[int]] = {}
        self.reads: dict[Any, list[int]] = {}
        self.calls: dict[int, tuple[Any, list[Any]]] = {}  # binding index: (callee, its args' roots)
        written: dict[Any, set[int]] = {}
        for t, b in enumerate(bindings):
            value = b.value
            if isinstance(value, relax.Var):
                self.root[b.var] = self.of(value)
            elif isinstance(value, relax.TupleGetItem) and value.tuple_value in self.tuples:
                self.root[b.var] = self.tuples[value.tuple_value][value.index]
            elif isinstance(value, relax.Tuple) and all(isinstance(f, relax.Var) for f in value.fields):
                self.tuples[b.var] = [self.of(f) for f in value.fields]
            elif _is_call(tvm, value, "relax.memory.alloc_tensor") or \
                    _is_call(tvm, value, "relax.memory.alloc_storage"):
                continue
            elif isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.GlobalVar) and \
                    isinstance(mod[value.op], tvm.tirx.PrimFunc) and \
                    all(isinstance(a, relax.Var) or not relax.analysis.free_vars(a) for a in value.args):
                func = mod[value.op]
                if value.op not in written:
                    written[value.op] = _written_params(tvm, func)
                args = [self.of(a) if isinstance(a, relax.Var) else None for a in value.args]
                self.calls[t] = (value.op, args)
                for p, arg in enumerate(args):
                    if arg is not None:
                        (self.writes if p in written[value.op] else self.reads).setdefault(arg, []).append(t)
            else:
                self.escapes.update(self.of(v) for v in relax.analysis.free_vars(value))
        for var in relax.analysis.free_vars(body):
            self.escapes.add(self.of(var))
        self.used = {var for b in bindings for var in relax.analysis.free_vars(b.value)} | \
            set(relax.analysis.free_vars(body))
        # a tuple used whole (passed on, returned) lets its fields escape
        for var in list(self.escapes):
            self.escapes.update(self.tuples.get(var, ()))

    def of(self, var: Any) -> Any:
        return self.root.get(var, var)


def concat_in_place_in(func: Any, mod: Any) -> tuple[Any, list[int], set[tuple[Any, int]]]:
    """:func:`concat_in_place` for one Relax function: the function, the bytes each removed concat
    would have read and written, and the (PrimFunc, parameter position) pairs now given a tensor at
    an offset."""
    tvm = import_tvm()
    relax = tvm.relax
    if not isinstance(func, relax.Function) or not isinstance(func.body, relax.SeqExpr) or \
            any(isinstance(block, relax.DataflowBlock) for block in func.body.blocks):
        return func, [], set()
    bindings = [b for block in func.body.blocks for b in block.bindings]
    if not all(isinstance(b, relax.VarBinding) for b in bindings):
        return func, [], set()
    where = {b.var: t for t, b in enumerate(bindings)}
    storages = {b.var: b.value for b in bindings if _is_call(tvm, b.value, "relax.memory.alloc_storage")}
    # tensors the plan placed alone at the start of a storage: the ones this pass may move
    allocs = {b.var: b.value for b in bindings if _is_call(tvm, b.value, "relax.memory.alloc_tensor")
              and b.value.args[0] in storages and int(b.value.args[1].value) == 0}
    uses = _Uses(tvm, mod, bindings, func.body.body)
    moved: dict[Any, tuple[Any, int]] = {}  # alloc var: (its new storage, its offset)
    new_storages: dict[int, list[tuple[Any, Any]]] = {}  # binding index: storages to bind before it
    removed: dict[int, int] = {}  # the concat calls' binding indices: the bytes they would have moved
    for t, (callee, args) in sorted(uses.calls.items()):
        prim = mod[callee]
        if CONCAT_IN_PLACE not in (prim.attrs or {}):
            continue
        *inputs, out = args
        axis = int(prim.attrs[CONCAT_IN_PLACE])
        tensors = [*inputs, out]
        if any(v is None or v not in allocs or v in moved or v in uses.escapes for v in tensors) or \
                len(set(tensors)) != len(tensors) or uses.writes.get(out) != [t] or \
                any(r <= t for r in uses.reads.get(out, ())) or bindings[t].var in uses.used:
            continue
        keys = [_tensor_key(allocs[v]) for v in tensors]
        sizes = [_nbytes(tvm, key) for key in keys]
        offsets = [sum(sizes[:j]) for j in range(len(inputs))]
        if not concat_fits_in_place([shape for shape, _ in keys], axis) or \
                len({dtype for _, dtype in keys}) != 1 or sum(sizes[:-1]) != sizes[-1] or \
                any(offset % _ALIGNMENT for offset in offsets) or \
                any(len(uses.writes.get(v, ())) != 1 or uses.writes[v][0] >= t for v in inputs):
            continue
        first = min(where[v] for v in tensors)
        template = storages[allocs[out].args[0]]
        storage = relax.Var(f"concat_storage_{len(removed)}", bindings[where[allocs[out].args[0]]].var.ty)
        new_storages.setdefault(first, []).append((storage, _with_args(tvm, template,
                                                                       [relax.ShapeExpr([sizes[-1]])])))
        for v, offset in zip(tensors, [*offsets, 0], strict=True):
            moved[v] = (storage, offset)
        removed[t] = 2 * sizes[-1]
    if not removed:
        return func, [], set()
    at_offsets = {(callee, p) for callee, args in uses.calls.values() for p, arg in enumerate(args)
                  if arg in moved and moved[arg][1]}
    # a planned storage whose every tensor moved is no longer allocated
    kept = {allocs[v].args[0] for v in allocs if v not in moved} | \
        {var for b in bindings if b.var not in allocs for var in relax.analysis.free_vars(b.value)}
    blocks, t = [], 0
    for block in func.body.blocks:
        rewritten = []
        for b in block.bindings:
            rewritten += [relax.VarBinding(var, value) for var, value in new_storages.get(t, ())]
            if b.var in storages and b.var not in kept:
                pass
            elif b.var in moved:
                storage, offset = moved[b.var]
                offset_value = relax.expr.prim_value(offset, str(b.value.args[1].ty))
                rewritten.append(relax.VarBinding(b.var, _with_args(tvm, b.value, [storage, offset_value])))
            elif t not in removed:
                rewritten.append(b)
            t += 1
        blocks.append(relax.BindingBlock(rewritten))
    return _with_blocks(tvm, func, blocks), list(removed.values()), at_offsets


def keep_concats_apart(mod: Any) -> Any:
    """``mod`` with every concat marked :data:`CONCAT_IN_PLACE` made opaque to ``FuseOps``: fused with
    its producers (a resize) or consumers, it could not be removed, and its producers could not write
    into its buffer. Run after ``AnnotateTIROpPattern``."""
    tvm = import_tvm()
    out = tvm.IRModule(dict(mod.functions), attrs=mod.attrs)
    for gvar, func in mod.functions.items():
        if isinstance(func, tvm.tirx.PrimFunc) and CONCAT_IN_PLACE in (func.attrs or {}):
            out[gvar] = func.with_attr("op_pattern", 8)  # kOpaque: fused with nothing
    return out


def concat_in_place(mod: Any) -> tuple[Any, list[int]]:
    """Let the producers of a concat write into its output, and drop the concat's copy.

    Run on a module ``StaticPlanBlockMemory`` has planned. For each call of a concat PrimFunc marked
    :data:`CONCAT_IN_PLACE` (the build's legalization marks those whose inputs lie one after another
    in the output: :func:`concat_fits_in_place`) whose output and inputs the plan placed alone at the
    start of a storage, written once each (the inputs before the concat), never passed anywhere this
    pass cannot follow (a reshape's view, the function's result), all distinct and each at an offset
    the kernels' alignment allows: one new storage holds the output, each input at its offset in it,
    and the concat call is removed. The inputs keep their lifetimes and are read by their other
    consumers as before; a storage whose tensors all moved is no longer allocated. A concat that does
    not qualify stays a kernel.

    Returns the module and, for each concat removed, the bytes it would have read and written.

    Example:
        >>> import numpy as np, tvm
        >>> from layoutopt.tvm import build, models
        >>> x = tvm.runtime.tensor(np.ones((1, 8, 8, 8), "float32"))
        >>> copied, in_place = (tvm.relax.VirtualMachine(build(models.concat3(), "llvm", in_place_concat=p),
        ...                                              tvm.cpu()) for p in (False, True))
        >>> np.array_equal(copied["main"](x).numpy(), in_place["main"](x).numpy())
        True
    """
    tvm = import_tvm()
    out = tvm.IRModule(dict(mod.functions), attrs=mod.attrs)
    saved: list[int] = []
    for gvar, func in mod.functions.items():
        if isinstance(func, tvm.relax.Function):
            rewritten, saved_here, offsets_here = concat_in_place_in(func, mod)
            try:  # the kernels given a tensor at an offset must take one
                accepting = {callee: accept_offsets(out[callee], {p for c, p in offsets_here if c == callee})
                             for callee, _ in offsets_here}
            except Exception as exc:  # a kernel TVMScript does not read back: keep the copies
                warnings.warn(f"concats of {gvar.name_hint} stay copies: {first_line(exc)}", stacklevel=2)
                continue
            out[gvar] = rewritten
            saved += saved_here
            for callee, accepting_func in accepting.items():
                out[callee] = accepting_func
    return out, saved


def accept_offsets(func: Any, positions: set[int]) -> Any:
    """``func`` with the buffer parameters at ``positions`` taking a tensor that starts at a byte offset
    in its storage (a multiple of 64 bytes): TVM binds a parameter with no element offset only to
    tensors at offset 0. Written through TVMScript (TIR has no buffer substitution in Python).

    Example:
        >>> import tvm
        >>> exp = tvm.te.create_prim_func([a := tvm.te.placeholder((4, 16), name="a"), tvm.topi.exp(a)])
        >>> accept_offsets(exp, {1}).params[1].offset_factor
        16
    """
    tvm = import_tvm()
    text = func.script()
    start = text.index("(", text.index("\ndef ")) + 1
    cuts, depth, quoted = [], 0, False  # the parameters: top-level commas of the signature
    for i in range(start, len(text)):
        char = text[i]
        if char == '"':
            quoted = not quoted
        elif quoted:
            continue
        elif char in "([":
            depth += 1
        elif char in ")]" and depth:
            depth -= 1
        elif char == "," and not depth:
            cuts.append(i)
        elif char == ")":
            cuts.append(i)
            break
    for p in sorted(positions, reverse=True):
        end = cuts[p]
        annotation_end = text.rindex(")", 0, end)
        factor = _ALIGNMENT * 8 // func.params[p].dtype.bits
        text = f"{text[:annotation_end]}, offset_factor={factor}{text[annotation_end:]}"
    return tvm.script.from_source(text)

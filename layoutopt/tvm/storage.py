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
(``benchmarks/storage_plan.py``). :func:`~layoutopt.tvm.builder.compile_module` takes it as
``storage="by_shape"``.

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
from typing import Any

from ..errors import ProblemError
from ._tvm import import_tvm

#: the storage plans :func:`~layoutopt.tvm.builder.compile_module` knows
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
    for b in bindings:
        if _is_call(tvm, b.value, "relax.memory.alloc_tensor") and b.value.args[0] in storages:
            if int(b.value.args[1].value) != 0:  # the plan placed a tensor at an offset: leave it alone
                return func
            key = _tensor_key(b.value)
            if key not in shapes.setdefault(b.value.args[0], []):
                shapes[b.value.args[0]].append(key)
    if all(len(keys) <= 1 for keys in shapes.values()):
        return func
    split: dict[tuple[Any, tuple[tuple[int, ...], str]], Any] = {}
    blocks = []
    for block in func.body.blocks:
        rewritten = []
        for b in block.bindings:
            value = b.value if isinstance(b, relax.VarBinding) else None
            if value is not None and b.var in shapes:
                for shape, dtype in shapes[b.var]:  # one storage per shape, where the shared one was
                    var = relax.Var(f"storage_{len(split)}", b.var.ty)
                    size = relax.ShapeExpr([math.prod(shape) * tvm.runtime.DataType(dtype).bits // 8])
                    rewritten.append(relax.VarBinding(var, relax.Call(value.op, [size, *value.args[1:]],
                                                                      value.attrs, value.ty_args)))
                    split[b.var, (shape, dtype)] = var
            elif value is not None and _is_call(tvm, value, "relax.memory.alloc_tensor") \
                    and value.args[0] in shapes:
                storage = split[value.args[0], _tensor_key(value)]
                rewritten.append(relax.VarBinding(b.var, relax.Call(value.op, [storage, *value.args[1:]],
                                                                    value.attrs, value.ty_args)))
            else:
                rewritten.append(b)
        kind = relax.DataflowBlock if isinstance(block, relax.DataflowBlock) else relax.BindingBlock
        blocks.append(kind(rewritten))
    return relax.Function(func.params, relax.SeqExpr(blocks, func.body.body), func.ret_ty, func.is_pure,
                          func.attrs)


def split_storage_by_shape(mod: Any) -> Any:
    """Give each shape among the tensors that share a planned storage a storage of its own.

    Run on a module ``StaticPlanBlockMemory`` has planned (``R.memory.alloc_storage`` and
    ``R.memory.alloc_tensor`` at offset 0); each Relax function's storages are split, the lifetimes
    kept, so a storage passes only between tensors of one shape and dtype (see the module's
    docstring). Functions the plan placed at an offset are left as they are.

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

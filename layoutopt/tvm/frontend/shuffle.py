"""Channel shuffles folded into the convs after them, at compile time.

ShuffleNet's channel shuffle (``reshape -> transpose -> reshape``, which :func:`~layoutopt.tvm.prepare`
writes as one ``take`` of the channels, :func:`~layoutopt.tvm.frontend.normalise.channel_shuffles_as_take`)
costs a pass over its tensor: in a blocked layout a gather of blocks and lanes. A channel
permutation followed by a conv is the same conv with its weight's input channels permuted:

* into a conv whose groups the permutation keeps (every ungrouped conv), the shuffle is folded away:
  ``conv(take(x, p), W) = conv(x, W[:, p^-1])``;
* past a per-channel op (a depthwise conv, a per-channel or scalar constant's arithmetic, a unary op)
  it moves down, that op's weight or constant permuted: ``dw(take(x, p), w) = take(dw(x, w[p^-1]), p)``,
  towards a conv it folds into (or, past a stride-2 depthwise conv, onto a quarter of the data).

A shuffle read by anything else, or twice, stays where it is. :func:`~layoutopt.tvm.prepare` runs
:func:`fold_channel_shuffles` after writing the shuffles as takes.

Example:
    >>> import numpy as np
    >>> from tvm import relax
    >>> bb = relax.BlockBuilder()
    >>> x = relax.Var("x", relax.TensorType((1, 4, 3, 3), "float32"))
    >>> with bb.function("main", [x]):
    ...     with bb.dataflow():
    ...         shuffled = bb.emit(relax.op.take(x, relax.const(np.array([0, 2, 1, 3])), axis=1))
    ...         weight = relax.const(np.arange(8, dtype="float32").reshape(2, 4, 1, 1))
    ...         out = bb.emit_output(relax.op.nn.conv2d(shuffled, weight))
    ...     _ = bb.emit_func_output(out)
    >>> folded = fold_channel_shuffles(bb.get())
    >>> [b.value.op.name for b in folded["main"].body.blocks[0].bindings]
    ['relax.nn.conv2d']
    >>> folded["main"].body.blocks[0].bindings[0].value.args[1].value.numpy()[:, :, 0, 0].tolist()
    [[0.0, 2.0, 1.0, 3.0], [4.0, 6.0, 5.0, 7.0]]
"""

from __future__ import annotations

import numpy as np

from .._tvm import import_tvm
from ..ops import NCHW, UNARY_OPS, channel_permutation, is_tensor_constant, static_shape, var_uses

__all__ = ["fold_channel_shuffles"]

#: binary ops a shuffle moves past when their other operand is a scalar or per-channel constant
_CHANNEL_WISE = ("relax.add", "relax.subtract", "relax.multiply", "relax.divide", "relax.maximum",
                 "relax.minimum")


def fold_channel_shuffles(mod):
    """``mod`` with each channel shuffle (a ``take`` of channels by a constant permutation) read once
    folded into the conv it reaches, or moved past the per-channel ops before it (see the module's
    docstring); the computation is the same."""
    tvm = import_tvm()
    relax = tvm.relax
    from tvm.relax.dpl import is_op, rewrite_call, wildcard

    main = mod["main"]
    for _ in range(sum(len(block.bindings) for block in main.body.blocks)):  # each pass moves a take down
        single = _read_once_takes(main)
        if not single:  # nothing to fold (most models: no pattern matching over them at all)
            break
        data, permutation = wildcard(), wildcard()
        take = is_op("relax.take")(data, permutation)
        pattern = is_op("relax.nn.conv2d")(take, wildcard()) | \
            is_op("relax.clip")(take, wildcard(), wildcard())
        for op in _CHANNEL_WISE:
            pattern = pattern | is_op(op)(take, wildcard()) | is_op(op)(wildcard(), take)
        for op in _unary_ops(tvm):
            pattern = pattern | is_op(op)(take)

        moves: list = []  # what this pass moved or folded

        def rewrite(expr, matches, single=single, take=take, moves=moves):
            shuffle = matches[take]
            if not isinstance(expr, relax.Call) or not isinstance(expr.op, tvm.ir.Op):
                return expr
            order = channel_permutation(shuffle)
            if order is None or not any(shuffle.args[0].same_as(data) and np.array_equal(order, taken)
                                        for data, taken in single):
                return expr
            moved = _past(relax, expr, shuffle, order)
            if moved is None:
                return expr
            moves.append(moved)
            return moved

        rewritten = rewrite_call(pattern, rewrite, main)
        if not moves:
            break
        main = relax.analysis.remove_all_unused(rewritten)
    functions = dict(mod.functions_items())
    functions[mod.get_global_var("main")] = main
    return tvm.IRModule(functions, attrs=mod.attrs)


def _unary_ops(tvm) -> list[str]:
    """The layout-following unary ops (:data:`~layoutopt.tvm.ops.UNARY_OPS`) this TVM registers, but
    ``clip`` (three arguments)."""
    found = []
    for op in sorted(UNARY_OPS - {"relax.clip"}):
        try:
            tvm.ir.Op.get(op)
        except Exception:  # named in UNARY_OPS for other TVM versions
            continue
        found.append(op)
    return found


def _read_once_takes(function) -> list[tuple]:
    """``(data, order)`` of each channel take of ``function`` whose variable is read once (a pattern
    match gives the take's call, not its variable: it is known by what it takes)."""
    tvm = import_tvm()
    uses = var_uses(function)
    found = []
    for block in function.body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, tvm.relax.Call) and isinstance(value.op, tvm.ir.Op) and \
                    value.op.name == "relax.take" and uses.get(binding.var, 0) == 1 and \
                    (order := channel_permutation(value)) is not None:
                found.append((value.args[0], order))
    return found


def _past(relax, call, shuffle, order: np.ndarray):
    """``call`` (reading ``shuffle``, a take of channels in ``order``) without the shuffle: the conv it
    folds into, or ``take(call', order)`` with ``call'`` reading the unshuffled data; None where
    neither is exact."""
    data = shuffle.args[0]
    inverse = np.argsort(order)
    op = call.op.name
    if op == "relax.nn.conv2d":
        return _conv_past(relax, call, data, order, inverse)
    if op in _CHANNEL_WISE:  # the shuffle's variable, and a constant, in either order
        constants = [arg for arg in call.args if is_tensor_constant(arg)]
        values = _per_channel(constants[0], len(order)) if len(constants) == 1 else None
        if values is None:
            return None
        constant = constants[0]
        if values.size > 1:
            constant = relax.const(values[inverse].reshape(constant.value.shape), str(constant.value.dtype))
        args = [constant if is_tensor_constant(arg) else data for arg in call.args]
        moved = relax.Call(call.op, args, call.attrs)
    else:  # a unary op
        moved = relax.Call(call.op, [data, *call.args[1:]], call.attrs)
    return relax.op.take(moved, shuffle.args[1], axis=1)


def _conv_past(relax, call, data, order: np.ndarray, inverse: np.ndarray):
    """A conv reading a shuffle: folded into its weight where the permutation keeps its groups,
    moved past it where it is depthwise, else None."""
    attrs = call.attrs
    weight = call.args[1]
    if (attrs.data_layout, attrs.kernel_layout, attrs.out_layout) != (NCHW, "OIHW", NCHW) or \
            not is_tensor_constant(weight):
        return None
    kernel = weight.value.numpy()
    groups, channels = int(attrs.groups), len(order)
    if groups == channels == kernel.shape[0] and kernel.shape[1] == 1:  # depthwise: the take moves down
        moved = relax.Call(call.op, [data, relax.const(np.ascontiguousarray(kernel[inverse]))], call.attrs)
        return relax.op.take(moved, relax.const(order.astype("int64")), axis=1)
    per_group = channels // groups
    if np.any(order // per_group != np.arange(channels) // per_group):
        return None  # the shuffle moves channels between the conv's groups
    local = inverse.reshape(groups, per_group) % per_group  # per group, its channels' new positions
    out_per_group = kernel.shape[0] // groups
    grouped = kernel.reshape(groups, out_per_group, per_group, *kernel.shape[2:])
    folded = np.stack([grouped[g][:, local[g]] for g in range(groups)]).reshape(kernel.shape)
    return relax.Call(call.op, [data, relax.const(np.ascontiguousarray(folded))], call.attrs)


def _per_channel(constant, channels: int) -> np.ndarray | None:
    """The values of a scalar constant (one) or of a per-channel ``(1, C, 1, 1)`` or ``(C, 1, 1)`` one
    (C), else None."""
    if not is_tensor_constant(constant):
        return None
    value = constant.value.numpy()
    if value.size == 1 or static_shape(constant) in ([1, channels, 1, 1], [channels, 1, 1]):
        return value.reshape(-1)
    return None


"""The registry of operator rules: :data:`RULES`, asked in order, and what every phase reads from it.

Adding an op is one rule (a module of this package, or your own code) and one line: add it to
:data:`RULES` below, or call :func:`register`. Extraction (:mod:`layoutopt.tvm.graph.extract`), the
rewrite (:mod:`layoutopt.tvm.building.apply`), the build (:func:`legalizers`) and the profile
(:func:`categories`) then all see it.

Example:
    >>> [rule.name for rule in rules_for("relax.add")]
    ['binary', 'boundary']
    >>> from layoutopt.tvm import models
    >>> calls = {b.var.name: b.value for b in models.chain()["main"].body.blocks[0].bindings}
    >>> layout_carrier(calls["conv1_relu"], "relax.nn.relu").name   # relu runs in its input's layout
    'conv1_bias'
    >>> layout_carrier(calls["conv1_bias"], "relax.add").name       # so does + a per-channel bias
    'conv1'
    >>> layout_carrier(calls["conv1"], "relax.nn.conv2d") is None   # a conv chooses its own
    True
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

from ...errors import ProblemError
from .._tvm import import_tvm
from ..relax_expr import var_uses
from .boundary import BoundaryRule
from .carriers import GatherRule, LayoutTransformRule
from .concat import ConcatRule, SliceRule, SplitRule
from .conv2d import Conv2dRule
from .conv2d_transpose import Conv2dTransposeRule
from .dense import DenseRule
from .elementwise import BinaryRule, EpilogueChains, UnaryRule
from .pooling import PoolRule, SpatialReduceRule
from .resize import OnnxResizeRule, Resize2dRule
from .rule import OpRule
from .softmax import SoftmaxRule

__all__ = ["RULES", "categories", "follower", "fused_epilogues", "kernel_categories", "layout_carrier",
           "legalizers", "op_name", "register", "rules_for", "unregister"]

#: the rules, asked in this order (the first answer wins; the profile's categories match a call's
#: symbol in this order too, so a conv2d_transpose comes before a conv2d); catch-alls last
RULES: list[OpRule] = [
    Conv2dTransposeRule(),
    Conv2dRule(),
    DenseRule(),
    LayoutTransformRule(),
    PoolRule(),
    SpatialReduceRule(),
    ConcatRule(),
    SplitRule(),
    SliceRule(),
    Resize2dRule(),
    OnnxResizeRule(),
    GatherRule(),
    UnaryRule(),
    BinaryRule(),
    SoftmaxRule(),
    BoundaryRule(),
]


def register(rule: OpRule) -> OpRule:
    """Add ``rule`` to :data:`RULES`, before the catch-alls (a rule whose ``ops`` is None goes last);
    returns it. A rule of the same name is replaced.

    Raises:
        ProblemError: ``rule`` is no :class:`~.rule.OpRule`, or legalizes an op it does not match.

    Example:
        >>> class Floor(OpRule):
        ...     name, ops = "floor", frozenset({"relax.floor"})
        >>> rule = register(Floor())
        >>> [r.name for r in rules_for("relax.floor")]
        ['floor', 'boundary']
        >>> unregister(rule)
        >>> [r.name for r in rules_for("relax.floor")]
        ['boundary']
    """
    if not isinstance(rule, OpRule):
        raise ProblemError(f"register({rule!r}): an operator rule must be an OpRule")
    foreign = sorted(set(rule.legalizers) - set(rule.ops or ()))
    if rule.ops is not None and foreign:
        raise ProblemError(f"rule {rule.name!r} legalizes {foreign}, which it does not match "
                           f"({sorted(rule.ops)})")
    RULES[:] = [r for r in RULES if r.name != rule.name]
    at = len(RULES) if rule.ops is None else next(
        (i for i, r in enumerate(RULES) if r.ops is None), len(RULES))
    RULES.insert(at, rule)
    return rule


def unregister(rule: OpRule) -> None:
    """Take ``rule`` out of :data:`RULES` (see :func:`register`)."""
    RULES[:] = [r for r in RULES if r is not rule]


def rules_for(op: str | None) -> list[OpRule]:
    """The rules that may match a call of op ``op`` (:func:`op_name`), in order: those naming it, then
    the catch-alls."""
    return [rule for rule in RULES if rule.ops is None or op in rule.ops]


def op_name(call, functions=None) -> str | None:
    """The op ``call`` computes, as the rules name it: its ``Op``'s name, or the name a rule gives a
    ``call_tir`` of a kernel it knows whose PrimFunc is in ``functions`` (the module: an ONNX resize,
    :data:`~.resize.ONNX_RESIZE`); None for anything else.

    Example:
        >>> from layoutopt.tvm import models
        >>> op_name(models.chain()["main"].body.blocks[0].bindings[0].value)
        'relax.nn.conv2d'
    """
    tvm = import_tvm()
    if not isinstance(call, tvm.relax.Call) or not isinstance(call.op, tvm.ir.Op):
        return None
    if functions is not None:
        for rule in RULES:
            name = rule.call_name(call, functions)
            if name is not None:
                return name
    return call.op.name


def follower(call, op: str | None, is_data: Callable[[Any], bool] | None = None,
             source: Callable[[Any], Hashable] | None = None) -> tuple[OpRule, Any] | None:
    """The rule under which ``call`` follows its input's layout and the operand whose layout it keeps
    (see :func:`layout_carrier`), or None when it is no layout-following op."""
    is_data = is_data or (lambda _var: True)
    for rule in rules_for(op):
        if rule.matches(call, op):
            carrier = rule.carrier(call, op, is_data, source)
            if carrier is not None:
                return rule, carrier
    return None


def layout_carrier(call, op: str | None, is_data: Callable[[Any], bool] | None = None,
                   source: Callable[[Any], Hashable] | None = None):
    """The computed operand whose layout a layout-following op keeps, or None when ``call`` is not one:
    the first rule's :meth:`~.rule.OpRule.carrier` that names one.

    The one classification extraction (:mod:`layoutopt.tvm.graph.extract`) and the rewrite both use, so
    that the graph costs exactly the program the rewrite emits. Layout-following are (see the rules):
    unary elementwise ops of a 4-D tensor (:class:`~.elementwise.UnaryRule`); binary ones with a
    per-channel or scalar constant, or of two computed tensors that come from the same producer
    (``source(var)``: the node whose output layout a value carries; :class:`~.elementwise.BinaryRule`);
    ``NCHW`` pooling and global means (:mod:`~.pooling`); resizes the blocked kernel covers and every
    ONNX resize (:mod:`~.resize`); slices over height and width (:class:`~.concat.SliceRule`); gathers
    of channels by a constant permutation (:class:`~.carriers.GatherRule`).

    ``is_data(var)`` tells computed tensors from other Vars (extraction's unbound weights); default:
    every Var is data.

    Example:
        >>> from layoutopt.tvm import models
        >>> calls = {b.var.name: b.value for b in models.chain()["main"].body.blocks[0].bindings}
        >>> layout_carrier(calls["conv1_relu"], "relax.nn.relu").name   # the Var relu reads
        'conv1_bias'
    """
    found = follower(call, op, is_data, source)
    return None if found is None else found[1]


def legalizers() -> dict[str, Callable[[Any, Any], Any]]:
    """op name -> the legalization the build uses for it instead of TVM's (every rule's
    :attr:`~.rule.OpRule.legalizers`).

    Example:
        >>> sorted(legalizers())[:3]
        ['relax.concat', 'relax.divide', 'relax.erf']
    """
    return {op: legalize for rule in RULES for op, legalize in rule.legalizers.items()}


def categories() -> list[tuple[str, tuple[str, ...]]]:
    """``(category, symbol parts)`` of the rules that give their calls one, in registry order: a
    call's category is the first whose part its symbol holds (a fused function is named after its
    ops, ``fused_conv2d_NCHWc_add_relu``, its anchor op first).

    Example:
        >>> [category for category, _ in categories()][:3]
        ['conv2d_transpose', 'conv2d', 'dense']
    """
    return [(rule.category, rule.symbols) for rule in RULES if rule.category and rule.symbols]


def kernel_categories() -> tuple[str, ...]:
    """The categories of the target nodes' measured kernels (a workload's op is its category).

    Example:
        >>> kernel_categories()
        ('conv2d_transpose', 'conv2d', 'dense')
    """
    return tuple(dict.fromkeys(rule.category for rule in RULES if rule.kernel and rule.category))


def fused_epilogues(function) -> dict[str, list]:
    """The epilogue ``FuseOps`` fuses into each NCHW/OIHW conv2d by a constant weight (each call a rule
    says fuses one: :meth:`~.rule.OpRule.fuses_epilogue`) of a Relax ``function`` (``main`` of a
    prepared module): binding name -> steps (:class:`EpilogueChains`).

    Example:
        >>> from layoutopt.tvm import models
        >>> fused_epilogues(models.chain()["main"])
        {'conv1': ['bias', 'relu'], 'conv2': ['bias', 'relu']}
    """
    tvm = import_tvm()
    relax = tvm.relax
    chains = EpilogueChains(var_uses(function))
    for block in function.body.blocks:
        for binding in block.bindings:
            value = binding.value
            if not isinstance(value, relax.Call):
                continue
            op = value.op.name if isinstance(value.op, tvm.ir.Op) else None
            if any(rule.fuses_epilogue(value, op) for rule in rules_for(op) if rule.matches(value, op)):
                chains.start(binding.var.name, binding.var)
            else:
                chains.binding(binding.var, value, op)
    return chains.epilogues()

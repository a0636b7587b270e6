"""The operator rule: what one Relax op means to every phase, said once.

An :class:`OpRule` is asked about a call in the order of the registry
(:data:`~layoutopt.tvm.ops.registry.RULES`), as MetaSchedule asks its schedule rules: each answers
None (or False) when the call is not its own, and the first answer wins. Extraction asks
:meth:`OpRule.carrier` (does the op follow its input's layout?), then :meth:`OpRule.extract` (a node of
the layout graph: its workload and choices, candidates from the kernel families); the rewrite asks
:meth:`OpRule.rewrite` (a node's chosen candidate) or :meth:`OpRule.follow` (a layout-following op in
its input's layout); the build reads :attr:`OpRule.legalizers`, the profile :attr:`OpRule.category`
and :attr:`OpRule.symbols`.

The phases hand a rule their own state as a context (duck-typed, so that this package needs none of
theirs): extraction its extractor (``shape``, ``is_data``, ``is_weight``, ``blocks``, ``given_blocks``,
``conv_options``, ``candidates``), the rewrite its rewriter (``value``, ``emit``, ``boundary``,
``fused_workload``, ``bb``, ``relax``, ``tvm``, ``functions``).

Example:
    >>> from tvm import relax
    >>> class Floor(OpRule):
    ...     name, ops, category, symbols = "floor", frozenset({"relax.floor"}), "floor", ("floor",)
    ...     def carrier(self, call, op, is_data, source):
    ...         return call.args[0] if is_data(call.args[0]) else None
    >>> x = relax.Var("x", relax.TensorType((1, 8, 4, 4), "float32"))
    >>> call = relax.op.floor(x)
    >>> Floor().matches(call, "relax.floor"), Floor().carrier(call, "relax.floor", lambda v: True, None).name
    (True, 'x')
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

__all__ = ["Node", "OpRule"]


@dataclass
class Node:
    """A node of the layout graph, as a rule extracts it: its ``kind`` (``"target"``, ``"multi"`` or
    ``"boundary"``), ``workload`` (the cost cache's key: plain JSON data), its choices (``candidates``,
    candidate dicts, for a target; ``layouts``, one common layout each, otherwise), the computed tensors
    it reads (``inputs``; None: every computed tensor of the call), whether a fused epilogue chain
    starts at its output (``starts_chain``: a conv's bias and activations), and the op name the graph
    gives it (``op``; None: the call's).

    Example:
        >>> Node("multi", {"op": "concat", "shapes": [[1, 8, 4, 4]] * 2, "dtype": "float32", "axis": 1},
        ...      layouts=["NCHW8c", "NCHW"]).kind
        'multi'
    """

    kind: str
    workload: dict[str, Any]
    candidates: list[dict[str, Any]] | None = None
    layouts: list[str] = field(default_factory=list)
    inputs: list | None = None
    starts_chain: bool = False
    op: str | None = None


class OpRule:
    """The meaning of one Relax op (or a family of them) to extraction, rewrite, build and profile.

    Class attributes: ``name`` (the rule's), ``ops`` (the op names :func:`~.registry.op_name` gives
    the calls it may match; None: any call, a catch-all), ``category`` and ``symbols`` (the profile's
    category of a call whose symbol holds one of ``symbols``; None: no category of its own),
    ``kernel`` (its target nodes' kernels are measured: the profile predicts their time, under the
    workload's op as category), ``legalizers`` (op name -> ``legalizer(bb, call)`` for the build's
    ``LegalizeOps``), ``takes_epilogue`` (the rewrite gives its node the epilogue its workload was
    measured with), ``in_network`` (its multi-input nodes run as kernels of their own, costed once
    timed in the network: :meth:`call_shapes` matches their calls in a profile).

    Every method answers None (or False) by default: a rule overrides the phases it takes part in.

    Example:
        >>> rule = OpRule()
        >>> rule.matches(None, "relax.nn.relu"), rule.extract(None, "relax.nn.relu", "x", [], None)
        (False, None)
    """

    name: ClassVar[str] = "rule"
    ops: ClassVar[frozenset[str] | None] = frozenset()
    category: ClassVar[str | None] = None
    symbols: ClassVar[tuple[str, ...]] = ()
    kernel: ClassVar[bool] = False
    takes_epilogue: ClassVar[bool] = False
    in_network: ClassVar[bool] = False
    legalizers: ClassVar[Mapping[str, Callable[[Any, Any], Any]]] = {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    def matches(self, call, op: str | None) -> bool:
        """Whether ``call`` (its op named ``op``: :func:`~.registry.op_name`) may be this rule's."""
        return self.ops is None or op in self.ops

    def call_name(self, call, functions) -> str | None:
        """The op name of a call that is not a plain ``Op`` call (a ``call_tir`` of a kernel this rule
        knows, whose PrimFunc is in ``functions``), or None."""
        return None

    # -- extraction ------------------------------------------------------------------------------
    def carrier(self, call, op: str | None, is_data: Callable[[Any], bool],
                source: Callable[[Any], Hashable] | None):
        """The computed operand whose layout ``call`` keeps (a layout-following op), or None.
        ``is_data(var)`` tells computed tensors from weights; ``source(var)`` names the node whose
        output layout a value carries (None: unknown)."""
        return None

    def extract(self, call, op: str | None, name: str, inputs: list, ctx) -> Node | None:
        """The layout graph's node for binding ``name = call`` (``inputs``: the computed tensors it
        reads), or None when ``call`` is no node of this rule."""
        return None

    def candidates(self, workload: dict[str, Any], ctx) -> list[dict[str, Any]]:
        """A target node's default candidates for ``workload`` (from its kernel families), with the
        extraction's options ``ctx`` (``blocks``, ``given_blocks``, ``conv_options``)."""
        raise NotImplementedError(f"rule {self.name!r} extracts no target node")

    def target(self, workload: dict[str, Any], ctx, data, starts_chain: bool = False) -> Node:
        """A target node of ``workload`` reading ``data``: its candidates those the extraction's own
        function chooses (``ctx.candidates``), else :meth:`candidates`."""
        chosen = ctx.candidates(workload) if ctx.candidates else self.candidates(workload, ctx)
        return Node("target", workload, chosen, inputs=[data], starts_chain=starts_chain)

    def fuses_epilogue(self, call, op: str | None) -> bool:
        """Whether ``FuseOps`` fuses an elementwise chain into the kernel ``call`` becomes (a conv2d
        by a constant weight): :func:`~.elementwise.fused_epilogues` follows one from it."""
        return False

    def call_shapes(self, workload: dict[str, Any], layout: str) -> list[tuple[int, ...]] | None:
        """The argument shapes (inputs, then output) of the call a node of ``workload`` runs as in
        ``layout``, to find it in a profile (an ``in_network`` rule's); None when unknown."""
        return None

    # -- rewrite ---------------------------------------------------------------------------------
    def rewrite(self, rw, var, call, op: str | None, choice: dict[str, Any]) -> bool:
        """Emit ``var = call`` running the chosen candidate ``choice`` (through the rewriter ``rw``);
        False when this rule does not rewrite it (the rewrite then keeps it, in ``NCHW``)."""
        return False

    def follow(self, rw, var, call, op: str | None, layout: str) -> bool:
        """Emit a layout-following ``var = call`` in its input's ``layout``: by default the same call
        on its operands delivered in that layout (constants repacked)."""
        args = [rw.value(arg, layout) for arg in call.args]
        rw.emit(var, rw.relax.Call(call.op, args, call.attrs, call.ty_args), layout)
        return True

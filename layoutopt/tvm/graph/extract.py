"""Extract the layout graph of a Relax model: which ops choose a layout, and which tensors connect them.

:func:`extract_layout_graph` walks ``main`` (of a module :func:`~layoutopt.tvm.frontend.normalise.prepare`
normalised: batch norm folded or decomposed, constants folded, binding names made unique) and returns
a ``networkx.DiGraph`` following the layout model of :mod:`layoutopt.tvm` (the one
:mod:`layoutopt.tvm.building.apply` rewrites by):

1. **target** ops choose ``(in, out)`` layouts: conv2d (candidates from
   :func:`~layoutopt.tvm.kernels.conv2d_candidates`; grouped ones fixed ``NCHW``, depthwise ones in
   equal blocks too, by the depthwise kernel family), conv2d_transpose (ONNX ConvTranspose: blocked
   per-phase kernels, :mod:`~layoutopt.tvm.kernels.conv2d_transpose`) and dense (``matmul`` by a constant
   2-D weight; its candidates are packed weight layouts).
2. **layout-following** ops are not nodes: unary elementwise ops, binary elementwise ops with a
   per-channel or scalar constant (bias, folded batch norm) or of two tensors from the same producer
   (SiLU's ``x * sigmoid(x)``), max/avg pooling, nearest and bilinear resizes, and means (max, sums)
   over height and width that keep their dimensions (squeeze-excite's global pool). They run in the
   layout their input arrives in.
3. **multi**-input ops (binary elementwise ops of two computed tensors, concat) are nodes whose
   choices are one common layout for all inputs and the output: ``NCHW{b}c`` for blocks ``b``
   dividing every input's channels, and ``NCHW``.
4. **boundary** ops (reshape, softmax, a mean over channels, anything unknown) and the graph's
   **input** and **output** tensors need plain ``NCHW``: nodes with the single choice ``"NCHW"``.
5. An edge ``P -> Q`` joins two nodes when a tensor flows from ``P`` (through layout-following ops)
   into ``Q``; its :class:`~layoutopt.tvm.graph.graph.LayoutEdge` (``graph.layout_edge(P, Q)``) names the
   tensors and their logical NCHW shapes arriving at ``Q``.

Example:
    >>> from layoutopt.tvm import extract_layout_graph, models
    >>> graph = extract_layout_graph(models.residual(channels=16, size=8),
    ...                              candidates={"blocks": [8, 16], "algorithms": ["direct"]})
    >>> list(graph)
    ['data', 'conv0', 'conv1', 'conv2', 'add', 'output:gv']
    >>> graph.nodes["conv1"]["choices"]
    ['NCHW8c->NCHW8c', 'NCHW8c->NCHW16c', 'NCHW16c->NCHW8c', 'NCHW16c->NCHW16c', 'NCHW->NCHW']
    >>> graph.layout_node("add").kind, graph.nodes["add"]["choices"]
    ('multi', ['NCHW8c', 'NCHW16c', 'NCHW'])
    >>> sorted(graph.predecessors("add")), graph.layout_edge("conv1", "conv2")
    (['conv0', 'conv2'], LayoutEdge(dtype='float32', values=[Value(name='conv1_relu', shape=(1, 16, 8, 8))]))
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ...errors import ProblemError
from .._tvm import import_tvm
from ..frontend.normalise import main_function, prepare
from ..kernels import CONV2D_ORDERS, DEFAULT_ALGORITHMS, DEFAULT_BLOCKS, DEFAULT_ORDERS, FAMILIES, NCHW
from ..ops import EpilogueChains, Node, follower, is_tensor_constant, op_name, rules_for, var_uses
from .graph import KINDS, Choice, LayoutGraph, LayoutNode, Value

__all__ = ["KINDS", "CandidateOptions", "Candidates", "extract_layout_graph"]

#: what ``candidates=`` accepts: channel blocks, options ``{"blocks": [...], "orders": [...]}``, a
#: function ``workload -> candidate dicts``, or None (or any of them read once: :class:`CandidateOptions`)
Candidates = Iterable[int] | Mapping[str, Any] | Callable[[dict[str, Any]], list[dict[str, Any]]] | None

# ------------------------------------------------------------------------------------------------
# extraction


def extract_layout_graph(
    mod,
    candidates: Candidates | CandidateOptions = None,
    *,
    prepared: bool = False,
    fuse: bool = True,
) -> LayoutGraph:
    """The layout graph of ``mod["main"]``: problem nodes, their choices, and the tensors between them.

    Args:
        mod: a Relax ``IRModule`` with static shapes, e.g. from ``relax.frontend.onnx.from_onnx``
            or ``relax.frontend.torch.from_exported_program``, weights as constants (bind weights
            kept as parameters with ``prepare(mod, params)``: left unbound, a blocked conv re-lays
            its weight out at run time, a cost the graph does not model).
        candidates: the channel blocks to try (default ``(4, 8, 16, 32, 64)``; ``C`` itself is
            added when ``C < 8``; a block is kept only where it divides the channels); or options
            ``{"blocks": [...], "orders": ["oc", "rows"], "algorithms": ["direct"]}`` to add the
            blocked convs' loop orders (:data:`~layoutopt.tvm.kernels.CONV2D_SCHEDULE_KNOBS`: each
            layout pair becomes one choice per order) or to choose the algorithms whose kernels are
            choices where they apply (default :data:`~layoutopt.tvm.kernels.DEFAULT_ALGORITHMS`: the
            direct kernel, Winograd for 3x3 stride-1 convs, a packed GEMM for 1x1 ones); or a
            function ``workload -> list of
            candidate dicts`` choosing target ops' candidates (multi-input nodes then use the
            default blocks).
        prepared: ``mod`` already went through :func:`prepare` (skip it).
        fuse: the build fuses each conv2d with its elementwise epilogue (``FuseOps``): give each
            conv2d workload that ``epilogue`` (bias, activations, residual add: see
            :mod:`~layoutopt.tvm.kernels.epilogue` and :class:`~layoutopt.tvm.ops.EpilogueChains`),
            so that its kernel is measured as the build runs it. False for unfused builds.

    Returns:
        A :class:`~layoutopt.tvm.graph.graph.LayoutGraph` keyed by binding name (input nodes by parameter
        name, output nodes by ``"output:<name>"``): a :class:`~layoutopt.tvm.graph.graph.LayoutNode` per
        node (kind, binding, op, workload, choices), a :class:`~layoutopt.tvm.graph.graph.LayoutEdge` per
        edge (the tensors flowing along it), ``graph.mod`` (the prepared module the names refer to)
        and ``graph.following``.

    Raises:
        ProblemError: no ``main``, dynamic or unknown shapes, control flow, or no conv2d/dense op.

    Example:
        >>> from layoutopt.tvm import models
        >>> graph = extract_layout_graph(models.chain((16, 16)), [8, 16])
        >>> list(graph)       # bias and relu follow their conv
        ['data', 'conv1', 'conv2', 'output:gv']
        >>> graph.following
        {'conv1_bias': 'conv1', 'conv1_relu': 'conv1', 'conv2_bias': 'conv2', 'gv': 'conv2'}
        >>> graph.layout_node("conv2").workload["epilogue"]       # fused into it (fuse=True)
        ['bias', 'relu']
        >>> len(graph.nodes["conv2"]["choices"])     # direct and Winograd F(2x2), F(4x4) kernels
        21
    """
    options = CandidateOptions.of(candidates)
    if not prepared:
        mod = prepare(mod)
    main = main_function(mod)
    names = [p.name for p in main.params] + [b.var.name for blk in main.body.blocks for b in blk.bindings]
    duplicates = sorted(n for n, count in Counter(names).items() if count > 1)
    if duplicates:
        raise ProblemError(f"binding names {duplicates[:5]} are not unique in main: run prepare(mod) first")
    extractor = _Extractor(options, fuse, mod)
    graph = extractor.run(main)
    graph.mod = mod
    if not any(node.kind == "target" for node in graph.layout_nodes()):
        raise ProblemError(
            "the model has no supported op (conv2d in NCHW/OIHW, or matmul by a constant 2-D weight): "
            "there is no layout to choose (weights passed as inputs? bind them: prepare(mod, params))"
        )
    return graph


@dataclass(frozen=True)
class CandidateOptions:
    """What ``candidates=`` asks for, checked once: the channel ``blocks`` to try (None: the default
    blocks, and dense weights in their default blocks too), the blocked convs' loop ``orders`` and the
    conv ``algorithms`` whose kernels are choices; or ``choose``, a function ``workload -> candidate
    dicts`` choosing target ops' candidates (multi-input nodes then use the default blocks).

    :meth:`of` reads any form ``candidates=`` takes (:data:`Candidates`); a record passes through it
    as it is, so that a value checked once (e.g. when options are given) is not checked again.

    Example:
        >>> options = CandidateOptions.of({"blocks": [16, 8, 16], "algorithms": ["direct"]})
        >>> options.blocks, options.algorithms, CandidateOptions.of(options) is options
        ((8, 16), ('direct',), True)
        >>> CandidateOptions.of([0, 8])
        Traceback (most recent call last):
        ...
        layoutopt.errors.ProblemError: candidates must be a list of channel blocks (positive integers), ...
    """

    blocks: tuple[int, ...] | None = None
    orders: tuple[str, ...] = tuple(DEFAULT_ORDERS)
    algorithms: tuple[str, ...] = tuple(DEFAULT_ALGORITHMS)
    choose: Callable[[dict[str, Any]], list[dict[str, Any]]] | None = None

    def __post_init__(self) -> None:
        known = sorted(algorithm for op, algorithm in FAMILIES if op == "conv2d")
        orders, algorithms = tuple(self.orders), tuple(self.algorithms)
        if not orders or not algorithms or set(orders) - set(CONV2D_ORDERS) or set(algorithms) - set(known):
            raise ProblemError(f"candidate options orders {list(orders)!r}, algorithms {list(algorithms)!r}: "
                               f"expected loop orders from {CONV2D_ORDERS} and algorithms from {known}")
        object.__setattr__(self, "orders", orders)
        object.__setattr__(self, "algorithms", algorithms)
        if self.blocks is not None:
            object.__setattr__(self, "blocks", _blocks(self.blocks))
        if self.choose is not None and not callable(self.choose):
            raise ProblemError(f"candidate options choose {self.choose!r}: expected a function "
                               "workload -> candidates")

    @classmethod
    def of(cls, candidates: Candidates | CandidateOptions) -> CandidateOptions:
        """``candidates`` (channel blocks, options ``{"blocks", "orders", "algorithms"}``, a function
        ``workload -> candidate dicts``, or None) as a record.

        Raises:
            ProblemError: a value of none of these forms, naming it.
        """
        if isinstance(candidates, CandidateOptions):
            return candidates
        if candidates is None:
            return cls()
        if callable(candidates):
            return cls(choose=candidates)
        if not isinstance(candidates, Mapping):
            return cls(blocks=candidates)
        unknown = sorted(set(candidates) - {"blocks", "orders", "algorithms"})
        if unknown:
            raise ProblemError(f"candidate options {dict(candidates)!r}: unknown {unknown}; expected "
                               "'blocks' (channel blocks), 'orders' (conv loop orders) and 'algorithms' "
                               "(conv algorithms)")
        return cls(candidates.get("blocks"), tuple(candidates.get("orders") or DEFAULT_ORDERS),
                   tuple(candidates.get("algorithms") or DEFAULT_ALGORITHMS))


def _blocks(candidates: Any) -> tuple[int, ...]:
    """Channel blocks, sorted and once each, checked."""
    try:
        values = list(candidates)
    except TypeError:
        values = None
    if not values or any(isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in values):
        raise ProblemError(
            f"candidates must be a list of channel blocks (positive integers), a function "
            f"workload -> candidates, or None; got {candidates!r}"
        )
    return tuple(sorted(set(values)))


class _Extractor:
    """One walk over ``main``'s bindings, in order (they are topologically sorted by construction).

    Each call is classified by the operator rules (:mod:`layoutopt.tvm.ops`), in registry order: the
    first rule naming a layout carrier makes it layout-following, else the first rule extracting a
    node makes it one (the catch-all a boundary). The extractor is the rules' context: ``shape``,
    ``is_data``, ``is_weight``, ``blocks``, ``given_blocks``, ``conv_options`` and ``candidates``."""

    def __init__(self, options: CandidateOptions, fuse: bool = True, functions=None):
        self.tvm = import_tvm()
        self.functions = functions  # the module: which call_tir is an ONNX resize (ops.op_name)
        self.conv_options = {"orders": list(options.orders), "algorithms": list(options.algorithms)}
        self.relax = self.tvm.relax
        # the blocks the user chose also restrict dense weight blocks
        self.given_blocks = list(options.blocks) if options.blocks is not None else None
        self.blocks = self.given_blocks or list(DEFAULT_BLOCKS)
        self.candidates = options.choose
        self.graph = LayoutGraph()
        self.source: dict[Any, str] = {}  # data Var -> problem node whose output layout it carries
        self.tuples: dict[Any, list] = {}  # Var bound to a Tuple -> its fields
        self.params: dict[Any, None] = {}  # function parameters not yet made input nodes
        self.weights: set = set()  # parameters after the model's inputs (num_input): unbound weights
        self.following: dict[str, str] = {}
        self.fuse = fuse
        self.epilogues = EpilogueChains({})  # each conv's fused chain, from run() on

    # -- helpers --------------------------------------------------------------------------------
    def shape(self, expr, where: str) -> list[int] | None:
        """Static shape of a tensor expression; None for non-tensors; ProblemError when dynamic."""
        ty = expr.ty
        if isinstance(ty, self.relax.TupleType):
            for field in ty.fields:
                self._static(field, where)
            return None
        if not isinstance(ty, self.relax.TensorType):
            return None
        return self._static(ty, where)

    def _static(self, ty, where: str) -> list[int] | None:
        if not isinstance(ty, self.relax.TensorType):
            return None
        try:
            if ty.shape is None:
                raise TypeError
            return [int(s) for s in ty.shape]
        except (TypeError, ValueError, AttributeError):
            raise ProblemError(
                f"{where} has a dynamic or unknown shape ({ty}); layout selection needs static shapes: "
                "give the frontend fixed input shapes (e.g. from_onnx(model, shape_dict=...)) or bind "
                "symbolic dims with relax.transform.BindSymbolicVars"
            ) from None

    def is_data(self, expr) -> bool:
        return isinstance(expr, self.relax.Var) and (expr in self.source or expr in self.tuples
                                                     or expr in self.params)

    def is_weight(self, expr) -> bool:
        """A constant, or a weight parameter of ``main`` (the rewrite re-lays it out in the program)."""
        return is_tensor_constant(expr) or expr in self.weights

    def data_vars(self, expr) -> list:
        """The computed tensors an argument carries (through inline and bound tuples)."""
        if isinstance(expr, self.relax.Tuple):
            return [v for field in expr.fields for v in self.data_vars(field)]
        if isinstance(expr, self.relax.Var) and expr in self.tuples:
            return [v for field in self.tuples[expr] for v in self.data_vars(field)]
        return [expr] if self.is_data(expr) else []

    def source_of(self, var) -> str:
        if var in self.params:  # first use of a function parameter: it becomes an input node
            del self.params[var]
            shape = self.shape(var, f"input {var.name!r}")
            self.add_node(var.name, "input", var.name, "input", {"op": "input", "shape": shape,
                          "dtype": str(var.ty.dtype)}, [Choice.layout()])
            self.source[var] = var.name
        return self.source[var]

    def add_node(self, key: str, kind: str, binding: str, op: str, workload: dict,
                 choices: Sequence[Choice]) -> None:
        self.graph.add_layout_node(LayoutNode(key, kind, binding, op, workload, tuple(choices)))

    def connect(self, key: str, inputs: Iterable) -> None:
        """Edges from the sources of ``inputs`` (data Vars) into node ``key``, one per distinct value."""
        seen = set()
        for var in inputs:
            if var in seen:
                continue
            seen.add(var)
            producer = self.source_of(var)
            shape = self.shape(var, f"value {var.name!r}")
            value = Value(var.name, None if shape is None else tuple(shape))
            self.graph.add_value(producer, key, value, str(var.ty.dtype))

    # -- the walk -------------------------------------------------------------------------------
    def run(self, main) -> LayoutGraph:
        relax = self.relax
        # the first ``num_input`` parameters (all without the attribute) are the model's inputs;
        # later ones are weights, which become input nodes only if used as activations
        num_input = main.attrs.get("num_input") if main.attrs else None
        for index, param in enumerate(main.params):
            self.shape(param, f"input {param.name!r}")
            if isinstance(param.ty, relax.TensorType):
                self.params[param] = None
                if num_input is None or index < int(num_input):
                    self.source_of(param)
                else:
                    self.weights.add(param)
        body = main.body
        if not isinstance(body, relax.SeqExpr):
            raise ProblemError("'main' is not in normal form (its body is not a sequence of bindings)")
        self.epilogues = EpilogueChains(var_uses(main), self.is_data)
        for block in body.blocks:
            for binding in block.bindings:
                self.binding(binding.var, binding.value)
        outputs = self.data_vars(body.body)
        if not outputs and not self.is_data(body.body):
            raise ProblemError("'main' returns no computed tensor")
        for var in dict.fromkeys(outputs):
            key = f"output:{var.name}"
            self.add_node(key, "output", var.name, "output",
                          {"op": "output", "shape": self.shape(var, f"output {var.name!r}"),
                           "dtype": str(var.ty.dtype)}, [Choice.layout()])
            self.connect(key, [var])
        self.graph.following.update(self.following)
        if self.fuse:
            for conv, epilogue in self.epilogues.epilogues().items():
                if epilogue:
                    self.graph.layout_node(conv).workload["epilogue"] = epilogue
        return self.graph

    def binding(self, var, value) -> None:
        relax = self.relax
        name = var.name
        self.shape(var, f"binding {name!r}")
        if isinstance(value, relax.If):
            raise ProblemError(f"binding {name!r}: control flow (R.If) in main is not supported")
        if isinstance(value, relax.Var):  # an alias (also what a match_cast binding holds)
            if value in self.tuples:
                self.tuples[var] = self.tuples[value]
            elif self.is_data(value):
                self.source[var] = self.source_of(value)
            return
        if isinstance(value, relax.Tuple):
            if self.data_vars(value):
                self.tuples[var] = list(value.fields)
            return
        if isinstance(value, relax.TupleGetItem):
            tup = value.tuple_value
            if isinstance(tup, relax.Var) and tup in self.tuples:
                return self.binding(var, self.tuples[tup][value.index])
            if self.is_data(tup):  # an item of a boundary op's tuple output: plain NCHW, same producer
                self.source[var] = self.source_of(tup)
            return
        if not isinstance(value, relax.Call):
            return  # constants, shapes, prim values: no data
        inputs = self.data_vars_of_call(value)
        if not inputs:
            return  # computed from constants only (FoldConstant leaves few of these)
        op = op_name(value, self.functions)
        self.epilogues.binding(var, value, op)
        following = follower(value, op, self.is_follower_input, self.source_of)
        if following is not None:  # layout-following: same classification as the rewrite's
            producer = self.source_of(following[1])  # the one computed operand
            self.source[var] = producer
            self.following[name] = producer
            return
        node = next(found for rule in rules_for(op) if rule.matches(value, op)
                    if (found := rule.extract(value, op, name, inputs, self)) is not None)
        self.add(name, var, op, node, inputs)
        self.source[var] = name  # items of a node's tuple output come from the node too

    def add(self, name: str, var, op: str | None, node: Node, inputs: list) -> None:
        """The node a rule extracted for binding ``name``: its choices, its edges in, its epilogue chain."""
        if node.kind == "target":
            choices = self.checked(name, node.candidates)
        else:
            choices = [Choice.layout(layout) for layout in node.layouts or [NCHW]]
        self.add_node(name, node.kind, name, node.op or op, node.workload, choices)
        self.connect(name, inputs if node.inputs is None else node.inputs)
        if node.starts_chain:
            self.epilogues.start(name, var)

    def data_vars_of_call(self, call) -> list:
        return [v for arg in call.args for v in self.data_vars(arg)]

    def checked(self, name: str, cands: Any) -> list[Choice]:
        valid = isinstance(cands, list) and cands and all(isinstance(c, dict) and {"in", "out"} <= set(c)
                                                           for c in cands)
        if not valid:
            raise ProblemError(
                f"node {name!r}: candidates must be a non-empty list of dicts with 'in' and 'out', "
                f"got {cands!r}"
            )
        return [Choice(dict(c)) for c in cands]

    def is_follower_input(self, var) -> bool:
        """A computed tensor a layout-following op can carry the layout of (not a bound tuple)."""
        return self.is_data(var) and var not in self.tuples

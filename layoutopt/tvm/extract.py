"""Extract the layout graph of a Relax model: which ops choose a layout, and which tensors connect them.

:func:`prepare` normalises a module as the frontends produce it (batch norm folded or decomposed,
constants folded, binding names made unique); :func:`extract_layout_graph` walks ``main`` and returns
a ``networkx.DiGraph`` following the layout model of :mod:`layoutopt.tvm` (the one
:mod:`layoutopt.tvm.apply` rewrites by):

1. **target** ops choose ``(in, out)`` layouts: conv2d (candidates from
   :func:`~layoutopt.tvm.kernels.conv2d_candidates`; grouped and depthwise ones fixed ``NCHW``, as
   the rewrite blocks ``groups=1`` only) and dense (``matmul`` by a constant 2-D weight; its
   candidates are packed weight layouts).
2. **layout-following** ops are not nodes: unary elementwise ops, binary elementwise ops with a
   per-channel or scalar constant (bias, folded batch norm), max/avg pooling. They run in the layout
   their input arrives in.
3. **multi**-input ops (binary elementwise ops of two computed tensors, concat) are nodes whose
   choices are one common layout for all inputs and the output: ``NCHW{b}c`` for blocks ``b``
   dividing every input's channels, and ``NCHW``.
4. **boundary** ops (reshape, softmax, mean, anything unknown) and the graph's **input** and
   **output** tensors need plain ``NCHW``: nodes with the single choice ``"NCHW"``.
5. An edge ``P -> Q`` joins two nodes when a tensor flows from ``P`` (through layout-following ops)
   into ``Q``; its ``"shape"`` is the logical NCHW shape arriving at ``Q``.

Example::

    from layoutopt.tvm import extract_layout_graph, models
    graph = extract_layout_graph(models.residual(channels=16, size=8), candidates=[8, 16])
    graph.nodes["conv1"]["choices"]     # ['NCHW8c->NCHW8c', 'NCHW8c->NCHW16c', ..., 'NCHW->NCHW']
    graph.layout_node("add").kind, graph.nodes["add"]["choices"]   # 'multi', ['NCHW8c', 'NCHW16c', 'NCHW']
    sorted(graph.predecessors("add"))   # ['conv0', 'conv2']
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import ProblemError
from ._tvm import first_line, import_tvm
from .graph import KINDS, Choice, LayoutGraph, LayoutNode, Value
from .kernels import (
    CONV2D_ORDERS,
    DEFAULT_ALGORITHMS,
    DEFAULT_BLOCKS,
    DEFAULT_ORDERS,
    FAMILIES,
    NCHW,
    channel_blocks,
    conv2d_candidates,
    dense_candidates,
)
from .ops import (
    BINARY_OPS,
    CONCAT_OPS,
    conv2d_workload,
    dense_workload,
    is_tensor_constant,
    layout_carrier,
    static_shape,
)

__all__ = ["KINDS", "Candidates", "clip_bounds_as_ops", "extract_layout_graph", "fold_elementwise_constants",
           "prepare"]

#: what ``candidates=`` accepts: channel blocks, options ``{"blocks": [...], "orders": [...]}``, a
#: function ``workload -> candidate dicts``, or None
Candidates = Iterable[int] | Mapping[str, Any] | Callable[[dict[str, Any]], list[dict[str, Any]]] | None

#: op names of workloads in ``"workload"`` of multi-input nodes (short, like the kernel workloads)
_SHORT_NAMES = {"relax.concat": "concat"}


# ------------------------------------------------------------------------------------------------
# prepare


def prepare(mod, params: Mapping[str, Any] | Sequence[Any] | None = None):
    """Normalise a Relax module for extraction and rewriting; returns a new ``IRModule``.

    Runs, on the module (``main`` must exist):

    * ``BindParams("main", ...)`` when ``params`` is given, so that weights kept as function
      parameters become constants: a mapping ``{parameter name: array}``, a list of arrays for the
      parameters after the model inputs (``num_input``), or what ``relax.frontend.detach_params``
      returns (``{"main": [arrays]}``), e.g. after ``from_onnx(..., keep_params_in_input=True)``;
    * ``FoldBatchnormToConv2D`` (batch norm right after a conv2d goes into its weights),
      ``DecomposeOpsForInference`` (other batch norms become per-channel constant arithmetic,
      which follows layouts), ``CanonicalizeBindings``, :func:`fold_elementwise_constants` (their
      constant arithmetic in numpy), ``FoldConstant`` and ``DeadCodeElimination``;
    * :func:`clip_bounds_as_ops` (the ONNX frontend's ``Clip`` as Relax ``maximum``/``minimum``);
    * renaming of duplicate binding names in ``main`` (``lv7``, ``lv7`` -> ``lv7``, ``lv7_1``, as
      TVMScript prints them): layout graph nodes are keyed by binding name, so names must be unique.

    The rewrite (:mod:`layoutopt.tvm.apply`) must run on the module this returns, so that node
    names match bindings. It is deterministic: preparing twice gives the same names.

    Example::

        import onnx, tvm
        mod = prepare(tvm.relax.frontend.onnx.from_onnx(onnx.load("resnet50.onnx")))
    """
    tvm = import_tvm()
    relax = tvm.relax
    _main(mod)
    if params:
        try:
            mod = relax.transform.BindParams("main", _params_by_name(mod["main"], params))(mod)
        except ProblemError:
            raise
        except Exception as exc:  # TVM's message is a long C++ trace
            raise ProblemError(f"cannot bind params to main: {first_line(exc)}") from None
    fold = tvm.transform.Sequential([relax.transform.FoldConstant(), relax.transform.DeadCodeElimination()])
    try:
        mod = clip_bounds_as_ops(fold(fold_elementwise_constants(_decompose_batch_norms(mod))))
    except Exception as exc:
        raise ProblemError(f"normalising the module failed: {first_line(exc)}") from None
    return _unique_names(mod)


def _decompose_batch_norms(mod):
    """:func:`prepare`'s first passes: batch norms into conv weights or per-channel arithmetic."""
    tvm = import_tvm()
    relax = tvm.relax
    return tvm.transform.Sequential([
        relax.transform.FoldBatchnormToConv2D(),
        relax.transform.DecomposeOpsForInference(),
        relax.transform.CanonicalizeBindings(),
    ])(mod)


#: Relax ops on constants that :func:`fold_elementwise_constants` computes with numpy
_NUMPY_FOLDS: dict[str, Callable[..., np.ndarray]] = {
    "relax.add": np.add, "relax.subtract": np.subtract, "relax.multiply": np.multiply,
    "relax.divide": np.divide, "relax.sqrt": np.sqrt,
}
#: ... and those that only give their first argument's data another shape (the call's)
_NUMPY_RESHAPES = ("relax.reshape", "relax.expand_dims", "relax.squeeze")


def fold_elementwise_constants(mod):
    """``mod`` with the elementwise arithmetic and reshapes of constants in ``main`` computed in
    numpy and bound as constants; part of :func:`prepare`, before TVM's ``FoldConstant``.

    ``FoldBatchnormToConv2D`` and ``DecomposeOpsForInference`` leave up to eight per batch norm (the
    scale ``gamma / sqrt(var + eps)`` into the weights, the shift into a bias), and ``FoldConstant``
    compiles and runs each one as a kernel of its own: 39.8 s for the 53 batch norms of a ResNet-50
    written in ONNX (``benchmarks/onnx_written.py``, width 4), where numpy takes milliseconds. Ops it
    does not know, non-float results (integer division and overflow follow TVM's rules, not numpy's)
    and results without the call's static shape are left to ``FoldConstant``.

    Example::

        mod = fold_elementwise_constants(relax.transform.FoldBatchnormToConv2D()(mod))
    """
    tvm = import_tvm()
    relax = tvm.relax
    reshapes = [tvm.ir.Op.get(name) for name in _NUMPY_RESHAPES]
    folds = {tvm.ir.Op.get(name): function for name, function in _NUMPY_FOLDS.items()}

    @relax.expr_functor.mutator
    class _Folder(relax.expr_functor.PyExprMutator):
        def value(self, arg) -> np.ndarray | float | None:
            if isinstance(arg, relax.Var):
                arg = self.lookup_binding(arg)
            if arg is None or not isinstance(arg, tvm.ir.expr.Constant):
                return None
            if is_tensor_constant(arg):
                return arg.value.numpy()
            # a scalar argument (batch norm's epsilon) is a FloatImm or IntImm holding a Python number
            return arg.value if isinstance(arg.value, int | float) else None

        def visit_call_(self, call):
            call = super().visit_call_(call)
            shape = static_shape(call)
            reshape = call.op in reshapes
            if shape is None or not (reshape or call.op in folds):
                return call
            dtype = str(call.ty.dtype)
            if not dtype.startswith("float"):
                return call
            values = [self.value(arg) for arg in call.args[:1 if reshape else None]]
            if any(v is None for v in values) or not isinstance(values[0], np.ndarray):
                return call
            with np.errstate(all="ignore"):  # inf and NaN come out as TVM's kernels would give them
                result = np.reshape(values[0], shape) if reshape else folds[call.op](*values)
            result = np.asarray(result).astype(dtype, copy=False)
            if list(result.shape) != shape:
                return call
            return relax.const(result, dtype)

    return _with_main(mod, _Folder(mod).visit_expr(mod["main"]))


def clip_bounds_as_ops(mod):
    """``mod`` with each clip bound the ONNX frontend imported as a TOPI ``call_tir`` (``maximum``
    or ``minimum`` of a tensor and a scalar constant, once constants are folded) written as the
    Relax op itself; part of :func:`prepare`.

    TVM's ONNX frontend imports ``Clip`` (ReLU6, hard-swish) with ``emit_te(topi.maximum, ...)``:
    opaque calls that the layout model must treat as plain-NCHW boundaries, a pair of layout
    transforms around every one. ``relax.maximum``/``relax.minimum`` by a scalar follow their input's
    layout instead (and legalize to the same TOPI computation).

    Example::

        mod = clip_bounds_as_ops(prepare(from_onnx(onnx.load("mobilenet.onnx"))))
    """
    tvm = import_tvm()
    relax = tvm.relax
    call_tir = tvm.ir.Op.get("relax.call_tir")
    ops = {"maximum": relax.op.maximum, "minimum": relax.op.minimum}

    @relax.expr_functor.mutator
    class _ClipBounds(relax.expr_functor.PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            if call.op != call_tir or not isinstance(call.args[0], tvm.ir.GlobalVar):
                return call
            op = ops.get(call.args[0].name_hint.rstrip("0123456789_"))
            args = call.args[1]
            if op is None or not isinstance(args, relax.Tuple) or len(args.fields) != 2:
                return call
            tensor, bound = args.fields
            scalar = is_tensor_constant(bound) and int(np.prod(bound.value.shape, dtype=np.int64)) == 1
            shape = static_shape(tensor) if isinstance(tensor, relax.Var) else None
            if not scalar or shape is None or shape != static_shape(call) or \
                    str(tensor.ty.dtype) != str(call.ty.dtype):
                return call
            return op(tensor, bound)

    return relax.transform.DeadCodeElimination()(_with_main(mod, _ClipBounds(mod).visit_expr(mod["main"])))


def _params_by_name(main, params) -> dict[str, Any]:
    """``params`` (see :func:`prepare`) as ``{parameter name: array}``."""
    if isinstance(params, Mapping) and set(params) == {"main"} and not isinstance(params["main"], Mapping):
        params = params["main"]  # relax.frontend.detach_params(mod)[1]
    if isinstance(params, Mapping):
        return {str(name): value for name, value in params.items()}
    values = list(params)
    if not main.attrs or "num_input" not in main.attrs:
        raise ProblemError(
            "params: main has no 'num_input' attribute telling inputs from weights; "
            "give a mapping {parameter name: array} instead"
        )
    weights = list(main.params)[int(main.attrs["num_input"]):]
    if len(values) != len(weights):
        raise ProblemError(
            f"params: {len(values)} arrays given for main's {len(weights)} weight parameters "
            f"({', '.join(p.name for p in weights[:5])}...); give a mapping {{name: array}} instead"
        )
    return {param.name: value for param, value in zip(weights, values, strict=True)}


def _main(mod):
    """``mod["main"]`` as a Relax function, or a ProblemError saying what is there instead."""
    tvm = import_tvm()
    if not isinstance(mod, tvm.IRModule):
        raise ProblemError(
            f"expected a tvm IRModule (e.g. from relax.frontend.onnx.from_onnx), not {type(mod).__name__}"
        )
    names = sorted(gv.name_hint for gv in mod.get_global_vars())
    if "main" not in names:
        raise ProblemError(f"the module has no 'main' function (it has: {', '.join(names) or 'nothing'})")
    main = mod["main"]
    if not isinstance(main, tvm.relax.Function):
        raise ProblemError(f"'main' is a {type(main).__name__}, not a Relax function")
    return main


def _unique_names(mod):
    """Give every Var defined in ``main`` a distinct name (the first keeps its own)."""
    tvm = import_tvm()
    relax = tvm.relax
    main = mod["main"]
    names = [p.name for p in main.params] + [b.var.name for blk in main.body.blocks for b in blk.bindings]
    if len(set(names)) == len(names):
        return mod

    @relax.expr_functor.mutator
    class _Renamer(relax.expr_functor.PyExprMutator):
        def __init__(self, module):
            super().__init__(module)
            self.taken: set[str] = set()

        def _fresh(self, var, cls):
            name = var.name
            if name in self.taken:
                suffix = 1
                while f"{name}_{suffix}" in self.taken:
                    suffix += 1
                new = cls(f"{name}_{suffix}", var.ty)
                self.set_var_remap(var, new)
                var = new
            self.taken.add(var.name)
            return var

        def visit_var_def_(self, var):
            return self._fresh(var, relax.Var)

        def visit_dataflow_var_def_(self, var):
            return self._fresh(var, relax.DataflowVar)

    return _with_main(mod, _Renamer(mod).visit_expr(main))


def _with_main(mod, main):
    """``mod`` with ``main`` in place of its own (a mutator's output), the other functions kept."""
    tvm = import_tvm()
    functions = dict(mod.functions_items())
    functions[mod.get_global_var("main")] = main
    return tvm.IRModule(functions, attrs=mod.attrs)


# ------------------------------------------------------------------------------------------------
# extraction


def extract_layout_graph(
    mod,
    candidates: Candidates = None,
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
            conv2d workload that ``epilogue`` (bias, residual add, relu: see
            :data:`~layoutopt.tvm.kernels.EPILOGUE_STEPS`), so that its kernel is measured as the
            build runs it. False for unfused builds.

    Returns:
        A :class:`~layoutopt.tvm.graph.LayoutGraph` keyed by binding name (input nodes by parameter
        name, output nodes by ``"output:<name>"``): a :class:`~layoutopt.tvm.graph.LayoutNode` per
        node (kind, binding, op, workload, choices), a :class:`~layoutopt.tvm.graph.LayoutEdge` per
        edge (the tensors flowing along it), ``graph.mod`` (the prepared module the names refer to)
        and ``graph.following``.

    Raises:
        ProblemError: no ``main``, dynamic or unknown shapes, control flow, or no conv2d/dense op.

    Example::

        graph = extract_layout_graph(models.chain((16, 16)), [8, 16])
        list(graph)     # ['data', 'conv1', 'conv2', 'output:gv'] (bias and relu follow their conv)
    """
    blocks, choose, conv_options = _candidate_options(candidates)
    if not prepared:
        mod = prepare(mod)
    main = _main(mod)
    names = [p.name for p in main.params] + [b.var.name for blk in main.body.blocks for b in blk.bindings]
    duplicates = sorted(n for n, count in Counter(names).items() if count > 1)
    if duplicates:
        raise ProblemError(f"binding names {duplicates[:5]} are not unique in main: run prepare(mod) first")
    extractor = _Extractor(blocks, choose, fuse, conv_options)
    graph = extractor.run(main)
    graph.mod = mod
    if not any(node.kind == "target" for node in graph.layout_nodes()):
        raise ProblemError(
            "the model has no supported op (conv2d in NCHW/OIHW, or matmul by a constant 2-D weight): "
            "there is no layout to choose (weights passed as inputs? bind them: prepare(mod, params))"
        )
    return graph


def _candidate_options(candidates: Candidates) -> tuple[list[int] | None, Callable | None, dict[str, Any]]:
    """``candidates`` as (blocks given by the user or None, custom candidate function or None, the
    conv2d options: loop orders of blocked convs, algorithms)."""
    defaults = {"orders": list(DEFAULT_ORDERS), "algorithms": list(DEFAULT_ALGORITHMS)}
    if candidates is None:
        return None, None, defaults
    if callable(candidates):
        return None, candidates, defaults
    if isinstance(candidates, Mapping):
        unknown = sorted(set(candidates) - {"blocks", "orders", "algorithms"})
        orders = list(candidates.get("orders") or DEFAULT_ORDERS)
        algorithms = list(candidates.get("algorithms") or DEFAULT_ALGORITHMS)
        known = sorted(algorithm for op, algorithm in FAMILIES if op == "conv2d")
        if unknown or any(order not in CONV2D_ORDERS for order in orders) or set(algorithms) - set(known):
            raise ProblemError(
                f"candidate options {dict(candidates)!r}: expected 'blocks' (channel blocks), 'orders' "
                f"(from {CONV2D_ORDERS}) and 'algorithms' (from {known})"
            )
        blocks = candidates.get("blocks")
        return (None if blocks is None else _candidate_options(blocks)[0]), None, {"orders": orders,
                                                                                  "algorithms": algorithms}
    try:
        values = list(candidates)
    except TypeError:
        values = None
    if not values or any(isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in values):
        raise ProblemError(
            f"candidates must be a list of channel blocks (positive integers), a function "
            f"workload -> candidates, or None; got {candidates!r}"
        )
    return sorted(set(values)), None, defaults


class _Extractor:
    """One walk over ``main``'s bindings, in order (they are topologically sorted by construction)."""

    def __init__(self, blocks: list[int] | None, candidates: Callable | None, fuse: bool = True,
                 conv_options: Mapping[str, Any] | None = None):
        self.tvm = import_tvm()
        self.conv_options = dict(conv_options or {})
        self.relax = self.tvm.relax
        self.given_blocks = blocks  # also restricts dense weight blocks when the user chose them
        self.blocks = blocks or list(DEFAULT_BLOCKS)
        self.candidates = candidates
        self.graph = LayoutGraph()
        self.source: dict[Any, str] = {}  # data Var -> problem node whose output layout it carries
        self.tuples: dict[Any, list] = {}  # Var bound to a Tuple -> its fields
        self.params: dict[Any, None] = {}  # function parameters not yet made input nodes
        self.weights: set = set()  # parameters after the model's inputs (num_input): unbound weights
        self.following: dict[str, str] = {}
        self.fuse = fuse
        self.uses: Counter = Counter()  # Var -> how many times main reads it
        self.chains: dict[Any, tuple[str, list[str]]] = {}  # Var -> (conv node, epilogue computing it)

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
        relax.analysis.post_order_visit(
            body, lambda e: self.uses.update([e]) if isinstance(e, relax.Var) else None
        )
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
            for conv, epilogue in self.chains.values():
                workload = self.graph.layout_node(conv).workload
                if len(epilogue) > len(workload.get("epilogue", [])):
                    workload["epilogue"] = epilogue
        return self.graph

    def extend_epilogue(self, var, operands: list, step: str) -> None:
        """``var`` = ``step`` applied to one of ``operands``: if that operand is a conv's (epilogue's)
        output read only here, ``FuseOps`` fuses ``step`` into the conv's kernel too. A residual add
        joins its first operand's conv, as ``FuseOps`` does (one conv per fused kernel)."""
        for operand in operands:
            if operand in self.chains and self.uses[operand] == 1:
                conv, epilogue = self.chains[operand]
                self.chains[var] = (conv, [*epilogue, step])
                return

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
        op = value.op.name if isinstance(value.op, self.tvm.ir.Op) else None
        carrier = layout_carrier(value, op, self.is_follower_input)
        if carrier is not None:  # layout-following: same classification as the rewrite's
            producer = self.source_of(carrier)  # the one computed operand
            self.source[var] = producer
            self.following[name] = producer
            step = {"relax.nn.relu": "relu", "relax.add": "bias"}.get(op)
            if step is not None:
                self.extend_epilogue(var, [carrier], step)
            return
        if op == "relax.nn.conv2d" and self.conv2d(name, value):
            self.chains[var] = (name, [])
        elif op == "relax.matmul" and self.dense(name, value):
            pass
        elif (op in BINARY_OPS or op in CONCAT_OPS) and self.multi(name, value, op, inputs):
            if op == "relax.add":
                self.extend_epilogue(var, list(value.args), "add")
        else:
            self.boundary(name, value, op, inputs)
        self.source[var] = name  # items of a node's tuple output come from the node too

    def data_vars_of_call(self, call) -> list:
        return [v for arg in call.args for v in self.data_vars(arg)]

    # -- node classes ---------------------------------------------------------------------------
    def conv2d(self, name: str, call) -> bool:
        attrs = call.attrs
        data, weight = call.args[0], call.args[1]
        if (attrs.data_layout, attrs.kernel_layout, attrs.out_layout) != ("NCHW", "OIHW", "NCHW"):
            return False
        if not self.is_data(data) or not self.is_weight(weight):
            return False  # a weight computed at run time is not a kernel we can pack
        self.shape(data, f"input of conv2d {name!r}")  # a clear error for dynamic shapes
        self.shape(weight, f"weight of conv2d {name!r}")
        workload = conv2d_workload(call)
        if self.candidates:
            cands = self.candidates(workload)
        else:
            cands = conv2d_candidates(workload, blocks=self.blocks, **self.conv_options)
        self.add_node(name, "target", name, "relax.nn.conv2d", workload, self.checked(name, cands))
        self.connect(name, [data])
        return True

    def dense(self, name: str, call) -> bool:
        data, weight = call.args[0], call.args[1]
        if not self.is_data(data) or not self.is_weight(weight):
            return False
        data_shape = self.shape(data, f"input of matmul {name!r}")
        weight_shape = self.shape(weight, f"weight of matmul {name!r}")
        if len(data_shape) != 2 or len(weight_shape) != 2:
            return False
        workload = dense_workload(call)
        if self.candidates:
            cands = self.candidates(workload)
        elif self.given_blocks:
            cands = dense_candidates(workload, blocks=self.given_blocks)
        else:
            cands = dense_candidates(workload)
        self.add_node(name, "target", name, "relax.matmul", workload, self.checked(name, cands))
        self.connect(name, [data])
        return True

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

    def multi(self, name: str, call, op: str, inputs: list) -> bool:
        """A multi-input op: its choices are one common layout of all inputs and the output."""
        relax = self.relax
        if op in CONCAT_OPS:
            operands = inputs
        elif all(isinstance(a, relax.Var) for a in call.args):
            operands = list(call.args)
        else:
            return False  # a tensor and a constant that is not per-channel: a boundary
        out_shape = self.shape(call, f"binding {name!r}")
        shapes = [self.shape(v, f"input {v.name!r} of {name!r}") for v in operands]
        workload: dict[str, Any] = {"op": _SHORT_NAMES.get(op, op.rsplit(".", 1)[-1]), "shapes": shapes,
                                    "dtype": str(call.ty.dtype)}
        blocked = out_shape is not None and len(out_shape) == 4 and all(s is not None and len(s) == 4
                                                                         for s in shapes)
        if op in CONCAT_OPS:
            axis = int(call.attrs.axis)
            workload["axis"] = axis
            # a blocked concat keeps the axis index (1, 2 or 3) of the 5-D tensors, and its inputs are
            # converted field by field, so it needs an inline tuple and a non-negative axis
            blocked = blocked and isinstance(call.args[0], relax.Tuple) and axis in (1, 2, 3)
        else:
            # broadcasting over channels (an input with C = 1) cannot be blocked
            blocked = blocked and all(s[1] == out_shape[1] for s in shapes)
        layouts = []
        if blocked:
            channel_counts = {s[1] for s in shapes}
            layouts = [f"NCHW{b}c" for b in channel_blocks(min(channel_counts), self.blocks)
                       if all(c % b == 0 for c in channel_counts)]
        layouts.append(NCHW)
        self.add_node(name, "multi", name, op, workload, [Choice.layout(layout) for layout in layouts])
        self.connect(name, inputs)
        return True

    def boundary(self, name: str, call, op: str | None, inputs: list) -> None:
        shapes = [self.shape(v, f"input {v.name!r} of {name!r}") for v in inputs]
        op_name = op or (call.op.name_hint if hasattr(call.op, "name_hint") else type(call.op).__name__)
        workload = {"op": op_name.rsplit(".", 1)[-1], "shapes": shapes}
        self.add_node(name, "boundary", name, op_name, workload, [Choice.layout()])
        self.connect(name, inputs)

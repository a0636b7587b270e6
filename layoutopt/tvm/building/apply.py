"""Apply a layout solution to a Relax module: the rewrite (:mod:`layoutopt.tvm.building.builder` builds the
result).

:func:`ApplyLayouts` is a Relax pass (usable inside your own ``tvm.transform.Sequential``) that follows
the layout model of :mod:`layoutopt.tvm` (the one extraction costs):

* a **target op** (conv2d, dense) runs the chosen kernel: the compute of its kernel family
  (:mod:`layoutopt.tvm.kernels`) in the chosen ``(in, out)`` layouts (data ``NCHW{ic}c``, output
  ``NCHW{oc}c``), its constant weight re-laid out at compile time (numpy), the candidate (algorithm,
  schedule knobs) carried on the kernel's main block to the scheduler, with the workload (the
  epilogue its kernel was measured with included);
* a **conv2d_transpose** likewise runs its kernel family's per-phase blocked kernel
  (:mod:`layoutopt.tvm.kernels.conv2d_transpose`), or TVM's own for ``NCHW``;
* **layout-following ops** (unary elementwise, per-channel constant bias/scale, elementwise ops of
  two values of one producer, pooling, resizes) run in whatever layout their input arrives in, their
  per-channel constants repacked to match;
* a **multi-input op** (add, concat...) runs in its chosen common layout, every input converted to it;
* everything else (reshape, softmax, the function's outputs, unknown ops) gets plain ``NCHW``.

A ``relax.op.layout_transform`` is inserted only where a producer's layout differs from what its
consumer needs, once per (value, destination layout): two consumers reading one value in the same
foreign layout share the transform. A solution that keeps everything in ``NCHW`` gives back the
original program (structurally equal).

:func:`layoutopt.tvm.building.builder.build` then legalizes, fuses, schedules every kernel and lowers for the
Relax VM.

Example:
    >>> import numpy as np, tvm
    >>> from layoutopt.tvm import build, models
    >>> mod = models.chain()        # conv1 (8 -> 16 channels) -> conv2 (16 -> 16), each + bias, relu
    >>> tuned = ApplyLayouts({"conv1": "NCHW8c->NCHW16c", "conv2": "NCHW16c->NCHW16c"})(mod)
    >>> op_list(tuned)    # NCHW -> NCHW8c, conv1, bias, relu, conv2, bias, relu, NCHW16c -> NCHW
    ['relax.layout_transform', 'relax.call_tir', 'relax.add', 'relax.nn.relu', 'relax.call_tir', 'relax.add',
     'relax.nn.relu', 'relax.layout_transform']
    >>> vm = tvm.relax.VirtualMachine(build(tuned, "llvm"), tvm.cpu())
    >>> untouched = tvm.relax.VirtualMachine(tvm.compile(mod, "llvm"), tvm.cpu())
    >>> x = tvm.runtime.tensor(np.random.default_rng(0).standard_normal((1, 8, 8, 8)).astype("float32"))
    >>> np.allclose(vm["main"](x).numpy(), untouched["main"](x).numpy(), atol=1e-5)
    True
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

from ...errors import ProblemError
from .._tvm import import_tvm
from ..graph.graph import LayoutGraph
from ..kernels import NCHW, layout_block, pack_data, validate_workload
from ..kernels.candidate import Candidate
from ..ops import follower, fused_epilogues, is_tensor_constant, op_name, rules_for, static_shape

__all__ = [
    "ApplyLayouts",
    "apply_assignment",
    "apply_layouts",
    "apply_solution",
    "count_layout_transforms",
    "expected_transforms",
    "op_list",
    "parse_choice",
]


def parse_choice(node: Hashable, choice: Any) -> dict[str, Any]:
    """Normalise one node's choice to a candidate dict ``{"in": ..., "out": ..., **knobs}``.

    Accepted forms: a candidate dict ``{"in": ..., "out": ...}`` (its other keys, such as an
    ``"algorithm"``, a dense ``"weight"`` layout or schedule knobs, choose the kernel), a pair
    ``("NCHW16c", "NCHW8c")``, or a label as the layout graph prints it (the grammar of
    :mod:`layoutopt.labels`): ``"NCHW16c->NCHW8c"``, ``"NCHW16c->NCHW16c[algorithm=winograd,tile=4]"``
    or a single layout ``"NCHW16c"`` (a multi-input op's common layout: in and out equal). A dense
    layer's plain ``"NC"`` counts as ``"NCHW"``.

    Example:
        >>> parse_choice("conv1", "NCHW16c->NCHW8c"), parse_choice("add", "NCHW8c")
        ({'in': 'NCHW16c', 'out': 'NCHW8c'}, {'in': 'NCHW8c', 'out': 'NCHW8c'})
        >>> parse_choice("conv2", "NCHW16c->NCHW16c[order=rows]")
        {'in': 'NCHW16c', 'out': 'NCHW16c', 'order': 'rows'}
    """
    try:
        if isinstance(choice, Mapping):
            record = Candidate.from_json(choice)
        elif isinstance(choice, str):
            record = Candidate.from_label(choice)
        elif isinstance(choice, (tuple, list)) and len(choice) == 2:
            record = Candidate(*choice)
        else:
            raise ProblemError(f"choice {choice!r} is not a layout, an (in, out) pair, a label "
                               "'IN->OUT[KEY=VALUE,...]' or a candidate dict")
        record = record.in_graph_spelling()
        for layout in (record.in_layout, record.out_layout):
            layout_block(layout)
    except ProblemError as exc:
        raise ProblemError(f"node {node!r}: {exc}") from None
    return record.to_json()


def _transform_index_map(src: str, dst: str) -> Callable:
    src_block, dst_block = layout_block(src), layout_block(dst)
    if src_block is None:
        return lambda n, c, h, w: (n, c // dst_block, h, w, c % dst_block)
    if dst_block is None:
        return lambda n, co, h, w, ci: (n, co * src_block + ci, h, w)
    return lambda n, co, h, w, ci: (
        n, (co * src_block + ci) // dst_block, h, w, (co * src_block + ci) % dst_block,
    )


# ----------------------------------------------------------------------------------------------
# the rewriter


class _Rewriter:
    """Rebuilds ``main`` binding by binding; ``env`` maps each original Var to (new Var, layout).

    What a call becomes is its operator rule's (:mod:`layoutopt.tvm.ops`): a node's chosen candidate
    (:meth:`~layoutopt.tvm.ops.OpRule.rewrite`), a layout-following op in its input's layout
    (:meth:`~layoutopt.tvm.ops.OpRule.follow`). The rewriter is the rules' context: ``value``,
    ``emit``, ``boundary``, ``fused_workload``, ``bb``, ``relax``, ``tvm`` and ``functions``."""

    def __init__(self, choices: Mapping[str, dict[str, Any]], context=None, probes: Sequence[str] = (),
                 epilogues: Mapping[str, Sequence[Any]] | None = None):
        self.tvm = import_tvm()
        self.probes = list(probes)  # binding names whose values main also returns, in NCHW
        self.epilogues = dict(epilogues or {})  # conv binding -> the epilogue its workload carries
        self.source: dict[Any, str] = {}  # original Var -> the node whose output layout it carries
        self.relax = self.tvm.relax
        self.choices = choices
        self.bb = self.relax.BlockBuilder(context)  # context: the module's other functions
        self.functions = context  # which call_tir is an ONNX resize (ops.op_name)
        self.env: dict[Any, tuple[Any, str | None]] = {}
        self.converted: dict[tuple[Any, str], Any] = {}  # (original Var, layout) -> transformed Var
        self.used: set[str] = set()
        self.transforms = 0
        self.outputs: set[Any] = set()  # rewritten Vars that are outputs of the dataflow block

    # -- values in a requested layout ---------------------------------------------------------
    def value(self, expr, layout: str | None):
        """``expr`` of the original program, rewritten and delivered in ``layout`` (None: as is)."""
        relax = self.relax
        if isinstance(expr, relax.Var):
            new, current = self.env[expr]
            if layout is None or current is None or current == layout:
                return new
            key = (expr, layout)
            if key not in self.converted:
                channels = static_shape(expr)[1]
                block = layout_block(layout)
                if block is not None and channels % block:
                    raise ProblemError(
                        f"value {expr.name!r} has {channels} channels, which layout {layout!r} cannot hold "
                        "(the block must divide the channel count)"
                    )
                transformed = relax.op.layout_transform(new, index_map=_transform_index_map(current, layout))
                self.converted[key] = self.bb.emit(transformed, name_hint=f"{expr.name}_{layout}")
                self.transforms += 1
            return self.converted[key]
        if is_tensor_constant(expr) and layout not in (None, NCHW):
            return self.constant_in(expr, layout)
        if isinstance(expr, relax.Tuple):
            return relax.Tuple([self.value(field, layout) for field in expr.fields])
        return expr

    def constant_in(self, const, layout: str):
        """A constant operand of an elementwise op on an ``NCHW`` tensor, repacked for ``layout``."""
        array = const.value.numpy()
        if array.ndim < 3 or array.size == 1:
            if array.size == 1:
                return const  # a scalar broadcasts in any layout
            raise ProblemError(f"cannot repack a constant of shape {array.shape} for layout {layout!r}")
        while array.ndim < 4:
            array = array[None]
        return self.relax.const(pack_data(array, layout), str(array.dtype))

    def layout_of(self, expr) -> str | None:
        if isinstance(expr, self.relax.Var):
            return self.env[expr][1]
        return None

    def emit(self, var, value, layout: str | None):
        shape = static_shape(var)
        if shape is None and isinstance(var.ty, self.relax.TupleType):
            pass  # a split's pieces: the tuple carries their layout to the TupleGetItems reading them
        elif shape is None or len(shape) != 4:
            layout = None
        if not isinstance(var, self.relax.DataflowVar) and layout in (NCHW, None):
            # an output of the dataflow block stays one, under its own name: an all-NCHW rewrite
            # then reproduces the original program exactly
            new = self.bb.emit_output(value, name_hint=var.name)
            self.outputs.add(new)
        else:
            new = self.bb.emit(value, name_hint=var.name)
        self.env[var] = (new, layout)

    # -- one binding --------------------------------------------------------------------------
    def binding(self, var, value) -> None:
        """``var = value``: a node's chosen candidate (its rule's :meth:`~layoutopt.tvm.ops.OpRule.rewrite`),
        a layout-following op in its input's layout (:meth:`~layoutopt.tvm.ops.OpRule.follow`), or the
        binding as it is, in ``NCHW``."""
        relax = self.relax
        name = var.name
        op = op_name(value, self.functions)
        self.source[var] = self.producer(var, value, op)
        choice = self.choices.get(name)
        if choice is not None:
            self.used.add(name)
            rules = [rule for rule in rules_for(op) if rule.matches(value, op)]
            if any(rule.rewrite(self, var, value, op, choice) for rule in rules):
                return
            if (choice["in"], choice["out"]) != (NCHW, NCHW):
                raise ProblemError(
                    f"node {name!r}: layout {choice['in']}->{choice['out']} was chosen for op "
                    f"{op or type(value).__name__!r}, which this pass can only run in NCHW"
                )
        following = follower(value, op, source=self.source.get) if isinstance(value, relax.Call) else None
        layout = None if following is None else self.layout_of(following[1])
        if layout is not None:  # a layout-following op, in the layout its input arrives in
            rule, _ = following
            rule.follow(self, var, value, op, layout)
            return
        self.boundary(var, value)

    def producer(self, var, value, op: str | None) -> str:
        """The node whose output layout ``var`` carries, as extraction names it: itself if it is a node
        (it has a choice), else its alias's or its layout carrier's producer, else itself (a boundary)."""
        if var.name in self.choices:
            return var.name
        if isinstance(value, self.relax.Var):
            return self.source.get(value, var.name)
        if not isinstance(value, self.relax.Call):
            return var.name
        found = follower(value, op, source=self.source.get)
        return var.name if found is None else self.source.get(found[1], var.name)

    def boundary(self, var, value) -> None:
        relax = self.relax
        if isinstance(value, relax.Call):
            new_value = relax.Call(value.op, [self.value(a, NCHW) for a in value.args], value.attrs,
                                   value.ty_args)
        elif isinstance(value, relax.TupleGetItem):  # a piece keeps its tuple's layout (a split's)
            new_value = relax.TupleGetItem(self.value(value.tuple_value, None), value.index)
            return self.emit(var, new_value, self.layout_of(value.tuple_value) or NCHW)
        elif isinstance(value, relax.Var):  # an alias keeps its source's layout
            new, layout = self.env[value]
            if isinstance(var, relax.DataflowVar):
                self.env[var] = (new, layout)
            else:
                self.emit(var, new, layout)
            return
        elif isinstance(value, (relax.Tuple, relax.ShapeExpr)) or is_tensor_constant(value):
            new_value = self.value(value, NCHW)
        else:
            raise ProblemError(
                f"binding {var.name!r}: {type(value).__name__} is not supported by ApplyLayouts"
            )
        self.emit(var, new_value, NCHW)

    def fused_workload(self, name: str, workload: dict[str, Any]) -> dict[str, Any]:
        """Node ``name``'s kernel workload with the epilogue its kernel was measured with (the steps
        ``FuseOps`` fuses into it), validated; a ProblemError naming the node otherwise."""
        try:
            return validate_workload({**workload, "epilogue": self.epilogues.get(name, [])})
        except ProblemError as exc:
            raise ProblemError(f"node {name!r}: {exc}") from None

    # -- the function -------------------------------------------------------------------------
    def function(self, func):
        relax = self.relax
        body = func.body
        if not isinstance(body, relax.SeqExpr):
            raise ProblemError("ApplyLayouts expects 'main' in normal form (a SeqExpr body)")
        params = list(func.params)
        for param in params:
            self.env[param] = (param, NCHW if len(static_shape(param) or ()) == 4 else None)
            self.source[param] = param.name
        with self.bb.function("main", params, attrs=dict(func.attrs) if func.attrs else None,
                              pure=bool(func.is_pure)):
            with self.bb.dataflow():
                for block in body.blocks:
                    for binding in block.bindings:
                        if not isinstance(binding, relax.VarBinding):
                            raise ProblemError(
                                f"binding {binding.var.name!r}: match_cast is not supported by ApplyLayouts"
                            )
                        self.binding(binding.var, binding.value)
                result = self.result(body.body)
                if self.probes:
                    by_name = {var.name: var for var in self.env}
                    missing = [name for name in self.probes if name not in by_name]
                    if missing:
                        raise ProblemError(f"probes name {len(missing)} value(s) that are not bindings of "
                                           f"main: {', '.join(missing[:5])}")
                    result = relax.Tuple([result, *(self.result(by_name[name]) for name in self.probes)])
            self.bb.emit_func_output(result)
        return self.bb.get()  # main plus the PrimFuncs of call_te (dense)

    def result(self, expr):
        relax = self.relax
        if isinstance(expr, relax.Tuple):
            return relax.Tuple([self.result(f) for f in expr.fields])
        value = self.value(expr, NCHW)
        if isinstance(value, relax.Var) and value not in self.outputs:
            value = self.bb.emit_output(value, name_hint=expr.name if isinstance(expr, relax.Var) else "")
        return value


def _normalise_choices(choices: Mapping[Hashable, Any]) -> dict[str, dict[str, Any]]:
    """``{binding: candidate dict}`` (see :func:`parse_choice`)."""
    if not isinstance(choices, Mapping):
        raise ProblemError(f"choices must map binding names to layouts, not {type(choices).__name__}")
    return {str(node): parse_choice(node, choice) for node, choice in choices.items()}


def apply_layouts(mod, choices: Mapping[Hashable, Any], strict: bool = True, probes: Sequence[str] = (),
                  epilogues: Mapping[str, Sequence[Any]] | None = None):
    """Rewrite ``mod["main"]`` to the chosen kernels and layouts; the function form of :func:`ApplyLayouts`.

    Args:
        mod: a Relax ``IRModule`` with a ``main`` function (e.g. after :func:`layoutopt.tvm.prepare`).
        choices: binding name of a problem node -> its choice (see :func:`parse_choice`).
        strict: raise :class:`~layoutopt.ProblemError` when a choice names no binding of ``main``.
        probes: binding names whose values ``main`` returns too, in ``NCHW``, after its own result (a
            tuple ``(result, *probes)``): to look inside a build, e.g. for the first value that
            diverges (:func:`~layoutopt.tvm.evaluate.check.first_divergence`).
        epilogues: conv2d binding name -> the epilogue its kernel's workload carries (the layout
            graph's workloads: what was measured); None: the epilogue a fused build fuses into it
            (:func:`~layoutopt.tvm.ops.fused_epilogues`).

    Returns:
        A new ``IRModule``; with every choice ``NCHW`` it is structurally equal to ``mod``. A conv2d
        or dense given another kernel calls that kernel's compute (``call_tir``), which carries the
        candidate (algorithm, schedule knobs) to :func:`build`'s scheduler on its main block, and the
        workload (its epilogue included): together, the cost-cache key of the kernel it runs.

    Example:
        >>> from layoutopt.tvm import models
        >>> new_mod = apply_layouts(models.chain(), {"conv1": "NCHW8c->NCHW16c"})
        >>> op_list(new_mod)      # conv2 stays NCHW: conv1's output goes back to it
        ['relax.layout_transform', 'relax.call_tir', 'relax.add', 'relax.nn.relu', 'relax.layout_transform',
         'relax.nn.conv2d', 'relax.add', 'relax.nn.relu']
        >>> tvm = import_tvm()       # all NCHW: the program itself
        >>> tvm.ir.assert_structural_equal(apply_layouts(models.chain(), {"conv1": "NCHW"}), models.chain())
    """
    tvm = import_tvm()
    normalised = _normalise_choices(choices)
    if "main" not in [gv.name_hint for gv in mod.get_global_vars()]:
        raise ProblemError("the module has no 'main' function to rewrite")
    bindings = {b.var.name for block in mod["main"].body.blocks for b in block.bindings}
    missing = sorted(set(normalised) - bindings)
    if strict and missing:
        raise ProblemError(
            f"choices name {len(missing)} node(s) that are not bindings of main: {', '.join(missing[:5])}"
        )
    others = tvm.IRModule({gv: func for gv, func in mod.functions.items() if gv.name_hint != "main"})
    if epilogues is None:
        epilogues = fused_epilogues(mod["main"])
    new_mod = _Rewriter(normalised, others, probes, epilogues).function(mod["main"])
    return new_mod.with_attrs(mod.attrs) if mod.attrs else new_mod


def ApplyLayouts(choices: Mapping[Hashable, Any], strict: bool = True):
    """A Relax module pass applying layout ``choices`` (see :func:`apply_layouts`).

    Example:
        >>> from layoutopt.tvm import models
        >>> tvm = import_tvm()
        >>> seq = tvm.transform.Sequential([ApplyLayouts({"conv1": "NCHW8c->NCHW16c"}),
        ...                                 tvm.relax.transform.FoldConstant()])
        >>> count_layout_transforms(seq(models.chain()))
        2
    """
    tvm = import_tvm()
    _normalise_choices(choices)  # fail early, at pass creation

    @tvm.transform.module_pass(opt_level=0, name="layoutopt.ApplyLayouts")
    def _apply(mod, _ctx):
        return apply_layouts(mod, choices, strict=strict)

    return _apply


def apply_assignment(mod, graph: LayoutGraph, assignment: Mapping[Hashable, int], probes: Sequence[str] = (),
                     loop_order: str | None = None):
    """Apply an assignment of choice indices of the layout graph extracted from ``mod`` (its
    ``graph.mod``): each target and multi-input node gets its chosen candidate (in ``loop_order``
    where given: see :meth:`~layoutopt.tvm.graph.graph.LayoutGraph.decisions`), each conv2d kernel the
    workload the graph measured it with.

    Example:
        >>> from layoutopt.tvm import extract_layout_graph, fixed_layout_assignment, models
        >>> graph = extract_layout_graph(models.chain())
        >>> assignment = fixed_layout_assignment(graph, "NCHW16c")   # NCHW8c in where 16 does not divide
        >>> graph.decisions(assignment)
        {'conv1': {'in': 'NCHW8c', 'out': 'NCHW16c'}, 'conv2': {'in': 'NCHW16c', 'out': 'NCHW16c'}}
        >>> count_layout_transforms(apply_assignment(graph.mod, graph, assignment))
        2
    """
    if not assignment:
        raise ProblemError("the assignment is empty: nothing to apply")
    epilogues = {node.binding: node.workload.get("epilogue", []) for node in graph.layout_nodes()
                 if any(rule.takes_epilogue for rule in rules_for(node.op))}
    return apply_layouts(mod, graph.decisions(assignment, loop_order), probes=probes, epilogues=epilogues)


def apply_solution(mod, graph: LayoutGraph, solution):
    """Apply a :class:`~layoutopt.Solution` of the layout graph extracted from ``mod`` (see
    :func:`apply_assignment`).

    Example:
        >>> import layoutopt
        >>> from layoutopt.tvm import build_problem, models
        >>> graph, costs, meta = build_problem(models.chain((8, 8)), cache="costs.jsonl")   # measures
        >>> solution = layoutopt.solve(graph, costs)
        >>> new_mod = apply_solution(graph.mod, graph, solution)
        >>> count_layout_transforms(new_mod) == expected_transforms(graph, solution.assignment)
        True
    """
    if not solution.assignment:
        raise ProblemError(f"the solution has no assignment (status {solution.status!r}): nothing to apply")
    return apply_assignment(mod, graph, solution.assignment)


def expected_transforms(graph: LayoutGraph, assignment: Mapping[Hashable, int]) -> int:
    """How many ``layout_transform`` calls the rewrite of ``assignment`` must contain, per the graph.

    One per (value, destination layout) pair whose producer's out layout differs from a consumer's
    in layout, read off the edges' values: what :func:`apply_assignment` inserts.

    Example:
        >>> from layoutopt.tvm import extract_layout_graph, fixed_layout_assignment, models
        >>> graph = extract_layout_graph(models.residual())
        >>> assignment = fixed_layout_assignment(graph, "NCHW8c")
        >>> assignment["add"] = graph.nodes["add"]["choices"].index("NCHW16c")
        >>> expected_transforms(graph, assignment)   # the input, conv0 and conv2 into the add, the output
        4
        >>> count_layout_transforms(apply_assignment(graph.mod, graph, assignment))
        4
    """
    needed = set()
    for producer, consumer in graph.edges:
        out_layout = graph.choice(producer, assignment[producer]).out_layout
        in_layout = graph.choice(consumer, assignment[consumer]).in_layout
        if out_layout != in_layout:
            for value in graph.layout_edge(producer, consumer).values:
                needed.add((value.name, in_layout))
    return len(needed)


def count_layout_transforms(mod) -> int:
    """Number of ``relax.layout_transform`` calls in ``mod["main"]``.

    Example:
        >>> from layoutopt.tvm import models
        >>> count_layout_transforms(apply_layouts(models.chain(), {"conv2": "NCHW16c->NCHW16c"}))   # in, out
        2
    """
    return sum(1 for op in op_list(mod) if op == "relax.layout_transform")


def op_list(mod) -> list[str]:
    """The op names of ``main``'s bindings, in order (calls only)."""
    tvm = import_tvm()
    ops = []
    for block in mod["main"].body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, tvm.relax.Call) and isinstance(value.op, tvm.ir.Op):
                ops.append(value.op.name)
    return ops

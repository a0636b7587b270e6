"""Where a tuned model came from, and a check of TVM's import of it against a reference TVM did not compute.

The output check (:mod:`layoutopt.tvm.evaluate.check`) judges every build against the untouched model computed
in float64; but that model is TVM's own import of the file, so a mistake of the import is in the
reference too (a Resize imported with the wrong coordinates gave a build 5.78 off ONNX Runtime on a
largest output of 5.99, and the check passed it). When the model came from a file (a
:data:`~layoutopt.tvm.frontend.load.ModelOrigin`, which :func:`~layoutopt.tvm.frontend.load.load_with_origin`
returns beside the module),
:func:`check_import` runs the file once, on the check's inputs, with a runtime that does not go
through TVM: ONNX Runtime (or, without it, ``onnx.reference.ReferenceEvaluator``) for an ONNX model,
torch eager for a ``torch.export`` program (in a worker process: torch's thread pool would spin
beside the timings). Its outputs are judged as a build's are, against the same truth and bound
(:meth:`~layoutopt.tvm.evaluate.check.Reference.judge`). A disagreement stops the tune before anything is
measured with an :class:`ImportMismatch`, one line naming the first ONNX node whose output differs:
found by bisecting the graph's node order, each probe the model cut after a node (its outputs the
values still needed after it), imported as the tool imports it (:mod:`layoutopt.tvm.frontend.onnx_import`,
then :func:`~layoutopt.tvm.frontend.normalise.prepare`) and built by TVM's default pipeline, beside the same
cut run by the reference runtime. The cost: one run of the reference runtime per tune; on a
disagreement, about ``log2(nodes)`` probes more.

Example:
    >>> import onnx
    >>> onnx.save(onnx.parser.parse_model('''<ir_version: 8, opset_import: ["" : 13]>
    ...     relu (float[1, 4, 8, 8] x) => (float[1, 4, 8, 8] y) { y = Relu(x) }'''), "relu.onnx")
    >>> from layoutopt.tvm.evaluate.check import Reference
    >>> from layoutopt.tvm.frontend.load import load_with_origin
    >>> from layoutopt.tvm.evaluate.timing import random_inputs
    >>> mod, origin = load_with_origin("relu.onnx")
    >>> inputs = random_inputs(mod)
    >>> checked = check_import(origin, mod, inputs, Reference.of(mod, inputs, "llvm"), "llvm")
    >>> checked.runtime.startswith("ONNX Runtime"), checked.error < 1e-6
    (True, True)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ...errors import ProblemError
from .._tvm import first_line, import_tvm
from ..frontend.load import ModelOrigin, OnnxOrigin, TorchOrigin
from .check import ImportCheck, relative_error

__all__ = ["ImportCheck", "ImportMismatch", "ModelOrigin", "OnnxOrigin", "TorchOrigin", "check_import"]


class ImportMismatch(ProblemError):
    """TVM's import of a model file computes other numbers than a runtime that does not go through TVM:
    the tune refuses the model (its message names the first node whose output differs)."""


#: what a tune without a model file says (``tune_and_build`` of an ``IRModule``)
NO_FILE = ImportCheck(None, why="a bare IRModule: TVM's import is not checked")


def check_import(origin: ModelOrigin | None, mod, inputs: Sequence[np.ndarray], reference, target: Any,
                 runner: Any = None) -> ImportCheck:
    """Compare the model file ``origin`` run by a runtime independent of TVM with ``reference`` (the
    :class:`~layoutopt.tvm.evaluate.check.Reference` of ``mod``, TVM's import of it) on ``inputs``.

    Raises:
        ImportMismatch: they disagree beyond the reference's bound; one line naming the first ONNX
            node whose output differs (``target`` and ``runner`` build and run the probes).
    """
    if origin is None:
        return NO_FILE
    if isinstance(origin, TorchOrigin):
        runtime, outputs = _torch_eager(origin, inputs)
    else:
        runtime, run_reference = _onnx_runtime()
        try:
            outputs = run_reference(origin.model.SerializeToString(), _feeds(origin.model, inputs))
        except Exception as exc:  # an op or a model the reference runtime refuses
            raise ProblemError(f"{runtime} cannot run {origin.path!r}, so TVM's import of it cannot be "
                               f"checked: {first_line(exc)} (--no-check, or check=False, builds unchecked)"
                               ) from None
    verdict = reference.judge(outputs)
    bound = max(verdict.bounds, default=reference.rtol)
    if verdict.passed:
        return ImportCheck(runtime, verdict.error, bound)
    if isinstance(origin, TorchOrigin):
        where = " (a torch.export program: not bisected by node)"
    else:
        node = _first_divergent_node(origin, inputs, bound, run_reference, target, runner)
        where = f"; the first node whose output differs is {node}" if node else ""
    amount = "NaN/inf" if math.isinf(verdict.error) else f"{verdict.error:.3g}"
    raise ImportMismatch(f"TVM's import of {origin.path!r} disagrees with {runtime}: its outputs are off by "
                         f"{amount} (relative; bound {bound:.3g}){where}. Nothing is handed back: an "
                         "import defect layoutopt does not fix (docs/tvm-import-defects.md)")


# -- the reference runtimes ----------------------------------------------------------------------------


def _onnx_runtime() -> tuple[str, Callable[[bytes, Mapping[str, np.ndarray]], list[np.ndarray]]]:
    """``(name, run)``: ONNX Runtime's CPU provider, else ``onnx.reference.ReferenceEvaluator``."""
    try:
        import onnxruntime
    except ImportError:
        import onnx
        from onnx.reference import ReferenceEvaluator

        def evaluate(model: bytes, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
            return list(ReferenceEvaluator(onnx.load_from_string(model)).run(None, dict(feeds)))

        return f"onnx.reference (onnx {onnx.__version__})", evaluate

    def run(model: bytes, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        options = onnxruntime.SessionOptions()
        options.log_severity_level = 3  # its warnings (a deprecated attribute...) are not ours to print
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")  # idle once done
        session = onnxruntime.InferenceSession(model, options, providers=["CPUExecutionProvider"])
        return list(session.run(None, dict(feeds)))

    return f"ONNX Runtime {onnxruntime.__version__}", run


def _feeds(model, inputs: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
    """The graph's inputs (those not initializers, in order: TVM's parameters) bound to ``inputs``."""
    initializers = {init.name for init in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in initializers]
    if len(names) != len(inputs):
        raise ProblemError(f"the model has {len(names)} inputs, the check {len(inputs)}")
    return dict(zip(names, inputs, strict=True))


def _torch_eager(origin: TorchOrigin, inputs: Sequence[np.ndarray]) -> tuple[str, list[np.ndarray]]:
    """torch's version and the program's eager outputs, computed in a worker process."""
    from ...isolation import IsolatedWorker, WorkerDied

    try:
        with IsolatedWorker() as worker:
            arrays = [np.asarray(x) for x in inputs]
            return worker.call(_run_exported_program, origin.path, arrays, timeout=600)
    except WorkerDied as exc:
        raise ProblemError(f"running {origin.path!r} with torch eager failed: {first_line(exc)}") from None


def _run_exported_program(path: str, inputs: list[np.ndarray]) -> tuple[str, list[np.ndarray]]:
    import torch

    program = torch.export.load(path)
    with torch.no_grad():
        result = program.module()(*(torch.from_numpy(np.ascontiguousarray(x)) for x in inputs))
    flat = result if isinstance(result, (tuple, list)) else [result]
    return f"torch {torch.__version__} eager", [t.detach().cpu().numpy() for t in flat]


# -- bisection over the ONNX graph ----------------------------------------------------------------------

#: ONNX element types of the values a probe compares (float16, float, double): others are shapes and
#: indices, which the float values computed from them show
_FLOAT_TYPES = frozenset({1, 10, 11})


def _first_divergent_node(origin: OnnxOrigin, inputs: Sequence[np.ndarray], bound: float,
                          run_reference: Callable, target: Any, runner: Any) -> str | None:
    """``'NAME' (op OP)`` of the first node (in the graph's order, which ONNX keeps topological) after
    which a value still needed differs beyond ``bound``, or None when no cut shows one. Bisects: a cut
    after node ``k`` exposes every value computed so far that a later node or the graph's output uses,
    so that a difference, once made, stays visible in every later cut (unless a later op hides it)."""
    import onnx

    model = onnx.shape_inference.infer_shapes(origin.model)
    graph = model.graph
    types = {v.name: v.type.tensor_type.elem_type for v in [*graph.value_info, *graph.output, *graph.input]}
    nodes = list(graph.node)
    feeds = _feeds(origin.model, inputs)
    low, high = -1, len(nodes) - 1  # the cut after nodes[high] differs: the model's outputs do
    while high - low > 1:
        middle = (low + high) // 2
        if _cut_differs(origin, model, middle, types, feeds, inputs, bound, run_reference, target, runner):
            high = middle
        else:
            low = middle
    if high == len(nodes) - 1 and not _cut_differs(origin, model, high, types, feeds, inputs, bound,
                                                   run_reference, target, runner):
        return None  # only the whole model differs: a normalisation across nodes, or a hidden value
    node = nodes[high]
    return f"{node.name or node.output[0]!r} (op {node.op_type})"


def _cut(model, last: int, types: Mapping[str, int]):
    """``model`` cut after node ``last``: its outputs every float value computed so far that a later
    node or the graph's output reads (and the node's own), None when there is none."""
    import onnx
    from onnx import helper

    graph = model.graph
    nodes = list(graph.node)
    later = {name for node in nodes[last + 1:] for name in node.input} | {o.name for o in graph.output}
    made = [name for node in nodes[: last + 1] for name in node.output if name]
    own = set(nodes[last].output)
    wanted = [name for name in dict.fromkeys(made)
              if (name in later or name in own) and types.get(name) in _FLOAT_TYPES]
    if not wanted:
        return None
    outputs = [helper.make_tensor_value_info(name, types[name], None) for name in wanted]
    cut = helper.make_graph(nodes[: last + 1], graph.name, list(graph.input), outputs,
                            list(graph.initializer))
    result = helper.make_model(cut, opset_imports=list(model.opset_import), ir_version=model.ir_version)
    return onnx.ModelProto.FromString(result.SerializeToString())


def _cut_differs(origin: OnnxOrigin, model, last: int, types: Mapping[str, int], feeds, inputs, bound: float,
                 run_reference: Callable, target: Any, runner: Any) -> bool:
    """Whether the cut after node ``last``, built as the tool builds the model, differs from the
    reference runtime's run of it (a cut TVM cannot import or build tells nothing: False)."""
    from ..frontend.normalise import prepare
    from ..frontend.onnx_import import quiet_import
    from .timing import run

    cut = _cut(model, last, types)
    if cut is None:
        return False
    tvm = import_tvm()
    try:
        mod = prepare(quiet_import(cut, dict(origin.shapes)))
        ours = run(tvm.compile(mod, target=target), inputs, runner)
        theirs = run_reference(cut.SerializeToString(), feeds)
    except Exception:  # a cut that cannot be imported or run is no evidence either way
        return False
    for mine, reference in zip(ours, theirs, strict=False):
        if mine.shape != reference.shape:
            return True
        if not np.all(np.isfinite(reference)):
            if not np.array_equal(np.isfinite(mine), np.isfinite(reference)):
                return True
            continue
        if relative_error([mine], [reference]) > bound:
            return True
    return False

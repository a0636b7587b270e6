"""The interface every kernel family implements: :class:`KernelFamily`.

A *kernel family* is one way of computing one op (``op``), named within it by its ``algorithm`` (the
candidates' ``"algorithm"`` key, absent for ``"direct"``). It offers, for a workload it
:meth:`~KernelFamily.applies` to:

- its :meth:`~KernelFamily.candidates` and :meth:`~KernelFamily.validate_candidate`;
- its schedule :meth:`~KernelFamily.space` (:mod:`.space`): the knobs a search may set on a candidate,
  the heuristic's values their default;
- a numpy :meth:`~KernelFamily.reference` over the logical inputs (:meth:`~KernelFamily.logical_shapes`);
- the TE compute: :meth:`~KernelFamily.placeholders` in the candidate's layouts, then
  :meth:`~KernelFamily.compute`; :meth:`~KernelFamily.output` adds the fused epilogue;
- its hand-written :meth:`~KernelFamily.schedule`, which :mod:`.module` runs on every function whose
  blocks include one of :attr:`~KernelFamily.main_blocks` (measured kernels and whole builds alike);
- packing: logical inputs to the kernel's (:meth:`~KernelFamily.pack_inputs`, and
  :meth:`~KernelFamily.pack_weight` for the constant the rewrite stores), its output back
  (:meth:`~KernelFamily.unpack_output`);
- :attr:`~KernelFamily.epilogue`: the elementwise steps (:mod:`.epilogue`) it takes fused, as
  ``FuseOps`` fuses them;
- its :meth:`~KernelFamily.memory`: the bytes a build holds for the kernel, its weight as packed or
  transformed (the :attr:`~KernelFamily.resident` placeholders) and the workspace its scheduled
  function allocates (:meth:`~KernelFamily.workspace`).

A new family is a module with a subclass and its instance (``FAMILY``), plus one line in
:data:`~layoutopt.tvm.kernels.registry.FAMILIES`. The conv2d families share their inputs, reference,
packing and placeholders through :class:`~.convolution.Conv2dFamily`.

Example:
    >>> from layoutopt.tvm.kernels import FAMILIES
    >>> wl = {"op": "conv2d", "data": [1, 16, 8, 8], "kernel": [16, 16, 3, 3], "strides": [1, 1],
    ...       "padding": [1, 1, 1, 1], "dilation": [1, 1], "groups": 1, "dtype": "float32"}
    >>> winograd = FAMILIES["conv2d", "winograd"]
    >>> winograd, winograd.applies(wl), isinstance(winograd, KernelFamily)
    (<kernel family conv2d/winograd>, True, True)
    >>> winograd.candidates(wl, blocks=[16], tiles=[2])
    [{'in': 'NCHW16c', 'out': 'NCHW16c', 'algorithm': 'winograd', 'tile': 2},
     {'in': 'NCHW16c', 'out': 'NCHW16c', 'algorithm': 'winograd', 'tile': 2, 'order': 'tiles'}]
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from ...errors import ProblemError
from .candidate import DIRECT
from .epilogue import apply_te, step_name, takes_operand
from .space import ScheduleSpace

__all__ = ["KernelFamily", "tensor_bytes"]


def tensor_bytes(shape: Sequence[Any], dtype: str) -> int:
    """Bytes of a dense tensor of ``shape`` (ints or TVM integer expressions) and ``dtype``.

    Example:
        >>> tensor_bytes((2, 2, 3, 3, 8, 8), "float32"), tensor_bytes([10], "float16")
        (9216, 20)
    """
    elements = 1
    for dim in shape:
        elements *= int(dim)
    return elements * np.dtype(str(dtype)).itemsize


class KernelFamily(ABC):
    """One kernel family: candidates, numpy reference, TE compute, schedule, packing, fused epilogue.

    Workloads and candidates are the plain dicts of :mod:`.workload` and :mod:`.candidate`; the
    methods taking a workload expect it validated (:func:`~.workload.validate_workload`).
    """

    #: the workload op it computes (``"conv2d"``, ``"dense"``, ``"layout_transform"``)
    op: ClassVar[str]
    #: its name within the op: the candidates' ``"algorithm"`` (absent from them when ``"direct"``)
    algorithm: ClassVar[str] = DIRECT
    #: the names of its compute's main block, by which :mod:`.module` finds the functions to schedule
    #: with :meth:`schedule` (a fused function keeps them); empty: the generic schedule runs it
    main_blocks: ClassVar[tuple[str, ...]] = ()
    #: the names of the epilogue steps it computes fused after its output (see :meth:`output`)
    epilogue: ClassVar[tuple[str, ...]] = ()
    #: the names of its :meth:`placeholders` that a build holds as constants (the weight the rewrite
    #: stores as :meth:`pack_weight` packs it), which :meth:`memory` counts
    resident: ClassVar[tuple[str, ...]] = ()

    @property
    def key(self) -> tuple[str, str]:
        """``(op, algorithm)``: its key in the registry."""
        return self.op, self.algorithm

    def __repr__(self) -> str:
        return f"<kernel family {self.op}/{self.algorithm}>"

    def applies(self, workload: dict[str, Any]) -> bool:
        """Can it compute ``workload`` (by default: any workload of its op)?"""
        return workload["op"] == self.op

    def accepts(self, sch: Any) -> bool:
        """Besides a main block, must a function's ``s_tir.Schedule`` hold for :meth:`schedule` to
        take it (by default: nothing more)."""
        return True

    @abstractmethod
    def candidates(self, workload: dict[str, Any], **options: Any) -> list[dict[str, Any]]:
        """Its candidate dicts for ``workload`` (none where it does not apply); ``options`` are the
        family's own (the conv2d families all take ``blocks``)."""

    @abstractmethod
    def validate_candidate(self, workload: dict[str, Any], candidate: dict[str, Any]) -> None:
        """Raise ProblemError unless ``candidate`` is one of its kernels for ``workload``."""

    def space(self, workload: dict[str, Any], candidate: dict[str, Any], target: Any = None) -> ScheduleSpace:
        """The schedule space of ``candidate``'s kernel for ``workload`` compiled for ``target`` (None:
        the target in scope, else this host): its knobs, the values worth searching on that target
        (the target's registers decide), and the heuristic's point, the kernel ``candidate`` builds
        without knob keys (its own knob keys, if any, are ignored). By default the empty space: no
        knobs, one point.

        Example:
            >>> from layoutopt.tvm.kernels import FAMILIES
            >>> FAMILIES["layout_transform", "direct"].space({}, {}).points()
            [{}]
        """
        return ScheduleSpace()

    @abstractmethod
    def logical_shapes(self, workload: dict[str, Any]) -> list[list[int]]:
        """Shapes of the logical inputs (NCHW data, OIHW / NK weights, then epilogue operands)."""

    @abstractmethod
    def reference(self, workload: dict[str, Any], inputs: Sequence[np.ndarray]) -> np.ndarray:
        """The logical output (its epilogue applied) computed with numpy, in float64, from logical inputs."""

    @abstractmethod
    def pack_inputs(self, workload: dict[str, Any], candidate: dict[str, Any],
                    inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Logical inputs -> the arrays its kernel takes, in :meth:`placeholders` order."""

    def pack_weight(self, workload: dict[str, Any], candidate: dict[str, Any],
                    weight: np.ndarray) -> np.ndarray:
        """The logical weight laid out (or transformed) for the candidate's kernel: what the rewrite
        stores as the constant. ProblemError for a family without a weight."""
        raise ProblemError(f"{self!r} takes no weight")

    @abstractmethod
    def unpack_output(self, workload: dict[str, Any], candidate: dict[str, Any],
                      output: np.ndarray) -> np.ndarray:
        """Its kernel's output buffer -> the logical output."""

    @abstractmethod
    def placeholders(self, tvm: Any, workload: dict[str, Any], candidate: dict[str, Any]) -> list:
        """TE placeholders of its kernel's inputs in the candidate's layouts (epilogue operands last)."""

    @abstractmethod
    def compute(self, tvm: Any, inputs: Sequence, workload: dict[str, Any], candidate: dict[str, Any]) -> Any:
        """Its output tensor, without the epilogue, from the :meth:`placeholders` ``inputs``. A kernel
        with knobs carries the candidate on its main block
        (:data:`~layoutopt.tvm.kernels.common.CANDIDATE_ANNOTATION`), where :meth:`schedule` reads them."""

    @abstractmethod
    def schedule(self, func: Any, target: Any) -> Any:
        """The ``s_tir.Schedule`` of a PrimFunc holding its compute (alone or fused with its epilogue).

        Example:
            >>> import tvm
            >>> from layoutopt.tvm.kernels import FAMILIES
            >>> family, candidate = FAMILIES["conv2d", "direct"], {"in": "NCHW8c", "out": "NCHW8c"}
            >>> wl = {"op": "conv2d", "data": [1, 16, 8, 8], "kernel": [16, 16, 3, 3], "strides": [1, 1],
            ...       "padding": [1, 1, 1, 1], "dilation": [1, 1], "groups": 1, "dtype": "float32"}
            >>> inputs = family.placeholders(tvm, wl, candidate)
            >>> func = tvm.te.create_prim_func([*inputs, family.output(tvm, inputs, wl, candidate)])
            >>> sch = family.schedule(func, {"kind": "llvm", "mcpu": "znver3"})
            >>> executable = tvm.compile(sch.mod, target={"kind": "llvm", "mcpu": "znver3"})
        """

    def resident_inputs(self, tvm: Any, workload: dict[str, Any], candidate: dict[str, Any]) -> list:
        """The :meth:`placeholders` a build holds as constants (named in :attr:`resident`), in the
        candidate's layout: padded channels and transformed weights as the kernel reads them."""
        return [p for p in self.placeholders(tvm, workload, candidate) if p.op.name in self.resident]

    def workspace(self, workload: dict[str, Any], candidate: dict[str, Any], target: Any = None) -> int:
        """Bytes of global memory the candidate's kernel allocates inside, as scheduled for ``target``
        (None: this host) and lowered with its buffers compacted to what each loop nest touches: a
        padded input, Winograd's transformed tiles, a GEMM's packed panels, a padded output before
        its unpack. Local (register and stack) buffers are not counted; a buffer allocated inside a
        parallel loop counts once, though each thread has its own.

        Example:
            >>> from layoutopt.tvm.kernels import FAMILIES
            >>> wl = {"op": "conv2d", "data": [1, 16, 8, 8], "kernel": [16, 16, 3, 3], "strides": [1, 1],
            ...       "padding": [1, 1, 1, 1], "dilation": [1, 1], "groups": 1, "dtype": "float32"}
            >>> avx512 = {"kind": "llvm", "mcpu": "skylake-avx512"}
            >>> FAMILIES["conv2d", "direct"].workspace(wl, {"in": "NCHW16c", "out": "NCHW16c"}, avx512)
            6912

            The padded input (10 x 10 x 16 floats, 6400 bytes) and the register tile the kernel
            accumulates into (8 x 16 floats).
        """
        from .._tvm import import_tvm, resolve_target
        from .common import allocated_bytes
        from .workload import validate_workload

        tvm = import_tvm()
        workload, target = validate_workload(workload), resolve_target(target)
        with target:
            inputs = self.placeholders(tvm, workload, candidate)
            func = tvm.te.create_prim_func([*inputs, self.output(tvm, inputs, workload, candidate)])
            sch = self.schedule(func, target)
        return allocated_bytes(tvm.IRModule({"main": sch.mod["main"]}))

    def memory(self, workload: dict[str, Any], candidate: dict[str, Any], target: Any = None) -> int:
        """Bytes a build holds for the candidate's kernel: its :meth:`resident_inputs` (the weight as
        packed or transformed, padded channels included) plus its :meth:`workspace` for ``target``.
        Activations are not counted (they are the same tensors whichever kernel computes them).

        Example:
            >>> from layoutopt.tvm.kernels import FAMILIES
            >>> wl = {"op": "conv2d", "data": [1, 16, 8, 8], "kernel": [16, 16, 3, 3], "strides": [1, 1],
            ...       "padding": [1, 1, 1, 1], "dilation": [1, 1], "groups": 1, "dtype": "float32"}
            >>> winograd = {"in": "NCHW16c", "out": "NCHW16c", "algorithm": "winograd", "tile": 4}
            >>> family = FAMILIES["conv2d", "winograd"]
            >>> family.memory(wl, winograd) - family.workspace(wl, winograd)   # 4x the weight's 9216 bytes
            36864
        """
        from .._tvm import import_tvm
        from .workload import validate_workload

        tvm = import_tvm()
        workload = validate_workload(workload)
        resident = sum(tensor_bytes(p.shape, p.dtype)
                       for p in self.resident_inputs(tvm, workload, candidate))
        return resident + self.workspace(workload, candidate, target)

    def output(self, tvm: Any, inputs: Sequence, workload: dict[str, Any], candidate: dict[str, Any]) -> Any:
        """:meth:`compute`, then the workload's epilogue steps (each named in :attr:`epilogue`), as
        ``FuseOps`` fuses them (:func:`.epilogue.apply_te`); the last ``inputs`` are the operands of
        its per-channel and residual-add steps.

        Example:
            >>> import tvm
            >>> from layoutopt.tvm.kernels import FAMILIES
            >>> family, candidate = FAMILIES["conv2d", "direct"], {"in": "NCHW8c", "out": "NCHW8c"}
            >>> wl = {"op": "conv2d", "data": [1, 16, 8, 8], "kernel": [16, 16, 3, 3], "strides": [1, 1],
            ...       "padding": [1, 1, 1, 1], "dilation": [1, 1], "groups": 1, "dtype": "float32",
            ...       "epilogue": ["bias", "relu"]}
            >>> inputs = family.placeholders(tvm, wl, candidate)     # data, weight, then the bias
            >>> [tuple(placeholder.shape) for placeholder in inputs]
            [(1, 2, 8, 8, 8), (2, 2, 3, 3, 8, 8), (1, 2, 1, 1, 8)]
            >>> family.output(tvm, inputs, wl, candidate).shape     # relu(conv + bias), NCHW8c
            (1, 2, 8, 8, 8)
        """
        steps = list(workload.get("epilogue", []))
        unfused = [step for step in steps if step_name(step) not in self.epilogue]
        if unfused:
            raise ProblemError(f"{self!r} does not fuse the epilogue steps {unfused}")
        operands = sum(takes_operand(step) for step in steps)
        out = self.compute(tvm, inputs[: len(inputs) - operands], workload, candidate)
        return apply_te(tvm, steps, out, inputs[len(inputs) - operands:])

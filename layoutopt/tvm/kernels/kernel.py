"""One measurable kernel: (workload, candidate) -> a scheduled single-function module, fed and checked.

A *candidate* picks one kernel family and its options for a workload; its ``"algorithm"`` key
(absent: ``"direct"``) names the family within the workload's op (:func:`~.registry.family`: every
family implements :class:`~.family.KernelFamily`). A conv2d candidate with an ``"oc_block"`` runs its
family's blocked kernel on padded output channels (:class:`~.padded.PaddedKernels`).

The kernel built here is scheduled by :func:`~layoutopt.tvm.kernels.module.schedule_primfunc`, the
code that schedules the functions of a whole build: its time is the time of the kernel the build runs.

Example:
    >>> wl = {"op": "conv2d", "data": [1, 16, 8, 8], "kernel": [16, 16, 3, 3], "strides": [1, 1],
    ...       "padding": [1, 1, 1, 1], "dilation": [1, 1], "groups": 1, "dtype": "float32"}
    >>> kernel = build_kernel(wl, {"in": "NCHW8c", "out": "NCHW8c"}, target="llvm")
    >>> kernel.arg_shapes        # data, weight, output: NCHW8c, OIHW8i8o, NCHW8c
    [(1, 2, 8, 8, 8), (2, 2, 3, 3, 8, 8), (1, 2, 8, 8, 8)]
    >>> check_kernel(kernel) < 1e-5       # max relative error against numpy (float32 rounding)
    True
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import ProblemError
from .._tvm import import_tvm, resolve_target
from .candidate import DIRECT
from .family import KernelFamily
from .registry import FAMILIES, family, validate_candidate
from .workload import validate_workload

__all__ = ["RELATIVE_TOLERANCE", "Kernel", "build_kernel", "check_kernel", "kernel_tensors",
           "reference_output"]

#: largest relative error accepted against the numpy reference (float32, reductions up to ~5000 terms)
RELATIVE_TOLERANCE = 1e-3


def reference_output(workload: dict[str, Any], inputs: Sequence[np.ndarray]) -> np.ndarray:
    """The logical (NCHW / NC) output of ``workload`` computed with numpy from logical inputs."""
    return FAMILIES[workload["op"], DIRECT].reference(workload, inputs)


@dataclass
class Kernel:
    """A scheduled single-kernel module plus what is needed to feed and check it.

    ``module`` holds one PrimFunc named ``name``; ``arg_shapes`` lists its buffers (inputs, then the
    output); :meth:`pack_inputs` turns logical numpy inputs into the kernel's layouts and
    :meth:`unpack_output` maps its output back to the logical layout.
    """

    workload: dict[str, Any]
    candidate: dict[str, Any]
    module: Any
    name: str
    arg_shapes: list[tuple[int, ...]]
    dtype: str

    @property
    def family(self) -> KernelFamily:
        """The kernel family of its candidate."""
        return family(self.workload, self.candidate)

    def logical_inputs(self, seed: int = 0) -> list[np.ndarray]:
        """Random logical inputs (NCHW data, OIHW / NK weights, epilogue operands) of the right shapes."""
        rng = np.random.default_rng(seed)
        return [rng.uniform(-1, 1, size=shape).astype(self.dtype)
                for shape in self.family.logical_shapes(self.workload)]

    def pack_inputs(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Logical inputs -> the arrays the kernel takes (without the output buffer)."""
        return self.family.pack_inputs(self.workload, self.candidate, inputs)

    def device_args(self, inputs: Sequence[np.ndarray], device: Any) -> list[Any]:
        """The kernel's arguments on ``device``: the packed ``inputs``, then a zeroed output buffer."""
        tvm = import_tvm()
        args = [tvm.runtime.tensor(a, device) for a in self.pack_inputs(inputs)]
        args.append(tvm.runtime.tensor(np.zeros(self.arg_shapes[-1], dtype=self.dtype), device))
        return args

    def unpack_output(self, output: np.ndarray) -> np.ndarray:
        """The kernel's output buffer -> the logical NCHW / NC array."""
        return self.family.unpack_output(self.workload, self.candidate, output)


def kernel_tensors(tvm, workload: dict[str, Any], candidate: dict[str, Any]) -> list:
    """The TE tensors of (workload, candidate): its inputs in the kernel's layouts, then its output,
    the conv's fused epilogue (bias, residual add, relu) included, as ``FuseOps`` fuses it
    (:meth:`~.family.KernelFamily.output`)."""
    kernels = family(workload, candidate)
    inputs = kernels.placeholders(tvm, workload, candidate)
    return [*inputs, kernels.output(tvm, inputs, workload, candidate)]


def build_kernel(workload: dict[str, Any], candidate: dict[str, Any], target: Any = None) -> Kernel:
    """Create the TE compute of (workload, candidate) and schedule it as a build would (not compiled yet).

    Compile with ``tvm.compile(kernel.module, target)``; raises ProblemError for bad workloads/candidates
    and for kernels the schedule cannot handle.

    Example:
        >>> wl = {"op": "dense", "data": [1, 64], "weight": [10, 64], "dtype": "float32"}
        >>> kernel = build_kernel(wl, {"in": "NC", "out": "NC"}, target="llvm")
        >>> kernel.name, kernel.arg_shapes
        ('kernel', [(1, 64), (10, 64), (1, 10)])
        >>> executable = import_tvm().compile(kernel.module, target=resolve_target("llvm"))
    """
    from .module import schedule_primfunc

    tvm = import_tvm()
    workload = validate_workload(workload)
    candidate = dict(candidate or {})
    validate_candidate(workload, candidate)
    target = resolve_target(target)
    with target:
        tensors = kernel_tensors(tvm, workload, candidate)
        scheduled = schedule_primfunc(tvm.te.create_prim_func(tensors), target, strict=True)
        name = "kernel"
        module = tvm.IRModule({name: scheduled.with_attr("global_symbol", name)})
    shapes = [tuple(int(d) for d in t.shape) for t in tensors]
    return Kernel(workload, candidate, module, name, shapes, workload["dtype"])


def check_kernel(
    kernel: Kernel,
    executable: Any = None,
    target: Any = None,
    device: Any = None,
    reference: tuple[list[np.ndarray], np.ndarray] | None = None,
    args: Sequence[Any] | None = None,
) -> float:
    """Run ``kernel`` once and return its max error relative to the numpy reference (ProblemError if too big).

    ``executable`` is the compiled ``kernel.module`` or its runtime module, possibly remote (compiled here
    if omitted); ``reference`` is ``(logical_inputs, expected_output)`` to reuse one numpy reference
    across the candidates of a workload; ``args`` the device arrays already holding the packed inputs
    (the last one receives the output).

    Example:
        >>> wl = {"op": "conv2d", "data": [1, 16, 8, 8], "kernel": [16, 16, 3, 3], "strides": [1, 1],
        ...       "padding": [1, 1, 1, 1], "dilation": [1, 1], "groups": 1, "dtype": "float32"}
        >>> check_kernel(build_kernel(wl, {"in": "NCHW8c", "out": "NCHW16c"})) < 1e-5
        True
    """
    tvm = import_tvm()
    if executable is None:
        executable = tvm.compile(kernel.module, target=resolve_target(target))
    module = executable.mod if isinstance(executable, tvm.runtime.Executable) else executable
    device = device or tvm.cpu()
    if reference is None:
        inputs = kernel.logical_inputs()
        reference = (inputs, reference_output(kernel.workload, inputs))
    inputs, expected = reference
    if args is None:
        args = kernel.device_args(inputs, device)
    module[kernel.name](*args)
    actual = kernel.unpack_output(args[-1].numpy())
    scale = max(1.0, float(np.max(np.abs(expected))))
    error = float(np.max(np.abs(actual - expected))) / scale if actual.shape == expected.shape else math.inf
    if not error <= RELATIVE_TOLERANCE:
        raise ProblemError(
            f"{kernel.workload['op']} {kernel.workload} with {kernel.candidate}: wrong result, "
            f"max relative error {error:.3g} > {RELATIVE_TOLERANCE}"
        )
    return error


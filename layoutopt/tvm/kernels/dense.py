"""Dense (``matmul`` by a constant weight): plain ``NK`` or output-feature-packed ``NK{b}n`` weights.

Candidates are ``{"in": "NC", "out": "NC", "weight": "NK"}`` or ``{..., "weight": "NK16n"}`` (weight
``(N/b, K, b)``: the ``b`` output features of one reduction step are contiguous, one vector).

Example:
    >>> FAMILY.candidates({"op": "dense", "data": [1, 2048], "weight": [1000, 2048], "dtype": "float32"})
    [{'in': 'NC', 'out': 'NC', 'weight': 'NK'}, {'in': 'NC', 'out': 'NC', 'weight': 'NK8n'}]
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from ...errors import ProblemError
from .._tvm import import_tvm
from .common import CANDIDATE_ANNOTATION, block_names, schedule_epilogue
from .family import KernelFamily
from .workload import dense_weight_block

__all__ = ["DEFAULT_BLOCKS", "FAMILY", "MAIN_BLOCKS", "Dense"]

#: dense weight blocks (the packed output-feature block is the vector width)
DEFAULT_BLOCKS = (8, 16, 32)
#: the main block of each dense compute: TVM's legalized matmul, and the packed kernel's
MAIN_BLOCKS = ("T_matmul_NT", "T_dense_pack")


class Dense(KernelFamily):
    """Dense by a constant weight, plain or output-feature-packed (see the module's docstring)."""

    op = "dense"
    main_blocks = MAIN_BLOCKS

    def candidates(self, workload: dict[str, Any],
                   blocks: Iterable[int] = DEFAULT_BLOCKS) -> list[dict[str, Any]]:
        """Weight-layout candidates of a dense layer: ``NK`` and ``NK{b}n`` for dividing blocks."""
        features = workload["weight"][0]
        found = [{"in": "NC", "out": "NC", "weight": "NK"}]
        found += [{"in": "NC", "out": "NC", "weight": f"NK{b}n"}
                  for b in sorted(set(blocks)) if features % b == 0]
        return found

    def validate_candidate(self, workload: dict[str, Any], candidate: dict[str, Any]) -> None:
        """Raise ProblemError unless ``candidate`` is a valid dense kernel of the (validated) ``workload``."""
        what = f"dense candidate {candidate!r}"
        try:
            block = dense_weight_block(candidate.get("weight", "NK"))
        except ProblemError:
            raise ProblemError(f"{what}: weight layout must be 'NK' or 'NK<b>n'") from None
        if block and workload["weight"][0] % block:
            raise ProblemError(f"{what}: block {block} does not divide {workload['weight'][0]} features")

    def pack_weight(self, workload: dict[str, Any], candidate: dict[str, Any],
                    weight: np.ndarray) -> np.ndarray:
        """An ``(N, K)`` weight in the candidate's layout.

        Example:
            >>> FAMILY.pack_weight({}, {"weight": "NK16n"}, np.zeros((32, 8))).shape
            (2, 8, 16)
        """
        block = dense_weight_block(candidate.get("weight", "NK"))
        if block is None:
            return np.ascontiguousarray(weight)
        n, k = weight.shape
        return np.ascontiguousarray(weight.reshape(n // block, block, k).transpose(0, 2, 1))

    def reference(self, workload: dict[str, Any], inputs: Sequence[np.ndarray]) -> np.ndarray:
        """``data @ weight.T`` in float64 numpy."""
        data, weight = inputs
        return data.astype(np.float64) @ weight.T.astype(np.float64)

    def logical_shapes(self, workload: dict[str, Any]) -> list[list[int]]:
        """Shapes of the logical inputs: data ``(M, K)`` and weight ``(N, K)``."""
        return [workload["data"], workload["weight"]]

    def pack_inputs(self, workload: dict[str, Any], candidate: dict[str, Any],
                    inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Logical inputs in the kernel's layouts: the data as is, the weight packed."""
        return [inputs[0], self.pack_weight(workload, candidate, inputs[1])]

    def unpack_output(self, workload: dict[str, Any], candidate: dict[str, Any],
                      output: np.ndarray) -> np.ndarray:
        """The output ``(M, N)`` as is."""
        return output

    def placeholders(self, tvm, workload: dict[str, Any], candidate: dict[str, Any]) -> list:
        """TE placeholders of the kernel's inputs: data ``(M, K)`` and the weight in its layout."""
        te = tvm.te
        dtype = workload["dtype"]
        n, k = workload["weight"]
        block = dense_weight_block(candidate.get("weight", "NK"))
        weight_shape = (n, k) if block is None else (n // block, k, block)
        return [te.placeholder(workload["data"], dtype=dtype, name="data"),
                te.placeholder(weight_shape, dtype=dtype, name="weight")]

    def compute(self, tvm, inputs: Sequence, workload: dict[str, Any], candidate: dict[str, Any]):
        """The dense output ``(M, N)`` from the :meth:`placeholders` ``inputs``; a packed weight's kernel
        carries the candidate on its block."""
        te = tvm.te
        data, weight = inputs
        block = dense_weight_block(candidate.get("weight", "NK"))
        if block is None:
            return tvm.topi.nn.dense(data, weight, out_dtype=workload["dtype"])
        # topi.nn.dense_pack is broken in 0.27 (NameError inside); the compute is three lines
        n, k = workload["weight"]
        reduce_k = te.reduce_axis((0, k), name="k")
        return te.compute(
            (workload["data"][0], n),
            lambda i, j: te.sum(data[i, reduce_k] * weight[j // block, reduce_k, j % block], axis=reduce_k),
            name="T_dense_pack",
            attrs={CANDIDATE_ANNOTATION: dict(candidate)},
        )

    def schedule(self, func, target=None):
        """Plain weight: parallel over outputs, the K reduction vectorised through an rfactor; packed
        weight: the ``b`` features of one K step vectorised, accumulated in a register tile."""
        sch = import_tvm().s_tir.Schedule(func)
        names = block_names(sch)
        name = next(n for n in names if n in MAIN_BLOCKS)
        dense = sch.get_sblock(name)
        i, j, k = sch.get_loops(dense)
        if name == "T_matmul_NT":
            # weight rows are contiguous along K: parallel over outputs, reduce with a vectorisable rfactor
            sch.parallel(sch.fuse(i, j))
            if int(sch.get(k).extent) % 16 == 0:
                _, ki = sch.split(k, [None, 16])
                factor = sch.rfactor(ki, 0)
                sch.vectorize(sch.get_loops(factor)[-1])
        else:
            block = next(int(r.source.shape[2]) for r in sch.get(dense).reads if len(r.source.shape) == 3)
            jo, ji = sch.split(j, [None, block])
            sch.reorder(i, jo, k, ji)
            tile = sch.cache_write(dense, 0, "global")
            sch.reverse_compute_at(tile, jo)
            sch.parallel(sch.fuse(i, jo))
            sch.vectorize(ji)
            sch.vectorize(sch.get_loops(tile)[-1])
            sch.decompose_reduction(dense, k)
        schedule_epilogue(sch, names, {name})
        return sch

    def accepts(self, sch) -> bool:
        """A packed dense, or TVM's legalized ``matmul`` by a transposed 2-D weight (not a batched matmul)."""
        names = block_names(sch)
        return "T_dense_pack" in names or len(sch.get_loops(sch.get_sblock("T_matmul_NT"))) == 3


#: the family (:data:`~layoutopt.tvm.kernels.registry.FAMILIES` registers it)
FAMILY = Dense()

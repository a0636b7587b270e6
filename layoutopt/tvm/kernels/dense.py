"""Dense (``matmul`` by a constant weight): plain ``NK`` or output-feature-packed ``NK{b}n`` weights.

Candidates are ``{"in": "NC", "out": "NC", "weight": "NK"}`` or ``{..., "weight": "NK16n"}`` (weight
``(ceil(N/b), K, b)``: the ``b`` output features of one reduction step are contiguous, one vector). A
block that does not divide ``N`` pads the weight with zero features (as ORT's MLAS packs its B
panels): PP-OCR's recogniser ends in a dense to 6625 classes, a prime factor 53, which the plain
kernel ran at 12 ms of the model's 32.

Example:
    >>> FAMILY.candidates({"op": "dense", "data": [1, 2048], "weight": [1000, 2048], "dtype": "float32"})
    [{'in': 'NC', 'out': 'NC', 'weight': 'NK'}, {'in': 'NC', 'out': 'NC', 'weight': 'NK8n'}, \
{'in': 'NC', 'out': 'NC', 'weight': 'NK16n'}, {'in': 'NC', 'out': 'NC', 'weight': 'NK32n'}]
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from ...errors import ProblemError
from .._tvm import import_tvm
from .common import (
    CANDIDATE_ANNOTATION,
    annotated_candidate,
    block_names,
    inline_into_last,
    register_tile_output,
)
from .family import KernelFamily
from .isa import gemm_register_tile, gemm_tile_fits, vector_registers
from .space import ScheduleSpace, check_knobs, divisors
from .workload import dense_weight_block

__all__ = ["DEFAULT_BLOCKS", "FAMILY", "MAIN_BLOCKS", "SCHEDULE_KNOBS", "Dense"]

#: dense weight blocks (the packed output-feature block is the vector width)
DEFAULT_BLOCKS = (8, 16, 32)
#: the main block of each dense compute: TVM's legalized matmul, and the packed kernel's
MAIN_BLOCKS = ("T_matmul_NT", "T_dense_pack")
#: the packed kernel's copy of its output without the padded features (a block that does not divide N)
UNPAD_BLOCK = "T_dense_unpad"
#: the schedule knobs of a packed candidate (its :meth:`space <Dense.space>`): the register tile's
#: rows of the data (``reg_n``: a 1x1 conv's pixels) and feature blocks (``oc_tile``), default
#: :func:`~.isa.gemm_register_tile`'s
SCHEDULE_KNOBS = ("reg_n", "oc_tile")


class Dense(KernelFamily):
    """Dense by a constant weight, plain or output-feature-packed (see the module's docstring)."""

    op = "dense"
    main_blocks = MAIN_BLOCKS
    resident = ("weight",)

    def candidates(self, workload: dict[str, Any],
                   blocks: Iterable[int] = DEFAULT_BLOCKS) -> list[dict[str, Any]]:
        """Weight-layout candidates of a dense layer: ``NK`` and ``NK{b}n`` for each block no wider
        than the features padded to a vector (a 24-feature layer gets 8 and 16, not 32)."""
        features = workload["weight"][0]
        found = [{"in": "NC", "out": "NC", "weight": "NK"}]
        found += [{"in": "NC", "out": "NC", "weight": f"NK{b}n"}
                  for b in sorted(set(blocks)) if b < features + min(blocks)]
        return found

    def validate_candidate(self, workload: dict[str, Any], candidate: dict[str, Any]) -> None:
        """Raise ProblemError unless ``candidate`` is a valid dense kernel of the (validated) ``workload``."""
        what = f"dense candidate {candidate!r}"
        try:
            block = dense_weight_block(candidate.get("weight", "NK"))
        except ProblemError:
            raise ProblemError(f"{what}: weight layout must be 'NK' or 'NK<b>n'") from None
        knobs = sorted(set(candidate) & set(SCHEDULE_KNOBS))
        if knobs and block is None:
            raise ProblemError(f"{what}: only a packed weight's kernel has schedule knobs ({knobs})")
        if block is not None:
            check_knobs(candidate, self.knob_domain(workload, candidate), what)

    def knob_domain(self, workload: dict[str, Any], candidate: dict[str, Any]) -> dict[str, tuple]:
        """The values each knob of a packed candidate may take on any target: ``reg_n`` up to the rows,
        ``oc_tile`` up to the feature blocks (a last tile may be partial)."""
        block = dense_weight_block(candidate["weight"])
        return {"reg_n": tuple(range(1, workload["data"][0] + 1)),
                "oc_tile": tuple(range(1, -(-workload["weight"][0] // block) + 1))}

    def space(self, workload: dict[str, Any], candidate: dict[str, Any], target: Any = None) -> ScheduleSpace:
        """A packed kernel's knobs on ``target``: tiles of rows and feature blocks dividing them, of 4
        accumulators or more (or the heuristic's count) that :func:`~.isa.gemm_tile_fits` the
        target's registers; the plain ``NK`` kernel has none.

        Example:
            >>> wl = {"op": "dense", "data": [1, 2048], "weight": [1000, 2048], "dtype": "float32"}
            >>> space = FAMILY.space(wl, {"in": "NC", "out": "NC", "weight": "NK16n"},
            ...                      {"kind": "llvm", "mcpu": "znver4"})
            >>> space.default(), dict(space.knobs)["oc_tile"]      # 1000 features: 63 blocks of 16
            ({'reg_n': 1, 'oc_tile': 21}, (7, 9, 21))
        """
        block = dense_weight_block(candidate.get("weight", "NK"))
        if block is None:
            return ScheduleSpace()
        rows, blocks = workload["data"][0], -(-workload["weight"][0] // block)
        per_block = -(-block // vector_registers(target)[0])
        _, tile_rows, tile_blocks = gemm_register_tile(1, rows, blocks, block, target)
        fewest = min(4, tile_rows * tile_blocks * per_block)

        def fits(point: dict[str, Any]) -> bool:
            return (point["reg_n"] * point["oc_tile"] * per_block >= fewest
                    and gemm_tile_fits(point["reg_n"], point["oc_tile"], block, target))

        return ScheduleSpace.build({"reg_n": divisors(rows), "oc_tile": divisors(blocks)},
                                   {"reg_n": tile_rows, "oc_tile": tile_blocks}, fits)

    def pack_weight(self, workload: dict[str, Any], candidate: dict[str, Any],
                    weight: np.ndarray) -> np.ndarray:
        """An ``(N, K)`` weight in the candidate's layout, zero features padding the last block.

        Example:
            >>> FAMILY.pack_weight({}, {"weight": "NK16n"}, np.zeros((24, 8))).shape
            (2, 8, 16)
        """
        block = dense_weight_block(candidate.get("weight", "NK"))
        if block is None:
            return np.ascontiguousarray(weight)
        n, k = weight.shape
        padded = np.zeros((-(-n // block) * block, k), dtype=weight.dtype)
        padded[:n] = weight
        return np.ascontiguousarray(padded.reshape(-1, block, k).transpose(0, 2, 1))

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
        weight_shape = (n, k) if block is None else (-(-n // block), k, block)
        return [te.placeholder(workload["data"], dtype=dtype, name="data"),
                te.placeholder(weight_shape, dtype=dtype, name="weight")]

    def compute(self, tvm, inputs: Sequence, workload: dict[str, Any], candidate: dict[str, Any]):
        """The dense output ``(M, N)`` from the :meth:`placeholders` ``inputs``; a packed weight's kernel
        carries the candidate on its block, and computes whole blocks (a padded last one copied out
        without its zero features)."""
        te = tvm.te
        data, weight = inputs
        block = dense_weight_block(candidate.get("weight", "NK"))
        if block is None:
            return tvm.topi.nn.dense(data, weight, out_dtype=workload["dtype"])
        # topi.nn.dense_pack is broken in 0.27 (NameError inside); the compute is three lines
        n, k = workload["weight"]
        reduce_k = te.reduce_axis((0, k), name="k")
        packed = te.compute(
            (workload["data"][0], int(weight.shape[0]) * block),
            lambda i, j: te.sum(data[i, reduce_k] * weight[j // block, reduce_k, j % block], axis=reduce_k),
            name="T_dense_pack",
            attrs={CANDIDATE_ANNOTATION: dict(candidate)},
        )
        if n % block == 0:
            return packed
        return te.compute((workload["data"][0], n), lambda i, j: packed[i, j], name=UNPAD_BLOCK)

    def schedule(self, func, target=None):
        """Plain weight: parallel over outputs, the K reduction vectorised through an rfactor. Packed
        weight: a register tile of rows x feature blocks (:func:`~.isa.gemm_register_tile`, the rows
        as a 1x1 conv's pixels); per K step, each block's weight vectors loaded once and each row's
        value broadcast once. Parallel over (feature blocks, row tiles), in that order, so that the
        tasks next to each other share a ``K x b`` weight panel in L1: the weight streams from memory
        once, not once per row (a ``40 x 120 -> 6625`` dense ran 12 ms with one accumulator per row)."""
        sch = import_tvm().s_tir.Schedule(func)
        names = block_names(sch)
        name = next(n for n in names if n in MAIN_BLOCKS)
        epilogue = [n for n in names if n != name]
        dense = sch.get_sblock(name)
        i, j, k = sch.get_loops(dense)
        if name == "T_matmul_NT":
            # weight rows are contiguous along K: parallel over outputs, reduce with a vectorisable rfactor
            sch.parallel(sch.fuse(i, j))
            if int(sch.get(k).extent) % 16 == 0:
                _, ki = sch.split(k, [None, 16])
                factor = sch.rfactor(ki, 0)
                sch.vectorize(sch.get_loops(factor)[-1])
            inline_into_last(sch, epilogue)
            return sch
        rows, features = (int(d) for d in sch.get(dense).writes[0].source.shape)
        block = next(int(r.source.shape[2]) for r in sch.get(dense).reads if len(r.source.shape) == 3)
        _, tile_rows, tile_blocks = gemm_register_tile(1, rows, features // block, block, target)
        knobs = annotated_candidate(sch, dense) or {}
        tile_rows, tile_blocks = int(knobs.get("reg_n", tile_rows)), int(knobs.get("oc_tile", tile_blocks))
        io, ii = sch.split(i, [None, tile_rows])
        jo, jb, ji = sch.split(j, [None, tile_blocks, block])
        # blocks outer, rows inner, as the 1x1 GEMM's tile (whose register count the rule makes)
        sch.reorder(jo, io, k, jb, ii, ji)
        # the epilogue (bias) is finished per tile, unless padded features separate it from the tile
        tile, rest = register_tile_output(sch, dense, epilogue, fuse=UNPAD_BLOCK not in names)
        sch.reverse_compute_at(tile, io)
        sch.parallel(sch.fuse(jo, io))
        sch.vectorize(sch.get_loops(tile)[-1])
        sch.unroll(ii)
        sch.unroll(jb)
        sch.vectorize(ji)
        sch.decompose_reduction(dense, k)
        inline_into_last(sch, rest)
        return sch

    def accepts(self, sch) -> bool:
        """A packed dense, or TVM's legalized ``matmul`` by a transposed 2-D weight (not a batched matmul)."""
        names = block_names(sch)
        return "T_dense_pack" in names or len(sch.get_loops(sch.get_sblock("T_matmul_NT"))) == 3


#: the family (:data:`~layoutopt.tvm.kernels.registry.FAMILIES` registers it)
FAMILY = Dense()

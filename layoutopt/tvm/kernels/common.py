"""Schedule pieces every kernel family uses: block lookup, parallel + vectorised loops, epilogues.

These operate on a ``tvm.s_tir.Schedule``; they hold no policy of their own (the families and
:mod:`~layoutopt.tvm.kernels.module` decide what to call).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._tvm import import_tvm

#: the PrimFunc attribute telling TVM's lowering (and :func:`~layoutopt.tvm.schedule_module`) that a
#: function is scheduled already
SCHEDULED_ATTR = "tirx.is_scheduled"

#: the block annotation carrying a kernel's candidate (algorithm, layouts, schedule knobs) from the
#: compute to the scheduler. Set by ``te.compute(..., attrs=...)`` on the kernel's main block, it
#: survives legalization and ``FuseTIR``: the schedule of a fused function finds its knobs on the
#: very block they belong to.
CANDIDATE_ANNOTATION = "layoutopt_candidate"

#: the block annotation carrying the workload a kernel computes (its fused epilogue included), beside
#: its candidate: with both, a function of a build names the cost-cache entry of the kernel it runs
WORKLOAD_ANNOTATION = "layoutopt_workload"

#: the widest innermost loop vectorised whole. LLVM splits a wide vector into register-sized pieces,
#: fine for the rows of NCHW tensors (up to 518 here); but a flattened tensor (SSD's heads: 12 reshapes
#: to (1, N) fused into one concat, N = 331776) made one giant vector, and LLVM aborted the process
#: ("Cannot implicitly convert a scalable size to a fixed-width size"). Longer loops are split.
MAX_VECTOR_LOOP = 1024
#: the lanes of a vectorised innermost loop longer than this are split off, where a multiple of 8
#: divides it: one vector of a whole row makes LLVM's compile time grow faster than the row. A
#: detector head's padded ConvTranspose with its sigmoid, writing 640-wide NCHW rows, compiled for over
#: 60 s (its measurement timed out) against 0.2 s in 64-lane pieces; on 160x160 inputs 10.2 s against 0.2,
#: and it ran 1.07x faster (schedule version 12)
VECTOR_LANES = 64


def block_names(sch) -> list[str]:
    """Names of the root block's children, in program order."""
    return [sch.get(b).name_hint for b in sch.get_child_blocks(sch.get_sblock("root"))]


def param_shape(func, index: int) -> list[int]:
    """The static shape of a PrimFunc's ``index``-th parameter buffer."""
    param = func.params[index]
    buffer = func.buffer_map[param] if hasattr(func, "buffer_map") else param
    return [int(s) for s in buffer.shape]


def param_shapes(func) -> list[list[int]]:
    """Static shapes of all of a PrimFunc's parameters, in order (inputs, then outputs)."""
    return [param_shape(func, i) for i in range(len(func.params))]


def plain_value(value: Any) -> Any:
    """A TVM annotation value as a plain Python value: tvm-ffi hands back strings and numbers as
    such, but a dict as a ``Map``, a list as an ``Array`` (and a number made in TIR as an ``IntImm``
    or ``FloatImm``)."""
    tvm = import_tvm()
    if hasattr(value, "items"):
        return {str(k): plain_value(v) for k, v in value.items()}
    if isinstance(value, (tvm.tirx.IntImm, tvm.tirx.FloatImm)):
        return value.value
    if not isinstance(value, (str, bytes)) and hasattr(value, "__len__") and hasattr(value, "__getitem__"):
        return [plain_value(v) for v in value]
    return value


def kernel_annotations(workload: dict[str, Any], candidate: dict[str, Any]) -> dict[str, Any]:
    """The annotations of a kernel's main block (``te.compute(..., attrs=...)``): its candidate
    (:data:`CANDIDATE_ANNOTATION`) and its workload (:data:`WORKLOAD_ANNOTATION`)."""
    return {CANDIDATE_ANNOTATION: dict(candidate), WORKLOAD_ANNOTATION: dict(workload)}


def annotated_candidate(sch, block) -> dict[str, Any] | None:
    """The candidate dict a kernel's main block carries (:data:`CANDIDATE_ANNOTATION`), or None."""
    return _annotation(sch, block, CANDIDATE_ANNOTATION)


def annotated_workload(sch, block) -> dict[str, Any] | None:
    """The workload dict a kernel's main block carries (:data:`WORKLOAD_ANNOTATION`), or None."""
    return _annotation(sch, block, WORKLOAD_ANNOTATION)


def _annotation(sch, block, key: str) -> dict[str, Any] | None:
    annotations = sch.get(block).annotations
    return plain_value(annotations[key]) if key in annotations else None


def parallel_over(sch, loops: Sequence) -> None:
    """Run ``loops`` (adjacent, outermost first) as one parallel loop: fused when there are several."""
    sch.parallel(sch.fuse(*loops) if len(loops) > 1 else loops[0])


def parallel_vectorize(sch, block, max_parallel_loops: int = 3) -> None:
    """Parallelise the outer spatial loops of an injective block and vectorise its innermost loop,
    split first (:func:`vector_lanes`) into an outer part and the lanes vectorised."""
    loops = sch.get_loops(block)
    extent = sch.get(loops[-1]).extent if loops else None
    if isinstance(extent, import_tvm().tirx.IntImm) and (lanes := vector_lanes(extent.value)) < extent.value:
        loops = [*loops[:-1], *sch.split(loops[-1], [None, lanes])]
    if len(loops) > 1:
        parallel_over(sch, loops[: min(max_parallel_loops, len(loops) - 1)])
    if loops:
        sch.vectorize(loops[-1])


def vector_lanes(extent: int) -> int:
    """The lanes an innermost loop of ``extent`` is vectorised in: the whole loop up to
    :data:`VECTOR_LANES`; beyond, the largest multiple of 8 up to :data:`VECTOR_LANES` that divides it
    (no tail); else the whole loop up to :data:`MAX_VECTOR_LOOP` (a prime width keeps one wide vector,
    which LLVM splits with one tail), and the largest divisor up to :data:`VECTOR_LANES` of a longer one.

    Example:
        >>> [vector_lanes(n) for n in (16, 640, 160, 112, 331, 331776)]
        [16, 64, 40, 56, 331, 64]
    """
    if extent <= VECTOR_LANES:
        return extent
    divisors = [d for d in range(8, VECTOR_LANES + 1, 8) if extent % d == 0]
    if divisors:
        return divisors[-1]
    if extent <= MAX_VECTOR_LOOP:
        return extent
    return max(d for d in range(1, VECTOR_LANES + 1) if extent % d == 0)


def schedule_injective(sch) -> None:
    """Every block of the function parallel and vectorised (layout transforms, elementwise ops)."""
    for name in block_names(sch):
        parallel_vectorize(sch, sch.get_sblock(name))


def is_spatial(sch, block) -> bool:
    """A block with no reduction axis."""
    return all(int(v.iter_type) == 0 for v in sch.get(block).iter_vars)


def is_elementwise_after(sch, name: str, producer) -> bool:
    """Does block ``name`` write a tensor of the producer's shape (bias, relu, add: not a layout
    transform, which FuseOps also fuses and which a register tile of the producer cannot finish)?"""
    block = sch.get_sblock(name)
    shape = [int(d) for d in sch.get(block).writes[0].source.shape]
    return is_spatial(sch, block) and shape == [int(d) for d in sch.get(producer).writes[0].source.shape]


def schedule_epilogue(sch, names: Sequence[str], done: set[str]) -> None:
    """Blocks fused after the main kernel (bias, relu, add...) or a separate unpack step, but those in
    ``done``, that the register tile did not finish: run after the kernel in one pass
    (:func:`inline_into_last`). Each on its own, an epilogue of five steps (exact GELU) made five
    passes over the output through four intermediates: 22 ms after a direct 1x1 conv 48->96 at
    160x160 into NCHW32c (znver4), against 4.6 ms in one pass."""
    inline_into_last(sch, [name for name in names
                           if name not in done and is_spatial(sch, sch.get_sblock(name))])


def register_tile_output(sch, conv, epilogue: Sequence[str], fuse: bool = True):
    """``(block, rest)``: the block that writes a register-tiled conv's output tile, and the
    epilogue blocks left to schedule on their own.

    When ``fuse`` and every block of the fused ``epilogue`` (bias, relu, residual add...) is
    elementwise after ``conv``, they are finished per register tile, right after the tile's
    accumulation: the middle ones inlined, the last one writing the tile, the conv's own output a
    local buffer that never leaves it (the output tensor is written once instead of being re-read by
    every elementwise op). Otherwise (or when two of them bind values: :func:`nested_bindings`) a
    cache of the conv's output writes the tile and the epilogue runs after the conv."""
    if fuse and epilogue and all(is_elementwise_after(sch, name, conv) for name in epilogue) and \
            not nested_bindings(sch, epilogue):
        for name in epilogue[:-1]:
            sch.compute_inline(sch.get_sblock(name))
        sch.set_scope(conv, 0, "local")
        return sch.get_sblock(epilogue[-1]), []
    return sch.cache_write(conv, 0, "global"), list(epilogue)


def finish_register_tile(sch, tile, owo, outer: tuple, ocb, owi) -> None:
    """The blocked convolutions' common tail: the output tile (``[reg_n, oc_bn]``) is written per
    ``owo`` step, the outer loops run in parallel, the channel block is vectorised and the row
    of ``reg_n`` columns unrolled."""
    sch.reverse_compute_at(tile, owo)
    sch.parallel(sch.fuse(*outer))
    sch.vectorize(sch.get_loops(tile)[-1])
    sch.vectorize(ocb)
    sch.unroll(owi)


def binds_values(sch, name: str) -> bool:
    """Does block ``name`` compute its value through variables it binds (``Let``: the vectorised exp,
    log, tanh, erf and sigmoid of :mod:`.transcendental`)?"""
    return "T.Let(" in str(sch.get(sch.get_sblock(name)).body)


def nested_bindings(sch, names: Sequence[str]) -> bool:
    """Would inlining blocks ``names`` one into another nest the variables two of them bind? TVM's
    simplifier substitutes each bound value into its uses, so nested, an expression grows
    exponentially with the depth: Mish's exp, log and tanh in one expression took minutes to compile,
    materialised one vector at a time 0.05 s."""
    return sum(binds_values(sch, name) for name in names) > 1


def inline_into_last(sch, names: Sequence[str]) -> None:
    """Injective blocks run one after another (a padded output's unpack, a fused epilogue): each
    inlined into the next, the last parallel and vectorised, so that the chain makes one pass over
    the data; a block that cannot be inlined is scheduled on its own. Of the blocks that bind values
    (:func:`binds_values`), all but the last are computed one vector at a time inside the last
    block's loop rather than inlined (:func:`nested_bindings`)."""
    names = list(names)
    if not names:
        return
    binding = [name for name in names if binds_values(sch, name)]
    materialised = binding[:-1]
    for name in names[:-1]:
        if name in materialised:
            continue
        block = sch.get_sblock(name)
        try:
            sch.compute_inline(block)
        except import_tvm().s_tir.ScheduleError:
            if is_spatial(sch, block):
                parallel_vectorize(sch, block)
    last = sch.get_sblock(names[-1])
    parallel_vectorize(sch, last)
    loops = sch.get_loops(last)
    for name in reversed(materialised):  # consumers first: each lands inside the loop its reader runs in
        block = sch.get_sblock(name)
        if len(loops) < 2:
            parallel_vectorize(sch, block)
            continue
        sch.compute_at(block, loops[-2])
        inner = sch.get_loops(block)
        # a block of one value per step of loops[-2] (a squeeze-excite's per-channel gate) gets no
        # loop of its own there: its innermost loop is the reader's, parallel, not to be vectorised
        if len(inner) >= len(loops):
            sch.vectorize(inner[-1])


def allocated_bytes(module: Any) -> int:
    """Bytes of global memory the functions of a scheduled TIR module allocate, once lowered with their
    buffers compacted to the region each loop nest touches (TVM's own lowering passes, then
    ``calculate_allocated_bytes``); register and stack (``local``) buffers are not counted.

    Example:
        >>> wl = {"op": "conv2d", "data": [1, 16, 8, 8], "kernel": [16, 16, 3, 3], "strides": [1, 1],
        ...       "padding": [1, 1, 1, 1], "dilation": [1, 1], "groups": 1, "dtype": "float32"}
        >>> from layoutopt.tvm.kernels import build_kernel
        >>> avx512 = {"kind": "llvm", "mcpu": "skylake-avx512"}
        >>> kernel = build_kernel(wl, {"in": "NCHW16c", "out": "NCHW16c"}, avx512)
        >>> allocated_bytes(kernel.module)     # the padded input, 10 x 10 x 16 floats, and a register tile
        6912
    """
    tvm = import_tvm()
    passes = tvm.s_tir.transform
    for lower in (passes.LowerInitBlock(), passes.PlanAndUpdateBufferAllocationLocation(),
                  passes.ConvertBlocksToOpaque(), passes.CompactBufferAllocation(),
                  passes.LowerOpaqueBlock()):
        module = lower(module)
    scopes = tvm.s_tir.analysis.calculate_allocated_bytes(module)
    return sum(int(sizes.get("global", 0)) for sizes in scopes.values())

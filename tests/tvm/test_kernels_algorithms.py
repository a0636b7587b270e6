"""Conv2d algorithm families (Winograd, 1x1 GEMM): candidates, transforms, numerics against numpy on
both vector ISAs, fused epilogues, the block annotations the module scheduler reads."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

pytest.importorskip("tvm")

from kernel_checks import AVX2, AVX512, build_and_check  # tests/tvm is on sys.path

from layoutopt import ProblemError
from layoutopt.tvm import kernels
from layoutopt.tvm._tvm import import_tvm, resolve_target
from layoutopt.tvm.kernels import build_kernel
from layoutopt.tvm.kernels import gemm as kernels_gemm
from layoutopt.tvm.kernels import winograd as kernels_winograd
from layoutopt.tvm.kernels.common import annotated_candidate, block_names
from layoutopt.tvm.kernels.isa import gemm_register_tile

pytestmark = pytest.mark.tvm

WINOGRAD, GEMM = kernels_winograd.FAMILY, kernels_gemm.FAMILY


def conv(data, kernel, strides=(1, 1), padding=(1, 1, 1, 1), groups=1, epilogue=()):
    workload = {"op": "conv2d", "data": list(data), "kernel": list(kernel), "strides": list(strides),
                "padding": list(padding), "dilation": [1, 1], "groups": groups, "dtype": "float32"}
    if epilogue:
        workload["epilogue"] = list(epilogue)
    return workload


def winograd(ib, ob, tile, **knobs):
    return {"in": f"NCHW{ib}c", "out": f"NCHW{ob}c", "algorithm": "winograd", "tile": tile, **knobs}


def gemm(ib, ob, **knobs):
    return {"in": f"NCHW{ib}c", "out": f"NCHW{ob}c", "algorithm": "gemm", **knobs}


# -- Winograd --------------------------------------------------------------------------------------


def test_winograd_applies_to_3x3_stride_1_ungrouped_convs_only():
    assert WINOGRAD.applies(conv([1, 16, 8, 8], [16, 16, 3, 3]))
    assert WINOGRAD.applies(conv([1, 16, 8, 8], [16, 16, 3, 3], padding=(0, 0, 0, 0)))
    assert not WINOGRAD.applies(conv([1, 16, 8, 8], [16, 16, 3, 3], strides=(2, 2)))
    assert not WINOGRAD.applies(conv([1, 16, 8, 8], [16, 16, 1, 1], padding=(0, 0, 0, 0)))
    assert not WINOGRAD.applies(conv([1, 16, 8, 8], [16, 1, 3, 3], groups=16))
    assert WINOGRAD.candidates(conv([1, 16, 8, 8], [16, 16, 3, 3], strides=(2, 2))) == []


def test_winograd_candidates_pair_blocks_and_tiles_with_vector_wide_outputs():
    wl = kernels.validate_workload(conv([1, 16, 8, 8], [32, 16, 3, 3]))
    cands = WINOGRAD.candidates(wl, blocks=[4, 8, 16, 32], tiles=[2, 4], orders=["positions"])
    assert {(c["in"], c["out"], c["tile"]) for c in cands} == set(
        itertools.product(["NCHW4c", "NCHW8c", "NCHW16c"], ["NCHW8c", "NCHW16c", "NCHW32c"], [2, 4]))
    assert all(c["algorithm"] == "winograd" and "order" not in c for c in cands)
    # every order by default, the default order without an "order" key
    both = WINOGRAD.candidates(wl, blocks=[16], tiles=[4])
    assert both == [winograd(16, 16, 4), winograd(16, 16, 4, order="tiles")]
    with pytest.raises(ProblemError, match="orders"):
        WINOGRAD.candidates(wl, orders=["zigzag"])


def test_winograd_rejects_bad_candidates():
    wl = kernels.validate_workload(conv([1, 16, 8, 8], [16, 16, 3, 3]))
    unblocked = {"in": "NCHW", "out": "NCHW", "algorithm": "winograd", "tile": 2}
    for bad, message in [(winograd(16, 16, 7), "tile"), (unblocked, "blocked"),
                         (winograd(32, 16, 2), "divide"), (winograd(16, 16, 2, order="zigzag"), "order"),
                         (winograd(16, 16, 2, unroll_kw=1), "unknown keys"),
                         (winograd(16, 16, 2, reg_n=3), "reg_n=3")]:  # its register tile: 4 tiles a row
        with pytest.raises(ProblemError, match=message):
            WINOGRAD.validate_candidate(wl, bad)
    strided = kernels.validate_workload(conv([1, 16, 8, 8], [16, 16, 3, 3], strides=(2, 2)))
    with pytest.raises(ProblemError, match="stride 1"):
        WINOGRAD.validate_candidate(strided, winograd(16, 16, 2))


@pytest.mark.parametrize("tile", [2, 4, 6])
def test_winograd_matrices_compute_a_3x3_correlation(tile):
    # one tile in float64: A^T [(G g G^T) * (B^T d B)] A is the valid 3x3 correlation of d with g
    a, b, g = kernels_winograd.transform_matrices(tile)
    rng = np.random.default_rng(tile)
    d, w = rng.standard_normal((tile + 2, tile + 2)), rng.standard_normal((3, 3))
    winograd_out = a.T @ ((g @ w @ g.T) * (b.T @ d @ b)) @ a
    direct = np.array([[np.sum(d[i:i + 3, j:j + 3] * w) for j in range(tile)] for i in range(tile)])
    np.testing.assert_allclose(winograd_out, direct, rtol=1e-9, atol=1e-9)


def test_winograd_weight_transform_layout():
    rng = np.random.default_rng(0)
    kernel = rng.standard_normal((32, 8, 3, 3)).astype("float32")
    packed = kernels_winograd.weight_transform(kernel, winograd(8, 16, 4))
    assert packed.shape == (2, 6, 6, 8, 16) and packed.dtype == np.float32
    _, _, g = kernels_winograd.transform_matrices(4)
    o, i, e, v = 21, 5, 3, 2  # output channel 21 = block 1, lane 5
    expected = (g @ kernel[o, i].astype(np.float64) @ g.T)[e, v]
    np.testing.assert_allclose(packed[1, e, v, i, 5], expected, rtol=1e-6)
    with pytest.raises(ProblemError, match="3x3"):
        kernels_winograd.weight_transform(np.zeros((16, 16, 1, 1)), winograd(16, 16, 2))


@pytest.mark.parametrize("target", [AVX512, AVX2], ids=["avx512", "avx2"])
@pytest.mark.parametrize("tile,order", [(2, "positions"), (4, "tiles"), (4, "positions"), (6, "tiles")])
def test_winograd_matches_numpy(target, tile, order):
    # odd sizes (partial tiles), asymmetric padding, in block != out block, batch 2
    wl = conv([2, 16, 9, 7], [32, 16, 3, 3], padding=(1, 2, 0, 1))
    knobs = {} if order == kernels_winograd.ORDERS[0] else {"order": order}
    assert build_and_check(wl, winograd(8, 16, tile, **knobs), target) < 1e-4


def test_winograd_pads_a_prime_count_of_tile_columns():
    # 22 output columns = 11 tiles of 2: computed as 12 (a register tile of 4 or 6 divides them)
    wl = conv([1, 8, 3, 22], [16, 8, 3, 3])
    assert kernels_winograd._tiles(kernels.validate_workload(wl), 2) == (2, 12)
    assert build_and_check(wl, winograd(8, 16, 2), AVX2) < 1e-5
    assert build_and_check(wl, winograd(8, 16, 2, order="tiles"), AVX2) < 1e-5


def test_winograd_fused_epilogue_is_inlined_into_the_output_transform():
    tvm = import_tvm()
    wl = conv([1, 16, 6, 6], [16, 16, 3, 3], epilogue=["bias", "add", "relu"])
    cand = winograd(16, 16, 2)
    kernel = build_kernel(wl, cand, AVX2)
    sch = tvm.s_tir.Schedule(kernel.module["kernel"])
    names = block_names(sch)
    assert not any(name.startswith(("T_add", "T_relu", "compute")) for name in names), names
    assert kernels.check_kernel(kernel, tvm.compile(kernel.module, target=resolve_target(AVX2))) < 1e-5


def test_winograd_blocks_carry_their_roles_and_the_gemm_the_candidate():
    tvm = import_tvm()
    wl = kernels.validate_workload(conv([1, 16, 6, 6], [16, 16, 3, 3]))
    cand = winograd(16, 16, 4, order="tiles")
    with resolve_target(AVX2):
        inputs = WINOGRAD.placeholders(tvm, wl, cand)
        out = WINOGRAD.compute(tvm, inputs, wl, cand)
    sch = tvm.s_tir.Schedule(tvm.te.create_prim_func([*inputs, out]))
    roles = {}
    for block in sch.get_child_blocks(sch.get_sblock("root")):
        role = sch.get(block).annotations.get(kernels_winograd.STAGE_ANNOTATION)
        if role is not None:
            roles[str(role)] = block
    assert set(roles) == {"input_rows", "input", "gemm", "output_rows", "output"}
    assert sch.get(roles["gemm"]).name_hint in kernels_winograd.MAIN_BLOCKS
    assert annotated_candidate(sch, roles["gemm"]) == cand


def test_winograd_gemm_register_tile_for_a_row_of_seven_tiles():
    # (the 1x1 GEMM's rule, gemm_register_tile): a row of 7 tiles x two 16-channel blocks on AVX-512
    assert gemm_register_tile(7, 7, 8, 16, AVX512) == (1, 7, 2)


# -- 1x1 GEMM --------------------------------------------------------------------------------------


def test_gemm_applies_to_unpadded_1x1_convs():
    assert GEMM.applies(conv([1, 16, 8, 8], [32, 16, 1, 1], padding=(0, 0, 0, 0)))
    assert GEMM.applies(conv([1, 16, 8, 8], [32, 16, 1, 1], strides=(2, 2), padding=(0, 0, 0, 0)))
    assert not GEMM.applies(conv([1, 16, 8, 8], [32, 16, 1, 1], padding=(1, 1, 1, 1)))
    assert not GEMM.applies(conv([1, 16, 8, 8], [32, 16, 3, 3]))
    cands = GEMM.candidates(conv([1, 16, 8, 8], [32, 16, 1, 1], padding=(0, 0, 0, 0)), blocks=[4, 16],
                                    orders=kernels_gemm.ORDERS)
    assert cands == [gemm(4, 16), gemm(4, 16, order="rows"), gemm(16, 16), gemm(16, 16, order="rows"),
                     kernels_gemm.NCHW_CANDIDATE]  # stride 1 on a map 8-pixel vectors tile


def test_gemm_weight_is_the_direct_kernels_packing():
    kernel = np.random.default_rng(0).standard_normal((32, 16, 1, 1)).astype("float32")
    packed = kernels_gemm.weight_transform(kernel, gemm(8, 16))
    assert packed.shape == (2, 16, 16)
    direct = kernels.pack_conv2d_kernel(kernel, {"in": "NCHW8c", "out": "NCHW16c"})
    np.testing.assert_array_equal(packed.ravel(), direct.ravel())


@pytest.mark.parametrize("target", [AVX512, AVX2], ids=["avx512", "avx2"])
@pytest.mark.parametrize("strides,ib,ob,order", [((1, 1), 8, 16, "oc"), ((2, 2), 16, 8, "rows")])
def test_gemm_matches_numpy_with_epilogue(target, strides, ib, ob, order):
    wl = conv([2, 16, 10, 14], [32, 16, 1, 1], strides=strides, padding=(0, 0, 0, 0),
              epilogue=["bias", "add", "relu"])
    knobs = {} if order == "oc" else {"order": order}
    assert build_and_check(wl, gemm(ib, ob, **knobs), target) < 1e-5


@pytest.mark.parametrize("target", [AVX512, AVX2], ids=["avx512", "avx2"])
@pytest.mark.parametrize("order", ["oc", "rows"])
def test_gemm_with_a_partial_last_tile_of_channel_blocks_matches_numpy(target, order):
    # 104 output channels: 13 blocks of 8, which only one-block tiles divide; the tile of several
    # blocks leaves a partial last tile
    wl = conv([1, 24, 5, 8], [104, 24, 1, 1], padding=(0, 0, 0, 0), epilogue=["bias", "add", "relu"])
    assert gemm_register_tile(5, 8, 13, 8, target, partial_blocks=True)[2] not in (1, 13)
    knobs = {} if order == "oc" else {"order": order}
    assert build_and_check(wl, gemm(8, 8, **knobs), target) < 1e-5


def test_gemm_register_tile_reuses_weights_and_fits_the_registers():
    # 7x7 maps: one row of 7 pixels x two 16-channel blocks (14 zmm), not 8 blocks of one pixel
    assert gemm_register_tile(7, 7, 32, 16, AVX512) == (1, 7, 2)
    assert gemm_register_tile(56, 56, 16, 16, AVX512) == (1, 4, 4)
    sizes = [7, 14, 28, 56]
    shapes = itertools.product(sizes, sizes, [2, 4, 13, 16], [8, 16, 32, 64], [AVX512, AVX2])
    for h, w, outer, ob, target in shapes:
        lanes, registers = kernels.vector_registers(target)
        per_block = -(-ob // lanes)
        for partial in (False, True):
            rows, columns, blocks = gemm_register_tile(h, w, outer, ob, target, partial_blocks=partial)
            assert h % rows == 0 and (partial or outer % blocks == 0)
            if w % columns:  # a partial last tile in each row: odd widths on AVX2, the row split evenly
                assert partial and target is AVX2 and w % 2 == 1 and rows == 1 and outer % blocks == 0
                assert columns == -(-w // -(-w // columns))
            assert rows * columns * blocks * per_block <= registers - per_block
            if target is AVX2 and (per_block == 1 or partial):
                # the pixels' broadcasts (live across blocks) and a block's weights leave one register
                # free (a 64-channel block's accumulators and weights alone take all 16: one pixel)
                held = rows * columns if blocks > 1 else 1
                used = rows * columns * blocks * per_block + held + per_block
                assert used <= registers - 1 or (rows, columns, blocks) == (1, 1, 1)
        if target is AVX512 and outer != 13:  # blocks that divide: as without partial tiles
            assert gemm_register_tile(h, w, outer, ob, target, partial_blocks=True) == (rows, columns, blocks)


def test_gemm_register_tile_on_avx2_prefers_two_pixel_tiles_of_several_blocks():
    # 4 pixels x 3 blocks of 8 (12 accumulators + 4 broadcasts + a weight) spilled: never chosen
    assert gemm_register_tile(28, 28, 15, 8, AVX2) == (1, 2, 5)
    assert gemm_register_tile(14, 14, 25, 8, AVX2) == (1, 2, 5)
    # as many FMAs per load: the tile of more pixels (a smaller weight panel per pixel)
    assert gemm_register_tile(28, 28, 4, 8, AVX2) == (1, 4, 2)
    # 7x7 without partial tiles: no 2-pixel tile; a row of 7 pixels x one block, not one pixel x many blocks
    assert gemm_register_tile(7, 7, 20, 8, AVX2) == (1, 7, 1)
    # 13 blocks (RegNet's 104 channels): without partial tiles only one block divides
    assert gemm_register_tile(28, 28, 13, 8, AVX2) == (1, 7, 1)
    assert gemm_register_tile(28, 28, 13, 8, AVX2, partial_blocks=True) == (1, 2, 5)


def test_gemm_register_tile_on_odd_widths_takes_partial_rows_on_avx2():
    # 7 = 2 + 2 + 2 + 1: 2 pixels x 5 of 20 (or of RegNet's 55) blocks, not a row of 7 pixels x 1 block
    assert gemm_register_tile(7, 7, 20, 8, AVX2, partial_blocks=True) == (1, 2, 5)
    assert gemm_register_tile(7, 7, 55, 8, AVX2, partial_blocks=True) == (1, 2, 5)
    # 16-channel blocks (two ymm each): 4 + 3 pixels x 1 block, not 7 x 1 (14 + 2 + 1 registers)...
    assert gemm_register_tile(7, 7, 60, 16, AVX2, partial_blocks=True) == (1, 4, 1)
    assert gemm_register_tile(14, 14, 36, 16, AVX2, partial_blocks=True) == (1, 2, 2)
    assert gemm_register_tile(14, 14, 36, 16, AVX2, partial_blocks=True, in_channels=96) == (1, 2, 2)
    # ...unless the weight panel streams from L2: the whole row passes over it fewer times
    assert gemm_register_tile(14, 14, 36, 16, AVX2, partial_blocks=True, in_channels=576) == (1, 7, 1)
    assert gemm_register_tile(7, 7, 60, 16, AVX2, partial_blocks=True, in_channels=960) == (1, 7, 1)
    # blocks of 8 gain whatever the panel; 32-channel blocks have no wider row to fall back on
    assert gemm_register_tile(7, 7, 20, 8, AVX2, partial_blocks=True, in_channels=960) == (1, 2, 5)
    assert gemm_register_tile(7, 7, 6, 32, AVX2, partial_blocks=True, in_channels=1152) == (1, 2, 1)
    # even widths keep whole tiles; AVX-512 keeps its rule
    assert gemm_register_tile(14, 14, 20, 8, AVX2, partial_blocks=True) == (1, 2, 5)
    assert gemm_register_tile(7, 7, 32, 16, AVX512, partial_blocks=True) == (1, 7, 2)
    # partial one way only: 13 blocks (prime) keep a whole row of one block
    assert gemm_register_tile(7, 7, 13, 8, AVX2, partial_blocks=True) == (1, 7, 1)


@pytest.mark.parametrize("ib,ob,strides", [(8, 8, (1, 1)), (8, 16, (1, 1)), (16, 8, (2, 2))])
def test_gemm_with_partial_row_tiles_matches_numpy(ib, ob, strides):
    # a 5x7 output (odd width) with 48 channels: partial last tiles of each row on AVX2
    wl = conv([1, 32, 5 * strides[0], 7 * strides[1]], [48, 32, 1, 1], strides=strides, padding=(0, 0, 0, 0),
              epilogue=["bias", "add", "relu"])
    assert 7 % gemm_register_tile(5, 7, 48 // ob, ob, AVX2, partial_blocks=True)[1]
    assert build_and_check(wl, gemm(ib, ob), AVX2) < 1e-5


@pytest.mark.parametrize("channels,out_channels,size", [(24, 72, 56), (40, 120, 28), (208, 440, 14),
                                                        (160, 960, 7)])
def test_gemm_tile_spills_no_accumulator_on_avx2(channels, out_channels, size):
    # the rule counts the registers a reduction step holds: the compiled kernel reloads nothing
    # from the stack (the 4 pixels x 3 blocks tile the rule chose before reloaded 17 vectors)
    wl = conv([1, channels, size, size], [out_channels, channels, 1, 1], padding=(0, 0, 0, 0),
              epilogue=["bias", "relu"])
    kernel = build_kernel(wl, gemm(8, 8), AVX2)
    assembly = import_tvm().compile(kernel.module, target=resolve_target(AVX2)).mod.inspect_source("asm")
    assert "vfmadd" in assembly
    assert not [line for line in assembly.splitlines() if "(%rsp), %ymm" in line]


# -- in a fused Relax build ------------------------------------------------------------------------


def rewritten_matches_untouched(new, mod, target) -> float:
    """Max relative error of the rewritten module ``new`` against ``mod``, both built for ``target``
    and run on one random (1, 16, 9, 9) input."""
    tvm = import_tvm()
    from layoutopt.tvm import build

    x = np.random.default_rng(0).standard_normal((1, 16, 9, 9)).astype("float32")

    def run(module):
        vm = tvm.relax.VirtualMachine(build(module, target), tvm.cpu())
        out = vm["main"](tvm.runtime.tensor(x))
        return (out if hasattr(out, "numpy") else out[0]).numpy()

    expected = run(mod)
    return float(np.max(np.abs(run(new) - expected)) / np.max(np.abs(expected)))


def test_algorithm_kernels_in_a_fused_build_match_the_untouched_model():
    # the rewrite calls the families' computes; FuseOps fuses each conv's epilogue into its kernel,
    # whose schedule (found by the main block) finishes it in the output transform / register tile
    tvm = import_tvm()
    from layoutopt.tvm import apply_layouts, models
    from layoutopt.tvm.kernels import schedule_module
    from layoutopt.tvm.ops import legalizers

    target = resolve_target(AVX2)
    mod = models.concat3((8, 16, 8), in_channels=16, size=9)
    choices = {
        "stem": winograd(16, 16, 4, order="tiles"),
        "branch2": winograd(16, 8, 2),
        "branch1": gemm(16, 8),
        "head": gemm(16, 16, order="rows"),
    }
    new = apply_layouts(mod, choices)
    assert rewritten_matches_untouched(new, mod, target) < 1e-5
    with target:
        legalize = {"relax.nn.conv2d": legalizers()["relax.nn.conv2d"]}
        fused = tvm.relax.transform.LegalizeOps(customize_legalize_map=legalize)(new)
        for make in (tvm.relax.transform.AnnotateTIROpPattern, tvm.relax.transform.FuseOps,
                     tvm.relax.transform.FuseTIR):
            fused = make()(fused)
    scheduled = schedule_module(fused, target)
    kernels_seen = {}
    for gvar, func in scheduled.functions_items():
        if isinstance(func, tvm.tirx.PrimFunc):
            names = block_names(tvm.s_tir.Schedule(func))
            # (scheduled, the main block is split into its init and update)
            if any(n.startswith((*kernels_winograd.MAIN_BLOCKS, *kernels_gemm.MAIN_BLOCKS)) for n in names):
                kernels_seen[gvar.name_hint] = names
                assert func.attrs["tirx.is_scheduled"]
    # two Winograd and two GEMM kernels; the stem's bias + relu went into its output transform
    assert len(kernels_seen) == 4
    stem = next(names for name, names in kernels_seen.items() if "winograd" in name and "relu" in name)
    assert not any(n.startswith(("T_add", "compute")) for n in stem), stem


# -- padded output channels ------------------------------------------------------------------------


def padded(ib, ob, **family):
    return {"in": f"NCHW{ib}c", "out": "NCHW", "oc_block": ob, **family}


def test_padded_candidates_only_where_no_vector_block_divides_the_output_channels():
    heads = conv((1, 32, 8, 8), (36, 32, 3, 3))  # 36 = 4 x 9: no block of 8 or more
    found = kernels.conv2d_candidates(heads, blocks=[4, 8, 16])
    direct = [c for c in found if "oc_block" in c and "algorithm" not in c]
    assert direct == [padded(ib, ob) for ib in (4, 8, 16) for ob in (8, 16)]
    wino = [c for c in found if "oc_block" in c and c.get("algorithm") == "winograd"]
    assert {(c["in"], c["oc_block"], c["tile"]) for c in wino} == {
        (f"NCHW{ib}c", ob, tile) for ib in (4, 8, 16) for ob in (8, 16) for tile in (2, 4)}
    # the plain NCHW kernel and the dividing block (4) stay choices
    assert {"in": "NCHW", "out": "NCHW"} in found and {"in": "NCHW4c", "out": "NCHW4c"} in found
    for workload in (conv((1, 32, 8, 8), (48, 32, 3, 3)),           # 16 divides: nothing to pad
                     conv((1, 32, 8, 8), (36, 8, 3, 3), groups=4),  # grouped
                     conv((1, 32, 8, 8), (6, 32, 3, 3))):           # fewer channels than a block
        assert not any("oc_block" in c for c in kernels.conv2d_candidates(workload, blocks=[4, 8, 16]))


@pytest.mark.parametrize("candidate,message", [
    (padded(8, 4), "divides the 36 output channels"),
    (padded(8, True), "'oc_block' must be an integer"),
    ({"in": "NCHW8c", "out": "NCHW8c", "oc_block": 16}, "writes its output as 'NCHW'"),
    (padded(6, 16), "block 6 does not divide the 32 channels"),
    (padded(8, 16, algorithm="winograd"), "'tile' must be"),
])
def test_bad_padded_candidates_are_clear_errors(candidate, message):
    with pytest.raises(ProblemError, match=message):
        kernels.validate_candidate(conv((1, 32, 8, 8), (36, 32, 3, 3)), candidate)


@pytest.mark.parametrize("target", [AVX512, AVX2], ids=["avx512", "avx2"])
@pytest.mark.parametrize("candidate,kernel,epilogue", [
    (padded(16, 16), (36, 32, 3, 3), ("bias", "relu")),
    (padded(8, 16, order="rows"), (20, 32, 1, 1), ("bias", "add")),
    (padded(16, 8, algorithm="winograd", tile=4), (36, 32, 3, 3), ("bias", "add", "relu")),
    (padded(8, 16, algorithm="winograd", tile=2, order="tiles"), (20, 32, 3, 3), ()),
], ids=["direct", "direct-1x1-rows", "winograd4", "winograd2-tiles"])
def test_padded_kernels_match_numpy(target, candidate, kernel, epilogue):
    workload = conv((1, 32, 10, 10), kernel, padding=(1, 1, 1, 1) if kernel[2] == 3 else (0, 0, 0, 0),
                    epilogue=epilogue)
    assert build_and_check(workload, candidate, target) < 1e-4
    func = kernels.build_kernel(workload, candidate, target).module["kernel"]
    # the padded channels are dropped in the same function: it writes the real ones as NCHW (the
    # unpack inlined into the epilogue's one pass)
    assert [int(d) for d in func.params[-1].shape] == [1, kernel[0], *[int(d) for d in workload["data"][2:]]]


def test_padded_weight_appends_zero_filters_before_packing():
    from layoutopt.tvm.kernels.padded import PaddedKernels

    workload = conv((1, 16, 8, 8), (12, 16, 3, 3))
    weight = np.arange(12 * 16 * 9, dtype="float32").reshape(12, 16, 3, 3)
    packed = PaddedKernels(kernels.conv2d.FAMILY).pack_weight(workload, padded(16, 8), weight)
    assert packed.shape == (2, 1, 3, 3, 16, 8)  # 16 filters: 12 + 4 zero ones
    np.testing.assert_array_equal(packed[1, 0, :, :, :, 4:], 0)
    np.testing.assert_array_equal(packed[1, 0, :, :, :, :4].transpose(3, 2, 0, 1), weight[8:])


def test_padded_kernels_in_a_fused_build_match_the_untouched_model():
    from layoutopt.tvm import apply_layouts, models

    target = resolve_target(AVX2)
    mod = models.concat3((12, 12, 8), in_channels=16, size=9)
    choices = {
        "stem": {"in": "NCHW", "out": "NCHW"},
        "branch1": padded(16, 16),
        "branch2": padded(16, 8, algorithm="winograd", tile=4),
        "branch3": {"in": "NCHW8c", "out": "NCHW8c"},
        "head": {"in": "NCHW4c", "out": "NCHW16c"},
    }
    new = apply_layouts(mod, choices)
    assert rewritten_matches_untouched(new, mod, target) < 1e-5


# -- dense: packed weights, row tiles, padded features ---------------------------------------------


@pytest.mark.parametrize("target", [AVX512, AVX2], ids=["avx512", "avx2"])
@pytest.mark.parametrize("rows,reduction,features,weight", [
    (40, 120, 77, "NK16n"),   # the recogniser's rows, features a block pads
    (13, 29, 48, "NK8n"),     # a prime number of rows: one-row tiles
    (6, 17, 5, "NK32n"),      # fewer features than the block
    (1, 64, 100, "NK16n"),    # a classifier's GEMV
])
def test_packed_dense_matches_numpy(target, rows, reduction, features, weight):
    workload = {"op": "dense", "data": [rows, reduction], "weight": [features, reduction], "dtype": "float32"}
    assert build_and_check(workload, {"in": "NC", "out": "NC", "weight": weight}, target) < 1e-5


def test_packed_dense_tiles_rows_and_shares_each_weight_panel_across_them():
    workload = {"op": "dense", "data": [40, 120], "weight": [6625, 120], "dtype": "float32"}
    func = build_kernel(workload, {"in": "NC", "out": "NC", "weight": "NK16n"}, AVX2).module["kernel"]
    sch = import_tvm().s_tir.Schedule(func)
    loops = [sch.get(loop) for loop in sch.get_loops(sch.get_sblock("T_dense_pack_update"))]
    _, rows, blocks = gemm_register_tile(1, 40, 415, 16, AVX2)
    # parallel over (panels, row tiles): the row tiles of one panel run next to each other
    assert int(loops[0].kind) == int(import_tvm().tirx.ForKind.PARALLEL)
    assert int(loops[0].extent) == 415 // blocks * 40 // rows
    assert [int(loop.extent) for loop in loops[1:]] == [120, blocks, rows, 16]
    assert rows > 1  # the weight vectors of a K step are reused across rows
    assert "T_dense_unpad" in block_names(sch)  # 6625 features padded to 6640

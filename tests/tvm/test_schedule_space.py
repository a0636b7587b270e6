"""Schedule spaces (kernels/space.py and each family's ``space``): every point is a valid candidate that
builds a correct kernel on AVX2 and AVX-512 targets, the default point is today's kernel, and values
outside a knob's domain are one-line errors."""

from __future__ import annotations

import pytest

pytest.importorskip("tvm")  # the tvm extra; CI installs it

from kernel_checks import AVX2, AVX512, build_and_check  # tests/tvm is on sys.path

from layoutopt import ProblemError
from layoutopt.tvm import kernels
from layoutopt.tvm._tvm import resolve_target
from layoutopt.tvm.kernels import FAMILIES, build_kernel, family, validate_candidate
from layoutopt.tvm.kernels.conv2d import SCHEDULE_KNOBS as DIRECT_KNOBS
from layoutopt.tvm.kernels.isa import gemm_tile_fits
from layoutopt.tvm.kernels.space import ScheduleSpace

pytestmark = pytest.mark.tvm

TARGETS = {"avx512": AVX512, "avx2": AVX2}
RESIDUAL = ("bias", "add", "relu")


def conv(data, kernel, padding=1, strides=1, groups=1, epilogue=()):
    padding = [padding] * 4 if isinstance(padding, int) else list(padding)
    return kernels.validate_workload({
        "op": "conv2d", "data": list(data), "kernel": list(kernel), "strides": [strides] * 2,
        "padding": padding, "dilation": [1, 1], "groups": groups, "epilogue": list(epilogue)})


def dense(rows, features, reduction):
    return kernels.validate_workload({"op": "dense", "data": [rows, reduction],
                                      "weight": [features, reduction]})


#: (workload, base candidate): every family with knobs on small, awkward shapes (odd and prime widths,
#: strides, asymmetric padding, padded output channels, fused epilogues)
CASES = {
    "direct": (conv([1, 32, 11, 13], [32, 32, 3, 3], epilogue=RESIDUAL), {"in": "NCHW16c", "out": "NCHW16c"}),
    "direct-8c-stride2": (conv([1, 16, 11, 13], [32, 16, 3, 3], padding=[1, 0, 1, 2], strides=2),
                          {"in": "NCHW8c", "out": "NCHW8c"}),
    "direct-grouped": (conv([1, 32, 7, 9], [32, 16, 3, 3], groups=2, epilogue=("bias",)),
                       {"in": "NCHW8c", "out": "NCHW8c"}),
    "direct-padded": (conv([1, 16, 9, 9], [36, 16, 3, 3], epilogue=("bias", "relu")),
                      {"in": "NCHW16c", "out": "NCHW", "oc_block": 16}),
    "gemm": (conv([1, 32, 7, 9], [64, 32, 1, 1], padding=0, epilogue=("bias", "relu")),
             {"in": "NCHW16c", "out": "NCHW16c", "algorithm": "gemm"}),
    "gemm-8c-stride2": (conv([1, 16, 13, 13], [48, 16, 1, 1], padding=0, strides=2, epilogue=RESIDUAL),
                        {"in": "NCHW8c", "out": "NCHW16c", "algorithm": "gemm"}),
    "gemm-nchw": (conv([1, 12, 16, 16], [20, 12, 1, 1], padding=0),
                  {"in": "NCHW", "out": "NCHW", "algorithm": "gemm"}),
    "gemm-grouped": (conv([1, 48, 7, 9], [96, 16, 1, 1], padding=0, groups=3, epilogue=("bias", "relu")),
                     {"in": "NCHW8c", "out": "NCHW8c", "algorithm": "gemm"}),
    "gemm-grouped-nchw": (conv([1, 24, 8, 8], [48, 8, 1, 1], padding=0, groups=3),
                          {"in": "NCHW", "out": "NCHW", "algorithm": "gemm"}),
    "depthwise": (conv([1, 32, 13, 11], [32, 1, 3, 3], groups=32, epilogue=("bias", ["clip", 0.0, 6.0])),
                  {"in": "NCHW16c", "out": "NCHW16c", "algorithm": "depthwise"}),
    "depthwise-5x5-stride2": (conv([1, 32, 13, 12], [32, 1, 5, 5], padding=2, strides=2, groups=32),
                              {"in": "NCHW8c", "out": "NCHW8c", "algorithm": "depthwise"}),
    "winograd": (conv([1, 32, 10, 14], [32, 32, 3, 3], epilogue=RESIDUAL),
                 {"in": "NCHW16c", "out": "NCHW16c", "algorithm": "winograd", "tile": 4}),
    "winograd-padded": (conv([1, 16, 10, 10], [12, 16, 3, 3]),
                        {"in": "NCHW8c", "out": "NCHW", "oc_block": 8, "algorithm": "winograd", "tile": 2}),
    "dense": (dense(3, 40, 64), {"in": "NC", "out": "NC", "weight": "NK16n"}),
    "dense-8n": (dense(6, 24, 32), {"in": "NC", "out": "NC", "weight": "NK8n"}),
}


def space_of(case: str, isa: str) -> ScheduleSpace:
    workload, base = CASES[case]
    return family(workload, base).space(workload, base, resolve_target(TARGETS[isa]))


def covering_points(space: ScheduleSpace) -> list[dict]:
    """For each knob, a point giving it a value other than the default's (the one differing in the
    fewest knobs): every knob's code path, in few builds."""
    default, points = space.default(), space.points()
    chosen = []
    for name in space.names:
        others = [p for p in points if p[name] != default[name]]
        if others:
            point = min(others, key=lambda p: sum(p[k] != default[k] for k in space.names))
            if point not in chosen:
                chosen.append(point)
    return chosen


@pytest.mark.parametrize("isa", TARGETS)
@pytest.mark.parametrize("case", list(CASES))
def test_every_point_is_a_valid_candidate_and_reads_back(case, isa):
    workload, base = CASES[case]
    space = space_of(case, isa)
    assert space.size > 1 or case.startswith("dense")  # a knob to search everywhere but the smallest dense
    assert space.is_valid(space.default()) and space.default() in space.points()
    assert space.candidate(base, space.default()) == base  # the default point keeps today's cache key
    for point in space.points():
        candidate = space.candidate(base, point)
        validate_candidate(workload, candidate)
        assert space.point(candidate) == point
        assert {k: v for k, v in candidate.items() if k not in space.names} == base
    for name, values in space.knobs:  # each value is taken by some point
        assert all(any(point[name] == value for point in space.points()) for value in values)


@pytest.mark.parametrize("isa", TARGETS)
@pytest.mark.parametrize("case", list(CASES))
def test_sampled_points_build_and_match_numpy(case, isa):
    # each knob's non-default path, plus one seeded random point; run where the host can (an AVX-512
    # target is only compiled on an AVX2 host)
    workload, base = CASES[case]
    space = space_of(case, isa)
    points = covering_points(space)
    points += [p for p in space.sample(2, seed=1)[1:] if p not in points]
    for point in points:
        assert build_and_check(workload, space.candidate(base, point), TARGETS[isa]) < 1e-4, point


def without_annotations(script: str) -> str:
    return "\n".join(line for line in script.splitlines() if "T.sblock_attr" not in line)


@pytest.mark.parametrize("isa", TARGETS)
@pytest.mark.parametrize("case", ["direct", "direct-8c-stride2", "gemm", "gemm-nchw", "depthwise", "winograd",
                                  "dense"])
def test_the_default_point_written_out_builds_todays_kernel(case, isa):
    workload, base = CASES[case]
    target = resolve_target(TARGETS[isa])
    explicit = {**base, **space_of(case, isa).default()}
    assert explicit != base
    today = build_kernel(workload, base, target).module.script()
    assert without_annotations(build_kernel(workload, explicit, target).module.script()) == \
        without_annotations(today)


def test_the_spaces_fit_the_target_registers_and_avx2_prunes_more():
    # a direct tile holds reg_n x oc_tile x (block / lanes) accumulators beside oc_tile weight rows and a
    # broadcast: 32 zmm on AVX-512, 16 ymm on AVX2, whose 16-channel blocks take two registers a column
    for isa, (lanes, registers) in (("avx512", (16, 32)), ("avx2", (8, 16))):
        space = space_of("direct", isa)
        per_column = 16 // lanes
        assert space.names == DIRECT_KNOBS
        for point in space.points():
            if point != space.default():
                tile = point["reg_n"] * point["oc_tile"] * per_column
                assert tile >= 4 and tile + point["oc_tile"] * per_column + 1 <= registers
        gemm = space_of("gemm", isa)
        assert all(gemm_tile_fits(p["reg_h"] * p["reg_n"], p["oc_tile"], 16, TARGETS[isa])
                   for p in gemm.points() if p != gemm.default())
    assert space_of("direct", "avx2").size < space_of("direct", "avx512").size
    assert max(dict(space_of("direct", "avx512").knobs)["oc_tile"]) == 2  # 32 channels: two 16c blocks


@pytest.mark.parametrize(
    ("case", "knobs", "message"),
    [
        ("direct", {"reg_n": 0}, r"reg_n=0 is not among its values here \(1\.\.13\)"),
        ("direct", {"reg_n": 14}, "reg_n=14"),
        ("direct", {"oc_tile": 3}, r"oc_tile=3 is not among its values here \(1, 2\)"),
        ("direct", {"reduction": "rows"}, "reduction='rows'"),
        ("direct", {"unroll_kw": True}, "unroll_kw=True"),  # an integer knob: 1, not True
        ("direct", {"order": "cols"}, "order"),
        ("direct", {"tile": 2}, "unknown keys"),
        ("gemm", {"reduction": "kernel"}, "unknown keys"),  # a 1x1 kernel has no window to reorder
        ("gemm", {"oc_tile": 5}, "oc_tile=5"),
        ("gemm", {"reg_h": 2}, "reg_h=2"),  # 7 rows
        ("gemm-nchw", {"lanes": 3}, "lanes=3"),
        ("gemm-nchw", {"reg_h": 1, "reg_n": 4, "lanes": 8}, "run of whole 8-lane vectors"),
        ("depthwise", {"row_chunk": 5}, "row_chunk=5"),
        ("depthwise", {"oc_tile": 4}, "oc_tile=4"),
        ("winograd", {"reg_n": 3}, "reg_n=3"),  # 4 tiles a row
        ("dense", {"oc_tile": 4}, "oc_tile=4"),  # 3 blocks of 16 features
    ],
)
def test_knob_values_outside_their_domain_are_one_line_errors(case, knobs, message):
    workload, base = CASES[case]
    with pytest.raises(ProblemError, match=message) as error:
        validate_candidate(workload, {**base, **knobs})
    assert "\n" not in str(error.value)


def test_kernels_without_knobs_have_a_space_of_one_point_and_refuse_knob_keys():
    workload = conv([1, 16, 8, 8], [16, 16, 3, 3])
    nchw = {"in": "NCHW", "out": "NCHW"}
    assert family(workload, nchw).space(workload, nchw, AVX2).points() == [{}]
    with pytest.raises(ProblemError, match="only a blocked conv2d has schedule knobs"):
        validate_candidate(workload, {**nchw, "reg_n": 4})
    plain = {"in": "NC", "out": "NC", "weight": "NK"}
    assert family(dense(1, 8, 8), plain).space(dense(1, 8, 8), plain, AVX2).size == 1
    with pytest.raises(ProblemError, match="only a packed weight's kernel has schedule knobs"):
        validate_candidate(dense(1, 8, 8), {**plain, "oc_tile": 1})
    transform = kernels.layout_transform_workload([1, 16, 4, 4], "NCHW", "NCHW8c")
    assert FAMILIES["layout_transform", "direct"].space(transform, {}, AVX512).size == 1


def test_sampling_is_seeded_distinct_and_starts_at_the_default():
    space = space_of("direct", "avx512")
    sample = space.sample(10, seed=3)
    assert sample == space.sample(10, seed=3) and sample != space.sample(10, seed=4)
    assert sample[0] == space.default() and len({tuple(p.values()) for p in sample}) == 10
    assert all(space.is_valid(point) for point in sample)
    assert len(space.sample(space.size + 5)) == space.size  # all of them when it holds fewer
    with pytest.raises(ProblemError, match="is not in the space"):
        space.candidate(CASES["direct"][1], {**space.default(), "reg_n": 1, "oc_tile": 1})  # 1 accumulator

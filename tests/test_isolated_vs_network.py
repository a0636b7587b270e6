"""The pairing of isolated and in-network kernel times in ``benchmarks/isolated_vs_network.py``."""

import pytest

from benchmarks.isolated_vs_network import layer_group, paired_groups


def test_groups_are_the_family_and_the_algorithm():
    assert layer_group({"op": "conv2d"}, {"in": "NCHW8c", "out": "NCHW8c", "algorithm": "depthwise"}) == \
        "conv2d depthwise"
    assert layer_group({"op": "conv2d"}, {"in": "NCHW8c", "out": "NCHW16c"}) == "conv2d direct"


def test_each_round_pairs_the_two_sides_and_a_slow_round_cancels():
    """Round 2 runs in a slow spell of the host: both sides 3x slower. The per-round ratio does not move,
    where a ratio of the sides' medians, taken from different rounds, would."""
    isolated = {"dw": [10.0, 30.0, 10.0, 10.0], "gemm": [20.0, 60.0, 20.0, 20.0]}
    network = {"dw": [30.0, 90.0, 30.0, 30.0], "gemm": [22.0, 66.0, 22.0, 22.0]}
    rows = paired_groups(isolated, network, {"dw": "conv2d depthwise", "gemm": "conv2d gemm"})
    assert [row["group"] for row in rows] == ["conv2d gemm", "conv2d depthwise", "all"]  # largest first
    by_group = {row["group"]: row for row in rows}
    assert by_group["conv2d depthwise"]["ratio"].median == pytest.approx(3.0)
    assert by_group["conv2d gemm"]["ratio"].median == pytest.approx(1.1)
    assert by_group["all"]["ratio"].median == pytest.approx(52 / 30)
    assert by_group["all"]["isolated"] == pytest.approx(30.0)
    assert by_group["all"]["network"] == pytest.approx(52.0)
    assert all(row["ratio"].low == row["ratio"].high == row["ratio"].median for row in rows)


def test_a_round_where_a_layer_matched_no_call_leaves_its_groups():
    isolated = {"a": [1.0, 1.0, 1.0], "b": [1.0, 1.0, 1.0]}
    network = {"a": [2.0, None, 2.0], "b": [1.0, 1.0, 1.5]}
    rows = {row["group"]: row for row in paired_groups(isolated, network, {"a": "x", "b": "y"})}
    assert rows["x"]["rounds"] == 2 and rows["y"]["rounds"] == 3 and rows["all"]["rounds"] == 2
    assert rows["all"]["ratio"].median == pytest.approx((1.5 + 1.75) / 2)


def test_a_group_with_no_complete_round_is_left_out():
    rows = paired_groups({"a": [1.0], "b": [1.0]}, {"a": [None], "b": [2.0]}, {"a": "x", "b": "y"})
    assert [row["group"] for row in rows] == ["y"]

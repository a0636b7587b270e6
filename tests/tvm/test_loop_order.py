"""One parallel loop order for every conv kernel of a build (``loop_order=``): which kernels take it,
that the rewritten candidates compute the same numbers, and the tune's ``"rows"`` and ``"auto"``."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("tvm")  # the tvm extra; CI installs it

from layoutopt import ProblemError
from layoutopt.tvm import build_from_solution, extract_layout_graph, models, tune_and_build
from layoutopt.tvm.kernels import LOOP_ORDERS, candidates, validate_workload, with_loop_order

pytestmark = pytest.mark.tvm

CONV = validate_workload({"op": "conv2d", "data": [1, 16, 8, 8], "kernel": [16, 16, 3, 3], "strides": [1, 1],
                          "padding": [1, 1, 1, 1], "dilation": [1, 1], "groups": 1})
POINTWISE = validate_workload({**CONV, "kernel": [16, 16, 1, 1], "padding": [0, 0, 0, 0]})
DEPTHWISE = validate_workload({**CONV, "kernel": [16, 1, 3, 3], "groups": 16})


def test_the_blocked_direct_gemm_and_depthwise_kernels_take_the_order_and_no_other_does():
    rows = {}
    for workload in (CONV, POINTWISE, DEPTHWISE):
        for candidate in candidates(workload, blocks=[8, 16]):
            ordered = with_loop_order(workload, candidate, "rows")
            rows[json.dumps(candidate, sort_keys=True)] = ordered.get("order")
            assert with_loop_order(workload, ordered, "oc") == candidate  # and back: the default has no key
    taken = {key for key, order in rows.items() if order == "rows"}
    for key in rows:
        candidate = json.loads(key)
        blocked = candidate["in"] != "NCHW"
        expected = blocked and candidate.get("algorithm", "direct") in ("direct", "gemm", "depthwise")
        assert (key in taken) == expected, candidate
    winograd = next(c for c in candidates(CONV, blocks=[16]) if c.get("order") == "tiles")
    assert with_loop_order(CONV, winograd, "oc") == winograd  # Winograd's own order is left alone
    dense = {"op": "dense", "data": [1, 64], "weight": [8, 64], "dtype": "float32"}
    assert with_loop_order(dense, {"in": "NC", "out": "NC", "weight": "NK8n"}, "rows") == {
        "in": "NC", "out": "NC", "weight": "NK8n"}
    with pytest.raises(ProblemError, match="loop order 'cols'"):
        with_loop_order(CONV, {"in": "NCHW16c", "out": "NCHW16c"}, "cols")


def test_a_tune_rows_first_builds_checks_and_exports_a_solution_file_that_rebuilds_it(tmp_path):
    import tvm

    mod = models.residual(channels=16, size=8)
    result = tune_and_build(mod, cache=tmp_path / "costs.jsonl", guard=False, baselines=(), calibrate=0,
                            profile=False, repeat=2, loop_order="rows",
                            candidates={"blocks": [8, 16], "algorithms": ["direct"]})
    assert result.tuned.loop_order == "rows" and result.tuned.max_relative_error < 1e-4  # checked
    assert "convs rows first" in result.summary()
    _, solution = result.export(tmp_path / "m.so")
    layers = json.loads(solution.read_text())["layers"]
    blocked = [layer for layer in layers if layer["kind"] == "target" and layer["candidate"]["in"] != "NCHW"]
    assert blocked and all(layer["candidate"]["order"] == "rows" for layer in blocked)
    graph = extract_layout_graph(mod, {"blocks": [8, 16], "algorithms": ["direct"]})
    assert all("order" not in choice.candidate for node in graph.layout_nodes() for choice in node.choices)
    executable, _ = build_from_solution(mod, solution)
    x = tvm.runtime.tensor(np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype("float32"))
    rebuilt = tvm.relax.VirtualMachine(executable, tvm.cpu())["main"](x).numpy()
    handed = tvm.relax.VirtualMachine(result.executable, tvm.cpu())["main"](x).numpy()
    np.testing.assert_array_equal(rebuilt, handed)


def test_with_loop_order_auto_the_guard_times_both_orders_and_the_solution_file_has_the_one_handed_back(
        tmp_path):
    result = tune_and_build(models.residual(channels=16, size=8), cache=tmp_path / "costs.jsonl",
                            baselines=(), calibrate=0, profile=False, repeat=3, loop_order="auto",
                            candidates={"blocks": [8, 16], "algorithms": ["direct"]})
    rival = result.baselines["layoutopt_rows"]
    assert rival.loop_order == "rows" and result.tuned.loop_order == LOOP_ORDERS[0]
    assert rival.assignment == result.tuned.assignment and rival.max_relative_error < 1e-4  # checked
    assert rival.versus_tuned is not None  # timed beside the tuned build
    _, solution = result.export(tmp_path / "m.so")
    orders = {layer["candidate"].get("order", "oc") for layer in json.loads(solution.read_text())["layers"]
              if layer["kind"] == "target" and layer["candidate"]["in"] != "NCHW"}
    assert orders == {"rows" if result.chosen == "layoutopt_rows" else "oc"}


def test_an_unknown_loop_order_is_refused_before_anything_is_measured(tmp_path):
    with pytest.raises(ProblemError, match="loop_order 'cols'"):
        tune_and_build(models.chain(), cache=tmp_path / "costs.jsonl", loop_order="cols")
    assert not (tmp_path / "costs.jsonl").exists()

"""``benchmarks/memory_front.py``: the peak resident set of a build in a fresh process, and the page."""

from __future__ import annotations

import pytest

pytest.importorskip("tvm")  # the tvm extra; CI installs it

from benchmarks import memory_front
from layoutopt.tvm import build, models

pytestmark = pytest.mark.tvm


def test_peak_rss_grows_with_the_model(tmp_path):
    sizes = {}
    for size in (8, 256):  # 8x8 and 256x256 images: 16-channel activations of 4 kB and 4 MB
        library = tmp_path / f"chain{size}.so"
        build(models.chain(size=size)).export_library(str(library))
        sizes[size] = memory_front.peak_rss("tvm", library, [1, 8, size, size])
    assert 0 < sizes[8] < sizes[256]
    assert sizes[256] > 2 * 16 * 256 * 256 * 4  # at least the two 16-channel activations


def test_the_page_names_b_star_and_the_rows():
    rows = [{"model": "m", "build": build_name, "predicted_ms": 1.0, "measured_ms": measured,
             "figure_mb": 2.0, "module_constants_mb": 1.5, "rss_peak_mb": 9.0, "transforms": 3, "load": 1.0}
            for build_name, measured in (("optimum", 1.0), ("smallest", 1.2), ("nchw8c", 1.5),
                                         ("at_nchw8c", 1.1), ("nchw16c", 1.4), ("at_nchw16c", 1.05))]
    rows.append({"model": "m", "build": "onnxruntime", "rss_peak_mb": 12.0, "load": 1.0})
    page = memory_front.markdown(rows, {"m": [(2.0, 1.0), (1.0, 1.2)]}, "stamp")
    assert "b* (the faster fixed layout, measured): **nchw16c**" in page
    assert "| fastest within b*'s memory (nchw16c) | 1.000 | 1.050 |" in page
    assert "| unconstrained optimum |" in page and "| smallest feasible memory |" in page
    assert "| onnxruntime |  |  |  |  | 12.000 |  |" in page


def test_the_page_says_what_the_budgeted_solves_took():
    import networkx as nx

    from layoutopt import Problem, solve_problem

    problem = Problem.from_graph(nx.path_graph(2), {"nodes": {0: [1, 3], 1: [2, 1]},
                                                    "edges": {(0, 1): [[0, 5], [5, 0]]}},
                                 {"nodes": {0: [4, 1], 1: [4, 1]}})
    solutions = [solve_problem(problem.with_memory_budget(budget), method="auto") for budget in (5.0, 2.0)]
    solved = memory_front.solve_summary(solutions, problem)
    assert solved["count"] == 2 and solved["statuses"] == {"optimal": 2} and solved["choices"] == 4
    rows = [{"model": "m", "build": "optimum", "predicted_ms": 3.0, "measured_ms": 3.1, "figure_mb": 8.0,
             "load": 1.0}]
    page = memory_front.markdown(rows, {"m": [(8.0, 3.0), (2.0, 4.0)]}, "stamp", {"m": solved})
    assert "Budgeted solves by `auto` on its problem (2 nodes, 4 choices): 2, the longest" in page

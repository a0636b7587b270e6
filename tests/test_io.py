"""Problem files: exact JSON round-trip, clear errors on bad files, exports solved by toulbar2."""

import json
import math
import subprocess
import sys
import textwrap

import networkx as nx
import numpy as np
import pytest

import layoutopt
from layoutopt import ProblemError
from layoutopt.generators import generate
from layoutopt.io import read_json, write_json, write_uai, write_wcsp

INF = math.inf


def test_round_trip_is_exact(tmp_path):
    graph, costs = generate("densenet", nodes=40, seed=5)  # has +inf entries and labels
    assert any(np.isinf(m).any() for m in costs.edges.values())
    path = tmp_path / "dense.json"
    write_json(path, graph, costs)
    graph2, costs2 = read_json(path)
    assert list(graph2.nodes) == list(graph.nodes)
    assert set(graph2.edges) == set(graph.edges)
    for n in graph:
        assert np.array_equal(costs2.nodes[n], costs.nodes[n])
        assert graph2.nodes[n]["choices"] == graph.nodes[n]["choices"]
        assert graph2.nodes[n]["op"] == graph.nodes[n]["op"]
    for e in graph.edges:
        assert np.array_equal(costs2.edges[e], costs.edges[e])
    assert graph2.graph["family"] == "densenet" and graph2.graph["seed"] == 5
    # writing what was read gives the same bytes
    write_json(tmp_path / "again.json", graph2, costs2)
    assert (tmp_path / "again.json").read_bytes() == path.read_bytes()


def test_round_trip_awkward_floats_ids_and_labels(tmp_path):
    awkward = [0.1 + 0.2, 5e-324, 4.4e307, 1e-300, INF, -123456789.123456789, -0.0]  # node + edge < max/2
    graph = nx.Graph()
    graph.add_node(3, choices=["a", 7, 2.5, True, None, "NCHW16c", "é"])
    graph.add_node("3", choices=None)
    graph.add_edge(3, "3")
    costs = {"nodes": {3: awkward, "3": [1.0, 2.0]},
             "edges": {("3", 3): [awkward[::-1], [0.0, INF, 1.5, 2.5, 3.5, 4.5, 5.5]]}}  # transposed key
    path = tmp_path / "awkward.json"
    write_json(path, graph, costs, metadata={"source": "unit test"})
    graph2, costs2 = read_json(path)
    assert list(graph2.nodes) == [3, "3"] and type(list(graph2.nodes)[1]) is str
    assert costs2.nodes[3].tolist() == awkward  # bit-exact, inf included
    assert graph2.nodes[3]["choices"] == ["a", 7, 2.5, True, None, "NCHW16c", "é"]
    assert "choices" not in graph2.nodes["3"]
    matrix = costs2.edges[(3, "3")] if (3, "3") in costs2.edges else costs2.edges[("3", 3)].T
    assert matrix[:, 0].tolist() == awkward[::-1]
    assert graph2.graph == {"source": "unit test"}
    assert '"inf"' in path.read_text()
    assignment = {3: 1, "3": 0}
    assert layoutopt.evaluate(graph2, costs2, assignment) == layoutopt.evaluate(graph, costs, assignment)


def test_write_refuses_what_json_cannot_hold(tmp_path):
    graph = nx.DiGraph([((0, 1), "b")])
    costs = {"nodes": {(0, 1): [1.0], "b": [1.0]}, "edges": {((0, 1), "b"): [[0.0]]}}
    with pytest.raises(ProblemError, match=r"node \(0, 1\).*string or integer node ids"):
        write_json(tmp_path / "x.json", graph, costs)
    graph = nx.DiGraph()
    graph.add_node("a", choices=[("NCHW", 8)])
    with pytest.raises(ProblemError, match=r"node 'a': label .* is not a JSON scalar"):
        write_json(tmp_path / "x.json", graph, {"nodes": {"a": [1.0]}, "edges": {}})


def _document(**changes):
    doc = {
        "format": "layoutopt-problem", "version": 1,
        "nodes": [{"id": "a", "costs": [1.0, 2.0], "labels": ["x", "y"]}, {"id": "b", "costs": [3.0]}],
        "edges": [{"source": "a", "target": "b", "costs": [[0.0], ["inf"]]}],
    }
    doc.update(changes)
    return doc


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ("{not json", r"not valid JSON \(line 1, column 2"),
        ('{"format": "layoutopt-problem", "version": 1, "nodes": [{"id": "a", "costs": [NaN]}], "edges": []}',
         "bare NaN is not allowed"),
        (json.dumps({"nodes": []}), "not a layoutopt problem file"),
        (json.dumps(_document(version=9)), "unsupported version 9"),
        (json.dumps(_document(nodes=[{"id": "a", "costs": [1.0, "fast"]}])),
         r"nodes\[0\] \(id 'a'\): costs: 'fast'"),
        (json.dumps(_document(nodes=[{"id": "a"}])), r"nodes\[0\] \(id 'a'\): missing \"costs\""),
        (json.dumps(_document(nodes=[{"id": "a", "costs": [1]}, {"id": "a", "costs": [1]}])),
         r"nodes\[1\] \(id 'a'\): duplicate node id"),
        (json.dumps(_document(nodes=[{"id": [1], "costs": [1]}])), r"nodes\[0\]: id \[1\] must be"),
        (json.dumps(_document(edges=[{"source": "a", "target": "c", "costs": [[0.0]]}])),
         r"edges\[0\] \('a' -> 'c'\): 'c' is not a node id"),
        (json.dumps(_document(edges=[{"source": "a", "target": "b", "costs": [[0.0], [1.0, 2.0]]}])),
         r"edges\[0\] \('a' -> 'b'\): costs: rows have different lengths"),
        (json.dumps(_document(edges=[{"source": "a", "target": "b", "costs": [[0.0, 1.0]]}])),
         r"edge \('a', 'b'\): cost matrix has shape \(1, 2\), expected \(2, 1\)"),
        ('{"format": "layoutopt-problem", "version": 1, "nodes": [{"id": "a", "costs": [1e400]}], '
         '"edges": []}', r"the number 1e400 is beyond the float64 range"),
        (json.dumps(_document(nodes=[{"id": "a", "costs": [10**400]}])),
         r"nodes\[0\] .* beyond the float64 range"),
        (json.dumps(_document(nodes=[{"id": "a", "costs": [5e307, 1.0]}, {"id": "b", "costs": [5e307]}])),
         r"node 'b': the costs are too large"),
        (json.dumps(_document(nodes=[{"id": "a", "costs": [1.0, 2.0], "labels": [["NCHW", 8], "x"]},
                                     {"id": "b", "costs": [3.0]}])),
         r"node 'a': label \['NCHW', 8\] is not a JSON scalar"),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        (json.dumps(_document(nodes=[{"id": "a", "costs": [1.0], "labels": ["x", "y"]},
                                     {"id": "b", "costs": [1]}], edges=[])),
         r"node 'a': 2 choice labels but 1 costs"),
    ],
)
def test_bad_file_names_file_and_entry(tmp_path, content, match):
    path = tmp_path / "broken.json"
    path.write_text(content)
    with pytest.raises(ProblemError, match=match) as info:
        read_json(path)
    assert str(info.value).startswith(str(path))


# toulbar2 keeps global state between models (and can abort the process), so each export is
# solved in a fresh interpreter.
_TOULBAR2 = textwrap.dedent("""
    import json, sys, pytoulbar2
    cfn = pytoulbar2.CFN(resolution=0)
    cfn.Read(sys.argv[1])
    solution, cost, _ = cfn.Solve()
    print(json.dumps([list(solution), cost]))
""")


def _toulbar2(path):
    command = [sys.executable, "-c", _TOULBAR2, str(path)]
    out = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    solution, cost = json.loads(out.stdout.strip().splitlines()[-1])
    return solution, cost


def _exact_method():
    # `dp` is the native exact engine the issue names; bruteforce is the fallback reference.
    return "dp" if "dp" in layoutopt.methods() else "bruteforce"


@pytest.mark.parametrize(
    ("family", "nodes", "seed"), [("resnet", 11, 0), ("densenet", 10, 1), ("random", 12, 2)]
)
def test_wcsp_export_solved_by_toulbar2_matches_exact_optimum(tmp_path, family, nodes, seed):
    graph, costs = generate(family, nodes=nodes, max_choices=3, seed=seed)
    expected = layoutopt.solve(graph, costs, method=_exact_method())
    assert expected.status == "optimal"
    info = write_wcsp(tmp_path / "p.wcsp", graph, costs)
    assert info["scale"] == 1.0 and info["rounding_error"] == 0.0  # integer ns: the export is exact
    solution, cost = _toulbar2(tmp_path / "p.wcsp")
    assignment = dict(zip(info["variables"], solution, strict=True))
    assert info["offset"] + cost == expected.objective
    assert layoutopt.evaluate(graph, costs, assignment) == expected.objective


def test_uai_export_solved_by_toulbar2_and_potentials_reproduce_costs(tmp_path):
    graph, costs = generate("ssd", nodes=14, max_choices=3, seed=3)
    expected = layoutopt.solve(graph, costs, method=_exact_method())
    info = write_uai(tmp_path / "p.uai", graph, costs)
    solution, _ = _toulbar2(tmp_path / "p.uai")
    found = dict(zip(info["variables"], solution, strict=True))
    assert layoutopt.evaluate(graph, costs, found) == expected.objective

    # An independent reader: -T ln(prod potentials) + offset is the cost of any assignment.
    tokens = (tmp_path / "p.uai").read_text().split()
    assert tokens[0] == "MARKOV"
    n, pos = int(tokens[1]), 2
    sizes = [int(t) for t in tokens[pos:pos + n]]
    pos += n
    count, pos = int(tokens[pos]), pos + 1
    scopes = []
    for _ in range(count):
        arity = int(tokens[pos])
        scopes.append([int(t) for t in tokens[pos + 1:pos + 1 + arity]])
        pos += 1 + arity
    tables = []
    for scope in scopes:
        entries = int(tokens[pos])
        values = np.array([float(t) for t in tokens[pos + 1:pos + 1 + entries]])
        tables.append(values.reshape([sizes[v] for v in scope]))
        pos += 1 + entries
    rng = np.random.default_rng(0)
    for _ in range(20):
        index = [int(rng.integers(k)) for k in sizes]
        potential = [t[tuple(index[v] for v in s)] for s, t in zip(scopes, tables, strict=True)]
        cost = layoutopt.evaluate(graph, costs, dict(zip(info["variables"], index, strict=True)))
        if math.isinf(cost):
            assert min(potential) == 0.0
        else:
            log_cost = info["offset"] - info["temperature"] * sum(math.log(p) for p in potential)
            assert log_cost == pytest.approx(cost, rel=1e-9)


def test_wcsp_scales_fractional_and_negative_costs(tmp_path):
    graph = nx.path_graph(3)
    costs = {"nodes": {0: [0.25, 1.5], 1: [-2.125, 0.5], 2: [1.0, INF]},
             "edges": {(0, 1): [[0.0, 0.75], [0.75, 0.0]], (1, 2): [[0.0, 1.0], [1.0, 0.0]]}}
    info = write_wcsp(tmp_path / "f.wcsp", graph, costs)
    assert info["scale"] == 8.0 and info["rounding_error"] == 0.0  # eighths: exact at scale 8
    text = (tmp_path / "f.wcsp").read_text().split("\n")
    header = text[0].split()
    assert header[1:4] == ["3", "2", "5"] and int(header[4]) == info["upper_bound"]
    solution, cost = _toulbar2(tmp_path / "f.wcsp")
    best = layoutopt.solve(graph, costs, method="bruteforce")
    assert info["offset"] + cost / info["scale"] == best.objective
    assert layoutopt.evaluate(graph, costs, dict(enumerate(solution))) == best.objective
    rounded = write_wcsp(tmp_path / "g.wcsp", graph, {"nodes": {**costs["nodes"], 0: [0.1, 1 / 3]},
                                                       "edges": costs["edges"]})
    assert 0 < rounded["rounding_error"] < 1e-12  # not exact in binary: rounded, and the error measured


def test_metadata_keys_stay_metadata(tmp_path):
    """Issue 13: a metadata key `incoming_graph_data` added nodes on read (DiGraph(**metadata))."""
    path = tmp_path / "meta.json"
    path.write_text(json.dumps(_document(metadata={"incoming_graph_data": [["x", "y"]], "seed": 3})))
    graph, _ = read_json(path)
    assert list(graph.nodes) == ["a", "b"]
    assert graph.graph == {"incoming_graph_data": [["x", "y"]], "seed": 3}


def test_wcsp_export_of_huge_and_negative_costs(tmp_path):
    """Issue 13: write_wcsp on 1e308 raised OverflowError. Costs up to the model's limit export, scaled
    down by a power of two; the huge entry decides the scale, so the small ones round (and say so)."""
    graph = nx.path_graph(2)
    costs = {"nodes": {0: [4e307, -1.0], 1: [0.0, 2.0]}, "edges": {(0, 1): [[0.0, 1.0], [1.0, 0.0]]}}
    info = write_wcsp(tmp_path / "huge.wcsp", graph, costs)
    assert info["scale"] < 1e-250 and info["upper_bound"] < 2**53
    _solution, cost = _toulbar2(tmp_path / "huge.wcsp")
    best = layoutopt.solve(graph, costs, method="bruteforce")
    assert abs(info["offset"] + cost / info["scale"] - best.objective) <= info["rounding_error"]

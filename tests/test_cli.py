"""The layoutopt command line, called in-process."""

import json

import pytest

import layoutopt
from layoutopt import bench
from layoutopt.cli import main
from layoutopt.generators import generate
from layoutopt.io import read_json, write_json


@pytest.fixture
def problem_file(tmp_path):
    path = tmp_path / "ssd30.json"
    write_json(path, *generate("ssd", nodes=30, max_choices=6, seed=4))
    return path


def test_help_lists_the_subcommands(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    for command in ("solve", "bench", "demo", "tune"):
        assert command in out


def test_solve_prints_and_writes_the_solution(problem_file, tmp_path, capsys):
    output = tmp_path / "solution.json"
    assert main(["solve", str(problem_file), "--method", "dp", "--time-limit", "30", "--assignment",
                 "--output", str(output)]) == 0
    out = capsys.readouterr().out
    assert "status       optimal" in out and "30 nodes" in out and "NCHW" in out
    document = json.loads(output.read_text())
    graph, costs = read_json(problem_file)
    assignment = {entry["id"]: entry["choice"] for entry in document["assignment"]}
    assert document["status"] == "optimal" and len(assignment) == 30
    assert document["objective"] == layoutopt.evaluate(graph, costs, assignment)
    assert document["objective"] == layoutopt.solve(graph, costs, method="dp").objective
    assert all(graph.nodes[e["id"]]["choices"][e["choice"]] == e["label"] for e in document["assignment"])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["solve", "{file}", "--method", "simplex"], "unknown method 'simplex'"),
        (["solve", "{file}", "--time-limit", "-1"], "time_limit must be positive"),
        (["solve", "{missing}"], "cannot read the problem file"),
        (["demo", "--instance", "vgg"], "no bundled instance 'vgg'"),
        (["demo", "--time-limit", "0"], "time_limit must be positive"),  # issue 13: exited 0, all refused
    ],
)
def test_bad_input_is_one_line_and_exit_code_2(problem_file, tmp_path, capsys, argv, message):
    argv = [a.format(file=problem_file, missing=tmp_path / "missing.json") for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and err.count("\n") == 1


def test_bench_writes_its_outputs(tmp_path, capsys):
    out_dir = tmp_path / "results"
    argv = ["bench", "--suite", "tiny", "--methods", "greedy", "pbqp", "--no-baselines", "--time-limit", "5",
            "--out", str(out_dir), "--stem", "tiny", "--no-plots", "--in-process", "--quiet"]
    assert main(argv) == 0
    assert sorted(p.name for p in out_dir.iterdir()) == ["tiny.csv", "tiny.md"]
    printed = capsys.readouterr().out
    assert "| resnet_20 | 20/" in printed and "wrote" in printed
    empty = ["bench", "--suite", "files", "--instances", str(tmp_path / "none"), "--out", str(out_dir)]
    assert main(empty) == 2


def test_demo_compares_every_method(capsys):
    assert main(["demo", "--time-limit", "20"]) == 0
    out = capsys.readouterr().out
    assert "resnet50 (71 operators, 86 edges" in out
    table = [line.split() for line in out.splitlines() if line.split()[:1] and line.split()[0] in
             layoutopt.methods()]
    rows = {cells[0]: cells for cells in table}
    assert set(rows) >= {m for m in layoutopt.methods() if m != "bruteforce"}
    assert rows["auto"][1] == "optimal" and rows["greedy"][1] == "feasible"
    graph, costs = read_json(bench.bundled_instances()["resnet50"])
    optimum = layoutopt.solve(graph, costs, method="dp").objective
    proven = {cells[2] for cells in table if cells[1] == "optimal"}
    assert proven == {f"{optimum:,.0f}"}  # every proof agrees with dp's optimum


def test_bundled_instances_are_the_generator_presets():
    for name, path in bench.bundled_instances().items():
        graph, costs = read_json(path)
        expected_graph, expected_costs = generate(name)
        assert list(graph.nodes) == list(expected_graph.nodes)
        for n in graph:
            assert (costs.nodes[n] == expected_costs.nodes[n]).all()
            assert graph.nodes[n]["choices"] == expected_graph.nodes[n]["choices"]
        assert all((costs.edges[e] == expected_costs.edges[e]).all() for e in expected_graph.edges)


def test_an_unwritable_output_is_refused_before_solving(problem_file, tmp_path, capsys):
    """Issue 13: `layoutopt solve --output` to an unwritable path printed a traceback after solving."""
    missing = tmp_path / "no" / "such" / "dir" / "out.json"
    assert main(["solve", str(problem_file), "--output", str(missing)]) == 2
    captured = capsys.readouterr()
    assert "cannot write there" in captured.err and "Traceback" not in captured.err
    assert "status" not in captured.out  # refused before solving
    assert main(["solve", str(problem_file), "--output", str(tmp_path)]) == 2  # a directory

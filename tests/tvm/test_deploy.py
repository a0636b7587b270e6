"""From tuning to deployment: the .so and the solution file, rebuilding with no measurement, pins,
and the op mix of real public models (folded shape subgraphs, clear import errors)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

pytest.importorskip("tvm")

from onnx_models import mobile_fpn_onnx, tiny_conv_onnx, unsupported_op_onnx  # tests/tvm is on sys.path

from layoutopt import ProblemError
from layoutopt.cli import main
from layoutopt.tvm import build_from_solution, load_model, load_solution, models, tune_and_build
from layoutopt.tvm.apply import apply_assignment, build, check_rewrite
from layoutopt.tvm.baselines import fixed_layout_assignment
from layoutopt.tvm.extract import extract_layout_graph, prepare
from layoutopt.tvm.timing import random_inputs, relative_error, run

pytestmark = pytest.mark.tvm


@pytest.fixture(scope="module")
def tvm():
    import tvm

    return tvm


def _run_library(tvm, path, inputs):
    """The outputs of a library written by export, loaded as a deployment would: tvm.runtime alone."""
    return run(tvm.runtime.load_module(str(path)), inputs)


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """A small tuning run with a pin, exported: (result, library, solution file, model)."""
    directory = tmp_path_factory.mktemp("deploy")
    mod = models.chain((8, 16), in_channels=4, size=8)
    result = tune_and_build(mod, method="pbqp", candidates=[4, 8], baselines=(), repeat=1, profile=False,
                            calibrate=0, cache=directory / "costs.jsonl", pin={"conv2": "NCHW8c->NCHW8c"})
    library, solution = result.export(directory / "out" / "model.so", model="chain")
    return result, library, solution, mod


def test_the_library_loads_with_tvm_runtime_and_computes_the_tuned_build(tvm, tuned):
    result, library, solution, _ = tuned
    assert solution.name == "model.solution.json" and library.stat().st_size > 0
    inputs = random_inputs(result.graph.mod, seed=3)
    assert relative_error(_run_library(tvm, library, inputs), run(result.executable, inputs)) == 0.0
    assert result.solution.labels["conv2"] == "NCHW8c->NCHW8c"  # the pin held


def test_the_solution_file_says_what_was_chosen_and_for_what(tuned):
    result, _, path, _ = tuned
    record = json.loads(path.read_text())
    assert record["format"] == "layoutopt-solution" and record["model"]["name"] == "chain"
    assert record["model"]["inputs"] == {"data": {"shape": [1, 4, 8, 8], "dtype": "float32"}}
    assert record["target"] == json.loads(result.meta["target"])
    assert set(record["versions"]) == {"tvm", "layoutopt", "schedules"}
    assert record["handed_back"]["name"] == result.chosen
    layers = {layer["layer"]: layer for layer in record["layers"]}
    assert set(layers) == {"conv1", "conv2"}
    variant = result.tuned if result.chosen == "layoutopt" else result.baselines[result.chosen]
    for name, layer in layers.items():
        node = result.graph.layout_node(name)
        assert layer["candidate"] == node.candidates[variant.assignment[name]]
        assert layer["workload"]["op"] == "conv2d"
        assert layer["algorithm"] == layer["candidate"].get("algorithm", "direct")
        assert (layer["in"], layer["out"]) == (layer["candidate"]["in"], layer["candidate"]["out"])
        assert layer["predicted_cost"] > 0


def test_a_rebuild_from_the_file_measures_nothing_and_computes_the_same(tvm, tuned, monkeypatch):
    result, library, solution, mod = tuned
    import layoutopt.tvm.measure as measure

    monkeypatch.setattr(measure.Measurer, "measure", lambda *a, **k: pytest.fail("measured"))
    executable, module = build_from_solution(mod, solution)
    inputs = random_inputs(result.graph.mod, seed=4)
    assert relative_error(run(executable, inputs), _run_library(tvm, library, inputs)) == 0.0
    assert module.script() == result.module.script()


@pytest.mark.parametrize(
    ("other", "message"),
    [
        (lambda: models.chain((8, 32), in_channels=4, size=8),
         r"layer 'conv2' differs .*kernel: \[16, 8, 3, 3\]"),
        (lambda: models.chain((8, 16), in_channels=4, size=16), r"input data: \[1, 4, 8, 8\] in the file"),
        (lambda: models.chain((8, 16, 16), in_channels=4, size=8), r"does not cover \(conv3\)"),
    ],
)
def test_a_rebuild_refuses_another_model_naming_what_differs(tuned, other, message):
    _, _, solution, _ = tuned
    with pytest.raises(ProblemError, match=message):
        build_from_solution(other(), solution)


def test_a_rebuild_refuses_another_target_naming_the_field(tuned):
    _, _, solution, mod = tuned
    record = load_solution(solution)
    mcpu = record["target"]["mcpu"]
    other = "znver3" if mcpu != "znver3" else "skylake"
    with pytest.raises(ProblemError, match=f"mcpu: '{mcpu}' in the file, '{other}' here"):
        build_from_solution(mod, solution, target={"kind": "llvm", "mcpu": other})


def test_a_file_that_is_not_a_solution_is_refused(tmp_path):
    (tmp_path / "x.json").write_text('{"layers": []}')
    with pytest.raises(ProblemError, match="not a layoutopt solution file"):
        load_solution(tmp_path / "x.json")
    with pytest.raises(ProblemError, match="cannot read"):
        load_solution(tmp_path / "missing.json")


def test_an_impossible_pin_is_named_and_an_unknown_one_refused_before_measuring(tmp_path, monkeypatch):
    mod = models.chain((8,), in_channels=4, size=8)
    import layoutopt.tvm.measure as measure

    real = measure.Measurer.measure
    calls = []
    monkeypatch.setattr(measure.Measurer, "measure",
                        lambda self, *a, **k: calls.append(1) or real(self, *a, **k))
    with pytest.raises(ProblemError, match="no layer 'conv7'; did you mean conv1"):
        tune_and_build(mod, candidates=[4, 8], pin=["conv7=NCHW8c->NCHW8c"], cache=tmp_path / "c.jsonl")
    with pytest.raises(ProblemError, match="has no choice 'NCHW16c->NCHW16c'"):
        tune_and_build(mod, candidates=[4, 8], pin=["conv1=NCHW16c->NCHW16c"], cache=tmp_path / "c.jsonl")
    assert not calls
    graph = extract_layout_graph(mod, [4, 8])
    every = [f"conv1={label}" for label in graph.nodes["conv1"]["choices"]]
    with pytest.raises(ProblemError, match="every choice of layer 'conv1' is forbidden: forbid conv1="):
        tune_and_build(mod, candidates=[4, 8], forbid=every, baselines=(), cache=tmp_path / "c.jsonl",
                       calibrate=0, profile=False, repeat=1)
    assert not calls  # refused before measuring too


# -- the op mix of real models ---------------------------------------------------------------------


def test_a_model_with_the_real_models_ops_folds_imports_and_rewrites(tvm, tmp_path, capsys):
    path = mobile_fpn_onnx(tmp_path / "mobile_fpn.onnx")
    with pytest.raises(ProblemError, match=r"ONNX frontend .* cannot import node 'flatten' \(op Reshape\)"):
        load_model(path, [1, 3, 16, 16], fold=False)  # the computed shape, unfolded
    assert "Error converting" not in capsys.readouterr().out  # the frontend's IR dump is not shown
    mod = load_model(path, [1, 3, 16, 16])
    prepared = prepare(mod)
    graph = extract_layout_graph(prepared, [4, 8], prepared=True)
    kinds = {node.kind for node in graph.layout_nodes()}
    boundaries = {node.op for node in graph.layout_nodes() if node.kind == "boundary"}
    assert boundaries == {"relax.mean", "relax.image.resize2d", "relax.reshape"}  # no opaque call_tir
    assert kinds == {"input", "target", "multi", "boundary", "output"}
    assert sum(node.kind == "output" for node in graph.layout_nodes()) == 2
    ops = {b.value.op.name for blk in prepared["main"].body.blocks for b in blk.bindings
           if hasattr(b.value, "op") and hasattr(b.value.op, "name")}
    assert {"relax.maximum", "relax.minimum", "relax.clip", "relax.erf", "relax.sigmoid"} <= ops
    assert any(node.workload.get("groups", 1) == 8 for node in graph.layout_nodes() if node.kind == "target")
    inputs = random_inputs(prepared, seed=5)
    untouched = run(tvm.compile(mod, target=tvm.target.Target({"kind": "llvm"})), inputs)  # before prepare
    for layout in ("NCHW8c", "NCHW4c"):
        new_mod = apply_assignment(prepared, graph, fixed_layout_assignment(graph, layout))
        assert relative_error(run(build(new_mod), inputs), untouched) < 1e-4


def test_an_op_the_frontend_lacks_is_one_line_naming_it(tmp_path):
    with pytest.raises(ProblemError) as error:
        load_model(unsupported_op_onnx(tmp_path / "lstm.onnx"), [1, 4, 1, 8])
    message = str(error.value)
    assert "ONNX frontend" in message and "LSTM" in message and "\n" not in message


def test_an_op_the_build_cannot_lower_fails_before_anything_is_measured(tvm, monkeypatch):
    net = models._NetBuilder(8, 8, seed=1)
    relax = net.relax

    def body(x):
        x = net.conv(x, 16, name="conv1")
        return net.emit(relax.op.ewise_fma(x, x, x), "fma")

    mod = prepare(net.finish(body))
    graph = extract_layout_graph(mod, [8], prepared=True)
    with pytest.raises(ProblemError, match=r"before measuring .*'relax.ewise_fma' has no legalization"):
        check_rewrite(mod, graph)
    import layoutopt.tvm.measure as measure

    monkeypatch.setattr(measure.Measurer, "measure", lambda *a, **k: pytest.fail("measured"))
    with pytest.raises(ProblemError, match="ewise_fma"):
        tune_and_build(mod, candidates=[8])


# -- the command line -------------------------------------------------------------------------------


def test_tune_o_then_build_from_the_command_line(tvm, tmp_path, capsys):
    model = tiny_conv_onnx(tmp_path / "tiny.onnx")
    common = ["--input-shape", "1,4,8,8"]
    out = tmp_path / "out" / "tiny.so"
    argv = ["tune", str(model), *common, "--blocks", "4,8", "--cache", str(tmp_path / "c.jsonl"),
            "--baselines", "", "--repeat", "1", "--report", "", "--pin", "lv=NCHW4c->NCHW8c", "-o", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert re.search(r"library: .*tiny\.so \(the \w+ build\); solution: .*tiny\.solution\.json", printed)
    solution = tmp_path / "out" / "tiny.solution.json"
    assert json.loads(solution.read_text())["model"]["name"] == str(model)
    rebuilt = tmp_path / "rebuilt.so"
    assert main(["build", str(model), "--solution", str(solution), "-o", str(rebuilt)]) == 0
    assert "nothing measured" in capsys.readouterr().out
    inputs = [np.random.default_rng(0).standard_normal((1, 4, 8, 8)).astype("float32")]
    assert relative_error(_run_library(tvm, rebuilt, inputs), _run_library(tvm, out, inputs)) == 0.0
    other = tiny_conv_onnx(tmp_path / "wide.onnx", channels=16)
    assert main(["build", str(other), "--solution", str(solution), "-o", str(tmp_path / "x.so")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("layoutopt build: error: layer ") and "differs from the solution file's" in err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--pin", "nosuch=NCHW"], "no layer 'nosuch'"),
        (["--forbid", "lv"], "expected LAYER=CHOICE"),
        (["-o", "model.txt"], "needs a .so name"),
    ],
)
def test_pins_and_outputs_are_checked_before_measuring(tmp_path, capsys, extra, message):
    model = tiny_conv_onnx(tmp_path / "tiny.onnx")
    argv = ["tune", str(model), "--input-shape", "1,4,8,8", "--cache", str(tmp_path / "c.jsonl"),
            "--report", "", *extra]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert message in captured.err and "Traceback" not in captured.err
    assert "measuring" not in captured.out
    assert not (tmp_path / "c.jsonl").exists() or not (tmp_path / "c.jsonl").read_text()

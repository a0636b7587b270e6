"""From tuning to deployment: the .so and the solution file, rebuilding with no measurement, pins,
and the op mix of real public models (folded shape subgraphs, clear import errors)."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import re
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tvm")

from onnx_models import mobile_fpn_onnx, tiny_conv_onnx, unsupported_op_onnx  # tests/tvm is on sys.path

from layoutopt import ProblemError
from layoutopt.cli import main
from layoutopt.tvm import build_from_solution, load_model, load_solution, models, tune_and_build
from layoutopt.tvm.building.apply import apply_assignment
from layoutopt.tvm.building.baselines import fixed_layout_assignment
from layoutopt.tvm.building.builder import build, check_rewrite
from layoutopt.tvm.evaluate.check import relative_error
from layoutopt.tvm.evaluate.timing import random_inputs, run
from layoutopt.tvm.frontend.normalise import prepare
from layoutopt.tvm.graph.extract import extract_layout_graph
from layoutopt.tvm.graph.graph import candidate_label

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
    assert record["target"] == result.meta.context.target
    assert set(record["versions"]) == {"tvm", "layoutopt", "schedules"}
    assert record["handed_back"]["name"] == result.chosen
    # how far its numbers are from the model's: against the float64 model, beside TVM's own float32 build;
    # a bare IRModule: TVM's import compared with nothing
    variant = result.tuned if result.chosen == "layoutopt" else result.baselines[result.chosen]
    assert record["check"] == {"reference": "float64", "max_relative_error": variant.max_relative_error,
                               "untouched_error": result.reference.untouched_error, "bound": 1e-4,
                               "imported": None, "imported_error": None}
    assert 0 < record["check"]["untouched_error"] < 1e-5
    layers = {layer["layer"]: layer for layer in record["layers"]}
    assert set(layers) == {"conv1", "conv2"}
    for name, layer in layers.items():
        node = result.graph.layout_node(name)
        assert layer["candidate"] == node.candidates[variant.assignment[name]]
        assert layer["workload"]["op"] == "conv2d"
        assert layer["predicted_cost"] > 0
        # the candidate alone says which kernel: nothing beside it that an edit could contradict
        assert set(layer) == {"layer", "op", "kind", "workload", "candidate", "predicted_cost"}


def test_a_rebuild_from_the_file_measures_nothing_and_computes_the_same(tvm, tuned, monkeypatch):
    result, library, solution, mod = tuned
    import layoutopt.tvm.measure.measure as measure

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
    mcpu = record.target["mcpu"]
    other = "znver3" if mcpu != "znver3" else "skylake"
    with pytest.raises(ProblemError, match=f"mcpu: '{mcpu}' in the file, '{other}' here"):
        build_from_solution(mod, solution, target={"kind": "llvm", "mcpu": other})


def test_a_file_that_is_not_a_solution_is_refused(tmp_path):
    (tmp_path / "x.json").write_text('{"layers": []}')
    with pytest.raises(ProblemError, match="not a layoutopt solution file"):
        load_solution(tmp_path / "x.json")
    with pytest.raises(ProblemError, match="cannot read"):
        load_solution(tmp_path / "missing.json")


# -- the solution file's schema and versions -------------------------------------------------------


def _document(tuned) -> dict:
    """The tuned fixture's solution file as JSON (a fresh copy to edit)."""
    return json.loads(tuned[2].read_text())


def _write(path: Path, document: dict) -> Path:
    path.write_text(json.dumps(document))
    return path


def _as_version_1(document: dict) -> dict:
    """``document`` as layoutopt 1a5728c wrote it (version 1): beside each layer's candidate, its name
    again as ``binding``, its layouts, algorithm, knobs and label."""
    old = copy.deepcopy(document)
    old["version"] = 1
    for layer in old["layers"]:
        candidate, target = layer["candidate"], layer["kind"] == "target"
        layer.update({"binding": layer["layer"], "in": candidate["in"], "out": candidate["out"],
                      "algorithm": candidate.get("algorithm", "direct") if target else None,
                      "knobs": {k: v for k, v in candidate.items() if k not in ("in", "out", "algorithm")},
                      "label": candidate_label(candidate) if target else candidate["in"]})
    return old


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d["layers"][0].pop("op"), r"layer 'conv1': missing 'op'"),
        (lambda d: d.update(layers="conv1,conv2"), r"'layers' must be a list, not a string"),
        (lambda d: d.update(model="chain"), r"'model' must be an object, not a string"),
        (lambda d: d.update(target="llvm"), r"'target' must be an object, not a string"),
        (lambda d: d["layers"].append(copy.deepcopy(d["layers"][0])), r"layer 'conv1' is given twice"),
        (lambda d: d["layers"][1].update(colour="red"), r"layer 'conv2': unknown field 'colour'"),
        (lambda d: d["layers"][1].update(workload=[1, 2]), r"layer 'conv2': 'workload' must be an object"),
        (lambda d: d["layers"][0]["candidate"].pop("in"), r"layer 'conv1': 'candidate': missing 'in'"),
        (lambda d: d["layers"][0].update(predicted_cost="fast"), r"'predicted_cost' must be a number or nul"),
        (lambda d: d["layers"].insert(0, "conv1"), r"layers\[0\] must be an object, not a string"),
        (lambda d: d["model"]["inputs"]["data"].update(shape=[1, -4, 8, 8]),
         r"model input 'data': 'shape' must be a list of positive integers"),
        (lambda d: d["versions"].pop("schedules"), r"'versions': missing 'schedules'"),
        # version 2 holds the candidate alone: a label written beside it would be ignored, so it is refused
        (lambda d: d["layers"][1].update(label="NCHW4c->NCHW4c"), r"layer 'conv2': unknown field 'label'"),
    ],
)
def test_a_hand_edited_solution_file_is_refused_naming_the_layer_and_field(tuned, tmp_path, edit, message):
    document = _document(tuned)
    edit(document)
    path = _write(tmp_path / "edited.solution.json", document)
    with pytest.raises(ProblemError, match=message) as error:
        load_solution(path)
    assert str(error.value).startswith(f"solution file {str(path)!r}: ") and "\n" not in str(error.value)


def test_the_record_round_trips_through_json(tuned):
    from layoutopt.tvm.deploy.solution_file import SolutionFile

    document = _document(tuned)
    record = load_solution(tuned[2])
    assert isinstance(record, SolutionFile) and record.to_json() == document
    assert record.layers[1].label == "NCHW8c->NCHW8c" and record.inputs["data"].shape == (1, 4, 8, 8)
    assert SolutionFile.from_json(document) == record


def test_a_version_1_file_still_builds_the_same(tuned, tmp_path):
    result, _, _, mod = tuned
    path = _write(tmp_path / "old.solution.json", _as_version_1(_document(tuned)))
    assert load_solution(path) == load_solution(tuned[2])
    _, module = build_from_solution(mod, path)
    assert module.script() == result.module.script()


@pytest.mark.parametrize(
    ("field", "value"),
    [("label", "NCHW4c->NCHW4c"), ("in", "NCHW4c"), ("out", "NCHW4c"), ("algorithm", "winograd"),
     ("knobs", {"order": "rows"}), ("binding", "conv1")],
)
def test_an_edit_to_a_version_1_files_repeated_fields_is_refused(tuned, tmp_path, field, value):
    document = _as_version_1(_document(tuned))
    layer = next(layer for layer in document["layers"] if layer["layer"] == "conv2")
    assert layer["candidate"] == {"in": "NCHW8c", "out": "NCHW8c"}  # the pin
    layer[field] = value
    path = _write(tmp_path / "edited.solution.json", document)
    with pytest.raises(ProblemError, match=rf"layer 'conv2': '{field}' is .* but its 'candidate'"):
        build_from_solution(tuned[3], path)


def test_another_tvm_or_layoutopt_version_is_a_warning_naming_both(tuned, tmp_path):
    import tvm

    document = _document(tuned)
    document["versions"].update(tvm="0.26.0", layoutopt="0.0.1")
    path = _write(tmp_path / "older.solution.json", document)
    with pytest.warns(UserWarning) as caught:
        executable, _ = build_from_solution(tuned[3], path)
    messages = [str(w.message) for w in caught]
    assert any(f"TVM 0.26.0, this is TVM {tvm.__version__}" in m for m in messages), messages
    assert any("layoutopt 0.0.1, this is layoutopt " in m for m in messages), messages
    assert executable is not None


def test_other_schedules_are_refused_naming_both_versions(tuned, tmp_path):
    from layoutopt.tvm.kernels import SCHEDULE_VERSION

    document = _document(tuned)
    document["versions"]["schedules"] = str(SCHEDULE_VERSION - 1)
    path = _write(tmp_path / "older.solution.json", document)
    with pytest.raises(ProblemError, match=f"schedule version {SCHEDULE_VERSION - 1}, this layoutopt has "
                                           f"schedule version {SCHEDULE_VERSION}"):
        build_from_solution(tuned[3], path)


# -- writing: both paths checked first, the linker's words, no TVM debugging lines --------------------


def test_export_checks_both_paths_before_writing_either(tuned, tmp_path):
    result = tuned[0]
    (tmp_path / "m.solution.json").mkdir()
    with pytest.raises(ProblemError, match=r"m\.solution\.json' is a directory"):
        result.export(tmp_path / "m.so")
    assert not (tmp_path / "m.so").exists()
    with pytest.raises(ProblemError, match=r"'/proc/x\.so': cannot write there"):
        result.export("/proc/x.so", tmp_path / "x.solution.json")
    assert not (tmp_path / "x.solution.json").exists()


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc, a directory no file can be created in")
def test_an_export_failure_shows_the_linkers_own_words(tuned):
    from layoutopt.tvm.deploy.solution_file import export_library

    with pytest.raises(ProblemError, match=r"the library '/proc/x\.so' failed: .*cannot open output file"):
        export_library(tuned[0].executable, "/proc/x.so")


def test_export_drops_tvms_scope_saving_lines_and_keeps_every_other(tuned, tmp_path, capfd):
    from layoutopt.tvm.deploy.solution_file import export_library

    executable = tuned[0].executable  # run by the tune: its memory scopes are known
    executable.export_library(str(tmp_path / "raw.so"))
    assert "Scope Saving:" in capfd.readouterr().err, "TVM no longer logs them: drop the filter"
    export_library(executable, tmp_path / "quiet.so")
    assert "Scope Saving" not in capfd.readouterr().err and (tmp_path / "quiet.so").stat().st_size > 0
    from layoutopt.tvm._tvm import without_scope_saving_lines

    with without_scope_saving_lines():
        os.write(2, b"[12:00:00] /x/executable.cc:276: Warning: Scope Saving:global\nld: a real error\n")
    assert capfd.readouterr().err == "ld: a real error\n"


def test_an_impossible_pin_is_named_and_an_unknown_one_refused_before_measuring(tmp_path, monkeypatch):
    mod = models.chain((8,), in_channels=4, size=8)
    import layoutopt.tvm.measure.measure as measure

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
    assert boundaries == {"relax.reshape"}  # no opaque call_tir; the SE mean and the resize follow
    resizes = [b.var.name for blk in prepared["main"].body.blocks for b in blk.bindings
               if getattr(getattr(b.value, "op", None), "name", None) == "relax.image.resize2d"]
    assert len(resizes) == 1 and resizes[0] in graph.following
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
    import layoutopt.tvm.measure.measure as measure

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
    # the file as version 1 wrote it (an add's label is its layout alone) still builds; written by
    # another TVM, it says so in one line
    document = json.loads(solution.read_text())
    old = _as_version_1(document)
    old["versions"]["tvm"] = "0.26.0"
    old = _write(tmp_path / "old.solution.json", old)
    assert main(["build", str(model), "--solution", str(old), "-o", str(tmp_path / "old.so")]) == 0
    captured = capsys.readouterr()
    assert "nothing measured" in captured.out
    assert re.fullmatch(r"layoutopt build: warning: the solution was tuned with TVM 0\.26\.0, this is TVM "
                        r"\S+: the build may not be the one measured\n", captured.err)
    # an add runs in one common layout: in and out apart is refused, not built as something else
    add = next(layer for layer in document["layers"] if layer["kind"] == "multi")
    add["candidate"] = {"in": "NCHW4c", "out": "NCHW8c"}
    edited = _write(tmp_path / "edited.solution.json", document)
    assert main(["build", str(model), "--solution", str(edited), "-o", str(tmp_path / "edited.so")]) == 2
    assert f"layer {add['layer']!r}: 'candidate' {json.dumps(add['candidate'])} is not one of its common" \
        in capsys.readouterr().err


def test_build_names_the_solution_file_whose_shapes_do_not_fit(tuned, tmp_path, capsys):
    document = _document(tuned)
    document["model"]["inputs"] = {"x": document["model"]["inputs"]["data"]}  # tiny.onnx's input name
    solution = _write(tmp_path / "s.solution.json", document)
    model = tiny_conv_onnx(tmp_path / "tiny16.onnx", size=16)  # declared [N, 4, 16, 16]
    assert main(["build", str(model), "--solution", str(solution), "-o", str(tmp_path / "x.so")]) == 2
    err = capsys.readouterr().err
    assert f"the shape [1, 4, 8, 8] (from solution file {str(solution)!r}) does not fit" in err
    assert "given shape" not in err


def test_build_checks_its_output_before_building(tuned, capsys, monkeypatch):
    import layoutopt.tvm.deploy.solution_file as deploy

    monkeypatch.setattr(deploy, "build_from_solution", lambda *a, **k: pytest.fail("built"))
    assert main(["build", "--solution", str(tuned[2]), "-o", "/proc/x.so"]) == 2
    assert "-o '/proc/x.so': cannot write there" in capsys.readouterr().err


def test_the_layer_table_shows_the_build_handed_back(tuned):
    from layoutopt.tvm.cli import _layer_table

    result = tuned[0]
    assert _layer_table(result).startswith(f"layers of the build handed back: {result.chosen} (")
    # a fixed rule handed back: its layers, not the tuned ones (conv2 is pinned to NCHW8c there)
    nchw4c = fixed_layout_assignment(result.graph, "NCHW4c")
    rule = dataclasses.replace(result.baselines["best_fixed"], assignment=nchw4c)
    handed_back = dataclasses.replace(result, chosen="best_fixed",
                                      baselines={**result.baselines, "best_fixed": rule})
    table = _layer_table(handed_back).splitlines()
    assert table[0].startswith("layers of the build handed back: best_fixed (")
    rows = {line.split()[0]: line for line in table[2:]}
    for name in ("conv1", "conv2"):
        label = result.graph.nodes[name]["choices"][nchw4c[name]]
        assert label.startswith("NCHW4c->NCHW4c") and f"  {label}  " in rows[name]


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

"""``layoutopt tune`` from the command line, end to end on a tiny model, and its user errors."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("tvm")

from onnx_models import relu_only_onnx, tiny_conv_onnx  # tests/tvm is on sys.path

from layoutopt import ProblemError
from layoutopt.cli import main
from layoutopt.tvm.cli import parse_input_shapes
from layoutopt.tvm.graph.graph import candidate_label

pytestmark = pytest.mark.tvm


def test_tune_runs_end_to_end_and_writes_a_report(tmp_path, capsys):
    model = tiny_conv_onnx(tmp_path / "tiny.onnx")
    cache = tmp_path / "costs.jsonl"
    args = ["tune", str(model), "--input-shape", "1,4,8,8", "--blocks", "4,8", "--orders", "oc,rows",
            "--cache", str(cache), "--method", "pbqp", "--baselines", "nchw16c,greedy", "--repeat", "2",
            "--report", str(tmp_path / "report")]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "layers of the build handed back: " in out and "NCHW" in out
    assert re.search(r"layoutopt +predicted", out) and "speed-up" in out
    assert "nchw16c" in out and "greedy" in out
    assert "best_fixed" in out and "handed back:" in out
    assert '"order": "rows"' in cache.read_text()  # both loop orders were measured
    report = (tmp_path / "report" / "report.md").read_text()
    assert "tiny.onnx" in report and "| greedy |" in report
    assert (tmp_path / "report" / "report.png").stat().st_size > 1000


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--input-shape", "1,3,8,8"], "does not fit"),
        (["--input-shape", "1,4,eight"], "integer dims"),
        (["--rpc", "127.0.0.1:9190"], "--key"),
        (["--key", "pi"], "--rpc"),
        (["--rpc", "127.0.0.1:9190", "--key", "pi", "--timing", "handoff"], "on this machine only"),
        (["--blocks", "a,b"], "--blocks"),
        (["--orders", "oc,diagonal"], "--orders"),
    ],
)
def test_user_errors_exit_2_with_one_line(tmp_path, capsys, extra, message):
    model = tiny_conv_onnx(tmp_path / "tiny.onnx")
    argv = ["tune", str(model), "--cache", "none", "--report", "", *extra]
    if "--input-shape" not in extra:
        argv += ["--input-shape", "1,4,8,8"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("layoutopt tune: error:") and message in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--method", "simplex"], "unknown method 'simplex'"),
        (["--time-limit", "0"], "time_limit must be positive"),
        (["--time-limit", "nan"], "time_limit must be positive"),
        (["--target", ""], "the target is empty"),
        (["--target", '{"kind": "llvm", "mtriple": "aarch64-linux-gnu"}'], "name it with 'mcpu'"),
        (["--input-shape", "1,x,8,8"], "integer dims"),
        (["--input-shape", "1,4x"], "integer dims"),
        (["--input-shape", "x=1,4,8,8", "--input-shape", "x=1,4,16,16"], "given twice"),
        (["--repeat", "0"], "repeat must be an integer of at least 1, got 0"),
        (["--calibrate", "-1"], "calibrate must be an integer of at least 0, got -1"),
        (["--rtol", "0"], "rtol must be a positive tolerance, got 0"),
        (["--search-rounds", "-1"], "search_rounds must be an integer of at least 0, got -1"),
        (["--memory-budget", "40 parsecs"], "memory size '40 parsecs'"),
        (["--baselines", "nchw17c"], "nchw17c"),
        (["--trials", "-1"], "trials must be a non-negative integer"),
        (["--search-time", "0"], "search_time must be positive"),
        (["--top-k", "0"], "top_k must be a positive integer"),
        (["--cache", "FILE/costs.jsonl"], "cannot write cost cache"),
        (["--report", "FILE/report"], "--report"),
        (["-o", "TMP/taken.so"], "the solution file 'TMP/taken.solution.json' is a directory"),
        pytest.param(["-o", "/proc/x.so"], "-o '/proc/x.so': cannot write there",
                     marks=pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc")),
    ],
)
def test_every_option_is_checked_before_the_model_is_measured(tmp_path, capsys, extra, message):
    model = tiny_conv_onnx(tmp_path / "tiny.onnx")
    (tmp_path / "FILE").write_text("a file, not a directory")
    (tmp_path / "taken.solution.json").mkdir()  # where -o TMP/taken.so would write its solution file
    extra = [e.replace("FILE", str(tmp_path / "FILE")).replace("TMP", str(tmp_path)) for e in extra]
    message = message.replace("TMP", str(tmp_path))
    argv = ["tune", str(model), *extra]
    if "--input-shape" not in extra:
        argv += ["--input-shape", "1,4,8,8"]
    if "--cache" not in extra:
        argv += ["--cache", "none"]
    if "--report" not in extra:
        argv += ["--report", ""]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("layoutopt tune: error:") and message in captured.err
    assert len(captured.err.strip().splitlines()) == 1 and "Traceback" not in captured.err
    assert "cost cache" not in captured.out  # refused before loading and measuring anything


#: every keyword of tune_and_build -> the command-line option that sets it (None: not an option:
#: the model is the positional argument, the origin is the model file, progress is always shown)
CLI_OF_KEYWORD = {
    "mod": None, "origin": None, "progress": None, "target": "--target", "method": "--method",
    "cache": "--cache", "runner": "--rpc", "candidates": "--blocks", "time_limit": "--time-limit",
    "baselines": "--baselines", "guard": "--no-guard", "check": "--no-check", "rtol": "--rtol",
    "seed": "--seed", "repeat": "--repeat", "fuse": "--no-fuse", "profile": "--no-profile",
    "calibrate": "--calibrate", "pin": "--pin", "forbid": "--forbid", "storage": "--storage",
    "loop_order": "--loop-order", "trials": "--trials", "search_time": "--search-time", "top_k": "--top-k",
    "search_rounds": "--search-rounds", "memory_budget": "--memory-budget",
}


def test_every_api_option_is_a_command_line_option(capsys):
    import inspect

    from layoutopt.tvm import tune_and_build

    assert set(inspect.signature(tune_and_build).parameters) == set(CLI_OF_KEYWORD)
    with pytest.raises(SystemExit):
        main(["tune", "--help"])
    help_text = capsys.readouterr().out
    for option in filter(None, CLI_OF_KEYWORD.values()):
        assert option in help_text, option


class _Stop(Exception):
    pass


def test_the_command_line_options_reach_tune_and_build(tmp_path, monkeypatch):
    import layoutopt.tvm.tune.tune as tune_module

    seen = {}

    def recorded(mod, **kwargs):
        seen.update(kwargs)
        raise _Stop

    monkeypatch.setattr(tune_module, "tune_and_build", recorded)
    model = tiny_conv_onnx(tmp_path / "tiny.onnx")
    argv = ["tune", str(model), "--input-shape", "1,4,8,8", "--cache", "none", "--report", "",
            "--rtol", "0.002", "--seed", "7", "--no-guard", "--no-fuse", "--calibrate", "3", "--repeat", "5"]
    with pytest.raises(_Stop):
        main(argv)
    assert (seen["rtol"], seen["seed"], seen["guard"], seen["fuse"], seen["calibrate"], seen["repeat"]) == (
        0.002, 7, False, False, 3, 5)
    assert seen["profile"] is True and seen["check"] is True
    seen.clear()
    with pytest.raises(_Stop):
        main([*argv, "--no-profile", "--no-check"])
    assert (seen["profile"], seen["calibrate"], seen["check"]) == (False, 0, False)
    seen.clear()
    with pytest.raises(_Stop):
        main([*argv, "--memory-budget", "1.5MiB"])
    assert seen["memory_budget"] == 1.5 * 2**20
    assert (seen["trials"], seen["search_time"], seen["top_k"]) == (0, None, 1)  # no search by default
    seen.clear()
    with pytest.raises(_Stop):
        main([*argv, "--trials", "12", "--search-time", "90", "--top-k", "4", "--search-rounds", "0"])
    assert (seen["trials"], seen["search_time"], seen["top_k"], seen["search_rounds"]) == (12, 90.0, 4, 0)


def test_the_default_cost_cache_makes_the_second_run_measure_nothing(tmp_path, capsys, monkeypatch):
    model = tiny_conv_onnx(tmp_path / "tiny.onnx")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    cache = tmp_path / "xdg" / "layoutopt" / "costs.jsonl"
    assert main(["tune", str(model), "--input-shape", "1,4,8,8"]) == 0
    first = capsys.readouterr().out
    assert f"cost cache {cache}" in first and cache.stat().st_size > 0
    measured = int(re.search(r"kernels and transforms: (\d+) measured", first).group(1))
    assert measured > 0
    assert main(["tune", str(model), "--input-shape", "1,4,8,8"]) == 0
    second = capsys.readouterr().out
    assert re.search(r"kernels and transforms: 0 measured, \d+ from the cost cache", second)
    assert (tmp_path / "layoutopt-report" / "report.md").exists()


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """One ``layoutopt tune -o`` of the tiny model with a report, run as a user runs it (a process of
    its own: TVM's C++ logs reach its stderr): (the finished process, its directory)."""
    directory = tmp_path_factory.mktemp("exported")
    model = tiny_conv_onnx(directory / "tiny.onnx")
    argv = ["tune", str(model), "--input-shape", "1,4,8,8", "--blocks", "4,8", "--cache",
            str(directory / "costs.jsonl"), "--baselines", "greedy", "--repeat", "3",
            "--report", str(directory / "report"), "-o", str(directory / "out" / "tiny.so")]
    done = subprocess.run([sys.executable, "-m", "layoutopt.cli", *argv], capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr
    return done, directory


def test_tune_o_exports_without_tvms_scope_saving_lines(exported):
    done, directory = exported
    assert (directory / "out" / "tiny.so").stat().st_size > 0
    assert "Scope Saving" not in done.stderr


def test_the_layer_table_is_the_build_handed_back(exported):
    done, directory = exported
    handed_back = re.search(r"^handed back: (\S+)", done.stdout, re.MULTILINE).group(1)
    lines = done.stdout.splitlines()
    title = next(i for i, line in enumerate(lines) if line.startswith("layers of the build handed back: "))
    assert lines[title].startswith(f"layers of the build handed back: {handed_back} (")
    rows = {line.split()[0]: line for line in lines[title + 2:lines.index("", title)]}
    solution = json.loads((directory / "out" / "tiny.solution.json").read_text())
    assert solution["handed_back"]["name"] == handed_back
    for layer in solution["layers"]:
        if layer["kind"] == "target":  # the kernels written to the .so are the table's
            assert f"  {candidate_label(layer['candidate'])}  " in rows[layer["layer"]]


def test_where_the_time_goes_shows_the_build_handed_back_and_b_star_and_the_report_every_build(exported):
    done, directory = exported
    handed_back = re.search(r"^handed back: (\S+)", done.stdout, re.MULTILINE).group(1)
    section = done.stdout.split("where the time goes", 1)[1].splitlines()
    header = next(line for line in section if line.startswith("| op |"))
    assert set(re.findall(r"(\S+) predicted \(ms\)", header)) == {handed_back, "best_fixed"}
    report = (directory / "report" / "report.md").read_text()
    report_header = next(line for line in report.splitlines() if line.startswith("| op |"))
    assert {"layoutopt", "greedy", "nchw8c", "nchw16c", "best_fixed"} <= set(
        re.findall(r"(\S+) predicted \(ms\)", report_header))


def test_an_empty_model_file_is_called_empty(tmp_path, capsys):
    (tmp_path / "empty.onnx").write_bytes(b"")
    assert main(["tune", str(tmp_path / "empty.onnx"), "--cache", "none", "--report", ""]) == 2
    err = capsys.readouterr().err
    assert "'" + str(tmp_path / "empty.onnx") + "' is empty (0 bytes): not an ONNX model" in err
    assert "IR version" not in err


def test_model_without_supported_ops_exits_2(tmp_path, capsys):
    model = relu_only_onnx(tmp_path / "relu.onnx")
    assert main(["tune", str(model), "--cache", "none", "--report", ""]) == 2
    assert "no supported op" in capsys.readouterr().err


def test_missing_tvm_extra_keeps_the_command_and_explains(tmp_path):
    code = "import sys; sys.modules['tvm'] = None; from layoutopt.cli import main; sys.exit(main(['tune']))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "pip install 'layoutopt[tvm]'" in done.stderr


def test_parse_input_shapes():
    assert parse_input_shapes(None) is None
    assert parse_input_shapes(["1,3,224,224"]) == [1, 3, 224, 224]
    assert parse_input_shapes(["a=1,3,8,8", "b=1,4"]) == {"a": [1, 3, 8, 8], "b": [1, 4]}
    assert parse_input_shapes(["1x3x8x8"]) == [1, 3, 8, 8]
    for bad in (["1,x,224"], ["1,3x"], ["1,,3"], ["a=1,3", "a=1,4"], ["1,0"]):
        with pytest.raises(ProblemError):
            parse_input_shapes(bad)

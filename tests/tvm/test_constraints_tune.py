"""Pins and forbids given to ``tune_and_build`` and ``layoutopt tune``: contradictions are refused before
anything is measured (tests/test_constraints.py checks the rules themselves)."""

from __future__ import annotations

import pytest

pytest.importorskip("tvm")

from onnx_models import tiny_conv_onnx  # tests/tvm is on sys.path

from layoutopt import ProblemError
from layoutopt.cli import main
from layoutopt.tvm import models, tune_and_build
from layoutopt.tvm.measure import problem

pytestmark = pytest.mark.tvm

DIRECT = {"blocks": [8, 16], "algorithms": ["direct"]}


@pytest.fixture
def nothing_measured(monkeypatch):
    def measured(*args, **kwargs):
        raise AssertionError("kernels were measured before the pins and forbids were checked")

    monkeypatch.setattr(problem, "build_problem", measured)


@pytest.mark.parametrize(
    ("pin", "forbid", "message"),
    [
        (["conv2=NCHW16c->NCHW16c"], {"conv2": "NCHW16c->NCHW16c"},
         "pin conv2=NCHW16c->NCHW16c contradicts forbid conv2=NCHW16c->NCHW16c: every choice of layer"),
        (["conv2=NCHW16c->NCHW16c", "conv2=NCHW8c->NCHW8c"],
         ["conv2=NCHW8c->NCHW8c", "conv2=NCHW16c->NCHW16c"],
         "pin conv2=NCHW16c->NCHW16c contradicts forbid conv2=NCHW16c->NCHW16c"),
        (None, ["conv1=NCHW8c->NCHW8c", "conv1=NCHW8c->NCHW16c", "conv1=NCHW->NCHW"],
         "every choice of layer 'conv1' is forbidden: forbid conv1=NCHW8c->NCHW8c, "),
    ],
)
def test_tune_and_build_refuses_contradicting_pins_before_measuring(nothing_measured, pin, forbid, message):
    with pytest.raises(ProblemError, match=message):
        tune_and_build(models.chain((16, 16)), candidates=DIRECT, pin=pin, forbid=forbid)


def test_the_tune_command_refuses_a_pin_and_a_forbid_of_one_choice_before_loading_the_model(tmp_path, capsys):
    model = tiny_conv_onnx(tmp_path / "tiny.onnx")
    argv = ["tune", str(model), "--input-shape", "1,4,8,8", "--cache", "none", "--report", "",
            "--pin", "lv=NCHW4c->NCHW4c", "--forbid", "lv=NCHW4c->NCHW4c"]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.err == ("layoutopt tune: error: pin lv=NCHW4c->NCHW4c contradicts forbid "
                            "lv=NCHW4c->NCHW4c: every choice of layer 'lv' the pin allows is forbidden\n")
    assert "cost cache" not in captured.out  # refused before the model was loaded

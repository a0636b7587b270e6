"""The check of TVM's import against a runtime independent of TVM (layoutopt.tvm.evaluate.origin): the model
of
issue 45 tuned through the real path matches ONNX Runtime, and an import that is wrong in a way
layoutopt does not fix is refused in one line, naming the node, before anything is measured."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

pytest.importorskip("tvm")
onnxruntime = pytest.importorskip("onnxruntime")

from onnx_models import issue45_onnx  # noqa: E402  (tests/tvm is on sys.path)

from layoutopt.cli import main  # noqa: E402
from layoutopt.tvm import models, tune_and_build  # noqa: E402
from layoutopt.tvm.evaluate.check import Reference  # noqa: E402
from layoutopt.tvm.evaluate.origin import ImportMismatch, OnnxOrigin, check_import  # noqa: E402
from layoutopt.tvm.evaluate.timing import random_inputs  # noqa: E402
from layoutopt.tvm.frontend.load import load_with_origin  # noqa: E402

pytestmark = pytest.mark.tvm

#: the cheapest real tune: direct kernels in one block (and NCHW), no calibration, a few timing rounds
QUICK = ["--blocks", "8", "--algorithms", "direct", "--repeat", "3", "--baselines", "", "--report", ""]


def onnxruntime_output(path, x):
    return onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


@pytest.fixture
def broken_relu(monkeypatch):
    """TVM's ONNX frontend with a Relu converter that is wrong (x 1.5): an import defect layoutopt does
    not fix."""
    from tvm import relax
    from tvm.relax.frontend.onnx import onnx_frontend

    class BrokenRelu(onnx_frontend.OnnxOpConverter):
        @classmethod
        def _impl_v1(cls, bb, inputs, attr, params):
            return relax.op.multiply(relax.op.nn.relu(inputs[0]), relax.const(1.5, "float32"))

    converters = onnx_frontend._get_convert_map()
    monkeypatch.setattr(onnx_frontend, "_get_convert_map", lambda: {**converters, "Relu": BrokenRelu})


def test_the_issues_model_tuned_hands_back_a_library_that_matches_onnxruntime(tmp_path, capsys):
    import tvm

    model = issue45_onnx(tmp_path / "rz.onnx")
    library = tmp_path / "rz.so"
    assert main(["tune", str(model), "--input-shape", "x=1,16,21,21", "--cache", str(tmp_path / "c.jsonl"),
                 "-o", str(library), *QUICK]) == 0
    out = capsys.readouterr().out
    assert "ONNX Runtime" in out and "agrees with it within" in out  # what the check compared
    x = np.random.default_rng(5).standard_normal((1, 16, 21, 21)).astype("float32")
    vm = tvm.relax.VirtualMachine(tvm.runtime.load_module(str(library)), tvm.cpu())
    ours, theirs = vm["main"](tvm.runtime.tensor(x)).numpy(), onnxruntime_output(model, x)
    assert np.abs(ours - theirs).max() <= 1e-5 * np.abs(theirs).max()
    check = json.loads((tmp_path / "rz.solution.json").read_text())["check"]
    assert check["imported"].startswith("ONNX Runtime") and check["imported_error"] < 1e-5


def test_an_import_defect_it_does_not_fix_is_refused_in_one_line_before_measuring(broken_relu, tmp_path,
                                                                                  capsys):
    model = issue45_onnx(tmp_path / "rz.onnx")
    cache, library = tmp_path / "c.jsonl", tmp_path / "rz.so"
    assert main(["tune", str(model), "--input-shape", "x=1,16,21,21", "--cache", str(cache),
                 "-o", str(library), *QUICK]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "disagrees with ONNX Runtime" in err
    assert "the first node whose output differs is 'relu' (op Relu)" in err
    assert not library.exists() and not cache.exists()  # nothing measured, nothing handed back


def test_tvms_own_resize_import_is_caught_and_named(monkeypatch, tmp_path):
    from layoutopt.tvm.frontend import onnx_import

    monkeypatch.setattr(onnx_import, "RESIZE_OPS", ())  # TVM's converter: coordinates by 21/31
    mod, origin = load_with_origin(issue45_onnx(tmp_path / "rz.onnx"), [1, 16, 21, 21])
    inputs = random_inputs(mod)
    with pytest.raises(ImportMismatch, match=r"first node whose output differs is 'resize' \(op Resize\)"):
        check_import(origin, mod, inputs, Reference.of(mod, inputs, "llvm"), "llvm")


def test_without_onnxruntime_the_reference_is_onnx_reference_evaluator(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import onnxruntime raises ImportError
    mod, origin = load_with_origin(issue45_onnx(tmp_path / "rz.onnx"), [1, 16, 21, 21])
    assert isinstance(origin, OnnxOrigin)
    inputs = random_inputs(mod)
    checked = check_import(origin, mod, inputs, Reference.of(mod, inputs, "llvm"), "llvm")
    assert checked.runtime.startswith("onnx.reference") and checked.error < 1e-5


def test_a_bare_irmodule_says_it_has_no_independent_reference():
    result = tune_and_build(models.chain((8, 8)), cache=None, guard=False, baselines=(), calibrate=0,
                            repeat=2, profile=False, candidates={"blocks": [8], "algorithms": ["direct"]})
    assert "no reference independent of TVM (a bare IRModule" in result.summary()
    assert result.reference.imported.runtime is None


def test_a_torch_program_is_judged_against_torch_eager_and_refused_unbisected(monkeypatch):
    from layoutopt.tvm.evaluate import origin as origins

    mod = models.chain((8, 8))
    inputs = random_inputs(mod)
    reference = Reference.of(mod, inputs, "llvm")
    right = [np.asarray(x, np.float32) for x in reference.untouched]
    monkeypatch.setattr(origins, "_torch_eager", lambda origin, arrays: ("torch eager", right))
    assert check_import(origins.TorchOrigin("m.pt2"), mod, inputs, reference, "llvm").runtime == "torch eager"
    wrong = [x * 1.5 for x in right]
    monkeypatch.setattr(origins, "_torch_eager", lambda origin, arrays: ("torch eager", wrong))
    with pytest.raises(ImportMismatch, match=r"disagrees with torch eager: .*not bisected by node"):
        check_import(origins.TorchOrigin("m.pt2"), mod, inputs, reference, "llvm")


def test_a_torch_interpolate_by_a_scale_tvm_imports_wrongly_is_refused(tmp_path):
    torch = pytest.importorskip("torch")  # the torch extra; runs where torch is installed

    class Upsample(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(4, 8, 3, padding=1)

        def forward(self, x):
            return torch.nn.functional.interpolate(self.conv(x), scale_factor=1.5, mode="nearest")

    path = tmp_path / "up.pt2"
    torch.export.save(torch.export.export(Upsample().eval(), (torch.randn(1, 4, 7, 7),)), str(path))
    mod, origin = load_with_origin(path)
    inputs = random_inputs(mod)
    with pytest.raises(ImportMismatch, match="disagrees with torch"):
        check_import(origin, mod, inputs, Reference.of(mod, inputs, "llvm"), "llvm")


def test_a_model_the_reference_runtime_cannot_run_is_one_line(monkeypatch, tmp_path):
    from layoutopt import ProblemError
    from layoutopt.tvm.evaluate import origin as origins

    def refuses():
        def run(model, feeds):
            raise RuntimeError("[ONNXRuntimeError] : 9 : NOT_IMPLEMENTED : no kernel\\nmore")
        return "ONNX Runtime 0.0", run

    monkeypatch.setattr(origins, "_onnx_runtime", refuses)
    mod, origin = load_with_origin(issue45_onnx(tmp_path / "rz.onnx"), [1, 16, 21, 21])
    inputs = random_inputs(mod)
    with pytest.raises(ProblemError, match=r"ONNX Runtime 0\.0 cannot run .*NOT_IMPLEMENTED") as raised:
        check_import(origin, mod, inputs, Reference.of(mod, inputs, "llvm"), "llvm")
    assert "\n" not in str(raised.value)

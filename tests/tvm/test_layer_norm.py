"""A layer norm written out op by op, as exporters write it (PP-OCRv4's recogniser), runs as one
``layer_norm`` kernel: :func:`layoutopt.tvm.frontend.normalise.layer_norms_as_one_op`."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tvm")

from layoutopt.tvm.building.builder import build
from layoutopt.tvm.frontend.normalise import prepare

pytestmark = pytest.mark.tvm

TOKENS, WIDTH, EPS = 7, 24, 1e-5


def written_out(power: float = 2.0, second_axes: str = "-1", gamma_shape: str = f"{WIDTH}"):
    """ONNX ``x -> LayerNorm(x) + x`` with the norm written as Paddle's exporter writes it."""
    import onnx
    from tvm.relax.frontend.onnx import from_onnx

    rng = np.random.default_rng(0)
    gamma_size = int(np.prod([int(d) for d in gamma_shape.split(",")]))
    gamma = ", ".join(f"{v:.4f}" for v in rng.uniform(0.5, 1.5, gamma_size))
    beta = ", ".join(f"{v:.4f}" for v in rng.uniform(-0.5, 0.5, WIDTH))
    model = onnx.parser.parse_model(f'''<ir_version: 8, opset_import: ["" : 13]>
        norm (float[1, {TOKENS}, {WIDTH}] x) => (float[1, {TOKENS}, {WIDTH}] y)
            <float p = {{{power}}}, float eps = {{{EPS}}}, float[{gamma_shape}] gamma = {{{gamma}}},
             float[{WIDTH}] beta = {{{beta}}}> {{
            mean = ReduceMean<axes = [-1]>(x)
            centred = Sub(x, mean)
            squared = Pow(centred, p)
            variance = ReduceMean<axes = [{second_axes}]>(squared)
            shifted = Add(variance, eps)
            deviation = Sqrt(shifted)
            normed = Div(centred, deviation)
            scaled = Mul(normed, gamma)
            shifted_by = Add(scaled, beta)
            y = Add(shifted_by, x)
        }}''')
    return from_onnx(model), np.array([float(v) for v in gamma.split(", ")], "float32"), \
        np.array([float(v) for v in beta.split(", ")], "float32")


def ops_of(mod) -> list[str]:
    return [b.value.op.name for block in mod["main"].body.blocks for b in block.bindings
            if hasattr(b.value, "op") and hasattr(b.value.op, "name")]


def run(mod, x):
    import tvm

    vm = tvm.relax.VirtualMachine(build(mod, "llvm"), tvm.cpu())
    return vm["main"](tvm.runtime.tensor(x)).numpy()


def test_a_written_out_layer_norm_is_one_op_and_computes_the_same():
    mod, gamma, beta = written_out()
    prepared = prepare(mod)
    assert ops_of(prepared) == ["relax.nn.layer_norm", "relax.add"]
    x = np.random.default_rng(1).standard_normal((1, TOKENS, WIDTH)).astype("float32")
    x64 = x.astype("float64")
    centred = x64 - x64.mean(-1, keepdims=True)
    expected = centred / np.sqrt((centred ** 2).mean(-1, keepdims=True) + EPS) * gamma + beta + x64
    np.testing.assert_allclose(run(prepared, x), expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(run(prepared, x), run(mod, x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("variant", [{"power": 3.0}, {"second_axes": "1"},
                                     {"gamma_shape": f"{TOKENS},{WIDTH}"}],
                         ids=["cube", "other-axis", "gamma-per-token"])
def test_what_is_not_a_layer_norm_stays_as_written(variant):
    prepared = prepare(written_out(**variant)[0])
    assert "relax.nn.layer_norm" not in ops_of(prepared)
    assert ops_of(prepared).count("relax.mean") == 2


def test_the_float64_reference_computes_a_layer_norm():
    # TOPI's layer_norm refuses float64: the reference writes it out again
    import tvm

    from layoutopt.tvm.evaluate.check import float64_module

    prepared = prepare(written_out()[0])
    wide = float64_module(prepared)
    assert "relax.nn.layer_norm" not in ops_of(wide)
    x = np.random.default_rng(2).standard_normal((1, TOKENS, WIDTH))
    vm = tvm.relax.VirtualMachine(tvm.compile(wide, "llvm"), tvm.cpu())
    np.testing.assert_allclose(vm["main"](tvm.runtime.tensor(x)).numpy(), run(prepared, x.astype("float32")),
                               rtol=1e-5, atol=1e-5)

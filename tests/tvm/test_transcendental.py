"""The vectorised float32 exp, log, tanh, erf and sigmoid (:mod:`layoutopt.tvm.kernels.transcendental`):
accurate to a few ulp over the whole float32 range, special values included, and no build of a model
using them (exact and tanh GELU, Mish, softplus, SiLU; fused conv epilogues and functions of their own)
holds a scalar libm call."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tvm")  # the tvm extra; CI installs it

from onnx_models import ACTIVATIONS, activation_onnx  # tests/tvm is on sys.path

from layoutopt.tvm import extract_layout_graph, load_model, prepare, resolve_target
from layoutopt.tvm._tvm import import_tvm
from layoutopt.tvm.building import builder
from layoutopt.tvm.building.apply import apply_assignment
from layoutopt.tvm.building.baselines import fixed_layout_assignment
from layoutopt.tvm.evaluate.timing import run
from layoutopt.tvm.kernels import build_kernel, check_kernel, reference_output
from layoutopt.tvm.kernels import transcendental as T
from layoutopt.tvm.kernels.epilogue import apply_numpy

pytestmark = pytest.mark.tvm

#: the largest error each function may make, in float32 ulps of the exact value (measured on znver4,
#: with and without FMA: exp 0.99, log 0.77, tanh 1.49, erf 1.26, sigmoid 2.25)
ULP_BOUNDS = {"exp": 1.5, "log": 1.5, "tanh": 2.0, "erf": 2.0, "sigmoid": 3.0}


def float32_range() -> np.ndarray:
    """Every exponent of both signs (denormals: exponent field 0) with 256 mantissas each (the extremes
    among them), a dense grid over [-12, 12], and +-0, +-inf, NaN."""
    rng = np.random.default_rng(0)
    exponents = np.arange(256, dtype=np.uint32)
    mantissas = rng.integers(0, 1 << 23, (256, 256), dtype=np.uint32)
    mantissas[:, :4] = [0, 1, (1 << 23) - 1, 1 << 22]
    bits = [(sign << 31) | (exponents[:, None] << 23) | mantissas for sign in (0, 1)]
    values = np.concatenate([b.ravel() for b in bits]).view(np.float32)
    dense = np.linspace(-12, 12, 96001, dtype=np.float32)
    return np.concatenate([values, dense, np.array([0.0, -0.0, np.inf, -np.inf, np.nan], np.float32)])


def truth(name: str, x: np.ndarray) -> np.ndarray:
    """float64 references: numpy's, and math.erf per element."""
    with np.errstate(all="ignore"):
        if name == "erf":
            return np.vectorize(math.erf, otypes=[np.float64])(x)
        if name == "sigmoid":  # both forms exact in float64 where they do not overflow
            return np.where(x >= 0, 1 / (1 + np.exp(-x)), np.exp(x) / (1 + np.exp(x)))
        return {"exp": np.exp, "log": np.log, "tanh": np.tanh}[name](x)


def ulp_errors(got: np.ndarray, exact: np.ndarray) -> np.ndarray:
    """|got - exact| in ulps of float32 at ``exact`` (denormal ulps below the normal range), for
    finite float32 values of ``exact``."""
    binade = np.floor(np.log2(np.maximum(np.abs(exact), 2.0**-126)))
    return np.abs(got.astype(np.float64) - exact) / 2.0 ** (binade - 23)


def compiled(tvm, function, target):
    n = tvm.te.var("n")  # any length: the module runs on the arrays it is given
    x = tvm.te.placeholder((n,), name="x")
    y = T.pointwise_te(tvm, x, function, "y")
    sch = tvm.s_tir.Schedule(tvm.te.create_prim_func([x, y]))
    loop = sch.get_loops(sch.get_sblock("y"))[0]
    sch.vectorize(sch.split(loop, [None, 16])[1])
    return tvm.compile(sch.mod, target=target)


#: AVX2 code (znver3) runs on AVX-512 hosts too: both ISAs' code is checked wherever the tests run
@pytest.mark.parametrize("target", [None, {"kind": "llvm", "mcpu": "znver3"}, "llvm"],
                         ids=["host", "avx2", "no-fma"])
@pytest.mark.parametrize("name", sorted(ULP_BOUNDS))
def test_each_function_is_float32_accurate_over_the_whole_range(name, target):
    tvm = import_tvm()
    lib = compiled(tvm, T.UNARY[name], resolve_target(target))
    assert T.libm_calls(lib.mod.inspect_source("asm")) == {}  # vectorised: no call per element
    x = float32_range()
    out = tvm.runtime.tensor(np.zeros_like(x))
    lib(tvm.runtime.tensor(x), out)
    with np.errstate(over="ignore", invalid="ignore"):
        got, exact = out.numpy(), truth(name, x.astype(np.float64))
        rounded = exact.astype(np.float32)
    finite = np.isfinite(rounded)
    # infinities, NaN, and results past float32's range: exactly what float32 arithmetic gives
    np.testing.assert_array_equal(got[~finite], rounded[~finite])
    errors = ulp_errors(got[finite], exact[finite])
    worst = int(np.argmax(errors))
    assert errors[worst] <= ULP_BOUNDS[name], f"{name}({x[finite][worst]!r}) = {got[finite][worst]!r}, " \
        f"exact {exact[finite][worst]!r}: {errors[worst]:.2f} ulp"
    assert np.array_equal(np.signbit(got[x == 0]), np.signbit(rounded[x == 0]))  # the sign of zeros


def test_the_composite_activations_match_numpy():
    tvm = import_tvm()
    x = tvm.te.placeholder((4096,), name="x")
    values = np.linspace(-30, 30, 4096).astype("float32")
    values[:4] = [0.0, -1e-30, 90.0, -90.0]
    wide = values.astype(np.float64)
    with np.errstate(over="ignore"):
        softplus = np.where(2 * wide > 20, wide, np.log1p(np.exp(2 * wide)) / 2)
    cases = {
        "gelu": (T.gelu_te(tvm, x), apply_numpy(["gelu"], wide, [])),
        "gelu_tanh": (T.gelu_tanh_te(tvm, x), apply_numpy(["gelu_tanh"], wide, [])),
        "softplus": (T.softplus_te(tvm, x, 2.0, 20.0), softplus),
        "cube": (T.power_te(tvm, x, 3.0), wide**3),
    }
    for name, (tensor, expected) in cases.items():
        lib = tvm.compile(tvm.te.create_prim_func([x, tensor]), target=resolve_target(None))
        out = tvm.runtime.tensor(np.zeros(4096, "float32"))
        lib(tvm.runtime.tensor(values), out)
        # relative, but for GELU's 0.5 + 0.5 erf(x) (tanh), which cancels for negative x: an ulp of
        # 0.5 times x at most, as any float32 evaluation of that formula
        bound = 2e-6 * np.abs(expected) + 6e-8 * np.abs(values)
        assert (np.abs(out.numpy() - expected) <= bound).all(), name
        assert T.libm_calls(lib.mod.inspect_source("asm")) == {}, name


def test_libm_calls_are_found_where_tvm_emits_them():
    # the check the model tests rely on: TOPI's erf and tanh call libm per element
    tvm = import_tvm()
    x = tvm.te.placeholder((64,), name="x")
    function = tvm.te.create_prim_func([x, tvm.topi.tanh(tvm.topi.erf(x))])
    lib = tvm.compile(function, target=resolve_target(None))
    assert set(T.libm_calls(lib.mod.inspect_source("asm"))) == {"erff", "expf"}


@pytest.mark.parametrize("epilogue", [
    ["bias", "exp", ["add", 1.0], "log", "tanh", ["multiply", "@1"]],  # Mish
    ["bias", ["power", 3.0], ["multiply", 0.044715], ["add", "@1"], ["multiply", 0.7978846], "tanh",
     ["add", 1.0], ["multiply", "@1"], ["multiply", 0.5]],  # tanh GELU as exporters write it
    ["bias", ["divide", 1.4142135], "erf", ["add", 1.0], ["multiply", "@1"], ["multiply", 0.5]],
], ids=["mish", "gelu_tanh", "gelu"])
@pytest.mark.parametrize("candidate", [
    {"in": "NCHW16c", "out": "NCHW16c"}, {"in": "NCHW8c", "out": "NCHW32c"},
    {"in": "NCHW16c", "out": "NCHW16c", "algorithm": "gemm"}, {"in": "NCHW", "out": "NCHW"},
], ids=["16c", "8c-32c", "gemm", "nchw"])
def test_convs_with_transcendental_epilogues_match_numpy(epilogue, candidate):
    target = resolve_target(None)
    workload = {"op": "conv2d", "data": [1, 16, 6, 6], "kernel": [32, 16, 1, 1], "strides": [1, 1],
                "padding": [0, 0, 0, 0], "dilation": [1, 1], "groups": 1, "dtype": "float32",
                "epilogue": epilogue}
    kernel = build_kernel(workload, candidate, target)
    assert check_kernel(kernel, target=target) < 1e-5
    executable = import_tvm().compile(kernel.module, target=target)
    assert T.libm_calls(executable.mod.inspect_source("asm")) == {}
    plain = reference_output({**workload, "epilogue": ["bias"]}, kernel.logical_inputs()[:3])
    assert not np.allclose(plain, reference_output(workload, kernel.logical_inputs()))


def _layouts(activation: str) -> list[str]:
    return ["NCHW", "NCHW8c", "NCHW16c"] if activation in ("gelu", "mish") else ["NCHW", "NCHW8c"]


@pytest.mark.parametrize(("activation", "layout"),
                         [(a, layout) for a in ACTIVATIONS for layout in _layouts(a)])
def test_no_build_of_a_model_holds_a_scalar_libm_call(activation, layout, tmp_path):
    """Every function of the build (the convs with their fused activation, the activation of the sum)
    runs vectorised, and computes what ONNX Runtime computes; TVM's own build calls libm there."""
    ort = pytest.importorskip("onnxruntime")
    path = activation_onnx(Path(tmp_path) / f"{activation}.onnx", activation)
    mod = prepare(load_model(path, [1, 3, 12, 12]))
    graph = extract_layout_graph(mod, prepared=True)
    target = resolve_target(None)
    built = builder.build(apply_assignment(graph.mod, graph, fixed_layout_assignment(graph, layout)), target)
    assert T.libm_calls(built.mod.imports[0].inspect_source("asm")) == {}
    x = np.random.default_rng(0).standard_normal((1, 3, 12, 12)).astype("float32") * 2
    (expected,) = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    (got,) = run(built, [x])
    assert np.abs(got - expected).max() <= 1e-5 * np.abs(expected).max()
    if layout == "NCHW":
        untouched = import_tvm().compile(mod, target=target)
        assert T.libm_calls(untouched.mod.imports[0].inspect_source("asm"))  # the calls this replaces

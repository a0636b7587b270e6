"""builder.fold_reshapes: reshape chains made one reshape, identity reshapes dropped, before the build."""

from __future__ import annotations

import numpy as np
import pytest

tvm = pytest.importorskip("tvm")

from tvm.script import relax as R  # noqa: E402
from tvm.script import tirx as T  # noqa: E402

from layoutopt.tvm.building.builder import build, fold_reshapes  # noqa: E402

pytestmark = pytest.mark.tvm


@tvm.script.ir_module
class Logits:
    """The PP-OCRv4 recogniser's head as its importer writes it: the logits reshaped to 1x40xN and
    back before the softmax, then to 1x40xN again as the output."""

    @R.function
    def main(x: R.Tensor((40, 24), "float32"), w: R.Tensor((24, 66), "float32")):
        with R.dataflow():
            logits = R.matmul(x, w)
            there = R.reshape(logits, (1, 40, 66))
            back = R.reshape(there, (40, 66))
            probabilities = R.nn.softmax(back, axis=-1)
            flat = R.reshape(R.reshape(probabilities, (1, 2640)), (2640,))
            out = R.reshape(flat, (1, 40, 66))
            R.output(out)
        return out


def _ops(mod) -> list[str]:
    return [binding.value.op.name for block in mod["main"].body.blocks for binding in block.bindings]


def test_a_round_trip_goes_and_a_chain_becomes_one_reshape():
    before = Logits.script()
    folded = fold_reshapes(Logits)
    assert _ops(Logits).count("relax.reshape") == 5
    # the round trip is gone (softmax reads the matmul), the three trailing reshapes are one
    assert _ops(folded) == ["relax.matmul", "relax.nn.softmax", "relax.reshape"]
    assert Logits.script() == before  # the caller's module is left as it was


def test_the_folded_build_computes_the_same_numbers():
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((40, 24)).astype("float32"), rng.standard_normal((24, 66)).astype("float32")
    outputs = []
    for mod in (Logits, fold_reshapes(Logits)):  # build() folds too: the first is folded inside it
        vm = tvm.relax.VirtualMachine(build(mod, "llvm"), tvm.cpu())
        outputs.append(vm["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(w)).numpy())
    logits = x @ w
    want = np.exp(logits - logits.max(-1, keepdims=True))
    want /= want.sum(-1, keepdims=True)
    for out in outputs:
        np.testing.assert_allclose(out, want.reshape(1, 40, 66), rtol=1e-5, atol=1e-6)


def test_a_reshape_with_a_symbolic_shape_is_left_alone():
    @tvm.script.ir_module
    class Dynamic:
        @R.function
        def main(x: R.Tensor(("n", 8), "float32")):
            n = T.int64()
            with R.dataflow():
                y = R.reshape(R.reshape(x, (1, n, 8)), (n, 8))
                R.output(y)
            return y

    assert _ops(fold_reshapes(Dynamic)).count("relax.reshape") == 2

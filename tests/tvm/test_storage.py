"""The storage plan by shape: each planned storage split by its tensors' shapes, the numbers unchanged."""

from __future__ import annotations

import re

import numpy as np
import pytest

pytest.importorskip("tvm")

from layoutopt import ProblemError
from layoutopt.tvm import build, models
from layoutopt.tvm.building.storage import split_storage_by_shape

pytestmark = pytest.mark.tvm


def _planned(mod):
    import tvm
    from tvm.relax.backend.cpu_generic import pipeline

    lowered = tvm.transform.Sequential(pipeline.dataflow_lower_passes(tvm.target.Target("llvm")))(
        tvm.relax.transform.LegalizeOps()(mod))
    return tvm.relax.transform.StaticPlanBlockMemory()(lowered)


def _placements(mod) -> dict[str, set[str]]:
    """Each storage variable of ``main``: the shapes of the tensors placed in it."""
    placed: dict[str, set[str]] = {}
    for storage, shape in re.findall(r"R\.memory\.alloc_tensor\((\w+), 0, R\.shape\((\[[^\]]*\])\)",
                                     mod["main"].script()):
        placed.setdefault(storage, set()).add(shape)
    return placed


def test_each_storage_then_holds_tensors_of_one_shape_and_no_tensor_moves_to_another_lifetime():
    planned = _planned(models.resnet(depth=18, width=8, size=32, classes=10))
    before, after = _placements(planned), _placements(split_storage_by_shape(planned))
    assert any(len(shapes) > 1 for shapes in before.values())  # Relax's plan mixes shapes here
    assert all(len(shapes) == 1 for shapes in after.values())
    # every storage of the plan became one per shape it held: as many storages as (storage, shape) pairs
    assert len(after) == sum(len(shapes) for shapes in before.values())


def test_a_build_with_storage_by_shape_computes_the_same_numbers():
    import tvm

    mod = models.resnet(depth=18, width=8, size=32, classes=10)
    x = tvm.runtime.tensor(np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype("float32"))
    outputs = [tvm.relax.VirtualMachine(build(mod, "llvm", storage=plan), tvm.cpu())["main"](x).numpy()
               for plan in ("relax", "by_shape")]
    np.testing.assert_array_equal(outputs[0], outputs[1])


def test_an_unknown_storage_plan_is_named():
    with pytest.raises(ProblemError, match="unknown storage plan 'lifo'; known: relax, by_shape"):
        build(models.chain(), "llvm", storage="lifo")


def test_a_tune_by_shape_builds_checks_and_exports_it_and_its_solution_file_rebuilds_it(tmp_path):
    import json

    import tvm

    from layoutopt.tvm import build_from_solution, tune_and_build

    mod = models.residual(channels=8, size=8)
    result = tune_and_build(mod, cache=tmp_path / "costs.jsonl", guard=False, baselines=(), calibrate=0,
                            profile=False, repeat=2, storage="by_shape")
    assert result.storage == "by_shape" and result.tuned.max_relative_error < 1e-4  # checked
    _, solution = result.export(tmp_path / "m.so")
    assert json.loads(solution.read_text())["storage"] == "by_shape"
    executable, _ = build_from_solution(mod, solution)
    x = tvm.runtime.tensor(np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype("float32"))
    rebuilt = tvm.relax.VirtualMachine(executable, tvm.cpu())["main"](x).numpy()
    handed = tvm.relax.VirtualMachine(result.executable, tvm.cpu())["main"](x).numpy()
    np.testing.assert_array_equal(rebuilt, handed)
    document = json.loads(solution.read_text())
    document["storage"] = "lifo"
    with pytest.raises(ProblemError, match=r"'storage' is 'lifo', not a storage plan"):
        build_from_solution(mod, document)


def test_an_unknown_storage_plan_is_refused_before_anything_is_measured(tmp_path):
    from layoutopt.tvm import tune_and_build

    with pytest.raises(ProblemError, match="unknown storage plan 'lifo'"):
        tune_and_build(models.chain(), cache=tmp_path / "costs.jsonl", storage="lifo")
    assert not (tmp_path / "costs.jsonl").exists()


def test_with_storage_auto_the_guard_times_both_plans_and_the_solution_file_names_the_one_handed_back(
        tmp_path):
    import json

    from layoutopt.tvm import tune_and_build

    result = tune_and_build(models.residual(channels=8, size=8), cache=tmp_path / "costs.jsonl", baselines=(),
                            calibrate=0, profile=False, repeat=3, storage="auto")
    rival = result.baselines["layoutopt_by_shape"]
    assert rival.storage == "by_shape" and result.tuned.storage == "relax"
    assert rival.assignment == result.tuned.assignment and rival.max_relative_error < 1e-4  # checked
    assert rival.versus_tuned is not None  # timed beside the tuned build
    assert result.storage == result.handed_back.storage
    assert result.storage == ("by_shape" if result.chosen == "layoutopt_by_shape" else "relax")
    _, solution = result.export(tmp_path / "m.so")
    assert json.loads(solution.read_text()).get("storage", "relax") == result.storage

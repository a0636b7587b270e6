"""Every docstring example runs: pytest collects them from the package (pyproject: ``--doctest-modules``
over ``layoutopt``; ``conftest.py`` leaves out the TVM modules' where TVM is not installed).

What collection cannot see is an example deleted: the modules below are documented by their
examples, and must keep at least one.
"""

import doctest
import importlib
import importlib.util

import pytest

EXAMPLES = [
    "layoutopt.api",
    "layoutopt.problem",
    "layoutopt.solution",
    "layoutopt.errors",
    "layoutopt.io",
    "layoutopt.generators",
    "layoutopt.baselines",
    "layoutopt.constraints",
    "layoutopt.bench",
    "layoutopt.isolation",
    "layoutopt.machine",
    "layoutopt.topological_dp",
    "layoutopt.solvers.auto",
    "layoutopt.solvers.base",
    "layoutopt.solvers.bruteforce",
    "layoutopt.solvers.cpsat",
    "layoutopt.solvers.dp",
    "layoutopt.solvers.greedy",
    "layoutopt.solvers.marginal",
    "layoutopt.solvers.mip",
    "layoutopt.solvers.pbqp",
    "layoutopt.solvers.reductions",
    "layoutopt.solvers.scaling",
    pytest.param("layoutopt.solvers.toulbar2", marks=pytest.mark.skipif(
        importlib.util.find_spec("pytoulbar2") is None, reason="toulbar2 is an optional extra")),
    *(pytest.param(f"layoutopt.tvm.{name}", marks=[pytest.mark.tvm, pytest.mark.skipif(
        importlib.util.find_spec("tvm") is None, reason="needs the tvm extra")])
      for name in ("_tvm", "apply", "cache", "cli", "graph", "kernels.conv2d", "kernels.dense",
                   "kernels.workload", "profile", "timing", "tune", "deploy")),
]


@pytest.mark.parametrize("name", EXAMPLES)
def test_module_keeps_its_docstring_examples(name):
    module = importlib.import_module(name)
    examples = sum(len(test.examples) for test in doctest.DocTestFinder().find(module))
    assert examples > 0, f"{name} has no docstring example"


def test_pytest_runs_the_docstring_examples_of_the_package(pytestconfig):
    assert "--doctest-modules" in pytestconfig.getini("addopts")
    assert "layoutopt" in pytestconfig.getini("testpaths")

"""Every docstring example runs: pytest collects them from the package (pyproject: ``--doctest-modules``
over ``layoutopt``; ``conftest.py`` leaves out the TVM modules' where TVM is not installed, and runs
them in one scratch directory with one cost cache).

What collection cannot see is an example deleted, or one written as a literal block (``Example::``),
which nothing runs and which goes stale: the modules below are documented by their examples and must
keep at least one, and no ``Example::`` block is left in the package.
"""

import doctest
import importlib
import importlib.util
import re
from pathlib import Path

import pytest

import layoutopt

TVM_EXAMPLES = [
    "_tvm", "cli", "ops", "relax_expr",
    "frontend.load", "frontend.models", "frontend.normalise", "frontend.onnx_import", "frontend.shuffle",
    "graph.extract", "graph.graph",
    "measure.cache", "measure.measure", "measure.problem", "measure.runner", "measure.worker",
    "building.apply", "building.baselines", "building.builder", "building.memory",
    "evaluate.calibrate", "evaluate.check", "evaluate.origin", "evaluate.profile", "evaluate.timing",
    "deploy.solution_file",
    "tune.guard", "tune.report", "tune.result", "tune.stages", "tune.tune",
    "kernels", "kernels.candidate", "kernels.conv2d", "kernels.convolution", "kernels.dense",
    "kernels.family", "kernels.gemm", "kernels.isa", "kernels.kernel", "kernels.module",
    "kernels.onnx_resize", "kernels.padded", "kernels.registry", "kernels.space", "kernels.transcendental",
    "kernels.transform", "kernels.winograd", "kernels.workload",
]

EXAMPLES = [
    "layoutopt",
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
    "layoutopt.labels",
    "layoutopt.machine",
    "layoutopt.records",
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
    *(pytest.param(f"layoutopt.tvm{'.' if name else ''}{name}", marks=[pytest.mark.tvm, pytest.mark.skipif(
        importlib.util.find_spec("tvm") is None, reason="needs the tvm extra")])
      for name in ["", *TVM_EXAMPLES]),
]

#: a literal block introduced as an example ("Example::", "Examples::", "Example (shell)::"): code that
#: no test runs
_UNRUN_EXAMPLE = re.compile(r"^\s*Examples?\b[^:]*::\s*$")


@pytest.mark.parametrize("name", EXAMPLES)
def test_module_keeps_its_docstring_examples(name):
    module = importlib.import_module(name)
    examples = sum(len(test.examples) for test in doctest.DocTestFinder().find(module))
    assert examples > 0, f"{name} has no docstring example"


def test_pytest_runs_the_docstring_examples_of_the_package(pytestconfig):
    assert "--doctest-modules" in pytestconfig.getini("addopts")
    assert "layoutopt" in pytestconfig.getini("testpaths")


def unrun_examples(package: Path) -> list[str]:
    """``path:line: text`` of every ``Example::`` literal block under ``package`` (a directory)."""
    found = []
    for path in sorted(package.rglob("*.py")):
        name = path.relative_to(package.parent).as_posix()
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if _UNRUN_EXAMPLE.match(line):
                found.append(f"{name}:{number}: {line.strip()}")
    return found


def test_no_example_is_a_literal_block_that_nothing_runs():
    unrun = unrun_examples(Path(layoutopt.__file__).parent)
    assert not unrun, ("examples are `>>>` doctests, which pytest runs; these are literal blocks:\n"
                       + "\n".join(unrun))


def test_an_example_written_as_a_literal_block_is_found(tmp_path):
    package = tmp_path / "layoutopt"
    (package / "tvm").mkdir(parents=True)
    (package / "tvm" / "model.py").write_text('"""Doc.\n\nExample::\n\n    run()\n"""\n')
    (package / "shell.py").write_text('def f():\n    """Doc.\n\n    Example (shell)::\n\n        ls\n"""\n')
    (package / "run.py").write_text('"""Doc.\n\nExample:\n    >>> 1 + 1\n    2\n\nFormat::\n\n    {}\n"""\n')
    assert unrun_examples(package) == ["layoutopt/shell.py:4: Example (shell)::",
                                       "layoutopt/tvm/model.py:3: Example::"]

"""The TVM adapters' docstring examples (``>>>``) are tests too: run them."""

import doctest
import importlib

import pytest

pytest.importorskip("tvm")

pytestmark = pytest.mark.tvm

MODULES = [f"layoutopt.tvm.{name}" for name in ("_tvm", "apply", "cache", "cli", "graph", "kernels.conv2d",
                                                "kernels.dense", "kernels.workload", "profile", "timing",
                                                "tune")]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0, f"{name} has no docstring example"
    assert result.failed == 0

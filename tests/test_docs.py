"""The docstring examples of the public API are tests too: run them."""

import doctest
import importlib

import pytest

CORE_MODULES = [
    "layoutopt.api",
    "layoutopt.problem",
    "layoutopt.solution",
]


@pytest.mark.parametrize("name", CORE_MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0, f"{name} has no docstring example"
    assert result.failed == 0

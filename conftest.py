"""Collection rules for the whole repository (pytest runs the package's docstring examples too).

The examples of ``layoutopt.tvm`` need TVM and those of the toulbar2 back-end need pytoulbar2:
without them the modules are not collected at all (importing ``layoutopt.tvm`` would raise), and
with them their examples carry the ``tvm`` marker like the TVM tests (``-m "not tvm"`` skips both).

The examples run in one scratch directory for the whole session, so that they write what a user's
script would (``cache="costs.jsonl"``, ``"model.so"``, ``"report/"``) without touching the checkout,
and share one cost cache: the first example that tunes measures the tiny model's kernels, the others
find them cached.
"""

import importlib.util

import pytest

collect_ignore_glob = []
if importlib.util.find_spec("tvm") is None:
    collect_ignore_glob.append("layoutopt/tvm/*")
if importlib.util.find_spec("pytoulbar2") is None:
    collect_ignore_glob.append("layoutopt/solvers/toulbar2.py")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.nodeid.startswith("layoutopt/tvm/"):
            item.add_marker(pytest.mark.tvm)


@pytest.fixture(scope="session")
def _examples_directory(tmp_path_factory):
    return tmp_path_factory.mktemp("examples")


@pytest.fixture(autouse=True)
def _examples_run_in_a_scratch_directory(request, monkeypatch):
    if isinstance(request.node, pytest.DoctestItem):
        monkeypatch.chdir(request.getfixturevalue("_examples_directory"))

"""Collection rules for the whole repository (pytest runs the package's docstring examples too).

The examples of ``layoutopt.tvm`` need TVM and those of the toulbar2 back-end need pytoulbar2:
without them the modules are not collected at all (importing ``layoutopt.tvm`` would raise), and
with them their examples carry the ``tvm`` marker like the TVM tests (``-m "not tvm"`` skips both).
"""

import importlib.util

collect_ignore_glob = []
if importlib.util.find_spec("tvm") is None:
    collect_ignore_glob.append("layoutopt/tvm/*")
if importlib.util.find_spec("pytoulbar2") is None:
    collect_ignore_glob.append("layoutopt/solvers/toulbar2.py")


def pytest_collection_modifyitems(config, items):
    import pytest

    for item in items:
        if item.nodeid.startswith("layoutopt/tvm/"):
            item.add_marker(pytest.mark.tvm)

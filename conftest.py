"""Collection rules for the whole repository (pytest runs the package's docstring examples too).

The examples of ``layoutopt.tvm`` need TVM and those of the toulbar2 back-end need pytoulbar2:
without them the modules are not collected at all (importing ``layoutopt.tvm`` would raise), and
with them their examples carry the ``tvm`` marker like the TVM tests (``-m "not tvm"`` skips both).

Each example runs in a directory of its own, so that it writes what a user's script would
(``"model.so"``, ``"report/"``) without touching the checkout or another example's files; and the
examples share one cost cache, ``costs.jsonl`` there: the first example that measures the tiny model's
kernels pays for it, the others find them cached. The examples that measure kernels or tune a model
(a few seconds each) carry the ``slow`` marker, as do the tests that run a whole tune (``tune_and_build``
or ``layoutopt tune``, themselves or through a fixture of their module): ``-m "not slow"`` skips them.
"""

import importlib.util
import inspect
import shutil

import pytest

collect_ignore_glob = []
if importlib.util.find_spec("tvm") is None:
    collect_ignore_glob.append("layoutopt/tvm/*")
if importlib.util.find_spec("pytoulbar2") is None:
    collect_ignore_glob.append("layoutopt/solvers/toulbar2.py")

#: the cost cache the examples name (``cache="costs.jsonl"``)
EXAMPLES_COST_CACHE = "costs.jsonl"
#: calls by which an example measures kernels (or reads them from the cache) and builds on them
_MEASURING_CALLS = ("tune_and_build(", "build_problem(", "measure_graph(", "measure(", "MeasureRequest(",
                    "search_schedules(")
#: what a test (or a fixture it uses) calls to run a whole tune: the library's or the command line's
_TUNING_CALLS = ("tune_and_build(", '"tune",', "'tune',")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.nodeid.startswith("layoutopt/tvm/"):
            item.add_marker(pytest.mark.tvm)
        if _slow(item):
            item.add_marker(pytest.mark.slow)


def _slow(item) -> bool:
    """An example that measures kernels, or a test that runs a whole tune."""
    if isinstance(item, pytest.DoctestItem):
        return any(call in example.source for example in item.dtest.examples for call in _MEASURING_CALLS)
    return isinstance(item, pytest.Function) and _tunes(item)


def _tunes(item) -> bool:
    """Whether a test, or a fixture of its module it uses, runs a whole tune (``slow``)."""
    functions = [item.function]
    for name in item.fixturenames:
        for definition in item._fixtureinfo.name2fixturedefs.get(name, ()):
            if getattr(definition.func, "__module__", None) == item.module.__name__:
                functions.append(definition.func)
    for function in functions:
        try:
            source = inspect.getsource(function)
        except (OSError, TypeError):
            continue
        if any(call in source for call in _TUNING_CALLS):
            return True
    return False


@pytest.fixture(scope="session")
def _examples_cost_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("examples") / EXAMPLES_COST_CACHE


@pytest.fixture(autouse=True)
def _example_in_its_own_directory(request):
    if not isinstance(request.node, pytest.DoctestItem):  # tests make their own directories
        yield
        return
    directory = request.getfixturevalue("tmp_path")
    shared = request.getfixturevalue("_examples_cost_cache")
    own = directory / EXAMPLES_COST_CACHE
    if shared.exists():
        shutil.copyfile(shared, own)
    request.getfixturevalue("monkeypatch").chdir(directory)
    yield
    if own.exists():  # what this example measured, for the next ones (examples run one at a time)
        shutil.copyfile(own, shared)

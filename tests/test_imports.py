"""The package's import graph: no circle, and no import from a lower floor to a higher one.

Every ``import`` of every module under ``layoutopt/`` is read with ``ast`` (the ones inside functions
too: a lazy import is still a dependency), resolved to the module it names, and checked against the
floor table below: a module may import its own floor and the floors below it, never above. The
table is the layout README's "Layout of the code" describes, the data flowing upwards: a model is
loaded (frontend), its layout graph extracted (graph), its kernels measured (measure), a choice
built (building), checked and timed (evaluate), saved (deploy), all chained by the tune.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

import layoutopt

PACKAGE = Path(layoutopt.__file__).parent

#: module or package (covering everything under it) -> floor; a module's floor is its nearest listed
#: ancestor's. ``layoutopt`` and ``layoutopt.tvm`` name only their own ``__init__``: every module
#: under them must be listed itself (``test_every_module_has_a_floor``).
FLOORS = {
    # the core: the problem, its solvers and files (knows nothing of TVM)
    "layoutopt.errors": 0, "layoutopt._gc": 0, "layoutopt.isolation": 0, "layoutopt.machine": 0,
    "layoutopt.solution": 0,
    "layoutopt.labels": 1, "layoutopt.records": 1, "layoutopt.problem": 1,
    "layoutopt.solvers": 2, "layoutopt.constraints": 2, "layoutopt.topological_dp": 2,
    "layoutopt.api": 3,
    "layoutopt": 4, "layoutopt.baselines": 4, "layoutopt.front": 4, "layoutopt.generators": 4,
    "layoutopt.io": 4,
    "layoutopt.bench": 5,
    # the TVM room, in the order the data moves
    "layoutopt.tvm._tvm": 10, "layoutopt.tvm.relax_expr": 10,
    "layoutopt.tvm.kernels": 11,
    "layoutopt.tvm.frontend": 12, "layoutopt.tvm.ops": 12,
    "layoutopt.tvm.graph": 13,
    "layoutopt.tvm.measure": 14,
    "layoutopt.tvm.building": 15,
    "layoutopt.tvm.evaluate": 16,
    "layoutopt.tvm.deploy": 17,
    "layoutopt.tvm.tune": 18,
    "layoutopt.tvm.cli": 19, "layoutopt.tvm": 19,
    "layoutopt.cli": 20,
}
#: listed names that are a package's own ``__init__`` only, not everything under it
OWN_INIT_ONLY = {"layoutopt", "layoutopt.tvm"}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def imports(name: str) -> set[str]:
    """The modules of the package that module ``name`` imports (a name imported from a package is
    that package's submodule when there is one, else the package's ``__init__``)."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.split(".")[0] == "layoutopt")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            if target.split(".")[0] != "layoutopt":
                continue
            for alias in node.names:
                submodule = f"{target}.{alias.name}"
                found.add(submodule if submodule in MODULES else target)
    return found


def floor(name: str) -> int | None:
    if name in FLOORS:
        return FLOORS[name]
    parts = name.split(".")
    for end in range(len(parts) - 1, 0, -1):
        ancestor = ".".join(parts[:end])
        if ancestor in FLOORS and ancestor not in OWN_INIT_ONLY:
            return FLOORS[ancestor]
    return None


@pytest.fixture(scope="module")
def graph() -> nx.DiGraph:
    graph = nx.DiGraph()
    graph.add_nodes_from(MODULES)
    for name in MODULES:
        graph.add_edges_from((name, target) for target in imports(name) if target != name)
    return graph


def test_the_graph_sees_the_imports(graph):
    # the check is only as good as the parse: relative, absolute, lazy and submodule imports all count
    assert graph.has_edge("layoutopt.tvm.tune.stages", "layoutopt.api")             # from ... import api
    assert graph.has_edge("layoutopt.tvm.building.builder", "layoutopt.tvm.building.apply")
    assert graph.has_edge("layoutopt.tvm.evaluate.check", "layoutopt.tvm.evaluate.timing")  # lazy
    assert graph.has_edge("layoutopt.solvers.pbqp", "layoutopt.solvers._engine")  # from . import _engine
    assert len(graph) == len(MODULES) > 100


def test_every_module_has_a_floor():
    assert [name for name in MODULES if floor(name) is None] == []


def test_no_import_circle(graph):
    circles = list(nx.simple_cycles(graph))
    assert circles == [], "import circles:\n" + "\n".join(" -> ".join([*c, c[0]]) for c in circles[:10])


def test_no_import_from_a_lower_floor_to_a_higher_one(graph):
    upward = [f"{a} (floor {floor(a)}) imports {b} (floor {floor(b)})"
              for a, b in graph.edges if floor(b) > floor(a)]
    assert upward == [], "\n".join(upward)


def test_the_floor_check_catches_an_upward_import(tmp_path):
    # a kernel family reaching up into the build would be caught: the check is not vacuous
    assert floor("layoutopt.tvm.kernels.conv2d") < floor("layoutopt.tvm.building.builder")
    assert floor("layoutopt.tvm.measure.cache") == floor("layoutopt.tvm.measure")
    assert floor("layoutopt.tvm.nonexistent") is None      # `layoutopt.tvm` covers only its __init__

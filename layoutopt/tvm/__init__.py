"""TVM adapters: measured kernel and layout-transform costs for Relax models.

Needs the ``tvm`` extra: ``pip install 'layoutopt[tvm]'``.

Importing this package is cheap: TVM itself is imported only when a function that needs it runs.
Public names are resolved lazily from the submodules listed in ``_LAZY``.

Example:
    >>> import layoutopt
    >>> from layoutopt.tvm import build_problem, models
    >>> graph, costs, meta = build_problem(models.chain((8, 8)), cache="costs.jsonl")   # measures
    >>> len(graph.nodes["conv1"]["choices"]) == len(costs.nodes["conv1"])     # seconds per kernel
    True
    >>> solution = layoutopt.solve(graph, costs)
    >>> solution.status, list(solution.labels)
    ('optimal', ['data', 'conv1', 'conv2', 'output:gv'])

    :func:`tune_and_build` goes on to build, check, time and profile the chosen kernels.
"""

from __future__ import annotations

import importlib
import importlib.util

from ..errors import MissingExtraError

if importlib.util.find_spec("tvm") is None:
    raise MissingExtraError("apache-tvm", "tvm", "layoutopt.tvm")

#: public name -> submodule that defines it (add a line here to export a new name); a name that is
#: the submodule's own last component is the module itself (``from layoutopt.tvm import models``)
_LAZY = {
    "models": ".frontend.models",
    "stages": ".tune.stages",
    "import_tvm": "._tvm",
    "resolve_target": "._tvm",
    "one_blas_thread": "._tvm",
    "conv2d_candidates": ".kernels",
    "dense_candidates": ".kernels",
    "candidates": ".kernels",
    "build_kernel": ".kernels",
    "check_kernel": ".kernels",
    "layout_transform_workload": ".kernels",
    "schedule_module": ".kernels",
    "ScheduleModule": ".kernels",
    "validate_workload": ".kernels",
    "Measurer": ".measure.measure",
    "MeasureResult": ".measure.measure",
    "LocalRunner": ".measure.runner",
    "RPCRunner": ".measure.runner",
    "Runner": ".measure.runner",
    "CostCache": ".measure.cache",
    "ApplyLayouts": ".building.apply",
    "apply_layouts": ".building.apply",
    "apply_solution": ".building.apply",
    "apply_assignment": ".building.apply",
    "build": ".building.builder",
    "tune_and_build": ".tune.tune",
    "memory_front": ".tune.front",
    "MemoryFront": ".tune.front",
    "build_from_solution": ".deploy.solution_file",
    "export_library": ".deploy.solution_file",
    "load_solution": ".deploy.solution_file",
    "save_solution": ".deploy.solution_file",
    "SolutionFile": ".deploy.solution_file",
    "TuneResult": ".tune.result",
    "TuneOptions": ".tune.stages",
    "Reference": ".evaluate.check",
    "load_model": ".frontend.load",
    "LayoutGraph": ".graph.graph",
    "BUILDS": ".building.baselines",
    "fixed_layout_assignment": ".building.baselines",
    "random_inputs": ".evaluate.timing",
    "measure_latencies": ".evaluate.timing",
    "prepare": ".frontend.normalise",
    "extract_layout_graph": ".graph.extract",
    "build_problem": ".measure.problem",
    "measure_graph": ".measure.problem",
    "search_schedules": ".measure.search",
    "searched_graph": ".measure.search",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(module_name, __name__)
    value = module if module_name.rpartition(".")[2] == name else getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))

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

#: public name -> submodule that defines it (add a line here to export a new name)
_LAZY = {
    "import_tvm": "._tvm",
    "resolve_target": "._tvm",
    "conv2d_candidates": ".kernels",
    "dense_candidates": ".kernels",
    "candidates": ".kernels",
    "build_kernel": ".kernels",
    "check_kernel": ".kernels",
    "layout_transform_workload": ".kernels",
    "schedule_module": ".kernels",
    "ScheduleModule": ".kernels",
    "validate_workload": ".kernels",
    "Measurer": ".measure",
    "MeasureResult": ".measure",
    "LocalRunner": ".runner",
    "RPCRunner": ".runner",
    "Runner": ".runner",
    "CostCache": ".cache",
    "ApplyLayouts": ".apply",
    "apply_layouts": ".apply",
    "apply_solution": ".apply",
    "apply_assignment": ".apply",
    "build": ".builder",
    "tune_and_build": ".tune",
    "build_from_solution": ".deploy",
    "export_library": ".deploy",
    "load_solution": ".deploy",
    "save_solution": ".deploy",
    "SolutionFile": ".deploy",
    "TuneResult": ".result",
    "TuneOptions": ".stages",
    "Reference": ".check",
    "load_model": ".load",
    "LayoutGraph": ".graph",
    "BUILDS": ".baselines",
    "fixed_layout_assignment": ".baselines",
    "random_inputs": ".timing",
    "measure_latencies": ".timing",
    "prepare": ".normalise",
    "extract_layout_graph": ".extract",
    "build_problem": ".problem",
    "measure_graph": ".problem",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module_name, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))

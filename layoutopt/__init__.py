"""layoutopt: graph-level kernel and data-layout selection for DNN graphs.

Model a graph as a node-cost / edge-cost assignment problem (PBQP) and solve it exactly or
approximately through one entry point, :func:`solve`:

    >>> import layoutopt, networkx as nx
    >>> graph = nx.DiGraph([("conv1", "conv2")])
    >>> graph.nodes["conv1"]["choices"] = graph.nodes["conv2"]["choices"] = ["NCHW8c", "NCHW16c"]
    >>> costs = {"nodes": {"conv1": [2.0, 1.0], "conv2": [1.0, 1.5]},     # kernel time per choice
    ...          "edges": {("conv1", "conv2"): [[0, 0.2], [0.2, 0]]}}     # transform time; inf = forbidden
    >>> sol = layoutopt.solve(graph, costs, method="auto", time_limit=None)
    >>> sol.labels, sol.objective, sol.status
    ({'conv1': 'NCHW16c', 'conv2': 'NCHW8c'}, 2.2, 'optimal')

The TVM adapters live in :mod:`layoutopt.tvm` (``pip install 'layoutopt[tvm]'``) and are
imported only on use.
"""

from __future__ import annotations

from .api import methods, solve, solve_problem
from .errors import InternalError, MissingExtraError, ProblemError
from .problem import Costs, Problem, evaluate
from .solution import Solution

__version__ = "0.1.0"

__all__ = [
    "Costs",
    "InternalError",
    "MissingExtraError",
    "Problem",
    "ProblemError",
    "Solution",
    "evaluate",
    "methods",
    "solve",
    "solve_problem",
]

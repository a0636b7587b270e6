"""layoutopt: graph-level kernel and data-layout selection for DNN graphs.

Model a graph as a node-cost / edge-cost assignment problem (PBQP) and solve it exactly or
approximately through one entry point::

    import layoutopt
    sol = layoutopt.solve(graph, costs, method="auto", time_limit=None)

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

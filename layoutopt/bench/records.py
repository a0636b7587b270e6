"""What a run produces: a :class:`Record` per method and instance, and the statuses it may have."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

__all__ = ["FAILED", "SOLVED", "Record"]

#: statuses of a record that hold a solution
SOLVED = ("optimal", "feasible")
#: statuses of a record that are not a solution
FAILED = ("refused", "error", "crash", "killed", "infeasible")


@dataclass
class Record:
    """One method on one instance.

    ``status`` is a solution status (``"optimal"``, ``"feasible"``, ``"infeasible"``) or a
    failure: ``"refused"`` (the method raised a ProblemError: it declines the instance, e.g. a
    size cap), ``"error"`` (any other exception), ``"crash"`` (the worker process died) or
    ``"killed"`` (it overran its time limit and was stopped).

    Example:
        >>> Record("resnet_20", "synthetic", 20, 19, "greedy", "feasible", objective=12.5).gap
        nan
    """

    instance: str
    group: str
    nodes: int
    edges: int
    method: str
    status: str
    objective: float = math.inf
    lower_bound: float = -math.inf
    wall_time: float = math.nan
    cpu_time: float = math.nan  # CPU seconds of the process (all threads): robust to a loaded machine
    gap: float = math.nan  # to the best known objective of the instance, filled by summarize()
    message: str = ""
    stats: dict[str, Any] = field(default_factory=dict)

"""``toulbar2``: the toulbar2 weighted-CSP solver (``pip install pytoulbar2``), imported lazily.

The problem maps one to one onto a cost function network: a variable per node, a unary cost function
per node and a binary one per edge, ``inf`` meaning forbidden (toulbar2's "top"). toulbar2 works on
integer costs: they are shifted, scaled by a power of two and rounded (:mod:`~layoutopt.solvers.scaling`;
with the ``pbqp`` incumbent pruning entries when the costs span too many orders of magnitude) and
passed with ``resolution=0``; the bound reported is certified for the original float costs. Cost
tables are posted in bulk, one numpy array per table shape, so the build stays a small part of a
solve (``auto`` runs this back-end on the kernel left by the PBQP reductions). A memory budget is
toulbar2's knapsack global constraint over the choices' integer figures (:func:`~.budget.integer_memory`),
so it is solved exactly.

Pitfalls handled here (measured, see the project's solver notes):

* toulbar2's options are process-global and persist between ``CFN`` objects, so every option that
  affects the search is reset to toulbar2's default before each solve (:data:`SEARCH_OPTIONS`).
* Its ``timeLimit`` counts *CPU* seconds, in whole seconds, so it overshoots a wall-clock budget by
  the rounding and by however much the cores are shared. Here the time limit is wall-clock: on Linux a
  POSIX timer on ``CLOCK_MONOTONIC`` delivers toulbar2's own timeout signal (``SIGVTALRM``) at the
  deadline. Elsewhere the CPU limit, rounded up to whole seconds, is the fallback.
  ``notes/toulbar2_time_limit.md`` measures both side by side.
* ``timerStop()`` is always called after solving, or a late signal would interrupt a later solve.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import signal
import sys
import time
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

import numpy as np

from ..errors import ProblemError
from ..problem import Problem
from .base import Deadline, Option, Solver, SolverResult, heuristic_assignment, register
from .budget import IntegerMemory, integer_memory, repair
from .scaling import scale_costs

__all__ = ["SEARCH_OPTIONS", "Toulbar2"]

#: toulbar2 options (``pytoulbar2.pytb2.option``) set before every solve, to toulbar2 1.4's defaults
#: unless noted: a previous model (of this library or of the user) may have changed any of them.
SEARCH_OPTIONS: dict[str, Any] = {
    "decimalPoint": 0,  # resolution=0: costs are the scaled integers
    "verbose": -1,  # toulbar2 prints to stdout otherwise
    "showSolutions": 0,
    "allSolutions": 0,
    "seed": 1,
    "btdMode": 0,
    "btdRootCluster": -1,
    "btdSubTree": -1,
    "hbfs": 1,
    "hbfsGlobalLimit": 32768,
    "hbfsAlpha": 20,
    "hbfsBeta": 10,
    "searchMethod": 0,
    "vac": 0,
    "VACthreshold": False,
    "FullEAC": False,
    "useRASPS": 0,
    "lds": 0,
    "restart": -1,
    "elimDegree": 3,
    "elimDegree_preprocessing": -1,
    "preprocessFunctional": 1,
    "preprocessTernaryRPC": 0,
    "preprocessNary": 10,
    "costfuncSeparate": True,
    "DEE": 1,
    "MSTDAC": False,
    "trwsAccuracy": -1.0,
    "weightedDegree": 1000000,
    "weightedTightness": 0,
    "lastConflict": True,
    "binaryBranching": True,
    "dichotomicBranching": 1,
    "sortDomains": False,
    "solutionBasedPhaseSaving": True,
    "backtrackLimit": 2**63 - 1,
    "absgap": 0,
    "relgap": 0,
}


#: Under a time limit, the pbqp/greedy fallback (returned if the search finds nothing in time) is
#: made *before* the search, and bounds it, when building the model takes more than this share of the
#: limit (the fallback costs about as much as the build); else only if needed, overshooting by about
#: that share.
FALLBACK_SHARE = 0.005

#: The build's expected time per cost entry (measured 110-165 ns on random K=16 and DNN-shaped
#: problems of 30k-800k entries). The fallback rule above uses it, not the build's measured time: an
#: incumbent changes the search's path (at 5 s on random K=16 graphs, by -2.6 % to +2.4 % on the
#: answer), so the same call must decide the same way however long the build happened to take (auto's
#: second search relies on running the search ``method="toulbar2"`` runs).
BUILD_SECONDS_PER_ENTRY = 1.5e-7


@contextlib.contextmanager
def _wall_clock_alarm(seconds: float) -> Iterator[bool]:
    """Send this process SIGVTALRM (toulbar2's timeout signal) after ``seconds`` of wall time.

    Uses ``timer_create(CLOCK_MONOTONIC)`` through ctypes; yields False (and does nothing) where that
    is unavailable. toulbar2's handler must already be installed (``CFN.timer``), since the default
    action of SIGVTALRM terminates the process.
    """
    libc = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None
    if libc is None or not hasattr(libc, "timer_create"):
        yield False
        return

    class SigEvent(ctypes.Structure):  # struct sigevent on 64-bit Linux (64 bytes)
        _fields_ = [("value", ctypes.c_void_p), ("signo", ctypes.c_int), ("notify", ctypes.c_int),
                    ("pad", ctypes.c_int * 12)]

    class TimeSpec(ctypes.Structure):
        _fields_ = [("sec", ctypes.c_long), ("nsec", ctypes.c_long)]

    class ITimerSpec(ctypes.Structure):
        _fields_ = [("interval", TimeSpec), ("value", TimeSpec)]

    clock_monotonic, sigev_signal = 1, 0
    event = SigEvent(None, signal.SIGVTALRM, sigev_signal)
    timer_id = ctypes.c_void_p()
    if libc.timer_create(clock_monotonic, ctypes.byref(event), ctypes.byref(timer_id)) != 0:
        yield False
        return
    try:
        whole = int(seconds)
        nanoseconds = max(int((seconds - whole) * 1e9), 0 if whole else 1)  # all zero would disarm
        spec = ITimerSpec(TimeSpec(0, 0), TimeSpec(whole, nanoseconds))
        libc.timer_settime(timer_id, 0, ctypes.byref(spec), None)
        yield True
    finally:
        libc.timer_delete(timer_id)  # before timerStop(): a pending signal still finds the handler


def _positive_or_none(name: str, value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ProblemError(f"option {name} must be a positive number or None, not {value!r}")
    return float(value)


#: toulbar2 1.4's knapsack constraint loses figures (and a budget) of 2**31 and more: measured, an
#: assignment over the budget came back; below, none did. Larger figures are scaled down (rounded down)
LARGEST_FIGURE = 2**30


def _post_budget(wcsp, problem: Problem, memory: IntegerMemory) -> None:
    """Post the memory budget as toulbar2's knapsack constraint: ``sum(-figure) >= -budget`` over the
    choices with a figure. ``CFN.AddGeneralizedLinearConstraint`` posts the same, but builds its
    parameters in time quadratic in the number of choices (a scan of every tuple per variable): seconds
    at 2000 nodes, so the parameter text is written here, in its format."""
    packed = problem._packing
    scope, parts = [], [str(-memory.budget)]
    spans = zip(packed.node_start.tolist(), packed.node_size.tolist(), strict=True)
    for i, (start, size) in enumerate(spans):
        figures = memory.flat[start:start + size]
        used = np.flatnonzero(figures)
        if not used.size:
            continue
        scope.append(i)
        pairs = np.empty(2 * used.size, dtype=np.int64)
        pairs[0::2], pairs[1::2] = used, -figures[used].astype(np.int64)
        parts.append(f"{used.size} {' '.join(map(str, pairs.tolist()))}")
    if scope:
        wcsp.postKnapsackConstraint(scope, " ".join(parts), kp=True)


def _proof(problem: Problem) -> str:
    over = "" if problem.memory_budget is None else " or is over the memory budget"
    return f"toulbar2 proved that every assignment uses a forbidden (inf) entry{over}"


@register
class Toulbar2(Solver):
    """Exact branch-and-bound with soft arc consistency bounds (toulbar2's HBFS), via pytoulbar2.

    ``time_limit`` is wall-clock; on timeout the result is the incumbent (``"feasible"``) with
    toulbar2's certified dual bound.

    Example:
        >>> import networkx as nx, layoutopt
        >>> costs = {"nodes": {0: [1.0, 2.0], 1: [3.0, 1.0]}, "edges": {(0, 1): [[0.0, 5.0], [5.0, 0.0]]}}
        >>> sol = layoutopt.solve(nx.path_graph(2), costs, method="toulbar2", time_limit=10)
        >>> sol.assignment, sol.objective, sol.status
        ({0: 1, 1: 1}, 3.0, 'optimal')
    """

    name = "toulbar2"
    exact = True
    requires = (("pytoulbar2", "toulbar2"),)
    options: ClassVar[dict[str, Option]] = {
        "lds": Option.integer(0, "limited discrepancy search with this many discrepancies first (toulbar2's "
                              "lds; 0: off)", minimum=0),
        "trws": Option(None, _positive_or_none, "accuracy of the TRW-S reparametrisation run before the "
                       "search (toulbar2's trwsAccuracy, e.g. 1e-5; None: off)"),
    }

    def solve(self, problem: Problem, deadline: Deadline, options: Mapping[str, Any], *,
              incumbent: np.ndarray | None = None, fallback: bool = True) -> SolverResult:
        """See the class docstring; ``incumbent``: an assignment already known (toulbar2 then
        searches only for better ones, and returns it if it finds none in time); ``fallback=False``:
        no pbqp assignment when the search finds none in time (a caller that goes on searching)."""
        import pytoulbar2

        start, limit = time.perf_counter(), deadline.remaining()
        if len(problem) == 0:
            return SolverResult(np.zeros(0, dtype=np.int64), "optimal", 0.0)
        scaled = scale_costs(problem)
        if scaled.coarse:
            if incumbent is None:
                incumbent = heuristic_assignment(problem, deadline)
            if incumbent is not None:
                scaled = scale_costs(problem, incumbent=incumbent)
        cfn = pytoulbar2.CFN(None, resolution=0, verbose=-1)
        for option, value in SEARCH_OPTIONS.items():
            setattr(cfn.Option, option, value)
        cfn.Option.lds = options.get("lds", 0)
        cfn.Option.trwsAccuracy = -1.0 if options.get("trws") is None else options["trws"]
        wcsp = cfn.CFN.wcsp
        for i, size in enumerate(problem.sizes):
            wcsp.makeEnumeratedVariable(str(i), 0, size - 1)
        stats: dict[str, Any] = {"exponent": scaled.exponent, "rounding_error": scaled.rounding_error,
                                 "pruned": scaled.pruned}
        proved = "" if not scaled.rounding_error else (  # the message of an "optimal" claim
            f"optimal for the integer-rounded costs; lower_bound accounts for their rounding "
            f"(at most {scaled.rounding_error:.3g})")
        try:
            for nodes, costs in scaled.node_tables:
                wcsp.postUnaryVecConstraints(np.array(nodes, dtype=np.int64), costs)
            for edges, costs in scaled.edge_tables:
                wcsp.postMultBinaryVecConstraints(np.array(edges, dtype=np.int64), costs)
            memory = integer_memory(problem, LARGEST_FIGURE)
            if memory is not None:
                _post_budget(wcsp, problem, memory)
                stats["memory_exponent"] = memory.exponent
        except pytoulbar2.pytb2.Contradiction:  # propagation while posting emptied a domain
            return SolverResult(None, "infeasible", math.inf, _proof(problem), stats)
        if (fallback and incumbent is None and limit is not None
                and problem.entries * BUILD_SECONDS_PER_ENTRY > FALLBACK_SHARE * limit):
            # The fallback costs about what the build did: made now, so that nothing runs after the
            # deadline. Below that share it is made only if the search ends with nothing.
            incumbent = heuristic_assignment(problem, deadline)
        incumbent_cost = math.inf if incumbent is None else scaled.cost(incumbent)
        if math.isfinite(incumbent_cost):
            try:  # search only for strictly better assignments
                cfn.UpdateUB(incumbent_cost)
            except pytoulbar2.pytb2.Contradiction:  # the bound already meets the incumbent: optimal
                stats["incumbent_proved"] = True
                return SolverResult(incumbent, "optimal", scaled.lower_bound(incumbent_cost), proved, stats)
        else:
            incumbent = None
        stats["build_time"] = time.perf_counter() - start

        remaining = deadline.remaining()
        timed_out = False
        if remaining is None or remaining > 0:
            try:
                if remaining is None:
                    solution = cfn.Solve()
                else:
                    # installs the handler; a CPU-time backstop
                    cfn.CFN.timer(math.ceil(remaining) + 1)
                    with _wall_clock_alarm(remaining) as armed:
                        if not armed:
                            cfn.CFN.timer(math.ceil(remaining))
                        solution = cfn.Solve()
                timed_out = bool(cfn.Option.limited)  # the search stopped early: set by the timeout
            finally:
                cfn.CFN.timerStop()
            stats.update(nodes=cfn.GetNbNodes(), backtracks=cfn.GetNbBacktracks())
        else:  # the build used up the time: no search at all
            solution, timed_out = None, True

        if solution is not None and not problem.fits(solution[0]):
            # the figures rounded down let it over the true budget: repaired (the bound stands)
            assignment = np.asarray(solution[0], dtype=np.int64).copy()
            stats["memory_repaired"] = True
            if not repair(problem, assignment, deadline):
                assignment = incumbent
            lower = max(scaled.lower_bound(solution[1] if not timed_out else cfn.GetDDualBound()),
                        problem.trivial_lower_bound())
            if assignment is None:
                return SolverResult(None, "infeasible", lower, "toulbar2's answer is over the memory budget "
                                    "once its figures are not rounded, and no repair fits", stats)
            return SolverResult(assignment, "feasible", lower, "toulbar2's answer was over the memory budget "
                                "by the rounding of the figures: repaired", stats)
        if solution is None and not timed_out:
            if incumbent is not None:  # no assignment beats the incumbent's cost: a proof
                stats["incumbent_proved"] = True
                return SolverResult(incumbent, "optimal", scaled.lower_bound(incumbent_cost), proved, stats)
            return SolverResult(None, "infeasible", math.inf, _proof(problem), stats)
        if timed_out:
            bound = cfn.GetDDualBound() if remaining is None or remaining > 0 else 0.0
            lower = max(scaled.lower_bound(bound), problem.trivial_lower_bound())
            if solution is not None:
                return SolverResult(np.asarray(solution[0], dtype=np.int64), "feasible", lower,
                                    "time limit reached; lower_bound is toulbar2's dual bound", stats)
            # made before the search, or now when that costs under FALLBACK_SHARE of the limit
            assignment = incumbent if incumbent is not None or not fallback else heuristic_assignment(problem)
            if assignment is None:
                return SolverResult(None, "infeasible", None,
                                    "toulbar2 found no allowed assignment within the time limit "
                                    "(infeasibility not proven)", stats)
            return SolverResult(assignment, "feasible", lower,
                                "time limit reached before toulbar2 improved on the pbqp assignment", stats)
        return SolverResult(np.asarray(solution[0], dtype=np.int64), "optimal",
                            scaled.lower_bound(solution[1]), proved, stats)

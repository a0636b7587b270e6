"""``auto``: exact whenever an engine proves the optimum in time, else the best heuristic answer.

The plan, in order:

1. **Exact reductions** (:func:`~layoutopt.solvers.reductions.reduce`). When they leave no
   kernel (series-parallel graphs: ResNet, Inception, SSD shapes) the answer is optimal.
2. **Variable elimination** (``dp``) on the kernel when the largest table of its min-fill
   order has at most ``dp_max_table`` entries (checked symbolically first).
3. Otherwise an **exact engine on the kernel**: ``toulbar2`` when installed (HBFS with soft
   arc consistency bounds: the fastest exact solver measured on these problems), else
   ``cpsat``, with 90 % of the time left. When it stops early its best assignment (or, if
   it has none, its ``pbqp`` fallback, made before its search starts unless that is cheap)
   is returned as ``"feasible"`` with the engine's certified lower bound (or, when it has
   none, the sum of the kernel's node and edge minima), after an ICM polish (each node moves to its
   best reply while one helps).
   When the first phase did not prove the kernel (on a kernel of :data:`TRWS_KERNEL` nodes or more,
   :data:`PROBE` seconds of the second phase stand in for it), under a time limit with at
   least :data:`SECOND_SEARCH_SECONDS` left, on a kernel of at least :data:`SECOND_SEARCH_KERNEL`
   nodes and with a second CPU free, toulbar2's default search runs on the whole problem too (as
   ``method="toulbar2"`` would), in a forked process on the other core, until the same deadline
   (option ``second_search``; :class:`SecondSearch`). Where the kernel's trivial bound is far below
   a random assignment's expected cost (:func:`bound_share` under :data:`LOOSE_BOUND_SHARE`: dense
   random costs, which the first phase never proves), it starts at once instead of after the first
   phase.
   Neither schedule wins every instance (on random K=16 graphs at 5 s the two-phase one ended better
   on most, worse on some). The better answer and the higher bound win, so ``auto``
   does at least as well as either alone; a proof by auto's own search stops the child at once (the
   child's proof ends nothing early: it waits for auto's search).
4. When the engine's integer scaling cannot represent the costs finely enough for a proof within
   the optimality tolerance (costs spanning many orders of magnitude), the kernel goes to ``dp``
   if its tables fit ``dp``'s default limit, which computes in float64; otherwise the message says
   so.

5. Under a **memory budget** the PBQP reductions are not exact as they stand (a reduced node's choice
   is fixed by its neighbours, whatever its memory), so: the problem is solved without the budget
   first (steps 1-4); when that optimum fits, it is the answer (the budget binds nothing). Otherwise
   its cost is a lower bound, its answer repaired to fit (:mod:`~.budget`) the incumbent, and the
   exact engine (``toulbar2`` with its knapsack constraint, else ``cpsat`` with a linear one) solves
   the whole problem with the budget, unreduced.

``stats["engine"]`` names what ran (``"reductions"``, ``"dp"``, ``"toulbar2"`` or
``"cpsat"``); ``stats`` also holds the reduction counts and the time of each phase.

Example:
    >>> import networkx as nx, layoutopt
    >>> g = nx.path_graph(3)
    >>> costs = {"nodes": {0: [1, 2], 1: [3, 1], 2: [0, 4]},
    ...          "edges": {(0, 1): [[0, 5], [5, 0]], (1, 2): [[0, 1], [1, 0]]}}
    >>> sol = layoutopt.solve(g, costs)
    >>> sol.objective, sol.status, sol.stats["engine"]
    (4.0, 'optimal', 'reductions')
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import sys
import time
from collections.abc import Callable, Mapping
from multiprocessing.connection import Connection
from typing import Any, ClassVar

import numpy as np

from ..machine import usable_cores
from ..problem import Problem
from ..solution import OPTIMALITY_TOLERANCE
from .base import (
    Deadline,
    Option,
    Solver,
    SolverResult,
    get_solver,
    heuristic_assignment,
    register,
    registered,
)
from .budget import INTEGER_MEMORY_BUDGET, integer_memory, polish, repair
from .dp import DP, OutOfTime, TableTooLarge, eliminate, elimination_order
from .pbqp import icm
from .reductions import Reduction, reduce
from .toulbar2 import LARGEST_FIGURE


def exact_engine() -> str:
    """The exact engine ``auto`` runs on a kernel too wide for ``dp``."""
    if "toulbar2" in registered() and get_solver("toulbar2").is_available():
        return "toulbar2"
    return "cpsat"


#: share of the time left that the engine gets: the expansion and the front end's recomputation of
#: the objective run after its deadline
ENGINE_SHARE = 0.95

#: under a memory budget, the share of the time that the unconstrained solve may take (it is usually
#: a small part of the constrained one)
UNCONSTRAINED_SHARE = 0.5

#: kernels of at least this many nodes go straight to toulbar2's second phase (TRW-S bounds)
TRWS_KERNEL = 800
#: seconds of toulbar2's first phase (plain bounds), plus this share of the time left
FIRST_PHASE, FIRST_PHASE_SHARE = 0.5, 0.1
#: seconds of the second phase's search on a kernel of :data:`TRWS_KERNEL` nodes or more before the
#: second search is forked (then it starts again from its incumbent): a kernel proved in the probe
#: pays no fork, which costs 15-60 ms (random_2000's 890-node kernel is proved in 30-45 ms on an
#: Emerald Rapids core and in 80-130 ms on a 2 GHz Skylake one, where a 0.1-s probe missed it in 4
#: of 9 solves and auto took 2-4x longer; with the fork first auto took 1.27x toulbar2's time on
#: it). Kernels the probe cannot prove lose little to a longer one: densenet_2000's (3.5-4 s) took
#: the same time with 0.1 and 0.3 s
PROBE = 0.3

#: toulbar2's two phases on a kernel (``benchmarks/core.py`` measures them against its defaults):
#: a limited discrepancy search first (``lds=2``: DenseNet kernels of 300 to 1300 nodes solved 2 to 3
#: times sooner), then, if that did not finish, TRW-S bounds too (``trwsAccuracy=1e-5``: densenet_2000's
#: 1274-node kernel proved in about 3 s, none in 20 s without; dense random costs, whose LP relaxation
#: is loose, end 0.3 to 0.6 % better at 5 s). TRW-S costs more than it saves on easy kernels: the first
#: phase keeps them from paying for it.
TOULBAR2_PHASES = ({"lds": 2}, {"lds": 2, "trws": 1e-5})

#: the second search (toulbar2's defaults beside the two phases, see the module docstring) runs on
#: kernels of at least this many nodes, under a time limit of at least this many seconds: below,
#: the two phases prove the optimum before a fork pays for itself
SECOND_SEARCH_KERNEL, SECOND_SEARCH_SECONDS = 100, 1.0
#: the second search starts at once, not after the first phase, on a kernel whose trivial lower
#: bound is below this share of a uniformly random assignment's expected cost (see
#: :func:`bound_share`): costs that do not decompose into per-table minima, where the first phase
#: proves nothing and its second of the budget is the second search's loss. Measured shares: random
#: K=16 graphs with uniform costs 0.10-0.12; the DNN-shaped families, normal and hard regimes,
#: 0.43-0.62 (``benchmarks/core.py``'s instances)
LOOSE_BOUND_SHARE = 0.25


@register
class Auto(Solver):
    """Reductions, then dp or an exact engine on the kernel (see the module docstring)."""

    name = "auto"
    exact = True
    options: ClassVar[dict[str, Option]] = {
        "dp_max_table": Option.number(
            1e5, "use variable elimination when its largest table has at most this many entries; above, "
            "the exact engine"),
        "second_search": Option.boolean(
            True, "on a large kernel under a time limit, run toulbar2's default search beside auto's own "
            "in a second process on a free CPU, and keep the better answer"),
    }

    def solve(self, problem: Problem, deadline: Deadline, options: Mapping[str, Any]) -> SolverResult:
        if problem.memory_budget is not None:
            return self._solve_within_budget(problem, deadline, options)
        start = time.perf_counter()
        reduction = reduce(problem)
        stats: dict[str, Any] = dict(reduction.stats)
        stats["reduce_time"] = time.perf_counter() - start
        if reduction.infeasible is not None:
            stats["engine"] = "reductions"
            return SolverResult(None, "infeasible", math.inf, reduction.infeasible, stats)
        kernel = reduction.kernel
        if not len(kernel):
            stats["engine"] = "reductions"
            return SolverResult(reduction.expand([]), "optimal", reduction.constant, "", stats)
        solved = _eliminate(reduction, options["dp_max_table"], deadline, stats)
        if solved is not None:
            return solved
        second: list[SecondSearch] = []
        # a fork costs 15-60 ms (page tables, then copy-on-write faults): worth it only on kernels
        # the first phase (or the probe) did not prove
        wanted = options["second_search"] and len(kernel) >= SECOND_SEARCH_KERNEL

        def start_second_search() -> None:
            if wanted and not second:
                started = SecondSearch.start(problem, deadline)  # None without the time or a free CPU
                if started is not None:
                    second.append(started)

        possible = wanted and SecondSearch.possible(deadline)  # checked first: bound_share reads every cost
        if possible and bound_share(kernel) < LOOSE_BOUND_SHARE:
            start_second_search()  # the first phase will not prove this kernel: do not wait for it
        stats["second_search_at_once"] = bool(second)
        own = self._solve_kernel(reduction, exact_engine(), deadline, stats, start_second_search,
                                 probe=possible and not second)
        return second[0].merge(own, problem, deadline, stats) if second else own

    def _solve_within_budget(self, problem: Problem, deadline: Deadline,
                             options: Mapping[str, Any]) -> SolverResult:
        """Under a memory budget (see the module docstring): the unconstrained optimum when it fits, else
        the exact engine with the budget as a constraint, on the whole problem."""
        phase = time.perf_counter()
        free = self.solve(problem.with_memory_budget(None), deadline.share(UNCONSTRAINED_SHARE), options)
        stats: dict[str, Any] = {
            "unconstrained": {key: free.stats.get(key) for key in ("engine", "kernel_nodes")},
            "unconstrained_time": time.perf_counter() - phase}
        if free.assignment is None:  # nothing allowed, or nothing found in time
            return SolverResult(None, "infeasible", free.lower_bound, free.message, {**free.stats, **stats})
        if problem.fits(free.assignment):
            stats["engine"] = free.stats.get("engine")
            stats["budget"] = "the unconstrained optimum fits" if free.status == "optimal" else (
                "the unconstrained answer fits")
            return SolverResult(free.assignment, free.status, free.lower_bound, free.message,
                                {**free.stats, **stats})
        # The unconstrained optimum bounds the constrained one. The incumbent: its answer made to fit, or
        # pbqp's multiplier search (a few milliseconds; on 600-node DenseNets with a budget halfway, 28 %
        # cheaper than the repair), whichever costs less
        repaired = np.array(free.assignment, dtype=np.int64)
        candidates = [heuristic_assignment(problem, deadline)]
        if repair(problem, repaired, deadline):
            polish(problem, repaired, deadline)
            candidates.append(repaired)
        candidates = [x for x in candidates if x is not None]
        incumbent = min(candidates, key=problem.evaluate) if candidates else None
        engine = exact_engine()
        if engine == "toulbar2" and not _exact_figures(problem, LARGEST_FIGURE) and _exact_figures(problem):
            engine = "cpsat"  # toulbar2 would round figures of 2**31 bytes or more; CP-SAT keeps them whole
        stats.update(engine=engine, budget=f"{engine} with the budget as a constraint")
        solver_cls = get_solver(engine)
        phase = time.perf_counter()
        engine_deadline = deadline.share(ENGINE_SHARE)
        if engine == "toulbar2":
            result = solver_cls().solve(problem, engine_deadline, solver_cls.resolve_options(),
                                        incumbent=incumbent)
        else:
            result = solver_cls().solve(problem, engine_deadline, solver_cls.resolve_options())
        stats["engine_time"] = time.perf_counter() - phase
        stats["engine_stats"] = result.stats
        bounds = [b for b in (result.lower_bound, free.lower_bound) if b is not None]
        lower = max(bounds) if bounds else None
        if result.assignment is None:
            if result.lower_bound == math.inf:
                return SolverResult(None, "infeasible", math.inf, result.message, stats)
            if incumbent is None:
                return SolverResult(None, "infeasible", lower, result.message or
                                    f"{engine} found no assignment within the memory budget in time", stats)
            return SolverResult(incumbent, "feasible", lower, result.message, stats)
        assignment = np.array(result.assignment, dtype=np.int64)
        if incumbent is not None and problem.evaluate(incumbent) < problem.evaluate(assignment):
            assignment = incumbent
        if result.status != "optimal":
            stats["polish_moves"] = polish(problem, assignment, deadline)
        return SolverResult(assignment, result.status, lower, result.message, stats)

    def _solve_kernel(self, reduction: Reduction, engine: str, deadline: Deadline, stats: dict[str, Any],
                      before_second_phase: Callable[[], None], probe: bool) -> SolverResult:
        kernel = reduction.kernel
        stats["engine"] = engine
        solver_cls = get_solver(engine)
        phase = time.perf_counter()
        engine_deadline = deadline.share(ENGINE_SHARE)
        if engine == "toulbar2":
            result = _two_phases(solver_cls, kernel, engine_deadline, stats, before_second_phase, probe)
        else:
            result = solver_cls().solve(kernel, engine_deadline, solver_cls.resolve_options())
        stats["engine_time"] = time.perf_counter() - phase
        stats["engine_stats"] = result.stats
        bound = result.lower_bound
        if result.assignment is None:
            if result.status == "infeasible" and bound == math.inf:
                return SolverResult(None, "infeasible", math.inf, result.message, stats)
            message = result.message or f"{engine} found no allowed assignment within the time limit"
            return SolverResult(None, "infeasible", None, message, stats)
        assignment = np.array(result.assignment, dtype=np.int64)
        if result.status != "optimal":
            # an engine stopped by the limit leaves single moves that help (0.1-0.3 % on random K=16
            # graphs at 5 s): ICM takes them (a sweep takes milliseconds; past the deadline, one sweep)
            stats["icm_moves"] = icm(kernel, assignment, deadline=deadline)
        value = kernel.evaluate(assignment)
        if bound is None or not bound > -math.inf:
            bound = kernel.trivial_lower_bound()
        message = result.message
        tolerance = OPTIMALITY_TOLERANCE * kernel.magnitude(assignment)
        if math.isfinite(value) and value - bound > tolerance and result.status == "optimal":
            # the engine proved the optimum of its integer-rounded costs only: float64 elimination can do
            # better when the tables fit
            solved = _eliminate(reduction, DP.options["max_table_size"].default, deadline, stats)
            if solved is not None:
                stats["engine"] = "dp"
                return solved
            message = (f"{message + '; ' if message else ''}dp cannot take over (its tables would exceed "
                       f"{DP.options['max_table_size'].default:.0e} entries)")
        return SolverResult(reduction.expand(assignment), result.status, reduction.lower_bound(bound),
                            message, stats)


def _exact_figures(problem: Problem, largest_figure: float = INTEGER_MEMORY_BUDGET) -> bool:
    """Whether an engine taking figures up to ``largest_figure`` gets them exactly (no rounding)."""
    memory = integer_memory(problem, largest_figure)
    return memory is None or memory.exact


class SecondSearch:
    """The ``second_search`` of :class:`Auto` (see the module docstring): toulbar2's default search on
    the whole problem, as ``method="toulbar2"`` runs it, in a forked process on another CPU, until
    the same deadline.

    The whole problem, not auto's kernel: on random K=16 graphs toulbar2 ended worse on the kernel
    the reductions leave than on the graph itself (its own preprocessing does better on the original
    edges), so only the same call makes auto at least as good as toulbar2 alone
    (``benchmarks/results/core.md`` compares the two).

    Example:
        >>> import networkx as nx
        >>> costs = {"nodes": {0: [1, 2], 1: [3, 1], 2: [0, 4]},
        ...          "edges": {(0, 1): [[0, 5], [5, 0]], (1, 2): [[0, 1], [1, 0]]}}
        >>> problem = Problem.from_graph(nx.path_graph(3), costs)
        >>> SecondSearch.start(problem, Deadline(None)) is None     # no time limit: no race
        True
        >>> deadline = Deadline(2.0)
        >>> second = SecondSearch.start(problem, deadline)      # None without a free CPU or os.fork
        >>> own = SolverResult([1, 1, 0], "optimal", 4.0)       # auto's own search proved it
        >>> result = second.merge(own, problem, deadline, {}) if second else own    # the child stopped
        >>> result.assignment, result.status
        ([1, 1, 0], 'optimal')
    """

    def __init__(self, pid: int, connection) -> None:
        self._pid, self._connection = pid, connection

    @staticmethod
    def possible(deadline: Deadline) -> bool:
        """Would :meth:`start` fork now (time enough left, a free CPU, ``os.fork``)?"""
        remaining = deadline.remaining()
        return (remaining is not None and remaining >= SECOND_SEARCH_SECONDS and usable_cores() >= 2
                and hasattr(os, "fork"))

    @classmethod
    def start(cls, problem: Problem, deadline: Deadline) -> SecondSearch | None:
        if not cls.possible(deadline):
            return None
        # A bare fork, not multiprocessing: the child starts at once with the problem in its memory
        # (spawn would import layoutopt and toulbar2 again, a second or so of the budget), and it
        # works in daemonic processes too (a multiprocessing worker's, which may have no
        # multiprocessing children). The child runs toulbar2 and numpy only, and leaves by os._exit.
        read_end, write_end = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            pid = os.fork()
        except OSError:  # no memory or process slot for a child: auto's own search still runs
            os.close(read_end)
            os.close(write_end)
            return None
        if pid == 0:  # the child
            code = 1
            try:
                os.close(read_end)
                _search_in_child(problem, deadline, Connection(write_end, readable=False))
                code = 0
            finally:
                os._exit(code)
        os.close(write_end)
        return cls(pid, Connection(read_end, writable=False))

    def merge(self, own: SolverResult, problem: Problem, deadline: Deadline,
              stats: dict[str, Any]) -> SolverResult:
        """``own`` or the child's answer (after an ICM polish), whichever costs less, with the higher
        of the two bounds; the child is stopped at once when ``own`` is a proof, else awaited until
        ``deadline``."""
        proved = own.status == "optimal" or own.lower_bound == math.inf
        other = None if proved else self._receive(deadline)
        self._stop()
        if other is None:
            stats["second_search"] = "stopped" if proved else "no answer in time"
            return own
        assignment, status, bound = other
        if status == "infeasible" and bound == math.inf:  # a proof that nothing is allowed
            stats["second_search"] = {"status": status, "used": True}
            return SolverResult(None, status, bound, "", own.stats)
        if assignment is not None and status != "optimal":
            icm(problem, assignment, deadline=deadline)  # as auto's own answer gets
        value = math.inf if assignment is None else problem.evaluate(assignment)
        own_value = math.inf if own.assignment is None else problem.evaluate(own.assignment)
        stats["second_search"] = {"objective": value, "status": status, "lower_bound": bound}
        bounds = [b for b in (own.lower_bound, bound) if b is not None]
        best_bound = max(bounds) if bounds else None
        if status == "optimal" or value < own_value:
            stats["second_search"]["used"] = True
            return SolverResult(assignment, status, best_bound, own.message if status != "optimal" else "",
                                own.stats)
        return SolverResult(own.assignment, own.status, best_bound, own.message, own.stats)

    def _stop(self) -> None:
        """End the child (it may still be searching) and reap it."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self._pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):  # reaped already (by alive())
            os.waitpid(self._pid, 0)
        self._connection.close()

    def alive(self) -> bool:
        """Is the child still running (not yet reaped)?"""
        try:
            return os.waitpid(self._pid, os.WNOHANG) == (0, 0)
        except ChildProcessError:
            return False

    def _receive(self, deadline: Deadline) -> tuple | None:
        remaining = deadline.remaining()
        # the child stops at its own deadline (the same instant): a short grace for its answer
        if self._connection.poll(None if remaining is None else remaining + 0.05):
            try:
                return self._connection.recv()
            except (EOFError, OSError):  # the child died (it answers nothing then)
                return None
        return None


def _search_in_child(problem: Problem, deadline: Deadline, connection) -> None:
    solver_cls = get_solver("toulbar2")
    try:
        result = solver_cls().solve(problem, deadline, solver_cls.resolve_options())
        assignment = None if result.assignment is None else np.asarray(result.assignment, dtype=np.int64)
        connection.send((assignment, result.status, result.lower_bound))
    finally:
        connection.close()


def bound_share(problem: Problem) -> float:
    """The problem's trivial lower bound (the sum of every table's least cost) as a share of the
    expected cost of a uniformly random assignment (the sum of every table's mean finite cost): near
    1 when costs decompose into per-table minima (DNN layout costs: 0.4-0.6), near 0 when every
    assignment pays far above them (uniform random costs: ~0.1). ``nan`` unless both are positive
    (negative costs: the share means nothing).

    Example:
        >>> import networkx as nx
        >>> p = Problem.from_graph(nx.path_graph(2), {"nodes": {0: [1, 3], 1: [2, 2]},
        ...                                           "edges": {(0, 1): [[0, 4], [4, 0]]}})
        >>> bound_share(p)  # bound 1 + 2 + 0, random 2 + 2 + 2
        0.5
    """
    packed = problem._packing
    flat = np.concatenate([packed.node_flat, packed.edge_flat])
    starts = np.concatenate([packed.node_start, packed.edge_start + packed.node_flat.size])
    finite = np.isfinite(flat)
    sums = np.add.reduceat(np.where(finite, flat, 0.0), starts)
    counts = np.add.reduceat(finite, starts)
    expected = float((sums / np.maximum(counts, 1)).sum())
    bound = problem.trivial_lower_bound()
    return bound / expected if bound > 0 and expected > 0 and math.isfinite(bound) else math.nan


def _two_phases(solver_cls: type[Solver], kernel: Problem, deadline: Deadline, stats: dict[str, Any],
                before_second_phase: Callable[[], None] = lambda: None, probe: bool = False) -> SolverResult:
    """toulbar2 on ``kernel`` with :data:`TOULBAR2_PHASES`: the second only if the first did not finish;
    it starts from the first's incumbent, after a call of ``before_second_phase``. A kernel of
    :data:`TRWS_KERNEL` nodes or more skips the first phase, or with ``probe`` (a fork to come)
    replaces it by :data:`PROBE` seconds of the second."""
    first, second = (solver_cls.resolve_options(options) for options in TOULBAR2_PHASES)
    incumbent = None
    remaining = deadline.remaining()
    if len(kernel) < TRWS_KERNEL:
        options, budget = first, FIRST_PHASE + FIRST_PHASE_SHARE * (remaining or 0.0)
    else:  # a short probe with the second phase's options, only where a fork would follow
        options, budget = (second, PROBE) if probe else (None, 0.0)
    if options is not None:
        result = solver_cls().solve(kernel, Deadline(budget if remaining is None else min(budget, remaining)),
                                    options, fallback=False)  # the second phase makes it if needed
        stats["phases"] = 1
        proved = result.status == "optimal" or result.lower_bound == math.inf  # optimal, or infeasible
        if proved or (deadline.expired() and result.assignment is not None):
            return result  # finished (or the user's time is up: its answer stands)
        incumbent = None if result.assignment is None else np.asarray(result.assignment)
    stats["phases"] = stats.get("phases", 0) + 1
    before_second_phase()
    return solver_cls().solve(kernel, deadline, second, incumbent=incumbent)


def _eliminate(reduction: Reduction, cap: float, deadline: Deadline,
               stats: dict[str, Any]) -> SolverResult | None:
    """Solve the kernel by variable elimination when its tables stay within ``cap`` entries (else
    None; also None when the deadline stops it, so that the exact engine answers)."""
    kernel = reduction.kernel
    try:
        order, largest = elimination_order(kernel, cap)
    except TableTooLarge:
        return None
    phase = time.perf_counter()
    try:
        choices, value = eliminate(kernel, order, deadline)
    except OutOfTime:
        return None
    stats["engine"] = "dp"
    stats["largest_table"] = largest
    stats["engine_time"] = time.perf_counter() - phase
    if choices is None:
        return SolverResult(None, "infeasible", math.inf, "every assignment costs inf", stats)
    return SolverResult(reduction.expand(choices), "optimal", reduction.lower_bound(value), "", stats)

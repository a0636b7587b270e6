"""The exact PBQP reductions (Scholz & Eckstein), shared by ``pbqp``, ``dp`` and ``auto``.

:func:`reduce` applies, until none applies any more:

- **domain pruning**: a choice with an ``inf`` node cost, or with no allowed partner on
  some edge, is removed (arc consistency, propagated to the neighbours);
- **R1** (a node with one choice left, any degree): its edge columns are added to its
  neighbours' vectors;
- **R0** (degree 0): the node takes its cheapest choice;
- **RI** (degree 1): ``c_x += min_y (C_xy + c_y)`` and the node disappears;
- **RII** (degree 2): ``C_xz += min_y (C_xy + c_y + C_yz)``, creating the x-z edge if needed.

All-zero edge matrices are dropped (they couple nothing). What is left is the *kernel*: the
nodes of degree >= 3, with folded costs, as an ordinary :class:`~layoutopt.Problem` that
any registered solver can solve. :meth:`Reduction.expand` back-propagates a kernel
assignment to every node (each reduced node takes its argmin given the neighbours it had
when it was reduced), so ``kernel optimum + constant == problem optimum``.

On series-parallel graphs (ResNet, Inception, SSD shapes) the kernel is empty and the
reductions alone are an exact solver.

Example:
    >>> import networkx as nx
    >>> from layoutopt import Problem
    >>> p = Problem.from_graph(nx.path_graph(3), {"nodes": {0: [1, 2], 1: [3, 1], 2: [0, 4]},
    ...     "edges": {(0, 1): [[0, 5], [5, 0]], (1, 2): [[0, 1], [1, 0]]}})
    >>> r = reduce(p)
    >>> len(r.kernel), r.constant, p.evaluate(r.expand([]))
    (0, 4.0, 4.0)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..problem import Problem, _pack_flat, sum_down

__all__ = ["Infeasible", "Reduction", "WorkingGraph", "reduce"]

_INF = math.inf


class Infeasible(Exception):
    """Raised inside the reductions when a node's domain becomes empty."""


class WorkingGraph:
    """A mutable copy of a :class:`Problem` on which the reductions run.

    The graph lives in flat arrays and the reductions run compiled (:mod:`._engine`, numba,
    imported on first use so that ``import layoutopt`` stays light). Choice indices are always
    the problem's original ones: a pruned choice keeps its slot, with cost ``inf``.
    """

    def __init__(self, problem: Problem) -> None:
        from . import _engine

        self._engine = _engine
        self.problem = problem
        packed = problem._packing
        coupling = (packed.edge_max != 0) | (packed.edge_min != 0)  # all zero: couples nothing
        self.graph, self.pool = _engine.build(packed.node_size, packed.node_flat, packed.edge_flat,
                                              packed.edge_start, packed.edge_i, packed.edge_j, coupling)
        #: the graph's arrays (shared with the compiled code, so always current), by name
        self.arrays = self.graph.arrays

    def _run(self, function, *args):
        try:
            return function(self.graph, self.pool, *args)
        except self._engine.EmptyDomain:
            node = self.problem.nodes[int(self.arrays["counts"][self._engine.EMPTIED])]
            raise Infeasible(f"node {node!r} has no allowed choice left") from None

    def reduce_exact(self) -> None:
        """Apply R1/R0/RI/RII (and pruning, once on) until every live node has degree >= 3.

        Raises:
            Infeasible: a node's domain became empty (the problem has no finite assignment).
        """
        self.pool = self._run(self._engine.reduce_exact)

    def prune_all(self) -> None:
        """Remove every forbidden choice of the live nodes (arc consistency), and keep doing so
        after each later reduction. The exact reductions handle inf arithmetically (min-sum), so
        this is only needed for RN, which must not pick a dead choice.

        Raises:
            Infeasible: a domain became empty.
        """
        self._run(self._engine.prune_all)

    def reduce_by_rn(self, deadline_at: float) -> None:
        """RN steps, each followed by the exact reductions, until the graph is empty (see
        :mod:`.pbqp`); past ``deadline_at`` (a ``time.perf_counter`` instant) nodes are no longer
        re-ranked."""
        self.pool = self._run(self._engine.reduce_by_rn, deadline_at)

    @property
    def n_alive(self) -> int:
        return int(self.arrays["counts"][self._engine.N_ALIVE])

    @property
    def constant(self) -> float:
        """Cost of the nodes fixed so far (R0, one-choice and RN nodes)."""
        return float(self.arrays["constant"][0])

    @property
    def counts(self) -> dict[str, int]:
        """How many times each reduction ran, choices pruned and edges dropped."""
        return dict(zip(self._engine.STAT_NAMES, self.arrays["counts"].tolist(), strict=False))

    def live_nodes(self) -> list[int]:
        return np.flatnonzero(self.arrays["alive"]).tolist()

    def domain(self, i: int) -> np.ndarray:
        """Node ``i``'s live choices (original indices)."""
        start, size = self.arrays["nstart"][i], self.arrays["K"][i]
        return np.flatnonzero(self.arrays["live"][start:start + size])

    def vector(self, i: int) -> np.ndarray:
        """Node ``i``'s current costs over its live choices."""
        start, size = self.arrays["nstart"][i], self.arrays["K"][i]
        return self.arrays["vec"][start:start + size][self.domain(i)]

    def kernel(self, nodes: list[int]) -> tuple[Problem, list[np.ndarray]]:
        """The live part of the graph as a :class:`Problem` over ``nodes`` (in that order) and
        their live choices; choice ``k`` of kernel node ``p`` is ``domains[p][k]``."""
        problem, arrays = self.problem, self.arrays
        sizes, nstart, live, nlive = arrays["K"], arrays["nstart"], arrays["live"], arrays["nlive"]
        order = np.asarray(nodes, dtype=np.int64)
        position = np.full(len(problem), -1, dtype=np.int64)
        position[order] = np.arange(order.size)
        # Gathered in a few numpy calls (a loop per node and edge was most of auto's reduction
        # time on 2000-node kernels): every entry of the full vectors and matrices, with a flag
        # for the ones whose choices are all live; fancy indexing copies them out of the pool,
        # which later reductions may change.
        choice, owner = _ranges(sizes[order])
        slots = nstart[order][owner] + choice
        kept = live[slots].astype(bool)
        node_flat = arrays["vec"][slots[kept]]
        domains = np.split(choice[kept], np.cumsum(nlive[order])[:-1]) if order.size else []

        found, first, second = self._engine.live_edges(self.graph)
        p, q = position[first], position[second]
        inside = (p >= 0) & (q >= 0)
        found, first, second, p, q = found[inside], first[inside], second[inside], p[inside], q[inside]
        flip = p > q  # stored as (i, j) with i < j: rows are the kernel's first end
        rows, cols = np.where(flip, second, first), np.where(flip, first, second)
        edge_i, edge_j = np.minimum(p, q), np.maximum(p, q)
        by_pair = np.lexsort((edge_j, edge_i))
        found, second, flip, rows, cols, edge_i, edge_j = (
            a[by_pair] for a in (found, second, flip, rows, cols, edge_i, edge_j))
        local, edge = _ranges(sizes[rows] * sizes[cols])
        r, c = np.divmod(local, sizes[cols][edge])  # the entry's row and column in the kernel's matrix
        u_choice, v_choice = np.where(flip[edge], c, r), np.where(flip[edge], r, c)
        source = arrays["estart"][found][edge] + u_choice * sizes[second][edge] + v_choice
        kept = (live[nstart[rows][edge] + r] & live[nstart[cols][edge] + c]).astype(bool)
        edge_flat = self.pool[source[kept]]

        packed = _pack_flat(node_flat, nlive[order].astype(np.int64), edge_flat, edge_i, edge_j)
        labels = tuple(
            None if problem.labels[i] is None else
            problem.labels[i] if dom.size == sizes[i] else [problem.labels[i][k] for k in dom.tolist()]
            for i, dom in zip(order.tolist(), domains, strict=True)
        )
        kernel = Problem._on_packing(tuple(problem.nodes[i] for i in order.tolist()), labels, packed,
                                     np.zeros(edge_i.size, dtype=bool))  # edges named in kernel order
        return kernel, domains

    # --- back-propagation -------------------------------------------------------------------

    def expand(self, nodes: Sequence[int] = (), domains: Sequence[np.ndarray] = (),
               kernel_assignment: Sequence[int] = ()) -> list[int]:
        """An assignment of the whole problem from one of the live nodes ``nodes`` (local choice
        ``kernel_assignment[p]`` of node ``nodes[p]`` is its original choice ``domains[p][k]``; none
        once RN emptied the graph).

        Pops the stack in reverse: each reduced node takes its argmin given its neighbours' choices.
        """
        known = np.full(len(self.problem), -1, dtype=np.int64)
        for i, k, domain in zip(nodes, kernel_assignment, domains, strict=True):
            known[i] = domain[int(k)]
        return self._engine.backpropagate(self.graph, self.pool, known).tolist()


def _ranges(lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each position of consecutive ranges of ``lengths`` entries, and its range.

    Example:
        >>> [a.tolist() for a in _ranges(np.array([2, 3]))]
        [[0, 1, 0, 1, 2], [0, 0, 1, 1, 1]]
    """
    owner = np.repeat(np.arange(lengths.size), lengths)
    return np.arange(owner.size) - (np.cumsum(lengths) - lengths)[owner], owner


@dataclass
class Reduction:
    """The result of :func:`reduce`.

    Attributes:
        kernel: the nodes the exact reductions could not remove, as a :class:`Problem`
            (node names are the original ones; choice ``k`` of kernel node ``i`` is original
            choice ``kernel_choices[i][k]``). Empty when the reductions solved everything.
        constant: cost fixed by the reductions; ``problem optimum = kernel optimum + constant``.
        infeasible: a message when the reductions proved that no finite assignment exists.
        stats: counts of each reduction, pruned choices and the kernel size.
    """

    kernel: Problem
    constant: float
    kernel_nodes: list[int]
    kernel_choices: list[np.ndarray]
    infeasible: str | None = None
    stats: dict[str, Any] = field(default_factory=dict)
    _graph: WorkingGraph | None = field(default=None, repr=False)

    def expand(self, kernel_assignment: Sequence[int]) -> list[int]:
        """Turn an assignment of the kernel (its local choice indices) into one of the problem.

        Example:
            >>> import networkx as nx
            >>> from layoutopt import Problem
            >>> p = Problem.from_graph(nx.complete_graph(4), {"nodes": {i: [1, 0] for i in range(4)},
            ...     "edges": {e: [[0, 1], [1, 0]] for e in nx.complete_graph(4).edges}})
            >>> r = reduce(p)
            >>> len(r.kernel), r.expand([1, 1, 1, 1])
            (4, [1, 1, 1, 1])
        """
        if self.infeasible is not None:
            raise ValueError(f"the problem is infeasible: {self.infeasible}")
        if len(kernel_assignment) != len(self.kernel_nodes):
            raise ValueError(
                f"kernel assignment has {len(kernel_assignment)} entries, the kernel {len(self.kernel_nodes)}"
            )
        assert self._graph is not None
        return self._graph.expand(self.kernel_nodes, self.kernel_choices, kernel_assignment)

    def lower_bound(self, kernel_bound: float) -> float:
        """A bound on the problem's optimum from a bound on the kernel's."""
        return sum_down([kernel_bound, self.constant])


def reduce(problem: Problem) -> Reduction:
    """Apply the exact PBQP reductions to ``problem``; see the module docstring.

    Example:
        >>> import networkx as nx
        >>> from layoutopt import Problem
        >>> g = nx.cycle_graph(5)
        >>> p = Problem.from_graph(g, {"nodes": {i: [1.0, 2.0] for i in g},
        ...                            "edges": {e: [[0, 3], [3, 0]] for e in g.edges}})
        >>> r = reduce(p)
        >>> len(r.kernel), r.stats["RII"], r.constant
        (0, 3, 5.0)
    """
    graph = WorkingGraph(problem)
    infeasible = None
    try:
        graph.reduce_exact()
    except Infeasible as exc:
        infeasible = str(exc)
    nodes = graph.live_nodes() if infeasible is None else []
    kernel, choices = graph.kernel(nodes)
    stats = dict(graph.counts)
    stats["kernel_nodes"] = len(kernel)
    stats["kernel_edges"] = len(kernel.edges)
    return Reduction(kernel, graph.constant, nodes, choices, infeasible, stats, graph)

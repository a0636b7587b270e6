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
from typing import Any, NamedTuple

import numpy as np

from ..problem import Problem, sum_down

__all__ = ["Infeasible", "Reduction", "WorkingGraph", "reduce"]

_INF = math.inf


class Infeasible(Exception):
    """Raised inside the reductions when a node's domain becomes empty."""


class _Step(NamedTuple):
    """One reduced node, for back-propagation.

    The local choice of ``node`` is the argmin of ``costs[0] + sum(costs[1 + n][:, local choice of
    nbrs[n]])`` (its vector and its matrices when it was reduced: computed for the neighbours' actual
    choices only, not tabulated for all of them); for a fixed node ``costs`` is ``(local choice,)``.
    Local indices are positions in the domain snapshots taken when the node was reduced (``None`` =
    every original choice).
    """

    node: int
    domain: np.ndarray | None
    nbrs: tuple[int, ...]
    nbr_domains: tuple[np.ndarray | None, ...]
    costs: tuple


class WorkingGraph:
    """A mutable copy of a :class:`Problem` on which the reductions run.

    ``vec[i]`` is node ``i``'s current cost vector over its live choices ``domain[i]``
    (``None`` while all original choices are live); ``adj[i][j]`` is the ``(K_i, K_j)``
    matrix and ``adj[j][i]`` its transpose. Matrices are never modified in place, so the
    problem's read-only arrays are shared, not copied.
    """

    def __init__(self, problem: Problem) -> None:
        n = len(problem)
        self.problem = problem
        # vectors are replaced, never written in place: the problem's read-only arrays are shared
        self.vec: list[np.ndarray] = list(problem.node_costs)
        self.adj: list[dict[int, np.ndarray]] = [{} for _ in range(n)]
        self.domain: list[np.ndarray | None] = [None] * n
        self.alive = [True] * n
        self.n_alive = n
        self.stack: list[_Step] = []
        #: cost of the nodes fixed so far (R0, one-choice and fixed RN nodes)
        self.constant = 0.0
        self.counts = {"R0": 0, "RI": 0, "RII": 0, "R1": 0, "RN": 0, "pruned": 0, "dropped_edges": 0}
        adj = self.adj
        packed = problem._packing
        coupling = ((packed.edge_max != 0) | (packed.edge_min != 0)).tolist()  # all zero: couples nothing
        for ((i, j), m), couples in zip(problem.edges.items(), coupling, strict=True):
            if couples:
                adj[i][j] = m
                adj[j][i] = m.T
        self.counts["dropped_edges"] = len(coupling) - sum(coupling)
        #: nodes whose degree or size changed, to re-examine
        self.worklist = [i for i in range(n) if len(adj[i]) <= 2 or self.vec[i].size == 1]
        #: whether to prune forbidden choices as they appear. The exact reductions handle inf
        #: arithmetically (min-sum), so pruning is only switched on for RN, which must not
        #: pick a dead choice (see :meth:`prune_all`).
        self.pruning = False
        #: nodes whose edges changed, and nodes whose cost vector changed, since the caller last
        #: cleared these lists (RN's node selection re-estimates them, and the latter's neighbours)
        self.changed: list[int] = []
        self.changed_vectors: list[int] = []

    # --- domains ---------------------------------------------------------------------------

    def prune_all(self) -> None:
        """Remove every forbidden choice of the live nodes (arc consistency), and keep doing
        so after each later reduction.

        Raises:
            Infeasible: a domain became empty.
        """
        self.pruning = True
        queue: list[int] = []
        for i in self.live_nodes():
            c = self.vec[i]
            if math.isinf(c.max()):
                self._restrict(i, np.isfinite(c), queue)
        for i in self.live_nodes():
            for j, m in list(self.adj[i].items()):
                if i < j and math.isinf(m.max()):
                    self._check_support(i, j, queue)
                    self._check_support(j, i, queue)
        self._propagate(queue)

    def _restrict(self, i: int, keep: np.ndarray, queue: list[int]) -> None:
        """Keep only the choices ``keep`` (a boolean mask) of node ``i``."""
        count = int(keep.sum())
        if count == 0:
            raise Infeasible(f"node {self.problem.nodes[i]!r} has no allowed choice left")
        self.counts["pruned"] += keep.size - count
        dom = self.domain[i]
        self.domain[i] = np.flatnonzero(keep) if dom is None else dom[keep]
        self.vec[i] = self.vec[i][keep]
        row = self.adj[i]
        for j, m in row.items():
            m = m[keep]
            row[j] = m
            self.adj[j][i] = m.T
        queue.append(i)
        self.worklist.append(i)
        self.changed_vectors.append(i)  # its vector and the matrices of all its edges

    def _check_support(self, i: int, j: int, queue: list[int]) -> None:
        """Remove the choices of ``i`` that no choice of ``j`` allows."""
        supported = np.isfinite(self.adj[i][j]).any(axis=1)
        if not supported.all():
            self._restrict(i, supported, queue)

    def _propagate(self, queue: list[int]) -> None:
        """Arc consistency: re-check the neighbours of every node whose domain shrank."""
        while queue:
            i = queue.pop()
            if not self.alive[i]:
                continue
            for j, m in list(self.adj[i].items()):
                if math.isinf(m.max()):
                    self._check_support(j, i, queue)

    def _add_to_vectors(self, additions: list[tuple[int, np.ndarray]]) -> None:
        """Add to several vectors, then prune: pruning first would resize the later additions."""
        forbidden = []
        for x, values in additions:
            vec = self.vec[x] + values
            self.vec[x] = vec
            self.changed_vectors.append(x)
            if self.pruning and math.isinf(vec.max()):
                forbidden.append(x)
        if forbidden:
            queue: list[int] = []
            for x in forbidden:
                self._restrict(x, np.isfinite(self.vec[x]), queue)
            self._propagate(queue)

    def _set_edge(self, x: int, z: int, m: np.ndarray) -> None:
        if not np.count_nonzero(m):
            self.adj[x].pop(z, None)
            self.adj[z].pop(x, None)
            self.counts["dropped_edges"] += 1
        else:
            self.adj[x][z] = m
            self.adj[z][x] = m.T
            if self.pruning and math.isinf(m.max()):
                queue: list[int] = []
                self._check_support(x, z, queue)
                self._check_support(z, x, queue)
                self._propagate(queue)
        self.worklist.append(x)
        self.worklist.append(z)
        self.changed.append(x)
        self.changed.append(z)

    def _remove(self, y: int) -> None:
        for x in self.adj[y]:
            del self.adj[x][y]
            self.worklist.append(x)
            self.changed.append(x)
        self.adj[y] = {}
        self.alive[y] = False
        self.n_alive -= 1

    # --- the reductions ----------------------------------------------------------------------

    def fix(self, y: int, k: int, rule: str) -> None:
        """Give node ``y`` its live choice ``k`` and fold its edges into its neighbours."""
        cost = float(self.vec[y][k])
        if cost == _INF:
            raise Infeasible(f"node {self.problem.nodes[y]!r} has no allowed choice left")
        self.stack.append(_Step(y, self.domain[y], (), (), (k,)))
        self.constant += cost
        self.counts[rule] += 1
        nbrs = self.adj[y]
        self._remove(y)
        self._add_to_vectors([(x, m[k]) for x, m in nbrs.items()])

    def _reduce_one(self, y: int) -> None:
        vec = self.vec[y]
        row = self.adj[y]
        degree = len(row)
        if vec.size == 1:
            self.fix(y, 0, "R1")
        elif degree == 0:
            self.fix(y, int(vec.argmin()), "R0")
        elif degree == 1:
            ((x, m),) = row.items()  # m: (K_y, K_x)
            self.stack.append(_Step(y, self.domain[y], (x,), (self.domain[x],), (vec, m)))
            self.counts["RI"] += 1
            self._remove(y)
            self._add_to_vectors([(x, (m + vec[:, None]).min(axis=0))])
        elif degree == 2:
            (x, a), (z, b) = row.items()  # a: (K_y, K_x), b: (K_y, K_z)
            delta = (a.T[:, :, None] + (b + vec[:, None])[None, :, :]).min(axis=1)  # min over y of (x, y, z)
            self.stack.append(_Step(y, self.domain[y], (x, z), (self.domain[x], self.domain[z]), (vec, a, b)))
            self.counts["RII"] += 1
            self._remove(y)
            old = self.adj[x].get(z)
            self._set_edge(x, z, delta if old is None else old + delta)

    def reduce_exact(self) -> None:
        """Apply R1/R0/RI/RII (and pruning) until every live node has degree >= 3.

        Raises:
            Infeasible: a node's domain became empty (the problem has no finite assignment).
        """
        worklist = self.worklist
        alive = self.alive
        adj = self.adj
        while worklist:
            y = worklist.pop()
            if alive[y] and (len(adj[y]) <= 2 or self.vec[y].size == 1):
                self._reduce_one(y)

    def degree(self, i: int) -> int:
        return len(self.adj[i])

    def live_nodes(self) -> list[int]:
        return [i for i, a in enumerate(self.alive) if a]

    # --- back-propagation -------------------------------------------------------------------

    def backpropagate(self, choices: list[int | None]) -> list[int]:
        """Complete ``choices`` (original indices; set for the nodes not on the stack).

        Pops the stack in reverse: each node takes its argmin given its neighbours' choices.
        """
        for node, domain, nbrs, nbr_domains, costs in reversed(self.stack):
            if len(nbrs) == 1:  # RI (the common cases are spelled out: this loop runs once per node)
                vec, m = costs
                k = (m[:, _local(choices[nbrs[0]], nbr_domains[0])] + vec).argmin()
            elif nbrs:  # RII
                vec, a, b = costs
                k = (a[:, _local(choices[nbrs[0]], nbr_domains[0])]  # the reduction's order of additions
                     + (b[:, _local(choices[nbrs[1]], nbr_domains[1])] + vec)).argmin()
            else:  # a fixed node
                k = costs[0]
            choices[node] = int(k) if domain is None else int(domain[k])
        return choices  # type: ignore[return-value]

    def original_choice(self, i: int, k: int) -> int:
        dom = self.domain[i]
        return int(k) if dom is None else int(dom[k])


def _local(choice: int | None, domain: np.ndarray | None) -> int:
    if domain is None:
        return choice  # type: ignore[return-value]
    return int(domain.searchsorted(choice))


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
        graph = self._graph
        assert graph is not None
        choices: list[int | None] = [None] * len(graph.vec)
        for i, k, dom in zip(self.kernel_nodes, kernel_assignment, self.kernel_choices, strict=True):
            choices[i] = int(dom[int(k)])
        return graph.backpropagate(choices)

    def lower_bound(self, kernel_bound: float) -> float:
        """A bound on the problem's optimum from a bound on the kernel's."""
        return sum_down([kernel_bound, self.constant])


def kernel_problem(graph: WorkingGraph, nodes: list[int]) -> tuple[Problem, list[np.ndarray]]:
    """The live part of ``graph`` as a :class:`Problem` (node order: ``nodes``)."""
    problem = graph.problem
    position = {i: p for p, i in enumerate(nodes)}
    edges = {}
    names = {}
    for p, i in enumerate(nodes):
        for j, m in graph.adj[i].items():
            q = position[j]
            if p < q:
                m = np.ascontiguousarray(m)
                m.flags.writeable = False
                edges[(p, q)] = m
                names[(p, q)] = (problem.nodes[i], problem.nodes[j])
    vectors = []
    choices = []
    for i in nodes:
        v = graph.vec[i].copy()
        v.flags.writeable = False
        vectors.append(v)
        dom = graph.domain[i]
        choices.append(np.arange(v.size) if dom is None else dom)
    labels = tuple(
        None if problem.labels[i] is None else [problem.labels[i][int(k)] for k in c]
        for i, c in zip(nodes, choices, strict=True)
    )
    kernel = Problem(tuple(problem.nodes[i] for i in nodes), tuple(vectors), edges, labels, names)
    return kernel, choices


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
    kernel, choices = kernel_problem(graph, nodes)
    stats = dict(graph.counts)
    stats["kernel_nodes"] = len(kernel)
    stats["kernel_edges"] = len(kernel.edges)
    return Reduction(kernel, graph.constant, nodes, choices, infeasible, stats, graph)

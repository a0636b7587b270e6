"""The problem model: a graph with a cost vector per node and a cost matrix per edge.

User input (a networkx graph plus a cost mapping) is validated once, here, into an
index-based :class:`Problem` that every solver receives. Solvers never see raw input.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import networkx as nx
import numpy as np

from .errors import ProblemError

__all__ = ["Costs", "Problem", "evaluate"]


@dataclass
class Costs:
    """Node cost vectors and edge cost matrices, keyed by graph node and node pair.

    ``edges[(u, v)]`` has shape ``(len(nodes[u]), len(nodes[v]))``; ``+inf`` marks a
    forbidden choice or pair.

    Example:
        >>> costs = Costs(nodes={"a": [1.0, 2.0], "b": [0.5]}, edges={("a", "b"): [[0.0], [3.0]]})
        >>> costs.nodes["a"]
        [1.0, 2.0]
    """

    nodes: dict[Hashable, Any] = field(default_factory=dict)
    edges: dict[tuple, Any] = field(default_factory=dict)

    @classmethod
    def from_graph(cls, graph: nx.Graph) -> Costs:
        """Collect ``graph.nodes[n]["cost"]`` and ``graph.edges[u, v]["cost"]`` attributes."""
        nodes = {n: d["cost"] for n, d in graph.nodes(data=True) if "cost" in d}
        if graph.is_multigraph():
            edges = {(u, v, k): d["cost"] for u, v, k, d in graph.edges(keys=True, data=True) if "cost" in d}
        else:
            edges = {(u, v): d["cost"] for u, v, d in graph.edges(data=True) if "cost" in d}
        return cls(nodes, edges)


def _as_costs(costs: Costs | Mapping | None, graph: nx.Graph) -> Costs:
    if costs is None:
        return Costs.from_graph(graph)
    if isinstance(costs, Costs):
        return costs
    if isinstance(costs, Mapping):
        unknown = set(costs) - {"nodes", "edges"}
        if unknown:
            raise ProblemError(
                f"costs has unknown keys {sorted(map(str, unknown))}; expected 'nodes' and 'edges'"
            )
        return Costs(dict(costs.get("nodes", {})), dict(costs.get("edges", {})))
    raise ProblemError(
        f"costs must be a layoutopt.Costs, a mapping {{'nodes': ..., 'edges': ...}} or None, "
        f"not {type(costs).__name__}"
    )


def _check_vector(node: Hashable, value: Any) -> np.ndarray:
    try:
        vec = np.array(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ProblemError(f"node {node!r}: cost is not numeric ({exc})") from None
    if vec.ndim != 1:
        raise ProblemError(f"node {node!r}: cost must be a 1-D vector, got shape {vec.shape}")
    if vec.size == 0:
        raise ProblemError(f"node {node!r}: cost vector is empty (a node needs at least one choice)")
    _check_values(vec, f"node {node!r}")
    vec.flags.writeable = False
    return vec


def _check_values(arr: np.ndarray, where: str) -> None:
    # One vectorised test on the common path; the slow diagnosis runs only on failure.
    if (arr >= 0).all():
        return
    if np.isnan(arr).any():
        raise ProblemError(f"{where}: cost contains NaN")
    if np.isneginf(arr).any():
        raise ProblemError(f"{where}: cost contains -inf (only +inf, meaning forbidden, is allowed)")
    raise ProblemError(f"{where}: cost contains a negative value ({arr.min():g}); costs are times, >= 0")


def _check_matrix(edge: tuple, value: Any, shape: tuple[int, int]) -> np.ndarray:
    try:
        mat = np.array(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ProblemError(f"edge {edge!r}: cost is not numeric ({exc})") from None
    if mat.shape != shape:
        raise ProblemError(
            f"edge {edge!r}: cost matrix has shape {mat.shape}, expected {shape} "
            f"(choices of {edge[0]!r} x choices of {edge[1]!r})"
        )
    _check_values(mat, f"edge {edge!r}")
    return mat


@dataclass(frozen=True, eq=False)
class Problem:
    """A validated, index-based PBQP instance: what every solver receives.

    Node ``i`` is ``nodes[i]`` with cost vector ``node_costs[i]`` (length ``K_i``). Edges are
    stored once per unordered node pair ``(i, j)`` with ``i < j`` and a ``(K_i, K_j)``
    matrix; parallel and opposite edges of the input graph are summed into it.

    Build one with :meth:`from_graph`; solvers use :meth:`edge`, :meth:`neighbors` and
    :meth:`evaluate`.

    Example:
        >>> import networkx as nx
        >>> p = Problem.from_graph(nx.path_graph(2), {"nodes": {0: [1, 2], 1: [3, 1]},
        ...                                           "edges": {(0, 1): [[0, 5], [5, 0]]}})
        >>> p.sizes, p.evaluate([0, 0])
        ([2, 2], 4.0)
    """

    nodes: tuple[Hashable, ...]
    node_costs: tuple[np.ndarray, ...]
    edges: dict[tuple[int, int], np.ndarray]
    labels: tuple[Sequence[Any] | None, ...]
    #: For messages: the original node pair of each internal edge.
    edge_names: dict[tuple[int, int], tuple[Hashable, Hashable]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        adjacency: list[list[int]] = [[] for _ in self.nodes]
        for i, j in self.edges:
            adjacency[i].append(j)
            adjacency[j].append(i)
        object.__setattr__(self, "_adjacency", adjacency)
        object.__setattr__(self, "index", {n: i for i, n in enumerate(self.nodes)})

    # --- construction -------------------------------------------------------------------

    @classmethod
    def from_graph(cls, graph: nx.Graph, costs: Costs | Mapping | None = None) -> Problem:
        """Validate ``graph`` and ``costs`` (see :func:`layoutopt.solve`) into a Problem.

        Raises:
            ProblemError: naming the node or edge at fault.
        """
        if not isinstance(graph, nx.Graph):
            raise ProblemError(f"graph must be a networkx Graph or DiGraph, not {type(graph).__name__}")
        given = _as_costs(costs, graph)
        nodes = tuple(graph.nodes)
        index = {n: i for i, n in enumerate(nodes)}
        node_costs = []
        labels = []
        for n in nodes:
            if n not in given.nodes:
                raise ProblemError(f"node {n!r} has no cost vector")
            vec = _check_vector(n, given.nodes[n])
            node_costs.append(vec)
            choices = graph.nodes[n].get("choices")
            if choices is not None:
                if isinstance(choices, (str, bytes)) or not isinstance(choices, Iterable):
                    raise ProblemError(f"node {n!r}: 'choices' must be a list of labels")
                choices = list(choices)
                if len(choices) != vec.size:
                    raise ProblemError(
                        f"node {n!r}: {len(choices)} choice labels but {vec.size} costs"
                    )
            labels.append(choices)
        if len(given.nodes) != len(nodes):
            extra = next(n for n in given.nodes if n not in index)
            raise ProblemError(f"cost given for node {extra!r}, which is not in the graph")

        edges: dict[tuple[int, int], np.ndarray] = {}
        edge_names: dict[tuple[int, int], tuple[Hashable, Hashable]] = {}
        used: set = set()
        multigraph = graph.is_multigraph()
        directed = graph.is_directed()
        graph_edges = graph.edges(keys=True) if multigraph else graph.edges()
        for edge in graph_edges:
            u, v = edge[0], edge[1]
            if u == v:
                raise ProblemError(f"edge {(u, v)!r} is a self-loop; put such costs on the node instead")
            key, transpose = cls._find_edge_cost(given.edges, edge, graph, multigraph, directed)
            used.add(key)
            shape = (node_costs[index[u]].size, node_costs[index[v]].size)
            if transpose:
                mat = _check_matrix(key, given.edges[key], shape[::-1]).T
            else:
                mat = _check_matrix(key, given.edges[key], shape)
            i, j = index[u], index[v]
            if i > j:
                i, j, mat = j, i, mat.T
            if (i, j) in edges:
                edges[(i, j)] = edges[(i, j)] + mat
            else:
                edges[(i, j)] = np.ascontiguousarray(mat)
                edge_names[(i, j)] = (u, v)
        if len(used) != len(given.edges):
            extra = next(k for k in given.edges if k not in used)
            raise ProblemError(f"cost given for edge {extra!r}, which is not in the graph")
        for mat in edges.values():
            mat.flags.writeable = False
        return cls(nodes, tuple(node_costs), edges, tuple(labels), edge_names)

    @staticmethod
    def _find_edge_cost(given: Mapping, edge: tuple, graph: nx.Graph, multigraph: bool, directed: bool):
        """Return the key of ``given`` holding this edge's matrix, and whether it is transposed."""
        u, v = edge[0], edge[1]
        if multigraph:
            if edge in given:
                return edge, False
            if graph.number_of_edges(u, v) > 1 and (u, v) in given:
                raise ProblemError(
                    f"edge {(u, v)!r} has parallel edges: give each one's cost as (u, v, key) "
                    f"or as the 'cost' attribute"
                )
        if (u, v) in given:
            return (u, v), False
        # (v, u) belongs to the reverse edge when the graph is directed and has one.
        if (v, u) in given and not (directed and graph.has_edge(v, u)):
            return (v, u), True
        raise ProblemError(f"edge {(u, v)!r} has no cost matrix")

    # --- queries ---------------------------------------------------------------------------

    @property
    def sizes(self) -> list[int]:
        """Number of choices of each node."""
        return [c.size for c in self.node_costs]

    def __len__(self) -> int:
        return len(self.nodes)

    def neighbors(self, i: int) -> list[int]:
        """Indices of the nodes sharing an edge with node ``i``."""
        return self._adjacency[i]  # type: ignore[attr-defined]

    def edge(self, i: int, j: int) -> np.ndarray:
        """The ``(K_i, K_j)`` cost matrix between nodes ``i`` and ``j`` (transposed view if ``i > j``)."""
        return self.edges[(i, j)] if i < j else self.edges[(j, i)].T

    def node_name(self, i: int) -> Hashable:
        return self.nodes[i]

    def evaluate(self, assignment: Sequence[int]) -> float:
        """Total cost of an index assignment (a sequence of choice indices, one per node)."""
        total = math.fsum(float(self.node_costs[i][k]) for i, k in enumerate(assignment))
        total += math.fsum(float(m[assignment[i], assignment[j]]) for (i, j), m in self.edges.items())
        return total

    def infeasibility_culprit(self) -> str | None:
        """A cheap certificate of infeasibility, or None.

        Names a node whose choices are all forbidden, or an edge that forbids every pair
        of its endpoints' allowed choices.
        """
        # One reduction per node and edge on the common path (no inf anywhere): this runs on
        # every solve, and fancy indexing per edge cost more than the solve on small graphs.
        allowed: list[np.ndarray | None] = []  # None: every choice allowed
        for i, c in enumerate(self.node_costs):
            if math.isfinite(c.max()):
                allowed.append(None)
            elif math.isfinite(c.min()):
                allowed.append(np.isfinite(c))
            else:
                return f"node {self.nodes[i]!r} has no allowed choice (all costs are inf)"
        for (i, j), m in self.edges.items():
            if math.isfinite(m.min()) and allowed[i] is None and allowed[j] is None:
                continue
            rows = slice(None) if allowed[i] is None else allowed[i]
            cols = slice(None) if allowed[j] is None else allowed[j]
            if not np.isfinite(m[rows][:, cols]).any():
                u, v = self.edge_names[(i, j)]
                return (
                    f"edge {(u, v)!r} forbids every pair of the allowed choices of "
                    f"{u!r} and {v!r}"
                )
        return None

    def assignment_from(self, assignment: Mapping[Hashable, Any]) -> list[int]:
        """Turn a node -> index (or label) mapping into an index list, validating it."""
        result = []
        for i, n in enumerate(self.nodes):
            if n not in assignment:
                raise ProblemError(f"assignment has no choice for node {n!r}")
            choice = assignment[n]
            k = self._choice_index(i, choice)
            result.append(k)
        if len(assignment) != len(self.nodes):
            extra = next(n for n in assignment if n not in self.index)  # type: ignore[attr-defined]
            raise ProblemError(f"assignment names node {extra!r}, which is not in the graph")
        return result

    def _choice_index(self, i: int, choice: Any) -> int:
        size = self.node_costs[i].size
        if isinstance(choice, (int, np.integer)) and not isinstance(choice, bool):
            if 0 <= choice < size:
                return int(choice)
            raise ProblemError(f"node {self.nodes[i]!r}: choice {choice} out of range 0..{size - 1}")
        labels = self.labels[i]
        if labels is not None and choice in labels:
            return labels.index(choice)
        raise ProblemError(f"node {self.nodes[i]!r}: {choice!r} is neither a choice index nor a label")

    def label(self, i: int, k: int) -> Any:
        labels = self.labels[i]
        return labels[k] if labels is not None else k


def evaluate(graph: nx.Graph, costs: Costs | Mapping | None, assignment: Mapping[Hashable, Any]) -> float:
    """Objective of any assignment (node -> choice index, or label) in float64.

    Example:
        >>> import networkx as nx
        >>> evaluate(nx.path_graph(2), {"nodes": {0: [1, 2], 1: [3, 1]},
        ...                            "edges": {(0, 1): [[0, 5], [5, 0]]}}, {0: 1, 1: 1})
        3.0
    """
    problem = Problem.from_graph(graph, costs)
    return problem.evaluate(problem.assignment_from(assignment))

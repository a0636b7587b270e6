"""The problem model: a graph with a cost vector per node and a cost matrix per edge.

User input (a networkx graph plus a cost mapping) is validated once, here, into an
index-based :class:`Problem` that every solver receives. Solvers never see raw input.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import networkx as nx
import numpy as np

from ._gc import paused_gc
from .errors import ProblemError

__all__ = ["MAX_COST_TOTAL", "Costs", "Problem", "evaluate", "format_bytes", "parse_bytes", "sum_down"]


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
        parts = {"nodes": costs.nodes, "edges": costs.edges}
    elif isinstance(costs, Mapping):
        unknown = set(costs) - {"nodes", "edges"}
        if unknown:
            raise ProblemError(
                f"costs has unknown keys {sorted(map(str, unknown))}; expected 'nodes' and 'edges'"
            )
        parts = {"nodes": costs.get("nodes", {}), "edges": costs.get("edges", {})}
    else:
        parts = None
    if parts is not None:
        for part, value in parts.items():
            if not isinstance(value, Mapping):
                raise ProblemError(
                    f"costs {part!r} must be a mapping from {part[:-1]} to its costs, "
                    f"not {type(value).__name__}"
                )
        return costs if isinstance(costs, Costs) else Costs(dict(parts["nodes"]), dict(parts["edges"]))
    raise ProblemError(
        f"costs must be a layoutopt.Costs, a mapping {{'nodes': ..., 'edges': ...}} or None, "
        f"not {type(costs).__name__}"
    )


_FLOAT64 = np.dtype(np.float64)


def _refuse_complex(value: Any, kind: str, name: Hashable) -> None:
    dtype = getattr(value, "dtype", None)
    if dtype is not None and dtype.kind == "c":  # numpy would drop the imaginary part with a warning
        raise ProblemError(f"{kind} {name!r}: cost is complex ({dtype}); costs are real numbers")


def _as_vector(node: Hashable, value: Any) -> np.ndarray:
    """``value`` as a 1-D float64 array (no copy when it already is one); values checked later."""
    if type(value) is np.ndarray and value.dtype is _FLOAT64 and value.ndim == 1 and value.size:
        return value  # the common case, without the conversion machinery
    _refuse_complex(value, "node", node)
    try:
        vec = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ProblemError(f"node {node!r}: cost is not numeric ({exc})") from None
    if vec.ndim != 1:
        raise ProblemError(f"node {node!r}: cost must be a 1-D vector, got shape {vec.shape}")
    if vec.size == 0:
        raise ProblemError(f"node {node!r}: cost vector is empty (a node needs at least one choice)")
    return vec


def _check_values(arr: np.ndarray, where: str) -> None:
    # One vectorised test on the common path; the slow diagnosis runs only on failure.
    if arr.min() > -math.inf:  # False for NaN too
        return
    if np.isnan(arr).any():
        raise ProblemError(f"{where}: cost contains NaN")
    raise ProblemError(f"{where}: cost contains -inf (only +inf, meaning forbidden, is allowed)")


#: Largest allowed sum, over every node and edge, of its largest finite cost in absolute value:
#: every objective then stays finite in float64, and so does every difference of two costs of one
#: table (which the solvers form when they normalise a table by its least entry).
MAX_COST_TOTAL = sys.float_info.max / 2


def _as_matrix(edge: tuple, value: Any, shape: tuple[int, int]) -> np.ndarray:
    """``value`` as a float64 matrix of ``shape`` (no copy when it already is one); values checked later."""
    if type(value) is np.ndarray and value.dtype is _FLOAT64 and value.shape == shape:
        return value  # the common case, without the conversion machinery
    _refuse_complex(value, "edge", edge)
    try:
        mat = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ProblemError(f"edge {edge!r}: cost is not numeric ({exc})") from None
    if mat.shape != shape:
        raise ProblemError(
            f"edge {edge!r}: cost matrix has shape {mat.shape}, expected {shape} "
            f"(choices of {edge[0]!r} x choices of {edge[1]!r})"
        )
    return mat


@dataclass(frozen=True)
class _Packed:
    """Every cost array of a Problem in one flat read-only buffer per kind, with per-array extremes.

    Validation, the infeasibility check and :meth:`Problem.evaluate` then run a handful of
    vectorised operations instead of a few numpy calls per node and per edge.
    """

    node_flat: np.ndarray
    node_start: np.ndarray  # node i's costs are node_flat[node_start[i]:node_start[i] + K_i]
    node_size: np.ndarray
    node_min: np.ndarray
    node_max: np.ndarray
    edge_flat: np.ndarray
    edge_start: np.ndarray  # aligned with the order of Problem.edges
    edge_min: np.ndarray
    edge_max: np.ndarray
    edge_i: np.ndarray
    edge_j: np.ndarray
    edge_cols: np.ndarray  # K_j of each edge


def _pack(node_costs: Sequence[np.ndarray], edge_i: np.ndarray, edge_j: np.ndarray,
          matrices: Sequence[np.ndarray]) -> _Packed:
    """Pack the node vectors and the ``(edge_i[e], edge_j[e])`` matrices (``(K_i, K_j)`` each)."""
    sizes = np.fromiter((c.size for c in node_costs), dtype=np.int64, count=len(node_costs))
    # copies (the caller's arrays are never shared); ravel: C order, and 3x faster than axis=None
    node_flat, edge_flat = (np.concatenate([a.ravel() for a in arrays]) if len(arrays) else np.zeros(0)
                            for arrays in (node_costs, matrices))
    return _pack_flat(node_flat, sizes, edge_flat, edge_i, edge_j)


def _pack_flat(node_flat: np.ndarray, node_size: np.ndarray, edge_flat: np.ndarray, edge_i: np.ndarray,
               edge_j: np.ndarray) -> _Packed:
    """The packing of costs already flat (``node_flat``: each node's ``node_size`` entries in turn;
    ``edge_flat``: each edge's matrix in C order, in turn); the buffers become read-only."""

    def spans(flat: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, ...]:
        start = np.zeros(sizes.size, dtype=np.int64)
        np.cumsum(sizes[:-1], out=start[1:])
        flat.flags.writeable = False
        if not sizes.size:
            return start, np.zeros(0), np.zeros(0)
        # minimum propagates NaN, so one comparison of the minima finds NaN and -inf
        return start, np.minimum.reduceat(flat, start), np.maximum.reduceat(flat, start)

    node_start, node_min, node_max = spans(node_flat, node_size)
    edge_start, edge_min, edge_max = spans(edge_flat, node_size[edge_i] * node_size[edge_j])
    return _Packed(node_flat, node_start, node_size, node_min, node_max, edge_flat, edge_start, edge_min,
                   edge_max, edge_i, edge_j, node_size[edge_j])


def _merge_parallel(first: np.ndarray, second: np.ndarray, matrices: list[np.ndarray],
                    names: np.ndarray, keys: list[tuple]) -> tuple:
    """Sum the matrices of edges joining the same node pair (parallel or opposite edges), checking
    each before summing; each pair keeps the place, name (orientation flag) and key of its first edge."""
    merged: dict[tuple[int, int], list] = {}
    pairs = zip(first.tolist(), second.tolist(), strict=True)
    for pair, mat, name, key in zip(pairs, matrices, names.tolist(), keys, strict=True):
        entry = merged.get(pair)
        if entry is None:
            merged[pair] = [mat, name, key]
            continue
        _check_values(mat, f"edge {key!r}")
        _check_values(entry[0], f"edge {entry[2]!r}")
        with np.errstate(over="ignore"):
            total = entry[0] + mat
        if (np.isinf(total) & np.isfinite(mat) & np.isfinite(entry[0])).any():
            raise ProblemError(f"edge {key!r}: its cost plus that of edge {entry[2]!r} "
                               f"(the same node pair) overflows float64")
        entry[0] = total
    pairs = np.array(list(merged), dtype=np.int64).reshape(-1, 2)
    mats, names, keys = (list(column) for column in zip(*merged.values(), strict=True))
    return pairs[:, 0].copy(), pairs[:, 1].copy(), mats, np.array(names, dtype=bool), keys


def sum_down(values: Sequence[float]) -> float:
    """The sum of ``values`` rounded down to a float: never above the exact sum (a certified bound).

    Example:
        >>> sum_down([0.1, 0.2]) <= 0.30000000000000004, sum_down([1.0, 2.0])
        (True, 3.0)
    """
    values = list(values)
    total = math.fsum(values)  # correctly rounded, so at most half an ulp away, either way
    if math.isfinite(total) and math.fsum([*values, -total]) < 0:  # the exact residual's sign
        total = math.nextafter(total, -math.inf)
    return total


def _magnitudes(flat: np.ndarray, start: np.ndarray) -> np.ndarray:
    """The largest finite absolute value of each packed array (0 if none)."""
    if not start.size:
        return np.zeros(0)
    magnitude = np.abs(flat)
    magnitude[~(magnitude < math.inf)] = 0.0  # inf (forbidden) and NaN (refused anyway) count as 0
    return np.maximum.reduceat(magnitude, start)


def _check_total(packed: _Packed, nodes: Sequence[Hashable], edge_keys: Sequence[tuple]) -> None:
    """Refuse finite costs so large that an objective could overflow (see :data:`MAX_COST_TOTAL`)."""
    # Settled at once in the usual case: the largest finite |cost| times the number of arrays.
    count = packed.node_start.size + packed.edge_start.size
    largest = max((float(np.max(np.abs(flat), where=flat < math.inf, initial=0.0))
                   for flat in (packed.node_flat, packed.edge_flat)), default=0.0)
    if largest * count <= MAX_COST_TOTAL:
        return
    with np.errstate(over="ignore"):  # inf is a fine answer here
        running = np.cumsum(np.concatenate([_magnitudes(packed.node_flat, packed.node_start),
                                            _magnitudes(packed.edge_flat, packed.edge_start)]))
    if not running.size or running[-1] <= MAX_COST_TOTAL:
        return
    first = int(np.argmax(running > MAX_COST_TOTAL))
    where = f"node {nodes[first]!r}" if first < len(nodes) else f"edge {edge_keys[first - len(nodes)]!r}"
    raise ProblemError(
        f"{where}: the costs are too large: the largest finite costs of the nodes and edges up to this "
        f"one add up to more than {MAX_COST_TOTAL:.3g}, so an objective could overflow float64 "
        f"(use inf, not a huge number, to forbid a choice)"
    )


class _Lazy(Mapping):
    """A dict made on first use by ``factory``: :meth:`Problem.from_graph` hands out the edge
    matrices (views of the packed buffer) and their names this way, since a large graph has tens of
    thousands and ``pbqp``, ``dp`` and ``auto`` read the packed buffer instead."""

    __slots__ = ("_dict", "_factory", "_length")

    def __init__(self, factory: Callable[[], dict], length: int) -> None:
        self._factory, self._length, self._dict = factory, length, None

    @property
    def _made(self) -> dict:
        if self._dict is None:
            self._dict, self._factory = self._factory(), None
        return self._dict

    def __getitem__(self, key):
        return self._made[key]

    def __iter__(self):
        return iter(self._made)

    def __len__(self) -> int:
        return self._length

    def __contains__(self, key) -> bool:
        return key in self._made

    def keys(self):
        return self._made.keys()

    def values(self):
        return self._made.values()

    def items(self):
        return self._made.items()

    def get(self, key, default=None):
        return self._made.get(key, default)

    def __repr__(self) -> str:
        return repr(self._made)

    def __reduce__(self):
        return dict, (self._made,)


def format_bytes(size: float) -> str:
    """A memory figure for messages: megabytes (10**6 bytes), with the exact bytes beside them.

    Example:
        >>> format_bytes(41_234_567), format_bytes(3)
        ('41.23 MB (41234567 bytes)', '3e-06 MB (3 bytes)')
    """
    exact = f"{size:.0f}" if float(size).is_integer() else f"{size:.17g}"
    return f"{size / 1e6:.4g} MB ({exact} bytes)"


#: the units :func:`parse_bytes` reads (decimal kB, MB, GB as :func:`format_bytes` prints them; binary KiB...)
_BYTE_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
               "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_bytes(text: str | float) -> float:
    """A memory size as a number of bytes: ``"40MB"``, ``"40 MB"``, ``"1.5GiB"``, ``"4e7"`` or a number.
    kB, MB and GB are decimal (as :func:`format_bytes` prints them), KiB, MiB and GiB binary; the
    unit's case does not matter. ProblemError for anything else, or a negative or non-finite size.

    Example:
        >>> parse_bytes("40MB"), parse_bytes("1.5 GiB"), parse_bytes("512"), parse_bytes(2e6)
        (40000000.0, 1610612736.0, 512.0, 2000000.0)
        >>> parse_bytes("40 MiBs")
        Traceback (most recent call last):
        ...
        layoutopt.errors.ProblemError: memory size '40 MiBs': expected a number of bytes with an optional \
unit (B, kB, MB, GB, TB, KiB, MiB, GiB, TiB), e.g. 40MB
    """
    import re

    if isinstance(text, (int, float)) and not isinstance(text, bool):
        size = float(text)
    else:
        found = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*", str(text))
        unit = found and _BYTE_UNITS.get(found.group(2).lower())
        if not unit:
            raise ProblemError(f"memory size {text!r}: expected a number of bytes with an optional unit (B, "
                               "kB, MB, GB, TB, KiB, MiB, GiB, TiB), e.g. 40MB")
        size = float(found.group(1)) * unit
    if not math.isfinite(size) or size < 0:
        raise ProblemError(f"memory size {text!r}: must be a finite number of bytes, 0 or more")
    return size


def _as_memory(memory: Mapping | None, graph: nx.Graph, nodes: Sequence[Hashable],
               sizes: Sequence[int]) -> np.ndarray | None:
    """The memory figures of every choice, flat like the packed node costs (None: no figures at all).

    ``memory`` is ``{"nodes": {node: [bytes per choice]}}``; None reads the ``"memory"`` node attribute
    where a node has one. A node given no figure holds 0 bytes in every choice. Each figure is a
    non-negative finite number; a vector has one per choice.
    """
    if memory is None:
        given = {n: d["memory"] for n, d in graph.nodes(data=True) if "memory" in d}
        if not given:
            return None
    else:
        if not isinstance(memory, Mapping) or set(memory) - {"nodes"}:
            found = sorted(map(str, memory)) if isinstance(memory, Mapping) else type(memory).__name__
            raise ProblemError(f"memory must be a mapping {{'nodes': {{node: [bytes per choice]}}}}, "
                               f"not {found}")
        given = memory.get("nodes", {})
        if not isinstance(given, Mapping):
            raise ProblemError(f"memory 'nodes' must be a mapping from node to its bytes per choice, "
                               f"not {type(given).__name__}")
    index = {n: i for i, n in enumerate(nodes)}
    for n in given:
        if n not in index:
            raise ProblemError(f"memory given for node {n!r}, which is not in the graph")
    starts = np.zeros(len(sizes), dtype=np.int64)
    if len(sizes) > 1:
        np.cumsum(sizes[:-1], out=starts[1:])
    flat = np.zeros(int(sum(sizes)), dtype=np.float64)
    for n, value in given.items():
        i = index[n]
        dtype = getattr(value, "dtype", None)
        if dtype is not None and dtype.kind == "c":
            raise ProblemError(f"node {n!r}: memory is complex ({dtype}); memory figures are bytes")
        try:
            vec = np.asarray(value, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise ProblemError(f"node {n!r}: memory is not numeric ({exc})") from None
        if vec.shape != (sizes[i],):
            raise ProblemError(f"node {n!r}: memory has shape {vec.shape}, expected ({sizes[i]},) "
                               f"(one figure per choice, like its costs)")
        if vec.size and not (vec >= 0).all():  # False for NaN too
            what = "NaN" if np.isnan(vec).any() else "a negative figure"
            raise ProblemError(f"node {n!r}: memory contains {what}; figures are bytes, >= 0")
        if vec.size and not (vec < math.inf).all():
            raise ProblemError(f"node {n!r}: memory contains inf; forbid a choice with an inf cost instead")
        flat[starts[i]:starts[i] + sizes[i]] = vec
    largest = np.maximum.reduceat(flat, starts) if flat.size else np.zeros(0)
    with np.errstate(over="ignore"):
        if not math.isfinite(float(largest.sum())) or largest.sum() > MAX_COST_TOTAL:
            raise ProblemError(f"memory: the figures are too large (the sum of every node's largest "
                               f"exceeds {MAX_COST_TOTAL:.3g})")
    flat.flags.writeable = False
    return flat


def _as_budget(budget: Any) -> float | None:
    """A ``memory_budget``: bytes (a non-negative number), or None (or ``inf``) for none."""
    if budget is None:
        return None
    if isinstance(budget, (bool, np.bool_)) or not isinstance(budget, (int, float, np.integer, np.floating)):
        raise ProblemError(f"memory_budget must be a number of bytes or None, not {budget!r}")
    if not budget >= 0:  # also NaN
        raise ProblemError(f"memory_budget must be >= 0 bytes, got {budget!r}")
    return None if budget == math.inf else float(budget)


@dataclass(frozen=True, eq=False)
class Problem:
    """A validated, index-based PBQP instance: what every solver receives.

    Node ``i`` is ``nodes[i]`` with cost vector ``node_costs[i]`` (length ``K_i``). Edges are
    stored once per unordered node pair ``(i, j)`` with ``i < j`` and a ``(K_i, K_j)``
    matrix; parallel and opposite edges of the input graph are summed into it.

    Build one with :meth:`from_graph`; solvers use :meth:`edge`, :meth:`neighbors` and
    :meth:`evaluate`.

    A problem may carry a **memory figure** per choice (``node_memory[i]``, bytes, same length as
    ``node_costs[i]``) and a ``memory_budget``: the chosen choices' figures must then add up to at most
    the budget (:meth:`memory_of`, :meth:`fits`). :meth:`with_memory_budget` gives the same problem
    under another budget without validating its costs again.

    Example:
        >>> import networkx as nx
        >>> p = Problem.from_graph(nx.path_graph(2), {"nodes": {0: [1, 2], 1: [3, 1]},
        ...                                           "edges": {(0, 1): [[0, 5], [5, 0]]}})
        >>> p.sizes, p.evaluate([0, 0])
        ([2, 2], 4.0)
    """

    nodes: tuple[Hashable, ...]
    node_costs: tuple[np.ndarray, ...]
    edges: Mapping[tuple[int, int], np.ndarray]
    labels: tuple[Sequence[Any] | None, ...]
    #: For messages: the original node pair of each internal edge.
    edge_names: Mapping[tuple[int, int], tuple[Hashable, Hashable]] = field(default_factory=dict)
    #: Bytes of each choice, laid out like the packed node costs (each node's figures in turn); None
    #: when the problem has no memory figures (every choice then holds 0 bytes).
    memory_flat: np.ndarray | None = None
    #: The most bytes the chosen choices may hold together; None: no budget.
    memory_budget: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "index", {n: i for i, n in enumerate(self.nodes)})

    @cached_property
    def _adjacency(self) -> list[list[int]]:
        """Each node's neighbours, in the order of :attr:`edges` (built on first use)."""
        adjacency: list[list[int]] = [[] for _ in self.nodes]
        for i, j in self.edges:
            adjacency[i].append(j)
            adjacency[j].append(i)
        return adjacency

    @property
    def _packing(self) -> _Packed:
        """The flat copy of the costs (made by :meth:`from_graph`, else on first use)."""
        packed = self.__dict__.get("_packed")
        if packed is None:
            pairs = np.array(list(self.edges), dtype=np.int64).reshape(-1, 2)
            packed = _pack(self.node_costs, pairs[:, 0].copy(), pairs[:, 1].copy(), list(self.edges.values()))
            object.__setattr__(self, "_packed", packed)
        return packed

    # --- construction -------------------------------------------------------------------

    @classmethod
    def from_graph(cls, graph: nx.Graph, costs: Costs | Mapping | None = None, memory: Mapping | None = None,
                   memory_budget: float | None = None) -> Problem:
        """Validate ``graph``, ``costs``, ``memory`` and ``memory_budget`` (see :func:`layoutopt.solve`)
        into a Problem.

        Raises:
            ProblemError: naming the node or edge at fault.

        Example:
            >>> p = Problem.from_graph(nx.path_graph(2), {"nodes": {0: [1, 2], 1: [3, 1]},
            ...                                           "edges": {(0, 1): [[0, 5], [5, 0]]}},
            ...                        memory={"nodes": {0: [100, 40]}}, memory_budget=50)
            >>> p.node_memory[0].tolist(), p.node_memory[1].tolist(), p.fits([1, 0]), p.fits([0, 0])
            ([100.0, 40.0], [0.0, 0.0], True, False)
        """
        with paused_gc():
            problem = cls._validate(graph, costs)
            budget = _as_budget(graph.graph.get("memory_budget") if memory_budget is None else memory_budget)
            flat = _as_memory(memory, graph, problem.nodes, problem.sizes)
            if flat is None and budget is not None:
                raise ProblemError("memory_budget given without memory figures (memory={'nodes': {node: "
                                   "[bytes per choice]}} or the nodes' 'memory' attribute)")
            if flat is not None:
                object.__setattr__(problem, "memory_flat", flat)
                object.__setattr__(problem, "memory_budget", budget)
            return problem

    def with_memory_budget(self, memory_budget: float | None) -> Problem:
        """The same problem (costs, memory figures) under another budget (None: no budget).

        Example:
            >>> p = Problem.from_graph(nx.empty_graph(2), {"nodes": {0: [1, 2], 1: [3, 1]}, "edges": {}},
            ...                        memory={"nodes": {0: [100, 40]}})
            >>> p.memory_budget, p.with_memory_budget(60).memory_budget
            (None, 60.0)
        """
        budget = _as_budget(memory_budget)
        if self.memory_flat is None and budget is not None:
            raise ProblemError("memory_budget given for a problem without memory figures")
        problem = Problem(self.nodes, self.node_costs, self.edges, self.labels, self.edge_names,
                          self.memory_flat, budget)
        object.__setattr__(problem, "_packed", self._packing)
        if "_smallest" in self.__dict__:  # the least memory does not depend on the budget
            object.__setattr__(problem, "_smallest", self.__dict__["_smallest"])
        return problem

    @classmethod
    def _validate(cls, graph: nx.Graph, costs: Costs | Mapping | None) -> Problem:
        if not isinstance(graph, nx.Graph):
            raise ProblemError(f"graph must be a networkx Graph or DiGraph, not {type(graph).__name__}")
        given = _as_costs(costs, graph)
        nodes = tuple(graph.nodes)
        index = {n: i for i, n in enumerate(nodes)}
        given_nodes = given.nodes
        for n in (n for n in nodes if n not in given_nodes):
            raise ProblemError(f"node {n!r} has no cost vector")
        vectors = [_as_vector(n, given_nodes[n]) for n in nodes]
        labels = [data.get("choices") for _, data in graph.nodes(data=True)]
        for p, choices in enumerate(labels):
            if choices is None:
                continue
            n, size = nodes[p], vectors[p].size
            if isinstance(choices, (str, bytes)) or not isinstance(choices, Iterable):
                raise ProblemError(f"node {n!r}: 'choices' must be a list of labels")
            labels[p] = choices = list(choices)
            if len(choices) != size:
                raise ProblemError(f"node {n!r}: {len(choices)} choice labels but {size} costs")
        if len(given_nodes) != len(nodes):
            extra = next(n for n in given_nodes if n not in index)
            raise ProblemError(f"cost given for node {extra!r}, which is not in the graph")

        # Per-edge work in comprehensions, and a call only for what the common case (a float64
        # matrix of the right shape under the edge's own name) does not cover: this loop is most
        # of the time of validating a large graph.
        multigraph = graph.is_multigraph()
        directed = graph.is_directed()
        graph_edges = list(graph.edges(keys=True) if multigraph else graph.edges())
        loop = next(nx.selfloop_edges(graph), None)
        if loop is not None:
            raise ProblemError(f"edge {loop!r} is a self-loop; put such costs on the node instead")
        given_edges = given.edges
        keys = ([None] * len(graph_edges) if multigraph
                else [e if e in given_edges else None for e in graph_edges])
        searched = [p for p, key in enumerate(keys) if key is None]
        transposed = []
        for p in searched:
            keys[p], mirror = cls._find_edge_cost(given_edges, graph_edges[p], graph, multigraph, directed)
            if mirror:
                transposed.append(p)
        # keys found under the edge's own name are distinct: only a search can find a key twice
        if (len(set(keys)) if searched else len(keys)) != len(given_edges):
            cls._refuse_unused_edge_costs(given_edges, set(keys), graph, directed)
        firsts = [index[e[0]] for e in graph_edges]
        seconds = [index[e[1]] for e in graph_edges]
        sizes = [vec.size for vec in vectors]
        shapes = [(sizes[i], sizes[j]) for i, j in zip(firsts, seconds, strict=True)]
        for p in transposed:
            shapes[p] = shapes[p][::-1]
        mats = [_as_matrix(key, given_edges[key], shape) for key, shape in zip(keys, shapes, strict=True)]
        pairs_i = np.array(firsts, dtype=np.int64)
        pairs_j = np.array(seconds, dtype=np.int64)
        flip = pairs_i > pairs_j  # stored as (i, j) with i < j, transposed where needed
        flip[transposed] ^= True
        for p in np.flatnonzero(flip).tolist():
            mats[p] = mats[p].T
        named_backwards = pairs_i > pairs_j  # the graph names the edge (u, v) with u after v
        pairs_i, pairs_j = np.minimum(pairs_i, pairs_j), np.maximum(pairs_i, pairs_j)
        codes = np.sort(pairs_i * len(nodes) + pairs_j)  # a pair given twice: parallel or opposite edges
        if (codes[1:] == codes[:-1]).any():
            pairs_i, pairs_j, mats, named_backwards, keys = _merge_parallel(
                pairs_i, pairs_j, mats, named_backwards, keys)

        # Copy everything into two flat read-only buffers (the user's arrays are never shared,
        # so never mutated) and check all values with a few vectorised reductions.
        packed = _pack(vectors, pairs_i, pairs_j, mats)
        bad = np.flatnonzero(~(packed.node_min > -math.inf))
        if bad.size:
            _check_values(vectors[bad[0]], f"node {nodes[bad[0]]!r}")
        bad = np.flatnonzero(~(packed.edge_min > -math.inf))
        if bad.size:
            _check_values(mats[bad[0]], f"edge {keys[bad[0]]!r}")
        _check_total(packed, nodes, keys)
        return cls._on_packing(nodes, tuple(labels), packed, named_backwards)

    @classmethod
    def _on_packing(cls, nodes: tuple[Hashable, ...], labels: tuple, packed: _Packed,
                    named_backwards: np.ndarray) -> Problem:
        """A problem over ``packed`` (costs checked already; its edges in ``(i, j)`` order, ``i < j``):
        the node vectors are views of it, the edge matrices and names made on first use.
        ``named_backwards[e]``: edge ``e`` is named ``(nodes[j], nodes[i])`` in messages."""
        sizes = packed.node_size.tolist()
        flat, start = packed.node_flat, packed.node_start.tolist()
        node_costs = tuple(flat[s:s + n] for s, n in zip(start, sizes, strict=True))
        # The lazy mappings below keep arrays only: a list of tuples would outlive this call and
        # be scanned by every later garbage collection.
        pairs_i, pairs_j = packed.edge_i, packed.edge_j

        def views() -> dict[tuple[int, int], np.ndarray]:
            flat, start, cols = packed.edge_flat, packed.edge_start.tolist(), packed.edge_cols.tolist()
            pairs = zip(pairs_i.tolist(), pairs_j.tolist(), strict=True)
            return {(i, j): flat[s:s + sizes[i] * c].reshape(sizes[i], c)
                    for s, (i, j), c in zip(start, pairs, cols, strict=True)}

        def edge_names() -> dict[tuple[int, int], tuple[Hashable, Hashable]]:
            ends = zip(pairs_i.tolist(), pairs_j.tolist(), named_backwards.tolist(), strict=True)
            return {(i, j): (nodes[j], nodes[i]) if backwards else (nodes[i], nodes[j])
                    for i, j, backwards in ends}

        count = pairs_i.size
        problem = cls(nodes, node_costs, _Lazy(views, count), labels, _Lazy(edge_names, count))
        object.__setattr__(problem, "_packed", packed)
        return problem

    @staticmethod
    def _refuse_unused_edge_costs(given: Mapping, used: set, graph: nx.Graph, directed: bool) -> None:
        """Raise for the first cost given for no edge of the graph."""
        extra = next(k for k in given if k not in used)
        if isinstance(extra, tuple) and len(extra) in (2, 3):
            mirror = (extra[1], extra[0], *extra[2:])
            if mirror in used and graph.has_edge(*extra[:2]) and not directed:
                raise ProblemError(
                    f"edge {mirror!r} is given twice, as {mirror!r} and as {extra!r}; an undirected "
                    f"edge takes one matrix (give {extra!r} only in a directed graph)"
                )
        raise ProblemError(f"cost given for edge {extra!r}, which is not in the graph")

    @staticmethod
    def _find_edge_cost(given: Mapping, edge: tuple, graph: nx.Graph, multigraph: bool, directed: bool):
        """Return the key of ``given`` holding this edge's matrix, and whether it is transposed."""
        u, v = edge[0], edge[1]
        if multigraph:
            if edge in given:
                return edge, False
            mirror = (v, u, edge[2])  # the same key given the other way round
            if mirror in given and not (directed and graph.has_edge(*mirror)):
                return mirror, True
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

    @property
    def entries(self) -> int:
        """Number of cost entries, node vectors and edge matrices together (what a model build reads).

        Example:
            >>> Problem.from_graph(nx.path_graph(2), {"nodes": {0: [1, 2], 1: [3, 4, 5]},
            ...                                       "edges": {(0, 1): np.zeros((2, 3))}}).entries
            11
        """
        packed = self._packing
        return int(packed.node_flat.size + packed.edge_flat.size)

    def __len__(self) -> int:
        return len(self.nodes)

    @property
    def node_memory(self) -> tuple[np.ndarray, ...]:
        """Bytes of each choice of each node (zeros for a problem without memory figures)."""
        packed = self._packing
        flat = self.memory_flat if self.memory_flat is not None else np.zeros(packed.node_flat.size)
        return tuple(flat[s:s + k] for s, k in zip(packed.node_start.tolist(), packed.node_size.tolist(),
                                                    strict=True))

    def memory_of(self, assignment: Sequence[int]) -> float:
        """Bytes the choices of an index assignment hold together (0.0 without memory figures).

        Example:
            >>> p = Problem.from_graph(nx.empty_graph(2), {"nodes": {0: [1, 2], 1: [3, 1]}, "edges": {}},
            ...                        memory={"nodes": {0: [100, 40], 1: [1, 2]}})
            >>> p.memory_of([0, 1])
            102.0
        """
        if self.memory_flat is None:
            return 0.0
        packed = self._packing
        choice = np.asarray(assignment, dtype=np.int64)
        return math.fsum(self.memory_flat[packed.node_start + choice].tolist())

    def fits(self, assignment: Sequence[int]) -> bool:
        """Whether an assignment keeps within the memory budget (always, without one)."""
        return self.memory_budget is None or self.memory_of(assignment) <= self.memory_budget

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
        packed = self._packing
        choice = np.asarray(assignment, dtype=np.int64)
        if choice.shape != (len(self.nodes),) or not (
            (choice >= 0).all() and (choice < packed.node_size).all()
        ):
            raise ValueError(f"not {len(self.nodes)} in-range choice indices: {assignment!r}")
        return math.fsum(self._terms(choice).tolist())  # exactly rounded, whatever the order

    def _terms(self, choice: np.ndarray) -> np.ndarray:
        """The cost of each node and each edge at ``choice`` (already checked)."""
        packed = self._packing
        nodes = packed.node_flat[packed.node_start + choice]
        if not packed.edge_i.size:
            return nodes
        flat_index = packed.edge_start + choice[packed.edge_i] * packed.edge_cols + choice[packed.edge_j]
        return np.concatenate([nodes, packed.edge_flat[flat_index]])

    def magnitude(self, assignment: Sequence[int]) -> float:
        """The scale of the arithmetic behind an objective and its bound: the sum, over the nodes and
        edges, of the larger of ``|cost at the assignment|`` and ``|least cost|``.

        For non-negative costs it is the objective itself. The optimality tolerance is relative to it,
        so that it does not depend on the unit of the costs.

        Example:
            >>> import networkx as nx
            >>> p = Problem.from_graph(nx.path_graph(2), {"nodes": {0: [1, -2], 1: [3, 1]},
            ...                                           "edges": {(0, 1): [[0, 5], [5, 0]]}})
            >>> p.evaluate([0, 0]), p.magnitude([0, 0])  # 1 + 3 + 0, but node 0's least cost is -2
            (4.0, 5.0)
        """
        packed = self._packing
        least = np.concatenate([packed.node_min, packed.edge_min])
        least = np.abs(np.where(least < math.inf, least, 0.0))
        terms = np.abs(self._terms(np.asarray(assignment, dtype=np.int64)))
        return math.fsum(np.maximum(terms, least).tolist())

    def trivial_lower_bound(self) -> float:
        """The sum of every node's and edge's least cost: a bound on the optimum with no search
        (``inf`` when a node or edge forbids everything).

        Example:
            >>> import networkx as nx
            >>> p = Problem.from_graph(nx.path_graph(2), {"nodes": {0: [1, -2], 1: [3, 1]},
            ...                                           "edges": {(0, 1): [[0, 5], [5, 0]]}})
            >>> p.trivial_lower_bound()
            -1.0
        """
        packed = self._packing
        least = np.concatenate([packed.node_min, packed.edge_min])
        if (least == math.inf).any():
            return math.inf
        return sum_down(least.tolist())

    def infeasibility_culprit(self) -> str | None:
        """A cheap certificate of infeasibility, or None.

        Names a node whose choices are all forbidden, or an edge that forbids every pair
        of its endpoints' allowed choices.
        """
        # Runs on every solve: the per-array extremes, computed once, settle every node and
        # edge without an inf (most of them); only edges with an inf next to a node with a
        # forbidden choice need a closer look.
        packed = self._packing
        dead = np.flatnonzero(packed.node_min == math.inf)
        if dead.size:
            return f"node {self.nodes[dead[0]]!r} has no allowed choice (all costs are inf)"
        partial = packed.node_max == math.inf
        suspects = np.flatnonzero(
            (packed.edge_min == math.inf)
            | ((packed.edge_max == math.inf) & (partial[packed.edge_i] | partial[packed.edge_j]))
        )
        if not suspects.size:
            return None
        # An edge can only forbid every allowed pair if it has at least that many inf entries.
        allowed = np.add.reduceat(packed.node_flat < math.inf, packed.node_start, dtype=np.int64)
        forbidden = np.add.reduceat(packed.edge_flat == math.inf, packed.edge_start, dtype=np.int64)
        suspects = suspects[forbidden[suspects]
                            >= allowed[packed.edge_i[suspects]] * allowed[packed.edge_j[suspects]]]
        if not suspects.size:
            return None
        # min over (k, l) of C[k, l] + c_i[k] + c_j[l] for every suspect edge, in bulk: inf exactly
        # where every allowed pair of allowed choices is forbidden
        first, second = packed.edge_i[suspects], packed.edge_j[suspects]
        cols = packed.edge_cols[suspects]
        sizes = packed.node_size[first] * cols
        ends = np.cumsum(sizes)
        edge_of = np.repeat(np.arange(suspects.size), sizes)
        offset = np.arange(ends[-1]) - np.repeat(ends - sizes, sizes)
        joint = (packed.edge_flat[packed.edge_start[suspects][edge_of] + offset]
                 + packed.node_flat[packed.node_start[first][edge_of] + offset // cols[edge_of]]
                 + packed.node_flat[packed.node_start[second][edge_of] + offset % cols[edge_of]])
        dead = np.flatnonzero(np.minimum.reduceat(joint, ends - sizes) == math.inf)
        if not dead.size:
            return None
        i, j = int(first[dead[0]]), int(second[dead[0]])
        u, v = self.edge_names[(i, j)]
        return f"edge {(u, v)!r} forbids every pair of the allowed choices of {u!r} and {v!r}"

    def assignment_from(self, assignment: Mapping[Hashable, Any]) -> list[int]:
        """Turn a node -> index (or label) mapping into an index list, validating it."""
        if not isinstance(assignment, Mapping):
            raise ProblemError(
                f"an assignment must be a mapping node -> choice index (or label), not "
                f"{type(assignment).__name__} (a Solution's .assignment is one)"
            )
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

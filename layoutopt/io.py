"""Problem files: a documented JSON format, and exports for outside solvers.

**The JSON problem format** (``write_json`` / ``read_json``; version 1)::

    {
      "format": "layoutopt-problem",
      "version": 1,
      "metadata": {"family": "resnet", "seed": 0},        # optional, any JSON object
      "nodes": [
        {"id": "conv_0", "costs": [1200.0, "inf"],          # one entry per choice
         "labels": ["NCHW8c", "NCHW16c"],                   # optional, as long as costs
         "attrs": {"op": "conv"}},                          # optional, any JSON object
        ...
      ],
      "edges": [
        {"source": "conv_0", "target": "pool_1",
         "costs": [[0.0, 510.5], ["inf", 0.0]]},            # len(source costs) rows
        ...
      ]
    }

- A cost is a JSON number or the string ``"inf"`` (forbidden); ``NaN``, negative numbers
  and the bare ``Infinity`` token are rejected. Floats are written with Python's shortest
  round-trip ``repr``, so costs are read back bit for bit.
- Node ids are JSON strings or integers (not booleans); ``read_json`` gives back the same
  type, so ``"3"`` and ``3`` stay distinct. Other ids (tuples...) are refused on write.
- Labels are JSON scalars: strings, integers, finite floats, booleans or null.
- ``attrs`` keeps the node attributes that are JSON-serialisable (others are skipped on
  write); ``metadata`` defaults to the JSON-serialisable entries of ``graph.graph``.
- Edges keep their direction; one entry per node pair (parallel or opposite edges of the
  written graph are summed, which does not change any objective).

**Integer exports** for outside solvers, written from the same instance:

- :func:`write_wcsp`: toulbar2's ``.wcsp`` (costs are integers; ``+inf`` becomes the upper
  bound ``UB``, toulbar2's "forbidden").
- :func:`write_uai`: the UAI ``MARKOV`` format for MAP solvers (potentials
  ``exp(-(cost - m) / T)`` per factor, with ``m`` the factor's least finite cost; 0 for
  ``+inf``; the MAP assignment is the least-cost one).

Both return their scaling so solutions map back; see each function.

Example:
    >>> import tempfile, os, layoutopt
    >>> from layoutopt.generators import generate
    >>> graph, costs = generate("resnet", nodes=30, max_choices=4)
    >>> path = os.path.join(tempfile.mkdtemp(), "resnet30.json")
    >>> write_json(path, graph, costs)
    >>> graph2, costs2 = read_json(path)
    >>> sol = layoutopt.solve(graph2, costs2, method="pbqp")
    >>> sol.objective == layoutopt.evaluate(graph, costs, sol.assignment)
    True
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Hashable, Mapping
from typing import Any

import networkx as nx
import numpy as np

from .errors import ProblemError
from .problem import Costs, Problem

__all__ = ["FORMAT", "VERSION", "read_json", "write_json", "write_uai", "write_wcsp"]

FORMAT = "layoutopt-problem"
VERSION = 1
_INF = "inf"
_MAX_INT_COST = 2**53  # integer formats stay exact in float64 and int64 below this


def _as_problem(graph: nx.Graph | Problem, costs: Costs | Mapping | None) -> Problem:
    if isinstance(graph, Problem):
        if costs is not None:
            raise ProblemError("pass either a Problem, or a graph with its costs, not a Problem and costs")
        return graph
    return Problem.from_graph(graph, costs)


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return False
    return True


def _encode_costs(values: np.ndarray) -> list:
    return [_INF if math.isinf(x) else float(x) for x in values.tolist()]


def _check_id(node: Hashable) -> Hashable:
    if isinstance(node, bool) or not isinstance(node, (str, int, np.integer)):
        raise ProblemError(
            f"node {node!r}: the JSON format supports string or integer node ids, not {type(node).__name__}"
        )
    return int(node) if isinstance(node, np.integer) else node


def _check_label(node: Hashable, label: Any) -> Any:
    if isinstance(label, np.generic):
        label = label.item()
    if label is None or isinstance(label, (str, bool, int)):
        return label
    if isinstance(label, float) and math.isfinite(label):
        return label
    raise ProblemError(
        f"node {node!r}: label {label!r} is not a JSON scalar (string, integer, finite float, bool, null)"
    )


def write_json(
    path: str | os.PathLike,
    graph: nx.Graph | Problem,
    costs: Costs | Mapping | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> None:
    """Write an instance to a JSON problem file (format in the module docstring).

    Args:
        path: the file to write.
        graph: a networkx graph (validated with ``costs`` as :func:`layoutopt.solve` does)
            or a :class:`~layoutopt.Problem`.
        costs: as for :func:`layoutopt.solve`; None with a Problem.
        metadata: a JSON object stored under ``"metadata"``; defaults to the
            JSON-serialisable entries of ``graph.graph``.

    Raises:
        ProblemError: invalid costs, or ids, labels or metadata JSON cannot hold exactly.

    Example:
        >>> import networkx as nx, tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "tiny.json")
        >>> write_json(path, nx.DiGraph([("a", "b")]), {"nodes": {"a": [1.0, float("inf")], "b": [2.5]},
        ...                                              "edges": {("a", "b"): [[0.0], [1.0]]}})
        >>> read_json(path)[1].nodes["a"]
        array([ 1., inf])
    """
    problem = _as_problem(graph, costs)
    node_attrs: dict[Hashable, dict] = {}
    if metadata is None:
        metadata = {}
        if isinstance(graph, nx.Graph):
            metadata = {str(k): v for k, v in graph.graph.items() if _jsonable(v)}
    if not _jsonable(metadata) or not isinstance(metadata, Mapping):
        raise ProblemError("metadata must be a JSON-serialisable mapping")
    if isinstance(graph, nx.Graph):
        for n, data in graph.nodes(data=True):
            attrs = {str(k): v for k, v in data.items() if k not in ("choices", "cost") and _jsonable(v)}
            if attrs:
                node_attrs[n] = attrs

    nodes = []
    for i, n in enumerate(problem.nodes):
        entry: dict[str, Any] = {"id": _check_id(n), "costs": _encode_costs(problem.node_costs[i])}
        if problem.labels[i] is not None:
            entry["labels"] = [_check_label(n, label) for label in problem.labels[i]]
        if n in node_attrs:
            entry["attrs"] = node_attrs[n]
        nodes.append(entry)
    edges = []
    for u, v in problem.edge_names.values():
        oriented = problem.edge(problem.index[u], problem.index[v])  # type: ignore[attr-defined]
        edges.append({"source": _check_id(u), "target": _check_id(v),
                      "costs": [_encode_costs(row) for row in oriented]})
    document = {"format": FORMAT, "version": VERSION, "metadata": dict(metadata),
                "nodes": nodes, "edges": edges}
    text = json.dumps(document, allow_nan=False, separators=(",", ":"))
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.write("\n")


def _decode_cost(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a cost")
    if isinstance(value, (int, float)):
        return float(value)
    if value in ("inf", "+inf"):
        return math.inf
    raise ValueError(f"{value!r} is not a number or 'inf'")


def _reject_constant(token: str) -> Any:
    raise ValueError(f"bare {token} is not allowed; write infinity as the string \"inf\"")


def read_json(path: str | os.PathLike) -> tuple[nx.DiGraph, Costs]:
    """Read a JSON problem file into ``(graph, costs)`` ready for :func:`layoutopt.solve`.

    Labels come back as the ``"choices"`` node attribute, ``attrs`` as node attributes and
    ``metadata`` as ``graph.graph``; costs as float64 numpy arrays.

    Raises:
        ProblemError: naming the file and the entry at fault (bad JSON, a missing field, a
            non-numeric cost, a wrong shape, an unknown node...).

    Example:
        >>> import tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "bad.json")
        >>> with open(path, "w") as f:
        ...     _ = f.write('{"format": "layoutopt-problem", "version": 1, '
        ...                 '"nodes": [{"id": "a"}], "edges": []}')
        >>> read_json(path)
        Traceback (most recent call last):
        ...
        layoutopt.errors.ProblemError: .../bad.json: nodes[0] (id 'a'): missing "costs"
    """
    name = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as handle:
            document = json.load(handle, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno}, column {exc.colno}"
        raise ProblemError(f"{name}: not valid JSON ({where}: {exc.msg})") from None
    except ValueError as exc:
        raise ProblemError(f"{name}: {exc}") from None
    except OSError as exc:
        raise ProblemError(f"{name}: cannot read the problem file ({exc.strerror or exc})") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise ProblemError(f"{name}: not a layoutopt problem file (expected \"format\": \"{FORMAT}\")")
    if document.get("version") != VERSION:
        raise ProblemError(f"{name}: unsupported version {document.get('version')!r} (this reads {VERSION})")
    for key in ("nodes", "edges"):
        if not isinstance(document.get(key), list):
            raise ProblemError(f"{name}: \"{key}\" must be a list")
    metadata = document.get("metadata", {})
    if not isinstance(metadata, dict):
        raise ProblemError(f"{name}: \"metadata\" must be an object")

    graph = nx.DiGraph(**metadata)
    node_costs: dict[Hashable, np.ndarray] = {}
    for k, entry in enumerate(document["nodes"]):
        where = f"{name}: nodes[{k}]"
        if not isinstance(entry, dict) or "id" not in entry:
            raise ProblemError(f"{where}: must be an object with an \"id\"")
        node = entry["id"]
        if isinstance(node, bool) or not isinstance(node, (str, int)):
            raise ProblemError(f"{where}: id {node!r} must be a string or an integer")
        where = f"{where} (id {node!r})"
        if node in node_costs:
            raise ProblemError(f"{where}: duplicate node id")
        if "costs" not in entry:
            raise ProblemError(f"{where}: missing \"costs\"")
        try:
            if not isinstance(entry["costs"], list):
                raise ValueError("must be a list")
            node_costs[node] = np.array([_decode_cost(x) for x in entry["costs"]], dtype=np.float64)
        except ValueError as exc:
            raise ProblemError(f"{where}: costs: {exc}") from None
        attrs = entry.get("attrs", {})
        if not isinstance(attrs, dict):
            raise ProblemError(f"{where}: \"attrs\" must be an object")
        graph.add_node(node, **attrs)
        if "labels" in entry:
            if not isinstance(entry["labels"], list):
                raise ProblemError(f"{where}: \"labels\" must be a list")
            graph.nodes[node]["choices"] = entry["labels"]

    edge_costs: dict[tuple, np.ndarray] = {}
    for k, entry in enumerate(document["edges"]):
        where = f"{name}: edges[{k}]"
        if not isinstance(entry, dict) or not {"source", "target", "costs"} <= set(entry):
            raise ProblemError(f"{where}: must be an object with \"source\", \"target\" and \"costs\"")
        u, v = entry["source"], entry["target"]
        where = f"{where} ({u!r} -> {v!r})"
        for end in (u, v):
            if isinstance(end, bool) or not isinstance(end, (str, int)) or end not in node_costs:
                raise ProblemError(f"{where}: {end!r} is not a node id of the file")
        if (u, v) in edge_costs or (v, u) in edge_costs:
            raise ProblemError(f"{where}: duplicate edge (give one entry per node pair)")
        rows = entry["costs"]
        try:
            if not isinstance(rows, list) or not all(isinstance(r, list) for r in rows):
                raise ValueError("must be a list of rows")
            if len({len(r) for r in rows}) > 1:
                raise ValueError("rows have different lengths")
            matrix = np.array([[_decode_cost(x) for x in r] for r in rows], dtype=np.float64)
        except ValueError as exc:
            raise ProblemError(f"{where}: costs: {exc}") from None
        graph.add_edge(u, v)
        edge_costs[(u, v)] = matrix.reshape(len(rows), len(rows[0]) if rows else 0)
    costs = Costs(node_costs, edge_costs)
    try:
        Problem.from_graph(graph, costs)  # the model's own checks: shapes, NaN, negatives, labels
    except ProblemError as exc:
        raise ProblemError(f"{name}: {exc}") from None
    return graph, costs


# --- integer exports ------------------------------------------------------------------------


def _finite_values(problem: Problem):
    for vec in problem.node_costs:
        yield vec[np.isfinite(vec)]
    for mat in problem.edges.values():
        yield mat[np.isfinite(mat)]


def _integer_scale(problem: Problem, scale: float | None) -> tuple[float, int]:
    """The cost multiplier and the scaled upper bound (sum of every factor's largest finite cost + 1)."""
    worst = math.fsum(float(v.max()) if v.size else 0.0 for v in _finite_values(problem))
    if scale is None:
        integral = all(np.array_equal(v, np.round(v)) for v in _finite_values(problem))
        scale = 1.0
        if not integral:  # the most decimal digits that keep every scaled sum exact
            while scale < 1e9 and (worst + 1) * scale * 10 < _MAX_INT_COST:
                scale *= 10
    if not scale > 0 or not math.isfinite(scale):
        raise ProblemError(f"scale must be a positive finite number, got {scale!r}")
    upper = round(worst * scale) + len(problem.node_costs) + len(problem.edges) + 1
    if upper >= _MAX_INT_COST:
        raise ProblemError(f"scale {scale:g} makes the scaled costs reach {upper:.3g}, beyond 2^53; lower it")
    return scale, upper


def _scaled(values: np.ndarray, scale: float, upper: int) -> np.ndarray:
    out = np.full(values.shape, upper, dtype=np.int64)
    finite = np.isfinite(values)
    out[finite] = np.round(values[finite] * scale).astype(np.int64)
    return out


def write_wcsp(
    path: str | os.PathLike,
    graph: nx.Graph | Problem,
    costs: Costs | Mapping | None = None,
    scale: float | None = None,
) -> dict[str, Any]:
    """Export an instance to toulbar2's ``.wcsp`` format (one variable per node, in order).

    Costs become the integers ``round(cost * scale)``; ``+inf`` becomes the upper bound
    ``UB`` (forbidden for toulbar2). With ``scale=None`` the scale is 1 when every finite
    cost is an integer (exact; the generators' nanosecond costs are), else the largest
    power of ten (at most 1e9) keeping every sum below 2**53: an objective read back as
    ``wcsp_cost / scale`` is then off by at most ``0.5 / scale`` per node and edge.

    Returns:
        ``{"scale": s, "upper_bound": UB, "variables": [node, ...]}``; the value of
        variable ``i`` is the choice index of ``variables[i]``.

    Example:
        >>> import networkx as nx, tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "tiny.wcsp")
        >>> write_wcsp(path, nx.path_graph(2), {"nodes": {0: [1, 2], 1: [3, 1]},
        ...                                     "edges": {(0, 1): [[0, 5], [5, float("inf")]]}})
        {'scale': 1.0, 'upper_bound': 14, 'variables': [0, 1]}
    """
    problem = _as_problem(graph, costs)
    scale, upper = _integer_scale(problem, scale)
    sizes = problem.sizes
    lines = [f"layoutopt {len(sizes)} {max(sizes, default=1)} {len(sizes) + len(problem.edges)} {upper}",
             " ".join(map(str, sizes))]
    for i, vec in enumerate(problem.node_costs):
        values = _scaled(vec, scale, upper)
        entries = [f"{k} {c}" for k, c in enumerate(values.tolist()) if c]
        lines.append(f"1 {i} 0 {len(entries)}")
        lines.extend(entries)
    for (i, j), mat in problem.edges.items():
        values = _scaled(mat, scale, upper)
        rows, cols = np.nonzero(values)
        lines.append(f"2 {i} {j} 0 {rows.size}")
        entries = zip(rows.tolist(), cols.tolist(), values[rows, cols].tolist(), strict=True)
        lines.extend(f"{a} {b} {c}" for a, b, c in entries)
    with open(path, "w", encoding="ascii") as handle:
        handle.write("\n".join(lines))
        handle.write("\n")
    return {"scale": scale, "upper_bound": upper, "variables": list(problem.nodes)}


def write_uai(
    path: str | os.PathLike,
    graph: nx.Graph | Problem,
    costs: Costs | Mapping | None = None,
    temperature: float | None = None,
) -> dict[str, Any]:
    """Export an instance to the UAI ``MARKOV`` format, for MAP (most probable explanation) solvers.

    Each node and edge is a factor with potentials ``exp(-(cost - m) / T)``, where ``m``
    is the factor's least finite cost, and ``0`` for ``+inf``. Maximising the product of
    potentials minimises the sum of costs, and ``cost(x) = offset - T * ln(prod(x))`` with
    ``offset`` the sum of the ``m``. With ``temperature=None``, ``T`` is the largest spread
    of finite costs within a factor divided by 700, so every allowed entry stays a normal
    float (>= e^-700) and no allowed pair underflows to "forbidden". Values are written
    with 17 significant digits.

    Returns:
        ``{"temperature": T, "offset": offset, "variables": [node, ...]}``.

    Example:
        >>> import networkx as nx, tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "tiny.uai")
        >>> info = write_uai(path, nx.path_graph(2), {"nodes": {0: [1, 2], 1: [3, 1]},
        ...                                           "edges": {(0, 1): [[0, 7], [7, 0]]}})
        >>> info["offset"], info["variables"]
        (2.0, [0, 1])
    """
    problem = _as_problem(graph, costs)
    factors: list[tuple[tuple[int, ...], np.ndarray]] = [
        ((i,), vec) for i, vec in enumerate(problem.node_costs)
    ]
    factors += [((i, j), mat) for (i, j), mat in problem.edges.items()]
    spread = 0.0
    offset = 0.0
    lows = []
    for _, table in factors:
        finite = table[np.isfinite(table)]
        low = float(finite.min()) if finite.size else 0.0
        lows.append(low)
        offset += low
        if finite.size:
            spread = max(spread, float(finite.max()) - low)
    if temperature is None:
        temperature = spread / 700.0 if spread > 0 else 1.0
    if not temperature > 0 or not math.isfinite(temperature):
        raise ProblemError(f"temperature must be a positive finite number, got {temperature!r}")
    lines = ["MARKOV", str(len(problem.nodes)), " ".join(map(str, problem.sizes)), str(len(factors))]
    lines.extend(f"{len(scope)} " + " ".join(map(str, scope)) for scope, _ in factors)
    for (_, table), low in zip(factors, lows, strict=True):
        with np.errstate(over="ignore"):
            potentials = np.exp(-(table.ravel() - low) / temperature)  # row-major: last variable fastest
        lines.append("")
        lines.append(str(potentials.size))
        lines.append(" ".join(f"{p:.17g}" for p in potentials.tolist()))
    with open(path, "w", encoding="ascii") as handle:
        handle.write("\n".join(lines))
        handle.write("\n")
    return {"temperature": temperature, "offset": offset, "variables": list(problem.nodes)}


# --- command line: ``layoutopt solve FILE.json`` ------------------------------------------------


def add_parser(subparsers) -> None:
    """Register ``solve`` on the ``layoutopt`` command's subparsers."""
    parser = subparsers.add_parser(
        "solve",
        help="solve a JSON problem file",
        description="Solve a layoutopt JSON problem file (format: layoutopt.io) and print the result.",
    )
    parser.add_argument("file", help="a JSON problem file")
    parser.add_argument("--method", default="auto", help="a method of layoutopt.methods() (default: auto)")
    parser.add_argument("--time-limit", type=float, metavar="S", help="wall-clock budget in seconds")
    parser.add_argument("--assignment", action="store_true", help="print the choice of every node")
    parser.add_argument("--output", metavar="OUT.json", help="write the solution as JSON")
    parser.set_defaults(run=_run_solve)


def _run_solve(args) -> int:
    import layoutopt

    graph, costs = read_json(args.file)
    solution = layoutopt.solve(graph, costs, method=args.method, time_limit=args.time_limit)
    print(f"{args.file}: {graph.number_of_nodes()} nodes, {graph.number_of_edges()} edges")
    engine = f" ({solution.stats['engine']})" if "engine" in solution.stats else ""
    print(f"method       {solution.method}{engine}")
    print(f"status       {solution.status}")
    print(f"objective    {solution.objective!r}")
    print(f"lower bound  {solution.lower_bound!r}  (gap {100 * solution.gap:.4g} %)")
    print(f"time         {solution.solve_time * 1e3:.3f} ms")
    if solution.message:
        print(f"message      {solution.message}")
    if args.assignment:
        width = max((len(str(n)) for n in solution.labels), default=0)
        for node, label in solution.labels.items():
            print(f"  {node!s:<{width}}  {label}")
    if args.output:
        document = {
            "file": os.fspath(args.file), "method": solution.method, "status": solution.status,
            "objective": _INF if math.isinf(solution.objective) else solution.objective,
            "lower_bound": _encode_costs(np.array([solution.lower_bound]))[0]
            if not math.isinf(solution.lower_bound) or solution.lower_bound > 0 else "-inf",
            "solve_time": solution.solve_time, "message": solution.message,
            "assignment": [
                {"id": n, "choice": k, "label": solution.labels[n]} for n, k in solution.assignment.items()
            ],
        }
        with open(args.output, "w", encoding="utf-8") as handle:
            json.dump(document, handle, indent=1)
            handle.write("\n")
    return 0 if solution.status != "infeasible" else 1

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

- A cost is a finite JSON number (negative ones too) or the string ``"inf"`` (forbidden);
  ``NaN``, the bare ``Infinity`` token and numbers beyond float64's range (``1e400``) are
  rejected. Floats are written with Python's shortest round-trip ``repr``, so costs are read
  back bit for bit.
- Node ids are JSON strings or integers (not booleans); ``read_json`` gives back the same
  type, so ``"3"`` and ``3`` stay distinct. Other ids (tuples...) are refused on write.
- Labels are JSON scalars: strings, integers, finite floats, booleans or null (on write and
  on read).
- ``attrs`` keeps the node attributes that are JSON-serialisable (others are skipped on
  write); ``metadata`` defaults to the JSON-serialisable entries of ``graph.graph``.
- Edges keep their direction; one entry per node pair (parallel or opposite edges of the
  written graph are summed, which does not change any objective).
- **Memory** (version 2; a file without memory figures is written as version 1): each node may have
  ``"memory": [bytes per choice]`` (non-negative finite numbers, as long as ``costs``; written for every
  node when the problem has figures) and the document a top-level ``"memory_budget"`` (bytes). They
  read back as the ``"memory"`` node attribute and ``graph.graph["memory_budget"]``, which
  :func:`layoutopt.solve` reads when not given ``memory``/``memory_budget``.

**Integer exports** for outside solvers, written from the same instance:

- :func:`write_wcsp`: toulbar2's ``.wcsp`` (costs are non-negative integers, made by the
  solvers' own scaling, :func:`layoutopt.solvers.scaling.scale_costs`; ``+inf`` becomes the
  upper bound ``UB``, toulbar2's "forbidden").
- :func:`write_uai`: the UAI ``MARKOV`` format for MAP solvers (potentials
  ``exp(-(cost - m) / T)`` per factor, with ``m`` the factor's least finite cost; 0 for
  ``+inf``; the MAP assignment is the least-cost one).

Both return their scaling so solutions map back; see each function. Neither carries a memory budget:
a problem with one is refused (the figures alone, without a budget, are left out).

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
from collections.abc import Collection, Hashable, Mapping
from typing import Any

import networkx as nx
import numpy as np

from .errors import ProblemError
from .problem import Costs, Problem, format_bytes

__all__ = ["FORMAT", "VERSION", "read_json", "write_json", "write_uai", "write_wcsp"]

FORMAT = "layoutopt-problem"
#: the version written for a problem with memory figures (one without is written as version 1, which
#: readers before memory figures read too); both are read
VERSION = 2
_VERSIONS = (1, 2)
_INF = "inf"


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
        graph: a networkx graph (validated with ``costs`` as :func:`layoutopt.solve` does, its
            ``"memory"`` node attributes and ``graph.graph["memory_budget"]`` too) or a
            :class:`~layoutopt.Problem` (with its memory figures and budget).
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
        if isinstance(graph, nx.Graph):  # the budget has its own field
            metadata = {str(k): v for k, v in graph.graph.items() if _jsonable(v) and k != "memory_budget"}
    if not _jsonable(metadata) or not isinstance(metadata, Mapping):
        raise ProblemError("metadata must be a JSON-serialisable mapping")
    if isinstance(graph, nx.Graph):
        for n, data in graph.nodes(data=True):
            attrs = {str(k): v for k, v in data.items()
                     if k not in ("choices", "cost", "memory") and _jsonable(v)}
            if attrs:
                node_attrs[n] = attrs

    memory = problem.node_memory if problem.memory_flat is not None else None
    nodes = []
    for i, n in enumerate(problem.nodes):
        entry: dict[str, Any] = {"id": _check_id(n), "costs": _encode_costs(problem.node_costs[i])}
        if problem.labels[i] is not None:
            entry["labels"] = [_check_label(n, label) for label in problem.labels[i]]
        if memory is not None:
            entry["memory"] = memory[i].tolist()
        if n in node_attrs:
            entry["attrs"] = node_attrs[n]
        nodes.append(entry)
    edges = []
    for u, v in problem.edge_names.values():
        oriented = problem.edge(problem.index[u], problem.index[v])  # type: ignore[attr-defined]
        edges.append({"source": _check_id(u), "target": _check_id(v),
                      "costs": [_encode_costs(row) for row in oriented]})
    document = {"format": FORMAT, "version": VERSION if memory is not None else 1, "metadata": dict(metadata),
                "nodes": nodes, "edges": edges}
    if problem.memory_budget is not None:
        document["memory_budget"] = problem.memory_budget
    text = json.dumps(document, allow_nan=False, separators=(",", ":"))
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.write("\n")


def _decode_cost(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a cost")
    if isinstance(value, (int, float)):
        try:
            return float(value)
        except OverflowError:  # an integer beyond float64
            raise ValueError(f"{value} is beyond the float64 range; write \"inf\" to forbid") from None
    if value in ("inf", "+inf"):
        return math.inf
    raise ValueError(f"{value!r} is not a number or 'inf'")


def _reject_constant(token: str) -> Any:
    raise ValueError(f"bare {token} is not allowed; write infinity as the string \"inf\"")


def _parse_float(token: str) -> float:
    value = float(token)
    if not math.isfinite(value):  # 1e400 would silently become inf, which means "forbidden"
        raise ValueError(f"the number {token} is beyond the float64 range; write \"inf\" to forbid")
    return value


def read_json_document(path: str | os.PathLike, format: str, version: int | Collection[int],
                       kind: str) -> dict[str, Any]:
    """A layoutopt JSON file (a problem, a solution...) read and checked against its ``"format"``
    and ``"version"`` (one, or the several a reader reads); every failure a :class:`ProblemError`
    naming the file. Bare NaN/Infinity and numbers beyond float64 are refused (``inf`` means
    forbidden: it is written as the string).

    Example:
        >>> import tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "old.json")
        >>> with open(path, "w") as f:
        ...     _ = f.write('{"format": "layoutopt-problem", "version": 0}')
        >>> read_json_document(path, "layoutopt-problem", 1, "problem")
        Traceback (most recent call last):
        ...
        layoutopt.errors.ProblemError: .../old.json: unsupported version 0 (this reads 1)
    """
    name = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as handle:
            document = json.load(handle, parse_constant=_reject_constant, parse_float=_parse_float)
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno}, column {exc.colno}"
        raise ProblemError(f"{name}: not valid JSON ({where}: {exc.msg})") from None
    except RecursionError:
        raise ProblemError(f"{name}: JSON nested too deeply to read (not a layoutopt {kind} file)") from None
    except ValueError as exc:
        raise ProblemError(f"{name}: {exc}") from None
    except OSError as exc:
        raise ProblemError(f"{name}: cannot read the {kind} file ({exc.strerror or exc})") from None
    return check_json_document(document, name, format, version, kind)


def check_json_document(document: Any, name: str, format: str, version: int | Collection[int],
                        kind: str) -> dict[str, Any]:
    """``document`` if it is a layoutopt ``kind`` document of ``format`` and ``version`` (or one of
    several); else a :class:`ProblemError` naming ``name`` (a file, or what the document is). The
    check :func:`read_json_document` makes, for documents already in memory.

    Example:
        >>> check_json_document({"format": "layoutopt-solution", "version": 1}, "the solution",
        ...                     "layoutopt-solution", 1, "solution")
        {'format': 'layoutopt-solution', 'version': 1}
    """
    if not isinstance(document, dict) or document.get("format") != format:
        raise ProblemError(f"{name}: not a layoutopt {kind} file (expected \"format\": \"{format}\")")
    versions = (version,) if isinstance(version, int) else tuple(version)
    found = document.get("version")
    if type(found) is not int or found not in versions:  # true == 1 in Python, not in a file
        reads = " or ".join(map(str, versions))
        raise ProblemError(f"{name}: unsupported version {found!r} (this reads {reads})")
    return document


def read_json(path: str | os.PathLike) -> tuple[nx.DiGraph, Costs]:
    """Read a JSON problem file into ``(graph, costs)`` ready for :func:`layoutopt.solve`.

    Labels come back as the ``"choices"`` node attribute, ``attrs`` as node attributes and
    ``metadata`` as ``graph.graph``; costs as float64 numpy arrays; memory figures as the ``"memory"``
    node attribute and the budget as ``graph.graph["memory_budget"]`` (which :func:`layoutopt.solve`
    reads).

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
    document = read_json_document(path, FORMAT, _VERSIONS, "problem")
    for key in ("nodes", "edges"):
        if not isinstance(document.get(key), list):
            raise ProblemError(f"{name}: \"{key}\" must be a list")
    metadata = document.get("metadata", {})
    if not isinstance(metadata, dict):
        raise ProblemError(f"{name}: \"metadata\" must be an object")

    graph = nx.DiGraph()
    graph.graph.update(metadata)  # as attributes only: DiGraph(**metadata) would read some keys as data
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
        if "memory" in entry:
            try:
                if not isinstance(entry["memory"], list):
                    raise ValueError("must be a list")
                graph.nodes[node]["memory"] = np.array([_decode_cost(x) for x in entry["memory"]],
                                                       dtype=np.float64)
            except ValueError as exc:
                raise ProblemError(f"{where}: memory: {exc}") from None
        if "labels" in entry:
            if not isinstance(entry["labels"], list):
                raise ProblemError(f"{where}: \"labels\" must be a list")
            try:  # what write_json refuses is refused here too
                graph.nodes[node]["choices"] = [_check_label(node, label) for label in entry["labels"]]
            except ProblemError as exc:
                raise ProblemError(f"{name}: {exc}") from None

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
    if "memory_budget" in document:
        budget = document["memory_budget"]
        if isinstance(budget, bool) or not isinstance(budget, (int, float)):
            raise ProblemError(f"{name}: \"memory_budget\" must be a number of bytes, not {budget!r}")
        graph.graph["memory_budget"] = float(budget)
    costs = Costs(node_costs, edge_costs)
    try:
        Problem.from_graph(graph, costs)  # the model's own checks: shapes, NaN, overflow, labels, memory
    except ProblemError as exc:
        raise ProblemError(f"{name}: {exc}") from None
    return graph, costs


# --- exports for outside solvers ---------------------------------------------------------------


def _refuse_budget(problem: Problem, kind: str) -> Problem:
    """``problem``, unless it has a memory budget, which the export could not carry (the figures alone,
    without a budget, change nothing and are left out)."""
    if problem.memory_budget is not None:
        raise ProblemError(f"the {kind} export cannot carry a memory budget (a global constraint); solve it "
                           f"here (method='toulbar2' posts it as a knapsack constraint), or export "
                           f"problem.with_memory_budget(None)")
    return problem


def write_wcsp(
    path: str | os.PathLike,
    graph: nx.Graph | Problem,
    costs: Costs | Mapping | None = None,
) -> dict[str, Any]:
    """Export an instance to toulbar2's ``.wcsp`` format (one variable per node, in order).

    Costs become non-negative integers by the solvers' own scaling
    (:func:`layoutopt.solvers.scaling.scale_costs`): each node's and edge's table shifted by its
    least entry, times ``scale`` (a power of two: 1 when every cost is an integer, as the
    generators' nanosecond costs are), rounded. ``+inf`` becomes the upper bound ``UB``
    (forbidden for toulbar2). An objective reads back as ``offset + wcsp_cost / scale``, off by at
    most ``rounding_error`` (0 when the scaling is exact).

    Returns:
        ``{"scale": s, "offset": o, "rounding_error": e, "upper_bound": UB, "variables": [node, ...]}``;
        the value of variable ``i`` is the choice index of ``variables[i]``.

    Example:
        >>> import networkx as nx, tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "tiny.wcsp")
        >>> write_wcsp(path, nx.path_graph(2), {"nodes": {0: [1, 2], 1: [3, -1]},
        ...                                     "edges": {(0, 1): [[0, 5], [5, float("inf")]]}})
        {'scale': 1.0, 'offset': 0.0, 'rounding_error': 0.0, 'upper_bound': 11, 'variables': [0, 1]}
    """
    from .solvers.scaling import scale_costs

    problem = _refuse_budget(_as_problem(graph, costs), ".wcsp")
    scaled = scale_costs(problem)
    tables = [*scaled.node_costs, *scaled.edges.values()]
    upper = int(math.fsum(float(t[np.isfinite(t)].max(initial=0.0)) for t in tables)) + 1
    sizes = problem.sizes
    lines = [f"layoutopt {len(sizes)} {max(sizes, default=1)} {len(sizes) + len(problem.edges)} {upper}",
             " ".join(map(str, sizes))]

    def integers(values: np.ndarray) -> np.ndarray:
        return np.where(np.isfinite(values), values, upper).astype(np.int64)

    for i, vec in enumerate(scaled.node_costs):
        values = integers(vec)
        entries = [f"{k} {c}" for k, c in enumerate(values.tolist()) if c]
        lines.append(f"1 {i} 0 {len(entries)}")
        lines.extend(entries)
    for (i, j), mat in scaled.edges.items():
        values = integers(mat)
        rows, cols = np.nonzero(values)
        lines.append(f"2 {i} {j} 0 {rows.size}")
        entries = zip(rows.tolist(), cols.tolist(), values[rows, cols].tolist(), strict=True)
        lines.extend(f"{a} {b} {c}" for a, b, c in entries)
    with open(path, "w", encoding="ascii") as handle:
        handle.write("\n".join(lines))
        handle.write("\n")
    return {"scale": scaled.scale, "offset": scaled.offset, "rounding_error": scaled.rounding_error,
            "upper_bound": upper, "variables": list(problem.nodes)}


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
    problem = _refuse_budget(_as_problem(graph, costs), "UAI")
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
    parser.add_argument("--memory-budget", type=float, metavar="BYTES",
                        help="the most bytes the chosen choices may hold together (by the file's memory "
                        "figures; overrides the file's own budget; inf: none)")
    parser.add_argument("--assignment", action="store_true", help="print the choice of every node")
    parser.add_argument("--output", metavar="OUT.json", help="write the solution as JSON")
    parser.set_defaults(run=_run_solve)


def _check_writable(path: str) -> None:
    """Refuse an output path that cannot be written, before the solve rather than after it."""
    directory = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path) or not os.path.isdir(directory) or not os.access(directory, os.W_OK):
        raise ProblemError(f"--output {path}: cannot write there (no such directory, not writable, "
                           f"or a directory)")


def _run_solve(args) -> int:
    import layoutopt

    if args.output:
        _check_writable(args.output)
    graph, costs = read_json(args.file)
    solution = layoutopt.solve(graph, costs, method=args.method, time_limit=args.time_limit,
                               memory_budget=args.memory_budget)
    print(f"{args.file}: {graph.number_of_nodes()} nodes, {graph.number_of_edges()} edges")
    engine = f" ({solution.stats['engine']})" if "engine" in solution.stats else ""
    print(f"method       {solution.method}{engine}")
    print(f"status       {solution.status}")
    print(f"objective    {solution.objective!r}")
    print(f"lower bound  {solution.lower_bound!r}  (gap {100 * solution.gap:.4g} %)")
    if solution.memory is not None:
        budget = args.memory_budget if args.memory_budget is not None else graph.graph.get("memory_budget")
        within = "" if budget is None or math.isinf(budget) else f"  (budget {format_bytes(budget)})"
        print(f"memory       {format_bytes(solution.memory)}{within}")
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
            "solve_time": solution.solve_time, "message": solution.message, "memory": solution.memory,
            "assignment": [
                {"id": n, "choice": k, "label": solution.labels[n]} for n, k in solution.assignment.items()
            ],
        }
        try:
            with open(args.output, "w", encoding="utf-8") as handle:
                json.dump(document, handle, indent=1)
                handle.write("\n")
        except OSError as exc:
            raise ProblemError(
                f"--output {args.output}: cannot write the solution ({exc.strerror or exc})") from None
    return 0 if solution.status != "infeasible" else 1

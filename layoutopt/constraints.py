"""Per-node control: pin a node to some of its choices, or forbid some, before solving.

A pin or a forbid is a statement about the costs: a forbidden choice costs ``inf``; a pinned node
costs ``inf`` in every choice but the pinned ones. :func:`constrain` returns the constrained
:class:`~layoutopt.Costs`, which any :func:`layoutopt.solve` method then respects, e.g. to keep the
output layout a downstream consumer needs, or to ban a kernel known to misbehave.

Choices are named by their labels (the graph's ``"choices"`` attribute). Labels in the grammar of
:mod:`layoutopt.labels` are read, not only compared as text: their options may come in any order
(``"NCHW16c->NCHW16c[tile=4,algorithm=winograd]"``), a single layout ``"NCHW16c"`` is
``"NCHW16c->NCHW16c"``, and a label with options in brackets (``"NCHW16c->NCHW16c[order=rows]"``) is
also matched by its layouts alone when no choice is named exactly (``"NCHW16c->NCHW16c"`` then names
every kernel in those layouts).

Example:
    >>> import networkx as nx
    >>> g = nx.DiGraph([("a", "b")])
    >>> g.nodes["a"]["choices"] = g.nodes["b"]["choices"] = ["NCHW8c", "NCHW16c"]
    >>> costs = {"nodes": {"a": [1.0, 1.5], "b": [1.0, 2.0]}, "edges": {("a", "b"): [[0, 1], [1, 0]]}}
    >>> constrained = constrain(g, costs, pin={"b": "NCHW16c"})
    >>> constrained.nodes["b"]
    [inf, 2.0]
    >>> import layoutopt
    >>> layoutopt.solve(g, constrained).labels
    {'a': 'NCHW16c', 'b': 'NCHW16c'}
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import networkx as nx

from .errors import ProblemError
from .labels import Label, parse_label
from .problem import Costs, Problem, _as_costs

__all__ = ["Constraint", "allows", "constrain", "explain_infeasible", "parse_constraint_texts",
           "parse_constraints"]



@dataclass(frozen=True)
class Constraint:
    """One pin or forbid, checked against a graph: its ``kind`` (``"pin"`` or ``"forbid"``), the
    ``node``, the ``choice`` as it was given, and the ``indices`` of the node's choices it names.

    Example:
        >>> statement = Constraint("pin", "conv1", "NCHW16c", (1, 2))
        >>> str(statement), statement.pins, statement.names(2)
        ('pin conv1=NCHW16c', True, True)
    """

    kind: Literal["pin", "forbid"]
    node: Hashable
    choice: str
    indices: tuple[int, ...]

    def __post_init__(self) -> None:
        if self.kind not in ("pin", "forbid"):
            raise ProblemError(f"constraint {self.node}={self.choice}: kind must be 'pin' or 'forbid', "
                               f"not {self.kind!r}")
        object.__setattr__(self, "indices", tuple(self.indices))

    @property
    def pins(self) -> bool:
        """True for a pin (the node keeps only the choices named), False for a forbid."""
        return self.kind == "pin"

    def names(self, index: int) -> bool:
        """Whether the choice of ``index`` is one this statement names."""
        return index in self.indices

    def __str__(self) -> str:
        return f"{self.kind} {self.node}={self.choice}"


Spec = Mapping[Hashable, str | Iterable[str]] | Iterable[str] | None


def _items(kind: str, spec: Spec) -> list[tuple[str, str]]:
    """``{node: choice or [choices]}`` or ``["NODE=CHOICE", ...]`` -> ``[(node text, choice), ...]``."""
    if spec is None:
        return []
    if isinstance(spec, str):
        spec = [spec]
    if isinstance(spec, Mapping):
        items = []
        for node, choices in spec.items():
            for choice in [choices] if isinstance(choices, str) else list(choices):
                items.append((node, str(choice)))
        return items
    items = []
    for text in spec:
        node, sep, choice = str(text).partition("=")
        if not sep or not node.strip() or not choice.strip():
            raise ProblemError(f"{kind} {text!r}: expected LAYER=CHOICE, e.g. conv1=NCHW16c->NCHW16c")
        items.append((node.strip(), choice.strip()))
    return items


def _contradiction(node: Any, pin: str, forbids: Iterable[str]) -> ProblemError:
    return ProblemError(f"pin {node}={pin} contradicts {', '.join(f'forbid {node}={f}' for f in forbids)}: "
                        f"every choice of layer {str(node)!r} the pin allows is forbidden")


def parse_constraint_texts(pin: Spec = None, forbid: Spec = None) -> list[tuple[str, str, str]]:
    """``(kind, layer, choice)`` of every pin and forbid, checked without the graph: their form, and
    a pin and a forbid naming the same choice of one layer (e.g. the command line's early checks,
    before a model is loaded; :func:`parse_constraints` checks the rest against the graph).

    Raises:
        ProblemError: a text not of the form ``LAYER=CHOICE``, or a pin contradicted by a forbid.

    Example:
        >>> parse_constraint_texts(pin=["conv1=NCHW16c"], forbid={"conv2": "NCHW8c"})
        [('pin', 'conv1', 'NCHW16c'), ('forbid', 'conv2', 'NCHW8c')]
        >>> parse_constraint_texts(pin=["conv1=NCHW16c"], forbid=["conv1=NCHW16c"])
        Traceback (most recent call last):
        ...
        layoutopt.errors.ProblemError: pin conv1=NCHW16c contradicts forbid conv1=NCHW16c: every choice ...
    """
    texts = [(kind, str(node), choice) for kind, spec in (("pin", pin), ("forbid", forbid))
             for node, choice in _items(kind, spec)]
    forbidden = {(node, choice) for kind, node, choice in texts if kind == "forbid"}
    for kind, node, choice in texts:
        if kind == "pin" and (node, choice) in forbidden:
            raise _contradiction(node, choice, [choice])
    return texts


def _node(graph: nx.Graph, kind: str, name: Any, choice: str) -> Hashable:
    if name in graph:
        return name
    by_text = {str(n): n for n in graph}
    if str(name) in by_text:
        return by_text[str(name)]
    close = difflib.get_close_matches(str(name), list(by_text), n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise ProblemError(f"{kind} {name}={choice}: the graph has no layer {str(name)!r}{hint}")


def _parsed(text: str) -> Label | None:
    """``text`` read as a label of :mod:`layoutopt.labels`; None for labels that are only names."""
    try:
        return parse_label(text)
    except ProblemError:
        return None


def _matches(labels: list[str], choice: str) -> tuple[int, ...]:
    """The indices of the labels ``choice`` names: the same text; else the same label (read in the
    grammar); else, for a choice of layouts alone, every label with those layouts."""
    exact = tuple(k for k, label in enumerate(labels) if label == choice)
    wanted = _parsed(choice)
    if exact or wanted is None:
        return exact
    parsed = [_parsed(label) for label in labels]
    same = tuple(k for k, label in enumerate(parsed) if label == wanted)
    if same or wanted.options:
        return same
    return tuple(k for k, label in enumerate(parsed) if label is not None and label.layouts == wanted.layouts)


def parse_constraints(graph: nx.Graph, pin: Spec = None, forbid: Spec = None) -> list[Constraint]:
    """Check ``pin`` and ``forbid`` against ``graph``; the statements with the choice indices they name.

    Each is ``{layer: choice}`` (or ``{layer: [choices]}``), or a list of ``"LAYER=CHOICE"`` texts as
    the command line's ``--pin``/``--forbid`` give them. Several pins of one layer allow any of their
    choices.

    Raises:
        ProblemError: before any measuring or solving: an unknown layer or choice (naming the layer's
            choices); a pin whose every choice is forbidden (a pin and a forbid of the same choice,
            or forbids covering every kernel a pin names), naming the pin and the forbids; forbids
            that leave a layer no choice at all.

    Example:
        >>> g = nx.DiGraph([("a", "b")])
        >>> g.nodes["a"]["choices"] = g.nodes["b"]["choices"] = ["NCHW8c", "NCHW16c"]
        >>> [str(s) for s in parse_constraints(g, pin=["a=NCHW16c"], forbid={"b": ["NCHW8c"]})]
        ['pin a=NCHW16c', 'forbid b=NCHW8c']
        >>> parse_constraints(g, pin=["a=NCHW16c"])[0].indices
        (1,)
    """
    statements: list[Constraint] = []
    parse_constraint_texts(pin, forbid)
    for kind, spec in (("pin", pin), ("forbid", forbid)):
        for name, choice in _items(kind, spec):
            node = _node(graph, kind, name, choice)
            labels = [str(label) for label in graph.nodes[node].get("choices", [])]
            indices = _matches(labels, choice)
            if not indices:
                raise ProblemError(f"{kind} {node}={choice}: layer {str(node)!r} has no choice {choice!r}; "
                                   f"its choices are {', '.join(labels)}")
            statements.append(Constraint(kind, node, choice, indices))
    _check_conflicts(graph, statements)
    return statements


def _check_conflicts(graph: nx.Graph, statements: list[Constraint]) -> None:
    """Refuse a pin whose every choice is forbidden, and forbids that leave a layer no choice."""
    forbids: dict[Hashable, list[Constraint]] = {}
    for statement in statements:
        if not statement.pins:
            forbids.setdefault(statement.node, []).append(statement)
    pinned = set()
    for pin in (statement for statement in statements if statement.pins):
        pinned.add(pin.node)
        against = [f for f in forbids.get(pin.node, []) if set(f.indices) & set(pin.indices)]
        if set(pin.indices) <= {k for f in against for k in f.indices}:
            raise _contradiction(pin.node, pin.choice, [f.choice for f in against])
    for node, group in forbids.items():
        banned = {k for statement in group for k in statement.indices}
        if node not in pinned and len(banned) == len(graph.nodes[node].get("choices", [])):
            named = ", ".join(map(str, group))
            raise ProblemError(f"every choice of layer {str(node)!r} is forbidden: {named}")


def constrain(graph: nx.Graph, costs: Costs | Mapping | None, pin: Spec = None, forbid: Spec = None,
              *, statements: Sequence[Constraint] | None = None) -> Costs:
    """``costs`` with the forbidden choices, and every choice of a pinned node but the pinned ones, at
    ``inf`` (new arrays: ``costs`` is left alone). See :func:`parse_constraints` for the forms.

    Example:
        >>> g = nx.DiGraph([("a", "b")])
        >>> g.nodes["a"]["choices"] = g.nodes["b"]["choices"] = ["x", "y"]
        >>> constrain(g, {"nodes": {"a": [1, 2], "b": [3, 4]}, "edges": {}}, forbid=["a=x"]).nodes["a"]
        [inf, 2.0]
    """
    costs = _as_costs(costs, graph)
    if statements is None:
        statements = parse_constraints(graph, pin, forbid)
    nodes = {node: [float(c) for c in vector] for node, vector in costs.nodes.items()}
    for node in {statement.node for statement in statements}:
        nodes[node] = [c if allows(statements, node, k) else math.inf for k, c in enumerate(nodes[node])]
    return Costs(nodes, dict(costs.edges))


def allows(statements: Sequence[Constraint], node: Hashable, index: int) -> bool:
    """Whether the pins and forbids leave ``node`` its choice ``index``: no forbid names it, and a pin
    does if the node is pinned (several pins of one node allow any of their choices).

    Example:
        >>> statements = [Constraint("pin", "a", "x", (0, 1)), Constraint("forbid", "a", "y", (1,))]
        >>> [allows(statements, "a", k) for k in range(3)], allows(statements, "b", 2)
        ([True, False, False], True)
    """
    mine = [statement for statement in statements if statement.node == node]
    if any(statement.names(index) for statement in mine if not statement.pins):
        return False
    pins = [statement for statement in mine if statement.pins]
    return not pins or any(pin.names(index) for pin in pins)


def explain_infeasible(graph: nx.Graph, costs: Costs | Mapping | None,
                       statements: Sequence[Constraint]) -> str:
    """Why the constrained problem has no feasible assignment: the first pin or forbid that, alone,
    makes it infeasible (with the node or edge it leaves without a choice), or all of them together.

    Example:
        >>> g = nx.DiGraph([("a", "b")])
        >>> g.nodes["a"]["choices"] = g.nodes["b"]["choices"] = ["x", "y"]
        >>> inf = math.inf
        >>> costs = {"nodes": {"a": [1, 1], "b": [1, 1]}, "edges": {("a", "b"): [[0, inf], [inf, 0]]}}
        >>> explain_infeasible(g, costs, parse_constraints(g, pin=["a=x", "b=y"]))
        "pin a=x with pin b=y: edge ('a', 'b') forbids every pair of the allowed choices of 'a' and 'b'"
    """
    def culprit(subset: list[Constraint]) -> str | None:
        return Problem.from_graph(graph, constrain(graph, costs, statements=subset)).infeasibility_culprit()

    for statement in statements:
        reason = culprit([statement])
        if reason:
            return f"{statement} leaves no feasible assignment: {reason}"
    by_node: dict[Hashable, list[Constraint]] = {}
    for statement in statements:
        by_node.setdefault(statement.node, []).append(statement)
    for group in by_node.values():  # every choice of one node forbidden, one statement each
        reason = culprit(group)
        if reason and len(group) > 1:
            return f"{', '.join(map(str, group))} leave no feasible assignment: {reason}"
    for i, first in enumerate(statements):  # two together (a pin against a neighbour's pin)
        for second in statements[i + 1:]:
            reason = culprit([first, second])
            if reason:
                return f"{first} with {second}: {reason}"
    return f"the pins and forbids together ({', '.join(map(str, statements))}) leave no feasible assignment"

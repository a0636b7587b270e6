"""The layout graph: the contract between extraction, measurement, the solver and the rewrite.

:func:`~layoutopt.tvm.extract_layout_graph` builds a :class:`LayoutGraph` (a ``networkx.DiGraph``):

- each node is a :class:`LayoutNode`: a Relax binding whose layout is a decision (a conv2d or dense
  *target* op, a *multi*-input op), or one that needs plain NCHW (a *boundary* op, an *input*, an
  *output*), with its :class:`Choice` list: the kernels it may run, each with the layouts it reads
  and writes;
- each edge ``P -> Q`` is a :class:`LayoutEdge`: the tensors that flow from ``P`` (through
  layout-following ops) into ``Q``, each transformed separately when the layouts differ.

The node attribute ``"choices"`` holds the choice labels, which is all :func:`layoutopt.solve` reads;
the typed records are reached through :meth:`LayoutGraph.layout_node` and
:meth:`LayoutGraph.layout_edge`. This module imports no TVM.

Example:
    >>> graph = LayoutGraph()
    >>> graph.add_layout_node(LayoutNode("conv1", "target", "conv1", "relax.nn.conv2d", {"op": "conv2d"},
    ...     (Choice({"in": "NCHW8c", "out": "NCHW16c"}), Choice({"in": "NCHW", "out": "NCHW"}))))
    >>> graph.nodes["conv1"]["choices"]
    ['NCHW8c->NCHW16c', 'NCHW->NCHW']
    >>> graph.layout_node("conv1").choices[0].out_layout
    'NCHW16c'
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import networkx as nx

from ...errors import ProblemError
from ...labels import format_label
from ..kernels.candidate import Candidate
from ..kernels.registry import with_loop_order
from ..kernels.workload import NCHW, plain_layout

__all__ = ["KINDS", "Choice", "LayoutEdge", "LayoutGraph", "LayoutNode", "Value", "candidate_label"]

#: the node kinds of a layout graph: ``target`` ops choose kernels, ``multi``-input ops a common
#: layout; ``boundary`` ops, model ``input`` and ``output`` tensors need plain NCHW
KINDS = ("target", "multi", "boundary", "input", "output")


def candidate_label(candidate: Mapping[str, Any]) -> str:
    """The label of a kernel candidate dict (:attr:`Candidate.label`, in the grammar of
    :mod:`layoutopt.labels`): ``"IN->OUT"``, then any other keys in brackets, sorted.

    Dense candidates' activation layouts (``"NC"``) are plain, written ``NCHW`` like every plain
    layout of the graph.

    Example:
        >>> candidate_label({"in": "NCHW16c", "out": "NCHW8c"})
        'NCHW16c->NCHW8c'
        >>> candidate_label({"in": "NC", "out": "NC", "weight": "NK16n"})
        'NCHW->NCHW[weight=NK16n]'
    """
    return Candidate.from_json(candidate).label


@dataclass(frozen=True)
class Choice:
    """One choice of a node: the kernel candidate it runs (a JSON-able dict, the cost-cache key:
    ``"in"``/``"out"`` layouts, and for kernels an algorithm and schedule knobs), and its label
    (default :func:`candidate_label`; a common layout's label is the layout alone)."""

    candidate: Mapping[str, Any]
    label: str = ""

    def __post_init__(self) -> None:
        if not self.label:
            object.__setattr__(self, "label", self.record.label)

    @cached_property
    def record(self) -> Candidate:
        """The candidate as a :class:`~layoutopt.tvm.kernels.candidate.Candidate` record
        (``.algorithm``, ``.in_layout``, ``.knobs``...)."""
        return Candidate.from_json(self.candidate)

    @property
    def in_layout(self) -> str:
        """The layout the node reads its inputs in (``"NC"`` written ``"NCHW"``)."""
        return plain_layout(self.record.in_layout)

    @property
    def out_layout(self) -> str:
        """The layout the node writes its output in."""
        return plain_layout(self.record.out_layout)

    @classmethod
    def layout(cls, layout: str = NCHW) -> Choice:
        """The choice of running in one ``layout`` throughout (multi-input ops, boundaries), labelled
        by the layout."""
        return cls({"in": layout, "out": layout}, format_label(layout))


@dataclass
class LayoutNode:
    """A node of the layout graph.

    Attributes:
        name: the node's key (a binding name; ``"output:<name>"`` for an output).
        kind: one of :data:`KINDS`.
        binding: the Relax binding (or parameter) it stands for.
        op: the Relax op name (``"input"``/``"output"`` for those).
        workload: a JSON-able dict: a kernel workload for target ops (see
            :mod:`layoutopt.tvm.kernels.workload`), the input shapes for other ops.
        choices: its choices, in the order of the cost vector.
    """

    name: Hashable
    kind: str
    binding: str
    op: str
    workload: dict[str, Any]
    choices: tuple[Choice, ...]

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ProblemError(f"layout node {self.name!r}: kind {self.kind!r} is not one of {KINDS}")
        self.choices = tuple(self.choices)
        if not self.choices:
            raise ProblemError(f"layout node {self.name!r} has no choices")

    @property
    def labels(self) -> list[str]:
        """The choices' labels."""
        return [choice.label for choice in self.choices]

    @property
    def layouts(self) -> list[tuple[str, str]]:
        """The ``(in, out)`` layouts of each choice."""
        return [(choice.in_layout, choice.out_layout) for choice in self.choices]

    @property
    def candidates(self) -> list[dict[str, Any]]:
        """The kernel candidate dict of each choice."""
        return [dict(choice.candidate) for choice in self.choices]

    @property
    def decides(self) -> bool:
        """Whether the rewrite applies this node's choice (target and multi-input ops)."""
        return self.kind in ("target", "multi")


@dataclass(frozen=True)
class Value:
    """One tensor flowing along an edge: the Relax value's name and its logical NCHW shape."""

    name: str
    shape: tuple[int, ...] | None


@dataclass
class LayoutEdge:
    """The tensors flowing from a producer node into a consumer (usually one)."""

    dtype: str
    values: list[Value] = field(default_factory=list)

    @property
    def shape(self) -> tuple[int, ...] | None:
        """The first tensor's logical shape."""
        return self.values[0].shape if self.values else None


class LayoutGraph(nx.DiGraph):
    """A ``networkx.DiGraph`` of :class:`LayoutNode` and :class:`LayoutEdge` records.

    Graph-level facts: :attr:`mod` (the prepared Relax module whose bindings the nodes name, for
    the rewrite) and :attr:`following` (each layout-following binding -> the node whose layout it
    runs in). Copies (``graph.copy()``, subgraphs) keep them.
    """

    def add_layout_node(self, node: LayoutNode) -> None:
        """Add ``node`` (its labels go to the ``"choices"`` attribute the solver reads)."""
        self.add_node(node.name, choices=node.labels, layout=node)

    def layout_node(self, name: Hashable) -> LayoutNode:
        """The :class:`LayoutNode` of node ``name``."""
        return self.nodes[name]["layout"]

    def layout_nodes(self) -> list[LayoutNode]:
        """Every node's record, in insertion (program) order."""
        return [data["layout"] for _, data in self.nodes(data=True)]

    def layout_edge(self, producer: Hashable, consumer: Hashable) -> LayoutEdge:
        """The :class:`LayoutEdge` from ``producer`` into ``consumer``."""
        return self.edges[producer, consumer]["layout"]

    def add_value(self, producer: Hashable, consumer: Hashable, value: Value, dtype: str) -> None:
        """Record that tensor ``value`` flows from ``producer`` into ``consumer``."""
        if not self.has_edge(producer, consumer):
            self.add_edge(producer, consumer, layout=LayoutEdge(dtype))
        self.layout_edge(producer, consumer).values.append(value)

    def replace_choices(self, name: Hashable, choices: tuple[Choice, ...]) -> None:
        """Give node ``name`` new ``choices`` (a new :class:`LayoutNode` record, so that a copy of the
        graph it was copied from keeps its own), e.g. the schedules a search found.

        Example:
            >>> graph = LayoutGraph()
            >>> graph.add_layout_node(LayoutNode("conv1", "target", "conv1", "relax.nn.conv2d", {},
            ...                                  (Choice({"in": "NCHW8c", "out": "NCHW8c"}),)))
            >>> copy = graph.copy()
            >>> copy.replace_choices("conv1", (Choice({"in": "NCHW8c", "out": "NCHW8c", "reg_n": 4}),))
            >>> copy.nodes["conv1"]["choices"], graph.nodes["conv1"]["choices"]
            (['NCHW8c->NCHW8c[reg_n=4]'], ['NCHW8c->NCHW8c'])
        """
        node = self.layout_node(name)
        self.add_layout_node(LayoutNode(node.name, node.kind, node.binding, node.op, node.workload, choices))

    def choice(self, name: Hashable, index: int) -> Choice:
        """Choice ``index`` of node ``name``."""
        return self.layout_node(name).choices[index]

    @property
    def mod(self) -> Any:
        """The prepared Relax ``IRModule`` the node names refer to (None when not extracted from one)."""
        return self.graph.get("mod")

    @mod.setter
    def mod(self, value: Any) -> None:
        self.graph["mod"] = value

    @property
    def following(self) -> dict[str, Hashable]:
        """Each layout-following binding -> the node whose layout it carries."""
        return self.graph.setdefault("following", {})

    def decisions(self, assignment: Mapping[Hashable, int], loop_order: str | None = None
                  ) -> dict[str, dict[str, Any]]:
        """``{binding: candidate}`` of the nodes whose choice the rewrite applies (target and multi-input
        ops), from an assignment of choice indices (``Solution.assignment``); with a ``loop_order``,
        each conv kernel that takes it in that parallel loop order
        (:func:`~layoutopt.tvm.kernels.with_loop_order`).

        Example:
            >>> graph = LayoutGraph()
            >>> graph.add_layout_node(LayoutNode("data", "input", "data", "input", {}, (Choice.layout(),)))
            >>> choices = (Choice({"in": "NCHW", "out": "NCHW"}), Choice({"in": "NCHW", "out": "NCHW16c"}))
            >>> graph.add_layout_node(LayoutNode("conv1", "target", "conv1", "relax.nn.conv2d", {}, choices))
            >>> graph.decisions({"data": 0, "conv1": 1})       # the input's choice is no decision
            {'conv1': {'in': 'NCHW', 'out': 'NCHW16c'}}
        """
        found = {}
        for name, index in assignment.items():
            node = self.layout_node(name)
            if node.decides:
                candidate = dict(node.choices[index].candidate)
                if loop_order is not None and node.kind == "target":
                    candidate = with_loop_order(node.workload, candidate, loop_order)
                found[node.binding] = candidate
        return found

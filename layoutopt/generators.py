"""Seeded synthetic layout-selection instances shaped like real DNN graphs.

:func:`generate` builds a graph of ``nodes`` operators of one *family* and draws its costs
from a simple performance model. The same ``(family, nodes, max_choices, seed, regime)``
gives the same instance on every machine (numpy's PCG64 generator, no Python ``hash``).

**Graph families** (every one is a DAG with a single input, built to exactly ``nodes``
operators; a short chain of 1x1 convolutions pads the tail when the family's repeating unit
does not divide the budget):

- ``"resnet"``: a 7x7 stem conv and a pool, then bottleneck blocks (1x1, 3x3, 1x1 convs and
  a residual ``add``, with a 1x1 projection conv on the first block of each stage) in four
  stages in the ratio 3:4:6:3, then a global pool. Series-parallel.
- ``"inception"``: a GoogLeNet stem, then modules of four branches (1x1; 1x1-3x3; 1x1-5x5;
  pool-1x1) joined by a ``concat``, with pools after 2/9 and 7/9 of the modules.
- ``"densenet"``: dense blocks of 6, 12, 24, 16 layers (repeating): layer ``j`` of a block
  is a ``concat`` of the block input and every earlier layer's output (in-degree ``j + 1``,
  up to 25), a 1x1 and a 3x3 conv; transitions are concat, 1x1 conv, pool. Treewidth ~25.
- ``"ssd"``: an SSD detector on a ResNet-34 backbone (basic blocks 3:4:6), extra feature
  layers, and up to six feature maps each feeding a box head and a class head; the heads
  join two multi-input ``concat`` nodes (the sources stay "live" until the concats).
- ``"random"``: a sparse random DAG; each operator takes 1 to 3 inputs among the 30 most
  recent ones (multi-input operators are concats).

**Presets** sized like the real networks (the family's structure at that size is the
real one): ``"resnet50"`` (71 nodes), ``"inception"`` (GoogLeNet, 80), ``"densenet121"``
(183) and ``"ssd"`` (SSD-ResNet-34, 67). A family name with ``nodes=None`` gives its preset.

**Choices** (node attribute ``"choices"``, one label per cost entry): a convolution picks
an (input block, output block) pair of the NCHW[x]c layout, both dividing the channel
counts, labelled ``"NCHW16c->NCHW8c"``; ``add``, ``concat`` and ``pool`` pick one block
dividing every input's channels, labelled ``"NCHW16c"``. Blocks are 1, 2, 4, ... 64. Each
node keeps a random subset of ``2..max_choices`` of its legal choices (fewer if it has
fewer).

**Costs**, in integer nanoseconds (stored as floats) so that every solver and every
integer file format sees the same problem:

- conv: ``max(flops / (100 GFLOP/s * eff(ib) * eff(ob)), bytes / (20 GB/s)) + 2 us``, where
  ``eff`` rewards vector-width blocks (16 best), times a per-layer lognormal perturbation
  of each block's efficiency (so layers disagree on the best block) and a lognormal noise
  per choice (sigma 0.1; 0.3 in ``"hard"``, 0.5 in ``"xhard"``);
- add/concat/pool: ``bytes / (20 GB/s * eff_mem(b)) + 0.5 us`` with the same perturbations;
- edge ``u -> v``: ``0`` when ``u``'s output block equals ``v``'s input block, else a layout
  transform ``(1.5 us + bytes(u's output) / 8 GB/s) * U(1, 1.7)``, times 3 in ``"hard"`` and
  10 in ``"xhard"``.

**Forbidden entries** (``+inf``): 5 % of node choices and 2 % of the nonzero transform
entries, except in regime ``"noinf"``. A hidden reference assignment (one random choice per
node, stored in ``graph.graph["reference_assignment"]`` for tests, never read by solvers)
is never forbidden, so every instance is feasible.

Example:
    >>> import layoutopt
    >>> from layoutopt.generators import generate
    >>> graph, costs = generate("resnet", nodes=40, max_choices=4, seed=1)
    >>> graph.number_of_nodes(), max(len(c) for c in costs.nodes.values()) <= 4
    (40, True)
    >>> layoutopt.solve(graph, costs, method="greedy").status in ("feasible", "infeasible")
    True
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import networkx as nx
import numpy as np

from .errors import ProblemError
from .problem import Costs

__all__ = ["FAMILIES", "PRESETS", "REGIMES", "constrain_memory", "generate", "memory_figures"]

#: family name -> nodes of its preset (the real network's size)
FAMILIES: dict[str, int] = {"resnet": 71, "inception": 80, "densenet": 183, "ssd": 67, "random": 100}
#: preset name -> (family, nodes)
PRESETS: dict[str, tuple[str, int]] = {
    "resnet50": ("resnet", 71),
    "inception": ("inception", 80),
    "googlenet": ("inception", 80),
    "densenet121": ("densenet", 183),
    "ssd": ("ssd", 67),
}


@dataclass(frozen=True)
class _Regime:
    node_sigma: float  # lognormal noise per choice
    transform_factor: float  # multiplies every layout-transform cost
    forbid_choice: float  # share of node choices set to +inf
    forbid_pair: float  # share of nonzero transform entries set to +inf


#: regime name -> its parameters
REGIMES: dict[str, _Regime] = {
    "normal": _Regime(0.1, 1.0, 0.05, 0.02),
    "hard": _Regime(0.3, 3.0, 0.05, 0.02),
    "xhard": _Regime(0.5, 10.0, 0.05, 0.02),
    "noinf": _Regime(0.1, 1.0, 0.0, 0.0),
}

_BLOCKS = (1, 2, 4, 8, 16, 32, 64)
_COMPUTE_EFF = {1: 0.25, 2: 0.4, 4: 0.6, 8: 0.85, 16: 1.0, 32: 0.95, 64: 0.85}
_MEMORY_EFF = {1: 0.55, 2: 0.7, 4: 0.85, 8: 1.0, 16: 1.0, 32: 0.95, 64: 0.9}
_PEAK_FLOPS_PER_NS = 100.0  # 100 GFLOP/s
_KERNEL_BYTES_PER_NS = 20.0  # 20 GB/s
_TRANSFORM_BYTES_PER_NS = 8.0  # 8 GB/s
_CONV_LAUNCH_NS = 2000.0
_OP_LAUNCH_NS = 500.0
_TRANSFORM_BASE_NS = 1500.0
_MIN_NODES = 2
_MAX_NODES = 200_000


# --- structure ------------------------------------------------------------------------------


@dataclass
class _Op:
    op: str  # "conv", "add", "concat" or "pool"
    inputs: list[int]
    channels: int  # output channels
    spatial: int  # output height = width
    kernel: int = 1


@dataclass
class _Builder:
    """Operators in topological order (plain lists: structures are sized by trial builds)."""

    ops: list[_Op] = field(default_factory=list)

    def add(self, op: str, inputs: list[int], channels: int, spatial: int, kernel: int = 1) -> int:
        self.ops.append(_Op(op, list(inputs), int(channels), int(spatial), kernel))
        return len(self.ops) - 1

    def conv(self, x: int, channels: int, kernel: int = 1, spatial: int | None = None) -> int:
        return self.add("conv", [x], channels, self.ops[x].spatial if spatial is None else spatial, kernel)

    def pool(self, x: int, spatial: int | None = None) -> int:
        op = self.ops[x]
        return self.add("pool", [x], op.channels, op.spatial if spatial is None else spatial)

    def join(self, op: str, inputs: list[int]) -> int:
        chans = [self.ops[i].channels for i in inputs]
        channels = chans[0] if op == "add" else sum(chans)
        return self.add(op, inputs, channels, min(self.ops[i].spatial for i in inputs))

    def stem(self, channels: int = 64) -> int:
        self.add("conv", [], channels, 112, 7)
        return self.pool(0, 56)


def _split(total: int, ratio: tuple[int, ...]) -> list[int]:
    """Split ``total`` units over stages in ``ratio`` (largest remainder; exact on multiples)."""
    weight = sum(ratio)
    exact = [total * r / weight for r in ratio]
    parts = [math.floor(x) for x in exact]
    order = sorted(range(len(ratio)), key=lambda s: (parts[s] - exact[s], s))
    for s in order[: total - sum(parts)]:
        parts[s] += 1
    return parts


def _resnet(units: int, _rng: np.random.Generator) -> _Builder:
    b = _Builder()
    x = b.stem()
    for stage, blocks in enumerate(_split(units, (3, 4, 6, 3))):
        mid, spatial = 64 << stage, 56 >> stage
        for k in range(blocks):
            c1 = b.conv(x, mid, 1, spatial)
            c2 = b.conv(c1, mid, 3)
            c3 = b.conv(c2, 4 * mid, 1)
            shortcut = b.conv(x, 4 * mid, 1, spatial) if k == 0 else x
            x = b.join("add", [c3, shortcut])
    b.pool(x, 1)
    return b


def _inception(units: int, _rng: np.random.Generator) -> _Builder:
    b = _Builder()
    x = b.stem()
    x = b.conv(x, 64, 1)
    x = b.conv(x, 192, 3)
    x = b.pool(x, 28)
    reductions = {round(units * 2 / 9), round(units * 7 / 9)} - {0, units}
    scale = 1
    for m in range(units):
        b1 = b.conv(x, 64 * scale, 1)
        b2 = b.conv(b.conv(x, 96 * scale, 1), 128 * scale, 3)
        b3 = b.conv(b.conv(x, 16 * scale, 1), 32 * scale, 5)
        b4 = b.conv(b.pool(x), 32 * scale, 1)
        x = b.join("concat", [b1, b2, b3, b4])
        if m + 1 in reductions:
            x = b.pool(x, max(b.ops[x].spatial // 2, 7))
            scale *= 2
    b.pool(x, 1)
    return b


def _densenet(units: int, _rng: np.random.Generator, growth: int = 32) -> _Builder:
    b = _Builder()
    x = b.stem()
    pattern = (6, 12, 24, 16)
    blocks = []
    while sum(blocks) < units:
        blocks.append(min(pattern[len(blocks) % 4], units - sum(blocks)))
    blocks = blocks or [0]
    for k, layers in enumerate(blocks):
        features = [x]
        for _ in range(layers):
            inp = features[0] if len(features) == 1 else b.join("concat", features)
            features.append(b.conv(b.conv(inp, 4 * growth, 1), growth, 3))
        x = b.join("concat", features) if len(features) > 1 else x
        if k + 1 < len(blocks):
            channels = max(b.ops[x].channels // 2 // growth * growth, growth)
            x = b.conv(x, channels, 1)
            x = b.pool(x, max(b.ops[x].spatial // 2, 7))
    b.pool(x, 1)
    return b


def _ssd_levels(nodes: int) -> int:
    return max(2, min(6, nodes // 11))


def _ssd(units: int, _rng: np.random.Generator, levels: int = 6) -> _Builder:
    b = _Builder()
    x = b.stem()
    for stage, blocks in enumerate(_split(units, (3, 4, 6))):
        channels, spatial = 64 << stage, 56 >> stage
        for k in range(blocks):
            c1 = b.conv(x, channels, 3, spatial)
            c2 = b.conv(c1, channels, 3)
            shortcut = b.conv(x, channels, 1, spatial) if k == 0 and stage > 0 else x
            x = b.join("add", [c2, shortcut])
    sources = [x]
    for level in range(levels - 1):
        reduced = b.conv(x, 256, 1)
        x = b.conv(reduced, 512 if level < 2 else 256, 3, max(b.ops[x].spatial // 2, 1))
        sources.append(x)
    boxes = [b.conv(s, 4 * 4, 3) for s in sources]
    classes = [b.conv(s, 4 * 81 // 3 * 3, 3) for s in sources]  # 324 = 4 anchors x 81 classes
    b.join("concat", boxes)
    b.join("concat", classes)
    return b


def _random(units: int, rng: np.random.Generator, window: int = 30) -> _Builder:
    b = _Builder()
    b.add("conv", [], 64, 56, 3)
    for i in range(1, units):
        degree = min(i, int(rng.choice((1, 2, 3), p=(0.72, 0.22, 0.06))))
        low = max(0, i - window)
        inputs = sorted(int(j) for j in rng.choice(np.arange(low, i), size=degree, replace=False))
        spatial = (56, 28, 14, 7)[min(4 * i // units, 3)]
        if degree == 1:
            b.add("conv", inputs, int(rng.choice((64, 128, 256, 512))), spatial, int(rng.choice((1, 3))))
        else:
            channels = min(sum(b.ops[j].channels for j in inputs), 2048)
            b.add("concat", inputs, channels, spatial)
    return b


_FAMILY_BUILDERS: dict[str, Callable[..., _Builder]] = {
    "resnet": _resnet,
    "inception": _inception,
    "densenet": _densenet,
    "ssd": _ssd,
    "random": _random,
}


def _build(family: str, nodes: int, rng: np.random.Generator) -> _Builder:
    """The family's structure with the most repeating units fitting ``nodes``, padded to it."""
    build = _FAMILY_BUILDERS[family]
    if family == "random":
        return build(nodes, rng)
    if family == "ssd":
        levels = _ssd_levels(nodes)
        build = lambda units, r: _ssd(units, r, levels)  # noqa: E731
    low, high = 0, nodes  # every unit adds at least one node, so `nodes` units never fit
    if len(build(low, rng).ops) > nodes:
        smallest = len(build(low, rng).ops)
        raise ProblemError(f"family {family!r} needs at least {smallest} nodes, got nodes={nodes}")
    while high - low > 1:
        mid = (low + high) // 2
        if len(build(mid, rng).ops) <= nodes:
            low = mid
        else:
            high = mid
    builder = build(low, rng)
    while len(builder.ops) < nodes:  # pad the tail with 1x1 convs
        last = len(builder.ops) - 1
        builder.conv(last, builder.ops[last].channels, 1)
    return builder


# --- costs ----------------------------------------------------------------------------------


def _blocks_dividing(*channels: int) -> list[int]:
    g = math.gcd(*channels)
    return [blk for blk in _BLOCKS if g % blk == 0]


def _choices(op: _Op, in_channels: list[int]) -> list[tuple[int, int]]:
    """Legal (input block, output block) pairs; one-block operators use (b, b)."""
    if op.op == "conv":
        ins = _blocks_dividing(*in_channels) if in_channels else [1]
        outs = _blocks_dividing(op.channels)
        return [(i, o) for i in ins for o in outs]
    return [(blk, blk) for blk in _blocks_dividing(op.channels, *in_channels)]


def _label(op: str, pair: tuple[int, int]) -> str:
    if op == "conv":
        return f"NCHW{pair[0]}c->NCHW{pair[1]}c"
    return f"NCHW{pair[0]}c"


def _node_costs(
    op: _Op, in_channels: int, in_bytes: float, pairs: list[tuple[int, int]], rng: np.random.Generator,
    sigma: float,
) -> np.ndarray:
    out_bytes = 4.0 * op.channels * op.spatial**2
    # Per-layer perturbation of each block's efficiency: layers disagree on the best block.
    perturb = {blk: float(rng.lognormal(0.0, 0.15)) for blk in _BLOCKS}
    noise = rng.lognormal(0.0, sigma, size=len(pairs))
    if op.op == "conv":
        flops = 2.0 * in_channels * op.channels * op.kernel**2 * op.spatial**2
        weight_bytes = 4.0 * in_channels * op.channels * op.kernel**2
        memory = (in_bytes + out_bytes + weight_bytes) / _KERNEL_BYTES_PER_NS
        eff = np.array([_COMPUTE_EFF[i] * perturb[i] * _COMPUTE_EFF[o] * perturb[o] for i, o in pairs])
        time = np.maximum(flops / (_PEAK_FLOPS_PER_NS * eff), memory) * noise + _CONV_LAUNCH_NS
    else:
        eff = np.array([_MEMORY_EFF[blk] * perturb[blk] for blk, _ in pairs])
        time = (in_bytes + out_bytes) / (_KERNEL_BYTES_PER_NS * eff) * noise + _OP_LAUNCH_NS
    return np.maximum(np.round(time), 1.0)


def generate(
    family: str,
    nodes: int | None = None,
    max_choices: int = 16,
    seed: int = 0,
    regime: str = "normal",
) -> tuple[nx.DiGraph, Costs]:
    """A seeded synthetic instance: a DNN-shaped graph with layout choices and their costs.

    Args:
        family: ``"resnet"``, ``"inception"``, ``"densenet"``, ``"ssd"``, ``"random"``, or a
            preset name (``"resnet50"``, ``"inception"``/``"googlenet"``, ``"densenet121"``,
            ``"ssd"``) whose size is the real network's.
        nodes: number of operators (exact); None for the family's or preset's real size.
        max_choices: most choices kept per node (at least 1; the least is ``min(2, this)``).
        seed: the instance seed; equal arguments give an identical instance.
        regime: ``"normal"``, ``"hard"`` (transforms x3, noise sigma 0.3), ``"xhard"``
            (x10, sigma 0.5) or ``"noinf"`` (no forbidden entries).

    Returns:
        ``(graph, costs)`` ready for :func:`layoutopt.solve`. Nodes carry ``"choices"``
        (labels), ``"op"``, ``"channels"`` and ``"spatial"`` (convs also ``"weight_bytes"``);
        ``graph.graph`` holds the arguments and the hidden ``"reference_assignment"``.

    Raises:
        ProblemError: an unknown family or regime, or a size or choice count out of range.

    Example:
        >>> graph, costs = generate("densenet121", seed=3)
        >>> graph.number_of_nodes(), max(d for _, d in graph.in_degree())
        (183, 25)
        >>> graph.nodes["conv_0"]["choices"][:2]
        ['NCHW1c->NCHW1c', 'NCHW1c->NCHW2c']
    """
    name = family
    if name in PRESETS and (nodes is None or name not in FAMILIES):
        family, preset_nodes = PRESETS[name]
        if nodes is not None and nodes != preset_nodes:
            raise ProblemError(
                f"preset {name!r} has {preset_nodes} nodes; use family {family!r} to resize it"
            )
        nodes = preset_nodes
    if family not in FAMILIES:
        known = ", ".join([*FAMILIES, *(p for p in PRESETS if p not in FAMILIES)])
        raise ProblemError(f"unknown family {family!r}; known: {known}")
    if regime not in REGIMES:
        raise ProblemError(f"unknown regime {regime!r}; known: {', '.join(REGIMES)}")
    nodes = FAMILIES[family] if nodes is None else nodes
    if isinstance(nodes, bool) or not isinstance(nodes, (int, np.integer)) or not (
        _MIN_NODES <= nodes <= _MAX_NODES
    ):
        raise ProblemError(f"nodes must be an integer in {_MIN_NODES}..{_MAX_NODES}, got {nodes!r}")
    if isinstance(max_choices, bool) or not isinstance(max_choices, (int, np.integer)) or max_choices < 1:
        raise ProblemError(f"max_choices must be a positive integer, got {max_choices!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ProblemError(f"seed must be a non-negative integer, got {seed!r}")
    params = REGIMES[regime]
    family_index = list(FAMILIES).index(family)
    structure_rng = np.random.default_rng([int(seed), family_index, 0])
    rng = np.random.default_rng([int(seed), family_index, 1])

    ops = _build(family, int(nodes), structure_rng).ops
    names = [f"{op.op}_{i}" for i, op in enumerate(ops)]
    graph = nx.DiGraph(
        family=family, preset=name if name in PRESETS else None, seed=int(seed), regime=regime,
        max_choices=int(max_choices),
    )
    node_costs: dict[str, np.ndarray] = {}
    pairs_of: list[list[tuple[int, int]]] = []
    reference: dict[str, int] = {}
    for i, op in enumerate(ops):
        in_channels = [ops[j].channels for j in op.inputs]
        legal = _choices(op, in_channels)
        count = min(int(rng.integers(min(2, max_choices), max_choices + 1)), len(legal))
        keep = np.sort(rng.choice(len(legal), size=count, replace=False))
        pairs = [legal[k] for k in keep]
        pairs_of.append(pairs)
        in_bytes = sum(4.0 * ops[j].channels * ops[j].spatial**2 for j in op.inputs) or 4.0 * 3 * 224**2
        cost = _node_costs(op, sum(in_channels) or 3, in_bytes, pairs, rng, params.node_sigma)
        ref = int(rng.integers(count))
        forbid = rng.random(count) < params.forbid_choice
        forbid[ref] = False
        cost[forbid] = math.inf
        node_costs[names[i]] = cost
        reference[names[i]] = ref
        graph.add_node(
            names[i], choices=[_label(op.op, p) for p in pairs], op=op.op, channels=op.channels,
            spatial=op.spatial,
        )
        if op.op == "conv":  # float32 weights: what memory_figures starts from
            graph.nodes[names[i]]["weight_bytes"] = 4 * (sum(in_channels) or 3) * op.channels * op.kernel**2

    edge_costs: dict[tuple[str, str], np.ndarray] = {}
    for v, op in enumerate(ops):
        for u in op.inputs:
            out_blocks = np.array([p[1] for p in pairs_of[u]])
            in_blocks = np.array([p[0] for p in pairs_of[v]])
            tensor_bytes = 4.0 * ops[u].channels * ops[u].spatial**2
            transform = _TRANSFORM_BASE_NS + tensor_bytes / _TRANSFORM_BYTES_PER_NS
            transform *= params.transform_factor
            scale = rng.uniform(1.0, 1.7, size=(out_blocks.size, in_blocks.size))
            mat = np.where(out_blocks[:, None] == in_blocks[None, :], 0.0, np.round(transform * scale))
            forbid = (rng.random(mat.shape) < params.forbid_pair) & (mat > 0)
            forbid[reference[names[u]], reference[names[v]]] = False
            mat[forbid] = math.inf
            graph.add_edge(names[u], names[v])
            edge_costs[(names[u], names[v])] = mat
    graph.graph["reference_assignment"] = reference
    return graph, Costs(node_costs, edge_costs)


# --- memory figures and budgets (issue 49) ---------------------------------------------------------


def _weight_bytes(data: dict) -> float:
    """A node's float32 weights: the generator's ``"weight_bytes"``, or a TVM instance's workload kernel."""
    if "weight_bytes" in data:
        return float(data["weight_bytes"])
    kernel = data.get("workload", {}).get("kernel") if isinstance(data.get("workload"), dict) else None
    return 4.0 * math.prod(kernel) if kernel else 0.0


def memory_figures(graph: nx.Graph, costs: Costs, seed: int = 0, spread: float = 3.0) -> dict:
    """Synthetic memory figures for an instance, **anti-correlated with cost** as real kernels' are
    (Winograd's faster kernels keep 1.8-7.1x the weights; blocked layouts pad, GEMMs need workspaces).

    A node with weights (a generator conv's ``"weight_bytes"``, a TVM instance's workload kernel)
    holds ``weights * (1 + spread * (slowest - cost) / (slowest - fastest))`` bytes per allowed choice:
    its fastest choice ``1 + spread`` times its weights, its slowest once, times a lognormal noise
    (sigma 0.1), rounded to whole bytes; nodes without weights hold none. Seeded: the same arguments
    give the same figures.

    Returns:
        ``{"nodes": {node: [bytes per choice]}}``, as :func:`layoutopt.solve` takes ``memory``.

    Example:
        >>> graph, costs = generate("resnet", nodes=20, max_choices=3)
        >>> figures = memory_figures(graph, costs)["nodes"]
        >>> costs.nodes["conv_0"].tolist(), figures["conv_0"]           # the faster, the bigger
        ([42022886.0, 18116209.0, 18619099.0], [42503.0, 177476.0, 132541.0])
    """
    rng = np.random.default_rng([int(seed), 49])
    figures = {}
    for node, data in graph.nodes(data=True):
        cost = np.asarray(costs.nodes[node], dtype=np.float64)
        weights = _weight_bytes(data)
        noise = rng.lognormal(0.0, 0.1, cost.size)
        if not weights:
            continue
        finite = cost[np.isfinite(cost)]
        slowest, fastest = (finite.max(), finite.min()) if finite.size else (0.0, 0.0)
        share = (slowest - np.where(np.isfinite(cost), cost, slowest)) / (slowest - fastest or 1.0)
        figures[node] = np.round(weights * (1.0 + spread * share) * noise).tolist()
    return {"nodes": figures}


def constrain_memory(graph: nx.Graph, costs: Costs, share: float, seed: int = 0) -> float:
    """Give ``graph`` the memory figures of :func:`memory_figures` (the ``"memory"`` node attribute) and
    a budget ``share`` of the way from the smallest allowed assignment's memory (0) to the memory of
    the unconstrained optimum (1) (``graph.graph["memory_budget"]``, which :func:`layoutopt.solve`
    reads); returns the budget. A share in ``(0, 1)`` is a budget that binds.

    Example:
        >>> import layoutopt
        >>> graph, costs = generate("resnet", nodes=30, max_choices=4)
        >>> budget = constrain_memory(graph, costs, 0.5)
        >>> constrained = layoutopt.solve(graph, costs)
        >>> free = layoutopt.solve(graph, costs, memory_budget=float("inf"))
        >>> constrained.memory <= budget < free.memory, constrained.objective > free.objective
        (True, True)
    """
    from .api import solve_problem
    from .problem import Problem
    from .solvers.budget import smallest_memory

    figures = memory_figures(graph, costs, seed)
    problem = Problem.from_graph(graph, costs, figures)
    free = solve_problem(problem, "auto")
    low = smallest_memory(problem).memory
    for node, values in figures["nodes"].items():
        graph.nodes[node]["memory"] = values
    budget = float(math.floor(low + share * (free.memory - low)))
    graph.graph["memory_budget"] = budget
    return budget

"""The compiled core of :mod:`~layoutopt.solvers.reductions`: the working graph as flat arrays,
and the reductions, RN's loop, back-propagation and ``pbqp``'s ICM as numba functions over them.

Why compiled: in Python each reduction cost a few numpy calls on tiny arrays, and ``pbqp`` spent
most of its time in that overhead (``benchmarks/results/core.md`` has its times now). Here a
reduction is a few loops over at most a few hundred numbers.

Representation (every choice index is the problem's original one):

- node ``i``: costs ``vec[nstart[i]:nstart[i] + K[i]]``; a pruned choice keeps its slot with cost
  ``inf`` and ``live`` False, so no index is ever remapped; ``nlive[i]`` live choices;
- edge ``e``: a ``(K[eu[e]], K[ev[e]])`` matrix, row-major at ``pool[estart[e]:]``. An update
  (RII onto an existing edge) adds in place: a reduced node's edges are dead and never touched
  again, so back-propagation reads them as they were when the node was reduced;
- incidence records ``2e`` (owned by ``eu[e]``) and ``2e + 1`` (owned by ``ev[e]``), one doubly
  linked list per node (``head``, ``nxt``, ``prv``), so removing a node costs its degree.

Every function takes the :class:`Graph` (one StructRef); those that may create an edge also take
and return the pool, which grows by reallocation. Functions compile on first use into numba's disk
cache (about 12 s after installing); :func:`_warm_up`, at import, makes that happen here rather than
inside a solve's time limit.
"""

from __future__ import annotations

import heapq
import math
import time

import numba
import numpy as np
from numba import njit, types
from numba.experimental import structref

INF = math.inf

# counters (Graph.counts); the first seven are reported in stats, in this order
R0, RI, RII, R1, RN, PRUNED, DROPPED = range(7)
STAT_NAMES = ("R0", "RI", "RII", "R1", "RN", "pruned", "dropped_edges")
N_STEPS, N_EDGES, N_ALIVE, PRUNING, POOL_USED, EMPTIED = range(7, 13)
N_COUNTS = 13
#: ``prv`` of a record that is in no list
UNLINKED = -2
# kinds of steps (the back-propagation stack)
FIXED, STEP_RI, STEP_RII = 0, 1, 2


class EmptyDomain(Exception):
    """A node has no allowed choice left (its index is in ``counts[EMPTIED]``)."""


#: the working graph's arrays (node ``i``, choice slot ``nstart[i] + k``, edge ``e``, record ``r``)
FIELDS = (
    "K", "nstart", "vec", "live", "nlive", "alive", "deg", "head", "nxt", "prv", "eu", "ev", "estart",
    "counts",
    "constant",  # one entry: the cost of the fixed nodes
    "stale",  # nodes whose RN estimate may have changed
    "step_node", "step_kind",
    "step_a",  # the choice of a fixed node; the record of RI, the first record of RII
    "step_b",  # the second record of RII
)


@structref.register
class _GraphType(types.StructRef):
    def preprocess_fields(self, fields):
        return tuple((name, types.unliteral(typ)) for name, typ in fields)


class Graph(structref.StructRefProxy):
    """The working graph, passed to every compiled function as one reference (a tuple of twenty
    arrays made each function take seconds to compile); the arrays read from Python are properties."""

    def __new__(cls, **arrays: np.ndarray) -> Graph:
        return structref.StructRefProxy.__new__(cls, *(arrays[name] for name in FIELDS))

    @property
    def arrays(self) -> dict[str, np.ndarray]:
        return dict(zip(FIELDS, _unpack(self), strict=True))


structref.define_proxy(Graph, _GraphType, list(FIELDS))


@njit(cache=True)
def _unpack(g):
    return (g.K, g.nstart, g.vec, g.live, g.nlive, g.alive, g.deg, g.head, g.nxt, g.prv, g.eu, g.ev, g.estart,
            g.counts, g.constant, g.stale, g.step_node, g.step_kind, g.step_a, g.step_b)


def build(sizes: np.ndarray, node_flat: np.ndarray, edge_flat: np.ndarray, edge_start: np.ndarray,
          edge_i: np.ndarray, edge_j: np.ndarray, coupling: np.ndarray) -> tuple[Graph, np.ndarray]:
    """A working graph from a problem's packed costs; edges not in ``coupling`` are left out."""
    n = sizes.size
    m = edge_i.size
    capacity = m + n  # each RII creates at most one edge, and each node is reduced once
    K = sizes.astype(np.int64)
    nstart = np.zeros(n, dtype=np.int64)
    np.cumsum(K[:-1], out=nstart[1:])
    pool = np.empty(max(2 * edge_flat.size, 1024))
    pool[:edge_flat.size] = edge_flat
    estart = np.zeros(capacity, dtype=np.int64)
    estart[:m] = edge_start
    eu = np.zeros(capacity, dtype=np.int64)
    ev = np.zeros(capacity, dtype=np.int64)
    eu[:m], ev[:m] = edge_i, edge_j
    counts = np.zeros(N_COUNTS, dtype=np.int64)
    counts[N_EDGES], counts[N_ALIVE], counts[POOL_USED] = m, n, edge_flat.size
    graph = Graph(
        K=K, nstart=nstart, vec=np.array(node_flat, dtype=np.float64), live=np.ones(K.sum(), dtype=np.bool_),
        nlive=K.copy(), alive=np.ones(n, dtype=np.bool_), deg=np.zeros(n, dtype=np.int64),
        head=np.full(n, -1, dtype=np.int64), nxt=np.full(2 * capacity, -1, dtype=np.int64),
        prv=np.full(2 * capacity, UNLINKED, dtype=np.int64), eu=eu, ev=ev, estart=estart,
        counts=counts, constant=np.zeros(1), stale=np.zeros(n, dtype=np.bool_),
        step_node=np.zeros(n, dtype=np.int64), step_kind=np.zeros(n, dtype=np.int64),
        step_a=np.zeros(n, dtype=np.int64), step_b=np.zeros(n, dtype=np.int64),
    )
    _link_all(graph, coupling)
    return graph, pool


# --- the graph ------------------------------------------------------------------------------


@njit(cache=True)
def _node_list():
    """An empty list of node indices (a worklist or a queue)."""
    nodes = [np.int64(0)]
    nodes.pop()
    return nodes


@njit(cache=True)
def _link(g, r):
    """Put record ``r`` at the head of its owner's list."""
    i = owner(g, r)
    first = g.head[i]
    g.nxt[r] = first
    g.prv[r] = -1
    if first != -1:
        g.prv[first] = r
    g.head[i] = r
    g.deg[i] += 1


@njit(cache=True)
def _unlink(g, r):
    i = owner(g, r)
    before, after = g.prv[r], g.nxt[r]
    if before == -1:
        g.head[i] = after
    else:
        g.nxt[before] = after
    if after != -1:
        g.prv[after] = before
    g.prv[r] = UNLINKED
    g.deg[i] -= 1


@njit(cache=True)
def _link_all(g, coupling):
    dropped = 0
    for e in range(coupling.size):
        if coupling[e]:
            _link(g, 2 * e)
            _link(g, 2 * e + 1)
        else:
            dropped += 1
    g.counts[DROPPED] += dropped


@njit(cache=True, inline="always")
def owner(g, r):
    """The node that record ``r`` belongs to."""
    return g.eu[r >> 1] if r & 1 == 0 else g.ev[r >> 1]


@njit(cache=True, inline="always")
def other(g, r):
    """The node at the far end of record ``r``."""
    return g.ev[r >> 1] if r & 1 == 0 else g.eu[r >> 1]


@njit(cache=True, inline="always")
def _at(g, r, k, c):
    """Offset in the pool of the entry for choice ``k`` of ``r``'s owner and ``c`` of the other end."""
    e = r >> 1
    cols = g.K[g.ev[e]]
    if r & 1 == 0:
        return g.estart[e] + k * cols + c
    return g.estart[e] + c * cols + k


@njit(cache=True)
def _find(g, x, z):
    """The record of ``x`` whose other end is ``z``, or -1."""
    r = g.head[x]
    while r != -1:
        if other(g, r) == z:
            return r
        r = g.nxt[r]
    return -1


@njit(cache=True)
def _touch_vector(g, x):
    """``x``'s vector changed: its RN estimate and its neighbours' are stale."""
    g.stale[x] = True
    r = g.head[x]
    while r != -1:
        g.stale[other(g, r)] = True
        r = g.nxt[r]


@njit(cache=True)
def _remove(g, y, worklist):
    r = g.head[y]
    while r != -1:
        x = other(g, r)
        _unlink(g, r ^ 1)
        worklist.append(x)
        g.stale[x] = True
        r = g.nxt[r]
    g.head[y] = -1
    g.deg[y] = 0
    g.alive[y] = False
    g.counts[N_ALIVE] -= 1


# --- domains (arc consistency, only while counts[PRUNING]) -------------------------------------


@njit(cache=True)
def _empty(g, i):
    g.counts[EMPTIED] = i
    raise EmptyDomain()


@njit(cache=True)
def _prune(g, i, k):
    """Remove the live choice ``k`` of node ``i``."""
    g.live[g.nstart[i] + k] = False
    g.vec[g.nstart[i] + k] = INF
    g.nlive[i] -= 1
    g.counts[PRUNED] += 1
    if g.nlive[i] == 0:
        _empty(g, i)


@njit(cache=True)
def _after_pruning(g, i, queue, worklist):
    queue.append(i)
    worklist.append(i)
    _touch_vector(g, i)


@njit(cache=True)
def _prune_forbidden(g, i, queue, worklist):
    """Remove the live choices of ``i`` whose own cost is inf."""
    s = g.nstart[i]
    pruned = False
    for k in range(g.K[i]):
        if g.live[s + k] and g.vec[s + k] == INF:
            _prune(g, i, k)
            pruned = True
    if pruned:
        _after_pruning(g, i, queue, worklist)


@njit(cache=True)
def _check_support(g, pool, r, queue, worklist):
    """Remove the choices of ``r``'s owner that no live choice at the other end allows."""
    i = owner(g, r)
    far = other(g, r)
    si, sf = g.nstart[i], g.nstart[far]
    pruned = False
    for k in range(g.K[i]):
        if not g.live[si + k]:
            continue
        supported = False
        for c in range(g.K[far]):
            if g.live[sf + c] and pool[_at(g, r, k, c)] < INF:
                supported = True
                break
        if not supported:
            _prune(g, i, k)
            pruned = True
    if pruned:
        _after_pruning(g, i, queue, worklist)


@njit(cache=True)
def _propagate(g, pool, queue, worklist):
    while len(queue):
        i = queue.pop()
        if not g.alive[i]:
            continue
        r = g.head[i]
        while r != -1:
            _check_support(g, pool, r ^ 1, queue, worklist)
            r = g.nxt[r]


@njit(cache=True)
def prune_all(g, pool):
    """Remove every forbidden choice of the live nodes, and keep doing so after each reduction."""
    g.counts[PRUNING] = 1
    worklist = _node_list()
    queue = _node_list()
    n = g.K.size
    for i in range(n):
        if g.alive[i]:
            _prune_forbidden(g, i, queue, worklist)
    for i in range(n):
        if not g.alive[i]:
            continue
        r = g.head[i]
        while r != -1:
            if i < other(g, r):
                _check_support(g, pool, r, queue, worklist)
                _check_support(g, pool, r ^ 1, queue, worklist)
            r = g.nxt[r]
    _propagate(g, pool, queue, worklist)  # the caller's reduce_exact finds the nodes to reduce


# --- the reductions --------------------------------------------------------------------------


@njit(cache=True)
def _record(g, y, kind, a, b):
    s = g.counts[N_STEPS]
    g.step_node[s], g.step_kind[s], g.step_a[s], g.step_b[s] = y, kind, a, b
    g.counts[N_STEPS] = s + 1


@njit(cache=True)
def fix(g, pool, y, k, worklist):
    """Give node ``y`` its choice ``k`` and fold its edges' row ``k`` into its neighbours (the
    caller counts the rule: a constant argument would compile one copy per rule)."""
    cost = g.vec[g.nstart[y] + k]
    if cost == INF:
        _empty(g, y)
    _record(g, y, FIXED, k, -1)
    g.constant[0] += cost
    r = g.head[y]
    while r != -1:
        x = other(g, r)
        sx = g.nstart[x]
        for c in range(g.K[x]):
            g.vec[sx + c] += pool[_at(g, r, k, c)]
        r = g.nxt[r]
    first = g.head[y]
    _remove(g, y, worklist)
    r = first
    while r != -1:
        _vector_changed(g, pool, other(g, r), worklist)
        r = g.nxt[r]


@njit(cache=True)
def _vector_changed(g, pool, x, worklist):
    _touch_vector(g, x)
    if g.counts[PRUNING]:
        queue = _node_list()
        _prune_forbidden(g, x, queue, worklist)
        _propagate(g, pool, queue, worklist)


@njit(cache=True)
def _set_edge(g, pool, x, z, delta, worklist):
    """Add ``delta`` (``K[x] * K[z]``, row-major) to the x-z edge, creating it if needed; drop it if
    all zero."""
    Kx, Kz = g.K[x], g.K[z]
    r = _find(g, x, z)
    linked = True
    if r != -1:
        zero = True
        for a in range(Kx):
            for b in range(Kz):
                p = _at(g, r, a, b)
                pool[p] += delta[a * Kz + b]
                if pool[p] != 0.0:
                    zero = False
        if zero:
            _unlink(g, r)
            _unlink(g, r ^ 1)
            g.counts[DROPPED] += 1
            linked = False
    else:
        zero = True
        for v in delta:
            if v != 0.0:
                zero = False
                break
        if zero:
            g.counts[DROPPED] += 1
            linked = False
        else:
            used = g.counts[POOL_USED]
            if used + delta.size > pool.size:  # (loops: slice assignment takes seconds to compile)
                grown = np.empty(2 * (used + delta.size))
                for p in range(used):
                    grown[p] = pool[p]
                pool = grown
            for p in range(delta.size):
                pool[used + p] = delta[p]
            e = g.counts[N_EDGES]
            g.eu[e], g.ev[e], g.estart[e] = x, z, used
            g.counts[N_EDGES] = e + 1
            g.counts[POOL_USED] = used + delta.size
            r = 2 * e
            _link(g, r)
            _link(g, r + 1)
    worklist.append(x)
    worklist.append(z)
    g.stale[x] = True
    g.stale[z] = True
    if g.counts[PRUNING] and linked:
        queue = _node_list()
        _check_support(g, pool, r, queue, worklist)
        _check_support(g, pool, r ^ 1, queue, worklist)
        _propagate(g, pool, queue, worklist)
    return pool


@njit(cache=True)
def _reduce_one(g, pool, y, worklist):
    sy, Ky = g.nstart[y], g.K[y]
    degree = g.deg[y]
    if g.nlive[y] == 1:
        k = 0
        while not g.live[sy + k]:
            k += 1
        fix(g, pool, y, k, worklist)
        g.counts[R1] += 1
    elif degree == 0:
        best = 0
        for k in range(1, Ky):
            if g.vec[sy + k] < g.vec[sy + best]:
                best = k
        fix(g, pool, y, best, worklist)
        g.counts[R0] += 1
    elif degree == 1:
        r = g.head[y]
        x = other(g, r)
        sx = g.nstart[x]
        _record(g, y, STEP_RI, r, -1)
        g.counts[RI] += 1
        _remove(g, y, worklist)
        for c in range(g.K[x]):
            best = INF
            for k in range(Ky):
                v = pool[_at(g, r, k, c)] + g.vec[sy + k]
                if v < best:
                    best = v
            g.vec[sx + c] += best
        _vector_changed(g, pool, x, worklist)
    elif degree == 2:
        r1 = g.head[y]
        r2 = g.nxt[r1]
        x, z = other(g, r1), other(g, r2)
        Kx, Kz = g.K[x], g.K[z]
        delta = np.empty(Kx * Kz)  # row-major (K[x], K[z])
        for a in range(Kx):
            for b in range(Kz):
                best = INF
                for k in range(Ky):
                    v = pool[_at(g, r1, k, a)] + (pool[_at(g, r2, k, b)] + g.vec[sy + k])
                    if v < best:
                        best = v
                delta[a * Kz + b] = best
        _record(g, y, STEP_RII, r1, r2)
        g.counts[RII] += 1
        _remove(g, y, worklist)
        pool = _set_edge(g, pool, x, z, delta, worklist)
    return pool


@njit(cache=True, inline="always")
def _reducible(g, y):
    """Whether an exact reduction applies to node ``y``: R0/RI/RII (degree <= 2) or R1 (one choice)."""
    return g.alive[y] and (g.deg[y] <= 2 or g.nlive[y] == 1)


@njit(cache=True)
def _reduce_exact(g, pool, worklist):
    while len(worklist):
        y = worklist.pop()
        if _reducible(g, y):
            pool = _reduce_one(g, pool, y, worklist)
    return pool


@njit(cache=True)
def reduce_exact(g, pool):
    """R1/R0/RI/RII (and pruning, once switched on) until every live node has degree >= 3."""
    worklist = _node_list()
    for y in range(g.K.size):
        if _reducible(g, y):
            worklist.append(y)
    return _reduce_exact(g, pool, worklist)


# --- RN ---------------------------------------------------------------------------------------


@njit(cache=True)
def _now():
    with numba.objmode(t="float64"):
        t = time.perf_counter()
    return t


@njit(cache=True)
def _estimate(g, pool, y, out, reply):
    """Each choice of ``y``'s own cost plus every neighbour's best reply to it (inf if pruned).

    The loops follow the matrix's memory order (a record of the second end reads its matrix
    column-wise), so that the inner loop is contiguous either way."""
    sy, Ky = g.nstart[y], g.K[y]
    for k in range(Ky):
        out[k] = g.vec[sy + k] if g.live[sy + k] else INF
    r = g.head[y]
    while r != -1:
        e = r >> 1
        x = other(g, r)
        sx, Kx = g.nstart[x], g.K[x]
        base = g.estart[e]
        if r & 1 == 0:  # y's choices are the rows
            for k in range(Ky):
                best = INF
                row = base + k * Kx
                for c in range(Kx):
                    v = pool[row + c] + g.vec[sx + c]
                    if v < best:
                        best = v
                reply[k] = best
        else:  # y's choices are the columns
            for k in range(Ky):
                reply[k] = INF
            for c in range(Kx):
                row = base + c * Ky
                cost = g.vec[sx + c]
                for k in range(Ky):
                    v = pool[row + k] + cost
                    if v < reply[k]:
                        reply[k] = v
        for k in range(Ky):
            out[k] += reply[k]
        r = g.nxt[r]


@njit(cache=True)
def _rank(g, pool, y, out, reply):
    """``(confidence, locally minimal choice)`` of ``y``: the margin of its best estimated choice
    over the runner-up (inf when only one choice is live)."""
    _estimate(g, pool, y, out, reply)
    best, second, choice = INF, INF, -1
    sy = g.nstart[y]
    for k in range(g.K[y]):
        if not g.live[sy + k]:
            continue
        if choice == -1:
            choice = k
        v = out[k]
        if v < best:
            second, best, choice = best, v, k
        elif v < second:
            second = v
    if g.nlive[y] < 2:
        return INF, choice
    if best == INF:
        return 0.0, choice
    return second - best, choice


@njit(cache=True)
def _rerank(g, pool, y, out, reply, key, choice):
    """Rank ``y`` again: store its locally minimal choice and its heap key (minus its confidence),
    and return the key."""
    confidence, best = _rank(g, pool, y, out, reply)
    choice[y] = best
    key[y] = -confidence
    return key[y]


@njit(cache=True)
def reduce_by_rn(g, pool, deadline):
    """RN until the graph is empty: fix the most confident node at its locally minimal choice, then
    the exact reductions again. Confidences live in a lazy max-heap: a node touched by a reduction
    is re-ranked only when it reaches the top; past ``deadline`` (a ``perf_counter`` instant) it is
    not re-ranked any more."""
    n = g.K.size
    widest = 0
    for y in range(n):
        widest = max(widest, g.K[y])
    out = np.empty(widest)
    reply = np.empty(widest)
    key = np.zeros(n)
    choice = np.zeros(n, dtype=np.int64)
    heap = [(0.0, np.int64(0))]
    heap.pop()
    for y in range(n):
        if g.alive[y]:
            heap.append((_rerank(g, pool, y, out, reply, key, choice), np.int64(y)))
    heapq.heapify(heap)
    g.stale[:] = False
    expired = False
    worklist = _node_list()
    steps = 0
    while g.counts[N_ALIVE] > 0:
        priority, y = heapq.heappop(heap)
        if not g.alive[y] or priority != key[y]:
            continue  # removed, or an outdated entry
        if g.stale[y] and not expired:
            g.stale[y] = False
            heapq.heappush(heap, (_rerank(g, pool, y, out, reply, key, choice), y))
            continue
        k = choice[y]
        if not g.live[g.nstart[y] + k]:  # a stale choice, past the deadline, that was pruned since
            _, k = _rank(g, pool, y, out, reply)
        fix(g, pool, y, k, worklist)
        g.counts[RN] += 1
        pool = _reduce_exact(g, pool, worklist)
        steps += 1
        if deadline < INF and not expired and steps % 16 == 0:
            expired = _now() >= deadline
    return pool


# --- back-propagation ------------------------------------------------------------------------


@njit(cache=True)
def backpropagate(g, pool, choices):
    """Complete ``choices`` (-1 = unknown; set for every node not on the stack), last step first:
    each reduced node takes its argmin given its neighbours' choices."""
    for s in range(g.counts[N_STEPS] - 1, -1, -1):
        y, kind = g.step_node[s], g.step_kind[s]
        if kind == FIXED:
            choices[y] = g.step_a[s]
            continue
        sy = g.nstart[y]
        r1 = g.step_a[s]
        c1 = choices[other(g, r1)]
        r2 = g.step_b[s]
        c2 = choices[other(g, r2)] if kind == STEP_RII else 0
        best, arg = INF, -1
        for k in range(g.K[y]):
            if kind == STEP_RI:
                v = pool[_at(g, r1, k, c1)] + g.vec[sy + k]
            else:  # the reduction's order of additions
                v = pool[_at(g, r1, k, c1)] + (pool[_at(g, r2, k, c2)] + g.vec[sy + k])
            if arg == -1 or v < best:
                best, arg = v, k
        choices[y] = arg
    return choices


@njit(cache=True)
def live_edges(g):
    """Each edge between live nodes, once: ``(edge, first end, second end)`` arrays."""
    total = g.counts[N_EDGES]
    edges = np.empty(total, dtype=np.int64)
    first = np.empty(total, dtype=np.int64)
    second = np.empty(total, dtype=np.int64)
    count = 0
    for e in range(total):
        if g.prv[2 * e] != UNLINKED and g.alive[g.eu[e]] and g.alive[g.ev[e]]:
            edges[count], first[count], second[count] = e, g.eu[e], g.ev[e]
            count += 1
    return edges[:count], first[:count], second[:count]


# --- ICM (pbqp's polish) ----------------------------------------------------------------------


def incidence(edge_i: np.ndarray, edge_j: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each node's edges in CSR form, in edge order: node ``i``'s are ``edge[indptr[i]:indptr[i + 1]]``,
    with ``side`` 0 where ``i`` is the edge's first end (its matrix's rows) and 1 where it is the second."""
    m = edge_i.size
    ends = np.concatenate([edge_i, edge_j])
    edges = np.concatenate([np.arange(m), np.arange(m)])
    order = np.lexsort((edges, ends))
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(ends, minlength=n), out=indptr[1:])
    return indptr, edges[order], (order >= m).astype(np.int64)


@njit(cache=True)
def icm_sweep(node_flat, node_start, node_size, edge_flat, edge_start, edge_i, edge_j, indptr, edge, side,
              assignment, local, known, pending):
    """One sweep of iterated conditional modes, in node order: each pending node moves to its best
    reply to its neighbours' choices if that is strictly better. ``local`` caches each node's cost
    per choice given its neighbours (valid where ``known``); a node is pending again only once a
    neighbour moved, since otherwise its best reply is the same. Returns the number of moves."""
    moves = 0
    for i in range(node_size.size):
        if not pending[i]:
            continue
        pending[i] = False
        s, size = node_start[i], node_size[i]
        if not known[i]:
            for k in range(size):
                local[s + k] = node_flat[s + k]
            for p in range(indptr[i], indptr[i + 1]):
                e = edge[p]
                if side[p] == 0:  # i is the first end: column assignment[j] of its matrix
                    cols = node_size[edge_j[e]]
                    base = edge_start[e] + assignment[edge_j[e]]
                    for k in range(size):
                        local[s + k] += edge_flat[base + k * cols]
                else:  # i is the second end: row assignment[i'] of its matrix
                    base = edge_start[e] + assignment[edge_i[e]] * size
                    for k in range(size):
                        local[s + k] += edge_flat[base + k]
            known[i] = True
        best = s
        for k in range(s + 1, s + size):
            if local[k] < local[best]:
                best = k
        if local[best] < local[s + assignment[i]]:
            assignment[i] = best - s
            moves += 1
            for p in range(indptr[i], indptr[i + 1]):
                e = edge[p]
                j = edge_j[e] if side[p] == 0 else edge_i[e]
                known[j] = False
                pending[j] = node_size[j] > 1
    return moves


def _warm_up() -> None:
    """Run every compiled function once on a tiny graph, so that all of them compile (first use
    after installing: about 12 s, then cached on disk) or load from the cache here, at import,
    rather than inside a later solve's time limit."""
    sizes = np.array([2, 2, 2, 2], dtype=np.int64)
    edge_i = np.array([0, 0, 0, 1, 1, 2], dtype=np.int64)
    edge_j = np.array([1, 2, 3, 2, 3, 3], dtype=np.int64)
    flat = np.tile([0.0, 1.0, 1.0, INF], edge_i.size)
    for prune in (False, True):
        graph, pool = build(sizes, np.array([0.0, 1.0] * 4), flat, np.arange(0, flat.size, 4), edge_i, edge_j,
                            np.ones(edge_i.size, dtype=np.bool_))
        if prune:
            prune_all(graph, pool)
        pool = reduce_exact(graph, pool)
        live_edges(graph)
        pool = reduce_by_rn(graph, pool, time.perf_counter() + 60.0)
        backpropagate(graph, pool, np.full(sizes.size, -1, dtype=np.int64))
    indptr, edge, side = incidence(edge_i, edge_j, sizes.size)
    icm_sweep(np.zeros(8), np.arange(0, 8, 2), sizes, flat, np.arange(0, flat.size, 4), edge_i, edge_j,
              indptr, edge, side, np.zeros(4, dtype=np.int64), np.empty(8), np.zeros(4, dtype=np.bool_),
              np.ones(4, dtype=np.bool_))


_warm_up()

"""Tree algorithms: binomial tree, pipelined chain and NCCL's double binary tree.

All three move data along a tree of ranks. The binomial tree sends whole
buffers, one hop per step, in ⌈log2 P⌉ steps. The chain and the double binary
tree split the buffer into chunks that follow each other down (or up) the tree
one step apart, so that every link streams: with ``k`` chunks of ``c`` bytes
and a tree ``d`` hops deep, a pipelined broadcast takes ``d(α + c/B) + (k-1)c/B``
in the critical-path model (``(d + k - 1)(α + c/B)`` with a barrier per step).

Every transfer a rank sends to one peer in one step is one message (its
``group`` is the step), so a binomial tree's whole-buffer sends pay one α each.
The trees are built on rank numbers, not on the topology: each generator
raises :class:`~simcoll.errors.NotApplicableError` naming the first pair of
ranks its tree needs that the topology gives no route between.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from ..algorithm import Algorithm, Transfer, TransferTable
from ..collectives import Collective
from ..errors import NotApplicableError
from ..routes import Routes, routes_of
from ..topology import Topology
from .common import finish, hamiltonian_path, implements, one_message_per_step, require_routes, tree_depths
from .registry import Generator, Option, int_list

PATH_SEARCH_TIME_LIMIT_S = 5.0

Tree = dict[int, int]  # child rank -> parent rank


# -- helpers shared by the three families ----------------------------------------
def _build(
    name: str, collective: Collective, topology: Topology, transfers: list[Transfer] | TransferTable, **metadata
) -> Algorithm:
    routes = routes_of(topology)
    require_routes(name, topology, routes, transfers)
    return finish(name, collective, topology, one_message_per_step(transfers), routes, **metadata)


def tree_height(tree: Tree, top: int) -> int:
    """Hops from ``top`` to the deepest rank of ``tree``."""
    return max(tree_depths(tree, top).values())


def _pipelined(tree: Tree, chunks: Sequence[int], step_of_depth, reduce: bool) -> TransferTable:
    """Every chunk over every edge of ``tree`` (chunk-major, edges in the
    tree's order), chunk j on an edge at depth δ in step
    ``step_of_depth(δ) + j``; up the tree (child to parent) when ``reduce``,
    else down. Columns, not a Transfer per chunk: a double binary tree on
    1,024 ranks has a million transfers."""
    edges = len(tree)
    child = np.fromiter(tree.keys(), dtype=np.int64, count=edges)
    parent = np.fromiter(tree.values(), dtype=np.int64, count=edges)
    chunk = np.asarray(chunks, dtype=np.int64)
    k = len(chunk)
    edge_step = step_of_depth(child)  # per edge, for chunk 0
    return TransferTable(
        chunk=np.repeat(chunk, edges),
        src=np.tile(child if reduce else parent, k),
        dst=np.tile(parent if reduce else child, k),
        reduce=np.full(k * edges, reduce),
        step=np.tile(edge_step, k) + np.repeat(np.arange(k, dtype=np.int64), edges),
    )


def _depth_of(tree: Tree, top: int) -> tuple[Callable[[np.ndarray], np.ndarray], int]:
    """Per rank array -> its depth below ``top``, and the tree's height."""
    depth = tree_depths(tree, top)
    table = np.zeros(max(depth) + 1, dtype=np.int64)
    table[list(depth)] = list(depth.values())
    return (lambda ranks: table[ranks]), max(depth.values())


def _pipelined_reduce(tree: Tree, top: int, chunks: Sequence[int], first_step: int) -> TransferTable:
    """Chunk j leaves the ranks at depth δ at step ``first_step + j + height - δ``,
    one step after their children's partials of it arrived; the top holds it
    reduced after step ``first_step + j + height - 1``."""
    depth, height = _depth_of(tree, top)
    return _pipelined(tree, chunks, lambda ranks: first_step + height - depth(ranks), reduce=True)


def _pipelined_broadcast(tree: Tree, top: int, chunks: Sequence[int], first_step: int) -> TransferTable:
    """Chunk j reaches the ranks at depth δ in step ``first_step + j + δ - 1``."""
    depth, _ = _depth_of(tree, top)
    return _pipelined(tree, chunks, lambda ranks: first_step + depth(ranks) - 1, reduce=False)


def _pipelined_allreduce(tree: Tree, top: int, chunks: Sequence[int]) -> TransferTable:
    """Reduce to the top, then broadcast from it; chunk j starts down the tree
    the step after it is complete at the top."""
    height = tree_height(tree, top) if tree else 0
    return TransferTable.concatenate(
        [_pipelined_reduce(tree, top, chunks, 0), _pipelined_broadcast(tree, top, chunks, height)]
    )


# -- binomial tree ------------------------------------------------------------
def _binomial_links(p: int) -> list[tuple[int, int, int]]:
    """``(child, parent, level)`` of the binomial tree on relative ranks 0..p-1:
    the parent of v clears v's lowest set bit 2^level (MPICH's binomial tree);
    v's subtree is ``v .. v + 2^level - 1``."""
    return [(v, v - (v & -v), (v & -v).bit_length() - 1) for v in range(1, p)]


@implements("binomial-tree", ("broadcast", "reduce", "gather", "scatter", "allreduce"))
def binomial_tree(topology: Topology, collective: Collective) -> Algorithm:
    """Binomial tree (MPICH's; Thakur, Rabenseifner & Gropp 2005): ranks are
    numbered relative to the root, v = (rank - root) mod P (v = rank XOR root
    when P is a power of two), and the parent of v clears v's lowest set bit.
    With n = ⌈log2 P⌉ steps:

    - Broadcast: in step s the ranks already holding the buffer send it 2^(n-1-s)
      ranks on. Reduce: the mirror image, each rank reducing its partial into its
      parent. Gather / Scatter: the same trees, each rank forwarding the blocks of
      its whole subtree. Allreduce: Reduce to rank 0, then Broadcast from it.

    Cost, M the buffer named by the collective, one message per hop
    (step model, one step after another):

    - Broadcast ``⌈log2 P⌉(α + M/B)``; Reduce ``⌈log2 P⌉(α + M/B + T_R(M))``;
      Allreduce the sum of both;
    - Gather and Scatter ``⌈log2 P⌉α + (P-1)/P·M/B`` (M the gathered buffer).

    The critical-path model lets a rank send to several peers at once, so the
    depth of the tree counts, not its steps: ``⌊log2 P⌋`` hops of
    ``α + M/B (+ T_R(M))`` for Broadcast and Reduce, the same as the step model
    when P is a power of two; Gather and Scatter take ``log2 P·α + (P-1)/P·M/B``
    when P is a power of two.

    >>> from simcoll import load_topology, make_collective
    >>> binomial_tree(load_topology("fully-connected:8"), make_collective("broadcast", 8, root=3)).steps
    3
    """
    p = collective.num_ranks
    n = (p - 1).bit_length()  # ⌈log2 P⌉
    root = collective.root or 0

    def real(v: int) -> int:
        # With P a power of two, XOR keeps every tree edge between ranks that
        # differ in one bit (hypercube links, as on DGX-1); otherwise rotate.
        return v ^ root if p & (p - 1) == 0 else (v + root) % p

    everything = range(collective.num_chunks)
    transfers: list[Transfer] = []
    for v, parent, level in _binomial_links(p):
        child, up = real(v), real(parent)
        down_step = n - 1 - level  # the broadcast order: farthest subtree first
        subtree = [real(u) for u in range(v, min(v + (1 << level), p))]
        if collective.name == "broadcast":
            transfers += [Transfer(c, up, child, "copy", down_step) for c in everything]
        elif collective.name == "reduce":
            transfers += [Transfer(c, child, up, "reduce", level) for c in everything]
        elif collective.name == "gather":
            transfers += [Transfer(c, child, up, "copy", level) for r in subtree for c in collective.input_layout[r]]
        elif collective.name == "scatter":
            transfers += [
                Transfer(c, up, child, "copy", down_step) for r in subtree for c in collective.output_layout[r]
            ]
        else:  # allreduce: reduce to rank 0 in steps 0..n-1, broadcast in steps n..2n-1
            transfers += [Transfer(c, child, up, "reduce", level) for c in everything]
            transfers += [Transfer(c, up, child, "copy", n + down_step) for c in everything]
    return _build("binomial-tree", collective, topology, transfers, depth=p.bit_length() - 1)


# -- pipelined chain ------------------------------------------------------------
def _find_path(topology: Topology, routes: Routes, start: int) -> list[int]:
    """A Hamiltonian path from ``start`` over the topology's routes: the ranks in
    order from ``start`` (wrapping) where that works, else a depth-first search
    preferring pairs joined by more direct links."""
    p = topology.num_ranks

    def linked(a: int, b: int) -> bool:  # an Allreduce uses the chain both ways
        return routes.connected(a, b) and routes.connected(b, a)

    natural = [(start + i) % p for i in range(p)]
    if all(linked(a, b) for a, b in zip(natural, natural[1:], strict=False)):
        return natural

    def options(here: int) -> list[int]:
        return sorted((d for d in range(p) if linked(here, d)), key=lambda d: (-routes.direct_links(here, d), d))

    try:
        path = hamiltonian_path(start, options, p, time_limit_s=PATH_SEARCH_TIME_LIMIT_S, what="chain")
    except NotApplicableError as exc:
        raise NotApplicableError(f"chain: {topology.name}: {exc}") from None
    if path is None:
        raise NotApplicableError(f"chain: {topology.name} has no path through every rank starting at rank {start}")
    return path


@implements("chain", ("broadcast", "reduce", "allreduce"))
def chain(topology: Topology, collective: Collective, order: Sequence[int] | None = None) -> Algorithm:
    """Pipelined chain: the ranks form a path from the root and the C chunks
    follow each other along it, one step apart, as NCCL pipelines Broadcast and
    Reduce along its rings (SCCL §5.3, Table 3: on DGX-1 its trees are such paths).

    - Broadcast: chunk j leaves the root at step j and reaches position i at
      step j + i - 1; Reduce: the mirror image, partials flowing to the root;
      Allreduce: a Reduce along the chain to its first rank, then a Broadcast
      back down it (the two use opposite directions of every link).

    ``order`` is the path (every rank once; for Broadcast and Reduce it starts
    at the root); by default the ranks in order from the root (from 0 for
    Allreduce), or a path found over the topology's routes.

    Cost, c = M/C bytes per chunk, on a uniform machine (critical path: a
    chunk's latency overlaps the next chunk's transmission): Broadcast
    ``(P-1)(α + c/B) + (C-1)c/B``; Reduce ``(P-1)(α + c/B + T_R(c)) + (C-1)c/B``;
    Allreduce ``2(P-1)(α + c/B) + (P-1)T_R(c) + (C-1)c/B``. With a barrier
    after each step, every one of the P+C-2 steps (2P+C-3 for Allreduce)
    costs a full ``α + c/B`` (``+ T_R(c)`` when it reduces).

    >>> from simcoll import load_topology, make_collective
    >>> chain(load_topology("line:4"), make_collective("broadcast", 4, 3)).steps  # 3 hops + 2 more chunks
    5
    """
    routes = routes_of(topology)
    p = collective.num_ranks
    start = collective.root if collective.root is not None else 0
    if order is None:
        path = _find_path(topology, routes, start)
    else:
        path = list(order)
        if sorted(path) != list(range(p)):
            raise NotApplicableError(f"chain: order {path} must list every rank 0..{p - 1} once")
        if collective.root is not None and path[0] != collective.root:
            raise NotApplicableError(f"chain: order {path} must start at the root, rank {collective.root}")
    tree = {path[i]: path[i - 1] for i in range(1, p)}
    chunks = list(range(collective.num_chunks))
    if collective.name == "broadcast":
        transfers = _pipelined_broadcast(tree, path[0], chunks, 0)
    elif collective.name == "reduce":
        transfers = _pipelined_reduce(tree, path[0], chunks, 0)
    else:
        transfers = _pipelined_allreduce(tree, path[0], chunks)
    return _build("chain", collective, topology, transfers, order=path)


# -- double binary tree -----------------------------------------------------------
def _full_inorder_tree(ranks: Sequence[int], tree: Tree) -> int:
    """A balanced binary tree over an odd number of ranks in which every inner
    rank has two children, laid out in order: its leaves are the even positions.
    Adds the edges to ``tree`` and returns the top."""
    if len(ranks) == 1:
        return ranks[0]
    half = (len(ranks) - 1) // 2
    left = half if half % 2 else half + 1  # both sides must hold an odd number of ranks
    top = ranks[left]
    tree[_full_inorder_tree(ranks[:left], tree)] = top
    tree[_full_inorder_tree(ranks[left + 1 :], tree)] = top
    return top


def _first_tree(n: int) -> Tree:
    """The first tree over positions 0..n-1. With q the even one of n and n-1,
    position 0 is the top and has as its child the top of a full in-order tree
    over positions 1..q-1 (whose inner positions are the even ones); when n is
    odd, position n-1 hangs from the top as a second child. The inner positions
    are then exactly the even positions below q."""
    q = n - n % 2
    tree: Tree = {}
    if q >= 2:
        tree[_full_inorder_tree(range(1, q), tree)] = 0
    if n % 2 and n > 1:
        tree[n - 1] = 0
    return tree


def _top(tree: Tree, alone: int) -> int:
    """The rank of ``tree`` with no parent (``alone`` for a one-rank tree)."""
    return next(iter(set(tree.values()) - set(tree)), alone)


def _pairs(tree: Tree) -> set[frozenset[int]]:
    return {frozenset(edge) for edge in tree.items()}


def _second_tree(first: Tree, n: int) -> Tree:
    """The first tree relabelled so that its inner positions (even, below q)
    become leaves: position x < q becomes ``(a·x + 1) mod q``, which maps even to
    odd for every odd ``a`` prime to q (position n-1, when n is odd, stays).
    ``a`` is the smallest such number ≥ 3 for which the two trees join no pair
    of positions twice; for n < 8 there is none, and the second tree is NCCL's
    mirror image ``x -> q-1-x``."""
    q = n - n % 2
    used = _pairs(first)

    def relabel(a: int, b: int) -> Tree:
        def move(x: int) -> int:
            return (a * x + b) % q if x < q else x

        return {move(child): move(parent) for child, parent in first.items()}

    for a in range(3, q, 2):
        if math.gcd(a, q) == 1:
            candidate = relabel(a, 1)
            if not used & _pairs(candidate):
                return candidate
    return relabel(q - 1, q - 1) if q else {}


def double_binary_tree_pair(ranks: Sequence[int]) -> tuple[Tree, int, Tree, int]:
    """Two complementary binary trees over ``ranks`` (Sanders, Speck & Träff
    2009; NCCL's double binary tree, NV-Group §3.1.2): every rank is an inner
    node of at most one of them, so each rank forwards at most one tree's data.
    Returns ``(tree1, top1, tree2, top2)``; both trees are ⌈log2 q⌉ hops deep,
    q the even one of len(ranks) and len(ranks)-1, and for eight or more ranks
    no pair of ranks is joined in both.

    >>> t1, top1, t2, top2 = double_binary_tree_pair(range(8))
    >>> sorted(set(t1.values())), sorted(set(t2.values()))
    ([0, 2, 4, 6], [1, 3, 5, 7])
    """
    ranks = list(ranks)
    first = _first_tree(len(ranks))
    second = _second_tree(first, len(ranks))
    tree1 = {ranks[c]: ranks[p] for c, p in first.items()}
    tree2 = {ranks[c]: ranks[p] for c, p in second.items()}
    return tree1, _top(tree1, ranks[0]), tree2, _top(tree2, ranks[0])


def _halves(chunks: Sequence[int]) -> tuple[list[int], list[int]]:
    cut = (len(chunks) + 1) // 2
    return list(chunks[:cut]), list(chunks[cut:])


@implements("double-binary-tree", ("allreduce", "broadcast", "reduce"))
def double_binary_tree(topology: Topology, collective: Collective) -> Algorithm:
    """NCCL's double binary tree (Sanders, Speck & Träff 2009; NV-Group §3.1.2):
    two binary trees, each rank an inner node of at most one
    (:func:`double_binary_tree_pair`), each carrying half of the C chunks,
    pipelined chunk by chunk.

    - Allreduce: the trees span all P ranks; each reduces its half to its top
      and broadcasts it back down, chunk j starting down the step after it is
      complete at the top.
    - Broadcast / Reduce: the trees span the P-1 other ranks and the root sits
      above both tops (as in Sanders et al.), sending one half down each tree
      or receiving one half from each.

    NCCL builds the second tree as the mirror (or shift) of the first; here it
    is the first relabelled by ``x -> a·x + 1`` so that, from eight ranks on, no
    pair of ranks carries both trees and each tree streams at full speed.

    Cost in the critical-path model on a uniform machine, when the trees share
    no pair; d the trees' depth (Allreduce: ⌈log2 q⌉, q the even one of P and
    P-1; Broadcast/Reduce: one more than that for P-1 ranks), k = ⌈C/2⌉ chunks
    in the larger half and c = M/C bytes per chunk:

    - Allreduce ``2d(α + c/B) + d·T_R(c) + (k-1)c/B``;
    - Broadcast ``d(α + c/B) + (k-1)c/B``; Reduce ``d(α + c/B + T_R(c)) + (k-1)c/B``.

    NV-Group eq. (5), ``2·log2 p·(t_s + M/(2pB)) + log2 p·T_R(M/(2p))``, is
    the Allreduce form for P a power of two (d = log2 P) and C = 2P chunks
    (c = M/(2P)), without the pipeline's streaming term ``(k-1)c/B`` =
    ``(P-1)M/(2PB)``: it counts the 2·log2 p stages one chunk passes through,
    not the time to stream the other chunks after it. It is thus close when α
    and T_R dominate and underestimates by up to M/(2B) for large messages.

    >>> from simcoll import load_topology, make_collective
    >>> algo = double_binary_tree(load_topology("fully-connected:8"), make_collective("allreduce", 8, 16))
    >>> algo.steps  # 2·3 hops + 7 more chunks per tree
    13
    """
    p = collective.num_ranks
    first_half, second_half = _halves(range(collective.num_chunks))
    if collective.name == "allreduce":
        tree1, top1, tree2, top2 = double_binary_tree_pair(range(p))
        transfers = TransferTable.concatenate(
            [_pipelined_allreduce(tree1, top1, first_half), _pipelined_allreduce(tree2, top2, second_half)]
        )
    else:
        root = collective.root
        others = [(root + i) % p for i in range(1, p)]
        tree1, top1, tree2, top2 = double_binary_tree_pair(others) if others else ({}, root, {}, root)
        if others:
            tree1, tree2 = {**tree1, top1: root}, {**tree2, top2: root}
        top1 = top2 = root
        move = _pipelined_broadcast if collective.name == "broadcast" else _pipelined_reduce
        transfers = TransferTable.concatenate([move(tree1, root, first_half, 0), move(tree2, root, second_half, 0)])
    shared = len(_pairs(tree1) & _pairs(tree2))
    depth = max(tree_height(tree1, top1) if tree1 else 0, tree_height(tree2, top2) if tree2 else 0)
    return _build(
        "double-binary-tree", collective, topology, transfers, tops=[top1, top2], depth=depth, shared_pairs=shared
    )


def _pipeline_chunks(collective: str, topology: Topology, **_options: object) -> int:
    """2P chunks: eq. (5)'s M/(2P) per chunk, P per tree."""
    return 2 * topology.num_ranks


GENERATORS = (
    Generator(
        "binomial-tree",
        binomial_tree,
        binomial_tree.collectives,
        "binomial tree, ⌈log2 P⌉ steps of whole buffers (MPICH); Allreduce = Reduce + Broadcast",
        chunks=lambda collective, topology, **_options: 1,
    ),
    Generator(
        "chain",
        chain,
        chain.collectives,
        "pipelined chain from the root; Allreduce = reduce-chain then broadcast-chain",
        {"order": Option("comma-separated rank order of the chain, starting at the root (default: found)", int_list)},
        chunks=lambda collective, topology, **_options: topology.num_ranks,
    ),
    Generator(
        "double-binary-tree",
        double_binary_tree,
        double_binary_tree.collectives,
        "NCCL's double binary tree, pipelined, each tree half the buffer (NV-Group eq. 5)",
        chunks=_pipeline_chunks,
    ),
)

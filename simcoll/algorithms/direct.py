"""Direct (all-pairs) algorithms: every chunk goes straight from the rank that
has it to the rank that needs it.

Where the topology joins every pair of GPUs, each phase is one step (one α).
Where it does not (DGX-1, tori, lines...), chunks travel along shortest-path
trees of the logical GPU graph, so a phase takes as many steps as the tree is
deep (for all-to-all patterns the diameter, the latency lower bound). Tree
parents are chosen greedily to spread the load over links.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

from ..algorithm import Algorithm, Transfer, TransferTable
from ..collectives import Collective
from ..errors import NotApplicableError
from ..routes import Routes, routes_of
from ..topology import Topology
from .common import block_chunks, finish, implements
from .registry import Generator

COLLECTIVES = (
    "allgather",
    "reducescatter",
    "allreduce",
    "broadcast",
    "reduce",
    "gather",
    "scatter",
    "alltoall",
    "alltonext",
    "sendrecv",
)


def shortest_path_trees(
    topology: Topology, routes: Routes, outward: bool = True, roots: Iterable[int] | None = None
) -> dict[int, dict[int, int]]:
    """For every root (all ranks unless ``roots`` is given), a BFS tree
    ``{rank: parent}`` (root excluded). With ``outward`` the tree leads from
    the root to every rank (for copies); otherwise from every rank to the root
    (for reductions and gathers). Among equally near parents, the pair with
    more direct links, then the least used, then the lowest rank wins.

    A BFS level is chosen at once over arrays (rank x rank: whether a route
    joins the pair, its direct links, its use by earlier trees): within one
    tree each edge leads to a different rank, so the choices of a level do not
    change each other's scores."""
    p = topology.num_ranks
    joined = np.stack([routes.reachable_mask(s) for s in range(p)])  # [src, dst]
    links = np.zeros((p, p), dtype=np.int64)
    for s in range(p):
        for d, k in routes.direct_neighbours(s).items():
            links[s, d] = k
    if not outward:  # index [parent, child] by the edge child -> parent
        joined, links = joined.T, links.T
    fewer_links = links.max(initial=0) - links  # smaller is better, >= 0
    load = np.zeros((p, p), dtype=np.int64)  # [parent, child]: trees using the edge so far
    trees = {}
    for root in range(p) if roots is None else roots:
        reached = np.zeros(p, dtype=bool)
        reached[root] = True
        frontier = np.array([root])
        parent: dict[int, int] = {}
        while frontier.size:
            todo = np.flatnonzero(~reached)
            candidate = joined[np.ix_(frontier, todo)]
            found = candidate.any(axis=0)
            nodes = todo[found]
            if not nodes.size:
                break
            at = np.ix_(frontier, nodes)
            used = load[at]
            # lexicographic (fewer links, load, parent rank) as one integer
            key = (fewer_links[at] * (int(used.max()) + 1) + used) * p + frontier[:, None]
            key[~candidate[:, found]] = np.iinfo(np.int64).max
            best = frontier[key.argmin(axis=0)]
            parent.update(zip(nodes.tolist(), best.tolist(), strict=True))
            load[best, nodes] += 1
            reached[nodes] = True
            frontier = nodes
        if not reached.all():
            missing = int(np.flatnonzero(~reached)[0])
            raise NotApplicableError(f"direct: {topology.name} has no path between rank {root} and rank {missing}")
        trees[root] = parent
    return trees


def _path(parent: dict[int, int], root: int, node: int) -> list[int]:
    """Ranks from ``node`` up to ``root`` (inclusive) along ``parent`` links."""
    path = [node]
    while path[-1] != root:
        path.append(parent[path[-1]])
    return path


def _tree_columns(parent: dict[int, int], root: int, p: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(children, their parents, their depths) of a tree ``{child: parent}``
    in its order, the depths found level by level over arrays."""
    children = np.fromiter(parent.keys(), dtype=np.int64, count=len(parent))
    parents = np.fromiter(parent.values(), dtype=np.int64, count=len(parent))
    depth = np.full(p, -1, dtype=np.int64)
    depth[root] = 0
    while True:
        ready = (depth[parents] >= 0) & (depth[children] < 0)
        if not ready.any():
            break
        depth[children[ready]] = depth[parents[ready]] + 1
    if (depth[children] < 0).any():
        raise ValueError(f"the tree of rank {root} does not reach every rank it names")
    return children, parents, depth[children]


def _phase(
    trees: dict[int, dict[int, int]],
    chunks_of: Callable[[int], Iterable[int]],
    p: int,
    step_of_depth: Callable[[np.ndarray, int], np.ndarray],
    up: bool,
) -> tuple[TransferTable, int]:
    """Every root's chunks along its tree, parent to child (copies) or child to
    parent (``up``: reductions), one transfer per edge and chunk in the order
    of the tree and the chunks; a transfer's step is ``step_of_depth`` of its
    child's depth and the deepest tree's height, which it also returns."""
    columns: list[tuple[np.ndarray, ...]] = []
    height = 0
    for root, parent in trees.items():
        chunks = np.fromiter(chunks_of(root), dtype=np.int64)
        children, parents, depths = _tree_columns(parent, root, p)
        if children.size:
            height = max(height, int(depths.max()))
        k = chunks.size
        columns.append((np.tile(chunks, children.size), np.repeat(parents, k), np.repeat(children, k),
                        np.repeat(depths, k)))  # fmt: skip
    if not columns:
        columns.append(tuple(np.zeros(0, dtype=np.int64) for _ in range(4)))
    chunk, parents, children, depths = (np.concatenate(c) for c in zip(*columns, strict=True))
    src, dst = (children, parents) if up else (parents, children)
    return TransferTable(chunk, src, dst, np.full(chunk.size, up), step=step_of_depth(depths, height)), height


def _broadcast_phase(
    trees: dict[int, dict[int, int]], chunks_of: Callable[[int], Iterable[int]], first_step: int, p: int
) -> tuple[TransferTable, int]:
    """Each root's chunks go down its out-tree: depth k receives at step k-1."""
    return _phase(trees, chunks_of, p, lambda depth, _height: first_step + depth - 1, up=False)


def _reduce_phase(
    trees: dict[int, dict[int, int]], chunks_of: Callable[[int], Iterable[int]], p: int
) -> tuple[TransferTable, int]:
    """Each owner's block climbs its in-tree: depth k sends at step H-k, after
    its children (depth k+1, step H-k-1) have reduced into it."""
    return _phase(trees, chunks_of, p, lambda depth, height: height - depth, up=True)


def _routed_copies(hops: Iterable[tuple[int, list[int]]]) -> list[Transfer]:
    """Copy each chunk along its rank path, one hop per step from step 0: a
    relay forwards the chunk in the step after it arrives."""
    return [Transfer(chunk, path[k], path[k + 1], "copy", k) for chunk, path in hops for k in range(len(path) - 1)]


@implements("direct", COLLECTIVES)
def direct(topology: Topology, collective: Collective) -> Algorithm:
    """All-pairs algorithm for every built-in collective.

    Costs below are for a topology joining every pair by its own link of
    bandwidth ``B`` (a rank's sends to different peers run at once), with one
    chunk per block (C = 1; C = P for Allreduce); ``M`` is the buffer the
    collective is named by (nccl-tests). More chunks per block stream back to
    back on a pair, so only the ``T_R`` term shrinks, to one chunk's. Where a
    rank's links are shared (a switch), the bandwidth term becomes the rank's
    whole volume over its egress or ingress bandwidth.

    - Allgather: every rank sends its chunks to every other rank:
      ``α + M/(P·B)``.
    - ReduceScatter: every rank sends its contribution of each block to the
      block's owner, which reduces them: ``α + M/(P·B) + T_R(M/P)``.
    - Allreduce: GC3's two-step All Pairs (§7.1.2): the ReduceScatter phase,
      then the Allgather phase of the reduced blocks:
      ``2α + 2M/(P·B) + T_R(M/P)``.
    - Broadcast: the root sends its buffer to every rank: ``α + M/B``.
    - Reduce: every rank sends its buffer to the root, which reduces them:
      ``α + M/B + T_R(M)``.
    - Gather / Scatter: every rank sends the root its block / the root sends
      every rank its block: ``α + M/(P·B)``.
    - Alltoall: every rank sends each other rank its block (M one rank's
      buffer): ``α + M/(P·B)``.
    - AllToNext (GC3 §7.4's baseline): rank i sends its buffer to rank i+1:
      ``α + M/B``.
    - SendRecv (nccl-tests): as AllToNext, the last rank sending to rank 0:
      ``α + M/B``.

    On topologies without a route between some pair, chunks are forwarded
    along shortest-path trees (module docstring), one step per hop, so a
    phase takes as many steps (α) as its tree is deep.

    >>> from simcoll import load_topology, make_collective
    >>> direct(load_topology("fully-connected:4"), make_collective("allreduce", 4, 4)).steps
    2
    >>> direct(load_topology("line:4"), make_collective("broadcast", 4, root=1)).steps
    2
    """
    routes = routes_of(topology)
    name, root = collective.name, collective.root
    p = topology.num_ranks
    transfers: list[Transfer] | TransferTable
    if name in ("reducescatter", "allreduce"):
        transfers, height = _reduce_phase(
            shortest_path_trees(topology, routes, outward=False), lambda owner: block_chunks(collective, owner), p
        )
        if name == "allreduce":
            gathered, _ = _broadcast_phase(
                shortest_path_trees(topology, routes), lambda s: block_chunks(collective, s), height, p
            )
            transfers = TransferTable.concatenate([transfers, gathered])
    elif name == "allgather":
        transfers, _ = _broadcast_phase(
            shortest_path_trees(topology, routes), lambda s: collective.input_layout[s], 0, p
        )
    elif name == "broadcast":
        tree = shortest_path_trees(topology, routes, roots=[root])
        transfers, _ = _broadcast_phase(tree, lambda _root: range(collective.num_chunks), 0, p)
    elif name == "reduce":
        tree = shortest_path_trees(topology, routes, outward=False, roots=[root])
        transfers, _ = _reduce_phase(tree, lambda _root: range(collective.num_chunks), p)
    elif name == "gather":
        parent = shortest_path_trees(topology, routes, outward=False, roots=[root])[root]
        transfers = _routed_copies((c, _path(parent, root, s)) for s in parent for c in collective.input_layout[s])
    elif name == "scatter":
        parent = shortest_path_trees(topology, routes, roots=[root])[root]
        transfers = _routed_copies(
            (c, _path(parent, root, d)[::-1]) for d in parent for c in collective.output_layout[d]
        )
    else:
        # alltoall, alltonext and sendrecv: each chunk leaves the one rank holding it for
        # the one rank needing it, along the sender's out-tree.
        senders = [s for s in range(collective.num_ranks) if collective.input_layout[s]]
        trees = shortest_path_trees(topology, routes, roots=senders)
        holder = {c: r for r, layout in enumerate(collective.input_layout) for c in layout}
        transfers = _routed_copies(
            (c, _path(trees[holder[c]], holder[c], d)[::-1])
            for d, layout in enumerate(collective.output_layout)
            for c in layout
            if holder[c] != d
        )
    return finish("direct", collective, topology, transfers, routes)


GENERATORS = (
    Generator(
        "direct",
        direct,
        direct.collectives,
        "all-pairs exchange, relayed along shortest-path trees where pairs are not joined; "
        "Allreduce as GC3's two-step All Pairs (§7.1.2)",
    ),
)

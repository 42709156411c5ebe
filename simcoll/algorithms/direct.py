"""Direct (all-pairs) algorithms: every chunk goes straight from the rank that
has it to the rank that needs it.

Where the topology joins every pair of GPUs, each phase is one step (one α).
Where it does not (DGX-1, tori, lines...), chunks travel along shortest-path
trees of the logical GPU graph, so a phase takes as many steps as the tree is
deep (for all-to-all patterns the diameter, the latency lower bound). Tree
parents are chosen greedily to spread the load over links.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable

from ..algorithm import Algorithm, Transfer
from ..collectives import Collective
from ..errors import NotApplicableError
from ..routes import Routes
from ..topology import Topology
from .common import block_chunks, finish, implements, tree_depths
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
)


def shortest_path_trees(
    topology: Topology, routes: Routes, outward: bool = True, roots: Iterable[int] | None = None
) -> dict[int, dict[int, int]]:
    """For every root (all ranks unless ``roots`` is given), a BFS tree
    ``{rank: parent}`` (root excluded). With ``outward`` the tree leads from
    the root to every rank (for copies); otherwise from every rank to the root
    (for reductions and gathers). Among equally near parents, the pair with
    more direct links, then the least used, wins."""
    p = topology.num_ranks
    load: dict[tuple[int, int], int] = defaultdict(int)
    trees = {}
    for root in range(p) if roots is None else roots:
        depth = {root: 0}
        frontier = [root]
        parent: dict[int, int] = {}
        while frontier:
            nxt = []
            for node in range(p):
                if node in depth:
                    continue
                candidates = [
                    f for f in frontier if (routes.connected(f, node) if outward else routes.connected(node, f))
                ]
                if not candidates:
                    continue

                def score(f: int, node: int = node) -> tuple:
                    edge = (f, node) if outward else (node, f)
                    return (-routes.direct_links(*edge), load[edge], f)

                best = min(candidates, key=score)
                parent[node] = best
                load[(best, node) if outward else (node, best)] += 1
                depth[node] = depth[best] + 1
                nxt.append(node)
            frontier = nxt
        if len(depth) < p:
            missing = min(set(range(p)) - set(depth))
            raise NotApplicableError(f"direct: {topology.name} has no path between rank {root} and rank {missing}")
        trees[root] = parent
    return trees


def _path(parent: dict[int, int], root: int, node: int) -> list[int]:
    """Ranks from ``node`` up to ``root`` (inclusive) along ``parent`` links."""
    path = [node]
    while path[-1] != root:
        path.append(parent[path[-1]])
    return path


def _broadcast_phase(
    trees: dict[int, dict[int, int]], chunks_of: Callable[[int], Iterable[int]], first_step: int
) -> tuple[list[Transfer], int]:
    """Each root's chunks go down its out-tree: depth k receives at step k-1."""
    transfers, height = [], 0
    for root, parent in trees.items():
        depth = tree_depths(parent, root)
        for node, par in parent.items():
            for c in chunks_of(root):
                transfers.append(Transfer(c, par, node, "copy", first_step + depth[node] - 1))
        height = max(height, max(depth.values()))
    return transfers, height


def _reduce_phase(
    trees: dict[int, dict[int, int]], chunks_of: Callable[[int], Iterable[int]]
) -> tuple[list[Transfer], int]:
    """Each owner's block climbs its in-tree: depth k sends at step H-k, after
    its children (depth k+1, step H-k-1) have reduced into it."""
    height = max(max(tree_depths(parent, root).values()) for root, parent in trees.items())
    transfers = []
    for root, parent in trees.items():
        depth = tree_depths(parent, root)
        for node, par in parent.items():
            for c in chunks_of(root):
                transfers.append(Transfer(c, node, par, "reduce", height - depth[node]))
    return transfers, height


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

    On topologies without a route between some pair, chunks are forwarded
    along shortest-path trees (module docstring), one step per hop, so a
    phase takes as many steps (α) as its tree is deep.

    >>> from simcoll import load_topology, make_collective
    >>> direct(load_topology("fully-connected:4"), make_collective("allreduce", 4, 4)).steps
    2
    >>> direct(load_topology("line:4"), make_collective("broadcast", 4, root=1)).steps
    2
    """
    routes = Routes(topology)
    name, root = collective.name, collective.root
    transfers: list[Transfer] = []
    if name in ("reducescatter", "allreduce"):
        reduced, height = _reduce_phase(
            shortest_path_trees(topology, routes, outward=False), lambda owner: block_chunks(collective, owner)
        )
        transfers += reduced
        if name == "allreduce":
            gathered, _ = _broadcast_phase(
                shortest_path_trees(topology, routes), lambda s: block_chunks(collective, s), height
            )
            transfers += gathered
    elif name == "allgather":
        transfers, _ = _broadcast_phase(shortest_path_trees(topology, routes), lambda s: collective.input_layout[s], 0)
    elif name == "broadcast":
        tree = shortest_path_trees(topology, routes, roots=[root])
        transfers, _ = _broadcast_phase(tree, lambda _root: range(collective.num_chunks), 0)
    elif name == "reduce":
        tree = shortest_path_trees(topology, routes, outward=False, roots=[root])
        transfers, _ = _reduce_phase(tree, lambda _root: range(collective.num_chunks))
    elif name == "gather":
        parent = shortest_path_trees(topology, routes, outward=False, roots=[root])[root]
        transfers = _routed_copies((c, _path(parent, root, s)) for s in parent for c in collective.input_layout[s])
    elif name == "scatter":
        parent = shortest_path_trees(topology, routes, roots=[root])[root]
        transfers = _routed_copies(
            (c, _path(parent, root, d)[::-1]) for d in parent for c in collective.output_layout[d]
        )
    else:
        # alltoall and alltonext: each chunk leaves the one rank holding it for
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

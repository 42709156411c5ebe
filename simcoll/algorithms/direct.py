"""Direct (all-pairs) algorithms: every rank sends to every other rank.

Where the topology joins every pair of GPUs, each phase is one step (one α).
Where it does not (DGX-1, tori...), chunks travel along a shortest-path tree
of the logical GPU graph, so a phase takes as many steps as the tree is deep
(the diameter, which is the latency lower bound). Tree parents are chosen
greedily to spread the load over links.
"""

from __future__ import annotations

from collections import defaultdict

from ..algorithm import Algorithm, Transfer
from ..collectives import Collective
from ..errors import NotApplicableError
from ..routes import Routes
from ..topology import Topology
from .common import block_chunks, finish, require
from .registry import Generator


def shortest_path_trees(topology: Topology, routes: Routes, outward: bool = True) -> dict[int, dict[int, int]]:
    """For every root, a BFS tree ``{rank: parent}`` (root excluded). With
    ``outward`` the tree leads from the root to every rank (for copies);
    otherwise from every rank to the root (for reductions). Among equally
    near parents, the pair with more direct links, then the least used, wins."""
    p = topology.num_ranks
    load: dict[tuple[int, int], int] = defaultdict(int)
    trees = {}
    for root in range(p):
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


def _depths(parent: dict[int, int], root: int) -> dict[int, int]:
    depth = {root: 0}

    def d(n: int) -> int:
        if n not in depth:
            depth[n] = d(parent[n]) + 1
        return depth[n]

    for n in parent:
        d(n)
    return depth


def _broadcast_phase(trees, chunks_of, first_step: int) -> tuple[list[Transfer], int]:
    """Each root's chunks go down its out-tree: depth k receives at step k-1."""
    transfers, height = [], 0
    for root, parent in trees.items():
        depth = _depths(parent, root)
        for node, par in parent.items():
            for c in chunks_of(root):
                transfers.append(Transfer(c, par, node, "copy", first_step + depth[node] - 1))
        height = max(height, max(depth.values()))
    return transfers, height


def _reduce_phase(trees, chunks_of) -> tuple[list[Transfer], int]:
    """Each owner's block climbs its in-tree: depth k sends at step H-k, after
    its children (depth k+1, step H-k-1) have reduced into it."""
    height = max(max(_depths(parent, root).values()) for root, parent in trees.items())
    transfers = []
    for root, parent in trees.items():
        depth = _depths(parent, root)
        for node, par in parent.items():
            for c in chunks_of(root):
                transfers.append(Transfer(c, node, par, "reduce", height - depth[node]))
    return transfers, height


def direct(topology: Topology, collective: Collective) -> Algorithm:
    """All-pairs algorithm.

    - Allgather: every rank sends its C chunks to every other rank
      (one step when all pairs are joined). Cost ``α + (P-1)·M/(P·B_out)``,
      B_out a rank's egress bandwidth.
    - ReduceScatter: every rank sends its contribution of each block to the
      block's owner, which reduces P-1 partials: ``α + (P-1)·M/(P·B_in) + T_R``.
    - Allreduce: GC3's two-step All Pairs (§7.1.2): the ReduceScatter phase,
      then the Allgather phase of the reduced blocks: ``2α + 2(P-1)·M/(P·B)``.

    On topologies without a route between some pair, chunks are forwarded
    along shortest-path trees (module docstring), one step per hop.

    >>> from simcoll import load_topology, make_collective
    >>> direct(load_topology("fully-connected:4"), make_collective("allreduce", 4, 4)).steps
    2
    """
    require(collective, topology, ("allgather", "reducescatter", "allreduce"), "direct")
    routes = Routes(topology)
    transfers: list[Transfer] = []
    if collective.name in ("reducescatter", "allreduce"):
        reduced, height = _reduce_phase(
            shortest_path_trees(topology, routes, outward=False), lambda owner: block_chunks(collective, owner)
        )
        transfers += reduced
    else:
        height = 0
    if collective.name == "allgather":
        gathered, _ = _broadcast_phase(shortest_path_trees(topology, routes), lambda s: collective.input_layout[s], 0)
        transfers += gathered
    elif collective.name == "allreduce":
        gathered, _ = _broadcast_phase(
            shortest_path_trees(topology, routes), lambda s: block_chunks(collective, s), height
        )
        transfers += gathered
    return finish("direct", collective, topology, transfers, routes)


GENERATORS = (
    Generator(
        "direct",
        direct,
        ("allgather", "reducescatter", "allreduce"),
        "all-pairs exchange; Allreduce as GC3's two-step All Pairs (§7.1.2)",
    ),
)

"""Routes between GPUs, and the logical GPU graph the algorithms see.

GPUs are endpoints: a route from rank *s* to rank *d* may cross switches,
PCIe trees, CPUs, host memory and NICs, but never another GPU (relaying
through a GPU is an algorithm's decision, not the network's). When the GPU
fabric (NVLink, xGMI, Infinity Fabric, Xe Link, and NVSwitches) joins the two
GPUs, routes use it alone, as NCCL does; otherwise any link may be used (PCIe
trees, host memory, NICs and the network). Among such routes we keep the
*shortest* ones (fewest hops), and all parallel shortest paths (e.g. the six
NVSwitch planes of a DGX-2) are used together.

:class:`Routes` is structure only; bandwidths come from a cost model in
:meth:`simcoll.machines.Machine.route`.
"""

from __future__ import annotations

import weakref
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .algorithm import BandwidthConstraint, PairSet
from .limits import check_build_time, check_rank_pair_bytes
from .topology import FABRIC_LINK_TYPES, SHARED_ROUTES, Topology, directed_pairs

if TYPE_CHECKING:
    import networkx as nx


@dataclass(frozen=True)
class RouteHop:
    """``count`` parallel links of ``type`` from component ``src`` to ``dst``."""

    src: str
    dst: str
    type: str
    count: int


class Routes:
    """Shortest routes between every pair of ranks of a topology (computed lazily)."""

    def __init__(self, topology: Topology):
        self.topology = topology
        self._out: dict[str, list[RouteHop]] = {c.name: [] for c in topology.components}
        self._in: dict[str, list[RouteHop]] = {c.name: [] for c in topology.components}
        merged: dict[tuple[str, str, str], int] = {}
        for link in topology.links:
            for a, b in directed_pairs(link):
                merged[(a, b, link.type)] = merged.get((a, b, link.type), 0) + link.count
        for (a, b, kind), count in merged.items():
            hop = RouteHop(a, b, kind, count)
            self._out[a].append(hop)
            self._in[b].append(hop)
        self._gpu_names = {g.name for g in topology.gpus}
        self._names = [topology.gpu(r).name for r in range(topology.num_ranks)]
        self._rank_of = {g.name: g.rank for g in topology.gpus}
        self._out_position = {(h.src, h.dst, h.type): i for hops in self._out.values() for i, h in enumerate(hops)}
        self._preds: dict[tuple[str, bool], dict[str, list[RouteHop]]] = {}
        self._on_routes: frozenset[tuple[str, str, str]] | None = None
        self._order: dict[tuple[str, bool], dict[str, int]] = {}
        self._reachable: dict[int, list[int]] = {}
        self._dist: dict[tuple[str, bool, bool], dict[str, int]] = {}
        self._hops: dict[tuple[int, int], tuple[RouteHop, ...] | None] = {}
        self._length: dict[tuple[int, int], int] = {}
        self._to_first: dict[int | None, np.ndarray | None] = {}  # per node: rank permutation (_to_first_node)
        self._reach_masks: dict[int, np.ndarray] = {}
        self._members: dict[int | None, list] | None = None  # each node's components
        self._swaps: dict[int | None, dict[str, str] | None] = {}
        # direct_links by rank pair: NCCL's ring search on 1,024 GPUs asks 200,000 times
        self._direct: dict[tuple[int, int], int] = {}

    def _distances(self, start: str, forward: bool, fabric_only: bool) -> dict[str, int]:
        key = (start, forward, fabric_only)
        if key not in self._dist:
            self._dist[key] = self._bfs(start, forward, fabric_only)
        return self._dist[key]

    def _usable(self, hop: RouteHop, fabric_only: bool) -> bool:
        return not fabric_only or hop.type in FABRIC_LINK_TYPES

    def _bfs(self, start: str, forward: bool, fabric_only: bool) -> dict[str, int]:
        adjacency = self._out if forward else self._in
        dist = {start: 0}
        queue = deque([start])
        while queue:
            node = queue.popleft()
            if node != start and node in self._gpu_names:
                continue  # GPUs end routes; they do not forward
            for hop in adjacency[node]:
                if not self._usable(hop, fabric_only):
                    continue
                nxt = hop.dst if forward else hop.src
                if nxt not in dist:
                    dist[nxt] = dist[node] + 1
                    queue.append(nxt)
        return dist

    def _mode(self, src: int, dst: int) -> tuple[bool, dict[str, int]] | None:
        """(fabric_only, distances from ``src``) of the routes ``src -> dst``
        use: the GPU fabric alone when it joins them, else any link; None
        when no route avoids the other GPUs."""
        s, d = self._names[src], self._names[dst]
        for fabric_only in (True, False):
            dist_from = self._distances(s, True, fabric_only)
            if src != dst and d in dist_from:
                return fabric_only, dist_from
        return None

    def hops(self, src: int, dst: int) -> tuple[RouteHop, ...] | None:
        """The hops on any shortest route from rank ``src`` to rank ``dst``
        (a DAG), or ``None`` when no route avoids the other GPUs.

        Found by walking back from ``dst`` over the hops that shorten the
        distance from ``src`` by one (only the DAG is visited, not the whole
        fabric), and listed in breadth-first order from ``src``."""
        key = (src, dst)
        if key not in self._hops:
            mode = self._mode(src, dst)
            if mode is None:
                self._hops[key] = None
            else:
                fabric_only, dist_from = mode
                d = self._names[dst]
                self._length[key] = dist_from[d]
                self._hops[key] = self._dag(self._names[src], {d}, fabric_only, dist_from)
        return self._hops[key]

    def _dag(self, s: str, targets: set[str], fabric_only: bool, dist_from: dict[str, int]) -> tuple[RouteHop, ...]:
        """Every hop on a shortest route from ``s`` to one of ``targets``
        (which ``dist_from`` reaches), in breadth-first order from ``s`` and
        each node's link order."""
        # Each node's hops from the previous distance are worked out once per source and kept: the
        # walks back from a source's destinations meet at the same switches, whose in-hops are many.
        found = self._walk_back(s, targets, fabric_only, dist_from, self._preds.setdefault((s, fabric_only), {}))
        order = self._bfs_order(s, fabric_only, dist_from)
        position = self._out_position
        return tuple(sorted(found.values(), key=lambda h: (order[h.src], position[h.src, h.dst, h.type])))

    def _walk_back(
        self, s: str, targets: set[str], fabric_only: bool, dist_from: dict[str, int], preds: dict[str, list[RouteHop]]
    ) -> dict[int, RouteHop]:
        """The hops of :meth:`_dag` by ``id`` (hashing the frozen dataclass
        costs more than the walk), unordered; ``preds`` keeps each node's
        hops from the previous distance."""
        found: dict[int, RouteHop] = {}
        frontier = set(targets)
        while frontier:
            back: set[str] = set()
            for node in frontier:
                into = preds.get(node)
                if into is None:
                    want = dist_from[node] - 1
                    into = preds[node] = [
                        hop
                        for hop in self._in[node]
                        if dist_from.get(hop.src) == want
                        and self._usable(hop, fabric_only)
                        and (hop.src == s or hop.src not in self._gpu_names)
                    ]
                for hop in into:
                    found[id(hop)] = hop
                    if hop.src != s:
                        back.add(hop.src)
            frontier = back
        return found

    def _bfs_order(self, s: str, fabric_only: bool, dist_from: dict[str, int]) -> dict[str, int]:
        key = (s, fabric_only)
        if key not in self._order:
            self._order[key] = {node: i for i, node in enumerate(dist_from)}
        return self._order[key]

    def swap_to_first_node(self, src: int) -> dict[str, str] | None:
        """The component names swapped between rank ``src``'s node and the
        first node (``n<j>.x`` <-> ``n<first>.x``) when that swap is a
        symmetry of the topology (:meth:`_node_swap`, checked), else None
        (also for the first node itself and for GPUs outside the nodes).
        Routes map through it: whether one exists, which GPUs are joined
        directly, and every hop of a pair's routes are those of its image."""
        node = self.topology.gpu(src).node
        if node not in self._swaps:
            nodes = self.topology.nodes
            swap = None
            if node is not None and len(nodes) > 1 and node != nodes[0]:
                if self._members is None:
                    self._members = {}
                    for c in self.topology.components:
                        self._members.setdefault(c.node, []).append(c)
                swap = self._node_swap(nodes[0], node, self._members)
            self._swaps[node] = swap
        return self._swaps[node]

    def _to_first_node(self, src: int) -> np.ndarray | None:
        """The rank permutation of :meth:`swap_to_first_node` (an involution:
        ``perm[r]`` is the image of rank ``r``), or None. A cluster's GPUs
        are searched from the first node's alone."""
        node = self.topology.gpu(src).node
        if node not in self._to_first:
            swap = self.swap_to_first_node(src)
            perm = None
            if swap is not None:
                perm = np.arange(self.topology.num_ranks)
                for a, b in swap.items():
                    if a in self._rank_of:
                        perm[self._rank_of[a]] = self._rank_of[b]
            self._to_first[node] = perm
        return self._to_first[node]

    def first_node_permutation(self, src: int) -> np.ndarray | None:
        """The rank permutation of :meth:`swap_to_first_node` for rank
        ``src``'s node (``perm[r]``: the image of rank ``r``; do not write to
        it), or None where there is no such swap."""
        return self._to_first_node(src)

    def image_in_first_node(self, src: int, dst: int) -> tuple[int, int] | None:
        """The rank pair ``(src, dst)`` maps to when ``src``'s node is swapped
        with the first node (:meth:`swap_to_first_node`), or None."""
        perm = self._to_first_node(src)
        return None if perm is None else (int(perm[src]), int(perm[dst]))

    def reachable_mask(self, src: int) -> np.ndarray:
        """Per rank: whether ``src`` has a route to it (a boolean array; a
        GPU of another node of a cluster gets the first node's, permuted)."""
        mask = self._reach_masks.get(src)
        if mask is None:
            perm = self._to_first_node(src)
            if perm is None:
                mask = np.zeros(self.topology.num_ranks, dtype=bool)
                mask[self._reachable_from(src)] = True
            else:
                mask = self.reachable_mask(int(perm[src]))[perm]
            self._reach_masks[src] = mask
        return mask

    def reachable(self, src: int) -> list[int]:
        """The ranks ``src`` has a route to, ascending."""
        if src not in self._reachable:
            self._reachable[src] = np.flatnonzero(self.reachable_mask(src)).tolist()
        return self._reachable[src]

    def _reachable_from(self, src: int) -> list[int]:
        """:meth:`reachable` searched from ``src`` itself."""
        s = self._names[src]
        ranks = set()
        for fabric_only in (True, False):
            ranks.update(self._rank_of[n] for n in self._distances(s, True, fabric_only) if n in self._rank_of)
        ranks.discard(src)
        return sorted(ranks)

    def hops_on_routes(self) -> frozenset[tuple[str, str, str]]:
        """Every directed (src, dst, type) link that lies on some GPU-to-GPU route.

        Worked out once. In a cluster of identical nodes (the ``n<i>.``
        copies of :func:`~simcoll.topology_generators.cluster`), swapping the
        first node with node *j* maps the topology onto itself, and so maps
        the routes from the first node's GPUs onto those from node *j*'s: the
        walks back are done for the first node's GPUs only, and for every
        node whose swap is checked to be such a symmetry, their hops are
        mapped over (bit-identical to walking from every GPU: tested)."""
        if self._on_routes is None:
            ranks_of: dict[int | None, list[int]] = {}
            for g in self.topology.gpus:
                ranks_of.setdefault(g.node, []).append(g.rank)
            nodes = sorted(n for n in ranks_of if n is not None)
            used = self._hops_from(ranks_of.get(None, []))
            if nodes:
                first = nodes[0]
                base = self._hops_from(ranks_of[first])
                used |= base
                node_of = {c.name: c.node for c in self.topology.components}
                touching: dict[int, list[tuple[str, str, str]]] = {}
                for hop in base:
                    for end in {node_of[hop[0]], node_of[hop[1]]} - {None}:
                        touching.setdefault(end, []).append(hop)
                for n in nodes[1:]:
                    swap = self.swap_to_first_node(ranks_of[n][0])
                    if swap is None:
                        used |= self._hops_from(ranks_of[n])
                        continue
                    for a, b, kind in touching.get(first, []) + touching.get(n, []):
                        used.add((swap.get(a, a), swap.get(b, b), kind))
            self._on_routes = frozenset(used)
        return self._on_routes

    def _hops_from(self, sources) -> set[tuple[str, str, str]]:
        """The (src, dst, type) hops on routes from ``sources`` (ranks)."""
        used: set[tuple[str, str, str]] = set()
        for src in sources:
            s = self._names[src]
            fabric = {n for n in self._distances(s, True, True) if n in self._gpu_names} - {s}
            other = {n for n in self._distances(s, True, False) if n in self._gpu_names} - fabric - {s}
            for fabric_only, targets in ((True, fabric), (False, other)):
                if targets:
                    found = self._walk_back(s, targets, fabric_only, self._distances(s, True, fabric_only), {})
                    used.update((h.src, h.dst, h.type) for h in found.values())
        return used

    def _node_swap(self, a: int, b: int, members: dict[int | None, list]) -> dict[str, str] | None:
        """Names swapped between nodes ``a`` and ``b`` (``n<a>.x`` <-> ``n<b>.x``)
        when that maps every link onto a link of the same type and count and
        every component onto one of the same kind - a symmetry of the
        topology - else None. ``members`` lists each node's components."""
        local: dict[int, dict[str, object]] = {}
        for n in (a, b):
            prefix = f"n{n}."
            if not all(c.name.startswith(prefix) for c in members[n]):
                return None
            local[n] = {c.name[len(prefix) :]: c for c in members[n]}
        if local[a].keys() != local[b].keys():
            return None
        swap: dict[str, str] = {}
        for name, ca in local[a].items():
            cb = local[b][name]
            if (ca.kind, ca.rank is None) != (cb.kind, cb.rank is None):
                return None
            swap[ca.name], swap[cb.name] = cb.name, ca.name
        hops = {(h.src, h.dst, h.type, h.count) for name in swap for h in (*self._out[name], *self._in[name])}
        if {(swap.get(s, s), swap.get(d, d), t, k) for s, d, t, k in hops} != hops:
            return None
        return swap

    def connected(self, src: int, dst: int) -> bool:
        """Whether a route joins rank ``src`` to rank ``dst`` (another rank)."""
        if src == dst:
            return False
        perm = self._to_first_node(src)
        if perm is not None:
            src, dst = int(perm[src]), int(perm[dst])
        return self._mode(src, dst) is not None

    def direct_neighbours(self, src: int) -> dict[int, int]:
        """``{rank: direct_links(src, rank)}`` for the GPUs joined to ``src``
        directly (only its own links are looked at)."""
        perm = self._to_first_node(src)
        if perm is not None:
            return {int(perm[d]): k for d, k in self.direct_neighbours(int(perm[src])).items()}
        out: dict[int, int] = {}
        for hop in self._out[self._names[src]]:
            d = self._rank_of.get(hop.dst)
            if d is not None and d not in out:
                links = self.direct_links(src, d)
                if links:
                    out[d] = links
        return out

    def direct_links(self, src: int, dst: int) -> int:
        """Number of links joining the two GPUs directly."""
        key = (src, dst)
        links = self._direct.get(key)
        if links is None:
            links = self._direct[key] = self._direct_links(src, dst)
        return links

    def _direct_links(self, src: int, dst: int) -> int:
        perm = self._to_first_node(src)
        if perm is not None:
            src, dst = int(perm[src]), int(perm[dst])
        mode = self._mode(src, dst)
        if mode is None:
            return 0
        fabric_only, dist_from = mode
        s, d = self._names[src], self._names[dst]
        if dist_from[d] != 1:
            return 0
        return sum(h.count for h in self._out[s] if h.dst == d and self._usable(h, fabric_only))

    def logical_graph(self) -> nx.DiGraph:
        """Directed graph on ranks with an edge wherever a route exists;
        edge attribute ``hops`` is the route length in links."""
        import networkx as nx

        graph = nx.DiGraph()
        p = self.topology.num_ranks
        graph.add_nodes_from(range(p))
        for s in range(p):
            for d in self.reachable(s):
                _, dist_from = self._mode(s, d)
                graph.add_edge(s, d, hops=dist_from[self._names[d]])
        return graph


def routes_of(topology: Topology) -> Routes:
    """The one :class:`Routes` of ``topology`` (this very object), kept
    with it: what a generator, the verifier or a machine works out about
    its routes serves the others (on 1,024 GPUs each of a comparison's
    twenty generators built its own, 60-100 ms, and searched the same
    paths again). A pickled copy of the topology leaves them behind.

    >>> from simcoll.machines import load_topology
    >>> topology = load_topology("dgx1")
    >>> routes_of(topology) is routes_of(topology)
    True
    """
    routes = topology.__dict__.get(SHARED_ROUTES)
    if routes is None:
        routes = Routes(topology)
        object.__setattr__(topology, SHARED_ROUTES, routes)  # (a cache, not a field of the frozen dataclass)
    return routes


# Generators, the verifier and the synthesizers all ask for the relation of the
# same few topologies; it depends on the topology alone, so keep it per topology.
_RELATIONS: weakref.WeakKeyDictionary[Topology, tuple[BandwidthConstraint, ...]] = weakref.WeakKeyDictionary()


def route_shape(
    hops: Sequence[RouteHop], src: str, dst: str
) -> tuple[tuple[tuple[int, int, str, int], ...], tuple[str, ...]]:
    """A route's *shape*: its hops as ``(from, to, link type, count)`` between
    components numbered in order of appearance (``src`` 0, ``dst`` 1), and the
    components in that order. Routes of one shape (every GPU pair of a node,
    every pair of nodes of a cluster) differ only in names, so whatever is
    computed from the links alone - a max flow - is computed once per shape.

    >>> hops = [RouteHop("gpu0", "sw", "nvlink", 2), RouteHop("sw", "gpu3", "nvlink", 2)]
    >>> route_shape(hops, "gpu0", "gpu3")
    (((0, 2, 'nvlink', 2), (2, 1, 'nvlink', 2)), ('gpu0', 'gpu3', 'sw'))
    """
    index = {src: 0, dst: 1}
    for hop in hops:
        index.setdefault(hop.src, len(index))
        index.setdefault(hop.dst, len(index))
    return tuple((index[h.src], index[h.dst], h.type, h.count) for h in hops), tuple(index)


def shape_flow_graph(
    edges: Sequence[tuple[int, int, str, int]], link_Bps: Callable[[str], float]
) -> tuple[nx.DiGraph, list[float]]:
    """The max-flow graph of a route shape (:func:`route_shape`): each hop's
    capacity is its link count times ``link_Bps(type)``, parallel hops between
    two components adding up; also each hop's own capacity, in order."""
    import networkx as nx

    graph = nx.DiGraph()
    capacities = []
    for u, v, kind, count in edges:
        capacity = count * link_Bps(kind)
        capacities.append(capacity)
        if graph.has_edge(u, v):
            graph[u][v]["capacity"] += capacity
        else:
            graph.add_edge(u, v, capacity=capacity)
    return graph, capacities


def bandwidth_relation(topology: Topology, routes: Routes | None = None) -> tuple[BandwidthConstraint, ...]:
    """SCCL's bandwidth relation B (§3.2.1) derived from a topology, every link
    carrying one chunk per round:

    - a pair of GPUs joined directly by ``k`` links: ``({(s, d)}, k)``;
    - a GPU reaching others only through switches, PCIe or NICs: its egress
      ``({(s, d) | d reached so}, k_out)`` and ingress constraints, where
      ``k_out`` / ``k_in`` count its links on those routes;
    - in a multi-node machine, each node's egress and ingress through its
      NICs: ``({(s, d) | s in node, d elsewhere}, links from its NICs)``.

    The result is cached per topology (``routes`` only saves recomputing them).
    It depends on the topology alone, so it takes one (not a Machine).

    Parameters
    ----------
    topology : Topology
        The topology (``machine.topology`` for a Machine).
    routes : Routes, optional
        Its routes, when already computed.

    Returns
    -------
    tuple of BandwidthConstraint
        The constraints ``(links, chunks_per_round)`` of B.

    References
    ----------
    .. [1] Cai et al., "Synthesizing Optimal Collective Algorithms" (SCCL),
       PPoPP 2021, §3.2.1 (the bandwidth relation B).

    Examples
    --------
    >>> from simcoll import load_topology
    >>> b = bandwidth_relation(load_topology("ring:4"))
    >>> len(b), b[0].links, b[0].chunks_per_round  # one constraint per directed link
    (8, frozenset({(0, 1)}), 1)
    """
    cached = _RELATIONS.get(topology)
    if cached is None:
        check_relation_size(topology)
        cached = _RELATIONS[topology] = _bandwidth_relation(topology, routes or routes_of(topology))
    return cached


def check_relation_size(topology: Topology) -> None:
    """Refuse, in one line, a topology whose bandwidth relation (:func:`bandwidth_relation`,
    which every generated Algorithm's rounds need) would be too large to build
    (:func:`simcoll.limits.check_rank_pair_bytes`): generators check it first."""
    p = topology.num_ranks  # reach and direct masks, pair keys, and each rank's egress and ingress pairs
    check_rank_pair_bytes(26 * p * p, f"the bandwidth relation of {topology.name} ({p:,} ranks, SCCL §3.2.1)")


def _bandwidth_relation(topology: Topology, routes: Routes) -> tuple[BandwidthConstraint, ...]:
    p = topology.num_ranks
    constraints: list[BandwidthConstraint] = []
    # who reaches whom, and over a direct link: P x P masks (a cluster's rows from its first node's)
    reach = np.zeros((p, p), dtype=bool)
    direct = np.zeros((p, p), dtype=bool)
    for s in range(p):
        if s % 64 == 0:
            check_build_time("working out SCCL's bandwidth relation")
        reach[s] = routes.reachable_mask(s)
        neighbours = routes.direct_neighbours(s)
        for d in sorted(neighbours):
            constraints.append(BandwidthConstraint(frozenset({(s, d)}), neighbours[d], f"link {s}->{d}"))
            direct[s, d] = True
    via_fabric = reach & ~direct  # (pair keys s * P + d worked out where used: 134 MB as a table on 4,096 GPUs)
    gpu_names = {g.name: g.rank for g in topology.gpus}
    fabric_out = {r: 0 for r in range(p)}
    fabric_in = {r: 0 for r in range(p)}
    on_routes = routes.hops_on_routes()
    for link in topology.links:
        for a, b in directed_pairs(link):
            if (a, b, link.type) not in on_routes:
                continue
            if a in gpu_names and b not in gpu_names:
                fabric_out[gpu_names[a]] += link.count
            if b in gpu_names and a not in gpu_names:
                fabric_in[gpu_names[b]] += link.count
    for r in range(p):
        if via_fabric[r].any():
            pairs = PairSet(r * p + np.flatnonzero(via_fabric[r]), p)
            constraints.append(BandwidthConstraint(pairs, fabric_out[r], f"rank {r} egress"))
        if via_fabric[:, r].any():
            pairs = PairSet(np.flatnonzero(via_fabric[:, r]) * p + r, p)
            constraints.append(BandwidthConstraint(pairs, fabric_in[r], f"rank {r} ingress"))
    if len(topology.nodes) > 1:
        comps = {c.name: c for c in topology.components}
        out_links = dict.fromkeys(topology.nodes, 0)
        in_links = dict.fromkeys(topology.nodes, 0)
        for link in topology.links:
            for a, b in directed_pairs(link):
                ca, cb = comps[a], comps[b]
                if ca.kind == "nic" and ca.node is not None and cb.node != ca.node:
                    out_links[ca.node] += link.count
                if cb.kind == "nic" and cb.node is not None and ca.node != cb.node:
                    in_links[cb.node] += link.count
        for node in topology.nodes:
            ranks = np.array(topology.ranks_of_node(node), dtype=np.int64)
            inside = np.zeros(p, dtype=bool)
            inside[ranks] = True
            outward = reach[ranks] & ~inside[None, :]  # rows: the node's ranks
            inward = reach[:, ranks] & ~inside[:, None]  # columns: the node's ranks
            if outward.any():
                i, j = np.nonzero(outward)
                pairs = PairSet(ranks[i] * p + j, p)
                constraints.append(BandwidthConstraint(pairs, out_links[node], f"node {node} egress"))
            if inward.any():
                i, j = np.nonzero(inward)
                pairs = PairSet(i * p + ranks[j], p)
                constraints.append(BandwidthConstraint(pairs, in_links[node], f"node {node} ingress"))
    return tuple(constraints)

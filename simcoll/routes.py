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
from dataclasses import dataclass

import networkx as nx

from .algorithm import BandwidthConstraint
from .topology import FABRIC_LINK_TYPES, Topology, directed_pairs


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
        self._dist: dict[tuple[str, bool, bool], dict[str, int]] = {}
        self._hops: dict[tuple[int, int], tuple[RouteHop, ...] | None] = {}
        self._length: dict[tuple[int, int], int] = {}

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

    def hops(self, src: int, dst: int) -> tuple[RouteHop, ...] | None:
        """The hops on any shortest route from rank ``src`` to rank ``dst``
        (a DAG), or ``None`` when no route avoids the other GPUs."""
        key = (src, dst)
        if key not in self._hops:
            self._hops[key] = None
            s, d = self.topology.gpu(src).name, self.topology.gpu(dst).name
            for fabric_only in (True, False):
                dist_from = self._distances(s, True, fabric_only)
                if src == dst or d not in dist_from:
                    continue
                dist_to = self._distances(d, False, fabric_only)
                total = dist_from[d]
                self._length[key] = total
                dag = []
                for node, ds in dist_from.items():
                    if node != s and node in self._gpu_names:
                        continue
                    for hop in self._out[node]:
                        if self._usable(hop, fabric_only) and hop.dst in dist_to and ds + 1 + dist_to[hop.dst] == total:
                            if hop.dst == d or hop.dst not in self._gpu_names:
                                dag.append(hop)
                self._hops[key] = tuple(dag)
                break
        return self._hops[key]

    def hops_on_routes(self) -> set[tuple[str, str, str]]:
        """Every directed (src, dst, type) link that lies on some GPU-to-GPU route."""
        used = set()
        p = self.topology.num_ranks
        for s in range(p):
            for d in range(p):
                used.update((h.src, h.dst, h.type) for h in self.hops(s, d) or ())
        return used

    def connected(self, src: int, dst: int) -> bool:
        return src != dst and self.hops(src, dst) is not None

    def direct_links(self, src: int, dst: int) -> int:
        """Number of links joining the two GPUs directly."""
        hops = self.hops(src, dst) or ()
        d = self.topology.gpu(dst).name
        s = self.topology.gpu(src).name
        return sum(h.count for h in hops if h.src == s and h.dst == d)

    def logical_graph(self) -> nx.DiGraph:
        """Directed graph on ranks with an edge wherever a route exists;
        edge attribute ``hops`` is the route length in links."""
        graph = nx.DiGraph()
        p = self.topology.num_ranks
        graph.add_nodes_from(range(p))
        for s in range(p):
            for d in range(p):
                if self.connected(s, d):
                    graph.add_edge(s, d, hops=self._length[(s, d)])
        return graph


# Generators, the verifier and the synthesizers all ask for the relation of the
# same few topologies; it depends on the topology alone, so keep it per topology.
_RELATIONS: weakref.WeakKeyDictionary[Topology, tuple[BandwidthConstraint, ...]] = weakref.WeakKeyDictionary()


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
        cached = _RELATIONS[topology] = _bandwidth_relation(topology, routes or Routes(topology))
    return cached


def _bandwidth_relation(topology: Topology, routes: Routes) -> tuple[BandwidthConstraint, ...]:
    p = topology.num_ranks
    constraints: list[BandwidthConstraint] = []
    via_fabric: dict[int, set[tuple[int, int]]] = {r: set() for r in range(p)}
    into_fabric: dict[int, set[tuple[int, int]]] = {r: set() for r in range(p)}
    for s in range(p):
        for d in range(p):
            if not routes.connected(s, d):
                continue
            direct = routes.direct_links(s, d)
            if direct:
                constraints.append(BandwidthConstraint(frozenset({(s, d)}), direct, f"link {s}->{d}"))
            else:
                via_fabric[s].add((s, d))
                into_fabric[d].add((s, d))
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
        if via_fabric[r]:
            constraints.append(BandwidthConstraint(frozenset(via_fabric[r]), fabric_out[r], f"rank {r} egress"))
        if into_fabric[r]:
            constraints.append(BandwidthConstraint(frozenset(into_fabric[r]), fabric_in[r], f"rank {r} ingress"))
    if len(topology.nodes) > 1:
        comps = {c.name: c for c in topology.components}
        for node in topology.nodes:
            out_links = in_links = 0
            for link in topology.links:
                for a, b in directed_pairs(link):
                    ca, cb = comps[a], comps[b]
                    if ca.kind == "nic" and ca.node == node and cb.node != node:
                        out_links += link.count
                    if cb.kind == "nic" and cb.node == node and ca.node != node:
                        in_links += link.count
            ranks = set(topology.ranks_of_node(node))
            outward = frozenset((s, d) for s in ranks for d in range(p) if d not in ranks and routes.connected(s, d))
            inward = frozenset((s, d) for d in ranks for s in range(p) if s not in ranks and routes.connected(s, d))
            if outward:
                constraints.append(BandwidthConstraint(outward, out_links, f"node {node} egress"))
            if inward:
                constraints.append(BandwidthConstraint(inward, in_links, f"node {node} ingress"))
    return tuple(constraints)

"""NCCL's algorithms, built the way NCCL builds them.

``nccl-ring``: NCCL's ring channels. NCCL's graph search (``src/graph/search.cc``,
pattern ``NCCL_TOPO_PATTERN_RING``) gives every channel one ring; on more than
one node each channel's intra-node path enters a node through a network card and
leaves it through a network card next to its last GPU, so the rings of
different channels use different NICs ("rail-aligned" rings on DGX-class
nodes, where every GPU has its own NIC; NCCL docs, "NCCL_CROSS_NIC"). Inside a
node the path runs over NVLink / NVSwitch (or PCIe where there is nothing
else).

Here, channel ``c`` of a multi-node ring is anchored on rail ``a = c mod G`` (G
GPUs per node): it enters node 0 at local GPU ``a`` and leaves it from local
GPU ``b``, the GPU that shares ``a``'s nearest NIC switch (else the next GPU);
the next node is entered at local GPU ``b`` - the same rail - and left from
another GPU, and so on round the nodes, so every inter-node hop joins two GPUs
with the same local index and so the same rail, and on each node the channels
leave from different GPUs and so through different NICs. With an even number of
nodes the path alternates between ``a`` and ``b``; with an odd number a third
GPU closes the cycle. On one node, the channels are the edge-disjoint rings of
:func:`~simcoll.algorithms.ring.find_rings`.

Every channel runs NCCL's ring algorithm on its share of the buffer (chunks
dealt round-robin over the channels): ReduceScatter then Allgather for
Allreduce, the pipelined chain from (or to) the root for Broadcast and Reduce.

``nccl-tree`` (Allreduce): NCCL's tree channels (``NCCL_ALGO=Tree``). Channel
``c`` runs, on each node, a chain through the node's GPUs headed by local GPU
``c mod G`` (whose NIC is on rail ``c mod G``), and across nodes tree ``c mod
2`` of NCCL's double binary tree over the heads
(:func:`~simcoll.algorithms.innetwork.double_tree_parent`): every chunk is
reduced up the chains into the heads, up the tree to its root, and sent back
down the tree and the chains. Chunks are dealt round-robin over the channels.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence

from ..algorithm import Algorithm, Transfer
from ..collectives import Collective
from ..errors import NotApplicableError
from ..routes import Routes, routes_of
from ..topology import FABRIC_LINK_TYPES, Topology
from .common import finish, hamiltonian_path, implements, require_routes
from .registry import Generator, Option, positive_int
from .ring import SEARCH_TIME_LIMIT_S, find_rings, rings_schedule

NCCL_RING_COLLECTIVES = ("allreduce", "allgather", "reducescatter", "broadcast", "reduce")

#: Channels when neither the option nor the machine says otherwise: NCCL opens
#: at least as many channels as a DGX node has NICs (8) for its rings.
DEFAULT_CHANNELS = 8


# -- NICs ---------------------------------------------------------------------------
def nearest_nics(topology: Topology, rank: int) -> list[str]:
    """The NICs of ``rank``'s node at the fewest hops from its GPU over
    non-GPU-fabric links (PCIe and host links), NIC of rail = local index first."""
    import networkx as nx

    node = topology.node_of(rank)
    gpu = topology.gpu(rank).name
    graph = nx.Graph()
    for link in topology.links:
        if link.type in FABRIC_LINK_TYPES:
            continue
        a, b = topology.component(link.src), topology.component(link.dst)
        if a.node == node and b.node == node:
            graph.add_edge(a.name, b.name)
    if gpu not in graph:
        return []
    dist = nx.single_source_shortest_path_length(graph, gpu)
    nics = [c for c in topology.components if c.kind == "nic" and c.node == node and c.name in dist]
    if not nics:
        return []
    best = min(dist[c.name] for c in nics)
    local = topology.ranks_of_node(node).index(rank)
    near = [c for c in nics if dist[c.name] == best]
    return [
        c.name for c in sorted(near, key=lambda c: (c.rail != local, c.rail if c.rail is not None else 1 << 30, c.name))
    ]


def _partner(local: int, railed: Sequence[int], nics: dict[int, frozenset[str]]) -> int:
    """Local index of the GPU among ``railed`` (those that reach other nodes)
    that shares GPU ``local``'s nearest NICs (``nics``: local index -> its
    :func:`nearest_nics`; its PCIe switch on a DGX), else the next one of ``railed``."""
    at = railed.index(local)
    following = [railed[(at + step) % len(railed)] for step in range(1, len(railed))]
    if nics[local]:
        for other in following:
            if nics[other] == nics[local]:
                return other
    return following[0] if following else local


# -- ring construction ------------------------------------------------------------
def _node_path(
    routes: Routes, ranks: Sequence[int], entry: int, exit_: int, used: dict[tuple[int, int], int] | None = None
) -> list[int] | None:
    """A path through every rank of ``ranks`` from ``entry`` to ``exit_`` over
    direct routes: the links earlier channels use least (``used``: channels
    per GPU pair, counted on direct links only, as NCCL's search takes each
    channel's bandwidth off the links it crosses), then most direct links."""
    members = set(ranks)
    if len(ranks) == 1:
        return [entry] if entry == exit_ else None
    used = used if used is not None else {}

    def load(r: int, d: int) -> float:
        links = routes.direct_links(r, d)
        return used.get((r, d), 0) / links if links else 0.0

    if len(ranks) <= _ENUMERATE_UP_TO and any(routes.direct_links(r, d) for r in ranks for d in ranks if r != d):
        return _least_loaded_path(routes, ranks, entry, exit_, load)

    def neighbours(r: int) -> list[int]:
        near = [d for d in ranks if d != r and routes.connected(r, d)]
        return sorted(
            near,
            key=lambda d: (
                d == exit_,
                routes.direct_links(r, d) == 0,  # a direct link (NVLink) before a route through switches or PCIe
                load(r, d),
                -routes.direct_links(r, d),
                (d - r) % (max(members) + 1),
            ),
        )

    return hamiltonian_path(
        entry,
        neighbours,
        len(ranks),
        close=lambda last, _start: last == exit_,
        time_limit_s=SEARCH_TIME_LIMIT_S,
        what="intra-node path",
    )


#: GPUs per node up to which every intra-node path of a channel is tried (7! orders at most).
_ENUMERATE_UP_TO = 8


def _least_loaded_path(
    routes: Routes, ranks: Sequence[int], entry: int, exit_: int, load: Callable[[int, int], float]
) -> list[int] | None:
    """The path from ``entry`` to ``exit_`` through every rank of ``ranks`` with
    the fewest hops off the direct links (a PCIe or host route is far slower
    than NVLink), then whose most loaded direct link (after this channel) is
    least loaded, then whose total load is least: a channel's ring runs at the
    speed of its most shared link, so NCCL's search spreads channels over a
    node's direct links."""
    middle = [r for r in ranks if r not in (entry, exit_)]
    best: tuple[int, float, float] | None = None
    chosen: list[int] | None = None
    for order in itertools.permutations(middle):
        path = [entry, *order, exit_]
        hops = list(zip(path, path[1:], strict=False))
        if not all(routes.connected(u, v) for u, v in hops):
            continue
        direct = [routes.direct_links(u, v) for u, v in hops]
        loads = [load(u, v) + 1 / n for (u, v), n in zip(hops, direct, strict=True) if n]
        key = (direct.count(0), max(loads, default=0.0), sum(loads))
        if best is None or key < best:
            best, chosen = key, path
    return chosen


def _endpoints(num_nodes: int, railed: Sequence[int], a: int, b: int) -> list[int] | None:
    """Local index at which each node is entered, among the ``railed`` GPUs;
    node j is left from the entry index of node j+1 (cyclically), so every
    inter-node hop stays on one rail."""
    if num_nodes % 2 == 0:
        return [a if j % 2 == 0 else b for j in range(num_nodes)]
    r = len(railed)
    if r < 3:
        return None
    # two rails on from a keeps the third GPUs of different channels apart (a permutation of the rails)
    at = railed.index(a)
    third = next(railed[(at + k) % r] for k in range(2, r + 2) if railed[(at + k) % r] not in (a, b))
    return [a, b, third] + [a if j % 2 == 0 else b for j in range(num_nodes - 3)]


def nccl_rings(topology: Topology, channels: int, routes: Routes | None = None) -> list[list[int]]:
    """The rank order of each of ``channels`` NCCL ring channels (module docstring)."""
    routes = routes or routes_of(topology)
    nodes = topology.nodes
    if len(nodes) == 1:
        rings = find_rings(topology, routes, limit=channels)
        return [rings[c % len(rings)] for c in range(channels)]
    per_node = [topology.ranks_of_node(n) for n in nodes]
    g = len(per_node[0])
    if any(len(r) != g for r in per_node):
        raise NotApplicableError(f"nccl-ring: {topology.name} has nodes with different GPU counts")
    if g == 1:
        return [[r[0] for r in per_node] for _ in range(channels)]
    # a ring crosses to the next node from a GPU with a route there (through its NIC without
    # entering another GPU): on a Frontier node only the GCDs the NICs hang off
    railed = [i for i in range(g) if routes.connected(per_node[0][i], per_node[1][i])]
    if not railed:
        raise NotApplicableError(f"nccl-ring: no GPU of {topology.name}'s nodes has a route to another node")
    nics = {i: frozenset(nearest_nics(topology, per_node[0][i])) for i in railed}
    # channels take the NICs in turn before any NIC takes a second channel: where GPUs share a NIC
    # (two per NIC on a DGX-2), entering at GPUs 0, 1, 2 ... would leave the last NICs idle
    groups = list(dict.fromkeys(nics[i] for i in railed))
    place = {i: [j for j in railed if nics[j] == nics[i]].index(i) for i in railed}
    spread = sorted(railed, key=lambda i: (place[i], groups.index(nics[i])))
    entries = []
    for c in range(channels):
        a = spread[c % len(spread)]
        ends = _endpoints(len(nodes), railed, a, _partner(a, railed, nics))
        if ends is None:
            raise NotApplicableError(
                f"nccl-ring: {topology.name} has {len(nodes)} nodes with {len(railed)} GPUs on a rail each; a "
                "rail-aligned ring over an odd number of nodes needs at least 3"
            )
        entries.append(ends)
    paths = []  # per node, per channel
    known: dict = {}
    for j, ranks in enumerate(per_node):
        ends = [(ranks[e[j]], ranks[e[(j + 1) % len(nodes)]]) for e in entries]
        node_paths = _balanced_paths(routes, ranks, ends, known)
        if node_paths is None:
            used: dict[tuple[int, int], int] = {}
            node_paths = []
            for entry, exit_ in ends:
                path = _node_path(routes, ranks, entry, exit_, used)
                if path is None:
                    raise NotApplicableError(
                        f"nccl-ring: no path through node {nodes[j]} of {topology.name} from rank {entry} to rank {exit_}"
                    )
                for u, v in zip(path, path[1:], strict=False):
                    used[(u, v)] = used.get((u, v), 0) + 1
                node_paths.append(path)
        paths.append(node_paths)
    return [[r for node_paths in paths for r in node_paths[c]] for c in range(channels)]


#: Hops tried by :func:`_balanced_paths` in one node before it gives up: a count, not a clock, so
#: that the rings (and every simulated time) are the same on any machine and under any load.
_SEARCH_STEPS = 200_000


def _balanced_paths(
    routes: Routes, ranks: Sequence[int], ends: Sequence[tuple[int, int]], known: dict | None = None
) -> list[list[int]] | None:
    """One path per channel through a node whose GPUs have direct links, from
    each channel's entry to its exit over direct links only, with no link
    carrying more channels per link than the fewest that can carry them all:
    NCCL's search looks for every channel at one speed at once, taking each
    channel's bandwidth off the links it crosses.

    A depth-first search over the channels' hops (iterative: many channels
    make it deep), least used links first, for at most :data:`_SEARCH_STEPS`
    hops. None for a node without direct links, of fewer than 3 or more than
    :data:`_ENUMERATE_UP_TO` GPUs, or when no such set is found (then each
    channel takes its least loaded path). ``known`` keeps the answers by the
    node's local link counts and channel ends, which nodes of one cluster share.
    """
    g = len(ranks)
    local = {r: i for i, r in enumerate(ranks)}
    links = {(i, j): routes.direct_links(u, v) for u, i in local.items() for v, j in local.items() if i != j}
    if g > _ENUMERATE_UP_TO or g < 3 or not any(links.values()):
        return None
    local_ends = tuple((local[a], local[b]) for a, b in ends)
    key = (tuple(sorted(links.items())), local_ends)
    if known is not None and key in known:
        found = known[key]
    else:
        found = _search_balanced(g, links, local_ends)
        if known is not None:
            known[key] = found
    return None if found is None else [[ranks[i] for i in path] for path in found]


def _search_balanced(
    g: int, links: dict[tuple[int, int], int], ends: Sequence[tuple[int, int]]
) -> list[list[int]] | None:
    """:func:`_balanced_paths` on local indices 0..g-1."""
    limit = -(-len(ends) * (g - 1) // sum(links.values()))  # channels per link, at least
    used = dict.fromkeys(links, 0)

    def options(path: list[int], exit_: int) -> Iterator[int]:
        u, last = path[-1], len(path) == g - 1
        ok = [
            v
            for v in range(g)
            if v not in path and (v != exit_ or last) and links[(u, v)] and used[(u, v)] < limit * links[(u, v)]
        ]
        return iter(sorted(ok, key=lambda v: (used[(u, v)] / links[(u, v)], v)))

    paths = [[ends[0][0]]]
    frames = [options(paths[0], ends[0][1])]  # per hop to take: the choices left there
    for _ in range(_SEARCH_STEPS):
        path = paths[-1]
        v = next(frames[-1], None)
        if v is None:  # no way on from here: undo the hop that led here
            frames.pop()
            if len(path) == 1:  # this channel has not started: undo the last hop of the channel before
                paths.pop()
                if not paths:
                    return None
                path = paths[-1]
            w = path.pop()
            used[(path[-1], w)] -= 1
            continue
        used[(path[-1], v)] += 1
        path.append(v)
        if len(path) < g:
            frames.append(options(path, ends[len(paths) - 1][1]))
        elif len(paths) == len(ends):
            return paths
        else:
            paths.append([ends[len(paths)][0]])
            frames.append(options(paths[-1], ends[len(paths) - 1][1]))
    return None


@implements("nccl-ring", NCCL_RING_COLLECTIVES)
def nccl_ring(topology: Topology, collective: Collective, channels: int | None = None) -> Algorithm:
    """NCCL's ring algorithm over ``channels`` ring channels (module docstring).

    Per channel, the ring algorithm's cost (NV-Group eqs. 1-3) on that
    channel's share of the buffer; the channels run at once.

    Options: ``channels`` (default: the largest count up to
    :data:`DEFAULT_CHANNELS` that divides the chunk factor, per P for
    Allreduce; every channel gets an equal share of chunks).

    >>> from simcoll import load_topology, make_collective
    >>> a = nccl_ring(load_topology("dgx-a100*2"), make_collective("allgather", 16, 8))
    >>> len(a.metadata["rings"])
    8
    """
    p = collective.num_ranks
    per_channel = p if collective.name == "allreduce" else 1
    if channels is not None and (not isinstance(channels, int) or channels < 1):
        raise NotApplicableError(f"nccl-ring: option channels must be a positive integer, got {channels!r}")
    most = collective.chunk_factor // per_channel
    if channels is None:
        channels = max(k for k in range(1, max(1, min(DEFAULT_CHANNELS, most)) + 1) if most % k == 0)
    if channels > most or collective.chunk_factor % (channels * per_channel):
        need = f"{channels * per_channel}" + (" (P per channel)" if per_channel > 1 else "")
        raise NotApplicableError(
            f"nccl-ring: {channels} channels need a chunk factor that is a multiple of {need}, got {collective.chunk_factor}"
        )
    routes = routes_of(topology)
    rings = nccl_rings(topology, channels, routes)
    # across nodes, an Allreduce's rings repeat node after node: the first nodes' transfers and the rotation
    transfers = rings_schedule(collective, rings, topology)
    require_routes("nccl-ring", topology, routes, transfers)
    return finish("nccl-ring", collective, topology, transfers, routes, rings=rings, channels=channels)


def _nccl_ring_chunks(collective: str, topology: Topology, **_options: object) -> int:
    """One chunk per channel (one per block of each channel for Allreduce)."""
    return DEFAULT_CHANNELS * topology.num_ranks if collective == "allreduce" else DEFAULT_CHANNELS


@implements("nccl-tree", ("allreduce",))
def nccl_tree(topology: Topology, collective: Collective, channels: int | None = None) -> Algorithm:
    """NCCL's tree algorithm (module docstring) over ``channels`` channels
    (default: the largest count up to ``2 ×`` :data:`DEFAULT_CHANNELS` that
    divides the chunk factor).

    >>> from simcoll import load_topology, make_collective
    >>> a = nccl_tree(load_topology("dgx-a100*2"), make_collective("allreduce", 16, 16))
    >>> a.metadata["channels"], a.steps  # 7 chain steps up, a 1-deep tree up and down, 7 chain steps down
    (16, 16)
    """
    from .innetwork import tree_transfers

    if channels is not None and (not isinstance(channels, int) or channels < 1):
        raise NotApplicableError(f"nccl-tree: option channels must be a positive integer, got {channels!r}")
    c_factor = collective.chunk_factor
    if channels is None:
        channels = max(k for k in range(1, min(2 * DEFAULT_CHANNELS, c_factor) + 1) if c_factor % k == 0)
    if c_factor % channels:
        raise NotApplicableError(
            f"nccl-tree: {channels} channels need a chunk factor that is a multiple of {channels}, got {c_factor}"
        )
    per_node = [topology.ranks_of_node(n) for n in topology.nodes]
    g = len(per_node[0])
    if any(len(r) != g for r in per_node):
        raise NotApplicableError(f"nccl-tree: {topology.name} has nodes with different GPU counts")
    transfers: list[Transfer] = []
    for chunk in range(collective.num_chunks):
        ch = chunk % channels
        head = ch % g
        # across nodes, piece p of every channel starts its chain at step p·(G - 1), after the
        # chains' first hop of piece p - 1 on every channel: a rank pair serves the channels'
        # pieces in turn (one FIFO per pair here; NCCL gives each channel its own connection), so
        # every channel's pipeline reaches the network at once instead of waiting for all pieces
        # of the channels whose chains pass there first. On one node the tree is the chains alone
        # and keeps one step per hop for every piece.
        piece = (chunk // channels) * (g - 1) if len(per_node) > 1 else 0
        chains = [[ranks[(head + k) % g] for k in range(g)] for ranks in per_node]
        # reduce up each chain into its head: the tail sends first
        for chain in chains:
            transfers += [
                Transfer(chunk, chain[k + 1], chain[k], "reduce", step=piece + g - 2 - k) for k in range(g - 1)
            ]
        up, down, _, after = tree_transfers([chain[0] for chain in chains], chunk, ch % 2, piece + g - 1)
        transfers += up + down
        for chain in chains:
            transfers += [Transfer(chunk, chain[k], chain[k + 1], "copy", step=after + k) for k in range(g - 1)]
    routes = routes_of(topology)
    require_routes("nccl-tree", topology, routes, transfers)
    return finish("nccl-tree", collective, topology, transfers, routes, channels=channels)


def _nccl_tree_chunks(collective: str, topology: Topology, **_options: object) -> int:
    """Four chunks per channel, so the chains and trees pipeline."""
    return 8 * DEFAULT_CHANNELS


GENERATORS = (
    Generator(
        "nccl-ring",
        nccl_ring,
        nccl_ring.collectives,
        "NCCL's ring channels: one ring per channel, across nodes entering and leaving each node on the same "
        "rail through the NIC next to its GPUs (rail-aligned)",
        {
            "channels": Option(
                f"number of ring channels (default {DEFAULT_CHANNELS}, at most one per chunk)", positive_int
            )
        },
        chunks=_nccl_ring_chunks,
    ),
    Generator(
        "nccl-tree",
        nccl_tree,
        nccl_tree.collectives,
        "NCCL's tree channels: per channel an intra-node chain and an inter-node double binary tree",
        {"channels": Option(f"number of tree channels (default {2 * DEFAULT_CHANNELS})", positive_int)},
        chunks=_nccl_tree_chunks,
    ),
)

"""NCCL's in-network algorithms: NVLS, NVLS-Tree and CollNet.

They reduce in switches (:class:`~simcoll.algorithm.SwitchReduction`):

- ``nvls`` (one node whose switches declare ``reduce`` and ``multicast``, the
  NVLink SHARP NVSwitches of a DGX H100): Allreduce reduces every chunk in a
  switch and multicasts the sum back to all GPUs in one step, as NCCL's NVLS
  algorithm does with ``multimem.ld_reduce`` / ``multimem.st`` (NCCL ≥ 2.17);
  ReduceScatter reduces each chunk into its owner; Allgather multicasts each
  chunk from its owner. Chunks are dealt to the node's reducing switches in
  proportion to the links every GPU has to each (5/4/4/5 on a DGX H100), so
  each GPU's NVLinks carry an equal share.
- ``nvls-tree`` (several such nodes): per chunk, NVLS reduction inside each
  node into the chunk's node-local owner (local index ``c mod G``, whose NIC
  is on rail ``c mod G``), NCCL's double binary tree across the nodes between
  the owners (reduce up, broadcast down; odd channels use the second tree),
  then a multicast from the owner to its node.
- ``collnet`` (IB SHARP; several nodes whose fabric switch reduces, e.g.
  ``dgx-h100*2`` or ``dgx-a100*2/fat-tree:sharp=on``): per chunk, reduction
  into the node-local owner (in the NVSwitch where it reduces, else by direct
  ``reduce`` sends), the owners' contributions reduced in the IB switch and
  multicast back to them, then the owner's copy spread over its node
  (multicast or direct sends): NCCL's CollNet Direct.

Timing is the simulator's: a switch reduction streams through the switch at the
model's ``switches.<kind>.reduce_Bps`` per link (:mod:`simcoll.simulator.network`).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from ..algorithm import Algorithm, SwitchReduction, SwitchReductionTable, Transfer, TransferTable
from ..collectives import Collective
from ..errors import NotApplicableError
from ..routes import routes_of
from ..topology import Topology
from .common import implements, minimal_rounds, require_routes
from .registry import Generator

NVLS_COLLECTIVES = ("allreduce", "reducescatter", "allgather")


# -- switches ----------------------------------------------------------------------
def node_switch_shares(topology: Topology, node: int, name: str, *, multicast: bool = True) -> list[tuple[str, int]]:
    """The node's reducing switches that every GPU of the node links to
    directly, with the fewest links any GPU has to each (its share of chunks).
    Raises :class:`NotApplicableError` naming the topology when there is none."""
    ranks = topology.ranks_of_node(node)
    gpus = {topology.gpu(r).name for r in ranks}
    links = topology.directed_link_counts
    shares = []
    for sw in topology.reducing_switches(node):
        if multicast and not sw.multicast:
            continue
        counts = [min(links.get((g, sw.name), 0), links.get((sw.name, g), 0)) for g in sorted(gpus)]
        if min(counts) > 0:
            shares.append((sw.name, min(counts)))
    if not shares:
        raise NotApplicableError(
            f"{name}: node {node} of {topology.name} has no switch that reduces and multicasts with a direct link to "
            "every GPU (NVLink SHARP needs third-generation NVSwitches, e.g. dgx-h100)"
        )
    return shares


def _deal(shares: list[tuple[str, int]], index: int) -> str:
    """Switch of the ``index``-th chunk: weighted round-robin over ``shares``,
    interleaved (stride scheduling: the k-th turn of a switch of weight w
    falls at (k + 1/2) / w of the cycle), so that any few consecutive chunks,
    those in flight at once, already spread over all the switches."""
    turns = _turns(shares)
    return turns[index % len(turns)]


def _turns(shares: list[tuple[str, int]]) -> tuple[str, ...]:
    """The switches of one cycle of :func:`_deal`, in turn: the ``index``-th
    chunk goes to ``turns[index % len(turns)]``."""
    return tuple(shares[i][0] for i in _deal_cycle(tuple(w for _, w in shares)))


@lru_cache(maxsize=64)
def _deal_cycle(weights: tuple[int, ...]) -> tuple[int, ...]:
    """The order of the turns of one cycle, as indices into the shares: it
    depends on the weights alone, so every node of a cluster shares one."""
    turns = [((k + 0.5) / w, i) for i, w in enumerate(weights) for k in range(w)]
    return tuple(i for _, i in sorted(turns))


def fabric_reducing_switch(topology: Topology, ranks: list[int], name: str) -> str:
    """The reducing fabric switch (shared by all nodes) nearest to all of
    ``ranks`` over links that enter no other GPU."""
    import networkx as nx

    candidates = [c.name for c in topology.reducing_switches(None) if c.multicast]
    if not candidates:
        raise NotApplicableError(
            f"{name}: {topology.name} has no network switch that reduces and multicasts (IB SHARP); build the cluster "
            "with a SHARP fabric, e.g. 'dgx-a100*2/fat-tree:sharp=on'"
        )
    graph = nx.Graph()
    gpus = {g.name for g in topology.gpus}
    for link in topology.links:
        graph.add_edge(link.src, link.dst)
    best: tuple[int, str] | None = None
    for sw in candidates:
        view = nx.subgraph_view(graph, filter_node=lambda n: n not in gpus)
        dist = nx.single_source_shortest_path_length(view, sw)
        far = 0
        for r in ranks:
            g = topology.gpu(r).name
            near = [dist[n] for n in graph.neighbors(g) if n in dist]
            if not near:
                far = None
                break
            far = max(far, 1 + min(near))
        if far is not None and (best is None or far < best[0]):
            best = (far, sw)
    if best is None:
        raise NotApplicableError(f"{name}: no SHARP switch of {topology.name} reaches ranks {ranks}")
    return best[1]


def _nodes(topology: Topology, name: str, *, multi: bool) -> list[list[int]]:
    nodes = topology.nodes
    if multi and len(nodes) < 2:
        raise NotApplicableError(f"{name} joins several nodes; {topology.name} has one (use nvls there)")
    if not multi and len(nodes) != 1:
        raise NotApplicableError(
            f"{name} runs inside one node; {topology.name} has {len(nodes)} (use nvls-tree or collnet)"
        )
    per_node = [topology.ranks_of_node(n) for n in nodes]
    if any(len(r) != len(per_node[0]) for r in per_node):
        raise NotApplicableError(f"{name}: {topology.name} has nodes with different GPU counts")
    return per_node


def _algorithm(
    name: str,
    collective: Collective,
    topology: Topology,
    transfers: list[Transfer] | TransferTable,
    reductions: list[SwitchReduction] | SwitchReductionTable,
    **metadata,
) -> Algorithm:
    """An Algorithm whose steps take the fewest rounds the topology's rank
    links allow (one round where only switches work)."""
    routes = routes_of(topology)
    require_routes(name, topology, routes, transfers)
    if isinstance(transfers, TransferTable):
        last = int(transfers.step.max()) if len(transfers) else -1
    else:
        last = max((t.step for t in transfers), default=-1)
        transfers = tuple(transfers)
    if isinstance(reductions, SwitchReductionTable):
        last_reduction = int(reductions.step.max()) if len(reductions) else -1
    else:
        last_reduction = max((r.step for r in reductions), default=-1)
        reductions = tuple(reductions)
    steps = 1 + max(last, last_reduction)
    rounds = list(minimal_rounds(transfers, topology, routes)) if len(transfers) else []
    rounds += [1] * (steps - len(rounds))
    return Algorithm(
        name=name,
        collective=collective,
        transfers=transfers,
        rounds_per_step=tuple(rounds),
        topology=topology.name,
        metadata={"generator": name, **metadata},
        switch_reductions=reductions,
    )


# -- nvls ------------------------------------------------------------------------------
@implements("nvls", NVLS_COLLECTIVES)
def nvls(topology: Topology, collective: Collective) -> Algorithm:
    """NVLink SHARP inside one node (module docstring).

    >>> from simcoll import load_topology, make_collective
    >>> a = nvls(load_topology("dgx-h100"), make_collective("allreduce", 8, 18))
    >>> len(a.switch_reductions), a.steps
    (18, 1)
    """
    (ranks,) = _nodes(topology, "nvls", multi=False)
    shares = node_switch_shares(topology, topology.nodes[0], "nvls")
    p = collective.num_ranks
    everyone = tuple(ranks)
    reductions = []
    for c in range(collective.num_chunks):
        sw = _deal(shares, c if collective.name == "allreduce" else c // p)
        if collective.name == "allreduce":
            reductions.append(SwitchReduction(c, sw, everyone, everyone, step=0))
        elif collective.name == "reducescatter":
            reductions.append(SwitchReduction(c, sw, everyone, (c % p,), step=0))
        else:  # allgather: chunk c starts at rank c mod P
            owner = c % p
            reductions.append(SwitchReduction(c, sw, (owner,), tuple(r for r in ranks if r != owner), step=0))
    return _algorithm("nvls", collective, topology, [], reductions, switches=[s for s, _ in shares])


def _nvls_chunks(collective: str, topology: Topology, **_options: object) -> int:
    """72 chunks for Allreduce: a multiple of a DGX H100's 18 NVLinks per GPU
    (so the 5/4/4/5 split over its NVSwitches is exact) and of 8 GPUs; one per
    rank otherwise."""
    return 72 if collective == "allreduce" else 1


# -- trees across nodes ---------------------------------------------------------------
def binary_tree_parent(num: int, index: int) -> int | None:
    """Parent of ``index`` in NCCL's binary tree over ``num`` members (node 0 is
    the root with one child; a member's parent clears its lowest set bit and
    sets the next one up, or only clears it where that leaves the range)."""
    if index == 0:
        return None
    bit = index & -index
    up = (index ^ bit) | (bit << 1)
    return up if up < num else index ^ bit


def double_tree_parent(num: int, index: int, tree: int) -> int | None:
    """Parent in tree 0 or 1 of NCCL's double binary tree: tree 1 mirrors tree 0
    for an even number of members and shifts it by one for an odd number, so
    that a member is a leaf in one tree and interior in the other."""
    if tree == 0:
        return binary_tree_parent(num, index)
    if num % 2 == 0:
        parent = binary_tree_parent(num, num - 1 - index)
        return None if parent is None else num - 1 - parent
    parent = binary_tree_parent(num, (index - 1) % num)
    return None if parent is None else (parent + 1) % num


@lru_cache(maxsize=64)
def tree_edges(num: int, tree: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """The edges of tree ``tree`` (0 or 1) of NCCL's double binary tree on
    ``num`` members: (children, their parents, their depths, the tree's
    depth), children in ascending order (the root has no edge). Cached, so
    the arrays are read-only."""
    parent = [double_tree_parent(num, i, tree) for i in range(num)]
    depth = [_ancestors(parent, i) for i in range(num)]
    children = [i for i in range(num) if parent[i] is not None]
    columns = (children, [parent[i] for i in children], [depth[i] for i in children])
    arrays = [np.array(column, dtype=np.int64) for column in columns]
    for array in arrays:
        array.setflags(write=False)
    return (*arrays, max(depth))


def _ancestors(parent: list[int | None], i: int) -> int:
    """How many ancestors member ``i`` has: its depth."""
    count = 0
    while parent[i] is not None:
        i, count = parent[i], count + 1
    return count


def tree_transfers(
    members: list[int], chunk: int, tree: int, first_step: int
) -> tuple[list[Transfer], list[Transfer], int, int]:
    """Reduce-up and broadcast-down transfers of ``chunk`` over the double binary
    tree ``tree`` on ``members`` (ranks, one per node), starting at
    ``first_step``: (up, down, first step after the reduction, first step after
    the broadcast). A member at depth d sends up at step first + D - d and
    receives the result at step first + D + d - 1 (D: the tree's depth)."""
    children, parents, depths, tall = tree_edges(len(members), tree)
    up, down = [], []
    for i, parent, d in zip(children.tolist(), parents.tolist(), depths.tolist(), strict=True):
        up.append(Transfer(chunk, members[i], members[parent], "reduce", step=first_step + tall - d))
        down.append(Transfer(chunk, members[parent], members[i], "copy", step=first_step + tall + d - 1))
    return up, down, first_step + tall, first_step + 2 * tall


def _owner(chunk: int, g: int) -> int:
    return chunk % g


@implements("nvls-tree", ("allreduce",))
def nvls_tree(topology: Topology, collective: Collective) -> Algorithm:
    """NVLS inside nodes plus NCCL's double binary tree across them (module docstring).

    Per chunk ``c`` (node-local owner ``c mod G``, piece ``c // G``): the
    NVLS reductions into the owners (step = piece), :func:`tree_transfers`
    on tree ``piece mod 2`` from step piece + 1 with the broadcast one step
    later, then the owners' multicasts. The tree's transfers of all chunks
    are built as columns, in the order of the chunks, each chunk's
    reductions up then broadcasts down.
    """
    per_node = _nodes(topology, "nvls-tree", multi=True)
    turns = [_turns(node_switch_shares(topology, n, "nvls-tree")) for n in topology.nodes]
    g = len(per_node[0])
    num_chunks = collective.num_chunks
    # piece p starts at step p and its broadcast waits one step more, so that an owner pair's
    # FIFO carries the pieces in order with tree 1's reduction of piece p + 1 ahead of tree 0's
    # broadcast of piece p: the two trees then keep both directions busy, as NCCL's channels (one
    # connection each) do side by side; steps order reads only, they are no barriers
    edges = [tree_edges(len(per_node), tree) for tree in (0, 1)]
    children, parents, depths = (np.stack([e[k] for e in edges]) for k in range(3))
    tall = np.array([e[3] for e in edges], dtype=np.int64)
    chunk = np.arange(num_chunks, dtype=np.int64)
    piece, local = chunk // g, chunk % g
    tree = piece % 2
    rank = np.array(per_node, dtype=np.int64)  # [node, local index]
    child, parent = rank[children[tree], local[:, None]], rank[parents[tree], local[:, None]]
    top = (piece + 1 + tall[tree])[:, None]  # the step the last reduction lands by
    up_step, down_step = top - depths[tree], top + depths[tree]
    edges_per_chunk = children.shape[1]
    table = TransferTable(
        chunk=np.repeat(chunk, 2 * edges_per_chunk),
        src=np.concatenate((child, parent), axis=1).ravel(),
        dst=np.concatenate((parent, child), axis=1).ravel(),
        reduce=np.tile(np.repeat([True, False], edges_per_chunk), num_chunks),
        step=np.concatenate((up_step, down_step), axis=1).ravel(),
    )
    after = piece + 2 + 2 * tall[tree]  # the step the owners' multicasts start at
    # per chunk, node by node its reduction into the owner, then node by node the owner's multicast
    nodes = len(per_node)
    node = np.arange(nodes, dtype=np.int64)
    rank_sets, owner, others = _owner_sets(per_node, node, local)
    everyone = np.broadcast_to(node, (num_chunks, nodes))
    # dealt by chunk, not by chunk group: the G chunks in flight at once (one per owner) then
    # spread over all the node's NVSwitches in proportion to their links, as NCCL's channels do
    switches = list(dict.fromkeys(name for node_turns in turns for name in node_turns))
    switch = _turn_codes(turns, switches, chunk, node)
    reductions = SwitchReductionTable(
        chunk=np.repeat(chunk, 2 * nodes),
        switch=np.stack((switch, switch), axis=1).ravel(),
        sources=np.stack((everyone, owner), axis=1).ravel(),
        destinations=np.stack((owner, others), axis=1).ravel(),
        step=np.stack((np.broadcast_to(piece[:, None], (num_chunks, nodes)),
                       np.broadcast_to(after[:, None], (num_chunks, nodes))), axis=1).ravel(),
        switches=switches,
        rank_sets=rank_sets,
    )  # fmt: skip
    return _algorithm("nvls-tree", collective, topology, table, reductions)


@implements("collnet", ("allreduce",))
def collnet(topology: Topology, collective: Collective) -> Algorithm:
    """IB SHARP (NCCL's CollNet Direct) across nodes (module docstring)."""
    per_node = _nodes(topology, "collnet", multi=True)
    g = len(per_node[0])
    node_shares: list[list[tuple[str, int]] | None] = []
    for n in topology.nodes:
        try:
            node_shares.append(node_switch_shares(topology, n, "collnet"))
        except NotApplicableError:
            node_shares.append(None)
    fabric = {local: fabric_reducing_switch(topology, [r[local] for r in per_node], "collnet") for local in range(g)}
    turns = [None if shares is None else _turns(shares) for shares in node_shares]
    others_of = [[tuple(x for x in ranks if x != r) for r in ranks] for ranks in per_node]
    owners_of = [tuple(ranks[local] for ranks in per_node) for local in range(g)]
    # on nodes whose NVSwitches cannot reduce, the owner's GPUs send to it and it sends back
    plain = [j for j in range(len(per_node)) if turns[j] is None]
    transfers: list[Transfer] = []
    for c in range(collective.num_chunks) if plain else ():
        local = _owner(c, g)
        for j in plain:
            others, owner = others_of[j][local], owners_of[local][j]
            transfers += [Transfer(c, r, owner, "reduce", step=0) for r in others]
            transfers += [Transfer(c, owner, r, "copy", step=2) for r in others]
    reductions = _collnet_reductions(collective.num_chunks, per_node, turns, fabric, owners_of)
    return _algorithm(
        "collnet", collective, topology, transfers, reductions, sharp_switches=sorted(set(fabric.values()))
    )


def _collnet_reductions(
    num_chunks: int,
    per_node: list[list[int]],
    turns: list[tuple[str, ...] | None],
    fabric: dict[int, str],
    owners_of: list[tuple[int, ...]],
) -> SwitchReductionTable:
    """CollNet's switch reductions, chunk by chunk: on every node whose
    NVSwitches reduce (and that has GPUs besides the owner), the reduction
    into the owner (step 0) and the owner's multicast (step 2), node by
    node; then the owners' reduction and multicast in the fabric switch
    (step 1). Rank tuples listed once: every node's GPUs, per node and
    local index the owner, then the others, then per local index the owners."""
    nodes, g = len(per_node), len(per_node[0])
    chunk = np.arange(num_chunks, dtype=np.int64)
    local = chunk % g
    node = np.array([j for j in range(nodes) if turns[j] is not None] if g > 1 else [], dtype=np.int64)
    rank_sets, owner, others = _owner_sets(per_node, node, local)  # [chunk, reducing node]
    rank_sets += list(owners_of)
    switches = list(dict.fromkeys([*(name for t in turns if t is not None for name in t), *fabric.values()]))
    code = {name: i for i, name in enumerate(switches)}
    switch = _turn_codes(turns, switches, chunk, node)
    k = len(node)

    def rows(up: np.ndarray, down: np.ndarray, last: np.ndarray) -> np.ndarray:
        """Per chunk: (up, down) per reducing node, then the fabric's row."""
        return np.concatenate((np.stack((up, down), axis=2).reshape(num_chunks, 2 * k), last[:, None]), axis=1).ravel()

    owners = nodes + 2 * nodes * g + local
    fabric_code = np.array([code[fabric[a]] for a in range(g)], dtype=np.int64)[local]
    return SwitchReductionTable(
        chunk=np.repeat(chunk, 2 * k + 1),
        switch=rows(switch, switch, fabric_code),
        sources=rows(np.broadcast_to(node, owner.shape), owner, owners),
        destinations=rows(owner, others, owners),
        step=rows(np.zeros_like(owner), np.full_like(owner, 2), np.ones(num_chunks, dtype=np.int64)),
        switches=switches,
        rank_sets=rank_sets,
    )


def _owner_sets(
    per_node: list[list[int]], node: np.ndarray, local: np.ndarray
) -> tuple[list[tuple[int, ...]], np.ndarray, np.ndarray]:
    """The rank tuples of in-node reductions into a chunk's owner, listed
    once - every node's GPUs (node j's at index j), then per node j and
    local index a the owner alone (N + j·G + a), then the node's other
    GPUs (N + N·G + j·G + a) - and, per chunk (of local index ``local``) and
    node of ``node``, the index of its owner's tuple and of the others'."""
    nodes, g = len(per_node), len(per_node[0])
    rank_sets = [tuple(ranks) for ranks in per_node]
    rank_sets += [(r,) for ranks in per_node for r in ranks]
    rank_sets += [tuple(x for x in ranks if x != r) for ranks in per_node for r in ranks]
    owner = nodes + node[None, :] * g + local[:, None]
    return rank_sets, owner, owner + nodes * g


def _turn_codes(turns: list, switches: list[str], chunk: np.ndarray, node: np.ndarray) -> np.ndarray:
    """Per chunk and node of ``node``: the index in ``switches`` of the
    node's switch whose turn the chunk is (``turns[j][c mod len]``)."""
    code = {name: i for i, name in enumerate(switches)}
    columns = [np.array([code[name] for name in turns[j]], dtype=np.int64)[chunk % len(turns[j])] for j in node]
    return np.stack(columns, axis=1) if columns else np.zeros((len(chunk), 0), dtype=np.int64)


def _per_rank_chunks(collective: str, topology: Topology, **_options: object) -> int:
    """Four chunks per rank for Allreduce (each node-local owner pipelines four)."""
    return 4 * topology.num_ranks if collective == "allreduce" else 1


GENERATORS = (
    Generator(
        "nvls",
        nvls,
        nvls.collectives,
        "NVLink SHARP on one node: each chunk reduced in an NVSwitch and multicast back (NCCL's NVLS)",
        chunks=_nvls_chunks,
    ),
    Generator(
        "nvls-tree",
        nvls_tree,
        nvls_tree.collectives,
        "NVLS inside each node, NCCL's double binary tree between the nodes (NCCL's NVLSTree)",
        chunks=_per_rank_chunks,
    ),
    Generator(
        "collnet",
        collnet,
        collnet.collectives,
        "IB SHARP: per-node reduction, then reduced and multicast in the network switch (NCCL's CollNet Direct)",
        chunks=_per_rank_chunks,
    ),
)

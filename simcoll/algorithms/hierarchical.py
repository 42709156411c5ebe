"""Hierarchical algorithms for machines of N nodes × G GPUs.

Ranks are arranged as a grid: ``grid.ranks[n][g]`` is the GPU with local index
``g`` (its position among its node's ranks, in rank order) on node ``n``.
Intra-node phases run within a node; inter-node phases run among the GPUs with
the same local index (on a rail-optimised cluster, the GPUs on one rail).

Nodes are the machine's (``topology.nodes``: clusters such as ``dgx-a100*4``
or YAML topologies with several nodes). On any machine, the option
``group_size=G`` treats consecutive blocks of G ranks as the nodes instead,
which lets a single-node machine run these algorithms with its GPUs split
into groups.

Every step sends a rank pair's block as one message (a contiguity ``group``),
as NCCL and GC3 (``count`` aggregation) do, so the analytic cost pays one α
and one ``T_R`` per block. In the costs, ``α_a`` and ``B_a`` are the α and
bandwidth of an intra-node rank pair's route, ``α_e`` and ``B_e`` those of an
inter-node pair, and ``T_R(n)`` the time to reduce ``n`` bytes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ..algorithm import Algorithm, Transfer, TransferTable
from ..collectives import Collective
from ..errors import NotApplicableError
from ..routes import Routes, routes_of
from ..topology import Topology
from .common import finish, hamiltonian_path, implements, one_message_per_step, ring_steps
from .registry import Generator, Option, positive_int

RING_SEARCH_TIME_LIMIT_S = 2.0


@dataclass(frozen=True)
class NodeGrid:
    """Ranks as N nodes × G local indices: ``ranks[n][g]``."""

    ranks: tuple[tuple[int, ...], ...]

    @property
    def num_nodes(self) -> int:
        return len(self.ranks)

    @property
    def gpus_per_node(self) -> int:
        return len(self.ranks[0])

    def node(self, n: int) -> list[int]:
        return list(self.ranks[n])

    def peers(self, g: int) -> list[int]:
        """The GPUs with local index ``g``, in node order."""
        return [node[g] for node in self.ranks]

    def position(self, rank: int) -> tuple[int, int]:
        """``(node, local index)`` of ``rank``."""
        return self._positions[rank]

    @cached_property
    def _positions(self) -> dict[int, tuple[int, int]]:
        return {rank: (n, g) for n, node in enumerate(self.ranks) for g, rank in enumerate(node)}


def node_grid(topology: Topology, algorithm: str, group_size: int | None = None) -> NodeGrid:
    """The machine's nodes as a :class:`NodeGrid` (module docstring), or
    consecutive groups of ``group_size`` ranks.

    Raises :class:`NotApplicableError` for a single node without
    ``group_size``, for nodes with different GPU counts, and for a
    ``group_size`` that does not divide the rank count.
    """
    p = topology.num_ranks
    if group_size is not None:
        if not isinstance(group_size, int) or group_size < 1 or p % group_size:
            raise NotApplicableError(
                f"{algorithm}: group_size={group_size!r} does not divide {topology.name}'s {p} ranks into equal groups"
            )
        return NodeGrid(tuple(tuple(range(i, i + group_size)) for i in range(0, p, group_size)))
    nodes = sorted({gpu.node for gpu in topology.gpus})
    if len(nodes) < 2:
        raise NotApplicableError(
            f"{algorithm}: {topology.name} is a single node; pass group_size=G to treat consecutive groups "
            "of G ranks as nodes"
        )
    ranks = tuple(tuple(sorted(topology.ranks_of_node(n))) for n in nodes)
    sizes = {len(r) for r in ranks}
    if len(sizes) > 1:
        counts = ", ".join(f"node {n}: {len(r)}" for n, r in zip(nodes, ranks, strict=True))
        raise NotApplicableError(
            f"{algorithm}: {topology.name} has irregular node sizes ({counts}); it needs N nodes of G GPUs each"
        )
    return NodeGrid(ranks)


def _ring_order(
    ranks: Sequence[int], routes: Routes, algorithm: str, time_limit_s: float = RING_SEARCH_TIME_LIMIT_S
) -> list[int]:
    """A cycle through ``ranks`` over the topology's routes, starting at
    ``ranks[0]``. Pairs joined by more direct links come first (a DGX-1 node
    gets a ring of NVLinks, not PCIe hops), then the natural order."""
    n = len(ranks)
    if n == 1:
        return list(ranks)
    index = {r: i for i, r in enumerate(ranks)}
    neighbours = {
        a: sorted(
            (b for b in ranks if routes.connected(a, b)),
            key=lambda b, a=a: (-routes.direct_links(a, b), (index[b] - index[a]) % n),
        )
        for a in ranks
    }
    try:
        path = hamiltonian_path(ranks[0], neighbours.__getitem__, n, routes.connected, time_limit_s)
    except NotApplicableError as exc:
        raise NotApplicableError(f"{algorithm}: ranks {list(ranks)}: {exc}") from None
    if path is None:
        raise NotApplicableError(f"{algorithm}: no ring through ranks {list(ranks)} over the topology's routes")
    return path


def _ring_reducescatter(order: Sequence[int], blocks: dict[int, list[int]], first_step: int) -> TransferTable:
    """Ring ReduceScatter over ``order``: after len-1 steps, rank r holds the
    reduction over the ring of ``blocks[r]`` (GC3 Fig. 3b)."""
    return ring_steps(order, first_step, 1, lambda r: blocks.get(r, ()), "reduce")


def _ring_allgather(order: Sequence[int], blocks: dict[int, list[int]], first_step: int) -> TransferTable:
    """Ring Allgather over ``order``: after len-1 steps every rank of the
    ring holds ``blocks[r]`` of every ring member r (GC3 Fig. 3b)."""
    return ring_steps(order, first_step, 0, lambda r: blocks.get(r, ()), "copy")


def _blocks_by_position(order: Sequence[int], chunks: Iterable[int]) -> dict[int, list[int]]:
    """Chunk ``c`` belongs to the ring member at position ``c mod len(order)``."""
    blocks: dict[int, list[int]] = {r: [] for r in order}
    for c in chunks:
        blocks[order[c % len(order)]].append(c)
    return blocks


def _build(
    name: str,
    topology: Topology,
    collective: Collective,
    routes: Routes,
    grid: NodeGrid,
    parts: Sequence[TransferTable | list[Transfer]],
    **metadata,
) -> Algorithm:
    """Join ``parts`` in order, drop empty steps (a phase over one node or one
    GPU has none), make each rank pair's chunks of a step one message, check
    every pair has a route."""
    table = TransferTable.concatenate(
        [part if isinstance(part, TransferTable) else TransferTable.from_transfers(part) for part in parts]
    )
    _, step = np.unique(table.step, return_inverse=True)
    transfers = one_message_per_step(table.with_steps(step))
    p = topology.num_ranks
    for pair in np.unique(transfers.src * p + transfers.dst).tolist():  # int keys: a row-wise unique sorts slowly
        src, dst = divmod(pair, p)
        if not routes.connected(src, dst):
            raise NotApplicableError(f"{name}: {topology.name} has no route from rank {src} to rank {dst}")
    return finish(
        name,
        collective,
        topology,
        transfers,
        routes,
        nodes=grid.num_nodes,
        gpus_per_node=grid.gpus_per_node,
        **metadata,
    )


# ---------------------------------------------------------------------------
# 2D ring (NV-Group §3.1.1, eq. 4)
# ---------------------------------------------------------------------------
@implements("2d-ring", ("allreduce", "reducescatter", "allgather"))
def two_d_ring(topology: Topology, collective: Collective, group_size: int | None = None) -> Algorithm:
    """2D ring: an intra-node ring phase and an inter-node ring phase
    (NV-Group §3.1.1, eq. 4), for N nodes of G GPUs.

    - Allreduce, NV-Group's literal realisation: every node runs a ring
      Allreduce of the whole buffer (blocks ``c mod G``), so every GPU holds
      its node's sum; then the G GPUs with the same local index each run a
      ring Allreduce of the whole buffer across the N nodes (blocks
      ``c mod N``), G such rings in parallel. Each of them carries the whole
      buffer, as eq. (4)'s ``M/N`` per step says (``gc3-hierarchical`` is the
      variant that splits it G ways). Cost, with blocks of equal size (C a
      multiple of N and G)::

          2(G-1)(α_a + M/(G·B_a)) + (G-1)·T_R(M/G)
        + 2(N-1)(α_e + M/(N·B_e)) + (N-1)·T_R(M/N)

      which is NV-Group eq. (4) under ``t_s = α_a = α_e``, ``B = B_a = B_e``
      (links of one speed), ``N_G = G``, ``N`` = nodes, ``M`` the buffer and
      ``T_R`` the model's reduction time. The analytic critical path
      (no barriers) equals it: in every inter-node ring some block holds a
      chunk that arrives last in the intra-node Allreduce, and that block's
      way round the inter-node ring is the whole inter-node Allreduce.
    - ReduceScatter: intra-node ring ReduceScatter in which local index g
      collects the node's partial sums of the blocks of every rank with local
      index g, then inter-node ring ReduceScatter among those GPUs:
      ``(G-1)(α_a + M/(G·B_a) + T_R(M/G)) + (N-1)(α_e + M/(P·B_e) + T_R(M/P))``.
    - Allgather, the mirror image: inter-node ring Allgather among the GPUs
      with the same local index, then intra-node ring Allgather of the N
      gathered blocks: ``(N-1)(α_e + M/(P·B_e)) + (G-1)(α_a + M/(G·B_a))``.

    ``M`` is the buffer the collective is named by (nccl-tests), ``P = N·G``.
    Rings inside a node follow its direct links where it has them.

    >>> from simcoll import load_topology, make_collective
    >>> algo = two_d_ring(load_topology("fully-connected:6"), make_collective("allreduce", 6, 6), group_size=3)
    >>> algo.steps  # 2(G-1) + 2(N-1)
    6
    """
    grid = node_grid(topology, "2d-ring", group_size)
    routes = routes_of(topology)
    n_nodes, g_local = grid.num_nodes, grid.gpus_per_node
    node_rings = [_ring_order(grid.node(n), routes, "2d-ring") for n in range(n_nodes)]
    peer_rings = [_ring_order(grid.peers(g), routes, "2d-ring") for g in range(g_local)]
    transfers: list[TransferTable] = []
    if collective.name == "allreduce":
        everything = range(collective.num_chunks)
        intra_steps = 2 * (g_local - 1)
        for order in node_rings:
            blocks = _blocks_by_position(order, everything)
            transfers.append(_ring_reducescatter(order, blocks, 0))
            transfers.append(_ring_allgather(order, blocks, g_local - 1))
        for order in peer_rings:
            blocks = _blocks_by_position(order, everything)
            transfers.append(_ring_reducescatter(order, blocks, intra_steps))
            transfers.append(_ring_allgather(order, blocks, intra_steps + n_nodes - 1))
    else:
        # What local index g gathers (Allgather) or reduces (ReduceScatter):
        # the blocks of every rank with local index g.
        mine = collective.input_layout if collective.name == "allgather" else collective.output_layout
        column = {g: [c for r in grid.peers(g) for c in mine[r]] for g in range(g_local)}
        in_node = {r: column[g] for n in range(n_nodes) for g, r in enumerate(grid.node(n))}
        own = {r: list(mine[r]) for r in range(collective.num_ranks)}
        if collective.name == "reducescatter":
            for order in node_rings:
                transfers.append(_ring_reducescatter(order, in_node, 0))
            for order in peer_rings:
                transfers.append(_ring_reducescatter(order, own, g_local - 1))
        else:
            for order in peer_rings:
                transfers.append(_ring_allgather(order, own, 0))
            for order in node_rings:
                transfers.append(_ring_allgather(order, in_node, n_nodes - 1))
    return _build("2d-ring", topology, collective, routes, grid, transfers, node_rings=node_rings)


# ---------------------------------------------------------------------------
# GC3 hierarchical Allreduce (§2, Figs. 1-3)
# ---------------------------------------------------------------------------
@implements("gc3-hierarchical", ("allreduce",))
def gc3_hierarchical(
    topology: Topology, collective: Collective, group_size: int | None = None, pipeline: int = 1
) -> Algorithm:
    """GC3's hierarchical Allreduce for N nodes × G GPUs (GC3 §2, Figs. 1-3).

    The buffer is N·G slots (chunk ``c`` in slot ``c mod N·G``; with C = N·G,
    GC3's one chunk per slot). Slot ``g·N + n`` is finally reduced on the GPU
    with local index g of node n. Four ring phases (GC3 Fig. 3a):

    1. intra-node ReduceScatter: local index g gets its node's sum of slots
       ``g·N .. g·N+N-1``;
    2. inter-node ReduceScatter among the GPUs with local index g: node n's
       one gets the global sum of slot ``g·N + n``;
    3. inter-node Allgather among the same GPUs;
    4. intra-node Allgather.

    Cost, C a multiple of N·G (M the buffer, P = N·G)::

        (G-1)(α_a + M/(G·B_a) + T_R(M/G)) + (N-1)(α_e + M/(P·B_e) + T_R(M/P))
      + (N-1)(α_e + M/(P·B_e)) + (G-1)(α_a + M/(G·B_a))

    Each GPU's inter-node Allreduce covers M/G bytes (in NV-Group's 2D ring,
    all M), and the G of them run at once, one per rail.

    ``pipeline`` = k splits the buffer's chunks into k groups (chunk ``c`` in
    group ``(c // N·G) mod k``, so C needs k·N·G chunks for k full groups),
    each running the four phases on its own, one step after the previous
    group: group 1's intra-node ReduceScatter overlaps group 0's inter-node
    phases, as in GC3's single-kernel pipelined version (GC3 §7.2 "large-size
    optimizations"). With k groups the phases' sum of times above becomes
    about their maximum plus (k-1)/k of the rest.

    >>> from simcoll import load_topology, make_collective
    >>> gc3_hierarchical(load_topology("fully-connected:6"), make_collective("allreduce", 6, 6), group_size=3).steps
    6
    """
    grid = node_grid(topology, "gc3-hierarchical", group_size)
    routes = routes_of(topology)
    n_nodes, g_local = grid.num_nodes, grid.gpus_per_node
    slots = n_nodes * g_local
    if pipeline < 1:
        raise NotApplicableError(f"gc3-hierarchical: pipeline must be at least 1, got {pipeline}")
    groups = [[c for c in range(collective.num_chunks) if (c // slots) % pipeline == k] for k in range(pipeline)]
    if any(not g for g in groups):
        raise NotApplicableError(
            f"gc3-hierarchical: pipeline {pipeline} needs at least {pipeline * slots} chunks "
            f"({pipeline} groups of {slots}); the buffer has {collective.num_chunks}"
        )
    node_rings = [_ring_order(grid.node(n), routes, "gc3-hierarchical") for n in range(n_nodes)]
    peer_rings = [_ring_order(grid.peers(g), routes, "gc3-hierarchical") for g in range(g_local)]
    transfers: list[TransferTable] = []
    for k, chunks in enumerate(groups):
        phases = _gc3_phases(grid, node_rings, peer_rings, chunks, slots)
        # group k's step s runs at s·pipeline + k: its own messages, after group k-1's at that step
        transfers += [t.with_steps(np.asarray(t.step) * pipeline + k) for t in phases if len(t.step)]
    extra = {"pipeline": pipeline} if pipeline > 1 else {}
    return _build("gc3-hierarchical", topology, collective, routes, grid, transfers, node_rings=node_rings, **extra)


def _gc3_phases(grid, node_rings, peer_rings, chunks, slots: int) -> list[TransferTable]:
    """The four ring phases of :func:`gc3_hierarchical` over ``chunks``."""
    n_nodes, g_local = grid.num_nodes, grid.gpus_per_node
    # Phase 1-4 blocks: local index g holds slots g·N..g·N+N-1 within its node;
    # (n, g) holds slot g·N + n across nodes.
    in_node = {
        grid.ranks[n][g]: [c for c in chunks if (c % slots) // n_nodes == g]
        for n in range(n_nodes)
        for g in range(g_local)
    }
    across = {
        grid.ranks[n][g]: [c for c in chunks if c % slots == g * n_nodes + n]
        for n in range(n_nodes)
        for g in range(g_local)
    }
    transfers: list[TransferTable] = []
    for order in node_rings:
        transfers.append(_ring_reducescatter(order, in_node, 0))
    for order in peer_rings:
        transfers.append(_ring_reducescatter(order, across, g_local - 1))
        transfers.append(_ring_allgather(order, across, g_local - 1 + n_nodes - 1))
    for order in node_rings:
        transfers.append(_ring_allgather(order, in_node, g_local - 1 + 2 * (n_nodes - 1)))
    return transfers


# ---------------------------------------------------------------------------
# GC3 two-step Alltoall (§7.3, Fig. 8)
# ---------------------------------------------------------------------------
@implements("two-step-alltoall", ("alltoall",))
def two_step_alltoall(topology: Topology, collective: Collective, group_size: int | None = None) -> Algorithm:
    """GC3's two-step Alltoall (GC3 §7.3, Fig. 8).

    Step 1 (intra-node): GPU (m, i) sends every chunk for a GPU (n, g) to the
    GPU of its own node with the destination's local index, (m, g); chunks
    for its own node (n = m) thereby arrive. Step 2 (inter-node): (m, g) sends
    (n, g), for every other node n, the G·C chunks its node has for (n, g) as
    one message: one inter-node transfer per node pair per local index,
    instead of G² small ones.

    Cost, ``M`` one rank's buffer (nccl-tests' Alltoall size), rank pairs
    sending concurrently::

        α_a + M/(G·B_a) + α_e + M/(N·B_e)

    (a step over one GPU per node or one node has no transfers and is left out).

    >>> from simcoll import load_topology, make_collective
    >>> two_step_alltoall(load_topology("fully-connected:6"), make_collective("alltoall", 6), group_size=3).steps
    2
    """
    grid = node_grid(topology, "two-step-alltoall", group_size)
    routes = routes_of(topology)
    p, factor = collective.num_ranks, collective.chunk_factor
    node, local = np.zeros(p, dtype=np.int64), np.zeros(p, dtype=np.int64)
    for n, ranks in enumerate(grid.ranks):
        node[list(ranks)], local[list(ranks)] = n, np.arange(len(ranks))
    # per (src, dst, index), src by src: the chunk goes src -> relay (step 0), then relay -> dst (step 1)
    src = np.repeat(np.arange(p, dtype=np.int64), p * factor)
    dst = np.tile(np.repeat(np.arange(p, dtype=np.int64), factor), p)
    chunk = (np.tile(np.arange(factor, dtype=np.int64), p * p) * p + dst) * p + src
    relay = np.array(grid.ranks, dtype=np.int64)[node[src], local[dst]]
    hops = np.stack([np.stack([src, relay, np.zeros_like(src)]), np.stack([relay, dst, np.ones_like(src)])], axis=2)
    chunk = np.repeat(chunk, 2)
    senders, receivers, steps = (hops[k].reshape(-1) for k in range(3))
    kept = senders != receivers  # a hop whose ends coincide is left out
    table = TransferTable(
        chunk[kept], senders[kept], receivers[kept], np.zeros(int(kept.sum()), dtype=bool), step=steps[kept]
    )
    return _build("two-step-alltoall", topology, collective, routes, grid, [table])


# ---------------------------------------------------------------------------
# GC3 AllToNext (§7.4)
# ---------------------------------------------------------------------------
@implements("alltonext", ("alltonext",))
def alltonext(topology: Topology, collective: Collective, group_size: int | None = None) -> Algorithm:
    """GC3's AllToNext algorithm (GC3 §7.4): rank i sends its buffer to rank
    i+1; the last rank sends nothing.

    Within a node the buffer goes directly. Across a node boundary it is split
    into G parts (chunk k of the buffer in part ``k mod G``): part j goes to
    the GPU with local index j of the sending node, crosses to the GPU with
    local index j of the receiving node, each over its own NIC, and is
    gathered on rank i+1: at most three steps; a hop whose ends coincide is
    skipped.

    Cost, ``M`` one rank's buffer, C a multiple of G, ranks numbered node by
    node: an intra-node pair takes ``α_a + M/B_a``; a node boundary takes
    ``h·(α_a + M/(G·B_a)) + α_e + M/(G·B_e)`` instead of the direct
    ``α_e + M/B_e``, where ``h = min(2, G-1)`` intra-node hops (the part of
    the source's own local index leaves directly, the part of the
    destination's arrives directly; with G >= 3 some part takes both). The
    collective takes the largest.

    >>> from simcoll import load_topology, make_collective
    >>> alltonext(load_topology("fully-connected:6"), make_collective("alltonext", 6, 3), group_size=3).steps
    3
    """
    grid = node_grid(topology, "alltonext", group_size)
    routes = routes_of(topology)
    g_local = grid.gpus_per_node
    transfers: list[Transfer] = []
    for src in range(collective.num_ranks - 1):
        dst = src + 1
        (m, _), (n, _) = grid.position(src), grid.position(dst)
        for k, chunk in enumerate(collective.input_layout[src]):
            if m == n:
                path = [src, dst]
            else:
                j = k % g_local
                path = [src, grid.ranks[m][j], grid.ranks[n][j], dst]
            for step, (a, b) in enumerate(zip(path, path[1:], strict=False)):
                if a != b:
                    transfers.append(Transfer(chunk, a, b, "copy", step))
    return _build("alltonext", topology, collective, routes, grid, [transfers])


_GROUP_SIZE = {
    "group_size": Option(
        "GPUs per group: treat consecutive blocks of this many ranks as nodes (needed on single-node machines; "
        "default: the machine's nodes)",
        positive_int,
    )
}


def _chunks_per_rank_count(collective: str, topology: Topology, **_options: object) -> int:
    """C = P makes every block of every phase equal, whatever N and G are."""
    return topology.num_ranks if collective in ("allreduce", "alltonext") else 1


def _two_d_ring_chunks(collective: str, topology: Topology, group_size: int | None = None, **_options: object) -> int:
    """The 2D ring's Allreduce deals the buffer into blocks ``c mod G`` inside
    a node and ``c mod N`` across nodes: lcm(N, G) chunks make both equal
    (:func:`two_d_ring`), and each step sends a pair's block as one message,
    so more chunks time the same and only list more transfers (P = 4,096 on
    ``torus2d:64x64`` in groups of 64: 64 chunks, 1 million transfers, where
    P chunks list 66 million). Where the grid cannot be read (a bad
    ``group_size``: the generator names it), P."""
    if collective != "allreduce":
        return 1
    try:
        grid = node_grid(topology, "2d-ring", group_size)
    except NotApplicableError:
        return topology.num_ranks
    return math.lcm(grid.num_nodes, grid.gpus_per_node)


GENERATORS = (
    Generator(
        "2d-ring",
        two_d_ring,
        two_d_ring.collectives,
        "intra-node ring then inter-node ring (NV-Group eq. 4)",
        _GROUP_SIZE,
        _two_d_ring_chunks,
    ),
    Generator(
        "gc3-hierarchical",
        gc3_hierarchical,
        gc3_hierarchical.collectives,
        "intra-node ReduceScatter, inter-node ReduceScatter + Allgather, intra-node Allgather (GC3 Figs. 2-3)",
        {
            **_GROUP_SIZE,
            "pipeline": Option(
                "chunk groups running the phases one step apart (GC3's pipelined version; default 1)", positive_int
            ),
        },
        _chunks_per_rank_count,
    ),
    Generator(
        "two-step-alltoall",
        two_step_alltoall,
        two_step_alltoall.collectives,
        "intra-node aggregation by destination local index, then one inter-node send per node pair (GC3 Fig. 8)",
        _GROUP_SIZE,
        _chunks_per_rank_count,
    ),
    Generator(
        "alltonext",
        alltonext,
        alltonext.collectives,
        "rank i to i+1, node boundaries split over every GPU and NIC of the node (GC3 §7.4)",
        _GROUP_SIZE,
        _chunks_per_rank_count,
    ),
)

__all__ = ["NodeGrid", "alltonext", "gc3_hierarchical", "node_grid", "two_d_ring", "two_step_alltoall"]

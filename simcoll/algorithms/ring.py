"""Ring algorithms: one ring, a bidirectional ring, and several edge-disjoint rings.

A ring visits every GPU once over routes of the topology (a Hamiltonian cycle
of the logical GPU graph).

- Allgather passes each rank's block around the ring; ReduceScatter passes
  partial sums around it; Allreduce is ReduceScatter followed by Allgather
  (Patarasuk & Yuan; NV-Group §3.1.1), as NCCL implements it.
- Broadcast and Reduce are a pipelined chain along the ring starting (or
  ending) at the root, as NCCL's ring Broadcast and Reduce (SCCL §5.3).
- The buffer may be split over several rings that run at once: the two
  directions of one ring (``bidirectional-ring``), or a set of rings that
  together respect the topology's bandwidth relation (``multi-ring``), which
  on the DGX-1 are NCCL's six logical rings (SCCL §2.2, §2.4, Table 3).

Chunks are dealt to rings round-robin by their index within a rank's block
(Allgather, ReduceScatter) or within the buffer (Allreduce, Broadcast,
Reduce), so every ring carries an equal share when the chunk factor allows;
multi-ring's default chunk factor (one chunk per ring found, per block of
each ring for Allreduce) always does.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Sequence

import numpy as np

from ..algorithm import Algorithm, OrbitTable, RelationIndex, TransferTable, layouts_rotate
from ..collectives import Collective
from ..errors import NotApplicableError
from ..routes import Routes, bandwidth_relation, routes_of
from ..topology import Topology
from ..topology_symmetry import rank_shifts
from .common import block_chunks, depth_first, finish, hamiltonian_path, implements, ring_steps
from .registry import Generator, Option, int_list, positive_int

SEARCH_TIME_LIMIT_S = 5.0

#: A safety cap on multi-ring's search (a DGX H100 carries 18 rings).
MAX_RINGS = 64

Blocks = Callable[[int], Sequence[int]]


# -- finding rings ----------------------------------------------------------------
def find_ring(topology: Topology, routes: Routes | None = None, time_limit_s: float = SEARCH_TIME_LIMIT_S) -> list[int]:
    """A Hamiltonian cycle of ranks over the topology's routes, preferring
    pairs joined by more direct links; rank order 0..P-1 if it is one.

    Raises :class:`NotApplicableError` when none exists, or none is found
    within ``time_limit_s`` (the search is exponential in the worst case).
    """
    routes = routes or routes_of(topology)
    p = topology.num_ranks
    if p == 1:
        return [0]
    natural = list(range(p))
    if all(routes.connected(natural[i], natural[(i + 1) % p]) for i in range(p)):
        return natural
    neighbours = {
        r: sorted((d for d in range(p) if routes.connected(r, d)), key=lambda d: (-routes.direct_links(r, d), d))
        for r in range(p)
    }
    try:
        path = hamiltonian_path(0, neighbours.__getitem__, p, routes.connected, time_limit_s)
    except NotApplicableError as exc:
        raise NotApplicableError(f"{topology.name}: {exc}") from None
    if path is None:
        raise NotApplicableError(f"{topology.name} has no Hamiltonian cycle over its GPU links, so no ring exists")
    return path


class _Capacity:
    """What the bandwidth relation still allows once some rings are placed, each
    ring sending one chunk per round over each of its P rank pairs.

    A pair joined by k direct links carries k rings; a pair joined through a
    switch or a network counts against its ranks' (and nodes') egress and
    ingress constraints. Constraints of capacity 0 are unlimited, as in
    :func:`~simcoll.algorithms.common.minimal_rounds`.
    """

    def __init__(self, topology: Topology, routes: Routes):
        p = self.p = topology.num_ranks
        index = RelationIndex.of(bandwidth_relation(topology, routes), p)
        # left[i]: what constraint i still allows; a last entry (padding the rows below) stands for
        # "no constraint", and allows as much as a constraint of capacity 0 (kept so: take_keys)
        self.unlimited = np.append(index.capacity == 0, True)
        self.left = np.where(self.unlimited, _UNLIMITED, np.append(index.capacity, 0))
        # per place among a pair's constraints (RelationIndex.by_pair, padded with the last entry), a
        # rank's pairs side by side, from it (by_place[place, a, b]) and to it (to_place[place, b, a]):
        # the search's slack of a rank's P pairs is then the least of a few contiguous rows
        self.by_place = np.ascontiguousarray(index.every_pair_table().T).reshape(-1, p, p)
        self.to_place = np.ascontiguousarray(self.by_place.transpose(0, 2, 1))
        self.connected = np.stack([routes.reachable_mask(r) for r in range(p)])
        self.load = np.zeros((p, p), dtype=np.int32)  # rings placed (or on the path) per pair

    def slack(self, a: int, b: int) -> int:
        """How many more rings may use the pair a -> b (0: none, or no route)."""
        if not self.connected[a, b]:
            return 0
        return int(self.left[self.by_place[:, a, b]].min())

    def slack_from(self, a: int) -> np.ndarray:
        """:meth:`slack` of ``a -> d`` for every rank ``d``."""
        return np.where(self.connected[a], self.left[self.by_place[:, a]].min(axis=0), 0)

    def slack_to(self, b: int) -> np.ndarray:
        """:meth:`slack` of ``d -> b`` for every rank ``d``."""
        return np.where(self.connected[:, b], self.left[self.to_place[:, b]].min(axis=0), 0)

    def slack_all(self) -> np.ndarray:
        """:meth:`slack` of every pair, P x P."""
        return np.where(self.connected, self.left[self.by_place].min(axis=0), 0)

    def take(self, a: int, b: int, n: int = 1) -> None:
        self.take_keys(np.array([a * self.p + b]), n)

    def take_keys(self, keys: np.ndarray, n: int) -> None:
        """``n`` more rings (fewer, if negative) on each pair of ``keys``."""
        np.subtract.at(self.left, self.by_place.reshape(len(self.by_place), -1)[:, keys].ravel(), n)
        self.left[self.unlimited] = _UNLIMITED  # capacity 0 and the padding count against nothing
        np.add.at(self.load.ravel(), keys, n)

    def fits(self, ring: Sequence[int]) -> bool:
        keys = _ring_keys(ring, self.p)
        if not len(keys):
            return True
        self.take_keys(keys, 1)
        ok = bool((self.left >= 0).all())
        self.take_keys(keys, -1)
        return ok and bool(self.connected.ravel()[keys].all())

    def place(self, ring: Sequence[int]) -> None:
        self.take_keys(_ring_keys(ring, self.p), 1)


#: :class:`_Capacity`'s slack of a pair no constraint limits.
_UNLIMITED = 1 << 30


def _ring_keys(ring: Sequence[int], p: int) -> np.ndarray:
    """The keys ``a * P + b`` of a ring's pairs (:func:`_pairs`)."""
    if len(ring) < 2:
        return np.zeros(0, dtype=np.int64)
    order = np.asarray(ring, dtype=np.int64)
    return order * p + np.roll(order, -1)


def _pairs(ring: Sequence[int]) -> list[tuple[int, int]]:
    p = len(ring)
    return [(ring[i], ring[(i + 1) % p]) for i in range(p)] if p > 1 else []


def _reverse(ring: Sequence[int]) -> list[int]:
    """The same cycle travelled the other way, still starting at ``ring[0]``."""
    return [ring[0], *reversed(ring[1:])]


def _search_ring(capacity: _Capacity, p: int, deadline: float, budget: int | None) -> list[int] | None:
    """Depth-first search for a Hamiltonian cycle within ``capacity``: most
    slack first (double NVLinks before single ones), then the pairs fewest
    placed rings use (so a new ring spreads over fresh links), then the
    lowest rank. ``None`` when none exists or ``budget`` expansions run out;
    :class:`TimeoutError` past ``deadline``. Each step looks at a whole row
    of slacks at once (P ranks: a thousand on 128 DGX nodes)."""
    slack = capacity.slack_all()
    if not (slack.any(axis=1).all() and slack.any(axis=0).all()):
        return None  # some rank can no longer send or receive
    path = [0]
    unvisited = np.ones(p, dtype=bool)
    unvisited[0] = False
    ranks = np.arange(p)
    expansions = 0

    def enter() -> bool | list[int]:
        nonlocal expansions
        expansions += 1
        if budget is not None and expansions > budget:
            raise _OutOfBudget
        if time.monotonic() > deadline:
            raise TimeoutError
        last = path[-1]
        if len(path) == p:
            return capacity.slack(last, 0) > 0
        # Prune: rank 0 must still be reachable from some rank left to visit.
        back_home = capacity.slack_to(0) > 0
        if not (back_home[unvisited].any() or back_home[last]):
            return False
        row = capacity.slack_from(last)
        candidates = ranks[unvisited & (row > 0)]
        order = np.lexsort((candidates, capacity.load[last, candidates], -row[candidates]))
        return candidates[order].tolist()

    def forward(nxt: int) -> bool:
        capacity.take(path[-1], nxt)
        path.append(nxt)
        unvisited[nxt] = False
        return True

    def back() -> None:
        last = path.pop()
        unvisited[last] = True
        capacity.take(path[-1], last, -1)

    try:
        closed = depth_first(enter, forward, back)
    except _OutOfBudget:
        closed = False
    if not closed:
        while len(path) > 1:  # give back the capacity the path holds
            back()
        return None
    ring = list(path)
    capacity.take_keys(_ring_keys(ring, p)[:-1], -1)  # the path's pairs, not the closing one
    return ring


class _OutOfBudget(Exception):
    """A bounded ring search ran out of expansions."""


def find_rings(
    topology: Topology,
    routes: Routes | None = None,
    limit: int | None = None,
    time_limit_s: float = SEARCH_TIME_LIMIT_S,
) -> list[list[int]]:
    """Rings (each a Hamiltonian cycle of ranks) that can all run at once, one
    chunk per round on each of their pairs, within the topology's bandwidth
    relation: a pair of GPUs joined by two NVLinks carries two rings.

    Greedy: find a ring, add it and its reverse, repeat on the capacity left,
    until ``limit`` rings (at most :data:`MAX_RINGS`) or no ring fits. On the
    DGX-1 this gives the six logical rings of SCCL §2.2: the double-NVLink
    cycle twice in each direction and the single-NVLink cycle in each direction.

    Raises :class:`NotApplicableError` when there is no ring at all or none is
    found within ``time_limit_s``; later rings get a bounded search (a greedy
    set is not always the largest).

    >>> from simcoll import load_topology
    >>> len(find_rings(load_topology("dgx1")))
    6
    """
    routes = routes or routes_of(topology)
    p = topology.num_ranks
    if p == 1:
        return [[0]]
    limit = min(limit, MAX_RINGS) if limit is not None else MAX_RINGS
    capacity = _Capacity(topology, routes)
    deadline = time.monotonic() + time_limit_s
    first = list(range(p)) if capacity.fits(list(range(p))) else None
    try:
        first = first or _search_ring(capacity, p, deadline, budget=None)
    except TimeoutError:
        raise NotApplicableError(f"{topology.name}: no ring found within {time_limit_s:g} s") from None
    if first is None:
        raise NotApplicableError(
            f"{topology.name} has no Hamiltonian cycle over its GPU routes (within their bandwidth), so no ring exists"
        )
    rings: list[list[int]] = []
    found: list[int] | None = first
    while found is not None and len(rings) < limit:
        for candidate in (found, _reverse(found)):
            if len(rings) < limit and capacity.fits(candidate):
                capacity.place(candidate)
                rings.append(candidate)
        try:
            found = _search_ring(capacity, p, deadline, budget=50 * p) if len(rings) < limit else None
        except TimeoutError:
            found = None
    return rings


def _check_ring(topology: Topology, routes: Routes, ring: Sequence[int]) -> list[int]:
    p = topology.num_ranks
    ring = list(ring)
    if sorted(ring) != list(range(p)):
        raise NotApplicableError(f"ring {ring} must list every rank 0..{p - 1} once")
    for i in range(p):
        a, b = ring[i], ring[(i + 1) % p]
        if p > 1 and not routes.connected(a, b):
            raise NotApplicableError(f"ring {ring}: {topology.name} has no route from rank {a} to rank {b}")
    return ring


# -- schedules on one ring ----------------------------------------------------------
# The schedules are emitted as columns (:class:`~simcoll.algorithm.TransferTable`):
# a ring Allreduce on 1,024 ranks has two million transfers.
def _ring_allgather_steps(
    collective: Collective, ring: list[int], first_step: int, blocks: Blocks, senders: list[int] | None = None
) -> TransferTable:
    """Each position forwards the block that started k positions behind it
    (``senders``: the positions whose sends are wanted, default all)."""
    return ring_steps(ring, first_step, 0, blocks, "copy", senders)


def _ring_reducescatter_steps(
    collective: Collective,
    ring: list[int],
    blocks: Blocks | None = None,
    first_step: int = 0,
    senders: list[int] | None = None,
) -> TransferTable:
    """At step k, position i adds its partial of the block owned k+1 positions
    behind it and passes it on; after P-1 steps each owner holds its block."""
    blocks = blocks or (lambda owner: block_chunks(collective, owner))
    return ring_steps(ring, first_step, 1, blocks, "reduce", senders)


def _chain_steps(path: Sequence[int], slots: Sequence[Sequence[int]], op: str) -> TransferTable:
    """Pipelined chain: the chunks of slot s cross hop h (path[h] -> path[h+1])
    at step s + h, so hop h works on slot s while hop h+1 works on slot s-1."""
    hops = len(path) - 1
    path_a = np.asarray(path, dtype=np.int64)
    slot_of = np.fromiter((s for s, slot in enumerate(slots) for _ in slot), dtype=np.int64)
    chunks = np.fromiter((c for slot in slots for c in slot), dtype=np.int64, count=len(slot_of))
    h = np.repeat(np.arange(max(hops, 0), dtype=np.int64), len(chunks))
    return TransferTable(
        chunk=np.tile(chunks, max(hops, 0)),
        src=path_a[h],
        dst=path_a[h + 1],
        reduce=np.full(len(h), op == "reduce"),
        step=np.tile(slot_of, max(hops, 0)) + h,
    )


def _from_root(ring: Sequence[int], root: int) -> list[int]:
    """The ring rotated to start at ``root``."""
    i = list(ring).index(root)
    return [*ring[i:], *ring[:i]]


# -- schedules on several rings at once --------------------------------------------------
def _rings_transfers(
    collective: Collective, rings: Sequence[list[int]], slot_size: int = 1, below: int | None = None
) -> TransferTable:
    """Every ring runs the ring algorithm for ``collective`` on its share of
    the chunks (module docstring); Broadcast and Reduce move ``slot_size``
    chunks of a ring per pipeline step. ``below``: only the transfers sent
    from ranks below it (an orbit's representatives: Allgather,
    ReduceScatter and Allreduce)."""
    p, k, name = collective.num_ranks, len(rings), collective.name
    tables: list[TransferTable] = []

    def senders(order: list[int]) -> list[int] | None:
        return None if below is None else [i for i, rank in enumerate(order) if rank < below]

    if name in ("allgather", "reducescatter"):
        # Block chunk i*P + n belongs to ring i mod k.
        layout = collective.input_layout if name == "allgather" else collective.output_layout
        for j, order in enumerate(rings):
            share = {owner: [c for c in layout[owner] if (c // p) % k == j] for owner in range(p)}
            if name == "allgather":
                tables.append(_ring_allgather_steps(collective, order, 0, share.__getitem__, senders(order)))
            else:
                tables.append(_ring_reducescatter_steps(collective, order, share.__getitem__, 0, senders(order)))
    elif name == "allreduce":
        # Buffer chunk c belongs to ring c mod k; the ring splits its chunks into P blocks.
        for j, order in enumerate(rings):
            share: dict[int, list[int]] = {owner: [] for owner in range(p)}
            for c in range(j, collective.num_chunks, k):
                share[(c // k) % p].append(c)
            tables.append(_ring_reducescatter_steps(collective, order, share.__getitem__, 0, senders(order)))
            tables.append(_ring_allgather_steps(collective, order, p - 1, share.__getitem__, senders(order)))
    elif below is not None:
        raise ValueError(f"the rings' {name} is not an orbit")
    else:  # broadcast, reduce: buffer chunk c belongs to ring c mod k
        for j, order in enumerate(rings):
            mine = list(range(j, collective.num_chunks, k))
            slots = [mine[i : i + slot_size] for i in range(0, len(mine), slot_size)]
            path = _from_root(order, collective.root)
            if name == "broadcast":
                tables.append(_chain_steps(path, slots, "copy"))
            else:  # NCCL's ring Reduce: from the root's successor round to the root
                tables.append(_chain_steps([*path[1:], path[0]], slots, "reduce"))
    return TransferTable.concatenate(tables)


def rings_rotation(topology: Topology, rings: Sequence[Sequence[int]]) -> int | None:
    """The smallest shift ``s`` of every rank that maps the machine onto
    itself (:func:`~simcoll.topology_symmetry.rank_shifts`: whole nodes on a
    cluster, the cyclic shift of ``ring:N``, a torus's row shift),
    ``π(r) = (r + s) mod P``, and maps every ring onto itself (the same
    cyclic order, any starting point); None where the machine has no such
    shift or none maps the rings onto themselves. NCCL's rings repeat every
    node, or every other node where they enter alternate nodes at alternate
    GPUs (:mod:`.nccl`). A shift that maps one ring onto another would do for
    the schedule, but its images would list the rings' transfers on a shared
    rank pair in another order than :func:`_rings_transfers`, and so queue
    them otherwise."""
    p = topology.num_ranks
    if any(len(ring) != p for ring in rings):
        return None
    orders = [np.asarray(ring, dtype=np.int64) for ring in rings]
    for shift in rank_shifts(topology):
        if all(
            np.array_equal(np.roll(ring, -int(np.argmax(ring == (ring[0] + shift) % p))), (ring + shift) % p)
            for ring in orders
        ):
            return shift
    return None


def rings_orbit(collective: Collective, rings: Sequence[list[int]], topology: Topology) -> OrbitTable | None:
    """:func:`_rings_transfers` of an Allgather, ReduceScatter or Allreduce
    as an :class:`OrbitTable`: the transfers sent from the first ``s``
    ranks, ``s`` the shift of :func:`rings_rotation`; None where there is
    none, for the other collectives (rooted), or where an Allreduce's
    chunks are not dealt evenly (a chunk factor that is not a multiple of P
    per ring).

    π maps every ring onto itself, so the image of a transfer moving
    owner ``o``'s ``q``-th chunk of ring ``j`` moves owner ``π(o)``'s
    ``q``-th chunk of ring ``j`` at the same step. Allreduce: chunk ``c``
    belongs to ring ``j = c mod k``, owner rank ``o = (c // k) mod P``,
    index ``q = c // (kP)`` among that owner's, so σ(c) = j + k(π(o) + Pq).
    Allgather and ReduceScatter: chunk ``iP + n`` is rank ``n``'s ``i``-th
    (its input, its output), so σ(iP + n) = iP + π(n)."""
    p, k, g, name = collective.num_ranks, len(rings), collective.num_chunks, collective.name
    if name not in ("allreduce", "allgather", "reducescatter") or (name == "allreduce" and g % (k * p)):
        return None
    shift = rings_rotation(topology, rings)
    if shift is None:
        return None
    c = np.arange(g, dtype=np.int64)
    if name == "allreduce":
        chunk_map = c % k + k * (((c // k) % p + shift) % p + p * (c // (k * p)))
    else:
        chunk_map = (c // p) * p + (c % p + shift) % p
    if not all(
        layouts_rotate(layout, shift, chunk_map) for layout in (collective.input_layout, collective.output_layout)
    ):
        return None  # (a collective built otherwise than make_collective builds it)
    return OrbitTable(_rings_transfers(collective, rings, below=shift), p, shift, chunk_map)


def rings_schedule(
    collective: Collective, rings: Sequence[list[int]], topology: Topology, slot_size: int = 1
) -> TransferTable | OrbitTable:
    """:func:`_rings_transfers`, as an :class:`OrbitTable` where the rings
    repeat node after node (:func:`rings_orbit`)."""
    orbit = rings_orbit(collective, rings, topology)
    return orbit if orbit is not None else _rings_transfers(collective, rings, slot_size)


def _ring_order(topology: Topology, routes: Routes, ring: Sequence[int] | None) -> list[int]:
    return _check_ring(topology, routes, ring) if ring is not None else find_ring(topology, routes)


# -- single ring ---------------------------------------------------------------------
@implements("ring", ("allgather",))
def ring_allgather(topology: Topology, collective: Collective, ring: Sequence[int] | None = None) -> Algorithm:
    """Ring Allgather: P-1 steps, each rank forwarding to its successor the
    block it received in the previous step.

    Cost (NV-Group eq. 2, B the slowest ring link): ``(P-1)(α + M/(P·B))``.

    >>> from simcoll import load_topology, make_collective
    >>> ring_allgather(load_topology("ring:4"), make_collective("allgather", 4)).steps
    3
    """
    routes = routes_of(topology)
    order = _ring_order(topology, routes, ring)
    # (the rings' schedule of one ring: its block per owner is the owner's input)
    return finish("ring", collective, topology, rings_schedule(collective, [order], topology), routes, ring=order)


@implements("ring", ("reducescatter",))
def ring_reducescatter(topology: Topology, collective: Collective, ring: Sequence[int] | None = None) -> Algorithm:
    """Ring ReduceScatter: P-1 steps of receive-reduce-forward.

    Cost (NV-Group eq. 1): ``(P-1)(α + M/(P·B) + T_R(M/P))``.
    """
    routes = routes_of(topology)
    order = _ring_order(topology, routes, ring)
    # (the rings' schedule of one ring: its block per owner is the owner's output)
    return finish("ring", collective, topology, rings_schedule(collective, [order], topology), routes, ring=order)


@implements("ring", ("allreduce",))
def ring_allreduce(topology: Topology, collective: Collective, ring: Sequence[int] | None = None) -> Algorithm:
    """Ring Allreduce = ring ReduceScatter then ring Allgather over the blocks
    ``c mod P`` of the buffer; 2(P-1) steps. With chunk factor C = P each
    step moves one chunk of M/P bytes per link.

    Cost (NV-Group eq. 3 = eq. 1 + eq. 2):
    ``(P-1)(α + M/(P·B) + T_R(M/P)) + (P-1)(α + M/(P·B))``.
    """
    routes = routes_of(topology)
    order = _ring_order(topology, routes, ring)
    # the ReduceScatter, then the Allgather of the blocks (position i holds ring[i]'s, reduced): the
    # rings' schedule of one ring, whose blocks are those of block_chunks
    return finish("ring", collective, topology, rings_schedule(collective, [order], topology), routes, ring=order)


@implements("ring", ("broadcast",))
def ring_broadcast(topology: Topology, collective: Collective, ring: Sequence[int] | None = None) -> Algorithm:
    """Pipelined ring Broadcast (NCCL's ring Broadcast, SCCL §5.3 and Table 3
    for one ring): the root sends the C chunks one per step to its successor,
    each rank forwards what it received; P+C-2 steps.

    Cost: ``(P+C-2)(α + M/(C·B))``.

    >>> from simcoll import load_topology, make_collective
    >>> ring_broadcast(load_topology("ring:4"), make_collective("broadcast", 4, 3, root=2)).steps
    5
    """
    routes = routes_of(topology)
    order = _ring_order(topology, routes, ring)
    return finish("ring", collective, topology, _rings_transfers(collective, [order]), routes, ring=order)


@implements("ring", ("reduce",))
def ring_reduce(topology: Topology, collective: Collective, ring: Sequence[int] | None = None) -> Algorithm:
    """Pipelined ring Reduce (NCCL's ring Reduce): a chain from the root's
    successor round the ring to the root; each rank adds its contribution of a
    chunk and passes it on, one chunk per step; P+C-2 steps.

    Cost: ``(P+C-2)(α + M/(C·B) + T_R(M/C))``.
    """
    routes = routes_of(topology)
    order = _ring_order(topology, routes, ring)
    return finish("ring", collective, topology, _rings_transfers(collective, [order]), routes, ring=order)


RING_BUILDERS = {
    "allgather": ring_allgather,
    "reducescatter": ring_reducescatter,
    "allreduce": ring_allreduce,
    "broadcast": ring_broadcast,
    "reduce": ring_reduce,
}


@implements("ring", ("allgather", "reducescatter", "allreduce", "broadcast", "reduce"))
def ring(topology: Topology, collective: Collective, ring: Sequence[int] | None = None) -> Algorithm:
    """Ring algorithm for Allgather, ReduceScatter, Allreduce (NV-Group eqs.
    1-3), and the pipelined ring chain for Broadcast and Reduce.

    >>> from simcoll import load_topology, make_collective
    >>> a = ring(load_topology("dgx1"), make_collective("allgather", 8))
    >>> (a.chunks, a.steps, a.rounds)
    (1, 7, 7)
    """
    return RING_BUILDERS[collective.name](topology, collective, ring)


def _ring_chunks(collective: str, topology: Topology, **_options: object) -> int:
    """One block per rank for Allreduce; a P-deep pipeline for Broadcast and Reduce."""
    return topology.num_ranks if collective in ("allreduce", "broadcast", "reduce") else 1


# -- bidirectional ring ----------------------------------------------------------------
@implements("bidirectional-ring", ("allgather", "reducescatter", "allreduce"))
def bidirectional_ring(topology: Topology, collective: Collective, ring: Sequence[int] | None = None) -> Algorithm:
    """Bidirectional ring: the buffer is split in two halves (chunks dealt
    alternately), one running the ring algorithm clockwise, the other
    counter-clockwise, so every ring link carries data both ways (NCCL's rings
    in both directions, SCCL §2.2). Same steps as one ring, half the
    bandwidth term on a ring whose links are full duplex:

    - Allgather ``(P-1)(α + M/(2P·B))``;
    - ReduceScatter ``(P-1)(α + M/(2P·B) + T_R(M/(2P)))``;
    - Allreduce the sum of the two (C = 2P gives each direction one chunk per block).

    >>> from simcoll import load_topology, make_collective
    >>> a = bidirectional_ring(load_topology("ring:4"), make_collective("allgather", 4, 2))
    >>> (a.chunks, a.steps, a.rounds)
    (2, 3, 3)
    """
    routes = routes_of(topology)
    order = _ring_order(topology, routes, ring)
    backward = _reverse(order)
    for a, b in _pairs(backward):
        if not routes.connected(a, b):
            raise NotApplicableError(
                f"bidirectional-ring: {topology.name} has no route from rank {a} to rank {b}, "
                f"so ring {order} cannot run backwards"
            )
    transfers = rings_schedule(collective, [order, backward], topology)
    return finish("bidirectional-ring", collective, topology, transfers, routes, ring=order)


def _bidirectional_chunks(collective: str, topology: Topology, **_options: object) -> int:
    """One chunk per direction (per block, for Allreduce)."""
    return 2 * topology.num_ranks if collective == "allreduce" else 2


# -- multi-ring ------------------------------------------------------------------------
@implements("multi-ring", ("allgather", "reducescatter", "allreduce", "broadcast", "reduce"))
def multi_ring(topology: Topology, collective: Collective, rings: int | None = None, m: int | None = None) -> Algorithm:
    """Multi-ring: the rings of :func:`find_rings` (NCCL's channels; on the
    DGX-1 the six logical rings of SCCL §2.2) run at once, each on its share of
    the chunks, dealt round-robin.

    On the DGX-1 (SCCL Table 3; costs from SCCL §2.4 and §5.3, L a rank's
    input bytes):

    - Allgather, ReduceScatter: (C, S, R) = (6, 7, 7); ``7α + (7/6)·L·β``.
    - Allreduce: (48, 14, 14), 6 rings × 8 blocks (ReduceScatter then Allgather).
    - Broadcast, Reduce, pipelined with ``m`` steps of chunks per ring:
      (6m, 6+m, 6+m); ``(6+m)·α + (6+m)/(6m)·L·β``.

    In general, k rings whose pairs each have their own links of bandwidth B
    give Allgather ``(P-1)(α + M/(k·P·B))`` and Broadcast
    ``(P+m-2)(α + M/(k·m·B))``.

    Options: ``rings``, how many rings to use (default: as many as are found,
    at most one per chunk); ``m``, for Broadcast and Reduce, how many pipeline
    steps each ring's share is cut into (default: one chunk per step; the chunk
    factor must then be a multiple of rings × m).

    >>> from simcoll import load_topology, make_collective
    >>> a = multi_ring(load_topology("dgx1"), make_collective("allreduce", 8, 48))
    >>> (a.chunks, a.steps, a.rounds)
    (48, 14, 14)
    """
    if m is not None and collective.name not in ("broadcast", "reduce"):
        raise NotApplicableError(
            f"multi-ring: option m (pipeline steps) is for broadcast and reduce, not {collective.name}"
        )
    for option, value in (("rings", rings), ("m", m)):
        if value is not None and (not isinstance(value, int) or value < 1):
            raise NotApplicableError(f"multi-ring: option {option} must be a positive integer, got {value!r}")
    chunks = collective.chunk_factor
    if rings is not None and m is None and rings > chunks:
        raise NotApplicableError(f"multi-ring: {rings} rings need at least {rings} chunks, got chunk factor {chunks}")
    routes = routes_of(topology)
    # Without m, a ring with no chunk to carry is of no use; with m, the chunk factor must fit the rings found.
    # The greedy search with a limit stops early, so its rings are the first ones of the unlimited search.
    found = _rings_of(topology, routes)[: rings or (None if m is not None else chunks)]
    if rings is not None and rings > len(found):
        raise NotApplicableError(
            f"multi-ring: {rings} rings asked for, but only {len(found)} fit {topology.name}'s links"
        )
    slot_size = 1
    if m is not None:
        if collective.num_chunks % (len(found) * m):
            raise NotApplicableError(
                f"multi-ring: {len(found)} rings × m={m} pipeline steps need a chunk factor that is a multiple of "
                f"{len(found) * m}, got {collective.chunk_factor}"
            )
        slot_size = collective.num_chunks // (len(found) * m)
    transfers = rings_schedule(collective, found, topology, slot_size)
    extra = {"m": m} if m is not None else {}
    return finish("multi-ring", collective, topology, transfers, routes, rings=found, **extra)


def _multi_ring_chunks(collective: str, topology: Topology, **_options: object) -> int:
    """One chunk per ring found (per block of each ring, for Allreduce), so
    every ring carries the same share: on the DGX-1, NCCL's six rings give
    SCCL Table 3's point (48 chunks for Allreduce). A chunk factor that the
    rings do not divide leaves some rings (or blocks) a chunk short, which
    unbalances them."""
    rings = len(_rings_of(topology))
    return rings * topology.num_ranks if collective == "allreduce" else rings


#: :func:`find_rings` per topology, with no limit: the default chunk factor
#: and the generator both need them, and the search grows with P².
_RINGS: weakref.WeakKeyDictionary[Topology, list[list[int]]] = weakref.WeakKeyDictionary()


def _rings_of(topology: Topology, routes: Routes | None = None) -> list[list[int]]:
    """:func:`find_rings` of ``topology`` (every ring the greedy search finds), computed once per topology."""
    rings = _RINGS.get(topology)
    if rings is None:
        rings = _RINGS[topology] = find_rings(topology, routes)
    return rings


GENERATORS = (
    Generator(
        "ring",
        ring,
        ring.collectives,
        "single logical ring over a Hamiltonian cycle of the GPU links (NV-Group eqs. 1-3); "
        "pipelined ring chain for Broadcast and Reduce",
        {"ring": Option("comma-separated rank order, e.g. 0,3,2,1,5,6,7,4 (default: found automatically)", int_list)},
        chunks=_ring_chunks,
    ),
    Generator(
        "bidirectional-ring",
        bidirectional_ring,
        bidirectional_ring.collectives,
        "half the buffer on a ring, half on the same ring backwards (both directions of every link)",
        {"ring": Option("comma-separated rank order of the forward ring (default: found automatically)", int_list)},
        chunks=_bidirectional_chunks,
    ),
    Generator(
        "multi-ring",
        multi_ring,
        multi_ring.collectives,
        "edge-disjoint rings found in the topology, the buffer split over them "
        "(NCCL's six rings on DGX-1, SCCL §2.2 and Table 3)",
        {
            "rings": Option("number of rings to use (default: as many as fit the links)", positive_int),
            "m": Option(
                "Broadcast/Reduce: pipeline steps per ring; the chunk factor must be a multiple of rings × m",
                positive_int,
            ),
        },
        chunks=_multi_ring_chunks,
    ),
)

"""Helpers shared by algorithm generators: checking that a generator applies,
blocks of chunks, the fewest rounds per step the topology allows, and the
ring/chain search."""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from ..algorithm import Algorithm, OrbitTable, RelationIndex, Transfer, TransferTable, constraint_loads
from ..arrays import ragged_indices
from ..collectives import Collective
from ..errors import NotApplicableError, OptionError
from ..limits import check_build_time, uncharged
from ..routes import Routes, bandwidth_relation, check_relation_size
from ..topology import Topology


def implements(
    algorithm: str, collectives: Iterable[str]
) -> Callable[[Callable[..., Algorithm]], Callable[..., Algorithm]]:
    """Declare, once, what a generator function implements; enforce it on every call.

    The decorated ``function(topology, collective, ...)`` refuses (with
    :class:`NotApplicableError`, via :func:`require`) a collective not in
    ``collectives`` or of another rank count than the topology, and carries
    the declaration as ``function.collectives``, which its registry entry
    (:class:`~simcoll.algorithms.registry.Generator`) reads instead of
    repeating it.

    >>> from simcoll import load_topology, make_collective
    >>> @implements("swap", ("allgather",))
    ... def swap(topology, collective):
    ...     return "built"
    >>> swap.collectives
    ('allgather',)
    >>> swap(load_topology("ring:2"), make_collective("allreduce", 2))
    Traceback (most recent call last):
    simcoll.errors.NotApplicableError: swap implements allgather, not allreduce
    """
    supported = tuple(collectives)

    def declare(function: Callable[..., Algorithm]) -> Callable[..., Algorithm]:
        @functools.wraps(function)
        def checked(topology: Topology, collective: Collective, *args: Any, **kwargs: Any) -> Algorithm:
            require(collective, topology, supported, algorithm)
            check_relation_size(topology)  # its rounds need the relation: refused before building anything
            return function(topology, collective, *args, **kwargs)

        checked.collectives = supported  # type: ignore[attr-defined]
        return checked

    return declare


def require(collective: Collective, topology: Topology, supported: Iterable[str], algorithm: str) -> None:
    supported = tuple(supported)
    if collective.name not in supported:
        raise NotApplicableError(f"{algorithm} implements {', '.join(supported)}, not {collective.name}")
    if collective.num_ranks != topology.num_ranks:
        raise NotApplicableError(
            f"{algorithm}: the collective has {collective.num_ranks} ranks but {topology.name} has {topology.num_ranks}"
        )


def block_chunks(collective: Collective, owner: int) -> list[int]:
    """The chunks rank ``owner`` is responsible for reducing: for ReduceScatter
    its output chunks; for Allreduce the chunks ``c`` with ``c mod P == owner``
    (SCCL's Scattered relation applied to the Allreduce buffer)."""
    if collective.name == "reducescatter":
        return list(collective.output_layout[owner])
    return list(range(owner, collective.num_chunks, collective.num_ranks))


def minimal_rounds(transfers: Iterable[Transfer], topology: Topology, routes: Routes | None = None) -> tuple[int, ...]:
    """Fewest rounds per step that satisfy the topology's bandwidth relation
    (SCCL §3.3: at most b · r_s sends over each constraint (L, b) in step s)."""
    if isinstance(transfers, (TransferTable, OrbitTable)):
        return _minimal_rounds_table(transfers, topology, routes)
    transfers = list(transfers)
    if transfers and all(t.step is not None for t in transfers):
        return _minimal_rounds_table(TransferTable.from_transfers(transfers), topology, routes)
    steps = 1 + max((t.step for t in transfers), default=-1)
    relation = bandwidth_relation(topology, routes)
    sends: list[list[tuple[int, int]]] = [[] for _ in range(steps)]
    for t in transfers:
        sends[t.step].append((t.src, t.dst))
    rounds = []
    for pairs in sends:
        need = 1
        for c, n in constraint_loads(relation, pairs):
            if c.chunks_per_round:
                need = max(need, math.ceil(n / c.chunks_per_round))
        rounds.append(need)
    return tuple(rounds)


def _minimal_rounds_table(
    table: TransferTable | OrbitTable, topology: Topology, routes: Routes | None
) -> tuple[int, ...]:
    """:func:`minimal_rounds` on columns (same result, NumPy counts)."""
    index = RelationIndex.of(bandwidth_relation(topology, routes), topology.num_ranks)
    return tuple(index.rounds_needed(table)[0].tolist())


def finish(
    name: str,
    collective: Collective,
    topology: Topology,
    transfers: list[Transfer] | TransferTable | OrbitTable,
    routes: Routes,
    **metadata,
) -> Algorithm:
    """An Algorithm with the fewest rounds per step its topology allows; its
    transfers as columns (checked and counted with NumPy, not one Python
    object at a time)."""
    if not isinstance(transfers, (TransferTable, OrbitTable)):
        transfers = TransferTable.from_transfers(transfers)
    return Algorithm(
        name=name,
        collective=collective,
        transfers=transfers,
        rounds_per_step=minimal_rounds(transfers, topology, routes),
        topology=topology.name,
        metadata={"generator": name, **metadata},
    )


def hamiltonian_path(
    start: int,
    neighbours: Callable[[int], Sequence[int]],
    size: int,
    close: Callable[[int, int], bool] | None = None,
    time_limit_s: float = 5.0,
    what: str = "ring",
) -> list[int] | None:
    """Depth-first search for a path of ``size`` distinct nodes from ``start``,
    trying ``neighbours(node)`` in the order given; with ``close``, the last
    node must also reach ``start`` (a cycle). ``None`` when none exists; raises
    :class:`NotApplicableError` when ``time_limit_s`` runs out first (the search
    is exponential in the worst case)."""
    deadline = time.monotonic() + time_limit_s
    path, used = [start], {start}

    def enter() -> bool | Iterable[int]:
        if time.monotonic() > deadline:
            raise NotApplicableError(f"no {what} found within {time_limit_s:g} s")
        if len(path) == size:
            return close is None or close(path[-1], start)
        return neighbours(path[-1])

    def forward(node: int) -> bool:
        if node in used:
            return False
        path.append(node)
        used.add(node)
        return True

    return list(path) if depth_first(enter, forward, lambda: used.discard(path.pop())) else None


def depth_first(
    enter: Callable[[], bool | Iterable[Any]], forward: Callable[[Any], bool], back: Callable[[], None]
) -> bool:
    """Depth-first search with an explicit stack (a path through every rank
    is deeper than Python's recursion allows on a thousand GPUs).

    ``enter()`` looks at the end of the current path: True when it is a
    solution, False when it leads nowhere, else the candidates to extend it
    with, tried in order. ``forward(c)`` extends the path by ``c`` (False to
    skip ``c``); ``back()`` undoes the last extension. True when a solution
    was found (the path is left as it is), False when there is none (the
    path is back where it started)."""
    first = enter()
    if isinstance(first, bool):
        return first
    untried = [iter(first)]
    done = object()
    while untried:
        check_build_time("searching its path")
        candidate = next(untried[-1], done)
        if candidate is done:  # every candidate failed: back up one step
            untried.pop()
            if untried:
                back()
            continue
        if not forward(candidate):
            continue
        found = enter()
        if found is True:
            return True
        if found is False:
            back()
        else:
            untried.append(iter(found))
    return False


def require_routes(name: str, topology: Topology, routes: Routes, transfers: Iterable[Transfer]) -> None:
    """Raise :class:`NotApplicableError` naming the first rank pair the
    transfers use that has no route."""
    if isinstance(transfers, OrbitTable):
        p = topology.num_ranks
        pairs = [divmod(k, p) for k in transfers.rank_pairs(p).tolist() if not routes.connected(*divmod(k, p))]
    elif isinstance(transfers, TransferTable):
        p = topology.num_ranks
        missing = [k for k in transfers.rank_pairs(p).tolist() if not routes.connected(*divmod(k, p))]
        keys = transfers.src * p + transfers.dst if missing else None
        pairs = [divmod(int(keys[np.isin(keys, missing).argmax()]), p)] if missing else []  # the first used
    else:
        pairs = [pair for pair in dict.fromkeys((t.src, t.dst) for t in transfers) if not routes.connected(*pair)]
    if pairs:
        src, dst = pairs[0]
        raise NotApplicableError(f"{name}: {topology.name} has no route from rank {src} to rank {dst}")


def one_message_per_step(transfers: Iterable[Transfer] | TransferTable) -> TransferTable:
    """What a rank sends to one peer in one step travels as one message (one α)."""
    if not isinstance(transfers, TransferTable):
        transfers = TransferTable.from_transfers(transfers)
    with uncharged():  # the same rows, counted when they were built
        return TransferTable(
            transfers.chunk, transfers.src, transfers.dst, transfers.reduce, step=transfers.step, group=transfers.step
        )


def blocks_csr(blocks: Callable[[int], Iterable[int]], p: int) -> tuple[np.ndarray, np.ndarray]:
    """The chunks of every owner 0..p-1 as one array and its offsets (CSR)."""
    lists = [list(blocks(owner)) for owner in range(p)]
    lengths = np.fromiter((len(b) for b in lists), dtype=np.int64, count=p)
    offsets = np.zeros(p + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    flat = np.fromiter((c for b in lists for c in b), dtype=np.int64, count=int(offsets[-1]))
    return flat, offsets


def ring_steps(
    ring: Sequence[int],
    first_step: int,
    lag: int,
    blocks: Callable[[int], Iterable[int]],
    op: str,
    senders: Sequence[int] | None = None,
) -> TransferTable:
    """Position i sends to position i+1, at step ``first_step + k`` (k = 0..P-2),
    the chunks of the block owned by the rank ``k + lag`` positions behind it;
    rows ordered by step, then position, then chunk. ``senders``: the
    positions that send, ascending (default: all; an orbit's representatives
    are those of its first node)."""
    p = len(ring)
    order = np.asarray(ring, dtype=np.int64)
    # the blocks of the ring's ranks alone, by position (a node's ring of 8 among 1,024 ranks)
    members = [int(r) for r in ring]
    flat, offsets = blocks_csr(lambda position: blocks(members[position]), p)
    sending = np.arange(p, dtype=np.int64) if senders is None else np.asarray(senders, dtype=np.int64)
    k = np.repeat(np.arange(p - 1, dtype=np.int64), len(sending))
    i = np.tile(sending, max(p - 1, 0))
    owner = (i - k - lag) % p  # (its position)
    counts = offsets[owner + 1] - offsets[owner]
    rows = np.repeat(np.arange(len(owner), dtype=np.int64), counts)
    chunk = flat[ragged_indices(offsets[owner], counts)]
    return TransferTable(
        chunk=chunk,
        src=order[i][rows],
        dst=order[(i + 1) % p][rows],
        reduce=np.full(len(rows), op == "reduce"),
        step=first_step + k[rows],
    )


def tree_depths(parent: dict[int, int], root: int) -> dict[int, int]:
    """Depth of every rank of a tree given as ``{child: parent}`` (root at 0);
    an :class:`~simcoll.errors.OptionError` (a ValueError) when ``parent`` has a cycle."""
    depth = {root: 0}
    for rank in parent:
        up = []  # the ancestors of ``rank`` whose depth is not known yet, nearest first
        while rank not in depth:
            up.append(rank)
            if len(up) > len(parent):
                raise OptionError(f"{parent} is not a tree: rank {rank} is its own ancestor")
            rank = parent[rank]
        d = depth[rank]
        for r in reversed(up):
            d += 1
            depth[r] = d
    return depth

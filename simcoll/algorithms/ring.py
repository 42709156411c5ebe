"""Ring algorithms: Allgather, ReduceScatter and Allreduce on one logical ring.

The ring visits every GPU once over links of the topology (a Hamiltonian
cycle of the logical GPU graph). Ring Allreduce is ReduceScatter followed by
Allgather (Patarasuk & Yuan; NV-Group §3.1.1), as NCCL implements it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from ..algorithm import Algorithm, Transfer
from ..collectives import Collective
from ..errors import NotApplicableError
from ..routes import Routes
from ..topology import Topology
from .common import block_chunks, finish, require
from .registry import Generator, Option, int_list

SEARCH_TIME_LIMIT_S = 5.0


def find_ring(topology: Topology, routes: Routes | None = None, time_limit_s: float = SEARCH_TIME_LIMIT_S) -> list[int]:
    """A Hamiltonian cycle of ranks over the topology's routes, preferring
    pairs joined by more direct links; rank order 0..P-1 if it is one.

    Raises :class:`NotApplicableError` when none exists, or none is found
    within ``time_limit_s`` (the search is exponential in the worst case).
    """
    routes = routes or Routes(topology)
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
    deadline = time.monotonic() + time_limit_s
    path, used = [0], {0}

    def extend() -> bool:
        if time.monotonic() > deadline:
            raise NotApplicableError(f"{topology.name}: no ring found within {time_limit_s:g} s")
        if len(path) == p:
            return routes.connected(path[-1], path[0])
        for nxt in neighbours[path[-1]]:
            if nxt not in used:
                path.append(nxt)
                used.add(nxt)
                if extend():
                    return True
                path.pop()
                used.discard(nxt)
        return False

    if not extend():
        raise NotApplicableError(f"{topology.name} has no Hamiltonian cycle over its GPU links, so no ring exists")
    return path


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


def _ring_allgather_steps(collective: Collective, ring: list[int], first_step: int, blocks) -> list[Transfer]:
    """Each position forwards the block that started k positions behind it."""
    p = len(ring)
    transfers = []
    for k in range(p - 1):
        for i in range(p):
            owner = ring[(i - k) % p]
            for c in blocks(owner):
                transfers.append(Transfer(c, ring[i], ring[(i + 1) % p], "copy", first_step + k))
    return transfers


def _ring_reducescatter_steps(collective: Collective, ring: list[int]) -> list[Transfer]:
    """At step k, position i adds its partial of the block owned k+1 positions
    behind it and passes it on; after P-1 steps each owner holds its block."""
    p = len(ring)
    transfers = []
    for k in range(p - 1):
        for i in range(p):
            owner = ring[(i - k - 1) % p]
            for c in block_chunks(collective, owner):
                transfers.append(Transfer(c, ring[i], ring[(i + 1) % p], "reduce", k))
    return transfers


def ring_allgather(topology: Topology, collective: Collective, ring: Sequence[int] | None = None) -> Algorithm:
    """Ring Allgather: P-1 steps, each rank forwarding to its successor the
    block it received in the previous step.

    Cost (NV-Group eq. 2, B the slowest ring link): ``(P-1)(α + M/(P·B))``.

    >>> from simcoll import load_topology, make_collective
    >>> ring_allgather(load_topology("ring:4"), make_collective("allgather", 4)).steps
    3
    """
    require(collective, topology, ("allgather",), "ring")
    routes = Routes(topology)
    order = _check_ring(topology, routes, ring) if ring is not None else find_ring(topology, routes)
    transfers = _ring_allgather_steps(collective, order, 0, lambda owner: collective.input_layout[owner])
    return finish("ring", collective, topology, transfers, routes, ring=order)


def ring_reducescatter(topology: Topology, collective: Collective, ring: Sequence[int] | None = None) -> Algorithm:
    """Ring ReduceScatter: P-1 steps of receive-reduce-forward.

    Cost (NV-Group eq. 1): ``(P-1)(α + M/(P·B) + T_R(M/P))``.
    """
    require(collective, topology, ("reducescatter",), "ring")
    routes = Routes(topology)
    order = _check_ring(topology, routes, ring) if ring is not None else find_ring(topology, routes)
    transfers = _ring_reducescatter_steps(collective, order)
    return finish("ring", collective, topology, transfers, routes, ring=order)


def ring_allreduce(topology: Topology, collective: Collective, ring: Sequence[int] | None = None) -> Algorithm:
    """Ring Allreduce = ring ReduceScatter then ring Allgather over the blocks
    ``c mod P`` of the buffer; 2(P-1) steps. With chunk factor C = P each
    step moves one chunk of M/P bytes per link.

    Cost (NV-Group eq. 3 = eq. 1 + eq. 2):
    ``(P-1)(α + M/(P·B) + T_R(M/P)) + (P-1)(α + M/(P·B))``.
    """
    require(collective, topology, ("allreduce",), "ring")
    routes = Routes(topology)
    order = _check_ring(topology, routes, ring) if ring is not None else find_ring(topology, routes)
    p = len(order)
    transfers = _ring_reducescatter_steps(collective, order)
    # After the ReduceScatter, position i holds the reduced block of ring[i].
    transfers += _ring_allgather_steps(collective, order, p - 1, lambda owner: block_chunks(collective, owner))
    return finish("ring", collective, topology, transfers, routes, ring=order)


def ring(topology: Topology, collective: Collective, ring: Sequence[int] | None = None) -> Algorithm:
    """Ring algorithm for Allgather, ReduceScatter or Allreduce."""
    builders = {"allgather": ring_allgather, "reducescatter": ring_reducescatter, "allreduce": ring_allreduce}
    require(collective, topology, builders, "ring")
    return builders[collective.name](topology, collective, ring)


GENERATORS = (
    Generator(
        "ring",
        ring,
        ("allgather", "reducescatter", "allreduce"),
        "single logical ring over a Hamiltonian cycle of the GPU links (NV-Group eqs. 1-3)",
        {"ring": Option("comma-separated rank order, e.g. 0,3,2,1,5,6,7,4 (default: found automatically)", int_list)},
    ),
)

"""Bruck's algorithms (Bruck, Ho, Kipnis, Upfal & Weathersby 1997): Allgather
(their concatenation algorithm) and Alltoall (their index algorithm), each in
⌈log2 P⌉ steps on any number of ranks, with partners at distance 2^k.

Every transfer a rank sends to one peer in one step is one message (its
``group`` is the step), as in the paper's one-port model.
"""

from __future__ import annotations

from ..algorithm import Algorithm, Transfer
from ..collectives import Collective
from ..routes import Routes
from ..topology import Topology
from .common import finish, implements, one_message_per_step, require_routes
from .registry import Generator


def bruck_allgather_blocks(num_ranks: int) -> list[int]:
    """Blocks each rank sends in each step of Bruck's Allgather:
    ``min(2^k, P - 2^k)``, summing to P-1.

    >>> bruck_allgather_blocks(6)
    [1, 2, 2]
    """
    steps = (num_ranks - 1).bit_length()
    return [min(1 << k, num_ranks - (1 << k)) for k in range(steps)]


def bruck_alltoall_blocks(num_ranks: int) -> list[int]:
    """Blocks each rank sends in each step of Bruck's index algorithm: the
    number of offsets 1..P-1 with bit k set (P/2 each when P is a power of two).

    >>> bruck_alltoall_blocks(6)
    [3, 2, 2]
    """
    steps = (num_ranks - 1).bit_length()
    return [sum(1 for j in range(1, num_ranks) if j >> k & 1) for k in range(steps)]


@implements("bruck", ("allgather", "alltoall"))
def bruck(topology: Topology, collective: Collective) -> Algorithm:
    """Bruck et al. 1997, radix 2, any P, ⌈log2 P⌉ steps.

    - Allgather (concatenation): after step k rank r holds the blocks of
      ranks r .. r + 2^(k+1) - 1 (mod P). In step k it sends the first
      ``min(2^k, P - 2^k)`` blocks it holds to rank r - 2^k, so the last step
      sends only what is still missing.
    - Alltoall (index): the block from s to d has offset j = (d - s) mod P;
      in step k every block whose offset has bit k set moves 2^k ranks on, so
      after the steps for all bits of j it has travelled j ranks, to d, through
      intermediate ranks. Each rank sends one message per step, to r + 2^k.

    Cost, step model (a barrier after each step), M the named buffer (the
    Allgather output; one rank's Alltoall buffer) and b = M/P one block:

    - Allgather ``⌈log2 P⌉·α + (P-1)/P·M/B``;
    - Alltoall ``⌈log2 P⌉·α + Σ_k n_k·M/(PB)``, n_k the offsets with bit k set
      (:func:`bruck_alltoall_blocks`): ``log2 P·(α + M/(2B))`` for P = 2^n.

    The critical-path model gives the same for P a power of two; otherwise a
    step whose blocks were all in place earlier need not wait for the step
    before it, so it can be less.

    >>> from simcoll import load_topology, make_collective
    >>> bruck(load_topology("fully-connected:6"), make_collective("alltoall", 6)).steps
    3
    """
    p = collective.num_ranks
    steps = (p - 1).bit_length()
    transfers: list[Transfer] = []
    if collective.name == "allgather":
        for k, count in enumerate(bruck_allgather_blocks(p)):
            for r in range(p):
                dst = (r - (1 << k)) % p
                for owner in ((r + i) % p for i in range(count)):
                    transfers += [Transfer(c, r, dst, "copy", k) for c in collective.input_layout[owner]]
    else:
        for s in range(p):
            for d in range(p):
                offset = (d - s) % p
                chunks = [(i * p + d) * p + s for i in range(collective.chunk_factor)]
                for k in range(steps):
                    if offset >> k & 1:
                        here = (s + offset % (1 << k)) % p  # moved by the lower bits already
                        there = (here + (1 << k)) % p
                        transfers += [Transfer(c, here, there, "copy", k) for c in chunks]
    routes = Routes(topology)
    require_routes("bruck", topology, routes, transfers)
    transfers = sorted(transfers, key=lambda t: (t.step, t.src, t.dst))
    return finish("bruck", collective, topology, one_message_per_step(transfers), routes)


GENERATORS = (
    Generator(
        "bruck",
        bruck,
        bruck.collectives,
        "Bruck et al. 1997: Allgather and Alltoall (index algorithm) in ⌈log2 P⌉ steps on any P",
        chunks=lambda collective, topology: 1,
    ),
)

"""Bruck's algorithms (Bruck, Ho, Kipnis, Upfal & Weathersby 1997): Allgather
(their concatenation algorithm) and Alltoall (their index algorithm), each in
⌈log2 P⌉ steps on any number of ranks, with partners at distance 2^k.

Every transfer a rank sends to one peer in one step is one message (its
``group`` is the step), as in the paper's one-port model.
"""

from __future__ import annotations

import numpy as np

from ..algorithm import Algorithm, TransferTable
from ..arrays import ragged_indices
from ..collectives import Collective
from ..routes import routes_of
from ..topology import Topology
from .common import blocks_csr, finish, implements, one_message_per_step, require_routes
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
    if collective.name == "allgather":
        transfers = _allgather_table(collective)
    else:
        transfers = _alltoall_table(collective)
    routes = routes_of(topology)
    require_routes("bruck", topology, routes, transfers)
    # by step, then sender, then receiver; otherwise in the order worked out above (a stable sort)
    order = np.lexsort((transfers.dst, transfers.src, transfers.step))
    return finish("bruck", collective, topology, one_message_per_step(transfers.take(order)), routes)


def _allgather_table(collective: Collective) -> TransferTable:
    """Step k, rank r sends to r - 2^k the chunks of the blocks of ranks
    r .. r + min(2^k, P - 2^k) - 1: by step, rank, block, chunk."""
    p = collective.num_ranks
    flat, offsets = blocks_csr(lambda owner: collective.input_layout[owner], p)
    parts = []
    for k, count in enumerate(bruck_allgather_blocks(p)):
        rank = np.repeat(np.arange(p, dtype=np.int64), count)
        owner = (rank + np.tile(np.arange(count, dtype=np.int64), p)) % p
        sizes = offsets[owner + 1] - offsets[owner]
        src = np.repeat(rank, sizes)
        chunk = flat[ragged_indices(offsets[owner], sizes)]
        parts.append((chunk, src, (src - (1 << k)) % p, np.full(len(src), k, dtype=np.int64)))
    return _table(parts)


def _alltoall_table(collective: Collective) -> TransferTable:
    """The block from s to d (offset j = d - s mod P) moves 2^k ranks on in
    every step k whose bit j has: by (s, d), then step, then chunk."""
    p, factor = collective.num_ranks, collective.chunk_factor
    s, d = (side.ravel() for side in np.meshgrid(np.arange(p), np.arange(p), indexing="ij"))
    offset = (d - s) % p
    parts = []
    for k in range((p - 1).bit_length()):
        moved = np.flatnonzero(offset >> k & 1)
        here = (s[moved] + offset[moved] % (1 << k)) % p  # moved by the lower bits already
        # chunk (i·P + d)·P + s for i < chunk_factor, in that order; rows keyed by (s, d), step, i to sort
        i = np.tile(np.arange(factor, dtype=np.int64), len(moved))
        pair = np.repeat(moved, factor)
        chunk = (i * p + d[pair]) * p + s[pair]
        src = np.repeat(here, factor)
        parts.append((chunk, src, (src + (1 << k)) % p, np.full(len(src), k, dtype=np.int64), pair, i))
    key = np.lexsort(
        (
            np.concatenate([x[5] for x in parts]),
            np.concatenate([x[3] for x in parts]),
            np.concatenate([x[4] for x in parts]),
        )
    )
    return _table([x[:4] for x in parts]).take(key)


def _table(parts: list[tuple[np.ndarray, ...]]) -> TransferTable:
    """Copies from (chunk, src, dst, step) column parts, in order."""
    chunk, src, dst, step = (np.concatenate([part[c] for part in parts]) for c in range(4))
    return TransferTable(chunk, src, dst, np.zeros(len(chunk), dtype=bool), step=step)


GENERATORS = (
    Generator(
        "bruck",
        bruck,
        bruck.collectives,
        "Bruck et al. 1997: Allgather and Alltoall (index algorithm) in ⌈log2 P⌉ steps on any P",
        chunks=lambda collective, topology, **_options: 1,
    ),
)

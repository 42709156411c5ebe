"""Recursive doubling and halving: Allgather, Allreduce and ReduceScatter in
log2 P exchange steps between partners ``v XOR 2^k``, and their combination,
Rabenseifner's RVHD Allreduce (Thakur, Rabenseifner & Gropp 2005).

The exchanges need a power-of-two number of ranks. With P = 2^n + r ranks,
the first 2r fold pairwise into r, as Thakur et al. do: rank 2i hands its data
to rank 2i+1 (reducing into it for the combining collectives), the 2^n
*virtual ranks* (the odd ranks below 2r and the ranks from 2r on) run the
power-of-two algorithm, each speaking for its one or two real ranks, and at
the end rank 2i+1 sends rank 2i what it needs. Folding adds one step at each
end.

Every transfer a rank sends to its partner in one step is one message (its
``group`` is the step): one α per exchange, as in MPI's sendrecv.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ..algorithm import Algorithm, Transfer, TransferTable
from ..collectives import Collective
from ..routes import routes_of
from ..topology import Topology
from .common import blocks_csr, finish, implements, one_message_per_step, require_routes
from .registry import Generator


class _Folding:
    """The virtual ranks of a P-rank run (module docstring)."""

    def __init__(self, num_ranks: int):
        self.num_ranks = num_ranks
        self.steps = num_ranks.bit_length() - 1  # n = ⌊log2 P⌋
        self.core = 1 << self.steps  # 2^n virtual ranks
        self.extra = num_ranks - self.core  # r pairs fold

    def real(self, v: np.ndarray) -> np.ndarray:
        """The real rank that acts as each virtual rank of ``v``."""
        return np.where(v < self.extra, 2 * v + 1, v + self.extra)

    def ranks_of(self, v: int) -> tuple[int, ...]:
        """The real ranks virtual rank ``v`` speaks for."""
        return (2 * v, 2 * v + 1) if v < self.extra else (v + self.extra,)

    def fold(self, chunks_of: Callable[[int], Sequence[int]], op: str) -> list[Transfer]:
        """Rank 2i hands ``chunks_of(2i)`` to rank 2i+1 (step 0)."""
        return [Transfer(c, 2 * i, 2 * i + 1, op, 0) for i in range(self.extra) for c in chunks_of(2 * i)]

    def unfold(self, chunks_of: Callable[[int], Sequence[int]], step: int) -> list[Transfer]:
        """Rank 2i+1 sends ``chunks_of(2i)`` back to rank 2i."""
        return [Transfer(c, 2 * i + 1, 2 * i, "copy", step) for i in range(self.extra) for c in chunks_of(2 * i)]

    def halving(self, block: Callable[[int], Sequence[int]], first_step: int) -> TransferTable:
        """Recursive halving over the virtual ranks: in step k, v and its partner
        at distance 2^(n-1-k) split the blocks they are still reducing; each sends
        (reducing) the half whose virtual ranks agree with the partner on bit
        n-1-k. Afterwards v holds ``block(v)`` reduced over everyone."""
        v = np.arange(self.core)
        exchanges = []
        for k in range(self.steps):
            bit = self.steps - 1 - k
            w = v ^ (1 << bit)
            exchanges.append((first_step + k, w, w >> bit << bit, 1 << bit))  # the u with u >> bit == w >> bit
        return self._exchanges(block, exchanges, reduce=True)

    def doubling(self, block: Callable[[int], Sequence[int]], first_step: int) -> TransferTable:
        """Recursive doubling over the virtual ranks: in step k, v sends its
        partner v XOR 2^k the blocks of the 2^k virtual ranks it has gathered."""
        v = np.arange(self.core)
        exchanges = [(first_step + k, v ^ (1 << k), v >> k << k, 1 << k) for k in range(self.steps)]
        return self._exchanges(block, exchanges, reduce=False)

    def exchange_all(self, chunks: Sequence[int], first_step: int) -> TransferTable:
        """In step k, every virtual rank v sends ``chunks`` (its whole buffer),
        reducing, to its partner v XOR 2^k."""
        v = np.arange(self.core)
        exchanges = [(first_step + k, v ^ (1 << k), v, 1) for k in range(self.steps)]  # v's own block
        return self._exchanges(lambda _: chunks, exchanges, reduce=True)

    def _exchanges(
        self,
        block: Callable[[int], Sequence[int]],
        exchanges: list[tuple[int, np.ndarray, np.ndarray, int]],
        reduce: bool,
    ) -> TransferTable:
        """Per ``(step, partner, first, count)``: every virtual rank v sends its
        partner ``partner[v]`` the blocks of the ``count`` virtual ranks from
        ``first[v]`` on, block by block, v after v (as columns: a block of
        consecutive virtual ranks is one slice of their chunks laid end to end)."""
        flat, offsets = blocks_csr(block, self.core)
        v = np.arange(self.core)
        parts = []
        for step, partner, first, count in exchanges:
            start, stop = offsets[first], offsets[first + count]
            sizes = stop - start
            rows = np.repeat(v, sizes)
            at = np.arange(len(rows)) + np.repeat(start - (np.cumsum(sizes) - sizes), sizes)
            parts.append(
                TransferTable(
                    flat[at],
                    self.real(rows),
                    self.real(partner[rows]),
                    np.full(len(rows), reduce),
                    step=np.full(len(rows), step),
                )
            )
        return TransferTable.concatenate(parts)


def _table(*parts: list[Transfer] | TransferTable) -> TransferTable:
    """The rows of ``parts`` in order, as one table."""
    return TransferTable.concatenate(
        [p if isinstance(p, TransferTable) else TransferTable.from_transfers(p) for p in parts]
    )


def _build(
    name: str, collective: Collective, topology: Topology, transfers: list[Transfer] | TransferTable
) -> Algorithm:
    routes = routes_of(topology)
    require_routes(name, topology, routes, transfers)
    return finish(name, collective, topology, one_message_per_step(transfers), routes)


@implements("recursive-doubling", ("allgather", "allreduce"))
def recursive_doubling(topology: Topology, collective: Collective) -> Algorithm:
    """Recursive doubling (Thakur, Rabenseifner & Gropp 2005): in step k each
    rank exchanges with rank ``v XOR 2^k``.

    - Allgather: it sends every block it has gathered so far (2^k of them), so
      the message doubles each step.
    - Allreduce: it sends its whole partial buffer and reduces the one it
      receives.

    Non-powers of two fold the first 2r ranks (module docstring): for
    Allgather rank 2i sends its block to 2i+1, whose virtual rank then carries
    both blocks, and at the end rank 2i+1 sends rank 2i every other block.

    Cost, P = 2^n, M the named buffer (the Allgather output; the Allreduce
    buffer), critical path and step model alike:

    - Allgather ``log2 P·α + (P-1)/P·M/B``;
    - Allreduce ``log2 P·(α + M/B + T_R(M))``.

    With P = 2^n + r, r > 0 (step model, barrier after each step):

    - Allgather ``α + M/(PB)`` (fold) + ``Σ_k (α + (2^k + min(2^k, r))·M/(PB))``
      (step k's largest message) + ``α + (P-1)/P·M/B`` (unfold);
    - Allreduce ``(n+2)(α + M/B) + (n+1)T_R(M)``.

    >>> from simcoll import load_topology, make_collective
    >>> recursive_doubling(load_topology("fully-connected:6"), make_collective("allreduce", 6)).steps  # fold, 2, unfold
    4
    """
    folding = _Folding(collective.num_ranks)
    core_start = 1 if folding.extra else 0
    end = core_start + folding.steps
    if collective.name == "allgather":
        inputs = collective.input_layout
        own = {r: set(inputs[r]) for r in range(collective.num_ranks)}
        transfers = _table(
            folding.fold(lambda r: inputs[r], "copy"),
            folding.doubling(lambda v: [c for r in folding.ranks_of(v) for c in inputs[r]], core_start),
            folding.unfold(lambda r: [c for c in range(collective.num_chunks) if c not in own[r]], end),
        )
    else:
        everything = range(collective.num_chunks)
        transfers = _table(
            folding.fold(lambda r: everything, "reduce"),
            folding.exchange_all(everything, core_start),
            folding.unfold(lambda r: everything, end),
        )
    return _build("recursive-doubling", collective, topology, transfers)


@implements("recursive-halving", ("reducescatter",))
def recursive_halving(topology: Topology, collective: Collective) -> Algorithm:
    """Recursive halving ReduceScatter (Thakur, Rabenseifner & Gropp
    2005): in step k each rank exchanges with the rank at distance
    P/2^(k+1), sending the half of the blocks it still holds that belong to the
    partner's side and reducing the half it receives; the message halves each
    step and each rank ends with its own block.

    Non-powers of two: rank 2i reduces its whole buffer into rank 2i+1, whose
    virtual rank then reduces the blocks of both; at the end 2i+1 sends rank
    2i its block.

    Cost, P = 2^n, M the input buffer (critical path and step model):
    ``log2 P·α + (P-1)/P·M/B + Σ_{k<n} T_R(M/2^(k+1))``, i.e. the standard
    ``log2 P·α + (P-1)/P·M·(β + γ)`` when T_R is ``γ`` per byte with no launch
    cost. With P = 2^n + r, r > 0 (step model): ``α + M/B + T_R(M)`` (fold) +
    ``Σ_k (α + b_k·M/(PB) + T_R(b_k·M/P))`` with ``b_k = 2^(n-1-k) + min(2^(n-1-k), r)``
    blocks + ``α + M/(PB)`` (unfold).

    >>> from simcoll import load_topology, make_collective
    >>> recursive_halving(load_topology("fully-connected:8"), make_collective("reducescatter", 8)).steps
    3
    """
    folding = _Folding(collective.num_ranks)
    core_start = 1 if folding.extra else 0
    outputs = collective.output_layout
    transfers = _table(
        folding.fold(lambda r: range(collective.num_chunks), "reduce"),
        folding.halving(lambda v: [c for r in folding.ranks_of(v) for c in outputs[r]], core_start),
        folding.unfold(lambda r: outputs[r], core_start + folding.steps),
    )
    return _build("recursive-halving", collective, topology, transfers)


@implements("rvhd", ("allreduce",))
def rvhd(topology: Topology, collective: Collective) -> Algorithm:
    """Rabenseifner's Allreduce, recursive vector halving and doubling (RVHD;
    Thakur, Rabenseifner & Gropp 2005; NV-Group §3.1.3): a recursive-
    halving ReduceScatter of the buffer, then a recursive-doubling Allgather of
    the reduced blocks. The 2^n virtual ranks split the buffer's C chunks by
    ``c mod 2^n``, so with C a multiple of 2^n every exchange is balanced.
    Non-powers of two: rank 2i reduces its whole buffer into rank 2i+1 first
    and gets the whole result back last.

    Cost, P = 2^n, C a multiple of P, M the buffer (critical path and step
    model): ReduceScatter ``log2 P·α + (P-1)/P·M/B + Σ_{k<n} T_R(M/2^(k+1))``,
    then Allgather ``log2 P·α + (P-1)/P·M/B``. This is NV-Group eq. (6) with its
    typo corrected: the paper prints ``p/(p-1)·M/B`` and ``T_R(p/(p-1)·M)``
    where Thakur et al., whom it cites, have ``(p-1)/p`` (a ReduceScatter cannot
    move more than the whole buffer); the reduction terms agree when T_R is
    linear with no launch cost, ``Σ_k T_R(M/2^(k+1)) = T_R((P-1)/P·M)``, and
    otherwise differ by ``(log2 P - 1)`` launches, one per step.
    With P = 2^n + r, r > 0 and C a multiple of 2^n (step model):
    ``2(α + M/B) + T_R(M)`` (fold and unfold) plus the above with 2^n for P.

    >>> from simcoll import load_topology, make_collective
    >>> rvhd(load_topology("fully-connected:8"), make_collective("allreduce", 8, 8)).steps
    6
    """
    folding = _Folding(collective.num_ranks)
    core_start = 1 if folding.extra else 0
    everything = range(collective.num_chunks)

    def block(v: int) -> range:
        return range(v, collective.num_chunks, folding.core)  # the chunks c with c mod 2^n == v

    transfers = _table(
        folding.fold(lambda r: everything, "reduce"),
        folding.halving(block, core_start),
        folding.doubling(block, core_start + folding.steps),
        folding.unfold(lambda r: everything, core_start + 2 * folding.steps),
    )
    return _build("rvhd", collective, topology, transfers)


def _power_of_two_below(collective: str, topology: Topology, **_options: object) -> int:
    """One chunk per virtual rank: 2^⌊log2 P⌋."""
    return 1 << (topology.num_ranks.bit_length() - 1)


GENERATORS = (
    Generator(
        "recursive-doubling",
        recursive_doubling,
        recursive_doubling.collectives,
        "recursive doubling, log2 P exchange steps (Thakur et al. 2005); non-powers of two fold the first 2r ranks",
        chunks=lambda collective, topology, **_options: 1,
    ),
    Generator(
        "recursive-halving",
        recursive_halving,
        recursive_halving.collectives,
        "recursive halving ReduceScatter, log2 P exchange steps (Thakur et al. 2005)",
        chunks=lambda collective, topology, **_options: 1,
    ),
    Generator(
        "rvhd",
        rvhd,
        rvhd.collectives,
        "Rabenseifner's recursive vector halving and doubling Allreduce (NV-Group eq. 6)",
        chunks=_power_of_two_below,
    ),
)

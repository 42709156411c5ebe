"""GC3 §7.1.1: ring Allreduce, one logical ring spread over channels."""

from __future__ import annotations

from ...program import Program
from ..core import DSLProgram, program
from .rings import allgather_ring, reduce_scatter_ring


def ring_allreduce_program(
    num_ranks: int, channels: int = 1, instances: int = 1, protocol: str = "Simple"
) -> DSLProgram:
    """In-place ring Allreduce on ``num_ranks`` ranks with ``num_ranks``
    chunks: a ReduceScatter then an AllGather around the ring 0, 1, ..., P-1
    (GC3 Fig. 3(b) with offset 0 and count 1). Block r runs on channel
    ``r mod channels``: the logical ring is spread over ``channels``
    channels, whose instructions overlap."""
    ranks = list(range(num_ranks))
    with program(
        f"ring_allreduce_{num_ranks}_ch{channels}",
        "allreduce",
        num_ranks=num_ranks,
        chunk_factor=num_ranks,
        inplace=True,
        protocol=protocol,
        instances=instances,
    ) as prog:
        reduce_scatter_ring(ranks, 0, 1, channel=lambda r: r % channels)
        allgather_ring(ranks, 0, 1, channel=lambda r: r % channels)
    return prog


def ring_allreduce(num_ranks: int, channels: int = 1, instances: int = 1, protocol: str = "Simple") -> Program:
    """The compiled, checked ring Allreduce (see :func:`ring_allreduce_program`)."""
    return ring_allreduce_program(num_ranks, channels, instances, protocol).compile()

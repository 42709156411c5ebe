"""GC3 §2, Fig. 3: hierarchical Allreduce on N nodes of G GPUs."""

from __future__ import annotations

from ...program import Program
from ..core import DSLProgram, parallelize, program
from .rings import allgather_ring, reduce_scatter_ring


def hierarchical_allreduce_program(
    nodes: int,
    gpus: int,
    *,
    channels: bool = False,
    parallel: int = 1,
    instances: int = 1,
    protocol: str = "Simple",
) -> DSLProgram:
    """In-place Allreduce on N·G ranks (rank n·G + g) with N·G chunks:
    intra-node ring ReduceScatter of N-chunk blocks, inter-node ring
    ReduceScatter and AllGather per GPU index, intra-node ring AllGather
    (GC3 Fig. 3(a)). With ``channels``, the phases use channels 0, 1, 2 as in
    GC3 §5.1; ``parallel`` wraps the intra-node phases in ``parallelize``."""
    n_, g_ = nodes, gpus
    with program(
        f"hierarchical_allreduce_{n_}x{g_}",
        "allreduce",
        num_ranks=n_ * g_,
        chunk_factor=n_ * g_,
        inplace=True,
        protocol=protocol,
        instances=instances,
    ) as prog:
        intra_rs, inter, intra_ag = (
            ((lambda r: 0), (lambda r: 1), (lambda r: 2)) if channels else ((lambda r: None),) * 3
        )
        for n in range(n_):
            with parallelize(parallel):
                reduce_scatter_ring([i + n * g_ for i in range(g_)], 0, n_, channel=intra_rs)
        for g in range(g_):
            cross = [i * g_ + g for i in range(n_)]
            reduce_scatter_ring(cross, g * n_, 1, channel=inter)
            allgather_ring(cross, g * n_, 1, channel=inter)
        for n in range(n_):
            with parallelize(parallel):
                allgather_ring([i + n * g_ for i in range(g_)], 0, n_, channel=intra_ag)
    return prog


def hierarchical_allreduce(nodes: int, gpus: int, **options) -> Program:
    """The compiled, checked hierarchical Allreduce."""
    return hierarchical_allreduce_program(nodes, gpus, **options).compile()

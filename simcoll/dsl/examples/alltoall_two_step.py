"""GC3 §7.3, Fig. 8: two-step Alltoall on N nodes of G GPUs."""

from __future__ import annotations

from ...program import Program
from ..core import DSLProgram, chunk, program


def alltoall_two_step_program(nodes: int, gpus: int, instances: int = 1, protocol: str = "Simple") -> DSLProgram:
    """Alltoall on N·G ranks (rank (n, g) = n·G + g). Chunks for another node
    first gather, on the GPU with the destination's local index, in scratch
    (contiguous per destination), then cross the IB in one aggregated send
    of G chunks per (source node, destination GPU)."""
    n_, g_ = nodes, gpus

    def rank(n: int, g: int) -> int:
        return n * g_ + g

    with program(
        f"alltoall_two_step_{n_}x{g_}", "alltoall", num_ranks=n_ * g_, protocol=protocol, instances=instances
    ) as prog:
        for n in range(n_):
            for g in range(g_):
                for m in range(n_):
                    for i in range(g_):
                        c = chunk(rank(m, i), "input", rank(n, g))
                        if n == m:
                            c.copy(rank(n, g), "output", rank(m, i))
                        else:
                            c.copy(rank(m, g), "scratch", rank(n, i))
                    if n != m:  # coalesced IB send
                        c = chunk(rank(m, g), "scratch", n * g_, count=g_)
                        c.copy(rank(n, g), "output", m * g_)
    return prog


def alltoall_two_step(nodes: int, gpus: int, instances: int = 1, protocol: str = "Simple") -> Program:
    """The compiled, checked two-step Alltoall."""
    return alltoall_two_step_program(nodes, gpus, instances, protocol).compile()

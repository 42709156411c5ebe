"""GC3 §7.4: AllToNext, a custom collective whose inter-node transfers are
spread over every GPU (and NIC) of the node."""

from __future__ import annotations

from ...program import Program
from ..core import DSLProgram, chunk, program


def alltonext_program(nodes: int, gpus: int, instances: int = 1, protocol: str = "Simple") -> DSLProgram:
    """AllToNext on N·G ranks with G chunks per buffer: rank i sends its
    buffer to rank i+1. Inside a node, one aggregated copy. Across nodes,
    the last GPU of node n scatters its G chunks over node n's GPUs (named
    scratch ``relay_out``), GPU g of node n sends chunk g to GPU g of node
    n+1 (``relay_in``), which forwards it to the first GPU of node n+1."""
    n_, g_ = nodes, gpus
    r_ = n_ * g_
    with program(
        f"alltonext_{n_}x{g_}", "alltonext", num_ranks=r_, chunk_factor=g_, protocol=protocol, instances=instances
    ) as prog:
        for i in range(r_ - 1):
            if (i + 1) % g_:
                chunk(i, "input", 0, count=g_).copy(i + 1, "output", 0)
                continue
            n = i // g_
            for g in range(g_):
                c = chunk(i, "input", g).copy(n * g_ + g, "relay_out", 0)
                c = c.copy((n + 1) * g_ + g, "relay_in", 0)
                c.copy((n + 1) * g_, "output", g)
    return prog


def alltonext(nodes: int, gpus: int, instances: int = 1, protocol: str = "Simple") -> Program:
    """The compiled, checked AllToNext."""
    return alltonext_program(nodes, gpus, instances, protocol).compile()

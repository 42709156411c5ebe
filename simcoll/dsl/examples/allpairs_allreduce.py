"""GC3 §7.1.2: All Pairs Allreduce, two communication steps."""

from __future__ import annotations

from ...program import Program
from ..core import DSLProgram, chunk, program


def allpairs_allreduce_program(num_ranks: int, instances: int = 1, protocol: str = "LL") -> DSLProgram:
    """In-place Allreduce on P ranks with P chunks: rank r owns chunk r.
    Step 1: every rank copies its contribution to chunk r into rank r's
    scratch; rank r reduces them locally. Step 2: rank r copies the result
    to every other rank."""
    p = num_ranks
    with program(
        f"allpairs_allreduce_{p}",
        "allreduce",
        num_ranks=p,
        chunk_factor=p,
        inplace=True,
        protocol=protocol,
        instances=instances,
    ) as prog:
        for r in range(p):
            for q in range(p):
                if q != r:
                    chunk(q, "input", r).copy(r, "scratch", q)
        for r in range(p):
            c = chunk(r, "input", r)
            for q in range(p):
                if q != r:
                    c = c.reduce(chunk(r, "scratch", q))
            for q in range(p):
                if q != r:
                    c.copy(q, "input", r)
    return prog


def allpairs_allreduce(num_ranks: int, instances: int = 1, protocol: str = "LL") -> Program:
    """The compiled, checked All Pairs Allreduce."""
    return allpairs_allreduce_program(num_ranks, instances, protocol).compile()

"""Pass 1: trace → Chunk DAG (GC3 §4.1).

Nodes are the traced ops; edges are dependencies through buffer slots:
*true* dependencies (an op reads a slot an earlier op wrote) and *false*
ones (an op overwrites a slot an earlier op read or wrote). A reduce with a
``base`` slot (dst := base ⊕ src) reads ``base``, not its destination. Every edge
carries the rank whose slot causes it, so the Instruction DAG can attach it
to the instructions on that rank.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .trace import Loc, Op, Trace


@dataclass(frozen=True)
class ChunkEdge:
    """``src`` op must precede ``dst`` op because of slots on ``rank``;
    ``kind`` is "true" (read after write) or "false" (write after read or
    write after write)."""

    src: int
    dst: int
    rank: int
    kind: str


@dataclass
class ChunkDAG:
    """Ops (node i is ``ops[i]``) and their dependency edges."""

    ops: list[Op]
    edges: list[ChunkEdge] = field(default_factory=list)

    def preds(self, node: int) -> list[ChunkEdge]:
        return [e for e in self.edges if e.dst == node]


def op_accesses(op: Op) -> tuple[list[Loc], list[Loc]]:
    """(slots read, slots written) by one op. A reduce also reads its local
    operand: the ``base`` slots when the op has them (dst := base ⊕ src),
    else its destination (dst := dst ⊕ src).

    >>> op = Op("reduce", Loc(0, "input", 0), Loc(1, "output", 0), base=Loc(1, "input", 0))
    >>> op_accesses(op)[0]
    [Loc(rank=0, buffer='input', index=0), Loc(rank=1, buffer='input', index=0)]
    """
    src = [Loc(op.src.rank, op.src.buffer, op.src.index + k) for k in range(op.count)]
    dst = [Loc(op.dst.rank, op.dst.buffer, op.dst.index + k) for k in range(op.count)]
    reads = list(src)
    if op.kind == "reduce":
        local = op.dst if op.base is None else op.base
        reads += [Loc(local.rank, local.buffer, local.index + k) for k in range(op.count)]
    return reads, dst


def build_chunk_dag(trace: Trace) -> ChunkDAG:
    """The Chunk DAG of ``trace``, with de-duplicated edges.

    >>> # chunk(0,'input',0).copy(1,'output',0) then chunk(1,'output',0).copy(2,'output',0):
    >>> # one true edge 0 -> 1 on rank 1
    """
    last_write: dict[Loc, int] = {}
    readers: dict[Loc, list[int]] = {}
    edges: dict[tuple[int, int, int], str] = {}
    for i, op in enumerate(trace.ops):
        reads, writes = op_accesses(op)
        for loc in reads:
            w = last_write.get(loc)
            if w is not None and w != i:
                edges[(w, i, loc.rank)] = "true"
        for loc in writes:
            w = last_write.get(loc)
            if w is not None and w != i:
                edges.setdefault((w, i, loc.rank), "false")
            for r in readers.get(loc, ()):
                if r != i:
                    edges.setdefault((r, i, loc.rank), "false")
        for loc in reads:
            readers.setdefault(loc, []).append(i)
        for loc in writes:
            last_write[loc] = i
            readers[loc] = []
    return ChunkDAG(list(trace.ops), [ChunkEdge(a, b, r, k) for (a, b, r), k in edges.items()])

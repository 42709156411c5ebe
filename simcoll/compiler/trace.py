"""The trace: the sequence of chunk operations a DSL program (or a lowered
Algorithm) performs, and the replication pass for instances and
``parallelize`` (GC3 §3, §5.1).

A :class:`Trace` is the compiler's input. Every :class:`Op` copies or reduces
``count`` contiguous chunks from ``src`` to ``dst`` (both :class:`Loc` s in
canonical buffer names: in-place aliases already resolved). ``split`` is the
parallelization factor in effect when the op was traced (1 outside any
``parallelize``); :func:`replicate` expands those ops, and the whole program
``instances`` times, into independent replicas on 1/n of the data each.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from ..collectives import Collective, custom_collective, make_collective
from ..errors import CompileError  # noqa: F401 (re-exported: the compiler's passes import it from here)
from ..topology import Topology

#: Buffers every rank has; any other name is a named scratch buffer.
FIXED_BUFFERS = ("input", "output")


class Loc(NamedTuple):
    """A chunk slot: ``index`` of ``buffer`` on ``rank``."""

    rank: int
    buffer: str
    index: int

    def describe(self, count: int = 1) -> str:
        span = f"[{self.index}]" if count == 1 else f"[{self.index}:{self.index + count}]"
        return f"rank {self.rank} {self.buffer}{span}"


@dataclass(frozen=True)
class Op:
    """One traced chunk operation: ``copy`` (dst := src) or ``reduce``
    (dst := dst ⊕ src, or dst := base ⊕ src when a ``base`` slot on the
    destination rank is given: MSCCL's receive-reduce-copy reading its local
    operand from one buffer and storing into another), on ``count`` chunks. ``channel``/``sendtb``/``recvtb``
    are the user's scheduling hints (None: the compiler chooses); ``where`` is
    the user's ``file:line``. Replica ``lane`` of ``lanes`` (from
    :func:`replicate`) only uses channels ``c·lanes + lane``."""

    kind: str
    src: Loc
    dst: Loc
    count: int = 1
    channel: int | None = None
    sendtb: int | None = None
    recvtb: int | None = None
    split: int = 1
    where: str = ""
    lane: int = 0
    lanes: int = 1
    base: Loc | None = None

    @property
    def remote(self) -> bool:
        return self.src.rank != self.dst.rank

    def describe(self) -> str:
        at = f" (at {self.where})" if self.where else ""
        base = f" with {self.base.describe(self.count)}" if self.base is not None and self.base != self.dst else ""
        return f"{self.kind} {self.src.describe(self.count)}{base} -> {self.dst.describe(self.count)}{at}"


@dataclass
class Trace:
    """A traced program: the collective it implements, its ops in program
    order, buffer sizes (chunks, per rank) and runtime settings."""

    name: str
    collective: Collective
    ops: list[Op]
    buffers: list[dict[str, int]]
    protocol: str = "Simple"
    instances: int = 1
    topology: Topology | None = None
    metadata: dict = field(default_factory=dict)

    @property
    def num_ranks(self) -> int:
        return self.collective.num_ranks


def buffer_sizes(collective: Collective) -> list[dict[str, int]]:
    """Input and output sizes per rank; an in-place alias buffer has size 0
    (it lives inside its target, as MSCCL XML's ``o_chunks="0"``)."""
    sizes = []
    for r in range(collective.num_ranks):
        d = {b: collective.buffer_chunks(r, b) for b in FIXED_BUFFERS}
        alias = collective.inplace_alias(r)
        if alias is not None:
            d[alias[0]] = 0
        sizes.append(d)
    return sizes


def canonical(collective: Collective, rank: int, buffer: str, index: int) -> Loc:
    """Resolve an in-place alias: ``output[i]`` of an in-place Allreduce is
    ``input[i]``."""
    alias = collective.inplace_alias(rank)
    if alias is not None and buffer == alias[0]:
        return Loc(rank, alias[1], alias[2] + index)
    return Loc(rank, buffer, index)


def refine_collective(collective: Collective, factor: int) -> Collective:
    """The collective with every buffer slot split into ``factor`` slots
    (slot ``s`` becomes ``s*factor .. s*factor+factor-1``). Built-ins stay
    built-ins (chunk factor × ``factor``) when their layouts refine that way;
    otherwise a custom collective of the same name."""
    if factor == 1:
        return collective
    mapping: dict[int, int] = {}

    def consistent(new: Collective) -> bool:
        for old_l, new_l in (
            (collective.input_layout, new.input_layout),
            (collective.output_layout, new.output_layout),
        ):
            for r in range(collective.num_ranks):
                if len(new_l[r]) != factor * len(old_l[r]):
                    return False
                for s, c in enumerate(old_l[r]):
                    for j in range(factor):
                        key = c * factor + j
                        if mapping.setdefault(key, new_l[r][s * factor + j]) != new_l[r][s * factor + j]:
                            return False
        return True

    if collective.builtin:
        new = make_collective(
            collective.name,
            collective.num_ranks,
            collective.chunk_factor * factor,
            root=collective.root,
            inplace=collective.inplace,
        )
        if consistent(new):
            return new
    return custom_collective(
        collective.name,
        [[c * factor + j for c in layout for j in range(factor)] for layout in collective.input_layout],
        [[c * factor + j for c in layout for j in range(factor)] for layout in collective.output_layout],
        combining=collective.combining,
        chunk_factor=collective.chunk_factor * factor,
    )


def replicate(trace: Trace) -> Trace:
    """Instances and chunk parallelization (GC3 §5.1): an op traced under
    ``parallelize(n)`` in a program with ``instances = m`` becomes ``s = n·m``
    replicas, each moving 1/s of its data on its own channel
    (``channel·s + j``), so replicas do not serialize.

    Every slot is refined into ``L = lcm(s)`` slots (slot ``x`` becomes
    ``x·L .. x·L+L-1``, and the collective is refined the same way). Replica
    ``j`` of an op on ``count`` slots from ``index`` moves the j-th
    contiguous part, ``count·L/s`` slots, of ``[index·L, (index+count)·L)``
    to the same offsets of its destination. The replicas together are the op
    on the refined slots, so the refined program computes what the original
    does, whatever the counts (aggregated ops stay contiguous); where
    replicas of ops with different counts touch the same slots, the
    slot-level dependencies of the Chunk DAG order them. The result has
    ``instances = 1`` and split 1 everywhere.

    >>> from simcoll.collectives import make_collective
    >>> coll = make_collective("broadcast", 2)
    >>> t = Trace("b", coll, [Op("copy", Loc(0, "input", 0), Loc(1, "output", 0))], buffer_sizes(coll), instances=2)
    >>> [(op.src.index, op.count, op.lane) for op in replicate(t).ops]
    [(0, 1, 0), (1, 1, 1)]
    """
    m = trace.instances
    splits = {op.split * m for op in trace.ops} or {m}
    big = math.lcm(*splits)
    if big == 1:
        return trace

    def place(loc: Loc, count: int, s: int, j: int) -> tuple[Loc, int]:
        part = count * big // s
        return Loc(loc.rank, loc.buffer, loc.index * big + j * part), part

    ops = []
    for op in trace.ops:
        s = op.split * m
        for j in range(s):
            src, part = place(op.src, op.count, s, j)
            dst, _ = place(op.dst, op.count, s, j)
            base = None if op.base is None else place(op.base, op.count, s, j)[0]
            channel = op.channel
            if s > 1 and channel is not None:
                channel = channel * s + j
            ops.append(
                replace(
                    op,
                    src=src,
                    dst=dst,
                    base=base,
                    count=part,
                    channel=channel,
                    split=1,
                    lane=op.lane * s + j,
                    lanes=op.lanes * s,
                )
            )
    buffers = [{b: n * big for b, n in d.items()} for d in trace.buffers]
    return replace(
        trace,
        collective=refine_collective(trace.collective, big),
        ops=ops,
        buffers=buffers,
        instances=1,
        metadata={**trace.metadata, "instances": m, "refinement": big},
    )


def merge_scratch(trace: Trace) -> Trace:
    """Lay named scratch buffers out inside one ``scratch`` buffer per rank
    (MSCCL XML knows only input, output and scratch); the offsets go to
    ``metadata["scratch_offsets"]``."""
    offsets: list[dict[str, int]] = []
    any_named = False
    for d in trace.buffers:
        off: dict[str, int] = {}
        pos = d.get("scratch", 0)
        for b in sorted(d):
            if b in (*FIXED_BUFFERS, "scratch"):
                continue
            off[b] = pos
            pos += d[b]
            any_named = True
        offsets.append(off)
    if not any_named:
        return trace

    def move(loc: Loc) -> Loc:
        off = offsets[loc.rank].get(loc.buffer)
        return loc if off is None else Loc(loc.rank, "scratch", off + loc.index)

    ops = [
        replace(op, src=move(op.src), dst=move(op.dst), base=None if op.base is None else move(op.base))
        for op in trace.ops
    ]
    buffers = []
    for d, off in zip(trace.buffers, offsets, strict=True):
        nd = {b: n for b, n in d.items() if b not in off}
        total = d.get("scratch", 0) + sum(d[b] for b in off)
        if total:
            nd["scratch"] = total
        buffers.append(nd)
    meta = {**trace.metadata, "scratch_offsets": {str(r): o for r, o in enumerate(offsets) if o}}
    return replace(trace, ops=ops, buffers=buffers, metadata=meta)


def output_slots(trace: Trace) -> frozenset[Loc]:
    """The canonical slots of every rank's output buffer: the only slots
    whose final contents the postcondition reads."""
    coll = trace.collective
    return frozenset(
        canonical(coll, r, "output", i) for r in range(coll.num_ranks) for i in range(len(coll.output_layout[r]))
    )

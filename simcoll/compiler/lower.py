"""Lowering of Algorithms to Programs (TACCL §6.2), through the compiler's
back half: instruction generation, fusion, channels, thread blocks,
dependency insertion and instances.

An Algorithm says which chunk moves where and when; a Program needs buffer
slots. Every rank keeps chunk ``c`` at its *home*: its output index when
``c`` is in the rank's postcondition, else its input index, else a slot
of the ``scratch`` buffer. A transfer reads the sender's current copy and
writes (copy) or reduces into (reduce) the receiver's home.

Step schedules (SCCL §3.3) read the state at the start of a step: a
transfer whose target slot another transfer of the same step still reads
is staged through a ``stage`` scratch slot and applied after the step's
reads. Timed schedules (TACCL) are taken in order of start time, transfers
starting together forming one step; the transfers of one contiguity
``group`` with contiguous slots on both sides become one multi-chunk
message. Finally every output slot not yet holding its chunk gets a local
copy (e.g. a rank's own Allgather chunk).
"""

from __future__ import annotations

from collections import defaultdict

from ..algorithm import Algorithm, Transfer
from ..costmodel import DEFAULT_FIFO_SLOTS
from ..program import PROTOCOLS, Program
from ..topology import Topology
from .pipeline import compile_trace
from .trace import CompileError, Loc, Op, Trace, buffer_sizes, canonical


def algorithm_trace(
    algorithm: Algorithm,
    *,
    instances: int = 1,
    protocol: str = "Simple",
    topology: Topology | None = None,
    aggregate: bool = False,
) -> Trace:
    """The trace of ``algorithm`` (see the module docstring). With
    ``aggregate``, step-schedule transfers of one step between the same two
    ranks with contiguous slots also merge into one message."""
    if protocol not in PROTOCOLS:
        raise CompileError(f"protocol {protocol!r} is not one of {PROTOCOLS}")
    if not isinstance(instances, int) or instances < 1:
        raise CompileError(f"instances must be a positive integer, got {instances!r}")
    coll = algorithm.collective
    p = coll.num_ranks
    buffers = buffer_sizes(coll)
    out_index = [{} for _ in range(p)]
    in_index = [{} for _ in range(p)]
    for r in range(p):
        for i, c in enumerate(coll.output_layout[r]):
            out_index[r].setdefault(c, i)
        for i, c in enumerate(coll.input_layout[r]):
            in_index[r].setdefault(c, i)
    scratch_home: list[dict[int, int]] = [{} for _ in range(p)]

    def home(rank: int, c: int) -> Loc:
        if c in out_index[rank]:
            return canonical(coll, rank, "output", out_index[rank][c])
        if c in in_index[rank]:
            return canonical(coll, rank, "input", in_index[rank][c])
        slots = scratch_home[rank]
        if c not in slots:
            slots[c] = len(slots)
            buffers[rank]["scratch"] = len(slots)
        return Loc(rank, "scratch", slots[c])

    current: dict[tuple[int, int], Loc] = {}
    for r in range(p):
        for c, i in in_index[r].items():
            current[(r, c)] = canonical(coll, r, "input", i)
    ops: list[Op] = []
    name = algorithm.name

    def describe(t: Transfer) -> str:
        return f"{name}: {t.describe()}"

    for batch in _steps(algorithm):
        reads = {}
        for t in batch:
            loc = current.get((t.src, t.chunk))
            if loc is None:
                raise CompileError(f"{describe(t)}: rank {t.src} does not hold chunk {t.chunk}")
            reads[id(t)] = loc
        read_slots = set(reads.values())
        pre: list[Op] = []
        direct: list[tuple[Op, int | None]] = []
        finish: list[tuple[Op, int | None]] = []
        stage_used: dict[int, int] = defaultdict(int)
        for t in batch:
            target = home(t.dst, t.chunk)
            if t.op == "reduce":
                base = current.get((t.dst, t.chunk))
                if base is None:
                    raise CompileError(f"{describe(t)}: rank {t.dst} holds no contribution of chunk {t.chunk}")
                if base != target:
                    pre.append(Op("copy", base, target, where=describe(t)))
            if target in read_slots:
                k = stage_used[t.dst]
                stage_used[t.dst] += 1
                tmp = Loc(t.dst, "stage", k)
                buffers[t.dst]["stage"] = max(buffers[t.dst].get("stage", 0), k + 1)
                direct.append((Op("copy", reads[id(t)], tmp, where=describe(t)), t.group))
                finish.append((Op(t.op, tmp, target, where=describe(t)), None))
            else:
                direct.append((Op(t.op, reads[id(t)], target, where=describe(t)), t.group))
            current[(t.dst, t.chunk)] = target
        timed = algorithm.schedule == "timed"
        ops += pre
        ops += _aggregate(direct, by_group=timed, by_pair=aggregate and not timed)
        ops += [op for op, _ in finish]
    for r in range(p):
        for i, c in enumerate(coll.output_layout[r]):
            want = canonical(coll, r, "output", i)
            have = current.get((r, c))
            if have is not None and have != want:
                ops.append(Op("copy", have, want, where=f"{name}: final copy of chunk {c} on rank {r}"))
    return Trace(
        name=name,
        collective=coll,
        ops=ops,
        buffers=buffers,
        protocol=protocol,
        instances=instances,
        topology=topology,
        metadata={"source": "algorithm", "schedule": algorithm.schedule},
    )


def _steps(algorithm: Algorithm) -> list[list[Transfer]]:
    """Transfers grouped into steps: by ``step``, or by equal ``start_s``."""
    groups: dict[float, list[Transfer]] = defaultdict(list)
    if algorithm.schedule == "steps":
        for t in algorithm.transfers:
            groups[t.step].append(t)
    else:
        for t in sorted(algorithm.transfers, key=lambda t: (t.start_s, t.end_s)):
            groups[t.start_s].append(t)
    return [groups[k] for k in sorted(groups)]


def _aggregate(items: list[tuple[Op, int | None]], *, by_group: bool, by_pair: bool) -> list[Op]:
    """Merge runs of remote ops between the same ranks (same contiguity
    group, or same step with ``by_pair``) whose slots are contiguous on
    both sides into one multi-chunk op."""
    if not (by_group or by_pair):
        return [op for op, _ in items]
    out: list[Op] = []
    buckets: dict[tuple, list[Op]] = {}
    order: list[tuple] = []
    for n, (op, group) in enumerate(items):
        if not op.remote or (by_group and group is None):
            key: tuple = ("single", n)
        else:
            key = (op.kind, op.src.rank, op.dst.rank, op.src.buffer, op.dst.buffer, group if by_group else None)
        if key not in buckets:
            buckets[key] = []
            order.append(key)
        buckets[key].append(op)
    for key in order:
        run = sorted(buckets[key], key=lambda o: (o.src.index, o.dst.index))
        cur = run[0]
        for op in run[1:]:
            if op.src.index == cur.src.index + cur.count and op.dst.index == cur.dst.index + cur.count:
                cur = Op(cur.kind, cur.src, cur.dst, cur.count + op.count, where=cur.where)
            else:
                out.append(cur)
                cur = op
        out.append(cur)
    return out


def lower_algorithm(
    algorithm: Algorithm,
    *,
    instances: int = 1,
    protocol: str = "Simple",
    topology: Topology | None = None,
    aggregate: bool = False,
    fusion: bool = True,
    fifo_slots: int = DEFAULT_FIFO_SLOTS,
    verify: bool = True,
    timings: dict[str, float] | None = None,
) -> Program:
    """Lower ``algorithm`` to a checked Program (TACCL §6.2).

    >>> from simcoll.algorithms import generate
    >>> from simcoll.machines import load_topology
    >>> topo = load_topology("ring:4")
    >>> program = lower_algorithm(generate("ring", topo, "allgather"), topology=topo, instances=2)
    >>> program.instruction_counts()["rcs"], program.num_channels
    (16, 2)
    """
    trace = algorithm_trace(algorithm, instances=instances, protocol=protocol, topology=topology, aggregate=aggregate)
    return compile_trace(trace, fusion=fusion, fifo_slots=fifo_slots, verify=verify, timings=timings)

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
writes a second slot of its chunk in ``scratch`` instead (the next such
transfer writes the home again: ping-pong, as recursive doubling's
exchanges need); only when that slot is read too is it staged through a
``stage`` slot and applied after the step's reads. Timed schedules
(TACCL) are taken in order of start time, transfers starting together
forming one step; the transfers of one contiguity ``group`` with
contiguous slots on both sides become one multi-chunk message. Finally
every output slot not yet holding its chunk gets a local copy (e.g. a
rank's own Allgather chunk), on thread blocks of their own.

The Program is lean: a reduction into a slot other than the one holding the
rank's contribution reads that contribution in place (MSCCL's
receive-reduce-copy from ``input`` into ``output``, no local copy first);
sends read a rank's own contribution from ``input``; results that are
neither read again nor part of the output are not stored (``rrs``); a
received result that several instructions read is not fused with one of
its sends (no false wait for that send); messages a step sends at once
between one rank pair go on separate channels (see :func:`_lanes`); and a
send to and a receive from the same peer run on thread blocks of their own
(``share_peer_blocks=False``, :mod:`simcoll.compiler.threadblocks`): on one
block a tree leaf's send of tile t+1 would wait for tile t's result to come
back, a round trip per tile (1 GB tree Allreduce on dgx1: 341 ms shared,
59 ms separate in Program mode; never slower elsewhere, see the tests).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from ..algorithm import Algorithm, Transfer
from ..cost_model import DEFAULT_FIFO_SLOTS
from ..machines import Machine, as_machine
from ..program import PROTOCOLS, Program
from ..topology import Topology
from .pipeline import compile_trace
from .trace import CompileError, Loc, Op, Trace, buffer_sizes, canonical

#: Thread blocks ``0 .. copy_threadblocks-1`` of a rank run its final local
#: copies, one chunk each in turn: blocks of their own, so that the copies
#: overlap the communication (and one another) instead of queueing on a
#: communicating thread block.
FIRST_COPY_THREADBLOCK = 0


def algorithm_trace(
    algorithm: Algorithm,
    *,
    instances: int = 1,
    protocol: str = "Simple",
    topology: Topology | None = None,
    aggregate: bool = False,
    max_channels: int = 8,
    copy_threadblocks: int = 8,
) -> Trace:
    """The trace of ``algorithm`` (see the module docstring). With
    ``aggregate``, step-schedule transfers of one step between the same two
    ranks with contiguous slots also merge into one message. Messages of
    one step between one rank pair use up to ``max_channels`` channels
    (:func:`_lanes`). A rank's final local copies run on up to ``copy_threadblocks`` thread
    blocks of their own."""
    if protocol not in PROTOCOLS:
        raise CompileError(f"protocol {protocol!r} is not one of {PROTOCOLS}")
    if not isinstance(instances, int) or instances < 1:
        raise CompileError(f"instances must be a positive integer, got {instances!r}")
    for label, value in (("max_channels", max_channels), ("copy_threadblocks", copy_threadblocks)):
        if not isinstance(value, int) or value < 1:
            raise CompileError(f"{label} must be a positive integer, got {value!r}")
    places = _Placement(algorithm)
    timed = algorithm.schedule == "timed"
    ops: list[Op] = []
    for batch in _steps(algorithm):
        ops += places.step_ops(batch, aggregate=aggregate and not timed, by_group=timed)
    ops += places.final_copies(copy_threadblocks)
    return Trace(
        name=algorithm.name,
        collective=algorithm.collective,
        ops=_lanes(ops, max_channels),
        buffers=places.buffers,
        protocol=protocol,
        instances=instances,
        topology=topology,
        metadata={"source": "algorithm", "schedule": algorithm.schedule},
    )


class _Placement:
    """Where each rank keeps each chunk while an Algorithm's steps are traced
    into ops: a chunk lives in the rank's output slot for it, else its input
    slot, else a scratch slot; ``current`` follows the slot a rank's latest
    copy of a chunk is in. ``buffers`` grows scratch and stage slots as the
    trace needs them."""

    def __init__(self, algorithm: Algorithm) -> None:
        coll = self.collective = algorithm.collective
        self.name = algorithm.name
        p = coll.num_ranks
        self.buffers = buffer_sizes(coll)
        self.out_index: list[dict[int, int]] = [{} for _ in range(p)]
        self.in_index: list[dict[int, int]] = [{} for _ in range(p)]
        for r in range(p):
            for i, c in enumerate(coll.output_layout[r]):
                self.out_index[r].setdefault(c, i)
            for i, c in enumerate(coll.input_layout[r]):
                self.in_index[r].setdefault(c, i)
        self.scratch_slots: list[dict[tuple[str, int], int]] = [{} for _ in range(p)]
        self.current: dict[tuple[int, int], Loc] = {
            (r, c): canonical(coll, r, "input", i) for r in range(p) for c, i in self.in_index[r].items()
        }

    def scratch(self, rank: int, key: tuple[str, int]) -> Loc:
        slots = self.scratch_slots[rank]
        if key not in slots:
            slots[key] = len(slots)
            self.buffers[rank]["scratch"] = len(slots)
        return Loc(rank, "scratch", slots[key])

    def home(self, rank: int, c: int) -> Loc:
        if c in self.out_index[rank]:
            return canonical(self.collective, rank, "output", self.out_index[rank][c])
        if c in self.in_index[rank]:
            return canonical(self.collective, rank, "input", self.in_index[rank][c])
        return self.scratch(rank, ("home", c))

    def describe(self, t: Transfer) -> str:
        return f"{self.name}: {t.describe()}"

    def step_ops(self, batch: list[Transfer], *, aggregate: bool, by_group: bool) -> list[Op]:
        """The ops of one step: every transfer reads the slot its chunk is in
        at the step's start (SCCL §3.3); a write to a slot the step still
        reads goes to the chunk's other slot, or through a stage slot."""
        reads = {}
        for t in batch:
            loc = self.current.get((t.src, t.chunk))
            if loc is None:
                raise CompileError(f"{self.describe(t)}: rank {t.src} does not hold chunk {t.chunk}")
            reads[id(t)] = loc
        read_slots = set(reads.values())
        pre: list[Op] = []
        direct: list[tuple[Op, int | None]] = []
        finish: list[Op] = []
        stage_used: dict[int, int] = defaultdict(int)
        for t in batch:
            where = self.describe(t)
            target = self.home(t.dst, t.chunk)
            if target in read_slots:
                # the step still sends the slot: write a second slot of the chunk instead
                # (ping-pong between home and it), as long as that one is not read either
                alt = self.scratch(t.dst, ("alt", t.chunk))
                if alt not in read_slots:
                    target = alt
            base = None
            if t.op == "reduce":
                base = self.current.get((t.dst, t.chunk))
                if base is None:
                    raise CompileError(f"{where}: rank {t.dst} holds no contribution of chunk {t.chunk}")
                if base == target:
                    base = None
                elif target in read_slots:
                    pre.append(Op("copy", base, target, where=where))
                    base = None
            if target in read_slots:
                k = stage_used[t.dst]
                stage_used[t.dst] += 1
                tmp = Loc(t.dst, "stage", k)
                self.buffers[t.dst]["stage"] = max(self.buffers[t.dst].get("stage", 0), k + 1)
                direct.append((Op("copy", reads[id(t)], tmp, where=where), t.group))
                finish.append(Op(t.op, tmp, target, where=where))
            else:
                direct.append((Op(t.op, reads[id(t)], target, where=where, base=base), t.group))
            self.current[(t.dst, t.chunk)] = target
        return pre + _spread(_aggregate(direct, by_group=by_group, by_pair=aggregate)) + finish

    def final_copies(self, copy_threadblocks: int) -> list[Op]:
        """Local copies of chunks that ended outside their output slot, spread
        over ``copy_threadblocks`` thread blocks of each rank."""
        coll = self.collective
        ops = []
        for r in range(coll.num_ranks):
            copies = 0
            for i, c in enumerate(coll.output_layout[r]):
                want = canonical(coll, r, "output", i)
                have = self.current.get((r, c))
                if have is not None and have != want:
                    tb = FIRST_COPY_THREADBLOCK + copies % copy_threadblocks
                    copies += 1
                    ops.append(
                        Op("copy", have, want, sendtb=tb, where=f"{self.name}: final copy of chunk {c} on rank {r}")
                    )
        return ops


def _spread(ops: list[Op]) -> list[Op]:
    """Number the messages of one step between one rank pair 0, 1, ...
    (kept in ``lane`` for :func:`_lanes`)."""
    seen: dict[tuple[int, int], int] = defaultdict(int)
    out = []
    for op in ops:
        if op.remote:
            pair = (op.src.rank, op.dst.rank)
            op = replace(op, lane=seen[pair])
            seen[pair] += 1
        out.append(op)
    return out


def _lanes(ops: list[Op], max_channels: int) -> list[Op]:
    """Give the k-th message of a step between one rank pair lane ``k mod
    L`` of ``L`` lanes (L: the most messages of a step on one pair, at most
    ``max_channels``), so that it only takes channels ``c·L + lane``:
    messages the Algorithm sends at once travel on separate connections,
    each with its own thread block (as NCCL gives each of the DGX-1's rings
    its own channel, SCCL §2.2), instead of queueing on one thread block,
    each paying its own α and all sharing one block's bandwidth. With one
    message per pair and step (rings, trees) nothing changes."""
    lanes = min(max_channels, 1 + max((op.lane for op in ops if op.remote), default=0))
    if lanes <= 1:
        return [replace(op, lane=0) for op in ops]
    return [replace(op, lane=op.lane % lanes, lanes=lanes) if op.remote else op for op in ops]


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
            base = None if op.base is None else op.base.buffer
            key = (op.kind, op.src.rank, op.dst.rank, op.src.buffer, op.dst.buffer, base, group if by_group else None)
        if key not in buckets:
            buckets[key] = []
            order.append(key)
        buckets[key].append(op)
    for key in order:
        run = sorted(buckets[key], key=lambda o: (o.src.index, o.dst.index))
        cur = run[0]
        for op in run[1:]:
            if (
                op.src.index == cur.src.index + cur.count
                and op.dst.index == cur.dst.index + cur.count
                and (op.base is None or op.base.index == cur.base.index + cur.count)
            ):
                cur = replace(cur, count=cur.count + op.count)
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
    machine: Machine | str | None = None,
    aggregate: bool = False,
    max_channels: int = 8,
    copy_threadblocks: int = 8,
    fusion: bool = True,
    share_peer_blocks: bool = False,
    fifo_slots: int = DEFAULT_FIFO_SLOTS,
    verify: bool = True,
    timings: dict[str, float] | None = None,
) -> Program:
    """Lower ``algorithm`` to a checked Program (TACCL §6.2): its trace
    (:func:`algorithm_trace`), compiled with the fusion rules for lowered
    Algorithms (:func:`compile_lowered`).

    Parameters
    ----------
    algorithm : Algorithm
        A point-to-point schedule (in-switch reductions have no Program form).
    instances : int
        Copies of every thread block, each moving ``1/instances`` of every
        chunk over its own channel (GC3 §5.3).
    protocol : {"Simple", "LL128", "LL"}
        The NCCL protocol the Program runs with.
    machine : Machine or str, optional
        Where it runs: its links decide how a step's messages between one
        rank pair spread over channels. Without it, one channel per pair.
    aggregate : bool
        Merge the transfers of one step between the same two ranks with
        contiguous slots into one message.
    max_channels : int
        Channels the messages of one step between one rank pair may use.
    copy_threadblocks : int
        Thread blocks for a rank's final local copies.
    fusion : bool
        Fuse receive/reduce/send chains into single instructions (GC3 §5.2).
    share_peer_blocks : bool
        Let a send to and a receive from one peer share a thread block.
    fifo_slots : int
        FIFO slots per connection the Program must be deadlock-free with
        (GC3 §6.1; :func:`simcoll.compiler.checks.check_fifo_bound`).
    verify : bool
        Check the postcondition, races and deadlock freedom of the result.
    timings : dict, optional
        Filled with the seconds each compiler pass took.

    Returns
    -------
    Program
        The checked Program.

    Raises
    ------
    CompileError
        For bad options, or a Program that fails its checks.
    AlgorithmError
        For an Algorithm with in-switch steps.

    Examples
    --------
    >>> from simcoll.algorithms import generate
    >>> program = lower_algorithm(generate("ring", "ring:4", "allgather"), machine="ring:4", instances=2)
    >>> program.instruction_counts()["rcs"], program.num_channels
    (16, 2)
    """
    algorithm.require_point_to_point("lowering to a Program (Program mode, MSCCL XML export)")
    trace = algorithm_trace(
        algorithm,
        instances=instances,
        protocol=protocol,
        topology=as_machine(machine).topology if machine is not None else None,
        aggregate=aggregate,
        max_channels=max_channels,
        copy_threadblocks=copy_threadblocks,
    )
    return compile_lowered(
        trace,
        fusion=fusion,
        share_peer_blocks=share_peer_blocks,
        fifo_slots=fifo_slots,
        verify=verify,
        timings=timings,
    )


def compile_lowered(
    trace: Trace,
    *,
    fusion: bool = True,
    share_peer_blocks: bool = False,
    fifo_slots: int = DEFAULT_FIFO_SLOTS,
    verify: bool = True,
    timings: dict[str, float] | None = None,
) -> Program:
    """:func:`~simcoll.compiler.pipeline.compile_trace` with the fusion
    rules for lowered Algorithms: a result outside the output that is not
    read again is not stored (``rrs``; ``live_out="output"``, ``prune``),
    and a receive whose result several instructions read is not fused with
    one of them (``fan_out`` off, see :mod:`simcoll.compiler.fusion`), so
    that the other readers do not wait for that send to arrive. A send to
    and a receive from one peer share a thread block only with
    ``share_peer_blocks`` (see the module docstring)."""
    return compile_trace(
        trace,
        fusion=fusion,
        live_out="output",
        fan_out=False,
        prune=True,
        share_peer_blocks=share_peer_blocks,
        fifo_slots=fifo_slots,
        verify=verify,
        timings=timings,
    )

"""Program mode of the simulator: every executor of a :class:`~simcoll.program.Program`
(a GPU thread block or a host thread) is a SimPy process running its
instructions in order, as GC3's interpreter does (GC3 §6.2, Fig. 5), over the
fluid network model of :mod:`simcoll.simulator.network`.

The runtime it models (GC3 §6; NV-Group §4.2.1):

- **Connections and FIFO slots** (GC3 §6.1). A connection is (sender rank,
  receiver rank, channel). Its receiver-side buffer has ``fifo_slots`` slots
  (the model's executor parameter): a send takes a slot before it writes and
  blocks while all are taken; the receiving instruction frees the slot when it
  has finished with the data. Messages match in FIFO order.
- **Tiling** (GC3 §6.2, Fig. 6). A chunk is ``size_bytes /
  collective.size_chunks`` bytes (:func:`simcoll.analytic.chunk_bytes`). When it
  is larger than a slot (``program.tile_bytes``, else the model's
  ``slot_bytes``), it is cut into tiles of that size (the last one shorter)
  and every executor runs its whole instruction list once per tile: the
  interpreter's outer tiling loop. Tiles of different phases run on different
  executors at once, so a k-hop chain of T tiles takes (k + T - 1) tile-times
  when uncontended. An instruction with ``count`` n moves n tiles' worth per
  tile. As in the real interpreter, one executor's steps of tile t+1 come
  after all its steps of tile t: an executor that sends a tile and later
  receives something that depends on it (a tree leaf sending up and
  receiving the result on one thread block) makes every tile wait for the
  previous one's round trip; lowering avoids such blocks
  (:mod:`simcoll.compiler.threadblocks`, ``share_peer_blocks``).
- **Dependencies** ``(executor, step)`` on the same rank wait for that
  executor to finish that step *of the same tile* (the semaphores of Fig. 5).
- **Per-instruction costs** (``b`` = bytes the instruction moves in this tile):

  ===================== ==========================================================
  send, signal          take an out slot; network transfer of ``b`` (signal: 0)
                        bytes to the send peer; done when it has arrived (α + b/rate)
  recv, wait            wait for the next message of the in-connection; no cost
  rcs                   recv, then send the data on
  rrc                   recv, then reduce: ``model.reduce_time_s(b)`` (NV-Group T_R)
  rrs, rrcs             recv, reduce, send the result on
  copy, put, get        a transfer from the owner of ``src`` to the owner of ``dst``
                        when they differ; a local copy otherwise
  reduce                as copy, then ``model.reduce_time_s(b)``
  load_reduce           the remote sources' transfers at once, then
                        ``model.reduce_time_s(b)`` once (NV-Group eq. 7's T_R(n))
  nop                   nothing
  ===================== ==========================================================

  A send is finished when its data has arrived, not when it has left the
  wire: the thread block fences its writes before raising the peer's flag
  (GC3 Fig. 5, line 23). So consecutive sends of one executor each pay α,
  which the analytic critical path (:mod:`simcoll.analytic`) overlaps with the
  next message on the same rank pair. A fused receive-and-send (rcs, rrs,
  rrcs) holds its incoming slot until its own send has arrived.

  The rate of a transfer driven by a thread block is capped at
  ``thread_block_bandwidth_Bps × program.instances`` (the network caps it at
  the links' rates). An executor of a Program with unexpanded ``instances``
  k stands for k replicas (GC3 §5), each with its own connection and slots:
  it moves k tiles at a time (tile = k × slot) at k times the thread-block
  rate and scaled by the protocol's efficiency
  (``model.protocol(program.protocol).efficiency``; 1.0 when the model does
  not list the protocol; ``result.stats["protocol_efficiency"]`` says which
  was used). Where a protocol is named to :func:`~simcoll.simulator.simulate`
  (or by the Algorithm lowered), every transfer between ranks is also
  delivered the protocol's ``hop_latency_s`` after it arrives, and the call's
  fixed cost (``call.overhead_s`` + the protocol's ``call_latency_s``,
  ``stats["call_s"]``) is added once to the completion time, on top of the
  kernel launches. Where the model says ``compute.fused``, the reduction of
  a received tile (rrc, rrs, rrcs) happens as the data streams in and costs
  nothing after it (as in Algorithm mode); ``reduce`` and ``load_reduce``
  still pay T_R. A **local copy** of ``b`` bytes by a thread block costs
  ``b / (thread_block_bandwidth_Bps × instances)``: the executor parameter is
  "the copy rate one thread block sustains" (free when the model gives no
  executor parameters); by a host thread, ``b / host_memory.bandwidth_Bps``
  (free when absent).
- **Stream-bound thread blocks** (``executor.stream_bound``, written by
  ``simcoll gpu calibrate``). In an interpreter whose block copies every
  received tile out of its FIFO slot (simcoll's, ``gpu/csrc/interp_core.h``),
  the block's rate bounds all it reads and writes: an op making ``s`` reads
  and writes per element (:data:`READS_WRITES`: send and recv 2, rcs / rrc /
  rrs 3, rrcs 4) keeps the block busy ``s · b / (2 · thread_block_bandwidth_Bps)``
  (a copy, one read and one write, is the rate itself; with
  ``executor.write_share`` a write weighs that share of a copy and a read the
  rest: :func:`streams_of`). So the send of a fused op is capped at
  ``2 · rate / s``, and a recv or rrc costs that time after its message
  arrives. Measured on an H100 (2026-11-26, four virtual
  ranks, ring Allreduce 1 KB–1 GB, ``benchmarks/measured/``): without the
  rule the simulation was 28 % fast from 4 MB up; with it, and the model
  fitted with the receive copy, 5.8 % fast (median |error| 5.8 %; run 6,
  with the signal latency below: 2 %).
- **Write share** (``executor.write_share``, optional): a stream-bound
  block's writes may cost more than its reads. Measured sweeps say they do:
  0.78 of a copy's time for the write, fitted to the seven H100 sweeps of
  run 6 from 4 MB up, takes their rms ln error from 8.0 to 4.2 % and that of
  an H200's sweeps, not fitted, from 9.0 / 7.6 to 4.5 / 3.4 % (Broadcast and
  Allgather forward with rcs, one read and two writes, and were 6-15 % slow).
  ``simcoll gpu calibrate`` measures it with a relay Program (one read, two
  writes per element: :func:`simcoll.gpu.calibrate.fit_write_share`);
  models fitted from samples taken before it leave it out (reads and writes
  alike).
- **Signal latency** (``executor.signal_latency_s``, written by ``simcoll
  gpu calibrate``). Blocks synchronise through flags in memory (GC3 Fig. 5:
  a message's tail, a freed slot's head, a finished step's semaphore), and
  another block sees a flag that long after it was raised: a message is
  received that long after its data has arrived, a freed slot reaches its
  sender that long after the receive, and a dependency on another executor's
  step is met that long after the step. The block that raises a flag goes on
  at once, so a stream of messages shows the latency once and a chain of k
  dependent hops k times; the completion time is when the last executor
  finishes, flags still in flight not counted. Host executors pay
  ``host_signal_s`` instead. Measured on an H100 (run 6 of
  ``benchmarks/measured/h100-2026-11-26/``): 1.45 µs beside α = 4.18 µs; ring
  Allreduce median |error| 2.0 % (without it, sizes up to 64 KB are 15-20 %
  fast), six schedules the model was not fitted on 3.7-7.9 %.
- **Host executors** (``kind="host"``, NV-Group §4.2.1, §4.4.2): their
  transfers are not capped by a thread block, and every operation that goes
  through the CPU-GPU work queue (signal, wait, put, get, and a load_reduce
  with remote sources) pays the model's ``host_signal_s`` once, before the
  data moves (signal, put, get, load_reduce) or after the message has arrived
  (wait).
- **Kernel launches.** GPU executors run inside kernels; host executors need
  none. By default a Program is one persistent kernel: every rank with GPU
  executors pays ``kernel_launch_s`` once before they start. A multi-kernel
  lowering says so with ``program.metadata["kernels"]``: a list, in launch
  order, of kernels, each a list of executor ids (all of that executor's
  steps) or ``[executor id, first step, end step]`` slices (``end`` may be
  ``null`` for "to the end"; clipped to each rank's instruction list), the
  same on every rank. Each executor's pieces must cover its steps once, in
  kernel order; an executor may thus run phase 1 in kernel 0 and phase 2 in
  kernel 1. On each rank, kernel k+1 is launched when all of the rank's
  pieces of kernel k have finished, and starts ``kernel_launch_s`` later;
  every piece runs its own tiling loop. So with K kernels whose phases are
  serial anyway the multi-kernel lowering is slower by exactly (K - 1) ×
  ``kernel_launch_s``, and it also loses the pipelining of tiles across
  phases (GC3 §6.2, §7: a two-phase relay of T tiles takes 2·T tile-times
  instead of T + 1).

A stall with work left (nothing scheduled, some executor unfinished) raises
:class:`~simcoll.errors.ProgramDeadlockError`, listing what every blocked executor waits on;
the wall clock is bounded by ``time_limit_s``.

Timeline rows (:data:`simcoll.simulator.results.TIMELINE_COLUMNS`): one per
instruction and tile, ``kind`` = the op, on the executor's track ``"rank R tb
E"`` (``"rank R host E"`` for host threads), labelled ``"step S tile T: ..."``;
``blocked`` rows on the same track for the time an executor waited for a
dependency, a message or a FIFO slot; ``transfer`` rows (one per network
message, track ``"src->dst"``); ``launch`` rows on ``"rank R kernels"``.

Why one module of ~850 lines: this docstring states the runtime's rules
(about a third of it) and the executor process implements every
instruction of the Program IR against them; a Program runs over the
reference network too (``simulate(..., engine="reference")``), which tests
its use of the fluid network.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import simpy

from ..analytic import chunk_bytes
from ..cost_model import DEFAULT_FIFO_SLOTS
from ..errors import AlgorithmError, ProgramDeadlockError, TopologyError
from ..machines import Machine
from ..program import RECEIVES, REDUCES, SENDS, Executor, Instruction, Program, Ref
from ..units import check_size_bytes
from .engine import run_with_limit
from .network import FluidNetwork
from .results import SimulationResult, make_result


@dataclass(frozen=True)
class ProgramCosts:
    """The executor parameters Program mode uses, resolved from a cost model
    (see the module docstring for how each enters the time)."""

    fifo_slots: int
    slot_bytes: float | None
    thread_block_bandwidth_Bps: float | None
    kernel_launch_s: float
    host_signal_s: float
    protocol_efficiency: float
    host_copy_bandwidth_Bps: float | None
    protocol: str = "Simple"
    hop_latency_s: float = 0.0
    call_s: float = 0.0
    stream_bound: bool = False
    signal_latency_s: float = 0.0
    write_share: float = 0.5


#: Reads and writes of each element by a thread block running the op under a
#: ``stream_bound`` model: its source or in-slot and the reduced operand
#: (read), its destination and/or out-slot (written). A copy is one of each,
#: the rate ``thread_block_bandwidth_Bps`` counts it at.
READS_WRITES = {"send": (1, 1), "recv": (1, 1), "rcs": (1, 2), "rrc": (2, 1), "rrs": (2, 1), "rrcs": (2, 2)}


def streams_of(op: str, write_share: float = 0.5) -> float:
    """Twice the copies' time a stream-bound block spends per element of
    ``op`` (0 for ops it does not stream): reads weigh ``1 - write_share``,
    writes ``write_share`` (``executor.write_share``). At 0.5, reads plus writes.

    >>> streams_of("rcs"), streams_of("rrs"), streams_of("rcs", 0.78), streams_of("copy")
    (3.0, 3.0, 3.56, 0)
    """
    if op not in READS_WRITES:
        return 0
    reads, writes = READS_WRITES[op]
    return 2 * (reads * (1 - write_share) + writes * write_share)


def program_costs(program: Program, machine: Machine, protocol: str | None = None) -> ProgramCosts:
    """The parameters of :class:`ProgramCosts` for ``program`` on ``machine``.

    ``program.protocol`` gives the efficiency; the protocol's latencies and the
    call's fixed cost are paid only when a ``protocol`` is named (by
    :func:`~simcoll.simulator.simulate` or the Algorithm lowered), which then
    also replaces ``program.protocol``: a bare Program pays its runtime's
    executor costs (launch, FIFO, tiles) and no NCCL latency."""
    model = machine.model
    ex = model.executor
    # A protocol the model does not list runs at full efficiency and no latency, as in Algorithm mode.
    proto = model.protocol(protocol or program.protocol)
    eff = proto.efficiency
    return ProgramCosts(
        fifo_slots=ex.fifo_slots if ex is not None else DEFAULT_FIFO_SLOTS,
        slot_bytes=ex.slot_bytes if ex is not None else None,
        thread_block_bandwidth_Bps=ex.thread_block_bandwidth_Bps if ex is not None else None,
        kernel_launch_s=ex.kernel_launch_s if ex is not None else 0.0,
        host_signal_s=(ex.host_signal_s or 0.0) if ex is not None else 0.0,
        protocol_efficiency=eff,
        host_copy_bandwidth_Bps=model.host_memory_bandwidth_Bps,
        protocol=proto.name,
        hop_latency_s=proto.hop_latency_s if protocol is not None else 0.0,
        call_s=model.call_cost_s(proto.name) if protocol is not None else 0.0,
        stream_bound=bool(ex is not None and ex.stream_bound),
        signal_latency_s=(ex.signal_latency_s or 0.0) if ex is not None else 0.0,
        write_share=ex.write_share if ex is not None and ex.write_share is not None else 0.5,
    )


@dataclass(frozen=True)
class Tiles:
    """GC3 Fig. 5's tiling loop ``for t in range(0, chunk, tile)``: ``count``
    tiles, all of ``tile_bytes`` but the last, of ``last_bytes`` (held as
    three numbers, so a huge tile count costs no memory before the wall-clock
    limit stops the run).

    >>> list(Tiles.of(10.0, 4))
    [4, 4, 2.0]
    >>> list(Tiles.of(10.0, None))
    [10.0]
    """

    count: int
    tile_bytes: float
    last_bytes: float

    @classmethod
    def of(cls, chunk_size_bytes: float, tile_bytes: float | None) -> Tiles:
        if tile_bytes is None or chunk_size_bytes <= tile_bytes:
            return cls(1, chunk_size_bytes, chunk_size_bytes)
        full = int(math.floor(chunk_size_bytes / tile_bytes))
        rest = chunk_size_bytes - full * tile_bytes
        # A rest below a billionth of a tile is rounding, not a tile.
        if rest <= tile_bytes * 1e-9:
            return cls(full, tile_bytes, tile_bytes)
        return cls(full + 1, tile_bytes, rest)

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[float]:
        for t in range(self.count):
            yield self.tile_bytes if t < self.count - 1 else self.last_bytes


#: One piece of a kernel: (executor id, first step, end step or None for "to the end").
KernelItem = tuple[int, int, int | None]


def kernels_of(program: Program) -> list[list[KernelItem]]:
    """The kernels of ``program`` in launch order (``program.metadata["kernels"]``,
    module docstring), each as ``(executor id, first step, end step)`` items;
    one persistent kernel of every GPU executor when absent.

    >>> from simcoll.collectives import make_collective
    >>> from simcoll.program import Executor, Instruction, Program, RankProgram, Ref
    >>> tb = Executor(0, (Instruction("copy", Ref("input", 0), Ref("output", 0)),) * 3)
    >>> prog = Program("p", make_collective("allgather", 1), (RankProgram(0, {"input": 1, "output": 1}, (tb,)),),
    ...                metadata={"kernels": [[[0, 0, 2]], [[0, 2, None]]]})
    >>> kernels_of(prog)
    [[(0, 0, 2)], [(0, 2, None)]]
    """
    raw = program.metadata.get("kernels") if program.metadata else None
    gpu_ids = sorted({e.id for rp in program.ranks for e in rp.executors if e.kind != "host"})
    if raw is None:
        return [[(eid, 0, None) for eid in gpu_ids]] if gpu_ids else []
    where = f"{program.name}: metadata.kernels"
    if not isinstance(raw, (list, tuple)) or not all(isinstance(k, (list, tuple)) for k in raw):
        raise AlgorithmError(f"{where} must be a list of kernels, each a list of executor ids or [id, first, end]")
    kernels: list[list[KernelItem]] = []
    for k, items in enumerate(raw):
        kernel = []
        for item in items:
            if _is_int(item):
                kernel.append((item, 0, None))
            elif (
                isinstance(item, (list, tuple))
                and len(item) == 3
                and all(_is_int(v) for v in item[:2])
                and (item[2] is None or _is_int(item[2]))
                and 0 <= item[1]
                and (item[2] is None or item[2] >= item[1])
            ):
                kernel.append((item[0], item[1], item[2]))
            else:
                raise AlgorithmError(
                    f"{where}[{k}] holds {item!r}: expected an executor id or [executor id, first step, end step]"
                )
        kernels.append(kernel)
    for rp in program.ranks:
        for e in rp.executors:
            if e.kind != "host":
                _segments(kernels, rp.rank, e, where)
    return kernels


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _segments(
    kernels: Sequence[Sequence[KernelItem]], rank: int, e: Executor, where: str
) -> list[tuple[int, int, int]]:
    """The non-empty ``(kernel, first, end)`` pieces of executor ``e`` on
    ``rank``, checked to cover its instructions once and in order."""
    n = len(e.instructions)
    pieces = []
    for k, kernel in enumerate(kernels):
        for eid, first, end in kernel:
            if eid == e.id:
                pieces.append((k, min(first, n), n if end is None else min(end, n)))
    covered = 0
    for k, first, end in pieces:
        if first != covered:
            raise AlgorithmError(
                f"{where}: on rank {rank}, executor {e.id} runs steps {first}:{end} in kernel {k}, "
                f"but its next step to run is {covered} (pieces must cover its steps once, in kernel order)"
            )
        covered = end
    if covered != n:
        missing = "any kernel" if not pieces else f"a kernel after kernel {pieces[-1][0]}"
        raise AlgorithmError(f"{where}: on rank {rank}, executor {e.id} step {covered} is not in {missing}")
    return [(k, first, end) for k, first, end in pieces if end > first]


# ---------------------------------------------------------------------------
# Runtime objects
# ---------------------------------------------------------------------------
class _Connection:
    """(sender rank, receiver rank, channel): FIFO slots and the messages in them."""

    __slots__ = ("key", "free", "slot_waiters", "messages", "message_waiters")

    def __init__(self, key: tuple[int, int, int], slots: int):
        self.key = key
        self.free = slots
        self.slot_waiters: deque[simpy.Event] = deque()
        self.messages: deque[float] = deque()
        self.message_waiters: deque[simpy.Event] = deque()

    def describe(self) -> str:
        src, dst, chan = self.key
        return f"connection rank {src} -> rank {dst} channel {chan}"


class _Run:
    """One simulation of a Program (see :func:`_simulate_program`)."""

    def __init__(
        self, program: Program, machine: Machine, size_bytes: float, network: FluidNetwork, protocol: str | None = None
    ) -> None:
        self.program = program
        self.machine = machine
        self.network = network
        self.env: simpy.Environment = network.env
        self.costs = program_costs(program, machine, protocol)
        # A collective without data (signals only) has no chunk to size.
        self.chunk_size = chunk_bytes(program.collective, size_bytes) if program.collective.size_chunks else 0.0
        tile = program.tile_bytes if program.tile_bytes is not None else self.costs.slot_bytes
        if tile is not None:
            # ``instances`` replicas, each on its own connection with its own
            # slots, move one tile each at once: one executor, k tiles a step.
            tile = tile * program.instances
        self.tiles = Tiles.of(self.chunk_size, tile)
        self.kernels = kernels_of(program)
        self.connections: dict[tuple[int, int, int], _Connection] = {}
        # Per (rank, executor, step): how many tiles of it are finished; events
        # of the executors waiting for a (rank, executor, step, tile).
        self.done_tiles: dict[tuple[int, int, int], int] = {}
        self.dep_waiters: dict[tuple[int, int, int, int], simpy.Event] = {}
        # The steps some other executor depends on: only their flags need the signal latency (a block
        # sees its own steps at once, so they are not among them).
        self.dep_targets = (
            {(rp.rank, d, s) for rp in program.ranks for e in rp.executors
             for ins in e.instructions for d, s in ins.deps if d != e.id}
            if self.costs.signal_latency_s > 0 else set()
        )  # fmt: skip
        # What each blocked executor waits on (for the deadlock report).
        self.state: dict[tuple[int, int], str] = {}
        self.finished: dict[tuple[int, int], simpy.Event] = {}
        self.last_finish_s = 0.0  # when the last executor finished (flags still in flight do not count)
        self.instructions_run = 0
        tb_cap = self.costs.thread_block_bandwidth_Bps
        self.tb_cap = tb_cap * program.instances if tb_cap is not None else math.inf

    # -- connections ------------------------------------------------------------
    def connection(self, src: int, dst: int, channel: int) -> _Connection:
        key = (src, dst, channel)
        conn = self.connections.get(key)
        if conn is None:
            conn = self.connections[key] = _Connection(key, self.costs.fifo_slots)
        return conn

    # -- processes -----------------------------------------------------------------
    def start(self) -> None:
        where = f"{self.program.name}: metadata.kernels"
        for rp in self.program.ranks:
            gates: dict[int, simpy.Event] = {}
            # per kernel: the events of this rank's pieces of it finishing
            pieces_done: dict[int, list[simpy.Event]] = {}
            for e in rp.executors:
                key = (rp.rank, e.id)
                for s in range(len(e.instructions)):
                    self.done_tiles[(rp.rank, e.id, s)] = 0
                self.finished[key] = self.env.event()
                if e.kind == "host":
                    segments = [(None, 0, len(e.instructions))]
                else:
                    segments = _segments(self.kernels, rp.rank, e, where)
                pieces = []
                for k, first, end in segments:
                    gate = None if k is None else gates.setdefault(k, self.env.event())
                    done = self.env.event()
                    if k is not None:
                        pieces_done.setdefault(k, []).append(done)
                    pieces.append((gate, first, end, done))
                self.env.process(self.executor(rp.rank, e, pieces))
            if pieces_done:
                self.env.process(self.launcher(rp.rank, pieces_done, gates))

    def launcher(
        self, rank: int, pieces_done: Mapping[int, list[simpy.Event]], gates: Mapping[int, simpy.Event]
    ) -> Iterator[simpy.Event]:
        """Launch this rank's kernels one after the other (module docstring)."""
        launch_s = self.costs.kernel_launch_s
        for k in sorted(pieces_done):
            if launch_s > 0:
                start = self.env.now
                yield self.env.timeout(launch_s)
                self.network.record("launch", f"rank {rank} kernels", start, self.env.now, label=f"kernel {k}")
            gates[k].succeed()
            yield self.env.all_of(pieces_done[k])

    def executor(
        self, rank: int, e: Executor, pieces: Sequence[tuple[simpy.Event | None, int, int, simpy.Event]]
    ) -> Iterator[simpy.Event]:
        """GC3 Fig. 5: the tiling loop around the instruction loop, once per
        piece of the executor (its whole list in a persistent kernel)."""
        key = (rank, e.id)
        host = e.kind == "host"
        track = f"rank {rank} {'host' if host else 'tb'} {e.id}"
        record = self.network.record
        labels = [_label(ins) for ins in e.instructions]
        for gate, first, end, done in pieces:
            if gate is not None and not gate.triggered:
                self.state[key] = f"rank {rank} executor {e.id} step {first} waits for its kernel to be launched"
                yield gate
            for t, tile in enumerate(self.tiles):
                for s in range(first, end):
                    ins = e.instructions[s]
                    where = f"rank {rank} executor {e.id} step {s} ({ins.op}) tile {t}"
                    for dep_exec, dep_step in ins.deps:
                        if self.done_tiles[(rank, dep_exec, dep_step)] <= t:
                            waited = f"executor {dep_exec} step {dep_step} of tile {t}"
                            self.state[key] = f"{where} waits for {waited}"
                            begin = self.env.now
                            yield self._dep_event(rank, dep_exec, dep_step, t)
                            record("blocked", track, begin, self.env.now, label=f"step {s} tile {t}: {waited}")
                    start = self.env.now
                    nbytes = tile * ins.count
                    yield from self.run_instruction(rank, e, ins, nbytes, host, key, where, track, s, t)
                    src, dst = self._ends(rank, e, ins)
                    record(
                        ins.op,
                        track,
                        start,
                        self.env.now,
                        src=src,
                        dst=dst,
                        size_bytes=nbytes,
                        label=f"step {s} tile {t}: {labels[s]}",
                    )
                    self.instructions_run += 1
                    if (rank, e.id, s) in self.dep_targets:  # other executors poll the step's flag
                        self._raise_flag(host, self._advance, rank, e.id, s, t)
                    else:
                        self._advance(rank, e.id, s, t)
            done.succeed()
        self.state.pop(key, None)
        self.finished[key].succeed()
        self.last_finish_s = max(self.last_finish_s, self.env.now)

    def _dep_event(self, rank: int, eid: int, step: int, tile: int) -> simpy.Event:
        k = (rank, eid, step, tile)
        ev = self.dep_waiters.get(k)
        if ev is None:
            ev = self.dep_waiters[k] = self.env.event()
        return ev

    def _raise_flag(self, host: bool, seen: Any, *args: Any) -> None:
        """An executor raises a flag: ``seen(*args)`` is what its pollers do
        on seeing it, at once for a host thread's flag or without a signal
        latency, else that latency from now; the raiser does not wait."""
        delay_s = self.costs.signal_latency_s
        if host or delay_s <= 0:
            seen(*args)
        else:
            self.env.timeout(delay_s).callbacks.append(lambda _event: seen(*args))

    def _advance(self, rank: int, eid: int, step: int, tile: int) -> None:
        self.done_tiles[(rank, eid, step)] = tile + 1
        ev = self.dep_waiters.pop((rank, eid, step, tile), None)
        if ev is not None:
            ev.succeed()

    @staticmethod
    def _ends(rank: int, e: Executor, ins: Instruction) -> tuple[int, int]:
        """Timeline ``src``/``dst`` of an instruction: where its data comes from and goes."""
        op = ins.op
        if op in ("send", "signal"):
            return rank, e.send_peer
        if op in ("recv", "rrc", "wait"):
            return e.recv_peer, rank
        if op in ("rcs", "rrs", "rrcs"):
            return e.recv_peer, e.send_peer
        if op in ("copy", "put", "get", "reduce"):
            return _owner(rank, ins.src), _owner(rank, ins.dst)
        if op == "load_reduce":
            return -1, _owner(rank, ins.dst)
        return -1, -1

    # -- instructions ---------------------------------------------------------------
    def run_instruction(
        self,
        rank: int,
        e: Executor,
        ins: Instruction,
        nbytes: float,
        host: bool,
        key: tuple[int, int],
        where: str,
        track: str,
        step: int,
        tile: int,
    ) -> Iterator[simpy.Event]:
        op = ins.op
        signal_s = self.costs.host_signal_s if host else 0.0
        incoming = None
        if op in RECEIVES:
            incoming = self.connection(e.recv_peer, rank, e.channel)
            if incoming.messages:
                incoming.messages.popleft()
            else:
                yield from self._block(
                    incoming.message_waiters,
                    key,
                    f"{where} waits for a message on {incoming.describe()}",
                    track,
                    e.recv_peer,
                    rank,
                    f"step {step} tile {tile}: message on {incoming.describe()}",
                )
            if op == "wait" and signal_s > 0:
                yield self.env.timeout(signal_s)
            if op in REDUCES:  # a fused reduction happens as the data streams in: nothing after it
                yield from self._compute(self.machine.model.reduce_after_s(nbytes))
        # stream-bound blocks: the block's rate over its reads and writes bounds a fused op's send, and a
        # receive without a send copies out of the slot at that rate (module docstring)
        streams = streams_of(op, self.costs.write_share) if self.costs.stream_bound and not host else 0
        if op in SENDS:
            if op == "signal" and signal_s > 0:
                yield self.env.timeout(signal_s)
            size = 0.0 if op == "signal" else nbytes
            cap = 2 * self.tb_cap / streams if streams else self.tb_cap
            yield from self._send(rank, e, size, host, key, where, track, step, tile, cap)
        elif streams and nbytes > 0 and not math.isinf(self.tb_cap):
            yield self.env.timeout(streams * nbytes / (2 * self.tb_cap))
        elif op in ("copy", "put", "get", "reduce"):
            if op in ("put", "get") and signal_s > 0:
                yield self.env.timeout(signal_s)
            yield from self._move(rank, ins.src, ins.dst, nbytes, host, where)
            if op == "reduce":
                yield from self._compute(self.machine.model.reduce_time_s(nbytes))
        elif op == "load_reduce":
            dst_owner = _owner(rank, ins.dst)
            remote = [ref for ref in ins.sources if _owner(rank, ref) != dst_owner]
            if remote:
                if signal_s > 0:
                    yield self.env.timeout(signal_s)
                loads = [
                    self._transfer(
                        _owner(rank, ref), dst_owner, nbytes, host, f"{where}: load {ref.describe(ins.count)}"
                    )
                    for ref in remote
                ]
                yield self.env.all_of(loads)
                yield from self._compute(self.costs.hop_latency_s)
            yield from self._compute(self.machine.model.reduce_time_s(nbytes))
        if incoming is not None:
            self._raise_flag(host, self._release, incoming)  # the freed slot, to its sender

    def _compute(self, seconds: float) -> Iterator[simpy.Event]:
        if seconds > 0:
            yield self.env.timeout(seconds)

    def _send(
        self,
        rank: int,
        e: Executor,
        size: float,
        host: bool,
        key: tuple[int, int],
        where: str,
        track: str,
        step: int,
        tile: int,
        cap_Bps: float,
    ) -> Iterator[simpy.Event]:
        """Take a slot of the out-connection (blocking while all are full), move
        the data (at most ``cap_Bps``, the block's rate), and queue the message
        at the receiver once it has arrived."""
        conn = self.connection(rank, e.send_peer, e.channel)
        if conn.free > 0:
            conn.free -= 1
        else:
            yield from self._block(
                conn.slot_waiters,
                key,
                f"{where} waits for a free FIFO slot on {conn.describe()} "
                f"(its {self.costs.fifo_slots} slot(s) hold messages not yet consumed)",
                track,
                rank,
                e.send_peer,
                f"step {step} tile {tile}: free slot on {conn.describe()}",
            )
        yield self._transfer(rank, e.send_peer, size, host, f"{where}: to rank {e.send_peer}", cap_Bps)
        yield from self._compute(self.costs.hop_latency_s)  # the protocol's per-hop latency, after α
        self._raise_flag(host, self._deliver, conn, size)  # the message's arrival, to its receiver

    @staticmethod
    def _deliver(conn: _Connection, size: float) -> None:
        if conn.message_waiters:
            conn.message_waiters.popleft().succeed()
        else:
            conn.messages.append(size)

    def _block(
        self,
        waiters: deque[simpy.Event],
        key: tuple[int, int],
        waiting_for: str,
        track: str,
        src: int,
        dst: int,
        label: str,
    ) -> Iterator[simpy.Event]:
        """Wait in ``waiters`` until woken, saying what for (the deadlock report
        reads ``self.state``), and record the wait as a ``blocked`` row."""
        self.state[key] = waiting_for
        ev = self.env.event()
        waiters.append(ev)
        begin = self.env.now
        yield ev
        self.network.record("blocked", track, begin, self.env.now, src=src, dst=dst, label=label)

    def _release(self, conn: _Connection) -> None:
        if conn.slot_waiters:
            conn.slot_waiters.popleft().succeed()
        else:
            conn.free += 1

    def _move(
        self, rank: int, src: Ref | None, dst: Ref | None, nbytes: float, host: bool, where: str
    ) -> Iterator[simpy.Event]:
        """Data from the owner of ``src`` to the owner of ``dst``: a transfer
        between two ranks, or a local copy (module docstring for its rate)."""
        a, b = _owner(rank, src), _owner(rank, dst)
        if a != b:
            yield self._transfer(a, b, nbytes, host, f"{where}: rank {a} -> rank {b}")
            yield from self._compute(self.costs.hop_latency_s)
            return
        rate = self.costs.host_copy_bandwidth_Bps if host else self.tb_cap
        if rate and not math.isinf(rate) and nbytes > 0:
            yield self.env.timeout(nbytes / rate)

    def _transfer(
        self, src: int, dst: int, size: float, host: bool, label: str, cap_Bps: float | None = None
    ) -> simpy.Event:
        return self.network.transfer(
            src,
            dst,
            size,
            cap_Bps=math.inf if host else (self.tb_cap if cap_Bps is None else cap_Bps),
            efficiency=self.costs.protocol_efficiency,
            label=label,
            kind="transfer",
        )

    # -- driving -----------------------------------------------------------------
    def run(self, time_limit_s: float, started_s: float | None = None) -> float:
        """Run to the end; the completion time, or raise on a deadlock (the
        limit counts from ``started_s``, default now)."""
        self.start()
        what = f"Program-mode simulation of {self.program.name}"
        run_with_limit(self.env, time_limit_s, what=what, started_s=started_s)
        unfinished = [k for k, ev in self.finished.items() if not ev.triggered]
        if unfinished:
            waits = [self.state.get(k, f"rank {k[0]} executor {k[1]} cannot proceed") for k in unfinished]
            raise ProgramDeadlockError(self.program.name, self.env.now, waits)
        return self.last_finish_s


def _owner(rank: int, ref: Ref | None) -> int:
    return rank if ref is None or ref.rank is None else ref.rank


def _label(ins: Instruction) -> str:
    parts = [ins.op]
    if ins.src is not None:
        parts.append(ins.src.describe(ins.count))
    if ins.dst is not None:
        parts.append("-> " + ins.dst.describe(ins.count))
    if ins.sources:
        parts.append("<- " + ", ".join(s.describe(ins.count) for s in ins.sources))
    return " ".join(parts)


# ---------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------
def _simulate_program(
    program: Program,
    machine: Machine,
    size_bytes: float,
    *,
    contention: bool = True,
    time_limit_s: float = 60.0,
    record_timeline: bool = True,
    record_utilisation: bool = True,
    protocol: str | None = None,
    started_s: float | None = None,
    network_type: type = FluidNetwork,
) -> SimulationResult:
    """Simulate ``program`` on ``machine`` for a ``size_bytes`` collective
    (nccl-tests size: the buffer the collective is named by) in Program mode
    (module docstring), over the fluid network model; the Program-mode back
    end of :func:`simcoll.simulator.simulate`, which documents the arguments.

    Raises :class:`~simcoll.errors.ProgramDeadlockError` when the run stalls
    with work left, and :class:`~simcoll.errors.SimulationError` past
    ``time_limit_s`` seconds of wall clock (counted from ``started_s``, a
    :func:`time.perf_counter` reading; default now). ``contention=False`` gives the
    ideal α-β network (no sharing). ``record_timeline`` /
    ``record_utilisation`` off leave the result's frames empty.
    ``network_type``: the network the transfers go through
    (:class:`~.network.FluidNetwork`, or :class:`~.reference.ReferenceNetwork`,
    which shares the flows by the rules stated plainly).

    >>> from simcoll import load_machine
    >>> from simcoll.algorithms.nvgroup import nvgroup_cpu_allreduce
    >>> from simcoll.collectives import make_collective
    >>> m = load_machine("summit")
    >>> prog = nvgroup_cpu_allreduce(m.topology, make_collective("allreduce", 6))
    >>> r = _simulate_program(prog, m, 8192)  # NV-Group §4.4.2: host threads only, no kernel
    >>> r.mode, r.stats["kernels"], int((r.timeline["kind"] == "launch").sum()), r.time_s < 1e-4
    ('program', 0, 0, True)
    """
    _check_inputs(program, machine, size_bytes, time_limit_s)
    began = time.perf_counter()
    network = network_type(
        simpy.Environment(),
        machine,
        contention=contention,
        record_timeline=record_timeline,
        record_utilisation=record_utilisation,
    )
    run = _Run(program, machine, size_bytes, network, protocol)
    time_s = run.run(time_limit_s, started_s) + run.costs.call_s
    stats = {
        "wall_s": time.perf_counter() - began,
        "tiles": len(run.tiles),
        "tile_bytes": run.tiles.tile_bytes,
        "instructions": run.instructions_run,
        "fifo_slots": run.costs.fifo_slots,
        "protocol": run.costs.protocol,
        "protocol_efficiency": run.costs.protocol_efficiency,
        "call_s": run.costs.call_s,
        "kernels": len(run.kernels),
        "path": "program" if network_type is FluidNetwork else "program on the reference network",
    }
    return make_result(
        network,
        name=program.name,
        collective=program.collective,
        size_bytes=size_bytes,
        mode="program",
        time_s=time_s,
        stats=stats,
    )


def _check_inputs(program: Program, machine: Machine, size_bytes: float, time_limit_s: float) -> None:
    if not isinstance(program, Program):
        raise AlgorithmError(f"Program mode needs a Program, got {type(program).__name__}")
    if program.num_ranks != machine.num_ranks:
        raise AlgorithmError(
            f"{program.name} is for {program.num_ranks} ranks but machine {machine.name} has {machine.num_ranks}"
        )
    check_size_bytes(size_bytes, chunks=program.collective.size_chunks)
    if not isinstance(time_limit_s, (int, float)) or not time_limit_s > 0:
        raise AlgorithmError(f"time_limit_s must be a positive number, got {time_limit_s!r}")
    _check_routes(program, machine)


def _check_routes(program: Program, machine: Machine) -> None:
    """Every pair of ranks the program moves data between must have a route."""
    for rp in program.ranks:
        r = rp.rank
        for e in rp.executors:
            flows = []
            if e.send_peer is not None:
                flows.append((r, e.send_peer, f"sends to rank {e.send_peer}"))
            if e.recv_peer is not None:
                flows.append((e.recv_peer, r, f"receives from rank {e.recv_peer}"))
            for s, ins in enumerate(e.instructions):
                if ins.op in ("copy", "put", "get", "reduce"):
                    a, b = _owner(r, ins.src), _owner(r, ins.dst)
                    if a != b:
                        flows.append((a, b, f"step {s} ({ins.op}) moves data from rank {a} to rank {b}"))
                elif ins.op == "load_reduce":
                    b = _owner(r, ins.dst)
                    for ref in ins.sources:
                        a = _owner(r, ref)
                        if a != b:
                            flows.append((a, b, f"step {s} (load_reduce) loads from rank {a} into rank {b}"))
            for a, b, what in flows:
                if machine.route(a, b) is None:
                    raise TopologyError(
                        f"{program.name}: rank {r} executor {e.id} {what}, but {machine.name} has no route "
                        f"from rank {a} to rank {b}"
                    )

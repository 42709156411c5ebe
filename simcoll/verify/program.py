"""The verifier of Programs: executed executor by executor, sends and receives
matched in FIFO order per connection, a stall with work left reported as a
deadlock (with its cycle of waits), races between executors found with
vector clocks, and the buffer, connection and route rules checked first
(package docstring)."""

from __future__ import annotations

from collections import defaultdict, deque

import numpy as np

from ..program import RECEIVES, SENDS, Executor, Instruction, Program, Ref
from ..routes import Routes, routes_of
from ..topology import Topology
from .deadline import _on_time
from .values import MAX_PROBLEMS, Value, _check_post, _combine, _initial_value


class _Run:
    """State of one symbolic execution of a Program.

    Happens-before is tracked with vector clocks (Lamport 1978; Mattern 1989):
    ``clock[g][h]`` is how many steps of executor ``h`` executor ``g`` knows to
    have finished, through program order, dependencies and messages, followed
    transitively across ranks (a step on rank 0 can be ordered after another
    step on rank 0 only through a message chain via rank 1). An access races
    with an earlier access to the same slot by another executor unless the
    accessing executor's clock covers that access's step.

    Clocks are numpy vectors that are never changed in place once shared: a
    join builds a new vector, so a message or a dependency target keeps a
    reference (no copy), and an executor's own entry is carried beside the
    vector rather than bumped on every step. A join costs one vectorised
    ``maximum`` over the executors, and only dependencies and receives join.
    Snapshots are kept only for steps that some dependency names, and dropped
    once every dependent step has joined them.
    """

    def __init__(self, program: Program, problems: list[str]):
        self.program = program
        self.coll = program.collective
        self.problems = problems
        self.executors: list[tuple[int, Executor]] = [(rp.rank, e) for rp in program.ranks for e in rp.executors]
        self.index = {(r, e.id): i for i, (r, e) in enumerate(self.executors)}
        n = len(self.executors)
        self.pc = [0] * n
        longest = max((len(e.instructions) for _, e in self.executors), default=0)
        dtype = np.uint16 if longest < np.iinfo(np.uint16).max else np.int64
        zero = np.zeros(n, dtype=dtype)
        # clock[g][h] for h != g; entry g itself is stale: g's own count is pc[g] (+1 while a step runs)
        self.clock: list[np.ndarray] = [zero] * n
        # (executor, step) -> number of steps that depend on it, still to run
        self.dependents: dict[tuple[int, int], int] = defaultdict(int)
        for rank, e in self.executors:
            for ins in e.instructions:
                for dep_exec, dep_step in ins.deps:
                    self.dependents[(self.index[(rank, dep_exec)], dep_step)] += 1
        self.step_clock: dict[tuple[int, int], tuple[np.ndarray, int, int]] = {}
        # a message: (payload, sender's clock stamp, (sender, step))
        self.fifo: dict[tuple[int, int, int], deque] = defaultdict(deque)
        self.slots: dict[tuple[int, str, int], Value | None] = {}
        # slot -> (writer, step); slot -> {reader: step} for reads since that write
        self.last_write: dict[tuple[int, str, int], tuple[int, int]] = {}
        self.reads: dict[tuple[int, str, int], dict[int, int]] = defaultdict(dict)
        for rank, layout in enumerate(self.coll.input_layout):
            for i, chunk in enumerate(layout):
                self.slots[self._canon(rank, "input", i)] = _initial_value(chunk, rank)

    def _canon(self, rank: int, buffer: str, index: int) -> tuple[int, str, int]:
        alias = self.coll.inplace_alias(rank)
        if alias and buffer == alias[0]:
            return (rank, alias[1], alias[2] + index)
        return (rank, buffer, index)

    def where(self, g: int, step: int | None = None) -> str:
        rank, e = self.executors[g]
        step = self.pc[g] if step is None else step
        op = e.instructions[step].op if step < len(e.instructions) else "end"
        return f"rank {rank} executor {e.id} step {step} ({op})"

    # -- happens-before ---------------------------------------------------------------
    def _stamp(self, g: int) -> tuple[np.ndarray, int, int]:
        """Executor ``g``'s clock while it runs step ``pc[g]``: (vector, g, own count)."""
        return (self.clock[g], g, self.pc[g] + 1)

    def _join(self, g: int, stamp: tuple[np.ndarray, int, int]) -> None:
        """Executor ``g`` learns everything ``stamp`` knows (a new vector; shared ones stay intact)."""
        vector, source, own = stamp
        joined = np.maximum(self.clock[g], vector)
        if joined[source] < own:
            joined[source] = own
        self.clock[g] = joined

    def _ordered_before(self, g: int, other: int, other_step: int) -> bool:
        """Whether step ``other_step`` of executor ``other`` happened before ``g``'s current step."""
        return other == g or self.clock[g][other] > other_step

    # -- memory with race detection -------------------------------------------
    def read(self, g: int, rank: int, ref: Ref, count: int) -> list[Value | None]:
        owner = rank if ref.rank is None else ref.rank
        step = self.pc[g]
        values = []
        for k in range(count):
            slot = self._canon(owner, ref.buffer, ref.index + k)
            w = self.last_write.get(slot)
            if w and not self._ordered_before(g, w[0], w[1]):
                self.problems.append(
                    f"{self.where(g)}: reads rank {owner} {ref.buffer}[{ref.index + k}] racing with the write by "
                    f"{self.where(*w)}"
                )
            self.reads[slot][g] = step
            value = self.slots.get(slot)
            if value is None:
                self.problems.append(
                    f"{self.where(g)}: reads rank {owner} {ref.buffer}[{ref.index + k}], which holds no data"
                )
            values.append(value)
        return values

    def write(self, g: int, rank: int, ref: Ref, values: list[Value | None]) -> None:
        owner = rank if ref.rank is None else ref.rank
        step = self.pc[g]
        for k, value in enumerate(values):
            slot = self._canon(owner, ref.buffer, ref.index + k)
            w = self.last_write.get(slot)
            if w and not self._ordered_before(g, w[0], w[1]):
                self.problems.append(
                    f"{self.where(g)}: writes rank {owner} {ref.buffer}[{ref.index + k}] racing with the write by "
                    f"{self.where(*w)}"
                )
            for reader, read_step in self.reads[slot].items():
                if not self._ordered_before(g, reader, read_step):
                    self.problems.append(
                        f"{self.where(g)}: overwrites rank {owner} {ref.buffer}[{ref.index + k}] racing with the read "
                        f"by {self.where(reader, read_step)}"
                    )
            self.reads[slot] = {}
            self.last_write[slot] = (g, step)
            self.slots[slot] = value

    def reduce(self, g: int, a: list[Value | None], b: list[Value | None]) -> list[Value | None]:
        if not self.coll.combining:
            self.problems.append(f"{self.where(g)}: reduces in a {self.coll.name}, which combines nothing")
        return [
            None if x is None or y is None else _combine(x, y, self.where(g), self.problems)
            for x, y in zip(a, b, strict=True)
        ]

    # -- scheduling -----------------------------------------------------------------
    def connection_in(self, g: int) -> tuple[int, int, int]:
        rank, e = self.executors[g]
        return (e.recv_peer, rank, e.channel)

    def connection_out(self, g: int) -> tuple[int, int, int]:
        rank, e = self.executors[g]
        return (rank, e.send_peer, e.channel)

    def blocked_on(self, g: int) -> str | None:
        """Why executor ``g`` cannot run its next instruction, or None."""
        rank, e = self.executors[g]
        ins = e.instructions[self.pc[g]]
        for dep_exec, dep_step in ins.deps:
            d = self.index[(rank, dep_exec)]
            if self.pc[d] <= dep_step:
                return f"dep:{d}:{dep_step}"
        if ins.op in RECEIVES and not self.fifo[self.connection_in(g)]:
            return "recv"
        return None

    def run_one(self, g: int) -> None:
        rank, e = self.executors[g]
        step = self.pc[g]
        ins = e.instructions[step]
        for dep_exec, dep_step in ins.deps:
            target = (self.index[(rank, dep_exec)], dep_step)
            self._join(g, self.step_clock[target])
            self.dependents[target] -= 1
            if not self.dependents[target]:
                del self.step_clock[target], self.dependents[target]
        received = None
        if ins.op in RECEIVES:
            payload, sender_stamp, sender = self.fifo[self.connection_in(g)].popleft()
            self._join(g, sender_stamp)
            expected = 0 if ins.op == "wait" else ins.count
            if payload is None and ins.op != "wait" or payload is not None and len(payload) != expected:
                got = "a signal" if payload is None else f"{len(payload)} chunk(s)"
                want = "a signal" if ins.op == "wait" else f"{ins.count} chunk(s)"
                self.problems.append(f"{self.where(g)}: receives {got} from {self.where(*sender)} but expects {want}")
                payload = [None] * ins.count if payload is None else (payload + [None] * ins.count)[: ins.count]
            received = payload
        outgoing = self._execute(g, rank, ins, received)
        if ins.op in SENDS:
            self.fifo[self.connection_out(g)].append((outgoing, self._stamp(g), (g, step)))
        if (g, step) in self.dependents:
            self.step_clock[(g, step)] = self._stamp(g)
        self.pc[g] += 1

    def _execute(self, g: int, rank: int, ins: Instruction, received):
        op, n = ins.op, ins.count
        if op == "send":
            return self.read(g, rank, ins.src, n)
        if op == "recv":
            self.write(g, rank, ins.dst, received)
        elif op == "rcs":
            self.write(g, rank, ins.dst, received)
            return received
        elif op in ("rrc", "rrs", "rrcs"):
            combined = self.reduce(g, received, self.read(g, rank, ins.src, n))
            if op != "rrs":
                self.write(g, rank, ins.dst, combined)
            if op != "rrc":
                return combined
        elif op in ("copy", "put", "get"):
            self.write(g, rank, ins.dst, self.read(g, rank, ins.src, n))
        elif op == "reduce":
            self.write(g, rank, ins.dst, self.reduce(g, self.read(g, rank, ins.dst, n), self.read(g, rank, ins.src, n)))
        elif op == "load_reduce":
            values = self.read(g, rank, ins.sources[0], n)
            for source in ins.sources[1:]:
                values = self.reduce(g, values, self.read(g, rank, source, n))
            self.write(g, rank, ins.dst, values)
        return None  # signal sends no data; nop and wait do nothing

    def final(self, rank: int, chunk: int, index: int) -> Value | None:
        return self.slots.get(self._canon(rank, "output", index))


def check_program(program: Program, topology: Topology | None = None) -> list[str]:
    problems: list[str] = []
    coll = program.collective
    if topology is not None and topology.num_ranks != coll.num_ranks:
        return [f"{program.name} is for {coll.num_ranks} ranks but {topology.name} has {topology.num_ranks}"]
    problems += _check_buffers(program)
    problems += _check_connections(program, topology)
    if problems:
        return problems
    run = _Run(program, problems)
    n = len(run.executors)
    progress = True
    while progress and len(problems) < MAX_PROBLEMS:
        progress = False
        for g in range(n):
            rank, e = run.executors[g]
            _on_time("running executor (rank, id)", (rank, e.id))
            while run.pc[g] < len(e.instructions) and run.blocked_on(g) is None:
                run.run_one(g)
                progress = True
    unfinished = [g for g in range(n) if run.pc[g] < len(run.executors[g][1].instructions)]
    if unfinished and len(problems) < MAX_PROBLEMS:
        problems.append(_describe_deadlock(run, unfinished))
        return problems
    for (src, dst, chan), queue in run.fifo.items():
        if queue:
            problems.append(
                f"rank {src} sends {len(queue)} message(s) to rank {dst} on channel {chan} that are never received "
                f"(first by {run.where(*queue[0][2])})"
            )
    _check_post(coll, run.final, problems)
    return problems


def _check_buffers(program: Program) -> list[str]:
    problems = []
    coll = program.collective
    for rp in program.ranks:
        for buffer in ("input", "output"):
            need = coll.buffer_chunks(rp.rank, buffer)
            alias = coll.inplace_alias(rp.rank)
            if alias and alias[0] == buffer:
                continue  # lives inside the other buffer
            have = rp.buffers.get(buffer, 0)
            if have < need:
                problems.append(f"rank {rp.rank}: {buffer} buffer has {have} chunk(s), the collective needs {need}")
    return problems


def _check_connections(program: Program, topology: Topology | None) -> list[str]:
    """One sender and one receiver executor per (rank, peer, channel)."""
    problems = []
    routes = routes_of(topology) if topology is not None else None
    for rp in program.ranks:
        senders: dict[tuple[int, int], int] = {}
        receivers: dict[tuple[int, int], int] = {}
        for e in rp.executors:
            for peer, table, verb in ((e.send_peer, senders, "send to"), (e.recv_peer, receivers, "receive from")):
                if peer is None:
                    continue
                key = (peer, e.channel)
                if key in table:
                    problems.append(
                        f"rank {rp.rank}: executors {table[key]} and {e.id} both {verb} rank {peer} on channel {e.channel}"
                    )
                table[key] = e.id
            if routes is not None:
                problems += _check_routes(rp.rank, e, routes, topology.name)
    return problems


def _check_routes(rank: int, e: Executor, routes: Routes, topology_name: str) -> list[str]:
    """Data must be able to flow: to the send peer, from the receive peer, and
    between the ranks of every one-sided access."""
    flows = []
    if e.send_peer is not None:
        flows.append((rank, e.send_peer, "sends to"))
    if e.recv_peer is not None:
        flows.append((e.recv_peer, rank, "receives from"))
    for ins in e.instructions:
        if ins.op == "put" and ins.dst.rank not in (None, rank):
            flows.append((rank, ins.dst.rank, "puts into"))
        for ref in (ins.src, *ins.sources):
            if ins.op in ("get", "load_reduce") and ref is not None and ref.rank not in (None, rank):
                flows.append((ref.rank, rank, "reads from"))
    problems = []
    for src, dst, verb in dict.fromkeys(flows):
        if not routes.connected(src, dst):
            peer = dst if src == rank else src
            problems.append(
                f"rank {rank} executor {e.id} {verb} rank {peer}, but {topology_name} has no route from rank {src} to rank {dst}"
            )
    return problems


def _describe_deadlock(run: _Run, unfinished: list[int]) -> str:
    import networkx as nx

    waits = nx.DiGraph()
    reasons = []
    for g in unfinished:
        why = run.blocked_on(g)
        if why is None:
            continue
        if why == "recv":
            src, dst, chan = run.connection_in(g)
            reasons.append(f"{run.where(g)} waits for a message from rank {src} on channel {chan}")
            for h, (rank, e) in enumerate(run.executors):
                if rank == src and e.send_peer == dst and e.channel == chan:
                    waits.add_edge(g, h)
        else:
            _, d, step = why.split(":")
            d = int(d)
            reasons.append(f"{run.where(g)} waits for {run.where(d, int(step))}")
            waits.add_edge(g, d)
    try:
        cycle = nx.find_cycle(waits)
        loop = " -> ".join(run.where(a) for a, _ in cycle)
        head = f"deadlock: dependency cycle {loop} -> back to the start"
    except nx.NetworkXNoCycle:
        head = "deadlock: executors wait for messages that are never sent"
    return head + "; " + "; ".join(reasons[:8]) + (" ..." if len(reasons) > 8 else "")

"""Checks every compiled Program passes (issue 6 item 4).

- :func:`simcoll.verify.check`: the postcondition by symbolic execution,
  deadlock freedom with unbounded FIFOs, data races, and the connection
  rules (one sending and one receiving thread block per connection; a thread
  block has one send and one receive peer by construction of ``Executor``);
- :func:`check_fifo_bound`: deadlock freedom when every connection holds at
  most ``fifo_slots`` outstanding messages (GC3 §6.1: a send blocks while
  the receiver's slots are full).
"""

from __future__ import annotations

from ..errors import VerificationError
from ..program import RECEIVES, SENDS, Program
from ..topology import Topology
from ..verify import check_program


def check_fifo_bound(program: Program, fifo_slots: int) -> list[str]:
    """Run the Program's control flow with ``fifo_slots`` slots per
    connection (data is ignored); a state where executors are left and none
    can move is a deadlock, reported with the executors that wait.

    A ring Allreduce whose fused receive-reduce-send steps each need a free
    slot downstream is deadlock-free with 8 slots but not with 1, where every
    rank holds its neighbour's slot and waits on its own:

    >>> from simcoll.algorithms import generate
    >>> from simcoll.compiler import lower_algorithm
    >>> program = lower_algorithm(generate("ring", "ring:4", "allreduce"), machine="ring:4")
    >>> check_fifo_bound(program, 8)
    []
    >>> check_fifo_bound(program, 1)[0].split(":")[0]
    'deadlock with 1 FIFO slot(s) per connection'
    """
    execs = [(rp.rank, e) for rp in program.ranks for e in rp.executors]
    index = {(r, e.id): g for g, (r, e) in enumerate(execs)}
    pc = [0] * len(execs)
    queued: dict[tuple[int, int, int], int] = {}

    def runnable(g: int) -> bool:
        rank, e = execs[g]
        ins = e.instructions[pc[g]]
        for dep_exec, dep_step in ins.deps:
            if pc[index[(rank, dep_exec)]] <= dep_step:
                return False
        if ins.op in RECEIVES and queued.get((e.recv_peer, rank, e.channel), 0) == 0:
            return False
        if ins.op in SENDS:
            out = (rank, e.send_peer, e.channel)
            if queued.get(out, 0) >= fifo_slots:
                return False
        return True

    progress = True
    while progress:
        progress = False
        for g, (rank, e) in enumerate(execs):
            while pc[g] < len(e.instructions) and runnable(g):
                ins = e.instructions[pc[g]]
                if ins.op in RECEIVES:
                    queued[(e.recv_peer, rank, e.channel)] -= 1
                if ins.op in SENDS:
                    key = (rank, e.send_peer, e.channel)
                    queued[key] = queued.get(key, 0) + 1
                pc[g] += 1
                progress = True
    stuck = [
        f"rank {rank} executor {e.id} step {pc[g]} ({e.instructions[pc[g]].op})"
        for g, (rank, e) in enumerate(execs)
        if pc[g] < len(e.instructions)
    ]
    if not stuck:
        return []
    more = f" and {len(stuck) - 5} more" if len(stuck) > 5 else ""
    return [f"deadlock with {fifo_slots} FIFO slot(s) per connection: {', '.join(stuck[:5])}{more} cannot proceed"]


def check_compiled(program: Program, topology: Topology | None = None, fifo_slots: int | None = None) -> list[str]:
    """Every problem of a compiled Program: :func:`simcoll.verify.check`
    and, with ``fifo_slots``, :func:`check_fifo_bound`."""
    problems = check_program(program, topology)
    if not problems and fifo_slots is not None:
        problems = check_fifo_bound(program, fifo_slots)
    return problems


def verify_compiled(program: Program, topology: Topology | None = None, fifo_slots: int | None = None) -> None:
    """Raise :class:`~simcoll.errors.VerificationError` on any problem of
    :func:`check_compiled`."""
    problems = check_compiled(program, topology, fifo_slots)
    if problems:
        raise VerificationError(problems)

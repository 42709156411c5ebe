"""Pass 6: dependency insertion (GC3 §5.2, "Synchronization insertion"),
producing the :class:`~simcoll.program.Program`.

Processing edges between instructions of one thread block hold by program
order; communication edges by message matching. Every other processing
edge (same rank, different thread blocks) becomes a cross-thread-block
dependency ``(executor id, step)``. Only the latest step per other thread
block is kept, and none already implied by an earlier dependency of the
same thread block. As in MSCCL XML (one ``depid``/``deps`` per step), an
instruction keeps one dependency; each extra one is carried by a ``nop``
inserted just before it.
"""

from __future__ import annotations

from ..program import Executor, Instruction, Program, RankProgram
from .instruction_dag import InstructionDAG
from .threadblocks import Schedule
from .trace import Trace


def insert_dependencies(idag: InstructionDAG, schedule: Schedule, trace: Trace) -> Program:
    """Build the Program of ``trace`` from its scheduled Instruction DAG."""
    nodes = idag.nodes
    rank_programs = []
    for rank, tbs in enumerate(schedule.blocks):
        place = {i: (tb.id, k) for tb in tbs for k, i in enumerate(tb.nodes)}
        # phase 1: which (thread block, node) each instruction waits for
        waits: dict[int, list[int]] = {}
        for tb in tbs:
            known: dict[int, int] = {}
            for i in tb.nodes:
                latest: dict[int, int] = {}
                for p in nodes[i].preds:
                    ptb, pstep = place[p]
                    if ptb == tb.id or pstep <= known.get(ptb, -1):
                        continue
                    if pstep > latest.get(ptb, -1):
                        latest[ptb] = pstep
                for ptb, pstep in latest.items():
                    known[ptb] = max(known.get(ptb, -1), pstep)
                waits[i] = [_node_at(tbs, ptb, pstep) for ptb, pstep in sorted(latest.items())]
        # phase 2: lay out steps with nops, then resolve steps
        steps: dict[int, int] = {}
        layout: dict[int, list[tuple[str, int]]] = {}
        for tb in tbs:
            items: list[tuple[str, int]] = []
            for i in tb.nodes:
                for w in waits[i][1:]:
                    items.append(("nop", w))
                items.append(("ins", i))
            for k, (kind, i) in enumerate(items):
                if kind == "ins":
                    steps[i] = k
            layout[tb.id] = items
        executors = []
        for tb in tbs:
            instructions = []
            for kind, i in layout[tb.id]:
                if kind == "nop":
                    instructions.append(Instruction("nop", deps=((schedule.block_of[i].id, steps[i]),)))
                    continue
                n = nodes[i]
                deps = ()
                if waits[i]:
                    w = waits[i][0]
                    deps = ((schedule.block_of[w].id, steps[w]),)
                instructions.append(Instruction(n.op, n.src, n.dst if n.op != "send" else None, n.count, deps))
            executors.append(
                Executor(
                    id=tb.id,
                    instructions=tuple(instructions),
                    send_peer=tb.send_peer,
                    recv_peer=tb.recv_peer,
                    channel=tb.channel or 0,
                )
            )
        rank_programs.append(RankProgram(rank, dict(trace.buffers[rank]), tuple(executors)))
    meta = dict(trace.metadata)
    return Program(
        name=trace.name,
        collective=trace.collective,
        ranks=tuple(rank_programs),
        protocol=trace.protocol,
        instances=1,
        topology=trace.topology.name if trace.topology is not None else None,
        metadata=meta,
    )


def _node_at(tbs, tb_id: int, step: int) -> int:
    for tb in tbs:
        if tb.id == tb_id:
            return tb.nodes[step]
    raise KeyError(tb_id)

"""Specification of each compiler pass on its own (GC3 §4–§6), and of the
checks every compiled Program passes (deadlocks, connection rules, FIFO
slots)."""

from __future__ import annotations

import pytest

from simcoll.collectives import make_collective
from simcoll.compiler import CompileError, Loc, Op, Trace, check_fifo_bound, compile_trace
from simcoll.compiler.channels import assign_channels
from simcoll.compiler.chunk_dag import build_chunk_dag
from simcoll.compiler.dependencies import insert_dependencies
from simcoll.compiler.fusion import fuse
from simcoll.compiler.instruction_dag import build_instruction_dag, depths
from simcoll.compiler.threadblocks import assign_threadblocks
from simcoll.compiler.trace import buffer_sizes, merge_scratch, refine_collective, replicate
from simcoll.program import Executor, Instruction, Program, RankProgram, Ref
from simcoll.verify import check


def trace_of(coll, *ops, buffers=None, instances=1):
    sizes = buffer_sizes(coll)
    for r, extra in (buffers or {}).items():
        sizes[r].update(extra)
    return Trace("t", coll, list(ops), sizes, instances=instances)


def copy(src, dst, count=1, **kw):
    return Op("copy", Loc(*src), Loc(*dst), count, **kw)


def reduce(src, dst, count=1, **kw):
    return Op("reduce", Loc(*src), Loc(*dst), count, **kw)


def dag(trace):
    return build_instruction_dag(build_chunk_dag(trace), trace.num_ranks)


BCAST3 = make_collective("broadcast", 3, root=0)


def chain_trace():
    """Broadcast along 0 -> 1 -> 2, each rank keeping it in output[0]."""
    return trace_of(
        BCAST3,
        copy((0, "input", 0), (0, "output", 0)),
        copy((0, "output", 0), (1, "output", 0)),
        copy((1, "output", 0), (2, "output", 0)),
    )


# -- Chunk DAG --------------------------------------------------------------------------
def test_chunk_dag_has_true_and_false_dependencies():
    coll = make_collective("allreduce", 2, 1)
    trace = trace_of(
        coll,
        copy((0, "input", 0), (1, "scratch", 0)),  # 0: writes rank 1 scratch[0]
        reduce((1, "scratch", 0), (1, "input", 0)),  # 1: reads it (true 0->1), rmw input[0]
        copy(
            (1, "input", 0), (1, "scratch", 0)
        ),  # 2: overwrites scratch[0] (false 1->2, false 0->2), reads input (true 1->2)
        buffers={1: {"scratch": 1}},
    )
    edges = {(e.src, e.dst, e.kind) for e in build_chunk_dag(trace).edges}
    assert (0, 1, "true") in edges
    assert (1, 2, "true") in edges  # read after write of input[0] wins over the write-after-read of scratch
    assert (0, 2, "false") in edges
    assert all(e.rank == 1 for e in build_chunk_dag(trace).edges)


def test_a_reduce_with_a_base_slot_depends_on_the_base_not_on_its_destination():
    # MSCCL's rrc from input into output (dst := base + src): the chunk DAG sees the read of
    # the base slot (a true edge from its writer, a false edge to its next overwrite) and no
    # read of the destination, whose earlier writer only orders the write (write after write)
    coll = make_collective("allreduce", 2, 1)
    trace = trace_of(
        coll,
        copy((0, "input", 0), (1, "scratch", 0)),  # 0: writes rank 1 scratch[0], the base
        copy((1, "input", 0), (1, "output", 0)),  # 1: writes rank 1 output[0], the destination
        reduce((0, "input", 0), (1, "output", 0), base=Loc(1, "scratch", 0)),  # 2: output := scratch + input
        copy((1, "input", 0), (1, "scratch", 0)),  # 3: overwrites the base
        buffers={1: {"scratch": 1}},
    )
    edges = {(e.src, e.dst, e.kind) for e in build_chunk_dag(trace).edges}
    assert (0, 2, "true") in edges and (2, 3, "false") in edges
    assert (1, 2, "false") in edges and (1, 2, "true") not in edges
    idag = dag(trace)
    rrc = next(n for n in idag.nodes if n.op == "rrc")
    assert {idag.nodes[i].pos for i in rrc.preds} == {0, 1} and {idag.nodes[i].pos for i in rrc.succs} == {3}


# -- Instruction DAG --------------------------------------------------------------------
def test_remote_copy_is_send_and_recv_joined_by_a_communication_edge():
    idag = dag(chain_trace())
    ops = [(n.rank, n.op) for n in idag.nodes]
    assert ops == [(0, "copy"), (0, "send"), (1, "recv"), (1, "send"), (2, "recv")]
    assert [(e.src_rank, e.dst_rank) for e in idag.comm] == [(0, 1), (1, 2)]
    # processing edges: the local copy feeds the send; the recv feeds the next send
    assert idag.nodes[1].preds == {0} and idag.nodes[3].preds == {2}


def test_remote_reduce_is_send_and_receive_reduce_copy():
    coll = make_collective("reduce", 2, 1, root=1)
    idag = dag(trace_of(coll, reduce((0, "input", 0), (1, "input", 0))))
    assert [(n.rank, n.op) for n in idag.nodes] == [(0, "send"), (1, "rrc")]
    assert idag.nodes[1].src == idag.nodes[1].dst == Ref("input", 0)


def test_depths_follow_longest_paths():
    idag = dag(chain_trace())
    depth, rdepth = depths(idag)
    assert [depth[i] for i in range(5)] == [0, 1, 2, 3, 4]
    assert [rdepth[i] for i in range(5)] == [4, 3, 2, 1, 0]


# -- fusion ----------------------------------------------------------------------------------
def test_recv_then_send_of_the_same_slot_fuses_into_rcs():
    idag = fuse(dag(chain_trace()))
    assert idag.counts() == {"copy": 1, "send": 1, "rcs": 1, "recv": 1}


def test_rrc_then_send_is_rrs_when_overwritten_and_rrcs_when_kept():
    coll = make_collective("allreduce", 3, 1)
    base = [
        reduce((0, "input", 0), (1, "input", 0)),
        reduce((1, "input", 0), (2, "input", 0)),  # rank 1's partial sum is sent on
    ]
    kept = fuse(dag(trace_of(coll, *base)))
    assert kept.counts() == {"send": 1, "rrcs": 1, "rrc": 1}
    overwritten = fuse(dag(trace_of(coll, *base, copy((2, "input", 0), (1, "input", 0)))))
    assert overwritten.counts() == {"send": 1, "rrs": 1, "rrcs": 1, "recv": 1}


def test_no_fusion_across_counts_or_user_channels():
    coll = make_collective("broadcast", 3, 2, root=0)
    counts = trace_of(
        coll,
        copy((0, "input", 0), (1, "output", 0)),
        copy((0, "input", 1), (1, "output", 1)),
        copy((1, "output", 0), (2, "output", 0), count=2),
    )
    assert "rcs" not in fuse(dag(counts)).counts()
    channels = trace_of(
        BCAST3,
        copy((0, "input", 0), (1, "output", 0), channel=0),
        copy((1, "output", 0), (2, "output", 0), channel=1),
    )
    assert "rcs" not in fuse(dag(channels)).counts()


def test_of_several_sends_the_one_on_the_longest_path_is_fused():
    coll = make_collective("broadcast", 4, root=0)
    trace = trace_of(
        coll,
        copy((0, "input", 0), (1, "output", 0)),
        copy((1, "output", 0), (2, "output", 0)),  # leaf
        copy((1, "output", 0), (3, "output", 0)),  # continues to rank 0's output
        copy((3, "output", 0), (0, "output", 0)),
    )
    idag = fuse(dag(trace))
    rcs = [n for n in idag.alive() if n.op == "rcs"]
    assert [(n.rank, n.send_peer) for n in rcs] == [(1, 3), (3, 0)]


# -- channels ----------------------------------------------------------------------------------
def test_conflicting_fused_chains_take_the_lowest_valid_channel():
    # rank 1 forwards chunk 0 from rank 0 and chunk 1 from rank 3 to rank 2:
    # one thread block cannot receive from both, so the second chain moves to channel 1
    coll = make_collective("gather", 4, 1, root=2)
    trace = trace_of(
        coll,
        copy((0, "input", 0), (1, "scratch", 0)),
        copy((1, "scratch", 0), (2, "output", 0)),
        copy((3, "input", 0), (1, "scratch", 1)),
        copy((1, "scratch", 1), (2, "output", 3)),
        copy((1, "input", 0), (2, "output", 1)),
        copy((2, "input", 0), (2, "output", 2)),
        buffers={1: {"scratch": 2}},
    )
    idag = assign_channels(fuse(dag(trace)))
    assert [e.channel for e in idag.comm] == [0, 0, 1, 1, 0]
    program = compile_trace(trace)
    assert program.num_channels == 2


def test_user_channel_conflicting_with_connection_rules_is_an_error():
    coll = make_collective("gather", 4, 1, root=2)
    trace = trace_of(
        coll,
        copy((0, "input", 0), (1, "scratch", 0), channel=0, where="user.py:1"),
        copy((1, "scratch", 0), (2, "output", 0)),
        copy((3, "input", 0), (1, "scratch", 1), channel=0, where="user.py:3"),
        copy((1, "scratch", 1), (2, "output", 3)),
        buffers={1: {"scratch": 2}},
    )
    with pytest.raises(CompileError, match="user.py:3"):
        assign_channels(fuse(dag(trace)))


# -- thread blocks, FIFO slots, dependencies ------------------------------------------------------
def many_sends_trace(n):
    coll = make_collective("alltoall", 2, n)
    ops = [copy((0, "input", n + i), (1, "output", i)) for i in range(n)]
    ops += [copy((1, "input", i), (0, "output", n + i)) for i in range(n)]
    ops += [copy((r, "input", r * n + i), (r, "output", r * n + i)) for r in range(2) for i in range(n)]
    return trace_of(coll, *ops)


def test_thread_blocks_have_one_peer_each_way_and_follow_the_global_order():
    trace = many_sends_trace(4)
    idag = assign_channels(fuse(dag(trace)))
    schedule = assign_threadblocks(idag)
    position = {i: k for k, i in enumerate(schedule.order)}
    for tbs in schedule.blocks:
        for tb in tbs:
            assert [position[i] for i in tb.nodes] == sorted(position[i] for i in tb.nodes)
            sends = {idag.nodes[i].send_peer for i in tb.nodes} - {None}
            recvs = {idag.nodes[i].recv_peer for i in tb.nodes} - {None}
            assert len(sends) <= 1 and len(recvs) <= 1
    for n in idag.alive():  # the order respects every edge
        for p in idag.predecessors(n):
            assert position[p] < position[n.id]


def exchange_trace():
    """Ranks 0 and 1 swap a chunk: each rank sends to and receives from the same peer."""
    coll = make_collective("alltoall", 2, 1)
    ops = [copy((0, "input", 1), (1, "output", 0)), copy((1, "input", 0), (0, "output", 1))]
    ops += [copy((r, "input", r), (r, "output", r)) for r in range(2)]
    return trace_of(coll, *ops)


def test_an_unpaired_send_and_receive_with_one_peer_share_a_block_unless_asked_not_to():
    # GC3 §5.2 / MSCCL XML (send = recv on one thread block) by default; with
    # share_peer_blocks=False the send and the receive get a thread block each
    for share, blocks in ((True, 1), (False, 2)):
        idag = assign_channels(fuse(dag(exchange_trace())))
        schedule = assign_threadblocks(idag, share_peer_blocks=share)
        for rank in range(2):
            comm = [tb for tb in schedule.blocks[rank] if tb.send_peer is not None or tb.recv_peer is not None]
            assert len(comm) == blocks
        program = compile_trace(exchange_trace(), share_peer_blocks=share)
        assert check(program) == []
        assert [len(rp.executors) for rp in program.ranks] == [blocks] * 2  # the local copies join one


def test_global_order_keeps_at_most_fifo_slots_messages_outstanding():
    trace = many_sends_trace(6)
    idag = assign_channels(fuse(dag(trace)))
    schedule = assign_threadblocks(idag, fifo_slots=2)
    outstanding, worst = 0, 0
    for i in schedule.order:
        n = idag.nodes[i]
        if n.rank == 0 and n.send_edge is not None:
            outstanding += 1
        if n.rank == 1 and n.recv_edge is not None and n.recv_peer == 0:
            outstanding -= 1
        worst = max(worst, outstanding)
    assert worst == 2
    program = compile_trace(trace, fifo_slots=2)
    assert check_fifo_bound(program, 2) == []


def test_dependencies_cross_thread_blocks_with_nops_for_extra_ones():
    # rank 0 gathers one chunk from ranks 1 and 2 in scratch and forwards both in one send to rank 3
    coll = make_collective("alltoall", 4, 1)
    ops = [
        copy((1, "input", 3), (0, "scratch", 0)),
        copy((2, "input", 3), (0, "scratch", 1)),
        copy((0, "scratch", 0), (3, "scratch", 0), count=2),
        copy((3, "scratch", 0), (3, "output", 1)),
        copy((3, "scratch", 1), (3, "output", 2)),
    ]
    ops += [
        copy((s, "input", d), (d, "output", s)) for s in range(4) for d in range(4) if (s, d) not in [(1, 3), (2, 3)]
    ]
    trace = trace_of(coll, *ops, buffers={0: {"scratch": 2}, 3: {"scratch": 2}})
    idag = assign_channels(fuse(dag(trace)))
    program = insert_dependencies(idag, assign_threadblocks(idag), trace)
    assert check(program) == []
    rank0 = program.ranks[0]
    forward = [
        (e, s) for e in rank0.executors for s, ins in enumerate(e.instructions) if ins.op == "send" and ins.count == 2
    ]
    ((e, s),) = forward
    assert len(e.instructions[s].deps) == 1
    assert e.instructions[s - 1].op == "nop" and len(e.instructions[s - 1].deps) == 1
    waited = {e.instructions[s].deps[0][0], e.instructions[s - 1].deps[0][0]}
    receivers = {x.id for x in rank0.executors if x.recv_peer in (1, 2)}
    assert waited == receivers
    assert all(len(i.deps) <= 1 for rp in program.ranks for x in rp.executors for i in x.instructions)


# -- replication and scratch layout -------------------------------------------------------------------
def test_instances_refine_chunks_and_replicate_on_separate_channels():
    trace = chain_trace()
    trace.instances = 3
    rep = replicate(trace)
    assert len(rep.ops) == 3 * len(trace.ops)
    assert rep.collective.chunk_factor == 3 and rep.collective.builtin
    assert [(op.dst.index, op.count, op.lane, op.lanes) for op in rep.ops[:3]] == [
        (0, 1, 0, 3),
        (1, 1, 1, 3),
        (2, 1, 2, 3),
    ]
    program = compile_trace(trace)
    assert program.num_channels == 3
    assert program.metadata["instances"] == 3
    assert check(program) == []


def test_refine_collective_keeps_builtins_and_maps_slots():
    coll = make_collective("alltoall", 3, 1)
    fine = refine_collective(coll, 2)
    assert fine == make_collective("alltoall", 3, 2)
    assert refine_collective(coll, 1) is coll


def test_named_scratch_buffers_merge_into_scratch():
    coll = make_collective("allgather", 2)
    trace = trace_of(coll, copy((0, "input", 0), (1, "tmp", 1)), buffers={1: {"scratch": 2, "tmp": 2}})
    merged = merge_scratch(trace)
    assert merged.ops[0].dst == Loc(1, "scratch", 3)
    assert merged.buffers[1]["scratch"] == 4 and "tmp" not in merged.buffers[1]


# -- checks on hand-made Programs --------------------------------------------------------------------
def test_a_cyclic_dependency_is_rejected_as_a_deadlock():
    coll = make_collective("allgather", 2)

    def rank(r):
        return RankProgram(
            r,
            {"input": 1, "output": 2},
            (
                Executor(0, (Instruction("copy", Ref("input", 0), Ref("output", r), deps=((1, 0),)),)),
                Executor(1, (Instruction("nop", deps=((0, 0),)),), send_peer=1 - r, recv_peer=1 - r),
            ),
        )

    program = Program("cycle", coll, (rank(0), rank(1)))
    problems = check(program)
    assert any(p.startswith("deadlock: dependency cycle") for p in problems), problems


def test_bounded_fifo_deadlock_is_found_that_unbounded_execution_misses():
    coll = make_collective("alltoall", 2, 4)
    r0 = RankProgram(
        0,
        {"input": 8, "output": 8},
        (
            Executor(
                0,
                tuple(Instruction("send", Ref("input", 4 + i)) for i in range(3))
                + tuple(Instruction("copy", Ref("input", i), Ref("output", i)) for i in range(4)),
                send_peer=1,
                channel=0,
            ),
            Executor(1, (Instruction("send", Ref("input", 7), deps=((0, 2),)),), send_peer=1, channel=1),
            Executor(2, tuple(Instruction("recv", dst=Ref("output", 4 + i)) for i in range(4)), recv_peer=1),
        ),
    )
    r1 = RankProgram(
        1,
        {"input": 8, "output": 8},
        (
            Executor(
                0,
                (Instruction("recv", dst=Ref("output", 0), deps=((1, 0),)),)
                + tuple(Instruction("recv", dst=Ref("output", i)) for i in (1, 2)),
                recv_peer=0,
                channel=0,
            ),
            Executor(1, (Instruction("recv", dst=Ref("output", 3)),), recv_peer=0, channel=1),
            Executor(
                2,
                tuple(Instruction("send", Ref("input", i)) for i in range(4))
                + tuple(Instruction("copy", Ref("input", 4 + i), Ref("output", 4 + i)) for i in range(4)),
                send_peer=0,
            ),
        ),
    )
    program = Program("slots", coll, (r0, r1))
    assert check(program) == []
    assert check_fifo_bound(program, 3) == []
    (problem,) = check_fifo_bound(program, 2)
    assert problem.startswith("deadlock with 2 FIFO slot(s)")


def test_connection_rules_are_checked_on_compiled_programs():
    # two thread blocks sending to the same peer on the same channel break GC3 §5's rule
    coll = make_collective("allgather", 2)
    rp = [
        RankProgram(
            r,
            {"input": 1, "output": 2},
            (
                Executor(0, (Instruction("send", Ref("input", 0)),), send_peer=1 - r),
                Executor(1, (Instruction("copy", Ref("input", 0), Ref("output", r)),), send_peer=1 - r),
                Executor(2, (Instruction("recv", dst=Ref("output", 1 - r)),), recv_peer=1 - r),
            ),
        )
        for r in range(2)
    ]
    problems = check(Program("rules", coll, tuple(rp)))
    assert any("both send to rank" in p for p in problems)


def test_compile_reports_the_time_of_every_pass():
    timings: dict[str, float] = {}
    compile_trace(chain_trace(), timings=timings)
    assert list(timings) == [
        "replicate",
        "merge_scratch",
        "chunk_dag",
        "instruction_dag",
        "fusion",
        "channels",
        "threadblocks",
        "dependencies",
        "check",
    ]
    assert all(t >= 0 for t in timings.values())

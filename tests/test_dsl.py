"""Specification of the chunk DSL (GC3 §3, §5.1): tracing, buffers, references,
and errors that name the user's line."""

from __future__ import annotations

import inspect

import pytest

from simcoll.collectives import make_collective
from simcoll.dsl import DSLError, chunk, parallelize, program
from simcoll.errors import AlgorithmError, SimcollError
from simcoll.machines import load_machine
from simcoll.verify import check


def lineno() -> int:
    """The caller's line number."""
    return inspect.currentframe().f_back.f_lineno


def raises_at(info, line: int) -> None:
    assert f"{__file__}:{line}:" in str(info.value), str(info.value)


# -- tracing ------------------------------------------------------------------------
def test_allgather_by_copies_traces_one_op_per_copy_and_verifies():
    p = 4
    with program("ag", "allgather", num_ranks=p) as prog:
        for r in range(p):
            c = chunk(r, "input", 0)
            c.copy(r, "output", r)
            for q in range(p):
                if q != r:
                    c.copy(q, "output", r)
    assert len(prog.trace.ops) == p * p
    compiled = prog.compile()
    assert check(compiled) == []
    assert compiled.instruction_counts() == {"copy": p, "send": p * (p - 1), "recv": p * (p - 1)}


def test_copy_returns_a_reference_to_the_copy_for_fluent_chains():
    with program("bcast", make_collective("broadcast", 3, root=0)) as prog:
        c = chunk(0, "input", 0)
        c.copy(0, "output", 0)
        c = c.copy(1, "output", 0)
        assert (c.rank, c.buffer, c.index) == (1, "output", 0)
        c.copy(2, "output", 0)
    assert prog.compile().instruction_counts() == {"copy": 1, "send": 1, "rcs": 1, "recv": 1}


def test_reduce_writes_into_the_receiver_and_returns_it():
    with program("r", "reduce", num_ranks=2, chunk_factor=1, root=1) as prog:
        c = chunk(1, "input", 0).reduce(chunk(0, "input", 0))
        assert (c.rank, c.buffer) == (1, "input")
        c.copy(1, "output", 0)
    op = prog.trace.ops[0]
    assert (op.kind, op.src.rank, op.dst.rank) == ("reduce", 0, 1)
    assert check(prog.compile()) == []


def test_buffer_aliases_and_named_scratch_sized_from_use():
    with program("s", "allgather", num_ranks=2) as prog:
        for r in range(2):
            chunk(r, "in", 0).copy(1 - r, "stash", 5).copy(1 - r, "o", r)
            chunk(r, "i", 0).copy(r, "out", r)
    assert prog.buffers[0]["stash"] == 6
    compiled = prog.compile()
    assert compiled.ranks[0].buffers["scratch"] == 6  # named scratch merged into scratch for MSCCL
    assert compiled.metadata["scratch_offsets"]["0"] == {"stash": 0}


def test_inplace_allreduce_aliases_output_into_input():
    with program("ip", "allreduce", num_ranks=2, chunk_factor=1, inplace=True) as prog:
        c = chunk(1, "input", 0).reduce(chunk(0, "input", 0))
        c.copy(0, "output", 0)  # output[0] of an in-place Allreduce is input[0]
    assert prog.trace.ops[1].dst.buffer == "input"
    compiled = prog.compile()
    assert compiled.ranks[0].buffers["output"] == 0
    assert check(compiled) == []


def test_program_settings_reach_the_program():
    with program("ll", "allgather", num_ranks=2, protocol="LL128") as prog:
        for r in range(2):
            chunk(r, "input", 0).copy(r, "output", r)
            chunk(r, "input", 0).copy(1 - r, "output", r)
    assert prog.compile().protocol == "LL128"


def test_machine_gives_ranks_and_route_checks():
    machine = load_machine("dgx1")
    with program("m", "allgather", machine=machine) as prog:
        for r in range(8):
            chunk(r, "input", 0).copy(r, "output", r)
            for q in range(8):
                if q != r:
                    chunk(r, "input", 0).copy(q, "output", r)
    assert prog.collective.num_ranks == 8
    # a correct Allgather, but DGX-1 lacks NVLinks for some pairs (e.g. 0 and 5)
    with pytest.raises(SimcollError, match="but dgx1 has no route from rank"):
        prog.compile()


def test_parallelize_replicates_ops_on_their_own_channels():
    with program("par", "allgather", num_ranks=2) as prog:
        with parallelize(2):
            for r in range(2):
                chunk(r, "input", 0).copy(1 - r, "output", r)
        for r in range(2):
            chunk(r, "input", 0).copy(r, "output", r)
    assert [op.split for op in prog.trace.ops] == [2, 2, 1, 1]
    compiled = prog.compile()
    assert compiled.collective.chunk_factor == 2
    assert compiled.instruction_counts()["send"] == 4
    assert compiled.num_channels == 2


def test_hints_pin_channels_and_thread_blocks():
    with program("hint", "allgather", num_ranks=2) as prog:
        for r in range(2):
            chunk(r, "input", 0).copy(r, "output", r, sendtb=3)
            chunk(r, "input", 0).copy(1 - r, "output", r, ch=1, sendtb=5, recvtb=6)
    compiled = prog.compile()
    for rp in compiled.ranks:
        ids = {e.id: e for e in rp.executors}
        assert ids[5].send_peer == 1 - rp.rank and ids[5].channel == 1
        assert ids[6].recv_peer == 1 - rp.rank
        assert [i.op for i in ids[3].instructions] == ["copy"]


# -- errors at the user's line (GC3 §3.3) -------------------------------------------------
def test_reading_an_uninitialised_chunk_names_the_line():
    with program("e", "allgather", num_ranks=2):
        with pytest.raises(DSLError, match="uninitialised") as info:
            line = lineno() + 1
            chunk(0, "output", 1)
    raises_at(info, line)


def test_uninitialised_scratch_is_rejected_too():
    with program("e", "allgather", num_ranks=2):
        with pytest.raises(DSLError, match="uninitialised") as info:
            line = lineno() + 1
            chunk(1, "scratch", 0)
    raises_at(info, line)


def test_stale_reference_names_the_line_and_the_overwrite():
    with program("e", "allreduce", num_ranks=2, chunk_factor=1):
        old = chunk(0, "input", 0)
        overwrite_line = lineno() + 1
        chunk(0, "input", 0).reduce(chunk(1, "input", 0))
        with pytest.raises(DSLError, match="stale reference") as info:
            line = lineno() + 1
            old.copy(1, "output", 0)
    raises_at(info, line)
    assert f"overwritten at {__file__}:{overwrite_line}" in str(info.value)


def test_mismatched_counts_name_the_line():
    with program("e", "allreduce", num_ranks=2, chunk_factor=2):
        with pytest.raises(DSLError, match="mismatched counts") as info:
            line = lineno() + 1
            chunk(0, "input", 0, count=2).reduce(chunk(1, "input", 0))
    raises_at(info, line)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: chunk(4, "input", 0), "rank 4 is out of range"),
        (lambda: chunk(-1, "input", 0), "rank -1 is out of range"),
        (lambda: chunk(0, "input", 1), r"input\[1\] is out of range"),
        (lambda: chunk(0, "input", -1), "index -1 is out of range"),
        (lambda: chunk(0, "input", 0).copy(1, "output", 4, ch=0), r"output\[4\] is out of range"),
        (lambda: chunk(0, "input", 0).copy(9, "output", 0), "rank 9 is out of range"),
        (lambda: chunk(0, "input", 0, count=0), "count must be a positive integer"),
    ],
)
def test_out_of_range_rank_or_index_names_the_line(call, message):
    with program("e", "allgather", num_ranks=4):
        with pytest.raises(DSLError, match=message) as info:
            call()
    # the lambda's line is the user's line: it is in this file
    assert f"{__file__}:" in str(info.value)


def test_error_inside_a_helper_names_the_helper_line_in_user_code():
    def helper():
        return chunk(0, "output", 0)  # uninitialised

    helper_line = inspect.getsourcelines(helper)[1] + 1
    with program("e", "allgather", num_ranks=2):
        with pytest.raises(DSLError) as info:
            helper()
    raises_at(info, helper_line)


def test_other_misuses():
    with pytest.raises(DSLError, match="outside a program"):
        chunk(0, "input", 0)
    with program("e", "allgather", num_ranks=2):
        with pytest.raises(DSLError, match="combines nothing"):
            chunk(0, "input", 0).reduce(chunk(1, "input", 0))
        with pytest.raises(DSLError, match="overlaps"):
            chunk(0, "input", 0).copy(0, "input", 0)
        with pytest.raises(DSLError, match="parallelize"):
            with parallelize(0):
                pass
    with pytest.raises(DSLError, match="protocol"):
        program("e", "allgather", num_ranks=2, protocol="Fast")
    with pytest.raises(DSLError, match="num_ranks"):
        program("e", "allgather")
    assert issubclass(DSLError, AlgorithmError)


def test_decorator_form_traces_each_call_with_its_sizes():
    from simcoll.dsl import dsl_program

    @dsl_program("ring_ag", "allgather", num_ranks=lambda p: p, protocol="LL")
    def ring_allgather(p):
        for r in range(p):
            c = chunk(r, "input", 0)
            c.copy(r, "output", r)
            for step in range(1, p):
                c = c.copy((r + step) % p, "output", r)

    for p in (4, 8):
        prog = ring_allgather(p)
        compiled = prog.compile()
        assert compiled.num_ranks == p and compiled.protocol == "LL"
        # each chunk: a send, P-2 receive-copy-sends, a receive (GC3 §4.2 rcs)
        assert compiled.instruction_counts() == {"copy": p, "send": p, "rcs": p * (p - 2), "recv": p}


def test_conflicting_thread_block_hints_are_rejected_with_the_line():
    from simcoll.compiler import CompileError

    with program("hint", "allgather", num_ranks=3) as prog:
        for r in range(3):
            chunk(r, "input", 0).copy(r, "output", r)
        chunk(0, "input", 0).copy(1, "output", 0, sendtb=0)
        line = lineno() + 1
        chunk(0, "input", 0).copy(2, "output", 0, sendtb=0)  # one thread block, two send peers
        for r in (1, 2):
            for q in range(3):
                if q != r:
                    chunk(r, "input", 0).copy(q, "output", r)
    with pytest.raises(CompileError, match="cannot both send to rank 2") as info:
        prog.compile()
    assert f"{__file__}:{line}" in str(info.value), str(info.value)

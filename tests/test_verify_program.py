"""Specification of the Program verifier (simcoll.verify.check on Programs) and
of Program's construction-time structure checks and JSON form.

Programs are built by hand with the compact helpers below: ``op`` builds an
Instruction from tuples (``("input", 0)`` is a local reference,
``("output", 1, 3)`` one on rank 3), ``tb`` an executor, ``program`` a
Program from per-rank buffers and executors.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import replace

import networkx as nx
import pytest
from program_builders import op, program, tb

from simcoll.collectives import make_collective
from simcoll.dsl.examples import alltoall_two_step
from simcoll.errors import AlgorithmError, SimcollError, VerificationError
from simcoll.machines import load_machine
from simcoll.program import RECEIVES, SENDS, Program, RankProgram, Ref
from simcoll.topology import topology_from_dict
from simcoll.verify import check, verify

P = 4


def one_problem(prog, *fragments):
    """``prog`` fails verification and some problem names every fragment."""
    problems = check(prog)
    assert problems, "expected the verifier to reject the program"
    assert any(all(f in p for f in fragments) for p in problems), problems
    return problems


# -- reference programs ---------------------------------------------------------
def ring_allgather_steps(r, p=P, d=1):
    """Rank r of a ring Allgather (c=1, out of place): copy its chunk into the
    output, send it to r+d, forward p-2 chunks from r-d and keep the last."""
    steps = [op("copy", ("input", 0), ("output", r)), op("send", ("output", r))]
    steps += [op("rcs", dst=("output", (r - k * d) % p)) for k in range(1, p - 1)]
    return [*steps, op("recv", dst=("output", (r - (p - 1) * d) % p))]


def ring_allgather(p=P, edit=None, d=1):
    execs = []
    for r in range(p):
        steps = ring_allgather_steps(r, p, d)
        if edit:
            steps = edit(r, steps)
        execs.append([tb(0, *steps, send=(r + d) % p, recv=(r - d) % p)])
    return program(make_collective("allgather", p), execs, {"input": 1, "output": p})


def ring_allreduce_inplace(p=P):
    """The MSCCL allreduce_ring.xml schedule: s, rrs x (p-2), rrcs, rcs x (p-2), r,
    all on the input buffer (in place, output aliases input)."""
    execs = []
    for r in range(p):
        at = [("input", (r - k) % p) for k in range(p)]
        steps = [op("send", at[0])] + [op("rrs", at[k]) for k in range(1, p - 1)]
        steps += [op("rrcs", at[p - 1], at[p - 1])] + [op("rcs", dst=at[k]) for k in range(p - 2)]
        steps += [op("recv", dst=at[p - 2])]
        execs.append([tb(0, *steps, send=(r + 1) % p, recv=(r - 1) % p)])
    return program(make_collective("allreduce", p, p, inplace=True), execs, {"input": p})


def pair_allreduce(local=None):
    """2-rank Allreduce (c=1): exchange inputs into a scratch buffer, then
    output := input, output := output + scratch."""
    local = local or [op("copy", ("input", 0), ("output", 0)), op("reduce", ("scratch", 0), ("output", 0))]
    execs = [
        [tb(0, op("send", ("input", 0)), op("recv", dst=("scratch", 0)), *local, send=1 - r, recv=1 - r)]
        for r in range(2)
    ]
    return program(make_collective("allreduce", 2), execs, {"input": 1, "output": 1, "scratch": 1})


def staged_allgather(deps=((0, 0),)):
    """2-rank Allgather: executor 0 receives the peer's chunk into scratch,
    executor 1 copies it into the output once that receive is done."""
    execs = []
    for r in range(2):
        execs.append(
            [
                tb(0, op("recv", dst=("scratch", 0)), recv=1 - r),
                tb(1, op("copy", ("scratch", 0), ("output", 1 - r), deps=deps)),
                tb(2, op("copy", ("input", 0), ("output", r)), op("send", ("input", 0)), send=1 - r),
            ]
        )
    return program(make_collective("allgather", 2), execs, {"input": 1, "output": 2, "scratch": 1})


def nvgroup_allreduce(sync=True):
    """2-rank Allreduce (c=2) NVGroup style: stage input into scratch, signal
    the peer, load-reduce chunk r from both ranks' scratch, put it into the
    peer's output and signal completion."""
    execs = []
    for r in range(2):
        q = 1 - r
        handshake = [op("signal"), op("wait")] if sync else []
        execs.append(
            [
                tb(
                    0,
                    op("copy", ("input", 0), ("scratch", 0), n=2),
                    *handshake,
                    op("load_reduce", dst=("output", r), sources=[("scratch", r), ("scratch", r, q)]),
                    op("put", ("output", r), ("output", r, q)),
                    op("signal"),
                    op("wait"),
                    send=q,
                    recv=q,
                    kind="host" if r else "threadblock",
                )
            ]
        )
    return program(make_collective("allreduce", 2, 2), execs, {"input": 2, "output": 2, "scratch": 2})


def get_allgather():
    """2-rank Allgather by one-sided reads: each rank copies its chunk into its
    output, signals the peer, and after the peer's signal gets the peer's chunk."""
    execs = [
        [
            tb(
                0,
                op("copy", ("input", 0), ("output", r)),
                op("signal"),
                op("wait"),
                op("get", ("output", 1 - r, 1 - r), ("output", 1 - r)),
                send=1 - r,
                recv=1 - r,
            )
        ]
        for r in range(2)
    ]
    return program(make_collective("allgather", 2), execs, {"input": 1, "output": 2})


# -- 1. correct programs are accepted -------------------------------------------
@pytest.mark.parametrize(
    "build",
    [ring_allgather, ring_allreduce_inplace, pair_allreduce, staged_allgather, nvgroup_allreduce, get_allgather],
)
def test_correct_program_is_accepted(build):
    prog = build()
    assert check(prog) == []
    verify(prog)  # does not raise


def test_ring_allreduce_uses_the_fused_msccl_steps():
    counts = ring_allreduce_inplace().instruction_counts()
    assert counts == {"send": P, "rrs": P * (P - 2), "rrcs": P, "rcs": P * (P - 2), "recv": P}


def two_channel_allgather(channels=(0, 1)):
    """2-rank Allgather (c=2): per chunk i, executor i sends it to the peer and
    executor 2+i receives the peer's, on channel ``channels[i]``."""
    coll = make_collective("allgather", 2, 2)
    execs = []
    for r in range(2):
        out = coll.output_layout[r]
        es = [
            tb(
                i,
                op("copy", ("input", i), ("output", out.index(coll.input_layout[r][i]))),
                op("send", ("input", i)),
                send=1 - r,
                chan=channels[i],
            )
            for i in range(2)
        ]
        es += [
            tb(2 + i, op("recv", dst=("output", out.index(coll.input_layout[1 - r][i]))), recv=1 - r, chan=channels[i])
            for i in range(2)
        ]
        execs.append(es)
    return program(coll, execs, {"input": 2, "output": 4})


def test_executors_on_one_rank_may_send_to_the_same_peer_on_different_channels():
    assert check(two_channel_allgather()) == []


# -- 2. faults are rejected with a message naming them ----------------------------
def test_dropped_send_deadlocks_and_names_the_waiting_executor():
    prog = ring_allgather(edit=lambda r, s: [x for x in s if not (r == 0 and x.op == "send")])
    # rank 1's receives now take rank 0's forwarded chunks, so its last receive waits forever
    one_problem(
        prog, "deadlock", "never sent", "rank 1 executor 0 step 4 (recv) waits for a message from rank 0 on channel 0"
    )


def test_send_never_received_is_reported_with_its_sender():
    prog = ring_allgather(edit=lambda r, s: [*s, op("send", ("input", 0))] if r == 0 else s)
    one_problem(
        prog,
        "rank 0 sends 1 message(s) to rank 1 on channel 0 that are never received",
        f"rank 0 executor 0 step {P + 1} (send)",
    )


def test_duplicated_reduction_counts_a_contribution_twice():
    local = [
        op("copy", ("input", 0), ("output", 0)),
        op("reduce", ("scratch", 0), ("output", 0)),
        op("reduce", ("scratch", 0), ("output", 0)),
    ]
    one_problem(pair_allreduce(local), "rank 0 executor 0 step 4 (reduce)", "chunk 0", "rank(s) [1] twice")


def test_reading_an_uninitialised_slot_is_reported():
    prog = ring_allgather(edit=lambda r, s: s[1:] if r == 2 else s)  # rank 2 sends output[2] before copying
    one_problem(prog, "rank 2 executor 0 step 0 (send): reads rank 2 output[2], which holds no data")


def test_wrong_final_chunk_is_reported():
    def swap(r, steps):  # rank 3 stores the chunk it keeps at the wrong index
        return [*steps[:-1], op("recv", dst=("output", 3))] if r == 3 else steps

    problems = check(ring_allgather(edit=swap))
    assert "rank 3 output[3]: holds chunk 0 instead of chunk 3" in problems


def test_missing_contribution_is_reported():
    local = [op("copy", ("input", 0), ("output", 0))]  # never reduces the peer's chunk in
    problems = check(pair_allreduce(local))
    assert "rank 0 output[0]: chunk 0 lacks the contributions of rank(s) [1]" in problems
    assert "rank 1 output[0]: chunk 0 lacks the contributions of rank(s) [0]" in problems


def with_executors(prog, rank, *extra, **buffers):
    """``prog`` with ``extra`` executors (and ``buffers``) added on ``rank``."""
    ranks = list(prog.ranks)
    ranks[rank] = RankProgram(rank, {**ranks[rank].buffers, **buffers}, (*ranks[rank].executors, *extra))
    return Program(prog.name, prog.collective, tuple(ranks))


def test_unordered_writes_to_one_slot_are_a_race():
    prog = with_executors(ring_allgather(), 0, tb(1, op("copy", ("input", 0), ("output", 0))))
    one_problem(
        prog,
        "rank 0 executor 1 step 0 (copy): writes rank 0 output[0]",
        "racing with the write by rank 0 executor 0 step 0 (copy)",
    )


def test_copy_after_receive_without_dependency_is_a_race():
    one_problem(staged_allgather(deps=()), "rank 0 executor 1 step 0 (copy)", "racing", "scratch[0]")


def test_remote_access_without_signal_is_a_race():
    one_problem(
        nvgroup_allreduce(sync=False),
        "rank 1 executor 0 step 0 (copy): overwrites rank 1 scratch[0] "
        "racing with the read by rank 0 executor 0 step 1 (load_reduce)",
    )


def relayed_allgather(relay=True, via_dependency=False):
    """2-rank Allgather whose rank 0 stages its chunk in scratch on executor 0
    while executor 1 copies it from there into the output. Nothing on rank 0
    orders the two: executor 0 signals rank 1, rank 1 sends its own chunk only
    after that signal, and executor 1 copies only after receiving it, so the
    write happens before the read through rank 1 (with ``via_dependency``,
    through a dependency between two of rank 1's executors). With
    ``relay=False`` rank 1 sends without waiting and the copy races."""
    stage = tb(0, op("copy", ("input", 0), ("scratch", 0)), op("signal"), op("send", ("scratch", 0)), send=1)
    finish = tb(1, op("recv", dst=("output", 1)), op("copy", ("scratch", 0), ("output", 0)), recv=1)
    keep = op("copy", ("input", 0), ("output", 1))
    if via_dependency:
        rank1 = [
            tb(0, op("wait"), op("recv", dst=("output", 0)), recv=0),
            tb(1, op("send", ("input", 0), deps=[(0, 0)] if relay else []), keep, send=0),
        ]
    else:
        handshake = [op("wait"), op("send", ("input", 0))]
        rank1 = [tb(0, *(handshake if relay else handshake[::-1]), op("recv", dst=("output", 0)), keep, send=0, recv=0)]
    buffers = [{"input": 1, "output": 2, "scratch": 1}, {"input": 1, "output": 2}]
    return program(make_collective("allgather", 2), [[stage, finish], rank1], buffers)


@pytest.mark.parametrize("via_dependency", [False, True])
def test_accesses_ordered_only_through_another_rank_do_not_race(via_dependency):
    """Happens-before is transitive across ranks (Lamport 1978): rank 0's
    write -> signal to rank 1 -> rank 1's send -> rank 0's receive -> read."""
    assert check(relayed_allgather(via_dependency=via_dependency)) == []


@pytest.mark.parametrize("via_dependency", [False, True])
def test_accesses_on_one_rank_with_no_ordering_path_race(via_dependency):
    """The same exchange when rank 1 does not wait for the signal: the copy on
    rank 0 is unordered with the staging write, although it runs after it."""
    one_problem(
        relayed_allgather(relay=False, via_dependency=via_dependency),
        "rank 0 executor 1 step 1 (copy): reads rank 0 scratch[0] "
        "racing with the write by rank 0 executor 0 step 0 (copy)",
    )


def happens_before_graph(prog):
    """The event graph of ``prog`` built independently of the verifier: program
    order, dependencies, and the k-th send on a connection before its k-th receive."""
    graph = nx.DiGraph()
    sends, receives = defaultdict(list), defaultdict(list)
    for rp in prog.ranks:
        for e in rp.executors:
            for s, ins in enumerate(e.instructions):
                node = (rp.rank, e.id, s)
                graph.add_node(node)
                if s:
                    graph.add_edge((rp.rank, e.id, s - 1), node)
                for d in ins.deps:
                    graph.add_edge((rp.rank, *d), node)
                if ins.op in SENDS:
                    sends[(rp.rank, e.send_peer, e.channel)].append(node)
                if ins.op in RECEIVES:
                    receives[(e.recv_peer, rp.rank, e.channel)].append(node)
    for connection, senders in sends.items():
        graph.add_edges_from(zip(senders, receives[connection], strict=False))
    return graph


RACE = re.compile(
    r"^rank (\d+) executor (\d+) step (\d+) \(\w+\): .* racing with the \w+ by rank (\d+) executor (\d+) step (\d+)"
)


def test_every_reported_race_is_a_pair_unordered_in_the_event_graph():
    """Drop the dependencies of each instruction of a compiled two-step
    Alltoall in turn: every race reported must join two steps that no path of
    the event graph orders, and dropping some dependency must cause one."""
    base = alltoall_two_step(2, 3)
    races = 0
    for r, rp in enumerate(base.ranks):
        for i, e in enumerate(rp.executors):
            for s, ins in enumerate(e.instructions):
                if not ins.deps:
                    continue
                steps = list(e.instructions)
                steps[s] = replace(ins, deps=())
                executors = list(rp.executors)
                executors[i] = replace(e, instructions=tuple(steps))
                ranks = list(base.ranks)
                ranks[r] = replace(rp, executors=tuple(executors))
                prog = replace(base, ranks=tuple(ranks))
                graph = happens_before_graph(prog)
                for problem in check(prog):
                    if m := RACE.match(problem):
                        later, earlier = tuple(map(int, m.groups()[:3])), tuple(map(int, m.groups()[3:]))
                        assert not nx.has_path(graph, earlier, later), problem
                        races += 1
    assert races


def test_dependency_cycle_is_a_deadlock():
    prog = with_executors(
        ring_allgather(),
        0,
        tb(1, op("copy", ("input", 0), ("scratch", 0), deps=[(2, 0)])),
        tb(2, op("nop", deps=[(1, 0)])),
        scratch=1,
    )
    one_problem(
        prog,
        "deadlock",
        "cycle",
        "rank 0 executor 1 step 0 (copy) waits for rank 0 executor 2 step 0 (nop)",
        "rank 0 executor 2 step 0 (nop) waits for rank 0 executor 1 step 0 (copy)",
    )


def test_two_executors_sending_to_one_peer_on_one_channel_are_rejected():
    one_problem(two_channel_allgather(channels=(0, 0)), "rank 0: executors 0 and 1 both send to rank 1 on channel 0")


def test_send_and_receive_counts_must_agree():
    def widen(r, steps):  # rank 0 sends two chunks where rank 1 receives one
        return [steps[0], op("send", ("output", 0), n=2), *steps[2:]] if r == 0 else steps

    one_problem(
        ring_allgather(edit=widen),
        "rank 1 executor 0 step 2 (rcs): receives 2 chunk(s) from "
        "rank 0 executor 0 step 1 (send) but expects 1 chunk(s)",
    )


def test_receiving_a_signal_where_data_is_expected_is_reported():
    def signal(r, steps):
        return [steps[0], op("signal"), *steps[2:]] if r == 0 else steps

    one_problem(ring_allgather(edit=signal), "rank 1 executor 0 step 2 (rcs): receives a signal", "expects 1 chunk(s)")


def test_reduce_in_a_non_combining_collective_is_rejected():
    def fuse(r, steps):  # rank 1 reduces the received chunk into its own
        return [*steps[:2], op("rrcs", ("output", 1), ("output", 1)), *steps[3:]] if r == 1 else steps

    one_problem(
        ring_allgather(edit=fuse), "rank 1 executor 0 step 2 (rrcs): reduces in a allgather, which combines nothing"
    )


def test_verify_raises_with_every_problem():
    with pytest.raises(VerificationError) as info:
        verify(pair_allreduce([op("copy", ("input", 0), ("output", 0))]))
    assert len(info.value.problems) == 2 and "lacks the contributions" in str(info.value)


# -- 3. structural errors at construction -------------------------------------------
@pytest.mark.parametrize(
    ("executor", "message"),
    [
        (tb(0, op("scatter", ("input", 0))), "step 0 (scatter): unknown op"),
        (tb(0, op("send", ("input", 0))), "step 0 (send): sends but the executor has no send peer"),
        (tb(0, op("recv", dst=("input", 0)), send=1), "receives but the executor has no receive peer"),
        (tb(0, op("copy", ("input", 0), ("output", 2))), "output[2] is outside rank 0's 2-chunk output"),
        (tb(0, op("send", ("input", 0), n=2), send=1), "input[0:2] is outside rank 0's 1-chunk input"),
        (tb(0, op("put", ("input", 0), ("output", 0, 5))), "reference to rank 5 out of range"),
        (tb(0, op("copy", ("input", 0), ("scratch", 0))), "rank 0 has no buffer 'scratch'"),
        (tb(0, op("nop", deps=[(0, 3)])), "depends on executor 0 step 3, which does not exist"),
        (tb(0, op("nop", deps=[(7, 0)])), "depends on executor 7 step 0, which does not exist"),
        (tb(0, op("nop", deps=[(0, 0)])), "depends on its own later step 0"),
        (tb(0, op("load_reduce", dst=("output", 0))), "load_reduce needs sources"),
        (tb(0, op("copy", ("input", 0), ("output", 0)), send=0), "send_peer 0 is not another rank"),
        (tb(0, op("copy", ("input", 0), ("output", 0)), kind="cpu"), "kind 'cpu' is not one of"),
    ],
)
def test_malformed_program_is_rejected_at_construction(executor, message):
    coll = make_collective("allgather", 2)
    with pytest.raises(AlgorithmError, match=r"^test: rank 0 executor 0\b.*" + re.escape(message)):
        program(coll, [[executor], []], {"input": 1, "output": 2})


@pytest.mark.parametrize(("field", "value"), [("protocol", "LL64"), ("instances", 0)])
def test_bad_program_options_are_rejected(field, value):
    with pytest.raises(AlgorithmError, match=field):
        program(make_collective("allgather", 2), [[], []], {"input": 1, "output": 2}, **{field: value})


# -- 4. JSON ----------------------------------------------------------------------------
def test_json_round_trip_keeps_every_field():
    coll = make_collective("allreduce", 2, 2, inplace=True)
    execs = [
        [
            tb(
                0,
                op("copy", ("input", 0), ("scratch", 0), n=2),
                op("signal"),
                op("wait"),
                op("load_reduce", dst=("input", r), sources=[("scratch", r), ("scratch", r, 1 - r)]),
                send=1 - r,
                recv=1 - r,
                chan=1,
            ),
            tb(
                1,
                op("put", ("input", r), ("input", r, 1 - r), deps=[(0, 3)]),
                op("get", ("scratch", 0, 1 - r), ("scratch", 0)),
                op("nop", deps=[(0, 0), (1, 0)]),
                kind="host",
            ),
        ]
        for r in range(2)
    ]
    prog = program(
        coll,
        execs,
        {"input": 2, "scratch": 2},
        name="everything",
        protocol="LL128",
        instances=2,
        tile_bytes=65536,
        topology="ring:2",
        metadata={"generator": "hand", "params": {"k": [1, 2]}},
    )
    again = Program.from_json(prog.to_json())
    assert again == prog
    assert again.ranks[1].executors[0].instructions[3].sources[1] == Ref("scratch", 1, 0)
    assert Program.from_json(prog.to_json(indent=None)) == prog


def test_json_that_is_not_a_program_is_rejected():
    with pytest.raises(AlgorithmError, match="not a simcoll Program"):
        Program.from_json('{"format": "simcoll.algorithm"}')


# -- 5. topology --------------------------------------------------------------------
def test_rings_on_a_ring_topology_have_routes():
    assert check(ring_allgather(), "ring:4") == []
    assert check(ring_allreduce_inplace(), "ring:4") == []


def test_ring_on_a_line_has_no_route_between_the_ends():
    """On line:4 GPUs do not relay, so the ring's 3 -> 0 connection has no route."""
    problems = check(ring_allgather(), "line:4")
    assert any(
        "rank 0 executor 0 receives from rank 3" in p and "no route from rank 3 to rank 0" in p for p in problems
    )
    assert any("rank 3 executor 0 sends to rank 0" in p and "no route from rank 3 to rank 0" in p for p in problems)


def test_program_for_another_rank_count_is_rejected():
    assert check(ring_allgather(), "ring:8") == ["test is for 4 ranks but ring:8 has 8"]


def one_way_ring(p=P):
    links = [{"ends": [f"gpu{i}", f"gpu{(i + 1) % p}"], "type": "nvlink", "directed": True} for i in range(p)]
    return topology_from_dict({"name": f"one-way-ring:{p}", "gpus": p, "links": links})


def test_ring_along_one_way_links_has_routes():
    assert check(ring_allgather(), load_machine(one_way_ring())) == []
    assert check(ring_allgather(d=-1)) == []


def test_ring_against_one_way_links_has_no_route():
    """Rank r sending to r-1 on a ring whose links only go r -> r+1 has no route."""
    problems = check(ring_allgather(d=-1), load_machine(one_way_ring()))
    assert any("rank 1 executor 0 sends to rank 0" in p and "no route from rank 1 to rank 0" in p for p in problems)


def put_allgather():
    """4-rank Allgather by one-sided writes: rank r copies its chunk into its
    output and puts it into every other rank's output[r]."""
    execs = [
        [
            tb(
                0,
                op("copy", ("input", 0), ("output", r)),
                *[op("put", ("input", 0), ("output", r, q)) for q in range(P) if q != r],
            )
        ]
        for r in range(P)
    ]
    return program(make_collective("allgather", P), execs, {"input": 1, "output": P})


def test_puts_between_directly_linked_ranks_are_accepted():
    assert check(put_allgather()) == []
    assert check(put_allgather(), "fully-connected:4") == []


def test_put_to_a_rank_without_route_is_reported():
    """On line:4 rank 0 cannot write into rank 3's memory: no route joins them."""
    problems = check(put_allgather(), "line:4")
    assert any("no route" in p and "rank 3" in p for p in problems), problems


def test_a_check_stops_at_its_wall_clock_limit_on_every_path():
    """check(time_limit_s=...): the array replay, the symbolic replay (a timed
    schedule) and a Program's execution each stop at the limit, naming where."""
    from simcoll import generate
    from simcoll.compiler import lower_algorithm
    from simcoll.errors import TimeLimitError

    machine = load_machine("ring:8")
    steps = generate("ring", machine, "allgather")
    timed = steps.with_changes(
        transfers=tuple(replace(t, step=None, start_s=float(t.step), end_s=t.step + 1.0) for t in steps.transfers),
        rounds_per_step=(),
    )
    assert check(steps, machine, time_limit_s=60) == check(timed, machine, time_limit_s=60) == []
    for schedule, where in (
        (steps, "at step 0"),
        (timed, "replaying t="),
        (lower_algorithm(steps), "running executor"),
    ):
        with pytest.raises(TimeLimitError, match=f"wall-clock limit of 1e-09 s reached {where}"):
            check(schedule, machine, time_limit_s=1e-9)
    with pytest.raises(SimcollError, match="time_limit_s must be a positive number"):
        check(steps, machine, time_limit_s=0)

"""Many calls on one network (simcoll.simulator.concurrent, rules C1-C6).

A call that shares nothing takes exactly what `simulate` gives it alone;
two flows on one link share it as max-min fairness says (closed forms);
a member that arrives late holds its call back; both engines agree.
"""

from __future__ import annotations

import pytest

from simcoll import load_machine
from simcoll.algorithms import generate
from simcoll.errors import AlgorithmError, SimulationError
from simcoll.nccl.baseline import nccl_algorithm
from simcoll.simulator import simulate
from simcoll.simulator.concurrent import ConcurrentCall, SharedRun, simulate_concurrent

ALPHA_S = 0.7e-6  # ring:N's generic model: NVLink α
BANDWIDTH_Bps = 25e9  # and its rate


@pytest.mark.parametrize(
    "spec,collective,size",
    [
        ("ring:4", "allreduce", 1 << 10),
        ("ring:4", "allgather", 1 << 28),
        ("dgx1", "allreduce", 1 << 20),
        ("dgx-h100", "allreduce", 1 << 28),  # NVLS: a pipelined schedule (C5)
        ("dgx-h100", "allgather", 1 << 20),
        ("dgx-h100*2", "allreduce", 1 << 20),  # NCCL's tree: pipelined too
        ("dgx-h100*2", "allreduce", 1 << 28),
    ],
)
def test_a_call_alone_takes_what_simulate_gives(spec, collective, size):
    machine = load_machine(spec)
    algorithm = nccl_algorithm(machine, collective, size)
    engines = ["fast", "reference"] if machine.num_ranks <= 8 else ["fast"]
    for engine in engines:
        alone = simulate(algorithm, machine, size, verify=False, engine=engine).time_s
        (timing,) = simulate_concurrent([ConcurrentCall(algorithm, size)], machine, engine=engine)
        assert timing.time_s == pytest.approx(alone, rel=1e-9), engine


def test_calls_that_share_nothing_keep_their_solo_times():
    # one ring per node of two: no resource in common, so each takes its time alone
    cluster, node = load_machine("dgx-h100*2"), load_machine("dgx-h100")
    size = 1 << 20
    ring = nccl_algorithm(node, "allreduce", size)
    alone = simulate(ring, node, size, verify=False).time_s
    both = simulate_concurrent(
        [ConcurrentCall(ring, size, tuple(range(8))), ConcurrentCall(ring, size, tuple(range(8, 16)))], cluster
    )
    assert [t.time_s for t in both] == pytest.approx([alone, alone], rel=1e-12)


def _sends(run: SharedRun, pairs, size):
    return [run.send(src, dst, size, protocol=None) for src, dst in pairs]


def test_two_flows_on_one_link_share_it_equally():
    size = 25e6
    run = SharedRun(load_machine("ring:4"))
    a, b = _sends(run, [(0, 1), (0, 1)], size)
    a.arrive_all()
    b.arrive_all()
    run.run()
    # each gets half the link: 2 x 25 MB / 25 GB/s on the wire, then α
    assert a.end_s == pytest.approx(2 * size / BANDWIDTH_Bps + ALPHA_S, rel=1e-12)
    assert b.end_s == pytest.approx(a.end_s, rel=1e-12)


def test_a_flow_that_joins_later_gets_half_from_then_on():
    size, join_s = 25e6, 0.5e-3
    run = SharedRun(load_machine("ring:4"))
    first, second = _sends(run, [(0, 1), (0, 1)], size)
    first.arrive_all()
    run.env.timeout(join_s).callbacks.append(lambda _e: second.arrive_all())
    run.run()
    # the first sends 12.5 MB alone in 0.5 ms, the rest at half rate (1 ms); the second then has 12.5 MB left alone
    alone_s = size / BANDWIDTH_Bps
    assert first.end_s == pytest.approx(join_s + (size - join_s * BANDWIDTH_Bps) * 2 / BANDWIDTH_Bps + ALPHA_S)
    assert second.end_s == pytest.approx(2 * alone_s + ALPHA_S, rel=1e-12)


def test_flows_on_different_links_do_not_share():
    size = 25e6
    run = SharedRun(load_machine("ring:4"))
    calls = _sends(run, [(0, 1), (2, 3)], size)
    for call in calls:
        call.arrive_all()
    run.run()
    assert [c.end_s for c in calls] == pytest.approx([size / BANDWIDTH_Bps + ALPHA_S] * 2, rel=1e-12)


def test_a_late_member_holds_the_call_back():
    size, late_s = 25e6, 1e-3
    run = SharedRun(load_machine("ring:4"))
    (send,) = _sends(run, [(0, 1)], size)
    send.arrive(0)
    run.env.timeout(late_s).callbacks.append(lambda _e: send.arrive(1))  # the receiver posts late (C2)
    run.run()
    assert send.end_s == pytest.approx(late_s + size / BANDWIDTH_Bps + ALPHA_S, rel=1e-12)


def test_both_engines_agree_on_overlapping_calls():
    machine = load_machine("dgx1")
    ring = generate("ring", machine, "allreduce")
    tree = nccl_algorithm(machine, "allgather", 4 << 20)
    calls = [ConcurrentCall(ring, 8 << 20), ConcurrentCall(tree, 4 << 20, start_s=20e-6)]
    fast = simulate_concurrent(calls, machine, engine="fast")
    reference = simulate_concurrent(calls, machine, engine="reference")
    assert [t.end_s for t in fast] == pytest.approx([t.end_s for t in reference], rel=1e-9)
    alone = [simulate_concurrent([c], machine)[0].time_s for c in calls]
    assert all(t.time_s > a for t, a in zip(fast, alone, strict=True))  # they share NVLinks: both slower


def test_a_call_on_another_group_size_is_refused():
    machine = load_machine("ring:4")
    ring = generate("ring", machine, "allreduce")
    with pytest.raises(AlgorithmError, match="is for 4 ranks but the group has 2"):
        SharedRun(machine).start(ring, 1e6, (0, 1))
    with pytest.raises(AlgorithmError, match="rank 7 is not on ring:4"):
        SharedRun(machine).start(ring, 1e6, (0, 1, 2, 7))
    with pytest.raises(SimulationError, match="start_s must be a time"):
        simulate_concurrent([ConcurrentCall(ring, 1e6, start_s=-1.0)], machine)

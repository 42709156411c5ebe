"""Algorithm mode (issue 7 item 3) and the results (item 5).

The exactness anchor (DESIGN.md): with no sharing and no contention parameters
the simulator reproduces the analytic α-β critical path
(:func:`simcoll.analytic.critical_path_time_s`) to a relative error below 1e-9, for
every classical algorithm and collective on ring, fully-connected and DGX-1
machines.
"""

import json
import math
import time

import pandas as pd
import pytest

from simcoll import load_machine
from simcoll.algorithm import Algorithm, Transfer
from simcoll.algorithms import applicable, generate
from simcoll.analytic import critical_path_time_s
from simcoll.collectives import COLLECTIVES, make_collective
from simcoll.errors import AlgorithmError, SimcollError, SimulationError, SizeError, TimeLimitError, VerificationError
from simcoll.simulator import simulate
from simcoll.simulator.fast import algorithm_mode

SIZE = 1 << 20
TOPOLOGIES = ["ring:8", "fully-connected:8", "dgx1"]


def _cases():
    cases = []
    for topo in TOPOLOGIES:
        machine = load_machine(topo)
        for coll in COLLECTIVES:
            for name, algorithm in applicable(machine, coll).items():
                if not isinstance(algorithm, str):
                    cases.append(pytest.param(topo, coll, name, id=f"{topo}-{coll}-{name}"))
    return cases


CASES = _cases()


def test_every_topology_has_cases():
    assert {c.values[0] for c in CASES} == set(TOPOLOGIES)
    assert len(CASES) > 60


@pytest.mark.parametrize("topo, coll, name", CASES)
def test_uncontended_simulation_equals_the_critical_path(topo, coll, name):
    machine = load_machine(topo)
    algorithm = applicable(machine, coll)[name]
    analytic = critical_path_time_s(algorithm, machine, SIZE)
    ideal = simulate(algorithm, machine, SIZE, contention=False)
    assert ideal.time_s == pytest.approx(analytic, rel=1e-9)
    assert ideal.transfers == len(_messages(algorithm))
    shared = simulate(algorithm, machine, SIZE, contention=True)
    if shared.stats["max_sharing"] == 1:
        # one transfer per resource at a time: sharing changes nothing
        assert shared.time_s == pytest.approx(analytic, rel=1e-9)
    else:
        # sharing can only slow transfers down
        assert shared.time_s >= analytic * (1 - 1e-9)


def _messages(algorithm):
    groups = {(t.step, t.start_s, t.group, t.src, t.dst, t.op) for t in algorithm.transfers if t.group is not None}
    return [t for t in algorithm.transfers if t.group is None] + list(groups)


def test_ring_allreduce_closed_form():
    # NV-Group eq. (3): 2(P-1)(α + M/(P·B)) + (P-1)·T_R(M/P) on a uniform ring
    machine = load_machine("ring:8")
    p, size = 8, 64 << 20
    link = machine.model.link("nvlink")
    expected = 2 * (p - 1) * (link.alpha_s + size / p / link.bandwidth_Bps) + (p - 1) * machine.model.reduce_time_s(
        size / p
    )
    result = simulate(generate("ring", machine, "allreduce"), machine, size)
    assert result.time_s == pytest.approx(expected, rel=1e-9)
    assert result.algbw_GBps == pytest.approx(size / expected / 1e9)
    assert result.busbw_GBps == pytest.approx(result.algbw_GBps * 2 * (p - 1) / p)


def _timed_algorithm():
    coll = make_collective("allgather", 2)
    # a TACCL-style timed schedule whose two chunks form one contiguity group
    transfers = [
        Transfer(0, 0, 1, start_s=0.0, end_s=1e-6, group=7),
        Transfer(1, 1, 0, start_s=0.0, end_s=1e-6),
    ]
    return Algorithm("timed", coll, transfers)


def test_contiguity_group_is_one_message():
    machine = load_machine("fully-connected:2")
    algorithm = _timed_algorithm()
    result = simulate(algorithm, machine, SIZE)
    assert result.time_s == pytest.approx(critical_path_time_s(algorithm, machine, SIZE), rel=1e-12)
    assert result.transfers == 2


def test_sharing_slows_direct_alltoall_on_a_switch():
    # dgx2: 15 flows leave each GPU at once through its 6 NVSwitch links
    machine = load_machine("dgx2")
    algorithm = generate("direct", machine, "alltoall")
    size = 64 << 20
    ideal = simulate(algorithm, machine, size, contention=False)
    shared = simulate(algorithm, machine, size)
    assert ideal.time_s == pytest.approx(critical_path_time_s(algorithm, machine, size), rel=1e-9)
    assert shared.stats["max_sharing"] > 1
    # every GPU must push (P-1)/P of its buffer through its 150 GB/s egress
    bound = 15 / 16 * size / 150e9
    assert shared.time_s > ideal.time_s
    assert shared.time_s >= bound


def test_reading_a_chunk_before_it_exists_is_an_error():
    coll = make_collective("broadcast", 3, root=0)
    bad = Algorithm("bad", coll, [Transfer(0, 1, 2, step=0)])
    with pytest.raises(AlgorithmError, match="before rank 1 holds the chunk"):
        simulate(bad, load_machine("fully-connected:3"), SIZE, verify=False)


def test_an_incorrect_schedule_is_refused_not_timed():
    """A schedule that does not implement its collective has no meaningful
    time: ``simulate`` verifies first (``verify=False`` times it anyway)."""
    machine = load_machine("ring:4")
    ring = generate("ring", machine, "allgather")
    truncated = ring.with_changes(transfers=ring.transfers[:-1])
    with pytest.raises(VerificationError, match="truncated|lacks|missing|never"):
        simulate(truncated.with_changes(name="truncated"), machine, SIZE)
    assert simulate(truncated, machine, SIZE, verify=False).time_s > 0


def test_size_must_be_positive():
    machine = load_machine("ring:4")
    with pytest.raises(SizeError, match="positive"):
        simulate(generate("ring", machine, "allgather"), machine, 0)
    # a chunk cannot be smaller than a byte: 4 ranks' Allgather has 4 chunks
    with pytest.raises(SizeError, match="smaller than its 4 chunks"):
        simulate(generate("ring", machine, "allgather"), machine, 3)
    assert simulate(generate("ring", machine, "allgather"), "ring:4", 4).time_s > 0


def test_wall_clock_limit_is_enforced():
    machine = load_machine("ring:64")
    algorithm = generate("ring", machine, "allreduce")
    with pytest.raises(SimulationError, match="wall-clock limit"):
        simulate(algorithm, machine, SIZE, time_limit_s=1e-9)


def test_wall_clock_limit_counts_the_routes_worked_out_first(monkeypatch):
    """Working out the routes of every rank pair comes before the first event
    and took minutes for a million pairs (direct Allreduce on 1,024 GPUs): the
    limit covers it, checked every 1,024 pairs (dgx-h100*5: 1,560 pairs, all
    run: no node rotation looked for)."""
    monkeypatch.setattr(algorithm_mode._Run, "_rotation", lambda *a: None)
    machine = load_machine("dgx-h100*5")
    algorithm = generate("direct", machine, "allreduce")
    with pytest.raises(SimulationError, match="wall-clock limit of 1e-09 s reached working out routes"):
        simulate(algorithm, machine, SIZE, time_limit_s=1e-9, verify=False)
    monkeypatch.undo()
    with pytest.raises(SimulationError, match="wall-clock limit of 1e-09 s reached looking for node symmetry"):
        simulate(algorithm, machine, SIZE, time_limit_s=1e-9, verify=False)


def test_wrong_machine_and_mode_are_errors():
    algorithm = generate("ring", load_machine("ring:4"), "allgather")
    with pytest.raises(SimcollError, match="4 ranks"):
        simulate(algorithm, load_machine("ring:8"), SIZE)
    with pytest.raises(SimcollError, match="unknown simulation mode"):
        simulate(algorithm, load_machine("ring:4"), SIZE, mode="magic")


def test_same_inputs_give_bit_identical_results():
    machine = load_machine("dgx2")
    algorithm = generate("direct", machine, "alltoall")
    a, b = simulate(algorithm, machine, 1 << 22), simulate(algorithm, machine, 1 << 22)
    assert a.time_s == b.time_s
    pd.testing.assert_frame_equal(a.timeline, b.timeline, check_exact=True)
    pd.testing.assert_frame_equal(a.utilisation, b.utilisation, check_exact=True)


def test_timeline_utilisation_and_trace(tmp_path):
    machine = load_machine("ring:4")
    result = simulate(generate("ring", machine, "allreduce"), machine, 4 << 20)
    tl = result.timeline
    sends = tl[tl.kind.isin(["copy", "reduce"])]
    assert len(sends) == result.transfers == 2 * 3 * 4
    assert (tl.end_s >= tl.start_s).all()
    assert tl.end_s.max() == pytest.approx(result.time_s)
    # a ring link carries one chunk at a time: never more than its capacity
    util = result.utilisation
    assert (util.rate_Bps <= util.capacity_Bps * (1 + 1e-12)).all()
    busy = (util.end_s - util.start_s) * util.rate_Bps
    assert busy.sum() == pytest.approx(sends.bytes.sum(), rel=1e-9)
    trace = result.to_chrome_trace()
    xs = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(xs) == len(tl) + len(util)
    assert max(e["ts"] + e["dur"] for e in xs) == pytest.approx(result.time_s * 1e6)
    names = {e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {"0->1", "nvlink gpu0->gpu1"} <= names
    path = result.save_chrome_trace(tmp_path / "t.json")
    assert json.loads(path.read_text())["traceEvents"]
    summary = result.to_dict()
    assert summary["mode"] == "algorithm" and summary["transfers"] == result.transfers
    assert math.isclose(summary["busbw_GBps"], result.busbw_GBps)


# -- private pairs (issue 7 "Speed"): a shortcut that must change nothing ----------------------
def _canonical(frame: pd.DataFrame) -> pd.DataFrame:
    frame = frame.copy()
    for column in frame.columns:
        if isinstance(frame[column].dtype, pd.CategoricalDtype):
            frame[column] = frame[column].astype(str)
    return frame.sort_values(list(frame.columns)).reset_index(drop=True)


_PRIVATE_PAIRS = algorithm_mode._private_pairs


def _no_private_pairs(routes, contention, record_utilisation):
    rates, _ = _PRIVATE_PAIRS(routes, contention, record_utilisation)
    return rates, bytearray(len(routes))


PRIVATE_CASES = [
    ("ring:8", "allreduce", "ring", True),  # every pair private, with reductions
    ("dgx2*2", "allgather", "bidirectional-ring", True),  # private NVSwitch pairs beside shared IB pairs
    ("dgx2*2", "allgather", "bidirectional-ring", False),
    ("dgx1", "allreduce", "multi-ring", True),
]


@pytest.mark.parametrize("topo, coll, name, contention", PRIVATE_CASES)
def test_private_pairs_give_exactly_what_the_network_gives(monkeypatch, topo, coll, name, contention):
    # A rank pair whose resources no other pair uses sends its FIFO messages alone,
    # so computing them directly must equal sending them through the fluid network,
    # bit for bit: time, timeline rows and utilisation intervals.
    machine = load_machine(topo)
    algorithm = applicable(machine, coll)[name]
    fast = simulate(algorithm, machine, SIZE, contention=contention)
    assert fast.stats["private_messages"] > 0
    again = simulate(algorithm, machine, SIZE, contention=contention)
    pd.testing.assert_frame_equal(fast.timeline, again.timeline, check_exact=True)  # deterministic, row order too
    pd.testing.assert_frame_equal(fast.utilisation, again.utilisation, check_exact=True)
    monkeypatch.setattr(algorithm_mode, "_private_pairs", _no_private_pairs)
    slow = simulate(algorithm, machine, SIZE, contention=contention)
    assert slow.stats["private_messages"] == 0
    assert fast.time_s == slow.time_s
    assert fast.transfers == slow.transfers and fast.stats["max_sharing"] == slow.stats["max_sharing"]
    pd.testing.assert_frame_equal(_canonical(fast.timeline), _canonical(slow.timeline), check_exact=True)
    pd.testing.assert_frame_equal(_canonical(fast.utilisation), _canonical(slow.utilisation), check_exact=True)
    assert fast.utilisation.end_s.is_monotonic_increasing


@pytest.mark.parametrize(
    "topo, coll, name, contention, utilisation",
    [
        ("ring:8", "allreduce", "ring", True, True),  # reductions, utilisation intervals
        ("ring:64", "allgather", "ring", True, False),
        ("dgx-h100*4", "allreduce", "ring", True, False),  # simulated over one block of nodes
        ("dgx2", "alltoall", "direct", False, False),  # no contention: every pair private
        ("fully-connected:16", "allreduce", "recursive-doubling", True, True),
    ],
)
def test_landing_private_messages_a_batch_at_a_time_changes_nothing(
    monkeypatch, topo, coll, name, contention, utilisation
):
    # Large all-private schedules land and start their messages with NumPy, a
    # batch per completion time; it must give what one message at a time gives,
    # bit for bit: time, timeline rows (in order), utilisation and events.
    machine = load_machine(topo)
    algorithm = applicable(machine, coll)[name]
    monkeypatch.setattr(algorithm_mode, "IN_SCHEDULE_ORDER", False)  # the events, not the schedule-order timing

    def run():
        return simulate(algorithm, machine, SIZE, contention=contention, record_utilisation=utilisation)

    one_by_one = run()
    monkeypatch.setattr(algorithm_mode, "BATCH_MIN_MESSAGES", 0)
    batched = run()
    assert batched.stats["batched_landings"] and not one_by_one.stats["batched_landings"]
    assert batched.stats["private_messages"] == batched.transfers > 0
    assert batched.time_s == one_by_one.time_s and batched.stats["events"] == one_by_one.stats["events"]
    pd.testing.assert_frame_equal(batched.timeline, one_by_one.timeline, check_exact=True)
    pd.testing.assert_frame_equal(_canonical(batched.utilisation), _canonical(one_by_one.utilisation), check_exact=True)


@pytest.mark.parametrize(
    "topo, coll, name, contention, utilisation",
    [
        ("ring:8", "allreduce", "ring", True, True),  # reductions, utilisation intervals
        ("ring:64", "allgather", "ring", True, False),
        ("dgx-h100*4", "allreduce", "ring", True, False),  # over one block of nodes
        ("dgx2", "alltoall", "direct", False, False),  # every pair private, several messages a pair a step
        ("fully-connected:16", "allreduce", "recursive-doubling", True, True),
        ("ring:16", "allreduce", "chain", True, False),  # a pipeline: messages land one at a time
        ("ring:16", "reducescatter", "ring", True, True),
    ],
)
def test_timing_private_messages_in_schedule_order_gives_what_the_events_give(
    monkeypatch, topo, coll, name, contention, utilisation
):
    # An all-private schedule is timed batch by batch without events: each message starts when its
    # pair's previous one left the wire and its reads were released; it must give what the events
    # give, bit for bit: time, timeline rows (in order) and utilisation.
    machine = load_machine(topo)
    algorithm = applicable(machine, coll)[name]
    monkeypatch.setattr(algorithm_mode, "BATCH_MIN_MESSAGES", 0)

    def run():
        return simulate(algorithm, machine, SIZE, contention=contention, record_utilisation=utilisation)

    monkeypatch.setattr(algorithm_mode, "IN_SCHEDULE_ORDER", False)
    events = run()
    monkeypatch.setattr(algorithm_mode, "IN_SCHEDULE_ORDER", True)
    ordered = run()
    assert ordered.stats["in_schedule_order"] and not events.stats["in_schedule_order"]
    assert ordered.stats["events"] == 0 < events.stats["events"]
    assert ordered.stats["private_messages"] == ordered.transfers == events.transfers > 0
    assert ordered.time_s == events.time_s
    pd.testing.assert_frame_equal(ordered.timeline, events.timeline, check_exact=True)
    pd.testing.assert_frame_equal(ordered.utilisation, events.utilisation, check_exact=True)


@pytest.mark.parametrize(
    "topo, coll, name, utilisation",
    [
        ("dgx-h100*4", "alltoall", "direct", False),  # P² chunks, most slots never used; over one block of nodes
        ("dgx-h100*2", "alltoall", "direct", True),  # in full, pairs sharing the network
        ("ring:8", "allreduce", "ring", True),  # private pairs, timed in schedule order
        ("ring:16", "allreduce", "chain", False),  # a pipeline landing one message at a time
        ("dgx-h100", "allreduce", "nvls", False),  # in-switch reductions updating every rank's slot
        ("dgx-h100*2", "allreduce", "nvls-tree", False),
        ("dgx-h100*2", "alltoall", "two-step-alltoall", False),  # contiguity groups updating several slots
    ],
)
def test_tables_over_the_slots_in_use_time_alike(monkeypatch, topo, coll, name, utilisation):
    # The per-slot tables (waiting reads, updates landed, the node-rotation's slot map) are indexed by
    # the slots in use where a table of every slot would be mostly empty (an Alltoall's P³ slots): the
    # same times, timeline (rows in order), utilisation and events as tables over every slot.
    from simcoll.simulator.fast import plan as plan_module

    machine = load_machine(topo)

    def run():  # generated afresh, so that its plan and node rotation are worked out again
        return simulate(generate(name, machine, coll), machine, SIZE, record_utilisation=utilisation)

    monkeypatch.setattr(plan_module, "DENSE_SLOTS_PER_USE", 1 << 62)  # every slot its own index
    dense = run()
    monkeypatch.setattr(plan_module, "DENSE_SLOTS_PER_USE", 0)  # the slots in use, numbered in order
    compact = run()
    assert compact.time_s == dense.time_s
    assert compact.stats["events"] == dense.stats["events"]
    assert compact.stats["node_rotation"] == dense.stats["node_rotation"]
    pd.testing.assert_frame_equal(compact.timeline, dense.timeline, check_exact=True)
    pd.testing.assert_frame_equal(compact.utilisation, dense.utilisation, check_exact=True)


def test_an_alltoall_keeps_tables_for_the_slots_it_uses_only(monkeypatch):
    # An Alltoall has P² chunks, so P³ (rank, chunk) slots - a billion on 1,024 GPUs, 8 GB a table - of
    # which its P(P - 1) messages update P(P - 1) (and read as many, that wait for no update): its
    # tables have an entry per slot updated or waited on.
    machine = load_machine("dgx-h100*4")
    algorithm = generate("direct", machine, "alltoall")
    p = algorithm.num_ranks
    for finder in ("node_rotation", "table_rotation", "orbit_rotation"):  # every message run
        monkeypatch.setattr(algorithm_mode, finder, lambda *a: None)
    run = algorithm_mode._Run(algorithm, machine, SIZE, contention=True, record_utilisation=True)
    assert run.rotation is None and run.plan.messages == p * (p - 1)
    assert len(run.arrived) == len(run.cursor) == p * (p - 1) < p**3


def test_an_update_of_a_later_step_landing_first_leaves_the_timing_to_the_events(monkeypatch):
    # Rank 2 forwards chunk 2 at step 1, after one update of it: step 0's copy from rank 0 lands
    # third on its pair, step 1's copy from rank 1 first. A read is released by the first update to
    # land, whichever step sent it, so timing in schedule order (which takes step 0's) must give way.
    machine = load_machine("fully-connected:3")
    transfers = [Transfer(c, 0, 2, step=0) for c in range(3)]
    transfers += [Transfer(2, 1, 2, step=1), Transfer(2, 2, 1, step=1)]
    algorithm = Algorithm("early-update", make_collective("allreduce", 3, chunk_factor=3), transfers)
    monkeypatch.setattr(algorithm_mode, "BATCH_MIN_MESSAGES", 0)

    def run():
        return simulate(algorithm, machine, SIZE, contention=False, verify=False)

    tried = []
    original = algorithm_mode._Run._time_in_schedule_order
    monkeypatch.setattr(
        algorithm_mode._Run, "_time_in_schedule_order", lambda self: tried.append(original(self)) or tried[-1]
    )
    result = run()
    assert tried == [False] and not result.stats["in_schedule_order"] and result.stats["batched_landings"]
    rows = result.timeline.set_index(["src", "dst", "chunk"])
    assert rows.loc[(2, 1, 2), "start_s"] == rows.loc[(1, 2, 2), "end_s"] < rows.loc[(0, 2, 2), "end_s"]
    monkeypatch.setattr(algorithm_mode, "IN_SCHEDULE_ORDER", False)
    events = run()
    assert result.time_s == events.time_s
    pd.testing.assert_frame_equal(result.timeline, events.timeline, check_exact=True)


def test_a_batched_run_whose_messages_land_one_at_a_time_goes_on_per_message(monkeypatch):
    # A chain's messages land one at a time: after a trial of landing events
    # that average too few messages for NumPy to pay, the run goes on with
    # the per-message handlers - with the same time, timeline and events.
    machine = load_machine("ring:16")
    algorithm = generate("chain", machine, "allreduce")
    monkeypatch.setattr(algorithm_mode, "IN_SCHEDULE_ORDER", False)  # the events, not the schedule-order timing

    def run():
        return simulate(algorithm, machine, SIZE, record_utilisation=False)

    one_by_one = run()
    monkeypatch.setattr(algorithm_mode, "BATCH_MIN_MESSAGES", 0)
    monkeypatch.setattr(algorithm_mode, "BATCH_TRIAL_EVENTS", 8)
    switched = []
    unbatch = algorithm_mode._Run._unbatch
    monkeypatch.setattr(
        algorithm_mode._Run, "_unbatch", lambda self: (switched.append(self.batch_events), unbatch(self))
    )
    gone_on = run()
    assert switched == [8] and not gone_on.stats["batched_landings"]
    assert gone_on.stats["private_messages"] == gone_on.transfers > 8
    assert gone_on.time_s == one_by_one.time_s and gone_on.stats["events"] == one_by_one.stats["events"]
    pd.testing.assert_frame_equal(gone_on.timeline, one_by_one.timeline, check_exact=True)


def test_contiguity_groups_on_private_pairs_match_the_network(monkeypatch):
    machine = load_machine("fully-connected:2")
    algorithm = _timed_algorithm()
    fast = simulate(algorithm, machine, SIZE)
    monkeypatch.setattr(algorithm_mode, "_private_pairs", _no_private_pairs)
    slow = simulate(algorithm, machine, SIZE)
    assert fast.stats["private_messages"] == 2 and fast.time_s == slow.time_s
    pd.testing.assert_frame_equal(_canonical(fast.timeline), _canonical(slow.timeline), check_exact=True)


def test_which_pairs_are_private():
    # a pair is private when no other pair of the schedule uses any of its resources
    dgx2 = load_machine("dgx2")
    alltoall = generate("direct", dgx2, "alltoall")
    assert simulate(alltoall, dgx2, SIZE).stats["private_messages"] == 0
    # without contention flows never share: all private unless utilisation must sum them
    ideal = simulate(alltoall, dgx2, SIZE, contention=False, record_utilisation=False)
    assert ideal.stats["private_messages"] == ideal.transfers
    assert ideal.time_s == pytest.approx(critical_path_time_s(alltoall, dgx2, SIZE), rel=1e-9)
    assert ideal.utilisation.empty


@pytest.mark.parametrize("now, when", [(1.6184533333333332e-06, 5.63216e-06), (0.0, 1e-6), (3e-6, 3e-6), (1e-9, 7.1)])
def test_delay_to_never_overshoots(now, when):
    delay = algorithm_mode._delay_to(now, when)
    assert now + delay <= when
    # the clock then lies within a factor of 2 of `when`, where `when - clock` is exact
    clock = now + delay
    assert clock + (when - clock) == when


def test_timed_batches_that_print_alike_keep_their_timeline_labels():
    """Two start times equal to six digits (TACCL schedules have many) are
    two batches with the same printed label; the timeline still builds."""
    from simcoll.algorithm import Algorithm, Transfer
    from simcoll.collectives import make_collective
    from simcoll.machines import load_machine
    from simcoll.simulator import simulate

    algo = Algorithm(
        "near-ties",
        make_collective("allgather", 2),
        (
            Transfer(0, 0, 1, start_s=1.0000001e-6, end_s=2e-6),
            Transfer(1, 1, 0, start_s=1.0000002e-6, end_s=2e-6),
        ),
    )
    result = simulate(algo, load_machine("ring:2"), 1 << 20)
    assert list(result.timeline.label) == ["t=1e-06", "t=1e-06"]


def _plans_agree(algorithm: Algorithm, planner: str = "plan_vectorised"):
    """The vectorised plan (``planner``: :func:`plan_vectorised`, or
    :func:`plan_switched` for switch reductions) equals the
    transfer-by-transfer one field for field."""
    import numpy as np

    from simcoll.simulator.fast import plan

    num_chunks = algorithm.collective.num_chunks
    present = np.array(sorted(c + r * num_chunks for c, r in algorithm.collective.pre), dtype=np.int64)
    fast = getattr(plan, planner)(algorithm, num_chunks, present)
    slow = plan.plan_grouped(algorithm, num_chunks, present)
    for name in ("src", "dst", "chunk", "reduce", "batch", "labels", "groups", "pending", "queues"):
        assert getattr(fast, name) == getattr(slow, name), name
    if planner == "plan_switched":  # it replaced plan_grouped, whose queue order numbered the pairs
        assert list(fast.queues) == list(slow.queues)
    assert (fast.fanout or {}) == slow.fanout
    for name in ("wait_slot", "wait_landed", "wait_msg"):
        assert np.array_equal(getattr(fast, name), getattr(slow, name)), name
    assert [fast.describe(m) for m in range(fast.messages)] == [slow.describe(m) for m in range(slow.messages)]
    return fast


@pytest.mark.parametrize(
    "topo, name, coll",
    [
        ("dgx-h100*2", "2d-ring", "allreduce"),
        ("dgx-h100*4", "gc3-hierarchical", "allreduce"),
        ("dgx-a100*2", "two-step-alltoall", "alltoall"),
        ("dgx-h100*2", "ring", "allreduce"),
        ("dgx-h100*2", "double-binary-tree", "allreduce"),  # a group per transfer: told apart by one sort
    ],
)
@pytest.mark.parametrize("count_by_batch", [False, True])
def test_messages_are_planned_alike_with_or_without_contiguity_groups(monkeypatch, topo, name, coll, count_by_batch):
    import numpy as np

    from simcoll.algorithm import TransferTable
    from simcoll.simulator.fast import plan as plan_module

    # the waits counted batch by batch over a table of every slot (large schedules), or by sorting
    monkeypatch.setattr(plan_module, "LOOP_MIN_TRANSFERS_PER_BATCH", 0 if count_by_batch else 1 << 62)
    algorithm = generate(name, load_machine(topo), coll)
    _plans_agree(algorithm)
    # the same transfers, rows shuffled within their steps and regrouped at random: singles and groups
    # interleave, a group's transfers are scattered over the step, and groups share ids across pairs and ops
    rng = np.random.default_rng(15)
    t = algorithm.table
    rows = np.lexsort((rng.random(len(t)), t.step))
    grouped = rng.random(len(t)) < 0.7
    table = TransferTable(
        chunk=t.chunk[rows],
        src=t.src[rows],
        dst=t.dst[rows],
        reduce=t.reduce[rows],
        step=t.step[rows],
        group=np.where(grouped, rng.integers(0, 3, len(t)), -1),
    )
    plan = _plans_agree(algorithm.with_changes(transfers=table))
    if name not in ("ring", "double-binary-tree"):  # one chunk per pair and step: nothing to group
        assert plan.groups and plan.messages > len(plan.groups)  # both kinds of message


@pytest.mark.parametrize(
    "topo, name",
    [
        ("dgx-h100", "nvls"),
        ("dgx-h100*2", "nvls-tree"),
        ("dgx-h100*2", "collnet"),
        ("dgx-a100*2/fat-tree:sharp=on", "collnet"),
    ],
)
@pytest.mark.parametrize("count_by_batch", [False, True])
def test_schedules_with_switch_reductions_are_planned_alike_with_numpy(monkeypatch, topo, name, count_by_batch):
    import numpy as np

    from simcoll.algorithm import TransferTable
    from simcoll.simulator.fast import plan as plan_module

    monkeypatch.setattr(plan_module, "LOOP_MIN_TRANSFERS_PER_BATCH", 0 if count_by_batch else 1 << 62)
    algorithm = generate(name, load_machine(topo), "allreduce")
    _plans_agree(algorithm, "plan_switched")
    if not algorithm.transfers:
        return
    # its transfers regrouped at random and moved a step later, or earlier, among the reductions
    rng = np.random.default_rng(27)
    t = algorithm.table
    table = TransferTable(
        chunk=t.chunk,
        src=t.src,
        dst=t.dst,
        reduce=t.reduce,
        step=t.step + rng.integers(-1, 2, len(t)).clip(-t.step),
        group=np.where(rng.random(len(t)) < 0.5, rng.integers(0, 3, len(t)), -1),
    )
    plan = _plans_agree(algorithm.with_changes(transfers=table, rounds_per_step=()), "plan_switched")
    assert plan.groups and plan.fanout


def test_a_switch_reduction_before_its_chunk_is_named_alike():
    import numpy as np

    from simcoll.algorithm import SwitchReduction
    from simcoll.simulator.fast.plan import plan_grouped, plan_switched

    algorithm = generate("nvls", load_machine("dgx-h100"), "allgather")
    last = algorithm.switch_reductions[-1]  # multicast from a rank that does not hold the chunk
    stray = SwitchReduction(last.chunk, last.switch, ((last.sources[0] + 1) % 8,), last.destinations, step=0)
    broken = algorithm.with_changes(switch_reductions=(*algorithm.switch_reductions[:-1], stray))
    num_chunks = algorithm.collective.num_chunks
    present = np.array(sorted(c + r * num_chunks for c, r in algorithm.collective.pre), dtype=np.int64)
    errors = []
    for plan in (plan_grouped, plan_switched):
        with pytest.raises(AlgorithmError, match="before rank") as caught:
            plan(broken, num_chunks, present)
        errors.append(str(caught.value))
    assert errors[0] == errors[1]


def test_a_single_transfer_is_never_merged_into_a_group_of_the_same_id():
    # has_group says which rows are grouped: a single row may hold the same group id as a group
    import numpy as np

    from simcoll.algorithm import TransferTable

    coll = make_collective("allgather", 2, 3)
    table = TransferTable(
        chunk=[0, 2, 4],
        src=[0, 0, 0],
        dst=[1, 1, 1],
        reduce=[False] * 3,
        step=[0, 0, 0],
        group=[-1, -1, -1],
        has_group=np.array([False, True, True]),
    )
    plan = _plans_agree(Algorithm("single beside a group", coll, table))
    assert plan.messages == 2 and list(plan.groups.values()) == [[8, 10]]  # slot = chunk + rank x 6


def test_timed_contiguity_groups_are_planned_alike():
    # rank 0 sends its two chunks (0 and 3) as one group, rank 1 its two (1 and 4) one by one, then a relay
    coll = make_collective("allgather", 3, 2)
    transfers = [
        Transfer(1, 1, 0, start_s=0.0, end_s=1e-6),
        Transfer(0, 0, 1, start_s=0.0, end_s=1e-6, group=7),
        Transfer(4, 1, 0, start_s=0.0, end_s=1e-6),
        Transfer(3, 0, 1, start_s=0.0, end_s=1e-6, group=7),
        Transfer(0, 1, 2, start_s=2e-6, end_s=3e-6, group=7),
        Transfer(3, 1, 2, start_s=2e-6, end_s=3e-6, group=7),
    ]
    plan = _plans_agree(Algorithm("timed groups", coll, transfers))
    # slot = chunk + rank x 6: the group lands chunks 0 and 3 at rank 1, then at rank 2
    assert plan.groups == {2: [6, 9], 3: [12, 15]} and plan.messages == 4


def test_slot_lists_read_as_a_dict_of_lists_and_release_alike():
    """A plan's switch reductions keep the slots they update as CSR
    (SlotLists): it reads as {message: [slots]}, is indexed like one, and
    the compiled core's release table made from it equals the one made
    from the dict."""
    import numpy as np

    from simcoll.simulator.fast.plan import SlotLists, SlotNumbering

    lists = SlotLists(np.array([1, 4]), np.array([0, 2, 5]), np.array([10, 11, 20, 21, 22]))
    assert lists == {1: [10, 11], 4: [20, 21, 22]} and len(lists) == 2 and list(lists) == [1, 4]
    assert lists.get(4) == [20, 21, 22] and lists.get(2) is None and 1 in lists and 0 not in lists
    numbering = SlotNumbering(np.array([10, 11, 20, 21, 22, 30]), 6)
    assert numbering.of_lists(lists) == {1: [0, 1], 4: [2, 3, 4]}

    from simcoll.simulator.fast import compiled
    from simcoll.simulator.fast.algorithm_mode import _Run

    machine = load_machine("dgx-h100*2")
    algorithm = generate("collnet", machine, "allreduce")
    run = _Run(algorithm, machine, 1 << 20, contention=True, record_utilisation=False)
    assert isinstance(run.fanout_slots, SlotLists)
    off, out = compiled._releases(run, run.plan.messages)
    run.fanout_slots = dict(run.fanout_slots)
    off_dict, out_dict = compiled._releases(run, run.plan.messages)
    assert np.array_equal(off, off_dict) and np.array_equal(out, out_dict)


@pytest.mark.parametrize("ranks, pairs", [(8, 20), (64, 3000), (100, 10), (300, 70000), (400, 200_000), (1000, 500)])
def test_queues_keep_each_pairs_messages_in_schedule_order(ranks, pairs):
    # pairs numbered by a table of every pair (16-bit numbers, or 64-bit past 2^16 pairs), or the pair
    # codes sorted (a table of every pair larger than four entries a message): the same queues as a
    # stable sort by pair
    import numpy as np

    from simcoll.simulator.fast.plan import QueueTable

    rng = np.random.default_rng(ranks)
    code = rng.integers(0, ranks * ranks, pairs)[rng.integers(0, pairs, 100_000 if ranks < 300 else 200_000)]
    queues = QueueTable.of(code, ranks)
    by_pair = np.argsort(code, kind="stable")
    first = np.flatnonzero(np.diff(code[by_pair], prepend=-1))
    assert np.array_equal(queues.messages, by_pair)
    assert np.array_equal(queues.codes, code[by_pair][first])
    assert np.array_equal(queues.starts, np.append(first, len(code)))
    assert np.array_equal(queues.src * ranks + queues.dst, queues.codes)


@pytest.mark.parametrize("spread", [1, 1000])
def test_a_slot_is_held_exactly_when_it_is_present(spread):
    # by a table of every slot (present slots close together) or by binary search (far apart)
    import numpy as np

    from simcoll.simulator.fast.plan import holds

    rng = np.random.default_rng(spread)
    present = np.unique(rng.integers(0, 500 * spread, 200))
    slots = rng.integers(0, 600 * spread, 1000)
    assert np.array_equal(holds(present, slots), np.isin(slots, present))
    assert not holds(present[:0], slots).any()


def test_wall_clock_limit_covers_the_verification():
    """simulate() verifies first (verify=True): its limit bounds both, so a
    schedule whose check alone would take minutes stops at the limit too."""
    machine = load_machine("ring:64")
    algorithm = generate("ring", machine, "allreduce")
    with pytest.raises(TimeLimitError, match=r"^verification of ring: wall-clock limit of 1e-09 s reached at step 0 "):
        simulate(algorithm, machine, SIZE, time_limit_s=1e-9)


def test_wall_clock_limit_counts_from_before_the_verification():
    machine = load_machine("ring:64")
    algorithm = generate("ring", machine, "allreduce")
    started_s = time.perf_counter() - 100  # as if its verification had taken 100 s
    with pytest.raises(TimeLimitError, match="wall-clock limit of 50 s reached"):
        algorithm_mode._simulate_algorithm(algorithm, machine, SIZE, time_limit_s=50, started_s=started_s)
    assert algorithm_mode._simulate_algorithm(algorithm, machine, SIZE, time_limit_s=50).time_s > 0

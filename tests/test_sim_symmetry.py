"""Node-rotation symmetry (issue 15): a schedule that shifting every rank by
whole nodes maps onto itself is simulated through one block of nodes, and
gives exactly what the full simulation gives (:mod:`simcoll.simulator.fast.symmetry`)."""

import numpy as np
import pytest

from simcoll import load_machine
from simcoll.algorithm import Algorithm, Transfer
from simcoll.algorithms import generate
from simcoll.collectives import make_collective
from simcoll.simulator import simulate
from simcoll.simulator.fast import algorithm_mode
from simcoll.simulator.fast.algorithm_mode import _Run
from simcoll.simulator.results import UTILISATION_COLUMNS

SIZES = (1 << 20, 1 << 30)
# (machine, collective, generator, rotation order): schedules a shift by whole nodes maps onto itself
SYMMETRIC = [
    ("dgx-h100*4", "allreduce", "ring", 4),
    ("dgx-h100*4", "allreduce", "direct", 4),
    ("dgx-h100*4", "allreduce", "bidirectional-ring", 4),
    # NCCL's rings enter even and odd nodes at different GPUs: symmetric under a shift of two nodes
    ("dgx-h100*4", "allreduce", "nccl-ring", 2),
    ("dgx-a100*4/rail", "allreduce", "nvgroup-ring", 4),
    ("perlmutter*6", "allgather", "ring", 6),
    ("perlmutter*6", "allreduce", "nccl-ring", 3),
    ("perlmutter*6", "allreduce", "hiccl", 6),
    ("dgx2*2", "reducescatter", "direct", 2),  # DGX-2: routes split over six planes (fractional weights)
    # machines without nodes, or one node, rotated by their own automorphisms (simcoll.topology_symmetry)
    ("ring:16", "allreduce", "ring", 16),
    ("hub-and-spoke:8", "allgather", "ring", 8),
    ("dgx-h100", "allreduce", "ring", 2),  # shift 4: the other half of the board
    ("fully-connected:6", "reducescatter", "direct", 6),
    ("dgx2", "allreduce", "direct", 2),  # shift 8: the other baseboard
]


def _unrotated_run(monkeypatch, algorithm, machine) -> _Run:
    """A run set up without looking for a rotation (its network's routes all its own)."""
    with monkeypatch.context() as patch:
        for finder in ("node_rotation", "table_rotation", "orbit_rotation"):
            patch.setattr(algorithm_mode, finder, lambda *a: None)
        patch.setattr(algorithm_mode, "_PREPARED", {})
        return _Run(algorithm, machine, 1 << 20, contention=True, record_utilisation=True)


def _full(monkeypatch, *args, **kwargs):
    """The simulation without the quotient (every message run), and without
    what earlier runs of the same Algorithm prepared."""
    with monkeypatch.context() as patch:
        patch.setattr(algorithm_mode, "node_rotation", lambda *a: None)
        patch.setattr(algorithm_mode, "table_rotation", lambda *a: None)
        patch.setattr(algorithm_mode, "orbit_rotation", lambda *a: None)
        patch.setattr(algorithm_mode, "_PREPARED", {})
        return simulate(*args, **kwargs)


@pytest.mark.parametrize("topo, coll, name, order", SYMMETRIC)
@pytest.mark.parametrize("contention", [True, False])
def test_the_quotient_gives_the_full_simulation_bit_for_bit(monkeypatch, topo, coll, name, order, contention):
    machine = load_machine(topo)
    algorithm = generate(name, machine, coll)
    for size in SIZES:
        options = {"contention": contention, "record_utilisation": False}
        quotient = simulate(algorithm, machine, size, **options)
        full = _full(monkeypatch, algorithm, machine, size, **options)
        assert quotient.stats["node_rotation"] == order
        assert full.stats["node_rotation"] == 1
        assert quotient.time_s == full.time_s
        assert quotient.timeline.equals(full.timeline)
        assert quotient.transfers == full.transfers == len(algorithm.transfers)
        assert quotient.stats["messages"] == full.stats["messages"]
        assert quotient.stats["private_messages"] == full.stats["private_messages"]


def test_the_quotient_runs_one_block_of_nodes():
    machine = load_machine("dgx-h100*4")
    run = _Run(generate("ring", machine, "allreduce"), machine, 1 << 20, contention=True, record_utilisation=False)
    rotation = run.rotation
    assert (rotation.order, rotation.shift_ranks) == (4, 8)
    assert run.plan.messages * 4 == run.messages
    src = np.frombuffer(run.plan.src, dtype=np.int32)
    assert src.max() < 8  # representatives: the messages node 0 sends
    # every message stands for its representative: the same place in the rotated-back pair's queue
    full = run.full_plan
    for (a, b), msgs in full.queues.items():
        back = (a % 8, (b - (a - a % 8)) % 32)
        reps = rotation.representatives[rotation.rep_of[msgs]]
        assert reps.tolist() == list(full.queues[back])


@pytest.mark.parametrize("topo, coll, name, order", SYMMETRIC)
def test_the_quotient_records_the_utilisation_of_the_full_simulation(monkeypatch, topo, coll, name, order):
    """Each resource of an orbit carries the images of the flows its orbit's
    representative carries: the quotient's intervals, copied onto every
    resource of the orbit, are the full run's, value for value."""
    machine = load_machine(topo)
    algorithm = generate(name, machine, coll)
    key = list(UTILISATION_COLUMNS)
    for size in SIZES:
        quotient = simulate(algorithm, machine, size)  # utilisation and timeline recorded (the defaults)
        full = _full(monkeypatch, algorithm, machine, size)
        assert quotient.stats["node_rotation"] == order and full.stats["node_rotation"] == 1
        assert quotient.time_s == full.time_s and quotient.timeline.equals(full.timeline)
        assert len(quotient.utilisation) == len(full.utilisation) > 0
        assert quotient.utilisation.end_s.is_monotonic_increasing  # rows in order of their end, as a run closes them
        ours, theirs = (r.utilisation.sort_values(key).reset_index(drop=True) for r in (quotient, full))
        assert ours.equals(theirs)


@pytest.mark.parametrize(
    "topo, name, chunks, why",
    [
        (
            "dgx-h100*8/clos:radix=16,oversub=2",
            "ring",
            None,
            "leaves join two nodes each: a spine link every node shares",
        ),
        ("ndv2", "ring", None, "NDv2's PCIe tree and one NIC: no rank shift maps the machine onto itself"),
        ("dgx-h100*4", "multi-ring", 6 * 32, "8 rings share 6 chunks a rank: some blocks are a chunk short"),
    ],
)
def test_asymmetric_schedules_and_machines_run_in_full(topo, name, chunks, why):
    machine = load_machine(topo)
    algorithm = generate(name, machine, "allreduce", chunks=chunks)
    result = simulate(algorithm, machine, 1 << 20, record_utilisation=False)
    assert result.stats["node_rotation"] == 1, why


def test_multi_ring_by_default_gives_every_ring_the_same_share_and_is_symmetric():
    # one chunk per block of each ring found: 8 rings over 4 DGX H100 nodes
    machine = load_machine("dgx-h100*4")
    algorithm = generate("multi-ring", machine, "allreduce")
    assert len(algorithm.metadata["rings"]) == 8 and algorithm.chunks == 8 * 32
    sent = np.bincount(algorithm.table.src, minlength=32)
    assert (sent == sent[0]).all()
    result = simulate(algorithm, machine, 1 << 20, record_utilisation=False)
    assert result.stats["node_rotation"] == 4


def test_a_schedule_timed_again_reuses_its_plan_and_rotation(monkeypatch):
    machine = load_machine("dgx-h100*4")
    algorithm = generate("ring", machine, "allreduce")
    assert algorithm.orbit is not None  # its rotation is the orbit's (symmetry.orbit_rotation)
    first = {size: simulate(algorithm, machine, size, record_utilisation=False) for size in SIZES}
    calls = []
    with monkeypatch.context() as patch:
        patch.setattr(algorithm_mode, "orbit_rotation", lambda *a: calls.append(a))
        again = {size: simulate(algorithm, machine, size, record_utilisation=False) for size in SIZES}
    assert not calls  # worked out once, for the first size
    # a later run's network holds the same resources, numbered as in the first
    runs = [_Run(algorithm, machine, size, contention=True, record_utilisation=False) for size in SIZES]
    assert runs[0].net.resource_names() == runs[1].net.resource_names()
    assert len(runs[1].net.resources) > len(runs[1].rotation.routes)
    for size in SIZES:
        assert again[size].time_s == first[size].time_s
        assert again[size].timeline.equals(first[size].timeline)
        assert again[size].stats["node_rotation"] == 4
    # another machine object, or contention off, works the rotation out afresh
    found = algorithm_mode.orbit_rotation
    with monkeypatch.context() as patch:
        patch.setattr(algorithm_mode, "orbit_rotation", lambda *a: calls.append(a) or found(*a))
        other = simulate(algorithm, load_machine("dgx-h100*4"), 1 << 20, record_utilisation=False)
        simulate(algorithm, machine, 1 << 20, record_utilisation=False, contention=False)
    assert len(calls) == 2
    assert other.time_s == first[1 << 20].time_s


def _two_node_ring(skew: bool) -> Algorithm:
    """Ring AllGather over two DGX-H100 nodes; ``skew`` moves one of node 1's
    last transfers a step later (still correct), which breaks the symmetry."""
    n = 16
    coll = make_collective("allgather", n)
    transfers = []
    for step in range(n - 1):
        for r in range(n):
            late = skew and r == 9 and step == n - 2
            transfers.append(Transfer(src=r, dst=(r + 1) % n, chunk=(r - step) % n, step=step + late))
    return Algorithm("skewed ring" if skew else "ring", coll, tuple(transfers))


@pytest.mark.parametrize("skew", [False, True])
def test_one_asymmetric_transfer_turns_the_quotient_off(monkeypatch, skew):
    machine = load_machine("dgx-h100*2")
    algorithm = _two_node_ring(skew)
    quotient = simulate(algorithm, machine, 1 << 24, record_utilisation=False, verify=False)
    full = _full(monkeypatch, algorithm, machine, 1 << 24, record_utilisation=False, verify=False)
    assert quotient.stats["node_rotation"] == (1 if skew else 2)
    assert quotient.time_s == full.time_s


def test_plans_kept_for_later_sizes_are_bounded(monkeypatch):
    # the latest schedule's plan is always kept; older ones go once the plans kept pass the limit
    monkeypatch.setattr(algorithm_mode, "_PREPARED", {})
    monkeypatch.setattr(algorithm_mode, "PREPARED_MAX_MESSAGES", 1000)
    machine = load_machine("dgx-h100*2")
    small = generate("ring", load_machine("ring:4"), "allreduce")  # 24 messages
    big = generate("ring", machine, "allreduce")  # 480 messages, and a quotient of 240
    simulate(small, "ring:4", 1 << 20)
    simulate(big, machine, 1 << 20, record_utilisation=False)
    assert list(algorithm_mode._PREPARED) == [id(small), id(big)]
    other = generate("bidirectional-ring", machine, "allreduce")
    simulate(other, machine, 1 << 20, record_utilisation=False)
    assert list(algorithm_mode._PREPARED) == [id(other)]  # 960 + 480 messages: the older ones go
    del other
    assert not algorithm_mode._PREPARED  # and an Algorithm's plan goes with it


def _plan_fields_equal(a, b) -> None:
    for name in ("src", "dst", "chunk", "reduce", "batch", "pending", "labels", "groups"):
        assert getattr(a, name) == getattr(b, name), name
    for name in ("wait_slot", "wait_landed", "wait_msg", "write_slot"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
        assert getattr(a, name).dtype == getattr(b, name).dtype, name
    for name in ("src", "dst", "starts", "messages"):
        assert np.array_equal(getattr(a.queues, name), getattr(b.queues, name)), name
    assert [a.describe(m) for m in range(a.messages)] == [b.describe(m) for m in range(b.messages)]


@pytest.mark.parametrize(
    "topo, coll, name, order",
    [
        ("dgx-h100*4", "allreduce", "ring", 4),
        ("dgx-h100*4", "allreduce", "nccl-ring", 2),
        ("dgx-h100*4", "allreduce", "multi-ring", 4),
        ("perlmutter*6", "allgather", "ring", 6),
        ("dgx2*2", "reducescatter", "direct", 2),
        ("dgx-h100*4", "allreduce", "double-binary-tree", 1),  # no rotation: a tree
        ("dgx-h100*4", "allreduce", "2d-ring", None),  # contiguity groups: left to the plan of every message
    ],
)
@pytest.mark.parametrize("count_by_batch", [False, True])
def test_the_rotation_found_from_the_transfer_table_is_the_one_the_plan_gives(
    monkeypatch, topo, coll, name, order, count_by_batch
):
    from simcoll.simulator.fast import plan as plan_module
    from simcoll.simulator.fast.symmetry import node_rotation, quotient_plan, table_rotation

    monkeypatch.setattr(plan_module, "LOOP_MIN_TRANSFERS_PER_BATCH", 0 if count_by_batch else 1 << 62)
    machine = load_machine(topo)
    algorithm = generate(name, machine, coll)
    # two runs that look for no rotation: a fresh network for each search
    run, other = (_unrotated_run(monkeypatch, algorithm, machine) for _ in range(2))
    found = table_rotation(algorithm, run.net, run.num_chunks, run._present())
    plan = run._full_plan()
    expected = node_rotation(plan, other.net, algorithm.num_ranks, run.num_chunks)
    if order is None:
        assert found is None and expected is None
        return
    if order == 1:
        assert found.rotation is None and found.quotient is None and expected is None
        return
    rotation = found.rotation
    assert (rotation.order, rotation.shift_ranks) == (expected.order, expected.shift_ranks)
    assert rotation.order == order
    for name_ in ("representatives", "rep_of", "write_slot"):
        assert np.array_equal(getattr(rotation, name_), getattr(expected, name_)), name_
    assert list(rotation.routes) == list(expected.routes)
    assert [(a, b, [(r.key, w) for r, w in u]) for a, b, u in rotation.routes.values()] == [
        (a, b, [(r.key, w) for r, w in u]) for a, b, u in expected.routes.values()
    ]
    _plan_fields_equal(found.quotient, quotient_plan(plan, expected))


def test_a_read_before_the_chunk_is_there_is_named_by_the_plan_of_every_message(monkeypatch):
    """The transfer table proves no symmetry for a schedule that reads a
    chunk before its rank holds it: the plan of every message names the
    first such read, as without symmetry."""
    from simcoll.algorithm import TransferTable
    from simcoll.errors import AlgorithmError
    from simcoll.simulator.fast.symmetry import table_rotation

    machine = load_machine("dgx-h100*2")
    algorithm = _two_node_ring(False)
    run = _unrotated_run(monkeypatch, algorithm, machine)
    assert table_rotation(algorithm, run.net, run.num_chunks, run._present()).rotation.order == 2
    t = algorithm.table
    # every rank sends its neighbour's chunk first: a read before the chunk is there, in every node alike
    early = algorithm.with_changes(
        transfers=TransferTable(chunk=(t.chunk + 1) % 16, src=t.src, dst=t.dst, reduce=t.reduce, step=t.step)
    )
    assert table_rotation(early, run.net, run.num_chunks, run._present()) is None
    with pytest.raises(AlgorithmError, match="before rank 0 holds the chunk"):
        simulate(early, machine, 1 << 20, record_utilisation=False, record_timeline=False, verify=False)


def test_without_a_timeline_the_quotient_needs_no_plan_of_every_message(monkeypatch):
    machine = load_machine("dgx-h100*4")
    algorithm = generate("ring", machine, "allreduce")
    options = {"record_utilisation": False, "record_timeline": False}
    monkeypatch.setattr(algorithm_mode, "_PREPARED", {})
    quotient = {size: simulate(algorithm, machine, size, **options) for size in SIZES}
    assert algorithm_mode._PREPARED[id(algorithm)].plan is None  # only the quotient was planned
    for size in SIZES:
        full = _full(monkeypatch, algorithm, machine, size, **options)
        assert quotient[size].stats["node_rotation"] == 4
        assert quotient[size].time_s == full.time_s
        for stat in ("messages", "private_messages"):
            assert quotient[size].stats[stat] == full.stats[stat]
    # a timeline asked for later plans every message then, and is the full simulation's
    with_timeline = simulate(algorithm, machine, 1 << 20, record_utilisation=False)
    assert with_timeline.timeline.equals(
        _full(monkeypatch, algorithm, machine, 1 << 20, record_utilisation=False).timeline
    )

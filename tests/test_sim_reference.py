"""The reference engine is the simulator's specification (DESIGN.md: "one
reference engine states the rules ... every faster path is property-tested
against the reference"); these tests hold every fast path to it.

- the reference itself against closed forms (max-min fair shares, two flows
  on one link, the uncontended α-β critical path);
- every fast path of Algorithm mode (private pairs, NumPy batches, timing in
  schedule order, the compiled core, node-rotation quotients) against it on
  random machines and schedules, generated and random ones, with and without
  contention, with in-switch reductions and contiguity groups, under every
  protocol: the same time, timeline and utilisation to 1e-9;
- Program mode on the fluid network against Program mode on the reference
  network;
- a fast path with one rule flipped is caught.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict

import numpy as np
import pytest
import simpy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simcoll import load_machine, make_collective, simulate
from simcoll.algorithm import Algorithm, Transfer
from simcoll.algorithms import generate
from simcoll.analytic import critical_path_time_s
from simcoll.compiler import lower_algorithm
from simcoll.errors import AlgorithmError, SimulationError
from simcoll.simulator.fast import algorithm_mode, compiled
from simcoll.simulator.reference import ReferenceNetwork, max_min_fair_rates, schedule_messages

PROPERTY = settings(
    max_examples=30, derandomize=True, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
REL = 1e-9

#: Small machines with shared resources of every kind: NVSwitch planes and ports (dgx-h100, with NVLink
#: SHARP), PCIe trees and host staging (ndv2, l40s-pcie), NICs and an IB fat tree (clusters), links only.
MACHINES = ["ring:5", "fully-connected:4", "hub-and-spoke:4", "dgx1", "ndv2", "dgx-h100", "l40s-pcie",
            "dgx-a100*2", "ndv2*2", "hgx-h100-4*2", "summit"]  # fmt: skip
#: (machine, generator, collective): schedules of every shape, in-switch reductions included.
GENERATED = [
    ("ring:5", "ring", "allreduce"),
    ("dgx1", "multi-ring", "allgather"),
    ("dgx1", "direct", "alltoall"),
    ("ndv2", "ring", "reducescatter"),
    ("dgx-h100", "nvls", "allreduce"),
    ("dgx-h100", "direct", "allgather"),
    ("dgx-h100", "recursive-doubling", "allreduce"),
    ("l40s-pcie", "ring", "allreduce"),
    ("dgx-a100*2", "nccl-tree", "allreduce"),
    ("dgx-a100*2", "2d-ring", "allgather"),
    ("dgx-h100*2", "nvls-tree", "allreduce"),
    ("dgx-h100*2", "hiccl", "allreduce"),
    ("ndv2*2", "ring", "allreduce"),
    ("hgx-h100-4*2", "two-step-alltoall", "alltoall"),
    ("summit", "double-binary-tree", "allreduce"),
]
SIZES = [1024, 65536, 1 << 20, 48 << 20]
PROTOCOLS = [None, "LL", "LL128", "Simple"]


def _path_settings(mp: pytest.MonkeyPatch, path: str) -> bool:
    """Force one fast path (what the dispatcher would pick on a larger
    schedule); whether utilisation is recorded (the compiled core runs only
    without it)."""
    if path in ("batched", "batched events"):
        mp.setattr(algorithm_mode, "BATCH_MIN_MESSAGES", 0)
        mp.setattr(algorithm_mode, "IN_SCHEDULE_ORDER", path == "batched")
    if path == "shared pairs":
        mp.setattr(algorithm_mode, "_private_pairs", _no_private_pairs)
    if path == "python events":
        mp.setattr(compiled, "ENABLED", False)
    if path == "every message":
        for finder in ("node_rotation", "table_rotation", "orbit_rotation"):
            mp.setattr(algorithm_mode, finder, lambda *a: None)
    return path not in ("compiled", "python events")


def _no_private_pairs(routes, contention, record_utilisation):
    rates, _ = _PRIVATE_PAIRS(routes, contention, record_utilisation)
    return rates, bytearray(len(routes))


_PRIVATE_PAIRS = algorithm_mode._private_pairs
FAST_PATHS = ["default", "compiled", "python events", "batched", "batched events", "shared pairs", "every message"]


def assert_agree(fast, reference) -> None:
    """The same completion time, per-message timeline and bytes per resource, to rounding."""
    assert fast.time_s == pytest.approx(reference.time_s, rel=REL), (fast.stats.get("path"), fast.time_s)
    if len(fast.timeline) or len(reference.timeline):
        assert _rows(fast.timeline) == pytest.approx(_rows(reference.timeline), rel=REL, abs=1e-15)
    if len(fast.utilisation) or len(reference.utilisation):
        assert _bytes(fast.utilisation) == pytest.approx(_bytes(reference.utilisation), rel=1e-7)


def _rows(frame) -> list[tuple]:
    keys = zip(frame["kind"].astype(str), frame["src"], frame["dst"], frame["chunk"], frame["start_s"],
               frame["end_s"], strict=True)  # fmt: skip
    return [value for row in sorted(keys) for value in row[4:]]


def _bytes(frame) -> dict[str, float]:
    moved: dict[str, float] = defaultdict(float)
    for name, start, end, rate in zip(frame["resource"], frame["start_s"], frame["end_s"], frame["rate_Bps"],
                                      strict=True):  # fmt: skip
        moved[name] += (end - start) * rate
    return dict(moved)


def _both(schedule, machine, size, *, contention, protocol, path):
    """The forced fast path's result and the reference's; the fast paths
    claim the dispatcher's default result bit for bit, and are held to it."""
    with pytest.MonkeyPatch.context() as mp:
        utilisation = _path_settings(mp, path)
        options = dict(contention=contention, protocol=protocol, verify=False, record_utilisation=utilisation)
        fast = simulate(schedule, machine, size, **options)
    default = simulate(schedule, machine, size, contention=contention, protocol=protocol, verify=False)
    assert fast.time_s == default.time_s, (path, fast.stats["path"], default.stats["path"])
    reference = simulate(schedule, machine, size, engine="reference", **options)
    return fast, reference


# -- the reference against closed forms ---------------------------------------------------------------
def test_max_min_gives_equal_shares_of_one_link():
    assert max_min_fair_rates([math.inf] * 4, [[(0, 1.0)]] * 4, {0: 8e9}) == [2e9] * 4


def test_max_min_gives_a_bounded_flows_leftover_to_the_others():
    """Bertsekas-Gallager's example: flows on two links of capacity 1, one flow on both."""
    rates = max_min_fair_rates([math.inf] * 3, [[(0, 1.0), (1, 1.0)], [(0, 1.0)], [(1, 1.0)]], {0: 1.0, 1: 1.0})
    assert rates == [0.5, 0.5, 0.5]
    rates = max_min_fair_rates([0.2, math.inf, math.inf], [[(0, 1.0), (1, 1.0)], [(0, 1.0)], [(1, 1.0)]],
                               {0: 1.0, 1: 1.0})  # fmt: skip
    assert rates == pytest.approx([0.2, 0.8, 0.8])


def test_max_min_weights_count_a_flows_share_of_a_split_route():
    # a flow split over two planes puts half its rate on each; another flow uses plane 0 alone: plane 0
    # fills at 0.5 x + x = 10 and holds both, though plane 1 has room left
    rates = max_min_fair_rates([math.inf, math.inf], [[(0, 0.5), (1, 0.5)], [(0, 1.0)]], {0: 10.0, 1: 10.0})
    assert rates == pytest.approx([20 / 3, 20 / 3], rel=1e-15)


def test_two_messages_on_one_link_take_twice_as_long():
    m = load_machine("ring:4")  # 25 GB/s NVLinks, α 0.7 us
    env = simpy.Environment()
    net = ReferenceNetwork(env, m)
    first, second = net.transfer(0, 1, 25e6), net.transfer(0, 1, 50e6)
    env.run()
    # both at 12.5 GB/s until the first has sent 25 MB (2 ms); the second then alone: 25 MB more in 1 ms
    assert first.value == pytest.approx(2e-3 + 0.7e-6, rel=1e-12)
    assert second.value == pytest.approx(3e-3 + 0.7e-6, rel=1e-12)


#: Schedules of rank-to-rank transfers only: in-switch reductions have no α-β critical path.
POINT_TO_POINT = [case for case in GENERATED[:9] if case[1] != "nvls"]


@pytest.mark.parametrize(("machine", "algorithm", "collective"), POINT_TO_POINT)
def test_uncontended_reference_is_the_critical_path(machine, algorithm, collective):
    """DESIGN.md's exactness anchor, on the reference: no contention, no protocol: the α-β critical path."""
    m = load_machine(machine)
    schedule = generate(algorithm, m, collective)
    assert not schedule.switch_reductions and not (schedule.metadata or {}).get("step_pipeline")
    for size in (4096, 1 << 22):
        result = simulate(schedule, m, size, contention=False, engine="reference")
        assert result.time_s == pytest.approx(critical_path_time_s(schedule, m, size), rel=1e-12)


# -- every fast path against the reference ------------------------------------------------------------
@PROPERTY
@given(
    case=st.sampled_from(GENERATED),
    size=st.sampled_from(SIZES),
    contention=st.booleans(),
    protocol=st.sampled_from(PROTOCOLS),
    path=st.sampled_from(FAST_PATHS),
)
def test_fast_paths_agree_with_the_reference_on_generated_schedules(case, size, contention, protocol, path):
    machine, algorithm, collective = case
    m = load_machine(machine)
    schedule = generate(algorithm, m, collective)
    fast, reference = _both(schedule, m, size, contention=contention, protocol=protocol, path=path)
    assert_agree(fast, reference)
    assert reference.stats["path"] == "reference"


@st.composite
def random_schedules(draw) -> tuple[str, Algorithm]:
    """A machine and a schedule of random transfers, each of a chunk its
    source holds by then (an Allgather's chunks spreading at random, copies
    and reductions): not a correct collective, but one the simulator times.
    Timed schedules put some transfers of a rank pair in one contiguity group."""
    machine = draw(st.sampled_from(MACHINES))
    m = load_machine(machine)
    P = m.num_ranks
    routed = [(a, b) for a in range(P) for b in range(P) if a != b and m.route(a, b) is not None]
    collective = make_collective("allgather", P)
    holds = {(r, r) for r in range(P)}
    timed = draw(st.booleans())
    transfers = []
    for step in range(draw(st.integers(1, 5))):
        new = set()
        for _ in range(draw(st.integers(1, 3 * P))):
            src, dst = draw(st.sampled_from(routed))
            chunks = sorted(c for r, c in holds if r == src)
            chunk = draw(st.sampled_from(chunks))
            op = draw(st.sampled_from(["copy", "copy", "reduce"]))
            if timed:
                group = draw(st.sampled_from([None, None, 0, 1]))
                transfers.append(Transfer(chunk, src, dst, op, start_s=step * 1e-6, end_s=(step + 1) * 1e-6,
                                          group=group))  # fmt: skip
            else:
                transfers.append(Transfer(chunk, src, dst, op, step=step))
            new.add((dst, chunk))
        holds |= new
    steps = 1 + max((t.step or 0) for t in transfers)
    rounds = () if timed else (1,) * steps
    return m, Algorithm("random", collective, tuple(transfers), rounds_per_step=rounds, topology=machine)


@PROPERTY
@given(
    drawn=random_schedules(),
    size=st.sampled_from(SIZES),
    contention=st.booleans(),
    protocol=st.sampled_from(PROTOCOLS),
    path=st.sampled_from(FAST_PATHS),
)
def test_fast_paths_agree_with_the_reference_on_random_schedules(drawn, size, contention, protocol, path):
    m, schedule = drawn
    fast, reference = _both(schedule, m, size, contention=contention, protocol=protocol, path=path)
    assert_agree(fast, reference)


@settings(max_examples=12, derandomize=True, deadline=None, database=None)
@given(case=st.sampled_from(GENERATED[:8]), size=st.sampled_from(SIZES[:3]), contention=st.booleans())
def test_program_mode_on_the_fluid_network_agrees_with_the_reference_network(case, size, contention):
    machine, algorithm, collective = case
    m = load_machine(machine)
    program = lower_algorithm(generate(algorithm, m, collective), machine=m)
    fast = simulate(program, m, size, contention=contention, verify=False)
    reference = simulate(program, m, size, contention=contention, verify=False, engine="reference")
    assert reference.stats["path"] == "program on the reference network"
    assert fast.stats["path"] == "program"
    assert_agree(fast, reference)


# -- the dispatcher says which path ran ---------------------------------------------------------------
def test_the_result_names_the_path_that_ran():
    m = load_machine("ndv2*2")
    ring = generate("ring", m, "allreduce")
    assert simulate(ring, m, 1 << 20).stats["path"] == "events"
    assert simulate(ring, m, 1 << 20, record_utilisation=False).stats["path"] == "compiled events" or (
        compiled.unavailable() is not None
    )
    assert "node-rotation quotient of order 2" in simulate(ring, m, 1 << 20, contention=False).stats["path"]
    assert simulate(ring, m, 1 << 20, engine="reference").stats["path"] == "reference"
    with pytest.raises(SimulationError, match="unknown engine 'slow'"):
        simulate(ring, m, 1 << 20, engine="slow")


@pytest.mark.parametrize(
    ("machine", "algorithm", "contention", "path", "ran"),
    [
        # ring:5's cyclic shift maps it and its ring onto themselves (simcoll.topology_symmetry)
        ("ring:5", "ring", True, "batched", "schedule order, rank-rotation quotient of order 5"),
        ("ring:5", "ring", True, "batched events", "batched events, rank-rotation quotient of order 5"),
        ("dgx1", "ring", True, "compiled", "compiled events"),
        ("dgx1", "ring", True, "python events", "events"),
        ("ndv2*2", "ring", False, "default", "events, node-rotation quotient of order 2"),
        ("dgx-h100", "nvls", True, "default", "events"),
    ],
)
def test_each_forced_path_runs_and_agrees(machine, algorithm, contention, path, ran):
    """The property tests above force these paths; here each is seen to run
    (``stats["path"]``), so a forcing that silently fell back is noticed."""
    m = load_machine(machine)
    schedule = generate(algorithm, m, "allreduce")
    fast, reference = _both(schedule, m, 1 << 20, contention=contention, protocol=None, path=path)
    if path == "compiled" and compiled.unavailable() is not None:
        pytest.skip(f"no compiled core here: {compiled.unavailable()}")
    assert fast.stats["path"] == ran
    assert_agree(fast, reference)


def test_the_reference_refuses_a_read_of_a_chunk_not_yet_held():
    bad = Algorithm("bad", make_collective("allgather", 4), (Transfer(2, 0, 1, step=0),), rounds_per_step=(1,))
    with pytest.raises(AlgorithmError, match="before rank 0 holds the chunk"):
        schedule_messages(bad)


# -- a fast path with one rule flipped is caught ------------------------------------------------------
def _contended_case():
    m = load_machine("dgx-h100")  # every GPU's messages to the 7 others share its NVSwitch links
    return m, generate("direct", m, "allgather"), 1 << 24


def test_a_fast_path_that_forgets_sharing_is_caught():
    m, schedule, size = _contended_case()
    with pytest.MonkeyPatch.context() as mp:  # every pair declared private: each message at its alone rate
        mp.setattr(algorithm_mode, "_private_pairs", lambda routes, c, u: (_PRIVATE_PAIRS(routes, c, u)[0],
                                                                           bytearray([1] * len(routes))))  # fmt: skip
        broken = simulate(schedule, m, size, verify=False)
    reference = simulate(schedule, m, size, engine="reference", verify=False)
    with pytest.raises(AssertionError):
        assert_agree(broken, reference)
    assert_agree(simulate(schedule, m, size, verify=False), reference)


def test_a_fast_path_that_forgets_the_hop_latency_is_caught():
    m = load_machine("dgx-a100")
    schedule = generate("ring", m, "allreduce")
    original = algorithm_mode._Run._queues

    def without_hop_latency(self, contention, record_utilisation):
        original(self, contention, record_utilisation)
        self.q_alpha = [alpha for alpha, _, _ in self.routes]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(algorithm_mode._Run, "_queues", without_hop_latency)
        broken = simulate(schedule, m, 4096, protocol="LL", verify=False)
    reference = simulate(schedule, m, 4096, protocol="LL", engine="reference", verify=False)
    assert not np.isclose(broken.time_s, reference.time_s, rtol=REL, atol=0)


def test_the_command_line_runs_either_engine_and_says_which(tmp_path, capsys):
    from simcoll.cli import main

    path = tmp_path / "ring.json"
    generate("ring", load_machine("dgx1"), "allreduce").save(path)
    times = {}
    for engine in ("fast", "reference"):
        assert main(["simulate", str(path), "-t", "dgx1", "--size", "1MB", "--engine", engine, "--json"]) == 0
        out = json.loads(capsys.readouterr().out)
        times[engine] = out["time_s"]
        assert (out["path"] == "reference") == (engine == "reference")
    assert times["fast"] == pytest.approx(times["reference"], rel=REL)
    assert main(["simulate", str(path), "-t", "dgx1", "--size", "1MB", "--engine", "slow"]) == 2

"""Schedules held as an orbit (issue 15): the transfers of the first nodes
and the node rotation that gives the others (:class:`simcoll.algorithm.OrbitTable`).
NCCL's rings on 4,096 GPUs have 268 million transfers and only a million
representatives; the verifier and the simulator work on those, and must
give exactly what they give on every transfer listed."""

import numpy as np
import pytest
import simpy

from simcoll import load_machine
from simcoll.algorithm import Algorithm, OrbitTable, TransferTable
from simcoll.algorithms import generate
from simcoll.algorithms.common import minimal_rounds
from simcoll.algorithms.ring import _rings_transfers
from simcoll.collectives import make_collective
from simcoll.errors import AlgorithmError, CollectiveTooLargeError, ScheduleTooLargeError
from simcoll.simulator import simulate
from simcoll.simulator.fast import algorithm_mode
from simcoll.simulator.fast.symmetry import orbit_rotation, table_rotation
from simcoll.simulator.network import FluidNetwork
from simcoll.verify import algorithm_is_correct, check, orbit_is_correct

# (generator, machine, collective, the orbit's shift, the simulation's rotation order): NCCL's
# rings enter alternate nodes at alternate GPUs; NDv2's routes repeat every other node only
ORBITS = [
    ("nccl-ring", "dgx-h100*4", "allreduce", 16, 2),
    ("nccl-ring", "perlmutter*6", "allreduce", 8, 3),
    ("multi-ring", "dgx-a100*4", "allreduce", 8, 4),
    ("bidirectional-ring", "ndv2*4", "allreduce", 8, 2),
    ("ring", "dgx-h100*4", "allreduce", 8, 4),
    ("nccl-ring", "dgx-h100*4", "allgather", 16, 2),
    ("ring", "perlmutter*6", "reducescatter", 4, 6),
    ("multi-ring", "dgx-a100*4", "reducescatter", 8, 4),
]


def _rows(table: TransferTable) -> np.ndarray:
    """The table's rows as a sorted array (a schedule's transfers as a multiset)."""
    rows = np.stack([table.src, table.dst, table.chunk, table.step, table.reduce.astype(np.int64)], axis=1)
    return rows[np.lexsort(rows.T[::-1])]


def _rings(algorithm: Algorithm) -> list[list[int]]:
    """The rings a ring generator ran the schedule on (the bidirectional ring: its order both ways)."""
    if "rings" in algorithm.metadata:
        return algorithm.metadata["rings"]
    ring = algorithm.metadata["ring"]
    return [ring, [ring[0], *ring[:0:-1]]] if algorithm.name == "bidirectional-ring" else [ring]


def _listed(algorithm: Algorithm) -> Algorithm:
    """The same schedule with every transfer listed (no orbit)."""
    return algorithm.with_changes(transfers=algorithm.table)


def _without_orbit_paths(monkeypatch):
    """Simulations that plan every message (no rotation of any kind)."""
    monkeypatch.setattr(algorithm_mode, "orbit_rotation", lambda *a: None)
    monkeypatch.setattr(algorithm_mode, "table_rotation", lambda *a: None)
    monkeypatch.setattr(algorithm_mode, "node_rotation", lambda *a: None)
    monkeypatch.setattr(algorithm_mode, "_PREPARED", {})


# --- the table --------------------------------------------------------------------------------
def test_an_orbit_lists_its_images_one_after_another():
    reps = TransferTable([0, 1], [0, 1], [1, 2], [False, True], step=[0, 1])
    orbit = OrbitTable(reps, num_ranks=6, shift_ranks=2, chunk_map=[1, 2, 0])
    assert len(orbit) == 6 and orbit.order == 3
    assert [(t.chunk, t.src, t.dst, t.op, t.step) for t in orbit] == [
        (0, 0, 1, "copy", 0),
        (1, 1, 2, "reduce", 1),
        (1, 2, 3, "copy", 0),
        (2, 3, 4, "reduce", 1),
        (2, 4, 5, "copy", 0),
        (0, 5, 0, "reduce", 1),
    ]
    assert orbit.rank_pairs(6).tolist() == sorted(
        a * 6 + b for a, b in [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (5, 0)]
    )
    assert orbit == OrbitTable(reps, 6, 2, [1, 2, 0]) and orbit == orbit.expand()


@pytest.mark.parametrize(
    "reps, ranks, shift, chunk_map, message",
    [
        (TransferTable([0], [2], [3], [False], step=[0]), 6, 2, [0], "sent from a rank outside 0..1"),
        (TransferTable([0], [0], [1], [False], step=[0]), 6, 4, [0], "does not divide 6 ranks"),
        (TransferTable([0], [0], [1], [False], step=[0]), 6, 2, [1, 1], "not a permutation"),
        (TransferTable([0], [0], [1], [False], step=[0]), 4, 2, [1, 2, 0], "applied 2 times"),
        (TransferTable([0], [0], [1], [False], start_s=[0.0], end_s=[1.0]), 4, 2, [0], "step-scheduled"),
        (TransferTable([3], [0], [1], [False], step=[0]), 4, 2, [1, 0], "chunk outside 0..1"),
    ],
)
def test_a_malformed_orbit_is_refused_naming_what_is_wrong(reps, ranks, shift, chunk_map, message):
    with pytest.raises(AlgorithmError, match=message):
        OrbitTable(reps, ranks, shift, chunk_map)


def test_an_orbit_whose_rotation_moves_the_collective_is_refused():
    """A Broadcast from rank 0 is not the same collective shifted one rank on:
    the images of a correct run would not be a run of it."""
    reps = TransferTable([0], [0], [1], [False], step=[0])
    with pytest.raises(AlgorithmError, match="does not map the broadcast's input layout onto itself"):
        Algorithm("b", make_collective("broadcast", 4), OrbitTable(reps, 4, 1, [0]))


def test_past_the_transfer_limit_the_images_are_refused_not_built(monkeypatch):
    algorithm = generate("nccl-ring", "dgx-h100*4", "allreduce")
    monkeypatch.setattr("simcoll.algorithm.orbit.MAX_TRANSFERS", len(algorithm.transfers) - 1)
    with pytest.raises(ScheduleTooLargeError, match="verify it, save it as .npz"):
        _ = algorithm.table
    assert len(algorithm.transfers) == 15_872  # its length needs no images


def test_an_allreduce_of_134_million_slots_is_built_but_not_listed_pair_by_pair():
    """NCCL's rings on 4,096 GPUs: every rank lists one layout of 32,768 chunks."""
    allreduce = make_collective("allreduce", 4096, 8 * 4096)
    assert allreduce.num_chunks == 32_768 and allreduce.input_layout[0] is allreduce.input_layout[4095]
    with pytest.raises(CollectiveTooLargeError, match="134,217,728 \\(chunk, rank\\) pairs"):
        _ = allreduce.pre


# --- generators -------------------------------------------------------------------------------
@pytest.mark.parametrize("name, spec, coll, shift, order", ORBITS)
def test_the_rings_orbit_is_the_schedule_the_rings_build(name, spec, coll, shift, order):
    machine = load_machine(spec)
    algorithm = generate(name, machine, coll)
    orbit = algorithm.orbit
    assert orbit is not None and orbit.shift_ranks == shift
    assert (orbit.representatives.src < shift).all()
    listed = _rings_transfers(algorithm.collective, _rings(algorithm))
    assert np.array_equal(_rows(algorithm.table), _rows(listed))
    assert algorithm.rounds_per_step == minimal_rounds(listed, machine.topology)


def test_rings_that_do_not_repeat_node_after_node_are_listed():
    """Three nodes: NCCL's rings close through a third GPU, so no shift maps them onto themselves."""
    algorithm = generate("nccl-ring", "dgx-a100*3", "allreduce")
    assert algorithm.orbit is None and len(algorithm.transfers) == 8832


# --- the verifier -----------------------------------------------------------------------------
def _mutants(algorithm: Algorithm):
    """The schedule with one representative changed, in six ways (most of them break it)."""
    orbit = algorithm.orbit
    reps = orbit.representatives
    g = algorithm.collective.num_chunks
    i = len(reps) // 3
    for change in ("drop", "op", "later", "earlier", "chunk", "dst"):
        columns = {k: v.copy() for k, v in reps.columns().items()}
        if change == "drop":
            columns = {k: np.delete(v, i) for k, v in columns.items()}
        elif change == "op":
            columns["reduce"][i] = ~columns["reduce"][i]
        elif change == "later":
            columns["step"][i] += 1
        elif change == "earlier":
            columns["step"][i] = max(columns["step"][i] - 1, 0)
        elif change == "chunk":
            columns["chunk"][i] = (columns["chunk"][i] + 1) % g
        else:
            columns["dst"][i] = (columns["dst"][i] + orbit.shift_ranks) % orbit.num_ranks
        table = OrbitTable(TransferTable(**columns), orbit.num_ranks, orbit.shift_ranks, orbit.chunk_map)
        yield change, algorithm.with_changes(transfers=table, rounds_per_step=())


@pytest.mark.parametrize("name, spec, coll, shift, order", ORBITS)
def test_the_orbit_verifier_answers_as_the_verifier_of_every_transfer(name, spec, coll, shift, order):
    machine = load_machine(spec)
    algorithm = generate(name, machine, coll)
    assert orbit_is_correct(algorithm, machine.topology)
    assert algorithm_is_correct(_listed(algorithm), machine.topology)
    assert check(algorithm, machine) == []
    for change, mutant in _mutants(algorithm):
        listed = _listed(mutant)
        correct = algorithm_is_correct(listed, machine.topology)
        assert orbit_is_correct(mutant, machine.topology) == correct, change
        assert check(mutant, machine) == check(listed, machine), change  # a problem is described on the images
        if change in ("drop", "op", "chunk"):  # (a ring's every transfer is needed as it is)
            assert not correct, change


def test_the_orbit_verifier_checks_the_bandwidth_relation_on_every_image():
    machine = load_machine("ndv2*4")
    algorithm = generate("nccl-ring", machine, "allreduce")
    squeezed = algorithm.with_changes(rounds_per_step=(1,) * algorithm.steps)
    assert max(algorithm.rounds_per_step) == 8  # eight channels leave a node through its one NIC
    assert not orbit_is_correct(squeezed, machine.topology)
    assert not algorithm_is_correct(_listed(squeezed), machine.topology)
    assert orbit_is_correct(squeezed)  # without the machine: no relation to keep


def test_an_incorrect_orbit_too_large_to_list_is_reported_in_one_sentence(monkeypatch):
    machine = load_machine("dgx-h100*4")
    _, dropped = next(_mutants(generate("nccl-ring", machine, "allreduce")))
    monkeypatch.setattr("simcoll.verify.MAX_TRANSFERS", 1000)
    (problem,) = check(dropped, machine)
    assert "is not correct (replayed on its first 16 ranks' representatives)" in problem
    assert "simcoll.limits.MAX_TRANSFERS" in problem


# --- the simulator ----------------------------------------------------------------------------
@pytest.mark.parametrize("name, spec, coll, shift, order", ORBITS)
@pytest.mark.parametrize("contention", [True, False])
def test_the_orbit_simulates_as_every_transfer_listed_bit_for_bit(
    monkeypatch, name, spec, coll, shift, order, contention
):
    machine = load_machine(spec)
    algorithm = generate(name, machine, coll)
    # the generator's schedule before orbits: the rings' transfers listed ring by ring
    before = algorithm.with_changes(transfers=_rings_transfers(algorithm.collective, _rings(algorithm)))
    for size in (1 << 20, 1 << 30):
        options = {"contention": contention, "record_utilisation": False}
        quotient = simulate(algorithm, machine, size, **options)
        # (without contention no resource is shared: the orbit's own shift does)
        assert quotient.stats["node_rotation"] == (order if contention else machine.num_ranks // shift)
        with monkeypatch.context() as patch:
            _without_orbit_paths(patch)
            full = simulate(_listed(algorithm), machine, size, **options)
            assert full.stats["node_rotation"] == 1
            assert quotient.time_s == full.time_s
            assert quotient.timeline.equals(full.timeline)
            assert simulate(before, machine, size, **options).time_s == quotient.time_s


def test_the_orbit_quotient_is_the_quotient_found_from_the_images():
    machine = load_machine("dgx-h100*4")
    algorithm = generate("nccl-ring", machine, "allreduce")
    listed = _listed(algorithm)
    g = algorithm.collective.num_chunks

    def network():
        return FluidNetwork(simpy.Environment(), machine, contention=True, record_timeline=False)

    present = np.arange(machine.num_ranks * g)  # an Allreduce starts with every slot
    from_images = table_rotation(listed, network(), g, present)
    from_orbit = orbit_rotation(algorithm, network(), g)
    a, b = from_images.quotient, from_orbit.quotient
    for column in ("src", "dst", "chunk", "batch", "pending"):
        assert list(getattr(a, column)) == list(getattr(b, column)), column
    assert bytes(a.reduce) == bytes(b.reduce) and a.labels == b.labels
    for column in ("wait_slot", "wait_landed", "wait_msg", "write_slot"):
        assert np.array_equal(getattr(a, column), getattr(b, column)), column
    assert list(a.queues) == list(b.queues)
    ra, rb = from_images.rotation, from_orbit.rotation
    assert (ra.order, ra.shift_ranks) == (rb.order, rb.shift_ranks)
    assert np.array_equal(ra.representatives, rb.representatives)
    assert np.array_equal(ra.rep_of, rb.rep_of)


def test_a_timeline_of_too_many_transfers_is_refused_before_the_run(monkeypatch):
    machine = load_machine("dgx-h100*4")
    algorithm = generate("nccl-ring", machine, "allreduce")
    monkeypatch.setattr("simcoll.simulator.MAX_TRANSFERS", 1000)
    with pytest.raises(ScheduleTooLargeError, match="a timeline or utilisation lists each of its 15,872"):
        simulate(algorithm, machine, 1 << 20)
    with pytest.raises(ScheduleTooLargeError, match="Program mode lowers"):
        simulate(algorithm, machine, 1 << 20, mode="program", record_timeline=False, record_utilisation=False)
    quiet = simulate(algorithm, machine, 1 << 20, record_timeline=False, record_utilisation=False)
    assert quiet.stats["node_rotation"] == 2


# --- files ------------------------------------------------------------------------------------
def test_npz_files_keep_the_orbit_and_json_lists_every_transfer(tmp_path):
    algorithm = generate("nccl-ring", "dgx-h100*4", "allreduce")
    algorithm.save(tmp_path / "a.npz")
    loaded = Algorithm.load(tmp_path / "a.npz")
    assert loaded.orbit == algorithm.orbit and loaded.rounds_per_step == algorithm.rounds_per_step
    algorithm.save(tmp_path / "a.json")
    listed = Algorithm.load(tmp_path / "a.json")
    assert listed.orbit is None and listed.transfers == algorithm.table
    listed.save(tmp_path / "listed.npz")  # two images: half the rows
    assert (tmp_path / "a.npz").stat().st_size < 0.6 * (tmp_path / "listed.npz").stat().st_size


def test_an_npz_file_with_a_bad_orbit_is_refused_naming_the_file(tmp_path):
    algorithm = generate("nccl-ring", "dgx-h100*4", "allreduce")
    data = dict(np.load(_saved(algorithm, tmp_path)))
    data["o_chunk_map"] = np.zeros_like(data["o_chunk_map"])
    np.savez(tmp_path / "bad.npz", **data)
    with pytest.raises(AlgorithmError, match="bad.npz: malformed Algorithm .npz: orbit table: chunk_map"):
        Algorithm.load(tmp_path / "bad.npz")


def _saved(algorithm: Algorithm, tmp_path) -> str:
    path = tmp_path / "a.npz"
    algorithm.save(path)
    return str(path)


def test_json_of_too_many_transfers_is_refused_pointing_to_npz(monkeypatch, tmp_path):
    algorithm = generate("nccl-ring", "dgx-h100*4", "allreduce")
    monkeypatch.setattr("simcoll.algorithm.schedule.MAX_TRANSFERS", 1000)
    with pytest.raises(ScheduleTooLargeError, match="JSON lists each of its 15,872 transfers.*save it as .npz"):
        algorithm.save(tmp_path / "a.json")
    assert not (tmp_path / "a.json").exists()
    algorithm.save(tmp_path / "a.npz")
    assert Algorithm.load(tmp_path / "a.npz").orbit == algorithm.orbit


def test_an_orbit_on_routes_that_do_not_repeat_is_refused_when_too_large_to_list(monkeypatch):
    machine = load_machine("dgx-h100*4")
    algorithm = generate("nccl-ring", machine, "allreduce")
    monkeypatch.setattr(algorithm_mode, "orbit_rotation", lambda *a: None)  # (as for routes that do not repeat)
    monkeypatch.setattr(algorithm_mode, "_PREPARED", {})
    options = {"record_timeline": False, "record_utilisation": False}
    listed = simulate(algorithm, machine, 1 << 20, **options)  # every transfer listed: within the limit
    assert listed.stats["node_rotation"] == 1
    monkeypatch.setattr(algorithm_mode, "MAX_TRANSFERS", 1000)
    monkeypatch.setattr(algorithm_mode, "_PREPARED", {})
    with pytest.raises(ScheduleTooLargeError, match="routes do not repeat under the schedule's rotation by 16 ranks"):
        simulate(algorithm, machine, 1 << 20, **options)


def test_the_closed_form_replays_an_orbit_too_large_to_list(monkeypatch):
    """Where every pair's route repeats under the orbit's shift, the analytic
    critical path replays the representatives (every image starts and ends
    when its representative does): a comparison keeps the row, with the time
    the listed transfers give."""
    from simcoll.analytic import critical_path_time_s
    from simcoll.compare import compare

    machine = load_machine("dgx-h100*4")
    rings = generate("nccl-ring", machine, "allreduce")
    listed = rings.with_changes(transfers=rings.orbit.expand())
    assert critical_path_time_s(rings, machine, 1 << 20) == critical_path_time_s(listed, machine, 1 << 20)
    options = {"method": "analytic", "algorithms": ["nccl-ring", "direct"]}
    before, _ = compare(machine, "allreduce", [1 << 20], **options)
    monkeypatch.setattr("simcoll.algorithm.orbit.MAX_TRANSFERS", 1000)  # nccl-ring's 15,872 transfers: too many to list
    rows, skipped = compare(machine, "allreduce", [1 << 20], **options)
    assert sorted(rows.algorithm) == ["direct", "nccl-ring"] and not skipped
    assert rows.set_index("algorithm").time_s["nccl-ring"] == before.set_index("algorithm").time_s["nccl-ring"]


def test_a_comparison_reports_an_orbit_too_large_for_the_closed_form_and_goes_on(monkeypatch):
    """Where a route does not repeat (a Clos whose leaves join two nodes each),
    the closed form would list every transfer: past the limit the row is left
    out, saying why, and the others come."""
    from simcoll.compare import compare, left_out_line

    monkeypatch.setattr("simcoll.algorithm.orbit.MAX_TRANSFERS", 1000)  # the rings' 16,128 transfers: too many to list
    machine = "dgx-h100*8/clos:radix=16,oversub=2"
    rows, skipped = compare(machine, "allgather", [1 << 20], method="analytic", algorithms=["ring", "direct"])
    assert list(rows.algorithm) == ["direct"]
    (reason,) = [v for k, v in skipped.items() if k.startswith("ring")]
    assert "simcoll.limits.MAX_TRANSFERS" in reason
    assert left_out_line("ring", reason).startswith("too large: ring: ")

"""Ring and direct generators: verified on every rank count 2-17 and on the
built-in machines; the verifier rejects mutated algorithms, naming the fault."""

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simcoll import Algorithm, check, generate, load_machine, load_topology, make_collective
from simcoll.algorithms import applicable, find_ring
from simcoll.errors import AlgorithmError, NotApplicableError, VerificationError
from simcoll.verify import verify

COLLS = ("allgather", "reducescatter", "allreduce")


@pytest.mark.parametrize("p", range(2, 18))
@pytest.mark.parametrize("coll", COLLS)
@pytest.mark.parametrize("name", ["ring", "direct"])
def test_generators_verify_for_every_rank_count(name, coll, p):
    topo = load_topology(f"fully-connected:{p}" if name == "direct" else f"ring:{p}")
    for chunks in (1, 2, p):
        algo = generate(name, load_machine(topo), make_collective(coll, p, chunks))
        assert check(algo, load_machine(topo)) == []


@pytest.mark.parametrize(
    "topo", ["dgx1", "ndv2", "dgx2", "z52", "summit", "dgx-a100", "torus2d:3x3", "hypercube:3", "line:5", "ndv2*2"]
)
@pytest.mark.parametrize("coll", COLLS)
def test_generators_verify_on_machines(topo, coll):
    t = load_topology(topo)
    results = applicable(load_machine(t), coll)
    assert not isinstance(results["direct"], str), results["direct"]  # direct applies everywhere
    for algo in results.values():
        if not isinstance(algo, str):
            assert check(algo, load_machine(t)) == []


def test_ring_on_dgx1_uses_a_hamiltonian_cycle_of_nvlinks():
    t = load_topology("dgx1")
    order = find_ring(t)
    links = t.gpu_link_counts()
    assert sorted(order) == list(range(8))
    assert all(links[order[i]][order[(i + 1) % 8]] >= 1 for i in range(8))
    algo = generate("ring", load_machine(t), "allgather")
    assert (algo.chunks, algo.steps, algo.rounds) == (1, 7, 7)


def test_direct_allgather_on_dgx1_is_the_latency_optimal_point():
    """SCCL Table 4: (C, S, R) = (1, 2, 2) is latency-optimal on DGX-1."""
    algo = generate("direct", "dgx1", "allgather")
    assert (algo.chunks, algo.steps, algo.rounds) == (1, 2, 2)


def test_no_ring_on_a_line():
    with pytest.raises(NotApplicableError, match="no Hamiltonian cycle"):
        generate("ring", "line:4", "allgather")
    with pytest.raises(NotApplicableError, match="no route from rank 0 to rank 2"):
        generate("ring", "ring:4", "allgather", ring=[0, 2, 1, 3])


def test_json_round_trip_preserves_everything(tmp_path):
    algo = generate("ring", "dgx1", "allreduce", 16)
    path = tmp_path / "a.json"
    algo.save(path)
    again = Algorithm.load(path)
    assert again == algo and again.metadata == algo.metadata and again.rounds_per_step == algo.rounds_per_step
    timed = Algorithm(
        "t",
        make_collective("allgather", 2),
        (
            dataclasses.replace(
                algo.transfers[0], chunk=0, src=0, dst=1, op="copy", step=None, start_s=0.0, end_s=1e-6, group=3
            ),
            dataclasses.replace(
                algo.transfers[0], chunk=1, src=1, dst=0, op="copy", step=None, start_s=0.0, end_s=1e-6, group=4
            ),
        ),
        predicted_time_s=1e-6,
    )
    assert Algorithm.from_json(timed.to_json()) == timed and timed.schedule == "timed"
    assert check(timed) == []


# -- mutations ----------------------------------------------------------------------
def _ring_allreduce(p=5):
    return generate("ring", f"ring:{p}", "allreduce")


def test_dropped_send_is_named():
    algo = _ring_allreduce()
    victim = algo.transfers[-1]
    broken = algo.with_changes(transfers=algo.transfers[:-1])
    problems = check(broken)
    # the destination keeps its own partial: the reduction lacks the others' contributions
    assert any(f"rank {victim.dst}" in p and f"chunk {victim.chunk} lacks the contributions" in p for p in problems)
    ag = generate("ring", "ring:5", "allgather")
    last = ag.transfers[-1]
    problems = check(ag.with_changes(transfers=ag.transfers[:-1]))
    assert any(f"rank {last.dst}" in p and f"chunk {last.chunk} never arrives" in p for p in problems)


def test_duplicated_reduction_is_named():
    algo = _ring_allreduce()
    first_reduce = next(t for t in algo.transfers if t.op == "reduce")
    again = dataclasses.replace(first_reduce, step=first_reduce.step + 1)
    problems = check(algo.with_changes(transfers=(*algo.transfers, again)))
    assert any("twice" in p and f"chunk {first_reduce.chunk}" in p for p in problems)


def test_send_before_the_chunk_arrives_is_named():
    algo = generate("ring", "ring:5", "allgather")
    late = next(t for t in algo.transfers if t.step == 2)
    early = dataclasses.replace(late, step=0)
    transfers = tuple(early if t == late else t for t in algo.transfers)
    problems = check(algo.with_changes(transfers=transfers))
    assert any(
        f"chunk {late.chunk} from rank {late.src} to rank {late.dst} at step 0" in p and "does not hold" in p
        for p in problems
    )


def test_bandwidth_relation_is_enforced():
    algo = generate("ring", "ring:4", "allgather", 2)
    squeezed = algo.with_changes(rounds_per_step=(1,) * algo.steps)  # 2 chunks per link need 2 rounds
    problems = check(squeezed, "ring:4")
    assert any("exceed its 1 chunk(s) per round" in p for p in problems)
    assert check(algo, "ring:4") == []


def test_transfers_need_a_route_on_the_given_topology():
    algo = generate("direct", "fully-connected:4", "allgather")
    problems = check(algo, "ring:4")
    assert any("no route from GPU 0 to GPU 2" in p for p in problems)


def test_verify_raises_with_every_problem():
    algo = _ring_allreduce()
    with pytest.raises(VerificationError) as info:
        verify(algo.with_changes(transfers=algo.transfers[:-2]))
    assert len(info.value.problems) >= 2


def test_malformed_algorithms_are_refused_at_construction():
    coll = make_collective("allgather", 2)
    with pytest.raises(AlgorithmError, match="dst 5 out of range"):
        Algorithm("x", coll, (dataclasses.replace(_ring_allreduce().transfers[0], chunk=0, src=0, dst=5),))
    with pytest.raises(AlgorithmError, match="mixes"):
        Algorithm(
            "x",
            coll,
            (
                dataclasses.replace(_ring_allreduce().transfers[0], chunk=0, src=0, dst=1, op="copy"),
                dataclasses.replace(
                    _ring_allreduce().transfers[0], chunk=1, src=1, dst=0, op="copy", step=None, start_s=0.0, end_s=1.0
                ),
            ),
        )


# -- property-based: random topologies, random mutations -------------------------------
@st.composite
def connected_topologies(draw):
    n = draw(st.integers(2, 7))
    order = draw(st.permutations(range(n)))
    edges = {(min(order[i], order[i + 1]), max(order[i], order[i + 1])) for i in range(n - 1)}  # spanning path
    extra = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=8))
    edges |= {(min(a, b), max(a, b)) for a, b in extra if a != b}
    links = "\n".join(f"  - [gpu{a}, gpu{b}, nvlink, {draw(st.integers(1, 3))}]" for a, b in sorted(edges))
    return f"name: random\ngpus: {n}\nlinks:\n{links}\n"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(yaml_text=connected_topologies(), coll=st.sampled_from(COLLS), chunks=st.integers(1, 3), data=st.data())
def test_random_topologies_verify_and_mutations_are_caught(tmp_path, yaml_text, coll, chunks, data):
    path = tmp_path / "random.yaml"
    path.write_text(yaml_text)
    topo = load_topology(str(path))
    algo = generate("direct", load_machine(topo), make_collective(coll, topo.num_ranks, chunks))
    assert check(algo, load_machine(topo)) == []
    i = data.draw(st.integers(0, len(algo.transfers) - 1))
    victim = algo.transfers[i]
    kind = data.draw(st.sampled_from(["drop", "duplicate", "early"]))
    if kind == "drop":
        mutated = algo.transfers[:i] + algo.transfers[i + 1 :]
    elif kind == "duplicate":
        mutated = algo.transfers + (dataclasses.replace(victim, step=algo.steps - 1),)
        if victim.op == "copy":  # a second identical copy is harmless; make it a reduction of a non-combining kind
            if not algo.collective.combining:
                mutated = algo.transfers + (dataclasses.replace(victim, op="reduce"),)
            else:
                mutated = algo.transfers + (dataclasses.replace(victim, op="reduce", step=victim.step),)
    else:
        if victim.step == 0:
            return  # nothing earlier than step 0
        mutated = algo.transfers[:i] + (dataclasses.replace(victim, step=0),) + algo.transfers[i + 1 :]
        if check(algo.with_changes(transfers=mutated)) == [] and not _depends(algo, victim):
            return  # moving a transfer whose chunk was there from the start is legal
    problems = check(algo.with_changes(transfers=mutated))
    assert problems, f"{kind} of {victim.describe()} went unnoticed"
    assert any(f"chunk {victim.chunk}" in p or f"rank {victim.dst}" in p or "chunk" in p for p in problems)


def _depends(algo, t):
    return (t.chunk, t.src) not in {(c, r) for c, r in algo.collective.pre}


def test_what_a_generator_implements_is_declared_once_and_enforced():
    """Each registry entry reads its collectives from the function's
    @implements declaration; calling the function directly with another
    collective is refused there, naming both."""
    from simcoll.algorithms import REGISTRY
    from simcoll.algorithms.bruck import bruck
    from simcoll.algorithms.registry import Generator
    from simcoll.errors import NotApplicableError, SimcollError
    from simcoll.machines import load_topology

    for name, entry in REGISTRY.items():
        assert entry.collectives == entry.function.collectives, name
    with pytest.raises(NotApplicableError, match="bruck implements allgather, alltoall, not allreduce"):
        bruck(load_topology("ring:4"), make_collective("allreduce", 4))
    with pytest.raises(SimcollError, match="lists .* but its function implements"):
        Generator("bruck", bruck, ("allgather",), "a second, different declaration")


def test_a_relabelled_schedule_equals_one_built_again_with_the_new_name(monkeypatch):
    algorithm = generate("nvls-tree", "dgx-h100*2", "allreduce")
    checks = []
    monkeypatch.setattr(Algorithm, "_check_structure", lambda self: checks.append(self))
    relabelled = algorithm.relabelled("nccl", {"protocol": "Simple"})
    assert not checks  # the same transfers and switch reductions: nothing to check again
    monkeypatch.undo()
    rebuilt = algorithm.with_changes(name="nccl", metadata={"protocol": "Simple"})
    assert relabelled == rebuilt and relabelled.to_dict() == rebuilt.to_dict()
    assert algorithm.name == "nvls-tree" and algorithm.metadata.get("protocol") is None

"""SCCL synthesis (PPoPP'21 §3): every answer verified, both backends agreeing
on sat/unsat, the published DGX-1 points and frontier, combining collectives
by inversion, and clear errors on bad instances."""

import json
import time
from fractions import Fraction

import pytest

from simcoll import load_machine, load_topology, make_collective
from simcoll.algorithm import BandwidthConstraint
from simcoll.bounds import min_rounds_per_chunk, min_steps
from simcoll.cli import main
from simcoll.collectives import custom_collective
from simcoll.errors import SynthesisError
from simcoll.synthesis import (
    BACKENDS,
    bandwidth_bound,
    inverse_collective,
    latency_bound,
    make_target,
    pareto_synthesize,
    synthesize,
)
from simcoll.synthesis.sccl import DEFAULT_TIME_LIMIT_S, collective_for
from simcoll.verify import check

ALL_BACKENDS = tuple(BACKENDS)


def _sat(result, topology=None):
    assert result.status == "sat", result
    algo = result.algorithm
    assert check(algo, load_machine(topology) if topology is not None else None) == []
    assert (algo.steps, algo.rounds) == (result.steps, result.rounds)
    return algo


@pytest.mark.parametrize("backend", ALL_BACKENDS)
@pytest.mark.parametrize(
    "spec, coll, c, s, r, expected",
    [
        ("ring:4", "allgather", 1, 2, 2, "sat"),  # SCCL Fig. 2 needs 3 rounds on a line, a ring does it in 2
        ("ring:4", "allgather", 1, 1, 1, "unsat"),  # diameter 2
        ("ring:4", "allgather", 2, 3, 3, "sat"),
        ("ring:4", "allgather", 3, 3, 3, "unsat"),  # R/C = 1 < 3/2, the bandwidth bound
        ("line:3", "broadcast", 2, 3, 3, "sat"),
        ("line:3", "broadcast", 2, 2, 2, "unsat"),
        ("fully-connected:4", "alltoall", 4, 1, 1, "sat"),
        ("ring:4", "gather", 1, 2, 2, "sat"),
        ("ring:4", "scatter", 1, 1, 2, "unsat"),
        ("dgx1", "allgather", 1, 2, 2, "sat"),  # Table 4, latency-optimal
        ("dgx1", "allgather", 3, 2, 4, "unsat"),  # the infeasibility target
    ],
)
def test_backends_agree_on_small_instances(backend, spec, coll, c, s, r, expected):
    topo = load_topology(spec)
    result = synthesize(load_machine(topo), coll, c, s, r, backend=backend, time_limit_s=60)
    assert result.status == expected
    if expected == "sat":
        _sat(result, topo)


@pytest.mark.parametrize(
    "coll, c, s, r",
    [
        ("allgather", 2, 3, 3),
        ("allgather", 2, 2, 3),
        ("allgather", 6, 3, 7),  # bandwidth-optimal in 3 steps
        ("allreduce", 8, 4, 4),
        ("allreduce", 16, 4, 6),
        ("reducescatter", 2, 3, 3),
    ],
)
def test_dgx1_table4_rows_are_found_and_verified(c, s, r, coll):
    dgx1 = load_topology("dgx1")
    algo = _sat(synthesize(load_machine(dgx1), coll, c, s, r), dgx1)
    assert algo.chunks == c  # the paper's C is our chunk factor for these collectives
    assert algo.metadata["generator"] == "sccl"


def test_dgx1_allgather_pareto_frontier_reaches_the_bandwidth_bound():
    """SCCL Table 4 (0-synchronous rows) and Algorithm 1's stopping rule."""
    dgx1 = load_topology("dgx1")
    points = list(pareto_synthesize(load_machine(dgx1), "allgather"))
    frontier = [(p.result.chunks, p.result.steps, p.result.rounds) for p in points if p.optimal]
    assert frontier == [(1, 2, 2), (2, 3, 3), (3, 4, 4), (4, 5, 5), (5, 6, 6), (6, 7, 7)]
    assert points[-1].rounds_per_chunk == Fraction(7, 6)
    for p in points:
        if p.result.status == "sat":
            assert check(p.result.algorithm, load_machine(dgx1)) == []


def test_bounds_match_the_topology_bounds_on_dgx1():
    dgx1 = load_topology("dgx1")
    target = make_target(load_machine(dgx1))
    ag = make_collective("allgather", 8)
    assert latency_bound(ag, target) == min_steps(ag, load_machine(dgx1)) == 2
    assert bandwidth_bound(ag, target) == min_rounds_per_chunk(ag, load_machine(dgx1))[0] == Fraction(7, 6)
    assert bandwidth_bound(make_collective("allreduce", 8, 8), target) == Fraction(7, 24)  # 14/48


def test_reduce_is_the_inverse_of_broadcast_on_the_reversed_links(tmp_path):
    """A one-way chain 0->1->2: Broadcast from 0 exists; Reduce to 0 does not
    (contributions cannot flow against the links), Reduce to 2 does."""
    path = tmp_path / "chain.yaml"
    one_way = "{ends: [gpu%d, gpu%d], type: nvlink, directed: true}"
    path.write_text(f"name: chain\ngpus: 3\nlinks:\n  - {one_way % (0, 1)}\n  - {one_way % (1, 2)}\n")
    topo = load_topology(str(path))
    _sat(synthesize(load_machine(topo), "broadcast", 1, 2, 2, root=0), topo)
    with pytest.raises(SynthesisError, match="never reach"):
        synthesize(load_machine(topo), "reduce", 1, 2, 2, root=0)
    algo = _sat(synthesize(load_machine(topo), "reduce", 1, 2, 2, root=2), topo)
    assert {t.op for t in algo.transfers} == {"reduce"}
    dual, allgather = inverse_collective(make_collective("reducescatter", 4, 2)), make_collective("allgather", 4, 2)
    assert (dual.pre, dual.post) == (allgather.pre, allgather.post)


def test_allreduce_on_a_one_way_ring_solves_both_halves(tmp_path):
    """With asymmetric links the ReduceScatter half is synthesized on the
    reversed relation separately, and the composition still verifies."""
    links = "\n".join(f"  - {{ends: [gpu{i}, gpu{(i + 1) % 4}], type: nvlink, directed: true}}" for i in range(4))
    path = tmp_path / "oneway.yaml"
    path.write_text(f"name: oneway\ngpus: 4\nlinks:\n{links}\n")
    topo = load_topology(str(path))
    algo = _sat(synthesize(load_machine(topo), "allreduce", 4, 6, 6), topo)
    assert [t.op for t in algo.transfers if t.step < 3] == ["reduce"] * sum(t.step < 3 for t in algo.transfers)


def test_user_defined_collectives():
    topo = load_topology("line:3")
    swap = custom_collective("swap-ends", [[0], [], [1]], [[1], [], [0]])
    algo = _sat(synthesize(load_machine(topo), swap, steps=2), topo)
    assert algo.collective.name == "swap-ends"
    # combining, one destination per chunk: both ends' contributions meet in the middle
    to_middle = custom_collective("sum-to-middle", [[0], [0], [0]], [[], [0], []], combining=True)
    _sat(synthesize(load_machine(topo), to_middle, steps=1), topo)
    both = custom_collective("sum-to-both-ends", [[0], [0], [0]], [[0], [], [0]], combining=True)
    with pytest.raises(SynthesisError, match="one destination per chunk"):
        synthesize(load_machine(topo), both, steps=2)


def test_explicit_shared_bus_relation():
    """SCCL §3.2.1: one shared bus for three ranks, one chunk per round in all."""
    bus = BandwidthConstraint(frozenset((a, b) for a in range(3) for b in range(3) if a != b), 1, "bus")
    result = synthesize(None, "allgather", 1, 2, 6, bandwidth=(bus,), num_ranks=3)
    algo = _sat(result)
    assert all(len(algo.transfers_in_step(s)) <= algo.rounds_per_step[s] for s in range(algo.steps))
    assert synthesize(None, "allgather", 1, 2, 5, bandwidth=(bus,), num_ranks=3).status == "unsat"  # 6 sends


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"collective": "allgather", "chunks": 1, "steps": 3, "rounds": 2}, "at least steps"),
        ({"collective": "allreduce", "chunks": 8, "steps": 3, "rounds": 3}, "even steps"),
        ({"collective": "allreduce", "chunks": 6, "steps": 4, "rounds": 4}, "multiple of the rank count"),
        ({"collective": "alltoall", "chunks": 3, "steps": 2}, "multiple of the rank count"),
        ({"collective": "allgather", "chunks": 1, "steps": 2, "backend": "gurobi"}, "unknown backend"),
        ({"collective": "allgather", "chunks": 0, "steps": 2}, "chunks must be at least 1"),
        ({"collective": "allgather", "chunks": 1, "steps": 2, "time_limit_s": 0}, "time limit"),
        ({"collective": "allgather", "chunks": 1, "steps": 2, "workers": 0}, "workers must be a positive integer"),
        ({"collective": "allgather", "chunks": 1, "steps": 2, "backend": "z3", "workers": 2}, "applies to cpsat"),
    ],
)
def test_bad_instances_are_named(kwargs, message):
    with pytest.raises(SynthesisError, match=message):
        synthesize("dgx1", **kwargs)


@pytest.mark.parametrize(("c", "s", "r"), [(6, 3, 7), (2, 2, 3)])
def test_one_worker_finds_the_same_algorithm_on_every_run(c, s, r):
    """Deterministic by default (issue 51): the same transfers, run after run,
    with one CP-SAT worker and a fixed seed; racing workers answer the same
    query with a verified algorithm of the same (C, S, R)."""
    runs = [synthesize("dgx1", "allgather", c, s, r) for _ in range(3)]
    assert all(run.status == "sat" for run in runs)
    first = runs[0].algorithm.transfers
    assert all(run.algorithm.transfers == first for run in runs[1:])
    raced = synthesize("dgx1", "allgather", c, s, r, workers=2)
    assert raced.status == "sat" and check(raced.algorithm, load_machine("dgx1")) == []


def test_the_time_limit_covers_building_the_model():
    """Issue 52: a large machine's encoding (a million variables on 512 GPUs) took minutes
    and 15 GB before the solver's limit began; now the limit stops the encoding too."""
    started = time.perf_counter()
    result = synthesize("dgx-h100*8", "allgather", 1, 2, time_limit_s=0.3)  # encoding alone takes seconds
    assert result.status == "unknown" and "was reached while encoding" in result.reason
    assert time.perf_counter() - started < 4  # (0.3 s and the reachability pass; generous for a loaded machine)


def test_time_limit_gives_unknown_not_an_error():
    result = synthesize("dgx1", "allgather", 6, 7, 7, backend="z3", time_limit_s=0.5)
    assert result.status == "unknown"
    assert result.algorithm is None


def test_chunk_counts_follow_the_papers_tables():
    assert collective_for("allreduce", 8, 8).num_chunks == 8
    assert collective_for("alltoall", 8, 24).chunk_factor == 3
    assert collective_for("reducescatter", 8, 6).num_chunks == 48


def test_cli_single_query_and_pareto(tmp_path, capsys):
    out = tmp_path / "ag.json"
    rc = main(
        [
            "synth",
            "sccl",
            "-t",
            "dgx1",
            "-c",
            "allgather",
            "--chunks",
            "2",
            "--steps",
            "2",
            "--rounds",
            "3",
            "-o",
            str(out),
        ]
    )
    assert rc == 0
    answer = json.loads(capsys.readouterr().out)
    assert (answer["status"], answer["chunks"], answer["steps"], answer["rounds"]) == ("sat", 2, 2, 3)
    assert 0 < answer["time_s"] < DEFAULT_TIME_LIMIT_S  # the solve time, within the default limit
    assert main(["verify", str(out), "-t", "dgx1"]) == 0
    capsys.readouterr()
    assert (
        main(["synth", "sccl", "-t", "dgx1", "-c", "allgather", "--chunks", "3", "--steps", "2", "--rounds", "4"]) == 1
    )  # unsat: a negative answer
    assert json.loads(capsys.readouterr().out)["status"] == "unsat"
    assert main(["synth", "sccl", "--pareto", "-t", "ring:4", "-c", "allgather", "--json"]) == 0
    captured = capsys.readouterr()
    frontier = json.loads(captured.out)["frontier"]
    assert [(p["chunks"], p["steps"], p["rounds"]) for p in frontier] == [(1, 2, 2), (2, 3, 3)]
    assert "query 1: S=2 C=1 R=2: sat" in captured.err  # progress on the terminal
    assert main(["synth", "sccl", "-t", "dgx1", "-c", "allgather", "--steps", "2"]) == 2

"""Specification of the SCCL synthesizer JSON importer (issue 6 item 5).

The fixtures are written by hand in the public SCCL / msccl-tools algorithm
format: objects tagged ``sccl_type`` (``msccl_type`` in msccl-tools), steps of
``[chunk, src, dst]`` sends with rounds, input/output maps, the collective's
chunks (pre, post, addr) and the topology's link matrix ``links[dst][src]``.
Claims: they import as Algorithms that the independent verifier accepts
(postcondition and SCCL's bandwidth relation); the collective is recognised
as simcoll's built-in one; reductions are told from copies by SCCL's own run
semantics; malformed input raises AlgorithmError naming the field.
"""

from __future__ import annotations

import json

import pytest

from simcoll.collectives import make_collective
from simcoll.errors import AlgorithmError
from simcoll.interop import algorithm_from_sccl_dict, load_schedule, parse_sccl_json, read_sccl_json
from simcoll.verify import check

P = 3


def _topology(links):
    return {"sccl_type": "topology", "name": "Ring(3)", "links": links, "switches": []}


RING3_LINKS = [[0 if s == d else 1 for s in range(P)] for d in range(P)]


def allgather_ring3(tag: str = "sccl_type") -> dict:
    """Allgather on a 3-rank ring, C=1, S=2, R=2: each chunk travels two hops
    forward."""
    return {
        tag: "algorithm",
        "name": "Allgather-Ring(3)-(1,2,2)",
        "instance": {
            tag: "instance",
            "steps": 2,
            "extra_rounds": 0,
            "chunks": 1,
            "pipeline": None,
            "extra_memory": None,
            "allow_exchange": False,
        },
        "input_map": {str(r): [r] for r in range(P)},
        "output_map": {str(r): list(range(P)) for r in range(P)},
        "steps": [
            {tag: "step", "rounds": 1, "sends": [[0, 0, 1], [1, 1, 2], [2, 2, 0]]},
            {tag: "step", "rounds": 1, "sends": [[0, 1, 2], [1, 2, 0], [2, 0, 1]]},
        ],
        "collective": {
            tag: "collective",
            "name": "Allgather",
            "nodes": P,
            "chunks": [{tag: "chunk", "pre": [c], "post": list(range(P)), "addr": c} for c in range(P)],
            "triggers": {},
            "runtime_name": "allgather",
        },
        "topology": {**_topology(RING3_LINKS), tag: "topology"},
    }


def allreduce_ring3() -> dict:
    """Allreduce on 3 ranks as SCCL writes combining collectives: one chunk
    per (address, contributing rank), all at the same address. Steps 0–1 are
    a ReduceScatter along the ring (address a ends reduced on rank a), steps
    2–3 an Allgather of the reduced addresses."""
    sends = [
        [[a, (a + 1) % P, (a + 2) % P] for a in range(P)],
        [[a, (a + 2) % P, a] for a in range(P)],
        [[a, a, (a + 1) % P] for a in range(P)],
        [[a, (a + 1) % P, (a + 2) % P] for a in range(P)],
    ]
    return {
        "sccl_type": "algorithm",
        "name": "Allreduce-Ring(3)",
        "instance": {"sccl_type": "instance", "steps": 4, "extra_rounds": 0, "chunks": P},
        "input_map": {str(r): list(range(P)) for r in range(P)},
        "output_map": {str(r): list(range(P)) for r in range(P)},
        "steps": [{"sccl_type": "step", "rounds": 1, "sends": s} for s in sends],
        "collective": {
            "sccl_type": "collective",
            "name": "Allreduce",
            "nodes": P,
            "chunks": [{"pre": [r], "post": list(range(P)), "addr": a} for a in range(P) for r in range(P)],
            "triggers": {},
            "runtime_name": "allreduce",
        },
        "topology": _topology(RING3_LINKS),
    }


@pytest.mark.parametrize("tag", ["sccl_type", "msccl_type"])
def test_allgather_imports_and_verifies(tag):
    algo = algorithm_from_sccl_dict(allgather_ring3(tag))
    assert algo.collective == make_collective("allgather", P)
    assert algo.rounds_per_step == (1, 1)
    assert [(t.chunk, t.src, t.dst, t.step, t.op) for t in algo.transfers][:3] == [
        (0, 0, 1, 0, "copy"),
        (1, 1, 2, 0, "copy"),
        (2, 2, 0, 0, "copy"),
    ]
    assert check(algo) == []
    assert check(algo, f"ring:{P}") == []


def test_allreduce_reductions_and_copies_follow_sccls_run_semantics():
    algo = algorithm_from_sccl_dict(allreduce_ring3())
    assert algo.collective == make_collective("allreduce", P, P)
    ops = [[t.op for t in algo.transfers if t.step == s] for s in range(4)]
    assert ops == [["reduce"] * P, ["reduce"] * P, ["copy"] * P, ["copy"] * P]
    assert check(algo) == []


def test_bandwidth_relation_comes_from_the_links():
    """A send over a pair the link matrix gives no bandwidth is reported."""
    data = allgather_ring3()
    data["topology"]["links"] = [[0, 0, 1], [0, 0, 1], [1, 1, 0]]  # no 0->1 (links[1][0] = 0)
    problems = check(algorithm_from_sccl_dict(data))
    assert any("no bandwidth between rank 0 and rank 1" in p for p in problems)
    data = allgather_ring3()
    data["steps"][0]["sends"].append([0, 0, 1])  # twice over 0->1 in a one-round step
    problems = check(algorithm_from_sccl_dict(data))
    assert any("exceed" in p for p in problems)


def test_incomplete_algorithm_is_reported_by_the_verifier():
    data = allgather_ring3()
    data["steps"] = data["steps"][:1]
    problems = check(algorithm_from_sccl_dict(data))
    assert any("never arrives" in p for p in problems)


def test_maps_alone_define_the_collective():
    """Without collective chunks, input_map/output_map are the pre- and postcondition."""
    data = allgather_ring3()
    del data["collective"]
    algo = algorithm_from_sccl_dict(data)
    assert algo.collective.pre == make_collective("allgather", P).pre
    assert algo.collective.post == make_collective("allgather", P).post
    assert check(algo) == []


def test_unknown_collective_name_becomes_custom():
    data = allgather_ring3()
    data["collective"]["name"] = "Gossip"
    algo = algorithm_from_sccl_dict(data)
    assert not algo.collective.builtin and algo.collective.name == "Gossip"
    assert check(algo) == []


def test_load_schedule_reads_sccl_json(tmp_path):
    path = tmp_path / "ag.sccl.json"
    path.write_text(json.dumps(allgather_ring3()))
    assert load_schedule(path) == read_sccl_json(path)
    assert parse_sccl_json(json.dumps(allgather_ring3())) == read_sccl_json(path)


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d.update(steps={"rounds": 1}), "steps must be a list"),
        (lambda d: d["steps"][0]["sends"].append([0, 1]), r"steps\[0\].sends\[3\] must be \[chunk, src, dst"),
        (lambda d: d["steps"][0]["sends"].append([0, 0, 7]), r"dst 7 is not below 3 ranks"),
        (lambda d: d["steps"][1]["sends"].append([9, 0, 1]), "chunk 9 is not an address"),
        (lambda d: d["steps"][0].update(rounds=0), r"steps\[0\].rounds must be an integer >= 1"),
        (lambda d: d["collective"]["chunks"].append({"pre": [], "post": [1], "addr": 5}), "address 5 is required"),
        (lambda d: d["collective"]["chunks"].append({"pre": [0]}), r"collective.chunks\[3\] needs pre, post and addr"),
        (lambda d: d["topology"].update(links=[[0, 1]]), "topology.links must be a 3x3 matrix"),
        (lambda d: d["input_map"].update({"x": [0]}), "input_map key must be an integer"),
    ],
)
def test_malformed_input_names_the_field(mutate, message):
    data = allgather_ring3()
    mutate(data)
    with pytest.raises(AlgorithmError, match=message):
        algorithm_from_sccl_dict(data)


def test_not_an_sccl_algorithm(tmp_path):
    with pytest.raises(AlgorithmError, match="not an SCCL algorithm"):
        algorithm_from_sccl_dict({"format": "simcoll.algorithm"})
    path = tmp_path / "broken.json"
    path.write_text("{not json")
    with pytest.raises(AlgorithmError, match="not valid JSON"):
        read_sccl_json(path)

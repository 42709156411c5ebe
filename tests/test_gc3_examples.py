"""The GC3 paper's programs (GC3 §2, §7) compile for several sizes, verify, and
use the fused instructions §4.2 predicts, counted by closed formulas."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from simcoll.dsl.examples import (
    allpairs_allreduce,
    alltoall_two_step,
    alltonext,
    hierarchical_allreduce,
    ring_allreduce,
)
from simcoll.verify import check

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
XML = SHARED / "interop" / "msccl-xml"


def counts(program):
    c = program.instruction_counts()
    return {op: n for op, n in c.items() if n}


def executors(program):
    return sum(len(rp.executors) for rp in program.ranks)


def ring_counts(p, chunks):
    """GC3 §4.2 on a ring Allreduce: every chunk starts with a send, is
    received-reduced-sent (rrs) on P-2 ranks whose copy is later overwritten,
    received-reduced-copied-sent (rrcs) where the reduction completes, then
    received-copied-sent (rcs) on P-2 ranks and received on the last one."""
    return {"send": chunks, "rrs": chunks * (p - 2), "rrcs": chunks, "rcs": chunks * (p - 2), "recv": chunks}


@pytest.mark.parametrize("p", [8, 16])
@pytest.mark.parametrize("channels", [1, 2, 4])
def test_ring_allreduce_spread_over_channels(p, channels):
    program = ring_allreduce(p, channels)
    assert check(program) == []
    assert counts(program) == ring_counts(p, p)
    # the logical ring occupies one thread block per channel on every rank
    assert program.num_channels == channels
    assert executors(program) == p * channels
    for rp in program.ranks:
        for e in rp.executors:
            assert (e.send_peer, e.recv_peer) == ((rp.rank + 1) % p, (rp.rank - 1) % p)


@pytest.mark.parametrize("instances", [2, 3])
def test_ring_allreduce_instances(instances):
    p, channels = 8, 2
    program = ring_allreduce(p, channels, instances=instances)
    assert check(program) == []
    assert counts(program) == ring_counts(p, p * instances)
    assert program.num_channels == channels * instances
    assert program.collective.chunk_factor == p * instances


def xml_counts(name):
    text = (XML / name).read_text()
    types = re.findall(r'type="([a-z]+)"', text)
    names = {"s": "send", "r": "recv", "re": "reduce", "cpy": "copy"}
    out = {}
    for t in types:
        out[names.get(t, t)] = out.get(names.get(t, t), 0) + 1
    head = re.search(r'ngpus="(\d+)".*?', text)
    return out, int(head.group(1)), int(re.search(r'nchannels="(\d+)"', text).group(1))


@pytest.mark.skipif(not XML.is_dir(), reason="shared MSCCL XML files absent")
@pytest.mark.parametrize("name", ["allreduce_ring.xml", "allreduce_a100_ring.xml"])
def test_ring_allreduce_matches_the_real_ring_xml(name):
    expected, p, channels = xml_counts(name)
    assert counts(ring_allreduce(p, channels)) == expected


@pytest.mark.parametrize("p", [8, 16])
def test_allpairs_allreduce(p):
    program = allpairs_allreduce(p)
    assert check(program) == []
    # step 1: P(P-1) sends into scratch; P(P-1) local reduces; step 2: P(P-1) sends of results
    c = counts(program)
    assert (c["send"], c["recv"], c["reduce"]) == (2 * p * (p - 1), 2 * p * (p - 1), p * (p - 1))
    assert not {"rcs", "rrs", "rrcs", "rrc"} & set(c)  # nothing is received and sent on unchanged
    assert program.protocol == "LL"


@pytest.mark.skipif(not XML.is_dir(), reason="shared MSCCL XML files absent")
def test_allpairs_allreduce_moves_what_the_real_xml_moves():
    expected, p, _ = xml_counts("allreduce_a100_allpairs_v2.xml")
    c = counts(allpairs_allreduce(p))
    assert {op: c.get(op, 0) for op in ("send", "recv", "reduce")} == {
        op: expected.get(op, 0) for op in ("send", "recv", "reduce")
    }


def hierarchical_counts(n, g):
    """Fig. 3: intra-node ring ReduceScatter of N-chunk blocks (send, G-2 rrs,
    and an rrc whose N-chunk result is not sent on whole), inter-node ring
    ReduceScatter + AllGather of single chunks (send, N-2 rrs, rrcs, N-2 rcs,
    recv), intra-node ring AllGather (send, G-2 rcs, recv), per block."""
    b = n * g
    return {
        "send": 3 * b,
        "rrs": b * (g - 2) + b * (n - 2),
        "rrc": b,
        "rrcs": b,
        "rcs": b * (n - 2) + b * (g - 2),
        "recv": 2 * b,
    }


@pytest.mark.parametrize("n, g", [(2, 8), (4, 8), (3, 4)])
def test_hierarchical_allreduce(n, g):
    program = hierarchical_allreduce(n, g)
    assert check(program) == []
    assert counts(program) == {op: k for op, k in hierarchical_counts(n, g).items() if k}


def test_hierarchical_allreduce_with_channels_and_parallelize():
    n, g = 4, 8
    program = hierarchical_allreduce(n, g, channels=True)  # GC3 §5.1: phases on channels 0, 1, 2
    assert check(program) == []
    assert program.num_channels == 3
    assert counts(program) == hierarchical_counts(n, g)
    parallel = hierarchical_allreduce(n, g, channels=True, parallel=2)
    assert check(parallel) == []
    # parallelize(2) doubles the intra-node phases' instructions, on channels of their own
    c = counts(parallel)
    b = n * g
    assert c["send"] == 2 * b + b + 2 * b
    assert parallel.num_channels == 6


def alltoall_counts(n, g):
    """Fig. 8: per destination, chunks from the same node go directly (a local
    copy from the GPU itself); the others gather in scratch on the GPU with
    the destination's local index (local copy from itself) and cross in one
    G-chunk send per (source node, destination GPU)."""
    p = n * g
    return {"send": p * n * (g - 1) + p * (n - 1), "recv": p * n * (g - 1) + p * (n - 1), "copy": p * n}


@pytest.mark.parametrize("n, g", [(2, 8), (4, 8)])
def test_two_step_alltoall(n, g):
    program = alltoall_two_step(n, g)
    assert check(program) == []
    c = counts(program)
    assert {op: c[op] for op in ("send", "recv", "copy")} == alltoall_counts(n, g)
    # the aggregated IB sends carry G chunks
    big = [i for rp in program.ranks for e in rp.executors for i in e.instructions if i.op == "send" and i.count == g]
    assert len(big) == n * g * (n - 1)


def test_two_step_alltoall_instances():
    program = alltoall_two_step(2, 4, instances=2)
    assert check(program) == []
    assert program.collective.chunk_factor == 2


def alltonext_counts(n, g):
    """§7.4: N(G-1) in-node sends of the whole buffer; per node boundary the
    last GPU scatters G-1 chunks, G relays forward them over IB and G-1 of
    them on to the next node's first GPU (2(G-1) rcs), two local copies."""
    return {
        "send": n * (g - 1) + (n - 1) * g,
        "rcs": 2 * (n - 1) * (g - 1),
        "recv": n * (g - 1) + (n - 1) * g,
        "copy": 2 * (n - 1),
    }


@pytest.mark.parametrize("n, g", [(2, 4), (2, 8), (3, 8)])
def test_alltonext(n, g):
    program = alltonext(n, g)
    assert check(program) == []
    assert counts(program) == alltonext_counts(n, g)
    assert program.collective.name == "alltonext"


@pytest.mark.parametrize(
    "build",
    [
        lambda: ring_allreduce(8, 4),
        lambda: allpairs_allreduce(8),
        lambda: hierarchical_allreduce(2, 4, channels=True),
        lambda: alltoall_two_step(2, 4),
        lambda: alltonext(2, 4),
    ],
)
def test_compiled_examples_survive_msccl_xml_export_and_import(build):
    """Compiled Programs use only what MSCCL XML holds (input/output/scratch,
    one dependency per step, nops), so they round-trip through the exporter."""
    from simcoll.interop import msccl_xml as xml

    program = build()
    again = xml.parse_msccl_xml(xml.export_msccl_xml(program))
    assert check(again) == []
    assert again.instruction_counts() == program.instruction_counts()

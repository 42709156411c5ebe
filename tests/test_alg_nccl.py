"""nccl-ring: NCCL's rail-aligned multi-channel rings."""

from __future__ import annotations

import pytest

from simcoll import load_machine, load_topology, make_collective
from simcoll.algorithms import REGISTRY, generate
from simcoll.algorithms.nccl import nccl_ring, nccl_rings, nearest_nics
from simcoll.algorithms.ring import find_rings
from simcoll.errors import NotApplicableError
from simcoll.verify import verify

COLLECTIVES = ("allreduce", "allgather", "reducescatter", "broadcast", "reduce")


@pytest.mark.parametrize("machine", ["dgx-a100*2", "dgx-h100*2", "dgx1", "ring:8"])
@pytest.mark.parametrize("collective", COLLECTIVES)
def test_nccl_ring_implements_its_collectives(machine, collective):
    topology = load_topology(machine)
    algorithm = generate("nccl-ring", load_machine(topology), collective)
    verify(algorithm)
    rings = algorithm.metadata["rings"]
    assert len(rings) == 8 and all(sorted(r) == list(range(topology.num_ranks)) for r in rings)


def _inter_node_hops(topology, ring):
    p = len(ring)
    return [
        (ring[i], ring[(i + 1) % p])
        for i in range(p)
        if topology.node_of(ring[i]) != topology.node_of(ring[(i + 1) % p])
    ]


@pytest.mark.parametrize("machine", ["dgx-a100*2", "dgx-h100*2", "dgx-a100*3"])
def test_rings_are_rail_aligned_and_channels_leave_through_distinct_nics(machine):
    topology = load_topology(machine)
    rings = nccl_rings(topology, 8)
    local = {r: topology.ranks_of_node(topology.node_of(r)).index(r) for r in range(topology.num_ranks)}
    egress: dict[int, list[str]] = {node: [] for node in topology.nodes}
    for ring in rings:
        hops = _inter_node_hops(topology, ring)
        assert len(hops) == len(topology.nodes)  # each node is entered once and left once
        for src, dst in hops:
            assert local[src] == local[dst], (ring, src, dst)  # same rail on both ends
            nic_out, nic_in = nearest_nics(topology, src)[0], nearest_nics(topology, dst)[0]
            assert topology.component(nic_out).rail == topology.component(nic_in).rail == local[src]
            egress[topology.node_of(src)].append(nic_out)
    for node, nics in egress.items():
        assert len(nics) == len(set(nics)) == 8, (node, nics)  # one NIC per channel on every node


def test_nearest_nic_of_a_dgx_a100_gpu_is_its_own_rail():
    topology = load_topology("dgx-a100*2")
    # GPU k shares a PCIe switch with NICs k and k^1; its own rail's NIC comes first
    assert nearest_nics(topology, 0) == ["n0.nic0", "n0.nic1"]
    assert nearest_nics(topology, 9) == ["n1.nic1", "n1.nic0"]


def test_single_node_channels_are_the_disjoint_rings():
    topology = load_topology("dgx1")
    found = find_rings(topology)
    rings = nccl_rings(topology, 6)
    assert rings == found[:6]


def test_channels_option_and_chunk_factor():
    topology = load_topology("dgx-a100*2")
    a = nccl_ring(topology, make_collective("allreduce", 16, 4 * 16), channels=4)
    assert len(a.metadata["rings"]) == 4 and a.steps == 2 * 15
    verify(a)
    with pytest.raises(NotApplicableError, match="multiple of"):
        nccl_ring(topology, make_collective("allgather", 16, 3), channels=2)
    assert len(nccl_ring(topology, make_collective("allgather", 16, 6)).metadata["rings"]) == 6
    with pytest.raises(NotApplicableError, match="implements"):
        nccl_ring(topology, make_collective("alltoall", 16))


def test_registered():
    assert set(REGISTRY["nccl-ring"].collectives) == set(COLLECTIVES)

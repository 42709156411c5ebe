"""Issue 15: a cluster's routes are searched from its first node and mapped
onto every node whose swap with it is a symmetry of the topology, without
changing any answer.

Claims: (1) which ranks a GPU reaches, whether a pair is connected and which
GPUs are joined directly are the same mapped as searched; (2) the bandwidth
relation built from mapped reachability, with its large constraints held as
:class:`~simcoll.algorithm.PairSet`, is the one built from every GPU's own
search; (3) a simulation network that maps a pair's route from its image in
the first node gets the same α, bandwidth and resources, created in the same
order with the same names, as working the route out.
"""

from __future__ import annotations

import numpy as np
import pytest
import simpy

from simcoll import load_machine, load_topology
from simcoll.algorithm import PairSet
from simcoll.routes import Routes, _bandwidth_relation
from simcoll.simulator.network import FluidNetwork
from simcoll.simulator.routing import RouteIdTable

CLUSTERS = [
    "dgx-h100*3",
    "dgx-a100*3/rail",
    "perlmutter*3",
    "frontier*2",  # GCDs without a NIC reach other nodes only through their package mate
    "ndv2*3",  # host staging: no GPUDirect RDMA
    "a3-mega*2",
    "dgx2*2",  # six NVSwitch planes
    "dgx-h100*4/clos:radix=32",  # two nodes per leaf: only the swap with node 1 is a symmetry
    "summit*2",
]


def _searched(topology) -> Routes:
    """Routes that search from every GPU (no node swap)."""
    routes = Routes(topology)
    routes.swap_to_first_node = lambda src: None
    return routes


@pytest.mark.parametrize("spec", CLUSTERS)
def test_mapped_reachability_equals_searching_from_every_gpu(spec):
    topology = load_topology(spec)
    mapped, searched = Routes(topology), _searched(topology)
    p = topology.num_ranks
    assert any(mapped.swap_to_first_node(r) is not None for r in range(p))
    for s in range(p):
        assert mapped.reachable(s) == searched.reachable(s)
        assert mapped.direct_neighbours(s) == searched.direct_neighbours(s)
        assert [mapped.connected(s, d) for d in range(p)] == [searched.connected(s, d) for d in range(p)]
        assert [mapped.direct_links(s, d) for d in range(p)] == [searched.direct_links(s, d) for d in range(p)]


def test_a_swap_that_is_not_a_symmetry_is_not_used():
    # clos radix 32: nodes 0 and 1 share leaf 0, nodes 2 and 3 share leaf 1
    routes = Routes(load_topology("dgx-h100*4/clos:radix=32"))
    assert routes.swap_to_first_node(8) is not None
    assert routes.swap_to_first_node(16) is None
    assert routes.image_in_first_node(16, 3) is None


@pytest.mark.parametrize("spec", CLUSTERS)
def test_the_relation_is_the_one_searched_from_every_gpu(spec):
    topology = load_topology(spec)
    mapped = _bandwidth_relation(topology, Routes(topology))
    searched = _bandwidth_relation(topology, _searched(topology))
    assert [(c.links, c.chunks_per_round, c.label) for c in mapped] == [
        (c.links, c.chunks_per_round, c.label) for c in searched
    ]
    # every pair leaving a node is in that node's egress constraint, held compactly
    egress = [c for c in mapped if c.label.endswith("egress") and c.label.startswith("node")]
    assert all(isinstance(c.links, PairSet) for c in egress)


def test_pair_sets_read_like_frozensets():
    pairs = PairSet(np.array([7, 1, 4]), 3)  # (2, 1), (0, 1), (1, 1)
    same = frozenset({(0, 1), (1, 1), (2, 1)})
    assert pairs == same and same == pairs and hash(pairs) == hash(same)
    assert list(pairs) == sorted(same) and len(pairs) == 3
    assert (0, 1) in pairs and (1, 0) not in pairs and (5, 1) not in pairs and "x" not in pairs
    assert pairs & {(0, 1), (9, 9)} == frozenset({(0, 1)})


def _routes(spec: str, contention: bool, mirrored: bool):
    machine = load_machine(spec)
    net = FluidNetwork(simpy.Environment(), machine, contention=contention)
    if not mirrored:
        net._mirrored_recipe = lambda src, dst: None
    out = []
    for s in range(machine.num_ranks):
        for d in range(machine.num_ranks):
            if s != d:
                try:
                    alpha, bandwidth, used = net.route(s, d)
                except Exception as exc:  # the same error, naming the same pair
                    out.append((s, d, str(exc)))
                    continue
                out.append((s, d, alpha, bandwidth, [(r.id, r.key, r.name, r.capacity_Bps, w) for r, w in used]))
    return out, [(r.id, r.key, r.name, r.kind, r.capacity_Bps) for r in net.resources]


@pytest.mark.parametrize("spec", ["dgx-h100*3", "ndv2*3", "frontier*2", "dgx-h100*4/clos:radix=32"])
@pytest.mark.parametrize("contention", [True, False])
def test_mirrored_routes_equal_worked_out_routes(spec, contention):
    assert _routes(spec, contention, mirrored=True) == _routes(spec, contention, mirrored=False)


@pytest.mark.parametrize("spec", ["dgx-h100*3", "ndv2*3", "dgx-h100*4/clos:radix=32"])
def test_route_ids_read_the_routes_and_create_the_same_resources(spec):
    # The node-rotation check reads every pair's route once as resource numbers and weights, without
    # keeping it: the same numbers and weights as the route, the same resources created in the same order.
    machine = load_machine(spec)
    routes = FluidNetwork(simpy.Environment(), machine)
    ids = FluidNetwork(simpy.Environment(), machine)
    pairs = [(s, d) for s in reversed(range(machine.num_ranks)) for d in range(machine.num_ranks) if s != d]
    for s, d in pairs:
        alpha, bandwidth, used = routes.route(s, d)
        assert ids.route_ids(s, d) == (alpha, bandwidth, tuple(r.id for r, _ in used), tuple(w for _, w in used))
    assert ids.resource_calls() == routes.resource_calls()
    assert ids.route_ids(*pairs[0]) == routes.route_ids(*pairs[0])  # a kept route reads the same


@pytest.mark.parametrize("spec", ["dgx-h100*3", "ndv2*3", "dgx-a100*4", "perlmutter*4"])
def test_a_route_table_of_every_pair_at_once_reads_as_pair_by_pair(spec):
    # Every pair's route at once (the node-rotation check on 1,024 GPUs: a million pairs) gives each
    # pair's resource numbers and weights as asking pair by pair, and creates the same resources in the
    # same order - on machines nothing was worked out on before, pairs in no particular order.
    import random

    machine, fresh = load_machine(spec), load_machine(spec)
    assert fresh is not machine  # routes are kept per machine: each side works its own out
    n = machine.num_ranks
    pairs = [(s, d) for s in range(n) for d in range(n) if s != d]
    random.Random(15).shuffle(pairs)
    src, dst = (np.array(side) for side in zip(*pairs, strict=True))
    table = FluidNetwork(simpy.Environment(), machine).route_id_table(src, dst)
    one_by_one = FluidNetwork(simpy.Environment(), fresh)
    rows = [one_by_one.route_ids(*pair) for pair in pairs]
    expected = RouteIdTable.from_rows(rows)
    for field in ("alpha_s", "bandwidth_Bps", "ids", "weights"):
        assert np.array_equal(getattr(table, field), getattr(expected, field)), field
    net = FluidNetwork(simpy.Environment(), machine)
    net.route_id_table(src, dst)
    assert net.resource_calls() == one_by_one.resource_calls()


def test_a_route_table_is_left_to_pair_by_pair_where_a_node_swap_is_no_symmetry():
    machine = load_machine("dgx-h100*4/clos:radix=32")  # nodes under different leaf switches
    src, dst = np.nonzero(~np.eye(machine.num_ranks, dtype=bool))
    assert FluidNetwork(simpy.Environment(), machine).route_id_table(src, dst) is None

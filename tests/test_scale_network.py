"""Issue 15: the sparse max-min of the fluid network is bit-identical to the
dense flow × resource matrix form it replaces.

Claim: on random components (hundreds of flows over shared resources, with
repeated and fractional weights, bounds that bind and resources that fill)
``max_min_rates_numpy`` gives exactly the rates of the dense reference below, and
the pure-Python ``max_min_rates`` agrees with both to rounding. A network gathers a
component's entries from its table of routes (``RouteUsesTable``, grown as routes
appear): the same entries as from the flows' own arrays, and the same
capacities from its table of resources (``_CapacityTable``). A resource
another of every route through it dominates is left out of the max-min until
a route without its dominator arrives (``_Dominance``), with the rates of
keeping it.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import simpy

from simcoll import load_machine
from simcoll.cost_model import SwitchParams
from simcoll.simulator.fair_share import (
    TIE_TOLERANCE,
    RouteUses,
    RouteUsesTable,
    SparseComponent,
    max_min_rates,
    max_min_rates_numpy,
)
from simcoll.simulator.network import Flow, FluidNetwork
from simcoll.simulator.routing import Resource, _CapacityTable


def _dense_reference(flows, resources):
    """The dense form (flows × resources matrix, row sums with numpy)."""
    flow_list = list(flows.values())
    local = {rid: i for i, rid in enumerate(resources)}
    rows, cols, weights = [], [], []
    for i, f in enumerate(flow_list):
        for r, w in f.res:
            rows.append(i)
            cols.append(local[r.id])
            weights.append(w)
    matrix = np.zeros((len(flow_list), len(local)))
    np.add.at(matrix, (np.array(rows), np.array(cols)), np.array(weights))
    used = matrix > 0
    residual = np.array([r.effective_capacity_Bps(len(r.flows)) for r in resources.values()])
    bound = np.array([f.bound for f in flow_list])
    rates = np.zeros(len(flow_list))
    unfrozen = np.ones(len(flow_list), dtype=bool)
    while unfrozen.any():
        weight_sum = matrix[unfrozen].sum(axis=0)
        active = weight_sum > 1e-12
        share = np.full(len(local), np.inf)
        share[active] = residual[active] / weight_sum[active]
        level = max(min(share.min(), bound[unfrozen].min()), 0.0)
        limit = level * (1 + TIE_TOLERANCE)
        tight = share <= limit
        newly = unfrozen & ((bound <= limit) | used[:, tight].any(axis=1))
        rates[newly] = level
        residual -= level * matrix[newly].sum(axis=0)
        unfrozen &= ~newly
    return {f.id: float(rate) for f, rate in zip(flow_list, rates, strict=True)}


def _component(seed: int, num_flows: int, num_resources: int):
    rng = random.Random(seed)
    resources = {i: Resource(i, f"r{i}", "nvlink", rng.uniform(1e9, 5e10)) for i in range(num_resources)}
    flows = {}
    for fid in range(num_flows):
        f = Flow()
        f.id = fid
        f.bound = rng.choice([float("inf"), rng.uniform(1e8, 3e10)])
        picks = rng.sample(range(num_resources), rng.randint(1, min(6, num_resources)))
        if rng.random() < 0.2:
            picks.append(picks[0])  # a resource used twice by one flow
        f.res = [(resources[r], rng.choice([1.0, 0.5, 1 / 3, rng.uniform(0.05, 1.0)])) for r in picks]
        f.uses = RouteUses(f.res)
        for r, _ in f.res:
            r.flows[fid] = f
        flows[fid] = f
    return flows, resources


@pytest.mark.parametrize("seed", range(12))
def test_sparse_max_min_is_bit_identical_to_dense(seed):
    flows, resources = _component(seed, num_flows=30 + 40 * seed, num_resources=5 + 7 * seed)
    dense = _dense_reference(flows, resources)
    sparse = max_min_rates_numpy(flows, resources)
    assert sparse == dense
    python = max_min_rates(flows, resources)
    assert python.keys() == dense.keys()
    assert all(abs(python[k] - dense[k]) <= 1e-9 * max(1.0, dense[k]) for k in dense)


@pytest.mark.parametrize("seed", range(4))
def test_entries_gathered_from_the_route_table_are_the_flows_own(seed):
    """Routes added one by one (the table grows past its first capacity),
    shared by several flows, and a component of some of the flows in another
    order: the sparse entries and rates are those built from each flow's arrays."""
    flows, resources = _component(seed, num_flows=300, num_resources=40)
    table = RouteUsesTable()
    routes = [table.add(f.uses) for f in flows.values()]
    assert table.count == 300 and [u.index for u in routes] == list(range(300))
    rng = random.Random(seed)
    for f in flows.values():  # flows of one rank pair share its route
        f.uses = rng.choice(routes[:60])
        f.res = [(resources[rid], w) for rid, w in zip(f.uses.ids.tolist(), f.uses.weights.tolist(), strict=True)]
    picked = rng.sample(list(flows.values()), 150)
    component = {f.id: f for f in picked}
    own, gathered = SparseComponent(component, resources), SparseComponent(component, resources, table)
    for a, b in ((own.entry_flow, gathered.entry_flow), (own.entry_res, gathered.entry_res),
                 (own.values, gathered.values)):  # fmt: skip
        assert np.array_equal(a, b)
    assert np.array_equal(own.max_min(), gathered.max_min())


@pytest.mark.parametrize("seed", range(4))
def test_capacities_gathered_from_the_network_table_are_the_resources_own(seed):
    """A network keeps every resource's one-flow capacity in a table
    (``_CapacityTable``, grown as resources appear) and asks a resource
    itself only where its capacity varies with its flows (a switch's
    concurrency efficiency, TACCL Fig. 4): the residual capacities and the
    rates are those asked of every resource."""
    flows, resources = _component(seed, num_flows=200, num_resources=70)
    crowded = SwitchParams(latency_s=0.0, source="test", concurrency_efficiency=((1, 1.0), (4, 0.5)))
    plain = SwitchParams(latency_s=0.0, source="test")
    for rid, r in resources.items():  # a third degrade with their flows, a third are switches that do not
        if rid % 3:
            resources[rid] = switched = Resource(
                rid, r.name, r.kind, r.capacity_Bps, crowded if rid % 3 == 1 else plain
            )
            switched.flows = r.flows
    for f in flows.values():
        f.res = [(resources[r.id], w) for r, w in f.res]
        f.uses = RouteUses(f.res)
    table = _CapacityTable()
    for r in resources.values():
        table.add(r)
    assert table.varies.sum() == sum(1 for rid in resources if rid % 3 == 1)
    asked, gathered = SparseComponent(flows, resources), SparseComponent(flows, resources, capacities=table)
    assert np.array_equal(asked._capacity(), gathered._capacity())
    assert any(r.effective_capacity_Bps(len(r.flows)) != r.effective_capacity_Bps(1) for r in resources.values())
    assert np.array_equal(asked.max_min(), gathered.max_min())


def _pair_routes(routes):
    """A network whose rank pairs take the given routes (pair -> [(capacity, name)])."""
    net = FluidNetwork(simpy.Environment(), load_machine("ring:4"), record_utilisation=False, record_timeline=False)
    made = {}
    for pair, hops in routes.items():
        used = []
        for cap, name in hops:
            if name not in made:
                made[name] = net._resource(("test", name), name, "nvlink", cap)
            used.append((made[name], 1.0))
        net._routes[pair] = (0.0, min(cap for cap, _ in hops), tuple(used))
    return net, made


def test_a_dominated_resource_is_left_out_until_a_route_without_its_dominator_arrives():
    """A (54 GB/s) is dominated by B (47 GB/s) while every route through A
    passes B; a route through A and C (60 GB/s) ends that, and the first
    pair's route gets A back, its flow registered on it: both flows then
    share A (27 GB/s each), as without leaving anything out."""
    routes = {(0, 1): [(54e9, "A"), (47e9, "B")], (2, 3): [(54e9, "A"), (60e9, "C")]}
    rates = {}
    for prune in (True, False):
        net, made = _pair_routes(routes)
        if not prune:
            net._dominance = None
        first = net.start_flow(0, 1, 1e9)
        if prune:
            assert [r.name for r in net._fast[(0, 1)][4].by_id.values()] == ["B"]
            assert not made["A"].flows and first.rate == 47e9
        second = net.start_flow(2, 3, 1e9)
        net.env.run(until=1e-9)
        if prune:
            assert sorted(r.name for r in net._fast[(0, 1)][4].by_id.values()) == ["A", "B"]
            assert set(made["A"].flows) == {first.id, second.id}
        rates[prune] = (first.rate, second.rate)
    assert rates[True] == rates[False] == (27e9, 27e9)


def test_resources_of_equal_capacity_or_varying_with_their_flows_are_kept():
    """Domination needs a capacity larger by the margin and capacities fixed:
    parallel links of one capacity all stay, as do switch ports whose
    capacity falls with their connections."""
    net, made = _pair_routes({(0, 1): [(47e9, "A"), (47e9, "B"), (47e9 * (1 + 1e-7), "C")]})
    net.start_flow(0, 1, 1e9)
    assert sorted(r.name for r in net._fast[(0, 1)][4].by_id.values()) == ["A", "B", "C"]
    crowded = SwitchParams(latency_s=0.0, source="test", concurrency_efficiency=((1, 1.0), (4, 0.5)))
    net, made = _pair_routes({})
    port = net._resource(("test", "port"), "port", "switch_port", 90e9, crowded)
    link = net._resource(("test", "link"), "link", "nvlink", 50e9)
    net._routes[(0, 1)] = (0.0, 50e9, ((port, 1.0), (link, 1.0)))
    net.start_flow(0, 1, 1e9)
    assert sorted(r.name for r in net._fast[(0, 1)][4].by_id.values()) == ["link", "port"]

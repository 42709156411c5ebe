"""Issue 15: routes are worked out once per route shape and once per machine,
and max-min solutions are reused, without changing any result.

Claims: (1) a rank pair's α and bandwidth from the shared route shape equal a
max flow computed on that pair's own hops; (2) a second simulation network of
the same machine replays the first's routes: the same resources, created in
the same order, with the same weights; (3) a simulation that answers repeated
sharing patterns from memory gives bit-identical times to one that solves
every max-min again.
"""

from __future__ import annotations

import networkx as nx
import pytest
import simpy

from simcoll import load_machine
from simcoll.algorithms import generate
from simcoll.simulator import network as network_module
from simcoll.simulator import routing, simulate
from simcoll.simulator.fast import compiled
from simcoll.simulator.network import FluidNetwork
from simcoll.simulator.routing import Routing, route_caches

MACHINES = ["dgx1", "dgx2", "ndv2*2", "dgx-h100*2", "perlmutter*2", "hgx-h100-4*2", "ndv2*2/rail"]


def _route_from_own_hops(machine, src, dst):
    """α and bandwidth of one pair from its own hops (the per-pair computation)."""
    hops = machine.routes.hops(src, dst)
    flow = nx.DiGraph()
    for hop in hops:
        capacity = hop.count * machine.model.link(hop.type).bandwidth_Bps
        if flow.has_edge(hop.src, hop.dst):
            flow[hop.src][hop.dst]["capacity"] += capacity
        else:
            flow.add_edge(hop.src, hop.dst, capacity=capacity)
    s, d = machine.topology.gpu(src).name, machine.topology.gpu(dst).name
    path = nx.shortest_path(flow, s, d)
    latency = sum(machine.model.switch_latency_s(machine.topology.component(n).kind) for n in path[1:-1])
    alpha = max(machine.model.link(h.type).alpha_s for h in hops) + latency
    return alpha, nx.maximum_flow_value(flow, s, d), len(path) - 1


@pytest.mark.parametrize("spec", MACHINES)
def test_route_shapes_give_every_pair_its_own_max_flow(spec):
    machine = load_machine(spec)
    for src in range(machine.num_ranks):
        for dst in range(machine.num_ranks):
            if src != dst and machine.routes.hops(src, dst) is not None:  # DGX-1: some pairs need a relay GPU
                route = machine.route(src, dst)
                assert (route.alpha_s, route.bandwidth_Bps, route.hops) == _route_from_own_hops(machine, src, dst)
    # one max flow per shape: far fewer shapes than pairs on machines of identical parts
    assert len(machine._route_shapes) < machine.num_ranks * (machine.num_ranks - 1) / 4


def _described(net: FluidNetwork, src: int, dst: int):
    alpha, bandwidth, resources = net.route(src, dst)
    return alpha, bandwidth, [(r.id, r.name, r.kind, r.capacity_Bps, w) for r, w in resources]


@pytest.mark.parametrize("spec", ["dgx-h100*2", "ndv2*2", "perlmutter*2", "dgx2*2"])
def test_a_second_network_of_a_machine_replays_its_routes(spec):
    machine = load_machine(spec)
    pairs = [(s, d) for s in range(machine.num_ranks) for d in range(machine.num_ranks) if s != d][::3]
    FluidNetwork(simpy.Environment(), machine).route(*pairs[0])  # some routes worked out already
    first = FluidNetwork(simpy.Environment(), machine)
    [first.route(s, d) for s, d in pairs]  # all of them now
    # a later network asks in another order: replayed routes must equal routes worked out afresh
    # (same resources, ids, weights) on a machine that has none yet, asked in that same order
    backwards = pairs[::-1]
    replayed = FluidNetwork(simpy.Environment(), machine)
    fresh = FluidNetwork(simpy.Environment(), load_machine(spec))
    assert [_described(replayed, s, d) for s, d in backwards] == [_described(fresh, s, d) for s, d in backwards]
    assert [r.name for r in replayed.resources] == [r.name for r in fresh.resources]


class _NeverRemembers(dict):
    def get(self, key, default=None):
        return None


@pytest.mark.parametrize(("spec", "name"), [("dgx-h100*2", "multi-ring"), ("ndv2*2", "double-binary-tree")])
def test_remembered_max_min_solutions_change_no_time(spec, name, monkeypatch):
    machine = load_machine(spec)
    algorithm = generate(name, machine, "allreduce")
    remembered = simulate(algorithm, machine, 1 << 26)
    init = FluidNetwork.__init__

    def forgetful(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self._solved = _NeverRemembers()

    monkeypatch.setattr(network_module.FluidNetwork, "__init__", forgetful)
    solved_again = simulate(algorithm, machine, 1 << 26)
    assert solved_again.time_s == remembered.time_s
    assert solved_again.timeline.equals(remembered.timeline)
    assert solved_again.stats["recomputes"] == remembered.stats["recomputes"] > 0
    assert remembered.stats["recomputes_remembered"] > 0 == solved_again.stats["recomputes_remembered"]


def test_large_components_set_only_the_rates_that_change_with_the_same_times(monkeypatch):
    """A component too large to remember compares its new rates with the old
    as arrays and sets only those that changed: treating every component of
    more than 24 flows so gives the times, timeline and utilisation of
    remembering and setting them flow by flow."""
    machine = load_machine("dgx-a100*4")
    algorithm = generate("hiccl", machine, "allreduce")
    monkeypatch.setattr(network_module, "_REMEMBER_UP_TO", 1 << 20)  # every component remembered
    small = simulate(algorithm, machine, 1 << 26)
    monkeypatch.setattr(network_module, "_REMEMBER_UP_TO", network_module._NUMPY_FROM)
    large = simulate(algorithm, machine, 1 << 26)
    assert large.stats["recomputes_remembered"] < small.stats["recomputes_remembered"]
    assert large.time_s == small.time_s
    assert large.timeline.equals(small.timeline)
    assert large.utilisation.equals(small.utilisation)


class _KeepsAll:
    def kept(self, resources, pair):
        return tuple(resources), set()


@pytest.mark.parametrize(
    ("spec", "name"),
    [
        ("dgx-h100*4", "nvls-tree"),
        ("dgx-h100*4", "collnet"),
        ("perlmutter*8", "hiccl"),
        ("dgx-a100*4", "double-binary-tree"),
    ],
)
def test_leaving_dominated_resources_out_of_the_max_min_changes_no_time(spec, name, monkeypatch):
    """Without a utilisation record, resources another of their route's
    resources dominates (the PCIe hops of a GPU's path to its NIC, faster
    than the InfiniBand or Slingshot link behind it) are left out of the
    max-min: the same time and timeline as keeping them, and the same as
    a run that records utilisation (which keeps them)."""
    machine = load_machine(spec)
    algorithm = generate(name, machine, "allreduce")
    networks = []
    init = FluidNetwork.__init__

    def kept(self, *args, **kwargs):
        init(self, *args, **kwargs)
        networks.append(self)

    monkeypatch.setattr(network_module.FluidNetwork, "__init__", kept)
    monkeypatch.setattr(compiled, "ENABLED", False)  # the Python network's routes are looked at
    pruned = simulate(algorithm, machine, 1 << 26, record_utilisation=False)
    net = max(networks, key=lambda n: len(n._fast))
    assert any(len(info[2]) < len(net.route(*pair)[2]) for pair, info in net._fast.items())
    recorded = simulate(algorithm, machine, 1 << 26)
    monkeypatch.setattr(network_module, "_Dominance", _KeepsAll)
    whole = simulate(algorithm, machine, 1 << 26, record_utilisation=False)
    assert pruned.time_s == whole.time_s == recorded.time_s
    assert pruned.timeline.equals(whole.timeline) and pruned.timeline.equals(recorded.timeline)


@pytest.mark.parametrize(
    ("spec", "name"), [("ndv2*2", "double-binary-tree"), ("dgx-h100*2", "nvls-tree"), ("ndv2*4", "chain")]
)
def test_handing_a_connection_to_the_next_message_changes_no_time(spec, name, monkeypatch):
    """A pipeline's connection that passes its wire from one message to the
    next at one instant, with nothing else changing, keeps every rate: the
    instant is settled without a max-min solve, with the same times,
    timeline and utilisation as solving it (the solve re-sums each
    resource's total rate, which may differ in the last bit and so split an
    interval the handover keeps whole)."""
    machine = load_machine(spec)
    algorithm = generate(name, machine, "allreduce")
    handed = simulate(algorithm, machine, 1 << 26)
    monkeypatch.setattr(network_module.FluidNetwork, "_handover", lambda self, left, joined: False)
    solved = simulate(algorithm, machine, 1 << 26)
    assert handed.stats["handovers"] > 0 == solved.stats["handovers"]
    assert handed.stats["recomputes"] + handed.stats["handovers"] == solved.stats["recomputes"]
    assert handed.time_s == solved.time_s
    assert handed.timeline.equals(solved.timeline)

    def per_resource(utilisation):
        busy = utilisation.assign(busy=(utilisation.end_s - utilisation.start_s) * utilisation.rate_Bps)
        return busy.groupby("resource").agg(busy=("busy", "sum"), first=("start_s", "min"), last=("end_s", "max"))

    mine, theirs = per_resource(handed.utilisation), per_resource(solved.utilisation)
    assert mine.index.equals(theirs.index) and len(handed.utilisation) <= len(solved.utilisation)
    assert mine["first"].equals(theirs["first"]) and mine["last"].equals(theirs["last"])
    assert mine.busy.to_numpy() == pytest.approx(theirs.busy.to_numpy(), rel=1e-9)


def test_a_machine_sent_to_a_worker_leaves_its_caches_behind():
    """compare --jobs pickles the Machine for every task: the routes and
    recipes a simulation left on it stay in this process."""
    import pickle

    machine = load_machine("dgx-h100*2")
    simulate(generate("ring", machine, "allreduce"), machine, 1 << 20)
    assert route_caches(machine).recipes[True] and machine._route_cache
    copy = pickle.loads(pickle.dumps(machine))
    assert copy == machine and not route_caches(copy).recipes[True] and "_route_cache" not in copy.__dict__
    assert copy.route(0, 9) == machine.route(0, 9)


@pytest.mark.parametrize(
    "spec",
    [
        "dgx1",
        "dgx2*2",
        "dgx-a100*4",
        "dgx-h100*4",
        "ndv2*4/rail",
        "perlmutter*3",
        "mi300x*2",
        "dgx-h100*4/clos:radix=32",
        "dgx-h100*3/clos:radix=16",
        "ring:6",
        "hypercube:3",
    ],
)
def test_links_on_routes_are_those_of_every_pair_route(spec):
    """(4) The links on some GPU route, worked out from one node's GPUs and
    mapped onto the others where swapping two nodes is a symmetry (clusters of
    identical nodes; not a Clos fabric's nodes on different leaves), are the
    union of every rank pair's own route."""
    from simcoll import load_topology
    from simcoll.routes import Routes

    topology = load_topology(spec)
    routes = Routes(topology)
    every_pair = {
        (h.src, h.dst, h.type)
        for s in range(topology.num_ranks)
        for d in routes.reachable(s)
        for h in routes.hops(s, d)
    }
    assert Routes(topology).hops_on_routes() == every_pair


def test_bandwidth_relation_constraints_follow_their_definition():
    """(5) SCCL's relation B on a cluster: a link constraint for exactly the
    GPU pairs joined directly, and each node's ingress holds every pair
    entering it from elsewhere."""
    from simcoll import load_topology
    from simcoll.routes import Routes, bandwidth_relation

    topology = load_topology("ndv2*3")
    routes = Routes(topology)
    relation = bandwidth_relation(topology)
    p = topology.num_ranks
    links = {next(iter(c.links)): c.chunks_per_round for c in relation if c.label.startswith("link ")}
    assert links == {
        (s, d): routes.direct_links(s, d) for s in range(p) for d in routes.reachable(s) if routes.direct_links(s, d)
    }
    for node in topology.nodes:
        ranks = set(topology.ranks_of_node(node))
        (ingress,) = [c for c in relation if c.label == f"node {node} ingress"]
        assert ingress.links == {(s, d) for s in range(p) if s not in ranks for d in routes.reachable(s) if d in ranks}


@pytest.mark.parametrize("spec", ["dgx2", "dgx-h100*3", "ndv2*2/rail", "dgx-h100*4/clos:radix=32", "perlmutter*2"])
def test_breadth_first_paths_are_those_networkx_chooses(spec, monkeypatch):
    """(6) The network model's component-to-component paths (NIC binding, host
    staging) from a source's breadth-first tree, used where the shortest path
    is unique, equal NetworkX's shortest paths, and where paths tie the choice
    stays NetworkX's: every ordered pair of GPUs, NICs and switches."""
    machine = load_machine(spec)
    names = [c.name for c in machine.topology.components if c.kind in ("gpu", "nic") or "switch" in c.kind]

    def all_paths(tree_from):
        monkeypatch.setattr(routing, "_TREE_FROM", tree_from)
        net = Routing(load_machine(spec))
        out = {}
        for a in names:
            for b in names:
                for avoid in (True, False):
                    try:
                        out[(a, b, avoid)] = net._shortest_path(a, b, avoid)
                    except Exception as exc:  # noqa: BLE001 - the same pairs must fail the same way
                        out[(a, b, avoid)] = type(exc).__name__
        return out

    assert all_paths(1) == all_paths(10**9)


@pytest.mark.parametrize("spec", [*MACHINES, "dgx1", "line:4", "hub-and-spoke:5", "dgx-h100*8/clos:radix=16,oversub=2"])
def test_a_row_of_connections_is_connected_rank_by_rank(spec):
    from simcoll.routes import Routes

    topology = load_machine(spec).topology
    p = topology.num_ranks
    by_pair, by_row = Routes(topology), Routes(topology)
    for src in range(p):
        assert by_row.reachable_mask(src).tolist() == [by_pair.connected(src, d) for d in range(p)]


def test_the_vectorised_ring_search_finds_the_rings_pair_by_pair_search_found():
    # recorded before find_rings looked at a whole row of slacks at once (same tie order)
    from simcoll.algorithms.ring import find_rings

    rings = find_rings(load_machine("dgx-h100*2").topology)
    assert rings[:4] == [
        list(range(16)),
        [0, *range(15, 0, -1)],
        [0, 2, 4, 1, 3, 5, 7, 6, 8, 10, 12, 9, 11, 13, 15, 14],
        [0, 14, 15, 13, 11, 9, 12, 10, 8, 6, 7, 5, 3, 1, 4, 2],
    ]
    assert [len(r) for r in find_rings(load_machine("dgx1").topology)] == [8] * 6

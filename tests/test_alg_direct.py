"""Direct (all-pairs) algorithms for every collective: verified on rank counts
2-64 and on the built-in machines, one step per phase where every pair is
joined (GC3 §7.1.2's two-step All Pairs Allreduce), as many steps as the
longest shortest path elsewhere, and the α-β costs of their docstring."""

import networkx as nx
import pytest

from simcoll import check, custom_collective, generate, load_machine, load_topology, make_collective
from simcoll.analytic import critical_path_time_s
from simcoll.collectives import COLLECTIVES, ROOTED
from simcoll.cost_model import model_from_dict
from simcoll.errors import NotApplicableError
from simcoll.machines import Machine
from simcoll.routes import Routes

RANK_COUNTS = (2, 3, 5, 6, 8, 12, 16, 31, 64)
CHUNK_FACTORS = (1, 2, 3)
MACHINES = (
    "dgx1",
    "ndv2",
    "dgx2",
    "summit",
    "z52",
    "dgx-a100",
    "dgx-a100*2",
    "ndv2*2",
    "torus2d:3x4",
    "hypercube:3",
    "line:5",
    "ring:7",
)


def _collective(name: str, p: int, chunks: int):
    """Rooted collectives get a non-zero root that differs per chunk factor."""
    root = {1: p - 1, 2: p // 2, 3: 1}[chunks] if name in ROOTED else None
    return make_collective(name, p, chunks, root=root)


@pytest.mark.parametrize("p", RANK_COUNTS)
@pytest.mark.parametrize("coll", COLLECTIVES)
def test_direct_verifies_and_takes_one_step_per_phase_when_all_pairs_are_joined(coll, p):
    topo = load_topology(f"fully-connected:{p}")
    for chunks in CHUNK_FACTORS:
        algo = generate("direct", load_machine(topo), _collective(coll, p, chunks))
        assert check(algo, load_machine(topo)) == []
        assert algo.steps == (2 if coll == "allreduce" else 1)  # GC3 §7.1.2: All Pairs is two steps


def _steps_needed(coll: str, dist: dict[int, dict[int, int]], root: int | None) -> int:
    """Hops of the longest shortest path the collective must cover; ``dist``
    holds the hop distances between ranks over the topology's routes."""
    p = len(dist)
    if coll in ("broadcast", "scatter"):
        return max(dist[root].values())
    if coll in ("reduce", "gather"):
        return max(dist[s][root] for s in range(p))
    if coll == "alltonext":
        return max(dist[i][i + 1] for i in range(p - 1))
    if coll == "sendrecv":  # the cyclic shift: the last rank sends to rank 0 too
        return max(dist[i][(i + 1) % p] for i in range(p))
    diameter = max(max(d.values()) for d in dist.values())
    return 2 * diameter if coll == "allreduce" else diameter


@pytest.mark.parametrize("spec", MACHINES)
def test_direct_verifies_on_machines_in_as_many_steps_as_the_longest_path(spec):
    topo = load_topology(spec)
    dist = dict(nx.all_pairs_shortest_path_length(Routes(topo).logical_graph()))
    for coll in COLLECTIVES:
        for chunks in CHUNK_FACTORS:
            collective = _collective(coll, topo.num_ranks, chunks)
            algo = generate("direct", load_machine(topo), collective)
            assert check(algo, load_machine(topo)) == [], (coll, chunks)
            assert algo.steps == _steps_needed(coll, dist, collective.root), (coll, chunks)


ALPHA, BW, T_R_LAUNCH, T_R_BW = 2e-6, 20e9, 1e-6, 200e9


def t_r(nbytes: float) -> float:
    return T_R_LAUNCH + nbytes / T_R_BW


@pytest.mark.parametrize("p", [3, 8])
def test_direct_costs_are_the_docstring_closed_forms(p):
    """One link of bandwidth B per pair, one chunk per block (C = P for Allreduce)."""
    model = model_from_dict(
        {
            "name": "uniform",
            "links": {"nvlink": {"alpha_s": ALPHA, "bandwidth_Bps": BW, "source": "test"}},
            "compute": {"reduce_bandwidth_Bps": T_R_BW, "reduce_launch_s": T_R_LAUNCH, "source": "test"},
        }
    )
    machine = Machine(load_topology(f"fully-connected:{p}"), model)
    m = 3 << 20
    expected = {
        "allgather": ALPHA + m / (p * BW),
        "reducescatter": ALPHA + m / (p * BW) + t_r(m / p),
        "allreduce": 2 * ALPHA + 2 * m / (p * BW) + t_r(m / p),
        "broadcast": ALPHA + m / BW,
        "reduce": ALPHA + m / BW + t_r(m),
        "gather": ALPHA + m / (p * BW),
        "scatter": ALPHA + m / (p * BW),
        "alltoall": ALPHA + m / (p * BW),
        "alltonext": ALPHA + m / BW,
    }
    for coll, closed_form in expected.items():
        chunks = p if coll == "allreduce" else 1
        algo = generate("direct", machine, _collective(coll, p, chunks))
        assert critical_path_time_s(algo, machine, m) == pytest.approx(closed_form, rel=1e-9), coll


@pytest.mark.parametrize("p", [4, 7])
def test_all_pairs_allreduce_moves_the_ring_volume_in_two_steps_instead_of_2p_minus_2(p):
    """GC3 §7.1.2: "Ring and All Pairs exchange the same volume of data, but All
    Pairs ... uses 2 communication steps compared with Ring's 2R-2 steps"."""
    topo = load_topology(f"fully-connected:{p}")
    pairs = generate("direct", load_machine(topo), "allreduce")
    ring = generate("ring", load_machine(topo), "allreduce")
    assert (pairs.steps, ring.steps) == (2, 2 * p - 2)
    assert len(pairs.transfers) == len(ring.transfers) == 2 * p * (p - 1)


def test_direct_relays_are_named_where_a_rank_cannot_reach_another(tmp_path):
    """A one-way chain 0 -> 1 -> 2: broadcasting from 0 relays through 1;
    nothing can travel back from rank 2 to rank 0."""
    path = tmp_path / "chain.yaml"
    path.write_text(
        "name: chain\ngpus: 3\nlinks:\n"
        "  - {ends: [gpu0, gpu1], type: nvlink, directed: true}\n"
        "  - {ends: [gpu1, gpu2], type: nvlink, directed: true}\n"
    )
    topo = load_topology(str(path))
    algo = generate("direct", load_machine(topo), make_collective("broadcast", 3, 2, root=0))
    assert check(algo, load_machine(topo)) == [] and algo.steps == 2
    with pytest.raises(NotApplicableError, match="no path between rank 2 and rank 0"):
        generate("direct", load_machine(topo), make_collective("broadcast", 3, root=2))
    with pytest.raises(NotApplicableError, match="no path"):
        generate("direct", load_machine(topo), "alltoall")


def test_direct_refuses_a_collective_it_does_not_know():
    swap = custom_collective("swap", [[0], [1]], [[1], [0]])
    with pytest.raises(NotApplicableError, match="not swap"):
        generate("direct", "fully-connected:2", swap)


@pytest.mark.parametrize("spec", ["dgx1", "torus2d:4x4", "ndv2*2", "summit*2"])
@pytest.mark.parametrize("outward", [True, False])
def test_trees_are_shortest_path_trees_preferring_the_most_direct_links(spec, outward):
    """Every tree reaches each rank at its route distance from the root, over
    pairs a route joins; among the parents one level up that could take a
    rank, one with the most direct links to it is chosen."""
    from simcoll.algorithms.direct import shortest_path_trees

    topology = load_topology(spec)
    routes = Routes(topology)
    p = topology.num_ranks

    def joined(a: int, b: int) -> bool:  # parent a, child b
        return routes.connected(a, b) if outward else routes.connected(b, a)

    def links(a: int, b: int) -> int:
        return routes.direct_links(a, b) if outward else routes.direct_links(b, a)

    graph = nx.DiGraph([(a, b) for a in range(p) for b in range(p) if joined(a, b)])
    for root, parent in shortest_path_trees(topology, routes, outward).items():
        depth = nx.single_source_shortest_path_length(graph, root)
        assert set(parent) == set(range(p)) - {root}
        for child, chosen in parent.items():
            assert joined(chosen, child) and depth[chosen] + 1 == depth[child]
            level_up = [a for a in range(p) if depth.get(a) == depth[child] - 1 and joined(a, child)]
            assert links(chosen, child) == max(links(a, child) for a in level_up)

"""The ring family: single ring, bidirectional ring and multi-ring.

Claims checked: NCCL's DGX-1 rings and their (C, S, R) in SCCL Table 3; SCCL
§2.4's 7α + (7/6)·L·β for the 6-ring Allgather and §5.3's pipelined
Broadcast cost; NV-Group eqs. (1)-(3) for one ring; a bidirectional ring
halves a ring's bandwidth term; the verifier accepts every schedule on rank
counts 2-64 and the built-in machines; a clear error where no ring exists.

Size conventions (nccl-tests, :mod:`simcoll.analytic`): ``size_bytes`` is the
buffer the collective is named by. For Allgather that is the output, so each
rank's input is SCCL's L = size_bytes / P; for Broadcast it is the broadcast
buffer, L = size_bytes; NV-Group's M is ``size_bytes`` throughout.
"""

import doctest
import importlib

import pytest

from simcoll import check, generate, load_machine, load_topology, make_collective
from simcoll.algorithms import REGISTRY
from simcoll.algorithms.ring import find_ring, find_rings
from simcoll.analytic import critical_path_time_s, k_synchronous_time_s, step_time_s
from simcoll.cli import main
from simcoll.cost_model import model_from_dict
from simcoll.errors import NotApplicableError
from simcoll.machines import Machine

RING_FAMILY = ("ring", "bidirectional-ring", "multi-ring")
ROOTED = ("broadcast", "reduce")
ALPHA, BW, T_R_LAUNCH, T_R_BW = 3e-6, 40e9, 2e-6, 150e9
SIZES = (1 << 10, 1 << 20, 3 << 28)


def _uniform(spec: str) -> Machine:
    """Every link α = ALPHA, B = BW; reductions take T_R(n) = T_R_LAUNCH + n / T_R_BW."""
    model = model_from_dict(
        {
            "name": "uniform",
            "links": {"nvlink": {"alpha_s": ALPHA, "bandwidth_Bps": BW, "source": "test"}},
            "compute": {"reduce_bandwidth_Bps": T_R_BW, "reduce_launch_s": T_R_LAUNCH, "source": "test"},
        }
    )
    return Machine(load_topology(spec), model)


def t_r(nbytes: float) -> float:
    return T_R_LAUNCH + nbytes / T_R_BW


def _pairs(order):
    return [(order[i], order[(i + 1) % len(order)]) for i in range(len(order))]


# -- NCCL's rings on the DGX-1 (SCCL §2.2, Table 3) ----------------------------------------
def test_dgx1_has_ncclS_six_logical_rings_using_every_nvlink_once():
    """SCCL §2.2: two link-disjoint Hamiltonian cycles, one over double NVLinks,
    both bidirectional: six logical single-NVLink rings."""
    topo = load_topology("dgx1")
    rings = find_rings(topo)
    assert len(rings) == 6
    links = topo.gpu_link_counts()
    use: dict[tuple[int, int], int] = {}
    for order in rings:
        assert sorted(order) == list(range(8))
        for pair in _pairs(order):
            use[pair] = use.get(pair, 0) + 1
    # every directed NVLink carries exactly one ring: 8 GPUs x 6 links = 48 = 6 rings x 8 pairs
    assert use == {(a, b): links[a][b] for a in range(8) for b in range(8) if links[a][b]}
    cycles = {frozenset(frozenset(pair) for pair in _pairs(order)) for order in rings}
    assert len(cycles) == 2  # the double cycle (4 logical rings) and the single one (2)


@pytest.mark.parametrize("coll", ["allgather", "reducescatter"])
def test_dgx1_allgather_and_reducescatter_are_table3s_6_7_7(coll):
    algo = generate("multi-ring", "dgx1", coll)  # the generator's default chunk factor
    assert (algo.chunks, algo.steps, algo.rounds) == (6, 7, 7)
    assert len(algo.metadata["rings"]) == 6


def test_dgx1_allreduce_is_table3s_48_14_14():
    """C counts chunks of the whole buffer: six rings, each cut into 8 blocks."""
    algo = generate("multi-ring", "dgx1", "allreduce")
    assert (algo.chunks, algo.steps, algo.rounds) == (48, 14, 14)


@pytest.mark.parametrize("coll", ROOTED)
@pytest.mark.parametrize("m", [1, 2, 5])
@pytest.mark.parametrize("root", [0, 5])
def test_dgx1_pipelined_broadcast_and_reduce_are_table3s_6m(coll, m, root):
    topo = load_topology("dgx1")
    algo = generate("multi-ring", load_machine(topo), make_collective(coll, 8, 6 * m, root=root), m=m)
    assert (algo.chunks, algo.steps, algo.rounds) == (6 * m, 6 + m, 6 + m)
    assert check(algo, load_machine(topo)) == []


def test_cli_generates_the_table3_allgather_by_default(tmp_path, capsys):
    out = tmp_path / "ag.json"
    assert main(["algo", "generate", "multi-ring", "-t", "dgx1", "-c", "allgather", "-o", str(out)]) == 0
    assert "C=6 S=7 R=7" in capsys.readouterr().out


# -- analytic costs ---------------------------------------------------------------------
@pytest.mark.parametrize("size", SIZES)
def test_six_ring_allgather_costs_sccl_2_4(size):
    """SCCL §2.4: 7α + (7/6)·L·β, L the input per rank = size / 8, α and β of one NVLink."""
    machine = load_machine("dgx1")
    nvlink = machine.model.link("nvlink")
    alpha, beta = nvlink.alpha_s, 1 / nvlink.bandwidth_Bps
    algo = generate("multi-ring", machine, "allgather")
    expected = 7 * alpha + 7 / 6 * (size / 8) * beta
    assert critical_path_time_s(algo, machine, size) == pytest.approx(expected, rel=1e-9)
    assert step_time_s(algo, machine, size) == pytest.approx(expected, rel=1e-9)
    # ... which is SCCL §3.6's S·α + (R/C)·L·β with Table 3's (6, 7, 7)
    assert k_synchronous_time_s(algo.steps, algo.rounds, algo.chunks, size / 8, alpha, beta) == pytest.approx(expected)


@pytest.mark.parametrize("m", [1, 3, 8])
def test_pipelined_broadcast_costs_sccl_5_3(m):
    """SCCL §5.3: (6+m)·α + (6+m)/(6m)·L·β, in SCCL's k-synchronous (step) model.
    Without barriers the α of successive chunks overlap, so it is an upper bound."""
    machine = load_machine("dgx1")
    nvlink = machine.model.link("nvlink")
    alpha, beta = nvlink.alpha_s, 1 / nvlink.bandwidth_Bps
    algo = generate("multi-ring", machine, "broadcast", 6 * m, root=3, m=m)
    for size in SIZES:
        expected = (6 + m) * alpha + (6 + m) / (6 * m) * size * beta
        assert step_time_s(algo, machine, size) == pytest.approx(expected, rel=1e-9)
        assert critical_path_time_s(algo, machine, size) <= expected * (1 + 1e-12)


@pytest.mark.parametrize("spec", ["ring:2", "ring:3", "ring:5", "ring:8", "fully-connected:4", "fully-connected:7"])
def test_single_ring_is_nvgroup_eqs_1_to_3(spec):
    machine = _uniform(spec)
    p = machine.num_ranks
    for m in SIZES:
        eq1 = (p - 1) * (ALPHA + m / (p * BW) + t_r(m / p))  # ReduceScatter
        eq2 = (p - 1) * (ALPHA + m / (p * BW))  # Allgather
        for coll, expected in (("reducescatter", eq1), ("allgather", eq2), ("allreduce", eq1 + eq2)):
            algo = generate("ring", machine, coll)  # C = 1 (Allreduce: C = P, one chunk per block)
            assert critical_path_time_s(algo, machine, m) == pytest.approx(expected, rel=1e-9), coll


@pytest.mark.parametrize("p", [3, 6])
@pytest.mark.parametrize("chunks", [1, 4])
def test_single_ring_broadcast_and_reduce_are_a_pipelined_chain(p, chunks):
    """P-1 hops plus C-1 pipeline steps, each moving M/C bytes (and reducing them)."""
    machine = _uniform(f"ring:{p}")
    for m in SIZES:
        hop = ALPHA + m / (chunks * BW)
        bcast = generate("ring", machine, make_collective("broadcast", p, chunks, root=1))
        reduce = generate("ring", machine, make_collective("reduce", p, chunks, root=1))
        assert step_time_s(bcast, machine, m) == pytest.approx((p + chunks - 2) * hop, rel=1e-9)
        assert step_time_s(reduce, machine, m) == pytest.approx((p + chunks - 2) * (hop + t_r(m / chunks)), rel=1e-9)


@pytest.mark.parametrize("p", [3, 4, 7, 8])
def test_bidirectional_ring_halves_the_bandwidth_term(p):
    """Same α and T_R launch terms as one ring, half the bytes per link per step."""
    machine = _uniform(f"ring:{p}")
    for m in SIZES:
        half = m / 2
        rs = (p - 1) * (ALPHA + half / (p * BW) + t_r(half / p))
        ag = (p - 1) * (ALPHA + half / (p * BW))
        for coll, expected in (("reducescatter", rs), ("allgather", ag), ("allreduce", rs + ag)):
            single = critical_path_time_s(generate("ring", machine, coll), machine, m)
            both = critical_path_time_s(generate("bidirectional-ring", machine, coll), machine, m)
            assert both == pytest.approx(expected, rel=1e-9), coll
            bandwidth_term = (p - 1) * m / (p * BW)  # eq. (2)'s, also the ReduceScatter half of eq. (3)'s
            if coll == "allgather":
                assert single - both == pytest.approx(bandwidth_term / 2, rel=1e-9)


# -- schedules ------------------------------------------------------------------------
@pytest.mark.parametrize("coll", ROOTED)
def test_ring_chain_starts_or_ends_at_the_root_and_follows_the_ring(coll):
    topo = load_topology("ring:6")
    algo = generate("ring", load_machine(topo), make_collective(coll, 6, 4, root=3))
    order = algo.metadata["ring"]
    successor = dict(_pairs(order))
    assert all(successor[t.src] == t.dst for t in algo.transfers)
    senders = {t.src for t in algo.transfers}
    if coll == "broadcast":
        assert {t.src for t in algo.transfers_in_step(0)} == {3}
        assert senders == set(range(6)) - {order[order.index(3) - 1]}  # the chain's last rank only receives
    else:
        assert {t.dst for t in algo.transfers_in_step(algo.steps - 1)} == {3} and 3 not in senders


def test_bidirectional_ring_sends_each_half_one_way():
    algo = generate("bidirectional-ring", "ring:5", "allgather")
    order = algo.metadata["ring"]
    forward, backward = set(_pairs(order)), {(b, a) for a, b in _pairs(order)}
    ways = {}
    for t in algo.transfers:
        ways.setdefault(t.chunk // 5, set()).add("forward" if (t.src, t.dst) in forward else "backward")
        assert (t.src, t.dst) in forward | backward
    assert ways == {0: {"forward"}, 1: {"backward"}}


@pytest.mark.parametrize(
    "spec", ["dgx1", "ndv2", "dgx2", "summit", "dgx-a100", "z52", "ndv2*2", "dgx-a100*2", "ring:7"]
)
def test_multi_ring_rings_respect_the_bandwidth_relation(spec):
    """With one chunk per ring, every step is one round: the rings share no
    link beyond its multiplicity, nor a switch port or NIC beyond its count."""
    topo = load_topology(spec)
    rings = find_rings(topo)
    algo = generate("multi-ring", load_machine(topo), make_collective("allgather", topo.num_ranks, len(rings)))
    assert len(algo.metadata["rings"]) == len(rings)
    assert algo.rounds == algo.steps == topo.num_ranks - 1


def test_multi_ring_uses_the_rings_option():
    topo = load_topology("dgx1")
    options = REGISTRY["multi-ring"].parse_options({"rings": "2"})
    algo = generate("multi-ring", load_machine(topo), "allgather", **options)
    assert len(algo.metadata["rings"]) == 2 and check(algo, load_machine(topo)) == []


def test_docstring_examples_hold():
    # the package exports a function named ring, which hides the module's attribute
    module = importlib.import_module("simcoll.algorithms.ring")
    assert doctest.testmod(module).failed == 0


# -- the verifier accepts every schedule -------------------------------------------------
def _collectives(generator: str, p: int):
    """Each supported collective with three chunk factors (and two roots)."""
    for coll in REGISTRY[generator].collectives:
        factors = (1, p, 2 * p) if coll == "allreduce" else (1, 2, 3)
        for i, chunks in enumerate(factors):
            root = (p - 1, p // 2, 0)[i] if coll in ROOTED else None
            yield make_collective(coll, p, chunks, root=root)


@pytest.mark.parametrize("p", [2, 3, 5, 6, 8, 12, 16, 31, 64])
@pytest.mark.parametrize("name", RING_FAMILY)
def test_verifier_accepts_every_rank_count(name, p):
    specs = [f"ring:{p}"]
    if name == "multi-ring":  # richer graphs, where more rings fit
        specs.append({8: "hypercube:3", 12: "torus2d:3x4", 64: "torus2d:8x8"}.get(p, f"fully-connected:{p}"))
    for spec in specs:
        topo = load_topology(spec)
        for coll in _collectives(name, p):
            algo = generate(name, load_machine(topo), coll)
            assert check(algo, load_machine(topo)) == [], (spec, coll.describe())


@pytest.mark.parametrize(
    "spec", ["dgx1", "ndv2", "dgx2", "summit", "dgx-a100", "dgx-h100", "z52", "ndv2*2", "dgx-a100*2"]
)
@pytest.mark.parametrize("name", RING_FAMILY)
def test_verifier_accepts_builtin_machines(name, spec):
    topo = load_topology(spec)
    p = topo.num_ranks
    for coll in _collectives(name, p):
        algo = generate(name, load_machine(topo), coll)
        assert check(algo, load_machine(topo)) == [], coll.describe()
    for coll in REGISTRY[name].collectives:  # and the generator's default chunk factor
        assert check(generate(name, load_machine(topo), coll), load_machine(topo)) == []


# -- where rings do not apply --------------------------------------------------------------
def _write(tmp_path, name: str, links: list) -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"name: {name}\ngpus: 4\nlinks:\n" + "".join(f"  - {link}\n" for link in links))
    return str(path)


@pytest.mark.parametrize("spec", ["line:4", "line:7", "star"])
@pytest.mark.parametrize("name", RING_FAMILY)
def test_no_ring_without_a_hamiltonian_cycle(name, spec, tmp_path):
    if spec == "star":  # GPU 0 joined directly to the three others
        spec = _write(tmp_path, "star", ["[gpu0, gpu1, nvlink]", "[gpu0, gpu2, nvlink]", "[gpu0, gpu3, nvlink]"])
    topo = load_topology(spec)
    with pytest.raises(NotApplicableError, match="no Hamiltonian cycle"):
        generate(name, load_machine(topo), "allgather")


def test_one_way_ring_has_no_bidirectional_ring(tmp_path):
    one_way = [f"{{ends: [gpu{i}, gpu{(i + 1) % 4}], type: nvlink, directed: true}}" for i in range(4)]
    topo = load_topology(_write(tmp_path, "oneway", one_way))
    assert check(generate("ring", load_machine(topo), "allgather"), load_machine(topo)) == []
    assert len(generate("multi-ring", load_machine(topo), "allgather").metadata["rings"]) == 1
    with pytest.raises(NotApplicableError, match="cannot run backwards"):
        generate("bidirectional-ring", load_machine(topo), "allgather")


@pytest.mark.parametrize(
    ("name", "coll", "options", "message"),
    [
        ("ring", "alltoall", {}, "not alltoall"),
        ("bidirectional-ring", "broadcast", {}, "not broadcast"),
        ("multi-ring", "allreduce", {"rings": 7}, "only 6"),
        ("multi-ring", "allgather", {"m": 2}, "option m"),
        ("multi-ring", "broadcast", {"m": 4}, "multiple of 24"),
        ("ring", "allgather", {"ring": [0, 2, 1, 3, 4, 5, 6, 7]}, "no route from rank 0 to rank 2"),
        ("multi-ring", "allgather", {"rings": 7}, "need at least 7 chunks"),
    ],
)
def test_clear_errors(name, coll, options, message):
    topo = load_topology("dgx1" if "ring" not in options else "ring:8")
    with pytest.raises(NotApplicableError, match=message):
        generate(name, load_machine(topo), coll, **options)


def test_ring_search_has_a_time_limit():
    with pytest.raises(NotApplicableError, match="within 0 s"):
        find_rings(load_topology("dgx1"), time_limit_s=0)
    assert find_ring(load_topology("dgx1"))  # the default limit is ample


def test_ring_search_is_not_bounded_by_python_recursion():
    """A ring visits every rank, so the search goes as deep as the machine is
    large: on 1,024 GPUs (dgx-h100*128) a recursive search overflowed Python's
    stack. With the recursion limit below the rank count the rings of
    dgx-h100*16 (128 ranks, later rings searched) are still found."""
    import sys

    from simcoll.algorithms.ring import find_rings

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(100)
    try:
        rings = find_rings(load_topology("dgx-h100*16"))
    finally:
        sys.setrecursionlimit(limit)
    assert len(rings) == 8 and all(sorted(r) == list(range(128)) for r in rings)


def test_path_search_and_tree_depths_go_deeper_than_python_recursion():
    """The search behind chains and rings, and the depths of a tree, follow
    paths as long as the machine has ranks: with the recursion limit below the
    length they still find a Hamiltonian path that must backtrack (ranks
    0..n-1 where only i -> i + 1 and the last -> 0 close; every neighbour list
    offers the dead end n - 1 first), and the depths of a 300-deep chain given
    leaves first; a parent map with a cycle is refused."""
    import sys

    from simcoll.algorithms.common import hamiltonian_path, tree_depths

    n = 300

    def neighbours(v: int) -> list[int]:
        return [n - 1, v + 1] if v + 1 < n - 1 else [n - 1] if v < n - 1 else []

    chain = {v: v - 1 for v in reversed(range(1, n))}
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(150)
    try:
        path = hamiltonian_path(0, neighbours, n, close=lambda a, b: a == n - 1 and b == 0)
        depths = tree_depths(chain, 0)
    finally:
        sys.setrecursionlimit(limit)
    assert path == list(range(n))
    assert depths == {v: v for v in range(n)}
    with pytest.raises(ValueError, match="not a tree"):
        tree_depths({1: 2, 2: 1}, 0)

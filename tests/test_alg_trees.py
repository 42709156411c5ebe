"""Tree generators: binomial tree, pipelined chain and NCCL's double binary tree.

The verifier accepts them on 2-64 ranks, three chunk factors and non-zero
roots, and on the built-in machines; they refuse topologies lacking a route
they need, naming the pair; on a uniform machine their analytic times are their
closed forms, and the double binary tree Allreduce is NV-Group eq. (5) plus the
pipeline's streaming term that eq. (5) leaves out.
"""

import doctest
import math

import pytest

from simcoll import check, load_machine, load_topology, make_collective
from simcoll.algorithms import REGISTRY, generate, trees
from simcoll.algorithms.trees import double_binary_tree_pair, tree_height
from simcoll.analytic import critical_path_time_s, step_time_s
from simcoll.collectives import ROOTED
from simcoll.cost_model import model_from_dict
from simcoll.errors import NotApplicableError
from simcoll.machines import Machine

ALPHA, BW, T_R_LAUNCH, T_R_BW = 2e-6, 20e9, 1e-6, 200e9
SIZE = 3 << 24  # 48 MiB
CHUNK_FACTORS = (1, 2, 5)
RANKS = (2, 3, 5, 6, 8, 12, 16, 31)
CASES = [
    ("binomial-tree", "broadcast"),
    ("binomial-tree", "reduce"),
    ("binomial-tree", "gather"),
    ("binomial-tree", "scatter"),
    ("binomial-tree", "allreduce"),
    ("chain", "broadcast"),
    ("chain", "reduce"),
    ("chain", "allreduce"),
    ("double-binary-tree", "allreduce"),
    ("double-binary-tree", "broadcast"),
    ("double-binary-tree", "reduce"),
]


def t_r(nbytes: float) -> float:
    return T_R_LAUNCH + nbytes / T_R_BW


def uniform(spec: str) -> Machine:
    """Every link α = 2 µs, B = 20 GB/s; T_R(n) = 1 µs + n / 200 GB/s."""
    model = model_from_dict(
        {
            "name": "uniform",
            "links": {"nvlink": {"alpha_s": ALPHA, "bandwidth_Bps": BW, "source": "test"}},
            "compute": {"reduce_bandwidth_Bps": T_R_BW, "reduce_launch_s": T_R_LAUNCH, "source": "test"},
        }
    )
    return Machine(load_topology(spec), model)


def root_for(coll: str, p: int, i: int) -> int | None:
    """Roots 0, P-1 and P/2 in turn, one per chunk factor."""
    return [0, p - 1, p // 2][i] if coll in ROOTED else None


# -- correctness ------------------------------------------------------------------
@pytest.mark.parametrize("p", RANKS)
@pytest.mark.parametrize("name,coll", CASES)
def test_verified_on_fully_connected_for_three_chunk_factors_and_roots(name, coll, p):
    topo = load_topology(f"fully-connected:{p}")
    for i, chunks in enumerate(CHUNK_FACTORS):
        root = root_for(coll, p, i)
        algo = generate(name, load_machine(topo), make_collective(coll, p, chunks, root=root))
        assert check(algo, load_machine(topo)) == [], (chunks, root)


@pytest.mark.parametrize("name,coll", CASES)
def test_verified_on_64_ranks(name, coll):
    """64 GPUs on one switch: every pair has a route, as through an NVSwitch."""
    topo = load_topology("hub-and-spoke:64")
    chunks = CHUNK_FACTORS[CASES.index((name, coll)) % 3]
    algo = generate(name, load_machine(topo), make_collective(coll, 64, chunks, root=37 if coll in ROOTED else None))
    assert check(algo, load_machine(topo)) == []


@pytest.mark.parametrize("name", ["binomial-tree", "double-binary-tree"])
def test_allreduce_verified_on_64_fully_connected_ranks(name):
    topo = load_topology("fully-connected:64")
    assert check(generate(name, load_machine(topo), "allreduce", 3), load_machine(topo)) == []


@pytest.mark.parametrize("machine", ["dgx2", "summit", "ndv2*2", "dgx-a100*2", "ndv2", "dgx-h100"])
@pytest.mark.parametrize("name,coll", CASES)
def test_verified_on_built_in_machines(machine, name, coll):
    """Their PCIe trees, host memory and networks give every GPU pair a route."""
    topo = load_topology(machine)
    algo = generate(name, load_machine(topo), coll, 2, root=topo.num_ranks - 1 if coll in ROOTED else None)
    assert check(algo, load_machine(topo)) == []


def test_on_dgx1_binomial_and_chain_use_nvlinks_and_the_double_tree_needs_missing_pairs():
    """SCCL's DGX-1 has NVLinks only. The binomial tree's edges join ranks one
    bit apart, all NVLinked (hybrid cube-mesh), whatever the root; the chain
    follows NVLinks; the double binary tree needs a pair that has no NVLink."""
    topo = load_topology("dgx1")
    for coll in ("broadcast", "reduce", "gather", "scatter"):
        for root in range(8):
            assert check(generate("binomial-tree", load_machine(topo), coll, 1, root=root), load_machine(topo)) == []
    for coll in ("broadcast", "reduce", "allreduce"):
        assert (
            check(
                generate("chain", load_machine(topo), coll, 4, root=5 if coll in ROOTED else None), load_machine(topo)
            )
            == []
        )
    with pytest.raises(NotApplicableError, match=r"double-binary-tree: dgx1 has no route from rank \d to rank \d"):
        generate("double-binary-tree", load_machine(topo), "allreduce")


def test_refuses_topologies_without_the_routes_it_needs():
    ring = load_topology("ring:8")
    with pytest.raises(NotApplicableError, match="binomial-tree: ring:8 has no route from rank 0 to rank 2"):
        generate("binomial-tree", load_machine(ring), "broadcast")
    with pytest.raises(NotApplicableError, match=r"double-binary-tree: ring:8 has no route from rank \d to rank \d"):
        generate("double-binary-tree", load_machine(ring), "allreduce")
    # a chain only needs a path, which a ring has from every rank
    assert check(generate("chain", load_machine(ring), "broadcast", root=3), load_machine(ring)) == []
    with pytest.raises(NotApplicableError, match="no path through every rank starting at rank 2"):
        generate("chain", "line:5", "broadcast", root=2)
    with pytest.raises(NotApplicableError, match="must start at the root, rank 1"):
        generate("chain", load_machine(ring), "broadcast", root=1, order=[0, 1, 2, 3, 4, 5, 6, 7])
    with pytest.raises(NotApplicableError, match="ring:8 has no route from rank 1 to rank 3"):
        generate("chain", load_machine(ring), "broadcast", root=0, order=[0, 1, 3, 2, 4, 5, 6, 7])
    with pytest.raises(NotApplicableError, match="implements broadcast, reduce, allreduce, not allgather"):
        generate("chain", load_machine(ring), "allgather")


def test_chain_follows_the_given_order():
    order = [3, 2, 1, 0, 7, 6, 5, 4]
    algo = generate("chain", "fully-connected:8", "broadcast", 4, root=3, order=order)
    pairs = {(t.src, t.dst) for t in algo.transfers}
    assert pairs == set(zip(order, order[1:], strict=False))


# -- the double binary tree's shape (Sanders et al.; NV-Group §3.1.2) -----------------
@pytest.mark.parametrize("n", range(2, 65))
def test_double_binary_tree_pair_is_complementary_and_log_deep(n):
    tree1, top1, tree2, top2 = double_binary_tree_pair(range(n))
    for tree, top in ((tree1, top1), (tree2, top2)):
        assert set(tree) | {top} == set(range(n))  # spans every rank
        assert all(list(tree.values()).count(parent) <= 2 for parent in tree.values())  # binary
        q = n - n % 2
        assert tree_height(tree, top) == math.ceil(math.log2(q))
    inner1, inner2 = set(tree1.values()), set(tree2.values())
    assert not inner1 & inner2  # each rank an inner node of at most one tree
    if n >= 8:  # and from 8 ranks on, no pair of ranks carries both trees
        assert not {frozenset(e) for e in tree1.items()} & {frozenset(e) for e in tree2.items()}


def test_double_binary_tree_gives_each_tree_half_the_buffer():
    algo = generate("double-binary-tree", "fully-connected:8", "allreduce", 16)
    top1, top2 = algo.metadata["tops"]
    into_top = {t.chunk for t in algo.transfers if t.op == "reduce" and t.dst == top1}
    assert into_top == set(range(8))  # the first tree reduces chunks 0-7 at its top, the second 8-15
    assert {t.chunk for t in algo.transfers if t.op == "reduce" and t.dst == top2} == set(range(8, 16))


# -- analytic cost on a uniform machine ------------------------------------------------
@pytest.mark.parametrize("p", [2, 3, 5, 8, 12, 16])
def test_binomial_broadcast_reduce_allreduce_cost(p):
    """⌈log2 P⌉ steps of whole buffers; without barriers the tree's depth,
    ⌊log2 P⌋, counts (a rank may send to several peers at once)."""
    machine = uniform(f"fully-connected:{p}")
    steps, depth = math.ceil(math.log2(p)), math.floor(math.log2(p))
    hop, reduce_hop = ALPHA + SIZE / BW, ALPHA + SIZE / BW + t_r(SIZE)
    bcast = generate("binomial-tree", machine, "broadcast", 3, root=p - 1)
    assert bcast.steps == steps
    assert step_time_s(bcast, machine, SIZE) == pytest.approx(steps * hop, rel=1e-9)
    assert critical_path_time_s(bcast, machine, SIZE) == pytest.approx(depth * hop, rel=1e-9)
    red = generate("binomial-tree", machine, "reduce", 3, root=p // 2)
    assert step_time_s(red, machine, SIZE) == pytest.approx(steps * reduce_hop, rel=1e-9)
    assert critical_path_time_s(red, machine, SIZE) == pytest.approx(depth * reduce_hop, rel=1e-9)
    allred = generate("binomial-tree", machine, "allreduce", 3)
    assert allred.steps == 2 * steps
    assert critical_path_time_s(allred, machine, SIZE) == pytest.approx(depth * (hop + reduce_hop), rel=1e-9)


@pytest.mark.parametrize("p", [2, 3, 5, 8, 12, 16])
@pytest.mark.parametrize("coll", ["gather", "scatter"])
def test_binomial_gather_scatter_cost(coll, p):
    """⌈log2 P⌉α + (P-1)/P·M/B: each block crosses log-many hops but the
    message sizes double, so the bandwidth term is that of one exchange."""
    machine = uniform(f"fully-connected:{p}")
    algo = generate("binomial-tree", machine, coll, 2, root=1)
    expected = math.ceil(math.log2(p)) * ALPHA + (p - 1) / p * SIZE / BW
    assert step_time_s(algo, machine, SIZE) == pytest.approx(expected, rel=1e-9)
    if p & (p - 1) == 0:
        assert critical_path_time_s(algo, machine, SIZE) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("p", [2, 5, 8])
@pytest.mark.parametrize("chunks", [1, 4, 9])
def test_pipelined_chain_cost(p, chunks):
    """P-1 hops for the first chunk, then one chunk time (and one step) per further chunk."""
    machine = uniform(f"ring:{p}")
    c = SIZE / chunks
    stream = (chunks - 1) * c / BW
    bcast = generate("chain", machine, "broadcast", chunks, root=p - 1)
    assert bcast.steps == (p - 1) + (chunks - 1)
    assert step_time_s(bcast, machine, SIZE) == pytest.approx(bcast.steps * (ALPHA + c / BW), rel=1e-9)
    assert critical_path_time_s(bcast, machine, SIZE) == pytest.approx((p - 1) * (ALPHA + c / BW) + stream, rel=1e-9)
    red = generate("chain", machine, "reduce", chunks, root=p - 1)
    expected = (p - 1) * (ALPHA + c / BW + t_r(c)) + stream
    assert critical_path_time_s(red, machine, SIZE) == pytest.approx(expected, rel=1e-9)
    allred = generate("chain", machine, "allreduce", chunks)
    assert allred.steps == 2 * (p - 1) + (chunks - 1)
    expected = 2 * (p - 1) * (ALPHA + c / BW) + (p - 1) * t_r(c) + stream
    assert critical_path_time_s(allred, machine, SIZE) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("m", [1, 2, 4])
def test_chain_on_dgx1_has_the_steps_of_one_of_nccls_pipelined_rings(m):
    """SCCL Table 3: NCCL's pipelined Broadcast/Reduce on DGX-1 (whose trees are
    paths, SCCL §5.3) has S = R = 6 + m with m chunks per ring; one chain over
    the 8 GPUs' NVLinks with m chunks takes the same."""
    topo = load_topology("dgx1")
    for coll in ("broadcast", "reduce"):
        algo = generate("chain", load_machine(topo), coll, m, root=2)
        assert (algo.steps, algo.rounds) == (6 + m, 6 + m)


def dbt_allreduce_closed_form(depth: int, chunks: int, size: float) -> float:
    """2d(α + c/B) + d·T_R(c) + (k-1)c/B, k = ⌈C/2⌉ chunks per tree, c = M/C."""
    c = size / chunks
    return 2 * depth * (ALPHA + c / BW) + depth * t_r(c) + ((chunks + 1) // 2 - 1) * c / BW


def nvgroup_eq5(p: int, size: float) -> float:
    """NV-Group eq. (5): 2·log2 p·(t_s + M/(2pB)) + log2 p·T_R(M/(2p))."""
    return 2 * math.log2(p) * (ALPHA + size / (2 * p * BW)) + math.log2(p) * t_r(size / (2 * p))


@pytest.mark.parametrize("p", [8, 9, 12, 16, 17, 32])
@pytest.mark.parametrize("chunks", [2, 7, 24])
def test_double_binary_tree_allreduce_is_its_closed_form(p, chunks):
    machine = uniform(f"fully-connected:{p}")
    algo = generate("double-binary-tree", machine, "allreduce", chunks)
    depth = math.ceil(math.log2(p - p % 2))
    assert algo.metadata["depth"] == depth
    assert algo.steps == 2 * depth + (chunks + 1) // 2 - 1  # up and down, then one step per further chunk
    assert critical_path_time_s(algo, machine, SIZE) == pytest.approx(
        dbt_allreduce_closed_form(depth, chunks, SIZE), rel=1e-9
    )


@pytest.mark.parametrize("p", [8, 16, 32])
def test_double_binary_tree_allreduce_is_nvgroup_eq5_plus_the_pipeline_stream(p):
    """With eq. (5)'s own assumptions, P a power of two (depth log2 P) and chunks
    of M/(2P) (the generator's default, C = 2P), the time is eq. (5) plus the
    (P-1)·M/(2PB) it takes to stream a tree's other P-1 chunks after the first:
    eq. (5) is the latency of one chunk through the 2·log2 p pipeline stages.
    So it is close for small messages and under by up to M/(2B) for large ones."""
    machine = uniform(f"fully-connected:{p}")
    algo = generate("double-binary-tree", machine, "allreduce")
    assert algo.chunks == 2 * p
    for size in (4 << 10, 1 << 20, SIZE):
        t = critical_path_time_s(algo, machine, size)
        assert t == pytest.approx(nvgroup_eq5(p, size) + (p - 1) * size / (2 * p * BW), rel=1e-9)
    small = 4 << 10
    assert critical_path_time_s(algo, machine, small) == pytest.approx(nvgroup_eq5(p, small), rel=0.01)
    assert critical_path_time_s(algo, machine, SIZE) > 1.4 * nvgroup_eq5(p, SIZE)


@pytest.mark.parametrize("p", [9, 16, 17])
def test_double_binary_tree_broadcast_and_reduce_cost(p):
    """The root sits above both trees over the other P-1 ranks: one hop more."""
    machine = uniform(f"fully-connected:{p}")
    chunks = 10
    c = SIZE / chunks
    depth = 1 + math.ceil(math.log2((p - 1) - (p - 1) % 2))
    stream = (chunks // 2 - 1) * c / BW
    bcast = generate("double-binary-tree", machine, "broadcast", chunks, root=p // 3)
    assert bcast.metadata["depth"] == depth and bcast.steps == depth + chunks // 2 - 1
    assert critical_path_time_s(bcast, machine, SIZE) == pytest.approx(depth * (ALPHA + c / BW) + stream, rel=1e-9)
    red = generate("double-binary-tree", machine, "reduce", chunks, root=p - 1)
    expected = depth * (ALPHA + c / BW + t_r(c)) + stream
    assert critical_path_time_s(red, machine, SIZE) == pytest.approx(expected, rel=1e-9)


def test_registry_lists_the_tree_generators():
    assert REGISTRY["binomial-tree"].collectives == ("broadcast", "reduce", "gather", "scatter", "allreduce")
    assert REGISTRY["chain"].collectives == ("broadcast", "reduce", "allreduce")
    assert REGISTRY["double-binary-tree"].collectives == ("allreduce", "broadcast", "reduce")
    assert "order" in REGISTRY["chain"].options


def test_docstring_examples():
    assert doctest.testmod(trees).failed == 0

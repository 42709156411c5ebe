"""HiCCL compositions (Hidayetoğlu et al.): the eight collectives of Table 1
from multicast / reduction / fence (Table 2), factorised over a hierarchy
with ring(k), multi-NIC striping, GPU-to-NIC bindings and pipelining."""

from collections import Counter
from dataclasses import replace

import numpy as np
import pytest

from simcoll import Algorithm, check, generate, load_machine, load_topology, make_collective, simulate
from simcoll.algorithms import REGISTRY
from simcoll.algorithms.hiccl import COLLECTIVES, MULTI_STEP, default_hierarchy, hiccl, table2
from simcoll.algorithms.hiccl_primitives import (
    Hierarchy,
    Plan,
    compose,
    multicast,
    nic_binding,
    node_relative_chunks,
    reduction,
    stages,
    stripe_leaders,
)
from simcoll.analytic import critical_path_time_s, step_time_s
from simcoll.cost_model import model_from_dict
from simcoll.errors import NotApplicableError, SimcollError
from simcoll.machines import Machine
from simcoll.routes import Routes

ROOTED = ("broadcast", "reduce", "scatter", "gather")
FORMS = [(c, s) for c in COLLECTIVES for s in ("single", "multi") if s == "single" or c in MULTI_STEP]


def _collective(name: str, p: int, chunks: int):
    return make_collective(name, p, chunks, root=(p - 1 if name in ROOTED else None))


def _crossing(algo: Algorithm, topo) -> int:
    """Chunk transfers whose two ranks sit on different nodes."""
    return sum(topo.node_of(t.src) != topo.node_of(t.dst) for t in algo.transfers)


# -- correctness: every Table 1 collective, single- and multi-step -------------------
@pytest.mark.parametrize("factors", [(2,), (2, 4), (2, 2, 2), (4, 2), (3, 3), (3, 5)])
@pytest.mark.parametrize(("coll", "steps"), FORMS)
def test_every_composition_verifies_on_every_hierarchy(coll, steps, factors):
    p = Hierarchy(factors).size
    topo = load_topology(f"fully-connected:{p}")
    for chunks in (1, 2, p):
        algo = hiccl(topo, _collective(coll, p, chunks), hierarchy=factors, steps=steps)
        assert check(algo, load_machine(topo)) == [], (chunks, algo.metadata)
    # ring(k) across the outermost level and a pipeline of depth 3
    if not (coll == "allreduce" and steps == "single" and factors[0] > 1):
        algo = hiccl(topo, _collective(coll, p, 3), hierarchy=factors, ring=factors[0], pipeline=3, steps=steps)
        assert check(algo, load_machine(topo)) == [], algo.metadata


@pytest.mark.parametrize(
    ("p", "factors", "colls"),
    [
        (6, (2, 3), COLLECTIVES),
        (16, (2, 2, 2, 2), COLLECTIVES),
        (31, (31,), ("allgather", "reducescatter", "allreduce", "broadcast")),
        (64, (4, 4, 4), ("allgather", "allreduce", "reduce")),
    ],
)
def test_larger_and_non_power_of_two_rank_counts(p, factors, colls):
    topo = load_topology(f"fully-connected:{p}")
    for coll in colls:
        algo = hiccl(topo, _collective(coll, p, 1), hierarchy=factors)
        assert check(algo, load_machine(topo)) == [], coll


@pytest.mark.parametrize("machine", ["dgx-a100*2", "ndv2*2", "dgx-h100*2", "perlmutter*4", "summit*2"])
@pytest.mark.parametrize(("coll", "steps"), FORMS)
def test_every_composition_verifies_on_clusters(machine, coll, steps):
    topo = load_topology(machine)
    p, nodes = topo.num_ranks, len(topo.nodes)
    per_node = p // nodes
    for chunks in (1, 2, 3):
        algo = hiccl(topo, _collective(coll, p, chunks), steps=steps)
        assert check(algo, load_machine(topo)) == [], chunks
    striped = {"nics": per_node, "pipeline": 2}
    if not (coll == "allreduce" and steps == "single"):
        striped["ring"] = nodes
    algo = hiccl(topo, _collective(coll, p, 4), steps=steps, **striped)
    assert check(algo, load_machine(topo)) == [], striped


@pytest.mark.parametrize(
    "machine", ["dgx1", "dgx2", "summit", "ndv2", "dgx-a100", "dgx-h100", "perlmutter", "frontier", "aurora"]
)
def test_every_collective_verifies_on_single_node_machines(machine):
    topo = load_topology(machine)
    p = topo.num_ranks
    for coll, steps in FORMS:
        for chunks in (1, 2, 3):
            assert check(hiccl(topo, _collective(coll, p, chunks), steps=steps), load_machine(topo)) == [], (
                coll,
                steps,
                chunks,
            )


def test_registered_for_the_eight_collectives_of_table_1_with_cli_options():
    gen = REGISTRY["hiccl"]
    assert sorted(gen.collectives) == sorted(
        ["scatter", "broadcast", "gather", "reduce", "alltoall", "allgather", "reducescatter", "allreduce"]
    )
    options = gen.parse_options(
        {"hierarchy": "2,2,4", "ring": "2", "pipeline": "4", "nics": "8", "binding": "packed", "steps": "multi"}
    )
    topo = load_topology("dgx-a100*2")
    algo = generate("hiccl", load_machine(topo), "allreduce", chunks=32, **options)
    assert algo.metadata["hierarchy"] == [2, 2, 4] and check(algo, load_machine(topo)) == []
    with pytest.raises(SimcollError, match="binding"):
        gen.parse_options({"binding": "scattered"})


# -- the machine description ----------------------------------------------------------
def test_default_hierarchy_is_nodes_by_gpus_or_a_routable_factorisation():
    assert default_hierarchy(load_topology("dgx-a100*2")) == (2, 8)
    assert default_hierarchy(load_topology("perlmutter*4")) == (4, 4)
    assert default_hierarchy(load_topology("dgx2")) == (16,)
    # DGX-1's hybrid cube mesh: two fully connected quads, GPU i joined to GPU i+4
    assert default_hierarchy(load_topology("dgx1")) == (2, 4)


@pytest.mark.parametrize(("p", "factors"), [(8, (2, 2)), (8, (3, 3)), (16, (2, 8, 2)), (15, (4, 4))])
def test_a_hierarchy_whose_product_is_not_p_is_rejected(p, factors):
    topo = load_topology(f"fully-connected:{p}")
    with pytest.raises(NotApplicableError, match=rf"product {Hierarchy(factors).size}.*{p} ranks"):
        hiccl(topo, _collective("allgather", p, 1), hierarchy=factors)
    with pytest.raises(NotApplicableError, match="product"):
        generate("hiccl", load_machine(topo), "allgather", **REGISTRY["hiccl"].parse_options({"hierarchy": "2,2"}))


def test_clear_errors_where_hiccl_does_not_apply():
    fc8, cluster = load_topology("fully-connected:8"), load_topology("dgx-a100*2")
    cases = [
        (fc8, "allgather", {"hierarchy": (2, 0, 4)}, "positive"),
        (fc8, "allgather", {"hierarchy": (2, 4), "ring": 4}, r"ring\(4\).*hierarchy\[0\] = 2"),
        (fc8, "scatter", {"steps": "multi"}, "no multi-step composition of scatter"),
        (fc8, "allreduce", {"hierarchy": (4, 2), "ring": 4, "steps": "single"}, "steps=multi"),
        (fc8, "allgather", {"nics": 2}, "striping"),
        (fc8, "allgather", {"binding": "packed"}, "no NIC"),
        (cluster, "allgather", {"nics": 9}, "9 stripes"),
        (load_topology("summit*2"), "allgather", {"binding": "bijective"}, "one NIC per GPU"),
        (load_topology("ring:6"), "allgather", {"hierarchy": (6,)}, "no route"),
    ]
    for topo, coll, options, message in cases:
        with pytest.raises(NotApplicableError, match=message):
            hiccl(topo, _collective(coll, topo.num_ranks, 1), **options)
    with pytest.raises(NotApplicableError, match="implements"):
        hiccl(fc8, make_collective("alltonext", 8, 1))


# -- HiCCL's claims ----------------------------------------------------------------------
def test_hierarchical_broadcast_sends_one_copy_per_remote_node():
    """§2.2 / Fig. 1: the direct Broadcast sends every remote GPU its own copy;
    the hierarchical one sends one copy per remote node, then spreads it inside."""
    topo = load_topology("perlmutter*4")  # 4 nodes x 4 GPUs
    bcast = _collective("broadcast", 16, 2)
    assert _crossing(hiccl(topo, bcast, hierarchy=(16,)), topo) == 12 * 2
    assert _crossing(hiccl(topo, bcast), topo) == 3 * 2


@pytest.mark.parametrize("machine", ["dgx-a100*2", "perlmutter*4", "summit*2"])
def test_multi_step_hierarchical_allreduce_cuts_inter_node_traffic(machine):
    """§2.2, §3.3: flat direct All-reduce sends every chunk to every remote rank,
    P(P−G)·C chunks; Reduce-scatter then All-gather sends each block to each
    remote owner, 2(P−G)·C; factorised over (nodes, GPUs), one partial per
    remote node, 2(N−1)·C."""
    topo = load_topology(machine)
    p, n = topo.num_ranks, len(topo.nodes)
    g, c = p // n, p
    allreduce = make_collective("allreduce", p, c)
    flat_single = hiccl(topo, allreduce, hierarchy=(p,), steps="single")
    flat_multi = hiccl(topo, allreduce, hierarchy=(p,), steps="multi")
    hierarchical = hiccl(topo, allreduce, steps="multi")
    assert _crossing(flat_single, topo) == p * (p - g) * c
    assert _crossing(flat_multi, topo) == 2 * (p - g) * c
    assert _crossing(hierarchical, topo) == 2 * (n - 1) * c < _crossing(flat_multi, topo)


@pytest.mark.parametrize("p", [3, 5, 8])
def test_single_step_allreduce_moves_p_times_p_minus_1_buffers(p):
    """§3.2: the single-step All-reduce moves p(p−1)·d, Reduce-scatter then
    All-gather 2(p−1)·d (d = C chunks here)."""
    topo, c = load_topology(f"fully-connected:{p}"), 2 * p
    allreduce = make_collective("allreduce", p, c)
    assert len(hiccl(topo, allreduce, hierarchy=(p,), steps="single").transfers) == p * (p - 1) * c
    assert len(hiccl(topo, allreduce, hierarchy=(p,), steps="multi").transfers) == 2 * (p - 1) * c


def test_tree_factorisation_is_figure_6a():
    """§4.3: a Broadcast on 12 GPUs factorised as {2, 2, 3}: ① g0→g6,
    ② g0→g3 and g6→g9, ③ the staging GPUs multicast inside their nodes."""
    hops = {(t.src, t.dst, t.step) for t in multicast(0, range(12), [0], Plan(Hierarchy((2, 2, 3))))}
    assert {h for h in hops if h[2] == 0} == {(0, 6, 0)}
    assert {h for h in hops if h[2] == 1} == {(0, 3, 1), (6, 9, 1)}
    assert {(s, d) for s, d, st in hops if st == 2} == {(s, s + i) for s in (0, 3, 6, 9) for i in (1, 2)}


def test_striped_ring_is_figure_6b():
    """§4.4: ring(4) across four nodes of three GPUs with stripe(3): ⓪ the root
    node splits the data, ①②③ each stripe walks N0→N1→N2→N3 on its own rail,
    ④ each node assembles the parts with a tree."""
    nodes = {n: (3 * n, 3 * n + 1, 3 * n + 2) for n in range(4)}
    plan = Plan(Hierarchy((4, 3)), ring=4, node_of=tuple(r // 3 for r in range(12)), leaders=nodes)
    transfers = multicast(0, range(12), [0, 1, 2], plan)
    by_stage = {s: {(t.src, t.dst) for t in transfers if t.step == s} for s in range(stages(transfers))}
    assert by_stage[0] == {(0, 1), (0, 2)}  # ⓪
    for hop in (1, 2, 3):  # ① ② ③: node hop-1 -> node hop, rail by rail
        chain = {(s, d) for s, d in by_stage[hop] if s // 3 != d // 3}
        assert chain == {(3 * (hop - 1) + rail, 3 * hop + rail) for rail in range(3)}
    assert all(s // 3 == d // 3 for s, d in by_stage[4])  # ④ inside the last node
    assert stages(transfers) == 5


def test_reduction_is_the_reversed_multicast_tree():
    """§3.1: a reduction is the many-to-one mirror of a multicast."""
    plan = Plan(Hierarchy((3, 2, 2)))
    down = multicast(5, range(12), [0], plan)
    up = reduction(range(12), 5, [0], plan)
    assert {(t.dst, t.src) for t in down} == {(t.src, t.dst) for t in up}
    depth = stages(down)
    assert {(t.src, t.dst, depth - 1 - t.step) for t in down} == {(t.dst, t.src, t.step) for t in up}
    assert all(t.op == "reduce" for t in up)


def _composed_by_definition(phases, plan, name):
    """§3.3 and §4.5 spelled out on transfer lists: each phase's primitives
    concurrently, a fence shifting the next phase past this one's stages,
    channel c of a chunk c steps later, each distinct transfer once, in
    (step, src, dst, chunk seen from the sender's node) order."""
    per_node = len(plan.node_of) // (max(plan.node_of) + 1)

    def place(t):
        return int(
            node_relative_chunks(
                name, len(plan.node_of), np.array([t.chunk]), np.array([t.src // per_node * per_node])
            )[0]
        )

    channel = {}
    for phase in phases:
        for prim in phase:
            for position, chunk in enumerate(prim.chunks):
                channel.setdefault(chunk, position * plan.pipeline // len(prim.chunks))
    out, offset = [], 0
    for phase in phases:
        made = [
            t
            for prim in phase
            for t in (
                multicast(prim.root, prim.leaves, prim.chunks, plan)
                if prim.kind == "multicast"
                else reduction(prim.leaves, prim.root, prim.chunks, plan)
            )
        ]
        out += [replace(t, step=t.step + offset + channel.get(t.chunk, 0)) for t in made]
        offset += stages(made)
    return sorted(dict.fromkeys(out), key=lambda t: (t.step, t.src, t.dst, place(t)))


@pytest.mark.parametrize("coll", ["allreduce", "allgather", "reducescatter", "broadcast"])
@pytest.mark.parametrize(
    ("steps", "ring", "depth", "stripes"), [("single", 1, 1, 1), ("multi", 1, 3, 2), ("multi", 2, 2, 1)]
)
def test_composition_is_fences_then_channels_then_each_transfer_once(coll, steps, ring, depth, stripes):
    """compose works on columns; it gives exactly the transfers its
    definition builds one Transfer at a time, in the same order."""
    topo = load_topology("dgx-a100*2")
    p = topo.num_ranks
    collective = _collective(coll, p, 2 * p)
    if steps == "single" and coll == "allreduce" and ring > 1:
        pytest.skip("not a HiCCL composition")
    nic_of = nic_binding(topo, "bijective")
    plan = Plan(
        Hierarchy((2, 8)),
        ring=ring,
        pipeline=depth,
        node_of=tuple(topo.node_of(r) for r in range(p)),
        leaders=stripe_leaders(topo, nic_of, stripes) if stripes > 1 else {},
        nic_of=nic_of,
    )
    _, phases = table2(collective, steps)
    composed = compose(phases, plan, coll)
    expected = _composed_by_definition(phases, plan, coll)
    assert len(composed) == len(expected) and list(composed) == expected


@pytest.mark.parametrize("depth", [1, 2, 5])
def test_pipelining_overlaps_stages_across_channels(depth):
    """§4.5, Fig. 7: d channels one step apart: S stages take S + d − 1 steps,
    and the fence orders data, not time: a pipelined Reduce-scatter ∘
    All-gather reduces one channel while it already gathers an earlier one."""
    topo = load_topology("fully-connected:8")
    plain = hiccl(topo, make_collective("allreduce", 8, 8 * depth), hierarchy=(2, 4))
    piped = hiccl(topo, make_collective("allreduce", 8, 8 * depth), hierarchy=(2, 4), pipeline=depth)
    assert piped.steps == plain.steps + depth - 1
    overlapping = [s for s in range(piped.steps) if {t.op for t in piped.transfers_in_step(s)} == {"copy", "reduce"}]
    assert len(overlapping) == depth - 1


ALPHA, BW = 2e-6, 20e9


@pytest.mark.parametrize("k", [3, 5, 8])
@pytest.mark.parametrize("d", [1, 4, 7])
def test_pipelined_ring_broadcast_time_is_the_closed_form(k, d):
    """§4.6's ring model with one NIC and no intra-node level: k − 1 chain hops
    and d channels of M/d bytes make k + d − 2 steps: (k + d − 2)(α + M/(dB))
    with a barrier per step; without barriers α is paid once per hop:
    (k − 1)α + (k + d − 2)·M/(dB)."""
    model = model_from_dict(
        {
            "name": "uniform",
            "links": {"nvlink": {"alpha_s": ALPHA, "bandwidth_Bps": BW, "source": "test"}},
            "compute": {"reduce_bandwidth_Bps": 1e12, "reduce_launch_s": 0.0, "source": "test"},
        }
    )
    machine = Machine(load_topology(f"fully-connected:{k}"), model)
    algo = hiccl(machine.topology, make_collective("broadcast", k, d, root=1), hierarchy=(k,), ring=k, pipeline=d)
    m = float(1 << 24)
    assert step_time_s(algo, machine, m) == pytest.approx((k + d - 2) * (ALPHA + m / (d * BW)), rel=1e-9)
    assert critical_path_time_s(algo, machine, m) == pytest.approx(
        (k - 1) * ALPHA + (k + d - 2) * m / (d * BW), rel=1e-9
    )


def test_pipelined_ring_approaches_twice_the_tree_on_four_nodes():
    """§4.6: with deep pipelines ring(4) is twice as fast as the tree on four
    nodes (the tree's root node sends the buffer once per level, {2, 2}); without
    pipelining the ring is no faster. Rounds count the NIC-limited transfers."""
    topo = load_topology("perlmutter*4")
    ratios = []
    for depth in (1, 16, 64):
        bcast = make_collective("broadcast", 16, 4 * depth)
        ring = hiccl(topo, bcast, hierarchy=(4, 4), ring=4, nics=4, pipeline=depth)
        tree = hiccl(topo, bcast, hierarchy=(2, 2, 4), nics=4, pipeline=depth)
        ratios.append(tree.rounds / ring.rounds)
    assert ratios[0] <= 1 < ratios[1] < ratios[2] and 1.9 < ratios[2] <= 2


# -- multi-NIC striping and GPU-to-NIC bindings (§2.3, §4.3) ------------------------------
def _nics_leaving(algo: Algorithm, topo, node: int) -> set[str]:
    """NICs of ``node`` on the routes of the transfers leaving it."""
    routes, nics = Routes(topo), {c.name for c in topo.components if c.kind == "nic" and c.node == node}
    used = set()
    for t in algo.transfers:
        if topo.node_of(t.src) == node != topo.node_of(t.dst):
            used |= {hop.src for hop in routes.hops(t.src, t.dst) if hop.src in nics}
    return used


def test_striping_sends_inter_node_traffic_through_every_nic():
    """§4.3: unstriped, a Broadcast leaves the root's node through the NICs next
    to the root (GPUs 0 and 1 share a PCIe switch with NICs 0 and 1 on a DGX
    A100); striped over 8 leaders it leaves through all eight, and the busiest
    link carries fewer chunks (fewer rounds)."""
    topo = load_topology("dgx-a100*2")
    bcast = make_collective("broadcast", 16, 8)
    plain, striped = hiccl(topo, bcast), hiccl(topo, bcast, nics=8)
    assert _nics_leaving(plain, topo, 0) == {"n0.nic0", "n0.nic1"}
    assert _nics_leaving(striped, topo, 0) == {f"n0.nic{i}" for i in range(8)}
    assert striped.rounds < plain.rounds
    binding = striped.metadata["nic_binding"]
    assert [binding[r] for r in striped.metadata["stripe_leaders"][0]] == [f"n0.nic{i}" for i in range(8)]


def test_bindings_follow_section_2_3():
    """Packed: consecutive GPUs share a NIC; round-robin: GPU g on NIC g mod N;
    bijective: one GPU per NIC, only when N = G."""
    summit = load_topology("summit*2")  # 6 GPUs, 2 NICs per node
    packed = nic_binding(summit, "packed")
    robin = nic_binding(summit, "round-robin")
    assert [packed[r] for r in range(6)] == ["n0.nic0"] * 3 + ["n0.nic1"] * 3
    assert [robin[r] for r in range(6, 12)] == ["n1.nic0", "n1.nic1"] * 3
    with pytest.raises(NotApplicableError, match="one NIC per GPU"):
        nic_binding(summit, "bijective")
    perlmutter = load_topology("perlmutter*2")  # 4 GPUs, 4 NICs: all three are the identity
    identity = [f"n{r // 4}.nic{r % 4}" for r in range(8)]
    for scheme in ("packed", "round-robin", "bijective"):
        algo = hiccl(perlmutter, make_collective("allgather", 8, 4), nics=4, binding=scheme)
        assert algo.metadata["nic_binding"] == identity and check(algo, load_machine(perlmutter)) == []


def test_striping_leaders_follow_the_binding():
    """Two stripes on Summit (NIC 0 on socket 0 with GPUs 0-2, NIC 1 on socket 1
    with GPUs 3-5): packed puts the leaders on GPUs 0 and 3 and the traffic
    leaves through both NICs; each leader is bound to a different NIC."""
    topo = load_topology("summit*2")
    for scheme, leaders in (("packed", [0, 3]), ("round-robin", [0, 1])):
        algo = hiccl(topo, _collective("broadcast", 12, 4), nics=2, binding=scheme)
        assert algo.metadata["stripe_leaders"][0] == leaders
        assert len({algo.metadata["nic_binding"][r] for r in leaders}) == 2
        assert check(algo, load_machine(topo)) == []
    packed = hiccl(topo, _collective("broadcast", 12, 4), nics=2, binding="packed")
    assert _nics_leaving(packed, topo, 1) == {"n1.nic0", "n1.nic1"}  # the root, rank 11, is on node 1


def test_round_robin_on_aurora_uses_three_quarters_of_the_nics():
    """§6.3.5: 12 GPUs round-robin on 8 NICs: NICs 0-3 serve two GPUs each,
    4-7 one, so equal traffic per GPU reaches 75 % of the node bandwidth."""
    topo = load_topology("aurora")
    load = Counter(nic_binding(topo, "round-robin").values())
    assert [load[f"nic{i}"] for i in range(8)] == [2, 2, 2, 2, 1, 1, 1, 1]
    assert sum(load.values()) / (len(load) * max(load.values())) == 0.75
    with pytest.raises(NotApplicableError, match="divide"):
        nic_binding(topo, "packed")
    algo = hiccl(topo, make_collective("allgather", 12, 1))
    assert algo.metadata["binding"] == "round-robin" and check(algo, load_machine(topo)) == []


def test_metadata_survives_json():
    topo = load_topology("dgx-h100*2")
    algo = hiccl(topo, make_collective("allreduce", 16, 16), nics=4, pipeline=2)
    back = Algorithm.from_json(algo.to_json())
    assert back.metadata["nic_binding"] == algo.metadata["nic_binding"]
    assert back.metadata["composition"] == "allgather ∘ reducescatter"
    assert back.transfers == algo.transfers


def test_docstring_examples_run():
    import doctest

    from simcoll.algorithms import hiccl as hiccl_module
    from simcoll.algorithms import hiccl_primitives

    for module in (hiccl_module, hiccl_primitives):
        assert doctest.testmod(module).failed == 0


@pytest.mark.parametrize("factors", [(4, 8), (2, 2, 4), (3, 5), (12,)])
def test_point_to_point_multicasts_factorised_together_as_one_by_one(factors):
    # An All-to-all registers p(p - 1) single-leaf multicasts (a million on 1,024 GPUs): they are
    # factorised together, giving the rows primitive by primitive gives - hop by hop up the
    # hierarchy, each hop with the primitive's chunks in order - a leaf equal to its root and an
    # empty chunk list included.
    import random

    from simcoll.algorithm import TransferTable
    from simcoll.algorithms.hiccl_primitives import Hierarchy, Plan, Primitive, _point_to_point

    rng = random.Random(15)
    plan = Plan(Hierarchy(factors))
    p = plan.hierarchy.size
    primitives = [
        Primitive("multicast", rng.randrange(p), (rng.randrange(p),), tuple(rng.sample(range(50), rng.randrange(4))))
        for _ in range(200)
    ]
    together = _point_to_point(primitives, plan)
    one_by_one = TransferTable.concatenate([primitive.table(plan) for primitive in primitives])
    for column in ("chunk", "src", "dst", "reduce", "step"):
        assert getattr(together, column).tolist() == getattr(one_by_one, column).tolist(), column


@pytest.mark.parametrize("coll", ["allgather", "reducescatter", "alltoall", "gather", "scatter"])
def test_node_relative_chunks_move_each_ranks_buffers_with_the_rank(coll):
    """Seen from ``shift`` ranks back, rank r's input and output chunks are
    rank r - shift's (the collective's own layouts, not the formula again;
    Gather's and Scatter's root keeps every chunk, so their root's buffer
    is compared with itself)."""
    p, shift = 8, 4
    collective = make_collective(coll, p, 2)
    for layout in (collective.input_layout, collective.output_layout):
        for r, chunks in enumerate(layout):
            if not chunks:
                continue
            there = layout[(r - shift) % p] or chunks
            moved = node_relative_chunks(coll, p, np.array(chunks, dtype=np.int64), np.full(len(chunks), shift))
            assert sorted(moved.tolist()) == sorted(there)


@pytest.mark.parametrize("coll", ["allreduce", "allgather", "reducescatter", "alltoall"])
def test_every_node_runs_node_0s_schedule_moved(monkeypatch, coll):
    """Each node sends its chunks in the order node 0 does, counted from its
    own ranks: on four equal nodes the simulator finds the node rotation and
    runs a quarter of the messages, to the same time as the full run."""
    from simcoll.simulator.fast import algorithm_mode

    machine = load_machine("dgx-h100*4")
    algorithm = generate("hiccl", machine, coll)
    for size in (1 << 20, 1 << 30):
        quotient = simulate(algorithm, machine, size, verify=False, record_utilisation=False)
        with monkeypatch.context() as patch:  # every message run
            for finder in ("node_rotation", "table_rotation", "orbit_rotation"):
                patch.setattr(algorithm_mode, finder, lambda *a: None)
            patch.setattr(algorithm_mode, "_PREPARED", {})
            full = simulate(algorithm, machine, size, verify=False)
        assert quotient.stats["node_rotation"] == 4 and full.stats["node_rotation"] == 1
        assert quotient.time_s == full.time_s


@pytest.mark.parametrize("factors", [(2, 3), (2, 2, 4), (4, 8), (3, 1, 2), (5,), (2, 3, 2, 2)])
def test_a_tree_to_every_rank_is_built_as_the_walk_builds_it(factors):
    """§4.2's tree from every root to every other rank, built with NumPy,
    equals the depth-first walk (each level's groups in digit order, a hop
    to the group's representative, then the group below), hop for hop."""
    from simcoll.algorithms.hiccl_primitives import _full_tree_hops, _walk_tree

    h = Hierarchy(factors)
    for root in range(h.size):
        walked: list[tuple[int, int, int]] = []
        _walk_tree(h, root, [r for r in range(h.size) if r != root], 0, 0, walked)
        assert [tuple(row) for row in _full_tree_hops(h, root).tolist()] == walked


def test_a_hierarchy_needing_a_hop_without_a_route_is_refused_by_name():
    """On DGX-1 one level of eight needs hops between GPUs no route joins:
    the first such pair is named."""
    with pytest.raises(
        NotApplicableError, match="hierarchy 8 needs a hop from rank 0 to rank 5, but dgx1 has no route"
    ):
        generate("hiccl", load_machine("dgx1"), "allreduce", hierarchy=[8])

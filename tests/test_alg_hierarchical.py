"""Hierarchical algorithms on N nodes × G GPUs: NV-Group's 2D ring (eq. 4),
GC3's hierarchical Allreduce (Figs. 1-3), two-step Alltoall (Fig. 8) and
AllToNext (§7.4). Verified on node grids and clusters, costed as their
docstrings state, and refused where there are no equal nodes."""

import pytest

from simcoll import check, generate, load_machine, load_topology, make_collective
from simcoll.algorithms import REGISTRY
from simcoll.analytic import critical_path_time_s
from simcoll.cost_model import model_from_dict
from simcoll.errors import NotApplicableError, SimcollError

SUPPORTED = {
    "2d-ring": ("allreduce", "reducescatter", "allgather"),
    "gc3-hierarchical": ("allreduce",),
    "two-step-alltoall": ("alltoall",),
    "alltonext": ("alltonext",),
}
CHUNK_FACTORS = (1, 2, 3)
INTRA_ALPHA, INTRA_BW, INTER_ALPHA, INTER_BW = 1e-6, 100e9, 3e-6, 20e9
T_R_LAUNCH, T_R_BW = 2e-6, 300e9


def _grid_yaml(sizes, interleaved=False) -> str:
    """Nodes of ``sizes[n]`` GPUs joined all-to-all by NVLink inside a node;
    every GPU has its own NIC on one InfiniBand switch. ``interleaved`` numbers
    the ranks round-robin over the nodes instead of node by node."""
    lines = ["name: grid", "components:", "  - {name: ib, kind: ib_switch, node: null}"]
    links = []
    order = [(n, g) for n, size in enumerate(sizes) for g in range(size)]
    if interleaved:
        order.sort(key=lambda ng: (ng[1], ng[0]))
    for rank, (n, g) in enumerate(order):
        lines.append(f"  - {{name: gpu{n}_{g}, kind: gpu, node: {n}, rank: {rank}}}")
        lines.append(f"  - {{name: nic{n}_{g}, kind: nic, node: {n}}}")
        links += [f"  - [gpu{n}_{g}, nic{n}_{g}, pcie]", f"  - [nic{n}_{g}, ib, ib]"]
        links += [f"  - [gpu{n}_{g}, gpu{n}_{h}, nvlink]" for h in range(g + 1, sizes[n])]
    return "\n".join(lines + ["links:"] + links) + "\n"


def _grid(tmp_path, sizes, interleaved=False):
    path = tmp_path / "grid.yaml"
    path.write_text(_grid_yaml(sizes, interleaved))
    return load_topology(str(path))


def _grid_machine(tmp_path, nodes, gpus, uniform=False):
    """NVLink inside a node; PCIe + InfiniBand between nodes, of one speed
    with ``uniform`` (NV-Group's single B and t_s), slower otherwise."""
    alpha, bw = (INTRA_ALPHA, INTRA_BW) if uniform else (INTER_ALPHA, INTER_BW)
    model = model_from_dict(
        {
            "name": "two-level",
            "links": {
                "nvlink": {"alpha_s": INTRA_ALPHA, "bandwidth_Bps": INTRA_BW, "source": "test"},
                "pcie": {"alpha_s": alpha, "bandwidth_Bps": bw, "source": "test"},
                "ib": {"alpha_s": alpha, "bandwidth_Bps": bw, "source": "test"},
            },
            "compute": {"reduce_bandwidth_Bps": T_R_BW, "reduce_launch_s": T_R_LAUNCH, "source": "test"},
        }
    )
    return load_machine(_grid(tmp_path, [gpus] * nodes), model)


def _verify_everything(topo, **options):
    for name, collectives in SUPPORTED.items():
        for coll in collectives:
            for chunks in CHUNK_FACTORS:
                algo = generate(name, load_machine(topo), make_collective(coll, topo.num_ranks, chunks), **options)
                assert check(algo, load_machine(topo)) == [], (name, coll, chunks)


@pytest.mark.parametrize("shape", [(2, 2), (2, 4), (4, 8), (2, 8), (3, 3), (3, 2), (5, 1), (1, 4)])
def test_hierarchical_algorithms_verify_on_node_grids(tmp_path, shape):
    nodes, gpus = shape
    topo = _grid(tmp_path, [gpus] * nodes)
    if nodes == 1:
        _verify_everything(topo, group_size=gpus)
    else:
        _verify_everything(topo)


def test_hierarchical_algorithms_verify_when_ranks_are_not_numbered_node_by_node(tmp_path):
    _verify_everything(_grid(tmp_path, [3, 3, 3], interleaved=True))


@pytest.mark.parametrize("spec", ["dgx-a100*2", "ndv2*2", "summit*2", "dgx-h100*2", "dgx-a100*3"])
def test_hierarchical_algorithms_verify_on_clusters(spec):
    _verify_everything(load_topology(spec))


@pytest.mark.parametrize("spec, group_size", [("dgx1", 4), ("dgx-a100", 2), ("fully-connected:12", 3)])
def test_group_size_splits_a_single_node(spec, group_size):
    _verify_everything(load_topology(spec), group_size=group_size)


def t_r(nbytes: float) -> float:
    return T_R_LAUNCH + nbytes / T_R_BW


SHAPES = [(2, 2), (3, 3), (2, 4), (3, 2), (4, 8)]


@pytest.mark.parametrize("nodes, gpus", SHAPES)
def test_2d_ring_allreduce_is_nvgroup_eq_4(tmp_path, nodes, gpus):
    """NV-Group eq. (4) with t_s = α, B the one link speed, N nodes, N_G = G
    GPUs per node, M the buffer, T_R the model's reduction time."""
    machine = _grid_machine(tmp_path, nodes, gpus, uniform=True)
    n, n_g, t_s, b = nodes, gpus, INTRA_ALPHA, INTRA_BW
    p = n * n_g
    for m in (1 << 10, 3 << 20):
        eq4 = (
            2 * (n_g - 1) * (t_s + m / (n_g * b))
            + (n_g - 1) * t_r(m / n_g)
            + 2 * (n - 1) * (t_s + m / (n * b))
            + (n - 1) * t_r(m / n)
        )
        for chunks in (p, 2 * p):
            algo = generate("2d-ring", machine, make_collective("allreduce", p, chunks))
            assert critical_path_time_s(algo, machine, m) == pytest.approx(eq4, rel=1e-9)


@pytest.mark.parametrize("nodes, gpus", SHAPES)
def test_hierarchical_costs_are_their_docstring_closed_forms(tmp_path, nodes, gpus):
    machine = _grid_machine(tmp_path, nodes, gpus)
    topo, p, m = machine.topology, nodes * gpus, 3 << 20
    intra, inter = machine.route(0, 1), machine.route(0, gpus)
    aa, ba, ae, be = intra.alpha_s, intra.bandwidth_Bps, inter.alpha_s, inter.bandwidth_Bps
    assert (aa, ba, ae, be) == (INTRA_ALPHA, INTRA_BW, INTER_ALPHA, INTER_BW)  # the machine is what we meant
    n, g = nodes, gpus
    two_d = (
        2 * (g - 1) * (aa + m / (g * ba))
        + (g - 1) * t_r(m / g)
        + 2 * (n - 1) * (ae + m / (n * be))
        + (n - 1) * t_r(m / n)
    )
    rs = (g - 1) * (aa + m / (g * ba) + t_r(m / g)) + (n - 1) * (ae + m / (p * be) + t_r(m / p))
    ag = (n - 1) * (ae + m / (p * be)) + (g - 1) * (aa + m / (g * ba))
    gc3 = rs + ag
    alltoall = aa + m / (g * ba) + ae + m / (n * be)
    boundary = min(2, g - 1) * (aa + m / (g * ba)) + ae + m / (g * be)
    to_next = max(aa + m / ba, boundary)
    cases = [
        ("2d-ring", "allreduce", p, two_d),
        ("2d-ring", "reducescatter", 2, rs),
        ("2d-ring", "allgather", 3, ag),
        ("gc3-hierarchical", "allreduce", 2 * p, gc3),
        ("two-step-alltoall", "alltoall", 2, alltoall),
        ("alltonext", "alltonext", 2 * g, to_next),
    ]
    for name, coll, chunks, closed_form in cases:
        algo = generate(name, load_machine(topo), make_collective(coll, p, chunks))
        assert critical_path_time_s(algo, machine, m) == pytest.approx(closed_form, rel=1e-9), name


@pytest.mark.parametrize("spec", ["dgx-a100*4", "ndv2*2"])
def test_2d_ring_cuts_the_ring_steps_to_the_domain_factor(spec):
    """NV-Group §3.1.1: the 2D ring's step count depends on N + N_G, not p."""
    topo = load_topology(spec)
    n, n_g = len(topo.nodes), len(topo.ranks_of_node(0))
    two_d = generate("2d-ring", load_machine(topo), "allreduce")
    assert two_d.steps == 2 * (n_g - 1) + 2 * (n - 1) < 2 * (topo.num_ranks - 1)


def test_inter_node_transfers_join_gpus_with_the_same_local_index():
    """GC3 Fig. 3a: inter-node phases run among "cross_ranks" i*G + g; on a
    rail-optimised cluster they stay on one rail."""
    topo = load_topology("dgx-a100*3/rail")
    local = {r: topo.ranks_of_node(topo.node_of(r)).index(r) for r in range(topo.num_ranks)}
    for name, collectives in SUPPORTED.items():
        for coll in collectives:
            algo = generate(name, load_machine(topo), coll)
            crossing = [t for t in algo.transfers if topo.node_of(t.src) != topo.node_of(t.dst)]
            assert crossing and all(local[t.src] == local[t.dst] for t in crossing), (name, coll)


def test_gc3_hierarchical_reduces_slot_g_n_plus_n_on_gpu_g_of_node_n(tmp_path):
    """GC3 §2 on N = 2 nodes of G = 3 GPUs, 6 chunks: "GPU 0 and GPU 3 use a
    Ring algorithm to add the intra-node sums of chunk 0 and chunk 1"; the
    reduction of chunk g*N + n completes on GPU g of node n."""
    topo = _grid(tmp_path, [3, 3])
    algo = generate("gc3-hierarchical", load_machine(topo), make_collective("allreduce", 6, 6))
    crossing = [t for t in algo.transfers if topo.node_of(t.src) != topo.node_of(t.dst)]
    assert {(t.src, t.dst) for t in crossing if t.chunk in (0, 1)} == {(0, 3), (3, 0)}
    for chunk in range(6):
        last = max((t for t in algo.transfers if t.chunk == chunk and t.op == "reduce"), key=lambda t: t.step)
        g, n = divmod(chunk, 2)
        assert last.dst == 3 * n + g


def test_two_step_alltoall_sends_one_inter_node_message_per_node_pair_per_gpu():
    """GC3 §7.3, Fig. 8: cross-node sends are aggregated: G·C chunks per
    (node pair, local index) in one step, instead of G² pairs of C chunks."""
    topo = load_topology("dgx-a100*3")
    n, g, chunks = 3, 8, 2
    coll = make_collective("alltoall", n * g, chunks)

    def inter_node_messages(algo):
        """{(src, dst): (steps used, chunks carried)} over the node boundaries."""
        steps, carried = {}, {}
        for t in algo.transfers:
            if topo.node_of(t.src) != topo.node_of(t.dst):
                steps.setdefault((t.src, t.dst), set()).add(t.step)
                carried[(t.src, t.dst)] = carried.get((t.src, t.dst), 0) + 1
        return {pair: (len(steps[pair]), carried[pair]) for pair in steps}

    two_step = inter_node_messages(generate("two-step-alltoall", load_machine(topo), coll))
    assert len(two_step) == n * (n - 1) * g
    assert set(two_step.values()) == {(1, g * chunks)}
    assert len(inter_node_messages(generate("direct", load_machine(topo), coll))) == n * (n - 1) * g * g


def test_alltonext_spreads_a_node_boundary_over_every_nic_and_pays_off_for_large_buffers():
    """GC3 §7.4 on 3 A100 nodes: the boundary's buffer crosses on all G
    GPUs/NICs; worse than direct sends for small buffers ("overhead from the
    extra communication steps"), better for large ones."""
    machine = load_machine("dgx-a100*3")
    topo = machine.topology
    algo = generate("alltonext", load_machine(topo), "alltonext")
    g, chunks = 8, algo.chunks
    for boundary in (7, 15):
        sent = [
            t
            for t in algo.transfers
            if chunks * boundary <= t.chunk < chunks * (boundary + 1) and topo.node_of(t.src) != topo.node_of(t.dst)
        ]
        per_pair = {}
        for t in sent:
            per_pair[(t.src, t.dst)] = per_pair.get((t.src, t.dst), 0) + 1
        assert len(per_pair) == g and set(per_pair.values()) == {chunks // g}
    baseline = generate("direct", load_machine(topo), make_collective("alltonext", topo.num_ranks, chunks))
    small, large = 4 << 10, 1 << 30
    assert critical_path_time_s(algo, machine, small) > critical_path_time_s(baseline, machine, small)
    assert critical_path_time_s(algo, machine, large) < critical_path_time_s(baseline, machine, large) / 2


@pytest.mark.parametrize("name", sorted(SUPPORTED))
def test_a_single_node_needs_a_group_size(name):
    with pytest.raises(NotApplicableError, match="single node; pass group_size"):
        generate(name, "dgx1", SUPPORTED[name][0])


@pytest.mark.parametrize("name", sorted(SUPPORTED))
def test_irregular_nodes_are_refused(tmp_path, name):
    topo = _grid(tmp_path, [3, 2, 3])
    with pytest.raises(NotApplicableError, match=r"irregular node sizes \(node 0: 3, node 1: 2, node 2: 3\)"):
        generate(name, load_machine(topo), SUPPORTED[name][0])


def test_bad_groups_and_missing_routes_are_named():
    with pytest.raises(NotApplicableError, match="group_size=5 does not divide"):
        generate("2d-ring", "fully-connected:12", "allreduce", group_size=5)
    line = load_topology("line:6")  # 0-1-2 | 3-4-5: no ring inside a group, no 0 -> 2 route
    with pytest.raises(NotApplicableError, match=r"no ring through ranks \[0, 1, 2\]"):
        generate("2d-ring", load_machine(line), "allgather", group_size=3)
    with pytest.raises(NotApplicableError, match="no route from rank 0 to rank 2"):
        generate("two-step-alltoall", load_machine(line), "alltoall", group_size=3)
    with pytest.raises(NotApplicableError, match="implements allreduce, not allgather"):
        generate("gc3-hierarchical", "dgx-a100*2", "allgather")


def test_group_size_option_parses_from_the_command_line():
    assert REGISTRY["2d-ring"].parse_options({"group_size": "4"}) == {"group_size": 4}
    with pytest.raises(SimcollError, match="group_size"):
        REGISTRY["alltonext"].parse_options({"group_size": "0"})


@pytest.mark.parametrize("pipeline", [2, 3])
def test_pipelined_gc3_hierarchical_allreduce_is_correct_and_overlaps_its_phases(pipeline):
    # GC3's pipelined version: chunk groups run the four phases one step apart, so a group's intra-node
    # phases overlap another's inter-node ones; the result is still an Allreduce, and no slower
    machine = load_machine("dgx-a100*2")
    plain = generate("gc3-hierarchical", machine, "allreduce", chunks=16 * pipeline)
    piped = generate("gc3-hierarchical", machine, "allreduce", chunks=16 * pipeline, pipeline=pipeline)
    assert check(piped, machine) == []
    assert piped.steps == plain.steps * pipeline and piped.metadata["pipeline"] == pipeline
    from simcoll import simulate

    size = 1 << 30
    assert simulate(piped, machine, size).time_s < simulate(plain, machine, size).time_s
    with pytest.raises(NotApplicableError, match="needs at least 48 chunks"):
        generate("gc3-hierarchical", machine, "allreduce", chunks=16, pipeline=3)

"""Specification of the built-in machines (topologies/*.yaml) and their cost
models (models/*.yaml): every one loads, its default model covers every link it
uses (clusters included), and the structure matches the reference facts in
shared/reference/FACTS.md and the seed papers."""

from __future__ import annotations

from collections import Counter

import networkx as nx
import pytest

from simcoll.machines import builtin_models, builtin_topologies, load_machine, load_model, load_topology

# DGX-1 NVLink link-count matrix, row = source GPU (FACTS.md; SCCL §2.2,
# msccl-tools topologies/nvidia.py).
DGX1_NVLINK = [
    [0, 2, 1, 1, 2, 0, 0, 0],
    [2, 0, 1, 2, 0, 1, 0, 0],
    [1, 1, 0, 2, 0, 0, 2, 0],
    [1, 2, 2, 0, 0, 0, 0, 1],
    [2, 0, 0, 0, 0, 2, 1, 1],
    [0, 1, 0, 0, 2, 0, 1, 2],
    [0, 0, 2, 0, 1, 1, 0, 2],
    [0, 0, 0, 1, 1, 2, 2, 0],
]

EXPECTED_TOPOLOGIES = {
    "dgx1",
    "ndv2",
    "dgx2",
    "z52",
    "summit",
    "dgx-a100",
    "dgx-h100",
    "perlmutter",
    "frontier",
    "aurora",
    "hgx-h100-4",
    "hgx-a100-4",
    "alps-gh200",
    "dgx-b200",
    "h100-nic",
    "mi300x",
    "mi355x",
    "dgx-h200",
    "delta",
    "p5",
    "l40s-pcie",
    "l40s-socket",
    "v100-pcie",
    "rtx5090-pcie",
    "a3-mega",
}
TACCL_MODELS = {"ndv2-taccl", "dgx2-taccl"}

US_PER_MB = 1e-6 / 1e6  # seconds per byte for 1 us/MB, taking MB = 1e6 bytes


def _kind_count(topology, kind: str) -> int:
    return sum(1 for c in topology.components if c.kind == kind)


def _links_to_kind(topology, gpu: str, link_type: str, kind: str) -> Counter:
    """Links of ``link_type`` from ``gpu`` to each component of ``kind``."""
    counts: Counter = Counter()
    for link in topology.links:
        if link.type != link_type or gpu not in (link.src, link.dst):
            continue
        other = link.dst if link.src == gpu else link.src
        if topology.component(other).kind == kind:
            counts[other] += link.count
    return counts


def _with_nic(name: str) -> bool:
    return _kind_count(load_topology(name), "nic") > 0


# ---------------------------------------------------------------------------
# Every built-in loads with its default model
# ---------------------------------------------------------------------------
def test_all_expected_machines_are_built_in():
    assert EXPECTED_TOPOLOGIES <= set(builtin_topologies())


def test_every_topology_has_a_model_of_its_own_name():
    models = set(builtin_models())
    for name in builtin_topologies():
        assert name in models, f"models/{name}.yaml missing"
        assert load_topology(name).default_model == name


@pytest.mark.parametrize("name", builtin_topologies())
def test_builtin_loads_with_its_default_model(name):
    machine = load_machine(name)
    assert machine.topology.name == name  # name: field equals the file stem
    assert machine.model.name == load_topology(name).default_model
    assert set(machine.topology.link_types) <= set(machine.model.links)
    assert machine.topology.sources, "every built-in says where its structure comes from"


@pytest.mark.parametrize("name", [n for n in builtin_topologies() if _with_nic(n)])
@pytest.mark.parametrize("fabric", ["", "/rail"])
def test_clusters_of_every_builtin_with_a_nic_load(name, fabric):
    node = load_topology(name)
    machine = load_machine(f"{name}*2{fabric}")
    assert machine.num_ranks == 2 * node.num_ranks
    assert node.network_link in machine.topology.link_types
    assert node.network_link in machine.model.links


@pytest.mark.parametrize("name", [n for n in builtin_topologies() if _with_nic(n)])
def test_rail_clusters_have_one_rail_per_nic(name):
    node = load_topology(name)
    rails = {c.rail for c in node.components if c.kind == "nic"}
    assert None not in rails and len(rails) == _kind_count(node, "nic")
    cluster = load_topology(f"{name}*2/rail")
    switch_kind = "ib_switch" if node.network_link == "ib" else "switch"
    assert _kind_count(cluster, switch_kind) == len(rails)


# ---------------------------------------------------------------------------
# Models
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", builtin_models())
def test_every_model_loads_and_every_entry_has_a_source(name):
    model = load_model(name)
    assert model.name == name
    assert model.links
    for link_type, params in model.links.items():
        assert params.source.strip(), f"{name}: links.{link_type} has no source"
        assert params.bandwidth_Bps > 0 and params.alpha_s >= 0
    for kind, params in model.switches.items():
        assert params.source.strip(), f"{name}: switches.{kind} has no source"


@pytest.mark.parametrize("name", sorted(set(builtin_topologies()) | TACCL_MODELS))
def test_machine_models_give_a_reduction_cost(name):
    model = load_model(name)
    assert model.compute is not None and model.compute.source.strip()
    assert model.reduce_time_s(1e6) > 0


def test_ndv2_taccl_uses_taccl_table1():
    model = load_model("ndv2-taccl")
    assert model.link("nvlink").alpha_s == pytest.approx(0.7e-6)
    assert model.link("nvlink").beta_s_per_byte == pytest.approx(46 * US_PER_MB)
    assert model.link("ib").alpha_s == pytest.approx(1.7e-6)
    assert model.link("ib").beta_s_per_byte == pytest.approx(106 * US_PER_MB)


def test_dgx2_taccl_nvlink_beta_is_per_link_of_the_six_link_bundle():
    # TACCL measured 8 us/MB GPU to GPU over 6 NVLinks; one link carries 1/6.
    model = load_model("dgx2-taccl")
    assert model.link("nvlink").beta_s_per_byte == pytest.approx(6 * 8 * US_PER_MB)
    assert model.link("nvlink").alpha_s == pytest.approx(0.7e-6)
    assert model.link("ib").beta_s_per_byte == pytest.approx(106 * US_PER_MB)
    assert "nvswitch" in model.switches


@pytest.mark.parametrize("model_name", ["ndv2", "ndv2-taccl"])
def test_both_ndv2_models_cover_the_ndv2_cluster(model_name):
    machine = load_machine("ndv2*2", model_name)
    assert set(machine.topology.link_types) == {"nvlink", "pcie", "qpi", "memory", "ib"}


@pytest.mark.parametrize("model_name", ["dgx2", "dgx2-taccl"])
def test_both_dgx2_models_cover_the_dgx2_cluster(model_name):
    machine = load_machine("dgx2*2", model_name)
    assert machine.num_ranks == 32 and machine.model.name == model_name
    assert set(machine.topology.link_types) == {"nvlink", "pcie", "qpi", "ib"} <= set(machine.model.links)


# ---------------------------------------------------------------------------
# Structure (FACTS.md machines table)
# ---------------------------------------------------------------------------
def test_dgx1_nvlink_matrix_is_the_facts_matrix():
    assert load_topology("dgx1").gpu_link_counts() == DGX1_NVLINK
    assert all(sum(row) == 6 for row in DGX1_NVLINK)  # six NVLink ports per V100 (SCCL §2.2)


def test_ndv2_is_dgx1_nvlink_plus_pcie_tree_and_one_nic_without_gpudirect():
    ndv2 = load_topology("ndv2")
    assert ndv2.gpu_link_counts("nvlink") == DGX1_NVLINK
    nics = [c for c in ndv2.components if c.kind == "nic"]
    assert len(nics) == 1 and nics[0].gpudirect is False
    assert _kind_count(ndv2, "cpu") == 2
    assert _kind_count(ndv2, "pcie_switch") == 4
    assert _kind_count(ndv2, "host_memory") == 2
    graph = ndv2.to_networkx()
    # every PCIe switch holds two GPUs; the NIC shares one with GPU 0 (TACCL §4.2)
    for sw in (c.name for c in ndv2.components if c.kind == "pcie_switch"):
        gpus = [n for n in graph.successors(sw) if graph.nodes[n]["kind"] == "gpu"]
        assert len(gpus) == 2
    nic_switch = next(iter(graph.successors(nics[0].name)))
    assert graph.nodes[nic_switch]["kind"] == "pcie_switch"
    assert graph.has_edge(nic_switch, "gpu0")


def test_dgx2_has_16_gpus_each_with_6_nvlinks_into_the_nvswitch_fabric():
    dgx2 = load_topology("dgx2")
    assert dgx2.num_ranks == 16
    assert _kind_count(dgx2, "nvswitch") == 12
    for gpu in dgx2.gpus:
        into_switches = _links_to_kind(dgx2, gpu.name, "nvlink", "nvswitch")
        assert sum(into_switches.values()) == 6
        assert len(into_switches) == 6  # one link to each of the 6 switches of its board
    assert not any(any(row) for row in dgx2.gpu_link_counts("nvlink"))  # no direct GPU-GPU NVLink
    assert _kind_count(dgx2, "nic") == 8


def test_dgx2_nics_are_shared_by_gpu_pairs_on_pcie_switches():
    dgx2 = load_topology("dgx2")
    graph = dgx2.to_networkx()
    for nic in (c.name for c in dgx2.components if c.kind == "nic"):
        (switch,) = set(graph.successors(nic))
        assert graph.nodes[switch]["kind"] == "pcie_switch"
        gpus = [n for n in graph.successors(switch) if graph.nodes[n]["kind"] == "gpu"]
        assert len(gpus) == 2


def test_dgx_a100_has_8_gpus_with_12_nvlinks_and_8_nics():
    dgx = load_topology("dgx-a100")
    assert dgx.num_ranks == 8
    assert _kind_count(dgx, "nvswitch") == 6
    for gpu in dgx.gpus:
        into_switches = _links_to_kind(dgx, gpu.name, "nvlink", "nvswitch")
        assert sum(into_switches.values()) == 12
        assert sorted(into_switches.values()) == [2] * 6
    assert _kind_count(dgx, "nic") == 8
    assert _kind_count(dgx, "pcie_switch") == 4
    assert sorted(c.rail for c in dgx.components if c.kind == "nic") == list(range(8))


def test_dgx_h100_has_8_gpus_with_18_nvlinks_and_8_nics():
    dgx = load_topology("dgx-h100")
    assert dgx.num_ranks == 8
    assert _kind_count(dgx, "nvswitch") == 4
    for gpu in dgx.gpus:
        into_switches = _links_to_kind(dgx, gpu.name, "nvlink", "nvswitch")
        assert sum(into_switches.values()) == 18
        assert sorted(into_switches.values()) == [4, 4, 5, 5]
    assert _kind_count(dgx, "nic") == 8
    assert sorted(c.rail for c in dgx.components if c.kind == "nic") == list(range(8))


def test_summit_has_6_gpus_2_cpus_and_nvlink_groups_per_socket():
    summit = load_topology("summit")
    assert summit.num_ranks == 6
    assert _kind_count(summit, "cpu") == 2
    assert _kind_count(summit, "nic") == 2
    matrix = summit.gpu_link_counts("nvlink")
    for a in range(6):
        for b in range(6):
            same_socket = a != b and a // 3 == b // 3
            assert matrix[a][b] == (2 if same_socket else 0)  # 2 bricks = 50 GB/s per pair
    assert "xbus" in summit.link_types


def test_perlmutter_has_4_all_to_all_gpus_and_4_nics():
    node = load_topology("perlmutter")
    assert node.num_ranks == 4
    assert _kind_count(node, "nic") == 4
    assert _kind_count(node, "cpu") == 1
    assert node.network_link == "slingshot"
    assert node.gpu_link_counts("nvlink") == [[0 if a == b else 4 for b in range(4)] for a in range(4)]


@pytest.mark.parametrize("name, network_link", [("hgx-h100-4", "ib"), ("alps-gh200", "slingshot")])
def test_four_hopper_boards_are_all_to_all_with_6_nvlinks_per_pair_and_a_nic_per_gpu(name, network_link):
    """18 NVLink4 links per H100 over three peers, no NVSwitch (so no NVLS), one NIC per GPU."""
    node = load_topology(name)
    assert node.num_ranks == 4 and _kind_count(node, "nvswitch") == 0
    assert node.gpu_link_counts("nvlink") == [[0 if a == b else 6 for b in range(4)] for a in range(4)]
    assert sorted(c.rail for c in node.components if c.kind == "nic") == list(range(4))
    assert node.network_link == network_link


def test_dgx_b200_has_18_nvlink5_per_gpu_into_two_reducing_switches_and_8_nics():
    dgx = load_machine("dgx-b200")
    for gpu in dgx.topology.gpus:
        assert sorted(_links_to_kind(dgx.topology, gpu.name, "nvlink", "nvswitch").values()) == [9, 9]
    assert all(c.reduce and c.multicast for c in dgx.topology.components if c.kind == "nvswitch")
    assert _kind_count(dgx.topology, "nic") == 8
    # NVLink5 runs at twice NVLink4's 25 GB/s per link
    assert dgx.model.link("nvlink").bandwidth_Bps == pytest.approx(50e9 * 0.802)


def test_mi300x_is_a_full_infinity_fabric_mesh_with_a_nic_per_gpu():
    """AMD MI300X platform: 7 Infinity Fabric links per GPU, one to each peer, no switch; 8 NICs."""
    mi = load_machine("mi300x")
    assert mi.num_ranks == 8 and _kind_count(mi.topology, "nvswitch") == 0
    assert mi.topology.gpu_link_counts("infinity_fabric") == [[0 if a == b else 1 for b in range(8)] for a in range(8)]
    assert sorted(c.rail for c in mi.topology.components if c.kind == "nic") == list(range(8))
    assert mi.model.link("infinity_fabric").bandwidth_Bps == pytest.approx(64e9 * 0.8)


def test_mi355x_is_the_mi300x_mesh_with_faster_links_and_a_pollara_nic_per_gpu():
    """AMD MI355X platform: the same full mesh, 153.6 GB/s bidirectional per link (AMD's
    specifications), one 400 Gb/s NIC per GPU (its log's header); the roofline's peaks
    (2.52 PFLOPS dense FP16, 8 TB/s) and NCCL's ring on 2 nodes at the links' rates."""
    mi, old = load_machine("mi355x"), load_machine("mi300x")
    assert mi.topology.gpu_link_counts("infinity_fabric") == old.topology.gpu_link_counts("infinity_fabric")
    assert mi.model.link("infinity_fabric").bandwidth_Bps == pytest.approx(76.8e9 * 0.8)
    assert mi.model.link("ethernet").line_rate_Bps == pytest.approx(50e9)
    assert mi.model.gpu.memory_Bps == 8e12 and mi.model.gpu.peak_flops_per_s == pytest.approx(
        256 * 4096 * 2.4e9, rel=1e-3
    )
    assert sorted(c.rail for c in mi.topology.components if c.kind == "nic") == list(range(8))


def test_delta_is_the_perlmutter_node_with_one_nic():
    """NCSA Delta (HiCCL Table 4): Perlmutter's four directly connected A100s and costs, one
    Slingshot-11 NIC, which every GPU's inter-node traffic crosses."""
    import simpy

    from simcoll.simulator.network import FluidNetwork

    delta, perlmutter = load_machine("delta"), load_machine("perlmutter")
    assert delta.topology.gpu_link_counts() == perlmutter.topology.gpu_link_counts()
    assert _kind_count(delta.topology, "nic") == 1 and delta.model.links == perlmutter.model.links
    net = FluidNetwork(simpy.Environment(), load_machine("delta*2"), contention=True, record_utilisation=False)
    crossed = {res.name for g in range(4) for res, _ in net.route(g, 4 + g)[2] if "nic" in res.name}
    assert crossed and all("nic0" in name for name in crossed)


def test_dgx_h200_is_the_dgx_h100_fabric_with_h200_memory():
    """DGX H200: the DGX H100's NVLink4 / NVSwitch (NVLS) fabric and NICs, the H200's
    4.8 TB/s HBM3e; NCCL's tuner reads it as Hopper (SM90)."""
    from simcoll.nccl.baseline import nccl_machine

    h200, h100 = load_machine("dgx-h200"), load_machine("dgx-h100")
    assert h200.topology.links == h100.topology.links
    assert [c for c in h200.topology.components if c.kind != "nic"] == [
        c for c in h100.topology.components if c.kind != "nic"
    ]
    assert h200.model.links == h100.model.links and h200.model.gpu.memory_Bps == 4.8e12
    assert nccl_machine("dgx-h200").compute_capability == 90


@pytest.mark.parametrize(
    "name, gpus, sockets, compute_capability",
    [("l40s-pcie", 4, 1, 89), ("v100-pcie", 4, 2, 70), ("rtx5090-pcie", 8, 2, 120)],
)
def test_pcie_boards_route_gpu_pairs_through_their_cpus(name, gpus, sockets, compute_capability):
    """No NVLink: a GPU pair meets over PCIe through its socket's root complex,
    and across sockets over the socket link too; NCCL sees a PCI machine."""
    from simcoll.nccl.baseline import nccl_machine

    machine = load_machine(name)
    assert machine.num_ranks == gpus and _kind_count(machine.topology, "cpu") == sockets
    near = machine.route(0, 1)
    assert near.link_types == ("pcie",) and near.hops == 2
    far = machine.route(0, gpus - 1)
    assert far.hops == (3 if sockets > 1 else 2) and "pcie" in far.link_types
    described = nccl_machine(machine)
    assert described.intra == "pci" and described.compute_capability == compute_capability


def test_a3_mega_is_an_hgx_h100_with_a_200_gbps_gpu_nic_per_gpu():
    """Google Cloud A3 Mega: the DGX H100's NVLink fabric (with NVLink SHARP), 8 GPU NICs of 200 Gb/s."""
    mega, dgx = load_machine("a3-mega"), load_machine("dgx-h100")
    assert mega.topology.gpu_link_counts("nvlink") == dgx.topology.gpu_link_counts("nvlink")
    assert _kind_count(mega.topology, "nic") == 8 and mega.topology.network_link == "ethernet"
    assert mega.model.link("ethernet").bandwidth_Bps == pytest.approx(25e9 * 0.94)


def test_h100_nic_is_one_gpu_and_its_nic_for_network_only_clusters():
    cluster = load_topology("h100-nic*10")
    assert cluster.num_ranks == 10 and len(cluster.nodes) == 10
    assert _kind_count(cluster, "nic") == 10


def test_frontier_has_8_gcds_and_4_nics():
    node = load_topology("frontier")
    assert node.num_ranks == 8
    assert _kind_count(node, "nic") == 4
    assert _kind_count(node, "cpu") == 1
    assert node.network_link == "slingshot"
    matrix = node.gpu_link_counts("infinity_fabric")
    for package in range(4):
        assert matrix[2 * package][2 * package + 1] == 4  # the two GCDs of one MI250X


def test_aurora_has_12_tiles_and_8_nics():
    node = load_topology("aurora")
    assert node.num_ranks == 12
    assert _kind_count(node, "nic") == 8
    assert _kind_count(node, "cpu") == 2
    assert node.network_link == "slingshot"
    # the six PVCs are all-to-all over Xe Link
    matrix = node.gpu_link_counts("xe_link")
    for p in range(6):
        for q in range(6):
            if p != q:
                assert any(matrix[2 * p + s][2 * q + t] for s in range(2) for t in range(2))


def test_z52_is_an_8_gpu_ring():
    z52 = load_topology("z52")
    assert z52.num_ranks == 8
    matrix = z52.gpu_link_counts()
    assert all(sum(row) == 2 for row in matrix)  # each GPU: one link to each ring neighbour
    ring = nx.Graph((a, b) for a in range(8) for b in range(8) if matrix[a][b])
    assert nx.is_connected(ring) and nx.cycle_basis(ring) and len(nx.cycle_basis(ring)[0]) == 8
    assert set(z52.link_types) == {"xgmi", "pcie"}
    assert sum(1 for link in z52.links if link.type == "pcie") == 2  # the two links between islands


def test_p5_gives_each_h100_four_efa_cards():
    """AWS p5.48xlarge: the HGX H100 board (as the DGX H100's), 32 EFA cards of 100 Gb/s, four per
    GPU; bound so, each GPU reaches another node at four cards' rate."""
    import simpy

    from simcoll.simulator.network import FluidNetwork

    p5, dgx = load_machine("p5"), load_machine("dgx-h100")
    assert p5.topology.gpu_link_counts("nvlink") == dgx.topology.gpu_link_counts("nvlink")
    assert _kind_count(p5.topology, "nic") == 32 and p5.model.link("ethernet").line_rate_Bps == 12.5e9
    net = FluidNetwork(simpy.Environment(), load_machine("p5*2"), contention=True, record_utilisation=False)
    assert net.nics_of(3) == tuple(f"n0.nic{n}" for n in range(12, 16))
    assert net.route(3, 11)[1] == pytest.approx(4 * 12.5e9 * 0.94, rel=1e-12)

"""Scale-out fabrics of clusters: two-tier Clos (radix, oversubscription), NICs per node, GPUDirect."""

import pytest

from simcoll.errors import TopologyError
from simcoll.machines import load_machine, load_topology
from simcoll.topology_generators import clos_shape, cluster, parse_fabric


def _kinds(topology, kind):
    return [c for c in topology.components if c.kind == kind]


def test_clos_shape_splits_ports_by_oversubscription():
    assert clos_shape(64, 16, 1.0) == (8, 8, 8)  # 8 down, 8 up: non-blocking
    assert clos_shape(64, 16, 3.0) == (6, 12, 4)  # 12 down, 4 up
    with pytest.raises(TopologyError, match="exceed a two-tier Clos of radix 4"):
        clos_shape(100, 4, 1.0)


def test_clos_cluster_has_leaves_and_a_spine_layer_of_uplinks():
    topo = load_topology("dgx-a100*4/clos:radix=16,oversub=3")
    assert topo.num_ranks == 32
    switches = sorted(c.name for c in _kinds(topo, "ib_switch"))
    assert switches == ["leaf0", "leaf1", "leaf2", "spine"]  # 32 NICs / 12 down ports
    uplinks = {lk.src: lk.count for lk in topo.links if lk.dst == "spine"}
    assert uplinks == {"leaf0": 4, "leaf1": 4, "leaf2": 4}  # 4 up ports per leaf
    nic_links = [lk for lk in topo.links if lk.dst.startswith("leaf")]
    assert len(nic_links) == 32 and all(lk.type == "ib" for lk in nic_links)
    assert sum(lk.dst == "leaf2" for lk in nic_links) == 8


def test_single_leaf_clos_needs_no_spine():
    topo = load_topology("dgx-a100*2/clos:radix=32")
    assert [c.name for c in _kinds(topo, "ib_switch")] == ["leaf0"]


def test_nics_per_node_keeps_evenly_spread_nics_and_gdr_flag():
    node = load_topology("dgx-a100")
    topo = cluster(node, 2, "rail:nics=2,gdr=off")
    nics = _kinds(topo, "nic")
    assert sorted(c.name for c in nics) == ["n0.nic0", "n0.nic4", "n1.nic0", "n1.nic4"]
    assert not any(c.gpudirect for c in nics)
    assert sorted(c.name for c in _kinds(topo, "ib_switch")) == ["rail0", "rail4"]
    assert topo.name == "dgx-a100*2/rail:nics=2,gdr=off"
    with pytest.raises(TopologyError, match="cannot keep 16 NICs"):
        cluster(node, 2, "fat-tree:nics=16")


@pytest.mark.parametrize(
    "text, message",
    [
        ("mesh", "must be one of"),
        ("rail:radix=8", "bad option"),
        ("clos:oversub=0.5", "oversub must be"),
        ("fat-tree:nics=0", "nics must be"),
        ("clos:radix=x", "bad option"),
    ],
)
def test_bad_fabric_specs_name_the_problem(text, message):
    with pytest.raises(TopologyError, match=message):
        parse_fabric(text)


def _times(*specs, algorithm="direct", size="64MB"):
    """Simulated Allgather time of ``algorithm`` on each machine (through the experiments runner,
    which adapts to generate()'s current signature)."""
    from simcoll.sweeps import load_study, run_batch

    study = load_study(
        {
            "name": "fabrics",
            "machines": list(specs),
            "collectives": ["allgather"],
            "algorithms": [algorithm],
            "sizes": size,
        }
    )
    rows = [row for batch in study.batches() for row in run_batch(batch)]
    assert all(row["status"] == "ok" for row in rows), rows
    return [row["time_s"] for row in rows]


def test_oversubscribed_clos_is_slower_and_fewer_nics_are_slower():
    # direct Allgather loads every NIC; at oversub 3 a leaf has 2 uplinks for 6 NICs
    full, thin = _times("dgx-a100*4/clos:radix=8,oversub=1", "dgx-a100*4/clos:radix=8,oversub=3")
    assert thin > full
    eight, one = _times("dgx-a100*2", "dgx-a100*2/fat-tree:nics=1", algorithm="nccl-ring")
    assert one > 2 * eight


def test_a_gpu_subset_keeps_those_gpus_ranked_as_listed():
    """NODE[i,j]: the GPUs CUDA_VISIBLE_DEVICES=i,j leaves a job, ranked in that order."""
    topo = load_topology("dgx-h100[3,1]")
    assert topo.name == "dgx-h100[3,1]" and topo.num_ranks == 2
    assert [(g.name, g.rank) for g in topo.gpus] == [("gpu3", 0), ("gpu1", 1)]
    assert topo.default_model == "dgx-h100"  # the node's model prices the subset
    full = load_topology("dgx-h100")
    assert {c.name for c in _kinds(topo, "nvswitch")} == {c.name for c in _kinds(full, "nvswitch")}
    nics = [c.name for c in _kinds(topo, "nic")]
    assert nics == ["nic0", "nic1", "nic2", "nic3"]  # on the PCIe switches of GPUs 1 and 3
    assert not any({lk.src, lk.dst} & {"gpu0", "gpu2"} for lk in topo.links)


def test_a_gpu_subset_drops_what_only_the_gpus_left_out_reached():
    from simcoll.topology import Component, Link, build_topology
    from simcoll.topology_generators import gpu_subset

    node = build_topology(
        "pair",
        [Component("gpu0", "gpu"), Component("gpu1", "gpu"), Component("nic1", "nic")],
        [Link("gpu0", "gpu1", "nvlink"), Link("nic1", "gpu1", "pcie")],
    )
    topo = gpu_subset(node, [0])
    assert [c.name for c in topo.components] == ["gpu0"] and topo.links == ()
    assert load_topology("fully-connected:4[0,2]").num_ranks == 2  # a generator's node too


def test_a_cluster_of_gpu_subsets_is_a_cluster_of_the_smaller_node():
    topo = load_topology("dgx-h100[0,1]*2")
    # the NICs beside GPUs 0 and 1 (their PCIe switch) stay; nics=K keeps fewer
    assert topo.num_ranks == 4 and sorted(c.name for c in _kinds(topo, "nic")) == [
        "n0.nic0", "n0.nic1", "n1.nic0", "n1.nic1"
    ]  # fmt: skip
    assert len(_kinds(load_topology("dgx-h100[0,1]*2/fat-tree:nics=1"), "nic")) == 2
    assert len(_kinds(load_topology("perlmutter[0]"), "nic")) == 4  # NICs on the CPU: as near to every GPU


@pytest.mark.parametrize(
    "spec, message",
    [
        ("l40s-pcie[]", "list the GPUs to keep as ranks separated by commas"),
        ("l40s-pcie[0,,1]", "list the GPUs to keep"),
        ("l40s-pcie[0, 1]*2", "list the GPUs to keep"),
        ("l40s-pcie[1,1]", "a rank listed twice"),
        ("l40s-pcie[4]", "4 is not a rank"),
        ("l40s-pcie[0][1]", "GPU subset \\(NODE\\[i,j\\]\\)"),
    ],
)
def test_a_bad_gpu_subset_names_the_problem(spec, message):
    with pytest.raises(TopologyError, match=message):
        load_topology(spec)


@pytest.mark.parametrize("spec, reduces", [("dgx-h100*2", True), ("a3-mega*2", False), ("p5*2", False)])
def test_a_fabric_reduces_by_default_only_under_infiniband_nodes_whose_switches_reduce(spec, reduces):
    """NVLink-SHARP nodes on InfiniBand come with SHARP switches (Quantum-2); the Ethernet fabrics of
    cloud H100 nodes (GPUDirect-TCPXO, EFA) reduce nothing, so CollNet does not apply there and a
    comparison on them runs (it stopped on the missing in-fabric reduce rate)."""
    from simcoll.compare import compare

    machine = load_machine(spec)
    fabric = [c for c in machine.topology.components if c.node is None]
    assert fabric and all(c.reduce == reduces for c in fabric)
    rows, skipped = compare(machine, "allreduce", [1 << 20], algorithms=["collnet", "ring"])
    assert ("collnet" in set(rows.algorithm)) == reduces and "ring" in set(rows.algorithm)

"""Topology schema, validation, generators and clusters."""

import pytest

from simcoll import load_machine, load_topology
from simcoll.errors import ModelError, TopologyError
from simcoll.topology import topology_from_dict, topology_to_dict
from simcoll.topology_generators import cluster


@pytest.mark.parametrize(
    "spec, ranks, degree",
    [
        ("ring:5", 5, 2),
        ("line:4", 4, None),
        ("fully-connected:6", 6, 5),
        ("torus2d:3x4", 12, 4),
        ("hypercube:4", 16, 4),
        ("torus2d:2x3", 6, 3),
    ],
)
def test_generators_build_the_named_shapes(spec, ranks, degree):
    topo = load_topology(spec)
    assert topo.num_ranks == ranks
    if degree is not None:
        assert all(sum(row) == degree for row in topo.gpu_link_counts())


def test_hub_and_spoke_joins_every_gpu_to_one_switch():
    topo = load_topology("hub-and-spoke:5")
    assert [c.kind for c in topo.components].count("switch") == 1
    assert topo.gpu_link_counts() == [[0] * 5 for _ in range(5)]
    assert len(topo.links) == 5


@pytest.mark.parametrize("spec", ["ring:1", "torus2d:1x1", "hypercube:0", "ring:x", "mesh:4", "torus2d:4"])
def test_bad_generator_parameters_are_named(spec):
    with pytest.raises(TopologyError, match="ring|torus2d|hypercube|mesh|needs|parameters|expected|generator"):
        load_topology(spec)


def test_clusters_number_ranks_node_major_and_join_nics():
    fat = load_topology("dgx-a100*4")
    assert fat.num_ranks == 32 and fat.nodes == (0, 1, 2, 3)
    assert fat.node_of(9) == 1 and fat.ranks_of_node(2) == list(range(16, 24))
    rail = load_topology("dgx-a100*2/rail")
    assert sum(c.kind == "ib_switch" for c in rail.components) == 8
    m = load_machine("ndv2*2")
    route = m.route(0, 8)
    assert route is not None and "ib" in route.link_types


def test_cluster_of_a_node_without_nic_is_refused():
    with pytest.raises(TopologyError, match="no NIC"):
        cluster(load_topology("dgx1"), 2)


def _base():
    return {"name": "t", "gpus": 2, "links": [["gpu0", "gpu1", "nvlink", 1]]}


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d.update(colour="red"), "unknown field 'colour'"),
        (lambda d: d["links"].append(["gpu0", "gpu7", "nvlink"]), r"links\[1\]\.dst: unknown component 'gpu7'"),
        (lambda d: d["links"].__setitem__(0, ["gpu0", "gpu1", "nvlink", 0]), r"links\[0\]\.count"),
        (lambda d: d["links"].__setitem__(0, ["gpu0", "gpu1", "nvlink", -2]), "multiplicity"),
        (lambda d: d["links"].__setitem__(0, ["gpu0", "gpu1", "warp", 1]), r"links\[0\]\.type"),
        (lambda d: d.update(gpus=3), "disconnected: gpu2"),
        (lambda d: d.update(components=[{"name": "gpu0", "kind": "cpu"}]), "duplicate component 'gpu0'"),
        (lambda d: d.update(components=[{"name": "x", "kind": "toaster"}]), "kind 'toaster'"),
        (lambda d: d.update(components=[{"name": "x", "kind": "cpu", "speed": 3}]), r"components\[0\]: unknown field"),
        (lambda d: d.pop("name"), "'name' is required"),
    ],
)
def test_bad_topologies_fail_naming_the_field(mutate, message):
    data = _base()
    mutate(data)
    with pytest.raises(TopologyError, match=message):
        topology_from_dict(data, where="bad.yaml")


def test_errors_name_the_file(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("name: x\ngpus: 2\nlinks:\n  - [gpu0, gpu9, nvlink]\n")
    with pytest.raises(TopologyError, match=r"broken\.yaml: links\[0\]\.dst"):
        load_topology(str(path))
    path.write_text("name: [unclosed\n")
    with pytest.raises(TopologyError, match="not valid YAML"):
        load_topology(str(path))


def test_round_trip_through_dict_preserves_the_topology():
    for name in ("ndv2", "dgx2", "dgx-a100*2"):
        topo = load_topology(name)
        again = topology_from_dict(topology_to_dict(topo))
        assert again.components == topo.components and again.links == topo.links


def test_networkx_view_has_one_edge_per_direction_and_type():
    graph = load_topology("dgx1").to_networkx()
    assert graph.number_of_nodes() == 8
    assert graph["gpu0"]["gpu1"]["nvlink"]["count"] == 2 and graph["gpu1"]["gpu0"]["nvlink"]["count"] == 2


def test_model_must_cover_every_link_type():
    with pytest.raises(ModelError, match="does not cover link type"):
        load_machine("ndv2", "generic")  # generic has no pcie


def test_routes_prefer_direct_links_and_add_parallel_planes():
    assert load_machine("dgx1").route(0, 5) is None  # no NVLink, and dgx1 models no PCIe
    ndv2 = load_machine("ndv2")
    assert ndv2.route(0, 1).link_types == ("nvlink",)  # the direct double link, not PCIe
    assert ndv2.route(0, 5).hops > 1
    dgx2 = load_machine("dgx2")
    route = dgx2.route(0, 15)
    assert route.bandwidth_Bps == pytest.approx(6 * dgx2.model.link("nvlink").bandwidth_Bps)


def test_an_edited_file_is_read_again(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text("name: t\ngpus: 2\nlinks:\n  - [gpu0, gpu1, nvlink]\n")
    assert load_topology(str(path)).num_ranks == 2
    path.write_text("name: t\ngpus: 3\nlinks:\n  - [gpu0, gpu1, nvlink]\n  - [gpu1, gpu2, nvlink]\n")
    assert load_topology(str(path)).num_ranks == 3

"""Rank rotations that map a machine onto itself (issue 51 item 2,
:mod:`simcoll.topology_symmetry`): a ring's cyclic shift, a torus's row
shift, a board's other half. A schedule symmetric under one is held by its
first ranks' transfers, generates, verifies and simulates through them, and
gives what every transfer listed gives."""

import pytest

from simcoll import load_machine, load_topology
from simcoll.algorithms import generate
from simcoll.analytic import _routes_rotate, critical_path_time_s
from simcoll.simulator import simulate
from simcoll.topology import topology_from_dict
from simcoll.topology_symmetry import rank_shifts
from simcoll.verify import algorithm_is_correct


@pytest.mark.parametrize(
    "spec, shifts",
    [
        ("ring:12", (1, 2, 3, 4, 6)),  # every rotation of a ring
        ("fully-connected:6", (1, 2, 3)),
        ("torus2d:4x4", (4, 8)),  # rank r*4+c: moving a row is a rotation, moving a column wraps rows
        ("torus2d:3x5", (5,)),
        ("hypercube:3", (4,)),  # translations are XOR maps; +4 mod 8 is the one that is also a shift
        ("line:6", ()),  # its ends
        ("hub-and-spoke:8", (1, 2, 4)),  # the hub maps onto itself
        ("hub-and-spoke:1024", (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)),  # (forced: no two switches alike)
        ("dgx1", (4,)),  # SCCL's hybrid cube-mesh: the other quad
        ("dgx-h100", (4,)),  # the other half of the board (its NICs, PCIe switches and CPU)
        ("dgx2", (8,)),  # the other baseboard, its six NVSwitches with it
        ("ndv2", ()),  # one NIC, on one PCIe switch
        ("dgx-h100*4", (8, 16)),  # a cluster: whole nodes
    ],
)
def test_the_rank_shifts_are_the_rotations_that_map_the_machine_onto_itself(spec, shifts):
    assert rank_shifts(load_topology(spec)) == shifts


def test_a_switch_that_breaks_the_symmetry_removes_the_shift():
    """Four GPUs in a ring of NVLinks, GPU links alike under every shift, but
    one PCIe switch holding GPUs 0 and 1 and another GPUs 2 and 3: a shift
    by one would put GPUs 1 and 2 on one switch, a shift by two keeps the pairs."""
    links = [[f"gpu{i}", f"gpu{(i + 1) % 4}", "nvlink"] for i in range(4)]
    links += [["gpu0", "sw0", "pcie"], ["gpu1", "sw0", "pcie"], ["gpu2", "sw1", "pcie"], ["gpu3", "sw1", "pcie"]]
    data = {
        "name": "paired",
        "gpus": 4,
        "components": [{"name": "sw0", "kind": "pcie_switch"}, {"name": "sw1", "kind": "pcie_switch"}],
        "links": links,
    }
    assert rank_shifts(topology_from_dict(data)) == (2,)
    data["components"][1]["model"] = "another switch"  # and when the two switches differ, none
    assert rank_shifts(topology_from_dict(data)) == ()


@pytest.mark.parametrize(
    "spec, coll, order",
    [("ring:64", "allreduce", 64), ("ring:9", "allgather", 9), ("dgx-h100", "reducescatter", 2)],
)
def test_a_ring_on_a_rotating_machine_is_held_by_its_first_ranks(spec, coll, order):
    machine = load_machine(spec)
    algorithm = generate("ring", machine, coll)
    orbit = algorithm.orbit
    assert orbit is not None and orbit.order == order
    assert algorithm_is_correct(algorithm, machine.topology)
    listed = algorithm.with_changes(transfers=orbit.expand())
    assert algorithm_is_correct(listed, machine.topology)
    for size in (1 << 10, 1 << 28):
        ours = simulate(algorithm, machine, size, record_utilisation=False)
        assert f"rank-rotation quotient of order {order}" in ours.stats["path"] or spec == "dgx-h100"
        assert ours.time_s == simulate(listed, machine, size, record_utilisation=False).time_s
        assert critical_path_time_s(algorithm, machine, size) == critical_path_time_s(listed, machine, size)


def test_a_ring_allreduce_on_ring_n_is_the_closed_form():
    """NV-Group eq. (3), a ring Allreduce on P GPUs of one α and B (ring:N,
    the generic model, no protocol), with the reductions' T_R(M/P) after each
    of the P-1 reducing steps: simulated through its first rank alone."""
    machine = load_machine("ring:256")
    algorithm = generate("ring", machine, "allreduce")
    p, size = 256, float(1 << 30)
    link = machine.model.link("nvlink")
    expected = 2 * (p - 1) * (link.alpha_s + size / p / link.bandwidth_Bps) + (p - 1) * machine.model.reduce_time_s(
        size / p
    )
    result = simulate(algorithm, machine, size, record_utilisation=False)
    assert result.stats["node_rotation"] == p
    assert result.time_s == pytest.approx(expected, rel=1e-12)
    assert critical_path_time_s(algorithm, machine, size) == pytest.approx(expected, rel=1e-12)


def test_the_closed_form_replays_an_orbit_only_where_its_routes_repeat():
    """On a Clos whose leaves join two nodes each, a shift by one node moves
    a route within a leaf onto one across the spine: the closed form then
    lists every transfer, and gives what it gives listed."""
    machine = load_machine("dgx-h100*8/clos:radix=16,oversub=2")
    algorithm = generate("ring", machine, "allgather")
    assert not _routes_rotate(machine, algorithm.orbit)
    assert _routes_rotate(load_machine("dgx-h100*4"), generate("ring", "dgx-h100*4", "allgather").orbit)
    listed = algorithm.with_changes(transfers=algorithm.orbit.expand())
    assert critical_path_time_s(algorithm, machine, 1 << 26) == critical_path_time_s(listed, machine, 1 << 26)

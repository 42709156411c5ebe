"""Contention beyond max-min sharing (issue 7 item 2), each parameter on a
minimal machine: it must move time in the documented direction by the
documented amount, and nothing when ``contention=False``.

- switch ports lose bandwidth with concurrent connections (TACCL §3.2, Fig. 4):
  ``switches.<kind>.concurrency_efficiency``, and ``port_bandwidth_Bps``;
- PCIe links shared by the devices below them (TACCL §4.2, NDv2) — structural;
- host-memory staging where GPUDirect RDMA is absent (TACCL §3 Ex. 3.2, §4.2):
  ``network.host_staging``;
- GPU→NIC binding, packed / round-robin / bijective (HiCCL §2.3):
  ``network.nic_binding``; round-robin of 12 GPUs on 8 NICs reaches 75 %.
"""

import pytest
import simpy

from simcoll import load_machine
from simcoll.cost_model import model_from_dict
from simcoll.machines import Machine
from simcoll.simulator.network import FluidNetwork
from simcoll.topology import topology_from_dict
from simcoll.topology_generators import cluster

ALPHA = 1e-6
BW = 10e9
SIZE = 1e7


def _model(links=("nvlink",), **extra):
    return model_from_dict(
        {
            "name": "test",
            "links": {t: {"alpha_s": ALPHA, "bandwidth_Bps": BW, "source": "test"} for t in links},
            **extra,
        }
    )


def _times(machine, sends, contention=True):
    env = simpy.Environment()
    net = FluidNetwork(env, machine, contention=contention)
    events = [net.transfer(s, d, n) for s, d, n in sends]
    env.run()
    return [e.value for e in events]


# -- switch ports (TACCL Fig. 4) ---------------------------------------------------------
def _hub(**model_extra):
    topo = topology_from_dict(
        {
            "name": "hub",
            "gpus": 5,
            "components": [{"name": "sw", "kind": "nvswitch"}],
            "links": [[f"gpu{i}", "sw", "nvlink"] for i in range(5)],
        }
    )
    return Machine(topo, _model(**model_extra))


SWITCH = {"nvswitch": {"latency_s": 0.0, "concurrency_efficiency": [[1, 1.0], [4, 0.5]], "source": "test"}}


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_switch_port_efficiency_falls_with_connections(n):
    machine = _hub(switches=SWITCH)
    eff = machine.model.switches["nvswitch"].efficiency(n)
    sends = [(i, 0, SIZE) for i in range(1, n + 1)]
    times = _times(machine, sends)
    # n flows share gpu0's switch port, whose capacity drops to eff(n) · B
    assert times == pytest.approx([ALPHA + n * SIZE / (eff * BW)] * n, rel=1e-12)
    plain = _times(_hub(), sends)
    assert plain == pytest.approx([ALPHA + n * SIZE / BW] * n, rel=1e-12)
    if n > 1:
        assert times[0] > plain[0]
    assert _times(machine, sends, contention=False) == pytest.approx([ALPHA + SIZE / BW] * n, rel=1e-12)


def test_switch_port_bandwidth_caps_a_flow():
    switches = {"nvswitch": {"latency_s": 0.0, "port_bandwidth_Bps": BW / 2, "source": "test"}}
    (t,) = _times(_hub(switches=switches), [(1, 0, SIZE)])
    assert t == pytest.approx(ALPHA + SIZE / (BW / 2), rel=1e-12)


# -- PCIe sharing ------------------------------------------------------------------------
def _pcie_tree():
    # gpu0, gpu1 under pcisw0; gpu2, gpu3 under pcisw1; both switches under cpu0
    links = [["gpu0", "pcisw0", "pcie"], ["gpu1", "pcisw0", "pcie"], ["gpu2", "pcisw1", "pcie"]]
    links += [["gpu3", "pcisw1", "pcie"], ["pcisw0", "cpu0", "pcie"], ["pcisw1", "cpu0", "pcie"]]
    topo = topology_from_dict(
        {
            "name": "tree",
            "gpus": 4,
            "components": [
                {"name": "cpu0", "kind": "cpu"},
                {"name": "pcisw0", "kind": "pcie_switch"},
                {"name": "pcisw1", "kind": "pcie_switch"},
            ],
            "links": links,
        }
    )
    return Machine(topo, _model(links=("pcie",)))


def test_pcie_uplink_is_shared_by_the_devices_below_it():
    machine = _pcie_tree()
    alone = _times(machine, [(0, 2, SIZE)])
    both = _times(machine, [(0, 2, SIZE), (1, 3, SIZE)])
    assert alone == pytest.approx([ALPHA + SIZE / BW], rel=1e-12)
    # both flows cross pcisw0 -> cpu0 -> pcisw1: each gets half
    assert both == pytest.approx([ALPHA + 2 * SIZE / BW] * 2, rel=1e-12)
    # below one switch the GPUs do not touch the uplink
    assert _times(machine, [(0, 1, SIZE), (2, 3, SIZE)]) == pytest.approx([ALPHA + SIZE / BW] * 2, rel=1e-12)


# -- host-memory staging (no GPUDirect RDMA) -----------------------------------------------
def _staging_cluster(gpudirect: bool, staging: bool, memory_Bps: float):
    node = topology_from_dict(
        {
            "name": "node",
            "gpus": 1,
            "components": [
                {"name": "cpu0", "kind": "cpu"},
                {"name": "pcisw0", "kind": "pcie_switch"},
                {"name": "nic0", "kind": "nic", "gpudirect": gpudirect},
            ],
            "links": [["gpu0", "pcisw0", "pcie"], ["pcisw0", "nic0", "pcie"], ["pcisw0", "cpu0", "pcie"]],
        }
    )
    model = _model(
        links=("pcie", "ib"),
        host_memory={"bandwidth_Bps": memory_Bps, "source": "test"},
        network={"host_staging": staging, "source": "test"},
    )
    return Machine(cluster(node, 2), model)


def test_host_staging_costs_two_host_memory_passes():
    memory = 8e9  # staged: every byte written and read, so at most memory / 2 = 4 GB/s
    staged = _times(_staging_cluster(False, True, memory), [(0, 1, SIZE)])
    assert staged == pytest.approx([ALPHA + SIZE / (memory / 2)], rel=1e-12)
    # GPUDirect NICs, or the parameter off, or no contention: the NIC rate
    for machine, contention in (
        (_staging_cluster(True, True, memory), True),
        (_staging_cluster(False, False, memory), True),
        (_staging_cluster(False, True, memory), False),
    ):
        assert _times(machine, [(0, 1, SIZE)], contention) == pytest.approx([ALPHA + SIZE / BW], rel=1e-12)


def test_ndv2_staging_adds_the_cpu_uplink_and_host_memory():
    from simcoll.simulator.network import FluidNetwork as Net

    machine = load_machine("ndv2*2")
    assert machine.model.network.host_staging
    net = Net(simpy.Environment(), machine)
    names = {r.name for r, _ in net.route(0, 8)[2]}
    assert {"pcie n0.pcisw0->n0.cpu0", "pcie n0.cpu0->n0.pcisw0", "host memory n0.cpu0"} <= names
    assert {"pcie n1.pcisw0->n1.cpu0", "pcie n1.cpu0->n1.pcisw0", "host memory n1.cpu0"} <= names
    ideal = Net(simpy.Environment(), machine, contention=False)
    assert "host memory n0.cpu0" not in {r.name for r, _ in ideal.route(0, 8)[2]}


# -- GPU -> NIC binding (HiCCL §2.3) --------------------------------------------------------
def _nic_cluster(gpus: int, nics: int, binding: str):
    comps = [{"name": "pcisw", "kind": "pcie_switch"}] + [{"name": f"nic{i}", "kind": "nic"} for i in range(nics)]
    links = [[f"gpu{g}", "pcisw", "pcie", nics] for g in range(gpus)]
    links += [["pcisw", f"nic{i}", "pcie", gpus] for i in range(nics)]
    node = topology_from_dict({"name": "node", "gpus": gpus, "components": comps, "links": links})
    model = _model(links=("pcie", "ib"), network={"nic_binding": binding, "source": "test"})
    return Machine(cluster(node, 2), model)


def _all_to_other_node(machine, gpus):
    return max(_times(machine, [(g, gpus + g, SIZE) for g in range(gpus)]))


@pytest.mark.parametrize(
    "gpus, nics, binding, efficiency",
    [
        (12, 8, "round-robin", 0.75),  # HiCCL §6.3.5: Aurora, 12 tiles on 8 NICs
        (8, 4, "packed", 1.0),
        (8, 4, "round-robin", 1.0),
        (4, 4, "bijective", 1.0),
        (4, 8, "bijective", 1.0),  # two NICs per GPU (AWS p5 gives each H100 four): all eight carry
    ],
)
def test_nic_binding_load_balance(gpus, nics, binding, efficiency):
    machine = _nic_cluster(gpus, nics, binding)
    t = _all_to_other_node(machine, gpus)
    # the node's NICs could carry gpus·SIZE bytes in gpus·SIZE / (nics·B)
    ideal = gpus * SIZE / (nics * BW)
    assert ideal / (t - ALPHA) == pytest.approx(efficiency, rel=1e-9)


def test_round_robin_maps_gpu_g_to_nic_g_mod_n():
    net = FluidNetwork(simpy.Environment(), _nic_cluster(12, 8, "round-robin"))
    assert [net.nic_of(g) for g in (0, 7, 8, 11)] == ["n0.nic0", "n0.nic7", "n0.nic0", "n0.nic3"]
    packed = FluidNetwork(simpy.Environment(), _nic_cluster(8, 4, "packed"))
    assert [packed.nic_of(g) for g in range(8)] == [f"n0.nic{g // 2}" for g in range(8)]


def test_bijective_binding_on_fewer_nics_than_gpus_binds_to_the_nearest_nic():
    """A model written for one NIC per GPU, on a what-if node with fewer NICs,
    keeps each GPU on the NIC of its own group (packed), not an error."""
    net = FluidNetwork(simpy.Environment(), _nic_cluster(4, 2, "bijective"))
    assert [net.nic_of(g) for g in range(4)] == ["n0.nic0", "n0.nic0", "n0.nic1", "n0.nic1"]
    one_each = FluidNetwork(simpy.Environment(), _nic_cluster(4, 4, "bijective"))
    assert [one_each.nic_of(g) for g in range(4)] == [f"n0.nic{g}" for g in range(4)]


def test_a_gpu_with_several_nics_spreads_its_traffic_over_them():
    """Bijective binding on a node with k NICs per GPU: GPU g uses NICs g·k .. g·k + k - 1 (the i-th
    of one end with the i-th of the other), each path carrying 1/k of the flow, so one GPU alone
    sends to another node at k NICs' rate; hops on every path carry all of it."""
    machine = _nic_cluster(4, 8, "bijective")
    net = FluidNetwork(simpy.Environment(), machine)
    assert net.nics_of(1) == ("n0.nic2", "n0.nic3") and net.nic_of(1) == "n0.nic2"
    alpha, bandwidth, resources = net.route(1, 5)
    shares = {res.name: weight for res, weight in resources}
    assert shares["pcie n0.gpu1->n0.pcisw"] == shares["pcie n1.pcisw->n1.gpu1"] == 1.0
    assert {name: w for name, w in shares.items() if "fabric" in name} == {
        "ib n0.nic2->fabric": 0.5,
        "ib fabric->n1.nic2": 0.5,
        "ib n0.nic3->fabric": 0.5,
        "ib fabric->n1.nic3": 0.5,
    }
    assert bandwidth == pytest.approx(2 * BW, rel=1e-12)
    assert _times(machine, [(1, 5, SIZE)]) == pytest.approx([ALPHA + SIZE / (2 * BW)], rel=1e-12)
    # one NIC per GPU: as before
    single = FluidNetwork(simpy.Environment(), _nic_cluster(4, 4, "bijective"))
    assert single.nics_of(1) == ("n0.nic1",) and single.route(1, 5)[1] == pytest.approx(BW, rel=1e-12)

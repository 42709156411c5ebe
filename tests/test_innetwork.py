"""In-network reduction: topology capabilities, the SwitchReduction step, its
verification, timing, JSON round trip, bounds, and the nvls / nvls-tree /
collnet generators."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simcoll import generate, load_machine, make_collective, simulate
from simcoll.algorithm import Algorithm, SwitchReduction, Transfer, TransferTable
from simcoll.bounds import time_lower_bound_s
from simcoll.errors import AlgorithmError, NotApplicableError, TopologyError
from simcoll.machines import Machine, load_topology
from simcoll.topology import topology_from_dict, topology_to_dict
from simcoll.verify import check

MEASUREMENTS = Path(__file__).resolve().parents[2] / "shared" / "reference" / "measurements"


@pytest.fixture(scope="module")
def h100():
    return load_machine("dgx-h100")


def _allreduce_by_switch(sources, destinations, switch="nvsw0", chunks=1):
    coll = make_collective("allreduce", 8, chunks)
    ops = [SwitchReduction(c, switch, tuple(sources), tuple(destinations), step=0) for c in range(chunks)]
    return Algorithm("by-switch", coll, (), switch_reductions=ops)


def test_dgx_h100_nvswitches_reduce_and_multicast(h100):
    names = [c.name for c in h100.topology.reducing_switches()]
    assert names == ["nvsw0", "nvsw1", "nvsw2", "nvsw3"]
    assert all(h100.topology.component(n).multicast for n in names)
    assert not load_topology("dgx-a100").reducing_switches()


def test_capabilities_round_trip_and_only_switches_may_reduce(h100):
    data = topology_to_dict(h100.topology)
    assert topology_from_dict(data) == h100.topology
    bad = {
        "name": "x",
        "gpus": 2,
        "components": [{"name": "c", "kind": "cpu", "reduce": True}],
        "links": [["gpu0", "c", "pcie"], ["gpu1", "c", "pcie"]],
    }
    with pytest.raises(TopologyError, match="'c': only switches .* can reduce"):
        topology_from_dict(bad)


def test_cluster_sharp_option():
    assert [c.name for c in load_topology("dgx-h100*2").reducing_switches(None)] == ["fabric"]
    assert not load_topology("dgx-h100*2/fat-tree:sharp=off").reducing_switches(None)
    assert [c.name for c in load_topology("dgx-a100*2/rail:sharp=on").reducing_switches(None)][:2] == ["rail0", "rail1"]


def test_verifier_accepts_a_correct_switch_reduction(h100):
    assert check(_allreduce_by_switch(range(8), range(8)), h100) == []


def test_verifier_rejects_wrong_switch_reductions(h100):
    missing = check(_allreduce_by_switch(range(7), range(8)), h100)
    assert any("lacks the contributions of rank(s) [7]" in p for p in missing)
    pcie = check(_allreduce_by_switch(range(8), range(8), "pcisw0"), h100)
    assert any("'pcisw0' as a pcie_switch, not a switch" in p for p in pcie)
    a100 = load_machine("dgx-a100")
    problems = check(_allreduce_by_switch(range(8), range(8), "nvsw0"), a100)
    assert any("switch nvsw0 does not reduce" in p for p in problems)
    assert any("does not multicast" in p for p in problems)
    twice = Algorithm(
        "twice",
        make_collective("allreduce", 8, 1),
        (),
        switch_reductions=(
            SwitchReduction(0, "nvsw0", tuple(range(8)), (0,), step=0),
            SwitchReduction(0, "nvsw1", (0, 1), tuple(range(8)), step=1),
        ),
    )
    assert any("count the contribution of rank(s) [1] twice" in p for p in check(twice, h100))


def test_structure_errors_name_the_field():
    with pytest.raises(AlgorithmError, match=r"switch_reductions\[0\].*sources names a rank twice"):
        _allreduce_by_switch([0, 0], range(8))
    with pytest.raises(AlgorithmError, match=r"destinations: rank 9 out of range"):
        _allreduce_by_switch(range(8), [9])


@pytest.mark.parametrize("bad", [(True, 0), (np.int64(1), 0), ([1], 0)])
def test_ranks_equal_to_checked_ones_but_not_ints_are_refused(bad):
    # rank tuples are checked once per schedule; (True, 0) and (np.int64(1), 0) equal (1, 0) but are no
    # ranks, and ([1], 0) cannot even be looked up among those checked
    ok = SwitchReduction(0, "nvsw0", (1, 0), (0, 1), step=0)
    with pytest.raises(AlgorithmError, match=r"switch_reductions\[1\].*sources: rank .* out of range"):
        Algorithm(
            "bad",
            make_collective("allreduce", 2, 1),
            (),
            switch_reductions=(ok, SwitchReduction(0, "nvsw0", bad, (0, 1), step=1)),
        )


def test_json_round_trip(h100):
    algo = generate("nvls", h100, "allreduce")
    back = Algorithm.from_json(algo.to_json())
    assert back == algo
    assert back.switch_reductions[0] == SwitchReduction(0, "nvsw0", tuple(range(8)), tuple(range(8)), step=0)


def test_lowering_and_analytic_refuse_clearly(h100):
    from simcoll.analytic import critical_path_time_s
    from simcoll.compiler.lower import lower_algorithm

    algo = generate("nvls", h100, "allreduce")
    with pytest.raises(AlgorithmError, match="MSCCL XML export.*in-switch reduction"):
        lower_algorithm(algo)
    with pytest.raises(AlgorithmError, match="analytic critical-path time does not support in-switch"):
        critical_path_time_s(algo, h100, 1 << 20)


def test_nvls_time_is_the_closed_form(h100):
    """NVLS Allreduce alone on a DGX H100: every GPU streams the buffer N into
    the NVSwitches over its 18 links at the model's reduce rate r per link (the
    chunks dealt 5/4/4/5 like the links), so T = α + N / (18 · r) with r =
    min(reduce_Bps, multicast_Bps, NVLink bandwidth)."""
    algo = generate("nvls", h100, "allreduce")
    size = 1 << 30
    sw = h100.model.switches["nvswitch"]
    rate = min(sw.reduce_Bps, sw.multicast_Bps, h100.model.link("nvlink").bandwidth_Bps)
    expected = h100.model.link("nvlink").alpha_s + size / (18 * rate)
    for contention in (True, False):
        result = simulate(algo, h100, size, contention=contention, verify=False)
        assert result.time_s == pytest.approx(expected, rel=1e-9)


def test_nvls_beats_the_ring_from_64MB(h100):
    nvls = generate("nvls", h100, "allreduce")
    ring = generate("nccl-ring", h100, "allreduce")
    for size in (64 << 20, 256 << 20, 1 << 30):
        t_nvls = simulate(nvls, h100, size, verify=False).time_s
        t_ring = simulate(ring, h100, size, verify=False).time_s
        assert t_nvls < t_ring, size


def test_nvls_busbw_near_measured():
    """Against the published nccl-tests NVLS run on 8x H100 (skips without ../shared)."""
    log = MEASUREMENTS / "h100-80gb-hbm3-x8_all_reduce_nvls_together.log"
    if not log.exists():
        pytest.skip("no shared measurements")
    from simcoll.calibration.nccl_tests import read_nccl_tests

    rows = {int(r.size_bytes): r for r in read_nccl_tests(log).rows}
    measured = rows[1 << 30].busbw_GBps  # 467.55 GB/s
    machine = load_machine("dgx-h100")
    sim = simulate(generate("nvls", machine, "allreduce"), machine, 1 << 30, verify=False).busbw_GBps
    assert abs(sim / measured - 1) < 0.15


@pytest.mark.parametrize("collective", ["reducescatter", "allgather"])
def test_nvls_reducescatter_allgather_verify(h100, collective):
    algo = generate("nvls", h100, collective)
    assert check(algo, h100) == []
    assert simulate(algo, h100, 1 << 26, verify=False).time_s > 0


@pytest.mark.parametrize("name", ["nvls-tree", "collnet"])
def test_multi_node_generators_verify_on_dgx_h100_x2(name):
    machine = load_machine("dgx-h100*2")
    algo = generate(name, machine, "allreduce")
    assert check(algo, machine) == []
    assert algo.switch_reductions
    assert simulate(algo, machine, 1 << 26, verify=False).time_s > 0


def test_not_applicable_errors_are_clear():
    with pytest.raises(NotApplicableError, match="nvls runs inside one node; dgx-h100\\*2 has 2"):
        generate("nvls", load_machine("dgx-h100*2"), "allreduce")
    with pytest.raises(NotApplicableError, match="no switch that reduces and multicasts"):
        generate("nvls", load_machine("dgx-a100"), "allreduce")
    with pytest.raises(NotApplicableError, match="no network switch that reduces.*sharp=on"):
        generate("collnet", load_machine("dgx-a100*2"), "allreduce")
    with pytest.raises(NotApplicableError, match="collnet joins several nodes"):
        generate("collnet", load_machine("dgx-h100"), "allreduce")


def test_bounds_with_in_switch_reduction(h100):
    """Allreduce with reducing switches: T >= N / B (one send + one receive of
    the buffer per GPU), so busbw can exceed the point-to-point bound; B here
    is a GPU's 18 NVLink4 links plus its PCIe link."""
    size = 1 << 30
    t, _ = time_lower_bound_s(make_collective("allreduce", 8), h100, size)
    per_gpu = 18 * h100.model.link("nvlink").bandwidth_Bps + h100.model.link("pcie").bandwidth_Bps
    assert t == pytest.approx(size / per_gpu, rel=1e-3)
    # the same machine without NVLink SHARP: ReduceScatter + Allgather, 2 (P-1)/P = 7/4 times as long
    data = topology_to_dict(h100.topology)
    for comp in data["components"]:
        comp.pop("reduce", None)
        comp.pop("multicast", None)
    plain = Machine(topology_from_dict(data), h100.model)
    t_plain, _ = time_lower_bound_s(make_collective("allreduce", 8), plain, size)
    assert t_plain == pytest.approx(t * 7 / 4, rel=1e-3)
    sim = simulate(generate("nvls", h100, "allreduce"), h100, size, verify=False).time_s
    assert sim >= t


def test_two_node_nvls_tree_exceeds_what_the_nics_give_a_ring():
    """NVLS-tree on two DGX H100s sends each node's reduced buffer across once
    per direction, so its busbw is not capped by the NICs as a ring's is
    (nccl-tests#309: 450 GB/s at 1 GiB, against ~393 for the ring, whose
    busbw cannot pass 8 NICs x 50 GB/s)."""
    from simcoll.nccl.baseline import nccl_algorithm

    machine = load_machine("dgx-h100*2")
    size = 1 << 30
    tree = nccl_algorithm(machine, "allreduce", size, algorithms=["nvls_tree"])
    ring = nccl_algorithm(machine, "allreduce", size, algorithms=["ring"])
    nics = 8 * machine.model.link("ib").line_rate_Bps / 1e9
    tree_bw = simulate(tree, machine, size, verify=False).busbw_GBps
    ring_bw = simulate(ring, machine, size, verify=False).busbw_GBps
    assert ring_bw <= nics < tree_bw
    assert 0.85 < tree_bw / 450.0 < 1.15


@pytest.mark.parametrize("topo", ["dgx-h100*2", "dgx-h100*5", "dgx-h100*6"])  # odd counts shift tree 1
def test_nvls_tree_runs_each_chunk_up_and_down_its_double_binary_tree(topo):
    # nvls-tree builds its inter-node transfers as columns; chunk by chunk they are the reduce-up
    # then broadcast-down of tree_transfers over the chunk's owners (one per node, local index
    # c mod G) on tree (c // G) mod 2 from step c // G + 1, the broadcast one step later
    from simcoll.algorithms.innetwork import tree_transfers

    machine = load_machine(topo)
    algorithm = generate("nvls-tree", machine, "allreduce")
    per_node = [machine.topology.ranks_of_node(n) for n in machine.topology.nodes]
    g = len(per_node[0])
    expected = []
    for c in range(algorithm.collective.num_chunks):
        owners = [ranks[c % g] for ranks in per_node]
        up, down, _, _ = tree_transfers(owners, c, (c // g) % 2, c // g + 1)
        expected += up + [Transfer(t.chunk, t.src, t.dst, t.op, step=t.step + 1) for t in down]
    assert isinstance(algorithm.transfers, TransferTable)
    assert algorithm.transfers == tuple(expected)
    assert check(algorithm, machine) == []


@pytest.mark.parametrize("topo", ["dgx-h100*2", "dgx-h100*5"])
def test_nvls_tree_and_collnet_reductions_chunk_by_chunk(topo):
    """The generators emit their switch reductions as columns; chunk by
    chunk they are, node by node, the NVLS reduction into the chunk's owner
    (local index c mod G) and then, node by node, the owner's multicast
    (NVLS-Tree); or per node the reduction and the multicast, then the
    owners' reduction in the fabric switch (CollNet). The switch is the
    node's turn for the chunk (the NVSwitches dealt by their links)."""
    from simcoll.algorithm import SwitchReductionTable
    from simcoll.algorithms.innetwork import _turns, fabric_reducing_switch, node_switch_shares

    machine = load_machine(topo)
    topology = machine.topology
    per_node = [sorted(topology.ranks_of_node(n)) for n in topology.nodes]
    g = len(per_node[0])
    tree = generate("nvls-tree", machine, "allreduce")
    turns = [_turns(node_switch_shares(topology, n, "nvls-tree")) for n in topology.nodes]
    expected = []
    for c in range(tree.collective.num_chunks):
        owner = [ranks[c % g] for ranks in per_node]
        others = [tuple(r for r in ranks if r != o) for ranks, o in zip(per_node, owner, strict=True)]
        multicast_step = max(t.step for t in tree.transfers if t.chunk == c) + 1
        sw = [t[c % len(t)] for t in turns]
        expected += [
            SwitchReduction(c, sw[j], tuple(per_node[j]), (owner[j],), step=c // g) for j in range(len(per_node))
        ]
        expected += [
            SwitchReduction(c, sw[j], (owner[j],), others[j], step=multicast_step) for j in range(len(per_node))
        ]
    assert isinstance(tree.switch_reductions, SwitchReductionTable)
    assert tree.switch_reductions == tuple(expected)

    collnet = generate("collnet", machine, "allreduce")
    turns = [_turns(node_switch_shares(topology, n, "collnet")) for n in topology.nodes]
    expected = []
    for c in range(collnet.collective.num_chunks):
        owners = tuple(ranks[c % g] for ranks in per_node)
        for j, ranks in enumerate(per_node):
            sw = turns[j][c % len(turns[j])]
            expected.append(SwitchReduction(c, sw, tuple(ranks), (owners[j],), step=0))
            expected.append(SwitchReduction(c, sw, (owners[j],), tuple(r for r in ranks if r != owners[j]), step=2))
        fabric = fabric_reducing_switch(topology, list(owners), "collnet")
        expected.append(SwitchReduction(c, fabric, owners, owners, step=1))
    assert isinstance(collnet.switch_reductions, SwitchReductionTable)
    assert collnet.switch_reductions == tuple(expected)


def test_a_switch_reduction_table_reads_as_the_tuple_of_its_reductions():
    from simcoll.algorithm import SwitchReductionTable

    table = SwitchReductionTable(
        chunk=[0, 1, 1],
        switch=[0, 1, 0],
        sources=[0, 0, 1],
        destinations=[1, 1, 0],
        step=[0, 0, 2],
        switches=["nvsw0", "nvsw1"],
        rank_sets=[(0, 1, 2), (2,)],
    )
    objects = (
        SwitchReduction(0, "nvsw0", (0, 1, 2), (2,), step=0),
        SwitchReduction(1, "nvsw1", (0, 1, 2), (2,), step=0),
        SwitchReduction(1, "nvsw0", (2,), (0, 1, 2), step=2),
    )
    assert table == objects and table == list(objects) and len(table) == 3
    assert table[-1] == objects[2] and table[1:] == objects[1:] and tuple(table) == objects
    assert repr(table) == "SwitchReductionTable(3 reductions)"
    with pytest.raises(IndexError, match="switch reduction index 3 out of range"):
        table[3]
    # in an Algorithm: the steps it spans, the same checks and JSON as the objects
    coll = make_collective("allreduce", 3, 2)
    with_table, with_objects = (Algorithm("t", coll, (), switch_reductions=r) for r in (table, objects))
    assert with_table.rounds_per_step == with_objects.rounds_per_step == (1, 1, 1)
    assert with_table.to_dict() == with_objects.to_dict()
    assert Algorithm.from_json(with_table.to_json()) == with_objects


def test_a_switch_reduction_table_is_checked_like_its_reductions():
    from simcoll.algorithm import SwitchReductionTable

    def table(rank_sets, chunk=(0,), switches=("nvsw0",), sources=(0,)):
        return SwitchReductionTable(chunk, [0], sources, [0], [0], switches=switches, rank_sets=rank_sets)

    coll = make_collective("allreduce", 8, 1)
    for bad, message in (
        (table([(0, 0)]), r"switch_reductions\[0\].*sources names a rank twice"),
        (table([(9,)]), r"switch_reductions\[0\].*sources: rank 9 out of range"),
        (table([(0, 1)], chunk=(3,)), r"switch_reductions\[0\].*chunk 3 out of range"),
        (table([(0, 1)], switches=("",)), r"switch_reductions\[0\].*switch must be a component name"),
    ):
        with pytest.raises(AlgorithmError, match=message):
            Algorithm("bad", coll, (), switch_reductions=bad)
    with pytest.raises(AlgorithmError, match="column sources indexes past its 1 listed entries"):
        table([(0, 1)], sources=(1,))
    with pytest.raises(AlgorithmError, match=r"column step has shape \(2,\), expected \(1,\)"):
        SwitchReductionTable([0], [0], [0], [0], [0, 1], switches=["s"], rank_sets=[(0,)])


@pytest.mark.parametrize("name", ["nvls-tree", "collnet"])
def test_a_generators_table_simulates_as_its_reductions_one_by_one(name):
    """The simulator plans a table from its columns; the same reductions as
    objects give the same times bit for bit."""
    machine = load_machine("dgx-h100*3")
    algorithm = generate(name, machine, "allreduce")
    objects = algorithm.with_changes(switch_reductions=tuple(algorithm.switch_reductions))
    for size in (1 << 20, 1 << 30):
        assert simulate(algorithm, machine, size).time_s == simulate(objects, machine, size).time_s


def test_an_npz_file_keeps_switch_reductions_as_columns(tmp_path):
    """A table is written as its columns (not one JSON entry per reduction)
    and read back as a table equal to it; a damaged one is named."""
    import zipfile

    from simcoll.algorithm import SwitchReductionTable
    from simcoll.interop.schedules import load_schedule, save_schedule

    algorithm = generate("collnet", load_machine("dgx-h100*2"), "allreduce")
    path = tmp_path / "collnet.npz"
    save_schedule(algorithm, path)
    names = zipfile.ZipFile(path).namelist()
    assert "r_chunk.npy" in names and "r_sources.npy" in names
    back = load_schedule(path)
    assert isinstance(back.switch_reductions, SwitchReductionTable) and back == algorithm
    data = dict(np.load(path))
    data["r_sources"] = data["r_sources"] + 10_000
    np.savez(tmp_path / "bad.npz", **data)
    with pytest.raises(AlgorithmError, match=r"bad\.npz: malformed Algorithm \.npz: .*column sources indexes past"):
        load_schedule(tmp_path / "bad.npz")


@pytest.mark.parametrize("spec", ["dgx-h100*4", "dgx-a100*2/fat-tree:sharp=on"])
def test_switch_paths_mirrored_from_the_first_node_are_the_ones_searched_for(spec):
    """A rank outside the first node takes its path to (or from) a
    reducing switch - of its node, of another node, or the fabric's - from
    its image in the first node, the nodes' names swapped back: the same
    hops as searching the topology for it, rank by rank and switch by switch."""
    import simpy

    from simcoll.simulator.network import FluidNetwork

    machine = load_machine(spec)
    net = FluidNetwork(simpy.Environment(), machine, contention=True, record_utilisation=False)
    switches = [sw.name for sw in machine.topology.reducing_switches()]
    compared = 0
    for rank in range(machine.num_ranks):
        if machine.routes.swap_to_first_node(rank) is None:
            continue
        for sw in switches:
            for inbound in (True, False):
                try:
                    searched = net._switch_hops_computed(rank, sw, inbound)
                except TopologyError:
                    with pytest.raises(TopologyError):
                        net._find_switch_hops(rank, sw, inbound)
                    continue
                assert net._find_switch_hops(rank, sw, inbound) == searched
                compared += 1
    assert compared >= machine.num_ranks  # every rank outside the first node, at least one switch each

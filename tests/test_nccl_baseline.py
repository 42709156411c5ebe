"""The ``nccl`` baseline row: NCCL 2.30's tuner applied to a simcoll machine
(simcoll.nccl.baseline), in compare and from the CLI."""

from __future__ import annotations

import re

import pytest

from simcoll.compare import compare
from simcoll.errors import SimcollError
from simcoll.machines import load_machine, load_topology
from simcoll.nccl import Comm, Graph, choose
from simcoll.nccl.baseline import nccl_algorithm, nccl_choice, nccl_machine


def test_machine_description_follows_topology_and_model():
    a100 = nccl_machine("dgx-a100")
    # 12 NVLink3 per GPU at the model's effective 20 of 25 GB/s (NCCL's own topo.h figure for SM80 NVLink is
    # 20 GB/s too); two ring channels per NVLink (NCCL duplicates its rings)
    assert (a100.compute_capability, a100.comm.num_nodes, a100.comm.ppn) == (80, 1, 8)
    assert a100.intra_GBps == pytest.approx(12 * 20.0) and a100.comm.n_channels == 24
    assert not a100.comm.nvls
    two = nccl_machine("dgx-a100*2")
    assert two.comm.num_nodes == 2 and two.comm.num_ranks == 16
    assert two.nic_GBps == pytest.approx(8 * 25.0 * 0.94)  # 8 HDR NICs per node at their effective rate
    h100 = nccl_machine("dgx-h100")
    assert h100.compute_capability == 90 and h100.comm.nvls  # NVSwitches reduce and multicast


@pytest.mark.parametrize("spec", ["dgx-h100", "dgx-a100*2"])
@pytest.mark.parametrize("size", [1 << 10, 1 << 30])
def test_choice_matches_the_tuner_on_the_same_inputs(spec, size):
    d = nccl_machine(spec)
    ring = d.comm.graphs["ring"]
    graphs = {"ring": Graph(ring.n_channels, ring.bw_intra, ring.bw_inter), "tree": d.comm.graphs["tree"]}
    graphs.update({k: v for k, v in d.comm.graphs.items() if k.startswith("nvls")})
    by_hand = Comm(d.comm.num_ranks, d.comm.num_nodes, d.compute_capability, graphs, nvswitch=True, nvls=d.comm.nvls)
    assert nccl_choice(spec, "allreduce", size).label == choose(by_hand, "allreduce", size).label


def test_small_messages_use_ll_and_few_channels_large_use_simple():
    small, large = nccl_choice("dgx-a100", "allreduce", 1024), nccl_choice("dgx-a100", "allreduce", 1 << 30)
    assert small.protocol == "ll" and small.n_channels < large.n_channels
    assert large.label == "ring/Simple/24ch"


def test_algorithm_carries_protocol_and_choice():
    a = nccl_algorithm("dgx-a100", "allreduce", 1 << 30)
    assert a.metadata["protocol"] == "Simple" and a.metadata["nccl_choice"] == "ring/Simple/24ch"
    assert a.metadata["channels"] == 24
    small = nccl_algorithm("dgx-a100", "allreduce", 1024)
    assert small.metadata["protocol"] == "LL"
    # cached per (machine, collective, algorithm, channels): the same transfers, not regenerated
    assert nccl_algorithm("dgx-a100", "allreduce", 1 << 29).transfers is a.transfers


@pytest.mark.parametrize("size", [8, 64 << 10, 16 << 20, 1 << 30])
def test_a_machine_whose_nccl_profile_sets_simple_gets_simple_at_every_size(size):
    """Google Cloud's GPUDirect-TCPXO profile runs NCCL with NCCL_PROTO=Simple
    and NCCL_ALGO=Ring,Tree (models/a3-mega.yaml ``nccl``): the tuner picks
    among those only, where on the same NVLink fabric without the profile it
    would take LL at small sizes and NVLS-tree at large ones."""
    mega, dgx = nccl_choice("a3-mega*2", "allreduce", size), nccl_choice("dgx-h100*2", "allreduce", size)
    assert mega.protocol == "simple" and mega.algorithm in ("ring", "tree")
    assert set(mega.candidates) <= {(a, "simple") for a in ("ring", "tree")}
    assert len(dgx.candidates) > len(mega.candidates)


def test_a_logs_own_nccl_variables_override_the_machines_profile():
    assert nccl_choice("a3-mega*2", "allreduce", 1024, protocols=["ll"]).protocol == "ll"
    assert (
        nccl_algorithm("a3-mega*2", "allreduce", 1024, algorithms=["ring"])
        .metadata["nccl_choice"]
        .startswith("ring/Simple/")
    )


def test_compare_has_nccl_row_and_algorithms_filter():
    df, skipped = compare(load_machine("dgx-a100"), "allreduce", [1024, 1 << 26], algorithms=["nccl", "ring"])
    assert set(df.algorithm) == {"nccl", "ring"}
    nccl = df[df.algorithm == "nccl"]
    assert len(nccl) == 2 and all(nccl.choice.str.match(r"^ring/(LL|LL128|Simple)/\d+ch"))
    assert (df[df.algorithm == "ring"].choice == "").all()
    with pytest.raises(SimcollError, match="unknown algorithm"):
        compare("dgx-a100", "allreduce", [1024], algorithms=["no-such"])


def test_cli_compare_algorithms(capsys):
    from simcoll.cli import main

    assert main(["compare", "-t", "dgx-a100", "-c", "allreduce", "--sizes", "1MB", "--algorithms", "nccl,ring"]) == 0
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.startswith("size"))
    assert header.split()[1:3] == ["ring", "nccl"] and "NCCL's choice" in header and "nccl-ring" not in out
    row = next(line for line in out.splitlines() if line.lstrip().startswith("1MB"))
    assert re.search(r" ring/(LL|LL128|Simple)/\d+ch ", row)  # NCCL's choice beside its column


def test_chain_collectives_pipeline_deeper_as_the_buffer_grows():
    """NCCL pipelines a Broadcast / Reduce chain in FIFO-slot pieces (512 KiB
    under Simple), so a 1 GB Broadcast runs at most of a link's rate where one
    piece per channel would leave the chain idle 6/7 of the time."""
    from simcoll.nccl.baseline import MAX_PIPELINE_PIECES, pipeline_pieces
    from simcoll.simulator import simulate

    machine = load_machine("dgx-a100")
    assert pipeline_pieces(machine, "broadcast", 1 << 20, 24) == 1
    assert pipeline_pieces(machine, "broadcast", 1 << 30, 24) == MAX_PIPELINE_PIECES
    assert pipeline_pieces(machine, "allreduce", 1 << 30, 24) == 1  # the ring's blocks pipeline already
    big = nccl_algorithm(machine, "broadcast", 1 << 30)
    assert big.chunks == 24 * MAX_PIPELINE_PIECES
    one_piece = nccl_algorithm(machine, "broadcast", 1 << 20)
    piped = simulate(big, machine, 1 << 30).busbw_GBps
    unpiped = simulate(one_piece, machine, 1 << 30).busbw_GBps
    assert piped > 1.4 * unpiped
    # and never above what the root's twelve NVLinks carry
    assert piped <= 12 * machine.model.link("nvlink").bandwidth_Bps / 1e9


def test_collnet_is_a_candidate_only_when_enabled():
    """NCCL_COLLNET_ENABLE is off by default, even on a SHARP fabric."""
    default = nccl_choice("dgx-h100*2", "allreduce", 8 << 20)
    enabled = nccl_choice("dgx-h100*2", "allreduce", 8 << 20, collnet=True)
    assert not default.algorithm.startswith("collnet")
    assert enabled.algorithm.startswith("collnet")


def test_nvls_tree_spreads_concurrent_chunks_over_every_nvswitch():
    a = nccl_algorithm("dgx-h100*2", "allreduce", 1 << 30)
    assert a.metadata["nccl_choice"].startswith("nvls_tree")
    g = 8
    first = [r.switch for r in a.switch_reductions if r.chunk < g and r.step == 0]
    assert len({s.split(".")[-1] for s in first}) == 4  # the G chunks in flight use all four NVSwitches


def test_multi_node_ring_is_capped_by_the_nic_and_the_tree_by_twice_it():
    """NCCL's graph search gives a multi-node ring one speed for its NVLink and
    network hops, while a tree's intra-node speed may rise to twice its network
    speed (search.cc ncclTopoCompute, pass 2): on 2 nodes of 4 H100 with four
    200 Gb/s NICs each, the tuner therefore runs the tree for large Allreduce,
    as measured on SURF Snellius (156 GB/s busbw, above the ring's bound of
    the NICs' 100 GB/s per node)."""
    d = nccl_machine("hgx-h100-4*2")
    ring, tree = d.comm.graphs["ring"], d.comm.graphs["tree"]
    assert ring.bw_intra == pytest.approx(ring.bw_inter)
    assert tree.bw_intra == pytest.approx(2 * tree.bw_inter)
    one_node = nccl_machine("hgx-h100-4").comm.graphs["ring"]
    assert one_node.bw_intra == pytest.approx(d.intra_GBps / one_node.n_channels)  # no NIC on one node
    assert nccl_choice("hgx-h100-4*2", "allreduce", 1 << 30).algorithm == "tree"


def test_tree_pipelines_each_channel_in_fifo_slot_pieces():
    """NCCL's tree moves every channel's share through the chains and the tree
    in FIFO-slot pieces: deep pipelines keep both directions of every NIC busy,
    so a 2-node Allreduce approaches the tree's bound, each NIC carrying the
    node's data once per direction: busbw <= 2 (P-1)/P x the node's NIC rate."""
    from simcoll.nccl.baseline import MAX_PIPELINE_PIECES, pipeline_pieces
    from simcoll.simulator import simulate

    machine = load_machine("hgx-h100-4*2")
    channels = nccl_machine(machine).comm.n_channels
    assert pipeline_pieces(machine, "allreduce", 1 << 20, channels, "tree") == 1
    assert pipeline_pieces(machine, "allreduce", 1 << 30, channels, "tree") == MAX_PIPELINE_PIECES
    big = nccl_algorithm(machine, "allreduce", 1 << 30)
    assert big.metadata["nccl_choice"].startswith("tree/") and big.chunks == channels * MAX_PIPELINE_PIECES
    busbw = simulate(big, machine, 1 << 30).busbw_GBps
    nic_GBps = machine.model.link("ib").bandwidth_Bps / 1e9  # effective rate of one NIC
    bound = 2 * 7 / 8 * 4 * nic_GBps
    assert 0.85 * bound < busbw <= bound * 1.0001
    assert busbw > 4 * 25.0  # beyond any ring's reach: four 200 Gb/s NICs carry 100 GB/s per node


def test_a_step_pipelined_algorithm_is_built_once_for_every_size():
    """NVLS-tree is timed as NCCL's step pipeline, which reads only its
    schedule's loads: every size gets the same schedule, of at least
    PIPELINED_SCHEDULE_CHUNKS chunks, so that its chunks dealt over each
    node's four NVSwitches (5/4/4/5 links) load them in proportion."""
    from simcoll.nccl.baseline import PIPELINED_SCHEDULE_CHUNKS, pipeline_pieces

    machine = load_machine("dgx-h100*2")
    pieces = {pipeline_pieces(machine, "allreduce", s, 16, "nvls_tree") for s in (1 << 20, 64 << 20, 8 << 30)}
    assert pieces == {PIPELINED_SCHEDULE_CHUNKS // 16}
    small, large = (nccl_algorithm(machine, "allreduce", s) for s in (64 << 20, 1 << 30))
    assert small.metadata["nccl_choice"] == large.metadata["nccl_choice"] == "nvls_tree/Simple/16ch"
    assert small.chunks == large.chunks == PIPELINED_SCHEDULE_CHUNKS
    assert small.transfers is large.transfers


def test_rings_on_a_mesh_are_duplicated_as_found_and_spread_over_the_links():
    """On a full mesh of 8 GPUs (AMD MI300X platform) the ring search finds 3
    rings and their reverses, not one per link, and NCCL duplicates what it
    finds: 12 channels, each ring twice, so no link carries more channels than
    another. Across nodes with a NIC per GPU, every rail carries as many
    channels, and the channels' paths through a node use each direct link
    once: a 2-node ring Allreduce then runs at the node's 8 NICs' rate."""
    from collections import Counter

    from simcoll.algorithms.nccl import nccl_rings
    from simcoll.simulator import simulate

    one = nccl_machine("mi300x").comm.graphs["ring"]
    assert one.n_channels == 12
    two = nccl_machine("mi300x*2").comm.graphs["ring"]
    assert two.n_channels % 8 == 0
    topology = load_machine("mi300x*2").topology
    loads = Counter(
        (u, v)
        for ring in nccl_rings(topology, 8)
        for u, v in zip(ring, ring[1:] + ring[:1], strict=True)
        if topology.node_of(u) == topology.node_of(v)
    )
    assert len(loads) == 2 * 8 * 7 and set(loads.values()) == {1}
    machine = load_machine("mi300x*2")
    ring = nccl_algorithm(machine, "allreduce", 1 << 30, algorithms=["ring"])
    busbw = simulate(ring, machine, 1 << 30).busbw_GBps
    nics_GBps = 8 * machine.model.link("ethernet").bandwidth_Bps / 1e9
    assert 0.9 * nics_GBps < busbw <= nics_GBps * 1.0001


def test_ring_paths_inside_a_node_stay_on_nvlink_when_the_joint_search_gives_up(monkeypatch):
    """NDv2 (DGX-1 NVLink cube mesh plus PCIe): whether the channels' paths
    are searched together or each takes its least loaded path, no ring hop
    inside a node leaves NVLink for the far slower PCIe route."""
    from simcoll.algorithms import nccl as nccl_module
    from simcoll.routes import Routes

    topology = load_machine("ndv2*2").topology
    routes = Routes(topology)

    def off_nvlink(rings):
        return sum(
            1
            for ring in rings
            for u, v in zip(ring, ring[1:], strict=False)
            if topology.node_of(u) == topology.node_of(v) and routes.direct_links(u, v) == 0
        )

    assert off_nvlink(nccl_module.nccl_rings(topology, 12)) == 0
    monkeypatch.setattr(nccl_module, "_balanced_paths", lambda *args, **kwargs: None)
    assert off_nvlink(nccl_module.nccl_rings(topology, 12)) == 0


def test_the_joint_path_search_is_bounded_and_deterministic():
    """Many channels make the search deep (it is iterative, not recursive)
    and its budget is a count of hops, so the rings never depend on the clock."""
    from simcoll.algorithms.nccl import nccl_rings

    topology = load_machine("mi300x*2").topology
    many = nccl_rings(topology, 128)
    assert len(many) == 128 and many == nccl_rings(topology, 128)


def test_rings_cross_nodes_only_from_gpus_next_to_a_nic():
    """A Frontier node's four Slingshot NICs hang off four of its eight GCDs:
    NCCL's rings leave and enter a node at those GCDs, so every channel has a
    route between nodes (no route enters another GPU)."""
    from simcoll.algorithms.nccl import nccl_rings

    machine = load_machine("frontier*2")
    topology = machine.topology
    with_nic = {i for i in range(8) if machine.route(i, 8 + i) is not None}
    assert with_nic and len(with_nic) < 8
    for ring in nccl_rings(topology, 8):
        for u, v in zip(ring, ring[1:] + ring[:1], strict=True):
            if topology.node_of(u) != topology.node_of(v):
                assert u % 8 in with_nic and v % 8 in with_nic and machine.route(u, v) is not None


def test_a_cluster_knows_its_gpus_from_its_nodes_description():
    """`a3-mega` names no GPU but its description does (8x H100): a cluster of
    it is tuned as Hopper, like the node, not as the default SM80."""
    from simcoll.nccl.baseline import nccl_machine

    assert nccl_machine("a3-mega").compute_capability == 90
    cluster = nccl_machine("a3-mega*2")
    assert cluster.compute_capability == 90 and "assumed" not in cluster.gpu_source
    assert "8x H100 SXM" in load_topology("a3-mega*2").description

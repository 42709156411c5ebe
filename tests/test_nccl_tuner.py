"""NCCL's tuning model (simcoll.nccl) against the facts of NCCL 2.30.7's
tuning.cc as summarised in ../shared/reference/NCCL.md, and its closed forms."""

from __future__ import annotations

import pytest

from simcoll.errors import SimcollError
from simcoll.nccl import (
    ChannelLimits,
    Comm,
    Graph,
    algorithm_bandwidth,
    bus_bandwidth,
    channels_for,
    choose,
    cost_table,
    latency_us,
    load_constants,
    predict_time_us,
    unavailable_reason,
)


def a100_node() -> Comm:
    """One DGX-A100 as NCCL sees it: NVSwitch, 24 ring/tree channels of 20 GB/s."""
    return Comm(8, 1, 80, {"ring": Graph(24, 20.0), "tree": Graph(24, 20.0)}, nvswitch=True)


def h100_nodes(nodes: int, nvls: bool = True) -> Comm:
    """DGX-H100 nodes: 16 channels of 40 GB/s inside a node, 25 GB/s (one 400G NIC) across nodes."""
    inter = 25.0 if nodes > 1 else 40.0
    graphs = {"ring": Graph(16, 40.0, inter), "tree": Graph(16, 40.0, inter)}
    if nvls:
        graphs["nvls"] = Graph(16, 40.0, inter)
        graphs["nvls_tree"] = Graph(16, 40.0, inter)
    return Comm(8 * nodes, nodes, 90, graphs, nvswitch=True, nvls=nvls)


def test_constants_file_holds_the_published_tables():
    c = load_constants()
    assert c.version == "2.30.7"
    assert [c.base_latency("tree", p) for p in ("ll", "ll128", "simple")] == [6.8, 14.0, 8.4]
    assert [c.base_latency("ring", p) for p in ("ll", "ll128", "simple")] == [6.6, 14.0, 8.4]
    assert [c.hw_latency("nvlink", "ring", p) for p in ("ll", "ll128", "simple")] == [0.6, 1.9, 3.4]
    assert [c.hw_latency("net", "tree", p) for p in ("ll", "ll128", "simple")] == [5.0, 8.5, 14]
    assert c.hw_latency("net", "nvls_tree", "simple") == 20.9
    assert c.per_generation("per_channel_max_tree_bw", "hopper", 2) == 41.4
    assert c.per_generation("ll_max_bw", "blackwell", 1) == 2 * 141.0
    assert c["nvls_efficiency"]["hopper"] == 0.85 and c["nvls_efficiency"]["blackwell"] == 0.74


def test_worked_example_of_ring_allreduce_latency_on_one_nvlink_node():
    # NCCL.md: 8 GPUs, one node, NVLink, Ring Allreduce: LL 6.6 + 14 x 0.6 = 15.0 us; LL128 40.6; Simple 56.0.
    comm = a100_node()
    assert latency_us(comm, "allreduce", "ring", "ll") == pytest.approx(15.0)
    assert latency_us(comm, "allreduce", "ring", "ll128") == pytest.approx(40.6)
    assert latency_us(comm, "allreduce", "ring", "simple") == pytest.approx(56.0)


def test_ring_bandwidth_closed_forms():
    comm = a100_node()
    bus = 24 * 20.0
    assert bus_bandwidth(comm, "allreduce", "ring", "simple") == pytest.approx(bus)
    assert bus_bandwidth(comm, "allreduce", "ring", "ll") == pytest.approx(min(87.7, 0.5 * bus))  # Ampere N1 LL cap
    assert bus_bandwidth(comm, "allreduce", "ring", "ll128") == pytest.approx(min(0.92 * bus, 24 * 20.0))
    # algbw = busbw x n / nsteps, nsteps = 2(n-1) for allreduce, n-1 for allgather
    assert algorithm_bandwidth(comm, "allreduce", "ring", "simple") == pytest.approx(bus * 8 / 14)
    assert algorithm_bandwidth(comm, "allgather", "ring", "simple") == pytest.approx(bus * 8 / 7)
    # tree allreduce: min(0.92 busBw, nCh x perChMaxTree) then x 0.5
    assert algorithm_bandwidth(comm, "allreduce", "tree", "simple") == pytest.approx(0.5 * min(0.92 * bus, 24 * 24.0))
    # tree LL: min(busBw / 3.8, llMaxBw) after the allreduce cap
    assert bus_bandwidth(comm, "allreduce", "tree", "ll") == pytest.approx(min(0.92 * bus / 3.8, 87.7))


def test_time_is_latency_plus_bytes_over_bandwidth():
    comm = a100_node()
    for proto in ("ll", "ll128", "simple"):
        lat = latency_us(comm, "allreduce", "ring", proto)
        bw = algorithm_bandwidth(comm, "allreduce", "ring", proto)
        assert predict_time_us(comm, "allreduce", "ring", proto, 1 << 26) == pytest.approx(
            lat + (1 << 26) / (1000 * bw)
        )


def test_ll_at_small_sizes_simple_at_large_and_protocols_only_move_up():
    comm = a100_node()
    sizes = [1 << k for k in range(3, 34)]
    protos = [choose(comm, "allreduce", s).protocol for s in sizes]
    assert protos[0] == "ll" and protos[sizes.index(64 << 10)] == "ll" and protos[-1] == "simple"
    order = {"ll": 0, "ll128": 1, "simple": 2}
    assert all(order[a] <= order[b] for a, b in zip(protos, protos[1:], strict=False))


def test_protocol_switch_happens_where_the_two_lines_cross():
    comm = a100_node()
    lat_ll, lat_128 = (latency_us(comm, "allreduce", "ring", p) for p in ("ll", "ll128"))
    bw_ll, bw_128 = (algorithm_bandwidth(comm, "allreduce", "ring", p) for p in ("ll", "ll128"))
    cross = (lat_128 - lat_ll) / (1 / (1000 * bw_ll) - 1 / (1000 * bw_128))
    below, above = int(cross * 0.99), int(cross * 1.01)
    assert choose(comm, "allreduce", below, algorithms=["ring"]).protocol == "ll"
    assert choose(comm, "allreduce", above, algorithms=["ring"]).protocol == "ll128"


def test_channels_drop_for_small_messages():
    comm = a100_node()
    assert choose(comm, "allreduce", 8).n_channels == 1
    assert choose(comm, "allreduce", 1 << 30).n_channels == 24
    # Simple ring: nc drops while nbytes < nc x 512 threads x 64
    assert channels_for(comm, "ring", "simple", 24 * 512 * 64)[0] == 24
    assert channels_for(comm, "ring", "simple", 24 * 512 * 64 - 1)[0] == 23


def test_channel_limits_set_what_nccl_launches_not_what_it_predicts():
    """NCCL_MIN_CTAS / NCCL_MAX_CTAS: rings copied up to the minimum or cut
    to the maximum (graph/connect.cc), NVLS's 16 channels clamped to both
    (transport/nvls.cc ncclNvlsTuning); the tuner's bandwidths keep the
    search's channel count (tuning.cc), so the predicted times stay."""
    from dataclasses import replace

    free = h100_nodes(8)
    more = replace(free, limits=ChannelLimits(min_ctas=24))
    fewer = replace(free, limits=ChannelLimits(max_ctas=8))
    big = 1 << 30
    assert (choose(free, "allreduce", big).n_channels, choose(more, "allreduce", big).n_channels) == (16, 24)
    assert choose(fewer, "allreduce", big).n_channels == 8
    assert channels_for(more, "ring", "simple", big)[0] == 24 and channels_for(fewer, "ring", "simple", big)[0] == 8
    assert cost_table(more, "allreduce", big) == cost_table(free, "allreduce", big)
    assert ChannelLimits(min_channels=4, max_channels=2).ring(16) == 4  # the minimum wins, as NCCL copies channels
    assert ChannelLimits(min_ctas=32, max_ctas=8).nvls(16) == 8  # NCCL lowers minCTAs to maxCTAs
    assert ChannelLimits(min_ctas=100).nvls(16) == 64  # held to NCCL's MAXCHANNELS
    with pytest.raises(SimcollError, match="min_ctas must be a whole number"):
        ChannelLimits(min_ctas=-1)


def test_multi_node_latencies():
    comm = h100_nodes(2, nvls=False)
    c = load_constants()
    # ring allreduce: 2(n-1) steps, 2(nodes-1) of them over the network at the ring NET latency
    intra = max(c.hw_latency("nvlink", "ring", "ll"), 1.0)  # Intel net overhead 1 us
    expected = 6.6 + (30 - 2) * intra + 2 * c.hw_latency("net", "ring", "ll")
    assert latency_us(comm, "allreduce", "ring", "ll") == pytest.approx(expected)
    # tree: base + 2((ppn-1) intra + log2(nodes) inter)
    expected_tree = 6.8 + 2 * (7 * 0.6 + 1 * 5.0)
    assert latency_us(comm, "allreduce", "tree", "ll") == pytest.approx(expected_tree)
    # Ring/Simple allreduce latency x1.4 on SM80+ once nbytes / (nCh x nRanks) >= 64
    lat = latency_us(comm, "allreduce", "ring", "simple")
    big = 16 * 16 * 64
    bw = algorithm_bandwidth(comm, "allreduce", "ring", "simple")
    assert predict_time_us(comm, "allreduce", "ring", "simple", big) == pytest.approx(1.4 * lat + big / (1000 * bw))
    assert predict_time_us(comm, "allreduce", "ring", "simple", big - 1) == pytest.approx(lat + (big - 1) / (1000 * bw))


def test_nvls_is_chosen_for_large_allreduce_on_hopper_nvswitch():
    comm = h100_nodes(1)
    assert choose(comm, "allreduce", 1 << 30).algorithm == "nvls"
    assert choose(comm, "allreduce", 8).algorithm == "ring"
    assert unavailable_reason(h100_nodes(1, nvls=False), "allreduce", "nvls", "simple") is not None


def test_availability_rules():
    comm = h100_nodes(1)
    assert unavailable_reason(comm, "broadcast", "tree", "ll") == "NCCL runs broadcast with ring only"
    assert "Simple" in unavailable_reason(comm, "allreduce", "nvls", "ll")
    assert "more than one node" in unavailable_reason(comm, "allreduce", "nvls_tree", "simple")
    assert unavailable_reason(h100_nodes(2), "allreduce", "nvls_tree", "simple") is None
    pcie = Comm(4, 1, 80, {"ring": Graph(2, 12.0, intra="pci")})
    assert "LL128" in unavailable_reason(pcie, "allreduce", "ring", "ll128")
    # PAT: allgather / reducescatter with one GPU per node only
    pat_graph = {"ring": Graph(4, 12.0), "pat": Graph(4, 12.0)}
    assert unavailable_reason(Comm(8, 8, 90, pat_graph), "allgather", "pat", "simple") is None
    assert "one GPU per node" in unavailable_reason(Comm(8, 2, 90, pat_graph), "allgather", "pat", "simple")
    assert set(cost_table(comm, "broadcast", 1 << 20)) == {("ring", "ll"), ("ring", "ll128"), ("ring", "simple")}


def test_restrictions_and_labels():
    comm = a100_node()
    choice = choose(comm, "allreduce", 1 << 30, algorithms=["ring"], protocols=["ll128"])
    assert choice.label == "ring/LL128/24ch" and "lowest predicted time" in choice.reason


@pytest.mark.parametrize(
    "call",
    [
        lambda: choose(a100_node(), "alltoall", 1024),
        lambda: choose(a100_node(), "allreduce", 1024, algorithms=["bogus"]),
        lambda: choose(a100_node(), "allreduce", 1024, algorithms=["nvls"]),
        lambda: Comm(6, 4, 80, {"ring": Graph(1, 10.0)}),
        lambda: Comm(8, 1, 80, {"tree": Graph(1, 10.0)}),
        lambda: Graph(0, 10.0),
    ],
)
def test_bad_input_raises_simcoll_errors(call):
    with pytest.raises(SimcollError):
        call()

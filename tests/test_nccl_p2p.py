"""NCCL's point-to-point path as the baseline (simcoll.nccl.p2p): nccl-tests'
alltoall_perf and sendrecv_perf, the SendRecv collective, and the published
logs of both."""

from __future__ import annotations

from pathlib import Path

import pytest

from simcoll.algorithms import generate
from simcoll.calibration.calibrate import calibrate, error_summary, validate
from simcoll.collectives import make_collective
from simcoll.compare import compare
from simcoll.errors import CollectiveError, SimcollError
from simcoll.nccl.baseline import nccl_algorithm, protocol_for
from simcoll.nccl.p2p import nccl_p2p_protocol, p2p_peer_bytes, p2p_protocol
from simcoll.simulator import simulate
from simcoll.verify import check

MEASUREMENTS = Path(__file__).resolve().parents[2] / "shared" / "reference" / "measurements"


def test_sendrecv_is_nccl_tests_cyclic_shift():
    """nccl-tests sendrecv.cu: rank r sends its buffer to r+1 and receives r-1's."""
    c = make_collective("sendrecv", 3, chunk_factor=2)
    assert c.input_layout == ((0, 1), (2, 3), (4, 5))
    assert c.output_layout == ((4, 5), (0, 1), (2, 3))
    assert c.busbw_factor == 1.0 and not c.combining
    assert make_collective("send_recv", 2).name == "sendrecv"
    with pytest.raises(CollectiveError, match="num_ranks"):
        make_collective("sendrecv", 1)


@pytest.mark.parametrize("topology", ["fully-connected:2", "line:4", "dgx-a100", "dgx-h100*2"])
def test_direct_sendrecv_meets_its_postcondition(topology):
    algorithm = generate("direct", topology, "sendrecv")
    assert check(algorithm, topology) == []


def test_direct_sendrecv_takes_alpha_plus_m_over_b_on_a_pair():
    """One link per pair: α + M/B (the direct generator's docstring)."""
    from simcoll.machines import load_machine

    machine = load_machine("fully-connected:2")
    link = machine.model.link("nvlink")
    size = 1 << 24
    result = simulate(generate("direct", machine, "sendrecv"), machine, size)
    assert result.time_s == pytest.approx(link.alpha_s + size / link.bandwidth_Bps, rel=1e-9)


def test_p2p_protocol_is_ll_up_to_16_kib_per_peer_as_nccl_picks_it():
    """enqueue.cc addP2pToPlan: LL while a peer's bytes <= nChannels x
    NCCL_P2P_LL_THRESHOLD (16 KiB), one channel at those sizes, and only on
    connections with LL buffers: none across the network by default
    (NCCL_ALLOC_P2P_NET_LL_BUFFERS=0)."""
    assert p2p_protocol(16 << 10) == "ll" and p2p_protocol((16 << 10) + 1) == "simple"
    assert p2p_protocol(8, across_nodes=True) == "simple"
    assert p2p_peer_bytes("alltoall", 8, 128 << 10) == 16 << 10  # one block of eight per peer
    assert p2p_peer_bytes("sendrecv", 8, 128 << 10) == 128 << 10  # the whole buffer to one peer
    assert nccl_p2p_protocol("dgx-a100", "alltoall", 128 << 10) == "LL"
    assert nccl_p2p_protocol("dgx-a100*2", "alltoall", 128 << 10) == "Simple"
    assert nccl_p2p_protocol("h100-nic*2", "sendrecv", 8) == "Simple"


def test_nccl_row_for_alltoall_is_the_direct_schedule_with_nccls_protocol():
    """The nccl row of an Alltoall is NCCL's point-to-point exchange: the
    direct schedule, LL while a peer gets at most 16 KiB, else Simple; the
    direct row, timed with the same protocol, takes the same time."""
    sizes = [64 << 10, 1 << 20, 256 << 20]
    df, skipped = compare("dgx-a100", "alltoall", sizes, algorithms=["nccl", "direct"])
    nccl = df[df.algorithm == "nccl"].set_index("size_bytes")
    direct = df[df.algorithm == "direct"].set_index("size_bytes")
    assert list(nccl.choice) == ["p2p/LL", "p2p/Simple", "p2p/Simple"]
    assert nccl.time_s.to_list() == pytest.approx(direct.time_s.to_list(), rel=1e-12)
    assert "nccl" not in skipped


def test_other_schedules_of_p2p_collectives_are_timed_with_the_nccl_rows_protocol():
    """A comparison differs in the schedule only: bruck beside the nccl row of
    an Alltoall gets NCCL's point-to-point protocol at every size, on one
    node and on several."""
    for machine in ("dgx-a100", "a3-mega*2"):
        bruck = generate("bruck", machine, "alltoall")
        for size in (4 << 10, 1 << 20):
            nccl = nccl_algorithm(machine, "alltoall", size)
            assert protocol_for(bruck, machine, size) == nccl.metadata["protocol"]


def test_gather_and_one_gpu_machines_have_no_nccl_row():
    df, skipped = compare("dgx-a100", "gather", [1 << 20], algorithms=["nccl", "direct"])
    assert "nccl" not in set(df.algorithm) and "nccl" in skipped
    for collective in ("alltoall", "allreduce"):  # a clear error, not a division by zero in the tuner
        with pytest.raises(SimcollError, match="l40s-socket has one GPU"):
            compare("l40s-socket", collective, [1 << 20], algorithms=["nccl"])


def test_a_cluster_of_one_gpu_of_an_nvswitch_node_runs_no_nvls():
    """NCCL enables NVLS only with at least two GPUs on a node (nvls.cc);
    dgx-h100[7]*2 gets NCCL's ring, not an NVLS-tree with nobody to reduce."""
    df, skipped = compare("dgx-h100[7]*2", "allreduce", [1 << 30], algorithms=["nccl"])
    assert list(df.choice) == ["ring/Simple/32ch"] and not skipped


def test_alltoall_on_several_nodes_is_bound_by_the_nics():
    """Ten H100 nodes, a 400 Gb/s NIC per GPU: 72 of the 79 blocks a rank
    sends leave its node, so busbw tends to (79/80) / (72/80) of the NIC's
    effective rate; the xxrjun log measures 50.4-50.5 GB/s from 4 GiB up."""
    machine_df, _ = compare("dgx-h100*10", "alltoall", [4 << 30], algorithms=["nccl"])
    busbw = float(machine_df.busbw_GBps.iloc[0])
    assert 50.4 * 0.9 < busbw < 50.5 * 1.1


@pytest.mark.skipif(not MEASUREMENTS.is_dir(), reason="needs ../shared/reference/measurements")
@pytest.mark.parametrize(
    "name, topology",
    [
        ("a100-sxm4-40gb-x8_alltoall_superbench.log", "dgx-a100"),
        ("h100-80gb-x1-n10_alltoall_xxrjun.log", "h100-nic*10"),
        ("a100-sxm-64gb-x2_sendrecv_nccltests331.log", "hgx-a100-4[0,1]"),
        ("h20-3e-x2-n2_alltoall_vm_nccltests321.log", "dgx-h100[1,0]*2"),  # 2 of 8 GPUs, their 2 NICs
    ],
)
def test_point_to_point_logs_calibrate_within_the_targets(name, topology):
    """Issue 13's targets (<= 15 % from 64 MB up, <= 25 % up to 64 KB) on the
    published Alltoall and SendRecv runs, the SendRecv one on two GPUs of a
    4-GPU A100 board (nccl-tests#331: NV4 between each pair), the H20 one on
    two GPUs of an NVSwitch board per VM (nccl-tests#321)."""
    log = MEASUREMENTS / name
    model, _ = calibrate([log], topology)
    errors = error_summary(validate(log, topology, model))
    assert errors["large"] <= 0.15
    assert not errors["small"] > 0.25  # NaN where the log starts above 64 KB

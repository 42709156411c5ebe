"""NCCL's step pipelines (NVLS, NVLSTree, CollNet Direct, the tree): the chunk rules read from enqueue.cc, and the
simulator's pipeline time for Algorithms that carry ``metadata["step_pipeline"]``."""

from dataclasses import replace

import pytest

from simcoll.errors import AlgorithmError, SimcollError
from simcoll.machines import as_machine
from simcoll.nccl.baseline import nccl_algorithm
from simcoll.nccl.pipeline import chunk_bytes, pipeline, stages, step_bytes
from simcoll.simulator import simulate
from simcoll.simulator.step_pipeline import step_and_stages

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30


@pytest.mark.parametrize(
    "size, chunk",
    # one node, 16 channels x 8 heads = 128 concurrent chunks: 64 KiB below 64 x 128 x 128 KiB = 1 GiB,
    # 32 KiB below 8 x 128 x 64 KiB = 64 MiB, 16 KiB below 2 x 128 x 32 KiB = 8 MiB
    [(8 * GiB, 128 * KiB), (GiB, 128 * KiB), (GiB - 1, 64 * KiB), (64 * MiB, 64 * KiB), (32 * MiB, 32 * KiB), (8 * MiB, 32 * KiB), (2 * MiB, 16 * KiB)],
)  # fmt: skip
def test_nvls_chunk_follows_nccls_rule_on_one_node(size, chunk):
    assert chunk_bytes("nvls", size, channels=16, heads=8, num_nodes=1) == chunk


def test_nvls_tree_chunk_is_capped_at_64_KiB_from_four_nodes():
    two = [
        chunk_bytes("nvls_tree", s, channels=16, heads=8, num_nodes=2) for s in (4 * MiB, 8 * MiB, 64 * MiB, 8 * GiB)
    ]
    four = [
        chunk_bytes("nvls_tree", s, channels=16, heads=8, num_nodes=4) for s in (4 * MiB, 8 * MiB, 64 * MiB, 8 * GiB)
    ]
    assert two == [32 * KiB, 64 * KiB, 128 * KiB, 128 * KiB]
    assert four == [32 * KiB, 64 * KiB, 64 * KiB, 64 * KiB]


@pytest.mark.parametrize(
    "size, chunk",
    # 24 channels x 8 heads = 192 concurrent chunks, depth 2: from the 512 KiB buffer step, halved while the
    # buffer holds fewer than 128 steps down to 128 KiB (256 KiB below 128 x 192 x 512 KiB = 12 GiB, 128 KiB
    # below 6 GiB), then fewer than 16 steps down to 64 KiB (below 16 x 192 x 128 KiB = 384 MiB) and 32 KiB
    # (below 192 MiB)
    [(16 * GiB, 512 * KiB), (12 * GiB, 512 * KiB), (12 * GiB - 1, 256 * KiB), (GiB, 128 * KiB), (384 * MiB, 128 * KiB), (384 * MiB - 1, 64 * KiB), (192 * MiB - 1, 32 * KiB), (MiB, 32 * KiB)],
)  # fmt: skip
def test_collnet_direct_chunk_is_the_buffer_step_halved_as_nccl_does(size, chunk):
    assert chunk_bytes("collnet_direct", size, channels=24, heads=8, num_nodes=4, gpus_per_node=8) == chunk


def test_collnet_direct_starts_from_the_models_buffer_step_and_has_depth_one_with_one_gpu_per_node():
    # NCCL_BUFFSIZE of 8 MiB: 1 MiB steps, the first halving at 128 x 16 x 1 MiB = 2 GiB
    assert chunk_bytes("collnet_direct", 2 * GiB, channels=2, heads=8, num_nodes=4, buffer_step_bytes=MiB) == MiB
    # one GPU per node (no peers): depth 1, so a buffer holding 64 steps keeps the full chunk
    one = chunk_bytes("collnet_direct", 64 * 16 * 512 * KiB, channels=16, heads=1, num_nodes=4, gpus_per_node=1)
    two = chunk_bytes("collnet_direct", 64 * 16 * 512 * KiB, channels=16, heads=1, num_nodes=4, gpus_per_node=8)
    assert (one, two) == (512 * KiB, 256 * KiB)


@pytest.mark.parametrize("algorithm, nodes", [("nvls", 1), ("nvls_tree", 2), ("nvls_tree", 4), ("collnet_direct", 4)])
@pytest.mark.parametrize("channels", [16, 24])
def test_the_table_an_algorithm_carries_gives_the_rules_step_for_every_size(algorithm, nodes, channels):
    table = pipeline(algorithm, channels=channels, heads=8, num_nodes=nodes)
    sizes = [1, 1000, *(s + d for p in range(10, 36) for s in [1 << p] for d in (-1, 0, 1)), 3 * 10**9, 12 * GiB - 1]
    for size in sizes:
        assert step_and_stages(table, size)[0] == step_bytes(
            algorithm, size, channels=channels, heads=8, num_nodes=nodes
        )


def test_a_step_passes_the_three_node_stages_and_one_more_per_tree_level_or_for_the_sharp_network():
    assert stages("nvls", 1) == 3
    assert [stages("nvls_tree", n) for n in (2, 4, 8, 16)] == [4, 5, 6, 7]
    assert [stages("collnet_direct", n) for n in (2, 4, 16)] == [4, 4, 4]


def test_the_rule_refuses_what_nccl_does_not_pipeline_in_nvls_steps():
    with pytest.raises(SimcollError, match="not one of"):
        step_bytes("ring", MiB, channels=16, heads=8, num_nodes=1)
    with pytest.raises(SimcollError, match="at least 1"):
        step_bytes("nvls", MiB, channels=0, heads=8, num_nodes=1)


def test_nvls_time_is_the_pipeline_of_its_steps_at_the_in_switch_reduce_rate():
    # one DGX H100: each GPU streams its buffer into the NVSwitches over 18 NVLinks at the model's
    # in-switch reduce rate; NCCL moves it in 16 MiB steps (16 channels x 8 heads x 128 KiB) through
    # scatter, reduce + multicast and gather, each step paying NVLink's alpha and Simple's hop latency
    machine = as_machine("dgx-h100")
    model = machine.model
    size = 4 * GiB
    algorithm = nccl_algorithm(machine, "allreduce", size)
    assert algorithm.metadata["nccl_choice"] == "nvls/Simple/16ch"
    result = simulate(algorithm, machine, size)
    stream_s = size / (18 * model.switches["nvswitch"].reduce_Bps)
    step, steps, d = 16 * MiB, size / (16 * MiB), 3
    latency_s = model.link("nvlink").alpha_s + model.protocol("Simple").hop_latency_s
    expected = model.call_overhead_s + stream_s + (steps + d - 1) * latency_s + (d - 1) * stream_s * step / size
    assert result.stats["step_pipeline"]["stream_s"] == pytest.approx(stream_s, rel=1e-9)
    assert result.stats["step_pipeline"]["steps"] == steps
    assert result.time_s == pytest.approx(expected, rel=1e-9)


def test_small_buffers_pay_the_fill_so_busbw_ramps_up_with_size():
    # a buffer of one step or less crosses all stages alone: at 2 MiB the pipeline is three steps long
    machine = as_machine("dgx-h100")
    busbw = {}
    for size in (2 * MiB, 64 * MiB, 8 * GiB):
        result = simulate(nccl_algorithm(machine, "allreduce", size), machine, size, record_timeline=False)
        assert result.stats["step_pipeline"]["steps"] == max(1.0, size / result.stats["step_pipeline"]["step_bytes"])
        busbw[size] = result.busbw_GBps
    assert busbw[2 * MiB] < 0.25 * busbw[8 * GiB] < busbw[64 * MiB] < busbw[8 * GiB]


def test_the_pipeline_is_nccls_so_the_bare_schedule_and_a_malformed_table_do_not_get_it():
    # the registry's nvls schedule is the same data movement without NCCL's steps
    machine = as_machine("dgx-h100")
    size = 256 * MiB
    algorithm = nccl_algorithm(machine, "allreduce", size)
    plain = replace(algorithm, metadata={k: v for k, v in algorithm.metadata.items() if k != "step_pipeline"})
    piped, bare = simulate(algorithm, machine, size), simulate(plain, machine, size)
    assert "step_pipeline" not in bare.stats
    assert piped.time_s > bare.time_s
    broken = replace(algorithm, metadata={**algorithm.metadata, "step_pipeline": {"stages": 3}})
    with pytest.raises(AlgorithmError, match="step_bytes"):
        simulate(broken, machine, size)


def test_the_pipeline_time_does_not_depend_on_running_the_schedule():
    # the schedule runs only for the timeline and utilisation it records; the time is the pipeline's
    machine = as_machine("dgx-h100*2")
    algorithm = nccl_algorithm(machine, "allreduce", 64 * MiB)
    ran = simulate(algorithm, machine, 64 * MiB)
    quiet = simulate(algorithm, machine, 64 * MiB, record_timeline=False, record_utilisation=False)
    assert quiet.time_s == ran.time_s
    assert ran.stats["step_pipeline"]["schedule_s"] > 0 and len(ran.timeline) > 0
    assert quiet.stats["step_pipeline"]["schedule_s"] is None


@pytest.mark.parametrize("size", [4 << 20, 32 << 20, 1 << 30])
def test_nccls_tree_is_the_pipeline_of_its_buffer_steps_at_a_channels_rate(size):
    """NCCL's tree with Simple on 2 A3 Mega nodes (TCPXO profile: 1 MiB
    buffer steps): its time is the closed form of ``pipelined_time`` - the
    call with the protocol's latency, the stream, one latency per step and
    stage, and a fill of 14 hops at a channel's rate (20.7 GB/s, NCCL's
    per-channel tree rate on 2 Hopper nodes) plus one network hop at the
    bottleneck."""
    machine = as_machine("a3-mega*2")
    algorithm = nccl_algorithm(machine, "allreduce", size)
    table = algorithm.metadata["step_pipeline"]
    assert algorithm.metadata["nccl_choice"].startswith("tree/Simple/")
    channels = table["channels"]
    assert (table["stages"], table["network_stages"], table["step_bytes"]) == (16, 2, [[0, channels << 20]])
    assert table["channel_Bps"] == pytest.approx(20.7e9)
    result = simulate(algorithm, machine, size, verify=False, record_timeline=False, record_utilisation=False)
    got = result.stats["step_pipeline"]
    step = min(channels << 20, size)
    stream = max(got["stream_s"], size / (channels * table["channel_Bps"]))
    fill = 14 * step / channels / table["channel_Bps"] + stream * step / size
    expected = result.stats["call_s"] + stream + (got["steps"] + 15) * got["step_latency_s"] + fill
    assert result.time_s == pytest.approx(expected, rel=1e-12)
    assert result.stats["call_s"] == machine.model.call_cost_s("Simple") > machine.model.call_overhead_s


def test_collnet_direct_is_the_pipeline_of_its_buffer_steps_so_busbw_ramps_as_the_sharp_log_does():
    """CollNet Direct on 4 DGX A100 over SHARP: a step is 24 channels x 8
    heads (a GPU with its own NIC each) x NCCL's chunk, through the node's
    three stages and the network's one; the fill of its large steps keeps
    busbw at 64 MiB well below the 8 GiB plateau, as the published CoreWeave
    SHARP log shows (93 against 116 GB/s), where the bare schedule is at
    its plateau by 16 MiB."""
    machine = as_machine("dgx-a100*4/fat-tree:sharp=on")
    busbw, bare = {}, {}
    for size in (16 * MiB, 64 * MiB, 8 * GiB):
        algorithm = nccl_algorithm(machine, "allreduce", size, collnet=True)
        assert algorithm.metadata["nccl_choice"] == "collnet_direct/Simple/24ch"
        table = algorithm.metadata["step_pipeline"]
        assert table["stages"] == 4
        assert step_and_stages(table, size)[0] == 24 * 8 * chunk_bytes(
            "collnet_direct", size, channels=24, heads=8, num_nodes=4, gpus_per_node=8
        )
        plain = replace(algorithm, metadata={k: v for k, v in algorithm.metadata.items() if k != "step_pipeline"})
        busbw[size] = simulate(algorithm, machine, size, record_timeline=False).busbw_GBps
        bare[size] = simulate(plain, machine, size, record_timeline=False).busbw_GBps
    assert busbw[64 * MiB] < 0.8 * busbw[8 * GiB]
    assert bare[16 * MiB] > 0.8 * bare[8 * GiB]

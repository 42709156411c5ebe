"""NCCL's NVLS step pipeline: the chunk rule read from enqueue.cc, and the
simulator's pipeline time for Algorithms that carry ``metadata["step_pipeline"]``."""

from dataclasses import replace

import pytest

from simcoll.errors import AlgorithmError, SimcollError
from simcoll.machines import as_machine
from simcoll.nccl.baseline import nccl_algorithm
from simcoll.nccl.pipeline import chunk_bytes, pipeline, stages, step_bytes
from simcoll.simulator import simulate
from simcoll.simulator.algorithm_mode import _step_and_stages

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


@pytest.mark.parametrize("algorithm, nodes", [("nvls", 1), ("nvls_tree", 2), ("nvls_tree", 4)])
@pytest.mark.parametrize("channels", [16, 24])
def test_the_table_an_algorithm_carries_gives_the_rules_step_for_every_size(algorithm, nodes, channels):
    table = pipeline(algorithm, channels=channels, heads=8, num_nodes=nodes)
    sizes = [1, 1000, *(s + d for p in range(10, 35) for s in [1 << p] for d in (-1, 0, 1)), 3 * 10**9]
    for size in sizes:
        assert _step_and_stages(table, size)[0] == step_bytes(
            algorithm, size, channels=channels, heads=8, num_nodes=nodes
        )


def test_a_step_passes_the_three_node_stages_and_one_more_per_tree_level():
    assert stages("nvls", 1) == 3
    assert [stages("nvls_tree", n) for n in (2, 4, 8, 16)] == [4, 5, 6, 7]


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
    buffer steps): its time is the closed form of ``_pipelined_time`` - the
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

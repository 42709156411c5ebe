"""Specification of the simulator's Program mode (issue 7, item 3; GC3 §6;
NV-Group §4.2.1, §4.4.2): executors as processes, FIFO slots, tiling
pipelines, thread-block caps, protocols, reductions, kernel launches, host
executors, deadlock reports and determinism.

Programs are built by hand with the helpers below (``op`` builds an
Instruction from tuples, ``tb`` an executor); machines are generated lines
and rings with a small test model whose every parameter the expected times
are computed from.
"""

from __future__ import annotations

import math

import pytest
from program_builders import op, program, tb

from simcoll.collectives import custom_collective, make_collective
from simcoll.cost_model import model_from_dict
from simcoll.errors import AlgorithmError, ProgramDeadlockError, SimcollError, SimulationError, SizeError, TopologyError
from simcoll.machines import Machine, load_machine, load_topology
from simcoll.program import INSTRUCTION_OPS
from simcoll.simulator import simulate
from simcoll.verify import check

ALPHA_S = 1.0e-6
LINK_BPS = 10.0e9
TB_BPS = 4.0e9
REDUCE_BPS = 20.0e9
REDUCE_LAUNCH_S = 0.5e-6
LAUNCH_S = 3.0e-6
MB = 1 << 20


def simulate_program(prog, machine, size_bytes, **options):
    """Program mode through the one entry, :func:`simcoll.simulator.simulate`;
    unverified, as most Programs here implement no collective by design."""
    return simulate(prog, machine, size_bytes, verify=False, **options)


def make_model(
    *, slots=8, slot_bytes=None, tb_Bps=TB_BPS, launch_s=LAUNCH_S, host_signal_s=2e-6, ll=0.5, reduce_Bps=REDUCE_BPS,
    signal_latency_s=None,
):  # fmt: skip
    """A model for generated topologies (nvlink links) with every parameter explicit."""
    executor = {
        "thread_block_bandwidth_Bps": tb_Bps,
        "kernel_launch_s": launch_s,
        "fifo_slots": slots,
        "host_signal_s": host_signal_s,
        "source": "test",
    }
    if slot_bytes is not None:
        executor["slot_bytes"] = slot_bytes
    if signal_latency_s is not None:
        executor["signal_latency_s"] = signal_latency_s
    return model_from_dict(
        {
            "name": "test",
            "links": {"nvlink": {"alpha_s": ALPHA_S, "bandwidth_Bps": LINK_BPS, "source": "test"}},
            "compute": {"reduce_bandwidth_Bps": reduce_Bps, "reduce_launch_s": REDUCE_LAUNCH_S, "source": "test"},
            "executor": executor,
            "protocols": {"LL": {"efficiency": ll, "source": "test"}},
            "host_memory": {"bandwidth_Bps": 50e9, "source": "test"},
        }
    )


def machine(spec, **model_options):
    return Machine(load_topology(spec), make_model(**model_options))


def close(a, b, rel=1e-9):
    return math.isclose(a, b, rel_tol=rel, abs_tol=1e-15)


# -- reference programs ---------------------------------------------------------------
def chain(hops, **kw):
    """Rank 0's chunk forwarded along a line of ``hops`` + 1 ranks to the last."""
    coll = custom_collective("chain", [[0]] + [[]] * hops, [[]] * hops + [[0]])
    executors = [[tb(0, op("send", ("input", 0)), send=1)]]
    executors += [[tb(0, op("rcs", dst=("scratch", 0)), send=r + 1, recv=r - 1)] for r in range(1, hops)]
    executors += [[tb(0, op("recv", dst=("output", 0)), recv=hops - 1)]]
    buffers = [{"input": 1}] + [{"scratch": 1}] * (hops - 1) + [{"output": 1}]
    return program(coll, executors, buffers, name=f"chain{hops}", **kw)


def pair(*receiver_steps, sender_steps=None, collective=None, **kw):
    """Rank 0 sends its input chunk(s) to rank 1, which runs ``receiver_steps``."""
    coll = collective or custom_collective("pair", [[0], []], [[], [0]])
    sender_steps = sender_steps or [op("send", ("input", 0))]
    executors = [[tb(0, *sender_steps, send=1)], [tb(0, *receiver_steps, recv=0)]]
    return program(coll, executors, [{"input": 8, "output": 8}] * 2, **kw)


def ring_allreduce(p):
    """NCCL's ring Allreduce, one chunk per rank, with MSCCL's fused steps:
    ReduceScatter (send, p-2 rrs, rrcs) then Allgather (p-2 rcs, recv)."""
    coll = make_collective("allreduce", p, p)
    executors = []
    for r in range(p):
        c = [(r - s) % p for s in range(2 * p)]  # chunk sent at ring step s
        steps = [op("send", ("input", c[0]))]
        steps += [op("rrs", ("input", c[s])) for s in range(1, p - 1)]
        steps += [op("rrcs", ("input", c[p - 1]), ("output", c[p - 1]))]
        steps += [op("rcs", dst=("output", c[s])) for s in range(p, 2 * p - 2)]
        steps += [op("recv", dst=("output", c[2 * p - 2]))]
        executors.append([tb(0, *steps, send=(r + 1) % p, recv=(r - 1) % p)])
    return program(coll, executors, {"input": p, "output": p}, name=f"ring{p}")


def rate(instances=1, efficiency=1.0):
    return min(LINK_BPS, TB_BPS * instances) * efficiency


# -- the tiling pipeline (GC3 §6.2, Fig. 6) ----------------------------------------------
@pytest.mark.parametrize("hops, tiles", [(1, 1), (1, 5), (2, 4), (3, 1), (3, 7)])
def test_k_hop_pipeline_of_T_tiles_takes_k_plus_T_minus_1_tile_times(hops, tiles):
    tile = 256 * 1024
    m = machine(f"line:{hops + 1}")
    result = simulate_program(chain(hops, tile_bytes=tile), m, tiles * tile)
    tile_time = ALPHA_S + tile / rate()
    assert close(result.time_s, LAUNCH_S + (hops + tiles - 1) * tile_time)


# -- flags seen a signal latency after they are raised (GC3 Fig. 5's semaphores) --------
SIGNAL_S = 1.5e-6


@pytest.mark.parametrize("hops, tiles", [(1, 1), (2, 4), (3, 7)])
def test_each_hop_adds_the_signal_latency_once_and_the_tiles_behind_still_pipeline(hops, tiles):
    """The receiver sees a message's flag a signal latency after the data has
    arrived; the sender does not wait for it, so the latency shows once a hop
    (the H100's ring steps, benchmarks/measured/h100-2026-11-26)."""
    tile = 256 * 1024
    m = machine(f"line:{hops + 1}", signal_latency_s=SIGNAL_S)
    result = simulate_program(chain(hops, tile_bytes=tile), m, tiles * tile)
    tile_time = ALPHA_S + tile / rate()
    assert close(result.time_s, LAUNCH_S + (hops + tiles - 1) * tile_time + hops * SIGNAL_S)


def test_a_dependency_on_another_executor_is_seen_a_signal_latency_after_its_step():
    coll = custom_collective("local", [[0, 1], []], [[0, 1], []])
    copy_a = op("copy", ("input", 0), ("output", 0))
    copy_b = op("copy", ("input", 1), ("output", 1), deps=((0, 0),))
    prog = program(coll, [[tb(0, copy_a), tb(1, copy_b)], []], {"input": 2, "output": 2})
    copy_s = MB / TB_BPS
    without = simulate_program(prog, machine("line:2"), 2 * MB).time_s
    with_latency = simulate_program(prog, machine("line:2", signal_latency_s=SIGNAL_S), 2 * MB).time_s
    assert close(without, LAUNCH_S + 2 * copy_s)
    assert close(with_latency, LAUNCH_S + 2 * copy_s + SIGNAL_S)


def test_with_one_slot_every_message_waits_for_both_flags():
    """One FIFO slot: the receiver sees message j a signal latency after it
    arrives, and the sender sees the freed slot a signal latency after that."""
    n_msgs = 4
    coll = custom_collective("pair", [list(range(n_msgs)), []], [[], list(range(n_msgs))])
    sender = [op("send", ("input", i)) for i in range(n_msgs)]
    receiver = [op("recv", dst=("output", i)) for i in range(n_msgs)]
    m = machine("line:2", slots=1, signal_latency_s=SIGNAL_S)
    result = simulate_program(pair(*receiver, sender_steps=sender, collective=coll), m, MB)
    tau = ALPHA_S + MB / n_msgs / rate()
    assert close(result.time_s, LAUNCH_S + n_msgs * tau + (2 * n_msgs - 1) * SIGNAL_S)


@pytest.mark.parametrize("host_rank", [0, 1])
def test_flags_a_host_thread_raises_pay_the_work_queue_not_the_signal_latency(host_rank):
    """Rank 0 signals rank 1: a thread block's flag reaches the host thread a
    signal latency late; the host thread's request pays host_signal_s alone."""
    coll = custom_collective("none", [[], []], [[], []])
    kinds = ["threadblock", "threadblock"]
    kinds[host_rank] = "host"
    executors = [[tb(0, op("signal"), send=1, kind=kinds[0])], [tb(0, op("wait"), recv=0, kind=kinds[1])]]
    signal_s = 5e-6
    m = machine("line:2", host_signal_s=signal_s, signal_latency_s=SIGNAL_S)
    result = simulate_program(program(coll, executors, {}), m, MB)
    if host_rank == 0:
        expected = max(LAUNCH_S, signal_s + ALPHA_S)
    else:
        expected = LAUNCH_S + ALPHA_S + SIGNAL_S + signal_s
    assert close(result.time_s, expected)


def test_the_signal_latency_must_be_a_non_negative_number():
    with pytest.raises(SimcollError, match="signal_latency_s: must be non-negative"):
        make_model(signal_latency_s=-1e-6)


def test_the_models_slot_size_tiles_when_the_program_gives_none():
    tile = 128 * 1024
    m = machine("line:3", slot_bytes=tile)
    result = simulate_program(chain(2), m, 6 * tile)
    assert close(result.time_s, LAUNCH_S + (2 + 6 - 1) * (ALPHA_S + tile / rate()))


def test_a_chunk_that_fits_one_slot_is_one_tile_and_the_last_tile_holds_the_rest():
    m = machine("line:3", slot_bytes=MB)
    assert close(simulate_program(chain(2), m, MB).time_s, LAUNCH_S + 2 * (ALPHA_S + MB / rate()))
    # 2.5 tiles: two full tiles and a half one; the second hop of the half
    # tile waits for that of the second full tile.
    tile_time = ALPHA_S + MB / rate()
    half_time = ALPHA_S + MB / 2 / rate()
    expected = LAUNCH_S + 3 * tile_time + half_time
    assert close(simulate_program(chain(2), m, 2.5 * MB).time_s, expected)


# -- rates: thread blocks, instances, protocols --------------------------------------------
@pytest.mark.parametrize("instances", [1, 2, 3, 8])
def test_thread_block_cap_binds_and_instances_multiply_it_up_to_the_link_rate(instances):
    m = machine("line:2")
    result = simulate_program(pair(op("recv", dst=("output", 0)), instances=instances), m, 4 * MB)
    expected_rate = min(TB_BPS * instances, LINK_BPS)
    assert close(result.time_s, LAUNCH_S + ALPHA_S + 4 * MB / expected_rate)
    if instances == 1:
        assert expected_rate == TB_BPS < LINK_BPS
    if instances >= 3:
        assert expected_rate == LINK_BPS


def test_unexpanded_instances_move_one_tile_per_replica_at_once():
    """k instances = k replicas on their own connections: a tiled chain runs
    (hops + T - 1) steps of k tiles each at k times the thread-block rate."""
    tile, k, steps, hops = 256 * 1024, 2, 3, 2
    m = machine(f"line:{hops + 1}")
    result = simulate_program(chain(hops, tile_bytes=tile, instances=k), m, steps * k * tile)
    assert result.stats["tiles"] == steps
    assert close(result.time_s, LAUNCH_S + (hops + steps - 1) * (ALPHA_S + k * tile / rate(instances=k)))


@pytest.mark.parametrize("efficiency", [0.5, 0.25])
def test_protocol_efficiency_divides_the_bandwidth(efficiency):
    m = machine("line:2", ll=efficiency)
    simple = simulate_program(pair(op("recv", dst=("output", 0))), m, 4 * MB)
    ll = simulate_program(pair(op("recv", dst=("output", 0)), protocol="LL"), m, 4 * MB)
    assert close(simple.time_s, LAUNCH_S + ALPHA_S + 4 * MB / rate())
    assert close(ll.time_s, LAUNCH_S + ALPHA_S + 4 * MB / rate(efficiency=efficiency))


def test_a_protocol_the_model_does_not_list_runs_at_full_efficiency_and_says_so():
    m = machine("line:2")
    assert "LL128" not in m.model.protocol_efficiency
    result = simulate_program(pair(op("recv", dst=("output", 0)), protocol="LL128"), m, 4 * MB)
    assert close(result.time_s, LAUNCH_S + ALPHA_S + 4 * MB / rate())
    assert result.stats["protocol"] == "LL128" and result.stats["protocol_efficiency"] == 1.0


# -- computation ------------------------------------------------------------------------
def test_a_reduction_adds_exactly_the_models_reduce_time():
    coll = make_collective("reduce", 2, root=1)
    m = machine("line:2")
    size = 3 * MB
    plain = simulate_program(pair(op("recv", dst=("output", 0)), collective=coll), m, size)
    reduced = simulate_program(pair(op("rrc", ("input", 0), ("output", 0)), collective=coll), m, size)
    t_r = m.model.reduce_time_s(size)
    assert t_r == REDUCE_LAUNCH_S + size / REDUCE_BPS
    assert close(reduced.time_s - plain.time_s, t_r)


def test_a_local_copy_costs_its_bytes_at_the_thread_block_rate():
    coll = custom_collective("local", [[0], []], [[0], []])
    executors = [[tb(0, op("copy", ("input", 0), ("output", 0)))], []]
    prog = program(coll, executors, {"input": 1, "output": 1})
    result = simulate_program(prog, machine("line:2"), 2 * MB)
    assert close(result.time_s, LAUNCH_S + 2 * MB / TB_BPS)


# -- FIFO slots (GC3 §6.1) ---------------------------------------------------------------
@pytest.mark.parametrize("slots", [1, 2, 3])
def test_fifo_slots_bound_outstanding_sends_so_a_slow_receiver_throttles_the_sender(slots):
    n_msgs = 6
    coll = make_collective("reduce", 2, n_msgs, root=1)
    size_chunk = MB / 4
    sender = [op("send", ("input", i)) for i in range(n_msgs)]
    receiver = [op("rrc", ("input", i), ("output", i)) for i in range(n_msgs)]
    m = machine("line:2", slots=slots, reduce_Bps=TB_BPS / 8)
    result = simulate_program(pair(*receiver, sender_steps=sender, collective=coll), m, size_chunk * n_msgs)
    rows = result.timeline
    sends = rows[(rows["track"] == "rank 0 tb 0") & (rows["kind"] == "send")].sort_values("start_s")
    rrcs = rows[(rows["track"] == "rank 1 tb 0") & (rows["kind"] == "rrc")].sort_values("start_s")
    assert len(sends) == len(rrcs) == n_msgs
    send_end = list(sends["end_s"])
    rrc_end = list(rrcs["end_s"])
    tau = ALPHA_S + size_chunk / rate()
    t_r = m.model.reduce_time_s(size_chunk)
    assert t_r > tau  # the receiver is the slow side
    for j in range(n_msgs):
        if j < slots:  # free slots: back to back
            assert close(send_end[j], LAUNCH_S + (j + 1) * tau)
        else:  # waits for the receiver to free the slot of message j - slots
            assert close(send_end[j], rrc_end[j - slots] + tau)
    # never more than `slots` messages sent and not yet consumed
    for j in range(n_msgs):
        outstanding = sum(1 for i in range(n_msgs) if send_end[i] <= send_end[j] and rrc_end[i] > send_end[j])
        assert outstanding <= slots


def test_more_outstanding_sends_than_slots_deadlocks_though_the_verifier_accepts_it():
    """GC3 §6.1: the compiler must not schedule more than s outstanding sends;
    both ranks send twice before receiving, with one slot."""
    coll = make_collective("allgather", 2, 2)
    executors = []
    for r in range(2):
        mine = [2 * r, 2 * r + 1]  # output slots of this rank's inputs (rank-major)
        theirs = [2 * (1 - r), 2 * (1 - r) + 1]
        steps = [op("copy", ("input", i), ("output", mine[i])) for i in range(2)]
        steps += [op("send", ("output", mine[i])) for i in range(2)]
        steps += [op("recv", dst=("output", theirs[i])) for i in range(2)]
        executors.append([tb(0, *steps, send=1 - r, recv=1 - r)])
    prog = program(coll, executors, {"input": 2, "output": 4})
    assert check(prog) == []
    assert simulate_program(prog, machine("line:2", slots=2), 4 * MB).time_s > 0
    with pytest.raises(ProgramDeadlockError) as info:
        simulate_program(prog, machine("line:2", slots=1), 4 * MB)
    waits = info.value.waits
    assert len(waits) == 2
    for r in range(2):
        assert any(f"rank {r} executor 0 step 3 (send)" in w and "free FIFO slot" in w for w in waits), waits


def test_a_ring_of_fused_receive_reduce_sends_needs_two_slots():
    """An rrs holds its incoming slot until its own send has landed, so with
    one slot every rank waits for its successor's slot: a cycle (the
    compiler's FIFO check refuses such a ring with one slot too)."""
    with pytest.raises(ProgramDeadlockError) as info:
        simulate_program(ring_allreduce(4), machine("ring:4", slots=1), 4 * MB)
    assert len(info.value.waits) == 4
    assert all("(rrs)" in w and "free FIFO slot" in w for w in info.value.waits), info.value.waits
    assert simulate_program(ring_allreduce(4), machine("ring:4", slots=2), 4 * MB).time_s > 0


# -- deadlocks ------------------------------------------------------------------------
def test_a_cyclic_program_is_reported_with_what_every_executor_waits_on():
    coll = make_collective("allgather", 2)
    executors = [
        [
            tb(0, op("recv", dst=("output", 1 - r)), op("send", ("input", 0)), send=1 - r, recv=1 - r),
            tb(1, op("copy", ("input", 0), ("output", r))),
        ]
        for r in range(2)
    ]
    prog = program(coll, executors, {"input": 1, "output": 2})
    with pytest.raises(ProgramDeadlockError) as info:
        simulate_program(prog, machine("line:2"), MB, time_limit_s=5)
    assert isinstance(info.value, SimulationError) and isinstance(info.value, AlgorithmError)
    waits = info.value.waits
    assert len(waits) == 2
    for r in range(2):
        assert any(
            f"rank {r} executor 0 step 0 (recv)" in w and f"connection rank {1 - r} -> rank {r} channel 0" in w
            for w in waits
        ), waits


def test_a_dependency_cycle_across_executors_names_the_steps_waited_for():
    coll = custom_collective("local", [[0], []], [[0], []])
    executors = [
        [
            tb(0, op("nop", deps=[(1, 0)]), op("copy", ("input", 0), ("output", 0))),
            tb(1, op("nop", deps=[(0, 0)])),
        ],
        [],
    ]
    prog = program(coll, executors, {"input": 1, "output": 1})
    with pytest.raises(ProgramDeadlockError, match=r"executor 0 step 0 \(nop\) tile 0 waits for executor 1 step 0"):
        simulate_program(prog, machine("line:2"), MB)


# -- kernel launches ----------------------------------------------------------------------
def two_phase(**kw):
    """Rank 0 sends chunk 0 on channel 0 (executor 0), then chunk 1 on channel 1
    (executor 1, after executor 0); rank 1 receives both."""
    coll = custom_collective("pair2", [[0, 1], []], [[], [0, 1]])
    executors = [
        [tb(0, op("send", ("input", 0)), send=1), tb(1, op("send", ("input", 1), deps=[(0, 0)]), send=1, chan=1)],
        [tb(0, op("recv", dst=("output", 0)), recv=0), tb(1, op("recv", dst=("output", 1)), recv=0, chan=1)],
    ]
    return program(coll, executors, {"input": 2, "output": 2}, **kw)


def test_a_persistent_kernel_beats_one_kernel_per_phase_by_the_extra_launches():
    m = machine("line:2")
    size = 2 * MB
    assert check(two_phase()) == []
    persistent = simulate_program(two_phase(), m, size)
    split = simulate_program(two_phase(metadata={"kernels": [[0], [1]]}), m, size)
    tau = ALPHA_S + (size / 2) / rate()
    assert close(persistent.time_s, LAUNCH_S + 2 * tau)
    assert close(split.time_s - persistent.time_s, (2 - 1) * LAUNCH_S)


def relay(**kw):
    """Phase 1 (executor 0): rank 0 -> rank 1; phase 2 (executor 1): rank 1 -> rank 2,
    each tile forwarded once rank 1's executor 0 has received it."""
    coll = custom_collective("relay", [[0], [], []], [[], [], [0]])
    executors = [
        [tb(0, op("send", ("input", 0)), send=1)],
        [tb(0, op("recv", dst=("scratch", 0)), recv=0), tb(1, op("send", ("scratch", 0), deps=[(0, 0)]), send=2)],
        [tb(1, op("recv", dst=("output", 0)), recv=1)],
    ]
    return program(coll, executors, [{"input": 1}, {"scratch": 1}, {"output": 1}], **kw)


@pytest.mark.parametrize("tiles", [1, 4])
def test_one_kernel_per_phase_also_loses_the_pipelining_of_tiles_across_phases(tiles):
    """GC3 §6.2, §7: the persistent kernel overlaps phase 2 of tile t with
    phase 1 of tile t+1; one kernel per phase pays a second launch and runs
    the phases one after the other: slower by kernel_launch_s + (T-1) tile-times."""
    tile = MB
    m = machine("line:3")
    tau = ALPHA_S + tile / rate()
    persistent = simulate_program(relay(tile_bytes=tile), m, tiles * tile)
    split = simulate_program(relay(tile_bytes=tile, metadata={"kernels": [[0], [1]]}), m, tiles * tile)
    assert close(persistent.time_s, LAUNCH_S + (tiles + 1) * tau)
    assert close(split.time_s, 2 * LAUNCH_S + 2 * tiles * tau)
    assert close(split.time_s - persistent.time_s, LAUNCH_S + (tiles - 1) * tau)


def relay_one_block(**kw):
    """As :func:`relay`, but rank 1's single thread block receives and then sends."""
    coll = custom_collective("relay", [[0], [], []], [[], [], [0]])
    executors = [
        [tb(0, op("send", ("input", 0)), send=1)],
        [tb(0, op("recv", dst=("scratch", 0)), op("send", ("scratch", 0)), send=2, recv=0)],
        [tb(0, op("recv", dst=("output", 0)), recv=1)],
    ]
    return program(coll, executors, [{"input": 1}, {"scratch": 1}, {"output": 1}], **kw)


def test_a_kernel_may_hold_a_slice_of_an_executors_steps():
    """Phases sharing thread blocks: kernel 0 runs step 0 of every executor,
    kernel 1 the rest, each with its own tiling loop."""
    tiles, tile = 3, MB
    m = machine("line:3")
    tau = ALPHA_S + tile / rate()
    prog = relay_one_block(tile_bytes=tile)
    assert check(prog) == []
    persistent = simulate_program(prog, m, tiles * tile)
    split = simulate_program(
        relay_one_block(tile_bytes=tile, metadata={"kernels": [[[0, 0, 1]], [[0, 1, None]]]}), m, tiles * tile
    )
    assert close(persistent.time_s, LAUNCH_S + (tiles + 1) * tau)
    assert close(split.time_s, 2 * LAUNCH_S + 2 * tiles * tau)
    # kernel 0 on every rank; kernel 1 only on rank 1 (the others have no step in it)
    assert (split.timeline["kind"] == "launch").sum() == 3 + 1


def test_kernel_slices_must_cover_an_executors_steps_once_in_order():
    bad = {"kernels": [[[0, 1, None]], [[0, 0, 1]]]}
    with pytest.raises(AlgorithmError, match="executor 0 runs steps 1:1 in kernel 0, but its next step to run is 0"):
        simulate_program(relay_one_block(metadata=bad), machine("line:3"), MB)
    with pytest.raises(AlgorithmError, match="metadata.kernels"):
        simulate_program(relay_one_block(metadata={"kernels": [["zero"]]}), machine("line:3"), MB)


def hierarchical_allreduce(local=8, **kw):
    """GC3 §2 / Fig. 6's hierarchical Allreduce on 2 nodes of ``local`` GPUs,
    one thread block per phase: intra-node ring ReduceScatter (executor 0),
    exchange of each GPU's node-reduced chunk with its peer on the other node
    (executor 1), intra-node ring Allgather (executor 2, channel 1)."""
    p = 2 * local
    coll = make_collective("allreduce", p, local)
    executors = []
    for r in range(p):
        n, i = divmod(r, local)
        nxt, prv, peer = n * local + (i + 1) % local, n * local + (i - 1) % local, (1 - n) * local + i
        c = [(i - s) % local for s in range(2 * local)]
        k = c[local - 1]  # the chunk this GPU reduces
        rs = [op("send", ("input", c[0]))]
        rs += [op("rrs", ("input", c[s])) for s in range(1, local - 1)]
        rs += [op("rrc", ("input", k), ("output", k))]
        xch = [op("send", ("output", k), deps=[(0, local - 1)]), op("rrc", ("output", k), ("output", k))]
        ag = [op("send", ("output", k), deps=[(1, 1)])]
        ag += [op("rcs", dst=("output", c[s])) for s in range(local, 2 * local - 2)]
        ag += [op("recv", dst=("output", c[2 * local - 2]))]
        executors.append(
            [
                tb(0, *rs, send=nxt, recv=prv),
                tb(1, *xch, send=peer, recv=peer),
                tb(2, *ag, send=nxt, recv=prv, chan=1),
            ]
        )
    return program(coll, executors, {"input": local, "output": local}, name="hierarchical", **kw)


def test_gc3_hierarchical_allreduce_pipelines_tiles_in_one_persistent_kernel():
    """GC3 §6.2 Fig. 6 and §7: with one thread block per phase, tiles of the
    intra-node and inter-node phases overlap in a persistent kernel; one kernel
    per phase runs them one after the other. With one tile the only
    difference is the two extra launches."""
    m = load_machine("dgx-a100*2")
    launch_s = m.model.executor.kernel_launch_s
    slot = m.model.executor.slot_bytes
    prog = hierarchical_allreduce()
    assert check(prog, m) == []
    split = hierarchical_allreduce(metadata={"kernels": [[0], [1], [2]]})
    one_tile = 8 * slot  # one slot per chunk
    a, b = simulate_program(prog, m, one_tile), simulate_program(split, m, one_tile)
    assert a.stats["tiles"] == 1
    assert close(b.time_s - a.time_s, 2 * launch_s)
    a, b = simulate_program(prog, m, 8 * 4 * slot), simulate_program(split, m, 8 * 4 * slot)
    assert a.stats["tiles"] == 4
    assert b.time_s - 2 * launch_s > 1.3 * a.time_s


def test_kernels_metadata_must_place_every_gpu_executor():
    with pytest.raises(AlgorithmError, match="executor 1"):
        simulate_program(two_phase(metadata={"kernels": [[0]]}), machine("line:2"), MB)


# -- a whole collective ------------------------------------------------------------------------
@pytest.mark.parametrize("p", [3, 4, 8])
def test_ring_allreduce_matches_the_closed_form_ring_formula(p):
    """NV-Group eq. (3) = (1) + (2): 2(p-1)(t_s + M/(pB)) + (p-1) T_R(M/p),
    plus one kernel launch."""
    prog = ring_allreduce(p)
    assert check(prog, f"ring:{p}") == []
    m = machine(f"ring:{p}")
    size = 8 * MB
    n = size / p
    expected = LAUNCH_S + 2 * (p - 1) * (ALPHA_S + n / rate()) + (p - 1) * m.model.reduce_time_s(n)
    assert close(simulate_program(prog, m, size).time_s, expected)


def test_same_inputs_give_bit_identical_timelines():
    m = machine("ring:4", slot_bytes=MB / 2)
    a = simulate_program(ring_allreduce(4), m, 8 * MB)
    b = simulate_program(ring_allreduce(4), m, 8 * MB)
    assert a.time_s == b.time_s
    assert a.timeline.equals(b.timeline)
    assert len(a.timeline) > 0


def test_every_instruction_of_every_tile_is_a_timeline_row_on_its_executors_track():
    prog = ring_allreduce(4)
    tiles = 3
    m = machine("ring:4", slot_bytes=MB)
    result = simulate_program(prog, m, 4 * tiles * MB)
    rows = result.timeline
    ours = rows[rows["kind"].isin(INSTRUCTION_OPS)]
    assert len(ours) == tiles * sum(len(e.instructions) for r in prog.ranks for e in r.executors)
    assert set(ours["track"]) == {f"rank {r} tb 0" for r in range(4)}
    assert (ours["end_s"] >= ours["start_s"]).all()
    # every send moves its tile over the network: one transfer row each
    sends = ours["kind"].isin(["send", "rrs", "rrcs", "rcs"]).sum()
    assert (rows["kind"] == "transfer").sum() == sends
    trace = result.to_chrome_trace()
    threads = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert {f"rank {r} tb 0" for r in range(4)} <= threads


# -- host executors (NV-Group §4.2.1, §4.4.2) ------------------------------------------------
@pytest.mark.parametrize("host_rank", [0, 1])
def test_host_signal_and_wait_go_through_the_work_queue_with_its_latency(host_rank):
    """Rank 0 signals rank 1; the host side pays host_signal_s, the GPU side
    starts after its kernel launch."""
    coll = custom_collective("none", [[], []], [[], []])
    kinds = ["threadblock", "threadblock"]
    kinds[host_rank] = "host"
    executors = [[tb(0, op("signal"), send=1, kind=kinds[0])], [tb(0, op("wait"), recv=0, kind=kinds[1])]]
    signal_s = 5e-6
    result = simulate_program(program(coll, executors, {}), machine("line:2", host_signal_s=signal_s), MB)
    if host_rank == 0:  # CPU posts the request, the GPU kernel picks it up
        expected = max(LAUNCH_S, signal_s + ALPHA_S)
    else:  # the GPU signals after its launch, the CPU polls the queue
        expected = LAUNCH_S + ALPHA_S + signal_s
    assert close(result.time_s, expected)


def test_nvgroup_cpu_allreduce_runs_on_host_threads_without_kernel_launches():
    from simcoll.algorithms.nvgroup import nvgroup_cpu_allreduce

    topo = load_topology("summit")
    prog = nvgroup_cpu_allreduce(topo, make_collective("allreduce", 6))
    assert check(prog, load_machine(topo)) == []
    base = load_machine(topo)
    host_signal_s = 5e-6
    model = model_from_dict(
        {
            **base.model.raw,
            "executor": {
                "thread_block_bandwidth_Bps": 1e9,
                "kernel_launch_s": 1.0,  # would dominate if any kernel were launched
                "fifo_slots": 8,
                "host_signal_s": host_signal_s,
                "source": "test",
            },
        }
    )
    m = Machine(topo, model)
    size = 8 * 1024
    result = simulate_program(prog, m, size, contention=False)
    n = size  # one chunk
    t_r = model.reduce_time_s(n)

    def move(a, b):
        route = m.route(a, b)
        return route.alpha_s + n / route.bandwidth_Bps

    groups = prog.metadata["groups"]
    totals = []
    for g, other in ((groups[0], groups[1]), (groups[1], groups[0])):
        leader = g[0]
        load = host_signal_s + max(move(r, leader) for r in g[1:]) + t_r
        other_load = host_signal_s + max(move(r, other[0]) for r in other[1:]) + t_r
        # send the partial while the peer sends its own; reduce the peer's
        exchange = max(load + move(leader, other[0]), other_load + move(other[0], leader)) + t_r
        puts = host_signal_s + n / model.host_memory_bandwidth_Bps  # own output: a host copy
        puts += sum(host_signal_s + move(leader, r) for r in g[1:])
        totals.append(exchange + puts)
    assert close(result.time_s, max(totals))
    assert result.time_s < 1e-3
    tracks = set(result.timeline["track"])
    assert "rank 0 host 0" in tracks and not any(" tb " in t for t in tracks)
    assert (result.timeline["kind"] != "launch").all()


# -- the network underneath ----------------------------------------------------------------
def two_channels():
    """Rank 0 sends one chunk to rank 1 on each of two channels at once."""
    coll = custom_collective("pair2", [[0, 1], []], [[], [0, 1]])
    executors = [
        [tb(c, op("send", ("input", c)), send=1, chan=c) for c in range(2)],
        [tb(c, op("recv", dst=("output", c)), recv=0, chan=c) for c in range(2)],
    ]
    return program(coll, executors, {"input": 2, "output": 2})


def test_concurrent_executors_share_a_link_unless_contention_is_off():
    m = machine("line:2", tb_Bps=LINK_BPS)  # one thread block fills the link
    size = 8 * MB  # two chunks of 4 MB
    assert check(two_channels()) == []
    shared = simulate_program(two_channels(), m, size)
    ideal = simulate_program(two_channels(), m, size, contention=False)
    assert close(shared.time_s, LAUNCH_S + ALPHA_S + 2 * (size / 2) / LINK_BPS)
    assert close(ideal.time_s, LAUNCH_S + ALPHA_S + (size / 2) / LINK_BPS)


def test_simulate_dispatches_a_program_to_program_mode():
    from simcoll.simulator import simulate

    result = simulate(ring_allreduce(4), machine("ring:4"), 4 * MB)
    assert result.mode == "program"
    assert result.stats["instructions"] == sum(
        len(e.instructions) for r in ring_allreduce(4).ranks for e in r.executors
    )
    assert result.algbw_GBps > 0 and result.busbw_GBps == pytest.approx(result.algbw_GBps * 2 * 3 / 4)


def test_a_lowered_ring_allreduce_takes_the_algorithms_analytic_time_without_executor_costs():
    """With no executor parameters (no thread-block cap, launch or tiling) and
    an ideal network, Program mode of the compiled ring equals the α-β
    critical path of the Algorithm it was lowered from."""
    from simcoll import compiler
    from simcoll.algorithms import generate
    from simcoll.analytic import critical_path_time_s

    m = load_machine("dgx1")
    runtime = ("executor", "call", "protocols")  # the runtime's costs, which the α-β critical path does not pay
    m = Machine(m.topology, model_from_dict({k: v for k, v in m.model.raw.items() if k not in runtime}))
    algo = generate("ring", m, "allreduce")
    prog = compiler.lower_algorithm(algo)
    for size in (64 * 1024, 16 * MB):
        assert close(simulate_program(prog, m, size, contention=False).time_s, critical_path_time_s(algo, m, size))


def test_bad_inputs_name_the_field():
    prog = chain(2)
    with pytest.raises(SizeError, match="size_bytes"):
        simulate_program(prog, machine("line:3"), 0)
    with pytest.raises(AlgorithmError, match="3 ranks but machine line:4 has 4"):
        simulate_program(prog, machine("line:4"), MB)
    with pytest.raises(SimulationError, match="cannot simulate a str"):
        simulate_program("chain.json", machine("line:3"), MB)


def test_a_connection_without_a_route_is_a_topology_error_naming_the_executor():
    coll = custom_collective("far", [[0], [], []], [[], [], [0]])
    executors = [[tb(0, op("send", ("input", 0)), send=2)], [], [tb(0, op("recv", dst=("output", 0)), recv=0)]]
    prog = program(coll, executors, {"input": 1, "output": 1})
    with pytest.raises(TopologyError, match="rank 0 executor 0 sends to rank 2, but line:3 has no route"):
        simulate_program(prog, machine("line:3"), MB)


# -- never hang; documented examples ----------------------------------------------------
def test_the_wall_clock_limit_stops_a_long_simulation():
    m = machine("ring:8", slot_bytes=4096)
    with pytest.raises(SimcollError, match="limit"):
        simulate_program(ring_allreduce(8), m, 8 * MB, time_limit_s=1e-9)


def test_the_modules_examples_hold():
    import doctest

    import simcoll.simulator.program_mode as module

    assert doctest.testmod(module).failed == 0


def test_a_billion_tiles_cost_no_memory_and_stop_at_the_wall_clock_limit():
    with pytest.raises(SimcollError, match="limit"):
        simulate_program(chain(2, tile_bytes=1), machine("line:3"), 1e9, time_limit_s=0.5)

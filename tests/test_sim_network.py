"""The simulator's fluid network (DESIGN.md "The simulator, in brief"; issue 7
items 1 and "Sharing"): α-β timing of one message, max-min fair sharing, the
executor (thread-block) cap and protocol efficiency, parallel switch planes,
determinism, and the results it records."""

import math

import pandas as pd
import pytest
import simpy

from simcoll import load_machine
from simcoll.cost_model import model_from_dict
from simcoll.errors import ModelError, SimcollError, TopologyError
from simcoll.machines import Machine
from simcoll.simulator.network import FluidNetwork
from simcoll.topology import topology_from_dict

ALPHA = 1e-6
BW = 10e9  # one link, one direction


def _model(**extra):
    return model_from_dict(
        {
            "name": "test",
            "links": {"nvlink": {"alpha_s": ALPHA, "bandwidth_Bps": BW, "source": "test"}},
            **extra,
        }
    )


def _pair_machine(count: int = 1) -> Machine:
    topo = topology_from_dict({"name": "pair", "gpus": 2, "links": [["gpu0", "gpu1", "nvlink", count]]})
    return Machine(topo, _model())


def _hub(counts: dict[int, int], gpus: int = 3, **model_extra) -> Machine:
    """GPUs joined by one NVSwitch; gpu i has counts.get(i, 1) links to it."""
    topo = topology_from_dict(
        {
            "name": "hub",
            "gpus": gpus,
            "components": [{"name": "sw", "kind": "nvswitch"}],
            "links": [[f"gpu{i}", "sw", "nvlink", counts.get(i, 1)] for i in range(gpus)],
        }
    )
    return Machine(topo, _model(**model_extra))


def _run(machine, sends, *, contention=True):
    """sends: (src, dst, bytes, kwargs); returns the arrival times."""
    env = simpy.Environment()
    net = FluidNetwork(env, machine, contention=contention)
    events = [net.transfer(s, d, n, **kw) for s, d, n, kw in sends]
    env.run()
    return [e.value for e in events], net


def test_one_message_costs_alpha_plus_n_over_b():
    (t,), _ = _run(_pair_machine(), [(0, 1, 1e7, {})])
    assert t == pytest.approx(ALPHA + 1e7 / BW, rel=1e-12)


def test_parallel_links_add_up():
    (t,), _ = _run(_pair_machine(count=3), [(0, 1, 3e7, {})])
    assert t == pytest.approx(ALPHA + 3e7 / (3 * BW), rel=1e-12)


@pytest.mark.parametrize("n", [1, 2, 5])
def test_n_equal_flows_on_one_link_take_n_times_the_bandwidth_term(n):
    size = 4e6
    times, _ = _run(_pair_machine(), [(0, 1, size, {})] * n)
    for t in times:
        assert t == pytest.approx(ALPHA + n * size / BW, rel=1e-12)


def test_n_flows_into_one_switch_port_share_it():
    # three senders into gpu0 share the switch's egress link to gpu0
    times, _ = _run(_hub({}, gpus=4), [(i, 0, 1e6, {}) for i in (1, 2, 3)])
    assert times == pytest.approx([ALPHA + 3 * 1e6 / BW] * 3, rel=1e-12)


def test_ideal_network_does_not_share():
    times, _ = _run(_pair_machine(), [(0, 1, 1e6, {})] * 3, contention=False)
    assert times == pytest.approx([ALPHA + 1e6 / BW] * 3, rel=1e-12)


def test_thread_block_cap_below_the_link_binds():
    (t,), _ = _run(_pair_machine(), [(0, 1, 1e6, {"cap_Bps": BW / 4})])
    assert t == pytest.approx(ALPHA + 1e6 / (BW / 4), rel=1e-12)


@pytest.mark.parametrize("instances, expected_rate", [(2, 2 * BW / 4), (4, BW), (8, BW)])
def test_instances_multiply_the_cap_up_to_the_link_rate(instances, expected_rate):
    (t,), _ = _run(_pair_machine(), [(0, 1, 1e6, {"cap_Bps": instances * BW / 4})])
    assert t == pytest.approx(ALPHA + 1e6 / expected_rate, rel=1e-12)


def test_max_min_gives_a_capped_flows_leftover_to_the_other():
    # flow A is capped at B/4, so flow B gets 3B/4 of the shared link
    times, _ = _run(_pair_machine(), [(0, 1, 1e6, {"cap_Bps": BW / 4}), (0, 1, 3e6, {})])
    assert times[0] == pytest.approx(ALPHA + 1e6 / (BW / 4), rel=1e-12)
    assert times[1] == pytest.approx(ALPHA + 3e6 / (3 * BW / 4), rel=1e-12)


def test_max_min_bottleneck_on_another_link():
    # sw->gpu2 has 4 links shared by f2 (0->2) and f3 (1->2): 2 links' worth each;
    # gpu0->sw has 10 links shared by f1 (0->1) and f2: f1 gets the other 8.
    machine = _hub({0: 10, 1: 10, 2: 4})
    sizes = [8e6 * BW / 1e9, 16e6 * BW / 1e9, 16e6 * BW / 1e9]
    times, _ = _run(machine, [(0, 1, sizes[0], {}), (0, 2, sizes[1], {}), (1, 2, sizes[2], {})])
    assert times[0] == pytest.approx(ALPHA + sizes[0] / (8 * BW), rel=1e-12)
    assert times[1] == pytest.approx(ALPHA + sizes[1] / (2 * BW), rel=1e-12)
    assert times[2] == pytest.approx(ALPHA + sizes[2] / (2 * BW), rel=1e-12)


def test_rates_rise_when_a_sharer_leaves():
    # two flows share a link; the short one leaves at t1 and the long one speeds up
    small, large = 1e6, 3e6
    times, _ = _run(_pair_machine(), [(0, 1, small, {}), (0, 1, large, {})])
    t1 = 2 * small / BW
    assert times[0] == pytest.approx(ALPHA + t1, rel=1e-12)
    assert times[1] == pytest.approx(ALPHA + t1 + (large - small) / BW, rel=1e-12)


def test_protocol_efficiency_scales_the_bandwidth_term():
    (t,), _ = _run(_pair_machine(), [(0, 1, 1e6, {"efficiency": 0.5})])
    assert t == pytest.approx(ALPHA + 2 * 1e6 / BW, rel=1e-12)


def test_dgx2_route_uses_all_six_switch_planes():
    machine = load_machine("dgx2")
    route = machine.route(0, 1)
    (t,), net = _run(machine, [(0, 1, 150e6, {})])
    assert route.bandwidth_Bps == pytest.approx(150e9)
    assert t == pytest.approx(route.alpha_s + 150e6 / route.bandwidth_Bps, rel=1e-12)
    # two senders into gpu1 halve each other's rate over the six planes
    times, _ = _run(machine, [(0, 1, 150e6, {}), (2, 1, 150e6, {})])
    assert times == pytest.approx([route.alpha_s + 2 * 150e6 / 150e9] * 2, rel=1e-12)


def test_sent_fires_when_the_wire_is_free_before_arrival():
    env = simpy.Environment()
    net = FluidNetwork(env, _pair_machine())
    event = net.transfer(0, 1, 1e6)
    seen = {}

    def watcher():
        yield event.sent
        seen["sent"] = env.now
        yield event
        seen["arrived"] = env.now

    env.process(watcher())
    env.run()
    assert seen["sent"] == pytest.approx(1e6 / BW, rel=1e-12)
    assert seen["arrived"] == pytest.approx(ALPHA + 1e6 / BW, rel=1e-12)


def test_timeline_and_utilisation_rows():
    env = simpy.Environment()
    net = FluidNetwork(env, _pair_machine())
    net.transfer(0, 1, 1e6, track="r0.tb0", label="x", chunk=3)
    net.transfer(0, 1, 1e6, track="r0.tb1")
    env.run()
    net.record("copy", "r1.tb0", 0.5e-6, 1e-6, src=1, chunk=2, size_bytes=10)
    net.finish()
    tl = net.timeline.to_frame()
    assert list(tl.track) == ["r0.tb0", "r0.tb1", "r1.tb0"]
    assert tl.loc[0, "chunk"] == 3 and tl.loc[1, "chunk"] == -1 and tl.loc[0, "label"] == "x"
    util = net.utilisation.to_frame(net.resource_names())
    # one interval at the full link rate carrying both flows
    assert len(util) == 1
    assert util.loc[0, "rate_Bps"] == pytest.approx(BW) and util.loc[0, "flows"] == 2
    assert util.loc[0, "end_s"] == pytest.approx(2e6 / BW)


def test_same_inputs_give_bit_identical_timelines():
    machine = load_machine("dgx2")
    sends = [(s, d, 1e6 * (1 + (s + d) % 3), {}) for s in range(6) for d in range(6) if s != d]
    frames = []
    for _ in range(2):
        _, net = _run(machine, sends)
        net.finish()
        frames.append((net.timeline.to_frame(), net.utilisation.to_frame(net.resource_names())))
    pd.testing.assert_frame_equal(frames[0][0], frames[1][0], check_exact=True)
    pd.testing.assert_frame_equal(frames[0][1], frames[1][1], check_exact=True)


def test_bad_transfers_raise_named_errors():
    env = simpy.Environment()
    net = FluidNetwork(env, _pair_machine())
    with pytest.raises(TopologyError, match="itself"):
        net.transfer(0, 0, 1)
    with pytest.raises(SimcollError, match="size_bytes"):
        net.transfer(0, 1, math.nan)
    with pytest.raises(ModelError, match="efficiency"):
        net.transfer(0, 1, 1, efficiency=1.5)
    with pytest.raises(ModelError, match="cap_Bps"):
        net.transfer(0, 1, 1, cap_Bps=0)
    ring = FluidNetwork(simpy.Environment(), load_machine("ring:4"))
    with pytest.raises(TopologyError, match="no route"):
        ring.transfer(0, 2, 1)


# -- the simulator's parameters in models/*.yaml -----------------------------------------
def test_executor_and_network_parameters_parse_with_defaults():
    model = _model(
        executor={"thread_block_bandwidth_Bps": 5e9, "kernel_launch_s": 4e-6, "source": "t"},
        network={"nic_binding": "packed", "source": "t"},
    )
    assert model.executor.fifo_slots == 8 and model.executor.slot_bytes is None
    assert model.executor.host_signal_s is None
    assert model.network.nic_binding == "packed" and model.network.host_staging is False
    full = _model(
        executor={
            "thread_block_bandwidth_Bps": 5e9,
            "kernel_launch_s": 4e-6,
            "fifo_slots": 4,
            "slot_bytes": 131072,
            "host_signal_s": 1e-6,
            "source": "t",
        }
    )
    assert (full.executor.fifo_slots, full.executor.slot_bytes, full.executor.host_signal_s) == (4, 131072, 1e-6)


@pytest.mark.parametrize(
    "section, entry, message",
    [
        ("executor", {"thread_block_bandwidth_Bps": 1e9, "kernel_launch_s": 0, "fifo_slots": 2.5}, "fifo_slots"),
        ("executor", {"thread_block_bandwidth_Bps": 1e9, "kernel_launch_s": 0, "slot_bytes": 0}, "slot_bytes"),
        ("network", {"nic_binding": "scattered"}, "nic_binding"),
        ("network", {"host_staging": "yes"}, "host_staging"),
        ("network", {"bogus": 1}, "bogus"),
    ],
)
def test_bad_simulator_parameters_name_the_field(section, entry, message):
    with pytest.raises(ModelError, match=message):
        _model(**{section: {**entry, "source": "t"}})


def test_builtin_executor_sections_carry_sources():
    for name in ("dgx1", "dgx2", "ndv2", "dgx-a100", "dgx-h100"):
        executor = load_machine(name).model.executor
        assert executor is not None and executor.source and executor.fifo_slots == 8

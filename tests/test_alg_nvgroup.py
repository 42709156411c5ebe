"""Specification of the NVGroup family (NV-Group, Chu et al., ICS'20, §4):
NVLink discovery and grouping (§4.1), the NVGroup ring (§4.2-4.3, Algorithm 2)
with its cost equations (7)-(10), and the CPU-driven small-message path (§4.4.2)."""

from __future__ import annotations

import doctest
import importlib
import itertools
import math

import pytest
import yaml

from simcoll import generate, load_machine, load_topology, make_collective
from simcoll.algorithm import Algorithm
from simcoll.algorithms import REGISTRY
from simcoll.algorithms.nvgroup import (
    CPU_PATH_MAX_BYTES,
    nvgroup_allreduce,
    nvgroup_cpu_allreduce,
    nvgroup_ring,
    nvlink_groups,
)
from simcoll.analytic import critical_path_time_s
from simcoll.cost_model import model_from_dict
from simcoll.errors import NotApplicableError, SimcollError
from simcoll.machines import Machine
from simcoll.program import Program
from simcoll.routes import Routes
from simcoll.topology import FABRIC_LINK_TYPES
from simcoll.topology_generators import cluster
from simcoll.verify import check

COLLECTIVES = ("allreduce", "reducescatter", "allgather")


def grouped(tmp_path, groups: int, size: int, *, network: str = "xbus", name: str | None = None) -> str:
    """A YAML machine of ``groups`` sockets, each ``size`` GPUs and a CPU fully
    connected by NVLink (Summit-like), the CPUs fully connected by ``network``
    links. Returns the file's path."""
    components, links = [], []
    for g in range(groups):
        members = [f"gpu{g * size + k}" for k in range(size)]
        components += [{"name": m, "kind": "gpu"} for m in members]
        components.append({"name": f"cpu{g}", "kind": "cpu"})
        links += [[a, b, "nvlink"] for a, b in itertools.combinations([*members, f"cpu{g}"], 2)]
    links += [[f"cpu{a}", f"cpu{b}", network] for a, b in itertools.combinations(range(groups), 2)]
    name = name or f"sockets-{groups}x{size}"
    return write_yaml(tmp_path, {"name": name, "components": components, "links": links})


def write_yaml(tmp_path, data: dict) -> str:
    path = tmp_path / f"{data['name']}.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def collective(name: str, p: int, factor: int):
    """Allreduce with ``factor`` chunks per rank (C = factor·P), the others ``factor`` chunks per rank."""
    return make_collective(name, p, factor * p if name == "allreduce" else factor)


# ---------------------------------------------------------------------------
# §4.1 NVLink discovery and grouping
# ---------------------------------------------------------------------------
def test_summit_has_two_groups_per_node_each_with_its_socket_cpu():
    """§4.1, §5.1: on Summit the 3 GPUs and the POWER9 of a socket are fully
    connected by NVLink; the two sockets are joined by the X-Bus, not NVLink."""
    groups = nvlink_groups(load_topology("summit"))
    assert [(g.ranks, g.cpu, g.node) for g in groups] == [((0, 1, 2), "cpu0", 0), ((3, 4, 5), "cpu1", 0)]
    assert [g.leader for g in groups] == [0, 3]


def test_summit_cluster_has_two_groups_per_node():
    groups = nvlink_groups(load_topology("summit*2"))
    assert [g.ranks for g in groups] == [(0, 1, 2), (3, 4, 5), (6, 7, 8), (9, 10, 11)]
    assert [g.node for g in groups] == [0, 0, 1, 1]
    assert all(g.cpu is not None and g.cpu.startswith(f"n{g.node}.") for g in groups)


@pytest.mark.parametrize("spec, size", [("dgx2", 16), ("dgx-a100", 8), ("dgx-h100", 8)])
def test_nvswitch_machines_are_one_group_without_cpu(spec, size):
    """§4.1: "in DGX-2 we will have one single NVLink group per node" because
    NVSwitch fully connects all GPUs; its CPUs hang on PCIe, so none belongs."""
    groups = nvlink_groups(load_topology(spec))
    assert len(groups) == 1 and groups[0].size == size and groups[0].cpu is None


def test_dgx_a100_cluster_has_one_group_per_node():
    groups = nvlink_groups(load_topology("dgx-a100*2"))
    assert [g.ranks for g in groups] == [tuple(range(8)), tuple(range(8, 16))]
    assert [g.node for g in groups] == [0, 1]


def test_dgx1_splits_into_its_two_fully_connected_quads():
    """DGX-1's hybrid cube-mesh: each GPU has NVLinks to the three others of its
    quad and one to the other quad, so the largest fully connected sets are the
    quads {0..3} and {4..7}; no CPU is on NVLink."""
    topo = load_topology("dgx1")
    groups = nvlink_groups(topo)
    assert [g.ranks for g in groups] == [(0, 1, 2, 3), (4, 5, 6, 7)]
    links = topo.gpu_link_counts()
    for g in groups:
        assert all(links[a][b] > 0 for a, b in itertools.combinations(g.ranks, 2))
        outsiders = set(range(8)) - set(g.ranks)
        assert not any(all(links[o][r] for r in g.ranks) for o in outsiders), "a larger clique exists"


@pytest.mark.parametrize("spec", ["summit", "summit*2", "dgx1", "ndv2*2", "dgx2", "dgx-a100*2", "frontier", "aurora"])
def test_groups_partition_the_gpus_into_nvlink_cliques(spec):
    """Every member reaches every other over NVLink-type links, at most through
    switches; every CPU belongs to one group at most."""
    topo = load_topology(spec)
    groups = nvlink_groups(topo)
    assert sorted(r for g in groups for r in g.ranks) == list(range(topo.num_ranks))
    routes = Routes(topo)
    kind = {c.name: c.kind for c in topo.components}
    for g in groups:
        for a, b in itertools.permutations(g.ranks, 2):
            hops = routes.hops(a, b)
            assert all(h.type in FABRIC_LINK_TYPES for h in hops), (spec, a, b)
            assert {kind[h.dst] for h in hops} <= {"gpu", "nvswitch", "switch"}, (spec, a, b)
    cpus = [g.cpu for g in groups if g.cpu]
    assert len(cpus) == len(set(cpus))


def test_switch_planes_join_a_group_and_pcie_does_not(tmp_path):
    """GPUs reaching each other through NVSwitches are one group; a CPU on PCIe
    is not a member; a GPU with no NVLink peer is a group of its own."""
    path = write_yaml(
        tmp_path,
        {
            "name": "mixed",
            "components": [
                *({"name": f"gpu{i}", "kind": "gpu"} for i in range(4)),
                {"name": "sw0", "kind": "nvswitch"},
                {"name": "sw1", "kind": "nvswitch"},
                {"name": "cpu0", "kind": "cpu"},
            ],
            "links": [
                *([f"gpu{i}", f"sw{s}", "nvlink"] for i in range(3) for s in range(2)),
                *([f"gpu{i}", "cpu0", "pcie"] for i in range(4)),
            ],
        },
    )
    groups = nvlink_groups(load_topology(path))
    assert [(g.ranks, g.cpu) for g in groups] == [((0, 1, 2), None), ((3,), None)]


# ---------------------------------------------------------------------------
# Where the NVGroup ring does not apply
# ---------------------------------------------------------------------------
def test_unequal_groups_are_refused(tmp_path):
    path = write_yaml(
        tmp_path,
        {
            "name": "lopsided",
            "components": [
                *({"name": f"gpu{i}", "kind": "gpu"} for i in range(5)),
                {"name": "cpu0", "kind": "cpu"},
                {"name": "cpu1", "kind": "cpu"},
            ],
            "links": [
                *([a, b, "nvlink"] for a, b in itertools.combinations(["gpu0", "gpu1", "gpu2", "cpu0"], 2)),
                *([a, b, "nvlink"] for a, b in itertools.combinations(["gpu3", "gpu4", "cpu1"], 2)),
                ["cpu0", "cpu1", "xbus"],
            ],
        },
    )
    topo = load_topology(path)
    with pytest.raises(NotApplicableError, match=r"unequal sizes \[2, 3\]"):
        nvgroup_ring(topo, make_collective("allreduce", 5, 5))


def test_machines_without_nvlink_are_refused(tmp_path):
    path = write_yaml(
        tmp_path,
        {
            "name": "pcie-only",
            "components": [*({"name": f"gpu{i}", "kind": "gpu"} for i in range(4)), {"name": "cpu0", "kind": "cpu"}],
            "links": [[f"gpu{i}", "cpu0", "pcie"] for i in range(4)],
        },
    )
    with pytest.raises(NotApplicableError, match="every NVLink group is one GPU"):
        nvgroup_ring(load_topology(path), make_collective("allgather", 4))


def test_leaders_without_a_route_are_refused():
    """ring:8 pairs GPUs into NVLink groups {0,1}, {2,3}, ... but leader 0 can
    reach leader 2 only through GPU 1, and routes never cross a GPU."""
    with pytest.raises(NotApplicableError, match="no route from group leader 0 to group leader 2"):
        nvgroup_ring(load_topology("ring:8"), make_collective("allreduce", 8, 8))


@pytest.mark.parametrize("name", ["broadcast", "alltoall"])
def test_other_collectives_are_refused(name):
    with pytest.raises(NotApplicableError, match="implements allreduce, reducescatter, allgather"):
        nvgroup_ring(load_topology("summit"), make_collective(name, 6))


# ---------------------------------------------------------------------------
# Algorithm 2 is a correct schedule
# ---------------------------------------------------------------------------
BUILTINS = ["summit", "summit*2", "summit*3", "dgx1", "ndv2*2", "dgx2", "dgx-a100*2", "fully-connected:5"]


@pytest.mark.parametrize("spec", BUILTINS)
@pytest.mark.parametrize("name", COLLECTIVES)
def test_verifier_accepts_it_on_builtin_machines(spec, name):
    topo = load_topology(spec)
    for factor in (1, 2, 3):
        algo = nvgroup_ring(topo, collective(name, topo.num_ranks, factor))
        assert check(algo, load_machine(topo)) == [], (spec, name, factor)


SOCKETS = [(1, 2), (1, 3), (2, 2), (3, 2), (2, 4), (4, 3), (5, 2), (7, 2)]


# 64 ranks once, without pipelining, to keep the suite fast
@pytest.mark.parametrize(
    "groups, size, pipeline", [(g, s, p) for g, s in SOCKETS for p in (False, True)] + [(8, 8, False)]
)
def test_verifier_accepts_it_on_socket_machines(tmp_path, groups, size, pipeline):
    """Rank counts 2, 3, 4, 6, 8, 12, 10, 14 and 64; one to eight groups."""
    topo = load_topology(grouped(tmp_path, groups, size))
    for name in COLLECTIVES:
        for factor in (1, 2, 3):
            algo = nvgroup_ring(topo, collective(name, topo.num_ranks, factor), pipeline=pipeline)
            assert check(algo, uniform(topo)) == [], (groups, size, name, factor)


def test_verifier_accepts_it_on_31_ranks_and_a_prime_group():
    topo = load_topology("fully-connected:31")
    for name in COLLECTIVES:
        assert check(nvgroup_ring(topo, collective(name, 31, 2)), load_machine(topo)) == []


def test_it_is_registered_with_the_paper_chunking_by_default():
    """Algorithm 2 cuts the buffer into N_nv blocks of NV_G portions: P chunks."""
    topo = load_topology("summit*2")
    algo = generate("nvgroup-ring", load_machine(topo), "allreduce")
    assert algo.chunks == 12 and check(algo, load_machine(topo)) == []
    options = REGISTRY["nvgroup-ring"].parse_options({"pipeline": "true"})
    assert options == {"pipeline": True}
    assert generate("nvgroup-ring", load_machine(topo), "allgather", **options).metadata["pipeline"] is True
    with pytest.raises(SimcollError, match="pipeline"):
        REGISTRY["nvgroup-ring"].parse_options({"pipeline": "maybe"})


def test_only_leaders_talk_across_groups():
    """§4.3: the CPU (leader) process drives all inter-group transfers."""
    topo = load_topology("summit*2")
    algo = nvgroup_ring(topo, make_collective("allreduce", 12, 12))
    group_of = {r: i for i, g in enumerate(nvlink_groups(topo)) for r in g.ranks}
    leaders = set(algo.metadata["leaders"])
    crossing = {(t.src, t.dst) for t in algo.transfers if group_of[t.src] != group_of[t.dst]}
    assert crossing == {(0, 3), (3, 6), (6, 9), (9, 0)}
    assert all(a in leaders and b in leaders for a, b in crossing)


def test_the_ring_reduces_n_nv_minus_1_times_on_the_network():
    """§4.3: "the number of steps is reduced from p to N_nv": each chunk crosses
    the network N_nv - 1 times reducing and N_nv - 1 times forwarding."""
    topo = load_topology("summit*2")
    algo = nvgroup_ring(topo, make_collective("allreduce", 12, 12))
    leaders = set(algo.metadata["leaders"])
    for chunk in range(12):
        across = [t for t in algo.transfers if t.chunk == chunk and t.src in leaders and t.dst in leaders]
        assert sorted(t.op for t in across) == ["copy"] * 3 + ["reduce"] * 3


# ---------------------------------------------------------------------------
# Cost: eqs. (7)-(10)
# ---------------------------------------------------------------------------
ALPHA_NV, ALPHA_NET, BW_NET = 0.5e-6, 2.0e-6, 10e9
T_R_LAUNCH, T_R_BW = 1e-6, 200e9


def uniform(topo, bw_nv: float = 2 * BW_NET, network: str = "xbus", alpha_nv: float = ALPHA_NV) -> Machine:
    return Machine(
        topo,
        model_from_dict(
            {
                "name": "uniform",
                "links": {
                    "nvlink": {"alpha_s": alpha_nv, "bandwidth_Bps": bw_nv, "source": "test"},
                    network: {"alpha_s": ALPHA_NET, "bandwidth_Bps": BW_NET, "source": "test"},
                    "pcie": {"alpha_s": 0.0, "bandwidth_Bps": 1e15, "source": "test"},
                },
                "compute": {"reduce_bandwidth_Bps": T_R_BW, "reduce_launch_s": T_R_LAUNCH, "source": "test"},
            }
        ),
    )


def paper_terms(machine: Machine, m: float, n_nv: int, nv_g: int):
    """NV-Group eqs. (7), (8), (9) with t_s and B of the slowest leader-to-leader
    route, B_NV of an NVLink pair and T_R from the model; plus α_NV and the
    portion size n = M / (N_nv·NV_G)."""
    groups = nvlink_groups(machine.topology)
    leaders = [g.leader for g in groups]
    hops = [machine.route(a, b) for a, b in zip(leaders, leaders[1:] + leaders[:1], strict=True)] if n_nv > 1 else []
    t_s = max((h.alpha_s for h in hops), default=0.0)
    b = min((h.bandwidth_Bps for h in hops), default=math.inf)
    pair = machine.route(groups[0].ranks[0], groups[0].ranks[1])
    b_nv, alpha_nv = pair.bandwidth_Bps, pair.alpha_s
    t_r = machine.model.reduce_time_s
    n = m / (n_nv * nv_g)
    eq7 = 2 * m / (n_nv * nv_g * b_nv) + t_r(n)
    eq8 = (n_nv - 1) * (t_s + m / (n_nv * b) + t_r(n))
    eq9 = (n_nv - 1) * (t_s + m / (n_nv * b))
    return eq7, eq8, eq9, alpha_nv, n / b_nv, n / b


def expected_times(machine: Machine, m: float, n_nv: int, nv_g: int) -> dict[str, float]:
    """The docstring's statement: eqs. (7)-(10) plus the set-up times of the
    NVLink load and store (eq. 7 has none) and the final pull of the last
    portion (eq. 10 leaves it out)."""
    eq7, eq8, eq9, a_nv, pull, on_wire = paper_terms(machine, m, n_nv, nv_g)
    if n_nv == 1:
        return {"allreduce": eq7 + 2 * a_nv, "reducescatter": a_nv + eq7 - pull, "allgather": a_nv + pull}
    leader_last = n_nv % 2 == 0  # the leader's own portion arrives last: nothing left to pull
    tail = max(0.0, a_nv + pull - on_wire) if leader_last else a_nv + pull
    return {
        "allreduce": eq7 + eq8 + eq9 + 3 * a_nv + pull,
        "reducescatter": eq7 + eq8 + 2 * a_nv + tail,
        "allgather": (a_nv + pull) + eq9 + (a_nv + pull),
    }


SIZES = [1 << 10, 1 << 20, 3 << 27]


@pytest.mark.parametrize("size", SIZES)
def test_one_summit_node_costs_eq_10(size):
    """On Summit's own model: N_nv = 2 groups of NV_G = 3, B = the X-Bus route
    (32 GB/s), B_NV = a 2-brick NVLink pair (50 GB/s)."""
    machine = load_machine("summit")
    expected = expected_times(machine, size, 2, 3)
    for name in COLLECTIVES:
        algo = nvgroup_ring(machine.topology, collective(name, 6, 1))
        assert critical_path_time_s(algo, machine, size) == pytest.approx(expected[name], rel=1e-9), name


@pytest.mark.parametrize("groups, size", [(1, 2), (1, 4), (2, 2), (2, 3), (3, 2), (3, 4), (4, 3), (5, 2), (6, 3)])
@pytest.mark.parametrize("bw_ratio, alpha_nv", [(2, ALPHA_NV), (4, ALPHA_NV), (2, 0.0)])
def test_socket_machines_cost_eqs_7_to_10(tmp_path, groups, size, bw_ratio, alpha_nv):
    """Exact with B_NV >= 2B (the stores into system memory keep ahead of the
    ring); with α_NV = 0 Allreduce is eq. 10 plus the final pull alone."""
    topo = load_topology(grouped(tmp_path, groups, size))
    machine = uniform(topo, bw_nv=bw_ratio * BW_NET, alpha_nv=alpha_nv)
    for m in SIZES:
        expected = expected_times(machine, m, groups, size)
        for name in COLLECTIVES:
            algo = nvgroup_ring(machine.topology, collective(name, groups * size, 1))
            assert critical_path_time_s(algo, machine, m) == pytest.approx(expected[name], rel=1e-9), (name, m)
        if alpha_nv == 0.0 and groups > 1:
            eq7, eq8, eq9, _, pull, _ = paper_terms(machine, m, groups, size)
            algo = nvgroup_ring(machine.topology, collective("allreduce", groups * size, 1))
            assert critical_path_time_s(algo, machine, m) == pytest.approx(eq7 + eq8 + eq9 + pull, rel=1e-9)


def test_a_cluster_of_one_group_nodes_costs_eqs_7_to_10(tmp_path):
    """Groups on different nodes, the ring over InfiniBand NICs."""
    node = write_yaml(
        tmp_path,
        {
            "name": "node",
            "components": [
                *({"name": f"gpu{i}", "kind": "gpu"} for i in range(3)),
                {"name": "cpu0", "kind": "cpu"},
                {"name": "nic0", "kind": "nic"},
            ],
            "links": [
                *([a, b, "nvlink"] for a, b in itertools.combinations(["gpu0", "gpu1", "gpu2", "cpu0"], 2)),
                ["nic0", "cpu0", "pcie"],
            ],
        },
    )
    topo = cluster(load_topology(node), 4)
    machine = uniform(topo, network="ib")
    assert [g.node for g in nvlink_groups(topo)] == [0, 1, 2, 3]
    for m in SIZES:
        expected = expected_times(machine, m, 4, 3)
        for name in COLLECTIVES:
            algo = nvgroup_ring(topo, collective(name, 12, 1))
            assert critical_path_time_s(algo, machine, m) == pytest.approx(expected[name], rel=1e-9), (name, m)


@pytest.mark.parametrize("spec", ["summit", "summit*2"])
def test_finer_chunks_and_pipelining_only_help(spec):
    """§4.4.1: more chunks per portion and forwarding them as soon as they are
    reduced "start filling the pipe earlier"; neither can slow the ring."""
    machine = load_machine(spec)
    p = machine.num_ranks
    for m in (1 << 16, 1 << 28):
        base = critical_path_time_s(nvgroup_ring(machine.topology, collective("allreduce", p, 1)), machine, m)
        for factor in (1, 2, 3):
            plain = nvgroup_ring(machine.topology, collective("allreduce", p, factor))
            piped = nvgroup_ring(machine.topology, collective("allreduce", p, factor), pipeline=True)
            t_plain, t_piped = (critical_path_time_s(a, machine, m) for a in (plain, piped))
            assert t_plain <= base * (1 + 1e-12) and t_piped <= t_plain * (1 + 1e-12)
            if factor > 1 and m == 1 << 28:
                assert t_piped < t_plain


@pytest.mark.parametrize("spec", ["summit", "summit*2", "summit*4"])
def test_it_beats_the_flat_ring_on_summit(spec):
    """§5.2: on Summit the NVGroup ring outperforms the flat ring Allreduce (fewer
    sequential network steps and reductions, all NVLinks used)."""
    machine = load_machine(spec)
    flat = generate("ring", machine, "allreduce")
    ours = generate("nvgroup-ring", machine, "allreduce")
    for m in (1 << 20, 1 << 28):
        assert critical_path_time_s(ours, machine, m) < critical_path_time_s(flat, machine, m)


# ---------------------------------------------------------------------------
# §4.4.2 CPU-driven Allreduce for small messages
# ---------------------------------------------------------------------------
CPU_MACHINES = ["summit", "summit*2", "summit*3", "dgx1", "dgx2", "dgx-a100*2", "fully-connected:3"]


@pytest.mark.parametrize("spec", CPU_MACHINES)
def test_cpu_path_is_a_correct_host_program(spec):
    topo = load_topology(spec)
    for factor in (1, 2, 3):
        for inplace in (False, True):
            coll = make_collective("allreduce", topo.num_ranks, factor, inplace=inplace)
            prog = nvgroup_cpu_allreduce(topo, coll)
            assert check(prog, load_machine(topo)) == [], (spec, factor, inplace)


@pytest.mark.parametrize("groups", [1, 2, 3, 4, 5, 6, 7])
def test_cpu_path_runs_recursive_doubling_between_leaders(tmp_path, groups):
    """§4.4.2 (2): CPU recursive doubling across groups; with N_nv not a power of
    two, the standard folding: 2(N - 2^k) folding messages, 2^k·k exchange
    messages and N - 2^k results sent back."""
    topo = load_topology(grouped(tmp_path, groups, 2))
    prog = nvgroup_cpu_allreduce(topo, make_collective("allreduce", 2 * groups, 2))
    assert check(prog, uniform(topo)) == []
    executors = [e for r in prog.ranks for e in r.executors]
    assert {e.kind for e in executors} == {"host"}
    leaders = {g.leader for g in nvlink_groups(topo)}
    assert {r.rank for r in prog.ranks if r.executors} == leaders  # GPUs launch nothing
    k = groups.bit_length() - 1
    sends = sum(1 for e in executors for i in e.instructions if i.op == "send")
    assert sends == (groups - (1 << k)) + (1 << k) * k + (groups - (1 << k))


def test_cpu_path_reads_every_gpu_of_its_group_once(tmp_path):
    """§4.4.2 (1): the CPU reduces the group's data in system memory."""
    topo = load_topology("summit*2")
    prog = nvgroup_cpu_allreduce(topo, make_collective("allreduce", 12))
    for group in nvlink_groups(topo):
        loads = [i for e in prog.ranks[group.leader].executors for i in e.instructions if i.op == "load_reduce"]
        assert len(loads) == 1
        read = sorted(group.leader if s.rank is None else s.rank for s in loads[0].sources)
        assert read == list(group.ranks)


def test_cpu_path_accepts_unequal_groups(tmp_path):
    path = write_yaml(
        tmp_path,
        {
            "name": "lopsided",
            "components": [*({"name": f"gpu{i}", "kind": "gpu"} for i in range(3)), {"name": "cpu0", "kind": "cpu"}],
            "links": [
                ["gpu0", "gpu1", "nvlink"],
                ["gpu0", "cpu0", "pcie"],
                ["gpu1", "cpu0", "pcie"],
                ["gpu2", "cpu0", "pcie"],
            ],
        },
    )
    topo = load_topology(path)
    assert check(nvgroup_cpu_allreduce(topo, make_collective("allreduce", 3, 2)), uniform(topo)) == []


def test_small_messages_take_the_cpu_path_below_16_kib_per_group():
    """§4.4.2: the CPU path when the data chunk of each NVGroup is "≤ 16KB"."""
    topo = load_topology("summit")  # N_nv = 2
    coll = make_collective("allreduce", 6, 6)
    assert CPU_PATH_MAX_BYTES == 16 * 1024
    assert isinstance(nvgroup_allreduce(topo, coll, 2 * CPU_PATH_MAX_BYTES), Program)
    assert isinstance(nvgroup_allreduce(topo, coll, 2 * CPU_PATH_MAX_BYTES + 1), Algorithm)
    assert isinstance(nvgroup_allreduce(topo, coll, 1 << 20, cpu_path_max_bytes=1 << 20), Program)
    assert isinstance(nvgroup_allreduce(topo, coll, 1024, cpu_path_max_bytes=0), Algorithm)


def test_cpu_path_is_for_allreduce_only():
    with pytest.raises(NotApplicableError, match="implements allreduce"):
        nvgroup_cpu_allreduce(load_topology("summit"), make_collective("allgather", 6))


def test_docstring_examples_hold():
    module = importlib.import_module("simcoll.algorithms.nvgroup")
    assert doctest.testmod(module).failed == 0

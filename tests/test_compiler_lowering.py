"""Specification of Algorithm lowering (TACCL §6.2): every classical generator
and SCCL-synthesized algorithms lower to Programs that pass the verifier
(postcondition, deadlock freedom, connection rules, routes), for step and
timed schedules, with instances."""

from __future__ import annotations

import pytest

from simcoll.algorithm import Algorithm, Transfer
from simcoll.algorithms import REGISTRY, applicable, generate
from simcoll.collectives import COLLECTIVES, make_collective
from simcoll.compiler import CompileError, Loc, algorithm_trace, check_fifo_bound, compile_trace, lower_algorithm
from simcoll.errors import AlgorithmError
from simcoll.machines import load_machine, load_topology
from simcoll.synthesis import synthesize
from simcoll.verify import check

TOPOLOGIES = ("ring:8", "fully-connected:8", "dgx1")


def algorithms(spec):
    topo = load_machine(spec)
    for coll in COLLECTIVES:
        for name, algo in applicable(topo, coll).items():
            if isinstance(algo, Algorithm):
                yield topo, coll, name, algo


@pytest.mark.parametrize("spec", TOPOLOGIES)
def test_every_registered_generator_lowers_to_a_verified_program(spec):
    lowered = set()
    for topo, coll, name, algo in algorithms(spec):
        program = lower_algorithm(algo, machine=topo)
        assert check(program, topo) == [], (coll, name)
        assert check_fifo_bound(program, 8) == [], (coll, name)
        for rp in program.ranks:
            for e in rp.executors:
                assert all(len(i.deps) <= 1 for i in e.instructions)
        lowered.add(name)
    # every generator applicable somewhere on this machine was lowered
    assert lowered and lowered <= set(REGISTRY)


def test_multi_node_generators_lower_on_a_cluster_and_every_generator_is_covered():
    spec = "dgx-a100*2"  # 2 nodes x 8 GPUs: the hierarchical generators apply here
    covered = set()
    for topo, coll, name, algo in algorithms(spec):
        assert check(lower_algorithm(algo, machine=topo), topo) == [], (coll, name)
        covered.add(name)
    for small in TOPOLOGIES:
        covered |= {name for _, _, name, _ in algorithms(small)}
    # in-switch reductions (NVLS, SHARP) have no Program form: lowering refuses them by name
    for hopper in ("dgx-h100", "dgx-h100*2"):
        for topo, _coll, name, algo in algorithms(hopper):
            if algo.switch_reductions:
                with pytest.raises(AlgorithmError, match="in-switch"):
                    lower_algorithm(algo, machine=topo)
                covered.add(name)
    assert covered == set(REGISTRY)


def test_ring_allreduce_lowers_to_the_fused_ring_instructions():
    topo = load_topology("ring:8")
    algo = applicable(load_machine(topo), "allreduce")["ring"]
    counts = lower_algorithm(algo, machine=load_machine(topo)).instruction_counts()
    p = 8  # each of the P chunks: send, P-2 rrs, rrcs, P-2 rcs, recv (as the real ring XML)
    assert (counts["send"], counts["rrs"], counts["rrcs"], counts["rcs"], counts["recv"]) == (
        p,
        p * (p - 2),
        p,
        p * (p - 2),
        p,
    )


@pytest.mark.parametrize("instances", [2, 3])
def test_instances_replicate_on_separate_channels(instances):
    topo = load_topology("dgx1")
    for name in ("ring", "recursive-doubling"):
        algo = applicable(load_machine(topo), "allgather")[name]
        base = lower_algorithm(algo, machine=load_machine(topo))
        program = lower_algorithm(algo, machine=load_machine(topo), instances=instances)
        assert check(program, load_machine(topo)) == []
        assert program.collective.chunk_factor == instances * algo.collective.chunk_factor
        assert program.num_channels == instances * base.num_channels
        assert sum(program.instruction_counts().values()) >= instances * (
            sum(base.instruction_counts().values()) - base.instruction_counts().get("nop", 0)
        )


@pytest.fixture(scope="module")
def synthesized():
    topo = load_machine("dgx1")
    out = []
    for coll, c, s, r in (("allgather", 2, 3, 3), ("allreduce", 8, 4, 4)):
        result = synthesize(topo, coll, c, s, r, time_limit_s=60)
        assert result.status == "sat"
        out.append(result.algorithm)
    return topo, out


def test_sccl_synthesized_algorithms_lower_to_verified_programs(synthesized):
    topo, algos = synthesized
    for algo in algos:
        for kw in ({}, {"instances": 2}, {"aggregate": True}, {"protocol": "LL"}):
            program = lower_algorithm(algo, machine=topo, **kw)
            assert check(program, topo) == [], (algo.name, kw)


def as_timed(algo: Algorithm) -> Algorithm:
    """The step schedule as a TACCL-style timed one: step s runs in [s, s+1)
    seconds; the transfers of a step over one link form a contiguity group."""
    groups: dict[tuple[int, int, int], int] = {}
    transfers = tuple(
        Transfer(
            t.chunk,
            t.src,
            t.dst,
            t.op,
            start_s=float(t.step),
            end_s=float(t.step) + 1.0,
            group=groups.setdefault((t.step, t.src, t.dst), len(groups)),
        )
        for t in algo.transfers
    )
    return algo.with_changes(transfers=transfers, rounds_per_step=(), bandwidth=())


def test_timed_schedules_lower_to_verified_programs(synthesized):
    topo, algos = synthesized
    for algo in algos + [applicable(topo, "allreduce")["ring"], applicable(topo, "alltoall")["direct"]]:
        timed = as_timed(algo)
        assert timed.schedule == "timed" and check(timed, topo) == []
        assert check(lower_algorithm(timed, machine=topo), topo) == []


def test_contiguity_groups_become_one_message():
    # Allgather on 2 ranks, 2 chunks each: rank 0's chunks 0 and 2 sit at input[0:2]
    # and go to output[0:2] of rank 1, one group; rank 1's go one by one
    coll = make_collective("allgather", 2, 2)
    transfers = (
        Transfer(0, 0, 1, start_s=0.0, end_s=1.0, group=0),
        Transfer(2, 0, 1, start_s=0.0, end_s=1.0, group=0),
        Transfer(1, 1, 0, start_s=0.0, end_s=1.0),
        Transfer(3, 1, 0, start_s=0.5, end_s=1.5),
    )
    algo = Algorithm("grouped", coll, transfers)
    assert check(algo) == []
    program = lower_algorithm(algo)
    assert check(program) == []
    sends = sorted(i.count for e in program.ranks[0].executors for i in e.instructions if i.op == "send")
    assert sends == [2]
    sends = sorted(i.count for e in program.ranks[1].executors for i in e.instructions if i.op == "send")
    assert sends == [1, 1]


def test_same_step_swap_ping_pongs_between_output_and_scratch():
    # recursive doubling exchanges reduce into slots the same step still sends: the
    # reduction stores into a scratch copy of the chunk instead (and back next time),
    # so every exchange is one send and one rrc, with no staging copy or local reduce
    # (nops, which only hold dependencies and move no data, aside)
    topo = load_topology("fully-connected:8")
    algo = applicable(load_machine(topo), "allreduce")["recursive-doubling"]
    p, steps = 8, 3
    for share in (True, False):
        program = lower_algorithm(algo, machine=load_machine(topo), share_peer_blocks=share)
        assert check(program, load_machine(topo)) == []
        assert all("stage" not in rp.buffers for rp in program.ranks)
        assert program.ranks[0].buffers.get("scratch", 0) > 0
        moves = {k: v for k, v in program.instruction_counts().items() if v and k != "nop"}
        assert moves == {"send": p * steps, "rrc": p * steps}


def test_bad_arguments():
    topo = load_topology("ring:4")
    algo = applicable(load_machine(topo), "allgather")["ring"]
    with pytest.raises(Exception, match="protocol"):
        lower_algorithm(algo, protocol="Fast")
    with pytest.raises(Exception, match="instances"):
        lower_algorithm(algo, instances=0)


@pytest.mark.parametrize("instances", [1, 2])
@pytest.mark.parametrize("coll, chunks, inplace", [("reducescatter", 1, False), ("allreduce", 4, True)])
def test_lowering_is_compile_trace_with_the_lowering_fusion_options(instances, coll, chunks, inplace):
    # one driver: lower_algorithm = algorithm_trace + compile_trace(live_out="output",
    # fan_out=False, prune=True); the output slots may also be given explicitly, in the
    # trace's own coordinates (each stands for its replicas; an in-place output is its input)
    topo = load_topology("ring:4")
    algo = generate("ring", load_machine(topo), make_collective(coll, 4, chunks, inplace=inplace))
    trace = algorithm_trace(algo, topology=topo, instances=instances)
    lowered = lower_algorithm(algo, machine=load_machine(topo), instances=instances)
    options = {"fan_out": False, "prune": True, "share_peer_blocks": False}
    assert compile_trace(trace, live_out="output", **options) == lowered
    outputs = [Loc(r, "output", i) for r in range(4) for i in range(len(algo.collective.output_layout[r]))]
    assert compile_trace(trace, live_out=outputs, **options) == lowered
    with pytest.raises(CompileError, match="live_out"):
        compile_trace(trace, live_out="outputs")


def test_without_live_out_every_slot_matters_and_partial_sums_are_stored():
    # a ring ReduceScatter's partial sums land in slots nothing overwrites: with the
    # outputs as the only live slots they are not stored (rrs), otherwise they are (rrcs)
    topo = load_topology("ring:4")
    trace = algorithm_trace(generate("ring", load_machine(topo), "reducescatter"), topology=topo)
    lean = compile_trace(trace, live_out="output", fan_out=False, prune=True).instruction_counts()
    stored = compile_trace(trace, fan_out=False, prune=True).instruction_counts()
    assert (lean.get("rrs", 0), lean.get("rrcs", 0)) == (8, 0)
    assert (stored.get("rrs", 0), stored.get("rrcs", 0)) == (0, 8)

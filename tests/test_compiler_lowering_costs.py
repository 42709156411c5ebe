"""Specification of lean Algorithm lowering (TACCL §6.2 with GC3 §4.2's fused
instructions): a lowered ring has exactly the instruction mix of MSCCL's ring
XML (GC3 Fig. 3 / ``allreduce_ring.xml``: per chunk a send, P-2 rrs, an rrcs,
P-2 rcs and a recv), reductions read the rank's contribution from ``input``
in place instead of copying it to ``output`` first, no instruction waits for
another's send, concurrent messages on one rank pair get their own thread
blocks, and with no executor costs Program mode then takes exactly the
Algorithm's analytic critical-path time (``simcoll.analytic``)."""

from __future__ import annotations

import pytest

from simcoll.algorithm import Algorithm
from simcoll.algorithms import applicable, generate
from simcoll.analytic import critical_path_time_s
from simcoll.collectives import COLLECTIVES, make_collective
from simcoll.compiler import lower_algorithm
from simcoll.cost_model import model_from_dict
from simcoll.machines import Machine, load_machine, load_topology
from simcoll.simulator import simulate
from simcoll.verify import check

FUSED = frozenset({"rcs", "rrs", "rrcs"})


def lowered_ring(p: int, coll: str, inplace: bool = False):
    topo = load_topology(f"ring:{p}")
    chunks = p if coll == "allreduce" else 1
    algo = generate("ring", load_machine(topo), make_collective(coll, p, chunks, inplace=inplace))
    program = lower_algorithm(algo, machine=load_machine(topo))
    assert check(program, load_machine(topo)) == []
    return program


def counts(program) -> dict[str, int]:
    return {op: n for op, n in program.instruction_counts().items() if n}


def instructions(program, op: str):
    return [i for rp in program.ranks for e in rp.executors for i in e.instructions if i.op == op]


@pytest.mark.parametrize("p", [3, 4, 6, 8])
def test_ring_allreduce_has_the_msccl_ring_mix_and_no_local_copy(p):
    # P chunks, each: a send, P-2 rrs, an rrcs (ReduceScatter), P-2 rcs, a recv (Allgather)
    expected = {"send": p, "rrs": p * (p - 2), "rrcs": p, "rcs": p * (p - 2), "recv": p}
    assert counts(lowered_ring(p, "allreduce")) == {k: v for k, v in expected.items() if v}
    assert counts(lowered_ring(p, "allreduce", inplace=True)) == {k: v for k, v in expected.items() if v}


@pytest.mark.parametrize("p", [3, 4, 8])
def test_ring_reducescatter_reduces_without_storing_partial_sums(p):
    # each chunk: a send of the first contribution, P-2 rrs that store nothing,
    # and an rrc into the owner's output
    expected = {"send": p, "rrs": p * (p - 2), "rrc": p}
    for inplace in (False, True):
        assert counts(lowered_ring(p, "reducescatter", inplace)) == {k: v for k, v in expected.items() if v}


@pytest.mark.parametrize("p", [3, 4, 8])
def test_ring_allgather_copies_only_the_own_chunk_and_only_out_of_place(p):
    expected = {"send": p, "rcs": p * (p - 2), "recv": p}
    assert counts(lowered_ring(p, "allgather", inplace=True)) == {k: v for k, v in expected.items() if v}
    program = lowered_ring(p, "allgather")
    assert counts(program) == {**{k: v for k, v in expected.items() if v}, "copy": p}
    for rp in program.ranks:
        # the one copy per rank (input -> own output slot) runs on a thread block of its own
        copiers = [e for e in rp.executors if any(i.op == "copy" for i in e.instructions)]
        assert len(copiers) == 1 and len(copiers[0].instructions) == 1
        assert copiers[0].send_peer is None and copiers[0].recv_peer is None


def test_out_of_place_reductions_read_the_contribution_from_input_and_store_into_output():
    """MSCCL's rrc/rrcs read the local operand from ``input`` and store into
    ``output``; sends of a rank's own contribution read ``input``."""
    program = lowered_ring(8, "allreduce")
    for op in ("rrs", "rrcs"):
        assert {i.src.buffer for i in instructions(program, op)} == {"input"}
    assert {i.dst.buffer for i in instructions(program, "rrcs")} == {"output"}
    assert {i.src.buffer for i in instructions(program, "send")} == {"input"}
    reduce_program = lowered_ring(8, "reducescatter")
    assert {(i.src.buffer, i.dst.buffer) for i in instructions(reduce_program, "rrc")} == {("input", "output")}


def test_every_registered_out_of_place_reduction_needs_no_local_copy():
    # Reduce, ReduceScatter and Allreduce: every generator on DGX-1 and a ring
    for spec in ("dgx1", "ring:8"):
        topo = load_topology(spec)
        for coll in ("reduce", "reducescatter", "allreduce"):
            for name, algo in applicable(load_machine(topo), coll).items():
                if not isinstance(algo, Algorithm) or name == "recursive-doubling":
                    continue  # recursive doubling swaps in place: staged through scratch
                assert "copy" not in counts(lower_algorithm(algo, machine=load_machine(topo))), (spec, coll, name)


def test_a_reduced_result_several_ranks_need_is_stored_then_sent_separately():
    """Direct Allreduce: each rank's final rrc is followed by P-1 plain sends
    of the result, none of which waits for another's send."""
    p = 8
    topo = load_topology(f"fully-connected:{p}")
    program = lower_algorithm(generate("direct", load_machine(topo), "allreduce"), machine=load_machine(topo))
    assert check(program, load_machine(topo)) == []
    assert counts(program) == {"send": 2 * p * (p - 1), "rrc": p * (p - 1), "recv": p * (p - 1)}
    for rp in program.ranks:
        executors = {e.id: e for e in rp.executors}
        for e in rp.executors:
            for ins in e.instructions:
                assert all(executors[d].instructions[s].op not in FUSED for d, s in ins.deps)


@pytest.mark.parametrize("coll", ["allgather", "reducescatter", "allreduce"])
def test_multi_ring_gives_concurrent_messages_of_one_link_pair_their_own_thread_blocks(coll):
    """NCCL runs one channel per ring (SCCL §2.2's six DGX-1 rings, two on each
    doubled NVLink pair): every GPU then drives each of its 6 NVLinks with one
    sending thread block."""
    topo = load_topology("dgx1")
    program = lower_algorithm(generate("multi-ring", load_machine(topo), coll), machine=load_machine(topo))
    assert check(program, load_machine(topo)) == []
    for rp in program.ranks:
        assert len([e for e in rp.executors if e.send_peer is not None]) == 6


def no_executor_machine(spec: str) -> Machine:
    """The full dgx1 model without its executor section: no thread-block cap,
    no kernel launch, no tiling, no copy cost."""
    model = load_machine("dgx1").model
    return Machine(load_topology(spec), model_from_dict({k: v for k, v in model.raw.items() if k != "executor"}))


EXACT = {
    "dgx1": [
        (coll, name)
        for coll in ("allgather", "reducescatter", "allreduce")
        for name in ("ring", "bidirectional-ring", "multi-ring")
    ]
    + [
        ("allgather", "direct"),
        ("broadcast", "multi-ring"),
        ("broadcast", "binomial-tree"),
        ("reduce", "multi-ring"),
        ("reduce", "binomial-tree"),
        ("allreduce", "binomial-tree"),
        ("allreduce", "recursive-doubling"),
        ("alltonext", "direct"),
    ],
    "fully-connected:8": [(coll, "multi-ring") for coll in ("allgather", "reducescatter", "allreduce", "broadcast")],
}


@pytest.mark.parametrize("spec", sorted(EXACT))
def test_lowered_programs_take_the_analytic_critical_path_time_without_executor_costs(spec):
    machine = no_executor_machine(spec)
    for coll, name in EXACT[spec]:
        algo = generate(name, machine, coll)
        program = lower_algorithm(algo, machine=machine)
        for size in (64 * 1024, 16 << 20):
            program_s = simulate(program, machine, size, contention=False).time_s
            assert program_s == pytest.approx(critical_path_time_s(algo, machine, size), rel=1e-9), (coll, name, size)


@pytest.mark.parametrize("name, rings", [("ring", 1), ("multi-ring", 6)])
@pytest.mark.parametrize("coll", ["allgather", "reducescatter", "allreduce"])
def test_with_the_full_dgx1_model_lowered_rings_run_at_the_thread_block_rate(name, rings, coll):
    """NV-Group eqs. (1)-(3) with one thread block's copy rate B per ring
    (the model's cap on a block-driven transfer) and the reduction rate R:
    Allgather (P-1)/P·n/(kB), ReduceScatter that plus T_R((P-1)/P·n/k),
    Allreduce twice the transfers plus the same reductions, for k rings. At
    1 GiB α, launch and pipeline fill add under 4%; any local copy of the
    buffer (n/B) or serialised ring would add far more."""
    machine = load_machine("dgx1")
    p, size = machine.num_ranks, float(1 << 30)
    block_Bps = machine.model.executor.thread_block_bandwidth_Bps
    moved = (p - 1) / p * size / rings
    formula_s = (2 if coll == "allreduce" else 1) * moved / block_Bps
    if coll != "allgather":
        formula_s += machine.model.reduce_time_s(moved)
    program = lower_algorithm(generate(name, machine, coll), machine=machine)
    program_s = simulate(program, machine, size).time_s
    assert formula_s <= program_s <= 1.04 * formula_s


def test_a_broadcast_roots_output_copies_run_on_thread_blocks_of_their_own():
    # the root copies its P chunks input -> output: one chunk per copying thread block
    topo = load_topology("ring:8")
    program = lower_algorithm(generate("ring", load_machine(topo), "broadcast"), machine=load_machine(topo))
    assert check(program, load_machine(topo)) == []
    root = program.ranks[0]
    copiers = [e for e in root.executors if any(i.op == "copy" for i in e.instructions)]
    assert len(copiers) == len(instructions(program, "copy")) == 8
    assert all(len(e.instructions) == 1 and e.send_peer is None and e.recv_peer is None for e in copiers)
    capped = lower_algorithm(
        generate("ring", load_machine(topo), "broadcast"), machine=load_machine(topo), copy_threadblocks=2
    )
    assert check(capped, load_machine(topo)) == []
    assert len([e for e in capped.ranks[0].executors if e.send_peer is None and e.recv_peer is None]) == 2


def test_max_channels_bounds_the_lanes_and_one_channel_still_verifies():
    topo = load_topology("dgx1")
    algo = generate("multi-ring", load_machine(topo), "allreduce")
    one = lower_algorithm(algo, machine=load_machine(topo), max_channels=1)
    assert check(one, load_machine(topo)) == [] and one.num_channels == 1
    assert lower_algorithm(algo, machine=load_machine(topo)).num_channels == 2
    with pytest.raises(Exception, match="max_channels"):
        lower_algorithm(algo, max_channels=0)


def test_lanes_compose_with_instances_for_every_generator():
    topo = load_topology("dgx1")
    for coll in COLLECTIVES:
        for name, algo in applicable(load_machine(topo), coll).items():
            if isinstance(algo, Algorithm):
                assert (
                    check(lower_algorithm(algo, machine=load_machine(topo), instances=2), load_machine(topo)) == []
                ), (coll, name)


@pytest.mark.parametrize(
    "spec, name, chunks_per_block",
    [
        ("fully-connected:8", "binomial-tree", 1),
        ("dgx1", "binomial-tree", 1),
        ("fully-connected:8", "double-binary-tree", 8),
    ],
)
def test_lowered_tree_allreduce_pipelines_tiles_at_one_stage_per_tile(spec, name, chunks_per_block):
    """GC3 §6.2: every thread block runs its list once per tile, so a chain of
    blocks pipelines tiles and each extra tile adds the slowest stage, here one
    tile's α + tile/B (thread-block rate B) + T_R(tile) per chunk a block
    handles (the double binary tree gives each of its blocks 8 of its 16
    chunks). When a tree's leaf sends up and receives the result back on one
    thread block (``share_peer_blocks=True``, MSCCL's ``send = recv``), its
    send of tile t+1 waits for tile t to come back from the root: every tile
    makes the whole round trip, which made lowered trees ~1.85x slower than
    Algorithm mode at 1 GB. Lowering gives the two their own blocks."""
    machine = load_machine(spec, "dgx1")
    algo = generate(name, machine, "allreduce")
    ex, route = machine.model.executor, machine.route(0, 1)
    tile = ex.slot_bytes
    stage_s = route.alpha_s + tile / min(ex.thread_block_bandwidth_Bps, route.bandwidth_Bps)
    stage_s += machine.model.reduce_time_s(tile)
    chunks = algo.collective.num_chunks

    def per_tile_s(program):
        t16, t32 = (simulate(program, machine, tiles * tile * chunks).time_s for tiles in (16, 32))
        return (t32 - t16) / 16

    lowered = lower_algorithm(algo, machine=machine)
    assert per_tile_s(lowered) == pytest.approx(chunks_per_block * stage_s, rel=1e-6)
    shared = lower_algorithm(algo, machine=machine, share_peer_blocks=True)
    one_tile_s = simulate(shared, machine, tile * chunks).time_s
    assert per_tile_s(shared) >= 0.9 * one_tile_s  # a round trip per tile

"""Issue 15: the array verifier (simcoll.verify.algorithm_is_correct) and the
columnar transfer tables agree with the general symbolic verifier.

Claim: on every registered generator's step schedule for small machines, and
on broken variants of them (a transfer dropped, moved a step, duplicated,
turned into a reduce, or re-pointed), ``algorithm_is_correct`` is True exactly
when the symbolic verifier reports no problem; so too for the in-switch
generators (NVLS, NVLS-Tree, CollNet) and broken variants of their switch
reductions (one dropped, moved, given a source or destination more or less,
another chunk or another switch). A schedule held as a
TransferTable checks, simulates and costs exactly as the same transfers held
as Transfer objects.
"""

from __future__ import annotations

import dataclasses
import functools
import random

import pytest

from simcoll import load_machine
from simcoll.algorithm import Algorithm, OrbitTable, SwitchReductionTable, Transfer, TransferTable
from simcoll.algorithms import REGISTRY, applicable
from simcoll.errors import AlgorithmError
from simcoll.verify import algorithm_is_correct, check
from simcoll.verify.symbolic import _check_algorithm_symbolic

MACHINES = ("ring:4", "dgx1", "dgx-a100*2")
COLLECTIVES = ("allreduce", "allgather", "reducescatter", "broadcast", "reduce", "alltoall")


def _step_algorithms(machine: str):
    m = load_machine(machine)
    for collective in COLLECTIVES:
        for name, a in applicable(m, collective).items():
            if isinstance(a, Algorithm) and a.schedule == "steps" and not a.switch_reductions:
                yield f"{machine}/{collective}/{name}", m, a


SWITCHED = ("dgx-h100", "dgx-h100*2")


def _switched_algorithms(machine: str):
    m = load_machine(machine)
    for collective in ("allreduce", "allgather", "reducescatter"):
        for name, a in applicable(m, collective).items():
            if isinstance(a, Algorithm) and a.switch_reductions:
                yield f"{machine}/{collective}/{name}", m, a


def _variants(a: Algorithm, rng: random.Random):
    """Broken (or harmless) edits of a schedule's transfers."""
    ts = list(a.transfers)
    if not ts:
        return
    p, g = a.num_ranks, a.collective.num_chunks
    for _ in range(3):
        i = rng.randrange(len(ts))
        t = ts[i]
        yield "drop", ts[:i] + ts[i + 1 :]
        yield "duplicate", [*ts, t]
        yield (
            "earlier",
            [*ts[:i], Transfer(t.chunk, t.src, t.dst, t.op, max(0, t.step - 1), group=t.group), *ts[i + 1 :]],
        )
        yield (
            "op",
            [*ts[:i], Transfer(t.chunk, t.src, t.dst, "reduce" if t.op == "copy" else "copy", t.step), *ts[i + 1 :]],
        )
        dst = (t.dst + 1) % p
        if dst != t.src:
            yield "redirect", [*ts[:i], Transfer(t.chunk, t.src, dst, t.op, t.step), *ts[i + 1 :]]
        yield "chunk", [*ts[:i], Transfer((t.chunk + 1) % g, t.src, t.dst, t.op, t.step), *ts[i + 1 :]]


def _replaced(rs: list, i: int, **changes) -> list:
    return [*rs[:i], dataclasses.replace(rs[i], **changes), *rs[i + 1 :]]


def _reduction_variants(a: Algorithm, rng: random.Random):
    """Broken (or harmless) edits of a schedule's switch reductions."""
    rs = list(a.switch_reductions)
    p, g = a.num_ranks, a.collective.num_chunks
    switches = sorted({r.switch for r in rs})
    for _ in range(4):
        i = rng.randrange(len(rs))
        r = rs[i]
        edited = functools.partial(_replaced, rs, i)

        yield "drop", rs[:i] + rs[i + 1 :]
        yield "duplicate", [*rs, r]
        yield "earlier", edited(step=max(0, r.step - 1))
        yield "later", edited(step=min(r.step + 1, len(a.rounds_per_step) - 1))
        yield "chunk", edited(chunk=(r.chunk + 1) % g)
        if len(r.sources) > 1:
            yield "fewer sources", edited(sources=r.sources[1:])
        if len(r.destinations) > 1:
            yield "fewer destinations", edited(destinations=r.destinations[1:])
        outside = [x for x in range(p) if x not in r.sources]
        if outside:
            yield "another source", edited(sources=(*r.sources, rng.choice(outside)))
        outside = [x for x in range(p) if x not in r.destinations]
        if outside:
            yield "another destination", edited(destinations=(*r.destinations, rng.choice(outside)))
        if len(switches) > 1:
            yield "another switch", edited(switch=rng.choice([w for w in switches if w != r.switch]))


@pytest.mark.parametrize("machine", SWITCHED)
def test_array_verifier_agrees_with_symbolic_on_switch_reductions_and_broken_variants(machine):
    rng = random.Random(15)
    seen, broken = 0, set()
    for label, m, a in _switched_algorithms(machine):
        assert _check_algorithm_symbolic(a, m.topology) == [], label
        assert algorithm_is_correct(a, m.topology), label
        as_objects = a.with_changes(switch_reductions=tuple(a.switch_reductions))
        assert algorithm_is_correct(as_objects, m.topology), label
        for kind, rs in _reduction_variants(a, rng):
            for reductions in (tuple(rs), SwitchReductionTable.from_reductions(rs)):
                b = a.with_changes(switch_reductions=reductions)
                for topology in (m.topology, None):
                    expected = _check_algorithm_symbolic(b, topology) == []
                    assert algorithm_is_correct(b, topology) == expected, f"{label} {kind} topology={topology}"
                    if not expected:
                        broken.add(kind)
            seen += 1
    assert seen > 0
    assert {"drop", "duplicate", "chunk", "another source", "fewer sources"} <= broken, broken


@pytest.mark.parametrize("machine", MACHINES)
def test_array_verifier_agrees_with_symbolic_on_generators_and_broken_variants(machine):
    rng = random.Random(15)
    seen = broken = 0
    for label, m, a in _step_algorithms(machine):
        assert _check_algorithm_symbolic(a, m.topology) == [], label
        assert algorithm_is_correct(a, m.topology), label
        for kind, ts in _variants(a, rng):
            try:
                b = a.with_changes(transfers=tuple(ts))
            except AlgorithmError:
                continue  # a step past rounds_per_step: rejected before any verifier
            for topology in (m.topology, None):
                expected = _check_algorithm_symbolic(b, topology) == []
                assert algorithm_is_correct(b, topology) == expected, f"{label} {kind} topology={topology}"
                broken += not expected
            seen += 1
    assert seen > 0 and broken > 0


def test_check_describes_a_broken_table_schedule_as_the_symbolic_path_does():
    m = load_machine("torus2d:2x3")  # (on ring:6 the ring is an orbit of the cyclic shift)
    a = REGISTRY["ring"].function(m.topology, _coll("allreduce", 6, 6))
    assert isinstance(a.transfers, TransferTable)
    ts = list(a.transfers)
    broken = a.with_changes(transfers=TransferTable.from_transfers(ts[:5] + ts[6:]))
    problems = check(broken, m)
    assert problems and problems == _check_algorithm_symbolic(
        broken.with_changes(transfers=tuple(broken.transfers)), m.topology
    )


def _coll(name, p, c):
    from simcoll import make_collective

    return make_collective(name, p, c)


def test_table_and_tuple_forms_are_equal_and_simulate_identically():
    from simcoll.analytic import critical_path_time_s
    from simcoll.simulator import simulate

    m = load_machine("dgx-a100*2")
    for name in ("ring", "multi-ring", "nccl-ring", "bidirectional-ring"):
        a = applicable(m, "allreduce")[name]
        assert isinstance(a.transfers, (TransferTable, OrbitTable)), name
        b = a.with_changes(transfers=tuple(a.transfers))
        assert a == b and b == a
        assert a.to_dict() == b.to_dict()
        for size in (1 << 20, 1 << 30):
            assert simulate(a, m, size).time_s == simulate(b, m, size).time_s
            assert critical_path_time_s(a, m, size) == critical_path_time_s(b, m, size)


def test_table_rejects_bad_rows_like_transfer_objects():
    coll = _coll("allgather", 4, 1)
    table = TransferTable(chunk=[0, 1], src=[0, 1], dst=[1, 1], reduce=[False, False], step=[0, 0])
    with pytest.raises(AlgorithmError, match="transfer 1 .*same rank"):
        Algorithm("bad", coll, table)
    table = TransferTable(chunk=[0, 9], src=[0, 1], dst=[1, 2], reduce=[False, False], step=[0, 0])
    with pytest.raises(AlgorithmError, match="transfer 1 .*chunk 9 out of range"):
        Algorithm("bad", coll, table)
    with pytest.raises(AlgorithmError, match="either steps or start times"):
        TransferTable(chunk=[0], src=[0], dst=[1], reduce=[False])


@pytest.mark.parametrize("name", ["multi-ring", "double-binary-tree", "hiccl"])
def test_bandwidth_loads_counted_in_blocks_match_one_pass(monkeypatch, name):
    """The per-step sends over each bandwidth constraint are counted in
    blocks of whole steps (bounded memory for millions of sends): tiny
    blocks give the same counts, rounds and verdict as a single pass."""
    import importlib

    from simcoll.algorithms.common import minimal_rounds
    from simcoll.routes import Routes, bandwidth_relation

    relation_module = importlib.import_module("simcoll.algorithm.relation")
    m = load_machine("dgx-a100*2")
    a = applicable(m, "allreduce", names=[name])[name]
    index = relation_module.RelationIndex.of(bandwidth_relation(m.topology, Routes(m.topology)), m.num_ranks)
    pairs = a.table.src * m.num_ranks + a.table.dst
    monkeypatch.setattr(relation_module, "_LOAD_ROWS", 1 << 40)
    whole = index.step_loads(a.table.step, pairs)
    rounds = minimal_rounds(a.table, m.topology)
    monkeypatch.setattr(relation_module, "_LOAD_ROWS", 7)
    blocked = index.step_loads(a.table.step, pairs)
    for x, y in zip(whole, blocked, strict=True):
        assert x.tolist() == y.tolist()
    assert minimal_rounds(a.table, m.topology) == rounds == a.rounds_per_step
    assert algorithm_is_correct(a, m.topology)  # its bandwidth check counts in blocks too


@pytest.mark.parametrize(("dense_cells_per_row", "whole_schedule_cells"), [(0, 0), (2, 0), (1 << 30, 0), (0, 1 << 40)])
def test_bandwidth_loads_are_the_sends_per_step_and_constraint(monkeypatch, dense_cells_per_row, whole_schedule_cells):
    """Counting every (step, constraint) cell of the schedule send by send,
    or of a block of (step, pair) keys, or only the cells a block's keys
    meet, gives each step's sends over each constraint: the counts of a
    plain loop over the sends and the constraints their pairs fall in."""
    import importlib
    from collections import Counter

    from simcoll.routes import Routes, bandwidth_relation

    relation_module = importlib.import_module("simcoll.algorithm.relation")
    monkeypatch.setattr(relation_module, "_DENSE_CELLS_PER_ROW", dense_cells_per_row)
    monkeypatch.setattr(relation_module, "_DENSE_LOAD_CELLS", whole_schedule_cells)
    monkeypatch.setattr(relation_module, "_DENSE_CELLS_PER_SEND", 1 << 30)
    monkeypatch.setattr(relation_module, "_LOAD_ROWS", 64)  # several blocks
    m = load_machine("dgx-a100*2")
    a = applicable(m, "allreduce", names=["double-binary-tree"])["double-binary-tree"]
    relation = bandwidth_relation(m.topology, Routes(m.topology))
    index = relation_module.RelationIndex.of(relation, m.num_ranks)
    step, cons, counts = index.step_loads(a.table.step, a.table.src * m.num_ranks + a.table.dst)
    expected = Counter()
    for s, src, dst in zip(a.table.step.tolist(), a.table.src.tolist(), a.table.dst.tolist(), strict=True):
        for i, constraint in enumerate(relation):
            if (src, dst) in constraint.links:
                expected[(s, i)] += 1
    assert len(expected) > a.steps  # several constraints a step
    assert list(zip(step.tolist(), cons.tolist(), strict=True)) == sorted(expected)
    assert counts.tolist() == [expected[key] for key in sorted(expected)]


@pytest.mark.parametrize("spec", ["torus2d:8x8", "ring:64", "dgx-a100*2"])
def test_a_relation_of_few_pairs_is_indexed_by_them_and_counts_as_the_full_index(monkeypatch, spec):
    """A bandwidth relation naming few of the P^2 rank pairs (a torus's or a
    ring's links) is indexed by its own pairs, not a row per pair key (134 MB
    on ring:4096): the loads per step and constraint, the pairs covered and
    the ring search's table are the full index's, pair for pair, including
    pairs it does not name."""
    import importlib

    import numpy as np

    from simcoll.routes import Routes, bandwidth_relation

    relation_module = importlib.import_module("simcoll.algorithm.relation")
    m = load_machine(spec)
    p = m.num_ranks
    relation = bandwidth_relation(m.topology, Routes(m.topology))
    compact = relation_module.RelationIndex(relation, p)
    monkeypatch.setattr(relation_module, "_COMPACT_BELOW", p * p + 1)  # (never compact)
    full = relation_module.RelationIndex(relation, p)
    # (on the cluster every rank's egress names every pair leaving its node: not few)
    assert full.pair_keys is None and (compact.pair_keys is not None) == (spec != "dgx-a100*2")
    a = applicable(m, "allreduce", names=["ring"])["ring"]
    table = a.orbit.expand() if a.orbit is not None else a.table
    pairs = table.src * p + table.dst
    for x, y in zip(compact.step_loads(table.step, pairs), full.step_loads(table.step, pairs), strict=True):
        assert x.tolist() == y.tolist()
    for by_pair in (True, False):
        assert [x.tolist() for x in compact._needs(table.step, pairs, a.steps, by_pair)] == [
            x.tolist() for x in full._needs(table.step, pairs, a.steps, by_pair)
        ]
    every = np.arange(p * p, dtype=np.int64)
    assert compact.covered(every).tolist() == full.covered(every).tolist()
    assert np.array_equal(compact.every_pair_table(), full.by_pair)


def test_a_slot_written_by_a_transfer_and_a_switch_reduction_in_one_step_is_refused_by_both_verifiers():
    m = load_machine("dgx-h100")
    a = REGISTRY["nvls"].function(m.topology, _coll("allreduce", 8, 72))
    r = a.switch_reductions[0]
    d = r.destinations[0]
    x = next(rank for rank in range(8) if rank != d)
    b = a.with_changes(transfers=(Transfer(r.chunk, x, d, "copy", r.step),))
    problems = _check_algorithm_symbolic(b, m.topology)
    assert any(f"rank {d} receives chunk {r.chunk} twice" in p for p in problems), problems
    assert not algorithm_is_correct(b, m.topology)
    assert check(b, m) == problems

"""The general verifier of Algorithms: a symbolic replay with a Python value
per (rank, chunk) slot, as SCCL §3.3 defines a run (package docstring),
in-switch reductions included, and SCCL's bandwidth relation B checked step
by step. Slower than the array verifier (:mod:`simcoll.verify.arrays`), it
runs when that one finds a problem (or does not apply), to say what is wrong."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

import numpy as np

from ..algorithm import Algorithm, BandwidthConstraint, RelationIndex, SwitchReduction, Transfer
from ..routes import bandwidth_relation, routes_of
from ..topology import Topology
from .deadline import _on_time
from .switches import _check_switch_reductions
from .values import MAX_PROBLEMS, Value, _check_post, _combine, _initial_value


def _check_algorithm_symbolic(algorithm: Algorithm, topology: Topology | None = None) -> list[str]:
    """The general verifier: symbolic execution with a Python value per slot."""
    problems: list[str] = []
    coll = algorithm.collective
    if not coll.combining:
        for t in algorithm.transfers:
            if t.op == "reduce":
                problems.append(f"{t.describe()}: a {coll.name} combines nothing")
                break
    routes = routes_of(topology) if topology is not None else None
    if routes is not None:
        for t in algorithm.transfers:
            if not routes.connected(t.src, t.dst):
                problems.append(f"{t.describe()}: {topology.name} has no route from GPU {t.src} to GPU {t.dst}")
    n = len(algorithm.transfers)
    problems += _check_switch_reductions(algorithm.switch_reductions, coll, topology)
    state: dict[tuple[int, int], Value] = {(r, c): _initial_value(c, r) for c, r in coll.pre}
    captured: dict[int, Value | None] = {}
    for kind, label, batch in _events(algorithm):
        _on_time("replaying", label)
        switched = [i - n for i in batch if i >= n]
        batch = [i for i in batch if i < n]
        if kind == "read":
            for k in switched:
                captured[n + k] = _switch_read(algorithm.switch_reductions[k], state, problems)
            for i in batch:
                t = algorithm.transfers[i]
                captured[i] = state.get((t.src, t.chunk))
                if captured[i] is None:
                    later = _first_arrival(algorithm, t)
                    when = f"; it only arrives at {later}" if later else "; it never arrives there"
                    problems.append(f"{t.describe()}: rank {t.src} does not hold chunk {t.chunk} yet{when}")
        else:
            written = {(algorithm.transfers[i].dst, algorithm.transfers[i].chunk) for i in batch}
            _apply_updates([(algorithm.transfers[i], captured[i]) for i in batch], state, label, problems)
            for k in switched:
                r = algorithm.switch_reductions[k]
                for d in r.destinations:
                    if (d, r.chunk) in written:
                        problems.append(f"{r.describe()}: rank {d} receives chunk {r.chunk} twice at {label}")
                    written.add((d, r.chunk))
                    if captured[n + k] is not None:
                        state[(d, r.chunk)] = captured[n + k]
        if len(problems) >= MAX_PROBLEMS:
            return problems
    if algorithm.schedule == "steps":
        b = algorithm.bandwidth or (bandwidth_relation(topology, routes) if topology is not None else ())
        problems += _check_bandwidth(algorithm, b)
    _check_post(coll, lambda r, c, _i: state.get((r, c)), problems)
    return problems


def _switch_read(r: SwitchReduction, state, problems: list[str]) -> Value | None:
    """The value switch reduction ``r`` delivers: its sources' values combined."""
    value = None
    for s in r.sources:
        got = state.get((s, r.chunk))
        if got is None:
            problems.append(f"{r.describe()}: rank {s} does not hold chunk {r.chunk} yet")
            return None
        value = got if value is None else _combine(value, got, r.describe(), problems)
    return value


def _events(algorithm: Algorithm) -> Iterable[tuple[str, str, list[int]]]:
    """("read" | "write", label, indices) in execution order: index ``i`` is
    transfer ``i``, and ``len(transfers) + k`` switch reduction ``k``. A step
    reads the state at its start and writes at its end; a timed transfer reads
    at ``start_s`` and writes at ``end_s``, arrivals preceding departures at
    equal times."""
    n = len(algorithm.transfers)
    if algorithm.schedule == "steps":
        by_step: dict[int, list[int]] = defaultdict(list)
        for k, r in enumerate(algorithm.switch_reductions):
            by_step[r.step].append(n + k)
        for i, t in enumerate(algorithm.transfers):
            by_step[t.step].append(i)
        for step in sorted(by_step):
            yield "read", f"step {step}", by_step[step]
            yield "write", f"step {step}", by_step[step]
        return
    moments: dict[tuple[float, int], list[int]] = defaultdict(list)
    for i, t in enumerate((*algorithm.transfers, *algorithm.switch_reductions)):
        moments[(t.end_s, 0)].append(i)
        moments[(t.start_s, 1)].append(i)
    for (moment, kind), batch in sorted(moments.items()):
        yield ("write" if kind == 0 else "read"), f"t={moment:.6g}s", batch


def _apply_updates(reads, state, label: str, problems: list[str]) -> None:
    copies: dict[tuple[int, int], list[tuple[Transfer, Value]]] = defaultdict(list)
    reduces: dict[tuple[int, int], list[tuple[Transfer, Value]]] = defaultdict(list)
    for t, value in reads:
        if value is None:
            continue
        (copies if t.op == "copy" else reduces)[(t.dst, t.chunk)].append((t, value))
    for slot, items in copies.items():
        values = {v for _, v in items}
        if len(values) > 1:
            problems.append(f"rank {slot[0]} receives different versions of chunk {slot[1]} at {label}")
        if slot in reduces:
            problems.append(f"rank {slot[0]} both copies and reduces into chunk {slot[1]} at {label}")
        state[slot] = items[0][1]
    for slot, items in reduces.items():
        base = state.get(slot)
        if base is None:
            problems.append(
                f"{items[0][0].describe()}: rank {slot[0]} holds no contribution of chunk {slot[1]} to reduce into"
            )
            continue
        for t, value in items:
            base = _combine(base, value, t.describe(), problems)
        state[slot] = base


def _first_arrival(algorithm: Algorithm, t: Transfer) -> str | None:
    for u in algorithm.transfers:
        if u.dst == t.src and u.chunk == t.chunk:
            return f"step {u.step}" if u.step is not None else f"t={u.end_s:.6g}s"
    return None


def _check_bandwidth(algorithm: Algorithm, relation: Iterable[BandwidthConstraint]) -> list[str]:
    """SCCL §3.3: in step s, at most b · r_s sends over the pairs of each (L, b).

    Counted for all steps at once (:meth:`RelationIndex.step_loads`); the
    problems come step by step, overloaded constraints first, then the sends
    over pairs no constraint of positive capacity covers."""
    relation = tuple(relation)
    if not relation or not algorithm.transfers:
        return []
    p = algorithm.num_ranks
    index = RelationIndex.of(relation, p)
    table = algorithm.table
    pairs = table.src.astype(np.int64) * p + table.dst
    rounds = list(algorithm.rounds_per_step)
    step, cons, counts = index.step_loads(table.step, pairs)
    found: list[tuple[int, int, int, str]] = []
    for s, i, n in zip(*(a.tolist() for a in (step, cons, counts)), strict=True):
        c = relation[i]
        if n > c.chunks_per_round * rounds[s]:
            label = c.label or f"pairs {sorted(c.links)}"
            found.append(
                (
                    s,
                    0,
                    i,
                    f"step {s}: {n} chunks over {label} exceed its {c.chunks_per_round} chunk(s) per round "
                    f"x {rounds[s]} round(s)",
                )
            )
    for k in np.flatnonzero(~index.covered(pairs)).tolist():
        t = algorithm.transfers[k]
        found.append((t.step, 1, k, f"{t.describe()}: no bandwidth between rank {t.src} and rank {t.dst}"))
    return [problem for *_, problem in sorted(found)]

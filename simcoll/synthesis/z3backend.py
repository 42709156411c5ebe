"""Z3 backend: SCCL's SMT encoding as the paper states it (§3.4, C1-C6).

Variables: integer ``time[c, n]`` (the step from which chunk c is on rank
n; ``S + 1`` means never), Boolean ``snd[n, c, n']`` for pairs of E, integer
``r[s]`` ≥ 1 rounds per step. Constraints C1-C6 with C3 and C5 as
pseudo-Boolean sums.

Additions that keep "unsat" a proof (the same as the CP-SAT backend's):
``time`` is bounded below by the hop distance from the chunk's holders and
``snd`` exists only where the sender can hold the chunk in time;
interchangeable chunks are ordered by their arrival at one destination.
"""

from __future__ import annotations

import time as _time

import z3

from .instance import Instance
from .interrupt import raise_if_interrupted
from .result import SolverOutcome


def _check_within(solver: z3.Solver, start: float, time_limit_s: float):
    """Solve in what the time limit leaves after encoding."""
    left_ms = int((time_limit_s - (_time.perf_counter() - start)) * 1000)
    if left_ms <= 0:
        return z3.unknown
    solver.set("timeout", left_ms)
    return solver.check()


def solve_z3(instance: Instance, time_limit_s: float = 60.0) -> SolverOutcome:
    """Decide ``instance``; ``status`` is "sat", "unsat" or "unknown" (time limit)."""
    start = _time.perf_counter()
    S, R = instance.steps, instance.rounds
    pre, post = instance.collective.pre, instance.collective.post
    earliest = instance.earliest
    never = S + 1
    solver = z3.Solver()

    rounds = [z3.Int(f"r_{s}") for s in range(S)]
    for r in rounds:
        solver.add(r >= 1)
    solver.add(z3.Sum(rounds) == R)  # C6

    time: dict[tuple[int, int], z3.ArithRef] = {}
    for c in range(instance.num_chunks):
        for n in range(instance.num_ranks):
            if (c, n) in pre:
                continue  # C1: time 0, a constant
            if (c, n) not in earliest or earliest[(c, n)] > S:
                if (c, n) in post:
                    return SolverOutcome("unsat", (), (), _time.perf_counter() - start, "a chunk cannot arrive in time")
                continue  # never reachable in S steps: time is S + 1, a constant
            t = z3.Int(f"time_{c}_{n}")
            time[(c, n)] = t
            solver.add(t >= earliest[(c, n)], t <= never)
            if (c, n) in post:
                solver.add(t <= S)  # C2

    def time_of(c: int, n: int):
        if (c, n) in pre:
            return 0
        return time.get((c, n), never)

    snd: dict[tuple[int, int, int], z3.BoolRef] = {}
    for src, dst in instance.edges:
        for c in range(instance.num_chunks):
            if (c, dst) in time and (c, src) in earliest and earliest[(c, src)] < S:
                snd[(src, c, dst)] = z3.Bool(f"snd_{src}_{c}_{dst}")

    incoming: dict[tuple[int, int], list[z3.BoolRef]] = {}
    for (src, c, dst), var in snd.items():
        incoming.setdefault((c, dst), []).append(var)
        solver.add(z3.Implies(var, time_of(c, src) < time[(c, dst)]))  # C4
    for key, t in time.items():  # C3
        senders = incoming.get(key, [])
        if not senders:
            solver.add(t == never)
        else:
            solver.add(z3.Implies(t <= S, z3.PbEq([(v, 1) for v in senders], 1)))

    by_pair: dict[tuple[int, int], list[tuple[int, z3.BoolRef]]] = {}
    for (src, c, dst), var in snd.items():
        by_pair.setdefault((src, dst), []).append((c, var))
    for s in range(1, S + 1):  # C5
        for constraint in instance.bandwidth:
            terms = [
                z3.If(z3.And(var, time[(c, dst)] == s), 1, 0)
                for src, dst in constraint.links
                for c, var in by_pair.get((src, dst), ())
            ]
            if terms:
                solver.add(z3.Sum(terms) <= constraint.chunks_per_round * rounds[s - 1])

    for chunks in instance.interchangeable_chunks():
        dests = sorted(n for c, n in post if c == chunks[0] and (c, n) in time)
        if dests:
            for a, b in zip(chunks, chunks[1:], strict=False):
                solver.add(time[(a, dests[0])] <= time[(b, dests[0])])

    answer = _check_within(solver, start, time_limit_s)
    elapsed = _time.perf_counter() - start
    if answer == z3.sat:
        m = solver.model()
        sends = []
        for (src, c, dst), var in snd.items():
            arrival = m.eval(time[(c, dst)], model_completion=True).as_long()
            if z3.is_true(m.eval(var, model_completion=True)) and arrival <= S:
                sends.append((c, src, dst, arrival - 1))
        rounds_value = tuple(m.eval(r, model_completion=True).as_long() for r in rounds)
        return SolverOutcome("sat", tuple(sorted(sends)), rounds_value, elapsed)
    if answer == z3.unsat:
        return SolverOutcome("unsat", (), (), elapsed)
    raise_if_interrupted(solver.reason_unknown())
    return SolverOutcome("unknown", (), (), elapsed, f"no answer within {time_limit_s:g} s ({solver.reason_unknown()})")


def solve_z3_pb(instance: Instance, time_limit_s: float = 60.0) -> SolverOutcome:
    """The same constraints over Booleans only, for Z3's SAT core with
    native pseudo-Boolean constraints (``QF_FD``): ``recv[c, n', n, s]``
    replaces ``snd ∧ time = s`` (as in the CP-SAT backend), and the rounds of
    step s are one-hot literals ``rho[s, v]`` so that C5 stays a pseudo-Boolean
    sum with a constant bound: ``Σ recv + Σ_v b·v·¬rho[s, v] ≤ Σ_v b·v``."""
    start = _time.perf_counter()
    S, R = instance.steps, instance.rounds
    pre, post = instance.collective.pre, instance.collective.post
    earliest = instance.earliest
    solver = z3.SolverFor("QF_FD")

    values = range(1, R - S + 2)
    rho = {(s, v): z3.Bool(f"rho_{s}_{v}") for s in range(S) for v in values}
    for s in range(S):
        solver.add(z3.PbEq([(rho[(s, v)], 1) for v in values], 1))
    solver.add(z3.PbEq([(rho[(s, v)], v) for s in range(S) for v in values], R))  # C6

    in_edges: dict[int, list[int]] = {}
    for a, b in instance.edges:
        in_edges.setdefault(b, []).append(a)
    recv: dict[tuple[int, int, int, int], z3.BoolRef] = {}
    arrivals: dict[tuple[int, int], list[tuple[int, z3.BoolRef]]] = {}
    for c in range(instance.num_chunks):
        for n in range(instance.num_ranks):
            if (c, n) in pre or (c, n) not in earliest:
                continue
            for src in in_edges.get(n, ()):
                if (c, src) not in earliest:
                    continue
                for s in range(max(earliest[(c, n)], earliest[(c, src)] + 1), S + 1):
                    var = z3.Bool(f"x_{c}_{src}_{n}_{s}")
                    recv[(c, src, n, s)] = var
                    arrivals.setdefault((c, n), []).append((s, var))
    for key in post:  # C2
        if key not in pre and not arrivals.get(key):
            return SolverOutcome("unsat", (), (), _time.perf_counter() - start, "a chunk cannot arrive in time")
    for key, options in arrivals.items():  # C2 + C3
        literals = [(v, 1) for _, v in options]
        solver.add(z3.PbEq(literals, 1) if key in post else z3.PbLe(literals, 1))
    for (c, src, _n, s), var in recv.items():  # C4: the sender received c before step s
        if (c, src) not in pre:
            earlier = [v for t, v in arrivals.get((c, src), ()) if t <= s - 1]
            solver.add(z3.Or(z3.Not(var), *earlier) if earlier else z3.Not(var))
    by_step_pair: dict[tuple[int, tuple[int, int]], list[z3.BoolRef]] = {}
    for (_c, src, n, s), var in recv.items():
        by_step_pair.setdefault((s, (src, n)), []).append(var)
    for s in range(1, S + 1):  # C5
        for constraint in instance.bandwidth:
            terms = [(v, 1) for pair in constraint.links for v in by_step_pair.get((s, pair), ())]
            if terms:
                b = constraint.chunks_per_round
                slack = [(z3.Not(rho[(s - 1, v)]), b * v) for v in values]
                solver.add(z3.PbLe(terms + slack, sum(b * v for v in values)))
    for chunks in instance.interchangeable_chunks():  # symmetry: arrival order at one destination
        dests = sorted(n for c, n in post if c == chunks[0] and (c, n) in arrivals)
        if dests:
            for a, b in zip(chunks, chunks[1:], strict=False):
                # time[a] <= time[b]: if b has arrived by step s, so has a
                for s in range(1, S + 1):
                    b_by = [v for t, v in arrivals[(b, dests[0])] if t <= s]
                    a_by = [v for t, v in arrivals[(a, dests[0])] if t <= s]
                    for v in b_by:
                        solver.add(z3.Or(z3.Not(v), *a_by) if a_by else z3.Not(v))

    answer = _check_within(solver, start, time_limit_s)
    elapsed = _time.perf_counter() - start
    if answer == z3.sat:
        m = solver.model()
        sends = tuple(sorted((c, src, n, s - 1) for (c, src, n, s), v in recv.items() if z3.is_true(m.eval(v))))
        rounds_value = tuple(next(v for v in values if z3.is_true(m.eval(rho[(s, v)]))) for s in range(S))
        return SolverOutcome("sat", sends, rounds_value, elapsed)
    if answer == z3.unsat:
        return SolverOutcome("unsat", (), (), elapsed)
    raise_if_interrupted(solver.reason_unknown())
    return SolverOutcome("unknown", (), (), elapsed, f"no answer within {time_limit_s:g} s ({solver.reason_unknown()})")

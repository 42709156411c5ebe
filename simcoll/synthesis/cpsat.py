"""OR-Tools CP-SAT backend for SCCL's encoding (SCCL §3.4, constraints C1-C6).

The paper's variables, in the form CP-SAT handles best:

- ``recv[c, n', n, s]`` (Boolean): chunk c reaches rank n from n' at step s,
  i.e. is sent in step s-1. This is SCCL's ``snd[n',c,n] ∧ time[c,n] = s``, the
  product C5 sums; CP-SAT reasons over Boolean literals natively, so we make
  it the decision variable and derive ``snd`` and ``time`` from it:
  ``snd[n',c,n] = Σ_s recv[c,n',n,s]``, ``time[c,n] = Σ_s s·recv[c,·,n,s]``
  (``S + 1`` when never received).
- ``rounds[s]`` (integer ≥ 1), summing to R (C6).

Constraints: C1 (pre chunks have time 0, so they get no ``recv``), C2 (post
chunks arrive by S), C3 (at most one receive per chunk and rank, exactly
one for post chunks), C4 (the sender holds the chunk a step earlier, an
enforced linear inequality), C5 (per step and constraint (L, b), at most
``b·rounds[s]`` receives over L).

Speed-ups, none of which removes a solution up to symmetry (so "unsat" stays
a proof):

- **Reachability pruning**: ``recv[c, n', n, s]`` exists only if n' can hold c
  by step s-1 and s ≥ the hop distance of n from c's holders.
- **Chunk symmetry breaking**: chunks with the same holders and destinations
  are interchangeable; any solution can be relabelled so that their arrival
  times at one fixed destination are non-decreasing, so we require that.
"""

from __future__ import annotations

import time as _time
from collections import defaultdict

from ortools.sat.python import cp_model

from .instance import Instance
from .interrupt import solve_interruptibly
from .result import SolverOutcome


def solve_cpsat(instance: Instance, time_limit_s: float = 60.0, workers: int = 1) -> SolverOutcome:
    """Decide ``instance``; ``status`` is "sat", "unsat" or "unknown" (time limit).

    One worker (default) with a fixed seed gives the same answer on every
    run. ``workers`` > 1 races that many search strategies and takes the
    first answer: sometimes faster, but which algorithm is found may change
    from run to run (a "sat"/"unsat" verdict does not)."""
    start = _time.perf_counter()
    S, R = instance.steps, instance.rounds
    pre = instance.collective.pre
    post = instance.collective.post
    earliest = instance.earliest
    in_edges: dict[int, list[int]] = defaultdict(list)
    for a, b in instance.edges:
        in_edges[b].append(a)

    deadline = start + time_limit_s  # the limit covers encoding too: a large machine's model takes minutes to build

    def out_of_time() -> SolverOutcome:
        return SolverOutcome(
            "unknown",
            (),
            (),
            _time.perf_counter() - start,
            f"the time limit ({time_limit_s:g} s) was reached while encoding",
        )

    model = cp_model.CpModel()
    rounds = [model.new_int_var(1, R - S + 1, f"r{s}") for s in range(S)]
    model.add(sum(rounds) == R)  # C6

    recv: dict[tuple[int, int, int, int], cp_model.IntVar] = {}
    arrivals: dict[tuple[int, int], list[tuple[int, cp_model.IntVar]]] = defaultdict(list)
    for c in range(instance.num_chunks):
        if _time.perf_counter() > deadline:
            return out_of_time()
        for n in range(instance.num_ranks):
            if (c, n) in pre or (c, n) not in earliest:
                continue
            first = earliest[(c, n)]
            for src in in_edges[n]:
                if (c, src) not in earliest:
                    continue
                for s in range(max(first, earliest[(c, src)] + 1), S + 1):
                    var = model.new_bool_var(f"x{c}_{src}_{n}_{s}")
                    recv[(c, src, n, s)] = var
                    arrivals[(c, n)].append((s, var))

    for c, n in post:  # C2
        if (c, n) not in pre and not arrivals.get((c, n)):
            return SolverOutcome("unsat", (), (), _time.perf_counter() - start, "a chunk cannot arrive in time")
    time_of: dict[tuple[int, int], cp_model.LinearExpr] = {}
    for i, (key, options) in enumerate(arrivals.items()):
        if i % 1024 == 0 and _time.perf_counter() > deadline:
            return out_of_time()
        literals = [v for _, v in options]
        if key in post:
            model.add_exactly_one(literals)  # C2 + C3
            time_of[key] = sum(s * v for s, v in options)
        else:
            model.add_at_most_one(literals)  # C3
            time_of[key] = (S + 1) - sum((S + 1 - s) * v for s, v in options)

    for i, ((c, src, _n, s), var) in enumerate(recv.items()):  # C4: the sender holds c before step s-1 ends
        if i % 4096 == 0 and _time.perf_counter() > deadline:
            return out_of_time()
        if (c, src) not in pre:
            model.add(time_of[(c, src)] <= s - 1).only_enforce_if(var)

    by_step_pair: dict[tuple[int, tuple[int, int]], list[cp_model.IntVar]] = defaultdict(list)
    for (_c, src, n, s), var in recv.items():
        by_step_pair[(s, (src, n))].append(var)
    for s in range(1, S + 1):  # C5
        if _time.perf_counter() > deadline:
            return out_of_time()
        for constraint in instance.bandwidth:
            terms = [v for pair in constraint.links for v in by_step_pair.get((s, pair), ())]
            if terms:
                model.add(sum(terms) <= constraint.chunks_per_round * rounds[s - 1])

    _break_chunk_symmetry(model, instance, time_of)

    solver = cp_model.CpSolver()
    left_s = deadline - _time.perf_counter()
    if left_s <= 0:
        return out_of_time()
    solver.parameters.max_time_in_seconds = left_s
    solver.parameters.num_workers = workers
    solver.parameters.random_seed = 0
    if workers == 1:
        # One worker with a fixed seed is deterministic. SCCL's instances are Boolean feasibility problems whose
        # LP relaxation does not guide the search: without it the one worker is 3-4x faster (DGX-1 Allgather
        # (6,7,7): 1.3 s against 4.1 s; (6,3,7): 0.26 s against 24 s), faster than two workers taking turns in
        # fixed batches (interleave_search, deterministic too: 7.2 s) and about as fast as two racing.
        solver.parameters.linearization_level = 0
    status = solve_interruptibly(solver, model)
    elapsed = _time.perf_counter() - start
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        sends = tuple(sorted((c, src, n, s - 1) for (c, src, n, s), var in recv.items() if solver.boolean_value(var)))
        return SolverOutcome("sat", sends, tuple(solver.value(r) for r in rounds), elapsed)
    if status == cp_model.INFEASIBLE:
        return SolverOutcome("unsat", (), (), elapsed)
    return SolverOutcome("unknown", (), (), elapsed, f"no answer within {time_limit_s:g} s")


def _break_chunk_symmetry(model: cp_model.CpModel, instance: Instance, time_of) -> None:
    post = instance.collective.post
    for chunks in instance.interchangeable_chunks():
        dests = sorted(n for c, n in post if c == chunks[0] and (c, n) in time_of)
        if not dests:
            continue
        anchor = dests[0]
        for a, b in zip(chunks, chunks[1:], strict=False):
            model.add(time_of[(a, anchor)] <= time_of[(b, anchor)])

"""SCCL synthesis (Cai et al., PPoPP'21, §3): k-synchronous algorithms with
given chunks C, steps S and rounds R, and Pareto-optimal frontiers.

- :func:`synthesize` answers one (C, S, R) query with a verified
  :class:`~simcoll.algorithm.Algorithm`, "unsat" (a proof that none exists) or
  "unknown" (time limit). Non-combining collectives go straight to a backend;
  combining ones with one destination per chunk (Reduce, ReduceScatter,
  user-defined ones) invert their non-combining dual on the reversed
  relation (§3.5); Allreduce is ReduceScatter followed by Allgather, each
  with half the steps and rounds.
- :func:`pareto_synthesize` is Algorithm 1: from the latency bound a_l
  upwards, the (R, C) candidates with S ≤ R ≤ S + k in increasing R/C, the
  first "sat" reported, stopping at the bandwidth bound b_l.

``chunks`` follows the paper's tables (C chunks per rank's buffer): the
Allgather input, the ReduceScatter output, the Broadcast buffer, the
Allreduce buffer (so Allreduce C = 8 on 8 ranks is one chunk per rank after
the ReduceScatter), the whole Alltoall buffer (C/P chunks per destination).

>>> r = synthesize("ring:4", "allgather", chunks=1, steps=2, rounds=2)
>>> r.status, r.algorithm.steps
('sat', 2)
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from fractions import Fraction

from ..algorithm import Algorithm, BandwidthConstraint, Transfer
from ..collectives import Collective, canonical_name, custom_collective, make_collective
from ..errors import SynthesisError
from ..machines import Machine, as_machine
from ..topology import Topology
from ..verify import check_algorithm
from .cpsat import solve_cpsat
from .instance import Instance, reversed_relation, topology_relation
from .result import SolverOutcome, SynthesisResult
from .z3backend import solve_z3, solve_z3_pb

#: "cpsat" (default, fastest), "z3" (the paper's integer/Boolean encoding),
#: "z3-pb" (the same constraints over Booleans on Z3's pseudo-Boolean SAT core).
BACKENDS: dict[str, Callable[..., SolverOutcome]] = {"cpsat": solve_cpsat, "z3": solve_z3, "z3-pb": solve_z3_pb}
DEFAULT_TIME_LIMIT_S = 60.0
EXHAUSTIVE_CUT_RANKS = 10  # 2^10 cuts, each a greedy cover: well under a second


@dataclass(frozen=True)
class Target:
    """Where synthesis runs: P ranks, the relation B and the topology (if any)
    the result is verified against."""

    num_ranks: int
    bandwidth: tuple[BandwidthConstraint, ...]
    topology: Topology | None

    @property
    def name(self) -> str | None:
        return self.topology.name if self.topology is not None else None


def make_target(
    machine: Machine | str | None, bandwidth: tuple[BandwidthConstraint, ...] | None = None, num_ranks=None
) -> Target:
    """A target from a machine or topology spec (B derived from its links), or an
    explicit relation B (then ``num_ranks`` is needed unless a machine is given)."""
    topology = as_machine(machine).topology if machine is not None else None
    if topology is None and (bandwidth is None or num_ranks is None):
        raise SynthesisError("give a machine, or an explicit bandwidth relation with num_ranks")
    p = topology.num_ranks if topology is not None else int(num_ranks)
    relation = tuple(bandwidth) if bandwidth is not None else topology_relation(topology)
    if not relation:
        raise SynthesisError(
            f"{topology.name if topology else 'the target'} has no links between GPUs to synthesize over"
        )
    return Target(p, relation, topology)


def collective_for(name: str | Collective, num_ranks: int, chunks: int, root: int | None = None) -> Collective:
    """The collective a paper-style chunk count C names (module docstring)."""
    if isinstance(name, Collective):
        return name
    key = canonical_name(name)
    if chunks < 1:
        raise SynthesisError(f"chunks must be at least 1 (got {chunks})")
    if key == "alltoall":
        if chunks % num_ranks:
            raise SynthesisError(f"alltoall: chunks ({chunks}) must be a multiple of the rank count {num_ranks}")
        return make_collective(key, num_ranks, chunks // num_ranks)
    if key == "allreduce" and chunks % num_ranks:
        raise SynthesisError(
            f"allreduce: chunks ({chunks}) must be a multiple of the rank count {num_ranks} "
            "(it is synthesized as ReduceScatter + Allgather of C/P chunks per rank)"
        )
    return make_collective(
        key, num_ranks, chunks, root=root if key in ("broadcast", "reduce", "gather", "scatter") else None
    )


def paper_chunks(collective: Collective) -> int:
    """C as the paper's tables count it (inverse of :func:`collective_for`)."""
    if collective.name == "alltoall":
        return collective.chunk_factor * collective.num_ranks
    return collective.chunk_factor


# -- one query --------------------------------------------------------------------
def synthesize(
    machine: Machine | str | None,
    collective: str | Collective,
    chunks: int = 1,
    steps: int = 1,
    rounds: int | None = None,
    *,
    backend: str = "cpsat",
    time_limit_s: float = DEFAULT_TIME_LIMIT_S,
    bandwidth: tuple[BandwidthConstraint, ...] | None = None,
    num_ranks: int | None = None,
    root: int | None = None,
    workers: int = 1,
) -> SynthesisResult:
    """Synthesize a (C, S, R) algorithm, or prove there is none.

    The SCCL encoding (module docstring) is solved with one backend; the
    answer's ``algorithm`` (on "sat") has passed the verifier against the
    collective and B (and the machine's routes, when there is one).

    Parameters
    ----------
    machine : Machine or str or None
        The machine (or a topology spec) whose links give B; None with an
        explicit ``bandwidth`` and ``num_ranks``.
    collective : str or Collective
        A collective name (then ``chunks`` counts as the paper's C) or one.
    chunks, steps : int
        C and S.
    rounds : int, optional
        R; default S (0-synchronous).
    backend : {"cpsat", "z3"}
        The solver.
    time_limit_s : float
        Past it the answer is "unknown".
    bandwidth : tuple of BandwidthConstraint, optional
        An explicit relation B instead of the machine's.
    num_ranks : int, optional
        P, with an explicit ``bandwidth`` and no machine.
    root : int, optional
        The root of a rooted collective.
    workers : int, optional
        CP-SAT workers (the ``cpsat`` backend): 1 (default) gives the same
        algorithm on every run; more race and take the first answer, which
        may differ from run to run (:func:`~simcoll.synthesis.cpsat.solve_cpsat`).

    Returns
    -------
    SynthesisResult
        ``status`` "sat", "unsat" or "unknown", the solve time and, on "sat",
        the verified ``algorithm``.

    Raises
    ------
    SynthesisError
        For an unknown backend, a non-positive time limit, a worker count
        that is not a positive integer (or above 1 for a Z3 backend), a chunk
        count the collective cannot take, or a target with no links.

    References
    ----------
    .. [1] Cai et al., "Synthesizing Optimal Collective Algorithms" (SCCL),
       PPoPP 2021, §3 (the (C, S, R) encoding) and §4 (the solver queries).

    Examples
    --------
    >>> synthesize("ring:4", "allgather", chunks=1, steps=1).status  # the diameter is 2
    'unsat'
    >>> synthesize("ring:4", "allgather", chunks=1, steps=2).algorithm.name
    'sccl-allgather-c1-s2-r2'
    """
    if backend not in BACKENDS:
        raise SynthesisError(f"unknown backend {backend!r}; choose {' or '.join(BACKENDS)}")
    if time_limit_s <= 0:
        raise SynthesisError(f"time limit must be positive (got {time_limit_s})")
    solve = _solver(backend, workers)
    target = make_target(machine, bandwidth, num_ranks)
    coll = collective_for(collective, target.num_ranks, chunks, root)
    if coll.num_ranks != target.num_ranks:
        raise SynthesisError(f"{coll.name} is on {coll.num_ranks} ranks but the target has {target.num_ranks}")
    rounds = steps if rounds is None else rounds
    started = time.perf_counter()
    deadline = started + time_limit_s  # covers preparing the instances and encoding them, not only solving
    if coll.name == "allreduce":
        outcome, transfers, rounds_per_step = _allreduce(coll, target, steps, rounds, solve, deadline)
    elif coll.combining:
        outcome, transfers, rounds_per_step = _inverted(coll, target, steps, rounds, solve, deadline)
    else:
        instance = Instance(coll, steps, rounds, target.bandwidth, paper_chunks(coll), target.name)
        instance.check_reachable()
        outcome = _solve_by(solve, instance, deadline)
        transfers = [Transfer(c, s, d, "copy", t) for c, s, d, t in outcome.sends]
        rounds_per_step = outcome.rounds_per_step
    elapsed = time.perf_counter() - started
    result = SynthesisResult(
        outcome.status, coll.name, paper_chunks(coll), steps, rounds, backend, elapsed, reason=outcome.reason
    )
    if outcome.status != "sat":
        return result
    algorithm = Algorithm(
        name=f"sccl-{coll.name}-c{paper_chunks(coll)}-s{steps}-r{rounds}",
        collective=coll,
        transfers=tuple(transfers),
        rounds_per_step=rounds_per_step,
        topology=target.name,
        bandwidth=target.bandwidth,
        metadata={
            "generator": "sccl",
            "backend": backend,
            "chunks": paper_chunks(coll),
            "steps": steps,
            "rounds": rounds,
            "solve_s": round(elapsed, 4),
        },
    )
    problems = check_algorithm(algorithm, target.topology)
    if problems:  # a solver or encoding bug, never the user's input
        raise SynthesisError(f"synthesized {algorithm.name} failed verification: {problems[0]}")
    return SynthesisResult("sat", coll.name, paper_chunks(coll), steps, rounds, backend, elapsed, algorithm=algorithm)


def _solver(backend: str, workers: int) -> Callable[..., SolverOutcome]:
    """The backend's solve function, with ``workers`` for CP-SAT."""
    if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
        raise SynthesisError(f"workers must be a positive integer (got {workers!r})")
    if backend == "cpsat":
        return functools.partial(solve_cpsat, workers=workers)
    if workers != 1:
        raise SynthesisError(f"the {backend} backend runs one worker; workers={workers} applies to cpsat")
    return BACKENDS[backend]


def _solve_by(solve, instance: Instance, deadline: float) -> SolverOutcome:
    """``solve(instance)`` in the time left before ``deadline``; "unknown" at
    once where preparing the instance used it all."""
    left_s = deadline - time.perf_counter()
    if left_s <= 0:
        return SolverOutcome("unknown", (), (), 0.0, "the time limit was reached while preparing the instance")
    return solve(instance, time_limit_s=left_s)


def inverse_collective(collective: Collective) -> Collective:
    """The non-combining dual of a combining collective whose every chunk has
    one destination (SCCL §3.5): the chunk starts at its destination and must
    reach every contributor. Reduce -> Broadcast, ReduceScatter -> Allgather."""
    dests: dict[int, list[int]] = {}
    for c, n in collective.post:
        dests.setdefault(c, []).append(n)
    for c, ns in dests.items():
        if len(ns) != 1:
            raise SynthesisError(
                f"{collective.name}: chunk {c} is wanted on ranks {sorted(ns)}; only combining collectives with one "
                "destination per chunk can be inverted (Allreduce is ReduceScatter + Allgather)"
            )
    p = collective.num_ranks
    inputs = [sorted(c for c, ns in dests.items() if ns[0] == r) for r in range(p)]
    outputs = [sorted(c for c in collective.input_layout[r] if c in dests) for r in range(p)]
    return custom_collective(f"inverse-{collective.name}", inputs, outputs, chunk_factor=collective.chunk_factor)


def _invert_sends(sends, steps: int) -> list[Transfer]:
    """Reverse every send in time and direction; each becomes a reduction."""
    return [Transfer(c, d, s, "reduce", steps - 1 - t) for c, s, d, t in sends]


def _inverted(coll: Collective, target: Target, steps: int, rounds: int, solve, deadline: float):
    dual = inverse_collective(coll)
    instance = Instance(dual, steps, rounds, reversed_relation(target.bandwidth), paper_chunks(coll), target.name)
    instance.check_reachable()
    outcome = _solve_by(solve, instance, deadline)
    transfers = _invert_sends(outcome.sends, steps)
    return outcome, transfers, tuple(reversed(outcome.rounds_per_step))


def _allreduce(coll: Collective, target: Target, steps: int, rounds: int, solve, deadline: float):
    """ReduceScatter (inverted Allgather on reversed B) then Allgather (§3.5)."""
    if steps % 2 or rounds % 2:
        raise SynthesisError(
            f"allreduce is synthesized as ReduceScatter + Allgather with half the steps and rounds each; "
            f"give even steps and rounds (got S={steps}, R={rounds})"
        )
    p = coll.num_ranks
    half_s, half_r = steps // 2, rounds // 2
    ag = make_collective("allgather", p, coll.chunk_factor // p)
    ag_instance = Instance(ag, half_s, half_r, target.bandwidth, coll.chunk_factor // p, target.name)
    ag_instance.check_reachable()
    ag_out = _solve_by(solve, ag_instance, deadline)
    if ag_out.status != "sat":
        return ag_out, [], ()
    reversed_b = reversed_relation(target.bandwidth)
    if _same_relation(reversed_b, target.bandwidth):
        rs_out = ag_out  # the reversed instance is the same instance: one solve serves both halves
    else:
        rs_instance = Instance(ag, half_s, half_r, reversed_b, coll.chunk_factor // p, target.name)
        rs_out = _solve_by(solve, rs_instance, deadline)
        if rs_out.status != "sat":
            return rs_out, [], ()
    # Allgather chunk i*P+n starts on rank n; the Allreduce block owned by n is the same chunk id.
    transfers = _invert_sends(rs_out.sends, half_s)
    transfers += [Transfer(c, s, d, "copy", t + half_s) for c, s, d, t in ag_out.sends]
    solve_s = ag_out.solve_s + (rs_out.solve_s if rs_out is not ag_out else 0.0)
    outcome = SolverOutcome("sat", (), (), solve_s)
    return outcome, transfers, tuple(reversed(rs_out.rounds_per_step)) + ag_out.rounds_per_step


def _same_relation(a, b) -> bool:
    return sorted((sorted(c.links), c.chunks_per_round) for c in a) == sorted(
        (sorted(c.links), c.chunks_per_round) for c in b
    )


# -- Pareto frontier (Algorithm 1) --------------------------------------------------
def latency_bound(collective: Collective, target: Target) -> int:
    """a_l: the farthest any chunk must travel over E (the diameter for Allgather)."""
    base = _base_collective(collective)
    relation = reversed_relation(target.bandwidth) if collective.combining and collective.name != "allreduce" else None
    instance = Instance(base, 1, 1, relation or target.bandwidth, 1, target.name)
    instance.check_reachable()
    hops = max((instance.earliest[(c, n)] for c, n in base.post), default=0)
    return 2 * hops if collective.name == "allreduce" else hops


def bandwidth_bound(collective: Collective, target: Target) -> Fraction:
    """b_l: a lower bound on R/C from cuts of B (SCCL's inverse bisection
    bandwidth, generalised). For a set X of ranks, the chunks X needs from
    outside must cross into X at no more per round than constraints covering
    the pairs into X allow (a greedy cover gives a valid upper bound on that
    capacity). Every X is tried up to 10 ranks; above, single ranks, nodes,
    halves and their complements (a valid, possibly weaker bound: Algorithm 1
    then stops at ``max_steps`` instead)."""
    base = _base_collective(collective)
    relation = target.bandwidth
    if collective.combining and collective.name != "allreduce":
        relation = reversed_relation(relation)
    p = target.num_ranks
    holders: dict[int, set[int]] = {}
    for c, n in base.pre:
        holders.setdefault(c, set()).add(n)
    wanted: dict[int, set[int]] = {}
    for c, n in base.post:
        wanted.setdefault(c, set()).add(n)
    if p <= EXHAUSTIVE_CUT_RANKS:
        cuts = [frozenset(r for r in range(p) if m >> r & 1) for m in range(1, 2**p - 1)]
    else:
        cuts = [frozenset({r}) for r in range(p)] + [frozenset(range(p // 2)), frozenset(range(p // 2, p))]
        if target.topology is not None and len(target.topology.nodes) > 1:
            cuts += [frozenset(target.topology.ranks_of_node(n)) for n in target.topology.nodes]
        cuts += [frozenset(range(p)) - x for x in cuts]
    best = Fraction(0)
    for inside in cuts:
        need = sum(1 for c, ns in wanted.items() if ns & inside and not holders.get(c, set()) & inside)
        if not need:
            continue
        capacity = _cover_capacity(relation, inside)
        if capacity == 0:
            raise SynthesisError(f"no link reaches ranks {sorted(inside)}")
        best = max(best, Fraction(need, capacity * base.chunk_factor))
    if collective.name == "allreduce":
        return 2 * best / p  # RS + AG, per chunk of the whole buffer
    if collective.name == "alltoall":
        return best / p  # the paper's C counts the whole buffer: P chunks per chunk factor
    return best


def _cover_capacity(relation, inside: frozenset[int]) -> int:
    """An upper bound on chunks per round into ``inside``: greedily cover the
    pairs crossing into it by constraints, summing their capacities."""
    crossing = {(s, d) for c in relation for s, d in c.links if d in inside and s not in inside}
    total = 0
    while crossing:
        best = min(
            (c for c in relation if c.links & crossing),
            key=lambda c: Fraction(c.chunks_per_round, len(c.links & crossing)),
        )
        total += best.chunks_per_round
        crossing -= best.links
    return total


def _base_collective(collective: Collective) -> Collective:
    """The non-combining collective whose instances synthesis solves."""
    if collective.name == "allreduce":
        return make_collective("allgather", collective.num_ranks, 1)
    if collective.combining:
        return inverse_collective(collective)
    return collective


@dataclass(frozen=True)
class ParetoPoint:
    """One query of the frontier search; ``optimal`` marks a reported point."""

    result: SynthesisResult
    rounds_per_chunk: Fraction
    optimal: bool


def pareto_synthesize(
    machine: Machine | str | None,
    collective: str,
    *,
    k: int = 0,
    backend: str = "cpsat",
    time_limit_s: float = DEFAULT_TIME_LIMIT_S,
    max_steps: int | None = None,
    bandwidth: tuple[BandwidthConstraint, ...] | None = None,
    num_ranks: int | None = None,
    root: int | None = None,
    workers: int = 1,
) -> Iterator[ParetoPoint]:
    """SCCL Algorithm 1, yielding every query as it is answered (so callers
    can show progress); the points with ``optimal=True`` form the frontier.

    For each S from a_l, candidates (R, C) with S ≤ R ≤ S + k and
    R/C ≥ b_l are tried in increasing R/C; the first "sat" is Pareto-optimal
    for S. Two refinements that change no reported point: candidates whose
    R/C is no better than the best found with fewer steps are skipped (they
    would be dominated), and equal R/C is tried with the fewest chunks first.
    An "unknown" answer is reported and the search goes on, but points found
    after it at the same S are then not proven optimal (``optimal`` stays
    True only when every cheaper candidate was "unsat"). Stops at b_l or at
    ``max_steps`` (default a_l + 8 + k).

    Parameters
    ----------
    machine : Machine or str or None
        The machine (or a topology spec); None with ``bandwidth`` and ``num_ranks``.
    collective : str
        The collective's name.
    k : int
        Rounds per step beyond one that a step may take (k-synchronous).
    backend, time_limit_s, bandwidth, num_ranks, root, workers
        As for :func:`synthesize` (one worker: the same frontier, with the
        same algorithms, on every run).
    max_steps : int, optional
        The last S tried.

    Yields
    ------
    ParetoPoint
        Every query as it is answered.

    References
    ----------
    .. [1] Cai et al., "Synthesizing Optimal Collective Algorithms" (SCCL),
       PPoPP 2021, Algorithm 1.

    Examples
    --------
    >>> points = pareto_synthesize("ring:4", "allgather", max_steps=3)
    >>> [(p.result.chunks, p.result.steps, str(p.rounds_per_chunk)) for p in points if p.optimal]
    [(1, 2, '2'), (2, 3, '3/2')]
    """
    machine = as_machine(machine) if machine is not None else None
    target = make_target(machine, bandwidth, num_ranks)
    key = canonical_name(collective)
    probe = collective_for(key, target.num_ranks, target.num_ranks if key in ("allreduce", "alltoall") else 1, root)
    a_l = latency_bound(probe, target)
    b_l = bandwidth_bound(probe, target)
    step_unit = 2 if key == "allreduce" else 1  # Allreduce moves in RS + AG pairs
    chunk_unit = target.num_ranks if key in ("allreduce", "alltoall") else 1
    last_steps = max_steps if max_steps is not None else a_l + step_unit * (8 + k)
    best = None
    for steps in range(max(a_l, step_unit), last_steps + 1, step_unit):
        candidates = set()
        for rounds in range(steps, steps + step_unit * k + 1, step_unit):
            # R/C >= b_l  <=>  C <= R / b_l (in paper units, multiples of chunk_unit)
            top = math.floor(rounds / b_l) if b_l > 0 else rounds * 8
            for chunks in range(chunk_unit, top + 1, chunk_unit):
                ratio = Fraction(rounds, chunks)
                if best is None or ratio < best:
                    candidates.add((ratio, chunks, rounds))
        proven = True
        for ratio, chunks, rounds in sorted(candidates):
            result = synthesize(
                machine,
                key,
                chunks,
                steps,
                rounds,
                backend=backend,
                time_limit_s=time_limit_s,
                bandwidth=target.bandwidth if target.topology is None or bandwidth is not None else None,
                num_ranks=target.num_ranks,
                root=root,
                workers=workers,
            )
            if result.status == "sat":
                yield ParetoPoint(result, ratio, proven)
                best = ratio
                break
            if result.status == "unknown":
                proven = False
            yield ParetoPoint(result, ratio, False)
        if best is not None and best <= b_l:
            return

"""TACCL stage 1, routing (TACCL §5.1 step 1, Appendix B.1, eqs. 1-15).

A bandwidth-relaxed MILP decides which links every chunk crosses. Variables
(Table 3): ``is_sent[c, src, r]`` (Boolean), ``start[c, r]`` (integer ns),
``is_util[src, r]`` (Boolean, switched links), ``time``. ``send[c, src, r]``
is eliminated: with relaxed bandwidth nothing gains from delaying a send, so
eq. 4 + eq. 5 become ``is_sent -> start[c, r] >= start[c, src] + lat``
(``>=`` instead of ``=`` does not change the optimum of a minimisation).

Constraints: eq. 2 (time bounds every post start), eq. 3 (pre starts are 0),
delivery (every rank a chunk must reach receives it exactly once, others at
most once; a rank forwards only what it received), eq. 6 (time bounds the
serial load of each link), eqs. 7-8 (of each GPU's switched egress and
ingress, switch- and NIC-hyperedges alike), eqs. 9-10 (``is_util``), eq. 11
(objective ``time + γ Σ is_util``; γ = +1 ns per connection for ``uc-min``,
-1 ns for ``uc-max``, 0 for ``free``: a tie-breaker below the ns
resolution of the time), eqs. 12-14 (symmetry: rotationally symmetric
variables are one variable), eq. 15 (a chunk needed on another node crosses
at least one inter-node link).

Path pruning (§5.1): ``is_sent[c, u, v]`` exists only for links that move
the chunk away from its origin in hop distance (or, with ``paths="level"``,
not towards it) and from which some rank that needs it is reachable; see
:func:`candidate_links`. TACCL keeps paths through ranks on shortest paths;
``"shortest"`` is the strictest reading (every path a shortest path).

Solver choice: CP-SAT over integer nanoseconds, by measurement
(``benchmarks/taccl.py --compare-mip``, 2-core machine, 60 s limit, the same
B.1 model on the MIP solvers bundled with OR-Tools through ``pywraplp``, with
big-M rows for the indicator eq. 5 and without symmetry sharing): ndv2*2
Allgather (ndv2-sk-1): CP-SAT optimal in 0.04 s, SCIP 0.08 s, HiGHS 0.32 s,
CBC 1.7 s; dgx2*2 Allgather (dgx2-sk-2): CP-SAT optimal in 0.4 s, SCIP only
a solution twice as slow after 60 s, HiGHS and CBC none. CP-SAT also takes
indicator constraints natively (no big-M), keeps the best solution and its
bound on a time limit, and takes solution hints (stage 3 uses them).
"""

from __future__ import annotations

import threading
import time as _time
from collections import defaultdict
from dataclasses import dataclass

from ortools.sat.python import cp_model

from ...collectives import Collective
from ...errors import SynthesisError
from ..interrupt import solve_interruptibly
from .sketch import LogicalTopology, chunk_distances

NS = 1e-9


@dataclass(frozen=True)
class StageOutcome:
    """One solver stage: ``status`` "optimal", "feasible" (time limit hit with
    a solution; ``gap`` = (objective - bound) / objective) or "unknown"."""

    status: str
    wall_s: float
    objective_ns: int | None = None
    bound_ns: float | None = None

    @property
    def gap(self) -> float:
        if self.objective_ns is None or self.bound_ns is None or self.objective_ns <= 0:
            return 0.0 if self.status == "optimal" else float("nan")
        return max(0.0, (self.objective_ns - self.bound_ns) / self.objective_ns)


@dataclass(frozen=True)
class Routing:
    """Stage 1's answer: the links each chunk crosses (a tree from its origin)."""

    sends: tuple[tuple[int, int, int], ...]  # (chunk, src, dst)
    outcome: StageOutcome


def lat_ns(logical: LogicalTopology, link: tuple[int, int], nbytes: float) -> int:
    """α + β·n of one chunk over a logical link, rounded up to whole ns."""
    lk = logical.links[link]
    return max(1, int(-(-(lk.alpha_s + lk.beta_s_per_byte * nbytes) // NS)))


def chunk_endpoints(collective: Collective) -> tuple[dict[int, int], dict[int, frozenset[int]]]:
    """Origin (the single precondition holder) and destinations of each chunk."""
    origin: dict[int, int] = {}
    for c, r in collective.pre:
        if c in origin:
            raise SynthesisError(
                f"{collective.name}: chunk {c} starts on several ranks; route a non-combining collective"
            )
        origin[c] = r
    dests: dict[int, set[int]] = defaultdict(set)
    for c, r in collective.post:
        if r != origin.get(c):
            dests[c].add(r)
    return origin, {c: frozenset(v) for c, v in dests.items()}


PATH_RULES = ("shortest", "monotone", "level")


def candidate_links(
    logical: LogicalTopology, collective: Collective, paths: str = "monotone"
) -> dict[int, list[tuple[int, int]]]:
    """Per chunk, the links it may cross, by hop distance d from its origin over
    the links it may use: ``"shortest"``: d(v) = d(u) + 1 (every path a shortest
    path); ``"monotone"`` (default): d(u) < d(v) (paths only through ranks on
    shortest paths, TACCL §5.1, with a rank reached later than its own
    distance when that spreads load: without it, a rank reachable at distance
    d from only one neighbour forces every chunk through that link);
    ``"level"``: d(u) <= d(v) (ranks at one distance may also relay to each
    other, spreading a receiver's egress). In every case only links from which
    a destination is reachable are kept; cycles are excluded by the start-time
    constraints."""
    if paths not in PATH_RULES:
        raise SynthesisError(f"paths must be one of {PATH_RULES}, got {paths!r}")
    ok = {
        "shortest": lambda du, dv: dv == du + 1,
        "monotone": lambda du, dv: dv > du,
        "level": lambda du, dv: dv >= du,
    }[paths]
    origin, dests = chunk_endpoints(collective)
    dist_cache: dict[int, dict[int, int]] = {}
    out: dict[int, list[tuple[int, int]]] = {}
    by_src: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for key in logical.links:
        by_src[key[0]].append(key)
    for c, o in origin.items():
        targets = dests.get(c, frozenset())
        if not targets:
            continue
        dist = dist_cache.setdefault(o, chunk_distances(logical, o))
        dag = [
            (u, v)
            for u, du in dist.items()
            for (_, v) in by_src[u]
            if v in dist and v != o and ok(du, dist[v]) and logical.allows(logical.links[(u, v)], o)
        ]
        # keep only links from which some destination is reachable in the DAG
        useful = set(t for t in targets if t in dist)
        children: dict[int, list[int]] = defaultdict(list)
        for u, v in dag:
            children[u].append(v)
        changed = True
        while changed:  # fixpoint: "level" links make the DAG order insufficient
            changed = False
            for u in sorted(dist, key=lambda r: -dist[r]):
                if u not in useful and any(v in useful for v in children[u]):
                    useful.add(u)
                    changed = True
        out[c] = [(u, v) for u, v in dag if v in useful]
    return out


class _Orbits:
    """Union-find over hashable keys (symmetry orbits, B.1 eqs. 12-14)."""

    def __init__(self) -> None:
        self.parent: dict = {}

    def find(self, x):
        self.parent.setdefault(x, x)
        root = x
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[x] != root:
            self.parent[x], x = root, self.parent[x]
        return root

    def union(self, a, b) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


def chunk_symmetries(logical: LogicalTopology, collective: Collective) -> list[tuple[list[int], dict[int, int]]]:
    """For each symmetry offset, the rank map and the chunk map it induces
    (chunks with rotated holders and destinations, matched in id order)."""
    maps = []
    sig: dict[tuple, list[int]] = defaultdict(list)
    holders = {c: collective.contributors(c) for c in range(collective.num_chunks)}
    dests: dict[int, set[int]] = defaultdict(set)
    for c, r in collective.post:
        dests[c].add(r)
    for c in range(collective.num_chunks):
        sig[(holders[c], frozenset(dests[c]))].append(c)
    for o, g in logical.symmetry:
        rank_map = [logical.rotation(o, g, r) for r in range(logical.num_ranks)]
        chunk_map: dict[int, int] = {}
        for (h, d), chunks in sig.items():
            image = sig.get((frozenset(rank_map[r] for r in h), frozenset(rank_map[r] for r in d)))
            if image is None or len(image) != len(chunks):
                raise SynthesisError(
                    f"symmetry_offsets [{o}, {g}] is not an automorphism of {collective.name}: "
                    f"chunk {chunks[0]} has no rotated counterpart"
                )
            chunk_map.update(zip(chunks, image, strict=True))
        maps.append((rank_map, chunk_map))
    return maps


def solve_routing(
    logical: LogicalTopology,
    collective: Collective,
    chunk_bytes: float,
    time_limit_s: float = 60.0,
    workers: int = 2,
    paths: str = "monotone",
    gap_limit: float = 1e-3,
    patience_s: float | None = None,
) -> Routing:
    """Stage 1 (module docstring). Raises SynthesisError if no routing exists."""
    t0 = _time.perf_counter()
    m = _RoutingModel(logical, collective, chunk_bytes, paths)
    m.add_arrivals()
    m.add_delivery()
    m.add_bandwidth()
    m.add_utilisation()
    solver, status = run_solver(m.model, time_limit_s - (_time.perf_counter() - t0), workers, gap_limit, patience_s)
    wall = _time.perf_counter() - t0
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        what = "infeasible" if status == cp_model.INFEASIBLE else f"no routing within {time_limit_s:g} s"
        raise SynthesisError(f"stage 1 (routing): {what}")
    sends = tuple(
        sorted((c, u, v) for c, links in m.cands.items() for u, v in links if solver.boolean_value(m.sent((c, u, v))))
    )
    return Routing(prune_sends(sends, m.origin, m.dests), _outcome(solver, status, wall))


class _RoutingModel:
    """The stage-1 CP-SAT model, built one group of TACCL's equations at a
    time (Appendix B.1). Variables are shared along the sketch's chunk
    symmetries: one ``sent`` Boolean per orbit of (chunk, link) and one start
    time per orbit of (chunk, rank); an orbit whose image leaves the candidate
    links is fixed to 0."""

    def __init__(self, logical: LogicalTopology, collective: Collective, chunk_bytes: float, paths: str) -> None:
        self.logical = logical
        self.origin, self.dests = chunk_endpoints(collective)
        self.cands = candidate_links(logical, collective, paths)
        self.lat = {key: lat_ns(logical, key, chunk_bytes) for key in logical.links}
        self.sent_orbits, self.start_orbits, self.dead_roots = self._orbits(chunk_symmetries(logical, collective))
        self.model = cp_model.CpModel()
        self.horizon = sum(self.lat.values()) * max(1, collective.num_chunks) + 1
        self.time = self.model.new_int_var(0, self.horizon, "time")
        self._sent: dict = {}
        self._start: dict = {}
        self.incoming: dict[tuple[int, int], list] = defaultdict(list)  # filled by add_arrivals
        self.per_link: dict[tuple[int, int], list] = defaultdict(list)

    def _orbits(self, symmetries) -> tuple[_Orbits, _Orbits, set]:
        allowed = {(c, u, v) for c, links in self.cands.items() for u, v in links}
        sent_orbits, start_orbits = _Orbits(), _Orbits()
        dead: set = set()
        for rank_map, chunk_map in symmetries:
            for c, u, v in allowed:
                image = (chunk_map[c], rank_map[u], rank_map[v])
                if image in allowed:
                    sent_orbits.union((c, u, v), image)
                else:
                    dead.add((c, u, v))
            for c, ds in self.dests.items():
                for r in ds | {self.origin[c]}:
                    start_orbits.union((c, r), (chunk_map[c], rank_map[r]))
        return sent_orbits, start_orbits, {sent_orbits.find(k) for k in dead}

    def sent(self, key):
        """Whether chunk ``c`` is sent over link (u, v), ``key = (c, u, v)``."""
        root = self.sent_orbits.find(key)
        if root not in self._sent:
            dead = root in self.dead_roots
            self._sent[root] = self.model.new_constant(0) if dead else self.model.new_bool_var(f"s{root}")
        return self._sent[root]

    def start(self, c: int, r: int):
        """When chunk ``c`` is at rank ``r`` (0 at its origin)."""
        if r == self.origin[c]:
            return 0
        root = self.start_orbits.find((c, r))
        if root not in self._start:
            self._start[root] = self.model.new_int_var(0, self.horizon, f"t{root}")
        return self._start[root]

    def add_arrivals(self) -> None:
        """Eqs. 4-5: a chunk sent over (u, v) is at v one link latency after it
        was at u. Comes first: it creates the variables (each send's, then its
        start times, in the order CP-SAT's deterministic search depends on) and
        indexes the sends by receiver and by link for the other groups."""
        seen: set = set()
        for c, links in self.cands.items():
            for u, v in links:
                x = self.sent((c, u, v))
                self.incoming[(c, v)].append(x)
                self.per_link[(u, v)].append(x)
                root = self.sent_orbits.find((c, u, v))
                if root in seen:
                    continue
                seen.add(root)
                if u != self.origin[c]:
                    self.model.add(self.start(c, v) >= self.start(c, u) + self.lat[(u, v)]).only_enforce_if(x)
                else:
                    self.model.add(self.start(c, v) >= self.lat[(u, v)]).only_enforce_if(x)

    def add_delivery(self) -> None:
        """Every destination receives its chunk exactly once (eq. 2: the time
        covers its arrival), other ranks at most once; a rank forwards only
        what it received; a chunk bound for another node crosses an
        inter-node link (eq. 15)."""
        model, logical = self.model, self.logical
        receivers: dict[int, set[int]] = defaultdict(set)
        for c, links in self.cands.items():
            for _, v in links:
                receivers[c].add(v)
        for c, ds in self.dests.items():
            for r in ds:
                if not self.incoming.get((c, r)):
                    raise SynthesisError(f"chunk {c} cannot reach rank {r} over the sketch's logical topology")
            for r in receivers[c]:
                xs = self.incoming[(c, r)]
                if r in ds:
                    model.add_exactly_one(xs)
                    model.add(self.time >= self.start(c, r))
                else:
                    model.add_at_most_one(xs)
            for u, v in self.cands[c]:
                if u != self.origin[c] and u not in ds:
                    model.add_implication(self.sent((c, u, v)), _any(model, self.incoming[(c, u)]))
            if any(logical.node(r) != logical.node(self.origin[c]) for r in ds):
                cross = [self.sent((c, u, v)) for u, v in self.cands[c] if logical.links[(u, v)].internode]
                model.add(sum(cross) >= 1)

    def add_bandwidth(self) -> None:
        """Eq. 6: a link is busy for its chunks' latencies; eqs. 7-8: so is
        each GPU's switch and NIC hyperedge, per direction."""
        egress: dict[tuple[int, bool], list] = defaultdict(list)
        ingress: dict[tuple[int, bool], list] = defaultdict(list)
        for link, xs in self.per_link.items():
            self.model.add(self.time >= self.lat[link] * sum(xs))
            lk = self.logical.links[link]
            if lk.switched or lk.internode:
                egress[(link[0], lk.internode)] += [self.lat[link] * x for x in xs]
                ingress[(link[1], lk.internode)] += [self.lat[link] * x for x in xs]
        for terms in list(egress.values()) + list(ingress.values()):
            self.model.add(self.time >= sum(terms))

    def add_utilisation(self) -> None:
        """Eqs. 9-11 and the objective: time, plus (uc-min) or minus (uc-max)
        one per switch link used, as the sketch's hyperedge policy asks."""
        util_terms = []
        for link, lk in self.logical.links.items():
            if not lk.switched or lk.policy == "free":
                continue
            xs = self.per_link.get(link, [])
            util = self.model.new_bool_var(f"u{link}")
            for x in xs:
                self.model.add_implication(x, util)
            self.model.add(util <= sum(xs)) if xs else self.model.add(util == 0)
            util_terms.append(util if lk.policy == "uc-min" else -util)
        self.model.minimize(self.time + sum(util_terms))


def run_solver(
    model: cp_model.CpModel, time_limit_s: float, workers: int, gap_limit: float, patience_s: float | None = None
) -> tuple[cp_model.CpSolver, int]:
    """Solve with a time limit, a relative gap limit and, when ``patience_s``
    is given, a stop once no better solution has come for that long (the
    best one is kept, as on the time limit)."""
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(0.05, time_limit_s)
    solver.parameters.num_workers = workers
    # the same answer on every run: workers take turns in fixed batches instead of racing (OR-Tools sat_parameters)
    solver.parameters.interleave_search = True
    solver.parameters.random_seed = 0
    solver.parameters.relative_gap_limit = gap_limit
    if patience_s is None:
        return solver, solve_interruptibly(solver, model)
    last = [_time.perf_counter()]
    done = threading.Event()

    class _Improved(cp_model.CpSolverSolutionCallback):
        def on_solution_callback(self) -> None:
            last[0] = _time.perf_counter()

    def watch() -> None:
        while not done.wait(0.1):
            if _time.perf_counter() - last[0] > patience_s:
                solver.stop_search()
                return

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        status = solve_interruptibly(solver, model, _Improved())
    finally:
        done.set()
        watcher.join()
    return solver, status


def _outcome(solver: cp_model.CpSolver, status, wall: float) -> StageOutcome:
    """ "optimal" only when the bound meets the objective; a stop at the
    relative gap limit or the time limit is "feasible" with its gap."""
    objective, bound = int(round(solver.objective_value)), solver.best_objective_bound
    proven = status == cp_model.OPTIMAL and bound >= objective - 1e-6
    return StageOutcome("optimal" if proven else "feasible", wall, objective, bound)


def _any(model: cp_model.CpModel, xs: list):
    if len(xs) == 1:
        return xs[0]
    b = model.new_bool_var("")
    model.add_max_equality(b, xs)
    return b


def prune_sends(sends, origin: dict[int, int], dests: dict[int, frozenset[int]]) -> tuple[tuple[int, int, int], ...]:
    """Drop sends to ranks that neither need the chunk nor forward it onwards
    (harmless to the relaxed objective, wasteful in a real schedule)."""
    keep = set(sends)
    changed = True
    while changed:
        changed = False
        forwards = {(c, u) for c, u, _ in keep}
        for c, u, v in list(keep):
            if v not in dests.get(c, ()) and (c, v) not in forwards:
                keep.discard((c, u, v))
                changed = True
    return tuple(sorted(keep))

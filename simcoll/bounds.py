"""Lower bounds on steps, rounds and time (the inputs of SCCL's Algorithm 1).

- **Steps** (latency bound a_l): every chunk must travel from a rank holding
  it to every rank needing it, one hop of the logical GPU graph per step; for
  Allgather this is the diameter (SCCL §3.7).
- **Rounds per chunk** (bandwidth bound b_l, SCCL's inverse bisection
  bandwidth generalised to every cut): for a set S of ranks, the chunks needed
  in S that start outside it must cross into S, at most ``cap(S)`` chunks per
  round, where ``cap(S)`` is the min cut (max flow) from the other GPUs into S
  over the whole topology, switches included, every link on a GPU-to-GPU route
  (:mod:`simcoll.routes`) carrying one chunk per round. So ``R/C >= needed(S) / (C · cap(S))`` for every S.
- **Time** (with a cost model): the same cuts with capacities in bytes/s over
  every link give ``T >= needed_bytes(S) / cap_Bps(S)``, hence a bound on algbw.

In-network reduction: on a machine with a switch that reduces and multicasts
(NVLink SHARP, IB SHARP; topology ``reduce: true, multicast: true``), the
Allreduce time bound is that of one send and one receive of the buffer:
the sum of the inputs in S can be reduced inside S (or in a switch) and the
result multicast, so only ``N`` bytes must leave and ``N`` enter every proper
rank set S, giving ``T >= max_S N / cap_Bps(S)``. For P GPUs of per-GPU
bandwidth B this is ``N / B``, i.e. busbw up to ``2 (P-1)/P · B``, where the
point-to-point bound (ReduceScatter + Allgather) allows ``B``. The switch's
own reduce rate is not counted (the bound stays a bound).

Combining collectives count the partial reductions that must enter S. For
Allreduce we report the ReduceScatter + Allgather composition (SCCL §3.5), the
form SCCL synthesizes. Every cut is enumerated up to 16 ranks (``exact``);
above that a fixed family (single ranks, nodes, halves and their complements)
still gives valid, possibly looser, bounds. A cut's capacity is a maximum flow;
two cuts that a symmetry of the topology maps onto each other (swapping a node
of a cluster with the first, :meth:`simcoll.routes.Routes.swap_to_first_node`)
have the same one, so it is solved once per class: 24 flows instead of 18,444
on ``dgx-h100*1024``. The chunk counts and the flow graph grow with the square
of the rank count; a bound whose arrays would pass
:data:`simcoll.limits.MAX_RANK_PAIR_BYTES` is refused before they are built.
"""

from __future__ import annotations

import contextvars
import math
import time
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from fractions import Fraction

import networkx as nx
import numpy as np
from ortools.graph.python import max_flow
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import shortest_path

from .arrays import flatten, ragged_indices
from .collectives import Collective, make_collective
from .errors import CollectiveError, OptionError, SolverError
from .limits import check_rank_pair_bytes
from .machines import Machine, as_machine
from .topology import Topology, directed_pairs
from .units import check_size_bytes

EXHAUSTIVE_MAX_RANKS = 16
_INF = 2**50


@dataclass(frozen=True)
class Bounds:
    """Lower bounds for one collective on one machine."""

    min_steps: int
    min_rounds_per_chunk: Fraction
    exact: bool
    time_bound_s: float | None = None
    algbw_bound_GBps: float | None = None
    size_bytes: int | None = None


class _CutSolver:
    """Max flow from a set of GPUs to the rest, over the topology graph."""

    def __init__(self, topology: Topology, capacity_of):
        names = [c.name for c in topology.components]
        index = {n: i for i, n in enumerate(names)}
        self.solver = max_flow.SimpleMaxFlow()
        for link in topology.links:
            cap = capacity_of(link)
            for a, b in directed_pairs(link):
                self.solver.add_arc_with_capacity(index[a], index[b], cap)
        self.source, self.sink = len(names), len(names) + 1
        gpus = [index[g.name] for g in topology.gpus]
        self.source_arcs = [self.solver.add_arc_with_capacity(self.source, g, 0) for g in gpus]
        self.sink_arcs = [self.solver.add_arc_with_capacity(g, self.sink, 0) for g in gpus]
        self._inside: np.ndarray | None = None  # the mask the source and sink arcs are set for
        self._solved: dict[Hashable, int] = {}

    def into(self, inside: np.ndarray, key: Hashable = None) -> int:
        """Max flow from the GPUs outside the mask into the GPUs inside it; a
        cut whose ``key`` was solved before (a symmetric image: :func:`_cut_family`) is not solved again."""
        if key is not None and key in self._solved:
            return self._solved[key]
        _on_time("solving the cuts' maximum flows")
        inside = np.asarray(inside, dtype=bool)
        # only the ranks that changed sides since the last cut (a rank or a node on 1,024 GPUs)
        changed = range(len(inside)) if self._inside is None else np.flatnonzero(inside != self._inside).tolist()
        for rank in changed:
            is_in = inside[rank]
            self.solver.set_arc_capacity(self.source_arcs[rank], 0 if is_in else _INF)
            self.solver.set_arc_capacity(self.sink_arcs[rank], _INF if is_in else 0)
        self._inside = inside.copy()
        status = self.solver.solve(self.source, self.sink)
        if status != self.solver.OPTIMAL:  # pragma: no cover - only on overflow
            raise SolverError(f"max-flow solver returned status {status}")
        if key is not None:
            self._solved[key] = self.solver.optimal_flow()
        return self.solver.optimal_flow()


def _cut_family(machine: Machine) -> tuple[list[np.ndarray], list[Hashable], bool]:
    """The cuts the bounds take the maximum over (module docstring), each with a
    key that two cuts share when a symmetry of the topology maps one onto the
    other (their maximum flows are equal), and whether the family is every cut."""
    topology = machine.topology
    p = topology.num_ranks
    if p <= EXHAUSTIVE_MAX_RANKS:
        masks = [np.array([(m >> r) & 1 for r in range(p)], dtype=bool) for m in range(1, 2**p - 1)]
        return masks, list(range(len(masks))), True
    routes = machine.routes
    masks: list[np.ndarray] = []
    keys: list[Hashable] = []

    def add(ranks: Sequence[int] | range, key: Hashable) -> None:
        mask = np.zeros(p, dtype=bool)
        mask[list(ranks)] = True
        if 0 < mask.sum() < p:
            masks.append(mask)
            keys.append(key)

    for r in range(p):  # a rank's image in the first node where its node can be swapped with it
        perm = routes.first_node_permutation(r)
        add([r], ("rank", r if perm is None else int(perm[r])))
    for n in topology.nodes:
        ranks = topology.ranks_of_node(n)
        add(ranks, ("node", n if routes.first_node_permutation(ranks[0]) is None else topology.nodes[0]))
    for i, half in enumerate((range(p // 2), range(p // 2, p), range(0, p, 2))):
        add(half, ("half", i))
    # the sets, then their complements: consecutive cuts differ in a few ranks (:meth:`_CutSolver.into`)
    return masks + [~mask for mask in masks], keys + [("not", key) for key in keys], False


def _check_cut_bound_memory(collective: Collective, topology: Topology) -> None:
    """Refuse, before its cuts are built, a cut bound whose arrays would be too
    large (:func:`simcoll.limits.check_rank_pair_bytes`): the cut masks and their
    float products (``cuts × P``, ~20 bytes each; :func:`_cut_family` has at most
    ``2 (P + nodes + 3)`` cuts above 16 ranks), and the chunk-by-rank matrices
    (``chunks × P`` float32, two) or, for chunks one rank holds and one other
    wants, the ``P × P`` pair counts."""
    p = collective.num_ranks
    cuts = 2**p if p <= EXHAUSTIVE_MAX_RANKS else 2 * (p + len(topology.nodes) + 3)
    estimate = 20 * cuts * p + max(8 * collective.num_chunks * p, 8 * p * p)
    check_rank_pair_bytes(estimate, f"the cut bound of {collective.name} on {p:,} ranks")


def _needed_chunks(collective: Collective, masks: list[np.ndarray]) -> np.ndarray:
    """For each cut mask, the number of chunks that must enter it: a chunk
    wanted inside S that no rank of S holds, or, combining, a chunk wanted
    inside S with a contribution outside it.

    A chunk one rank holds and one other wants (an Alltoall's P² chunks)
    enters S when its holder is outside and its receiver inside whether or
    not it combines, so those are counted per (holder, receiver) pair, from
    a P × P matrix; the others chunk by chunk."""
    if not masks:
        return np.zeros(0, dtype=int)
    p, g = collective.num_ranks, collective.num_chunks
    inside = np.stack(masks)  # cuts × ranks
    pre_rank, pre_chunk = flatten(collective.input_layout)
    post_rank, post_chunk = flatten(collective.output_layout)
    single = (np.bincount(pre_chunk, minlength=g) == 1) & (np.bincount(post_chunk, minlength=g) == 1)
    needed = np.zeros(len(masks))
    if single.any():
        holder, receiver = np.zeros(g, dtype=np.int64), np.zeros(g, dtype=np.int64)
        holder[pre_chunk], receiver[post_chunk] = pre_rank, post_rank
        c = np.flatnonzero(single)
        chunks_between = np.bincount(holder[c] * p + receiver[c], minlength=p * p).reshape(p, p).astype(float)
        needed += (((~inside).astype(float) @ chunks_between) * inside).sum(axis=1)  # held outside, wanted inside
    rest = np.flatnonzero(~single)
    if rest.size:
        row = np.full(g, -1, dtype=np.int64)
        row[rest] = np.arange(rest.size)
        pre, post = (np.zeros((rest.size, p), dtype=np.float32) for _ in range(2))  # (counts < 2^24: exact)
        for matrix, chunk, rank in ((pre, pre_chunk, pre_rank), (post, post_chunk, post_rank)):
            kept = row[chunk] >= 0
            matrix[row[chunk[kept]], rank[kept]] = 1.0
        wanted_inside = (post @ inside.T.astype(np.float32)) > 0  # chunks × cuts
        if collective.combining:
            needed += (wanted_inside & ((pre @ (~inside).T.astype(np.float32)) > 0)).sum(axis=0)
        else:
            needed += (wanted_inside & ~((pre @ inside.T.astype(np.float32)) > 0)).sum(axis=0)
    return needed.astype(np.int64)


def min_steps(collective: Collective, machine: Machine | str) -> int:
    """Latency lower bound a_l on the steps of any algorithm.

    The longest shortest path, in the logical GPU graph, that any chunk or
    contribution must travel; for Allreduce the sum over its ReduceScatter
    and Allgather halves.

    Parameters
    ----------
    collective : Collective
        The collective, on the machine's rank count.
    machine : Machine or str
        The machine (or a topology spec); only its topology matters.

    Returns
    -------
    int
        The minimum number of steps.

    Raises
    ------
    networkx.NetworkXNoPath
        When a chunk cannot reach a rank that needs it.

    References
    ----------
    .. [1] Cai et al., "Synthesizing Optimal Collective Algorithms" (SCCL),
       PPoPP 2021, §3.7 (a_l; the diameter for Allgather) and §3.5 (Allreduce).

    Examples
    --------
    >>> from simcoll import make_collective
    >>> min_steps(make_collective("allgather", 8), "dgx1")  # the diameter of the hybrid cube mesh
    2
    >>> min_steps(make_collective("allreduce", 8), "ring:8")
    8
    """
    machine = as_machine(machine)
    p = machine.num_ranks  # the P x P distances and masks, and the hops of every (holder, wanting rank) pair
    check_rank_pair_bytes(48 * p * p, f"the step bound of {collective.name} on {p:,} ranks (rank distances)")
    dist = _rank_distances(machine)  # (once: an Allreduce's two halves read the same distances)
    if collective.name == "allreduce":
        rs, ag = _halves(collective)
        return _min_steps(rs, machine, dist) + _min_steps(ag, machine, dist)
    return _min_steps(collective, machine, dist)


def _min_steps(collective: Collective, machine: Machine, dist: np.ndarray) -> int:
    """:func:`min_steps` of a collective other than Allreduce, from the rank distances ``dist``."""
    # every (chunk c, rank n) the collective needs, against every rank holding c at the start
    pre_rank, pre_chunk = flatten(collective.input_layout)
    post_rank, post_chunk = flatten(collective.output_layout)
    if not len(post_rank):
        return 0
    by_chunk = np.argsort(pre_chunk, kind="stable")
    holders_sorted = pre_rank[by_chunk]
    first = np.searchsorted(pre_chunk[by_chunk], post_chunk, side="left")
    count = np.searchsorted(pre_chunk[by_chunk], post_chunk, side="right") - first
    if (count == 0).any():
        j = int(np.flatnonzero(count == 0)[0])
        raise nx.NetworkXNoPath(f"{machine.topology.name}: no rank holds chunk {post_chunk[j]} at the start")
    hops = dist[holders_sorted[ragged_indices(first, count)], np.repeat(post_rank, count)]
    starts = np.concatenate(([0], np.cumsum(count)[:-1]))
    # a contribution must come from every holder (combining); a copy from the nearest one
    needed = np.maximum.reduceat(hops, starts) if collective.combining else np.minimum.reduceat(hops, starts)
    if not np.isfinite(needed).all():
        j = int(np.flatnonzero(~np.isfinite(needed))[0])
        raise nx.NetworkXNoPath(f"{machine.topology.name}: chunk {post_chunk[j]} cannot reach rank {post_rank[j]}")
    return int(needed.max(initial=0))


def _rank_distances(machine: Machine) -> np.ndarray:
    """Hops between every pair of ranks in the logical GPU graph (an edge
    wherever a route exists), inf where none, as a P x P array: a breadth-first
    search from every rank in C, or none where every rank reaches every other
    (a cluster's fat tree: every distance 1)."""
    routes, p = machine.routes, machine.num_ranks
    reach = np.stack([routes.reachable_mask(s) for s in range(p)]) if p else np.zeros((0, 0), bool)
    if reach.sum() == p * (p - 1):
        dist = np.ones((p, p))
        np.fill_diagonal(dist, 0.0)
        return dist
    src, dst = np.nonzero(reach)
    return shortest_path(csr_matrix((np.ones(len(src)), (src, dst)), shape=(p, p)), unweighted=True)


def _halves(allreduce: Collective) -> tuple[Collective, Collective]:
    """ReduceScatter and Allgather instances whose composition is the Allreduce,
    each with one chunk per rank (bounds are per chunk, so the factor cancels)."""
    p = allreduce.num_ranks
    return make_collective("reducescatter", p, 1), make_collective("allgather", p, 1)


def min_rounds_per_chunk(collective: Collective, machine: Machine | str) -> tuple[Fraction, bool]:
    """Bandwidth lower bound b_l on R/C, the rounds per chunk of any algorithm.

    For every cut S, the chunks needed in S that start outside it cross into
    S at most ``cap(S)`` per round (module docstring). For Allreduce the sum
    of its ReduceScatter and Allgather bounds over P, as its C counts the
    whole buffer.

    Parameters
    ----------
    collective : Collective
        The collective, on the machine's rank count.
    machine : Machine or str
        The machine (or a topology spec); only its topology matters.

    Returns
    -------
    bound : fractions.Fraction
        The minimum rounds per chunk.
    exact : bool
        Whether every cut was enumerated (at most 16 ranks).

    Raises
    ------
    networkx.NetworkXNoPath
        When no link reaches some set of ranks that needs chunks.

    References
    ----------
    .. [1] Cai et al., "Synthesizing Optimal Collective Algorithms" (SCCL),
       PPoPP 2021, §3.7 (b_l, the inverse bisection bandwidth).

    Examples
    --------
    >>> from simcoll import make_collective
    >>> min_rounds_per_chunk(make_collective("allgather", 8), "dgx1")  # SCCL Table 3: 7/6
    (Fraction(7, 6), True)
    """
    machine = as_machine(machine)
    topology = machine.topology
    if collective.name == "allreduce":
        rs, ag = _halves(collective)
        (b_rs, exact_rs), (b_ag, exact_ag) = min_rounds_per_chunk(rs, machine), min_rounds_per_chunk(ag, machine)
        return (b_rs + b_ag) / collective.num_ranks, exact_rs and exact_ag
    _check_cut_bound_memory(collective, topology)
    masks, keys, exact = _cut_family(machine)
    needed = _needed_chunks(collective, masks)
    on_routes = machine.routes.hops_on_routes()

    def chunks_per_round(link) -> int:  # links no GPU route uses (a DGX-2's PCIe) carry no chunks
        return link.count if any((a, b, link.type) in on_routes for a, b in directed_pairs(link)) else 0

    solver = _CutSolver(topology, chunks_per_round)
    best = Fraction(0)
    for mask, key, need in zip(masks, keys, needed, strict=True):
        if need == 0:
            continue
        cap = solver.into(mask, key)
        if cap == 0:
            raise nx.NetworkXNoPath(f"{topology.name}: no link reaches ranks {np.flatnonzero(mask).tolist()}")
        best = max(best, Fraction(int(need), cap * collective.chunk_factor))
    return best, exact


def time_lower_bound_s(collective: Collective, machine: Machine | str, size_bytes: float) -> tuple[float, bool]:
    """Bandwidth-only lower bound on the time of any algorithm (latency ignored).

    The cuts of :func:`min_rounds_per_chunk`, with capacities in bytes per
    second over every link: ``T >= needed_bytes(S) / cap_Bps(S)``.

    Parameters
    ----------
    collective : Collective
        The collective, on the machine's rank count.
    machine : Machine or str
        The machine (or a topology spec with its default model).
    size_bytes : float
        The buffer the collective is named by (nccl-tests convention).

    Returns
    -------
    time_s : float
        The bound in seconds.
    exact : bool
        Whether every cut was enumerated.

    References
    ----------
    .. [1] Cai et al., "Synthesizing Optimal Collective Algorithms" (SCCL),
       PPoPP 2021, §3.7 (the cut bound, here in bytes per second).

    Examples
    --------
    >>> from simcoll import make_collective
    >>> t, exact = time_lower_bound_s(make_collective("allgather", 4), "ring:4", 4e6)
    >>> round(t * 1e6, 1), exact  # 3 MB into a rank over two 25 GB/s links
    (60.0, True)
    """
    machine = as_machine(machine)
    if collective.name == "allreduce" and any(c.multicast for c in machine.topology.reducing_switches()):
        return _in_network_allreduce_bound_s(collective, machine, size_bytes)
    if collective.name == "allreduce":
        rs, ag = _halves(collective)
        t_rs, e_rs = time_lower_bound_s(rs, machine, size_bytes)
        t_ag, e_ag = time_lower_bound_s(ag, machine, size_bytes)
        return t_rs + t_ag, e_rs and e_ag
    topology = machine.topology
    _check_cut_bound_memory(collective, topology)
    masks, keys, exact = _cut_family(machine)
    needed = _needed_chunks(collective, masks)
    # Integer capacities for the flow solver: kB/s keeps 1e-3 relative precision at worst.
    solver = _CutSolver(topology, lambda link: round(link.count * machine.model.link(link.type).bandwidth_Bps / 1e3))
    # positive and finite; not the one-byte-a-chunk rule: the bound is linear, and Allreduce's halves split chunks finer
    nbytes = check_size_bytes(size_bytes) / collective.size_chunks
    best = 0.0
    for mask, key, need in zip(masks, keys, needed, strict=True):
        if need:
            cap_Bps = solver.into(mask, key) * 1e3
            best = max(best, need * nbytes / cap_Bps)
    return float(best), exact


def _in_network_allreduce_bound_s(collective: Collective, machine: Machine, size_bytes: float) -> tuple[float, bool]:
    """Allreduce with in-switch reduction: ``max_S N / cap_Bps(S)`` (module docstring)."""
    topology = machine.topology
    _check_cut_bound_memory(collective, topology)
    masks, keys, exact = _cut_family(machine)
    solver = _CutSolver(topology, lambda link: round(link.count * machine.model.link(link.type).bandwidth_Bps / 1e3))
    nbytes = check_size_bytes(size_bytes)
    best = max((nbytes / (solver.into(mask, key) * 1e3) for mask, key in zip(masks, keys, strict=True)), default=0.0)
    return float(best), exact


#: (deadline, limit) of the :func:`lower_bounds` call in progress, or None: every cut's max flow checks it.
_DEADLINE: contextvars.ContextVar[tuple[float, float] | None] = contextvars.ContextVar("bounds_deadline", default=None)


def _on_time(doing: str) -> None:
    """Raise :class:`~simcoll.errors.SolverError` past the deadline of the :func:`lower_bounds` call."""
    limit = _DEADLINE.get()
    if limit is not None and time.perf_counter() > limit[0]:
        raise SolverError(f"lower bounds: the time limit of {limit[1]:g} s was reached {doing} (raise it)")


def lower_bounds(
    collective: Collective, machine: Machine | str, size_bytes: int | None = None, *, time_limit_s: float | None = None
) -> Bounds:
    """Every lower bound for a collective on a machine at once.

    Parameters
    ----------
    collective : Collective
        The collective, on the machine's rank count.
    machine : Machine or str
        The machine (or a topology spec with its default model).
    size_bytes : int, optional
        The buffer size; with it the time and algbw bounds are filled in.
    time_limit_s : float, optional
        Wall-clock limit in seconds (default none): a machine of thousands of
        GPUs has tens of thousands of cuts, each a maximum flow.

    Returns
    -------
    Bounds
        :func:`min_steps`, :func:`min_rounds_per_chunk` and, with a size,
        :func:`time_lower_bound_s` and the algbw it allows.

    Raises
    ------
    CollectiveError
        When the collective is on another rank count.
    OptionError
        When ``time_limit_s`` is not a positive number.
    SolverError
        When ``time_limit_s`` passes before the bounds are known.

    References
    ----------
    .. [1] Cai et al., "Synthesizing Optimal Collective Algorithms" (SCCL),
       PPoPP 2021, §3.7.

    Examples
    --------
    >>> from simcoll import make_collective
    >>> b = lower_bounds(make_collective("allgather", 8), "dgx1", 1 << 30)
    >>> b.min_steps, b.min_rounds_per_chunk, b.exact, round(b.algbw_bound_GBps, 1)
    (2, Fraction(7, 6), True, 171.4)
    """
    machine = as_machine(machine)
    topology = machine.topology
    if collective.num_ranks != topology.num_ranks:
        raise CollectiveError(
            f"collective is on {collective.num_ranks} ranks but {topology.name} has {topology.num_ranks}"
        )
    if time_limit_s is not None and not (isinstance(time_limit_s, (int, float)) and 0 < time_limit_s < math.inf):
        raise OptionError(f"time_limit_s must be a positive number of seconds, got {time_limit_s!r}")
    token = _DEADLINE.set(None if time_limit_s is None else (time.perf_counter() + time_limit_s, time_limit_s))
    try:
        steps = min_steps(collective, machine)
        rounds, exact = min_rounds_per_chunk(collective, machine)
        if size_bytes:
            t, exact_t = time_lower_bound_s(collective, machine, size_bytes)
            return Bounds(steps, rounds, exact and exact_t, t, size_bytes / t / 1e9 if t else None, size_bytes)
        return Bounds(steps, rounds, exact)
    finally:
        _DEADLINE.reset(token)


__all__ = ["Bounds", "lower_bounds", "min_rounds_per_chunk", "min_steps", "time_lower_bound_s"]

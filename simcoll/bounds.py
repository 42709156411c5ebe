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

Combining collectives count the partial reductions that must enter S. For
Allreduce we report the ReduceScatter + Allgather composition (SCCL §3.5), the
form SCCL synthesizes. Every cut is enumerated up to 16 ranks (``exact``);
above that a fixed family (single ranks, nodes, halves and their complements)
still gives valid, possibly looser, bounds.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import networkx as nx
import numpy as np
from ortools.graph.python import max_flow

from .analytic import chunk_bytes
from .collectives import Collective, make_collective
from .errors import CollectiveError
from .machines import Machine
from .routes import Routes
from .topology import Topology, directed_pairs

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

    def into(self, inside: np.ndarray) -> int:
        """Max flow from the GPUs outside the mask into the GPUs inside it."""
        for rank, is_in in enumerate(inside):
            self.solver.set_arc_capacity(self.source_arcs[rank], 0 if is_in else _INF)
            self.solver.set_arc_capacity(self.sink_arcs[rank], _INF if is_in else 0)
        status = self.solver.solve(self.source, self.sink)
        if status != self.solver.OPTIMAL:  # pragma: no cover - only on overflow
            raise RuntimeError(f"max-flow solver returned status {status}")
        return self.solver.optimal_flow()


def _cut_family(topology: Topology) -> tuple[list[np.ndarray], bool]:
    p = topology.num_ranks
    if p <= EXHAUSTIVE_MAX_RANKS:
        masks = [np.array([(m >> r) & 1 for r in range(p)], dtype=bool) for m in range(1, 2**p - 1)]
        return masks, True
    sets = [{r} for r in range(p)]
    sets += [set(topology.ranks_of_node(n)) for n in topology.nodes]
    sets += [set(range(p // 2)), set(range(p // 2, p)), set(range(0, p, 2))]
    masks = []
    for s in sets:
        mask = np.array([r in s for r in range(p)], dtype=bool)
        if 0 < mask.sum() < p:
            masks += [mask, ~mask]
    return masks, False


def _needed_chunks(collective: Collective, masks: list[np.ndarray]) -> np.ndarray:
    """For each cut mask, the number of chunks that must enter it."""
    p, g = collective.num_ranks, collective.num_chunks
    pre = np.zeros((g, p), dtype=bool)
    post = np.zeros((g, p), dtype=bool)
    for c, r in collective.pre:
        pre[c, r] = True
    for c, r in collective.post:
        post[c, r] = True
    if not masks:
        return np.zeros(0, dtype=int)
    inside = np.stack(masks)  # cuts × ranks
    wanted_inside = (post.astype(int) @ inside.T.astype(int)) > 0  # chunks × cuts
    if collective.combining:
        held_outside = (pre.astype(int) @ (~inside).T.astype(int)) > 0
        return (wanted_inside & held_outside).sum(axis=0)
    held_inside = (pre.astype(int) @ inside.T.astype(int)) > 0
    return (wanted_inside & ~held_inside).sum(axis=0)


def min_steps(collective: Collective, topology: Topology, routes: Routes | None = None) -> int:
    """Latency lower bound: the longest shortest path (in the logical GPU graph)
    any chunk or contribution must travel. Allreduce: ReduceScatter + Allgather."""
    if collective.name == "allreduce":
        rs, ag = _halves(collective)
        return min_steps(rs, topology, routes) + min_steps(ag, topology, routes)
    graph = (routes or Routes(topology)).logical_graph()
    dist = dict(nx.all_pairs_shortest_path_length(graph))
    holders: dict[int, set[int]] = {}
    for c, r in collective.pre:
        holders.setdefault(c, set()).add(r)
    worst = 0
    for c, n in collective.post:
        sources = holders.get(c, set())
        reach = [dist[h].get(n) for h in sources]
        if any(d is None for d in reach) and (collective.combining or all(d is None for d in reach)):
            raise nx.NetworkXNoPath(f"{topology.name}: chunk {c} cannot reach rank {n}")
        hops = [d for d in reach if d is not None]
        worst = max(worst, max(hops) if collective.combining else min(hops))
    return worst


def _halves(allreduce: Collective) -> tuple[Collective, Collective]:
    """ReduceScatter and Allgather instances whose composition is the Allreduce,
    each with one chunk per rank (bounds are per chunk, so the factor cancels)."""
    p = allreduce.num_ranks
    return make_collective("reducescatter", p, 1), make_collective("allgather", p, 1)


def min_rounds_per_chunk(collective: Collective, topology: Topology) -> tuple[Fraction, bool]:
    """Bandwidth lower bound R/C in rounds per chunk, and whether every cut was
    enumerated. Allreduce: (RS + AG bounds) / P, as its C counts the whole buffer."""
    if collective.name == "allreduce":
        rs, ag = _halves(collective)
        (b_rs, exact_rs), (b_ag, exact_ag) = min_rounds_per_chunk(rs, topology), min_rounds_per_chunk(ag, topology)
        return (b_rs + b_ag) / collective.num_ranks, exact_rs and exact_ag
    masks, exact = _cut_family(topology)
    needed = _needed_chunks(collective, masks)
    on_routes = Routes(topology).hops_on_routes()

    def chunks_per_round(link) -> int:  # links no GPU route uses (a DGX-2's PCIe) carry no chunks
        return link.count if any((a, b, link.type) in on_routes for a, b in directed_pairs(link)) else 0

    solver = _CutSolver(topology, chunks_per_round)
    best = Fraction(0)
    for mask, need in zip(masks, needed, strict=True):
        if need == 0:
            continue
        cap = solver.into(mask)
        if cap == 0:
            raise nx.NetworkXNoPath(f"{topology.name}: no link reaches ranks {np.flatnonzero(mask).tolist()}")
        best = max(best, Fraction(int(need), cap * collective.chunk_factor))
    return best, exact


def time_lower_bound_s(collective: Collective, machine: Machine, size_bytes: float) -> tuple[float, bool]:
    """Bandwidth-only lower bound on the time of any algorithm moving a
    ``size_bytes`` buffer (latency ignored), and whether it is exact over all cuts."""
    if collective.name == "allreduce":
        rs, ag = _halves(collective)
        t_rs, e_rs = time_lower_bound_s(rs, machine, size_bytes)
        t_ag, e_ag = time_lower_bound_s(ag, machine, size_bytes)
        return t_rs + t_ag, e_rs and e_ag
    topology = machine.topology
    masks, exact = _cut_family(topology)
    needed = _needed_chunks(collective, masks)
    # Integer capacities for the flow solver: kB/s keeps 1e-3 relative precision at worst.
    solver = _CutSolver(topology, lambda link: round(link.count * machine.model.link(link.type).bandwidth_Bps / 1e3))
    nbytes = chunk_bytes(collective, size_bytes)
    best = 0.0
    for mask, need in zip(masks, needed, strict=True):
        if need:
            cap_Bps = solver.into(mask) * 1e3
            best = max(best, need * nbytes / cap_Bps)
    return best, exact


def lower_bounds(collective: Collective, machine: Machine | Topology, size_bytes: int | None = None) -> Bounds:
    """All bounds at once; the time and algbw bounds need a Machine and a size."""
    topology = machine.topology if isinstance(machine, Machine) else machine
    routes = machine.routes if isinstance(machine, Machine) else Routes(topology)
    if collective.num_ranks != topology.num_ranks:
        raise CollectiveError(
            f"collective is on {collective.num_ranks} ranks but {topology.name} has {topology.num_ranks}"
        )
    steps = min_steps(collective, topology, routes)
    rounds, exact = min_rounds_per_chunk(collective, topology)
    if isinstance(machine, Machine) and size_bytes:
        t, exact_t = time_lower_bound_s(collective, machine, size_bytes)
        return Bounds(steps, rounds, exact and exact_t, t, size_bytes / t / 1e9 if t else None, size_bytes)
    return Bounds(steps, rounds, exact)


__all__ = ["Bounds", "lower_bounds", "min_rounds_per_chunk", "min_steps", "time_lower_bound_s"]

"""TACCL stage 2, heuristic ordering (TACCL §5.1 step 2, Appendix B.2).

Input: a :class:`Plan`, the transfers chosen by routing (or their inverse for
ReduceScatter, or both halves of an Allreduce) with their dependencies and
one-chunk link latencies. Output: ``chunk_order`` per link and
``switch_send_order`` / ``switch_recv_order`` per GPU hyperedge, plus the
greedy schedule that produced them (a feasible stage-3 schedule with no
contiguity, used as the stage-3 hint and upper bound).

The greedy keeps B.2's running estimates: a link time per link, a send and a
receive time per GPU hyperedge (NVSwitch and NIC separately), and a chunk
time per transfer (when its chunk is at the sender). Each round it schedules
the candidate that can start earliest; ties go to the chunk with the longest
path still ahead (*chunk-with-longest-path-from-now-first*), then to the one
with the shortest path behind it (*chunk-with-shortest-path-until-now-first*),
the two heuristics of §5.1 (and the reverse tie-break, and most-dependents-first:
the best of the three greedy schedules is kept).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass


@dataclass(frozen=True)
class PlannedTransfer:
    """Chunk ``chunk`` crosses logical link ``src -> dst``; it may start once
    every transfer in ``deps`` has arrived. ``lat_ns`` is one chunk's α + β·n
    (plus the reduction for ``op == "reduce"``), ``alpha_ns`` the α part."""

    chunk: int
    src: int
    dst: int
    op: str
    deps: tuple[int, ...]
    lat_ns: int
    alpha_ns: int
    send_group: str | None = None  # hyperedge kind at src ("switch", "nic") or None
    recv_group: str | None = None
    contiguous: bool = False  # may share a message with its neighbours in link order (IB)


@dataclass(frozen=True)
class Plan:
    transfers: tuple[PlannedTransfer, ...]


@dataclass(frozen=True)
class Ordering:
    """B.2's three outputs, as transfer indices, and the greedy times."""

    chunk_order: dict[tuple[int, int], tuple[int, ...]]
    switch_send_order: dict[tuple[int, str], tuple[int, ...]]
    switch_recv_order: dict[tuple[int, str], tuple[int, ...]]
    start_ns: tuple[int, ...]
    end_ns: tuple[int, ...]

    @property
    def makespan_ns(self) -> int:
        return max(self.end_ns, default=0)


HEURISTICS = ("longest-ahead", "shortest-behind", "most-dependents")


def heuristic_order(plan: Plan, heuristics: tuple[str, ...] = HEURISTICS) -> Ordering:
    """The greedy of the module docstring under each tie-break rule in
    ``heuristics`` (``"longest-ahead"``: longest path from now first, then
    shortest path until now; ``"shortest-behind"``: the two the other way
    round; ``"most-dependents"``: most transfers waiting on it first); the
    ordering with the shortest greedy makespan wins (B.2 leaves the choice
    of heuristic to the architecture)."""
    return min((_greedy(plan, h) for h in heuristics), key=lambda o: o.makespan_ns)


def _greedy(plan: Plan, heuristic: str) -> Ordering:
    ts = plan.transfers
    n = len(ts)
    succ: list[list[int]] = [[] for _ in range(n)]
    for i, t in enumerate(ts):
        for d in t.deps:
            succ[d].append(i)
    topo = _topological(ts, succ)
    ahead = [0] * n  # longest path from this transfer's start to the end
    for i in reversed(topo):
        ahead[i] = ts[i].lat_ns + max((ahead[s] for s in succ[i]), default=0)
    behind = [0] * n  # longest path from the collective's start to this transfer's start
    for i in topo:
        behind[i] = max((behind[d] + ts[d].lat_ns for d in ts[i].deps), default=0)
    dependents = [0] * n
    for i in reversed(topo):
        dependents[i] = len(succ[i]) + sum(dependents[s] for s in succ[i])
    if heuristic == "longest-ahead":
        first, second = [-a for a in ahead], behind
    elif heuristic == "shortest-behind":
        first, second = behind, [-a for a in ahead]
    elif heuristic == "most-dependents":
        first, second = [-d for d in dependents], [-a for a in ahead]
    else:
        raise ValueError(f"unknown ordering heuristic {heuristic!r}; known: {HEURISTICS}")

    link_free: dict[tuple[int, int], int] = {}
    send_free: dict[tuple[int, str], int] = {}
    recv_free: dict[tuple[int, str], int] = {}
    waiting = [len(t.deps) for t in ts]
    ready_at = [0] * n
    start = [0] * n
    end = [0] * n
    chunk_order: dict[tuple[int, int], list[int]] = {}
    send_order: dict[tuple[int, str], list[int]] = {}
    recv_order: dict[tuple[int, str], list[int]] = {}

    def earliest(i: int) -> int:
        t = ts[i]
        e = max(ready_at[i], link_free.get((t.src, t.dst), 0))
        if t.send_group:
            e = max(e, send_free.get((t.src, t.send_group), 0))
        if t.recv_group:
            e = max(e, recv_free.get((t.dst, t.recv_group), 0))
        return e

    heap = [(0, first[i], second[i], i) for i in range(n) if not ts[i].deps]
    heapq.heapify(heap)
    done = 0
    while heap:
        est, key1, key2, i = heapq.heappop(heap)
        now = earliest(i)
        if now > est:
            heapq.heappush(heap, (now, key1, key2, i))
            continue
        t = ts[i]
        start[i], end[i] = now, now + t.lat_ns
        link_free[(t.src, t.dst)] = end[i]
        chunk_order.setdefault((t.src, t.dst), []).append(i)
        if t.send_group:
            send_free[(t.src, t.send_group)] = end[i]
            send_order.setdefault((t.src, t.send_group), []).append(i)
        if t.recv_group:
            recv_free[(t.dst, t.recv_group)] = end[i]
            recv_order.setdefault((t.dst, t.recv_group), []).append(i)
        done += 1
        for s in succ[i]:
            ready_at[s] = max(ready_at[s], end[i])
            waiting[s] -= 1
            if waiting[s] == 0:
                heapq.heappush(heap, (earliest(s), first[s], second[s], s))
    if done != n:  # pragma: no cover - plans are built acyclic
        raise RuntimeError("heuristic ordering: the transfer dependencies have a cycle")
    return Ordering(
        {k: tuple(v) for k, v in chunk_order.items()},
        {k: tuple(v) for k, v in send_order.items()},
        {k: tuple(v) for k, v in recv_order.items()},
        tuple(start),
        tuple(end),
    )


def _topological(ts, succ) -> list[int]:
    indeg = [len(t.deps) for t in ts]
    stack = [i for i, d in enumerate(indeg) if d == 0]
    out = []
    while stack:
        i = stack.pop()
        out.append(i)
        for s in succ[i]:
            indeg[s] -= 1
            if indeg[s] == 0:
                stack.append(s)
    return out

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

:func:`improve_order` (an extension, not in TACCL) then shortens the greedy
schedule by forward-backward improvement (justification, from
resource-constrained project scheduling): alternate serial passes backward
and forward in time, with gap insertion, over the same unary resources
(links, switch and NIC send and receive ports). Its orders are read off the
improved schedule, so stage 3 receives orders with a shorter feasible
schedule as its hint and upper bound.
"""

from __future__ import annotations

import bisect
import heapq
import time
from dataclasses import dataclass

from ...errors import OptionError


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
    of heuristic to the architecture). An unknown name is an
    :class:`~simcoll.errors.OptionError` (a ValueError)."""
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
        raise OptionError(f"unknown ordering heuristic {heuristic!r}; known: {HEURISTICS}")

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


# ---------------------------------------------------------------------------
# Forward-backward improvement of the greedy schedule
# ---------------------------------------------------------------------------
def _resources(t: PlannedTransfer, port_covers_link: bool = True) -> tuple[tuple, ...]:
    """The unary resources a transfer holds while it runs: its logical link
    and, on hyperedges, the sender's send port and the receiver's receive port
    (the three kinds of order B.2 outputs). When every transfer on the link
    uses the same send port (``port_covers_link``, as in plans built from a
    logical topology: one hyperedge kind per link), the port stands for the link."""
    out: list[tuple] = []
    if not (t.send_group and port_covers_link):
        out.append(("link", t.src, t.dst))
    if t.send_group:
        out.append(("send", t.src, t.send_group))
    if t.recv_group:
        out.append(("recv", t.dst, t.recv_group))
    return tuple(out)


def _fit(starts: list[int], ends: list[int], t: int, d: int) -> int:
    """The earliest time >= ``t`` at which one resource (its busy intervals,
    sorted and disjoint) is idle for ``d``."""
    k = bisect.bisect_right(starts, t) - 1
    if k >= 0 and ends[k] > t:
        t = ends[k]
    k += 1
    while k < len(starts) and starts[k] < t + d:
        t = ends[k]
        k += 1
    return t


def _serial(
    durations: list[int],
    preds: list[list[int]],
    succs: list[list[int]],
    resources: list[tuple[tuple, ...]],
    priority: list[float],
) -> tuple[list[int], list[int]]:
    """Serial schedule generation with gap insertion: repeatedly take the
    eligible transfer (every predecessor placed) of lowest ``priority`` and
    place it at the earliest time after its predecessors at which all its
    resources are idle for its whole duration, possibly in a gap left
    earlier on a resource (the serial scheme of resource-constrained project
    scheduling, unary resources)."""
    n = len(durations)
    busy: dict[tuple, tuple[list[int], list[int]]] = {}  # resource -> (sorted starts, matching ends)
    start = [0] * n
    end = [0] * n
    waiting = [len(p) for p in preds]
    heap = [(priority[i], i) for i in range(n) if not preds[i]]
    heapq.heapify(heap)
    while heap:
        _, i = heapq.heappop(heap)
        d = durations[i]
        t = max((end[p] for p in preds[i]), default=0)
        lists = [busy.setdefault(r, ([], [])) for r in resources[i]]
        while True:
            before = t
            for starts, ends in lists:
                t = _fit(starts, ends, t, d)
            if t == before:
                break
        start[i], end[i] = t, t + d
        for starts, ends in lists:
            k = bisect.bisect_left(starts, t)
            starts.insert(k, t)
            ends.insert(k, t + d)
        for s in succs[i]:
            waiting[s] -= 1
            if waiting[s] == 0:
                heapq.heappush(heap, (priority[s], s))
    return start, end


def _from_schedule(plan: Plan, start: list[int], end: list[int]) -> Ordering:
    """B.2's orders read off a feasible schedule (each resource's transfers by start time)."""
    ts = plan.transfers
    chunk_order: dict[tuple[int, int], list[int]] = {}
    send_order: dict[tuple[int, str], list[int]] = {}
    recv_order: dict[tuple[int, str], list[int]] = {}
    for i in sorted(range(len(ts)), key=lambda i: (start[i], end[i], i)):
        t = ts[i]
        chunk_order.setdefault((t.src, t.dst), []).append(i)
        if t.send_group:
            send_order.setdefault((t.src, t.send_group), []).append(i)
        if t.recv_group:
            recv_order.setdefault((t.dst, t.recv_group), []).append(i)
    return Ordering(
        {k: tuple(v) for k, v in chunk_order.items()},
        {k: tuple(v) for k, v in send_order.items()},
        {k: tuple(v) for k, v in recv_order.items()},
        tuple(start),
        tuple(end),
    )


def improve_order(plan: Plan, ordering: Ordering, max_passes: int = 8, time_limit_s: float = 10.0) -> Ordering:
    """Forward-backward improvement (justification) of a stage-2 schedule; not
    in TACCL, which stops at the greedy of B.2.

    A backward pass schedules the mirrored problem (every dependency and
    every transfer reversed in time) serially, latest-finishing transfer
    first, which right-justifies the schedule; a forward pass then schedules
    the original problem serially, earliest-starting (in the justified
    schedule) first, with gap insertion (:func:`_serial`), which
    left-justifies it and pulls transfers into idle gaps the greedy left.
    Pairs of passes repeat while they shorten the schedule, at most
    ``max_passes`` times. They start twice: from ``ordering``'s schedule and
    from a serial schedule by longest path ahead (B.2's first heuristic as a
    priority, no earliest-start rule); the shortest schedule wins, and
    ``ordering`` itself when nothing is shorter. ``time_limit_s`` stops the
    work between passes. The result is a feasible schedule, so its orders
    are valid B.2 outputs and its makespan bounds stage 3's objective.
    """
    t0 = time.perf_counter()
    ts = plan.transfers
    n = len(ts)
    if n == 0 or max_passes <= 0:
        return ordering
    durations = [t.lat_ns for t in ts]
    preds = [list(t.deps) for t in ts]
    succs: list[list[int]] = [[] for _ in range(n)]
    for i, t in enumerate(ts):
        for d in t.deps:
            succs[d].append(i)
    groups: dict[tuple[int, int], set] = {}
    for t in ts:
        groups.setdefault((t.src, t.dst), set()).add(t.send_group)
    resources = [_resources(t, len(groups[(t.src, t.dst)]) == 1) for t in ts]
    ahead = [0] * n
    for i in reversed(_topological(ts, succs)):
        ahead[i] = durations[i] + max((ahead[s] for s in succs[i]), default=0)

    best: tuple[int, list[int], list[int]] | None = None
    seeds = [lambda: (list(ordering.start_ns), list(ordering.end_ns))]
    seeds.append(lambda: _serial(durations, preds, succs, resources, [-a for a in ahead]))
    for seed in seeds:
        if time.perf_counter() - t0 > time_limit_s:
            break
        start, end = seed()
        current = max(end)
        if best is None or current < best[0]:
            best = (current, start, end)
        for _ in range(max_passes):
            if time.perf_counter() - t0 > time_limit_s:
                break
            horizon = max(end)
            # backward: the mirrored problem, latest end first (a successor precedes its predecessor)
            _b_start, b_end = _serial(durations, succs, preds, resources, [horizon - e for e in end])
            m = max(b_end)
            mirrored_start = [float(m - e) for e in b_end]
            start, end = _serial(durations, preds, succs, resources, mirrored_start)
            if max(end) >= current:
                break
            current = max(end)
            if current < best[0]:
                best = (current, start, end)
    if best is None or best[0] >= ordering.makespan_ns:
        return ordering
    return _from_schedule(plan, best[1], best[2])


def merged_lower_bound_ns(plan: Plan, ordering: Ordering) -> int:
    """A lower bound on stage 3's makespan under ``ordering``'s orders: the
    longest path through them with the α of every contiguity-capable
    (IB) transfer dropped. Merging m chunks into one message costs α + m·β
    and delivers every member at the end (B.3 eqs. 16-18), never earlier
    than sending each alone at β, so no choice of contiguity beats it. Used
    to skip solving stage 3 on orders that cannot win."""
    ts = plan.transfers
    n = len(ts)
    if n == 0:
        return 0
    prev: list[list[int]] = [list(t.deps) for t in ts]
    for orders in (ordering.chunk_order, ordering.switch_send_order, ordering.switch_recv_order):
        for order in orders.values():
            for a, b in zip(order, order[1:], strict=False):
                prev[b].append(a)
    end = [0] * n
    for i in sorted(range(n), key=lambda i: (ordering.start_ns[i], ordering.end_ns[i])):
        t = ts[i]
        start = max((end[p] for p in prev[i]), default=0)
        end[i] = start + t.lat_ns - (t.alpha_ns if t.contiguous else 0)
    return max(end)

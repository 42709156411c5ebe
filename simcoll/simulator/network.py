"""How fast messages go: flows sharing a machine's resources, on SimPy.

A transfer becomes a **flow** over the resources of its route
(:mod:`.routing`: what a message crosses, with the weight the route puts on
each). This module is the fast form of the sharing rules that
:mod:`.reference` states plainly (rules R4-R6 there), held to them by
``tests/test_sim_reference.py``.

Sharing is max-min fair (progressive filling with per-hop weights), recomputed
at every flow start and end over the connected component of flows that share
resources with the changed one, so unrelated traffic costs nothing (and not
at all where each flow that starts takes the place of one that ended on the
same route at that instant: the solution in force still holds). Where no
utilisation is recorded, a resource that can never limit a rate - another
resource of every route through it is slower and carries it at least as
heavily - is left out of the max-min (:class:`_Dominance`). A flow is
also capped by ``cap_Bps`` (what its executor can drive) and carries
``size / efficiency`` wire bytes (protocol efficiency, e.g. LL = 0.5).

Timing of one message, as in :func:`simcoll.analytic.critical_path_time_s`: the
bytes flow first (they occupy the route), then the last byte lands ``α`` later
(``α`` from :meth:`Machine.route`). Alone on its route a message therefore
takes ``n / B`` on the wire and arrives at ``α + n / B``.

Two regimes (``contention``):

- ``False`` — the ideal α-β network: every flow runs alone at its route's
  bandwidth, nothing is shared and no contention parameter applies. The
  simulator then reproduces the analytic α-β time.
- ``True`` (default) — max-min sharing plus the contention parameters of the
  cost model that shape the routes (:mod:`.routing`) and a switch's
  capacity with its number of flows (TACCL §3.2, Fig. 4).

An in-switch reduction (a :class:`~.routing.SwitchPath` in place of the rank
pair) is one flow that streams the chunk from every source into the switch
and the result out to every destination at once, as NVLink SHARP and IB
SHARP pipeline it: alone on the machine it takes
``α + n / min over its resources (capacity)``.
"""

from __future__ import annotations

import itertools
import math
import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import simpy

from ..arrays import ragged_indices
from ..errors import ModelError
from ..machines import Machine
from ..units import check_size_bytes
from .fair_share import RouteUses, RouteUsesTable, SparseComponent, alone_rate_Bps, max_min_rates
from .results import Timeline, Utilisation
from .routing import Resource, Routing

__all__ = ["Flow", "FluidNetwork", "TransferEvent"]

_NUMPY_FROM = 24  # components with this many flows use the vectorised max-min
_SOLVED_MAX_FLOWS = 1_000_000  # flows over all sharing patterns a network remembers (tens of MB at most)
#: A flow's place among a component's flows (:meth:`FluidNetwork._recompute`): by route, then by id.
_ORDER = operator.attrgetter("order")
# flows in a pattern worth remembering: larger ones rarely recur and cost more to key (NVLS-Tree on
# 1,024 GPUs at 1 GB: 76 % of components under 24 flows recur, 8 % of those of 24-100, 1 % above)
_REMEMBER_UP_TO = 96


class _Dominance:
    """Which resources of a network's routes the max-min may leave out.

    Resource A is *dominated* by resource B when every route through A so
    far also passes B with at least A's weight, neither capacity varies
    with the flows, and A's capacity exceeds B's by a factor ``1 + margin``:
    B then carries every flow A does, at least as heavily, so in
    progressive filling B fills first - A's fill level is at least
    ``1 + margin`` times B's - and A is never a bottleneck. Leaving A out
    changes no rate: the level of each round is a minimum A never attains,
    the resources that fill are the same, and every other resource sums
    the same flows in the same order (a component's flows are ordered by
    route and id, whatever resources led to them). Routes arrive one rank pair at a
    time; a route through A that lacks such a B ends A's domination, and
    the pairs that left A out get it back (:meth:`FluidNetwork._restore`).

    On a DGX H100 an inter-node route passes six resources, the four PCIe
    hops (54 GB/s) dominated by the two InfiniBand ones (47 GB/s).
    """

    __slots__ = ("candidates", "left_out")

    margin = 1e-6

    def __init__(self) -> None:
        self.candidates: dict[int, set[int]] = {}  # per resource: the resources dominating it on every route
        self.left_out: dict[int, set[tuple[int, int]]] = {}  # per dominated resource: the pairs leaving it out

    def kept(
        self, resources: Sequence[tuple[Resource, float]], pair: tuple[int, int]
    ) -> tuple[tuple[tuple[Resource, float], ...], set[tuple[int, int]]]:
        """``resources`` (a route, in order) without those dominated, after
        counting this route; and the pairs whose routes left out a resource
        this route ends the domination of."""
        weight: dict[int, float] = {}
        by_id: dict[int, Resource] = {}
        for r, w in resources:
            weight[r.id] = weight.get(r.id, 0.0) + w
            by_id[r.id] = r
        candidates, firm = self.candidates, None
        revoked: set[tuple[int, int]] = set()
        dominated = set()
        for rid, r in by_id.items():
            w = weight[rid]
            known = candidates.get(rid)
            if known is None:  # a resource's first route: every slower fixed resource as heavily used
                if r.varies:
                    known = set()
                else:
                    if firm is None:
                        firm = [(o.id, o._one_flow_Bps * (1 + self.margin)) for o in by_id.values() if not o.varies]
                    cap = r._one_flow_Bps
                    known = {other for other, least in firm if other != rid and cap >= least and weight[other] >= w}
                candidates[rid] = known
            elif known:  # capacities are fixed: only presence and weight can fail on a later route
                gone = [other for other in known if weight.get(other, -1.0) < w]
                if gone:
                    known.difference_update(gone)
                    if not known:
                        revoked.update(self.left_out.pop(rid, ()))
            if known:
                dominated.add(rid)
                self.left_out.setdefault(rid, set()).add(pair)  # (a restored route is counted again)
        return tuple((r, w) for r, w in resources if r.id not in dominated), revoked


class Flow:
    """One message in flight (internal; see :meth:`FluidNetwork.start_flow`)."""

    __slots__ = (
        "id",
        "src",
        "dst",
        "res",
        "uses",
        "bound",
        "remaining",
        "rate",
        "t_last",
        "alpha_s",
        "after_s",
        "size_bytes",
        "start_s",
        "wire_end_s",
        "on_sent",
        "on_arrival",
        "kind",
        "track",
        "label",
        "chunk",
        "tag",
        "done_event",
        "pattern",
        "order",
    )


class TransferEvent(simpy.Event):
    """The event :meth:`FluidNetwork.transfer` returns. It succeeds (value: the
    arrival time) when the last byte has arrived; :attr:`sent` succeeds when
    the last byte has left the wire (the sender's connection is free again)."""

    def __init__(self, env: simpy.Environment):
        super().__init__(env)
        self._sent: simpy.Event | None = None
        self._sent_at: float | None = None
        self.start_s: float = env.now
        self.wire_end_s: float | None = None

    @property
    def sent(self) -> simpy.Event:
        if self._sent is None:
            self._sent = simpy.Event(self.env)
            if self._sent_at is not None:
                self._sent.succeed(self._sent_at)
        return self._sent

    def _mark_sent(self, when: float) -> None:
        self._sent_at = when
        self.wire_end_s = when
        if self._sent is not None:
            self._sent.succeed(when)


class FluidNetwork(Routing):
    """Flows over a machine's resources (module docstring): a
    :class:`~.routing.Routing` (what each message crosses) whose resources
    its flows share.

    >>> import simpy
    >>> from simcoll import load_machine
    >>> env = simpy.Environment()
    >>> net = FluidNetwork(env, load_machine("ring:4"), contention=True)
    >>> done = net.transfer(0, 1, 25e6)       # 25 MB over one 25 GB/s NVLink
    >>> env.run()
    >>> round(done.value * 1e3, 6)            # 1 ms + α (0.7 µs)
    1.0007
    """

    def __init__(
        self,
        env: simpy.Environment,
        machine: Machine,
        *,
        contention: bool = True,
        record_utilisation: bool = True,
        record_timeline: bool = True,
        timeline: Timeline | None = None,
    ):
        super().__init__(machine, contention=contention)
        self.env = env
        self.record_utilisation = record_utilisation
        self.record_timeline = record_timeline
        self.timeline = timeline if timeline is not None else Timeline()
        self.utilisation = Utilisation()
        # per rank pair: α, bandwidth, resources, rate alone, and the resources as the max-min reads them
        self._fast: dict[
            tuple[int, int], tuple[float, float, tuple[tuple[Resource, float], ...], float, RouteUses]
        ] = {}
        self._uses_table = RouteUsesTable()
        # dominated resources are left out of routes where no utilisation is recorded (:meth:`_route_info`)
        self._dominance = _Dominance() if contention and not record_utilisation else None
        self._solved: dict[tuple, tuple[float, ...]] = {}  # max-min solutions by sharing pattern (_recompute)
        self._solved_flows = 0
        self.max_sharing = 1
        self._tracks: dict[tuple[int, int], str] = {}
        self._dirty: dict[int, Resource] = {}
        self._flush_scheduled = False
        # flows that left shared resources, and flows that joined them, since the last recomputation
        # (:meth:`_flush`): (route, bound, rate) of each that left, and the joining flows
        self._left: list[tuple[RouteUses, float, float]] = []
        self._joined: list[Flow] = []
        self.handovers = 0  # recomputations found to be handovers and skipped (:meth:`_flush`)
        self._next_flow = 0
        self.active: dict[int, Flow] = {}
        self.transfers = 0
        self.recomputes = 0
        self.recomputes_remembered = 0  # answered from the memory of sharing patterns

    def override_route(
        self, src: int, dst: int, route: tuple[float, float, tuple[tuple[Resource, float], ...]]
    ) -> None:
        """:meth:`Routing.override_route <.routing.Routing.override_route>`, and the pair's flows take it."""
        super().override_route(src, dst, route)
        self._fast.pop((src, dst), None)

    # -- flows -----------------------------------------------------------------------------
    def start_flow(
        self,
        src: int,
        dst: int,
        size_bytes: float,
        *,
        cap_Bps: float = math.inf,
        efficiency: float = 1.0,
        on_sent: Callable[[Flow], Any] | None = None,
        on_arrival: Callable[[Flow], Any] | None = None,
        after_s: float = 0.0,
        kind: str = "send",
        track: str | None = None,
        label: str = "",
        chunk: int | None = None,
        tag: Any = None,
    ) -> Flow:
        """Callback form of :meth:`transfer` (no SimPy event per message):
        ``on_sent(flow)`` runs when the last byte leaves the wire,
        ``on_arrival(flow)`` when it has arrived plus ``after_s`` (e.g. a
        reduction at the receiver, recorded as its own ``reduce`` row)."""
        check_size_bytes(size_bytes, where=f"transfer {src}->{dst}: size_bytes", allow_zero=True)
        if not 0 < efficiency <= 1:
            raise ModelError(f"transfer {src}->{dst}: protocol efficiency must lie in (0, 1], got {efficiency}")
        if not cap_Bps > 0:
            raise ModelError(f"transfer {src}->{dst}: cap_Bps must be positive, got {cap_Bps}")
        return self.launch(
            src, dst, size_bytes, cap_Bps, efficiency, on_sent, on_arrival, after_s, kind, track, label, chunk, tag
        )

    def launch(
        self,
        src: int,
        dst: int,
        size_bytes: float,
        cap_Bps: float,
        efficiency: float,
        on_sent: Callable[[Flow], Any] | None,
        on_arrival: Callable[[Flow], Any] | None,
        after_s: float,
        kind: str,
        track: str | None,
        label: str,
        chunk: int | None,
        tag: Any,
    ) -> Flow:
        """:meth:`start_flow` with positional arguments and no argument
        checks, for callers that validated them (the hot path of Algorithm mode)."""
        info = self._fast.get((src, dst))
        if info is None:
            info = self._route_info(src, dst)
        alpha, bandwidth, resources, alone, uses = info
        now = self.env.now
        f = Flow()
        f.id = fid = self._next_flow
        self._next_flow = fid + 1
        f.src = src
        f.dst = dst
        f.res = resources
        f.uses = uses
        f.bound = bound = bandwidth if cap_Bps >= bandwidth else cap_Bps
        f.pattern = (uses.order, bound)
        f.order = (uses.order << 40) | fid  # by route, then by id (_recompute)
        f.remaining = size_bytes / efficiency
        f.rate = 0.0
        f.t_last = now
        f.alpha_s = alpha
        f.after_s = after_s
        f.size_bytes = size_bytes
        f.start_s = now
        f.wire_end_s = None
        f.on_sent = on_sent
        f.on_arrival = on_arrival
        f.kind = kind
        f.track = track
        f.label = label
        f.chunk = chunk
        f.tag = tag
        f.done_event = None
        self.active[fid] = f
        self.transfers += 1
        shared = False
        for res, _ in resources:
            flows = res.flows
            flows[fid] = f
            if len(flows) > 1:
                shared = True
                if len(flows) > self.max_sharing:
                    self.max_sharing = len(flows)
        if shared and self.contention:
            self._joined.append(f)
            self._mark_dirty(resources)
            return f
        # alone on every resource (or the ideal network): no max-min needed
        rate = alone if self.contention else bandwidth
        if cap_Bps < rate:
            rate = cap_Bps
        self._set_rate(f, rate, now)
        if self.record_utilisation:
            for res, w in resources:
                self._account(res, res.rate + rate * w, now)
        return f

    def _route_info(self, src: int, dst: int) -> tuple:
        """What :meth:`launch` keeps per rank pair: α, bandwidth, the
        resources a flow registers on, its rate alone, and its route as the
        max-min reads it. Without a utilisation record, a resource another
        of the route's resources dominates (:class:`_Dominance`) is left out
        of both: it can never limit a rate."""
        alpha, bandwidth, resources = self.route(src, dst)
        alone = alone_rate_Bps(bandwidth, resources)
        if self._dominance is not None:
            resources, revoked = self._dominance.kept(resources, (src, dst))
            if revoked:
                self._restore(revoked)
        uses = self._uses_table.add(RouteUses(resources, self._uses_table.count))
        info = self._fast[(src, dst)] = (alpha, bandwidth, resources, alone, uses)
        return info

    def _restore(self, pairs: set[tuple[int, int]]) -> None:
        """Put the resources that stopped being dominated back into the routes
        of ``pairs`` that left them out: each pair's route object is rebuilt
        in place (the flows in flight hold it) and their flows register on
        the restored resources."""
        routes = {}
        moved: list[Flow] = []
        for pair in pairs:
            info = self._fast.get(pair)
            if info is None:
                continue
            alpha, bandwidth, before, alone, uses = info
            # the route's flows in flight are on every resource it kept, and it keeps each again (a
            # resource's dominators only go): one resource's flows hold them, not every flow in
            # flight (400,000 of them on 1,024 GPUs at 1 MB, for each of thousands of restores).
            # It kept one at least: it left one out for another of its own, the least never left out.
            moved.extend(f for f in before[0][0].flows.values() if f.uses is uses)
            resources, _ = self._dominance.kept(self.route(*pair)[2], pair)
            uses.__init__(resources, uses.order)
            self._uses_table.add(uses)
            self._fast[pair] = (alpha, bandwidth, resources, alone, uses)
            routes[id(uses)] = resources
        moved.sort(key=operator.attrgetter("id"))  # (in the order of self.active)
        for f in moved:
            resources = routes[id(f.uses)]
            for res, _ in resources:
                res.flows[f.id] = f
            f.res = resources
        self._solved.clear()

    def transfer(
        self,
        src: int,
        dst: int,
        size_bytes: float,
        *,
        cap_Bps: float = math.inf,
        efficiency: float = 1.0,
        track: str | None = None,
        label: str = "",
        chunk: int | None = None,
        kind: str = "send",
    ) -> TransferEvent:
        """Message rank ``src`` → rank ``dst`` of ``size_bytes`` payload bytes:
        its ``size_bytes / efficiency`` wire bytes flow over the route's
        resources, sharing them max-min fairly with other flows and capped at
        ``cap_Bps``; the returned event fires (value: the time) when the last
        byte has arrived, ``α`` after it left the wire. Records a timeline row
        (``kind``, ``track`` default ``"src->dst"``)."""
        event = TransferEvent(self.env)

        def sent(flow: Flow) -> None:
            event._mark_sent(flow.wire_end_s)

        def arrived(flow: Flow) -> None:
            event.succeed(self.env.now)

        self.start_flow(
            src,
            dst,
            size_bytes,
            cap_Bps=cap_Bps,
            efficiency=efficiency,
            on_sent=sent,
            on_arrival=arrived,
            kind=kind,
            track=track,
            label=label,
            chunk=chunk,
        )
        return event

    def record(
        self,
        kind: str,
        track: str,
        start_s: float,
        end_s: float,
        *,
        src: int = -1,
        dst: int = -1,
        chunk: int | None = None,
        size_bytes: float = 0.0,
        label: str = "",
    ) -> None:
        """Add a timeline row for an executor op (``reduce``, ``copy``,
        ``launch``, ``wait``...) that is not a network transfer."""
        if self.record_timeline:
            self.timeline.add(
                kind, track, start_s, end_s, src=src, dst=dst, chunk=chunk, size_bytes=size_bytes, label=label
            )

    # -- internals --------------------------------------------------------------------------
    def _account(self, res: Resource, total: float, now: float) -> None:
        """Close the resource's utilisation interval when its total rate changes."""
        if not res.flows:
            total = 0.0
        if total != res.rate or len(res.flows) != res.seg_flows:
            if self.record_utilisation and res.rate > 0 and now > res.seg_start:
                self.utilisation.add(
                    res.id, res.seg_start, now, res.rate, res.effective_capacity_Bps(res.seg_flows), res.seg_flows
                )
            res.rate = total
            res.seg_start = now
            res.seg_flows = len(res.flows)

    def _set_rate(self, f: Flow, rate: float, now: float) -> None:
        if f.rate > 0:
            f.remaining -= f.rate * (now - f.t_last)
            if f.remaining < 0:
                f.remaining = 0.0
        f.t_last = now
        f.rate = rate
        if rate <= 0:
            f.done_event = None
            return
        done = simpy.Timeout(self.env, f.remaining / rate, f)
        f.done_event = done
        done.callbacks.append(self._on_complete)

    def _mark_dirty(self, resources) -> None:
        """Queue a max-min recomputation for the components of ``resources``
        at the end of the current instant: all flows that start or end at one
        simulated time are settled by one recomputation."""
        dirty = self._dirty
        for res, _ in resources:
            dirty[res.id] = res
        if not self._flush_scheduled:
            self._flush_scheduled = True
            event = simpy.Timeout(self.env, 0.0)
            event.callbacks.append(self._flush)

    def _flush(self, _event=None) -> None:
        self._flush_scheduled = False
        seeds = [(res, 1.0) for res in self._dirty.values()]
        self._dirty = {}
        left, joined = self._left, self._joined
        self._left, self._joined = [], []
        if left and self._handover(left, joined):
            self.handovers += 1
            return
        self._recompute(seeds, self.env.now)

    def _handover(self, left: list[tuple[RouteUses, float, float]], joined: list[Flow]) -> bool:
        """Settle the instant without a recomputation where every flow that
        joined shared resources replaces one that left them on the same route
        with the same bound, and nothing else changed: a connection handing
        its wire from one message to the next, the steady state of a
        pipeline. Every resource then carries the same flows as before up to
        identity, so the max-min solution is the one in force (it is unique,
        and identical flows get identical rates), and each joining flow
        takes the rate of the flow it replaces. False, with nothing set, if
        the instant is not such a handover."""
        if len(left) != len(joined):
            return False
        rates: dict[tuple[RouteUses, float], list[float]] = {}
        for uses, bound, rate in left:
            rates.setdefault((uses, bound), []).append(rate)
        taken = []
        for f in joined:
            same = rates.get((f.uses, f.bound))
            if not same:
                return False
            taken.append(same.pop())
        now = self.env.now
        for f, rate in zip(joined, taken, strict=True):
            self._set_rate(f, rate, now)
        return True

    def _recompute(self, seeds, now: float) -> None:
        """Max-min fair rates (progressive filling, weighted) on the connected
        component of flows that share a resource with ``seeds``."""
        self.recomputes += 1
        # Breadth-first over resources, one level at a time: a level's flows are merged into ``flows``
        # by dict updates (new flows land at the end), and the next level is the union of
        # their routes' resources, so the Python-level work is one step per flow and per resource,
        # not per (flow, resource) use - components of thousands of flows are common (HiCCL).
        flows: dict[int, Flow] = {}
        seen: dict[int, Resource] = {}
        level = {r.id: r for r, _ in seeds}
        while level:
            known = len(flows)
            for rid, r in level.items():
                seen[rid] = r
                flows.update(r.flows)
            reached: dict[int, Resource] = {}
            for f in itertools.islice(flows.values(), known, None):
                reached.update(f.uses.by_id)
            level = {rid: r for rid, r in reached.items() if rid not in seen}
        # Flows by route, then by id, whatever order the search met them in: the arithmetic (each resource's
        # sums run over its flows in order) then depends on the component alone - not on the resources that
        # led to its flows, so leaving dominated resources out changes nothing (_Dominance) - and a sharing
        # pattern is remembered whatever order its flows' routes started in.
        if len(flows) > 1:
            flows = {f.id: f for f in sorted(flows.values(), key=_ORDER)}
        if not flows:
            if self.record_utilisation:
                for r in seen.values():
                    self._account(r, 0.0, now)
            return
        sparse = None
        if len(flows) == 1:
            (f,) = flows.values()
            rates = (alone_rate_Bps(f.bound, f.res),)
        elif len(flows) > _REMEMBER_UP_TO:
            sparse = SparseComponent(flows, seen, self._uses_table, self._capacities)
            rates = sparse.max_min()
            # most flows of a large component keep their rate: compared as arrays, only the others are set
            changed = rates != np.fromiter([f.rate for f in sparse.flows], dtype=float, count=len(rates))
            for i in np.flatnonzero(changed).tolist():
                self._set_rate(sparse.flows[i], float(rates[i]), now)
        else:
            # Pipelined schedules meet the same sharing pattern again and again: the rates are a function
            # of the flows in order (their routes fix the resources; the order fixes the arithmetic's), so a
            # pattern met before is answered from memory, bit for bit as solving it again. A flow's part of
            # the pattern is its route's number in the network (one route per rank pair) and its bound.
            pattern = tuple([f.pattern for f in flows.values()])
            rates = self._solved.get(pattern)
            if rates is None:
                if len(flows) < _NUMPY_FROM:
                    new = max_min_rates(flows, dict(sorted(seen.items())))  # (it freezes resource by resource)
                    rates = tuple([new[fid] for fid in flows])
                else:
                    sparse = SparseComponent(flows, seen, self._uses_table, self._capacities)
                    rates = tuple(sparse.max_min().tolist())
                self._solved_flows += len(flows)
                if self._solved_flows > _SOLVED_MAX_FLOWS:  # memory stays bounded: forget, start again
                    self._solved.clear()
                    self._solved_flows = len(flows)
                self._solved[pattern] = rates
            else:
                self.recomputes_remembered += 1
        if len(flows) <= _REMEMBER_UP_TO:  # (larger components set their changed rates above)
            for f, rate in zip(flows.values(), rates, strict=True):
                if rate != f.rate:
                    self._set_rate(f, rate, now)
        if self.record_utilisation:  # the resources' total rates only feed the utilisation record
            if len(flows) < _NUMPY_FROM:
                totals = dict.fromkeys(seen, 0.0)
                for f in flows.values():
                    rate = f.rate
                    for res, w in f.res:
                        totals[res.id] += rate * w
                for rid, r in seen.items():
                    self._account(r, totals[rid], now)
            else:
                if sparse is None:
                    sparse = SparseComponent(flows, seen, self._uses_table, self._capacities)
                for r, total in zip(seen.values(), sparse.totals(rates), strict=True):
                    self._account(r, total, now)

    def _on_complete(self, event: simpy.Event) -> None:
        f = event.value
        if f.done_event is event:  # else the flow's rate changed since: a stale completion
            self._complete(f)

    def _on_arrive(self, event: simpy.Event) -> None:
        self._arrive(event.value)

    def _complete(self, f: Flow) -> None:
        now = self.env.now
        del self.active[f.id]
        f.done_event = None
        f.wire_end_s = now
        rate = f.rate
        others = False
        for res, _ in f.res:
            flows = res.flows
            del flows[f.id]
            if flows:
                others = True
        if others and self.contention:
            self._left.append((f.uses, f.bound, rate))
            f.rate = 0.0
            self._mark_dirty(f.res)
        else:
            if self.record_utilisation:
                for res, w in f.res:
                    self._account(res, res.rate - rate * w, now)
            f.rate = 0.0
        if f.on_sent is not None:
            f.on_sent(f)
        delay = f.alpha_s + f.after_s
        if delay > 0:
            t = simpy.Timeout(self.env, delay, f)
            t.callbacks.append(self._on_arrive)
        else:
            self._arrive(f)

    def _arrive(self, f: Flow) -> None:
        now = self.env.now
        if self.record_timeline:
            arrival = f.wire_end_s + f.alpha_s
            track = f.track
            if track is None:
                track = self._tracks.get((f.src, f.dst))
                if track is None:
                    track = self._tracks[(f.src, f.dst)] = f"{f.src}->{f.dst}"
            chunk = -1 if f.chunk is None else f.chunk
            append = self.timeline.append
            append(f.kind, track, f.src, f.dst, chunk, f.size_bytes, f.start_s, arrival if f.after_s else now, f.label)
            if f.after_s:
                append("compute", f"rank {f.dst}", f.src, f.dst, chunk, f.size_bytes, arrival, now, f.label)
        if f.on_arrival is not None:
            f.on_arrival(f)

    def add_alone_flows(
        self,
        resources: Sequence[tuple[tuple[Resource, float], ...]],
        rates_Bps: Sequence[float],
        route: np.ndarray,
        start_s: np.ndarray,
        end_s: np.ndarray,
    ) -> None:
        """Account for messages the caller timed itself because each was alone
        on all its resources (Algorithm mode's private rank pairs): they count
        as transfers and, when utilisation is recorded, each adds the interval
        the network would have recorded for it: from ``start_s`` to its wire
        end ``end_s``, on every resource of its route at its rate × the
        resource's weight, with one flow.

        ``route[i]`` indexes ``resources`` and ``rates_Bps`` (one entry per
        route: its ``(resource, weight)`` pairs and its standalone rate,
        :func:`~.fair_share.alone_rate_Bps`) for message ``i``.
        """
        self.transfers += len(route)
        if not self.record_utilisation or not len(route):
            return
        rid, ratew, cap, offsets = [], [], [], [0]
        for used, rate in zip(resources, rates_Bps, strict=True):
            for res, w in used:
                rid.append(res.id)
                ratew.append(0.0 + rate * w)
                cap.append(res.effective_capacity_Bps(1))
            offsets.append(len(rid))
        offsets = np.array(offsets, dtype=np.int64)
        msgs = np.flatnonzero(end_s > start_s)
        q = route[msgs]
        counts = offsets[q + 1] - offsets[q]
        rows = np.repeat(msgs, counts)
        idx = ragged_indices(offsets[q], counts)
        self.utilisation.extend(
            np.array(rid, dtype=np.int32)[idx],
            start_s[rows],
            end_s[rows],
            np.array(ratew, dtype=np.float64)[idx],
            np.array(cap, dtype=np.float64)[idx],
            np.ones(len(rows), dtype=np.int32),
        )

    def finish(self) -> None:
        """Close the open utilisation intervals at the current time."""
        now = self.env.now
        for r in self.resources:
            if r.rate > 0:
                self._account(r, -1.0, now)
                r.rate = 0.0

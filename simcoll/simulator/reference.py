"""The reference engine: the simulator's rules, stated once and plainly.

Everything the simulator does to time a schedule is written here once, in
the most direct form: one SimPy process per message, one flow per message,
and max-min fair rates worked out again over every flow in flight whenever a
flow starts or ends. It is slow (thousands of messages, not millions) and it
is the specification: every faster path of :func:`simcoll.simulator.simulate`
(private pairs, NumPy batches, timing in schedule order, the compiled event
core, remembered sharing patterns, dominated resources, node-rotation
quotients and orbit tables) is tested against it on random machines and
schedules (``tests/test_sim_reference.py``). Its arithmetic runs in another
order than theirs, so the two agree to rounding (1e-9 relative), not bit for
bit; the fast paths agree with one another bit for bit.

Run it with ``simulate(..., engine="reference")``.

The rules (Algorithm mode)
--------------------------

R1. **Messages.** A schedule's transfers are taken batch by batch, a batch
    being one step (SCCL's k-synchronous steps) or one start time (TACCL's
    timed schedules). In a batch, its in-switch reductions come first, then
    its transfers as :func:`simcoll.algorithm.messages` groups them: each
    transfer alone, then each TACCL contiguity group on one rank pair as one
    message (one α for the group). A message of ``k`` transfers carries
    ``k × n`` payload bytes, ``n`` being the chunk size (the buffer divided
    by the collective's ``size_chunks``, nccl-tests naming).

R2. **Reads.** A message in batch ``b`` reads its chunks at its source(s)
    once as many updates of each as the batches before ``b`` make to it have
    landed (SCCL §3.3: a step reads the state at its start). A chunk is
    counted, not named: an update from a later batch that lands first counts
    too. A read that no earlier batch updates needs the chunk in the
    collective's precondition. There are no step barriers.

R3. **Connections are FIFO.** The messages of one rank pair (or of one
    in-switch reduction group: switch, sources, destinations) leave in
    schedule order: a message starts when its reads are ready and the
    pair's previous message has left the wire.

R4. **A message is a flow.** It puts ``bytes / e`` on the wire (``e`` the
    protocol's efficiency: LL 0.5, ...) over its route's resources
    (:meth:`.routing.Routing.route`: link bundles, switch ports, host
    memory; each with the weight the route puts on it), at most at the
    route's bandwidth ``B`` and, for a reducing message whose reduction is
    fused into the transfer, at most at the reduction rate / ``e``.

R5. **Sharing.** With contention, the flows in flight share every resource
    max-min fairly (:func:`max_min_fair_rates`), a resource carrying ``k``
    flows offering its capacity times the switch's concurrency efficiency
    at ``k`` (TACCL §3.2, Fig. 4); rates change only when a flow starts or
    ends. Without contention every flow runs at its bound alone (the ideal
    α-β network, :func:`simcoll.analytic.critical_path_time_s`).

R6. **Landing.** A message lands ``α`` after its last byte left the wire
    (``α`` of its route plus the protocol's hop latency); a reducing message
    whose reduction is not fused then costs ``T_R(bytes)`` at the receiver
    (NV-Group Table 2). Then every chunk it writes counts one update.

R7. **The call.** The collective ends when its last message lands, plus the
    runtime's fixed cost per call (:meth:`~simcoll.cost_model.CostModel.call_cost_s`).
    A schedule its runtime moves in pipelined steps (``metadata["step_pipeline"]``:
    NCCL's NVLS and tree) is timed as that pipeline from its busiest
    resource's load instead (:func:`simcoll.simulator.step_pipeline.pipelined_time`).

In-switch reductions (R1, R3, R4) read their chunk at every source and write
it at every destination, as one flow over
:meth:`.routing.Routing.switch_route` (into the switch, out to each
destination), with no reduction cost at the GPUs.

Program mode runs its executors' instruction lists over
:class:`ReferenceNetwork` in place of the fluid network (``simulate(program,
..., engine="reference")``): the same rules R4-R6 for its transfers.

>>> from simcoll import load_machine
>>> from simcoll.algorithms import generate
>>> m = load_machine("ring:4")
>>> r = simulate_reference(generate("ring", m, "allgather"), m, 4e6)
>>> round(r.time_s * 1e6, 3), r.stats["path"]   # 3 steps of 0.7 us + 1 MB / 25 GB/s
(122.1, 'reference')
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import simpy

from ..algorithm import Algorithm, messages, protocol_of
from ..analytic import chunk_bytes
from ..arrays import flatten
from ..errors import AlgorithmError, SimulationError
from ..machines import Machine
from .engine import run_with_limit
from .results import TIMELINE_COLUMNS, SimulationResult, Timeline, Utilisation, make_result
from .routing import Resource, Routing, SwitchPath
from .step_pipeline import pipelined_time

__all__ = [
    "Message",
    "ReferenceNetwork",
    "max_min_fair_rates",
    "schedule_messages",
    "simulate_reference",
    "stream_time_s",
]

#: Flows whose fair share lies within this relative distance of the level freeze together (ties).
TIE_TOLERANCE = 1e-12


# -- R5: max-min fair sharing ------------------------------------------------------------------------
def max_min_fair_rates(
    bounds_Bps: Sequence[float],
    uses: Sequence[Sequence[tuple[int, float]]],
    capacity_Bps: dict[int, float],
) -> list[float]:
    """Weighted max-min fair rates by progressive filling.

    Flow ``i`` may go no faster than ``bounds_Bps[i]`` and puts ``rate × w``
    on each resource ``r`` of ``uses[i]`` (pairs ``(r, w)``); resource ``r``
    carries at most ``capacity_Bps[r]``. All flows not yet fixed rise at one
    common rate; when a flow reaches its bound, or a resource fills, the
    flows it limits are fixed at that rate (with the others within
    :data:`TIE_TOLERANCE` of it); repeat until every flow is fixed. The
    result is the unique max-min fair allocation (Bertsekas and Gallager,
    *Data Networks*, §6.5.2).

    >>> # two flows share a 10 GB/s link; the second is also capped at 2 GB/s
    >>> max_min_fair_rates([math.inf, 2e9], [[(0, 1.0)], [(0, 1.0)]], {0: 10e9})
    [8000000000.0, 2000000000.0]
    """
    residual = dict(capacity_Bps)
    rates: list[float | None] = [None] * len(bounds_Bps)
    while any(rate is None for rate in rates):
        free = [i for i, rate in enumerate(rates) if rate is None]
        weight = {r: 0.0 for r in residual}
        for i in free:
            for r, w in uses[i]:
                weight[r] += w
        shares = {r: residual[r] / weight[r] for r in residual if weight[r] > 1e-12}
        level = max(0.0, min([bounds_Bps[i] for i in free] + list(shares.values())))
        limit = level * (1 + TIE_TOLERANCE)
        full = {r for r, share in shares.items() if share <= limit}
        fixed = [i for i in free if bounds_Bps[i] <= limit or any(r in full for r, _ in uses[i])]
        for i in fixed:
            rates[i] = level
            for r, w in uses[i]:
                residual[r] -= level * w
    return rates  # type: ignore[return-value]


# -- R4-R6: the network -------------------------------------------------------------------------------
@dataclass(eq=False)
class _Flow:
    """One message on the wire."""

    resources: tuple[tuple[Resource, float], ...]
    bound_Bps: float
    remaining: float  # wire bytes still to send at ``since``
    wire_end: simpy.Event
    rate: float = 0.0
    since: float = 0.0
    finish: simpy.Event | None = None  # the timeout that ends it at its current rate


class ReferenceNetwork:
    """Flows over a machine's resources, shared by rules R4-R6 (module
    docstring). Routes, resources and their capacities are those of
    :class:`~.routing.Routing` (what a message crosses); how fast each
    flow goes is worked out here, from scratch at every change.

    It offers what Program mode and :func:`~.results.make_result` use of a
    network: :meth:`transfer`, :meth:`record`, the timeline, utilisation and
    counters.

    >>> from simcoll import load_machine
    >>> env = simpy.Environment()
    >>> net = ReferenceNetwork(env, load_machine("ring:4"))
    >>> a, b = net.transfer(0, 1, 25e6), net.transfer(0, 1, 25e6)  # two flows share one 25 GB/s link
    >>> env.run()
    >>> round(a.value * 1e3, 6)            # 2 ms + α (0.7 µs)
    2.0007
    """

    def __init__(
        self,
        env: simpy.Environment,
        machine: Machine,
        *,
        contention: bool = True,
        record_timeline: bool = True,
        record_utilisation: bool = True,
    ) -> None:
        self.env = env
        self.machine = machine
        self.contention = contention
        self.record_timeline = record_timeline
        self.record_utilisation = record_utilisation
        self._routing = Routing(machine, contention=contention)  # what a message crosses
        self.timeline = Timeline()
        self.utilisation = Utilisation()
        self.flows: list[_Flow] = []  # in flight, in the order they started
        self.transfers = 0
        self.max_sharing = 1
        self.recomputes = 0
        self.recomputes_remembered = 0  # (the fluid network's counters, none of which applies here)
        self.handovers = 0
        self._segments: dict[int, tuple[float, float, int]] = {}  # per resource: since, total rate, flows

    @property
    def resources(self) -> list[Resource]:
        return self._routing.resources

    def resource_names(self) -> list[str]:
        return self._routing.resource_names()

    def route(self, src, dst) -> tuple[float, float, tuple[tuple[Resource, float], ...]]:
        """``(alpha_s, bandwidth_Bps, ((resource, weight), ...))``: rank ``src``
        to rank ``dst``, or an in-switch reduction's :class:`~.network.SwitchPath`
        (``dst`` None)."""
        return self._routing.route(src, dst)

    def send(self, route: tuple, wire_bytes: float, cap_Bps: float = math.inf) -> simpy.Event:
        """Put ``wire_bytes`` on ``route`` (a :meth:`route`) at most at
        ``cap_Bps``; the event succeeds, with the time, when the last byte
        has left the wire (R4, R5)."""
        _, bandwidth, resources = route
        flow = _Flow(resources, min(bandwidth, cap_Bps), wire_bytes, self.env.event(), since=self.env.now)
        self.transfers += 1
        self.flows.append(flow)
        self._share()
        return flow.wire_end

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
    ) -> simpy.Event:
        """A message of ``size_bytes`` payload from rank ``src`` to rank
        ``dst`` (R4-R6 without a reduction); the event succeeds when it has
        arrived, and a timeline row is recorded, as
        :meth:`.network.FluidNetwork.transfer` does."""
        arrived = self.env.event()
        self.env.process(self._transfer(src, dst, size_bytes, cap_Bps, efficiency, track, label, chunk, kind, arrived))
        return arrived

    def launch(self, src, dst, size_bytes: float, cap_Bps: float, efficiency: float, on_sent, on_arrival,
               after_s: float, kind, track, label, chunk, tag) -> None:  # fmt: skip
        """:meth:`.network.FluidNetwork.launch`'s form (no timeline row): a
        flow of ``size_bytes / efficiency`` wire bytes on the pair's route at
        most at ``cap_Bps``; ``on_sent(flow)`` when its last byte has left the
        wire (R4, R5), ``on_arrival(flow)`` ``α + after_s`` later (R6); the
        flow object they get carries ``tag``."""
        self.env.process(self._flow(self.route(src, dst), size_bytes / efficiency, cap_Bps, after_s, on_sent,
                                    on_arrival, _Tagged(tag)))  # fmt: skip

    def _flow(self, route, wire_bytes, cap_Bps, after_s, on_sent, on_arrival, flow):
        yield self.send(route, wire_bytes, cap_Bps)
        if on_sent is not None:
            on_sent(flow)
        yield self.env.timeout(route[0] + after_s)
        if on_arrival is not None:
            on_arrival(flow)

    def _transfer(self, src, dst, size_bytes, cap_Bps, efficiency, track, label, chunk, kind, arrived):
        route = self.route(src, dst)
        start = self.env.now
        yield self.send(route, size_bytes / efficiency, cap_Bps)
        yield self.env.timeout(route[0])
        self.record(kind, track or f"{src}->{dst}", start, self.env.now, src=src, dst=dst, chunk=chunk,
                    size_bytes=size_bytes, label=label)  # fmt: skip
        arrived.succeed(self.env.now)

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
        """A timeline row (an executor's op that is not a transfer, or a transfer)."""
        if self.record_timeline:
            self.timeline.add(kind, track, start_s, end_s, src=src, dst=dst, chunk=chunk, size_bytes=size_bytes,
                              label=label)  # fmt: skip

    def _share(self) -> None:
        """R5: the rates of every flow in flight, worked out again; a flow
        whose rate changes is rescheduled to end at its new rate."""
        now = self.env.now
        self.recomputes += 1
        flows = self.flows
        on: dict[int, int] = {}
        for f in flows:
            for res, _ in f.resources:
                on[res.id] = on.get(res.id, 0) + 1
        self.max_sharing = max(self.max_sharing, *on.values(), 1)
        if self.contention:
            capacity = {res.id: res.effective_capacity_Bps(on[res.id]) for f in flows for res, _ in f.resources}
            uses = [[(res.id, w) for res, w in f.resources] for f in flows]
            rates = max_min_fair_rates([f.bound_Bps for f in flows], uses, capacity)
        else:
            rates = [f.bound_Bps for f in flows]
        for f, rate in zip(flows, rates, strict=True):
            if rate != f.rate:
                f.remaining = max(0.0, f.remaining - f.rate * (now - f.since))
                f.since, f.rate = now, rate
                f.finish = self.env.timeout(f.remaining / rate, f)
                f.finish.callbacks.append(self._finished)
        if self.record_utilisation:
            self._account(now)

    def _finished(self, event: simpy.Event) -> None:
        f = event.value
        if f.finish is not event:  # its rate changed since: it ends at another time
            return
        self.flows.remove(f)
        f.finish = None
        self._share()
        f.wire_end.succeed(self.env.now)

    def _account(self, now: float) -> None:
        """Utilisation: close a resource's interval when its total rate or flow count changes."""
        totals: dict[int, tuple[float, int]] = {}
        for f in self.flows:
            for res, w in f.resources:
                rate, count = totals.get(res.id, (0.0, 0))
                totals[res.id] = (rate + f.rate * w, count + 1)
        for rid in set(self._segments) | set(totals):
            rate, count = totals.get(rid, (0.0, 0))
            since, before, flows = self._segments.get(rid, (now, 0.0, 0))
            if (rate, count) != (before, flows):
                self._close(rid, since, now, before, flows)
                self._segments[rid] = (now, rate, count)

    def _close(self, rid: int, since: float, now: float, rate: float, flows: int) -> None:
        if rate > 0 and now > since:
            capacity = self.resources[rid].effective_capacity_Bps(flows)
            self.utilisation.add(rid, since, now, rate, capacity, flows)

    def finish(self) -> None:
        """Close the open utilisation intervals now."""
        for rid, (since, rate, flows) in self._segments.items():
            self._close(rid, since, self.env.now, rate, flows)
        self._segments = {}


@dataclass(frozen=True)
class _Tagged:
    """What :meth:`ReferenceNetwork.launch` hands its callbacks: the caller's tag."""

    tag: object


# -- R1-R3: the schedule's messages -------------------------------------------------------------------
@dataclass(frozen=True)
class Message:
    """One message of a schedule (R1): the connection it queues on, the slots
    (``chunk + rank × chunks``) it reads and writes, its payload in chunks."""

    connection: tuple  # (src, dst), or (SwitchPath, None) for an in-switch reduction
    src: int  # its (first) source and destination rank, for the timeline
    dst: int
    chunk: int
    reads: tuple[int, ...]
    writes: tuple[int, ...]
    chunks: int
    reduce: bool
    batch: int
    label: str
    what: str  # the message described, for errors
    waits: tuple[int, ...] = field(default=())  # per read: the updates it waits for (R2)


def schedule_messages(algorithm: Algorithm) -> list[Message]:
    """The messages of ``algorithm`` in schedule order (R1), each with the
    updates its reads wait for (R2). Raises
    :class:`~simcoll.errors.AlgorithmError` for a read of a chunk that neither
    the precondition nor an earlier batch gives its source."""
    C = algorithm.collective.num_chunks
    timed = algorithm.schedule != "steps"

    def key(item) -> float:
        return item.start_s if timed else item.step

    transfers, reductions = list(algorithm.transfers), list(algorithm.switch_reductions)
    keys = sorted({key(t) for t in transfers} | {key(r) for r in reductions})
    found: list[Message] = []
    for batch, k in enumerate(keys):
        label = f"t={k:.6g}" if timed else f"step {k}"
        for r in (r for r in reductions if key(r) == k):
            path = SwitchPath(r.switch, tuple(r.sources), tuple(r.destinations))
            reads = tuple(r.chunk + s * C for s in r.sources)
            writes = tuple(r.chunk + d * C for d in r.destinations)
            found.append(Message((path, None), r.sources[0], r.destinations[0], r.chunk, reads, writes, 1, False,
                                 batch, label, r.describe()))  # fmt: skip
        for group in messages([t for t in transfers if key(t) == k]):
            t = group[0]
            reads = tuple(g.chunk + g.src * C for g in group)
            writes = tuple(g.chunk + g.dst * C for g in group)
            found.append(Message((t.src, t.dst), t.src, t.dst, t.chunk, reads, writes, len(group), t.op == "reduce",
                                 batch, label, t.describe()))  # fmt: skip
    # R2: a read waits for the updates earlier batches make to its slot
    rank, chunk = flatten(algorithm.collective.input_layout)
    present = set((chunk + rank * C).tolist())
    written: dict[int, list[int]] = {}  # slot -> batches of its updates
    for m in found:
        for slot in m.writes:
            written.setdefault(slot, []).append(m.batch)
    with_waits = []
    for m in found:
        waits = tuple(sum(1 for b in written.get(slot, ()) if b < m.batch) for slot in m.reads)
        for slot, wait in zip(m.reads, waits, strict=True):
            if wait == 0 and slot not in present:
                raise AlgorithmError(f"{algorithm.name}: {m.what} before rank {slot // C} holds the chunk")
        with_waits.append(dataclasses.replace(m, waits=waits))
    return with_waits


class _Slots:
    """How many updates of each slot have landed, and the reads waiting for more (R2)."""

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self.landed: dict[int, int] = {}
        self.waiting: dict[int, list[tuple[int, simpy.Event]]] = {}

    def ready(self, slot: int, updates: int) -> simpy.Event:
        event = self.env.event()
        if self.landed.get(slot, 0) >= updates:
            event.succeed()
        else:
            self.waiting.setdefault(slot, []).append((updates, event))
        return event

    def update(self, slot: int) -> None:
        count = self.landed[slot] = self.landed.get(slot, 0) + 1
        still = []
        for updates, event in self.waiting.get(slot, ()):
            if updates <= count:
                event.succeed()
            else:
                still.append((updates, event))
        self.waiting[slot] = still


# -- the engine ---------------------------------------------------------------------------------------
def simulate_reference(
    algorithm: Algorithm,
    machine: Machine,
    size_bytes: float,
    *,
    contention: bool = True,
    protocol: str | None = None,
    time_limit_s: float = 60.0,
    started_s: float | None = None,
    record_timeline: bool = True,
    record_utilisation: bool = True,
) -> SimulationResult:
    """Time ``algorithm`` on ``machine`` for a ``size_bytes`` buffer by the
    rules R1-R7 (module docstring); the back end of ``simulate(...,
    engine="reference")``, which checks the arguments."""
    wall0 = time.perf_counter()
    if algorithm.num_ranks != machine.num_ranks:
        raise AlgorithmError(f"{algorithm.name} is for {algorithm.num_ranks} ranks but {machine.name} has "
                             f"{machine.num_ranks}")  # fmt: skip
    model = machine.model
    proto = model.protocol(protocol_of(algorithm, protocol))
    n = chunk_bytes(algorithm.collective, size_bytes)
    env = simpy.Environment()
    net = ReferenceNetwork(env, machine, contention=contention, record_timeline=False,
                           record_utilisation=record_utilisation)  # fmt: skip
    msgs = schedule_messages(algorithm)
    slots = _Slots(env)
    left_wire: dict[tuple, simpy.Event] = {}  # per connection: when its latest message left the wire
    times = np.zeros((len(msgs), 3))  # per message: start, arrival, done
    routes = {m.connection: net.route(*m.connection) for m in msgs}
    landed = [0]

    def message(i: int, m: Message, previous: simpy.Event | None, sent: simpy.Event):
        yield env.all_of([slots.ready(slot, wait) for slot, wait in zip(m.reads, m.waits, strict=True)])  # R2
        if previous is not None:
            yield previous  # R3
        route = routes[m.connection]
        payload = m.chunks * n
        fused_cap = model.fused_reduce_rate_Bps / proto.efficiency if m.reduce else math.inf
        start = env.now
        yield net.send(route, payload / proto.efficiency, fused_cap)  # R4, R5
        sent.succeed()
        alpha = route[0] + proto.hop_latency_s
        yield env.timeout(alpha)  # R6
        arrival = env.now
        if m.reduce:
            yield env.timeout(model.reduce_after_s(payload))
        times[i] = start, arrival, env.now
        landed[0] += 1
        for slot in m.writes:
            slots.update(slot)

    for i, m in enumerate(msgs):
        sent = env.event()
        env.process(message(i, m, left_wire.get(m.connection), sent))
        left_wire[m.connection] = sent
    events = run_with_limit(env, time_limit_s, what=f"reference simulation of {algorithm.name} on {machine.name}",
                            started_s=started_s)  # fmt: skip
    if landed[0] != len(msgs):
        stuck = [m.what for m, t in zip(msgs, times[:, 2], strict=True) if not t > 0][:5]
        raise SimulationError(
            f"reference simulation of {algorithm.name} stalled: {len(msgs) - landed[0]} of {len(msgs)} messages "
            f"never landed ({'; '.join(stuck)})"
        )
    last_s = float(times[:, 2].max(initial=0.0))
    call_s = model.call_cost_s(proto.name)
    stats: dict[str, object] = {}
    time_s = last_s + call_s
    table = (algorithm.metadata or {}).get("step_pipeline")
    if table is not None and proto.name is not None:  # R7
        time_s, call_s, stats["step_pipeline"] = pipelined_time(
            table,
            size_bytes,
            stream_s=stream_time_s(msgs, routes, n, proto.efficiency, model.fused_reduce_rate_Bps, contention),
            latency_s=max((route[0] for route in routes.values()), default=0.0) + proto.hop_latency_s,
            call_s=call_s,
            call_overhead_s=model.call_overhead_s,
            schedule_s=last_s,
        )
    return make_result(
        net,
        timeline=_timeline(msgs, times, n) if record_timeline else pd.DataFrame(columns=TIMELINE_COLUMNS),
        name=algorithm.name,
        collective=algorithm.collective,
        size_bytes=size_bytes,
        mode="algorithm",
        time_s=time_s,
        stats={
            **stats,
            "path": "reference",
            "protocol": proto.name,
            "protocol_efficiency": proto.efficiency,
            "call_s": call_s,
            "messages": len(msgs),
            "events": events,
            "wall_s": time.perf_counter() - wall0,
        },
    )


def stream_time_s(msgs, routes, n: float, efficiency: float, fused_rate_Bps: float, contention: bool) -> float:
    """R7: how long the schedule's busiest connection or resource is busy
    when the whole buffer streams through it, every connection's flow on its
    resources at once (the steady state of a pipeline)."""
    busy: dict[tuple, float] = {}
    load: dict[int, float] = {}
    users: dict[int, set] = {}
    for m in msgs:
        _, bandwidth, resources = routes[m.connection]
        alone = min([bandwidth] + [r.effective_capacity_Bps(1) / w for r, w in resources]) if contention else bandwidth
        rate = min(alone * efficiency, fused_rate_Bps) if m.reduce else alone * efficiency
        busy[m.connection] = busy.get(m.connection, 0.0) + m.chunks * n / rate
        for res, w in resources:
            load[res.id] = load.get(res.id, 0.0) + m.chunks * n / efficiency * w
            users.setdefault(res.id, set()).add(m.connection)
    resource = {res.id: res for route in routes.values() for res, _ in route[2]}
    return max([*busy.values(), *(load[r] / resource[r].effective_capacity_Bps(len(users[r])) for r in load)])


def _timeline(msgs: list[Message], times: np.ndarray, n: float) -> pd.DataFrame:
    """One row per message (kind copy or reduce, track ``"src->dst"``, label
    its batch), then a ``compute`` row where a reduction took time; in
    completion order, ties in schedule order."""
    rows = []
    for i in np.argsort(times[:, 2], kind="stable").tolist():
        m, (start, arrival, done) = msgs[i], times[i]
        size = m.chunks * n
        kind = "reduce" if m.reduce else "copy"
        rows.append((kind, f"{m.src}->{m.dst}", m.src, m.dst, m.chunk, size, start, arrival, m.label))
        if done > arrival:
            rows.append(("compute", f"rank {m.dst}", m.src, m.dst, m.chunk, size, arrival, done, m.label))
    return pd.DataFrame(rows, columns=TIMELINE_COLUMNS)

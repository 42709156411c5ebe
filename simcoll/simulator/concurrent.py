"""Many calls at once on one machine: collectives and sends sharing one network.

A training step runs many collectives at once - a tensor-parallel Allreduce
inside a node while a data-parallel bucket crosses the network, pipeline
sends between stages - each on its own process group and stream.
:class:`SharedRun` is where they meet: one SimPy environment, one network
(:class:`~.network.FluidNetwork`, or the reference engine's
:class:`~.reference.ReferenceNetwork`), and every call's messages on it.
The rules of one schedule (:mod:`.reference`, R1-R7) hold for each call;
these say how calls meet:

C1. **Groups.** A call runs an Algorithm written for ``p`` ranks on the
    machine ranks ``ranks`` (group rank ``i`` is machine rank ``ranks[i]``),
    as a communicator of those GPUs runs it. Its messages are the schedule's
    (R1, R2) with their ranks mapped; an in-switch reduction keeps its switch.

C2. **Arrival.** Each member arrives at the call when its caller says so
    (:meth:`Call.arrive`). A message leaves once its source and its
    destination have arrived (every source and destination of an in-switch
    reduction): the runtime's kernel has to run at both ends, the receiver's
    to offer the buffer the sender writes into. R2 and R3 hold as before.

C3. **Sharing.** The flows of every call share the one network as the
    messages of one schedule do (R4-R6): max-min fair, with the model's
    contention parameters.

C4. **End.** A call ends for all its members when its last message has
    landed, plus the runtime's cost per call (R7).

C5. **Pipelines.** A schedule its runtime moves in pipelined steps
    (``metadata["step_pipeline"]``: NCCL's NVLS and tree) is timed by R7's
    pipeline formula from its busiest resource's load, not message by
    message. Here its load is put on the network as it streams in the
    steady state: once every member has arrived, one flow per connection
    carrying all of that connection's bytes. The call then ends its
    pipeline time alone after the last arrival, plus however much longer
    those flows took to drain than they take alone (and never before they
    have drained).

C6. **Sends.** A point-to-point send (:meth:`SharedRun.send`) is a call of
    one message from a source to a destination under a protocol (NCCL's
    send/recv runs Simple), C2-C4 applying.

So a call with no resource in common with any other takes exactly what
:func:`~simcoll.simulator.simulate` gives it alone (to rounding: the same
arithmetic through another bookkeeping), and two calls that share one link
share it as max-min fairness says.

>>> from simcoll import load_machine
>>> from simcoll.algorithms import generate
>>> m = load_machine("ring:4")
>>> ring = generate("ring", m, "allgather")
>>> run = SharedRun(m)
>>> a, b = run.start(ring, 4e6), run.start(ring, 4e6)   # the same ring twice at once
>>> for call in (a, b):
...     call.arrive_all()
>>> events = run.run()
>>> round(a.end_s * 1e6, 3), round(b.end_s * 1e6, 3)   # each link carries both: twice the bytes' time
(242.1, 242.1)
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import simpy

from ..algorithm import Algorithm, protocol_of
from ..analytic import chunk_bytes
from ..errors import AlgorithmError, SimulationError
from ..machines import Machine, as_machine
from .engine import run_with_limit
from .network import FluidNetwork
from .reference import ReferenceNetwork, schedule_messages, stream_time_s
from .routing import SwitchPath
from .step_pipeline import pipelined_time

__all__ = ["Call", "CallTiming", "ConcurrentCall", "SharedRun", "simulate_concurrent"]

NETWORKS = {"fast": FluidNetwork, "reference": ReferenceNetwork}


# -- one schedule's messages, worked out once per Algorithm ------------------------------------------
class _Plan:
    """What every call of one Algorithm shares: its messages (R1, R2) in
    group ranks, each one's predecessor on its connection (R3), the reads
    that wait for updates (by slot, least first) and the members each
    message needs arrived (C2)."""

    def __init__(self, algorithm: Algorithm) -> None:
        self.algorithm = algorithm
        self.msgs = msgs = schedule_messages(algorithm)
        last_on: dict[tuple, int] = {}
        self.next_on = [-1] * len(msgs)
        pending = [0] * len(msgs)  # updates and predecessor to wait for, before arrivals
        self.members: list[tuple[int, ...]] = []
        waiters: dict[int, list[tuple[int, int]]] = {}
        for i, m in enumerate(msgs):
            before = last_on.get(m.connection)
            if before is not None:
                self.next_on[before] = i
                pending[i] += 1
            last_on[m.connection] = i
            for slot, wait in zip(m.reads, m.waits, strict=True):
                if wait > 0:
                    waiters.setdefault(slot, []).append((wait, i))
                    pending[i] += 1
            src, dst = m.connection
            self.members.append(
                tuple(sorted({*src.sources, *src.destinations})) if isinstance(src, SwitchPath) else (src, dst)
            )
        self.waiters = {slot: sorted(ws) for slot, ws in waiters.items()}
        # what each message waits for in all, its ends' arrivals included (C2): a call starts from a copy
        self.waits = [p + len(members) for p, members in zip(pending, self.members, strict=True)]
        self.by_member: dict[int, list[int]] = {}
        for i, ranks in enumerate(self.members):
            for r in ranks:
                self.by_member.setdefault(r, []).append(i)


class Call:
    """One call in flight on a :class:`SharedRun`: an Algorithm on a group
    of machine ranks for one buffer size (C1). :meth:`arrive` each member
    when it reaches the call; :attr:`done` succeeds (value: the time) when
    the call has ended (C4, C5)."""

    def __init__(self, run: SharedRun, plan: _Plan, ranks: tuple[int, ...], size_bytes: float, protocol, name: str,
                 switches: dict[str, str] | None = None):  # fmt: skip
        self.run = run
        self.switches = switches or {}
        self.plan = plan
        self.ranks = ranks
        self.size_bytes = size_bytes
        self.name = name
        model = run.machine.model
        self.protocol = model.protocol(protocol_of(plan.algorithm, protocol))
        self.chunk_bytes = chunk_bytes(plan.algorithm.collective, size_bytes)
        self.call_s = model.call_cost_s(self.protocol.name)
        table = (plan.algorithm.metadata or {}).get("step_pipeline")
        self.pipeline = table if table is not None and self.protocol.name is not None else None
        self.done = run.env.event()
        self.arrived: set[int] = set()
        self.last_arrival_s: float | None = None
        self.end_s: float | None = None
        self._pending = list(plan.waits)
        self._landed_count: dict[int, int] = {}
        self._cursor: dict[int, int] = {}
        self._last_s = 0.0  # the last landing (C4), or the last flow drained (C5)
        self._connections = run.connections(self)
        self._left = len(plan.msgs) if self.pipeline is None else len(set(self._connections))

    def _connection(self, connection: tuple) -> tuple:
        src, dst = connection
        ranks = self.ranks
        if isinstance(src, SwitchPath):
            sources = tuple(ranks[s] for s in src.sources)
            switch = self.switches.get(src.switch, src.switch)
            return SwitchPath(switch, sources, tuple(ranks[d] for d in src.destinations)), None
        return ranks[src], ranks[dst]

    # -- C2: arrivals ------------------------------------------------------------------------------
    def arrive(self, member: int) -> None:
        """Group rank ``member`` has reached the call (now)."""
        if member in self.arrived or not 0 <= member < len(self.ranks):
            why = "arrived twice" if member in self.arrived else "is not a member"
            raise SimulationError(f"{self.name}: group rank {member} {why}")
        self.arrived.add(member)
        everyone = len(self.arrived) == len(self.ranks)
        if everyone:
            self.last_arrival_s = self.run.env.now
            if self._left == 0:
                self._end()
                return
        if self.pipeline is not None:
            if everyone:
                self._stream()
            return
        for i in self.plan.by_member.get(member, ()):
            self._release(i)

    def arrive_all(self) -> None:
        """Every member has reached the call (now)."""
        for member in range(len(self.ranks)):
            if member not in self.arrived:
                self.arrive(member)

    # -- R2, R3 and the network ---------------------------------------------------------------------
    def _release(self, i: int) -> None:
        pending = self._pending
        pending[i] -= 1
        if pending[i] == 0:
            self._launch(i)

    def _launch(self, i: int) -> None:
        m = self.plan.msgs[i]
        proto = self.protocol
        payload = m.chunks * self.chunk_bytes
        if m.reduce:
            model = self.run.machine.model
            cap = model.fused_reduce_rate_Bps / proto.efficiency
            after = proto.hop_latency_s + model.reduce_after_s(payload)
        else:
            cap, after = math.inf, proto.hop_latency_s
        src, dst = self._connections[i]
        # the message's index rides on its flow (the network's tag): no closure per message
        self.run.network.launch(src, dst, payload, cap, proto.efficiency, self._sent, self._landed, after, None,
                                None, None, None, i)  # fmt: skip

    def _sent(self, flow) -> None:
        following = self.plan.next_on[flow.tag]
        if following >= 0:
            self._release(following)

    def _landed(self, flow) -> None:
        waiters, landed, cursor = self.plan.waiters, self._landed_count, self._cursor
        for slot in self.plan.msgs[flow.tag].writes:
            count = landed[slot] = landed.get(slot, 0) + 1
            queue = waiters.get(slot)
            if queue is None:
                continue
            at = cursor.get(slot, 0)
            while at < len(queue) and queue[at][0] <= count:
                self._release(queue[at][1])
                at += 1
            cursor[slot] = at
        self._finished_one()

    def _finished_one(self) -> None:
        self._left -= 1
        self._last_s = self.run.env.now
        if self._left == 0:
            self._end()

    # -- C5: a pipeline's steady state ----------------------------------------------------------------
    def stream_loads(self) -> dict[tuple, tuple[float, bool]]:
        """Per connection (machine ranks): the payload bytes it carries over
        the whole buffer, and whether any of it is reduced on the way."""
        key = (id(self._connections), self.chunk_bytes)
        loads = self.run._loads.get(key)
        if loads is None:
            loads = self.run._loads[key] = {}
            for connection, m in zip(self._connections, self.plan.msgs, strict=True):
                size, reduce = loads.get(connection, (0.0, False))
                loads[connection] = (size + m.chunks * self.chunk_bytes, reduce or m.reduce)
        return loads

    def _stream(self) -> None:
        proto, model = self.protocol, self.run.machine.model
        for (src, dst), (size, reduce) in self.stream_loads().items():
            cap = model.fused_reduce_rate_Bps / proto.efficiency if reduce else math.inf
            self.run.network.launch(src, dst, size, cap, proto.efficiency, None, self._drained, 0.0, None, None, None,
                                    None, None)  # fmt: skip

    def _drained(self, _flow) -> None:
        self._finished_one()

    # -- C4, C5: the end -------------------------------------------------------------------------------
    def _end(self) -> None:
        env = self.run.env
        if self.pipeline is not None and self.run.probe:  # (measuring the drain alone, C5)
            end = env.now
        elif self.pipeline is not None:
            drain_alone_s, alone_s = self.run.alone(self)
            drained_s = self._last_s - self.last_arrival_s if self._connections else 0.0
            end = max(env.now, self.last_arrival_s + alone_s + max(0.0, drained_s - drain_alone_s))
        else:
            end = (self._last_s if self._connections else env.now) + self.call_s
        self.end_s = end
        timeout = env.timeout(end - env.now)
        timeout.callbacks.append(lambda _e: self.done.succeed(end))


# -- the run --------------------------------------------------------------------------------------------
class SharedRun:
    """One simulation of many calls over one network (module docstring).

    ``engine`` ``"fast"`` shares flows on :class:`~.network.FluidNetwork`,
    ``"reference"`` on :class:`~.reference.ReferenceNetwork` (the rules
    stated plainly); ``contention`` False gives every flow its route alone.
    Start calls (:meth:`start`, :meth:`send`), arrive their members, add
    SimPy processes of your own on :attr:`env`, then :meth:`run`.
    """

    def __init__(
        self,
        machine: Machine | str,
        *,
        engine: str = "fast",
        contention: bool = True,
        record_utilisation: bool = False,
        probe: bool = False,
    ) -> None:
        if engine not in NETWORKS:
            raise SimulationError(f"unknown engine {engine!r}: use {' or '.join(NETWORKS)}")
        self.machine = as_machine(machine)
        self.engine = engine
        self.contention = contention
        self.probe = probe  # a run that measures pipelined calls' drain alone (C5), for another run
        self.env = simpy.Environment()
        self.network = NETWORKS[engine](self.env, self.machine, contention=contention, record_timeline=False,
                                        record_utilisation=record_utilisation)  # fmt: skip
        self.calls: list[Call] = []
        self._plans: dict[int, _Plan] = {}
        self._alone: dict[tuple, tuple[float, float]] = {}
        self._connections: dict[tuple, list[tuple]] = {}
        self._loads: dict[tuple, dict] = {}  # Call.stream_loads, by connections and chunk size
        self._p2p: dict[str | None, Algorithm] = {}

    def connections(self, call: Call) -> list[tuple]:
        """The connections of ``call``'s messages in machine ranks (C1), worked
        out once per schedule, group and switch mapping (a tensor-parallel
        group calls the same schedule hundreds of times a step)."""
        key = (id(call.plan), call.ranks, tuple(sorted(call.switches.items())))
        found = self._connections.get(key)
        if found is None:
            found = self._connections[key] = [call._connection(m.connection) for m in call.plan.msgs]
        return found

    def plan(self, algorithm: Algorithm) -> _Plan:
        plan = self._plans.get(id(algorithm))
        if plan is None or plan.algorithm is not algorithm:
            plan = self._plans[id(algorithm)] = _Plan(algorithm)
        return plan

    def start(
        self,
        algorithm: Algorithm,
        size_bytes: float,
        ranks: Sequence[int] | None = None,
        *,
        protocol: str | None = None,
        name: str | None = None,
        switches: dict[str, str] | None = None,
    ) -> Call:
        """A call of ``algorithm`` for a ``size_bytes`` buffer on machine
        ranks ``ranks`` (default: all, in order), under ``protocol``
        (default: the schedule's, else the model's; R4), its in-switch
        reductions on ``switches[name]`` where given (a schedule built for
        the same GPUs of another node). Nothing moves until its members
        arrive (C2)."""
        p = algorithm.num_ranks
        ranks = tuple(range(self.machine.num_ranks)) if ranks is None else tuple(int(r) for r in ranks)
        label = name or algorithm.name
        if len(ranks) != p:
            raise AlgorithmError(f"{label}: {algorithm.name} is for {p} ranks but the group has {len(ranks)}")
        bad = [r for r in ranks if not 0 <= r < self.machine.num_ranks]
        if bad or len(set(ranks)) != p:
            why = f"rank {bad[0]} is not on {self.machine.name}" if bad else "a rank is listed twice"
            raise AlgorithmError(f"{label}: {why} (ranks 0..{self.machine.num_ranks - 1}, each once)")
        call = Call(self, self.plan(algorithm), ranks, size_bytes, protocol, label, switches)
        self.calls.append(call)
        return call

    def send(self, src: int, dst: int, size_bytes: float, *, protocol: str | None = "Simple",
             name: str | None = None) -> Call:  # fmt: skip
        """A point-to-point send of ``size_bytes`` from machine rank ``src``
        to ``dst`` (C5): a call of one message, member 0 the sender and
        member 1 the receiver."""
        key = protocol
        algorithm = self._p2p.get(key)
        if algorithm is None:
            from ..algorithm import Transfer
            from ..collectives import make_collective

            meta = {} if protocol is None else {"protocol": protocol}
            algorithm = Algorithm("send", make_collective("sendrecv", 2), (Transfer(0, 0, 1, step=0),), metadata=meta)
            self._p2p[key] = algorithm
        return self.start(algorithm, size_bytes, (src, dst), protocol=protocol, name=name or f"send {src}->{dst}")

    def alone(self, call: Call) -> tuple[float, float]:
        """(drain time of its streams, time by R7) of a pipelined ``call``
        alone on this machine, every member arriving at once: what C5
        stretches."""
        key = (
            id(call.plan.algorithm),
            call.ranks,
            call.size_bytes,
            call.protocol.name,
            tuple(sorted(call.switches.items())),
        )
        if key not in self._alone:
            solo = SharedRun(self.machine, engine=self.engine, contention=self.contention, probe=True)
            twin = solo.start(
                call.plan.algorithm, call.size_bytes, call.ranks, protocol=call.protocol.name, switches=call.switches
            )
            twin.arrive_all()
            solo.env.run()
            loads = call.stream_loads()
            routes = {c: solo.network.route(*c) for c in loads}
            streams = [_Stream(c, size, reduce) for c, (size, reduce) in loads.items()]
            model = self.machine.model
            proto = call.protocol
            alone_s, _, _ = pipelined_time(
                call.pipeline,
                call.size_bytes,
                stream_s=stream_time_s(
                    streams, routes, 1.0, proto.efficiency, model.fused_reduce_rate_Bps, self.contention
                ),  # fmt: skip
                latency_s=max((r[0] for r in routes.values()), default=0.0) + proto.hop_latency_s,
                call_s=call.call_s,
                call_overhead_s=model.call_overhead_s,
                schedule_s=None,
            )
            self._alone[key] = (twin._last_s, alone_s)
        return self._alone[key]

    def run(self, time_limit_s: float = 60.0, started_s: float | None = None, what: str = "shared run") -> int:
        """Process every event (under a wall-clock limit); returns how many."""
        events = run_with_limit(self.env, time_limit_s, what=what, started_s=started_s)
        if hasattr(self.network, "finish"):
            self.network.finish()
        return events


@dataclass(frozen=True)
class _Stream:
    """A connection's whole load as :func:`~.reference.stream_time_s` reads
    a message (``chunks`` bytes of one-byte chunks)."""

    connection: tuple
    chunks: float
    reduce: bool


# -- the entry for a list of calls ---------------------------------------------------------------------
@dataclass(frozen=True)
class ConcurrentCall:
    """One schedule of a concurrent simulation: ``algorithm`` for a
    ``size_bytes`` buffer on machine ``ranks`` (default all), its members
    arriving at ``start_s``, under ``protocol`` (default the schedule's)."""

    algorithm: Algorithm
    size_bytes: float
    ranks: tuple[int, ...] | None = None
    start_s: float = 0.0
    protocol: str | None = None
    name: str | None = None


@dataclass(frozen=True)
class CallTiming:
    """When a call of a concurrent simulation started and ended (seconds)."""

    name: str
    start_s: float
    end_s: float
    stats: dict = field(default_factory=dict)

    @property
    def time_s(self) -> float:
        return self.end_s - self.start_s


def simulate_concurrent(
    calls: Sequence[ConcurrentCall],
    machine: Machine | str,
    *,
    engine: str = "fast",
    contention: bool = True,
    time_limit_s: float = 60.0,
) -> list[CallTiming]:
    """Time ``calls`` run at once on ``machine`` (rules C1-C5), one
    :class:`CallTiming` each, in order. Unchecked: check each schedule
    alone first (``simulate`` does; :func:`simcoll.verify.check`).

    >>> from simcoll import load_machine
    >>> from simcoll.algorithms import generate
    >>> m = load_machine("ring:4")
    >>> ring = generate("ring", m, "allgather")
    >>> [round(t.time_s * 1e6, 3) for t in simulate_concurrent([ConcurrentCall(ring, 4e6)] * 2, m)]
    [242.1, 242.1]
    """
    wall0 = time.perf_counter()
    run = SharedRun(machine, engine=engine, contention=contention)
    started = []
    for spec in calls:
        if not isinstance(spec, ConcurrentCall):
            raise SimulationError(f"simulate_concurrent takes ConcurrentCall items, got a {type(spec).__name__}")
        if not (isinstance(spec.start_s, (int, float)) and math.isfinite(spec.start_s) and spec.start_s >= 0):
            raise SimulationError(
                f"{spec.name or spec.algorithm.name}: start_s must be a time >= 0, got {spec.start_s!r}"
            )
        call = run.start(spec.algorithm, spec.size_bytes, spec.ranks, protocol=spec.protocol, name=spec.name)
        timer = run.env.timeout(spec.start_s)
        timer.callbacks.append(lambda _e, call=call: call.arrive_all())
        started.append((spec, call))
    run.run(time_limit_s, started_s=wall0, what=f"concurrent simulation of {len(calls)} calls on {run.machine.name}")
    stuck = [call.name for _, call in started if call.end_s is None]
    if stuck:
        raise SimulationError(f"concurrent simulation stalled: {', '.join(stuck[:5])} never ended")
    return [CallTiming(call.name, spec.start_s, call.end_s, {"protocol": call.protocol.name, "call_s": call.call_s})
            for spec, call in started]  # fmt: skip

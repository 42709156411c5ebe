"""Algorithm mode: simulate an :class:`~simcoll.algorithm.Algorithm` transfer by
transfer over the fluid network.

Semantics (the same as :func:`simcoll.analytic.critical_path_time_s`, so that on an
uncontended network both agree to rounding error):

- Transfers are taken in schedule order (by step, or by start time for timed
  TACCL schedules) and cut into *batches* (one step, or one start time). A
  transfer in batch *k* reads its chunk at the source once every update of that
  chunk there from batches before *k* has landed (SCCL §3.3: a step reads the
  state at its start); updates of the same batch do not count.
- A message is one transfer, or a TACCL contiguity group on one rank pair
  (one α for the whole group).
- Messages on one rank pair are sent one after the other in schedule order: a
  message starts when it is ready and the previous message on the pair has
  left the wire (the connection is FIFO).
- A message flows over its route's resources (:mod:`.network`), then lands α
  later; a ``reduce`` then costs ``model.reduce_time_s(n)`` at the receiver
  (NV-Group Table 2's T_R) before the chunk counts as updated.
- The costs NCCL pays (:mod:`simcoll.cost_model`): links run at their
  effective rate; the protocol (``algorithm.metadata["protocol"]``, the
  ``protocol`` argument of :func:`~simcoll.simulator.simulate`, or the
  model's default) puts ``n / efficiency`` bytes on the wire and adds its
  ``hop_latency_s`` to every message's α; with ``compute.fused`` a reducing
  message flows at most at the reduction rate and nothing is charged after it
  (NCCL reduces inside the transfer pipeline); the call's fixed cost
  (``call.overhead_s`` + the protocol's ``call_latency_s``) is added once to
  the completion time (``stats["call_s"]``).

- An in-switch reduction (:class:`~simcoll.algorithm.SwitchReduction`) is one
  message: it waits for its chunk at every source, streams from all sources
  into the switch and from the switch to all destinations as one flow
  (:meth:`~.network.FluidNetwork.switch_route`, at the switch's reduce /
  multicast rate), and updates the chunk at every destination when it lands.
  Messages of one (switch, sources, destinations) group are FIFO like a rank
  pair's; no reduction cost is charged at the GPUs (the switch reduces).

- A runtime that moves the buffer in pipelined steps
  (``algorithm.metadata["step_pipeline"]``: NCCL's NVLS,
  :mod:`simcoll.nccl.pipeline`) is timed as that pipeline
  (:func:`_pipelined_time`): the schedule's busiest resource sets the rate a
  step streams at, and each step pays a latency, so the time is that of
  ``steps + stages - 1`` steps (``stats["step_pipeline"]``); the timeline
  and utilisation are the schedule's, and it is not run when neither is
  recorded.

There are no step barriers (k-synchronous steps order the reads; they do not
synchronise the ranks), exactly as in the analytic critical-path model.

SimPy drives the clock; to simulate millions of transfers, a message is not a
SimPy process and readiness is tracked with per-slot counters. A rank pair
whose route resources no other pair of the schedule uses is *private*: its
messages (FIFO on the pair) are always alone on their resources, so each runs
at its standalone rate and its wire end is known when it starts; the
simulator computes it directly and schedules one SimPy event per distinct
completion time (a ring step of 1024 ranks is one event). Other pairs go
through :class:`~.network.FluidNetwork` flows (max-min sharing, two events a
message). Both give the same times, timeline rows and utilisation intervals
bit for bit (``tests/test_sim_algorithm.py``). When every pair is private and
the schedule is large (:data:`BATCH_MIN_MESSAGES`), the messages completing at
one time land, release the reads waiting for them and start what became ready
as NumPy columns, a batch per event (``stats["batched_landings"]``), with the
same arithmetic and so the same results; a run whose first landings come a
message or two at a time (a chain) goes back to the per-message handlers.
Before any event, such a schedule is timed without events, batch by batch
in schedule order (:meth:`_Run._time_in_schedule_order`,
``stats["in_schedule_order"]``), wherever that is sure to give the events'
times: the same arithmetic again, a NumPy pass per schedule step.

Where no utilisation is recorded and the messages do not land in NumPy
batches, the event handlers run compiled (:mod:`.compiled`, ``stats["compiled"]``):
the same statements in C++, the same results bit for bit
(``tests/test_sim_compiled.py``), tens of times faster.

The static part is a :class:`~.plan.Plan`. When the schedule is
symmetric under shifting every rank by whole nodes, only one block of
nodes' messages runs (:mod:`.symmetry`), over one resource per orbit;
every other message gets its representative's times, and every resource
of an orbit its representative's utilisation (bit for bit the full run's:
``tests/test_sim_symmetry.py``).

Why one module of ~1,100 lines: the per-message handlers, their NumPy
batch forms, the timing in schedule order and the compiled core's inputs
read and write the same flat columns of one :class:`_Run`, and each must
give the others' results bit for bit; they are kept side by side so that a
change to one is seen beside the others (the rules themselves are stated
once, in :mod:`simcoll.simulator.reference`).
"""

from __future__ import annotations

import dataclasses
import math
import time
import weakref
from array import array
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import simpy

if TYPE_CHECKING:
    import pandas as pd

from ...algorithm import Algorithm, protocol_of
from ...analytic import chunk_bytes
from ...arrays import flatten
from ...errors import AlgorithmError, ScheduleTooLargeError, SimulationError
from ...limits import MAX_TRANSFERS
from ...machines import Machine
from ..engine import check_limit, run_with_limit
from ..fair_share import alone_rate_Bps
from ..network import Flow, FluidNetwork
from ..results import TIMELINE_COLUMNS, SimulationResult, make_result
from ..step_pipeline import pipelined_time
from . import compiled
from .plan import Plan, QueueTable, SlotLists, SlotNumbering, plan_switched, plan_vectorised, schedule_order
from .symmetry import (
    NodeRotation,
    TableRotation,
    node_rotation,
    orbit_rotation,
    quotient_plan,
    rebind_routes,
    spread_utilisation,
    table_rotation,
)


@dataclass
class _Prepared:
    """What a simulation of one Algorithm works out before its first event
    and that does not depend on the buffer size: its plan and, for the
    machine and ``contention`` setting it was last simulated on, its node
    rotation and quotient plan. Kept per Algorithm (:func:`_prepared`), so
    that timing one schedule at many sizes (``compare``, sweeps) builds them
    once; a run works on copies of the one column it changes (``pending``)."""

    plan: Plan | None = None
    machine: weakref.ref | None = None
    contention: bool | None = None
    utilisation: bool | None = None  # (a network recording it keeps dominated resources in its routes)
    rotation: NodeRotation | None = None
    quotient: Plan | None = None
    resources: list[tuple] = field(default_factory=list)  # the network's resources the rotation was found with

    @property
    def messages(self) -> int:
        return sum(plan.messages for plan in (self.plan, self.quotient) if plan is not None)


#: Per Algorithm, by identity (an Algorithm is not hashable), least recently
#: simulated first: dropped when the Algorithm is, or when the plans kept
#: exceed :data:`PREPARED_MAX_MESSAGES` (the latest is always kept).
_PREPARED: dict[int, _Prepared] = {}
PREPARED_MAX_MESSAGES = 4_000_000
#: Schedules with at least this many messages, all on private pairs, land
#: and start their messages a batch at a time with NumPy (:meth:`_Run._land_batch`);
#: below it the per-message handlers are faster.
BATCH_MIN_MESSAGES = 20_000
#: A batched run whose first :data:`BATCH_TRIAL_EVENTS` landing events average fewer messages
#: than :data:`BATCH_MIN_WIDTH` (a chain, whose messages land one at a time) goes on a message at a
#: time: NumPy's cost per call then outweighs what it saves.
BATCH_TRIAL_EVENTS = 256
BATCH_MIN_WIDTH = 8
#: Whether a schedule that could land in batches is first timed without events, in schedule order
#: (:meth:`_Run._time_in_schedule_order`); off, it runs on SimPy events (tests compare the two).
IN_SCHEDULE_ORDER = True


def _prepared(algorithm: Algorithm) -> _Prepared:
    key = id(algorithm)
    prepared = _PREPARED.pop(key, None)
    if prepared is None:
        prepared = _Prepared()
        weakref.finalize(algorithm, _PREPARED.pop, key, None)
    _PREPARED[key] = prepared  # now the most recent
    return prepared


def _forget_old_plans() -> None:
    """Drop the least recently simulated schedules' plans beyond :data:`PREPARED_MAX_MESSAGES`."""
    total = sum(p.messages for p in _PREPARED.values())
    for key in list(_PREPARED)[:-1]:
        if total <= PREPARED_MAX_MESSAGES:
            break
        total -= _PREPARED.pop(key).messages


def _fresh(plan: Plan) -> Plan:
    """``plan`` with its own copy of the reads still waiting per message (the run counts them down)."""
    return dataclasses.replace(plan, pending=array(plan.pending.typecode, plan.pending))


class _Run:
    """One Algorithm-mode simulation (module docstring): the static plan, the
    per-slot wait tables, the rank-pair queues over a :class:`FluidNetwork`,
    and the event handlers that move messages through them.

    State per message lives in flat ``array`` columns indexed by message
    number, so that millions of messages stay small; the handlers are the hot
    path and read those columns through locals.
    """

    def __init__(
        self,
        algorithm: Algorithm,
        machine: Machine,
        size_bytes: float,
        *,
        contention: bool,
        record_utilisation: bool,
        protocol: str | None = None,
        time_limit_s: float = math.inf,
        started_s: float | None = None,
    ) -> None:
        self.started_s = time.perf_counter() if started_s is None else started_s
        self.time_limit_s = time_limit_s
        self.what = f"simulation of {algorithm.name} on {machine.name}"
        if algorithm.num_ranks != machine.num_ranks:
            raise AlgorithmError(
                f"{algorithm.name} is for {algorithm.num_ranks} ranks but {machine.name} has {machine.num_ranks}"
            )
        self.algorithm = algorithm
        self.machine = machine
        self.nbytes = chunk_bytes(algorithm.collective, size_bytes)
        self.num_chunks = algorithm.collective.num_chunks
        self.prepared = prepared = _prepared(algorithm)
        self._ordered: tuple | None = None  # (:meth:`_schedule_order`)
        self.env = simpy.Environment()
        self.net = FluidNetwork(
            self.env, machine, contention=contention, record_timeline=False, record_utilisation=record_utilisation
        )
        # (a quotient's utilisation is copied onto each orbit's resources after the run: spread_utilisation)
        self.rotation = self._rotation(contention, record_utilisation)
        if self.rotation is not None:
            self.plan = plan = _fresh(prepared.quotient)
        else:
            self.plan = plan = _fresh(self._full_plan())
        _forget_old_plans()
        # the plan's per-message columns the event handlers read (:class:`Plan`)
        self.pending, self.groups, self.is_reduce = plan.pending, plan.groups, plan.reduce
        self.fanout = plan.fanout or {}
        self._wait_tables()
        model = machine.model
        self.protocol = model.protocol(protocol_of(algorithm, protocol))
        self.efficiency = self.protocol.efficiency
        # fused reduction: no time after a reducing message, its payload rate capped instead
        self.reduce_time = model.reduce_after_s
        self.after_one = self.reduce_time(self.nbytes)
        self.reduce_cap = model.fused_reduce_rate_Bps
        self.call_s = model.call_cost_s(self.protocol.name)
        self._queues(contention, record_utilisation)
        n_msgs = self.plan.messages
        # per message: when it started and left the wire (arrival and completion follow)
        self.msg_start = array("d", bytes(8 * n_msgs))
        self.msg_wire = array("d", bytes(8 * n_msgs))
        self.landed_count = 0
        self.last_s = 0.0
        self.landings: dict[float, list] = {}  # private pairs: completion time -> messages
        self.batched = self._batchable()
        self.in_schedule_order = False  # timed without events (:meth:`_time_in_schedule_order`)
        self.batch_events = self.batch_landed = 0
        self.compiled = False  # run by the compiled event core (:mod:`.compiled`)
        if self.batched:
            self._batch_columns()

    # -- static part ---------------------------------------------------------------------------
    def _full_plan(self) -> Plan:
        """The plan of every message (:class:`Plan`), worked out once per
        Algorithm; under a node rotation found from the transfer table
        (:func:`~.symmetry.table_rotation`) only when a timeline asks for it."""
        prepared = self.prepared
        if prepared.plan is None:
            algorithm, num_chunks, present = self.algorithm, self.num_chunks, self._present()
            if algorithm.switch_reductions:
                prepared.plan = plan_switched(algorithm, num_chunks, present)
            else:
                prepared.plan = plan_vectorised(algorithm, num_chunks, present, self._schedule_order)
        self._ordered = None
        return prepared.plan

    def _schedule_order(self, algorithm: Algorithm) -> tuple:
        """:func:`~.plan.schedule_order` of ``algorithm``, worked out once for
        the rotation search and the plan after it (on 1,024 GPUs a 2D ring's
        contiguity groups take 1.5 s to put in order); let go with the plan."""
        if self._ordered is None:
            self._ordered = schedule_order(algorithm)
        return self._ordered

    @property
    def full_plan(self) -> Plan:
        """The plan of every message (the quotient's too, under a node rotation)."""
        return self.plan if self.rotation is None else self._full_plan()

    def _present(self) -> np.ndarray:
        """The slots (chunk + rank × chunks) the collective starts with, ascending."""
        # the precondition's (chunk, rank) pairs, read from the input layout (a million on 1,024 ranks)
        rank, chunk = flatten(self.algorithm.collective.input_layout)
        present = chunk + rank * self.num_chunks
        if not (np.diff(present) > 0).all():  # (layouts list their chunks in order: sorted already)
            present = np.unique(present)
        return present

    def _rotation(self, contention: bool, record_utilisation: bool) -> NodeRotation | None:
        """The schedule's node-rotation symmetry (:mod:`.symmetry`), with the
        representatives' routes installed in the network, or None. Worked
        out once per Algorithm, machine and ``contention`` (:class:`_Prepared`);
        a later run creates the same resources in its own network and maps
        the representatives' routes onto them."""
        prepared, machine = self.prepared, self.machine
        if (
            prepared.machine is not None
            and prepared.machine() is machine
            and (prepared.contention, prepared.utilisation) == (contention, record_utilisation)
        ):
            rotation = prepared.rotation and rebind_routes(prepared.rotation, self.net, prepared.resources)
        else:
            check_limit(self.started_s, self.time_limit_s, self.what, "looking for node symmetry")
            # from the transfer table, unless a plan of every message is at hand already
            found = None
            orbit = self.algorithm.orbit
            if orbit is not None:  # the representatives and their rotation: no table of images
                found = orbit_rotation(self.algorithm, self.net, self.num_chunks)
                if found is None and len(orbit) > MAX_TRANSFERS:
                    raise ScheduleTooLargeError(
                        f"{self.what}: the machine's routes do not repeat under the schedule's rotation by "
                        f"{orbit.shift_ranks} ranks (or a multiple of it), so each of its {len(orbit):,} transfers "
                        "would be simulated, more than simcoll lists one by one (simcoll.limits.MAX_TRANSFERS)"
                    )
                found = found or TableRotation(None, None)  # (every message planned: the images listed)
            elif prepared.plan is None:
                found = table_rotation(self.algorithm, self.net, self.num_chunks, self._present(), self._schedule_order)
            if found is not None:
                rotation, quotient = found.rotation, found.quotient
                if rotation is not None:  # (else the plan of every message follows: it takes the order)
                    self._ordered = None
            else:
                plan = self._full_plan()
                rotation = node_rotation(plan, self.net, self.algorithm.num_ranks, self.num_chunks)
                quotient = None if rotation is None else quotient_plan(plan, rotation)
            prepared.machine, prepared.contention, prepared.rotation = weakref.ref(machine), contention, rotation
            prepared.utilisation = record_utilisation
            prepared.quotient = quotient
            prepared.resources = self.net.resource_calls() if rotation is not None else []
        if rotation is not None:
            for (src, dst), route in rotation.routes.items():
                self.net.override_route(src, dst, route)
        return rotation

    def _wait_tables(self) -> None:
        """Waiters sorted by (slot, updates needed): CSR offsets per slot and a
        cursor per slot that :meth:`_release` advances. The tables are
        indexed by :class:`~.plan.SlotNumbering`: per slot in use only, where
        most slots are never read or written (an Alltoall's)."""
        plan = self.plan
        # per message: the slot it updates (its first transfer's chunk at the destination)
        if plan.write_slot is not None:
            write = plan.write_slot.astype(np.int64)
        else:
            write = np.frombuffer(plan.chunk, dtype=np.int32).astype(np.int64)
            write += np.frombuffer(plan.dst, dtype=np.int32).astype(np.int64) * self.num_chunks
        fanout = plan.fanout or {}
        # the slots of messages that update several: groups' lists, switch reductions' arrays
        uses = [plan.wait_slot, write]
        if isinstance(fanout, SlotLists):
            uses.append(fanout.slots)
            several = list(plan.groups.values())
        else:
            several = [*plan.groups.values(), *fanout.values()]
        index = SlotNumbering.of(uses, self.num_chunks * self.algorithm.num_ranks, several)
        # the slots' indices: in _release, and for the timing in schedule order
        self.wait_index = index(plan.wait_slot)
        self.msg_slot = array("q", index(write).tobytes())
        self.group_slots, self.fanout_slots = index.of_lists(plan.groups), index.of_lists(fanout)
        order = np.lexsort((plan.wait_landed, self.wait_index))
        slots_sorted = self.wait_index[order]
        self.w_landed = array("i", plan.wait_landed[order].astype(np.int32).tobytes())
        self.w_msg = array("q", plan.wait_msg[order].astype(np.int64).tobytes())
        offsets = np.searchsorted(slots_sorted, np.arange(index.count + 1, dtype=np.int64))
        self.cursor = array("q", offsets[:-1].astype(np.int64).tobytes())
        self.slot_end = array("q", offsets[1:].astype(np.int64).tobytes())
        self.arrived = array("i", bytes(4 * index.count))

    def _queues(self, contention: bool, record_utilisation: bool) -> None:
        """The FIFO queue of each rank pair, its route, its standalone rate and
        whether it is private (:func:`_private_pairs`)."""
        plan = self.plan
        self.pairs = list(plan.queues)
        queues = plan.queues
        self.q_msgs = queues.queue_arrays() if isinstance(queues, QueueTable) else [queues[p] for p in self.pairs]
        self.routes = []
        for i, pair in enumerate(self.pairs):
            if i % 1024 == 1023:
                check_limit(
                    self.started_s, self.time_limit_s, self.what, f"working out routes ({i} of {len(self.pairs)} pairs)"
                )
            self.routes.append(self.net.route(*pair))  # fails early on an unroutable pair
        msg_q = np.empty(plan.messages, dtype=np.int32)
        for qi, msgs in enumerate(self.q_msgs):
            msg_q[msgs] = qi
        self.msg_q_np = msg_q
        self.msg_q = array("i", msg_q.tobytes())
        hop = self.protocol.hop_latency_s
        self.q_alpha = [alpha + hop for alpha, _, _ in self.routes]
        self.q_rate, self.q_fast = _private_pairs(self.routes, contention, record_utilisation)
        # payload rates of a copy and of a (fused) reduction on each pair
        eff, cap = self.efficiency, self.reduce_cap
        self.q_good = [rate * eff for rate in self.q_rate]
        self.q_good_reduce = [min(rate * eff, cap) for rate in self.q_rate]
        n_q = len(self.pairs)
        self.q_head = [0] * n_q
        self.q_free = [0.0] * n_q  # private pairs: when the wire is free again
        self.q_busy = bytearray(n_q)  # shared pairs: a message is on the wire

    def _batchable(self) -> bool:
        """Whether messages can land and start a batch at a time
        (:meth:`_land_batch`): every pair private, every message one transfer
        updating one slot, and enough messages for NumPy to pay."""
        plan = self.plan
        # switch reductions always fan out, so without fan-out every queue is a rank pair's
        return plan.messages >= BATCH_MIN_MESSAGES and all(self.q_fast) and not plan.groups and not self.fanout

    def _batch_columns(self) -> None:
        """NumPy views and copies of the per-message, per-slot and per-pair
        columns that the batch handlers read and write (the views write
        through to the arrays the rest of the run reads)."""
        plan = self.plan
        self.b_pending = np.frombuffer(self.pending, dtype=np.int32)
        self.b_arrived = np.frombuffer(self.arrived, dtype=np.int32)
        self.b_cursor = np.frombuffer(self.cursor, dtype=np.int64)
        self.b_slot_end = np.frombuffer(self.slot_end, dtype=np.int64)
        self.b_w_landed = np.frombuffer(self.w_landed, dtype=np.int32)
        self.b_w_msg = np.frombuffer(self.w_msg, dtype=np.int64)
        self.b_msg_slot = np.frombuffer(self.msg_slot, dtype=np.int64)
        self.b_start = np.frombuffer(self.msg_start, dtype=np.float64)
        self.b_wire = np.frombuffer(self.msg_wire, dtype=np.float64)
        self.b_reduce = np.frombuffer(bytes(plan.reduce), dtype=np.uint8).astype(bool)
        lengths = np.array([len(q) for q in self.q_msgs], dtype=np.int64)
        self.b_q_first = np.concatenate(([0], np.cumsum(lengths)[:-1]))
        self.b_q_len = lengths
        self.b_q_msgs = np.concatenate([np.asarray(q, dtype=np.int64) for q in self.q_msgs] or [lengths])
        self.b_q_head = np.zeros(len(lengths), dtype=np.int64)
        self.b_q_free = np.zeros(len(lengths), dtype=np.float64)
        self.b_rate = np.array(self.q_good, dtype=np.float64)
        self.b_rate_reduce = np.array(self.q_good_reduce, dtype=np.float64)
        self.b_alpha = np.array(self.q_alpha, dtype=np.float64)

    def _start_batch(self, queues: np.ndarray, now: float) -> None:
        """:meth:`_start_private` for many pairs at once: each sends the ready
        messages at the head of its queue, one after the other, at its
        standalone rate (the same arithmetic, so the same times bit for bit)."""
        pending, reducing = self.b_pending, self.b_reduce
        while queues.size:
            head = self.b_q_head[queues]
            left = head < self.b_q_len[queues]
            queues, head = queues[left], head[left]
            m = self.b_q_msgs[self.b_q_first[queues] + head]
            ready = pending[m] == 0
            queues, m = queues[ready], m[ready]
            if not queues.size:
                return
            free = self.b_q_free[queues]
            t0 = np.where(free > now, free, now)
            duration, tail = self._costs(queues, reducing[m])
            wire = t0 + duration
            self.b_start[m] = t0
            self.b_wire[m] = wire
            self._schedule_landings(m, wire + tail)
            self.b_q_head[queues] += 1
            self.b_q_free[queues] = wire

    def _costs(self, queues: np.ndarray, reducing: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per message on private pair ``queues[i]`` (a reduction where
        ``reducing[i]``): its time on the wire and the rest until it lands
        (α, then the reduction), as :meth:`_start_private` works them out."""
        duration = self.nbytes / np.where(reducing, self.b_rate_reduce[queues], self.b_rate[queues])
        return duration, self.b_alpha[queues] + np.where(reducing, self.after_one, 0.0)

    def _unbatch(self) -> None:
        """Go on a message at a time (:meth:`_land_private`): the pairs'
        queue heads and free times move to the per-message handlers' lists,
        and the landings already scheduled become lists of messages (their
        events still call :meth:`_land_batch`, which hands them over). The
        same arithmetic either way, so the same times."""
        self.batched = False
        self.q_head = self.b_q_head.tolist()
        self.q_free = self.b_q_free.tolist()
        for when, parts in self.landings.items():
            self.landings[when] = np.concatenate(parts).tolist()

    def _schedule_landings(self, msgs: np.ndarray, done: np.ndarray) -> None:
        """Messages ``msgs`` land at ``done``: one SimPy event per new completion time."""
        order = np.argsort(done, kind="stable")
        times, first = np.unique(done[order], return_index=True)
        cuts = np.append(first, len(order))
        landings, env = self.landings, self.env
        for k, when in enumerate(times.tolist()):
            part = msgs[order[cuts[k] : cuts[k + 1]]]
            batch = landings.get(when)
            if batch is None:
                landings[when] = [part]
                simpy.Timeout(env, _delay_to(env.now, when), when).callbacks.append(self._land_batch)
            else:
                batch.append(part)

    def _land_batch(self, event: simpy.Event) -> None:
        """:meth:`_land_private` for a batch: the messages completing at
        ``event.value`` update their slots, the reads waiting for those
        updates are released (as :meth:`_release` does one landing at a
        time) and the pairs whose messages became ready send."""
        if not self.batched:  # scheduled before the run went on a message at a time
            self._land_private(event)
            return
        now = event.value
        env = self.env
        if env.now != now:  # the clock stopped an ulp short: wait the exact rest
            simpy.Timeout(env, now - env.now, now).callbacks.append(self._land_batch)
            return
        batch = np.concatenate(self.landings.pop(now))
        self._landed_at(now, len(batch))
        self.batch_events += 1
        self.batch_landed += len(batch)
        if self.batch_events == BATCH_TRIAL_EVENTS and self.batch_landed < BATCH_MIN_WIDTH * BATCH_TRIAL_EVENTS:
            self._unbatch()
            complete = self._complete
            for m in batch.tolist():
                complete(m, now)
            return
        slots, counts = np.unique(self.b_msg_slot[batch], return_counts=True)
        arrived, cursor = self.b_arrived, self.b_cursor
        arrived[slots] += counts.astype(np.int32)
        released = []
        while slots.size:
            at = cursor[slots]
            inside = at < self.b_slot_end[slots]
            slots, at = slots[inside], at[inside]
            due = self.b_w_landed[at] <= arrived[slots]
            slots, at = slots[due], at[due]
            if not slots.size:
                break
            released.append(self.b_w_msg[at])
            cursor[slots] = at + 1
        if not released:
            return
        waiting = np.concatenate(released)
        np.subtract.at(self.b_pending, waiting, 1)
        ready = waiting[self.b_pending[waiting] == 0]
        if ready.size:
            self._start_batch(np.unique(self.msg_q_np[ready]), now)

    def _time_in_schedule_order(self) -> bool:
        """Time an all-private schedule without events; False (nothing
        changed) where that might not give what the events give.

        On private pairs a message's times follow from earlier ones: it
        starts at ``max(when its pair's previous message left the wire,
        when its reads were released)``, leaves the wire ``size / rate``
        later and lands ``α (+ reduction)`` after that, and a read waiting
        for ``k`` updates of a slot is released when the ``k``-th of them
        lands. Taken batch by batch in schedule order (rank pairs' FIFO
        order within a batch: :func:`_timing_groups`), the ``k`` updates a
        read waits for are those of earlier batches (checked), all timed
        already, so the ``k``-th lands at the latest of them - unless an
        update of a later batch lands earlier, which is checked too: then
        the events decide. The same floating-point operations as
        :meth:`_start_private`, so the same times bit for bit
        (``tests/test_sim_algorithm.py``); NumPy works a batch (a chain's
        step) at a time where the events would land messages one by one.
        """
        plan = self.plan
        n = plan.messages
        batch = np.frombuffer(plan.batch, dtype=np.int32)
        groups = _timing_groups(batch, self.msg_q_np, self.b_q_msgs) if n else None
        if groups is None:
            return False
        order, group_start, batch_ends = groups
        # each message's reads, in the order their messages are timed
        position = np.empty(n, dtype=np.int64)
        position[order] = np.arange(n)
        wait_position = position[plan.wait_msg]
        del position
        by_position = _stable_order(wait_position)
        wait_position = wait_position[by_position]
        wait_slot = self.wait_index[by_position]
        wait_landed = plan.wait_landed[by_position]
        wait_start = np.searchsorted(wait_position, group_start)
        queue = self.msg_q_np.astype(np.int64)
        duration, tail = self._costs(queue, self.b_reduce)
        write_slot = self.b_msg_slot
        start, wire, done = (np.empty(n, dtype=np.float64) for _ in range(3))
        free = np.zeros(len(self.pairs), dtype=np.float64)
        num_slots = len(self.arrived)
        written = np.zeros(num_slots, dtype=np.int64)  # per slot: updates in the batches timed so far
        latest = np.zeros(num_slots, dtype=np.float64)  # ... and when the last of them landed
        read_at = np.zeros(num_slots, dtype=np.float64)  # per slot: the latest release read from it
        batch_first = 0
        for g in range(len(group_start) - 1):
            if g % 256 == 255:
                check_limit(
                    self.started_s, self.time_limit_s, self.what, f"timing batch {int(batch[order[group_start[g]]])}"
                )
            first, last = int(group_start[g]), int(group_start[g + 1])
            msgs = order[first:last]
            ready = np.zeros(last - first, dtype=np.float64)
            w0, w1 = int(wait_start[g]), int(wait_start[g + 1])
            if w1 > w0:
                slots = wait_slot[w0:w1]
                if (written[slots] != wait_landed[w0:w1]).any():
                    return False  # a read waits for other than all the updates of earlier batches
                released = latest[slots]
                np.maximum.at(ready, wait_position[w0:w1] - first, released)
                read_at[slots] = released
            queues = queue[msgs]
            t0 = np.maximum(free[queues], ready)
            left = t0 + duration[msgs]
            free[queues] = left
            start[msgs] = t0
            wire[msgs] = left
            done[msgs] = left + tail[msgs]
            if batch_ends[g]:
                msgs = order[batch_first:last]
                slots = write_slot[msgs]
                landed = done[msgs]
                if (landed < read_at[slots]).any():  # an update landed before one a read waited for
                    return False
                np.maximum.at(latest, slots, landed)
                np.add.at(written, slots, 1)
                batch_first = last
        self.b_start[:] = start
        self.b_wire[:] = wire
        self.landed_count = n
        self.last_s = float(done.max())
        self.in_schedule_order = True
        return True

    # -- event handlers ------------------------------------------------------------------------
    def _payload(self, m: int) -> tuple[float, float]:
        """Bytes of message ``m`` and the reduction time after it arrives."""
        group = self.plan.groups.get(m)
        if group is None:
            return self.nbytes, (self.after_one if self.plan.reduce[m] else 0.0)
        size = self.nbytes * len(group)
        return size, (self.reduce_time(size) if self.plan.reduce[m] else 0.0)

    def payloads(self) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`_payload` of every message, as columns."""
        return _sizes(self.plan, self.nbytes, self.reduce_time)

    def _start_private(self, qi: int, now: float) -> None:
        """Send the ready messages at the head of a private pair's queue: the
        pair alone uses its resources, so each runs at its standalone rate and
        its wire end is known now; one SimPy event per completion time."""
        msgs = self.q_msgs[qi]
        pending, groups, is_reduce = self.pending, self.groups, self.is_reduce
        msg_start, msg_wire, landings = self.msg_start, self.msg_wire, self.landings
        head = self.q_head[qi]
        end = len(msgs)
        free = self.q_free[qi]
        rate, rate_reduce = self.q_good[qi], self.q_good_reduce[qi]
        alpha = self.q_alpha[qi]
        while head < end:
            m = msgs[head]
            if pending[m]:
                break
            head += 1
            t0 = free if free > now else now
            if m in groups:  # the hot path: :meth:`_payload` inlined
                size, after = self._payload(m)
            else:
                size, after = self.nbytes, (self.after_one if is_reduce[m] else 0.0)
            free = t0 + size / (rate_reduce if is_reduce[m] else rate)
            msg_start[m] = t0
            msg_wire[m] = free
            done = free + (alpha + after)
            batch = landings.get(done)
            if batch is None:
                landings[done] = [m]
                env = self.env
                simpy.Timeout(env, _delay_to(env.now, done), done).callbacks.append(self._land_private)
            else:
                batch.append(m)
        self.q_head[qi] = head
        self.q_free[qi] = free

    def _start_shared(self, qi: int) -> None:
        """Send the head of a shared pair's queue through the network, if it is
        ready and the pair's previous message has left the wire."""
        if self.q_busy[qi]:
            return
        head = self.q_head[qi]
        msgs = self.q_msgs[qi]
        if head >= len(msgs):
            return
        m = msgs[head]
        if self.plan.pending[m]:
            return
        self.q_head[qi] = head + 1
        self.q_busy[qi] = 1
        size, after = self._payload(m)
        src, dst = self.pairs[qi]
        eff = self.efficiency
        cap = self.reduce_cap / eff if self.plan.reduce[m] else math.inf  # on wire bytes
        after += self.protocol.hop_latency_s
        # no kind, track, label or chunk: the network records no timeline here (:meth:`timeline` builds it)
        self.net.launch(src, dst, size, cap, eff, self._sent, self._landed, after, None, None, None, None, m)

    def _release(self, slot: int, now: float) -> None:
        """One more update of ``slot`` has landed: start the messages whose
        reads were waiting for it."""
        count = self.arrived[slot] + 1
        self.arrived[slot] = count
        w_landed, w_msg, pending, msg_q, q_fast = self.w_landed, self.w_msg, self.pending, self.msg_q, self.q_fast
        i = self.cursor[slot]
        end = self.slot_end[slot]
        while i < end and w_landed[i] <= count:
            w = w_msg[i]
            pending[w] -= 1
            if not pending[w]:
                qi = msg_q[w]
                if q_fast[qi]:
                    self._start_private(qi, now)
                else:
                    self._start_shared(qi)
            i += 1
        self.cursor[slot] = i

    def _complete(self, m: int, now: float) -> None:
        """Message ``m`` has landed (and reduced): its chunks are updated."""
        group = self.group_slots.get(m)
        if group is None:
            fanout = self.fanout_slots.get(m) if self.fanout_slots else None
            if fanout is None:
                self._release(self.msg_slot[m], now)
            else:
                for slot in fanout:
                    self._release(slot, now)
        else:
            for slot in group:
                self._release(slot, now)

    def _landed_at(self, now: float, count: int) -> None:
        self.landed_count += count
        if now > self.last_s:
            self.last_s = now

    def _land_private(self, event: simpy.Event) -> None:
        """Private messages completing at ``event.value`` land."""
        now = event.value
        env = self.env
        if env.now != now:  # the clock stopped an ulp short: wait the exact rest
            simpy.Timeout(env, now - env.now, now).callbacks.append(self._land_private)
            return
        batch = self.landings.pop(now)
        self._landed_at(now, len(batch))
        complete = self._complete
        for m in batch:
            complete(m, now)

    def _sent(self, flow: Flow) -> None:
        """A shared pair's message left the wire: the pair may send its next."""
        qi = self.msg_q[flow.tag]
        self.q_busy[qi] = 0
        self._start_shared(qi)

    def _landed(self, flow: Flow) -> None:
        """A shared pair's message landed (network callback)."""
        m = flow.tag
        self.msg_start[m] = flow.start_s
        self.msg_wire[m] = flow.wire_end_s
        now = self.env.now
        self._landed_at(now, 1)
        self._complete(m, now)

    # -- driving -------------------------------------------------------------------------------
    def run(self) -> int:
        """Start every pair's queue, run to the end; the number of SimPy events.
        Raises :class:`~simcoll.errors.SimulationError` when messages are left
        or the wall-clock limit (counted from the set-up) is reached."""
        if self.batched and IN_SCHEDULE_ORDER and self._time_in_schedule_order():
            return 0
        if compiled.applies(self):
            self.compiled = True
            events = compiled.run_compiled(self)
        else:
            if self.batched:
                self._start_batch(np.arange(len(self.pairs), dtype=np.int64), 0.0)
            else:
                for qi in range(len(self.pairs)):
                    if qi % 1024 == 1023:
                        check_limit(
                            self.started_s,
                            self.time_limit_s,
                            self.what,
                            f"starting queues ({qi} of {len(self.pairs)} pairs)",
                        )
                    if self.q_fast[qi]:
                        self._start_private(qi, 0.0)
                    else:
                        self._start_shared(qi)
            events = run_with_limit(self.env, self.time_limit_s, what=self.what, started_s=self.started_s)
        n_msgs = self.plan.messages
        if self.landed_count != n_msgs:
            pending = self.plan.pending
            stuck = [m for m in range(n_msgs) if pending[m]][:5]
            detail = "; ".join(f"{self.plan.describe(m)} waits for its chunk at the source" for m in stuck)
            raise SimulationError(
                f"{self.what} stalled: {n_msgs - self.landed_count} of {n_msgs} messages never completed "
                f"({detail or 'waiting on the network'})"
            )
        return events

    def _per_message(self, values: np.ndarray) -> np.ndarray:
        """Per message of the schedule, from the simulated messages' ``values``
        (under a node rotation, each message has its representative's)."""
        return values if self.rotation is None else values[self.rotation.rep_of]

    @property
    def messages(self) -> int:
        """Messages of the schedule (not only those simulated)."""
        # (under a rotation each representative stands for one message per block of nodes)
        return self.plan.messages * (1 if self.rotation is None else self.rotation.order)

    def private_count(self) -> int:
        """How many messages of the schedule went on private pairs (under a
        rotation, each representative's orbit has ``order`` messages)."""
        return int(self._private_simulated().sum()) * (1 if self.rotation is None else self.rotation.order)

    def _private_simulated(self) -> np.ndarray:
        if not self.plan.messages:
            return np.zeros(0, bool)
        return np.frombuffer(bytes(self.q_fast), dtype=np.uint8).astype(bool)[self.msg_q_np]

    def record_private(self) -> None:
        """Hand the private pairs' messages to the network's counters and
        utilisation, as if it had run them."""
        if self.rotation is not None and not self.net.record_utilisation:  # every message counts once
            self.net.transfers = self.messages
            return
        msgs = np.flatnonzero(self._private_simulated())  # (under a rotation, the representatives)
        start = np.frombuffer(self.msg_start, dtype=np.float64)[msgs]
        wire = np.frombuffer(self.msg_wire, dtype=np.float64)[msgs]
        resources = [res if fast_q else () for (_, _, res), fast_q in zip(self.routes, self.q_fast, strict=True)]
        route = self.msg_q_np[msgs]
        rates = self.q_rate
        if math.isfinite(self.reduce_cap):  # fused reductions on the wire at their capped rate: routes twice
            n_q = len(resources)
            resources = resources + resources
            rates = rates + [r / self.efficiency for r in self.q_good_reduce]
            is_reduce = np.frombuffer(bytes(self.plan.reduce), dtype=np.uint8).astype(bool)[msgs]
            route = route + n_q * is_reduce
        self.net.add_alone_flows(resources, rates, route, start, wire)
        if self.rotation is not None:  # the representatives' intervals onto every resource of their orbits
            self.net.transfers = self.messages
            self.net.finish()
            spread_utilisation(self.rotation, self.net)

    def timeline(self) -> pd.DataFrame:
        """The timeline frame (:func:`_timeline_frame`)."""
        start = self._per_message(np.frombuffer(self.msg_start, dtype=np.float64))
        wire = self._per_message(np.frombuffer(self.msg_wire, dtype=np.float64))
        alpha = self._per_message(np.array(self.q_alpha, dtype=np.float64)[self.msg_q_np])
        plan = self.plan if self.rotation is None else self.full_plan
        size, after = _sizes(plan, self.nbytes, self.reduce_time)
        return _timeline_frame(plan, start, wire + alpha, wire + (alpha + after), size)


def _simulate_algorithm(
    algorithm: Algorithm,
    machine: Machine,
    size_bytes: float,
    *,
    contention: bool = True,
    time_limit_s: float = 60.0,
    record_timeline: bool = True,
    record_utilisation: bool = True,
    protocol: str | None = None,
    started_s: float | None = None,
) -> SimulationResult:
    """Simulate ``algorithm`` on ``machine`` for a ``size_bytes`` buffer
    (nccl-tests naming: one chunk is ``size_bytes / collective.size_chunks``);
    the Algorithm-mode back end of :func:`simcoll.simulator.simulate`, which
    documents the arguments and checks them.

    With ``contention=False`` every message runs alone at its route's α-β
    cost and the result equals :func:`simcoll.analytic.critical_path_time_s`; with
    ``contention=True`` messages share the network max-min fairly and the
    model's contention parameters apply (:mod:`simcoll.simulator.network`).
    ``record_timeline`` / ``record_utilisation`` off save time and memory on
    very large schedules (the result's frames are then empty). The
    wall-clock limit counts from ``started_s`` (a :func:`time.perf_counter`
    reading; default now: :func:`~simcoll.simulator.simulate` passes the
    moment before its verification).
    """
    wall0 = time.perf_counter()
    run = _Run(
        algorithm,
        machine,
        size_bytes,
        contention=contention,
        record_utilisation=record_utilisation,
        protocol=protocol,
        time_limit_s=time_limit_s,
        started_s=started_s,
    )
    plan_s = time.perf_counter() - wall0
    table = (algorithm.metadata or {}).get("step_pipeline")
    pipelined = table is not None and run.protocol.name is not None
    # a pipeline's time needs the schedule's loads, not its run: it runs only for what it records
    ran = not pipelined or record_timeline or record_utilisation
    events = run.run() if ran else 0
    if ran:
        run.record_private()
    time_s, call_s = run.last_s + run.call_s, run.call_s
    stats: dict[str, object] = {}
    if pipelined:
        time_s, call_s, stats["step_pipeline"] = _pipelined_time(run, table, size_bytes, run.last_s if ran else None)
    return make_result(
        run.net,
        timeline=run.timeline() if record_timeline else None,
        name=algorithm.name,
        collective=algorithm.collective,
        size_bytes=size_bytes,
        mode="algorithm",
        time_s=time_s,
        stats={
            **stats,
            "path": _path(run, ran, pipelined),
            "protocol": run.protocol.name,
            "protocol_efficiency": run.efficiency,
            "call_s": call_s,
            "messages": run.messages,
            "private_messages": run.private_count(),
            "batched_landings": run.batched,
            "compiled": run.compiled,
            "in_schedule_order": run.in_schedule_order,
            "node_rotation": 1 if run.rotation is None else run.rotation.order,
            "events": events,
            "plan_s": plan_s,
            "wall_s": time.perf_counter() - wall0,
        },
    )


def _stream_s(run: _Run) -> float:
    """How long the schedule's busiest resource or rank pair is busy: the time
    the buffer takes to stream through the schedule once every stage works at
    once (the steady state of a pipeline), without its latencies or fill."""
    size, _ = run.payloads()
    reducing = np.frombuffer(bytes(run.plan.reduce), dtype=np.uint8).astype(bool)
    n_q = len(run.pairs)
    copied = np.bincount(run.msg_q_np, weights=np.where(reducing, 0.0, size), minlength=n_q)
    reduced = np.bincount(run.msg_q_np, weights=np.where(reducing, size, 0.0), minlength=n_q)
    busiest = 0.0
    load: dict[int, float] = {}
    users: dict[int, int] = {}
    by_id = {}
    for qi, (_, _, resources) in enumerate(run.routes):
        busiest = max(busiest, copied[qi] / run.q_good[qi] + reduced[qi] / run.q_good_reduce[qi])
        wire = (copied[qi] + reduced[qi]) / run.efficiency
        for res, weight in resources:
            load[res.id] = load.get(res.id, 0.0) + wire * weight
            users[res.id] = users.get(res.id, 0) + 1
            by_id[res.id] = res
    # in the steady state every pair using a resource has a flow on it (a switch's contention model)
    return max([busiest, *(load[r] / by_id[r].effective_capacity_Bps(users[r]) for r in load)])


def _path(run: _Run, ran: bool, pipelined: bool) -> str:
    """Which fast path timed the run, in words (``stats["path"]``): how its
    messages were run (NumPy in schedule order, the compiled core, NumPy
    batches on events, or per-message events, where every pair was private or
    not), over a rotation quotient or every message, and whether the
    step-pipeline formula gave the time."""
    if not ran:
        how = "not run"
    elif run.in_schedule_order:
        how = "schedule order"
    elif run.compiled:
        how = "compiled events"
    elif run.batched:
        how = "batched events"
    else:
        how = "events"
    parts = [how]
    if run.rotation is not None:
        # (a cluster's rotations move whole nodes; ring:N's or a torus's move ranks: topology_symmetry)
        kind = "node" if run.rotation.shift_ranks in run.machine.topology.node_shifts else "rank"
        parts.append(f"{kind}-rotation quotient of order {run.rotation.order}")
    if pipelined:
        parts.append("step pipeline")
    return ", ".join(parts)


def _pipelined_time(run: _Run, table: dict, size_bytes: float, schedule_s: float | None) -> tuple[float, float, dict]:
    """(time, call cost, stats) of an Algorithm that its runtime moves in
    pipelined steps (:func:`.step_pipeline.pipelined_time`), from the run's
    busiest resource (:func:`_stream_s`) and its slowest route."""
    return pipelined_time(
        table,
        size_bytes,
        stream_s=_stream_s(run),
        latency_s=max(run.q_alpha, default=0.0),
        call_s=run.call_s,
        call_overhead_s=run.machine.model.call_overhead_s,
        schedule_s=schedule_s,
    )


def _timing_groups(
    batch: np.ndarray, queue: np.ndarray, in_queues: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The messages in the order :meth:`_Run._time_in_schedule_order` times
    them, cut into groups it times at once: per batch, the first message of
    each rank pair's queue in the batch, then the second, ... (a pair's FIFO
    order). Returns ``(order, group_start, batch_ends)`` - messages, where each
    group starts (and the end), whether a group is its batch's last - or None
    where a pair's queue is not in batch order (only the events follow both).
    ``batch`` and ``queue`` are per message; ``in_queues`` lists the messages
    queue by queue, each in FIFO order."""
    n = len(batch)
    same_queue = queue[in_queues[1:]] == queue[in_queues[:-1]]
    if (same_queue & (batch[in_queues[1:]] < batch[in_queues[:-1]])).any():
        return None
    # a message's round: how many earlier messages of its batch share its rank pair (they go first)
    same_run = np.zeros(n, dtype=bool)
    same_run[1:] = same_queue & (batch[in_queues[1:]] == batch[in_queues[:-1]])
    run_start = np.maximum.accumulate(np.where(same_run, 0, np.arange(n)))
    rounds = np.empty(n, dtype=np.int64)
    rounds[in_queues] = np.arange(n) - run_start
    key = batch.astype(np.int64) * (int(rounds.max()) + 1) + rounds
    del same_queue, same_run, run_start, rounds
    order = _stable_order(key)
    cuts = np.flatnonzero(np.diff(key[order])) + 1
    group_start = np.concatenate(([0], cuts, [n]))
    batch_ends = np.diff(batch[order][group_start[:-1]], append=np.iinfo(np.int32).max) != 0
    return order, group_start, batch_ends


def _stable_order(key: np.ndarray) -> np.ndarray:
    """The stable sorting order of ``key``, without sorting where it is in
    order already (a schedule's messages and their reads usually are)."""
    if len(key) < 2 or (key[1:] >= key[:-1]).all():
        return np.arange(len(key))
    return np.argsort(key, kind="stable")


def _delay_to(now: float, when: float) -> float:
    """The largest delay ``d`` with ``now + d <= when`` in floating point (SimPy
    adds the delay to the clock). Where ``now + d`` falls short of ``when``,
    the clock is then within a factor of 2 of ``when`` and ``when - clock`` is
    exact (Sterbenz), so a second event lands at exactly ``when``."""
    delay = when - now
    while delay > 0 and now + delay > when:
        delay = math.nextafter(delay, -math.inf)
    return delay if delay > 0 else 0.0


def _private_pairs(routes, contention: bool, record_utilisation: bool) -> tuple[list[float], bytearray]:
    """Per rank pair: the rate its messages get when alone on their resources
    (:func:`~..fair_share.alone_rate_Bps` with contention, the route bandwidth
    without, as in :meth:`FluidNetwork.launch`), and whether the pair is *private*: no
    other pair of the schedule uses any of its resources, so (messages on a
    pair being FIFO) each of its messages is always alone and needs no max-min
    sharing. With ``contention=False`` flows never share, so every pair is
    private unless utilisation is recorded on a resource several pairs use."""
    users: dict[int, int] = {}
    for _, _, resources in routes:
        for res, _ in resources:
            users[res.id] = users.get(res.id, 0) + 1
    rates, private = [], bytearray(len(routes))
    for qi, (_, bandwidth, resources) in enumerate(routes):
        rates.append(alone_rate_Bps(bandwidth, resources) if contention else bandwidth)
        alone = all(users[res.id] == 1 for res, _ in resources)
        private[qi] = alone or (not contention and not record_utilisation)
    return rates, private


def _sizes(plan: Plan, nbytes: float, reduce_time) -> tuple[np.ndarray, np.ndarray]:
    """Per message: payload bytes and the reduction time after arrival."""
    n = plan.messages
    size = np.full(n, float(nbytes))
    is_reduce = np.frombuffer(bytes(plan.reduce), dtype=np.uint8).astype(bool) if n else np.zeros(0, dtype=bool)
    after = np.where(is_reduce, reduce_time(nbytes), 0.0)
    for m, group in plan.groups.items():
        size[m] = nbytes * len(group)
        after[m] = reduce_time(size[m]) if is_reduce[m] else 0.0
    return size, after


def _timeline_frame(plan: Plan, start, arrival, done, size) -> pd.DataFrame:
    """Timeline rows (:data:`~.results.TIMELINE_COLUMNS`), in completion order
    (ties in schedule order): one row per message (kind = its op, track
    ``"src->dst"``, label its step), then a ``compute`` row on ``"rank d"``
    where a reduction took time."""
    import pandas as pd  # (here: a run that records no timeline does not import it)

    m = np.argsort(done, kind="stable")
    n = len(m)
    src = np.frombuffer(plan.src, dtype=np.int32)[m]
    dst = np.frombuffer(plan.dst, dtype=np.int32)[m]
    chunk = np.frombuffer(plan.chunk, dtype=np.int32)[m]
    is_reduce = np.frombuffer(bytes(plan.reduce), dtype=np.uint8)[m].astype(bool) if n else np.zeros(0, dtype=bool)
    size = size[m]
    start = start[m]
    arrival = arrival[m]
    done = done[m]
    label = np.frombuffer(plan.batch, dtype=np.int32)[m]
    num = int(max(src.max(initial=0), dst.max(initial=0))) + 1
    pair_codes, pair_index = np.unique(src.astype(np.int64) * num + dst, return_inverse=True)
    tracks = [f"{c // num}->{c % num}" for c in pair_codes.tolist()]
    ranks, rank_index = np.unique(dst, return_inverse=True)
    tracks += [f"rank {r}" for r in ranks.tolist()]
    compute = done > arrival
    rows = np.concatenate([np.arange(n) * 2, np.flatnonzero(compute) * 2 + 1])
    order = np.argsort(rows, kind="stable")

    def both(a, b):
        return np.concatenate([a, b[compute]])[order]

    label_names = pd.Index(plan.labels, dtype=object).unique()
    label_code = label_names.get_indexer(pd.Index(plan.labels, dtype=object)).astype(np.int32)
    kinds = pd.Categorical.from_codes(
        both(is_reduce.astype(np.int8), np.full(n, 2, dtype=np.int8)), categories=["copy", "reduce", "compute"]
    )
    return pd.DataFrame(
        {
            "kind": kinds,
            "track": pd.Categorical.from_codes(
                both(pair_index.astype(np.int32), rank_index.astype(np.int32) + len(pair_codes)), categories=tracks
            ),
            "src": both(src, src),
            "dst": both(dst, dst),
            "chunk": both(chunk, chunk),
            "bytes": both(size, size),
            "start_s": both(start, arrival),
            "end_s": both(arrival, done),
            # two batches may print alike (start times equal to 6 digits): categories must be unique
            "label": pd.Categorical.from_codes(both(label_code[label], label_code[label]), categories=label_names),
        },
        columns=TIMELINE_COLUMNS,
    )

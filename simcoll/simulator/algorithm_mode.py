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
bit for bit (``tests/test_sim_algorithm.py``).
"""

from __future__ import annotations

import math
import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd
import simpy

from ..algorithm import Algorithm, Transfer, messages
from ..analytic import chunk_bytes
from ..errors import AlgorithmError, SimcollError
from ..machines import Machine
from .engine import run_with_limit
from .network import Flow, FluidNetwork
from .results import TIMELINE_COLUMNS, SimulationResult, make_result


@dataclass
class _Plan:
    """The static part of a simulation: messages in schedule order (their
    first transfer's ``src``, ``dst``, ``chunk``, whether it reduces, its batch),
    the reads that must wait for updates, sorted by (slot, updates needed), and
    the FIFO message queue of each rank pair. Slot = chunk + rank × chunks."""

    src: array
    dst: array
    chunk: array
    reduce: bytearray
    batch: array
    labels: list[str]
    groups: dict[int, list[Transfer]]  # messages of more than one transfer
    pending: array  # per message: reads still waiting
    wait_slot: np.ndarray
    wait_landed: np.ndarray
    wait_msg: np.ndarray
    queues: dict[tuple[int, int], list[int]]
    describe: Callable[[int], str]

    @property
    def messages(self) -> int:
        return len(self.src)


def _labels(keys, timed: bool) -> list[str]:
    return [f"t={k:.6g}" if timed else f"step {k}" for k in keys]


def _plan_vectorised(algorithm: Algorithm, num_chunks: int, present: np.ndarray) -> _Plan:
    """Plan for schedules without contiguity groups (every message one
    transfer), with numpy: millions of transfers in seconds."""
    transfers = algorithm.transfers
    n = len(transfers)
    timed = algorithm.schedule != "steps"
    if timed:
        key = np.fromiter((t.start_s for t in transfers), dtype=np.float64, count=n)
    else:
        key = np.fromiter((t.step for t in transfers), dtype=np.int64, count=n)
    order = np.argsort(key, kind="stable")
    key = key[order]
    src = np.fromiter((t.src for t in transfers), dtype=np.int64, count=n)[order]
    dst = np.fromiter((t.dst for t in transfers), dtype=np.int64, count=n)[order]
    chunk = np.fromiter((t.chunk for t in transfers), dtype=np.int64, count=n)[order]
    reduce = np.fromiter((t.op == "reduce" for t in transfers), dtype=bool, count=n)[order]
    change = np.empty(n, dtype=bool)
    change[:1] = True
    change[1:] = key[1:] != key[:-1]
    batch = np.cumsum(change) - 1
    batches = int(batch[-1]) + 1 if n else 0
    # updates of (src, chunk) landed in earlier batches = writes with the same slot and a smaller batch
    read_slot = chunk + src * num_chunks
    write_key = np.sort((chunk + dst * num_chunks) * (batches + 1) + batch)
    landed = np.searchsorted(write_key, read_slot * (batches + 1) + batch) - np.searchsorted(
        write_key, read_slot * (batches + 1)
    )
    missing = (landed == 0) & ~present[read_slot]
    if missing.any():
        bad = transfers[int(order[np.flatnonzero(missing)[0]])]
        raise AlgorithmError(f"{algorithm.name}: {bad.describe()} before rank {bad.src} holds the chunk")
    waits = landed > 0
    pair = src * algorithm.num_ranks + dst
    by_pair = np.argsort(pair, kind="stable")
    cuts = np.flatnonzero(np.diff(pair[by_pair])) + 1
    queues = {}
    for piece in np.split(by_pair, cuts) if n else ():
        m = int(piece[0])
        queues[(int(src[m]), int(dst[m]))] = piece.tolist()
    return _Plan(
        src=array("i", src.astype(np.int32).tobytes()),
        dst=array("i", dst.astype(np.int32).tobytes()),
        chunk=array("i", chunk.astype(np.int32).tobytes()),
        reduce=bytearray(reduce.tobytes()),
        batch=array("i", batch.astype(np.int32).tobytes()),
        labels=_labels(key[change].tolist(), timed),
        groups={},
        pending=array("i", waits.astype(np.int32).tobytes()),
        wait_slot=read_slot[waits],
        wait_landed=landed[waits],
        wait_msg=np.flatnonzero(waits),
        queues=queues,
        describe=lambda m: transfers[int(order[m])].describe(),
    )


def _plan_grouped(algorithm: Algorithm, num_chunks: int, present: np.ndarray) -> _Plan:
    """Plan for schedules with TACCL contiguity groups (a group on one rank
    pair in one batch is one message)."""
    written: dict[int, int] = {}
    timed = algorithm.schedule != "steps"
    src, dst, chunk, batch, pending = array("i"), array("i"), array("i"), array("i"), array("i")
    reduce = bytearray()
    firsts: list[Transfer] = []
    groups: dict[int, list[Transfer]] = {}
    wait_slot, wait_landed, wait_msg = [], [], []
    queues: dict[tuple[int, int], list[int]] = {}
    keys = []
    for transfers_of_batch in algorithm.batches():
        first_of_batch = transfers_of_batch[0]
        keys.append(first_of_batch.start_s if timed else first_of_batch.step)
        writes = []
        for message in messages(transfers_of_batch):
            m = len(src)
            first = message[0]
            need = 0
            for t in message:
                slot = t.chunk + t.src * num_chunks
                landed = written.get(slot, 0)
                if landed:
                    wait_slot.append(slot)
                    wait_landed.append(landed)
                    wait_msg.append(m)
                    need += 1
                elif not present[slot]:
                    raise AlgorithmError(f"{algorithm.name}: {t.describe()} before rank {t.src} holds the chunk")
                writes.append(t.chunk + t.dst * num_chunks)
            if len(message) > 1:
                groups[m] = message
            src.append(first.src)
            dst.append(first.dst)
            chunk.append(first.chunk)
            reduce.append(first.op == "reduce")
            batch.append(len(keys) - 1)
            pending.append(need)
            firsts.append(first)
            queues.setdefault((first.src, first.dst), []).append(m)
        for slot in writes:
            written[slot] = written.get(slot, 0) + 1
    return _Plan(
        src=src,
        dst=dst,
        chunk=chunk,
        reduce=reduce,
        batch=batch,
        labels=_labels(keys, timed),
        groups=groups,
        pending=pending,
        wait_slot=np.array(wait_slot, dtype=np.int64),
        wait_landed=np.array(wait_landed, dtype=np.int64),
        wait_msg=np.array(wait_msg, dtype=np.int64),
        queues=queues,
        describe=lambda m: firsts[m].describe(),
    )


def simulate_algorithm(
    algorithm: Algorithm,
    machine: Machine,
    size_bytes: float,
    *,
    contention: bool = True,
    time_limit_s: float = 60.0,
    record_timeline: bool = True,
    record_utilisation: bool = True,
) -> SimulationResult:
    """Simulate ``algorithm`` on ``machine`` for a ``size_bytes`` buffer
    (nccl-tests naming: one chunk is ``size_bytes / collective.size_chunks``).

    With ``contention=False`` every message runs alone at its route's α-β
    cost and the result equals :func:`simcoll.analytic.critical_path_time_s`; with
    ``contention=True`` messages share the network max-min fairly and the
    model's contention parameters apply (:mod:`simcoll.simulator.network`).
    ``record_timeline`` / ``record_utilisation`` off save time and memory on
    very large schedules (the result's frames are then empty).

    >>> from simcoll import load_machine
    >>> from simcoll.algorithms import generate
    >>> m = load_machine("ring:4")
    >>> r = simulate_algorithm(generate("ring", m.topology, "allgather"), m, 4e6)
    >>> round(r.time_s * 1e6, 3)   # 3 steps of 0.7 us + 1 MB / 25 GB/s
    122.1
    """
    wall0 = time.perf_counter()
    if algorithm.num_ranks != machine.num_ranks:
        raise AlgorithmError(
            f"{algorithm.name} is for {algorithm.num_ranks} ranks but {machine.name} has {machine.num_ranks}"
        )
    if not size_bytes >= 0 or math.isinf(size_bytes):
        raise SimcollError(f"size_bytes must be finite and non-negative, got {size_bytes}")
    nbytes = chunk_bytes(algorithm.collective, size_bytes)
    num_chunks = algorithm.collective.num_chunks
    num_slots = num_chunks * algorithm.num_ranks

    # -- static plan -----------------------------------------------------------------------
    present = np.zeros(num_slots, dtype=bool)
    pre = np.array([c + r * num_chunks for c, r in algorithm.collective.pre], dtype=np.int64)
    present[pre] = True
    if any(t.group is not None for t in algorithm.transfers):
        plan = _plan_grouped(algorithm, num_chunks, present)
    else:
        plan = _plan_vectorised(algorithm, num_chunks, present)
    del present, pre
    n_msgs = plan.messages
    # waiters sorted by (slot, landed): CSR offsets per slot, a cursor per slot at run time
    order = np.lexsort((plan.wait_landed, plan.wait_slot))
    slots_sorted = plan.wait_slot[order]
    w_landed = array("i", plan.wait_landed[order].astype(np.int32).tobytes())
    w_msg = array("q", plan.wait_msg[order].astype(np.int64).tobytes())
    offsets = np.searchsorted(slots_sorted, np.arange(num_slots + 1, dtype=np.int64))
    cursor = array("q", offsets[:-1].astype(np.int64).tobytes())
    slot_end = array("q", offsets[1:].astype(np.int64).tobytes())
    del order, slots_sorted, offsets
    arrived = array("i", bytes(4 * num_slots))
    reduce_time = machine.model.reduce_time_s
    msg_dst, msg_chunk, msg_reduce, msg_batch = plan.dst, plan.chunk, plan.reduce, plan.batch
    groups, labels, pending = plan.groups, plan.labels, plan.pending

    # -- dynamic state ---------------------------------------------------------------------
    env = simpy.Environment()
    net = FluidNetwork(
        env, machine, contention=contention, record_timeline=False, record_utilisation=record_utilisation
    )
    pairs = list(plan.queues)
    n_q = len(pairs)
    q_msgs = [plan.queues[p] for p in pairs]
    routes = [net.route(*pair) for pair in pairs]  # fails early on an unroutable pair
    msg_q_np = np.empty(n_msgs, dtype=np.int32)
    for qi, msgs in enumerate(q_msgs):
        msg_q_np[msgs] = qi
    msg_q = array("i", msg_q_np.tobytes())
    q_alpha = [alpha for alpha, _, _ in routes]
    q_rate, q_fast = _private_pairs(routes, contention, record_utilisation)
    q_head = [0] * n_q
    q_free = [0.0] * n_q  # private pairs: when the wire is free again
    q_busy = bytearray(n_q)  # shared pairs: a message is on the wire
    # per message: when it started and left the wire (arrival and completion follow)
    msg_start = array("d", bytes(8 * n_msgs))
    msg_wire = array("d", bytes(8 * n_msgs))
    state = [0, 0.0]  # messages landed, last completion
    inf = math.inf
    after_one = reduce_time(nbytes)
    kinds = ("copy", "reduce")
    landings: dict[float, list[int]] = {}  # private pairs: completion time -> messages

    def start_private(qi: int, now: float) -> None:
        """Send the ready messages at the head of a private pair's queue: the
        pair alone uses its resources, so each runs at its standalone rate and
        its wire end is known now; one SimPy event per completion time."""
        msgs = q_msgs[qi]
        head = q_head[qi]
        end = len(msgs)
        free = q_free[qi]
        rate = q_rate[qi]
        alpha = q_alpha[qi]
        while head < end:
            m = msgs[head]
            if pending[m]:
                break
            head += 1
            t0 = free if free > now else now
            if m in groups:
                size = nbytes * len(groups[m])
                after = reduce_time(size) if msg_reduce[m] else 0.0
            else:
                size = nbytes
                after = after_one if msg_reduce[m] else 0.0
            free = t0 + size / rate
            msg_start[m] = t0
            msg_wire[m] = free
            done = free + (alpha + after)
            batch = landings.get(done)
            if batch is None:
                landings[done] = [m]
                simpy.Timeout(env, _delay_to(env.now, done), done).callbacks.append(land_private)
            else:
                batch.append(m)
        q_head[qi] = head
        q_free[qi] = free

    def start_shared(qi: int) -> None:
        if q_busy[qi]:
            return
        head = q_head[qi]
        msgs = q_msgs[qi]
        if head >= len(msgs):
            return
        m = msgs[head]
        if pending[m]:
            return
        q_head[qi] = head + 1
        q_busy[qi] = 1
        red = msg_reduce[m]
        if m in groups:
            size = nbytes * len(groups[m])
            after = reduce_time(size) if red else 0.0
        else:
            size = nbytes
            after = after_one if red else 0.0
        src, dst = pairs[qi]
        launch(src, dst, size, inf, 1.0, sent, landed, after, kinds[red], None, labels[msg_batch[m]], msg_chunk[m], m)

    def release(slot: int, now: float) -> None:
        count = arrived[slot] + 1
        arrived[slot] = count
        i = cursor[slot]
        end = slot_end[slot]
        while i < end and w_landed[i] <= count:
            w = w_msg[i]
            pending[w] -= 1
            if not pending[w]:
                qi = msg_q[w]
                if q_fast[qi]:
                    start_private(qi, now)
                else:
                    start_shared(qi)
            i += 1
        cursor[slot] = i

    def complete(m: int, now: float) -> None:
        if m in groups:
            for t in groups[m]:
                release(t.chunk + t.dst * num_chunks, now)
        else:
            release(msg_chunk[m] + msg_dst[m] * num_chunks, now)

    def land_private(event: simpy.Event) -> None:
        now = event.value
        if env.now != now:  # the clock stopped an ulp short: wait the exact rest
            simpy.Timeout(env, now - env.now, now).callbacks.append(land_private)
            return
        batch = landings.pop(now)
        state[0] += len(batch)
        if now > state[1]:
            state[1] = now
        for m in batch:
            complete(m, now)

    def sent(flow: Flow) -> None:
        qi = msg_q[flow.tag]
        q_busy[qi] = 0
        start_shared(qi)

    def landed(flow: Flow) -> None:
        m = flow.tag
        now = env.now
        msg_start[m] = flow.start_s
        msg_wire[m] = flow.wire_end_s
        state[0] += 1
        if now > state[1]:
            state[1] = now
        complete(m, now)

    launch = net.launch
    for qi in range(n_q):
        if q_fast[qi]:
            start_private(qi, 0.0)
        else:
            start_shared(qi)
    plan_s = time.perf_counter() - wall0
    events = run_with_limit(env, time_limit_s, what=f"simulation of {algorithm.name} on {machine.name}")
    if state[0] != n_msgs:
        stuck = [m for m in range(n_msgs) if pending[m]][:5]
        detail = "; ".join(f"{plan.describe(m)} waits for its chunk at the source" for m in stuck)
        raise SimcollError(
            f"simulation of {algorithm.name} on {machine.name} stalled: {n_msgs - state[0]} of {n_msgs} messages "
            f"never completed ({detail or 'waiting on the network'})"
        )
    fast = np.frombuffer(bytes(q_fast), dtype=np.uint8).astype(bool)[msg_q_np] if n_msgs else np.zeros(0, bool)
    net.transfers += int(fast.sum())
    start = np.frombuffer(msg_start, dtype=np.float64)
    wire = np.frombuffer(msg_wire, dtype=np.float64)
    if record_utilisation and fast.any():
        _private_utilisation(net, routes, q_rate, q_fast, msg_q_np, fast, start, wire)
    timeline = None
    if record_timeline:
        size, after = _sizes(plan, nbytes, reduce_time)
        alpha = np.array(q_alpha, dtype=np.float64)[msg_q_np]
        timeline = _timeline_frame(plan, start, wire + alpha, wire + (alpha + after), size)
    return make_result(
        net,
        timeline=timeline,
        name=algorithm.name,
        collective=algorithm.collective,
        size_bytes=size_bytes,
        mode="algorithm",
        time_s=state[1],
        stats={
            "messages": n_msgs,
            "private_messages": int(fast.sum()),
            "events": events,
            "plan_s": plan_s,
            "wall_s": time.perf_counter() - wall0,
        },
    )


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
    (:meth:`FluidNetwork.launch`: the route bandwidth, and with contention the
    resources' one-flow capacities), and whether the pair is *private*: no
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
        rate = bandwidth
        if contention:
            for res, w in resources:
                share = res.effective_capacity_Bps(1) / w
                if share < rate:
                    rate = share
        rates.append(rate)
        alone = all(users[res.id] == 1 for res, _ in resources)
        private[qi] = alone or (not contention and not record_utilisation)
    return rates, private


def _sizes(plan: _Plan, nbytes: float, reduce_time) -> tuple[np.ndarray, np.ndarray]:
    """Per message: payload bytes and the reduction time after arrival."""
    n = plan.messages
    size = np.full(n, float(nbytes))
    is_reduce = np.frombuffer(bytes(plan.reduce), dtype=np.uint8).astype(bool) if n else np.zeros(0, dtype=bool)
    after = np.where(is_reduce, reduce_time(nbytes), 0.0)
    for m, group in plan.groups.items():
        size[m] = nbytes * len(group)
        after[m] = reduce_time(size[m]) if is_reduce[m] else 0.0
    return size, after


def _private_utilisation(net: FluidNetwork, routes, q_rate, q_fast, msg_q: np.ndarray, fast, start, wire) -> None:
    """Utilisation rows of the private pairs' messages, as the network would
    record them: one interval per message and resource it uses, at the
    message's rate × the resource's weight, with one flow."""
    rid, ratew, cap, offsets = [], [], [], [0]
    for qi, (_, _, resources) in enumerate(routes):
        if q_fast[qi]:
            for res, w in resources:
                rid.append(res.id)
                ratew.append(0.0 + q_rate[qi] * w)
                cap.append(res.effective_capacity_Bps(1))
        offsets.append(len(rid))
    offsets = np.array(offsets, dtype=np.int64)
    msgs = np.flatnonzero(fast & (wire > start))
    q = msg_q[msgs]
    counts = offsets[q + 1] - offsets[q]
    rows = np.repeat(msgs, counts)
    first = np.repeat(offsets[q], counts)
    within = np.arange(len(rows)) - np.repeat(np.cumsum(counts) - counts, counts)
    idx = first + within
    net.utilisation.extend(
        np.array(rid, dtype=np.int32)[idx],
        start[rows],
        wire[rows],
        np.array(ratew, dtype=np.float64)[idx],
        np.array(cap, dtype=np.float64)[idx],
        np.ones(len(rows), dtype=np.int32),
    )


def _timeline_frame(plan: _Plan, start, arrival, done, size) -> pd.DataFrame:
    """Timeline rows (:data:`~.results.TIMELINE_COLUMNS`), in completion order
    (ties in schedule order): one row per message (kind = its op, track
    ``"src->dst"``, label its step), then a ``compute`` row on ``"rank d"``
    where a reduction took time."""
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
            "label": pd.Categorical.from_codes(both(label, label), categories=pd.Index(plan.labels, dtype=object)),
        },
        columns=TIMELINE_COLUMNS,
    )

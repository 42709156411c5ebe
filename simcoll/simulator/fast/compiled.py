"""Algorithm mode's event loop compiled: the same run, tens of times faster.

A schedule that no node rotation shrinks (a double binary tree or a chain on
1,024 GPUs: millions of messages sharing switch ports) spends its time in the
Python handlers of :class:`~.algorithm_mode._Run` and
:class:`~.network.FluidNetwork`, some 10-20 µs a message. ``csrc/event_core.cpp``
is those handlers transcribed statement by statement into C++ (rank pairs'
FIFO queues and reads, private pairs, max-min fair sharing with its handovers,
memory of sharing patterns and dominated resources, SimPy's event order), so
its times, and the network's counters, are the Python run's bit for bit
(``tests/test_sim_compiled.py`` compares them on many schedules and machines).

It runs where a simulation records no utilisation (``compare``, sweeps,
``simulate(..., record_utilisation=False)``) and its pairs do not all land
in NumPy batches (:meth:`~.algorithm_mode._Run._land_batch`, as fast
already); elsewhere, or without a C++ compiler, or with the environment
variable ``SIMCOLL_COMPILED=0``, the Python handlers run. The library is built on
first use (:mod:`simcoll.native`, a few seconds, then cached) and the
result says which ran (``stats["compiled"]``). Ctrl-C stops a compiled run
as it would a Python one (:func:`_interrupt_raises`).
"""

from __future__ import annotations

import ctypes
import math
import os
import signal
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from ...arrays import ragged_indices
from ...errors import SimcollError, SimulationError
from ...native import build_shared_library, compiler, load_checked
from ..engine import limit_error
from .plan import QueueTable, SlotLists

#: An Algorithm-mode run (:class:`~.algorithm_mode._Run`, which imports this module), not started.
_Run = Any

SOURCE = Path(__file__).with_name("csrc") / "event_core.cpp"
FLAGS = ("-std=c++17", "-O2", "-ffp-contract=off")

#: False turns the compiled core off in this process (tests compare the two paths);
#: the environment variable ``SIMCOLL_COMPILED=0`` does so for every process.
ENABLED = os.environ.get("SIMCOLL_COMPILED", "1") != "0"

_POINTERS = (
    "pending msg_q msg_size msg_after msg_reduce rel_off rel_slot msg_start msg_wire "
    "arrived cursor slot_end w_landed w_msg "
    "q_off q_msg q_fast q_alpha_hop q_good q_good_reduce q_alpha q_bandwidth q_alone r_off r_res r_w "
    "res_one_flow res_varies cap_off cap_table"
).split()


class ScRun(ctypes.Structure):
    """ctypes mirror of ``struct ScRun`` (event_core.cpp)."""

    _fields_ = [
        *((name, ctypes.c_void_p) for name in _POINTERS),
        *((name, ctypes.c_int64) for name in ("n_msgs", "n_q", "n_res", "routes_before")),
        *((name, ctypes.c_double) for name in ("efficiency", "reduce_cap", "hop_latency", "wall_limit_s")),
        ("contention", ctypes.c_int32),
        ("catch_interrupt", ctypes.c_int32),
        ("status", ctypes.c_int32),
        *(
            (name, ctypes.c_int64)
            for name in (
                "events",
                "transfers",
                "max_sharing",
                "recomputes",
                "remembered",
                "handovers",
                "landed_count",
                "stopped_at",
            )
        ),
        ("last_s", ctypes.c_double),
        ("now_s", ctypes.c_double),
    ]


_LIBRARY: ctypes.CDLL | None = None
_UNAVAILABLE: str | None = None


def library() -> ctypes.CDLL | None:
    """The compiled core, built and loaded once per process; None (and why in
    :func:`unavailable`) without a compiler or when the build fails."""
    global _LIBRARY, _UNAVAILABLE
    if _LIBRARY is None and _UNAVAILABLE is None:
        if compiler() is None:
            _UNAVAILABLE = "no C++ compiler"
            return None
        try:
            path = build_shared_library("sc_event_core", SOURCE, FLAGS, what="the event core")
            lib = load_checked(path, ScRun, "sc_run_struct_size", "the event core")
        except (SimcollError, OSError) as exc:
            _UNAVAILABLE = str(exc)
            warnings.warn(f"simcoll: {exc}; simulating with the Python handlers (slower)", RuntimeWarning, stacklevel=2)
            return None
        lib.sc_run.argtypes = [ctypes.POINTER(ScRun)]
        lib.sc_run.restype = ctypes.c_int
        _LIBRARY = lib
    return _LIBRARY


def unavailable() -> str | None:
    """Why the compiled core cannot run in this process, or None."""
    return _UNAVAILABLE


def applies(run: _Run) -> bool:
    """Whether ``run`` (not started) can go through the compiled core (module docstring)."""
    net = run.net
    if not ENABLED or run.batched or net.record_utilisation or net._fast or net.active:
        return False  # (a batched run of private pairs is NumPy's already)
    return library() is not None


def _pointer(a: np.ndarray) -> int:
    return a.ctypes.data


def run_compiled(run: _Run) -> int:
    """Run ``run``'s events in the compiled core; its results land where the
    Python handlers put them (message times, landed count, the network's
    counters). Returns the number of events; raises
    :class:`~simcoll.errors.TimeLimitError` as the Python loop does."""
    plan, net = run.plan, run.net
    keep: list[np.ndarray] = []  # the arrays the core borrows, alive until it returns

    def arr(values, dtype) -> int:
        a = np.ascontiguousarray(values, dtype=dtype)
        keep.append(a)
        return _pointer(a)

    def view(column, dtype) -> int:  # a column the core writes: shared with the run, not copied
        a = np.frombuffer(column, dtype=dtype)
        keep.append(a)
        return _pointer(a) if len(a) else arr([0], dtype)

    n_msgs = plan.messages
    size, after = run.payloads()
    rel_off, rel_slot = _releases(run, n_msgs)
    q_off, q_msg = _queue_columns(run)
    r_off, r_res, r_w = _route_columns(run)
    cap_off, cap_table = _capacity_tables(net)
    fields = dict(
        pending=view(run.pending, np.int32),
        msg_q=arr(run.msg_q_np, np.int32),
        msg_size=arr(size, np.float64),
        msg_after=arr(after, np.float64),
        msg_reduce=arr(np.frombuffer(bytes(plan.reduce), dtype=np.uint8), np.uint8),
        rel_off=arr(rel_off, np.int64),
        rel_slot=arr(rel_slot, np.int64),
        msg_start=view(run.msg_start, np.float64),
        msg_wire=view(run.msg_wire, np.float64),
        arrived=view(run.arrived, np.int32),
        cursor=view(run.cursor, np.int64),
        slot_end=view(run.slot_end, np.int64),
        w_landed=view(run.w_landed, np.int32),
        w_msg=view(run.w_msg, np.int64),
        q_off=arr(q_off, np.int64),
        q_msg=arr(q_msg, np.int64),
        q_fast=arr(np.frombuffer(bytes(run.q_fast), dtype=np.uint8), np.uint8),
        q_alpha_hop=arr(run.q_alpha, np.float64),
        q_good=arr(run.q_good, np.float64),
        q_good_reduce=arr(run.q_good_reduce, np.float64),
        q_alpha=arr([alpha for alpha, _, _ in run.routes], np.float64),
        q_bandwidth=arr([bandwidth for _, bandwidth, _ in run.routes], np.float64),
        q_alone=arr(run.q_rate, np.float64),
        r_off=arr(r_off, np.int64),
        r_res=arr(r_res, np.int32),
        r_w=arr(r_w, np.float64),
        res_one_flow=arr(net._capacities.one_flow_Bps[: len(net.resources)], np.float64),
        res_varies=arr(net._capacities.varies[: len(net.resources)], np.uint8),
        cap_off=arr(cap_off, np.int64),
        cap_table=arr(cap_table, np.float64),
    )
    left_s = run.started_s + run.time_limit_s - time.perf_counter() if math.isfinite(run.time_limit_s) else 1e9
    spec = ScRun(
        **fields,
        n_msgs=n_msgs,
        n_q=len(run.pairs),
        n_res=len(net.resources),
        routes_before=net._uses_table.count,
        efficiency=run.efficiency,
        reduce_cap=run.reduce_cap,
        hop_latency=run.protocol.hop_latency_s,
        wall_limit_s=left_s,
        contention=int(net.contention),
        catch_interrupt=int(_interrupt_raises()),
    )
    if library().sc_run(ctypes.byref(spec)) != 0:
        raise SimulationError(f"{run.what}: the compiled event core failed")
    net.transfers += spec.transfers
    net.max_sharing = max(net.max_sharing, spec.max_sharing)
    net.recomputes += spec.recomputes
    net.recomputes_remembered += spec.remembered
    net.handovers += spec.handovers
    run.landed_count, run.last_s = spec.landed_count, spec.last_s
    if spec.status == 3:
        raise KeyboardInterrupt
    if spec.status == 1:
        raise limit_error(run.what, run.time_limit_s, spec.now_s, spec.events)
    if spec.status == 2:
        raise limit_error(
            run.what, run.time_limit_s, doing=f"starting queues ({spec.stopped_at} of {len(run.pairs)} pairs)"
        )
    return spec.events


def _interrupt_raises() -> bool:
    """Whether Ctrl-C would raise KeyboardInterrupt here now (the main
    thread, Python's default handler): the core then stops at it and the
    caller raises it; otherwise (ignored, or another handler) Python's
    handler is left to run after the call, as it would after any."""
    return threading.current_thread() is threading.main_thread() and (
        signal.getsignal(signal.SIGINT) is signal.default_int_handler
    )


def _releases(run: _Run, n_msgs: int) -> tuple[np.ndarray, np.ndarray]:
    """Per message, CSR: the slots its landing updates, in the order
    :meth:`~.algorithm_mode._Run._complete` releases them (a contiguity
    group's, else an in-switch reduction's destinations', else its one slot)."""
    slot = np.frombuffer(run.msg_slot, dtype=np.int64)
    fanout = run.fanout_slots or {}
    columns = fanout if isinstance(fanout, SlotLists) else None  # (a switch reduction's: CSR already)
    several = {**({} if columns is not None else fanout), **run.group_slots}
    if not several and columns is None:
        return np.arange(n_msgs + 1, dtype=np.int64), slot
    lengths = np.ones(n_msgs, dtype=np.int64)
    if columns is not None:
        lengths[columns.messages] = columns.lengths()
    for m, slots in several.items():
        lengths[m] = len(slots)
    off = np.concatenate(([0], np.cumsum(lengths)))
    out = slot[np.repeat(np.arange(n_msgs), lengths)].copy()
    if columns is not None:
        out[ragged_indices(off[columns.messages], columns.lengths())] = columns.slots
    for m, slots in several.items():
        out[off[m] : off[m + 1]] = slots
    return off, out


def _queue_columns(run: _Run) -> tuple[np.ndarray, np.ndarray]:
    """Every pair's queue as CSR (offsets, messages), in pair order."""
    queues = run.plan.queues
    if isinstance(queues, QueueTable):
        return queues.starts, queues.messages
    lengths = np.array([len(q) for q in run.q_msgs], dtype=np.int64)
    messages = np.concatenate([np.asarray(q, dtype=np.int64) for q in run.q_msgs] or [lengths])
    return np.concatenate(([0], np.cumsum(lengths))), messages


def _route_columns(run: _Run) -> tuple[np.ndarray, np.ndarray, list[float]]:
    """The shared pairs' routes as CSR (resource ids and weights, route order);
    private pairs' are left empty (their messages never enter the network).
    The network lists each resource of a route once (it merges them by id),
    as the handlers rely on (a flow leaves each of its resources once):
    checked here, so that the core never reads a route otherwise."""
    lengths = np.zeros(len(run.routes), dtype=np.int64)
    ids: list[int] = []
    weights: list[float] = []
    for qi, (_, _, used) in enumerate(run.routes):
        if run.q_fast[qi]:
            continue
        lengths[qi] = len(used)
        ids.extend(res.id for res, _ in used)
        weights.extend(w for _, w in used)
    ids_array = np.array(ids, dtype=np.int64)
    twice = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths) * len(run.net.resources) + ids_array
    if len(np.unique(twice)) != len(twice):
        raise SimulationError(f"{run.what}: a route lists one resource twice (the network merges them)")
    return np.concatenate(([0], np.cumsum(lengths))), ids_array, weights


def _capacity_tables(net) -> tuple[np.ndarray, list[float]]:
    """Per resource, CSR: ``effective_capacity_Bps(n)`` for n = 0, 1, ... up to
    where it stops changing (the last point of the switch's concurrency
    efficiency, then one more: from there on it is the last point's exactly);
    empty for resources without a switch (one flow's capacity)."""
    lengths = np.zeros(len(net.resources), dtype=np.int64)
    table: list[float] = []
    for r in net.resources:
        if r.switch is None:
            continue
        points = r.switch.concurrency_efficiency
        last = max(2, math.ceil(points[-1][0]) + 1 if points else 2)
        table.extend(r.effective_capacity_Bps(n) for n in range(last + 1))
        lengths[r.id] = last + 1
    return np.concatenate(([0], np.cumsum(lengths))), table

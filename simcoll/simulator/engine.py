"""Running a SimPy environment under a wall-clock limit, so that no
simulation can hang (DESIGN.md conventions: simulations take time limits)."""

from __future__ import annotations

import time

import simpy
from simpy.core import EmptySchedule

from ..collector import collector_paused
from ..errors import SimulationError, TimeLimitError

_BATCH = 64  # events between wall-clock checks (an event may settle many messages)


def run_with_limit(
    env: simpy.Environment, time_limit_s: float, what: str = "simulation", started_s: float | None = None
) -> int:
    """Process events until none is left; raise
    :class:`~simcoll.errors.TimeLimitError` when ``time_limit_s`` seconds of
    wall clock have passed since ``started_s`` (a :func:`time.perf_counter`
    reading: the set-up before the events counts too; default now). Returns
    the number of events processed."""
    if not time_limit_s > 0:
        raise SimulationError(f"{what}: time_limit_s must be positive, got {time_limit_s}")
    deadline = (time.perf_counter() if started_s is None else started_s) + time_limit_s
    step = env.step
    events = 0
    i = 0
    with collector_paused():  # millions of short-lived events (simcoll.collector)
        try:
            while True:
                for i in range(_BATCH):  # noqa: B007 (read after EmptySchedule)
                    step()
                events += _BATCH
                if time.perf_counter() > deadline:
                    raise limit_error(what, time_limit_s, env.now, events)
        except EmptySchedule:
            return events + i


def check_limit(started_s: float, time_limit_s: float, what: str, doing: str) -> None:
    """Raise :class:`~simcoll.errors.TimeLimitError` when ``time_limit_s``
    seconds have passed since ``started_s`` while still ``doing`` the set-up
    (working out routes of a million rank pairs can take longer than the
    events)."""
    if time.perf_counter() - started_s > time_limit_s:
        raise limit_error(what, time_limit_s, doing=doing)


def limit_error(
    what: str, time_limit_s: float, now_s: float = 0.0, events: int = 0, doing: str | None = None
) -> TimeLimitError:
    """The error for ``what`` reaching its wall-clock limit: while ``doing``
    its set-up, else at simulated time ``now_s`` after ``events`` events."""
    where = doing or f"at simulated time {now_s * 1e6:.3f} us after {events} events"
    return TimeLimitError(f"{what}: wall-clock limit of {time_limit_s:g} s reached {where} (raise time_limit_s)")

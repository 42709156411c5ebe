"""The time of one schedule at one size on one machine: the evaluation that
:func:`simcoll.compare.compare`, the sweep runner (:mod:`simcoll.sweeps`) and
calibration (:mod:`simcoll.calibration`) share.

Each of them asks the same question: how long does this Algorithm or
Program take for this buffer on this machine, costed with the protocol it
would run with, by the closed form or by the simulator? :func:`schedule_time_s`
answers it once, so that the three cannot drift apart: the protocol rule,
what is verified (nothing: callers pass schedules verified by the test suite
or by their own lowering) and what is recorded (only the time).

>>> from simcoll import load_machine
>>> from simcoll.algorithms import generate
>>> m = load_machine("dgx-a100")
>>> ring = generate("ring", m, "allreduce")
>>> # at 1 KB NCCL would run LL: faster than the same ring under Simple
>>> schedule_time_s(ring, m, 1 << 10) < schedule_time_s(ring, m, 1 << 10, protocol="Simple")
True
"""

from __future__ import annotations

from typing import Final

from .algorithm import Algorithm
from .errors import OptionError
from .machines import Machine
from .program import Program

#: The protocol rule of comparisons: the schedule's own protocol if it names one, else the one
#: NCCL's tuner picks for its collective and size (:func:`simcoll.nccl.baseline.protocol_for`),
#: so that a schedule and the ``nccl`` baseline beside it differ in the schedule only.
NCCL_PROTOCOL: Final = "as NCCL would"
METHODS = ("simulate", "analytic")


def schedule_time_s(
    schedule: Algorithm | Program,
    machine: Machine,
    size_bytes: int,
    *,
    method: str = "simulate",
    mode: str | None = None,
    contention: bool = True,
    time_limit_s: float = 60.0,
    protocol: str | None = NCCL_PROTOCOL,
    nccl=None,
) -> float:
    """The time of ``schedule`` at ``size_bytes`` on ``machine``, in seconds.

    Parameters
    ----------
    schedule : Algorithm or Program
        A schedule known to be correct: it is not verified again.
    machine : Machine
        The machine, already resolved from its spec by the caller's entry
        point (:func:`simcoll.machines.as_machine`).
    size_bytes : int
        The buffer the collective is named by (nccl-tests convention).
    method : {"simulate", "analytic"}, optional
        The discrete-event simulator (default), or the closed-form α-β
        critical path of an Algorithm (:func:`simcoll.analytic.critical_path_time_s`).
    mode : {"algorithm", "program"}, optional
        The simulator's mode (default: the schedule's kind).
    contention : bool, optional
        Max-min sharing and the model's contention parameters (default), or
        the ideal α-β network.
    time_limit_s : float, optional
        The simulation's wall-clock limit.
    protocol : str or None, optional
        :data:`NCCL_PROTOCOL` (default): the schedule's own protocol, else
        NCCL's pick for this collective and size. None: the schedule's own,
        else the model's default (:func:`simcoll.simulator.simulate`'s rule).
        A name (``"LL"``, ``"LL128"``, ``"Simple"``): that protocol.
    nccl : NcclSetup or str, optional
        The baseline's NCCL release and environment whose pick
        :data:`NCCL_PROTOCOL` means (default NCCL 2.30,
        :func:`simcoll.nccl.versions.as_setup`).

    Returns
    -------
    float
        The completion time in seconds. The simulator records no timeline or
        utilisation here: only the time is asked for.

    Raises
    ------
    OptionError
        For an unknown method, or the analytic method on a Program.
    SimulationError
        When the simulation stalls or reaches ``time_limit_s`` (its subclass
        :class:`~simcoll.errors.TimeLimitError`).
    TooLargeError
        For an orbit the closed form (or a plan of every message) would list
        one by one.

    Examples
    --------
    >>> from simcoll import load_machine
    >>> from simcoll.algorithms import generate
    >>> m = load_machine("ring:4")
    >>> ring = generate("ring", m, "allgather")
    >>> [round(schedule_time_s(ring, m, 4e6, method=how) * 1e6, 3) for how in METHODS]
    [122.1, 122.1]
    """
    if method not in METHODS:
        raise OptionError(f"unknown method {method!r}: use {' or '.join(METHODS)}")
    if protocol == NCCL_PROTOCOL:
        from .nccl.baseline import protocol_for

        protocol = protocol_for(schedule, machine, size_bytes, nccl)
    if method == "analytic":
        if not isinstance(schedule, Algorithm):
            raise OptionError("the analytic method needs an Algorithm (a Program has no closed-form time)")
        from .analytic import critical_path_time_s

        return critical_path_time_s(schedule, machine, size_bytes, protocol=protocol)
    from .simulator import simulate

    result = simulate(
        schedule,
        machine,
        size_bytes,
        mode=mode,
        protocol=protocol,
        contention=contention,
        time_limit_s=time_limit_s,
        verify=False,
        record_timeline=False,
        record_utilisation=False,
    )
    return result.time_s

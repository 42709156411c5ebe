"""Discrete-event simulator: SimPy over a fluid network model.

:func:`simulate` runs an :class:`~simcoll.algorithm.Algorithm` (Algorithm mode,
:mod:`.algorithm_mode`) or a :class:`~simcoll.program.Program` (Program mode,
:mod:`.program_mode`) on a :class:`~simcoll.machines.Machine` and returns a
:class:`SimulationResult` (time, timeline, utilisation, algbw/busbw, Chrome
trace). The network model is in :mod:`.network`.

>>> from simcoll import load_machine
>>> from simcoll.algorithms import generate
>>> m = load_machine("ring:8")
>>> result = simulate(generate("ring", m.topology, "allreduce"), m, 1 << 20)
>>> result.mode, result.transfers
('algorithm', 112)
"""

from __future__ import annotations

from ..algorithm import Algorithm
from ..errors import SimcollError, VerificationError
from ..machines import Machine
from ..program import Program
from .network import FluidNetwork, TransferEvent
from .results import SimulationResult, make_result

__all__ = ["FluidNetwork", "SimulationResult", "TransferEvent", "lower_for", "make_result", "simulate"]

MODES = ("algorithm", "program")


def simulate(
    schedule: Algorithm | Program,
    machine: Machine,
    size_bytes: float,
    *,
    mode: str | None = None,
    contention: bool = True,
    time_limit_s: float = 60.0,
    verify: bool = True,
) -> SimulationResult:
    """Simulate ``schedule`` on ``machine`` for a ``size_bytes`` buffer.

    ``mode`` defaults to the schedule's kind (``"algorithm"`` for an
    Algorithm, ``"program"`` for a Program); asking for Program mode with an
    Algorithm lowers it first with :func:`simcoll.compiler.lower_algorithm`.
    ``contention=False`` gives the ideal α-β network (equal to the analytic
    critical-path time for an Algorithm); ``time_limit_s`` bounds the wall
    clock. With ``verify`` (default) a schedule that does not implement its
    collective on this machine (:func:`simcoll.verify.check`) is refused with
    :class:`~simcoll.errors.VerificationError` rather than timed.
    """
    if not isinstance(size_bytes, (int, float)) or not size_bytes > 0:
        raise SimcollError(f"size_bytes must be a positive number of bytes, got {size_bytes!r}")
    if verify and isinstance(schedule, (Algorithm, Program)):
        from ..verify import check

        problems = check(schedule, machine.topology)
        if problems:
            raise VerificationError([f"{schedule.name}: {p}" for p in problems])
    if mode is None:
        mode = "program" if isinstance(schedule, Program) else "algorithm"
    if mode not in MODES:
        raise SimcollError(f"unknown simulation mode {mode!r}: use {' or '.join(MODES)}")
    if mode == "algorithm":
        if not isinstance(schedule, Algorithm):
            raise SimcollError("Algorithm mode needs an Algorithm; a Program runs in Program mode (mode='program')")
        from .algorithm_mode import simulate_algorithm

        return simulate_algorithm(schedule, machine, size_bytes, contention=contention, time_limit_s=time_limit_s)
    if isinstance(schedule, Algorithm):
        try:
            from ..compiler import lower_algorithm
        except ImportError as exc:
            raise SimcollError(
                f"Program mode for an Algorithm needs simcoll.compiler.lower_algorithm ({exc})"
            ) from None
        schedule = lower_for(schedule, machine, lower_algorithm)
    if not isinstance(schedule, Program):
        raise SimcollError(f"cannot simulate a {type(schedule).__name__}: give an Algorithm or a Program")
    try:
        from .program_mode import simulate_program
    except ImportError as exc:
        raise SimcollError(f"Program mode is not available ({exc})") from None
    return simulate_program(schedule, machine, size_bytes, contention=contention, time_limit_s=time_limit_s)


def lower_for(algorithm: Algorithm, machine: Machine, lower_algorithm) -> Program:
    """``algorithm`` lowered for ``machine``: its routes are checked and the
    compiler bounds outstanding sends by the model's FIFO slots, so a Program
    that would deadlock on this machine is refused at compile time."""
    executor = machine.model.executor
    options = {"fifo_slots": executor.fifo_slots} if executor is not None else {}
    return lower_algorithm(algorithm, topology=machine.topology, **options)

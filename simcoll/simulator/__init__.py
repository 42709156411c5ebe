"""Discrete-event simulator: SimPy over a fluid network model.

:func:`simulate` is the one entry and the dispatcher: it runs an
:class:`~simcoll.algorithm.Algorithm` (Algorithm mode) or a
:class:`~simcoll.program.Program` (Program mode, :mod:`.program_mode`) on a
:class:`~simcoll.machines.Machine` and returns a :class:`SimulationResult`
(time, timeline, utilisation, algbw/busbw, Chrome trace; ``stats["path"]``
says which path ran). The rooms:

- :mod:`.reference` — the rules, stated once and plainly (``engine="reference"``);
- :mod:`.fast` — Algorithm mode's fast paths, tested against the reference;
- :mod:`.routing` — what a message crosses (resources, routes, their caches);
- :mod:`.network` and :mod:`.fair_share` — how fast it goes (the fast flow sharing);
- :mod:`.program_mode`, :mod:`.step_pipeline`, :mod:`.results`, :mod:`.engine`.

>>> from simcoll import load_machine
>>> from simcoll.algorithms import generate
>>> m = load_machine("ring:8")
>>> result = simulate(generate("ring", m, "allreduce"), m, 1 << 20)
>>> result.mode, result.transfers
('algorithm', 112)
"""

from __future__ import annotations

import time

from ..algorithm import Algorithm, protocol_of
from ..collector import collector_paused
from ..cost_model import PROTOCOLS
from ..errors import ScheduleTooLargeError, SimulationError, VerificationError
from ..limits import MAX_TRANSFERS
from ..machines import Machine, as_machine
from ..program import Program
from ..units import check_size_bytes
from .network import FluidNetwork, TransferEvent
from .results import SimulationResult, make_result

__all__ = ["FluidNetwork", "SimulationResult", "TransferEvent", "lower_for", "make_result", "simulate"]

MODES = ("algorithm", "program")
#: ``"fast"``: the dispatcher's fastest applicable path; ``"reference"``: the rules stated plainly (:mod:`.reference`).
ENGINES = ("fast", "reference")


def simulate(
    schedule: Algorithm | Program,
    machine: Machine | str,
    size_bytes: float,
    *,
    mode: str | None = None,
    contention: bool = True,
    time_limit_s: float = 60.0,
    verify: bool = True,
    record_timeline: bool = True,
    record_utilisation: bool = True,
    protocol: str | None = None,
    engine: str = "fast",
) -> SimulationResult:
    """Simulate ``schedule`` on ``machine`` for a ``size_bytes`` buffer.

    Algorithm mode sends every transfer (or TACCL contiguity group) as one
    message over the fluid network, in schedule order, FIFO per rank pair;
    Program mode runs every executor's instruction list as a SimPy process
    with connections, FIFO slots, tiling and kernel launches (GC3 §6). Both
    share the network model of :mod:`simcoll.simulator.network` (max-min fair
    sharing plus the cost model's contention parameters).

    Parameters
    ----------
    schedule : Algorithm or Program
        What to simulate.
    machine : Machine or str
        The machine, or a topology spec such as ``"dgx1"`` with its default
        model (:func:`simcoll.machines.as_machine`).
    size_bytes : float
        The buffer the collective is named by, in bytes (nccl-tests naming:
        one chunk is ``size_bytes / collective.size_chunks``); checked by
        :func:`simcoll.units.check_size_bytes` (positive, finite, at least
        one byte a chunk).
    mode : {"algorithm", "program"}, optional
        Defaults to the schedule's kind. Program mode for an Algorithm lowers
        it first with :func:`simcoll.compiler.lower_algorithm` (:func:`lower_for`).
    contention : bool, optional
        ``False`` gives the ideal α-β network: every message alone at its
        route's bandwidth. An Algorithm then takes exactly
        :func:`simcoll.analytic.critical_path_time_s` (to rounding).
    time_limit_s : float, optional
        Wall-clock limit of the run, its verification included, in seconds
        (default 60).
    verify : bool, optional
        Refuse a schedule that does not implement its collective on this
        machine (:func:`simcoll.verify.check`) instead of timing it (default).
        An Algorithm that carries the record of a check it passed on this
        topology (:mod:`simcoll.verify.record`; ``algo generate -o`` writes
        one) is not checked again.
    record_timeline, record_utilisation : bool, optional
        Record the per-message timeline and the per-resource utilisation
        (default); off saves time and memory on large schedules and leaves
        the corresponding frame of the result empty.
    protocol : {"LL", "LL128", "Simple"}, optional
        The protocol whose costs apply (:meth:`simcoll.cost_model.CostModel.protocol`):
        efficiency, per-message and per-call latency. Default: an Algorithm's
        ``metadata["protocol"]``, a Program's ``protocol``, else the model's
        ``default_protocol``, else none (no protocol cost).
    engine : {"fast", "reference"}, optional
        ``"fast"`` (default) lets the dispatcher pick the fastest path that
        applies (private pairs, NumPy batches, timing in schedule order, the
        compiled core, node-rotation quotients: :mod:`.fast`);
        ``"reference"`` runs the reference engine (:mod:`.reference`), which
        states the rules plainly and is what the fast paths are tested
        against: slow, for small schedules and for checking. The result's
        ``stats["path"]`` says which path ran.

    Returns
    -------
    SimulationResult
        Completion time, timeline, utilisation, nccl-tests bandwidths and stats.

    Raises
    ------
    SizeError
        If ``size_bytes`` is not a valid size for the schedule's collective.
    VerificationError
        If ``verify`` and the schedule does not implement its collective.
    AlgorithmError
        If the schedule is for another number of ranks, or reads a chunk
        before its source holds it.
    ProgramDeadlockError
        If a Program stalls with work left (a :class:`SimulationError`).
    SimulationError
        On an unknown ``mode``, a schedule of another type, a stall, or when
        the wall-clock limit is reached.
    TopologyError
        If ``machine`` is not a Machine or a topology spec, or a message has
        no route.

    Examples
    --------
    >>> from simcoll import load_machine
    >>> from simcoll.algorithms import generate
    >>> m = load_machine("ring:4")
    >>> r = simulate(generate("ring", m, "allgather"), m, 4e6)
    >>> round(r.time_s * 1e6, 3)   # 3 steps of 0.7 us + 1 MB / 25 GB/s
    122.1
    >>> simulate(generate("ring", m, "allgather"), "ring:4", 4e6, mode="program").mode
    'program'

    References
    ----------
    .. [1] M. Cowan et al., "GC3: An Optimizing Compiler for GPU Collective
       Communication" (MSCCLang), §6: the interpreter runtime Program mode models.
    .. [2] A. Shah et al., "TACCL: Guiding Collective Algorithm Synthesis
       using Communication Sketches", NSDI 2023, §3.2 and §4.2: the switch
       and host-staging contention parameters.
    """
    machine = as_machine(machine)
    if not isinstance(schedule, (Algorithm, Program)):
        raise SimulationError(f"cannot simulate a {type(schedule).__name__}: give an Algorithm or a Program")
    check_size_bytes(size_bytes, chunks=schedule.collective.size_chunks)
    if mode is None:
        mode = "program" if isinstance(schedule, Program) else "algorithm"
    if mode not in MODES:
        raise SimulationError(f"unknown simulation mode {mode!r}: use {' or '.join(MODES)}")
    if mode == "algorithm" and not isinstance(schedule, Algorithm):
        raise SimulationError("Algorithm mode needs an Algorithm; a Program runs in Program mode (mode='program')")
    if engine not in ENGINES:
        raise SimulationError(f"unknown engine {engine!r}: use {' or '.join(ENGINES)}")
    if protocol is not None and protocol not in PROTOCOLS:
        raise SimulationError(f"unknown protocol {protocol!r}: use {', '.join(PROTOCOLS)}")
    orbit = schedule.orbit if isinstance(schedule, Algorithm) else None
    if (
        orbit is not None
        and len(orbit) > MAX_TRANSFERS
        and (mode == "program" or record_timeline or record_utilisation)
    ):
        needs = "Program mode lowers" if mode == "program" else "a timeline or utilisation lists"
        raise ScheduleTooLargeError(
            f"{schedule.name}: {needs} each of its {len(orbit):,} transfers (held as {len(orbit.representatives):,} "
            "and a rotation), more than simcoll lists one by one (simcoll.limits.MAX_TRANSFERS): simulate it in "
            "Algorithm mode without them (record_timeline=False, record_utilisation=False; on the command line, "
            "without --trace)"
        )
    started_s = time.perf_counter()  # the limit covers the check and the run together
    if verify and not _checked_before(schedule, machine):
        from ..verify import check

        # (a limit that is not a positive number is refused by the back end below, as ever)
        valid = isinstance(time_limit_s, (int, float)) and time_limit_s > 0
        problems = check(schedule, machine, time_limit_s=time_limit_s if valid else None)
        if problems:
            raise VerificationError([f"{schedule.name}: {p}" for p in problems])
    options = {
        "contention": contention,
        "time_limit_s": time_limit_s,
        "started_s": started_s,
        "record_timeline": record_timeline,
        "record_utilisation": record_utilisation,
    }
    with collector_paused():  # routes, plans and events: millions of short-lived objects
        if mode == "algorithm" and engine == "reference":
            from .reference import simulate_reference

            return simulate_reference(schedule, machine, size_bytes, protocol=protocol, **options)
        if mode == "algorithm":
            from .fast.algorithm_mode import _simulate_algorithm

            return _simulate_algorithm(schedule, machine, size_bytes, protocol=protocol, **options)
        if isinstance(schedule, Algorithm):
            from ..compiler import lower_algorithm

            protocol = protocol_of(schedule, protocol)
            schedule = lower_for(schedule, machine, lower_algorithm)
        from .program_mode import _simulate_program

        if engine == "reference":
            from .reference import ReferenceNetwork

            options["network_type"] = ReferenceNetwork
        return _simulate_program(schedule, machine, size_bytes, protocol=protocol, **options)


def lower_for(algorithm: Algorithm, machine: Machine, lower_algorithm) -> Program:
    """``algorithm`` lowered for ``machine``: its routes are checked and the
    compiler bounds outstanding sends by the model's FIFO slots, so a Program
    that would deadlock on this machine is refused at compile time."""
    executor = machine.model.executor
    options = {"fifo_slots": executor.fifo_slots} if executor is not None else {}
    return lower_algorithm(algorithm, machine=machine, **options)


def _checked_before(schedule: Algorithm | Program, machine: Machine) -> bool:
    """Whether ``schedule`` carries the record of a check it passed on this
    topology that still describes it (:mod:`simcoll.verify.record`: ``algo
    generate`` writes one), so that it is not checked again."""
    if not isinstance(schedule, Algorithm) or "checked" not in (schedule.metadata or {}):
        return False
    from ..verify.record import record_holds

    return record_holds(schedule, machine)

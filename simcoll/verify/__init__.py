"""Independent verifier: symbolic execution of Algorithms and Programs against
their collective's postcondition.

A chunk's value is tracked as ``(chunk id, contributions)``: the set of ranks
whose input it has been reduced over. Copying moves the value; reducing two
values of the same chunk unites their contributions, and a contribution
counted twice is an error. At the end every (chunk, rank) pair of the
postcondition must hold its chunk, and for combining collectives the
reduction over every contributor.

Algorithms (step or timed) are executed as SCCL §3.3 defines a run; for
k-synchronous ones the sends of every step are also checked against the
bandwidth relation B, scaled by the step's rounds. With a topology, every
transfer must also have a route.

In-switch reductions (:class:`~simcoll.algorithm.SwitchReduction`) are executed
the same way: at the start of its batch the switch reads the chunk at each
source, combines the values (a contribution counted twice is an error, as for
``reduce`` transfers), and at the end of the batch every destination's copy is
replaced by the result. With a topology the switch must exist, be a switch that
declares ``reduce`` (several sources) and ``multicast`` (several destinations),
and be reachable from every source and reach every destination without
passing through another GPU. They are not counted against SCCL's bandwidth
relation, which describes rank-to-rank links only.

Programs are executed executor by executor: sends and receives match in FIFO
order per connection, dependencies wait, and a stall with work left is a
deadlock (reported with the cycle of waits when there is one). Accesses to the
same buffer slot from different executors must be ordered by dependencies or
messages (vector clocks); otherwise the result could depend on timing, and the
race is reported. Connection rules: on a rank, one executor sends to a given
peer on a given channel, and one receives from it.

Use :func:`check` for the list of problems, :func:`verify` to raise.

The package, one part of the check per module: this one holds the entry
points (:func:`check`, :func:`verify`, :func:`check_algorithm`); ``arrays``
decides whether a step schedule is correct on NumPy columns
(:func:`algorithm_is_correct`, :func:`orbit_is_correct`); ``symbolic``
replays an Algorithm value by value to say what is wrong; ``switches`` holds
the rules of in-switch reductions; ``program`` executes Programs
(:func:`check_program`); ``values`` is the chunk values and the
postcondition they share, ``deadline`` the wall-clock limit of a check.
"""

from __future__ import annotations

from ..algorithm import Algorithm
from ..errors import OptionError, VerificationError
from ..limits import MAX_TRANSFERS
from ..machines import Machine, as_machine
from ..program import Program
from ..topology import Topology
from .arrays import _fast_path_applies, algorithm_is_correct, orbit_is_correct
from .deadline import _DEADLINE, _Deadline
from .program import check_program
from .symbolic import _check_algorithm_symbolic
from .values import MAX_PROBLEMS, Value

__all__ = [
    "MAX_PROBLEMS",
    "Value",
    "algorithm_is_correct",
    "check",
    "check_algorithm",
    "check_program",
    "orbit_is_correct",
    "verify",
]


def check(
    schedule: Algorithm | Program, machine: Machine | str | None = None, *, time_limit_s: float | None = None
) -> list[str]:
    """Every problem of a schedule, as sentences naming what is at fault.

    An Algorithm is replayed step by step (module docstring) and checked
    against its collective's postcondition and SCCL's bandwidth relation B;
    a Program is executed executor by executor. With a machine, every
    transfer or connection must also have a route on its topology.

    Parameters
    ----------
    schedule : Algorithm or Program
        The schedule to check.
    machine : Machine or str, optional
        The machine (or a topology spec) the schedule runs on; without one,
        routes are not checked and B is the Algorithm's own, if any.
    time_limit_s : float, optional
        Wall-clock limit of the check, in seconds (default: none).
        :func:`simcoll.simulator.simulate` passes its own: verifying and
        simulating share it.

    Returns
    -------
    list of str
        The problems found (at most ``MAX_PROBLEMS`` per kind); empty when
        the schedule is correct.

    Raises
    ------
    TypeError
        When ``schedule`` is neither an Algorithm nor a Program.
    TopologyError
        When ``machine`` is not a Machine or a topology spec.
    OptionError
        When ``time_limit_s`` is not a positive number of seconds.
    TimeLimitError
        When ``time_limit_s`` seconds pass before the check ends (a schedule
        of millions of transfers and a problem send it to the symbolic run).

    See Also
    --------
    verify : the same check, raising on the first problem list.

    References
    ----------
    .. [1] Cai et al., "Synthesizing Optimal Collective Algorithms" (SCCL),
       PPoPP 2021, §3.2 (the pre- and postconditions and the relation B).

    Examples
    --------
    >>> from simcoll import generate
    >>> check(generate("ring", "ring:4", "allgather"), "ring:4")
    []
    >>> check(generate("ring", "ring:4", "allgather"), "ring:8")
    ['ring is for 4 ranks but ring:8 has 8']
    """
    topology = as_machine(machine).topology if machine is not None else None
    if not isinstance(schedule, (Algorithm, Program)):
        raise TypeError(f"cannot verify a {type(schedule).__name__}")
    if time_limit_s is not None and not time_limit_s > 0:
        raise OptionError(f"time_limit_s must be a positive number of seconds, got {time_limit_s!r}")
    token = _DEADLINE.set(None if time_limit_s is None else _Deadline(f"verification of {schedule.name}", time_limit_s))
    try:
        if isinstance(schedule, Algorithm):
            return check_algorithm(schedule, topology)
        return check_program(schedule, topology)
    finally:
        _DEADLINE.reset(token)


def verify(schedule: Algorithm | Program, machine: Machine | str | None = None) -> None:
    """Check a schedule and raise if it has any problem.

    Parameters
    ----------
    schedule : Algorithm or Program
        The schedule to check.
    machine : Machine or str, optional
        The machine (or a topology spec) whose routes the schedule must use.

    Returns
    -------
    None

    Raises
    ------
    VerificationError
        Listing every problem :func:`check` found.

    See Also
    --------
    check : the problems as a list.

    Examples
    --------
    >>> from simcoll import generate
    >>> verify(generate("ring", "dgx1", "allreduce"), "dgx1")
    >>> verify(generate("ring", "ring:4", "allgather"), "ring:8")
    Traceback (most recent call last):
    ...
    simcoll.errors.VerificationError: ring is for 4 ranks but ring:8 has 8
    """
    problems = check(schedule, machine)
    if problems:
        raise VerificationError(problems)


def check_algorithm(algorithm: Algorithm, topology: Topology | None = None) -> list[str]:
    """Problems of an Algorithm (:func:`check`). Step schedules go through
    :func:`algorithm_is_correct` first, which holds the state in NumPy
    arrays; only when it finds a problem does the symbolic execution below
    run, to describe it."""
    coll = algorithm.collective
    if topology is not None and topology.num_ranks != coll.num_ranks:
        return [f"{algorithm.name} is for {coll.num_ranks} ranks but {topology.name} has {topology.num_ranks}"]
    if algorithm.orbit is not None:
        if orbit_is_correct(algorithm, topology):
            return []
        if len(algorithm.transfers) > MAX_TRANSFERS:
            return [
                f"{algorithm.name} is not correct (replayed on its first {algorithm.orbit.shift_ranks} ranks' "
                f"representatives); saying where needs its {len(algorithm.transfers):,} transfers one by one, more "
                "than simcoll lists (simcoll.limits.MAX_TRANSFERS): try it on fewer ranks"
            ]
    elif _fast_path_applies(algorithm) and algorithm_is_correct(algorithm, topology):
        return []
    return _check_algorithm_symbolic(algorithm, topology)

"""Exceptions raised by simcoll.

Every public entry point validates its input and raises a subclass of
:class:`SimcollError` whose message names the offending file, field, chunk,
rank, step or instruction. The CLI turns these into a one-line message and a
non-zero exit code.
"""

from __future__ import annotations

from collections.abc import Sequence


class SimcollError(Exception):
    """Base class of every error simcoll raises on bad input or failed checks."""


class TopologyError(SimcollError):
    """A topology description is malformed or names something that does not exist."""


class ModelError(SimcollError):
    """A cost-model description is malformed or does not cover a machine."""


class CollectiveError(SimcollError):
    """A collective specification is malformed or unknown."""


class TooLargeError(SimcollError):
    """A collective or schedule larger than simcoll builds (:mod:`simcoll.limits`),
    refused before it takes the machine's memory. :func:`simcoll.compare.compare`
    leaves such an algorithm's row out and says why, as for one that does not apply."""


class CollectiveTooLargeError(CollectiveError, TooLargeError):
    """A collective with more buffer slots than :data:`simcoll.limits.MAX_COLLECTIVE_SLOTS`."""


class ScheduleTooLargeError(TooLargeError):
    """A generator would build more transfers than :data:`simcoll.limits.MAX_TRANSFERS`."""


class AlgorithmError(SimcollError):
    """An Algorithm or Program is malformed (before any semantic check)."""


class DSLError(AlgorithmError):
    """A DSL program (:mod:`simcoll.dsl`) misuses a chunk; the message starts
    with the user's ``file:line``."""


class CompileError(AlgorithmError):
    """A program cannot be compiled (a scheduling constraint cannot be met);
    the message names the instruction and, for DSL programs, the user's line."""


class SizeError(SimcollError):
    """A buffer size is not a positive, finite number of bytes, or is too
    small to give every chunk at least one byte
    (:func:`simcoll.units.check_size_bytes`)."""


class SimulationError(SimcollError):
    """The simulator could not finish a run: a schedule stalled with work left,
    the wall-clock limit was reached, or a run was asked for in a way the
    simulator does not support (:func:`simcoll.simulator.simulate`)."""


class TimeLimitError(SimulationError):
    """A simulation reached its wall-clock limit (``time_limit_s``) before it
    finished: the schedule may be fine, only too large to simulate in that
    time. :func:`simcoll.compare.compare` does not try the same schedule at
    its other sizes after one of these."""


class ProgramDeadlockError(SimulationError, AlgorithmError):
    """A simulated Program stalled with work left. ``waits`` lists, per blocked
    executor, what it waits on (rank, executor, step, tile, op, and the
    connection, slot or dependency); ``time_s`` is the simulated time of the
    stall. It is also an :class:`AlgorithmError`: the Program, not the
    simulator, is at fault."""

    def __init__(self, program_name: str, time_s: float, waits: Sequence[str]):
        self.waits = list(waits)
        self.time_s = time_s
        listing = "; ".join(self.waits)
        super().__init__(f"{program_name}: deadlock at t={time_s * 1e6:.3f} us: {listing}")


class NotApplicableError(SimcollError):
    """An algorithm generator does not apply to the given machine or collective."""


class SynthesisError(SimcollError):
    """A synthesis instance is malformed (bad steps, rounds, chunks or bandwidth
    relation); a solver's "unsat" or "unknown" is an answer, not an error."""


class VerificationError(SimcollError):
    """An Algorithm or Program does not implement its collective.

    ``problems`` lists every fault found, each a sentence naming the chunk,
    rank, step or instruction at fault.
    """

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        head = problems[0] if problems else "verification failed"
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        super().__init__(head + more)

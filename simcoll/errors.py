"""Exceptions raised by simcoll: every class the package defines is here.

Every public entry point validates its input and raises a subclass of
:class:`SimcollError` whose message names the offending file, field, chunk,
rank, step or instruction. The CLI turns these into a one-line message and
exit code 2 (a negative answer, such as an incorrect schedule or an unsat
synthesis, is exit 1 and no exception).

A caller tells the cases apart by class; each class says below when it is
raised. The classes and what they are::

    SimcollError
    ├── OptionError (also a ValueError)   a bad argument or option
    │   └── InvalidValueError              a command-line value (also argparse's error)
    ├── FileError                          a file without a class of its own
    │   └── NcclTestsLogError              an nccl-tests log
    ├── TopologyError
    │   ├── UnknownMachineError            a topology spec that names nothing
    │   └── DumpError (also a FileError)   a topology dump to import
    ├── ModelError
    │   └── UnknownModelError              a model spec that names nothing
    ├── CollectiveError
    │   └── CollectiveTooLargeError (also a TooLargeError)
    ├── TooLargeError
    │   └── ScheduleTooLargeError
    ├── AlgorithmError
    │   ├── DSLError
    │   ├── CompileError
    │   └── InterpreterDeadlockError
    ├── SizeError
    ├── SimulationError
    │   ├── TimeLimitError
    │   └── ProgramDeadlockError (also an AlgorithmError)
    ├── NotApplicableError
    ├── SynthesisError
    ├── SolverError (also a RuntimeError)
    ├── VerificationError
    ├── CalibrationError
    ├── WorkloadError                      a workload (its operations, groups, file)
    ├── SweepError
    │   └── StudyError
    ├── BuildError
    └── GpuUnavailableError

A class that also derives from a built-in exception (``ValueError``,
``RuntimeError``) does so because the same fault was raised as that built-in
before, or is one by Python's conventions: ``except ValueError`` keeps
working.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence


class SimcollError(Exception):
    """Base class of every error simcoll raises on bad input or failed checks."""


class OptionError(SimcollError, ValueError):
    """An argument of a public function or an option of a command is not one
    it takes: out of range (a count below 1, a time limit that is not a
    positive number of seconds), not one of the names it knows (a compare
    method, an algorithm, a generator option, an NCCL algorithm or protocol),
    in conflict with another option (``--size`` and ``--sizes``), missing
    where another needs it, or a schedule and a machine of different rank
    counts. Plotting functions raise it for a DataFrame that lacks what the
    plot needs. It is also a :class:`ValueError`, as Python's own functions
    raise for a bad argument value."""


class InvalidValueError(OptionError, argparse.ArgumentTypeError):
    """A command-line value (or an algorithm generator's ``k=v`` option) that
    is not the value asked for, e.g. ``--chunks 0`` (:mod:`simcoll.arguments`).
    It is also an :class:`argparse.ArgumentTypeError`, so argparse prints its
    message as it is (exit 2), and a :class:`ValueError`, what a generator
    option's parser raises."""


class FileError(SimcollError):
    """A file cannot be read or written, or its text is not UTF-8, JSON, YAML
    or the CSV it should be, and no class of its own covers it (the default of
    the :mod:`simcoll.files` helpers; the measurement CSV of
    :func:`simcoll.gpu.validate.measured_times`).
    A topology, model or schedule file raises :class:`TopologyError`,
    :class:`ModelError` or :class:`AlgorithmError`, naming the file."""


class NcclTestsLogError(FileError):
    """An nccl-tests log cannot be read; the message is one line naming the
    file and line (``path:line: problem``). Raised by
    :func:`simcoll.calibration.read_nccl_tests` and
    :func:`simcoll.calibration.parse_nccl_tests`."""


class TopologyError(SimcollError):
    """A topology description is malformed or names something that does not exist."""


class UnknownMachineError(TopologyError):
    """A topology spec that names no built-in topology and no generator
    (:func:`simcoll.machines.load_topology`, hence every function that takes
    a machine spec, e.g. ``load_machine("dgx9")`` or ``"torus3d:4"``); the
    message lists the built-ins and generators. A spec that names a generator
    with bad parameters, or a file that cannot be read, is a plain
    :class:`TopologyError`."""


class DumpError(TopologyError, FileError):
    """A topology dump is malformed; the message names the dump, and the row
    and column (or line and column) at fault (:mod:`simcoll.topology_import`)."""


class ModelError(SimcollError):
    """A cost-model description is malformed or does not cover a machine."""


class UnknownModelError(ModelError):
    """A model spec that names no built-in cost model and no file
    (:func:`simcoll.machines.load_model`, and a topology whose
    ``default_model`` names none); the message lists the built-ins."""


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


class InterpreterDeadlockError(AlgorithmError):
    """An interpreter of :mod:`simcoll.gpu` (NumPy reference, host threads or
    GPU) stalled with work left. ``waits`` lists, per blocked executor, what
    it waits on."""

    def __init__(self, program_name: str, runner: str, waits: Sequence[str]):
        self.waits = list(waits)
        shown = "; ".join(self.waits[:8]) + (" ..." if len(self.waits) > 8 else "")
        super().__init__(f"{program_name}: deadlock in the {runner}: {shown}")


class SizeError(SimcollError):
    """A buffer size is not a positive, finite number of bytes, or is too
    small to give every chunk at least one byte
    (:func:`simcoll.units.check_size_bytes`); a size or size range written as
    text that does not read as one (:func:`simcoll.units.parse_size`,
    :func:`simcoll.units.parse_size_range`)."""


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
    """An algorithm generator (or NCCL's tuner, or the NCCL baseline) does not
    apply to the given machine or collective. :func:`simcoll.compare.compare`
    leaves such a row out and says why, and raises it itself when no row is
    left; the sweep runner records such a point as ``not-applicable``
    rather than ``error``."""


class SynthesisError(SimcollError):
    """A synthesis instance is malformed (bad steps, rounds, chunks or bandwidth
    relation); a solver's "unsat" or "unknown" is an answer, not an error."""


class SolverError(SimcollError, RuntimeError):
    """A solver did not give an answer its caller cannot do without: the
    max-flow solver behind :mod:`simcoll.bounds` ended without an optimum, or
    a sweep point's SCCL synthesis ended unsat, unknown or without a schedule
    (the message gives the status). It is also a :class:`RuntimeError`, as the
    max-flow failure was before."""


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


class CalibrationError(SimcollError):
    """An nccl-tests log cannot be used with a machine (rank count, collective,
    sizes), or a model has no field to fit
    (:mod:`simcoll.calibration.calibrate`)."""


class WorkloadError(SimcollError):
    """A workload that cannot run: an operation that names no group or rank
    of it, a dependency on nothing or in a cycle, a group whose ranks
    disagree on a collective, an unmatched send or receive, a bad file
    (:mod:`simcoll.workload`)."""


class SweepError(SimcollError):
    """The sweep engine (:mod:`simcoll.sweeps`) cannot run a study or read
    its results: the output directory already holds results and resuming was
    not asked for, a directory is not a sweep results directory (or its
    manifest is not valid JSON), or the Dask scheduler cannot be reached."""


class StudyError(SweepError):
    """A study file or mapping that cannot be expanded
    (:func:`simcoll.sweeps.load_study`); the message names the field."""


class BuildError(SimcollError):
    """Native code cannot be built or loaded: no C++ compiler, the compiler
    or NVRTC failed, a built library's structure layout differs from Python's,
    or the build cache is a folder others may write to
    (:mod:`simcoll.native`, :mod:`simcoll.gpu.nvrtc`). The simulator's
    compiled core falls back to Python on it."""


class GpuUnavailableError(SimcollError):
    """A GPU-only path of :mod:`simcoll.gpu` was asked for on a machine without
    CuPy or a CUDA device."""

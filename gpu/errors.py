"""Errors of :mod:`simcoll.gpu` (all :class:`~simcoll.errors.SimcollError` s)."""

from __future__ import annotations

from collections.abc import Sequence

from simcoll.errors import AlgorithmError, SimcollError


class GpuUnavailableError(SimcollError):
    """A GPU-only path was asked for on a machine without CuPy or a CUDA device."""


class InterpreterDeadlockError(AlgorithmError):
    """An interpreter (NumPy reference, host threads or GPU) stalled with work
    left. ``waits`` lists, per blocked executor, what it waits on."""

    def __init__(self, program_name: str, runner: str, waits: Sequence[str]):
        self.waits = list(waits)
        shown = "; ".join(self.waits[:8]) + (" ..." if len(self.waits) > 8 else "")
        super().__init__(f"{program_name}: deadlock in the {runner}: {shown}")

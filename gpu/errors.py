"""Errors of :mod:`simcoll.gpu`: defined in :mod:`simcoll.errors` with every
other simcoll error, and importable from here as before."""

from __future__ import annotations

from simcoll.errors import GpuUnavailableError, InterpreterDeadlockError

__all__ = ["GpuUnavailableError", "InterpreterDeadlockError"]

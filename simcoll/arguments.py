"""Value parsers shared by the command line (``simcoll ...``),
the sweep command (``simcoll sweep``, ``python -m simcoll.sweeps``) and the
algorithm generators' ``k=v`` options (:mod:`simcoll.algorithms.registry`).

Whole numbers (:func:`positive_int`, :func:`non_negative_int`), seconds
(:func:`positive_seconds`) and worker counts (:func:`job_count`). Each turns
one string into a number or refuses it with a message naming what
it expected and what it got. The error they raise,
:class:`~simcoll.errors.InvalidValueError`, is both an
:class:`argparse.ArgumentTypeError` (argparse prints its message as it is,
exit 2) and a :class:`ValueError` (what a generator option's parser raises),
so one parser serves as an argparse ``type`` and as an option's ``parse``
alike. This module imports nothing of simcoll's but its errors, so the sweep
engine and the generators can use it without importing the CLI.

>>> positive_int("8")
8
>>> positive_int("0")
Traceback (most recent call last):
...
simcoll.errors.InvalidValueError: must be at least 1, got 0
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable

from .errors import InvalidValueError


def _whole_number_at_least(text: str, least: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise InvalidValueError(f"expected a whole number, got {text!r}") from None
    if value < least:
        raise InvalidValueError(f"must be at least {least}, got {value}")
    return value


def positive_int(text: str) -> int:
    """An argparse ``type`` for counts that must be >= 1 (``--chunks 0`` is refused, not defaulted)."""
    return _whole_number_at_least(text, 1)


def non_negative_int(text: str) -> int:
    """An argparse ``type`` for ranks and indices (>= 0)."""
    return _whole_number_at_least(text, 0)


def positive_seconds(option: str) -> Callable[[str], float]:
    """An argparse ``type`` for a time limit or timeout: a finite number of
    seconds above 0. ``nan``, ``inf``, ``0`` and negatives are refused here,
    where the option is parsed, rather than as a limit "reached" (or every
    row left out) once the work has started.

    >>> positive_seconds("--time-limit")("2.5")
    2.5
    >>> positive_seconds("--time-limit")("nan")
    Traceback (most recent call last):
    ...
    simcoll.errors.InvalidValueError: --time-limit must be a positive number of seconds, got 'nan'
    """

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value <= 0:
            raise InvalidValueError(f"{option} must be a positive number of seconds, got {text!r}")
        return value

    parse.__name__ = "positive_seconds"  # argparse names the type in some messages
    return parse


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity where the system
    tells it, else ``os.cpu_count()``)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def job_count(text: str) -> int:
    """An argparse ``type`` for ``--jobs``: worker processes on this machine,
    1 to its usable cores. More processes than cores only queue on them and
    each pays its own start-up, so more jobs run slower, not faster.

    >>> job_count("1")
    1
    >>> job_count("0")
    Traceback (most recent call last):
    ...
    simcoll.errors.InvalidValueError: must be at least 1, got 0
    """
    value = positive_int(text)
    cores = usable_cores()
    if value > cores:
        raise InvalidValueError(
            f"{value} jobs is more than the {cores} CPU core(s) this process may use (at most {cores})"
        )
    return value

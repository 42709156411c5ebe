"""Whole-number value parsers shared by the command line (``simcoll ...``),
the sweep command (``simcoll sweep``, ``python -m simcoll.sweeps``) and the
algorithm generators' ``k=v`` options (:mod:`simcoll.algorithms.registry`).

Each turns one string into a number or refuses it with a message naming what
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

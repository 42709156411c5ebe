"""Parsing and printing of sizes and size ranges ("1KB", "1M", "1KB:1GB").

Sizes are bytes inside the library. Suffixes are binary (K = 1024), as in
nccl-tests and TACCL's ``input_size`` ("1M" = 1 MiB).
"""

from __future__ import annotations

import math
import numbers
import re

from .errors import SizeError
from .limits import MAX_SIZE_BYTES

_MULTIPLIERS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)


def check_size_bytes(
    size_bytes: float, *, chunks: int = 0, where: str = "size_bytes", allow_zero: bool = False
) -> float:
    """``size_bytes`` if it is a valid buffer size, else :class:`~simcoll.errors.SizeError`.

    The one rule for sizes in simcoll: a size is a real number of bytes (not
    a bool), finite and positive. With ``chunks`` > 0 (the collective's
    :attr:`~simcoll.collectives.Collective.size_chunks`) it must also be at
    least ``chunks`` bytes: a buffer of ``size_bytes`` is cut into ``chunks``
    chunks of ``size_bytes / chunks`` bytes (nccl-tests naming), and a chunk
    smaller than one byte moves nothing a GPU could send. Fractional chunk
    sizes above one byte are accepted (the α-β model is linear in bytes).
    ``allow_zero`` admits 0 (a network message that carries only a signal).

    Callers: :func:`simcoll.simulator.simulate` and
    :func:`simcoll.analytic.chunk_bytes` (so the analytic cost functions and
    both simulator modes) apply the chunk rule; :func:`simcoll.compare.compare`
    checks its sizes and leaves out an algorithm at a size below its chunk
    count; :func:`simcoll.bounds.time_lower_bound_s` checks the size alone
    (a lower bound is linear in the size, whatever the chunking);
    :func:`parse_size` and the network's messages use it too.

    Parameters
    ----------
    size_bytes : float
        The size to check, in bytes.
    chunks : int, optional
        Chunks the buffer is cut into; 0 (default) skips the per-chunk check.
    where : str, optional
        What the size is, for the message (default ``"size_bytes"``).
    allow_zero : bool, optional
        Accept a size of 0 (default False).

    Returns
    -------
    float
        ``size_bytes`` unchanged (an ``int`` stays an ``int``).

    Raises
    ------
    SizeError
        If ``size_bytes`` is not a number, is a bool, NaN, infinite, negative,
        zero (unless ``allow_zero``) or smaller than ``chunks``.

    Examples
    --------
    >>> check_size_bytes(1 << 20, chunks=8)
    1048576
    >>> check_size_bytes(4, chunks=8)
    Traceback (most recent call last):
    ...
    simcoll.errors.SizeError: size_bytes = 4 B is smaller than its 8 chunks: a chunk must be at least 1 byte
    """
    if isinstance(size_bytes, bool) or not isinstance(size_bytes, numbers.Real):
        raise SizeError(f"{where} must be a number of bytes, got {size_bytes!r}")
    if not math.isfinite(size_bytes) or size_bytes < 0 or (size_bytes == 0 and not allow_zero):
        what = "non-negative" if allow_zero else "positive"
        raise SizeError(f"{where} must be a finite, {what} number of bytes, got {size_bytes!r}")
    if chunks > 0 and size_bytes < chunks:
        raise SizeError(
            f"{where} = {size_bytes:g} B is smaller than its {chunks} chunks: a chunk must be at least 1 byte"
        )
    return size_bytes


def parse_size(text: str | int) -> int:
    """Return the number of bytes in ``text`` ("64", "1K", "1KB", "4MiB", "1.5G").

    Sizes above :data:`simcoll.limits.MAX_SIZE_BYTES` (1 PiB) are refused.

    >>> parse_size("1KB")
    1024
    >>> parse_size("2048TB")
    Traceback (most recent call last):
    ...
    simcoll.errors.SizeError: size '2048TB' is more than simcoll takes (at most 1024TB = 1,125,899,906,842,624 bytes, simcoll.limits.MAX_SIZE_BYTES)
    """
    if isinstance(text, int) and not isinstance(text, bool):
        value = check_size_bytes(text, where="size")
    else:
        match = _SIZE_RE.match(str(text))
        if not match:
            raise SizeError(f"cannot read size {text!r}: expected a number with an optional K/M/G/T suffix")
        # the digits as an integer, not a float: 99999999999999999999 must not round to a size it is not
        digits, suffix = match.group(1), _MULTIPLIERS[match.group(2).upper()]
        exact = int(digits) * suffix if "." not in digits else None
        number = float(digits) * suffix
        if number < 1 or (exact is None and number != int(number)):
            raise SizeError(f"size {text!r} is not a positive whole number of bytes")
        value = exact if exact is not None else int(number)
    if value > MAX_SIZE_BYTES:
        raise SizeError(
            f"size {text!r} is more than simcoll takes (at most {format_size(MAX_SIZE_BYTES)} = {MAX_SIZE_BYTES:,} bytes, "
            "simcoll.limits.MAX_SIZE_BYTES)"
        )
    return value


def parse_size_range(text: str, factor: int = 2) -> list[int]:
    """Sizes from ``LOW:HIGH`` multiplying by ``factor`` (nccl-tests ``-b -e -f``),
    or a comma-separated list of sizes.

    >>> parse_size_range("1KB:8KB")
    [1024, 2048, 4096, 8192]
    """
    if "," in text:
        return [parse_size(part) for part in text.split(",")]
    if ":" not in text:
        return [parse_size(text)]
    low_text, high_text = text.split(":", 1)
    low, high = parse_size(low_text), parse_size(high_text)
    if low > high:
        raise SizeError(f"size range {text!r} is empty: {low} B > {high} B")
    sizes = []
    size = low
    while size <= high:
        sizes.append(size)
        size *= factor
    return sizes


def format_size(size_bytes: float) -> str:
    """Short human-readable size, binary units: 1024 -> '1KB'."""
    for suffix, mult in (("TB", 2**40), ("GB", 2**30), ("MB", 2**20), ("KB", 2**10)):
        if size_bytes >= mult:
            value = size_bytes / mult
            return f"{value:g}{suffix}" if value == int(value) else f"{value:.3g}{suffix}"
    return f"{size_bytes:g}B"

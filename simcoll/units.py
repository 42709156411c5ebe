"""Parsing and printing of sizes and size ranges ("1KB", "1M", "1KB:1GB").

Sizes are bytes inside the library. Suffixes are binary (K = 1024), as in
nccl-tests and TACCL's ``input_size`` ("1M" = 1 MiB).
"""

from __future__ import annotations

import re

from .errors import SimcollError

_MULTIPLIERS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)


def parse_size(text: str | int) -> int:
    """Return the number of bytes in ``text`` ("64", "1K", "1KB", "4MiB", "1.5G").

    >>> parse_size("1KB")
    1024
    """
    if isinstance(text, int):
        if text <= 0:
            raise SimcollError(f"size must be positive, got {text}")
        return text
    match = _SIZE_RE.match(str(text))
    if not match:
        raise SimcollError(f"cannot read size {text!r}: expected a number with an optional K/M/G/T suffix")
    value = float(match.group(1)) * _MULTIPLIERS[match.group(2).upper()]
    if value < 1 or value != int(value):
        raise SimcollError(f"size {text!r} is not a positive whole number of bytes")
    return int(value)


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
        raise SimcollError(f"size range {text!r} is empty: {low} B > {high} B")
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

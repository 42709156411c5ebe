"""NumPy idioms the columnar code shares (generators, verifier, bounds,
simulator): lists of lists as flat columns, many slices of an array
gathered at once, unique keys with their counts, and rows packed into
one integer key."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from math import prod

import numpy as np


def flatten(lists: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """``(row, value)`` of every entry of ``lists``, list by list in order,
    as two int64 arrays (a collective's layout: the rank and the chunk of
    every (rank, chunk) it lists).

    >>> flatten([[5, 6], [], [7]])
    (array([0, 0, 2]), array([5, 6, 7]))
    """
    lengths = np.fromiter(map(len, lists), dtype=np.int64, count=len(lists))
    values = np.fromiter(itertools.chain.from_iterable(lists), dtype=np.int64, count=int(lengths.sum()))
    return np.repeat(np.arange(len(lists), dtype=np.int64), lengths), values


def ragged_indices(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The indices of the slices ``[starts[i], starts[i] + lengths[i])``,
    one slice after another: ``a[ragged_indices(s, n)]`` is the
    concatenation of ``a[s[i] : s[i] + n[i]]``.

    >>> ragged_indices(np.array([4, 0, 9]), np.array([2, 0, 3]))
    array([ 4,  5,  9, 10, 11])
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    ends = np.cumsum(lengths)
    within = np.arange(int(ends[-1]) if len(ends) else 0, dtype=np.int64) - np.repeat(ends - lengths, lengths)
    return np.repeat(np.asarray(starts, dtype=np.int64), lengths) + within


def unique_counts(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(keys, return_counts=True)``, sorting with NumPy's stable
    sort: schedules list their keys in runs (step by step), which it merges
    rather than sorts afresh (a ring's 17 M (step, pair) keys on 1,024 GPUs
    in a quarter of the time). Same values and counts.

    >>> unique_counts(np.array([3, 1, 3, 2, 1, 3]))
    (array([1, 2, 3]), array([2, 1, 3]))
    """
    ordered = np.sort(keys, kind="stable")
    if not len(ordered):
        return ordered, np.zeros(0, dtype=np.int64)
    starts = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))
    return ordered[starts], np.diff(np.append(starts, len(ordered)))


def packed_key(columns: Sequence[np.ndarray]) -> np.ndarray | None:
    """One int64 per row of the integer ``columns`` (equal lengths), equal
    exactly when the rows are equal and ordered as the rows are
    (lexicographically, the first column first): each column less its least
    value, in mixed radix. None where the product of the columns' ranges
    reaches 2^63 (the caller then compares the columns themselves).

    >>> packed_key([np.array([1, 0, 1]), np.array([5, 7, 5])])
    array([3, 2, 3])
    """
    if not len(columns[0]):
        return np.zeros(0, dtype=np.int64)
    lows = [int(c.min()) for c in columns]
    spans = [int(c.max()) - low + 1 for c, low in zip(columns, lows, strict=True)]
    if prod(spans) >= 1 << 63:
        return None
    key = np.zeros(len(columns[0]), dtype=np.int64)
    for column, low, span in zip(columns, lows, spans, strict=True):
        key = key * span + (column.astype(np.int64) - low)
    return key


def stable_argsort(keys: np.ndarray) -> np.ndarray:
    """``np.argsort(keys, kind="stable")`` of non-negative integer ``keys``,
    by least-significant-digit radix passes of 16 bits where the keys are
    below 2^32: NumPy sorts 16-bit integers by radix in linear time, and
    two such passes beat its merge sort of 64-bit keys (the rank-pair codes
    of 17 M messages on 1,024 GPUs: about half the time). The same order.

    >>> stable_argsort(np.array([70000, 3, 70000, 1, 3]))
    array([3, 1, 4, 0, 2])
    """
    if not len(keys):
        return np.zeros(0, dtype=np.int64)
    top = int(keys.max())
    if int(keys.min()) < 0 or top >= 1 << 32:
        return np.argsort(keys, kind="stable")
    if top < 1 << 16:
        return np.argsort(keys.astype(np.uint16, copy=False), kind="stable")
    order = np.argsort(keys.astype(np.uint16), kind="stable")  # (the cast keeps the low 16 bits)
    return order[np.argsort((keys >> 16).astype(np.uint16)[order], kind="stable")]


def dense_numbers(keys: np.ndarray, span: int) -> tuple[np.ndarray, np.ndarray]:
    """The distinct values of ``keys`` (non-negative integers below
    ``span``), ascending, and each key's index among them, found in a table
    of ``span`` entries instead of by sorting the keys; the indices are
    16-bit where there are at most 2^16 values (NumPy sorts those by
    radix), else 64-bit.

    >>> dense_numbers(np.array([7, 2, 7, 5]), 10)
    (array([2, 5, 7]), array([2, 0, 2, 1], dtype=uint16))
    """
    seen = np.zeros(span, dtype=bool)
    seen[keys] = True
    values = np.flatnonzero(seen)
    del seen
    number = np.zeros(span, dtype=np.uint16 if len(values) <= 1 << 16 else np.int64)
    number[values] = np.arange(len(values))
    return values, number[keys]


def unique_pair_counts(major: np.ndarray, minor: np.ndarray, minor_span: int) -> tuple[np.ndarray, np.ndarray]:
    """``unique_counts(major * minor_span + minor)`` of non-negative integer
    columns, counted in a table of (major, distinct minor) cells where that
    table is no larger than four cells a row: a schedule's (step, rank pair)
    keys, thousands of steps by thousands of pairs for millions of sends,
    without sorting them. Same values and counts.

    >>> unique_pair_counts(np.array([1, 0, 1, 1]), np.array([5, 7, 5, 2]), 10)
    (array([ 7, 12, 15]), array([1, 1, 2]))
    """
    n = len(major)
    if n and minor_span <= 4 * n:
        values, number = dense_numbers(minor, minor_span)
        steps = int(major.max()) + 1
        if steps * len(values) <= 4 * n:
            cells = major.astype(np.int64) * len(values)
            cells += number
            del number
            totals = np.bincount(cells, minlength=steps * len(values))
            del cells
            used = np.flatnonzero(totals)
            which_major, which_minor = np.divmod(used, len(values))
            return which_major * minor_span + values[which_minor], totals[used]
    return unique_counts(major.astype(np.int64) * minor_span + minor)

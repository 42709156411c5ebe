"""The NumPy idioms of :mod:`simcoll.arrays` give what the plain NumPy
calls they stand in for, on either of their paths."""

import numpy as np
import pytest

from simcoll.arrays import dense_numbers, stable_argsort, unique_counts, unique_pair_counts


@pytest.mark.parametrize("top", [5, 70_000, 1 << 31, 1 << 40])
def test_stable_argsort_is_numpys_stable_argsort(top):
    # one 16-bit radix pass, two, or NumPy's merge sort past 2^32
    keys = np.random.default_rng(top).integers(0, top, 50_000)
    assert np.array_equal(stable_argsort(keys), np.argsort(keys, kind="stable"))
    assert len(stable_argsort(keys[:0])) == 0


@pytest.mark.parametrize(
    "rows, steps, span, distinct",
    [(1000, 10, 64, 30), (100_000, 50, 4096, 500), (10, 100, 10**6, 5), (50_000, 3, 100, 100), (0, 1, 4, 1)],
)
def test_unique_pair_counts_is_unique_counts_of_the_packed_keys(rows, steps, span, distinct):
    # by a table of (major, distinct minor) cells where it is small, else by sorting the keys
    rng = np.random.default_rng(rows)
    major = rng.integers(0, steps, rows)
    minor = rng.integers(0, span, distinct)[rng.integers(0, distinct, rows)]
    values, counts = unique_pair_counts(major, minor, span)
    expected_values, expected_counts = unique_counts(major * span + minor)
    assert np.array_equal(values, expected_values) and values.dtype == expected_values.dtype
    assert np.array_equal(counts, expected_counts) and counts.dtype == expected_counts.dtype


@pytest.mark.parametrize("distinct", [3, 70_000])
def test_dense_numbers_are_the_keys_ranks_among_their_distinct_values(distinct):
    # 16-bit numbers for up to 2^16 values, 64-bit past that
    rng = np.random.default_rng(distinct)
    keys = rng.choice(200_000, distinct, replace=False)[rng.integers(0, distinct, 300_000)]
    values, numbers = dense_numbers(keys, 200_000)
    expected_values, expected_numbers = np.unique(keys, return_inverse=True)
    assert np.array_equal(values, expected_values) and np.array_equal(numbers, expected_numbers)
    assert numbers.dtype == (np.uint16 if distinct <= 1 << 16 else np.int64)

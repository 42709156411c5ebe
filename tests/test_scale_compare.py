"""Issue 15: ``compare(..., jobs=N)`` gives the same table as ``jobs=1``.

Claim: generating and timing algorithms in worker processes changes neither
the rows, their order, nor any time, and bad ``jobs`` values are refused.
"""

from __future__ import annotations

import pandas as pd
import pytest

from simcoll.compare import compare
from simcoll.errors import SimcollError


@pytest.mark.parametrize("method", ["simulate", "analytic"])
def test_parallel_compare_matches_serial(method):
    sizes = [1 << 10, 1 << 20]
    serial, skipped_serial = compare("dgx-a100*2", "allreduce", sizes, method=method)
    parallel, skipped_parallel = compare("dgx-a100*2", "allreduce", sizes, method=method, jobs=2)
    pd.testing.assert_frame_equal(serial, parallel)
    assert skipped_serial == skipped_parallel
    assert "nccl" in set(serial.algorithm)


def test_jobs_must_be_a_positive_integer():
    with pytest.raises(SimcollError, match="jobs must be a positive integer"):
        compare("ring:4", "allgather", [1024], jobs=0)

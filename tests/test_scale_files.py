"""Issue 15: the compact ``.npz`` schedule format.

Claims: ``save_schedule`` / ``load_schedule`` (and ``Algorithm.save`` /
``Algorithm.load``) pick the format by extension and round-trip an Algorithm
exactly, whether its transfers are Transfer objects or a TransferTable, steps
or timed, with or without contiguity groups; a file that is not an Algorithm
``.npz`` is refused with an AlgorithmError naming it; a Program cannot be
saved as ``.npz``; a 2-million-transfer schedule saves and loads in seconds.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from simcoll import generate, make_collective
from simcoll.algorithm import Algorithm, Transfer, TransferTable
from simcoll.errors import AlgorithmError
from simcoll.interop.schedules import load_schedule, load_schedules, save_schedule


def test_npz_round_trips_generated_and_timed_algorithms(tmp_path):
    ring = generate("ring", "dgx1", "allreduce")
    timed = Algorithm(
        "timed",
        make_collective("allgather", 2, 1),
        (
            Transfer(0, 0, 1, "copy", start_s=0.0, end_s=1e-6, group=3),
            Transfer(1, 1, 0, "copy", start_s=0.0, end_s=2e-6),
        ),
        metadata={"note": "groups"},
    )
    for a in (ring, ring.with_changes(transfers=tuple(ring.transfers)), timed):
        path = tmp_path / f"{a.name}.npz"
        save_schedule(a, path)
        back = load_schedule(path)
        assert isinstance(back.transfers, TransferTable)
        assert back == a and back.to_dict() == a.to_dict()
        assert load_schedules(path) == [a]
        a.save(tmp_path / "again.npz")
        assert Algorithm.load(tmp_path / "again.npz") == a
        assert Algorithm.load(path).metadata == a.metadata


def test_json_still_written_for_json_names(tmp_path):
    a = generate("ring", "ring:4", "allgather")
    a.save(tmp_path / "a.json")
    assert (tmp_path / "a.json").read_text().lstrip().startswith("{")
    assert load_schedule(tmp_path / "a.json") == a


def test_npz_errors_name_the_file(tmp_path):
    bad = tmp_path / "bad.npz"
    np.savez(bad, x=np.arange(3))
    with pytest.raises(AlgorithmError, match="bad.npz"):
        load_schedule(bad)
    from simcoll.compiler import lower_algorithm

    program = lower_algorithm(generate("ring", "ring:4", "allgather"))
    with pytest.raises(AlgorithmError, match="holds Algorithms"):
        save_schedule(program, tmp_path / "p.npz")
    assert not (tmp_path / "p.npz").exists()


def test_two_million_transfers_save_and_load_in_seconds(tmp_path):
    p = 1024
    coll = make_collective("allreduce", p, p)
    k = np.repeat(np.arange(2 * (p - 1)), p)
    i = np.tile(np.arange(p), 2 * (p - 1))
    table = TransferTable(chunk=(i - k) % p, src=i, dst=(i + 1) % p, reduce=k < p - 1, step=k)
    a = Algorithm("synthetic", coll, table)
    assert len(a.transfers) > 2_000_000
    path = tmp_path / "big.npz"
    t0 = time.perf_counter()
    save_schedule(a, path)
    back = load_schedule(path)
    elapsed = time.perf_counter() - t0
    assert back.table == a.table
    assert elapsed < 5.0  # issue 15 asks for <= 2 s; slack for a loaded test machine

"""Persistence of a sweep: a directory of immutable Parquet part files.

Layout of a results directory::

    _study.json            the study (its mapping) and the keys of all its points
    part-<n>-<hex>.parquet one completed batch each, never modified once written

Each part is written to a temporary name beginning with a dot and renamed
into place (:func:`simcoll.files.atomic_output`: ``os.replace`` is atomic
within one file system), so a sweep killed at any moment leaves only whole
parts; readers list ``part-*.parquet`` and never see a half-written file.
Resuming reads only the ``key`` column of the parts (``retry_failed``: also
``status``). Parts sort in the order they were written (a zero-padded
sequence number), and where a key has several rows (a failed point re-run)
the latest one counts.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import SweepError
from ..files import atomic_output, read_text, write_atomic

MANIFEST = "_study.json"
PART_GLOB = "part-*.parquet"

#: The columns of every results row, in order (see :func:`simcoll.sweeps.runner.run_batch`).
COLUMNS = {
    "key": pa.string(),
    "study": pa.string(),
    "machine": pa.string(),
    "topology": pa.string(),
    "model": pa.string(),
    "overrides": pa.string(),
    "num_ranks": pa.int64(),
    "collective": pa.string(),
    "algorithm": pa.string(),
    "algorithm_kind": pa.string(),
    "algorithm_spec": pa.string(),
    "chunks": pa.int64(),
    "steps": pa.int64(),
    "rounds": pa.int64(),
    "size_bytes": pa.int64(),
    "mode": pa.string(),
    "contention": pa.bool_(),
    "status": pa.string(),
    "error": pa.string(),
    "time_s": pa.float64(),
    "algbw_GBps": pa.float64(),
    "busbw_GBps": pa.float64(),
    "algbw_bound_GBps": pa.float64(),
    "busbw_bound_GBps": pa.float64(),
    "simcoll_version": pa.string(),
    # a workload study's points (simcoll.sweeps.workloads): time_s is the step time
    "workload": pa.string(),
    "nccl": pa.string(),
    "throughput_per_s": pa.float64(),
    "compute_s": pa.float64(),
    "exposed_communication_s": pa.float64(),
}
SCHEMA = pa.schema(list(COLUMNS.items()))


def part_files(directory: str | Path) -> list[Path]:
    """The complete part files of a results directory, sorted by name."""
    return sorted(Path(directory).glob(PART_GLOB))


def done_keys(directory: str | Path, *, retry_failed: bool = False) -> set[str]:
    """The keys already in ``directory``: every key with a row (reads only
    the ``key`` column), or with ``retry_failed`` only those whose latest row
    did not fail (status other than ``error``), so that failed points run again."""
    if retry_failed:
        return {key for key, status in latest_status(directory).items() if status != "error"}
    keys: set[str] = set()
    for part in part_files(directory):
        keys.update(pq.read_table(part, columns=["key"]).column("key").to_pylist())
    return keys


def latest_status(directory: str | Path) -> dict[str, str]:
    """The status of each key's latest row (parts in the order written: a
    point re-run with ``--retry-failed`` has its newer row in a later part)."""
    status: dict[str, str] = {}
    for part in part_files(directory):
        table = pq.read_table(part, columns=["key", "status"]).to_pydict()
        status.update(zip(table["key"], table["status"], strict=True))
    return status


def write_part(directory: str | Path, rows: Iterable[Mapping[str, Any]]) -> Path:
    """Write ``rows`` as a new part file, atomically; returns its path."""
    directory = Path(directory)
    rows = list(rows)
    table = pa.Table.from_pylist([{c: row.get(c) for c in COLUMNS} for row in rows], schema=SCHEMA)
    number = max((_part_number(p) for p in part_files(directory)), default=-1) + 1
    path = directory / f"part-{number:06d}-{secrets.token_hex(4)}.parquet"
    with atomic_output(path, "wb") as handle:
        pq.write_table(table, handle)
    return path


def _part_number(path: Path) -> int:
    """The sequence number in a part's name (``part-000012-<hex>.parquet``: 12; -1 if none)."""
    field = path.name.split("-")[1] if path.name.count("-") >= 2 else ""
    return int(field) if field.isdigit() else -1


def check_results_directory(directory: str | Path) -> None:
    """Refuse a results directory that is, or lies under, an existing file
    (``-o ring.json``), naming it, rather than let ``mkdir`` fail with
    "[Errno 17] File exists". A directory that does not exist yet is fine:
    the run makes it.

    Raises
    ------
    SweepError
        Naming the file in the way.
    """
    path = Path(directory)
    for place in (path, *path.parents):
        if place.is_dir():
            return
        if place.exists():
            where = "it is" if place == path else f"{place} is"
            raise SweepError(f"{directory}: {where} a file, not a results directory")


def write_manifest(directory: str | Path, study: Mapping[str, Any], keys: list[str]) -> None:
    """Record the study and the keys of all its points (for ``status``), atomically."""
    check_results_directory(directory)
    Path(directory).mkdir(parents=True, exist_ok=True)
    write_atomic(Path(directory) / MANIFEST, json.dumps({"study": study, "keys": keys}, default=str))


def read_manifest(directory: str | Path) -> dict[str, Any]:
    """The manifest written by :func:`write_manifest`."""
    path = Path(directory) / MANIFEST
    check_results_directory(directory)
    if not path.exists():
        raise SweepError(f"{directory}: not a sweep results directory (no {MANIFEST})")
    try:
        return json.loads(read_text(path))
    except json.JSONDecodeError as exc:
        raise SweepError(f"{path}: not valid JSON: {exc}") from None


def load_results(directory: str | Path) -> pd.DataFrame:
    """Every row of a results directory as one tidy DataFrame (one row per
    point, one column per variable; :data:`COLUMNS`), sorted by key.

    A key present in several parts (a failed point re-run with
    ``retry_failed``, or concurrent runs into one directory) appears once,
    with its latest row.
    """
    parts = part_files(directory)
    if not parts:
        if not Path(directory).is_dir():
            raise SweepError(f"{directory}: no such results directory")
        return SCHEMA.empty_table().to_pandas()  # the columns, no rows
    table = pa.concat_tables([pq.read_table(p, schema=SCHEMA) for p in parts])
    nullable = {pa.int64(): pd.Int64Dtype(), pa.bool_(): pd.BooleanDtype()}
    df = table.to_pandas(types_mapper=nullable.get)
    return df.drop_duplicates("key", keep="last").sort_values("key", ignore_index=True)


def sweep_status(directory: str | Path) -> dict[str, int]:
    """``{"done": N, "total": M, "failed": K}``: points of the study with a
    row, all points, and points whose latest row has status ``error``."""
    keys = set(read_manifest(directory)["keys"])
    latest = {key: status for key, status in latest_status(directory).items() if key in keys}
    failed = sum(status == "error" for status in latest.values())
    return {"done": len(latest), "total": len(keys), "failed": failed}

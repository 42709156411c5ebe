"""Persistence of a sweep: a directory of immutable Parquet part files.

Layout of a results directory::

    _study.json            the study (its mapping) and the keys of all its points
    part-<n>-<hex>.parquet one completed batch each, never modified once written

Each part is written to a temporary name beginning with a dot and renamed
into place (:func:`simcoll.files.atomic_output`: ``os.replace`` is atomic
within one file system), so a sweep killed at any moment leaves only whole
parts; readers list ``part-*.parquet`` and never see a half-written file.
Resuming reads only the ``key`` column of the parts.
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

from ..errors import SimcollError
from ..files import atomic_output, read_text, write_atomic

MANIFEST = "_study.json"
PART_GLOB = "part-*.parquet"

#: The columns of every results row, in order (see :func:`simcoll.experiments.runner.run_batch`).
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
}
SCHEMA = pa.schema(list(COLUMNS.items()))


def part_files(directory: str | Path) -> list[Path]:
    """The complete part files of a results directory, sorted by name."""
    return sorted(Path(directory).glob(PART_GLOB))


def done_keys(directory: str | Path) -> set[str]:
    """The keys already in ``directory`` (reads only the ``key`` column)."""
    keys: set[str] = set()
    for part in part_files(directory):
        keys.update(pq.read_table(part, columns=["key"]).column("key").to_pylist())
    return keys


def write_part(directory: str | Path, rows: Iterable[Mapping[str, Any]]) -> Path:
    """Write ``rows`` as a new part file, atomically; returns its path."""
    directory = Path(directory)
    rows = list(rows)
    table = pa.Table.from_pylist([{c: row.get(c) for c in COLUMNS} for row in rows], schema=SCHEMA)
    number = len(part_files(directory))
    path = directory / f"part-{number:06d}-{secrets.token_hex(4)}.parquet"
    with atomic_output(path, "wb") as handle:
        pq.write_table(table, handle)
    return path


def write_manifest(directory: str | Path, study: Mapping[str, Any], keys: list[str]) -> None:
    """Record the study and the keys of all its points (for ``status``), atomically."""
    Path(directory).mkdir(parents=True, exist_ok=True)
    write_atomic(Path(directory) / MANIFEST, json.dumps({"study": study, "keys": keys}, default=str))


def read_manifest(directory: str | Path) -> dict[str, Any]:
    """The manifest written by :func:`write_manifest`."""
    path = Path(directory) / MANIFEST
    if not path.exists():
        raise SimcollError(f"{directory}: not a sweep results directory (no {MANIFEST})")
    try:
        return json.loads(read_text(path))
    except json.JSONDecodeError as exc:
        raise SimcollError(f"{path}: not valid JSON: {exc}") from None


def load_results(directory: str | Path) -> pd.DataFrame:
    """Every row of a results directory as one tidy DataFrame (one row per
    point, one column per variable; :data:`COLUMNS`), sorted by key.

    A key present in several parts (possible only after concurrent runs into
    one directory) appears once.
    """
    parts = part_files(directory)
    if not parts:
        if not Path(directory).is_dir():
            raise SimcollError(f"{directory}: no such results directory")
        return SCHEMA.empty_table().to_pandas()  # the columns, no rows
    table = pa.concat_tables([pq.read_table(p, schema=SCHEMA) for p in parts])
    nullable = {pa.int64(): pd.Int64Dtype(), pa.bool_(): pd.BooleanDtype()}
    df = table.to_pandas(types_mapper=nullable.get)
    return df.drop_duplicates("key").sort_values("key", ignore_index=True)


def sweep_status(directory: str | Path) -> dict[str, int]:
    """``{"done": N, "total": M, "failed": K}``: points of the study with a
    row, all points, and rows whose status is ``error``."""
    keys = set(read_manifest(directory)["keys"])
    done = failed = 0
    seen: set[str] = set()
    for part in part_files(directory):
        table = pq.read_table(part, columns=["key", "status"]).to_pydict()
        for key, status in zip(table["key"], table["status"], strict=True):
            if key in keys and key not in seen:
                seen.add(key)
                done += 1
                failed += status == "error"
    return {"done": done, "total": len(keys), "failed": failed}

"""The ``.npz`` file format of an Algorithm (:meth:`~simcoll.algorithm.Algorithm.save`
to a name ending in ``.npz``): the transfer columns (``t_chunk`` ..., as
:meth:`~simcoll.algorithm.TransferTable.columns` names them) as NumPy arrays
beside a JSON ``header`` holding everything
:meth:`~simcoll.algorithm.Algorithm.to_dict` holds but the transfers; an
:class:`~simcoll.algorithm.OrbitTable`'s representatives, with its shift in the
header and its chunk map as ``o_chunk_map``; switch reductions held as a
:class:`~simcoll.algorithm.SwitchReductionTable` as its columns too
(``r_chunk`` ...), their switches and rank tuples listed in the header.
Uncompressed, so saving and loading millions of transfers takes well under a
second.
"""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import AlgorithmError
from .operations import SwitchReduction
from .orbit import OrbitTable
from .tables import SwitchReductionTable, TransferTable

#: The file extension of the compact column format (:meth:`Algorithm.save`).
NPZ_SUFFIX = ".npz"
#: How an ``.npz`` file (a zip archive) starts.
NPZ_MAGIC = b"PK\x03\x04"
#: A :class:`SwitchReductionTable`'s columns, as an ``.npz`` file holds them (``r_`` and the name).
_REDUCTION_COLUMNS = ("chunk", "switch", "sources", "destinations", "step")


def write_npz_columns(
    handle: Any,
    header: dict[str, Any],
    transfers: TransferTable | OrbitTable,
    reductions: Sequence[SwitchReduction],
) -> None:
    """Write an Algorithm's ``.npz`` form to the binary file object ``handle``
    (:meth:`~simcoll.algorithm.Algorithm.write_npz`): ``header`` is its JSON
    without the transfers, and without ``reductions`` where they are a
    :class:`SwitchReductionTable` (written as columns)."""
    np.savez(handle, **npz_arrays(header, transfers, reductions))


def npz_arrays(
    header: dict[str, Any], transfers: TransferTable | OrbitTable, reductions: Sequence[SwitchReduction]
) -> dict[str, np.ndarray]:
    """The named arrays of the ``.npz`` form (:func:`write_npz_columns`), the JSON header last."""
    as_columns = isinstance(reductions, SwitchReductionTable)
    orbit = transfers if isinstance(transfers, OrbitTable) else None
    table = orbit.representatives if orbit is not None else transfers
    header = {**header, "transfer_columns": sorted(table.columns())}
    arrays = {f"t_{k}": v for k, v in table.columns().items()}
    if orbit is not None:  # the representatives, the rotation's shift in the header and σ beside them
        header["orbit_shift_ranks"] = orbit.shift_ranks
        arrays["o_chunk_map"] = orbit.chunk_map
    if as_columns:  # columns too, its switches and rank tuples listed in the header
        header["switch_reduction_lists"] = {
            "switches": list(reductions.switches),
            "rank_sets": [list(ranks) for ranks in reductions.rank_sets],
        }
        arrays.update({f"r_{k}": getattr(reductions, k) for k in _REDUCTION_COLUMNS})
    arrays["header"] = np.frombuffer(json.dumps(header, sort_keys=True).encode(), dtype=np.uint8)
    return arrays


def read_npz_columns(
    source: str | Path | Any,
) -> tuple[dict[str, Any], TransferTable | OrbitTable, SwitchReductionTable | None]:
    """The parts of an Algorithm's ``.npz`` form (a path, a binary file
    object, or the bytes themselves): its JSON header (``transfers`` empty),
    its transfers, and its switch reductions where they were written as
    columns (else None: the header lists them).

    Raises
    ------
    AlgorithmError
        Naming ``source`` where it cannot be read or is not an Algorithm's ``.npz``.
    """
    where = str(source) if isinstance(source, (str, Path)) else "npz data"
    if isinstance(source, (bytes, bytearray)):
        source = io.BytesIO(source)
    try:
        with np.load(source, allow_pickle=False) as data:
            header = json.loads(bytes(data["header"]).decode())
            if not isinstance(header, dict) or header.get("format") != "simcoll.algorithm":
                raise AlgorithmError(f'{where}: not a simcoll Algorithm (expected "format": "simcoll.algorithm")')
            columns = {k: data[f"t_{k}"] for k in header.pop("transfer_columns")}
            shift = header.pop("orbit_shift_ranks", None)
            chunk_map = data["o_chunk_map"] if shift is not None else None
            lists = header.pop("switch_reduction_lists", None)
            try:
                reductions = (
                    SwitchReductionTable(**{k: data[f"r_{k}"] for k in _REDUCTION_COLUMNS}, **lists)
                    if lists is not None
                    else None
                )
            except AlgorithmError as exc:
                raise AlgorithmError(f"{where}: malformed Algorithm .npz: {exc}") from None
    except AlgorithmError:
        raise
    except OSError as exc:
        raise AlgorithmError(f"{where}: cannot read: {exc.strerror or exc}") from None
    except (KeyError, TypeError, ValueError) as exc:
        raise AlgorithmError(f"{where}: malformed Algorithm .npz: {type(exc).__name__}: {exc}") from None
    header["transfers"] = []
    try:
        table = TransferTable(**columns)
        if shift is not None:
            table = OrbitTable(table, int(header["collective"]["num_ranks"]), shift, chunk_map)
    except (TypeError, KeyError) as exc:
        raise AlgorithmError(f"{where}: malformed Algorithm .npz: {exc}") from None
    except AlgorithmError as exc:
        raise AlgorithmError(f"{where}: malformed Algorithm .npz: {exc}") from None
    return header, table, reductions

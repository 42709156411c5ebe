"""The :class:`Algorithm` type (what an Algorithm is: :mod:`simcoll.algorithm`):
its structural checks, its shape (steps, rounds, batches), its JSON round trip
and ``save``/``load`` (JSON, or the ``.npz`` columns of
:mod:`simcoll.algorithm.npz`), and :func:`messages`, how the transfers of one
batch travel as messages.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from fractions import Fraction
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from ..collectives import Collective, collective_from_dict, collective_to_dict
from ..errors import AlgorithmError, ScheduleTooLargeError
from ..files import atomic_output, parse_json, read_text, write_atomic
from ..limits import MAX_TRANSFERS
from .npz import NPZ_MAGIC, NPZ_SUFFIX, npz_arrays, read_npz_columns, write_npz_columns
from .operations import TRANSFER_OPS, SwitchReduction, Transfer
from .orbit import OrbitTable, layouts_rotate
from .relation import BandwidthConstraint
from .tables import SwitchReductionTable, TransferTable

FORMAT_VERSION = 1
#: The keys of :meth:`Algorithm.to_dict` before ``transfers``, in order.
_DICT_HEAD = ("format", "version", "name", "collective", "topology", "schedule", "rounds_per_step")
#: The element types of a rank tuple an Algorithm accepts (``True`` and NumPy integers equal ranks but are none).
_PLAIN_INT = {int}


def _known_ranks(ranks: tuple, valid: dict[tuple, tuple]) -> bool:
    """Whether a rank tuple equal to ``ranks`` was found valid before (kept
    in ``valid``) and ``ranks`` holds plain ints too: the same tuple object
    (a generator reuses a few), or one whose elements are all ``int``."""
    try:
        seen = valid.get(ranks)
    except TypeError:  # an unhashable element: the full check names it
        return False
    return seen is ranks or (seen is not None and set(map(type, ranks)) == _PLAIN_INT)


def messages(batch: Iterable[Transfer]) -> list[list[Transfer]]:
    """The transfers of one batch grouped into messages: a TACCL contiguity
    group on one rank pair travels as one message (one α), every other
    transfer alone; singles first, then groups in order of appearance."""
    grouped: dict[tuple, list[Transfer]] = {}
    singles = []
    for t in batch:
        if t.group is None:
            singles.append([t])
        else:
            grouped.setdefault((t.group, t.src, t.dst, t.op), []).append(t)
    return singles + list(grouped.values())


def _transfer_from_dict(t: Any, where: str) -> Transfer:
    """One transfer of an Algorithm's JSON, or an AlgorithmError naming it and the field."""
    if not isinstance(t, Mapping):
        raise AlgorithmError(f"{where}: expected an object with chunk, src and dst")
    missing = [k for k in ("chunk", "src", "dst") if k not in t]
    if missing:
        raise AlgorithmError(f"{where}: missing field {missing[0]!r}")
    try:
        return Transfer(
            chunk=t["chunk"],
            src=t["src"],
            dst=t["dst"],
            op=t.get("op", "copy"),
            step=t.get("step"),
            start_s=t.get("start_s"),
            end_s=t.get("end_s"),
            group=t.get("group"),
        )
    except (TypeError, ValueError) as exc:
        raise AlgorithmError(f"{where}: {exc}") from None


@dataclass(frozen=True)
class Algorithm:
    """A verified-or-not schedule; see :mod:`simcoll.algorithm`."""

    name: str
    collective: Collective
    transfers: tuple[Transfer, ...]
    rounds_per_step: tuple[int, ...] = ()
    topology: str | None = None
    bandwidth: tuple[BandwidthConstraint, ...] = ()
    predicted_time_s: float | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    switch_reductions: tuple[SwitchReduction, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.transfers, (TransferTable, OrbitTable)):
            object.__setattr__(self, "transfers", tuple(self.transfers))
        if not isinstance(self.switch_reductions, SwitchReductionTable):
            object.__setattr__(self, "switch_reductions", tuple(self.switch_reductions))
        object.__setattr__(self, "rounds_per_step", tuple(self.rounds_per_step))
        object.__setattr__(self, "bandwidth", tuple(self.bandwidth))
        self._check_structure()
        if self.schedule == "steps" and not self.rounds_per_step:
            reductions = self.switch_reductions
            if isinstance(reductions, SwitchReductionTable):
                last_reduction = [int(reductions.step.max())] if len(reductions) else []
            else:
                last_reduction = [r.step for r in reductions]
            columns = self.transfers.representatives if isinstance(self.transfers, OrbitTable) else self.transfers
            if isinstance(columns, TransferTable):
                last = int(columns.step.max()) if len(columns) else -1
                steps = 1 + max([last, *last_reduction])
            else:
                steps = 1 + max([*(t.step for t in self.transfers), *last_reduction], default=-1)
            object.__setattr__(self, "rounds_per_step", (1,) * steps)

    @cached_property
    def table(self) -> TransferTable:
        """The transfers as NumPy columns (:class:`TransferTable`): the
        Algorithm's own table when it was built from one, else built once
        (an :class:`OrbitTable`'s images: refused past
        :data:`~simcoll.limits.MAX_TRANSFERS`, see :attr:`orbit`)."""
        if isinstance(self.transfers, TransferTable):
            return self.transfers
        if isinstance(self.transfers, OrbitTable):
            try:
                return self.transfers.expand()
            except ScheduleTooLargeError as exc:
                raise ScheduleTooLargeError(f"{self.name}: {exc}") from None
        return TransferTable.from_transfers(self.transfers)

    def _check_table(self, table: TransferTable) -> set[str]:
        """:meth:`_check_structure` for a :class:`TransferTable`, vectorised;
        the first bad row is reported as the object path would."""
        p, g = self.collective.num_ranks, self.collective.num_chunks
        n = len(table)
        if not n:
            return set()
        bad = np.zeros(n, dtype=bool)
        for column, hi in ((table.chunk, g), (table.src, p), (table.dst, p)):
            bad |= (column < 0) | (column >= hi)
        bad |= table.src == table.dst
        if table.step is not None:
            bad |= table.step < 0
            if self.rounds_per_step:
                bad |= table.step >= len(self.rounds_per_step)
        else:
            bad |= ~(table.end_s > table.start_s) | ~(table.start_s >= 0)
        if bad.any():
            self._check_transfer(int(np.flatnonzero(bad)[0]), table[int(np.flatnonzero(bad)[0])])
        return {"timed" if table.timed else "steps"}

    def _check_transfer(self, i: int, t: Transfer) -> str:
        """Structural checks of transfer ``i``; its schedule kind."""
        p, g = self.collective.num_ranks, self.collective.num_chunks
        where = f"{self.name}: transfer {i} ({t.chunk}, {t.src}->{t.dst})"
        for name, value, hi in (("chunk", t.chunk, g), ("src", t.src, p), ("dst", t.dst, p)):
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < hi:
                raise AlgorithmError(f"{where}: {name} {value!r} out of range 0..{hi - 1}")
        if t.src == t.dst:
            raise AlgorithmError(f"{where}: source and destination are the same rank")
        if t.op not in TRANSFER_OPS:
            raise AlgorithmError(f"{where}: op {t.op!r} is not one of {TRANSFER_OPS}")
        kind = None
        if t.step is not None:
            if not isinstance(t.step, int) or t.step < 0:
                raise AlgorithmError(f"{where}: step must be a non-negative integer, got {t.step!r}")
            if self.rounds_per_step and t.step >= len(self.rounds_per_step):
                raise AlgorithmError(f"{where}: step {t.step} but rounds_per_step lists {len(self.rounds_per_step)}")
            kind = "steps"
        if t.start_s is not None or t.end_s is not None:
            if t.start_s is None or t.end_s is None or t.end_s <= t.start_s or t.start_s < 0:
                raise AlgorithmError(f"{where}: timed transfers need 0 <= start_s < end_s")
            if kind is not None:
                raise AlgorithmError(f"{self.name}: mixes step-annotated and timed transfers")
            kind = "timed"
        if kind is None:
            raise AlgorithmError(f"{where}: has neither a step nor a start time")
        return kind

    def _check_structure(self) -> None:
        p = self.collective.num_ranks
        kinds = set()
        if isinstance(self.transfers, TransferTable):
            kinds |= self._check_table(self.transfers)
        elif isinstance(self.transfers, OrbitTable):
            kinds |= self._check_orbit(self.transfers)
        for i, t in enumerate(() if isinstance(self.transfers, (TransferTable, OrbitTable)) else self.transfers):
            kinds.add(self._check_transfer(i, t))
        valid_ranks: dict[tuple, tuple] = {}  # rank tuples checked: a schedule reuses a few thousand
        if isinstance(self.switch_reductions, SwitchReductionTable):
            kinds |= self._check_reduction_table(self.switch_reductions)
        else:
            for i, r in enumerate(self.switch_reductions):
                kinds.add(self._check_switch_reduction(i, r, valid_ranks))
        if len(kinds) > 1:
            raise AlgorithmError(f"{self.name}: mixes step-annotated and timed transfers")
        if any(not isinstance(r, int) or r < 1 for r in self.rounds_per_step):
            raise AlgorithmError(f"{self.name}: rounds_per_step must be positive integers, got {self.rounds_per_step}")
        for b in self.bandwidth:
            if b.chunks_per_round < 0 or any(not (0 <= a < p and 0 <= z < p) for a, z in b.links):
                raise AlgorithmError(f"{self.name}: bandwidth constraint {b.label or sorted(b.links)} is out of range")

    def _check_orbit(self, orbit: OrbitTable) -> set[str]:
        """:meth:`_check_structure` for an :class:`OrbitTable`: its
        representatives as a table, its rotation against the collective
        (the rotation must map the pre- and postcondition onto themselves,
        so that the images of a correct run are correct too), and no
        in-switch reductions beside it."""
        coll = self.collective
        if orbit.num_ranks != coll.num_ranks or len(orbit.chunk_map) != coll.num_chunks:
            raise AlgorithmError(
                f"{self.name}: its orbit table is for {orbit.num_ranks} ranks and {len(orbit.chunk_map)} chunks, "
                f"its {coll.name} has {coll.num_ranks} and {coll.num_chunks}"
            )
        if self.switch_reductions:
            raise AlgorithmError(f"{self.name}: an orbit table takes no in-switch reductions")
        for which in ("input_layout", "output_layout"):
            if not layouts_rotate(getattr(coll, which), orbit.shift_ranks, orbit.chunk_map):
                raise AlgorithmError(
                    f"{self.name}: shifting the ranks by {orbit.shift_ranks} with its chunk_map does not map the "
                    f"{coll.name}'s {which.replace('_', ' ')} onto itself: its images would not run the same collective"
                )
        return self._check_table(orbit.representatives) or {"steps"}

    def _check_reduction_table(self, table: SwitchReductionTable) -> set[str]:
        """:meth:`_check_structure` for a :class:`SwitchReductionTable`:
        each listed switch and rank tuple once, the columns vectorised; the
        first bad reduction is reported as the object path would."""
        if not len(table):
            return set()
        p, g = self.collective.num_ranks, self.collective.num_chunks
        bad = (table.chunk < 0) | (table.chunk >= g) | (table.step < 0)
        if self.rounds_per_step:
            bad |= table.step >= len(self.rounds_per_step)
        bad_switch = np.array([not (type(name) is str and name) for name in table.switches], dtype=bool)
        bad_set = np.array(
            [not ranks or len(set(ranks)) != len(ranks) or any(type(x) is not int or not 0 <= x < p for x in ranks)
             for ranks in table.rank_sets], dtype=bool,
        )  # fmt: skip
        bad |= bad_switch[table.switch] | bad_set[table.sources] | bad_set[table.destinations]
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            self._check_switch_reduction(i, table[i], {})
            raise AlgorithmError(f"{self.name}: switch_reductions[{i}] is malformed: {table[i]}")  # (not reached)
        return {"steps"}

    def _check_switch_reduction(self, i: int, r: SwitchReduction, valid_ranks: dict[tuple, tuple]) -> str:
        """Structural checks of switch reduction ``i``; its schedule kind.
        ``valid_ranks`` holds the rank tuples found valid so far
        (:func:`_known_ranks`) and gains this one's."""
        p, g = self.collective.num_ranks, self.collective.num_chunks
        chunk, step, rounds = r.chunk, r.step, self.rounds_per_step
        if (  # the common case, a million times on 1,024 GPUs: plain ints (not bool) in range, known ranks
            type(chunk) is int
            and 0 <= chunk < g
            and type(step) is int
            and 0 <= step
            and (not rounds or step < len(rounds))
            and r.start_s is None
            and r.end_s is None
            and type(r.switch) is str
            and r.switch
            and _known_ranks(r.sources, valid_ranks)
            and _known_ranks(r.destinations, valid_ranks)
        ):
            return "steps"
        where = f"{self.name}: switch_reductions[{i}] (chunk {r.chunk} in {r.switch!r})"
        if not isinstance(r.chunk, int) or isinstance(r.chunk, bool) or not 0 <= r.chunk < g:
            raise AlgorithmError(f"{where}: chunk {r.chunk!r} out of range 0..{g - 1}")
        if not isinstance(r.switch, str) or not r.switch:
            raise AlgorithmError(f"{where}: switch must be a component name, got {r.switch!r}")
        for name, ranks in (("sources", r.sources), ("destinations", r.destinations)):
            if _known_ranks(ranks, valid_ranks):
                continue
            if not ranks:
                raise AlgorithmError(f"{where}: {name} is empty")
            # plain ints only: True or a NumPy integer would compare equal to a valid rank
            bad = [x for x in ranks if not isinstance(x, int) or isinstance(x, bool) or not 0 <= x < p]
            if bad:
                raise AlgorithmError(f"{where}: {name}: rank {bad[0]!r} out of range 0..{p - 1}")
            if len(set(ranks)) != len(ranks):
                raise AlgorithmError(f"{where}: {name} names a rank twice: {list(ranks)}")
            valid_ranks.setdefault(ranks, ranks)
        if r.step is not None:
            if not isinstance(r.step, int) or isinstance(r.step, bool) or r.step < 0:
                raise AlgorithmError(f"{where}: step must be a non-negative integer, got {r.step!r}")
            if self.rounds_per_step and r.step >= len(self.rounds_per_step):
                raise AlgorithmError(f"{where}: step {r.step} but rounds_per_step lists {len(self.rounds_per_step)}")
            if r.start_s is not None or r.end_s is not None:
                raise AlgorithmError(f"{where}: has both a step and a start time")
            return "steps"
        if r.start_s is None or r.end_s is None or not 0 <= r.start_s < r.end_s:
            raise AlgorithmError(f"{where}: needs a step, or times with 0 <= start_s < end_s")
        return "timed"

    def require_point_to_point(self, what: str) -> None:
        """Raise :class:`AlgorithmError` naming ``what`` (a consumer, e.g. "MSCCL
        XML export") when the Algorithm has in-switch reductions, which that
        consumer cannot represent."""
        if self.switch_reductions:
            first = self.switch_reductions[0]
            raise AlgorithmError(
                f"{self.name}: {what} does not support in-switch reduction/multicast "
                f"({len(self.switch_reductions)} switch reductions, first: {first.describe()}); "
                "simulate it in Algorithm mode instead"
            )

    # -- shape --------------------------------------------------------------
    @property
    def schedule(self) -> str:
        """``"steps"`` (k-synchronous) or ``"timed"`` (TACCL-style)."""
        if isinstance(self.transfers, OrbitTable):
            return "steps"
        if isinstance(self.transfers, TransferTable) and len(self.transfers):
            return "timed" if self.transfers.timed else "steps"
        first = self.transfers[0] if self.transfers else (self.switch_reductions or (None,))[0]
        if first is not None and first.step is None:
            return "timed"
        return "steps"

    @property
    def num_ranks(self) -> int:
        return self.collective.num_ranks

    @property
    def orbit(self) -> OrbitTable | None:
        """The transfers as an :class:`OrbitTable` (representatives and a
        node rotation) where the generator built them so, else None."""
        return self.transfers if isinstance(self.transfers, OrbitTable) else None

    @property
    def chunks(self) -> int:
        """C: chunks per rank's contribution (the collective's chunk factor)."""
        return self.collective.chunk_factor

    @property
    def steps(self) -> int:
        """S: number of synchronous steps."""
        return len(self.rounds_per_step)

    @property
    def rounds(self) -> int:
        """R: total rounds."""
        return sum(self.rounds_per_step)

    @property
    def bandwidth_cost(self) -> Fraction:
        """R / C, SCCL's bandwidth cost."""
        return Fraction(self.rounds, self.chunks)

    def transfers_in_step(self, step: int) -> list[Transfer]:
        return list(self._by_step.get(step, ()))

    @cached_property
    def _by_step(self) -> dict[int | None, tuple[Transfer, ...]]:
        by_step: dict[int | None, list[Transfer]] = {}
        for t in self.transfers:
            by_step.setdefault(t.step, []).append(t)
        return {s: tuple(ts) for s, ts in by_step.items()}

    def batches(self) -> list[list[Transfer]]:
        """The transfers in schedule order, cut into batches: one per step, or
        one per start time for timed schedules. A batch reads the state before
        any of its own updates (SCCL §3.3); consumers (analytic cost,
        simulator, compiler) all read schedules this way."""
        key = (lambda t: t.step) if self.schedule == "steps" else (lambda t: t.start_s)
        out: list[list[Transfer]] = []
        for t in sorted(self.transfers, key=key):
            if out and key(out[-1][0]) == key(t):
                out[-1].append(t)
            else:
                out.append([t])
        return out

    def schedule_batches(self) -> list[tuple[list[Transfer], list[SwitchReduction]]]:
        """Like :meth:`batches`, with the in-switch reductions: per batch (one
        step, or one start time, in schedule order) its transfers and its switch
        reductions; both read the state before any update of the batch."""
        timed = self.schedule != "steps"
        by_key: dict[Any, tuple[list[Transfer], list[SwitchReduction]]] = {}
        for t in self.transfers:
            by_key.setdefault(t.start_s if timed else t.step, ([], []))[0].append(t)
        for r in self.switch_reductions:
            by_key.setdefault(r.start_s if timed else r.step, ([], []))[1].append(r)
        return [by_key[k] for k in sorted(by_key)]

    def with_changes(self, **changes: Any) -> Algorithm:
        return Algorithm(**{**{f.name: getattr(self, f.name) for f in fields(self)}, **changes})

    def relabelled(self, name: str | None = None, metadata: Mapping[str, Any] | None = None) -> Algorithm:
        """This schedule under another ``name`` and/or ``metadata``. The
        transfers are the same objects, already checked when this Algorithm
        was built, so they are not checked again (a million switch
        reductions or ten million transfers take seconds to check).

        >>> from simcoll import make_collective
        >>> a = Algorithm("mine", make_collective("allgather", 2), (Transfer(0, 0, 1, step=0), Transfer(1, 1, 0, step=0)))
        >>> b = a.relabelled("theirs", {"note": "renamed"})
        >>> (b.name, b.metadata["note"], b.transfers is a.transfers, b.rounds_per_step)
        ('theirs', 'renamed', True, (1,))
        """
        clone = object.__new__(Algorithm)
        state = {f.name: getattr(self, f.name) for f in fields(self)}
        if name is not None:
            state["name"] = name
        if metadata is not None:
            state["metadata"] = metadata
        if "table" in self.__dict__:  # the cached columns describe the same transfers
            state["table"] = self.__dict__["table"]
        clone.__dict__.update(state)
        return clone

    # -- JSON -----------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        orbit = self.orbit
        if orbit is not None and len(orbit) > MAX_TRANSFERS:
            raise ScheduleTooLargeError(
                f"{self.name}: JSON lists each of its {len(orbit):,} transfers, more than simcoll lists one by one "
                "(simcoll.limits.MAX_TRANSFERS): save it as .npz, which keeps its "
                f"{len(orbit.representatives):,} representatives and their rotation"
            )
        transfers = []
        if (
            isinstance(self.transfers, (TransferTable, OrbitTable))
            and self.table.group is None
            and not self.table.timed
        ):
            t = self.table
            ops = ["reduce" if r else "copy" for r in t.reduce.tolist()]
            rows = zip(t.chunk.tolist(), t.src.tolist(), t.dst.tolist(), ops, t.step.tolist(), strict=True)
            transfers = [{"chunk": c, "src": a, "dst": b, "op": o, "step": k} for c, a, b, o, k in rows]
        for t in () if transfers else self.transfers:
            entry: dict[str, Any] = {"chunk": t.chunk, "src": t.src, "dst": t.dst, "op": t.op}
            for key in ("step", "start_s", "end_s", "group"):
                if getattr(t, key) is not None:
                    entry[key] = getattr(t, key)
            transfers.append(entry)
        out = self._header_dict()
        out["transfers"] = transfers
        return {k: out[k] for k in (*_DICT_HEAD, "transfers", *out) if k in out}

    def _header_dict(self, with_reductions: bool = True) -> dict[str, Any]:
        """:meth:`to_dict` without the transfers (and without the switch
        reductions unless ``with_reductions``)."""
        out: dict[str, Any] = {
            "format": "simcoll.algorithm",
            "version": FORMAT_VERSION,
            "name": self.name,
            "collective": collective_to_dict(self.collective),
            "topology": self.topology,
            "schedule": self.schedule,
            "rounds_per_step": list(self.rounds_per_step),
        }
        if self.bandwidth:
            out["bandwidth"] = [
                {"links": sorted([a, b] for a, b in c.links), "chunks_per_round": c.chunks_per_round, "label": c.label}
                for c in self.bandwidth
            ]
        if self.predicted_time_s is not None:
            out["predicted_time_s"] = self.predicted_time_s
        if self.metadata:
            out["metadata"] = dict(self.metadata)
        if self.switch_reductions and with_reductions:
            out["switch_reductions"] = [
                {
                    "chunk": r.chunk,
                    "switch": r.switch,
                    "sources": list(r.sources),
                    "destinations": list(r.destinations),
                    **{key: getattr(r, key) for key in ("step", "start_s", "end_s") if getattr(r, key) is not None},
                }
                for r in self.switch_reductions
            ]
        return out

    @classmethod
    def from_dict(cls, data: Any, where: str = "Algorithm JSON") -> Algorithm:
        """The Algorithm of a dict as :meth:`to_dict` writes it; errors name
        ``where`` (a file name) and the transfer index and field at fault."""
        if not isinstance(data, Mapping) or data.get("format") != "simcoll.algorithm":
            raise AlgorithmError(f'{where}: not a simcoll Algorithm (expected "format": "simcoll.algorithm")')
        raw_transfers = data.get("transfers")
        if not isinstance(raw_transfers, list):
            raise AlgorithmError(f"{where}: field 'transfers' must be a list")
        transfers = tuple(_transfer_from_dict(t, f"{where}: transfers[{i}]") for i, t in enumerate(raw_transfers))
        try:
            bandwidth = tuple(
                BandwidthConstraint(frozenset((a, b) for a, b in c["links"]), c["chunks_per_round"], c.get("label", ""))
                for c in data.get("bandwidth", [])
            )
            return cls(
                name=data["name"],
                collective=collective_from_dict(data["collective"]),
                transfers=transfers,
                rounds_per_step=tuple(data.get("rounds_per_step", ())),
                topology=data.get("topology"),
                bandwidth=bandwidth,
                predicted_time_s=data.get("predicted_time_s"),
                metadata=data.get("metadata", {}),
                switch_reductions=tuple(
                    SwitchReduction(
                        chunk=r["chunk"],
                        switch=r["switch"],
                        sources=tuple(r["sources"]),
                        destinations=tuple(r["destinations"]),
                        step=r.get("step"),
                        start_s=r.get("start_s"),
                        end_s=r.get("end_s"),
                    )
                    for r in data.get("switch_reductions", [])
                ),
            )
        except KeyError as exc:
            raise AlgorithmError(f"{where}: missing field {exc.args[0]!r}") from None
        except (TypeError, ValueError) as exc:
            raise AlgorithmError(f"{where}: malformed Algorithm JSON: {exc}") from None

    def to_json(self, indent: int | None = 1) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_json(cls, text: str) -> Algorithm:
        return cls.from_dict(parse_json(text, error=AlgorithmError))

    def save(self, path: str | Path) -> None:
        """Write the Algorithm to ``path``: the compact ``.npz`` columns
        (:meth:`to_npz_bytes`) when the name ends in ``.npz``, JSON otherwise.
        Atomic (:func:`simcoll.files.write_atomic`)."""
        if str(path).lower().endswith(NPZ_SUFFIX):
            with atomic_output(path, "wb", error=AlgorithmError) as handle:
                self.write_npz(handle)
        else:
            warn_json_size(self, path)
            write_atomic(path, self.to_json(), error=AlgorithmError)

    @classmethod
    def load(cls, path: str | Path) -> Algorithm:
        """Read an Algorithm written by :meth:`save` (``.npz`` or JSON, by content)."""
        try:
            with open(path, "rb") as handle:
                head = handle.read(len(NPZ_MAGIC))
        except OSError as exc:
            raise AlgorithmError(f"{path}: cannot read: {exc.strerror or exc}") from None
        if head == NPZ_MAGIC:
            return cls.from_npz(path)
        return cls.from_json(read_text(path, error=AlgorithmError))

    # -- compact columns (.npz) -------------------------------------------------------
    def write_npz(self, handle: Any) -> None:
        """Write the ``.npz`` form to a binary file object: the transfer
        columns (:meth:`TransferTable.columns`) as NumPy arrays beside a JSON
        header (``header``: everything :meth:`to_dict` holds but the
        transfers); switch reductions held as a :class:`SwitchReductionTable`
        as its columns too (``r_chunk`` ...; the header lists its switches and
        rank tuples). Uncompressed, so saving and loading millions of transfers
        takes well under a second."""
        reductions = self.switch_reductions
        header = self._header_dict(with_reductions=not isinstance(reductions, SwitchReductionTable))
        write_npz_columns(handle, header, self.orbit if self.orbit is not None else self.table, reductions)

    def content_digest(self) -> str:
        """SHA-256 of what the schedule is, its metadata aside: collective,
        transfers, rounds and reductions as its ``.npz`` form holds them, so
        that a check of it (:func:`simcoll.verify.check_record`) can be
        recognised later without repeating it."""
        import hashlib

        reductions = self.switch_reductions
        header = self._header_dict(with_reductions=not isinstance(reductions, SwitchReductionTable))
        header.pop("metadata", None)
        digest = hashlib.sha256()
        for name, array in npz_arrays(header, self.orbit if self.orbit is not None else self.table, reductions).items():
            digest.update(name.encode())
            digest.update(str(array.dtype).encode())
            digest.update(np.ascontiguousarray(array).tobytes())
        return digest.hexdigest()

    def to_npz_bytes(self) -> bytes:
        """The ``.npz`` form (:meth:`write_npz`) as bytes."""
        buffer = io.BytesIO()
        self.write_npz(buffer)
        return buffer.getvalue()

    @classmethod
    def from_npz(cls, source: str | Path | Any) -> Algorithm:
        """An Algorithm from the ``.npz`` form (:meth:`write_npz`): a path,
        a binary file object, or the bytes themselves."""
        header, table, reductions = read_npz_columns(source)
        base = cls.from_dict(header)
        if reductions is not None:
            return base.with_changes(transfers=table, switch_reductions=reductions)
        return base.with_changes(transfers=table)


def steps_from_lists(
    name: str, collective: Collective, steps: Iterable[Iterable[tuple[int, int, int, str]]], **kwargs: Any
) -> Algorithm:
    """Build a step-scheduled Algorithm from per-step lists of
    ``(chunk, src, dst, op)`` tuples; one round per step unless
    ``rounds_per_step`` is given."""
    transfers = [Transfer(chunk=c, src=s, dst=d, op=op, step=i) for i, step in enumerate(steps) for c, s, d, op in step]
    return Algorithm(name=name, collective=collective, transfers=tuple(transfers), **kwargs)


def protocol_of(algorithm: Algorithm, protocol: str | None = None) -> str | None:
    """The protocol ``algorithm`` runs with: ``protocol`` when given, else its
    ``metadata["protocol"]``, else None (the cost model's default): the rule
    the simulator's engines and the analytic cost share.

    >>> from simcoll.collectives import make_collective
    >>> a = Algorithm("a", make_collective("allgather", 2), (), metadata={"protocol": "LL"})
    >>> protocol_of(a), protocol_of(a, "Simple")
    ('LL', 'Simple')
    """
    if protocol is not None:
        return protocol
    named = (algorithm.metadata or {}).get("protocol")
    return None if named is None else str(named)


def warn_json_size(algorithm: Algorithm, path: str | Path) -> None:
    """Warn where JSON would be a trap: an Algorithm past
    :data:`~simcoll.limits.JSON_ADVISED_TRANSFERS` transfers, whose ``.npz``
    is a fraction of the size and written and read many times faster."""
    import warnings

    from ..limits import JSON_ADVISED_TRANSFERS

    count = len(algorithm.table.src)
    if count > JSON_ADVISED_TRANSFERS:
        warnings.warn(
            f"{path}: {count:,} transfers as JSON is large and slow to write and read; "
            f"{Path(path).with_suffix(NPZ_SUFFIX).name} holds the same in a fraction of the space and time "
            "(simcoll reads both)",
            stacklevel=3,
        )

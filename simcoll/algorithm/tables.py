"""The NumPy column forms of an Algorithm's operations:
:class:`TransferTable` (transfers) and :class:`SwitchReductionTable`
(step-scheduled switch reductions). Large generators emit them and the hot
paths (verifier, simulator planning, ``.npz`` files) read their columns; both
read as tuples of the objects, so code written for a tuple reads them
unchanged."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from ..errors import AlgorithmError
from ..limits import charge_transfers, uncharged
from .operations import SwitchReduction, Transfer


def _row_at(table: Sequence, index: Any, row: Callable[[int], Any], noun: str) -> Any:
    """A column table's ``table[index]``: the object of row ``index`` (built
    by ``row``), or a tuple of them for a slice, as a tuple would give."""
    if isinstance(index, slice):
        return tuple(row(i) for i in range(*index.indices(len(table))))
    i = int(index)
    if i < 0:
        i += len(table)
    if not 0 <= i < len(table):
        raise IndexError(f"{noun} index {index} out of range ({len(table)} {noun.split()[-1]}s)")
    return row(i)


class TransferTable(Sequence):
    """Transfers as NumPy columns: what large generators emit and hot paths
    (verifier, simulator planning, ``.npz`` files) read without building one
    :class:`Transfer` object per chunk.

    A sequence of :class:`Transfer`: indexing and iteration build the objects
    lazily (nothing is cached), so code written for a tuple of transfers reads
    a table unchanged; it compares equal to a tuple holding the same
    transfers in the same order.

    Parameters
    ----------
    chunk, src, dst : array_like of int
        One entry per transfer.
    reduce : array_like of bool
        True where the op is ``"reduce"``, False for ``"copy"``.
    step : array_like of int, optional
        The step of every transfer (step schedules).
    start_s, end_s : array_like of float, optional
        The times of every transfer (timed schedules).
    group : array_like of int, optional
        Contiguity group per transfer; ``-1`` (or a False ``has_group``) for none.
    has_group : array_like of bool, optional
        Where ``group`` holds a group (default: where it is not negative).
    """

    __slots__ = ("chunk", "src", "dst", "reduce", "step", "start_s", "end_s", "group", "has_group")

    def __init__(
        self,
        chunk: Any,
        src: Any,
        dst: Any,
        reduce: Any,
        step: Any = None,
        start_s: Any = None,
        end_s: Any = None,
        group: Any = None,
        has_group: Any = None,
    ) -> None:
        self.chunk = np.ascontiguousarray(chunk, dtype=np.int64)
        charge_transfers(len(self.chunk))  # inside a generator: refused past simcoll.limits.MAX_TRANSFERS
        self.src = np.ascontiguousarray(src, dtype=np.int64)
        self.dst = np.ascontiguousarray(dst, dtype=np.int64)
        self.reduce = np.ascontiguousarray(reduce, dtype=bool)
        self.step = None if step is None else np.ascontiguousarray(step, dtype=np.int64)
        self.start_s = None if start_s is None else np.ascontiguousarray(start_s, dtype=np.float64)
        self.end_s = None if end_s is None else np.ascontiguousarray(end_s, dtype=np.float64)
        if group is not None:
            group = np.ascontiguousarray(group, dtype=np.int64)
            has_group = group >= 0 if has_group is None else np.ascontiguousarray(has_group, dtype=bool)
            if not has_group.any():
                group = has_group = None
        self.group = group
        self.has_group = None if group is None else has_group
        n = len(self.chunk)
        for name in self.__slots__:
            column = getattr(self, name)
            if column is not None and (column.ndim != 1 or len(column) != n):
                raise AlgorithmError(f"transfer table: column {name} has shape {column.shape}, expected ({n},)")
        if (self.step is None) == (self.start_s is None) and n:
            raise AlgorithmError("transfer table: give either steps or start times (not both, not neither)")
        if (self.start_s is None) != (self.end_s is None):
            raise AlgorithmError("transfer table: timed transfers need both start_s and end_s")

    @classmethod
    def from_transfers(cls, transfers: Iterable[Transfer]) -> TransferTable:
        """The columns of transfers that are all step-scheduled or all timed."""
        transfers = list(transfers)
        timed = bool(transfers) and transfers[0].step is None
        groups = [t.group for t in transfers]
        has = [g is not None for g in groups]
        return cls(
            chunk=[t.chunk for t in transfers],
            src=[t.src for t in transfers],
            dst=[t.dst for t in transfers],
            reduce=[t.op == "reduce" for t in transfers],
            step=None if timed else [t.step for t in transfers],
            start_s=[t.start_s for t in transfers] if timed else None,
            end_s=[t.end_s for t in transfers] if timed else None,
            group=[g if g is not None else -1 for g in groups] if any(has) else None,
            has_group=has if any(has) else None,
        )

    def rank_pairs(self, num_ranks: int) -> np.ndarray:
        """The rank pairs the transfers use, each once, as ``src × num_ranks
        + dst``, ascending (counted in a table of every pair where that has
        at most 2^26 cells: faster than sorting millions of transfers).

        >>> TransferTable([0, 1, 0], [0, 1, 0], [1, 0, 1], [False] * 3, step=[0, 0, 1]).rank_pairs(2)
        array([1, 2])
        """
        keys = self.src * num_ranks + self.dst
        if num_ranks * num_ranks <= 1 << 26:
            return np.flatnonzero(np.bincount(keys, minlength=num_ranks * num_ranks))
        return np.unique(keys)

    @classmethod
    def concatenate(cls, tables: Sequence[TransferTable]) -> TransferTable:
        """One table: the rows of ``tables`` in order (all step-scheduled or all timed)."""
        if not tables:
            return cls([], [], [], [], step=[])

        def cat(name: str) -> np.ndarray | None:
            columns = [getattr(t, name) for t in tables]
            return None if any(c is None for c in columns) else np.concatenate(columns)

        groups = any(t.group is not None for t in tables)
        with uncharged():  # the rows were counted when their tables were built
            return cls(
                chunk=cat("chunk"),
                src=cat("src"),
                dst=cat("dst"),
                reduce=cat("reduce"),
                step=cat("step"),
                start_s=cat("start_s"),
                end_s=cat("end_s"),
                group=np.concatenate([t.group if t.group is not None else np.full(len(t), -1) for t in tables])
                if groups
                else None,
                has_group=np.concatenate(
                    [t.has_group if t.has_group is not None else np.zeros(len(t), bool) for t in tables]
                )
                if groups
                else None,
            )

    def take(self, rows: Any) -> TransferTable:
        """The table of ``rows`` (indices or a boolean mask), in that order."""
        with uncharged():
            return TransferTable(**{name: column[rows] for name, column in self.columns().items()})

    def with_steps(self, step: Any) -> TransferTable:
        """The same transfers at the steps ``step`` (one per transfer)."""
        with uncharged():
            return TransferTable(**{**self.columns(), "step": step, "start_s": None, "end_s": None})

    def columns(self) -> dict[str, np.ndarray]:
        """The columns present, by name (the ``.npz`` layout)."""
        return {name: getattr(self, name) for name in self.__slots__ if getattr(self, name) is not None}

    @property
    def timed(self) -> bool:
        return self.step is None and len(self) > 0

    @property
    def ops(self) -> np.ndarray:
        """0 for copy, 1 for reduce."""
        return self.reduce.astype(np.int8)

    def __len__(self) -> int:
        return len(self.chunk)

    def _transfer(self, i: int) -> Transfer:
        return Transfer(
            int(self.chunk[i]),
            int(self.src[i]),
            int(self.dst[i]),
            "reduce" if self.reduce[i] else "copy",
            None if self.step is None else int(self.step[i]),
            None if self.start_s is None else float(self.start_s[i]),
            None if self.end_s is None else float(self.end_s[i]),
            int(self.group[i]) if self.group is not None and self.has_group[i] else None,
        )

    def __getitem__(self, index):  # type: ignore[override]
        return _row_at(self, index, self._transfer, "transfer")

    def __iter__(self) -> Iterator[Transfer]:
        n = len(self)
        ops = ["reduce" if r else "copy" for r in self.reduce.tolist()]
        none = [None] * n
        steps = none if self.step is None else self.step.tolist()
        starts = none if self.start_s is None else self.start_s.tolist()
        ends = none if self.end_s is None else self.end_s.tolist()
        if self.group is None:
            groups = none
        else:
            groups = [g if h else None for g, h in zip(self.group.tolist(), self.has_group.tolist(), strict=True)]
        columns = (self.chunk.tolist(), self.src.tolist(), self.dst.tolist(), ops, steps, starts, ends, groups)
        for row in zip(*columns, strict=True):
            yield Transfer(*row)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, TransferTable):
            mine, theirs = self.columns(), other.columns()
            return mine.keys() == theirs.keys() and all(np.array_equal(mine[k], theirs[k]) for k in mine)
        if isinstance(other, (tuple, list)):
            return len(other) == len(self) and tuple(self) == tuple(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __add__(self, other: Any) -> tuple[Transfer, ...]:
        """Concatenation as a tuple of transfers (what a tuple would give)."""
        if isinstance(other, (tuple, list, TransferTable)):
            return (*self, *other)
        return NotImplemented

    def __radd__(self, other: Any) -> tuple[Transfer, ...]:
        if isinstance(other, (tuple, list)):
            return (*other, *self)
        return NotImplemented

    def __repr__(self) -> str:
        kind = "timed" if self.timed else "steps"
        return f"TransferTable({len(self)} transfers, {kind})"


class SwitchReductionTable(Sequence):
    """Step-scheduled switch reductions as NumPy columns: what the in-switch
    generators emit on large machines (a million reductions on 1,024 GPUs)
    and the simulator's planning reads without one :class:`SwitchReduction`
    object each. Switches and rank tuples are listed once (``switches``,
    ``rank_sets``) and each reduction names them by index, as generators
    reuse a few of each.

    A sequence of :class:`SwitchReduction`, built lazily (nothing is
    cached); it compares equal to a tuple holding the same reductions in the
    same order.

    Parameters
    ----------
    chunk, step : array_like of int
        One entry per reduction.
    switch : array_like of int
        Per reduction, its switch's index in ``switches``.
    sources, destinations : array_like of int
        Per reduction, the index in ``rank_sets`` of its sources and of its
        destinations.
    switches : sequence of str
        Switch (topology component) names.
    rank_sets : sequence of sequence of int
        Rank tuples.

    >>> table = SwitchReductionTable([0, 1], [0, 0], [0, 0], [1, 1], [0, 0], switches=["nvs0"],
    ...                              rank_sets=[(0, 1), (0,)])  # fmt: skip
    >>> table[1]
    SwitchReduction(chunk=1, switch='nvs0', sources=(0, 1), destinations=(0,), step=0, start_s=None, end_s=None)
    """

    __slots__ = ("chunk", "switch", "sources", "destinations", "step", "switches", "rank_sets")

    def __init__(
        self,
        chunk: Any,
        switch: Any,
        sources: Any,
        destinations: Any,
        step: Any,
        *,
        switches: Sequence[str],
        rank_sets: Sequence[Sequence[int]],
    ) -> None:
        self.chunk = np.ascontiguousarray(chunk, dtype=np.int64)
        self.switch = np.ascontiguousarray(switch, dtype=np.int64)
        self.sources = np.ascontiguousarray(sources, dtype=np.int64)
        self.destinations = np.ascontiguousarray(destinations, dtype=np.int64)
        self.step = np.ascontiguousarray(step, dtype=np.int64)
        self.switches = tuple(switches)
        self.rank_sets = tuple(tuple(ranks) for ranks in rank_sets)
        n = len(self.chunk)
        for name in ("switch", "sources", "destinations", "step"):
            column = getattr(self, name)
            if column.ndim != 1 or len(column) != n:
                raise AlgorithmError(f"switch reduction table: column {name} has shape {column.shape}, expected ({n},)")
        for name, column, listed in (("switch", self.switch, self.switches), ("sources", self.sources, self.rank_sets),
                                     ("destinations", self.destinations, self.rank_sets)):  # fmt: skip
            if n and (int(column.min()) < 0 or int(column.max()) >= len(listed)):
                raise AlgorithmError(
                    f"switch reduction table: column {name} indexes past its {len(listed)} listed entries"
                )

    @classmethod
    def from_reductions(cls, reductions: Iterable[SwitchReduction]) -> SwitchReductionTable:
        """The columns of step-scheduled reductions, each switch and rank tuple listed once.

        >>> r = SwitchReduction(3, "nvs0", (0, 1), (0, 1), step=2)
        >>> SwitchReductionTable.from_reductions([r]).rank_sets
        ((0, 1),)
        """
        reductions = list(reductions)
        switches = {name: i for i, name in enumerate(dict.fromkeys(r.switch for r in reductions))}
        listed = dict.fromkeys(tuple(ranks) for r in reductions for ranks in (r.sources, r.destinations))
        sets = {ranks: i for i, ranks in enumerate(listed)}
        return cls(
            [r.chunk for r in reductions],
            [switches[r.switch] for r in reductions],
            [sets[tuple(r.sources)] for r in reductions],
            [sets[tuple(r.destinations)] for r in reductions],
            [r.step for r in reductions],
            switches=list(switches),
            rank_sets=list(sets),
        )

    def __len__(self) -> int:
        return len(self.chunk)

    def _reduction(self, i: int) -> SwitchReduction:
        return SwitchReduction(
            int(self.chunk[i]),
            self.switches[int(self.switch[i])],
            self.rank_sets[int(self.sources[i])],
            self.rank_sets[int(self.destinations[i])],
            step=int(self.step[i]),
        )

    def __getitem__(self, index):  # type: ignore[override]
        return _row_at(self, index, self._reduction, "switch reduction")

    def __iter__(self) -> Iterator[SwitchReduction]:
        switches, sets = self.switches, self.rank_sets
        columns = (self.chunk.tolist(), self.switch.tolist(), self.sources.tolist(), self.destinations.tolist(),
                   self.step.tolist())  # fmt: skip
        for chunk, switch, sources, destinations, step in zip(*columns, strict=True):
            yield SwitchReduction(chunk, switches[switch], sets[sources], sets[destinations], step=step)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (SwitchReductionTable, tuple, list)):
            return len(other) == len(self) and tuple(self) == tuple(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"SwitchReductionTable({len(self)} reductions)"

"""SCCL's bandwidth relation B and its NumPy index: a
:class:`BandwidthConstraint` (L, b) allows at most b chunks per round over the
directed rank pairs L (a :class:`PairSet` where L is large);
:func:`constraint_loads` and :class:`RelationIndex` count how many sends fall
in each constraint, step by step, for the verifier, the generators and the
synthesizers."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ..arrays import ragged_indices, unique_pair_counts
from .orbit import OrbitTable
from .tables import TransferTable


class PairSet(AbstractSet):
    """An immutable set of directed rank pairs ``(s, d)`` held as sorted
    NumPy keys ``s * num_ranks + d``: what a bandwidth constraint over every
    pair that leaves a node or a GPU's fabric holds (a million pairs on
    1,024 ranks, where a ``frozenset`` of tuples takes a gigabyte). Reads
    like a ``frozenset`` (membership, iteration in key order, ``len``,
    equality with any set of the same pairs, ``&`` gives a ``frozenset``).

    >>> pairs = PairSet(np.array([1 * 4 + 2, 0 * 4 + 3]), 4)
    >>> sorted(pairs), (1, 2) in pairs, pairs == frozenset({(0, 3), (1, 2)})
    ([(0, 3), (1, 2)], True, True)
    """

    __slots__ = ("keys", "num_ranks", "_hash_value")

    def __init__(self, keys: np.ndarray, num_ranks: int):
        keys = np.asarray(keys, dtype=np.int64)
        ascending = len(keys) < 2 or bool((keys[1:] > keys[:-1]).all())  # masks give keys in order
        self.keys = keys if ascending else np.unique(keys)
        self.num_ranks = int(num_ranks)
        self._hash_value: int | None = None

    def __contains__(self, pair: object) -> bool:
        try:
            s, d = pair  # type: ignore[misc]
        except (TypeError, ValueError):
            return False
        p = self.num_ranks
        if not (isinstance(s, int | np.integer) and isinstance(d, int | np.integer) and 0 <= s < p and 0 <= d < p):
            return False
        key = int(s) * p + int(d)
        i = int(np.searchsorted(self.keys, key))
        return i < len(self.keys) and int(self.keys[i]) == key

    def __iter__(self) -> Iterator[tuple[int, int]]:
        src, dst = np.divmod(self.keys, self.num_ranks)
        return zip(src.tolist(), dst.tolist(), strict=True)

    def __len__(self) -> int:
        return len(self.keys)

    @classmethod
    def _from_iterable(cls, pairs: Iterable[tuple[int, int]]) -> frozenset[tuple[int, int]]:
        return frozenset(pairs)

    def __hash__(self) -> int:
        if self._hash_value is None:
            self._hash_value = self._hash()  # as a frozenset of the same pairs hashes
        return self._hash_value

    def __repr__(self) -> str:
        return f"PairSet({len(self)} pairs of {self.num_ranks} ranks)"


@dataclass(frozen=True)
class BandwidthConstraint:
    """One element (L, b) of SCCL's bandwidth relation B: at most ``b`` chunks
    per round in total over the directed rank pairs in ``links`` (a
    ``frozenset``, or a :class:`PairSet` for large ones)."""

    links: frozenset[tuple[int, int]] | PairSet
    chunks_per_round: int
    label: str = ""


def constraint_loads(
    relation: Iterable[BandwidthConstraint], pairs: Iterable[tuple[int, int]]
) -> list[tuple[BandwidthConstraint, int]]:
    """For each constraint (L, b) of ``relation``, how many of ``pairs`` (one
    per chunk sent, repeats counted) fall in L; constraints with none are left
    out. Linear in the sizes, so verifying 64-rank algorithms stays fast."""
    relation = list(relation)
    index: dict[tuple[int, int], list[int]] = {}
    for i, c in enumerate(relation):
        for pair in c.links:
            index.setdefault(pair, []).append(i)
    counts: dict[int, int] = {}
    for pair in pairs:
        for i in index.get(pair, ()):
            counts[i] = counts.get(i, 0) + 1
    return [(relation[i], n) for i, n in sorted(counts.items())]


#: Rows (a send's step and pair, per constraint the pair falls in) that :meth:`RelationIndex.step_loads`
#: expands at a time: some 40 MB of working arrays.
_LOAD_ROWS = 1 << 19
#: A block of :meth:`RelationIndex.step_loads` counts every (step, constraint) cell of its
#: steps where there are at most this many cells per row, else only the cells it meets (sorted).
_DENSE_CELLS_PER_ROW = 2
#: :meth:`RelationIndex.step_loads` counts in one table of every (step, constraint) cell of the
#: schedule (no sort) where there are at most this many cells (256 MB) and this many per send.
_DENSE_LOAD_CELLS = 1 << 25
_DENSE_CELLS_PER_SEND = 4
#: ... and where no pair falls in more constraints than this (a cluster's pairs: at most 4).
_DENSE_CONSTRAINTS_PER_PAIR = 8
#: An index keeps a row per pair key (P^2 rows) unless its relation names fewer than one pair in
#: this many; then only the pairs it names (:meth:`RelationIndex.rows`).
_COMPACT_BELOW = 8


class RelationIndex:
    """A bandwidth relation as arrays, to count sends per constraint with
    NumPy: the constraints a directed rank pair ``s * P + d`` falls in
    (CSR ``offsets`` / ``constraints``, a row per pair key, or per pair the
    relation names where it names few: :meth:`rows`) and every constraint's
    chunks per round.

    Built once per relation and kept (:meth:`of`): generators, the verifier
    and the synthesizers ask for the relation of the same few topologies."""

    _cache: dict[int, tuple[tuple[BandwidthConstraint, ...], int, RelationIndex]] = {}

    def __init__(self, relation: Sequence[BandwidthConstraint], num_ranks: int):
        p = num_ranks
        key_parts = [
            c.links.keys
            if isinstance(c.links, PairSet) and c.links.num_ranks == p
            else np.fromiter((a * p + b for a, b in c.links), dtype=np.int64, count=len(c.links))
            for c in relation
        ]
        self.num_ranks = p
        every = np.concatenate(key_parts) if key_parts else np.zeros(0, dtype=np.int64)
        # a relation that names few of the P^2 pairs (a ring's, a torus's links: 8,192 of 16.7 million
        # on ring:4096) is indexed by its own pairs, looked up by search, not by a row per pair key
        distinct = np.unique(every)
        self.pair_keys = distinct if len(distinct) * _COMPACT_BELOW < p * p else None
        if self.pair_keys is not None:
            key_parts = [np.searchsorted(self.pair_keys, keys) for keys in key_parts]
            every = np.searchsorted(self.pair_keys, every)
        rows = p * p if self.pair_keys is None else len(self.pair_keys) + 1  # (compact: a last row of none)
        self.offsets = np.zeros(rows + 1, dtype=np.int64)
        per_pair = np.bincount(every, minlength=rows) if key_parts else None
        if per_pair is not None:
            np.cumsum(per_pair, out=self.offsets[1:])
        if all(isinstance(c.links, PairSet | frozenset | set) for c in relation):
            # each pair's constraints in relation order, placed constraint by constraint (a set lists
            # a pair once): a counting sort, 5x faster than sorting 4 M keys on 1,024 GPUs
            self.constraints = np.empty(int(self.offsets[-1]), dtype=np.int64)
            fill = self.offsets[:-1].copy()
            for i, keys in enumerate(key_parts):
                self.constraints[fill[keys]] = i
                fill[keys] += 1
        else:  # links given as sequences, maybe with a pair twice (counted twice)
            ids = np.repeat(np.arange(len(key_parts), dtype=np.int64), [len(k) for k in key_parts])
            self.constraints = ids[np.argsort(every, kind="stable")]
        self.capacity = np.fromiter((c.chunks_per_round for c in relation), dtype=np.int64, count=len(relation))
        self.most_per_pair = int(per_pair.max()) if per_pair is not None and p else 0  # the busiest pair's constraints

    def rows(self, pairs: np.ndarray) -> np.ndarray:
        """The index rows of pair keys ``s * P + d``: the key itself, or in a
        compact index its place among :attr:`pair_keys` (a pair the relation
        does not name: the last row, which holds no constraint)."""
        if self.pair_keys is None:
            return pairs
        at = np.searchsorted(self.pair_keys, pairs)
        inside = at < len(self.pair_keys)
        named = np.zeros(len(pairs), dtype=bool)
        named[inside] = self.pair_keys[at[inside]] == pairs[inside]
        return np.where(named, at, len(self.pair_keys))

    @classmethod
    def of(cls, relation: Sequence[BandwidthConstraint], num_ranks: int) -> RelationIndex:
        """The index of ``relation`` (a tuple is indexed once and kept)."""
        if not isinstance(relation, tuple):
            return cls(relation, num_ranks)
        hit = cls._cache.get(id(relation))
        if hit is not None and hit[0] is relation and hit[1] == num_ranks:
            return hit[2]
        index = cls(relation, num_ranks)
        if len(cls._cache) > 64:
            cls._cache.clear()
        cls._cache[id(relation)] = (relation, num_ranks, index)
        return index

    def covered(self, pairs: np.ndarray) -> np.ndarray:
        """Whether each pair key ``s * P + d`` lies in some constraint of positive capacity
        (read from those pairs' constraints alone: the relation of 4,096 GPUs lists 67 million)."""
        rows = self.rows(pairs)
        starts = self.offsets[rows]
        counts = self.offsets[rows + 1] - starts
        positive = self.capacity[self.constraints[ragged_indices(starts, counts)]] > 0
        found = np.zeros(len(pairs), dtype=bool)
        found[np.repeat(np.arange(len(pairs), dtype=np.int64), counts)[positive]] = True
        return found

    def step_loads(
        self, step: np.ndarray, pairs: np.ndarray, by_pair: bool = True
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """How many sends of each step fall in each constraint: ``(steps,
        constraints, counts)`` for every (step, constraint) with at least one
        send, sorted by step then constraint. ``pairs`` are ``s * P + d``.
        ``by_pair`` False keeps to the sorting path, without the table of
        every pair's constraints (:attr:`by_pair`: 270 MB on 4,096 GPUs,
        more than a few steps' sends are worth)."""
        m = len(self.capacity)
        steps = int(step.max()) + 1 if len(step) else 0
        dense = by_pair and steps * (m + 1) <= min(_DENSE_CELLS_PER_SEND * len(step), _DENSE_LOAD_CELLS)
        if len(step) and dense and self.most_per_pair <= _DENSE_CONSTRAINTS_PER_PAIR:
            return self._dense_step_loads(step, pairs, steps)
        p2 = self.num_ranks * self.num_ranks
        keys, counts = unique_pair_counts(step, pairs, p2)
        key_step, key_pair = np.divmod(keys, p2)
        del keys
        key_pair = self.rows(key_pair)
        per = self.offsets[key_pair + 1] - self.offsets[key_pair]
        # (step, pair) keys expand to one row per constraint of the pair (tens on a cluster): in blocks
        # of whole steps, so that a schedule of millions of sends holds one block's rows at a time
        ends = np.cumsum(per)
        cuts = np.searchsorted(ends, np.arange(_LOAD_ROWS, int(ends[-1]) if len(ends) else 0, _LOAD_ROWS))
        cuts = np.unique(np.searchsorted(key_step, key_step[cuts], side="left"))
        parts = [
            self._block_loads(key_step[a:b], key_pair[a:b], counts[a:b], per[a:b])
            for a, b in zip([0, *cuts.tolist()], [*cuts.tolist(), len(key_step)], strict=True)
            if b > a
        ]
        if not parts:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty, empty
        return tuple(np.concatenate(column) for column in zip(*parts, strict=True))

    def rounds_needed(self, transfers: TransferTable | OrbitTable) -> tuple[np.ndarray, np.ndarray]:
        """Per step (0 .. the last): the fewest rounds, at least one, in
        which its sends keep within every constraint of positive capacity
        (SCCL §3.3: at most b · r_s sends over (L, b) in step s), and whether
        any of them falls in a constraint of capacity 0. An
        :class:`OrbitTable`'s sends are counted once per step pattern
        (:meth:`OrbitTable.step_patterns`), not image by image."""
        if not isinstance(transfers, OrbitTable):
            steps = int(transfers.step.max()) + 1 if len(transfers) else 0
            return self._needs(transfers.step, transfers.src * self.num_ranks + transfers.dst, steps)
        pattern_of, patterns = transfers.step_patterns()
        need, zero = np.ones(len(pattern_of), dtype=np.int64), np.zeros(len(pattern_of), dtype=bool)
        if patterns:
            which = np.repeat(np.arange(len(patterns), dtype=np.int64), [len(sent) for sent in patterns])
            per_need, per_zero = self._needs(which, np.concatenate(patterns), len(patterns), by_pair=False)
            sends = pattern_of >= 0
            need[sends], zero[sends] = per_need[pattern_of[sends]], per_zero[pattern_of[sends]]
        return need, zero

    def _needs(
        self, step: np.ndarray, pairs: np.ndarray, steps: int, by_pair: bool = True
    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`rounds_needed` of sends ``step``, ``pairs`` over ``steps`` steps."""
        need, zero = np.ones(steps, dtype=np.int64), np.zeros(steps, dtype=bool)
        at, cons, counts = self.step_loads(step, pairs, by_pair)
        cap = self.capacity[cons]
        limited = cap > 0
        np.maximum.at(need, at[limited], -(-counts[limited] // cap[limited]))
        zero[at[~limited & (counts > 0)]] = True
        return need, zero

    def _dense_step_loads(
        self, step: np.ndarray, pairs: np.ndarray, steps: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`step_loads` counted in a table of every (step, constraint)
        cell, send by send, each pair's constraints read from
        :attr:`by_pair` (no sort: a ring Allreduce on 1,024 GPUs has two
        million sends in 2,046 steps over 2,304 constraints)."""
        m = len(self.capacity)
        table = self.by_pair
        totals = np.zeros(steps * (m + 1), dtype=np.int64)
        for start in range(0, len(step), _LOAD_ROWS):  # (a block's cells: some 20 MB of working arrays)
            block_step = step[start : start + _LOAD_ROWS]
            first, last = int(block_step.min()), int(block_step.max())  # (a block of a schedule in step order: a few)
            cells = (block_step - first) * (m + 1)
            cells = (cells[:, None] + table[self.rows(pairs[start : start + _LOAD_ROWS])]).ravel()
            totals[first * (m + 1) : (last + 1) * (m + 1)] += np.bincount(cells, minlength=(last - first + 1) * (m + 1))
        totals = totals.reshape(steps, m + 1)[:, :m].ravel()  # (the last column: "no constraint")
        cells = np.flatnonzero(totals)
        out_step, out_cons = np.divmod(cells, m)
        return out_step, out_cons, totals[cells]

    @cached_property
    def by_pair(self) -> np.ndarray:
        """Per pair key ``s * P + d`` (per row of :meth:`rows`), the
        constraints it falls in as one row, padded with ``len(capacity)`` (no
        constraint)."""
        m, p2 = len(self.capacity), len(self.offsets) - 1
        per = np.diff(self.offsets)
        table = np.full((p2, max(self.most_per_pair, 1)), m, dtype=np.int32 if m < 2**31 - 1 else np.int64)
        place = np.arange(len(self.constraints), dtype=np.int64) - np.repeat(self.offsets[:-1], per)
        table[np.repeat(np.arange(p2, dtype=np.int64), per), place] = self.constraints
        return table

    def every_pair_table(self) -> np.ndarray:
        """:attr:`by_pair` with a row for every pair key ``s * P + d`` (P^2
        rows), compact index or not."""
        keys = np.arange(self.num_ranks * self.num_ranks, dtype=np.int64)
        return self.by_pair if self.pair_keys is None else self.by_pair[self.rows(keys)]

    def _block_loads(
        self, key_step: np.ndarray, key_pair: np.ndarray, counts: np.ndarray, per: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`step_loads` for the (step, pair) keys of whole steps (pairs as :meth:`rows`)."""
        rows = np.repeat(np.arange(len(key_step)), per)
        cons = self.constraints[ragged_indices(self.offsets[key_pair], per)]
        m = len(self.capacity)
        first = int(key_step[0]) if len(key_step) else 0
        span = (int(key_step[-1]) - first + 1) * m  # the block's (step, constraint) cells
        combined = (key_step[rows] - first) * m + cons
        if span <= _DENSE_CELLS_PER_ROW * len(rows):  # few cells for the rows: count each (no sort)
            totals = np.bincount(combined, weights=counts[rows], minlength=span)
            combined = np.flatnonzero(totals)
            totals = totals[combined].astype(np.int64)
        else:
            combined, inverse = np.unique(combined, return_inverse=True)
            totals = np.bincount(inverse, weights=counts[rows], minlength=len(combined)).astype(np.int64)
        out_step, out_cons = np.divmod(combined, m)
        return out_step + first, out_cons, totals

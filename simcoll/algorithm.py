"""The Algorithm type: a topology-level schedule of chunk transfers.

An :class:`Algorithm` says who sends which chunk where, and when, for one
:class:`~simcoll.collectives.Collective`. "When" takes one of two forms:

- **steps** (SCCL §3.3): every transfer has a ``step``; step *s* lasts
  ``rounds_per_step[s]`` rounds. A transfer in step *s* reads the state at the
  start of step *s* and its chunk is at the destination from step *s + 1* on.
- **timed** (TACCL): every transfer has ``start_s`` and ``end_s``, and may
  belong to a contiguity ``group`` of transfers on the same link sent as one
  message.

``op`` is ``"copy"`` (the destination's copy of the chunk becomes the
source's) or ``"reduce"`` (the destination combines the source's value into
its own). Producers build Algorithms; consumers (verifier, analytic cost,
simulator, compiler) read them; neither knows the other.

In-network reduction (NVLink SHARP, IB SHARP) is a second kind of scheduled
operation, :class:`SwitchReduction`: switch ``S`` reads chunk ``c`` from each
rank of ``sources``, combines the values (one source: a plain multicast) and
delivers the result to every rank of ``destinations``, whose copy of ``c`` it
replaces. It is scheduled like a transfer (a ``step``, or ``start_s`` /
``end_s``), reads the state at the start of its batch and lands at the end, and
lives in :attr:`Algorithm.switch_reductions`. Consumers that cannot time or
lower it refuse it by name (:meth:`Algorithm.require_point_to_point`).

Large schedules hold their transfers as NumPy columns (:class:`TransferTable`)
and their step-scheduled switch reductions likewise
(:class:`SwitchReductionTable`); both read as tuples of the objects. A
schedule that shifting every rank by whole nodes maps onto itself (rings that
repeat node after node) can be held as an :class:`OrbitTable`: the transfers
of its first nodes and the rotation that gives the rest; it reads as its
listed transfers too, up to :data:`~simcoll.limits.MAX_TRANSFERS`, and the
verifier, the simulator and ``.npz`` files work on it as it is
(:attr:`Algorithm.orbit`).
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, fields
from fractions import Fraction
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from .arrays import ragged_indices, unique_pair_counts
from .collectives import Collective, collective_from_dict, collective_to_dict
from .errors import AlgorithmError, ScheduleTooLargeError
from .files import atomic_output, parse_json, read_text, write_atomic
from .limits import MAX_TRANSFERS, charge_transfers, uncharged

TRANSFER_OPS = ("copy", "reduce")
FORMAT_VERSION = 1
#: The file extension of the compact column format (:meth:`Algorithm.save`).
NPZ_SUFFIX = ".npz"
#: How an ``.npz`` file (a zip archive) starts.
NPZ_MAGIC = b"PK\x03\x04"
#: The keys of :meth:`Algorithm.to_dict` before ``transfers``, in order.
_DICT_HEAD = ("format", "version", "name", "collective", "topology", "schedule", "rounds_per_step")


@dataclass(frozen=True)
class Transfer:
    """Chunk ``chunk`` moves from rank ``src`` to rank ``dst``."""

    chunk: int
    src: int
    dst: int
    op: str = "copy"
    step: int | None = None
    start_s: float | None = None
    end_s: float | None = None
    group: int | None = None

    def describe(self) -> str:
        when = f"step {self.step}" if self.step is not None else f"t={self.start_s:.3g}s"
        verb = "reduce" if self.op == "reduce" else "send"
        return f"{verb} of chunk {self.chunk} from rank {self.src} to rank {self.dst} at {when}"


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


class OrbitTable(Sequence):
    """A step schedule held as the transfers of its first ranks and the
    rotation that gives all the others (issue 15: NCCL's rings on 4,096
    GPUs have 268 million transfers, a million of them sent from the first
    two nodes).

    Moving every rank ``shift_ranks`` on, ``π(r) = (r + shift_ranks) mod P``,
    and every chunk ``c`` to ``chunk_map[c]`` (σ) maps the schedule onto
    itself. Its transfers are then the ``order = P / shift_ranks`` images of
    the *representatives*, the transfers sent from ranks ``0 ..
    shift_ranks - 1``: image ``j`` moves each representative's ranks by
    ``j · shift_ranks`` and its chunk by σ^j, at the same step with the
    same op. As a sequence it reads as that table, image after image
    (:meth:`expand`, refused past :data:`~simcoll.limits.MAX_TRANSFERS`);
    the verifier, the simulator's node rotation and the ``.npz`` files read
    the representatives alone.

    Parameters
    ----------
    representatives : TransferTable
        Step-scheduled transfers without contiguity groups, every source
        rank below ``shift_ranks``.
    num_ranks : int
        P; ``shift_ranks`` divides it.
    shift_ranks : int
        The rotation's shift (a whole number of nodes on a cluster).
    chunk_map : array_like of int
        σ: a permutation of the chunks with σ^order the identity.

    Raises
    ------
    AlgorithmError
        For any of these conditions broken, naming it.

    Examples
    --------
    >>> reps = TransferTable([0], [0], [1], [False], step=[0])
    >>> orbit = OrbitTable(reps, num_ranks=4, shift_ranks=1, chunk_map=[1, 2, 3, 0])
    >>> len(orbit), [(t.chunk, t.src, t.dst) for t in orbit]
    (4, [(0, 0, 1), (1, 1, 2), (2, 2, 3), (3, 3, 0)])
    """

    def __init__(self, representatives: TransferTable, num_ranks: int, shift_ranks: int, chunk_map: Any) -> None:
        if not isinstance(representatives, TransferTable):
            raise AlgorithmError("orbit table: the representatives must be a TransferTable")
        if representatives.timed or representatives.group is not None:
            raise AlgorithmError("orbit table: the representatives must be step-scheduled, without contiguity groups")
        if not (isinstance(shift_ranks, int) and isinstance(num_ranks, int) and 0 < shift_ranks <= num_ranks):
            raise AlgorithmError(f"orbit table: shift {shift_ranks!r} is not a rank count in 1..{num_ranks!r}")
        if num_ranks % shift_ranks:
            raise AlgorithmError(f"orbit table: a shift of {shift_ranks} ranks does not divide {num_ranks} ranks")
        sigma = np.ascontiguousarray(chunk_map, dtype=np.int64)
        g = len(sigma)
        if sigma.ndim != 1 or ((sigma < 0) | (sigma >= g)).any() or np.bincount(sigma, minlength=g).max(initial=1) > 1:
            raise AlgorithmError("orbit table: chunk_map is not a permutation of the chunks 0..G-1")
        reps = representatives
        if len(reps) and (int(reps.src.min()) < 0 or int(reps.src.max()) >= shift_ranks):
            raise AlgorithmError(f"orbit table: a representative is sent from a rank outside 0..{shift_ranks - 1}")
        if len(reps) and (int(reps.dst.min()) < 0 or int(reps.dst.max()) >= num_ranks):
            raise AlgorithmError(f"orbit table: a representative is sent to a rank outside 0..{num_ranks - 1}")
        if len(reps) and int(reps.chunk.max(initial=0)) >= max(g, 1):
            raise AlgorithmError(f"orbit table: a representative moves a chunk outside 0..{g - 1} (chunk_map)")
        self.representatives, self.num_ranks, self.shift_ranks, self.chunk_map = reps, num_ranks, shift_ranks, sigma
        if not np.array_equal(self._chunk_map_power(self.order), np.arange(g)):
            raise AlgorithmError(f"orbit table: chunk_map applied {self.order} times (the order) is not the identity")

    @property
    def order(self) -> int:
        """The images: P / ``shift_ranks``."""
        return self.num_ranks // self.shift_ranks

    def __len__(self) -> int:
        return len(self.representatives) * self.order

    def expand(self) -> TransferTable:
        """Every transfer, image after image (kept once built).

        Raises
        ------
        ScheduleTooLargeError
            Past :data:`~simcoll.limits.MAX_TRANSFERS` transfers: what needs
            them one by one (JSON, timelines, the compiler) refuses so large a
            schedule; the verifier and ``simulate`` without a timeline or
            utilisation read the orbit itself.
        """
        if self._expanded is None:
            if len(self) > MAX_TRANSFERS:
                raise ScheduleTooLargeError(
                    f"a schedule of {len(self):,} transfers ({len(self.representatives):,} representatives times "
                    f"{self.order} images) is more than simcoll lists one by one (simcoll.limits.MAX_TRANSFERS); "
                    "verify it, save it as .npz, or simulate it without a timeline or utilisation"
                )
            self._expanded = self._images(self.order)
        return self._expanded

    _expanded: TransferTable | None = None

    def coarsened(self, factor: int) -> OrbitTable:
        """The same schedule under a shift ``factor`` times as long (``factor``
        divides the order): the first ``factor`` images are its representatives.
        Its images list the transfers in the same order.

        >>> reps = TransferTable([0], [0], [1], [False], step=[0])
        >>> OrbitTable(reps, 4, 1, [1, 2, 3, 0]).coarsened(2)
        OrbitTable(4 transfers: 2 representatives, 2 images of a 2-rank shift)
        """
        return OrbitTable(
            self._images(factor), self.num_ranks, self.shift_ranks * factor, self._chunk_map_power(factor)
        )

    def _chunk_map_power(self, k: int) -> np.ndarray:
        """σ applied ``k`` times."""
        power = np.arange(len(self.chunk_map), dtype=np.int64)
        for _ in range(k):
            power = self.chunk_map[power]
        return power

    def landing_slots(self) -> np.ndarray:
        """Per representative, the slot (``rank × G + chunk``) of the first
        ``shift_ranks`` ranks that its landing stands for: one at rank ``j ·
        shift_ranks + d`` (mod P) stands for its image ``j`` shifts back,
        which updates slot ``(d, σ^-j(chunk))`` at the same step (where the
        orbit verifier and the simulator's quotient replay it)."""
        reps, g = self.representatives, len(self.chunk_map)
        back, chunk = reps.dst // self.shift_ranks, reps.chunk.copy()
        inverse = np.empty(g, dtype=np.int64)
        inverse[self.chunk_map] = np.arange(g, dtype=np.int64)
        for j in range(1, int(back.max(initial=0)) + 1):
            moving = back >= j
            chunk[moving] = inverse[chunk[moving]]
        return (reps.dst % self.shift_ranks) * g + chunk

    def _images(self, k: int) -> TransferTable:
        """The first ``k`` images, one after another."""
        reps, n, s = self.representatives, self.num_ranks, self.shift_ranks
        moved = np.repeat(np.arange(k, dtype=np.int64) * s, len(reps))
        chunks = [reps.chunk]
        for _ in range(1, k):
            chunks.append(self.chunk_map[chunks[-1]])
        with uncharged():  # (the representatives were counted when they were built)
            return TransferTable(
                chunk=np.concatenate(chunks) if chunks else reps.chunk,
                src=(np.tile(reps.src, k) + moved) % n,
                dst=(np.tile(reps.dst, k) + moved) % n,
                reduce=np.tile(reps.reduce, k),
                step=np.tile(reps.step, k),
            )

    def rank_pairs(self, num_ranks: int) -> np.ndarray:
        """:meth:`TransferTable.rank_pairs` of the whole schedule, from the representatives' pairs."""
        return np.unique(self._pair_images(self.representatives.rank_pairs(num_ranks)))

    def _pair_images(self, pairs: np.ndarray) -> np.ndarray:
        """Rank pairs ``src × P + dst`` moved by every image, image after image."""
        n = self.num_ranks
        src, dst = np.divmod(pairs, n)
        moved = np.arange(self.order, dtype=np.int64)[:, None] * self.shift_ranks
        return (((src + moved) % n) * n + (dst + moved) % n).ravel()

    def step_patterns(self) -> tuple[np.ndarray, list[np.ndarray]]:
        """The steps grouped by what they send: per step (0 .. the last), the
        index of its pattern (-1 for a step without transfers), and per
        pattern the rank pairs ``src × P + dst`` the whole schedule sends in
        such a step (all images, repeats kept). A ring's steps all send
        alike: loads per constraint are counted once per pattern, not over
        every image of every step."""
        reps, n = self.representatives, self.num_ranks
        steps = int(reps.step.max()) + 1 if len(reps) else 0
        keys = reps.src * n + reps.dst
        by = np.lexsort((keys, reps.step))
        keys, step = keys[by], reps.step[by]
        bounds = np.searchsorted(step, np.arange(steps + 1)).tolist()
        pattern_of = np.full(steps, -1, dtype=np.int64)
        found: dict[bytes, int] = {}
        patterns: list[np.ndarray] = []
        for t in range(steps):
            if bounds[t] == bounds[t + 1]:
                continue
            sent = keys[bounds[t] : bounds[t + 1]]
            at = found.setdefault(sent.tobytes(), len(found))
            if at == len(patterns):
                patterns.append(self._pair_images(sent))
            pattern_of[t] = at
        return pattern_of, patterns

    def __getitem__(self, index):  # type: ignore[override]
        return self.expand()[index]

    def __iter__(self) -> Iterator[Transfer]:
        return iter(self.expand())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, OrbitTable):
            return (
                (self.num_ranks, self.shift_ranks) == (other.num_ranks, other.shift_ranks)
                and np.array_equal(self.chunk_map, other.chunk_map)
                and self.representatives == other.representatives
            )
        if isinstance(other, (TransferTable, tuple, list)):
            return len(other) == len(self) and self.expand() == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"OrbitTable({len(self)} transfers: {len(self.representatives)} representatives, "
            f"{self.order} images of a {self.shift_ranks}-rank shift)"
        )


def layouts_rotate(layout: Sequence[Sequence[int]], shift_ranks: int, chunk_map: np.ndarray) -> bool:
    """Whether rank ``r + shift_ranks``'s chunks (mod P) are σ of rank
    ``r``'s for every rank of a collective's ``layout`` (each distinct pair
    of layout objects compared once: an Allreduce's ranks share one)."""
    p, seen = len(layout), set()
    for r in range(p):
        a, b = layout[r], layout[(r + shift_ranks) % p]
        if (id(a), id(b)) in seen:
            continue
        seen.add((id(a), id(b)))
        mine = chunk_map[np.fromiter(a, dtype=np.int64, count=len(a))]
        theirs = np.fromiter(b, dtype=np.int64, count=len(b))
        if len(mine) != len(theirs) or not np.array_equal(np.sort(mine), np.sort(theirs)):
            return False
    return True


@dataclass(frozen=True)
class SwitchReduction:
    """Switch ``switch`` (a topology component name) combines chunk ``chunk``
    of every rank in ``sources`` and multicasts the result to every rank in
    ``destinations`` (module docstring). The topology must declare the switch
    ``reduce: true`` when there are several sources and ``multicast: true``
    when there are several destinations (checked by :func:`simcoll.verify.check`)."""

    chunk: int
    switch: str
    sources: tuple[int, ...]
    destinations: tuple[int, ...]
    step: int | None = None
    start_s: float | None = None
    end_s: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "sources", tuple(self.sources))
        object.__setattr__(self, "destinations", tuple(self.destinations))

    def describe(self) -> str:
        when = f"step {self.step}" if self.step is not None else f"t={self.start_s:.3g}s"
        return (
            f"in-switch reduction of chunk {self.chunk} in {self.switch} from ranks {list(self.sources)} "
            f"to ranks {list(self.destinations)} at {when}"
        )


#: A :class:`SwitchReductionTable`'s columns, as an ``.npz`` file holds them (``r_`` and the name).
_REDUCTION_COLUMNS = ("chunk", "switch", "sources", "destinations", "step")


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


class RelationIndex:
    """A bandwidth relation as arrays, to count sends per constraint with
    NumPy: the constraints a directed rank pair ``s * P + d`` falls in
    (CSR ``offsets`` / ``constraints``) and every constraint's chunks per round.

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
        self.offsets = np.zeros(p * p + 1, dtype=np.int64)
        if key_parts:
            np.cumsum(np.bincount(np.concatenate(key_parts), minlength=p * p), out=self.offsets[1:])
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
            self.constraints = ids[np.argsort(np.concatenate(key_parts), kind="stable")]
        self.capacity = np.fromiter((c.chunks_per_round for c in relation), dtype=np.int64, count=len(relation))
        self.most_per_pair = int(np.diff(self.offsets).max()) if p else 0  # constraints of the busiest pair

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
        starts = self.offsets[pairs]
        counts = self.offsets[pairs + 1] - starts
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
            cells = (cells[:, None] + table[pairs[start : start + _LOAD_ROWS]]).ravel()
            totals[first * (m + 1) : (last + 1) * (m + 1)] += np.bincount(cells, minlength=(last - first + 1) * (m + 1))
        totals = totals.reshape(steps, m + 1)[:, :m].ravel()  # (the last column: "no constraint")
        cells = np.flatnonzero(totals)
        out_step, out_cons = np.divmod(cells, m)
        return out_step, out_cons, totals[cells]

    @cached_property
    def by_pair(self) -> np.ndarray:
        """Per pair key ``s * P + d``, the constraints it falls in as one row,
        padded with ``len(capacity)`` (no constraint)."""
        m, p2 = len(self.capacity), len(self.offsets) - 1
        per = np.diff(self.offsets)
        table = np.full((p2, max(self.most_per_pair, 1)), m, dtype=np.int32 if m < 2**31 - 1 else np.int64)
        place = np.arange(len(self.constraints), dtype=np.int64) - np.repeat(self.offsets[:-1], per)
        table[np.repeat(np.arange(p2, dtype=np.int64), per), place] = self.constraints
        return table

    def _block_loads(
        self, key_step: np.ndarray, key_pair: np.ndarray, counts: np.ndarray, per: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`step_loads` for the (step, pair) keys of whole steps."""
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
    """A verified-or-not schedule; see the module docstring."""

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
        as_columns = isinstance(reductions, SwitchReductionTable)
        header = self._header_dict(with_reductions=not as_columns)
        table = self.orbit.representatives if self.orbit is not None else self.table
        header["transfer_columns"] = sorted(table.columns())
        arrays = {f"t_{k}": v for k, v in table.columns().items()}
        if self.orbit is not None:  # the representatives, the rotation's shift in the header and σ beside them
            header["orbit_shift_ranks"] = self.orbit.shift_ranks
            arrays["o_chunk_map"] = self.orbit.chunk_map
        if as_columns:  # columns too, its switches and rank tuples listed in the header
            header["switch_reduction_lists"] = {
                "switches": list(reductions.switches),
                "rank_sets": [list(ranks) for ranks in reductions.rank_sets],
            }
            arrays.update({f"r_{k}": getattr(reductions, k) for k in _REDUCTION_COLUMNS})
        arrays["header"] = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)
        np.savez(handle, **arrays)

    def to_npz_bytes(self) -> bytes:
        """The ``.npz`` form (:meth:`write_npz`) as bytes."""
        buffer = io.BytesIO()
        self.write_npz(buffer)
        return buffer.getvalue()

    @classmethod
    def from_npz(cls, source: str | Path | Any) -> Algorithm:
        """An Algorithm from the ``.npz`` form (:meth:`write_npz`): a path,
        a binary file object, or the bytes themselves."""
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

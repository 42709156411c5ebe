"""Schedules held by their symmetry: an :class:`OrbitTable` holds a step
schedule as the transfers sent from its first ranks and the rotation (a shift
by whole nodes) that gives all the others; :func:`layouts_rotate` says whether
such a rotation maps a collective's layout onto itself."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from ..errors import AlgorithmError, ScheduleTooLargeError
from ..limits import MAX_TRANSFERS, uncharged
from .operations import Transfer
from .tables import TransferTable


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

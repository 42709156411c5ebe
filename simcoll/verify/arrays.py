"""The array verifiers of step-scheduled Algorithms: :func:`algorithm_is_correct`,
and :func:`orbit_is_correct` for one held as an orbit table. They decide what
the symbolic replay (:mod:`simcoll.verify.symbolic`) decides, with the state
in NumPy columns (contributions as bitsets, a step as a few array
operations), but they only say whether the schedule is correct."""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from ..algorithm import Algorithm, OrbitTable, RelationIndex, SwitchReductionTable, TransferTable
from ..arrays import flatten, ragged_indices
from ..collectives import Collective
from ..errors import OptionError
from ..routes import bandwidth_relation, routes_of
from ..topology import Topology
from .deadline import _on_time
from .switches import _check_switch_reductions


def _fast_path_applies(algorithm: Algorithm) -> bool:
    return algorithm.schedule == "steps"


def algorithm_is_correct(algorithm: Algorithm, topology: Topology | None = None) -> bool:
    """Whether the general verifier (:func:`check`) finds no problem in a step
    schedule, decided on NumPy columns.

    The same run as the symbolic execution (module docstring), with a value's
    contributions held as a bitset over the ranks (``ceil(P / 64)`` words per
    (rank, chunk) slot that the schedule touches) instead of a Python set, and
    every step's reads, copies and reductions applied as array operations.
    In-switch reductions read their sources with the transfers, at the start
    of their step (the sources' contributions must be disjoint), and replace
    every destination's copy at its end; the switch rules (kind,
    ``reduce``/``multicast``, reachability) are checked once per switch and
    rank tuple, not per reduction.
    A value always carries the chunk of its slot in an Algorithm (transfers
    move a chunk between the same slot of two ranks), so only presence and
    contributions are tracked. Returns True exactly when :func:`check` returns
    an empty list (tested against it); it does not say what is wrong.

    Parameters
    ----------
    algorithm : Algorithm
        A step-scheduled Algorithm without switch reductions.
    topology : Topology, optional
        The topology whose routes and bandwidth relation it must respect.

    Returns
    -------
    bool

    Raises
    ------
    OptionError
        (a ValueError) for a timed schedule (use :func:`check`).

    References
    ----------
    .. [1] Cai et al., "Synthesizing Optimal Collective Algorithms" (SCCL),
       PPoPP 2021, §3.2-3.3 (pre- and postconditions, runs, the relation B).

    Examples
    --------
    >>> from simcoll import generate
    >>> algorithm_is_correct(generate("ring", "ring:4", "allreduce"))
    True
    """
    if not _fast_path_applies(algorithm):
        raise OptionError(f"{algorithm.name}: the array verifier takes step schedules")
    coll = algorithm.collective
    p, g = coll.num_ranks, coll.num_chunks
    if topology is not None and topology.num_ranks != p:
        return False
    table = algorithm.table
    if not coll.combining and table.reduce.any():
        return False
    if not _pairs_ok(algorithm, topology, table):
        return False
    switched = _SwitchedSlots.of(algorithm, topology)
    if switched is None:
        return False
    # Slots: rank * G + chunk, renumbered densely over those in use.
    pre_rank, pre_chunk = flatten(coll.input_layout)
    out_rank, out_chunk = flatten(coll.output_layout)
    pre_key = pre_rank * g + pre_chunk
    words = max(1, (p + 63) // 64)
    dense = p * g * words <= _DENSE_SLOT_WORDS
    if dense:
        keys = np.arange(p * g, dtype=np.int64)  # every slot: no renumbering needed
    else:
        # marked in a table of every slot (at most simcoll.limits.MAX_COLLECTIVE_SLOTS): no sort
        in_use = np.zeros(p * g, dtype=bool)
        for used in (
            pre_key,
            table.src * g + table.chunk,
            table.dst * g + table.chunk,
            switched.src_key,
            switched.dst_key,
        ):
            in_use[used] = True
        keys = np.flatnonzero(in_use)
        number = np.zeros(p * g, dtype=np.int32 if len(keys) < 2**31 else np.int64)
        number[keys] = np.arange(len(keys))

    def slot_of(key: np.ndarray) -> np.ndarray:  # a slot's number is its key where every slot is kept
        return key if dense else number[key]

    bits = np.zeros((len(keys), words), dtype=np.uint64)
    present = np.zeros(len(keys), dtype=bool)
    _hold_inputs(bits, present, slot_of(pre_key), pre_rank)
    src_slot = slot_of(table.src * g + table.chunk)
    dst_slot = slot_of(table.dst * g + table.chunk)
    order = np.argsort(table.step, kind="stable")
    steps = table.step[order]
    red_src, red_dst = slot_of(switched.src_key), slot_of(switched.dst_key)
    every_step = np.union1d(steps, switched.step)
    t_lo, t_hi = np.searchsorted(steps, every_step), np.searchsorted(steps, every_step, side="right")
    r_lo, r_hi = np.searchsorted(switched.step, every_step), np.searchsorted(switched.step, every_step, side="right")
    for i in range(len(every_step)):
        _on_time("at step", every_step[i])
        batch = order[t_lo[i] : t_hi[i]]
        reductions = slice(r_lo[i], r_hi[i])
        value = switched.read(bits, present, red_src, reductions)  # at the start of the step, as the transfers
        if value is None or not _apply_step(bits, present, src_slot[batch], dst_slot[batch], table.reduce[batch]):
            return False
        if not switched.write(bits, present, red_dst, reductions, value, dst_slot[batch]):
            return False
    out_key = out_rank * g + out_chunk
    out_slot = np.minimum(np.searchsorted(keys, out_key), len(keys) - 1)
    if len(out_key) and (not len(keys) or not (keys[out_slot] == out_key).all() or not present[out_slot].all()):
        return False
    return not coll.combining or bool((bits[out_slot] == _contributor_bits(coll, words)[out_chunk]).all())


def orbit_is_correct(algorithm: Algorithm, topology: Topology | None = None) -> bool:
    """:func:`algorithm_is_correct` for an Algorithm held as an
    :class:`~simcoll.algorithm.OrbitTable`, replayed on the slots of its
    first ``s`` ranks alone (``s`` the rotation's shift).

    The rotation (π: ranks ``s`` on; σ: the chunk map) maps the schedule
    onto itself, and the pre- and postcondition too (checked when the
    Algorithm is built). A run is deterministic, so after every step slot
    ``(π^j(r), σ^j(c))`` holds the image of what ``(r, c)`` holds: the same
    presence, its contributions moved ``j·s`` ranks on. A representative
    reads a slot of its own rank; one landing at rank ``j·s + d`` (mod P)
    stands for its image ``j`` shifts back, which updates slot ``(d,
    σ^-j(c))`` at the same step with the value read, its contributions
    moved ``j·s`` ranks back. So every update of the first ranks' slots is
    replayed, and every problem of the full run, at some slot, is the
    image of one met at the first ranks' slots: the answer is the full
    run's (tested against it). Routes and the bandwidth relation are
    checked on every image's rank pair.

    Examples
    --------
    >>> from simcoll import generate
    >>> orbit_is_correct(generate("nccl-ring", "dgx-h100*4", "allreduce"))
    True
    """
    orbit, coll = algorithm.orbit, algorithm.collective
    if orbit is None:
        raise OptionError(f"{algorithm.name}: not held as an orbit table (use algorithm_is_correct)")
    p, g, s = coll.num_ranks, coll.num_chunks, orbit.shift_ranks
    reps = orbit.representatives
    if topology is not None and topology.num_ranks != p:
        return False
    if not coll.combining and reps.reduce.any():
        return False
    if not _pairs_ok(algorithm, topology, orbit):
        return False
    words = max(1, (p + 63) // 64)
    bits = np.zeros((s * g, words), dtype=np.uint64)
    present = np.zeros(s * g, dtype=bool)
    pre_rank, pre_chunk = flatten(coll.input_layout[:s])
    _hold_inputs(bits, present, pre_rank * g + pre_chunk, pre_rank)
    back = reps.dst // s  # (a landing j nodes on stands for its image j shifts back)
    src_slot, dst_slot = reps.src * g + reps.chunk, orbit.landing_slots()
    order = np.argsort(reps.step, kind="stable")
    steps = reps.step[order]
    bounds = np.flatnonzero(np.diff(steps)) + 1
    for batch in np.split(order, bounds) if len(order) else ():
        _on_time("at step", reps.step[batch[0]])
        moved = functools.partial(_move_contributions, shifts=back[batch] * s, p=p)
        if not _apply_step(bits, present, src_slot[batch], dst_slot[batch], reps.reduce[batch], moved):
            return False
    out_rank, out_chunk = flatten(coll.output_layout[:s])
    out_slot = out_rank * g + out_chunk
    if not present[out_slot].all():
        return False
    return not coll.combining or bool((bits[out_slot] == _contributor_bits(coll, words)[out_chunk]).all())


def _move_contributions(values: np.ndarray, shifts: np.ndarray, p: int) -> np.ndarray:
    """``values`` (rows of contribution bitsets over ``p`` ranks) with row
    ``i``'s contributions moved ``shifts[i]`` ranks back (mod ``p``)."""
    if not shifts.any():
        return values
    out = values.copy()
    for by in set(shifts.tolist()) - {0}:
        rows = np.flatnonzero(shifts == by)
        ranks = np.unpackbits(values[rows].view(np.uint8), axis=1, bitorder="little")
        ranks[:, :p] = np.roll(ranks[:, :p], -by, axis=1)
        out[rows] = np.packbits(ranks, axis=1, bitorder="little").view(np.uint64)
    return out


def _hold_inputs(bits: np.ndarray, present: np.ndarray, slots: np.ndarray, ranks: np.ndarray) -> None:
    """The start of a replay: slot ``slots[i]`` holds the input of rank
    ``ranks[i]`` (its one contribution bit)."""
    np.bitwise_or.at(bits, (slots, ranks // 64), np.left_shift(np.uint64(1), (ranks % 64).astype(np.uint64)))
    present[slots] = True


def _contributor_bits(coll: Collective, words: int) -> np.ndarray:
    """Per chunk, the bitset of the ranks that hold it at the start: ranks
    sharing one input layout object (an Allreduce's all do) are set together."""
    expected = np.zeros((coll.num_chunks, words), dtype=np.uint64)
    holders: dict[int, tuple[tuple, list[int]]] = {}
    for rank, layout in enumerate(coll.input_layout):
        holders.setdefault(id(layout), (layout, []))[1].append(rank)
    for layout, ranks in holders.values():
        mask = np.zeros(words, dtype=np.uint64)
        r = np.asarray(ranks, dtype=np.int64)
        np.bitwise_or.at(mask, r // 64, np.left_shift(np.uint64(1), (r % 64).astype(np.uint64)))
        expected[np.fromiter(layout, dtype=np.int64, count=len(layout))] |= mask
    return expected


#: Up to this many 64-bit words of contribution bitsets, :func:`algorithm_is_correct`
#: keeps one per (rank, chunk) slot (256 MB); beyond, only the slots in use.
_DENSE_SLOT_WORDS = 1 << 25


def _apply_step(
    bits: np.ndarray,
    present: np.ndarray,
    src: np.ndarray,
    dst: np.ndarray,
    reduce: np.ndarray,
    moved: Callable[[np.ndarray], np.ndarray] | None = None,
) -> bool:
    """One step of :func:`algorithm_is_correct`: every transfer reads its
    source slot at the start of the step, then copies land and reductions
    combine. False where the symbolic run would report a problem.
    ``moved`` changes the values read before they land (an orbit's images
    move their contributions back: :func:`orbit_is_correct`)."""
    if not present[src].all():
        return False
    values = bits[src] if moved is None else moved(bits[src])
    copy_dst, copy_val = dst[~reduce], values[~reduce]
    red_dst, red_val = dst[reduce], values[reduce]
    if len(copy_dst) and len(red_dst) and np.intersect1d(copy_dst, red_dst).size:
        return False  # copied and reduced into in one step
    if len(copy_dst):
        order = np.argsort(copy_dst, kind="stable")
        same = copy_dst[order][1:] == copy_dst[order][:-1]
        if same.any() and not (copy_val[order][1:][same] == copy_val[order][:-1][same]).all():
            return False  # different versions of one chunk arrive
        bits[copy_dst] = copy_val
        present[copy_dst] = True
    if len(red_dst):
        if not present[red_dst].all():
            return False
        order = np.argsort(red_dst, kind="stable")
        red_dst, red_val = red_dst[order], red_val[order]
        first = np.ones(len(red_dst), dtype=bool)
        first[1:] = red_dst[1:] != red_dst[:-1]
        if first.all():
            base = bits[red_dst]
            if (base & red_val).any():
                return False  # a contribution counted twice
            bits[red_dst] = base | red_val
        else:  # several reductions into one slot (a tree's children): all disjoint, so no bit is counted twice
            starts = np.flatnonzero(first)
            slots, base = red_dst[starts], bits[red_dst[starts]]
            merged = base | np.bitwise_or.reduceat(red_val, starts, axis=0)
            if (np.add.reduceat(_popcount(red_val), starts) + _popcount(base) != _popcount(merged)).any():
                return False  # a contribution counted twice
            bits[slots] = merged
    return True


class _SwitchedSlots:
    """An Algorithm's in-switch reductions for :func:`algorithm_is_correct`:
    sorted by step, each one's source and destination slot keys (rank × G +
    chunk) laid out reduction after reduction, with their offsets."""

    def __init__(
        self, step: np.ndarray, src_key: np.ndarray, src_n: np.ndarray, dst_key: np.ndarray, dst_n: np.ndarray
    ):
        self.step, self.src_key, self.src_n, self.dst_key, self.dst_n = step, src_key, src_n, dst_key, dst_n
        self.src_at = np.concatenate(([0], np.cumsum(src_n)))
        self.dst_at = np.concatenate(([0], np.cumsum(dst_n)))
        self._mark: np.ndarray | None = None  # per slot, the number of the destination that wrote it last
        self._marked = 0

    @classmethod
    def of(cls, algorithm: Algorithm, topology: Topology | None) -> _SwitchedSlots | None:
        """The reductions of ``algorithm`` (none: empty columns), or None where
        the symbolic run would report a problem before any step: a rule of
        :func:`_check_switch_reductions` broken, checked on one reduction per
        (switch, sources, destinations), all the rules depend on."""
        empty = np.zeros(0, dtype=np.int64)
        reductions = algorithm.switch_reductions
        if not reductions:
            return cls(empty, empty, empty, empty, empty)
        if not isinstance(reductions, SwitchReductionTable):
            reductions = SwitchReductionTable.from_reductions(reductions)
        sets = len(reductions.rank_sets)  # (switch, sources) numbered, then with destinations: int keys sort fast
        _, pair = np.unique(reductions.switch * sets + reductions.sources, return_inverse=True)
        _, first = np.unique(pair * sets + reductions.destinations, return_index=True)
        if _check_switch_reductions([reductions[i] for i in first.tolist()], algorithm.collective, topology):
            return None
        size = np.array([len(ranks) for ranks in reductions.rank_sets], dtype=np.int64)
        order = np.argsort(reductions.step, kind="stable")
        chunk, g = reductions.chunk[order], algorithm.collective.num_chunks
        flat = np.fromiter((r for ranks in reductions.rank_sets for r in ranks), dtype=np.int64, count=int(size.sum()))
        start = np.concatenate(([0], np.cumsum(size)[:-1]))

        def keys(sets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            n = size[sets[order]]
            return flat[ragged_indices(start[sets[order]], n)] * g + np.repeat(chunk, n), n

        (src_key, src_n), (dst_key, dst_n) = keys(reductions.sources), keys(reductions.destinations)
        return cls(reductions.step[order], src_key, src_n, dst_key, dst_n)

    def read(self, bits: np.ndarray, present: np.ndarray, src_slot: np.ndarray, rows: slice) -> np.ndarray | None:
        """The values reductions ``rows`` deliver (their sources' bits ORed,
        a row each), or None where a source does not hold its chunk or two
        sources hold the same contribution."""
        if rows.start == rows.stop:
            return bits[:0]
        sources = src_slot[self.src_at[rows.start] : self.src_at[rows.stop]]
        if not present[sources].all():
            return None
        values = bits[sources]
        starts = self.src_at[rows.start : rows.stop] - self.src_at[rows.start]
        combined = np.bitwise_or.reduceat(values, starts, axis=0)
        if (np.add.reduceat(_popcount(values), starts) != _popcount(combined)).any():
            return None  # a contribution counted twice
        return combined

    def write(
        self,
        bits: np.ndarray,
        present: np.ndarray,
        dst_slot: np.ndarray,
        rows: slice,
        value: np.ndarray,
        written: np.ndarray,
    ) -> bool:
        """Reductions ``rows`` replace their destinations' copies with ``value``;
        False where a slot receives twice in the step (``written``: the slots
        the step's transfers wrote)."""
        if rows.start == rows.stop:
            return True
        slots = dst_slot[self.dst_at[rows.start] : self.dst_at[rows.stop]]
        if self._mark is None:
            self._mark = np.full(len(bits), -1, dtype=np.int64)
        # each destination marks its slot with its own number, above every earlier step's: a slot
        # marked by another of this step's destinations, or one a transfer wrote, is written twice
        number = np.arange(self._marked, self._marked + len(slots), dtype=np.int64)
        self._marked += len(slots)
        self._mark[slots] = number
        if (self._mark[slots] != number).any() or (self._mark[written] >= number[0]).any():
            return False
        bits[slots] = np.repeat(value, self.dst_n[rows], axis=0)
        present[slots] = True
        return True


def _popcount(bits: np.ndarray) -> np.ndarray:
    """Set bits per row of a (rows, words) uint64 array."""
    if hasattr(np, "bitwise_count"):  # NumPy 2
        return np.bitwise_count(bits).sum(axis=1, dtype=np.int64)
    return np.unpackbits(bits.view(np.uint8), axis=1).sum(axis=1, dtype=np.int64)


def _pairs_ok(algorithm: Algorithm, topology: Topology | None, transfers: TransferTable | OrbitTable) -> bool:
    """Every rank pair ``transfers`` use has a route on ``topology`` and
    :func:`_check_bandwidth` finds nothing (vectorised: :class:`RelationIndex`;
    an orbit's loads once per step pattern)."""
    p = algorithm.num_ranks
    routes = routes_of(topology) if topology is not None else None
    distinct = transfers.rank_pairs(p)
    if routes is not None and not all(routes.connected(*divmod(k, p)) for k in distinct.tolist()):
        return False
    relation = algorithm.bandwidth or (bandwidth_relation(topology, routes) if topology is not None else ())
    if not relation or not len(transfers):
        return True
    index = RelationIndex.of(relation, p)
    need, zero = index.rounds_needed(transfers)
    if zero.any() or (need > np.asarray(algorithm.rounds_per_step[: len(need)], dtype=np.int64)).any():
        return False
    return bool(index.covered(distinct).all())

"""Independent verifier: symbolic execution of Algorithms and Programs against
their collective's postcondition.

A chunk's value is tracked as ``(chunk id, contributions)``: the set of ranks
whose input it has been reduced over. Copying moves the value; reducing two
values of the same chunk unites their contributions, and a contribution
counted twice is an error. At the end every (chunk, rank) pair of the
postcondition must hold its chunk, and for combining collectives the
reduction over every contributor.

Algorithms (step or timed) are executed as SCCL §3.3 defines a run; for
k-synchronous ones the sends of every step are also checked against the
bandwidth relation B, scaled by the step's rounds. With a topology, every
transfer must also have a route.

In-switch reductions (:class:`~simcoll.algorithm.SwitchReduction`) are executed
the same way: at the start of its batch the switch reads the chunk at each
source, combines the values (a contribution counted twice is an error, as for
``reduce`` transfers), and at the end of the batch every destination's copy is
replaced by the result. With a topology the switch must exist, be a switch that
declares ``reduce`` (several sources) and ``multicast`` (several destinations),
and be reachable from every source and reach every destination without
passing through another GPU. They are not counted against SCCL's bandwidth
relation, which describes rank-to-rank links only.

Programs are executed executor by executor: sends and receives match in FIFO
order per connection, dependencies wait, and a stall with work left is a
deadlock (reported with the cycle of waits when there is one). Accesses to the
same buffer slot from different executors must be ordered by dependencies or
messages (vector clocks); otherwise the result could depend on timing, and the
race is reported. Connection rules: on a rank, one executor sends to a given
peer on a given channel, and one receives from it.

Use :func:`check` for the list of problems, :func:`verify` to raise.
"""

from __future__ import annotations

import contextvars
import functools
import time
from collections import defaultdict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import networkx as nx
import numpy as np

from .algorithm import (
    Algorithm,
    BandwidthConstraint,
    OrbitTable,
    RelationIndex,
    SwitchReduction,
    SwitchReductionTable,
    Transfer,
    TransferTable,
)
from .arrays import flatten, ragged_indices
from .collectives import Collective
from .errors import OptionError, TimeLimitError, VerificationError
from .limits import MAX_TRANSFERS
from .machines import Machine, as_machine
from .program import RECEIVES, SENDS, Executor, Instruction, Program, Ref
from .routes import Routes, bandwidth_relation, routes_of
from .topology import SWITCH_KINDS, Topology

Value = tuple[int, frozenset[int]]
MAX_PROBLEMS = 20


def check(
    schedule: Algorithm | Program, machine: Machine | str | None = None, *, time_limit_s: float | None = None
) -> list[str]:
    """Every problem of a schedule, as sentences naming what is at fault.

    An Algorithm is replayed step by step (module docstring) and checked
    against its collective's postcondition and SCCL's bandwidth relation B;
    a Program is executed executor by executor. With a machine, every
    transfer or connection must also have a route on its topology.

    Parameters
    ----------
    schedule : Algorithm or Program
        The schedule to check.
    machine : Machine or str, optional
        The machine (or a topology spec) the schedule runs on; without one,
        routes are not checked and B is the Algorithm's own, if any.
    time_limit_s : float, optional
        Wall-clock limit of the check, in seconds (default: none).
        :func:`simcoll.simulator.simulate` passes its own: verifying and
        simulating share it.

    Returns
    -------
    list of str
        The problems found (at most ``MAX_PROBLEMS`` per kind); empty when
        the schedule is correct.

    Raises
    ------
    TypeError
        When ``schedule`` is neither an Algorithm nor a Program.
    TopologyError
        When ``machine`` is not a Machine or a topology spec.
    OptionError
        When ``time_limit_s`` is not a positive number of seconds.
    TimeLimitError
        When ``time_limit_s`` seconds pass before the check ends (a schedule
        of millions of transfers and a problem send it to the symbolic run).

    See Also
    --------
    verify : the same check, raising on the first problem list.

    References
    ----------
    .. [1] Cai et al., "Synthesizing Optimal Collective Algorithms" (SCCL),
       PPoPP 2021, §3.2 (the pre- and postconditions and the relation B).

    Examples
    --------
    >>> from simcoll import generate
    >>> check(generate("ring", "ring:4", "allgather"), "ring:4")
    []
    >>> check(generate("ring", "ring:4", "allgather"), "ring:8")
    ['ring is for 4 ranks but ring:8 has 8']
    """
    topology = as_machine(machine).topology if machine is not None else None
    if not isinstance(schedule, (Algorithm, Program)):
        raise TypeError(f"cannot verify a {type(schedule).__name__}")
    if time_limit_s is not None and not time_limit_s > 0:
        raise OptionError(f"time_limit_s must be a positive number of seconds, got {time_limit_s!r}")
    token = _DEADLINE.set(None if time_limit_s is None else _Deadline(f"verification of {schedule.name}", time_limit_s))
    try:
        if isinstance(schedule, Algorithm):
            return check_algorithm(schedule, topology)
        return check_program(schedule, topology)
    finally:
        _DEADLINE.reset(token)


@dataclass
class _Deadline:
    """A check's wall-clock limit (:func:`check`'s ``time_limit_s``)."""

    what: str
    time_limit_s: float
    started_s: float = field(default_factory=time.perf_counter)


#: The limit of the check running in this context, if it has one.
_DEADLINE: contextvars.ContextVar[_Deadline | None] = contextvars.ContextVar("simcoll_verify_deadline", default=None)


def _on_time(where: str, at: object) -> None:
    """Raise :class:`TimeLimitError` once the running check is past its limit
    (the message says it was ``where`` ``at``); nothing without a limit."""
    deadline = _DEADLINE.get()
    if deadline is not None and time.perf_counter() - deadline.started_s > deadline.time_limit_s:
        raise TimeLimitError(
            f"{deadline.what}: wall-clock limit of {deadline.time_limit_s:g} s reached {where} {at} "
            "(raise time_limit_s, or skip the check: verify=False, --no-verify)"
        )


def verify(schedule: Algorithm | Program, machine: Machine | str | None = None) -> None:
    """Check a schedule and raise if it has any problem.

    Parameters
    ----------
    schedule : Algorithm or Program
        The schedule to check.
    machine : Machine or str, optional
        The machine (or a topology spec) whose routes the schedule must use.

    Returns
    -------
    None

    Raises
    ------
    VerificationError
        Listing every problem :func:`check` found.

    See Also
    --------
    check : the problems as a list.

    Examples
    --------
    >>> from simcoll import generate
    >>> verify(generate("ring", "dgx1", "allreduce"), "dgx1")
    >>> verify(generate("ring", "ring:4", "allgather"), "ring:8")
    Traceback (most recent call last):
    ...
    simcoll.errors.VerificationError: ring is for 4 ranks but ring:8 has 8
    """
    problems = check(schedule, machine)
    if problems:
        raise VerificationError(problems)


def _initial_value(chunk: int, rank: int) -> Value:
    return (chunk, frozenset({rank}))


def _combine(a: Value, b: Value, where: str, problems: list[str]) -> Value:
    if a[0] != b[0]:
        problems.append(f"{where}: reduces chunk {a[0]} with chunk {b[0]}")
        return a
    twice = a[1] & b[1]
    if twice:
        problems.append(f"{where}: chunk {a[0]} would count the contribution of rank(s) {sorted(twice)} twice")
    return (a[0], a[1] | b[1])


def _check_post(collective: Collective, holds, problems: list[str]) -> None:
    """``holds(rank, chunk, out_index)`` gives the final value at that output slot."""
    for rank, layout in enumerate(collective.output_layout):
        for index, chunk in enumerate(layout):
            value = holds(rank, chunk, index)
            where = f"rank {rank} output[{index}]"
            if value is None:
                problems.append(f"{where}: chunk {chunk} never arrives")
            elif value[0] != chunk:
                problems.append(f"{where}: holds chunk {value[0]} instead of chunk {chunk}")
            elif collective.combining:
                expected = collective.contributors(chunk)
                if value[1] != expected:
                    missing = sorted(expected - value[1])
                    problems.append(f"{where}: chunk {chunk} lacks the contributions of rank(s) {missing}")


# ---------------------------------------------------------------------------
# Algorithms
# ---------------------------------------------------------------------------
def check_algorithm(algorithm: Algorithm, topology: Topology | None = None) -> list[str]:
    """Problems of an Algorithm (:func:`check`). Step schedules go through
    :func:`algorithm_is_correct` first, which holds the state in NumPy
    arrays; only when it finds a problem does the symbolic execution below
    run, to describe it."""
    coll = algorithm.collective
    if topology is not None and topology.num_ranks != coll.num_ranks:
        return [f"{algorithm.name} is for {coll.num_ranks} ranks but {topology.name} has {topology.num_ranks}"]
    if algorithm.orbit is not None:
        if orbit_is_correct(algorithm, topology):
            return []
        if len(algorithm.transfers) > MAX_TRANSFERS:
            return [
                f"{algorithm.name} is not correct (replayed on its first {algorithm.orbit.shift_ranks} ranks' "
                f"representatives); saying where needs its {len(algorithm.transfers):,} transfers one by one, more "
                "than simcoll lists (simcoll.limits.MAX_TRANSFERS): try it on fewer ranks"
            ]
    elif _fast_path_applies(algorithm) and algorithm_is_correct(algorithm, topology):
        return []
    return _check_algorithm_symbolic(algorithm, topology)


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


def _check_algorithm_symbolic(algorithm: Algorithm, topology: Topology | None = None) -> list[str]:
    """The general verifier: symbolic execution with a Python value per slot."""
    problems: list[str] = []
    coll = algorithm.collective
    if not coll.combining:
        for t in algorithm.transfers:
            if t.op == "reduce":
                problems.append(f"{t.describe()}: a {coll.name} combines nothing")
                break
    routes = routes_of(topology) if topology is not None else None
    if routes is not None:
        for t in algorithm.transfers:
            if not routes.connected(t.src, t.dst):
                problems.append(f"{t.describe()}: {topology.name} has no route from GPU {t.src} to GPU {t.dst}")
    n = len(algorithm.transfers)
    problems += _check_switch_reductions(algorithm.switch_reductions, coll, topology)
    state: dict[tuple[int, int], Value] = {(r, c): _initial_value(c, r) for c, r in coll.pre}
    captured: dict[int, Value | None] = {}
    for kind, label, batch in _events(algorithm):
        _on_time("replaying", label)
        switched = [i - n for i in batch if i >= n]
        batch = [i for i in batch if i < n]
        if kind == "read":
            for k in switched:
                captured[n + k] = _switch_read(algorithm.switch_reductions[k], state, problems)
            for i in batch:
                t = algorithm.transfers[i]
                captured[i] = state.get((t.src, t.chunk))
                if captured[i] is None:
                    later = _first_arrival(algorithm, t)
                    when = f"; it only arrives at {later}" if later else "; it never arrives there"
                    problems.append(f"{t.describe()}: rank {t.src} does not hold chunk {t.chunk} yet{when}")
        else:
            written = {(algorithm.transfers[i].dst, algorithm.transfers[i].chunk) for i in batch}
            _apply_updates([(algorithm.transfers[i], captured[i]) for i in batch], state, label, problems)
            for k in switched:
                r = algorithm.switch_reductions[k]
                for d in r.destinations:
                    if (d, r.chunk) in written:
                        problems.append(f"{r.describe()}: rank {d} receives chunk {r.chunk} twice at {label}")
                    written.add((d, r.chunk))
                    if captured[n + k] is not None:
                        state[(d, r.chunk)] = captured[n + k]
        if len(problems) >= MAX_PROBLEMS:
            return problems
    if algorithm.schedule == "steps":
        b = algorithm.bandwidth or (bandwidth_relation(topology, routes) if topology is not None else ())
        problems += _check_bandwidth(algorithm, b)
    _check_post(coll, lambda r, c, _i: state.get((r, c)), problems)
    return problems


def _switch_read(r: SwitchReduction, state, problems: list[str]) -> Value | None:
    """The value switch reduction ``r`` delivers: its sources' values combined."""
    value = None
    for s in r.sources:
        got = state.get((s, r.chunk))
        if got is None:
            problems.append(f"{r.describe()}: rank {s} does not hold chunk {r.chunk} yet")
            return None
        value = got if value is None else _combine(value, got, r.describe(), problems)
    return value


def _check_switch_reductions(
    reductions: Iterable[SwitchReduction], collective: Collective, topology: Topology | None
) -> list[str]:
    """Collective and topology rules for the in-switch reductions (module docstring)."""
    problems: list[str] = []
    reductions = list(reductions)
    if not reductions:
        return problems
    if not collective.combining:
        for r in reductions:
            if len(r.sources) > 1:
                problems.append(f"{r.describe()}: a {collective.name} combines nothing")
                break
    if topology is None:
        return problems
    names = {c.name: c for c in topology.components}
    reach = _SwitchReach(topology)
    for r in reductions:
        comp = names.get(r.switch)
        if comp is None or comp.kind not in SWITCH_KINDS:
            what = "no such component" if comp is None else f"a {comp.kind}, not a switch"
            problems.append(f"{r.describe()}: {topology.name} has {r.switch!r} as {what}")
            continue
        if len(r.sources) > 1 and not comp.reduce:
            problems.append(f"{r.describe()}: switch {r.switch} does not reduce (topology {topology.name})")
        if len(r.destinations) > 1 and not comp.multicast:
            problems.append(f"{r.describe()}: switch {r.switch} does not multicast (topology {topology.name})")
        for rank in r.sources:
            if not reach.connected(topology.gpu(rank).name, r.switch):
                problems.append(f"{r.describe()}: no path from GPU {rank} to {r.switch} in {topology.name}")
        for rank in r.destinations:
            if not reach.connected(r.switch, topology.gpu(rank).name):
                problems.append(f"{r.describe()}: no path from {r.switch} to GPU {rank} in {topology.name}")
        if len(problems) >= MAX_PROBLEMS:
            break
    return problems


class _SwitchReach:
    """Which GPUs reach a switch, and which a switch reaches, through links
    that enter no other GPU; cached per switch (a fabric switch reaches
    thousands of components, but a few switches serve every reduction)."""

    def __init__(self, topology: Topology):
        self.graph = topology.to_networkx()
        self.gpu_names = {g.name for g in topology.gpus}
        self._cache: dict[tuple[str, bool], set[str]] = {}

    def gpus(self, switch: str, forward: bool) -> set[str]:
        """The GPUs ``switch`` reaches (``forward``) or that reach it."""
        key = (switch, forward)
        if key not in self._cache:
            found: set[str] = set()
            seen, stack = {switch}, [switch]
            while stack:
                u = stack.pop()
                for v in self.graph.successors(u) if forward else self.graph.predecessors(u):
                    if v in self.gpu_names:
                        found.add(v)
                    elif v not in seen:
                        seen.add(v)
                        stack.append(v)
            self._cache[key] = found
        return self._cache[key]

    def connected(self, a: str, b: str) -> bool:
        """GPU ``a`` reaches switch ``b``, or switch ``a`` reaches GPU ``b``."""
        return a in self.gpus(b, False) if a in self.gpu_names else b in self.gpus(a, True)


def _events(algorithm: Algorithm) -> Iterable[tuple[str, str, list[int]]]:
    """("read" | "write", label, indices) in execution order: index ``i`` is
    transfer ``i``, and ``len(transfers) + k`` switch reduction ``k``. A step
    reads the state at its start and writes at its end; a timed transfer reads
    at ``start_s`` and writes at ``end_s``, arrivals preceding departures at
    equal times."""
    n = len(algorithm.transfers)
    if algorithm.schedule == "steps":
        by_step: dict[int, list[int]] = defaultdict(list)
        for k, r in enumerate(algorithm.switch_reductions):
            by_step[r.step].append(n + k)
        for i, t in enumerate(algorithm.transfers):
            by_step[t.step].append(i)
        for step in sorted(by_step):
            yield "read", f"step {step}", by_step[step]
            yield "write", f"step {step}", by_step[step]
        return
    moments: dict[tuple[float, int], list[int]] = defaultdict(list)
    for i, t in enumerate((*algorithm.transfers, *algorithm.switch_reductions)):
        moments[(t.end_s, 0)].append(i)
        moments[(t.start_s, 1)].append(i)
    for (moment, kind), batch in sorted(moments.items()):
        yield ("write" if kind == 0 else "read"), f"t={moment:.6g}s", batch


def _apply_updates(reads, state, label: str, problems: list[str]) -> None:
    copies: dict[tuple[int, int], list[tuple[Transfer, Value]]] = defaultdict(list)
    reduces: dict[tuple[int, int], list[tuple[Transfer, Value]]] = defaultdict(list)
    for t, value in reads:
        if value is None:
            continue
        (copies if t.op == "copy" else reduces)[(t.dst, t.chunk)].append((t, value))
    for slot, items in copies.items():
        values = {v for _, v in items}
        if len(values) > 1:
            problems.append(f"rank {slot[0]} receives different versions of chunk {slot[1]} at {label}")
        if slot in reduces:
            problems.append(f"rank {slot[0]} both copies and reduces into chunk {slot[1]} at {label}")
        state[slot] = items[0][1]
    for slot, items in reduces.items():
        base = state.get(slot)
        if base is None:
            problems.append(
                f"{items[0][0].describe()}: rank {slot[0]} holds no contribution of chunk {slot[1]} to reduce into"
            )
            continue
        for t, value in items:
            base = _combine(base, value, t.describe(), problems)
        state[slot] = base


def _first_arrival(algorithm: Algorithm, t: Transfer) -> str | None:
    for u in algorithm.transfers:
        if u.dst == t.src and u.chunk == t.chunk:
            return f"step {u.step}" if u.step is not None else f"t={u.end_s:.6g}s"
    return None


def _check_bandwidth(algorithm: Algorithm, relation: Iterable[BandwidthConstraint]) -> list[str]:
    """SCCL §3.3: in step s, at most b · r_s sends over the pairs of each (L, b).

    Counted for all steps at once (:meth:`RelationIndex.step_loads`); the
    problems come step by step, overloaded constraints first, then the sends
    over pairs no constraint of positive capacity covers."""
    relation = tuple(relation)
    if not relation or not algorithm.transfers:
        return []
    p = algorithm.num_ranks
    index = RelationIndex.of(relation, p)
    table = algorithm.table
    pairs = table.src.astype(np.int64) * p + table.dst
    rounds = list(algorithm.rounds_per_step)
    step, cons, counts = index.step_loads(table.step, pairs)
    found: list[tuple[int, int, int, str]] = []
    for s, i, n in zip(*(a.tolist() for a in (step, cons, counts)), strict=True):
        c = relation[i]
        if n > c.chunks_per_round * rounds[s]:
            label = c.label or f"pairs {sorted(c.links)}"
            found.append(
                (
                    s,
                    0,
                    i,
                    f"step {s}: {n} chunks over {label} exceed its {c.chunks_per_round} chunk(s) per round "
                    f"x {rounds[s]} round(s)",
                )
            )
    for k in np.flatnonzero(~index.covered(pairs)).tolist():
        t = algorithm.transfers[k]
        found.append((t.step, 1, k, f"{t.describe()}: no bandwidth between rank {t.src} and rank {t.dst}"))
    return [problem for *_, problem in sorted(found)]


# ---------------------------------------------------------------------------
# Programs
# ---------------------------------------------------------------------------
class _Run:
    """State of one symbolic execution of a Program.

    Happens-before is tracked with vector clocks (Lamport 1978; Mattern 1989):
    ``clock[g][h]`` is how many steps of executor ``h`` executor ``g`` knows to
    have finished, through program order, dependencies and messages, followed
    transitively across ranks (a step on rank 0 can be ordered after another
    step on rank 0 only through a message chain via rank 1). An access races
    with an earlier access to the same slot by another executor unless the
    accessing executor's clock covers that access's step.

    Clocks are numpy vectors that are never changed in place once shared: a
    join builds a new vector, so a message or a dependency target keeps a
    reference (no copy), and an executor's own entry is carried beside the
    vector rather than bumped on every step. A join costs one vectorised
    ``maximum`` over the executors, and only dependencies and receives join.
    Snapshots are kept only for steps that some dependency names, and dropped
    once every dependent step has joined them.
    """

    def __init__(self, program: Program, problems: list[str]):
        self.program = program
        self.coll = program.collective
        self.problems = problems
        self.executors: list[tuple[int, Executor]] = [(rp.rank, e) for rp in program.ranks for e in rp.executors]
        self.index = {(r, e.id): i for i, (r, e) in enumerate(self.executors)}
        n = len(self.executors)
        self.pc = [0] * n
        longest = max((len(e.instructions) for _, e in self.executors), default=0)
        dtype = np.uint16 if longest < np.iinfo(np.uint16).max else np.int64
        zero = np.zeros(n, dtype=dtype)
        # clock[g][h] for h != g; entry g itself is stale: g's own count is pc[g] (+1 while a step runs)
        self.clock: list[np.ndarray] = [zero] * n
        # (executor, step) -> number of steps that depend on it, still to run
        self.dependents: dict[tuple[int, int], int] = defaultdict(int)
        for rank, e in self.executors:
            for ins in e.instructions:
                for dep_exec, dep_step in ins.deps:
                    self.dependents[(self.index[(rank, dep_exec)], dep_step)] += 1
        self.step_clock: dict[tuple[int, int], tuple[np.ndarray, int, int]] = {}
        # a message: (payload, sender's clock stamp, (sender, step))
        self.fifo: dict[tuple[int, int, int], deque] = defaultdict(deque)
        self.slots: dict[tuple[int, str, int], Value | None] = {}
        # slot -> (writer, step); slot -> {reader: step} for reads since that write
        self.last_write: dict[tuple[int, str, int], tuple[int, int]] = {}
        self.reads: dict[tuple[int, str, int], dict[int, int]] = defaultdict(dict)
        for rank, layout in enumerate(self.coll.input_layout):
            for i, chunk in enumerate(layout):
                self.slots[self._canon(rank, "input", i)] = _initial_value(chunk, rank)

    def _canon(self, rank: int, buffer: str, index: int) -> tuple[int, str, int]:
        alias = self.coll.inplace_alias(rank)
        if alias and buffer == alias[0]:
            return (rank, alias[1], alias[2] + index)
        return (rank, buffer, index)

    def where(self, g: int, step: int | None = None) -> str:
        rank, e = self.executors[g]
        step = self.pc[g] if step is None else step
        op = e.instructions[step].op if step < len(e.instructions) else "end"
        return f"rank {rank} executor {e.id} step {step} ({op})"

    # -- happens-before ---------------------------------------------------------------
    def _stamp(self, g: int) -> tuple[np.ndarray, int, int]:
        """Executor ``g``'s clock while it runs step ``pc[g]``: (vector, g, own count)."""
        return (self.clock[g], g, self.pc[g] + 1)

    def _join(self, g: int, stamp: tuple[np.ndarray, int, int]) -> None:
        """Executor ``g`` learns everything ``stamp`` knows (a new vector; shared ones stay intact)."""
        vector, source, own = stamp
        joined = np.maximum(self.clock[g], vector)
        if joined[source] < own:
            joined[source] = own
        self.clock[g] = joined

    def _ordered_before(self, g: int, other: int, other_step: int) -> bool:
        """Whether step ``other_step`` of executor ``other`` happened before ``g``'s current step."""
        return other == g or self.clock[g][other] > other_step

    # -- memory with race detection -------------------------------------------
    def read(self, g: int, rank: int, ref: Ref, count: int) -> list[Value | None]:
        owner = rank if ref.rank is None else ref.rank
        step = self.pc[g]
        values = []
        for k in range(count):
            slot = self._canon(owner, ref.buffer, ref.index + k)
            w = self.last_write.get(slot)
            if w and not self._ordered_before(g, w[0], w[1]):
                self.problems.append(
                    f"{self.where(g)}: reads rank {owner} {ref.buffer}[{ref.index + k}] racing with the write by "
                    f"{self.where(*w)}"
                )
            self.reads[slot][g] = step
            value = self.slots.get(slot)
            if value is None:
                self.problems.append(
                    f"{self.where(g)}: reads rank {owner} {ref.buffer}[{ref.index + k}], which holds no data"
                )
            values.append(value)
        return values

    def write(self, g: int, rank: int, ref: Ref, values: list[Value | None]) -> None:
        owner = rank if ref.rank is None else ref.rank
        step = self.pc[g]
        for k, value in enumerate(values):
            slot = self._canon(owner, ref.buffer, ref.index + k)
            w = self.last_write.get(slot)
            if w and not self._ordered_before(g, w[0], w[1]):
                self.problems.append(
                    f"{self.where(g)}: writes rank {owner} {ref.buffer}[{ref.index + k}] racing with the write by "
                    f"{self.where(*w)}"
                )
            for reader, read_step in self.reads[slot].items():
                if not self._ordered_before(g, reader, read_step):
                    self.problems.append(
                        f"{self.where(g)}: overwrites rank {owner} {ref.buffer}[{ref.index + k}] racing with the read "
                        f"by {self.where(reader, read_step)}"
                    )
            self.reads[slot] = {}
            self.last_write[slot] = (g, step)
            self.slots[slot] = value

    def reduce(self, g: int, a: list[Value | None], b: list[Value | None]) -> list[Value | None]:
        if not self.coll.combining:
            self.problems.append(f"{self.where(g)}: reduces in a {self.coll.name}, which combines nothing")
        return [
            None if x is None or y is None else _combine(x, y, self.where(g), self.problems)
            for x, y in zip(a, b, strict=True)
        ]

    # -- scheduling -----------------------------------------------------------------
    def connection_in(self, g: int) -> tuple[int, int, int]:
        rank, e = self.executors[g]
        return (e.recv_peer, rank, e.channel)

    def connection_out(self, g: int) -> tuple[int, int, int]:
        rank, e = self.executors[g]
        return (rank, e.send_peer, e.channel)

    def blocked_on(self, g: int) -> str | None:
        """Why executor ``g`` cannot run its next instruction, or None."""
        rank, e = self.executors[g]
        ins = e.instructions[self.pc[g]]
        for dep_exec, dep_step in ins.deps:
            d = self.index[(rank, dep_exec)]
            if self.pc[d] <= dep_step:
                return f"dep:{d}:{dep_step}"
        if ins.op in RECEIVES and not self.fifo[self.connection_in(g)]:
            return "recv"
        return None

    def run_one(self, g: int) -> None:
        rank, e = self.executors[g]
        step = self.pc[g]
        ins = e.instructions[step]
        for dep_exec, dep_step in ins.deps:
            target = (self.index[(rank, dep_exec)], dep_step)
            self._join(g, self.step_clock[target])
            self.dependents[target] -= 1
            if not self.dependents[target]:
                del self.step_clock[target], self.dependents[target]
        received = None
        if ins.op in RECEIVES:
            payload, sender_stamp, sender = self.fifo[self.connection_in(g)].popleft()
            self._join(g, sender_stamp)
            expected = 0 if ins.op == "wait" else ins.count
            if payload is None and ins.op != "wait" or payload is not None and len(payload) != expected:
                got = "a signal" if payload is None else f"{len(payload)} chunk(s)"
                want = "a signal" if ins.op == "wait" else f"{ins.count} chunk(s)"
                self.problems.append(f"{self.where(g)}: receives {got} from {self.where(*sender)} but expects {want}")
                payload = [None] * ins.count if payload is None else (payload + [None] * ins.count)[: ins.count]
            received = payload
        outgoing = self._execute(g, rank, ins, received)
        if ins.op in SENDS:
            self.fifo[self.connection_out(g)].append((outgoing, self._stamp(g), (g, step)))
        if (g, step) in self.dependents:
            self.step_clock[(g, step)] = self._stamp(g)
        self.pc[g] += 1

    def _execute(self, g: int, rank: int, ins: Instruction, received):
        op, n = ins.op, ins.count
        if op == "send":
            return self.read(g, rank, ins.src, n)
        if op == "recv":
            self.write(g, rank, ins.dst, received)
        elif op == "rcs":
            self.write(g, rank, ins.dst, received)
            return received
        elif op in ("rrc", "rrs", "rrcs"):
            combined = self.reduce(g, received, self.read(g, rank, ins.src, n))
            if op != "rrs":
                self.write(g, rank, ins.dst, combined)
            if op != "rrc":
                return combined
        elif op in ("copy", "put", "get"):
            self.write(g, rank, ins.dst, self.read(g, rank, ins.src, n))
        elif op == "reduce":
            self.write(g, rank, ins.dst, self.reduce(g, self.read(g, rank, ins.dst, n), self.read(g, rank, ins.src, n)))
        elif op == "load_reduce":
            values = self.read(g, rank, ins.sources[0], n)
            for source in ins.sources[1:]:
                values = self.reduce(g, values, self.read(g, rank, source, n))
            self.write(g, rank, ins.dst, values)
        return None  # signal sends no data; nop and wait do nothing

    def final(self, rank: int, chunk: int, index: int) -> Value | None:
        return self.slots.get(self._canon(rank, "output", index))


def check_program(program: Program, topology: Topology | None = None) -> list[str]:
    problems: list[str] = []
    coll = program.collective
    if topology is not None and topology.num_ranks != coll.num_ranks:
        return [f"{program.name} is for {coll.num_ranks} ranks but {topology.name} has {topology.num_ranks}"]
    problems += _check_buffers(program)
    problems += _check_connections(program, topology)
    if problems:
        return problems
    run = _Run(program, problems)
    n = len(run.executors)
    progress = True
    while progress and len(problems) < MAX_PROBLEMS:
        progress = False
        for g in range(n):
            rank, e = run.executors[g]
            _on_time("running executor (rank, id)", (rank, e.id))
            while run.pc[g] < len(e.instructions) and run.blocked_on(g) is None:
                run.run_one(g)
                progress = True
    unfinished = [g for g in range(n) if run.pc[g] < len(run.executors[g][1].instructions)]
    if unfinished and len(problems) < MAX_PROBLEMS:
        problems.append(_describe_deadlock(run, unfinished))
        return problems
    for (src, dst, chan), queue in run.fifo.items():
        if queue:
            problems.append(
                f"rank {src} sends {len(queue)} message(s) to rank {dst} on channel {chan} that are never received "
                f"(first by {run.where(*queue[0][2])})"
            )
    _check_post(coll, run.final, problems)
    return problems


def _check_buffers(program: Program) -> list[str]:
    problems = []
    coll = program.collective
    for rp in program.ranks:
        for buffer in ("input", "output"):
            need = coll.buffer_chunks(rp.rank, buffer)
            alias = coll.inplace_alias(rp.rank)
            if alias and alias[0] == buffer:
                continue  # lives inside the other buffer
            have = rp.buffers.get(buffer, 0)
            if have < need:
                problems.append(f"rank {rp.rank}: {buffer} buffer has {have} chunk(s), the collective needs {need}")
    return problems


def _check_connections(program: Program, topology: Topology | None) -> list[str]:
    """One sender and one receiver executor per (rank, peer, channel)."""
    problems = []
    routes = routes_of(topology) if topology is not None else None
    for rp in program.ranks:
        senders: dict[tuple[int, int], int] = {}
        receivers: dict[tuple[int, int], int] = {}
        for e in rp.executors:
            for peer, table, verb in ((e.send_peer, senders, "send to"), (e.recv_peer, receivers, "receive from")):
                if peer is None:
                    continue
                key = (peer, e.channel)
                if key in table:
                    problems.append(
                        f"rank {rp.rank}: executors {table[key]} and {e.id} both {verb} rank {peer} on channel {e.channel}"
                    )
                table[key] = e.id
            if routes is not None:
                problems += _check_routes(rp.rank, e, routes, topology.name)
    return problems


def _check_routes(rank: int, e: Executor, routes: Routes, topology_name: str) -> list[str]:
    """Data must be able to flow: to the send peer, from the receive peer, and
    between the ranks of every one-sided access."""
    flows = []
    if e.send_peer is not None:
        flows.append((rank, e.send_peer, "sends to"))
    if e.recv_peer is not None:
        flows.append((e.recv_peer, rank, "receives from"))
    for ins in e.instructions:
        if ins.op == "put" and ins.dst.rank not in (None, rank):
            flows.append((rank, ins.dst.rank, "puts into"))
        for ref in (ins.src, *ins.sources):
            if ins.op in ("get", "load_reduce") and ref is not None and ref.rank not in (None, rank):
                flows.append((ref.rank, rank, "reads from"))
    problems = []
    for src, dst, verb in dict.fromkeys(flows):
        if not routes.connected(src, dst):
            peer = dst if src == rank else src
            problems.append(
                f"rank {rank} executor {e.id} {verb} rank {peer}, but {topology_name} has no route from rank {src} to rank {dst}"
            )
    return problems


def _describe_deadlock(run: _Run, unfinished: list[int]) -> str:
    waits = nx.DiGraph()
    reasons = []
    for g in unfinished:
        why = run.blocked_on(g)
        if why is None:
            continue
        if why == "recv":
            src, dst, chan = run.connection_in(g)
            reasons.append(f"{run.where(g)} waits for a message from rank {src} on channel {chan}")
            for h, (rank, e) in enumerate(run.executors):
                if rank == src and e.send_peer == dst and e.channel == chan:
                    waits.add_edge(g, h)
        else:
            _, d, step = why.split(":")
            d = int(d)
            reasons.append(f"{run.where(g)} waits for {run.where(d, int(step))}")
            waits.add_edge(g, d)
    try:
        cycle = nx.find_cycle(waits)
        loop = " -> ".join(run.where(a) for a, _ in cycle)
        head = f"deadlock: dependency cycle {loop} -> back to the start"
    except nx.NetworkXNoCycle:
        head = "deadlock: executors wait for messages that are never sent"
    return head + "; " + "; ".join(reasons[:8]) + (" ..." if len(reasons) > 8 else "")

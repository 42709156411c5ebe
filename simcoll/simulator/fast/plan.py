"""Algorithm mode's static part: an :class:`~simcoll.algorithm.Algorithm`
turned into a :class:`Plan` - messages in schedule order, the reads that
wait for updates, and each rank pair's FIFO queue - before anything runs
(:mod:`.algorithm_mode` runs it; :mod:`.symmetry` reduces it to one block
of nodes)."""

from __future__ import annotations

import itertools
from array import array
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ...algorithm import Algorithm, SwitchReductionTable, Transfer, messages
from ...arrays import dense_numbers, flatten, packed_key, ragged_indices, stable_argsort
from ...errors import AlgorithmError
from ..routing import SwitchPath


@dataclass
class Plan:
    """The static part of a simulation: messages in schedule order (their
    first transfer's ``src``, ``dst``, ``chunk``, whether it reduces, its batch),
    the reads that must wait for updates, sorted by (slot, updates needed), and
    the FIFO message queue of each rank pair. Slot = chunk + rank × chunks."""

    src: array
    dst: array
    chunk: array
    reduce: bytearray
    batch: array
    labels: list[str]
    groups: dict[int, list[int]]  # messages of more than one transfer: the slots they update
    pending: array  # per message: reads still waiting
    wait_slot: np.ndarray
    wait_landed: np.ndarray
    wait_msg: np.ndarray
    queues: Mapping[tuple[int, int], Sequence[int]]  # per rank pair (or switch path): its messages in order
    describe: Callable[[int], str]
    fanout: Mapping[int, list[int]] = None  # type: ignore[assignment]  # switch reductions: slots they update
    write_slot: np.ndarray | None = None  # per message: the slot it updates, where not its chunk at its dst

    @property
    def messages(self) -> int:
        return len(self.src)


#: A per-slot table stays indexed by the slot itself (chunk + rank × chunks) unless it would have more than
#: this many entries per slot use: an Alltoall's P² chunks make P³ slots (a billion on 1,024 ranks), of which
#: its P² messages read and write 2P².
DENSE_SLOTS_PER_USE = 4


@dataclass(frozen=True)
class SlotNumbering:
    """Table indices for slots (chunk + rank × chunks): the slot itself
    where a table of every slot is small enough, else the slot's rank among
    the slots in use (:meth:`of`). Both keep the slots' order, so a table
    walked in index order meets the slots in the same order either way."""

    used: np.ndarray | None  # the slots in use, ascending; None where each slot is its own index
    count: int  # entries of a table indexed this way

    @classmethod
    def of(cls, uses: Sequence[np.ndarray], num_slots: int, lists: Sequence[list[int]] = ()) -> SlotNumbering:
        """The numbering for tables over the slots ``uses`` (arrays) and
        ``lists`` (lists, as a plan's groups hold them) name, out of ``num_slots``."""
        total = sum(len(u) for u in uses) + sum(map(len, lists))
        if num_slots <= DENSE_SLOTS_PER_USE * total:
            return cls(None, num_slots)
        listed = np.fromiter(itertools.chain.from_iterable(lists), dtype=np.int64)
        used = np.unique(np.concatenate([*(np.asarray(u, dtype=np.int64) for u in uses), listed]))
        return cls(used, len(used))

    def __call__(self, slots) -> np.ndarray:
        """The indices of ``slots`` (each one in use)."""
        slots = np.asarray(slots, dtype=np.int64)
        return slots if self.used is None else np.searchsorted(self.used, slots)

    def of_lists(self, lists: Mapping[int, list[int]]) -> Mapping[int, list[int]]:
        """``lists`` (per message, slots) with indices in place of slots
        (``lists`` itself where each slot is its own index)."""
        if self.used is None:
            return lists
        if isinstance(lists, SlotLists):
            return lists.with_slots(np.searchsorted(self.used, lists.slots))
        return {m: np.searchsorted(self.used, slots).tolist() for m, slots in lists.items()}

    def slots(self, indices: np.ndarray) -> np.ndarray:
        """The slots at ``indices``."""
        return indices if self.used is None else self.used[indices]


class SlotLists(Mapping):
    """Per message, the slots it updates, as CSR: ``messages`` (ascending),
    ``offsets`` (one more than messages) and ``slots``; what a plan's
    switch reductions update (``Plan.fanout``: a million messages on 1,024
    GPUs, where a dict of lists costs a second). Reads as the dict
    ``{message: [slot, ...]}``, built on the first lookup (the Python event
    handlers'); the compiled core and the wait tables read the arrays."""

    def __init__(self, messages: np.ndarray, offsets: np.ndarray, slots: np.ndarray) -> None:
        self.messages, self.offsets, self.slots = messages, offsets, slots
        self._dict: dict[int, list[int]] | None = None

    def with_slots(self, slots: np.ndarray) -> SlotLists:
        """The same messages with ``slots`` (one per slot, in order) in place of theirs."""
        return SlotLists(self.messages, self.offsets, slots)

    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def _as_dict(self) -> dict[int, list[int]]:
        if self._dict is None:
            flat, ends = self.slots.tolist(), self.offsets[1:].tolist()
            starts = self.offsets[:-1].tolist()
            self._dict = {m: flat[a:b] for m, a, b in zip(self.messages.tolist(), starts, ends, strict=True)}
        return self._dict

    def __getitem__(self, message: int) -> list[int]:
        return self._as_dict()[message]

    def get(self, message: int, default=None):  # type: ignore[override]
        return self._as_dict().get(message, default)

    def __contains__(self, message: object) -> bool:
        return message in self._as_dict()

    def __iter__(self) -> Iterator[int]:
        return iter(self.messages.tolist())

    def __len__(self) -> int:
        return len(self.messages)


def holds(present: np.ndarray, slots: np.ndarray) -> np.ndarray:
    """Per slot of ``slots``: whether it is in ``present`` (ascending): by a
    table of every slot where it is small, else by binary search."""
    if not len(present):
        return np.zeros(len(slots), dtype=bool)
    top = int(present[-1])
    if top < DENSE_SLOTS_PER_USE * (len(present) + len(slots)):
        table = np.zeros(top + 2, dtype=bool)  # (the last entry: every slot past the present ones)
        table[present] = True
        return table[np.minimum(slots, top + 1)]
    at = np.minimum(np.searchsorted(present, slots), len(present) - 1)
    return present[at] == slots


class QueueTable(Mapping):
    """Every rank pair's FIFO message queue in three arrays: the pairs
    (``src``, ``dst``, ascending by ``src × ranks + dst``), the messages
    grouped by pair, each pair's in schedule order, and where each pair's
    start (``starts``, one more than pairs). It reads as the dict
    ``{(src, dst): array("q") of messages}`` (a fresh array per lookup);
    the node-rotation search (:mod:`.symmetry`) reads the arrays - a
    million pairs on 1,024 GPUs, where a dict of arrays costs seconds."""

    def __init__(self, src: np.ndarray, dst: np.ndarray, starts: np.ndarray, messages: np.ndarray, ranks: int):
        self.src, self.dst, self.starts, self.messages, self.ranks = src, dst, starts, messages, ranks
        self.codes = src * ranks + dst  # ascending
        self._rows: dict[tuple[int, int], int] | None = None

    @classmethod
    def of(cls, pair_code: np.ndarray, ranks: int) -> QueueTable:
        """The queues of messages whose rank pairs are ``pair_code`` (per
        message in schedule order: ``src × ranks + dst``)."""
        span = ranks * ranks
        if len(pair_code) and span <= 4 * len(pair_code):  # the pairs numbered by a table of every pair
            codes, pair = dense_numbers(pair_code, span)
            messages = stable_argsort(pair)  # (by radix: a few thousand pairs' numbers fit 16 bits)
            starts = np.concatenate(([0], np.cumsum(np.bincount(pair, minlength=len(codes)))))
            return cls(codes // ranks, codes % ranks, starts.astype(np.int64), messages.astype(np.int64), ranks)
        messages = stable_argsort(pair_code)
        sorted_codes = pair_code[messages]
        first = np.flatnonzero(np.diff(sorted_codes, prepend=-1)) if len(messages) else np.zeros(0, dtype=np.int64)
        codes = sorted_codes[first].astype(np.int64)
        starts = np.append(first, len(messages)).astype(np.int64)
        return cls(codes // ranks, codes % ranks, starts, messages.astype(np.int64), ranks)

    def rows_of(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """The queue number of each pair (``src[i]``, ``dst[i]``), -1 where it has none."""
        codes = np.asarray(src, dtype=np.int64) * self.ranks + np.asarray(dst, dtype=np.int64)
        if not len(self.codes):
            return np.full(len(codes), -1, dtype=np.int64)
        at = np.minimum(np.searchsorted(self.codes, codes), len(self.codes) - 1)
        return np.where(self.codes[at] == codes, at, -1)

    def lengths(self) -> np.ndarray:
        return np.diff(self.starts)

    def __len__(self) -> int:
        return len(self.codes)

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return zip(self.src.tolist(), self.dst.tolist(), strict=True)

    def __getitem__(self, pair: tuple[int, int]) -> array:
        if self._rows is None:
            self._rows = {p: k for k, p in enumerate(self)}
        k = self._rows[pair]
        return array("q", self.messages[self.starts[k] : self.starts[k + 1]].tobytes())

    def queue_arrays(self) -> list[array]:
        """Every pair's queue, in pair order (as ``[self[p] for p in self]``)."""
        pieces = np.split(self.messages, self.starts[1:-1]) if len(self.codes) else []
        return [array("q", piece.tobytes()) for piece in pieces]

    def select(self, rows: np.ndarray, renumber: np.ndarray) -> QueueTable:
        """The queues ``rows`` (ascending), their messages renumbered by ``renumber``."""
        lengths = self.lengths()[rows]
        starts = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
        messages = renumber[self.messages[ragged_indices(self.starts[rows], lengths)]]
        return QueueTable(self.src[rows], self.dst[rows], starts, messages, self.ranks)


def _labels(keys, timed: bool) -> list[str]:
    return [f"t={k:.6g}" if timed else f"step {k}" for k in keys]


def schedule_order(algorithm: Algorithm) -> tuple[np.ndarray, np.ndarray, list[str], np.ndarray]:
    """The transfers of a schedule without in-switch reductions in message
    order: ``order`` (table rows: batch by batch, each batch's single
    transfers in order, then its contiguity groups), the batch of each, the
    batches' labels, and where each message starts (True per row)."""
    table = algorithm.table
    n = len(table.src)
    timed = algorithm.schedule != "steps"
    key = table.start_s if timed else table.step
    order = np.argsort(key, kind="stable")
    key = key[order]
    change = np.empty(n, dtype=bool)
    change[:1] = True
    change[1:] = key[1:] != key[:-1]
    batch = np.cumsum(change.view(np.uint8), dtype=np.int64)  # (a bool's cumsum casts slowly)
    batch -= 1
    labels = _labels(key[change].tolist(), timed)
    if table.group is not None:  # transfers in message order; each message's first transfer
        order, batch, first = _message_order(table, order, batch)
        return order, batch, labels, first
    return order, batch, labels, np.ones(n, dtype=bool)


def plan_vectorised(
    algorithm: Algorithm,
    num_chunks: int,
    present: np.ndarray,
    order_of: Callable[[Algorithm], tuple] = schedule_order,
) -> Plan:
    """Plan for schedules without in-switch reductions, with numpy: millions
    of transfers in seconds. A batch's messages are those of
    :func:`~simcoll.algorithm.messages` (its single transfers in order, then
    its contiguity groups in order of first appearance), as
    :func:`plan_grouped` builds them transfer by transfer. ``present``: the
    slots the collective starts with, ascending. ``order_of`` gives the
    :func:`schedule_order` (a caller that has it already passes it on)."""
    transfers, table = algorithm.transfers, algorithm.table
    n = len(transfers)
    order, batch, labels, first = order_of(algorithm)
    batches = len(labels)
    src, dst, chunk, reduce = table.src[order], table.dst[order], table.chunk[order], table.reduce[order]
    # updates of (src, chunk) landed in earlier batches = writes with the same slot and a smaller batch;
    # temporaries are let go as soon as they are used (17 M transfers on 1,024 GPUs: 136 MB each)
    read_slot = src * num_chunks
    read_slot += chunk
    write_slot = dst * num_chunks
    write_slot += chunk
    landed = landed_counts(read_slot, batch, write_slot, batch, batches, num_chunks * algorithm.num_ranks)
    unwaited = np.flatnonzero(landed == 0)  # reads of what the collective starts with
    missing = unwaited[~holds(present, read_slot[unwaited])]
    if missing.size:
        bad = transfers[int(order[missing[0]])]
        raise AlgorithmError(f"{algorithm.name}: {bad.describe()} before rank {bad.src} holds the chunk")
    del missing, unwaited
    waits = np.flatnonzero(landed)
    wait_slot, wait_landed = read_slot[waits], landed[waits]
    del read_slot, landed
    heads = np.flatnonzero(first)
    # per waiting read: its message (each transfer its own where no two are one message)
    wait_msg = waits if len(heads) == n else np.searchsorted(heads, waits, side="right") - 1
    pending = np.bincount(wait_msg, minlength=len(heads)).astype(np.int32)
    del waits
    groups = {}
    if len(heads) < n:  # messages of several transfers: the slots each updates; then one row per message
        sizes = np.diff(np.append(heads, n))
        for m in np.flatnonzero(sizes > 1).tolist():
            groups[m] = write_slot[heads[m] : heads[m] + sizes[m]].tolist()
        order, src, dst, chunk, reduce, batch = (c[heads] for c in (order, src, dst, chunk, reduce, batch))
    del write_slot, heads
    # 8 bytes a message in one array, not a list of Python ints (40) per pair: 17 M messages on 1,024 GPUs
    queues = QueueTable.of(src.astype(np.int64) * algorithm.num_ranks + dst, algorithm.num_ranks)
    return plan_of_columns(
        (src, dst, chunk, reduce, batch),
        labels,
        groups,
        pending,
        (wait_slot, wait_landed, wait_msg),
        queues,
        lambda m: transfers[int(order[m])].describe(),
    )


#: :func:`landed_counts` counts batch by batch (a Python loop over batches, NumPy within each) where
#: there are at least this many reads per batch and a table of every slot is small enough
#: (:data:`DENSE_SLOTS_PER_USE`); else it sorts.
LOOP_MIN_TRANSFERS_PER_BATCH = 256


def landed_counts(
    read_slot: np.ndarray,
    read_batch: np.ndarray,
    write_slot: np.ndarray,
    write_batch: np.ndarray,
    batches: int,
    num_slots: int,
) -> np.ndarray:
    """Per read (``read_slot``, ``read_batch``; reads in batch order): how
    many of the writes (``write_slot``, ``write_batch``; any order) update
    its slot in an earlier batch, as int32.

    Batch by batch over one counter per slot where that is cheap
    (:data:`LOOP_MIN_TRANSFERS_PER_BATCH`): each batch reads the counters,
    then adds its writes; a few thousand steps of millions of transfers
    cost a pass over the rows. Otherwise by sorting: the writes keyed by
    (slot, batch), sorted, and each read's count found by two binary
    searches. Both give the same counts (tested)."""
    n = len(read_slot)
    if n and n >= LOOP_MIN_TRANSFERS_PER_BATCH * batches and num_slots <= DENSE_SLOTS_PER_USE * (n + len(write_slot)):
        if len(write_batch) and (np.diff(write_batch) < 0).any():
            by_batch = stable_argsort(write_batch)
            write_slot, write_batch = write_slot[by_batch], write_batch[by_batch]
        read_at = np.searchsorted(read_batch, np.arange(batches + 1)).tolist()
        write_at = np.searchsorted(write_batch, np.arange(batches + 1)).tolist()
        count = np.zeros(num_slots, dtype=np.int32)
        landed = np.empty(n, dtype=np.int32)
        for b in range(batches):
            np.take(count, read_slot[read_at[b] : read_at[b + 1]], out=landed[read_at[b] : read_at[b + 1]])
            np.add.at(count, write_slot[write_at[b] : write_at[b + 1]], 1)
        return landed
    write_key = write_slot * (batches + 1)
    write_key += write_batch
    write_key.sort()
    # the reads in key order: each binary search then starts where the previous one ended (3x faster on
    # millions of reads than searching them in schedule order); a read's key with its batch sorts its key
    # without it too
    read_key = read_slot * (batches + 1)
    read_key += read_batch
    by_read = np.argsort(read_key, kind="stable")
    sorted_key = read_key[by_read]
    del read_key
    landed_sorted = np.searchsorted(write_key, sorted_key)
    sorted_key -= read_batch[by_read]
    landed_sorted -= np.searchsorted(write_key, sorted_key)
    del write_key, sorted_key
    landed = np.empty(n, dtype=np.int32)
    landed[by_read] = landed_sorted
    return landed


def plan_switched(algorithm: Algorithm, num_chunks: int, present: np.ndarray) -> Plan:
    """:func:`plan_grouped`'s plan for schedules with in-switch reductions,
    with NumPy (a million reductions and a million transfers on 1,024 GPUs
    in seconds; field for field the same: tested). Per batch, the switch
    reductions come first, in the schedule's order, each one message that
    reads its chunk at every source and updates it at every destination;
    then the batch's transfer messages as :func:`plan_vectorised` orders
    them. ``present``: the slots the collective starts with, ascending."""
    transfers, table, reductions = algorithm.transfers, algorithm.table, algorithm.switch_reductions
    n, s, ranks = len(transfers), len(reductions), algorithm.num_ranks
    timed = algorithm.schedule != "steps"
    key_type = np.float64 if timed else np.int64
    t_key = (table.start_s if timed else table.step) if n else np.zeros(0, dtype=key_type)
    if isinstance(reductions, SwitchReductionTable):  # (step-scheduled)
        r_key = reductions.step.astype(key_type)
    else:
        r_key = np.array([r.start_s if timed else r.step for r in reductions], dtype=key_type)
    keys = np.unique(np.concatenate((t_key, r_key)))
    batches = len(keys)
    # transfer messages, in schedule order (plan_vectorised)
    order = np.argsort(t_key, kind="stable")
    t_batch = np.searchsorted(keys, t_key[order])
    if table is not None and table.group is not None:
        order, t_batch, first = _message_order(table, order, t_batch)
    else:
        first = np.ones(n, dtype=bool)
    t_msg = np.cumsum(first) - 1  # per transfer (in message order): its transfer message
    heads = np.flatnonzero(first)
    head_batch = t_batch[heads]
    # switch messages: by batch, in the schedule's order within one
    r_batch = np.searchsorted(keys, r_key)
    r_order = np.argsort(r_batch, kind="stable")
    r_batch = r_batch[r_order]
    # one numbering for both: per batch, its switch messages, then its transfer messages
    switched = np.bincount(r_batch, minlength=batches)
    base = np.concatenate(([0], np.cumsum(switched + np.bincount(head_batch, minlength=batches))[:-1]))
    r_first = np.searchsorted(r_batch, np.arange(batches))
    switch_msg = base[r_batch] + np.arange(s) - r_first[r_batch]  # per switch message (sorted)
    t_first = np.searchsorted(head_batch, np.arange(batches))
    transfer_msg = base[head_batch] + switched[head_batch] + np.arange(len(heads)) - t_first[head_batch]
    total = s + len(heads)
    r_chunk, sources, n_sources, dests, n_dests, path_code, paths = _reduction_columns(reductions, r_order)
    t_chunk, t_src, t_dst = (table.chunk[order], table.src[order], table.dst[order]) if n else (np.zeros(0, int),) * 3
    # reads in message order (a reduction's sources in order, a message's transfers in order), and writes
    read_slot = np.concatenate((np.repeat(r_chunk, n_sources) + sources * num_chunks, t_chunk + t_src * num_chunks))
    read_msg = np.concatenate((np.repeat(switch_msg, n_sources), transfer_msg[t_msg]))
    read_batch = np.concatenate((np.repeat(r_batch, n_sources), t_batch))
    read_entry = np.concatenate((np.repeat(np.arange(s), n_sources), -1 - np.arange(n)))  # (what to name)
    by_msg = np.argsort(read_msg, kind="stable")
    read_slot, read_msg, read_batch, read_entry = (c[by_msg] for c in (read_slot, read_msg, read_batch, read_entry))
    r_write, t_write = np.repeat(r_chunk, n_dests) + dests * num_chunks, t_chunk + t_dst * num_chunks
    write_slot = np.concatenate((r_write, t_write))
    write_batch = np.concatenate((np.repeat(r_batch, n_dests), t_batch))
    landed = landed_counts(read_slot, read_batch, write_slot, write_batch, batches, num_chunks * ranks)
    missing = np.flatnonzero(landed == 0)
    missing = missing[~holds(present, read_slot[missing])]
    if missing.size:
        k = int(missing[0])
        entry = int(read_entry[k])
        if entry >= 0:
            rank = int(read_slot[k] // num_chunks)
            culprit = reductions[int(r_order[entry])]
            raise AlgorithmError(f"{algorithm.name}: {culprit.describe()} before rank {rank} holds the chunk")
        bad = transfers[int(order[-1 - entry])]
        raise AlgorithmError(f"{algorithm.name}: {bad.describe()} before rank {bad.src} holds the chunk")
    waits = landed > 0
    wait_slot, wait_landed, wait_msg = read_slot[waits], landed[waits], read_msg[waits]
    pending = np.bincount(wait_msg, minlength=total).astype(np.int32)
    # per message: src, dst, chunk, reduce, batch
    src, dst, chunk = (np.empty(total, dtype=np.int64) for _ in range(3))
    reduce, batch = np.zeros(total, dtype=bool), np.empty(total, dtype=np.int64)
    src_first = np.concatenate(([0], np.cumsum(n_sources)[:-1]))
    dst_first = np.concatenate(([0], np.cumsum(n_dests)[:-1]))
    src[switch_msg], dst[switch_msg], chunk[switch_msg] = sources[src_first], dests[dst_first], r_chunk
    batch[switch_msg] = r_batch
    if n:
        src[transfer_msg], dst[transfer_msg], chunk[transfer_msg] = t_src[heads], t_dst[heads], t_chunk[heads]
        reduce[transfer_msg], batch[transfer_msg] = table.reduce[order][heads], head_batch
    sizes = np.diff(np.append(heads, n))
    groups = {int(transfer_msg[m]): t_write[heads[m] : heads[m] + sizes[m]].tolist() for m in np.flatnonzero(sizes > 1)}
    fanout = SlotLists(switch_msg, np.concatenate(([0], np.cumsum(n_dests))), r_write)
    # queues keyed as plan_grouped keys them, in order of their first message
    code = np.empty(total, dtype=np.int64)
    code[switch_msg] = ranks * ranks + path_code
    if n:
        code[transfer_msg] = t_src[heads] * ranks + t_dst[heads]
    by_code = np.argsort(code, kind="stable")
    sorted_code = code[by_code]
    starts = np.flatnonzero(np.concatenate(([True], sorted_code[1:] != sorted_code[:-1])))
    ends = np.append(starts[1:], total)
    path_of = [SwitchPath(*path) for path in paths]
    queues = {}
    for k in np.argsort(by_code[starts], kind="stable").tolist():  # by first message
        c = int(sorted_code[starts[k]])
        key = (path_of[c - ranks * ranks], None) if c >= ranks * ranks else divmod(c, ranks)
        queues[key] = array("q", by_code[starts[k] : ends[k]].tobytes())
    kind = np.zeros(total, dtype=np.int64)  # describe: reduction i as i, transfer message j as -1 - j
    kind[switch_msg] = np.arange(s)
    kind[transfer_msg] = -1 - np.arange(len(heads))

    def describe(m: int) -> str:
        k = int(kind[m])
        return reductions[int(r_order[k])].describe() if k >= 0 else transfers[int(order[heads[-1 - k]])].describe()

    return plan_of_columns(
        (src, dst, chunk, reduce, batch),
        _labels(keys.tolist(), timed),
        groups,
        pending,
        (wait_slot, wait_landed, wait_msg),
        queues,
        describe,
        fanout,
    )


def plan_of_columns(messages, labels, groups, pending, waits, queues, describe, fanout=None, write_slot=None) -> Plan:
    """A :class:`Plan` from NumPy columns: per message ``(src, dst, chunk,
    reduce, batch)`` and its pending reads, and the waits ``(slot, landed,
    message)``; the per-message columns stored compactly (4 bytes, 1 for
    ``reduce``), as the event handlers read them."""
    src, dst, chunk, reduce, batch = messages
    wait_slot, wait_landed, wait_msg = waits
    return Plan(
        src=array("i", src.astype(np.int32).tobytes()),
        dst=array("i", dst.astype(np.int32).tobytes()),
        chunk=array("i", chunk.astype(np.int32).tobytes()),
        reduce=bytearray(reduce.astype(bool).tobytes()),
        batch=array("i", batch.astype(np.int32).tobytes()),
        labels=labels,
        groups=groups,
        pending=array("i", pending.astype(np.int32).tobytes()),
        wait_slot=wait_slot,
        wait_landed=wait_landed,
        wait_msg=wait_msg,
        queues=queues,
        describe=describe,
        fanout=fanout,
        write_slot=write_slot,
    )


def _reduction_columns(reductions, order: np.ndarray) -> tuple:
    """The switch reductions, in ``order``, as columns: chunk, sources
    (flat) and their counts, destinations (flat) and their counts, and a
    code per (switch, sources, destinations) with those triples in code
    order (codes in order of first appearance). Generators reuse a few
    source and destination tuples for millions of reductions: each distinct
    tuple is read once."""
    if isinstance(reductions, SwitchReductionTable):
        return _table_reduction_columns(reductions, order)
    tuples: dict[tuple[int, ...], int] = {}
    by_id: dict[int, int] = {}  # the same tuple object again: no hashing of its ranks (the tuples stay alive)
    paths: dict[tuple[str, int, int], int] = {}
    n = len(reductions)
    chunk, src_code, dst_code, path_code = (np.empty(n, dtype=np.int64) for _ in range(4))
    for i, r in enumerate(reductions):
        a = by_id.get(id(r.sources))
        if a is None:
            a = by_id[id(r.sources)] = tuples.setdefault(r.sources, len(tuples))
        b = by_id.get(id(r.destinations))
        if b is None:
            b = by_id[id(r.destinations)] = tuples.setdefault(r.destinations, len(tuples))
        chunk[i], src_code[i], dst_code[i] = r.chunk, a, b
        path_code[i] = paths.setdefault((r.switch, a, b), len(paths))
    expand = _expander(list(tuples))
    src_code, dst_code = src_code[order], dst_code[order]
    listed = list(tuples)
    triples = [(switch, listed[a], listed[b]) for switch, a, b in paths]
    return (chunk[order], *expand(src_code), *expand(dst_code), path_code[order], triples)


def _expander(tuples: Sequence[tuple[int, ...]]) -> Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """A function of codes (indices into ``tuples``): the ranks of those
    tuples one after another, and how many each has."""
    lengths = np.fromiter((len(t) for t in tuples), dtype=np.int64, count=len(tuples))
    _, flat = flatten(tuples)
    starts = np.cumsum(lengths) - lengths

    def expand(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return flat[ragged_indices(starts[codes], lengths[codes])], lengths[codes]

    return expand


def _table_reduction_columns(table: SwitchReductionTable, order: np.ndarray) -> tuple:
    """:func:`_reduction_columns` of a :class:`SwitchReductionTable`, from its columns."""
    sets = table.rank_sets
    expand = _expander(sets)

    # a path is a distinct (switch, sources, destinations) by content: equal entries listed twice are one
    same_set = np.array(_first_equal(sets), dtype=np.int64)
    same_switch = np.array(_first_equal(table.switches), dtype=np.int64)
    n_sets = max(len(sets), 1)
    triple = (same_switch[table.switch] * n_sets + same_set[table.sources]) * n_sets + same_set[table.destinations]
    distinct, first, inverse = np.unique(triple, return_index=True, return_inverse=True)
    by_first = np.argsort(first, kind="stable")  # codes in order of first appearance, as the object path numbers them
    rank = np.empty(len(distinct), dtype=np.int64)
    rank[by_first] = np.arange(len(distinct))
    path_code = rank[inverse.ravel()]
    rows = first[by_first]
    triples = [(table.switches[int(table.switch[r])], sets[int(table.sources[r])], sets[int(table.destinations[r])])
               for r in rows.tolist()]  # fmt: skip
    return (table.chunk[order], *expand(table.sources[order]), *expand(table.destinations[order]), path_code[order],
            triples)  # fmt: skip


def _first_equal(items: Sequence) -> list[int]:
    """Per item, the index of the first item equal to it."""
    first: dict = {}
    return [first.setdefault(item, i) for i, item in enumerate(items)]


def _groups_are_single(table, order: np.ndarray, batch: np.ndarray, grouped: np.ndarray) -> bool:
    """Whether no two grouped transfers share (batch, group, src, dst, op),
    so that every message is one transfer, told from one sorted integer
    key (:func:`~simcoll.arrays.packed_key`); False also where the key
    would not fit (the caller then sorts the fields themselves)."""
    rows = order[grouped]
    if not len(rows):
        return True
    key = packed_key((batch[grouped], table.group[rows], table.src[rows], table.dst[rows], table.reduce[rows]))
    if key is None:
        return False
    key.sort()
    return not (key[1:] == key[:-1]).any()


def _message_order(table, order: np.ndarray, batch: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The transfers (``order``: table rows in schedule order, ``batch`` per
    position) rearranged into messages: per batch, the single transfers in
    order, then each contiguity group - same group, rank pair and op - in
    order of its first transfer, its transfers in order
    (:func:`~simcoll.algorithm.messages`); with the new order, its batches,
    and where each message starts."""
    n = len(order)
    position = np.arange(n, dtype=np.int64)
    grouped = table.has_group[order]
    if _groups_are_single(table, order, batch, grouped):  # each message one transfer (one_message_per_step)
        if grouped.all() or not grouped.any():  # (batch ascends already)
            return order, batch, np.ones(n, dtype=bool)
        rearranged = np.lexsort((position, grouped, batch))
        return order[rearranged], batch[rearranged], np.ones(n, dtype=bool)
    # a group is one (batch, group, src, dst, op); its first transfer's position names it (single
    # transfers sort apart, whatever their group column holds)
    fields = (
        table.reduce[order].astype(np.int64),
        table.dst[order],
        table.src[order],
        table.group[order],
        grouped.astype(np.int64),
        batch,
    )
    by_group = np.lexsort(fields)
    keys = np.stack([f[by_group] for f in fields])
    starts = np.ones(n, dtype=bool)
    starts[1:] = (keys[:, 1:] != keys[:, :-1]).any(axis=0)
    # lexsort is stable: a group's first row in by_group is its first position
    leader = np.maximum.accumulate(np.where(starts, np.arange(n), 0))
    first_pos = np.empty(n, dtype=np.int64)
    first_pos[by_group] = by_group[leader]
    first_pos = np.where(grouped, first_pos, position)
    rearranged = np.lexsort((position, first_pos, grouped, batch))
    first_pos = first_pos[rearranged]
    first = np.ones(n, dtype=bool)
    first[1:] = first_pos[1:] != first_pos[:-1]
    return order[rearranged], batch[rearranged], first


def plan_grouped(algorithm: Algorithm, num_chunks: int, present: np.ndarray) -> Plan:
    """Plan built batch by batch and transfer by transfer, for schedules
    with in-switch reductions (each one message, fanning out to every
    destination) and contiguity groups (a group on one rank pair in one
    batch is one message); :func:`plan_vectorised` builds the same plan for
    schedules without switch reductions."""
    present = set(present.tolist())
    written: dict[int, int] = {}
    timed = algorithm.schedule != "steps"
    src, dst, chunk, batch, pending = array("i"), array("i"), array("i"), array("i"), array("i")
    reduce = bytearray()
    firsts: list[Transfer] = []
    groups: dict[int, list[Transfer]] = {}
    wait_slot, wait_landed, wait_msg = [], [], []
    queues: dict[tuple[int, int], list[int]] = {}
    keys = []
    fanout: dict[int, list[int]] = {}
    for transfers_of_batch, switched in algorithm.schedule_batches():
        first_of_batch = (transfers_of_batch or switched)[0]
        keys.append(first_of_batch.start_s if timed else first_of_batch.step)
        writes = []
        for r in switched:
            m = len(src)
            need = 0
            for s in r.sources:
                slot = r.chunk + s * num_chunks
                landed = written.get(slot, 0)
                if landed:
                    wait_slot.append(slot)
                    wait_landed.append(landed)
                    wait_msg.append(m)
                    need += 1
                elif slot not in present:
                    raise AlgorithmError(f"{algorithm.name}: {r.describe()} before rank {s} holds the chunk")
            fanout[m] = [r.chunk + d * num_chunks for d in r.destinations]
            writes += fanout[m]
            src.append(r.sources[0])
            dst.append(r.destinations[0])
            chunk.append(r.chunk)
            reduce.append(False)
            batch.append(len(keys) - 1)
            pending.append(need)
            firsts.append(r)
            queues.setdefault((SwitchPath(r.switch, r.sources, r.destinations), None), []).append(m)
        for message in messages(transfers_of_batch):
            m = len(src)
            first = message[0]
            need = 0
            for t in message:
                slot = t.chunk + t.src * num_chunks
                landed = written.get(slot, 0)
                if landed:
                    wait_slot.append(slot)
                    wait_landed.append(landed)
                    wait_msg.append(m)
                    need += 1
                elif slot not in present:
                    raise AlgorithmError(f"{algorithm.name}: {t.describe()} before rank {t.src} holds the chunk")
                writes.append(t.chunk + t.dst * num_chunks)
            if len(message) > 1:
                groups[m] = [t.chunk + t.dst * num_chunks for t in message]
            src.append(first.src)
            dst.append(first.dst)
            chunk.append(first.chunk)
            reduce.append(first.op == "reduce")
            batch.append(len(keys) - 1)
            pending.append(need)
            firsts.append(first)
            queues.setdefault((first.src, first.dst), []).append(m)
        for slot in writes:
            written[slot] = written.get(slot, 0) + 1
    return Plan(
        src=src,
        dst=dst,
        chunk=chunk,
        reduce=reduce,
        batch=batch,
        labels=_labels(keys, timed),
        groups=groups,
        pending=pending,
        wait_slot=np.array(wait_slot, dtype=np.int64),
        wait_landed=np.array(wait_landed, dtype=np.int32),
        wait_msg=np.array(wait_msg, dtype=np.int64),
        queues={key: array("q", msgs) for key, msgs in queues.items()},
        describe=lambda m: firsts[m].describe(),
        fanout=fanout,
    )

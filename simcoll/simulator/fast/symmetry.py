"""Node-rotation symmetry of a schedule on a cluster, and the quotient that
Algorithm mode simulates in its place (issue 15: flows that are identical by
symmetry are settled together).

A cluster of ``k`` identical nodes (ranks node-major, ``g`` per node) is
*rotation-symmetric* for a schedule when shifting every rank by one node,
``π(r) = (r + g) mod n``, maps the schedule onto itself:

- every rank pair's FIFO message queue onto the queue of ``(π(a), π(b))``,
  message for message (same batch, same op), with one chunk permutation
  ``σ`` (the chunk of the image is ``σ`` of the chunk), so that every read
  of slot ``(rank, chunk)`` after its ``c``-th update maps to a read of
  ``(π(rank), σ(chunk))`` after its ``c``-th update;
- every route onto the image pair's route: the same α and bandwidth, and
  resources that correspond one to one (same kind, capacity and switch
  parameters, same weights) under one resource permutation ``π_R``.

Then the max-min fair rates, and so every time, are the same for a message
and its image (max-min fairness has a unique solution, which inherits every
symmetry of the problem). The simulator runs only the *representatives*,
the messages sent from node 0: a representative's route uses, in place of
each resource, the representative of that resource's orbit under ``π_R``,
and a message landing at a rank of node ``j`` updates the slot of node 0
that ``π^-j`` maps it to (the update its image ``π^-j(m)`` makes there at the
same time). Each real resource carries exactly the flows of the
representatives that use its orbit when every orbit has ``k`` resources and
no route uses two resources of one orbit; where that fails (a resource every
node shares, such as a spine link), the schedule is simulated in full.

An Algorithm held as an :class:`~simcoll.algorithm.OrbitTable` names its
rotation: :func:`orbit_rotation` checks the routes under its shift (or a
multiple of it) and builds the quotient from its representatives, never
listing the other transfers (NCCL's rings on 4,096 GPUs: 268 million).
Otherwise the rotation is looked for on the schedule's transfer table
(:func:`table_rotation`: only the representatives' waits are counted, and
the plan of every message is built only for a timeline), and on a plan
already built (:func:`node_rotation`) where a timeline built one first, or
the table cannot show it (contiguity groups). A run that records
utilisation copies each orbit representative's intervals onto every
resource of its orbit afterwards (:func:`spread_utilisation`).

The shifts tried are :func:`~simcoll.topology_symmetry.rank_shifts`: whole
nodes on a cluster; on one node or a machine without nodes, the rank
rotations that map the machine onto itself (the cyclic shift of ``ring:N``,
a torus's row shift, a DGX board's other half), where "node 0" above reads
as the first ``shift`` ranks. The route check is the same either way.

The quotient runs ``k`` times fewer messages. Its times equal the full
simulation's (``tests/test_sim_symmetry.py`` checks them bit for bit on
small clusters): the max-min arithmetic sums, per resource and filling
round, the weights of the flows that freeze, which is exact in either order
for the binary-fraction weights of node-symmetric routes.
"""

from __future__ import annotations

import dataclasses
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from ...algorithm import Algorithm
from ...arrays import flatten, ragged_indices
from ...topology_symmetry import rank_shifts
from ..network import FluidNetwork
from ..routing import Resource, RouteIdTable
from .plan import Plan, QueueTable, SlotNumbering, holds, landed_counts, plan_of_columns, schedule_order

Route = tuple[float, float, tuple[tuple[Resource, float], ...]]


@dataclass(frozen=True)
class NodeRotation:
    """A node-rotation symmetry of a plan on a machine (module docstring):
    shifting every rank by ``shift_ranks`` (a whole number of nodes) maps the
    schedule onto itself, and ``order`` shifts come back to the start.

    ``representatives`` are the messages sent from the first
    ``shift_ranks`` ranks, in schedule order; ``rep_of[m]`` is the index,
    among them, of the message that ``m`` is an image of; ``write_slot``
    the slot of those first ranks that a representative's landing stands
    for; ``routes`` the representatives' rank pairs with their routes over
    orbit representatives; ``orbits``, per resource that stands for its
    orbit (by number), every resource of the orbit, itself first (what a
    quotient run's utilisation is copied onto: :func:`spread_utilisation`)."""

    order: int
    shift_ranks: int
    representatives: np.ndarray
    find_rep_of: Callable[[], np.ndarray] = field(repr=False, compare=False)
    write_slot: np.ndarray
    routes: dict[tuple[int, int], Route]
    orbits: dict[int, tuple[int, ...]] = field(default_factory=dict, repr=False, compare=False)

    @cached_property
    def rep_of(self) -> np.ndarray:
        """Per message, the index among ``representatives`` of the message it
        is an image of; worked out when first asked for (a timeline's), not
        for every run: 17 M messages on 1,024 GPUs."""
        return self.find_rep_of()


def node_rotation(plan: Plan, net: FluidNetwork, num_ranks: int, num_chunks: int) -> NodeRotation | None:
    """The smallest node rotation under which ``plan`` on ``net``'s machine
    is symmetric (module docstring): a shift by one node, else by two
    (NCCL's rings enter alternate nodes at alternate GPUs), and so on up to
    half the nodes (on one node, the machine's rank rotations); None where
    the machine has no rotation or no shift maps the schedule onto itself.
    Plans with contiguity groups or in-switch reductions are not looked at
    (None)."""
    shifts = rank_shifts(net.machine.topology)
    if not shifts or plan.groups or plan.fanout or not plan.messages:
        return None
    if not isinstance(plan.queues, QueueTable):  # (rank pairs' queues only: no switch paths)
        return None
    for shift in shifts:
        rotation = _rotation(plan, net, num_ranks, num_chunks, shift)
        if rotation is not None:
            return rotation
    return None


def _rotation(plan: Plan, net: FluidNetwork, n: int, num_chunks: int, shift: int) -> NodeRotation | None:
    """:func:`node_rotation` for one shift of ``shift`` ranks."""
    columns = _Columns.of_plan(plan)
    image = _message_image(plan.queues, plan.messages, shift, n)
    same = None if image is None else _slot_permutation(columns, image, num_chunks, shift, n)
    if same is None or not _same_waits(plan, image):
        return None
    return _found(columns, plan.queues, net, n, num_chunks, shift, same)


def _found(
    columns: _Columns,
    queues: QueueTable,
    net: FluidNetwork,
    n: int,
    num_chunks: int,
    shift: int,
    same: tuple[np.ndarray, SlotNumbering],
) -> NodeRotation | None:
    """The rotation by ``shift`` ranks whose slot permutation ``same`` has
    been found, or None where the routes are not symmetric."""
    tau, index = same
    order = n // shift
    found = _orbit_routes(queues, net, shift, n, order)
    if found is None:
        return None
    routes, orbits = found
    representatives = np.flatnonzero(columns.src < shift)
    src = columns.src
    write_slot = _node0_slots(columns, representatives, tau, index, shift, num_chunks)
    return NodeRotation(
        order,
        shift,
        representatives,
        lambda: _rep_of(src, representatives, queues, shift, n),
        write_slot,
        routes,
        orbits,
    )


@dataclass(frozen=True)
class TableRotation:
    """What :func:`table_rotation` found: the rotation and the quotient plan,
    or None for both where no node rotation maps the schedule onto itself."""

    rotation: NodeRotation | None
    quotient: Plan | None


def table_rotation(
    algorithm: Algorithm,
    net: FluidNetwork,
    num_chunks: int,
    present: np.ndarray,
    order_of: Callable[[Algorithm], tuple] = schedule_order,
) -> TableRotation | None:
    """:func:`node_rotation` and :func:`quotient_plan` worked out from the
    schedule's transfer table, without the plan of every message: the same
    rotation and the same quotient (tested), at a fraction of the time and
    memory on 1,024 GPUs (a plan of 17 M messages is most of a comparison's
    memory).

    A shift must first keep every rank pair's number of messages (one
    count per pair, no sorting). Then the messages' queues give each
    message's image, and the batch, op and slot permutation τ are checked
    as :func:`node_rotation` checks them. Its last check, that a message
    and its image wait for as many updates of the slot they read, holds by
    itself here: the image is a permutation that keeps batches and maps the
    writes of a slot one to one onto the writes of its τ-image (τ is one to
    one), so only the representatives' waits are counted, from the writes
    into their node.

    None (the caller plans every message) where the symmetry cannot be
    looked for this way (a contiguity group of several transfers, in-switch
    reductions, one node), or where a representative reads a chunk before
    its rank holds it or the chunks held at the start are not symmetric
    under τ: the plan of every message then names the schedule's first
    such read. ``order_of`` gives the schedule's
    :func:`~.plan.schedule_order` (the caller's, to share with the plan it
    builds where this returns None)."""
    table = algorithm.table
    n, shifts = algorithm.num_ranks, rank_shifts(net.machine.topology)
    if not shifts or algorithm.switch_reductions or table is None or not len(table.src):
        return None
    counts = np.bincount(table.src * n + table.dst, minlength=n * n).reshape(n, n)
    shifts = [s for s in shifts if np.array_equal(np.roll(counts, (s, s), axis=(0, 1)), counts)]
    del counts
    if not shifts:  # (node_rotation's queue lengths would differ for every shift)
        return TableRotation(None, None)
    order, batch, labels, first = order_of(algorithm)
    if not first.all():  # a message of several transfers (a contiguity group)
        return None
    del first
    # ranks and chunks in 32 bits (they fit: simcoll.limits), 400 MB less for 17 M messages
    src, dst, chunk = (column[order].astype(np.int32) for column in (table.src, table.dst, table.chunk))
    columns = _Columns(src, dst, chunk, table.reduce[order], batch)
    del src, dst, chunk
    queues = QueueTable.of(columns.src.astype(np.int64) * n + columns.dst, n)
    for shift in shifts:
        image = _message_image(queues, len(order), shift, n)
        same = None if image is None else _slot_permutation(columns, image, num_chunks, shift, n)
        del image
        if same is None:
            continue
        if not _present_is_symmetric(present, *same, num_chunks):
            return None
        rotation = _found(columns, queues, net, n, num_chunks, shift, same)
        if rotation is None:
            continue
        quotient = _table_quotient(algorithm, columns, order, labels, queues, rotation, num_chunks, present)
        return None if quotient is None else TableRotation(rotation, quotient)
    return TableRotation(None, None)


def orbit_rotation(algorithm: Algorithm, net: FluidNetwork, num_chunks: int) -> TableRotation | None:
    """:func:`table_rotation` of an Algorithm held as an
    :class:`~simcoll.algorithm.OrbitTable`, from its representatives alone:
    the rotation is the orbit's (its shift, its chunk map σ), so what is
    left to check is the routes' symmetry (:func:`_orbit_routes`, over the
    images' rank pairs), and the quotient plan is the one
    :func:`table_rotation` builds from the images (tested): the
    representatives in step order, each read waiting for the updates of its
    slot, which are the landings of the representatives' images in the
    first ranks (one per representative, at slot ``(d, σ^-j(c))`` for a
    landing at rank ``j·s + d``). None where the routes are not symmetric
    (the caller then plans every message: the images listed, refused past
    :data:`~simcoll.limits.MAX_TRANSFERS`)."""
    orbit = algorithm.orbit
    n = orbit.num_ranks
    if not len(orbit):
        return None
    pairs = QueueTable.of(orbit.rank_pairs(n), n)
    # the orbit's shift, else a multiple of it (the routes of NDv2's rings repeat every other node)
    for factor in (f for f in range(1, orbit.order // 2 + 1) if orbit.order % f == 0):
        found = _orbit_routes(pairs, net, orbit.shift_ranks * factor, n, orbit.order // factor)
        if found is not None:
            break
    else:
        return None
    routes, orbits = found
    orbit = orbit.coarsened(factor) if factor > 1 else orbit
    shift, k, reps = orbit.shift_ranks, orbit.order, orbit.representatives
    order = np.argsort(reps.step, kind="stable")
    step = reps.step[order]
    first = np.ones(len(step), dtype=bool)
    first[1:] = step[1:] != step[:-1]
    batch = np.cumsum(first, dtype=np.int64) - 1
    labels = [f"step {t}" for t in step[first].tolist()]
    src, dst, chunk = reps.src[order], reps.dst[order], reps.chunk[order]
    write_slot = orbit.landing_slots()[order]  # (the slot of the first ranks each landing stands for)
    read_slot = src * num_chunks + chunk
    landed = landed_counts(read_slot, batch, write_slot, batch, len(labels), num_chunks * shift)
    rank, held = flatten(algorithm.collective.input_layout[:shift])
    if not holds(np.unique(rank * num_chunks + held), read_slot[landed == 0]).all():
        return None  # (a read of a chunk its rank never holds: the plan of every message names it)
    # per step, the representatives before it; the images of a step follow one another in the full order
    before = np.searchsorted(step, step[first])
    counts = np.diff(np.append(before, len(step)))
    position = k * np.repeat(before, counts) + (np.arange(len(step)) - np.repeat(before, counts))

    def rep_of() -> np.ndarray:
        """Per message of the full order: step by step, image after image, the representatives of the step."""
        per_step = np.repeat(counts, k * counts)
        start = np.repeat(before, k * counts)
        within = np.arange(k * len(step), dtype=np.int64) - np.repeat(k * before, k * counts)
        return start + within % per_step

    rotation = NodeRotation(k, shift, position, rep_of, write_slot, routes, orbits)
    waits = np.flatnonzero(landed)
    quotient = plan_of_columns(
        (src, dst, chunk, reps.reduce[order], batch),
        labels,
        {},
        np.bincount(waits, minlength=len(step)).astype(np.int32),
        (read_slot[waits], landed[waits], waits),
        QueueTable.of(src * n + dst, n),
        lambda m: reps[int(order[m])].describe(),
        write_slot=write_slot,
    )
    return TableRotation(rotation, quotient)


def _present_is_symmetric(present: np.ndarray, tau: np.ndarray, index: SlotNumbering, num_chunks: int) -> bool:
    """Whether every slot the schedule uses holds its chunk at the start
    exactly when its τ-image does (so that a representative's reads of
    what its rank starts with stand for its images')."""
    held = holds(present, index.slots(np.arange(index.count, dtype=np.int64)))
    used = tau >= 0
    return bool(np.array_equal(held[tau[used]], held[used]))


def _table_quotient(
    algorithm: Algorithm,
    columns: _Columns,
    order: np.ndarray,
    labels: list[str],
    queues: QueueTable,
    rotation: NodeRotation,
    num_chunks: int,
    present: np.ndarray,
) -> Plan | None:
    """:func:`quotient_plan` of the plan :func:`~.plan.plan_vectorised` would
    build, from the message columns: the representatives' waits counted from
    the writes into their node alone. None where a representative reads a
    chunk before its rank holds it (the full plan names the culprit)."""
    reps, shift = rotation.representatives, rotation.shift_ranks
    src, dst, chunk, batch = columns.src, columns.dst, columns.chunk, columns.batch
    into = np.flatnonzero(dst < shift)  # the writes a representative's read can wait for
    read_slot = src[reps].astype(np.int64) * num_chunks + chunk[reps]
    write_slot = dst[into].astype(np.int64) * num_chunks + chunk[into]
    landed = landed_counts(read_slot, batch[reps], write_slot, batch[into], len(labels), num_chunks * queues.ranks)
    if not holds(present, read_slot[landed == 0]).all():
        return None
    waits = np.flatnonzero(landed)
    renumber = np.full(len(order), -1, dtype=np.int64)
    renumber[reps] = np.arange(len(reps))
    transfers = algorithm.transfers
    rows = order[reps]
    return plan_of_columns(
        (src[reps], dst[reps], chunk[reps], columns.reduce[reps], batch[reps]),
        labels,
        {},
        np.bincount(waits, minlength=len(reps)).astype(np.int32),
        (read_slot[waits], landed[waits], waits),
        queues.select(np.flatnonzero(queues.src < shift), renumber),
        lambda m: transfers[int(rows[m])].describe(),
        write_slot=rotation.write_slot,
    )


def rebind_routes(rotation: NodeRotation, net: FluidNetwork, resources: list[tuple]) -> NodeRotation:
    """``rotation`` (found with another network of the same machine) over
    ``net``'s resources: ``net`` first creates ``resources`` (the other
    network's :meth:`~.network.FluidNetwork.resource_calls`, every pair's
    route included), so that each resource gets the same number, and each
    representative route is mapped resource by resource through the keys."""
    net.create_resources(resources)
    routes = {
        pair: (alpha, bandwidth, tuple((net.resource_with_key(res.key), w) for res, w in used))
        for pair, (alpha, bandwidth, used) in rotation.routes.items()
    }
    return dataclasses.replace(rotation, routes=routes)


def spread_utilisation(rotation: NodeRotation, net: FluidNetwork) -> None:
    """Copy a finished quotient run's utilisation onto every resource of
    each orbit: a real resource carries exactly the flows of the
    representatives that use its orbit, the images of those its orbit's
    representative carried, so its intervals are the same (module
    docstring). Rows stay in order of their end, each row's copies in
    the orbit's order."""
    record = net.utilisation
    resource = np.frombuffer(record.resource, dtype=np.int32).astype(np.int64)  # (copies: the arrays are refilled)
    if not len(resource):
        return
    members = np.arange(len(net.resources), dtype=np.int64)[:, None].repeat(rotation.order, axis=1)
    copies = np.ones(len(net.resources), dtype=np.int64)  # (a resource of no orbit keeps its rows)
    for first, orbit in rotation.orbits.items():
        members[first], copies[first] = orbit, len(orbit)
    copies = copies[resource]
    rows = np.repeat(np.arange(len(resource), dtype=np.int64), copies)
    nth = np.arange(len(rows), dtype=np.int64) - np.repeat(np.cumsum(copies) - copies, copies)
    spread = members[resource[rows], nth]
    columns = {name: np.array(getattr(record, name), dtype=np.dtype(getattr(record, name).typecode)) for name in
               ("start_s", "end_s", "rate_Bps", "capacity_Bps", "flows")}  # fmt: skip
    order = np.argsort(columns["end_s"][rows], kind="stable")
    for name, values in (("resource", spread), *((name, column[rows]) for name, column in columns.items())):
        column = getattr(record, name)
        data = np.ascontiguousarray(values[order], dtype=np.dtype(column.typecode))
        del column[:]
        column.frombytes(data.tobytes())


def quotient_plan(plan: Plan, rotation: NodeRotation) -> Plan:
    """The plan of the representatives alone: their messages, reads and
    queues, renumbered, with the node-0 slot each landing updates
    (``write_slot``)."""
    reps = rotation.representatives
    renumber = np.full(plan.messages, -1, dtype=np.int64)
    renumber[reps] = np.arange(len(reps))
    keep = renumber[plan.wait_msg] >= 0
    describe = plan.describe
    return dataclasses.replace(
        plan,
        src=_take(plan.src, reps),
        dst=_take(plan.dst, reps),
        chunk=_take(plan.chunk, reps),
        reduce=bytearray(np.frombuffer(bytes(plan.reduce), dtype=np.uint8)[reps].tobytes()),
        batch=_take(plan.batch, reps),
        pending=_take(plan.pending, reps),
        wait_slot=plan.wait_slot[keep],
        wait_landed=plan.wait_landed[keep],
        wait_msg=renumber[plan.wait_msg[keep]],
        queues=plan.queues.select(np.flatnonzero(plan.queues.src < rotation.shift_ranks), renumber),
        describe=lambda m: describe(int(reps[m])),
        write_slot=rotation.write_slot,
    )


def _take(column, index: np.ndarray):
    """``column`` (an :class:`array.array`) at ``index``, as an array of its type."""
    values = np.frombuffer(column, dtype=np.dtype(column.typecode))[index]
    return array(column.typecode, values.tobytes())


def _column(column) -> np.ndarray:
    return np.frombuffer(column, dtype=np.dtype(column.typecode)) if len(column) else np.zeros(0, np.int32)


@dataclass(frozen=True)
class _Columns:
    """Per message, in schedule order: what the symmetry is checked on."""

    src: np.ndarray
    dst: np.ndarray
    chunk: np.ndarray
    reduce: np.ndarray
    batch: np.ndarray

    @classmethod
    def of_plan(cls, plan: Plan) -> _Columns:
        reduce = np.frombuffer(bytes(plan.reduce), dtype=np.uint8)
        return cls(_column(plan.src), _column(plan.dst), _column(plan.chunk), reduce, _column(plan.batch))


def _message_image(queues: QueueTable, messages: int, g: int, n: int) -> np.ndarray | None:
    """Per message: the message at the same place of the rotated pair's
    queue, or None where some queue has no rotated twin of its length."""
    twin = queues.rows_of((queues.src + g) % n, (queues.dst + g) % n)
    lengths = queues.lengths()
    if (twin < 0).any() or not np.array_equal(lengths[twin], lengths):
        return None
    image = np.empty(messages, dtype=np.int64)
    image[queues.messages] = queues.messages[_at_same_place(queues, twin)]
    return image


def _at_same_place(queues: QueueTable, rows: np.ndarray) -> np.ndarray:
    """Per message of ``queues`` (in their order): where the message at its
    place in queue ``rows[k]`` (as long as its own queue ``k``) is stored."""
    return ragged_indices(queues.starts[rows], queues.lengths())


def _slot_permutation(
    columns: _Columns, image: np.ndarray, num_chunks: int, shift: int, n: int
) -> tuple[np.ndarray, SlotNumbering] | None:
    """The slot permutation τ under which every message and its image agree
    (batch, op, the slot read and the slot written), or None. τ is a table
    over the slots (``chunk + rank × chunks``) in the returned numbering:
    per slot, the index of the slot it maps to, -1 where no message reads
    or writes it.

    ``image`` (:func:`_message_image`) maps a message of rank pair (s, d) to
    one of ((s + ``shift``) mod ``n``, (d + ``shift``) mod ``n``), so τ moves
    every slot of rank r to rank r + ``shift``: what is left to check is that
    each slot gets one chunk, the one its readers' and writers' images
    carry (one gather of the images' chunks, not of their slots)."""
    batch, reduce = columns.batch, columns.reduce
    if not (np.array_equal(batch[image], batch) and np.array_equal(reduce[image], reduce)):
        return None

    def slots(rank: np.ndarray, rows: np.ndarray | slice, width: type = np.int64) -> np.ndarray:
        """The slots (``rank × chunks + chunk``) of messages ``rows``, as ``width`` integers."""
        out = rank[rows].astype(width)
        out *= num_chunks
        out += columns.chunk[rows]
        return out

    # a shift that maps one slot to two mostly shows it in the first messages already (NCCL's rings
    # shifted by one node): those alone first, before the slots of every message
    first, images = slice(0, len(image) // 64), image[: len(image) // 64]
    src, dst = columns.src, columns.dst
    if not _one_image_each(slots(src, first), slots(dst, first), slots(src, images), slots(dst, images)):
        return None
    del images
    # the slots of every message, 32-bit where they fit (17 M messages on 1,024 GPUs: 270 MB less)
    width = np.int32 if n * num_chunks < 2**31 else np.int64
    read, write = slots(src, slice(None), width), slots(dst, slice(None), width)
    index = SlotNumbering.of([read, write], int(max(read.max(), write.max())) + 1)
    if index.used is not None:
        read, write = index(read), index(write)
    chunk_image = columns.chunk[image].astype(width, copy=False)
    to_chunk = np.full(index.count, -1, dtype=width)  # per slot: the chunk of its image
    to_chunk[read] = chunk_image
    to_chunk[write] = chunk_image
    if not (np.array_equal(to_chunk[read], chunk_image) and np.array_equal(to_chunk[write], chunk_image)):
        return None  # one slot would map to two
    del read, write, chunk_image
    # per slot, where the slots of its image's rank start; (the image of a slot in use is in use)
    moved = ((np.arange(n, dtype=np.int64) + shift) % n) * num_chunks
    if index.used is None:  # each slot its own index: rank by rank, chunk by chunk
        tau = np.repeat(moved, num_chunks)[: index.count]
        tau += to_chunk
        tau[to_chunk < 0] = -1
        used = tau[tau >= 0]
    else:
        tau = np.full(index.count, -1, dtype=np.int64)
        at = np.flatnonzero(to_chunk >= 0)
        tau[at] = index(moved[index.slots(at) // num_chunks] + to_chunk[at])
        used = tau[at]
    del to_chunk
    if len(used) and np.bincount(used, minlength=index.count).max() > 1:  # τ must be one to one
        return None
    return tau, index


def _one_image_each(read: np.ndarray, write: np.ndarray, read_image: np.ndarray, write_image: np.ndarray) -> bool:
    """Whether no slot among ``read`` and ``write`` has two different images."""
    slots = np.concatenate((read, write))
    images = np.concatenate((read_image, write_image))
    by_slot = np.lexsort((images, slots))
    slots, images = slots[by_slot], images[by_slot]
    return not ((slots[1:] == slots[:-1]) & (images[1:] != images[:-1])).any()


def _same_waits(plan: Plan, image: np.ndarray) -> bool:
    """Whether every message and its image wait for as many reads, and for
    as many updates of the slot they read (a message reads one slot here:
    no contiguity groups). Implied where τ is one to one and the image a
    permutation, as here (:func:`table_rotation`); checked all the same."""
    pending = _column(plan.pending)
    if not np.array_equal(pending[image], pending):
        return False
    landed = np.zeros(plan.messages, dtype=np.int64)
    landed[plan.wait_msg] = plan.wait_landed
    return bool(np.array_equal(landed[image], landed))


def _orbit_routes(
    queues: QueueTable, net: FluidNetwork, g: int, n: int, k: int
) -> tuple[dict[tuple[int, int], Route], dict[int, tuple[int, ...]]] | None:
    """The node-0 pairs' routes over orbit representatives, and the orbits
    (:attr:`NodeRotation.orbits`); None where the routes are not
    rotation-symmetric, an orbit has fewer than ``k`` resources, or a route
    uses two resources of one orbit."""
    src, dst = queues.src, queues.dst
    table = net.route_id_table(src, dst)  # every pair's route as resource numbers (a million pairs on 1,024 GPUs)
    if table is None:  # pair by pair
        table = RouteIdTable.from_rows([net.route_ids(*pair) for pair in queues])
    twin = queues.rows_of((src + g) % n, (dst + g) % n)  # (every pair has one: _message_image)
    ids, weights = table.ids, table.weights
    if not (
        np.array_equal(table.alpha_s[twin], table.alpha_s)
        and np.array_equal(table.bandwidth_Bps[twin], table.bandwidth_Bps)
        and np.array_equal(ids[twin] >= 0, ids >= 0)
        and np.array_equal(weights[twin], weights)
    ):
        return None
    # (resource, the resource in its place on the twin route), each once
    used = ids >= 0
    resources = net.resources
    pairs = np.unique(ids[used] * len(resources) + ids[twin][used])
    resource, image = np.divmod(pairs, len(resources))
    if len(np.unique(resource)) != len(pairs) or len(np.unique(image)) != len(pairs):
        return None  # a resource with two images, or two with one
    image_of = dict(zip(resource.tolist(), image.tolist(), strict=True))
    for rid, rid2 in image_of.items():
        res, res2 = resources[rid], resources[rid2]
        if res.kind != res2.kind or res.capacity_Bps != res2.capacity_Bps or res.switch != res2.switch:
            return None
    canonical: dict[int, int] = {}
    orbits: dict[int, tuple[int, ...]] = {}
    for rid in image_of:
        if rid in canonical:
            continue
        orbit = [rid]
        nxt = image_of.get(rid)
        while nxt is not None and nxt != rid and len(orbit) <= k:
            orbit.append(nxt)
            nxt = image_of.get(nxt)
        if nxt != rid or len(orbit) != k:
            return None
        first = min(orbit)
        canonical.update(dict.fromkeys(orbit, first))
        orbits[first] = (first, *sorted(set(orbit) - {first}))
    out = {}
    for row in np.flatnonzero(src < g).tolist():
        length = int(used[row].sum())
        mapped = tuple(
            (resources[canonical[rid]], w)
            for rid, w in zip(ids[row, :length].tolist(), weights[row, :length].tolist(), strict=True)
        )
        if len({res.id for res, _ in mapped}) != len(mapped):
            return None
        out[(int(src[row]), int(dst[row]))] = (float(table.alpha_s[row]), float(table.bandwidth_Bps[row]), mapped)
    return out, orbits


def _rep_of(src: np.ndarray, representatives: np.ndarray, queues: QueueTable, g: int, n: int) -> np.ndarray:
    """Per message, the index among ``representatives`` (the messages sent
    from node 0, ascending) of the one it is the image of: the message at
    the same place of the queue of the pair rotated back to node 0."""
    index = np.full(len(src), -1, dtype=np.int64)
    index[representatives] = np.arange(len(representatives))
    shift = (queues.src // g) * g
    back = queues.rows_of(queues.src - shift, (queues.dst - shift) % n)  # there: the rotation maps queues onto queues
    rep_of = np.empty(len(src), dtype=np.int64)
    rep_of[queues.messages] = index[queues.messages[_at_same_place(queues, back)]]
    return rep_of


def _node0_slots(
    columns: _Columns, representatives: np.ndarray, tau: np.ndarray, index: SlotNumbering, g: int, num_chunks: int
) -> np.ndarray:
    """Per representative landing at a rank of node ``j``: the slot of node 0
    that ``τ^-j`` maps the slot it updates to (τ a table in ``index``'s numbering)."""
    inverse = np.full(len(tau), -1, dtype=np.int64)
    used = tau >= 0
    inverse[tau[used]] = np.flatnonzero(used)
    dst = columns.dst[representatives].astype(np.int64)
    slot = index(columns.chunk[representatives].astype(np.int64) + dst * num_chunks)
    steps = dst // g
    for j in range(1, int(steps.max(initial=0)) + 1):
        moving = steps >= j
        slot[moving] = inverse[slot[moving]]
    return index.slots(slot)

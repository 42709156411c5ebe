"""A workload: per rank, the operations of one training step and what each waits for.

A :class:`Workload` gives every rank a list of operations in the order the
rank issues them (as a framework enqueues kernels):

- :class:`Compute` - a kernel that takes ``duration_s``, or does ``flops``
  of arithmetic over ``memory_bytes`` of memory and takes the roofline time
  on the machine's GPU (:class:`~simcoll.cost_model.GpuParams`) divided by
  ``efficiency``, the fraction of peak it reaches;
- :class:`CollectiveOp` - a collective on a process group (``groups`` name
  the machine ranks of each), with the schedule it runs: ``"nccl"`` (the
  baseline NCCL picks, of the workload's NCCL release), a generator name
  (``"ring"``, ``"hiccl"``...) or a schedule file;
- :class:`Send` and :class:`Recv` - a point-to-point message to or from a
  peer rank.

Each operation runs on a **stream** of its rank (``"compute"`` by default
for compute, ``"comm"`` for communication): a stream runs its operations one
at a time in issue order, and different streams run at once, so
communication overlaps computation as frameworks arrange it (PyTorch DDP
reduces gradient buckets on a stream of their own). An operation also waits
for its ``deps``, named operations of the same rank.

Calls are matched across ranks as NCCL matches them: the ``k``-th
collective on a group at every member is one call, so they must agree on
the collective, its size and its schedule; the ``k``-th send from ``a`` to
``b`` is received by the ``k``-th receive at ``b`` from ``a``.
:func:`check_workload` checks all of this and returns the matching.

>>> w = Workload("two", programs=(
...     (Compute("fwd", duration_s=1e-3), CollectiveOp("ar", "allreduce", "all", 1 << 20, deps=("fwd",))),
...     (Compute("fwd", duration_s=2e-3), CollectiveOp("ar", "allreduce", "all", 1 << 20, deps=("fwd",))),
... ), groups={"all": (0, 1)})
>>> check_workload(w).calls
{('all', 0): ((0, 1), (1, 1))}
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from ..errors import WorkloadError

__all__ = ["CollectiveOp", "Compute", "Matching", "Op", "Recv", "Send", "Workload", "check_workload", "with_schedule"]


@dataclass(frozen=True)
class Compute:
    """A kernel of ``duration_s`` seconds, or of ``flops`` FLOPs over
    ``memory_bytes`` bytes timed by the GPU's roofline at ``efficiency``
    of its peak (module docstring)."""

    name: str
    duration_s: float | None = None
    flops: float = 0.0
    memory_bytes: float = 0.0
    efficiency: float = 1.0
    deps: tuple[str, ...] = ()
    stream: str = "compute"
    kind: ClassVar[str] = "compute"


@dataclass(frozen=True)
class CollectiveOp:
    """``collective`` on process group ``group`` for a ``size_bytes`` buffer
    (nccl-tests naming: an Allgather's is its gathered output), run by
    ``schedule``: ``"nccl"``, a generator name or a schedule file."""

    name: str
    collective: str
    group: str
    size_bytes: float
    schedule: str = "nccl"
    deps: tuple[str, ...] = ()
    stream: str = "comm"
    kind: ClassVar[str] = "collective"


@dataclass(frozen=True)
class Send:
    """``size_bytes`` to rank ``peer`` (received by its matching :class:`Recv`)."""

    name: str
    peer: int
    size_bytes: float
    deps: tuple[str, ...] = ()
    stream: str = "comm"
    kind: ClassVar[str] = "send"


@dataclass(frozen=True)
class Recv:
    """``size_bytes`` from rank ``peer`` (sent by its matching :class:`Send`)."""

    name: str
    peer: int
    size_bytes: float
    deps: tuple[str, ...] = ()
    stream: str = "comm"
    kind: ClassVar[str] = "recv"


Op = Compute | CollectiveOp | Send | Recv
OP_TYPES = {cls.kind: cls for cls in (Compute, CollectiveOp, Send, Recv)}


@dataclass(frozen=True)
class Workload:
    """Per rank (``programs[r]``), its operations in issue order; the
    process groups by name (machine ranks); the samples one step trains
    (for throughput); the NCCL release ``"nccl"`` schedules follow
    (:func:`simcoll.nccl.versions.as_setup`; default the newest)."""

    name: str
    programs: tuple[tuple[Op, ...], ...]
    groups: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    samples_per_step: float | None = None
    nccl: str | None = None
    description: str = ""

    @property
    def num_ranks(self) -> int:
        return len(self.programs)

    @property
    def num_ops(self) -> int:
        return sum(len(p) for p in self.programs)


def with_schedule(workload: Workload, schedule: str) -> Workload:
    """``workload`` with every collective run by ``schedule`` (a what-if:
    ``"nccl"``, a generator's name or a schedule file).

    >>> w = Workload("w", ((CollectiveOp("ar", "allreduce", "g", 8),),), {"g": (0,)})
    >>> with_schedule(w, "ring").programs[0][0].schedule
    'ring'
    """
    programs = tuple(
        tuple(dataclasses.replace(op, schedule=schedule) if isinstance(op, CollectiveOp) else op for op in program)
        for program in workload.programs
    )
    return dataclasses.replace(workload, programs=programs)


@dataclass(frozen=True)
class Matching:
    """How a checked workload's operations meet across ranks.

    ``calls[(group, k)]``: the ``k``-th collective on ``group``, as
    ``(rank, op index)`` of every member in the group's order.
    ``sends[(src, dst, k)]``: the ``k``-th message from ``src`` to ``dst``,
    as ``((src, send index), (dst, recv index))``."""

    calls: dict[tuple[str, int], tuple[tuple[int, int], ...]]
    sends: dict[tuple[int, int, int], tuple[tuple[int, int], tuple[int, int]]]


def check_workload(workload: Workload, num_ranks: int | None = None) -> Matching:
    """Check ``workload`` (and that it fits ``num_ranks`` GPUs, when given)
    and match its calls across ranks (:class:`Matching`). Raises
    :class:`~simcoll.errors.WorkloadError` naming the first fault: an
    operation of an unknown type or with a bad field, a name used twice on
    a rank, a dependency on nothing, a cycle of dependencies and stream
    order, a group with a rank outside the workload or the machine, a
    collective at a rank outside its group, members that disagree on a
    call, an unmatched send or receive."""
    if not isinstance(workload, Workload):
        raise WorkloadError(f"expected a Workload, got a {type(workload).__name__}")
    where = f"workload {workload.name!r}"
    p = workload.num_ranks
    if p == 0:
        raise WorkloadError(f"{where}: no ranks")
    from ..limits import MAX_WORKLOAD_OPERATIONS

    if workload.num_ops > MAX_WORKLOAD_OPERATIONS:
        raise WorkloadError(f"{where}: {workload.num_ops:,} operations, more than simcoll holds "
                            f"(simcoll.limits.MAX_WORKLOAD_OPERATIONS = {MAX_WORKLOAD_OPERATIONS:,})")  # fmt: skip
    if num_ranks is not None and p > num_ranks:
        raise WorkloadError(f"{where}: has {p} ranks but the machine has {num_ranks} GPUs")
    if workload.samples_per_step is not None and not _positive(workload.samples_per_step):
        raise WorkloadError(f"{where}: samples_per_step must be positive, got {workload.samples_per_step!r}")
    groups = _checked_groups(workload, where)
    member_index = {g: {r: i for i, r in enumerate(ranks)} for g, ranks in groups.items()}
    per_group: dict[str, dict[int, list[int]]] = {g: {} for g in groups}
    per_pair: dict[tuple[int, int], tuple[list[int], list[int]]] = {}
    for rank, program in enumerate(workload.programs):
        names = _check_program(program, rank, p, where)
        for i, op in enumerate(program):
            here = f"{where}: rank {rank} {op.kind} {op.name!r}"
            if isinstance(op, CollectiveOp):
                if op.group not in groups:
                    raise WorkloadError(
                        f"{here}: unknown group {op.group!r} (groups: {', '.join(sorted(groups)) or 'none'})"
                    )
                if rank not in member_index[op.group]:
                    raise WorkloadError(f"{here}: rank {rank} is not in group {op.group!r} {list(groups[op.group])}")
                per_group[op.group].setdefault(rank, []).append(i)
            elif isinstance(op, (Send, Recv)):
                pair = (rank, op.peer) if isinstance(op, Send) else (op.peer, rank)
                per_pair.setdefault(pair, ([], []))[isinstance(op, Recv)].append((rank, i))  # type: ignore[arg-type]
        del names
    calls = _match_calls(workload, groups, per_group, where)
    sends = _match_sends(workload, per_pair, where)
    return Matching(calls, sends)


def _positive(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def _checked_groups(workload: Workload, where: str) -> dict[str, tuple[int, ...]]:
    groups = {}
    for name, ranks in dict(workload.groups).items():
        here = f"{where}: group {name!r}"
        if not isinstance(name, str) or not name:
            raise WorkloadError(f"{where}: a group name must be a non-empty string, got {name!r}")
        try:
            ranks = tuple(int(r) for r in ranks)
        except (TypeError, ValueError):
            raise WorkloadError(f"{here}: expected a list of ranks, got {ranks!r}") from None
        if not ranks:
            raise WorkloadError(f"{here}: has no ranks")
        bad = [r for r in ranks if not 0 <= r < workload.num_ranks]
        if bad:
            raise WorkloadError(f"{here}: rank {bad[0]} is outside the workload's ranks 0..{workload.num_ranks - 1}")
        if len(set(ranks)) != len(ranks):
            raise WorkloadError(f"{here}: lists a rank twice")
        groups[name] = ranks
    return groups


def _check_program(program, rank: int, p: int, where: str) -> dict[str, int]:
    """The names of ``rank``'s operations (index by name), each checked;
    raises for a cycle of dependencies and stream order."""
    names: dict[str, int] = {}
    for i, op in enumerate(program):
        if not isinstance(op, tuple(OP_TYPES.values())):
            raise WorkloadError(f"{where}: rank {rank} operation {i} is a {type(op).__name__}, not an operation")
        here = f"{where}: rank {rank} {op.kind} {op.name!r}"
        if not isinstance(op.name, str) or not op.name:
            raise WorkloadError(f"{where}: rank {rank} operation {i} needs a name")
        if op.name in names:
            raise WorkloadError(f"{here}: the name is used twice on rank {rank}")
        names[op.name] = i
        if not isinstance(op.stream, str) or not op.stream:
            raise WorkloadError(f"{here}: stream must be a non-empty name, got {op.stream!r}")
        _check_fields(op, rank, p, here)
    # dependencies name operations of this rank; with stream order they must form no cycle
    edges: list[list[int]] = [[] for _ in program]
    indegree = [0] * len(program)
    last_on: dict[str, int] = {}
    for i, op in enumerate(program):
        before = [names.get(d) for d in op.deps]
        if None in before:
            missing = op.deps[before.index(None)]
            raise WorkloadError(f"{where}: rank {rank} {op.kind} {op.name!r} depends on {missing!r}, "
                                f"which is no operation of rank {rank}")  # fmt: skip
        if op.stream in last_on:
            before.append(last_on[op.stream])
        last_on[op.stream] = i
        for b in before:
            edges[b].append(i)
            indegree[i] += 1
    ready = [i for i, d in enumerate(indegree) if d == 0]
    seen = 0
    while ready:
        i = ready.pop()
        seen += 1
        for j in edges[i]:
            indegree[j] -= 1
            if indegree[j] == 0:
                ready.append(j)
    if seen != len(program):
        stuck = [program[i].name for i, d in enumerate(indegree) if d > 0][:4]
        raise WorkloadError(f"{where}: rank {rank}: operations {', '.join(map(repr, stuck))} wait on one another "
                            "in a cycle (their dependencies and the order of their streams)")  # fmt: skip
    return names


def _check_fields(op: Op, rank: int, p: int, here: str) -> None:
    if not isinstance(op.deps, tuple) or not all(isinstance(d, str) for d in op.deps):
        raise WorkloadError(f"{here}: deps must be a tuple of operation names, got {op.deps!r}")
    if isinstance(op, Compute):
        if op.duration_s is not None:
            if not (_positive(op.duration_s) or op.duration_s == 0):
                raise WorkloadError(f"{here}: duration_s must be a time >= 0, got {op.duration_s!r}")
        elif not (_positive(op.flops) or _positive(op.memory_bytes)):
            raise WorkloadError(f"{here}: give duration_s, or flops and/or memory_bytes (> 0) for the roofline")
        for key in ("flops", "memory_bytes"):
            value = getattr(op, key)
            if not (_positive(value) or value == 0):
                raise WorkloadError(f"{here}: {key} must be >= 0, got {value!r}")
        if not (_positive(op.efficiency) and op.efficiency <= 1):
            raise WorkloadError(f"{here}: efficiency is a fraction of peak in (0, 1], got {op.efficiency!r}")
        return
    if not _positive(op.size_bytes):
        raise WorkloadError(f"{here}: size_bytes must be positive, got {op.size_bytes!r}")
    if isinstance(op, CollectiveOp):
        if not isinstance(op.collective, str) or not isinstance(op.schedule, str) or not op.schedule:
            raise WorkloadError(f"{here}: collective and schedule must be names")
        return
    if isinstance(op.peer, bool) or not isinstance(op.peer, int) or not 0 <= op.peer < p or op.peer == rank:
        raise WorkloadError(f"{here}: peer must be another rank of the workload (0..{p - 1}), got {op.peer!r}")


def _match_calls(workload: Workload, groups, per_group, where: str) -> dict:
    calls: dict[tuple[str, int], tuple[tuple[int, int], ...]] = {}
    for g, ranks in groups.items():
        issued = per_group[g]
        if not issued:
            continue
        counts = {r: len(issued.get(r, ())) for r in ranks}
        if len(set(counts.values())) > 1:
            most = max(counts, key=counts.get)
            least = min(counts, key=counts.get)
            raise WorkloadError(f"{where}: group {g!r}: rank {most} issues {counts[most]} collectives on it but rank "
                                f"{least} issues {counts[least]}")  # fmt: skip
        for k in range(counts[ranks[0]]):
            members = tuple((r, issued[r][k]) for r in ranks)
            first = workload.programs[ranks[0]][members[0][1]]
            for r, i in members[1:]:
                op = workload.programs[r][i]
                for key in ("collective", "size_bytes", "schedule"):
                    if getattr(op, key) != getattr(first, key):
                        raise WorkloadError(
                            f"{where}: group {g!r} call {k}: rank {ranks[0]} ({first.name!r}) has {key} "
                            f"{getattr(first, key)!r} but rank {r} ({op.name!r}) has {getattr(op, key)!r}"
                        )
            calls[(g, k)] = members
    return calls


def _match_sends(workload: Workload, per_pair, where: str) -> dict:
    sends = {}
    for (src, dst), (out, into) in per_pair.items():
        if len(out) != len(into):
            raise WorkloadError(f"{where}: rank {src} sends {len(out)} messages to rank {dst} but rank {dst} "
                                f"receives {len(into)} from it")  # fmt: skip
        for k, (s, r) in enumerate(zip(out, into, strict=True)):
            a, b = workload.programs[s[0]][s[1]], workload.programs[r[0]][r[1]]
            if a.size_bytes != b.size_bytes:
                raise WorkloadError(f"{where}: message {k} from rank {src} to rank {dst}: send {a.name!r} has "
                                    f"{a.size_bytes!r} bytes but receive {b.name!r} expects {b.size_bytes!r}")  # fmt: skip
            sends[(src, dst, k)] = (s, r)
    return sends

"""The instruction table: a :class:`~simcoll.program.Program` packed into flat
integer arrays, the form the GPU interpreter (``gpu/csrc/interp_core.h``), its
host-thread driver and the NumPy reference executor consume.

The layout follows what MSCCL's runtime builds from its XML (GC3 §6.1–6.2;
``src/include/msccl/msccl_struct.h`` of msccl-executor-nccl): one record per
thread block with its peers, channel and instruction range, one record per
step with its op, buffer references, count and dependency range, and the
dependency lists apart. simcoll adds the connection records the runtime
otherwise derives (sender rank, receiver rank, channel, FIFO slots, slot
bytes) and the source lists of multi-source ``load_reduce``.

Arrays (``int32``, one row per record, columns named by the ``*_COLUMNS``
tuples, which ``interp_core.h`` mirrors as ``SC_<TABLE>_<COLUMN>`` macros):

- ``executors``: the executors of every rank, rank-major, in each rank's
  order; a *global executor index* is a row of this array.
- ``instructions``: every executor's steps, contiguous per executor
  (``first``, ``count``). References are (rank, buffer id, chunk offset);
  rank ``-1`` means local, buffer ``-1`` means none.
- ``deps``: (global executor, step) pairs; an instruction's are rows
  ``dep_first .. dep_first + dep_count``.
- ``sources``: (rank, buffer, offset) of ``load_reduce`` operands.
- ``connections``: (src rank, dst rank, channel), the executors sending and
  receiving on it, its FIFO slots and the bytes of one slot (``max_count``
  tiles: the largest message on it).
- ``aliases``: per rank, (alias buffer, target buffer, chunk offset) for
  in-place collectives (:meth:`~simcoll.collectives.Collective.inplace_alias`),
  ``-1`` rows otherwise: executors map the alias buffer into the target.

:func:`to_table` packs and validates against :class:`TableLimits`
(``gpu/limits.yaml``); :func:`to_program` unpacks, so that
``to_program(to_table(p)) == p``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from simcoll.collectives import Collective
from simcoll.errors import AlgorithmError
from simcoll.files import load_yaml
from simcoll.program import INSTRUCTION_OPS, SENDS, Executor, Instruction, Program, RankProgram, Ref

LIMITS_FILE = Path(__file__).with_name("limits.yaml")

#: Op codes: the position in :data:`simcoll.program.INSTRUCTION_OPS`.
OP_CODES: dict[str, int] = {name: code for code, name in enumerate(INSTRUCTION_OPS)}
KIND_CODES: dict[str, int] = {"threadblock": 0, "host": 1}
#: Protocols the interpreter core implements (``SC_PROTO_*`` in interp_core.h).
#: LL128 runs with the Simple code path (its lines need 128-byte stores that
#: only a warp can issue together).
PROTOCOL_CODES: dict[str, int] = {"Simple": 0, "LL": 1}


def protocol_code(table: InstructionTable) -> int:
    """The interpreter's protocol code of a table (Simple for LL128)."""
    return PROTOCOL_CODES.get(str(table.attributes.get("protocol", "Simple")), PROTOCOL_CODES["Simple"])


EXECUTOR_COLUMNS = (
    "rank",
    "id",
    "channel",
    "kind",
    "send_peer",
    "recv_peer",
    "send_conn",
    "recv_conn",
    "first",
    "count",
)
INSTRUCTION_COLUMNS = (
    "op",
    "src_rank",
    "src_buffer",
    "src_offset",
    "dst_rank",
    "dst_buffer",
    "dst_offset",
    "count",
    "dep_first",
    "dep_count",
    "source_first",
    "source_count",
)
DEP_COLUMNS = ("executor", "step")
SOURCE_COLUMNS = ("rank", "buffer", "offset")
CONNECTION_COLUMNS = ("src", "dst", "channel", "sender", "receiver", "slots", "max_count", "slot_bytes")
ALIAS_COLUMNS = ("alias", "target", "offset")
#: Buffers every table names first, in this order (ids 0, 1, 2).
STANDARD_BUFFERS = ("input", "output", "scratch")

_INT32_MAX = int(np.iinfo(np.int32).max)
# Program attributes that are not structure; kept on the table for the round trip.
_ATTRIBUTES = (
    "name",
    "protocol",
    "instances",
    "tile_bytes",
    "topology",
    "metadata",
    "chunks_per_loop",
    "declared_channels",
    "min_bytes",
    "max_bytes",
    "outofplace",
    "reduce_op",
)


def column(columns: tuple[str, ...], name: str) -> int:
    """Index of ``name`` in ``columns`` (e.g. ``column(INSTRUCTION_COLUMNS, "op")``)."""
    return columns.index(name)


@dataclass(frozen=True)
class TableLimits:
    """What the interpreter accepts; see ``gpu/limits.yaml`` for sources."""

    max_channels: int
    max_executors_per_rank: int
    max_instructions_per_executor: int
    max_count: int
    max_deps_per_instruction: int
    max_sources_per_instruction: int
    default_tile_bytes: int
    default_fifo_slots: int

    @classmethod
    def load(cls, path: str | Path = LIMITS_FILE) -> TableLimits:
        """The limits in a YAML file (default: the shipped ``limits.yaml``)."""
        data = load_yaml(path, error=AlgorithmError)
        names = [f.name for f in fields(cls)]
        if not isinstance(data, Mapping):
            raise AlgorithmError(f"{path}: expected a mapping of {', '.join(names)}")
        missing = [n for n in names if n not in data]
        if missing:
            raise AlgorithmError(f"{path}: missing {', '.join(missing)}")
        values = {}
        for n in names:
            v = data[n]
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise AlgorithmError(f"{path}: {n} must be a positive integer, got {v!r}")
            values[n] = v
        return cls(**values)


_DEFAULT_LIMITS: TableLimits | None = None


def default_limits() -> TableLimits:
    """The shipped limits (read once)."""
    global _DEFAULT_LIMITS
    if _DEFAULT_LIMITS is None:
        _DEFAULT_LIMITS = TableLimits.load()
    return _DEFAULT_LIMITS


@dataclass(frozen=True, eq=False)
class InstructionTable:
    """A Program packed for the interpreter (see the module docstring).

    ``tile_bytes`` is the tile every chunk is cut into (the Program's
    ``tile_bytes``, else the limits' default); ``fifo_slots`` the slots of
    every connection.
    """

    collective: Collective
    buffer_names: tuple[str, ...]
    buffer_chunks: np.ndarray  # [num_ranks, num_buffers]; -1: the rank does not declare it
    aliases: np.ndarray  # [num_ranks, 3]
    executors: np.ndarray
    instructions: np.ndarray
    deps: np.ndarray
    sources: np.ndarray
    connections: np.ndarray
    tile_bytes: int
    fifo_slots: int
    attributes: Mapping[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return str(self.attributes.get("name", "program"))

    @property
    def num_ranks(self) -> int:
        return self.collective.num_ranks

    @property
    def num_executors(self) -> int:
        return int(self.executors.shape[0])

    def arrays(self) -> dict[str, np.ndarray]:
        """The packed arrays by name."""
        return {
            "buffer_chunks": self.buffer_chunks,
            "aliases": self.aliases,
            "executors": self.executors,
            "instructions": self.instructions,
            "deps": self.deps,
            "sources": self.sources,
            "connections": self.connections,
        }

    def equals(self, other: InstructionTable) -> bool:
        """Same collective, buffers, arrays, tiling and attributes."""
        if not isinstance(other, InstructionTable):
            return False
        same_arrays = all(
            a.shape == b.shape and np.array_equal(a, b)
            for a, b in zip(self.arrays().values(), other.arrays().values(), strict=True)
        )
        return (
            same_arrays
            and self.collective == other.collective
            and self.buffer_names == other.buffer_names
            and (self.tile_bytes, self.fifo_slots) == (other.tile_bytes, other.fifo_slots)
            and dict(self.attributes) == dict(other.attributes)
        )

    def executor_label(self, g: int) -> str:
        """``"rank R executor E"`` for global executor ``g``."""
        row = self.executors[g]
        return f"rank {row[0]} executor {row[1]}"

    def rows(self, name: str, index: int) -> dict[str, int]:
        """One record as a dict, e.g. ``table.rows("instructions", 0)``."""
        columns = {
            "executors": EXECUTOR_COLUMNS,
            "instructions": INSTRUCTION_COLUMNS,
            "deps": DEP_COLUMNS,
            "sources": SOURCE_COLUMNS,
            "connections": CONNECTION_COLUMNS,
            "aliases": ALIAS_COLUMNS,
        }[name]
        return dict(zip(columns, (int(v) for v in self.arrays()[name][index]), strict=True))


def _fail(program: Program, message: str) -> AlgorithmError:
    return AlgorithmError(f"{program.name}: {message}")


def _int32(program: Program, value: int, what: str) -> int:
    if not -1 <= value <= _INT32_MAX:
        raise _fail(program, f"{what} = {value} does not fit the table's int32 fields")
    return value


def to_table(
    program: Program,
    *,
    fifo_slots: int | None = None,
    tile_bytes: int | None = None,
    limits: TableLimits | None = None,
) -> InstructionTable:
    """Pack ``program`` into an :class:`InstructionTable`.

    Parameters
    ----------
    program : Program
        A structurally valid Program (its semantics are not verified here; see
        :func:`simcoll.verify.check`).
    fifo_slots : int, optional
        Slots per connection (default: the limits' ``default_fifo_slots``).
    tile_bytes : int, optional
        The tile (default: ``program.tile_bytes``, else the limits' default).
    limits : TableLimits, optional
        Default: :func:`default_limits`.

    Raises
    ------
    AlgorithmError
        Naming the rank, executor and step that break a limit, or two
        executors sharing one connection (GC3 §6.1: one sender and one
        receiver per connection).
    """
    if not isinstance(program, Program):
        raise AlgorithmError(f"to_table needs a Program, got {type(program).__name__}")
    lim = limits or default_limits()
    slots = lim.default_fifo_slots if fifo_slots is None else fifo_slots
    tile = tile_bytes if tile_bytes is not None else program.tile_bytes or lim.default_tile_bytes
    for label, value in (("fifo_slots", slots), ("tile_bytes", tile)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise _fail(program, f"{label} must be a positive integer, got {value!r}")
    coll = program.collective
    names = list(STANDARD_BUFFERS)
    for rp in program.ranks:
        for b in sorted(rp.buffers):
            if b not in names:
                names.append(b)
    buffer_id = {b: i for i, b in enumerate(names)}
    p = program.num_ranks
    buffer_chunks = np.full((p, len(names)), -1, dtype=np.int32)  # -1: not declared
    aliases = np.full((p, len(ALIAS_COLUMNS)), -1, dtype=np.int32)
    for rp in program.ranks:
        for b, n in rp.buffers.items():
            buffer_chunks[rp.rank, buffer_id[b]] = _int32(program, n, f"rank {rp.rank} buffer {b} chunks")
        alias = coll.inplace_alias(rp.rank)
        if alias is not None:
            aliases[rp.rank] = (buffer_id[alias[0]], buffer_id[alias[1]], alias[2])

    index: dict[tuple[int, int], int] = {}
    for rp in program.ranks:
        if len(rp.executors) > lim.max_executors_per_rank:
            raise _fail(
                program, f"rank {rp.rank} has {len(rp.executors)} executors, above {lim.max_executors_per_rank}"
            )
        for e in rp.executors:
            index[(rp.rank, e.id)] = len(index)

    # connections: (src, dst, channel) -> [sender, receiver, max count]
    conns: dict[tuple[int, int, int], list[int]] = {}
    for rp in program.ranks:
        for e in rp.executors:
            g = index[(rp.rank, e.id)]
            where = f"rank {rp.rank} executor {e.id}"
            if not 0 <= e.channel < lim.max_channels:
                raise _fail(program, f"{where}: channel {e.channel} is outside 0..{lim.max_channels - 1}")
            for key, side in (((rp.rank, e.send_peer, e.channel), 0), ((e.recv_peer, rp.rank, e.channel), 1)):
                if None in key:
                    continue
                entry = conns.setdefault(key, [-1, -1, 1])
                if entry[side] != -1:
                    verb = "send to" if side == 0 else "receive from"
                    other = next(eid for (r, eid), h in index.items() if h == entry[side] and r == rp.rank)
                    raise _fail(
                        program,
                        f"rank {rp.rank}: executors {other} and {e.id} both {verb} rank "
                        f"{key[1] if side == 0 else key[0]} on channel {e.channel}; a connection has one of each",
                    )
                entry[side] = g
            for ins in e.instructions:
                if ins.op in SENDS and e.send_peer is not None:
                    c = conns[(rp.rank, e.send_peer, e.channel)]
                    c[2] = max(c[2], ins.count)
    conn_keys = sorted(conns)
    conn_id = {k: i for i, k in enumerate(conn_keys)}
    connections = np.array(
        [
            (*k, conns[k][0], conns[k][1], slots, conns[k][2], _int32(program, conns[k][2] * tile, "slot bytes"))
            for k in conn_keys
        ],
        dtype=np.int32,
    ).reshape(-1, len(CONNECTION_COLUMNS))

    ex_rows, ins_rows, dep_rows, src_rows = [], [], [], []

    def ref_fields(ref: Ref | None) -> tuple[int, int, int]:
        if ref is None:
            return (-1, -1, -1)
        return (-1 if ref.rank is None else ref.rank, buffer_id[ref.buffer], ref.index)

    for rp in program.ranks:
        for e in rp.executors:
            where = f"rank {rp.rank} executor {e.id}"
            if len(e.instructions) > lim.max_instructions_per_executor:
                raise _fail(
                    program, f"{where} has {len(e.instructions)} steps, above {lim.max_instructions_per_executor}"
                )
            send_conn = conn_id[(rp.rank, e.send_peer, e.channel)] if e.send_peer is not None else -1
            recv_conn = conn_id[(e.recv_peer, rp.rank, e.channel)] if e.recv_peer is not None else -1
            ex_rows.append(
                (
                    rp.rank,
                    _int32(program, e.id, f"{where} id"),
                    e.channel,
                    KIND_CODES[e.kind],
                    -1 if e.send_peer is None else e.send_peer,
                    -1 if e.recv_peer is None else e.recv_peer,
                    send_conn,
                    recv_conn,
                    len(ins_rows),
                    len(e.instructions),
                )
            )
            for s, ins in enumerate(e.instructions):
                step = f"{where} step {s} ({ins.op})"
                if ins.count > lim.max_count:
                    raise _fail(program, f"{step}: count {ins.count} is above {lim.max_count}")
                if len(ins.deps) > lim.max_deps_per_instruction:
                    raise _fail(program, f"{step}: {len(ins.deps)} dependencies, above {lim.max_deps_per_instruction}")
                if len(ins.sources) > lim.max_sources_per_instruction:
                    raise _fail(program, f"{step}: {len(ins.sources)} sources, above {lim.max_sources_per_instruction}")
                ins_rows.append(
                    (
                        OP_CODES[ins.op],
                        *ref_fields(ins.src),
                        *ref_fields(ins.dst),
                        ins.count,
                        len(dep_rows),
                        len(ins.deps),
                        len(src_rows),
                        len(ins.sources),
                    )
                )
                dep_rows.extend((index[(rp.rank, d)], st) for d, st in ins.deps)
                src_rows.extend(ref_fields(r) for r in ins.sources)

    def pack(rows: list, columns: tuple[str, ...]) -> np.ndarray:
        return np.array(rows, dtype=np.int64).reshape(-1, len(columns)).astype(np.int32)

    return InstructionTable(
        collective=coll,
        buffer_names=tuple(names),
        buffer_chunks=buffer_chunks,
        aliases=aliases,
        executors=pack(ex_rows, EXECUTOR_COLUMNS),
        instructions=pack(ins_rows, INSTRUCTION_COLUMNS),
        deps=pack(dep_rows, DEP_COLUMNS),
        sources=pack(src_rows, SOURCE_COLUMNS),
        connections=connections,
        tile_bytes=tile,
        fifo_slots=slots,
        attributes={a: getattr(program, a) for a in _ATTRIBUTES},
    )


def to_program(table: InstructionTable) -> Program:
    """Unpack a table into the Program it encodes (inverse of :func:`to_table`)."""
    names = table.buffer_names
    ex = table.executors
    opname = {code: name for name, code in OP_CODES.items()}
    kindname = {code: name for name, code in KIND_CODES.items()}

    def ref(rank: int, buf: int, off: int) -> Ref | None:
        if buf < 0:
            return None
        return Ref(names[buf], int(off), None if rank < 0 else int(rank))

    ranks = []
    for r in range(table.num_ranks):
        buffers = {names[b]: int(n) for b, n in enumerate(table.buffer_chunks[r]) if n >= 0}
        executors = []
        for g in np.flatnonzero(ex[:, 0] == r):
            row = table.rows("executors", int(g))
            steps = []
            for i in range(row["first"], row["first"] + row["count"]):
                ins = table.rows("instructions", i)
                deps = tuple(
                    (int(ex[d, 1]), int(st))
                    for d, st in table.deps[ins["dep_first"] : ins["dep_first"] + ins["dep_count"]]
                )
                sources = tuple(
                    ref(*map(int, s))
                    for s in table.sources[ins["source_first"] : ins["source_first"] + ins["source_count"]]
                )
                steps.append(
                    Instruction(
                        op=opname[ins["op"]],
                        src=ref(ins["src_rank"], ins["src_buffer"], ins["src_offset"]),
                        dst=ref(ins["dst_rank"], ins["dst_buffer"], ins["dst_offset"]),
                        count=ins["count"],
                        deps=deps,
                        sources=sources,
                    )
                )
            executors.append(
                Executor(
                    id=row["id"],
                    instructions=tuple(steps),
                    send_peer=None if row["send_peer"] < 0 else row["send_peer"],
                    recv_peer=None if row["recv_peer"] < 0 else row["recv_peer"],
                    channel=row["channel"],
                    kind=kindname[row["kind"]],
                )
            )
        ranks.append(RankProgram(r, buffers, tuple(executors)))
    attrs = dict(table.attributes)
    return Program(collective=table.collective, ranks=tuple(ranks), **attrs)


__all__ = [
    "ALIAS_COLUMNS",
    "CONNECTION_COLUMNS",
    "DEP_COLUMNS",
    "EXECUTOR_COLUMNS",
    "INSTRUCTION_COLUMNS",
    "KIND_CODES",
    "OP_CODES",
    "PROTOCOL_CODES",
    "SOURCE_COLUMNS",
    "STANDARD_BUFFERS",
    "InstructionTable",
    "TableLimits",
    "column",
    "default_limits",
    "protocol_code",
    "to_program",
    "to_table",
]

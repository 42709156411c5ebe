"""The chunk-oriented DSL (GC3 §3, §5.1): a traced, fluent Python API.

>>> from simcoll.collectives import make_collective
>>> with program("swap", make_collective("alltoall", 2)) as prog:
...     for r in range(2):
...         _ = chunk(r, "input", r).copy(r, "output", r)
...         _ = chunk(r, "input", 1 - r).copy(1 - r, "output", r)
>>> prog.compile().instruction_counts()["send"]
2

A reference (:class:`ChunkRef`) names ``count`` chunks of a buffer on a rank
*as they are now*. Buffers: ``input``, ``output``, ``scratch`` (also spelled
``in``/``i``, ``out``/``o``, ``sc``/``s``) and any other name, a named
scratch buffer; scratch buffers are sized from the highest index used.
In-place collectives alias output into input (or the reverse).

Errors raise :class:`DSLError` naming the user's ``file:line``: reading an
uninitialised chunk, using a stale reference (a chunk overwritten since the
reference was made), mismatched counts, a rank, buffer or index out of
range, and DSL calls outside a program.
"""

from __future__ import annotations

import contextlib
import functools
import math
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..collectives import Collective, make_collective
from ..compiler.trace import FIXED_BUFFERS, Loc, Op, Trace, buffer_sizes, canonical
from ..errors import CollectiveError, DSLError
from ..program import PROTOCOLS, Program
from ..topology import Topology

_HERE = str(Path(__file__).resolve())
_SKIP = {_HERE, str(Path(contextlib.__file__).resolve())}
_BUFFER_ALIASES = {"in": "input", "i": "input", "out": "output", "o": "output", "sc": "scratch", "s": "scratch"}
_STACK: list[DSLProgram] = []


@functools.lru_cache(maxsize=256)
def _skipped(filename: str) -> bool:
    return str(Path(filename).resolve()) in _SKIP


def _user_line() -> str:
    """``file:line`` of the innermost frame outside this module."""
    frame = sys._getframe(1)
    while frame is not None and _skipped(frame.f_code.co_filename):
        frame = frame.f_back
    if frame is None:
        return "<unknown>"
    return f"{frame.f_code.co_filename}:{frame.f_lineno}"


def _fail(message: str) -> DSLError:
    return DSLError(f"{_user_line()}: {message}")


@dataclass(frozen=True)
class ChunkRef:
    """``count`` chunks of ``buffer`` from ``index`` on ``rank``, at the
    versions they had when the reference was made."""

    program: DSLProgram = field(repr=False, compare=False)
    rank: int
    buffer: str
    index: int
    count: int
    versions: tuple[int, ...]

    def describe(self) -> str:
        return Loc(self.rank, self.buffer, self.index).describe(self.count)

    def copy(
        self,
        rank: int,
        buffer: str,
        index: int,
        *,
        ch: int | None = None,
        sendtb: int | None = None,
        recvtb: int | None = None,
    ) -> ChunkRef:
        """Copy these chunks to ``rank``'s ``buffer`` at ``index`` (GC3 Table 1);
        returns the reference to the copies. ``ch`` picks the channel,
        ``sendtb``/``recvtb`` the thread blocks (optional hints)."""
        return self.program._copy(self, rank, buffer, index, ch, sendtb, recvtb)

    def reduce(
        self, other: ChunkRef, *, ch: int | None = None, sendtb: int | None = None, recvtb: int | None = None
    ) -> ChunkRef:
        """Reduce ``other`` into these chunks, in place (GC3 Table 1); returns
        the reference to the result (this location, new version)."""
        return self.program._reduce(self, other, ch, sendtb, recvtb)


class DSLProgram:
    """A program being traced; see :func:`program`."""

    def __init__(
        self,
        name: str,
        collective: Collective,
        *,
        protocol: str = "Simple",
        instances: int = 1,
        topology: Topology | None = None,
        fifo_slots: int | None = None,
    ):
        if protocol not in PROTOCOLS:
            raise _fail(f"protocol {protocol!r} is not one of {PROTOCOLS}")
        if not isinstance(instances, int) or instances < 1:
            raise _fail(f"instances must be a positive integer, got {instances!r}")
        if topology is not None and topology.num_ranks != collective.num_ranks:
            raise _fail(f"{topology.name} has {topology.num_ranks} ranks but the collective {collective.num_ranks}")
        self.name = name
        self.collective = collective
        self.protocol = protocol
        self.instances = instances
        self.topology = topology
        self.fifo_slots = fifo_slots
        self.ops: list[Op] = []
        self.buffers = buffer_sizes(collective)
        self._version: dict[Loc, int] = {}
        self._written_at: dict[Loc, str] = {}
        self._filled: set[Loc] = set()
        self._splits: list[int] = []
        for r in range(collective.num_ranks):
            for i in range(collective.buffer_chunks(r, "input")):
                self._filled.add(canonical(collective, r, "input", i))

    # -- context ----------------------------------------------------------------
    def __enter__(self) -> DSLProgram:
        _STACK.append(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        _STACK.remove(self)

    @property
    def trace(self) -> Trace:
        """The traced ops as a :class:`~simcoll.compiler.trace.Trace`."""
        return Trace(
            name=self.name,
            collective=self.collective,
            ops=list(self.ops),
            buffers=[dict(b) for b in self.buffers],
            protocol=self.protocol,
            instances=self.instances,
            topology=self.topology,
            metadata={"source": "dsl"},
        )

    def compile(self, **options: Any) -> Program:
        """Compile and check (:func:`simcoll.compiler.compile_trace`)."""
        from ..compiler.pipeline import compile_trace

        if self.fifo_slots is not None:
            options.setdefault("fifo_slots", self.fifo_slots)
        return compile_trace(self.trace, **options)

    # -- slots ----------------------------------------------------------------------
    def _buffer_name(self, buffer: Any) -> str:
        if not isinstance(buffer, str) or not buffer:
            raise _fail(f"buffer must be a name, got {buffer!r}")
        return _BUFFER_ALIASES.get(buffer, buffer)

    def _locs(self, rank: Any, buffer: str, index: Any, count: Any, what: str) -> list[Loc]:
        p = self.collective.num_ranks
        if not isinstance(rank, int) or isinstance(rank, bool) or not 0 <= rank < p:
            raise _fail(f"{what}: rank {rank!r} is out of range 0..{p - 1}")
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise _fail(f"{what}: count must be a positive integer, got {count!r}")
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            raise _fail(f"{what}: index {index!r} is out of range (negative or not an integer)")
        if buffer in FIXED_BUFFERS:
            size = self.collective.buffer_chunks(rank, buffer)
            if index + count > size:
                span = f"[{index}:{index + count}]" if count > 1 else f"[{index}]"
                raise _fail(f"{what}: rank {rank} {buffer}{span} is out of range ({size} chunk(s))")
        else:
            need = index + count
            if need > self.buffers[rank].get(buffer, 0):
                self.buffers[rank][buffer] = need
        return [canonical(self.collective, rank, buffer, index + k) for k in range(count)]

    def _ref(self, locs: list[Loc], rank: int, buffer: str, index: int) -> ChunkRef:
        versions = tuple(self._version.get(loc, 0) for loc in locs)
        return ChunkRef(self, rank, buffer, index, len(locs), versions)

    def _check_live(self, ref: ChunkRef, what: str) -> list[Loc]:
        if ref.program is not self:
            raise _fail(f"{what}: the reference {ref.describe()} belongs to another program")
        locs = [canonical(self.collective, ref.rank, ref.buffer, ref.index + k) for k in range(ref.count)]
        for loc, v in zip(locs, ref.versions, strict=True):
            if self._version.get(loc, 0) != v:
                raise _fail(
                    f"{what}: stale reference to {ref.describe()}: {loc.describe()} was overwritten at "
                    f"{self._written_at[loc]} after the reference was made"
                )
        return locs

    def _write(self, locs: list[Loc], where: str) -> None:
        for loc in locs:
            self._version[loc] = self._version.get(loc, 0) + 1
            self._written_at[loc] = where
            self._filled.add(loc)

    def _split(self) -> int:
        return math.prod(self._splits) if self._splits else 1

    # -- operations -------------------------------------------------------------------
    def chunk(self, rank: int, buffer: str, index: int, count: int = 1) -> ChunkRef:
        buffer = self._buffer_name(buffer)
        locs = self._locs(rank, buffer, index, count, "chunk")
        for k, loc in enumerate(locs):
            if loc not in self._filled:
                raise _fail(f"chunk: rank {rank} {buffer}[{index + k}] is uninitialised (nothing was copied there yet)")
        return self._ref(locs, rank, buffer, index)

    def _copy(self, src: ChunkRef, rank, buffer, index, ch, sendtb, recvtb) -> ChunkRef:
        src_locs = self._check_live(src, "copy")
        buffer = self._buffer_name(buffer)
        dst_locs = self._locs(rank, buffer, index, src.count, "copy")
        if set(src_locs) & set(dst_locs):
            raise _fail(f"copy: {src.describe()} overlaps its destination rank {rank} {buffer}[{index}]")
        _check_hint(ch, "ch")
        _check_hint(sendtb, "sendtb")
        _check_hint(recvtb, "recvtb")
        where = _user_line()
        self.ops.append(Op("copy", src_locs[0], dst_locs[0], src.count, ch, sendtb, recvtb, self._split(), where))
        self._write(dst_locs, where)
        return self._ref(dst_locs, rank, buffer, index)

    def _reduce(self, dst: ChunkRef, other: Any, ch, sendtb, recvtb) -> ChunkRef:
        if not isinstance(other, ChunkRef):
            raise _fail(f"reduce: expected a chunk reference, got {type(other).__name__}")
        dst_locs = self._check_live(dst, "reduce")
        src_locs = self._check_live(other, "reduce")
        if other.count != dst.count:
            raise _fail(
                f"reduce: mismatched counts: {dst.describe()} has {dst.count} chunk(s), "
                f"{other.describe()} has {other.count}"
            )
        if set(src_locs) & set(dst_locs):
            raise _fail(f"reduce: {other.describe()} overlaps {dst.describe()}")
        if not self.collective.combining:
            raise _fail(f"reduce: a {self.collective.name} combines nothing")
        _check_hint(ch, "ch")
        _check_hint(sendtb, "sendtb")
        _check_hint(recvtb, "recvtb")
        where = _user_line()
        self.ops.append(Op("reduce", src_locs[0], dst_locs[0], dst.count, ch, sendtb, recvtb, self._split(), where))
        self._write(dst_locs, where)
        return self._ref(dst_locs, dst.rank, dst.buffer, dst.index)


def _check_hint(value: Any, name: str) -> None:
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
        raise _fail(f"{name} must be a non-negative integer, got {value!r}")


def _current() -> DSLProgram:
    if not _STACK:
        raise _fail("DSL call outside a program (use `with program(...)`)")
    return _STACK[-1]


def program(
    name: str,
    collective: Collective | str,
    *,
    num_ranks: int | None = None,
    chunk_factor: int = 1,
    root: int | None = None,
    inplace: bool = False,
    machine: Any = None,
    topology: Topology | None = None,
    protocol: str = "Simple",
    instances: int = 1,
) -> DSLProgram:
    """A program context (GC3 §3.2): ``with program(...) as prog:`` traces the
    DSL calls in its body; ``prog.compile()`` gives the Program.

    ``collective`` is a :class:`~simcoll.collectives.Collective` or a name,
    completed by ``num_ranks`` (or the machine's rank count),
    ``chunk_factor``, ``root`` and ``inplace`` via
    :func:`~simcoll.collectives.make_collective`. ``machine`` (a Machine) or
    ``topology`` adds route checks and the machine's FIFO slots;
    ``protocol`` is Simple, LL or LL128; ``instances`` replicates the whole
    program (GC3 §7: each instance on 1/n of the data and its own channels).
    """
    fifo_slots = None
    if machine is not None:
        topology = machine.topology
        executor = getattr(machine.model, "executor", None)
        fifo_slots = executor.fifo_slots if executor is not None else None
    if isinstance(collective, str):
        p = num_ranks if num_ranks is not None else (topology.num_ranks if topology is not None else None)
        if p is None:
            raise DSLError(f"{_user_line()}: program {name!r}: give num_ranks, a machine or a topology")
        try:
            collective = make_collective(collective, p, chunk_factor, root=root, inplace=inplace)
        except CollectiveError as exc:
            raise DSLError(f"{_user_line()}: program {name!r}: {exc}") from None
    return DSLProgram(
        name, collective, protocol=protocol, instances=instances, topology=topology, fifo_slots=fifo_slots
    )


def dsl_program(name: str, collective: Collective | str, **settings: Any) -> Callable[..., Callable[..., DSLProgram]]:
    """Decorator form of :func:`program`: the decorated function's body is
    traced each time it is called, and the call returns the DSLProgram.
    ``collective`` and ``settings`` may be callables of the function's
    arguments (e.g. ``num_ranks=lambda p: p``).

    >>> @dsl_program("swap", "alltoall", num_ranks=lambda: 2)
    ... def swap():
    ...     for r in range(2):
    ...         _ = chunk(r, "input", r).copy(r, "output", r)
    ...         _ = chunk(r, "input", 1 - r).copy(1 - r, "output", r)
    >>> swap().compile().instruction_counts()["copy"]
    2
    """

    def decorate(fn: Callable[..., Any]) -> Callable[..., DSLProgram]:
        @functools.wraps(fn)
        def traced(*args: Any, **kwargs: Any) -> DSLProgram:
            def value(v: Any) -> Any:
                return v(*args, **kwargs) if callable(v) and not isinstance(v, Collective) else v

            with program(name, value(collective), **{k: value(v) for k, v in settings.items()}) as prog:
                fn(*args, **kwargs)
            return prog

        return traced

    return decorate


def chunk(rank: int, buffer: str, index: int, count: int = 1) -> ChunkRef:
    """A reference to ``count`` chunks at ``rank``'s ``buffer[index]`` in the
    current program (GC3 Table 1); the chunks must hold data."""
    return _current().chunk(rank, buffer, index, count)


@contextmanager
def parallelize(n: int) -> Iterator[None]:
    """Chunk parallelization (GC3 §5.1): the copies and reduces traced in the
    body become ``n`` replicas, each on 1/n of the data and on its own
    channel."""
    prog = _current()
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise _fail(f"parallelize: the factor must be a positive integer, got {n!r}")
    prog._splits.append(n)
    try:
        yield
    finally:
        prog._splits.pop()

"""The Program type: a runtime-level schedule, per rank and per executor.

A :class:`Program` is what the simulator and the GPU interpreter execute (the
MSCCL-IR equivalent). Per rank it declares buffers (``input``, ``output``,
``scratch`` and any named scratch buffer, sizes in chunks) and executors
(GPU thread blocks, or host threads for NVGroup's CPU-driven paths). An
executor has at most one send peer and one receive peer, on one channel, and
runs an ordered list of :class:`Instruction` s.

Instruction semantics (``src``/``dst`` are local unless they name a ``rank``):

========== ================================================================
op         meaning
========== ================================================================
send       send ``src`` to the send peer
recv       receive from the receive peer into ``dst``
rcs        receive into ``dst`` and send it on                    (fused)
rrc        receive, reduce with ``src``, store into ``dst``       (fused)
rrs        receive, reduce with ``src``, send the result on       (fused)
rrcs       receive, reduce with ``src``, store into ``dst``, send (fused)
copy       ``dst := src``
reduce     ``dst := dst ⊕ src``
put        one-sided write of local ``src`` into ``dst`` on ``dst.rank``
get        one-sided read of ``src`` on ``src.rank`` into local ``dst``
load_reduce ``dst := ⊕ sources`` (multi-source load-reduce, NVGroup §4.2)
signal     send a data-less notification to the send peer
wait       receive a notification from the receive peer
nop        nothing; carries dependencies
========== ================================================================

Sends and receives on a connection (sender rank, receiver rank, channel) match
in FIFO order. ``deps`` lists ``(executor id, step)`` pairs on the same rank
that must complete before the instruction starts. ``count`` chunks starting at
each reference's ``index`` are moved together.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .collectives import Collective, collective_from_dict, collective_to_dict
from .errors import AlgorithmError, CollectiveError
from .files import parse_json, read_text, write_atomic

RECEIVES = frozenset({"recv", "rcs", "rrc", "rrs", "rrcs", "wait"})
SENDS = frozenset({"send", "rcs", "rrs", "rrcs", "signal"})
REDUCES = frozenset({"rrc", "rrs", "rrcs", "reduce", "load_reduce"})
_NEEDS_SRC = frozenset({"send", "rrc", "rrs", "rrcs", "copy", "reduce", "put", "get"})
_NEEDS_DST = frozenset({"recv", "rcs", "rrc", "rrcs", "copy", "reduce", "put", "get", "load_reduce"})
INSTRUCTION_OPS = (
    "send",
    "recv",
    "rcs",
    "rrc",
    "rrs",
    "rrcs",
    "copy",
    "reduce",
    "put",
    "get",
    "load_reduce",
    "signal",
    "wait",
    "nop",
)
EXECUTOR_KINDS = ("threadblock", "host")
PROTOCOLS = ("Simple", "LL", "LL128")
FORMAT_VERSION = 1
# Optional Program fields carried for runtimes (written to JSON only when set).
_RUNTIME_FIELDS = ("chunks_per_loop", "declared_channels", "min_bytes", "max_bytes", "outofplace", "reduce_op")


@dataclass(frozen=True)
class Ref:
    """``count`` chunks of ``buffer`` from ``index`` on; ``rank`` only for
    remote references of one-sided operations."""

    buffer: str
    index: int
    rank: int | None = None

    def describe(self, count: int = 1) -> str:
        where = f"rank {self.rank} " if self.rank is not None else ""
        span = f"[{self.index}]" if count == 1 else f"[{self.index}:{self.index + count}]"
        return f"{where}{self.buffer}{span}"


@dataclass(frozen=True)
class Instruction:
    op: str
    src: Ref | None = None
    dst: Ref | None = None
    count: int = 1
    deps: tuple[tuple[int, int], ...] = ()
    sources: tuple[Ref, ...] = ()


@dataclass(frozen=True)
class Executor:
    """A thread block (or host thread) with its peers, channel and instructions."""

    id: int
    instructions: tuple[Instruction, ...]
    send_peer: int | None = None
    recv_peer: int | None = None
    channel: int = 0
    kind: str = "threadblock"


@dataclass(frozen=True)
class RankProgram:
    rank: int
    buffers: Mapping[str, int]
    executors: tuple[Executor, ...]

    def executor(self, executor_id: int) -> Executor:
        for e in self.executors:
            if e.id == executor_id:
                return e
        raise AlgorithmError(f"rank {self.rank} has no executor {executor_id}")


@dataclass(frozen=True)
class Program:
    """A lowered collective; see the module docstring.

    The optional runtime attributes mirror MSCCL XML's ``<algo>`` (FACTS.md;
    GC3 §6): ``chunks_per_loop`` (``nchunksperloop``, default: the largest
    input or output buffer), ``declared_channels`` (``nchannels``, default:
    :attr:`num_channels`), ``min_bytes``/``max_bytes`` (the size range the
    runtime selects the program for), ``outofplace`` (newer runtimes: whether
    it may also run out of place; ``collective.inplace`` is ``inplace``) and
    ``reduce_op`` (``redop``, e.g. ``"sum"``). None means "not stated".
    """

    name: str
    collective: Collective
    ranks: tuple[RankProgram, ...]
    protocol: str = "Simple"
    instances: int = 1
    tile_bytes: int | None = None
    topology: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    # Optional runtime attributes (MSCCL XML ``<algo>``; None: not stated, the
    # exporter derives a default). See simcoll.interop.msccl_xml.
    chunks_per_loop: int | None = None
    declared_channels: int | None = None
    min_bytes: int | None = None
    max_bytes: int | None = None
    outofplace: bool | None = None
    reduce_op: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "ranks", tuple(self.ranks))
        self._check_structure()
        self._check_runtime_attributes()

    @property
    def num_ranks(self) -> int:
        return len(self.ranks)

    @property
    def num_channels(self) -> int:
        return 1 + max((e.channel for r in self.ranks for e in r.executors), default=0)

    def instruction_counts(self) -> dict[str, int]:
        """How many instructions of each op the program holds (over all ranks)."""
        counts: dict[str, int] = {}
        for r in self.ranks:
            for e in r.executors:
                for ins in e.instructions:
                    counts[ins.op] = counts.get(ins.op, 0) + 1
        return counts

    def _check_structure(self) -> None:
        p = self.collective.num_ranks
        if len(self.ranks) != p:
            raise AlgorithmError(f"{self.name}: {len(self.ranks)} rank programs for a {p}-rank collective")
        if self.protocol not in PROTOCOLS:
            raise AlgorithmError(f"{self.name}: protocol {self.protocol!r} is not one of {PROTOCOLS}")
        if not isinstance(self.instances, int) or self.instances < 1:
            raise AlgorithmError(f"{self.name}: instances must be a positive integer")
        for r, rp in enumerate(self.ranks):
            if rp.rank != r:
                raise AlgorithmError(
                    f"{self.name}: rank programs must be listed in rank order (found {rp.rank} at {r})"
                )
            ids = [e.id for e in rp.executors]
            if len(set(ids)) != len(ids):
                raise AlgorithmError(f"{self.name}: rank {r} has duplicate executor ids")
            steps = {e.id: len(e.instructions) for e in rp.executors}
            for e in rp.executors:
                self._check_executor(r, rp, e, steps)

    def _check_runtime_attributes(self) -> None:
        for label in ("chunks_per_loop", "declared_channels", "min_bytes", "max_bytes"):
            value = getattr(self, label)
            least = 0 if label.endswith("bytes") else 1
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < least):
                raise AlgorithmError(f"{self.name}: {label} must be an integer >= {least}, got {value!r}")
        if self.declared_channels is not None and self.declared_channels < self.num_channels:
            raise AlgorithmError(
                f"{self.name}: declared_channels {self.declared_channels} is below the {self.num_channels} channels used"
            )
        if self.min_bytes is not None and self.max_bytes is not None and self.max_bytes < self.min_bytes:
            raise AlgorithmError(f"{self.name}: max_bytes {self.max_bytes} is below min_bytes {self.min_bytes}")
        if self.outofplace is not None and not isinstance(self.outofplace, bool):
            raise AlgorithmError(f"{self.name}: outofplace must be true, false or absent, got {self.outofplace!r}")
        if self.reduce_op is not None and (not isinstance(self.reduce_op, str) or not self.reduce_op):
            raise AlgorithmError(f"{self.name}: reduce_op must be a non-empty string, got {self.reduce_op!r}")

    def _check_executor(self, r: int, rp: RankProgram, e: Executor, steps: Mapping[int, int]) -> None:
        p = self.num_ranks
        name = f"{self.name}: rank {r} executor {e.id}"
        if e.kind not in EXECUTOR_KINDS:
            raise AlgorithmError(f"{name}: kind {e.kind!r} is not one of {EXECUTOR_KINDS}")
        for label, value in (
            ("id", e.id),
            ("channel", e.channel),
            ("send_peer", e.send_peer),
            ("recv_peer", e.recv_peer),
        ):
            if (value is not None or label in ("id", "channel")) and (
                not isinstance(value, int) or isinstance(value, bool) or value < 0
            ):
                raise AlgorithmError(f"{name}: {label} must be a non-negative integer, got {value!r}")
        for label, peer in (("send_peer", e.send_peer), ("recv_peer", e.recv_peer)):
            if peer is not None and not (0 <= peer < p and peer != r):
                raise AlgorithmError(f"{name}: {label} {peer} is not another rank")
        for s, ins in enumerate(e.instructions):
            where = f"{name} step {s} ({ins.op})"
            if ins.op not in INSTRUCTION_OPS:
                raise AlgorithmError(f"{where}: unknown op; known: {', '.join(INSTRUCTION_OPS)}")
            if not isinstance(ins.count, int) or ins.count < 1:
                raise AlgorithmError(f"{where}: count must be a positive integer")
            if ins.op in SENDS and e.send_peer is None:
                raise AlgorithmError(f"{where}: sends but the executor has no send peer")
            if ins.op in RECEIVES and e.recv_peer is None:
                raise AlgorithmError(f"{where}: receives but the executor has no receive peer")
            if ins.op in _NEEDS_SRC and ins.src is None:
                raise AlgorithmError(f"{where}: needs a src reference")
            if ins.op in _NEEDS_DST and ins.dst is None:
                raise AlgorithmError(f"{where}: needs a dst reference")
            if ins.op == "load_reduce" and not ins.sources:
                raise AlgorithmError(f"{where}: load_reduce needs sources")
            for ref in (ins.src, ins.dst, *ins.sources):
                if ref is not None:
                    self._check_ref(r, ref, ins.count, where)
            for dep_exec, dep_step in ins.deps:
                if dep_exec not in steps or not 0 <= dep_step < steps[dep_exec]:
                    raise AlgorithmError(
                        f"{where}: depends on executor {dep_exec} step {dep_step}, which does not exist"
                    )
                if dep_exec == e.id and dep_step >= s:
                    raise AlgorithmError(f"{where}: depends on its own later step {dep_step}")

    def _check_ref(self, rank: int, ref: Ref, count: int, where: str) -> None:
        owner = rank if ref.rank is None else ref.rank
        if not 0 <= owner < self.num_ranks:
            raise AlgorithmError(f"{where}: reference to rank {owner} out of range")
        size = self.ranks[owner].buffers.get(ref.buffer)
        if size is None:
            raise AlgorithmError(f"{where}: rank {owner} has no buffer {ref.buffer!r}")
        if ref.index < 0 or ref.index + count > size:
            raise AlgorithmError(f"{where}: {ref.describe(count)} is outside rank {owner}'s {size}-chunk {ref.buffer}")

    # -- JSON -----------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        def ref(r: Ref | None) -> Any:
            if r is None:
                return None
            return [r.buffer, r.index] if r.rank is None else [r.buffer, r.index, r.rank]

        def ins(i: Instruction) -> dict[str, Any]:
            out: dict[str, Any] = {"op": i.op}
            if i.src is not None:
                out["src"] = ref(i.src)
            if i.dst is not None:
                out["dst"] = ref(i.dst)
            if i.count != 1:
                out["count"] = i.count
            if i.deps:
                out["deps"] = [list(d) for d in i.deps]
            if i.sources:
                out["sources"] = [ref(s) for s in i.sources]
            return out

        ranks = []
        for rp in self.ranks:
            executors = [
                {
                    "id": e.id,
                    "kind": e.kind,
                    "send_peer": e.send_peer,
                    "recv_peer": e.recv_peer,
                    "channel": e.channel,
                    "instructions": [ins(i) for i in e.instructions],
                }
                for e in rp.executors
            ]
            ranks.append({"rank": rp.rank, "buffers": dict(rp.buffers), "executors": executors})
        out: dict[str, Any] = {
            "format": "simcoll.program",
            "version": FORMAT_VERSION,
            "name": self.name,
            "collective": collective_to_dict(self.collective),
            "protocol": self.protocol,
            "instances": self.instances,
            "topology": self.topology,
            "ranks": ranks,
        }
        if self.tile_bytes is not None:
            out["tile_bytes"] = self.tile_bytes
        if self.metadata:
            out["metadata"] = dict(self.metadata)
        for key in _RUNTIME_FIELDS:
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out

    @classmethod
    def from_dict(cls, data: Any, where: str = "Program JSON") -> Program:
        """The Program of a dict as :meth:`to_dict` writes it; errors name
        ``where`` (a file name) before the rank, executor and step at fault."""
        if not isinstance(data, Mapping) or data.get("format") != "simcoll.program":
            raise AlgorithmError(f'{where}: not a simcoll Program (expected "format": "simcoll.program")')

        def ref(raw: Any) -> Ref | None:
            if raw is None:
                return None
            return Ref(raw[0], raw[1], raw[2] if len(raw) > 2 else None)

        try:
            ranks = tuple(
                RankProgram(
                    rank=rp["rank"],
                    buffers=dict(rp["buffers"]),
                    executors=tuple(
                        Executor(
                            id=e["id"],
                            kind=e.get("kind", "threadblock"),
                            send_peer=e.get("send_peer"),
                            recv_peer=e.get("recv_peer"),
                            channel=e.get("channel", 0),
                            instructions=tuple(
                                Instruction(
                                    op=i["op"],
                                    src=ref(i.get("src")),
                                    dst=ref(i.get("dst")),
                                    count=i.get("count", 1),
                                    deps=tuple((d[0], d[1]) for d in i.get("deps", [])),
                                    sources=tuple(ref(s) for s in i.get("sources", [])),
                                )
                                for i in e["instructions"]
                            ),
                        )
                        for e in rp["executors"]
                    ),
                )
                for rp in data["ranks"]
            )
            return cls(
                name=data["name"],
                collective=collective_from_dict(data["collective"]),
                ranks=ranks,
                protocol=data.get("protocol", "Simple"),
                instances=data.get("instances", 1),
                tile_bytes=data.get("tile_bytes"),
                topology=data.get("topology"),
                metadata=data.get("metadata", {}),
                **{key: data.get(key) for key in _RUNTIME_FIELDS},
            )
        except AlgorithmError as exc:
            raise AlgorithmError(f"{where}: {exc}") from None
        except CollectiveError as exc:
            raise CollectiveError(f"{where}: {exc}") from None
        except (KeyError, TypeError, IndexError, ValueError) as exc:
            raise AlgorithmError(f"{where}: malformed Program JSON: {type(exc).__name__}: {exc}") from None

    def to_json(self, indent: int | None = 1) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_json(cls, text: str) -> Program:
        return cls.from_dict(parse_json(text, error=AlgorithmError))

    def save(self, path: str | Path) -> None:
        write_atomic(path, self.to_json(), error=AlgorithmError)

    @classmethod
    def load(cls, path: str | Path) -> Program:
        return cls.from_json(read_text(path, error=AlgorithmError))

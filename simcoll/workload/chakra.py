"""Chakra execution traces in and out: the MLCommons format ASTRA-sim reads.

A Chakra trace is one file per rank (``<prefix>.<rank>.et``): protobuf
messages of the public schema (``et_def.proto``, package
``ChakraProtoMsg``), each preceded by its length as a varint - first a
``GlobalMetadata``, then the rank's ``Node`` messages. The messages are
declared here from the schema's field numbers and types (only the fields a
workload needs; protobuf skips the rest) and read with the protobuf runtime.

Import (:func:`load_chakra`), node by node:

- ``COMP_NODE`` -> :class:`~.ops.Compute`: ``duration_micros`` when it is
  set, else the roofline of its ``num_ops`` (FLOPs) and ``tensor_size``
  (bytes) attributes; on stream ``cpu`` when ``is_cpu_op`` is true;
- ``COMM_COLL_NODE`` -> :class:`~.ops.CollectiveOp`: ``comm_type`` (the
  schema's ``CollectiveCommType``) on process group ``pg_name`` (ranks from
  ``groups``, ASTRA-sim's communicator-group JSON: ``{"name": [ranks]}``;
  all ranks where a node names none) for ``comm_size`` bytes, taken as the
  collective's buffer in nccl-tests naming; a ``BARRIER`` is a 4-byte
  Allreduce (what NCCL's barrier amounts to);
- ``COMM_SEND_NODE`` / ``COMM_RECV_NODE`` -> :class:`~.ops.Send` /
  :class:`~.ops.Recv` to ``comm_dst`` / from ``comm_src`` of ``comm_size``;
- other nodes (memory, metadata) take no time: dependencies pass through them.

Dependencies are ``ctrl_deps`` and ``data_deps``. Chakra has no streams:
compute runs on stream ``compute``, collectives on ``comm`` and sends on
``p2p``, in dependency order (ties by node id), unless a node carries a
``stream`` attribute (which :func:`save_chakra` writes, so a simcoll
workload goes out and comes back as it was).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import WorkloadError
from ..files import read_text
from .ops import CollectiveOp, Compute, Op, Recv, Send, Workload

__all__ = ["chakra_files", "load_chakra", "read_trace", "save_chakra"]

#: The schema's ``NodeType`` values (et_def.proto).
COMP_NODE, COMM_SEND_NODE, COMM_RECV_NODE, COMM_COLL_NODE = 4, 5, 6, 7
#: The schema's ``CollectiveCommType`` values and the collectives they are.
COMM_TYPES = {0: "allreduce", 1: "reduce", 2: "allgather", 3: "gather", 4: "scatter", 5: "broadcast",
              6: "alltoall", 7: "reducescatter", 8: "reducescatter", 9: "barrier"}  # fmt: skip
COMM_TYPE_OF = {"allreduce": 0, "reduce": 1, "allgather": 2, "gather": 3, "scatter": 4, "broadcast": 5,
                "alltoall": 6, "reducescatter": 7}  # fmt: skip
BARRIER_BYTES = 4


@functools.cache
def _messages() -> dict[str, type]:
    """The schema's ``AttributeProto``, ``GlobalMetadata`` and ``Node`` (the
    fields used here), as protobuf message classes."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    f = descriptor_pb2.FieldDescriptorProto
    file = descriptor_pb2.FileDescriptorProto(name="simcoll_chakra_et_def.proto", package="ChakraProtoMsg",
                                              syntax="proto3")  # fmt: skip
    attribute = file.message_type.add(name="AttributeProto")
    attribute.oneof_decl.add(name="value")
    attribute.field.add(name="name", number=1, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL)
    attribute.field.add(name="doc_string", number=2, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL)
    scalars = [("double_val", 3, f.TYPE_DOUBLE), ("float_val", 5, f.TYPE_FLOAT), ("int32_val", 7, f.TYPE_INT32),
               ("int64_val", 9, f.TYPE_INT64), ("uint32_val", 11, f.TYPE_UINT32), ("uint64_val", 13, f.TYPE_UINT64),
               ("sint32_val", 15, f.TYPE_SINT32), ("sint64_val", 17, f.TYPE_SINT64),
               ("fixed32_val", 19, f.TYPE_FIXED32), ("fixed64_val", 21, f.TYPE_FIXED64),
               ("sfixed32_val", 23, f.TYPE_SFIXED32), ("sfixed64_val", 25, f.TYPE_SFIXED64),
               ("bool_val", 27, f.TYPE_BOOL), ("string_val", 29, f.TYPE_STRING), ("bytes_val", 31, f.TYPE_BYTES)]  # fmt: skip
    for name, number, kind in scalars:
        attribute.field.add(name=name, number=number, type=kind, label=f.LABEL_OPTIONAL, oneof_index=0)
    metadata = file.message_type.add(name="GlobalMetadata")
    metadata.field.add(name="version", number=1, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL)
    metadata.field.add(name="attr", number=2, type=f.TYPE_MESSAGE, label=f.LABEL_REPEATED,
                       type_name=".ChakraProtoMsg.AttributeProto")  # fmt: skip
    node = file.message_type.add(name="Node")
    for name, number, kind, label in [("id", 1, f.TYPE_UINT64, f.LABEL_OPTIONAL), ("name", 2, f.TYPE_STRING, f.LABEL_OPTIONAL),
                                      ("type", 3, f.TYPE_INT32, f.LABEL_OPTIONAL),  # enum NodeType: a varint
                                      ("ctrl_deps", 4, f.TYPE_UINT64, f.LABEL_REPEATED),
                                      ("data_deps", 5, f.TYPE_UINT64, f.LABEL_REPEATED),
                                      ("start_time_micros", 6, f.TYPE_UINT64, f.LABEL_OPTIONAL),
                                      ("duration_micros", 7, f.TYPE_UINT64, f.LABEL_OPTIONAL)]:  # fmt: skip
        node.field.add(name=name, number=number, type=kind, label=label)
    node.field.add(name="attr", number=10, type=f.TYPE_MESSAGE, label=f.LABEL_REPEATED,
                   type_name=".ChakraProtoMsg.AttributeProto")  # fmt: skip
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"ChakraProtoMsg.{name}"))
            for name in ("AttributeProto", "GlobalMetadata", "Node")}  # fmt: skip


# -- the file: length-delimited messages ----------------------------------------------------------------
def _read_varint(data: bytes, at: int, where: str) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data) or shift > 63:
            raise WorkloadError(f"{where}: truncated or corrupt (a message length runs past the end)")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, at


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def read_trace(path: str | Path) -> tuple[dict[str, Any], list[Any]]:
    """The ``GlobalMetadata`` attributes and the ``Node`` messages of one rank's trace file."""
    from google.protobuf.message import DecodeError

    where = str(path)
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise WorkloadError(f"{where}: cannot read ({exc.strerror or exc})") from None
    messages = _messages()
    nodes, at, first, metadata = [], 0, True, {}
    while at < len(data):
        size, at = _read_varint(data, at, where)
        if at + size > len(data):
            raise WorkloadError(f"{where}: truncated (a message of {size} bytes runs past the end)")
        message = messages["GlobalMetadata" if first else "Node"]()
        try:
            message.ParseFromString(data[at : at + size])
        except DecodeError as exc:
            raise WorkloadError(f"{where}: not a Chakra execution trace ({exc})") from None
        if first:
            metadata = _attributes(message)
        else:
            nodes.append(message)
        first, at = False, at + size
    if first:
        raise WorkloadError(f"{where}: empty, not a Chakra execution trace")
    return metadata, nodes


def _attributes(node) -> dict[str, Any]:
    out = {}
    for attr in node.attr:
        which = attr.WhichOneof("value")
        if which is not None:
            out[attr.name] = getattr(attr, which)
    return out


# -- import -----------------------------------------------------------------------------------------------
def chakra_files(spec: str | Path) -> list[Path]:
    """The per-rank files of a trace: a directory of ``*.<rank>.et`` files,
    or a prefix ``P`` of ``P.0.et``, ``P.1.et``, ...; in rank order."""
    spec = Path(spec)
    found = sorted(spec.glob("*.et")) if spec.is_dir() else sorted(spec.parent.glob(f"{spec.name}.*.et"))
    by_rank = {}
    for path in found:
        stem = path.name[: -len(".et")]
        rank = stem.rsplit(".", 1)[-1]
        if rank.isdigit():
            by_rank[int(rank)] = path
    if not by_rank:
        raise WorkloadError(f"{spec}: no Chakra trace files (<prefix>.<rank>.et) there")
    missing = [r for r in range(max(by_rank) + 1) if r not in by_rank]
    if missing:
        raise WorkloadError(f"{spec}: no trace file for rank {missing[0]} (ranks 0..{max(by_rank)} expected)")
    return [by_rank[r] for r in range(len(by_rank))]


def load_chakra(spec: str | Path, groups: Mapping[str, Sequence[int]] | str | Path | None = None,
                *, name: str | None = None) -> Workload:  # fmt: skip
    """The workload of a Chakra trace (module docstring); ``groups`` maps
    process-group names (``pg_name``) to ranks, or is the path of
    ASTRA-sim's communicator-group JSON file (default: ``<prefix>.groups.json``
    beside the trace where there is one, as :func:`save_chakra` writes)."""
    files = chakra_files(spec)
    if groups is None:
        beside = files[0].with_name(files[0].name.rsplit(".", 2)[0] + ".groups.json")
        groups = beside if beside.exists() else None
    if isinstance(groups, (str, Path)):
        text = read_text(groups, error=WorkloadError)
        try:
            groups = json.loads(text)
        except json.JSONDecodeError as exc:
            raise WorkloadError(f"{groups}: not JSON ({exc.msg} at line {exc.lineno})") from None
    groups = {str(k): tuple(int(r) for r in v) for k, v in (groups or {}).items()}
    every = tuple(range(len(files)))
    programs = []
    used: dict[str, tuple[int, ...]] = {}
    metadata: dict[str, Any] = {}
    for rank, path in enumerate(files):
        attrs, nodes = read_trace(path)
        metadata = metadata or attrs
        programs.append(tuple(_rank_ops(nodes, rank, str(path), groups, every, used)))
    samples = metadata.get("samples_per_step")
    return Workload(name or str(metadata.get("workload") or Path(spec).name), tuple(programs), used,
                    samples_per_step=float(samples) if samples else None)  # fmt: skip


def _rank_ops(nodes, rank: int, where: str, groups, every, used) -> list[Op]:
    by_id = {}
    for node in nodes:
        if node.id in by_id:
            raise WorkloadError(f"{where}: node id {node.id} appears twice")
        by_id[node.id] = node
    # dependency order, ties by id: Kahn over ctrl and data dependencies
    deps = {i: sorted(set(n.ctrl_deps) | set(n.data_deps)) for i, n in by_id.items()}
    for i, ds in deps.items():
        for d in ds:
            if d not in by_id:
                raise WorkloadError(f"{where}: node {i} ({by_id[i].name!r}) depends on node {d}, which the trace lacks")
    import heapq

    waiting = {i: len(ds) for i, ds in deps.items()}
    after: dict[int, list[int]] = {}
    for i, ds in deps.items():
        for d in ds:
            after.setdefault(d, []).append(i)
    ready = [i for i, count in waiting.items() if count == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for j in after.get(i, ()):
            waiting[j] -= 1
            if waiting[j] == 0:
                heapq.heappush(ready, j)
    if len(order) != len(by_id):
        stuck = sorted(i for i, c in waiting.items() if c)[:4]
        raise WorkloadError(f"{where}: nodes {stuck} depend on one another in a cycle")
    ops: list[Op] = []
    kept_name: dict[int, tuple[str, ...]] = {}  # node id -> the kept operations it stands for
    for i in order:
        node = by_id[i]
        through = tuple(dict.fromkeys(n for d in deps[i] for n in kept_name[d]))
        op = _op(node, through, rank, where, groups, every, used)
        if op is None:
            kept_name[i] = through
        else:
            ops.append(op)
            kept_name[i] = (op.name,)
    return ops


def _op(node, deps: tuple[str, ...], rank: int, where: str, groups, every, used) -> Op | None:
    attrs = _attributes(node)
    name = f"{node.id}:{node.name}" if node.name else str(node.id)
    here = f"{where}: node {node.id} ({node.name!r})"
    stream = attrs.get("stream")
    extra = {} if stream is None else {"stream": str(stream)}
    if node.type == COMP_NODE:
        if node.duration_micros:
            where_run = {"stream": "cpu"} if attrs.get("is_cpu_op") else {}
            return Compute(name, duration_s=node.duration_micros * 1e-6, deps=deps, **(where_run | extra))
        flops, memory = float(attrs.get("num_ops", 0)), float(attrs.get("tensor_size", 0))
        if flops <= 0 and memory <= 0:
            return None  # no time and no work: a marker
        return Compute(name, flops=flops, memory_bytes=memory, deps=deps, **extra)
    if node.type == COMM_COLL_NODE:
        kind = COMM_TYPES.get(int(attrs.get("comm_type", -1)))
        if kind is None:
            raise WorkloadError(f"{here}: comm_type {attrs.get('comm_type')!r} is not a CollectiveCommType")
        size = BARRIER_BYTES if kind == "barrier" else attrs.get("comm_size")
        if not size:
            raise WorkloadError(f"{here}: a collective needs a positive comm_size")
        group = str(attrs.get("pg_name", "")) or "all"
        if group not in groups and group != "all":
            raise WorkloadError(f"{here}: process group {group!r} is not in the groups given "
                                f"({', '.join(sorted(groups)) or 'none'}): pass ASTRA-sim's communicator-group JSON")  # fmt: skip
        used[group] = groups.get(group, every)
        return CollectiveOp(name, "allreduce" if kind == "barrier" else kind, group, float(size), deps=deps, **extra)
    if node.type in (COMM_SEND_NODE, COMM_RECV_NODE):
        send = node.type == COMM_SEND_NODE
        peer = attrs.get("comm_dst" if send else "comm_src")
        size = attrs.get("comm_size")
        if peer is None or not size:
            raise WorkloadError(f"{here}: a {'send' if send else 'receive'} needs {'comm_dst' if send else 'comm_src'} "
                                "and a positive comm_size")  # fmt: skip
        cls = Send if send else Recv
        return cls(name, int(peer), float(size), deps=deps, **({"stream": "p2p"} | extra))
    return None


# -- export -----------------------------------------------------------------------------------------------
def save_chakra(workload: Workload, directory: str | Path, prefix: str = "trace") -> list[Path]:
    """Write ``workload`` as a Chakra trace: ``<directory>/<prefix>.<rank>.et``
    per rank and ``<directory>/<prefix>.groups.json`` (ASTRA-sim's
    communicator groups). Each file is written to a temporary name and
    renamed into place. Returns the rank files."""
    from ..files import write_atomic

    messages = _messages()
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for rank, program in enumerate(workload.programs):
        out = bytearray()
        meta = messages["GlobalMetadata"](version="0.0.4")
        meta.attr.append(messages["AttributeProto"](name="workload", string_val=workload.name))
        if workload.samples_per_step is not None:
            meta.attr.append(messages["AttributeProto"](name="samples_per_step", double_val=workload.samples_per_step))
        blob = meta.SerializeToString()
        out += _varint(len(blob)) + blob
        ids = {op.name: i for i, op in enumerate(program)}
        last_on: dict[str, int] = {}
        for i, op in enumerate(program):
            node = messages["Node"](id=i, name=op.name)
            node.data_deps.extend(ids[d] for d in op.deps)
            if op.stream in last_on:  # the stream's order, as a control dependency
                node.ctrl_deps.append(last_on[op.stream])
            last_on[op.stream] = i
            _describe(node, op, messages["AttributeProto"])
            blob = node.SerializeToString()
            out += _varint(len(blob)) + blob
        path = directory / f"{prefix}.{rank}.et"
        write_atomic(path, bytes(out), error=WorkloadError)
        written.append(path)
    groups = {g: list(r) for g, r in workload.groups.items()}
    write_atomic(directory / f"{prefix}.groups.json", json.dumps(groups, indent=1) + "\n", error=WorkloadError)
    return written


def _describe(node, op: Op, attribute) -> None:
    def attr(name: str, **value) -> None:
        node.attr.append(attribute(name=name, **value))

    attr("stream", string_val=op.stream)
    if isinstance(op, Compute):
        node.type = COMP_NODE
        attr("is_cpu_op", bool_val=False)
        if op.duration_s is not None:
            node.duration_micros = max(1, round(op.duration_s * 1e6)) if op.duration_s else 0
        else:
            attr("num_ops", int64_val=round(op.flops / op.efficiency))
            attr("tensor_size", uint64_val=round(op.memory_bytes / op.efficiency))
    elif isinstance(op, CollectiveOp):
        node.type = COMM_COLL_NODE
        if op.collective not in COMM_TYPE_OF:
            raise WorkloadError(f"{op.name!r}: Chakra has no CollectiveCommType for {op.collective}")
        attr("is_cpu_op", bool_val=False)
        attr("comm_type", int64_val=COMM_TYPE_OF[op.collective])
        attr("comm_size", int64_val=round(op.size_bytes))
        attr("pg_name", string_val=op.group)
    else:
        send = isinstance(op, Send)
        node.type = COMM_SEND_NODE if send else COMM_RECV_NODE
        attr("is_cpu_op", bool_val=False)
        attr("comm_dst" if send else "comm_src", int32_val=op.peer)
        attr("comm_size", int64_val=round(op.size_bytes))
        attr("comm_tag", int32_val=0)

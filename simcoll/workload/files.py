"""Workload files: the YAML/JSON form of a :class:`~.ops.Workload`.

Two forms. Listed, every rank's operations written out::

    name: toy
    samples_per_step: 64          # optional: for throughput
    nccl: "2.18"                  # optional: the release "nccl" schedules follow
    groups: {all: [0, 1]}
    ranks:                        # one list per rank, in issue order
      - - {op: compute, name: fwd, duration_s: 1.0e-3}
        - {op: collective, name: ar, collective: allreduce, group: all, size_bytes: 1MB, deps: [fwd]}
      - - {op: compute, name: fwd, flops: 2.0e+12, efficiency: 0.5}
        - {op: collective, name: ar, collective: allreduce, group: all, size_bytes: 1MB, deps: [fwd]}

or generated, a built-in job and its options (:mod:`.generators`), expanded
when read (a 1,024-GPU step is millions of operations; its file is two
lines)::

    generate: data-parallel
    options: {model: resnet50, ranks: 16, batch_per_gpu: 64}

Operation fields are those of :mod:`.ops` (``op``: compute, collective,
send or recv); sizes may be written ``1MB``, ``25MiB``. JSON takes the same
shape. Every fault is a :class:`~simcoll.errors.WorkloadError` naming the
file and the operation.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import SimcollError, WorkloadError
from ..files import parse_json, parse_yaml, read_text, write_atomic
from .ops import OP_TYPES, CollectiveOp, Compute, Op, Recv, Send, Workload

__all__ = ["load_workload", "save_workload", "workload_from_dict", "workload_to_dict"]

_TOP = {"name", "description", "samples_per_step", "nccl", "groups", "ranks", "generate", "options"}
_FIELDS = {
    "compute": {"name", "duration_s", "flops", "memory_bytes", "efficiency", "deps", "stream"},
    "collective": {"name", "collective", "group", "size_bytes", "schedule", "deps", "stream"},
    "send": {"name", "peer", "size_bytes", "deps", "stream"},
    "recv": {"name", "peer", "size_bytes", "deps", "stream"},
}


def load_workload(path: str | Path) -> Workload:
    """The workload of a ``.yaml``/``.yml``/``.json`` file (module docstring)."""
    path = Path(path)
    text = read_text(path, error=WorkloadError)
    data = (
        parse_json(text, str(path), error=WorkloadError)
        if path.suffix == ".json"
        else parse_yaml(text, str(path), error=WorkloadError)
    )
    return workload_from_dict(data, str(path))


def workload_from_dict(data: Any, where: str = "<workload>") -> Workload:
    """Build a workload from its parsed file form (module docstring)."""
    if not isinstance(data, Mapping):
        raise WorkloadError(f"{where}: expected a mapping at the top level")
    unknown = sorted(set(data) - _TOP)
    if unknown:
        raise WorkloadError(f"{where}: unknown field {unknown[0]!r} (allowed: {', '.join(sorted(_TOP))})")
    if "generate" in data:
        if "ranks" in data:
            raise WorkloadError(f"{where}: give either 'generate' or 'ranks', not both")
        from .generators import generate_workload

        options = data.get("options") or {}
        if not isinstance(options, Mapping):
            raise WorkloadError(f"{where}: options must be a mapping of the generator's options")
        try:
            return generate_workload(str(data["generate"]), **dict(options))
        except TypeError as exc:
            raise WorkloadError(f"{where}: {exc}") from None
    if "options" in data:
        raise WorkloadError(f"{where}: 'options' belongs with 'generate'")
    ranks = data.get("ranks")
    if not isinstance(ranks, list) or not ranks:
        raise WorkloadError(f"{where}: 'ranks' must list every rank's operations (or use 'generate')")
    programs = tuple(
        tuple(_op(raw, f"{where}: ranks[{r}][{i}]") for i, raw in enumerate(_list(ops, f"{where}: ranks[{r}]")))
        for r, ops in enumerate(ranks)
    )
    groups = data.get("groups") or {}
    if not isinstance(groups, Mapping):
        raise WorkloadError(f"{where}: groups must map group names to lists of ranks")
    samples = data.get("samples_per_step")
    return Workload(
        name=str(data.get("name") or Path(where).stem),
        programs=programs,
        groups={str(k): tuple(v) if isinstance(v, list) else v for k, v in groups.items()},
        samples_per_step=samples,
        nccl=None if data.get("nccl") is None else str(data["nccl"]),
        description=str(data.get("description") or ""),
    )


def _list(raw: Any, where: str) -> list:
    if not isinstance(raw, list):
        raise WorkloadError(f"{where}: expected a list of operations")
    return raw


def _op(raw: Any, where: str) -> Op:
    if not isinstance(raw, Mapping) or "op" not in raw:
        raise WorkloadError(f"{where}: expected a mapping with 'op' (one of {', '.join(OP_TYPES)})")
    kind = raw["op"]
    if not isinstance(kind, str) or kind not in OP_TYPES:
        raise WorkloadError(f"{where}: unknown op {kind!r} (one of {', '.join(OP_TYPES)})")
    fields = dict(raw)
    del fields["op"]
    unknown = sorted(set(fields) - _FIELDS[kind])
    if unknown:
        raise WorkloadError(
            f"{where}: unknown field {unknown[0]!r} of a {kind} (allowed: {', '.join(sorted(_FIELDS[kind]))})"
        )
    if "deps" in fields:
        deps = fields["deps"]
        if not isinstance(deps, list):
            raise WorkloadError(f"{where}: deps must be a list of operation names")
        fields["deps"] = tuple(str(d) for d in deps)
    if "size_bytes" in fields and isinstance(fields["size_bytes"], str):
        from ..units import parse_size

        try:
            fields["size_bytes"] = parse_size(fields["size_bytes"])
        except SimcollError as exc:
            raise WorkloadError(f"{where}: size_bytes: {exc}") from None
    for key in ("duration_s", "flops", "memory_bytes", "efficiency"):
        if isinstance(fields.get(key), str):  # YAML 1.1 reads 1.0e9 without a sign as a string
            try:
                fields[key] = float(fields[key])
            except ValueError:
                raise WorkloadError(f"{where}: {key} must be a number, got {fields[key]!r}") from None
    if "name" not in fields:
        raise WorkloadError(f"{where}: a {kind} needs a name")
    try:
        return OP_TYPES[kind](**fields)
    except TypeError as exc:
        raise WorkloadError(f"{where}: {exc}") from None


def workload_to_dict(workload: Workload) -> dict[str, Any]:
    """The listed file form of ``workload`` (default fields left out)."""
    out: dict[str, Any] = {"name": workload.name}
    if workload.description:
        out["description"] = workload.description
    if workload.samples_per_step is not None:
        out["samples_per_step"] = workload.samples_per_step
    if workload.nccl is not None:
        out["nccl"] = workload.nccl
    out["groups"] = {g: list(r) for g, r in workload.groups.items()}
    out["ranks"] = [[_op_to_dict(op) for op in program] for program in workload.programs]
    return out


def _op_to_dict(op: Op) -> dict[str, Any]:
    defaults = type(op)(**_required(op))
    out: dict[str, Any] = {"op": op.kind}
    for key in _FIELDS[op.kind]:
        value = getattr(op, key)
        if key in _required(op) or value != getattr(defaults, key):
            out[key] = list(value) if isinstance(value, tuple) else value
    return out


def _required(op: Op) -> dict[str, Any]:
    if isinstance(op, Compute):
        return {"name": op.name}
    if isinstance(op, CollectiveOp):
        return {"name": op.name, "collective": op.collective, "group": op.group, "size_bytes": op.size_bytes}
    assert isinstance(op, (Send, Recv))
    return {"name": op.name, "peer": op.peer, "size_bytes": op.size_bytes}


def save_workload(workload: Workload, path: str | Path) -> None:
    """Write ``workload`` listed, as YAML or (``.json``) JSON, atomically."""
    path = Path(path)
    data = workload_to_dict(workload)
    if path.suffix == ".json":
        text = json.dumps(data, indent=1) + "\n"
    else:
        import yaml

        text = yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=120)
    write_atomic(path, text, error=WorkloadError)

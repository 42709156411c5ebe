"""What one simulated step of a workload gives: its time, where it went, a trace.

A :class:`WorkloadResult` holds every operation's start and end. From them:

- ``step_time_s``: when the last operation ends (the step starts at 0);
- ``throughput_per_s``: the workload's samples per step over the step time;
- :meth:`~WorkloadResult.communication`: per process group (and ``p2p``),
  how long each member spends in its calls and how much of that is
  **exposed** - not hidden behind the member's own compute (the time
  communication adds to the step where it does not overlap; the usual
  measure of data-parallel overlap, e.g. PyTorch DDP, VLDB 2020, §5);
- :attr:`~WorkloadResult.timeline`: one row per operation (pandas);
- :meth:`~WorkloadResult.write_chrome_trace`: a trace Perfetto opens, one
  process per rank, one thread per stream.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..files import write_atomic
from .ops import CollectiveOp, Compute, Recv, Send, Workload

__all__ = ["WorkloadResult", "interval_union", "overlap_s"]

TIMELINE_COLUMNS = ["rank", "op", "kind", "stream", "group", "size_bytes", "start_s", "end_s"]


def interval_union(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The union of intervals ``[starts[i], ends[i])`` as sorted disjoint
    ``(start, end)`` rows.

    >>> interval_union(np.array([0.0, 1.0, 5.0]), np.array([2.0, 3.0, 6.0])).tolist()
    [[0.0, 3.0], [5.0, 6.0]]
    """
    if len(starts) == 0:
        return np.zeros((0, 2))
    order = np.argsort(starts, kind="stable")
    merged: list[list[float]] = []
    for s, e in zip(starts[order].tolist(), ends[order].tolist(), strict=True):
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    return np.array(merged)


def overlap_s(a: np.ndarray, b: np.ndarray) -> float:
    """Total length two sorted disjoint interval lists have in common.

    >>> overlap_s(np.array([[0.0, 3.0], [5.0, 6.0]]), np.array([[2.0, 5.5]]))
    1.5
    """
    i = j = 0
    total = 0.0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i, 0], b[j, 0]), min(a[i, 1], b[j, 1])
        if hi > lo:
            total += hi - lo
        if a[i, 1] < b[j, 1]:
            i += 1
        else:
            j += 1
    return float(total)


_NONE = np.zeros((0, 2))  # no intervals


def _length(intervals: np.ndarray) -> float:
    return float((intervals[:, 1] - intervals[:, 0]).sum()) if len(intervals) else 0.0


@dataclass
class WorkloadResult:
    """One simulated step (module docstring)."""

    workload: str
    machine: str
    model: str
    step_time_s: float
    samples_per_step: float | None
    rank: np.ndarray
    name: list[str]
    kind: list[str]
    stream: list[str]
    group: list[str]  # a collective's group, "p2p" for sends and receives, "" for compute
    size_bytes: np.ndarray
    start_s: np.ndarray
    end_s: np.ndarray
    groups: dict[str, tuple[int, ...]]
    stats: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_run(cls, workload: Workload, machine, *, offsets, start_s, end_s, stats) -> WorkloadResult:
        rank, name, kind, stream, group, size = [], [], [], [], [], []
        for r, program in enumerate(workload.programs):
            for op in program:
                rank.append(r)
                name.append(op.name)
                kind.append(op.kind)
                stream.append(op.stream)
                group.append(
                    op.group if isinstance(op, CollectiveOp) else "p2p" if isinstance(op, (Send, Recv)) else ""
                )
                size.append(0.0 if isinstance(op, Compute) else float(op.size_bytes))
        return cls(
            workload=workload.name,
            machine=machine.name,
            model=machine.model.name,
            step_time_s=float(end_s.max(initial=0.0)),
            samples_per_step=workload.samples_per_step,
            rank=np.array(rank, dtype=np.int64),
            name=name,
            kind=kind,
            stream=stream,
            group=group,
            size_bytes=np.array(size),
            start_s=start_s,
            end_s=end_s,
            groups={g: tuple(r) for g, r in workload.groups.items()},
            stats=stats,
        )

    @property
    def throughput_per_s(self) -> float | None:
        """Samples trained per second (None when the workload does not say how many a step trains)."""
        if self.samples_per_step is None or self.step_time_s <= 0:
            return None
        return self.samples_per_step / self.step_time_s

    @property
    def timeline(self):
        """One row per operation: rank, op, kind, stream, group, size_bytes, start_s, end_s (a DataFrame)."""
        import pandas as pd

        return pd.DataFrame(
            {
                "rank": self.rank,
                "op": self.name,
                "kind": self.kind,
                "stream": self.stream,
                "group": self.group,
                "size_bytes": self.size_bytes,
                "start_s": self.start_s,
                "end_s": self.end_s,
            },
            columns=TIMELINE_COLUMNS,
        )

    def _spans(self, key: np.ndarray) -> dict[tuple[int, int], np.ndarray]:
        """The union of the operation intervals of each (rank, ``key``) pair
        present, one sort for all of them (a step has up to millions of
        operations and thousands of (rank, group) pairs)."""
        order = np.lexsort((self.start_s, key, self.rank))
        ranks, keys = self.rank[order], key[order]
        cuts = np.flatnonzero((np.diff(ranks) != 0) | (np.diff(keys) != 0)) + 1
        spans = {}
        for part in np.split(order, cuts) if len(order) else []:
            first = part[0]
            spans[(int(self.rank[first]), int(key[first]))] = interval_union(self.start_s[part], self.end_s[part])
        return spans

    @functools.cached_property
    def _groups(self) -> tuple[list[str], np.ndarray]:
        """The group names (``""`` first where compute has none) and each operation's group code."""
        names, codes = np.unique(np.array(self.group, dtype=object).astype(str), return_inverse=True)
        return names.tolist(), codes

    @functools.cached_property
    def _busy(self) -> dict[tuple[int, int], np.ndarray]:
        """Per rank, when its compute is under way (``(rank, 0)``) and when
        it communicates (``(rank, 1)``): what the figures below share."""
        return self._spans(np.where(np.array(self.kind) == "compute", 0, 1))

    def communication(self) -> list[dict[str, Any]]:
        """Per group with calls (and ``"p2p"`` for sends and receives), over
        its member ranks: ``calls`` per member, mean ``busy_s`` (the time a
        member spends in the group's calls), mean and max ``exposed_s`` (of
        that, the time the member's compute does not cover)."""
        names, codes = self._groups
        compute = self._busy
        busy: dict[int, list[float]] = {}
        exposed: dict[int, list[float]] = {}
        for (rank, code), spans in self._spans(codes).items():
            if names[code] == "":
                continue
            length = _length(spans)
            busy.setdefault(code, []).append(length)
            exposed.setdefault(code, []).append(length - overlap_s(spans, compute.get((rank, 0), _NONE)))
        counts = np.bincount(codes, minlength=len(names))
        rows = []
        for code in sorted(busy, key=lambda c: names[c]):
            members = len(busy[code])
            rows.append({
                "group": names[code],
                "ranks": members,
                "calls": int(counts[code]) // members,
                "busy_s": float(np.mean(busy[code])),
                "exposed_s": float(np.mean(exposed[code])),
                "max_exposed_s": float(np.max(exposed[code])),
            })  # fmt: skip
        return rows

    def exposed_communication_s(self) -> float:
        """Per rank, the time it spends communicating (any group) with no
        compute of its own under way; the mean over ranks."""
        spans = self._busy
        values = [_length(spans.get((r, 1), _NONE)) - overlap_s(spans.get((r, 1), _NONE), spans.get((r, 0), _NONE))
                  for r in np.unique(self.rank).tolist()]  # fmt: skip
        return float(np.mean(values)) if values else 0.0

    def compute_s(self) -> float:
        """The mean over ranks of the time a rank's compute is under way."""
        spans = self._busy
        values = [_length(spans.get((r, 0), _NONE)) for r in np.unique(self.rank).tolist()]
        return float(np.mean(values)) if values else 0.0

    def summary(self) -> dict[str, Any]:
        """The figures as plain data (what ``simcoll workload run --json`` prints)."""
        return {
            "workload": self.workload,
            "topology": self.machine,
            "model": self.model,
            "ranks": int(len(np.unique(self.rank))),
            "operations": len(self.name),
            "step_time_s": self.step_time_s,
            "samples_per_step": self.samples_per_step,
            "throughput_per_s": self.throughput_per_s,
            "compute_s": self.compute_s(),
            "exposed_communication_s": self.exposed_communication_s(),
            "communication": self.communication(),
            "stats": {k: v for k, v in self.stats.items()},
        }

    def chrome_trace(self) -> dict[str, Any]:
        """The step as Chrome trace events: a process per rank, a thread per stream."""
        tids: dict[str, int] = {}
        events: list[dict[str, Any]] = []
        for i in range(len(self.name)):
            tid = tids.setdefault(self.stream[i], len(tids))
            args = {"group": self.group[i]} if self.group[i] else {}
            if self.size_bytes[i]:
                args["size_bytes"] = float(self.size_bytes[i])
            events.append({
                "name": self.name[i], "cat": self.kind[i], "ph": "X", "pid": int(self.rank[i]), "tid": tid,
                "ts": float(self.start_s[i]) * 1e6, "dur": float(self.end_s[i] - self.start_s[i]) * 1e6, "args": args,
            })  # fmt: skip
        for r in np.unique(self.rank).tolist():
            events.append({"name": "process_name", "ph": "M", "pid": r, "args": {"name": f"rank {r}"}})
            for stream, tid in tids.items():
                events.append({"name": "thread_name", "ph": "M", "pid": r, "tid": tid, "args": {"name": stream}})
        return {"traceEvents": events, "displayTimeUnit": "ns"}

    def write_chrome_trace(self, path: str | Path) -> None:
        """Write :meth:`chrome_trace` as JSON (atomically); open it in https://ui.perfetto.dev."""
        write_atomic(path, json.dumps(self.chrome_trace()))

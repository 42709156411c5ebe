"""The Algorithm type: a topology-level schedule of chunk transfers.

An :class:`Algorithm` says who sends which chunk where, and when, for one
:class:`~simcoll.collectives.Collective`. "When" takes one of two forms:

- **steps** (SCCL §3.3): every transfer has a ``step``; step *s* lasts
  ``rounds_per_step[s]`` rounds. A transfer in step *s* reads the state at the
  start of step *s* and its chunk is at the destination from step *s + 1* on.
- **timed** (TACCL): every transfer has ``start_s`` and ``end_s``, and may
  belong to a contiguity ``group`` of transfers on the same link sent as one
  message.

``op`` is ``"copy"`` (the destination's copy of the chunk becomes the
source's) or ``"reduce"`` (the destination combines the source's value into
its own). Producers build Algorithms; consumers (verifier, analytic cost,
simulator, compiler) read them; neither knows the other.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from fractions import Fraction
from functools import cached_property
from pathlib import Path
from typing import Any

from .collectives import Collective, collective_from_dict, collective_to_dict
from .errors import AlgorithmError
from .files import parse_json, read_text, write_atomic

TRANSFER_OPS = ("copy", "reduce")
FORMAT_VERSION = 1


@dataclass(frozen=True)
class Transfer:
    """Chunk ``chunk`` moves from rank ``src`` to rank ``dst``."""

    chunk: int
    src: int
    dst: int
    op: str = "copy"
    step: int | None = None
    start_s: float | None = None
    end_s: float | None = None
    group: int | None = None

    def describe(self) -> str:
        when = f"step {self.step}" if self.step is not None else f"t={self.start_s:.3g}s"
        verb = "reduce" if self.op == "reduce" else "send"
        return f"{verb} of chunk {self.chunk} from rank {self.src} to rank {self.dst} at {when}"


@dataclass(frozen=True)
class BandwidthConstraint:
    """One element (L, b) of SCCL's bandwidth relation B: at most ``b`` chunks
    per round in total over the directed rank pairs in ``links``."""

    links: frozenset[tuple[int, int]]
    chunks_per_round: int
    label: str = ""


def constraint_loads(
    relation: Iterable[BandwidthConstraint], pairs: Iterable[tuple[int, int]]
) -> list[tuple[BandwidthConstraint, int]]:
    """For each constraint (L, b) of ``relation``, how many of ``pairs`` (one
    per chunk sent, repeats counted) fall in L; constraints with none are left
    out. Linear in the sizes, so verifying 64-rank algorithms stays fast."""
    relation = list(relation)
    index: dict[tuple[int, int], list[int]] = {}
    for i, c in enumerate(relation):
        for pair in c.links:
            index.setdefault(pair, []).append(i)
    counts: dict[int, int] = {}
    for pair in pairs:
        for i in index.get(pair, ()):
            counts[i] = counts.get(i, 0) + 1
    return [(relation[i], n) for i, n in sorted(counts.items())]


def messages(batch: Iterable[Transfer]) -> list[list[Transfer]]:
    """The transfers of one batch grouped into messages: a TACCL contiguity
    group on one rank pair travels as one message (one α), every other
    transfer alone; singles first, then groups in order of appearance."""
    grouped: dict[tuple, list[Transfer]] = {}
    singles = []
    for t in batch:
        if t.group is None:
            singles.append([t])
        else:
            grouped.setdefault((t.group, t.src, t.dst, t.op), []).append(t)
    return singles + list(grouped.values())


@dataclass(frozen=True)
class Algorithm:
    """A verified-or-not schedule; see the module docstring."""

    name: str
    collective: Collective
    transfers: tuple[Transfer, ...]
    rounds_per_step: tuple[int, ...] = ()
    topology: str | None = None
    bandwidth: tuple[BandwidthConstraint, ...] = ()
    predicted_time_s: float | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "transfers", tuple(self.transfers))
        object.__setattr__(self, "rounds_per_step", tuple(self.rounds_per_step))
        object.__setattr__(self, "bandwidth", tuple(self.bandwidth))
        self._check_structure()
        if self.schedule == "steps" and not self.rounds_per_step:
            steps = 1 + max((t.step for t in self.transfers), default=-1)
            object.__setattr__(self, "rounds_per_step", (1,) * steps)

    def _check_structure(self) -> None:
        p, g = self.collective.num_ranks, self.collective.num_chunks
        kinds = set()
        for i, t in enumerate(self.transfers):
            where = f"{self.name}: transfer {i} ({t.chunk}, {t.src}->{t.dst})"
            for name, value, hi in (("chunk", t.chunk, g), ("src", t.src, p), ("dst", t.dst, p)):
                if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < hi:
                    raise AlgorithmError(f"{where}: {name} {value!r} out of range 0..{hi - 1}")
            if t.src == t.dst:
                raise AlgorithmError(f"{where}: source and destination are the same rank")
            if t.op not in TRANSFER_OPS:
                raise AlgorithmError(f"{where}: op {t.op!r} is not one of {TRANSFER_OPS}")
            if t.step is not None:
                if not isinstance(t.step, int) or t.step < 0:
                    raise AlgorithmError(f"{where}: step must be a non-negative integer, got {t.step!r}")
                if self.rounds_per_step and t.step >= len(self.rounds_per_step):
                    raise AlgorithmError(
                        f"{where}: step {t.step} but rounds_per_step lists {len(self.rounds_per_step)}"
                    )
                kinds.add("steps")
            if t.start_s is not None or t.end_s is not None:
                if t.start_s is None or t.end_s is None or t.end_s <= t.start_s or t.start_s < 0:
                    raise AlgorithmError(f"{where}: timed transfers need 0 <= start_s < end_s")
                kinds.add("timed")
            if t.step is None and t.start_s is None:
                raise AlgorithmError(f"{where}: has neither a step nor a start time")
        if len(kinds) > 1:
            raise AlgorithmError(f"{self.name}: mixes step-annotated and timed transfers")
        if any(not isinstance(r, int) or r < 1 for r in self.rounds_per_step):
            raise AlgorithmError(f"{self.name}: rounds_per_step must be positive integers, got {self.rounds_per_step}")
        for b in self.bandwidth:
            if b.chunks_per_round < 0 or any(not (0 <= a < p and 0 <= z < p) for a, z in b.links):
                raise AlgorithmError(f"{self.name}: bandwidth constraint {b.label or sorted(b.links)} is out of range")

    # -- shape --------------------------------------------------------------
    @property
    def schedule(self) -> str:
        """``"steps"`` (k-synchronous) or ``"timed"`` (TACCL-style)."""
        if self.transfers and self.transfers[0].step is None:
            return "timed"
        return "steps"

    @property
    def num_ranks(self) -> int:
        return self.collective.num_ranks

    @property
    def chunks(self) -> int:
        """C: chunks per rank's contribution (the collective's chunk factor)."""
        return self.collective.chunk_factor

    @property
    def steps(self) -> int:
        """S: number of synchronous steps."""
        return len(self.rounds_per_step)

    @property
    def rounds(self) -> int:
        """R: total rounds."""
        return sum(self.rounds_per_step)

    @property
    def bandwidth_cost(self) -> Fraction:
        """R / C, SCCL's bandwidth cost."""
        return Fraction(self.rounds, self.chunks)

    def transfers_in_step(self, step: int) -> list[Transfer]:
        return list(self._by_step.get(step, ()))

    @cached_property
    def _by_step(self) -> dict[int | None, tuple[Transfer, ...]]:
        by_step: dict[int | None, list[Transfer]] = {}
        for t in self.transfers:
            by_step.setdefault(t.step, []).append(t)
        return {s: tuple(ts) for s, ts in by_step.items()}

    def batches(self) -> list[list[Transfer]]:
        """The transfers in schedule order, cut into batches: one per step, or
        one per start time for timed schedules. A batch reads the state before
        any of its own updates (SCCL §3.3); consumers (analytic cost,
        simulator, compiler) all read schedules this way."""
        key = (lambda t: t.step) if self.schedule == "steps" else (lambda t: t.start_s)
        out: list[list[Transfer]] = []
        for t in sorted(self.transfers, key=key):
            if out and key(out[-1][0]) == key(t):
                out[-1].append(t)
            else:
                out.append([t])
        return out

    def with_changes(self, **changes: Any) -> Algorithm:
        return Algorithm(**{**{f.name: getattr(self, f.name) for f in fields(self)}, **changes})

    # -- JSON -----------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        transfers = []
        for t in self.transfers:
            entry: dict[str, Any] = {"chunk": t.chunk, "src": t.src, "dst": t.dst, "op": t.op}
            for key in ("step", "start_s", "end_s", "group"):
                if getattr(t, key) is not None:
                    entry[key] = getattr(t, key)
            transfers.append(entry)
        out: dict[str, Any] = {
            "format": "simcoll.algorithm",
            "version": FORMAT_VERSION,
            "name": self.name,
            "collective": collective_to_dict(self.collective),
            "topology": self.topology,
            "schedule": self.schedule,
            "rounds_per_step": list(self.rounds_per_step),
            "transfers": transfers,
        }
        if self.bandwidth:
            out["bandwidth"] = [
                {"links": sorted([a, b] for a, b in c.links), "chunks_per_round": c.chunks_per_round, "label": c.label}
                for c in self.bandwidth
            ]
        if self.predicted_time_s is not None:
            out["predicted_time_s"] = self.predicted_time_s
        if self.metadata:
            out["metadata"] = dict(self.metadata)
        return out

    @classmethod
    def from_dict(cls, data: Any) -> Algorithm:
        if not isinstance(data, Mapping) or data.get("format") != "simcoll.algorithm":
            raise AlgorithmError('not a simcoll Algorithm (expected "format": "simcoll.algorithm")')
        try:
            transfers = tuple(
                Transfer(
                    chunk=t["chunk"],
                    src=t["src"],
                    dst=t["dst"],
                    op=t.get("op", "copy"),
                    step=t.get("step"),
                    start_s=t.get("start_s"),
                    end_s=t.get("end_s"),
                    group=t.get("group"),
                )
                for t in data["transfers"]
            )
            bandwidth = tuple(
                BandwidthConstraint(frozenset((a, b) for a, b in c["links"]), c["chunks_per_round"], c.get("label", ""))
                for c in data.get("bandwidth", [])
            )
            return cls(
                name=data["name"],
                collective=collective_from_dict(data["collective"]),
                transfers=transfers,
                rounds_per_step=tuple(data.get("rounds_per_step", ())),
                topology=data.get("topology"),
                bandwidth=bandwidth,
                predicted_time_s=data.get("predicted_time_s"),
                metadata=data.get("metadata", {}),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise AlgorithmError(f"malformed Algorithm JSON: {type(exc).__name__}: {exc}") from None

    def to_json(self, indent: int | None = 1) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_json(cls, text: str) -> Algorithm:
        return cls.from_dict(parse_json(text, error=AlgorithmError))

    def save(self, path: str | Path) -> None:
        write_atomic(path, self.to_json(), error=AlgorithmError)

    @classmethod
    def load(cls, path: str | Path) -> Algorithm:
        return cls.from_json(read_text(path, error=AlgorithmError))


def steps_from_lists(
    name: str, collective: Collective, steps: Iterable[Iterable[tuple[int, int, int, str]]], **kwargs: Any
) -> Algorithm:
    """Build a step-scheduled Algorithm from per-step lists of
    ``(chunk, src, dst, op)`` tuples; one round per step unless
    ``rounds_per_step`` is given."""
    transfers = [Transfer(chunk=c, src=s, dst=d, op=op, step=i) for i, step in enumerate(steps) for c, s, d, op in step]
    return Algorithm(name=name, collective=collective, transfers=tuple(transfers), **kwargs)

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

In-network reduction (NVLink SHARP, IB SHARP) is a second kind of scheduled
operation, :class:`SwitchReduction`: switch ``S`` reads chunk ``c`` from each
rank of ``sources``, combines the values (one source: a plain multicast) and
delivers the result to every rank of ``destinations``, whose copy of ``c`` it
replaces. It is scheduled like a transfer (a ``step``, or ``start_s`` /
``end_s``), reads the state at the start of its batch and lands at the end, and
lives in :attr:`Algorithm.switch_reductions`. Consumers that cannot time or
lower it refuse it by name (:meth:`Algorithm.require_point_to_point`).
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
class SwitchReduction:
    """Switch ``switch`` (a topology component name) combines chunk ``chunk``
    of every rank in ``sources`` and multicasts the result to every rank in
    ``destinations`` (module docstring). The topology must declare the switch
    ``reduce: true`` when there are several sources and ``multicast: true``
    when there are several destinations (checked by :func:`simcoll.verify.check`)."""

    chunk: int
    switch: str
    sources: tuple[int, ...]
    destinations: tuple[int, ...]
    step: int | None = None
    start_s: float | None = None
    end_s: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "sources", tuple(self.sources))
        object.__setattr__(self, "destinations", tuple(self.destinations))

    def describe(self) -> str:
        when = f"step {self.step}" if self.step is not None else f"t={self.start_s:.3g}s"
        return (
            f"in-switch reduction of chunk {self.chunk} in {self.switch} from ranks {list(self.sources)} "
            f"to ranks {list(self.destinations)} at {when}"
        )


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
    switch_reductions: tuple[SwitchReduction, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "transfers", tuple(self.transfers))
        object.__setattr__(self, "switch_reductions", tuple(self.switch_reductions))
        object.__setattr__(self, "rounds_per_step", tuple(self.rounds_per_step))
        object.__setattr__(self, "bandwidth", tuple(self.bandwidth))
        self._check_structure()
        if self.schedule == "steps" and not self.rounds_per_step:
            steps = 1 + max((t.step for t in (*self.transfers, *self.switch_reductions)), default=-1)
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
        for i, r in enumerate(self.switch_reductions):
            kinds.add(self._check_switch_reduction(i, r))
        if len(kinds) > 1:
            raise AlgorithmError(f"{self.name}: mixes step-annotated and timed transfers")
        if any(not isinstance(r, int) or r < 1 for r in self.rounds_per_step):
            raise AlgorithmError(f"{self.name}: rounds_per_step must be positive integers, got {self.rounds_per_step}")
        for b in self.bandwidth:
            if b.chunks_per_round < 0 or any(not (0 <= a < p and 0 <= z < p) for a, z in b.links):
                raise AlgorithmError(f"{self.name}: bandwidth constraint {b.label or sorted(b.links)} is out of range")

    def _check_switch_reduction(self, i: int, r: SwitchReduction) -> str:
        """Structural checks of switch reduction ``i``; its schedule kind."""
        p, g = self.collective.num_ranks, self.collective.num_chunks
        where = f"{self.name}: switch_reductions[{i}] (chunk {r.chunk} in {r.switch!r})"
        if not isinstance(r.chunk, int) or isinstance(r.chunk, bool) or not 0 <= r.chunk < g:
            raise AlgorithmError(f"{where}: chunk {r.chunk!r} out of range 0..{g - 1}")
        if not isinstance(r.switch, str) or not r.switch:
            raise AlgorithmError(f"{where}: switch must be a component name, got {r.switch!r}")
        for name, ranks in (("sources", r.sources), ("destinations", r.destinations)):
            if not ranks:
                raise AlgorithmError(f"{where}: {name} is empty")
            bad = [x for x in ranks if not isinstance(x, int) or isinstance(x, bool) or not 0 <= x < p]
            if bad:
                raise AlgorithmError(f"{where}: {name}: rank {bad[0]!r} out of range 0..{p - 1}")
            if len(set(ranks)) != len(ranks):
                raise AlgorithmError(f"{where}: {name} names a rank twice: {list(ranks)}")
        if r.step is not None:
            if not isinstance(r.step, int) or isinstance(r.step, bool) or r.step < 0:
                raise AlgorithmError(f"{where}: step must be a non-negative integer, got {r.step!r}")
            if self.rounds_per_step and r.step >= len(self.rounds_per_step):
                raise AlgorithmError(f"{where}: step {r.step} but rounds_per_step lists {len(self.rounds_per_step)}")
            if r.start_s is not None or r.end_s is not None:
                raise AlgorithmError(f"{where}: has both a step and a start time")
            return "steps"
        if r.start_s is None or r.end_s is None or not 0 <= r.start_s < r.end_s:
            raise AlgorithmError(f"{where}: needs a step, or times with 0 <= start_s < end_s")
        return "timed"

    def require_point_to_point(self, what: str) -> None:
        """Raise :class:`AlgorithmError` naming ``what`` (a consumer, e.g. "MSCCL
        XML export") when the Algorithm has in-switch reductions, which that
        consumer cannot represent."""
        if self.switch_reductions:
            first = self.switch_reductions[0]
            raise AlgorithmError(
                f"{self.name}: {what} does not support in-switch reduction/multicast "
                f"({len(self.switch_reductions)} switch reductions, first: {first.describe()}); "
                "simulate it in Algorithm mode instead"
            )

    # -- shape --------------------------------------------------------------
    @property
    def schedule(self) -> str:
        """``"steps"`` (k-synchronous) or ``"timed"`` (TACCL-style)."""
        first = self.transfers[0] if self.transfers else (self.switch_reductions or (None,))[0]
        if first is not None and first.step is None:
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

    def schedule_batches(self) -> list[tuple[list[Transfer], list[SwitchReduction]]]:
        """Like :meth:`batches`, with the in-switch reductions: per batch (one
        step, or one start time, in schedule order) its transfers and its switch
        reductions; both read the state before any update of the batch."""
        timed = self.schedule != "steps"
        by_key: dict[Any, tuple[list[Transfer], list[SwitchReduction]]] = {}
        for t in self.transfers:
            by_key.setdefault(t.start_s if timed else t.step, ([], []))[0].append(t)
        for r in self.switch_reductions:
            by_key.setdefault(r.start_s if timed else r.step, ([], []))[1].append(r)
        return [by_key[k] for k in sorted(by_key)]

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
        if self.switch_reductions:
            out["switch_reductions"] = [
                {
                    "chunk": r.chunk,
                    "switch": r.switch,
                    "sources": list(r.sources),
                    "destinations": list(r.destinations),
                    **{key: getattr(r, key) for key in ("step", "start_s", "end_s") if getattr(r, key) is not None},
                }
                for r in self.switch_reductions
            ]
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
                switch_reductions=tuple(
                    SwitchReduction(
                        chunk=r["chunk"],
                        switch=r["switch"],
                        sources=tuple(r["sources"]),
                        destinations=tuple(r["destinations"]),
                        step=r.get("step"),
                        start_s=r.get("start_s"),
                        end_s=r.get("end_s"),
                    )
                    for r in data.get("switch_reductions", [])
                ),
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

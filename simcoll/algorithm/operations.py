"""The two kinds of operation an :class:`~simcoll.algorithm.Algorithm`
schedules: a :class:`Transfer` of one chunk from one rank to another, and a
:class:`SwitchReduction`, a chunk combined and multicast inside a switch
(what they mean: :mod:`simcoll.algorithm`)."""

from __future__ import annotations

from dataclasses import dataclass

TRANSFER_OPS = ("copy", "reduce")


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
    ``destinations`` (:mod:`simcoll.algorithm`). The topology must declare the switch
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

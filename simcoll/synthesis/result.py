"""What a solver backend answers, and what synthesis reports to the user."""

from __future__ import annotations

from dataclasses import dataclass

from ..algorithm import Algorithm

STATUSES = ("sat", "unsat", "unknown")


@dataclass(frozen=True)
class SolverOutcome:
    """A backend's answer for one instance: on "sat", the sends
    ``(chunk, src, dst, step)`` and the rounds of each step."""

    status: str
    sends: tuple[tuple[int, int, int, int], ...]
    rounds_per_step: tuple[int, ...]
    solve_s: float
    reason: str = ""


@dataclass(frozen=True)
class SynthesisResult:
    """One synthesis query: ``status`` "sat" (with a verified ``algorithm``),
    "unsat" (no k-synchronous algorithm with these C, S, R exists under B) or
    "unknown" (the time limit ran out). ``time_s`` is wall time, encoding
    included, over every solver call the query needed."""

    status: str
    collective: str
    chunks: int
    steps: int
    rounds: int
    backend: str
    time_s: float
    algorithm: Algorithm | None = None
    reason: str = ""

    def to_dict(self) -> dict:
        return {
            "status": self.status,
            "collective": self.collective,
            "chunks": self.chunks,
            "steps": self.steps,
            "rounds": self.rounds,
            "backend": self.backend,
            "time_s": round(self.time_s, 4),
            **({"reason": self.reason} if self.reason else {}),
        }

"""Algorithm generators, grouped by family, and the registry the CLI and
``compare`` use.

A generator is a plain function ``f(topology, collective, **options) ->
Algorithm`` that raises :class:`~simcoll.errors.NotApplicableError` where it
does not apply. Register new families in :data:`REGISTRY`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..algorithm import Algorithm
from ..collectives import Collective, canonical_name, make_collective
from ..errors import NotApplicableError, SimcollError
from ..topology import Topology
from .direct import direct
from .ring import find_ring, ring, ring_allgather, ring_allreduce, ring_reducescatter


@dataclass(frozen=True)
class Generator:
    """A registered algorithm family."""

    name: str
    function: Callable[..., Algorithm]
    collectives: tuple[str, ...]
    summary: str
    options: dict[str, str] = field(default_factory=dict)

    def default_chunks(self, collective: str, num_ranks: int) -> int:
        """Chunk factor used when the user gives none: Allreduce splits its
        buffer into one block per rank."""
        return num_ranks if collective == "allreduce" else 1


REGISTRY: dict[str, Generator] = {
    g.name: g
    for g in (
        Generator(
            "ring",
            ring,
            ("allgather", "reducescatter", "allreduce"),
            "single logical ring over a Hamiltonian cycle of the GPU links (NV-Group eqs. 1-3)",
            {"ring": "comma-separated rank order, e.g. 0,3,2,1,5,6,7,4 (default: found automatically)"},
        ),
        Generator(
            "direct",
            direct,
            ("allgather", "reducescatter", "allreduce"),
            "all-pairs exchange; Allreduce as GC3's two-step All Pairs (§7.1.2)",
        ),
    )
}


def parse_options(generator: Generator, options: dict[str, str]) -> dict[str, Any]:
    """Turn CLI ``k=v`` strings into the generator's keyword arguments."""
    parsed: dict[str, Any] = {}
    for key, value in options.items():
        if key not in generator.options:
            known = ", ".join(generator.options) or "none"
            raise SimcollError(f"{generator.name} has no option {key!r} (options: {known})")
        if key == "ring":
            try:
                parsed[key] = [int(x) for x in value.split(",")]
            except ValueError:
                raise SimcollError(f"option ring={value!r}: expected comma-separated ranks") from None
        else:
            parsed[key] = value
    return parsed


def generate(
    name: str, topology: Topology, collective: Collective | str, chunks: int | None = None, **options: Any
) -> Algorithm:
    """Run the generator ``name``; ``collective`` may be a name, completed with
    the topology's rank count and ``chunks`` (default: the generator's)."""
    if name not in REGISTRY:
        raise SimcollError(f"unknown algorithm {name!r}; known: {', '.join(REGISTRY)}")
    generator = REGISTRY[name]
    if isinstance(collective, str):
        coll_name = canonical_name(collective)
        collective = make_collective(
            coll_name,
            topology.num_ranks,
            chunks or generator.default_chunks(coll_name, topology.num_ranks),
        )
    return generator.function(topology, collective, **options)


def applicable(topology: Topology, collective: str, chunks: int | None = None) -> dict[str, Algorithm | str]:
    """Every registered generator for ``collective`` on ``topology``: the
    Algorithm, or the reason it does not apply."""
    collective = canonical_name(collective)
    out: dict[str, Algorithm | str] = {}
    for name, generator in REGISTRY.items():
        if collective not in generator.collectives:
            continue
        try:
            out[name] = generate(name, topology, collective, chunks)
        except NotApplicableError as exc:
            out[name] = str(exc)
    return out


__all__ = [
    "REGISTRY",
    "Generator",
    "applicable",
    "direct",
    "find_ring",
    "generate",
    "ring",
    "ring_allgather",
    "ring_allreduce",
    "ring_reducescatter",
]

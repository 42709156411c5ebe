"""The schedules the ``nccl`` baseline builds, kept across buffer sizes.

A baseline's schedule depends on the machine and on what NCCL chose (the
algorithm, channels, pipeline pieces), not on the size itself, so it is built
once and the simulator's plan kept with it serves every size it is timed at.
"""

from __future__ import annotations

from collections.abc import Callable

from ..algorithm import Algorithm
from ..topology import Topology

#: (topology name, ranks, *key) -> (the topology object, its schedule).
_CACHE: dict[tuple, tuple[Topology, Algorithm]] = {}
#: Entries kept before the cache starts again.
MAX_ENTRIES = 256


def cached_schedule(key: tuple, topology: Topology, build: Callable[[], Algorithm]) -> Algorithm:
    """The schedule ``build`` makes for ``key`` on ``topology``, built once.
    Entries are kept per topology object (a topology of the same name read
    again is built for again)."""
    full = (topology.name, topology.num_ranks, *key)
    hit = _CACHE.get(full)
    if hit is not None and hit[0] is topology:
        return hit[1]
    algorithm = build()
    if len(_CACHE) > MAX_ENTRIES:
        _CACHE.clear()
    _CACHE[full] = (topology, algorithm)
    return algorithm


__all__ = ["cached_schedule"]

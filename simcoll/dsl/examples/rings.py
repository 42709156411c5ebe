"""GC3 Fig. 3(b): the ring ReduceScatter and AllGather helpers."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..core import chunk


def reduce_scatter_ring(
    ranks: Sequence[int], offset: int, count: int, channel: Callable[[int], int | None] = lambda r: None
) -> None:
    """Ring ReduceScatter over ``ranks`` of the input chunks ``offset +
    r·count`` (``count`` at a time): block r travels the ring from
    ``ranks[r+1]`` and ends reduced on ``ranks[r]`` (GC3 Fig. 3(b) lines 4–11).
    ``channel(r)`` is block r's channel (None: the compiler's choice)."""
    size = len(ranks)
    for r in range(size):
        index = offset + r * count
        c = chunk(ranks[(r + 1) % size], "input", index, count)
        for step in range(1, size):
            nxt = ranks[(step + r + 1) % size]
            c = chunk(nxt, "input", index, count).reduce(c, ch=channel(r))


def allgather_ring(
    ranks: Sequence[int], offset: int, count: int, channel: Callable[[int], int | None] = lambda r: None
) -> None:
    """Ring AllGather over ``ranks``: block r starts on ``ranks[r]`` and is
    copied around the ring (GC3 Fig. 3(b) lines 13–20)."""
    size = len(ranks)
    for r in range(size):
        index = offset + r * count
        c = chunk(ranks[r], "input", index, count)
        for step in range(1, size):
            nxt = ranks[(step + r) % size]
            c = c.copy(nxt, "input", index, ch=channel(r))

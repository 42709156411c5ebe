"""Collective specifications as SYNCOLL instances (SCCL §3.2, Tables 1–2).

A :class:`Collective` fixes the global chunk space ``[G]``, where every chunk
starts (the *precondition*) and where it must end (the *postcondition*), and
also *at which buffer index*: ``input_layout[r][i]`` is the chunk id in rank
``r``'s input buffer at index ``i`` and ``output_layout[r][j]`` the chunk that
must be in its output buffer at index ``j``. The SCCL relations are the sets
of (chunk, rank) pairs these layouts hold (:attr:`Collective.pre`,
:attr:`Collective.post`).

Chunk ids follow SCCL's global numbering (Table 1: the c-th input chunk of node
n is ``c * P + n`` in the Scattered relation); buffer layouts follow NCCL (the
Allgather output is the concatenation of the ranks' inputs, rank-major).

*Combining* collectives (Reduce, ReduceScatter, Allreduce) start with one
contribution of each chunk on every rank holding it in the precondition and
must end with the reduction of all of them.

The chunk factor C is the number of chunks per rank's contribution, as in
SCCL's tables; for Allreduce (G = C) it is the number of chunks of the buffer,
so C = P gives one chunk per rank after the ReduceScatter half.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from .errors import CollectiveError, CollectiveTooLargeError
from .limits import MAX_COLLECTIVE_SLOTS, MAX_GPUS

Layout = tuple[tuple[int, ...], ...]


# -- SCCL Table 1 relations ---------------------------------------------------
def relation_all(num_chunks: int, num_ranks: int) -> frozenset[tuple[int, int]]:
    """SYNCOLL's relation All: every chunk on every rank, ``[G] × [P]``.

    Parameters
    ----------
    num_chunks : int
        G, the number of chunks.
    num_ranks : int
        P, the number of ranks.

    Returns
    -------
    frozenset of (int, int)
        The (chunk, rank) pairs.

    References
    ----------
    .. [1] Cai et al., "Synthesizing Optimal Collective Algorithms" (SCCL),
       PPoPP 2021, Table 2.

    Examples
    --------
    >>> sorted(relation_all(2, 2))
    [(0, 0), (0, 1), (1, 0), (1, 1)]
    """
    return frozenset((c, n) for c in range(num_chunks) for n in range(num_ranks))


def relation_root(num_chunks: int, root: int) -> frozenset[tuple[int, int]]:
    """SYNCOLL's relation Root: every chunk on the root, ``[G] × {root}``.

    Parameters
    ----------
    num_chunks : int
        G, the number of chunks.
    root : int
        The root rank.

    Returns
    -------
    frozenset of (int, int)
        The (chunk, rank) pairs.

    References
    ----------
    .. [1] Cai et al., "Synthesizing Optimal Collective Algorithms" (SCCL),
       PPoPP 2021, Table 2.

    Examples
    --------
    >>> sorted(relation_root(2, 1))
    [(0, 1), (1, 1)]
    """
    return frozenset((c, root) for c in range(num_chunks))


def relation_scattered(num_chunks: int, num_ranks: int) -> frozenset[tuple[int, int]]:
    """SYNCOLL's relation Scattered: chunk c on rank ``c mod P``.

    Parameters
    ----------
    num_chunks : int
        G, the number of chunks.
    num_ranks : int
        P, the number of ranks.

    Returns
    -------
    frozenset of (int, int)
        The (chunk, rank) pairs.

    References
    ----------
    .. [1] Cai et al., "Synthesizing Optimal Collective Algorithms" (SCCL),
       PPoPP 2021, Table 2.

    Examples
    --------
    >>> sorted(relation_scattered(4, 2))
    [(0, 0), (1, 1), (2, 0), (3, 1)]
    """
    return frozenset((c, c % num_ranks) for c in range(num_chunks))


def relation_transpose(num_chunks: int, num_ranks: int) -> frozenset[tuple[int, int]]:
    """SYNCOLL's relation Transpose: chunk c on rank ``floor(c / P) mod P``.

    Parameters
    ----------
    num_chunks : int
        G, the number of chunks.
    num_ranks : int
        P, the number of ranks.

    Returns
    -------
    frozenset of (int, int)
        The (chunk, rank) pairs.

    References
    ----------
    .. [1] Cai et al., "Synthesizing Optimal Collective Algorithms" (SCCL),
       PPoPP 2021, Table 2 (the Alltoall postcondition).

    Examples
    --------
    >>> sorted(relation_transpose(4, 2))
    [(0, 0), (1, 0), (2, 1), (3, 1)]
    """
    return frozenset((c, (c // num_ranks) % num_ranks) for c in range(num_chunks))


@dataclass(frozen=True)
class Collective:
    """A collective instance on ``num_ranks`` ranks. Build with
    :func:`make_collective` or :func:`custom_collective`."""

    name: str
    num_ranks: int
    chunk_factor: int
    num_chunks: int
    input_layout: Layout
    output_layout: Layout
    combining: bool
    root: int | None = None
    inplace: bool = False
    builtin: bool = False

    # -- SYNCOLL relations (cached: verifiers ask for them per chunk) ----------
    @cached_property
    def pre(self) -> frozenset[tuple[int, int]]:
        """(chunk, rank) pairs present before the collective."""
        return frozenset((c, r) for r, layout in enumerate(self._listable(self.input_layout)) for c in layout)

    @cached_property
    def post(self) -> frozenset[tuple[int, int]]:
        """(chunk, rank) pairs required after it."""
        return frozenset((c, r) for r, layout in enumerate(self._listable(self.output_layout)) for c in layout)

    def _listable(self, layout: Layout) -> Layout:
        """``layout``, refused where its (chunk, rank) pairs are more than
        :data:`~simcoll.limits.MAX_COLLECTIVE_SLOTS` (an Allreduce's ranks
        share one layout of C chunks, but its pairs number P·C: 134 million
        for NCCL's rings on 4,096 GPUs, some 15 GB as Python sets)."""
        pairs = sum(map(len, layout))
        if pairs > MAX_COLLECTIVE_SLOTS:
            raise CollectiveTooLargeError(
                f"{self.name} on {self.num_ranks:,} ranks with chunk factor {self.chunk_factor:,}: its {pairs:,} "
                f"(chunk, rank) pairs are more than simcoll lists one by one ({MAX_COLLECTIVE_SLOTS:,}, simcoll.limits)"
            )
        return layout

    @cached_property
    def _contributors(self) -> dict[int, frozenset[int]]:
        holders: dict[int, set[int]] = {}
        for c, r in self.pre:
            holders.setdefault(c, set()).add(r)
        return {c: frozenset(rs) for c, rs in holders.items()}

    def contributors(self, chunk: int) -> frozenset[int]:
        """Ranks holding (a contribution of) ``chunk`` in the precondition."""
        return self._contributors.get(chunk, frozenset())

    # -- buffers ----------------------------------------------------------
    def buffer_chunks(self, rank: int, buffer: str) -> int:
        """Number of chunks in ``buffer`` ("input" or "output") of ``rank``."""
        layout = self.input_layout if buffer == "input" else self.output_layout
        return len(layout[rank])

    @property
    def size_chunks(self) -> int:
        """Chunks in the buffer the collective's size is named by (nccl-tests:
        the Allgather output, the ReduceScatter input, the Allreduce buffer)."""
        return max(max(len(i), len(o)) for i, o in zip(self.input_layout, self.output_layout, strict=True))

    def inplace_alias(self, rank: int) -> tuple[str, str, int] | None:
        """For in-place collectives: ``(alias, target, offset)`` meaning index
        ``i`` of buffer ``alias`` is index ``offset + i`` of buffer ``target`` on
        ``rank``; ``None`` when the buffers are distinct."""
        if not self.inplace:
            return None
        n_in, n_out = len(self.input_layout[rank]), len(self.output_layout[rank])
        if n_in == 0 or n_out == 0:
            return None
        c = self.chunk_factor
        if self.name in ("allgather", "gather"):
            return ("input", "output", rank * c)
        if self.name in ("reducescatter", "scatter"):
            return ("output", "input", rank * c)
        if n_out <= n_in:
            return ("output", "input", 0)
        return ("input", "output", 0)

    @property
    def busbw_factor(self) -> float:
        """nccl-tests bus-bandwidth factor (busbw = algbw × factor)."""
        n = self.num_ranks
        if self.name == "allreduce":
            return 2 * (n - 1) / n
        if self.name in ("allgather", "reducescatter", "alltoall", "gather", "scatter"):
            return (n - 1) / n
        return 1.0

    def describe(self) -> str:
        extra = f", root {self.root}" if self.root is not None else ""
        place = ", in-place" if self.inplace else ""
        return f"{self.name} on {self.num_ranks} ranks, chunk factor {self.chunk_factor}{extra}{place}"


# -- built-in collectives (SCCL Table 2, plus the combining ones of §3.5) ------
COLLECTIVES = (
    "allgather",
    "alltoall",
    "broadcast",
    "gather",
    "scatter",
    "reduce",
    "reducescatter",
    "allreduce",
    "alltonext",
    "sendrecv",
)
COMBINING = frozenset({"reduce", "reducescatter", "allreduce"})
ROOTED = frozenset({"broadcast", "gather", "scatter", "reduce"})
_ALIASES = {
    "reduce_scatter": "reducescatter",
    "reduce-scatter": "reducescatter",
    "all_gather": "allgather",
    "all_reduce": "allreduce",
    "all_to_all": "alltoall",
    "all-to-all": "alltoall",
    "all-gather": "allgather",
    "all-reduce": "allreduce",
    "bcast": "broadcast",
    "all_to_next": "alltonext",
    "send_recv": "sendrecv",
}


#: Collectives whose ranks all list one buffer layout (in or out): their size is that buffer's C chunks.
SHARED_LAYOUT = ("allreduce", "broadcast", "reduce")


def canonical_name(name: str) -> str:
    """Normalise a collective name ("reduce_scatter" -> "reducescatter")."""
    if not isinstance(name, str):
        raise CollectiveError(f"a collective's name must be a string, got {name!r}")
    key = name.strip().lower()
    key = _ALIASES.get(key, key)
    if key not in COLLECTIVES:
        raise CollectiveError(f"unknown collective {name!r}; known: {', '.join(COLLECTIVES)}")
    return key


def make_collective(
    name: str, num_ranks: int, chunk_factor: int = 1, *, root: int | None = None, inplace: bool = False
) -> Collective:
    """A built-in collective by name.

    Parameters
    ----------
    name : str
        A collective name or alias (``allgather``, ``allreduce``,
        ``reducescatter``, ``alltoall``, ``broadcast``, ``reduce``, ``gather``,
        ``scatter``, ``alltonext``, ``sendrecv``).
    num_ranks : int
        P, the number of ranks.
    chunk_factor : int
        C, the chunks per rank's share of the buffer.
    root : int, optional
        The root of a rooted collective (broadcast, gather, scatter, reduce;
        default 0); the others take none.
    inplace : bool
        Whether each rank's input is a slice of its output.

    Returns
    -------
    Collective

    Raises
    ------
    CollectiveError
        For an unknown name, a bad count or a root that is not a rank or
        that the collective does not take.

    References
    ----------
    .. [1] Cai et al., "Synthesizing Optimal Collective Algorithms" (SCCL),
       PPoPP 2021, Table 2 and §3.5 (combining collectives).
    .. [2] Cowan et al., "GC3: An Optimizing Compiler for GPU Collective
       Communication", arXiv:2201.11840, 2022, §7.4 (AllToNext: rank i sends
       its buffer to rank i+1, the last rank sends nothing).
    .. [3] NVIDIA nccl-tests, ``src/sendrecv.cu`` (SendRecv: every rank
       sends its buffer to rank r+1 and receives rank r-1's, cyclically).

    Examples
    --------
    >>> c = make_collective("allgather", 4, chunk_factor=2)
    >>> c.num_chunks, c.input_layout[1], c.combining
    (8, (1, 5), False)
    >>> make_collective("reduce", 4, root=2).combining
    True
    """
    key = canonical_name(name)
    _check_int("num_ranks", num_ranks, 2 if key in ("alltonext", "sendrecv") else 1)
    _check_int("chunk_factor", chunk_factor, 1)
    p, c = num_ranks, chunk_factor
    # the chunks its layouts list: one buffer's C for those whose ranks all share it
    slots = p * p * c if key == "alltoall" else c if key in SHARED_LAYOUT else p * c
    if p > MAX_GPUS or slots > MAX_COLLECTIVE_SLOTS:
        raise CollectiveTooLargeError(
            f"{key} on {p:,} ranks with chunk factor {c:,} lists {slots:,} buffer slots, more than "
            f"simcoll builds (at most {MAX_GPUS:,} ranks and {MAX_COLLECTIVE_SLOTS:,} slots, simcoll.limits)"
        )
    if key in ROOTED:
        root = 0 if root is None else root
        if not isinstance(root, int) or not 0 <= root < p:
            raise CollectiveError(f"{key}: root {root!r} is not a rank in 0..{p - 1}")
    elif root is not None:
        raise CollectiveError(f"{key} has no root (got root={root})")

    def scattered(n: int) -> tuple[int, ...]:  # input chunk i of rank n is i*P + n
        return tuple(i * p + n for i in range(c))

    def rank_major() -> tuple[int, ...]:  # the concatenation of the scattered inputs (P·C: built where used)
        return tuple(i * p + r for r in range(p) for i in range(c))

    everything = tuple(range(c))
    none: tuple[int, ...] = ()
    if key == "allgather":
        g, inputs, outputs = p * c, [scattered(n) for n in range(p)], [rank_major()] * p
    elif key == "alltoall":
        # chunk from s to d with index i is (i*P + d)*P + s: Scattered pre, Transpose post.
        g = p * p * c
        inputs = [tuple((i * p + d) * p + s for d in range(p) for i in range(c)) for s in range(p)]
        outputs = [tuple((i * p + d) * p + s for s in range(p) for i in range(c)) for d in range(p)]
    elif key == "broadcast":
        g, inputs, outputs = c, [everything if n == root else none for n in range(p)], [everything] * p
    elif key == "gather":
        g = p * c
        inputs = [scattered(n) for n in range(p)]
        outputs = [rank_major() if n == root else none for n in range(p)]
    elif key == "scatter":
        g = p * c
        inputs = [rank_major() if n == root else none for n in range(p)]
        outputs = [scattered(n) for n in range(p)]
    elif key == "reduce":
        g, inputs, outputs = c, [everything] * p, [everything if n == root else none for n in range(p)]
    elif key == "reducescatter":
        g, inputs, outputs = p * c, [rank_major()] * p, [scattered(n) for n in range(p)]
    elif key == "allreduce":
        g, inputs, outputs = c, [everything] * p, [everything] * p
    elif key == "sendrecv":  # a cyclic shift: rank n's buffer ends on rank n+1
        g = p * c
        inputs = [tuple(n * c + i for i in range(c)) for n in range(p)]
        outputs = [tuple(((n - 1) % p) * c + i for i in range(c)) for n in range(p)]
    else:  # alltonext
        g = (p - 1) * c
        inputs = [tuple(n * c + i for i in range(c)) if n < p - 1 else none for n in range(p)]
        outputs = [tuple((n - 1) * c + i for i in range(c)) if n > 0 else none for n in range(p)]
    return Collective(
        name=key,
        num_ranks=p,
        chunk_factor=c,
        num_chunks=g,
        input_layout=tuple(inputs),
        output_layout=tuple(outputs),
        combining=key in COMBINING,
        root=root,
        inplace=inplace,
        builtin=True,
    )


def custom_collective(
    name: str,
    input_layout: Sequence[Sequence[int]],
    output_layout: Sequence[Sequence[int]],
    *,
    combining: bool = False,
    chunk_factor: int = 1,
) -> Collective:
    """A user-defined collective from its pre- and postcondition.

    Parameters
    ----------
    name : str
        The collective's name.
    input_layout, output_layout : sequence of sequence of int
        Per rank, the chunk ids of its input and output buffers.
    combining : bool
        Whether chunks with one id on several ranks are reduced together.
    chunk_factor : int
        The chunks per rank's share, for costs and sizes.

    Returns
    -------
    Collective

    Raises
    ------
    CollectiveError
        For a layout mismatch, a bad chunk id or an output chunk no input holds.

    References
    ----------
    .. [1] Cai et al., "Synthesizing Optimal Collective Algorithms" (SCCL),
       PPoPP 2021, §3.1 (a collective as a pre- and postcondition).

    Examples
    --------
    >>> c = custom_collective("swap", [[0], [1]], [[1], [0]])
    >>> sorted(c.post)
    [(0, 1), (1, 0)]
    """
    if not isinstance(name, str) or not name:
        raise CollectiveError("a custom collective needs a name")
    if len(input_layout) != len(output_layout) or not input_layout:
        raise CollectiveError(
            f"{name}: input_layout and output_layout must list the same, non-zero number of ranks "
            f"(got {len(input_layout)} and {len(output_layout)})"
        )
    _check_int("chunk_factor", chunk_factor, 1)
    inputs = tuple(tuple(_chunk_id(name, c) for c in layout) for layout in input_layout)
    outputs = tuple(tuple(_chunk_id(name, c) for c in layout) for layout in output_layout)
    present = {c for layout in inputs for c in layout}
    required = {c for layout in outputs for c in layout}
    missing = sorted(required - present)
    if missing:
        raise CollectiveError(f"{name}: chunk {missing[0]} is required in the postcondition but no rank starts with it")
    for r, layout in enumerate(inputs):
        if not combining and len(set(layout)) != len(layout):
            raise CollectiveError(f"{name}: rank {r} holds a chunk twice in its input")
    if not combining:
        holders: dict[int, int] = {}
        for r, layout in enumerate(inputs):
            for c in layout:
                if c in holders:
                    raise CollectiveError(
                        f"{name}: chunk {c} starts on ranks {holders[c]} and {r}; only combining collectives "
                        "have several contributions of a chunk"
                    )
                holders[c] = r
    num_chunks = max(present | required) + 1 if present else 0
    return Collective(
        name=name,
        num_ranks=len(inputs),
        chunk_factor=chunk_factor,
        num_chunks=num_chunks,
        input_layout=inputs,
        output_layout=outputs,
        combining=combining,
        builtin=False,
    )


def _chunk_id(name: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise CollectiveError(f"{name}: chunk ids must be non-negative integers, got {value!r}")
    return value


def _check_int(field: str, value: Any, least: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        raise CollectiveError(f"{field} must be an integer >= {least}, got {value!r}")


# -- JSON ---------------------------------------------------------------------
def collective_to_dict(coll: Collective) -> dict[str, Any]:
    out: dict[str, Any] = {"name": coll.name, "num_ranks": coll.num_ranks, "chunk_factor": coll.chunk_factor}
    if coll.root is not None:
        out["root"] = coll.root
    if coll.inplace:
        out["inplace"] = True
    if not coll.builtin:
        out["custom"] = True
        out["combining"] = coll.combining
        out["input_layout"] = [list(x) for x in coll.input_layout]
        out["output_layout"] = [list(x) for x in coll.output_layout]
    return out


def collective_from_dict(data: Any) -> Collective:
    if not isinstance(data, dict) or "name" not in data:
        raise CollectiveError(f"collective must be a mapping with a 'name', got {data!r}")
    if data.get("custom"):
        try:
            return custom_collective(
                data["name"],
                data["input_layout"],
                data["output_layout"],
                combining=bool(data.get("combining", False)),
                chunk_factor=data.get("chunk_factor", 1),
            )
        except KeyError as exc:
            raise CollectiveError(f"custom collective {data['name']!r} lacks field {exc.args[0]!r}") from None
    for key in ("num_ranks",):
        if key not in data:
            raise CollectiveError(f"collective {data['name']!r} lacks field {key!r}")
    return make_collective(
        data["name"],
        data["num_ranks"],
        data.get("chunk_factor", 1),
        root=data.get("root"),
        inplace=bool(data.get("inplace", False)),
    )

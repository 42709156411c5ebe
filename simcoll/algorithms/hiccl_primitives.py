"""HiCCL's composition primitives, realised as chunk transfers (HiCCL §3–§4).

HiCCL (Hidayetoğlu et al.) writes every collective as *multicasts* (one root,
many leaves), *reductions* (many leaves, one root) and *fences* between
groups of them (§3). A machine description then factorises each primitive
into point-to-point hops (§4):

- a **hierarchy** vector of factors, outermost first (§4.2; e.g. (2, 2, 4):
  two groups of two nodes of four GPUs). Rank ``r`` has one digit per level
  (mixed radix, innermost digit least significant), so consecutive ranks share
  the inner groups, as HiCCL assumes of the rank numbering;
- a **tree** at each level: the sender hands the data to one representative
  in each other group of that level that holds leaves — the rank with the
  sender's digits at every other level, i.e. on the sender's rail — and every
  group recurses one level down (Fig. 5, Fig. 6a). Hops at level ℓ happen at
  stage ℓ, so every tree of one hierarchy is level-synchronous;
- optionally **ring(k)** at the outermost level (§4.4): the k outer groups
  form a chain from the root's group, each representative passing the data on
  and then multicasting inside its group (Fig. 6b);
- optionally **striping** over a node's NICs (§4.3): the root first splits
  the data over the stripe leaders of its node (stage ⓪), then each leader
  multicasts its part, so the inter-node hops leave from every leader and
  hence through every NIC it is bound to (§2.3, :func:`nic_binding`);
- **pipelining** (§4.5): the payload is cut into ``depth`` channels and
  channel c runs c steps behind channel 0, so stages of different channels
  overlap; a factorisation of S stages takes S + depth − 1 steps, each moving
  1/depth of the data.

A reduction is the time-reversal of the multicast tree with the same root and
leaves: each rank sends its partial to its tree parent once all its children
have reduced into it. A fence delays the primitives registered after it until
those before it are done (per channel: HiCCL's fence orders data, it is not a
barrier, §3.3).

Transfers carry ``step`` = the stage relative to the primitive's start;
:func:`compose` fences phases, shifts channels and merges duplicates.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from math import prod

import numpy as np

from ..algorithm import Transfer, TransferTable
from ..arrays import packed_key, ragged_indices
from ..errors import NotApplicableError, OptionError
from ..topology import Topology

BINDINGS = ("packed", "round-robin", "bijective")
_EMPTY = TransferTable([], [], [], [], [])


# ---------------------------------------------------------------------------
# Hierarchy and plan (HiCCL §4.1's optimisation space)
# ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Hierarchy:
    """Factors of the rank count, outermost level first (HiCCL §4.2).

    >>> h = Hierarchy((2, 2, 4))
    >>> h.digits(13), h.with_digit(13, 0, 0)
    ((1, 1, 1), 5)
    """

    factors: tuple[int, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "factors", tuple(self.factors))
        if not self.factors or any(not isinstance(f, int) or f < 1 for f in self.factors):
            raise NotApplicableError(f"hierarchy {list(self.factors)}: factors must be positive integers")
        strides = [prod(self.factors[i + 1 :]) for i in range(len(self.factors))]
        object.__setattr__(self, "_strides", tuple(strides))

    @classmethod
    def for_ranks(cls, factors: Sequence[int], num_ranks: int) -> Hierarchy:
        """The hierarchy ``factors``, checked to factorise ``num_ranks``."""
        hierarchy = cls(tuple(factors))
        if hierarchy.size != num_ranks:
            raise NotApplicableError(
                f"hierarchy {','.join(map(str, hierarchy.factors))} has product {hierarchy.size}, "
                f"but there are {num_ranks} ranks: its factors must multiply to the rank count (HiCCL §4.2)"
            )
        return hierarchy

    @property
    def levels(self) -> int:
        return len(self.factors)

    @property
    def size(self) -> int:
        return prod(self.factors)

    def digit(self, rank: int, level: int) -> int:
        return (rank // self._strides[level]) % self.factors[level]

    def digits(self, rank: int) -> tuple[int, ...]:
        return tuple(self.digit(rank, level) for level in range(self.levels))

    def with_digit(self, rank: int, level: int, value: int) -> int:
        """``rank`` moved to group ``value`` at ``level``, same position elsewhere."""
        return rank + (value - self.digit(rank, level)) * self._strides[level]

    def neighbours(self, rank: int) -> list[int]:
        """Ranks differing from ``rank`` in exactly one digit: every pair a tree
        or ring hop can join."""
        return [
            self.with_digit(rank, level, v)
            for level, f in enumerate(self.factors)
            for v in range(f)
            if v != self.digit(rank, level)
        ]


@dataclass(frozen=True)
class Plan:
    """How primitives are factorised (HiCCL §4.1): hierarchy, ring(k) at the
    outermost level (1 = tree), pipeline depth, and the stripe leaders of
    each node (one leader per stripe; a single stripe means no striping)."""

    hierarchy: Hierarchy
    ring: int = 1
    pipeline: int = 1
    node_of: tuple[int, ...] = ()
    leaders: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    nic_of: Mapping[int, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.ring != 1 and self.ring != self.hierarchy.factors[0]:
            raise NotApplicableError(
                f"ring({self.ring}) chains the groups of the outermost hierarchy level, so k must be 1 (tree) "
                f"or hierarchy[0] = {self.hierarchy.factors[0]}"
            )
        if self.pipeline < 1:
            raise NotApplicableError(f"pipeline depth must be at least 1, got {self.pipeline}")
        if not self.node_of:
            object.__setattr__(self, "node_of", (0,) * self.hierarchy.size)

    @property
    def stripes(self) -> int:
        return max((len(v) for v in self.leaders.values()), default=1)

    @property
    def depth(self) -> int:
        """Stages of one unstriped multicast to every rank: one per level for
        the tree; k − 1 chain hops plus the inner levels for ring(k)."""
        if self.ring > 1:
            return self.ring - 1 + self.hierarchy.levels - 1
        return self.hierarchy.levels

    def leaders_for(self, root: int) -> tuple[int, ...]:
        """The stripe leaders of ``root``'s node; the root stands in for the
        leader bound to its own NIC, so its own part needs no hop ⓪."""
        leaders = list(self.leaders.get(self.node_of[root], (root,)))
        if root not in leaders:
            same_nic = [i for i, r in enumerate(leaders) if self.nic_of.get(r) == self.nic_of.get(root)]
            if same_nic and root in self.nic_of:
                leaders[same_nic[0]] = root
        return tuple(leaders)


# ---------------------------------------------------------------------------
# GPU-to-NIC bindings (HiCCL §2.3, Fig. 2) and stripe leaders
# ---------------------------------------------------------------------------
def node_nics(topology: Topology, node: int) -> list[str]:
    """The NICs of ``node``, in the order the topology lists them."""
    return [c.name for c in topology.components if c.kind == "nic" and c.node == node]


def nic_binding(topology: Topology, scheme: str) -> dict[int, str]:
    """Rank → NIC name, per HiCCL §2.3 (Fig. 2), node by node: with G GPUs
    (local index g, in rank order) and N NICs (in topology order),

    - ``packed``: g → NIC ⌊g / (G/N)⌋, consecutive GPUs share a NIC; needs N | G;
    - ``round-robin``: g → NIC g mod N, any G; when N ∤ G the first G mod N NICs
      serve one GPU more, so equal traffic per GPU uses only
      G / (N·⌈G/N⌉) of the NIC bandwidth (75 % for 12 GPUs on 8 NICs, §6.3.5);
    - ``bijective``: g → NIC g, one GPU per NIC; needs G = N.

    >>> from simcoll import load_topology
    >>> sorted(set(nic_binding(load_topology("summit*2"), "packed").values()))
    ['n0.nic0', 'n0.nic1', 'n1.nic0', 'n1.nic1']
    """
    if scheme not in BINDINGS:
        raise NotApplicableError(f"binding {scheme!r} is not one of {', '.join(BINDINGS)}")
    binding: dict[int, str] = {}
    for node in topology.nodes:
        gpus, nics = sorted(topology.ranks_of_node(node)), node_nics(topology, node)
        g_count, n_count = len(gpus), len(nics)
        if not gpus:
            continue
        if not nics:
            raise NotApplicableError(f"{topology.name}: node {node} has no NIC to bind its GPUs to")
        if scheme == "packed" and g_count % n_count:
            raise NotApplicableError(
                f"{topology.name}: packed binding needs the {n_count} NICs of node {node} to divide its "
                f"{g_count} GPUs (HiCCL §2.3); use round-robin"
            )
        if scheme == "bijective" and g_count != n_count:
            raise NotApplicableError(
                f"{topology.name}: bijective binding needs one NIC per GPU, node {node} has {g_count} GPUs "
                f"and {n_count} NICs (HiCCL §2.3)"
            )
        for g, rank in enumerate(gpus):
            index = g // (g_count // n_count) if scheme == "packed" else g % n_count
            binding[rank] = nics[index]
    return binding


def default_binding(topology: Topology) -> str:
    """HiCCL §2.3's choice: bijective when each node has as many NICs as GPUs,
    packed when the NICs divide the GPUs, round-robin otherwise."""
    shapes = {(len(topology.ranks_of_node(n)), len(node_nics(topology, n))) for n in topology.nodes}
    if all(g == n for g, n in shapes):
        return "bijective"
    if all(n and g % n == 0 for g, n in shapes):
        return "packed"
    return "round-robin"


def stripe_leaders(topology: Topology, binding: Mapping[int, str], stripes: int) -> dict[int, tuple[int, ...]]:
    """For each node, ``stripes`` GPUs that carry one stripe each, spread over
    the NICs per ``binding``: with s ≤ N stripes, the first GPU bound to NIC
    ⌊k·N/s⌋ for k < s (evenly spaced NICs, so distinct NICs and, on machines
    whose NICs sit in pairs, distinct PCIe switches); with more, further GPUs
    of each NIC in turn."""
    leaders = {}
    for node in topology.nodes:
        gpus, nics = sorted(topology.ranks_of_node(node)), node_nics(topology, node)
        if stripes > len(gpus):
            raise NotApplicableError(
                f"{topology.name}: {stripes} stripes need as many GPUs per node, node {node} has {len(gpus)}"
            )
        by_nic = {nic: [r for r in gpus if binding.get(r) == nic] for nic in nics}
        first_round = [nics[k * len(nics) // stripes] for k in range(min(stripes, len(nics)))]
        chosen = [by_nic[nic][0] for nic in first_round if by_nic[nic]]
        depth = max((len(v) for v in by_nic.values()), default=0)
        rest = [by_nic[nic][j] for j in range(depth) for nic in nics if j < len(by_nic[nic])]
        for rank in rest + gpus:
            if len(chosen) == stripes:
                break
            if rank not in chosen:
                chosen.append(rank)
        leaders[node] = tuple(chosen)
    return leaders


# ---------------------------------------------------------------------------
# Factorisation into hops
# ---------------------------------------------------------------------------
def _tree_hops(plan: Plan, root: int, leaves: Iterable[int]) -> np.ndarray:
    """(sender, receiver, stage) hops of an unstriped multicast from ``root``,
    one row each, in the order the tree is walked (depth first, groups by
    digit)."""
    h = plan.hierarchy
    targets = sorted(set(leaves) - {root})
    if plan.ring == 1 and len(targets) == h.size - 1:  # to every other rank: the whole tree at once
        return _full_tree_hops(h, root)
    hops: list[tuple[int, int, int]] = []
    if plan.ring > 1 and targets:
        k, own = plan.ring, h.digit(root, 0)
        groups: dict[int, list[int]] = defaultdict(list)
        for r in targets:
            groups[(h.digit(r, 0) - own) % k].append(r)
        holder = root
        for distance in range(max(groups) + 1):
            if distance:
                # the chain hop into the next group happens one stage before that group's tree starts
                nxt = h.with_digit(holder, 0, (own + distance) % k)
                hops.append((holder, nxt, distance - 1))
                holder = nxt
            _walk_tree(h, holder, [m for m in groups.get(distance, []) if m != holder], 1, distance, hops)
    else:
        _walk_tree(h, root, targets, 0, 0, hops)
    return np.array(hops, dtype=np.int64).reshape(-1, 3)


def _walk_tree(
    h: Hierarchy, sender: int, targets: list[int], level: int, stage: int, hops: list[tuple[int, int, int]]
) -> None:
    """Append to ``hops`` the (sender, receiver, stage) hops that carry
    ``sender``'s data to ``targets`` from hierarchy level ``level`` down,
    depth first: the targets grouped by their digit at that level (groups
    in digit order), a hop to each group's representative (the sender with
    that digit), then that group's walk one level and one stage lower."""
    if not targets or level == h.levels:
        return
    groups: dict[int, list[int]] = defaultdict(list)
    for r in targets:
        groups[h.digit(r, level)].append(r)
    for value in sorted(groups):
        rep = h.with_digit(sender, level, value)
        if rep != sender:
            hops.append((sender, rep, stage))
        _walk_tree(h, rep, [m for m in groups[value] if m != rep], level + 1, stage + 1, hops)


def _full_tree_hops(h: Hierarchy, root: int) -> np.ndarray:
    """:func:`_tree_hops` of a tree multicast from ``root`` to every other
    rank, with NumPy: rank x is reached at the deepest level where its digit
    differs from the root's, from x with that digit set to the root's; the
    walk meets it after every rank whose digits up to that level come first
    and before the ranks below it, i.e. in the order of x's digits up to
    its level followed by -1s (a thousand ranks, a thousand primitives)."""
    strides, factors = np.array(h._strides, dtype=np.int64), np.array(h.factors, dtype=np.int64)
    ranks = np.arange(h.size, dtype=np.int64)
    ranks = ranks[ranks != root]
    digits = (ranks[:, None] // strides) % factors
    mine = (root // strides) % factors
    level = h.levels - 1 - np.argmax((digits != mine)[:, ::-1], axis=1)
    sender = ranks + (mine[level] - digits[np.arange(len(ranks)), level]) * strides[level]
    key = np.where(np.arange(h.levels) > level[:, None], -1, digits)
    order = np.lexsort(key.T[::-1])
    return np.column_stack((sender[order], ranks[order], level[order]))


def _split(chunks: Sequence[int], parts: int) -> list[list[int]]:
    """Stripe k gets the chunks at positions ≡ k (mod parts)."""
    return [list(chunks[k::parts]) for k in range(parts)]


def _striped(plan: Plan, root: int, leaves: set[int]) -> bool:
    return plan.stripes > 1 and any(plan.node_of[r] != plan.node_of[root] for r in leaves)


def _hop_rows(hops: Sequence[tuple[int, int, int]], chunks: Sequence[int], reduce: bool) -> TransferTable:
    """Every hop ``(src, dst, step)`` for every chunk, hop by hop (a hop's
    chunks together, in the order given)."""
    hop = np.array(hops, dtype=np.int64).reshape(-1, 3)
    chunk = np.asarray(chunks, dtype=np.int64)
    k = len(chunk)
    return TransferTable(
        np.tile(chunk, len(hop)),
        np.repeat(hop[:, 0], k),
        np.repeat(hop[:, 1], k),
        np.full(len(hop) * k, reduce),
        np.repeat(hop[:, 2], k),
    )


def multicast_table(root: int, leaves: Iterable[int], chunks: Sequence[int], plan: Plan) -> TransferTable:
    """:func:`multicast` as a transfer table (the same transfers in the same order)."""
    leaves = set(leaves) - {root}
    if not leaves or not chunks:
        return _EMPTY
    if not _striped(plan, root, leaves):
        return _hop_rows(_tree_hops(plan, root, leaves), chunks, False)
    parts = []
    for leader, part in zip(plan.leaders_for(root), _split(chunks, plan.stripes), strict=True):
        if leader != root:
            parts.append(_hop_rows([(root, leader, 0)], part, False))
        hops = _tree_hops(plan, leader, leaves - {leader})
        parts.append(_hop_rows(hops + np.array([0, 0, 1]), part, False))
    return TransferTable.concatenate(parts)


def multicast(root: int, leaves: Iterable[int], chunks: Sequence[int], plan: Plan) -> list[Transfer]:
    """HiCCL's multicast M(root → leaves) of ``chunks`` (§3.1, Fig. 3a),
    factorised by ``plan`` (module docstring); steps are stages from 0.

    Cost, for n bytes, tree over factors f_1..f_L, per-level bandwidth B_ℓ:
    Σ_ℓ (α + (f_ℓ − 1)·n/B_ℓ) (the sender of a level serves its f_ℓ − 1 peer
    groups). ring(k): (k − 1)(α + n/B_1) + Σ_{ℓ≥2}(α + (f_ℓ − 1)·n/B_ℓ).
    Striping over s leaders adds stage ⓪, α + (s − 1)·n/(s·B_node), and
    divides every later term's n by s. Pipelining over d channels makes
    (stages + d − 1) steps of n/d bytes each (HiCCL §4.6).

    >>> p = Plan(Hierarchy((2, 3)))
    >>> [(t.src, t.dst, t.step) for t in multicast(0, range(6), [0], p)]
    [(0, 1, 1), (0, 2, 1), (0, 3, 0), (3, 4, 1), (3, 5, 1)]
    """
    return list(multicast_table(root, leaves, chunks, plan))


def reduction_table(leaves: Iterable[int], root: int, chunks: Sequence[int], plan: Plan) -> TransferTable:
    """:func:`reduction` as a transfer table (the same transfers in the same
    order); an :class:`~simcoll.errors.OptionError` (a ValueError) when the
    root, a stripe leader or a rank on the way contributes nothing."""
    leaves = set(leaves)
    if root not in leaves:
        raise OptionError(f"reduction to rank {root}: the root must be one of the contributing leaves")
    if leaves == {root} or not chunks:
        return _EMPTY
    striped = _striped(plan, root, leaves)
    branches = zip(plan.leaders_for(root), _split(chunks, plan.stripes), strict=True) if striped else [(root, chunks)]
    depth, parts = plan.depth, []
    for leader, part in branches:
        if leader not in leaves:
            raise OptionError(f"reduction to rank {root}: stripe leader {leader} contributes nothing")
        hops = _tree_hops(plan, leader, leaves - {leader})
        outside = ~np.isin(hops[:, 1], np.fromiter(leaves, dtype=np.int64, count=len(leaves)))
        if outside.any():
            d = int(hops[np.argmax(outside), 1])
            raise OptionError(f"reduction to rank {root} would pass through rank {d}, which contributes nothing")
        parts.append(_hop_rows(np.column_stack((hops[:, 1], hops[:, 0], depth - 1 - hops[:, 2])), part, True))
        if leader != root:
            parts.append(_hop_rows([(leader, root, depth)], part, False))
    table = TransferTable.concatenate(parts)
    # by (src, dst, step, chunk), ties in the order made (a stable sort)
    order = np.lexsort((np.arange(len(table)), table.chunk, table.step, table.dst, table.src))
    return table.take(order)


def reduction(leaves: Iterable[int], root: int, chunks: Sequence[int], plan: Plan) -> list[Transfer]:
    """HiCCL's reduction R(leaves → root) of ``chunks`` (§3.1, Fig. 3b): the
    time-reversed multicast tree from ``root`` over the same ranks, so every
    rank sends its partial (its own contribution plus its subtree's) to its
    tree parent once. Stages are counted back from the plan's full depth, so
    all reductions of one step finish together. Every rank the tree passes
    through must contribute (true of every reduction in HiCCL Table 2).

    With striping, stripe k reduces to leader k over all leaves and the
    leader then copies the finished part to the root (the reverse of stage ⓪).
    Cost: the mirror of :func:`multicast` plus the reduction time T_R of each
    received partial.

    >>> p = Plan(Hierarchy((2, 2)))
    >>> [(t.src, t.dst, t.step) for t in reduction(range(4), 0, [0], p)]
    [(1, 0, 0), (2, 0, 1), (3, 2, 0)]
    """
    return list(reduction_table(leaves, root, chunks, plan))


def stages(transfers: Iterable[Transfer] | TransferTable) -> int:
    """Stages a list (or table) of stage-numbered transfers spans."""
    if isinstance(transfers, TransferTable):
        return 1 + int(transfers.step.max()) if len(transfers) else 0
    return 1 + max((t.step for t in transfers), default=-1)


def fence(*phases: TransferTable) -> TransferTable:
    """HiCCL's fence (§3.3): phase i + 1 starts once phase i's stages are done.
    The stage count of a fenced composition is the sum of its phases'."""
    offset, shifted = 0, []
    for phase in phases:
        shifted.append(phase.with_steps(phase.step + offset))
        offset += stages(phase)
    return TransferTable.concatenate(shifted)


def pipeline(table: TransferTable, channel_of: Mapping[int, int]) -> TransferTable:
    """HiCCL's pipelining (§4.5, Fig. 7): every transfer of a chunk in channel c
    runs c steps later, so channel c's stage t overlaps channel c + 1's stage
    t − 1. A chunk's own hops keep their order, so correctness is unchanged."""
    if not len(table) or not channel_of:
        return table
    channel = np.zeros(max(int(table.chunk.max()), max(channel_of)) + 1, dtype=np.int64)
    channel[np.fromiter(channel_of, dtype=np.int64)] = np.fromiter(channel_of.values(), dtype=np.int64)
    return table.with_steps(table.step + channel[table.chunk])


# ---------------------------------------------------------------------------
# Registered primitives and their composition
# ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Primitive:
    """One registered primitive: ``kind`` "multicast" (root → leaves) or
    "reduction" (leaves → root) of ``chunks``."""

    kind: str
    root: int
    leaves: tuple[int, ...]
    chunks: tuple[int, ...]

    def table(self, plan: Plan) -> TransferTable:
        if self.kind == "multicast":
            return multicast_table(self.root, self.leaves, self.chunks, plan)
        return reduction_table(self.leaves, self.root, self.chunks, plan)


def _phase_table(phase: Sequence[Primitive], plan: Plan) -> TransferTable:
    """The transfers of a phase's primitives, primitive by primitive; runs
    of point-to-point multicasts (one leaf, unstriped, tree: an All-to-all's
    p(p − 1)) are factorised together with NumPy (:func:`_point_to_point`)."""
    parts: list[TransferTable] = []
    run: list[Primitive] = []
    tree, striping, node_of = plan.ring == 1, plan.stripes > 1, plan.node_of
    for primitive in phase:
        if (
            tree
            and primitive.kind == "multicast"
            and len(primitive.leaves) == 1
            and not (striping and node_of[primitive.leaves[0]] != node_of[primitive.root])  # (_striped)
        ):
            run.append(primitive)
            continue
        if run:
            parts.append(_point_to_point(run, plan))
            run = []
        parts.append(primitive.table(plan))
    if run:
        parts.append(_point_to_point(run, plan))
    return TransferTable.concatenate(parts)


def _point_to_point(primitives: Sequence[Primitive], plan: Plan) -> TransferTable:
    """:func:`multicast_table` of single-leaf, unstriped multicasts under a
    tree, all at once: from the root, at every level where the leaf's digit
    differs, a hop to the rank with that digit set (stage = level); each
    hop carries the primitive's chunks in order. The same rows in the same
    order as primitive by primitive (tested)."""
    h = plan.hierarchy
    root = np.fromiter((p.root for p in primitives), dtype=np.int64, count=len(primitives))
    leaf = np.fromiter((p.leaves[0] for p in primitives), dtype=np.int64, count=len(primitives))
    sizes = np.fromiter((len(p.chunks) for p in primitives), dtype=np.int64, count=len(primitives))
    chunks = np.fromiter(itertools.chain.from_iterable(p.chunks for p in primitives), dtype=np.int64)
    first_chunk = np.cumsum(sizes) - sizes
    hops = []  # per level: (primitive, sender, receiver) of the hops made there
    here = root.copy()
    for level, stride in enumerate(h._strides):
        factor = h.factors[level]
        there = here + ((leaf // stride) % factor - (here // stride) % factor) * stride
        moved = np.flatnonzero(there != here)
        hops.append((moved, here[moved], there[moved], np.full(len(moved), level, dtype=np.int64)))
        here = there
    primitive, src, dst, step = (np.concatenate([hop[c] for hop in hops]) for c in range(4))
    order = np.lexsort((step, primitive))  # primitive by primitive, its hops in order
    primitive, src, dst, step = primitive[order], src[order], dst[order], step[order]
    count = sizes[primitive]
    return TransferTable(
        chunks[ragged_indices(first_chunk[primitive], count)],
        np.repeat(src, count),
        np.repeat(dst, count),
        np.zeros(int(count.sum()), dtype=bool),
        np.repeat(step, count),
    )


def node_relative_chunks(collective: str, num_ranks: int, chunk: np.ndarray, shift: np.ndarray) -> np.ndarray:
    """Each ``chunk`` as seen from ``shift`` ranks back: the chunk that moving
    every rank back by ``shift[i]`` turns ``chunk[i]`` into. Chunk ``c`` of a
    multi-step composition belongs to rank ``c mod p`` (SCCL's blocks, the
    module docstring of :mod:`~simcoll.algorithms.hiccl`), so the owner moves
    and the block stays; an All-to-all's chunk ``(i·p + d)·p + s`` moves with
    its source and its destination; a Broadcast's or Reduce's chunks belong to
    no rank and stay.

    >>> node_relative_chunks("allgather", 4, np.array([0, 5, 6]), np.array([2, 2, 2])).tolist()
    [2, 7, 4]
    """
    p = num_ranks
    if collective == "alltoall":
        pair, src = np.divmod(chunk, p)
        block, dst = np.divmod(pair, p)
        return (block * p + (dst - shift) % p) * p + (src - shift) % p
    if collective in ("broadcast", "reduce"):
        return chunk
    block, owner = np.divmod(chunk, p)
    return block * p + (owner - shift) % p


def _node_shift(plan: Plan) -> np.ndarray:
    """Per rank, the first rank of its node, where nodes are equal and their
    ranks consecutive (node-major); zeros otherwise."""
    node = np.asarray(plan.node_of, dtype=np.int64)
    nodes = int(node.max()) + 1
    per_node = len(node) // nodes
    if per_node * nodes != len(node) or not np.array_equal(node, np.arange(len(node)) // per_node):
        return np.zeros(len(node), dtype=np.int64)
    return node * per_node


def _row_keys(table: TransferTable) -> np.ndarray:
    """One key per transfer that two transfers share exactly when they are
    the same (chunk, src, dst, op, step): a packed integer
    (:func:`~simcoll.arrays.packed_key`) where the ranges fit, else the rows
    themselves (for ``np.unique(axis=0)``)."""
    columns = (table.chunk, table.src, table.dst, table.reduce.astype(np.int64), table.step)
    key = packed_key(columns)
    return np.stack(columns, axis=1) if key is None else key


def compose(phases: Sequence[Sequence[Primitive]], plan: Plan, collective: str = "allreduce") -> TransferTable:
    """The transfers of a multi-step ``collective``: each phase a single-step
    collective (primitives registered together run concurrently, §3.2),
    fences between phases, then pipelining over ``plan.pipeline`` channels.
    ``collective`` (its name) says which rank each chunk belongs to
    (:func:`node_relative_chunks`; by default blocks, chunk c of rank c mod p).

    A chunk's channel is fixed by its position in the first primitive that
    names it (contiguous slices, as HiCCL partitions the payload), so a later
    phase's channel c only needs an earlier phase's channel c. Identical
    transfers from concurrent primitives (the same partial of the same chunk
    on the same hop, as when the P reductions of a single-step All-reduce share
    their lower tree levels) are sent once. Ordered by (step, src, dst, the
    chunk as seen from the sender's node), ties in the order the primitives
    made them: on machines of equal nodes, each node sends its chunks in the
    order node 0 sends theirs, counted from its own ranks' blocks
    (:func:`node_relative_chunks`). The concurrent primitives then start on
    every node's blocks at once rather than all on rank 0's, and node ``j``'s
    schedule is node 0's moved by ``j`` nodes, a symmetry the simulator
    exploits (:mod:`simcoll.simulator.symmetry`).
    """
    channel: dict[int, int] = {}
    for phase in phases:
        for primitive in phase:
            n = len(primitive.chunks)
            for position, chunk in enumerate(primitive.chunks):
                channel.setdefault(chunk, position * plan.pipeline // n)
    fenced = fence(*(_phase_table(phase, plan) for phase in phases))
    table = pipeline(fenced, channel)
    if not len(table):
        return table
    _, first = np.unique(_row_keys(table), axis=0, return_index=True)  # each distinct transfer's first occurrence
    src = table.src[first]
    place = node_relative_chunks(collective, plan.hierarchy.size, table.chunk[first], _node_shift(plan)[src])
    order = np.lexsort((first, place, table.dst[first], src, table.step[first]))
    return table.take(first[order])

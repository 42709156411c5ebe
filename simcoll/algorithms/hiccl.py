"""HiCCL compositions: the eight collectives of HiCCL Table 1, each written as
multicast / reduction / fence primitives (HiCCL Table 2) and factorised over
a hierarchy with ring(k), multi-NIC striping and pipelining
(:mod:`~simcoll.algorithms.hiccl_primitives` holds the primitives).

Collective compositions, ``Σ_i`` over every rank i, ``∘`` a fence (right to
left), d the largest buffer, p the rank count (HiCCL Table 2):

============== ============================= ====================================
collective     single-step                   multi-step
============== ============================= ====================================
Broadcast      M(root → all)                 All-gather ∘ Scatter
Reduce         R(all → root)                 Gather ∘ Reduce-scatter
All-gather     Σ_i M(i → all), d/p each      Broadcast ∘ Gather (root 0)
Reduce-scatter Σ_i R(all → i), d/p each      Scatter ∘ Reduce (root 0)
All-reduce     Σ_i R(all → i), d each        All-gather ∘ Reduce-scatter, or
                                             Broadcast ∘ Reduce (``via=reduce``)
Scatter        Σ_i M(root → {i})             —
Gather         Σ_i M(i → {root})             —
All-to-all     Σ_i Σ_j M(i → {j})            —
============== ============================= ====================================

The multi-step column and the table's layout are HiCCL's; the seed text has
lost the single-step formulas, so that column follows §3.2's prose (Broadcast
and Reduce one primitive each, All-to-all p² point-to-point primitives, the
others one primitive per rank; the d-sized All-reduce reductions that make it
move p(p − 1)·d). Gather, Scatter and All-to-all use single-leaf multicasts,
i.e. point-to-point transfers. The buffer parts of the multi-step forms are
SCCL's blocks: chunk c belongs to rank c mod p.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..algorithm import Algorithm
from ..collectives import Collective
from ..errors import NotApplicableError
from ..routes import Routes, routes_of
from ..topology import Topology
from .common import finish, implements
from .hiccl_primitives import (
    BINDINGS,
    Hierarchy,
    Plan,
    Primitive,
    compose,
    default_binding,
    nic_binding,
    node_nics,
    stripe_leaders,
)
from .registry import Generator, Option, choice, int_list, positive_int

COLLECTIVES = ("broadcast", "reduce", "allgather", "reducescatter", "allreduce", "scatter", "gather", "alltoall")
MULTI_STEP = frozenset({"broadcast", "reduce", "allgather", "reducescatter", "allreduce"})


# ---------------------------------------------------------------------------
# HiCCL Table 2
# ---------------------------------------------------------------------------
def table2(collective: Collective, steps: str, via: str = "reducescatter") -> tuple[str, list[list[Primitive]]]:
    """The composition of ``collective`` in HiCCL Table 2 (module docstring):
    a label and its phases, each phase the primitives registered between two
    fences. ``steps`` is "single" or "multi"; ``via`` picks the multi-step
    All-reduce ("reducescatter": All-gather ∘ Reduce-scatter, §3.3's
    motivating example; "reduce": Broadcast ∘ Reduce).

    >>> from simcoll import make_collective
    >>> label, phases = table2(make_collective("allreduce", 4, 4), "multi")
    >>> label, [len(phase) for phase in phases]
    ('allgather ∘ reducescatter', [4, 4])
    """
    name, p = collective.name, collective.num_ranks
    if steps == "multi" and name not in MULTI_STEP:
        raise NotApplicableError(f"hiccl: HiCCL Table 2 gives no multi-step composition of {name}; use steps=single")
    ranks = tuple(range(p))
    everything = tuple(range(collective.num_chunks))
    root = collective.root

    def mc(src: int, leaves: Sequence[int], chunks: Sequence[int]) -> Primitive:
        return Primitive("multicast", src, tuple(leaves), tuple(chunks))

    def red(leaves: Sequence[int], dst: int, chunks: Sequence[int]) -> Primitive:
        return Primitive("reduction", dst, tuple(leaves), tuple(chunks))

    def block(n: int) -> tuple[int, ...]:
        return tuple(c for c in everything if c % p == n)

    given, wanted = collective.input_layout, collective.output_layout
    if steps == "single":
        if name == "broadcast":
            return "M(root → all)", [[mc(root, ranks, everything)]]
        if name == "reduce":
            return "R(all → root)", [[red(ranks, root, everything)]]
        if name == "allgather":
            return "Σ_i M(i → all)", [[mc(i, ranks, given[i]) for i in ranks]]
        if name == "reducescatter":
            return "Σ_i R(all → i)", [[red(ranks, i, wanted[i]) for i in ranks]]
        if name == "allreduce":
            return "Σ_i R(all → i)", [[red(ranks, i, everything) for i in ranks]]
        if name == "scatter":
            return "Σ_i M(root → {i})", [[mc(root, (i,), wanted[i]) for i in ranks if i != root]]
        if name == "gather":
            return "Σ_i M(i → {root})", [[mc(i, (root,), given[i]) for i in ranks if i != root]]
        # All-to-all: chunk (k·p + j)·p + i goes from rank i to rank j
        to = {}
        for i in ranks:  # (one pass over each rank's chunks, not one per destination: p³ on 1,024 GPUs)
            by_destination: dict[int, list[int]] = {}
            for c in given[i]:
                by_destination.setdefault((c // p) % p, []).append(c)
            to.update({(i, j): by_destination.get(j, []) for j in ranks if j != i})
        return "Σ_i Σ_j M(i → {j})", [[mc(i, (j,), chunks) for (i, j), chunks in to.items()]]
    if name == "broadcast":
        scatter = [mc(root, (i,), block(i)) for i in ranks if i != root]
        return "allgather ∘ scatter", [scatter, [mc(i, ranks, block(i)) for i in ranks]]
    if name == "reduce":
        gather = [mc(i, (root,), block(i)) for i in ranks if i != root]
        return "gather ∘ reducescatter", [[red(ranks, i, block(i)) for i in ranks], gather]
    if name == "allgather":
        gather = [mc(i, (0,), given[i]) for i in ranks if i != 0]
        return "broadcast ∘ gather", [gather, [mc(0, ranks, everything)]]
    if name == "reducescatter":
        scatter = [mc(0, (i,), wanted[i]) for i in ranks if i != 0]
        return "scatter ∘ reduce", [[red(ranks, 0, everything)], scatter]
    if via == "reduce":
        return "broadcast ∘ reduce", [[red(ranks, 0, everything)], [mc(0, ranks, everything)]]
    reduced = [red(ranks, i, block(i)) for i in ranks]
    return "allgather ∘ reducescatter", [reduced, [mc(i, ranks, block(i)) for i in ranks]]


# ---------------------------------------------------------------------------
# Machine description: hierarchy, NICs
# ---------------------------------------------------------------------------
def _ordered_factorizations(n: int) -> list[tuple[int, ...]]:
    if n == 1:
        return [()]
    return [(f, *rest) for f in range(2, n + 1) if n % f == 0 for rest in _ordered_factorizations(n // f)]


def _routable(hierarchy: Hierarchy, routes: Routes) -> bool:
    """Whether every pair of ranks one digit apart has a route (both ways)."""
    joined = _joined(routes, hierarchy.size)
    ranks = np.arange(hierarchy.size, dtype=np.int64)
    for factor, stride in zip(hierarchy.factors, hierarchy._strides, strict=True):
        digit = (ranks // stride) % factor
        for value in range(factor):
            other = ranks + (value - digit) * stride
            if not joined[ranks, other][other != ranks].all():
                return False
    return True


def _joined(routes: Routes, num_ranks: int) -> np.ndarray:
    """[src, dst]: whether a route joins rank src to rank dst (another rank)."""
    return np.stack([routes.reachable_mask(r) for r in range(num_ranks)])


def default_hierarchy(topology: Topology, routes: Routes | None = None) -> tuple[int, ...]:
    """HiCCL's machine description from the topology (§4.2, Table 5): (nodes,
    GPUs per node) on a cluster whose ranks are numbered node by node, (P,) on
    one node. Where a node's GPUs are not all joined pairwise (DGX-1's hybrid
    cube mesh), the node level is factorised further: the first factorisation,
    fewest levels first, in which every pair of ranks one digit apart has a
    route (on DGX-1: (2, 4), two fully connected quads).

    >>> from simcoll import load_topology
    >>> default_hierarchy(load_topology("dgx-a100*2")), default_hierarchy(load_topology("dgx1"))
    ((2, 8), (2, 4))
    """
    routes = routes or routes_of(topology)
    p, nodes = topology.num_ranks, topology.nodes
    per_node = p // len(nodes)
    node_major = all(
        topology.ranks_of_node(n) == list(range(i * per_node, (i + 1) * per_node)) for i, n in enumerate(nodes)
    )
    outer = (len(nodes),) if len(nodes) > 1 and node_major else ()
    inner = per_node if outer else p
    candidates = sorted(_ordered_factorizations(inner), key=lambda f: (len(f), f))
    for factors in candidates:
        hierarchy = Hierarchy(outer + factors or (1,))
        if _routable(hierarchy, routes):
            return hierarchy.factors
    raise NotApplicableError(
        f"hiccl: no hierarchy of {topology.name} joins every pair of ranks one level apart by a route "
        f"(tried {len(candidates)} factorisations of {inner}); give one with hierarchy=..."
    )


def _parse_hierarchy(hierarchy: Sequence[int] | str) -> list[int]:
    if isinstance(hierarchy, str):
        try:
            return int_list(hierarchy)
        except ValueError as exc:
            raise NotApplicableError(f"hiccl: hierarchy {hierarchy!r}: {exc}") from None
    return list(hierarchy)


# ---------------------------------------------------------------------------
# The generator
# ---------------------------------------------------------------------------
@implements("hiccl", COLLECTIVES)
def hiccl(
    topology: Topology,
    collective: Collective,
    hierarchy: Sequence[int] | str | None = None,
    ring: int = 1,
    pipeline: int = 1,
    nics: int = 1,
    binding: str | None = None,
    steps: str | None = None,
    via: str | None = None,
) -> Algorithm:
    """HiCCL (Hidayetoğlu et al.): a collective composed from multicast,
    reduction and fence primitives (Table 2, :func:`table2`), factorised for
    the machine (§4):

    - ``hierarchy``: factors of P, outermost first (§4.2), e.g. ``2,2,4``;
      default :func:`default_hierarchy` (nodes × GPUs per node). A product
      other than P is an error.
    - ``ring``: k of ring(k) (§4.4) at the outermost level: 1 (default) is the
      tree everywhere; k = hierarchy[0] chains the k outer groups (nodes in
      Table 5's Ring+Tree rows) and keeps the tree inside them.
    - ``pipeline``: depth d (§4.5): chunks split into d channels, one step apart.
    - ``nics``: stripes s per primitive leaving a node (§4.3): the root's node
      splits the data over s stripe leaders chosen one per NIC per the binding,
      each sending its part on its own rail. Needs a multi-node topology.
    - ``binding``: GPU-to-NIC binding (§2.3), packed, round-robin or
      bijective (default: bijective if N = G, packed if N | G, else
      round-robin); see :func:`~.hiccl_primitives.nic_binding`. It is recorded
      as ``metadata["nic_binding"]`` (entry r: rank r's NIC) for the simulator.
    - ``steps``: "single" or "multi" (Table 2; default: multi for All-reduce,
      as HiCCL evaluates it, §6.5, single otherwise); ``via`` picks the
      multi-step All-reduce ("reducescatter" or "reduce").

    Cost (HiCCL §4.6's model; α per hop, M bytes, d channels, s stripes over
    NICs of bandwidth B): a Broadcast with ring(k) across k nodes takes
    (k + d − 2)(α + M/(d·s·B)) across nodes plus the intra-node stages
    (⓪ and the inner tree), which pipelining overlaps; with a tree whose
    node levels have factors f_ℓ, the root node's NICs carry
    Σ_ℓ (f_ℓ − 1)·M/(s·B), so as d → ∞ (α → 0) ring(4) is twice as fast as
    the binary tree {2, 2} over four nodes (§4.6). Single-step All-reduce
    moves p(p − 1)·d, All-gather ∘ Reduce-scatter 2(p − 1)·d (§3.2).

    Not applicable: collectives outside Table 1; a multi-step form Table 2
    lacks; single-step All-reduce with ring(k): its p concurrent chain
    reductions of the same buffer would each need their own partial sums at
    every rank (HiCCL gives each primitive its own buffers; a chunk schedule
    holds one value per chunk and rank) — use steps=multi; a hop with no route.

    >>> from simcoll import load_topology, make_collective
    >>> algo = hiccl(load_topology("dgx-a100*2"), make_collective("broadcast", 16, 8), nics=8, pipeline=2)
    >>> algo.metadata["hierarchy"], algo.steps
    ([2, 8], 4)
    """
    routes = routes_of(topology)
    p = collective.num_ranks
    factors = _parse_hierarchy(hierarchy) if hierarchy is not None else default_hierarchy(topology, routes)
    shape = Hierarchy.for_ranks(factors, p)
    steps = steps or ("multi" if collective.name == "allreduce" else "single")
    if steps not in ("single", "multi"):
        raise NotApplicableError(f"hiccl: steps must be single or multi, got {steps!r}")
    if via is not None and not (collective.name == "allreduce" and steps == "multi"):
        raise NotApplicableError("hiccl: option via chooses the multi-step All-reduce only")
    via = via or "reducescatter"
    if via not in ("reducescatter", "reduce"):
        raise NotApplicableError(f"hiccl: via must be reducescatter or reduce, got {via!r}")
    if collective.name == "allreduce" and steps == "single" and ring > 1:
        raise NotApplicableError(
            "hiccl: single-step All-reduce with ring(k) would need a partial-sum buffer per reduction at every "
            "rank (HiCCL primitives own their buffers); use steps=multi"
        )
    if nics < 1:
        raise NotApplicableError(f"hiccl: nics (stripes) must be at least 1, got {nics}")

    has_nics = any(node_nics(topology, n) for n in topology.nodes)
    if binding is not None and not has_nics:
        raise NotApplicableError(f"hiccl: {topology.name} has no NIC to bind GPUs to")
    scheme = (binding or default_binding(topology)) if has_nics else None
    nic_of = nic_binding(topology, scheme) if scheme else {}
    leaders = {}
    if nics > 1:
        if len(topology.nodes) < 2 or not has_nics:
            raise NotApplicableError(
                f"hiccl: striping over {nics} NICs spreads inter-node traffic (HiCCL §4.3); "
                f"{topology.name} has {len(topology.nodes)} node(s) and {'some' if has_nics else 'no'} NICs"
            )
        leaders = stripe_leaders(topology, nic_of, nics)
    plan = Plan(
        shape,
        ring=ring,
        pipeline=pipeline,
        node_of=tuple(topology.node_of(r) for r in range(p)),
        leaders=leaders,
        nic_of=nic_of,
    )
    label, phases = table2(collective, steps, via)
    transfers = compose(phases, plan, collective.name)
    pairs = transfers.rank_pairs(p)
    unrouted = pairs[~_joined(routes, p)[pairs // p, pairs % p]]
    if len(unrouted):  # the first, named
        src, dst = divmod(int(unrouted[0]), p)
        raise NotApplicableError(
            f"hiccl: hierarchy {','.join(map(str, shape.factors))} needs a hop from rank {src} to rank {dst}, "
            f"but {topology.name} has no route between them"
        )
    metadata = {
        "hierarchy": list(shape.factors),
        "ring": ring,
        "pipeline": pipeline,
        "stripes": nics,
        "steps": steps,
        "composition": label,
    }
    if scheme:
        metadata["binding"] = scheme
        metadata["nic_binding"] = [nic_of.get(r) for r in range(p)]
    if leaders:
        metadata["stripe_leaders"] = [list(leaders[n]) for n in topology.nodes]
    return finish("hiccl", collective, topology, transfers, routes, **metadata)


GENERATORS = (
    Generator(
        "hiccl",
        hiccl,
        hiccl.collectives,
        "HiCCL compositions of multicast/reduction/fence (Table 2) over a hierarchy, ring(k), NIC striping, pipelining",
        {
            "hierarchy": Option("factors of P, outermost first, e.g. 2,2,4 (default: nodes, GPUs per node)", int_list),
            "ring": Option("k of ring(k) across the outermost level: 1 = tree (default) or hierarchy[0]", positive_int),
            "pipeline": Option("pipeline depth: channels one step apart (default 1)", positive_int),
            "nics": Option("stripes per primitive leaving a node, one leader per NIC (default 1)", positive_int),
            "binding": Option(f"GPU-to-NIC binding: {', '.join(BINDINGS)} (default per HiCCL §2.3)", choice(*BINDINGS)),
            "steps": Option("single or multi (HiCCL Table 2; default multi for allreduce)", choice("single", "multi")),
            "via": Option("multi-step allreduce: reducescatter (default) or reduce", choice("reducescatter", "reduce")),
        },
    ),
)

__all__ = ["GENERATORS", "default_hierarchy", "hiccl", "table2"]

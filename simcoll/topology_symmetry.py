"""Rank rotations that map a machine onto itself: the shifts ``π(r) = (r + s)
mod P`` of every GPU's rank that extend to an automorphism of the topology
(issue 51). A schedule symmetric under such a shift is held by the transfers
of its first ``s`` ranks (:class:`~simcoll.algorithm.OrbitTable`), and the
simulator runs those alone (:mod:`simcoll.simulator.fast.symmetry`).

On a cluster of equal nodes ranked node by node the shifts are the whole-node
ones (:attr:`~simcoll.topology.Topology.node_shifts`: the cluster is built
node by node, so each is an automorphism by construction). On one node, or a
machine without nodes (``ring:N``, ``torus2d:RxC``, ``fully-connected:N``), a
shift ``s`` dividing P is kept when the permutation of the GPUs extends to an
isomorphism of the machine's graph onto itself that keeps every component's
kind and attributes and every link's type, count and direction: the links
between GPUs must map onto links of the same type and count (one array
comparison per shift); another component (switch, NIC, CPU) must map onto
the one whose GPUs are its GPUs shifted, which fixes its image where no two
components look alike (links then checked one by one), and otherwise
networkx's VF2 matcher finds the images (:func:`networkx.is_isomorphic` with
the GPUs labelled by rank, so their images are fixed; machines of at most
:data:`MAX_SEARCHED_COMPONENTS` components). The cyclic shift of a ring is one (order P), a torus's
row shift another (``torus2d:64x64``: 64 ranks, order 64); a hypercube's
rank shifts are not automorphisms but for half the ranks (its translations
are XOR maps, which no cyclic shift of ranks is).

>>> from simcoll.machines import load_topology
>>> rank_shifts(load_topology("ring:8")), rank_shifts(load_topology("torus2d:4x4"))
((1, 2, 4), (4, 8))
>>> rank_shifts(load_topology("dgx-h100*4")), rank_shifts(load_topology("line:4"))
((8, 16), ())
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .topology import Component, Topology, directed_pairs

if TYPE_CHECKING:
    import networkx as nx

#: The most components other than GPUs a one-node machine may have for its
#: shifts to be looked for (VF2's search grows fast with many alike switches).
MAX_MATCHED_COMPONENTS = 2_000
#: The most components a machine may have for VF2 to search its automorphisms
#: where its switches look alike (a larger one is given no rank shift).
MAX_SEARCHED_COMPONENTS = 512
#: Where a topology keeps the shifts once worked out.
_CACHE = "_rank_shifts"


def rank_shifts(topology: Topology) -> tuple[int, ...]:
    """The rank shifts ``s`` (``s`` dividing P, at most P / 2, shortest
    first) under which ``π(r) = (r + s) mod P`` maps ``topology`` onto itself
    (module docstring): the multiples of the least, as such shifts form a
    group; worked out once per topology object. Empty where
    none does, on a machine of one GPU, and on a one-node machine with more
    than :data:`MAX_MATCHED_COMPONENTS` components besides its GPUs."""
    found = topology.__dict__.get(_CACHE)
    if found is None:
        found = _rank_shifts(topology)
        object.__setattr__(topology, _CACHE, found)
    return found


def _rank_shifts(topology: Topology) -> tuple[int, ...]:
    if len(topology.nodes) >= 2:
        return topology.node_shifts
    p = topology.num_ranks
    others = [c for c in topology.components if c.kind != "gpu"]
    if p < 2 or len(others) > MAX_MATCHED_COMPONENTS:
        return ()
    links = _gpu_links(topology)
    keys, counts = _shifted_keys(links, p, 0)
    around = _neighbourhoods(topology, 0) if others else None
    divisors = [s for s in range(1, p // 2 + 1) if p % s == 0]
    for s in divisors:
        shifted, shifted_counts = _shifted_keys(links, p, s)
        if not (np.array_equal(shifted, keys) and np.array_equal(shifted_counts, counts)):
            continue
        if others and not _components_follow(topology, s, around):
            continue
        # the shifts that map a machine onto itself form a group, which its least generates:
        # they are the multiples of the first found, and no other shift need be tried
        return tuple(t for t in divisors if t % s == 0)
    return ()


def _gpu_links(topology: Topology) -> np.ndarray:
    """The links between GPUs, one row per direction: (source rank,
    destination rank, link type index, count)."""
    types = topology.link_types
    by_name = {c.name: c.rank for c in topology.gpus}
    rows = [
        (by_name[a], by_name[b], types.index(link.type), link.count)
        for link in topology.links
        if link.src in by_name and link.dst in by_name
        for a, b in directed_pairs(link)
    ]
    return np.asarray(rows, dtype=np.int64).reshape(-1, 4)


def _shifted_keys(links: np.ndarray, p: int, shift: int) -> tuple[np.ndarray, np.ndarray]:
    """The GPU links (:func:`_gpu_links`) after shifting every rank by
    ``shift``: sorted keys (source rank, destination rank, link type) and
    each key's count."""
    a, b, kind, count = links.T
    key = (((a + shift) % p) * p + (b + shift) % p) * (int(kind.max(initial=0)) + 1) + kind
    unique, inverse = np.unique(key, return_inverse=True)
    return unique, np.bincount(inverse, weights=count, minlength=len(unique)).astype(np.int64)


def _attributes(component: Component) -> tuple:
    """What a component's image must share with it. Not its ``rail``: on
    one node a rail is only which rail switch the NIC would join in a
    cluster, and a shift may permute the rails."""
    c = component
    return (c.kind, c.node, c.model, c.gpudirect, c.reduce, c.multicast)


def _neighbourhoods(topology: Topology, shift: int) -> dict[str, tuple]:
    """Per component other than a GPU, its attributes and the GPUs it links
    to (shifted ranks, link type, count, direction), sorted: the component
    an automorphism moving every rank by ``shift`` maps it onto has, unshifted,
    this signature."""
    p = topology.num_ranks
    rank = {c.name: c.rank for c in topology.gpus}
    seen: dict[str, list] = {c.name: [] for c in topology.components if c.kind != "gpu"}
    for link in topology.links:
        for a, b in directed_pairs(link):
            if a in seen and b in rank:
                seen[a].append(("to", (rank[b] + shift) % p, link.type, link.count))
            elif b in seen and a in rank:
                seen[b].append(("from", (rank[a] + shift) % p, link.type, link.count))
    kinds = {c.name: _attributes(c) for c in topology.components}
    return {name: (repr(kinds[name]), tuple(sorted(gpus))) for name, gpus in seen.items()}


def _components_follow(topology: Topology, shift: int, around: dict[str, tuple]) -> bool:
    """Whether GPU ``r`` -> GPU ``r + shift`` extends to the other
    components. Each must go to one whose signature unshifted is its own
    shifted (:func:`_neighbourhoods`); where each has exactly one such
    candidate the map is forced and its links are checked one by one (a hub
    of 4,096 GPUs); where several components look alike (a board's
    NVSwitches), networkx's VF2 matcher searches (:func:`_extends_to_automorphism`)."""
    by_signature: dict[tuple, list[str]] = {}
    for name, signature in around.items():
        by_signature.setdefault(signature, []).append(name)
    moved = _neighbourhoods(topology, shift)
    if sorted(moved.values()) != sorted(around.values()):
        return False  # (a component's GPUs do not map onto another's: no need to search)
    if any(len(names) > 1 for names in by_signature.values()):
        return _extends_to_automorphism(topology, shift)
    image = {c.name: topology.gpu((c.rank + shift) % topology.num_ranks).name for c in topology.gpus}
    image |= {name: by_signature[signature][0] for name, signature in moved.items()}
    links: dict[tuple[str, str, str], int] = {}
    for link in topology.links:
        for a, b in directed_pairs(link):
            links[(a, b, link.type)] = links.get((a, b, link.type), 0) + link.count
    return all(links.get((image[a], image[b], kind)) == count for (a, b, kind), count in links.items())


def _graph(topology: Topology, shift: int) -> nx.DiGraph:
    """The machine as a directed graph whose GPU ``r`` is labelled ``r -
    shift`` (mod P) and every other component by its kind and attributes;
    each edge by its links' (type, count)."""
    import networkx as nx

    p = topology.num_ranks
    graph = nx.DiGraph()
    for c in topology.components:
        if c.kind == "gpu":
            label = ("gpu", (c.rank - shift) % p)
        else:
            label = _attributes(c)
        graph.add_node(c.name, label=label)
    links: dict[tuple[str, str], dict[str, int]] = {}
    for link in topology.links:
        for pair in directed_pairs(link):
            per_type = links.setdefault(pair, {})
            per_type[link.type] = per_type.get(link.type, 0) + link.count
    for (a, b), per_type in links.items():
        graph.add_edge(a, b, links=tuple(sorted(per_type.items())))
    return graph


def _extends_to_automorphism(topology: Topology, shift: int) -> bool:
    """Whether GPU ``r`` -> GPU ``r + shift`` extends to an automorphism of
    the whole machine: an isomorphism from the machine labelled as it is onto
    the machine with its GPUs relabelled by ``-shift`` maps GPU ``r`` (label
    ``r``) to the GPU labelled ``r`` there, GPU ``r + shift``."""
    import networkx as nx

    if len(topology.components) > MAX_SEARCHED_COMPONENTS:
        return False
    return nx.is_isomorphic(
        _graph(topology, 0),
        _graph(topology, shift),
        node_match=lambda x, y: x["label"] == y["label"],
        edge_match=lambda x, y: x["links"] == y["links"],
    )

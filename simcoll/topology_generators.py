"""Parametric topologies addressable by name (``ring:8``, ``torus2d:4x4``, ...)
and multi-node clusters built from a node type (``dgx-a100*4``, ``ndv2*2/rail``).

Generated GPUs are joined by NVLink-type links of multiplicity one; their
default cost model is ``generic``. Each generator is a plain function returning
a validated :class:`~simcoll.topology.Topology`.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable

from .errors import TopologyError
from .topology import Component, Link, Topology, build_topology


def _gpus(n: int) -> list[Component]:
    return [Component(name=f"gpu{i}", kind="gpu", rank=i) for i in range(n)]


def _generic(name: str, n: int, pairs, extra: list[Component] = (), description: str = "") -> Topology:
    links = [
        Link(src=a if isinstance(a, str) else f"gpu{a}", dst=b if isinstance(b, str) else f"gpu{b}", type="nvlink")
        for a, b in pairs
    ]
    return build_topology(name, _gpus(n) + list(extra), links, description=description, default_model="generic")


def _need(n: int, least: int, what: str) -> None:
    if n < least:
        raise TopologyError(f"{what}: needs at least {least}, got {n}")


def ring(n: int) -> Topology:
    """Bidirectional ring of ``n`` GPUs: i <-> i+1 mod n (one link each way)."""
    _need(n, 2, "ring:N")
    pairs = [(i, (i + 1) % n) for i in range(n if n > 2 else 1)]
    return _generic(f"ring:{n}", n, pairs, description=f"bidirectional ring of {n} GPUs")


def line(n: int) -> Topology:
    """Line (chain) of ``n`` GPUs: i <-> i+1."""
    _need(n, 2, "line:N")
    return _generic(f"line:{n}", n, [(i, i + 1) for i in range(n - 1)], description=f"line of {n} GPUs")


def fully_connected(n: int) -> Topology:
    """Every pair of ``n`` GPUs joined by one link."""
    _need(n, 2, "fully-connected:N")
    return _generic(
        f"fully-connected:{n}", n, itertools.combinations(range(n), 2), description=f"{n} fully connected GPUs"
    )


def hub_and_spoke(n: int) -> Topology:
    """``n`` GPUs each joined by one link to a central non-blocking switch (the hub)."""
    _need(n, 2, "hub-and-spoke:N")
    hub = Component(name="hub", kind="switch")
    return _generic(
        f"hub-and-spoke:{n}", n, [(i, "hub") for i in range(n)], [hub], description=f"{n} GPUs around one switch"
    )


def torus2d(rows: int, cols: int) -> Topology:
    """``rows`` × ``cols`` 2D torus; GPU (r, c) has rank r*cols + c. A dimension of
    size 2 gets a single link (its wrap-around would duplicate it)."""
    if rows < 1 or cols < 1 or rows * cols < 2:
        raise TopologyError(f"torus2d:{rows}x{cols}: needs at least two GPUs")
    pairs = set()
    for r, c in itertools.product(range(rows), range(cols)):
        here = r * cols + c
        for nr, nc in (((r + 1) % rows, c), (r, (c + 1) % cols)):
            there = nr * cols + nc
            if there != here:
                pairs.add((min(here, there), max(here, there)))
    return _generic(f"torus2d:{rows}x{cols}", rows * cols, sorted(pairs), description=f"{rows}x{cols} 2D torus")


def hypercube(dim: int) -> Topology:
    """Hypercube of 2**dim GPUs: ranks differing in one bit are joined."""
    _need(dim, 1, "hypercube:D")
    n = 2**dim
    pairs = [(i, i ^ (1 << b)) for i in range(n) for b in range(dim) if i < i ^ (1 << b)]
    return _generic(f"hypercube:{dim}", n, pairs, description=f"{dim}-dimensional hypercube of {n} GPUs")


TOPOLOGY_GENERATORS: dict[str, tuple[Callable[..., Topology], str]] = {
    "ring": (ring, "ring:N"),
    "line": (line, "line:N"),
    "fully-connected": (fully_connected, "fully-connected:N"),
    "hub-and-spoke": (hub_and_spoke, "hub-and-spoke:N"),
    "torus2d": (torus2d, "torus2d:AxB"),
    "hypercube": (hypercube, "hypercube:D"),
}


def generate_topology(spec: str) -> Topology:
    """Build a generated topology from ``NAME:PARAMS`` (e.g. ``torus2d:4x4``)."""
    name, _, params = spec.partition(":")
    if name not in TOPOLOGY_GENERATORS:
        raise TopologyError(
            f"unknown generator {name!r} in {spec!r}; known: {', '.join(u for _, u in TOPOLOGY_GENERATORS.values())}"
        )
    func, usage = TOPOLOGY_GENERATORS[name]
    if not re.fullmatch(r"\d+(x\d+)*", params):
        raise TopologyError(f"{spec!r}: parameters must be whole numbers, as in {usage}")
    numbers = [int(x) for x in params.split("x")]
    expected = 2 if name == "torus2d" else 1
    if len(numbers) != expected:
        raise TopologyError(f"{spec!r}: expected {usage}")
    return func(*numbers)


# ---------------------------------------------------------------------------
# Clusters
# ---------------------------------------------------------------------------
def cluster(node: Topology, num_nodes: int, fabric: str = "fat-tree") -> Topology:
    """``num_nodes`` copies of a node type whose NICs join an inter-node fabric.

    ``fabric="fat-tree"`` joins every NIC to one non-blocking switch (a full
    bisection fat tree, abstracted as one switch); ``fabric="rail"`` joins NIC
    *i* of every node to rail switch *i* (rail-optimised, as in DGX SuperPOD).
    Components are renamed ``n<node>.<name>``; ranks are node-major.
    """
    if num_nodes < 1:
        raise TopologyError(f"{node.name}*{num_nodes}: needs at least one node")
    if fabric not in ("fat-tree", "rail"):
        raise TopologyError(f"{node.name}*{num_nodes}/{fabric}: fabric must be fat-tree or rail")
    nics = [c for c in node.components if c.kind == "nic"]
    if not nics:
        raise TopologyError(f"cannot build a cluster of {node.name!r}: it has no NIC")
    gpus_per_node = node.num_ranks
    switch_kind = "ib_switch" if node.network_link == "ib" else "switch"
    components: list[Component] = []
    links: list[Link] = []
    for i in range(num_nodes):
        for c in node.components:
            rank = None if c.rank is None else i * gpus_per_node + c.rank
            components.append(Component(**{**vars(c), "name": f"n{i}.{c.name}", "node": i, "rank": rank}))
        links += [Link(**{**vars(lk), "src": f"n{i}.{lk.src}", "dst": f"n{i}.{lk.dst}"}) for lk in node.links]
    if fabric == "fat-tree":
        components.append(Component(name="fabric", kind=switch_kind, node=None))
        links += [Link(f"n{i}.{nic.name}", "fabric", node.network_link) for i in range(num_nodes) for nic in nics]
    else:
        for r, nic in enumerate(nics):
            rail = nic.rail if nic.rail is not None else r
            switch = f"rail{rail}"
            if not any(c.name == switch for c in components):
                components.append(Component(name=switch, kind=switch_kind, node=None))
            links += [Link(f"n{i}.{nic.name}", switch, node.network_link) for i in range(num_nodes)]
    suffix = "" if fabric == "fat-tree" else "/rail"
    return build_topology(
        f"{node.name}*{num_nodes}{suffix}",
        components,
        links,
        description=f"{num_nodes} x {node.name} joined by a {fabric} {node.network_link} fabric",
        sources=node.sources,
        default_model=node.default_model,
        network_link=node.network_link,
    )

"""Parametric topologies addressable by name (``ring:8``, ``torus2d:4x4``, ...)
and multi-node clusters built from a node type (``dgx-a100*4``, ``ndv2*2/rail``).

Generated GPUs are joined by NVLink-type links of multiplicity one; their
default cost model is ``generic``. Each generator is a plain function returning
a validated :class:`~simcoll.topology.Topology`.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .errors import TopologyError, UnknownMachineError
from .limits import check_machine_size
from .topology import Component, Link, Topology, build_topology, component_graph


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
        raise UnknownMachineError(
            f"unknown generator {name!r} in {spec!r}; known: {', '.join(u for _, u in TOPOLOGY_GENERATORS.values())}"
        )
    func, usage = TOPOLOGY_GENERATORS[name]
    if not re.fullmatch(r"\d+(x\d+)*", params):
        raise TopologyError(f"{spec!r}: parameters must be whole numbers, as in {usage}")
    numbers = [int(x) for x in params.split("x")]
    expected = 2 if name == "torus2d" else 1
    if len(numbers) != expected:
        raise TopologyError(f"{spec!r}: expected {usage}")
    check_machine_size(spec, *_size_of(name, numbers))
    return func(*numbers)


def _size_of(name: str, numbers: list[int]) -> tuple[int, int]:
    """(GPUs, links) of a generated topology, from its parameters alone."""
    if name == "hypercube":
        dim = min(numbers[0], 64)  # 2**64 is past every limit; keeps the arithmetic small
        return 2**dim, dim * 2 ** max(dim - 1, 0)
    if name == "torus2d":
        n = numbers[0] * numbers[1]
        return n, 2 * n
    n = numbers[0]
    return n, n * (n - 1) // 2 if name == "fully-connected" else n


# ---------------------------------------------------------------------------
# Clusters
# ---------------------------------------------------------------------------
FABRICS = ("fat-tree", "rail", "clos")


@dataclass(frozen=True)
class FabricSpec:
    """How a cluster's nodes are joined, parsed from ``FABRIC[:key=value,...]``.

    - ``kind``: ``fat-tree`` (every NIC on one non-blocking switch: a full
      bisection fat tree abstracted as one switch), ``rail`` (NIC *i* of every
      node on rail switch *i*, as in DGX SuperPOD) or ``clos`` (a two-tier
      leaf-spine Clos of switches with ``radix`` ports, each leaf with
      ``oversub`` times more ports down to NICs than up to spines);
    - ``nics``: keep this many of each node's NICs, spread evenly over its
      NIC list (``None``: all), the NICs-per-node what-if;
    - ``gpudirect``: force every NIC's GPUDirect RDMA on or off (``None``:
      as the node says); with it off, traffic is staged through host memory
      where the model sets ``network.host_staging`` (TACCL §4.2);
    - ``radix``, ``oversub``: the Clos switch radix and leaf oversubscription;
    - ``sharp``: whether the fabric's switches reduce and multicast (IB SHARP,
      NCCL's CollNet); ``None``: on exactly when the node's own switches reduce
      and its network is InfiniBand (NVLink-SHARP nodes such as DGX H100 come
      with NDR Quantum-2 fabrics, whose switches run SHARPv3; the Ethernet
      fabrics of cloud H100 nodes, GPUDirect-TCPXO or EFA, reduce nothing).
    """

    kind: str = "fat-tree"
    nics: int | None = None
    gpudirect: bool | None = None
    radix: int = 64
    oversub: float = 1.0
    sharp: bool | None = None

    def suffix(self) -> str:
        """The spec's text after ``/`` in a cluster name ('' for a plain fat tree)."""
        opts = []
        if self.kind == "clos":
            opts += [f"radix={self.radix}", f"oversub={self.oversub:g}"]
        if self.nics is not None:
            opts.append(f"nics={self.nics}")
        if self.gpudirect is not None:
            opts.append(f"gdr={'on' if self.gpudirect else 'off'}")
        if self.sharp is not None:
            opts.append(f"sharp={'on' if self.sharp else 'off'}")
        if self.kind == "fat-tree" and not opts:
            return ""
        return f"/{self.kind}" + (":" + ",".join(opts) if opts else "")


def parse_fabric(text: str) -> FabricSpec:
    """A :class:`FabricSpec` from ``FABRIC[:key=value,...]`` with keys ``nics``,
    ``gdr`` (``on``/``off``), ``radix`` and ``oversub`` (the last two for ``clos``).

    Examples
    --------
    >>> parse_fabric("clos:radix=16,oversub=2")
    FabricSpec(kind='clos', nics=None, gpudirect=None, radix=16, oversub=2.0, sharp=None)
    >>> parse_fabric("rail:nics=2,gdr=off").suffix()
    '/rail:nics=2,gdr=off'
    >>> parse_fabric("torus")
    Traceback (most recent call last):
    simcoll.errors.TopologyError: fabric 'torus': must be one of fat-tree, rail, clos
    """
    kind, _, options = text.partition(":")
    if kind not in FABRICS:
        raise TopologyError(f"fabric {text!r}: must be one of {', '.join(FABRICS)}")
    fields: dict = {"kind": kind}
    for item in filter(None, options.split(",")):
        key, eq, value = item.partition("=")
        try:
            if not eq:
                raise ValueError
            if key == "nics":
                fields["nics"] = int(value)
            elif key == "gdr" and value in ("on", "off"):
                fields["gpudirect"] = value == "on"
            elif key == "sharp" and value in ("on", "off"):
                fields["sharp"] = value == "on"
            elif key == "radix" and kind == "clos":
                fields["radix"] = int(value)
            elif key == "oversub" and kind == "clos":
                fields["oversub"] = float(value)
            else:
                raise ValueError
        except ValueError:
            allowed = "nics=K, gdr=on|off, sharp=on|off" + (", radix=R, oversub=F" if kind == "clos" else "")
            raise TopologyError(f"fabric {text!r}: bad option {item!r} (allowed: {allowed})") from None
    spec = FabricSpec(**fields)
    if spec.nics is not None and spec.nics < 1:
        raise TopologyError(f"fabric {text!r}: nics must be at least 1")
    if spec.radix < 4:
        raise TopologyError(f"fabric {text!r}: radix must be at least 4")
    if not spec.oversub >= 1:
        raise TopologyError(f"fabric {text!r}: oversub must be at least 1 (down ports / up ports of a leaf)")
    return spec


def _select_nics(node: Topology, spec: FabricSpec) -> Topology:
    """``node`` keeping ``spec.nics`` of its NICs (evenly spread) with GPUDirect as ``spec`` says."""
    nics = [c for c in node.components if c.kind == "nic"]
    if spec.nics is not None and spec.nics > len(nics):
        raise TopologyError(f"{node.name}: cannot keep {spec.nics} NICs per node, it has {len(nics)}")
    keep = {nics[i * len(nics) // spec.nics].name for i in range(spec.nics)} if spec.nics else {c.name for c in nics}
    components = [
        c if c.kind != "nic" or spec.gpudirect is None else Component(**{**vars(c), "gpudirect": spec.gpudirect})
        for c in node.components
        if c.kind != "nic" or c.name in keep
    ]
    names = {c.name for c in components}
    links = [lk for lk in node.links if lk.src in names and lk.dst in names]
    return build_topology(
        node.name,
        components,
        links,
        description=node.description,
        sources=node.sources,
        default_model=node.default_model,
        network_link=node.network_link,
    )


def gpu_subset(node: Topology, gpus: Sequence[int]) -> Topology:
    """``node`` with only the GPUs of ranks ``gpus``, ranked 0.. in the order
    given, as ``CUDA_VISIBLE_DEVICES`` leaves a job a node's GPUs (e.g. a
    2-GPU nccl-tests run on a 4-GPU board). Switches and CPUs stay; a NIC
    stays when one of the GPUs nearest to it (fewest links away) is kept, as
    a VM or container gets the NICs beside its GPUs (on a DGX, NIC k shares
    GPU k's PCIe switch; ``NODE*N/fat-tree:nics=K`` keeps fewer still); links
    to what is left out go, and so does whatever the kept GPUs no longer
    reach (e.g. a PCIe switch joined only to GPUs left out).

    >>> from simcoll.machines import load_topology
    >>> t = gpu_subset(load_topology("l40s-pcie"), [2, 0])
    >>> t.name, t.num_ranks, [g.name for g in t.gpus]
    ('l40s-pcie[2,0]', 2, ['gpu2', 'gpu0'])
    """
    import networkx as nx

    name = f"{node.name}[{','.join(str(g) for g in gpus)}]"
    by_rank = {c.rank: c for c in node.components if c.kind == "gpu"}
    bad = [g for g in gpus if g not in by_rank]
    if not gpus or bad or len(set(gpus)) != len(gpus):
        why = "no GPU" if not gpus else f"{bad[0]} is not a rank" if bad else "a rank listed twice"
        raise TopologyError(f"{name}: {why}; list distinct GPU ranks of {node.name}, 0..{node.num_ranks - 1}")
    rank_of = {by_rank[g].name: i for i, g in enumerate(gpus)}
    nearest = _nearest_gpus(node)
    kept = [
        c
        for c in node.components
        if c.name in rank_of or c.kind not in ("gpu", "nic") or (c.kind == "nic" and nearest[c.name] & rank_of.keys())
    ]
    names = {c.name for c in kept}
    graph = component_graph(names, (lk for lk in node.links if lk.src in names and lk.dst in names))
    reached = set().union(*(nx.node_connected_component(graph, gpu) for gpu in rank_of))
    links = [lk for lk in node.links if lk.src in reached and lk.dst in reached]
    gpu_first = [by_rank[g] for g in gpus] + [c for c in kept if c.kind != "gpu" and c.name in reached]
    components = [Component(**{**vars(c), "rank": rank_of[c.name]}) if c.kind == "gpu" else c for c in gpu_first]
    return build_topology(
        name,
        components,
        links,
        description=f"GPUs {', '.join(str(g) for g in gpus)} of {node.name}"
        + (f" ({node.description})" if node.description else ""),
        sources=node.sources,
        default_model=node.default_model,
        network_link=node.network_link,
    )


def _nearest_gpus(node: Topology) -> dict[str, set[str]]:
    """Per NIC of ``node``, the GPUs fewest links away from it."""
    import networkx as nx

    graph = component_graph((c.name for c in node.components), node.links)
    gpus = {g.name for g in node.gpus}
    out: dict[str, set[str]] = {}
    for nic in (c.name for c in node.components if c.kind == "nic"):
        hops = {g: d for g, d in nx.single_source_shortest_path_length(graph, nic).items() if g in gpus}
        nearest = min(hops.values(), default=None)
        out[nic] = {g for g, d in hops.items() if d == nearest}
    return out


def clos_shape(endpoints: int, radix: int, oversub: float) -> tuple[int, int, int]:
    """(leaves, down ports per leaf, up ports per leaf = spines) of the smallest
    two-tier leaf-spine Clos of ``radix``-port switches serving ``endpoints``
    NICs with leaf oversubscription ``oversub`` = down / up.

    Examples
    --------
    >>> clos_shape(64, 16, 1.0), clos_shape(64, 16, 3.0)
    ((8, 8, 8), (6, 12, 4))
    """
    up = max(1, round(radix / (1.0 + oversub)))
    down = radix - up
    leaves = -(-endpoints // down)
    if leaves > radix:
        raise TopologyError(
            f"{endpoints} NICs exceed a two-tier Clos of radix {radix} (at most {radix * down} at oversub {oversub:g})"
        )
    return leaves, down, up


def cluster(node: Topology, num_nodes: int, fabric: str | FabricSpec = "fat-tree") -> Topology:
    """``num_nodes`` copies of a node type whose NICs join an inter-node fabric.

    ``fabric`` is a :class:`FabricSpec` or its text (:func:`parse_fabric`):
    ``fat-tree`` joins every NIC to one non-blocking switch; ``rail`` joins NIC
    *i* of every node to rail switch *i*; ``clos:radix=R,oversub=F`` puts the
    NICs, node-major, on leaf switches (``leaf<j>``) sized by :func:`clos_shape`;
    its ``up`` spine switches are written as one spine layer (``spine``) joined
    to each leaf by ``up`` parallel links, which routes use together (perfect
    ECMP, as the fat tree is one non-blocking switch); one leaf needs no spine. Fabric links are of the node's ``network_link`` type, so
    they share its bandwidth. Components are renamed ``n<node>.<name>``; ranks
    are node-major.
    """
    spec = fabric if isinstance(fabric, FabricSpec) else parse_fabric(fabric)
    if num_nodes < 1:
        raise TopologyError(f"{node.name}*{num_nodes}: needs at least one node")
    check_machine_size(f"{node.name}*{num_nodes}", node.num_ranks * num_nodes, len(node.links) * num_nodes)
    if not any(c.kind == "nic" for c in node.components):
        raise TopologyError(f"cannot build a cluster of {node.name!r}: it has no NIC")
    if spec.nics is not None or spec.gpudirect is not None:
        node = _select_nics(node, spec)
    nics = [c for c in node.components if c.kind == "nic"]
    gpus_per_node = node.num_ranks
    switch_kind = "ib_switch" if node.network_link == "ib" else "switch"
    sharp = spec.sharp if spec.sharp is not None else bool(node.reducing_switches()) and node.network_link == "ib"
    wire = node.network_link
    components: list[Component] = []
    links: list[Link] = []
    for i in range(num_nodes):
        for c in node.components:
            rank = None if c.rank is None else i * gpus_per_node + c.rank
            components.append(Component(**{**vars(c), "name": f"n{i}.{c.name}", "node": i, "rank": rank}))
        links += [Link(**{**vars(lk), "src": f"n{i}.{lk.src}", "dst": f"n{i}.{lk.dst}"}) for lk in node.links]
    if spec.kind == "fat-tree":
        components.append(Component(name="fabric", kind=switch_kind, node=None, reduce=sharp, multicast=sharp))
        links += [Link(f"n{i}.{nic.name}", "fabric", wire) for i in range(num_nodes) for nic in nics]
    elif spec.kind == "rail":
        for r, nic in enumerate(nics):
            rail = nic.rail if nic.rail is not None else r
            switch = f"rail{rail}"
            if not any(c.name == switch for c in components):
                components.append(Component(name=switch, kind=switch_kind, node=None, reduce=sharp, multicast=sharp))
            links += [Link(f"n{i}.{nic.name}", switch, wire) for i in range(num_nodes)]
    else:
        endpoints = [f"n{i}.{nic.name}" for i in range(num_nodes) for nic in nics]
        leaves, down, up = clos_shape(len(endpoints), spec.radix, spec.oversub)
        components += [
            Component(name=f"leaf{j}", kind=switch_kind, node=None, reduce=sharp, multicast=sharp)
            for j in range(leaves)
        ]
        links += [Link(nic, f"leaf{e // down}", wire) for e, nic in enumerate(endpoints)]
        if leaves > 1:  # the ``up`` spines as one layer: ``up`` parallel links per leaf, used together (ECMP)
            components.append(Component(name="spine", kind=switch_kind, node=None, reduce=sharp, multicast=sharp))
            links += [Link(f"leaf{j}", "spine", wire, count=up) for j in range(leaves)]
    return build_topology(
        f"{node.name}*{num_nodes}{spec.suffix()}",
        components,
        links,
        # the node's description names its GPUs (NCCL's tuner reads the GPU generation from it)
        description=f"{num_nodes} x {node.name}"
        + (f" ({node.description})" if node.description else "")
        + f" joined by a {spec.kind} {wire} fabric{spec.suffix()}",
        sources=node.sources,
        default_model=node.default_model,
        network_link=node.network_link,
    )

"""Machine structure: the Topology type, its YAML schema, validation and networkx view.

A topology says *what is connected to what*: GPUs, CPUs and host memory,
NVSwitch / IB / PCIe switches, PCIe root complexes, NICs, and the links between
them with their multiplicity. It carries no speeds: those live in a cost model
(``simcoll.cost_model``), so a what-if study swaps the model, not the machine.

YAML schema (``topologies/*.yaml``)::

    name: dgx1                      # required
    description: text               # optional
    sources: [text, ...]            # optional: where the structure comes from
    default_model: dgx1             # optional: name of a file in models/
    network_link: ib                # optional: link type its NICs use in clusters
    gpus: 8                         # shorthand: gpu0..gpu7 on node 0, ranks 0..7
    components:                     # optional, other components (and GPUs, if
      - {name: cpu0, kind: cpu}     #   you need to name them yourself)
      - {name: nic0, kind: nic, gpudirect: false}
    links:
      - [gpu0, gpu1, nvlink, 2]     # compact form: a, b, type[, count]
      - {ends: [gpu0, cpu0], type: pcie, count: 1, directed: false}

Component fields: ``name``, ``kind`` (one of :data:`COMPONENT_KINDS`),
``node`` (int, default 0), ``rank`` (GPUs only; default: order of appearance),
``model`` (free text, e.g. "V100"), ``gpudirect`` (NICs only, default true),
``rail`` (NICs only: index of the rail switch in per-rail clusters),
``reduce`` and ``multicast`` (switches only, default false: the switch can
combine the data several ranks send into it and deliver one result, e.g.
NVLink SHARP on third-generation NVSwitch or SHARP on InfiniBand Quantum
switches; and it can replicate one incoming stream to several ranks). Their
rates are the model's ``switches.<kind>.reduce_Bps`` / ``multicast_Bps``
(:mod:`simcoll.cost_model`); Algorithms use them through
:class:`simcoll.algorithm.SwitchReduction`.

Links are full duplex unless ``directed: true``: ``count`` parallel links each
way, each with the bandwidth the cost model gives to ``type``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from .errors import TopologyError
from .files import load_yaml, write_atomic
from .limits import check_machine_size

if TYPE_CHECKING:
    import networkx as nx

COMPONENT_KINDS = (
    "gpu",
    "cpu",
    "host_memory",
    "nvswitch",
    "ib_switch",
    "pcie_switch",
    "root_complex",
    "nic",
    "switch",
)
LINK_TYPES = (
    "nvlink",
    "xgmi",
    "pcie",
    "ib",
    "slingshot",
    "ethernet",
    "xbus",
    "qpi",
    "infinity_fabric",
    "xe_link",
    "memory",
)
# GPU-to-GPU fabrics: routes use these alone whenever they connect two GPUs.
FABRIC_LINK_TYPES = ("nvlink", "xgmi", "infinity_fabric", "xe_link")

#: The attribute a topology keeps its shared routes in (:func:`simcoll.routes.routes_of`).
SHARED_ROUTES = "_shared_routes"
_COMPONENT_FIELDS = {"name", "kind", "node", "rank", "model", "gpudirect", "rail", "reduce", "multicast"}
# Component kinds that may declare in-network reduction / multicast.
SWITCH_KINDS = ("nvswitch", "ib_switch", "switch")
_LINK_FIELDS = {"ends", "type", "count", "directed"}
_TOP_FIELDS = {"name", "description", "sources", "default_model", "network_link", "gpus", "components", "links"}


@dataclass(frozen=True)
class Component:
    """One piece of hardware: a GPU, CPU, switch, NIC, ...

    ``rank`` is set for GPUs only: ranks are 0..P-1 and index every Algorithm.
    ``node`` is ``None`` for fabric shared by all nodes (a cluster's switches).
    """

    name: str
    kind: str
    node: int | None = 0
    rank: int | None = None
    model: str | None = None
    gpudirect: bool = True
    rail: int | None = None
    reduce: bool = False
    multicast: bool = False


@dataclass(frozen=True)
class Link:
    """``count`` parallel links of ``type`` between ``src`` and ``dst``."""

    src: str
    dst: str
    type: str
    count: int = 1
    directed: bool = False


@dataclass(frozen=True)
class Topology:
    """A validated machine structure. Build with :func:`topology_from_dict` or
    :func:`simcoll.machines.load_topology`."""

    name: str
    components: tuple[Component, ...]
    links: tuple[Link, ...]
    description: str = ""
    sources: tuple[str, ...] = ()
    default_model: str | None = None
    network_link: str = "ib"
    _by_name: Mapping[str, Component] = field(default=None, repr=False, compare=False)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_name", {c.name: c for c in self.components})

    def __getstate__(self) -> dict:
        # a pickled copy (a worker's machine) leaves the routes worked out so far behind (routes_of)
        return {k: v for k, v in self.__dict__.items() if k != SHARED_ROUTES}

    # -- GPUs and ranks ---------------------------------------------------
    @cached_property
    def gpus(self) -> tuple[Component, ...]:
        """GPUs ordered by rank."""
        return tuple(sorted((c for c in self.components if c.kind == "gpu"), key=lambda c: c.rank))

    @property
    def num_ranks(self) -> int:
        return len(self.gpus)

    @cached_property
    def nodes(self) -> tuple[int, ...]:
        return tuple(sorted({c.node for c in self.components if c.node is not None}))

    @cached_property
    def node_shifts(self) -> tuple[int, ...]:
        """The rank shifts by whole nodes a node rotation can have, shortest
        first: ``d`` nodes' GPUs for every ``d`` from one to half the nodes
        that divides the node count. Empty on one node, and where the nodes
        differ in size or the ranks are not numbered node by node (a shift
        of ranks is then no shift of nodes).

        >>> from simcoll.machines import load_topology
        >>> load_topology("dgx-h100*4").node_shifts, load_topology("dgx-h100").node_shifts
        ((8, 16), ())
        """
        p, nodes = self.num_ranks, len(self.nodes)
        if nodes < 2 or p % nodes or any(self.node_of(r) != r // (p // nodes) for r in range(p)):
            return ()
        return tuple(d * (p // nodes) for d in range(1, nodes // 2 + 1) if nodes % d == 0)

    def component(self, name: str) -> Component:
        try:
            return self._by_name[name]
        except KeyError:
            raise TopologyError(f"{self.name}: no component named {name!r}") from None

    def gpu(self, rank: int) -> Component:
        """The GPU with the given rank."""
        gpus = self.gpus
        if not 0 <= rank < len(gpus):
            raise TopologyError(f"{self.name}: rank {rank} out of range 0..{len(gpus) - 1}")
        return gpus[rank]

    def reducing_switches(self, node: int | None | str = "any") -> tuple[Component, ...]:
        """Switches that reduce in the network (``reduce: true``), in topology
        order; ``node`` selects one node's switches (``None``: the fabric shared
        by all nodes; ``"any"``: all of them)."""
        return tuple(c for c in self.components if c.reduce and (node == "any" or c.node == node))

    def node_of(self, rank: int) -> int:
        return self.gpu(rank).node

    def ranks_of_node(self, node: int) -> list[int]:
        return list(self._ranks_by_node.get(node, ()))

    @cached_property
    def _ranks_by_node(self) -> dict[int, tuple[int, ...]]:
        """Per node, its GPUs' ranks in GPU order (asked once per node and channel by NCCL's ring
        search: 5,000 times on 4,096 GPUs, a second when each call walked every GPU)."""
        ranks: dict[int, list[int]] = {}
        for g in self.gpus:
            ranks.setdefault(g.node, []).append(g.rank)
        return {node: tuple(members) for node, members in ranks.items()}

    @cached_property
    def directed_link_counts(self) -> Mapping[tuple[str, str], int]:
        """Links from one component to another, every type together, per
        direction: ``{(src, dst): count}`` (an undirected link counts both
        ways).

        >>> from simcoll import load_topology
        >>> links = load_topology("dgx-h100").directed_link_counts
        >>> links[("gpu0", "nvsw0")], links[("nvsw0", "gpu0")], links[("gpu0", "nvsw1")]
        (5, 5, 4)
        """
        counts: dict[tuple[str, str], int] = {}
        for link in self.links:
            for pair in directed_pairs(link):
                counts[pair] = counts.get(pair, 0) + link.count
        return counts

    @property
    def link_types(self) -> tuple[str, ...]:
        return tuple(sorted({link.type for link in self.links}))

    # -- graph views --------------------------------------------------------
    def to_networkx(self) -> nx.MultiDiGraph:
        """Directed multigraph: one node per component (attributes from
        :class:`Component`), one edge per direction and link type, keyed by the
        type, with attribute ``count``."""
        import networkx as nx

        graph = nx.MultiDiGraph(name=self.name)
        for comp in self.components:
            graph.add_node(comp.name, **{k: v for k, v in vars(comp).items() if k != "name"})
        for link in self.links:
            for a, b in directed_pairs(link):
                if graph.has_edge(a, b, key=link.type):
                    graph[a][b][link.type]["count"] += link.count
                else:
                    graph.add_edge(a, b, key=link.type, type=link.type, count=link.count)
        return graph

    def gpu_link_counts(self, link_type: str | None = None) -> list[list[int]]:
        """P×P matrix of direct GPU-to-GPU link counts (row = source rank)."""
        p = self.num_ranks
        matrix = [[0] * p for _ in range(p)]
        for link in self.links:
            if link_type is not None and link.type != link_type:
                continue
            for a, b in directed_pairs(link):
                ca, cb = self._by_name[a], self._by_name[b]
                if ca.kind == "gpu" and cb.kind == "gpu":
                    matrix[ca.rank][cb.rank] += link.count
        return matrix


def directed_pairs(link: Link) -> list[tuple[str, str]]:
    """The directions a link carries traffic in."""
    return [(link.src, link.dst)] if link.directed else [(link.src, link.dst), (link.dst, link.src)]


# ---------------------------------------------------------------------------
# Building and validating
# ---------------------------------------------------------------------------
def topology_from_dict(data: Any, where: str = "<topology>") -> Topology:
    """Validate a parsed YAML/JSON description and build a :class:`Topology`.

    ``where`` (usually the file path) prefixes every error message.
    """
    if not isinstance(data, Mapping):
        raise TopologyError(f"{where}: expected a mapping at the top level, got {type(data).__name__}")
    _reject_unknown(data, _TOP_FIELDS, where)
    name = data.get("name")
    if not isinstance(name, str) or not name:
        raise TopologyError(f"{where}: field 'name' is required and must be a non-empty string")

    components: list[Component] = []
    gpus = data.get("gpus")
    if gpus is not None:
        if not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 1:
            raise TopologyError(f"{where}: field 'gpus' must be a positive integer, got {gpus!r}")
        raw = data.get("links")
        check_machine_size(where, gpus, len(raw) if isinstance(raw, list) else 0)  # a non-list is refused below
        components += [Component(name=f"gpu{i}", kind="gpu") for i in range(gpus)]
    raw_components = data.get("components") or []
    if not isinstance(raw_components, list):
        raise TopologyError(f"{where}: field 'components' must be a list")
    for i, raw in enumerate(raw_components):
        components.append(_component_from_dict(raw, f"{where}: components[{i}]"))

    links = []
    raw_links = data.get("links") or []
    if not isinstance(raw_links, list):
        raise TopologyError(f"{where}: field 'links' must be a list")
    for i, raw in enumerate(raw_links):
        links.append(_link_from_raw(raw, f"{where}: links[{i}]"))

    sources = data.get("sources") or []
    if isinstance(sources, str):
        sources = [sources]
    if not isinstance(sources, list) or not all(isinstance(s, str) for s in sources):
        raise TopologyError(f"{where}: field 'sources' must be a list of strings, got {sources!r}")
    default_model = data.get("default_model")
    if default_model is not None and not isinstance(default_model, str):
        raise TopologyError(f"{where}: field 'default_model' must be a string")
    network_link = data.get("network_link", "ib")
    if network_link not in LINK_TYPES:
        raise TopologyError(f"{where}: network_link: {network_link!r} is not one of {', '.join(LINK_TYPES)}")
    return build_topology(
        name,
        components,
        links,
        description=str(data.get("description") or ""),
        sources=tuple(str(s) for s in sources),
        default_model=default_model,
        network_link=network_link,
        where=where,
    )


def build_topology(
    name: str,
    components: Iterable[Component],
    links: Iterable[Link],
    *,
    description: str = "",
    sources: tuple[str, ...] = (),
    default_model: str | None = None,
    network_link: str = "ib",
    where: str | None = None,
) -> Topology:
    """Assign missing GPU ranks in order of appearance, check every invariant
    and return the :class:`Topology`."""
    where = where or name
    components = list(components)
    links = list(links)
    seen: dict[str, int] = {}
    for i, comp in enumerate(components):
        if comp.name in seen:
            raise TopologyError(f"{where}: components[{i}].name: duplicate component {comp.name!r}")
        seen[comp.name] = i
        if comp.kind not in COMPONENT_KINDS:
            raise TopologyError(
                f"{where}: component {comp.name!r}: kind {comp.kind!r} is not one of {', '.join(COMPONENT_KINDS)}"
            )
        if comp.rank is not None and comp.kind != "gpu":
            raise TopologyError(f"{where}: component {comp.name!r}: only GPUs have a rank")
        for capability in ("reduce", "multicast"):
            value = getattr(comp, capability)
            if not isinstance(value, bool):
                raise TopologyError(f"{where}: component {comp.name!r}: {capability} must be true or false")
            if value and comp.kind not in SWITCH_KINDS:
                raise TopologyError(
                    f"{where}: component {comp.name!r}: only switches ({', '.join(SWITCH_KINDS)}) can {capability}, "
                    f"it is a {comp.kind}"
                )

    gpus = [c for c in components if c.kind == "gpu"]
    if not gpus:
        raise TopologyError(f"{where}: the topology has no GPU")
    explicit = [c.rank for c in gpus if c.rank is not None]
    if explicit and len(explicit) != len(gpus):
        raise TopologyError(f"{where}: give a rank to every GPU or to none")
    if explicit:
        if sorted(explicit) != list(range(len(gpus))):
            raise TopologyError(
                f"{where}: GPU ranks must be 0..{len(gpus) - 1} each exactly once, got {sorted(explicit)}"
            )
    else:
        rank = iter(range(len(gpus)))
        components = [Component(**{**vars(c), "rank": next(rank)}) if c.kind == "gpu" else c for c in components]

    for i, link in enumerate(links):
        for end_name, end in (("src", link.src), ("dst", link.dst)):
            if end not in seen:
                raise TopologyError(f"{where}: links[{i}].{end_name}: unknown component {end!r}")
        if link.src == link.dst:
            raise TopologyError(f"{where}: links[{i}]: a link joins {link.src!r} to itself")
        if link.type not in LINK_TYPES:
            raise TopologyError(f"{where}: links[{i}].type: {link.type!r} is not one of {', '.join(LINK_TYPES)}")
        if not isinstance(link.count, int) or isinstance(link.count, bool) or link.count < 1:
            raise TopologyError(
                f"{where}: links[{i}].count: multiplicity must be a positive integer, got {link.count!r}"
            )

    topology = Topology(
        name=name,
        components=tuple(components),
        links=tuple(links),
        description=description,
        sources=sources,
        default_model=default_model,
        network_link=network_link,
    )
    _check_connected(topology, where)
    return topology


def component_graph(names: Iterable[str], links: Iterable[Link]) -> nx.Graph:
    """The undirected graph of the components ``names`` joined by ``links``
    (what reaches what, whatever the links' direction and type)."""
    import networkx as nx

    graph = nx.Graph()
    graph.add_nodes_from(names)
    graph.add_edges_from((link.src, link.dst) for link in links)
    return graph


def _check_connected(topology: Topology, where: str) -> None:
    # (a search over the links either way: every machine is checked as it loads, and
    # networkx's import would be most of a small command's start-up)
    neighbours: dict[str, list[str]] = {c.name: [] for c in topology.components}
    for link in topology.links:
        neighbours[link.src].append(link.dst)
        neighbours[link.dst].append(link.src)
    gpu_names = [g.name for g in topology.gpus]
    reached, frontier = {gpu_names[0]}, [gpu_names[0]]
    while frontier:
        for other in neighbours[frontier.pop()]:
            if other not in reached:
                reached.add(other)
                frontier.append(other)
    stranded = [g for g in gpu_names if g not in reached]
    if stranded:
        raise TopologyError(
            f"{where}: GPUs are disconnected: {', '.join(stranded)} cannot reach {gpu_names[0]} through any link"
        )


def _reject_unknown(data: Mapping, allowed: set[str], where: str) -> None:
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise TopologyError(f"{where}: unknown field {unknown[0]!r} (allowed: {', '.join(sorted(allowed))})")


def _component_from_dict(raw: Any, where: str) -> Component:
    if not isinstance(raw, Mapping):
        raise TopologyError(f"{where}: expected a mapping with 'name' and 'kind'")
    _reject_unknown(raw, _COMPONENT_FIELDS, where)
    for key in ("name", "kind"):
        if not isinstance(raw.get(key), str) or not raw.get(key):
            raise TopologyError(f"{where}.{key}: required string")
    for key in ("node", "rank", "rail"):
        value = raw.get(key)
        if key == "node" and value is None and "node" in raw:
            continue  # node: null marks fabric shared by all nodes
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            raise TopologyError(f"{where}.{key}: must be a non-negative integer, got {value!r}")
    gpudirect = raw.get("gpudirect", True)
    if not isinstance(gpudirect, bool):
        raise TopologyError(f"{where}.gpudirect: must be true or false")
    for capability in ("reduce", "multicast"):
        if not isinstance(raw.get(capability, False), bool):
            raise TopologyError(f"{where}.{capability}: must be true or false, got {raw[capability]!r}")
    return Component(
        name=raw["name"],
        kind=raw["kind"],
        node=raw.get("node", 0) if "node" in raw else 0,
        rank=raw.get("rank"),
        model=None if raw.get("model") is None else str(raw["model"]),
        gpudirect=gpudirect,
        rail=raw.get("rail"),
        reduce=raw.get("reduce", False),
        multicast=raw.get("multicast", False),
    )


def _link_from_raw(raw: Any, where: str) -> Link:
    if isinstance(raw, list):
        if len(raw) not in (3, 4):
            raise TopologyError(f"{where}: compact link must be [a, b, type] or [a, b, type, count], got {raw!r}")
        raw = {"ends": raw[:2], "type": raw[2], **({"count": raw[3]} if len(raw) == 4 else {})}
    if not isinstance(raw, Mapping):
        raise TopologyError(f"{where}: expected a list [a, b, type, count] or a mapping")
    _reject_unknown(raw, _LINK_FIELDS, where)
    ends = raw.get("ends")
    if not isinstance(ends, list) or len(ends) != 2 or not all(isinstance(e, str) for e in ends):
        raise TopologyError(f"{where}.ends: must be a list of two component names, got {ends!r}")
    if not isinstance(raw.get("type"), str):
        raise TopologyError(f"{where}.type: required string")
    directed = raw.get("directed", False)
    if not isinstance(directed, bool):
        raise TopologyError(f"{where}.directed: must be true or false")
    return Link(src=ends[0], dst=ends[1], type=raw["type"], count=raw.get("count", 1), directed=directed)


def load_topology_file(path: str | Path) -> Topology:
    """Read and validate one topology YAML file (:func:`simcoll.machines.load_topology`
    resolves names, generators and clusters too)."""
    return topology_from_dict(load_yaml(path, error=TopologyError), where=str(path))


def save_topology(topology: Topology, path: str | Path) -> None:
    """Write a topology as YAML that :func:`simcoll.machines.load_topology` reads
    back to an equal :class:`Topology`, atomically (a failed write leaves the
    old file).

    Every component is listed with its rank (GPUs) and node; links are written
    in the compact ``[a, b, type, count]`` form unless directed.

    Parameters
    ----------
    topology : Topology
        The topology, e.g. a generated one or a cluster.
    path : str or Path
        The file to write (``.yaml``).

    Raises
    ------
    TopologyError
        Naming the file when it cannot be written.

    Examples
    --------
    >>> import tempfile
    >>> from simcoll.machines import load_topology
    >>> cluster = load_topology("ndv2*2/rail")
    >>> path = Path(tempfile.mkdtemp()) / "cluster.yaml"
    >>> save_topology(cluster, path)
    >>> load_topology(str(path)) == cluster
    True
    """
    data = topology_to_dict(topology)
    parts = {key: data.pop(key) for key in ("components", "links")}
    parts["links"] = [
        entry if entry.get("directed") else [*entry["ends"], entry["type"], entry["count"]] for entry in parts["links"]
    ]
    # Header fields in block style; one component or link per line.
    text = "".join(
        yaml.safe_dump(part, sort_keys=False, allow_unicode=True, width=120, default_flow_style=flow)
        for part, flow in ((data, False), (parts, None))
    )
    header = f"# topology {topology.name}, written by simcoll.topology.save_topology\n"
    write_atomic(path, header + text, error=TopologyError)


def topology_to_dict(topology: Topology) -> dict[str, Any]:
    """The inverse of :func:`topology_from_dict` (explicit form, every GPU listed)."""
    comps = []
    for c in topology.components:
        entry: dict[str, Any] = {"name": c.name, "kind": c.kind}
        if c.node != 0:
            entry["node"] = c.node
        if c.rank is not None:
            entry["rank"] = c.rank
        if c.model is not None:
            entry["model"] = c.model
        if c.kind == "nic" and not c.gpudirect:
            entry["gpudirect"] = False
        if c.rail is not None:
            entry["rail"] = c.rail
        if c.reduce:
            entry["reduce"] = True
        if c.multicast:
            entry["multicast"] = True
        comps.append(entry)
    links = [
        {"ends": [lk.src, lk.dst], "type": lk.type, "count": lk.count, **({"directed": True} if lk.directed else {})}
        for lk in topology.links
    ]
    out: dict[str, Any] = {"name": topology.name}
    if topology.description:
        out["description"] = topology.description
    if topology.sources:
        out["sources"] = list(topology.sources)
    if topology.default_model:
        out["default_model"] = topology.default_model
    if topology.network_link != "ib":
        out["network_link"] = topology.network_link
    out["components"] = comps
    out["links"] = links
    return out

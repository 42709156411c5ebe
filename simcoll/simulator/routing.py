"""What a message crosses: a machine's resources and the routes over them.

A transfer from rank *s* to rank *d* crosses the resources of its route
(:meth:`simcoll.routes.Routes.hops`): every directed link bundle (capacity =
``count`` × the link type's bandwidth), switch ports, and, with host
staging, PCIe paths to the CPU and host memory. Where a route splits over
parallel planes (the six NVSwitches of a DGX-2), it uses each hop with the
weight the hop carries in a maximum flow of the route, so a flow alone on
the machine runs at exactly :meth:`Machine.route`'s bandwidth.

With ``contention`` the cost model's contention parameters shape the
routes (each from ``models/*.yaml``, with its source): switch-port
concurrency efficiency (``switches.<kind>.concurrency_efficiency``, TACCL
§3.2 Fig. 4) and port bandwidth caps (``port_bandwidth_Bps``), host memory
staging where a NIC lacks GPUDirect RDMA (``network.host_staging``, TACCL
§4.2) and GPU→NIC binding (``network.nic_binding``, HiCCL §2.3). PCIe sharing
needs no parameter: GPUs and NICs below one PCIe switch share its uplink
because the uplink is one resource.

In-switch reduction (:class:`~simcoll.algorithm.SwitchReduction`, a
:class:`SwitchPath` in place of the rank pair): its resources are the links
of each source's path to the switch and of the switch's path to each
destination (shortest paths entering no other GPU), plus, per switch port of
``c`` links, a *reduce port* of capacity ``c × reduce_Bps`` on the way in
(several sources) and a *multicast port* of ``c × multicast_Bps`` on the way
out (several destinations), from ``switches.<kind>`` in the model; these apply
with and without ``contention``. Its α is the largest α of the link types
crossed plus the latencies of the switches on the way.

How fast a flow goes over these resources is the other half:
:mod:`.network` (the fast flow sharing) and :mod:`.reference` (the rules).
Working a route out costs more than simulating it on large machines, so
what it leaves is kept per machine for every later run
(:func:`route_caches`), and a cluster's routes are mirrored node to node.

Why one module of ~900 lines: :class:`Routing` numbers resources in the
order working out routes creates them, and every later network of the
machine replays those creations (recipes, mirrored node to node, NIC
binding and host staging on the way); the numbering is what makes runs
bit-identical, so the computation and its replay stay in one class.
"""

from __future__ import annotations

import math
import re
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ..cost_model import SwitchParams
from ..errors import ModelError, TopologyError
from ..machines import Machine
from ..routes import RouteHop, route_shape, shape_flow_graph
from ..topology import FABRIC_LINK_TYPES

if TYPE_CHECKING:
    import networkx as nx

__all__ = ["Resource", "RouteCaches", "RouteIdTable", "Routing", "SwitchPath", "route_caches"]

_SWITCH_KINDS = ("nvswitch", "ib_switch", "pcie_switch", "root_complex", "switch")
#: Paths asked from one component before it gets a breadth-first tree (:meth:`Routing._shortest_path`).
_TREE_FROM = 8
_TREES_KEPT = 16  # trees kept (most recently used): sources are asked in runs, one rank's pairs after another


@dataclass
class RouteCaches:
    """What working out routes on one machine leaves for every later
    :class:`Routing` of it (:func:`route_caches`): per ``contention``
    setting, each rank pair's route recipe (its α, bandwidth, the resources
    its computation creates, in order, and those it uses); the max-flow
    shares of each route shape; shortest component paths; each node's NICs."""

    recipes: dict[bool, dict] = field(default_factory=lambda: {True: {}, False: {}})
    flow_shares: dict[tuple, list[float]] = field(default_factory=dict)
    component_paths: dict[tuple[str, str, bool], tuple[RouteHop, ...]] = field(default_factory=dict)
    nics_by_node: dict | None = None


_CACHES: dict[int, RouteCaches] = {}  # per live Machine, by identity (a Machine hashes by value)


def route_caches(machine: Machine) -> RouteCaches:
    """The :class:`RouteCaches` of ``machine``, kept while it lives (and not
    sent with it to another process: a worker builds its own, or inherits a
    prepared one by fork, :mod:`simcoll.worker_machine`).

    >>> from simcoll import load_machine
    >>> m = load_machine("ring:4")
    >>> route_caches(m) is route_caches(m), route_caches(m).recipes[True]
    (True, {})
    """
    caches = _CACHES.get(id(machine))
    if caches is None:
        caches = _CACHES[id(machine)] = RouteCaches()
        weakref.finalize(machine, _forget, id(machine), caches)
    return caches


def _forget(key: int, caches: RouteCaches) -> None:
    # a machine may be collected after another took its id (the cyclic collector runs late): drop its own
    if _CACHES.get(key) is caches:
        del _CACHES[key]


@dataclass(frozen=True)
class SwitchPath:
    """The route key of an in-switch reduction: ``switch`` combines what
    ``sources`` send and multicasts it to ``destinations`` (module docstring)."""

    switch: str
    sources: tuple[int, ...]
    destinations: tuple[int, ...]


class Resource:
    """One shared resource: a directed link bundle, a switch port or a host
    memory. ``flows``, ``rate``, ``seg_start`` and ``seg_flows`` are the state
    a :class:`~.network.FluidNetwork` keeps on it while it shares it."""

    __slots__ = ("id", "key", "name", "kind", "capacity_Bps", "switch", "flows", "rate", "seg_start", "seg_flows",
                 "_one_flow_Bps", "varies")  # fmt: skip

    def __init__(
        self,
        rid: int,
        name: str,
        kind: str,
        capacity_Bps: float,
        switch: SwitchParams | None = None,
        key: tuple | None = None,
    ):
        self.id = rid
        self.key = key
        self.name = name
        self.kind = kind
        self.capacity_Bps = capacity_Bps
        self.switch = switch
        self.flows: dict[int, Any] = {}  # the flows in flight on it (a FluidNetwork's)
        self.rate = 0.0
        self.seg_start = 0.0
        self.seg_flows = 0
        # asked for at every max-min solve: computed once
        self._one_flow_Bps = capacity_Bps * (switch.efficiency(1) if switch else 1.0)
        self.varies = switch is not None and bool(switch.concurrency_efficiency)  # with its number of flows

    def effective_capacity_Bps(self, flows: int) -> float:
        """Capacity with ``flows`` concurrent connections (TACCL Fig. 4)."""
        if self.switch is None or flows <= 1:
            return self._one_flow_Bps
        return self.capacity_Bps * self.switch.efficiency(flows)


class _CapacityTable:
    """Every resource's one-flow capacity, and whether its capacity varies with
    its flows (a switch's concurrency efficiency), by resource id: a
    component's capacities are then gathered by NumPy indexing
    (:meth:`.network._Sparse.max_min`), with a call per resource only where they vary."""

    __slots__ = ("one_flow_Bps", "varies")

    def __init__(self) -> None:
        self.one_flow_Bps = np.zeros(64, dtype=float)
        self.varies = np.zeros(64, dtype=bool)

    def add(self, resource: Resource) -> None:
        size = len(self.one_flow_Bps)
        if resource.id >= size:
            more = max(size, resource.id + 1 - size)
            self.one_flow_Bps = np.concatenate((self.one_flow_Bps, np.zeros(more)))
            self.varies = np.concatenate((self.varies, np.zeros(more, dtype=bool)))
        self.one_flow_Bps[resource.id] = resource.effective_capacity_Bps(1)
        self.varies[resource.id] = resource.varies


class Routing:
    """The resources of a machine and the routes over them (module
    docstring), created as routes are asked for: the same resources, with
    the same numbers, in every Routing of one machine that asks for the same
    routes in the same order.

    >>> from simcoll import load_machine
    >>> routing = Routing(load_machine("ring:4"))
    >>> alpha, bandwidth, ((link, weight),) = routing.route(0, 1)
    >>> link.name, bandwidth / 1e9, weight
    ('nvlink gpu0->gpu1', 25.0, 1.0)
    """

    def __init__(self, machine: Machine, *, contention: bool = True) -> None:
        self.machine = machine
        self.contention = contention
        self.resources: list[Resource] = []
        self._resource_ids: dict[tuple, int] = {}
        self._routes: dict[tuple[int, int], tuple[float, float, tuple[tuple[Resource, float], ...]]] = {}
        self._capacities = _CapacityTable()
        # Routes depend on the machine and on ``contention`` alone: each is worked out once per machine
        # (:meth:`route`), and another Routing of the machine replays the resources it creates.
        self._caches = caches = route_caches(machine)
        self._recipes: dict = caches.recipes[contention]
        self._shapes: dict[tuple, list[float]] = caches.flow_shares
        self._recording: list | None = None
        self._scratch: Routing | None = None  # works out the routes _mirrored_recipe maps
        self._swap_memo: dict[int, _SwapMemo] = {}  # per node swap (by id): creation calls and uses swapped
        self._topo = machine.topology
        self._kinds = {c.name: c.kind for c in machine.topology.components}
        self._path_queries: dict[tuple[str, bool], int] = {}
        self._nic_of: dict[tuple[int, str | None], str] = {}
        self._trees: dict[tuple[str, bool], tuple] = {}
        # per (rank, switch, inbound): the hops between them (switch_route asks again for every path through
        # the switch: 35,000 times for 8,192 answers for NVLS-Tree on 1,024 GPUs)
        self._switch_hops_of: dict[tuple[int, str, bool], tuple[RouteHop, ...]] = {}
        params = machine.model.network
        self.host_staging = bool(contention and params is not None and params.host_staging)
        self.nic_binding = params.nic_binding if (contention and params is not None) else None

    def _resource(self, key: tuple, name: str, kind: str, capacity_Bps: float, switch=None) -> Resource:
        if self._recording is not None:
            self._recording.append((key, name, kind, capacity_Bps, switch))
        rid = self._resource_ids.get(key)
        if rid is None:
            rid = self._resource_ids[key] = len(self.resources)
            self.resources.append(Resource(rid, name, kind, capacity_Bps, switch, key))
            self._capacities.add(self.resources[rid])
        return self.resources[rid]

    def resource_with_key(self, key: tuple) -> Resource:
        """The resource this network created under ``key`` (:attr:`Resource.key`)."""
        return self.resources[self._resource_ids[key]]

    def resource_calls(self) -> list[tuple]:
        """What created each resource so far, in order (:meth:`create_resources` replays it)."""
        return [(r.key, r.name, r.kind, r.capacity_Bps, r.switch) for r in self.resources]

    def create_resources(self, calls: list[tuple]) -> None:
        """Create the resources another network of the same machine created
        (its :meth:`resource_calls`), in the same order: on a fresh network
        they get the same numbers."""
        for call in calls:
            self._resource(*call)

    def _switch_params(self, component: str) -> SwitchParams | None:
        kind = self._kinds.get(component)
        if not self.contention or kind not in _SWITCH_KINDS:
            return None
        return self.machine.model.switches.get(kind)

    def _hop_resources(self, hop: RouteHop, weight: float) -> list[tuple[Resource, float]]:
        """The link bundle of ``hop`` and, for switch params with a port
        bandwidth, the switch's ingress/egress port."""
        link = self.machine.model.link(hop.type)
        sw_in, sw_out = self._switch_params(hop.dst), self._switch_params(hop.src)
        switch = sw_in or sw_out
        out = [
            (
                self._resource(
                    ("link", hop.src, hop.dst, hop.type),
                    f"{hop.type} {hop.src}->{hop.dst}",
                    hop.type,
                    hop.count * link.bandwidth_Bps,
                    switch,
                ),
                weight,
            )
        ]
        for params, sw, end, direction in ((sw_in, hop.dst, hop.src, "in"), (sw_out, hop.src, hop.dst, "out")):
            if params is not None and params.port_bandwidth_Bps is not None:
                name = f"{sw} port {direction} {'from' if direction == 'in' else 'to'} {end}"
                port = self._resource(
                    ("port", sw, direction, end), name, "switch_port", hop.count * params.port_bandwidth_Bps, params
                )
                out.append((port, weight))
        return out

    def route(self, src: int, dst: int) -> tuple[float, float, tuple[tuple[Resource, float], ...]]:
        """``(alpha_s, bandwidth_Bps, ((resource, weight), ...))`` of the route
        from rank ``src`` to rank ``dst``: α and the standalone bandwidth as in
        :meth:`Machine.route`, and the resources a flow on it uses (a flow at
        rate ``r`` puts ``r × weight`` on each)."""
        key = (src, dst)
        cached = self._routes.get(key)
        if cached is not None:
            return cached
        if isinstance(src, SwitchPath):
            info = self._routes[key] = self.switch_route(src)
            return info
        recipe = self._recipes.get(key)
        if recipe is None:
            recipe = self._mirrored_recipe(src, dst)
        if recipe is None:
            self._recording = created = []
            try:
                info = self._compute_route(src, dst)
            finally:
                self._recording = None
            alpha, bandwidth, resources = info
            self._recipes[key] = (alpha, bandwidth, tuple(created), tuple((r.key, w) for r, w in resources))
        else:
            alpha, bandwidth, created, used = recipe
            for call in created:  # the same resources, created in the same order, as working the route out
                self._resource(*call)
            ids = self._resource_ids
            info = (alpha, bandwidth, tuple((self.resources[ids[k]], w) for k, w in used))
        self._routes[key] = info
        return info

    def route_ids(self, src: int, dst: int) -> tuple[float, float, tuple[int, ...], tuple[float, ...]]:
        """:meth:`route` as ``(alpha_s, bandwidth_Bps, resource ids, weights)``,
        creating the same resources in the same order, without keeping the
        route: a check that reads every pair's route once (a million on
        1,024 GPUs: :func:`.symmetry.node_rotation`) need not hold them all."""
        info = self._routes.get((src, dst))
        recipe = None
        if info is None and not isinstance(src, SwitchPath):
            recipe = self._recipes.get((src, dst)) or self._mirrored_recipe(src, dst)
        if recipe is None:
            alpha, bandwidth, used = info if info is not None else self.route(src, dst)
            return alpha, bandwidth, tuple([r.id for r, _ in used]), tuple([w for _, w in used])
        alpha, bandwidth, created, used = recipe
        for call in created:  # as route() does
            self._resource(*call)
        ids = self._resource_ids
        return alpha, bandwidth, tuple([ids[k] for k, _ in used]), tuple([w for _, w in used])

    def route_id_table(self, src: np.ndarray, dst: np.ndarray) -> RouteIdTable | None:
        """:meth:`route_ids` of every rank pair (``src[i]``, ``dst[i]``) at
        once, creating the same resources in the same order as asking pair
        by pair; or None where it cannot be done at once (then ask pair by
        pair): this network holds routes already, a rank is outside the
        nodes, a source's node swapped with the first node is no symmetry of
        the topology, or a route is missing (asking for that pair names it).

        A pair whose source is in another node than the first has the route
        of its image in the first node, mirrored (:meth:`_mirrored_recipe`):
        here each image's route is worked out once, and each node's swap is
        applied once to each resource creation call it changes (those
        naming a component of the two nodes), not once per pair - a million
        pairs on 1,024 GPUs."""
        if self._routes or not len(src):
            return None
        topology, routes = self._topo, self.machine.routes
        n, nodes = topology.num_ranks, topology.nodes
        src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
        rank_node = [topology.gpu(r).node for r in range(n)]
        if not nodes or None in rank_node:
            return None
        position = {node: i for i, node in enumerate(nodes)}
        src_node = np.array([position[node] for node in rank_node], dtype=np.int64)[src]
        image_src, image_dst = src.copy(), dst.copy()
        swaps: dict[int, dict[str, str]] = {}  # per node position but the first's: its swap with the first
        for i in np.unique(src_node).tolist():
            if i == 0:
                continue
            rank = int(src[np.argmax(src_node == i)])
            swap, perm = routes.swap_to_first_node(rank), routes.first_node_permutation(rank)
            if swap is None or perm is None:
                return None
            swaps[i] = swap
            mask = src_node == i
            image_src[mask], image_dst[mask] = perm[src[mask]], perm[dst[mask]]
        images, image_of_pair = np.unique(image_src * n + image_dst, return_inverse=True)
        rows = self._image_rows([divmod(code, n) for code in images.tolist()])
        if rows is None:
            return None
        calls, alpha, bandwidth, created_rows, used_rows, weight_rows = rows
        maps = self._swap_maps(calls, swaps, nodes)
        created = _padded(created_rows)[image_of_pair]
        used = _padded(used_rows)[image_of_pair]
        weights = _padded(weight_rows, fill=0.0)[image_of_pair]
        # every pair's calls through its source node's map at once (maps[0]: the identity, also for a
        # node without a swap): one gather, not a pass over every pair per node
        node_maps = np.stack([maps.get(i, maps[0]) for i in range(len(nodes))])
        for table in (created, used):
            table[...] = np.where(table >= 0, node_maps[src_node[:, None], np.maximum(table, 0)], -1)
        # the resources, created in the order the pairs would create them one after another
        flat = created.ravel()
        made, first = np.unique(flat[flat >= 0], return_index=True)
        for c in made[np.argsort(first, kind="stable")].tolist():
            self._resource(*calls.calls[c])
        # a use names a resource by its key (any call with it): its number
        ids = self._resource_ids
        rid = np.fromiter((ids.get(call[0], -1) for call in calls.calls), dtype=np.int64, count=len(calls.calls))
        return RouteIdTable(
            alpha[image_of_pair], bandwidth[image_of_pair], np.where(used >= 0, rid[np.maximum(used, 0)], -1), weights
        )

    def _image_rows(self, images: list[tuple[int, int]]) -> tuple | None:
        """The routes of ``images`` (pairs from the first node, worked out in
        the scratch network): a :class:`_Calls` table of their resource
        creation calls, α and bandwidth per image, and per image its
        creation calls, the calls naming its resources, and their weights,
        as rows of numbers; None where one has no route."""
        calls = _Calls()
        alpha, bandwidth = np.empty(len(images)), np.empty(len(images))
        created_rows, used_rows, weight_rows = [], [], []
        for row, image in enumerate(images):
            recipe = self._image_recipe(image)
            if recipe is None:
                return None
            alpha[row], bandwidth[row], created, used = recipe
            created_rows.append([calls.add(call) for call in created])
            used_rows.append([calls.by_key[key] for key, _ in used])
            weight_rows.append([w for _, w in used])
        return calls, alpha, bandwidth, created_rows, used_rows, weight_rows

    def _swap_maps(self, calls: _Calls, swaps: dict[int, dict[str, str]], nodes: Sequence[int]) -> dict:
        """Per node position (0: the first node), an array mapping each of
        the images' creation calls to the call a pair from that node makes
        in its place (:meth:`_mirrored_recipe`); swapped calls join ``calls``.
        Only the calls a swap changes are looked at: those naming a component
        of the two nodes, or carrying one's prefix in their display name."""
        owner = {c.name: c.node for c in self._topo.components if c.node is not None}
        naming: dict[int, list[int]] = {}
        for c, (key, name, *_) in enumerate(calls.calls):
            named = {owner[part] for part in key if isinstance(part, str) and part in owner}
            named.update(int(m) for m in _NODE_PREFIX.findall(name))
            for node in named:
                naming.setdefault(node, []).append(c)
        maps = {0: np.arange(len(calls.calls), dtype=np.int64)}
        for i, swap in swaps.items():
            swapped = self._swap_memo_of(swap)
            mapped = maps[0].copy()
            for c in sorted(set(naming.get(nodes[0], ())) | set(naming.get(nodes[i], ()))):
                mapped[c] = calls.add(swapped.call(calls.calls[c]))
            maps[i] = mapped
        return maps

    def _image_recipe(self, image: tuple[int, int]) -> tuple | None:
        """The recipe of ``image`` (a pair from the first node), worked out
        in the scratch network if no network of the machine has yet; None
        where it has no route (the pair's own computation then says what is
        missing, naming the pair)."""
        recipe = self._recipes.get(image)
        if recipe is None:
            if self._scratch is None:
                self._scratch = Routing(self.machine, contention=self.contention)
            try:
                self._scratch.route(*image)
            except TopologyError:
                return None
            recipe = self._recipes[image]
        return recipe

    def _swap_memo_of(self, swap: dict[str, str]) -> _SwapMemo:
        """The calls and uses already swapped by node swap ``swap``."""
        memo = self._swap_memo.get(id(swap))
        if memo is None or memo.swap is not swap:
            memo = self._swap_memo[id(swap)] = _SwapMemo(swap)
        return memo

    def _mirrored_recipe(self, src: int, dst: int) -> tuple | None:
        """The route recipe of ``(src, dst)`` mapped from its image in the
        first node of a cluster, where swapping the two nodes is a symmetry
        of the topology (:meth:`simcoll.routes.Routes.swap_to_first_node`):
        the same α and bandwidth, and every resource the computation touches,
        in the same order, with the two nodes' names swapped. The image is
        worked out in a scratch network, so this one creates exactly the
        resources the pair's own computation would (tested). None where
        there is no such symmetry."""
        if isinstance(src, SwitchPath):
            return None
        routes = self.machine.routes
        swap = routes.swap_to_first_node(src)
        if swap is None:
            return None
        recipe = self._image_recipe(routes.image_in_first_node(src, dst))
        if recipe is None:
            return None
        alpha, bandwidth, created, used = recipe
        swapped = self._swap_memo_of(swap)
        recipe = (alpha, bandwidth, tuple(map(swapped.call, created)), tuple(map(swapped.use, used)))
        self._recipes[(src, dst)] = recipe
        return recipe

    def override_route(
        self, src: int, dst: int, route: tuple[float, float, tuple[tuple[Resource, float], ...]]
    ) -> None:
        """Make ``route`` (as :meth:`route` returns, over this network's
        resources) the route of rank pair ``(src, dst)``: a quotient by
        symmetry (:mod:`.symmetry`) routes a representative pair over the
        representatives of its resources' orbits."""
        self._routes[(src, dst)] = route

    def _compute_route(self, src: int, dst: int) -> tuple[float, float, tuple[tuple[Resource, float], ...]]:
        """:meth:`route` worked out from the topology and the model."""
        if src == dst:
            raise TopologyError(f"{self.machine.name}: a transfer from rank {src} to itself")
        route = self.machine.route(src, dst)
        if route is None:
            raise TopologyError(f"{self.machine.name}: no route from rank {src} to rank {dst}")
        hops = self.machine.routes.hops(src, dst)
        if self.nic_binding is not None and self._topo.node_of(src) != self._topo.node_of(dst):
            weighted = self._bound_paths(src, dst)
        else:
            weighted = self._weights(src, dst, hops, route.bandwidth_Bps)
        staged_nics = self._non_gpudirect_nics(src, weighted) if self.host_staging else []
        if staged_nics:
            weighted = self._staged(src, dst, weighted, staged_nics)
        merged: dict[int, tuple[Resource, float]] = {}
        for hop, w in weighted:
            for res, weight in self._hop_resources(hop, w):
                prev = merged.get(res.id)
                merged[res.id] = (res, max(weight, prev[1]) if prev else weight)
        for res, weight in self._staging_memory(staged_nics):
            merged[res.id] = (res, weight)
        resources = tuple(merged.values())
        bandwidth = route.bandwidth_Bps
        if self.nic_binding is not None or staged_nics or any(r.kind == "switch_port" for r, _ in resources):
            bandwidth = min(r.capacity_Bps / w for r, w in resources)
        return route.alpha_s, bandwidth, resources

    def switch_route(self, path: SwitchPath) -> tuple[float, float, tuple[tuple[Resource, float], ...]]:
        """``(alpha_s, bandwidth_Bps, ((resource, weight), ...))`` of an in-switch
        reduction (module docstring), as :meth:`route` gives for a rank pair."""
        sw = path.switch
        kind = self._kinds.get(sw)
        if kind is None:
            raise TopologyError(f"{self.machine.name}: no switch named {sw!r} for an in-switch reduction")
        params = self.machine.model.switches.get(kind)
        rate_of = {"reduce": None, "multicast": None}
        wanted = (("reduce", "reduce_Bps", path.sources), ("multicast", "multicast_Bps", path.destinations))
        for what, key, many in wanted:
            if len(many) > 1:
                rate = None if params is None else getattr(params, key)
                if rate is None and what == "reduce":
                    raise ModelError(
                        f"model {self.machine.model.name!r}: switches.{kind}.reduce_Bps is needed to reduce in {sw}"
                    )
                rate_of[what] = rate
        merged: dict[int, tuple[Resource, float]] = {}
        types: set[str] = set()
        latency = {"in": 0.0, "out": 0.0}
        for direction, ranks in (("in", path.sources), ("out", path.destinations)):
            for rank in ranks:
                hops = self._switch_hops(rank, sw, direction == "in")
                types.update(h.type for h in hops)
                between = sum(self.machine.model.switch_latency_s(self._kinds[h.dst]) for h in hops[:-1])
                latency[direction] = max(latency[direction], between)
                used = [res for hop in hops for res in self._hop_resources(hop, 1.0)]
                port_hop = hops[-1] if direction == "in" else hops[0]
                rate = rate_of["reduce" if direction == "in" else "multicast"]
                if rate is not None:
                    end = port_hop.src if direction == "in" else port_hop.dst
                    what = "reduce" if direction == "in" else "multicast"
                    port = self._resource(
                        (what, sw, end), f"{sw} {what} port {end}", f"switch_{what}", port_hop.count * rate, params
                    )
                    used.append((port, 1.0))
                for res, weight in used:
                    merged[res.id] = (res, weight)
        alpha = (
            max(self.machine.model.link(t).alpha_s for t in types)
            + latency["in"]
            + latency["out"]
            + self.machine.model.switch_latency_s(kind)
        )
        resources = tuple(merged.values())
        bandwidth = min(r.capacity_Bps / w for r, w in resources)
        return alpha, bandwidth, resources

    def _switch_hops(self, rank: int, sw: str, inbound: bool) -> tuple[RouteHop, ...]:
        """Path between rank ``rank``'s GPU and switch ``sw`` (towards it when
        ``inbound``): to a switch outside the nodes through the rank's NIC
        (``nic_binding``, else round-robin over the node's NICs, one per GPU
        on DGX nodes), to one inside a node along the shortest path."""
        key = (rank, sw, inbound)
        hops = self._switch_hops_of.get(key)
        if hops is None:
            hops = self._switch_hops_of[key] = tuple(self._find_switch_hops(rank, sw, inbound))
        return hops

    def _find_switch_hops(self, rank: int, sw: str, inbound: bool) -> list[RouteHop]:
        """:meth:`_switch_hops` worked out: for a rank outside the first node
        whose node swaps with the first (:meth:`Routes.swap_to_first_node`),
        its image's hops with the two nodes' names swapped back, as pair
        routes are mirrored (the same hops: tested), so that a cluster's
        switch paths are searched for in the first node alone (CollNet on
        1,024 GPUs: 10,240 paths between ranks and switches, each searched)."""
        swap = self.machine.routes.swap_to_first_node(rank)
        if swap is not None:
            image = int(self.machine.routes.first_node_permutation(rank)[rank])
            hops = self._switch_hops(image, swap.get(sw, sw), inbound)
            return [RouteHop(swap.get(h.src, h.src), swap.get(h.dst, h.dst), h.type, h.count) for h in hops]
        return self._switch_hops_computed(rank, sw, inbound)

    def _switch_hops_computed(self, rank: int, sw: str, inbound: bool) -> list[RouteHop]:
        """:meth:`_switch_hops` searched for in the topology."""
        gpu = self._topo.gpu(rank).name
        if self._topo.component(sw).node is None:
            binding = self.nic_binding
            try:
                self.nic_binding = binding or "round-robin"
                nic = self.nic_of(rank)
            finally:
                self.nic_binding = binding
            if inbound:
                return self._path(gpu, nic) + self._path(nic, sw, avoid_fabric=False)
            return self._path(sw, nic, avoid_fabric=False) + self._path(nic, gpu)
        return self._path(gpu, sw, avoid_fabric=False) if inbound else self._path(sw, gpu, avoid_fabric=False)

    def _weights(self, src: int, dst: int, hops, bandwidth_Bps: float) -> list[tuple[RouteHop, float]]:
        """Each hop's share of a maximum flow of the route DAG (1 on a chain).

        The flow is computed on the route's shape
        (:func:`~simcoll.routes.route_shape`), so routes of one shape (every
        GPU pair of a DGX-2, say) share it: one max-flow per shape instead of
        one per rank pair."""
        outs: dict[str, int] = {}
        for h in hops:
            outs[h.src] = outs.get(h.src, 0) + 1
        if all(n == 1 for n in outs.values()):
            return [(h, 1.0) for h in hops]
        shape, _ = route_shape(hops, self._topo.gpu(src).name, self._topo.gpu(dst).name)
        shares = self._shapes.get(shape)
        if shares is None:
            shares = self._shapes[shape] = self._max_flow_shares(shape)
        return [(h, w) for h, w in zip(hops, shares, strict=True) if w > 0]

    def _max_flow_shares(self, shape: tuple[tuple[int, int, str, int], ...]) -> list[float]:
        """Per hop of ``shape``, the share of a maximum flow from node 0 to
        node 1 it carries (parallel hops split their edge's flow by capacity)."""
        import networkx as nx

        graph, caps = shape_flow_graph(shape, lambda kind: self.machine.model.link(kind).bandwidth_Bps)
        value, flow = nx.maximum_flow(graph, 0, 1)
        return [flow[u][v] * c / graph[u][v]["capacity"] / value for (u, v, _, _), c in zip(shape, caps, strict=True)]

    # -- contention: NIC binding and host staging ------------------------------------------
    def _node_graph(self) -> nx.DiGraph:
        import networkx as nx

        if not hasattr(self, "_nodegraph"):
            g = nx.DiGraph()
            for h in _all_hops(self.machine):
                g.add_edge(h.src, h.dst, hop=h)
            self._nodegraph = g
        return self._nodegraph

    def _path(self, a: str, b: str, *, avoid_fabric: bool = True) -> list[RouteHop]:
        """Shortest hop path from component ``a`` to ``b`` that enters no other
        GPU (and, by default, uses no GPU fabric link)."""
        paths = self._caches.component_paths
        key = (a, b, avoid_fabric)
        if key not in paths:
            paths[key] = self._shortest_path(a, b, avoid_fabric)
        return list(paths[key])

    def _shortest_path(self, a: str, b: str, avoid_fabric: bool) -> tuple[RouteHop, ...]:
        # A source asked for many paths (a NIC, for every NIC it talks to: a million pairs on 1,024
        # GPUs) gets one breadth-first tree, which answers every target its shortest path is unique
        # to; a target with several shortest paths gets NetworkX's choice, as every path did before.
        import networkx as nx

        key = (a, avoid_fabric)
        tree = self._trees.pop(key, None)
        if tree is None:
            asked = self._path_queries[key] = self._path_queries.get(key, 0) + 1
            if asked >= _TREE_FROM:
                tree = self._bfs_tree(a, avoid_fabric)
        if tree is not None:
            self._trees[key] = tree  # most recently used last
            if len(self._trees) > _TREES_KEPT:
                del self._trees[next(iter(self._trees))]
            dist, pred, count = tree
            if b not in dist:
                raise TopologyError(f"{self.machine.name}: no path from {a} to {b} for the network model")
            if count[b] == 1:
                hops = []
                while b != a:
                    hops.append(pred[b])
                    b = pred[b].src
                return tuple(reversed(hops))
        g = self._node_graph()

        def ok(u, v, data):
            if avoid_fabric and data["hop"].type in FABRIC_LINK_TYPES:
                return None
            if v != b and self._kinds.get(v) == "gpu":
                return None
            return 1

        try:
            nodes = nx.shortest_path(g, a, b, weight=ok)
        except nx.NetworkXNoPath:
            raise TopologyError(f"{self.machine.name}: no path from {a} to {b} for the network model") from None
        return tuple(g[u][v]["hop"] for u, v in zip(nodes, nodes[1:], strict=False))

    def _bfs_tree(self, a: str, avoid_fabric: bool) -> tuple[dict[str, int], dict[str, RouteHop], dict[str, int]]:
        """Hop distances from ``a`` over the links :meth:`_shortest_path` may
        use (entering no GPU but the target's), the hop into each component on
        one shortest path, and how many shortest paths reach it (capped at 2)."""
        g = self._node_graph()
        dist, pred, count = {a: 0}, {}, {a: 1}
        frontier = [a]
        while frontier:
            nxt = []
            for u in frontier:
                if u != a and self._kinds.get(u) == "gpu":
                    continue  # GPUs end paths; they do not forward
                du, cu = dist[u] + 1, count[u]
                for v, data in g.succ[u].items():
                    hop = data["hop"]
                    if avoid_fabric and hop.type in FABRIC_LINK_TYPES:
                        continue
                    dv = dist.get(v)
                    if dv is None:
                        dist[v], pred[v], count[v] = du, hop, cu
                        nxt.append(v)
                    elif dv == du:
                        count[v] = min(2, count[v] + cu)
            frontier = nxt
        return dist, pred, count

    def nic_of(self, rank: int) -> str:
        """The NIC rank ``rank`` uses under the model's ``nic_binding`` (HiCCL
        §2.3): packed ⌊g·N/G⌋, round-robin g mod N, bijective g (the first of
        its own where a GPU has several: :meth:`nics_of`).

        A node with fewer NICs than GPUs under ``bijective`` (a fabric what-if
        such as ``fat-tree:nics=2`` on a model written for one NIC per GPU)
        binds packed: NICs keep their place in the node (nic0, nic4 of eight),
        so packed gives each GPU the NIC of its own half, the nearest one.
        """
        key = (rank, self.nic_binding)
        nic = self._nic_of.get(key)
        if nic is None:
            nic = self._nic_of[key] = self._bound_nic(rank)
        return nic

    def _bound_nic(self, rank: int) -> str:
        return self.nics_of(rank)[0]

    def nics_of(self, rank: int) -> tuple[str, ...]:
        """The NICs rank ``rank`` sends and receives through: :meth:`nic_of`'s
        one, or under ``bijective`` on a node with ``k`` >= 2 times as many
        NICs as GPUs, GPU ``g``'s own ``k`` (NICs ``g·k`` .. ``g·k + k - 1``, as
        AWS p5 gives each H100 four), its traffic spread evenly over them."""
        node = self._topo.node_of(rank)
        ranks = self._topo.ranks_of_node(node)
        nics = self._nics_of_node(node)
        if not nics:
            raise TopologyError(f"{self.machine.name}: node {node} has no NIC for nic_binding")
        g, n_gpus, n_nics = ranks.index(rank), len(ranks), len(nics)
        if self.nic_binding == "round-robin":
            return (nics[g % n_nics],)
        if self.nic_binding == "packed" or n_nics < n_gpus:
            return (nics[g * n_nics // n_gpus],)
        if n_nics % n_gpus == 0:
            k = n_nics // n_gpus
            return tuple(nics[g * k : (g + 1) * k])
        return (nics[g],)

    def _nics_of_node(self, node) -> list[str]:
        by_node = self._caches.nics_by_node
        if by_node is None:
            by_node = {}
            for c in self._topo.components:
                if c.kind == "nic":
                    by_node.setdefault(c.node, []).append(c.name)
            for names in by_node.values():
                names.sort(key=_natural_key)
            self._caches.nics_by_node = by_node
        return by_node.get(node, [])

    def _bound_paths(self, src: int, dst: int) -> list[tuple[RouteHop, float]]:
        """The hops from ``src`` through its bound NICs to ``dst``'s, each with
        its share of the flow: one path per pair of the two ends' NICs taken
        in turn (the i-th with the i-th, :meth:`nics_of`), the flow split
        evenly over the paths, a hop on several paths carrying their shares."""
        mine, theirs = self.nics_of(src), self.nics_of(dst)
        s, d = self._topo.gpu(src).name, self._topo.gpu(dst).name
        count = max(len(mine), len(theirs))
        share: dict[RouteHop, float] = {}
        for i in range(count):
            a, b = mine[i % len(mine)], theirs[i % len(theirs)]
            for hop in self._gpu_nic_path(s, a) + self._path(a, b, avoid_fabric=False) + self._gpu_nic_path(b, d):
                share[hop] = share.get(hop, 0.0) + 1.0 / count
        return list(share.items())

    def _gpu_nic_path(self, a: str, b: str) -> list[RouteHop]:
        """Path between a GPU and its bound NIC: over PCIe when there is one,
        else through the GPU fabric and the GPU next to the NIC, as NCCL's PXN
        forwards traffic to a NIC on another PCIe root (NCCL 2.12 release
        notes; a node left with fewer NICs by a fabric what-if)."""
        import networkx as nx

        try:
            return self._path(a, b)
        except TopologyError:
            g = self._node_graph()
            try:
                nodes = nx.shortest_path(g, a, b)
            except nx.NetworkXNoPath:
                raise TopologyError(f"{self.machine.name}: no path from {a} to {b} for the network model") from None
            return [g[u][v]["hop"] for u, v in zip(nodes, nodes[1:], strict=False)]

    def _non_gpudirect_nics(self, src: int, weighted) -> list[tuple[str, float, bool]]:
        """NICs without GPUDirect RDMA on the route: (name, share of the flow
        through it, whether it is on the sending node)."""
        comps = {c.name: c for c in self._topo.components}
        through: dict[str, float] = {}
        for hop, w in weighted:
            c = comps[hop.dst]
            if c.kind == "nic" and not c.gpudirect:
                through[c.name] = through.get(c.name, 0.0) + w
        src_node = self._topo.node_of(src)
        return [(nic, w, comps[nic].node == src_node) for nic, w in through.items()]

    def _host_cpu(self, nic: str) -> str:
        import networkx as nx

        g = self._node_graph()
        node = next(c.node for c in self._topo.components if c.name == nic)
        cpus = [c.name for c in self._topo.components if c.kind == "cpu" and c.node == node]
        if not cpus:
            raise TopologyError(
                f"{self.machine.name}: NIC {nic} lacks GPUDirect but its node has no CPU to stage through"
            )
        und = g.to_undirected(as_view=True)
        lengths = nx.single_source_shortest_path_length(und, nic)
        return min(cpus, key=lambda c: (lengths.get(c, math.inf), _natural_key(c)))

    def _staged(self, src: int, dst: int, weighted, nics) -> list[tuple[RouteHop, float]]:
        """Host staging (TACCL §4.2): traffic through a NIC without GPUDirect
        goes GPU → CPU (host memory) → NIC on the way out, NIC → CPU → GPU on
        the way in, adding those PCIe hops to the route."""
        out = list(weighted)
        s, d = self._topo.gpu(src).name, self._topo.gpu(dst).name
        for nic, w, sending in nics:
            cpu = self._host_cpu(nic)
            path = self._path(s, cpu) + self._path(cpu, nic) if sending else self._path(nic, cpu) + self._path(cpu, d)
            out += [(h, w) for h in path]
        return out

    def _staging_memory(self, nics) -> list[tuple[Resource, float]]:
        bandwidth = self.machine.model.host_memory_bandwidth_Bps
        if bandwidth is None or not nics:
            return []
        out = []
        for nic, w, _sending in nics:
            cpu = self._host_cpu(nic)
            res = self._resource(("memory", cpu), f"host memory {cpu}", "host_memory", bandwidth)
            out.append((res, 2.0 * w))  # every byte is written, then read
        return out

    def resource_names(self) -> list[str]:
        return [r.name for r in self.resources]


@dataclass(frozen=True)
class RouteIdTable:
    """Routes of many rank pairs (:meth:`Routing.route_id_table`), a
    row per pair: α, the standalone bandwidth, and the resources' numbers
    and weights in route order (rows padded with -1 and 0.0)."""

    alpha_s: np.ndarray
    bandwidth_Bps: np.ndarray
    ids: np.ndarray
    weights: np.ndarray

    @classmethod
    def from_rows(cls, rows: Sequence[tuple[float, float, tuple[int, ...], tuple[float, ...]]]) -> RouteIdTable:
        """The table of :meth:`Routing.route_ids` rows."""
        return cls(
            np.array([r[0] for r in rows], dtype=np.float64),
            np.array([r[1] for r in rows], dtype=np.float64),
            _padded([r[2] for r in rows]),
            _padded([r[3] for r in rows], fill=0.0),
        )


class _SwapMemo:
    """A node swap's creation calls and (resource key, weight) uses, each
    swapped once (:meth:`Routing._mirrored_recipe`): a node's pairs
    touch the same few resources again and again, and the swapped tuples
    are shared by every recipe that has them (the machine keeps a recipe
    per pair: a million on 1,024 GPUs)."""

    def __init__(self, swap: dict[str, str]) -> None:
        self.swap = swap
        self.rename = _node_renaming(swap)
        self.calls: dict[tuple, tuple] = {}
        self.uses: dict[tuple, tuple] = {}

    def call(self, call: tuple) -> tuple:
        """``call`` (key, display name, kind, capacity, switch) with the two nodes swapped."""
        twin = self.calls.get(call)
        if twin is None:
            key, name, kind, cap, sw = call
            twin = self.calls[call] = (_swapped(key, self.swap), self.rename(name), kind, cap, sw)
        return twin

    def use(self, use: tuple) -> tuple:
        """``use`` (resource key, weight) with the two nodes swapped."""
        twin = self.uses.get(use)
        if twin is None:
            twin = self.uses[use] = (_swapped(use[0], self.swap), use[1])
        return twin


class _Calls:
    """Resource creation calls, each numbered once (:meth:`Routing.route_id_table`)."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.number: dict[tuple, int] = {}
        self.by_key: dict[tuple, int] = {}  # a resource key: the first call that creates it

    def add(self, call: tuple) -> int:
        """The number of ``call``, numbering it if new."""
        c = self.number.get(call)
        if c is None:
            c = self.number[call] = len(self.calls)
            self.calls.append(call)
            self.by_key.setdefault(call[0], c)
        return c


_NODE_PREFIX = re.compile(r"(?<![\w.])n(\d+)\.")  # a node's components' names start n<node>. (_node_renaming)


def _padded(rows: list[list], fill=-1) -> np.ndarray:
    """``rows`` as a 2-D array, short rows padded with ``fill``."""
    width = max((len(r) for r in rows), default=0)
    out = np.full((len(rows), width), fill, dtype=np.float64 if isinstance(fill, float) else np.int64)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


def _swapped(key: tuple, swap: dict[str, str]) -> tuple:
    """A resource key with its component names swapped (:meth:`Routing._mirrored_recipe`)."""
    return tuple(swap.get(part, part) if isinstance(part, str) else part for part in key)


def _node_renaming(swap: dict[str, str]) -> Callable[[str], str]:
    """A function that swaps the two nodes' name prefixes (``n<a>.``, ``n<b>.``)
    wherever a component name starts in a resource's display name."""
    a, b = next((x, y) for x, y in swap.items() if x != y)
    first, second = a.split(".", 1)[0], b.split(".", 1)[0]
    other = {first: second, second: first}
    pattern = re.compile(rf"(?<![\w.])({re.escape(first)}|{re.escape(second)})\.")
    return lambda name: pattern.sub(lambda m: other[m[1]] + ".", name)


def _all_hops(machine: Machine) -> list[RouteHop]:
    from ..topology import directed_pairs

    merged: dict[tuple[str, str, str], int] = {}
    for link in machine.topology.links:
        for a, b in directed_pairs(link):
            merged[(a, b, link.type)] = merged.get((a, b, link.type), 0) + link.count
    # one hop per (a, b): the fastest type; parallel types between two components are rare
    best: dict[tuple[str, str], RouteHop] = {}
    for (a, b, kind), count in merged.items():
        hop = RouteHop(a, b, kind, count)
        cap = count * machine.model.link(kind).bandwidth_Bps
        old = best.get((a, b))
        if old is None or cap > old.count * machine.model.link(old.type).bandwidth_Bps:
            best[(a, b)] = hop
    return list(best.values())


def _natural_key(name: str) -> tuple:
    import re

    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))

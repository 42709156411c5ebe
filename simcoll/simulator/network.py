"""The simulator's network: a fluid (flow-level) model on SimPy.

A transfer from rank *s* to rank *d* becomes a **flow** over the resources of
its route (:meth:`simcoll.routes.Routes.hops`): every directed link bundle
(capacity = ``count`` × the link type's bandwidth), switch ports, and, with
host staging, PCIe paths to the CPU and host memory. Where a route splits over
parallel planes (the six NVSwitches of a DGX-2), the flow uses each hop with
the weight the hop carries in a maximum flow of the route, so a flow alone on
the machine runs at exactly :meth:`Machine.route`'s bandwidth.

Sharing is max-min fair (progressive filling with per-hop weights), recomputed
at every flow start and end over the connected component of flows that share
resources with the changed one, so unrelated traffic costs nothing (and not
at all where each flow that starts takes the place of one that ended on the
same route at that instant: the solution in force still holds). Where no
utilisation is recorded, a resource that can never limit a rate - another
resource of every route through it is slower and carries it at least as
heavily - is left out of the max-min (:class:`_Dominance`). A flow is
also capped by ``cap_Bps`` (what its executor can drive) and carries
``size / efficiency`` wire bytes (protocol efficiency, e.g. LL = 0.5).

Timing of one message, as in :func:`simcoll.analytic.critical_path_time_s`: the
bytes flow first (they occupy the route), then the last byte lands ``α`` later
(``α`` from :meth:`Machine.route`). Alone on its route a message therefore
takes ``n / B`` on the wire and arrives at ``α + n / B``.

Two regimes (``contention``):

- ``False`` — the ideal α-β network: every flow runs alone at its route's
  bandwidth, nothing is shared and no contention parameter applies. The
  simulator then reproduces the analytic α-β time.
- ``True`` (default) — max-min sharing plus the contention parameters of the
  cost model (each from ``models/*.yaml``, with its source):
  switch-port concurrency efficiency (``switches.<kind>.concurrency_efficiency``,
  TACCL §3.2 Fig. 4), switch port bandwidth caps (``port_bandwidth_Bps``), host
  memory staging where a NIC lacks GPUDirect RDMA (``network.host_staging``,
  TACCL §4.2) and GPU→NIC binding (``network.nic_binding``, HiCCL §2.3).
  PCIe sharing needs no parameter: GPUs and NICs below one PCIe switch share
  its uplink because the uplink is one resource.

In-switch reduction (:class:`~simcoll.algorithm.SwitchReduction`, a
:class:`SwitchPath` in place of the rank pair): one flow streams the chunk
from every source into the switch and the result out to every destination
at once, as NVLink SHARP and IB SHARP pipeline it. Its resources are the links
of each source's path to the switch and of the switch's path to each
destination (shortest paths entering no other GPU), plus, per switch port of
``c`` links, a *reduce port* of capacity ``c × reduce_Bps`` on the way in
(several sources) and a *multicast port* of ``c × multicast_Bps`` on the way
out (several destinations), from ``switches.<kind>`` in the model; these apply
with and without ``contention``. Alone on the machine it therefore takes
``α + n / min over its resources (capacity)``, α being the largest α of the
link types crossed plus the latencies of the switches on the way.
"""

from __future__ import annotations

import itertools
import math
import operator
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import networkx as nx
import numpy as np
import simpy

from ..arrays import ragged_indices
from ..cost_model import SwitchParams
from ..errors import ModelError, TopologyError
from ..machines import Machine
from ..routes import RouteHop, route_shape, shape_flow_graph
from ..topology import FABRIC_LINK_TYPES
from ..units import check_size_bytes
from .results import Timeline, Utilisation

_SWITCH_KINDS = ("nvswitch", "ib_switch", "pcie_switch", "root_complex", "switch")
_REL_TOL = 1e-12
_NUMPY_FROM = 24  # components with this many flows use the vectorised max-min
_SOLVED_MAX_FLOWS = 1_000_000  # flows over all sharing patterns a network remembers (tens of MB at most)
#: What a network keeps in :attr:`Machine.derived <simcoll.machines.Machine.derived>`, for every
#: later network of the machine: routes per ``contention`` setting, max-flow shares per route
#: shape, shortest component paths, each node's NICs.
_ROUTES_KEY, _FLOW_SHARES_KEY, _PATHS_KEY, _NICS_KEY = "network routes", "flow shares", "component paths", "nics"
#: Paths asked from one component before it gets a breadth-first tree (:meth:`FluidNetwork._shortest_path`).
_TREE_FROM = 8
_TREES_KEPT = 16  # trees kept (most recently used): sources are asked in runs, one rank's pairs after another
#: A flow's place among a component's flows (:meth:`FluidNetwork._recompute`): by route, then by id.
_ORDER = operator.attrgetter("order")
# flows in a pattern worth remembering: larger ones rarely recur and cost more to key (NVLS-Tree on
# 1,024 GPUs at 1 GB: 76 % of components under 24 flows recur, 8 % of those of 24-100, 1 % above)
_REMEMBER_UP_TO = 96


@dataclass(frozen=True)
class SwitchPath:
    """The route key of an in-switch reduction: ``switch`` combines what
    ``sources`` send and multicasts it to ``destinations`` (module docstring)."""

    switch: str
    sources: tuple[int, ...]
    destinations: tuple[int, ...]


class Resource:
    """One shared resource: a directed link bundle, a switch port or a host memory."""

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
        self.flows: dict[int, Flow] = {}
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


class _Uses:
    """A route's resources as the max-min solvers read them: by id (the
    component search), and their ids and weights as arrays."""

    __slots__ = ("by_id", "ids", "weights", "index", "order")

    def __init__(self, resources: Sequence[tuple[Resource, float]], order: int = -1):
        self.index = -1  # its place in the network's _UsesTable, once added
        self.order = order  # the network's count of routes before this one (the order of a component's flows)
        merged: dict[int, list] = {}
        for r, w in resources:  # a resource listed twice carries both weights (added in order)
            if r.id in merged:
                merged[r.id][1] += w
            else:
                merged[r.id] = [r, 0.0 + w]
        self.by_id = {rid: r for rid, (r, _) in merged.items()}
        self.ids = np.array(list(merged), dtype=np.int64)
        self.weights = np.array([w for _, w in merged.values()], dtype=float)


class _UsesTable:
    """Every route's resource ids and weights of one network end to end, with
    each route's offset and length (compressed sparse rows): a component's
    (flow, resource) entries are then gathered by NumPy indexing
    (:class:`_Sparse`) rather than one small array per flow, which dominated
    components of thousands of flows (HiCCL). Arrays grow by doubling."""

    __slots__ = ("count", "offsets", "lengths", "ids", "weights", "_entries")

    def __init__(self) -> None:
        self.count = 0
        self._entries = 0
        self.offsets = np.zeros(64, dtype=np.int64)
        self.lengths = np.zeros(64, dtype=np.int64)
        self.ids = np.zeros(256, dtype=np.int64)
        self.weights = np.zeros(256, dtype=float)

    def add(self, uses: _Uses) -> _Uses:
        n, start = len(uses.ids), self._entries
        if self.count == len(self.offsets):
            self.offsets = np.resize(self.offsets, 2 * self.count)
            self.lengths = np.resize(self.lengths, 2 * self.count)
        if start + n > len(self.ids):
            grown = max(2 * len(self.ids), start + n)
            self.ids, self.weights = np.resize(self.ids, grown), np.resize(self.weights, grown)
        self.ids[start : start + n] = uses.ids
        self.weights[start : start + n] = uses.weights
        self.offsets[self.count], self.lengths[self.count] = start, n
        uses.index = self.count
        self.count += 1
        self._entries += n
        return uses


class _CapacityTable:
    """Every resource's one-flow capacity, and whether its capacity varies with
    its flows (a switch's concurrency efficiency), by resource id: a
    component's capacities are then gathered by NumPy indexing
    (:meth:`_Sparse.max_min`), with a call per resource only where they vary."""

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


class _Dominance:
    """Which resources of a network's routes the max-min may leave out.

    Resource A is *dominated* by resource B when every route through A so
    far also passes B with at least A's weight, neither capacity varies
    with the flows, and A's capacity exceeds B's by a factor ``1 + margin``:
    B then carries every flow A does, at least as heavily, so in
    progressive filling B fills first - A's fill level is at least
    ``1 + margin`` times B's - and A is never a bottleneck. Leaving A out
    changes no rate: the level of each round is a minimum A never attains,
    the resources that fill are the same, and every other resource sums
    the same flows in the same order (a component's flows are ordered by
    route and id, whatever resources led to them). Routes arrive one rank pair at a
    time; a route through A that lacks such a B ends A's domination, and
    the pairs that left A out get it back (:meth:`FluidNetwork._restore`).

    On a DGX H100 an inter-node route passes six resources, the four PCIe
    hops (54 GB/s) dominated by the two InfiniBand ones (47 GB/s).
    """

    __slots__ = ("candidates", "left_out")

    margin = 1e-6

    def __init__(self) -> None:
        self.candidates: dict[int, set[int]] = {}  # per resource: the resources dominating it on every route
        self.left_out: dict[int, set[tuple[int, int]]] = {}  # per dominated resource: the pairs leaving it out

    def kept(
        self, resources: Sequence[tuple[Resource, float]], pair: tuple[int, int]
    ) -> tuple[tuple[tuple[Resource, float], ...], set[tuple[int, int]]]:
        """``resources`` (a route, in order) without those dominated, after
        counting this route; and the pairs whose routes left out a resource
        this route ends the domination of."""
        weight: dict[int, float] = {}
        by_id: dict[int, Resource] = {}
        for r, w in resources:
            weight[r.id] = weight.get(r.id, 0.0) + w
            by_id[r.id] = r
        candidates, firm = self.candidates, None
        revoked: set[tuple[int, int]] = set()
        dominated = set()
        for rid, r in by_id.items():
            w = weight[rid]
            known = candidates.get(rid)
            if known is None:  # a resource's first route: every slower fixed resource as heavily used
                if r.varies:
                    known = set()
                else:
                    if firm is None:
                        firm = [(o.id, o._one_flow_Bps * (1 + self.margin)) for o in by_id.values() if not o.varies]
                    cap = r._one_flow_Bps
                    known = {other for other, least in firm if other != rid and cap >= least and weight[other] >= w}
                candidates[rid] = known
            elif known:  # capacities are fixed: only presence and weight can fail on a later route
                gone = [other for other in known if weight.get(other, -1.0) < w]
                if gone:
                    known.difference_update(gone)
                    if not known:
                        revoked.update(self.left_out.pop(rid, ()))
            if known:
                dominated.add(rid)
                self.left_out.setdefault(rid, set()).add(pair)  # (a restored route is counted again)
        return tuple((r, w) for r, w in resources if r.id not in dominated), revoked


class Flow:
    """One message in flight (internal; see :meth:`FluidNetwork.start_flow`)."""

    __slots__ = (
        "id",
        "src",
        "dst",
        "res",
        "uses",
        "bound",
        "remaining",
        "rate",
        "t_last",
        "alpha_s",
        "after_s",
        "size_bytes",
        "start_s",
        "wire_end_s",
        "on_sent",
        "on_arrival",
        "kind",
        "track",
        "label",
        "chunk",
        "tag",
        "done_event",
        "pattern",
        "order",
    )


class TransferEvent(simpy.Event):
    """The event :meth:`FluidNetwork.transfer` returns. It succeeds (value: the
    arrival time) when the last byte has arrived; :attr:`sent` succeeds when
    the last byte has left the wire (the sender's connection is free again)."""

    def __init__(self, env: simpy.Environment):
        super().__init__(env)
        self._sent: simpy.Event | None = None
        self._sent_at: float | None = None
        self.start_s: float = env.now
        self.wire_end_s: float | None = None

    @property
    def sent(self) -> simpy.Event:
        if self._sent is None:
            self._sent = simpy.Event(self.env)
            if self._sent_at is not None:
                self._sent.succeed(self._sent_at)
        return self._sent

    def _mark_sent(self, when: float) -> None:
        self._sent_at = when
        self.wire_end_s = when
        if self._sent is not None:
            self._sent.succeed(when)


class FluidNetwork:
    """Flows over a machine's resources (module docstring).

    >>> import simpy
    >>> from simcoll import load_machine
    >>> env = simpy.Environment()
    >>> net = FluidNetwork(env, load_machine("ring:4"), contention=True)
    >>> done = net.transfer(0, 1, 25e6)       # 25 MB over one 25 GB/s NVLink
    >>> env.run()
    >>> round(done.value * 1e3, 6)            # 1 ms + α (0.7 µs)
    1.0007
    """

    def __init__(
        self,
        env: simpy.Environment,
        machine: Machine,
        *,
        contention: bool = True,
        record_utilisation: bool = True,
        record_timeline: bool = True,
        timeline: Timeline | None = None,
    ):
        self.env = env
        self.machine = machine
        self.contention = contention
        self.record_utilisation = record_utilisation
        self.record_timeline = record_timeline
        self.timeline = timeline if timeline is not None else Timeline()
        self.utilisation = Utilisation()
        self.resources: list[Resource] = []
        self._resource_ids: dict[tuple, int] = {}
        self._routes: dict[tuple[int, int], tuple[float, float, tuple[tuple[Resource, float], ...]]] = {}
        # per rank pair: α, bandwidth, resources, rate alone, and the resources as the max-min reads them
        self._fast: dict[tuple[int, int], tuple[float, float, tuple[tuple[Resource, float], ...], float, _Uses]] = {}
        self._uses_table = _UsesTable()
        self._capacities = _CapacityTable()
        # dominated resources are left out of routes where no utilisation is recorded (:meth:`_route_info`)
        self._dominance = _Dominance() if contention and not record_utilisation else None
        # Routes depend on the machine and on ``contention`` alone: each is worked out once per machine
        # (:meth:`route`), and another network of the machine replays the resources it creates.
        self._recipes: dict = machine.derived.setdefault((_ROUTES_KEY, contention), {})
        self._shapes: dict[tuple, list[float]] = machine.derived.setdefault(_FLOW_SHARES_KEY, {})
        self._recording: list | None = None
        self._scratch: FluidNetwork | None = None  # works out the routes _mirrored_recipe maps
        self._swap_memo: dict[int, _SwapMemo] = {}  # per node swap (by id): creation calls and uses swapped
        self._solved: dict[tuple, tuple[float, ...]] = {}  # max-min solutions by sharing pattern (_recompute)
        self._solved_flows = 0
        self.max_sharing = 1
        self._tracks: dict[tuple[int, int], str] = {}
        self._dirty: dict[int, Resource] = {}
        self._flush_scheduled = False
        # flows that left shared resources, and flows that joined them, since the last recomputation
        # (:meth:`_flush`): (route, bound, rate) of each that left, and the joining flows
        self._left: list[tuple[_Uses, float, float]] = []
        self._joined: list[Flow] = []
        self.handovers = 0  # recomputations found to be handovers and skipped (:meth:`_flush`)
        self._next_flow = 0
        self.active: dict[int, Flow] = {}
        self.transfers = 0
        self.recomputes = 0
        self.recomputes_remembered = 0  # answered from the memory of sharing patterns
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

    # -- resources and routes --------------------------------------------------------------
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
                self._scratch = FluidNetwork(
                    simpy.Environment(),
                    self.machine,
                    contention=self.contention,
                    record_utilisation=False,
                    record_timeline=False,
                )
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
        self._fast.pop((src, dst), None)

    def _compute_route(self, src: int, dst: int) -> tuple[float, float, tuple[tuple[Resource, float], ...]]:
        """:meth:`route` worked out from the topology and the model."""
        if src == dst:
            raise TopologyError(f"{self.machine.name}: a transfer from rank {src} to itself")
        route = self.machine.route(src, dst)
        if route is None:
            raise TopologyError(f"{self.machine.name}: no route from rank {src} to rank {dst}")
        hops = self.machine.routes.hops(src, dst)
        if self.nic_binding is not None and self._topo.node_of(src) != self._topo.node_of(dst):
            weighted = [(h, 1.0) for h in self._bound_path(src, dst)]
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
        graph, caps = shape_flow_graph(shape, lambda kind: self.machine.model.link(kind).bandwidth_Bps)
        value, flow = nx.maximum_flow(graph, 0, 1)
        return [flow[u][v] * c / graph[u][v]["capacity"] / value for (u, v, _, _), c in zip(shape, caps, strict=True)]

    # -- contention: NIC binding and host staging ------------------------------------------
    def _node_graph(self) -> nx.DiGraph:
        if not hasattr(self, "_nodegraph"):
            g = nx.DiGraph()
            for h in _all_hops(self.machine):
                g.add_edge(h.src, h.dst, hop=h)
            self._nodegraph = g
        return self._nodegraph

    def _path(self, a: str, b: str, *, avoid_fabric: bool = True) -> list[RouteHop]:
        """Shortest hop path from component ``a`` to ``b`` that enters no other
        GPU (and, by default, uses no GPU fabric link)."""
        paths = self.machine.derived.setdefault(_PATHS_KEY, {})
        key = (a, b, avoid_fabric)
        if key not in paths:
            paths[key] = self._shortest_path(a, b, avoid_fabric)
        return list(paths[key])

    def _shortest_path(self, a: str, b: str, avoid_fabric: bool) -> tuple[RouteHop, ...]:
        # A source asked for many paths (a NIC, for every NIC it talks to: a million pairs on 1,024
        # GPUs) gets one breadth-first tree, which answers every target its shortest path is unique
        # to; a target with several shortest paths gets NetworkX's choice, as every path did before.
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
        §2.3): packed ⌊g·N/G⌋, round-robin g mod N, bijective g.

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
        node = self._topo.node_of(rank)
        ranks = self._topo.ranks_of_node(node)
        nics = self._nics_of_node(node)
        if not nics:
            raise TopologyError(f"{self.machine.name}: node {node} has no NIC for nic_binding")
        g, n_gpus, n_nics = ranks.index(rank), len(ranks), len(nics)
        if self.nic_binding == "round-robin":
            return nics[g % n_nics]
        if self.nic_binding == "packed" or n_nics < n_gpus:
            return nics[g * n_nics // n_gpus]
        return nics[g]

    def _nics_of_node(self, node) -> list[str]:
        by_node = self.machine.derived.get(_NICS_KEY)
        if by_node is None:
            by_node = {}
            for c in self._topo.components:
                if c.kind == "nic":
                    by_node.setdefault(c.node, []).append(c.name)
            for names in by_node.values():
                names.sort(key=_natural_key)
            self.machine.derived[_NICS_KEY] = by_node
        return by_node.get(node, [])

    def _bound_path(self, src: int, dst: int) -> list[RouteHop]:
        a, b = self.nic_of(src), self.nic_of(dst)
        s, d = self._topo.gpu(src).name, self._topo.gpu(dst).name
        return self._gpu_nic_path(s, a) + self._path(a, b, avoid_fabric=False) + self._gpu_nic_path(b, d)

    def _gpu_nic_path(self, a: str, b: str) -> list[RouteHop]:
        """Path between a GPU and its bound NIC: over PCIe when there is one,
        else through the GPU fabric and the GPU next to the NIC, as NCCL's PXN
        forwards traffic to a NIC on another PCIe root (NCCL 2.12 release
        notes; a node left with fewer NICs by a fabric what-if)."""
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

    # -- flows -----------------------------------------------------------------------------
    def start_flow(
        self,
        src: int,
        dst: int,
        size_bytes: float,
        *,
        cap_Bps: float = math.inf,
        efficiency: float = 1.0,
        on_sent: Callable[[Flow], Any] | None = None,
        on_arrival: Callable[[Flow], Any] | None = None,
        after_s: float = 0.0,
        kind: str = "send",
        track: str | None = None,
        label: str = "",
        chunk: int | None = None,
        tag: Any = None,
    ) -> Flow:
        """Callback form of :meth:`transfer` (no SimPy event per message):
        ``on_sent(flow)`` runs when the last byte leaves the wire,
        ``on_arrival(flow)`` when it has arrived plus ``after_s`` (e.g. a
        reduction at the receiver, recorded as its own ``reduce`` row)."""
        check_size_bytes(size_bytes, where=f"transfer {src}->{dst}: size_bytes", allow_zero=True)
        if not 0 < efficiency <= 1:
            raise ModelError(f"transfer {src}->{dst}: protocol efficiency must lie in (0, 1], got {efficiency}")
        if not cap_Bps > 0:
            raise ModelError(f"transfer {src}->{dst}: cap_Bps must be positive, got {cap_Bps}")
        return self.launch(
            src, dst, size_bytes, cap_Bps, efficiency, on_sent, on_arrival, after_s, kind, track, label, chunk, tag
        )

    def launch(
        self,
        src: int,
        dst: int,
        size_bytes: float,
        cap_Bps: float,
        efficiency: float,
        on_sent: Callable[[Flow], Any] | None,
        on_arrival: Callable[[Flow], Any] | None,
        after_s: float,
        kind: str,
        track: str | None,
        label: str,
        chunk: int | None,
        tag: Any,
    ) -> Flow:
        """:meth:`start_flow` with positional arguments and no argument
        checks, for callers that validated them (the hot path of Algorithm mode)."""
        info = self._fast.get((src, dst))
        if info is None:
            info = self._route_info(src, dst)
        alpha, bandwidth, resources, alone, uses = info
        now = self.env.now
        f = Flow()
        f.id = fid = self._next_flow
        self._next_flow = fid + 1
        f.src = src
        f.dst = dst
        f.res = resources
        f.uses = uses
        f.bound = bound = bandwidth if cap_Bps >= bandwidth else cap_Bps
        f.pattern = (uses.order, bound)
        f.order = (uses.order << 40) | fid  # by route, then by id (_recompute)
        f.remaining = size_bytes / efficiency
        f.rate = 0.0
        f.t_last = now
        f.alpha_s = alpha
        f.after_s = after_s
        f.size_bytes = size_bytes
        f.start_s = now
        f.wire_end_s = None
        f.on_sent = on_sent
        f.on_arrival = on_arrival
        f.kind = kind
        f.track = track
        f.label = label
        f.chunk = chunk
        f.tag = tag
        f.done_event = None
        self.active[fid] = f
        self.transfers += 1
        shared = False
        for res, _ in resources:
            flows = res.flows
            flows[fid] = f
            if len(flows) > 1:
                shared = True
                if len(flows) > self.max_sharing:
                    self.max_sharing = len(flows)
        if shared and self.contention:
            self._joined.append(f)
            self._mark_dirty(resources)
            return f
        # alone on every resource (or the ideal network): no max-min needed
        rate = alone if self.contention else bandwidth
        if cap_Bps < rate:
            rate = cap_Bps
        self._set_rate(f, rate, now)
        if self.record_utilisation:
            for res, w in resources:
                self._account(res, res.rate + rate * w, now)
        return f

    def _route_info(self, src: int, dst: int) -> tuple:
        """What :meth:`launch` keeps per rank pair: α, bandwidth, the
        resources a flow registers on, its rate alone, and its route as the
        max-min reads it. Without a utilisation record, a resource another
        of the route's resources dominates (:class:`_Dominance`) is left out
        of both: it can never limit a rate."""
        alpha, bandwidth, resources = self.route(src, dst)
        alone = alone_rate_Bps(bandwidth, resources)
        if self._dominance is not None:
            resources, revoked = self._dominance.kept(resources, (src, dst))
            if revoked:
                self._restore(revoked)
        uses = self._uses_table.add(_Uses(resources, self._uses_table.count))
        info = self._fast[(src, dst)] = (alpha, bandwidth, resources, alone, uses)
        return info

    def _restore(self, pairs: set[tuple[int, int]]) -> None:
        """Put the resources that stopped being dominated back into the routes
        of ``pairs`` that left them out: each pair's route object is rebuilt
        in place (the flows in flight hold it) and their flows register on
        the restored resources."""
        routes = {}
        moved: list[Flow] = []
        for pair in pairs:
            info = self._fast.get(pair)
            if info is None:
                continue
            alpha, bandwidth, before, alone, uses = info
            # the route's flows in flight are on every resource it kept, and it keeps each again (a
            # resource's dominators only go): one resource's flows hold them, not every flow in
            # flight (400,000 of them on 1,024 GPUs at 1 MB, for each of thousands of restores).
            # It kept one at least: it left one out for another of its own, the least never left out.
            moved.extend(f for f in before[0][0].flows.values() if f.uses is uses)
            resources, _ = self._dominance.kept(self.route(*pair)[2], pair)
            uses.__init__(resources, uses.order)
            self._uses_table.add(uses)
            self._fast[pair] = (alpha, bandwidth, resources, alone, uses)
            routes[id(uses)] = resources
        moved.sort(key=operator.attrgetter("id"))  # (in the order of self.active)
        for f in moved:
            resources = routes[id(f.uses)]
            for res, _ in resources:
                res.flows[f.id] = f
            f.res = resources
        self._solved.clear()

    def transfer(
        self,
        src: int,
        dst: int,
        size_bytes: float,
        *,
        cap_Bps: float = math.inf,
        efficiency: float = 1.0,
        track: str | None = None,
        label: str = "",
        chunk: int | None = None,
        kind: str = "send",
    ) -> TransferEvent:
        """Message rank ``src`` → rank ``dst`` of ``size_bytes`` payload bytes:
        its ``size_bytes / efficiency`` wire bytes flow over the route's
        resources, sharing them max-min fairly with other flows and capped at
        ``cap_Bps``; the returned event fires (value: the time) when the last
        byte has arrived, ``α`` after it left the wire. Records a timeline row
        (``kind``, ``track`` default ``"src->dst"``)."""
        event = TransferEvent(self.env)

        def sent(flow: Flow) -> None:
            event._mark_sent(flow.wire_end_s)

        def arrived(flow: Flow) -> None:
            event.succeed(self.env.now)

        self.start_flow(
            src,
            dst,
            size_bytes,
            cap_Bps=cap_Bps,
            efficiency=efficiency,
            on_sent=sent,
            on_arrival=arrived,
            kind=kind,
            track=track,
            label=label,
            chunk=chunk,
        )
        return event

    def record(
        self,
        kind: str,
        track: str,
        start_s: float,
        end_s: float,
        *,
        src: int = -1,
        dst: int = -1,
        chunk: int | None = None,
        size_bytes: float = 0.0,
        label: str = "",
    ) -> None:
        """Add a timeline row for an executor op (``reduce``, ``copy``,
        ``launch``, ``wait``...) that is not a network transfer."""
        if self.record_timeline:
            self.timeline.add(
                kind, track, start_s, end_s, src=src, dst=dst, chunk=chunk, size_bytes=size_bytes, label=label
            )

    # -- internals --------------------------------------------------------------------------
    def _account(self, res: Resource, total: float, now: float) -> None:
        """Close the resource's utilisation interval when its total rate changes."""
        if not res.flows:
            total = 0.0
        if total != res.rate or len(res.flows) != res.seg_flows:
            if self.record_utilisation and res.rate > 0 and now > res.seg_start:
                self.utilisation.add(
                    res.id, res.seg_start, now, res.rate, res.effective_capacity_Bps(res.seg_flows), res.seg_flows
                )
            res.rate = total
            res.seg_start = now
            res.seg_flows = len(res.flows)

    def _set_rate(self, f: Flow, rate: float, now: float) -> None:
        if f.rate > 0:
            f.remaining -= f.rate * (now - f.t_last)
            if f.remaining < 0:
                f.remaining = 0.0
        f.t_last = now
        f.rate = rate
        if rate <= 0:
            f.done_event = None
            return
        done = simpy.Timeout(self.env, f.remaining / rate, f)
        f.done_event = done
        done.callbacks.append(self._on_complete)

    def _mark_dirty(self, resources) -> None:
        """Queue a max-min recomputation for the components of ``resources``
        at the end of the current instant: all flows that start or end at one
        simulated time are settled by one recomputation."""
        dirty = self._dirty
        for res, _ in resources:
            dirty[res.id] = res
        if not self._flush_scheduled:
            self._flush_scheduled = True
            event = simpy.Timeout(self.env, 0.0)
            event.callbacks.append(self._flush)

    def _flush(self, _event=None) -> None:
        self._flush_scheduled = False
        seeds = [(res, 1.0) for res in self._dirty.values()]
        self._dirty = {}
        left, joined = self._left, self._joined
        self._left, self._joined = [], []
        if left and self._handover(left, joined):
            self.handovers += 1
            return
        self._recompute(seeds, self.env.now)

    def _handover(self, left: list[tuple[_Uses, float, float]], joined: list[Flow]) -> bool:
        """Settle the instant without a recomputation where every flow that
        joined shared resources replaces one that left them on the same route
        with the same bound, and nothing else changed: a connection handing
        its wire from one message to the next, the steady state of a
        pipeline. Every resource then carries the same flows as before up to
        identity, so the max-min solution is the one in force (it is unique,
        and identical flows get identical rates), and each joining flow
        takes the rate of the flow it replaces. False, with nothing set, if
        the instant is not such a handover."""
        if len(left) != len(joined):
            return False
        rates: dict[tuple[_Uses, float], list[float]] = {}
        for uses, bound, rate in left:
            rates.setdefault((uses, bound), []).append(rate)
        taken = []
        for f in joined:
            same = rates.get((f.uses, f.bound))
            if not same:
                return False
            taken.append(same.pop())
        now = self.env.now
        for f, rate in zip(joined, taken, strict=True):
            self._set_rate(f, rate, now)
        return True

    def _recompute(self, seeds, now: float) -> None:
        """Max-min fair rates (progressive filling, weighted) on the connected
        component of flows that share a resource with ``seeds``."""
        self.recomputes += 1
        # Breadth-first over resources, one level at a time: a level's flows are merged into ``flows``
        # by dict updates (new flows land at the end), and the next level is the union of
        # their routes' resources, so the Python-level work is one step per flow and per resource,
        # not per (flow, resource) use - components of thousands of flows are common (HiCCL).
        flows: dict[int, Flow] = {}
        seen: dict[int, Resource] = {}
        level = {r.id: r for r, _ in seeds}
        while level:
            known = len(flows)
            for rid, r in level.items():
                seen[rid] = r
                flows.update(r.flows)
            reached: dict[int, Resource] = {}
            for f in itertools.islice(flows.values(), known, None):
                reached.update(f.uses.by_id)
            level = {rid: r for rid, r in reached.items() if rid not in seen}
        # Flows by route, then by id, whatever order the search met them in: the arithmetic (each resource's
        # sums run over its flows in order) then depends on the component alone - not on the resources that
        # led to its flows, so leaving dominated resources out changes nothing (_Dominance) - and a sharing
        # pattern is remembered whatever order its flows' routes started in.
        if len(flows) > 1:
            flows = {f.id: f for f in sorted(flows.values(), key=_ORDER)}
        if not flows:
            if self.record_utilisation:
                for r in seen.values():
                    self._account(r, 0.0, now)
            return
        sparse = None
        if len(flows) == 1:
            (f,) = flows.values()
            rates = (alone_rate_Bps(f.bound, f.res),)
        elif len(flows) > _REMEMBER_UP_TO:
            sparse = _Sparse(flows, seen, self._uses_table, self._capacities)
            rates = sparse.max_min()
            # most flows of a large component keep their rate: compared as arrays, only the others are set
            changed = rates != np.fromiter([f.rate for f in sparse.flows], dtype=float, count=len(rates))
            for i in np.flatnonzero(changed).tolist():
                self._set_rate(sparse.flows[i], float(rates[i]), now)
        else:
            # Pipelined schedules meet the same sharing pattern again and again: the rates are a function
            # of the flows in order (their routes fix the resources; the order fixes the arithmetic's), so a
            # pattern met before is answered from memory, bit for bit as solving it again. A flow's part of
            # the pattern is its route's number in the network (one route per rank pair) and its bound.
            pattern = tuple([f.pattern for f in flows.values()])
            rates = self._solved.get(pattern)
            if rates is None:
                if len(flows) < _NUMPY_FROM:
                    new = _max_min(flows, dict(sorted(seen.items())))  # (it freezes resource by resource)
                    rates = tuple([new[fid] for fid in flows])
                else:
                    sparse = _Sparse(flows, seen, self._uses_table, self._capacities)
                    rates = tuple(sparse.max_min().tolist())
                self._solved_flows += len(flows)
                if self._solved_flows > _SOLVED_MAX_FLOWS:  # memory stays bounded: forget, start again
                    self._solved.clear()
                    self._solved_flows = len(flows)
                self._solved[pattern] = rates
            else:
                self.recomputes_remembered += 1
        if len(flows) <= _REMEMBER_UP_TO:  # (larger components set their changed rates above)
            for f, rate in zip(flows.values(), rates, strict=True):
                if rate != f.rate:
                    self._set_rate(f, rate, now)
        if self.record_utilisation:  # the resources' total rates only feed the utilisation record
            if len(flows) < _NUMPY_FROM:
                totals = dict.fromkeys(seen, 0.0)
                for f in flows.values():
                    rate = f.rate
                    for res, w in f.res:
                        totals[res.id] += rate * w
                for rid, r in seen.items():
                    self._account(r, totals[rid], now)
            else:
                if sparse is None:
                    sparse = _Sparse(flows, seen, self._uses_table, self._capacities)
                for r, total in zip(seen.values(), sparse.totals(rates), strict=True):
                    self._account(r, total, now)

    def _on_complete(self, event: simpy.Event) -> None:
        f = event.value
        if f.done_event is event:  # else the flow's rate changed since: a stale completion
            self._complete(f)

    def _on_arrive(self, event: simpy.Event) -> None:
        self._arrive(event.value)

    def _complete(self, f: Flow) -> None:
        now = self.env.now
        del self.active[f.id]
        f.done_event = None
        f.wire_end_s = now
        rate = f.rate
        others = False
        for res, _ in f.res:
            flows = res.flows
            del flows[f.id]
            if flows:
                others = True
        if others and self.contention:
            self._left.append((f.uses, f.bound, rate))
            f.rate = 0.0
            self._mark_dirty(f.res)
        else:
            if self.record_utilisation:
                for res, w in f.res:
                    self._account(res, res.rate - rate * w, now)
            f.rate = 0.0
        if f.on_sent is not None:
            f.on_sent(f)
        delay = f.alpha_s + f.after_s
        if delay > 0:
            t = simpy.Timeout(self.env, delay, f)
            t.callbacks.append(self._on_arrive)
        else:
            self._arrive(f)

    def _arrive(self, f: Flow) -> None:
        now = self.env.now
        if self.record_timeline:
            arrival = f.wire_end_s + f.alpha_s
            track = f.track
            if track is None:
                track = self._tracks.get((f.src, f.dst))
                if track is None:
                    track = self._tracks[(f.src, f.dst)] = f"{f.src}->{f.dst}"
            chunk = -1 if f.chunk is None else f.chunk
            append = self.timeline.append
            append(f.kind, track, f.src, f.dst, chunk, f.size_bytes, f.start_s, arrival if f.after_s else now, f.label)
            if f.after_s:
                append("compute", f"rank {f.dst}", f.src, f.dst, chunk, f.size_bytes, arrival, now, f.label)
        if f.on_arrival is not None:
            f.on_arrival(f)

    def add_alone_flows(
        self,
        resources: Sequence[tuple[tuple[Resource, float], ...]],
        rates_Bps: Sequence[float],
        route: np.ndarray,
        start_s: np.ndarray,
        end_s: np.ndarray,
    ) -> None:
        """Account for messages the caller timed itself because each was alone
        on all its resources (Algorithm mode's private rank pairs): they count
        as transfers and, when utilisation is recorded, each adds the interval
        the network would have recorded for it: from ``start_s`` to its wire
        end ``end_s``, on every resource of its route at its rate × the
        resource's weight, with one flow.

        ``route[i]`` indexes ``resources`` and ``rates_Bps`` (one entry per
        route: its ``(resource, weight)`` pairs and its standalone rate,
        :func:`alone_rate_Bps`) for message ``i``.
        """
        self.transfers += len(route)
        if not self.record_utilisation or not len(route):
            return
        rid, ratew, cap, offsets = [], [], [], [0]
        for used, rate in zip(resources, rates_Bps, strict=True):
            for res, w in used:
                rid.append(res.id)
                ratew.append(0.0 + rate * w)
                cap.append(res.effective_capacity_Bps(1))
            offsets.append(len(rid))
        offsets = np.array(offsets, dtype=np.int64)
        msgs = np.flatnonzero(end_s > start_s)
        q = route[msgs]
        counts = offsets[q + 1] - offsets[q]
        rows = np.repeat(msgs, counts)
        idx = ragged_indices(offsets[q], counts)
        self.utilisation.extend(
            np.array(rid, dtype=np.int32)[idx],
            start_s[rows],
            end_s[rows],
            np.array(ratew, dtype=np.float64)[idx],
            np.array(cap, dtype=np.float64)[idx],
            np.ones(len(rows), dtype=np.int32),
        )

    def finish(self) -> None:
        """Close the open utilisation intervals at the current time."""
        now = self.env.now
        for r in self.resources:
            if r.rate > 0:
                self._account(r, -1.0, now)
                r.rate = 0.0

    def resource_names(self) -> list[str]:
        return [r.name for r in self.resources]


@dataclass(frozen=True)
class RouteIdTable:
    """Routes of many rank pairs (:meth:`FluidNetwork.route_id_table`), a
    row per pair: α, the standalone bandwidth, and the resources' numbers
    and weights in route order (rows padded with -1 and 0.0)."""

    alpha_s: np.ndarray
    bandwidth_Bps: np.ndarray
    ids: np.ndarray
    weights: np.ndarray

    @classmethod
    def from_rows(cls, rows: Sequence[tuple[float, float, tuple[int, ...], tuple[float, ...]]]) -> RouteIdTable:
        """The table of :meth:`FluidNetwork.route_ids` rows."""
        return cls(
            np.array([r[0] for r in rows], dtype=np.float64),
            np.array([r[1] for r in rows], dtype=np.float64),
            _padded([r[2] for r in rows]),
            _padded([r[3] for r in rows], fill=0.0),
        )


class _SwapMemo:
    """A node swap's creation calls and (resource key, weight) uses, each
    swapped once (:meth:`FluidNetwork._mirrored_recipe`): a node's pairs
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
    """Resource creation calls, each numbered once (:meth:`FluidNetwork.route_id_table`)."""

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
    """A resource key with its component names swapped (:meth:`FluidNetwork._mirrored_recipe`)."""
    return tuple(swap.get(part, part) if isinstance(part, str) else part for part in key)


def _node_renaming(swap: dict[str, str]) -> Callable[[str], str]:
    """A function that swaps the two nodes' name prefixes (``n<a>.``, ``n<b>.``)
    wherever a component name starts in a resource's display name."""
    a, b = next((x, y) for x, y in swap.items() if x != y)
    first, second = a.split(".", 1)[0], b.split(".", 1)[0]
    other = {first: second, second: first}
    pattern = re.compile(rf"(?<![\w.])({re.escape(first)}|{re.escape(second)})\.")
    return lambda name: pattern.sub(lambda m: other[m[1]] + ".", name)


def alone_rate_Bps(bound_Bps: float, resources: Sequence[tuple[Resource, float]]) -> float:
    """The rate of a flow alone on its resources (the one rule, used by
    :meth:`FluidNetwork.launch`, the max-min recomputation and Algorithm
    mode's private pairs): ``bound_Bps`` (the route's bandwidth, or a lower
    cap), lowered to every resource's one-flow capacity
    (:meth:`Resource.effective_capacity_Bps`) divided by the weight the flow
    puts on it. Applies with contention; the ideal network uses the route
    bandwidth alone.

    >>> link = Resource(0, "nvlink gpu0->gpu1", "nvlink", 25e9)
    >>> alone_rate_Bps(50e9, [(link, 0.5)]), alone_rate_Bps(10e9, [(link, 1.0)])
    (50000000000.0, 10000000000.0)
    """
    rate = bound_Bps
    for res, w in resources:
        share = res.effective_capacity_Bps(1) / w
        if share < rate:
            rate = share
    return rate


def _max_min(flows: dict[int, Flow], resources: dict[int, Resource]) -> dict[int, float]:
    """Weighted progressive filling: all unfrozen flows rise at one common rate
    until a flow hits its bound or a resource fills; those freeze; repeat."""
    residual = {rid: r.effective_capacity_Bps(len(r.flows)) for rid, r in resources.items()}
    weight_sum = dict.fromkeys(resources, 0.0)
    on: dict[int, list[tuple[Flow, float]]] = {rid: [] for rid in resources}
    for f in flows.values():
        for r, w in f.res:
            weight_sum[r.id] += w
            on[r.id].append((f, w))
    rates: dict[int, float] = {}
    unfrozen = dict(flows)
    while unfrozen:
        level = min(f.bound for f in unfrozen.values())
        for rid, ws in weight_sum.items():
            if ws > 0:
                share = residual[rid] / ws
                if share < level:
                    level = share
        level = max(level, 0.0)
        limit = level * (1 + _REL_TOL)
        freeze = [fid for fid, f in unfrozen.items() if f.bound <= limit]
        for rid, ws in weight_sum.items():
            if ws > 0 and residual[rid] / ws <= limit:
                freeze.extend(f.id for f, _ in on[rid] if f.id in unfrozen)
        for fid in freeze:
            f = unfrozen.pop(fid, None)
            if f is None:
                continue
            rates[fid] = level
            for r, w in f.res:
                residual[r.id] -= level * w
                weight_sum[r.id] -= w
                if weight_sum[r.id] < 1e-12:
                    weight_sum[r.id] = 0.0
    return rates


class _Sparse:
    """A component's flow × resource weights as sparse entries in flow
    order (a flow's in its route's order): the input of the vectorised
    max-min (:meth:`max_min`) and of the resources' total rates
    (:meth:`totals`), which sum per resource and so need only the flows in
    order. Each flow lists a resource once (:class:`_Uses` merges repeats),
    so every (flow, resource) entry is unique."""

    __slots__ = ("flows", "resources", "entry_flow", "entry_res", "values", "rids", "capacities")

    def __init__(
        self,
        flows: dict[int, Flow],
        resources: dict[int, Resource],
        table: _UsesTable | None = None,
        capacities: _CapacityTable | None = None,
    ):
        self.flows = flow_list = list(flows.values())
        self.resources = resources
        self.capacities = capacities
        nf, nr = len(flow_list), len(resources)
        self.rids = rids = np.fromiter(resources, dtype=np.int64, count=nr)
        local = np.empty(int(rids.max()) + 1, dtype=np.int64)
        local[rids] = np.arange(nr)
        if table is None:  # routes outside a network's table
            uses = [f.uses for f in flow_list]
            lengths = np.fromiter((len(u.ids) for u in uses), dtype=np.int64, count=nf)
            ids = np.concatenate([u.ids for u in uses])
            weights = np.concatenate([u.weights for u in uses])
        else:  # the same entries in the same order, gathered from the table
            routes = np.fromiter([f.uses.index for f in flow_list], dtype=np.int64, count=nf)
            lengths = table.lengths[routes]
            ends = np.cumsum(lengths)
            at = np.arange(int(ends[-1]), dtype=np.int64) + np.repeat(table.offsets[routes] - (ends - lengths), lengths)
            ids, weights = table.ids[at], table.weights[at]
        self.entry_flow = np.repeat(np.arange(nf, dtype=np.int64), lengths)
        self.entry_res = local[ids]
        self.values = weights

    def max_min(self) -> np.ndarray:
        """:func:`_max_min`'s rates, in the order of the flows.

        The same arithmetic as a dense flow × resource matrix summed over its
        rows, without the zeros: every per-resource sum
        (:func:`numpy.bincount`) adds the entries in flow order, so the rates
        are bit-identical to the dense form's (tested) while each filling
        round costs the number of (flow, resource) uses, not flows × resources."""
        nf, nr = len(self.flows), len(self.resources)
        entry_flow, entry_res, values = self.entry_flow, self.entry_res, self.values
        used = values > 0
        residual = self._capacity()
        bound = np.array([f.bound for f in self.flows])
        rates = np.zeros(nf)
        unfrozen = np.ones(nf, dtype=bool)
        # Sums over the live entries are taken over every entry with the others weighted 0: adding
        # zeros leaves each partial sum as it was, so the same bits in fewer NumPy calls.
        while unfrozen.any():
            weight_sum = np.bincount(entry_res, weights=values * unfrozen[entry_flow], minlength=nr)
            share = np.divide(residual, weight_sum, out=np.full(nr, np.inf), where=weight_sum > 1e-12)
            level = max(min(share.min(), bound.min(where=unfrozen, initial=np.inf)), 0.0)
            limit = level * (1 + _REL_TOL)
            hit = np.zeros(nf, dtype=bool)
            hit[entry_flow[used & (share <= limit)[entry_res]]] = True
            newly = unfrozen & ((bound <= limit) | hit)
            rates[newly] = level
            residual -= level * np.bincount(entry_res, weights=values * newly[entry_flow], minlength=nr)
            unfrozen &= ~newly
        return rates

    def _capacity(self) -> np.ndarray:
        """Each resource's capacity with its current flows (:meth:`Resource.effective_capacity_Bps`)."""
        table = self.capacities
        if table is None:
            return np.array([r.effective_capacity_Bps(len(r.flows)) for r in self.resources.values()])
        capacity = table.one_flow_Bps[self.rids]
        varies = np.flatnonzero(table.varies[self.rids])
        if varies.size:
            resources = list(self.resources.values())
            for i in varies.tolist():
                r = resources[i]
                capacity[i] = r.effective_capacity_Bps(len(r.flows))
        return capacity

    def totals(self, rates) -> list[float]:
        """Each resource's total rate (its flows' ``rates`` times their
        weights), summed in flow order as a loop over the flows would."""
        per_use = np.asarray(rates, dtype=float)[self.entry_flow] * self.values
        return np.bincount(self.entry_res, weights=per_use, minlength=len(self.resources)).tolist()


def _max_min_numpy(flows: dict[int, Flow], resources: dict[int, Resource]) -> dict[int, float]:
    """:func:`_max_min`, vectorised over the sparse flow × resource weights
    (:meth:`_Sparse.max_min`)."""
    sparse = _Sparse(flows, resources)
    return {f.id: float(rate) for f, rate in zip(sparse.flows, sparse.max_min(), strict=True)}


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

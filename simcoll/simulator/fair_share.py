"""Max-min fair rates of flows over weighted resources: the fast forms.

Progressive filling with per-hop weights (rule R5 of :mod:`.reference`,
which states it plainly in :func:`~.reference.max_min_fair_rates`): every
flow not yet fixed rises at one common rate; when a flow reaches its bound or
a resource fills, the flows it limits are fixed. :class:`~.network.FluidNetwork`
solves each connected component of flows that a start or end changes, with
:func:`max_min_rates` for small components and the vectorised
:class:`SparseComponent` (bit for bit the same rates as a dense matrix form)
for large ones; a route is read as a :class:`RouteUses` (its resources'
numbers and weights, repeats merged) kept in a :class:`RouteUsesTable`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .routing import Resource, _CapacityTable

#: A flow as the max-min reads it: its ``id``, ``bound`` (bytes/s), ``res`` (its route's
#: ``(resource, weight)`` pairs) and ``uses`` (a :class:`RouteUses`); :class:`~.network.Flow`
#: creates them (this module does not import the network, which imports it).
FlowLike = Any

#: Flows whose fair share lies within this relative distance of the level freeze together (ties).
TIE_TOLERANCE = 1e-12


class RouteUses:
    """A route's resources as the max-min solvers read them: by id (the
    component search), and their ids and weights as arrays."""

    __slots__ = ("by_id", "ids", "weights", "index", "order")

    def __init__(self, resources: Sequence[tuple[Resource, float]], order: int = -1):
        self.index = -1  # its place in the network's RouteUsesTable, once added
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


class RouteUsesTable:
    """Every route's resource ids and weights of one network end to end, with
    each route's offset and length (compressed sparse rows): a component's
    (flow, resource) entries are then gathered by NumPy indexing
    (:class:`SparseComponent`) rather than one small array per flow, which dominated
    components of thousands of flows (HiCCL). Arrays grow by doubling."""

    __slots__ = ("count", "offsets", "lengths", "ids", "weights", "_entries")

    def __init__(self) -> None:
        self.count = 0
        self._entries = 0
        self.offsets = np.zeros(64, dtype=np.int64)
        self.lengths = np.zeros(64, dtype=np.int64)
        self.ids = np.zeros(256, dtype=np.int64)
        self.weights = np.zeros(256, dtype=float)

    def add(self, uses: RouteUses) -> RouteUses:
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


def max_min_rates(flows: dict[int, FlowLike], resources: dict[int, Resource]) -> dict[int, float]:
    """Weighted progressive filling: all unfrozen flows rise at one common rate
    until a flow hits its bound or a resource fills; those freeze; repeat."""
    residual = {rid: r.effective_capacity_Bps(len(r.flows)) for rid, r in resources.items()}
    weight_sum = dict.fromkeys(resources, 0.0)
    on: dict[int, list[tuple[FlowLike, float]]] = {rid: [] for rid in resources}
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
        limit = level * (1 + TIE_TOLERANCE)
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


class SparseComponent:
    """A component's flow × resource weights as sparse entries in flow
    order (a flow's in its route's order): the input of the vectorised
    max-min (:meth:`max_min`) and of the resources' total rates
    (:meth:`totals`), which sum per resource and so need only the flows in
    order. Each flow lists a resource once (:class:`RouteUses` merges repeats),
    so every (flow, resource) entry is unique."""

    __slots__ = ("flows", "resources", "entry_flow", "entry_res", "values", "rids", "capacities")

    def __init__(
        self,
        flows: dict[int, FlowLike],
        resources: dict[int, Resource],
        table: RouteUsesTable | None = None,
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
        """:func:`max_min_rates`'s rates, in the order of the flows.

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
            limit = level * (1 + TIE_TOLERANCE)
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


def max_min_rates_numpy(flows: dict[int, FlowLike], resources: dict[int, Resource]) -> dict[int, float]:
    """:func:`max_min_rates`, vectorised over the sparse flow × resource weights
    (:meth:`SparseComponent.max_min`)."""
    sparse = SparseComponent(flows, resources)
    return {f.id: float(rate) for f, rate in zip(sparse.flows, sparse.max_min(), strict=True)}

"""Plans (transfers with dependencies) from routings, and combining
collectives (TACCL §5.3).

- :func:`copy_plan`: a non-combining routing (Allgather, Alltoall): each send
  depends on the send that brought its chunk to the sender.
- :func:`reduce_plan`: ReduceScatter as the inverse of an Allgather routed on
  the *reversed* logical topology (so the inverse uses the sketch's own
  links, SCCL §3.5): every send ``c: u -> v`` becomes a reduction
  ``c: v -> u``, which may start only when every reduction into ``v`` for
  ``c`` has arrived. The inverse sends are then re-ordered by stage 2 and
  re-timed by stage 3, as §5.3 prescribes ("a GPU ... cannot reduce all
  receives together in the inverse case"), rather than mirrored in time.
- :func:`reversal_isomorphism`: when the reversed logical topology is the
  forward one with ranks renamed inside their nodes (dgx2-sk-1: odd senders
  become even ones), the reversed Allgather routing is the forward one
  renamed, and stage 1 runs once instead of twice.
- :func:`allreduce_plan`: ReduceScatter followed by Allgather in one plan:
  the Allgather sends of chunk c from its owner wait for the last reduction
  into the owner, so the two halves overlap where chunks allow.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable

import networkx as nx
from networkx.algorithms.isomorphism import DiGraphMatcher

from ...machines import Machine
from .ordering import Plan, PlannedTransfer
from .routing import NS, lat_ns
from .sketch import LogicalTopology


def _transfer(
    logical: LogicalTopology, machine: Machine, chunk_bytes: float, c: int, u: int, v: int, op: str, deps
) -> PlannedTransfer:
    lk = logical.links[(u, v)]
    lat = lat_ns(logical, (u, v), chunk_bytes)
    if op == "reduce":
        lat += math.ceil(machine.model.reduce_time_s(chunk_bytes) / NS)
    group = "nic" if lk.internode else ("switch" if lk.switched else None)
    return PlannedTransfer(
        chunk=c,
        src=u,
        dst=v,
        op=op,
        deps=tuple(deps),
        lat_ns=lat,
        alpha_ns=min(lat, math.ceil(lk.alpha_s / NS)),
        send_group=group,
        recv_group=group,
        contiguous=lk.internode,
    )


def copy_plan(
    logical: LogicalTopology,
    machine: Machine,
    chunk_bytes: float,
    sends: Iterable[tuple[int, int, int]],
    after: dict[tuple[int, int], list[int]] | None = None,
    offset: int = 0,
) -> list[PlannedTransfer]:
    """Copy transfers for a routing; ``after[(c, r)]`` lists transfer indices
    (in the enclosing plan) that must arrive before rank r sends chunk c
    on (used by Allreduce); ``offset`` is this list's index in that plan."""
    sends = list(sends)
    arrival = {(c, v): offset + i for i, (c, _u, v) in enumerate(sends)}
    after = after or {}
    out = []
    for c, u, v in sends:
        deps = [arrival[(c, u)]] if (c, u) in arrival else list(after.get((c, u), ()))
        out.append(_transfer(logical, machine, chunk_bytes, c, u, v, "copy", deps))
    return out


def reduce_plan(
    logical: LogicalTopology, machine: Machine, chunk_bytes: float, reversed_sends: Iterable[tuple[int, int, int]]
) -> list[PlannedTransfer]:
    """Reductions inverting an Allgather routed on ``logical.reversed()``."""
    inverse = [(c, v, u) for c, u, v in reversed_sends]
    into: dict[tuple[int, int], list[int]] = defaultdict(list)
    for i, (c, _u, v) in enumerate(inverse):
        into[(c, v)].append(i)
    return [_transfer(logical, machine, chunk_bytes, c, u, v, "reduce", into.get((c, u), ())) for c, u, v in inverse]


def reductions_into(plan: list[PlannedTransfer]) -> dict[tuple[int, int], list[int]]:
    """Indices of the transfers into each (chunk, rank)."""
    out: dict[tuple[int, int], list[int]] = defaultdict(list)
    for i, t in enumerate(plan):
        out[(t.chunk, t.dst)].append(i)
    return out


def allreduce_plan(
    logical: LogicalTopology,
    machine: Machine,
    chunk_bytes: float,
    reversed_sends: Iterable[tuple[int, int, int]],
    sends: Iterable[tuple[int, int, int]],
) -> Plan:
    """ReduceScatter (inverse of ``reversed_sends``) then Allgather (``sends``)."""
    rs = reduce_plan(logical, machine, chunk_bytes, reversed_sends)
    ag = copy_plan(logical, machine, chunk_bytes, sends, after=reductions_into(rs), offset=len(rs))
    return Plan(tuple(rs + ag))


def reversal_isomorphism(logical: LogicalTopology) -> list[int] | None:
    """A node-preserving rank map ``pi`` with ``(pi[u], pi[v])`` a link of
    ``logical.reversed()`` with the same α-β and kind for every link
    ``(u, v)`` of ``logical`` (VF2, :class:`networkx.DiGraphMatcher`), or None."""
    reverse = logical.reversed()

    def graph(lt: LogicalTopology) -> nx.DiGraph:
        g = nx.DiGraph()
        for r in range(lt.num_ranks):
            g.add_node(r, node=lt.node(r))
        for (u, v), lk in lt.links.items():
            g.add_edge(u, v, kind=(lk.alpha_s, lk.beta_s_per_byte, lk.switched, lk.internode))
        return g

    matcher = DiGraphMatcher(
        graph(logical),
        graph(reverse),
        node_match=lambda a, b: a["node"] == b["node"],
        edge_match=lambda a, b: a["kind"] == b["kind"],
    )
    found = next(matcher.isomorphisms_iter(), None)
    return None if found is None else [found[r] for r in range(logical.num_ranks)]


def rename_allgather_sends(sends: Iterable[tuple[int, int, int]], pi: list[int]) -> tuple[tuple[int, int, int], ...]:
    """Allgather sends with every rank renamed by ``pi``; chunk ``i*P + n``
    (part i of rank n's input) becomes ``i*P + pi[n]``."""
    p = len(pi)
    return tuple(sorted(((c // p) * p + pi[c % p], pi[u], pi[v]) for c, u, v in sends))

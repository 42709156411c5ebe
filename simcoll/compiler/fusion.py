"""Pass 3: instruction fusion (GC3 §4.2, "Instruction Fusion").

Peephole rewrites of a receive followed by a send of the same slots:

- ``rcs``: a ``recv`` and a ``send`` of the same ``count`` slots it wrote;
  of several such sends, the one on the longest path is fused;
- ``rrcs``: an ``rrc`` and a ``send`` of its result;
- ``rrs``: as ``rrcs`` when the result is never used locally (no other
  instruction reads it before it is overwritten), so it is not stored.

Two options serve Algorithm lowering (:mod:`simcoll.compiler.lower`):
``live_out`` (the slots whose final contents matter, i.e. the outputs) lets
a result that is never read again and lies outside it count as dead, so it
need not be stored (``rrs``, not ``rrcs``); ``fan_out=False`` leaves a
receive whose result other instructions also read unfused (``recv``/``rrc``
then separate sends), since those readers would otherwise wait for the
fused instruction's whole send (a false dependency; in the runtime a fused
instruction finishes only when its data has arrived, GC3 §6.2); ``prune``
drops the dependencies of later writers on an ``rrs`` that stem only from
the store (and the send's read) it no longer does.

A send is fused only when the receive is its sole predecessor (so fusing
cannot create a cycle), when the user's channels of the two messages agree
(a fused chain runs on one channel), and when the chain's fused
instructions keep, per rank, one receive peer per send peer and vice versa
(else no channel could hold the chain; GC3 §5's connection rules).
"""

from __future__ import annotations

from .instruction_dag import InstructionDAG, Node, depths
from .trace import Loc


class _Chains:
    """Union-find over communication edges joined by fused instructions,
    with the user channel each chain is pinned to (None: free)."""

    def __init__(self, idag: InstructionDAG):
        self.parent = list(range(len(idag.comm)))
        self.channel = [e.channel for e in idag.comm]
        self.lane = [(e.lane, e.lanes) for e in idag.comm]
        # per chain: (rank, send peer) -> recv peer and (rank, recv peer) -> send peer of its fused instructions
        self.pairs: dict[int, tuple[dict, dict]] = {}

    def find(self, a: int) -> int:
        while self.parent[a] != a:
            self.parent[a] = self.parent[self.parent[a]]
            a = self.parent[a]
        return a

    def compatible(self, a: int, b: int) -> bool:
        ca, cb = self.channel[self.find(a)], self.channel[self.find(b)]
        if self.lane[a] != self.lane[b]:
            return False
        return ca is None or cb is None or ca == cb

    def consistent(self, a: int, b: int, rank: int, p: int, q: int) -> bool:
        """Whether joining the chains of ``a`` and ``b`` with a fused
        instruction p -> rank -> q leaves one valid channel possible: on each
        rank, every send peer paired with one receive peer and vice versa."""
        ra, rb = self.find(a), self.find(b)
        outs, ins = {(rank, q): p}, {(rank, p): q}
        for root in {ra, rb}:
            o, i = self.pairs.get(root, ({}, {}))
            for table, other in ((outs, o), (ins, i)):
                for key, value in other.items():
                    if table.setdefault(key, value) != value:
                        return False
        return True

    def union(self, a: int, b: int, rank: int, p: int, q: int) -> None:
        ra, rb = self.find(a), self.find(b)
        outs, ins = self.pairs.pop(ra, ({}, {}))
        if ra != rb:
            self.parent[rb] = ra
            if self.channel[ra] is None:
                self.channel[ra] = self.channel[rb]
            o, i = self.pairs.pop(rb, ({}, {}))
            outs.update(o)
            ins.update(i)
        outs[(rank, q)] = p
        ins[(rank, p)] = q
        self.pairs[ra] = (outs, ins)


def _slot_uses(
    idag: InstructionDAG, live_out: set[Loc] | frozenset[Loc] | None = None
) -> tuple[dict[int, set[int]], dict[int, bool]]:
    """For every writing node: the nodes reading its result (before the slot
    is overwritten), and whether every slot it wrote is dead afterwards:
    overwritten later, or (with ``live_out``) never overwritten and not in
    ``live_out``."""
    readers: dict[int, set[int]] = {}
    overwritten: dict[int, bool] = {}
    last: dict[Loc, int] = {}
    pending: dict[int, int] = {}
    for n in sorted(idag.alive(), key=lambda n: (n.pos, n.id)):
        for loc in n.reads():
            w = last.get(loc)
            if w is not None and w != n.id:
                readers.setdefault(w, set()).add(n.id)
        writes = n.writes()
        for loc in writes:
            w = last.get(loc)
            if w is not None and w != n.id:
                pending[w] -= 1
            last[loc] = n.id
        if writes:
            pending[n.id] = len(writes)
    if live_out is not None:
        for loc, w in last.items():
            if loc not in live_out:
                pending[w] -= 1
    for w, left in pending.items():
        overwritten[w] = left == 0
    return readers, overwritten


def fuse(
    idag: InstructionDAG,
    *,
    live_out: set[Loc] | frozenset[Loc] | None = None,
    fan_out: bool = True,
    prune: bool = False,
) -> InstructionDAG:
    """Rewrite ``idag`` in place with fused instructions; returns it. The
    defaults are GC3's rules; see the module docstring for ``live_out`` and
    ``fan_out``.

    Ring Allreduce on P = 4 ranks: the 12 receive-reduce-copy and 24 send
    instructions of the unfused Program become P send, P(P-2) rrs, P rrcs,
    P(P-2) rcs and P recv (GC3 §5.2):

    >>> from collections import Counter
    >>> from simcoll.algorithms import generate
    >>> from simcoll.compiler import lower_algorithm
    >>> ring = generate("ring", "ring:4", "allreduce")
    >>> def ops(program):
    ...     return sorted(Counter(i.op for r in program.ranks for e in r.executors for i in e.instructions).items())
    >>> ops(lower_algorithm(ring, machine="ring:4", fusion=False))
    [('recv', 12), ('rrc', 12), ('send', 24)]
    >>> ops(lower_algorithm(ring, machine="ring:4"))
    [('rcs', 8), ('recv', 4), ('rrcs', 4), ('rrs', 8), ('send', 4)]
    """
    _, rdepth = depths(idag)
    readers, overwritten = _slot_uses(idag, live_out)
    chains = _Chains(idag)
    nodes = idag.nodes
    for r in sorted(idag.alive(), key=lambda n: (n.pos, n.id)):
        if not r.alive or r.op not in ("recv", "rrc"):
            continue
        candidates = [
            s
            for s in (nodes[i] for i in r.succs)
            if s.alive
            and s.op == "send"
            and s.preds == {r.id}
            and s.src == r.dst
            and s.count == r.count
            and (s.tb_hint is None or r.tb_hint is None or s.tb_hint == r.tb_hint)
            and chains.compatible(r.recv_edge, s.send_edge)
            and chains.consistent(r.recv_edge, s.send_edge, r.rank, r.recv_peer, s.send_peer)
        ]
        if not candidates:
            continue
        s = max(candidates, key=lambda n: (rdepth[n.id], -n.pos, -n.id))
        if not fan_out and not readers.get(r.id, set()) <= {s.id}:
            continue
        if r.op == "recv":
            r.op = "rcs"
        elif readers.get(r.id, set()) <= {s.id} and overwritten.get(r.id, False):
            r.op = "rrs"
        else:
            r.op = "rrcs"
        _merge(idag, r, s)
        if prune and r.op == "rrs":
            _unstore(idag, r)
        chains.union(r.recv_edge, r.send_edge, r.rank, r.recv_peer, r.send_peer)
    return idag


def _unstore(idag: InstructionDAG, n: Node) -> None:
    """``n`` became an ``rrs``: it no longer writes its destination, nor
    does a separate send read it. Successors that waited only to overwrite
    those slots wait for ``n``'s predecessors instead (keeping the order
    with earlier writers and readers); those overwriting the slots ``n``
    reads keep waiting for it."""
    reads = set(n.reads())
    preds = set(n.preds)
    for t in list(n.succs):
        succ = idag.nodes[t]
        if reads & set(succ.writes()):
            continue
        n.succs.discard(t)
        succ.preds.discard(n.id)
        for q in preds:
            idag.nodes[q].succs.add(t)
            succ.preds.add(q)


def _merge(idag: InstructionDAG, r: Node, s: Node) -> None:
    r.send_peer, r.send_edge = s.send_peer, s.send_edge
    if r.tb_hint is None:
        r.tb_hint = s.tb_hint
    idag.comm[s.send_edge].send_node = r.id
    r.succs.discard(s.id)
    for t in s.succs:
        idag.nodes[t].preds.discard(s.id)
        idag.nodes[t].preds.add(r.id)
        r.succs.add(t)
    s.alive = False
    s.preds, s.succs = set(), set()

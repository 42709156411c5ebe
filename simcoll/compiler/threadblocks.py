"""Pass 5: thread-block assignment (GC3 §5.2, "Thread block assignment"),
with the bound on outstanding sends per connection (GC3 §6.1).

1. Thread blocks are created per connection: a thread block owns the
   outgoing connection (peer, channel) and/or the incoming one; a fused
   instruction's two connections share one (channel assignment made these
   pairings a matching), and so do an unpaired send and receive connection
   with the same peer (as MSCCL's all-pairs XML: ``send = recv``), which
   saves thread blocks. With ``share_peer_blocks=False`` that last sharing
   is off: such a send and receive get a thread block each. A thread block
   runs its whole list once per tile (GC3 Fig. 5), so on a shared block the
   send of tile t+1 waits for the receive of tile t; when that receive
   depends on the send (a tree's leaf sends its contribution up and
   receives the result back) every tile makes the round trip before the
   next one leaves, and tiles do not pipeline.
2. Instructions are sorted into one global order with a heap, lower
   dependency depth first and higher reverse depth second (GC3 §5.2 steps
   2–4), trace position last.
3. In that order each instruction is appended to its thread block; a local
   instruction goes to the rank's thread block whose latest instruction is
   earliest in the order (step 5).

The global order is also a valid execution of the final Program: it
respects every processing and communication edge, receives on a connection
are emitted in the order of its sends (messages match in FIFO order), and
a send is emitted only while fewer than ``fifo_slots`` messages are
outstanding on its connection. Every thread block's list is a subsequence
of that order, so the Program has an execution that completes with bounded
FIFOs; as the Program is a deterministic network of sequential thread
blocks with blocking receives, bounded sends and monotone semaphores, every
execution completes: no deadlock (GC3 §5.2, §6.1).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from ..cost_model import DEFAULT_FIFO_SLOTS
from .channels import connection_pairs
from .instruction_dag import InstructionDAG, Node, depths
from .trace import CompileError


@dataclass
class ThreadBlock:
    """A thread block being filled: peers, channel and node ids in order."""

    rank: int
    key: int
    send_peer: int | None = None
    recv_peer: int | None = None
    channel: int | None = None
    hint: int | None = None
    nodes: list[int] = field(default_factory=list)
    id: int = -1


@dataclass
class Schedule:
    """The global order and the thread blocks of every rank."""

    order: list[int]
    blocks: list[list[ThreadBlock]]
    block_of: dict[int, ThreadBlock]


def _conns(idag: InstructionDAG, n: Node) -> list[tuple[str, int, int]]:
    out = []
    if n.send_edge is not None:
        out.append(("out", idag.comm[n.send_edge].channel, n.send_peer))
    if n.recv_edge is not None:
        out.append(("in", idag.comm[n.recv_edge].channel, n.recv_peer))
    return out


def _create_blocks(
    idag: InstructionDAG, share_peer_blocks: bool = True
) -> tuple[list[list[ThreadBlock]], dict[int, ThreadBlock]]:
    blocks: list[list[ThreadBlock]] = [[] for _ in range(idag.num_ranks)]
    owner: dict[tuple[int, str, int, int], ThreadBlock] = {}
    by_hint: dict[tuple[int, int], ThreadBlock] = {}
    pairs = connection_pairs(idag)
    block_of: dict[int, ThreadBlock] = {}

    def new(rank: int, hint: int | None = None) -> ThreadBlock:
        tb = ThreadBlock(rank, len(blocks[rank]), hint=hint)
        blocks[rank].append(tb)
        if hint is not None:
            by_hint[(rank, hint)] = tb
        return tb

    def bind(tb: ThreadBlock, n: Node, conns) -> None:
        for direction, ch, peer in conns:
            attr = "send_peer" if direction == "out" else "recv_peer"
            if getattr(tb, attr) not in (None, peer) or tb.channel not in (None, ch):
                raise CompileError(
                    f"rank {n.rank} thread block {tb.hint if tb.hint is not None else tb.key} cannot both "
                    f"{'send to' if direction == 'out' else 'receive from'} rank {peer} on channel {ch} and keep "
                    f"send peer {tb.send_peer}, receive peer {tb.recv_peer}, channel {tb.channel}"
                    + (f" (at {n.where})" if n.where else "")
                )
            setattr(tb, attr, peer)
            tb.channel = ch
            owner[(n.rank, direction, ch, peer)] = tb

    for n in sorted(idag.alive(), key=lambda n: (n.pos, n.id)):
        conns = _conns(idag, n)
        if not conns:
            continue
        # a pure send or receive joins the block its connection is paired into
        table = pairs.get((n.rank, conns[0][1]), {})
        if len(conns) == 1:
            direction, ch, peer = conns[0]
            other = table.get((direction, peer))
            if other is not None:
                conns = conns + [("in" if direction == "out" else "out", ch, other)]
        owners = {id(owner[(n.rank, *c)]): owner[(n.rank, *c)] for c in conns if (n.rank, *c) in owner}
        if len(owners) > 1:
            raise CompileError(f"rank {n.rank}: an instruction's connections belong to two thread blocks ({n.where})")
        if share_peer_blocks and not owners and n.tb_hint is None and len(conns) == 1:
            # an unpaired connection shares the block of the opposite, unpaired one with the same peer
            direction, ch, peer = conns[0]
            opposite = owner.get((n.rank, "in" if direction == "out" else "out", ch, peer))
            if opposite is not None and opposite.hint is None and (direction, peer) not in table:
                if getattr(opposite, "send_peer" if direction == "out" else "recv_peer") is None:
                    owners = {id(opposite): opposite}
        if owners:
            tb = next(iter(owners.values()))
        elif n.tb_hint is not None:
            tb = by_hint.get((n.rank, n.tb_hint)) or new(n.rank, n.tb_hint)
        else:
            tb = new(n.rank)
        if n.tb_hint is not None and tb.hint not in (None, n.tb_hint):
            raise CompileError(
                f"rank {n.rank}: the hint sendtb/recvtb={n.tb_hint} conflicts with thread block {tb.hint}, which "
                f"already owns the connection ({n.where})"
            )
        bind(tb, n, conns)
        block_of[n.id] = tb
    for n in idag.alive():
        if n.id not in block_of and n.tb_hint is not None:
            block_of[n.id] = by_hint.get((n.rank, n.tb_hint)) or new(n.rank, n.tb_hint)
    for rank, tbs in enumerate(blocks):
        if not tbs and any(n.rank == rank for n in idag.alive()):
            new(rank)
    return blocks, block_of


def _order(idag: InstructionDAG, key, fifo_slots: int) -> list[int] | None:
    """A global order by ``key`` under the FIFO-matching and slot
    constraints, or None when the greedy order gets stuck."""
    nodes = idag.nodes
    alive = idag.alive()
    indeg = {n.id: len(idag.predecessors(n)) for n in alive}
    heap = [(key(n), n.id) for n in alive if indeg[n.id] == 0]
    heapq.heapify(heap)
    queue: dict[tuple[int, int, int], list[int]] = {}  # connection -> recv nodes of sent messages, FIFO
    head: dict[tuple[int, int, int], int] = {}
    parked_recv: set[int] = set()
    parked_send: dict[tuple[int, int, int], list[int]] = {}
    order: list[int] = []

    def conn(e) -> tuple[int, int, int]:
        return (e.src_rank, e.dst_rank, e.channel)

    def push(i: int) -> None:
        heapq.heappush(heap, (key(nodes[i]), i))

    while heap:
        _, i = heapq.heappop(heap)
        n = nodes[i]
        if n.recv_edge is not None:
            c = conn(idag.comm[n.recv_edge])
            q = queue[c]
            if q[head.get(c, 0)] != i:
                parked_recv.add(i)
                continue
        if n.send_edge is not None:
            c = conn(idag.comm[n.send_edge])
            if len(queue.get(c, ())) - head.get(c, 0) >= fifo_slots:
                parked_send.setdefault(c, []).append(i)
                continue
        order.append(i)
        if n.recv_edge is not None:
            c = conn(idag.comm[n.recv_edge])
            head[c] = head.get(c, 0) + 1
            if head[c] < len(queue[c]) and queue[c][head[c]] in parked_recv:
                parked_recv.discard(queue[c][head[c]])
                push(queue[c][head[c]])
            if parked_send.get(c):
                push(parked_send[c].pop(0))
        if n.send_edge is not None:
            e = idag.comm[n.send_edge]
            queue.setdefault(conn(e), []).append(e.recv_node)
        for s in idag.successors(n):
            indeg[s] -= 1
            if indeg[s] == 0:
                push(s)
    return order if len(order) == len(alive) else None


def assign_threadblocks(
    idag: InstructionDAG, fifo_slots: int = DEFAULT_FIFO_SLOTS, *, share_peer_blocks: bool = True
) -> Schedule:
    """Order the instructions and give each a thread block (see the module
    docstring; ``share_peer_blocks`` is its step 1's last rule). Raises :class:`CompileError` if no order meets the
    constraints (neither by GC3's priorities nor in trace order)."""
    if fifo_slots < 1:
        raise CompileError(f"fifo_slots must be >= 1, got {fifo_slots}")
    depth, rdepth = depths(idag)
    order = _order(idag, lambda n: (depth[n.id], -rdepth[n.id], n.pos, n.id), fifo_slots)
    if order is None:
        order = _order(idag, lambda n: (n.pos, n.id), fifo_slots)
    if order is None:
        raise CompileError(
            f"cannot order the instructions so that messages match in FIFO order with {fifo_slots} slot(s) "
            "per connection; use fewer outstanding sends per connection or more channels"
        )
    blocks, block_of = _create_blocks(idag, share_peer_blocks)
    latest: dict[int, int] = {}  # id(tb) -> position of its latest instruction
    for pos, i in enumerate(order):
        n = idag.nodes[i]
        tb = block_of.get(i)
        if tb is None:
            tb = min(blocks[n.rank], key=lambda b: (latest.get(id(b), -1), b.key))
            block_of[i] = tb
        tb.nodes.append(i)
        latest[id(tb)] = pos
    # ids: hinted blocks keep theirs, the others take the lowest free ids in creation order
    for tbs in blocks:
        used = {b.hint for b in tbs if b.hint is not None}
        nxt = 0
        for b in tbs:
            if b.hint is not None:
                b.id = b.hint
                continue
            while nxt in used:
                nxt += 1
            b.id = nxt
            used.add(nxt)
        tbs.sort(key=lambda b: b.id)
    return Schedule(order, blocks, block_of)

"""Pass 4: channel assignment (GC3 §5.2, "Channel assignment").

Every communication edge gets a channel. Edges the user placed keep their
channel; a chain of edges joined by fused instructions shares one channel
(one thread block runs the chain's instruction on each rank); every other
edge goes to the lowest *valid* channel. Replica j of an s-way replicated
op (instances, ``parallelize``) only takes channels ``c·s + j``, so replicas
never share a connection (GC3 §5.1).

Validity follows from the connection rules (GC3 §5: a thread block has at
most one send and one receive peer; a connection has one sending and one
receiving thread block): on a rank and channel, the thread block sending to
peer q must be the one that also receives from p for every fused
instruction (p → rank → q). So per rank and channel the pairs (p, q) of
fused instructions must form a matching; a chain takes the lowest channel
where adding its pairs keeps every matching.
"""

from __future__ import annotations

from .instruction_dag import InstructionDAG
from .trace import CompileError

#: Channels tried for one chain before giving up.
MAX_CHANNELS = 64


def assign_channels(idag: InstructionDAG) -> InstructionDAG:
    """Set ``channel`` on every communication edge of ``idag`` (in place)."""
    parent = list(range(len(idag.comm)))

    def find(a: int) -> int:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    fused = [n for n in idag.alive() if n.recv_edge is not None and n.send_edge is not None]
    for n in fused:
        parent[find(n.send_edge)] = find(n.recv_edge)
    groups: dict[int, list[int]] = {}
    for e in idag.comm:
        groups.setdefault(find(e.id), []).append(e.id)
    pairs_of: dict[int, list[tuple[int, int, int, str]]] = {}
    for n in fused:
        pairs_of.setdefault(find(n.recv_edge), []).append((n.rank, n.recv_peer, n.send_peer, n.where))
    out_pair: dict[tuple[int, int, int], int] = {}  # (rank, channel, send peer) -> recv peer
    in_pair: dict[tuple[int, int, int], int] = {}  # (rank, channel, recv peer) -> send peer

    def fits(pairs, c: int) -> bool:
        tmp_out: dict[tuple[int, int, int], int] = {}
        tmp_in: dict[tuple[int, int, int], int] = {}
        for rank, p, q, _ in pairs:
            for table, tmp, key, want in (
                (out_pair, tmp_out, (rank, c, q), p),
                (in_pair, tmp_in, (rank, c, p), q),
            ):
                have = table.get(key, tmp.get(key))
                if have is not None and have != want:
                    return False
                tmp[key] = want
        return True

    for root in sorted(groups, key=lambda g: min(groups[g])):
        members = groups[root]
        fixed = {idag.comm[e].channel for e in members} - {None}
        pairs = pairs_of.get(root, [])
        if len(fixed) > 1:
            raise CompileError(f"a fused chain mixes channels {sorted(fixed)} (at {pairs[0][3] if pairs else '?'})")
        lane, lanes = idag.comm[members[0]].lane, idag.comm[members[0]].lanes
        options = sorted(fixed) if fixed else [c * lanes + lane for c in range(MAX_CHANNELS)]
        for c in options:
            if fits(pairs, c):
                break
        else:
            where = pairs[0][3] if pairs else ""
            raise CompileError(
                f"no channel satisfies the connection rules for the fused chain starting at {where or 'an instruction'}"
                + (f" (the user fixed channel {sorted(fixed)[0]})" if fixed else "")
            )
        for rank, p, q, _ in pairs:
            out_pair[(rank, c, q)] = p
            in_pair[(rank, c, p)] = q
        for e in members:
            idag.comm[e].channel = c
    return idag


def connection_pairs(idag: InstructionDAG) -> dict[tuple[int, int], dict[tuple[str, int], int]]:
    """Per (rank, channel): which send peer is paired with which receive peer
    by fused instructions, as {("out", q): p, ("in", p): q}."""
    out: dict[tuple[int, int], dict[tuple[str, int], int]] = {}
    for n in idag.alive():
        if n.recv_edge is not None and n.send_edge is not None:
            c = idag.comm[n.send_edge].channel
            table = out.setdefault((n.rank, c), {})
            table[("out", n.send_peer)] = n.recv_peer
            table[("in", n.recv_peer)] = n.send_peer
    return out

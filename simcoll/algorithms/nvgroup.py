"""NVGroup algorithms (NV-Group, Chu et al., ICS'20, §4): NVLink groups, the
cooperative load-reduce-store within a group, the ring across groups, and the
CPU-driven path for small messages.

An **NVLink group** (§4.1) is a maximal set of GPUs, with the CPU when it
belongs, fully connected by NVLink-type fabric links, so that every member
reaches every other (and the group's system memory) over a dedicated link.
Summit has two per node (3 GPUs + a POWER9 each), a DGX-2 or DGX-A100 one (the
NVSwitches join all its GPUs), a DGX-1 two (the fully connected quads of its
hybrid cube-mesh).

How the paper's design maps onto an :class:`~simcoll.algorithm.Algorithm`,
whose ranks are GPUs and whose chunks have one slot per rank: the group's
**leader** (its lowest rank) stands for the group's shared system memory and
for the CPU process that drives the network, as in Algorithm 2. What the paper
stores into system memory is copied to the leader; what a group receives over
the network is reduced into the leader, portion by portion, the NV_G portion
reductions running concurrently as the NV_G GPUs run them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from ..algorithm import Algorithm, TransferTable
from ..collectives import Collective
from ..errors import NotApplicableError
from ..program import Executor, Instruction, Program, RankProgram, Ref
from ..routes import Routes, routes_of
from ..topology import FABRIC_LINK_TYPES, Topology, directed_pairs
from .common import block_chunks, finish, implements
from .registry import Generator, Option

NAME = "nvgroup-ring"
CPU_PATH_NAME = "nvgroup-cpu"
#: §4.4.2: the CPU reduces in system memory "when the data chunk is too small,
#: e.g., ≤ 16KB, for each NVGroup to saturate NVLink" (read as 16 KiB per group).
CPU_PATH_MAX_BYTES = 16 * 1024
# Components an NVLink may cross between two group members (NVSwitch planes,
# or the generic switch of generated hub-and-spoke machines).
_FABRIC_SWITCH_KINDS = ("nvswitch", "switch")


# ---------------------------------------------------------------------------
# NVLink discovery and grouping (§4.1)
# ---------------------------------------------------------------------------
@dataclass(frozen=True)
class NVGroup:
    """GPU ``ranks`` (ascending) fully connected by NVLink, the ``cpu``
    component NVLinked to all of them (or None), and their ``node`` (None if
    they span nodes)."""

    ranks: tuple[int, ...]
    cpu: str | None = None
    node: int | None = 0

    @property
    def leader(self) -> int:
        """The rank whose CPU process drives the group's network transfers."""
        return self.ranks[0]

    @property
    def size(self) -> int:
        return len(self.ranks)


def _nvlink_neighbours(topology: Topology) -> dict[str, set[str]]:
    """For every GPU and CPU, the GPUs and CPUs it reaches over fabric links
    alone, either directly or through NVSwitches only (never through another
    GPU or CPU), in both directions."""
    kinds = {c.name: c.kind for c in topology.components}
    out: dict[str, set[str]] = {name: set() for name in kinds}
    for link in topology.links:
        if link.type in FABRIC_LINK_TYPES:
            for a, b in directed_pairs(link):
                out[a].add(b)

    def reach(start: str) -> set[str]:
        seen, stack, found = {start}, [start], set()
        while stack:
            for nxt in out[stack.pop()]:
                if nxt in seen:
                    continue
                seen.add(nxt)
                if kinds[nxt] in _FABRIC_SWITCH_KINDS:
                    stack.append(nxt)
                elif kinds[nxt] in ("gpu", "cpu"):
                    found.add(nxt)
        return found

    ends = [name for name, kind in kinds.items() if kind in ("gpu", "cpu")]
    forward = {name: reach(name) for name in ends}
    return {a: {b for b in forward[a] if a in forward[b]} for a in ends}


def nvlink_groups(topology: Topology) -> list[NVGroup]:
    """NV-Group §4.1: partition the GPUs into NVLink groups, ordered by leader.

    Two GPUs are NVLinked when a fabric link (NVLink, xGMI, ...) joins them,
    directly or through NVSwitches. Groups are taken greedily as the largest
    fully connected set among the GPUs not yet grouped (ties: lowest ranks), so
    a GPU with no NVLink peer is a group of its own. A CPU joins the first group
    all of whose GPUs it is NVLinked to.

    >>> from simcoll import load_topology
    >>> [(g.ranks, g.cpu) for g in nvlink_groups(load_topology("summit"))]
    [((0, 1, 2), 'cpu0'), ((3, 4, 5), 'cpu1')]
    >>> [g.ranks for g in nvlink_groups(load_topology("dgx1"))]
    [(0, 1, 2, 3), (4, 5, 6, 7)]
    """
    import networkx as nx

    neighbours = _nvlink_neighbours(topology)
    rank_of = {g.name: g.rank for g in topology.gpus}
    graph = nx.Graph()
    graph.add_nodes_from(range(topology.num_ranks))
    graph.add_edges_from((rank_of[a], rank_of[b]) for a in rank_of for b in neighbours[a] if b in rank_of)
    remaining = set(graph)
    cliques = []
    while remaining:
        best = min(nx.find_cliques(graph.subgraph(remaining)), key=lambda c: (-len(c), sorted(c)))
        cliques.append(tuple(sorted(best)))
        remaining -= set(best)
    cliques.sort()
    cpus: dict[tuple[int, ...], str] = {}
    for cpu in (c.name for c in topology.components if c.kind == "cpu"):
        reached = {rank_of[n] for n in neighbours[cpu] if n in rank_of}
        for clique in cliques:
            if clique not in cpus and set(clique) <= reached:
                cpus[clique] = cpu
                break
    groups = []
    for clique in cliques:
        nodes = {topology.node_of(r) for r in clique}
        groups.append(NVGroup(clique, cpus.get(clique), nodes.pop() if len(nodes) == 1 else None))
    return groups


def _ring_groups(topology: Topology, routes: Routes) -> list[NVGroup]:
    """The NVLink groups, checked to be usable by the group ring."""
    groups = nvlink_groups(topology)
    sizes = sorted({g.size for g in groups})
    if len(sizes) > 1:
        listing = ", ".join(str(list(g.ranks)) for g in groups)
        raise NotApplicableError(
            f"{NAME}: the NVLink groups of {topology.name} have unequal sizes {sizes} ({listing}); "
            "the group ring needs equal groups"
        )
    if sizes[0] < 2:
        raise NotApplicableError(
            f"{NAME}: no two GPUs of {topology.name} are joined by NVLink, so every NVLink group is one GPU "
            "and there is nothing to reduce cooperatively (use ring)"
        )
    hops = zip(groups, groups[1:] + groups[:1], strict=True) if len(groups) > 1 else ()
    for a, b in hops:
        if not routes.connected(a.leader, b.leader):
            raise NotApplicableError(
                f"{NAME}: {topology.name} has no route from group leader {a.leader} to group leader {b.leader}"
            )
    return groups


# ---------------------------------------------------------------------------
# The GPU-driven schedule (§4.2-4.3, Algorithm 2)
# ---------------------------------------------------------------------------
Slot = tuple[int, int]  # (position of the reducing GPU in its group, sub-chunk index)


def _portion(collective: Collective, rank: int) -> list[int]:
    """The chunks rank ``rank`` ends up owning: what it reduces (ReduceScatter,
    Allreduce) or contributes (Allgather)."""
    if collective.name == "allgather":
        return list(collective.input_layout[rank])
    return block_chunks(collective, rank)


class _Schedule:
    """Builds the transfers of one NVGroup collective; see :func:`nvgroup_ring`."""

    def __init__(self, collective: Collective, groups: list[NVGroup], pipeline: bool):
        self.collective = collective
        self.groups = [g.ranks for g in groups]
        self.n = len(groups)
        self.m = groups[0].size
        # the transfers as columns (chunk, src, dst, reduces, step): millions on 1,024 GPUs
        self.columns: tuple[list[int], list[int], list[int], list[bool], list[int]] = ([], [], [], [], [])
        self.portions = [[_portion(collective, r) for r in g] for g in self.groups]
        depth = max(len(portion) for group in self.portions for portion in group)
        # The order in which a leader holds the chunks of its first block: its
        # own portion first (it has no store to wait for), then the others'.
        self.first = [(0, i) for i in range(depth)] + [(k, i) for i in range(depth) for k in range(1, self.m)]
        # orders[s]: the order ring step s sends a block in (see nvgroup_ring).
        self.orders = [self.first if pipeline else self.first[::-1]]
        for _ in range(2 * self.n):
            self.orders.append(self.first if pipeline else self.orders[-1][::-1])

    def block(self, b: int, order: list[Slot]) -> Iterator[tuple[Slot, int]]:
        """The chunks of group ``b``'s block, as ``((k, i), chunk)`` in ``order``."""
        portions = self.portions[b]
        for k, i in order:
            if i < len(portions[k]):
                yield (k, i), portions[k][i]

    def add(self, chunk: int, src: int, dst: int, op: str, step: int) -> None:
        chunks, sources, destinations, reduces, steps = self.columns
        chunks.append(chunk)
        sources.append(src)
        destinations.append(dst)
        reduces.append(op == "reduce")
        steps.append(step)

    @property
    def transfers(self) -> TransferTable:
        chunk, src, dst, reduce, step = self.columns
        return TransferTable(chunk, src, dst, reduce, step=step)

    def leader(self, g: int) -> int:
        return self.groups[g % self.n][0]

    # -- within a group -------------------------------------------------------
    def load_reduce(self, g: int, b: int, step: int) -> None:
        """Each GPU k of group g loads its portion of block b from its peers and reduces it."""
        members = self.groups[g]
        for (k, _), chunk in self.block(b, self.first):
            for j in range(self.m):
                if j != k:
                    self.add(chunk, members[j], members[k], "reduce", step)

    def store_to_leader(self, g: int, b: int, step: int) -> None:
        members = self.groups[g]
        for (k, _), chunk in self.block(b, self.first):
            if k != 0:
                self.add(chunk, members[k], members[0], "copy", step)

    def store_to_group(self, g: int, b: int, step: int) -> None:
        """Each GPU k writes its portion of block b into every peer (Algorithm 1's STORE-TO-GROUP)."""
        members = self.groups[g]
        for (k, _), chunk in self.block(b, self.first):
            for j in range(self.m):
                if j != k:
                    self.add(chunk, members[k], members[j], "copy", step)

    def from_leader(self, g: int, b: int, order: list[Slot], step: int, to_owner_only: bool = False) -> None:
        """The group's GPUs pull block b from system memory (GROUP-BCAST), or
        only the portion each one owns (the end of a ReduceScatter)."""
        members = self.groups[g]
        for (k, _), chunk in self.block(b, order):
            for j in range(1, self.m):
                if not to_owner_only or j == k:
                    self.add(chunk, members[0], members[j], "copy", step)

    # -- across groups --------------------------------------------------------------
    def ring_step(self, g: int, b: int, order: list[Slot], op: str, step: int) -> None:
        for _, chunk in self.block(b, order):
            self.add(chunk, self.leader(g), self.leader(g + 1), op, step)

    def reducescatter(self, first_ring_step: int) -> None:
        """Step 3 then Step 4 of Algorithm 2. Group g pre-reduces the blocks in
        the order the ring needs them (block g-1 first: it sends it at once) and
        stores each at its leader; then N-1 ring steps, each leader forwarding
        the block it has just completed. The ring step s of group g sends block
        g-s-1 and reduces into the one it receives, block g-s-2."""
        for g in range(self.n):
            for t in range(self.n):
                self.load_reduce(g, (g - 1 - t) % self.n, 2 * t)
                self.store_to_leader(g, (g - 1 - t) % self.n, 2 * t + 1)
        for s in range(self.n - 1):
            for g in range(self.n):
                self.ring_step(g, (g - s - 1) % self.n, self.orders[s], "reduce", first_ring_step + s)

    def allgather(self, first_ring_step: int, first_order: int) -> None:
        """Step 5 of Algorithm 2: N-1 ring steps; step s of group g forwards
        block g-s, and the group's GPUs pull every block its leader receives
        (and, after a ReduceScatter, its own) in the order it arrived."""
        for s in range(self.n - 1):
            for g in range(self.n):
                self.ring_step(g, (g - s) % self.n, self.orders[first_order + s], "copy", first_ring_step + s)
        for s in range(0 if first_order else 1, self.n):
            arrived = self.orders[first_order + s - 1]
            for g in range(self.n):
                self.from_leader(g, (g - s) % self.n, arrived, first_ring_step + s)


@implements(NAME, ("allreduce", "reducescatter", "allgather"))
def nvgroup_ring(topology: Topology, collective: Collective, pipeline: bool = False) -> Algorithm:
    """NVGroup ring Allreduce (NV-Group §4.2-4.3, Algorithm 2), and its
    ReduceScatter and Allgather halves, over the NVLink groups of
    :func:`nvlink_groups` (N_nv groups of NV_G GPUs, ring in leader order).

    The buffer is cut into N_nv blocks of NV_G portions; portion k of every
    block is reduced by the group's k-th GPU (chunk factor N_nv·NV_G = P
    for Allreduce, the default, gives one chunk per portion).

    1. *Step 3*: in every group, each GPU loads its portion of a block from its
       peers over their NVLinks, reduces it, and stores it into system memory
       (the leader); the blocks are prepared in the order the ring needs them.
    2. *Step 4, ReduceScatter*: N_nv - 1 ring steps; the leader sends the block
       it has completed to the next group, whose GPUs reduce it portion-wise
       into their group's partial.
    3. *Step 5, Allgather*: N_nv - 1 ring steps of forwarding; the GPUs pull
       every block from the leader.

    A leader forwards a block only once all of it is there (Algorithm 2 line
    29): it sends the chunks in the reverse of their arrival order, so the
    first leaves when the last has arrived and the block crosses the link as one
    back-to-back burst. ``pipeline=True`` forwards each chunk as soon as it is
    reduced instead (§4.4.1's finer pipelining; useful with several chunks per
    portion). With one group, it is the cooperative kernel of §4.2 alone: load-
    reduce, then STORE-TO-GROUP.

    Cost (eqs. 7-10; n = M/(N_nv·NV_G), α_NV and B_NV an NVLink pair's α and
    bandwidth, t_s and B those of the slowest leader-to-leader route):
    eq. 7 = 2n/B_NV + T_R(n); eq. 8 = (N_nv-1)(t_s + M/(N_nv·B) + T_R(n));
    eq. 9 = (N_nv-1)(t_s + M/(N_nv·B)); eq. 10 = eq. 7 + eq. 8 + eq. 9.
    :func:`~simcoll.analytic.critical_path_time_s` gives exactly the following,
    with chunk factor P, on a machine whose intra-group pairs all have
    (α_NV, B_NV) and whose ring hops all have (t_s, B), when B_NV ≥ 2B
    (sufficient; it also holds on one Summit node, where B_NV/B = 50/32):

    - Allreduce: eq. 10 + 3α_NV + n/B_NV. Eq. 7 charges no set-up time to the
      NVLink load and store (2α_NV here), and eq. 10 leaves out the GPUs'
      pull of the last portion to arrive (α_NV + n/B_NV), which no schedule
      that leaves the result on every GPU can skip.
    - ReduceScatter: eq. 7 + eq. 8 + 2α_NV + the last portion's move to its
      owner: α_NV + n/B_NV for an odd N_nv; for an even N_nv the last to
      arrive is the leader's own and the tail is max(0, α_NV + n/B_NV - n/B).
    - Allgather: (α_NV + n/B_NV) + eq. 9 + (α_NV + n/B_NV), the first term the
      GPUs' store of their portion into system memory.
    - One group: Allreduce eq. 7 + 2α_NV, ReduceScatter α_NV + n/B_NV + T_R(n),
      Allgather α_NV + n/B_NV.

    Limits of that analytic model, which has no host memory and serialises
    transfers per rank pair, not per physical link: the leader doubles as
    system memory, so the pair (GPU k, leader) carries both the leader's load
    of its own portion and k's store, which Summit's separate GPU-to-CPU
    NVLinks do not share (hence B_NV ≥ 2B above); and the peers of an NVSwitch
    group (DGX-2) are charged as if each pair had the GPU's links to itself,
    so there the NVLink terms are optimistic by up to a factor NV_G - 1.

    >>> from simcoll import load_topology, make_collective
    >>> algo = nvgroup_ring(load_topology("summit"), make_collective("allreduce", 6, 6))
    >>> algo.metadata["groups"], algo.metadata["leaders"]
    ([[0, 1, 2], [3, 4, 5]], [0, 3])
    """
    routes = routes_of(topology)
    groups = _ring_groups(topology, routes)
    plan = _Schedule(collective, groups, pipeline)
    n = plan.n
    if n == 1:
        if collective.name == "allgather":
            plan.store_to_group(0, 0, 0)
        else:
            plan.load_reduce(0, 0, 0)
            if collective.name == "allreduce":
                plan.store_to_group(0, 0, 1)
    elif collective.name == "allgather":
        for g in range(n):
            plan.store_to_group(g, g, 0)
        plan.allgather(1, 0)
    else:
        ring_start = 2 * n  # after the pre-reduction of every block (Step 3)
        plan.reducescatter(ring_start)
        if collective.name == "allreduce":
            plan.allgather(ring_start + n - 1, n - 1)
        else:
            for g in range(n):
                plan.from_leader(g, g, plan.orders[n - 2], ring_start + n - 1, to_owner_only=True)
    return finish(
        NAME,
        collective,
        topology,
        plan.transfers,
        routes,
        groups=[list(g.ranks) for g in groups],
        leaders=[g.leader for g in groups],
        cpus=[g.cpu for g in groups],
        pipeline=pipeline,
    )


# ---------------------------------------------------------------------------
# The CPU-driven path for small messages (§4.4.2)
# ---------------------------------------------------------------------------
def _recursive_doubling_partners(count: int) -> list[list[tuple[str, int]]]:
    """Per participant 0..count-1, its exchanges in order, as ``(kind,
    partner)``: ``fold-send`` / ``fold-recv`` (the standard folding of the
    first 2·(count - 2^k) participants into pairs when count is not a power of
    two), ``exchange`` (recursive doubling) and ``unfold-send`` /
    ``unfold-recv`` (the result back to the folded-out ones)."""
    q = 1 << (count.bit_length() - 1)
    extra = count - q
    plans: list[list[tuple[str, int]]] = [[] for _ in range(count)]
    for i in range(2 * extra):
        plans[i].append(("fold-send", i + 1) if i % 2 == 0 else ("fold-recv", i - 1))

    def real(v: int) -> int:  # the participant holding virtual index v
        return 2 * v + 1 if v < extra else v + extra

    for v in range(q):
        for d in range(q.bit_length() - 1):
            plans[real(v)].append(("exchange", real(v ^ (1 << d))))
    for i in range(2 * extra):
        plans[i].append(("unfold-recv", i + 1) if i % 2 == 0 else ("unfold-send", i - 1))
    return plans


def _cpu_leader_program(
    group: NVGroup, leaders: list[int], exchanges: list[tuple[str, int]], chunks: int
) -> RankProgram:
    """The host threads of one group leader in :func:`nvgroup_cpu_allreduce`:
    executor 0 reduces the group's inputs into ``shm``, one executor per peer
    leader carries that peer's exchanges (an executor has one send and one
    receive peer), and the last writes the result into every member's output."""
    shm = Ref("shm", 0)
    sources = tuple(Ref("input", 0, None if r == group.leader else r) for r in group.ranks)
    steps: dict[int, list[Instruction]] = {}  # peer rank -> its executor's instructions
    executor_of: dict[int, int] = {}
    last = (0, 0)  # (executor, step) the next stage waits for
    for kind, peer_index in exchanges:
        peer = leaders[peer_index]
        eid = executor_of.setdefault(peer, 1 + len(executor_of))
        after = (last,)
        if kind in ("fold-send", "unfold-send"):
            new = [Instruction("send", src=shm, count=chunks, deps=after)]
        elif kind == "fold-recv":
            new = [Instruction("rrc", src=shm, dst=shm, count=chunks, deps=after)]
        elif kind == "unfold-recv":
            new = [Instruction("recv", dst=shm, count=chunks, deps=after)]
        else:  # exchange: send the partial, reduce the peer's into it
            new = [
                Instruction("send", src=shm, count=chunks, deps=after),
                Instruction("rrc", src=shm, dst=shm, count=chunks),
            ]
        steps.setdefault(peer, []).extend(new)
        last = (eid, len(steps[peer]) - 1)
    executors = [Executor(0, (Instruction("load_reduce", dst=shm, count=chunks, sources=sources),), kind="host")]
    executors += [Executor(executor_of[p], tuple(steps[p]), p, p, kind="host") for p in steps]
    puts = tuple(
        Instruction("put", src=shm, dst=Ref("output", 0, r), count=chunks, deps=(last,) if k == 0 else ())
        for k, r in enumerate(group.ranks)
    )
    executors.append(Executor(len(executors), puts, kind="host"))
    return RankProgram(group.leader, {"input": chunks, "output": chunks, "shm": chunks}, tuple(executors))


@implements(CPU_PATH_NAME, ("allreduce",))
def nvgroup_cpu_allreduce(topology: Topology, collective: Collective) -> Program:
    """CPU-driven Allreduce for small messages (NV-Group §4.4.2), as a Program
    whose executors are host threads: the GPUs launch no kernel at all.

    In every NVLink group, the leader's CPU process reads the group's GPU
    buffers (GDRCopy-style low-latency copies, §4.4.2 (2)) and reduces them
    into the group's system memory (``shm``) in one multi-source
    ``load_reduce``; the leaders then run a CPU recursive-doubling Allreduce
    among themselves (non-power-of-two counts folded the standard way), and
    each leader writes the result into its group's output buffers with ``put``.
    Groups may differ in size here. :func:`nvgroup_allreduce` picks this path
    below :data:`CPU_PATH_MAX_BYTES` per group.

    >>> from simcoll import load_topology, make_collective
    >>> prog = nvgroup_cpu_allreduce(load_topology("summit*2"), make_collective("allreduce", 12))
    >>> sorted({e.kind for r in prog.ranks for e in r.executors})
    ['host']
    """
    routes = routes_of(topology)
    groups = nvlink_groups(topology)
    leaders = [g.leader for g in groups]
    for a in leaders:
        for b in leaders:
            if a != b and not routes.connected(a, b):
                raise NotApplicableError(f"{CPU_PATH_NAME}: {topology.name} has no route from leader {a} to leader {b}")
    c = collective.num_chunks
    plans = _recursive_doubling_partners(len(groups))
    programs = {g.leader: _cpu_leader_program(g, leaders, plans[i], c) for i, g in enumerate(groups)}
    # The other GPUs run nothing: the leader's CPU reads and writes their buffers.
    rank_programs = tuple(
        programs.get(r, RankProgram(r, {"input": c, "output": c}, ())) for r in range(topology.num_ranks)
    )
    return Program(
        CPU_PATH_NAME,
        collective,
        rank_programs,
        topology=topology.name,
        metadata={
            "generator": CPU_PATH_NAME,
            "groups": [list(g.ranks) for g in groups],
            "leaders": leaders,
            "source": "NV-Group §4.4.2: CPU reduction in system memory, CPU recursive doubling across groups",
        },
    )


@implements("nvgroup", ("allreduce",))
def nvgroup_allreduce(
    topology: Topology,
    collective: Collective,
    size_bytes: float,
    cpu_path_max_bytes: float = CPU_PATH_MAX_BYTES,
    pipeline: bool = False,
) -> Algorithm | Program:
    """NV-Group's Allreduce for a ``size_bytes`` buffer: the CPU-driven
    :func:`nvgroup_cpu_allreduce` when each group's chunk ``size_bytes / N_nv``
    is at most ``cpu_path_max_bytes`` (§4.4.2: "≤ 16KB"), else the GPU-driven
    :func:`nvgroup_ring`.

    >>> from simcoll import load_topology, make_collective
    >>> topo, coll = load_topology("summit"), make_collective("allreduce", 6, 6)
    >>> type(nvgroup_allreduce(topo, coll, 8 << 10)).__name__, type(nvgroup_allreduce(topo, coll, 1 << 20)).__name__
    ('Program', 'Algorithm')
    """
    if size_bytes / len(nvlink_groups(topology)) <= cpu_path_max_bytes:
        return nvgroup_cpu_allreduce(topology, collective)
    return nvgroup_ring(topology, collective, pipeline=pipeline)


def _boolean(text: str) -> bool:
    values = {"true": True, "yes": True, "on": True, "1": True, "false": False, "no": False, "off": False, "0": False}
    if text.strip().lower() not in values:
        raise ValueError("expected true or false")
    return values[text.strip().lower()]


GENERATORS = (
    Generator(
        NAME,
        nvgroup_ring,
        nvgroup_ring.collectives,
        "NVGroup ring: cooperative load-reduce-store in NVLink groups, ring across group leaders (NV-Group eqs. 7-10)",
        {"pipeline": Option("forward each chunk as soon as it is reduced (§4.4.1) instead of whole blocks", _boolean)},
    ),
)

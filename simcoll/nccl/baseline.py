"""NCCL as the baseline: what NCCL would run on a simcoll machine, as an Algorithm.

:func:`nccl_comm` describes a :class:`~simcoll.machines.Machine` the way NCCL's
tuner sees a communicator (:class:`~simcoll.nccl.tuner.Comm`):

- the GPU generation (compute capability) from the topology's name,
  description or GPU models, matched against the patterns of
  ``machines.yaml``;
- nodes and GPUs per node from the topology;
- the ring graph's channels: NCCL's ring search duplicates its rings, ending
  with about two channels per NVLink of a GPU (``channels_per_nvlink``, capped
  at ``max_channels``), or per ring found where one node's GPUs are joined
  directly and fewer rings than links exist, or ``channels_pci`` channels
  where GPUs only meet over PCIe; across nodes with one NIC per GPU, a
  multiple of the NIC count, every rail carrying as many channels (search.cc,
  ``ncclTopoCompute``);
- per-channel bandwidths from the cost model's link rates: a GPU's NVLink (or
  PCIe) bandwidth shared by the channels inside a node, the node's NICs
  (the topology's ``network_link`` rate, one per NIC) shared by the channels
  across nodes;
- NVLink SHARP where the node's NVSwitches declare ``reduce`` and
  ``multicast`` (Hopper-class NVSwitch), CollNet where a fabric switch reduces.

:func:`nccl_choice` runs the tuner (:func:`simcoll.nccl.tuner.choose`) on that
description; :func:`nccl_algorithm` builds the Algorithm of the choice with
the registered generator of NCCL's algorithm (``nccl-ring``, ``nccl-tree``,
``nvls``, ``nvls-tree``, ``collnet``) and sets ``metadata["protocol"]`` (LL,
LL128 or Simple, which the simulator prices) and ``metadata["nccl_choice"]``
(the label, e.g. ``ring/LL128/24ch``); NVLS and NVLS-tree choices also carry
``metadata["step_pipeline"]``, the steps NCCL moves the buffer in
(:mod:`simcoll.nccl.pipeline`), which the simulator times. Where the chosen algorithm has no
generator in this simcoll, the best choice among the algorithms that have
one is used and ``metadata["nccl_fallback"]`` says so.

The ``nccl`` row depends on the buffer size (protocol and channel count
change with it), so it is not a size-independent registry generator:
:func:`simcoll.compare.compare` and the sweep runner call
:func:`nccl_algorithm` per size.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from ..algorithm import Algorithm
from ..errors import ModelError, NotApplicableError, OptionError, SimcollError
from ..machines import Machine, as_machine
from ..topology import FABRIC_LINK_TYPES, Topology
from .cache import cached_schedule
from .p2p import P2P_COLLECTIVES, nccl_p2p_algorithm, nccl_p2p_protocol
from .pipeline import PIPELINED_ALGORITHMS, pipeline, tree_pipeline
from .tuner import PROTOCOL_NAMES, TUNED_COLLECTIVES, ChannelLimits, Choice, Comm, Graph, choose
from .versions import NCCL_STEPS, NcclSetup, as_setup

MACHINES_FILE = Path(__file__).with_name("machines.yaml")

#: NCCL algorithm -> the simcoll generator that builds it.
GENERATOR_OF = {
    "ring": "nccl-ring",
    "tree": "nccl-tree",
    "nvls": "nvls",
    "nvls_tree": "nvls-tree",
    "collnet_direct": "collnet",
    "collnet_chain": "collnet",
}
#: NCCL's NVLink SHARP algorithms, which NCCL_NVLS_ENABLE=0 takes away.
NVLS_ALGORITHMS = ("nvls", "nvls_tree")
#: Collectives the ``nccl`` row has an Algorithm for: those NCCL's tuner
#: chooses for, and nccl-tests' point-to-point ones (:mod:`simcoll.nccl.p2p`).
BASELINE_COLLECTIVES = (*TUNED_COLLECTIVES, *P2P_COLLECTIVES)


@lru_cache(maxsize=2)
def _facts(path: str = str(MACHINES_FILE)) -> dict[str, Any]:
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ModelError(f"{path}: cannot read NCCL machine facts: {exc}") from None
    for key in ("gpus", "default_compute_capability", "channels_per_nvlink", "channels_pci", "max_channels"):
        if key not in data:
            raise ModelError(f"{path}: missing {key!r}")
    return data


@dataclass(frozen=True)
class NcclMachine:
    """What NCCL's tuner is told about a machine (module docstring).

    ``gpu_source`` says how the compute capability was found (the matched
    pattern, or that the default was assumed); ``nics_per_node`` counts the
    NICs of the first node.
    """

    comm: Comm
    compute_capability: int
    gpu_source: str
    num_nodes: int
    gpus_per_node: int
    intra: str
    intra_GBps: float
    nic_GBps: float
    nics_per_node: int = 0


def gpu_family(text: str) -> str | None:
    """The GPU family ``text`` (a device or topology name) names: the first
    pattern of ``machines.yaml`` it matches (e.g. A100 and A800 share one),
    or None when none does.

    >>> gpu_family("NVIDIA A100-SXM4-40GB") == gpu_family("A800"), gpu_family("Tesla V100-SXM2-16GB")
    (True, 'v100|volta|dgx-?1|dgx-?2|ndv2|summit')
    """
    entry = _gpu_entry(text)
    return None if entry is None else str(entry["pattern"])


def _gpu_entry(text: str) -> dict[str, Any] | None:
    """The first GPU entry of ``machines.yaml`` whose pattern ``text`` matches."""
    lowered = text.lower()
    return next((e for e in _facts()["gpus"] if re.search(e["pattern"], lowered)), None)


def topology_gpu_text(topology: Topology) -> str:
    """What names a topology's GPUs: its name, description and GPU models."""
    return " ".join(
        [topology.name, topology.description, *(g.model or "" for g in topology.gpus)]
        + [c.model or "" for c in topology.components if c.kind == "gpu"]
    )


def compute_capability(topology: Topology) -> tuple[int, str]:
    """The SM version of ``topology``'s GPUs and how it was found."""
    entry = _gpu_entry(topology_gpu_text(topology))
    if entry is not None:
        return int(entry["compute_capability"]), f"GPU matched {entry['pattern']!r} ({entry['source']})"
    cc = int(_facts()["default_compute_capability"])
    return cc, f"GPU generation unknown for {topology.name!r}: SM{cc} assumed"


def _gpu_links(topology: Topology, rank: int) -> dict[str, int]:
    """Link type -> link count at GPU ``rank``."""
    name = topology.gpu(rank).name
    counts: dict[str, int] = {}
    for link in topology.links:
        if name in (link.src, link.dst):
            counts[link.type] = counts.get(link.type, 0) + link.count
    return counts


def _rings_found(topology: Topology) -> int:
    """How many rings the ring search finds on a one-node topology (:func:`~simcoll.algorithms.ring.find_rings`)."""
    from ..algorithms.ring import find_rings

    try:
        return len(find_rings(topology))
    except NotApplicableError:
        return 1


def nic_path(topology: Topology, node: int) -> str:
    """How far ``node``'s NICs are from its GPUs, as NCCL's ``typeInter``
    (:data:`~simcoll.nccl.classic.NIC_PATHS`): for each NIC, the nearest GPU
    over PCIe and the CPUs (not through another GPU): ``PIX`` through at most
    one PCIe switch, ``PXB`` through several, ``PHB`` through a CPU, ``SYS``
    through two; a NIC without GPUDirect RDMA is at least ``PHB``, since NCCL
    then routes its traffic through the CPU (graph/paths.cc, ``ncclTopoCheckGdr``).
    The farthest NIC decides: every ring crosses every NIC. ``PIX`` without NICs.

    >>> nic_path(as_machine("summit*2").topology, 0), nic_path(as_machine("dgx-a100*2").topology, 0)
    ('PHB', 'PIX')
    """
    from collections import deque

    from .classic import NIC_PATHS

    kinds = {c.name: c for c in topology.components}
    gpus = {topology.gpu(r).name for r in topology.ranks_of_node(node)}
    neighbours: dict[str, set[str]] = {}
    for link in topology.links:
        if link.type == topology.network_link or (link.src in gpus and link.dst in gpus):
            continue
        neighbours.setdefault(link.src, set()).add(link.dst)
        neighbours.setdefault(link.dst, set()).add(link.src)
    worst = 0
    for nic in (c for c in topology.components if c.kind == "nic" and c.node == node):
        best = len(NIC_PATHS) - 1
        seen, queue = {nic.name}, deque([(nic.name, 0, 0)])  # (component, CPUs passed, PCIe switches passed)
        while queue:
            name, cpus, switches = queue.popleft()
            for other in neighbours.get(name, ()):
                if other in seen:
                    continue
                seen.add(other)
                if other in gpus:
                    path = "SYS" if cpus >= 2 else "PHB" if cpus == 1 else "PXB" if switches > 1 else "PIX"
                    best = min(best, NIC_PATHS.index(path))
                    continue
                kind = kinds[other].kind if other in kinds else ""
                if kind in ("cpu", "pcie_switch"):
                    queue.append((other, cpus + (kind == "cpu"), switches + (kind == "pcie_switch")))
        if nic.gpudirect is False:
            best = max(best, NIC_PATHS.index("PHB"))
        worst = max(worst, best)
    return NIC_PATHS[worst]


def _cpu(topology: Topology) -> tuple[str, str]:
    """NCCL's CPU vendor and architecture (``ncclTopoCpuType``) from the CPUs' models."""
    text = " ".join(c.model or "" for c in topology.components if c.kind == "cpu").lower()
    if "power" in text:
        return "ibm", "power"
    if "grace" in text or "arm" in text or "neoverse" in text:
        return "other", "arm"
    return ("amd" if "epyc" in text or "amd" in text else "intel"), "x86"


def nccl_machine(machine: Machine | str, nccl: NcclSetup | str | None = None) -> NcclMachine:
    """Describe ``machine`` to NCCL's tuner (module docstring), priced with the
    constants of ``nccl``'s release (default NCCL 2.30)."""
    setup = as_setup(nccl)
    machine = as_machine(machine)
    topology, model = machine.topology, machine.model
    facts = _facts()
    cc, gpu_source = compute_capability(topology)
    nodes = topology.nodes
    per_node = [len(topology.ranks_of_node(n)) for n in nodes]
    if not per_node or len(set(per_node)) != 1:
        raise NotApplicableError(f"NCCL baseline: {topology.name} has nodes with different GPU counts {per_node}")
    gpus, num_nodes = per_node[0], len(nodes)
    links = _gpu_links(topology, 0)
    switches = [c for c in topology.components if c.kind == "nvswitch" and c.node == nodes[0]]
    fabric = {t: n for t, n in links.items() if t in FABRIC_LINK_TYPES}
    if fabric:
        intra = "nvlink"
        n_links = sum(fabric.values())
        intra_GBps = sum(n * model.link(t).bandwidth_Bps for t, n in fabric.items()) / 1e9
        if num_nodes == 1 and not switches:
            # GPUs joined directly: NCCL duplicates the rings its search finds, which can be fewer than
            # a GPU's links (rings counted with their direction: a full mesh of 8 gives 3 rings and
            # their reverses, 6, where a GPU has 7 links)
            n_links = min(n_links, _rings_found(topology))
        channels = min(int(facts["max_channels"]), int(facts["channels_per_nvlink"]) * n_links)
    else:
        intra = "pci"
        others = {t: n for t, n in links.items() if t != topology.network_link} or links
        intra_GBps = max(model.link(t).bandwidth_Bps for t in others) / 1e9
        channels = int(facts["channels_pci"])
    channels = max(1, channels)
    nics = [c for c in topology.components if c.kind == "nic" and c.node == nodes[0]]
    if num_nodes > 1 and len(nics) > 1 and channels > len(nics):
        # each channel leaves a node through one NIC, and NCCL's search gives every NIC the same
        # number of channels (search.cc builds a channel per NIC pair, then duplicates): 12 channels
        # on a DGX-2's 8 NICs would load four of them twice
        channels -= channels % len(nics)
    nic_GBps = 0.0
    if num_nodes > 1:
        rate = model.link(topology.network_link).bandwidth_Bps / 1e9
        nic_GBps = rate * max(1, len(nics))
    bw_intra = intra_GBps / channels
    bw_inter = nic_GBps / channels if num_nodes > 1 else None
    # NVLS needs at least two GPUs on a node (transport/nvls.cc, ncclNvlsInit)
    nvls = bool(switches) and all(c.reduce and c.multicast for c in switches) and cc >= 90 and gpus >= 2
    collnet = num_nodes > 1 and any(c.reduce and c.node is None for c in topology.components)
    # NCCL's search gives a multi-node ring one speed for its NVLink and network hops (bwIntra =
    # bwInter, so the NIC caps it), while pass 2 raises a tree's bwIntra up to twice its bwInter
    # ("increase bwIntra for trees (2 nodes or collnet)", search.cc ncclTopoCompute): a tree's NIC
    # carries each byte once per direction, a ring's twice
    ring_intra = bw_intra if bw_inter is None else min(bw_intra, bw_inter)
    tree_intra = bw_intra if bw_inter is None else min(bw_intra, 2 * bw_inter)
    graphs = {"ring": Graph(channels, ring_intra, bw_inter, intra=intra)}
    graphs["tree"] = Graph(channels, tree_intra, bw_inter, intra=intra)
    if nvls:
        nvls_ch = int(facts.get("nvls_channels", channels))
        graphs["nvls"] = Graph(nvls_ch, intra_GBps / nvls_ch, bw_inter and nic_GBps / nvls_ch, intra=intra)
        graphs["nvls_tree"] = graphs["nvls"]
    if collnet:
        graphs["collnet_direct"] = Graph(channels, tree_intra, bw_inter, intra=intra)
        graphs["collnet_chain"] = Graph(channels, tree_intra, bw_inter, intra=intra)
    cpu_vendor, cpu_arch = _cpu(topology)
    comm = Comm(
        num_ranks=gpus * num_nodes,
        num_nodes=num_nodes,
        compute_capability=cc,
        graphs=graphs,
        cpu_vendor=cpu_vendor,
        cpu_arch=cpu_arch,
        nvls=nvls,
        collnet=collnet,
        nvswitch=bool(switches),
        nic_path=nic_path(topology, nodes[0]) if num_nodes > 1 else "PIX",
        constants=setup.constants,
    )
    return NcclMachine(comm, cc, gpu_source, num_nodes, gpus, intra, intra_GBps, nic_GBps, len(nics))


def nccl_choice(
    machine: Machine | str,
    collective: str,
    size_bytes: int,
    *,
    algorithms: list[str] | tuple[str, ...] | None = None,
    protocols: list[str] | tuple[str, ...] | None = None,
    collnet: bool = False,
    limits: ChannelLimits | None = None,
    nccl: NcclSetup | str | None = None,
) -> Choice:
    """NCCL's choice (algorithm x protocol x channels) for one call of
    ``collective`` on ``size_bytes`` bytes (nccl-tests' ``size``) on ``machine``.

    ``algorithms`` / ``protocols`` restrict the candidates as NCCL_ALGO /
    NCCL_PROTO do (NCCL spelling in lower case: ``ring``, ``tree``, ``nvls``;
    ``ll``, ``ll128``, ``simple``); where not given, the machine's NCCL
    environment does (the model's ``nccl`` section, e.g. Simple only on
    GPUDirect-TCPXO), else nothing. ``collnet`` is NCCL_COLLNET_ENABLE: off
    by default in NCCL (it needs the SHARP plugin), so CollNet is a candidate
    only when asked for and the fabric's switches reduce. ``limits`` are the
    channel counts NCCL_MIN_CTAS and its kin set (:class:`~simcoll.nccl.tuner.ChannelLimits`).
    ``nccl`` is the release and its environment (:class:`~simcoll.nccl.versions.NcclSetup`
    or a version such as ``"2.7"``; default NCCL 2.30 as configured): its
    ``NCCL_PROTO`` / ``NCCL_ALGO`` restrict where ``algorithms`` / ``protocols`` are not given,
    and its ``NCCL_NVLS_ENABLE=0`` takes NVLS and NVLS-tree away.

    >>> nccl_choice("dgx-a100", "allreduce", 1 << 30).label
    'ring/Simple/24ch'
    >>> nccl_choice("dgx1", "allgather", 1 << 10, nccl="2.7").label
    'ring/LL/1ch'
    """
    machine = as_machine(machine)
    setup = as_setup(nccl)
    if machine.num_ranks < 2:
        raise NotApplicableError(f"nccl: {machine.name} has one GPU, no peer to exchange with")
    algorithms, protocols = environment_restrictions(machine, algorithms, protocols, setup)
    comm = nccl_machine(machine, setup).comm
    if not collnet and comm.collnet:
        comm = replace(comm, collnet=False)
    if setup.nvls_enabled() is False and any(name in comm.graphs for name in NVLS_ALGORITHMS):
        comm = replace(comm, graphs={k: g for k, g in comm.graphs.items() if k not in NVLS_ALGORITHMS})
    if limits is not None:
        comm = replace(comm, limits=limits)
    return choose(comm, collective, int(size_bytes), algorithms=algorithms, protocols=protocols)


def environment_restrictions(
    machine: Machine,
    algorithms: list[str] | tuple[str, ...] | None = None,
    protocols: list[str] | tuple[str, ...] | None = None,
    setup: NcclSetup | None = None,
) -> tuple[list[str] | tuple[str, ...] | None, list[str] | tuple[str, ...] | None]:
    """The tuner's (algorithms, protocols) restrictions: those given, else
    the baseline's ``NCCL_ALGO`` / ``NCCL_PROTO`` (``setup``, :class:`~simcoll.nccl.versions.NcclSetup`),
    else the machine's NCCL environment (the model's ``nccl`` section,
    :class:`~simcoll.cost_model.NcclParams`), else None (free).

    >>> environment_restrictions(as_machine("a3-mega*2"))
    (('ring', 'tree'), ('simple',))
    >>> environment_restrictions(as_machine("a3-mega*2"), protocols=["ll"])
    (('ring', 'tree'), ['ll'])
    """
    if setup is not None:
        algorithms = setup.algorithms() if algorithms is None else algorithms
        protocols = setup.protocols() if protocols is None else protocols
    env = machine.model.nccl
    if env is None:
        return algorithms, protocols
    return (algorithms if algorithms is not None else env.algorithms), (
        protocols if protocols is not None else env.protocols
    )


#: Collectives whose ring is a chain from or to the root: NCCL pipelines the
#: buffer down the chain in FIFO-slot pieces, so their depth grows with size.
CHAIN_COLLECTIVES = ("broadcast", "reduce")
#: NCCL algorithms whose channels are chains and trees (intra-node chain, tree
#: across nodes): pipelined per channel in FIFO-slot pieces, like a chain.
TREE_ALGORITHMS = ("tree",)
#: NCCL algorithms that pass every piece through several stages (in-switch
#: reduction, the network, multicast): pipelined in pieces like a chain, with
#: at least :data:`MIN_STAGED_PIECES` per rank so that the stages overlap.
STAGED_ALGORITHMS = ("nvls_tree", "collnet_direct", "collnet_chain")
MIN_STAGED_PIECES = 4
#: Fewest chunks in the schedule of an algorithm timed as NCCL's step pipeline
#: (:data:`~simcoll.nccl.pipeline.PIPELINED_ALGORITHMS`): only its loads count,
#: so it is built once per machine and channel count, not per size, with
#: enough chunks that those dealt over a node's NVSwitches (5/4/4/5 of 18 on
#: a DGX H100) balance within 1 %.
PIPELINED_SCHEDULE_CHUNKS = 512
#: Most pipeline pieces per channel simulated: with P ranks a chain of k pieces
#: runs at k / (k + P - 2) of its link rate, 32 / 38 = 84 % at P = 8, within
#: a few per cent of deeper pipelines once per-piece latencies are counted,
#: at a bounded simulation cost.
MAX_PIPELINE_PIECES = 32


def pipeline_pieces(
    machine: Machine, collective: str, size_bytes: float, channels: int, nccl_algo: str = "ring"
) -> int:
    """Pieces per channel NCCL's chain pipelines ``size_bytes`` in: one per
    FIFO slot's worth (``executor.slot_bytes``: Simple's 4 MiB buffer in 8
    slots, GC3 §6.1), between 1 and :data:`MAX_PIPELINE_PIECES`; 1 for ring
    collectives that are not chains (the ring's blocks already pipeline).
    For the staged in-network algorithms (:data:`STAGED_ALGORITHMS`) the
    same count per rank, at least :data:`MIN_STAGED_PIECES`, except for those
    timed as NCCL's step pipeline, whose schedule gives only its loads: a
    count independent of the size (:data:`PIPELINED_SCHEDULE_CHUNKS`), so that
    one schedule serves every size. NCCL's tree
    (:data:`TREE_ALGORITHMS`) pipelines every channel's share like a chain.

    >>> pipeline_pieces(as_machine("dgx-a100"), "broadcast", 1 << 30, 24)
    32
    >>> pipeline_pieces(as_machine("dgx-a100"), "allreduce", 1 << 30, 24)
    1
    >>> pipeline_pieces(as_machine("dgx-a100*2"), "allreduce", 64 << 20, 24, "tree")
    6
    """
    executor = machine.model.executor
    slot = executor.slot_bytes if executor is not None and executor.slot_bytes else None
    if nccl_algo in STAGED_ALGORITHMS and nccl_algo in PIPELINED_ALGORITHMS:
        return max(MIN_STAGED_PIECES, math.ceil(PIPELINED_SCHEDULE_CHUNKS / machine.num_ranks))
    if nccl_algo in STAGED_ALGORITHMS:
        if slot is None:
            return MIN_STAGED_PIECES
        pieces = math.ceil(size_bytes / machine.num_ranks / slot)
        return int(max(MIN_STAGED_PIECES, min(MAX_PIPELINE_PIECES, pieces)))
    if (collective not in CHAIN_COLLECTIVES and nccl_algo not in TREE_ALGORITHMS) or slot is None:
        return 1
    return int(max(1, min(MAX_PIPELINE_PIECES, math.ceil(size_bytes / channels / slot))))


def _generate(machine: Machine, collective: str, nccl_algo: str, channels: int, pieces: int = 1) -> Algorithm:
    """The Algorithm of ``nccl_algo`` over ``channels`` channels of ``pieces``
    chunks each, cached per (topology, collective, algorithm, channels, pieces)."""
    from ..algorithms import REGISTRY, generate

    def build() -> Algorithm:
        name = GENERATOR_OF[nccl_algo]
        per_channel = machine.num_ranks if collective == "allreduce" and nccl_algo not in TREE_ALGORITHMS else 1
        options = {"channels": channels} if "channels" in REGISTRY[name].options else {}
        if options:
            chunks = channels * per_channel * pieces
        elif nccl_algo in STAGED_ALGORITHMS:
            chunks = machine.num_ranks * pieces
        else:
            chunks = None
        return generate(name, machine, collective, chunks=chunks, **options)

    return cached_schedule((collective, nccl_algo, channels, pieces), machine.topology, build)


def _buildable(collective: str) -> list[str]:
    from ..algorithms import REGISTRY

    return [a for a, g in GENERATOR_OF.items() if g in REGISTRY and collective in REGISTRY[g].collectives]


def _with_buffer(machine: Machine, setup: NcclSetup) -> Machine:
    """``machine`` with NCCL_BUFFSIZE applied: its executor's FIFO slot (the
    piece NCCL's chains, trees and step pipelines move) becomes one of NCCL's
    8 steps of that buffer (NCCL_STEPS)."""
    buffer = setup.buffer_bytes()
    if buffer is None:
        return machine
    executor = machine.model.executor
    if executor is None:
        raise OptionError(
            f"NCCL_BUFFSIZE: model {machine.model.name!r} has no executor section, whose slot_bytes it would set"
        )
    slot = buffer // NCCL_STEPS
    model = replace(machine.model, executor=replace(executor, slot_bytes=slot))
    return Machine(machine.topology, model)


def nccl_algorithm(
    machine: Machine | str,
    collective: str,
    size_bytes: int,
    *,
    algorithms: list[str] | tuple[str, ...] | None = None,
    protocols: list[str] | tuple[str, ...] | None = None,
    collnet: bool = False,
    limits: ChannelLimits | None = None,
    nccl: NcclSetup | str | None = None,
) -> Algorithm:
    """The Algorithm NCCL would run for ``collective`` on ``size_bytes`` bytes
    (module docstring), with ``metadata["protocol"]``,
    ``metadata["nccl_choice"]`` (the label) and, where the tuner's first
    choice has no generator here, ``metadata["nccl_fallback"]``.
    ``algorithms`` / ``protocols`` restrict the tuner as NCCL_ALGO /
    NCCL_PROTO do, ``collnet`` enables CollNet as NCCL_COLLNET_ENABLE=1
    does, ``limits`` sets channel counts as NCCL_MIN_CTAS and its kin do,
    ``nccl`` names the release and its environment (:func:`nccl_choice`;
    ``metadata["nccl_setup"]`` says which, e.g. ``NCCL 2.7.8, NCCL_PROTO=Simple``).

    nccl-tests' point-to-point operations (Alltoall, SendRecv) have no
    tuner choice: they get NCCL's point-to-point schedule
    (:func:`simcoll.nccl.p2p.nccl_p2p_algorithm`; ``algorithms``,
    ``protocols``, ``collnet`` and ``limits`` do not apply).

    Raises
    ------
    NotApplicableError
        When NCCL has no model for ``collective`` (e.g. gather) or no
        chosen algorithm can be built on this machine.

    >>> a = nccl_algorithm("dgx-a100", "allreduce", 1 << 30)
    >>> a.metadata["nccl_choice"], a.metadata["protocol"]
    ('ring/Simple/24ch', 'Simple')
    """
    from ..collectives import canonical_name

    setup = as_setup(nccl)
    machine = _with_buffer(as_machine(machine), setup)
    collective = canonical_name(collective)
    if collective in P2P_COLLECTIVES:  # no tuner choice: NCCL's restrictions of it do not apply
        algorithm = nccl_p2p_algorithm(machine, collective, size_bytes, setup)
        if setup.is_default:
            return algorithm
        return algorithm.relabelled("nccl", {**algorithm.metadata, "nccl_setup": setup.describe()})
    algorithms, protocols = environment_restrictions(machine, algorithms, protocols, setup)
    if collective not in TUNED_COLLECTIVES:
        raise NotApplicableError(f"nccl: NCCL's tuner has no algorithm choice for {collective}")
    best = nccl_choice(
        machine, collective, size_bytes, algorithms=algorithms, protocols=protocols, collnet=collnet, limits=limits,
        nccl=setup,
    )  # fmt: skip
    choice, fallback = best, None
    if GENERATOR_OF.get(best.algorithm) not in _registry_names(collective):
        available = [a for a in _buildable(collective) if algorithms is None or a in algorithms]
        if not available:
            raise NotApplicableError(f"nccl: no generator of NCCL's algorithms implements {collective}")
        try:
            choice = nccl_choice(
                machine, collective, size_bytes, algorithms=available, protocols=protocols, collnet=collnet,
                limits=limits, nccl=setup,
            )  # fmt: skip
        except SimcollError as exc:
            raise NotApplicableError(f"nccl: {exc}") from None
        fallback = f"NCCL would run {best.label}; {best.algorithm} has no generator here, so {choice.label} is run"
    channels = choice.n_channels
    per_channel = machine.num_ranks if collective == "allreduce" else 1
    if size_bytes < channels * per_channel:
        # fewer channels than NCCL so that every chunk holds at least one byte
        channels = max(1, int(size_bytes) // per_channel)
    try:
        pieces = (
            pipeline_pieces(machine, collective, size_bytes, channels, choice.algorithm)
            if choice.algorithm in ("ring", *TREE_ALGORITHMS, *STAGED_ALGORITHMS)
            else 1
        )
        algorithm = _generate(machine, collective, choice.algorithm, channels, pieces)
    except NotApplicableError as exc:
        if choice.algorithm == "ring":
            raise
        # the generator exists but does not apply here: NCCL's ring is always there
        ring = nccl_choice(
            machine, collective, size_bytes, algorithms=["ring"], protocols=protocols, limits=limits, nccl=setup
        )
        fallback = f"NCCL would run {best.label}; {GENERATOR_OF[choice.algorithm]} does not apply ({exc}), so {ring.label} is run"
        choice, channels = ring, ring.n_channels
        if size_bytes < channels * per_channel:
            channels = max(1, int(size_bytes) // per_channel)
        algorithm = _generate(
            machine, collective, "ring", channels, pipeline_pieces(machine, collective, size_bytes, channels)
        )
    metadata = dict(algorithm.metadata)
    executor = machine.model.executor
    slot = executor.slot_bytes if executor is not None else None  # NCCL_BUFFSIZE / 8; None: NCCL's default
    if choice.algorithm in PIPELINED_ALGORITHMS:
        described = nccl_machine(machine)
        heads = described.gpus_per_node
        if choice.algorithm == "collnet_direct":
            # a CollNet Direct head is a GPU reaching the network through a NIC of its own (the channels of
            # NCCL's CollNet Direct graph, search.cc, at most one per GPU)
            heads = max(1, min(heads, described.nics_per_node))
        metadata["step_pipeline"] = pipeline(
            choice.algorithm, channels=channels, heads=heads, num_nodes=described.num_nodes,
            gpus_per_node=described.gpus_per_node, buffer_step_bytes=int(slot) if slot else None,
        )  # fmt: skip
    elif choice.algorithm == "tree" and choice.protocol == "simple":
        described = nccl_machine(machine)
        metadata["step_pipeline"] = tree_pipeline(
            channels=channels, chunk_bytes=int(slot) if slot else None, gpus_per_node=described.gpus_per_node,
            num_nodes=described.num_nodes, compute_capability=described.compute_capability,
        )  # fmt: skip
    if not setup.is_default:
        metadata["nccl_setup"] = setup.describe()
    metadata.update(
        protocol=PROTOCOL_NAMES[choice.protocol],
        nccl_choice=choice.label,
        nccl_reason=choice.reason,
        nccl_predicted_time_us=choice.time_us,
    )
    if fallback:
        metadata["nccl_fallback"] = fallback
    return algorithm.relabelled("nccl", metadata)


def protocol_for(
    schedule: Any, machine: Machine | str, size_bytes: float, nccl: NcclSetup | str | None = None
) -> str | None:
    """The protocol to time ``schedule`` with beside the ``nccl`` row, so that
    a comparison differs in the schedule only: its own
    (``metadata["protocol"]``, a Program's ``protocol``) if it has one; else
    the one NCCL's tuner picks for that collective and size, or NCCL's
    point-to-point protocol for Alltoall and SendRecv
    (:func:`~simcoll.nccl.p2p.nccl_p2p_protocol`; Simple for other
    collectives the tuner has no choice for). None - a bare α-β schedule, as the
    papers' closed forms cost it - on a model without protocol or call costs,
    or with a ``default_protocol`` of its own (:meth:`CostModel.protocol`).
    ``nccl`` is the baseline's release and environment (default NCCL 2.30):
    beside NCCL 2.7 with ``NCCL_PROTO=Simple`` every schedule runs Simple.

    >>> from simcoll.algorithms import generate
    >>> ring = generate("ring", "dgx-a100", "allreduce")
    >>> protocol_for(ring, "dgx-a100", 1 << 10), protocol_for(ring, "dgx-a100", 1 << 30)
    ('LL', 'Simple')
    >>> protocol_for(generate("ring", "ring:4", "allreduce"), "ring:4", 1 << 30) is None  # generic model: bare
    True
    >>> protocol_for(ring, "dgx-a100", 1 << 10, NcclSetup.parse("2.7", {"NCCL_PROTO": "Simple"}))
    'Simple'
    """
    machine = as_machine(machine)
    model = machine.model
    own = getattr(schedule, "protocol", None) if not isinstance(schedule, Algorithm) else None
    own = own or ((getattr(schedule, "metadata", None) or {}).get("protocol"))
    if own:
        return own
    if model.default_protocol is not None or not (model.call_overhead_s or model.protocol_call_latency_s):
        return None
    name = schedule.collective.name
    if name in P2P_COLLECTIVES:
        return nccl_p2p_protocol(machine, name, size_bytes, nccl)
    try:
        choice = nccl_choice(machine, name, int(size_bytes), nccl=nccl)
    except SimcollError:
        return "Simple"
    return PROTOCOL_NAMES[choice.protocol]


def _registry_names(collective: str) -> set[str]:
    from ..algorithms import REGISTRY

    return {name for name, g in REGISTRY.items() if collective in g.collectives}


def choice_label(algorithm: Algorithm) -> str:
    """The ``choice`` column of an ``nccl`` row, e.g. ``ring/LL128/24ch``
    (with ``*`` appended when a fallback replaced NCCL's first choice, and
    the release and environment in brackets where they are not the default:
    ``ring/Simple/12ch [NCCL 2.7.8, NCCL_PROTO=Simple]``)."""
    metadata = algorithm.metadata
    label = str(metadata.get("nccl_choice", "")) + ("*" if "nccl_fallback" in metadata else "")
    return f"{label} [{metadata['nccl_setup']}]" if "nccl_setup" in metadata else label


__all__ = [
    "BASELINE_COLLECTIVES",
    "GENERATOR_OF",
    "PROTOCOL_NAMES",
    "NcclMachine",
    "choice_label",
    "compute_capability",
    "environment_restrictions",
    "nccl_algorithm",
    "nccl_choice",
    "nccl_machine",
]

"""NCCL's tuner as pure functions: predicted time per algorithm x protocol and
the choice NCCL makes.

This follows the cost model of NCCL 2.30.7 (``src/graph/tuning.cc``:
``ncclTopoTuneModel`` builds a latency and a bandwidth per collective x
algorithm x protocol, ``ncclTopoGetAlgoTime`` turns them into a time;
``src/enqueue.cc``: ``topoGetAlgoInfo`` picks the fastest entry, then trims the
channel count for small messages). The constants come from the data file
``nccl_2_30.yaml`` (:mod:`simcoll.nccl.constants`). What NCCL's graph search
finds (channels, per-channel bandwidths, link types) is an input here,
:class:`Graph`, so the model can be applied to any machine description.

Units: bytes, microseconds, GB/s (1 GB/s = 1000 bytes/us). ``nbytes`` is
NCCL's ``nBytes``: the larger of the send and receive buffer of one rank
(Allgather: the gathered output; ReduceScatter: the full input), which is
what nccl-tests prints in its ``size`` column.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ..collectives import canonical_name
from ..errors import NotApplicableError, OptionError, SizeError
from . import classic
from .classic import log2i, nsteps
from .constants import ALGORITHMS, PROTOCOLS, TunerConstants, generation, load_constants

#: Collectives NCCL's tuner models (NCCL's ncclFunc*; send/recv and alltoall
#: are point-to-point operations with no algorithm choice).
TUNED_COLLECTIVES = ("broadcast", "reduce", "allgather", "reducescatter", "allreduce")
#: Display names, as NCCL prints them.
ALGORITHM_NAMES = {
    "tree": "Tree",
    "ring": "Ring",
    "collnet_direct": "CollNetDirect",
    "collnet_chain": "CollNetChain",
    "nvls": "NVLS",
    "nvls_tree": "NVLSTree",
    "pat": "PAT",
}
PROTOCOL_NAMES = {"ll": "LL", "ll128": "LL128", "simple": "Simple"}


@dataclass(frozen=True)
class Graph:
    """What NCCL's topology search found for one algorithm (``ncclTopoGraph``).

    Parameters
    ----------
    n_channels : int
        Channels of this graph (``nChannels``).
    bw_intra, bw_inter : float
        Bandwidth per channel inside a node and across nodes, GB/s
        (``bwIntra`` / ``bwInter``). ``bw_inter`` defaults to ``bw_intra``
        (as on one node).
    intra : str
        ``"nvlink"`` when the intra-node links are NVLink (``typeIntra ==
        LINK_NVL``), else ``"pci"``.
    latency_inter : float
        Extra inter-node latency of the graph, us (``latencyInter``; added
        twice for Simple, the second time for the flush).
    tree_pattern : bool
        The tree graph uses ``NCCL_TOPO_PATTERN_TREE`` (bandwidth x 0.85).
    same_channels : bool
        ``sameChannels`` of the ring graph (Broadcast / Reduce latency).
    """

    n_channels: int
    bw_intra: float
    bw_inter: float | None = None
    intra: str = "nvlink"
    latency_inter: float = 0.0
    tree_pattern: bool = False
    same_channels: bool = True

    def __post_init__(self) -> None:
        if self.n_channels < 1:
            raise OptionError(f"NCCL graph: n_channels must be >= 1, got {self.n_channels}")
        if self.bw_intra <= 0 or (self.bw_inter is not None and self.bw_inter < 0):
            raise OptionError(f"NCCL graph: bandwidths must be positive, got {self.bw_intra}/{self.bw_inter}")
        if self.intra not in ("nvlink", "pci"):
            raise OptionError(f"NCCL graph: intra must be 'nvlink' or 'pci', got {self.intra!r}")

    @property
    def inter(self) -> float:
        return self.bw_intra if self.bw_inter is None else self.bw_inter


#: NCCL's MAXCHANNELS (src/include/device.h): no communicator has more channels.
MAX_CHANNELS = 64


@dataclass(frozen=True)
class ChannelLimits:
    """The channel counts a user sets (NCCL's environment): ``NCCL_MIN_CTAS``
    / ``NCCL_MAX_CTAS`` (``comm->config.minCTAs / maxCTAs``) and
    ``NCCL_MIN_NCHANNELS`` / ``NCCL_MAX_NCHANNELS`` (``ncclMinNchannels`` /
    ``ncclMaxNchannels``); None leaves NCCL's default. As NCCL does, every
    count is held to ``MAXCHANNELS`` (64, ``src/include/device.h``), a
    maximum below 1 counts as 1 and a minimum CTA count above the maximum is
    lowered to it (``src/init.cc``, ``src/graph/connect.cc``).

    Rings and trees run on the channels the search found, at most both
    maxima, then copied up to the larger minimum (``graph/connect.cc``,
    ``ncclTopoPostset``); NVLS runs on its default count (16 on Hopper)
    clamped to ``[minCTAs, maxCTAs]`` (``transport/nvls.cc``,
    ``ncclNvlsTuning``). The tuner's bandwidths stay the search's (its
    ``graph->nChannels``, ``tuning.cc``): more channels change what NCCL
    launches, not what it predicts, except where the tuner reads the
    communicator's count (the multi-node ring Simple plateau, ``tuning.cc``).

    >>> limits = ChannelLimits(min_ctas=24)
    >>> limits.ring(16), limits.ring(32), limits.nvls(16), ChannelLimits(min_ctas=100).ring(16)
    (24, 32, 24, 64)
    """

    min_ctas: int | None = None
    max_ctas: int | None = None
    min_channels: int | None = None
    max_channels: int | None = None

    def __post_init__(self) -> None:
        for name in ("min_ctas", "max_ctas", "min_channels", "max_channels"):
            value = getattr(self, name)
            if value is None:
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise OptionError(f"NCCL channel limits: {name} must be a whole number >= 0, got {value!r}")
            held = min(value, MAX_CHANNELS)
            object.__setattr__(self, name, max(held, 1) if name.startswith("max") else held)
        if self.min_ctas is not None and self.max_ctas is not None and self.min_ctas > self.max_ctas:
            object.__setattr__(self, "min_ctas", self.max_ctas)  # as NCCL lowers it (init.cc, with a warning)

    def ring(self, found: int) -> int:
        """Channels of rings and trees when the search found ``found``."""
        most = min(v for v in (found, self.max_ctas, self.max_channels) if v is not None)
        least = max((v for v in (self.min_ctas, self.min_channels) if v is not None), default=0)
        return max(most, least)

    def nvls(self, default: int) -> int:
        """NVLS channels when NCCL's default is ``default``."""
        channels = default if self.max_ctas is None else min(self.max_ctas, default)
        return channels if self.min_ctas is None else max(self.min_ctas, channels)


@dataclass(frozen=True)
class Comm:
    """A communicator as NCCL's tuner sees it.

    Parameters
    ----------
    num_ranks, num_nodes : int
        Ranks in total and nodes (every node has ``num_ranks / num_nodes``).
    compute_capability : int
        Lowest SM version, e.g. 70, 80, 90, 100.
    graphs : mapping
        :class:`Graph` per algorithm name (``ring`` is required; an algorithm
        without a graph is not available).
    cpu_vendor, cpu_arch : str
        ``intel`` / ``amd`` / ``mixed`` / ``other``; ``x86`` / ``power`` / ``arm``.
    nvls : bool
        NVLink SHARP is supported (Hopper-class NVSwitch, ``nvlsSupport``).
    collnet : bool
        IB SHARP / CollNet is enabled (``collnetEnable``).
    collnet_chain : bool
        The CollNet plugin supports the chain algorithm.
    nvswitch : bool
        The node has NVSwitches (CollNetDirect needs them).
    ll128 : bool, optional
        Overrides NCCL's LL128 default (enabled on SM70+ when the intra-node
        path is NVLink and the network path is close to the GPU).
    nic_path : str
        How far the NIC is from the GPUs that reach it through the nearest
        path, as NCCL's ``typeInter`` (:data:`~simcoll.nccl.classic.NIC_PATHS`:
        ``PIX``, ``PXB``, ``PXN``, ``PHB``, ``SYS``); LL128 across nodes needs it
        within ``PXB`` (``PXN`` on Hopper and later). ``PIX`` on one node.
    constants : TunerConstants
        Defaults to NCCL 2.30.7's; another release's
        (:func:`simcoll.nccl.versions.constants_for`) prices with its model.
    limits : ChannelLimits
        The channel counts the environment sets (none by default).
    """

    num_ranks: int
    num_nodes: int
    compute_capability: int
    graphs: Mapping[str, Graph]
    cpu_vendor: str = "intel"
    cpu_arch: str = "x86"
    nvls: bool = False
    collnet: bool = False
    collnet_chain: bool = True
    nvswitch: bool = False
    ll128: bool | None = None
    nic_path: str = "PIX"
    constants: TunerConstants = field(default_factory=load_constants, repr=False)
    limits: ChannelLimits = ChannelLimits()

    def __post_init__(self) -> None:
        if self.num_ranks < 1 or self.num_nodes < 1 or self.num_ranks % self.num_nodes:
            raise OptionError(f"NCCL comm: {self.num_ranks} ranks cannot be spread evenly over {self.num_nodes} nodes")
        if "ring" not in self.graphs:
            raise OptionError("NCCL comm: a 'ring' graph is required (NCCL always builds rings)")
        unknown = sorted(set(self.graphs) - set(ALGORITHMS))
        if unknown:
            raise OptionError(f"NCCL comm: unknown algorithm(s) {unknown}; known: {', '.join(ALGORITHMS)}")
        if self.nic_path not in classic.NIC_PATHS:
            raise OptionError(
                f"NCCL comm: nic_path must be one of {', '.join(classic.NIC_PATHS)}, got {self.nic_path!r}"
            )

    @property
    def ppn(self) -> int:
        """Ranks per node."""
        return self.num_ranks // self.num_nodes

    @property
    def n_channels(self) -> int:
        """``comm->nChannels``: the ring graph's channel count, within the
        environment's :class:`ChannelLimits`."""
        return self.limits.ring(self.graphs["ring"].n_channels)


@dataclass(frozen=True)
class Choice:
    """NCCL's choice for one call: algorithm, protocol and channel count,
    with the predicted time, every candidate's time and why."""

    collective: str
    nbytes: int
    algorithm: str
    protocol: str
    n_channels: int
    n_threads: int
    time_us: float
    reason: str
    candidates: dict[tuple[str, str], float]

    @property
    def label(self) -> str:
        """E.g. ``ring/LL128/16ch``."""
        return f"{self.algorithm}/{PROTOCOL_NAMES[self.protocol]}/{self.n_channels}ch"


# -- the model -------------------------------------------------------------------
def _check(comm: Comm, collective: str, algorithm: str, protocol: str) -> str:
    name = canonical_name(collective)  # a CollectiveError names an unknown collective
    if name not in TUNED_COLLECTIVES:
        raise NotApplicableError(f"NCCL's tuner has no model for {name}; it covers {', '.join(TUNED_COLLECTIVES)}")
    if algorithm not in ALGORITHMS:
        raise OptionError(f"unknown NCCL algorithm {algorithm!r}; known: {', '.join(ALGORITHMS)}")
    if protocol not in PROTOCOLS:
        raise OptionError(f"unknown NCCL protocol {protocol!r}; known: {', '.join(PROTOCOLS)}")
    return name


def unavailable_reason(comm: Comm, collective: str, algorithm: str, protocol: str) -> str | None:
    """Why NCCL would not use ``algorithm``/``protocol`` for ``collective`` on
    ``comm``, or None when it may (tuning.cc:291-303, 338-375, 497-526;
    enqueue.cc:1996-2012)."""
    coll = _check(comm, collective, algorithm, protocol)
    if comm.constants.model != "tune-model":
        return classic.unavailable_reason(comm, coll, algorithm, protocol)
    a, p = algorithm, protocol
    ag_rs = coll in ("allgather", "reducescatter")
    if coll in ("broadcast", "reduce") and a != "ring":
        return f"NCCL runs {coll} with ring only"
    if ag_rs and a not in ("ring", "pat", "nvls", "collnet_direct"):
        return f"NCCL runs {coll} with ring, pat, nvls or collnet_direct only"
    if coll == "allreduce" and a == "pat":
        return "pat is not used for allreduce"
    if a in ("nvls", "nvls_tree", "collnet_direct", "collnet_chain", "pat") and p != "simple":
        return f"{a} runs with the Simple protocol only"
    if a == "pat" and (comm.compute_capability < 60 or comm.ppn != 1):
        return "pat needs one GPU per node (and SM60+)"
    if a not in comm.graphs:
        return f"no {a} graph on this machine"
    if a in ("nvls", "nvls_tree"):
        if not comm.nvls:
            return "NVLink SHARP is not supported here"
        if comm.graphs[a].n_channels < 2:
            return f"{a} needs at least 2 channels"
        if coll != "allreduce" and comm.ppn > 32:
            return f"{a} {coll} supports at most 32 local ranks"
        if a == "nvls_tree" and comm.num_nodes == 1:
            return "nvls_tree needs more than one node"
        if a == "nvls" and comm.num_nodes > 1 and not comm.collnet:
            return "nvls across nodes needs CollNet"
    if a in ("collnet_direct", "collnet_chain"):
        if not comm.collnet:
            return "CollNet (IB SHARP) is not enabled"
        if a == "collnet_chain" and not comm.collnet_chain:
            return "the CollNet plugin has no chain support"
        if a == "collnet_direct" and not comm.nvswitch:
            return "collnet_direct needs NVSwitches"
        if comm.ppn > 8:
            return f"{a} supports at most 8 local GPUs"
    if ag_rs and a in ("nvls", "collnet_direct") and comm.num_nodes > 1:
        return f"multi-node {coll} with {a} needs CollNet {coll} support, not modelled"
    if p == "ll128" and not _ll128_enabled(comm, comm.graphs[a]):
        return "LL128 is disabled here (needs SM70+, NVLink inside the node and, across nodes, the NIC within PXB)"
    return None


def _ll128_enabled(comm: Comm, graph: Graph) -> bool:
    """NCCL enables LL128 by default when the intra-node path is NVLink, the
    GPUs are SM70+ and, across nodes, the NIC is within PXB of the GPU (PXN
    on SM90+: ``typeInter <= PATH_PXB || (minCompCap >= 90 && typeInter <=
    PATH_PXN)``, tuning.cc:531-542); ``comm.ll128`` overrides."""
    if comm.ll128 is not None:
        return comm.ll128
    if comm.num_nodes > 1:
        limit = "PXN" if comm.compute_capability >= 90 else "PXB"
        if not classic.nic_path_within(comm.nic_path, limit):
            return False
    return comm.compute_capability >= 70 and graph.intra == "nvlink"


def bus_bandwidth(comm: Comm, collective: str, algorithm: str, protocol: str) -> float:
    """NCCL's modelled bus bandwidth in GB/s (before the conversion to
    algorithm bandwidth), 0 where unavailable (tuning.cc:303-375)."""
    coll = _check(comm, collective, algorithm, protocol)
    if unavailable_reason(comm, coll, algorithm, protocol) is not None:
        return 0.0
    if comm.constants.model != "tune-model":
        return classic.bus_bandwidth(comm, coll, algorithm, protocol)
    c = comm.constants
    a, p = algorithm, protocol
    g = comm.graphs[a]
    gen = generation(comm.compute_capability)
    nodes, ppn = comm.num_nodes, comm.ppn
    collnet = a in ("collnet_direct", "collnet_chain")
    bw = g.bw_intra if nodes <= 2 or collnet else g.inter
    if a in ("nvls", "nvls_tree"):
        intra_bw = g.bw_intra * float(c["nvls_efficiency"][gen]) * (g.n_channels - 1) / g.n_channels
        intra_bw *= 2.0 if coll == "allreduce" else (ppn - 1) / ppn
        inter_bw = g.inter * (2 if nodes <= 2 and a == "nvls_tree" else 1)
        bw = min(intra_bw, inter_bw)
        if a == "nvls_tree":
            bw = min(bw, c.per_generation("per_channel_max_nvls_tree_bw", gen, nodes))
    bus = g.n_channels * bw
    if a == "ring" and p == "ll":
        bus = min(_ll_max_bw(comm), bus * c["ring_ll_fraction"])
    if a == "ring" and p == "ll128":
        bus = min(
            bus * c["ring_ll128_fraction"], g.n_channels * c.per_generation("per_channel_max_ring_ll128_bw", gen, nodes)
        )
    if a == "tree" and coll == "allreduce":
        bus = min(
            bus * c["tree_allreduce_fraction"], g.n_channels * c.per_generation("per_channel_max_tree_bw", gen, nodes)
        )
    if a == "tree" and p == "ll":
        bus = min(bus / c["tree_ll_divisor"], _ll_max_bw(comm))
    if a == "tree" and p == "ll128":
        frac = c["tree_ll128_fraction_one_node"] if nodes == 1 else c["tree_ll128_fraction_multi_node"]
        bus = min(bus * frac, g.n_channels * c.per_generation("per_channel_max_tree_ll128_bw", gen, nodes))
    if a == "tree" and g.tree_pattern:
        bus *= c["tree_pattern_fraction"]
    if a == "pat":
        bus *= c["pat_fraction"]
    if a == "collnet_direct":
        if coll in ("allgather", "reducescatter"):
            bus = ppn * min(g.bw_intra, g.inter * c["collnet_direct_inter_fraction"])
        else:
            ratio = ppn / g.n_channels  # GPUs per NIC
            bus /= ratio - (ratio - 1) / 2
            if comm.compute_capability >= 90:
                bus *= c["collnet_direct_hopper_fraction"]
    return float(bus)


def _ll_max_bw(comm: Comm) -> float:
    """LL's bandwidth cap: by GPU generation on one node, by CPU vendor across
    nodes (tuning.cc:269-272)."""
    if comm.num_nodes == 1:
        row = generation(comm.compute_capability)
    else:
        row = "ampere" if comm.cpu_vendor in ("amd", "mixed") else "volta"
    return comm.constants.per_generation("ll_max_bw", row, comm.num_nodes)


def algorithm_bandwidth(comm: Comm, collective: str, algorithm: str, protocol: str) -> float:
    """Modelled algorithm bandwidth (bytes moved per rank per second), GB/s:
    bus bandwidth x n/nsteps for ring, nvls and nvls_tree, x 0.5 for tree and
    collnet (tuning.cc:376-382); 0 where unavailable."""
    coll = _check(comm, collective, algorithm, protocol)
    if comm.constants.model != "tune-model":
        ok = unavailable_reason(comm, coll, algorithm, protocol) is None
        return classic.algorithm_bandwidth(comm, coll, algorithm, protocol) if ok else 0.0
    bus = bus_bandwidth(comm, coll, algorithm, protocol)
    if algorithm != "ring" and coll in ("allgather", "reducescatter"):
        return bus
    if algorithm in ("ring", "nvls", "nvls_tree"):
        return bus * comm.num_ranks / nsteps(coll, comm.num_ranks)
    return bus * comm.constants["tree_collnet_algbw_fraction"]


def latency_us(comm: Comm, collective: str, algorithm: str, protocol: str) -> float:
    """NCCL's modelled per-call latency, us (tuning.cc:383-436)."""
    coll = _check(comm, collective, algorithm, protocol)
    if comm.constants.model != "tune-model":
        return classic.latency_us(comm, coll, algorithm, protocol if algorithm in comm.graphs else "simple")
    c = comm.constants
    a, p = algorithm, protocol
    g = comm.graphs.get(a) or comm.graphs["ring"]
    nodes, ppn, n = comm.num_nodes, comm.ppn, comm.num_ranks
    intra_hw = "nvlink" if g.intra == "nvlink" else "pci"
    hw = intra_hw if nodes == 1 else "net"
    lat = c.base_latency(a, p)
    intra = c.hw_latency(intra_hw, a, p)
    inter = c.hw_latency("net", "tree" if ppn == 1 else a, p) + g.latency_inter
    if p == "simple":
        inter += g.latency_inter
    if a == "ring":
        hop = c.hw_latency(hw, a, p)
        steps = nsteps(coll, n)
        if coll in ("broadcast", "reduce"):
            if g.same_channels:
                return lat + hop
            if p == "simple":
                hop = c.hw_latency(hw, "tree", p)
            return lat + steps * hop
        overhead = 0.0
        if nodes > 1:
            overhead = float(c["net_overhead_us"].get(comm.cpu_vendor, c["net_overhead_us"]["other"]))
            if p == "simple":
                overhead *= c["net_overhead_simple_factor"]
        intra = max(intra, overhead)
        inter_steps = 0 if nodes == 1 else 2 * (nodes - 1) if coll == "allreduce" else nodes - 1
        return lat + (steps - inter_steps) * intra + inter_steps * inter
    if a == "tree":
        return lat + (2 * ((ppn - 1) * intra + log2i(nodes) * inter) if coll == "allreduce" else 0.0)
    if a == "collnet_direct":
        return lat + 2 * (min(1, ppn - 1) * intra + (ppn - 1) * c["collnet_direct_arity_latency_us"]) + inter
    if a == "collnet_chain":
        return lat + 2 * (ppn - 1) * intra + inter
    if a == "nvls":
        return intra + (inter if nodes > 1 else 0.0)
    if a == "nvls_tree":
        return lat + intra + 2 * log2i(nodes) * inter
    # pat
    if coll in ("allgather", "reducescatter"):
        return lat + log2i(nodes) * inter / c["pat_inter_latency_divisor"] + n * c["pat_per_rank_latency_us"]
    return lat


def predict_time_us(
    comm: Comm, collective: str, algorithm: str, protocol: str, nbytes: int, num_pipe_ops: int = 1
) -> float | None:
    """NCCL's predicted time for one call, us, or None where the algorithm /
    protocol is unavailable (tuning.cc:630-653): ``lat * latCount + nbytes /
    (1000 * algbw)``, with the tree correction factor for Tree Allreduce, the
    ring "plateau" latency factor for multi-node Ring/Simple Allreduce, and
    latCount = ``num_pipe_ops`` for ring (1 otherwise: aggregated operations
    of the other algorithms share one batch)."""
    coll = _check(comm, collective, algorithm, protocol)
    if nbytes < 0:
        raise SizeError(f"nbytes must be >= 0, got {nbytes}")
    if comm.constants.model != "tune-model":
        return classic.predict_time_us(comm, coll, algorithm, protocol, nbytes)
    bw = algorithm_bandwidth(comm, coll, algorithm, protocol)
    if bw <= 0:
        return None
    c = comm.constants
    lat = latency_us(comm, coll, algorithm, protocol)
    log_size = log2i(nbytes >> 6)
    row = c["tree_correction_factor"][PROTOCOLS.index(protocol)]
    if algorithm == "tree" and coll == "allreduce" and 0 <= log_size < 23:
        bw *= row[log_size]
    if (
        algorithm == "nvls_tree"
        and coll == "allreduce"
        and 0 <= log_size < 24
        and comm.compute_capability >= 100
        and comm.cpu_arch == "x86"
    ):
        bw *= row[log_size]
    plateau_bytes = c["ring_simple_plateau_min_bytes_per_channel_rank"]
    if (
        algorithm == "ring"
        and protocol == "simple"
        and comm.num_nodes > 1
        and coll == "allreduce"
        and nbytes // (comm.n_channels * comm.num_ranks) >= plateau_bytes
    ):
        factors = c["ring_simple_plateau_factor"]
        lat *= factors["pre_ampere"] if comm.compute_capability < 80 else factors["ampere_and_later"]
    lat_count = num_pipe_ops if algorithm == "ring" else 1
    return lat * lat_count + nbytes / (1000.0 * bw)


def cost_table(comm: Comm, collective: str, nbytes: int) -> dict[tuple[str, str], float]:
    """Predicted time of every available (algorithm, protocol), us."""
    table: dict[tuple[str, str], float] = {}
    for a in ALGORITHMS:
        for p in PROTOCOLS:
            t = predict_time_us(comm, collective, a, p, nbytes)
            if t is not None:
                table[(a, p)] = t
    return table


def _threads(comm: Comm, algorithm: str, protocol: str) -> int:
    """``maxThreads`` (tuning.cc:244-258)."""
    c = comm.constants["max_threads"]
    if algorithm in ("nvls", "nvls_tree", "collnet_direct", "collnet_chain"):
        return int(c["nvls_collnet"])
    if protocol == "simple" and algorithm == "ring":
        ring = comm.graphs["ring"]
        pci_bw = comm.constants["link_bw"]["pci_gen3_x16"]
        return 256 if ring.bw_intra * ring.n_channels <= pci_bw else int(c["simple"])
    return int(c[protocol])


def _threshold(comm: Comm, algorithm: str, protocol: str) -> int:
    """``threadThresholds`` (tuning.cc:585-594)."""
    c = comm.constants
    if algorithm in ("collnet_direct", "collnet_chain") and protocol == "simple":
        return int(c["collnet_thread_threshold"])
    value = int(c["thread_threshold"][protocol])
    return value * comm.num_ranks if algorithm == "ring" and protocol == "ll" else value


def channels_for(comm: Comm, algorithm: str, protocol: str, nbytes: int, collnet_heads: int = 1) -> tuple[int, int]:
    """Channels and threads NCCL launches for a chosen algorithm / protocol
    (enqueue.cc:2066-2117): NVLS uses its own channel count; ring and tree
    drop channels, then halve threads, while ``nbytes < nc * nt *
    threshold``."""
    nc = comm.n_channels
    nt = _threads(comm, algorithm, protocol)
    threshold = _threshold(comm, algorithm, protocol)
    if algorithm == "collnet_direct":
        switch, short = 16, True
        while switch >= 1 and short:
            while (short := nbytes < nc * nt * collnet_heads * threshold) and nc > switch:
                if nc == switch + switch // 2:
                    threshold //= 2
                nc -= 1
            switch //= 2
    elif algorithm in ("nvls", "nvls_tree"):
        nvls_nc = comm.limits.nvls(comm.graphs[algorithm].n_channels)
        nc = min(nvls_nc, comm.n_channels) if comm.num_nodes > 1 and algorithm == "nvls" else nvls_nc
    else:
        while nbytes < nc * nt * threshold and nc >= 2:
            nc -= 1
    if algorithm not in ("nvls", "nvls_tree", "collnet_direct"):
        while nbytes < nc * nt * threshold and nt % 128 == 0:
            nt //= 2
    return nc, nt


def choose(
    comm: Comm,
    collective: str,
    nbytes: int,
    *,
    algorithms: Iterable[str] | None = None,
    protocols: Iterable[str] | None = None,
) -> Choice:
    """The algorithm, protocol and channel count NCCL's default tuner picks
    for one call of ``collective`` on ``nbytes`` (enqueue.cc:2028-2060): the
    lowest predicted time over every available pair, ties to the first in
    NCCL's order (tree, ring, collnet_direct, collnet_chain, nvls, nvls_tree,
    pat; LL, LL128, Simple). ``algorithms`` / ``protocols`` restrict the
    candidates as NCCL_ALGO / NCCL_PROTO do."""
    coll = _check(comm, collective, "ring", "simple")
    allowed_a = set(ALGORITHMS if algorithms is None else algorithms)
    allowed_p = set(PROTOCOLS if protocols is None else protocols)
    for name in allowed_a - set(ALGORITHMS):
        raise OptionError(f"unknown NCCL algorithm {name!r}; known: {', '.join(ALGORITHMS)}")
    for name in allowed_p - set(PROTOCOLS):
        raise OptionError(f"unknown NCCL protocol {name!r}; known: {', '.join(PROTOCOLS)}")
    if comm.constants.model == "thresholds":
        from . import thresholds

        a, p, nc, nt, reason = thresholds.choose(comm, coll, nbytes, algorithms=allowed_a, protocols=allowed_p)
        return Choice(coll, nbytes, a, p, nc, nt, float("nan"), reason, {})
    table = {k: t for k, t in cost_table(comm, coll, nbytes).items() if k[0] in allowed_a and k[1] in allowed_p}
    if not table:
        raise NotApplicableError(f"no NCCL algorithm/protocol available for {coll} with the given restrictions")
    ranked = sorted(table.items(), key=lambda kv: (kv[1], ALGORITHMS.index(kv[0][0]), PROTOCOLS.index(kv[0][1])))
    (a, p), best = ranked[0]
    nc, nt = channels_for(comm, a, p, nbytes)
    reason = f"{ALGORITHM_NAMES[a]}/{PROTOCOL_NAMES[p]} has the lowest predicted time, {best:.2f} us"
    if len(ranked) > 1:
        (a2, p2), second = ranked[1]
        reason += f" (next {ALGORITHM_NAMES[a2]}/{PROTOCOL_NAMES[p2]} {second:.2f} us; {len(ranked)} candidates)"
    if nc < comm.n_channels and a not in ("nvls", "nvls_tree"):
        reason += f"; {nc} of {comm.n_channels} channels since {nbytes} B < channels x threads x threshold"
    return Choice(
        collective=coll,
        nbytes=nbytes,
        algorithm=a,
        protocol=p,
        n_channels=nc,
        n_threads=nt,
        time_us=best,
        reason=reason,
        candidates=dict(table),
    )


__all__ = [
    "ALGORITHM_NAMES",
    "PROTOCOL_NAMES",
    "TUNED_COLLECTIVES",
    "ChannelLimits",
    "Choice",
    "Comm",
    "Graph",
    "algorithm_bandwidth",
    "bus_bandwidth",
    "channels_for",
    "choose",
    "cost_table",
    "latency_us",
    "nsteps",
    "predict_time_us",
    "unavailable_reason",
]

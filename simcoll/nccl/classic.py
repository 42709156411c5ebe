"""NCCL's tuning model as NCCL 2.5-2.12 had it (``ncclTopoTuneModel`` with
three algorithms, Tree, Ring and CollNet): the releases SCCL (2.7.8), GC3
and TACCL (2.8.4) and NV-Group (2.6) compared against.

The shape is that of today's model (:mod:`simcoll.nccl.tuner`: a latency and a
bandwidth per collective x algorithm x protocol, time = latency + bytes /
bandwidth, the fastest wins), with the refinements of the older releases; the
numbers, and which refinement a release has, come from its constants file
(``nccl_2_6.yaml`` ... ``nccl_2_12.yaml``, each citing its source lines).
Where a file gives ``null`` the release lacks that refinement. CollNet (the
SHARP plugin, off by default) is not modelled for these releases.

>>> from simcoll.nccl.tuner import Comm, Graph
>>> from simcoll.nccl.versions import constants_for
>>> comm = Comm(8, 1, 70, {"ring": Graph(12, 21.0), "tree": Graph(12, 21.0)}, constants=constants_for("2.7"))
>>> round(predict_time_us(comm, "allgather", "ring", "ll", 1 << 10), 2)
6.9
"""

from __future__ import annotations

from typing import Any

from .constants import PROTOCOLS, node_index

#: A :class:`simcoll.nccl.tuner.Comm` (not imported: the tuner imports this module).
Comm = Any

#: Collectives the classic model prices (ncclFunc* of these releases).
CLASSIC_ALGORITHMS = ("tree", "ring")
#: NIC distances from a GPU, nearest first (NCCL's PATH_* order: PIX one PCIe switch, PXB several,
#: PXN through another GPU's NVLink, PHB through the CPU, SYS across CPUs).
NIC_PATHS = ("PIX", "PXB", "PXN", "PHB", "SYS")


def log2i(n: int) -> int:
    """floor(log2(n)) for n >= 1, -1 for n < 1 (NCCL's ``log2i``)."""
    return n.bit_length() - 1 if n >= 1 else -1


def nsteps(collective: str, num_ranks: int) -> int:
    """Ring steps NCCL counts (tuning.cc:287-289): 2(n-1) for Allreduce, n-1
    for Allgather / ReduceScatter, n otherwise."""
    if collective == "allreduce":
        return 2 * (num_ranks - 1)
    if collective in ("allgather", "reducescatter"):
        return num_ranks - 1
    return num_ranks


def nic_path_within(path: str, limit: str) -> bool:
    """Whether a GPU-NIC path ``path`` is at most ``limit`` (both :data:`NIC_PATHS`)."""
    return NIC_PATHS.index(path) <= NIC_PATHS.index(limit)


def unavailable_reason(comm: Comm, coll: str, algorithm: str, protocol: str) -> str | None:
    """Why this release would not run ``algorithm``/``protocol`` for ``coll``, or None."""
    c = comm.constants
    version = c.version
    if algorithm not in c["algorithms"]:
        return f"NCCL {version} has no {algorithm} algorithm (it has {', '.join(c['algorithms'])})"
    if protocol not in c["protocols"]:
        return f"NCCL {version} has no {protocol} protocol"
    if coll != "allreduce" and algorithm != "ring":
        return f"NCCL {version} runs {coll} with ring only"
    if algorithm not in comm.graphs:
        return f"no {algorithm} graph on this machine"
    if protocol == "ll128":
        graph = comm.graphs[algorithm]
        if comm.ll128 is not None:
            return None if comm.ll128 else "LL128 is disabled here"
        if comm.compute_capability not in c["ll128_compute_capabilities"]:
            return f"NCCL {version} enables LL128 only on SM{'/'.join(map(str, c['ll128_compute_capabilities']))}"
        if graph.intra != "nvlink":
            return "LL128 needs NVLink inside the node"
        if comm.num_nodes > 1 and not nic_path_within(comm.nic_path, c["ll128_max_nic_path"]):
            return f"LL128 needs the NIC within {c['ll128_max_nic_path']} of the GPU (here {comm.nic_path})"
    return None


def bus_bandwidth(comm: Comm, coll: str, algorithm: str, protocol: str) -> float:
    """The release's bus bandwidth, GB/s (tuning.cc ``busBw`` after the model refinements)."""
    c = comm.constants
    a, p = algorithm, protocol
    g = comm.graphs[a]
    nodes, ppn = comm.num_nodes, comm.ppn
    gen_row = "ampere" if comm.compute_capability == 80 else "volta"
    bus = g.n_channels * (g.bw_intra if nodes <= 2 else g.inter)
    cap_sm80 = c["bus_cap_sm80_GBps"]
    if cap_sm80 is not None and comm.compute_capability == 80:
        bus = min(bus, cap_sm80)
    ll_max = _ll_max_bw(comm)
    if a == "ring" and p == "ll":
        one_node_other = nodes == 1 and coll not in ("allreduce", "reduce")
        bus *= c["ring_ll_fraction_one_node_other"] if one_node_other else c["ring_ll_fraction"]
        if ll_max is not None:
            bus = min(bus, ll_max)
    if a == "ring" and p == "ll128":
        frac = c["ring_ll128_fraction_one_gpu_per_node"] if ppn < 2 else c["ring_ll128_fraction"]
        bus = min(bus * frac, _ll128_cap(comm, coll, g.n_channels))
    if a == "tree":
        per_channel = c["per_channel_max_tree_bw"]
        if per_channel is not None:
            tree_cap = g.n_channels * float(per_channel[gen_row][node_index(nodes)])
        else:
            caps = c["max_tree_bw"]
            row = caps.get("sm80_ll128") if comm.compute_capability == 80 and p == "ll128" else None
            tree_cap = float((row or caps["default"])[0 if nodes <= 2 else 1])
        bus = min(bus * c["tree_fraction"], tree_cap)
    if a == "tree" and p == "ll":
        bus /= c["tree_ll_divisor"]
        if ll_max is not None:
            bus = min(bus, ll_max)
    if a == "tree" and p == "ll128":
        bus *= c["tree_ll128_fraction_one_node"] if nodes == 1 else c["tree_ll128_fraction_multi_node"]
        if c["tree_ll128_cap_factor"] is not None:
            bus = min(bus, _ll128_cap(comm, coll, g.n_channels) * c["tree_ll128_cap_factor"])
    return float(bus)


def _ll128_cap(comm: Comm, coll: str, n_channels: int) -> float:
    """LL128's bandwidth cap: per channel (2.7+) or on the whole bus (2.6)."""
    c = comm.constants
    if c["ll128_max_bw_per_channel"] is not None:
        return float(c["ll128_max_bw_per_channel"][coll]) * n_channels
    return float(c["ll128_max_bw"][coll])


def _ll_max_bw(comm: Comm) -> float | None:
    """LL's cap (2.8+): by GPU on one node, by CPU vendor across nodes."""
    table = comm.constants["ll_max_bw"]
    if table is None:
        return None
    if comm.num_nodes == 1:
        row = "ampere" if comm.compute_capability == 80 else "volta"
    else:
        row = "ampere" if comm.cpu_vendor == "amd" else "volta"
    return float(table[row][node_index(comm.num_nodes)])


def algorithm_bandwidth(comm: Comm, coll: str, algorithm: str, protocol: str) -> float:
    """Bus bandwidth x n / nsteps for the ring, x 0.5 for the tree, GB/s."""
    bus = bus_bandwidth(comm, coll, algorithm, protocol)
    if algorithm == "ring":
        return bus * comm.num_ranks / nsteps(coll, comm.num_ranks)
    return bus * 0.5


def latency_us(comm: Comm, coll: str, algorithm: str, protocol: str) -> float:
    """The release's per-call latency, us."""
    c = comm.constants
    a, p = algorithm, protocol
    g = comm.graphs[a]
    nodes, n = comm.num_nodes, comm.num_ranks
    i = PROTOCOLS.index(p)
    intra_hw = "nvlink" if g.intra == "nvlink" else "pci"
    hw = intra_hw if nodes == 1 else "net"
    lat = float(c["base_latency_us"][a][i])
    intra = float(c["hw_latency_us"][intra_hw][a][i])
    if a == "tree" and p == "simple" and intra_hw == "pci" and comm.cpu_arch == "power":
        if c["power_tree_simple_pci_latency_is_ring"]:
            intra = float(c["hw_latency_us"]["pci"]["ring"][i])
    inter = g.latency_inter or float(c["hw_latency_us"]["net"][a][i])
    if nodes > 1 and p == "ll":
        intra *= c["multi_node_ll_intra_latency_factor"]
    if a == "ring":
        hop = float(c["hw_latency_us"][hw][a][i])
        steps = nsteps(coll, n)
        if coll in ("broadcast", "reduce"):
            if g.same_channels:
                return lat + hop
            if p == "simple":
                hop = float(c["hw_latency_us"][hw]["tree"][i])
            return lat + steps * hop
        rule = c["ring_allreduce_inter_steps"]
        if rule == "all":  # 2.6: every step at the hop latency of the slowest hardware
            return lat + steps * hop
        if nodes == 1:
            return lat + steps * intra
        if coll == "allreduce":
            inter_steps = 2 * (nodes - 1) if rule == "nodes_minus_1" else 2 * nodes
        else:
            inter_steps = nodes - 1 if coll in ("allgather", "reducescatter") else nodes
        return lat + (steps - inter_steps) * intra + inter_steps * inter
    # tree
    return lat + 2 * ((comm.ppn - 1) * intra + log2i(nodes) * inter)


def predict_time_us(comm: Comm, coll: str, algorithm: str, protocol: str, nbytes: int) -> float | None:
    """``ncclTopoGetAlgoTime`` of the release: latency + nBytes / bandwidth, with
    the tree correction factor and (2.7+) the multi-node ring plateau; None
    where unavailable."""
    if unavailable_reason(comm, coll, algorithm, protocol) is not None:
        return None
    bw = algorithm_bandwidth(comm, coll, algorithm, protocol)
    if bw <= 0:
        return None
    c = comm.constants
    lat = latency_us(comm, coll, algorithm, protocol)
    row = c["tree_correction_factor"][PROTOCOLS.index(protocol)]
    log_size = log2i(nbytes >> 6)
    if algorithm == "tree" and 0 <= log_size < len(row):
        bw *= row[log_size]
    plateau = c["ring_simple_plateau_factor"]
    if (
        plateau is not None
        and algorithm == "ring"
        and protocol == "simple"
        and comm.num_nodes > 1
        and coll == "allreduce"
        and nbytes >= comm.num_ranks * c["ring_simple_plateau_min_bytes_per_rank"]
    ):
        lat *= plateau
    return lat + nbytes / (1000.0 * bw)


__all__ = [
    "CLASSIC_ALGORITHMS",
    "log2i",
    "nsteps",
    "NIC_PATHS",
    "algorithm_bandwidth",
    "bus_bandwidth",
    "latency_us",
    "nic_path_within",
    "predict_time_us",
    "unavailable_reason",
]

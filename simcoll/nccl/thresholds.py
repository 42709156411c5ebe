"""NCCL 2.4's algorithm choice: size thresholds, no cost model.

NCCL 2.4 (the release that brought the double binary tree) runs an Allreduce
on the tree below a size threshold worked out from rough ring and tree
estimates (``ncclTreeThreshold``, init.cc; trees only across nodes), and
any collective with the LL protocol below a second threshold that grows with
the threads and channels the call would use (``getKernelInfo``,
enqueue.cc); above it, Simple on every channel. It has no LL128. The numbers
come from ``nccl_2_4.yaml``, each citing its source line.

>>> from simcoll.nccl.tuner import Comm, Graph
>>> from simcoll.nccl.versions import constants_for
>>> comm = Comm(8, 1, 70, {"ring": Graph(12, 21.0)}, constants=constants_for("2.4"))
>>> choose(comm, "allreduce", 1 << 10)[:4], choose(comm, "allreduce", 1 << 30)[:4]
(('ring', 'll', 1, 64), ('ring', 'simple', 12, 256))
"""

from __future__ import annotations

import math
from typing import Any

from ..errors import NotApplicableError
from .classic import log2i

#: A :class:`simcoll.nccl.tuner.Comm` (not imported: the tuner imports this module).
Comm = Any


def tree_threshold_bytes(comm: Comm) -> float:
    """``ncclTreeThreshold``: the largest Allreduce run on the tree (0: never,
    as on one node; infinite: always)."""
    t = comm.constants["tree_threshold"]
    nodes, n = comm.num_nodes, comm.num_ranks
    nvlink = comm.graphs["ring"].intra == "nvlink"
    ring_bw = t["ring_bw_per_channel_nvlink"] * (comm.n_channels if nvlink else 1)
    tree_bw = ring_bw * (t["tree_bw_fraction_nvlink"] if nvlink else t["tree_bw_fraction_pci"])
    if nvlink and nodes == 2:
        tree_bw *= 2
    ring_lat = t["ring_latency_inter_us"] * (n - 1)
    tree_lat = t["tree_latency_inter_us"] * log2i(nodes) + t["tree_latency_intra_us"] * (n // nodes - 1)
    if nodes < 2 or ring_lat <= tree_lat:
        return 0.0
    if tree_bw > ring_bw:
        return math.inf
    return ring_bw * tree_bw / (ring_bw - tree_bw) * (ring_lat - tree_lat)


def choose(
    comm: Comm,
    coll: str,
    nbytes: int,
    *,
    algorithms: set[str] | None = None,
    protocols: set[str] | None = None,
) -> tuple[str, str, int, int, str]:
    """NCCL 2.4's algorithm, protocol, channels, threads and why, for one call.
    ``algorithms`` without ``tree`` is NCCL_TREE_THRESHOLD=0; ``protocols``
    without ``ll`` is NCCL_LL_THRESHOLD=0, without ``simple`` LL always."""
    c = comm.constants
    algorithms = set(c["algorithms"]) if algorithms is None else set(algorithms) & set(c["algorithms"])
    protocols = set(c["protocols"]) if protocols is None else set(protocols) & set(c["protocols"])
    if not algorithms or not protocols or (coll != "allreduce" and "ring" not in algorithms):
        raise NotApplicableError(f"NCCL {c.version} has no algorithm/protocol for {coll} within the restrictions")
    tree_limit = tree_threshold_bytes(comm) if coll == "allreduce" and "tree" in algorithms else 0.0
    tree = "ring" not in algorithms or nbytes <= tree_limit
    chunks_per_loop = 1 if tree or coll in ("broadcast", "reduce") else comm.num_ranks
    thread_threshold = c["thread_threshold"] * (2 if comm.num_nodes > 1 else 1)
    per_thread_ll = min(thread_threshold, c["ll_channel_threshold"])
    max_ll_threads = c["default_threads"]
    nt = c["ll_min_threads"]
    while math.ceil(nbytes / (nt * chunks_per_loop)) > per_thread_ll and nt * 2 <= max_ll_threads:
        nt *= 2
    nc = min(max(1, math.ceil(nbytes / (nt * chunks_per_loop * per_thread_ll))), comm.n_channels)
    ll_limit = nc * nt * chunks_per_loop * thread_threshold * (c["tree_thread_threshold_factor"] if tree else 1)
    ll = "ll" in protocols and ("simple" not in protocols or nbytes <= ll_limit)
    algorithm = "tree" if tree else "ring"
    protocol = "ll" if ll else "simple"
    channels, threads = (nc, nt) if ll else (comm.n_channels, c["default_threads"])
    reason = (
        f"NCCL {c.version} thresholds: {algorithm} (tree up to {tree_limit:.0f} B), {protocol} (LL up to {ll_limit} B)"
    )
    return algorithm, protocol, channels, threads, reason

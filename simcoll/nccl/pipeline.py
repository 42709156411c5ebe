"""NCCL's step pipelines: its NVLink SHARP algorithms (NVLS, NVLSTree), its
IB SHARP one (CollNet Direct) and, at the end (:func:`tree_pipeline`), its
tree with the Simple protocol.

NCCL moves a buffer through NVLS in *steps*. In one step each of its
``nChannels`` channels moves one chunk per NVLS head (``nHeads``: the node's
GPUs on Hopper), so a step carries ``nChannels x nHeads x chunk`` bytes, and
the chunk shrinks from 128 KiB to 16 KiB as the buffer does (enqueue.cc
``calcCollChunking``; the constants are facts in ``nccl_2_30.yaml``). A step
passes through the stages of NCCL's NVLS kernel one after the other - scatter
warps copy it in, reduce warps reduce it in the NVSwitch and multicast the
result, gather warps copy it out (device/all_reduce.h, ``RunWorkColl`` for
NCCL_ALGO_NVLS) - and, across nodes, through one more stage per level of the
inter-node tree (NCCL_ALGO_NVLS_TREE).

The simulator times such a pipeline (:mod:`simcoll.simulator.algorithm_mode`)
as ``steps + stages - 1`` step times, a step taking its bytes at the rate of
the schedule's busiest resource plus a latency; this module says what a step
and the stages are. Why: NVLS busbw measured on H100 ramps up far more
slowly than a bare schedule's (one node: 360 GB/s at 64 MiB against 480 at
8 GiB), and ``T = T0 + (S / step + stages - 1)(step / B + o)`` with NCCL's
steps, one step latency ``o`` of 5 us for all and the bandwidth ``B`` and
offset ``T0`` of each log fits every published NVLS log - one node (NCCL
2.26.2) and 2, 4 and 8 nodes (nccl-tests#309) - within 1.4-4.7 % (geometric
mean over its NVLS sizes); the stage count ``3 + log2(nodes)`` is part of
that fit. ``tests/test_nccl_pipeline.py`` checks the rule,
``benchmarks/fidelity.py`` the logs. Not modelled: Blackwell's multi-node
NVLSTree tuning (nvls.cc ``ncclNvlsTreeSm100Tuning``, which may change the
channels and chunks) and NCCL_NVLS_CHUNKSIZE / NCCL_NVLSTREE_MAX_CHUNKSIZE
set by the user.

CollNet Direct moves its buffer the same way (enqueue.cc: a step is
``nChannels x nHeads`` chunks, a head being a GPU with a NIC of its own), with
chunks of one Simple buffer step (512 KiB) halved as the buffer shrinks,
through its kernel's scatter, reduce and gather stages and one network stage
(the IB switches reduce the step and return the sum). With 24 channels x 8
heads a step is 6 MiB for buffers up to 192 MiB and 24 MiB from 384 MiB, so
the fill keeps busbw well below its plateau up to hundreds of MiB, as the
published CoreWeave SHARP log (4 x 8 A100) shows (93 GB/s at 64 MiB, 116 at
8 GiB): ``T0 + S / B + (N + D - 1) o + (D - 1) step / B`` with NCCL's steps
and ``D = 4`` fits its 31 sizes within 8 % at >= 64 MiB and 14 % at <= 64 KiB
(three free parameters, ``T0``, ``B`` and ``o``; ``D = 3`` would fit within 3
and 15 %), and ``simcoll calibrate`` on it now gives 12.6 and 3.1 % (42.3 and
7.4 % with the schedule's own pieces). With three stages calibration reaches
3.8 % only by parameters under which the tuner runs the ring from 64 MiB,
which the log did not. CollNet Chain keeps the schedule's own pieces (not
modelled as a step pipeline).

>>> step_bytes("nvls", 8 << 30, channels=16, heads=8, num_nodes=1)  # 128 KiB chunks
16777216
>>> step_bytes("nvls", 2 << 20, channels=16, heads=8, num_nodes=1)  # 16 KiB chunks
2097152
>>> pipeline("nvls_tree", channels=16, heads=8, num_nodes=4)["stages"]
5
"""

from __future__ import annotations

import math
from typing import Any

from ..errors import OptionError
from .constants import TunerConstants, generation, load_constants

#: NCCL algorithms that move the buffer in steps of ``nChannels x nHeads`` chunks.
PIPELINED_ALGORITHMS = ("nvls", "nvls_tree", "collnet_direct")
#: Stages of NCCL's NVLS kernel a step passes through inside a node: scatter,
#: reduce + multicast, gather (device/all_reduce.h warp groups).
NODE_STAGES = 3


def _max_chunk_bytes(algorithm: str, num_nodes: int, constants: TunerConstants) -> int:
    chunk = int(constants["nvls_chunk_bytes"])
    if algorithm == "nvls_tree" and num_nodes >= 4:
        chunk = min(chunk, int(constants["nvls_tree_max_chunk_bytes_from_4_nodes"]))
    return chunk


def _cuts(algorithm: str, constants: TunerConstants) -> list[tuple[int, int]]:
    table = constants["nvls_tree_chunk_cuts" if algorithm == "nvls_tree" else "nvls_chunk_cuts"]
    return [(int(k), int(c)) for k, c in table]


def _check(algorithm: str, channels: int, heads: int, num_nodes: int) -> None:
    if algorithm not in PIPELINED_ALGORITHMS:
        raise OptionError(f"NCCL step pipeline: {algorithm!r} is not one of {PIPELINED_ALGORITHMS}")
    if channels < 1 or heads < 1 or num_nodes < 1:
        raise OptionError(
            f"NCCL step pipeline: channels, heads and nodes must be at least 1, got {channels}, {heads}, {num_nodes}"
        )


def _buffer_step(buffer_step_bytes: int | None, constants: TunerConstants) -> int:
    """One Simple buffer step: ``buffer_step_bytes`` (NCCL_BUFFSIZE / 8), or
    NCCL's default buffer's (``simple_step_bytes``) where it is None."""
    return int(constants["simple_step_bytes"]) if buffer_step_bytes is None else int(buffer_step_bytes)


def _collnet_depth(heads: int, gpus_per_node: int | None) -> int:
    """CollNet Direct's ``depth`` (graph/connect.cc): 1 where a node's one
    GPU has no peers to scatter to or gather from, else 2."""
    return 2 if (heads if gpus_per_node is None else gpus_per_node) > 1 else 1


def _collnet_chunk(size_bytes: float, concurrent: int, depth: int, start: int, constants: TunerConstants) -> int:
    """CollNet Direct's chunk: ``start`` halved while the buffer holds fewer
    than ``k x depth`` steps of it and it is above ``floor``, for each
    ``[k, floor]`` of ``collnet_direct_chunk_halvings`` in order."""
    chunk = start
    for k, floor in constants["collnet_direct_chunk_halvings"]:
        while size_bytes < int(k) * depth * concurrent * chunk and chunk > int(floor):
            chunk //= 2
    return chunk


def chunk_bytes(
    algorithm: str,
    size_bytes: float,
    *,
    channels: int,
    heads: int,
    num_nodes: int,
    gpus_per_node: int | None = None,
    buffer_step_bytes: int | None = None,
    constants: TunerConstants | None = None,
) -> int:
    """NCCL's chunk for ``size_bytes`` (enqueue.cc ``calcCollChunking``).
    NVLS and NVLSTree: the largest chunk, cut in order by each ``[k, c]`` of
    the constants while the buffer is below ``k`` steps of the current chunk.
    CollNet Direct: one Simple buffer step (``buffer_step_bytes``, NCCL_BUFFSIZE
    / 8; None: NCCL's default buffer's), halved while the buffer holds too few
    steps (:func:`_collnet_chunk`), the pipeline's depth being 2 where a node
    has more than one GPU (``gpus_per_node``, None: ``heads``)."""
    _check(algorithm, channels, heads, num_nodes)
    constants = constants or load_constants()
    concurrent = channels * heads
    if algorithm == "collnet_direct":
        start = _buffer_step(buffer_step_bytes, constants)
        return _collnet_chunk(size_bytes, concurrent, _collnet_depth(heads, gpus_per_node), start, constants)
    chunk = _max_chunk_bytes(algorithm, num_nodes, constants)
    for k, c in _cuts(algorithm, constants):
        if size_bytes < k * concurrent * chunk and chunk > c:
            chunk = c
    return chunk


def step_bytes(algorithm: str, size_bytes: float, *, channels: int, heads: int, num_nodes: int, **options: Any) -> int:
    """Bytes one NCCL step moves: ``channels x heads x`` :func:`chunk_bytes`
    (``options`` are its keywords)."""
    chunk = chunk_bytes(algorithm, size_bytes, channels=channels, heads=heads, num_nodes=num_nodes, **options)
    return channels * heads * chunk


def stages(algorithm: str, num_nodes: int) -> int:
    """Pipeline stages a step passes through: :data:`NODE_STAGES` inside a
    node, plus one per level of NVLSTree's inter-node tree
    (``ceil(log2(nodes))``; fitted: 1, 2 and 3 more stages give the 2-, 4- and
    8-node nccl-tests#309 logs' latency within 5 %), or one for CollNet
    Direct's network (inside the node its kernel scatters a step to the
    heads, reduces it there and spreads the sum back, as NVLS does; between
    the two the proxy posts the step to the IB switches, which reduce it and
    return the sum: one stage however many switch levels, as a stream)."""
    if algorithm == "nvls_tree" and num_nodes > 1:
        return NODE_STAGES + math.ceil(math.log2(num_nodes))
    if algorithm == "collnet_direct":
        return NODE_STAGES + 1
    return NODE_STAGES


def _chunks_possible(algorithm: str, num_nodes: int, start: int, constants: TunerConstants) -> set[int]:
    """Every chunk the rule can give (CollNet Direct: ``start``, halved while
    above the smallest floor)."""
    if algorithm == "collnet_direct":
        floor = min(int(f) for _, f in constants["collnet_direct_chunk_halvings"])
        chunks, chunk = {start}, start
        while chunk > floor:
            chunk //= 2
            chunks.add(chunk)
        return chunks
    return {_max_chunk_bytes(algorithm, num_nodes, constants)} | {c for _, c in _cuts(algorithm, constants)}


def pipeline(
    algorithm: str,
    *,
    channels: int,
    heads: int,
    num_nodes: int,
    gpus_per_node: int | None = None,
    buffer_step_bytes: int | None = None,
    constants: TunerConstants | None = None,
) -> dict[str, Any]:
    """The pipeline an Algorithm carries in ``metadata["step_pipeline"]``:
    ``stages`` (:func:`stages`) and ``step_bytes``, a table of
    ``[from_size_bytes, step_bytes]`` rows in increasing size (a buffer of
    ``size_bytes`` uses the last row whose first entry is at most it), so
    that the simulator needs no NCCL rule to time any size.
    ``gpus_per_node`` and ``buffer_step_bytes`` are :func:`chunk_bytes`'s.

    >>> pipeline("collnet_direct", channels=2, heads=8, num_nodes=4, gpus_per_node=8)["step_bytes"][-2:]
    [[536870912, 4194304], [1073741824, 8388608]]
    """
    _check(algorithm, channels, heads, num_nodes)
    constants = constants or load_constants()
    options = {"gpus_per_node": gpus_per_node, "buffer_step_bytes": buffer_step_bytes, "constants": constants}
    concurrent = channels * heads
    if algorithm == "collnet_direct":
        depth = _collnet_depth(heads, gpus_per_node)
        ks = [int(k) * depth for k, _ in constants["collnet_direct_chunk_halvings"]]
    else:
        ks = [int(k) for k, _ in _cuts(algorithm, constants)]
    # the chunk changes only where the buffer crosses k x concurrent x (a chunk it can have)
    chunks = _chunks_possible(algorithm, num_nodes, _buffer_step(buffer_step_bytes, constants), constants)
    edges = sorted({0} | {k * concurrent * c for k in ks for c in chunks})
    rows: list[list[int]] = []
    for edge in edges:
        step = step_bytes(algorithm, edge, channels=channels, heads=heads, num_nodes=num_nodes, **options)
        if not rows or rows[-1][1] != step:
            rows.append([edge, step])
    return {"stages": stages(algorithm, num_nodes), "step_bytes": rows}


def tree_pipeline(
    *,
    channels: int,
    chunk_bytes: int | None = None,
    gpus_per_node: int,
    num_nodes: int,
    compute_capability: int,
    constants: TunerConstants | None = None,
) -> dict[str, Any]:
    """The pipeline of NCCL's tree with the Simple protocol, for
    ``metadata["step_pipeline"]``. Each channel moves its share in chunks of
    one buffer step (``chunk_bytes``: enqueue.cc gives the tree with Simple
    ``buffSize / NCCL_STEPS`` and no smaller; None: NCCL's default buffer's,
    ``simple_step_bytes``), up the tree and down again: a
    chunk crosses ``2 x depth`` hops, NCCL's tree depth being ``GPUs per
    node - 1 + log2(nodes)`` (graph/connect.cc), and ``2 x log2(nodes)`` of
    them cross the network. A channel is one thread block, moving at most
    NCCL's own per-channel tree rate (``per_channel_max_tree_bw``, tuning.cc,
    a bus bandwidth: half of it for an Allreduce's algorithm bandwidth).
    :func:`simcoll.simulator.algorithm_mode` times it: the network hops at the
    schedule's bottleneck, the others at a channel's rate.

    >>> t = tree_pipeline(channels=16, chunk_bytes=1 << 20, gpus_per_node=8, num_nodes=2, compute_capability=90)
    >>> t["stages"], t["network_stages"], t["step_bytes"], round(t["channel_Bps"] / 1e9, 1)
    (16, 2, [[0, 16777216]], 20.7)
    """
    constants = constants or load_constants()
    chunk_bytes = _buffer_step(chunk_bytes, constants)
    if min(channels, chunk_bytes, gpus_per_node, num_nodes) < 1:
        raise OptionError(
            f"NCCL tree pipeline: channels, chunk, GPUs per node and nodes must be at least 1, got "
            f"{channels}, {chunk_bytes}, {gpus_per_node}, {num_nodes}"
        )
    network = math.ceil(math.log2(num_nodes)) if num_nodes > 1 else 0
    per_channel_GBps = constants.per_generation("per_channel_max_tree_bw", generation(compute_capability), num_nodes)
    return {
        "stages": 2 * (gpus_per_node - 1 + network),
        "step_bytes": [[0, channels * chunk_bytes]],
        "channels": channels,
        "channel_Bps": per_channel_GBps * 1e9 * float(constants["tree_collnet_algbw_fraction"]),
        "network_stages": 2 * network,
    }


__all__ = ["NODE_STAGES", "PIPELINED_ALGORITHMS", "chunk_bytes", "pipeline", "step_bytes", "stages", "tree_pipeline"]

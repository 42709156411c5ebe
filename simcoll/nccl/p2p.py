"""NCCL's point-to-point path as the baseline: what ``alltoall_perf`` and
``sendrecv_perf`` of nccl-tests run, as an Algorithm.

Neither is a collective NCCL's tuner chooses for: nccl-tests posts, between
``ncclGroupStart`` and ``ncclGroupEnd``, one ``ncclSend`` and one
``ncclRecv`` per peer (Alltoall: every rank, itself included, a block of
``size / P`` bytes; SendRecv: the whole buffer to rank ``r + 1`` and from
rank ``r - 1``, cyclically). NCCL puts every peer's operations into one
kernel, each on channels of its own (``ncclP2pChannelBaseForRound``,
``src/include/channel.h``), so a rank's transfers to all its peers run at
once and share its links; that is the ``direct`` schedule (Alltoall) and the
cyclic shift (SendRecv), which the simulator times with the model's costs.

The protocol is NCCL's per-peer choice (``addP2pToPlan``,
``src/enqueue.cc``): LL where a peer's bytes are at most ``nChannels x
NCCL_P2P_LL_THRESHOLD`` (16 KiB; ``p2p_ll_threshold_bytes`` in
``nccl_2_30.yaml``) and the connection has LL buffers, else Simple. A peer's
channel count there starts at ``min(nChannelsMin, ceil(bytes /
minPartSize))``, ``minPartSize`` being an eighth (one node) or half (several)
of the p2p chunk (``NCCL_P2P_NVL_CHUNKSIZE`` 512 KiB over NVLink,
``NCCL_P2P_PCI_CHUNKSIZE`` or ``NCCL_P2P_NET_CHUNKSIZE`` 128 KiB otherwise),
so one channel up to 16 KiB and LL exactly when a peer gets at most 16 KiB.
Connections through the network have no LL buffers unless
``NCCL_ALLOC_P2P_NET_LL_BUFFERS=1`` (``src/init.cc``; ``src/transport/net.cc``
allocates them only then), so on several nodes, where most peers are across
the network, the whole exchange is timed with Simple
(``p2p_net_ll_buffers`` in ``nccl_2_30.yaml``). NCCL_PROTO restricts the
tuner's collectives only (``src/graph/tuning.cc``), not point-to-point.

Not modelled: the PXN relay (a rank reaching a remote peer through the
NVLink peer next to the peer's rail), the order of rounds inside a channel
and the p2p chunk pipeline; the measured ramp of Alltoall between 1 and
256 MB is slower than this schedule's (``docs/accuracy.md``).
"""

from __future__ import annotations

from ..algorithm import Algorithm
from ..errors import NotApplicableError
from ..machines import Machine, as_machine
from .cache import cached_schedule
from .constants import load_constants
from .tuner import PROTOCOL_NAMES

#: nccl-tests' point-to-point tests, by simcoll collective name.
P2P_COLLECTIVES = ("alltoall", "sendrecv")


def p2p_peer_bytes(collective: str, num_ranks: int, size_bytes: float) -> float:
    """Bytes one rank sends one peer in nccl-tests' ``size`` column: a
    block of the buffer for Alltoall, the whole buffer for SendRecv.

    >>> p2p_peer_bytes("alltoall", 8, 1 << 20), p2p_peer_bytes("sendrecv", 2, 1 << 20)
    (131072.0, 1048576.0)
    """
    return float(size_bytes) / num_ranks if collective == "alltoall" else float(size_bytes)


def p2p_protocol(peer_bytes: float, *, across_nodes: bool = False) -> str:
    """NCCL's protocol for a point-to-point transfer of ``peer_bytes``
    (module docstring): ``"ll"`` up to ``p2p_ll_threshold_bytes`` inside a
    node, else ``"simple"``; ``"simple"`` across nodes, whose connections
    have no LL buffers by default.

    >>> p2p_protocol(16384), p2p_protocol(16385), p2p_protocol(64, across_nodes=True)
    ('ll', 'simple', 'simple')
    """
    constants = load_constants()
    has_ll = not across_nodes or bool(constants["p2p_net_ll_buffers"])
    return "ll" if has_ll and peer_bytes <= float(constants["p2p_ll_threshold_bytes"]) else "simple"


def nccl_p2p_protocol(machine: Machine | str, collective: str, size_bytes: float, nccl=None) -> str:
    """The protocol (``LL`` or ``Simple``: NCCL's and the cost model's spelling) NCCL's
    point-to-point path gives ``collective`` on ``size_bytes`` bytes on
    ``machine``: :func:`p2p_protocol` of one peer's bytes, across nodes
    where the machine has several. ``nccl`` (a release, :func:`~simcoll.nccl.versions.as_setup`):
    releases before 2.13 send point-to-point with Simple only (NCCL 2.12.12
    enqueue.cc has no ``NCCL_P2P_LL_THRESHOLD``), as does an ``NCCL_PROTO`` without LL.

    >>> nccl_p2p_protocol("dgx-a100", "alltoall", 64 << 10), nccl_p2p_protocol("dgx-a100*2", "alltoall", 64 << 10)
    ('LL', 'Simple')
    """
    from .versions import as_setup

    machine = as_machine(machine)
    setup = as_setup(nccl)
    allowed = setup.protocols()
    if setup.constants.model != "tune-model" or (allowed is not None and "ll" not in allowed):
        return PROTOCOL_NAMES["simple"]
    peer = p2p_peer_bytes(collective, machine.num_ranks, size_bytes)
    return PROTOCOL_NAMES[p2p_protocol(peer, across_nodes=len(machine.topology.nodes) > 1)]


def nccl_p2p_algorithm(machine: Machine | str, collective: str, size_bytes: int, nccl=None) -> Algorithm:
    """The Algorithm NCCL runs for nccl-tests' point-to-point ``collective``
    (``alltoall`` or ``sendrecv``) on ``size_bytes`` bytes: every peer's
    transfer at once, with NCCL's per-peer protocol in
    ``metadata["protocol"]`` and the label (``p2p/LL``, ``p2p/Simple``) in
    ``metadata["nccl_choice"]``.

    >>> a = nccl_p2p_algorithm("dgx-a100", "alltoall", 1 << 30)
    >>> a.metadata["nccl_choice"], a.metadata["protocol"], a.name
    ('p2p/Simple', 'Simple', 'nccl')
    >>> nccl_p2p_algorithm("dgx-a100", "alltoall", 8 << 10).metadata["nccl_choice"]
    'p2p/LL'
    """
    from ..algorithms import generate

    machine = as_machine(machine)
    if collective not in P2P_COLLECTIVES:
        raise NotApplicableError(f"nccl: {collective} is not one of NCCL's point-to-point operations")
    if machine.num_ranks < 2:
        raise NotApplicableError(f"nccl: {machine.name} has one GPU, no peer to exchange with")
    protocol = nccl_p2p_protocol(machine, collective, size_bytes, nccl)
    algorithm = cached_schedule(("p2p", collective), machine.topology, lambda: generate("direct", machine, collective))
    metadata = dict(algorithm.metadata)
    metadata.update(
        protocol=protocol,
        nccl_choice=f"p2p/{protocol}",
        nccl_reason="point-to-point: every peer's send and receive at once (NCCL has no algorithm choice)",
    )
    return algorithm.relabelled("nccl", metadata)


__all__ = ["P2P_COLLECTIVES", "nccl_p2p_algorithm", "nccl_p2p_protocol", "p2p_peer_bytes", "p2p_protocol"]

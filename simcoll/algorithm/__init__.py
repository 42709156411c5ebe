"""The Algorithm type: a topology-level schedule of chunk transfers.

An :class:`Algorithm` says who sends which chunk where, and when, for one
:class:`~simcoll.collectives.Collective`. "When" takes one of two forms:

- **steps** (SCCL §3.3): every transfer has a ``step``; step *s* lasts
  ``rounds_per_step[s]`` rounds. A transfer in step *s* reads the state at the
  start of step *s* and its chunk is at the destination from step *s + 1* on.
- **timed** (TACCL): every transfer has ``start_s`` and ``end_s``, and may
  belong to a contiguity ``group`` of transfers on the same link sent as one
  message.

``op`` is ``"copy"`` (the destination's copy of the chunk becomes the
source's) or ``"reduce"`` (the destination combines the source's value into
its own). Producers build Algorithms; consumers (verifier, analytic cost,
simulator, compiler) read them; neither knows the other.

In-network reduction (NVLink SHARP, IB SHARP) is a second kind of scheduled
operation, :class:`SwitchReduction`: switch ``S`` reads chunk ``c`` from each
rank of ``sources``, combines the values (one source: a plain multicast) and
delivers the result to every rank of ``destinations``, whose copy of ``c`` it
replaces. It is scheduled like a transfer (a ``step``, or ``start_s`` /
``end_s``), reads the state at the start of its batch and lands at the end, and
lives in :attr:`Algorithm.switch_reductions`. Consumers that cannot time or
lower it refuse it by name (:meth:`Algorithm.require_point_to_point`).

Large schedules hold their transfers as NumPy columns (:class:`TransferTable`)
and their step-scheduled switch reductions likewise
(:class:`SwitchReductionTable`); both read as tuples of the objects. A
schedule that shifting every rank by whole nodes maps onto itself (rings that
repeat node after node) can be held as an :class:`OrbitTable`: the transfers
of its first nodes and the rotation that gives the rest; it reads as its
listed transfers too, up to :data:`~simcoll.limits.MAX_TRANSFERS`, and the
verifier, the simulator and ``.npz`` files work on it as it is
(:attr:`Algorithm.orbit`).

The package, one concept per module:

- :mod:`~simcoll.algorithm.operations`: :class:`Transfer` and :class:`SwitchReduction`;
- :mod:`~simcoll.algorithm.tables`: their NumPy column tables;
- :mod:`~simcoll.algorithm.orbit`: :class:`OrbitTable`, a schedule held by its rotation;
- :mod:`~simcoll.algorithm.relation`: the bandwidth relation
  (:class:`BandwidthConstraint`, :class:`PairSet`) and its index (:class:`RelationIndex`);
- :mod:`~simcoll.algorithm.npz`: the ``.npz`` file format;
- :mod:`~simcoll.algorithm.schedule`: :class:`Algorithm` itself, its checks and its JSON.

Import the names from the package (``from simcoll.algorithm import Algorithm``):
which module holds one is layout, not interface.
"""

from __future__ import annotations

from .npz import NPZ_MAGIC, NPZ_SUFFIX
from .operations import TRANSFER_OPS, SwitchReduction, Transfer
from .orbit import OrbitTable, layouts_rotate
from .relation import BandwidthConstraint, PairSet, RelationIndex, constraint_loads
from .schedule import FORMAT_VERSION, Algorithm, messages, protocol_of, steps_from_lists
from .tables import SwitchReductionTable, TransferTable

__all__ = [
    "FORMAT_VERSION",
    "NPZ_MAGIC",
    "NPZ_SUFFIX",
    "TRANSFER_OPS",
    "Algorithm",
    "BandwidthConstraint",
    "OrbitTable",
    "PairSet",
    "RelationIndex",
    "SwitchReduction",
    "SwitchReductionTable",
    "Transfer",
    "TransferTable",
    "constraint_loads",
    "layouts_rotate",
    "messages",
    "protocol_of",
    "steps_from_lists",
]

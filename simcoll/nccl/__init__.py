"""NCCL's tuning model as pure functions (NCCL 2.30.7).

:mod:`simcoll.nccl.tuner` predicts the time of a collective call for every
algorithm x protocol NCCL has and picks what NCCL's default tuner would;
:mod:`simcoll.nccl.constants` loads the constants from ``nccl_2_30.yaml``;
:mod:`simcoll.nccl.pipeline` says in which steps NCCL moves a buffer through
NVLS; :mod:`simcoll.nccl.baseline` builds the Algorithm NCCL would run.
"""

from .constants import ALGORITHMS, PROTOCOLS, TunerConstants, load_constants
from .tuner import (
    ChannelLimits,
    Choice,
    Comm,
    Graph,
    algorithm_bandwidth,
    bus_bandwidth,
    channels_for,
    choose,
    cost_table,
    latency_us,
    nsteps,
    predict_time_us,
    unavailable_reason,
)

__all__ = [
    "ALGORITHMS",
    "PROTOCOLS",
    "ChannelLimits",
    "Choice",
    "Comm",
    "Graph",
    "TunerConstants",
    "algorithm_bandwidth",
    "bus_bandwidth",
    "channels_for",
    "choose",
    "cost_table",
    "latency_us",
    "load_constants",
    "nsteps",
    "predict_time_us",
    "unavailable_reason",
]

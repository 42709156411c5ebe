"""Analytic α-β cost of algorithms, and nccl-tests reporting conventions.

Three models, from simplest to most detailed:

- :func:`k_synchronous_time_s`: SCCL §3.6, ``S·α + (R/C)·L·β`` for a
  k-synchronous algorithm with S steps, R rounds, C chunks and L input bytes
  on a machine whose links all share one α and β.
- :func:`step_time_s`: barrier-synchronous steps on a heterogeneous machine:
  each step lasts as long as its slowest rank pair.
- :func:`critical_path_time_s`: no barriers. A transfer starts when its chunk
  is at the source (after every earlier-step update of it) and its rank pair
  is free; it takes ``α + n/B`` on that pair's route, plus ``T_R(n)`` at the
  receiver when it reduces (NV-Group Table 2). Transfers on one rank pair are
  serialised in schedule order; a TACCL contiguity group on one pair is one
  message (one α). On a uniform machine this gives the NV-Group closed forms,
  e.g. ring Allreduce = eqs. (1) + (2) = eq. (3).

Both timed models pay the costs of :mod:`simcoll.cost_model` as the simulator
does: links at their effective rate, the protocol's efficiency (``n /
efficiency`` wire bytes) and per-hop latency (added to α), a fused reduction
(``compute.fused``: the message's rate capped at the reduction rate, no
``T_R`` after it) and the call's fixed cost once. With those costs absent
(efficiency 1, latencies 0, unfused) they are the plain α-β forms.

Sizes follow nccl-tests: ``size_bytes`` is the buffer the collective is named
by (:attr:`Collective.size_chunks` chunks), so one chunk is
``size_bytes / size_chunks`` bytes.
"""

from __future__ import annotations

from collections import defaultdict
from fractions import Fraction
from itertools import groupby

import numpy as np

from .algorithm import Algorithm, OrbitTable, Transfer, messages, protocol_of
from .collectives import Collective
from .errors import AlgorithmError, TopologyError
from .machines import Machine, as_machine
from .units import check_size_bytes


def k_synchronous_time_s(
    steps: int, rounds: int, chunks: int, input_bytes: float, alpha_s: float, beta_s_per_byte: float
) -> float:
    """Time of a k-synchronous algorithm on a machine with one α and β.

    Parameters
    ----------
    steps, rounds, chunks : int
        The algorithm's S, R and C.
    input_bytes : float
        L, the input buffer in bytes.
    alpha_s : float
        α, the latency of one step in seconds.
    beta_s_per_byte : float
        β, the inverse bandwidth of one link in seconds per byte.

    Returns
    -------
    float
        ``S·α + (R/C)·L·β`` in seconds.

    References
    ----------
    .. [1] Cai et al., "Synthesizing Optimal Collective Algorithms" (SCCL),
       PPoPP 2021, §3.6 (the cost of a (C, S, R) algorithm).

    Examples
    --------
    >>> k_synchronous_time_s(2, 2, 1, 1e6, 1e-6, 1e-9)  # (1,2,2) Allgather, 1 MB
    0.002002
    """
    return steps * alpha_s + float(Fraction(rounds, chunks)) * input_bytes * beta_s_per_byte


def chunk_bytes(collective: Collective, size_bytes: float) -> float:
    """Bytes per chunk when the collective's named buffer is ``size_bytes``
    (checked by :func:`simcoll.units.check_size_bytes`: at least one byte a chunk)."""
    return check_size_bytes(size_bytes, chunks=collective.size_chunks) / collective.size_chunks


def _route(machine: Machine, t: Transfer):
    route = machine.route(t.src, t.dst)
    if route is None:
        raise TopologyError(f"{machine.name}: {t.describe()} has no route between the two GPUs")
    return route


def _costs(algorithm: Algorithm, machine: Machine, protocol: str | None):
    """(payload rate factor, fused-reduction rate cap, per-message latency,
    per-call cost) of ``algorithm`` on ``machine`` with ``protocol``."""
    model = machine.model
    proto = model.protocol(protocol_of(algorithm, protocol))
    return proto.efficiency, model.fused_reduce_rate_Bps, proto.hop_latency_s, model.call_cost_s(proto.name)


def critical_path_time_s(
    algorithm: Algorithm, machine: Machine | str, size_bytes: float, *, protocol: str | None = None
) -> float:
    """Completion time of an algorithm with no step barriers.

    A transfer starts when its chunk is at the source and its rank pair is
    free, and takes ``α + n/B`` on that pair's route, plus the reduction time
    at the receiver when it reduces (module docstring).

    Parameters
    ----------
    algorithm : Algorithm
        The schedule to cost.
    machine : Machine or str
        The machine (or a topology spec with its default model).
    size_bytes : float
        The buffer the collective is named by (nccl-tests convention).
    protocol : {"LL", "LL128", "Simple"}, optional
        Whose costs apply (default: ``algorithm.metadata["protocol"]``, else
        the model's default; :meth:`simcoll.cost_model.CostModel.protocol`).

    Returns
    -------
    float
        The completion time in seconds.

    Raises
    ------
    AlgorithmError
        When the algorithm is for another rank count, or sends a chunk
        before its source holds it.
    TopologyError
        When a transfer has no route.

    References
    ----------
    .. [1] Sun et al., "NV-Group: link-efficient reduction for distributed
       deep learning on modern dense GPU systems", ICS 2020, Table 2 and
       eqs. (1)-(3) (on a uniform machine ring Allreduce gives eq. (3)).

    Examples
    --------
    >>> from simcoll import generate, load_machine
    >>> m = load_machine("ring:4")  # 25 GB/s, 0.7 us links
    >>> algo = generate("ring", m, "allgather")
    >>> round(critical_path_time_s(algo, m, 4e6) * 1e6, 1)  # 3 steps of 1 MB
    122.1
    """
    algorithm.require_point_to_point("the analytic critical-path time")
    machine = as_machine(machine)
    _check_fits(algorithm, machine)
    nbytes = chunk_bytes(algorithm.collective, size_bytes)
    efficiency, reduce_cap, hop_s, call_s = _costs(algorithm, machine, protocol)
    orbit = algorithm.orbit
    if orbit is not None and _routes_rotate(machine, orbit):
        # every image of a representative starts and ends when it does (the schedule maps onto
        # itself, and so do its pairs' routes): replay the representatives, each landing in the slot
        # of the first ranks it stands for (OrbitTable.landing_slots), as the simulator does
        slots = orbit.landing_slots()
        g = len(orbit.chunk_map)
        reps = list(orbit.representatives)
        by_step = sorted(range(len(reps)), key=lambda i: reps[i].step)
        batches = [
            [[(reps[i], divmod(int(slots[i]), g))] for i in group]
            for _, group in groupby(by_step, key=lambda i: reps[i].step)
        ]
        layout = algorithm.collective.input_layout
        ready = {(r, c): 0.0 for r in range(orbit.shift_ranks) for c in layout[r]}
    else:
        batches = [[[(t, (t.dst, t.chunk)) for t in message] for message in messages(b)] for b in algorithm.batches()]
        ready = {(r, c): 0.0 for c, r in algorithm.collective.pre}
    pending: dict[tuple[int, int], float] = {}
    pair_free: dict[tuple[int, int], float] = defaultdict(float)
    finish = 0.0
    # A batch is one step (or one start time); its updates land after it has read.
    for batch in batches:
        for message in batch:
            first = message[0][0]
            route = _route(machine, first)
            size = nbytes * len(message)
            starts = []
            for t, _ in message:
                if (t.src, t.chunk) not in ready:
                    raise AlgorithmError(f"{algorithm.name}: {t.describe()} before rank {t.src} holds the chunk")
                starts.append(ready[(t.src, t.chunk)])
            start = max(max(starts), pair_free[(first.src, first.dst)])
            rate = route.bandwidth_Bps * efficiency
            if first.op == "reduce" and reduce_cap < rate:
                rate = reduce_cap
            wire_end = start + size / rate
            pair_free[(first.src, first.dst)] = wire_end
            end = wire_end + (route.alpha_s + hop_s)
            if first.op == "reduce":
                end += machine.model.reduce_after_s(size)
            for _, slot in message:
                pending[slot] = max(pending.get(slot, 0.0), end)
            finish = max(finish, end)
        for slot, t in pending.items():
            ready[slot] = max(ready.get(slot, 0.0), t)
        pending.clear()
    return finish + call_s


def _routes_rotate(machine: Machine, orbit: OrbitTable) -> bool:
    """Whether every rank pair the orbit's schedule uses has the α and
    bandwidth of the pair its rotation moves back to the first ranks (a
    cluster's node shift need not map a fabric onto itself: leaves joining
    two nodes each)."""
    n, s = orbit.num_ranks, orbit.shift_ranks
    src, dst = np.divmod(orbit.rank_pairs(n), n)
    back = src - src % s
    first: dict[tuple[int, int], tuple[float, float] | None] = {}
    for a, b, a0, b0 in zip(
        src.tolist(), dst.tolist(), (src - back).tolist(), ((dst - back) % n).tolist(), strict=True
    ):
        here = _alpha_bandwidth(machine, a, b)
        if here is None:
            return False  # (the full replay names it)
        if (a0, b0) not in first:
            first[(a0, b0)] = _alpha_bandwidth(machine, a0, b0)
        if here != first[(a0, b0)]:
            return False
    return True


def _alpha_bandwidth(machine: Machine, src: int, dst: int) -> tuple[float, float] | None:
    """The α and bandwidth of the route between two ranks, None without one."""
    route = machine.route(src, dst)
    return None if route is None else (route.alpha_s, route.bandwidth_Bps)


def step_time_s(
    algorithm: Algorithm, machine: Machine | str, size_bytes: float, *, protocol: str | None = None
) -> float:
    """Completion time with a barrier after every step.

    Each step lasts as long as its slowest rank pair: all its chunks in one
    message each way, plus the reduction cost when it reduces.

    Parameters
    ----------
    algorithm : Algorithm
        A step-scheduled algorithm.
    machine : Machine or str
        The machine (or a topology spec with its default model).
    size_bytes : float
        The buffer the collective is named by (nccl-tests convention).
    protocol : {"LL", "LL128", "Simple"}, optional
        As for :func:`critical_path_time_s`.

    Returns
    -------
    float
        The completion time in seconds.

    Raises
    ------
    AlgorithmError
        When the algorithm is not step-scheduled or is for another rank count.
    TopologyError
        When a transfer has no route.

    References
    ----------
    .. [1] Cai et al., "Synthesizing Optimal Collective Algorithms" (SCCL),
       PPoPP 2021, §3.6 (steps separated by barriers).

    Examples
    --------
    >>> from simcoll import generate
    >>> algo = generate("ring", "ring:4", "allgather")
    >>> round(step_time_s(algo, "ring:4", 4e6) * 1e6, 1)
    122.1
    """
    machine = as_machine(machine)
    if algorithm.schedule != "steps":
        raise AlgorithmError(f"{algorithm.name}: step_time_s needs a step-scheduled algorithm")
    _check_fits(algorithm, machine)
    nbytes = chunk_bytes(algorithm.collective, size_bytes)
    efficiency, reduce_cap, hop_s, call_s = _costs(algorithm, machine, protocol)
    total = call_s
    for step in range(algorithm.steps):
        per_pair: dict[tuple[int, int], list[Transfer]] = defaultdict(list)
        for t in algorithm.transfers_in_step(step):
            per_pair[(t.src, t.dst)].append(t)
        slowest = 0.0
        for group in per_pair.values():
            route = _route(machine, group[0])
            size = nbytes * len(group)
            reduce_size = nbytes * sum(t.op == "reduce" for t in group)
            rate = route.bandwidth_Bps * efficiency
            if reduce_size and reduce_cap < rate:
                rate = reduce_cap
            cost = (route.alpha_s + hop_s) + size / rate
            if reduce_size:
                cost += machine.model.reduce_after_s(reduce_size)
            slowest = max(slowest, cost)
        total += slowest
    return total


def _check_fits(algorithm: Algorithm, machine: Machine) -> None:
    if algorithm.num_ranks != machine.num_ranks:
        raise AlgorithmError(
            f"{algorithm.name} is for {algorithm.num_ranks} ranks but {machine.name} has {machine.num_ranks}"
        )


def algorithm_time_s(
    algorithm: Algorithm, machine: Machine | str, size_bytes: float, model: str = "critical-path"
) -> float:
    """Analytic time of an algorithm under one of the two models.

    Parameters
    ----------
    algorithm : Algorithm
        The schedule to cost.
    machine : Machine or str
        The machine (or a topology spec with its default model).
    size_bytes : float
        The buffer the collective is named by (nccl-tests convention).
    model : {"critical-path", "steps"}
        :func:`critical_path_time_s` or :func:`step_time_s`.

    Returns
    -------
    float
        The completion time in seconds.

    Raises
    ------
    AlgorithmError
        For an unknown ``model``, or as the chosen model raises.

    Examples
    --------
    >>> from simcoll import generate
    >>> algo = generate("ring", "ring:4", "allgather")
    >>> algorithm_time_s(algo, "ring:4", 4e6, "steps") == step_time_s(algo, "ring:4", 4e6)
    True
    """
    if model == "critical-path":
        return critical_path_time_s(algorithm, machine, size_bytes)
    if model == "steps":
        return step_time_s(algorithm, machine, size_bytes)
    raise AlgorithmError(f"unknown cost model {model!r}: use critical-path or steps")


# -- nccl-tests conventions -----------------------------------------------------
def algbw_GBps(size_bytes: float, time_s: float) -> float:
    """Algorithm bandwidth as nccl-tests reports it.

    Parameters
    ----------
    size_bytes : float
        The buffer the collective is named by.
    time_s : float
        The collective's time in seconds.

    Returns
    -------
    float
        ``size / time`` in GB/s (1e9 bytes per second).

    References
    ----------
    .. [1] NVIDIA nccl-tests, doc/PERFORMANCE.md ("algbw").

    Examples
    --------
    >>> algbw_GBps(1e9, 0.01)
    100.0
    """
    return size_bytes / time_s / 1e9


def busbw_GBps(collective: Collective, size_bytes: float, time_s: float) -> float:
    """Bus bandwidth as nccl-tests reports it.

    Parameters
    ----------
    collective : Collective
        Gives the factor: Allreduce 2(n-1)/n; Allgather, ReduceScatter and
        Alltoall (n-1)/n; the others 1.
    size_bytes : float
        The buffer the collective is named by.
    time_s : float
        The collective's time in seconds.

    Returns
    -------
    float
        :func:`algbw_GBps` times the collective's factor, in GB/s.

    References
    ----------
    .. [1] NVIDIA nccl-tests, doc/PERFORMANCE.md ("busbw").

    Examples
    --------
    >>> from simcoll import make_collective
    >>> busbw_GBps(make_collective("allreduce", 8, 1), 1e9, 0.01)  # 100 GB/s x 2*7/8
    175.0
    """
    return algbw_GBps(size_bytes, time_s) * collective.busbw_factor

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

Sizes follow nccl-tests: ``size_bytes`` is the buffer the collective is named
by (:attr:`Collective.size_chunks` chunks), so one chunk is
``size_bytes / size_chunks`` bytes.
"""

from __future__ import annotations

from collections import defaultdict
from fractions import Fraction

from .algorithm import Algorithm, Transfer, messages
from .collectives import Collective
from .errors import AlgorithmError, TopologyError
from .machines import Machine


def k_synchronous_time_s(
    steps: int, rounds: int, chunks: int, input_bytes: float, alpha_s: float, beta_s_per_byte: float
) -> float:
    """SCCL §3.6: ``S·α + (R/C)·L·β``.

    >>> k_synchronous_time_s(2, 2, 1, 1e6, 1e-6, 1e-9)  # (1,2,2) Allgather, 1 MB
    0.002002
    """
    return steps * alpha_s + float(Fraction(rounds, chunks)) * input_bytes * beta_s_per_byte


def chunk_bytes(collective: Collective, size_bytes: float) -> float:
    """Bytes per chunk when the collective's named buffer is ``size_bytes``."""
    return size_bytes / collective.size_chunks


def _route(machine: Machine, t: Transfer):
    route = machine.route(t.src, t.dst)
    if route is None:
        raise TopologyError(f"{machine.name}: {t.describe()} has no route between the two GPUs")
    return route


def critical_path_time_s(algorithm: Algorithm, machine: Machine, size_bytes: float) -> float:
    """Completion time of ``algorithm`` with no step barriers (module docstring)."""
    _check_fits(algorithm, machine)
    nbytes = chunk_bytes(algorithm.collective, size_bytes)
    ready: dict[tuple[int, int], float] = {(r, c): 0.0 for c, r in algorithm.collective.pre}
    pending: dict[tuple[int, int], float] = {}
    pair_free: dict[tuple[int, int], float] = defaultdict(float)
    finish = 0.0
    # A batch is one step (or one start time); its updates land after it has read.
    for batch in algorithm.batches():
        for message in messages(batch):
            first = message[0]
            route = _route(machine, first)
            size = nbytes * len(message)
            starts = []
            for t in message:
                if (t.src, t.chunk) not in ready:
                    raise AlgorithmError(f"{algorithm.name}: {t.describe()} before rank {t.src} holds the chunk")
                starts.append(ready[(t.src, t.chunk)])
            start = max(max(starts), pair_free[(first.src, first.dst)])
            wire_end = start + size / route.bandwidth_Bps
            pair_free[(first.src, first.dst)] = wire_end
            end = wire_end + route.alpha_s
            if first.op == "reduce":
                end += machine.model.reduce_time_s(size)
            for t in message:
                slot = (t.dst, t.chunk)
                pending[slot] = max(pending.get(slot, 0.0), end)
            finish = max(finish, end)
        for slot, t in pending.items():
            ready[slot] = max(ready.get(slot, 0.0), t)
        pending.clear()
    return finish


def step_time_s(algorithm: Algorithm, machine: Machine, size_bytes: float) -> float:
    """Completion time with a barrier after every step: each step lasts as long
    as its slowest rank pair (all its chunks in one message each way, plus the
    reduction cost when it reduces)."""
    if algorithm.schedule != "steps":
        raise AlgorithmError(f"{algorithm.name}: step_time_s needs a step-scheduled algorithm")
    _check_fits(algorithm, machine)
    nbytes = chunk_bytes(algorithm.collective, size_bytes)
    total = 0.0
    for step in range(algorithm.steps):
        per_pair: dict[tuple[int, int], list[Transfer]] = defaultdict(list)
        for t in algorithm.transfers_in_step(step):
            per_pair[(t.src, t.dst)].append(t)
        slowest = 0.0
        for group in per_pair.values():
            route = _route(machine, group[0])
            size = nbytes * len(group)
            reduce_size = nbytes * sum(t.op == "reduce" for t in group)
            cost = route.alpha_s + size / route.bandwidth_Bps
            if reduce_size:
                cost += machine.model.reduce_time_s(reduce_size)
            slowest = max(slowest, cost)
        total += slowest
    return total


def _check_fits(algorithm: Algorithm, machine: Machine) -> None:
    if algorithm.num_ranks != machine.num_ranks:
        raise AlgorithmError(
            f"{algorithm.name} is for {algorithm.num_ranks} ranks but {machine.name} has {machine.num_ranks}"
        )


def algorithm_time_s(algorithm: Algorithm, machine: Machine, size_bytes: float, model: str = "critical-path") -> float:
    """Analytic time of ``algorithm`` on ``machine`` for a ``size_bytes`` buffer;
    ``model`` is ``"critical-path"`` or ``"steps"``."""
    if model == "critical-path":
        return critical_path_time_s(algorithm, machine, size_bytes)
    if model == "steps":
        return step_time_s(algorithm, machine, size_bytes)
    raise AlgorithmError(f"unknown cost model {model!r}: use critical-path or steps")


# -- nccl-tests conventions -----------------------------------------------------
def algbw_GBps(size_bytes: float, time_s: float) -> float:
    """Algorithm bandwidth, nccl-tests: size / time, in GB/s (1e9 B/s)."""
    return size_bytes / time_s / 1e9


def busbw_GBps(collective: Collective, size_bytes: float, time_s: float) -> float:
    """Bus bandwidth, nccl-tests: algbw × the collective's factor
    (Allreduce 2(n-1)/n; Allgather, ReduceScatter, Alltoall (n-1)/n; else 1)."""
    return algbw_GBps(size_bytes, time_s) * collective.busbw_factor

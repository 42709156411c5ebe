"""The time of a schedule its runtime moves in pipelined steps.

NCCL's NVLS, NVLS-Tree and tree move the buffer in steps of a fixed size
through a fixed number of stages (:mod:`simcoll.nccl.pipeline` writes the
table into the Algorithm's ``metadata["step_pipeline"]``). Such a schedule is
timed by the pipeline formula below, from its busiest resource's load and its
slowest route, not by its messages one by one. Both the fast Algorithm-mode
engine and the reference engine (:mod:`.reference`, rule R7) call it.
"""

from __future__ import annotations

from ..errors import AlgorithmError


def step_and_stages(table: dict, size_bytes: float) -> tuple[int, int]:
    """(step, stages) of a ``metadata["step_pipeline"]`` table for
    ``size_bytes``: the step of the last ``[from_size_bytes, step_bytes]`` row
    that starts at or below it.

    >>> step_and_stages({"stages": 3, "step_bytes": [[0, 1024], [1 << 20, 4096]]}, 2 << 20)
    (4096, 3)
    """
    try:
        rows = [(float(start), int(step)) for start, step in table["step_bytes"]]
        stages = int(table["stages"])
    except (KeyError, TypeError, ValueError):
        raise AlgorithmError(
            f'metadata["step_pipeline"] needs "stages" and "step_bytes" rows [from_size_bytes, step_bytes], got {table!r}'
        ) from None
    if not rows or stages < 1 or any(step < 1 for _, step in rows):
        raise AlgorithmError(f'metadata["step_pipeline"] needs stages >= 1 and positive step_bytes, got {table!r}')
    step = rows[0][1]
    for start, value in rows:
        if size_bytes >= start:
            step = value
    return step, stages


def pipelined_time(
    table: dict,
    size_bytes: float,
    *,
    stream_s: float,
    latency_s: float,
    call_s: float,
    call_overhead_s: float,
    schedule_s: float | None,
) -> tuple[float, float, dict]:
    """(time, call cost, stats) of an Algorithm that its runtime moves in
    pipelined steps (``metadata["step_pipeline"]``, e.g. NCCL's NVLS:
    :mod:`simcoll.nccl.pipeline`).

    The schedule streams the buffer in ``S / B = stream_s`` (its busiest
    resource's busy time). The runtime moves the buffer in
    ``N = max(1, S / step)`` steps through ``D`` stages, a step taking
    ``min(step, S) / B`` plus the step latency ``o = latency_s`` (the slowest α
    of the schedule's routes plus the protocol's hop latency: a step's flag
    crosses them before its slot is reused), so
    ``T = call + S / B + (N + D - 1) o + (D - 1) min(step, S) / B``, the
    pipeline time of ``N + D - 1`` steps. The call pays the runtime's overhead
    (``call_overhead_s``) but not the protocol's call latency, which prices a
    ring's or tree's start (NCCL gives NVLS and CollNet no base latency: tuning.cc,
    ``nccl_2_30.yaml``): the steps and stages are that start.

    NCCL's tree (a table with ``channel_Bps``: its ``channels`` move at most
    that each, and ``network_stages`` of its ``D`` hops cross the network)
    differs in three ways: ``B`` is at most ``channels x channel_Bps``; the
    fill is ``(D - net) x chunk / channel_Bps + (net - 1) x min(step, S) / B``
    (a channel's chunk ``min(step, S) / channels`` crosses the hops inside
    nodes at a channel's rate and all but one network hop, the steady state's,
    at the bottleneck); and the call pays ``call_s``, the protocol's call
    latency included (NCCL prices a tree's start with it).
    Measured: the A3 Mega log (TCPXO, 16 ranks) from 30.5 % to 2.7 % at
    ≥ 64 MB with the shipped model, Snellius 2 x 4 H100 from 9.4 to 8.1 %.
    ``schedule_s`` (the schedule's own simulated time, None when it was not
    run) goes into the stats.

    >>> t, call, stats = pipelined_time({"stages": 2, "step_bytes": [[0, 1 << 20]]}, 4 << 20, stream_s=1e-3,
    ...                                 latency_s=1e-6, call_s=5e-6, call_overhead_s=4e-6, schedule_s=None)
    >>> round(t * 1e6, 3), stats["steps"]   # 4 us + 1 ms + 5 steps of 1 us + a fill of 0.25 ms
    (1259.0, 4.0)
    """
    step, stages = step_and_stages(table, size_bytes)
    steps = max(1.0, size_bytes / step)
    if "channel_Bps" in table:  # NCCL's tree (simcoll.nccl.pipeline.tree_pipeline): channels of a block's rate
        # the buffer streams no faster than its channels; a step's chunk crosses the hops inside nodes at a
        # channel's rate and the network hops at the bottleneck's, one of them the steady state itself; the
        # call pays the protocol's call latency too (NCCL prices a tree's start with it)
        channels, channel_Bps = int(table["channels"]), float(table["channel_Bps"])
        network = int(table.get("network_stages", 0))
        stream_s = max(stream_s, size_bytes / (channels * channel_Bps))
        step_s = stream_s * min(step, size_bytes) / size_bytes
        chunk_s = min(step, size_bytes) / channels / channel_Bps
        fill_s = (stages - network) * chunk_s + (network - 1) * step_s if network else (stages - 1) * chunk_s
    else:
        step_s = stream_s * min(step, size_bytes) / size_bytes
        fill_s = (stages - 1) * step_s
        call_s = call_overhead_s
    time_s = call_s + stream_s + (steps + stages - 1) * latency_s + fill_s
    stats = {
        "steps": steps,
        "stages": stages,
        "step_bytes": step,
        "step_latency_s": latency_s,
        "stream_s": stream_s,
        "schedule_s": schedule_s,
    }
    return time_s, call_s, stats

"""Calibration of a cost model from GPU microbenchmarks run as Programs.

Every microbenchmark is an ordinary 2-rank :class:`~simcoll.program.Program`
(so it is checked on a CPU like any schedule: the NumPy reference and the
host-thread core run it), measured on a GPU by :func:`measure` through
:func:`simcoll.gpu.runner.run`, and fitted by :func:`fit_calibration` with the
project's general least-squares fitter (:mod:`simcoll.calibration.fit`, the
same code ``simcoll calibrate --nccl-tests`` uses).

The benchmarks (TACCL §5 profiles α and β per link type the same way; GC3 §5
motivates the one-thread-block rate):

========== =============================================== ===========================================
kind       Program                                         predicted time (the fit's model)
========== =============================================== ===========================================
sendrecv   rank 0 sends k chunks to rank 1, one executor   launch + messages·α + bytes / link_bw
           each side; ``serial`` = k sends of 1 chunk,     + signal + last / max(tb_bw, link_bw)
           ``together`` = one send of k chunks (α vs β)
ll         the sendrecv Program with protocol LL           launch + messages·α + bytes / (link_bw·ll)
                                                           + signal + last / max(tb_bw, link_bw)
copy       one executor copies a chunk on rank 0           launch + bytes / tb_bw
reduce     copy, then reduce rank 1's chunk into it        launch + 2·bytes / tb_bw + tiles·r0
                                                           + bytes / reduce_bw
pingpong   R signal / wait round trips between the ranks   launch + 2·R·(α + signal)
                                                           + bytes / max(tb_bw, link_bw)
relay      rank 0 sends a chunk to rank 1, which keeps a   launch + messages·α + bytes·(1 + w) / block
           copy and sends it back (``rcs``: one read, two  + α + first / link_bw + 2·signal
           writes per element) to rank 0                   + last / block; fitted after the others
========== =============================================== ===========================================

The relay gives ``executor.write_share`` ``w`` (:func:`fit_write_share`):
the share of a copy's time a block's write takes, its read the rest. On the
committed H100 and H200 sweeps writes weigh about 0.78 (Broadcast and
Allgather, which forward with ``rcs``, were 6-15 % slower than simulated with
reads and writes alike); samples measured before the relay leave it out.

``last`` is the last message's bytes: the receiving block copies each message
out of its FIFO slot while the next arrives, and the last copy shows (the
model is written ``stream_bound``, with the block rate max(tb_bw, link_bw)).
``messages`` counts send instructions × tiles (the interpreter sends one
message per tile; the simulator's Program mode pays α per message, see
:mod:`simcoll.simulator.program_mode`); a chunk is cut into tiles of
``tile_bytes`` (the runner's FIFO slot). ``launch`` is one persistent-kernel
launch (the run with the smallest copy measures it). ``signal`` is how long a
flag one block raises takes to reach the block polling it (the model's
``executor.signal_latency_s``): a stream of messages shows it once, for the
last; every one-way trip of the ping-pong pays it after its α. On an H100 it
is 1.45 µs beside α = 4.18 µs, and without it the small sizes of a ring
Allreduce simulate 15-20 % fast (``benchmarks/measured/h100-2026-11-26/``).
"""

from __future__ import annotations

import datetime as _dt
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from simcoll.calibration.fit import FitResult, fit_linear, fit_model
from simcoll.collectives import Collective, custom_collective
from simcoll.cost_model import ComputeParams, CostModel, ExecutorParams, LinkParams
from simcoll.errors import ModelError
from simcoll.program import Executor, Instruction, Program, RankProgram, Ref

from .table import default_limits

KINDS = ("sendrecv", "ll", "copy", "reduce", "pingpong", "relay")
#: Kinds the joint fit needs; the relay (for ``executor.write_share``) is fitted after it when measured.
JOINT_KINDS = KINDS[:-1]
#: The relay's sizes from which its time per byte is its block's rate (:func:`fit_write_share`).
RELAY_FROM_BYTES = 4 << 20
#: Parameters of the fit, in the order of the vector ``predict_times`` takes.
PARAMS = ("launch_s", "alpha_s", "link_Bps", "tb_Bps", "reduce_launch_s", "reduce_Bps", "ll_efficiency",
          "signal_latency_s")  # fmt: skip
_BOUNDS = {
    "launch_s": (0.0, 1.0),
    "alpha_s": (0.0, 1.0),
    "link_Bps": (1e6, 1e14),
    "tb_Bps": (1e6, 1e14),
    "reduce_launch_s": (0.0, 1.0),
    "reduce_Bps": (1e6, 1e15),
    "ll_efficiency": (0.01, 1.0),
    "signal_latency_s": (0.0, 1.0),
}


@dataclass(frozen=True)
class Microbenchmark:
    """One Program and how to read its time: ``kind`` (:data:`KINDS`),
    ``messages_per_tile`` (send instructions per tile), ``chunks`` moved per
    instruction, ``rounds`` (ping-pong round trips), and ``sizes`` (the
    collective sizes in bytes to measure)."""

    name: str
    kind: str
    program: Program
    sizes: tuple[int, ...]
    messages_per_tile: int = 0
    rounds: int = 0

    def chunk_bytes(self, size_bytes: int) -> int:
        return size_bytes // self.program.collective.size_chunks

    def tiles(self, size_bytes: int) -> int:
        return max(1, math.ceil(self.chunk_bytes(size_bytes) / _tile_bytes(self)))


@dataclass(frozen=True)
class Sample:
    """One measured (or synthetic) time of a benchmark at a size."""

    benchmark: Microbenchmark
    size_bytes: int
    time_s: float


def _ins(op: str, src: tuple | None = None, dst: tuple | None = None, n: int = 1) -> Instruction:
    return Instruction(op, None if src is None else Ref(*src), None if dst is None else Ref(*dst), n)


def _two_ranks(name: str, coll: Collective, rank0: Executor | Sequence[Executor], rank1: Executor | None,
               buffers: Sequence[dict], **attrs: Any) -> Program:  # fmt: skip
    first = (rank0,) if isinstance(rank0, Executor) else tuple(rank0)
    ranks = (RankProgram(0, dict(buffers[0]), first), RankProgram(1, dict(buffers[1]), (rank1,) if rank1 else ()))
    return Program(name, coll, ranks, **attrs)


def sendrecv_program(chunks: int = 1, *, serial: bool = False, protocol: str = "Simple",
                     tile_bytes: int | None = None) -> Program:  # fmt: skip
    """Rank 0 sends its ``chunks`` input chunks to rank 1's output: one send
    of all (``serial=False``, TACCL's "together") or ``chunks`` sends of one
    (``serial=True``), one executor per rank on channel 0."""
    ids = list(range(chunks))
    coll = custom_collective("sendrecv", [ids, []], [[], ids])
    if serial:
        sends = tuple(_ins("send", ("input", i)) for i in ids)
        recvs = tuple(_ins("recv", dst=("output", i)) for i in ids)
    else:
        sends, recvs = (_ins("send", ("input", 0), n=chunks),), (_ins("recv", dst=("output", 0), n=chunks),)
    kind = "serial" if serial else "together"
    return _two_ranks(f"sendrecv-{kind}-{chunks}-{protocol}", coll, Executor(0, sends, send_peer=1),
                      Executor(0, recvs, recv_peer=0), [{"input": chunks}, {"output": chunks}],
                      protocol=protocol, tile_bytes=tile_bytes)  # fmt: skip


def copy_program(executors: int = 1, *, tile_bytes: int | None = None) -> Program:
    """Rank 0 copies its input to its output, ``executors`` thread blocks each
    copying one chunk (one: the one-thread-block copy rate the model's
    ``tb_Bps`` is; one per SM: how near the interpreter's data path comes to
    the device's memory rate); rank 1 idles."""
    if executors < 1:
        raise ModelError(f"a copy Program needs at least one executor, not {executors}")
    ids = list(range(executors))
    coll = custom_collective("copy", [ids, []], [ids, []])
    execs = [Executor(e, (_ins("copy", ("input", e), ("output", e)),)) for e in ids]
    buffers = [{"input": executors, "output": executors}, {}]
    return _two_ranks(f"copy-{executors}tb", coll, execs, None, buffers, tile_bytes=tile_bytes)


def reduce_program(*, tile_bytes: int | None = None) -> Program:
    """One executor on rank 0 copies its input chunk to its output, then
    reduces rank 1's input chunk into it (an Allreduce-to-one of 2 ranks)."""
    coll = custom_collective("reduce-to-0", [[0], [0]], [[0], []], combining=True)
    ex = Executor(0, (_ins("copy", ("input", 0), ("output", 0)), _ins("reduce", ("input", 0, 1), ("output", 0))))
    return _two_ranks("reduce-1tb", coll, ex, None, [{"input": 1, "output": 1}, {"input": 1}], tile_bytes=tile_bytes)


def pingpong_program(rounds: int, *, tile_bytes: int | None = None) -> Program:
    """``rounds`` flag round trips: rank 0 signals and waits, rank 1 waits and
    signals (no data); rank 0 also copies its one chunk so that the Program
    has a postcondition to check."""
    coll = custom_collective("pingpong", [[0], []], [[0], []])
    a = (_ins("copy", ("input", 0), ("output", 0)),) + (_ins("signal"), _ins("wait")) * rounds
    b = (_ins("wait"), _ins("signal")) * rounds
    return _two_ranks(f"pingpong-{rounds}", coll, Executor(0, a, send_peer=1, recv_peer=1),
                      Executor(0, b, send_peer=0, recv_peer=0), [{"input": 1, "output": 1}, {}],
                      tile_bytes=tile_bytes)  # fmt: skip


def relay_program(*, tile_bytes: int | None = None) -> Program:
    """Rank 0 sends its chunk to rank 1, whose one executor keeps a copy and
    sends it back (``rcs``: one read, two writes per element) to rank 0's
    output: the relaying block is the bottleneck, and its time per byte
    against the copy's weighs a write against a read
    (``executor.write_share``, :func:`fit_write_share`)."""
    coll = custom_collective("relay", [[0], []], [[0], [0]])
    rank0 = (Executor(0, (_ins("send", ("input", 0)),), send_peer=1),
             Executor(1, (_ins("recv", dst=("output", 0)),), recv_peer=1))  # fmt: skip
    rank1 = Executor(0, (_ins("rcs", dst=("output", 0)),), send_peer=0, recv_peer=0)
    return _two_ranks("relay", coll, rank0, rank1, [{"input": 1, "output": 1}, {"output": 1}], tile_bytes=tile_bytes)


def size_sweep(low: int = 1 << 10, high: int = 1 << 30, factor: int = 4) -> tuple[int, ...]:
    """Sizes ``low, low·factor, ...`` up to ``high`` (bytes)."""
    out, s = [], low
    while s <= high:
        out.append(s)
        s *= factor
    return tuple(out)


def microbenchmarks(
    *, sizes: Sequence[int] | None = None, serial_chunks: int = 8, rounds: Sequence[int] = (1, 16, 64),
    tile_bytes: int | None = None,
) -> list[Microbenchmark]:  # fmt: skip
    """The calibration suite (module docstring). ``sizes``: the send/recv,
    LL, copy and reduce sweep (default 1 KiB .. 1 GiB by factors of 4);
    ``serial_chunks``: k of the serial-vs-together pair; ``rounds``: the
    ping-pong round trips; ``tile_bytes``: the FIFO slot (default: the
    runner's, ``gpu/limits.yaml``)."""
    tile = tile_bytes or default_limits().default_tile_bytes
    sweep = tuple(sizes) if sizes is not None else size_sweep()
    k = serial_chunks
    pair_sizes = tuple(s for s in sweep if s % k == 0 and s // k >= 4) or (k * 4096,)
    out = [
        Microbenchmark("sendrecv", "sendrecv", sendrecv_program(tile_bytes=tile), sweep, 1),
        Microbenchmark(f"serial-{k}", "sendrecv", sendrecv_program(k, serial=True, tile_bytes=tile), pair_sizes, k),
        Microbenchmark(f"together-{k}", "sendrecv", sendrecv_program(k, tile_bytes=tile), pair_sizes, 1),
        Microbenchmark("ll", "ll", sendrecv_program(protocol="LL", tile_bytes=tile), sweep, 1),
        Microbenchmark("copy", "copy", copy_program(tile_bytes=tile), sweep),
        Microbenchmark("reduce", "reduce", reduce_program(tile_bytes=tile), sweep),
        Microbenchmark("relay", "relay", relay_program(tile_bytes=tile), sweep, 1),
    ]
    out += [
        Microbenchmark(f"pingpong-{r}", "pingpong", pingpong_program(r, tile_bytes=tile), (4,), rounds=r)
        for r in rounds
    ]
    return out


def _features(samples: Sequence[Sample]) -> dict[str, np.ndarray]:
    kinds = np.array([KINDS.index(s.benchmark.kind) for s in samples])
    tiles = np.array([s.benchmark.tiles(s.size_bytes) for s in samples], float)
    per_tile = np.array([max(1, s.benchmark.messages_per_tile) for s in samples], float)
    messages = np.array([s.benchmark.messages_per_tile for s in samples], float) * tiles
    rounds = np.array([s.benchmark.rounds for s in samples], float)
    # the last message's bytes: the chunks one send moves, each its last (maybe shorter) tile
    chunk = np.array([s.benchmark.chunk_bytes(s.size_bytes) for s in samples], float)
    tile = np.array([_tile_bytes(s.benchmark) for s in samples], float)
    last_tile = chunk - (tiles - 1) * tile
    moved = np.array([_moved_chunks(s.benchmark) for s in samples], float)
    first_tile = np.minimum(chunk, tile)
    return {"kind": kinds, "bytes": chunk * moved, "tiles": tiles, "messages": messages, "rounds": rounds,
            "last_message": moved / per_tile * last_tile, "first_message": first_tile}  # fmt: skip


def _tile_bytes(bench: Microbenchmark) -> int:
    return bench.program.tile_bytes or default_limits().default_tile_bytes


def _moved_chunks(bench: Microbenchmark) -> int:
    """Chunks the benchmark's measured operation moves (the sendrecv Programs
    move every chunk of the collective; copy and reduce move one)."""
    return bench.program.collective.size_chunks if bench.kind in ("sendrecv", "ll", "relay") else 1


def predict_times(samples: Sequence[Sample], params: Mapping[str, float] | np.ndarray) -> np.ndarray:
    """The model's time of every sample (module docstring's table), for
    ``params`` by name or as a vector in :data:`PARAMS` order."""
    p = dict(zip(PARAMS, params, strict=True)) if isinstance(params, np.ndarray) else dict(params)
    f = _features(samples)
    k, b = f["kind"], f["bytes"]
    out = np.full(k.shape, p["launch_s"], dtype=float)
    # the receiver copies each message out of its slot while the next arrives; the last one's copy
    # shows (a stream-bound block, at the executor rate the model is written with)
    block_Bps = np.maximum(p["tb_Bps"], p["link_Bps"])  # the block rate the model is written with
    drain = f["last_message"] / block_Bps
    signal = p["signal_latency_s"]  # the last message's flag reaches the receiver
    link = f["messages"] * p["alpha_s"] + b / p["link_Bps"] + signal + drain
    out += np.where(k == KINDS.index("sendrecv"), link, 0.0)
    out += np.where(k == KINDS.index("ll"),
                    f["messages"] * p["alpha_s"] + b / (p["link_Bps"] * p["ll_efficiency"]) + signal + drain,
                    0.0)  # fmt: skip
    out += np.where(k == KINDS.index("copy"), b / p["tb_Bps"], 0.0)
    reduce_t = 2 * b / p["tb_Bps"] + f["tiles"] * p["reduce_launch_s"] + b / p["reduce_Bps"]
    out += np.where(k == KINDS.index("reduce"), reduce_t, 0.0)
    # one signal a trip, after a 4-byte copy at the model's block rate
    trips = 2 * f["rounds"] * (p["alpha_s"] + signal) + b / block_Bps
    out += np.where(k == KINDS.index("pingpong"), trips, 0.0)
    # the relaying block streams every tile at (1 + write share) copies' time after its α; before it, the
    # first tile's first hop; after it, the last tile's copy out of rank 0's slot
    share = p.get("write_share", 0.5)
    relay = (f["messages"] * p["alpha_s"] + b * (1 + share) / block_Bps + p["alpha_s"] + f["first_message"] / p["link_Bps"]
             + 2 * signal + drain)  # fmt: skip
    out += np.where(k == KINDS.index("relay"), relay, 0.0)
    return out


@dataclass(frozen=True)
class CalibrationFit:
    """The joint fit (``fit``) and the per-benchmark linear fits that seeded
    it (``linear``, by benchmark kind)."""

    fit: FitResult
    linear: Mapping[str, FitResult]
    samples: tuple[Sample, ...] = field(repr=False)
    write_share: float | None = None  # from the relay, when measured (:func:`fit_write_share`)
    write_share_note: str = ""

    @property
    def params(self) -> Mapping[str, float]:
        return self.fit.params

    def residuals_by_benchmark(self) -> dict[str, float]:
        """Median |relative residual| per benchmark name."""
        groups: dict[str, list[float]] = {}
        for s, r in zip(self.samples, self.fit.relative_residuals, strict=True):
            groups.setdefault(s.benchmark.name, []).append(abs(r))
        return {name: float(np.median(v)) for name, v in groups.items()}


def fit_calibration(samples: Sequence[Sample]) -> CalibrationFit:
    """Fit :data:`PARAMS` to the samples: linear fast-path fits per
    benchmark kind give the initial guess, then one bounded non-linear fit
    of every sample (:func:`simcoll.calibration.fit.fit_model`).

    Raises
    ------
    ModelError
        When a benchmark kind has no samples or its samples do not determine
        its parameters.
    """
    relays = tuple(s for s in samples if s.benchmark.kind == "relay")
    samples = tuple(s for s in samples if s.benchmark.kind != "relay")
    missing = [k for k in JOINT_KINDS if not any(s.benchmark.kind == k for s in samples)]
    if missing:
        raise ModelError(f"calibration needs samples of every benchmark kind; none of: {', '.join(missing)}")
    f = _features(samples)
    t = np.array([s.time_s for s in samples], float)

    def linear(kind: str, columns: dict[str, str]) -> FitResult:
        mask = f["kind"] == KINDS.index(kind)
        cols = {name: (np.ones(int(mask.sum())) if feat == "one" else f[feat][mask]) for name, feat in columns.items()}
        return fit_linear(cols, t[mask])

    lin = {
        "copy": linear("copy", {"launch_s": "one", "beta": "bytes"}),
        "sendrecv": linear("sendrecv", {"launch_s": "one", "alpha_s": "messages", "beta": "bytes"}),
        "ll": linear("ll", {"launch_s": "one", "alpha_s": "messages", "beta": "bytes"}),
        "reduce": linear("reduce", {"launch_s": "one", "reduce_launch_s": "tiles", "beta": "bytes"}),
        "pingpong": linear("pingpong", {"launch_s": "one", "round_s": "rounds"}),
    }

    def rate(beta: float) -> float:
        return 1.0 / beta if beta > 0 else _BOUNDS["link_Bps"][1] / 10

    tb = rate(lin["copy"]["beta"])
    link = rate(lin["sendrecv"]["beta"])
    extra = lin["reduce"]["beta"] - 2.0 / tb
    guess = {
        "launch_s": lin["copy"]["launch_s"],
        "alpha_s": lin["sendrecv"]["alpha_s"],
        "link_Bps": link,
        "tb_Bps": tb,
        "reduce_launch_s": lin["reduce"]["reduce_launch_s"],
        "reduce_Bps": 1.0 / extra if extra > 0 else _BOUNDS["reduce_Bps"][1] / 10,
        "ll_efficiency": min(1.0, max(0.02, lin["sendrecv"]["beta"] / lin["ll"]["beta"])) if lin["ll"]["beta"] > 0
        else 1.0,
        "signal_latency_s": max(0.0, lin["pingpong"]["round_s"] / 2 - lin["sendrecv"]["alpha_s"]),
    }  # fmt: skip
    x0 = [min(max(guess[n], _BOUNDS[n][0]), _BOUNDS[n][1]) for n in PARAMS]
    joint = fit_model(lambda x: predict_times(samples, x), t, PARAMS, x0, [_BOUNDS[n] for n in PARAMS])
    share, note = fit_write_share(relays, joint.params) if relays else (None, "no relay samples")
    return CalibrationFit(joint, lin, samples, share, note)


def fit_write_share(relays: Sequence[Sample], params: Mapping[str, float]) -> tuple[float | None, str]:
    """``executor.write_share`` from the relay's samples (:func:`relay_program`)
    and the joint fit's ``params``: from :data:`RELAY_FROM_BYTES` up the
    relaying block sets the pace, each tile costing α plus ``(1 + share)``
    copies' time at the model's block rate, so the share is the measured time
    per byte, less α per tile, in copies, less one. ``None`` (with the reason)
    when fewer than two sizes reach that far or the share falls outside
    (0, 1), which the model cannot express."""
    large = [s for s in relays if s.benchmark.chunk_bytes(s.size_bytes) >= RELAY_FROM_BYTES]
    if len({s.size_bytes for s in large}) < 2:
        return None, f"fewer than two relay sizes from {RELAY_FROM_BYTES >> 20} MiB"
    per_byte = np.polyfit([float(s.benchmark.chunk_bytes(s.size_bytes)) for s in large],
                          [s.time_s for s in large], 1)[0]  # fmt: skip
    block_Bps = max(params["tb_Bps"], params["link_Bps"])
    share = (per_byte - params["alpha_s"] / _tile_bytes(large[0].benchmark)) * block_Bps - 1
    note = f"relay from {RELAY_FROM_BYTES >> 20} MiB: {per_byte * block_Bps:.3f} copies' time per byte"
    if not 0 < share < 1:
        return None, f"{note}, a write share of {share:.3f} the model cannot take; left out"
    return float(share), note


def calibrated_model(
    result: CalibrationFit,
    *,
    name: str,
    link_type: str,
    run: str,
    base: CostModel | None = None,
    tile_bytes: int | None = None,
) -> CostModel:
    """A cost model holding the fitted parameters (``base``'s other links,
    switches, network and protocols kept). Every fitted entry's ``source``
    names ``run`` and the fit's residuals.

    The simulator caps a thread block's transfers at
    ``thread_block_bandwidth_Bps`` (:mod:`simcoll.simulator.program_mode`), so
    the model's thread-block rate is the larger of the copy rate and the
    one-executor send rate (else the measured sends could not be reproduced).
    """
    p = result.params
    by = result.residuals_by_benchmark()
    summary = result.fit.summary()
    resid = (f"joint fit of {summary['samples']} samples, median |residual| "
             f"{100 * summary['median_relative_error']:.1f}%, max {100 * summary['max_relative_error']:.1f}%")  # fmt: skip

    def med(prefix: str) -> str:
        vals = [v for k, v in by.items() if k.startswith(prefix)]
        return f"{100 * max(vals):.1f}%" if vals else "n/a"

    link = LinkParams(
        alpha_s=p["alpha_s"],
        bandwidth_Bps=p["link_Bps"],
        source=f"simcoll gpu calibrate, {run}: one-executor send/recv sweep and serial-vs-together pair (TACCL §5); "
        f"median |residual| {med('sendrecv')} sweep, {med('serial')} serial, {med('together')} together; {resid}",
    )
    slot = (
        tile_bytes
        or (base.executor.slot_bytes if base and base.executor else None)
        or default_limits().default_tile_bytes
    )
    share = "left out" if result.write_share is None else f"{result.write_share:.3f}"
    executor = ExecutorParams(
        thread_block_bandwidth_Bps=max(p["tb_Bps"], p["link_Bps"]),
        kernel_launch_s=p["launch_s"],
        fifo_slots=base.executor.fifo_slots if base and base.executor else default_limits().default_fifo_slots,
        slot_bytes=slot,
        host_signal_s=base.executor.host_signal_s if base and base.executor else None,
        stream_bound=True,
        signal_latency_s=p["signal_latency_s"],
        write_share=result.write_share,
        source=f"simcoll gpu calibrate, {run}: one-thread-block copy {p['tb_Bps'] / 1e9:.2f} GB/s (residual "
        f"{med('copy')}), taken as max(copy, send rate); launch {p['launch_s'] * 1e6:.2f} us; fifo_slots, slot_bytes: "
        f"the runner's table (gpu/limits.yaml); stream_bound: the interpreter's blocks copy every received tile out "
        f"of its slot (gpu/csrc/interp_core.h); signal latency {p['signal_latency_s'] * 1e6:.3f} us: flag ping-pong "
        f"(residual {med('pingpong')}) less α; write share {share}: {result.write_share_note}; {resid}",
    )
    compute = ComputeParams(
        reduce_bandwidth_Bps=p["reduce_Bps"],
        reduce_launch_s=p["reduce_launch_s"],
        source=f"simcoll gpu calibrate, {run}: one-thread-block reduce sweep (residual {med('reduce')}); {resid}",
    )
    links = dict(base.links) if base else {}
    links[link_type] = link
    protocols = dict(base.protocol_efficiency) if base else {}
    proto_sources = dict(base.protocol_sources) if base else {}
    protocols["LL"] = p["ll_efficiency"]
    proto_sources["LL"] = f"simcoll gpu calibrate, {run}: LL vs Simple one-executor sweep (residual {med('ll')})"
    sources = (f"simcoll gpu calibrate, {run}", resid)
    if base is not None:
        sources += (f"other parameters from model {base.name!r}",)
    return CostModel(
        name=name,
        links=links,
        description=f"calibrated by simcoll gpu calibrate ({run})" + (f" on top of {base.name}" if base else ""),
        switches=dict(base.switches) if base else {},
        host_memory_bandwidth_Bps=base.host_memory_bandwidth_Bps if base else None,
        host_memory_source=base.host_memory_source if base else None,
        compute=compute,
        executor=executor,
        network=base.network if base else None,
        protocol_efficiency=protocols,
        protocol_sources=proto_sources,
        sources=sources,
    )


def run_label(devices: Sequence[int], device_name: str | None = None, when: _dt.datetime | None = None) -> str:
    """``"devices 0,1 (NAME), 2026-01-01T00:00Z"``: the run a calibrated model names."""
    stamp = (when or _dt.datetime.now(_dt.timezone.utc)).strftime("%Y-%m-%dT%H:%MZ")
    return f"devices {','.join(map(str, devices))}" + (f" ({device_name})" if device_name else "") + f", {stamp}"


SAMPLE_COLUMNS = ("run", "benchmark", "kind", "size_bytes", "time_us", "tile_bytes")


def write_samples(samples: Sequence[Sample], path: str, run: str) -> None:
    """The measured samples as CSV (:data:`SAMPLE_COLUMNS`), written
    atomically, so the fit can be redone without the GPU (:func:`read_samples`)."""
    import csv
    import io

    from simcoll.files import write_atomic

    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(SAMPLE_COLUMNS)
    for sample in samples:
        b = sample.benchmark
        writer.writerow([run, b.name, b.kind, sample.size_bytes, f"{sample.time_s * 1e6:.6g}", _tile_bytes(b)])
    write_atomic(path, buffer.getvalue(), error=ModelError)


def read_samples(path: str) -> tuple[list[Sample], str]:
    """Samples written by :func:`write_samples` and the run they name, each
    matched to its benchmark of :func:`microbenchmarks` by name.

    Raises
    ------
    ModelError
        When the file cannot be read, lacks a column, names a benchmark the
        suite does not have, or holds a row that is not a positive size and
        time (naming the line).
    """
    samples, runs = _samples_and_runs(path)
    return samples, "; ".join(runs)


def _samples_and_runs(path: str) -> tuple[list[Sample], list[str]]:
    """:func:`read_samples`, with the runs as a sorted list."""
    from simcoll.files import read_csv_rows

    suites: dict[int, dict[str, Microbenchmark]] = {}
    samples, runs = [], set()
    for line, row in read_csv_rows(path, SAMPLE_COLUMNS, "samples CSV", error=ModelError):
        try:
            size, seconds = int(row["size_bytes"]), float(row["time_us"]) / 1e6
            tile, name, run = int(row["tile_bytes"]), row["benchmark"], row["run"]
            if name is None or run is None:  # a short row
                raise ValueError
        except (TypeError, ValueError):
            raise ModelError(f"{path}:{line}: expected a run, a benchmark, sizes and a time, got {row!r}") from None
        if size <= 0 or tile <= 0 or not seconds > 0 or not math.isfinite(seconds):
            raise ModelError(f"{path}:{line}: size {size} B, tile {tile} B, time {seconds * 1e6} us: not a sample")
        runs.add(run)
        if tile not in suites:
            suites[tile] = {b.name: b for b in microbenchmarks(tile_bytes=tile)}
        suite = suites[tile]
        if name not in suite:
            raise ModelError(f"{path}:{line}: no benchmark {name!r} in the suite (it has {', '.join(suite)})")
        samples.append(Sample(suite[name], size, seconds))
    if not samples:
        raise ModelError(f"{path}: no samples")
    return samples, sorted(runs)


def read_sample_files(paths: Sequence[str]) -> tuple[list[Sample], str]:
    """The samples of several runs (:func:`read_samples` per file) to fit
    together, and the runs they name. Repeated runs of one machine average
    out what varies between runs (on an H200, small sizes by up to 24 %:
    ``benchmarks/measured/h200-2026-11-26/``).

    Raises
    ------
    ModelError
        When no file is given, a file cannot be read (:func:`read_samples`),
        or the runs name different GPUs (:func:`run_label`'s ``(NAME)``): one
        model of two machines describes neither.
    """
    if not paths:
        raise ModelError("no samples file given")
    samples: list[Sample] = []
    runs: dict[str, str] = {}  # run -> file
    for path in paths:
        file_samples, file_runs = _samples_and_runs(path)
        samples += file_samples
        for run in file_runs:
            runs.setdefault(run, path)
    gpus = {m.group(1): path for run, path in runs.items() if (m := _GPU_IN_LABEL.search(run))}
    if len(gpus) > 1:
        named = ", ".join(f"{gpu} ({path})" for gpu, path in gpus.items())
        raise ModelError(f"samples of different GPUs: {named}; fit each GPU's runs on their own")
    return samples, "; ".join(runs)


#: The GPU a :func:`run_label` names: ``devices 0 (NAME), 2026-...``.
_GPU_IN_LABEL = re.compile(r"^devices [0-9,]+ \((.+)\), \d{4}-")


def write_calibration(
    samples: Sequence[Sample],
    path: str,
    *,
    link_type: str,
    run: str,
    base: CostModel | None = None,
    name: str | None = None,
) -> tuple[CalibrationFit, CostModel]:
    """Fit ``samples`` (:func:`fit_calibration`), build the model
    (:func:`calibrated_model`; named after the file unless ``name``) and write
    it with :func:`simcoll.cost_model.save_model` (atomically)."""
    from pathlib import Path

    from simcoll.cost_model import save_model

    result = fit_calibration(samples)
    tiles = {s.benchmark.program.tile_bytes for s in samples if s.benchmark.program.tile_bytes}
    model = calibrated_model(result, name=name or Path(path).stem, link_type=link_type, run=run, base=base,
                             tile_bytes=min(tiles) if tiles else None)  # fmt: skip
    save_model(model, path)
    return result, model


def measure(
    benchmarks: Sequence[Microbenchmark],
    devices: Sequence[int] = (0,),
    *,
    iters: int = 20,
    runner: Callable[..., Any] | None = None,
) -> list[Sample]:
    """Run every benchmark at its sizes on the GPU (median of ``iters``
    timed launches each; results verified). ``runner`` defaults to
    :func:`simcoll.gpu.runner.run` (needs CuPy and a device).

    Raises
    ------
    GpuUnavailableError
        Without a GPU.
    ModelError
        When a benchmark's result is wrong (its time would be meaningless).
    """
    if runner is None:
        from .runner import run as runner
    out = []
    for bench in benchmarks:
        for size in bench.sizes:
            result = runner(bench.program, size, devices, iters=iters)
            if not result.verified:
                raise ModelError(f"calibration benchmark {bench.name} at {size} B gave a wrong result: "
                                 f"{result.problems[:3]}")  # fmt: skip
            out.append(Sample(bench, size, float(result.time_s)))
    return out


__all__ = [
    "KINDS",
    "PARAMS",
    "CalibrationFit",
    "Microbenchmark",
    "Sample",
    "calibrated_model",
    "copy_program",
    "fit_calibration",
    "measure",
    "microbenchmarks",
    "pingpong_program",
    "predict_times",
    "read_samples",
    "reduce_program",
    "run_label",
    "sendrecv_program",
    "size_sweep",
    "write_calibration",
    "write_samples",
]

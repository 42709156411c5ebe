"""The compiler driver: a :class:`~simcoll.compiler.trace.Trace` through every
pass to a checked :class:`~simcoll.program.Program` (GC3 §4–§5).

Passes, each in its own module and usable alone:

==========================  =====================================================
``replicate``               instances and ``parallelize`` replicas (trace.py)
``merge_scratch``           named scratch buffers into one ``scratch`` (trace.py)
``build_chunk_dag``         Chunk DAG, true and false dependencies (chunk_dag.py)
``build_instruction_dag``   send/recv/rrc/copy/reduce, edges (instruction_dag.py)
``fuse``                    rcs, rrcs, rrs (fusion.py)
``assign_channels``         channels (channels.py)
``assign_threadblocks``     global order, FIFO slot bound, thread blocks (threadblocks.py)
``insert_dependencies``     cross-thread-block deps and nops → Program (dependencies.py)
``check``                   postcondition, deadlocks, connections, FIFO bound (checks.py)
==========================  =====================================================

Replication runs first: duplicating the ops of a parallelized fragment
before building the DAGs is the same as duplicating its instruction nodes
(GC3 §5.1) and lets every later pass see the replicas.
"""

from __future__ import annotations

import math
import time
from collections.abc import Collection

from ..cost_model import DEFAULT_FIFO_SLOTS
from ..errors import VerificationError
from ..program import Program
from .channels import assign_channels
from .checks import check_compiled
from .chunk_dag import build_chunk_dag
from .dependencies import insert_dependencies
from .fusion import fuse
from .instruction_dag import build_instruction_dag
from .threadblocks import assign_threadblocks
from .trace import FIXED_BUFFERS, CompileError, Loc, Trace, canonical, merge_scratch, output_slots, replicate


def compile_trace(
    trace: Trace,
    *,
    fusion: bool = True,
    live_out: str | Collection[Loc] | None = None,
    fan_out: bool = True,
    prune: bool = False,
    share_peer_blocks: bool = True,
    fifo_slots: int = DEFAULT_FIFO_SLOTS,
    verify: bool = True,
    timings: dict[str, float] | None = None,
) -> Program:
    """Compile ``trace`` to a Program; with ``verify`` (default) raise
    :class:`~simcoll.errors.VerificationError` unless the Program passes
    :func:`~simcoll.compiler.checks.check_compiled` (postcondition, deadlock
    freedom with unbounded and with ``fifo_slots`` FIFOs, races, connection
    rules, routes on ``trace.topology``). ``timings``, when given, receives
    the wall time of each pass in seconds.

    ``live_out``, ``fan_out`` and ``prune`` are :func:`~simcoll.compiler.fusion.fuse`'s
    options (defaults: GC3's rules). ``live_out`` is ``"output"`` (every
    rank's output buffer: the slots the postcondition reads), or slots of
    ``trace`` (each stands for all its replicas after :func:`replicate`),
    or None (every slot matters). Lowered Algorithms use
    ``live_out="output", fan_out=False, prune=True``
    (:func:`~simcoll.compiler.lower.compile_lowered`). ``share_peer_blocks``
    is :func:`~simcoll.compiler.threadblocks.assign_threadblocks`' option:
    whether an unpaired send to and receive from one peer share a thread
    block (default, as MSCCL's XML)."""
    if isinstance(live_out, str) and live_out != "output":
        raise CompileError(f"live_out must be 'output', a collection of slots or None, got {live_out!r}")
    clock = {} if timings is None else timings

    def timed(name, fn, *args, **kw):
        t0 = time.perf_counter()
        out = fn(*args, **kw)
        clock[name] = clock.get(name, 0.0) + time.perf_counter() - t0
        return out

    traced = trace
    trace = timed("replicate", replicate, trace)
    trace = timed("merge_scratch", merge_scratch, trace)
    cdag = timed("chunk_dag", build_chunk_dag, trace)
    idag = timed("instruction_dag", build_instruction_dag, cdag, trace.num_ranks)
    if fusion:
        live = None
        if live_out == "output":
            live = output_slots(trace)
        elif live_out is not None:
            live = _compiled_slots(live_out, traced, trace)
        idag = timed("fusion", fuse, idag, live_out=live, fan_out=fan_out, prune=prune)
    idag = timed("channels", assign_channels, idag)
    schedule = timed("threadblocks", assign_threadblocks, idag, fifo_slots, share_peer_blocks=share_peer_blocks)
    program = timed("dependencies", insert_dependencies, idag, schedule, trace)
    if verify:
        problems = timed("check", check_compiled, program, trace.topology, fifo_slots)
        if problems:
            raise VerificationError([f"{program.name}: {p}" for p in problems])
    return program


def _compiled_slots(slots: Collection[Loc], traced: Trace, compiled: Trace) -> frozenset[Loc]:
    """``slots`` of ``traced`` (an in-place alias resolved) in ``compiled``'s coordinates: slot ``x``
    refined into ``x·L .. x·L+L-1`` by :func:`replicate`, named scratch
    buffers moved into ``scratch`` by :func:`merge_scratch`."""
    factor = math.lcm(*({op.split * traced.instances for op in traced.ops} or {traced.instances}))
    named = any(b not in (*FIXED_BUFFERS, "scratch") for d in traced.buffers for b in d)
    offsets = compiled.metadata.get("scratch_offsets", {}) if named else {}
    out = set()
    for loc in slots:
        loc = canonical(traced.collective, loc.rank, loc.buffer, loc.index)
        off = offsets.get(str(loc.rank), {}).get(loc.buffer)
        buffer, shift = (loc.buffer, 0) if off is None else ("scratch", off)
        out.update(Loc(loc.rank, buffer, shift + loc.index * factor + j) for j in range(factor))
    return frozenset(out)

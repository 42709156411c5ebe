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

import time

from ..costmodel import DEFAULT_FIFO_SLOTS
from ..errors import VerificationError
from ..program import Program
from .channels import assign_channels
from .checks import check_compiled
from .chunk_dag import build_chunk_dag
from .dependencies import insert_dependencies
from .fusion import fuse
from .instruction_dag import build_instruction_dag
from .threadblocks import assign_threadblocks
from .trace import Trace, merge_scratch, replicate


def compile_trace(
    trace: Trace,
    *,
    fusion: bool = True,
    fifo_slots: int = DEFAULT_FIFO_SLOTS,
    verify: bool = True,
    timings: dict[str, float] | None = None,
) -> Program:
    """Compile ``trace`` to a Program; with ``verify`` (default) raise
    :class:`~simcoll.errors.VerificationError` unless the Program passes
    :func:`~simcoll.compiler.checks.check_compiled` (postcondition, deadlock
    freedom with unbounded and with ``fifo_slots`` FIFOs, races, connection
    rules, routes on ``trace.topology``). ``timings``, when given, receives
    the wall time of each pass in seconds."""
    clock = {} if timings is None else timings

    def timed(name, fn, *args):
        t0 = time.perf_counter()
        out = fn(*args)
        clock[name] = clock.get(name, 0.0) + time.perf_counter() - t0
        return out

    trace = timed("replicate", replicate, trace)
    trace = timed("merge_scratch", merge_scratch, trace)
    cdag = timed("chunk_dag", build_chunk_dag, trace)
    idag = timed("instruction_dag", build_instruction_dag, cdag, trace.num_ranks)
    if fusion:
        idag = timed("fusion", fuse, idag)
    idag = timed("channels", assign_channels, idag)
    schedule = timed("threadblocks", assign_threadblocks, idag, fifo_slots)
    program = timed("dependencies", insert_dependencies, idag, schedule, trace)
    if verify:
        problems = timed("check", check_compiled, program, trace.topology, fifo_slots)
        if problems:
            raise VerificationError([f"{program.name}: {p}" for p in problems])
    return program

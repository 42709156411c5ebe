"""Benchmark: compiling GC3's two-step Alltoall (Fig. 8) for 16 nodes × 8 GPUs
(128 ranks). Prints the wall time of tracing and of each compiler pass; the
target (issue 6) is under 10 s for the compilation. The full symbolic check
(postcondition, races, deadlocks with unbounded and bounded FIFOs) is timed
separately with ``--check``.

    python benchmarks/compile_alltoall.py [--nodes 16] [--gpus 8] [--check]
"""

from __future__ import annotations

import argparse
import time

from simcoll.compiler import check_compiled, compile_trace
from simcoll.dsl.examples import alltoall_two_step_program


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=16)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--check", action="store_true", help="also time the full check of the compiled Program")
    args = parser.parse_args()
    start = time.perf_counter()
    prog = alltoall_two_step_program(args.nodes, args.gpus)
    trace_s = time.perf_counter() - start
    timings: dict[str, float] = {}
    program = compile_trace(prog.trace, verify=False, timings=timings)
    compile_s = sum(timings.values())
    ranks = args.nodes * args.gpus
    print(f"two-step Alltoall, {args.nodes} nodes x {args.gpus} GPUs = {ranks} ranks, {len(prog.ops)} traced ops")
    print(f"{'pass':<18} {'time (s)':>9}")
    print(f"{'trace (DSL)':<18} {trace_s:>9.3f}")
    for name, seconds in timings.items():
        print(f"{name:<18} {seconds:>9.3f}")
    print(f"{'compile total':<18} {compile_s:>9.3f}")
    print(f"{'trace + compile':<18} {trace_s + compile_s:>9.3f}  (target < 10 s)")
    counts = program.instruction_counts()
    blocks = sum(len(rp.executors) for rp in program.ranks)
    print(f"instructions: {dict(sorted(counts.items()))}; thread blocks: {blocks}; channels: {program.num_channels}")
    if args.check:
        start = time.perf_counter()
        problems = check_compiled(program, None, 8)
        print(f"{'check':<18} {time.perf_counter() - start:>9.3f}  ({'correct' if not problems else problems[0]})")


if __name__ == "__main__":
    main()

"""Benchmark: wall time of the lower-bound computations (exhaustive max-flow
cuts up to 16 ranks, a cut family above) on built-in machines. Prints a table.

    python benchmarks/bounds.py
"""

from __future__ import annotations

import time

from simcoll import load_machine, lower_bounds, make_collective

CASES = [
    ("dgx1", "allgather"),
    ("dgx1", "allreduce"),
    ("ndv2", "allgather"),
    ("dgx2", "allgather"),
    ("dgx2", "allreduce"),
    ("dgx-a100*4", "allgather"),
]


def main() -> None:
    print(
        f"{'machine':<12} {'collective':<10} {'steps':>5} {'R/C':>6} {'exact':>5} {'algbw<=GB/s':>11} {'time (s)':>9}"
    )
    for topo, coll in CASES:
        machine = load_machine(topo)
        start = time.perf_counter()
        b = lower_bounds(make_collective(coll, machine.num_ranks), machine, 1 << 30)
        elapsed = time.perf_counter() - start
        print(
            f"{topo:<12} {coll:<10} {b.min_steps:>5} {str(b.min_rounds_per_chunk):>6} {str(b.exact):>5}"
            f" {b.algbw_bound_GBps:>11.1f} {elapsed:>9.3f}"
        )


if __name__ == "__main__":
    main()

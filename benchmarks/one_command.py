"""Benchmark: a ring Allreduce of 1 GiB from generator to result in one command
(issue 51 item 3: ``simcoll simulate ring -t ring:N -c allreduce --size 1GiB``),
as a user runs it: a fresh process each time, imports, generation, the one
check and the simulation included. Prints the median wall time and the peak
memory (``ru_maxrss`` of the child) of ``--repeat`` runs per ring size.

    python benchmarks/one_command.py [--ranks 256 1024] [--repeat 3]

Issue 51's targets on the 2-core machine: ``ring:256`` within 0.6 s and
``ring:1024`` within 2.5 s.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import time


def run_once(ranks: int) -> tuple[float, float]:
    """Wall seconds and the child's peak resident memory (MiB) of one run."""
    argv = [sys.executable, "-m", "simcoll", "simulate", "ring", "-t", f"ring:{ranks}", "-c", "allreduce"]
    argv += ["--size", "1GiB"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"ring:{ranks} exited {done.returncode}: {done.stderr.strip()}")
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return wall, max(peak, before) / 1024  # ru_maxrss is the largest child's so far (kB on Linux)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[256, 1024])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    for ranks in sorted(args.ranks):  # ascending: ru_maxrss of children only grows
        runs = [run_once(ranks) for _ in range(args.repeat)]
        wall = statistics.median(w for w, _ in runs)
        peak = max(m for _, m in runs)
        print(f"ring:{ranks}: {wall:.2f} s (median of {args.repeat}), peak {peak:.0f} MiB", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

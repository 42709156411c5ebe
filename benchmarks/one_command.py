"""Benchmark: a ring Allreduce of 1 GiB from generator to result in one command
(issue 51 item 3: ``simcoll simulate ring -t ring:N -c allreduce --size 1GiB``),
as a user runs it: a fresh process each time, imports, generation, the one
check and the simulation included. Prints the median wall time and the peak
memory (``ru_maxrss`` of the child) of ``--repeat`` runs per ring size, and
with ``--files`` the same through three commands and an ``.npz`` file
(``algo generate -o``, ``verify``, ``simulate``: their times summed, the
largest peak).

    python benchmarks/one_command.py [--ranks 256 1024 4096] [--repeat 3] [--files]

Issue 51's targets on the 2-core machine: ``ring:256`` within 0.6 s,
``ring:1024`` within 2.5 s and ``ring:4096`` within 30 s in 2 GiB (a ring on
``ring:N`` is held by its first rank's transfers and the cyclic shift:
:mod:`simcoll.topology_symmetry`); the three-command path within 1.5x.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _command(args: list[str]) -> tuple[float, float]:
    """Wall seconds and the largest child's peak resident memory so far (MiB) of one ``simcoll`` command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "simcoll", *args], capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"simcoll {' '.join(args)} exited {done.returncode}: {done.stderr.strip()}")
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return wall, max(peak, before) / 1024  # ru_maxrss is the largest child's so far (kB on Linux)


def run_once(ranks: int) -> tuple[float, float]:
    """Wall seconds and peak memory (MiB) of the one command."""
    return _command(["simulate", "ring", "-t", f"ring:{ranks}", "-c", "allreduce", "--size", "1GiB"])


def run_files(ranks: int) -> tuple[float, float]:
    """Wall seconds (summed) and peak memory (MiB) of generate to a file, verify it, simulate it."""
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "ring.npz")
        topology = f"ring:{ranks}"
        runs = [
            _command(["algo", "generate", "ring", "-t", topology, "-c", "allreduce", "-o", path]),
            _command(["verify", path, "-t", topology]),
            _command(["simulate", path, "-t", topology, "--size", "1GiB"]),
        ]
    return sum(w for w, _ in runs), max(m for _, m in runs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[256, 1024, 4096])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--files", action="store_true", help="also the three commands through an .npz file")
    args = parser.parse_args(argv)
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):  # (every command then compiles simcoll's sources anew)
        print("PYTHONDONTWRITEBYTECODE is set: a module without cached bytecode is compiled by every command")
    for ranks in sorted(args.ranks):  # ascending: ru_maxrss of children only grows
        runs = [run_once(ranks) for _ in range(args.repeat)]
        wall = statistics.median(w for w, _ in runs)
        peak = max(m for _, m in runs)
        line = f"ring:{ranks}: {wall:.2f} s (median of {args.repeat}), peak {peak:.0f} MiB"
        if args.files:
            files = [run_files(ranks) for _ in range(args.repeat)]
            through = statistics.median(w for w, _ in files)
            line += (
                f"; generate + verify + simulate through .npz {through:.2f} s ({through / wall:.2f}x), "
                f"peak {max(m for _, m in files):.0f} MiB"
            )
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark: how long ``simcoll --help`` takes to start, against
``python -c "import numpy"`` (issue 12 item 4: within 2x). Each is run as a
fresh subprocess; prints the median wall time of ``--repeat`` runs (default 5)
of each and their ratio, and exits 1 when the ratio is above ``--max-ratio``.

    python benchmarks/startup.py [--repeat 5] [--max-ratio 2]

What is slow shows with
``python -X importtime -m simcoll --help 2>&1 | sort -t'|' -k2 -n | tail``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

COMMANDS = {
    "python -c 'import numpy'": [sys.executable, "-c", "import numpy"],
    "simcoll --help": [sys.executable, "-m", "simcoll", "--help"],
}


def median_wall_s(argv: list[str], repeat: int) -> float:
    """Median wall time of ``repeat`` runs of ``argv`` (each must exit 0)."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs of each command (default 5)")
    parser.add_argument("--max-ratio", type=float, default=2.0, help="exit 1 above this ratio (default 2)")
    args = parser.parse_args()
    for argv in COMMANDS.values():  # warm the file cache once
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    times = {name: median_wall_s(argv, args.repeat) for name, argv in COMMANDS.items()}
    for name, t in times.items():
        print(f"{name:<28} {t * 1e3:8.1f} ms (median of {args.repeat})")
    baseline, ours = times.values()
    ratio = ours / baseline
    print(f"{'ratio':<28} {ratio:8.2f} (target <= {args.max_ratio:g})")
    return 0 if ratio <= args.max_ratio else 1


if __name__ == "__main__":
    sys.exit(main())

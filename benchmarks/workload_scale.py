"""Benchmark: one simulated training step, as a user runs it (``simcoll workload run``).

Each case runs in a fresh process (imports, generating the workload,
building its schedules and the run included) under a wall-clock limit and
prints its wall time, peak memory (``ru_maxrss`` of the child), the
operations and transfers simulated and the step time it found, or that the
limit stopped it.

    python benchmarks/workload_scale.py [--cases resnet50-dgx2 ...] [--time-limit 600]

Issue 49's targets on the 2-core machine: a data-parallel ResNet-50 step on
16 GPUs within 2 s; a GPT-3-175B-shaped step (tensor 8 x pipeline 8 x data
16, 1,024 GPUs on ``dgx-h100*128``) within 60 s and 4 GB (case ``gpt3-1024``).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

CASES = {
    "resnet50-dgx2": ("data-parallel", "dgx2", {"model": "resnet50", "ranks": 16, "batch_per_gpu": 64}),
    "resnet50-dgx-h100x2": ("data-parallel", "dgx-h100*2", {"model": "resnet50", "ranks": 16, "batch_per_gpu": 64}),
    "gpt3-32": ("transformer", "dgx-h100*4", {"model": "gpt3-175b", "tp": 8, "pp": 2, "dp": 2, "micro_batches": 4}),
    "gpt3-128": ("transformer", "dgx-h100*16", {"model": "gpt3-175b", "tp": 8, "pp": 8, "dp": 2, "micro_batches": 8}),
    "gpt3-1024": (
        "transformer",
        "dgx-h100*128",
        {"model": "gpt3-175b", "tp": 8, "pp": 8, "dp": 16, "micro_batches": 8},
    ),
}
DEFAULT = ["resnet50-dgx2", "resnet50-dgx-h100x2", "gpt3-32", "gpt3-128"]


def run_case(name: str, time_limit_s: float) -> str:
    kind, topology, options = CASES[name]
    argv = [sys.executable, "-m", "simcoll", "workload", "run", kind, "-t", topology, "--json"]
    argv += ["--time-limit", str(time_limit_s)]
    for key, value in options.items():
        argv += ["--option", f"{key}={value}"]
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    peak_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # the largest child's so far
    if done.returncode != 0:
        return f"{name}: exited {done.returncode} after {wall:.1f} s: {done.stderr.strip()[:300]}"
    summary = json.loads(done.stdout)
    stats = summary["stats"]
    return (
        f"{name} ({kind} on {topology}, {summary['ranks']} ranks): {wall:.2f} s, peak {peak_mib:.0f} MiB "
        f"(largest child so far); {summary['operations']:,} operations, {stats['calls']:,} calls, "
        f"{stats['transfers']:,} transfers simulated; step {summary['step_time_s'] * 1e3:.3f} ms; {stats['path']}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", choices=sorted(CASES), default=DEFAULT)
    parser.add_argument("--time-limit", type=float, default=600.0, help="per case, seconds (default 600)")
    args = parser.parse_args(argv)
    for name in args.cases:
        print(run_case(name, args.time_limit), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Simulator speed (issue 7, "Speed"): Algorithm mode on large schedules.

Prints, per case, the generation time of the Algorithm, the simulation wall
time (plan + events) and process CPU time (robust on a shared machine),
transfers per second, peak memory (tracemalloc is too slow for millions of
objects, so the process's peak RSS from getrusage) and the 1-minute load
average at the end of the case.

    python benchmarks/simulator.py                  # ring:1024 + dgx1, dgx2*2, dgx-a100*16 at 1 GB
    python benchmarks/simulator.py --ranks 256      # a smaller ring
    python benchmarks/simulator.py --skip-ring

Target: ring Allreduce on ring:1024 (about 2.1 million transfers) in at most
30 s of simulation and under 2 GB.

The ring case is timed with and without recording the timeline and the
utilisation (``--no-record`` skips the recorded run).
"""

from __future__ import annotations

import argparse
import gc
import os
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from simcoll import load_machine  # noqa: E402
from simcoll.algorithms import generate  # noqa: E402
from simcoll.simulator import simulate  # noqa: E402

GB = 1 << 30


def peak_rss_MB() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_case(label: str, machine, algorithm, size: int, gen_s: float, record: bool) -> dict:
    gc.collect()
    t0, c0 = time.perf_counter(), time.process_time()
    result = simulate(
        algorithm,
        machine,
        size,
        time_limit_s=600,
        verify=False,  # the generators are verified by the test suite; this times the simulator alone
        record_timeline=record,
        record_utilisation=record,
    )
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    row = {
        "case": label,
        "transfers": result.transfers,
        "generate_s": gen_s,
        "plan_s": result.stats["plan_s"],
        "simulate_s": wall,
        "simulate_cpu_s": cpu,
        "private_messages": result.stats.get("private_messages", 0),
        "load_average_1min": os.getloadavg()[0],
        "transfers_per_s": result.transfers / wall,
        "sim_time_us": result.time_s * 1e6,
        "busbw_GBps": result.busbw_GBps,
        "max_sharing": result.stats["max_sharing"],
        "peak_rss_MB": peak_rss_MB(),
    }
    print(
        f"{label:<34} {row['transfers']:>9} transfers  generate {gen_s:7.2f} s  simulate {wall:7.2f} s "
        f"(plan {row['plan_s']:.2f} s, cpu {cpu:.2f} s)  {row['transfers_per_s']:>9.0f} transfers/s  "
        f"busbw {row['busbw_GBps']:8.2f} GB/s  max sharing {row['max_sharing']:>3}  peak RSS {row['peak_rss_MB']:.0f} MB  "
        f"load {row['load_average_1min']:.2f}",
        flush=True,
    )
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=1024, help="ring size for the big case (default 1024)")
    parser.add_argument("--skip-ring", action="store_true")
    parser.add_argument("--no-record", action="store_true", help="ring case: only the run without recording")
    args = parser.parse_args()

    if not args.skip_ring:
        machine = load_machine(f"ring:{args.ranks}")
        t0 = time.perf_counter()
        algorithm = generate("ring", machine, "allreduce")
        gen_s = time.perf_counter() - t0
        for record in (False,) if args.no_record else (False, True):
            what = "recording" if record else "no recording"
            run_case(f"ring:{args.ranks} allreduce 1GB, {what}", machine, algorithm, GB, gen_s, record)
        del algorithm

    for topo, names in (
        ("dgx1", ("ring", "multi-ring", "direct", "hiccl")),
        ("dgx2*2", ("ring", "direct", "hiccl")),
        ("dgx-a100*16", ("ring", "2d-ring", "hiccl")),
    ):
        machine = load_machine(topo)
        for name in names:
            t0 = time.perf_counter()
            try:
                algorithm = generate(name, machine, "allreduce")
            except Exception as exc:  # noqa: BLE001 - a benchmark reports and goes on
                print(f"{topo} allreduce {name}: not generated ({exc})")
                continue
            gen_s = time.perf_counter() - t0
            run_case(f"{topo} allreduce {name} 1GB", machine, algorithm, GB, gen_s, True)


if __name__ == "__main__":
    main()

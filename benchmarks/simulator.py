"""Simulator speed (issue 7, "Speed"): Algorithm mode on large schedules.

Prints, per case, the generation time of the Algorithm, the simulation wall
time (plan + events), transfers per second and peak memory (tracemalloc is too
slow for millions of objects, so the process's peak RSS from getrusage).

    python benchmarks/simulator.py                  # ring:1024 + dgx1, dgx2*2, dgx-a100*16 at 1 GB
    python benchmarks/simulator.py --ranks 256      # a smaller ring
    python benchmarks/simulator.py --skip-ring

Target: ring Allreduce on ring:1024 (about 2.1 million transfers) in at most
30 s of simulation and under 2 GB.

The registry's ring generator calls ``block_chunks`` (O(chunks)) once per
transfer, which makes generating the ring:1024 Allreduce cubic (minutes); the
benchmark builds the identical schedule with the ring module's own step
builders and a cached block list (checked equal to ``generate`` below 128
ranks) and reports both.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from simcoll import load_machine  # noqa: E402
from simcoll.algorithms import generate  # noqa: E402
from simcoll.algorithms.common import block_chunks, finish  # noqa: E402
from simcoll.collectives import make_collective  # noqa: E402
from simcoll.routes import Routes  # noqa: E402
from simcoll.simulator.algorithm_mode import simulate_algorithm  # noqa: E402

GB = 1 << 30
ring_module = importlib.import_module("simcoll.algorithms.ring")  # the module, not the function


def peak_rss_MB() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def ring_allreduce_fast(topology):
    """The ring Allreduce of :func:`simcoll.algorithms.ring.ring_allreduce`
    with the owner → chunks lists computed once."""
    p = topology.num_ranks
    collective = make_collective("allreduce", p, p)
    routes = Routes(topology)
    order = list(range(p))  # ring:N's Hamiltonian ring is 0, 1, ..., N-1
    blocks = {owner: block_chunks(collective, owner) for owner in range(p)}
    transfers = ring_module._ring_reducescatter_steps(collective, order, blocks.__getitem__)
    transfers += ring_module._ring_allgather_steps(collective, order, p - 1, blocks.__getitem__)
    return finish("ring", collective, topology, transfers, routes, ring=order)


def run_case(label: str, machine, algorithm, size: int, gen_s: float, record: bool) -> dict:
    gc.collect()
    t0 = time.perf_counter()
    result = simulate_algorithm(
        algorithm, machine, size, time_limit_s=600, record_timeline=record, record_utilisation=record
    )
    wall = time.perf_counter() - t0
    row = {
        "case": label,
        "transfers": result.transfers,
        "generate_s": gen_s,
        "plan_s": result.stats["plan_s"],
        "simulate_s": wall,
        "transfers_per_s": result.transfers / wall,
        "sim_time_us": result.time_s * 1e6,
        "busbw_GBps": result.busbw_GBps,
        "max_sharing": result.stats["max_sharing"],
        "peak_rss_MB": peak_rss_MB(),
    }
    print(
        f"{label:<34} {row['transfers']:>9} transfers  generate {gen_s:7.2f} s  simulate {wall:7.2f} s "
        f"(plan {row['plan_s']:.2f} s)  {row['transfers_per_s']:>9.0f} transfers/s  "
        f"busbw {row['busbw_GBps']:8.2f} GB/s  max sharing {row['max_sharing']:>3}  peak RSS {row['peak_rss_MB']:.0f} MB",
        flush=True,
    )
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=1024, help="ring size for the big case (default 1024)")
    parser.add_argument("--skip-ring", action="store_true")
    parser.add_argument("--record", action="store_true", help="record timeline and utilisation in the ring case")
    args = parser.parse_args()

    # the fast builder gives the registry's schedule
    small = load_machine("ring:16").topology
    assert ring_allreduce_fast(small).transfers == generate("ring", small, "allreduce").transfers

    if not args.skip_ring:
        machine = load_machine(f"ring:{args.ranks}")
        t0 = time.perf_counter()
        algorithm = ring_allreduce_fast(machine.topology)
        gen_s = time.perf_counter() - t0
        run_case(f"ring:{args.ranks} allreduce ring 1GB", machine, algorithm, GB, gen_s, args.record)
        del algorithm
        p = 128
        t0 = time.perf_counter()
        generate("ring", load_machine(f"ring:{p}").topology, "allreduce")
        print(f"(registry ring generator on ring:{p}: {time.perf_counter() - t0:.2f} s; it grows as P^3)")

    for topo, names in (
        ("dgx1", ("ring", "multi-ring", "direct", "hiccl")),
        ("dgx2*2", ("ring", "direct", "hiccl")),
        ("dgx-a100*16", ("ring", "2d-ring", "hiccl")),
    ):
        machine = load_machine(topo)
        for name in names:
            t0 = time.perf_counter()
            try:
                algorithm = generate(name, machine.topology, "allreduce")
            except Exception as exc:  # noqa: BLE001 - a benchmark reports and goes on
                print(f"{topo} allreduce {name}: not generated ({exc})")
                continue
            gen_s = time.perf_counter() - t0
            run_case(f"{topo} allreduce {name} 1GB", machine, algorithm, GB, gen_s, True)


if __name__ == "__main__":
    main()

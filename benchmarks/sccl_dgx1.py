"""Benchmark: SCCL synthesis on DGX-1, every Allgather and Allreduce row of
SCCL Table 4 with each backend, the (3, 2, 4) Allgather infeasibility proof
and the Allgather Pareto run. Prints wall time (encoding + solving) per row
beside the paper's time (Z3 on their machine), and the public SCCL
(msccl-tools' ``msccl solve instance DGX1 Allgather``) on the DGX-1
Allgather (6,7,7) and (6,3,7) instances side by side where its ``msccl``
command is installed (it says so where it is not: msccl-tools is not on PyPI).

    python benchmarks/sccl_dgx1.py [--backends cpsat,z3-pb,z3] [--time-limit 60] [--workers 1]

``--workers 1`` (default): one CP-SAT worker, the same algorithm on every run.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import time

from simcoll import load_machine, load_topology
from simcoll.synthesis import BACKENDS, pareto_synthesize, synthesize

# (collective, C, S, R, paper time in seconds), SCCL Table 4
TABLE4 = [
    ("allgather", 1, 2, 2, 0.3),
    ("allgather", 2, 3, 3, 0.8),
    ("allgather", 3, 4, 4, 1.5),
    ("allgather", 4, 5, 5, 2.3),
    ("allgather", 5, 6, 6, 3.3),
    ("allgather", 6, 7, 7, 4.6),
    ("allgather", 6, 3, 7, 6.6),
    ("allgather", 2, 2, 3, 0.9),
    ("allreduce", 8, 4, 4, 0.3),
    ("allreduce", 16, 6, 6, 0.6),
    ("allreduce", 24, 8, 8, 1.3),
    ("allreduce", 32, 10, 10, 2.9),
    ("allreduce", 40, 12, 12, 5.6),
    ("allreduce", 48, 14, 14, 12.8),
    ("allreduce", 48, 6, 14, 23.0),
    ("allreduce", 16, 4, 6, 0.8),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default=",".join(BACKENDS), help="comma list (default: all)")
    parser.add_argument("--time-limit", type=float, default=60.0, help="seconds per query (default 60)")
    parser.add_argument("--workers", type=int, default=1, help="CP-SAT workers (default 1: deterministic)")
    args = parser.parse_args()
    backends = args.backends.split(",")
    dgx1 = load_topology("dgx1")

    print(f"{'collective':<10} {'(C,S,R)':<11} {'paper s':>7} " + " ".join(f"{b + ' s':>16}" for b in backends))
    rows = TABLE4 + [("allgather", 3, 2, 4, None)]
    for coll, c, s, r, paper in rows:
        cells = []
        for backend in backends:
            workers = args.workers if backend == "cpsat" else 1
            res = synthesize(
                load_machine(dgx1), coll, c, s, r, backend=backend, time_limit_s=args.time_limit, workers=workers
            )
            cells.append(f"{res.status:>7} {res.time_s:8.2f}")
        paper_cell = f"{paper:7.1f}" if paper is not None else f"{'-':>7}"
        print(f"{coll:<10} {f'({c},{s},{r})':<11} {paper_cell} " + " ".join(f"{x:>16}" for x in cells), flush=True)

    for backend in backends:
        start = time.perf_counter()
        frontier = [
            (p.result.chunks, p.result.steps, p.result.rounds)
            for p in pareto_synthesize(
                load_machine(dgx1),
                "allgather",
                backend=backend,
                time_limit_s=args.time_limit,
                workers=args.workers if backend == "cpsat" else 1,
            )
            if p.optimal
        ]
        print(f"Pareto allgather ({backend}): {frontier} in {time.perf_counter() - start:.2f} s", flush=True)
    _public_sccl(args)


def _public_sccl(args: argparse.Namespace) -> None:
    """The public SCCL beside ours on the instances the issue names, alternated."""
    msccl = shutil.which("msccl")
    if msccl is None:
        print("public SCCL: the msccl command (msccl-tools) is not installed here; not compared")
        return
    for c, s, r in ((6, 7, 7), (6, 3, 7)):
        command = [msccl, "solve", "instance", "DGX1", "Allgather", "-s", str(s), "-r", str(r), "-c", str(c)]
        start = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True, timeout=600)
        theirs = time.perf_counter() - start
        start = time.perf_counter()
        synthesize(load_machine("dgx1"), "allgather", c, s, r, time_limit_s=args.time_limit, workers=args.workers)
        ours = time.perf_counter() - start
        print(f"allgather ({c},{s},{r}): public SCCL {theirs:.2f} s, simcoll {ours:.2f} s ({theirs / ours:.1f}x)")


if __name__ == "__main__":
    main()

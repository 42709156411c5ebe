"""Benchmark: a ~10,000-point sweep on a Dask LocalCluster with 1 and 2
workers, printing points per second; with ``--kill``, also a run killed with
SIGKILL halfway and resumed, checked to end with exactly the rows of the
uninterrupted run.

The study: 5 machines (DGX-1 with NVLink ×0.5/×1/×2/×4, NDv2 with PCIe ×1/×2/×4,
Z52, ring:8 and fully-connected:8 with NVLink ×1/×2/×4) × 4 collectives
(Allgather, ReduceScatter, Allreduce, Alltoall) × every registered generator
× 21 sizes (1 KB to 1 GB), Algorithm mode.

    python benchmarks/sweep.py [--workers 1,2] [--kill] [--fast]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from simcoll.sweeps import load_results, load_study, run_study, sweep_status

STUDY = {
    "name": "bench-10k",
    "machines": [
        {"topology": "dgx1", "overrides": {"links.nvlink.bandwidth_Bps": ["x0.5", "x1", "x2", "x4"]}},
        {"topology": "ndv2", "overrides": {"links.pcie.bandwidth_Bps": ["x1", "x2", "x4"]}},
        "z52",
        {"topology": "ring:8", "overrides": {"links.nvlink.bandwidth_Bps": ["x1", "x2", "x4"]}},
        {"topology": "fully-connected:8", "overrides": {"links.nvlink.bandwidth_Bps": ["x1", "x2", "x4"]}},
    ],
    "collectives": ["allgather", "reducescatter", "allreduce", "alltoall"],
    "algorithms": ["all"],
    "sizes": "1KB:1GB",
    "simulator": {"mode": "algorithm"},
}


def kill_and_resume(study_path: Path, reference: Path, workers: int) -> None:
    """Run in a subprocess, SIGKILL it (and its cluster) once half the points are done, resume, compare."""
    out = reference.parent / "killed"
    command = [sys.executable, "-m", "simcoll.sweeps", str(study_path), "-o", str(out), "--no-progress"]
    proc = subprocess.Popen(
        [*command, "--workers", str(workers)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        while proc.poll() is None:
            time.sleep(0.2)
            if (out / "_study.json").exists():
                status = sweep_status(out)
                if status["done"] >= status["total"] // 2:
                    break
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    status = sweep_status(out)
    print(f"killed at {status['done']} of {status['total']} points")
    started = time.perf_counter()
    subprocess.run([*command, "--workers", str(workers), "--resume"], check=True)
    print(f"resumed in {time.perf_counter() - started:.1f} s")
    import pandas as pd

    pd.testing.assert_frame_equal(load_results(out), load_results(reference))
    print("killed + resumed rows == uninterrupted rows: yes")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="1,2", help="comma list of LocalCluster sizes (default 1,2)")
    parser.add_argument("--kill", action="store_true", help="also kill a run halfway, resume and compare")
    parser.add_argument("--fast", action="store_true", help="1KB:1GB by 4 (about half the points)")
    args = parser.parse_args()
    study = dict(STUDY, size_factor=4) if args.fast else STUDY
    points = len(load_study(study).points())
    print(f"study {study['name']}: {points} points")
    with tempfile.TemporaryDirectory(prefix="sweep-bench-") as tmp:
        bench(study, Path(tmp), args)


def bench(study: dict, workdir: Path, args: argparse.Namespace) -> None:
    study_path = workdir / "study.yaml"
    study_path.write_text(yaml.safe_dump(study))
    reference = None
    for workers in (int(w) for w in args.workers.split(",")):
        out = workdir / f"w{workers}"
        summary = run_study(study_path, out, workers=workers)
        print(
            f"{workers} worker(s): {summary.ran} points in {summary.wall_s:.1f} s = {summary.points_per_s:.0f} points/s"
            f" ({summary.failed} failed)"
        )
        reference = reference or out
    if args.kill and reference is not None:
        kill_and_resume(study_path, reference, workers=2)


if __name__ == "__main__":
    main()

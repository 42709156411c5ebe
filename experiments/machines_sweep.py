"""Experiment: every registered algorithm against the max-flow bandwidth
bound on every built-in single-node machine, for Allgather, ReduceScatter and
Allreduce, across buffer sizes (simulated times, or the analytic α-β
critical path with ``--analytic``).

The study is ``experiments/studies/machines_sweep.yaml``, run by
:func:`simcoll.sweeps.run_study` (a Dask LocalCluster, or ``--serial``)
into ``<out>/machines_sweep/`` (Parquet part files; a rerun resumes, running
only missing points). Writes ``<out>/machines_sweep.csv`` (one row per
machine, collective, algorithm and size that ran) and
``<out>/machines_sweep.png`` (fraction of the bound each algorithm reaches at
the largest size). ``--fast`` runs a reduced grid, as the test suite does.

    python experiments/machines_sweep.py --out out/ [--fast] [--analytic] [--workers N | --serial]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd
import yaml

from simcoll.files import write_atomic
from simcoll.sweeps import load_results, load_study, run_study

STUDY = Path(__file__).resolve().parent / "studies" / "machines_sweep.yaml"


def run(
    out: Path, fast: bool, method: str = "simulate", workers: int | None = None, serial: bool = False
) -> pd.DataFrame:
    study = yaml.safe_load(STUDY.read_text(encoding="utf-8"))
    if fast:
        study.update(machines=["dgx1", "ndv2", "z52"], algorithms=["ring", "direct"], sizes="1KB,1MB,256MB")
    if method == "analytic":
        study["simulator"] = {**study.get("simulator", {}), "mode": "analytic"}
    out.mkdir(parents=True, exist_ok=True)
    results = out / "machines_sweep"
    run_study(study, results, workers=workers, serial=serial, resume=True, progress=False)
    df = load_results(results)
    keys = {p.key for p in load_study(study).points()}  # this grid's points, of all those in the directory
    df = df[(df.status == "ok") & df.key.isin(keys)].sort_values(["machine", "collective", "algorithm", "size_bytes"])
    write_atomic(out / "machines_sweep.csv", df.to_csv(index=False))
    plot(df, out / "machines_sweep.png")
    return df


def plot(df: pd.DataFrame, path: Path) -> None:
    from matplotlib.figure import Figure

    from simcoll.sweeps.plots import save_figure

    largest = df[df.size_bytes == df.size_bytes.max()].copy()
    largest["fraction_of_bound"] = largest.algbw_GBps / largest.algbw_bound_GBps
    table = largest.pivot_table(index=["machine", "collective"], columns="algorithm", values="fraction_of_bound")
    fig = Figure(figsize=(8, 0.35 * len(table) + 1.5))
    ax = fig.add_subplot()
    table.plot.barh(ax=ax)
    ax.set_xlabel("algbw / bandwidth bound at the largest size")
    ax.set_xlim(0, 1.05)
    save_figure(fig, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("out"))
    parser.add_argument("--fast", action="store_true", help="reduced grid for tests")
    parser.add_argument("--analytic", action="store_true", help="closed-form alpha-beta times, not the simulator")
    parser.add_argument("--workers", type=int, help="LocalCluster worker processes (default: CPU count)")
    parser.add_argument("--serial", action="store_true", help="run in this process, without Dask")
    args = parser.parse_args()
    df = run(args.out, args.fast, "analytic" if args.analytic else "simulate", args.workers, args.serial)
    print(f"wrote {len(df)} rows to {args.out / 'machines_sweep.csv'} and {args.out / 'machines_sweep.png'}")


if __name__ == "__main__":
    main()

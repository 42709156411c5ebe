"""Experiment: the first producers (ring, direct) against the max-flow
bandwidth bound on every built-in single-node machine, for Allgather,
ReduceScatter and Allreduce, across buffer sizes (simulated times, or the
analytic α-β critical path with ``--analytic``).

Writes ``<out>/machines_sweep.csv`` (one row per machine, collective,
algorithm and size) and ``<out>/machines_sweep.png`` (fraction of the bound
each algorithm reaches at the largest size). ``--fast`` runs a reduced grid,
as the test suite does.

    python experiments/machines_sweep.py --out out/ [--fast] [--analytic]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from simcoll import builtin_topologies, compare, load_machine
from simcoll.units import parse_size_range


def run(out: Path, fast: bool, method: str = "simulate") -> pd.DataFrame:
    out.mkdir(parents=True, exist_ok=True)
    csv = out / "machines_sweep.csv"
    machines = ["dgx1", "ndv2", "z52"] if fast else builtin_topologies()
    sizes = parse_size_range("1KB,1MB,256MB" if fast else "1KB:1GB", factor=4)
    done = pd.read_csv(csv) if csv.exists() else pd.DataFrame()
    frames = [done]
    for name in machines:
        machine = load_machine(name)
        for coll in ("allgather", "reducescatter", "allreduce"):
            if not done.empty and ((done.topology == name) & (done.collective == coll)).any():
                continue  # resumed: this cell is already on disk
            df, _ = compare(machine, coll, sizes, method=method)
            frames.append(df)
            pd.concat(frames).to_csv(csv, index=False)  # persist incrementally
    result = pd.concat(frames, ignore_index=True)
    plot(result, out / "machines_sweep.png")
    return result


def plot(df: pd.DataFrame, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    largest = df[df.size_bytes == df.size_bytes.max()].copy()
    largest["fraction_of_bound"] = largest.algbw_GBps / largest.algbw_bound_GBps
    table = largest.pivot_table(index=["topology", "collective"], columns="algorithm", values="fraction_of_bound")
    ax = table.plot.barh(figsize=(8, 0.35 * len(table) + 1.5))
    ax.set_xlabel("algbw / bandwidth bound at the largest size")
    ax.set_xlim(0, 1.05)
    ax.figure.tight_layout()
    ax.figure.savefig(path, dpi=110)
    plt.close(ax.figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("out"))
    parser.add_argument("--fast", action="store_true", help="reduced grid for tests")
    parser.add_argument("--analytic", action="store_true", help="closed-form alpha-beta times, not the simulator")
    args = parser.parse_args()
    df = run(args.out, args.fast, "analytic" if args.analytic else "simulate")
    print(f"wrote {len(df)} rows to {args.out / 'machines_sweep.csv'} and {args.out / 'machines_sweep.png'}")


if __name__ == "__main__":
    main()

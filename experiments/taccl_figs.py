"""TACCL (NSDI'23) Figs. 6-9 and Table 2 in simulation: synthesized Allgather,
Alltoall and Allreduce on two NDv2 and two DGX-2 nodes against classical
algorithms and the NCCL baseline, an ablation of the sketch's chunk size
(Fig. 9b), and the synthesis times of Table 2.

Each sketch is synthesized with :func:`simcoll.synthesis.taccl_synthesize`,
saved as simcoll JSON and run as an imported schedule of the study. Writes
``<out>/taccl_figs.csv``, ``<out>/taccl_synthesis.csv`` and ``<out>/taccl_figs.png``.

    python experiments/taccl_figs.py --out out/ [--fast] [--serial | --workers N]
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from _common import Comparison, baseline, best_speedup, ok, parse_args, print_comparisons, run, write_csv

from simcoll.experiments.plots import plot_bandwidth
from simcoll.interop import save_schedule
from simcoll.synthesis import taccl_synthesize

# TACCL Table 2: (machine, sketch, collective, paper's synthesis time in seconds).
TABLE2 = [
    ("ndv2*2", "ndv2-sk-1", "allgather", 2.6),
    ("ndv2*2", "ndv2-sk-1", "allreduce", 0.3),
    ("ndv2*2", "ndv2-sk-2", "alltoall", 8.4),
    ("dgx2*2", "dgx2-sk-2", "allgather", 11.3),
    ("dgx2*2", "dgx2-sk-1", "allreduce", 6.1),
    ("dgx2*2", "dgx2-sk-2", "alltoall", 92.5),
]
MODELS = {"ndv2*2": "ndv2-taccl", "dgx2*2": "dgx2-taccl"}  # TACCL's measured alpha-beta (Table 1)


def synthesize_all(out: Path, fast: bool) -> tuple[pd.DataFrame, list[dict]]:
    """Run Table 2's syntheses (the NDv2 Allgather/Allreduce only in --fast), the chunk-size
    ablation of Fig. 9b (NDv2 Allgather sketched for 1 KB and 1 MB chunks), and save each algorithm."""
    jobs = [(m, s, c, p, None) for m, s, c, p in (TABLE2[:2] if fast else TABLE2)]
    jobs += [("ndv2*2", "ndv2-sk-1", "allgather", None, size) for size in (1 << 10, 1 << 20)]
    rows, files = [], []
    for machine, sketch, collective, paper_s, input_size in jobs:
        result = taccl_synthesize(
            machine,
            sketch,
            collective,
            model=MODELS[machine],
            time_limit_s=30 if fast else 300,
            input_size_bytes=input_size,
        )
        label = f"taccl {sketch}" + (f" @{input_size >> 10}KB" if input_size else "")
        path = out / f"taccl_{machine.replace('*', 'x')}_{collective}_{label.split()[-1].replace('@', '')}.json"
        save_schedule(result.algorithm, path)
        files.append({"machine": machine, "spec": {"file": str(path), "name": label}})
        rows.append(
            {
                "machine": machine,
                "sketch": sketch,
                "collective": collective,
                "input_size_bytes": input_size,
                "status": result.status,
                "ours_s": result.time_s,
                "paper_s": paper_s,
            }
        )
    return pd.DataFrame(rows), files


def study(machine: str, files: list[dict], fast: bool) -> dict:
    return {
        "name": f"taccl_{machine.replace('*', 'x')}",
        "machines": [{"topology": machine, "model": MODELS[machine]}],
        "collectives": ["allgather", "allreduce"] if fast else ["allgather", "alltoall", "allreduce"],
        "algorithms": [
            "ring",
            "direct",
            "nccl-ring",
            *baseline(),
            *[f["spec"] for f in files if f["machine"] == machine],
        ],
        "sizes": "1KB,1MB,64MB" if fast else "1KB:1GB",
        "size_factor": 4,
    }


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(__doc__, argv)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    synthesis, files = synthesize_all(out, args.fast)
    write_csv(synthesis, out / "taccl_synthesis.csv")
    machines = ["ndv2*2"] if args.fast else ["ndv2*2", "dgx2*2"]
    df = pd.concat(
        [
            ok(run(study(m, files, args.fast), out, serial=args.serial or args.fast, workers=args.workers))
            for m in machines
        ],
        ignore_index=True,
    )
    write_csv(df, out / "taccl_figs.csv")
    ag = df[(df.collective == "allgather") & (df.topology == "ndv2*2")]
    plot_bandwidth(ag, out / "taccl_figs.png", metric="algbw", title="Allgather on 2x NDv2 (TACCL Fig. 6(ii), 9b)")
    comparisons = [
        Comparison(
            f"synthesis {r.sketch} {r.collective} on {r.machine}",
            f"{r.paper_s:.1f} s",
            f"{r.ours_s:.2f} s ({r.status})",
            "TACCL Table 2 (Gurobi)",
        )
        for r in synthesis.itertuples()
        if r.paper_s == r.paper_s and r.paper_s is not None
    ]
    comparisons += [
        Comparison(
            "NDv2 Allgather over NCCL, 1KB-1MB / >1MB",
            "12%-35% / 61%-3.4x",
            best_speedup(ag, algorithm="taccl ndv2-sk-1"),
            "TACCL §7.1, Fig. 6(ii)",
        ),
        Comparison(
            "NDv2 Allreduce over NCCL, <=1MB / larger",
            "up to 28% / 28%-2.7x",
            best_speedup(df, collective="allreduce"),
            "TACCL §7.1, Fig. 8(ii)",
        ),
    ]
    if not args.fast:
        comparisons.append(
            Comparison(
                "DGX-2 Alltoall over NCCL",
                "up to 15%",
                best_speedup(df, collective="alltoall", topology="dgx2*2"),
                "TACCL §7.1, Fig. 7(i)",
            )
        )
    big = ag[ag.size_bytes == ag.size_bytes.max()].set_index("algorithm").algbw_GBps
    chunk = [a for a in big.index if "@" in a]
    comparisons.append(
        Comparison(
            "chunk-size ablation: algbw at the largest size",
            "plot only (Fig. 9b)",
            ", ".join(f"{a}: {big[a]:.1f} GB/s" for a in sorted(chunk)),
            "TACCL §7.2, Fig. 9b",
        )
    )
    print_comparisons("TACCL Figs. 6-9, Table 2", comparisons)
    print(f"wrote {out / 'taccl_figs.csv'}, {out / 'taccl_synthesis.csv'} and {out / 'taccl_figs.png'}")
    return {"results": df, "synthesis": synthesis, "comparisons": comparisons}


if __name__ == "__main__":
    main()

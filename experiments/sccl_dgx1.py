"""SCCL (PPoPP'21) Table 4 and Figs. 4-6 in simulation: synthesized DGX-1
Allgather, Allreduce and Alltoall against classical algorithms, the NCCL
baseline and the max-flow bound, and the synthesis times of Table 4's rows.

Writes ``<out>/sccl_dgx1.csv`` (one row per collective, algorithm and size),
``<out>/sccl_dgx1_synthesis.csv`` (Table 4: our solver time beside the paper's)
and ``<out>/sccl_dgx1_<collective>.png`` (busbw against size, bound dashed).

    python experiments/sccl_dgx1.py --out out/ [--fast] [--serial | --workers N]
"""

from __future__ import annotations

import time
from pathlib import Path

import pandas as pd
from _common import (
    Comparison,
    baseline,
    baseline_label,
    best_speedup,
    best_speedup_value,
    ok,
    paper,
    parse_args,
    print_comparisons,
    run_as_papers_ran,
    write_csv,
)

from simcoll.interop import save_schedule
from simcoll.machines import load_machine
from simcoll.sweeps.plots import plot_bandwidth
from simcoll.synthesis import synthesize

# SCCL Table 4 (DGX-1): (collective, C, S, R, paper's encode+solve time in seconds).
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
]
FAST_ROWS = 3  # of each collective in --fast mode
#: SCCL's baseline: NCCL 2.7.8-1 (SCCL §5, appendix A.3.3) with NCCL_PROTO=Simple, since SCCL's
#: generated code "uses a protocol similar to the simple protocol" (SCCL §5.5); every schedule of the
#: study then runs Simple (the baseline's protocol choice, simcoll.nccl.baseline.protocol_for).
NCCL = {"version": "2.7", "env": {"NCCL_PROTO": "Simple"}}
#: The DGX-1 with its PCIe tree (topologies/ndv2.yaml: the DGX-1 NVLink graph, two GPUs per PCIe switch,
#: two switches per CPU; TACCL §4): NCCL 2.7's point-to-point Alltoall reaches the GPUs it has no NVLink
#: to over PCIe and the host (paths.cc ncclTopoCheckP2p: no P2P beyond PXB on Broadwell, so shared
#: memory through the CPU), which the NVLink-only dgx1.yaml cannot express.
DGX1_PCIE = "ndv2"
#: SCCL's Alltoall schedules, synthesized on SCCL's own model of the DGX-1 (its NVLinks, SCCL §5).
ALLTOALL = [(8, 3, 3)]


def study(fast: bool) -> dict:
    """The Figs. 4-6 study: DGX-1, three collectives, classical + synthesized + NCCL."""
    sccl = [
        {"sccl": {"chunks": 1, "steps": 2, "rounds": 2}, "name": "sccl(1,2,2)"},  # Allgather latency-optimal
        {"sccl": {"chunks": 8, "steps": 4, "rounds": 4}, "name": "sccl(8,4,4)"},  # Allreduce latency-optimal
        {"sccl": {"chunks": 8, "steps": 3, "rounds": 3}, "name": "sccl(8,3,3)"},  # Alltoall, 3 steps
    ]
    if not fast:
        sccl += [
            {"sccl": {"chunks": 6, "steps": 7, "rounds": 7}, "name": "sccl(6,7,7)"},  # Allgather bandwidth-optimal
            {"sccl": {"chunks": 48, "steps": 14, "rounds": 14}, "name": "sccl(48,14,14)"},  # Allreduce, large sizes
        ]
    return {
        "name": "sccl_dgx1",
        "machines": ["dgx1"],
        "collectives": ["allgather", "allreduce"],
        "algorithms": ["ring", "multi-ring", "direct", *baseline(**NCCL), *sccl],
        "sizes": "1KB,64KB,1MB,32MB" if fast else "1KB:1GB",
        "size_factor": 4,
        "simulator": {"mode": "algorithm", "time_limit_s": 60},
    }


def alltoall_study(out: Path, fast: bool) -> dict:
    """The Fig. 6 study: SCCL's Alltoall synthesized on the DGX-1's NVLinks (as SCCL did) and timed,
    with NCCL's point-to-point Alltoall, on the DGX-1 with its PCIe tree (:data:`DGX1_PCIE`)."""
    specs = []
    for c, steps, rounds in ALLTOALL:
        result = synthesize(load_machine("dgx1"), "alltoall", c, steps, rounds, backend="cpsat", time_limit_s=120.0)
        if result.algorithm is None:
            raise SystemExit(f"SCCL Alltoall ({c},{steps},{rounds}) on dgx1: {result.status}")
        path = out / f"sccl_dgx1_alltoall_{c}_{steps}_{rounds}.json"
        save_schedule(result.algorithm, path)
        specs.append({"file": str(path), "name": f"sccl({c},{steps},{rounds})"})
    return {
        "name": "sccl_dgx1_alltoall",
        "machines": [DGX1_PCIE],
        "collectives": ["alltoall"],
        "algorithms": ["direct", *baseline(**NCCL), *specs],
        "sizes": "1KB,64KB,1MB,32MB" if fast else "1KB:1GB",
        "size_factor": 4,
        "simulator": {"mode": "algorithm", "time_limit_s": 60},
    }


def synthesis_times(fast: bool) -> pd.DataFrame:
    """Table 4: our CP-SAT time for each (C, S, R) beside the paper's (Z3, their machine)."""
    machine = load_machine("dgx1")
    rows = []
    for collective in ("allgather", "allreduce"):
        chosen = [r for r in TABLE4 if r[0] == collective][: FAST_ROWS if fast else None]
        for _, c, s, r, paper_s in chosen:
            started = time.perf_counter()
            result = synthesize(machine, collective, c, s, r, backend="cpsat", time_limit_s=120.0)
            rows.append(
                {
                    "collective": collective,
                    "chunks": c,
                    "steps": s,
                    "rounds": r,
                    "status": result.status,
                    "ours_s": time.perf_counter() - started,
                    "paper_s": paper_s,
                }
            )
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(__doc__, argv)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    serial = args.serial or args.fast
    df = pd.concat(
        [
            ok(run_as_papers_ran(study(args.fast), out, serial=serial, workers=args.workers)),
            ok(run_as_papers_ran(alltoall_study(out, args.fast), out, serial=serial, workers=args.workers)),
        ],
        ignore_index=True,
    )
    write_csv(df, out / "sccl_dgx1.csv")
    for collective, rows in df.groupby("collective"):
        plot_bandwidth(rows, out / f"sccl_dgx1_{collective}.png", title=f"DGX-1 {collective} (SCCL Figs. 4-6)")
    table4 = synthesis_times(args.fast)
    write_csv(table4, out / "sccl_dgx1_synthesis.csv")
    comparisons = [
        Comparison(
            f"synthesis {r.collective} (C={r.chunks},S={r.steps},R={r.rounds})",
            f"{r.paper_s:.1f} s",
            f"{r.ours_s:.2f} s ({r.status})",
            "SCCL Table 4 (Z3, encode+solve)",
        )
        for r in table4.itertuples()
    ]
    comparisons.append(
        Comparison(
            "slowest synthesis of the Table 4 rows run",
            f"{table4.paper_s.max():.1f} s",
            f"{table4.ours_s.max():.2f} s",
            "SCCL Table 4 (Z3, encode+solve; ours CP-SAT, 1 worker)",
            claim="sccl.table4.synthesis_times",
            value=float(table4.ours_s.max()),
            paper_value=float(table4.paper_s.max()),
        )
    )
    for collective, figure, small_claim, large_claim in (
        ("allgather", "Fig. 4", "sccl.fig4.allgather_small", "sccl.fig4.allgather_large"),
        ("allreduce", "Fig. 5", "sccl.fig5.allreduce_small", "sccl.fig5.allreduce_large"),
        ("alltoall", "Fig. 6", "sccl.fig6.alltoall_small", "sccl.fig6.alltoall_large"),
    ):
        for small, claim in ((True, small_claim), (False, large_claim)):
            # the Alltoall schedules are files synthesized beforehand (alltoall_study)
            kind = "file" if collective == "alltoall" else "sccl"
            where = {"collective": collective, "algorithm_kind": kind}
            comparisons.append(
                Comparison(
                    f"{collective.capitalize()} speed-up over NCCL, {'up to' if small else 'above'} 1 MB",
                    paper(claim),
                    best_speedup(df, small, **where),
                    f"SCCL §5.5 text on {figure}",
                    claim=claim,
                    value=best_speedup_value(df, small, **where),
                )
            )
    largest = df[df.size_bytes == df.size_bytes.max()]
    for collective, rows in largest.groupby("collective"):
        best = rows.loc[rows.busbw_GBps.idxmax()]
        comparisons.append(
            Comparison(
                f"{collective} best busbw at {int(best.size_bytes) >> 20} MB",
                "plot only (Figs. 4a-6a give time in ms)",
                f"{best.algorithm} {best.busbw_GBps:.1f} GB/s = {best.algbw_GBps / best.algbw_bound_GBps:.0%} of bound",
                "simulated",
            )
        )
    print_comparisons("SCCL on DGX-1", comparisons, baseline_label(**NCCL))
    print(f"wrote {out / 'sccl_dgx1.csv'}, {out / 'sccl_dgx1_synthesis.csv'} and sccl_dgx1_*.png")
    return {"results": df, "synthesis": table4, "comparisons": comparisons}


if __name__ == "__main__":
    main()

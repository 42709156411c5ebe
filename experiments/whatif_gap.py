"""What-if: the algorithm vs hardware gap. For each machine and size, the best
classical algorithm (every registered generator), the best SCCL-synthesized
algorithm and the max-flow bound: a heatmap of the fraction of the bound each
family reaches, so a low classical row over a high synthesized row is an
algorithm gap and a high row everywhere means the hardware is the limit.

Writes ``<out>/whatif_gap.csv`` and ``<out>/whatif_gap.png``.

    python experiments/whatif_gap.py --out out/ [--fast] [--serial | --workers N]
"""

from __future__ import annotations

from pathlib import Path

from _common import ok, parse_args, run, write_csv

from simcoll.sweeps.plots import plot_fraction_of_bound

SYNTHESIZED = [
    {"sccl": {"chunks": 1, "steps": 2, "rounds": 2, "time_limit_s": 60}, "name": "sccl latency"},
    {"sccl": {"chunks": 6, "steps": 7, "rounds": 7, "time_limit_s": 120}, "name": "sccl bandwidth"},
]


def study(fast: bool) -> dict:
    return {
        "name": "whatif_gap",
        "machines": ["dgx1"] if fast else ["dgx1", "ndv2", "z52", "dgx-a100"],
        "collectives": ["allgather"],
        "algorithms": ["all", *(SYNTHESIZED[:1] if fast else SYNTHESIZED)],
        "sizes": "1KB,1MB,64MB" if fast else "1KB:1GB",
        "size_factor": 4,
    }


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(__doc__, argv)
    out: Path = args.out
    df = ok(run(study(args.fast), out, serial=args.serial or args.fast, workers=args.workers))
    family = df.algorithm_kind.map({"sccl": "synthesized"}).fillna("classical")
    df = df.assign(variant=df.machine + " " + family)
    write_csv(df, out / "whatif_gap.csv")
    plot_fraction_of_bound(
        df,
        out / "whatif_gap.png",
        variant="variant",
        title="Allgather: best classical vs synthesized, fraction of the bound",
    )
    gap = (df.algbw_GBps / df.algbw_bound_GBps).groupby([df.variant, df.size_bytes]).max().unstack()
    print("== algorithm vs hardware gap: best algbw / bound ==")
    print(gap.round(2).to_string())
    print(f"wrote {out / 'whatif_gap.csv'} and {out / 'whatif_gap.png'}")
    return {"results": df, "fraction": gap}


if __name__ == "__main__":
    main()

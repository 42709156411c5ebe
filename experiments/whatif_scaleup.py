"""What-if: scale-up bandwidth and latency. NVLink bandwidth scaled x0.5-x4 and
its latency x1/x4 on a DGX A100 and a DGX-1, for Allreduce and Allgather: how
much of the max-flow bound do the classical algorithms keep as links get faster?

Writes ``<out>/whatif_scaleup.csv`` and ``<out>/whatif_scaleup.png`` (fraction of the
bound of the best algorithm, machine variant x size).

    python experiments/whatif_scaleup.py --out out/ [--fast] [--serial | --workers N]
"""

from __future__ import annotations

from pathlib import Path

from _common import ok, parse_args, run, write_csv

from simcoll.sweeps.plots import plot_fraction_of_bound


def study(fast: bool) -> dict:
    overrides = {"links.nvlink.bandwidth_Bps": ["x0.5", "x1", "x2", "x4"], "links.nvlink.alpha_s": ["x1", "x4"]}
    return {
        "name": "whatif_scaleup",
        "machines": [{"topology": m, "overrides": overrides} for m in (["dgx-a100"] if fast else ["dgx-a100", "dgx1"])],
        "collectives": ["allreduce"] if fast else ["allreduce", "allgather"],
        "algorithms": ["ring", "multi-ring", "direct"],
        "sizes": "64KB,4MB,256MB" if fast else "1KB:1GB",
        "size_factor": 4,
    }


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(__doc__, argv)
    out: Path = args.out
    df = ok(run(study(args.fast), out, serial=args.serial or args.fast, workers=args.workers))
    write_csv(df, out / "whatif_scaleup.csv")
    allreduce = df[df.collective == "allreduce"]
    plot_fraction_of_bound(allreduce, out / "whatif_scaleup.png", title="Allreduce: best algorithm / bound")
    best = allreduce.groupby(["machine", "size_bytes"]).busbw_GBps.max().unstack()
    print("== scale-up what-if: best Allreduce busbw (GB/s) per NVLink variant ==")
    print(best.round(1).to_string())
    print(f"wrote {out / 'whatif_scaleup.csv'} and {out / 'whatif_scaleup.png'}")
    return {"results": df, "best_busbw": best}


if __name__ == "__main__":
    main()

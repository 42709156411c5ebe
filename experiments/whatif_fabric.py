"""What-if: the scale-out fabric. DGX A100 clusters of 2 to 256 nodes on a
non-blocking fat tree, a rail-optimized fabric, and two-tier leaf-spine Clos
networks of radix-64 switches (radix 16 in --fast) at oversubscription 1:1 and 3:1, for Allgather and
Alltoall: where does the fabric, not the node, set the bandwidth?

In-network reduction on/off: Allreduce on DGX H100 clusters whose NVSwitches
reduce and multicast (NVLink SHARP) and whose IB fabric does too (SHARP),
comparing NCCL's rail-aligned rings (no switch reduces anything) with
NVLS-tree (in the NVSwitches) and CollNet (in the NVSwitches and the IB
switches), and the same clusters with the fabric's SHARP off.
Writes ``<out>/whatif_fabric.csv``, ``<out>/whatif_fabric_innetwork.csv`` and
``<out>/whatif_fabric.png``.

    python experiments/whatif_fabric.py --out out/ [--fast] [--serial | --workers N]
"""

from __future__ import annotations

from pathlib import Path

from _common import ok, parse_args, run, write_csv
from matplotlib.figure import Figure

from simcoll.sweeps.plots import save_figure

FABRICS = {
    "fat-tree": "fat-tree",
    "rail": "rail",
    "clos 1:1": "clos:radix={r},oversub=1",
    "clos 3:1": "clos:radix={r},oversub=3",
}
IN_NETWORK_ALGORITHMS = ["nccl-ring", "nvls-tree", "collnet"]


def study(fast: bool) -> dict:
    nodes = [4] if fast else [2, 4, 8, 16, 32, 64, 128, 256]
    fabrics = {k: v for k, v in FABRICS.items() if not fast or k != "rail"}
    return {
        "name": "whatif_fabric",
        "machines": [
            {"topology": f"dgx-a100*{n}/{spec.format(r=16 if fast else 64)}", "name": f"{n} nodes {label}"}
            for n in nodes
            for label, spec in fabrics.items()
        ],
        "collectives": ["alltoall"] if fast else ["allgather", "alltoall"],
        "algorithms": ["direct"] if fast else ["nccl-ring", "hiccl"],  # direct: N^2 flows, too many at 256 nodes
        "sizes": "64MB" if fast else "16MB,256MB",
    }


def innetwork_study(fast: bool) -> dict:
    """Allreduce with and without in-network reduction (module docstring)."""
    nodes = [2] if fast else [2, 4, 8]
    return {
        "name": "whatif_fabric_innetwork",
        "machines": [
            {"topology": f"dgx-h100*{n}/fat-tree:sharp={sharp}", "name": f"{n} nodes sharp {sharp}"}
            for n in nodes
            for sharp in ("on", "off")
        ],
        "collectives": ["allreduce"],
        "algorithms": IN_NETWORK_ALGORITHMS,
        "sizes": "256MB" if fast else "16MB,256MB,1GB",
    }


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(__doc__, argv)
    out: Path = args.out
    df = ok(run(study(args.fast), out, serial=args.serial or args.fast, workers=args.workers))
    df = df.assign(nodes=df.machine.str.split().str[0].astype(int), fabric=df.machine.str.split(n=2).str[2])
    write_csv(df, out / "whatif_fabric.csv")
    best = df[df.size_bytes == df.size_bytes.max()].groupby(["collective", "fabric", "nodes"]).algbw_GBps.max()
    fig = Figure(figsize=(7, 4))
    ax = fig.add_subplot()
    for (collective, fabric), series in best.groupby(level=[0, 1]):
        ax.plot(series.index.get_level_values("nodes"), series.values, marker="o", label=f"{collective}, {fabric}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("nodes (8 GPUs each)")
    ax.set_ylabel("best algbw (GB/s)")
    ax.set_title("Scale-out fabric what-if (DGX A100)")
    ax.legend(fontsize=7)
    save_figure(fig, out / "whatif_fabric.png")
    print("== fabric what-if: best algbw (GB/s) at the largest size ==")
    print(best.unstack("nodes").round(2).to_string())
    inn = run(innetwork_study(args.fast), out, serial=args.serial or args.fast, workers=args.workers)
    write_csv(inn, out / "whatif_fabric_innetwork.csv")
    done = ok(inn)
    table = done.pivot_table(index=["machine", "size_bytes"], columns="algorithm", values="busbw_GBps")
    print("== in-network reduction on/off: Allreduce busbw (GB/s); collnet needs the fabric's SHARP ==")
    print(table.round(1).to_string())
    skipped = inn[inn.status != "ok"]
    for row in skipped.itertuples():
        print(f"  not applicable: {row.algorithm} on {row.machine}: {row.error}")
    print(f"wrote {out / 'whatif_fabric.csv'}, {out / 'whatif_fabric_innetwork.csv'} and {out / 'whatif_fabric.png'}")
    return {"results": df, "best_algbw": best, "innetwork": inn}


if __name__ == "__main__":
    main()

"""What-if: NICs per node (1/2/4/8), GPU-NIC binding and GPUDirect RDMA, on two
DGX A100 nodes: how much inter-node bandwidth do rail-aligned rings (nccl-ring)
and HiCCL's striped hierarchy get from each extra NIC?

NICs are removed with the cluster option ``nics=K`` (evenly spread), the binding
is the model's ``network.nic_binding``, and GPUDirect off is ``gdr=off`` with
``network.host_staging: true`` (traffic staged through host memory, TACCL §4.2).
Writes ``<out>/whatif_nics.csv`` and ``<out>/whatif_nics.png``.

    python experiments/whatif_nics.py --out out/ [--fast] [--serial | --workers N]
"""

from __future__ import annotations

from pathlib import Path

from _common import ok, parse_args, run, write_csv
from matplotlib.figure import Figure

from simcoll.sweeps.plots import save_figure


def study(fast: bool) -> dict:
    counts = [1, 8] if fast else [1, 2, 4, 8]
    machines = [
        {
            "topology": f"dgx-a100*2/fat-tree:nics={k}",
            "name": f"nics={k}",
            "overrides": {"network.nic_binding": ["packed", "round-robin"]},
        }
        for k in counts
    ]
    machines.append(
        {
            "topology": "dgx-a100*2/fat-tree:gdr=off",
            "name": "nics=8 gdr=off",
            "overrides": {"network.host_staging": True},
        }
    )
    return {
        "name": "whatif_nics",
        "machines": machines,
        "collectives": ["allreduce"] if fast else ["allreduce", "allgather"],
        "algorithms": ["nccl-ring", "ring", {"generator": "hiccl", "name": "hiccl striped", "options": {"nics": 8}}],
        "sizes": "256MB" if fast else "1MB:1GB",
        "size_factor": 4,
    }


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(__doc__, argv)
    out: Path = args.out
    df = ok(run(study(args.fast), out, serial=args.serial or args.fast, workers=args.workers))
    write_csv(df, out / "whatif_nics.csv")
    largest = df[(df.collective == "allreduce") & (df.size_bytes == df.size_bytes.max())]
    table = largest.pivot_table(index="machine", columns="algorithm", values="busbw_GBps")
    fig = Figure(figsize=(7, 0.4 * len(table) + 1.5))
    ax = fig.add_subplot()
    table.plot.barh(ax=ax)
    ax.set_xlabel(f"Allreduce busbw (GB/s) at {largest.size_bytes.max() >> 20} MB")
    ax.set_title("NICs per node, binding and GPUDirect on 2x DGX A100")
    save_figure(fig, out / "whatif_nics.png")
    print("== NICs what-if: Allreduce busbw (GB/s) at the largest size ==")
    print(table.round(1).to_string())
    print(f"wrote {out / 'whatif_nics.csv'} and {out / 'whatif_nics.png'}")
    return {"results": df, "busbw": table}


if __name__ == "__main__":
    main()

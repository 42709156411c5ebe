"""NV-Group (link-efficient Allreduce on NVLink systems) Figs. 8-13 in
simulation: NVGroup-Ring against the ring and the NCCL baseline on one Summit
node (Fig. 8) and a DGX-2 (Fig. 9), its per-NVLink utilisation on Summit
(Fig. 10), and Allreduce bandwidth of 128 MB as Summit nodes are added
(Figs. 11-13).

Writes ``<out>/nvgroup_figs.csv``, ``<out>/nvgroup_figs.png`` (algbw against size
on Summit) and ``<out>/nvgroup_links.png`` (link utilisation of NVGroup-Ring at 128 MB).

    python experiments/nvgroup_figs.py --out out/ [--fast] [--serial | --workers N]
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from _common import Comparison, baseline, best_speedup, generate, ok, parse_args, print_comparisons, run, write_csv

from simcoll import simulate
from simcoll.machines import load_machine
from simcoll.sweeps.plots import plot_bandwidth, plot_link_utilisation

ALGORITHMS = [
    "nvgroup-ring",
    {"generator": "nvgroup-ring", "name": "nvgroup-ring (no pipeline)", "options": {"pipeline": False}},
    "ring",
    "double-binary-tree",
]


def studies(fast: bool) -> list[dict]:
    return [
        {
            "name": "nvgroup_nodes",
            "machines": ["summit", "dgx2"],
            "collectives": ["allreduce"],
            "algorithms": [*ALGORITHMS, *baseline()],
            "sizes": "4KB,1MB,128MB" if fast else "4B:512MB",
            "size_factor": 4,
        },
        {
            "name": "nvgroup_scaling",
            "machines": ["summit*2"] if fast else [f"summit*{n}" for n in (2, 4, 8, 16)],
            "collectives": ["allreduce"],
            "algorithms": ["nvgroup-ring", "ring", *baseline()],
            "sizes": "128MB",
        },
    ]


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(__doc__, argv)
    out: Path = args.out
    df = pd.concat(
        [ok(run(s, out, serial=args.serial or args.fast, workers=args.workers)) for s in studies(args.fast)],
        ignore_index=True,
    )
    write_csv(df, out / "nvgroup_figs.csv")
    summit = df[df.machine == "summit"]
    plot_bandwidth(
        summit, out / "nvgroup_figs.png", metric="algbw", title="Allreduce on one Summit node (NV-Group Fig. 8)"
    )
    machine = load_machine("summit")
    result = simulate(generate("nvgroup-ring", machine, "allreduce"), machine, 128 << 20)
    plot_link_utilisation(result, out / "nvgroup_links.png", title="NVGroup-Ring link utilisation, 128 MB (Fig. 10)")
    used = result.utilisation
    busy = used[used.capacity_Bps > 0].assign(share=used.rate_Bps / used.capacity_Bps)
    mean_by_type = busy.groupby(busy.resource.astype(str).str.contains("cpu")).share.mean()
    at128 = summit[summit.size_bytes == 128 << 20].set_index("algorithm").time_s
    comparisons = [
        Comparison(
            "Summit Allreduce 128 MB, NVGroup-Ring vs NCCL",
            "1.9x shorter latency, ~2x bandwidth",
            best_speedup(summit, False, algorithm="nvgroup-ring"),
            "NV-Group §5.2.1, Fig. 8",
        ),
        Comparison(
            "Summit Allreduce 128 MB, NVGroup-Ring vs ring",
            "not reported",
            f"{at128['ring'] / at128['nvgroup-ring']:.2f}x",
            "simulated",
        ),
        Comparison(
            "DGX-2 Allreduce over NCCL, <16 MB",
            "up to 2.5x",
            best_speedup(df, True, machine="dgx2", algorithm="nvgroup-ring"),
            "NV-Group §5.2.1, Fig. 9",
        ),
        Comparison(
            "measured NVLink throughput, GPU-CPU / GPU-GPU",
            "16 / 25 GB/s (CUPTI counters)",
            f"mean utilisation of busy links: GPU-CPU path {mean_by_type.get(True, float('nan')):.0%}, "
            f"others {mean_by_type.get(False, float('nan')):.0%}",
            "NV-Group §5.2.2, Fig. 10",
        ),
    ]
    scale = df[df.machine.str.startswith("summit*")]
    comparisons.append(
        Comparison(
            "128 MB Allreduce algbw across Summit nodes",
            "NVGroup-Ring highest at every size (plot only)",
            ", ".join(f"{r.machine} {r.algorithm}: {r.algbw_GBps:.1f} GB/s" for r in scale.itertuples()),
            "NV-Group §5.2.3, Fig. 13",
        )
    )
    print_comparisons("NV-Group Figs. 8-13", comparisons)
    print(f"wrote {out / 'nvgroup_figs.csv'}, {out / 'nvgroup_figs.png'} and {out / 'nvgroup_links.png'}")
    return {"results": df, "comparisons": comparisons}


if __name__ == "__main__":
    main()

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
from _common import (
    Comparison,
    baseline,
    baseline_label,
    best_speedup,
    claim_comparison,
    generate,
    ok,
    paper,
    parse_args,
    print_comparisons,
    run_as_papers_ran,
    speedups,
    write_csv,
)

from simcoll import simulate
from simcoll.machines import load_machine
from simcoll.sweeps.plots import plot_bandwidth, plot_link_utilisation

#: NV-Group's baseline: NCCL v2.6 (NV-Group §5.1: NCCL-Ring and NCCL-Default).
NCCL = {"version": "2.6"}
#: Fig. 8 ran on the three GPUs of one Summit socket (NV-Group §5.2.1).
SUMMIT_SOCKET = "summit[0,1,2]"
#: NV-Group's NCCL-Ring: NCCL v2.6 restricted to its ring (NV-Group §5.1).
NCCL_RING = "nccl-ring (NCCL 2.6, NCCL_ALGO=Ring)"
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
            "machines": [SUMMIT_SOCKET, "summit", "dgx2"],
            "collectives": ["allreduce"],
            "algorithms": [*ALGORITHMS, *baseline(**NCCL)],
            "sizes": "4KB,1MB,128MB" if fast else "8B:512MB",  # 8 B x 4^k reaches 128 MB (Fig. 8)
            "size_factor": 4,
        },
        {
            "name": "nvgroup_scaling",
            "machines": ["summit*2"] if fast else [f"summit*{n}" for n in (2, 4, 8, 16)],
            "collectives": ["allreduce"],
            "algorithms": ["nvgroup-ring", "ring", *baseline(**NCCL)],
            "sizes": "128MB",
        },
        {
            # Fig. 11: small-message latency against NCCL-Ring (NCCL v2.6 with NCCL_ALGO=Ring); the paper
            # went to 1,536 GPUs (256 Summit nodes), the full grid to 16 nodes (96 GPUs)
            "name": "nvgroup_latency",
            "machines": ["summit*2"] if fast else ["summit*16"],
            "collectives": ["allreduce"],
            "algorithms": ["nvgroup-ring", {"nccl": {**NCCL, "env": {"NCCL_ALGO": "Ring"}}, "name": NCCL_RING}],
            "sizes": "4KB:64KB",
            "size_factor": 4,
        },
    ]


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(__doc__, argv)
    out: Path = args.out
    df = pd.concat(
        [
            ok(run_as_papers_ran(s, out, serial=args.serial or args.fast, workers=args.workers))
            for s in studies(args.fast)
        ],
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
    to_cpu = busy.resource.astype(str).str.contains("cpu")
    mean_by_type = busy.groupby(to_cpu).share.mean()
    # per NVLink brick, as NV-Group's counters read one link (a Summit GPU pair has two bricks)
    bricks = busy.capacity_Bps / machine.model.link("nvlink").bandwidth_Bps
    rate_GBps = (busy.rate_Bps / bricks).groupby(to_cpu).mean() / 1e9
    at128 = summit[summit.size_bytes == 128 << 20].set_index("algorithm").time_s
    socket = df[(df.machine == SUMMIT_SOCKET) & (df.size_bytes == 128 << 20)].set_index("algorithm").time_s
    fig8 = socket["nccl"] / socket["nvgroup-ring"] if {"nccl", "nvgroup-ring"} <= set(socket.index) else None
    table = speedups(df)
    dgx2 = table[(table.machine == "dgx2") & (table.algorithm == "nvgroup-ring") & (table.size_bytes < 16 << 20)]
    fig9 = None if dgx2.empty else float(dgx2.speedup.max())
    comparisons = [
        claim_comparison(
            "3 Summit GPUs (one socket), Allreduce 128 MB, NVGroup-Ring over NCCL",
            "nvgroup.fig8.summit3_allreduce_128mb",
            fig8,
            "NV-Group §5.2.1, Fig. 8",
            missing="n/a",
        ),
        Comparison(
            "Summit node (6 GPUs) Allreduce 128 MB, NVGroup-Ring vs NCCL",
            "not reported (Fig. 8 used 3 GPUs)",
            best_speedup(summit, False, algorithm="nvgroup-ring"),
            "simulated",
        ),
        Comparison(
            "Summit Allreduce 128 MB, NVGroup-Ring vs ring",
            "not reported",
            f"{at128['ring'] / at128['nvgroup-ring']:.2f}x",
            "simulated",
        ),
        claim_comparison(
            "DGX-2 Allreduce over NCCL, below 16 MB",
            "nvgroup.fig9.dgx2_allreduce_small",
            fig9,
            "NV-Group §5.2.1, Fig. 9",
            missing="n/a",
        ),
        Comparison(
            "NVLink throughput of NVGroup-Ring per GPU-CPU brick (mean over busy links, 128 MB)",
            paper("nvgroup.fig10.gpu_cpu_link"),
            f"{rate_GBps.get(True, float('nan')):.1f} GB/s ({mean_by_type.get(True, float('nan')):.0%} of the link)",
            "NV-Group §5.2.2, Fig. 10",
            claim="nvgroup.fig10.gpu_cpu_link",
            value=float(rate_GBps[True]) if True in rate_GBps else None,
        ),
        Comparison(
            "NVLink throughput of NVGroup-Ring per GPU-GPU brick (mean over busy links, 128 MB)",
            paper("nvgroup.fig10.gpu_gpu_link"),
            f"{rate_GBps.get(False, float('nan')):.1f} GB/s ({mean_by_type.get(False, float('nan')):.0%} of the link)",
            "NV-Group §5.2.2, Fig. 10",
            claim="nvgroup.fig10.gpu_gpu_link",
            value=float(rate_GBps[False]) if False in rate_GBps else None,
        ),
    ]
    latency = df[df.algorithm.isin(["nvgroup-ring", NCCL_RING])]
    latency = latency.pivot_table(index=["machine", "size_bytes"], columns="algorithm", values="time_s").dropna()
    fig11 = float((latency[NCCL_RING] / latency["nvgroup-ring"]).max()) if len(latency) else None
    where = ", ".join(sorted(set(latency.index.get_level_values(0))))
    comparisons.append(
        claim_comparison(
            f"small-message Allreduce (4-64 KB) on {where}: NVGroup-Ring over NCCL-Ring",
            "nvgroup.fig11.multinode_latency_vs_nccl_ring",
            fig11,
            "NV-Group §5.2.3, Fig. 11 (up to 1,536 GPUs in the paper)",
        )
    )
    scale = df[df.machine.str.startswith("summit*") & (df.size_bytes == 128 << 20)]
    comparisons.append(
        Comparison(
            "128 MB Allreduce algbw across Summit nodes",
            "NVGroup-Ring highest at every size (plot only)",
            ", ".join(f"{r.machine} {r.algorithm}: {r.algbw_GBps:.1f} GB/s" for r in scale.itertuples()),
            "NV-Group §5.2.3, Fig. 13",
        )
    )
    print_comparisons("NV-Group Figs. 8-13", comparisons, baseline_label(**NCCL))
    print(f"wrote {out / 'nvgroup_figs.csv'}, {out / 'nvgroup_figs.png'} and {out / 'nvgroup_links.png'}")
    return {"results": df, "comparisons": comparisons}


if __name__ == "__main__":
    main()

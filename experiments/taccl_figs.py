"""TACCL (NSDI'23) Figs. 6-9 and Table 2 in simulation: synthesized Allgather,
Alltoall and Allreduce on two NDv2 and two DGX-2 nodes against classical
algorithms and the NCCL baseline, ablations (TACCL §7.2) of the sketch's
chunk size (Fig. 9b), of the instances the NDv2 Allgather is lowered with,
and in the full study of the DGX-2 switch-hyperedge policy (uc-max / uc-min)
and IB connections per node, and the synthesis times of Table 2.

Each sketch is synthesized with :func:`simcoll.synthesis.taccl_synthesize`,
saved as simcoll JSON and run as an imported schedule of the study. Writes
``<out>/taccl_figs.csv``, ``<out>/taccl_synthesis.csv``,
``<out>/taccl_instances.csv`` (program mode) and ``<out>/taccl_figs.png``.

    python experiments/taccl_figs.py --out out/ [--fast] [--serial | --workers N]
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from _common import (
    Comparison,
    baseline,
    baseline_label,
    claim_comparison,
    ok,
    parse_args,
    print_comparisons,
    run_as_papers_ran,
    speedup_in,
    write_csv,
)

from simcoll.compiler import lower_algorithm
from simcoll.interop import save_schedule
from simcoll.machines import load_machine
from simcoll.sweeps.plots import plot_bandwidth
from simcoll.synthesis import taccl_synthesize
from simcoll.synthesis.taccl.sketch import Sketch, load_sketch
from simcoll.units import format_size

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
#: TACCL's baseline: NCCL v2.8.4-1 (TACCL §7).
NCCL = {"version": "2.8"}
KB, MB = 1 << 10, 1 << 20
#: Each headline claim of Figs. 6-8: (claim, machine, collective, sizes from, sizes to), as TACCL §7.1 states them.
CLAIMS = [
    ("taccl.fig6i.dgx2_allgather_small", "dgx2*2", "allgather", KB, MB),
    ("taccl.fig6i.dgx2_allgather_large", "dgx2*2", "allgather", 256 * MB, 1024 * MB),
    ("taccl.fig6ii.ndv2_allgather_small", "ndv2*2", "allgather", KB, MB),
    ("taccl.fig6ii.ndv2_allgather_large", "ndv2*2", "allgather", MB + 1, 1024 * MB),
    ("taccl.fig7i.dgx2_alltoall", "dgx2*2", "alltoall", 2 * MB, 1024 * MB),
    ("taccl.fig7ii.ndv2_alltoall_large", "ndv2*2", "alltoall", 16 * MB, 1024 * MB),
    ("taccl.fig8i.dgx2_allreduce_small", "dgx2*2", "allreduce", KB, 4 * MB),
    ("taccl.fig8ii.ndv2_allreduce_small", "ndv2*2", "allreduce", 0, MB),
    ("taccl.fig8ii.ndv2_allreduce_large", "ndv2*2", "allreduce", MB + 1, 1024 * MB),
]


def ablation_sketches() -> list[tuple[str, Sketch, str, str]]:
    """(machine, sketch, collective, label) of the full study's sketch ablations on
    2x DGX-2 Allreduce (TACCL §7.2, Fig. 9): ``dgx2-sk-1``'s NVSwitch hyperedge as
    uc-max instead of uc-min, and its 8 IB connections per node (odd GPU to even
    GPU of each NIC pair) cut to 4 and 2, the symmetry and the chunk-to-relay
    map widened to match."""
    base = load_sketch("dgx2-sk-1")
    variants = [(base.with_changes(switch_policies=("uc-max",) * len(base.switch_policies)), "uc-max")]
    for connections in (4, 2):
        stride = 16 // connections
        senders = range(1, 16, stride)
        variant = base.with_changes(
            internode_conn={g: (g - 1,) for g in senders},
            beta_split={g: 1 for g in senders},
            chunk_to_relay_map=(stride, 1),
            symmetry_offsets=((stride, 16), *(o for o in base.symmetry_offsets if o[0] >= 16)),
        )
        variants.append((variant, f"{connections}IB"))
    return [("dgx2*2", sketch, "allreduce", f"taccl dgx2-sk-1 {tag}") for sketch, tag in variants]


def synthesize_all(out: Path, fast: bool) -> tuple[pd.DataFrame, list[dict], dict]:
    """Run Table 2's syntheses (the NDv2 Allgather/Allreduce only in --fast), the chunk-size
    ablation of Fig. 9b (NDv2 Allgather sketched for 1 KB and 1 MB chunks), in the full study
    the sketch ablations of :func:`ablation_sketches`, and save each algorithm. Returns the
    synthesis table, the ``file:`` algorithm of each result and the results by label."""
    jobs = [(m, s, c, p, None, f"taccl {s}") for m, s, c, p in (TABLE2[:2] if fast else TABLE2)]
    jobs += [
        ("ndv2*2", "ndv2-sk-1", "allgather", None, size, f"taccl ndv2-sk-1 @{size >> 10}KB")
        for size in (1 << 10, 1 << 20)
    ]
    if not fast:
        # Fig. 6(i)'s large-buffer Allgather is dgx2-sk-1's (TACCL §7.1), which Table 2 does not time
        jobs.append(("dgx2*2", "dgx2-sk-1", "allgather", None, None, "taccl dgx2-sk-1"))
        jobs += [(m, sketch, c, None, None, label) for m, sketch, c, label in ablation_sketches()]
    rows, files, algorithms = [], [], {}
    for machine, sketch, collective, paper_s, input_size, label in jobs:
        result = taccl_synthesize(
            machine,
            sketch,
            collective,
            model=MODELS[machine],
            time_limit_s=30 if fast else 300,
            input_size_bytes=input_size,
        )
        tag = "_".join(label.split()[1:]).replace("@", "")
        path = out / f"taccl_{machine.replace('*', 'x')}_{collective}_{tag}.json"
        save_schedule(result.algorithm, path)
        files.append({"machine": machine, "spec": {"file": str(path), "name": label}})
        algorithms[label, collective] = (machine, result.algorithm)
        rows.append(
            {
                "machine": machine,
                "sketch": label.removeprefix("taccl "),
                "collective": collective,
                "input_size_bytes": input_size,
                "status": result.status,
                "ours_s": result.time_s,
                "paper_s": paper_s,
            }
        )
    return pd.DataFrame(rows), files, algorithms


def instances_study(out: Path, algorithms: dict, fast: bool) -> dict:
    """The instances ablation: the NDv2 Allgather sketch's algorithm lowered with
    r instances (:func:`simcoll.compiler.lower_algorithm`), saved as MSCCL XML
    and run in program mode beside the NCCL baseline."""
    machine_spec, algorithm = algorithms["taccl ndv2-sk-1", "allgather"]
    machine = load_machine(machine_spec, MODELS[machine_spec])
    specs = []
    for r in [1, 2] if fast else [1, 2, 4]:
        path = out / f"taccl_ndv2x2_allgather_r{r}.xml"
        save_schedule(lower_algorithm(algorithm, instances=r, machine=machine), path)
        specs.append({"file": str(path), "name": f"taccl ndv2-sk-1 r={r}"})
    return {
        "name": "taccl_instances",
        "machines": [{"topology": machine_spec, "model": MODELS[machine_spec]}],
        "collectives": ["allgather"],
        "algorithms": [*specs, *baseline(**NCCL)],
        "sizes": "1MB,64MB" if fast else "1KB:1GB",
        "size_factor": 4,
        "simulator": {"mode": "program"},
    }


def study(machine: str, files: list[dict], fast: bool) -> dict:
    return {
        "name": f"taccl_{machine.replace('*', 'x')}",
        "machines": [{"topology": machine, "model": MODELS[machine]}],
        "collectives": ["allgather", "allreduce"] if fast else ["allgather", "alltoall", "allreduce"],
        "algorithms": [
            "ring",
            "direct",
            "nccl-ring",
            *baseline(**NCCL),
            *[f["spec"] for f in files if f["machine"] == machine],
        ],
        "sizes": "1KB,1MB,64MB" if fast else "1KB:1GB",
        "size_factor": 4,
    }


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(__doc__, argv)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    synthesis, files, algorithms = synthesize_all(out, args.fast)
    write_csv(synthesis, out / "taccl_synthesis.csv")
    machines = ["ndv2*2"] if args.fast else ["ndv2*2", "dgx2*2"]
    df = pd.concat(
        [
            ok(
                run_as_papers_ran(
                    study(m, files, args.fast), out, serial=args.serial or args.fast, workers=args.workers
                )
            )
            for m in machines
        ],
        ignore_index=True,
    )
    write_csv(df, out / "taccl_figs.csv")
    serial = args.serial or args.fast
    instances = ok(
        run_as_papers_ran(instances_study(out, algorithms, args.fast), out, serial=serial, workers=args.workers)
    )
    write_csv(instances, out / "taccl_instances.csv")
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
    timed = synthesis[synthesis.paper_s.notna()]
    comparisons.append(
        Comparison(
            "slowest synthesis of the Table 2 rows run",
            f"{timed.paper_s.max():.1f} s",
            f"{timed.ours_s.max():.2f} s",
            "TACCL Table 2 (Gurobi; ours OR-Tools CP-SAT)",
            claim="taccl.table2.synthesis_times",
            value=float(timed.ours_s.max()),
            paper_value=float(timed.paper_s.max()),
        )
    )
    for claim, machine, collective, low, high in CLAIMS:
        rows = df[(df.topology == machine) & (df.collective == collective)]
        value = speedup_in(rows, low, high, prefix="taccl ")
        window = f"{format_size(max(low, 1))}-{format_size(high)}"
        comparisons.append(
            claim_comparison(
                f"{machine} {collective}: best TACCL algorithm over NCCL, {window}",
                claim,
                value,
                "TACCL §7.1, Figs. 6-8",
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
    inst = instances[instances.size_bytes == instances.size_bytes.max()].set_index("algorithm").algbw_GBps
    comparisons.append(
        Comparison(
            f"instances ablation (program mode): algbw at {format_size(int(instances.size_bytes.max()))}",
            "plot only",
            ", ".join(f"{a}: {inst[a]:.1f} GB/s" for a in inst.index),
            "TACCL §7.2 (ablations)",
        )
    )
    if not args.fast:
        dgx2 = df[(df.topology == "dgx2*2") & (df.collective == "allreduce")]
        dgx2 = dgx2[dgx2.size_bytes == dgx2.size_bytes.max()].set_index("algorithm").algbw_GBps
        sketches = ["taccl dgx2-sk-1", *(label for *_, label in ablation_sketches())]
        comparisons.append(
            Comparison(
                "DGX-2 Allreduce sketch ablations (uc-min as shipped; uc-max; 8 / 4 / 2 IB connections)",
                "plot only",
                ", ".join(f"{a}: {dgx2[a]:.1f} GB/s" if a in dgx2 else f"{a}: no result" for a in sketches),
                "TACCL §7.2 (ablations)",
            )
        )
    print_comparisons("TACCL Figs. 6-9, Table 2", comparisons, baseline_label(**NCCL))
    written = ", ".join(f"{out / n}" for n in ("taccl_figs.csv", "taccl_synthesis.csv", "taccl_instances.csv"))
    print(f"wrote {written} and {out / 'taccl_figs.png'}")
    return {"results": df, "synthesis": synthesis, "instances": instances, "comparisons": comparisons}


if __name__ == "__main__":
    main()

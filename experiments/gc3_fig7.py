"""GC3 (Cowan et al.) Fig. 7 in simulation: the instances (parallelization
factor r) sweep of a ring Allreduce, the hierarchical Allreduce on 2 nodes, the
two-step Alltoall on 16 nodes and the AllToNext custom collective, on DGX A100
nodes.

The instance sweep lowers the ring with r = 1, 2, 4, 8 instances
(:func:`simcoll.compiler.lower_algorithm`), saves each Program as MSCCL XML and
runs it as an imported schedule in program mode; the rest is a study of
registered generators. The hand-written two-step Alltoall GC3 §7.3 compares
against is its three kernels one after another, run as a workload
(:func:`handwritten_two_step`). Writes ``<out>/gc3_fig7.csv`` and
``<out>/gc3_fig7.png``.

    python experiments/gc3_fig7.py --out out/ [--fast] [--serial | --workers N]
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from _common import (
    PAPERS_LAUNCH,
    Comparison,
    baseline,
    baseline_label,
    claim_comparison,
    generate,
    ok,
    parse_args,
    print_comparisons,
    run_as_papers_ran,
    speedup_in,
    write_csv,
)
from matplotlib.figure import Figure

from simcoll.compiler import lower_algorithm
from simcoll.interop import save_schedule
from simcoll.machines import load_machine
from simcoll.sweeps.plots import save_figure
from simcoll.units import format_size
from simcoll.workload import CollectiveOp, Compute, Workload, run_workload

#: GC3 is built on NCCL 2.8.4-1 and compares against it (GC3 §7).
NCCL = {"version": "2.8"}


#: The protocols GC3 tunes its ring with beside the instance count (GC3 §7: "each algorithm's
#: optimizations are tuned"; §7.1.1 runs its ring with LL, LL128 and Simple).
PROTOCOLS = ("Simple", "LL128", "LL")


def instance_files(
    out: Path, configurations: list[tuple[int, int]], protocols: tuple[str, ...] = PROTOCOLS
) -> list[dict]:
    """The ring Allreduce on one DGX A100 lowered for each (channels per ring,
    instances) and protocol, as ``file:`` algorithms named ``ring ch=<channels>
    r=<instances> <protocol>``. GC3 §7.1.1 spreads one logical ring over several
    channels by giving its operations different channels: here the ring's
    buffer in ``8 x channels`` chunks, so that each step's messages between
    two GPUs spread over that many channels."""
    machine = load_machine("dgx-a100")
    specs = []
    for channels, r in configurations:
        ring = generate("ring", machine, "allreduce", chunks=machine.num_ranks * channels)
        for protocol in protocols:
            name = f"ring ch={channels} r={r} {protocol}"
            path = out / f"gc3_{name.replace(' ', '_').replace('=', '')}.xml"
            save_schedule(lower_algorithm(ring, instances=r, protocol=protocol, machine=machine), path)
            specs.append({"file": str(path), "name": name})
    return specs


#: (channels per ring, instances) of the fast and the full grid: one channel parallelized up to 24
#: times (NCCL's ring, GC3 §7.1.1) and a ring spread over eight channels.
FAST_RINGS = [(1, 1), (1, 4), (8, 1), (8, 2)]
FULL_RINGS = [(1, r) for r in (1, 2, 4, 8, 16, 24)] + [(8, r) for r in (1, 2, 4)]


#: The nodes of GC3's two-step Alltoall runs (Fig. 7(e): 16 nodes of 8 A100 GPUs).
TWO_STEP_NODES = 16
#: The name of the hand-written two-step Alltoall's rows.
HANDWRITTEN = "hand-written two-step"


def handwritten_two_step(spec: str, sizes: list[int]) -> pd.DataFrame:
    """The hand-optimized two-step Alltoall GC3 §7.3 compares against, on the
    cluster ``spec`` (nodes of G GPUs), one row per size: its three kernels
    one after another on every GPU, as GC3 describes it (NCCL's point-to-point
    primitives, and "a separate kernel that copies and contiguously arranges
    chunks in a scratch buffer for the aggregated IB send"):

    1. an Alltoall among the node's G GPUs (NCCL's, of the paper's release):
       each GPU hands each GPU of its node the blocks bound for that GPU's
       rail, ``S / G`` bytes;
    2. the copy that arranges the blocks bound for each other node
       contiguously, ``S (N - 1) / N`` bytes read and written at the GPU's
       memory rate (the model's ``gpu.memory_Bps``, the roofline);
    3. an Alltoall among the N GPUs of the rail (NCCL's), ``S / N`` bytes to
       each node.

    GC3's own version (``two-step-alltoall``) is the same two steps in one
    kernel: what it gains is what it overlaps. Bus bandwidth as nccl-tests
    reports an Alltoall's: algbw x (P - 1) / P."""
    machine = load_machine(spec)
    g = machine.num_ranks // len(machine.topology.nodes)
    n = machine.num_ranks // g
    groups = {f"node{k}": tuple(range(k * g, (k + 1) * g)) for k in range(n)}
    groups |= {f"rail{j}": tuple(k * g + j for k in range(n)) for j in range(g)}
    rows = []
    for size in sizes:
        programs = tuple(
            (
                CollectiveOp("in node", "alltoall", f"node{r // g}", size),
                Compute("arrange", memory_bytes=2 * size * (n - 1) / n, deps=("in node",)),
                CollectiveOp("across nodes", "alltoall", f"rail{r % g}", size, deps=("arrange",)),
            )
            for r in range(machine.num_ranks)
        )
        step = Workload(HANDWRITTEN, programs, groups)
        result = run_workload(step, machine, nccl=NCCL["version"], launch=PAPERS_LAUNCH)
        algbw = size / result.step_time_s / 1e9
        rows.append(
            {"machine": spec, "collective": "alltoall", "algorithm": HANDWRITTEN, "size_bytes": size, "status": "ok"}
            | {"time_s": result.step_time_s, "algbw_GBps": algbw, "busbw_GBps": algbw * (n * g - 1) / (n * g)}
        )
    return pd.DataFrame(rows)


def studies(out: Path, fast: bool) -> list[dict]:
    sizes = "64KB,4MB,256MB" if fast else "1KB:1GB"
    nodes = "dgx-a100*2"
    return [
        {
            "name": "gc3_instances",
            "machines": ["dgx-a100"],
            "collectives": ["allreduce"],
            "algorithms": instance_files(out, FAST_RINGS if fast else FULL_RINGS),
            "sizes": sizes,
            "size_factor": 4,
            "simulator": {"mode": "program"},
        },
        {
            # NCCL's own row times the Algorithm NCCL runs (Algorithm mode), as every other study
            # and the validation against nccl-tests do, not a lowering of it
            "name": "gc3_instances_nccl",
            "machines": ["dgx-a100"],
            "collectives": ["allreduce"],
            "algorithms": ["direct", *baseline(**NCCL)],
            "sizes": sizes,
            "size_factor": 4,
        },
        {
            "name": "gc3_multinode",
            "machines": [nodes] if fast else [nodes, "dgx-a100*3"],
            # (the Alltoall has a study of its own, on the paper's 16 nodes: gc3_two_step)
            "collectives": ["allreduce", "alltonext"],
            "algorithms": [
                "ring",
                "direct",
                "gc3-hierarchical",
                # GC3's large-size version (§7.2): chunk groups pipelined through the four phases; 384
                # chunks make 8 full groups on 2 and on 3 nodes of 8 GPUs
                {
                    "generator": "gc3-hierarchical",
                    "name": "gc3-hierarchical pipelined",
                    "options": {"pipeline": 8},
                    "chunks": 384,
                },
                "alltonext",
                *baseline(**NCCL),
            ],  # fmt: skip
            # Fig. 7(c) reports the hierarchical Allreduce above 1 GB
            "sizes": sizes if fast else "1KB:4GB",
            "size_factor": 4,
        },
        {
            "name": "gc3_two_step",
            "machines": [nodes if fast else f"dgx-a100*{TWO_STEP_NODES}"],
            "collectives": ["alltoall"],
            "algorithms": ["two-step-alltoall", *baseline(**NCCL)],
            "sizes": sizes if fast else "1KB:4GB",
            "size_factor": 4,
        },
    ]


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(__doc__, argv)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    frames = [
        ok(run_as_papers_ran(s, out, serial=args.serial or args.fast, workers=args.workers))
        for s in studies(out, args.fast)
    ]
    two_step = frames[-1]
    sizes = sorted(two_step.size_bytes.unique().tolist())
    frames.append(handwritten_two_step(two_step.machine.iloc[0], sizes))
    df = pd.concat(frames, ignore_index=True)
    write_csv(df, out / "gc3_fig7.csv")
    panels = list(df.groupby(["machine", "collective"]))
    fig = Figure(figsize=(4.2 * len(panels), 3.6))
    for i, ((machine, collective), rows) in enumerate(panels):
        ax = fig.add_subplot(1, len(panels), i + 1)
        for name, group in rows.groupby("algorithm"):
            ax.plot(group.size_bytes, group.busbw_GBps, marker="o", markersize=3, label=name)
        ax.set_xscale("log", base=2)
        ticks = sorted(rows.size_bytes.unique())
        ax.set_xticks(ticks, [format_size(s) for s in ticks], fontsize=7)
        ax.set_title(f"{collective} on {machine}", fontsize=9)
        ax.set_ylabel("busbw (GB/s)")
        ax.legend(fontsize=6)
    save_figure(fig, out / "gc3_fig7.png")

    def ratio(machine: str, collective: str, fast_alg: str, slow_alg: str) -> str:
        rows = df[(df.machine == machine) & (df.collective == collective)]
        a = rows[rows.algorithm == fast_alg].set_index("size_bytes").time_s
        b = rows[rows.algorithm == slow_alg].set_index("size_bytes").time_s
        common = a.index.intersection(b.index)
        if common.empty:
            return "n/a (no rows)"
        speed = b[common] / a[common]
        return f"{speed.max():.2f}x (at {format_size(int(speed.idxmax()))}; {speed.min():.2f}x at worst)"

    top = [a for a in df[df.machine == "dgx-a100"].algorithm.unique() if a.startswith("ring ch=")]
    # one channel, Simple, by instance count: what instances alone do
    simple = sorted(
        (a for a in top if a.startswith("ring ch=1 ") and a.endswith(" Simple")), key=lambda a: int(a.split()[2][2:])
    )

    def claimed(claim: str, what: str, rows, low: int, high: float, prefix: str, source: str) -> Comparison:
        return claim_comparison(what, claim, speedup_in(rows, low, high, prefix=prefix), source)

    one = df[(df.machine == "dgx-a100") & df.algorithm.isin([*top, "nccl"])]
    two = df[df.machine == "dgx-a100*2"]
    # AllToNext on the most nodes it runs on (the paper: 3); the two-step Alltoall on its own study's
    multinode = df[df.collective == "alltonext"]
    widest = max(multinode.machine.unique(), key=lambda m: int(m.split("*")[1])) if len(multinode) else "-"
    most = df[df.machine == widest]
    step_machine = two_step.machine.iloc[0]
    steps = df[df.collective == "alltoall"]
    by_size = steps.pivot_table(index="size_bytes", columns="algorithm", values="time_s")
    large = by_size[by_size.index > (64 << 20)]
    over_handwritten = (
        float((large[HANDWRITTEN] / large["two-step-alltoall"]).max())
        if {HANDWRITTEN, "two-step-alltoall"} <= set(large) and len(large)
        else None
    )
    comparisons = [
        claimed(
            "gc3.fig7a.ring_allreduce_instances",
            "GC3 ring (channels per ring, instances, protocol tuned) over NCCL (1 node), 32KB-3MB",
            one,
            32 << 10,
            3 << 20,
            "ring ch=",
            "GC3 §7.1.1, Fig. 7(a)",
        ),
        claimed(
            "gc3.fig7a.allpairs_allreduce",
            "All Pairs Allreduce (direct) over NCCL (1 node), 1KB-1MB",
            df[df.machine == "dgx-a100"],
            1 << 10,
            1 << 20,
            "direct",
            "GC3 §7.1.2, Fig. 7(a)",
        ),
        claimed(
            "gc3.fig7c.hierarchical_allreduce_small",
            "hierarchical Allreduce over NCCL (2 nodes), up to 1MB",
            two[two.collective == "allreduce"],
            0,
            1 << 20,
            "gc3-hierarchical",
            "GC3 §7.2, Fig. 7(c)",
        ),
        claimed(
            "gc3.fig7c.hierarchical_allreduce_large",
            "hierarchical Allreduce over NCCL (2 nodes), above 1GB",
            two[two.collective == "allreduce"],
            (1 << 30) + 1,
            float("inf"),
            "gc3-hierarchical",
            "GC3 §7.2, Fig. 7(c)",
        ),
        claimed(
            "gc3.fig7e.twostep_alltoall_vs_nccl",
            f"two-step Alltoall over NCCL's Alltoall ({step_machine}), above 512MB",
            steps[steps.algorithm != HANDWRITTEN],
            (512 << 20) + 1,
            float("inf"),
            "two-step",
            "GC3 §7.3, Fig. 7(e)",
        ),
        claim_comparison(
            f"two-step Alltoall over the hand-written two-step ({step_machine}: its three kernels in turn), above 64MB",
            "gc3.fig7e.twostep_alltoall_vs_handwritten",
            over_handwritten,
            "GC3 §7.3, Fig. 7(e)",
        ),
        Comparison(
            "ring Allreduce, more instances vs r=1 (1 node)",
            "not given as a number (Fig. 7(a) plots each r)",
            ratio("dgx-a100", "allreduce", simple[-1], simple[0]),
            "GC3 §7.1.1, Fig. 7(a); ours: one channel, Simple, most instances over one",
        ),
    ]
    nexts = most[most.collective == "alltonext"].pivot_table(index="size_bytes", columns="algorithm", values="time_s")
    alltonext = (nexts["direct"] / nexts["alltonext"]).max() if {"direct", "alltonext"} <= set(nexts) else None
    comparisons.append(
        claim_comparison(
            f"AllToNext over each GPU sending its buffer to the next directly ({widest}), best size",
            "gc3.fig7g.alltonext",
            None if alltonext is None else float(alltonext),
            "GC3 §7.4, Fig. 7(g) (3 nodes in the paper)",
        )
    )
    print_comparisons("GC3 Fig. 7", comparisons, baseline_label(**NCCL))
    print(f"wrote {out / 'gc3_fig7.csv'} and {out / 'gc3_fig7.png'}")
    return {"results": df, "comparisons": comparisons}


if __name__ == "__main__":
    main()

"""What-if: in-network reduction on and off. A DGX H100 whose NVSwitches reduce
and multicast (NVLink SHARP, the ``nvls`` generator) against the same machine
with the switches' reduce capability off (the topology's ``reduce: true``
cleared), and in the full study the switches' reduce rate scaled x0.5 and x2:
how much faster is Allreduce (and ReduceScatter / Allgather) when the switch
adds, and how fast must the switch add for it to pay?

Algorithms: the classical ring, NCCL's rings (``nccl-ring``), NVLS (``nvls``:
each GPU sends its buffer into the switches once and receives the sum once,
not applicable with the reduce capability off) and the ``nccl`` baseline
(NCCL's tuner: NVLS where the switches reduce, rings otherwise). Where the
published nccl-tests logs of an 8x H100 node are found (NVLS active, and
NCCL_ALGO=Ring forced; ``../shared/reference/measurements``), their busbw is
printed beside ours.

Writes ``<out>/whatif_innetwork.csv`` (every point, with its status),
``<out>/whatif_innetwork.png`` (Allreduce busbw against size: the ``nccl``
baseline and the bound per variant, NVLS, and the measurements) and the
derived topology ``<out>/dgx-h100-no-switch-reduce.yaml``.

    python experiments/whatif_innetwork.py --out out/ [--fast] [--serial | --workers N]
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pandas as pd
from _common import parse_args, run, write_csv
from matplotlib.figure import Figure

from simcoll.calibration import read_nccl_tests
from simcoll.machines import load_topology
from simcoll.sweeps.plots import save_figure
from simcoll.topology import save_topology
from simcoll.units import format_size

BASE = "dgx-h100"
ON, OFF = "switch reduce on", "switch reduce off"
ALGORITHMS = ["ring", "nccl-ring", "nvls", "nccl"]
MEASUREMENTS = Path(__file__).resolve().parents[2] / "shared" / "reference" / "measurements"
#: nccl-tests logs of one 8x H100 node (NCCL 2.26.2): NVLS active, and rings forced (NCCL_ALGO=Ring).
MEASURED_LOGS = {
    "nvls": "h100-80gb-hbm3-x8_all_reduce_nvls_together.log",
    "ring": "h100-80gb-hbm3-x8_all_reduce_ring_together.log",
}


def no_switch_reduce_topology(out: Path) -> Path:
    """The DGX H100 with every switch's ``reduce`` capability cleared, written
    as a topology YAML file under ``out`` (the study names it by path)."""
    base = load_topology(BASE)
    variant = dataclasses.replace(
        base,
        name=f"{BASE}-no-switch-reduce",
        components=tuple(dataclasses.replace(c, reduce=False) for c in base.components),
        sources=(*base.sources, "what-if (experiments/whatif_innetwork.py): no switch reduces (NVLink SHARP off)"),
    )
    path = out / f"{variant.name}.yaml"
    out.mkdir(parents=True, exist_ok=True)
    save_topology(variant, path)
    return path


def study(fast: bool, off_topology: Path) -> dict:
    """On/off (and, in the full study, the switch reduce rate x0.5 and x2)."""
    machines: list = [{"topology": BASE, "name": ON}, {"topology": str(off_topology), "name": OFF}]
    if not fast:
        machines.append(
            {"topology": BASE, "name": "switch reduce", "overrides": {"switches.nvswitch.reduce_Bps": ["x0.5", "x2"]}}
        )
    return {
        "name": "whatif_innetwork",
        "machines": machines,
        "collectives": ["allreduce"] if fast else ["allreduce", "reducescatter", "allgather"],
        "algorithms": ALGORITHMS,
        "sizes": "64KB,64MB,1GB" if fast else "1KB:4GB",
        "size_factor": 4,
    }


def measured() -> pd.DataFrame:
    """Out-of-place busbw of the measured logs (columns ``run``, ``size_bytes``,
    ``busbw_GBps``); empty when the logs are not there."""
    frames = []
    for run_name, name in MEASURED_LOGS.items():
        path = MEASUREMENTS / name
        if path.exists():
            table = read_nccl_tests(path, num_ranks=8).frame()
            table = table[table.placement == "out-of-place"]
            frames.append(table[["size_bytes", "busbw_GBps"]].assign(run=run_name))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["run", "size_bytes", "busbw_GBps"])


def plot(df: pd.DataFrame, meas: pd.DataFrame, path: Path) -> None:
    """Allreduce busbw against size (module docstring)."""
    rows = df[(df.status == "ok") & (df.collective == "allreduce")].sort_values("size_bytes")
    fig = Figure(figsize=(7.5, 4.5))
    ax = fig.add_subplot()
    for machine, group in rows.groupby("machine", sort=False):
        base = group[group.algorithm == "nccl"]
        (line,) = ax.plot(base.size_bytes, base.busbw_GBps, marker="o", markersize=3, label=f"nccl, {machine}")
        ax.plot(base.size_bytes, base.busbw_bound_GBps, "--", color=line.get_color(), label=f"bound, {machine}")
    for name, group in meas.sort_values("size_bytes").groupby("run"):
        group = group[group.size_bytes.between(rows.size_bytes.min(), rows.size_bytes.max())]
        ax.plot(group.size_bytes, group.busbw_GBps, "x", label=f"measured, NCCL {name} (nccl-tests)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("buffer size (bytes)")
    ax.set_ylabel("busbw (GB/s)")
    ax.set_title("Allreduce on DGX H100: in-switch reduction on and off")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    save_figure(fig, path)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(__doc__, argv)
    out: Path = args.out
    off = no_switch_reduce_topology(out)
    df = run(study(args.fast, off), out, serial=args.serial or args.fast, workers=args.workers)
    df = df.sort_values(["machine", "collective", "algorithm", "size_bytes"], ignore_index=True)
    write_csv(df, out / "whatif_innetwork.csv")
    meas = measured()
    plot(df, meas, out / "whatif_innetwork.png")
    done = df[df.status == "ok"]
    table = done.pivot_table(index=["collective", "size_bytes"], columns=["machine", "algorithm"], values="busbw_GBps")
    print("== in-network reduction what-if: busbw (GB/s) ==")
    print(table.round(1).to_string())
    nccl = done[done.algorithm == "nccl"].pivot_table(
        index=["collective", "size_bytes"], columns="machine", values="time_s"
    )
    speedup = (nccl[OFF] / nccl[ON]).rename("nccl speed-up, on over off")
    print("== the nccl baseline with the switches' reduce capability on over off ==")
    print(speedup.round(2).to_string())
    for row in df[df.status == "not-applicable"].drop_duplicates(["machine", "algorithm"]).itertuples():
        print(f"  not applicable: {row.algorithm} on {row.machine}: {row.error}")
    comparisons = []
    if meas.empty:
        print(f"  note: measured logs not found under {MEASUREMENTS}; nothing to print beside ours")
    else:
        by_run = meas.set_index(["run", "size_bytes"]).busbw_GBps
        ours = done[done.collective == "allreduce"].set_index(["machine", "algorithm", "size_bytes"]).busbw_GBps
        for size in sorted(set(ours.index.get_level_values("size_bytes")) & set(by_run.index.get_level_values(1))):
            m_on, m_off = by_run.get(("nvls", size)), by_run.get(("ring", size))
            o_on, o_off = ours.get((ON, "nccl", size)), ours.get((OFF, "nccl", size))
            if None in (m_on, m_off, o_on, o_off):
                continue
            comparisons.append(
                {"size_bytes": size, "measured_on": m_on, "measured_off": m_off, "ours_on": o_on, "ours_off": o_off}
            )
            print(
                f"  Allreduce busbw at {format_size(size)}, NVLS on / off (rings): measured {m_on:.1f} / {m_off:.1f} GB/s"
                f" = {m_on / m_off:.2f}x | ours {o_on:.1f} / {o_off:.1f} GB/s = {o_on / o_off:.2f}x"
                "   [nccl-tests, NCCL 2.26.2, 8x H100 SXM: NVLS active vs NCCL_ALGO=Ring]"
            )
    print(f"wrote {out / 'whatif_innetwork.csv'}, {out / 'whatif_innetwork.png'} and {off}")
    return {"results": df, "busbw": table, "speedup": speedup, "measured": pd.DataFrame(comparisons)}


if __name__ == "__main__":
    main()

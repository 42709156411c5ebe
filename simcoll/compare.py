"""The main job: every applicable algorithm for a collective on a machine,
across buffer sizes, as a tidy DataFrame (one row per algorithm and size),
with the best algorithm per size marked and a plot of algbw against size.

Times are analytic (:func:`simcoll.cost.critical_path_time_s`) until the
simulator replaces them; the bandwidth lower bound is reported beside them.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from .algorithms import applicable
from .bounds import time_lower_bound_s
from .collectives import canonical_name, make_collective
from .cost import algbw_GBps, busbw_GBps, critical_path_time_s
from .errors import SimcollError
from .machines import Machine
from .units import format_size

DEFAULT_SIZES = "1KB:1GB"
COLUMNS = [
    "topology",
    "model",
    "collective",
    "algorithm",
    "chunks",
    "steps",
    "rounds",
    "size_bytes",
    "size",
    "time_s",
    "time_us",
    "algbw_GBps",
    "busbw_GBps",
    "algbw_bound_GBps",
    "best",
]


def compare(machine: Machine, collective: str, sizes: list[int]) -> tuple[pd.DataFrame, dict[str, str]]:
    """Rows for every applicable algorithm and size, and the reasons the
    other registered algorithms do not apply.

    >>> from simcoll import load_machine
    >>> df, skipped = compare(load_machine("ring:4"), "allgather", [1024, 1 << 20])
    >>> sorted(df.algorithm.unique())
    ['direct', 'ring']
    """
    if not sizes:
        raise SimcollError("compare needs at least one size")
    collective = canonical_name(collective)
    candidates = applicable(machine.topology, collective)
    algorithms = {name: a for name, a in candidates.items() if not isinstance(a, str)}
    skipped = {name: reason for name, reason in candidates.items() if isinstance(reason, str)}
    if not algorithms:
        reasons = "; ".join(f"{k}: {v}" for k, v in skipped.items()) or "no generator implements it"
        raise SimcollError(f"no algorithm applies to {collective} on {machine.name} ({reasons})")
    coll = make_collective(collective, machine.num_ranks)
    # The cut bound is linear in size (no latency term): compute it once.
    unit_bound_s, _ = time_lower_bound_s(coll, machine, coll.size_chunks)
    rows = []
    for size in sizes:
        for name, algorithm in algorithms.items():
            t = critical_path_time_s(algorithm, machine, size)
            bound_s = unit_bound_s * size / coll.size_chunks
            rows.append(
                {
                    "topology": machine.name,
                    "model": machine.model.name,
                    "collective": algorithm.collective.name,
                    "algorithm": name,
                    "chunks": algorithm.chunks,
                    "steps": algorithm.steps,
                    "rounds": algorithm.rounds,
                    "size_bytes": size,
                    "size": format_size(size),
                    "time_s": t,
                    "time_us": t * 1e6,
                    "algbw_GBps": algbw_GBps(size, t),
                    "busbw_GBps": busbw_GBps(algorithm.collective, size, t),
                    "algbw_bound_GBps": size / bound_s / 1e9 if bound_s > 0 else float("inf"),
                }
            )
    df = pd.DataFrame(rows, columns=COLUMNS[:-1])
    df["best"] = df.groupby("size_bytes")["time_s"].transform("min") == df["time_s"]
    return df, skipped


def plot_comparison(df: pd.DataFrame, path: str | Path) -> None:
    """algbw against buffer size, one line per algorithm, the bound dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, group in df.groupby("algorithm"):
        ax.plot(group["size_bytes"], group["algbw_GBps"], marker="o", markersize=3, label=name)
    bound = df.drop_duplicates("size_bytes")
    ax.plot(bound["size_bytes"], bound["algbw_bound_GBps"], "k--", linewidth=1, label="bandwidth bound")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("buffer size (bytes)")
    ax.set_ylabel("algbw (GB/s)")
    first = df.iloc[0]
    ax.set_title(f"{first['collective']} on {first['topology']} (model {first['model']}, analytic α-β)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)

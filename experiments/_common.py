"""What every study script in ``experiments/`` shares: its command line, running a
study (declared as data) with :func:`simcoll.sweeps.run_study`, atomic CSV
output, the NCCL baseline's availability, and printing the paper's number beside
ours.

Scripts import it as ``_common`` (Python puts a script's directory first on
``sys.path``); notebooks add ``experiments/`` to ``sys.path`` first.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from simcoll.files import write_atomic
from simcoll.sweeps import load_results, load_study, run_study

#: The message a study prints where a speed-up over NCCL would need the ``nccl`` baseline.
NCCL_MISSING = "nccl baseline not available: speed-ups over NCCL not computed"


def nccl_available() -> bool:
    """Whether the NCCL baseline is installed: :mod:`simcoll.nccl.baseline`,
    NCCL's tuner choosing algorithm, protocol and channels per size, which a
    study names as the algorithm ``nccl`` (not a registry generator: its
    Algorithm depends on the size). ``nccl-ring`` alone is not it."""
    import importlib.util

    return importlib.util.find_spec("simcoll.nccl.baseline") is not None


def baseline(version: str | None = None, env: dict[str, str] | None = None) -> list:
    """The algorithm entries to add to a study for the NCCL baseline (none
    without it): the row ``nccl``, NCCL ``version`` (default 2.30) with the
    environment ``env`` a paper set (e.g. ``{"NCCL_PROTO": "Simple"}``)."""
    if not nccl_available():
        return []
    if version is None and not env:
        return ["nccl"]
    return [{"nccl": {"version": version, "env": dict(env or {})}, "name": "nccl"}]


def baseline_label(version: str | None = None, env: dict[str, str] | None = None) -> str:
    """What the ``nccl`` row of :func:`baseline` stands for, e.g. ``NCCL 2.7.8, NCCL_PROTO=Simple``."""
    from simcoll.nccl.versions import NcclSetup

    return NcclSetup.parse(version, env or {}).describe()


#: The papers' headline claims (reference data citing each figure or table).
CLAIMS_FILE = Path(__file__).with_name("paper_claims.yaml")


def paper_claims() -> dict[str, dict]:
    """The claims of ``paper_claims.yaml`` by id."""
    import yaml

    return {c["id"]: c for c in yaml.safe_load(CLAIMS_FILE.read_text())["claims"]}


def paper(claim: str) -> str:
    """A claim's number as the paper states it: ``up to 2.2x``, ``1.12-1.35x``, ``geomean 1.26x``, ``23.0 s``."""
    return claim_text(paper_claims()[claim])


def claim_text(c: dict, value: float | None = None) -> str:
    """``value`` (default: the claim's own) in the claim's unit, with its statistic."""
    unit = {"speedup": "x", "time_s": " s", "bandwidth_GBps": " GB/s", "percent": " %"}.get(c["metric"], "")
    if value is None and c.get("range") and c.get("statistic") == "range":
        low, high = c["range"]
        return f"{low:g}-{high:g}{unit}"
    number = f"{(c['value'] if value is None else value):.3g}{unit}"
    prefix = {"max": "up to ", "geomean": "geomean ", "min": "at least "}.get(c.get("statistic", ""), "")
    return prefix + number if value is None else number


@dataclass(frozen=True)
class Comparison:
    """One published number and ours: ``what`` is compared, ``source`` cites
    the figure or table (and says when the number was read off a plot);
    ``claim`` is the id of the headline claim in ``paper_claims.yaml`` it
    checks (if any) and ``value`` our number as a figure in the claim's unit
    (None where not computed), which ``claims.py`` tabulates; ``paper_value``
    replaces the claim's stated value where ours covers part of it (the rows
    of a table that were run)."""

    what: str
    paper: str
    ours: str
    source: str
    claim: str = ""
    value: float | None = None
    paper_value: float | None = None


def claim_comparison(what: str, claim: str, value: float | None, source: str, missing: str = "not run") -> Comparison:
    """The :class:`Comparison` of headline claim ``claim`` (``paper_claims.yaml``)
    with our speed-up ``value``, shown as ``1.23x`` (``missing`` where None)."""
    ours = missing if value is None else f"{value:.2f}x"
    return Comparison(what, paper(claim), ours, source, claim=claim, value=value)


def parse_args(doc: str, argv: list[str] | None = None) -> argparse.Namespace:
    """The command line every study script takes."""
    parser = argparse.ArgumentParser(description=doc.strip().splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("out"), help="output directory (default: out/)")
    parser.add_argument("--fast", action="store_true", help="a reduced grid that runs in a few seconds (tests)")
    parser.add_argument("--workers", type=int, help="Dask LocalCluster worker processes (default: the CPU count)")
    parser.add_argument("--serial", action="store_true", help="run in this process, without Dask")
    return parser.parse_args(argv)


#: How the papers' benchmarks launched their calls: one process per GPU. SCCL ran OMB under
#: OpenMPI (SCCL appendix A.3.3, A.5.2), NV-Group OMB with MVAPICH2-GDR (NV-Group §5), HiCCL MPI
#: ranks (HiCCL §5); TACCL and GC3 ran nccl-tests with their runtimes inside NCCL (TACCL §7,
#: GC3 §7) across nodes, which takes a process per node at least (one per GPU assumed, as
#: nccl-tests under mpirun runs). A study's machine that names its own ``launch`` keeps it.
PAPERS_LAUNCH = "processes"


def run_as_papers_ran(study: Mapping[str, Any], out: Path, **options: Any) -> pd.DataFrame:
    """:func:`run` with every machine of ``study`` launching its calls as the
    papers did (:data:`PAPERS_LAUNCH`; one naming its own ``launch`` keeps it)."""
    machines = [m if isinstance(m, Mapping) else {"topology": m} for m in study["machines"]]
    return run({**study, "machines": [{"launch": PAPERS_LAUNCH, **m} for m in machines]}, out, **options)


def run(study: Mapping[str, Any], out: Path, *, serial: bool = True, workers: int | None = None) -> pd.DataFrame:
    """Run ``study`` into ``out/<name>/`` (resuming: only missing points run) and
    return the rows of this study's points, successful or not."""
    out.mkdir(parents=True, exist_ok=True)
    results = out / study["name"]
    run_study(dict(study), results, workers=workers, serial=serial, resume=True, progress=False)
    keys = {p.key for p in load_study(dict(study)).points()}
    df = load_results(results)
    df = df[df.key.isin(keys)].reset_index(drop=True)
    if not (df.status == "ok").any():
        errors = df[df.status == "error"].error.dropna()
        first = errors.iloc[0] if not errors.empty else "no rows, or none applicable"
        raise SystemExit(f"study {study['name']}: no point succeeded (first error: {first}); results in {results}")
    return df


def ok(df: pd.DataFrame) -> pd.DataFrame:
    """The successful rows, sorted."""
    return df[df.status == "ok"].sort_values(["machine", "collective", "algorithm", "size_bytes"])


def write_csv(df: pd.DataFrame, path: Path) -> None:
    """``df`` as CSV at ``path``, atomically."""
    write_atomic(path, df.to_csv(index=False))


#: NCCL's tuner chooses no algorithm for these collectives: NCCL runs them as grouped
#: ncclSend / ncclRecv, each GPU sending straight to every peer (nccl-tests' alltoall_perf;
#: SCCL §5.5 compares its Alltoall with this), which the ``direct`` generator schedules.
NCCL_P2P = {"alltoall": "direct"}


def baseline_rows(df: pd.DataFrame, base: str = "nccl") -> pd.DataFrame:
    """The successful rows of ``base``; for ``nccl``, in a collective NCCL runs as
    point-to-point (:data:`NCCL_P2P`) and without ``nccl`` rows, the rows of that
    point-to-point schedule instead."""
    rows = ok(df)
    reference = rows[rows.algorithm == base]
    if base == "nccl":
        for collective, algorithm in NCCL_P2P.items():
            if not (reference.collective == collective).any():
                p2p = rows[(rows.collective == collective) & (rows.algorithm == algorithm)]
                reference = pd.concat([reference, p2p])
    return reference


def speedups(df: pd.DataFrame, base: str = "nccl", by: Iterable[str] = ("machine", "collective")) -> pd.DataFrame:
    """Time of ``base`` over each algorithm's time, per ``by`` group and size
    (columns ``speedup``, ``baseline`` (the algorithm timed as ``base``) and
    ``baseline_time_s``); empty without ``base`` rows (:func:`baseline_rows`)."""
    rows = ok(df)
    by = list(by)
    reference = baseline_rows(df, base)[[*by, "size_bytes", "time_s", "algorithm"]].rename(
        columns={"time_s": "baseline_time_s", "algorithm": "baseline"}
    )
    merged = rows.merge(reference, on=[*by, "size_bytes"])
    merged = merged[merged.algorithm != merged.baseline]
    return merged.assign(speedup=merged.baseline_time_s / merged.time_s)


SMALL_BYTES = 1 << 20  # "small" buffers: up to 1 MiB


def _window(small: bool | None) -> tuple[int, float]:
    """The sizes (bytes, ends included) of ``small``: up to 1 MiB (True), above it (False), all (None)."""
    return (0, SMALL_BYTES) if small else (0, float("inf")) if small is None else (SMALL_BYTES + 1, float("inf"))


def _matching(df: pd.DataFrame, low: float, high: float, prefix: str = "", **where: Any) -> pd.DataFrame:
    """The speed-ups (:func:`speedups`) of rows matching ``where`` whose
    algorithm starts with ``prefix``, at sizes from ``low`` to ``high`` bytes."""
    table = speedups(df)
    table = table[(table.size_bytes >= low) & (table.size_bytes <= high) & table.algorithm.str.startswith(prefix)]
    for column, value in where.items():
        table = table[table[column] == value]
    return table


def speedup_in(
    df: pd.DataFrame, low: int = 0, high: float = float("inf"), prefix: str = "", **where: Any
) -> float | None:
    """The best speed-up over NCCL among rows matching ``where`` whose
    algorithm starts with ``prefix``, at sizes from ``low`` to ``high`` bytes
    (the size window a claim names); None without such rows."""
    if not nccl_available():
        return None
    table = _matching(df, low, high, prefix, **where)
    return None if table.empty else float(table.speedup.max())


def best_speedup_value(df: pd.DataFrame, small: bool | None = None, **where: Any) -> float | None:
    """The number :func:`best_speedup` prints (None where it prints none)."""
    return speedup_in(df, *_window(small), **where)


def best_speedup(df: pd.DataFrame, small: bool | str | None = None, **where: Any) -> str:
    """The best speed-up over NCCL among rows matching ``where`` (column=value),
    over sizes up to 1 MiB (``small=True``), above it (``False``) or all, as
    text; with ``small="both"`` the two, as ``"small / large"``."""
    if not nccl_available():
        return "n/a (nccl baseline not available)"
    if small == "both":
        return f"{best_speedup(df, True, **where)} / {best_speedup(df, False, **where)}"
    table = _matching(df, *_window(small), **where)
    if table.empty:
        return "n/a (no successful rows with the baseline in this grid)"
    best = table.loc[table.speedup.idxmax()]
    over = "" if best.baseline == "nccl" else f" over NCCL's send/recv ({best.baseline})"
    return f"{best.speedup:.2f}x ({best.algorithm}, {_size(best.size_bytes)}{over})"


def _size(size_bytes: int) -> str:
    from simcoll.units import format_size

    return format_size(int(size_bytes))


def print_comparisons(title: str, comparisons: Iterable[Comparison], nccl: str = "") -> None:
    """The paper's numbers beside ours, one line each; ``nccl`` names the
    baseline's release and environment."""
    print(f"== {title}: paper vs simcoll (simulated) ==" + (f"; baseline {nccl}" if nccl else ""))
    for c in comparisons:
        print(f"  {c.what}: paper {c.paper} | ours {c.ours}   [{c.source}]")
    if not nccl_available():
        print(f"  note: {NCCL_MISSING}")


#: A claim holds when ours is within this fraction of the paper's number (or inside its stated range).
WITHIN = 0.2


def verdict(claim: dict, ours: float | None, paper_value: float) -> str:
    """The verdict on one claim: ``within 20%`` (of the paper's headline
    number, or inside the range it states), ``as fast or faster`` (a
    synthesis time at most 1.2x the paper's), ``wrong direction`` (a gain
    where the paper reports a loss, or the other way), ``above`` / ``below``
    (same direction, more than 20 % off), ``slower``, ``not computed``."""
    if ours is None or ours != ours:
        return "not computed"
    metric = claim["metric"]
    if metric == "time_s":
        return "as fast or faster" if ours <= (1 + WITHIN) * paper_value else "slower"
    low, high = claim.get("range") or (paper_value, paper_value)
    if metric == "speedup" and (paper_value > 1) != (ours > 1) and abs(ours - 1) > 0.01:
        return "wrong direction"
    if abs(ours / paper_value - 1) <= WITHIN or low <= ours <= high:
        return f"within {WITHIN:.0%}"
    return "above" if ours > paper_value else "below"


def report(result: Mapping[str, Any]) -> str:
    """A study run's comparisons as Markdown, every figure taken from the run
    (the notebooks show this instead of typed prose): what is compared, the
    paper's number, ours, and for a headline claim of ``paper_claims.yaml``
    the verdict."""
    claims = paper_claims()
    lines = ["| compared | paper | simcoll | verdict | source |", "|---|---|---|---|---|"]
    for c in result["comparisons"]:
        judged = ""
        if c.claim:
            claim = claims[c.claim]
            judged = verdict(claim, c.value, c.paper_value if c.paper_value is not None else float(claim["value"]))
        cells = [c.what, c.paper, c.ours, judged, c.source]
        lines.append("| " + " | ".join(str(x).replace("|", "/") for x in cells) + " |")
    return "\n".join(lines)


def fraction_of_bound(df: pd.DataFrame) -> pd.Series:
    """algbw over the max-flow bound for each successful row."""
    return df.algbw_GBps / df.algbw_bound_GBps


def generate(name: str, machine, collective: str, **options: Any):
    """:func:`simcoll.generate` on a :class:`~simcoll.machines.Machine`."""
    from simcoll import generate as _generate

    return _generate(name, machine, collective, **options)

"""The five papers' headline claims beside what simcoll computes: runs every
paper study (SCCL, GC3, TACCL, HiCCL, NV-Group) and prints, for each claim of
``paper_claims.yaml`` (the paper's number, citing its figure or table), our
number, the ratio and a verdict.

Writes ``<out>/claims.csv`` (and ``claims.parquet`` where pyarrow is
installed); with ``--readme FILE`` also rewrites the claims table in FILE
between its ``<!-- claims:start -->`` and ``<!-- claims:end -->`` lines.

    python experiments/claims.py [--fast] [--out out/] [--serial | --workers N] [--readme README.md]

Verdicts: ``within 20%`` (our number within 20 % of the paper's headline
number, or inside the range the paper states), ``as fast or faster`` (a
synthesis time no more than 1.2x the paper's), ``wrong direction`` (the paper
reports a gain and we a loss, or the other way), ``above`` / ``below`` (the
same direction, more than 20 % off), ``not computed`` (the run does not
produce that number). Every claim that does not hold gets its cause where one
is known (``claim_causes.yaml``). Each study's baseline is the NCCL release and
environment the paper ran (its scripts print which). A study that fails leaves
the others' rows, and the command then exits 1 without rewriting the README.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import os
import sys
import time
from pathlib import Path

import pandas as pd
from _common import WITHIN, claim_text, paper_claims, verdict

from simcoll.files import write_atomic

#: The study scripts, in the order of the table.
STUDIES = ("sccl_dgx1", "gc3_fig7", "taccl_figs", "hiccl_figs", "nvgroup_figs", "nvgroup_training")
#: Studies that raised in this run, with the error (their claims are then not computed).
FAILED: dict[str, str] = {}
START, END = "<!-- claims:start -->", "<!-- claims:end -->"
CAUSES_FILE = Path(__file__).with_name("claim_causes.yaml")
HOLDS = ("within 20%", "as fast or faster")


def causes() -> dict[str, str]:
    """Why each claim that misses does (``claim_causes.yaml``), by claim id."""
    import yaml

    return dict(yaml.safe_load(CAUSES_FILE.read_text())["causes"])


def run_studies(fast: bool, out: Path, serial: bool, workers: int | None) -> dict[str, list]:
    """Every study's comparisons by script name (their printed output kept aside)."""
    argv = ["--out", str(out), *(["--fast"] if fast else []), *(["--serial"] if serial else [])]
    argv += ["--workers", str(workers)] if workers else []
    results = {}
    FAILED.clear()
    for name in STUDIES:
        module = importlib.import_module(name)
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                results[name] = module.main(argv)["comparisons"]
        except Exception as exc:  # noqa: BLE001 - one study's failure leaves the others' rows; main exits 1
            FAILED[name] = f"{type(exc).__name__}: {exc}"
            print(f"{name} failed: {FAILED[name]}", file=sys.stderr, flush=True)
            continue
        print(f"ran {name}", file=sys.stderr, flush=True)
    return results


def claims_table(comparisons: dict[str, list]) -> pd.DataFrame:
    """One row per claim of ``paper_claims.yaml``: the paper's number, ours, the ratio and the verdict."""
    ours = {c.claim: (script, c) for script, items in comparisons.items() for c in items if c.claim}
    why = causes()
    rows = []
    for claim in paper_claims().values():
        script, c = ours.get(claim["id"], (None, None))
        paper_value = float(c.paper_value if c is not None and c.paper_value is not None else claim["value"])
        value = None if c is None else c.value
        rows.append(
            {
                "claim": claim["id"],
                "paper": claim["paper"],
                "where": claim["where"],
                "what": c.what if c is not None else claim["what"],
                "paper_value": paper_value,
                "paper_text": claim_text(claim) if c is None or c.paper_value is None else f"{paper_value:g} s",
                "ours_value": value,
                "ours_text": "-" if value is None else claim_text(claim, value),
                "ratio": None if value is None else value / paper_value,
                "verdict": verdict(claim, value, paper_value),
                "script": script or "",
            }
        )
        rows[-1]["cause"] = "" if rows[-1]["verdict"] in HOLDS else why.get(claim["id"], "not identified")
    return pd.DataFrame(rows)


def summary(table: pd.DataFrame) -> str:
    counts = table.verdict.value_counts()
    held = counts.get(f"within {WITHIN:.0%}", 0) + counts.get("as fast or faster", 0)
    parts = ", ".join(f"{n} {v}" for v, n in counts.items())
    return f"{held} of {len(table)} claims hold within {WITHIN:.0%} ({parts})"


def markdown(table: pd.DataFrame, fast: bool, elapsed_s: float | None = None) -> str:
    """The table as Markdown, with how it was made (and in how long, ``elapsed_s``)."""
    mode = "`--fast` (reduced grids)" if fast else "the full grids"
    took = "" if elapsed_s is None else f", {elapsed_s / 60:.1f} min on {os.cpu_count()} CPUs"
    lines = [
        f"Generated by `python experiments/claims.py{' --fast' if fast else ''} --readme README.md` ({mode}{took}). "
        + summary(table)
        + ".",
        "",
        "| claim | where | paper | simcoll | ratio | verdict | why it misses |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in table.itertuples():
        ratio = "" if r.ratio is None or r.ratio != r.ratio else f"{r.ratio:.2f}"
        cells = [r.claim, r.where, r.paper_text, r.ours_text, ratio, r.verdict, r.cause]
        lines.append("| " + " | ".join(str(c).replace("|", "/") for c in cells) + " |")
    return "\n".join(lines)


def write_readme(path: Path, text: str) -> None:
    """Replace the block between :data:`START` and :data:`END` in ``path``."""
    content = path.read_text()
    if START not in content or END not in content:
        raise SystemExit(f"{path}: no {START} ... {END} block to fill")
    head, _, rest = content.partition(START)
    _, _, tail = rest.partition(END)
    write_atomic(path, f"{head}{START}\n{text}\n{END}{tail}")


def main(argv: list[str] | None = None) -> pd.DataFrame:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("out"), help="output directory (default: out/)")
    parser.add_argument("--fast", action="store_true", help="the studies' reduced grids (tests)")
    parser.add_argument("--workers", type=int, help="Dask worker processes per study (default: the CPU count)")
    parser.add_argument("--serial", action="store_true", help="run in this process, without Dask")
    parser.add_argument("--readme", type=Path, help="rewrite the claims block of this Markdown file")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    table = claims_table(run_studies(args.fast, args.out, args.serial or args.fast, args.workers))
    write_atomic(args.out / "claims.csv", table.to_csv(index=False))
    if importlib.util.find_spec("pyarrow") is not None:
        buffer = io.BytesIO()
        table.to_parquet(buffer, index=False)
        write_atomic(args.out / "claims.parquet", buffer.getvalue())
    with pd.option_context("display.max_rows", None, "display.width", 200, "display.max_colwidth", 40):
        print(table[["claim", "paper_text", "ours_text", "ratio", "verdict"]].to_string(index=False))
    print(summary(table))
    if FAILED:  # the README keeps its table: it is only rewritten from a complete run
        raise SystemExit(f"{len(FAILED)} stud{'y' if len(FAILED) == 1 else 'ies'} failed: {', '.join(FAILED)}")
    if args.readme:
        write_readme(args.readme, markdown(table, args.fast, time.perf_counter() - started))
        print(f"rewrote the claims table in {args.readme}")
    return table


if __name__ == "__main__":
    main()

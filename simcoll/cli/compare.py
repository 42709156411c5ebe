"""``simcoll compare``: every applicable algorithm across buffer sizes
(:func:`simcoll.compare.compare`), as a table, CSV, JSON or a plot."""

from __future__ import annotations

import argparse
import json
import sys

from ..files import write_csv
from .options import (
    add_collective_option,
    add_command,
    add_model_option,
    add_time_limit_option,
    add_topology_option,
    positive_int,
    print_json,
)


def cmd_compare(args: argparse.Namespace) -> int:
    from ..compare import compare, left_out_line, plot_comparison
    from ..machines import load_machine
    from ..units import parse_size_range

    machine = load_machine(args.topology, args.model)
    sizes = parse_size_range(args.sizes)
    method = "analytic" if args.analytic else "simulate"
    df, skipped = compare(
        machine,
        args.collective,
        sizes,
        method=method,
        program=args.program,
        contention=not args.no_contention,
        algorithms=args.algorithms,
        jobs=args.jobs,
        time_limit_s=args.time_limit,
        progress=None if args.quiet else lambda line: print(line, file=sys.stderr, flush=True),
    )
    if args.csv:
        write_csv(df, args.csv)
    if args.plot:
        plot_comparison(df, args.plot)
    if args.json:
        print_json(
            {
                "topology": machine.name,
                "model": machine.model.name,
                "collective": args.collective,
                "method": method,
                "rows": json.loads(df.to_json(orient="records")),
                "not_applicable": skipped,
            }
        )
        return 0
    how = "analytic alpha-beta times" if args.analytic else "simulated times (Algorithm mode)"
    if args.program:
        how += "; rows marked (program) are the lowered Program in Program mode"
    print(f"{args.collective} on {machine.name} (model {machine.model.name}); {how}")
    names = [a if m != "program" else f"{a} (program)" for a, m in zip(df["algorithm"], df["method"], strict=True)]
    names = [f"{n} ({c})" if c else n for n, c in zip(names, df["choice"], strict=True)]
    width = max([len("algorithm"), *(len(n) for n in names)])
    print(f"{'size':>8} {'algorithm':<{width}} {'time (us)':>12} {'algbw GB/s':>11} {'busbw GB/s':>11} {'bound':>8}")
    for name, (_, row) in zip(names, df.iterrows(), strict=True):
        mark = " *" if row["best"] else ""
        print(
            f"{row['size']:>8} {name:<{width}} {row['time_us']:>12.2f} {row['algbw_GBps']:>11.2f}"
            f" {row['busbw_GBps']:>11.2f} {row['algbw_bound_GBps']:>8.1f}{mark}"
        )
    print("* best at that size; bound = algbw upper bound from max-flow cuts")
    for name, reason in skipped.items():
        print(left_out_line(name, reason))
    for path, what in ((args.csv, "CSV"), (args.plot, "plot")):
        if path:
            print(f"wrote {what} to {path}")
    return 0


def _arguments(p: argparse.ArgumentParser) -> None:
    add_topology_option(p, required=False, default="dgx1")
    add_collective_option(p, required=False, default="allreduce")
    add_model_option(p)
    from ..compare import DEFAULT_SIZES  # only when `compare` is parsed: it needs pandas anyway

    p.add_argument("--sizes", default=DEFAULT_SIZES, help="LOW:HIGH doubling, or a comma list (default %(default)s)")
    p.add_argument(
        "--algorithms",
        type=lambda text: [a.strip() for a in text.split(",") if a.strip()],
        help="only these rows, e.g. nccl,ring,nccl-ring (default: every applicable algorithm and nccl)",
    )
    p.add_argument(
        "--jobs",
        "-j",
        type=positive_int,
        default=1,
        help="worker processes that generate and time algorithms (default 1)",
    )
    add_time_limit_option(p, "wall-clock limit of each simulation in seconds; a row past it is left out (default 60)")
    p.add_argument("--csv", help="write the table as CSV")
    p.add_argument("--plot", help="write algbw vs size as an image")
    p.add_argument("--analytic", action="store_true", help="closed-form alpha-beta times instead of simulating")
    p.add_argument(
        "--program", action="store_true", help="also simulate each algorithm lowered to a Program (Program mode)"
    )
    p.add_argument(
        "--no-contention", action="store_true", help="simulate an ideal network (no sharing, no contention parameters)"
    )
    p.add_argument("--quiet", "-q", action="store_true", help="no progress lines on stderr")


def register(subparsers) -> None:
    """Add ``compare`` to ``subparsers``."""
    add_command(
        subparsers, "compare", cmd_compare, "every applicable algorithm across buffer sizes (the main job)", _arguments
    )

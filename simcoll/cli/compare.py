"""``simcoll compare``: every applicable algorithm across buffer sizes
(:func:`simcoll.compare.compare`), as a table, CSV, JSON or a plot."""

from __future__ import annotations

import argparse
import json
import sys

from ..files import check_distinct_outputs, write_csv
from .options import (
    add_collective_option,
    add_command,
    add_jobs_option,
    add_launch_option,
    add_model_option,
    add_nccl_options,
    add_time_limit_option,
    add_topology_option,
    launch_text,
    launched,
    nccl_setup,
    print_json,
)


def cmd_compare(args: argparse.Namespace) -> int:
    from ..collectives import canonical_name, make_collective
    from ..compare import compare, left_out_line
    from ..compare_plot import plot_comparison
    from ..errors import OptionError
    from ..machines import load_machine
    from ..units import parse_size_range

    check_distinct_outputs(
        {"--csv": args.csv, "--plot": args.plot}, error=OptionError
    )  # the plot would replace the CSV
    machine = launched(load_machine(args.topology, args.model), args)
    sizes = parse_size_range(args.sizes)
    baseline = nccl_setup(args)
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
        nccl=baseline,
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
                "launch": machine.model.launch,
                "collective": args.collective,
                "method": method,
                "nccl": baseline.describe(),
                "rows": json.loads(df.to_json(orient="records")),
                "not_applicable": skipped,
            }
        )
        return 0
    how = "analytic alpha-beta times" if args.analytic else "simulated times (Algorithm mode)"
    if args.program:
        how += "; columns marked (program) are the lowered Program in Program mode"
    print(
        f"{args.collective} on {machine.name} (model {machine.model.name}{launch_text(machine)}); {how}; "
        f"baseline {baseline.describe()}"
    )
    factor = make_collective(canonical_name(args.collective), machine.num_ranks).busbw_factor
    for line in pivot_lines(df, factor):
        print(line)
    for name, reason in skipped.items():
        print(left_out_line(name, reason))
    for path, what in ((args.csv, "CSV"), (args.plot, "plot")):
        if path:
            print(f"wrote {what} to {path}")
    return 0


#: The width (characters) past which ``simcoll compare``'s column headings are stacked over lines.
TABLE_WIDTH = 100


def pivot_lines(df, busbw_factor: float) -> list[str]:
    """``simcoll compare``'s table: one line per size, one column of busbw
    (GB/s) per algorithm (and per ``(program)`` method), the fastest at each
    size marked ``*``, NCCL's column and its choice last, then the busbw
    bound (the algbw bound of the cuts times ``busbw_factor``, the
    collective's nccl-tests factor), with a header line and a footer line."""
    from ..compare import NCCL_ROW
    from .bounds import size_label

    names = [a if m != "program" else f"{a} (program)" for a, m in zip(df.algorithm, df.method, strict=True)]
    df = df.assign(column=names)
    nccl = [c for c in dict.fromkeys(names) if c == NCCL_ROW or c.startswith(NCCL_ROW + " ")]
    columns = [c for c in dict.fromkeys(names) if c not in nccl] + nccl
    cells = {(r.size_bytes, r.column): f"{r.busbw_GBps:.2f}" + ("*" if r.best else " ") for r in df.itertuples()}
    choice = {r.size_bytes: r.choice for r in df[df.column == NCCL_ROW].itertuples()}
    table = [["size", *columns, *(["NCCL's choice"] if nccl else []), "busbw bound"]]
    for r in df.drop_duplicates("size_bytes").sort_values("size_bytes").itertuples():
        row = [size_label(r.size_bytes), *(cells.get((r.size_bytes, c), "- ") for c in columns)]
        row += [choice.get(r.size_bytes, "-")] if nccl else []
        table.append(
            [*row, "-" if r.algbw_bound_GBps != r.algbw_bound_GBps else f"{r.algbw_bound_GBps * busbw_factor:.2f}"]
        )
    flat = sum(max(len(row[i]) for row in table) + 2 for i in range(len(table[0])))
    heads = [[name] if flat <= TABLE_WIDTH else _stacked(name) for name in table[0]]  # stacked where too wide
    depth = max(map(len, heads))
    table[:1] = [[([""] * (depth - len(h)) + h)[k] for h in heads] for k in range(depth)]
    widths = [max(len(row[i]) for row in table) for i in range(len(heads))]
    left = len(columns) + 1 if nccl else -1  # NCCL's choice: text, aligned left
    lines = [
        "busbw (GB/s, nccl-tests' bus bandwidth: higher is faster) per size and algorithm"
        + (f"; {NCCL_ROW} = NCCL's own choice, the baseline" if nccl else "")
    ]
    for row in table:
        cells_ = (f"{c:<{w}}" if i == left else f"{c:>{w}}" for i, (c, w) in enumerate(zip(row, widths, strict=True)))
        lines.append("  ".join(cells_).rstrip())
    lines.append(
        f"* best at that size (highest busbw); busbw bound = the max-flow cut bound on algbw x {busbw_factor:g} "
        "(the busbw factor): no busbw exceeds it"
    )
    return lines


def _stacked(name: str, width: int = 9) -> list[str]:
    """A column heading over lines of at most ``width`` characters where it
    breaks (after a hyphen, before a space): "bidirectional-ring" ->
    ["bidirectional-", "ring"]."""
    pieces = [p for p in name.replace("-", "-\n").replace(" ", "\n ").split("\n") if p]
    lines = [pieces[0]]
    for piece in pieces[1:]:
        if len(lines[-1]) + len(piece) <= width:
            lines[-1] += piece
        else:
            lines.append(piece.strip())
    return lines


def _arguments(p: argparse.ArgumentParser) -> None:
    add_topology_option(p, required=False, default="dgx1")
    add_collective_option(p, required=False, default="allreduce")
    add_model_option(p)
    add_launch_option(p)
    add_nccl_options(p)
    from ..compare import DEFAULT_SIZES  # only when `compare` is parsed: it needs pandas anyway

    p.add_argument("--sizes", default=DEFAULT_SIZES, help="LOW:HIGH doubling, or a comma list (default %(default)s)")
    p.add_argument(
        "--algorithms",
        type=lambda text: [a.strip() for a in text.split(",") if a.strip()],
        help="only these rows, e.g. nccl,ring,nccl-ring (default: every applicable algorithm and nccl)",
    )
    add_jobs_option(p, "worker processes that generate and time algorithms (default 1)")
    add_time_limit_option(
        p,
        "wall-clock limit of building each schedule and of each simulation, in seconds; a row past it is left "
        "out (default 60)",
    )
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

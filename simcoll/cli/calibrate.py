"""``simcoll calibrate`` and ``simcoll validate``: fit a cost model to
nccl-tests logs, and compare a model's NCCL baseline with a log
(:mod:`simcoll.calibration.calibrate`)."""

from __future__ import annotations

import argparse
import json

from ..errors import SimcollError
from ..files import write_csv
from .options import add_command, add_model_option, add_topology_option, print_json


def cmd_calibrate(args: argparse.Namespace) -> int:
    from ..calibration.calibrate import calibrate
    from ..cost_model import save_model
    from ..machines import load_machine

    _refuse_repeated_logs(args.nccl_tests)
    machine = load_machine(args.topology, args.base_model)
    params = [p.strip() for p in args.params.split(",")] if args.params else None
    model, report = calibrate(
        args.nccl_tests, machine, parameters=params, name=args.name, size_range=args.size_range, force=args.force
    )
    save_model(model, args.output)
    if args.json:
        print_json(
            {
                "model": model.name,
                "output": args.output,
                "fitted": {k: {"before": a, "after": b} for k, (a, b) in report.fitted.items()},
                "unchanged": report.unchanged,
                "at_bound": report.at_bound,
                "fit": report.fit,
                "logs": report.logs,
            }
        )
        return 0
    print("\n".join(report.lines()))
    print(f"wrote model {model.name} to {args.output}")
    return 0


def _refuse_repeated_logs(logs: list[str]) -> None:
    """A log given twice (``a.log ./a.log`` included) would count its rows
    twice in the fit, weighting that run over the others: refused."""
    from pathlib import Path

    from ..errors import OptionError

    seen: dict[Path, str] = {}
    for log in logs:
        key = Path(log).resolve()
        if key in seen:
            same = "" if seen[key] == log else f" (as {seen[key]})"
            raise OptionError(f"--nccl-tests: {log} is given twice{same}; each log counts once")
        seen[key] = log


def cmd_validate(args: argparse.Namespace) -> int:
    from ..calibration.calibrate import error_summary, plot_validation, validate
    from ..errors import OptionError
    from ..files import check_distinct_outputs
    from ..machines import load_machine
    from ..units import format_size

    check_distinct_outputs({"--csv": args.csv, "--plot": args.plot}, error=OptionError)
    machine = load_machine(args.topology, args.model)
    frame = validate(args.nccl_tests, machine, size_range=args.size_range, force=args.force)
    errors = error_summary(frame)
    if args.csv:
        write_csv(frame, args.csv)
    if args.plot:
        plot_validation(frame, args.plot, title=f"{args.nccl_tests} on {machine.name} (model {machine.model.name})")
    launch = frame.launch.iloc[0] if len(frame) else None
    if args.json:
        rows = json.loads(frame.to_json(orient="records"))
        print_json({"rows": rows, "errors": errors, "model": machine.model.name, "launch": launch})
        return 0
    how = f", calls launched as {launch}" if launch else ""
    print(f"{args.nccl_tests} on {machine.name} (model {machine.model.name}{how}): busbw, GB/s")
    print(f"{'size':>8} {'nccl choice':<18} {'measured':>10} {'simulated':>10} {'ratio':>7}")
    for row in frame.itertuples():
        print(
            f"{format_size(row.size_bytes):>8} {row.choice:<18} {row.measured_busbw_GBps:>10.2f}"
            f" {row.simulated_busbw_GBps:>10.2f} {row.ratio:>7.3f}"
        )
    for key, label in (("large", ">= 64 MB"), ("small", "<= 64 KB"), ("all", "all sizes")):
        value = errors[key]
        text = "no sizes" if value != value else f"{100 * value:.1f} %"
        print(f"geometric-mean error, {label}: {text}")
    for path, what in ((args.csv, "CSV"), (args.plot, "plot")):
        if path:
            print(f"wrote {what} to {path}")
    return 0


def _size_bounds(text: str) -> tuple[int | None, int | None]:
    """``LO:HI``, ``LO:`` or ``:HI`` (sizes such as 512MB) as byte bounds."""
    from ..units import parse_size

    lo, sep, hi = text.partition(":")
    if not sep or not (lo or hi):
        raise argparse.ArgumentTypeError(f"{text!r}: expected LO:HI, LO: or :HI (e.g. 512MB:8GB)")
    try:
        bounds = (parse_size(lo) if lo else None, parse_size(hi) if hi else None)
    except SimcollError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if bounds[0] is not None and bounds[1] is not None and bounds[0] > bounds[1]:
        raise argparse.ArgumentTypeError(f"{text!r}: the lower size is above the upper one")
    return bounds


def _add_force(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--force",
        action="store_true",
        help="use logs measured on other GPUs than the machine's (refused otherwise), with a warning",
    )


def _add_size_range(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument(
        "--size-range",
        type=_size_bounds,
        metavar="LO:HI",
        help=f"{what} only the rows of sizes in this range, ends included (LO: or :HI leave one end open), "
        "e.g. to leave out rows the log's author marks unusable",
    )


def _calibrate_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--nccl-tests", nargs="+", required=True, metavar="LOG", help="nccl-tests output file(s)")
    add_topology_option(p, help="the machine the logs were measured on")
    p.add_argument("--base-model", help="starting cost model (default: the topology's)")
    p.add_argument("-o", "--output", required=True, help="where to write the calibrated model YAML")
    p.add_argument("--name", help="the calibrated model's name (default: <base>-calibrated)")
    p.add_argument("--params", help="comma list of dotted model fields to fit (default: the physical ones)")
    _add_size_range(p, "fit")
    _add_force(p)


def _validate_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--nccl-tests", required=True, metavar="LOG", help="an nccl-tests output file")
    add_topology_option(p, help="the machine the log was measured on")
    add_model_option(p, help="cost model (default: the topology's)")
    p.add_argument("--csv", help="write the table as CSV")
    p.add_argument("--plot", help="write measured and simulated busbw as an image")
    _add_size_range(p, "compare")
    _add_force(p)


def register(subparsers) -> None:
    """Add ``calibrate`` and ``validate`` to ``subparsers``."""
    add_command(
        subparsers,
        "calibrate",
        cmd_calibrate,
        "fit a cost model's physical parameters to nccl-tests logs",
        _calibrate_arguments,
    )
    add_command(
        subparsers,
        "validate",
        cmd_validate,
        "measured (nccl-tests) against simulated NCCL busbw per size",
        _validate_arguments,
    )

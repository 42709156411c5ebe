"""``simcoll sweep``: run a study on Dask, or report a results directory.

    simcoll sweep STUDY.yaml -o results/NAME [--scheduler ADDR] [--workers N] [--resume | --retry-failed] [--serial]
    simcoll sweep status results/NAME [--json]

The first runs the study (:func:`simcoll.sweeps.run_study`) with a
progress bar on stderr and prints a summary; ``--resume`` runs only the points
without a row, ``--retry-failed`` also those whose row failed; the second prints how many of
the study's points have a row (``done``), how many there are (``total``) and
how many failed (``failed``); with ``--json`` as ``{"done": N, "total": M,
"failed": K}``. A bad study file exits 2 with one line naming the field.
``python -m simcoll.sweeps`` takes the same arguments.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from ..arguments import positive_int
from ..errors import OptionError, SimcollError


def cmd_sweep(args: argparse.Namespace) -> int:
    from .runner import run_study
    from .store import check_results_directory, sweep_status

    if args.study == "status":
        if not args.directory:
            raise OptionError("sweep status: give the results directory (simcoll sweep status DIR)")
        check_results_directory(args.directory)
        status = sweep_status(args.directory)
        if args.json:
            print(json.dumps(status))
        else:
            hint = " (--retry-failed runs them again)" if status["failed"] else ""
            print(
                f"{args.directory}: {status['done']} of {status['total']} points done, {status['failed']} failed{hint}"
            )
        return 0
    if args.directory:
        raise OptionError(f"unexpected argument {args.directory!r} (usage: simcoll sweep STUDY.yaml -o DIR)")
    if not args.output:
        raise OptionError("sweep: -o/--output DIR is required (the results directory)")
    check_results_directory(args.output)  # before the study is expanded and Dask started
    summary = run_study(
        args.study,
        args.output,
        workers=args.workers,
        scheduler=args.scheduler,
        resume=args.resume,
        retry_failed=args.retry_failed,
        serial=args.serial,
        progress=not args.no_progress,
    )
    result = {
        "done": summary.done,
        "total": summary.total,
        "failed": summary.failed,
        "ran": summary.ran,
        "wall_s": round(summary.wall_s, 3),
        "output": str(args.output),
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"{args.output}: ran {summary.ran} points in {summary.wall_s:.1f} s "
            f"({summary.points_per_s:.0f} points/s); {summary.done} of {summary.total} done, {summary.failed} failed"
            + (" (--retry-failed runs them again)" if summary.failed else "")
        )
    return 0


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``sweep`` command's arguments."""
    p.add_argument(
        "study", metavar="STUDY.yaml|status", help="a study file, or 'status' followed by a results directory"
    )
    p.add_argument("directory", nargs="?", metavar="DIR", help="with 'status': the results directory")
    p.add_argument("-o", "--output", metavar="DIR", help="results directory (Parquet part files)")
    p.add_argument("--scheduler", metavar="ADDR", help="address of a running Dask scheduler (default: a LocalCluster)")
    p.add_argument(
        "--workers", type=positive_int, metavar="N", help="LocalCluster worker processes (default: CPU count)"
    )
    p.add_argument("--resume", action="store_true", help="run only the points missing from DIR")
    p.add_argument(
        "--retry-failed",
        action="store_true",
        help="resume, and also run again the points whose row in DIR failed (status error)",
    )
    p.add_argument("--serial", action="store_true", help="run in this process, without Dask (debugging)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_sweep)


HELP = "run a study (a YAML file) on Dask into a Parquet results directory; 'sweep status DIR' reports it"


def register(subparsers, add_command=None) -> argparse.ArgumentParser:
    """Add ``sweep`` to ``subparsers`` (``add_command`` is accepted for the
    CLI's common signature; ``sweep`` adds its own ``--json``)."""
    p = subparsers.add_parser("sweep", help=HELP, description=HELP)
    add_arguments(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m simcoll.sweeps``: the ``sweep`` command on its own."""
    parser = argparse.ArgumentParser(prog="python -m simcoll.sweeps", description=HELP)
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except SimcollError as exc:
        print(f"simcoll: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"simcoll: error: {exc}", file=sys.stderr)
        return 2

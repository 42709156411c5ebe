"""``simcoll verify``: check a schedule file (simcoll JSON, MSCCL XML or
SCCL JSON) against its collective; exit 1 when it is incorrect, 2 when the
input is bad (unreadable file, a machine with another rank count)."""

from __future__ import annotations

import argparse

from .options import add_command, add_time_limit_option, add_topology_option, print_json


def cmd_verify(args: argparse.Namespace) -> int:
    from ..algorithm import Algorithm
    from ..errors import OptionError
    from ..interop.schedules import load_schedules
    from ..machines import load_machine
    from ..verify import check

    schedules = load_schedules(args.file)
    machine = load_machine(args.topology) if args.topology else None
    results = []
    for schedule in schedules:
        if machine is not None and schedule.collective.num_ranks != machine.topology.num_ranks:
            # the wrong machine is bad input (exit 2, as simulate says), not an incorrect schedule (exit 1)
            raise OptionError(
                f"{args.file}: {schedule.name} is for {schedule.collective.num_ranks} ranks "
                f"but {machine.name} has {machine.topology.num_ranks}"
            )
        problems = check(schedule, machine, time_limit_s=args.time_limit)
        kind = "algorithm" if isinstance(schedule, Algorithm) else "program"
        results.append(
            {
                "file": args.file,
                "kind": kind,
                "name": schedule.name,
                "collective": schedule.collective.name,
                "correct": not problems,
                "problems": problems,
            }
        )
        if not args.json:
            if problems:
                print(f"incorrect: {schedule.name} does not implement {schedule.collective.describe()}")
                for p in problems:
                    print(f"  - {p}")
            else:
                print(f"correct: {schedule.name} implements {schedule.collective.describe()}")
    correct = all(r["correct"] for r in results)
    if args.json:
        # One schedule: its result; several (an MSCCL XML file with several <algo>): all of them.
        print_json(results[0] if len(results) == 1 else {"file": args.file, "correct": correct, "schedules": results})
    return 0 if correct else 1


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file")
    add_topology_option(p, required=False, help="also check routes and bandwidth against this machine")
    add_time_limit_option(
        p, "wall-clock limit of each schedule's check in seconds (default: none); past it, exit 2", default=None
    )


def register(subparsers) -> None:
    """Add ``verify`` to ``subparsers``."""
    add_command(
        subparsers,
        "verify",
        cmd_verify,
        "check an Algorithm/Program JSON, MSCCL XML or SCCL JSON against its collective",
        _arguments,
    )

"""``simcoll simulate``: simulate an Algorithm or Program file on a machine, or
print its analytic α-β time (``--analytic``). Instead of a file, a generator's
name (``simcoll algo list``) with ``--collective`` runs it and simulates what
it builds in one process, its schedule checked once (by the simulation).

    simcoll simulate FILE --topology T [--model M] [--launch MODE] --size SIZE
    simcoll simulate GENERATOR -c COLLECTIVE [--chunks C] [--option K=V] --topology T --size SIZE
                     [--mode algorithm|program] [--analytic] [--no-contention]
                     [--time-limit S] [--json] [--trace OUT.json] [--engine fast|reference]

JSON output keys: ``time_s``, ``algbw_GBps``, ``busbw_GBps``, ``transfers``
(plus ``method``, ``mode``, ``topology``, ``model``, ``size_bytes``...).
"""

from __future__ import annotations

import argparse

from .options import (
    add_chunks_option,
    add_collective_option,
    add_command,
    add_launch_option,
    add_model_option,
    add_root_option,
    add_size_option,
    add_time_limit_option,
    add_topology_option,
    launch_text,
    launched,
    print_json,
)


def cmd_simulate(args: argparse.Namespace) -> int:
    from ..algorithm import Algorithm
    from ..analytic import algbw_GBps, busbw_GBps, critical_path_time_s
    from ..errors import OptionError
    from ..interop.schedules import load_schedule
    from ..machines import load_machine
    from ..simulator import simulate
    from ..units import format_size, parse_size

    machine = launched(load_machine(args.topology, args.model), args)
    schedule = _generated(args, machine) if _is_generator(args.file) else load_schedule(args.file)
    size = parse_size(args.size)
    if args.analytic:
        if not isinstance(schedule, Algorithm):
            raise OptionError(f"{args.file}: --analytic needs an Algorithm (a Program has no closed-form α-β time)")
        if args.trace:
            raise OptionError("--trace needs a simulation; drop --analytic")
        t = critical_path_time_s(schedule, machine, size)
        summary = {
            "name": schedule.name,
            "collective": schedule.collective.name,
            "topology": machine.name,
            "model": machine.model.name,
            "launch": machine.model.launch,
            "size_bytes": size,
            "method": "analytic",
            "time_s": t,
            "algbw_GBps": algbw_GBps(size, t),
            "busbw_GBps": busbw_GBps(schedule.collective, size, t),
            "transfers": len(schedule.transfers),
        }
    else:
        result = simulate(
            schedule,
            machine,
            size,
            mode=args.mode,
            contention=not args.no_contention,
            time_limit_s=args.time_limit,
            verify=not args.no_verify,
            # the summary needs neither: recording them only costs time (and turns off node symmetry)
            record_timeline=bool(args.trace),
            record_utilisation=bool(args.trace),
            engine=args.engine,
        )
        summary = {
            **result.to_dict(),
            "method": "simulate",
            "path": result.stats.get("path"),
            "launch": machine.model.launch,
        }
        if args.trace:
            result.save_chrome_trace(args.trace)
            summary["trace"] = str(args.trace)
    if args.json:
        print_json(summary)
        return 0
    how = "analytic alpha-beta" if args.analytic else f"simulated, {summary['mode']} mode: {summary['path']}"
    print(
        f"{summary['name']} ({summary['collective']}) on {machine.name}, model {machine.model.name}"
        f"{launch_text(machine)}, "
        f"{format_size(size)} ({how})"
    )
    print(f"  time   {summary['time_s'] * 1e6:.3f} us")
    print(f"  algbw  {summary['algbw_GBps']:.3f} GB/s")
    print(f"  busbw  {summary['busbw_GBps']:.3f} GB/s")
    print(f"  transfers {summary['transfers']}")
    if summary.get("trace"):
        print(f"wrote Chrome trace to {summary['trace']} (open in https://ui.perfetto.dev)")
    return 0


def _is_generator(name: str) -> bool:
    """Whether ``simulate``'s first argument names a generator (an existing file of that name wins)."""
    from pathlib import Path

    from ..algorithms import REGISTRY

    return name in REGISTRY and not Path(name).exists()


def _generated(args: argparse.Namespace, machine):
    """The Algorithm generator ``args.file`` builds on ``machine`` (unchecked:
    the simulation checks it, unless ``--no-verify``)."""
    from ..algorithms import REGISTRY, generate, parse_options
    from ..errors import OptionError
    from .algo import parse_key_values

    if not args.collective:
        raise OptionError(f"simulate {args.file}: a generator needs --collective (e.g. -c allreduce)")
    options = parse_options(REGISTRY[args.file], parse_key_values(args.option))
    return generate(args.file, machine, args.collective, args.chunks, args.root, **options)


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "file",
        help="Algorithm or Program JSON (or MSCCL XML where the importer supports it), or a generator's name "
        "(simcoll algo list) with --collective",
    )
    add_collective_option(p, required=False, help="with a generator: the collective it builds")
    add_chunks_option(p, "with a generator: chunk factor C (default: the generator's)")
    add_root_option(p, "with a generator: root rank of broadcast, reduce, gather, scatter (default 0)")
    p.add_argument("--option", action="append", metavar="K=V", help="with a generator: its option, repeatable")
    add_topology_option(p)
    add_model_option(p, help="cost model (default: the topology's)")
    add_launch_option(p)
    add_size_option(p, short=True, required=True, help="buffer size, e.g. 1MB, 256KiB (nccl-tests convention)")
    p.add_argument("--mode", choices=("algorithm", "program"), help="default: the file's kind")
    p.add_argument("--analytic", action="store_true", help="print the closed-form alpha-beta time instead")
    p.add_argument(
        "--no-contention", action="store_true", help="ideal network: no sharing and no contention parameters"
    )
    add_time_limit_option(p, "wall-clock limit in seconds, the verification included (default 60)")
    p.add_argument("--trace", help="write a Chrome trace JSON (Perfetto) here")
    p.add_argument("--no-verify", action="store_true", help="time the schedule even if it is not a correct collective")
    p.add_argument(
        "--engine",
        choices=("fast", "reference"),
        default="fast",
        help="fast: the quickest path that applies (default); reference: the rules stated plainly, slow "
        "(docs/simulator.md)",
    )


def register(subparsers) -> None:
    """Add ``simulate`` to ``subparsers``."""
    add_command(subparsers, "simulate", cmd_simulate, "simulate an Algorithm or Program on a machine", _arguments)

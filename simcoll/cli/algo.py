"""``simcoll algo``: the algorithm generators of :mod:`simcoll.algorithms`
(list them; generate, verify and write one).

``algo generate`` prints a one-line summary of the verified Algorithm (name,
collective, ranks, C S R, transfers) and writes the Algorithm where ``-o``
says: a file, or ``-o -`` for its JSON on stdout (and nothing else). With
``--json`` the summary is a JSON object (``output`` the file written, or
null); with ``-o -`` stdout is the Algorithm JSON, ``--json`` or not.
"""

from __future__ import annotations

import argparse

from .options import (
    add_chunks_option,
    add_collective_option,
    add_command,
    add_group,
    add_output_option,
    add_root_option,
    add_topology_option,
    print_json,
)

#: ``algo generate -o -``: the Algorithm JSON on stdout.
STDOUT = "-"


def cmd_list(args: argparse.Namespace) -> int:
    from ..algorithms import REGISTRY

    rows = [
        {
            "name": g.name,
            "collectives": list(g.collectives),
            "summary": g.summary,
            "options": {k: o.help for k, o in g.options.items()},
        }
        for g in REGISTRY.values()
    ]
    if args.json:
        print_json(rows)
        return 0
    width = max(len(row["name"]) for row in rows)
    for row in rows:
        print(f"{row['name']:<{width}}  {', '.join(row['collectives'])}")
        print(f"{'':<{width}}  {row['summary']}")
        for opt, text in row["options"].items():
            print(f"{'':<{width}}  --option {opt}=...  {text}")
    return 0


def parse_key_values(items: list[str] | None, flag: str = "--option") -> dict[str, str]:
    """``["k=v", ...]`` as a dict; an :class:`~simcoll.errors.OptionError` names an item without ``=``."""
    from ..errors import OptionError

    options = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise OptionError(f"{flag} {item!r}: expected key=value")
        options[key] = value
    return options


def cmd_generate(args: argparse.Namespace) -> int:
    from ..algorithms import REGISTRY, generate, parse_options
    from ..errors import OptionError, VerificationError
    from ..machines import load_machine
    from ..verify import check
    from ..verify.record import with_check_record

    if args.name not in REGISTRY:
        raise OptionError(f"unknown algorithm {args.name!r}; known: {', '.join(REGISTRY)}")
    options = parse_key_values(args.option)
    machine = load_machine(args.topology)
    algo = generate(
        args.name,
        machine,
        args.collective,
        args.chunks,
        args.root,
        **parse_options(REGISTRY[args.name], options),
    )
    problems = check(algo, machine)
    if problems:  # a generator bug, never the user's fault
        raise VerificationError([f"generated {args.name} failed verification: {p}" for p in problems])
    algo = with_check_record(algo, machine)  # simulate need not check it again (simcoll.verify.record)
    if args.output == STDOUT:  # the Algorithm JSON alone on stdout (with --json too: one JSON document)
        print(algo.to_json())
        return 0
    if args.output:
        algo.save(args.output)
    summary = {
        "name": algo.name,
        "collective": algo.collective.name,
        "topology": machine.name,
        "ranks": algo.num_ranks,
        "chunks": algo.chunks,
        "steps": algo.steps,
        "rounds": algo.rounds,
        "transfers": len(algo.transfers),
        "output": args.output,
    }
    if args.json:
        print_json(summary)
        return 0
    line = (
        f"{algo.name} {algo.collective.name} on {machine.name}: {algo.num_ranks} ranks, "
        f"C={algo.chunks} S={algo.steps} R={algo.rounds}, {len(algo.transfers):,} transfers"
    )
    print(f"wrote {args.output}: {line}" if args.output else f"{line} (-o FILE writes it, -o - prints its JSON)")
    return 0


def _generate_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("name")
    add_topology_option(p)
    add_collective_option(p)
    add_chunks_option(p, "chunk factor C (default: the generator's, often 1 or P)")
    add_root_option(p, "root rank of broadcast, reduce, gather, scatter (default 0)")
    p.add_argument("--option", action="append", metavar="K=V", help="generator option, repeatable")
    add_output_option(p, help=f"write the Algorithm here (JSON; .npz for large ones); {STDOUT!r}: its JSON on stdout")


def register(subparsers) -> None:
    """Add the ``algo`` group to ``subparsers``."""
    algo = add_group(subparsers, "algo", "algorithm generators: list, generate", dest="algo")
    add_command(algo, "list", cmd_list, "list algorithm generators and the collectives they support")
    add_command(algo, "generate", cmd_generate, "generate, verify and write an algorithm", _generate_arguments)

"""``simcoll export`` and ``simcoll import``: MSCCL XML and SCCL JSON on the
command line.

- ``simcoll export FILE --format msccl-xml [--dialect classic|newer] -o OUT``:
  FILE is a Program JSON or MSCCL XML, or an Algorithm (JSON or SCCL JSON),
  which is first lowered with :func:`simcoll.compiler.lower_algorithm`. OUT
  is ``*.xml`` (or any name whose extension is not another format's:
  ``-o x.json`` is refused, as the file would be XML named as JSON).
- ``simcoll import FILE -o OUT.json``: MSCCL XML → Program JSON, SCCL JSON →
  Algorithm JSON (``--index`` picks one ``<algo>`` of a file holding several).
"""

from __future__ import annotations

import argparse
import dataclasses

from ..files import write_atomic
from .options import add_command, add_index_option, add_output_option, print_json

FORMATS = ("msccl-xml",)


def _check_extension(output: str, format: str) -> None:
    """Refuse an output whose extension names another schedule format than
    ``format`` (``-o x.json`` for MSCCL XML): the file would not be read back
    as what its name says. Other extensions (none, ``.txt``) are the user's choice."""
    from pathlib import Path

    from ..errors import OptionError
    from ..interop.schedules import SAVE_FORMATS

    suffix = Path(output).suffix.lower()
    named = SAVE_FORMATS.get(suffix)
    if named is not None and named != format:
        wanted = ", ".join(ext for ext, name in SAVE_FORMATS.items() if name == format)
        raise OptionError(
            f"-o {output}: the extension {suffix} is for {named}, but --format is {format} "
            f"(name the output *{wanted}; 'simcoll import' writes {named})"
        )


def _pick(schedules: list, index: int | None, path: str):
    from ..errors import AlgorithmError

    if index is None:
        if len(schedules) > 1:
            raise AlgorithmError(
                f"{path}: holds {len(schedules)} programs (<algo> elements); choose one with --index 0..{len(schedules) - 1}"
            )
        return schedules[0]
    if not 0 <= index < len(schedules):
        raise AlgorithmError(f"{path}: --index {index} out of range 0..{len(schedules) - 1}")
    return schedules[index]


def cmd_export(args: argparse.Namespace) -> int:
    from ..algorithm import Algorithm
    from ..interop.msccl_xml import export_msccl_xml
    from ..interop.schedules import load_schedules

    _check_extension(args.output, args.format)
    schedule = _pick(load_schedules(args.file), args.index, args.file)
    lowered = False
    if isinstance(schedule, Algorithm):
        from ..compiler import lower_algorithm

        schedule = lower_algorithm(schedule, protocol=args.protocol or "Simple")
        lowered = True
    elif args.protocol and args.protocol != schedule.protocol:
        schedule = dataclasses.replace(schedule, protocol=args.protocol)
    text = export_msccl_xml(schedule, dialect=args.dialect)
    write_atomic(args.output, text)
    summary = {
        "file": args.file,
        "output": args.output,
        "format": args.format,
        "dialect": args.dialect,
        "name": schedule.name,
        "collective": schedule.collective.name,
        "lowered": lowered,
        "ranks": schedule.num_ranks,
        "thread_blocks": sum(len(r.executors) for r in schedule.ranks),
    }
    if args.json:
        print_json(summary)
    else:
        how = " (lowered from an Algorithm)" if lowered else ""
        print(f"wrote {args.output}: {schedule.name}{how}, {args.format} {args.dialect} dialect")
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    from ..algorithm import Algorithm
    from ..interop.schedules import load_schedules

    schedule = _pick(load_schedules(args.file), args.index, args.file)
    schedule.save(args.output)
    kind = "algorithm" if isinstance(schedule, Algorithm) else "program"
    if args.json:
        print_json(
            {
                "file": args.file,
                "output": args.output,
                "kind": kind,
                "name": schedule.name,
                "collective": schedule.collective.name,
            }
        )
    else:
        print(f"wrote {args.output}: {kind} {schedule.name} ({schedule.collective.describe()})")
    return 0


def _export_arguments(p: argparse.ArgumentParser) -> None:
    from ..interop.msccl_xml import DEFAULT_DIALECT, DIALECTS  # only when `export` is parsed

    p.add_argument("file", help="Program JSON, MSCCL XML, or Algorithm / SCCL JSON (lowered first)")
    p.add_argument("--format", default="msccl-xml", choices=FORMATS)
    p.add_argument("--dialect", default=DEFAULT_DIALECT, choices=DIALECTS, help=f"default {DEFAULT_DIALECT}")
    p.add_argument(
        "--protocol",
        choices=("Simple", "LL", "LL128"),
        help="protocol to write (default: the Program's; Simple when lowering)",
    )
    add_index_option(p)
    add_output_option(p, required=True)


def _import_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file")
    add_index_option(p)
    add_output_option(p, required=True)


def register(subparsers) -> None:
    """Add ``export`` and ``import`` to ``subparsers``."""
    add_command(
        subparsers, "export", cmd_export, "export a Program (or lowered Algorithm) to MSCCL XML", _export_arguments
    )
    add_command(
        subparsers,
        "import",
        cmd_import,
        "import MSCCL XML (→ Program JSON) or SCCL JSON (→ Algorithm)",
        _import_arguments,
    )

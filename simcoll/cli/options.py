"""Shared pieces of the ``simcoll`` command line: the parser class whose
arguments are added on first use, ``add_command``, and one helper per option
that several commands take (``--topology/-t``, ``--model/-m``,
``--collective/-c``, ``--size``, ``-o/--output``, ``--json``...).

Startup stays fast because building the parser imports nothing heavy: a
command's ``arguments`` callback (which may import what its choices and
defaults come from) runs only when that command is parsed, and the command
functions import the solvers, pandas and matplotlib they use.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable, Sequence
from typing import Any

from ..arguments import job_count, non_negative_int, positive_int, positive_seconds

Command = Callable[[argparse.Namespace], int]
Arguments = Callable[[argparse.ArgumentParser], None]


class Parser(argparse.ArgumentParser):
    """An :class:`argparse.ArgumentParser` that can add its arguments late.

    ``arguments`` (a callable taking the parser) runs the first time the
    parser parses, so listing the sub-commands (``simcoll --help``) never
    imports what a command's options need. Sub-parsers are of this class too
    (``add_subparsers`` uses the parent's class).
    """

    def __init__(self, *args: Any, arguments: Arguments | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._arguments = arguments

    def error(self, message: str):  # type: ignore[override]
        """One line naming the problem (exit 2), not argparse's usage dump."""
        # a shared parser's message starts with its option already ("--time-limit must be ..."):
        # argparse's "argument --time-limit: " before it would say the name twice
        match = re.fullmatch(r"argument (\S+): (.*)", message, re.DOTALL)
        if match and any(match[2].startswith(f"{name} ") for name in match[1].split("/")):
            message = match[2]
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")

    def parse_known_args(self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None):
        if self._arguments is not None:
            arguments, self._arguments = self._arguments, None
            arguments(self)
        return super().parse_known_args(args, namespace)


#: Options parsed the same way by every command that takes them: a command adds them with
#: :func:`add_time_limit_option` and :func:`add_jobs_option` (tests/test_bad_input.py holds every command to it).
SHARED_TYPES: dict[str, Callable[[str], Any]] = {
    "--time-limit": positive_seconds("--time-limit"),
    "--jobs": job_count,
}


def add_group(subparsers, name: str, help_text: str, dest: str):
    """Add a command group (``simcoll NAME SUB...``); returns its sub-parsers."""
    group = subparsers.add_parser(name, help=help_text, description=help_text)
    return group.add_subparsers(dest=dest, required=True)


def add_command(
    subparsers,
    name: str,
    func: Command | None,
    help_text: str,
    arguments: Arguments | None = None,
    *,
    with_json: bool = True,
) -> argparse.ArgumentParser:
    """Add a sub-command that runs ``func(args)``; ``arguments(parser)`` adds
    its options when it is parsed. Takes ``--json`` unless ``with_json=False``."""

    def build(parser: argparse.ArgumentParser) -> None:
        if with_json:
            add_json_option(parser)
        if arguments is not None:
            arguments(parser)

    p = subparsers.add_parser(name, help=help_text, description=help_text, arguments=build)
    if func is not None:
        p.set_defaults(func=func)
    return p


def print_json(obj: Any, indent: int = 2) -> None:
    """Print ``obj`` as JSON (the ``--json`` output of every command)."""
    print(json.dumps(obj, indent=indent))


def add_json_option(p: argparse.ArgumentParser) -> None:
    """``--json``: machine-readable output (every command but ``topo import``, ``gpu source``)."""
    p.add_argument("--json", action="store_true", help="machine-readable output")


def add_topology_option(
    p: argparse.ArgumentParser, *, required: bool = True, default: str | None = None, help: str | None = None
) -> None:
    """``--topology/-t``: a built-in name, generator, cluster or YAML file."""
    p.add_argument("--topology", "-t", required=required, default=default, help=help)


def add_model_option(p: argparse.ArgumentParser, help: str | None = None) -> None:
    """``--model/-m``: a built-in cost model or YAML file."""
    p.add_argument("--model", "-m", help=help)


def add_launch_option(p: argparse.ArgumentParser) -> None:
    """``--launch MODE``: how the job launches its collective calls, which
    prices each call (:meth:`simcoll.machines.Machine.with_launch`)."""
    from ..cost_model import LAUNCH_MODES

    p.add_argument(
        "--launch",
        choices=LAUNCH_MODES,
        help="how calls are launched, which sets each call's fixed cost: threads (one process driving every GPU, "
        "nccl-tests -g N), processes (one per GPU: MPI, srun, torchrun), graphs (CUDA graphs, nccl-tests -G) "
        "(default: the model's call.launch)",
    )


def launched(machine, args: argparse.Namespace):
    """``machine`` with ``--launch`` applied (as it is without one)."""
    return machine.with_launch(args.launch) if args.launch else machine


def launch_text(machine) -> str:
    """How a printed result's calls were launched, for its header ("" where the model does not say)."""
    return f", calls launched as {machine.model.launch}" if machine.model.launch else ""


def add_nccl_options(p: argparse.ArgumentParser) -> None:
    """``--nccl VERSION`` and ``--nccl-env KEY=VALUE``: the release and
    environment of the NCCL baseline (:func:`nccl_setup`)."""
    from ..nccl.versions import DEFAULT_VERSION, ENV_KEYS, VERSIONS

    p.add_argument(
        "--nccl",
        metavar="VERSION",
        help=f"the NCCL release the nccl baseline stands for, whose protocol choice every row runs with: "
        f"{', '.join(VERSIONS)} (default {DEFAULT_VERSION})",
    )
    p.add_argument(
        "--nccl-env",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help=f"an NCCL environment variable for the baseline ({', '.join(ENV_KEYS)}; also read from the "
        "environment, which this option overrides), e.g. NCCL_PROTO=Simple",
    )


def nccl_setup(args: argparse.Namespace):
    """The :class:`~simcoll.nccl.versions.NcclSetup` of ``--nccl`` /
    ``--nccl-env`` and the process environment's ``NCCL_PROTO`` / ``NCCL_ALGO``
    (as NCCL itself reads them; ``--nccl-env`` wins)."""
    import os

    from ..errors import OptionError
    from ..nccl.versions import ENV_KEYS, NcclSetup

    env = {key: os.environ[key] for key in ENV_KEYS if os.environ.get(key)}
    for item in args.nccl_env:
        if "=" not in item:
            raise OptionError(f"--nccl-env {item!r}: expected KEY=VALUE, e.g. NCCL_PROTO=Simple")
        key, _, value = item.partition("=")
        env[key.strip()] = value
    return NcclSetup.parse(args.nccl, env)


def add_collective_option(
    p: argparse.ArgumentParser, *, required: bool = True, default: str | None = None, help: str | None = None
) -> None:
    """``--collective/-c``: allreduce, allgather, ..."""
    p.add_argument("--collective", "-c", required=required, default=default, help=help)


def add_size_option(p: argparse.ArgumentParser, *, short: bool = False, required: bool = False, help: str) -> None:
    """``--size`` (``-s`` too when ``short``): one buffer size, e.g. 1MB (or,
    where the command takes one, a range such as 1KB:1MB). Checked as it is
    parsed (:func:`size_text`), so a size too large is refused before any work."""
    p.add_argument("--size", *(("-s",) if short else ()), type=size_text, required=required, help=help)


def size_text(text: str) -> str:
    """An argparse ``type`` for ``--size``: ``text`` unchanged once every size
    it names reads as one simcoll takes (:func:`simcoll.units.parse_size_range`);
    the command parses it again as a size or a range."""
    from ..errors import InvalidValueError, SimcollError
    from ..units import parse_size_range

    try:
        parse_size_range(text)
    except SimcollError as exc:
        raise InvalidValueError(str(exc)) from None
    return text


def add_chunks_option(p: argparse.ArgumentParser, help: str, default: int | None = None) -> None:
    """``--chunks``: the chunk factor C."""
    p.add_argument("--chunks", type=positive_int, default=default, help=help)


def add_root_option(p: argparse.ArgumentParser, help: str = "root rank of rooted collectives (default 0)") -> None:
    """``--root``: the root rank of broadcast, reduce, gather, scatter."""
    p.add_argument("--root", type=non_negative_int, help=help)


def add_time_limit_option(p: argparse.ArgumentParser, help: str, default: float = 60.0) -> None:
    """``--time-limit``: seconds (of a solver query, stage or simulation), a
    finite number above 0 (:func:`simcoll.arguments.positive_seconds`)."""
    p.add_argument("--time-limit", type=SHARED_TYPES["--time-limit"], default=default, help=help)


def add_jobs_option(p: argparse.ArgumentParser, help: str) -> None:
    """``--jobs/-j``: worker processes, 1 to this machine's usable cores
    (:func:`simcoll.arguments.job_count`)."""
    p.add_argument("--jobs", "-j", type=job_count, default=1, help=help)


def add_index_option(p: argparse.ArgumentParser) -> None:
    """``--index``: one ``<algo>`` of an MSCCL XML file holding several."""
    p.add_argument("--index", type=non_negative_int, help="which <algo> of an XML file holding several")


def add_output_option(p: argparse.ArgumentParser, *, required: bool = False, help: str | None = None) -> None:
    """``-o/--output``: the file to write."""
    p.add_argument("-o", "--output", required=required, help=help)

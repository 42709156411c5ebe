"""The ``simcoll`` command line. Every command takes ``--json`` for scripts.

Exit codes: 0 success; 1 a verification found the schedule incorrect;
2 bad input (unknown machine, malformed file, inapplicable algorithm...).

One module per command group (:mod:`.topo`, :mod:`.bounds`, :mod:`.algo`,
:mod:`.verify`, :mod:`.compare`, :mod:`.synth`, :mod:`.simulate`,
:mod:`.interop`, and :mod:`.gpu` and :mod:`.sweep` where present), each with
``register(subparsers)``; shared options in :mod:`.options`. Building the
parser imports no solver, pandas, matplotlib or simulator, so
``simcoll --help`` starts about as fast as Python with NumPy
(``benchmarks/startup.py``).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from collections.abc import Sequence

from .. import __version__
from ..errors import SimcollError
from . import algo, bounds, compare, interop, simulate, synth, topo, verify
from .options import Parser, add_command

__all__ = ["build_parser", "main"]

# always there, in the order `simcoll --help` lists them
GROUPS = (topo, bounds, verify, algo, synth, compare, simulate, interop)
SWEEP_HELP = "run a study (a YAML file) of many simulations on Dask; 'sweep status DIR' reports on it"


def _has(module: str) -> bool:
    """Whether the optional command module ``simcoll.cli.<module>`` is installed."""
    return importlib.util.find_spec(f"{__name__}.{module}") is not None


def _sweep_arguments(p: argparse.ArgumentParser) -> None:
    importlib.import_module(f"{__name__}.sweep")  # the group's module, which needs Dask's runner: only when parsed
    from ..experiments.command import add_arguments

    add_arguments(p)


def build_parser() -> argparse.ArgumentParser:
    """The whole ``simcoll`` parser; each command adds its options when it is parsed."""
    parser = Parser(prog="simcoll", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"simcoll {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for group in GROUPS:
        group.register(sub)
    if _has("sweep"):
        add_command(sub, "sweep", None, SWEEP_HELP, _sweep_arguments, with_json=False)
    if _has("gpu"):
        importlib.import_module(f"{__name__}.gpu").register(sub)
    if _has("calibrate"):
        importlib.import_module(f"{__name__}.calibrate").register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``simcoll ARGS``; returns the exit code (0, 1 incorrect, 2 bad input)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        return args.func(args)
    except SimcollError as exc:
        print(f"simcoll: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # the reader (e.g. `| head`) has gone: not an error of ours
        sys.stderr.close()
        return 0
    except UnicodeDecodeError as exc:
        print(f"simcoll: error: an input file is not UTF-8 text ({exc.reason})", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"simcoll: error: {exc}", file=sys.stderr)
        return 2

"""The ``simcoll`` command line. Every command takes ``--json`` for scripts.

Exit codes: 0 success; 1 a negative answer (a verification found the
schedule incorrect, a synthesis query is unsat); 2 bad input (unknown
machine, malformed file, inapplicable algorithm, an output that cannot be
written...); 130 interrupted (Ctrl-C).

One module per command group (:mod:`.topo`, :mod:`.bounds`, :mod:`.algo`,
:mod:`.verify`, :mod:`.compare`, :mod:`.synth`, :mod:`.simulate`,
:mod:`.workload`, :mod:`.interop`, and :mod:`.gpu` and :mod:`.sweep` where present), each with
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
from pathlib import Path

from .. import __version__
from ..ctrl_c import caused_by_ctrl_c, report_interrupt
from ..errors import SimcollError
from . import algo, bounds, compare, interop, simulate, synth, topo, verify, workload
from .options import Parser, add_command

__all__ = ["build_parser", "main"]

# always there, in the order `simcoll --help` lists them
GROUPS = (topo, bounds, verify, algo, synth, compare, simulate, workload, interop)
SWEEP_HELP = "run a study (a YAML file) of many simulations on Dask; 'sweep status DIR' reports on it"


def _has(module: str) -> bool:
    """Whether the optional command module ``simcoll.cli.<module>`` is installed."""
    return importlib.util.find_spec(f"{__name__}.{module}") is not None


def _sweep_arguments(p: argparse.ArgumentParser) -> None:
    importlib.import_module(f"{__name__}.sweep")  # the group's module, which needs Dask's runner: only when parsed
    from ..sweeps.command import add_arguments

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


#: Arguments that name a file a command writes; ``plot`` is an image.
OUTPUT_ARGUMENTS = ("output", "csv", "plot", "trace", "timeline", "model_output")


def _inputs(args: argparse.Namespace) -> tuple[str, ...]:
    """Every argument value (or list item) naming an existing file: what the command reads."""
    found: list[str] = []
    for key, value in vars(args).items():
        if key in OUTPUT_ARGUMENTS or key == "func":
            continue
        for item in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(item, str) and item and Path(item).is_file():
                found.append(item)
    return tuple(found)


def check_outputs(args: argparse.Namespace) -> None:
    """Before any work: every output's directory exists and is writable, an
    image's extension is one matplotlib writes, and no output is an input."""
    from ..files import check_image_path, check_output_path

    inputs = _inputs(args)
    for key in OUTPUT_ARGUMENTS:
        path = getattr(args, key, None)
        if not isinstance(path, str) or not path or (key == "output" and getattr(args, "output_is_directory", False)):
            continue  # a directory (a sweep's, a Chakra trace's), checked by what writes it
        if key == "output" and args.command == "sweep":
            continue
        check_output_path(path, inputs=inputs)
        if key == "plot" or (key == "output" and getattr(args, "draws_image", False)):
            check_image_path(path)


def _join_negative_values(argv: list[str]) -> list[str]:
    """``--size -5MB`` -> ``--size=-5MB``: argparse takes ``-5MB`` for an
    option and prints its usage; joined, the size parser names the problem."""
    out: list[str] = []
    for token in argv:
        if out and out[-1] in ("--size", "-s", "--sizes") and token[:1] == "-" and token[1:2].isdigit():
            out[-1] = f"{out[-1]}={token}"
        else:
            out.append(token)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``simcoll ARGS``; returns the exit code: 0 success, 1 a negative
    answer (incorrect schedule, unsat), 2 bad input, 130 interrupted. A
    warning is one line on stderr, ``simcoll: warning: ...``."""
    import warnings

    with warnings.catch_warnings():
        warnings.showwarning = _show_warning
        return _main(argv)


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    print(f"simcoll: warning: {message}", file=sys.stderr)


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    try:
        try:
            args = parser.parse_args(_join_negative_values(list(sys.argv[1:] if argv is None else argv)))
        except SystemExit as exc:  # --help, --version, or a usage error already printed in one line
            return exc.code if isinstance(exc.code, int) else 2
        check_outputs(args)
        return args.func(args)
    except (KeyboardInterrupt, ImportError) as exc:  # Ctrl-C inside an extension's initialisation: ImportError
        if not caused_by_ctrl_c(exc):
            raise
        return report_interrupt()
    except SimcollError as exc:
        print(f"simcoll: error: {exc}", file=sys.stderr)
        return 2
    except MemoryError:
        print("simcoll: error: out of memory (a smaller machine, size or chunk count needs less)", file=sys.stderr)
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

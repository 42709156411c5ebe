"""``simcoll topo import``: your own machine from what it prints.

    simcoll topo import FORMAT FILE [--nodes N] [--network fat-tree|rail] [--fabric-only] -o machine.yaml

FORMAT is ``nvidia-smi`` (``nvidia-smi topo -m``), ``nccl-xml``
(``NCCL_TOPO_DUMP_FILE``) or ``rocm-smi`` (``rocm-smi --showtopo``). Writes
the topology to ``machine.yaml`` and its default, UNCALIBRATED cost model to
``machine.model.yaml`` (the topology's ``default_model``, recorded relative to
the topology's folder), both or neither, then prints one line
per default the import had to pick. Bad input: exit 2 with one line naming the
row and column (or line and column) at fault.
"""

from __future__ import annotations

import argparse
import sys

from ..errors import SimcollError
from ..files import check_distinct_outputs, check_output_path
from ..topology_import import FORMATS, NETWORKS, import_machine, model_path_for, save_imported
from .options import positive_int

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``topo import``'s arguments to ``parser``."""
    parser.add_argument("format", choices=sorted(FORMATS), help="what printed the dump")
    parser.add_argument("file", help="the dump: nvidia-smi topo -m output, an NCCL topology XML, rocm-smi --showtopo")
    parser.add_argument("--nodes", type=positive_int, default=1, help="a cluster of N such nodes (default 1)")
    parser.add_argument(
        "--network", choices=NETWORKS, default="fat-tree", help="inter-node fabric of a cluster (default fat-tree)"
    )
    parser.add_argument(
        "--fabric-only",
        action="store_true",
        help="keep the GPUs and their NVLink/xGMI fabric alone (SCCL's view, e.g. for its DGX-1 bounds)",
    )
    parser.add_argument("--name", help="the topology's name (default: the dump file's stem)")
    parser.add_argument(
        "-o", "--output", required=True, help="topology YAML to write; the model goes to NAME.model.yaml"
    )
    parser.add_argument("--model-output", help="where to write the default model instead")


def run(args: argparse.Namespace) -> int:
    """Import, write both files, report; 0 on success, 2 (one line) on bad input."""
    try:
        model_path = args.model_output or model_path_for(args.output)
        # before the import: the two outputs are two files, and neither is the dump read
        check_distinct_outputs({"-o/--output": args.output, "--model-output": model_path})
        for output in (args.output, model_path):
            check_output_path(output, inputs=(args.file,))
        imported = import_machine(
            args.format, args.file, args.nodes, args.network, name=args.name, fabric_only=args.fabric_only
        )
        model_path = save_imported(imported, args.output, model_path)
    except SimcollError as exc:
        print(f"simcoll: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"simcoll: error: {exc}", file=sys.stderr)
        return 2
    topo = imported.topology
    kinds: dict[str, int] = {}
    for c in topo.components:
        kinds[c.kind] = kinds.get(c.kind, 0) + 1
    summary = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
    print(f"{topo.name}: {summary}; links: {', '.join(topo.link_types)}")
    print(f"wrote {args.output} and {model_path} (default model, UNCALIBRATED)")
    for note in imported.notes:
        print(f"  assumption: {note}")
    return 0

"""``simcoll synth taccl``: TACCL synthesis from the command line.

``simcoll synth taccl -t 'ndv2*2' --sketch ndv2-sk-1 -c allgather --model ndv2-taccl --json``
prints ``status``, ``time_s`` (solver wall time), ``predicted_time_us`` and
per-stage times; progress goes to stderr.
"""

from __future__ import annotations

import json
import sys


def cmd_synth_taccl(args) -> int:
    """Run :func:`~simcoll.synthesis.taccl.taccl_synthesize` and print its result."""
    from ...machines import load_machine
    from ...units import parse_size
    from .synthesizer import taccl_synthesize

    machine = load_machine(args.topology, args.model)
    quiet = args.quiet

    def progress(line: str) -> None:
        if not quiet:
            print(line, file=sys.stderr, flush=True)

    result = taccl_synthesize(
        machine,
        args.sketch,
        args.collective,
        time_limit_s=args.time_limit,
        input_size_bytes=parse_size(args.input_size) if args.input_size else None,
        paths=args.paths,
        contiguity=not args.no_contiguity,
        patience_s=args.patience,
        reorder=args.reorder,
        improve_passes=args.improve_passes,
        progress=progress,
    )
    out = result.to_dict()
    if args.output:
        result.algorithm.save(args.output)
        out["output"] = args.output
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        print(
            f"{out['status']}: {result.collective} on {result.topology} with sketch {result.sketch}: "
            f"predicted {out['predicted_time_us']:.2f} us ({out['algbw_GBps']:.2f} GB/s algbw at "
            f"{int(result.size_bytes)} B), solver {out['time_s']:.2f} s "
            f"(routing {out['stage_times_s']['routing']:.2f}, ordering {out['stage_times_s']['ordering']:.2f}, "
            f"contiguity {out['stage_times_s']['contiguity']:.2f})" + (f"; wrote {args.output}" if args.output else "")
        )
    return 0


def register(subparsers, add_command) -> None:
    """Add ``taccl`` to the ``synth`` sub-commands."""
    p = add_command(subparsers, "taccl", cmd_synth_taccl, "TACCL synthesis: sketch -> routing, ordering, contiguity")
    p.add_argument("--topology", "-t", required=True, help="machine, e.g. 'ndv2*2' or 'dgx2*2'")
    p.add_argument("--sketch", "-s", required=True, help="sketch JSON file or built-in name (ndv2-sk-1, dgx2-sk-1...)")
    p.add_argument("--collective", "-c", required=True, help="allgather, alltoall, reducescatter or allreduce")
    p.add_argument("--model", "-m", help="cost model (default: the topology's; TACCL Table 1: ndv2-taccl, dgx2-taccl)")
    p.add_argument("--time-limit", type=float, default=60.0, help="seconds per solver stage (default 60)")
    p.add_argument("--patience", type=float, help="stop a stage after this many seconds without a better solution")
    p.add_argument("--input-size", help="override the sketch's input_size, e.g. 32MB")
    p.add_argument(
        "--paths", default="auto", choices=("auto", "shortest", "monotone", "level"), help="stage-1 path pruning"
    )
    p.add_argument("--no-contiguity", action="store_true", help="stage 3 without contiguity (one chunk per message)")
    p.add_argument(
        "--reorder", action="store_true", help="stage 3 may reorder NVLink/NVSwitch transfers (not in TACCL)"
    )
    p.add_argument(
        "--improve-passes",
        type=int,
        default=8,
        help="forward-backward improvement passes over stage 2's greedy schedule (default 8; 0: TACCL's greedy only)",
    )
    p.add_argument("--quiet", "-q", action="store_true", help="no progress on stderr")
    p.add_argument("-o", "--output", help="write the synthesized Algorithm JSON here")

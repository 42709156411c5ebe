"""``simcoll synth``: algorithms from a solver.

- ``synth sccl``: one SCCL (C, S, R) query or the Pareto frontier
  (:mod:`simcoll.synthesis`); the JSON result has ``status`` and ``time_s``.
- ``synth taccl``: TACCL's sketch -> routing, ordering, contiguity pipeline
  (:func:`simcoll.synthesis.taccl.taccl_synthesize`), e.g.
  ``simcoll synth taccl -t 'ndv2*2' --sketch ndv2-sk-1 -c allgather --model ndv2-taccl --json``
  prints ``status``, ``time_s`` (solver wall time), ``predicted_time_us`` and
  per-stage times; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import sys

from .options import (
    add_collective_option,
    add_command,
    add_group,
    add_model_option,
    add_output_option,
    add_root_option,
    add_time_limit_option,
    add_topology_option,
    non_negative_int,
    positive_int,
    print_json,
)


# -- sccl -------------------------------------------------------------------------------
def cmd_sccl(args: argparse.Namespace) -> int:
    from ..errors import OptionError
    from ..machines import load_machine
    from ..synthesis import pareto_synthesize, synthesize

    machine = load_machine(args.topology)
    if args.pareto:
        return _pareto(args, machine, pareto_synthesize)
    if args.chunks is None or args.steps is None:
        raise OptionError("synth sccl needs --chunks and --steps (or --pareto)")
    result = synthesize(
        machine,
        args.collective,
        args.chunks,
        args.steps,
        args.rounds,
        backend=args.backend,
        time_limit_s=args.time_limit,
        root=args.root,
        workers=args.workers,
    )
    if result.algorithm is not None and args.output:
        result.algorithm.save(args.output)
    print_json({**result.to_dict(), **({"output": args.output} if args.output and result.algorithm else {})})
    return 0 if result.status == "sat" else 1  # unsat, or unknown within the time limit: no algorithm


def _pareto(args: argparse.Namespace, machine, pareto_synthesize) -> int:
    queries, frontier = [], []
    print(
        f"SCCL Pareto search: {args.collective} on {machine.name}, k={args.k}, backend {args.backend}", file=sys.stderr
    )
    for point in pareto_synthesize(
        machine,
        args.collective,
        k=args.k,
        backend=args.backend,
        time_limit_s=args.time_limit,
        max_steps=args.max_steps,
        root=args.root,
        workers=args.workers,
    ):
        row = {**point.result.to_dict(), "rounds_per_chunk": str(point.rounds_per_chunk), "optimal": point.optimal}
        queries.append(row)
        print(  # progress: the frontier itself is printed once, at the end, on stdout
            f"  query {len(queries)}: S={row['steps']} C={row['chunks']} R={row['rounds']}:"
            f" {row['status']} in {row['time_s']:.2f} s",
            file=sys.stderr,
            flush=True,
        )
        if point.result.status == "sat":
            frontier.append({**row, "proven": point.optimal})
    # a query that ran out of time leaves the frontier unproven from there on (SCCL Algorithm 1 needs every "unsat")
    unknown = sum(q["status"] == "unknown" for q in queries)
    complete = unknown == 0
    if args.json:
        print_json(
            {
                "topology": machine.name,
                "collective": args.collective,
                "complete": complete,
                "unknown_queries": unknown,
                "frontier": frontier,
                "queries": queries,
            }
        )
    else:
        print("frontier (C, S, R, R/C, time):")
        for row in frontier:
            note = "" if row["proven"] else "  (not proven Pareto-optimal)"
            print(
                f"  ({row['chunks']}, {row['steps']}, {row['rounds']})  R/C={row['rounds_per_chunk']}"
                f"  {row['time_s']:.2f} s{note}"
            )
        if not complete:
            print(f"incomplete: {unknown} queries hit the --time-limit; raise it to prove the frontier")
    return 0


def _sccl_arguments(p: argparse.ArgumentParser) -> None:
    add_topology_option(p)
    add_collective_option(p)
    p.add_argument("--chunks", type=positive_int, help="C, chunks per rank's buffer as in SCCL's tables")
    p.add_argument("--steps", type=positive_int, help="S")
    p.add_argument("--rounds", type=positive_int, help="R (default: S)")
    add_root_option(p)
    p.add_argument("--backend", default="cpsat", help="cpsat (default), z3 or z3-pb")
    p.add_argument(
        "--workers",
        type=positive_int,
        default=1,
        help="CP-SAT workers: 1 (default) finds the same algorithm on every run; more race and take the first "
        "answer, which may change from run to run",
    )
    add_time_limit_option(p, "seconds per solver query (default 60)")
    add_output_option(p, help="write the synthesized Algorithm JSON here")
    p.add_argument("--pareto", action="store_true", help="SCCL Algorithm 1: the Pareto frontier")
    p.add_argument(
        "--k", type=non_negative_int, default=0, help="k of k-synchronous (R <= S + k) for --pareto (default 0)"
    )
    p.add_argument("--max-steps", type=positive_int, help="--pareto gives up after this many steps")


# -- taccl ------------------------------------------------------------------------------
def cmd_taccl(args: argparse.Namespace) -> int:
    """Run :func:`~simcoll.synthesis.taccl.taccl_synthesize` and print its result."""
    from ..machines import load_machine
    from ..synthesis.taccl.synthesizer import taccl_synthesize
    from ..units import parse_size
    from .bounds import size_label

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
        print_json(out, indent=1)
    else:
        print(
            f"{out['status']}: {result.collective} on {result.topology} with sketch {result.sketch}: "
            f"predicted {out['predicted_time_us']:.2f} us ({out['algbw_GBps']:.2f} GB/s algbw at "
            f"{size_label(result.size_bytes)}), solver {out['time_s']:.2f} s "
            f"(routing {out['stage_times_s']['routing']:.2f}, ordering {out['stage_times_s']['ordering']:.2f}, "
            f"contiguity {out['stage_times_s']['contiguity']:.2f})" + (f"; wrote {args.output}" if args.output else "")
        )
    return 0


def _taccl_arguments(p: argparse.ArgumentParser) -> None:
    add_topology_option(p, help="machine, e.g. 'ndv2*2' or 'dgx2*2'")
    p.add_argument("--sketch", "-s", required=True, help="sketch JSON file or built-in name (ndv2-sk-1, dgx2-sk-1...)")
    add_collective_option(p, help="allgather, alltoall, reducescatter or allreduce")
    add_model_option(p, help="cost model (default: the topology's; TACCL Table 1: ndv2-taccl, dgx2-taccl)")
    add_time_limit_option(p, "seconds per solver stage (default 60)")
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
        type=non_negative_int,
        default=8,
        help="forward-backward improvement passes over stage 2's greedy schedule (default 8; 0: TACCL's greedy only)",
    )
    p.add_argument("--quiet", "-q", action="store_true", help="no progress on stderr")
    add_output_option(p, help="write the synthesized Algorithm JSON here")


def register(subparsers) -> None:
    """Add the ``synth`` group to ``subparsers``."""
    synth = add_group(subparsers, "synth", "synthesize algorithms with a solver", dest="synth")
    add_command(synth, "sccl", cmd_sccl, "SCCL synthesis: one (C, S, R) query, or the Pareto frontier", _sccl_arguments)
    add_command(synth, "taccl", cmd_taccl, "TACCL synthesis: sketch -> routing, ordering, contiguity", _taccl_arguments)

"""The ``simcoll`` command line. Every command takes ``--json`` for scripts.

Exit codes: 0 success; 1 a verification found the schedule incorrect;
2 bad input (unknown machine, malformed file, inapplicable algorithm...).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from fractions import Fraction

from . import __version__
from .algorithm import Algorithm
from .algorithms import REGISTRY, generate, parse_options
from .bounds import lower_bounds
from .collectives import make_collective
from .compare import DEFAULT_SIZES, compare, plot_comparison
from .errors import SimcollError
from .interop import load_schedules
from .interop.command import register as register_interop
from .machines import builtin_models, builtin_topologies, load_machine, load_topology
from .simulator.command import register as register_simulate
from .synthesis.taccl.command import register as register_taccl
from .units import parse_size_range
from .verify import check


def _print_json(obj) -> None:
    print(json.dumps(obj, indent=2))


# -- topo -----------------------------------------------------------------------
def cmd_topo_list(args) -> int:
    from .topology_generators import TOPOLOGY_GENERATORS

    rows = []
    for name in builtin_topologies():
        topo = load_topology(name)
        rows.append({"name": name, "ranks": topo.num_ranks, "description": topo.description})
    if args.json:
        _print_json(
            {
                "builtins": rows,
                "generators": [u for _, u in TOPOLOGY_GENERATORS.values()],
                "clusters": ["NODE*N (fat tree)", "NODE*N/rail (per-rail switches)"],
                "models": builtin_models(),
            }
        )
        return 0
    for row in rows:
        print(f"{row['name']:<12} {row['ranks']:>3} GPUs  {row['description']}")
    print("generators: " + ", ".join(u for _, u in TOPOLOGY_GENERATORS.values()))
    print("clusters:   NODE*N (fat tree), NODE*N/rail (per-rail switches), e.g. dgx-a100*4")
    print("models:     " + ", ".join(builtin_models()))
    return 0


def cmd_topo_show(args) -> int:
    topo = load_topology(args.name)
    links = [
        {"src": lk.src, "dst": lk.dst, "type": lk.type, "count": lk.count, "directed": lk.directed} for lk in topo.links
    ]
    if args.json:
        _print_json(
            {
                "name": topo.name,
                "description": topo.description,
                "ranks": topo.num_ranks,
                "nodes": len(topo.nodes),
                "default_model": topo.default_model,
                "components": [
                    {"name": c.name, "kind": c.kind, "node": c.node, "rank": c.rank} for c in topo.components
                ],
                "links": links,
                "gpu_link_counts": topo.gpu_link_counts(),
                "sources": list(topo.sources),
            }
        )
        return 0
    print(f"{topo.name}: {topo.description}")
    print(f"{topo.num_ranks} GPUs on {len(topo.nodes)} node(s); default model: {topo.default_model or 'generic'}")
    kinds: dict[str, int] = {}
    for c in topo.components:
        kinds[c.kind] = kinds.get(c.kind, 0) + 1
    print("components: " + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())))
    for lk in links:
        print(f"  {lk['src']:>14} {'->' if lk['directed'] else '<->'} {lk['dst']:<14} {lk['type']} x{lk['count']}")
    return 0


def cmd_topo_draw(args) -> int:
    from .draw import draw_topology

    draw_topology(load_topology(args.name), args.output)
    print(f"wrote {args.output}")
    return 0


# -- bounds -------------------------------------------------------------------------
def cmd_bounds(args) -> int:
    machine = load_machine(args.topology, args.model)
    coll = make_collective(args.collective, machine.num_ranks, args.chunks, root=args.root)
    size = parse_size_range(args.size)[0] if args.size else coll.size_chunks * (1 << 20)
    with_model = args.model is not None or args.size is not None
    b = lower_bounds(coll, machine, size if with_model else None)
    out = {
        "topology": machine.name,
        "collective": coll.name,
        "min_steps": b.min_steps,
        "min_rounds_per_chunk": str(b.min_rounds_per_chunk),
        "exact": b.exact,
    }
    if with_model:
        out.update(
            {
                "model": machine.model.name,
                "size_bytes": size,
                "time_bound_s": b.time_bound_s,
                "algbw_bound_GBps": b.algbw_bound_GBps,
            }
        )
    if args.json:
        _print_json(out)
        return 0
    frac = b.min_rounds_per_chunk
    print(
        f"{coll.name} on {machine.name}: at least {b.min_steps} steps, {frac} rounds per chunk"
        f" ({float(Fraction(frac)):.4g}){'' if b.exact else ' (over a family of cuts, not all)'}"
    )
    if with_model:
        print(
            f"with model {machine.model.name}, {size} B: time >= {b.time_bound_s * 1e6:.3f} us,"
            f" algbw <= {b.algbw_bound_GBps:.2f} GB/s"
        )
    return 0


# -- verify -----------------------------------------------------------------------
def cmd_verify(args) -> int:
    schedules = load_schedules(args.file)
    topology = load_topology(args.topology) if args.topology else None
    results = []
    for schedule in schedules:
        problems = check(schedule, topology)
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
        _print_json(results[0] if len(results) == 1 else {"file": args.file, "correct": correct, "schedules": results})
    return 0 if correct else 1


# -- algo ---------------------------------------------------------------------------
def cmd_algo_list(args) -> int:
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
        _print_json(rows)
        return 0
    width = max(len(row["name"]) for row in rows)
    for row in rows:
        print(f"{row['name']:<{width}}  {', '.join(row['collectives'])}")
        print(f"{'':<{width}}  {row['summary']}")
        for opt, text in row["options"].items():
            print(f"{'':<{width}}  --option {opt}=...  {text}")
    return 0


def cmd_algo_generate(args) -> int:
    if args.name not in REGISTRY:
        raise SimcollError(f"unknown algorithm {args.name!r}; known: {', '.join(REGISTRY)}")
    options = {}
    for item in args.option or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise SimcollError(f"--option {item!r}: expected key=value")
        options[key] = value
    topo = load_topology(args.topology)
    algo = generate(
        args.name, topo, args.collective, args.chunks, args.root, **parse_options(REGISTRY[args.name], options)
    )
    problems = check(algo, topo)
    if problems:  # a generator bug, never the user's fault
        raise SimcollError(f"generated {args.name} failed verification: {problems[0]}")
    if args.output:
        algo.save(args.output)
    summary = {
        "name": algo.name,
        "collective": algo.collective.name,
        "ranks": algo.num_ranks,
        "chunks": algo.chunks,
        "steps": algo.steps,
        "rounds": algo.rounds,
        "transfers": len(algo.transfers),
        "output": args.output,
    }
    if args.json:
        _print_json(summary if args.output else algo.to_dict())
    elif args.output:
        print(
            f"wrote {args.output}: {algo.name} {algo.collective.name}, C={algo.chunks} S={algo.steps} R={algo.rounds}"
        )
    else:
        print(algo.to_json())
    return 0


# -- compare ---------------------------------------------------------------------------
def cmd_compare(args) -> int:
    machine = load_machine(args.topology, args.model)
    sizes = parse_size_range(args.sizes)
    method = "analytic" if args.analytic else "simulate"
    df, skipped = compare(
        machine, args.collective, sizes, method=method, program=args.program, contention=not args.no_contention
    )
    if args.csv:
        df.to_csv(args.csv, index=False)
    if args.plot:
        plot_comparison(df, args.plot)
    if args.json:
        _print_json(
            {
                "topology": machine.name,
                "model": machine.model.name,
                "collective": args.collective,
                "method": method,
                "rows": json.loads(df.to_json(orient="records")),
                "not_applicable": skipped,
            }
        )
        return 0
    how = "analytic alpha-beta times" if args.analytic else "simulated times (Algorithm mode)"
    if args.program:
        how += "; rows marked (program) are the lowered Program in Program mode"
    print(f"{args.collective} on {machine.name} (model {machine.model.name}); {how}")
    names = [a if m != "program" else f"{a} (program)" for a, m in zip(df["algorithm"], df["method"], strict=True)]
    width = max([len("algorithm"), *(len(n) for n in names)])
    print(f"{'size':>8} {'algorithm':<{width}} {'time (us)':>12} {'algbw GB/s':>11} {'busbw GB/s':>11} {'bound':>8}")
    for name, (_, row) in zip(names, df.iterrows(), strict=True):
        mark = " *" if row["best"] else ""
        print(
            f"{row['size']:>8} {name:<{width}} {row['time_us']:>12.2f} {row['algbw_GBps']:>11.2f}"
            f" {row['busbw_GBps']:>11.2f} {row['algbw_bound_GBps']:>8.1f}{mark}"
        )
    print("* best at that size; bound = algbw upper bound from max-flow cuts")
    for name, reason in skipped.items():
        print(f"not applicable: {reason if reason.startswith(name + ':') else f'{name}: {reason}'}")
    for path, what in ((args.csv, "CSV"), (args.plot, "plot")):
        if path:
            print(f"wrote {what} to {path}")
    return 0


# -- synth ----------------------------------------------------------------------------
def cmd_synth_sccl(args) -> int:
    from .synthesis import pareto_synthesize, synthesize

    topo = load_topology(args.topology)
    if args.pareto:
        return _synth_pareto(args, topo, pareto_synthesize)
    if args.chunks is None or args.steps is None:
        raise SimcollError("synth sccl needs --chunks and --steps (or --pareto)")
    result = synthesize(
        topo,
        args.collective,
        args.chunks,
        args.steps,
        args.rounds,
        backend=args.backend,
        time_limit_s=args.time_limit,
        root=args.root,
    )
    if result.algorithm is not None and args.output:
        result.algorithm.save(args.output)
    _print_json({**result.to_dict(), **({"output": args.output} if args.output and result.algorithm else {})})
    return 0


def _synth_pareto(args, topo, pareto_synthesize) -> int:
    queries, frontier = [], []
    print(f"SCCL Pareto search: {args.collective} on {topo.name}, k={args.k}, backend {args.backend}", file=sys.stderr)
    for point in pareto_synthesize(
        topo,
        args.collective,
        k=args.k,
        backend=args.backend,
        time_limit_s=args.time_limit,
        max_steps=args.max_steps,
        root=args.root,
    ):
        row = {**point.result.to_dict(), "rounds_per_chunk": str(point.rounds_per_chunk), "optimal": point.optimal}
        queries.append(row)
        mark = "  <- Pareto-optimal" if point.optimal else ""
        print(
            f"  C={row['chunks']:<3} S={row['steps']:<3} R={row['rounds']:<3} R/C={row['rounds_per_chunk']:<6} "
            f"{row['status']:<7} {row['time_s']:.2f} s{mark}",
            file=sys.stderr,
            flush=True,
        )
        if point.result.status == "sat":
            frontier.append(row)
    if args.json:
        _print_json({"topology": topo.name, "collective": args.collective, "frontier": frontier, "queries": queries})
    else:
        print("frontier (C, S, R, R/C, time):")
        for row in frontier:
            print(
                f"  ({row['chunks']}, {row['steps']}, {row['rounds']})  R/C={row['rounds_per_chunk']}  {row['time_s']:.2f} s"
            )
    return 0


def add_command(subparsers, name: str, func, help_text: str) -> argparse.ArgumentParser:
    """Add a sub-command that runs ``func(args)`` and takes ``--json``."""
    p = subparsers.add_parser(name, help=help_text, description=help_text)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=func)
    return p


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="simcoll", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"simcoll {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    add = add_command

    topo = sub.add_parser("topo", help="built-in machines: list, show, draw").add_subparsers(dest="topo", required=True)
    add(topo, "list", cmd_topo_list, "list built-in topologies, generators and models")
    p = add(topo, "show", cmd_topo_show, "show a topology's components and links")
    p.add_argument("name", help="built-in name, generator (ring:8), cluster (dgx-a100*4) or YAML file")
    p = add(topo, "draw", cmd_topo_draw, "draw a topology to an image")
    p.add_argument("name")
    p.add_argument("-o", "--output", required=True, help="output image (.png, .svg, .pdf)")

    p = add(sub, "bounds", cmd_bounds, "lower bounds on steps, rounds per chunk and (with a model) algbw")
    p.add_argument("--topology", "-t", required=True)
    p.add_argument("--collective", "-c", required=True)
    p.add_argument("--model", "-m", help="cost model (built-in name or YAML); enables the algbw bound")
    p.add_argument("--size", help="buffer size for the time bound (default 1 MiB per chunk)")
    p.add_argument("--chunks", type=int, default=1, help="chunk factor C (default 1)")
    p.add_argument("--root", type=int, help="root rank of rooted collectives (default 0)")

    p = add(sub, "verify", cmd_verify, "check an Algorithm/Program JSON, MSCCL XML or SCCL JSON against its collective")
    p.add_argument("file")
    p.add_argument("--topology", "-t", help="also check routes and bandwidth against this machine")

    algo = sub.add_parser("algo", help="algorithm generators: list, generate").add_subparsers(
        dest="algo", required=True
    )
    add(algo, "list", cmd_algo_list, "list algorithm generators and the collectives they support")
    p = add(algo, "generate", cmd_algo_generate, "generate, verify and write an algorithm")
    p.add_argument("name")
    p.add_argument("--topology", "-t", required=True)
    p.add_argument("--collective", "-c", required=True)
    p.add_argument("--chunks", type=int, help="chunk factor C (default: the generator's, often 1 or P)")
    p.add_argument("--root", type=int, help="root rank of broadcast, reduce, gather, scatter (default 0)")
    p.add_argument("--option", action="append", metavar="K=V", help="generator option, repeatable")
    p.add_argument("-o", "--output", help="write the Algorithm JSON here")

    synth = sub.add_parser("synth", help="synthesize algorithms with a solver").add_subparsers(
        dest="synth", required=True
    )
    p = add(synth, "sccl", cmd_synth_sccl, "SCCL synthesis: one (C, S, R) query, or the Pareto frontier")
    p.add_argument("--topology", "-t", required=True)
    p.add_argument("--collective", "-c", required=True)
    p.add_argument("--chunks", type=int, help="C, chunks per rank's buffer as in SCCL's tables")
    p.add_argument("--steps", type=int, help="S")
    p.add_argument("--rounds", type=int, help="R (default: S)")
    p.add_argument("--root", type=int, help="root rank of rooted collectives (default 0)")
    p.add_argument("--backend", default="cpsat", help="cpsat (default), z3 or z3-pb")
    p.add_argument("--time-limit", type=float, default=60.0, help="seconds per solver query (default 60)")
    p.add_argument("-o", "--output", help="write the synthesized Algorithm JSON here")
    p.add_argument("--pareto", action="store_true", help="SCCL Algorithm 1: the Pareto frontier")
    p.add_argument("--k", type=int, default=0, help="k of k-synchronous (R <= S + k) for --pareto (default 0)")
    p.add_argument("--max-steps", type=int, help="--pareto gives up after this many steps")
    register_taccl(synth, add_command)

    p = add(sub, "compare", cmd_compare, "every applicable algorithm across buffer sizes (the main job)")
    p.add_argument("--topology", "-t", default="dgx1")
    p.add_argument("--collective", "-c", default="allreduce")
    p.add_argument("--model", "-m")
    p.add_argument("--sizes", default=DEFAULT_SIZES, help="LOW:HIGH doubling, or a comma list (default 1KB:1GB)")
    p.add_argument("--csv", help="write the table as CSV")
    p.add_argument("--plot", help="write algbw vs size as an image")
    p.add_argument("--analytic", action="store_true", help="closed-form alpha-beta times instead of simulating")
    p.add_argument(
        "--program", action="store_true", help="also simulate each algorithm lowered to a Program (Program mode)"
    )
    p.add_argument(
        "--no-contention", action="store_true", help="simulate an ideal network (no sharing, no contention parameters)"
    )

    register_simulate(sub, add_command)
    register_interop(sub, add_command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
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


if __name__ == "__main__":
    sys.exit(main())

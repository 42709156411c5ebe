"""``simcoll workload``: whole training steps (:mod:`simcoll.workload`).

    simcoll workload list
    simcoll workload generate KIND [--option K=V ...] -o FILE.yaml
    simcoll workload export-chakra FILE|TRACE|KIND [--option K=V ...] -o DIR [--prefix trace]
    simcoll workload run FILE|KIND [--option K=V ...] --topology T [--model M] [--launch MODE]
                         [--nccl VERSION] [--engine fast|reference] [--no-contention]
                         [--time-limit S] [--trace OUT.json] [--timeline OUT.csv] [--json]

``run`` takes a workload file, a Chakra execution trace (per-rank ``.et``
files, :mod:`simcoll.workload.chakra`; ``--groups`` gives its process
groups) or a generator's name with its options (a
1,024-GPU step is millions of operations: generated in the same process,
no file is written). Calls are priced as launched one process per GPU, as
frameworks launch them, unless ``--launch`` says otherwise. JSON output keys: ``step_time_s``,
``throughput_per_s``, ``compute_s``, ``exposed_communication_s``,
``communication`` (per group), ``stats``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from .options import (
    add_command,
    add_group,
    add_model_option,
    add_nccl_options,
    add_time_limit_option,
    add_topology_option,
    launch_text,
    nccl_setup,
    print_json,
)


def option_value(text: str):
    """A generator option from the command line: a whole number, a number,
    a size (``25MiB``), else the text itself."""
    for parse in (int, float):
        try:
            return parse(text)
        except ValueError:
            pass
    from ..errors import SimcollError
    from ..units import parse_size

    try:
        return parse_size(text)
    except SimcollError:
        return text


def _generator_options(args: argparse.Namespace, kind: str) -> dict:
    """``--option`` values for generator ``kind``: kept as text where its
    parameter takes text (``nccl=2.30`` stays ``"2.30"``), else read as
    numbers or sizes (:func:`option_value`)."""
    import inspect

    from ..workload import GENERATORS
    from .algo import parse_key_values

    parameters = inspect.signature(GENERATORS[kind]).parameters
    options = {}
    for key, value in parse_key_values(args.option).items():
        annotation = str(parameters[key].annotation) if key in parameters else ""
        options[key] = value if annotation.startswith("str") else option_value(value)
    return options


def _is_chakra(spec: str) -> bool:
    """Whether ``spec`` names a Chakra trace: a directory, or a prefix of ``<prefix>.<rank>.et`` files."""
    path = Path(spec)
    return path.is_dir() or any(path.parent.glob(f"{path.name}.*.et"))


def _workload(args: argparse.Namespace):
    """The workload ``args.workload`` names: a file, a Chakra trace, else a generator with ``--option``s."""
    from ..errors import OptionError
    from ..workload import GENERATORS, generate_workload, load_workload

    if args.workload in GENERATORS and not Path(args.workload).exists():
        return generate_workload(args.workload, **_generator_options(args, args.workload))
    if args.option:
        raise OptionError(f"--option is for a generator ({', '.join(GENERATORS)}), not {args.workload}")
    if getattr(args, "groups", None) and not _is_chakra(args.workload):
        raise OptionError(f"--groups is for a Chakra trace, and {args.workload} is not one")
    if _is_chakra(args.workload):
        from ..workload.chakra import load_chakra

        return load_chakra(args.workload, getattr(args, "groups", None))
    if not Path(args.workload).exists():
        raise OptionError(f"{args.workload}: no such file or trace, and not a generator ({', '.join(GENERATORS)})")
    return load_workload(args.workload)


def cmd_list(args: argparse.Namespace) -> int:
    from ..workload.generators import GENERATORS, _networks

    networks = {name: spec.get("kind") for name, spec in _networks().items()}
    if args.json:
        print_json({"generators": list(GENERATORS), "networks": networks})
        return 0
    for name, func in GENERATORS.items():
        print(f"{name:15} {(func.__doc__ or '').strip().splitlines()[0]}")
    print("networks: " + ", ".join(f"{n} ({k})" for n, k in networks.items()))
    return 0


def _generated(args: argparse.Namespace):
    from ..errors import OptionError
    from ..workload import GENERATORS, generate_workload

    if args.kind not in GENERATORS:
        raise OptionError(f"unknown workload generator {args.kind!r}; known: {', '.join(GENERATORS)}")
    return generate_workload(args.kind, **_generator_options(args, args.kind))


def cmd_generate(args: argparse.Namespace) -> int:
    from ..workload import check_workload, save_workload

    workload = _generated(args)
    matching = check_workload(workload)
    save_workload(workload, args.output)
    summary = {
        "workload": workload.name,
        "ranks": workload.num_ranks,
        "operations": workload.num_ops,
        "calls": len(matching.calls),
        "sends": len(matching.sends),
        "output": args.output,
    }
    if args.json:
        print_json(summary)
    else:
        print(f"{workload.name}: {workload.num_ranks} ranks, {workload.num_ops:,} operations, "
              f"{len(matching.calls):,} collective calls, {len(matching.sends):,} sends -> {args.output}")  # fmt: skip
    return 0


def cmd_export_chakra(args: argparse.Namespace) -> int:
    from ..workload import check_workload
    from ..workload.chakra import save_chakra

    workload = _workload(args)
    check_workload(workload)
    files = save_chakra(workload, args.output, args.prefix)
    if args.json:
        print_json({"workload": workload.name, "ranks": len(files), "files": [str(f) for f in files]})
    else:
        print(f"{workload.name}: {len(files)} rank files {args.output}/{args.prefix}.<rank>.et and "
              f"{args.prefix}.groups.json (ASTRA-sim's communicator groups)")  # fmt: skip
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from ..machines import load_machine
    from ..workload import run_workload

    workload = _workload(args)
    machine = load_machine(args.topology, args.model).with_launch(args.launch or "processes")
    nccl = nccl_setup(args) if (args.nccl or args.nccl_env) else None
    result = run_workload(workload, machine, engine=args.engine, contention=not args.no_contention,
                          time_limit_s=args.time_limit, nccl=nccl, launch=None)  # fmt: skip
    if args.trace:
        result.write_chrome_trace(args.trace)
    if args.timeline:
        from ..files import write_csv

        write_csv(result.timeline, args.timeline)
    summary = result.summary()
    summary["launch"] = machine.model.launch
    if args.json:
        print_json(summary)
        return 0
    print(f"{workload.name} on {machine.name} (model {machine.model.name}{launch_text(machine)}): "
          f"{summary['ranks']} ranks, {summary['operations']:,} operations")  # fmt: skip
    print(f"  step time       {result.step_time_s * 1e3:.3f} ms")
    if result.throughput_per_s is not None:
        print(f"  throughput      {result.throughput_per_s:,.1f} samples/s ({workload.samples_per_step:g} a step)")
    print(f"  compute         {summary['compute_s'] * 1e3:.3f} ms a rank (mean)")
    print(f"  exposed comm.   {summary['exposed_communication_s'] * 1e3:.3f} ms a rank (mean; not under compute)")
    rows = sorted(summary["communication"], key=lambda row: -row["exposed_s"])
    for row in rows[:8]:
        print(f"  group {row['group']}: {row['ranks']} ranks, {row['calls']} calls each, busy {row['busy_s'] * 1e3:.3f} ms, "
              f"exposed {row['exposed_s'] * 1e3:.3f} ms (max {row['max_exposed_s'] * 1e3:.3f} ms)")  # fmt: skip
    if len(rows) > 8:
        print(f"  ... and {len(rows) - 8} more groups, less exposed (--json lists them)")
    shown = list(result.stats["schedules"].items())
    for what, choice in shown[:8]:
        print(f"  schedule: {what}: {choice}")
    if len(shown) > 8:
        print(f"  ... and {len(shown) - 8} more schedules (--json lists them)")
    if args.trace:
        print(f"wrote Chrome trace to {args.trace} (open in https://ui.perfetto.dev)")
    if args.timeline:
        print(f"wrote the per-operation timeline to {args.timeline}")
    return 0


def _options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--option", action="append", metavar="K=V", help="a generator option, repeatable (simcoll workload list)"
    )


def _generate_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("kind", help="the generator (simcoll workload list)")
    _options(p)
    p.add_argument("-o", "--output", required=True, help="the workload file to write (.yaml or .json)")


def _source_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("workload", help="a workload file (.yaml/.json), a Chakra trace (a directory of <prefix>.<rank>.et "
                   "files, or the prefix), or a generator's name with --option")  # fmt: skip
    _options(p)
    p.add_argument("--groups", help="a Chakra trace's process groups: ASTRA-sim's communicator-group JSON "
                   "(default: <prefix>.groups.json beside it, if there)")  # fmt: skip


def _export_arguments(p: argparse.ArgumentParser) -> None:
    _source_arguments(p)
    p.add_argument("-o", "--output", required=True, help="the directory to write the rank files into")
    p.add_argument("--prefix", default="trace", help="file name prefix (default trace: trace.0.et, ...)")
    p.set_defaults(output_is_directory=True)


def _run_arguments(p: argparse.ArgumentParser) -> None:
    _source_arguments(p)
    add_topology_option(p)
    add_model_option(p, help="cost model (default: the topology's)")
    from ..cost_model import LAUNCH_MODES

    p.add_argument("--launch", choices=LAUNCH_MODES,
                   help="how the job launches its calls, which sets each call's fixed cost (default processes: one "
                   "process per GPU, as torchrun and MPI launch frameworks)")  # fmt: skip
    add_nccl_options(p)
    p.add_argument("--engine", choices=("fast", "reference"), default="fast",
                   help="the network the calls share: fast (default) or the reference engine (slow)")  # fmt: skip
    p.add_argument("--no-contention", action="store_true", help="ideal network: no sharing between messages")
    add_time_limit_option(p, "wall-clock limit in seconds, building the schedules included (default 600)", 600.0)
    p.add_argument("--trace", help="write a Chrome trace JSON (Perfetto) here: a process per rank, a thread per stream")
    p.add_argument("--timeline", help="write one CSV row per operation here")


def register(subparsers) -> None:
    """Add the ``workload`` group to ``subparsers``."""
    group = add_group(subparsers, "workload", "training steps: many collectives with compute on one machine",
                      dest="workload_command")  # fmt: skip
    add_command(group, "list", cmd_list, "list workload generators and the networks they know")
    add_command(group, "generate", cmd_generate, "generate a workload and write it", _generate_arguments)
    add_command(group, "run", cmd_run, "simulate one step of a workload on a machine", _run_arguments)
    add_command(group, "export-chakra", cmd_export_chakra, "write a workload as a Chakra execution trace (ASTRA-sim)",
                _export_arguments)  # fmt: skip

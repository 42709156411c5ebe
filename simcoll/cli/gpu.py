"""``simcoll gpu``: run schedules through simcoll's interpreter (simcoll.gpu).

    simcoll gpu check FILE [--size S] [--dtype T] [--index I] [--json]   # no GPU needed; exit 0 / 1
    simcoll gpu source [FILE] -o kernel.cu                               # self-contained CUDA source
    simcoll gpu run FILE --size S [--devices 0,1] [--iters N] [--json]   # needs CuPy and a GPU (else exit 2, on stderr)
    simcoll gpu calibrate -o models/NAME.yaml [--devices 0,1] [--base-model M] [--samples F]     # needs a GPU
    simcoll gpu calibrate -o models/NAME.yaml --from-samples F [F ...]   # earlier runs' samples fitted (together), no GPU
    simcoll gpu validate FILE (--size S | --sizes 1KB:1GB) [--model M] [--csv F] [--plot F]      # needs a GPU
    simcoll gpu validate FILE --measured sweep.csv [--model M]      # an earlier sweep simulated again, no GPU

``check`` packs the table, runs the NumPy reference and the host-thread
interpreter core on the same inputs and reports whether both reach the
postcondition with identical bits.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from simcoll.arguments import positive_seconds
from simcoll.errors import GpuUnavailableError, OptionError, SimcollError

from .options import non_negative_int, positive_int

HELP = "run schedules through simcoll's GPU interpreter (check needs no GPU)"
NO_GPU = "no CUDA GPU available (needs CuPy and a device: pip install -e .[gpu])"


def _program(path: str, index: int | None) -> Any:
    from simcoll.algorithm import Algorithm
    from simcoll.compiler import lower_algorithm
    from simcoll.interop.schedules import load_schedules

    schedules = load_schedules(path)
    if index is None and len(schedules) > 1:
        raise OptionError(f"{path} holds {len(schedules)} schedules; pick one with --index")
    pick = index or 0
    if not 0 <= pick < len(schedules):
        raise OptionError(f"{path}: --index {pick} is outside 0..{len(schedules) - 1}")
    schedule = schedules[pick]
    return lower_algorithm(schedule) if isinstance(schedule, Algorithm) else schedule


def _size(program: Any, args: argparse.Namespace) -> int:
    from simcoll.units import parse_size

    if args.size is not None:
        return int(parse_size(args.size))
    return program.collective.size_chunks * 4 * 64


def cmd_check(args: argparse.Namespace) -> int:
    from simcoll.gpu import host
    from simcoll.gpu.table import to_table

    program = _program(args.file, args.index)
    table = to_table(program)
    size = _size(program, args)
    result = host.check_table(table, size, args.dtype, timeout_s=args.timeout)
    if args.json:
        print(json.dumps({"program": program.name, "size_bytes": size, "dtype": args.dtype, "ok": result.ok,
                          "reference_problems": result.reference_problems, "host_problems": result.host_problems,
                          "differences": result.differences}, indent=1))  # fmt: skip
    else:
        verdict = "bit-identical, postcondition reached" if result.ok else "FAILED"
        print(f"{program.name}: {table.num_executors} executors, {table.instructions.shape[0]} instructions, "
              f"{size} bytes {args.dtype}: {verdict}")  # fmt: skip
        for line in (result.reference_problems + result.host_problems + result.differences)[:10]:
            print(f"  {line}")
    return 0 if result.ok else 1


def cmd_source(args: argparse.Namespace) -> int:
    from simcoll.gpu.runner import kernel_source, table_source
    from simcoll.gpu.table import to_table

    text = table_source(to_table(_program(args.file, args.index))) if args.file else kernel_source()
    from simcoll.files import write_atomic

    write_atomic(args.output, text)
    print(f"wrote {args.output}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from simcoll.gpu import cuda_available

    if not cuda_available():
        raise GpuUnavailableError(f"gpu run: {NO_GPU}")
    from simcoll.gpu.runner import run

    program = _program(args.file, args.index)
    devices = _devices(args.devices)
    result = run(program, _size(program, args), devices, iters=args.iters, dtype=args.dtype)
    if args.json:
        print(json.dumps(result.to_dict(), indent=1))
    else:
        print(f"{result.program}: {result.size_bytes} B  {result.time_s * 1e6:.2f} us  algbw {result.algbw_GBps:.2f} "
              f"GB/s  busbw {result.busbw_GBps:.2f} GB/s  {'verified' if result.verified else 'WRONG RESULT'}")  # fmt: skip
    return 0 if result.verified else 1


def _devices(text: str) -> list[int]:
    try:
        devices = [int(d) for d in text.split(",")]
    except ValueError:
        raise OptionError(f"--devices {text!r}: expected comma-separated device numbers, e.g. 0,1") from None
    if not devices or any(d < 0 for d in devices) or len(set(devices)) != len(devices):
        raise OptionError(f"--devices {text!r}: expected distinct non-negative device numbers")
    return devices


def cmd_calibrate(args: argparse.Namespace) -> int:
    from simcoll.gpu import calibrate, cuda_available
    from simcoll.machines import load_model

    base = load_model(args.base_model) if args.base_model else None
    if args.from_samples:  # earlier runs' samples, fitted again (several: together): no GPU needed
        samples, run = calibrate.read_sample_files(args.from_samples)
    else:
        if not cuda_available():
            raise GpuUnavailableError(f"gpu calibrate: {NO_GPU}")
        from simcoll.gpu.runner import device_name
        from simcoll.units import parse_size_range

        devices = _devices(args.devices)
        benches = calibrate.microbenchmarks(sizes=parse_size_range(args.sizes, 4))
        samples = calibrate.measure(benches, devices[:2], iters=args.iters)
        run = calibrate.run_label(devices[:2], device_name(devices[0]))
        if args.samples:
            calibrate.write_samples(samples, args.samples, run)
    result, model = calibrate.write_calibration(samples, args.output, link_type=args.link_type, run=run, base=base)
    summary = result.fit.summary()
    print(f"wrote {args.output}: model {model.name!r}, {summary['samples']} samples, median |residual| "
          f"{100 * summary['median_relative_error']:.1f}%, max {100 * summary['max_relative_error']:.1f}%")  # fmt: skip
    for name, value in result.params.items():
        print(f"  {name} = {value:.4g}")
    return 0


def _machine(program: Any, args: argparse.Namespace) -> Any:
    from simcoll.machines import load_machine

    topology = args.topology or program.topology or f"fully-connected:{program.num_ranks}"
    return load_machine(topology, args.model)


def cmd_validate(args: argparse.Namespace) -> int:
    from simcoll.gpu import cuda_available

    if args.size is not None and args.sizes is not None:
        raise OptionError("simcoll gpu validate takes one of --size S or --sizes LOW:HIGH, not both")
    if args.measured is not None:  # an earlier sweep's measured times: no GPU needed
        from simcoll.gpu import validate as val

        times = val.measured_times(args.measured)
        if args.size is None and args.sizes is None:
            args.sizes = ",".join(str(size) for size in sorted(times))
        return report_validation(_program(args.file, args.index), args, val.recorded_measure(times, args.measured))
    if args.size is None and args.sizes is None:
        raise OptionError("simcoll gpu validate needs one of --size S or --sizes LOW:HIGH")
    if not cuda_available():
        raise GpuUnavailableError(f"gpu validate: {NO_GPU}")
    from simcoll.gpu import validate as val

    program = _program(args.file, args.index)
    measure = val.gpu_measure(_devices(args.devices), iters=args.iters, dtype=args.dtype)
    return report_validation(program, args, measure)


def report_validation(program: Any, args: argparse.Namespace, measure: Any) -> int:
    """Validate ``program`` with ``measure`` (program, size) -> seconds, print
    the table and write the CSV / plot asked for (the GPU-independent part of
    ``simcoll gpu validate``)."""
    from simcoll.files import check_distinct_outputs
    from simcoll.gpu import validate as val
    from simcoll.units import parse_size, parse_size_range

    check_distinct_outputs({"--csv": args.csv, "--plot": args.plot}, error=OptionError)
    sizes = [parse_size(args.size)] if args.size is not None else parse_size_range(args.sizes, args.factor)
    result = val.validate(program, _machine(program, args), sizes, measure, dtype=args.dtype)
    if args.json:
        print(json.dumps({"program": result.program, "machine": result.machine, "model": result.model,
                          "median_abs_error": result.median_abs_error,
                          "rows": [dict(zip(val.CSV_COLUMNS, r.as_csv(), strict=True)) for r in result.rows]},
                         indent=1))  # fmt: skip
    else:
        print("\n".join(result.lines()))
    if args.csv:
        val.write_csv(result, args.csv)
    if args.plot:
        val.write_plot(result, args.plot)
    return 0


def _common(p: argparse.ArgumentParser, *, size: bool = True) -> None:
    p.add_argument(
        "--index", type=non_negative_int, default=None, help="which schedule of a multi-<algo> MSCCL XML file"
    )
    p.add_argument("--dtype", default="float32", choices=("float32", "float16", "bfloat16"))
    if size:
        p.add_argument("--size", default=None, help="collective size, e.g. 1MB (default: 256 elements per chunk)")


def register(subparsers, add_command=None) -> argparse.ArgumentParser:
    """Add the ``gpu`` group to ``subparsers`` (``add_command`` accepted for the
    CLI's common signature)."""
    del add_command
    group = subparsers.add_parser("gpu", help=HELP, description=HELP)
    sub = group.add_subparsers(dest="gpu_command", required=True)
    p = sub.add_parser("check", help="table + NumPy reference + host-thread core, compared bit for bit")
    p.add_argument("file")
    _common(p)
    p.add_argument(
        "--timeout",
        type=positive_seconds("--timeout"),
        default=30.0,
        help="seconds before the host run counts as deadlocked",
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_check)
    p = sub.add_parser("source", help="write a self-contained CUDA source (kernel, and the table of FILE)")
    p.add_argument("file", nargs="?")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--index", type=non_negative_int, default=None)
    p.set_defaults(func=cmd_source)
    p = sub.add_parser("run", help="run FILE on the GPU, timed and verified (needs CuPy)")
    p.add_argument("file")
    _common(p)
    p.add_argument("--devices", default="0")
    p.add_argument("--iters", type=positive_int, default=20)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_run)
    p = sub.add_parser("calibrate", help="fit a cost model to GPU microbenchmarks and write it as YAML (needs CuPy)")
    p.add_argument("-o", "--output", required=True, help="the model file to write, e.g. models/mybox.yaml")
    p.add_argument("--devices", default="0", help="one device (virtual ranks) or two (the pair's link is measured)")
    p.add_argument("--base-model", default=None, help="model whose other parameters (links, switches) are kept")
    p.add_argument("--link-type", default="nvlink", help="the topology link type the measured link is written as")
    p.add_argument("--sizes", default="1KB:1GB", help="sweep sizes (factor 4), default 1KB:1GB")
    p.add_argument("--iters", type=positive_int, default=20)
    p.add_argument("--samples", default=None, help="also write the measured samples as CSV (to fit them again later)")
    p.add_argument("--from-samples", nargs="+", default=None,
                   help="fit the samples of earlier runs' CSVs, several together (no GPU needed)")  # fmt: skip
    p.set_defaults(func=cmd_calibrate)
    p = sub.add_parser("validate", help="run FILE on the GPU and in the simulator, side by side (needs CuPy)")
    p.add_argument("file")
    p.add_argument(
        "--index", type=non_negative_int, default=None, help="which schedule of a multi-<algo> MSCCL XML file"
    )
    p.add_argument("--dtype", default="float32", choices=("float32", "float16", "bfloat16"))
    p.add_argument("--size", default=None, help="one size, e.g. 1MB")
    p.add_argument("--sizes", default=None, help="a sweep LOW:HIGH (or a comma list), e.g. 1KB:1GB")
    p.add_argument("--factor", type=positive_int, default=2, help="sweep factor (default 2)")
    p.add_argument(
        "--topology", default=None, help="machine to simulate (default: the Program's, else fully-connected)"
    )
    p.add_argument("--model", default=None, help="cost model to simulate with, e.g. a calibrated models/NAME.yaml")
    p.add_argument("--devices", default="0")
    p.add_argument("--iters", type=positive_int, default=20)
    p.add_argument("--csv", default=None, help="write the sweep as CSV (atomically)")
    p.add_argument("--plot", default=None, help="write measured vs simulated as an image, e.g. out.png")
    p.add_argument("--measured", default=None,
                   help="take the measured times from an earlier sweep's CSV (no GPU needed; sizes default to its own)")  # fmt: skip
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_validate)
    return group


def main(argv: list[str] | None = None) -> int:
    """Run the ``gpu`` group on its own (for tests before the CLI wires it in)."""
    parser = argparse.ArgumentParser(prog="simcoll")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except SimcollError as exc:
        print(f"simcoll: error: {exc}", file=sys.stderr)
        return 2

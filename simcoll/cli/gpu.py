"""``simcoll gpu``: run schedules through simcoll's interpreter (simcoll.gpu).

    simcoll gpu check FILE [--size S] [--dtype T] [--index I] [--json]   # no GPU needed; exit 0 / 1
    simcoll gpu source [FILE] -o kernel.cu                               # self-contained CUDA source
    simcoll gpu run FILE --size S [--devices 0,1] [--iters N] [--json]   # needs CuPy and a GPU (else exit 2)

``check`` packs the table, runs the NumPy reference and the host-thread
interpreter core on the same inputs and reports whether both reach the
postcondition with identical bits.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from simcoll.errors import SimcollError

HELP = "run schedules through simcoll's GPU interpreter (check needs no GPU)"


def _program(path: str, index: int | None) -> Any:
    from simcoll.algorithm import Algorithm
    from simcoll.compiler import lower_algorithm
    from simcoll.interop.schedules import load_schedules

    schedules = load_schedules(path)
    if index is None and len(schedules) > 1:
        raise SimcollError(f"{path} holds {len(schedules)} schedules; pick one with --index")
    pick = index or 0
    if not 0 <= pick < len(schedules):
        raise SimcollError(f"{path}: --index {pick} is outside 0..{len(schedules) - 1}")
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
        print("simcoll gpu run: no CUDA GPU available (needs CuPy and a device: pip install -e .[gpu])")
        return 2
    from simcoll.gpu.runner import run

    program = _program(args.file, args.index)
    devices = [int(d) for d in args.devices.split(",")]
    result = run(program, _size(program, args), devices, iters=args.iters, dtype=args.dtype)
    if args.json:
        print(json.dumps(result.to_dict(), indent=1))
    else:
        print(f"{result.program}: {result.size_bytes} B  {result.time_s * 1e6:.2f} us  algbw {result.algbw_GBps:.2f} "
              f"GB/s  busbw {result.busbw_GBps:.2f} GB/s  {'verified' if result.verified else 'WRONG RESULT'}")  # fmt: skip
    return 0 if result.verified else 1


def _common(p: argparse.ArgumentParser, *, size: bool = True) -> None:
    p.add_argument("--index", type=int, default=None, help="which schedule of a multi-<algo> MSCCL XML file")
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
    p.add_argument("--timeout", type=float, default=30.0, help="seconds before the host run counts as deadlocked")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_check)
    p = sub.add_parser("source", help="write a self-contained CUDA source (kernel, and the table of FILE)")
    p.add_argument("file", nargs="?")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--index", type=int, default=None)
    p.set_defaults(func=cmd_source)
    p = sub.add_parser("run", help="run FILE on the GPU, timed and verified (needs CuPy)")
    p.add_argument("file")
    _common(p)
    p.add_argument("--devices", default="0")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_run)
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

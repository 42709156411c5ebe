"""``simcoll bounds``: lower bounds on steps, rounds per chunk and (with a
cost model or a size) time and algbw, from :mod:`simcoll.bounds`."""

from __future__ import annotations

import argparse
from fractions import Fraction

from .options import (
    add_chunks_option,
    add_collective_option,
    add_command,
    add_model_option,
    add_root_option,
    add_size_option,
    add_time_limit_option,
    add_topology_option,
    print_json,
)


def cmd_bounds(args: argparse.Namespace) -> int:
    from ..bounds import lower_bounds
    from ..collectives import make_collective
    from ..machines import load_machine
    from ..units import parse_size_range

    machine = load_machine(args.topology, args.model)
    coll = make_collective(args.collective, machine.num_ranks, args.chunks, root=args.root)
    size = parse_size_range(args.size)[0] if args.size else coll.size_chunks * (1 << 20)
    with_model = args.model is not None or args.size is not None
    b = lower_bounds(coll, machine, size if with_model else None, time_limit_s=args.time_limit)
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
        print_json(out)
        return 0
    frac = b.min_rounds_per_chunk
    print(
        f"{coll.name} on {machine.name}: at least {b.min_steps} steps, {frac} rounds per chunk"
        f" ({float(Fraction(frac)):.4g}){'' if b.exact else ' (over a family of cuts, not all)'}"
    )
    if with_model:
        print(
            f"with model {machine.model.name}, {size_label(size)}: time >= {b.time_bound_s * 1e6:.3f} us,"
            f" algbw <= {b.algbw_bound_GBps:.2f} GB/s"
        )
    return 0


def size_label(size_bytes: float) -> str:
    """``size_bytes`` for a text output: :func:`simcoll.units.format_size`
    ("8MB"), with the exact bytes beside it where that rounds ("2.93KB (3,000 B)")."""
    from ..errors import SizeError
    from ..units import format_size, parse_size

    shown = format_size(size_bytes)
    try:
        exact = parse_size(shown) == size_bytes
    except SizeError:  # "2.93KB" is not a whole number of bytes
        exact = False
    return shown if exact else f"{shown} ({size_bytes:,.0f} B)"


def _arguments(p: argparse.ArgumentParser) -> None:
    add_topology_option(p)
    add_collective_option(p)
    add_model_option(p, help="cost model (built-in name or YAML); enables the algbw bound")
    add_size_option(p, help="buffer size for the time bound (default 1 MiB per chunk)")
    add_chunks_option(p, "chunk factor C (default 1)", default=1)
    add_root_option(p)
    add_time_limit_option(p, "wall-clock limit in seconds (default: none); past it, exit 2", default=None)


def register(subparsers) -> None:
    """Add ``bounds`` to ``subparsers``."""
    add_command(
        subparsers, "bounds", cmd_bounds, "lower bounds on steps, rounds per chunk and (with a model) algbw", _arguments
    )

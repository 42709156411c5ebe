"""``simcoll topo``: built-in machines (list, show, draw) and, where
:mod:`simcoll.cli.topo_import` is installed, ``topo import``."""

from __future__ import annotations

import argparse
import importlib.util

from .options import add_command, add_group, add_output_option, print_json

TOPO_IMPORT = f"{__package__}.topo_import"


def cmd_list(args: argparse.Namespace) -> int:
    from ..machines import builtin_models, builtin_topologies, load_topology
    from ..topology_generators import TOPOLOGY_GENERATORS

    rows = []
    for name in builtin_topologies():
        topo = load_topology(name)
        rows.append({"name": name, "ranks": topo.num_ranks, "description": topo.description})
    if args.json:
        print_json(
            {
                "builtins": rows,
                "generators": [u for _, u in TOPOLOGY_GENERATORS.values()],
                "clusters": ["NODE*N (fat tree)", "NODE*N/rail (per-rail switches)"],
                "subsets": ["NODE[i,j,...] (those GPUs of NODE, ranked in that order)"],
                "models": builtin_models(),
            }
        )
        return 0
    for row in rows:
        print(f"{row['name']:<12} {row['ranks']:>3} GPUs  {row['description']}")
    print("generators: " + ", ".join(u for _, u in TOPOLOGY_GENERATORS.values()))
    print("clusters:   NODE*N (fat tree), NODE*N/rail (per-rail switches), e.g. dgx-a100*4")
    print("subsets:    NODE[i,j,...] keeps those GPUs of NODE, ranked in that order, e.g. l40s-pcie[0,1]")
    print("models:     " + ", ".join(builtin_models()))
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from ..machines import load_topology

    topo = load_topology(args.name)
    links = [
        {"src": lk.src, "dst": lk.dst, "type": lk.type, "count": lk.count, "directed": lk.directed} for lk in topo.links
    ]
    if args.json:
        print_json(
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


def cmd_draw(args: argparse.Namespace) -> int:
    from ..draw import draw_topology
    from ..machines import load_topology

    draw_topology(load_topology(args.name), args.output)
    print(f"wrote {args.output}")
    return 0


def _show_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", help="built-in name, generator (ring:8), cluster (dgx-a100*4) or YAML file")


def _draw_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("name")
    add_output_option(p, required=True, help="output image (.png, .svg, .pdf)")
    p.set_defaults(draws_image=True)


def _import_arguments(p: argparse.ArgumentParser) -> None:
    """``topo import``'s arguments and command, from :mod:`simcoll.cli.topo_import`."""
    module = importlib.import_module(TOPO_IMPORT)
    module.add_arguments(p)
    p.set_defaults(func=module.run)


def register(subparsers) -> None:
    """Add the ``topo`` group to ``subparsers``."""
    has_import = importlib.util.find_spec(TOPO_IMPORT) is not None
    topo = add_group(
        subparsers, "topo", "built-in machines: list, show, draw" + (", import" if has_import else ""), dest="topo"
    )
    add_command(topo, "list", cmd_list, "list built-in topologies, generators and models")
    add_command(topo, "show", cmd_show, "show a topology's components and links", _show_arguments)
    add_command(topo, "draw", cmd_draw, "draw a topology to an image", _draw_arguments)
    if has_import:
        add_command(
            topo,
            "import",
            None,
            "your own machine from nvidia-smi topo -m, an NCCL topology XML or rocm-smi --showtopo",
            _import_arguments,
            with_json=False,
        )

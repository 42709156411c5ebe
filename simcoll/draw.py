"""Drawing a topology with matplotlib: GPUs as squares coloured by node,
other components as circles; edge width grows with link multiplicity."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from .errors import TooLargeError, TopologyError
from .files import save_figure
from .limits import MAX_DRAWN_COMPONENTS

if TYPE_CHECKING:
    from .topology import Topology

_KIND_COLOURS = {
    "cpu": "#9ecae1",
    "host_memory": "#c6dbef",
    "nvswitch": "#fdae6b",
    "ib_switch": "#fd8d3c",
    "switch": "#fd8d3c",
    "pcie_switch": "#a1d99b",
    "root_complex": "#74c476",
    "nic": "#bcbddc",
}
_LINK_COLOURS = {"nvlink": "#2ca02c", "xgmi": "#d62728", "pcie": "#7f7f7f", "ib": "#1f77b4", "slingshot": "#1f77b4"}


def draw_topology(topology: Topology, path: str | Path) -> None:
    """Draw ``topology`` to the image ``path`` (its suffix picks the format).

    Refused, before any work, past :data:`~simcoll.limits.MAX_DRAWN_COMPONENTS`
    components (a :class:`~simcoll.errors.TooLargeError`)."""
    if len(topology.components) > MAX_DRAWN_COMPONENTS:
        raise TooLargeError(
            f"{topology.name}: {len(topology.components):,} components are more than topo draw lays out "
            f"(simcoll.limits.MAX_DRAWN_COMPONENTS = {MAX_DRAWN_COMPONENTS:,}); draw a few of its nodes instead"
        )
    import matplotlib
    import networkx as nx

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    graph = nx.Graph()
    for c in topology.components:
        graph.add_node(c.name)
    for link in topology.links:
        if graph.has_edge(link.src, link.dst):
            graph[link.src][link.dst]["count"] += link.count
        else:
            graph.add_edge(link.src, link.dst, count=link.count, type=link.type)
    gpus = [g.name for g in topology.gpus]
    if len(topology.nodes) <= 1 and len(graph) == len(gpus):
        pos = nx.circular_layout(graph)
    else:
        pos = nx.spring_layout(graph, seed=0, k=1.5 / len(graph) ** 0.5)
    size = max(6.0, min(16.0, len(graph) ** 0.5 * 2))
    fig, ax = plt.subplots(figsize=(size, size))
    for a, b, data in graph.edges(data=True):
        nx.draw_networkx_edges(
            graph,
            pos,
            edgelist=[(a, b)],
            width=0.8 + 1.2 * data["count"] ** 0.5,
            edge_color=_LINK_COLOURS.get(data["type"], "#bbbbbb"),
            ax=ax,
        )
    nodes = {c.name: c for c in topology.components}
    cmap = plt.get_cmap("tab10")
    nx.draw_networkx_nodes(
        graph,
        pos,
        nodelist=gpus,
        node_shape="s",
        node_size=500,
        ax=ax,
        node_color=[cmap((nodes[g].node or 0) % 10) for g in gpus],
    )
    others = [n for n in graph if n not in set(gpus)]
    nx.draw_networkx_nodes(
        graph,
        pos,
        nodelist=others,
        node_size=250,
        ax=ax,
        node_color=[_KIND_COLOURS.get(nodes[n].kind, "#dddddd") for n in others],
    )
    labels = {g.name: str(g.rank) for g in topology.gpus}
    labels.update({n: n.split(".")[-1] for n in others} if len(others) <= 40 else {})
    nx.draw_networkx_labels(graph, pos, labels=labels, font_size=7, ax=ax)
    used = sorted({d["type"] for _, _, d in graph.edges(data=True)})
    for t in used:
        ax.plot([], [], color=_LINK_COLOURS.get(t, "#bbbbbb"), label=t)
    ax.legend(loc="upper right", fontsize=8)
    ax.set_title(f"{topology.name}: {topology.num_ranks} GPUs (squares, labelled by rank)")
    ax.axis("off")
    fig.tight_layout()
    try:
        save_figure(fig, path, dpi=110, error=TopologyError)
    finally:
        plt.close(fig)

"""Finding machines by name: built-in topologies and models (package data),
generators, clusters and files; and the :class:`Machine` (topology + cost model).

Topology specs accepted everywhere (CLI ``--topology`` included):

- a built-in name: ``dgx1``, ``ndv2``, ``dgx2`` ... (see :func:`builtin_topologies`);
- a generator: ``ring:8``, ``line:4``, ``fully-connected:8``, ``hub-and-spoke:8``,
  ``torus2d:4x4``, ``hypercube:3``;
- a cluster: ``NODE*N`` (fat tree) or ``NODE*N/rail`` (per-rail switches),
  e.g. ``dgx-a100*4``, ``ndv2*2``; ``NODE*N/clos:radix=R,oversub=F`` (two-tier
  leaf-spine), options ``nics=K``, ``gdr=on|off`` (see
  :func:`simcoll.topology_generators.parse_fabric`);
- some of a node's GPUs: ``NODE[i,j,...]`` keeps GPUs ``i, j, ...`` ranked in
  that order, as ``CUDA_VISIBLE_DEVICES`` does (``l40s-pcie[0,1]``,
  ``dgx-h100[0,1]*2``; :func:`simcoll.topology_generators.gpu_subset`);
- a path to a YAML file.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cached_property, lru_cache
from importlib import resources
from pathlib import Path

from .cost_model import CostModel, load_model_file
from .errors import ModelError, TopologyError, UnknownMachineError, UnknownModelError
from .routes import Routes, route_shape, routes_of, shape_flow_graph
from .topology import Topology, load_topology_file
from .topology_generators import TOPOLOGY_GENERATORS, cluster, generate_topology, gpu_subset

_CLUSTER_RE = re.compile(
    r"^(?P<node>[A-Za-z0-9_.-]+(?:\[[^\[\]]*\])?)\*(?P<count>\d+)(?:/(?P<fabric>[a-z][a-z0-9=.,:-]*))?$"
)
_SUBSET_RE = re.compile(r"^(?P<node>[A-Za-z0-9_.:-]+)\[(?P<gpus>[^\[\]]*)\]$")


def _data_dir(package: str) -> Path:
    return Path(str(resources.files(package)))


def builtin_topologies() -> list[str]:
    """Names of the topologies shipped in ``topologies/``, sorted.

    Returns
    -------
    list of str
        Each a spec :func:`load_topology` accepts.

    Examples
    --------
    >>> "dgx1" in builtin_topologies()
    True
    """
    return sorted(p.stem for p in _data_dir("simcoll.topologies").glob("*.yaml"))


def builtin_models() -> list[str]:
    """Names of the cost models shipped in ``models/``, sorted.

    Returns
    -------
    list of str
        Each a spec :func:`load_model` accepts.

    Examples
    --------
    >>> {"dgx1", "generic", "ndv2-taccl"} <= set(builtin_models())
    True
    """
    return sorted(p.stem for p in _data_dir("simcoll.models").glob("*.yaml"))


def _is_path(spec: str) -> bool:
    return spec.endswith((".yaml", ".yml")) or "/" in spec and Path(spec).exists()


def _not_yaml(spec: str, what: str) -> str | None:
    """The message for a spec that names an existing file without a YAML
    extension (it is read as a name, and no built-in has it), else None."""
    if Path(spec).is_file():
        return f"{what} {spec!r}: the file exists but is not a .yaml file (name {what} files *.yaml or *.yml)"
    return None


def _with_model_beside(topology: Topology, path: Path) -> Topology:
    """``topology``, read from ``path``, with a ``default_model`` that names a
    file by a relative path resolved against the topology file's folder, so
    that the machine loads from any working directory (``topo import -o
    dir/machine.yaml`` records ``machine.model.yaml``). A file written when
    the path was recorded relative to the working directory still loads:
    where only that path exists, it is kept."""
    model = topology.default_model
    if not model or not (model.endswith((".yaml", ".yml")) or "/" in model) or Path(model).is_absolute():
        return topology  # a built-in model's name, or an absolute path
    beside = path.parent / model
    if beside.exists() or not Path(model).exists():
        return replace(topology, default_model=str(beside))
    return topology


def load_topology(spec: str) -> Topology:
    """Resolve a topology spec (module docstring) to a validated :class:`Topology`.

    Files are read every time (they may change); named specs are cached.
    :func:`simcoll.topology.save_topology` writes a file this reads back.

    Parameters
    ----------
    spec : str
        A built-in name, a generator, a cluster, some GPUs of a node or a
        YAML file (module docstring).

    Returns
    -------
    Topology

    Raises
    ------
    UnknownMachineError
        (a TopologyError) when the spec names no built-in, generator or file.
    TopologyError
        Naming the spec, file or field at fault.

    Examples
    --------
    >>> load_topology("dgx1").num_ranks, load_topology("ring:4").num_ranks, load_topology("dgx-a100*2").num_ranks
    (8, 4, 16)
    >>> load_topology("dgx9")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    simcoll.errors.UnknownMachineError: unknown topology 'dgx9': not a file, generator, cluster (NODE*N) or GPU subset (NODE[i,j]); built-ins: ...
    """
    if not isinstance(spec, str) or not spec:
        raise TopologyError(f"topology spec must be a non-empty string, got {spec!r}")
    if _is_path(spec):
        return _with_model_beside(load_topology_file(spec), Path(spec))
    return _load_named_topology(spec)


@lru_cache(maxsize=64)
def _load_named_topology(spec: str) -> Topology:
    match = _CLUSTER_RE.match(spec)
    if match:
        node = load_topology(match["node"])
        return cluster(node, int(match["count"]), match["fabric"] or "fat-tree")
    match = _SUBSET_RE.match(spec)
    if match:
        if not re.fullmatch(r"\d+(,\d+)*", match["gpus"]):
            raise TopologyError(
                f"{spec!r}: list the GPUs to keep as ranks separated by commas, no spaces, e.g. {match['node']}[0,1]"
            )
        return gpu_subset(load_topology(match["node"]), [int(g) for g in match["gpus"].split(",")])
    if ":" in spec:
        return generate_topology(spec)
    path = _data_dir("simcoll.topologies") / f"{spec}.yaml"
    if not path.exists():
        not_yaml = _not_yaml(spec, "topology")
        if not_yaml:
            raise UnknownMachineError(not_yaml)
        raise UnknownMachineError(
            f"unknown topology {spec!r}: not a file, generator, cluster (NODE*N) or GPU subset (NODE[i,j]); "
            f"built-ins: {', '.join(builtin_topologies())}; generators: {', '.join(TOPOLOGY_GENERATORS)}"
        )
    return load_topology_file(path)


def load_model(spec: str) -> CostModel:
    """Resolve a built-in model name or a YAML path to a :class:`CostModel`.

    :func:`simcoll.cost_model.save_model` writes a file this reads back.

    Parameters
    ----------
    spec : str
        A built-in name (:func:`builtin_models`) or a YAML file.

    Returns
    -------
    CostModel

    Raises
    ------
    UnknownModelError
        (a ModelError) when the spec names no built-in model or file.
    ModelError
        Naming the spec, file or field at fault.

    Examples
    --------
    >>> load_model("dgx1").link("nvlink").bandwidth_Bps
    25000000000.0
    """
    if _is_path(spec):
        return load_model_file(spec)
    return _load_builtin_model(spec)


@lru_cache(maxsize=64)
def _load_builtin_model(spec: str) -> CostModel:
    path = _data_dir("simcoll.models") / f"{spec}.yaml"
    if not path.exists():
        raise UnknownModelError(
            _not_yaml(spec, "model") or f"unknown model {spec!r}; built-ins: {', '.join(builtin_models())}"
        )
    return load_model_file(path)


@dataclass(frozen=True)
class Machine:
    """A topology with the cost model that gives its links speeds."""

    topology: Topology
    model: CostModel

    def __post_init__(self) -> None:
        missing = [t for t in self.topology.link_types if t not in self.model.links]
        if missing:
            raise ModelError(
                f"model {self.model.name!r} does not cover link type(s) {', '.join(missing)} "
                f"used by topology {self.topology.name!r}"
            )

    @property
    def name(self) -> str:
        return self.topology.name

    @property
    def num_ranks(self) -> int:
        return self.topology.num_ranks

    @cached_property
    def routes(self) -> Routes:
        return routes_of(self.topology)

    @cached_property
    def _route_cache(self) -> dict[tuple[int, int], Route | None]:
        return {}

    def __getstate__(self) -> dict:
        # a copy sent to a worker process (compare --jobs) leaves the caches behind: they can be
        # large, and the worker builds what it needs
        return {k: v for k, v in self.__dict__.items() if k in ("topology", "model")}

    def route(self, src: int, dst: int) -> Route | None:
        """α-β parameters of sending from rank ``src`` to rank ``dst`` alone on
        the machine, or ``None`` when no route avoids the other GPUs.

        The bandwidth is the max flow over all shortest routes (parallel links
        and switch planes add up); α is the largest α among the link types
        crossed (the models' α are end-to-end measurements, TACCL Table 1) plus
        the latency of every switch traversed.
        """
        key = (src, dst)
        if key not in self._route_cache:
            self._route_cache[key] = self._compute_route(src, dst)
        return self._route_cache[key]

    @cached_property
    def _route_shapes(self) -> dict[tuple, tuple[float, float, int, tuple[str, ...]]]:
        return {}

    def _compute_route(self, src: int, dst: int) -> Route | None:
        hops = self.routes.hops(src, dst)
        if hops is None:
            return None
        # routes of one shape (routes.route_shape) through components of the same kinds have the
        # same α and bandwidth: one max flow per shape
        edges, names = route_shape(hops, self.topology.gpu(src).name, self.topology.gpu(dst).name)
        kinds = tuple(self.topology.component(name).kind for name in names)
        shape = (edges, kinds)
        cost = self._route_shapes.get(shape)
        if cost is None:
            cost = self._route_shapes[shape] = self._shape_cost(edges, kinds)
        alpha, bandwidth, length, types = cost
        return Route(src, dst, alpha, bandwidth, length, types)

    def _shape_cost(
        self, edges: tuple[tuple[int, int, str, int], ...], kinds: tuple[str, ...]
    ) -> tuple[float, float, int, tuple[str, ...]]:
        """(α, bandwidth, hops, link types) of a route shape (:meth:`_compute_route`):
        its maximum flow and shortest path, read off directly where the shape
        is a chain (every component hands on to one next: most routes), else
        by networkx."""
        chain = _chain(edges, lambda kind: self.model.link(kind).bandwidth_Bps)
        if chain is not None:
            bandwidth, path = chain
        else:
            import networkx as nx

            flow, _ = shape_flow_graph(edges, lambda kind: self.model.link(kind).bandwidth_Bps)
            bandwidth = nx.maximum_flow_value(flow, 0, 1)
            path = nx.shortest_path(flow, 0, 1)
        types = tuple(sorted({kind for _, _, kind, _ in edges}))
        switch_latency = sum(self.model.switch_latency_s(kinds[n]) for n in path[1:-1])
        alpha = max(self.model.link(t).alpha_s for t in types) + switch_latency
        return alpha, bandwidth, len(path) - 1, types

    def with_launch(self, launch: str) -> Machine:
        """This machine with its collective calls launched as ``launch``:
        ``"threads"`` (one process driving several GPUs, nccl-tests ``-g 8``),
        ``"processes"`` (one per GPU: MPI, srun, torchrun) or ``"graphs"``
        (CUDA/HIP graphs); see :meth:`simcoll.cost_model.CostModel.with_launch`.

        Examples
        --------
        >>> load_machine("dgx1").with_launch("threads").model.launch
        'threads'
        """
        return Machine(self.topology, self.model.with_launch(launch))

    def transfer_time_s(self, src: int, dst: int, size_bytes: float) -> float:
        """α + n/B for one uncontended message."""
        route = self.route(src, dst)
        if route is None:
            raise TopologyError(f"{self.name}: no route from rank {src} to rank {dst}")
        return route.alpha_s + size_bytes / route.bandwidth_Bps


@dataclass(frozen=True)
class Route:
    """Cost of an uncontended rank-to-rank message: ``alpha_s + n / bandwidth_Bps``."""

    src: int
    dst: int
    alpha_s: float
    bandwidth_Bps: float
    hops: int
    link_types: tuple[str, ...]


def load_machine(topology: str | Topology, model: str | CostModel | None = None) -> Machine:
    """A :class:`Machine` from a topology and a cost model.

    Parameters
    ----------
    topology : str or Topology
        A topology spec (:func:`load_topology`) or a Topology.
    model : str or CostModel, optional
        A model spec (:func:`load_model`) or a CostModel; by default the
        topology's ``default_model`` (``generic`` if it names none).

    Returns
    -------
    Machine

    Raises
    ------
    UnknownMachineError, UnknownModelError
        For a spec that names nothing simcoll knows.
    TopologyError, ModelError
        For a bad spec, or a model that does not cover a link type of the
        topology.

    Examples
    --------
    >>> machine = load_machine("dgx1")
    >>> machine.num_ranks, machine.model.name
    (8, 'dgx1')
    >>> load_machine("ring:4", "ndv2-taccl").model.name
    'ndv2-taccl'
    """
    topo = load_topology(topology) if isinstance(topology, str) else topology
    if model is None:
        model = topo.default_model or "generic"
    cost = load_model(model) if isinstance(model, str) else model
    return Machine(topo, cost)


def _chain(
    edges: tuple[tuple[int, int, str, int], ...], link_Bps: Callable[[str], float]
) -> tuple[float, list[int]] | None:
    """(maximum flow, path) of a route shape from 0 to 1 that is a chain, each
    component handing on to one next (parallel links between two components
    adding up, as :func:`~simcoll.routes.shape_flow_graph` adds them): the
    least of its hops' capacities and the chain itself; None for any other
    shape."""
    nxt: dict[int, int] = {}
    capacity: dict[int, float] = {}
    for u, v, kind, count in edges:
        if nxt.setdefault(u, v) != v:
            return None
        capacity[u] = capacity.get(u, 0.0) + count * link_Bps(kind)
    path, node = [0], 0
    while node != 1:
        if node not in nxt or len(path) > len(nxt):
            return None
        node = nxt[node]
        path.append(node)
    if len(path) - 1 != len(nxt):
        return None  # (hops off the chain)
    return min(capacity[u] for u in path[:-1]), path


def as_machine(machine: Machine | str) -> Machine:
    """The :class:`Machine` a public function was given: a Machine as it is, or a
    topology spec (module docstring) with that topology's default model.

    Every function that needs a machine (generators, the verifier, costs,
    bounds, synthesis, the simulator) takes one through this helper, so that
    they all accept the same argument.

    Parameters
    ----------
    machine : Machine or str
        A machine, or a topology spec such as ``"dgx1"`` or ``"ring:8"``.

    Returns
    -------
    Machine

    Raises
    ------
    TopologyError
        When ``machine`` is neither (a bare :class:`Topology` included: wrap it
        with :func:`load_machine` to say which model prices it).

    Examples
    --------
    >>> as_machine("ring:4").num_ranks
    4
    """
    if isinstance(machine, Machine):
        return machine
    if isinstance(machine, str):
        return load_machine(machine)
    if isinstance(machine, Topology):
        raise TopologyError(
            f"expected a Machine or a topology spec, got the Topology {machine.name!r}: "
            "pass load_machine(topology) (its default model) or Machine(topology, model)"
        )
    raise TopologyError(f"expected a Machine or a topology spec, got {type(machine).__name__}")

"""TACCL communication sketches (TACCL §3, Appendix A, Listing 1) and the
logical topology a sketch carves out of a machine.

A sketch is JSON with the keys of Listing 1 (comments removed):

- ``intranode_sketch``: ``strategy`` ``"switch"`` (GPUs listed in
  ``switches``, local indices, are joined by switch-hyperedges: every ordered
  pair is a logical link; ``switch_hyperedge_strategy`` per switch is
  ``uc-max``, ``uc-min`` or ``free``) or ``"direct"`` (only GPU pairs joined by
  a physical link, e.g. the NVLinks of an NDv2, §3 Example 3.1).
- ``internode_sketch``: ``strategy`` ``"relay"`` with ``internode_conn``
  (``"i": [j1, j2]``: local GPU i of a node sends only to local GPUs j1, j2 of
  every other node), ``beta_split`` (``"i": n``: those sends get 1/n of the
  inter-node bandwidth, i.e. β × n) and optional ``chunk_to_relay_map``
  ``[r1, r2]`` (a chunk first held by local GPU rp leaves its node through
  local GPU ``(rp // r1) * r1 + r2``); or ``"none"`` (single node).
- ``symmetry_offsets``: ``[[o, g], ...]``: the rank rotation
  ``r -> (r // g) * g + (r % g + o) % g`` (with the matching chunk map) is an
  automorphism the algorithm must respect (B.1 eqs. 12-14).
- ``hyperparameters``: ``input_chunkup`` (chunks per GPU input buffer, §5.2)
  and ``input_size`` (the data ``input_chunkup`` splits: an Allgather GPU's
  input, an Alltoall GPU's block for each peer, see
  :mod:`~simcoll.synthesis.taccl.synthesizer`; e.g. ``"1M"``, binary units as
  :func:`simcoll.units.parse_size`).

Optional ``name`` and ``description`` document the sketch. A sketch is
checked against a machine by :func:`logical_topology`: a GPU index outside the
node, an inter-node link with no physical route, a symmetry that is not an
automorphism of the logical topology, or a logical topology over which some
chunk cannot reach a rank the collective needs it on all raise
:class:`~simcoll.errors.SynthesisError` before any solver runs.

Every logical link gets the α-β of the physical route between its GPUs
(:meth:`simcoll.machines.Machine.route`, TACCL Table 1 in the ``*-taccl``
models), with β multiplied by the sender's ``beta_split`` on inter-node links.
Inter-node links of one GPU form a NIC hyperedge (one send and one receive at a
time, as TACCL's IB switch); they are the only links where chunks may travel
contiguously (§5.1: TACCL uses contiguity only for IB).

>>> sk = load_sketch("ndv2-sk-1")
>>> sk.input_chunkup, sk.internode_conn
(1, {1: (0,)})
"""

from __future__ import annotations

import json
import math
from collections import deque
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

from ...collectives import Collective
from ...errors import SimcollError, SynthesisError
from ...files import read_text
from ...machines import Machine
from ...units import parse_size

STRATEGIES_INTRA = ("switch", "direct")
STRATEGIES_INTER = ("relay", "none")
HYPEREDGE_POLICIES = ("uc-max", "uc-min", "free")
_TOP_KEYS = {"name", "description", "intranode_sketch", "internode_sketch", "symmetry_offsets", "hyperparameters"}


@dataclass(frozen=True)
class Sketch:
    """A parsed, self-consistent communication sketch (module docstring)."""

    name: str
    intranode_strategy: str
    switches: tuple[tuple[int, ...], ...] = ()
    switch_policies: tuple[str, ...] = ()
    internode_strategy: str = "none"
    internode_conn: dict[int, tuple[int, ...]] = field(default_factory=dict)
    beta_split: dict[int, int] = field(default_factory=dict)
    chunk_to_relay_map: tuple[int, int] | None = None
    symmetry_offsets: tuple[tuple[int, int], ...] = ()
    input_chunkup: int = 1
    input_size_bytes: int = 1 << 20
    description: str = ""

    def with_changes(self, **changes: Any) -> Sketch:
        """A copy with some fields replaced, e.g. ``symmetry_offsets=((8, 80),)``."""
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        intra: dict[str, Any] = {"strategy": self.intranode_strategy}
        if self.intranode_strategy == "switch":
            intra["switches"] = [list(s) for s in self.switches]
            intra["switch_hyperedge_strategy"] = list(self.switch_policies)
        inter: dict[str, Any] = {"strategy": self.internode_strategy}
        if self.internode_strategy == "relay":
            inter["internode_conn"] = {str(k): list(v) for k, v in self.internode_conn.items()}
            inter["beta_split"] = {str(k): v for k, v in self.beta_split.items()}
            if self.chunk_to_relay_map:
                inter["chunk_to_relay_map"] = list(self.chunk_to_relay_map)
        return {
            "name": self.name,
            **({"description": self.description} if self.description else {}),
            "intranode_sketch": intra,
            "internode_sketch": inter,
            "symmetry_offsets": [list(s) for s in self.symmetry_offsets],
            "hyperparameters": {"input_chunkup": self.input_chunkup, "input_size": self.input_size_bytes},
        }


def builtin_sketches() -> list[str]:
    """Names of the sketches shipped in ``simcoll.sketches``."""
    return sorted(p.stem for p in Path(str(resources.files("simcoll.sketches"))).glob("*.json"))


def load_sketch(spec: str | Path | dict) -> Sketch:
    """A sketch by built-in name (``"dgx2-sk-1"``), JSON file path, or dict."""
    if isinstance(spec, dict):
        return sketch_from_dict(spec, "<sketch>")
    path = Path(spec)
    if not path.exists():
        builtin = Path(str(resources.files("simcoll.sketches"))) / f"{spec}.json"
        if not builtin.exists():
            raise SynthesisError(
                f"unknown sketch {str(spec)!r}: not a file; built-ins: {', '.join(builtin_sketches())}"
            )
        path = builtin
    try:
        data = json.loads(read_text(path))
    except json.JSONDecodeError as exc:
        raise SynthesisError(f"{path}: not valid JSON: {exc}") from None
    data.setdefault("name", path.stem)
    return sketch_from_dict(data, str(path))


def _int(value: Any, where: str, least: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise SynthesisError(f"{where}: expected an integer >= {least}, got {value!r}")
    return value


def _reject_unknown(data: dict, allowed: set[str], where: str) -> None:
    extra = sorted(set(data) - allowed)
    if extra:
        raise SynthesisError(f"{where}: unknown field(s) {', '.join(extra)}; allowed: {', '.join(sorted(allowed))}")


def sketch_from_dict(data: Any, where: str = "<sketch>") -> Sketch:
    """Parse and check the structure of a sketch (machine-independent checks)."""
    if not isinstance(data, dict):
        raise SynthesisError(f"{where}: a sketch is a JSON object")
    _reject_unknown(data, _TOP_KEYS, where)
    intra = data.get("intranode_sketch", {"strategy": "direct"})
    if not isinstance(intra, dict):
        raise SynthesisError(f"{where}: intranode_sketch must be an object")
    _reject_unknown(intra, {"strategy", "switches", "switch_hyperedge_strategy"}, f"{where}: intranode_sketch")
    strategy = intra.get("strategy", "direct")
    if strategy not in STRATEGIES_INTRA:
        raise SynthesisError(f"{where}: intranode_sketch.strategy {strategy!r} is not one of {STRATEGIES_INTRA}")
    switches: tuple[tuple[int, ...], ...] = ()
    policies: tuple[str, ...] = ()
    if strategy == "switch":
        raw = intra.get("switches")
        if not isinstance(raw, list) or not raw or not all(isinstance(s, list) and len(s) >= 2 for s in raw):
            raise SynthesisError(f"{where}: intranode_sketch.switches must be a list of GPU lists (2 or more each)")
        switches = tuple(tuple(_int(g, f"{where}: intranode_sketch.switches") for g in s) for s in raw)
        pol = intra.get("switch_hyperedge_strategy", ["free"] * len(switches))
        if not isinstance(pol, list) or len(pol) != len(switches):
            raise SynthesisError(f"{where}: switch_hyperedge_strategy needs one policy per switch ({len(switches)})")
        for p in pol:
            if p not in HYPEREDGE_POLICIES:
                raise SynthesisError(f"{where}: switch_hyperedge_strategy {p!r} is not one of {HYPEREDGE_POLICIES}")
        policies = tuple(pol)
    inter = data.get("internode_sketch", {"strategy": "none"})
    if not isinstance(inter, dict):
        raise SynthesisError(f"{where}: internode_sketch must be an object")
    _reject_unknown(
        inter, {"strategy", "internode_conn", "beta_split", "chunk_to_relay_map"}, f"{where}: internode_sketch"
    )
    istrategy = inter.get("strategy", "none")
    if istrategy not in STRATEGIES_INTER:
        raise SynthesisError(f"{where}: internode_sketch.strategy {istrategy!r} is not one of {STRATEGIES_INTER}")
    conn: dict[int, tuple[int, ...]] = {}
    split: dict[int, int] = {}
    relay_map = None
    if istrategy == "relay":
        raw_conn = inter.get("internode_conn")
        if not isinstance(raw_conn, dict) or not raw_conn:
            raise SynthesisError(f"{where}: internode_sketch.internode_conn must map sender GPUs to receiver lists")
        for k, v in raw_conn.items():
            key = _gpu_key(k, f"{where}: internode_conn")
            if not isinstance(v, list) or not v:
                raise SynthesisError(f"{where}: internode_conn[{k!r}] must be a non-empty list of GPUs")
            conn[key] = tuple(_int(g, f"{where}: internode_conn[{k!r}]") for g in v)
        raw_split = inter.get("beta_split", {})
        if not isinstance(raw_split, dict):
            raise SynthesisError(f"{where}: internode_sketch.beta_split must be an object")
        for k, v in raw_split.items():
            key = _gpu_key(k, f"{where}: beta_split")
            if key not in conn:
                raise SynthesisError(f"{where}: beta_split names GPU {key}, which internode_conn does not list")
            split[key] = _int(v, f"{where}: beta_split[{k!r}]", 1)
        raw_map = inter.get("chunk_to_relay_map")
        if raw_map is not None:
            if not isinstance(raw_map, list) or len(raw_map) != 2:
                raise SynthesisError(f"{where}: chunk_to_relay_map must be [r1, r2]")
            relay_map = (
                _int(raw_map[0], f"{where}: chunk_to_relay_map", 1),
                _int(raw_map[1], f"{where}: chunk_to_relay_map"),
            )
    sym = data.get("symmetry_offsets", [])
    if not isinstance(sym, list) or not all(isinstance(s, list) and len(s) == 2 for s in sym):
        raise SynthesisError(f"{where}: symmetry_offsets must be a list of [offset, group size] pairs")
    symmetry = tuple((_int(o, f"{where}: symmetry_offsets"), _int(g, f"{where}: symmetry_offsets", 1)) for o, g in sym)
    hyper = data.get("hyperparameters", {})
    if not isinstance(hyper, dict):
        raise SynthesisError(f"{where}: hyperparameters must be an object")
    _reject_unknown(hyper, {"input_chunkup", "input_size"}, f"{where}: hyperparameters")
    chunkup = _int(hyper.get("input_chunkup", 1), f"{where}: hyperparameters.input_chunkup", 1)
    try:
        size = parse_size(hyper.get("input_size", "1M"))
    except SimcollError as exc:
        raise SynthesisError(f"{where}: hyperparameters.input_size: {exc}") from None
    return Sketch(
        name=str(data.get("name", "sketch")),
        description=str(data.get("description", "")),
        intranode_strategy=strategy,
        switches=switches,
        switch_policies=policies,
        internode_strategy=istrategy,
        internode_conn=conn,
        beta_split=split,
        chunk_to_relay_map=relay_map,
        symmetry_offsets=symmetry,
        input_chunkup=chunkup,
        input_size_bytes=size,
    )


def _gpu_key(key: Any, where: str) -> int:
    try:
        value = int(key)
    except (TypeError, ValueError):
        raise SynthesisError(f"{where}: key {key!r} is not a GPU index") from None
    return _int(value, where)


# -- logical topology ---------------------------------------------------------------
@dataclass(frozen=True)
class LogicalLink:
    """A link of the logical topology: α (s) and β (s/byte) of its route;
    ``switched`` when it belongs to a switch-hyperedge (with its policy),
    ``internode`` when it crosses nodes (a NIC hyperedge; contiguity allowed)."""

    src: int
    dst: int
    alpha_s: float
    beta_s_per_byte: float
    switched: bool = False
    policy: str = "free"
    internode: bool = False

    def time_s(self, nbytes: float) -> float:
        return self.alpha_s + self.beta_s_per_byte * nbytes


@dataclass(frozen=True)
class LogicalTopology:
    """The links a sketch allows (TACCL §3.1), with node structure, the
    chunk-to-relay restriction and the symmetry rotations."""

    num_ranks: int
    gpus_per_node: int
    links: dict[tuple[int, int], LogicalLink]
    relay: tuple[int, int] | None = None
    relay_at_src: bool = True
    symmetry: tuple[tuple[int, int], ...] = ()

    def node(self, rank: int) -> int:
        return rank // self.gpus_per_node

    def local(self, rank: int) -> int:
        return rank % self.gpus_per_node

    def reversed(self) -> LogicalTopology:
        """Every link turned around (SCCL §3.5 / TACCL §5.3 for ReduceScatter);
        the chunk-to-relay map does not carry over (it names senders)."""
        links = {(d, s): replace(lk, src=d, dst=s) for (s, d), lk in self.links.items()}
        return replace(self, links=links, relay=None)

    def allows(self, link: LogicalLink, origin: int) -> bool:
        """Whether a chunk first held by rank ``origin`` may use ``link``
        (the chunk-to-relay map restricts which GPU leaves the origin node)."""
        if self.relay is None or not link.internode or self.node(link.src) != self.node(origin):
            return True
        r1, r2 = self.relay
        return self.local(link.src) == (self.local(origin) // r1) * r1 + r2

    def rotation(self, offset: int, group: int, rank: int) -> int:
        return (rank // group) * group + (rank % group + offset) % group


def logical_topology(machine: Machine, sketch: Sketch) -> LogicalTopology:
    """Build and check the logical topology of ``sketch`` on ``machine``."""
    topo = machine.topology
    p = topo.num_ranks
    nodes = topo.nodes or (0,)
    per = p // len(nodes)
    if per * len(nodes) != p or any(topo.node_of(r) != r // per for r in range(p) if topo.gpu(r).node is not None):
        raise SynthesisError(f"{topo.name}: TACCL sketches need equal nodes with node-major ranks")
    where = f"sketch {sketch.name!r} on {topo.name}"

    def check_gpu(g: int, field_name: str) -> None:
        if not 0 <= g < per:
            raise SynthesisError(f"{where}: {field_name} names GPU {g}, but a node has GPUs 0..{per - 1}")

    links: dict[tuple[int, int], LogicalLink] = {}

    def add(s: int, d: int, switched: bool, policy: str, internode: bool, split: int = 1) -> None:
        route = machine.route(s, d)
        if route is None:
            raise SynthesisError(f"{where}: logical link {s}->{d} has no physical route")
        links[(s, d)] = LogicalLink(
            s, d, route.alpha_s, split / route.bandwidth_Bps, switched=switched, policy=policy, internode=internode
        )

    for node in range(len(nodes)):
        base = node * per
        if sketch.intranode_strategy == "switch":
            for sw, policy in zip(sketch.switches, sketch.switch_policies, strict=True):
                for g in sw:
                    check_gpu(g, "intranode_sketch.switches")
                for a in sw:
                    for b in sw:
                        if a != b:
                            add(base + a, base + b, True, policy, False)
        else:
            for a in range(per):
                for b in range(per):
                    if a != b and machine.routes.direct_links(base + a, base + b) > 0:
                        add(base + a, base + b, False, "free", False)
    if sketch.internode_strategy == "relay":
        for s, dsts in sketch.internode_conn.items():
            check_gpu(s, "internode_sketch.internode_conn")
            for d in dsts:
                check_gpu(d, "internode_sketch.internode_conn")
        if sketch.chunk_to_relay_map:
            r1, r2 = sketch.chunk_to_relay_map
            for g in range(per):
                relay = (g // r1) * r1 + r2
                if relay not in sketch.internode_conn:
                    raise SynthesisError(
                        f"{where}: chunk_to_relay_map {list(sketch.chunk_to_relay_map)} sends GPU {g}'s chunks "
                        f"through GPU {relay}, which internode_conn does not list as a sender"
                    )
        for a in range(len(nodes)):
            for b in range(len(nodes)):
                if a == b:
                    continue
                for s, dsts in sketch.internode_conn.items():
                    for d in dsts:
                        add(a * per + s, b * per + d, False, "free", True, sketch.beta_split.get(s, 1))
    elif len(nodes) > 1:
        raise SynthesisError(f"{where}: {len(nodes)} nodes but internode_sketch.strategy is 'none'")
    for o, g in sketch.symmetry_offsets:
        if p % g or g <= o:
            raise SynthesisError(
                f"{where}: symmetry_offsets [{o}, {g}]: group size must divide {p} ranks and exceed the offset"
            )
    logical = LogicalTopology(p, per, links, sketch.chunk_to_relay_map, True, sketch.symmetry_offsets)
    _check_automorphisms(logical, where)
    return logical


def _check_automorphisms(logical: LogicalTopology, where: str) -> None:
    for o, g in logical.symmetry:
        for (s, d), lk in logical.links.items():
            image = (logical.rotation(o, g, s), logical.rotation(o, g, d))
            other = logical.links.get(image)
            if other is None or not math.isclose(other.time_s(1e6), lk.time_s(1e6), rel_tol=1e-9):
                raise SynthesisError(
                    f"{where}: symmetry_offsets [{o}, {g}] is not an automorphism of the logical topology: "
                    f"link {s}->{d} maps to {image[0]}->{image[1]}, which is "
                    + ("missing" if other is None else "a link with other α-β")
                )
        if logical.relay:
            r1, r2 = logical.relay
            for r in range(logical.num_ranks):
                img = logical.rotation(o, g, r)
                relay = logical.node(r) * logical.gpus_per_node + (logical.local(r) // r1) * r1 + r2
                img_relay = logical.node(img) * logical.gpus_per_node + (logical.local(img) // r1) * r1 + r2
                if logical.rotation(o, g, relay) != img_relay:
                    raise SynthesisError(
                        f"{where}: symmetry_offsets [{o}, {g}] does not commute with chunk_to_relay_map "
                        f"(rank {r}'s relay {relay} maps to {logical.rotation(o, g, relay)}, not {img_relay})"
                    )


def chunk_distances(logical: LogicalTopology, origin: int) -> dict[int, int]:
    """Hop distances from ``origin`` over the links a chunk from there may use."""
    out_links: dict[int, list[int]] = {}
    for (s, d), lk in logical.links.items():
        if logical.allows(lk, origin):
            out_links.setdefault(s, []).append(d)
    dist = {origin: 0}
    queue = deque([origin])
    while queue:
        u = queue.popleft()
        for v in out_links.get(u, ()):
            if v not in dist:
                dist[v] = dist[u] + 1
                queue.append(v)
    return dist


def check_satisfiable(logical: LogicalTopology, collective: Collective, where: str) -> None:
    """Raise if some chunk cannot reach a rank the postcondition names."""
    cache: dict[int, dict[int, int]] = {}
    for c, r in sorted(collective.post):
        holders = collective.contributors(c)
        if r in holders:
            continue
        for h in holders:
            if h not in cache:
                cache[h] = chunk_distances(logical, h)
        if not any(r in cache[h] for h in holders):
            raise SynthesisError(
                f"{where}: the logical topology cannot satisfy {collective.name}: chunk {c} (on rank "
                f"{min(holders)}) can never reach rank {r} over the sketch's links"
            )

"""SCCL / msccl-tools synthesizer JSON, imported as an :class:`Algorithm`.

The public SCCL synthesizer (SCCL §3; the ``sccl``/``msccl`` Python packages)
serialises an algorithm as JSON objects tagged ``"sccl_type"`` (``"msccl_type"``
in msccl-tools)::

    {"sccl_type": "algorithm", "name": ..., "instance": {...},
     "input_map":  {"<rank>": [address, ...]},     # buffer addresses in each rank's input
     "output_map": {"<rank>": [address, ...]},
     "steps": [{"sccl_type": "step", "rounds": R_s, "sends": [[address, src, dst], ...]}, ...],
     "collective": {"sccl_type": "collective", "name": ..., "nodes": P,
                    "chunks": [{"sccl_type": "chunk", "pre": [ranks], "post": [ranks], "addr": a}, ...]},
     "topology": {"sccl_type": "topology", "name": ..., "links": [[...]], "switches": [...]}}

A send moves every chunk stored at ``address`` that ``src`` holds to ``dst``
(SCCL's run semantics, §3.3); extra fields of a send beyond the first three
are ignored. Several chunks at one address are the contributions of a
combining collective (Allreduce, ReduceScatter, Reduce).

Mapping: a chunk of simcoll's Algorithm is an SCCL *address*; the collective's
precondition is which ranks hold (a contribution of) each address, the
postcondition which ranks need it (from ``collective.chunks``, else from
``input_map``/``output_map``). When the name and relations match a built-in
collective (``make_collective``) that one is used, otherwise a custom
collective. SCCL's state is the set of contributions each rank holds per
address (a send unites the sets); a send is a ``copy`` when the destination
holds nothing the incoming value lacks (it is overwritten, as in the Allgather
half of an Allreduce), a ``reduce`` otherwise (the verifier then reports any
contribution counted twice).
Step ``s`` of the JSON is step ``s`` of the Algorithm, with its rounds. The
topology's ``links`` (``links[dst][src]`` chunks per round) and ``switches``
(``[srcs, dsts, bandwidth, name]``) become the Algorithm's bandwidth relation,
so the verifier checks SCCL's bandwidth constraints.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..algorithm import Algorithm, BandwidthConstraint, Transfer
from ..collectives import COLLECTIVES, Collective, canonical_name, custom_collective, make_collective
from ..errors import AlgorithmError, CollectiveError, SimcollError
from ..files import parse_json, read_text

_TYPE_KEYS = ("sccl_type", "msccl_type")


def is_sccl_json(data: Any) -> bool:
    """Whether decoded JSON has the shape of an SCCL/msccl-tools algorithm:
    tagged ``"sccl_type"``/``"msccl_type": "algorithm"``, or holding
    ``steps``, ``input_map`` and ``output_map``.

    Examples
    --------
    >>> is_sccl_json({"msccl_type": "algorithm"}), is_sccl_json({"format": "simcoll.algorithm"})
    (True, False)
    """
    if not isinstance(data, Mapping):
        return False
    if any(data.get(k) == "algorithm" for k in _TYPE_KEYS):
        return True
    return {"steps", "input_map", "output_map"} <= set(data)


def read_sccl_json(path: str | Path) -> Algorithm:
    """The :class:`Algorithm` of an SCCL synthesizer JSON file.

    Parameters
    ----------
    path : str or Path
        The file.

    Returns
    -------
    Algorithm
        Its steps and transfers, for the collective its maps imply.

    Raises
    ------
    AlgorithmError
        Naming the file and the field for unreadable or malformed input.

    Examples
    --------
    >>> import json, tempfile
    >>> path = Path(tempfile.mkdtemp()) / "ag.json"
    >>> _ = path.write_text(json.dumps({"sccl_type": "algorithm", "input_map": {"0": [0], "1": [1]},
    ...     "output_map": {"0": [0, 1], "1": [0, 1]},
    ...     "steps": [{"rounds": 1, "sends": [[0, 0, 1], [1, 1, 0]]}]}))
    >>> algo = read_sccl_json(path)
    >>> algo.collective.num_ranks, len(algo.transfers)
    (2, 2)
    """
    return parse_sccl_json(read_text(path, error=AlgorithmError), str(path))


def parse_sccl_json(text: str, where: str = "SCCL JSON") -> Algorithm:
    """The :class:`Algorithm` of SCCL synthesizer JSON text.

    Parameters
    ----------
    text : str
        The JSON text.
    where : str
        What the text is (a file name), the prefix of error messages.

    Raises
    ------
    AlgorithmError
        Naming ``where`` and the field for malformed input.

    Examples
    --------
    >>> parse_sccl_json('{"steps": [], "input_map": {"0": [0]}, "output_map": {"0": [0]}}').num_ranks
    1
    """
    return algorithm_from_sccl_dict(parse_json(text, where, error=AlgorithmError), where)


def algorithm_from_sccl_dict(data: Mapping[str, Any], where: str = "SCCL JSON") -> Algorithm:
    """An :class:`Algorithm` from decoded SCCL synthesizer JSON.

    Parameters
    ----------
    data : Mapping
        The decoded JSON object.
    where : str
        What the data came from, the prefix of error messages.

    Raises
    ------
    AlgorithmError
        Naming ``where`` and the field for malformed input.

    Examples
    --------
    >>> algo = algorithm_from_sccl_dict({"sccl_type": "algorithm", "name": "ag",
    ...     "input_map": {"0": [0], "1": [1]}, "output_map": {"0": [0, 1], "1": [0, 1]},
    ...     "steps": [{"sccl_type": "step", "rounds": 1, "sends": [[0, 0, 1], [1, 1, 0]]}],
    ...     "collective": {"sccl_type": "collective", "name": "Allgather", "nodes": 2,
    ...                    "chunks": [{"pre": [0], "post": [0, 1], "addr": 0},
    ...                               {"pre": [1], "post": [0, 1], "addr": 1}]}})
    >>> algo.collective.name, len(algo.transfers)
    ('allgather', 2)
    """
    try:
        return _import(data, where)
    except SimcollError as exc:
        if str(exc).startswith(where):
            raise
        raise AlgorithmError(f"{where}: {exc}") from None


def _fail(where: str, message: str) -> AlgorithmError:
    return AlgorithmError(f"{where}: {message}")


def _int(value: Any, where: str, field: str, least: int = 0) -> int:
    if isinstance(value, str) and value.lstrip("-").isdigit():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        raise _fail(where, f"{field} must be an integer >= {least}, got {value!r}")
    return value


def _import(data: Any, where: str) -> Algorithm:
    if not is_sccl_json(data):
        raise _fail(where, 'not an SCCL algorithm (expected "sccl_type": "algorithm" or steps/input_map/output_map)')
    name = data.get("name") or "sccl"
    if not isinstance(name, str):
        raise _fail(where, f"name must be a string, got {name!r}")
    coll_data = data.get("collective")
    steps = data.get("steps")
    if not isinstance(steps, list):
        raise _fail(where, f"steps must be a list, got {type(steps).__name__}")
    input_map = _rank_map(data.get("input_map"), where, "input_map")
    output_map = _rank_map(data.get("output_map"), where, "output_map")

    # -- chunks: address -> list of (pre ranks, post ranks) ----------------------------
    if isinstance(coll_data, Mapping) and coll_data.get("chunks") is not None:
        num_ranks = _int(coll_data.get("nodes"), where, "collective.nodes", 1)
        chunks = coll_data["chunks"]
        if not isinstance(chunks, list):
            raise _fail(where, "collective.chunks must be a list")
        contributions: dict[int, list[int]] = {}
        needed: dict[int, set[int]] = {}
        for i, ch in enumerate(chunks):
            field = f"collective.chunks[{i}]"
            if not isinstance(ch, Mapping) or not {"pre", "post", "addr"} <= set(ch):
                raise _fail(where, f"{field} needs pre, post and addr")
            addr = _int(ch["addr"], where, f"{field}.addr")
            for key in ("pre", "post"):
                if not isinstance(ch[key], list):
                    raise _fail(where, f"{field}.{key} must be a list of ranks")
            pre = [_int(r, where, f"{field}.pre", 0) for r in ch["pre"]]
            post = [_int(r, where, f"{field}.post", 0) for r in ch["post"]]
            for r in pre + post:
                if r >= num_ranks:
                    raise _fail(where, f"{field}: rank {r} is not below nodes={num_ranks}")
            contributions.setdefault(addr, []).extend(pre)
            needed.setdefault(addr, set()).update(post)
        per_address = Counter(int(ch["addr"]) for ch in chunks)
        combining = any(n > 1 for n in per_address.values())
        coll_name = coll_data.get("name") or name
    else:
        ranks_seen = set(input_map) | set(output_map)
        num_ranks = 1 + max(ranks_seen, default=-1)
        if num_ranks < 1:
            raise _fail(where, "no collective and empty input_map/output_map: cannot tell the ranks")
        contributions, needed = {}, {}
        for r, addrs in input_map.items():
            for a in addrs:
                contributions.setdefault(a, []).append(r)
        for r, addrs in output_map.items():
            for a in addrs:
                needed.setdefault(a, set()).add(r)
        combining = any(len(rs) > 1 for rs in contributions.values())
        coll_name = coll_data.get("name") if isinstance(coll_data, Mapping) else name
    for a in needed:
        if not contributions.get(a):
            raise _fail(where, f"address {a} is required in the postcondition but no rank starts with it")
    collective = _collective(str(coll_name), num_ranks, contributions, needed, combining, data.get("instance"))

    # -- transfers --------------------------------------------------------------------
    # SCCL's state: which contributions (indices into contributions[a]) each rank holds.
    held: dict[tuple[int, int], frozenset[int]] = {}
    for a, rs in contributions.items():
        for i, r in enumerate(rs):
            held[(a, r)] = held.get((a, r), frozenset()) | {i}
    transfers, rounds = [], []
    for s, step in enumerate(steps):
        field = f"steps[{s}]"
        if not isinstance(step, Mapping) or "sends" not in step:
            raise _fail(where, f"{field} needs sends (and rounds)")
        rounds.append(_int(step.get("rounds", 1), where, f"{field}.rounds", 1))
        if not isinstance(step["sends"], list):
            raise _fail(where, f"{field}.sends must be a list")
        arrivals = []
        for k, send in enumerate(step["sends"]):
            sfield = f"{field}.sends[{k}]"
            if not isinstance(send, (list, tuple)) or len(send) < 3:
                raise _fail(where, f"{sfield} must be [chunk, src, dst, ...], got {send!r}")
            addr = _int(send[0], where, f"{sfield} chunk")
            src = _int(send[1], where, f"{sfield} src")
            dst = _int(send[2], where, f"{sfield} dst")
            for label, r in (("src", src), ("dst", dst)):
                if r >= num_ranks:
                    raise _fail(where, f"{sfield}: {label} {r} is not below {num_ranks} ranks")
            if addr not in contributions:
                raise _fail(where, f"{sfield}: chunk {addr} is not an address of the collective")
            incoming = held.get((addr, src), frozenset())
            present = held.get((addr, dst), frozenset())
            op = "reduce" if combining and not present <= incoming else "copy"
            transfers.append(Transfer(chunk=addr, src=src, dst=dst, op=op, step=s))
            arrivals.append(((addr, dst), incoming))
        for slot, incoming in arrivals:
            held[slot] = held.get(slot, frozenset()) | incoming
    bandwidth = _bandwidth(data.get("topology"), num_ranks, where)
    metadata: dict[str, Any] = {"source": "sccl-json"}
    topo = data.get("topology")
    if isinstance(topo, Mapping) and topo.get("name"):
        metadata["sccl_topology"] = topo["name"]
    if isinstance(data.get("instance"), Mapping):
        metadata["sccl_instance"] = dict(data["instance"])
    return Algorithm(
        name=name,
        collective=collective,
        transfers=tuple(transfers),
        rounds_per_step=tuple(rounds),
        bandwidth=bandwidth,
        metadata=metadata,
    )


def _rank_map(raw: Any, where: str, field: str) -> dict[int, list[int]]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise _fail(where, f"{field} must map ranks to address lists, got {type(raw).__name__}")
    out = {}
    for key, addrs in raw.items():
        rank = _int(key, where, f"{field} key")
        if not isinstance(addrs, (list, tuple)):
            raise _fail(where, f"{field}[{key!r}] must be a list of addresses")
        out[rank] = [_int(a, where, f"{field}[{key!r}]") for a in addrs]
    return out


def _collective(
    name: str,
    num_ranks: int,
    contributions: Mapping[int, list[int]],
    needed: Mapping[int, set[int]],
    combining: bool,
    instance: Any,
) -> Collective:
    """A built-in collective when name and relations match, else a custom one."""
    pre = {(a, r) for a, rs in contributions.items() for r in rs}
    post = {(a, r) for a, rs in needed.items() for r in rs}
    num_addresses = len(contributions)
    try:
        key = canonical_name(name)
    except CollectiveError:
        key = None
    if key in COLLECTIVES:
        for factor in _factors(key, num_ranks, num_addresses, instance):
            for root in range(num_ranks) if key in ("broadcast", "reduce", "gather", "scatter") else [None]:
                try:
                    candidate = make_collective(key, num_ranks, factor, root=root)
                except CollectiveError:
                    continue
                if candidate.pre == pre and candidate.post == post and candidate.combining == combining:
                    return candidate
    inputs = [sorted(a for a, rs in contributions.items() if r in rs) for r in range(num_ranks)]
    outputs = [sorted(a for a, rs in needed.items() if r in rs) for r in range(num_ranks)]
    return custom_collective(name, inputs, outputs, combining=combining)


def _factors(key: str, num_ranks: int, num_addresses: int, instance: Any) -> list[int]:
    factors = []
    if isinstance(instance, Mapping) and isinstance(instance.get("chunks"), int):
        factors.append(instance["chunks"])
    for divisor in (1, num_ranks, num_ranks * num_ranks, max(num_ranks - 1, 1)):
        if num_addresses % divisor == 0 and num_addresses // divisor >= 1:
            factors.append(num_addresses // divisor)
    return list(dict.fromkeys(factors))


def _bandwidth(topology: Any, num_ranks: int, where: str) -> tuple[BandwidthConstraint, ...]:
    if not isinstance(topology, Mapping) or topology.get("links") is None:
        return ()
    links = topology["links"]
    if (
        not isinstance(links, list)
        or len(links) != num_ranks
        or any(not isinstance(row, list) or len(row) != num_ranks for row in links)
    ):
        raise _fail(where, f"topology.links must be a {num_ranks}x{num_ranks} matrix")
    out = []
    for dst, row in enumerate(links):
        for src, bw in enumerate(row):
            bw = _int(bw, where, f"topology.links[{dst}][{src}]")
            if bw > 0 and src != dst:
                out.append(BandwidthConstraint(frozenset({(src, dst)}), bw, f"link {src}->{dst}"))
    for i, sw in enumerate(topology.get("switches") or []):
        if not isinstance(sw, (list, tuple)) or len(sw) < 3:
            raise _fail(where, f"topology.switches[{i}] must be [srcs, dsts, bandwidth, name]")
        srcs, dsts, bw = sw[0], sw[1], _int(sw[2], where, f"topology.switches[{i}] bandwidth")
        if not isinstance(srcs, (list, tuple)) or not isinstance(dsts, (list, tuple)):
            raise _fail(where, f"topology.switches[{i}]: srcs and dsts must be lists of ranks")
        label = str(sw[3]) if len(sw) > 3 else f"switch {i}"
        pairs = frozenset((_int(s, where, "switch src"), _int(d, where, "switch dst")) for s in srcs for d in dsts)
        pairs = frozenset((s, d) for s, d in pairs if s != d)
        if pairs:
            out.append(BandwidthConstraint(pairs, bw, label))
    return tuple(out)

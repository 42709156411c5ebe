"""``rocm-smi --showtopo``: AMD GPUs' weights, hops and link types, to a :class:`Draft`.

The output has four sections, each a GPU x GPU matrix but the last::

    ====== Weight between two GPUs ======        (KFD io_link weight, 0 on the diagonal)
    ====== Hops between two GPUs ======
    ====== Link Type between two GPUs ======     (XGMI or PCIE; 0 on the diagonal)
    ====== Numa Nodes ======
    GPU[0] : (Topology) Numa Node: 0
    GPU[0] : (Topology) Numa Affinity: 0

A pair of type XGMI whose weight is one xGMI hop (``xgmi_hop_weight`` of
``hardware.yaml``: 15 per hop, ROCm/rocm-systems PR #7372) is a direct
``xgmi`` link; heavier XGMI pairs are reached through other GPUs, so get no
link (rocm-smi's hop count reads 1 for them too, so it is not used for this).
Every GPU hangs on the ``cpu`` of its NUMA node by ``pcie``; CPUs are joined
pairwise by a socket link. rocm-smi shows no NICs, PCIe switches or xGMI link
multiplicity: the import says so. Optional ``Card Series`` lines (from
``--showproductname`` in the same output) name the GPU model.
"""

from __future__ import annotations

import re

from ..errors import DumpError
from ._common import Draft, hardware

_SECTION = re.compile(r"=+\s*(.*?)\s*=+$")
_MATRICES = {"weight": "Weight between two GPUs", "hops": "Hops between two GPUs", "type": "Link Type between two GPUs"}


def _sections(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    current = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _SECTION.fullmatch(line)
        if match:
            current = match[1]
            out.setdefault(current, [])
            continue
        if current is not None:
            out[current].append(line)
    return out


def _matrix(lines: list[str], title: str, where: str) -> tuple[list[str], dict[tuple[str, str], str]]:
    if not lines:
        raise DumpError(f"{where}: section {title!r} is empty")
    header = lines[0].split()
    if not header or any(not re.fullmatch(r"GPU\d+", h) for h in header):
        raise DumpError(f"{where}: {title}: header must list GPU0 GPU1 ..., got {lines[0]!r}")
    cells: dict[tuple[str, str], str] = {}
    seen: list[str] = []
    for line in lines[1:]:
        tokens = line.split()
        label = tokens[0]
        if label not in header:
            raise DumpError(f"{where}: {title}: row {label}: not a column of the header")
        if label in seen:
            raise DumpError(f"{where}: {title}: row {label}: appears twice")
        seen.append(label)
        values = tokens[1:]
        if len(values) < len(header):
            raise DumpError(
                f"{where}: {title}: row {label}, column {header[len(values)]}: missing "
                f"({len(values)} of {len(header)} columns; truncated matrix?)"
            )
        if len(values) > len(header):
            raise DumpError(f"{where}: {title}: row {label}: {len(values)} columns, the header has {len(header)}")
        for col, value in zip(header, values, strict=True):
            cells[(label, col)] = value
    missing = [h for h in header if h not in seen]
    if missing:
        raise DumpError(f"{where}: {title}: row {missing[0]}: missing (truncated matrix?)")
    return header, cells


def parse(text: str, where: str) -> Draft:
    """Parse ``rocm-smi --showtopo`` output into a :class:`Draft`.

    Raises
    ------
    DumpError
        One line naming ``where``, the section, row and column at fault: a
        missing section, a truncated or asymmetric matrix, an unknown link type
        or a weight that is not a number.
    """
    sections = _sections(text)
    parsed = {}
    for key, title in _MATRICES.items():
        if title not in sections:
            raise DumpError(f"{where}: no {title!r} section (is this `rocm-smi --showtopo` output?)")
        parsed[key] = _matrix(sections[title], title, where)
    gpus = parsed["type"][0]
    for key in ("weight", "hops"):
        if parsed[key][0] != gpus:
            raise DumpError(f"{where}: {_MATRICES[key]}: columns {parsed[key][0]} differ from the link-type matrix's")
    types, weights = parsed["type"][1], parsed["weight"][1]
    for (a, b), value in weights.items():
        if not value.isdigit():
            raise DumpError(f"{where}: {_MATRICES['weight']}: row {a}, column {b}: expected a number, got {value!r}")
    for (a, b), value in types.items():
        if a != b and value not in ("XGMI", "PCIE"):
            raise DumpError(
                f"{where}: {_MATRICES['type']}: row {a}, column {b}: unknown link type {value!r} (XGMI, PCIE)"
            )
    for key, (_, cells) in parsed.items():
        for a in gpus:
            for b in gpus:
                if a < b and cells[(a, b)] != cells[(b, a)]:
                    raise DumpError(
                        f"{where}: {_MATRICES[key]}: row {a}, column {b}: {cells[(a, b)]} but row {b}, column {a}: "
                        f"{cells[(b, a)]} (asymmetric)"
                    )

    draft = Draft(fmt="rocm-smi")
    numa = _numa(sections.get("Numa Nodes", []), gpus, where, draft)
    models = _models(text)
    model = models[0] if models else None
    for g in gpus:
        draft.add(g.lower(), "gpu", rank=gpus.index(g), model=model)
    hop = hardware()["xgmi_hop_weight"]
    xgmi_weights = [int(weights[(a, b)]) for a in gpus for b in gpus if a != b and types[(a, b)] == "XGMI"]
    if xgmi_weights and min(xgmi_weights) > hop:
        hop = min(xgmi_weights)
        draft.note(
            f"no XGMI pair weighs {hardware()['xgmi_hop_weight']} (one hop): the lightest, {hop}, is taken as one"
        )
    for i, a in enumerate(gpus):
        for b in gpus[i + 1 :]:
            if types[(a, b)] == "XGMI" and int(weights[(a, b)]) <= hop:
                draft.link(a.lower(), b.lower(), "xgmi")
    if xgmi_weights:
        draft.note("rocm-smi does not show how many xGMI links join a pair: one link each assumed")
    nodes = sorted(set(numa.values()), key=int)
    for node in nodes:
        draft.add(f"cpu{nodes.index(node)}", "cpu", model=f"NUMA node {node}")
    for g in gpus:
        draft.link(g.lower(), f"cpu{nodes.index(numa[g])}", "pcie")
    for i in range(len(nodes)):
        for j in range(i + 1, len(nodes)):
            draft.link(f"cpu{i}", f"cpu{j}", hardware()["socket_links"]["unknown"])
    if len(nodes) > 1:
        draft.note(
            "rocm-smi does not name the CPU: NUMA nodes are joined pairwise by a socket link of the default kind"
        )
    draft.facts["socket_link"] = hardware()["socket_links"]["unknown"]
    draft.note("rocm-smi shows no PCIe switches: each GPU hangs directly on the CPU of its NUMA node")
    draft.note("rocm-smi shows no NICs: the machine has none (import an RCCL topology dump for a cluster)")
    known = hardware()["xgmi_by_model"]
    match = next((k for k in known if model and k.lower() in model.lower()), None)
    if match is None:
        match = hardware()["xgmi_default_model"]
        if xgmi_weights:
            draft.note(f"GPU model {'unknown' if model is None else repr(model)}: xGMI rates of the {match} assumed")
    draft.facts["xgmi_model"] = match
    draft.facts["nic_speed_mbps"] = None
    draft.note("rocm-smi shows no PCIe rate: the default of hardware.yaml is used")
    return draft


def _numa(lines: list[str], gpus: list[str], where: str, draft: Draft) -> dict[str, str]:
    numa: dict[str, str] = {}
    for line in lines:
        match = re.match(r"GPU\[(\d+)\]\s*:\s*\(Topology\)\s*Numa Node:\s*(-?\d+)", line)
        if match:
            gpu = f"GPU{match[1]}"
            if gpu not in gpus:
                raise DumpError(f"{where}: Numa Nodes: {line!r} names a GPU the matrices do not have")
            numa[gpu] = str(max(int(match[2]), 0))
    if len(numa) < len(gpus):
        draft.note("the NUMA node of some GPUs is not shown: NUMA node 0 assumed for them")
    return {g: numa.get(g, "0") for g in gpus}


def _models(text: str) -> list[str]:
    return re.findall(r"GPU\[\d+\]\s*:\s*Card Series:\s*(.+?)\s*$", text, flags=re.M)

"""``nvidia-smi topo -m``: the GPU/NIC connection matrix, to a :class:`Draft`.

The matrix (legend printed by nvidia-smi under it)::

            GPU0  GPU1  ...  NIC0  ...  CPU Affinity  NUMA Affinity  GPU NUMA ID
    GPU0     X    NV2   ...  PIX   ...  0-19,40-59    0              N/A
    NIC0    PIX   SYS   ...   X

``X`` self; ``NV#`` a bonded set of # NVLinks; ``PIX`` at most one PCIe bridge;
``PXB`` several PCIe bridges, no host bridge; ``PHB`` a PCIe host bridge;
``NODE`` between host bridges of one NUMA node; ``SYS`` (older: ``SOC``) across
the SMP interconnect between NUMA nodes. NIC columns are named ``NIC#`` (with a
``NIC Legend`` mapping them to devices) or by device (``mlx5_0``).

What is built:

- ``NV#`` between GPUs → ``nvlink`` links of multiplicity #. When the GPUs with
  NVLinks are all joined pairwise with the same # and # x (their number - 1)
  exceeds the NVLinks any GPU has (``hardware.yaml``), they sit on NVSwitches:
  one ``nvswitch`` joined to each by # links (how many NVSwitch chips is not
  shown: one switch plane of the same total bandwidth stands for them).
- PCIe: devices related by ``PIX``/``PXB`` share a ``pcie_switch``; those
  related by ``PIX``/``PXB``/``PHB`` share a host bridge (``root_complex``);
  host bridges with the same NUMA node (GPUs' ``NUMA Affinity``, or ``NODE``
  relations) hang on one ``cpu``; CPUs are joined pairwise by a socket link.
  A GPU pair joined by NVLink hides its PCIe relation; NICs and NUMA affinity
  place such GPUs.
- NICs in column order, rail = their index.

Unknowns (PCIe rate and widths, NIC speed, GPUDirect, socket link kind) take
the defaults of ``hardware.yaml`` and are listed in the draft's notes.
"""

from __future__ import annotations

import re

from ..errors import DumpError
from ._common import Draft, max_nvlinks_per_gpu, nvlink_generation_for_links

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_NV = re.compile(r"NV(\d+)$")
_PCIE_TOKENS = ("PIX", "PXB", "PHB", "NODE", "SYS")
_ALIASES = {"SOC": "SYS"}
_MULTIWORD = (("GPU", "NUMA", "ID"), ("CPU", "Affinity"), ("NUMA", "Affinity"))


def _header_columns(tokens: list[str]) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(tokens):
        for words in _MULTIWORD:
            if tuple(tokens[i : i + len(words)]) == words:
                out.append(" ".join(words))
                i += len(words)
                break
        else:
            out.append(tokens[i])
            i += 1
    return out


def _token(raw: str, where: str, row: str, col: str) -> tuple[str, int]:
    """(kind, nvlink count) of one cell; kind is X, NV or a PCIe relation."""
    raw = _ALIASES.get(raw, raw)
    if raw == "X":
        return "X", 0
    match = _NV.match(raw)
    if match and int(match[1]) > 0:
        return "NV", int(match[1])
    if raw in _PCIE_TOKENS:
        return raw, 0
    raise DumpError(
        f"{where}: row {row}, column {col}: unknown token {raw!r} (legend: X, NV#, PIX, PXB, PHB, NODE, SYS)"
    )


class _Sets:
    """Union-find over names."""

    def __init__(self, names: list[str]):
        self.parent = {n: n for n in names}

    def find(self, a: str) -> str:
        while self.parent[a] != a:
            self.parent[a] = self.parent[self.parent[a]]
            a = self.parent[a]
        return a

    def union(self, a: str, b: str) -> None:
        self.parent[self.find(b)] = self.find(a)

    def groups(self, names: list[str]) -> list[list[str]]:
        out: dict[str, list[str]] = {}
        for n in names:
            out.setdefault(self.find(n), []).append(n)
        return list(out.values())


def parse(text: str, where: str) -> Draft:
    """Parse ``nvidia-smi topo -m`` output into a :class:`Draft`.

    Raises
    ------
    DumpError
        One line naming ``where`` and the row and column at fault: an unknown
        token, a truncated row, a missing row, ``X`` off the diagonal, or an
        asymmetric pair.
    """
    lines = [_ANSI.sub("", line).rstrip() for line in text.splitlines()]
    header_at = next((i for i, line in enumerate(lines) if line.split()[:1] == ["GPU0"]), None)
    if header_at is None:
        raise DumpError(f"{where}: no matrix header starting with GPU0 (is this `nvidia-smi topo -m` output?)")
    columns = _header_columns(lines[header_at].split())
    extra = [c for c in columns if c in ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")]
    devices = [c for c in columns if c not in extra]
    if columns[: len(devices)] != devices:
        raise DumpError(f"{where}: header: device columns must come before the affinity columns")
    if len(set(devices)) != len(devices):
        raise DumpError(f"{where}: header: a column appears twice")
    n = len(devices)
    cells: dict[str, list[str]] = {}
    affinity: dict[str, list[str]] = {}
    nic_names: dict[str, str] = {}
    for line in lines[header_at + 1 :]:
        tokens = line.split()
        if not tokens or line.lstrip().startswith("#"):
            if cells:
                break
            continue
        if tokens[0] == "Legend:":
            break
        label = tokens[0]
        if label not in devices:
            raise DumpError(f"{where}: row {label}: not a column of the header ({', '.join(devices)})")
        if label in cells:
            raise DumpError(f"{where}: row {label}: appears twice")
        row = tokens[1 : 1 + n]
        if len(row) < n:
            raise DumpError(
                f"{where}: row {label}, column {devices[len(row)]}: missing ({len(row)} of {n} columns; truncated matrix?)"
            )
        cells[label] = row
        affinity[label] = tokens[1 + n :]
    for line in lines:
        match = re.match(r"\s*(NIC\d+)\s*:\s*(\S+)\s*$", line)
        if match:
            nic_names[match[1]] = match[2]
    missing = [d for d in devices if d not in cells]
    if missing:
        raise DumpError(f"{where}: row {missing[0]}: missing (truncated matrix?)")

    kinds = {d: "gpu" if re.fullmatch(r"GPU\d+", d) else "nic" for d in devices}
    gpus = [d for d in devices if kinds[d] == "gpu"]
    nics = [d for d in devices if kinds[d] == "nic"]
    rel: dict[tuple[str, str], tuple[str, int]] = {}
    for i, a in enumerate(devices):
        for j, b in enumerate(devices):
            kind, count = _token(cells[a][j], where, a, b)
            if (kind == "X") != (i == j):
                raise DumpError(
                    f"{where}: row {a}, column {b}: {'X off the diagonal' if kind == 'X' else 'expected X'}"
                )
            if kind == "NV" and "nic" in (kinds[a], kinds[b]):
                raise DumpError(f"{where}: row {a}, column {b}: NVLink to a NIC")
            rel[(a, b)] = (kind, count)
    for i, a in enumerate(devices):
        for b in devices[i + 1 :]:
            if rel[(a, b)] != rel[(b, a)]:
                raise DumpError(
                    f"{where}: row {a}, column {b}: {cells[a][devices.index(b)]} but row {b}, column {a}: "
                    f"{cells[b][devices.index(a)]} (asymmetric)"
                )

    draft = Draft(fmt="nvidia-smi")
    for g in gpus:
        draft.add(g.lower(), "gpu", rank=gpus.index(g))
    _nvlinks(draft, gpus, rel)
    _pcie(draft, where, gpus, nics, rel, affinity, "NUMA Affinity" in extra, nic_names)
    draft.facts.setdefault("nic_speed_mbps", None)
    draft.note("the PCIe rate and link widths are not shown by nvidia-smi: the defaults of hardware.yaml are used")
    return draft


def _nvlinks(draft: Draft, gpus: list[str], rel: dict) -> None:
    linked = [g for g in gpus if any(rel[(g, h)][0] == "NV" for h in gpus if h != g)]
    counts = {rel[(a, b)][1] for a in linked for b in linked if a != b}
    complete = all(rel[(a, b)][0] == "NV" for a in linked for b in linked if a != b)
    if len(linked) >= 3 and complete and len(counts) == 1 and counts.pop() * (len(linked) - 1) > max_nvlinks_per_gpu():
        k = rel[(linked[0], linked[1])][1]
        draft.add("nvsw0", "nvswitch")
        for g in linked:
            draft.link(g.lower(), "nvsw0", "nvlink", k)
        draft.note(
            f"every NVLink GPU shows NV{k} to every other, more links than any GPU has "
            f"({k} x {len(linked) - 1} > {max_nvlinks_per_gpu()}): NVSwitches assumed; nvidia-smi does not show how "
            f"many, so one switch plane with {k} links per GPU stands for them"
        )
        per_gpu = k
    else:
        per_gpu = 0
        for i, a in enumerate(gpus):
            for b in gpus[i + 1 :]:
                if rel[(a, b)][0] == "NV":
                    draft.link(a.lower(), b.lower(), "nvlink", rel[(a, b)][1])
        per_gpu = max((sum(rel[(a, b)][1] for b in gpus if b != a and rel[(a, b)][0] == "NV") for a in gpus), default=0)
    if per_gpu:
        gen, why = nvlink_generation_for_links(per_gpu)
        draft.facts["nvlink"] = gen
        draft.facts["nvlink_source"] = f"generation inferred from the dump: {why}"


def _pcie(
    draft: Draft,
    where: str,
    gpus: list[str],
    nics: list[str],
    rel: dict,
    affinity: dict[str, list[str]],
    has_numa: bool,
    nic_names: dict[str, str],
) -> None:
    devices = gpus + nics
    switches, bridges, sockets = _Sets(devices), _Sets(devices), _Sets(devices)
    for a in devices:
        for b in devices:
            kind = rel[(a, b)][0]
            if kind in ("PIX", "PXB"):
                switches.union(a, b)
            if kind in ("PIX", "PXB", "PHB"):
                bridges.union(a, b)
            if kind in ("PIX", "PXB", "PHB", "NODE"):
                sockets.union(a, b)
    numa: dict[str, str] = {}
    if has_numa:
        for g in gpus:
            # CPU Affinity is the first extra column, NUMA Affinity the second
            values = affinity.get(g, [])
            if len(values) < 2:
                raise DumpError(f"{where}: row {g}, column NUMA Affinity: missing")
            if values[1] != "N/A":
                if not values[1].isdigit():
                    raise DumpError(
                        f"{where}: row {g}, column NUMA Affinity: expected a number or N/A, got {values[1]!r}"
                    )
                numa[g] = values[1]
        by_numa: dict[str, str] = {}
        for g, node in numa.items():
            if node in by_numa:
                sockets.union(by_numa[node], g)
            by_numa.setdefault(node, g)
    else:
        draft.note("no NUMA Affinity column: NUMA nodes are told apart by SYS relations only")
    groups = sockets.groups(devices)
    unplaced = [grp for grp in groups if not any(d in gpus for d in grp)]
    if unplaced:
        draft.note(
            f"NIC(s) {', '.join(d for grp in unplaced for d in grp)} are SYS to every GPU: "
            "each such group is given a NUMA node (CPU) of its own"
        )
    if len(groups) > 1:
        draft.note(
            "each NUMA node is one cpu component; nvidia-smi does not say which NUMA nodes share a socket, nor the "
            "CPU vendor, so every pair of CPUs is joined by one socket link of the default kind (qpi)"
        )
    draft.facts["socket_link"] = "qpi"
    hb_index = sw_index = 0
    for c, group in enumerate(groups):
        node = next((numa[d] for d in group if d in numa), None)
        cpu = draft.add(f"cpu{c}", "cpu", model=None if node is None else f"NUMA node {node}")
        for bridge_group in bridges.groups(group):
            hb = draft.add(f"hostbridge{hb_index}", "root_complex")
            hb_index += 1
            draft.link(hb, cpu, "pcie")
            for switch_group in switches.groups(bridge_group):
                if len(switch_group) == 1:
                    draft.link(_name(switch_group[0], gpus, nics), hb, "pcie")
                    continue
                sw = draft.add(f"pcisw{sw_index}", "pcie_switch")
                sw_index += 1
                draft.link(sw, hb, "pcie")
                for d in switch_group:
                    draft.link(_name(d, gpus, nics), sw, "pcie")
    cpus = [f"cpu{c}" for c in range(len(groups))]
    for i, a in enumerate(cpus):
        for b in cpus[i + 1 :]:
            draft.link(a, b, "qpi")
    if any(rel[(a, b)][0] == "PXB" for a in devices for b in devices):
        draft.note("PXB (several PCIe bridges) is modelled as one pcie_switch: the bridges in between are not shown")
    for k, nic in enumerate(nics):
        draft.add(f"nic{k}", "nic", rail=k, model=nic_names.get(nic, nic))
    if nics:
        draft.note(
            "nvidia-smi shows neither NIC speed nor GPUDirect RDMA support: GPUDirect assumed, speed from hardware.yaml"
        )


def _name(device: str, gpus: list[str], nics: list[str]) -> str:
    return device.lower() if device in gpus else f"nic{nics.index(device)}"

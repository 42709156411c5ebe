"""NCCL's topology dump (``NCCL_TOPO_DUMP_FILE``; RCCL writes the same format),
to a :class:`Draft`.

The format (NCCL ``src/graph/xml.cc``)::

    <system version="1">
      <cpu numaid="0" vendor="GenuineIntel" familyid="6" modelid="85" ...>
        <pci busid="0000:03:00.0" class="0x060400" link_speed="8 GT/s" link_width="16">    (a PCIe bridge)
          <pci busid="0000:06:00.0" class="0x030200" ...>
            <gpu dev="0" sm="70" rank="0" gdr="1">
              <nvlink target="0000:07:00.0" count="1" tclass="0x030200"/>                (to a GPU)
              <nvlink target="0000:c4:00.0" count="2" tclass="0x068000"/>                (to an NVSwitch)
          <pci busid="0000:0c:00.0" class="0x020700" ...>
            <nic><net name="mlx5_0" dev="0" speed="200000" port="1" gdr="1"/></nic>

What is built: a ``cpu`` per ``<cpu>`` (joined pairwise by a socket link:
``qpi`` for Intel, ``infinity_fabric`` for AMD); a ``pcie_switch`` per bridge
``<pci>`` (class 0x0604; a chain of bridges with one child each is one switch,
and a bridge with one endpoint below it, a switch port, is folded into its parent);
a ``gpu`` per ``<gpu>``, ranked by its ``rank``; ``nvlink`` (RCCL ``<xgmi>``:
``xgmi``) links of ``count`` to GPUs, and to one ``nvswitch`` per distinct
NVSwitch target; a ``nic`` per ``<net>``, ranked by ``dev`` (its rail), with
its speed and GPUDirect flag. The CPU stands for its host bridges (the dump
does not show them).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from xml.parsers import expat

from ..errors import DumpError
from ._common import Draft, hardware, nvlink_generation_for_links

_KNOWN = {"system", "cpu", "pci", "gpu", "nvlink", "xgmi", "nic", "net", "c2c"}


@dataclass
class _Node:
    tag: str
    attrs: dict[str, str]
    line: int
    col: int
    children: list[_Node] = field(default_factory=list)


def _tree(text: str, where: str) -> _Node:
    parser = expat.ParserCreate()
    stack: list[_Node] = []
    roots: list[_Node] = []

    def start(tag: str, attrs: dict[str, str]) -> None:
        node = _Node(tag, dict(attrs), parser.CurrentLineNumber, parser.CurrentColumnNumber + 1)
        if tag not in _KNOWN:
            raise DumpError(f"{where}: line {node.line}, column {node.col}: unknown element <{tag}>")
        (stack[-1].children if stack else roots).append(node)
        stack.append(node)

    parser.StartElementHandler = start
    parser.EndElementHandler = lambda tag: stack.pop()
    try:
        parser.Parse(text, True)
    except expat.ExpatError as exc:
        raise DumpError(
            f"{where}: line {exc.lineno}, column {exc.offset + 1}: {expat.ErrorString(exc.code)} (truncated XML?)"
        ) from None
    if not roots or roots[0].tag != "system":
        raise DumpError(f"{where}: line 1, column 1: expected a <system> element (NCCL_TOPO_DUMP_FILE output)")
    return roots[0]


def _at(where: str, node: _Node) -> str:
    return f"{where}: line {node.line}, column {node.col}"


def _int(where: str, node: _Node, name: str, default: int | None = None) -> int:
    raw = node.attrs.get(name)
    if raw is None:
        if default is not None:
            return default
        raise DumpError(f"{_at(where, node)}: <{node.tag}> needs attribute {name!r}")
    try:
        return int(raw, 0)
    except ValueError:
        raise DumpError(f"{_at(where, node)}: <{node.tag} {name}={raw!r}>: expected an integer") from None


def _class(node: _Node) -> str:
    return node.attrs.get("class", "").lower()


def _busid(busid: str) -> str:
    return busid.lower()


class _Reader:
    def __init__(self, where: str):
        self.where = where
        self.draft = Draft(fmt="nccl-xml")
        self.gpus: list[tuple[int, str, _Node, _Node]] = []  # (rank, busid, pci node, gpu node)
        self.nets: list[tuple[int, _Node, str]] = []  # (dev, net node, parent component)
        self.switch_count = 0
        self.chains_collapsed = False
        self.ports_elided = False
        self.gpu_parent: dict[str, str] = {}

    def read(self, root: _Node) -> Draft:
        cpus = [n for n in root.children if n.tag == "cpu"]
        if not cpus:
            raise DumpError(f"{_at(self.where, root)}: <system> has no <cpu>")
        vendors = []
        for i, cpu in enumerate(cpus):
            vendor = cpu.attrs.get("vendor", "unknown")
            vendors.append(vendor)
            model = " ".join(f"{k} {cpu.attrs[k]}" for k in ("vendor", "familyid", "modelid") if k in cpu.attrs) or None
            numa = cpu.attrs.get("numaid")
            name = self.draft.add(f"cpu{i}", "cpu", model=f"{model}, NUMA node {numa}" if numa else model)
            for child in cpu.children:
                self._under(child, name)
        socket = hardware()["socket_links"].get(vendors[0], hardware()["socket_links"]["unknown"])
        if vendors[0] not in hardware()["socket_links"]:
            self.draft.note(f"CPU vendor {vendors[0]!r} unknown: sockets joined by a {socket} link")
        self.draft.facts["socket_link"] = socket
        names = [f"cpu{i}" for i in range(len(cpus))]
        for i, a in enumerate(names):
            for b in names[i + 1 :]:
                self.draft.link(a, b, socket)
        if len(cpus) > 1:
            self.draft.note("each <cpu> (NUMA node) is one cpu component, joined pairwise by one socket link")
        self._gpus()
        self._nics()
        if self.chains_collapsed:
            self.draft.note("chains of PCIe bridges with one child each are modelled as one pcie_switch")
        if self.ports_elided:
            self.draft.note("a PCIe bridge with a single endpoint below it (a switch port) is folded into its parent")
        self.draft.note("the dump shows no PCIe host bridges: each <cpu> stands for its own")
        return self.draft

    def _under(self, node: _Node, parent: str) -> None:
        if node.tag == "nic":
            self._nic(node, parent)
        elif node.tag == "pci":
            self._pci(node, parent)
        elif node.tag == "c2c":
            self.draft.note("<c2c> (CPU-GPU chip-to-chip) links are not modelled")
        else:
            raise DumpError(f"{_at(self.where, node)}: <{node.tag}> is not expected here")

    def _pci(self, node: _Node, parent: str) -> None:
        busid = node.attrs.get("busid")
        if busid is None:
            raise DumpError(f"{_at(self.where, node)}: <pci> needs attribute 'busid'")
        width = node.attrs.get("link_width")
        if width is not None and width.isdigit() and int(width) < hardware()["pcie_default_width"] and int(width) > 0:
            self.draft.note(f"PCIe device {busid} runs at x{width}: modelled as a full x16 pcie link")
        gpu = [c for c in node.children if c.tag == "gpu"]
        if gpu:
            self.gpus.append(
                (_int(self.where, gpu[0], "rank", _int(self.where, gpu[0], "dev", 0)), busid, node, gpu[0])
            )
            self.gpu_parent[_busid(busid)] = parent
            return
        if _class(node).startswith("0x0604"):
            if len(node.children) == 1 and not _class(node.children[0]).startswith("0x0604"):
                # a switch's downstream port leading to one endpoint: the endpoint hangs on the switch
                self.ports_elided = True
                self._under(node.children[0], parent)
                return
            inner = node
            while (
                len(inner.children) == 1
                and inner.children[0].tag == "pci"
                and _class(inner.children[0]).startswith("0x0604")
            ):
                inner = inner.children[0]
                self.chains_collapsed = True
            name = self.draft.add(f"pcisw{self.switch_count}", "pcie_switch", model=f"PCIe bridge {busid}")
            self.switch_count += 1
            self.draft.link(name, parent, "pcie")
            for child in inner.children:
                self._under(child, name)
            return
        for child in node.children:  # an endpoint: a NIC (or nothing simcoll models)
            self._under(child, parent)

    def _nic(self, node: _Node, parent: str) -> None:
        nets = [c for c in node.children if c.tag == "net"]
        for net in nets:
            self.nets.append((_int(self.where, net, "dev", len(self.nets)), net, parent))

    def _gpus(self) -> None:
        if not self.gpus:
            raise DumpError(f"{self.where}: the dump has no <gpu>")
        ranks = sorted(r for r, *_ in self.gpus)
        if ranks != list(range(len(ranks))):
            dup = next((r for r, n in Counter(ranks).items() if n > 1), None)
            node = next(g for r, _, _, g in self.gpus if r == dup) if dup is not None else self.gpus[0][3]
            raise DumpError(f"{_at(self.where, node)}: GPU ranks must be 0..{len(ranks) - 1} once each, got {ranks}")
        by_bus = {_busid(b): f"gpu{r}" for r, b, _, _ in self.gpus}
        sms = Counter()
        speeds = Counter()
        pair: dict[tuple[str, str, str], tuple[int, _Node]] = {}
        switches: dict[str, str] = {}
        switch_links: Counter = Counter()
        per_gpu: Counter = Counter()
        for rank, busid, pci, gpu in sorted(self.gpus):
            sm = gpu.attrs.get("sm")
            info = hardware()["gpu_by_sm"].get(int(sm)) if sm and sm.isdigit() else None
            model = info["model"] if info else (f"sm {sm}" if sm else None)
            self.draft.add(f"gpu{rank}", "gpu", rank=rank, model=model)
            self.draft.link(f"gpu{rank}", self.gpu_parent[_busid(busid)], "pcie")
            if sm:
                sms[sm] += 1
            speed = re.match(r"\s*([\d.]+)\s*GT/s", pci.attrs.get("link_speed", ""))
            if speed:
                speeds[f"{float(speed[1]):g}"] += 1
            for link in gpu.children:
                if link.tag not in ("nvlink", "xgmi"):
                    raise DumpError(f"{_at(self.where, link)}: <{link.tag}> is not expected inside <gpu>")
                target = _busid(link.attrs.get("target", ""))
                count = _int(self.where, link, "count", 1)
                if count < 1:
                    raise DumpError(f"{_at(self.where, link)}: <{link.tag} count={count}>: must be positive")
                tclass = link.attrs.get("tclass", "").lower()
                link_type = "nvlink" if link.tag == "nvlink" else "xgmi"
                per_gpu[rank] += count
                if tclass.startswith("0x0680"):
                    if target not in switches:
                        switches[target] = self.draft.add(
                            f"nvsw{len(switches)}", "nvswitch", model=f"NVSwitch {target}"
                        )
                    switch_links[(f"gpu{rank}", switches[target], link_type)] += count
                elif tclass.startswith(("0x0302", "0x0300", "0x0380", "0x1200")) or (not tclass and target in by_bus):
                    if target not in by_bus:
                        raise DumpError(
                            f"{_at(self.where, link)}: <{link.tag} target={link.attrs.get('target')!r}>: no GPU has "
                            "that busid"
                        )
                    a, b = f"gpu{rank}", by_bus[target]
                    if a == b:
                        raise DumpError(f"{_at(self.where, link)}: <{link.tag}> to its own GPU")
                    key = (min(a, b), max(a, b), link_type)
                    side = 0 if a < b else 1
                    pair.setdefault(key, [None, None])[side] = (count, link)
                else:
                    raise DumpError(
                        f"{_at(self.where, link)}: <{link.tag} tclass={tclass!r}>: unknown target class "
                        "(known: 0x0680xx NVSwitch, 0x0302xx/0x0300xx/0x0380xx GPU)"
                    )
        for (a, b, link_type), sides in pair.items():
            counts = {s[0] for s in sides if s is not None}
            if None in sides:
                present = next(s for s in sides if s is not None)
                other = b if sides[0] is not None else a
                raise DumpError(
                    f"{_at(self.where, present[1])}: {a}-{b} {link_type} listed by one side only ({other} does not "
                    "list it; asymmetric links)"
                )
            if len(counts) > 1:
                raise DumpError(
                    f"{_at(self.where, sides[1][1])}: {a}-{b} {link_type} count {sides[1][0]} but the other side says "
                    f"{sides[0][0]} (asymmetric links)"
                )
            self.draft.link(a, b, link_type, sides[0][0])
        for (g, sw, link_type), count in switch_links.items():
            self.draft.link(g, sw, link_type, count)
        if switches and any(t in ("-1", "ffffffffffffffff") or not t for t in switches):
            self.draft.note("NVSwitches not visible to NVML (e.g. in a VM): one switch plane stands for them")
        if sms:
            sm = sms.most_common(1)[0][0]
            info = hardware()["gpu_by_sm"].get(int(sm)) if sm.isdigit() else None
            if info and any(lk.type == "nvlink" for lk in self.draft.links):
                self.draft.facts["nvlink"] = info["nvlink"]
                self.draft.facts["nvlink_source"] = f"generation from the dump: sm {sm} is {info['model']}"
            if info:
                self.draft.facts["gpu_model"] = info["model"]
        if "nvlink" not in self.draft.facts and per_gpu and any(lk.type == "nvlink" for lk in self.draft.links):
            gen, why = nvlink_generation_for_links(max(per_gpu.values()))
            self.draft.facts["nvlink"] = gen
            self.draft.facts["nvlink_source"] = f"generation inferred from the dump: {why}"
        if speeds:
            gts = speeds.most_common(1)[0][0]
            if gts in hardware()["pcie_generations"]:
                self.draft.facts["pcie_gts"] = gts
            else:
                self.draft.note(f"PCIe rate {gts} GT/s unknown: the default of hardware.yaml is used")
        else:
            self.draft.note("the dump gives no GPU PCIe link speed: the default of hardware.yaml is used")

    def _nics(self) -> None:
        speeds = Counter()
        for rail, (dev, net, parent) in enumerate(sorted(self.nets, key=lambda t: t[0])):
            speed = _int(self.where, net, "speed", 0)
            if speed:
                speeds[speed] += 1
            label = net.attrs.get("name", f"net{dev}")
            model = f"{label}, {speed / 1000:g} Gb/s" if speed else label
            self.draft.add(f"nic{rail}", "nic", rail=rail, model=model, gpudirect=net.attrs.get("gdr", "1") != "0")
            self.draft.link(f"nic{rail}", parent, "pcie")
        if speeds:
            speed, _ = speeds.most_common(1)[0]
            self.draft.facts["nic_speed_mbps"] = speed
            if len(speeds) > 1:
                self.draft.note(
                    f"NIC speeds differ ({', '.join(f'{s / 1000:g} Gb/s' for s in sorted(speeds))}): one ib link type "
                    f"carries the most common, {speed / 1000:g} Gb/s"
                )
        else:
            self.draft.facts["nic_speed_mbps"] = None
        if self.nets:
            self.draft.note("NCCL's dump does not say InfiniBand or RoCE: NICs join clusters by ib links")


def parse(text: str, where: str) -> Draft:
    """Parse an NCCL (or RCCL) topology dump into a :class:`Draft`.

    Raises
    ------
    DumpError
        One line naming ``where``, the line and column at fault: XML that does
        not parse (a truncated dump), an unknown element or NVLink target
        class, an NVLink listed by one side only or with different counts.
    """
    return _Reader(where).read(_tree(text, where))

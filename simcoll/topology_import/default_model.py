"""The default, UNCALIBRATED cost model of an imported machine.

Link rates come from what the dump says (NVLink generation from the GPU model
or the NVLink count, PCIe rate, NIC speed) through the nominal figures of
``hardware.yaml``; everything a dump cannot say (α, reduction rate, executor
parameters) from the estimates in the same file. Every parameter set names its
source. The model is marked uncalibrated in its description and first source
(the model schema has no field for it): ``simcoll calibrate`` replaces it with
one fitted to measurements.
"""

from __future__ import annotations

from typing import Any

from ..cost_model import CostModel, model_from_dict
from ..topology import Topology
from ._common import Draft, hardware

UNCALIBRATED = "UNCALIBRATED"


def default_model_dict(topology: Topology, draft: Draft, dump: str) -> dict[str, Any]:
    """The YAML mapping of the default model for ``topology`` imported from ``draft``.

    Parameters
    ----------
    topology : Topology
        The imported machine (one node or a cluster): its link types are the
        model's keys.
    draft : Draft
        The parser's draft, whose ``facts`` give the rates.
    dump : str
        What was imported (a file name), for the sources.

    Returns
    -------
    dict
        A mapping :func:`simcoll.cost_model.model_from_dict` accepts.
    """
    hw = hardware()
    tmpl = hw["model"]
    facts = draft.facts
    links: dict[str, dict[str, Any]] = {}

    def put(link_type: str, bandwidth: float, source: str) -> None:
        alpha = tmpl["alpha_s"][link_type]
        links[link_type] = {
            "alpha_s": alpha["value"],
            "bandwidth_Bps": float(bandwidth),
            "source": f"{source}; alpha: {alpha['source']}",
        }

    wanted = set(topology.link_types)
    if any(c.kind == "nic" for c in topology.components):
        wanted.add(topology.network_link)  # so that clusters of the machine (machine.yaml*N) are priced too
    for link_type in sorted(wanted):
        if link_type == "nvlink":
            gen = facts.get("nvlink") or next(iter(hw["nvlink_generations"]))
            spec = hw["nvlink_generations"][gen]
            why = facts.get("nvlink_source", f"generation not shown by the dump: {gen} assumed")
            put("nvlink", spec["bandwidth_Bps"], f"{gen} per link and direction: {spec['source']} ({why})")
        elif link_type == "xgmi":
            model = facts.get("xgmi_model") or hw["xgmi_default_model"]
            spec = hw["xgmi_by_model"][model]
            put("xgmi", spec["bandwidth_Bps"], f"{model} xGMI: {spec['source']}")
        elif link_type == "pcie":
            gts = facts.get("pcie_gts")
            shown = gts is not None
            gts = gts or hw["pcie_default_gts"]
            spec = hw["pcie_generations"][gts]
            origin = f"rate {gts} GT/s from the dump" if shown else f"rate not in the dump: {spec['name']} assumed"
            put("pcie", spec["bandwidth_Bps"], f"{spec['name']} x16 ({origin}): {spec['source']}")
        elif link_type in ("ib", "ethernet"):
            speed = facts.get("nic_speed_mbps")
            if speed:
                source = f"NIC speed {speed / 1000:g} Gb/s from the dump ({dump}) = {speed / 8000:g} GB/s"
            else:
                speed = hw["nic_default_speed_mbps"]
                source = hw["nic_default_source"]
            put(link_type, speed * 1e6 / 8, source)
        elif link_type in tmpl["socket_bandwidth_Bps"]:
            spec = tmpl["socket_bandwidth_Bps"][link_type]
            put(link_type, spec["value"], spec["source"])
        else:  # pragma: no cover - importers only write the types above
            raise KeyError(link_type)
    kinds = {c.kind for c in topology.components}
    switches = {k: dict(v) for k, v in tmpl["switches"].items() if k in kinds}
    out: dict[str, Any] = {
        "name": f"{topology.name}-default",
        "description": f"{UNCALIBRATED} default model of {topology.name}, from nominal figures for what the dump shows; "
        "calibrate it against measurements (simcoll calibrate) before trusting its times",
        "sources": [
            f"uncalibrated: nominal figures (simcoll/topology_import/hardware.yaml) chosen from {draft.fmt} dump {dump}",
        ],
        "links": links,
    }
    if switches:
        out["switches"] = switches
    out["compute"] = dict(tmpl["compute"])
    out["executor"] = dict(tmpl["executor"])
    out["protocols"] = {k: dict(v) for k, v in tmpl["protocols"].items()}
    return out


def default_model(topology: Topology, draft: Draft, dump: str) -> CostModel:
    """:func:`default_model_dict` as a validated :class:`~simcoll.cost_model.CostModel`."""
    return model_from_dict(default_model_dict(topology, draft, dump), where=f"default model of {topology.name}")

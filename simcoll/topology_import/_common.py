"""What every importer shares: the hardware facts file, the draft machine a
parser fills in, and the error it raises.

A parser turns its dump into a :class:`Draft`: components and links in
simcoll's schema (:mod:`simcoll.topology`), plus ``notes`` (one sentence per
thing the dump leaves unknown and the default picked for it) and ``facts`` (what
the default cost model needs: NVLink generation, PCIe rate, NIC speed, ...).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any

import yaml

from ..errors import DumpError
from ..topology import Component, Link

#: DumpError is defined in simcoll.errors and importable from here as before.
__all__ = ["Draft", "DumpError", "hardware", "max_nvlinks_per_gpu", "nvlink_generation_for_links"]


@lru_cache(maxsize=1)
def hardware() -> dict[str, Any]:
    """The figures of ``hardware.yaml`` (package data), parsed once."""
    text = resources.files("simcoll.topology_import").joinpath("hardware.yaml").read_text(encoding="utf-8")
    return yaml.safe_load(text)


@dataclass
class Draft:
    """A machine as a parser reads it, before validation.

    ``facts`` keys read by :mod:`.default_model`: ``nvlink`` (generation name),
    ``nvlink_source`` (why), ``pcie_gts`` (str key of ``pcie_generations``),
    ``nic_speed_mbps`` (int or None), ``xgmi_model`` (key of
    ``xgmi_by_model``), ``socket_link`` (link type).
    """

    fmt: str
    components: list[Component] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)

    def add(self, name: str, kind: str, **fields: Any) -> str:
        self.components.append(Component(name=name, kind=kind, **fields))
        return name

    def link(self, a: str, b: str, link_type: str, count: int = 1) -> None:
        self.links.append(Link(src=a, dst=b, type=link_type, count=count))

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)


def nvlink_generation_for_links(total: int) -> tuple[str, str]:
    """The NVLink generation whose GPUs have ``total`` links (the oldest that
    fits), and a sentence saying how it was chosen.

    Examples
    --------
    >>> nvlink_generation_for_links(6)[0], nvlink_generation_for_links(12)[0]
    ('NVLink2', 'NVLink3')
    """
    gens = hardware()["nvlink_generations"]
    fits = [name for name, g in gens.items() if g["links_per_gpu"] == total]
    if fits:
        why = f"{total} NVLinks per GPU is {fits[0]}"
        if len(fits) > 1:
            why += f" (also fits {', '.join(fits[1:])}: the older is assumed)"
        return fits[0], why
    # the newest generation with at least that many links
    above = [name for name, g in gens.items() if g["links_per_gpu"] >= total]
    name = above[0] if above else list(gens)[-1]
    return name, f"{total} NVLinks per GPU matches no generation exactly: {name} assumed"


def max_nvlinks_per_gpu() -> int:
    """The most NVLinks any known NVIDIA GPU has (a GPU showing more NVLinks to
    its peers in total sits on NVSwitches)."""
    return max(g["links_per_gpu"] for g in hardware()["nvlink_generations"].values())

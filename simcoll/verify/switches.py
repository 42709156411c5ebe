"""The rules of in-switch reductions (:class:`~simcoll.algorithm.SwitchReduction`)
that hold whatever the run: the collective combines (several sources), and on
a topology the switch exists, declares ``reduce`` (several sources) and
``multicast`` (several destinations), and is reachable from every source and
reaches every destination without passing through another GPU. Shared by the
symbolic replay and the array verifier of Algorithms."""

from __future__ import annotations

from collections.abc import Iterable

from ..algorithm import SwitchReduction
from ..collectives import Collective
from ..topology import SWITCH_KINDS, Topology
from .values import MAX_PROBLEMS


def _check_switch_reductions(
    reductions: Iterable[SwitchReduction], collective: Collective, topology: Topology | None
) -> list[str]:
    """Collective and topology rules for the in-switch reductions (module docstring)."""
    problems: list[str] = []
    reductions = list(reductions)
    if not reductions:
        return problems
    if not collective.combining:
        for r in reductions:
            if len(r.sources) > 1:
                problems.append(f"{r.describe()}: a {collective.name} combines nothing")
                break
    if topology is None:
        return problems
    names = {c.name: c for c in topology.components}
    reach = _SwitchReach(topology)
    for r in reductions:
        comp = names.get(r.switch)
        if comp is None or comp.kind not in SWITCH_KINDS:
            what = "no such component" if comp is None else f"a {comp.kind}, not a switch"
            problems.append(f"{r.describe()}: {topology.name} has {r.switch!r} as {what}")
            continue
        if len(r.sources) > 1 and not comp.reduce:
            problems.append(f"{r.describe()}: switch {r.switch} does not reduce (topology {topology.name})")
        if len(r.destinations) > 1 and not comp.multicast:
            problems.append(f"{r.describe()}: switch {r.switch} does not multicast (topology {topology.name})")
        for rank in r.sources:
            if not reach.connected(topology.gpu(rank).name, r.switch):
                problems.append(f"{r.describe()}: no path from GPU {rank} to {r.switch} in {topology.name}")
        for rank in r.destinations:
            if not reach.connected(r.switch, topology.gpu(rank).name):
                problems.append(f"{r.describe()}: no path from {r.switch} to GPU {rank} in {topology.name}")
        if len(problems) >= MAX_PROBLEMS:
            break
    return problems


class _SwitchReach:
    """Which GPUs reach a switch, and which a switch reaches, through links
    that enter no other GPU; cached per switch (a fabric switch reaches
    thousands of components, but a few switches serve every reduction)."""

    def __init__(self, topology: Topology):
        self.graph = topology.to_networkx()
        self.gpu_names = {g.name for g in topology.gpus}
        self._cache: dict[tuple[str, bool], set[str]] = {}

    def gpus(self, switch: str, forward: bool) -> set[str]:
        """The GPUs ``switch`` reaches (``forward``) or that reach it."""
        key = (switch, forward)
        if key not in self._cache:
            found: set[str] = set()
            seen, stack = {switch}, [switch]
            while stack:
                u = stack.pop()
                for v in self.graph.successors(u) if forward else self.graph.predecessors(u):
                    if v in self.gpu_names:
                        found.add(v)
                    elif v not in seen:
                        seen.add(v)
                        stack.append(v)
            self._cache[key] = found
        return self._cache[key]

    def connected(self, a: str, b: str) -> bool:
        """GPU ``a`` reaches switch ``b``, or switch ``a`` reaches GPU ``b``."""
        return a in self.gpus(b, False) if a in self.gpu_names else b in self.gpus(a, True)

"""SCCL synthesis instances (SCCL §3.2): the tuple (G, S, R, P, B, pre, post).

An :class:`Instance` is what a solver backend receives: a *non-combining*
collective (its pre/post relations and G), the number of steps S and rounds
R, and the bandwidth relation B. Combining collectives reach a backend through
their non-combining inverse on the reversed relation (SCCL §3.5, see
:mod:`simcoll.synthesis.sccl`).

B is derived from the topology (:func:`simcoll.routes.bandwidth_relation`:
direct links with their multiplicity, per-GPU egress/ingress through switches
or PCIe, per-node NIC limits) or given explicitly. A pair of ranks that no
constraint of B mentions has no link. (SCCL §3.4 treats an unmentioned pair
as unconstrained; naming every link is clearer for a user writing B by hand.)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import shortest_path

from ..algorithm import BandwidthConstraint
from ..collectives import Collective
from ..errors import SynthesisError
from ..routes import bandwidth_relation
from ..topology import Topology


@dataclass(frozen=True)
class Instance:
    """A SYNCOLL instance: synthesize ``collective`` in ``steps`` steps and
    ``rounds`` rounds under ``bandwidth``; ``chunks`` is the per-rank count C
    the paper's tables report."""

    collective: Collective
    steps: int
    rounds: int
    bandwidth: tuple[BandwidthConstraint, ...]
    chunks: int
    topology: str | None = None

    def __post_init__(self) -> None:
        if self.collective.combining:
            raise SynthesisError(
                f"{self.collective.name} is a combining collective; synthesize it with sccl.synthesize, "
                "which inverts a non-combining instance (SCCL §3.5)"
            )
        if self.steps < 1:
            raise SynthesisError(f"steps must be at least 1 (got {self.steps})")
        if self.rounds < self.steps:
            raise SynthesisError(
                f"rounds ({self.rounds}) must be at least steps ({self.steps}): every step has a round"
            )
        p = self.collective.num_ranks
        for c in self.bandwidth:
            for s, d in c.links:
                if not (0 <= s < p and 0 <= d < p) or s == d:
                    raise SynthesisError(f"bandwidth constraint {c.label or sorted(c.links)} names pair ({s}, {d})")
            if c.chunks_per_round < 0:
                raise SynthesisError(f"bandwidth constraint {c.label} has a negative capacity")

    @property
    def num_ranks(self) -> int:
        return self.collective.num_ranks

    @property
    def num_chunks(self) -> int:
        """G, the global number of chunks."""
        return self.collective.num_chunks

    @cached_property
    def edges(self) -> tuple[tuple[int, int], ...]:
        """E: pairs some constraint mentions and none forbids (b > 0)."""
        mentioned: set[tuple[int, int]] = set()
        forbidden: set[tuple[int, int]] = set()
        for c in self.bandwidth:
            (mentioned if c.chunks_per_round > 0 else forbidden).update(c.links)
        return tuple(sorted(mentioned - forbidden))

    @cached_property
    def holders(self) -> dict[int, frozenset[int]]:
        """Ranks holding each chunk in the precondition."""
        out: dict[int, set[int]] = {}
        for c, n in self.collective.pre:
            out.setdefault(c, set()).add(n)
        return {c: frozenset(ns) for c, ns in out.items()}

    @cached_property
    def earliest(self) -> dict[tuple[int, int], int]:
        """Fewest steps before chunk c can be on rank n (hops from its nearest
        holder over E); pairs it can never reach are absent. Every solver uses
        it to prune variables: a chunk moves at most one hop per step."""
        # breadth-first from every holder at once, in C (scipy): a dense relation of 512 ranks has 262,000
        # edges, and a Dijkstra in Python per chunk took 72 s on dgx-h100*64
        p = self.num_ranks
        pairs = np.array(self.edges, dtype=np.int64).reshape(-1, 2)
        graph = csr_matrix((np.ones(len(pairs)), (pairs[:, 0], pairs[:, 1])), shape=(p, p))
        holders = sorted({n for sources in self.holders.values() for n in sources})
        hops = shortest_path(graph, unweighted=True, indices=holders) if holders else np.zeros((0, p))
        row = {n: i for i, n in enumerate(holders)}
        out = {}
        for c, sources in self.holders.items():
            nearest = hops[[row[n] for n in sources]].min(axis=0)
            for n in np.flatnonzero(np.isfinite(nearest)).tolist():
                out[(c, n)] = int(nearest[n])
        return out

    def check_reachable(self) -> None:
        """Raise if some chunk cannot reach a rank its postcondition names in S steps
        for lack of any path at all (not a solver question)."""
        for c, n in sorted(self.collective.post):
            if (c, n) not in self.earliest:
                raise SynthesisError(f"chunk {c} can never reach rank {n}: no path over the bandwidth relation")

    def interchangeable_chunks(self) -> list[list[int]]:
        """Classes of chunks with the same holders and the same destinations:
        permuting them maps solutions to solutions (used for symmetry breaking)."""
        dests: dict[int, set[int]] = {}
        for c, n in self.collective.post:
            dests.setdefault(c, set()).add(n)
        classes: dict[tuple, list[int]] = {}
        for c in range(self.num_chunks):
            key = (self.holders.get(c, frozenset()), frozenset(dests.get(c, ())))
            classes.setdefault(key, []).append(c)
        return [cs for cs in classes.values() if len(cs) > 1]


def reversed_relation(bandwidth: Iterable[BandwidthConstraint]) -> tuple[BandwidthConstraint, ...]:
    """B on the topology with every link reversed (SCCL §3.5)."""
    return tuple(
        BandwidthConstraint(frozenset((d, s) for s, d in c.links), c.chunks_per_round, f"reversed {c.label}".strip())
        for c in bandwidth
    )


def topology_relation(topology: Topology) -> tuple[BandwidthConstraint, ...]:
    """B derived from a topology, every link carrying one chunk per round."""
    return bandwidth_relation(topology)

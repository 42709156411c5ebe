"""The record of a passed check that a schedule carries, so that it is not
checked again (issue 51 item 3: ``algo generate`` checks, ``simulate`` of the
file it wrote need not).

A record (``algorithm.metadata["checked"]``) names what was checked against
what: the schedule's content digest (:meth:`Algorithm.content_digest`, its
metadata aside), the topology's name and a digest of its components and
links (a check depends on the topology alone: routes and SCCL's bandwidth
relation), and the simcoll version that checked it. It holds only while all
of these are equal: a schedule edited after its check, checked on another
machine or by another simcoll version is checked again. A record is a
convenience for schedules simcoll wrote, not a proof: ``simcoll verify``
(:func:`simcoll.verify.check`) checks a schedule whatever its record says.
"""

from __future__ import annotations

import hashlib
from typing import Any

from ..algorithm import Algorithm
from ..machines import Machine
from ..topology import Topology

#: Where an Algorithm's metadata keeps its record.
RECORD_KEY = "checked"


def topology_digest(topology: Topology) -> str:
    """SHA-256 of a topology's components (name, kind, rank, node) and links (ends, type, count)."""
    digest = hashlib.sha256(topology.name.encode())
    for c in topology.components:
        digest.update(f"|{c.name},{c.kind},{c.rank},{c.node}".encode())
    for link in topology.links:
        digest.update(f"|{link.src},{link.dst},{link.type},{link.count}".encode())
    return digest.hexdigest()


def check_record(algorithm: Algorithm, machine: Machine) -> dict[str, Any]:
    """The record of a check of ``algorithm`` against ``machine``'s topology (module docstring)."""
    from .. import __version__

    return {
        "schedule": algorithm.content_digest(),
        "topology": machine.topology.name,
        "topology_digest": topology_digest(machine.topology),
        "simcoll": __version__,
    }


def with_check_record(algorithm: Algorithm, machine: Machine) -> Algorithm:
    """``algorithm`` carrying the record of a check it has passed on ``machine`` (call it only then)."""
    return algorithm.relabelled(metadata={**algorithm.metadata, RECORD_KEY: check_record(algorithm, machine)})


def record_holds(algorithm: Algorithm, machine: Machine) -> bool:
    """Whether ``algorithm`` carries the record of a check on this topology that
    still describes it (the same content, topology and simcoll version)."""
    record = (algorithm.metadata or {}).get(RECORD_KEY)
    return isinstance(record, dict) and record == check_record(algorithm, machine)

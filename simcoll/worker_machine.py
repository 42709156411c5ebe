"""The machine of a parallel comparison, prepared once for all its workers.

Every task of ``compare(jobs > 1)`` on a large machine (a generator, timed
at every size, or NCCL's row at one size) runs in a fresh worker process
(:func:`simcoll.compare._in_parallel`), and every one of them starts by
deriving the same structures from the machine alone: SCCL's bandwidth
relation and its indexes (each generator's rounds per step,
:func:`simcoll.algorithms.common.minimal_rounds`) and the simulator's
routes of the first node's rank pairs (every other pair's route is one of
them mirrored, :class:`~simcoll.simulator.network.FluidNetwork`). On
1,024 GPUs that is about a second of every task.

The workers are forked from a fork server, which imports this module
before forking any. When the comparison names a file in :data:`ENV_VAR` (see
:func:`write_for_server`), the import loads the machine from it and
prepares it (:func:`prepare`); every worker forked afterwards shares the
prepared machine (copy on write), and a task takes it by its token
(:func:`machine_for`). A fork server started earlier in the process for
another machine holds another token: the task then uses its own copy of
the machine, prepared by nobody, with the same results.
"""

from __future__ import annotations

import hashlib
import os
import pickle
from pathlib import Path

from .collector import collector_paused
from .machines import Machine

#: The environment variable naming the file (:func:`write_for_server`) a fork server loads its machine from.
ENV_VAR = "SIMCOLL_WORKER_MACHINE"

#: (token, machine) of the machine this process prepared at import, if any.
_PREPARED: tuple[str, Machine] | None = None


def token_of(machine: Machine, contention: bool) -> str:
    """What identifies ``machine`` (its topology and model, as pickled) and
    the ``contention`` setting its routes are worked out for."""
    return hashlib.sha256(pickle.dumps((machine, contention))).hexdigest()


def prepare(machine: Machine, contention: bool) -> None:
    """Derive, in ``machine``'s own caches, what every task on it derives
    first (module docstring): results are the same with or without."""
    import numpy as np
    import simpy

    from .algorithm import RelationIndex
    from .routes import bandwidth_relation
    from .simulator.network import FluidNetwork

    topology = machine.topology
    _ = RelationIndex.of(bandwidth_relation(topology, machine.routes), machine.num_ranks).by_pair
    if len(topology.nodes) < 2:
        return
    first = np.array(topology.ranks_of_node(topology.nodes[0]), dtype=np.int64)
    src = np.repeat(first, machine.num_ranks)
    dst = np.tile(np.arange(machine.num_ranks, dtype=np.int64), len(first))
    keep = src != dst
    net = FluidNetwork(
        simpy.Environment(), machine, contention=contention, record_utilisation=False, record_timeline=False
    )
    net.route_id_table(src[keep], dst[keep])  # (kept in the machine's route caches, not in this network)


def write_for_server(machine: Machine, contention: bool, path: Path) -> str:
    """Write ``machine`` to ``path`` for a fork server to prepare at its
    start (with ``path`` in :data:`ENV_VAR`); returns its token."""
    token = token_of(machine, contention)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        pickle.dump((token, machine, contention), f)
    tmp.replace(path)
    return token


def machine_for(token: str, machine: Machine) -> Machine:
    """The machine this process prepared if it has ``token``, else ``machine``."""
    if _PREPARED is not None and _PREPARED[0] == token:
        return _PREPARED[1]
    return machine


def _prepare_from_environment() -> None:
    """At import in a fork server: load and prepare the machine named by
    :data:`ENV_VAR`. Anything that goes wrong leaves no machine prepared
    (the workers then use their own copies: slower, the same results)."""
    global _PREPARED
    path = os.environ.get(ENV_VAR)
    if not path:
        return
    try:
        with open(path, "rb") as f:
            token, machine, contention = pickle.load(f)
        with collector_paused():  # (its routes are many small objects: 1.5 -> 1.0 s on 1,024 GPUs)
            prepare(machine, contention)
    except Exception:  # noqa: BLE001 - a fork server must start whatever happens here
        return
    _PREPARED = (token, machine)


_prepare_from_environment()

"""Algorithm generators, grouped by family, and the registry the CLI and
``compare`` use.

A generator is a plain function ``f(topology, collective, **options) ->
Algorithm`` that raises :class:`~simcoll.errors.NotApplicableError` where it
does not apply. A family module lists its generators in ``GENERATORS``
(:class:`~simcoll.algorithms.registry.Generator`); add a new module to
:data:`FAMILIES` to register it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..algorithm import Algorithm
from ..collectives import ROOTED, Collective, canonical_name, make_collective
from ..errors import NotApplicableError, OptionError
from ..limits import transfer_budget
from ..machines import Machine, as_machine
from . import bruck as _bruck
from . import direct as _direct
from . import hiccl as _hiccl
from . import hierarchical as _hierarchical
from . import innetwork as _innetwork
from . import nccl as _nccl
from . import nvgroup as _nvgroup
from . import recursive as _recursive
from . import ring as _ring
from . import trees as _trees
from .direct import direct
from .registry import Generator, Option
from .ring import find_ring, ring, ring_allgather, ring_allreduce, ring_reducescatter

#: Every family module, in the order ``simcoll algo list`` shows them.
FAMILIES = (_ring, _trees, _recursive, _bruck, _direct, _hierarchical, _nvgroup, _hiccl, _nccl, _innetwork)

REGISTRY: dict[str, Generator] = {g.name: g for family in FAMILIES for g in family.GENERATORS}


def parse_options(generator: Generator, options: dict[str, str]) -> dict[str, Any]:
    """Turn CLI ``k=v`` strings into the generator's keyword arguments."""
    return generator.parse_options(options)


def generate(
    name: str,
    machine: Machine | str,
    collective: Collective | str,
    chunks: int | None = None,
    root: int | None = None,
    **options: Any,
) -> Algorithm:
    """Run a registered generator on a machine.

    Parameters
    ----------
    name : str
        The generator, a key of :data:`REGISTRY` (``simcoll algo list``).
    machine : Machine or str
        The machine, or a topology spec such as ``"dgx1"``.
    collective : Collective or str
        A collective, or a name completed with the machine's rank count,
        ``chunks`` and ``root``.
    chunks : int, optional
        The chunk factor of a named collective (default: the generator's).
    root : int, optional
        The root of a named rooted collective (default 0).
    **options
        The generator's own options (:attr:`Generator.options`).

    Returns
    -------
    Algorithm

    Raises
    ------
    OptionError
        For an unknown generator name.
    NotApplicableError
        When the generator does not apply to this machine or collective.
    TooLargeError
        When the collective or the schedule is larger than simcoll builds
        (:mod:`simcoll.limits`): the schedule as soon as its transfers built
        pass :data:`~simcoll.limits.MAX_TRANSFERS`.

    Examples
    --------
    >>> algo = generate("ring", "ring:4", "allgather")
    >>> algo.steps, len(algo.transfers)  # P-1 steps, each rank sending one chunk a step
    (3, 12)
    """
    if name not in REGISTRY:
        raise OptionError(f"unknown algorithm {name!r}; known: {', '.join(REGISTRY)}")
    topology = as_machine(machine).topology
    generator = REGISTRY[name]
    if isinstance(collective, str):
        coll_name = canonical_name(collective)
        collective = make_collective(
            coll_name,
            topology.num_ranks,
            chunks or generator.default_chunks(coll_name, topology, **options),
            root=root if coll_name in ROOTED else None,
        )
    # counted as it is built, refused past simcoll.limits.MAX_TRANSFERS before it takes the memory
    budget = f"{name}: {collective.name} on {collective.num_ranks:,} ranks, chunk factor {collective.chunk_factor:,}"
    with transfer_budget(budget):
        return generator.function(topology, collective, **options)


def applicable(
    machine: Machine | str,
    collective: str,
    chunks: int | None = None,
    *,
    names: Iterable[str] | None = None,
) -> dict[str, Algorithm | str]:
    """Every registered generator for a collective on a machine (or those of
    ``names``), in registry order.

    Parameters
    ----------
    machine : Machine or str
        The machine, or a topology spec.
    collective : str
        The collective's name.
    chunks : int, optional
        The chunk factor (default: each generator's).
    names : iterable of str, optional
        Only these generators (names not registered, or not implementing the
        collective, are ignored): nothing else is generated.

    Returns
    -------
    dict of str to Algorithm or str
        Per generator name, its Algorithm or the reason it does not apply.

    Examples
    --------
    >>> found = applicable("ring:4", "allgather")
    >>> found["ring"].steps
    3
    >>> found["bruck"]
    'bruck: ring:4 has no route from rank 0 to rank 2'
    >>> list(applicable("ring:4", "allgather", names=["direct", "ring"]))
    ['ring', 'direct']
    """
    machine = as_machine(machine)
    collective = canonical_name(collective)
    only = None if names is None else set(names)
    out: dict[str, Algorithm | str] = {}
    for name, generator in REGISTRY.items():
        if collective not in generator.collectives or (only is not None and name not in only):
            continue
        try:
            out[name] = generate(name, machine, collective, chunks)
        except NotApplicableError as exc:
            out[name] = str(exc)
    return out


__all__ = [
    "FAMILIES",
    "REGISTRY",
    "Generator",
    "Option",
    "applicable",
    "direct",
    "find_ring",
    "generate",
    "ring",
    "ring_allgather",
    "ring_allreduce",
    "ring_reducescatter",
]

"""Limits on the size of a machine simcoll agrees to build.

A topology spec is a few characters (``fully-connected:100000``,
``hypercube:40``, ``gpus: 1e30`` in a YAML file) but the machine it names
can need more memory than any computer has; without a limit the process
grows until the kernel kills it or Python raises MemoryError deep inside a
generator (issue 14). These limits are checked from the spec's numbers,
before anything is built, and refused with one line naming the limit.

- :data:`MAX_GPUS` = 65,536: sixteen times the largest cluster the scale
  targets ask for (4,096 GPUs, ``dgx-h100*512``, issue 15) and above the
  largest system the seed papers evaluate (1,536 GPUs, HiCCL §6);
- :data:`MAX_COLLECTIVE_SLOTS` = 50,000,000 buffer slots of a collective
  (see its comment);
- :data:`MAX_LINKS` = 2,000,000 links: each link becomes a ``Link`` record,
  graph edges both ways and route entries, a few hundred bytes to a few
  kilobytes in all, so two million links stay within a few GiB
  (``fully-connected:2000`` has 1,999,000).
"""

from __future__ import annotations

from .errors import TopologyError

#: Most GPUs in one machine (see the module docstring).
MAX_GPUS = 65_536
#: Most links in one machine (see the module docstring).
MAX_LINKS = 2_000_000
#: Most chunks a collective's buffers hold over all ranks (P·C, P²·C for
#: Alltoall): each is a Python integer in its layouts (~30 bytes), so 50
#: million stay near 1.5 GB. The 1,024-GPU targets of issue 15 need 25
#: million (``dgx-h100*128``, NCCL's rings with chunk factor 24·P).
MAX_COLLECTIVE_SLOTS = 50_000_000


def check_machine_size(what: str, gpus: int, links: int = 0) -> None:
    """Refuse a machine of ``gpus`` GPUs and ``links`` links beyond the limits.

    Parameters
    ----------
    what : str
        The spec or file, named in the message.
    gpus : int
        GPUs the machine would have.
    links : int
        Links it would have (0 when not known yet).

    Raises
    ------
    TopologyError
        Naming ``what``, the count and the limit.

    Examples
    --------
    >>> check_machine_size("ring:8", 8, 8)
    >>> check_machine_size("fully-connected:100000", 100_000, 4_999_950_000)
    Traceback (most recent call last):
    simcoll.errors.TopologyError: fully-connected:100000: 100,000 GPUs is more than simcoll builds (at most 65,536)
    """
    if gpus > MAX_GPUS:
        raise TopologyError(f"{what}: {gpus:,} GPUs is more than simcoll builds (at most {MAX_GPUS:,})")
    if links > MAX_LINKS:
        raise TopologyError(
            f"{what}: {links:,} links is more than simcoll builds (at most {MAX_LINKS:,}; "
            "a switch joining the GPUs needs one link per GPU)"
        )

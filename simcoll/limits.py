"""Limits on the size of a machine, collective or schedule simcoll agrees to build.

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
- :data:`MAX_TRANSFERS` = 25,000,000 transfers a generator builds (see its
  comment). A schedule's size is known only to its generator, so this one
  is counted as the generator builds its transfer tables
  (:func:`transfer_budget`), and refused as soon as the count passes it:
  before the rest is built, not before anything is.
- :data:`MAX_SIZE_BYTES` = 1 PiB: the largest buffer size a size option or
  a study takes (:func:`simcoll.units.parse_size`; see its comment).
- :data:`MAX_DRAWN_COMPONENTS` = 2,000: the most components ``topo draw``
  lays out (see its comment).
- :data:`MAX_RANK_PAIR_BYTES` = 4 GiB: the most that arrays over rank pairs
  (bandwidth relation, cut bounds) may take, estimated before they are built
  (see its comment).
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from collections.abc import Iterator
from dataclasses import dataclass

from .errors import ScheduleTooLargeError, TimeLimitError, TooLargeError, TopologyError

#: Most components (GPUs, switches, NICs, CPUs...) :func:`simcoll.draw.draw_topology` lays out: its
#: force-directed layout costs the square of the count per iteration; ``dgx-h100*64`` (1,665
#: components) took 19.7 s and ``dgx-h100*8192`` (212,993) gave no answer in 90 s (issue 52). Past it,
#: a few nodes of the cluster show its structure (``dgx-h100*2``).
MAX_DRAWN_COMPONENTS = 2_000
#: Transfers past which saving an Algorithm as JSON warns and names ``.npz`` (issue 51): the ring
#: Allreduce on ``ring:256`` (130,560 transfers) is 11.4 MB of JSON written in 0.9 s against 4.3 MB of
#: ``.npz`` in 7 ms, and ``ring:1024``'s took 44 s and 3.1 GB through JSON.
JSON_ADVISED_TRANSFERS = 100_000
#: Most bytes the arrays over rank pairs one computation may build: SCCL's bandwidth relation
#: (:func:`simcoll.routes.bandwidth_relation`: reachability and pair keys, ~26 bytes a pair), which
#: every generated Algorithm's rounds need, and a cut bound (:mod:`simcoll.bounds`: cuts × P masks
#: and products, chunks × P or P² counts). They grow with the square of the GPUs:
#: ``compare -t 'dgx-h100*8192'`` (65,536 GPUs) ran out of memory at 17 GB after 80-90 s (issue 52).
#: 4 GiB keeps the 8,192 GPUs of ``dgx-h100*1024`` (1.7 and ~3.5 GiB).
MAX_RANK_PAIR_BYTES = 4 << 30
#: Most GPUs in one machine (see the module docstring).
MAX_GPUS = 65_536
#: Most links in one machine (see the module docstring).
MAX_LINKS = 2_000_000
#: Most chunks a collective's layouts list (P·C, P²·C for Alltoall, C for
#: Allreduce, Broadcast and Reduce, whose ranks all share one layout): each
#: is a Python integer in its layouts (~30 bytes), so 50 million stay near
#: 1.5 GB. The 1,024-GPU targets of issue 15 need 25 million
#: (``dgx-h100*128``, NCCL's rings with chunk factor 24·P). What lists every
#: (chunk, rank) pair of a collective one by one (its ``pre`` and ``post``
#: sets) is refused past it too: NCCL's rings on 4,096 GPUs have 134
#: million.
MAX_COLLECTIVE_SLOTS = 50_000_000
#: Most transfers a generator builds. Generating takes 40-300 bytes a
#: transfer at its peak (columns of 41 bytes, and what the generator works
#: them out from), and simulating one holds its message's state besides,
#: so 25 million stay within a few GB. Issue 15's largest schedules are
#: NCCL's rings and multi-ring on 1,024 GPUs (``dgx-h100*128``): 16.8
#: million. On 4,096 GPUs a flat ring Allreduce has 33.5 million (2(P-1)
#: steps of P chunks) and the 2D ring 63 million.
MAX_TRANSFERS = 25_000_000
#: Most operations a workload holds, over all its ranks (simcoll.workload):
#: each is a Python object of ~150-250 bytes and the run keeps its start and
#: end and, for the calls, their state, so 20 million stay within a few GB.
#: A GPT-3-shaped step on 1,024 GPUs (tensor 8 x pipeline 8 x data 16, 8
#: micro-batches) has 0.83 million.
MAX_WORKLOAD_OPERATIONS = 20_000_000
#: Largest buffer size, in bytes, that :func:`simcoll.units.parse_size` reads
#: (1 PiB, ``1024TB``). No library function has a limit of its own, but the
#: largest buffer an evaluated collective moves is a few GiB per GPU (the
#: seed papers sweep to 1-8 GB), so a size a million times that is a typo;
#: and past 2**53 bytes sizes stop being exact as floats, which every time
#: formula divides them as.
MAX_SIZE_BYTES = 2**50


@dataclass
class _Budget:
    what: str
    built: int = 0


_BUDGET: contextvars.ContextVar[_Budget | None] = contextvars.ContextVar("simcoll_transfer_budget", default=None)


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


def transfer_budget(what: str) -> contextlib.AbstractContextManager[None]:
    """Count the transfers built inside against :data:`MAX_TRANSFERS`.

    :class:`~simcoll.algorithm.TransferTable` charges every table built from
    new columns (:func:`charge_transfers`); tables that copy or reorder the
    rows of others do not (:func:`uncharged`), so each transfer counts once.
    A budget already open (a generator composing others) goes on counting;
    ``what`` (the generator and its collective) names it in the error.

    Raises
    ------
    ScheduleTooLargeError
        From the first table that takes the count past the limit.

    Examples
    --------
    >>> from simcoll.algorithm import TransferTable
    >>> with transfer_budget("two tables"):
    ...     _ = TransferTable([0, 1], [0, 1], [1, 0], [False, False], step=[0, 0])
    ...     _ = TransferTable([0], [0], [1], [False], step=[1])
    ...     transfers_built()
    3
    """
    return contextlib.nullcontext() if _BUDGET.get() is not None else _budget_set(_Budget(what))


def transfers_built() -> int | None:
    """The transfers counted so far by the open :func:`transfer_budget` (None outside one)."""
    budget = _BUDGET.get()
    return None if budget is None else budget.built


def uncharged() -> contextlib.AbstractContextManager[None]:
    """Tables built inside are not counted: their rows are copies of counted ones."""
    return _budget_set(None)


@contextlib.contextmanager
def _budget_set(budget: _Budget | None) -> Iterator[None]:
    """``budget`` is the open one inside, the one before after."""
    token = _BUDGET.set(budget)
    try:
        yield
    finally:
        _BUDGET.reset(token)


def charge_transfers(count: int) -> None:
    """Count ``count`` new transfers against the open :func:`transfer_budget`, if any.

    Raises
    ------
    ScheduleTooLargeError
        When the count passes :data:`MAX_TRANSFERS`.
    TimeLimitError
        When the schedule being built has passed its :func:`build_deadline`.
    """
    check_build_time("building its transfer tables")
    budget = _BUDGET.get()
    if budget is None:
        return
    budget.built += count
    if budget.built > MAX_TRANSFERS:
        raise ScheduleTooLargeError(
            f"{budget.what}: more than {MAX_TRANSFERS:,} transfers, more than simcoll builds "
            "(simcoll.limits.MAX_TRANSFERS); fewer ranks or a smaller chunk factor build fewer"
        )


def check_rank_pair_bytes(estimate_bytes: float, what: str) -> None:
    """Refuse, before it is built, a computation over rank pairs whose arrays
    would take ``estimate_bytes`` (:data:`MAX_RANK_PAIR_BYTES`); ``what`` names it."""
    if estimate_bytes > MAX_RANK_PAIR_BYTES:
        raise TooLargeError(
            f"{what} would need about {estimate_bytes / 2**30:,.0f} GiB, more than simcoll builds "
            f"(simcoll.limits.MAX_RANK_PAIR_BYTES, {MAX_RANK_PAIR_BYTES / 2**30:.0f} GiB): a smaller machine has one"
        )


#: (deadline, limit, what) of the schedule being built under :func:`build_deadline`, or None.
_BUILD_DEADLINE: contextvars.ContextVar[tuple[float, float, str] | None] = contextvars.ContextVar(
    "simcoll_build_deadline", default=None
)


@contextlib.contextmanager
def build_deadline(time_limit_s: float, what: str) -> Iterator[None]:
    """Give building ``what`` (a generator's schedule) ``time_limit_s`` seconds of
    wall clock: :func:`check_build_time`, called in the long loops of building
    one (ring searches, transfer tables, SCCL's bandwidth relation), raises
    past it. ``simcoll compare`` builds each schedule under its ``--time-limit``
    (issue 52: a multi-ring on 8,192 GPUs searched for its rings for 85 s
    under a limit of 10)."""
    token = _BUILD_DEADLINE.set((time.perf_counter() + time_limit_s, time_limit_s, what))
    try:
        yield
    finally:
        _BUILD_DEADLINE.reset(token)


def check_build_time(doing: str) -> None:
    """Raise :class:`~simcoll.errors.TimeLimitError` when the schedule being
    built has passed its :func:`build_deadline` (nothing outside one)."""
    deadline = _BUILD_DEADLINE.get()
    if deadline is not None and time.perf_counter() > deadline[0]:
        raise TimeLimitError(
            f"{deadline[2]}: wall-clock limit of {deadline[1]:g} s reached {doing} (raise the time limit)"
        )

"""The main job: every applicable algorithm for a collective on a machine,
across buffer sizes, as a tidy DataFrame (one row per algorithm, size and
method), with the best algorithm per size marked and a plot of algbw against
size.

``method`` says where a time comes from:

- ``"simulate"`` (default): the discrete-event simulator in Algorithm mode
  (:func:`simcoll.simulator.simulate`, max-min sharing and the model's
  contention parameters);
- ``"analytic"``: the closed-form α-β critical path
  (:func:`simcoll.analytic.critical_path_time_s`);
- ``"program"`` (extra rows with ``program=True``): the Algorithm lowered to a
  Program (:func:`simcoll.compiler.lower_algorithm`) and simulated in Program
  mode, beside its Algorithm-mode row.

The bandwidth lower bound is reported beside them. ``best`` marks the fastest
algorithm per size among the rows of the primary method.

The ``nccl`` row is NCCL's own choice at each size
(:func:`simcoll.nccl.baseline.nccl_algorithm`: NCCL 2.30's tuner picks the
algorithm, protocol and channel count, and that Algorithm is timed with the
chosen protocol; Alltoall and SendRecv get NCCL's point-to-point exchange,
:mod:`simcoll.nccl.p2p`); its ``choice`` column says what was chosen, e.g.
``ring/LL128/24ch`` or ``p2p/Simple``. The other rows have an empty ``choice``.
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from . import worker_machine
from .algorithm import Algorithm
from .algorithms import applicable
from .analytic import algbw_GBps, busbw_GBps
from .bounds import time_lower_bound_s
from .collectives import Collective, canonical_name, make_collective
from .collector import collector_paused
from .errors import NotApplicableError, OptionError, SimcollError, SimulationError, TimeLimitError, TooLargeError
from .evaluation import METHODS, schedule_time_s
from .machines import Machine, as_machine
from .units import check_size_bytes, format_size

if TYPE_CHECKING:
    from .nccl.versions import NcclSetup

DEFAULT_SIZES = "1KB:1GB"
COLUMNS = [
    "topology",
    "model",
    "collective",
    "algorithm",
    "choice",
    "chunks",
    "steps",
    "rounds",
    "size_bytes",
    "size",
    "time_s",
    "time_us",
    "algbw_GBps",
    "busbw_GBps",
    "algbw_bound_GBps",
    "method",
    "best",
]
#: The size-dependent baseline row (not a registry generator).
NCCL_ROW = "nccl"
#: The name under which ``skipped`` says why the busbw bound column is empty (a machine too large for its cuts).
BOUND_ROW = "busbw bound"
#: From this many ranks, ``compare(jobs > 1)`` runs each task in a fresh worker process
#: (:func:`_in_parallel`; Python 3.11 and later).
FRESH_WORKERS_FROM_RANKS = 512


def compare(
    machine: Machine | str,
    collective: str,
    sizes: list[int],
    *,
    method: str = "simulate",
    program: bool = False,
    contention: bool = True,
    time_limit_s: float = 60.0,
    algorithms: list[str] | tuple[str, ...] | None = None,
    jobs: int = 1,
    progress: Callable[[str], None] | None = None,
    nccl: NcclSetup | str | Mapping | None = None,
) -> tuple[pd.DataFrame, dict[str, str]]:
    """Time every applicable algorithm for ``collective`` on ``machine`` at
    every size.

    Parameters
    ----------
    machine : Machine or str
        The machine, or a topology spec with its default model
        (:func:`simcoll.machines.as_machine`).
    collective : str
        The collective's name (``"allreduce"``, ``"allgather"``...).
    sizes : list of int
        Buffer sizes in bytes (nccl-tests naming), each checked by
        :func:`simcoll.units.check_size_bytes`. An algorithm whose buffer has
        more chunks than a size has bytes is left out at that size (reason in
        ``skipped`` under ``"<name> at <size>"``).
    method : {"simulate", "analytic"}, optional
        Where the times come from (module docstring); default ``"simulate"``.
    program : bool, optional
        Also a ``"program"`` row per algorithm and size where the Algorithm
        can be lowered (:func:`simcoll.compiler.lower_algorithm`).
    contention : bool, optional
        Passed to :func:`simcoll.simulator.simulate`.
    time_limit_s : float, optional
        Wall-clock limit of building each schedule and of each simulation
        (seconds); a schedule whose building reaches it is left out (the
        reason in ``skipped`` under its name), a simulation that reaches it
        leaves its row out, with the reason in ``skipped`` under
        ``"<name> at <size>"``, and the other rows still come. The same
        schedule is then not simulated at the sizes after that one (its
        simulation runs the same messages at every size, so it would take
        about as long again): their rows are left out too, saying so.
        NCCL's row, whose schedule depends on the size, is always tried.
    algorithms : list of str, optional
        Only these rows: registry names and/or ``"nccl"`` (default: every
        applicable algorithm and the ``nccl`` row). An unknown name raises.
    jobs : int, optional
        Worker processes: with more than one, every algorithm is generated
        and timed at every size in its own task (and NCCL's row per size),
        on a :class:`concurrent.futures.ProcessPoolExecutor` (from
        :data:`FRESH_WORKERS_FROM_RANKS` ranks, a fresh process per task,
        forked from a server that imported simcoll once and prepared the
        machine for every task, :mod:`simcoll.worker_machine`, so that a
        worker's peak memory is one task's); the rows and their order are
        the same as with one.
    progress : callable, optional
        Called with one line of text as each piece of work ends: a
        generator generated and timed at every size (or why it does not
        apply), NCCL's row at a size, a lowered Program at a size; the line
        starts with the seconds since the call began (``simcoll compare``
        prints them on stderr). Comparisons of thousands of GPUs take
        minutes: this says how far one has got.
    nccl : NcclSetup, str or mapping, optional
        The NCCL release of the ``nccl`` row and its environment
        (:class:`simcoll.nccl.versions.NcclSetup`, a version such as
        ``"2.7"``, or ``{"version": "2.7", "env": {"NCCL_PROTO": "Simple"}}``);
        default NCCL 2.30. Its ``choice`` column names a release and
        environment other than the default.

    Returns
    -------
    df : pandas.DataFrame
        One row per algorithm, size and method, columns :data:`COLUMNS`;
        ``best`` marks the fastest algorithm per size among the rows of
        ``method``.
    skipped : dict of str to str
        Why the other registered algorithms (or their lowering, or a size)
        are left out.

    Raises
    ------
    OptionError
        With no size, an unknown ``method``, an unknown or empty
        ``algorithms``, or ``jobs`` not a positive integer.
    NotApplicableError
        When no algorithm applies, or none gives a time at any size.
    SizeError
        When a size is not a positive, finite number of bytes.

    Examples
    --------
    >>> df, skipped = compare("ring:4", "allgather", [1024, 1 << 20])
    >>> {"ring", "bidirectional-ring", "direct"} <= set(df.algorithm)
    True
    >>> list(df.method.unique()), sorted(df[df.best]["size"].unique())  # a fastest algorithm per size
    (['simulate'], ['1KB', '1MB'])

    References
    ----------
    .. [1] NVIDIA nccl-tests, "Performance reported": algbw and busbw.
    .. [2] S. Cai et al., "Synthesizing Optimal Collective Algorithms"
       (SCCL), PPoPP 2021, §3.6-3.7: latency- and bandwidth-optimal schedules.
    """
    with collector_paused():  # generation and simulation allocate millions of short-lived objects
        return _compare(
            machine, collective, sizes, method, program, contention, time_limit_s, algorithms, jobs, progress, nccl
        )


def _compare(
    machine: Machine | str,
    collective: str,
    sizes: list[int],
    method: str,
    program: bool,
    contention: bool,
    time_limit_s: float,
    algorithms: list[str] | tuple[str, ...] | None,
    jobs: int,
    progress: Callable[[str], None] | None,
    nccl: NcclSetup | str | Mapping | None,
) -> tuple[pd.DataFrame, dict[str, str]]:
    """:func:`compare` (its arguments as given)."""
    from .nccl.versions import as_setup

    report = _Reporter(progress)
    machine = as_machine(machine)
    if not sizes:
        raise OptionError("compare needs at least one size")
    for size in sizes:
        check_size_bytes(size, where=f"compare size {size!r}")
    if method not in METHODS:
        raise OptionError(f"unknown compare method {method!r}: use {' or '.join(METHODS)}")
    if not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 1:
        raise OptionError(f"compare: jobs must be a positive integer, got {jobs!r}")
    collective = canonical_name(collective)
    nccl = as_setup(nccl)
    wanted = _wanted_rows(algorithms)
    with_nccl = wanted is None or NCCL_ROW in wanted
    timed: dict[tuple[str, int], float | str] = {}
    nccl_done: dict[int, Algorithm | str] = {}
    coll = make_collective(collective, machine.num_ranks)
    bound: list[float] = []
    bound_refused: list[str] = []

    def unit_bound() -> None:  # the cut bound is linear in size (no latency term): computed once
        try:
            bound.append(time_lower_bound_s(coll, machine, coll.size_chunks)[0])
        except TooLargeError as exc:  # too large a machine for its cuts: the table goes without it
            bound.append(math.nan)
            bound_refused.append(str(exc))

    if jobs > 1:  # (the bound is worked out while the workers run: a second on 1,024 GPUs)
        candidates, timed, nccl_done = _in_parallel(
            machine, collective, sizes, wanted, with_nccl, method, contention, time_limit_s, jobs, program, report,
            meanwhile=unit_bound, nccl=nccl,
        )  # fmt: skip
    elif program:  # every Algorithm is lowered below
        candidates = applicable(machine, collective, names=wanted)
        for name, reason in candidates.items():
            if isinstance(reason, str):
                report.generator(name, reason, {})
    else:  # generated and timed one at a time: one schedule in memory, not all of them
        candidates = {}
        for name in _generator_names(collective, wanted):
            started = time.perf_counter()
            candidates[name], times = _generate_and_time(
                machine, collective, name, sizes, method, contention, time_limit_s, keep=False, nccl=nccl
            )
            report.generator(name, candidates[name], times, time.perf_counter() - started)
            timed.update({(name, size): t for size, t in times.items()})
    algorithms = {name: a for name, a in candidates.items() if not isinstance(a, str)}
    skipped = {name: reason for name, reason in candidates.items() if isinstance(reason, str)}
    nccl_ok = with_nccl and _nccl_applies(collective, skipped)
    if not algorithms and not nccl_ok:
        reasons = "; ".join(f"{k}: {v}" for k, v in skipped.items()) or "no generator implements it"
        raise NotApplicableError(f"no algorithm applies to {collective} on {machine.name} ({reasons})")
    if not bound:
        unit_bound()
    unit_bound_s = bound[0]
    if bound_refused:
        skipped[BOUND_ROW] = bound_refused[0]
        report.generator(BOUND_ROW, bound_refused[0], {})
    lowered = _lower_all(algorithms, machine, skipped) if program else {}
    rows = []
    stopped: dict[tuple[str, str], int] = {}  # (row, method): the size whose simulation reached the limit
    for size in sizes:
        runs_at_size = list(algorithms.items())
        if nccl_ok:
            nccl_at = f"{NCCL_ROW} at {format_size(size)}"
            if size in nccl_done:
                baseline = nccl_done[size] if isinstance(nccl_done[size], Algorithm) else None
                if baseline is None:
                    skipped[nccl_at] = nccl_done[size]
            else:
                baseline = _nccl_at(machine, collective, size, skipped, nccl)
                if baseline is None:
                    report.generator(nccl_at, skipped[nccl_at], {})
            if baseline is not None:
                runs_at_size.append((NCCL_ROW, baseline))
        for name, algorithm in runs_at_size:
            chunks = algorithm.collective.size_chunks
            if size < chunks:
                skipped[f"{name} at {format_size(size)}"] = (
                    f"{size} B gives less than one byte to each of its {chunks} chunks"
                )
                continue
            bound_s = unit_bound_s * size / coll.size_chunks
            runs = [(method, algorithm)]
            if name in lowered:
                runs.append(("program", lowered[name]))
            for how, schedule in runs:
                label = f"{name}{' (program)' if how == 'program' else ''} at {format_size(size)}"
                if how == method and (name, size) in timed:
                    t = timed[(name, size)]
                elif (name, how) in stopped:
                    t = _NotTried.after(stopped[(name, how)], time_limit_s)
                    report.row(label, t)
                else:
                    started = time.perf_counter()
                    t = _time(schedule, machine, size, how, contention, time_limit_s, nccl)
                    choice = f" ({_choice(algorithm)})" if name == NCCL_ROW else ""
                    report.row(f"{name}{choice}{label[len(name) :]}", t, time.perf_counter() - started)
                    if isinstance(t, _Stopped) and name != NCCL_ROW:
                        stopped[(name, how)] = size
                if isinstance(t, str):  # the simulation stopped (its time limit, or a stall): the other rows still come
                    skipped[label] = t
                    continue
                rows.append(
                    {
                        "topology": machine.name,
                        "model": machine.model.name,
                        "collective": algorithm.collective.name,
                        "algorithm": name,
                        "choice": _choice(algorithm) if name == NCCL_ROW else "",
                        "chunks": algorithm.chunks,
                        "steps": algorithm.steps,
                        "rounds": algorithm.rounds,
                        "size_bytes": size,
                        "size": format_size(size),
                        "time_s": t,
                        "time_us": t * 1e6,
                        "algbw_GBps": algbw_GBps(size, t),
                        "busbw_GBps": busbw_GBps(algorithm.collective, size, t),
                        "algbw_bound_GBps": _algbw_bound_GBps(size, bound_s),
                        "method": how,
                    }
                )
    if not rows:
        reasons = "; ".join(f"{k}: {v}" for k, v in skipped.items())
        raise NotApplicableError(f"compare: no algorithm gave a time for {collective} on {machine.name} ({reasons})")
    df = pd.DataFrame(rows, columns=COLUMNS[:-1])
    primary = df["method"] == method
    fastest = df[primary].groupby("size_bytes")["time_s"].transform("min")
    df["best"] = False
    df.loc[primary, "best"] = df.loc[primary, "time_s"] == fastest
    return df, skipped


class _Reporter:
    """Progress lines for :func:`compare` (its ``progress`` argument): the
    seconds since the comparison began, what ended and its times."""

    def __init__(self, progress: Callable[[str], None] | None):
        self.progress = progress
        self.started = time.perf_counter()

    @property
    def enabled(self) -> bool:
        return self.progress is not None

    def generator(
        self, name: str, algorithm: object, times: dict[int, float | str], wall_s: float | None = None
    ) -> None:
        """Generator ``name`` ended: its time at each size (or that its
        simulation stopped there), or why it does not apply (``algorithm``
        a string)."""
        if self.progress is None:
            return
        if isinstance(algorithm, str):
            self._say(left_out_line(name, algorithm))
            return
        parts = [f"{format_size(size)} {_shown(t)}" for size, t in times.items()]
        if len(parts) > _SIZES_SHOWN:  # a sweep of sizes: its ends, and how many were stopped
            stopped = sum(isinstance(t, str) for t in times.values())
            parts = [
                f"{len(parts)} sizes from {parts[0]} to {parts[-1]}" + (f" ({stopped} stopped)" if stopped else "")
            ]
        self._say(f"{name}: {', '.join(parts) or 'no size has a byte per chunk'}", wall_s)

    def row(self, label: str, t: float | str, wall_s: float | None = None) -> None:
        """One row at one size (``label``: "<name> at <size>") ended."""
        if self.progress is not None:
            self._say(f"{label}: {_shown(t)}", wall_s)

    def _say(self, line: str, wall_s: float | None = None) -> None:
        took = "" if wall_s is None else f" ({wall_s:.1f} s)"
        self.progress(f"[{time.perf_counter() - self.started:7.1f} s] {line}{took}")


_SIZES_SHOWN = 4  # a progress line lists this many sizes' times at most


def _algbw_bound_GBps(size_bytes: int, bound_s: float) -> float:
    """The algbw the time bound allows: inf for a zero bound, nan where none was computed."""
    if math.isnan(bound_s):
        return math.nan
    return size_bytes / bound_s / 1e9 if bound_s > 0 else math.inf


def left_out_line(name: str, reason: str) -> str:
    """The line that says why row ``name`` is not in the table (``reason``,
    from :func:`compare`'s second result): its simulation stopped at the
    wall-clock limit, its collective or schedule is larger than simcoll
    builds (:mod:`simcoll.limits`), or the algorithm does not apply.

    >>> left_out_line("ring", "ring: allreduce on 4,096 ranks, chunk factor 4,096: more than simcoll builds")
    'too large: ring: allreduce on 4,096 ranks, chunk factor 4,096: more than simcoll builds'
    >>> left_out_line("nvls", "the machine has no NVLink SHARP switch")
    'not applicable: nvls: the machine has no NVLink SHARP switch'
    """
    if "wall-clock limit" in reason:
        what = "stopped"
    elif "more than simcoll builds" in reason or "simcoll.limits" in reason:  # (every size refusal cites them)
        what = "too large"
    else:
        what = "not applicable"
    return f"{what}: {reason if reason.startswith(name + ':') else f'{name}: {reason}'}"


def _shown(t: float | str) -> str:
    if isinstance(t, _Stopped):
        return "stopped (wall-clock limit)"
    if isinstance(t, _NotTried):
        return f"not simulated (the limit was reached at {format_size(t.size)})"
    return f"failed ({t})" if isinstance(t, str) else f"{t * 1e6:.2f} us"


class _Stopped(str):
    """Why a simulation stopped: its wall-clock limit was reached (the
    :class:`~simcoll.errors.TimeLimitError`'s message). A ``str``, as every
    reason in ``skipped``, that also says it was the limit, across worker
    processes too."""


class _NotTried(str):
    """Why a schedule was not simulated at a size: its simulation reached
    the wall-clock limit at ``size``, an earlier size of the comparison."""

    size: int

    @classmethod
    def after(cls, size: int, time_limit_s: float) -> _NotTried:
        reason = cls(
            f"not simulated: its simulation at {format_size(size)} reached the {time_limit_s:g} s "
            "wall-clock limit (raise time_limit_s)"
        )
        reason.size = size
        return reason


def _in_parallel(
    machine: Machine,
    collective: str,
    sizes: list[int],
    wanted: set[str] | None,
    with_nccl: bool,
    method: str,
    contention: bool,
    time_limit_s: float,
    jobs: int,
    keep: bool,
    report: _Reporter,
    meanwhile: Callable[[], None] = lambda: None,
    nccl: NcclSetup | None = None,
) -> tuple[dict[str, Algorithm | Timed | str], dict[tuple[str, int], float | str], dict[int, Algorithm | str]]:
    """:func:`compare`'s generation and timing on ``jobs`` processes: one
    task per generator (its Algorithm, or with ``keep`` false only its
    :class:`Timed` summary, and its time at every size) and one per size for
    NCCL's row. Results are collected in registry order, so the table does
    not depend on which task ends first; ``report`` hears of each task as
    it ends. A thread of this process calls ``meanwhile`` while the tasks
    are submitted: the first submission waits for the workers' fork server
    to start (3 s on 1,024 GPUs, importing simcoll and preparing the
    machine), in which this process would otherwise sit idle."""
    from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor, as_completed

    from .nccl.baseline import BASELINE_COLLECTIVES

    names = _generator_names(collective, wanted)
    # On a large machine a worker that has run one generator holds on to memory it freed (Python
    # and the allocator keep fragmented arenas), which adds to the next one's peak: there, every
    # task gets a fresh worker, forked from a server that has imported simcoll once (a worker
    # started afresh imports it again: 0.8 s of CPU a task, 20 tasks on 1,024 GPUs).
    fresh = machine.num_ranks >= FRESH_WORKERS_FROM_RANKS and sys.version_info >= (3, 11)
    with contextlib.ExitStack() as stack:
        options, token = _fresh_workers(stack, machine, contention) if fresh else ({}, None)
        pool = stack.enter_context(ProcessPoolExecutor(max_workers=jobs, **options))
        aside = stack.enter_context(ThreadPoolExecutor(max_workers=1))
        meanwhile_done = aside.submit(meanwhile)

        def submit(task: Callable, *args):
            return pool.submit(_on_worker_machine, token, task, machine, *args)

        # NCCL's rows first: each simulates one schedule at one size, a few seconds at most, which
        # at the end would leave the other workers idle (1,024 GPUs: its 1 GB row ran alone at the
        # end for 2-3 s).
        nccl_futures = (
            {size: submit(_nccl_task, collective, size, method, contention, time_limit_s, nccl) for size in sizes}
            if with_nccl and collective in BASELINE_COLLECTIVES
            else {}
        )
        # Then longest first: the generators registered last (hierarchical, NCCL's, in-network) compose
        # the others and have the most messages sharing resources, so they are submitted first;
        # a long one started last would leave the other workers idle (NVLS-Tree on 128 GPUs:
        # a third of the one-process time, started last in registry order).
        submitted = {
            n: submit(_generate_and_time, collective, n, sizes, method, contention, time_limit_s, keep, nccl)
            for n in reversed(names)
        }
        generated = [submitted[n] for n in names]
        meanwhile_done.result()
        if report.enabled:  # each task as it ends (the worker's own wall time is not known here)
            what = {future: name for name, future in submitted.items()}
            what.update({future: size for size, future in nccl_futures.items()})
            for future in as_completed(what):
                done = future.result()
                if isinstance(what[future], str):
                    report.generator(what[future], *done)
                elif isinstance(done[0], str):
                    report.generator(f"{NCCL_ROW} at {format_size(what[future])}", done[0], {})
                elif done[1] is not None:
                    report.row(f"{NCCL_ROW} ({_choice(done[0])}) at {format_size(what[future])}", done[1])
        candidates: dict[str, Algorithm | str] = {}
        timed: dict[tuple[str, int], float | str] = {}
        for name, future in zip(names, generated, strict=True):
            algorithm, times = future.result()
            candidates[name] = algorithm
            timed.update({(name, size): t for size, t in times.items()})
        nccl_done: dict[int, Algorithm | str] = {}
        for size, future in nccl_futures.items():
            nccl_done[size], t = future.result()
            if t is not None:
                timed[(NCCL_ROW, size)] = t
        return candidates, timed, nccl_done


def _fresh_workers(stack: contextlib.ExitStack, machine: Machine, contention: bool) -> tuple[dict, str | None]:
    """ProcessPoolExecutor options for a fresh worker per task: forked from
    a fork server that has imported what a task runs, where the platform has
    one (the default start method for it, "spawn", imports it all again),
    and has prepared ``machine`` for them (:mod:`.worker_machine`); with the
    prepared machine's token (None without a fork server). What is set up
    for the server is undone when ``stack`` closes."""
    import multiprocessing
    import os
    import tempfile

    options: dict = {"max_tasks_per_child": 1}
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return options, None
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(
        ["simcoll.compare", "simcoll.simulator", "simcoll.algorithms", "simcoll.worker_machine"]
    )
    options["mp_context"] = context
    # the server reads the machine when it starts (at the first task); a server already running
    # (an earlier comparison in this process) keeps the machine it has, if any
    folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="simcoll-compare-")))
    token = worker_machine.write_for_server(machine, contention, folder / "machine.pickle")
    before = os.environ.get(worker_machine.ENV_VAR)
    os.environ[worker_machine.ENV_VAR] = str(folder / "machine.pickle")
    stack.callback(_restore_environment, worker_machine.ENV_VAR, before)
    return options, token


def _restore_environment(name: str, value: str | None) -> None:
    """Environment variable ``name`` back to ``value`` (None: unset)."""
    import os

    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def _on_worker_machine(token: str | None, task: Callable, machine: Machine, *args):
    """``task(machine, *args)`` on the machine this worker's fork server
    prepared, where it has ``token`` (:func:`.worker_machine.machine_for`),
    with the cyclic collector paused as in the calling process (a worker
    starts with it running: generating NCCL's rings on 1,024 GPUs spent
    0.3-0.7 s of its 4 s in it)."""
    with collector_paused():
        return task(machine if token is None else worker_machine.machine_for(token, machine), *args)


@dataclass(frozen=True)
class Timed:
    """What the table needs of a generated Algorithm once it has been timed
    at every size (its collective and C, S, R), kept in its place so that a
    comparison holds one schedule in memory at a time."""

    collective: Collective
    chunks: int
    steps: int
    rounds: int


def _generator_names(collective: str, wanted: set[str] | None) -> list[str]:
    """The registered generators of ``collective`` (those ``wanted``), in registry order."""
    from .algorithms import REGISTRY

    return [n for n, g in REGISTRY.items() if collective in g.collectives and (wanted is None or n in wanted)]


def _generate_and_time(
    machine: Machine,
    collective: str,
    name: str,
    sizes: list[int],
    method: str,
    contention: bool,
    time_limit_s: float,
    keep: bool = True,
    nccl: NcclSetup | None = None,
) -> tuple[Algorithm | Timed | str, dict[int, float | str]]:
    """One generator's Algorithm (or why it does not apply or is too large; with ``keep``
    false, its :class:`Timed` summary) and its time at every size it has a
    byte per chunk for (under the protocol the baseline ``nccl`` picks), or
    why its simulation stopped."""
    from .algorithms import generate
    from .limits import build_deadline

    try:
        with build_deadline(time_limit_s, name):  # building it counts against the limit too
            algorithm = generate(name, machine, collective)
    except (NotApplicableError, TooLargeError, TimeLimitError) as exc:  # a row left out, and why
        return str(exc), {}
    times: dict[int, float | str] = {}
    stopped_at = None  # the size whose simulation reached the wall-clock limit
    for size in sizes:
        if size < algorithm.collective.size_chunks:
            continue
        if stopped_at is not None:
            times[size] = _NotTried.after(stopped_at, time_limit_s)
            continue
        times[size] = _time(algorithm, machine, size, method, contention, time_limit_s, nccl)
        if isinstance(times[size], _Stopped):
            stopped_at = size
    if keep:
        return algorithm, times
    return Timed(algorithm.collective, algorithm.chunks, algorithm.steps, algorithm.rounds), times


def _nccl_task(
    machine: Machine, collective: str, size: int, method: str, contention: bool, time_limit_s: float, nccl: NcclSetup
) -> tuple[Algorithm | str, float | str | None]:
    """NCCL's Algorithm at ``size`` and its time (or why its simulation
    stopped), or why it cannot be built (a :func:`_in_parallel` task)."""
    from .nccl.baseline import nccl_algorithm

    try:
        algorithm = nccl_algorithm(machine, collective, size, nccl=nccl)
    except SimcollError as exc:
        return str(exc), None
    if size < algorithm.collective.size_chunks:
        return algorithm, None
    return algorithm, _time(algorithm, machine, size, method, contention, time_limit_s, nccl)


def _wanted_rows(algorithms: list[str] | tuple[str, ...] | str | None) -> set[str] | None:
    """The row names asked for (None: all), each checked against the registry."""
    from .algorithms import REGISTRY

    if algorithms is None:
        return None
    if isinstance(algorithms, str):
        algorithms = [a.strip() for a in algorithms.split(",") if a.strip()]
    wanted = set(algorithms)
    unknown = sorted(wanted - set(REGISTRY) - {NCCL_ROW})
    if unknown:
        raise OptionError(f"unknown algorithm(s) {', '.join(unknown)}; known: {NCCL_ROW}, {', '.join(REGISTRY)}")
    if not wanted:
        raise OptionError("compare: the algorithm list is empty")
    return wanted


def _nccl_applies(collective: str, skipped: dict[str, str]) -> bool:
    from .nccl.baseline import BASELINE_COLLECTIVES

    if collective not in BASELINE_COLLECTIVES:
        skipped[NCCL_ROW] = f"NCCL has no algorithm for {collective}"
        return False
    return True


def _nccl_at(
    machine: Machine, collective: str, size: int, skipped: dict[str, str], nccl: NcclSetup
) -> Algorithm | None:
    """NCCL's Algorithm at ``size`` (None, with the reason in ``skipped``, where it cannot be built)."""
    from .nccl.baseline import nccl_algorithm

    try:
        return nccl_algorithm(machine, collective, size, nccl=nccl)
    except SimcollError as exc:
        skipped[f"{NCCL_ROW} at {format_size(size)}"] = str(exc)
        return None


def _choice(algorithm: Algorithm) -> str:
    from .nccl.baseline import choice_label

    return choice_label(algorithm)


def _time(
    schedule, machine: Machine, size: int, how: str, contention: bool, time_limit_s: float, nccl: NcclSetup | None
) -> float | str:
    """The time of ``schedule`` at ``size`` by ``how`` (``"analytic"``, else
    simulated; :func:`simcoll.evaluation.schedule_time_s`, with the protocol
    the baseline ``nccl`` would pick), or why it has none (a :class:`_Stopped` where the
    simulation's wall-clock limit was reached). Not verified again: the
    registered generators are verified by the test suite, and a lowered
    Program comes from a verified lowering (:func:`_lower_all`)."""
    method = "analytic" if how == "analytic" else "simulate"
    try:
        return schedule_time_s(
            schedule, machine, size, method=method, contention=contention, time_limit_s=time_limit_s, nccl=nccl
        )
    except TimeLimitError as exc:
        return _Stopped(exc)
    # (TooLargeError: an orbit that the closed form, or a plan of every message, would list one by one)
    except (SimulationError, TooLargeError) as exc:
        return str(exc)


def _lower_all(algorithms: dict[str, Algorithm], machine: Machine, skipped: dict[str, str]) -> dict[str, object]:
    """Programs for the algorithms the compiler can lower for ``machine``;
    the others go to ``skipped`` with the reason."""
    from .compiler import lower_algorithm
    from .simulator import lower_for

    out = {}
    for name, algorithm in algorithms.items():
        try:
            out[name] = lower_for(algorithm, machine, lower_algorithm)
        except SimcollError as exc:
            skipped[f"{name} (program)"] = f"cannot be lowered: {exc}"
    return out

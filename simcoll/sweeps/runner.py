"""Running a study: batches on Dask ``distributed`` (or serially), results
into a Parquet dataset, progress on a tqdm bar.

:func:`run_study` expands the study, skips the points whose keys are already
in the output directory (``resume=True``), submits one task per batch (one
machine variant × collective × algorithm, all its sizes and simulator
settings, so the schedule is generated once) and writes each completed batch
as an immutable part file (:mod:`.store`). Execution is a Dask
``LocalCluster`` (``workers`` processes, one thread each) by default, an
existing cluster given by ``scheduler`` (its address) or ``client``, or
in-process with ``serial=True`` (tests, debugging). Workers keep the machines
and schedules they have built (:func:`functools.lru_cache`), so tasks on one
worker that share a machine or schedule build it once.

A point that fails (the generator does not apply, the schedule fails
verification, the simulator raises, the baseline is missing) is recorded with
its ``status`` (``not-applicable`` or ``error``) and message; it does not
stop the sweep. A batch lost with its worker is recorded as ``error`` too.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..errors import NotApplicableError, OptionError, SimcollError, SolverError, SweepError
from .store import done_keys, part_files, write_manifest, write_part
from .study import AlgorithmSpec, Batch, MachineSpec, Point, Study, load_study, resolved_model_dict
from .workloads import WorkloadBatch


@dataclass(frozen=True)
class SweepSummary:
    """What :func:`run_study` did: ``total`` points in the study, ``done``
    with a row at the end, ``failed`` rows with status ``error``, ``ran`` in
    this call, and its wall-clock seconds."""

    total: int
    done: int
    failed: int
    ran: int
    wall_s: float

    @property
    def points_per_s(self) -> float:
        return self.ran / self.wall_s if self.wall_s > 0 else math.inf


# -- one batch (runs on a worker) ---------------------------------------------------
@lru_cache(maxsize=32)
def _machine(spec: MachineSpec):
    from ..cost_model import model_from_dict
    from ..machines import load_machine

    model = model_from_dict(resolved_model_dict(spec), where=f"machine {spec.label!r} (model after overrides)")
    return load_machine(spec.topology, model)


def _generate(name: str, machine, collective: str, chunks: int | None, options: dict[str, Any]):
    """``simcoll.generate`` on ``machine``."""
    from .. import generate

    return generate(name, machine, collective, chunks=chunks, **options)


def _nccl_setup(spec: AlgorithmSpec | tuple):
    """The NCCL release and environment of a study's ``nccl`` entry, or of its
    options (default: NCCL 2.30)."""
    from ..nccl.versions import NcclSetup

    options = dict(spec.options if isinstance(spec, AlgorithmSpec) else spec)
    return NcclSetup(options.get("version", NcclSetup.version), tuple(options.get("env", ())))


@lru_cache(maxsize=128)
def _schedule(machine_spec: MachineSpec, collective: str, algorithm: AlgorithmSpec):
    """The Algorithm (or Program) of ``algorithm`` for ``collective`` on the machine."""
    from ..algorithms import REGISTRY

    machine = _machine(machine_spec)
    if algorithm.kind == "generator":
        options = REGISTRY[algorithm.name].parse_options(dict(algorithm.options))
        return _generate(algorithm.name, machine, collective, algorithm.chunks, options)
    if algorithm.kind == "nccl":
        from ..nccl.baseline import nccl_algorithm

        # the Algorithm at 1 GiB names the row (chunks, steps); run_batch re-chooses it per size
        return nccl_algorithm(machine, collective, 1 << 30, nccl=_nccl_setup(algorithm))
    if algorithm.kind == "sccl":
        from ..synthesis import synthesize

        opts = dict(algorithm.options)
        result = synthesize(
            machine,
            collective,
            opts.get("chunks", 1),
            opts["steps"],
            opts.get("rounds"),
            backend=opts.get("backend", "cpsat"),
            time_limit_s=float(opts.get("time_limit_s", 60.0)),
            root=opts.get("root"),
        )
        if result.status != "sat" or result.algorithm is None:
            raise SolverError(f"sccl synthesis: {result.status}{': ' + result.reason if result.reason else ''}")
        return result.algorithm
    from ..interop import load_schedule

    return load_schedule(algorithm.path)


@lru_cache(maxsize=64)
def _unit_bound_s(machine_spec: MachineSpec, collective: str) -> tuple[float, int]:
    """The bandwidth lower bound on the time for a buffer of ``size_chunks``
    bytes (it is linear in size) and that chunk count."""
    from ..bounds import time_lower_bound_s
    from ..collectives import make_collective

    machine = _machine(machine_spec)
    coll = make_collective(collective, machine.num_ranks)
    bound_s, _ = time_lower_bound_s(coll, machine, coll.size_chunks)
    return bound_s, coll.size_chunks


def run_batch(batch: Batch, study: str = "") -> list[dict[str, Any]]:
    """The result rows of every point of ``batch`` (never raises for a bad point).

    Each row has the columns of :data:`simcoll.sweeps.store.COLUMNS`:
    the point's parameters, ``status`` (``ok``, ``not-applicable`` or
    ``error``), ``error`` (the message), and for ``ok`` rows ``time_s``,
    ``algbw_GBps``, ``busbw_GBps`` (nccl-tests conventions) and the
    max-flow bound as ``algbw_bound_GBps`` / ``busbw_bound_GBps``.
    """
    from .. import __version__

    if isinstance(batch, WorkloadBatch):
        return run_workload_batch(batch, study)
    spec = batch.algorithm
    base = {
        "study": study,
        "machine": batch.machine.label,
        "topology": batch.machine.topology,
        "overrides": batch.machine.overrides_text(),
        "collective": batch.collective,
        "algorithm": spec.label,
        "algorithm_kind": spec.kind,
        "algorithm_spec": json.dumps(spec.to_dict(), sort_keys=True, default=str),
        "simcoll_version": __version__,
    }
    try:
        machine = _machine(batch.machine)
        base.update(model=machine.model.name, num_ranks=machine.num_ranks)
        schedule = _schedule(batch.machine, batch.collective, spec)
    except NotApplicableError as exc:
        return [_row(base, p, status="not-applicable", error=str(exc)) for p in batch.points]
    except Exception as exc:  # noqa: BLE001 - a bad point is recorded, never stops the sweep
        return [_row(base, p, status="error", error=_message(exc)) for p in batch.points]
    base.update(
        chunks=getattr(schedule, "chunks", None),
        steps=getattr(schedule, "steps", None),
        rounds=getattr(schedule, "rounds", None),
    )
    if batch.verify:
        from ..verify import check

        problems = check(schedule, machine)
        if problems:
            message = f"verification: {problems[0]}" + (f" (+{len(problems) - 1} more)" if len(problems) > 1 else "")
            return [_row(base, p, status="error", error=message) for p in batch.points]
    try:
        unit_bound = _unit_bound_s(batch.machine, batch.collective)
    except Exception:  # noqa: BLE001 - a collective without a bound still gets its times
        unit_bound = None
    lowered: dict[str, Any] = {}
    rows = []
    baseline = _nccl_setup(batch.nccl)  # the study's NCCL, whose protocol choice every point runs with
    own = _nccl_setup(spec) if spec.kind == "nccl" else None
    for point in batch.points:
        try:
            if own is not None:  # NCCL's choice depends on the size (simcoll.nccl.baseline)
                from ..nccl.baseline import nccl_algorithm

                lowered = {}
                schedule = nccl_algorithm(machine, batch.collective, point.size_bytes, nccl=own)
            t = _time_point(schedule, machine, point, batch.time_limit_s, lowered, baseline)
        except NotApplicableError as exc:
            rows.append(_row(base, point, status="not-applicable", error=str(exc)))
            continue
        except Exception as exc:  # noqa: BLE001
            rows.append(_row(base, point, status="error", error=_message(exc)))
            continue
        rows.append(_row(base, point, status="ok", time_s=t, schedule=schedule, unit_bound=unit_bound))
    return rows


def run_workload_batch(batch: WorkloadBatch, study: str = "") -> list[dict[str, Any]]:
    """The result row of each point of a study of training steps
    (:mod:`.workloads`; never raises for a bad point)."""
    from .. import __version__
    from ..workload import run_workload, with_schedule

    rows = []
    for point in batch.points:
        row: dict[str, Any] = {
            "key": point.key, "study": study, "machine": point.machine.label, "topology": point.machine.topology,
            "overrides": point.machine.overrides_text(), "workload": point.workload.label,
            "algorithm": point.schedule or "own", "algorithm_kind": "workload",
            "algorithm_spec": json.dumps(point.workload.to_dict(), sort_keys=True, default=str),
            "nccl": point.nccl, "mode": "workload", "contention": point.contention, "simcoll_version": __version__,
        }  # fmt: skip
        try:
            machine = _machine(point.machine)
            row.update(model=machine.model.name, num_ranks=machine.num_ranks)
            workload = point.workload.load()
            if point.schedule is not None:
                workload = with_schedule(workload, point.schedule)
            launch = None if point.machine.launch is not None else "processes"  # a study's launch: keep it
            result = run_workload(workload, machine, contention=point.contention, time_limit_s=batch.time_limit_s,
                                  nccl=point.nccl, launch=launch)  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - a bad point is recorded, never stops the sweep
            rows.append({**row, "status": "error", "error": _message(exc)})
            continue
        rows.append({
            **row, "status": "ok", "time_s": result.step_time_s, "throughput_per_s": result.throughput_per_s,
            "compute_s": result.compute_s(), "exposed_communication_s": result.exposed_communication_s(),
        })  # fmt: skip
    return rows


def _time_point(schedule, machine, point: Point, time_limit_s: float, lowered: dict[str, Any], nccl=None) -> float:
    """The time of one point (:func:`simcoll.evaluation.schedule_time_s`, with
    the protocol the study's NCCL baseline ``nccl`` would pick); an Algorithm
    at a ``program`` point is lowered first, once per batch (``lowered``)."""
    from ..algorithm import Algorithm
    from ..evaluation import schedule_time_s

    if point.mode == "program" and isinstance(schedule, Algorithm):
        if "program" not in lowered:
            from ..compiler import lower_algorithm
            from ..simulator import lower_for

            try:
                lowered["program"] = lower_for(schedule, machine, lower_algorithm)
            except SimcollError as exc:
                lowered["program"] = exc
        if isinstance(lowered["program"], Exception):
            raise lowered["program"]
        schedule = lowered["program"]
    method = "analytic" if point.mode == "analytic" else "simulate"
    return schedule_time_s(
        schedule,
        machine,
        point.size_bytes,
        method=method,
        mode=None if method == "analytic" else point.mode,
        contention=bool(point.contention),
        time_limit_s=time_limit_s,
        nccl=nccl,
    )


def _row(
    base: dict[str, Any],
    point: Point,
    *,
    status: str,
    error: str | None = None,
    time_s: float | None = None,
    schedule=None,
    unit_bound: tuple[float, int] | None = None,
) -> dict[str, Any]:
    from .. import analytic

    row = {
        **base,
        "key": point.key,
        "size_bytes": point.size_bytes,
        "mode": point.mode,
        "contention": point.contention,
        "status": status,
        "error": error,
    }
    if time_s is not None and schedule is not None:
        coll = schedule.collective
        row.update(
            time_s=time_s,
            algbw_GBps=analytic.algbw_GBps(point.size_bytes, time_s),
            busbw_GBps=analytic.busbw_GBps(coll, point.size_bytes, time_s),
        )
        if unit_bound is not None and unit_bound[0] > 0:
            bound_s = unit_bound[0] * point.size_bytes / unit_bound[1]
            row.update(
                algbw_bound_GBps=analytic.algbw_GBps(point.size_bytes, bound_s),
                busbw_bound_GBps=analytic.busbw_GBps(coll, point.size_bytes, bound_s),
            )
    return row


def _message(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text if isinstance(exc, SimcollError) else f"{type(exc).__name__}: {text}"


# -- the sweep -------------------------------------------------------------------
def run_study(
    study: Study | str | Path | dict,
    out: str | Path,
    *,
    workers: int | None = None,
    scheduler: str | None = None,
    client: Any = None,
    resume: bool = False,
    retry_failed: bool = False,
    serial: bool = False,
    progress: bool = True,
) -> SweepSummary:
    """Run ``study`` into the results directory ``out`` (module docstring).

    Parameters
    ----------
    study : Study, path or mapping
        The study (:func:`~simcoll.sweeps.study.load_study`).
    out : path
        The results directory (created). It must hold no results unless ``resume``.
    workers : int, optional
        Worker processes of the ``LocalCluster`` (default: the CPU count, at most 8).
    scheduler : str, optional
        Address of a running Dask scheduler (``tcp://host:8786``) to use instead.
    client : distributed.Client, optional
        An existing client to use instead (not closed here).
    resume : bool
        Run only the points whose keys are not yet in ``out``. A point that
        failed (a row with status ``error``) has a row, so it is not run again.
    retry_failed : bool
        Resume, and run again the points whose latest row failed; their new
        rows go into new parts and supersede the old ones (implies ``resume``).
    serial : bool
        Run in this process, without Dask.
    progress : bool
        Show a tqdm progress bar (``tqdm.auto``: terminal or notebook).

    Returns
    -------
    SweepSummary

    Raises
    ------
    StudyError
        For a bad study.
    SweepError
        When ``out`` already holds results without ``resume``, or the Dask
        scheduler cannot be reached.
    OptionError
        When ``workers`` is below 1.
    """
    if not isinstance(study, Study):
        study = load_study(study)
    out = Path(out)
    resume = resume or retry_failed
    if part_files(out) and not resume:
        raise SweepError(f"{out}: already holds results; pass resume=True (--resume) or choose another directory")
    if workers is not None and workers < 1:
        raise OptionError(f"workers must be at least 1, got {workers}")
    started = time.perf_counter()
    batches = study.batches()
    keys = [p.key for b in batches for p in b.points]
    write_manifest(out, dict(study.raw) or {"name": study.name}, keys)
    done = done_keys(out, retry_failed=retry_failed) if resume else set()
    for stale in out.glob(".part-*.tmp"):  # a part being written when a run was killed: never renamed into place
        stale.unlink(missing_ok=True)
    todo = []
    for batch in batches:
        missing = tuple(p for p in batch.points if p.key not in done)
        if missing:
            todo.append(dataclasses.replace(batch, points=missing))
    total = len(keys)
    already = total - sum(len(b.points) for b in todo)
    with _progress(total, already, study.name, progress) as bar:
        for rows in _execute(todo, study.name, workers, scheduler, client, serial):
            write_part(out, rows)
            bar.update(len(rows))
    from .store import sweep_status

    status = sweep_status(out)
    ran = sum(len(b.points) for b in todo)
    return SweepSummary(status["total"], status["done"], status["failed"], ran, time.perf_counter() - started)


def _progress(total: int, initial: int, name: str, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, desc=name, unit="pt", disable=not enabled, dynamic_ncols=True)


@contextlib.contextmanager
def _workers_ignore_ctrl_c():
    """SIGINT ignored while the local cluster starts its worker processes, so
    that they inherit it ignored (a disposition that survives their exec; Python
    keeps it): Ctrl-C in a terminal reaches the whole process group, and each
    worker would print a KeyboardInterrupt traceback (issue 52). The sweep's own
    process keeps its handler: it stops, closes the cluster (which ends the
    workers) and exits 130."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be changed from the main thread
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


#: The warning filter the resource tracker of multiprocessing gets (its command line takes this
#: process's ``sys.warnoptions``): when a sweep's process is killed (SIGKILL), the tracker frees
#: the local cluster's semaphores itself, as it should, and then warns that "12 leaked semaphore
#: objects" were cleaned up (issue 52). Only that message is silenced, and only in the processes
#: multiprocessing starts from here.
_RESOURCE_TRACKER_FILTER = "ignore:resource_tracker:UserWarning"


def _quiet_resource_tracker() -> None:
    """Give the processes multiprocessing starts from now on :data:`_RESOURCE_TRACKER_FILTER`."""
    if _RESOURCE_TRACKER_FILTER not in sys.warnoptions:
        sys.warnoptions.append(_RESOURCE_TRACKER_FILTER)


def _execute(batches: list[Batch], study: str, workers: int | None, scheduler: str | None, client: Any, serial: bool):
    """Rows of each batch, in completion order."""
    if not batches:
        return
    if serial:
        for batch in batches:
            yield run_batch(batch, study)
        return
    from distributed import Client, LocalCluster, as_completed

    cluster = None
    own_client = client is None
    try:
        if client is None:
            if scheduler is not None:
                client = Client(scheduler, timeout="30s")
            else:
                n = workers or min(os.cpu_count() or 1, 8)
                _quiet_resource_tracker()
                with _workers_ignore_ctrl_c():
                    cluster = LocalCluster(
                        n_workers=n,
                        threads_per_worker=1,
                        processes=True,
                        dashboard_address=None,
                        # the scheduler serves HTTP routes without a dashboard too: on any free port, not
                        # 8787, so that two sweeps (or test workers) on one machine do not contend for it
                        scheduler_kwargs={"dashboard_address": ":0"},
                        # the worker processes log only what is critical: a task's failure comes back as
                        # its batch's rows, and an interrupted sweep (Ctrl-C) closes the scheduler while a
                        # worker may be heartbeating, which it would log as an error ("Failed to
                        # communicate with scheduler during heartbeat": seen in a fresh-clone CI run,
                        # issue 52's one line)
                        silence_logs=logging.CRITICAL,
                    )
                client = Client(cluster)
        futures = {client.submit(run_batch, batch, study, pure=False): batch for batch in batches}
        for future in as_completed(futures):
            batch = futures.pop(future)
            try:
                rows = future.result()
            except Exception as exc:  # noqa: BLE001 - a lost worker fails its batch only
                rows = _failed_rows(batch, study, exc)
            future.release()
            yield rows
    except OSError as exc:
        raise SweepError(f"cannot reach the Dask scheduler {scheduler or ''}: {exc}".replace("  ", " ")) from None
    finally:
        with _dask_logs_off():  # a Ctrl-C races the scheduler's gathers, which it would log as errors
            if own_client and client is not None:
                client.close()
            if cluster is not None:
                cluster.close()


@contextlib.contextmanager
def _dask_logs_off():
    """Dask's loggers silenced while the sweep closes its client and cluster:
    an interrupted sweep (Ctrl-C) closes them with gathers in flight, which the
    scheduler logs as "Couldn't gather keys" errors (issue 52: one line). Their
    levels are restored afterwards."""
    names = [n for n in logging.root.manager.loggerDict if n == "distributed" or n.startswith("distributed.")]
    loggers = [logging.getLogger(n) for n in names]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


def _failed_rows(batch: Batch, study: str, exc: BaseException) -> list[dict[str, Any]]:
    from .. import __version__

    if isinstance(batch, WorkloadBatch):
        return [{"key": p.key, "study": study, "machine": p.machine.label, "topology": p.machine.topology,
                 "workload": p.workload.label, "algorithm": p.schedule or "own", "algorithm_kind": "workload",
                 "mode": "workload", "status": "error", "error": f"task failed: {_message(exc)}",
                 "simcoll_version": __version__} for p in batch.points]  # fmt: skip
    base = {
        "study": study,
        "machine": batch.machine.label,
        "topology": batch.machine.topology,
        "overrides": batch.machine.overrides_text(),
        "collective": batch.collective,
        "algorithm": batch.algorithm.label,
        "algorithm_kind": batch.algorithm.kind,
        "algorithm_spec": json.dumps(batch.algorithm.to_dict(), sort_keys=True, default=str),
        "simcoll_version": __version__,
    }
    return [_row(base, p, status="error", error=f"task failed: {_message(exc)}") for p in batch.points]

"""Studies of training steps: what-ifs over machines, schedules and NCCL releases.

A study with ``workloads`` in place of ``collectives``, ``algorithms`` and
``sizes`` sweeps whole steps (:mod:`simcoll.workload`) instead of single
collectives::

    name: dp-whatif
    machines:                                   # as in any study: overrides and launch lists sweep
      - dgx-h100*2
      - {topology: dgx-h100*2, name: ib-x2, overrides: {links.ib.bandwidth_Bps: x2}}
    workloads:
      - {generate: data-parallel, options: {model: resnet50, ranks: 16, batch_per_gpu: 64}, name: resnet50}
      - {file: steps/my_step.yaml}              # a workload file (or a Chakra trace: {chakra: DIR, groups: G.json})
    schedules: [nccl, ring]                     # optional: every collective runs this (default: each its own)
    nccl: ["2.18", "2.30"]                      # optional: the NCCL releases "nccl" schedules follow
    simulator: {contention: true, time_limit_s: 600}

Each point (machine variant x workload x schedule x NCCL release x
contention) is one simulated step, run in its own batch
(:func:`simcoll.sweeps.runner.run_workload_batch`); its row has the
study columns it shares with collective studies (``machine``,
``overrides``, ``status``, ``time_s`` = the step time...) and
``workload``, ``algorithm`` (the schedule), ``nccl``,
``throughput_per_s``, ``compute_s`` and ``exposed_communication_s``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import StudyError

__all__ = [
    "WorkloadBatch",
    "WorkloadPoint",
    "WorkloadSpec",
    "expand_workloads",
    "parse_workloads",
]

WORKLOAD_KEYS = {"workloads", "schedules", "nccl"}
_SPEC_KEYS = {"generate", "options", "file", "chakra", "groups", "name"}


@dataclass(frozen=True)
class WorkloadSpec:
    """One workload of a study: a generator and its options, a workload
    file, or a Chakra trace (with its process groups)."""

    label: str
    generate: str | None = None
    options: tuple[tuple[str, Any], ...] = ()
    file: str | None = None
    chakra: str | None = None
    groups: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.label}
        for key in ("generate", "file", "chakra", "groups"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.options:
            out["options"] = dict(self.options)
        return out

    def load(self):
        """The :class:`~simcoll.workload.Workload` it names."""
        from ..workload import generate_workload, load_chakra, load_workload

        if self.generate is not None:
            return generate_workload(self.generate, **dict(self.options))
        if self.chakra is not None:
            return load_chakra(self.chakra, self.groups)
        return load_workload(self.file)


@dataclass(frozen=True)
class WorkloadPoint:
    """One simulated step of a study: its key and settings."""

    key: str
    machine: Any  # a MachineSpec
    workload: WorkloadSpec
    schedule: str | None
    nccl: str | None
    contention: bool


@dataclass(frozen=True)
class WorkloadBatch:
    """A batch of one workload point (a step is work enough for a task)."""

    points: tuple[WorkloadPoint, ...]
    time_limit_s: float = 600.0


def parse_workloads(data: Mapping[str, Any], where: str, base: Path) -> tuple[tuple, tuple, tuple]:
    """``(workloads, schedules, nccl releases)`` of a workload study (module docstring)."""
    from ..workload.generators import GENERATORS

    clash = sorted({"collectives", "algorithms", "sizes", "size_factor"} & set(data))
    if clash:
        raise StudyError(f"{where}: a study of workloads takes no {clash[0]!r} (its workloads name their collectives)")
    simulator = data.get("simulator")
    if isinstance(simulator, Mapping) and "mode" in simulator:
        raise StudyError(f"{where}: simulator.mode: a study of workloads runs each step in the workload engine "
                         "(contention and time_limit_s apply)")  # fmt: skip
    raw = data.get("workloads")
    if isinstance(raw, Mapping):
        raw = [raw]
    if not isinstance(raw, list) or not raw:
        raise StudyError(f"{where}: workloads: expected a non-empty list")
    specs = []
    for i, item in enumerate(raw):
        here = f"{where}: workloads[{i}]"
        if not isinstance(item, Mapping):
            raise StudyError(f"{here}: expected a mapping with generate, file or chakra")
        unknown = sorted(set(item) - _SPEC_KEYS)
        if unknown:
            raise StudyError(f"{here}: unknown field {unknown[0]!r} (allowed: {', '.join(sorted(_SPEC_KEYS))})")
        given = [k for k in ("generate", "file", "chakra") if k in item]
        if len(given) != 1:
            raise StudyError(f"{here}: give exactly one of generate, file or chakra")
        options = item.get("options") or {}
        if not isinstance(options, Mapping) or (options and "generate" not in item):
            raise StudyError(f"{here}: options: a mapping of the generator's options (with generate only)")
        kind = given[0]
        if kind == "generate" and item["generate"] not in GENERATORS:
            raise StudyError(f"{here}: unknown workload generator {item['generate']!r}; known: {', '.join(GENERATORS)}")
        path = None if kind == "generate" else str((base / str(item[kind])).resolve())
        groups = None if "groups" not in item else str((base / str(item["groups"])).resolve())
        label = str(item.get("name") or (item["generate"] if kind == "generate" else Path(str(item[kind])).stem))
        spec = WorkloadSpec(label, item.get("generate"), tuple(sorted(dict(options).items())),
                            path if kind == "file" else None, path if kind == "chakra" else None, groups)  # fmt: skip
        try:
            spec.load()  # a bad workload is reported with the study, not point by point
        except Exception as exc:  # noqa: BLE001 - any fault of the workload names it
            raise StudyError(f"{here}: {exc}") from None
        specs.append(spec)
    labels = [s.label for s in specs]
    duplicate = next((label for label in labels if labels.count(label) > 1), None)
    if duplicate is not None:
        raise StudyError(f"{where}: workloads: name {duplicate!r} used twice (give each a distinct name)")
    schedules = _names(data.get("schedules"), f"{where}: schedules")
    releases = _names(data.get("nccl"), f"{where}: nccl")
    for release in releases:
        from ..nccl.versions import as_setup

        try:
            as_setup(release)
        except Exception as exc:  # noqa: BLE001
            raise StudyError(f"{where}: nccl: {exc}") from None
    return tuple(specs), schedules, releases


def _names(raw: Any, where: str) -> tuple[str, ...]:
    if raw is None:
        return ()
    if isinstance(raw, (str, int, float)):
        raw = [raw]
    if not isinstance(raw, list) or not raw:
        raise StudyError(f"{where}: expected a name or a non-empty list of names")
    return tuple(str(x) for x in raw)


def expand_workloads(study, model_digest: Callable[[Any], str]) -> list[WorkloadBatch]:
    """One batch per (machine variant, workload, schedule, NCCL release,
    contention) of ``study``; ``model_digest(machine)`` hashes a machine
    variant's model (what a changed model must change in the keys)."""
    from .. import __version__
    from .keys import point_key

    batches = []
    for machine in study.machines:
        digest = model_digest(machine)
        for spec in study.workloads:
            content = _content_digest(spec)
            for schedule in study.schedules or (None,):
                for release in study.nccl or (None,):
                    for contention in study.contention:
                        params = {
                            "machine": machine.to_dict(), "workload": spec.to_dict(), "workload_sha256": content,
                            "schedule": schedule, "nccl": release, "contention": contention,
                            "time_limit_s": study.time_limit_s, "simcoll": __version__, "model_sha256": digest,
                        }  # fmt: skip
                        point = WorkloadPoint(point_key(params), machine, spec, schedule, release, contention)
                        batches.append(WorkloadBatch((point,), study.time_limit_s))
    return batches


def _content_digest(spec: WorkloadSpec) -> str | None:
    """SHA-256 of the files a workload reads (None for a generator: its options are in the key)."""
    if spec.file is not None:
        paths = [Path(spec.file)]
    elif spec.chakra is not None:
        from ..workload.chakra import chakra_files

        paths = chakra_files(spec.chakra)
    else:
        return None
    if spec.groups is not None:
        paths.append(Path(spec.groups))
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.read_bytes())
    return digest.hexdigest()

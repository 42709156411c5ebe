"""A study declared as data, and its expansion into points and batches.

A study is a mapping (usually a YAML file) with these fields::

    name: smoke                      # required, a label
    machines:                        # required, non-empty
      - dgx1                         # a topology spec with its default model
      - topology: ndv2*2             # or a mapping
        model: ndv2-taccl            # optional model spec (default: the topology's)
        name: ndv2x2                 # optional label (default: the topology spec)
        launch: processes            # optional: threads | processes | graphs (a list sweeps)
        overrides:                   # optional what-ifs on the model's fields
          links.nvlink.bandwidth_Bps: [x1, x2]   # "xF" scales, a list sweeps
          network.nic_binding: bijective         # anything else sets
    collectives: [allgather, allreduce]          # required
    algorithms:                      # required
      - all                          # every registered generator for the collective
      - ring                         # one registered generator, default options
      - {generator: hiccl, name: hiccl-2x4, chunks: 8, options: {hierarchy: "2,4"}}
      - nccl                         # the NCCL baseline (simcoll.nccl)
      - {sccl: {chunks: 1, steps: 2, rounds: 2, backend: cpsat, time_limit_s: 30}}
      - {file: schedules/ring.xml}   # an imported schedule (simcoll JSON, MSCCL XML, SCCL JSON)
    sizes: "1KB:1GB"                 # LOW:HIGH, a comma list, or a YAML list of sizes
    size_factor: 2                   # multiplier of a LOW:HIGH range (default 2)
    simulator:
      mode: [algorithm, analytic]    # algorithm | program | analytic (list sweeps)
      contention: true               # true | false | [true, false]
      time_limit_s: 60

Overrides follow the dict form of a cost model (:func:`simcoll.cost_model.model_to_dict`):
a dotted path names a field, ``"xF"`` multiplies its number by F, any other
value replaces it; a list of values is swept (the cartesian product of all
listed overrides gives the machine's variants, as a what-if grid). ``launch``
says how the calls are launched, which prices each call
(:meth:`simcoll.cost_model.CostModel.with_launch`; default: the model's).

A study of training steps takes ``workloads`` (with ``schedules`` and
``nccl``) in place of ``collectives``, ``algorithms`` and ``sizes``
(:mod:`simcoll.sweeps.workloads`).

Every point is keyed by a hash of its parameters, the simcoll version and the
content of its (overridden) model and of any file it reads, so results of a
changed model or file are never mistaken for old ones; this is what resume
relies on (the pattern of ns-3 SEM's ``run_missing_simulations``).
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import SimcollError, StudyError
from ..files import load_yaml
from ..units import parse_size, parse_size_range
from .keys import point_key

MODES = ("algorithm", "program", "analytic")
_TOP = {
    "name",
    "description",
    "machines",
    "collectives",
    "algorithms",
    "sizes",
    "size_factor",
    "simulator",
    "workloads",
    "schedules",
    "nccl",
}  # (the last three: a study of training steps, simcoll.sweeps.workloads)
_MACHINE_KEYS = {"topology", "model", "name", "overrides", "launch"}
_ALGO_KINDS = ("generator", "nccl", "sccl", "file")
_SCCL_KEYS = {"chunks", "steps", "rounds", "backend", "time_limit_s", "root"}
_SIMULATOR_KEYS = {"mode", "contention", "time_limit_s", "verify"}


@dataclass(frozen=True)
class MachineSpec:
    """One machine variant: topology spec, model spec (None: the topology's
    default), the model overrides applied to it and the launch mode of its
    calls (None: the model's), with its label."""

    label: str
    topology: str
    model: str | None = None
    overrides: tuple[tuple[str, Any], ...] = ()
    launch: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out = {"label": self.label, "topology": self.topology, "model": self.model, "overrides": dict(self.overrides)}
        return out | ({"launch": self.launch} if self.launch else {})

    def overrides_text(self) -> str:
        """The overrides as a results row's ``overrides`` column holds them
        (JSON; a launch mode as the ``call.launch`` field it sets)."""
        launch = {"call.launch": self.launch} if self.launch else {}
        return json.dumps(dict(self.overrides) | launch, sort_keys=True)


@dataclass(frozen=True)
class AlgorithmSpec:
    """One algorithm to run: ``kind`` is ``generator`` (``name`` in the
    registry, ``options``, ``chunks``), ``nccl``, ``sccl`` (``options`` hold
    chunks/steps/rounds/backend/time_limit_s) or ``file`` (``path``)."""

    kind: str
    label: str
    name: str | None = None
    options: tuple[tuple[str, Any], ...] = ()
    chunks: int | None = None
    path: str | None = None
    collective: str | None = None  # a file's own collective

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "label": self.label}
        for key in ("name", "chunks", "path"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.options:
            out["options"] = dict(self.options)
        return out


@dataclass(frozen=True)
class Point:
    """One simulation: a machine variant, a collective, an algorithm, a size
    and a simulator setting. ``key`` identifies its result."""

    key: str
    machine: MachineSpec
    collective: str
    algorithm: AlgorithmSpec
    size_bytes: int
    mode: str
    contention: bool | None  # None for the analytic method (no network)


@dataclass(frozen=True)
class Batch:
    """The points sharing one (machine variant, collective, algorithm): they
    are run together so that the schedule is generated once."""

    machine: MachineSpec
    collective: str
    algorithm: AlgorithmSpec
    points: tuple[Point, ...]
    time_limit_s: float = 60.0
    verify: bool = True
    #: The options of the study's NCCL baseline (:func:`baseline_options`): its release and
    #: environment decide the protocol every other schedule of the study is timed with.
    nccl: tuple = ()


@dataclass(frozen=True)
class Study:
    """A validated study (module docstring); :meth:`points` expands it."""

    name: str
    machines: tuple[MachineSpec, ...]
    collectives: tuple[str, ...]
    algorithms: tuple[AlgorithmSpec | str, ...]  # "all" stays a marker until expansion
    sizes: tuple[int, ...]
    modes: tuple[str, ...] = ("algorithm",)
    contention: tuple[bool, ...] = (True,)
    time_limit_s: float = 60.0
    verify: bool = True
    description: str = ""
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)
    #: A study of training steps (:mod:`simcoll.sweeps.workloads`): its workloads, schedules and NCCL releases.
    workloads: tuple = ()
    schedules: tuple[str, ...] = ()
    nccl: tuple[str, ...] = ()

    def batches(self) -> list:
        """Every batch of the study, in a deterministic order."""
        if self.workloads:
            from .workloads import expand_workloads

            return expand_workloads(self, _model_digest)
        return expand(self)

    def points(self) -> list[Point]:
        """Every point of the study, in a deterministic order."""
        return [p for b in self.batches() for p in b.points]


# -- parsing ---------------------------------------------------------------------
def load_study(source: str | Path | Mapping[str, Any]) -> Study:
    """A :class:`Study` from a YAML file or an already parsed mapping.

    Relative ``file:`` paths in a YAML file are resolved against the file's directory.

    Raises
    ------
    StudyError
        With a one-line message naming the file and the bad field.

    Examples
    --------
    >>> study = load_study({"name": "s", "machines": ["ring:4"], "collectives": ["allgather"],
    ...                     "algorithms": ["ring"], "sizes": "1KB:4KB"})
    >>> len(study.points()), study.sizes
    (3, (1024, 2048, 4096))
    >>> load_study({"name": "s", "machines": [], "collectives": ["allgather"], "algorithms": ["ring"], "sizes": "1KB"})
    Traceback (most recent call last):
    simcoll.errors.StudyError: <study>: machines: expected a non-empty list
    """
    if isinstance(source, Mapping):
        return study_from_dict(source, "<study>", base=Path.cwd())
    data = load_yaml(source, error=StudyError)
    return study_from_dict(data, str(source), base=Path(source).resolve().parent)


def study_from_dict(data: Any, where: str = "<study>", *, base: Path | None = None) -> Study:
    """Validate a parsed study mapping (module docstring); ``where`` prefixes errors."""
    base = base or Path.cwd()
    if not isinstance(data, Mapping):
        raise StudyError(f"{where}: expected a mapping at the top level")
    unknown = sorted(set(data) - _TOP)
    if unknown:
        raise StudyError(f"{where}: unknown field {unknown[0]!r} (allowed: {', '.join(sorted(_TOP))})")
    name = data.get("name")
    if not isinstance(name, str) or not name.strip():
        raise StudyError(f"{where}: name: required, a non-empty string")
    machines = tuple(
        m for i, raw in enumerate(_list(data, "machines", where)) for m in _machines(raw, f"{where}: machines[{i}]")
    )
    labels = [m.label for m in machines]
    duplicate = next((label for label in labels if labels.count(label) > 1), None)
    if duplicate is not None:
        raise StudyError(f"{where}: machines: label {duplicate!r} used twice (give each a distinct name)")
    workloads: tuple = ()
    schedules: tuple[str, ...] = ()
    releases: tuple[str, ...] = ()
    if "workloads" in data:
        from .workloads import parse_workloads

        workloads, schedules, releases = parse_workloads(data, where, base)
        collectives, algorithms, sizes = (), (), ()
    else:
        stray = sorted({"schedules", "nccl"} & set(data))
        if stray:
            raise StudyError(f"{where}: {stray[0]!r} belongs to a study of workloads (with 'workloads')")
        collectives = tuple(
            _collective(c, f"{where}: collectives[{i}]") for i, c in enumerate(_list(data, "collectives", where))
        )
        algorithms = tuple(
            _algorithm(a, f"{where}: algorithms[{i}]", base) for i, a in enumerate(_list(data, "algorithms", where))
        )
        sizes = _sizes(data.get("sizes"), data.get("size_factor", 2), where)
    modes, contention, time_limit_s, verify = _simulator(data.get("simulator"), where)
    for machine in machines:  # load every model now, so a bad spec or override is reported with the file
        try:
            resolved_model_dict(machine)
        except StudyError as exc:
            raise StudyError(f"{where}: {exc}") from None
    return Study(
        name=name.strip(),
        machines=machines,
        collectives=collectives,
        algorithms=algorithms,
        sizes=sizes,
        modes=modes,
        contention=contention,
        time_limit_s=time_limit_s,
        verify=verify,
        description=str(data.get("description") or ""),
        raw=copy.deepcopy(dict(data)),
        workloads=workloads,
        schedules=schedules,
        nccl=releases,
    )


def _list(data: Mapping, key: str, where: str) -> list:
    value = data.get(key)
    if isinstance(value, (str, Mapping)):
        value = [value]
    if not isinstance(value, list) or not value:
        raise StudyError(f"{where}: {key}: expected a non-empty list")
    return value


def _machines(raw: Any, where: str) -> list[MachineSpec]:
    if isinstance(raw, str):
        raw = {"topology": raw}
    if not isinstance(raw, Mapping):
        raise StudyError(f"{where}: expected a topology spec or a mapping with 'topology'")
    unknown = sorted(set(raw) - _MACHINE_KEYS)
    if unknown:
        raise StudyError(f"{where}: unknown field {unknown[0]!r} (allowed: {', '.join(sorted(_MACHINE_KEYS))})")
    topology = raw.get("topology")
    if not isinstance(topology, str) or not topology:
        raise StudyError(f"{where}: topology: required, a topology spec such as 'dgx1'")
    model = raw.get("model")
    if model is not None and not isinstance(model, str):
        raise StudyError(f"{where}: model: expected a model spec (a name or a YAML file)")
    label = raw.get("name", topology)
    if not isinstance(label, str) or not label:
        raise StudyError(f"{where}: name: expected a non-empty string")
    overrides = raw.get("overrides") or {}
    if not isinstance(overrides, Mapping):
        raise StudyError(f"{where}: overrides: expected a mapping of model field paths to values")
    axes = []
    for path, value in overrides.items():
        if not isinstance(path, str) or not path:
            raise StudyError(f"{where}: overrides: field paths must be strings such as 'links.nvlink.bandwidth_Bps'")
        values = value if isinstance(value, list) else [value]
        if not values:
            raise StudyError(f"{where}: overrides.{path}: an empty list sweeps nothing")
        for v in values:
            _check_override_value(v, f"{where}: overrides.{path}")
        axes.append([(path, v) for v in values])
    launches = _launches(raw.get("launch"), where)
    variants = []
    for launch, combo in itertools.product(launches, itertools.product(*axes)):
        swept = [f"{'.'.join(p.split('.')[-2:])}={v}" for p, v in combo if isinstance(overrides[p], list)]
        swept += [f"launch={launch}"] if len(launches) > 1 else []
        variant_label = label if not swept else f"{label}[{','.join(swept)}]"
        variants.append(MachineSpec(variant_label, topology, model, tuple(combo), launch))
    return variants


def _launches(raw: Any, where: str) -> list[str | None]:
    """A machine's ``launch``: one mode, or a list of modes to sweep."""
    from ..cost_model import LAUNCH_MODES

    if raw is None:
        return [None]
    values = raw if isinstance(raw, list) else [raw]
    if not values:
        raise StudyError(f"{where}: launch: an empty list sweeps nothing")
    for value in values:
        if value not in LAUNCH_MODES:
            raise StudyError(f"{where}: launch: unknown launch mode {value!r} (use {', '.join(LAUNCH_MODES)})")
    return list(dict.fromkeys(values))


def _check_override_value(value: Any, where: str) -> None:
    if isinstance(value, (Mapping, list)):
        raise StudyError(f"{where}: expected a scalar value or 'xF' (a scale factor)")
    if isinstance(value, str) and value.startswith("x"):
        try:
            factor = float(value[1:])
        except ValueError:
            return  # a plain string value such as an enum name
        if not factor > 0:
            raise StudyError(f"{where}: scale factor {value!r} must be positive")


def _collective(raw: Any, where: str) -> str:
    from ..collectives import canonical_name

    if not isinstance(raw, str):
        raise StudyError(f"{where}: expected a collective name such as 'allreduce'")
    try:
        return canonical_name(raw)
    except SimcollError as exc:
        raise StudyError(f"{where}: {exc}") from None


def _algorithm(raw: Any, where: str, base: Path) -> AlgorithmSpec | str:
    from ..algorithms import REGISTRY

    if raw == "all":
        return "all"
    if raw == "nccl":
        return AlgorithmSpec("nccl", "nccl")
    if isinstance(raw, str):
        raw = {"generator": raw}
    if not isinstance(raw, Mapping):
        raise StudyError(f"{where}: expected 'all', a generator name or a mapping")
    kinds = [k for k in _ALGO_KINDS if k in raw]
    if len(kinds) != 1:
        raise StudyError(f"{where}: give exactly one of {', '.join(_ALGO_KINDS)}")
    kind = kinds[0]
    allowed = {kind, "name", "options", "chunks"} if kind == "generator" else {kind, "name"}
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise StudyError(
            f"{where}: unknown field {unknown[0]!r} for a {kind} algorithm (allowed: {', '.join(sorted(allowed))})"
        )
    label = raw.get("name")
    if label is not None and (not isinstance(label, str) or not label):
        raise StudyError(f"{where}: name: expected a non-empty string")
    if kind == "generator":
        name = raw["generator"]
        if name not in REGISTRY:
            raise StudyError(f"{where}: generator: unknown algorithm {name!r} (known: {', '.join(REGISTRY)})")
        options = raw.get("options") or {}
        if not isinstance(options, Mapping):
            raise StudyError(f"{where}: options: expected a mapping of option names to values")
        try:
            REGISTRY[name].parse_options({str(k): str(v) for k, v in options.items()})
        except SimcollError as exc:
            raise StudyError(f"{where}: options: {exc}") from None
        chunks = raw.get("chunks")
        if chunks is not None and (not isinstance(chunks, int) or isinstance(chunks, bool) or chunks < 1):
            raise StudyError(f"{where}: chunks: expected a positive integer")
        opts = tuple(sorted((str(k), str(v)) for k, v in options.items()))
        default_label = name if not opts and chunks is None else _compact_label(name, opts, chunks)
        return AlgorithmSpec("generator", label or default_label, name=name, options=opts, chunks=chunks)
    if kind == "nccl":
        options = raw["nccl"] or {}
        if not isinstance(options, Mapping):
            raise StudyError(f"{where}: nccl: expected a mapping of options (or nothing)")
        from ..nccl.versions import as_setup

        try:
            setup = as_setup(dict(options))  # {version: "2.7", env: {NCCL_PROTO: Simple}}
        except SimcollError as exc:
            raise StudyError(f"{where}: nccl: {exc}") from None
        opts = (("env", setup.env), ("version", setup.version)) if options else ()
        return AlgorithmSpec("nccl", label or "nccl", options=opts)
    if kind == "sccl":
        options = raw["sccl"] or {}
        if not isinstance(options, Mapping):
            raise StudyError(f"{where}: sccl: expected a mapping with chunks, steps, rounds")
        unknown = sorted(set(options) - _SCCL_KEYS)
        if unknown:
            raise StudyError(f"{where}: sccl: unknown field {unknown[0]!r} (allowed: {', '.join(sorted(_SCCL_KEYS))})")
        if "steps" not in options:
            raise StudyError(f"{where}: sccl.steps: required")
        for key in ("chunks", "steps", "rounds"):
            value = options.get(key)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise StudyError(f"{where}: sccl.{key}: expected a positive integer")
        opts = tuple(sorted(options.items()))
        c, s = options.get("chunks", 1), options["steps"]
        return AlgorithmSpec("sccl", label or f"sccl-c{c}-s{s}-r{options.get('rounds', s)}", options=opts)
    path = raw["file"]
    if not isinstance(path, str) or not path:
        raise StudyError(f"{where}: file: expected a path")
    resolved = Path(path) if Path(path).is_absolute() else base / path
    from ..interop import load_schedule

    try:
        schedule = load_schedule(resolved)
    except SimcollError as exc:
        raise StudyError(f"{where}: file: {exc}") from None
    return AlgorithmSpec("file", label or Path(path).stem, path=str(resolved), collective=schedule.collective.name)


def _compact_label(name: str, options: tuple[tuple[str, str], ...], chunks: int | None) -> str:
    parts = [f"{k}={v}" for k, v in options] + ([f"chunks={chunks}"] if chunks is not None else [])
    return f"{name}({','.join(parts)})"


def _sizes(raw: Any, factor: Any, where: str) -> tuple[int, ...]:
    if not isinstance(factor, int) or isinstance(factor, bool) or factor < 2:
        raise StudyError(f"{where}: size_factor: expected an integer >= 2")
    try:
        if isinstance(raw, (str, int)) and not isinstance(raw, bool):
            sizes = parse_size_range(str(raw), factor=factor)
        elif isinstance(raw, list) and raw:
            sizes = [parse_size(s if isinstance(s, int) else str(s)) for s in raw]
        else:
            raise StudyError(f"{where}: sizes: required, 'LOW:HIGH', a comma list or a list of sizes")
    except StudyError:
        raise
    except SimcollError as exc:
        raise StudyError(f"{where}: sizes: {exc}") from None
    return tuple(sorted(set(sizes)))


def _simulator(raw: Any, where: str) -> tuple[tuple[str, ...], tuple[bool, ...], float, bool]:
    raw = raw or {}
    if not isinstance(raw, Mapping):
        raise StudyError(f"{where}: simulator: expected a mapping (mode, contention, time_limit_s, verify)")
    unknown = sorted(set(raw) - _SIMULATOR_KEYS)
    if unknown:
        raise StudyError(
            f"{where}: simulator: unknown field {unknown[0]!r} (allowed: {', '.join(sorted(_SIMULATOR_KEYS))})"
        )
    modes = raw.get("mode", "algorithm")
    modes = modes if isinstance(modes, list) else [modes]
    for mode in modes:
        if mode not in MODES:
            raise StudyError(f"{where}: simulator.mode: {mode!r} is not one of {', '.join(MODES)}")
    contention = raw.get("contention", True)
    contention = contention if isinstance(contention, list) else [contention]
    if not contention or not all(isinstance(c, bool) for c in contention):
        raise StudyError(f"{where}: simulator.contention: expected true, false or a list of them")
    limit = raw.get("time_limit_s", 60.0)
    if not isinstance(limit, (int, float)) or isinstance(limit, bool) or not limit > 0:
        raise StudyError(f"{where}: simulator.time_limit_s: expected a positive number of seconds")
    verify = raw.get("verify", True)
    if not isinstance(verify, bool):
        raise StudyError(f"{where}: simulator.verify: expected true or false")
    return tuple(dict.fromkeys(modes)), tuple(dict.fromkeys(contention)), float(limit), verify


# -- overrides -------------------------------------------------------------------
def apply_overrides(model_dict: Mapping[str, Any], overrides: tuple[tuple[str, Any], ...]) -> dict[str, Any]:
    """A copy of a model's dict form (:func:`~simcoll.cost_model.model_to_dict`)
    with ``overrides`` applied: ``"xF"`` scales a number by F, any other value
    sets the field. Each changed section's ``source`` records the what-if.

    Examples
    --------
    >>> d = {"name": "m", "links": {"nvlink": {"alpha_s": 1e-6, "bandwidth_Bps": 25e9, "source": "paper"}}}
    >>> out = apply_overrides(d, (("links.nvlink.bandwidth_Bps", "x2"),))
    >>> out["links"]["nvlink"]["bandwidth_Bps"], out["links"]["nvlink"]["source"], out["name"]
    (50000000000.0, 'paper; what-if: bandwidth_Bps x2', 'm+what-if')
    >>> apply_overrides(d, (("links.pcie.alpha_s", "x2"),))
    Traceback (most recent call last):
    simcoll.errors.StudyError: overrides.links.pcie.alpha_s: model 'm' has no field links.pcie
    """
    out = copy.deepcopy(dict(model_dict))
    if not overrides:
        return out
    for path, value in overrides:
        parts = path.split(".")
        node: Any = out
        for depth, part in enumerate(parts[:-1]):
            if not isinstance(node, dict):
                raise StudyError(f"overrides.{path}: {'.'.join(parts[:depth])} is not a section")
            if part not in node:
                creatable = depth == 0 and part in ("network", "executor", "compute") and not _is_scale(str(value))
                if not creatable:
                    raise StudyError(
                        f"overrides.{path}: model {out.get('name')!r} has no field {'.'.join(parts[: depth + 1])}"
                    )
                node[part] = {"source": "what-if section"}
            node = node[part]
        leaf = parts[-1]
        if not isinstance(node, dict):
            raise StudyError(f"overrides.{path}: {'.'.join(parts[:-1])} is not a section")
        if isinstance(value, str) and _is_scale(value):
            current = node.get(leaf)
            if not isinstance(current, (int, float)) or isinstance(current, bool):
                raise StudyError(f"overrides.{path}: model {out.get('name')!r} has no number to scale here")
            node[leaf] = current * float(value[1:])
            note = f"{leaf} {value}"
        else:
            node[leaf] = value
            note = f"{leaf}={value}"
        if "source" in node and leaf != "source":
            node["source"] = f"{node['source']}; what-if: {note}"
    out["name"] = f"{out['name']}+what-if"
    return out


def _is_scale(value: str) -> bool:
    try:
        float(value[1:])
    except ValueError:
        return False
    return value.startswith("x")


# -- expansion and keys ------------------------------------------------------------
def baseline_options(study: Study) -> tuple:
    """The options (``version``, ``env``) of the study's NCCL baseline: its
    ``nccl`` entry named ``nccl`` if there is one, else its first ``nccl``
    entry; ``()`` for NCCL 2.30 as configured. Every schedule of the study is
    timed with the protocol that baseline would pick, so that a comparison
    differs in the schedule only."""
    entries = [a for a in study.algorithms if isinstance(a, AlgorithmSpec) and a.kind == "nccl"]
    named = [a for a in entries if a.label == "nccl"] or entries
    return named[0].options if named else ()


def expand(study: Study) -> list[Batch]:
    """The batches of ``study``: one per (machine variant, collective,
    algorithm), each holding every size × simulator setting.

    ``all`` becomes every registered generator implementing the collective
    (a generator that does not apply to a machine gives ``not-applicable``
    rows); a ``file`` algorithm only pairs with its own collective.
    """
    from .. import __version__
    from ..algorithms import REGISTRY

    model_digests = {m: _model_digest(m) for m in study.machines}
    file_digests: dict[str, str] = {}
    nccl = baseline_options(study)
    batches = []
    settings = [(mode, None if mode == "analytic" else c) for mode in study.modes for c in study.contention]
    settings = list(dict.fromkeys(settings))
    for machine in study.machines:
        for collective in study.collectives:
            algorithms: list[AlgorithmSpec] = []
            for spec in study.algorithms:
                if spec == "all":
                    algorithms += [
                        AlgorithmSpec("generator", n, name=n)
                        for n, g in REGISTRY.items()
                        if collective in g.collectives
                    ]
                elif spec.kind == "file" and spec.collective != collective:
                    continue
                else:
                    algorithms.append(spec)
            for algorithm in dict.fromkeys(algorithms):
                if algorithm.path is not None and algorithm.path not in file_digests:
                    file_digests[algorithm.path] = hashlib.sha256(Path(algorithm.path).read_bytes()).hexdigest()
                points = []
                for size in study.sizes:
                    for mode, contention in settings:
                        params = {
                            "machine": machine.to_dict(),
                            "collective": collective,
                            "algorithm": {k: v for k, v in algorithm.to_dict().items() if k != "label"},
                            "file_sha256": file_digests.get(algorithm.path or ""),
                            "size_bytes": size,
                            "mode": mode,
                            "contention": contention,
                            "time_limit_s": study.time_limit_s,
                            "verify": study.verify,
                            "simcoll": __version__,
                            "model_sha256": model_digests[machine],
                        }
                        if nccl:  # a baseline other than NCCL 2.30 times the other schedules too
                            params["baseline"] = {k: v for k, v in nccl}
                        points.append(Point(point_key(params), machine, collective, algorithm, size, mode, contention))
                batches.append(
                    Batch(machine, collective, algorithm, tuple(points), study.time_limit_s, study.verify, nccl)
                )
    return batches


def _model_digest(machine: MachineSpec) -> str:
    """SHA-256 of the machine's overridden model, in its dict form, and of a topology file's text."""
    model_dict = resolved_model_dict(machine)
    topology_text = ""
    if machine.topology.endswith((".yaml", ".yml")) and Path(machine.topology).exists():
        topology_text = Path(machine.topology).read_text(encoding="utf-8")
    text = json.dumps({"model": model_dict, "topology_file": topology_text}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def resolved_model_dict(machine: MachineSpec) -> dict[str, Any]:
    """The dict form of ``machine``'s model after its overrides and launch mode."""
    from ..cost_model import model_from_dict, model_to_dict
    from ..machines import load_model, load_topology

    try:
        spec = machine.model
        if spec is None:
            spec = load_topology(machine.topology).default_model or "generic"
        base = model_to_dict(load_model(spec))
    except SimcollError as exc:
        raise StudyError(f"machine {machine.label!r}: {exc}") from None
    try:
        data = apply_overrides(base, machine.overrides)
        if machine.launch is None:
            return data
        return model_to_dict(model_from_dict(data, where=f"machine {machine.label!r}").with_launch(machine.launch))
    except SimcollError as exc:
        raise StudyError(f"machine {machine.label!r}: {exc}") from None

"""Your own machine from what it prints: topology dumps to simcoll topologies.

Three formats (one module each):

- ``nvidia-smi``: the matrix of ``nvidia-smi topo -m`` (:mod:`.nvidia_smi`);
- ``nccl-xml``: NCCL's (or RCCL's) ``NCCL_TOPO_DUMP_FILE`` XML (:mod:`.nccl_xml`);
- ``rocm-smi``: ``rocm-smi --showtopo`` (:mod:`.rocm_smi`).

Each yields GPUs, NVLink/xGMI links with their counts, NVSwitches where the
dump implies them, PCIe switches and host bridges, NICs with rail and speed,
and CPUs; whatever the dump leaves unknown is decided by a documented default
(``hardware.yaml``) and listed in the topology's ``sources`` as
``assumption: ...``. :func:`import_machine` also builds the machine's default
cost model (:mod:`.default_model`), marked UNCALIBRATED; :func:`save_imported`
writes both, the topology's ``default_model`` naming the model file, so that
``load_machine("machine.yaml")`` prices it.

Examples
--------
>>> text = '''        GPU0    GPU1    CPU Affinity    NUMA Affinity
... GPU0     X      NV4     0-15            0
... GPU1    NV4      X      0-15            0'''
>>> topo = import_topology("nvidia-smi", text)
>>> topo.num_ranks, topo.gpu_link_counts("nvlink")
(2, [[0, 4], [4, 0]])
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import yaml

from ..cost_model import CostModel, model_to_dict
from ..errors import DumpError, TopologyError
from ..files import check_distinct_outputs, read_text, write_atomic_together
from ..machines import Machine
from ..topology import Topology, build_topology, topology_to_dict
from ..topology_generators import cluster
from . import nccl_xml, nvidia_smi, rocm_smi
from ._common import Draft
from .default_model import UNCALIBRATED, default_model

__all__ = [
    "FORMATS",
    "NETWORKS",
    "DumpError",
    "ImportedMachine",
    "import_machine",
    "import_topology",
    "save_imported",
]

#: Dump formats and their parsers.
FORMATS: dict[str, Callable[[str, str], Draft]] = {
    "nvidia-smi": nvidia_smi.parse,
    "nccl-xml": nccl_xml.parse,
    "rocm-smi": rocm_smi.parse,
}
#: Inter-node fabrics of imported clusters (:func:`simcoll.topology_generators.cluster`).
NETWORKS = ("fat-tree", "rail")


@dataclass(frozen=True)
class ImportedMachine:
    """An imported topology, its default (uncalibrated) cost model, and the
    notes saying what the dump left unknown and which default was picked."""

    topology: Topology
    model: CostModel
    notes: tuple[str, ...]
    dump: str

    @property
    def machine(self) -> Machine:
        """The topology priced by its default model."""
        return Machine(self.topology, self.model)


def _read(path_or_text: str | Path) -> tuple[str, str, str | None]:
    """(text, where, file stem or None) of a dump given as a path or as text."""
    if isinstance(path_or_text, Path) or (
        isinstance(path_or_text, str) and "\n" not in path_or_text and Path(path_or_text).is_file()
    ):
        path = Path(path_or_text)
        return read_text(path, error=TopologyError), str(path), path.stem
    if not isinstance(path_or_text, str):
        raise TopologyError(f"expected a dump file or its text, got {type(path_or_text).__name__}")
    if "\n" not in path_or_text:
        raise TopologyError(f"{path_or_text}: no such file (pass a dump file or the dump's text)")
    return path_or_text, "<dump text>", None


def _first_comment(text: str) -> str | None:
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        if line.startswith("#"):
            return line.lstrip("#").strip() or None
        if line.startswith("<!--"):
            return line.removeprefix("<!--").removesuffix("-->").strip() or None
        return None
    return None


def import_machine(
    format: str,
    path_or_text: str | Path,
    nodes: int = 1,
    network: str = "fat-tree",
    *,
    name: str | None = None,
    fabric_only: bool = False,
) -> ImportedMachine:
    """Import a topology dump: the machine, its default model and the notes.

    Parameters
    ----------
    format : str
        ``"nvidia-smi"``, ``"nccl-xml"`` or ``"rocm-smi"`` (:data:`FORMATS`).
    path_or_text : str or Path
        The dump file, or its text.
    nodes : int
        Build a cluster of this many such nodes (needs NICs in the dump).
    network : str
        The clusters' inter-node fabric: ``"fat-tree"`` or ``"rail"``.
    name : str, optional
        The topology's name (default: the file's stem, or ``imported-FORMAT``).
    fabric_only : bool
        Keep the GPUs and their GPU-to-GPU fabric (NVLink, xGMI, NVSwitches)
        alone: SCCL's view of a machine, e.g. the DGX-1 of its bounds.

    Returns
    -------
    ImportedMachine

    Raises
    ------
    DumpError
        For a malformed dump, naming its row and column (or line and column).
    TopologyError
        For an unknown format or network, a bad ``nodes``, or a cluster of a
        machine without NICs.
    """
    if format not in FORMATS:
        raise TopologyError(f"unknown dump format {format!r}; known: {', '.join(FORMATS)}")
    if network not in NETWORKS:
        raise TopologyError(f"unknown network {network!r}; known: {', '.join(NETWORKS)}")
    if not isinstance(nodes, int) or isinstance(nodes, bool) or nodes < 1:
        raise TopologyError(f"nodes must be a positive integer, got {nodes!r}")
    if fabric_only and nodes > 1:
        raise TopologyError("a GPU-fabric-only machine has no NICs, so it cannot be a cluster: drop fabric_only")
    text, where, stem = _read(path_or_text)
    draft = FORMATS[format](text, where)
    if fabric_only:
        keep = {c.name for c in draft.components if c.kind in ("gpu", "nvswitch")}
        draft.components = [c for c in draft.components if c.name in keep]
        draft.links = [lk for lk in draft.links if lk.src in keep and lk.dst in keep]
        draft.notes = [n for n in draft.notes if "NVSwitch" in n or "NVLink" in n or "xGMI" in n]
        draft.note("GPU fabric only (fabric_only): PCIe, CPUs and NICs of the dump are left out")
    name = name or (f"{stem}" if stem else f"imported-{format}")
    gpus = [c for c in draft.components if c.kind == "gpu"]
    sources = [f"imported by simcoll topo import from {format} output {where}"]
    header = _first_comment(text)
    if header:
        sources.append(f"dump header: {header}")
    sources += [f"assumption: {note}" for note in draft.notes]
    nics = sum(1 for c in draft.components if c.kind == "nic")
    description = f"{len(gpus)} GPUs" + (f", {nics} NICs" if nics else "") + f" imported from {format} output"
    topology = build_topology(
        name, draft.components, draft.links, description=description, sources=tuple(sources), where=where
    )
    if nodes > 1:
        if nics == 0:
            raise TopologyError(
                f"{where}: the {format} dump shows no NIC, so {nodes} nodes cannot be joined"
                + ("; import an RCCL topology dump (nccl-xml) instead" if format == "rocm-smi" else "")
            )
        topology = cluster(topology, nodes, network)
    model = default_model(topology, draft, where)
    return ImportedMachine(topology=topology, model=model, notes=tuple(draft.notes), dump=where)


def import_topology(
    format: str, path_or_text: str | Path, nodes: int = 1, network: str = "fat-tree", **options
) -> Topology:
    """The topology of a dump (:func:`import_machine` without the model).

    Parameters and errors are those of :func:`import_machine`. The topology
    names no default model (a Topology in memory has no file to point at):
    price it with ``import_machine(...).model``, or write both with
    :func:`save_imported`.
    """
    return import_machine(format, path_or_text, nodes, network, **options).topology


def model_path_for(topology_path: str | Path) -> Path:
    """Where :func:`save_imported` writes the model: ``machine.yaml`` → ``machine.model.yaml``."""
    path = Path(topology_path)
    return path.with_name(f"{path.stem}.model{path.suffix or '.yaml'}")


def save_imported(imported: ImportedMachine, path: str | Path, model_path: str | Path | None = None) -> Path:
    """Write the imported topology to ``path`` and its default model beside it,
    both or neither: each is written whole to a temporary file first, and
    renamed into place only once both are complete
    (:func:`simcoll.files.write_atomic_together`), so a failed save (disk
    full, file too large) leaves both old files as they were.

    The topology's ``default_model`` is the model file's path relative to the
    topology file's folder (``machine.model.yaml`` beside it), which is how
    :func:`simcoll.machines.load_topology` resolves it: the machine loads from
    any working directory. Both files start with comments saying the model is
    uncalibrated and listing what the dump left unknown.

    Returns
    -------
    Path
        The model file written.

    Raises
    ------
    TopologyError
        When the two paths are one file, or naming the file that cannot be
        written.
    """
    model_path = Path(model_path) if model_path is not None else model_path_for(path)
    check_distinct_outputs({"the topology": path, "its model": model_path}, error=TopologyError)
    notes = "".join(f"#   - {note}\n" for note in imported.notes)
    model_text = yaml.safe_dump(model_to_dict(imported.model), sort_keys=False, allow_unicode=True, width=120)
    model_file_text = (
        f"# {UNCALIBRATED} default cost model of {imported.topology.name}, written by simcoll topo import\n"
        "# uncalibrated: true  (nominal figures; fit it with `simcoll calibrate` before trusting times)\n" + model_text
    )
    recorded = Path(os.path.relpath(Path(model_path).absolute(), Path(path).absolute().parent)).as_posix()
    topology = replace(imported.topology, default_model=recorded)
    data = topology_to_dict(topology)
    parts = {key: data.pop(key) for key in ("components", "links")}
    parts["links"] = [
        entry if entry.get("directed") else [*entry["ends"], entry["type"], entry["count"]] for entry in parts["links"]
    ]
    body = "".join(
        yaml.safe_dump(part, sort_keys=False, allow_unicode=True, width=120, default_flow_style=flow)
        for part, flow in ((data, False), (parts, None))
    )
    header = (
        f"# topology {topology.name}, imported by simcoll topo import from {imported.dump}\n"
        f"# default model: {recorded} ({UNCALIBRATED}; a path relative to this file's folder)\n"
        + ("# the dump leaves these unknown; defaults picked (also under sources):\n" + notes if notes else "")
    )
    write_atomic_together([(model_path, model_file_text), (path, header + body)], error=TopologyError)
    return model_path

"""Files and formats: the I/O helpers (simcoll.files), the one schedule format
dispatcher (simcoll.interop.schedules), and YAML round trips of topologies and
cost models.

Claims: every ``load_*`` has a ``save_*`` that it reads back to an equal
object; a save that fails part-way leaves the previous file and no temporary
file; errors are one line naming the file.
"""

from __future__ import annotations

import ast
import doctest
import errno
import importlib
import os
from pathlib import Path

import pytest

import simcoll.files
from simcoll import lower_algorithm, make_collective
from simcoll.algorithm import Algorithm, steps_from_lists
from simcoll.cost_model import model_from_dict, model_to_dict, save_model
from simcoll.errors import AlgorithmError, ModelError, SimcollError, TopologyError
from simcoll.files import atomic_output, load_yaml, parse_json, parse_yaml, read_text, write_atomic
from simcoll.interop import (
    export_msccl_xml,
    guess_format,
    load_schedule,
    load_schedules,
    parse_msccl_xml,
    parse_schedules,
    read_msccl_xml,
    save_schedule,
)
from simcoll.machines import builtin_models, builtin_topologies, load_model, load_topology
from simcoll.program import Program
from simcoll.topology import save_topology
from simcoll.verify import check

ROOT = Path(__file__).resolve().parents[1]


def ring_allgather(p: int) -> Algorithm:
    """Chunk c starts on rank c; at step s rank r forwards chunk r-s to r+1."""
    steps = [[((r - s) % p, r, (r + 1) % p, "copy") for r in range(p)] for s in range(p - 1)]
    return steps_from_lists(f"ring-ag{p}", make_collective("allgather", p, 1), steps)


def ring_allreduce(p: int) -> Algorithm:
    """Reduce-scatter then allgather around a ring, one chunk per rank."""
    scatter = [[((r - s) % p, r, (r + 1) % p, "reduce") for r in range(p)] for s in range(p - 1)]
    gather = [[((r + 1 - s) % p, r, (r + 1) % p, "copy") for r in range(p)] for s in range(p - 1)]
    return steps_from_lists(f"ring-ar{p}", make_collective("allreduce", p, p), scatter + gather)


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


@pytest.fixture(params=["allgather", "allreduce"])
def algorithm(request) -> Algorithm:
    algo = ring_allgather(4) if request.param == "allgather" else ring_allreduce(4)
    assert check(algo) == []  # the fixtures are correct algorithms
    return algo


# ---------------------------------------------------------------------------
# simcoll.files
# ---------------------------------------------------------------------------
def test_files_imports_nothing_from_simcoll_but_errors():
    tree = ast.parse(Path(simcoll.files.__file__).read_text())
    local = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level}
    absolute = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in node.names
        if (getattr(node, "module", None) or alias.name).startswith("simcoll")
    }
    assert local == {"errors"} and not absolute


def test_read_errors_name_the_file_and_use_the_callers_class(tmp_path):
    with pytest.raises(TopologyError, match=rf"^{tmp_path}/missing.yaml: cannot read: No such file"):
        read_text(tmp_path / "missing.yaml", error=TopologyError)
    (tmp_path / "latin1.txt").write_bytes(b"caf\xe9")
    with pytest.raises(SimcollError, match=r"latin1.txt: not UTF-8 text \(byte 3"):
        read_text(tmp_path / "latin1.txt")
    with pytest.raises(AlgorithmError, match=r"^a.json: not valid JSON: .*line 1 column 2"):
        parse_json("{", "a.json", error=AlgorithmError)
    with pytest.raises(ModelError, match=r"^m.yaml: not valid YAML: .*line 1"):
        parse_yaml("a: [1", "m.yaml", error=ModelError)
    (tmp_path / "t.yaml").write_text("name: x\nlinks: []\n")
    assert load_yaml(tmp_path / "t.yaml") == {"name": "x", "links": []}


def test_write_atomic_writes_text_and_bytes_and_keeps_permissions(tmp_path):
    path = tmp_path / "out.txt"
    write_atomic(path, "one")
    assert path.read_text() == "one"
    os.chmod(path, 0o640)
    write_atomic(path, b"two\xff")
    assert path.read_bytes() == b"two\xff"
    assert path.stat().st_mode & 0o777 == 0o640
    assert _leftovers(tmp_path) == []


def test_an_exception_mid_write_leaves_the_previous_file_and_no_temporary(tmp_path):
    path = tmp_path / "out.json"
    path.write_text("previous")
    with pytest.raises(RuntimeError, match="boom"):
        with atomic_output(path) as f:
            f.write("half of the new")
            f.flush()
            assert _leftovers(tmp_path)  # the data goes to a temporary file beside the target
            raise RuntimeError("boom")
    assert path.read_text() == "previous"
    assert _leftovers(tmp_path) == []


def test_an_os_error_mid_write_is_one_line_naming_the_file(tmp_path, monkeypatch):
    path = tmp_path / "out.json"
    path.write_text("previous")

    def full(_fd):
        raise OSError(errno.EFBIG, os.strerror(errno.EFBIG))

    monkeypatch.setattr(simcoll.files.os, "fsync", full)
    with pytest.raises(AlgorithmError, match=rf"^{path}: cannot write: File too large$"):
        write_atomic(path, "new content", error=AlgorithmError)
    assert path.read_text() == "previous"
    assert _leftovers(tmp_path) == []


def test_writing_into_a_missing_directory_is_named(tmp_path):
    with pytest.raises(SimcollError, match="nowhere/out.json: cannot write: No such file or directory"):
        write_atomic(tmp_path / "nowhere" / "out.json", "{}")


# ---------------------------------------------------------------------------
# Schedules: the one dispatcher
# ---------------------------------------------------------------------------
def test_algorithm_json_round_trip(tmp_path, algorithm):
    path = tmp_path / "algo.json"
    save_schedule(algorithm, path)
    assert load_schedule(path) == algorithm
    assert load_schedules(path) == [algorithm]
    assert parse_schedules(path.read_text()) == [algorithm]
    assert Algorithm.load(path) == algorithm


def test_program_json_and_msccl_xml_round_trips(tmp_path, algorithm):
    program = lower_algorithm(algorithm)
    save_schedule(program, tmp_path / "p.json")
    assert load_schedule(tmp_path / "p.json") == program
    save_schedule(program, tmp_path / "p.xml")
    again = load_schedule(tmp_path / "p.xml")
    assert isinstance(again, Program) and again == read_msccl_xml(tmp_path / "p.xml")
    assert check(again) == [] and again.collective == program.collective
    assert [r.buffers for r in again.ranks] == [r.buffers for r in program.ranks]
    assert again.instruction_counts() == program.instruction_counts()
    # MSCCL XML keeps only what the runtime reads (no metadata, no peer-side references),
    # so what it gives back is a fixed point of save and load.
    save_schedule(again, tmp_path / "again.xml")
    assert load_schedule(tmp_path / "again.xml") == again
    # The newer dialect states the size range and out-of-place flag the classic one leaves out.
    save_schedule(program, tmp_path / "p.xml", dialect="newer")
    newer = load_schedule(tmp_path / "p.xml")
    assert (newer.ranks, newer.collective) == (again.ranks, again.collective)


def test_an_algorithm_saved_as_msccl_xml_is_lowered_first(tmp_path, algorithm):
    save_schedule(algorithm, tmp_path / "a.xml")
    program = load_schedule(tmp_path / "a.xml")
    assert isinstance(program, Program) and program.collective == algorithm.collective
    assert check(program) == []
    assert program.instruction_counts() == lower_algorithm(algorithm).instruction_counts()


def test_format_overrides_the_extension(tmp_path):
    algo = ring_allgather(3)
    save_schedule(algo, tmp_path / "ring.out", format="simcoll-json")
    assert load_schedule(tmp_path / "ring.out") == algo  # reading goes by content
    save_schedule(algo, tmp_path / "ring.data", format="msccl-xml")
    assert guess_format((tmp_path / "ring.data").read_text()) == "msccl-xml"


@pytest.mark.parametrize(
    "name, kwargs, message",
    [
        ("a.txt", {}, r"a.txt: cannot tell the format from the extension '.txt': use .json \(simcoll-json\)"),
        ("a", {}, "cannot tell the format from the extension ''"),
        ("a.json", {"format": "yaml"}, r"a.json: unknown format 'yaml'; known: simcoll-json, msccl-xml"),
    ],
)
def test_save_refuses_unknown_formats(tmp_path, name, kwargs, message):
    with pytest.raises(AlgorithmError, match=message):
        save_schedule(ring_allgather(2), tmp_path / name, **kwargs)
    assert list(tmp_path.iterdir()) == []


def test_save_refuses_what_is_not_a_schedule(tmp_path):
    with pytest.raises(AlgorithmError, match="can save an Algorithm or a Program, not dict"):
        save_schedule({"format": "simcoll.algorithm"}, tmp_path / "a.json")


def test_a_failed_schedule_save_leaves_the_previous_file(tmp_path, monkeypatch):
    path = tmp_path / "ring.json"
    save_schedule(ring_allgather(3), path)
    before = path.read_bytes()

    def fail_mid_write(_fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(simcoll.files.os, "fsync", fail_mid_write)
    with pytest.raises(AlgorithmError, match=rf"^{path}: cannot write: No space left on device$"):
        save_schedule(ring_allgather(4), path)
    assert path.read_bytes() == before
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize(
    "text, message",
    [
        ('{"hello": 1}', r'x: not a simcoll Algorithm or Program \(its "format" is None\), MSCCL XML or SCCL JSON'),
        ("<root/>", "x: XML without an <algo> element is not MSCCL XML"),
        ("{", "x: not valid JSON"),
        ('{"format": "simcoll.algorithm"}', "x: field 'transfers' must be a list"),
    ],
)
def test_parse_schedules_names_the_problem(text, message):
    with pytest.raises(AlgorithmError, match=message):
        parse_schedules(text, "x")


def test_load_schedule_of_several_programs_says_so(tmp_path):
    one = export_msccl_xml(lower_algorithm(ring_allgather(2)))
    path = tmp_path / "two.xml"
    path.write_text(one + one)
    assert len(load_schedules(path)) == 2
    with pytest.raises(AlgorithmError, match="two.xml: holds 2 programs"):
        load_schedule(path)


def test_reading_and_parsing_are_separate_verbs(tmp_path):
    """A path given to a parser is text, never opened (no guessing)."""
    path = tmp_path / "p.xml"
    path.write_text(export_msccl_xml(lower_algorithm(ring_allgather(2))))
    with pytest.raises(AlgorithmError, match="<xml text>: no <algo> element"):
        parse_msccl_xml(str(path))
    assert parse_msccl_xml(path.read_text()) == read_msccl_xml(path)


# ---------------------------------------------------------------------------
# Topologies and models
# ---------------------------------------------------------------------------
TOPOLOGY_SPECS = [*builtin_topologies(), "ring:5", "torus2d:2x3", "hub-and-spoke:4", "dgx-a100*2", "ndv2*2/rail"]


@pytest.mark.parametrize("spec", TOPOLOGY_SPECS)
def test_topology_yaml_round_trip(tmp_path, spec):
    topology = load_topology(spec)
    path = tmp_path / "topo.yaml"
    save_topology(topology, path)
    assert load_topology(str(path)) == topology


def test_directed_links_round_trip(tmp_path):
    from simcoll.topology import topology_from_dict

    one_way = topology_from_dict(
        {
            "name": "one-way",
            "gpus": 3,
            "links": [{"ends": [f"gpu{i}", f"gpu{(i + 1) % 3}"], "type": "nvlink", "directed": True} for i in range(3)],
        }
    )
    save_topology(one_way, tmp_path / "t.yaml")
    again = load_topology(str(tmp_path / "t.yaml"))
    assert again == one_way and all(link.directed for link in again.links)


@pytest.mark.parametrize("spec", builtin_models())
def test_model_yaml_round_trip(tmp_path, spec):
    model = load_model(spec)
    path = tmp_path / "model.yaml"
    save_model(model, path)
    again = load_model(str(path))
    assert again == model
    # provenance survives too: every parameter set keeps its source
    assert again.protocol_sources == model.protocol_sources
    assert again.host_memory_source == model.host_memory_source
    assert model_to_dict(again) == model_to_dict(model)


def test_what_if_model_round_trip(tmp_path):
    model = load_model("ndv2-taccl").with_link("ib", bandwidth_Bps=25e9, alpha_s=2e-6)
    save_model(model, tmp_path / "what-if.yaml")
    assert load_model(str(tmp_path / "what-if.yaml")) == model


def test_a_model_without_a_protocol_source_is_refused():
    model = model_from_dict({"name": "m", "links": {"nvlink": {"alpha_s": 0, "bandwidth_Bps": 1, "source": "s"}}})
    bare = type(model)(**{**vars(model), "protocol_efficiency": {"Simple": 1.0, "LL": 0.5}})
    with pytest.raises(ModelError, match="protocol LL has no source"):
        model_to_dict(bare)


def test_failed_topology_and_model_saves_leave_the_previous_files(tmp_path, monkeypatch):
    topo_path, model_path = tmp_path / "t.yaml", tmp_path / "m.yaml"
    save_topology(load_topology("ring:4"), topo_path)
    save_model(load_model("generic"), model_path)
    before = topo_path.read_bytes(), model_path.read_bytes()

    def fail(_fd):
        raise OSError(errno.EFBIG, os.strerror(errno.EFBIG))

    monkeypatch.setattr(simcoll.files.os, "fsync", fail)
    with pytest.raises(TopologyError, match=rf"^{topo_path}: cannot write: File too large$"):
        save_topology(load_topology("dgx1"), topo_path)
    with pytest.raises(ModelError, match=rf"^{model_path}: cannot write: File too large$"):
        save_model(load_model("dgx1"), model_path)
    assert (topo_path.read_bytes(), model_path.read_bytes()) == before
    assert _leftovers(tmp_path) == []


def test_bad_yaml_files_are_named_with_their_kind(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: [unclosed\n")
    with pytest.raises(TopologyError, match=rf"^{path}: not valid YAML"):
        load_topology(str(path))
    with pytest.raises(ModelError, match=rf"^{path}: not valid YAML"):
        load_model(str(path))
    with pytest.raises(ModelError, match="missing.yaml: cannot read"):
        load_model(str(tmp_path / "missing.yaml"))


# ---------------------------------------------------------------------------
# Examples in docstrings run
# ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "module",
    [
        "simcoll.files",
        "simcoll.interop.schedules",
        "simcoll.interop.msccl_xml",
        "simcoll.interop.sccl_json",
        "simcoll.topology",
        "simcoll.cost_model",
        "simcoll.machines",
    ],
)
def test_docstring_examples(module, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # examples that name relative files find nothing there
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0

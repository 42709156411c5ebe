"""Specification of the interop command line (issue 6 item 5): ``simcoll
verify`` accepts simcoll JSON, MSCCL XML and SCCL JSON; ``simcoll export FILE
--format msccl-xml [--dialect D] -o OUT``; ``simcoll import FILE -o OUT.json``.
Bad input exits 2 with one line naming the problem.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_interop_sccl import allgather_ring3

from simcoll.algorithm import Algorithm
from simcoll.cli import main
from simcoll.interop import load_schedule, load_schedules, read_msccl_xml, read_sccl_json
from simcoll.program import Program
from simcoll.verify import check

ROOT = Path(__file__).resolve().parents[1]
XML_DIR = ROOT.parent / "shared" / "interop" / "msccl-xml"
needs_files = pytest.mark.skipif(not XML_DIR.is_dir(), reason="../shared/interop/msccl-xml is absent")


@needs_files
def test_verify_accepts_every_real_xml(capsys):
    for path in sorted(XML_DIR.glob("*.xml")):
        assert main(["verify", str(path)]) == 0, capsys.readouterr()
        assert "correct:" in capsys.readouterr().out


@needs_files
def test_verify_json_lists_every_algo_of_a_file(capsys):
    assert main(["verify", str(XML_DIR / "custom_collective.xml"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["correct"] and len(report["schedules"]) == 2
    assert main(["verify", str(XML_DIR / "allreduce_ring.xml"), "--json"]) == 0
    single = json.loads(capsys.readouterr().out)
    assert (single["kind"], single["collective"], single["correct"]) == ("program", "allreduce", True)


def test_verify_accepts_sccl_json_and_reports_errors(tmp_path, capsys):
    good = tmp_path / "ag.json"
    good.write_text(json.dumps(allgather_ring3()))
    assert main(["verify", str(good), "--topology", "ring:3"]) == 0
    data = allgather_ring3()
    data["steps"] = data["steps"][:1]
    bad = tmp_path / "short.json"
    bad.write_text(json.dumps(data))
    assert main(["verify", str(bad)]) == 1
    assert "never arrives" in capsys.readouterr().out
    other = tmp_path / "other.json"
    other.write_text('{"hello": 1}')
    assert main(["verify", str(other)]) == 2
    assert "MSCCL XML or SCCL JSON" in capsys.readouterr().err


@needs_files
@pytest.mark.parametrize("dialect", ["classic", "newer"])
def test_import_then_export_round_trip(tmp_path, dialect):
    src = XML_DIR / "allreduce_a100_allpairs_v2.xml"
    out_json, out_xml = tmp_path / "p.json", tmp_path / "p.xml"
    assert main(["import", str(src), "-o", str(out_json)]) == 0
    program = Program.load(out_json)
    assert program == read_msccl_xml(src)
    assert main(["export", str(out_json), "--format", "msccl-xml", "--dialect", dialect, "-o", str(out_xml)]) == 0
    again = read_msccl_xml(out_xml)
    assert check(again) == []
    assert again.ranks == program.ranks and again.collective == program.collective
    # export straight from XML too
    assert main(["export", str(src), "-o", str(out_xml)]) == 0
    assert read_msccl_xml(out_xml) == program


@needs_files
def test_import_of_a_multi_algo_file_needs_index(tmp_path, capsys):
    out = tmp_path / "c.json"
    assert main(["import", str(XML_DIR / "custom_collective.xml"), "-o", str(out)]) == 2
    assert "--index" in capsys.readouterr().err
    assert main(["import", str(XML_DIR / "custom_collective.xml"), "--index", "1", "-o", str(out)]) == 0
    assert load_schedule(out) == load_schedules(XML_DIR / "custom_collective.xml")[1]
    # newer runtimes have no custom collective
    assert main(["export", str(out), "--dialect", "newer", "-o", str(tmp_path / "c.xml")]) == 2


def test_import_sccl_json_writes_an_algorithm(tmp_path):
    src, out = tmp_path / "ag.sccl.json", tmp_path / "ag.json"
    src.write_text(json.dumps(allgather_ring3()))
    assert main(["import", str(src), "-o", str(out), "--json"]) == 0
    algo = Algorithm.load(out)
    assert algo == read_sccl_json(src)
    assert check(algo) == []


def test_export_of_an_algorithm_lowers_it(tmp_path, capsys):
    """An Algorithm is lowered by the compiler first (simcoll.compiler.lower_algorithm)."""
    algo_json, out = tmp_path / "ring.json", tmp_path / "ring.xml"
    assert main(["algo", "generate", "ring", "-t", "ring:4", "-c", "allreduce", "-o", str(algo_json)]) == 0
    capsys.readouterr()
    assert main(["export", str(algo_json), "--format", "msccl-xml", "-o", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["lowered"] and summary["collective"] == "allreduce"
    program = read_msccl_xml(out)
    assert check(program) == []
    assert main(["verify", str(out)]) == 0

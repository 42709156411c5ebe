"""Bad input, as the README promises it is handled (issue 52): exit 2 with one
line on stderr naming the problem, nothing on stdout, no file written or
changed; limits refused before any work; two outputs of one command never at
one path; a topology and its model written together or not at all."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import simcoll.gpu

from simcoll.algorithms import generate
from simcoll.arguments import usable_cores
from simcoll.cli import main
from simcoll.machines import load_machine
from simcoll.topology_import import import_machine, save_imported

ROOT = Path(__file__).resolve().parents[1]
DGX1_SMI = ROOT / "tests" / "data" / "topology_dumps" / "dgx1_nvidia_smi.txt"
SMOKE_STUDY = ROOT / "experiments" / "studies" / "smoke.yaml"


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A folder holding the inputs the cases name, as the working directory."""
    monkeypatch.chdir(tmp_path)
    generate("ring", "ring:4", "allgather").save(tmp_path / "ring.json")
    shutil.copy(DGX1_SMI, tmp_path / "smi.txt")
    shutil.copy(SMOKE_STUDY, tmp_path / "study.yaml")
    (tmp_path / "notes.txt").write_text("not a topology\n")
    (tmp_path / "empty.xml").write_text("")
    (tmp_path / "a.log").write_text("# nThread 1\n")
    return tmp_path


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (hidden temporaries included) and its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def assert_refused(argv: list[str], message: str, folder: Path, capsys) -> None:
    """``simcoll ARGV`` exits 2 with one line on stderr containing ``message``,
    prints nothing on stdout, and leaves ``folder`` as it was."""
    before = snapshot(folder)
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert len(captured.err.strip().splitlines()) == 1, captured.err
    assert message in captured.err
    assert "Traceback" not in captured.err
    assert snapshot(folder) == before


SIMULATE = ["simulate", "ring.json", "-t", "ring:4", "-s", "1MB"]

CASES = [
    # 1. two outputs at one path
    pytest.param(
        ["topo", "import", "nvidia-smi", "smi.txt", "-o", "m.yaml", "--model-output", "m.yaml"],
        "m.yaml: both -o/--output and --model-output would be written there",
        id="topo-import-model-over-topology",
    ),
    pytest.param(
        ["topo", "import", "nvidia-smi", "smi.txt", "-o", "m.yaml", "--model-output", "./m.yaml"],
        "both -o/--output and --model-output would be written there",
        id="topo-import-same-file-spelled-otherwise",
    ),
    pytest.param(
        ["topo", "import", "nvidia-smi", "smi.txt", "-o", "m.yaml", "--model-output", "smi.txt"],
        "smi.txt: refusing to write over an input file",
        id="topo-import-model-over-the-dump",
    ),
    # 2. an output extension that contradicts the format
    pytest.param(
        ["export", "ring.json", "-o", "x.json"],
        "-o x.json: the extension .json is for simcoll-json, but --format is msccl-xml",
        id="export-xml-named-json",
    ),
    # 3. limits: finite, positive, in range, before any work
    *(
        pytest.param(
            [*SIMULATE, "--time-limit", value],
            f"--time-limit must be a positive number of seconds, got '{value}'",
            id=f"simulate-time-limit-{value}",
        )
        for value in ("nan", "inf", "-1", "0", "soon")
    ),
    pytest.param(
        ["compare", "-t", "ring:4", "--time-limit", "0"],
        "--time-limit must be a positive number of seconds, got '0'",
        id="compare-time-limit-0",
    ),
    pytest.param(
        ["verify", "ring.json", "--time-limit=-inf"],
        "--time-limit must be a positive number of seconds, got '-inf'",
        id="verify-time-limit-minus-inf",
    ),
    pytest.param(
        [*SIMULATE[:-2], "-s", "99999999999999999999"],
        "size '99999999999999999999' is more than simcoll takes (at most 1024TB",
        id="simulate-size-above-1PiB",
    ),
    pytest.param(
        [*SIMULATE[:-2], "-s", "1025TB"],
        "more than simcoll takes",
        id="simulate-size-just-above-the-limit",
    ),
    pytest.param(
        ["gpu", "check", "ring.json", "--timeout", "0"],
        "--timeout must be a positive number of seconds, got '0'",
        id="gpu-check-timeout-0",
    ),
    pytest.param(
        ["compare", "-t", "ring:4", "--jobs", str(usable_cores() + 1)],
        f"{usable_cores() + 1} jobs is more than the {usable_cores()} CPU core(s) this process may use",
        id="compare-more-jobs-than-cores",
    ),
    # 5. messages that name the real problem
    pytest.param(
        ["simulate", "ring.json", "-t", "notes.txt", "-s", "1MB"],
        "topology 'notes.txt': the file exists but is not a .yaml file",
        id="topology-file-not-yaml",
    ),
    pytest.param(
        [*SIMULATE, "-m", "notes.txt"],
        "model 'notes.txt': the file exists but is not a .yaml file",
        id="model-file-not-yaml",
    ),
    pytest.param(
        ["sweep", "study.yaml", "-o", "ring.json"],
        "ring.json: it is a file, not a results directory",
        id="sweep-output-is-a-file",
    ),
    pytest.param(
        ["sweep", "study.yaml", "-o", "ring.json/results"],
        "ring.json/results: ring.json is a file, not a results directory",
        id="sweep-output-under-a-file",
    ),
    pytest.param(
        ["sweep", "status", "ring.json"],
        "ring.json: it is a file, not a results directory",
        id="sweep-status-of-a-file",
    ),
    pytest.param(
        ["simulate", "empty.xml", "-t", "ring:4", "-s", "1MB"],
        "empty.xml: not MSCCL XML: the file is empty",
        id="empty-xml",
    ),
    # 6. calibrate: the output checked before the fit, each log once
    pytest.param(
        ["calibrate", "--nccl-tests", "a.log", "./a.log", "-t", "ring:4", "-o", "m.yaml"],
        "--nccl-tests: ./a.log is given twice (as a.log)",
        id="calibrate-log-twice",
    ),
    # one path, two outputs: refused before the log is read (it does not exist here)
    pytest.param(
        ["validate", "--nccl-tests", "nope.log", "-t", "ring:4", "--csv", "v.png", "--plot", "v.png"],
        "v.png: both --csv and --plot would be written there",
        id="validate-csv-and-plot-at-one-path",
    ),
]


@pytest.mark.parametrize("argv, message", CASES)
def test_bad_input_exits_2_with_one_line(workdir, capsys, argv, message):
    assert_refused(argv, message, workdir, capsys)


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc, where no file can be created")
def test_calibrate_refuses_an_unwritable_output_before_reading_a_log(workdir, capsys):
    # the log does not exist: an error naming the output shows the output was checked first
    argv = ["calibrate", "--nccl-tests", "nope.log", "-t", "ring:4", "-o", "/proc/m.yaml"]
    assert_refused(argv, "/proc/m.yaml: cannot write", workdir, capsys)


def test_gpu_errors_go_to_stderr(workdir, capsys):
    if simcoll.gpu.cuda_available():
        pytest.skip("a GPU is present")
    assert_refused(["gpu", "run", "ring.json"], "gpu run: no CUDA GPU available", workdir, capsys)


@pytest.mark.skipif(os.name != "posix", reason="needs RLIMIT_FSIZE")
def test_topo_import_writes_the_topology_and_its_model_together_or_not_at_all(workdir):
    assert main(["topo", "import", "nvidia-smi", "smi.txt", "-o", "lt2.yaml"]) == 0
    before = snapshot(workdir)
    model, topology = len(before["lt2.model.yaml"]), len(before["lt2.yaml"])
    assert model < topology  # the model is written first: a limit between the two fails the topology alone
    limit = (model + topology) // 2

    def limit_file_size():
        import resource

        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    argv = ["topo", "import", "nvidia-smi", "smi.txt", "-o", "lt2.yaml", "--name", "renamed"]
    done = subprocess.run(
        [sys.executable, "-m", "simcoll", *argv],
        cwd=workdir,
        capture_output=True,
        text=True,
        preexec_fn=limit_file_size,
        check=False,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().splitlines() == ["simcoll: error: lt2.yaml: cannot write: File too large"]
    assert snapshot(workdir) == before  # both old files, and no temporary left


def test_an_imported_machine_loads_from_any_working_directory(workdir, monkeypatch):
    imported = import_machine("nvidia-smi", "smi.txt")
    (workdir / "dir").mkdir()
    save_imported(imported, "dir/machine.yaml")
    assert "default_model: machine.model.yaml" in (workdir / "dir" / "machine.yaml").read_text()
    assert load_machine("dir/machine.yaml").model == imported.model
    monkeypatch.chdir(workdir / "dir")
    assert load_machine("machine.yaml").model == imported.model


def test_a_machine_recording_its_model_relative_to_the_working_directory_still_loads(workdir):
    imported = import_machine("nvidia-smi", "smi.txt")
    (workdir / "dir").mkdir()
    save_imported(imported, "dir/machine.yaml")
    path = workdir / "dir" / "machine.yaml"
    # as files written before the path was made relative to the topology's folder
    path.write_text(
        path.read_text().replace("default_model: machine.model.yaml", "default_model: dir/machine.model.yaml")
    )
    assert load_machine("dir/machine.yaml").model == imported.model


def _every_parser(parser: argparse.ArgumentParser):
    """``parser`` and every sub-command's parser, with its options added (they are added when first parsed)."""
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                arguments = getattr(sub, "_arguments", None)
                if arguments is not None:
                    sub._arguments = None
                    arguments(sub)
                yield from _every_parser(sub)


def test_every_time_limit_and_jobs_option_follows_the_one_rule():
    """A command declaring ``--time-limit`` or ``--jobs`` takes it through the shared parser
    (cli.options.add_time_limit_option / add_jobs_option), so the rule above holds for all."""
    from simcoll.cli import build_parser
    from simcoll.cli.options import SHARED_TYPES

    seen = []
    for parser in _every_parser(build_parser()):
        for action in parser._actions:
            for name, parse in SHARED_TYPES.items():
                if name in action.option_strings:
                    assert action.type is parse, f"{parser.prog} {name}"
                    seen.append(parser.prog.split()[-1])
    assert {"simulate", "compare", "verify", "sccl"} <= set(seen)


def test_bounds_stop_at_their_time_limit(workdir, capsys):
    """bounds on a large machine: tens of thousands of cuts, each a maximum flow; --time-limit stops it
    (issue 52: dgx-h100*512 took 4 min 36 s at 10.7 GB with no way to stop it)."""
    assert_refused(
        ["bounds", "-t", "dgx-h100*16", "-c", "allreduce", "--time-limit", "0.001"],
        "lower bounds: the time limit of 0.001 s was reached",
        workdir,
        capsys,
    )
    assert main(["bounds", "-t", "dgx-h100*16", "-c", "allreduce", "--time-limit", "60"]) == 0


def test_a_drawing_too_large_to_lay_out_is_refused_at_once(workdir, capsys):
    """topo draw on 65,536 GPUs gave no answer in 90 s (issue 52): refused before any layout, nothing written."""
    started = time.perf_counter()
    assert_refused(
        ["topo", "draw", "dgx-h100*8192", "-o", "huge.png"],
        "dgx-h100*8192: 212,993 components are more than topo draw lays out",
        workdir,
        capsys,
    )
    assert time.perf_counter() - started < 30  # (loading the topology; generous for a loaded machine)


def test_a_large_schedule_saved_as_json_names_npz(tmp_path, monkeypatch, capsys):
    # issue 51: ring:1024 through JSON took 44 s and 3.1 GB with no hint that .npz exists
    import simcoll.limits as limits
    from simcoll.cli import main

    monkeypatch.setattr(limits, "JSON_ADVISED_TRANSFERS", 100)
    args = ["algo", "generate", "ring", "-t", "ring:16", "-c", "allreduce", "-o"]
    assert main([*args, str(tmp_path / "r.json")]) == 0
    err = capsys.readouterr().err
    assert "simcoll: warning:" in err and "480 transfers as JSON" in err and "r.npz" in err
    assert main([*args, str(tmp_path / "r.npz")]) == 0
    assert "warning" not in capsys.readouterr().err
    monkeypatch.setattr(limits, "JSON_ADVISED_TRANSFERS", 1000)
    assert main([*args, str(tmp_path / "r2.json")]) == 0
    assert "warning" not in capsys.readouterr().err

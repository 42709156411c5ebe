"""simcoll gpu validate's comparison, CSV and plot, with a fake measurement
function (no GPU): errors are computed against the simulator, sizes are
rounded to what the runner accepts, files are written atomically."""

from __future__ import annotations

import argparse
import csv

import pytest
import simcoll.gpu
from simcoll.gpu import validate as val

from simcoll import load_machine, simulate
from simcoll.cli.gpu import report_validation
from simcoll.errors import SimcollError
from tests.test_gpu_cli_and_kernel import main, saved_ring


def test_errors_are_simulated_against_measured_and_the_median_is_judged(tmp_path):
    program, _ = saved_ring(tmp_path)
    machine = load_machine("ring:4")
    sizes = [1 << 12, 1 << 16, 1 << 20]
    # measured 10 % slower than simulated at every size: error = 1/1.1 - 1
    result = val.validate(program, machine, sizes, lambda p, s: 1.1 * simulate(p, machine, s).time_s)
    assert [r.size_bytes for r in result.rows] == sizes
    assert all(r.error == pytest.approx(1 / 1.1 - 1) for r in result.rows)
    assert result.within_target and result.median_abs_error == pytest.approx(1 - 1 / 1.1)
    slow = val.validate(program, machine, sizes, lambda p, s: 2 * simulate(p, machine, s).time_s)
    assert not slow.within_target and "outside the 15% target" in slow.lines()[-1]


def test_sizes_are_rounded_to_whole_elements_per_chunk(tmp_path):
    program, _ = saved_ring(tmp_path)  # allreduce on 4 ranks: size_chunks chunks of float32
    per = program.collective.size_chunks * 4
    assert val.valid_sizes(program, [1, per, per + 1, per + 2]) == [per, 2 * per]


def test_bad_measurements_and_rank_mismatch_are_refused(tmp_path):
    program, _ = saved_ring(tmp_path)
    with pytest.raises(SimcollError, match="not a positive time"):
        val.validate(program, load_machine("ring:4"), [4096], lambda p, s: 0.0)
    with pytest.raises(SimcollError, match="4 ranks but machine"):
        val.validate(program, load_machine("ring:8"), [4096], lambda p, s: 1e-5)


def test_sweep_writes_csv_and_plot_through_the_command_path(tmp_path, capsys):
    program, _ = saved_ring(tmp_path)
    machine = load_machine("ring:4")
    csv_path, png_path = tmp_path / "out.csv", tmp_path / "out.png"
    args = argparse.Namespace(size=None, sizes="1KB:1MB", factor=4, topology="ring:4", model=None, dtype="float32",
                              json=False, csv=str(csv_path), plot=str(png_path))  # fmt: skip
    assert report_validation(program, args, lambda p, s: 1.05 * simulate(p, machine, s).time_s) == 0
    out = capsys.readouterr().out
    assert "median |error|" in out and "within the 15% target" in out
    rows = list(csv.DictReader(csv_path.open()))
    assert tuple(rows[0]) == val.CSV_COLUMNS and len(rows) == 6
    assert all(float(r["error_pct"]) == pytest.approx(100 * (1 / 1.05 - 1), abs=1e-3) for r in rows)
    assert png_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(tmp_path.glob("*.tmp*"))  # atomic writes leave no temporaries


def test_validate_command_exits_2_in_one_line_without_a_gpu(tmp_path, capsys):
    if simcoll.gpu.cuda_available():
        pytest.skip("a GPU is present")
    _, path = saved_ring(tmp_path)
    assert main(["gpu", "validate", str(path), "--sizes", "1KB:1MB", "--csv", str(tmp_path / "x.csv")]) == 2
    captured = capsys.readouterr()  # an error: on stderr, nothing on stdout
    assert not captured.out and captured.err.count("\n") == 1 and "no CUDA GPU" in captured.err
    assert not (tmp_path / "x.csv").exists()
    assert main(["gpu", "validate", str(path)]) == 2  # neither --size nor --sizes: a usage error
    assert "needs one of --size" in capsys.readouterr().err

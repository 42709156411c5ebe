"""One evaluation of "this schedule, this size, this machine, with the
protocol NCCL would pick" (:func:`simcoll.evaluation.schedule_time_s`):
compare, the sweep runner and calibration all give its times, so a user
comparing their outputs compares like with like."""

from __future__ import annotations

import pytest

from simcoll import load_machine
from simcoll.algorithms import generate
from simcoll.analytic import critical_path_time_s
from simcoll.calibration.calibrate import Sample, simulate_samples
from simcoll.compare import compare
from simcoll.compiler import lower_algorithm
from simcoll.errors import OptionError
from simcoll.evaluation import NCCL_PROTOCOL, schedule_time_s
from simcoll.nccl.baseline import nccl_algorithm, protocol_for
from simcoll.simulator import simulate
from simcoll.sweeps import load_results, load_study, run_study

SIZES = [1 << 10, 1 << 20, 1 << 28]


@pytest.fixture(scope="module")
def a100():
    return load_machine("dgx-a100")


@pytest.mark.parametrize("method", ["simulate", "analytic"])
def test_compare_rows_are_the_evaluation(a100, method):
    df, _ = compare(a100, "allreduce", SIZES, method=method, algorithms=["ring", "nccl"])
    ring = generate("ring", a100, "allreduce")
    for size in SIZES:
        row = df[(df.algorithm == "ring") & (df.size_bytes == size)].iloc[0]
        assert row.time_s == schedule_time_s(ring, a100, size, method=method)
        nccl = df[(df.algorithm == "nccl") & (df.size_bytes == size)].iloc[0]
        assert nccl.time_s == schedule_time_s(nccl_algorithm(a100, "allreduce", size), a100, size, method=method)


def test_sweep_points_are_the_evaluation(a100, tmp_path):
    study = load_study(
        {
            "name": "same",
            "machines": ["dgx-a100"],
            "collectives": ["allreduce"],
            "algorithms": ["ring"],
            "sizes": "1KB,1MB,256MB",
            "simulator": {"mode": ["algorithm", "program", "analytic"]},
        }  # fmt: skip
    )
    run_study(study, tmp_path, serial=True, progress=False)
    rows = load_results(tmp_path)
    ring = generate("ring", a100, "allreduce")
    program = lower_algorithm(ring, machine=a100, fifo_slots=a100.model.executor.fifo_slots)
    for size in SIZES:
        at = rows[rows.size_bytes == size].set_index("mode").time_s
        assert at["algorithm"] == schedule_time_s(ring, a100, size)
        assert at["analytic"] == schedule_time_s(ring, a100, size, method="analytic")
        assert at["program"] == schedule_time_s(program, a100, size)


def test_calibration_samples_are_the_evaluation_with_their_own_protocol(a100):
    samples = [
        Sample("log", size, 1.0, nccl_algorithm(a100, "allreduce", size), "") for size in SIZES
    ]  # (the measured time is not used here)
    expected = [schedule_time_s(s.algorithm, a100, s.size_bytes, protocol=None) for s in samples]
    assert simulate_samples(samples, a100, a100.model).tolist() == expected


def test_the_protocol_rule(a100):
    """Its own protocol first, else NCCL's pick; None leaves the model's
    default; a name is that protocol."""
    ring = generate("ring", a100, "allreduce")
    for size in SIZES:
        picked = protocol_for(ring, a100, size)
        assert schedule_time_s(ring, a100, size) == simulate(ring, a100, size, protocol=picked, verify=False).time_s
        assert schedule_time_s(ring, a100, size, protocol=NCCL_PROTOCOL) == schedule_time_s(
            ring, a100, size, protocol=picked
        )
        assert schedule_time_s(ring, a100, size, method="analytic", protocol="Simple") == critical_path_time_s(
            ring, a100, size, protocol="Simple"
        )
    assert protocol_for(ring, a100, 1 << 10) != protocol_for(ring, a100, 1 << 28)  # (the rule is tried both ways)


def test_bad_requests_are_refused(a100):
    ring = generate("ring", a100, "allreduce")
    with pytest.raises(OptionError, match="unknown method 'exact'"):
        schedule_time_s(ring, a100, 1 << 20, method="exact")
    with pytest.raises(OptionError, match="analytic method needs an Algorithm"):
        schedule_time_s(lower_algorithm(ring, machine=a100), a100, 1 << 20, method="analytic")

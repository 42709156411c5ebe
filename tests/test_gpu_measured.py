"""The simulator against simcoll's interpreter measured on an NVIDIA H100
(benchmarks/measured/h100-2026-11-26/, four or eight virtual ranks on one GPU):
run 6's calibrated model simulates the measured ring Allreduce within the
15 % median target of docs/gpu.md, and six schedules it was not fitted on; the
stream-bound rule and the signal latency are what bring it there; the committed
samples fit again to the committed models; earlier runs' samples, refitted
with the signal latency, give the figures of docs/gpu.md. No GPU needed: the
measurements are files."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from simcoll.gpu import calibrate as cal
from simcoll.gpu import validate as val

from simcoll import simulate
from simcoll.algorithms import applicable
from simcoll.compiler import lower_algorithm
from simcoll.cost_model import CostModel
from simcoll.errors import ModelError, SimcollError
from simcoll.machines import Machine, load_machine, load_model, load_topology
from tests.test_gpu_cli_and_kernel import main

MEASURED = Path(__file__).resolve().parents[1] / "benchmarks" / "measured" / "h100-2026-11-26"


def ring_program():
    return lower_algorithm(applicable(load_machine("fully-connected:4"), "allreduce")["ring"])


def committed(run: int) -> CostModel:
    return load_model(str(MEASURED / f"calibrated-{run}.yaml"))


def h100_machine(model: CostModel | None = None) -> Machine:
    return load_machine(load_topology("fully-connected:4"), model or committed(6))


def validation(model: CostModel | None = None, csv: str = "validate-ring-6.csv") -> val.Validation:
    times = val.measured_times(str(MEASURED / csv))
    return val.validate(ring_program(), h100_machine(model), sorted(times), val.recorded_measure(times, csv))


def without(model: CostModel, **executor_fields) -> CostModel:
    return dataclasses.replace(model, executor=dataclasses.replace(model.executor, **executor_fields))


def test_calibrated_h100_model_simulates_the_measured_ring_within_the_target():
    result = validation()
    assert len(result.rows) == 11 and result.rows[0].size_bytes == 1024 and result.rows[-1].size_bytes == 1 << 30
    assert result.within_target
    assert result.median_abs_error == pytest.approx(0.020, abs=0.001)  # the figure in docs/gpu.md
    assert max(abs(r.error) for r in result.rows) < 0.06


@pytest.mark.parametrize(("csv", "median"), [("validate-ring-2.csv", 0.041), ("validate-ring-4.csv", 0.052),
                                             ("validate-ring-5.csv", 0.021)])  # fmt: skip
def test_the_model_also_predicts_the_earlier_runs_it_was_not_fitted_on(csv, median):
    assert validation(csv=csv).median_abs_error == pytest.approx(median, abs=0.001)


def test_the_model_before_the_signal_latency_still_simulates_its_own_run_as_then():
    assert validation(committed(4), "validate-ring-4.csv").median_abs_error == pytest.approx(0.058, abs=0.001)


def test_without_the_stream_bound_rule_large_sizes_simulate_far_too_fast():
    large = [r for r in validation(without(committed(6), stream_bound=None)).rows if r.size_bytes >= 4 << 20]
    assert all(r.error < -0.25 for r in large)


def test_without_the_signal_latency_small_sizes_simulate_too_fast():
    """Every dependent step then costs α alone (4.2 us) where the ring's steps
    take about 5.6 us: 15-20 % fast up to 64 KB (2-4 % with it)."""
    rows = validation(without(committed(6), signal_latency_s=None)).rows
    assert all(r.error < -0.14 for r in rows if r.size_bytes <= 64 << 10)
    assert all(abs(r.error) < 0.04 for r in validation().rows if r.size_bytes <= 64 << 10)


def test_the_committed_samples_fit_again_to_the_committed_model(tmp_path):
    samples, run = cal.read_samples(str(MEASURED / "calibrate-samples-6.csv"))
    assert len(samples) == 69 and "NVIDIA H100" in run
    _, model = cal.write_calibration(samples, str(tmp_path / "refit.yaml"), link_type="nvlink", run=run)
    for value in (
        lambda m: m.executor.thread_block_bandwidth_Bps,
        lambda m: m.executor.kernel_launch_s,
        lambda m: m.executor.signal_latency_s,
        lambda m: m.link("nvlink").alpha_s,
        lambda m: m.link("nvlink").bandwidth_Bps,
    ):
        assert value(model) == pytest.approx(value(committed(6)), rel=1e-4)
    assert model.executor.stream_bound is True


@pytest.fixture(scope="module")
def refitted(tmp_path_factory) -> dict[int, CostModel]:
    """Runs 4 and 5's samples (taken before the signal latency) fitted by this code."""
    out = {}
    for n in (4, 5):
        samples, run = cal.read_samples(str(MEASURED / f"calibrate-samples-{n}.csv"))
        assert len(samples) == 69 and "NVIDIA H100" in run
        path = tmp_path_factory.mktemp("refit") / f"refit-{n}.yaml"
        out[n] = cal.write_calibration(samples, str(path), link_type="nvlink", run=run)[1]
    return out


@pytest.mark.parametrize("n", [4, 5])
def test_earlier_samples_fit_again_to_their_models_rates(refitted, n):
    """Refitted with the signal latency, the rates stay within 1 % and the
    ping-pong's one-way trip is α + signal latency."""
    model = refitted[n]
    for rate in (lambda m: m.executor.thread_block_bandwidth_Bps, lambda m: m.link("nvlink").bandwidth_Bps):
        assert rate(model) == pytest.approx(rate(committed(n)), rel=0.01)
    assert model.link("nvlink").alpha_s == pytest.approx(committed(n).link("nvlink").alpha_s, rel=0.06)
    assert 1.2e-6 < model.executor.signal_latency_s < 1.4e-6
    if n == 5:  # its model's source recorded the ping-pong's one-way trip, 5.729 us
        trip = model.link("nvlink").alpha_s + model.executor.signal_latency_s
        assert trip == pytest.approx(5.729e-6, rel=0.1)


@pytest.mark.parametrize(("model_run", "csv", "median"), [
    (4, "validate-ring-4.csv", 0.016), (4, "validate-ring-2.csv", 0.048), (4, "validate-ring-5.csv", 0.028),
    (5, "validate-ring-5.csv", 0.043), (5, "validate-ring-2.csv", 0.042), (5, "validate-ring-4.csv", 0.019),
])  # fmt: skip
def test_refitted_earlier_models_simulate_every_runs_ring_within_five_percent(refitted, model_run, csv, median):
    """Fitted as then (without the signal latency): 5.8 % / 7.0 % on their own
    runs, sizes up to 64 KB 19-26 % fast; now at most 20 % (run 2's floor is
    5 us higher than the later runs') and 5 % from 4 MB up."""
    result = validation(refitted[model_run], csv)
    assert result.median_abs_error == pytest.approx(median, abs=0.001)
    assert all(abs(r.error) < 0.2 for r in result.rows)
    assert all(abs(r.error) < 0.05 for r in result.rows if r.size_bytes >= 4 << 20)


#: Schedules the models were not fitted on (1 KB-256 MB), median |error|: run 6
#: (the kernel polling without a fence per spin) with its own model; run 5 (the
#: kernel before) with its own model, fitted before the signal latency, and
#: with its samples refitted.
OTHER_SCHEDULES = {
    ("binomial-tree", "fully-connected:4", "broadcast"): (0.079, 0.069, 0.114),
    ("ring", "fully-connected:4", "allgather"): (0.079, 0.142, 0.085),
    ("direct", "fully-connected:4", "allreduce"): (0.072, 0.156, 0.106),
    ("rvhd", "fully-connected:4", "allreduce"): (0.052, 0.149, 0.088),
    ("ring", "fully-connected:8", "allreduce"): (0.037, 0.139, 0.032),
    ("double-binary-tree", "fully-connected:8", "allreduce"): (0.067, 0.297, 0.237),
}


@pytest.mark.parametrize("schedule", list(OTHER_SCHEDULES), ids=lambda s: "-".join(s))
def test_schedules_the_model_was_not_fitted_on(refitted, schedule):
    """The table in docs/gpu.md: all six within the 15 % target on run 6; on run 5
    the double binary tree (48 thread blocks) was a miss either way."""
    algo, topo, coll = schedule
    program = lower_algorithm(applicable(load_machine(topo), coll)[algo])
    expected = OTHER_SCHEDULES[schedule]
    for run, model, median in ((6, committed(6), expected[0]), (5, committed(5), expected[1]),
                               (5, refitted[5], expected[2])):  # fmt: skip
        name = f"validate-{algo}-{topo.split(':')[1]}-{coll}-{run}.csv"
        times = val.measured_times(str(MEASURED / name))
        result = val.validate(program, load_machine(load_topology(topo), model), sorted(times),
                              val.recorded_measure(times, name))  # fmt: skip
        assert len(result.rows) == 6
        assert result.median_abs_error == pytest.approx(median, abs=0.001), (run, model.name)
        assert result.within_target or run == 5


def test_a_stream_bound_receive_copies_its_message_out_of_the_slot():
    """One tile sent from rank 0 to rank 1: the receiving block then copies it
    out of its slot, b / rate more than where receives cost nothing."""
    program = cal.sendrecv_program()
    model = load_model(str(MEASURED / "calibrated-4.yaml"))
    loose = without(model, stream_bound=None)
    size = 256 << 10  # one tile
    on = simulate(program, load_machine(load_topology("fully-connected:2"), model), size).time_s
    off = simulate(program, load_machine(load_topology("fully-connected:2"), loose), size).time_s
    assert on - off == pytest.approx(size / model.executor.thread_block_bandwidth_Bps, rel=1e-9)


def test_validate_from_a_measured_csv_needs_no_gpu(tmp_path, capsys):
    ring = tmp_path / "ring.json"
    applicable(load_machine("fully-connected:4"), "allreduce")["ring"].save(ring)
    model = str(MEASURED / "calibrated-4.yaml")
    assert (
        main(["gpu", "validate", str(ring), "--measured", str(MEASURED / "validate-ring-4.csv"), "--model", model]) == 0
    )
    assert "median |error| 5.8% (within the 15% target)" in capsys.readouterr().out
    assert (
        main(["gpu", "validate", str(ring), "--measured", str(MEASURED / "validate-ring-4.csv"), "--size", "3MB"]) == 2
    )
    assert "has no measurement of ring at 3145728 B" in capsys.readouterr().err
    bad = tmp_path / "bad.csv"
    bad.write_text("size_bytes,measured_us\n1024,fast\n")
    assert main(["gpu", "validate", str(ring), "--measured", str(bad)]) == 2
    assert f"{bad}:2: expected a size in bytes and a time in us" in capsys.readouterr().err


def test_samples_naming_an_unknown_benchmark_are_refused(tmp_path):
    path = tmp_path / "samples.csv"
    path.write_text("run,benchmark,kind,size_bytes,time_us,tile_bytes\nx,warp-copy,copy,1024,5.0,524288\n")
    with pytest.raises(ModelError, match=r"samples.csv:2: no benchmark 'warp-copy'"):
        cal.read_samples(str(path))


def test_stream_bound_must_be_a_boolean():
    raw = {"thread_block_bandwidth_Bps": 1e10, "kernel_launch_s": 0.0, "stream_bound": "yes", "source": "test"}
    with pytest.raises(ModelError, match="stream_bound: must be true or false"):
        from simcoll.cost_model import _parse_executor

        _parse_executor(raw, "test.yaml")


def test_measured_times_refuses_a_file_that_is_not_a_validation(tmp_path):
    path = tmp_path / "other.csv"
    path.write_text("a,b\n1,2\n")
    with pytest.raises(SimcollError, match="not a validation CSV"):
        val.measured_times(str(path))

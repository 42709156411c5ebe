"""The simulator against simcoll's interpreter measured on an NVIDIA H200
(benchmarks/measured/h200-2026-11-26/, two calibrations and ring sweeps, six
more schedules in run 1): each committed model simulates the measured sweeps
with the figures of docs/gpu.md, one of them a miss; the two runs' small-size
samples disagree, and fitting both together (``--from-samples A B``) gives a
model within 10 % of every sweep; runs of two GPUs are not fitted together;
a block's writes weighed at 0.78 of a copy (``executor.write_share``, fitted
on the H100) fit this card's sweeps from 4 MB better than reads and writes
alike. No GPU needed: the measurements are files."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
from simcoll.gpu import calibrate as cal
from simcoll.gpu import validate as val

from simcoll import simulate
from simcoll.algorithms import applicable
from simcoll.compiler import lower_algorithm
from simcoll.cost_model import CostModel
from simcoll.errors import ModelError
from simcoll.machines import load_machine, load_model, load_topology
from tests.test_gpu_cli_and_kernel import main

MEASURED = Path(__file__).resolve().parents[1] / "benchmarks" / "measured" / "h200-2026-11-26"


def committed(run: int) -> CostModel:
    return load_model(str(MEASURED / f"calibrated-{run}.yaml"))


def validation(model: CostModel, algo: str, topo: str, coll: str, csv: str) -> val.Validation:
    program = lower_algorithm(applicable(load_machine(topo), coll)[algo])
    times = val.measured_times(str(MEASURED / csv))
    return val.validate(program, load_machine(load_topology(topo), model), sorted(times),
                        val.recorded_measure(times, csv))  # fmt: skip


def ring(model: CostModel, run: int) -> val.Validation:
    return validation(model, "ring", "fully-connected:4", "allreduce", f"validate-ring-{run}.csv")


@pytest.fixture(scope="module")
def pooled(tmp_path_factory) -> CostModel:
    """Both runs' samples fitted together, as docs/gpu.md's command does."""
    path = tmp_path_factory.mktemp("pooled") / "h200.yaml"
    samples = [str(MEASURED / f"calibrate-samples-{n}.csv") for n in (1, 2)]
    assert main(["gpu", "calibrate", "-o", str(path), "--from-samples", *samples]) == 0
    return load_model(str(path))


def assert_same_fit(model: CostModel, expected: CostModel) -> None:
    """Every parameter a calibration fits agrees to 1e-4 (the write share
    is absent from both or present in both)."""
    for value in (
        lambda m: m.executor.thread_block_bandwidth_Bps,
        lambda m: m.executor.kernel_launch_s,
        lambda m: m.executor.signal_latency_s,
        lambda m: m.compute.reduce_launch_s,
        lambda m: m.compute.reduce_bandwidth_Bps,
        lambda m: m.link("nvlink").alpha_s,
        lambda m: m.link("nvlink").bandwidth_Bps,
    ):
        assert value(model) == pytest.approx(value(expected), rel=1e-4)
    share = expected.executor.write_share
    assert model.executor.write_share == (None if share is None else pytest.approx(share, rel=1e-4))


@pytest.mark.parametrize("run", [1, 2])
def test_the_committed_samples_fit_again_to_the_committed_model(tmp_path, run):
    samples, label = cal.read_samples(str(MEASURED / f"calibrate-samples-{run}.csv"))
    assert len(samples) == 69 and "NVIDIA H200" in label
    _, model = cal.write_calibration(samples, str(tmp_path / "refit.yaml"), link_type="nvlink", run=label)
    assert_same_fit(model, committed(run))  # (no relay then: neither has a write share)


@pytest.mark.parametrize(("model_run", "sweep_run", "median"), [(1, 1, 0.202), (1, 2, 0.049), (2, 1, 0.055),
                                                                (2, 2, 0.036)])  # fmt: skip
def test_each_runs_model_on_each_runs_ring(model_run, sweep_run, median):
    """docs/gpu.md's account: run 1's model misses its own sweep (small sizes
    21-25 % slow) and meets run 2's; from 16 MB up every pair is within 3.3 %."""
    result = ring(committed(model_run), sweep_run)
    assert len(result.rows) == 11
    assert result.median_abs_error == pytest.approx(median, abs=0.001)
    assert result.within_target == (median <= 0.15)
    assert all(abs(r.error) < 0.034 for r in result.rows if r.size_bytes >= 16 << 20)


def test_the_two_runs_disagree_below_a_megabyte_not_above_64_mb():
    """Why one run's model can miss: its small-size samples are up to 24 %
    off the other run's, and so is the reduce launch the fit reads from them."""
    first, _ = cal.read_samples(str(MEASURED / "calibrate-samples-1.csv"))
    second, _ = cal.read_samples(str(MEASURED / "calibrate-samples-2.csv"))
    ratios = [(a.size_bytes, b.time_s / a.time_s) for a, b in zip(first, second, strict=True)]
    assert all(a.benchmark.name == b.benchmark.name for a, b in zip(first, second, strict=True))
    assert max(abs(r - 1) for s, r in ratios if s < 1 << 20) > 0.2
    assert all(abs(r - 1) < 0.014 for s, r in ratios if s >= 64 << 20)
    assert committed(1).compute.reduce_launch_s > 2.5 * committed(2).compute.reduce_launch_s


def test_both_runs_fitted_together_simulate_both_rings_within_ten_percent(pooled):
    assert pooled.executor.stream_bound is True
    assert "20:33Z" in pooled.description and "20:40Z" in pooled.description  # both runs named
    assert [round(ring(pooled, run).median_abs_error, 3) for run in (1, 2)] == [0.099, 0.008]


#: Run 1's six other schedules (1 KB-256 MB), median |error| with run 1's
#: model, run 2's and both runs' samples fitted together.
OTHER_SCHEDULES = {
    ("binomial-tree", "fully-connected:4", "broadcast"): (0.080, 0.111, 0.095),
    ("ring", "fully-connected:4", "allgather"): (0.053, 0.069, 0.062),
    ("direct", "fully-connected:4", "allreduce"): (0.133, 0.120, 0.099),
    ("rvhd", "fully-connected:4", "allreduce"): (0.125, 0.066, 0.091),
    ("ring", "fully-connected:8", "allreduce"): (0.111, 0.035, 0.048),
    ("double-binary-tree", "fully-connected:8", "allreduce"): (0.045, 0.116, 0.070),
}


@pytest.mark.parametrize("schedule", list(OTHER_SCHEDULES), ids=lambda s: "-".join(s))
def test_schedules_the_models_were_not_fitted_on(pooled, schedule):
    algo, topo, coll = schedule
    csv = f"validate-{algo}-{topo.split(':')[1]}-{coll}-1.csv"
    for model, median in zip((committed(1), committed(2), pooled), OTHER_SCHEDULES[schedule], strict=True):
        result = validation(model, algo, topo, coll, csv)
        assert len(result.rows) == 6
        assert result.median_abs_error == pytest.approx(median, abs=0.001), model.name
        assert result.within_target


def test_from_samples_refuses_a_missing_second_file(tmp_path, capsys):
    first = str(MEASURED / "calibrate-samples-1.csv")
    missing = str(tmp_path / "nope.csv")
    assert main(["gpu", "calibrate", "-o", str(tmp_path / "m.yaml"), "--from-samples", first, missing]) == 2
    assert "nope.csv" in capsys.readouterr().err
    assert not (tmp_path / "m.yaml").exists()


def test_samples_of_two_gpus_are_not_fitted_together(tmp_path, capsys):
    """An H100 run and an H200 run pooled would describe neither GPU."""
    h100 = str(MEASURED.parent / "h100-2026-11-26" / "calibrate-samples-6.csv")
    h200 = str(MEASURED / "calibrate-samples-1.csv")
    with pytest.raises(ModelError, match=r"samples of different GPUs: NVIDIA H100 80GB HBM3 .*NVIDIA H200"):
        cal.read_sample_files([h100, h200])
    assert main(["gpu", "calibrate", "-o", str(tmp_path / "m.yaml"), "--from-samples", h100, h200]) == 2
    assert "fit each GPU's runs on their own" in capsys.readouterr().err
    assert not (tmp_path / "m.yaml").exists()
    samples, runs = cal.read_sample_files([h200, h200])  # one run twice: named once
    assert len(samples) == 138 and runs.count("NVIDIA H200") == 1


SEVEN = [("ring", "fully-connected:4", "allreduce"), *OTHER_SCHEDULES]


def _rms_ln_error_from_4mb(directory: Path, model: CostModel, run: str) -> float:
    errors = []
    for algo, topo, coll in SEVEN:
        name = "ring" if (algo, topo, coll) == SEVEN[0] else f"{algo}-{topo.split(':')[1]}-{coll}"
        csv = f"validate-{name}-{run}.csv"
        program = lower_algorithm(applicable(load_machine(topo), coll)[algo])
        times = val.measured_times(str(directory / csv))
        result = val.validate(program, load_machine(load_topology(topo), model), sorted(times),
                              val.recorded_measure(times, csv))  # fmt: skip
        errors += [math.log(r.simulated_s / r.measured_s) for r in result.rows if r.size_bytes >= 4 << 20]
    return math.sqrt(sum(e * e for e in errors) / len(errors))


def with_write_share(model: CostModel, share: float) -> CostModel:
    return dataclasses.replace(model, executor=dataclasses.replace(model.executor, write_share=share))


def test_a_blocks_writes_weigh_more_than_its_reads():
    """``executor.write_share`` 0.78 - fitted to H100 run 6's seven sweeps
    from 4 MB, where it is the best of 0.70-0.90 by 0.01 - takes their rms
    ln error from 8.0 to 4.2 %, and on this H200 (not fitted), with either
    run's model, from 9.0 / 7.6 to 4.5 / 3.4 %: Broadcast and Allgather,
    which write twice what they read, were the slow ones."""
    h100 = MEASURED.parent / "h100-2026-11-26"
    h100_model = load_model(str(h100 / "calibrated-6.yaml"))
    cases = [(h100, h100_model, "6", 0.080, 0.042), (MEASURED, committed(1), "1", 0.090, 0.045),
             (MEASURED, committed(2), "1", 0.076, 0.034)]  # fmt: skip
    for directory, model, run, even, weighted in cases:
        assert _rms_ln_error_from_4mb(directory, model, run) == pytest.approx(even, abs=0.001)
        assert _rms_ln_error_from_4mb(directory, with_write_share(model, 0.78), run) == pytest.approx(
            weighted, abs=0.001
        )
    # 0.5 is the rule without the share, bit for bit
    ring = lower_algorithm(applicable(load_machine("fully-connected:4"), "allreduce")["ring"])
    machine = load_machine(load_topology("fully-connected:4"), h100_model)
    even_machine = load_machine(load_topology("fully-connected:4"), with_write_share(h100_model, 0.5))
    assert simulate(ring, machine, 64 << 20).time_s == simulate(ring, even_machine, 64 << 20).time_s


def test_write_share_is_written_read_and_checked(tmp_path):
    from simcoll.cost_model import model_from_dict, save_model

    model = with_write_share(committed(2), 0.78)
    save_model(model, tmp_path / "m.yaml")
    assert load_model(str(tmp_path / "m.yaml")).executor.write_share == 0.78
    assert committed(2).executor.write_share is None  # models fitted before it: reads and writes alike
    data = {"name": "x", "links": {"nvlink": {"alpha_s": 1e-6, "bandwidth_Bps": 1e10, "source": "t"}},
            "executor": {"thread_block_bandwidth_Bps": 1e10, "kernel_launch_s": 1e-6, "write_share": 1.2,
                         "source": "t"}}  # fmt: skip
    with pytest.raises(ModelError, match=r"executor\.write_share: must lie in \(0, 1\), got 1\.2"):
        model_from_dict(data)


# --- a second machine start on 2026-11-27: two calibration passes fitted together, with the relay ---

SECOND = MEASURED.parent / "h200-2026-11-27"
SECOND_SAMPLES = [SECOND / f"calibrate-samples-{n}.csv" for n in (1, 2)]


def second_day(model: CostModel, algo: str, topo: str, coll: str) -> val.Validation:
    name = "ring" if (algo, topo, coll) == SEVEN[0] else f"{algo}-{topo.split(':')[1]}-{coll}"
    return validation(model, algo, topo, coll, str(SECOND / f"validate-{name}.csv"))


def fitted(tmp_path: Path, paths: list[Path]) -> CostModel:
    samples, runs = cal.read_sample_files([str(p) for p in paths])
    _, model = cal.write_calibration(samples, str(tmp_path / "fit.yaml"), link_type="nvlink", run=runs)
    return model


def test_the_second_days_two_passes_fit_again_to_its_committed_model(tmp_path):
    committed_model = load_model(str(SECOND / "calibrated.yaml"))
    assert_same_fit(fitted(tmp_path, SECOND_SAMPLES), committed_model)
    assert "18:55Z" in committed_model.description and "18:57Z" in committed_model.description


#: Median |error| of the second day's model on its own seven sweeps (README of h200-2026-11-27).
SECOND_DAY_MEDIANS = {
    ("ring", "fully-connected:4", "allreduce"): 0.035,
    ("binomial-tree", "fully-connected:4", "broadcast"): 0.022,
    ("ring", "fully-connected:4", "allgather"): 0.037,
    ("direct", "fully-connected:4", "allreduce"): 0.086,
    ("rvhd", "fully-connected:4", "allreduce"): 0.048,
    ("ring", "fully-connected:8", "allreduce"): 0.030,
    ("double-binary-tree", "fully-connected:8", "allreduce"): 0.186,
}


@pytest.mark.parametrize("schedule", SEVEN, ids=lambda s: "-".join(s))
def test_the_second_days_model_on_its_seven_sweeps(schedule):
    """Six of seven within the 15 % target; the double binary tree of eight
    ranks is the miss, 28-34 % fast up to 256 KB and within 9 % from 4 MB."""
    result = second_day(load_model(str(SECOND / "calibrated.yaml")), *schedule)
    assert result.median_abs_error == pytest.approx(SECOND_DAY_MEDIANS[schedule], abs=0.001)
    assert result.within_target == (schedule[0] != "double-binary-tree")
    if schedule[0] == "double-binary-tree":
        assert all(-0.35 < r.error < -0.28 for r in result.rows if r.size_bytes <= 256 << 10)
        assert all(abs(r.error) < 0.09 for r in result.rows if r.size_bytes >= 4 << 20)


def test_the_measured_write_share_agrees_with_the_h100s_and_fits_the_sweeps():
    """The relay measured a write at 0.758 of a copy (the H100's seven sweeps
    gave 0.78); with it the second day's seven sweeps from 4 MB have rms ln
    error 3.2 % instead of 7.5 % with reads and writes alike."""
    model = load_model(str(SECOND / "calibrated.yaml"))
    assert model.executor.write_share == pytest.approx(0.758, abs=0.001)

    def rms(m: CostModel) -> float:
        errors = [math.log(r.simulated_s / r.measured_s) for s in SEVEN for r in second_day(m, *s).rows
                  if r.size_bytes >= 4 << 20]  # fmt: skip
        return math.sqrt(sum(e * e for e in errors) / len(errors))

    assert rms(model) == pytest.approx(0.032, abs=0.001)
    assert rms(with_write_share(model, 0.5)) == pytest.approx(0.075, abs=0.001)


def test_four_passes_on_two_days_fitted_together_meet_every_sweep(tmp_path):
    """The two days' four calibration passes fitted together simulate all
    fifteen sweeps of both days within 13 %, the double binary tree
    included (12.8 / 12.0 %): the reduce launch the small sizes need lies
    between the two days' fits."""
    both = fitted(tmp_path, [MEASURED / "calibrate-samples-1.csv", MEASURED / "calibrate-samples-2.csv",
                             *SECOND_SAMPLES])  # fmt: skip
    medians = [ring(both, 1).median_abs_error, ring(both, 2).median_abs_error]
    for schedule in SEVEN:
        medians.append(second_day(both, *schedule).median_abs_error)
        if schedule != SEVEN[0]:
            algo, topo, coll = schedule
            csv = f"validate-{algo}-{topo.split(':')[1]}-{coll}-1.csv"
            medians.append(validation(both, algo, topo, coll, csv).median_abs_error)
    assert len(medians) == 15
    assert max(medians) == pytest.approx(0.128, abs=0.001)
    assert both.executor.write_share == pytest.approx(0.749, abs=0.001)  # from the second day's relays only


def test_the_reduce_launch_is_what_the_days_disagree_on(tmp_path):
    """Why the second day's model misses the tree: the reduce launch is read
    from reduce less copy at the smallest sizes, a few µs that moved by 6 µs
    between passes (5.1, 2.5, 2.4, -1.4 µs at 1 KB); the second day fitted
    0.09 µs, the first 2.16, all four 1.23, and the tree's small sizes - ten
    reductions on the critical path - follow it."""

    def reduce_less_copy_us(path: Path) -> float:
        samples, _ = cal.read_samples(str(path))
        at = {(s.benchmark.kind, s.size_bytes): s.time_s for s in samples}
        return 1e6 * (at["reduce", 1024] - at["copy", 1024])

    files = [MEASURED / "calibrate-samples-1.csv", MEASURED / "calibrate-samples-2.csv", *SECOND_SAMPLES]
    assert [round(reduce_less_copy_us(f), 1) for f in files] == [5.1, 2.5, 2.4, -1.4]
    first = fitted(tmp_path, files[:2])
    second = load_model(str(SECOND / "calibrated.yaml"))
    both = fitted(tmp_path, files)
    launches = [m.compute.reduce_launch_s * 1e6 for m in (second, both, first)]
    assert [round(x, 2) for x in launches] == [0.09, 1.23, 2.16]
    tree = [second_day(m, *SEVEN[-1]).median_abs_error for m in (second, both, first)]
    assert tree[0] > tree[1] > tree[2]

"""Calibration from nccl-tests logs (simcoll.calibration.calibrate): recover
known parameters from synthetic logs our own simulator writes, validate a
real log when ../shared is there, and reject bad logs with one line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simcoll.calibration.calibrate import (
    CalibrationError,
    calibrate,
    error_summary,
    geometric_mean_error,
    samples_of,
    simulate_samples,
    validate,
)
from simcoll.calibration.nccl_tests import bus_factor, parse_nccl_tests
from simcoll.errors import SimcollError
from simcoll.machines import Machine, load_machine

MEASUREMENTS = Path(__file__).resolve().parents[2] / "shared" / "reference" / "measurements"
SIZES = [1 << k for k in range(10, 27, 2)]  # 1 KB .. 64 MB


def _log_text(times_us: dict[int, float], num_ranks: int) -> str:
    """An all_reduce_perf table as nccl-tests prints it."""
    lines = [
        "# nThread 1 nGpus 1 minBytes 1024 maxBytes 67108864 step: 4(factor) warmup iters: 5 iters: 20",
        *(f"#  Rank {r:2d} Group  0 Pid  100 on     host0 device  {r} [0x00] Test GPU" for r in range(num_ranks)),
        "#                                                              out-of-place                       in-place",
        "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)",
    ]
    factor = bus_factor("allreduce", num_ranks)
    for size, t in times_us.items():
        algbw = size / t / 1e3
        cols = f"{t:8.2f} {algbw:7.2f} {algbw * factor:7.2f}      0"
        lines.append(f"{size:12d} {size // 4:13d}     float     sum      -1 {cols} {cols}")
    lines.append("# Avg bus bandwidth    : 1.0")
    return "\n".join(lines) + "\n"


def _synthetic(machine: Machine, model) -> str:
    """The times our simulator gives with ``model``, written as an nccl-tests log."""
    probe = parse_nccl_tests(_log_text({s: 1.0 for s in SIZES}, machine.num_ranks), path="all_reduce_perf.log")
    samples = samples_of(probe, machine)
    times = simulate_samples(samples, machine, model)
    return _log_text({s.size_bytes: t * 1e6 for s, t in zip(samples, times, strict=True)}, machine.num_ranks)


def test_recovers_known_link_parameters_from_a_synthetic_log(tmp_path):
    machine = load_machine("fully-connected:4")
    truth = machine.model.with_link("nvlink", bandwidth_Bps=0.6 * machine.model.link("nvlink").bandwidth_Bps)
    truth = truth.with_link("nvlink", alpha_s=3 * machine.model.link("nvlink").alpha_s + 1e-6)
    path = tmp_path / "all_reduce_perf.log"
    path.write_text(_synthetic(machine, truth))
    params = ["links.nvlink.bandwidth_Bps", "links.nvlink.alpha_s"]
    model, report = calibrate([path], machine, parameters=params)
    assert model.link("nvlink").bandwidth_Bps == pytest.approx(truth.link("nvlink").bandwidth_Bps, rel=0.02)
    assert model.link("nvlink").alpha_s == pytest.approx(truth.link("nvlink").alpha_s, rel=0.05)
    assert report.fit["max_relative_error"] < 0.02
    assert report.at_bound == {}  # both determined by the log
    assert "all_reduce_perf.log" in model.link("nvlink").source  # the source cites the log
    errors = error_summary(validate(path, machine, model))
    assert errors["large"] < 0.02 and errors["small"] < 0.02
    # the shipped model is visibly off on the same log: the fit did the work
    assert error_summary(validate(path, machine))["large"] > 0.2


def test_geometric_mean_error():
    assert geometric_mean_error([1.0, 1.0]) == 0
    assert geometric_mean_error([1.1, 1 / 1.1]) == pytest.approx(0.1)


def test_the_fit_judges_an_iterate_by_its_worse_acceptance_band():
    """An iterate that halves the large sizes' error by tripling the small
    ones' is worse, as the targets (per band) judge it; sizes between the
    bands do not count unless there are no others."""
    from simcoll.calibration.calibrate import _fit_error

    sizes = np.array([1 << 10, 64 << 10, 1 << 24, 64 << 20, 1 << 30])
    measured = np.ones(5)
    before = np.array([1.1, 1.1, 2.0, 1.2, 1.2])
    after = np.array([1.3, 1.3, 1.0, 1.1, 1.1])
    assert _fit_error(before, measured, sizes) == pytest.approx(0.2)
    assert _fit_error(after, measured, sizes) == pytest.approx(0.3)
    middle = np.array([1 << 20, 1 << 24])
    assert _fit_error(np.array([1.1, 1.3]), np.ones(2), middle) == pytest.approx(geometric_mean_error([1.1, 1.3]))


def test_rank_count_must_match_the_topology(tmp_path):
    path = tmp_path / "all_reduce_perf.log"
    path.write_text(_log_text({1024: 10.0, 2048: 11.0}, 8))
    with pytest.raises(CalibrationError, match="8 ranks but topology fully-connected:4 has 4"):
        validate(path, "fully-connected:4")


@pytest.mark.parametrize(
    "text, message",
    [
        (_log_text({}, 4), "no rows"),
        (_log_text({1024: 10.0}, 8), "8 ranks but topology"),
        (
            _log_text({1024: 10.0}, 4).replace("# nThread", "# Collective test starting: gather_perf\n# nThread"),
            "gather has no NCCL algorithm",
        ),
    ],
)
def test_bad_logs_exit_2_with_one_line(tmp_path, capsys, text, message):
    from simcoll.cli import main

    path = tmp_path / "all_reduce_perf.log"
    path.write_text(text)
    assert main(["validate", "--nccl-tests", str(path), "-t", "fully-connected:4"]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_cli_calibrate_writes_a_model(tmp_path, capsys):
    from simcoll.cli import main
    from simcoll.machines import load_model

    machine = load_machine("fully-connected:4")
    truth = machine.model.with_link("nvlink", bandwidth_Bps=0.5 * machine.model.link("nvlink").bandwidth_Bps)
    log = tmp_path / "all_reduce_perf.log"
    log.write_text(_synthetic(machine, truth))
    out = tmp_path / "fitted.yaml"
    args = ["calibrate", "--nccl-tests", str(log), "-t", "fully-connected:4", "-o", str(out)]
    assert main([*args, "--params", "links.nvlink.bandwidth_Bps"]) == 0
    fitted = load_model(str(out))
    assert fitted.link("nvlink").bandwidth_Bps == pytest.approx(truth.link("nvlink").bandwidth_Bps, rel=0.02)
    assert main(["validate", "--nccl-tests", str(log), "-t", "fully-connected:4", "-m", str(out)]) == 0
    assert "geometric-mean error, >= 64 MB" in capsys.readouterr().out


@pytest.mark.skipif(not MEASUREMENTS.is_dir(), reason="needs ../shared/reference/measurements")
def test_real_a100_log_validates_against_the_shipped_model():
    log = MEASUREMENTS / "a100-sxm4-40gb-x8_all_reduce_superbench.log"
    frame = validate(log, "dgx-a100")
    assert len(frame) >= 25 and set(frame.columns) >= {"size_bytes", "measured_busbw_GBps", "ratio"}
    # the shipped model's large-message busbw is within a factor 1.5 of the measured one
    big = frame[frame.size_bytes >= 64 << 20]
    assert big.ratio.between(1 / 1.5, 1.5).all()


@pytest.mark.skipif(not MEASUREMENTS.is_dir(), reason="needs ../shared/reference/measurements")
def test_fit_converges_on_a_real_log_with_coupled_parameters():
    """On the V100 DGX-1 log every protocol's efficiency and latency and the
    NVLink efficiency are fitted together (the link and protocol efficiencies
    multiply); the fit must reach the acceptance figures at both ends, and the
    NVLink efficiency it finds must be the measured NVLink2 rate (TACCL Table 1:
    21.7 of 25 GB/s), not a bound."""
    log = MEASUREMENTS / "v100-sxm2-16gb-x8_all_reduce_konnase.log"
    model, report = calibrate([log], "dgx1")
    errors = error_summary(validate(log, "dgx1", model))
    assert errors["large"] <= 0.15 and errors["small"] <= 0.25
    assert 0.8 < model.link("nvlink").efficiency < 0.95
    assert report.fit["band_refinement_moves"] == 0  # least squares met both targets: nothing to refine


@pytest.mark.skipif(not MEASUREMENTS.is_dir(), reason="needs ../shared/reference/measurements")
def test_calibration_never_trades_one_band_past_its_target_for_the_other():
    """MI250X x 32 all_reduce (RCCL, Frontier): the shipped model is 14.5 % off
    from 64 MB up and 4.5 % at 64 KB; the fit's lowest mean error over all
    sizes had been 14.3 % / 27.3 %, a miss at 64 KB. Judged by the worse band,
    calibration keeps both within the targets."""
    log = MEASUREMENTS / "mi250x-x8-n4_all_reduce_rccl1490.log"
    model, _ = calibrate([log], "frontier*4")
    errors = error_summary(validate(log, "frontier*4", model))
    assert errors["large"] <= 0.15 and errors["small"] <= 0.25


@pytest.mark.parametrize("command", ["validate", "calibrate"])
@pytest.mark.parametrize(
    "edit, topology, message",
    [
        (lambda text: text[: text.index("  65536 ") + 30], "fully-connected:4", "truncated table?"),
        (lambda text: text, "fully-connected:8", "the log has 4 ranks but topology fully-connected:8 has 8"),
        (lambda text: "# Env: NCCL_ALGO=NVLS\n" + text, "fully-connected:4", "the log sets NCCL_ALGO=NVLS"),
    ],
    ids=["truncated", "rank-count", "algorithm-not-on-topology"],
)
def test_bad_logs_give_one_line_from_validate_and_calibrate(tmp_path, capsys, command, edit, topology, message):
    from simcoll.cli import main

    path = tmp_path / "all_reduce_perf.log"
    path.write_text(edit(_log_text({s: 10.0 + s / 1e4 for s in SIZES}, 4)))
    args = [command, "--nccl-tests", str(path), "-t", topology]
    if command == "calibrate":
        args += ["-o", str(tmp_path / "out.yaml")]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not (tmp_path / "out.yaml").exists()


def test_a_log_with_collnet_enabled_runs_collnet_on_a_sharp_fabric():
    """A run with NCCL_COLLNET_ENABLE=1 on a fabric whose IB switches reduce
    (SHARP) is simulated with CollNet where NCCL's tuner prefers it; the same
    log without the variable never uses CollNet."""
    sizes = {1 << 20: 100.0, 1 << 26: 1000.0, 1 << 30: 10000.0}
    text = _log_text(sizes, 16)
    machine = load_machine("dgx-a100*2/fat-tree:sharp=on")
    enabled = parse_nccl_tests("# Env: NCCL_COLLNET_ENABLE=1\n" + text, path="all_reduce_perf.log")
    default = parse_nccl_tests(text, path="all_reduce_perf.log")
    assert any(s.choice.startswith("collnet") for s in samples_of(enabled, machine))
    assert not any(s.choice.startswith("collnet") for s in samples_of(default, machine))


def test_a_size_range_keeps_only_the_rows_a_user_trusts(tmp_path, capsys):
    """Rows outside --size-range are neither fitted nor validated: a fit on a
    log whose small rows are garbage recovers the link speed from the rest."""
    from simcoll.cli import main

    machine = load_machine("fully-connected:4")
    truth = machine.model.with_link("nvlink", bandwidth_Bps=0.5 * machine.model.link("nvlink").bandwidth_Bps)
    good = parse_nccl_tests(_synthetic(machine, truth), path="all_reduce_perf.log")
    times = {r.size_bytes: r.time_us * (50.0 if r.size_bytes < 1 << 20 else 1.0) for r in good.rows}
    log = tmp_path / "all_reduce_perf.log"
    log.write_text(_log_text(times, 4))  # sizes below 1 MB 50x too slow (a noisy system)
    kept = validate(log, machine, truth, size_range=(1 << 20, None))
    assert kept.size_bytes.min() >= 1 << 20 and kept.ratio.to_numpy() == pytest.approx(1.0, rel=0.02)
    fitted, _ = calibrate([log], machine, parameters=["links.nvlink.bandwidth_Bps"], size_range=(1 << 20, None))
    assert fitted.link("nvlink").bandwidth_Bps == pytest.approx(truth.link("nvlink").bandwidth_Bps, rel=0.02)
    args = ["validate", "--nccl-tests", str(log), "-t", "fully-connected:4"]
    assert main([*args, "--size-range", "1MB:16MB"]) == 0
    table = capsys.readouterr().out
    assert "     1MB" in table and "    16MB" in table and "64KB" not in table and "    64MB" not in table
    for bounds in (("1MB", None), (-1, None), (1 << 20,)):
        with pytest.raises(SimcollError):
            validate(log, machine, truth, size_range=bounds)
    for bad, message in (
        ("16MB:1MB", "lower size is above"),
        ("1MB", "expected LO:HI"),
        ("8GB:", "no size of the log"),
    ):
        assert main([*args, "--size-range", bad]) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1


@pytest.mark.skipif(not MEASUREMENTS.is_dir(), reason="needs ../shared/reference/measurements")
def test_the_a3_mega_log_is_simulated_under_its_tcpxo_nccl_profile():
    """The A3 Mega log does not print its NCCL variables; its recipe sources
    Google's GPUDirect-TCPXO profile (NCCL_PROTO=Simple, NCCL_ALGO=Ring,Tree),
    which the shipped model carries. Every size is simulated as NCCL ran it,
    with Simple (the LL the free tuner picked left the ~120 us floor 192 % off).
    NCCL's tree moves each channel's share in 1 MiB buffer steps at a thread
    block's rate (``simcoll.nccl.pipeline.tree_pipeline``): with that pipeline
    the sizes from 64 MB up are within 3 % (30.5 % before it). The run
    launched one process per GPU (mpirun), so its calls pay no thread-mode
    launch cost: the ~35 us still missing at small sizes (90 us simulated, 123-130
    measured) are TCPXO's per-message cost, which the model's network α (an
    InfiniBand value) lacks."""
    log = MEASUREMENTS / "h100-80gb-x8-n2_all_reduce_a3mega.log"
    frame = validate(log, "a3-mega*2")
    assert frame.choice.str.match(r"^(ring|tree)/Simple/").all()
    errors = error_summary(frame)
    assert errors["large"] == pytest.approx(0.023, abs=0.002) and errors["small"] == pytest.approx(0.376, abs=0.002)
    assert (frame[frame.size_bytes <= 4096].simulated_time_us < frame[frame.size_bytes <= 4096].measured_time_us).all()


@pytest.mark.skipif(not MEASUREMENTS.is_dir(), reason="needs ../shared/reference/measurements")
def test_a_fit_that_leaves_a_band_outside_its_target_is_refined_on_the_bands():
    """2-node GH200 over Slingshot (CSCS): least squares over all sizes leaves
    a band outside its target (the shipped model is 32 % off at <= 64 KB). The
    coordinate search on the two bands moves the same physical parameters
    until both are within target."""
    log = MEASUREMENTS / "gh200-x4-n2_all_reduce_cscs.log"
    assert error_summary(validate(log, "alps-gh200*2"))["small"] > 0.25
    model, report = calibrate([log], "alps-gh200*2")
    errors = error_summary(validate(log, "alps-gh200*2", model))
    assert errors["large"] <= 0.15 and errors["small"] <= 0.25
    assert report.fit["band_refinement_moves"] > 0
    assert "coordinate-search moves on the two acceptance bands" in model.link("slingshot").source


@pytest.mark.skipif(not MEASUREMENTS.is_dir(), reason="needs ../shared/reference/measurements")
def test_the_sharp_log_calibrates_within_the_targets_with_collnet_timed_as_nccls_steps():
    """4 x 8 A100 over IB SHARP (CoreWeave, NCCL_COLLNET_ENABLE=1): busbw ramps
    from 55 GB/s at 8 MB to 93 at 64 MB and 116 at 8 GB. CollNet Direct timed
    with NCCL's steps (24 channels x 8 heads x a chunk of 32-256 KiB, through
    four stages) has that ramp; with the schedule's own pieces, saturated by
    32 MB, the fit had stayed 42 % off from 64 MB up."""
    log = MEASUREMENTS / "a100-sxm4-80gb-x8-n4_all_reduce_sharp_coreweave.log"
    machine = "dgx-a100*4/fat-tree:sharp=on"
    model, _ = calibrate([log], machine)
    frame = validate(log, machine, model)
    assert frame[frame.size_bytes >= 64 << 10].choice.str.startswith("collnet_direct/Simple/").all()
    errors = error_summary(frame)
    assert errors["large"] <= 0.15 and errors["small"] <= 0.25


@pytest.mark.skipif(not MEASUREMENTS.is_dir(), reason="needs ../shared/reference/measurements")
@pytest.mark.parametrize(
    "name, topology",
    [
        ("l40s-x2_all_reduce_ring_cs244c.log", "l40s-pcie[0,1]"),  # two GPUs of the 4-GPU node
        ("l40s-x1-n2_all_reduce_socket_nvidiatools.log", "l40s-socket*2"),  # NCCL's TCP sockets
    ],
)
def test_l40s_logs_on_two_gpus_and_over_sockets_calibrate_within_the_targets(name, topology):
    log = MEASUREMENTS / name
    model, _ = calibrate([log], topology)
    errors = error_summary(validate(log, topology, model))
    assert errors["large"] <= 0.15 and errors["small"] <= 0.25


@pytest.mark.skipif(not MEASUREMENTS.is_dir(), reason="needs ../shared/reference/measurements")
def test_a_log_run_with_nccl_min_ctas_runs_nvls_tree_on_that_many_channels():
    """nccl-tests#309's 8-node run with NCCL_MIN_CTAS=24: NCCL clamps its 16
    NVLS channels up to 24 (transport/nvls.cc), and so does the baseline
    simulated for the log."""
    from simcoll.calibration.calibrate import load_log, samples_of
    from simcoll.machines import as_machine

    machine = as_machine("dgx-h100*8")
    log = load_log(MEASUREMENTS / "h100-x8-n8_all_reduce_minctas24_nccltests309-gjaion.log", machine)
    choices = {s.size_bytes: s.choice for s in samples_of(log, machine)}
    assert choices[1 << 30] == "nvls_tree/Simple/24ch"


def test_a_log_of_other_gpus_is_refused_unless_forced():
    # issue 52: an A100 log validated against a DGX-1 gave 49 % error with no word that the GPUs differ
    machine = load_machine("dgx1")
    text = "# Machine: NVIDIA A100-SXM4-40GB, 8 GPUs per node, 1 node, total ranks n=8\n"
    text += _log_text({s: 10.0 for s in SIZES}, 8)
    log = parse_nccl_tests(text, path="all_reduce_a100.log")
    assert log.machine == "NVIDIA A100-SXM4-40GB"
    with pytest.raises(
        CalibrationError, match=r"all_reduce_a100.log: the log's GPUs \(NVIDIA A100-SXM4-40GB\) are not dgx1's"
    ):
        validate(log, machine)
    with pytest.warns(UserWarning, match="are not dgx1's"):
        assert len(validate(log, machine, force=True)) == len(SIZES)
    v100 = parse_nccl_tests(text.replace("A100-SXM4-40GB", "Tesla V100-SXM2-16GB"), path="all_reduce_v100.log")
    assert len(validate(v100, machine)) == len(SIZES)  # the machine's own GPUs: no word
    a800 = parse_nccl_tests(text.replace("A100-SXM4-40GB", "A800-SXM4-80GB"), path="all_reduce_a800.log")
    assert len(validate(a800, load_machine("dgx-a100"))) == len(SIZES)  # the same family


def test_a_parameter_the_logs_do_not_determine_is_flagged(tmp_path):
    # issue 52: fits came out at 5e-22 s with no word; a latency the synthetic log has none of
    # (the truth's alpha is 0, the range's lower end) is flagged, the bandwidth is not
    machine = load_machine("fully-connected:4")
    truth = machine.model.with_link("nvlink", alpha_s=0.0)
    path = tmp_path / "all_reduce_perf.log"
    path.write_text(_synthetic(machine, truth))
    _, report = calibrate([path], machine, parameters=["links.nvlink.bandwidth_Bps", "links.nvlink.alpha_s"])
    assert report.at_bound == {"links.nvlink.alpha_s": "lower"}
    assert any("links.nvlink.alpha_s" in line and "at its lower bound" in line for line in report.lines())

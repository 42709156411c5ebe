"""simcoll gpu calibrate without a GPU: the microbenchmark Programs run on the
NumPy executor and the host-thread core; the fit recovers known parameters
from synthetic noisy timings; the model it writes names the run and the
residuals, loads, and simulates the benchmarks at the fitted times."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import simcoll.gpu
from simcoll.gpu import calibrate as cal
from simcoll.gpu import host
from simcoll.gpu.table import to_table

from simcoll import load_machine, load_model, simulate
from simcoll.cost_model import LinkParams
from simcoll.errors import ModelError
from simcoll.machines import load_topology
from simcoll.verify import check
from tests.test_gpu_cli_and_kernel import main

TRUTH = {"launch_s": 4e-6, "alpha_s": 1.2e-6, "link_Bps": 40e9, "tb_Bps": 25e9, "reduce_launch_s": 0.3e-6,
         "reduce_Bps": 200e9, "ll_efficiency": 0.45, "signal_latency_s": 0.9e-6}  # fmt: skip


def synthetic(noise=0.02, seed=0, **changes):
    truth = {**TRUTH, **changes}
    benches = cal.microbenchmarks()
    skeleton = [cal.Sample(b, s, 1.0) for b in benches for s in b.sizes]
    times = cal.predict_times(skeleton, truth) * (1 + np.random.default_rng(seed).normal(0, noise, len(skeleton)))
    return [cal.Sample(s.benchmark, s.size_bytes, float(t)) for s, t in zip(skeleton, times, strict=True)]


def test_microbenchmarks_verify_and_run_bit_identically_on_host_threads():
    topo = load_topology("fully-connected:2")
    benches = cal.microbenchmarks(sizes=(1024, 96 * 1024), tile_bytes=16 * 1024)
    assert {b.kind for b in benches} == set(cal.KINDS)
    for b in benches:
        assert check(b.program, load_machine(topo)) == [], b.name
        for size in b.sizes:
            result = host.check_table(to_table(b.program), size, "float32")
            assert result.ok, (b.name, size, result)
    serial = next(b for b in benches if b.name.startswith("serial"))
    assert serial.messages_per_tile == 8 and serial.program.instruction_counts()["send"] == 8
    assert next(b for b in benches if b.kind == "ll").program.protocol == "LL"


def test_copy_program_splits_the_copy_over_its_executors():
    prog = cal.copy_program(5)
    assert [len(r.executors) for r in prog.ranks] == [5, 0]
    assert check(prog, load_machine(load_topology("fully-connected:2"))) == []
    assert host.check_table(to_table(prog), 5 * 4096, "float32").ok
    with pytest.raises(ModelError, match="at least one executor"):
        cal.copy_program(0)


def test_default_sweep_spans_1KB_to_1GB():
    sweep = next(b for b in cal.microbenchmarks() if b.name == "sendrecv").sizes
    assert sweep[0] == 1 << 10 and sweep[-1] == 1 << 30


def test_fit_recovers_known_parameters_from_noisy_timings():
    result = cal.fit_calibration(synthetic())
    assert result.fit.success
    tolerances = {"launch_s": 0.05, "alpha_s": 0.1, "link_Bps": 0.02, "tb_Bps": 0.02, "reduce_launch_s": 0.25,
                  "reduce_Bps": 0.25, "ll_efficiency": 0.03, "signal_latency_s": 0.15}  # fmt: skip
    for name, tol in tolerances.items():
        assert result.params[name] == pytest.approx(TRUTH[name], rel=tol), name
    # the ping-pong measures a one-way trip, α + signal, directly; the signal latency is what is left after α
    trip = result.params["alpha_s"] + result.params["signal_latency_s"]
    assert trip == pytest.approx(TRUTH["alpha_s"] + TRUTH["signal_latency_s"], rel=0.03)
    assert result.fit.median_relative_error < 0.02
    assert set(result.linear) == {"copy", "sendrecv", "ll", "reduce", "pingpong"}


def test_fit_refuses_missing_benchmark_kinds():
    samples = [s for s in synthetic() if s.benchmark.kind != "copy"]
    with pytest.raises(ModelError, match="none of: copy"):
        cal.fit_calibration(samples)


def test_written_model_names_run_and_residuals_loads_and_simulates(tmp_path):
    path = tmp_path / "box.yaml"
    run = "devices 0 (test GPU), 2026-01-01T00:00Z"
    result, model = cal.write_calibration(synthetic(noise=0.01), str(path), link_type="nvlink", run=run,
                                          base=load_model("dgx-a100"))  # fmt: skip
    loaded = load_model(str(path))
    assert loaded == model and loaded.name == "box"
    assert run in loaded.link("nvlink").source and "median |residual|" in loaded.link("nvlink").source
    assert run in loaded.executor.source and run in loaded.compute.source and run in loaded.protocol_sources["LL"]
    assert loaded.link("ib") == load_model("dgx-a100").link("ib")  # base parameters kept
    assert loaded.protocol_efficiency["LL"] == pytest.approx(TRUTH["ll_efficiency"], rel=0.03)
    assert loaded.executor.signal_latency_s == pytest.approx(TRUTH["signal_latency_s"], rel=0.05)
    # the simulator reproduces the fitted send/recv, LL and ping-pong times: the fit's time model is Program mode's
    machine = load_machine("fully-connected:2", str(path))
    for b in cal.microbenchmarks():
        if b.kind not in ("sendrecv", "ll", "pingpong"):
            continue
        for size in b.sizes[::2]:
            predicted = cal.predict_times([cal.Sample(b, size, 1.0)], result.params)[0]
            assert simulate(b.program, machine, size).time_s == pytest.approx(predicted, rel=1e-6), (b.name, size)


def test_measure_runs_every_benchmark_size_and_refuses_wrong_results():
    from simcoll.gpu.runner import GpuRunResult

    benches = cal.microbenchmarks(sizes=(1024, 4096))
    calls = []

    def fake(program, size, devices, iters):
        calls.append((program.name, size, tuple(devices), iters))
        return GpuRunResult(program.name, size, "float32", tuple(devices), (1e-5, 2e-5, 3e-5), verified=True)

    samples = cal.measure(benches, [0], iters=3, runner=fake)
    assert len(samples) == sum(len(b.sizes) for b in benches) == len(calls)
    assert all(s.time_s == 2e-5 for s in samples)

    def wrong(program, size, devices, iters):
        return GpuRunResult(program.name, size, "float32", (0,), (1e-5,), verified=False, problems=["rank 1 buffer 1"])

    with pytest.raises(ModelError, match="wrong result"):
        cal.measure(benches[:1], runner=wrong)


def test_calibrate_command_exits_2_in_one_line_without_a_gpu(tmp_path, capsys):
    if simcoll.gpu.cuda_available():
        pytest.skip("a GPU is present")
    out = tmp_path / "m.yaml"
    assert main(["gpu", "calibrate", "-o", str(out)]) == 2
    captured = capsys.readouterr()  # an error: on stderr, nothing on stdout
    assert not captured.out and captured.err.count("\n") == 1 and "no CUDA GPU" in captured.err
    assert not out.exists()


def test_the_relay_gives_the_write_share_and_the_model_carries_it(tmp_path):
    """A relaying block writes twice what it reads: its time per byte from
    4 MiB, in copies, is 1 + the write share (0.7 here, in noisy timings)."""
    result = cal.fit_calibration(synthetic(write_share=0.7))
    assert result.write_share == pytest.approx(0.7, abs=0.05)
    _, model = cal.write_calibration(synthetic(write_share=0.7), str(tmp_path / "m.yaml"), link_type="nvlink",
                                     run="devices 0 (test GPU), 2026-01-01T00:00Z")  # fmt: skip
    assert model.executor.write_share == pytest.approx(0.7, abs=0.05)
    assert "write share 0.6" in model.executor.source and "relay from 4 MiB" in model.executor.source
    # samples without the relay (runs before it) fit as before and leave the share out
    older = cal.fit_calibration([s for s in synthetic() if s.benchmark.kind != "relay"])
    assert older.write_share is None and older.write_share_note == "no relay samples"
    small = [s for s in synthetic(write_share=0.7) if s.size_bytes < 4 << 20]
    assert cal.fit_calibration(small).write_share is None


@pytest.mark.parametrize("share", [0.5, 0.78])
def test_the_write_share_estimate_reads_program_modes_relay_back(share):
    """The relay simulated in Program mode with a model's write share gives
    that share back: the estimate and the simulator count the same costs."""
    fitted = {"launch_s": 5e-6, "alpha_s": 2e-6, "link_Bps": 40e9, "tb_Bps": 40e9, "signal_latency_s": 1e-6}
    model = cal.calibrated_model(cal.fit_calibration(synthetic()), name="m", link_type="nvlink", run="r")
    ex = dataclasses.replace(model.executor, thread_block_bandwidth_Bps=fitted["tb_Bps"], write_share=share,
                             kernel_launch_s=fitted["launch_s"], signal_latency_s=fitted["signal_latency_s"])  # fmt: skip
    links = {**model.links, "nvlink": LinkParams(fitted["alpha_s"], fitted["link_Bps"], "test")}
    machine = load_machine(load_topology("fully-connected:2"), dataclasses.replace(model, executor=ex, links=links))
    relay = next(b for b in cal.microbenchmarks() if b.kind == "relay")
    samples = [cal.Sample(relay, size, simulate(relay.program, machine, size).time_s) for size in (16 << 20, 64 << 20)]
    estimate, _ = cal.fit_write_share(samples, fitted)
    assert estimate == pytest.approx(share, abs=1e-9)

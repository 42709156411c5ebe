"""How a job launches its collective calls prices each call (issue 50 item 1,
issue 53): one process driving every GPU (nccl-tests ``-g 8``: its one host
thread launches each GPU's kernel in turn), one process per GPU (MPI, srun,
torchrun: the papers' harnesses) or CUDA graphs. A model prices the modes it
knows, a log's header says which mode it was measured in, and validation,
calibration, ``compare``, ``simulate`` and studies use the mode they are given."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from simcoll.calibration.calibrate import calibrate, samples_of, simulate_samples, validate
from simcoll.calibration.nccl_tests import bus_factor, parse_nccl_tests
from simcoll.cost_model import LAUNCH_MODES, ModelError, model_from_dict, model_to_dict
from simcoll.errors import StudyError
from simcoll.machines import Machine, load_machine, load_model
from simcoll.sweeps import load_study
from simcoll.sweeps.study import resolved_model_dict

MEASUREMENTS = Path(__file__).resolve().parents[2] / "shared" / "reference" / "measurements"
LINK = {"nvlink": {"alpha_s": 1e-6, "bandwidth_Bps": 25e9, "source": "test"}}


def _model(call: dict) -> dict:
    return {"name": "m", "links": LINK, "call": {**call, "source": "test"}}


def test_a_model_prices_each_launch_mode_and_runs_in_the_one_it_names():
    model = model_from_dict(_model({"overhead_s": {"threads": 30e-6, "processes": 2e-6}, "launch": "threads"}))
    assert model.launch == "threads" and model.call_overhead_s == 30e-6
    per_process = model.with_launch("processes")
    assert per_process.launch == "processes" and per_process.call_overhead_s == 2e-6
    assert per_process.call_cost_s("Simple") == pytest.approx(2e-6)
    # the chosen mode is written back, and read back the same
    again = model_from_dict(model_to_dict(per_process))
    assert (
        again.launch == "processes" and again.call_overhead_s == 2e-6 and again.call.by_launch == model.call.by_launch
    )


def test_one_cost_prices_every_launch_mode():
    model = model_from_dict(_model({"overhead_s": 5e-6}))
    assert model.launch is None
    for mode in LAUNCH_MODES:
        assert model.with_launch(mode).call_overhead_s == 5e-6 and model.with_launch(mode).launch == mode


@pytest.mark.parametrize(
    "call, message",
    [
        ({"overhead_s": {"threads": 1e-6, "processes": 0.0}}, "launch: required with costs for several launch modes"),
        ({"overhead_s": {"threads": 1e-6}, "launch": "graphs"}, "'graphs' has no cost in overhead_s"),
        ({"overhead_s": {"mpi": 1e-6}}, "unknown launch mode 'mpi'"),
        ({"overhead_s": 1e-6, "launch": "mpi"}, "unknown launch mode 'mpi'"),
        ({"overhead_s": {"threads": -1.0}, "launch": "threads"}, "must be non-negative"),
    ],
)
def test_bad_launch_costs_are_named(call, message):
    with pytest.raises(ModelError, match=message):
        model_from_dict(_model(call))


def test_a_mode_the_model_does_not_price_is_refused_naming_those_it_does():
    model = model_from_dict(_model({"overhead_s": {"threads": 30e-6, "processes": 0.0}, "launch": "threads"}))
    with pytest.raises(ModelError, match="prices calls launched as threads or processes, not as graphs"):
        model.with_launch("graphs")
    with pytest.raises(ModelError, match="unknown launch mode 'mpi'"):
        load_model("dgx1").with_launch("mpi")


def test_one_process_per_gpu_costs_less_per_call_than_one_process_driving_eight():
    """The shipped models' thread-mode floors come from nccl-tests -g 8 runs;
    with one process per GPU nothing is left above NCCL's own latency."""
    machine = load_machine("dgx1")
    threads, processes = machine.with_launch("threads"), machine.with_launch("processes")
    assert threads.model.call_overhead_s == pytest.approx(28.6e-6) and processes.model.call_overhead_s == 0
    from simcoll import generate
    from simcoll.evaluation import schedule_time_s

    ring = generate("ring", machine, "allreduce")
    slow = schedule_time_s(ring, threads, 1024, protocol="Simple")
    fast = schedule_time_s(ring, processes, 1024, protocol="Simple")
    assert slow - fast == pytest.approx(28.6e-6, rel=1e-6)


HEADER = "#                                                     out-of-place                       in-place\n"
COLUMNS = "#       size         count    type   redop     time   algbw   busbw  error     time   algbw   busbw  error\n"
ROW = "        1024           256   float     sum    10.00    0.10    0.18  0e+00    10.00    0.10    0.18  0e+00\n"


@pytest.mark.parametrize(
    "lines, launch",
    [
        (
            ["# nThread 1 nGpus 8 minBytes 8 maxBytes 1024 step: 2(factor) warmup iters: 5 iters: 20 validation: 1"],
            "threads",
        ),
        (
            ["# nThread 1 nGpus 1 minBytes 8 maxBytes 1024 step: 2(factor) warmup iters: 5 iters: 20 validation: 1"],
            "processes",
        ),
        (
            [
                "# nThread 1 nGpus 1 minBytes 8 maxBytes 1024 warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 10"
            ],
            "graphs",
        ),
        (
            [
                "# nThread 1 nGpus 1 minBytes 8 maxBytes 1024 warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0"
            ],
            "processes",
        ),
        ([f"#  Rank {r} Group  0 Pid {100 + r} on host0 device {r} [0x00] GPU" for r in range(8)], "processes"),
        ([f"#  Rank {r} Group  0 Pid 100 on host0 device {r} [0x00] GPU" for r in range(8)], "threads"),
        (["# Run: ./build/all_reduce_perf -b 8 -e 128M -f 2 -g 8"], "threads"),
        (["# Run: mpirun -np 8 ./build/all_reduce_perf -b 8 -e 128M -f 2"], "processes"),
        (["# a log that does not say"], None),
    ],
)
def test_a_logs_header_says_how_its_calls_were_launched(lines, launch):
    text = "\n".join(lines) + "\n" + HEADER + COLUMNS + ROW
    assert parse_nccl_tests(text, path="all_reduce_perf.log", num_ranks=8).launch == launch


@pytest.mark.skipif(not MEASUREMENTS.is_dir(), reason="needs ../shared/reference/measurements")
@pytest.mark.parametrize(
    "name, launch",
    [
        ("v100-sxm2-16gb-x8_all_reduce_konnase.log", "threads"),  # -g 8
        ("gh200-x4-n1_all_reduce_alpsboeschf.log", "processes"),  # srun, a GPU per task
        ("b200-x8_all_reduce_symm_nccltests333.log", "graphs"),  # -G 100
        ("a100-sxm-64gb-x2_sendrecv_nccltests331.log", "threads"),  # nThread 2, nGpus 1
    ],
)
def test_the_published_logs_say_how_they_launched(name, launch):
    from simcoll.calibration.nccl_tests import read_nccl_tests

    assert read_nccl_tests(MEASUREMENTS / name).launch == launch


def _log(times_us: dict[int, float], ranks: int, header: str) -> str:
    factor = bus_factor("allreduce", ranks)
    rows = [
        f"{size:12d} {size // 4:13d}   float     sum {t:8.2f} {size / t / 1e3:7.2f} {size / t / 1e3 * factor:7.2f}  0e+00 "
        f"{t:8.2f} {size / t / 1e3:7.2f} {size / t / 1e3 * factor:7.2f}  0e+00"
        for size, t in times_us.items()
    ]
    return header + "\n" + HEADER + COLUMNS + "\n".join(rows) + "\n"


def _two_mode_machine(threads_s: float = 30e-6, processes_s: float = 3e-6) -> Machine:
    topology = load_machine("fully-connected:4").topology
    data = model_to_dict(load_machine("fully-connected:4").model)
    data["protocols"] = {"Simple": {"efficiency": 1.0, "hop_latency_s": 1e-6, "call_latency_s": 4e-6, "source": "test"}}
    data["default_protocol"] = "Simple"
    data["call"] = {"overhead_s": {"threads": threads_s, "processes": processes_s}, "launch": "threads", "source": "t"}
    return Machine(topology, model_from_dict(data))


SIZES = [1 << k for k in range(10, 25, 2)]
PER_PROCESS = "# nThread 1 nGpus 1 minBytes 1024 maxBytes 16777216 step: 4(factor) warmup iters: 5 iters: 20"


def _synthetic(machine: Machine, header: str) -> str:
    """What the simulator gives on ``machine`` for the launch ``header`` says, as a log."""
    probe = parse_nccl_tests(_log({s: 1.0 for s in SIZES}, 4, header), path="all_reduce_perf.log")
    times = simulate_samples(samples_of(probe, machine), machine, machine.model)
    return _log({s: t * 1e6 for s, t in zip(SIZES, times, strict=True)}, 4, header)


def test_validation_prices_a_log_as_it_was_launched(tmp_path):
    """A per-process log is simulated with the per-process call cost whatever
    mode the model runs in; a thread-mode log with the thread-mode one."""
    machine = _two_mode_machine()
    per_process = tmp_path / "all_reduce_perf.log"
    per_process.write_text(_synthetic(machine.with_launch("processes"), PER_PROCESS))
    assert validate(per_process, machine).ratio.sub(1).abs().max() < 1e-3
    frame = validate(per_process, machine.with_launch("processes"))
    assert frame.ratio.sub(1).abs().max() < 1e-3 and (frame.launch == "processes").all()
    small = frame.iloc[0]
    threads = tmp_path / "all_reduce_perf_threads.log"
    threads.write_text(per_process.read_text().replace("nGpus 1", "nGpus 4"))  # same times, read as -g 4
    slower = validate(threads, machine).iloc[0]
    assert slower.simulated_time_us - small.simulated_time_us == pytest.approx(27.0, rel=1e-3)


def test_calibration_fits_the_call_cost_of_the_logs_launch_mode_only(tmp_path):
    truth = _two_mode_machine(processes_s=9e-6)
    path = tmp_path / "all_reduce_perf.log"
    path.write_text(_synthetic(truth.with_launch("processes"), PER_PROCESS))
    base = _two_mode_machine(processes_s=1e-6)
    model, report = calibrate(
        [path], base, parameters=["call.overhead_s.processes", "call.overhead_s.threads"], max_sizes_per_log=8
    )
    assert model.call.by_launch["processes"] == pytest.approx(9e-6, rel=0.02)
    assert model.call.by_launch["threads"] == 30e-6 and "call.overhead_s.threads" in report.unchanged
    assert model.launch == "threads"  # the calibrated model runs as the base did
    assert "overhead_s.processes" in model.call.source


def test_compare_and_simulate_take_a_launch_mode(tmp_path, capsys):
    from simcoll.cli import main

    assert main(["compare", "-t", "dgx1", "-c", "allreduce", "--sizes", "1KB", "--launch", "processes", "-q"]) == 0
    assert "(model dgx1, calls launched as processes)" in capsys.readouterr().out
    data = model_to_dict(load_model("dgx1"))
    del data["call"]["overhead_s"]["graphs"]
    unpriced = tmp_path / "no-graphs.yaml"
    unpriced.write_text(yaml.safe_dump(data))
    args = [
        "compare",
        "-t",
        "dgx1",
        "-m",
        str(unpriced),
        "-c",
        "allreduce",
        "--sizes",
        "1KB",
        "--launch",
        "graphs",
        "-q",
    ]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "not as graphs" in err
    schedule = tmp_path / "ring.json"
    assert main(["algo", "generate", "ring", "-t", "dgx1", "-c", "allreduce", "-o", str(schedule)]) == 0
    capsys.readouterr()
    for mode in ("threads", "processes"):
        assert main(["simulate", str(schedule), "-t", "dgx1", "-s", "1KB", "--launch", mode, "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["launch"] == mode


def test_a_study_machine_names_its_launch_mode_and_a_list_sweeps_it():
    raw = {"name": "launch", "collectives": ["allreduce"], "algorithms": ["ring"], "sizes": "1KB"}
    study = load_study({**raw, "machines": [{"topology": "dgx1", "launch": ["threads", "processes"]}]})
    machines = {m.label: m for m in study.machines}
    assert set(machines) == {"dgx1[launch=threads]", "dgx1[launch=processes]"}
    per_process = machines["dgx1[launch=processes]"]
    assert resolved_model_dict(per_process)["call"]["launch"] == "processes"
    assert '"call.launch": "processes"' in per_process.overrides_text()
    assert len({p.key for p in study.points()}) == 2  # the two modes' points are different points
    with pytest.raises(StudyError, match="unknown launch mode 'mpi'"):
        load_study({**raw, "machines": [{"topology": "dgx1", "launch": "mpi"}]})
    graphs = load_study({**raw, "machines": [{"topology": "dgx1", "launch": "graphs"}]}).machines[0]
    assert resolved_model_dict(graphs)["call"]["launch"] == "graphs"

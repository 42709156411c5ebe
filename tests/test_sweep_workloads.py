"""Studies of training steps (simcoll.sweeps.workloads): what-ifs over machines and schedules as sweeps.

A user sweeps a step over machine variants and schedules and gets one
Parquet row per point with the step time; a resumed sweep runs nothing
again; a study that mixes workloads with collectives is refused in one line.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from simcoll.errors import StudyError
from simcoll.sweeps import load_results, load_study, run_study
from simcoll.workload import data_parallel, save_workload

ROOT = Path(__file__).resolve().parents[1]
STEP = {"generate": "data-parallel", "name": "resnet", "options": {"ranks": 8, "batch_per_gpu": 16,
                                                                     "compute_efficiency": 0.3}}  # fmt: skip


def _study(**extra):
    return {"name": "steps", "machines": ["dgx1", {"topology": "dgx1", "name": "nvlink-x4",
                                                   "overrides": {"links.nvlink.bandwidth_Bps": "x4"}}],
            "workloads": [STEP], **extra}  # fmt: skip


def test_a_step_is_swept_over_machines_and_schedules(tmp_path):
    summary = run_study(_study(schedules=["nccl", "ring"]), tmp_path, serial=True, progress=False)
    assert (summary.total, summary.failed) == (4, 0)
    df = load_results(tmp_path).set_index(["machine", "algorithm"])
    assert set(df.status) == {"ok"} and set(df.workload) == {"resnet"}
    for schedule in ("nccl", "ring"):  # four times the NVLink bandwidth can only shorten the step
        assert df.time_s[("nvlink-x4", schedule)] <= df.time_s[("dgx1", schedule)]
        assert df.exposed_communication_s[("nvlink-x4", schedule)] < df.exposed_communication_s[("dgx1", schedule)]
    assert (df.throughput_per_s * df.time_s).round(6).eq(8 * 16).all()  # samples a step / step time
    again = run_study(_study(schedules=["nccl", "ring"]), tmp_path, serial=True, progress=False, resume=True)
    assert again.ran == 0


def test_a_workload_file_and_nccl_releases(tmp_path):
    path = tmp_path / "step.yaml"
    save_workload(data_parallel(ranks=8, batch_per_gpu=16, compute_efficiency=0.3), path)
    study = load_study({**_study(nccl=["2.8", "2.30"]), "workloads": [{"file": str(path)}]})
    assert len(study.points()) == 4
    run_study(study, tmp_path / "out", serial=True, progress=False)
    df = load_results(tmp_path / "out")
    assert set(df.nccl) == {"2.8", "2.30"} and set(df.workload) == {"step"} and set(df.status) == {"ok"}


def test_the_example_study_loads():
    study = load_study(ROOT / "experiments" / "studies" / "training_whatif.yaml")
    assert len(study.points()) == 2 * 2 * 2


@pytest.mark.parametrize(
    "change,message",
    [
        ({"collectives": ["allreduce"]}, "takes no 'collectives'"),
        ({"workloads": [{"generate": "nope"}]}, "unknown workload generator 'nope'"),
        ({"workloads": [{"generate": "data-parallel", "file": "x.yaml"}]}, "exactly one of generate, file or chakra"),
        ({"workloads": [{"generate": "data-parallel", "options": {"ranks": 0}}]}, "ranks must be a positive"),
        ({"workloads": [STEP, STEP]}, "name 'resnet' used twice"),
        ({"nccl": ["9.9"]}, "nccl:"),
        ({"simulator": {"mode": "program"}}, "simulator.mode: a study of workloads"),
    ],
)
def test_bad_workload_studies_are_refused(change, message):
    with pytest.raises(StudyError, match=message):
        load_study(_study(**change))


def test_schedules_need_workloads():
    with pytest.raises(StudyError, match="'schedules' belongs to a study of workloads"):
        load_study({"name": "s", "machines": ["ring:4"], "collectives": ["allreduce"], "algorithms": ["ring"],
                    "sizes": "1KB", "schedules": ["ring"]})  # fmt: skip

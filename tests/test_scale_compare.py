"""Issue 15: ``compare(..., jobs=N)`` gives the same table as ``jobs=1``.

Claim: generating and timing algorithms in worker processes changes neither
the rows, their order, nor any time, and bad ``jobs`` values are refused.
"""

from __future__ import annotations

import pandas as pd
import pytest

from simcoll.compare import compare
from simcoll.errors import SimcollError


@pytest.mark.parametrize("method", ["simulate", "analytic"])
def test_parallel_compare_matches_serial(method):
    sizes = [1 << 10, 1 << 20]
    serial, skipped_serial = compare("dgx-a100*2", "allreduce", sizes, method=method)
    parallel, skipped_parallel = compare("dgx-a100*2", "allreduce", sizes, method=method, jobs=2)
    pd.testing.assert_frame_equal(serial, parallel)
    assert skipped_serial == skipped_parallel
    assert "nccl" in set(serial.algorithm)


def test_jobs_must_be_a_positive_integer():
    with pytest.raises(SimcollError, match="jobs must be a positive integer"):
        compare("ring:4", "allgather", [1024], jobs=0)


def test_a_simulation_past_the_time_limit_leaves_its_row_out(monkeypatch):
    """One slow algorithm (a 1,024-GPU machine has some) does not sink the
    comparison: its row is left out with the reason, the others come."""
    import importlib

    from simcoll.errors import TimeLimitError

    compare_module = importlib.import_module("simcoll.compare")  # the package exports a function of that name

    simulate = compare_module.schedule_time_s

    def slow_multi_ring(schedule, *args, **kwargs):
        if schedule.name == "multi-ring":
            raise TimeLimitError("simulation of multi-ring on dgx-a100*2: wall-clock limit of 60 s reached")
        return simulate(schedule, *args, **kwargs)

    monkeypatch.setattr(compare_module, "schedule_time_s", slow_multi_ring)
    df, skipped = compare("dgx-a100*2", "allreduce", [1 << 20], algorithms=["ring", "multi-ring", "nccl"])
    assert sorted(df.algorithm) == ["nccl", "ring"]
    assert "wall-clock limit" in skipped["multi-ring at 1MB"]


def test_a_schedule_past_the_limit_is_not_simulated_at_the_later_sizes(monkeypatch):
    """A simulation that reached the wall-clock limit at one size would take
    about as long at the next (the same messages): a sweep does not spend
    the limit again at every size. Those rows are left out saying why, the
    other algorithms are timed at every size, and NCCL's row (another
    schedule at each size) is tried at each."""
    import importlib

    from simcoll.errors import TimeLimitError

    compare_module = importlib.import_module("simcoll.compare")
    simulate = compare_module.schedule_time_s
    tried: list[str] = []

    def slow(schedule, machine, size, **kwargs):
        tried.append(schedule.name if schedule.name in ("multi-ring", "ring") else "nccl")
        if schedule.name != "ring":
            raise TimeLimitError(f"simulation of {schedule.name}: wall-clock limit of 60 s reached")
        return simulate(schedule, machine, size, **kwargs)

    monkeypatch.setattr(compare_module, "schedule_time_s", slow)
    lines: list[str] = []
    sizes = [1 << 10, 1 << 20, 1 << 30]
    df, skipped = compare(
        "dgx-a100*2", "allreduce", sizes, algorithms=["ring", "multi-ring", "nccl"], progress=lines.append
    )
    assert tried.count("multi-ring") == 1 and tried.count("ring") == 3 and tried.count("nccl") == 3
    assert list(df.algorithm) == ["ring"] * 3
    assert "wall-clock limit of 60 s reached" in skipped["multi-ring at 1KB"]
    for size in ("1MB", "1GB"):
        assert skipped[f"multi-ring at {size}"].startswith(
            "not simulated: its simulation at 1KB reached the 60 s wall-clock limit"
        )
        assert "wall-clock limit of 60 s reached" in skipped[f"nccl at {size}"]
    said = [line.split("] ", 1)[1] for line in lines]
    assert any(
        s.startswith(
            "multi-ring: 1KB stopped (wall-clock limit), 1MB not simulated (the limit was reached at 1KB), "
            "1GB not simulated (the limit was reached at 1KB)"
        )
        for s in said
    )


def test_a_program_past_the_limit_is_not_simulated_at_the_later_sizes(monkeypatch):
    """The same for the lowered Program's rows: its Algorithm's rows still come."""
    import importlib

    from simcoll.errors import TimeLimitError
    from simcoll.program import Program

    compare_module = importlib.import_module("simcoll.compare")
    simulate = compare_module.schedule_time_s
    programs: list[int] = []

    def slow_program(schedule, machine, size, **kwargs):
        if isinstance(schedule, Program):
            programs.append(size)
            raise TimeLimitError("Program-mode simulation of ring: wall-clock limit of 60 s reached")
        return simulate(schedule, machine, size, **kwargs)

    monkeypatch.setattr(compare_module, "schedule_time_s", slow_program)
    df, skipped = compare("ring:4", "allgather", [1 << 10, 1 << 20], algorithms=["ring"], program=True)
    assert programs == [1 << 10]
    assert list(df.method) == ["simulate", "simulate"]
    assert skipped["ring (program) at 1MB"].startswith("not simulated: its simulation at 1KB reached")


@pytest.mark.parametrize("jobs", [1, 2])
def test_no_time_at_all_is_an_error_naming_the_limit(jobs):
    """With every schedule's building and every simulation past its limit
    (here 1 ns) there is no table, and the error says why: the ring stopped
    while it was being built, NCCL's simulations at each size."""
    with pytest.raises(SimcollError, match="no algorithm gave a time.*wall-clock limit of 1e-09 s") as caught:
        compare(
            "dgx-a100*2", "allreduce", [1 << 29, 1 << 30], algorithms=["ring", "nccl"], time_limit_s=1e-09, jobs=jobs
        )
    assert "ring: wall-clock limit of 1e-09 s reached" in str(caught.value)


def test_rows_asked_for_are_the_only_ones_generated(monkeypatch):
    """``compare --algorithms ring`` on a large machine does not pay for the
    other generators: only the rows asked for are generated."""
    import simcoll.algorithms as algorithms_module

    generate = algorithms_module.generate
    made: list[str] = []

    def counting(name, *args, **kwargs):
        made.append(name)
        return generate(name, *args, **kwargs)

    monkeypatch.setattr(algorithms_module, "generate", counting)
    rows, _ = compare("dgx-a100*2", "allreduce", [1 << 20], algorithms=["ring", "direct"])
    assert made == ["ring", "direct"]
    assert list(rows.algorithm) == ["ring", "direct"]


def test_one_generated_schedule_is_held_at_a_time(monkeypatch):
    """A comparison on a large machine holds one schedule in memory, not
    every generator's: each is timed at every size and let go before the
    next is generated (the table keeps its C, S, R)."""
    import weakref

    import simcoll.algorithms as algorithms_module

    generate = algorithms_module.generate
    made: list[weakref.ref] = []
    alive_at_each: list[int] = []

    def watching(name, *args, **kwargs):
        alive_at_each.append(sum(ref() is not None for ref in made))
        algorithm = generate(name, *args, **kwargs)
        made.append(weakref.ref(algorithm))
        return algorithm

    monkeypatch.setattr(algorithms_module, "generate", watching)
    rows, _ = compare("dgx-a100*2", "allreduce", [1 << 10, 1 << 20], algorithms=["ring", "direct", "nccl-ring"])
    assert len(made) == 3 and alive_at_each == [0, 0, 0]
    assert list(rows.algorithm) == ["ring", "direct", "nccl-ring"] * 2
    p = 16  # ring Allreduce takes 2(P - 1) steps, direct a reduce-scatter step and an allgather step
    assert rows.steps.tolist()[:3] == [2 * (p - 1), 2, 2 * (p - 1)]


@pytest.mark.parametrize("jobs", [1, 2])
def test_progress_reports_every_generator_and_nccl_size_once(jobs):
    """A comparison of thousands of GPUs takes minutes: ``progress`` hears,
    as each ends, of every generator (its times, or why it does not apply)
    and of NCCL's row at every size, with the seconds elapsed; the times it
    reports are the table's."""
    lines: list[str] = []
    sizes = [1 << 10, 1 << 20]
    df, skipped = compare(
        "dgx-a100*2", "allreduce", sizes, algorithms=["ring", "nvls", "nccl"], jobs=jobs, progress=lines.append
    )
    assert len(lines) == 4 and all(line.startswith("[") and " s] " in line for line in lines)
    said = {line.split("] ", 1)[1] for line in lines}
    ring = df[df.algorithm == "ring"].time_us.tolist()
    assert any(s.startswith(f"ring: 1KB {ring[0]:.2f} us, 1MB {ring[1]:.2f} us") for s in said)
    assert any(s.startswith("not applicable: nvls:") for s in said) and "nvls" in skipped
    for size, choice, t in df[df.algorithm == "nccl"][["size", "choice", "time_us"]].itertuples(index=False):
        assert any(s.startswith(f"nccl ({choice}) at {size}: {t:.2f} us") for s in said)


def test_cli_compare_prints_progress_on_stderr_unless_quiet(capsys):
    from simcoll.cli import main

    args = ["compare", "-t", "ring:4", "-c", "allgather", "--sizes", "1KB", "--algorithms", "ring,direct"]
    assert main(args) == 0
    out, err = capsys.readouterr()
    assert "ring: 1KB" in err and "direct: 1KB" in err and "ring: 1KB" not in out
    assert main([*args, "--quiet"]) == 0
    out, err = capsys.readouterr()
    assert err == "" and "ring" in out


def test_parallel_compare_on_fresh_workers_matches_serial(monkeypatch):
    """From ``FRESH_WORKERS_FROM_RANKS`` ranks every task runs in a fresh
    worker process (bounded peak memory on 1,024 GPUs): the table is the same."""
    import importlib

    compare_module = importlib.import_module("simcoll.compare")
    sizes = [1 << 20]
    serial, _ = compare("dgx-a100*2", "allreduce", sizes, algorithms=["ring", "direct", "nccl"])
    monkeypatch.setattr(compare_module, "FRESH_WORKERS_FROM_RANKS", 2)
    parallel, _ = compare("dgx-a100*2", "allreduce", sizes, algorithms=["ring", "direct", "nccl"], jobs=2)
    pd.testing.assert_frame_equal(serial, parallel)


def test_progress_sums_up_a_sweep_of_sizes():
    """With more sizes than a line lists (the README's main job has 21), a
    generator's line gives the first and last size's times and the count."""
    lines: list[str] = []
    sizes = [1 << k for k in range(10, 16)]
    df, _ = compare("ring:4", "allgather", sizes, algorithms=["ring"], progress=lines.append)
    (line,) = lines
    first, last = df.time_us.iloc[0], df.time_us.iloc[-1]
    assert f"ring: 6 sizes from 1KB {first:.2f} us to 32KB {last:.2f} us" in line

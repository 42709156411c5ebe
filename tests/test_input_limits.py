"""Size limits (simcoll.limits): a spec of a few characters that names a
machine beyond the limits is refused with one line, before anything is
built, while the issue-15 scale targets still load (issue 14 item 2); a
generator is stopped once it has built more transfers than simcoll builds,
and a comparison goes on without that row (issue 15, 4,096 GPUs)."""

from __future__ import annotations

import time
import tracemalloc

import pytest

from simcoll import limits
from simcoll.algorithms import REGISTRY, generate
from simcoll.cli import main
from simcoll.collectives import make_collective
from simcoll.errors import CollectiveError, NotApplicableError, ScheduleTooLargeError, TooLargeError, TopologyError
from simcoll.limits import MAX_GPUS, MAX_LINKS, check_machine_size, transfer_budget, transfers_built
from simcoll.machines import load_machine, load_topology
from simcoll.topology_generators import _size_of, generate_topology


def test_the_limits_are_inclusive_and_name_the_spec():
    check_machine_size("at-limit", MAX_GPUS, MAX_LINKS)
    with pytest.raises(TopologyError, match=r"^big: 65,537 GPUs .* \(at most 65,536\)$"):
        check_machine_size("big", MAX_GPUS + 1)
    with pytest.raises(TopologyError, match=r"^dense: 2,000,001 links"):
        check_machine_size("dense", 8, MAX_LINKS + 1)


@pytest.mark.parametrize(
    "spec",
    [
        "hypercube:40",
        "hypercube:17",
        "fully-connected:100000",
        "fully-connected:2001",
        "ring:100000",
        "line:65537",
        "hub-and-spoke:1000000",
        "torus2d:100000x100000",
        "ring:" + "9" * 40,
        "dgx-h100*8193",
        "dgx1*" + "1" * 30,
    ],
)
def test_specs_beyond_the_limits_are_refused_fast_and_without_memory(spec):
    tracemalloc.start()
    start = time.perf_counter()
    try:
        with pytest.raises(TopologyError, match="more than simcoll builds"):
            load_topology(spec)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert time.perf_counter() - start < 1.0
    assert peak < 8 * 2**20, f"{spec}: {peak:,} bytes allocated before refusing"


@pytest.mark.parametrize(
    "name, numbers",
    [
        ("ring", [6]),
        ("line", [5]),
        ("fully-connected", [7]),
        ("hub-and-spoke", [5]),
        ("torus2d", [3, 4]),
        ("torus2d", [2, 5]),
        ("hypercube", [4]),
    ],
)
def test_the_size_estimate_is_exact_on_gpus_and_an_upper_bound_on_links(name, numbers):
    spec = f"{name}:{'x'.join(map(str, numbers))}"
    gpus, links = _size_of(name, numbers)
    built = generate_topology(spec)
    assert built.num_ranks == gpus
    assert len(built.links) <= links


@pytest.mark.parametrize("spec, ranks", [("ring:1024", 1024), ("ring:4096", 4096), ("dgx-h100*512", 4096)])
def test_the_scale_targets_still_load(spec, ranks):
    assert load_topology(spec).num_ranks == ranks


@pytest.mark.parametrize(
    "gpus, words",
    [("1000000", "1,000,000 GPUs"), ("10^30", "positive integer"), ("-4", "positive integer"), ("true", "integer")],
)
def test_a_yaml_gpu_count_beyond_the_limit_or_not_a_count_is_one_line(tmp_path, capsys, gpus, words):
    path = tmp_path / "m.yaml"
    path.write_text(f"name: m\ngpus: {gpus}\n")
    assert main(["topo", "show", str(path)]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "m.yaml" in err[0] and words in err[0], err


@pytest.mark.parametrize(
    "name, ranks, factor", [("alltoall", 8192, 1), ("allgather", 4096, 24 * 4096), ("allreduce", MAX_GPUS + 1, 1)]
)
def test_collectives_beyond_the_slot_limit_are_refused(name, ranks, factor):
    with pytest.raises(CollectiveError, match="more than simcoll builds"):
        make_collective(name, ranks, chunk_factor=factor)


@pytest.mark.parametrize(
    "argv",
    [
        ["bounds", "-t", "torus2d:1000x1000", "-c", "allreduce"],
        ["algo", "generate", "ring", "-t", "hypercube:30", "-c", "allgather"],
        ["compare", "-t", "fully-connected:5000", "-c", "allreduce", "--sizes", "1KB"],
    ],
)
def test_every_command_refuses_an_oversized_machine_in_one_line(capsys, argv):
    assert main(argv) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "more than simcoll builds" in err[0], err


# --- transfers a generator builds (simcoll.limits.MAX_TRANSFERS) -------------------------------


@pytest.mark.parametrize("spec", ["dgx1", "dgx-h100*2", "perlmutter*2", "ring:6"])
def test_every_generator_counts_each_of_its_transfers_once(spec):
    """The budget is charged by tables built from new columns only: copies,
    reorderings and concatenations are not counted again, so the limit is
    on the schedule's size, whatever way its generator assembles it."""
    machine = load_machine(spec)
    counted = 0
    for name, generator in REGISTRY.items():
        for collective in generator.collectives:
            with transfer_budget("outer"):  # generate() goes on counting in a budget already open
                try:
                    algorithm = generate(name, machine, collective)
                except NotApplicableError:
                    continue
                # an orbit's representatives are built, its images are not (simcoll.algorithm.OrbitTable)
                built = algorithm.orbit.representatives if algorithm.orbit is not None else algorithm.transfers
                assert transfers_built() == len(built), (name, collective)
                counted += 1
    assert counted >= 20


def test_a_schedule_past_the_transfer_limit_is_refused_with_its_name(monkeypatch):
    # ring Allreduce on 64 ranks (chunk factor P): 2(P-1) steps, each rank one chunk a step; on an
    # 8x8 torus its ring maps onto itself under no rotation of the machine, so every transfer is built
    # (on ring:64 only the first rank's are: an OrbitTable, simcoll.topology_symmetry)
    transfers = 2 * 63 * 64
    monkeypatch.setattr(limits, "MAX_TRANSFERS", transfers)
    assert len(generate("ring", "torus2d:8x8", "allreduce").transfers) == transfers  # the limit is inclusive
    monkeypatch.setattr(limits, "MAX_TRANSFERS", transfers - 1)
    with pytest.raises(ScheduleTooLargeError) as refused:
        generate("ring", "torus2d:8x8", "allreduce")
    message = str(refused.value)
    assert message.startswith("ring: allreduce on 64 ranks, chunk factor 64: more than 8,063 transfers")
    assert "simcoll.limits.MAX_TRANSFERS" in message
    assert isinstance(refused.value, TooLargeError)
    assert transfers_built() is None  # the budget closed with the error


def test_the_cli_refuses_a_schedule_past_the_limit_in_one_line_and_writes_nothing(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(limits, "MAX_TRANSFERS", 1000)
    out = tmp_path / "ring.json"
    assert main(["algo", "generate", "ring", "-t", "torus2d:8x8", "-c", "allreduce", "-o", str(out)]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "more than 1,000 transfers" in err[0], err
    assert not out.exists()


def test_compare_leaves_out_a_schedule_past_the_limit_and_says_why(monkeypatch, capsys):
    """One algorithm too large for the machine does not cost the user the others' rows."""
    monkeypatch.setattr(limits, "MAX_TRANSFERS", 100)  # direct on 16 ranks has 480; the binomial tree 30
    argv = [
        "compare",
        "-t",
        "fully-connected:16",
        "-c",
        "allreduce",
        "--sizes",
        "1MB",
        "--algorithms",
        "direct,binomial-tree",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "binomial-tree" in out.split("* best")[0]
    assert "too large: direct: allreduce on 16 ranks, chunk factor 16: more than 100 transfers" in out
    with pytest.raises(TooLargeError):
        make_collective("allgather", 4096, chunk_factor=24 * 4096)  # a collective's slots are refused alike


def test_work_over_rank_pairs_is_estimated_and_refused_before_it_is_built(monkeypatch, capsys):
    """Issue 52: ``compare -t 'dgx-h100*8192'`` ran 80-90 s to 17 GB and died out of memory.
    The bandwidth relation every generated Algorithm needs, the step bound and the cut bound grow
    with the square of the GPUs; each is estimated first and refused in one line past
    ``MAX_RANK_PAIR_BYTES``. Here on 32 GPUs with the limit lowered: the cut bound (~58 kB) is
    refused and the table goes without its column, the rows stay; below the relation's 27 kB
    every generator is refused before it builds anything."""
    from simcoll.bounds import time_lower_bound_s
    from simcoll.compare import BOUND_ROW, compare

    monkeypatch.setattr(limits, "MAX_RANK_PAIR_BYTES", 30_000)
    with pytest.raises(TooLargeError, match=r"the cut bound of reducescatter on 32 ranks would need about 0 GiB"):
        time_lower_bound_s(make_collective("allreduce", 32), "dgx-a100*4", 1 << 20)
    df, skipped = compare("dgx-a100*4", "allreduce", [1 << 20], algorithms=["ring"])
    assert df.algbw_bound_GBps.isna().all() and (df.time_s > 0).all()
    assert "MAX_RANK_PAIR_BYTES" in skipped[BOUND_ROW]
    monkeypatch.setattr(limits, "MAX_RANK_PAIR_BYTES", 20_000)
    started = time.perf_counter()
    with pytest.raises(TooLargeError, match=r"the bandwidth relation of dgx-a100\*4 \(32 ranks, SCCL §3.2.1\)"):
        generate("ring", "dgx-a100*4", "allreduce")
    assert time.perf_counter() - started < 5  # refused before the schedule is built
    assert main(["bounds", "-t", "dgx-a100*4", "-c", "allreduce"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "more than simcoll builds" in err[0], err


def test_building_a_schedule_counts_against_compares_time_limit():
    """Issue 52: compare's --time-limit bounded each simulation but not the building of a schedule
    (a multi-ring on 8,192 GPUs searched for its rings for 85 s under a limit of 10). Ring searches,
    transfer tables and SCCL's bandwidth relation check a deadline as they build; compare leaves the
    row out as stopped, naming what it was doing."""
    from simcoll.compare import _generate_and_time, left_out_line
    from simcoll.errors import TimeLimitError
    from simcoll.limits import build_deadline

    with (
        pytest.raises(TimeLimitError, match=r"multi-ring: wall-clock limit of 0 s reached"),
        build_deadline(0.0, "multi-ring"),
    ):
        generate("multi-ring", "dgx1", "allgather")
    generate("multi-ring", "dgx1", "allgather")  # no deadline outside one
    reason, times = _generate_and_time(
        load_machine("dgx1"), "allgather", "multi-ring", [1 << 20], "simulate", True, 1e-9
    )
    assert times == {} and left_out_line("multi-ring", reason).startswith("stopped: multi-ring: wall-clock limit")

"""The nccl-tests / rccl-tests reader against the published logs in
``../shared/reference/measurements`` (skipped where that folder is absent) and
against hand-written good and bad logs."""

from __future__ import annotations

from pathlib import Path

import pytest

from simcoll.calibration import NcclTestsLogError, bus_factor, parse_nccl_tests, read_nccl_tests
from simcoll.calibration.nccl_tests import _ranks_from_ratio
from simcoll.errors import SimcollError
from simcoll.nccl import ChannelLimits

MEASUREMENTS = Path(__file__).resolve().parents[2] / "shared" / "reference" / "measurements"
LOGS = sorted(MEASUREMENTS.glob("*.log")) if MEASUREMENTS.is_dir() else []
needs_logs = pytest.mark.skipif(not LOGS, reason="../shared/reference/measurements is not available")


def _half_unit(time_us: float) -> float:
    """Half of the last printed digit of a time: nccl-tests prints %.2f below
    100 us, one decimal below 10 ms and none above (newer releases print more
    digits, which only tightens the bound)."""
    return 0.005 if time_us < 100 else 0.05 if time_us < 1e4 else 0.5


@needs_logs
def test_all_published_logs_are_present():
    assert len(LOGS) == 73


@needs_logs
@pytest.mark.parametrize("path", LOGS, ids=[p.name for p in LOGS])
def test_published_log_parses_and_busbw_follows_the_nccl_tests_formula(path):
    log = read_nccl_tests(path)
    assert log.num_ranks is not None and log.num_ranks >= 2
    assert log.collective in {"allreduce", "allgather", "reducescatter", "alltoall", "broadcast", "reduce", "sendrecv"}
    assert path.name.split("_")[1] in {"all", "reduce", "alltoall", "broadcast", "sendrecv"}
    if log.nodes and log.gpus_per_node:
        assert log.nodes * log.gpus_per_node == log.num_ranks
    factor = bus_factor(log.collective, log.num_ranks)
    frame = log.frame()
    assert len(frame) >= 8 and (frame["size_bytes"] > 0).all()
    for rec in frame.itertuples():
        algbw = rec.size_bytes / rec.time_us / 1e3
        rel = _half_unit(rec.time_us) / rec.time_us
        assert abs(algbw - rec.algbw_GBps) <= 0.0051 + algbw * rel, (path.name, rec.line, rec.placement)
        assert abs(algbw * factor - rec.busbw_GBps) <= 0.0051 + algbw * factor * rel, (path.name, rec.line)


@needs_logs
@pytest.mark.parametrize("path", LOGS, ids=[p.name for p in LOGS])
def test_rank_count_of_the_header_matches_the_busbw_ratio(path):
    log = read_nccl_tests(path)
    inferred = _ranks_from_ratio(list(log.rows), log.collective)
    if bus_factor(log.collective, 2) == bus_factor(log.collective, 3):
        assert inferred is None  # broadcast / reduce / sendrecv: the ratio says nothing
    elif inferred is not None:
        assert inferred == log.num_ranks


@needs_logs
def test_facts_of_one_published_log():
    log = read_nccl_tests(MEASUREMENTS / "h100-80gb-hbm3-x8_all_reduce_ring_together.log")
    assert (log.collective, log.num_ranks, log.nodes, log.gpus_per_node) == ("allreduce", 8, 1, 8)
    assert (log.library, log.version) == ("NCCL", "2.26.2")
    assert len(log.rows) == 31 and log.rows[0].size_bytes == 8 and log.rows[-1].size_bytes == 8 << 30
    assert log.rows[0].root == -1 and log.rows[0].redop == "sum"
    frame = log.frame()
    assert list(frame["placement"].unique()) == ["out-of-place", "in-place"] and len(frame) == 62


@needs_logs
def test_forced_algorithm_and_old_formats():
    assert read_nccl_tests(MEASUREMENTS / "h100-x8-n2_all_reduce_ring-minctas24_nccltests309-gjaion.log").algo == "Ring"
    old = read_nccl_tests(MEASUREMENTS / "a100-sxm4-40gb-x8_alltoall_superbench.log")  # blank redop column
    assert old.collective == "alltoall" and old.rows[0].redop is None and old.rows[0].root is None
    bcast = read_nccl_tests(MEASUREMENTS / "a100-sxm4-40gb-x8_broadcast_superbench.log")  # root, no redop
    assert bcast.rows[-1].root == 0 and bcast.rows[-1].redop is None
    # size-0 placeholder rows stay in .rows but leave the tidy frame
    assert any(r.size_bytes == 0 for r in old.rows) and (old.frame()["size_bytes"] > 0).all()


# -- hand-written logs -----------------------------------------------------------
GOOD = """\
# Collective test starting: all_gather_perf
# nThread 1 nGpus 1 minBytes 1024 maxBytes 4096 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid   1001 on     node-a device  0 [0x18] NVIDIA A100-SXM4-80GB
#  Rank  1 Group  0 Pid   1002 on     node-a device  1 [0x2a] NVIDIA A100-SXM4-80GB
#  Rank  2 Group  0 Pid   2001 on     node-b device  0 [0x18] NVIDIA A100-SXM4-80GB
#  Rank  3 Group  0 Pid   2002 on     node-b device  1 [0x2a] NVIDIA A100-SXM4-80GB
NCCL version 2.19.3+cuda12.2
node-a:1001:1001 [0] NCCL INFO NCCL_PROTO set by environment to Simple
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
        1024            64     float    none      -1    20.00    0.05    0.04      0    20.00    0.05    0.04      0
node-a:1001:1001 [0] NCCL INFO some interleaved line
        2048           128     float    none      -1    20.48    0.10    0.07      0    20.48    0.10    0.07    N/A
        4096           256     float    none      -1    40.96    0.10    0.07      0    40.96    0.10    0.07      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 0.06
#
"""


def test_full_nccl_tests_output_with_header_lines():
    log = parse_nccl_tests(GOOD, path="run.txt")
    assert log.collective == "allgather" and log.num_ranks == 4 and log.ranks_from == "rank lines"
    assert (log.nodes, log.gpus_per_node) == (2, 2)
    assert log.devices == ("NVIDIA A100-SXM4-80GB",) * 4
    assert (log.library, log.version, log.proto, log.algo) == ("NCCL", "2.19.3+cuda12.2", "Simple", None)
    assert log.avg_busbw_GBps == pytest.approx(0.06)
    assert [r.size_bytes for r in log.rows] == [1024, 2048, 4096]
    assert log.rows[1].inplace_wrong is None and log.rows[1].wrong == 0
    assert log.rows[2].line == 18


def test_srun_task_labels_are_stripped():
    labelled = "\n".join("0: " + line for line in GOOD.splitlines())
    assert len(parse_nccl_tests(labelled).rows) == 3


def test_overrides_and_collective_from_file_name():
    text = GOOD.replace("# Collective test starting: all_gather_perf\n", "")
    with pytest.raises(NcclTestsLogError, match="cannot tell which collective"):
        parse_nccl_tests(text, path="run.txt")
    assert parse_nccl_tests(text, path="x/reduce_scatter_perf.out").collective == "reducescatter"
    assert parse_nccl_tests(text, path="run.txt", collective="alltoall", num_ranks=8).num_ranks == 8


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


BAD = {
    "truncated row": ("".join(_lines(GOOD)[:17]) + "        8192   512   float    none   -1    81.92\n", ":18:"),
    "no table": ("# nThread 1 nGpus 1\nNCCL version 2.19.3\n", ":1:"),
    "header without rows": ("".join(_lines(GOOD)[:14]), ":13:"),
    "non-numeric time": (GOOD.replace("40.96    0.10", "abc      0.10", 1), ":18:"),
    "negative busbw": (GOOD.replace("20.48    0.10    0.07", "20.48    0.10   -0.07", 1), ":17:"),
    "second table": (GOOD + "".join(_lines(GOOD)[12:15]), ":22:"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_logs_raise_one_line_naming_file_and_line(case, tmp_path):
    text, where = BAD[case]
    path = tmp_path / "bad.log"
    path.write_text(text)
    with pytest.raises(NcclTestsLogError) as info:
        read_nccl_tests(path)
    message = str(info.value)
    assert isinstance(info.value, SimcollError)
    assert "\n" not in message and message.startswith(f"{path}{where}"), message


def test_bus_factor_values():
    assert bus_factor("all_reduce", 8) == pytest.approx(1.75)
    assert bus_factor("allgather", 8) == pytest.approx(0.875)
    assert bus_factor("alltoall", 4) == pytest.approx(0.75)
    assert bus_factor("broadcast", 8) == bus_factor("sendrecv", 2) == 1.0


def test_an_environment_quoted_in_a_description_line_counts():
    """Curated headers describe the run's command in prose ("... as env
    NCCL_ALGO=RING ..."); that sets the algorithm, a mere mention does not."""
    table = (
        "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n"
        "     1048576        262144     float     sum      -1    100.0   10.49   18.35      0    100.0   10.49   18.35      0\n"
    )
    forced = "# Collective: all_reduce; forced Ring (the script runs it as env NCCL_ALGO=RING NCCL_NVLS_ENABLE=0)\n"
    mentioned = "# Collective: all_reduce; NCCL_ALGO=RING expected from the config name (exact env not printed)\n"
    assert parse_nccl_tests(forced + table, path="all_reduce_perf.log", num_ranks=8).algo == "RING"
    assert parse_nccl_tests(mentioned + table, path="all_reduce_perf.log", num_ranks=8).algo is None


def test_collnet_enabled_by_the_environment_is_read():
    """NCCL_COLLNET_ENABLE=1 (IB SHARP through NCCL's CollNet) puts CollNet
    among NCCL's choices; the log says so the way it says NCCL_ALGO."""
    table = (
        "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n"
        "     1048576        262144     float     sum      -1    100.0   10.49   18.35      0    100.0   10.49   18.35      0\n"
    )
    enabled = "node-a:1001:1001 [0] NCCL INFO NCCL_COLLNET_ENABLE set by environment to 1.\n"
    disabled = "# Env: NCCL_COLLNET_ENABLE=0 NCCL_ALGO=Ring\n"
    assert parse_nccl_tests(enabled + table, path="all_reduce_perf.log", num_ranks=8).collnet
    off = parse_nccl_tests(disabled + table, path="all_reduce_perf.log", num_ranks=8)
    assert (off.collnet, off.algo) == (False, "Ring")
    assert not parse_nccl_tests(table, path="all_reduce_perf.log", num_ranks=8).collnet


def test_channel_counts_set_by_the_environment_are_read():
    table = (
        "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n"
        "     1048576        262144     float     sum      -1    100.0   10.49   18.35      0    100.0   10.49   18.35      0\n"
    )
    env = (
        "# Env: NCCL_MIN_CTAS=24 NCCL_IB_QPS_PER_CONNECTION=2\n"
        "node-a:1001:1001 [0] NCCL INFO NCCL_MAX_NRINGS set by environment to 8.\n"
    )
    log = parse_nccl_tests(env + table, path="all_reduce_perf.log", num_ranks=8)
    assert log.channel_limits == ChannelLimits(min_ctas=24, max_channels=8)
    assert hash(log)  # the log stays a value
    assert parse_nccl_tests(table, path="all_reduce_perf.log", num_ranks=8).channel_limits is None
    # NCCL_MAX_NCHANNELS overrides the older NCCL_MAX_NRINGS whatever the order; 0 counts as 1, as in NCCL
    both = "# Env: NCCL_MAX_NCHANNELS=4 NCCL_MAX_NRINGS=8 NCCL_MIN_CTAS=0\n"
    assert parse_nccl_tests(both + table, path="all_reduce_perf.log", num_ranks=8).channel_limits == ChannelLimits(
        max_channels=4, min_ctas=0
    )
    assert ChannelLimits(max_channels=0).ring(16) == 1


@needs_logs
def test_the_published_sharp_run_enables_collnet():
    assert read_nccl_tests(MEASUREMENTS / "a100-sxm4-80gb-x8-n4_all_reduce_sharp_coreweave.log").collnet
    assert not read_nccl_tests(MEASUREMENTS / "h100-x8-n2_all_reduce_nccltests309-gjaion.log").collnet

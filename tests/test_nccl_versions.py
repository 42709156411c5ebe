"""NCCL as each paper ran it (issue 53): the tuner of each release, its
environment, and the choice column naming both."""

from __future__ import annotations

import pytest

from simcoll.errors import OptionError
from simcoll.machines import as_machine
from simcoll.nccl.baseline import choice_label, nccl_algorithm, nccl_choice, nccl_machine, nic_path
from simcoll.nccl.tuner import Comm, Graph, predict_time_us
from simcoll.nccl.versions import VERSIONS, NcclSetup, as_setup, constants_for, release


@pytest.mark.parametrize("version", list(VERSIONS))
def test_every_release_loads_and_cites_its_source(version):
    constants = constants_for(version)
    assert constants.version.startswith(version + ".")
    assert f"v{constants.version}" in constants.source


def test_release_spellings():
    assert release("2.7") == release("2.7.8") == release("v2.7.8-1") == "2.7"
    with pytest.raises(OptionError, match="unknown NCCL version '2.9'"):
        release("2.9")


def test_ring_latency_of_nccl_2_7_is_its_closed_form():
    # NCCL 2.7.8 tuning.cc: ring LL on one node = baseLat 3.6 + (n - 1) x hwLat[NVLink][ring][LL] 0.47,
    # bandwidth = nChannels x bwIntra / 3 (one-node Allgather) x n / (n - 1)
    comm = Comm(8, 1, 70, {"ring": Graph(12, 21.0), "tree": Graph(12, 21.0)}, constants=constants_for("2.7"))
    expected = 3.6 + 7 * 0.47 + 4096 / (1000 * 12 * 21.0 / 3 * 8 / 7)
    assert predict_time_us(comm, "allgather", "ring", "ll", 4096) == pytest.approx(expected)


def test_older_releases_lack_newer_algorithms_and_protocols():
    for size in (1 << 10, 1 << 20, 1 << 28):
        assert nccl_choice("dgx-h100", "allreduce", size, nccl="2.8").algorithm in ("ring", "tree")
        assert nccl_choice("dgx1", "allreduce", size, nccl="2.4").protocol in ("ll", "simple")
    assert nccl_choice("dgx-h100", "allreduce", 1 << 28).algorithm == "nvls"  # 2.30 has NVLS


def test_nccl_2_4_picks_ll_below_its_threshold_and_simple_above():
    small, large = (nccl_choice("dgx1", "allgather", s, nccl="2.4") for s in (1 << 10, 1 << 28))
    assert (small.protocol, large.protocol) == ("ll", "simple")


def test_nccl_proto_restricts_the_choice_as_nccl_parses_it():
    simple = NcclSetup.parse("2.7", {"NCCL_PROTO": "Simple"})
    assert {nccl_choice("dgx1", "allgather", s, nccl=simple).protocol for s in (1 << 10, 1 << 20)} == {"simple"}
    assert NcclSetup.parse("2.30", ["NCCL_PROTO=^LL"]).protocols() == ("ll128", "simple")
    with pytest.raises(OptionError, match="LL256"):
        NcclSetup.parse("2.7", {"NCCL_PROTO": "LL256"})
    with pytest.raises(OptionError, match="NCCL_BUFFSIZE"):
        NcclSetup.parse("2.7", {"NCCL_BUFFSIZE": "1"})
    with pytest.raises(OptionError, match="unknown field"):
        as_setup({"version": "2.7", "enviroment": {}})


def test_the_choice_column_names_release_and_environment():
    setup = NcclSetup.parse("2.7", {"NCCL_PROTO": "Simple"})
    label = choice_label(nccl_algorithm("dgx1", "allgather", 1 << 20, nccl=setup))
    assert label.startswith("ring/Simple/") and label.endswith("[NCCL 2.7.8, NCCL_PROTO=Simple]")
    assert "[" not in choice_label(nccl_algorithm("dgx1", "allgather", 1 << 20))  # the default says nothing


def test_ll128_needs_the_nic_within_pxb():
    # Summit's NICs hang off the POWER9 CPUs (PHB) and NDv2's have no GPUDirect RDMA (NCCL routes through
    # the CPU): LL128 stays off across nodes; a DGX A100's NICs share the GPUs' PCIe switches
    assert nic_path(as_machine("summit*2").topology, 0) == "PHB"
    for machine in ("summit*2", "ndv2*2"):
        for version in ("2.7", "2.30"):
            choices = {nccl_choice(machine, "allreduce", 1 << s, nccl=version).protocol for s in range(10, 30, 2)}
            assert "ll128" not in choices, (machine, version)
    assert nccl_machine("dgx-a100*2").comm.nic_path == "PIX"


def test_every_nic_of_a_dgx2_pair_carries_nccl_channels():
    from simcoll.algorithms.nccl import nccl_rings, nearest_nics

    machine = as_machine("dgx2*2")
    channels = nccl_machine(machine).comm.n_channels
    assert channels % 8 == 0  # every NIC the same number of channels
    topology = machine.topology
    crossing = {
        nearest_nics(topology, u)[0]
        for ring in nccl_rings(topology, channels)
        for u, v in zip(ring, ring[1:] + ring[:1], strict=True)
        if topology.gpu(u).node != topology.gpu(v).node
    }
    assert len(crossing) == 16  # all 8 NICs of both nodes


def test_compare_cli_names_the_release_and_reads_nccl_proto(capsys, monkeypatch):
    from simcoll.cli import main

    args = ["compare", "--nccl", "2.7", "-t", "dgx1", "-c", "allgather", "--sizes", "1KB,1MB", "--algorithms", "nccl"]
    assert main([*args, "-q"]) == 0
    out = capsys.readouterr().out
    assert "[NCCL 2.7.8]" in out and "ring/LL/" in out and "baseline NCCL 2.7.8" in out
    monkeypatch.setenv("NCCL_PROTO", "Simple")
    assert main([*args, "-q"]) == 0
    out = capsys.readouterr().out
    assert "ring/Simple/" in out and "ring/LL/" not in out and "NCCL_PROTO=Simple" in out
    assert main([*args, "-q", "--nccl-env", "NCCL_PROTO=LL"]) == 0  # the option wins over the environment
    assert "ring/LL/1ch [NCCL 2.7.8, NCCL_PROTO=LL]" in capsys.readouterr().out
    assert main(["compare", "--nccl", "2.9", "-q"]) == 2


def test_every_schedule_runs_under_the_baselines_protocol():
    # a comparison differs in the schedule only: beside NCCL 2.7 with NCCL_PROTO=Simple (SCCL's baseline)
    # the ring runs Simple too, in compare and in a study, where beside NCCL 2.30 it runs LL at 1 KB
    from simcoll.algorithms import generate
    from simcoll.compare import compare
    from simcoll.evaluation import schedule_time_s
    from simcoll.sweeps.runner import run_batch
    from simcoll.sweeps.study import expand, load_study

    machine = as_machine("dgx1")
    ring = generate("ring", machine, "allreduce")
    simple, ll = (schedule_time_s(ring, machine, 1024, protocol=p) for p in ("Simple", "LL"))
    assert simple > ll
    sccl = NcclSetup.parse("2.7", {"NCCL_PROTO": "Simple"})
    for nccl, expected in ((sccl, simple), (None, ll)):
        df, _ = compare(machine, "allreduce", [1024], algorithms=["ring", "nccl"], nccl=nccl)
        assert df[df.algorithm == "ring"].time_s.item() == pytest.approx(expected)
    study = {
        "name": "t",
        "machines": ["dgx1"],
        "collectives": ["allreduce"],
        "algorithms": ["ring", {"nccl": {"version": "2.7", "env": {"NCCL_PROTO": "Simple"}}, "name": "nccl"}],
        "sizes": "1KB",
    }
    batch = next(b for b in expand(load_study(study)) if b.algorithm.label == "ring")
    assert run_batch(batch)[0]["time_s"] == pytest.approx(simple)


def test_nccl_buffsize_sets_the_pieces_nccls_pipelines_move():
    """Issue 50: NCCL_BUFFSIZE (Simple's buffer per connection, moved in NCCL_STEPS = 8 steps) sets
    the piece NCCL's tree pipelines a channel's share in: a 2-node tree at 64 MB moves 24 channels'
    shares in 512 KiB steps by default; 128 KiB steps take more pieces, 2 MiB steps fewer."""
    from simcoll.errors import OptionError
    from simcoll.machines import load_machine
    from simcoll.nccl.baseline import nccl_algorithm, pipeline_pieces
    from simcoll.nccl.versions import NcclSetup

    assert NcclSetup.parse(None, {"NCCL_BUFFSIZE": "0x400000"}).buffer_bytes() == 4 << 20
    for bad in ("lots", "4", "-1"):
        with pytest.raises(OptionError, match="NCCL_BUFFSIZE"):
            NcclSetup.parse(None, {"NCCL_BUFFSIZE": bad})
    machine = load_machine("dgx-a100*2")
    default = nccl_algorithm(machine, "allreduce", 64 << 20, algorithms=["tree"], protocols=["simple"])
    assert default.metadata["nccl_choice"].startswith("tree/Simple/")
    pieces = {}
    for buffer in (1 << 20, 4 << 20, 16 << 20):
        setup = NcclSetup.parse(None, {"NCCL_BUFFSIZE": str(buffer)})
        algo = nccl_algorithm(machine, "allreduce", 64 << 20, algorithms=["tree"], protocols=["simple"], nccl=setup)
        assert algo.metadata["nccl_setup"] == f"NCCL 2.30.7, NCCL_BUFFSIZE={buffer}"
        pieces[buffer] = algo.chunks
    assert pieces[4 << 20] == default.chunks  # NCCL's default buffer: the model's own 512 KiB slot
    assert pieces[1 << 20] > pieces[4 << 20] > pieces[16 << 20]
    assert pipeline_pieces(machine, "allreduce", 64 << 20, 24, "tree") == 6
    with pytest.raises(OptionError, match="has no executor section"):
        nccl_algorithm("ring:4", "allreduce", 1 << 20, nccl={"env": {"NCCL_BUFFSIZE": "1048576"}})


def test_a_logs_nccl_buffsize_is_read():
    from simcoll.calibration import parse_nccl_tests

    text = (
        "# NCCL INFO NCCL_BUFFSIZE set by environment to 1048576.\n"
        "#       size         count    type   redop     time   algbw   busbw  error     time   algbw   busbw  error\n"
        "        1024           256   float     sum    10.00    0.10    0.18  0e+00    10.00    0.10    0.18  0e+00\n"
    )
    assert parse_nccl_tests(text, path="all_reduce_perf.log", num_ranks=8).buffsize == 1 << 20


def test_nccl_nvls_enable_0_takes_nvlink_sharp_away():
    """NCCL_NVLS_ENABLE=0 leaves a communicator without NVLS support (src/transport/nvls.cc): the
    tuner's NVLS choice on a DGX H100 becomes the ring, and NVLS-tree across nodes goes too; set in
    a log (the together ring configuration), validation and calibration run NCCL that way."""
    from simcoll.calibration import parse_nccl_tests
    from simcoll.calibration.calibrate import samples_of
    from simcoll.errors import OptionError
    from simcoll.machines import load_machine
    from simcoll.nccl.baseline import nccl_choice
    from simcoll.nccl.versions import NcclSetup

    off = NcclSetup.parse(None, {"NCCL_NVLS_ENABLE": "0"})
    assert off.nvls_enabled() is False and NcclSetup.parse(None, {}).nvls_enabled() is None
    with pytest.raises(OptionError, match="NCCL_NVLS_ENABLE"):
        NcclSetup.parse(None, {"NCCL_NVLS_ENABLE": "yes"})
    assert nccl_choice("dgx-h100", "allreduce", 1 << 30).algorithm == "nvls"
    assert nccl_choice("dgx-h100", "allreduce", 1 << 30, nccl=off).algorithm == "ring"
    assert nccl_choice("dgx-h100*2", "allreduce", 1 << 30).algorithm == "nvls_tree"
    assert not nccl_choice("dgx-h100*2", "allreduce", 1 << 30, nccl=off).algorithm.startswith("nvls")
    text = (
        "# Env: NCCL_NVLS_ENABLE=0 NCCL_COLLNET_ENABLE=0\n"
        "#       size         count    type   redop     time   algbw   busbw  error     time   algbw   busbw  error\n"
        "  1073741824     268435456   float     sum  4000.00  268.44  469.77  0e+00  4000.00  268.44  469.77  0e+00\n"
    )
    log = parse_nccl_tests(text, path="all_reduce_perf.log", num_ranks=8)
    assert log.nvls is False and log.nccl_env() == {"NCCL_NVLS_ENABLE": "0"}
    (sample,) = samples_of(log, load_machine("dgx-h100"))
    assert sample.choice.startswith("ring/")

"""``simcoll simulate`` and the simulator in ``simcoll compare`` (issue 7 item 6)."""

import json

import pytest

from simcoll import load_machine
from simcoll.algorithms import generate
from simcoll.analytic import critical_path_time_s
from simcoll.cli import main
from simcoll.compare import compare


@pytest.fixture()
def ring_file(tmp_path):
    machine = load_machine("dgx1")
    algorithm = generate("ring", machine, "allreduce")
    path = tmp_path / "ring.json"
    path.write_text(algorithm.to_json())
    return path, algorithm, machine


def _json(capsys, argv):
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_simulate_json_has_the_documented_keys(ring_file, capsys, tmp_path):
    path, algorithm, machine = ring_file
    trace = tmp_path / "trace.json"
    out = _json(capsys, ["simulate", str(path), "-t", "dgx1", "--size", "1MB", "--json", "--trace", str(trace)])
    assert {"time_s", "algbw_GBps", "busbw_GBps", "transfers"} <= set(out)
    assert out["mode"] == "algorithm" and out["transfers"] == len(algorithm.transfers)
    # the DGX-1 ring uses one NVLink pair at a time: simulation = critical path
    assert out["time_s"] == pytest.approx(critical_path_time_s(algorithm, machine, 1 << 20), rel=1e-9)
    events = json.loads(trace.read_text())["traceEvents"]
    assert any(e["ph"] == "X" for e in events)


def test_simulate_analytic_prints_the_critical_path(ring_file, capsys):
    path, algorithm, machine = ring_file
    out = _json(capsys, ["simulate", str(path), "-t", "dgx1", "--size", "64MB", "--analytic", "--json"])
    assert out["method"] == "analytic"
    assert out["time_s"] == critical_path_time_s(algorithm, machine, 64 << 20)
    assert out["busbw_GBps"] == pytest.approx(out["algbw_GBps"] * 2 * 7 / 8)


def test_simulate_text_output(ring_file, capsys):
    path, _, _ = ring_file
    assert main(["simulate", str(path), "-t", "dgx1", "--size", "1KB"]) == 0
    text = capsys.readouterr().out
    assert "algorithm mode" in text and "busbw" in text


@pytest.mark.parametrize(
    "extra, message",
    [
        (["-t", "dgx2"], "8 ranks"),
        (["-t", "dgx1", "--mode", "algorithm", "--size", "zz"], "size"),
        (["-t", "dgx1", "--analytic", "--trace", "x.json"], "--trace needs a simulation"),
    ],
)
def test_simulate_bad_input_exits_2(ring_file, capsys, extra, message):
    path, _, _ = ring_file
    argv = ["simulate", str(path), "--size", "1MB", *extra]
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_compare_simulates_by_default_and_keeps_analytic():
    machine = load_machine("ring:4")
    sim, _ = compare(machine, "allgather", [1024, 1 << 24])
    ana, _ = compare(machine, "allgather", [1024, 1 << 24], method="analytic")
    assert set(sim["method"]) == {"simulate"} and set(ana["method"]) == {"analytic"}
    assert list(sim.columns) == list(ana.columns)
    # ring:4 links are never shared by these algorithms at once: same times
    assert sim["time_s"].to_numpy() == pytest.approx(ana["time_s"].to_numpy(), rel=1e-9)
    assert sim.groupby("size_bytes")["best"].sum().eq(1).all()


def test_compare_with_program_mode_rows():
    machine = load_machine("ring:4")
    df, _ = compare(machine, "allgather", [1 << 20], program=True)
    assert {"simulate", "program"} <= set(df["method"])
    for _name, rows in df.groupby("algorithm"):
        if len(rows) == 2:
            sim = rows[rows.method == "simulate"].time_s.iloc[0]
            prog = rows[rows.method == "program"].time_s.iloc[0]
            # the generic model has no executor section, so no tiling: the Program cannot
            # pipeline below its Algorithm's messages, and its runtime only adds costs
            assert prog >= sim * (1 - 1e-9)
    assert not df[df.method == "program"]["best"].any()


def test_compare_cli_analytic_flag(capsys):
    out = _json(capsys, ["compare", "-t", "ring:4", "-c", "allgather", "--sizes", "1KB", "--analytic", "--json"])
    assert out["method"] == "analytic" and {r["method"] for r in out["rows"]} == {"analytic"}
    out = _json(capsys, ["compare", "-t", "ring:4", "-c", "allgather", "--sizes", "1KB", "--json"])
    assert out["method"] == "simulate"


def test_simulate_program_mode_lowers_an_algorithm(ring_file, capsys):
    path, algorithm, machine = ring_file
    out = _json(capsys, ["simulate", str(path), "-t", "dgx1", "--size", "1MB", "--mode", "program", "--json"])
    assert out["mode"] == "program" and out["transfers"] >= len(algorithm.transfers)
    # the DGX-1 model's runtime (thread-block cap below a link, kernel launch) only adds time
    assert out["time_s"] > critical_path_time_s(algorithm, machine, 1 << 20)


def test_simulate_runs_a_generator_in_one_process(capsys):
    """Issue 51: ``simulate ring -t ring:N -c allreduce --size S`` generates and simulates in one
    process, the schedule checked once, the same time as the file path gives."""
    from simcoll.algorithms import generate
    from simcoll.cli import main
    from simcoll.machines import load_machine
    from simcoll.simulator import simulate

    assert main(["simulate", "ring", "-t", "ring:16", "-c", "allreduce", "--size", "1MB", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    machine = load_machine("ring:16")
    assert out["time_s"] == pytest.approx(simulate(generate("ring", machine, "allreduce"), machine, 1 << 20).time_s)
    assert out["name"] == "ring" and out["collective"] == "allreduce"
    assert main(["simulate", "ring", "-t", "ring:16", "--size", "1MB"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "a generator needs --collective" in err
    assert main(["simulate", "hiccl", "-t", "ring:16", "-c", "allreduce", "--option", "nope=1", "--size", "1MB"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_a_schedule_algo_generate_checked_is_not_checked_again(tmp_path, monkeypatch, capsys):
    """Issue 51 item 3: ``algo generate -o`` writes the record of its check beside the schedule
    (content digest, topology digest, simcoll version); ``simulate`` of that file does not check
    it again, unless the schedule, the topology or the version differ."""
    import simcoll.verify as verify_module
    from simcoll.algorithm import Algorithm
    from simcoll.verify.record import record_holds

    path = tmp_path / "ring.npz"
    assert main(["algo", "generate", "ring", "-t", "ring:8", "-c", "allreduce", "-o", str(path)]) == 0
    algo = Algorithm.load(path)
    assert record_holds(algo, load_machine("ring:8"))
    assert not record_holds(algo, load_machine("fully-connected:8"))  # another topology: checked again
    calls = []
    real_check = verify_module.check
    monkeypatch.setattr(verify_module, "check", lambda *a, **k: calls.append(1) or real_check(*a, **k))
    assert main(["simulate", str(path), "-t", "ring:8", "--size", "1MB"]) == 0
    assert calls == []
    assert main(["simulate", str(path), "-t", "fully-connected:8", "--size", "1MB"]) == 0
    assert calls == [1]
    # the same transfers but one: the digest no longer matches, and the check finds the fault
    edited = algo.with_changes(transfers=list(algo.transfers)[1:])
    assert edited.metadata["checked"] == algo.metadata["checked"] and not record_holds(edited, load_machine("ring:8"))
    edited.save(tmp_path / "edited.json")
    capsys.readouterr()
    assert main(["simulate", str(tmp_path / "edited.json"), "-t", "ring:8", "--size", "1MB"]) != 0
    assert calls == [1, 1]
    # metadata is not content: a record survives relabelling the metadata, not the name
    assert algo.relabelled(metadata={**algo.metadata, "note": "x"}).content_digest() == algo.content_digest()
    assert algo.relabelled(name="other").content_digest() != algo.content_digest()

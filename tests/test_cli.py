"""The simcoll command line, as a user runs it."""

import argparse
import json
import subprocess
import sys

import pandas as pd
import pytest

from simcoll.cli import build_parser, main


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "simcoll", *args], capture_output=True, text=True, timeout=300)


HEAVY = ("pandas", "matplotlib", "ortools", "z3", "simpy")


def test_python_m_simcoll_help_lists_every_command():
    result = run("--help")
    assert result.returncode == 0, result.stderr
    for command in ("topo", "bounds", "verify", "algo", "synth", "compare", "simulate", "export", "import"):
        assert command in result.stdout


def test_the_cli_imports_no_solver_pandas_or_plotting():
    """Building the whole parser (what `simcoll --help` does) loads none of the heavy dependencies."""
    code = (
        "import sys\n"
        "from simcoll.cli import build_parser\n"
        "build_parser()\n"
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ""


@pytest.mark.parametrize(
    "command",
    [
        ["simulate", "ring", "-t", "ring:64", "-c", "allreduce", "--size", "1MB"],
        ["simulate", "recursive-doubling", "-t", "hypercube:6", "-c", "allgather", "--size", "1MB"],
        ["algo", "generate", "ring", "-t", "ring:64", "-c", "allreduce", "-o", "-"],
    ],
)
def test_generating_and_simulating_a_ring_imports_no_networkx_pandas_or_plotting(command):
    """Issue 51 item 4: a schedule on a machine of direct links, from generator to result, imports
    neither networkx (its routes are chains, whose flow is read off; a machine's connectivity is a
    plain search) nor pandas nor matplotlib: most of a small command's start-up otherwise. (Routes
    over parallel paths, a DGX's NVSwitch planes, take networkx's maximum flow.)"""
    code = (
        "import sys, contextlib, io\n"
        "from simcoll.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    code = main({command!r})\n"
        "print(code, ','.join(m for m in ('networkx', 'pandas', 'matplotlib') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["0"]


def _leaf_commands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()):
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield prefix
    for action in subs:
        for name, child in action.choices.items():
            yield from _leaf_commands(child, (*prefix, name))


def test_every_command_builds_its_options_and_prints_help(capsys):
    """Options are added when a command is parsed: each one's --help must build them and exit 0."""
    leaves = list(_leaf_commands(build_parser()))
    assert {("topo", "show"), ("algo", "generate"), ("synth", "taccl"), ("compare",), ("export",)} <= set(leaves)
    for leaf in leaves:
        with pytest.raises(SystemExit) as exit_info:
            build_parser().parse_args([*leaf, "--help"])
        assert exit_info.value.code == 0, leaf
        assert capsys.readouterr().out.startswith(f"usage: simcoll {' '.join(leaf)}"), leaf


def test_shared_options_keep_their_short_forms():
    args = build_parser().parse_args(["bounds", "-t", "dgx1", "-c", "allgather", "-m", "dgx1"])
    assert (args.topology, args.collective, args.model, args.chunks) == ("dgx1", "allgather", "dgx1", 1)
    args = build_parser().parse_args(["compare"])
    assert (args.topology, args.collective, args.sizes) == ("dgx1", "allreduce", "1KB:1GB")


def test_topo_show_dgx1_json(capsys):
    assert main(["topo", "show", "dgx1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["name"] == "dgx1" and out["ranks"] == 8
    counts = {(lk["src"], lk["dst"]): lk["count"] for lk in out["links"] if lk["type"] == "nvlink"}
    assert counts[("gpu0", "gpu1")] == 2 and counts[("gpu0", "gpu2")] == 1 and len(counts) == 16


def test_topo_list_and_every_builtin_and_generator_loads(capsys):
    assert main(["topo", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    specs = [b["name"] for b in listed["builtins"]] + [
        "ring:6",
        "line:3",
        "fully-connected:4",
        "hub-and-spoke:4",
        "torus2d:2x4",
        "hypercube:3",
        "dgx-h100*2",
        "perlmutter*2/rail",
    ]
    for spec in specs:
        assert main(["topo", "show", spec, "--json"]) == 0, spec
        capsys.readouterr()


def test_bad_yaml_fails_with_a_clear_message(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\ngpus: 2\nlinks:\n  - [gpu0, gpu1, nvlink, 0]\n")
    result = run("topo", "show", str(bad))
    assert result.returncode != 0
    assert "bad.yaml: links[0].count" in result.stderr and "Traceback" not in result.stderr


def test_bounds_dgx1_allgather(capsys):
    assert main(["bounds", "--topology", "dgx1", "--collective", "allgather", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["min_steps"] == 2 and out["min_rounds_per_chunk"] == "7/6" and "algbw_bound_GBps" not in out
    assert main(["bounds", "-t", "dgx1", "-c", "allgather", "--model", "dgx1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["algbw_bound_GBps"] == pytest.approx(8 / 7 * 150)


def test_generate_then_verify(tmp_path, capsys):
    path = tmp_path / "ring.json"
    assert main(["algo", "generate", "ring", "-t", "dgx1", "-c", "allreduce", "--chunks", "16", "-o", str(path)]) == 0
    assert main(["verify", str(path), "--topology", "dgx1"]) == 0
    assert "correct" in capsys.readouterr().out
    data = json.loads(path.read_text())
    data["transfers"].pop()
    path.write_text(json.dumps(data))
    assert main(["verify", str(path)]) == 1
    assert "incorrect" in capsys.readouterr().out
    assert main(["verify", str(path), "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["correct"] is False


def test_verify_stops_at_its_time_limit_and_an_orbit_file_verifies(tmp_path, capsys):
    path = tmp_path / "rings.npz"  # NCCL's rings on four nodes: an orbit of two images
    assert main(["algo", "generate", "nccl-ring", "-t", "dgx-h100*4", "-c", "allreduce", "-o", str(path)]) == 0
    assert main(["verify", str(path), "-t", "dgx-h100*4", "--time-limit", "60"]) == 0
    assert "correct" in capsys.readouterr().out
    assert main(["verify", str(path), "-t", "dgx-h100*4", "--time-limit", "1e-9"]) == 2
    assert "wall-clock limit of 1e-09 s reached" in capsys.readouterr().err
    assert main(["verify", str(path), "--time-limit", "0"]) == 2
    assert "--time-limit must be a positive number of seconds, got '0'" in capsys.readouterr().err


def test_algo_list_names_the_collectives(capsys):
    assert main(["algo", "list", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert {"ring", "direct"} <= set(rows) and "allreduce" in rows["ring"]["collectives"]


def test_compare_writes_one_row_per_algorithm_and_size(tmp_path):
    csv, png = tmp_path / "out.csv", tmp_path / "out.png"
    result = run("compare", "--topology", "dgx1", "--collective", "allreduce", "--csv", str(csv), "--plot", str(png))
    assert result.returncode == 0, result.stderr
    df = pd.read_csv(csv)
    sizes = 21  # 1KB .. 1GB doubling
    assert len(df) == df["algorithm"].nunique() * sizes and df["algorithm"].nunique() >= 2
    assert df.groupby("size_bytes")["best"].sum().eq(1).all()
    assert png.stat().st_size > 10_000
    assert {"time_s", "algbw_GBps", "busbw_GBps"} <= set(df.columns)


@pytest.mark.parametrize(
    "args, message",
    [
        (["compare", "-t", "nope"], "unknown topology 'nope'"),
        (["compare", "-t", "dgx1", "-c", "allgatherv"], "unknown collective"),
        (["compare", "-t", "dgx1", "--sizes", "1GB:1KB"], "empty"),
        (["algo", "generate", "ring", "-t", "line:3", "-c", "allgather"], "no Hamiltonian cycle"),
        (["algo", "generate", "ring", "-t", "dgx1", "-c", "allgather", "--option", "colour=red"], "no option"),
        (["verify", "/nonexistent.json"], "cannot read"),
    ],
)
def test_bad_input_exits_2_with_the_reason(args, message, capsys):
    assert main(args) == 2
    assert message in capsys.readouterr().err

"""Notebooks execute top to bottom; every experiment script runs in fast mode,
writes its CSV and PNG, and a seed study prints the paper's number beside ours."""

import json
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pandas as pd
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
# claims.py runs the five seed scripts and tabulates them (tests/test_claims.py), it is not a study
SCRIPTS = sorted(p for p in (ROOT / "experiments").glob("*.py") if not p.name.startswith("_") and p.stem != "claims")
SEED_SCRIPTS = {
    "sccl_dgx1.py",
    "gc3_fig7.py",
    "taccl_figs.py",
    "hiccl_figs.py",
    "nvgroup_figs.py",
    "nvgroup_training.py",
}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_executes(path):
    nb = nbformat.read(path, as_version=4)
    assert not any(c.get("outputs") for c in nb.cells if c.cell_type == "code"), "store notebooks without outputs"
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors


def test_every_study_script_has_a_notebook():
    stems = {p.stem for p in NOTEBOOKS}
    missing = [p.stem for p in SCRIPTS if p.stem != "machines_sweep" and p.stem not in stems]
    assert not missing


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_script_fast_mode_writes_csv_and_png(script, tmp_path):
    result = subprocess.run(
        [sys.executable, str(script), "--out", str(tmp_path), "--fast"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    csvs, pngs = sorted(tmp_path.glob("*.csv")), sorted(tmp_path.glob("*.png"))
    assert csvs and pngs
    assert all(p.stat().st_size > 5000 for p in pngs)
    assert not list(tmp_path.glob(".*.tmp")), "an atomic write left a temporary file"
    df = pd.read_csv(tmp_path / f"{script.stem}.csv") if (tmp_path / f"{script.stem}.csv").exists() else None
    if df is not None and {"algbw_GBps", "algbw_bound_GBps"} <= set(df.columns):
        bounded = df.dropna(subset=["algbw_bound_GBps"])
        assert (bounded.algbw_GBps <= bounded.algbw_bound_GBps * (1 + 1e-9)).all()  # nothing beats the bound
    if script.name in SEED_SCRIPTS:
        lines = [line for line in result.stdout.splitlines() if ": paper " in line and " | ours " in line]
        assert lines, result.stdout  # the paper's number beside ours
        # the speed-ups over NCCL use the simulated NCCL baseline (simcoll.nccl.baseline), which is installed
        assert "nccl baseline not available" not in result.stdout
        assert "n/a (nccl baseline not available)" not in result.stdout
    if script.stem == "whatif_fabric":
        # in-network reduction on/off: NVLS-tree and CollNet beside the rings; CollNet only with the fabric's SHARP
        inn = pd.read_csv(tmp_path / "whatif_fabric_innetwork.csv")
        done = inn[inn.status == "ok"]
        assert {"nccl-ring", "nvls-tree"} <= set(done.algorithm)
        assert set(done[done.algorithm == "collnet"].machine) == {m for m in inn.machine if "sharp on" in m}
    if script.stem == "whatif_innetwork":
        # the switches' reduce capability on/off: NVLS only where they reduce, and the NCCL baseline gains from it
        rows = df[df.status == "ok"].set_index(["machine", "algorithm", "size_bytes"]).time_s
        assert set(df[df.algorithm == "nvls"].status) == {"ok", "not-applicable"}
        assert not ((df.machine == "switch reduce off") & (df.algorithm == "nvls") & (df.status == "ok")).any()
        big = 1 << 30
        # NCCL picks NVLS, whose steps (simcoll.nccl.pipeline) cost a little more than the bare schedule
        assert 1.0 < rows[("switch reduce on", "nccl", big)] / rows[("switch reduce on", "nvls", big)] < 1.2
        assert rows[("switch reduce off", "nccl", big)] / rows[("switch reduce on", "nccl", big)] > 1.2
        if "measured logs not found" not in result.stdout:  # ../shared is there: the published busbw beside ours
            assert "measured 467.6 / 360.1 GB/s" in result.stdout
    if script.stem == "machines_sweep":
        assert set(df.collective) == {"allgather", "reducescatter", "allreduce"}


def test_speedups_over_nccl_use_point_to_point_for_alltoall_and_name_the_baseline():
    sys.path.insert(0, str(ROOT / "experiments"))
    try:
        import _common
    finally:
        sys.path.remove(str(ROOT / "experiments"))
    rows = [
        ("allreduce", "nccl", 1 << 10, 4.0),
        ("allreduce", "ring", 1 << 10, 2.0),
        ("allreduce", "direct", 1 << 10, 8.0),
        ("allreduce", "nccl", 1 << 30, 4.0),
        ("allreduce", "ring", 1 << 30, 5.0),
        ("alltoall", "direct", 1 << 30, 3.0),  # no nccl rows: NCCL's Alltoall is grouped send/recv
        ("alltoall", "sccl", 1 << 30, 1.0),
    ]
    df = pd.DataFrame(rows, columns=["collective", "algorithm", "size_bytes", "time_s"]).assign(
        machine="m", status="ok"
    )
    table = _common.speedups(df).set_index(["collective", "algorithm", "size_bytes"])
    assert table.speedup.to_dict() == {
        ("allreduce", "ring", 1 << 10): 2.0,
        ("allreduce", "direct", 1 << 10): 0.5,
        ("allreduce", "ring", 1 << 30): 0.8,
        ("alltoall", "sccl", 1 << 30): 3.0,
    }
    assert _common.best_speedup(df, "both", collective="allreduce") == "2.00x (ring, 1KB) / 0.80x (ring, 1GB)"
    assert _common.best_speedup(df, collective="alltoall") == "3.00x (sccl, 1GB over NCCL's send/recv (direct))"
    assert _common.best_speedup(df, machine="other").startswith("n/a")


#: A result typed into prose: a speed-up, a share, a bandwidth or a time.
TYPED_RESULT = re.compile(r"\d+(\.\d+)?\s*(x\b|×|%|GB/s|ms\b|us\b|µs|s\b)")


@pytest.mark.parametrize("script", sorted(SEED_SCRIPTS), ids=str)
def test_paper_notebooks_type_no_results(script):
    """The seed papers' notebooks show their figures from the run (a generated
    table), never typed into their prose, where they go stale (issue 53)."""
    notebook = json.loads((ROOT / "notebooks" / script.replace(".py", ".ipynb")).read_text())
    prose = ["".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "markdown"]
    typed = [m.group(0) for text in prose for m in TYPED_RESULT.finditer(text)]
    assert not typed, typed
    assert any("_common.report(result)" in "".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "code")

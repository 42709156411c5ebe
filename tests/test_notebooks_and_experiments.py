"""Notebooks execute top to bottom; experiments run in fast mode."""

import subprocess
import sys
from pathlib import Path

import nbformat
import pandas as pd
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("path", sorted((ROOT / "notebooks").glob("*.ipynb")), ids=lambda p: p.name)
def test_notebook_executes(path):
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors


def test_machines_sweep_fast_mode_writes_csv_and_png(tmp_path):
    result = subprocess.run(
        [sys.executable, str(ROOT / "experiments" / "machines_sweep.py"), "--out", str(tmp_path), "--fast"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    df = pd.read_csv(tmp_path / "machines_sweep.csv")
    assert set(df.collective) == {"allgather", "reducescatter", "allreduce"}
    assert (df.algbw_GBps <= df.algbw_bound_GBps * (1 + 1e-9)).all()  # nothing beats the bound
    assert (tmp_path / "machines_sweep.png").stat().st_size > 5000

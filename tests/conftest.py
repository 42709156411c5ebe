"""Shared fixtures and paths for the test suite."""

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"


@pytest.fixture(scope="session")
def dgx1():
    from simcoll import load_machine

    return load_machine("dgx1")

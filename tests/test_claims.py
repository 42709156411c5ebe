"""The claims table (issue 53): the papers' headline numbers as reference data,
and the verdicts ``experiments/claims.py`` gives ours."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def claims():
    sys.path.insert(0, str(ROOT / "experiments"))
    try:
        import _common
        import claims as module
    finally:
        sys.path.remove(str(ROOT / "experiments"))
    return module, _common


def test_every_claim_cites_its_figure_and_has_a_number(claims):
    _, common = claims
    table = common.paper_claims()
    assert len(table) >= 25
    for claim in table.values():
        assert claim["paper"] in {"SCCL", "GC3", "TACCL", "HiCCL", "NV-Group"}
        assert claim["where"] and claim["what"] and float(claim["value"]) > 0
        low, high = claim.get("range") or (claim["value"], claim["value"])
        assert low <= claim["value"] <= high


def test_the_scripts_compute_most_claims(claims):
    # each study names the claims it checks by id; those it cannot run are listed as not computed
    _, common = claims
    sources = " ".join((ROOT / "experiments" / f"{s}.py").read_text() for s in claims[0].STUDIES)
    named = [c for c in common.paper_claims() if c in sources or c.rsplit(".", 1)[0] in sources]
    assert len(named) >= 25


@pytest.mark.parametrize(
    ("metric", "value", "range_", "ours", "verdict"),
    [
        ("speedup", 2.2, None, 1.9, "within 20%"),
        ("speedup", 2.2, None, 2.7, "above"),
        ("speedup", 1.14, None, 0.6, "wrong direction"),
        ("speedup", 3.4, [1.61, 3.4], 1.7, "within 20%"),  # inside the stated range
        ("speedup", 3.4, [1.61, 3.4], 1.2, "below"),
        ("time_s", 2.6, None, 0.1, "as fast or faster"),
        ("time_s", 2.6, None, 4.0, "slower"),
        ("bandwidth_GBps", 25.0, None, 50.0, "above"),
        ("speedup", 2.5, None, None, "not computed"),
    ],
)
def test_verdicts(claims, metric, value, range_, ours, verdict):
    module, _ = claims
    claim = {"metric": metric, "value": value, "range": range_}
    assert module.verdict(claim, ours, value) == verdict


def test_table_joins_ours_to_the_papers_by_id(claims):
    module, common = claims
    ours = common.Comparison("x", "p", "o", "s", claim="sccl.fig4.allgather_small", value=1.9)
    table = module.claims_table({"sccl_dgx1": [ours]}).set_index("claim")
    row = table.loc["sccl.fig4.allgather_small"]
    assert row.verdict == "within 20%" and row.ratio == pytest.approx(1.9 / 2.2) and row.script == "sccl_dgx1"
    assert (table.drop(index="sccl.fig4.allgather_small").verdict == "not computed").all()
    assert "1 of" in module.summary(table.reset_index())


def test_readme_block_is_rewritten_atomically(claims, tmp_path):
    module, _ = claims
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{module.START}\nold\n{module.END}\noutro\n")
    module.write_readme(readme, "new table")
    assert readme.read_text() == f"intro\n{module.START}\nnew table\n{module.END}\noutro\n"
    readme.write_text("no block")
    with pytest.raises(SystemExit, match="no <!-- claims:start -->"):
        module.write_readme(readme, "x")


def test_every_cause_names_a_claim(claims):
    module, common = claims
    assert set(module.causes()) <= set(common.paper_claims())

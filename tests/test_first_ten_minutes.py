"""Issue 52: what a newcomer sees in the first ten minutes reads well.

`simcoll compare` prints one line per size and one busbw column per
algorithm, the best marked and NCCL's choice beside its column, and plots
human sizes on log axes with no two lines alike; `algo generate` without
`-o` prints one line; `synth sccl --pareto` prints its frontier once; `bounds`
prints sizes as sizes; two outputs at one path and negative improvement
passes are refused.
"""

from __future__ import annotations

import json
import re

import pytest

from simcoll.cli import main
from simcoll.compare import compare
from simcoll.compare_plot import NCCL_LABEL, comparison_figure

SIZES = ["1KB", "32KB", "1MB", "1GB"]


@pytest.fixture(scope="module")
def dgx1_allreduce():
    """The README's comparison at four sizes: rows and text output."""
    df, _ = compare("dgx1", "allreduce", [1 << 10, 1 << 15, 1 << 20, 1 << 30])
    return df


def _compare_text(capsys, *extra: str) -> list[str]:
    assert main(["compare", "-t", "dgx1", "-c", "allreduce", "--sizes", ",".join(SIZES), "-q", *extra]) == 0
    return capsys.readouterr().out.splitlines()


# -- compare: the terminal table ------------------------------------------------------------------
def test_compare_prints_one_line_per_size_and_one_column_per_algorithm(capsys, dgx1_allreduce):
    lines = _compare_text(capsys)
    rows = [line for line in lines if line.split()[:1] and line.split()[0] in SIZES]
    assert [row.split()[0] for row in rows] == SIZES
    header = next(i for i, line in enumerate(lines) if line.startswith("busbw (GB/s"))
    heading = " ".join(lines[header + 1 : lines.index(rows[0])])  # the column names, stacked
    algorithms = list(dict.fromkeys(dgx1_allreduce.algorithm))
    assert len(algorithms) >= 10
    for name in algorithms:
        assert all(part in heading for part in name.split("-")), name
    # every algorithm's busbw at every size is in its row, and nothing else is reported per row
    for row, size in zip(rows, SIZES, strict=True):
        at = dgx1_allreduce[dgx1_allreduce["size"] == size]
        numbers = re.findall(r"\d+\.\d\d", row)
        assert numbers[: len(at)] == [f"{b:.2f}" for b in at.busbw_GBps]


def test_compare_marks_the_best_per_size_and_shows_nccls_choice(capsys, dgx1_allreduce):
    lines = _compare_text(capsys)
    for size in SIZES:
        row = next(line for line in lines if line.split()[:1] == [size])
        at = dgx1_allreduce[dgx1_allreduce["size"] == size]
        best = at[at.best].busbw_GBps.tolist()
        assert re.findall(r"(\d+\.\d\d)\*", row) == [f"{b:.2f}" for b in best]
        assert at[at.algorithm == "nccl"].choice.item() in row.split()


def test_compare_labels_its_bound_as_a_busbw_bound_in_busbw(capsys, dgx1_allreduce):
    lines = _compare_text(capsys)
    first = next(i for i, line in enumerate(lines) if line.split()[:1] == ["1KB"])
    assert [line.split()[-1] for line in lines[first - 2 : first]] == ["busbw", "bound"]  # the last column
    assert lines[first + len(SIZES)].startswith("* best at that size")
    assert "busbw bound = the max-flow cut bound on algbw x 1.75" in lines[first + len(SIZES)]
    algbw_bound = dgx1_allreduce.algbw_bound_GBps.iloc[0]
    row = lines[first + len(SIZES) - 1]
    assert row.split()[-1] == f"{algbw_bound * 2 * 7 / 8:.2f}"  # Allreduce on 8 ranks: busbw = algbw x 2(n-1)/n
    assert float(row.split()[-1]) >= dgx1_allreduce.busbw_GBps.max()


def test_compare_csv_and_json_keep_their_long_tables(tmp_path, capsys, dgx1_allreduce):
    import pandas as pd

    from simcoll.compare import COLUMNS

    csv = tmp_path / "c.csv"
    _compare_text(capsys, "--csv", str(csv))
    assert list(pd.read_csv(csv).columns) == COLUMNS and len(pd.read_csv(csv)) == len(dgx1_allreduce)
    rows = json.loads("\n".join(_compare_text(capsys, "--json")))["rows"]
    assert len(rows) == len(dgx1_allreduce) and set(rows[0]) == set(COLUMNS)


# -- compare: the plot ----------------------------------------------------------------------------
def test_the_plot_labels_sizes_as_sizes_on_log_axes(dgx1_allreduce):
    ax = comparison_figure(dgx1_allreduce).axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == SIZES
    assert (ax.get_xscale(), ax.get_yscale()) == ("log", "log")
    assert "algbw" in ax.get_ylabel() and "log" in ax.get_ylabel()


def test_no_two_plot_lines_are_alike_and_nccl_is_the_black_reference(dgx1_allreduce):
    ax = comparison_figure(dgx1_allreduce).axes[0]
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert len(lines) == dgx1_allreduce.algorithm.nunique() + 1  # and the bound
    looks = [(line.get_color(), line.get_marker(), str(line.get_linestyle())) for line in lines.values()]
    assert len(set(looks)) == len(looks)
    colours = [line.get_color() for name, line in lines.items() if name != NCCL_LABEL and "bound" not in name]
    assert len(set(colours)) == len(colours)  # the algorithms differ in colour too
    nccl = lines[NCCL_LABEL]
    assert NCCL_LABEL == "nccl (baseline)" and nccl.get_color() == "black"
    assert nccl.get_linewidth() > max(line.get_linewidth() for name, line in lines.items() if name != NCCL_LABEL)
    bound = next(line for name, line in lines.items() if "bound" in name)
    assert bound.get_linestyle() == "--"


def test_many_algorithms_still_get_lines_of_their_own():
    import pandas as pd

    names = [f"algorithm-{i}" for i in range(40)]
    df = pd.DataFrame(
        [
            {"algorithm": n, "method": m, "size_bytes": s, "algbw_GBps": 1.0 + i, "algbw_bound_GBps": 99.0,
             "collective": "allreduce", "topology": "t", "model": "m"}
            for i, n in enumerate(names) for m in ("simulate", "program") for s in (1024, 2048)
        ]
    )  # fmt: skip
    lines = comparison_figure(df).axes[0].get_lines()
    looks = {(line.get_color(), line.get_marker(), str(line.get_linestyle())) for line in lines}
    assert len(lines) == 81 and len(looks) == 81


def test_compare_refuses_two_outputs_at_one_path(tmp_path, capsys):
    same = tmp_path / "same.png"
    assert main(["compare", "-t", "dgx1", "--sizes", "1KB", "-q", "--csv", str(same), "--plot", str(same)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(same) in err[0] and "--csv" in err[0] and "--plot" in err[0]
    assert not same.exists()


# -- algo generate, synth, bounds -----------------------------------------------------------------
def test_algo_generate_without_output_prints_a_one_line_summary(capsys):
    assert main(["algo", "generate", "multi-ring", "-t", "dgx1", "-c", "allgather"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1
    assert "multi-ring allgather" in out[0] and "8 ranks" in out[0] and "C=6 S=7 R=7" in out[0]
    assert "336 transfers" in out[0]


def test_algo_generate_dash_prints_the_algorithm_json(tmp_path, capsys):
    assert main(["algo", "generate", "multi-ring", "-t", "dgx1", "-c", "allgather", "-o", "-"]) == 0
    printed = json.loads(capsys.readouterr().out)
    path = tmp_path / "mr.json"
    assert main(["algo", "generate", "multi-ring", "-t", "dgx1", "-c", "allgather", "-o", str(path)]) == 0
    assert printed == json.loads(path.read_text())  # the same document as the file
    assert capsys.readouterr().out.startswith(f"wrote {path}: multi-ring allgather")


def test_algo_generate_json_is_the_summary(capsys):
    assert main(["algo", "generate", "multi-ring", "-t", "dgx1", "-c", "allgather", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["chunks"], summary["steps"], summary["rounds"], summary["output"]) == (6, 7, 7, None)


def test_pareto_prints_each_frontier_point_once(capsys):
    assert main(["synth", "sccl", "-t", "dgx1", "-c", "allgather", "--pareto", "--max-steps", "3"]) == 0
    out, err = capsys.readouterr()
    frontier = re.findall(r"^\s+\((\d+), (\d+), (\d+)\)", out, re.M)
    assert frontier == [("1", "2", "2"), ("2", "3", "3")]
    for c, s, r in frontier:  # printed once, on stdout: stderr has the queries as they are answered
        assert (out + err).count(f"({c}, {s}, {r})") == 1
        assert f"S={s} C={c} R={r}: sat" in err
    assert "Pareto" not in err.replace("SCCL Pareto search", "")


def test_bounds_text_prints_sizes_not_byte_counts(capsys):
    assert main(["bounds", "-t", "dgx1", "-c", "allgather", "--model", "dgx1"]) == 0
    out = capsys.readouterr().out
    assert "8MB:" in out and not re.search(r"\d{4,} B\b", out)
    assert main(["bounds", "-t", "dgx1", "-c", "allgather", "--model", "dgx1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["size_bytes"] == 8 << 20  # JSON keeps bytes


def test_bounds_gives_the_exact_bytes_where_a_size_rounds(capsys):
    assert main(["bounds", "-t", "dgx1", "-c", "allgather", "--size", "3000"]) == 0
    assert "2.93KB (3,000 B):" in capsys.readouterr().out


def test_taccl_refuses_negative_improvement_passes(capsys):
    argv = ["synth", "taccl", "-t", "ndv2*2", "--sketch", "ndv2-sk-1", "-c", "allgather", "--improve-passes", "-1"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--improve-passes" in err[0] and "-1" in err[0]

"""Importing machines from what they print: nvidia-smi topo -m, NCCL's topology
dump, rocm-smi --showtopo (simcoll.topology_import, ``simcoll topo import``).

Fixtures are in tests/data/topology_dumps/ (SOURCES.md names each source)."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import importlib.util
from fractions import Fraction
from pathlib import Path

import pytest

from simcoll.algorithms import generate
from simcoll.bounds import lower_bounds
from simcoll.collectives import make_collective
from simcoll.compare import compare
from simcoll.errors import TopologyError
from simcoll.machines import load_machine, load_topology
from simcoll.simulator import simulate
from simcoll.topology_import import DumpError, import_machine, import_topology, save_imported

DUMPS = Path(__file__).parent / "data" / "topology_dumps"
DGX1 = DUMPS / "dgx1_nvidia_smi.txt"
A100 = DUMPS / "dgx_a100_nccl_topo.xml"
HGX_A100 = DUMPS / "hgx_a100_simai_nccl_topo.xml"
MI300X = DUMPS / "mi300x_rocm_smi.txt"
RTX4090 = DUMPS / "rtx4090_nvidia_smi.txt"
ROCM_PCIE = DUMPS / "rocm_smi_lib108_pcie.txt"


def _cli_module():
    """simcoll.cli.topo_import (a broken import fails the test, never skips it)."""
    return importlib.import_module("simcoll.cli.topo_import")


def _kinds(topology, kind):
    return [c for c in topology.components if c.kind == kind]


# -- the three checks of the issue -----------------------------------------------------------
def _matrix_from_dump(path: Path) -> list[list[int]]:
    """NVLink counts read straight from the nvidia-smi matrix (independently of the importer)."""
    rows = [line.split() for line in path.read_text().splitlines() if line.startswith("GPU")]
    n = len(rows)
    return [[int(cell[2:]) if cell.startswith("NV") else 0 for cell in row[1 : 1 + n]] for row in rows]


def _same_graph(a: list[list[int]], b: list[list[int]]) -> bool:
    import networkx as nx

    def graph(m):
        g = nx.Graph()
        g.add_edges_from((i, j, {"n": m[i][j]}) for i in range(len(m)) for j in range(len(m)) if m[i][j])
        return g

    return nx.is_isomorphic(graph(a), graph(b), edge_match=lambda x, y: x["n"] == y["n"])


def test_dgx1_nvidia_smi_nvlink_counts_equal_the_matrix():
    topo = import_topology("nvidia-smi", DGX1)
    assert topo.num_ranks == 8
    assert topo.gpu_link_counts("nvlink") == _matrix_from_dump(DGX1)
    # the same hybrid cube-mesh as the built-in (SCCL's numbering), up to the GPUs' numbering
    assert _same_graph(topo.gpu_link_counts("nvlink"), load_topology("dgx1").gpu_link_counts("nvlink"))
    assert not _kinds(topo, "nvswitch")  # a cube-mesh: direct links, no switch
    # PCIe from the relations: 4 PLX switches (PIX pairs + NIC), 2 sockets, 4 NICs on rails 0..3
    assert len(_kinds(topo, "pcie_switch")) == 4
    assert len(_kinds(topo, "cpu")) == 2
    assert [n.rail for n in _kinds(topo, "nic")] == [0, 1, 2, 3]


def test_dgx1_fabric_bounds_are_sccls_hybrid_cube_mesh():
    imported = import_machine("nvidia-smi", DGX1, fabric_only=True)
    bounds = lower_bounds(make_collective("allgather", 8), imported.machine)
    assert (bounds.min_steps, bounds.min_rounds_per_chunk) == (2, Fraction(7, 6))


def test_dgx1_default_model_is_nvlink2_and_uncalibrated():
    model = import_machine("nvidia-smi", DGX1).model
    assert model.link("nvlink").bandwidth_Bps == 25e9  # 6 NVLinks per GPU: NVLink2
    assert "NVLink2" in model.link("nvlink").source
    assert "UNCALIBRATED" in model.description
    assert model.sources[0].startswith("uncalibrated")
    # the dump gives no NIC speed: the documented default, and the model covers the cluster link type
    assert model.link("ib").bandwidth_Bps == 25e9
    assert "default" in model.link("ib").source


def test_dgx_a100_nccl_xml_is_8_gpus_on_nvswitches_with_a_nic_per_gpu():
    imported = import_machine("nccl-xml", A100)
    topo = imported.topology
    assert topo.num_ranks == 8
    switches = _kinds(topo, "nvswitch")
    assert len(switches) == 6
    counts = {(lk.src, lk.dst): lk.count for lk in topo.links if lk.type == "nvlink"}
    assert all(counts[(f"gpu{g}", s.name)] == 2 for g in range(8) for s in switches)
    assert topo.gpu_link_counts("nvlink") == [[0] * 8 for _ in range(8)]  # no direct GPU-GPU NVLink
    nics = _kinds(topo, "nic")
    assert len(nics) == 8 and [n.rail for n in nics] == list(range(8))
    assert {n.model for n in nics} >= {"mlx5_0, 200 Gb/s"}
    assert all(g.model == "A100" for g in topo.gpus)
    # each GPU shares a PCIe switch with its rail's NIC
    parent = {lk.src: lk.dst for lk in topo.links if lk.type == "pcie"}
    assert [parent[f"gpu{g}"] for g in range(8)] == [parent[f"nic{g}"] for g in range(8)]
    assert len(_kinds(topo, "cpu")) == 4
    model = imported.model
    assert model.link("nvlink").bandwidth_Bps == 25e9 and "sm 80 is A100" in model.link("nvlink").source
    assert model.link("ib").bandwidth_Bps == 25e9 and "200 Gb/s from the dump" in model.link("ib").source
    assert model.link("pcie").bandwidth_Bps == 31.5e9  # 16 GT/s in the dump
    assert model.link("infinity_fabric")  # AuthenticAMD sockets


def test_real_hgx_a100_nccl_xml_is_8_gpus_on_6_nvswitches_and_simulates():
    imported = import_machine("nccl-xml", HGX_A100)
    topo = imported.topology
    assert topo.num_ranks == 8 and all(g.model == "A100" for g in topo.gpus)
    switches = _kinds(topo, "nvswitch")
    assert len(switches) == 6  # six distinct NVLink targets per GPU in the dump
    counts = {(lk.src, lk.dst): lk.count for lk in topo.links if lk.type == "nvlink"}
    assert all(counts[(f"gpu{g}", s.name)] == 2 for g in range(8) for s in switches)
    assert len(_kinds(topo, "nic")) == 5  # mlx5_bond_0..4: one NIC per GPU pair plus one on CPU 0
    assert len(_kinds(topo, "cpu")) == 2
    assert {lk.type for lk in topo.links} == {"nvlink", "pcie", "qpi"}  # GenuineIntel sockets
    ring = generate("ring", imported.machine, "allgather")
    assert simulate(ring, imported.machine, 1 << 20).time_s > 0


def test_mi300x_rocm_smi_is_fully_connected_xgmi():
    imported = import_machine("rocm-smi", MI300X)
    topo = imported.topology
    assert topo.num_ranks == 8
    xgmi = topo.gpu_link_counts("xgmi")
    assert xgmi == [[0 if i == j else 1 for j in range(8)] for i in range(8)]
    assert all(g.model == "AMD Instinct MI300X" for g in topo.gpus)
    assert imported.model.link("xgmi").bandwidth_Bps == 64e9
    assert len(_kinds(topo, "cpu")) == 2
    assert any("no NICs" in note for note in imported.notes)


# -- real dumps ---------------------------------------------------------------------------------
def test_real_mi300_rocm_smi_dump_is_fully_connected_xgmi():
    """A dump as posted (modelscope/ms-swift docs): 8 GPUs, one xGMI hop between every pair, two NUMA nodes."""
    imported = import_machine("rocm-smi", DUMPS / "mi300_msswift_rocm_smi.txt")
    topo = imported.topology
    assert topo.num_ranks == 8
    assert topo.gpu_link_counts("xgmi") == [[0 if i == j else 1 for j in range(8)] for i in range(8)]
    assert len(_kinds(topo, "cpu")) == 2
    assert [topo.node_of(r) for r in range(8)] == [0] * 8  # one node, whatever the NUMA split
    df, _ = compare(imported.machine, "allreduce", [1 << 20])
    assert {"ring", "direct"} & set(df.algorithm)


def test_real_rtx4090_dump_pcie_only():
    topo = import_topology("nvidia-smi", RTX4090)
    assert topo.num_ranks == 8 and "nvlink" not in topo.link_types
    cpus = _kinds(topo, "cpu")
    assert sorted(c.model for c in cpus) == ["NUMA node 0", "NUMA node 1"]
    # NIC0 and NIC1 are PIX to each other (one switch), PHB to GPU6: the same host bridge
    parent = {lk.src: lk.dst for lk in topo.links if lk.type == "pcie"}
    assert parent["nic0"] == parent["nic1"]
    assert parent[parent["nic0"]] == parent["gpu6"]


def test_real_rocm_smi_pcie_only_has_no_xgmi():
    topo = import_topology("rocm-smi", ROCM_PCIE)
    assert topo.num_ranks == 4 and topo.link_types == ("pcie",)


# -- bad input: one line naming row and column ------------------------------------------------------
def _dgx1_lines() -> list[str]:
    return DGX1.read_text().splitlines()


def _replace_cell(lines: list[str], row: str, col: int, value: str) -> str:
    out = []
    for line in lines:
        if line.startswith(row + "\t"):
            cells = line.split("\t")
            cells[col + 1] = value
            line = "\t".join(cells)
        out.append(line)
    return "\n".join(out)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (lambda: _replace_cell(_dgx1_lines(), "GPU2", 5, "NVX"), "row GPU2, column GPU5: unknown token 'NVX'"),
        (lambda: _replace_cell(_dgx1_lines(), "GPU3", 7, "NV2"), "row GPU3, column GPU7: NV2 but row GPU7"),
        (
            lambda: "\n".join(
                line if not line.startswith("GPU4") else "\t".join(line.split("\t")[:5]) for line in _dgx1_lines()
            ),
            "row GPU4, column GPU4: missing (4 of 12 columns",
        ),
        (lambda: "\n".join(line for line in _dgx1_lines() if not line.startswith("mlx5_3")), "row mlx5_3: missing"),
        (lambda: _replace_cell(_dgx1_lines(), "GPU1", 1, "NV1"), "row GPU1, column GPU1: expected X"),
    ],
    ids=["unknown-token", "asymmetric", "truncated-row", "missing-row", "diagonal"],
)
def test_nvidia_smi_bad_input_names_row_and_column(text, expected):
    with pytest.raises(DumpError) as err:
        import_topology("nvidia-smi", text())
    message = str(err.value)
    assert expected in message and "\n" not in message


def test_nccl_xml_bad_input_names_line_and_column():
    text = A100.read_text()
    with pytest.raises(DumpError, match=r"line \d+, column \d+: .*truncated XML"):
        import_topology("nccl-xml", text[: len(text) // 2])
    with pytest.raises(DumpError, match=r"line 3, column 3: unknown element <cpus>"):
        import_topology("nccl-xml", text.replace("<cpu ", "<cpus ", 1).replace("</cpu>", "</cpus>", 1))
    with pytest.raises(DumpError, match=r"line \d+, column \d+: <nvlink tclass='0x999999'>: unknown target class"):
        import_topology("nccl-xml", text.replace('count="2" tclass="0x068000"/>', 'count="2" tclass="0x999999"/>', 1))
    # GPU-GPU NVLinks must agree from both sides
    two = """<system version="1"><cpu numaid="0" vendor="GenuineIntel">
<pci busid="0000:06:00.0" class="0x030200" link_speed="8 GT/s"><gpu dev="0" sm="70" rank="0">
  <nvlink target="0000:07:00.0" count="2" tclass="0x030200"/></gpu></pci>
<pci busid="0000:07:00.0" class="0x030200" link_speed="8 GT/s"><gpu dev="1" sm="70" rank="1">
  <nvlink target="0000:06:00.0" count="1" tclass="0x030200"/></gpu></pci>
</cpu></system>
"""
    with pytest.raises(DumpError, match=r"line 5, column 3: gpu0-gpu1 nvlink count 1 but the other side says 2"):
        import_topology("nccl-xml", two)
    fixed = import_topology("nccl-xml", two.replace('count="1"', 'count="2"'))
    assert fixed.gpu_link_counts("nvlink") == [[0, 2], [2, 0]]


def _mi300x_with(section: int, row: str, col: int, value: str) -> str:
    """The MI300X dump with one cell of its ``section``-th matrix (0 weight, 1 hops, 2 type) changed."""
    lines = MI300X.read_text().splitlines()
    at = [i for i, line in enumerate(lines) if line.startswith(row + " ")][section]
    cells = lines[at].split()
    cells[col + 1] = value
    lines[at] = "   ".join(cells)
    return "\n".join(lines)


def test_rocm_smi_bad_input_names_row_and_column():
    with pytest.raises(DumpError, match=r"Link Type between two GPUs: row GPU1, column GPU6: PCIE but row GPU6"):
        import_topology("rocm-smi", _mi300x_with(2, "GPU1", 6, "PCIE"))
    with pytest.raises(
        DumpError, match=r"Link Type between two GPUs: row GPU1, column GPU2: unknown link type 'NVLINK'"
    ):
        import_topology("rocm-smi", _mi300x_with(2, "GPU1", 2, "NVLINK"))
    with pytest.raises(DumpError, match=r"Weight between two GPUs: row GPU3, column GPU0: expected a number, got 'x'"):
        import_topology("rocm-smi", _mi300x_with(0, "GPU3", 0, "x"))
    lines = MI300X.read_text().splitlines()
    first_gpu1 = next(i for i, line in enumerate(lines) if line.startswith("GPU1 "))
    with pytest.raises(DumpError, match=r"Weight between two GPUs: row GPU1: missing"):
        import_topology("rocm-smi", "\n".join(lines[:first_gpu1] + lines[first_gpu1 + 1 :]))
    truncated = "\n".join(line if not line.startswith("GPU5 ") else line[:30] for line in lines)
    with pytest.raises(DumpError, match=r"row GPU5, column GPU2: missing \(2 of 8 columns; truncated matrix\?\)"):
        import_topology("rocm-smi", truncated)


def test_unknown_format_and_network_are_refused():
    with pytest.raises(TopologyError, match="unknown dump format 'lspci'"):
        import_topology("lspci", DGX1)
    with pytest.raises(TopologyError, match="unknown network 'torus'"):
        import_topology("nvidia-smi", DGX1, network="torus")
    with pytest.raises(TopologyError, match="shows no NIC.*RCCL topology dump"):
        import_topology("rocm-smi", MI300X, nodes=2)


# -- clusters, round trip, compare and simulate ---------------------------------------------------------
@pytest.mark.parametrize("network", ["fat-tree", "rail"])
def test_cluster_of_two_nodes(network):
    topo = import_topology("nccl-xml", A100, nodes=2, network=network)
    assert topo.num_ranks == 16 and topo.nodes == (0, 1)
    switches = [c for c in topo.components if c.node is None]
    assert len(switches) == (1 if network == "fat-tree" else 8)
    assert topo.sources[0].startswith("imported by simcoll topo import from nccl-xml")


def test_round_trip_through_files_load_machine_compare_and_simulate(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    imported = import_machine("nccl-xml", A100, nodes=2, network="rail")
    model_path = save_imported(imported, "machine.yaml")
    assert model_path == Path("machine.model.yaml")
    head = Path("machine.yaml").read_text().splitlines()[:3]
    assert "UNCALIBRATED" in head[1] and head[2].startswith("# the dump leaves these unknown")
    assert "uncalibrated: true" in model_path.read_text()
    machine = load_machine("machine.yaml")
    assert machine.topology == dataclasses.replace(imported.topology, default_model="machine.model.yaml")
    assert machine.model == imported.model
    df, _ = compare(machine, "allreduce", [1 << 20], method="analytic")
    assert len(df) > 0 and (df.time_s > 0).all()
    ring = generate("ring", machine, "allgather")
    saved = simulate(ring, machine, 1 << 20).time_s
    assert saved > 0 and saved == pytest.approx(simulate(ring, imported.machine, 1 << 20).time_s, rel=1e-12)


def test_imported_dgx1_simulates_like_the_builtin():
    imported = import_machine("nvidia-smi", DGX1, fabric_only=True)
    builtin = load_machine("dgx1")
    # the dump numbers the GPUs differently from SCCL's DGX-1: each machine gets its own rings
    ours = simulate(generate("ring", imported.machine, "allgather"), imported.machine, 1 << 24).time_s
    theirs = simulate(generate("ring", builtin, "allgather"), builtin, 1 << 24).time_s
    assert ours == pytest.approx(theirs, rel=1e-9)
    df, _ = compare(imported.machine, "allgather", [1 << 20])
    assert {"ring", "direct"} <= set(df.algorithm) and df.best.sum() >= 1


# -- the CLI handler ----------------------------------------------------------------------------
def _cli(argv):
    module = _cli_module()
    parser = argparse.ArgumentParser(prog="simcoll topo import")
    module.add_arguments(parser)
    return module.run(parser.parse_args(argv))


def test_cli_writes_topology_and_model(tmp_path, capsys):
    out = tmp_path / "mi300x.yaml"
    assert _cli(["rocm-smi", str(MI300X), "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "8 gpu" in printed and "UNCALIBRATED" in printed and "assumption:" in printed
    machine = load_machine(str(out))
    assert machine.model.link("xgmi").bandwidth_Bps == 64e9
    assert (tmp_path / "mi300x.model.yaml").exists()


def test_cli_bad_input_exits_2_with_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.txt"
    bad.write_text(_replace_cell(_dgx1_lines(), "GPU2", 5, "NVX"))
    assert _cli(["nvidia-smi", str(bad), "-o", str(tmp_path / "m.yaml")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "row GPU2, column GPU5" in err
    assert not (tmp_path / "m.yaml").exists()
    assert _cli(["nvidia-smi", str(tmp_path / "nope.txt"), "-o", str(tmp_path / "m.yaml")]) == 2


def _nv_matrix(count: int, n: int = 4) -> str:
    """An nvidia-smi matrix of n GPUs joined pairwise by NV<count>, with one NIC and a NIC legend."""
    head = "\t" + "\t".join([f"GPU{i}" for i in range(n)] + ["NIC0", "CPU Affinity", "NUMA Affinity", "GPU NUMA ID"])
    rows = [
        f"GPU{i}\t"
        + "\t".join(["X" if i == j else f"NV{count}" for j in range(n)] + ["PXB" if i < 2 else "SYS"])
        + f"\t0-15\t{0 if i < 2 else 1}\tN/A"
        for i in range(n)
    ]
    nic = "NIC0\t" + "\t".join(["PXB", "PXB"] + ["SYS"] * (n - 2) + ["X"])
    return "\n".join([head, *rows, nic, "", "NIC Legend:", "", "  NIC0: mlx5_0", ""])


def test_nvidia_smi_nvswitch_is_implied_only_beyond_a_gpus_nvlinks():
    # NV12 between all 4 pairs: 12 x 3 = 36 links per GPU, more than any GPU has -> NVSwitch plane
    switched = import_machine("nvidia-smi", _nv_matrix(12))
    topo = switched.topology
    assert [c.name for c in _kinds(topo, "nvswitch")] == ["nvsw0"]
    assert {(lk.src, lk.count) for lk in topo.links if lk.dst == "nvsw0"} == {(f"gpu{i}", 12) for i in range(4)}
    assert "NVLink3" in switched.model.link("nvlink").source  # 12 links per GPU: A100
    assert _kinds(topo, "nic")[0].model == "mlx5_0"
    assert len(_kinds(topo, "cpu")) == 2  # NUMA affinity 0 and 1
    # NV4 between all pairs: 4 x 3 = 12 links, within one GPU's 18 -> direct links (an HGX-4 style mesh)
    direct = import_topology("nvidia-smi", _nv_matrix(4))
    assert not _kinds(direct, "nvswitch")
    assert direct.gpu_link_counts("nvlink") == [[0 if i == j else 4 for j in range(4)] for i in range(4)]

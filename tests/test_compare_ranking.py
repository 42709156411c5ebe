"""`simcoll compare` over the classical library ranks algorithms as the α-β
model predicts: at small sizes the fewest steps (latency) win, at large sizes
the fewest rounds per chunk (bandwidth) win (SCCL §3.6-3.7)."""

import json

from simcoll.algorithms import applicable
from simcoll.cli import main


def test_dgx1_allreduce_latency_then_bandwidth(capsys):
    assert main(["compare", "-t", "dgx1", "-c", "allreduce", "--sizes", "1KB,1GB", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    algos = {n: a for n, a in applicable("dgx1", "allreduce").items() if not isinstance(a, str)}
    assert len(algos) >= 8  # rings, trees, recursive, direct, NVGroup, HiCCL...
    # one row per applicable generator, plus NCCL's own choice as the baseline
    assert {r["algorithm"] for r in rows} == set(algos) | {"nccl"}
    rows = [r for r in rows if r["algorithm"] != "nccl"]

    def winner(size):
        return min((r for r in rows if r["size"] == size), key=lambda r: r["time_s"])["algorithm"]

    fewest_steps = min(a.steps for a in algos.values())
    least_rounds_per_chunk = min(a.rounds / a.chunks for a in algos.values())
    assert algos[winner("1KB")].steps == fewest_steps
    big = algos[winner("1GB")]
    assert big.rounds / big.chunks == least_rounds_per_chunk
    # and the large-size winner is SCCL's bandwidth-optimal point for DGX-1 Allreduce, R/C = 7/24
    assert big.rounds * 24 == big.chunks * 7

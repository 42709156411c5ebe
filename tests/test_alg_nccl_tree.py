"""nccl-tree: NCCL's tree channels (intra-node chain + inter-node double binary tree)."""

from __future__ import annotations

import pytest

from simcoll import generate, load_machine, simulate
from simcoll.algorithms.innetwork import binary_tree_parent, double_tree_parent
from simcoll.errors import NotApplicableError
from simcoll.verify import check


@pytest.mark.parametrize("spec", ["dgx-h100", "dgx-h100*2", "dgx-a100*2"])
def test_nccl_tree_verifies(spec):
    machine = load_machine(spec)
    algo = generate("nccl-tree", machine, "allreduce")
    assert check(algo, machine) == []
    assert simulate(algo, machine, 1 << 24, verify=False).time_s > 0


def test_double_binary_tree_shape():
    """NCCL's trees over 4 nodes: tree 0 is rooted at 0 with 0 -> 2 -> {1, 3};
    tree 1 mirrors it; with an even count each node is interior in at most one of the two trees."""
    assert [binary_tree_parent(4, i) for i in range(4)] == [None, 2, 0, 2]
    assert [double_tree_parent(4, i, 1) for i in range(4)] == [1, 3, 1, None]  # the mirror image, rooted at 3
    for n in range(2, 12):
        for tree in (0, 1):
            parents = [double_tree_parent(n, i, tree) for i in range(n)]
            assert parents.count(None) == 1
        interior = [{p for p in (double_tree_parent(n, i, t) for i in range(n)) if p is not None} for t in (0, 1)]
        if n % 2 == 0:
            assert not (interior[0] & interior[1]), n


def test_channels_spread_heads_over_rails():
    machine = load_machine("dgx-a100*2")
    algo = generate("nccl-tree", machine, "allreduce")
    inter = {
        (t.src, t.dst) for t in algo.transfers if machine.topology.node_of(t.src) != machine.topology.node_of(t.dst)
    }
    assert {src % 8 for src, _ in inter} == set(range(8))  # every rail carries tree traffic
    assert all(src % 8 == dst % 8 for src, dst in inter)  # rail-aligned


def test_not_applicable():
    with pytest.raises(NotApplicableError, match="nccl-tree implements allreduce"):
        generate("nccl-tree", load_machine("dgx-a100"), "allgather")
    with pytest.raises(NotApplicableError, match="multiple of 3"):
        generate("nccl-tree", load_machine("dgx-a100"), "allreduce", channels=3, chunks=16)

"""SYNCOLL specifications: SCCL Tables 1-2 and the combining collectives."""

import pytest

from simcoll import (
    custom_collective,
    make_collective,
    relation_all,
    relation_root,
    relation_scattered,
    relation_transpose,
)
from simcoll.collectives import COLLECTIVES, collective_from_dict, collective_to_dict
from simcoll.errors import CollectiveError

P, C = 4, 3


@pytest.mark.parametrize(
    "name, g, pre, post",
    [
        ("gather", P * C, relation_scattered(P * C, P), relation_root(P * C, 2)),
        ("allgather", P * C, relation_scattered(P * C, P), relation_all(P * C, P)),
        ("alltoall", P * P * C, relation_scattered(P * P * C, P), relation_transpose(P * P * C, P)),
        ("broadcast", C, relation_root(C, 2), relation_all(C, P)),
        ("scatter", P * C, relation_root(P * C, 2), relation_scattered(P * C, P)),
        ("reduce", C, relation_all(C, P), relation_root(C, 2)),
        ("reducescatter", P * C, relation_all(P * C, P), relation_scattered(P * C, P)),
        ("allreduce", C, relation_all(C, P), relation_all(C, P)),
    ],
)
def test_builtins_are_sccl_table_2(name, g, pre, post):
    root = 2 if name in ("gather", "broadcast", "scatter", "reduce") else None
    coll = make_collective(name, P, C, root=root)
    assert coll.num_chunks == g
    assert coll.pre == pre and coll.post == post
    assert coll.combining == (name in ("reduce", "reducescatter", "allreduce"))


def test_scattered_numbers_the_ith_chunk_of_node_n_i_times_p_plus_n():
    coll = make_collective("allgather", P, C)
    assert coll.input_layout[1] == (1, 5, 9)
    # the output is the ranks' inputs concatenated, as in NCCL
    assert coll.output_layout[0] == (0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11)


def test_in_place_buffers_alias_as_nccl_does():
    assert make_collective("allgather", P, C, inplace=True).inplace_alias(2) == ("input", "output", 6)
    assert make_collective("reducescatter", P, C, inplace=True).inplace_alias(1) == ("output", "input", 3)
    assert make_collective("allreduce", P, C, inplace=True).inplace_alias(0) == ("output", "input", 0)
    assert make_collective("allreduce", P, C).inplace_alias(0) is None


def test_alltonext_is_gc3s_custom_collective():
    coll = make_collective("alltonext", 3, 2)
    assert coll.input_layout == ((0, 1), (2, 3), ())
    assert coll.output_layout == ((), (0, 1), (2, 3))


def test_user_defined_collective_from_pre_and_post():
    swap = custom_collective("swap", [[0], [1]], [[1], [0]])
    assert swap.pre == {(0, 0), (1, 1)} and swap.post == {(1, 0), (0, 1)}
    with pytest.raises(CollectiveError, match="chunk 5 is required"):
        custom_collective("bad", [[0], [1]], [[5], [0]])
    with pytest.raises(CollectiveError, match="only combining"):
        custom_collective("dup", [[0], [0]], [[0], [0]])


@pytest.mark.parametrize("name", COLLECTIVES)
def test_json_round_trip(name):
    coll = make_collective(name, 5, 2, inplace=name == "allreduce")
    assert collective_from_dict(collective_to_dict(coll)) == coll
    custom = custom_collective("x", [[0, 1], [2]], [[2], [0, 1]], chunk_factor=2)
    assert collective_from_dict(collective_to_dict(custom)) == custom


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: make_collective("allgatherv", 4), "unknown collective"),
        (lambda: make_collective("allgather", 0), "num_ranks"),
        (lambda: make_collective("allgather", 4, 0), "chunk_factor"),
        (lambda: make_collective("broadcast", 4, root=4), "root 4"),
        (lambda: make_collective("allgather", 4, root=1), "has no root"),
    ],
)
def test_bad_specifications_are_named(call, message):
    with pytest.raises(CollectiveError, match=message):
        call()


def test_busbw_factors_follow_nccl_tests():
    assert make_collective("allreduce", 8).busbw_factor == pytest.approx(14 / 8)
    assert make_collective("allgather", 8).busbw_factor == pytest.approx(7 / 8)
    assert make_collective("broadcast", 8).busbw_factor == 1

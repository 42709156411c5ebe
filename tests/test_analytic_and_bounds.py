"""Analytic α-β cost equals the closed forms; lower bounds match SCCL's DGX-1 figures."""

from fractions import Fraction

import numpy as np
import pytest

from simcoll import (
    generate,
    k_synchronous_time_s,
    load_machine,
    load_topology,
    lower_bounds,
    make_collective,
    min_rounds_per_chunk,
    min_steps,
)
from simcoll.analytic import critical_path_time_s, step_time_s
from simcoll.cost_model import model_from_dict
from simcoll.machines import Machine

ALPHA, BW, T_R_LAUNCH, T_R_BW = 2e-6, 20e9, 1e-6, 200e9


def _uniform(p: int) -> Machine:
    model = model_from_dict(
        {
            "name": "uniform",
            "links": {"nvlink": {"alpha_s": ALPHA, "bandwidth_Bps": BW, "source": "test"}},
            "compute": {"reduce_bandwidth_Bps": T_R_BW, "reduce_launch_s": T_R_LAUNCH, "source": "test"},
        }
    )
    return Machine(load_topology(f"ring:{p}"), model)


def t_r(nbytes: float) -> float:
    return T_R_LAUNCH + nbytes / T_R_BW


@pytest.mark.parametrize("p", [2, 3, 4, 7, 8, 16])
@pytest.mark.parametrize("m", [1 << 10, 1 << 20, 3 << 28])
def test_ring_allreduce_is_nvgroup_eqs_1_to_3(p, m):
    machine = _uniform(p)
    eq1 = (p - 1) * (ALPHA + m / (p * BW) + t_r(m / p))  # T(RS_Ring)
    eq2 = (p - 1) * (ALPHA + m / (p * BW))  # T(Allgather_Ring)
    ar = generate("ring", machine, "allreduce")  # C = P
    assert critical_path_time_s(ar, machine, m) == pytest.approx(eq1 + eq2, rel=1e-12)  # eq. 3
    assert step_time_s(ar, machine, m) == pytest.approx(eq1 + eq2, rel=1e-12)
    rs = generate("ring", machine, "reducescatter")
    assert critical_path_time_s(rs, machine, m) == pytest.approx(eq1, rel=1e-12)
    ag = generate("ring", machine, "allgather")
    assert critical_path_time_s(ag, machine, m) == pytest.approx(eq2, rel=1e-12)


def test_ring_on_a_heterogeneous_ring_is_paced_by_its_slowest_link():
    """NV-Group's B is the slowest interconnect: z52's PCIe links pace the ring."""
    machine = load_machine("z52")
    ag = generate("ring", machine, "allgather")
    m = 1 << 26
    slow = min(
        machine.route(a, b).bandwidth_Bps for a, b in zip(ag.metadata["ring"], ag.metadata["ring"][1:], strict=False)
    )
    t = critical_path_time_s(ag, machine, m)
    assert t >= 7 * m / (8 * slow)


def test_k_synchronous_formula_is_sccl_3_6():
    # (C, S, R) = (6, 3, 7) Allgather, L = 6 MB per rank, alpha 1 us, beta 1/25e9
    assert k_synchronous_time_s(3, 7, 6, 6e6, 1e-6, 1 / 25e9) == pytest.approx(3e-6 + 7 / 6 * 6e6 / 25e9)


def test_k_synchronous_formula_matches_steps_model_on_a_uniform_ring():
    machine = _uniform(5)
    ag = generate("ring", machine, make_collective("allgather", 5, 1))
    size = 5 << 20  # the output buffer; each rank contributes L = size / 5
    expected = k_synchronous_time_s(ag.steps, ag.rounds, ag.chunks, size / 5, ALPHA, 1 / BW)
    assert step_time_s(ag, machine, size) == pytest.approx(expected, rel=1e-12)


def test_dgx1_allgather_bounds_are_sccls():
    """SCCL Table 4: on DGX-1, 2 steps (diameter) and 7/6 rounds per chunk."""
    topo = load_topology("dgx1")
    coll = make_collective("allgather", 8)
    assert min_steps(coll, load_machine(topo)) == 2
    assert min_rounds_per_chunk(coll, load_machine(topo)) == (Fraction(7, 6), True)


def test_dgx1_allreduce_bounds_are_rs_plus_ag():
    """(48, 6, 14) and (48, 14, 14) are SCCL's bandwidth-optimal Allreduce: R/C = 14/48 = 7/24."""
    b = lower_bounds(make_collective("allreduce", 8, 48), "dgx1")
    assert b.min_rounds_per_chunk == Fraction(7, 24) and b.min_steps == 4


def test_bandwidth_bound_counts_switch_capacity():
    """DGX-2: a GPU has 6 NVLinks into the NVSwitch fabric, so Allgather needs 15/6 rounds per chunk."""
    b, exact = min_rounds_per_chunk(make_collective("allgather", 16), "dgx2")
    assert b == Fraction(15, 6) and exact


def test_algbw_bound_on_dgx1_is_the_ingress_cut():
    machine = load_machine("dgx1")
    size = 8 << 20
    b = lower_bounds(make_collective("allgather", 8), machine, size)
    # each GPU must receive 7/8 of the output over 6 links of 25 GB/s
    assert b.time_bound_s == pytest.approx(7 / 8 * size / (6 * 25e9), rel=1e-6)
    assert b.algbw_bound_GBps == pytest.approx(size / b.time_bound_s / 1e9)


def test_no_algorithm_beats_the_time_bound():
    machine = load_machine("dgx1")
    for coll in ("allgather", "reducescatter", "allreduce"):
        b = lower_bounds(make_collective(coll, 8), machine, 1 << 30)
        for name in ("ring", "direct"):
            algo = generate(name, machine, coll)
            assert critical_path_time_s(algo, machine, 1 << 30) >= b.time_bound_s


def test_large_machines_use_a_cut_family():
    b, exact = min_rounds_per_chunk(make_collective("allgather", 32), "dgx-a100*4")
    assert not exact and b > 0


@pytest.mark.parametrize("name", ["alltoall", "allgather", "reducescatter", "broadcast", "gather", "allreduce"])
@pytest.mark.parametrize("chunk_factor", [1, 2])
def test_chunks_a_cut_needs_are_those_wanted_inside_and_not_held_there(name, chunk_factor):
    # SCCL §3.7's cut: a chunk must enter S when a rank of S wants it and (not combining) no rank of S
    # holds it, or (combining) a contribution to it is outside S. Counted per chunk here on every one of
    # the 2^6 - 2 cuts of six ranks; bounds counts an Alltoall's P² one-to-one chunks per rank pair.
    from simcoll.bounds import _halves, _needed_chunks

    collective = make_collective(name, 6, chunk_factor=chunk_factor)
    for part in _halves(collective) if name == "allreduce" else (collective,):
        masks = [np.array([(m >> r) & 1 for r in range(6)], dtype=bool) for m in range(1, 2**6 - 1)]
        holders, wanters = {}, {}
        for c, r in part.pre:
            holders.setdefault(c, set()).add(r)
        for c, r in part.post:
            wanters.setdefault(c, set()).add(r)
        expected = []
        for mask in masks:
            s = set(np.flatnonzero(mask).tolist())
            expected.append(
                sum(
                    1
                    for c, wanting in wanters.items()
                    if wanting & s
                    and (bool(holders.get(c, set()) - s) if part.combining else not holders.get(c, set()) & s)
                )
            )
        assert _needed_chunks(part, masks).tolist() == expected


def test_symmetric_cuts_share_one_maximum_flow_and_the_bound_is_unchanged():
    """A cut a node swap maps onto another (a symmetry of the cluster) has its maximum flow:
    on 16 DGX H100 nodes 24 flows stand for 294 cuts, and the bound is the one every cut's
    own flow gives."""
    from simcoll.bounds import _cut_family, _CutSolver

    machine = load_machine("dgx-h100*16")
    masks, keys, exact = _cut_family(machine)
    assert not exact and len(masks) == 2 * (128 + 16 + 3) and len(set(keys)) == 24

    def capacity(link):
        return round(link.count * machine.model.link(link.type).bandwidth_Bps / 1e3)

    shared, alone = _CutSolver(machine.topology, capacity), _CutSolver(machine.topology, capacity)
    assert [shared.into(m, k) for m, k in zip(masks, keys, strict=True)] == [alone.into(m) for m in masks]
    assert len(shared._solved) == 24

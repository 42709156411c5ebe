"""Recursive doubling, recursive halving, RVHD and Bruck.

The verifier accepts them on 2-64 ranks (powers of two or not) and three chunk
factors, and on the built-in machines; they refuse topologies lacking a route
they need, naming the pair. Non-powers of two fold the first 2r ranks as
Thakur, Rabenseifner & Gropp (2005) do. On a uniform machine their analytic
times are the standard closed forms; RVHD Allreduce is NV-Group eq. (6) with
its p/(p-1) typo corrected to (p-1)/p.
"""

import doctest
import math

import pytest

from simcoll import check, load_machine, load_topology, make_collective
from simcoll.algorithms import REGISTRY, bruck, generate, recursive
from simcoll.algorithms.bruck import bruck_alltoall_blocks
from simcoll.analytic import critical_path_time_s, step_time_s
from simcoll.cost_model import model_from_dict
from simcoll.errors import NotApplicableError
from simcoll.machines import Machine

ALPHA, BW, T_R_LAUNCH, T_R_BW = 2e-6, 20e9, 1e-6, 200e9
SIZE = 3 << 24  # 48 MiB
CHUNK_FACTORS = (1, 2, 5)
RANKS = (2, 3, 5, 6, 8, 12, 16, 31)
CASES = [
    ("recursive-doubling", "allgather"),
    ("recursive-doubling", "allreduce"),
    ("recursive-halving", "reducescatter"),
    ("rvhd", "allreduce"),
    ("bruck", "allgather"),
    ("bruck", "alltoall"),
]


def uniform(spec: str, launch_s: float = T_R_LAUNCH) -> Machine:
    """Every link α = 2 µs, B = 20 GB/s; T_R(n) = launch + n / 200 GB/s."""
    model = model_from_dict(
        {
            "name": "uniform",
            "links": {"nvlink": {"alpha_s": ALPHA, "bandwidth_Bps": BW, "source": "test"}},
            "compute": {"reduce_bandwidth_Bps": T_R_BW, "reduce_launch_s": launch_s, "source": "test"},
        }
    )
    return Machine(load_topology(spec), model)


def t_r(nbytes: float, launch_s: float = T_R_LAUNCH) -> float:
    return launch_s + nbytes / T_R_BW


def split(p: int) -> tuple[int, int]:
    """P = 2^n + r."""
    n = p.bit_length() - 1
    return n, p - (1 << n)


# -- correctness ------------------------------------------------------------------
@pytest.mark.parametrize("p", RANKS)
@pytest.mark.parametrize("name,coll", CASES)
def test_verified_on_fully_connected_for_three_chunk_factors(name, coll, p):
    topo = load_topology(f"fully-connected:{p}")
    for chunks in CHUNK_FACTORS:
        assert check(generate(name, load_machine(topo), make_collective(coll, p, chunks)), load_machine(topo)) == [], (
            chunks
        )


@pytest.mark.parametrize("name,coll", CASES)
def test_verified_on_64_ranks(name, coll):
    """64 GPUs on one switch, and 64 fully connected GPUs."""
    for spec in ("hub-and-spoke:64", "fully-connected:64"):
        topo = load_topology(spec)
        assert check(generate(name, load_machine(topo), coll, 2), load_machine(topo)) == []


@pytest.mark.parametrize("machine", ["dgx2", "summit", "ndv2*2", "dgx-a100*2", "ndv2", "dgx-h100"])
@pytest.mark.parametrize("name,coll", CASES)
def test_verified_on_built_in_machines(machine, name, coll):
    """Their PCIe trees, host memory and networks give every GPU pair a route."""
    topo = load_topology(machine)
    assert check(generate(name, load_machine(topo), coll, 3), load_machine(topo)) == []


@pytest.mark.parametrize("spec", ["dgx1", "hypercube:3"])
def test_exchanges_between_ranks_one_bit_apart_fit_a_hypercube(spec):
    """Recursive doubling and halving pair v with v XOR 2^k: hypercube links,
    which DGX-1's NVLinks include; Bruck's partners r ± 2^k are not all linked."""
    topo = load_topology(spec)
    for name, coll in CASES[:4]:
        algo = generate(name, load_machine(topo), coll, 8)
        assert check(algo, load_machine(topo)) == []
        assert all(bin(t.src ^ t.dst).count("1") == 1 for t in algo.transfers)
    with pytest.raises(NotApplicableError, match=rf"bruck: {spec} has no route from rank \d to rank \d"):
        generate("bruck", load_machine(topo), "allgather")


def test_refuses_topologies_without_the_routes_it_needs():
    ring = load_topology("ring:8")
    with pytest.raises(NotApplicableError, match="recursive-doubling: ring:8 has no route from rank 0 to rank 2"):
        generate("recursive-doubling", load_machine(ring), "allgather")
    with pytest.raises(NotApplicableError, match="recursive-halving: ring:8 has no route from rank 0 to rank 4"):
        generate("recursive-halving", load_machine(ring), "reducescatter")
    with pytest.raises(NotApplicableError, match="rvhd: ring:8 has no route from rank 0 to rank 4"):
        generate("rvhd", load_machine(ring), "allreduce")
    with pytest.raises(NotApplicableError, match="bruck: ring:8 has no route from rank 0 to rank 6"):
        generate("bruck", load_machine(ring), "allgather")
    with pytest.raises(NotApplicableError, match="implements reducescatter, not allgather"):
        generate("recursive-halving", load_machine(ring), "allgather")


# -- structure: the papers' step counts and partners -----------------------------
@pytest.mark.parametrize("p", [5, 6, 7, 12, 13])
@pytest.mark.parametrize("name,coll", CASES[:4])
def test_non_powers_of_two_fold_the_first_2r_ranks(name, coll, p):
    """Thakur et al. 2005: with P = 2^n + r, rank 2i (i < r) hands its data to
    rank 2i+1 in the first step, sits out the power-of-two core and gets its
    result from 2i+1 in the last step."""
    n, r = split(p)
    algo = generate(name, f"fully-connected:{p}", coll, 2)
    core = 2 * n if name == "rvhd" else n
    assert algo.steps == core + 2
    last = algo.steps - 1
    for i in range(r):
        involving = {(t.src, t.dst, t.step) for t in algo.transfers if 2 * i in (t.src, t.dst)}
        assert involving == {(2 * i, 2 * i + 1, 0), (2 * i + 1, 2 * i, last)}


@pytest.mark.parametrize("p", [2, 3, 5, 6, 8, 12, 31])
def test_bruck_takes_ceil_log2_p_steps_with_partners_2k_apart(p):
    topo = load_topology(f"fully-connected:{p}")
    gather = generate("bruck", load_machine(topo), "allgather")
    alltoall = generate("bruck", load_machine(topo), "alltoall")
    assert gather.steps == alltoall.steps == math.ceil(math.log2(p))
    assert all(t.dst == (t.src - (1 << t.step)) % p for t in gather.transfers)  # concatenation: to r - 2^k
    assert all(t.dst == (t.src + (1 << t.step)) % p for t in alltoall.transfers)  # index: to r + 2^k


@pytest.mark.parametrize("p, factor", [(2, 1), (5, 3), (6, 1), (8, 2), (12, 1)])
def test_bruck_blocks_move_as_the_paper_says_in_step_sender_receiver_order(p, factor):
    # The index algorithm (Bruck et al. §3): the block from s to d (offset j = d - s) moves 2^k ranks on
    # in every step k whose bit j has, from where the lower bits took it; the concatenation algorithm:
    # rank r sends the blocks of ranks r .. r + min(2^k, P - 2^k) - 1 to r - 2^k. Rows by step, then
    # sender and receiver, then block order (the tables are built with NumPy: a million rows on 1,024 GPUs).
    topo = load_topology(f"fully-connected:{p}")
    steps = (p - 1).bit_length()
    index = []
    for s in range(p):
        for d in range(p):
            j = (d - s) % p
            for k in (k for k in range(steps) if j >> k & 1):
                here = (s + j % (1 << k)) % p
                index += [(k, here, (here + (1 << k)) % p, (i * p + d) * p + s) for i in range(factor)]
    alltoall = bruck.bruck(topo, make_collective("alltoall", p, chunk_factor=factor))
    assert [(t.step, t.src, t.dst, t.chunk) for t in alltoall.transfers] == sorted(index, key=lambda t: t[:3])
    gather_coll = make_collective("allgather", p, chunk_factor=factor)
    concatenation = [
        (k, r, (r - (1 << k)) % p, c)
        for k in range(steps)
        for r in range(p)
        for owner in ((r + i) % p for i in range(min(1 << k, p - (1 << k))))
        for c in gather_coll.input_layout[owner]
    ]
    assert [(t.step, t.src, t.dst, t.chunk) for t in bruck.bruck(topo, gather_coll).transfers] == concatenation


# -- analytic cost on a uniform machine ----------------------------------------------
@pytest.mark.parametrize("p", [2, 4, 8, 16, 32])
def test_powers_of_two_match_the_standard_closed_forms(p):
    """log2 P·α + (P-1)/P·M·β, plus the reductions (Thakur et al. 2005)."""
    machine = uniform(f"fully-connected:{p}")
    n = int(math.log2(p))
    gather = generate("recursive-doubling", machine, "allgather", 2)
    assert critical_path_time_s(gather, machine, SIZE) == pytest.approx(n * ALPHA + (p - 1) / p * SIZE / BW, rel=1e-9)
    allred = generate("recursive-doubling", machine, "allreduce", 3)
    expected = n * (ALPHA + SIZE / BW + t_r(SIZE))
    assert critical_path_time_s(allred, machine, SIZE) == pytest.approx(expected, rel=1e-9)
    rs = generate("recursive-halving", machine, "reducescatter", 2)
    expected = n * ALPHA + (p - 1) / p * SIZE / BW + sum(t_r(SIZE / 2 ** (k + 1)) for k in range(n))
    assert critical_path_time_s(rs, machine, SIZE) == pytest.approx(expected, rel=1e-9)
    assert step_time_s(rs, machine, SIZE) == pytest.approx(expected, rel=1e-9)


def test_recursive_halving_is_the_textbook_form_when_reduction_is_per_byte():
    """With T_R = γ per byte (no launch): log2 P·α + (P-1)/P·M·(β + γ)."""
    p = 16
    machine = uniform(f"fully-connected:{p}", launch_s=0.0)
    rs = generate("recursive-halving", machine, "reducescatter")
    expected = 4 * ALPHA + (p - 1) / p * SIZE * (1 / BW + 1 / T_R_BW)
    assert critical_path_time_s(rs, machine, SIZE) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("p", [3, 5, 6, 7, 12, 31])
def test_non_powers_of_two_cost_fold_core_and_unfold(p):
    """Step model (a barrier per step): one fold step, the core, one unfold step;
    in the core the virtual ranks standing for two real ranks send the most."""
    machine = uniform(f"fully-connected:{p}")
    n, r = split(p)
    block = SIZE / p
    gather = generate("recursive-doubling", machine, "allgather", 2)
    core = sum(ALPHA + (2**k + min(2**k, r)) * block / BW for k in range(n))
    expected = (ALPHA + block / BW) + core + (ALPHA + (p - 1) * block / BW)
    assert step_time_s(gather, machine, SIZE) == pytest.approx(expected, rel=1e-9)
    allred = generate("recursive-doubling", machine, "allreduce")
    expected = (n + 2) * (ALPHA + SIZE / BW) + (n + 1) * t_r(SIZE)
    assert step_time_s(allred, machine, SIZE) == pytest.approx(expected, rel=1e-9)
    rs = generate("recursive-halving", machine, "reducescatter")
    blocks = [2 ** (n - 1 - k) + min(2 ** (n - 1 - k), r) for k in range(n)]
    core = sum(ALPHA + b * block / BW + t_r(b * block) for b in blocks)
    expected = (ALPHA + SIZE / BW + t_r(SIZE)) + core + (ALPHA + block / BW)
    assert step_time_s(rs, machine, SIZE) == pytest.approx(expected, rel=1e-9)


def rvhd_closed_form(p: int, size: float, launch_s: float) -> float:
    n = int(math.log2(p))
    reduce_scatter = n * ALPHA + (p - 1) / p * size / BW + sum(t_r(size / 2 ** (k + 1), launch_s) for k in range(n))
    allgather = n * ALPHA + (p - 1) / p * size / BW
    return reduce_scatter + allgather


def nvgroup_eq6(p: int, size: float, launch_s: float, printed: bool = False) -> float:
    """NV-Group eq. (6). ``printed``: with p/(p-1) as the paper prints it; else
    corrected to (p-1)/p, as in Thakur et al. 2005, which the paper cites."""
    factor = p / (p - 1) if printed else (p - 1) / p
    t_rs = math.log2(p) * ALPHA + factor * size / BW + t_r(factor * size, launch_s)
    t_ag = math.log2(p) * ALPHA + factor * size / BW
    return t_rs + t_ag


@pytest.mark.parametrize("p", [2, 4, 8, 16, 32])
def test_rvhd_allreduce_is_nvgroup_eq6_corrected(p):
    """Exact: the closed form with one T_R per halving step. Eq. (6) lumps the
    reductions into one T_R((p-1)/p·M): equal when T_R has no launch cost, else
    log2 P - 1 launches apart. The printed p/(p-1) is a typo: it would have a
    ReduceScatter move more than the whole buffer, and the model disagrees."""
    for launch_s in (0.0, T_R_LAUNCH):
        machine = uniform(f"fully-connected:{p}", launch_s)
        algo = generate("rvhd", machine, "allreduce", 2 * p)
        t = critical_path_time_s(algo, machine, SIZE)
        assert t == pytest.approx(rvhd_closed_form(p, SIZE, launch_s), rel=1e-9)
        assert t == pytest.approx(nvgroup_eq6(p, SIZE, launch_s) + (math.log2(p) - 1) * launch_s, rel=1e-9)
        assert t < nvgroup_eq6(p, SIZE, launch_s, printed=True)


@pytest.mark.parametrize("p", [3, 6, 12])
def test_rvhd_non_powers_of_two_add_a_fold_and_an_unfold(p):
    n, _ = split(p)
    machine = uniform(f"fully-connected:{p}")
    algo = generate("rvhd", machine, "allreduce")  # default: 2^n chunks, one per virtual rank
    assert algo.chunks == 2**n
    expected = 2 * (ALPHA + SIZE / BW) + t_r(SIZE) + rvhd_closed_form(2**n, SIZE, T_R_LAUNCH)
    assert step_time_s(algo, machine, SIZE) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("p", [2, 3, 5, 6, 8, 12, 16, 31])
def test_bruck_cost(p):
    """Allgather ⌈log2 P⌉α + (P-1)/P·M/B; Alltoall ⌈log2 P⌉α + Σ_k n_k·M/(PB),
    which is log2 P·(α + M/(2B)) for P = 2^n (step model; the critical path
    agrees for powers of two)."""
    machine = uniform(f"fully-connected:{p}")
    steps = math.ceil(math.log2(p))
    gather = generate("bruck", machine, "allgather", 2)
    expected = steps * ALPHA + (p - 1) / p * SIZE / BW
    assert step_time_s(gather, machine, SIZE) == pytest.approx(expected, rel=1e-9)
    alltoall = generate("bruck", machine, "alltoall", 2)
    expected_a2a = steps * ALPHA + sum(bruck_alltoall_blocks(p)) * SIZE / (p * BW)
    assert step_time_s(alltoall, machine, SIZE) == pytest.approx(expected_a2a, rel=1e-9)
    if p & (p - 1) == 0:
        assert expected_a2a == pytest.approx(steps * (ALPHA + SIZE / (2 * BW)), rel=1e-12)
        assert critical_path_time_s(gather, machine, SIZE) == pytest.approx(expected, rel=1e-9)
        assert critical_path_time_s(alltoall, machine, SIZE) == pytest.approx(expected_a2a, rel=1e-9)


def test_registry_lists_the_generators():
    assert REGISTRY["recursive-doubling"].collectives == ("allgather", "allreduce")
    assert REGISTRY["recursive-halving"].collectives == ("reducescatter",)
    assert REGISTRY["rvhd"].collectives == ("allreduce",)
    assert REGISTRY["bruck"].collectives == ("allgather", "alltoall")


@pytest.mark.parametrize("module", [recursive, bruck])
def test_docstring_examples(module):
    assert doctest.testmod(module).failed == 0

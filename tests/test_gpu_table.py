"""Specification of simcoll.gpu's instruction table, NumPy reference executor
and host-thread interpreter core (no GPU needed): the table encodes every
lowered Program faithfully (round trip, postcondition on real data), the C++
core matches the NumPy executor bit for bit, and deadlocks are reported."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from simcoll.gpu import host, reference
from simcoll.gpu.errors import InterpreterDeadlockError
from simcoll.gpu.table import (
    CONNECTION_COLUMNS,
    DEP_COLUMNS,
    EXECUTOR_COLUMNS,
    INSTRUCTION_COLUMNS,
    OP_CODES,
    SOURCE_COLUMNS,
    TableLimits,
    default_limits,
    to_program,
    to_table,
)

from simcoll.algorithm import Algorithm
from simcoll.algorithms import applicable
from simcoll.collectives import COLLECTIVES, make_collective
from simcoll.compiler import lower_algorithm
from simcoll.errors import AlgorithmError
from simcoll.machines import load_machine, load_topology
from simcoll.program import Program
from tests.program_builders import op, program, tb

XML_DIR = Path(__file__).resolve().parents[2] / "shared" / "interop" / "msccl-xml"
DTYPES = ("float32", "float16", "bfloat16")


def lowered(specs=("ring:4", "fully-connected:4")):
    for spec in specs:
        topo = load_topology(spec)
        for coll in COLLECTIVES:
            for name, algo in applicable(load_machine(topo), coll).items():
                if isinstance(algo, Algorithm):
                    yield f"{spec}/{coll}/{name}", lower_algorithm(algo, machine=load_machine(topo))


def ring2():
    """A 2-rank ring Allgather: each rank sends its chunk, receives the other."""
    coll = make_collective("allgather", 2)
    execs = [
        [
            tb(0, op("send", ("input", 0)), send=1),
            tb(1, op("recv", dst=("output", 1)), recv=1),
            tb(2, op("copy", ("input", 0), ("output", 0))),
        ],
        [
            tb(0, op("send", ("input", 0)), send=0),
            tb(1, op("recv", dst=("output", 0)), recv=0),
            tb(2, op("copy", ("input", 0), ("output", 1)), op("nop", deps=[(1, 0)])),
        ],
    ]
    return program(coll, execs, {"input": 1, "output": 2}, name="ring2")


def test_two_rank_ring_table_is_spelled_out():
    t = to_table(ring2(), fifo_slots=4, tile_bytes=64)
    assert t.buffer_names == ("input", "output", "scratch")
    assert t.buffer_chunks.tolist() == [[1, 2, -1], [1, 2, -1]]
    # rank, id, channel, kind, send_peer, recv_peer, send_conn, recv_conn, first, count
    assert t.executors.tolist() == [
        [0, 0, 0, 0, 1, -1, 0, -1, 0, 1],
        [0, 1, 0, 0, -1, 1, -1, 1, 1, 1],
        [0, 2, 0, 0, -1, -1, -1, -1, 2, 1],
        [1, 0, 0, 0, 0, -1, 1, -1, 3, 1],
        [1, 1, 0, 0, -1, 0, -1, 0, 4, 1],
        [1, 2, 0, 0, -1, -1, -1, -1, 5, 2],
    ]
    send, recv, copy, nop = (OP_CODES[o] for o in ("send", "recv", "copy", "nop"))
    assert t.instructions.tolist() == [
        [send, -1, 0, 0, -1, -1, -1, 1, 0, 0, 0, 0],
        [recv, -1, -1, -1, -1, 1, 1, 1, 0, 0, 0, 0],
        [copy, -1, 0, 0, -1, 1, 0, 1, 0, 0, 0, 0],
        [send, -1, 0, 0, -1, -1, -1, 1, 0, 0, 0, 0],
        [recv, -1, -1, -1, -1, 1, 0, 1, 0, 0, 0, 0],
        [copy, -1, 0, 0, -1, 1, 1, 1, 0, 0, 0, 0],
        [nop, -1, -1, -1, -1, -1, -1, 1, 0, 1, 0, 0],
    ]
    assert t.deps.tolist() == [[4, 0]]  # global executor 4 = rank 1 executor 1
    # src, dst, channel, sender, receiver, slots, max_count, slot_bytes
    assert t.connections.tolist() == [[0, 1, 0, 0, 4, 4, 1, 64], [1, 0, 0, 3, 1, 4, 1, 64]]
    assert to_program(t) == ring2()


def test_every_lowered_program_round_trips_through_the_table_and_json():
    n = 0
    for label, prog in lowered():
        t = to_table(prog)
        assert to_program(t) == prog, label
        assert to_table(Program.from_json(prog.to_json())).equals(t), label
        n += 1
    assert n > 30


def test_header_columns_and_op_codes_match_python():
    text = host.CORE_HEADER.read_text()
    defines = {m[0]: int(m[1]) for m in re.findall(r"#define (SC_\w+) (-?\d+)", text)}
    for prefix, columns in (
        ("SC_EX_", EXECUTOR_COLUMNS),
        ("SC_IN_", INSTRUCTION_COLUMNS),
        ("SC_DEP_", DEP_COLUMNS),
        ("SC_SRC_", SOURCE_COLUMNS),
        ("SC_CONN_", CONNECTION_COLUMNS),
    ):
        for i, name in enumerate(columns):
            assert defines[prefix + name.upper()] == i, prefix + name
        assert defines[prefix + "NCOL"] == len(columns)
    for name, code in OP_CODES.items():
        assert defines["SC_OP_" + name.upper()] == code
    for name, (code, _, _) in reference.DTYPES.items():
        assert defines["SC_DT_" + name.upper()] == code
    assert "#include" not in text  # NVRTC compiles it without headers


def test_limits_are_enforced_with_named_errors():
    lim = default_limits()
    small = TableLimits(**{**lim.__dict__, "max_count": 1})
    coll = make_collective("allgather", 2)
    prog = program(
        coll,
        [[tb(0, op("send", ("output", 0), n=2), send=1)], [tb(0, op("recv", dst=("output", 0), n=2), recv=0)]],
        {"input": 1, "output": 2},
    )
    with pytest.raises(AlgorithmError, match=r"rank 0 executor 0 step 0 \(send\): count 2 is above 1"):
        to_table(prog, limits=small)
    few = TableLimits(**{**lim.__dict__, "max_channels": 1})
    far = program(coll, [[tb(0, op("nop"), chan=3)], [tb(0, op("nop"))]], {"input": 1, "output": 2})
    with pytest.raises(AlgorithmError, match="channel 3 is outside 0..0"):
        to_table(far, limits=few)
    shared = program(
        coll,
        [
            [tb(0, op("send", ("input", 0)), send=1), tb(1, op("send", ("input", 0)), send=1)],
            [tb(0, op("recv", dst=("output", 0)), op("recv", dst=("output", 0)), recv=0)],
        ],
        {"input": 1, "output": 2},
    )
    with pytest.raises(AlgorithmError, match="executors 0 and 1 both send to rank 1 on channel 0"):
        to_table(shared)
    with pytest.raises(AlgorithmError, match="fifo_slots must be a positive integer"):
        to_table(ring2(), fifo_slots=0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_reference_executor_reaches_every_postcondition(dtype):
    for label, prog in lowered(("ring:4", "fully-connected:4", "dgx1")):
        run = reference.run_reference(to_table(prog), prog.collective.size_chunks * 8 * 2, dtype)
        assert run.ok, (label, run.problems[:3])


def test_reference_executor_catches_a_corrupted_table():
    prog = next(p for label, p in lowered(("ring:4",)) if label.endswith("allreduce/ring"))
    t = to_table(prog)
    t.instructions[0, 3] ^= 1  # the first instruction reads another chunk
    assert not reference.run_reference(t, prog.collective.size_chunks * 16).ok


def test_bfloat16_and_float16_sums_round_to_nearest_even():
    # 1 + 2**-8 is a bfloat16 tie between 1 and 1 + 2**-7: even mantissa wins (1.0)
    one = reference.from_float32(np.array([1.0], np.float32), "bfloat16")
    tiny = reference.from_float32(np.array([2.0**-8], np.float32), "bfloat16")
    assert reference.to_float32(reference.add(one, tiny, "bfloat16"), "bfloat16")[0] == 1.0
    odd = reference.from_float32(np.array([1.0 + 2.0**-7], np.float32), "bfloat16")
    assert reference.to_float32(reference.add(odd, tiny, "bfloat16"), "bfloat16")[0] == 1.0 + 2.0**-6
    assert reference.add(np.float16([2048.0]), np.float16([1.0]), "float16")[0] == 2048.0


@pytest.mark.parametrize("path", sorted(XML_DIR.glob("*.xml")) if XML_DIR.is_dir() else [], ids=lambda p: p.name)
def test_reference_and_host_run_the_shared_msccl_xml(path):
    from simcoll.interop.msccl_xml import read_msccl_xml_all

    for prog in read_msccl_xml_all(path):
        t = to_table(prog, tile_bytes=32, fifo_slots=2)
        result = host.check_table(t, prog.collective.size_chunks * 4 * 24, "bfloat16")
        assert result.ok, (path.name, prog.name, result)


def test_shared_msccl_xml_present_or_skipped():
    if not XML_DIR.is_dir():
        pytest.skip(f"{XML_DIR} is absent")
    assert list(XML_DIR.glob("*.xml"))


@pytest.mark.parametrize("dtype", DTYPES)
def test_host_threads_match_the_numpy_executor_bit_for_bit(dtype):
    if host.compiler() is None:
        pytest.skip("no C++ compiler")
    n = 0
    for label, prog in lowered():
        t = to_table(prog, tile_bytes=24, fifo_slots=2)  # several tiles per chunk, wrapping FIFOs
        result = host.check_table(t, prog.collective.size_chunks * 4 * 10, dtype, integers=False, timeout_s=30)
        assert result.ok, (label, result)
        n += 1
    assert n > 30


@pytest.mark.parametrize("dtype", DTYPES)
def test_host_threads_match_the_numpy_executor_on_16_byte_words(dtype):
    """Chunks of 520 bytes: even chunks start 16-byte aligned and move as
    unrolled 16-byte words plus an 8-byte tail, odd ones element by element;
    every path rounds each element as the NumPy executor does."""
    if host.compiler() is None:
        pytest.skip("no C++ compiler")
    for label, prog in lowered():
        result = host.check_table(to_table(prog), prog.collective.size_chunks * 520, dtype, integers=False,
                                  timeout_s=30)  # fmt: skip
        assert result.ok, (label, result)


def test_one_sided_and_load_reduce_ops_run_on_host_threads():
    coll = make_collective("allreduce", 2, 2)
    # rank 0 load-reduces chunk 0 from both ranks and puts it to rank 1; rank 1 does chunk 1 with get + reduce
    execs = [
        [
            tb(
                0,
                op("load_reduce", dst=("scratch", 0), sources=[("input", 0), ("input", 0, 1)]),
                op("copy", ("scratch", 0), ("output", 0)),
                op("put", ("scratch", 0), ("output", 0, 1)),
                op("signal"),
                op("wait"),
                send=1,
                recv=1,
            )
        ],
        [
            tb(
                0,
                op("get", ("input", 1, 0), ("scratch", 0)),
                op("copy", ("input", 1), ("output", 1)),
                op("reduce", ("scratch", 0), ("output", 1)),
                op("wait"),
                op("put", ("output", 1), ("output", 1, 0)),
                op("signal"),
                send=0,
                recv=0,
            )
        ],
    ]
    prog = program(coll, execs, {"input": 2, "output": 2, "scratch": 1})
    for dtype in DTYPES:
        result = host.check_table(to_table(prog, tile_bytes=8), 2 * 2 * 12, dtype)
        assert result.ok, result


def test_deadlocking_program_is_reported_by_both_executors():
    coll = make_collective("allgather", 2)
    # each rank receives before it sends: a cycle of waits
    execs = [
        [tb(0, op("recv", dst=("output", 1)), op("send", ("input", 0)), send=1, recv=1)],
        [tb(0, op("recv", dst=("output", 0)), op("send", ("input", 0)), send=0, recv=0)],
    ]
    t = to_table(program(coll, execs, {"input": 1, "output": 2}, name="stuck"))
    run_buffers = reference.allocate(t, 4, "float32", reference.make_inputs(coll, 4, "float32"))
    with pytest.raises(InterpreterDeadlockError, match="stuck: deadlock in the NumPy reference executor"):
        reference.execute(t, run_buffers)
    with pytest.raises(InterpreterDeadlockError, match=r"rank 0 executor 0 step 0 tile 0 waits for a message"):
        host.execute(t, run_buffers, timeout_s=0.5)


def test_host_threads_show_no_data_race_under_thread_sanitizer():
    import subprocess
    import sys

    env = host.tsan_environment()
    if env is None:
        pytest.skip("the C++ compiler has no ThreadSanitizer runtime")
    script = (
        "from simcoll.algorithms import applicable\n"
        "from simcoll.compiler import lower_algorithm\n"
        "from simcoll.gpu import host\n"
        "from simcoll.gpu.table import to_table\n"
        "from simcoll.machines import load_machine\n"
        "machine = load_machine('fully-connected:4')\n"
        "for coll, name in (('allreduce', 'ring'), ('alltoall', 'direct'), ('allgather', 'ring')):\n"
        "    p = lower_algorithm(applicable(machine, coll)[name], machine=machine)\n"
        "    r = host.check_table(to_table(p, tile_bytes=16, fifo_slots=2), p.collective.size_chunks * 4 * 8)\n"
        "    assert r.ok, r\n"
        "print('TSAN-CLEAN')\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    if "FATAL: ThreadSanitizer" in proc.stderr:
        # the runtime itself could not start (e.g. an address-space layout it does not support)
        pytest.skip(f"ThreadSanitizer could not run here: {proc.stderr.strip()[-300:]}")
    assert proc.returncode == 0 and "WARNING: ThreadSanitizer" not in proc.stderr, proc.stderr[-2000:]

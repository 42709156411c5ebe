"""The LL protocol of the interpreter core (8-byte lines: 4 B data + 4 B
flag) on host threads: bit for bit equal to the NumPy executor for every
lowered Program run as LL, lines carry the message's sequence number as
their flag, and an LL deadlock is reported."""

from __future__ import annotations

import ctypes
import dataclasses
import re
import subprocess
import sys

import numpy as np
import pytest
from simcoll.gpu import host, reference
from simcoll.gpu.calibrate import sendrecv_program
from simcoll.gpu.errors import InterpreterDeadlockError
from simcoll.gpu.table import PROTOCOL_CODES, protocol_code, to_table

from simcoll.collectives import make_collective
from tests.program_builders import op, program, tb
from tests.test_gpu_table import DTYPES, lowered

pytestmark = pytest.mark.skipif(host.compiler() is None, reason="no C++ compiler")


def as_ll(prog):
    return dataclasses.replace(prog, protocol="LL")


def test_protocol_codes_match_the_header():
    text = host.CORE_HEADER.read_text()
    defines = {m[0]: int(m[1]) for m in re.findall(r"#define (SC_PROTO_\w+) (-?\d+)", text)}
    assert defines == {f"SC_PROTO_{name.upper()}": code for name, code in PROTOCOL_CODES.items()}
    assert protocol_code(to_table(sendrecv_program(protocol="LL128"))) == PROTOCOL_CODES["Simple"]


@pytest.mark.parametrize("dtype", DTYPES)
def test_ll_programs_match_the_numpy_executor_bit_for_bit(dtype):
    n = 0
    width = reference.dtype_info(dtype)[2]
    for label, prog in lowered():
        t = to_table(as_ll(prog), tile_bytes=3 * width, fifo_slots=2)  # 3-element tiles: half-filled 16-bit lines
        assert protocol_code(t) == PROTOCOL_CODES["LL"]
        result = host.check_table(t, prog.collective.size_chunks * width * 7, dtype, integers=False, timeout_s=30)
        assert result.ok, (label, result)
        n += 1
    assert n > 30


def run_keeping_fifos(table, size_bytes, dtype):
    elems = reference.chunk_elems(table, size_bytes, dtype)
    inputs = reference.make_inputs(table.collective, elems, dtype)
    buffers = reference.allocate(table, elems, dtype, inputs)
    t, keep, status = host.prepare(table, buffers)
    assert host.load_library().sc_host_run(ctypes.byref(t), 10.0) == 0
    return inputs, buffers, keep.fifos


def test_ll_lines_hold_data_and_the_message_sequence_number():
    prog = sendrecv_program(2, serial=True, protocol="LL", tile_bytes=64)  # two messages of one chunk
    table = to_table(prog, fifo_slots=4)
    inputs, buffers, fifos = run_keeping_fifos(table, 2 * 16 * 4, "float32")  # 16 floats per chunk
    lines = fifos[0].view(np.uint64)
    data = (lines & 0xFFFFFFFF).astype(np.uint32)
    flags = (lines >> 32).astype(np.uint32)
    assert flags[:16].tolist() == [1] * 16 and flags[16:32].tolist() == [2] * 16  # slot 0: message 1, slot 1: 2
    assert data[:32].tobytes() == inputs[0].tobytes()
    assert buffers.data[1][1].tobytes() == inputs[0].tobytes()
    simple = to_table(dataclasses.replace(prog, protocol="Simple"), fifo_slots=4)
    assert host.fifo_bytes(table, 0, 16, 4) == 2 * host.fifo_bytes(simple, 0, 16, 4)
    _, _, raw = run_keeping_fifos(simple, 2 * 16 * 4, "float32")
    assert raw[0].view(np.uint8)[: 2 * 64].tobytes() == inputs[0].tobytes()  # Simple: plain data


def test_ll_packs_two_16_bit_elements_per_line_and_pads_odd_pieces():
    prog = sendrecv_program(1, protocol="LL", tile_bytes=6)  # tiles of 3 bfloat16: two lines, the second half full
    table = to_table(prog, fifo_slots=2)
    inputs, buffers, fifos = run_keeping_fifos(table, 6 * 2, "bfloat16")  # 6 elements = 2 tiles
    assert buffers.data[1][1].tobytes() == inputs[0].tobytes()
    lines = fifos[0].view(np.uint64)
    assert host.fifo_bytes(table, 0, 3, 2) == 2 * 1 * 2 * 8  # 2 slots x 1 piece x 2 lines
    tile1 = inputs[0][3:6]  # the second tile went to slot 1 with flag 2
    assert int(lines[2] >> 32) == 2 and int(lines[2] & 0xFFFF) == tile1[0] and int(lines[2] >> 16 & 0xFFFF) == tile1[1]
    assert int(lines[3] & 0xFFFF) == tile1[2] and int(lines[3] >> 16 & 0xFFFF) == 0


def test_ll_deadlock_is_reported_with_what_each_executor_waits_on():
    coll = make_collective("allgather", 2)
    execs = [[tb(0, op("recv", dst=("output", 1)), op("send", ("input", 0)), send=1, recv=1)],
             [tb(0, op("recv", dst=("output", 0)), op("send", ("input", 0)), send=0, recv=0)]]  # fmt: skip
    t = to_table(program(coll, execs, {"input": 1, "output": 2}, name="stuck-ll", protocol="LL"))
    buffers = reference.allocate(t, 4, "float32", reference.make_inputs(coll, 4, "float32"))
    with pytest.raises(InterpreterDeadlockError, match=r"rank 0 executor 0 step 0 tile 0 waits for a message"):
        host.execute(t, buffers, timeout_s=0.5)


def test_ll_host_threads_show_no_data_race_under_thread_sanitizer():
    env = host.tsan_environment()
    if env is None:
        pytest.skip("the C++ compiler has no ThreadSanitizer runtime")
    script = (
        "import dataclasses\n"
        "from simcoll.algorithms import applicable\n"
        "from simcoll.compiler import lower_algorithm\n"
        "from simcoll.gpu import host\n"
        "from simcoll.gpu.table import to_table\n"
        "from simcoll.machines import load_machine\n"
        "machine = load_machine('fully-connected:4')\n"
        "for coll, name in (('allreduce', 'ring'), ('alltoall', 'direct')):\n"
        "    p = dataclasses.replace(lower_algorithm(applicable(machine, coll)[name], machine=machine), protocol='LL')\n"
        "    for dtype in ('float32', 'bfloat16'):\n"
        "        r = host.check_table(to_table(p, tile_bytes=12, fifo_slots=2), p.collective.size_chunks * 4 * 5, dtype)\n"
        "        assert r.ok, r\n"
        "print('TSAN-CLEAN')\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    if "FATAL: ThreadSanitizer" in proc.stderr:
        # the runtime itself could not start (e.g. an address-space layout it does not support)
        pytest.skip(f"ThreadSanitizer could not run here: {proc.stderr.strip()[-300:]}")
    assert proc.returncode == 0 and "WARNING: ThreadSanitizer" not in proc.stderr, proc.stderr[-2000:]

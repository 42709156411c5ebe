"""Run an instruction table through the interpreter core on host threads.

``gpu/csrc/host_driver.cpp`` compiles ``interp_core.h`` (the per-instruction
code of the CUDA kernel) with the host C++ compiler and runs one
``std::thread`` per executor; the library is built on first use (``g++ -O1
-pthread``, cached by source hash: :mod:`simcoll.native`) and called
through :mod:`ctypes`. A run that does not finish within ``timeout_s``
(every executor spinning) is reported as a deadlock, with what each blocked
executor waits on.

The same buffers layout as :mod:`simcoll.gpu.reference` is used, so the two
results can be compared bit for bit (:func:`check_table`).
"""

from __future__ import annotations

import ctypes
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from simcoll.errors import InterpreterDeadlockError
from simcoll.native import build_shared_library, compiler, load_checked

from . import reference
from .table import PROTOCOL_CODES, InstructionTable, protocol_code

CSRC = Path(__file__).with_name("csrc")
CORE_HEADER = CSRC / "interp_core.h"
HOST_DRIVER = CSRC / "host_driver.cpp"
KERNEL_SOURCE = CSRC / "interp_kernel.cu"
STATUS_HEADER, STATUS_WORDS = 1, 4
_STATES = {0: "runs", 1: "is done", 2: "waits for a dependency", 3: "waits for a message", 4: "waits for a FIFO slot"}


class ScTable(ctypes.Structure):
    """ctypes mirror of ``struct ScTable`` (interp_core.h)."""

    _fields_ = [
        *((name, ctypes.c_void_p) for name in ("executors", "instructions", "deps", "sources", "connections")),
        *((name, ctypes.c_void_p) for name in ("bufs", "fifos", "steps", "heads", "tails", "status")),
        *((name, ctypes.c_longlong) for name in ("chunk_elems", "tile_elems", "num_tiles", "spin_limit")),
        *((name, ctypes.c_int) for name in ("num_ranks", "num_buffers", "num_executors", "exec_base", "dtype")),
        ("elem_bytes", ctypes.c_int),
        ("protocol", ctypes.c_int),
    ]


def build_library(*, sanitize_thread: bool = False) -> Path:
    """Compile the host driver (cached, :func:`simcoll.native.build_shared_library`);
    returns the shared library's path.

    Raises
    ------
    BuildError
        When no C++ compiler is found or compilation fails (with its output).
    """
    flags = ["-std=c++17", "-O1", "-pthread"]
    if sanitize_thread:
        flags += ["-fsanitize=thread", "-g"]
    return build_shared_library(
        "sc_host", HOST_DRIVER, flags, what="the host interpreter", depends=(CORE_HEADER,), include=CSRC
    )


_LIBRARY: ctypes.CDLL | None = None


def load_library() -> ctypes.CDLL:
    """The built host driver, loaded once. With the environment variable
    ``SIMCOLL_GPU_TSAN=1`` it is built with ThreadSanitizer (the process must
    then preload ``libtsan``; see :func:`tsan_environment`)."""
    global _LIBRARY
    if _LIBRARY is None:
        path = build_library(sanitize_thread=os.environ.get("SIMCOLL_GPU_TSAN") == "1")
        lib = load_checked(path, ScTable, "sc_table_struct_size", "the host interpreter")
        lib.sc_host_run.argtypes = [ctypes.POINTER(ScTable), ctypes.c_double]
        lib.sc_host_run.restype = ctypes.c_int
        _LIBRARY = lib
    return _LIBRARY


def tsan_environment() -> dict[str, str] | None:
    """Environment for a child process that runs the host interpreter under
    ThreadSanitizer (``LD_PRELOAD`` of the compiler's libtsan, races fatal),
    or None when the compiler has no libtsan."""
    cxx = compiler()
    if cxx is None:
        return None
    proc = subprocess.run([cxx, "-print-file-name=libtsan.so"], capture_output=True, text=True, check=False)
    path = proc.stdout.strip()
    if proc.returncode != 0 or not os.path.isabs(path) or not os.path.exists(path):
        return None
    return {
        **os.environ,
        "SIMCOLL_GPU_TSAN": "1",
        "LD_PRELOAD": path,
        "TSAN_OPTIONS": "halt_on_error=1 exitcode=66 report_signal_unsafe=0",
    }


def tiling(table: InstructionTable, elems: int, elem_bytes: int) -> tuple[int, int]:
    """(tile elements, number of tiles) of a chunk of ``elems`` elements."""
    tile = max(1, min(elems, table.tile_bytes // elem_bytes))
    return tile, -(-elems // tile)


def fifo_bytes(table: InstructionTable, connection: int, tile_elems: int, elem_bytes: int) -> int:
    """Bytes of a connection's FIFO: ``slots × max_count`` pieces of a tile,
    each ``tile × elem_bytes`` (Simple) or its 8-byte LL lines, 4 data bytes
    each (interp_core.h)."""
    slots, max_count = (int(v) for v in table.connections[connection][5:7])
    piece = tile_elems * elem_bytes
    if protocol_code(table) == PROTOCOL_CODES["LL"]:
        piece = -(-piece // 4) * 8
    return slots * max_count * piece


@dataclass
class _Keep:
    """Arrays the C side points into, kept alive for the run."""

    arrays: list
    fifos: list = field(default_factory=list)


def _pointer(a: np.ndarray) -> int:
    return a.ctypes.data


def prepare(table: InstructionTable, buffers: reference.Buffers) -> tuple[ScTable, _Keep, np.ndarray]:
    """The ScTable for ``buffers`` (host memory), with its FIFOs and counters."""
    code, _, width = reference.dtype_info(buffers.dtype)
    elems = buffers.chunk_elems
    tile, tiles = tiling(table, elems, width)
    keep = [np.ascontiguousarray(a, dtype=np.int32) for a in table.arrays().values()]
    arrays = dict(zip(table.arrays(), keep, strict=True))
    dummy = np.zeros(1, dtype=np.uint8)
    keep.append(dummy)
    bufs = np.zeros(table.num_ranks * len(table.buffer_names), dtype=np.uintp)
    for r, row in enumerate(buffers.data):
        for b, a in enumerate(row):
            bufs[r * len(table.buffer_names) + b] = _pointer(a) if a is not None and a.size else _pointer(dummy)
    conns = table.connections
    # 8-byte aligned (LL lines are 64-bit words)
    fifos = [np.zeros(-(-max(8, fifo_bytes(table, c, tile, width)) // 8), dtype=np.uint64) for c in range(len(conns))]
    fifo_ptrs = np.array([_pointer(f) for f in fifos] or [0], dtype=np.uintp)
    counters = [np.zeros(max(1, n), dtype=np.uint64) for n in (table.num_executors, len(conns), len(conns))]
    status = np.zeros(STATUS_HEADER + STATUS_WORDS * table.num_executors, dtype=np.int32)
    keep += [bufs, fifo_ptrs, status, *fifos, *counters]
    t = ScTable(
        *(_pointer(arrays[k]) for k in ("executors", "instructions", "deps", "sources", "connections")),
        _pointer(bufs),
        _pointer(fifo_ptrs),
        *(_pointer(c) for c in counters),
        _pointer(status),
        elems,
        tile,
        tiles,
        0,
        table.num_ranks,
        len(table.buffer_names),
        table.num_executors,
        0,
        code,
        width,
        protocol_code(table),
    )
    return t, _Keep(keep, fifos), status


def describe_status(table: InstructionTable, status: np.ndarray) -> list[str]:
    """What every unfinished executor was doing when the run stopped."""
    out = []
    for g in range(table.num_executors):
        state, step, tile, arg = (int(v) for v in status[STATUS_HEADER + STATUS_WORDS * g :][:STATUS_WORDS])
        if state == 1:
            continue
        what = _STATES.get(state, f"state {state}")
        if state == 2 and arg >= 0:
            what += f" ({table.executor_label(arg)})"
        elif state in (3, 4) and arg >= 0:
            c = table.rows("connections", arg)
            what += f" (connection rank {c['src']} -> rank {c['dst']} channel {c['channel']})"
        out.append(f"{table.executor_label(g)} step {step} tile {tile} {what}")
    return out


def execute(table: InstructionTable, buffers: reference.Buffers, *, timeout_s: float = 10.0) -> None:
    """Run the table on ``buffers`` in place with one host thread per executor.

    Raises
    ------
    InterpreterDeadlockError
        When the run has not finished after ``timeout_s`` seconds.
    """
    lib = load_library()
    t, keep, status = prepare(table, buffers)
    rc = lib.sc_host_run(ctypes.byref(t), float(timeout_s))
    del keep
    if rc:
        raise InterpreterDeadlockError(
            table.name, f"host-thread interpreter (no progress within {timeout_s:g} s)", describe_status(table, status)
        )


@dataclass(frozen=True)
class CheckResult:
    """Outcome of :func:`check_table`: problems per runner (empty lists: both
    reached the postcondition) and buffers that differ between them."""

    reference_problems: list[str]
    host_problems: list[str]
    differences: list[str]

    @property
    def ok(self) -> bool:
        return not (self.reference_problems or self.host_problems or self.differences)


def check_table(
    table: InstructionTable,
    size_bytes: int,
    dtype: str = "float32",
    *,
    seed: int = 0,
    integers: bool = True,
    timeout_s: float = 10.0,
) -> CheckResult:
    """Run the NumPy reference and the host-thread interpreter on the same
    inputs; both must have identical bits in every buffer and, with
    ``integers`` (exactly summable data), reach the postcondition."""
    try:
        run = reference.run_reference(table, size_bytes, dtype, seed=seed, integers=integers)
    except InterpreterDeadlockError as exc:
        return CheckResult([str(exc)], [], [])
    buffers = reference.allocate(table, run.buffers.chunk_elems, dtype, run.inputs)
    try:
        execute(table, buffers, timeout_s=timeout_s)
    except InterpreterDeadlockError as exc:
        return CheckResult(run.problems, [str(exc)], [])
    host_problems = reference.postcondition_problems(table, buffers, run.inputs) if integers else []
    return CheckResult(run.problems, host_problems, reference.same_bits(run.buffers, buffers))

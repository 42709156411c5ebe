"""Run a Program on GPUs with CuPy: the persistent interpreter kernel
(``gpu/csrc/interp_kernel.cu``), timed nccl-tests style and verified against
the NumPy reference (:mod:`simcoll.gpu.reference`).

Ranks are virtual on one GPU by default (each rank's buffers and FIFOs live
on that device); with several ``devices``, rank r lives on
``devices[r * len(devices) // num_ranks]`` (consecutive ranks share a device), every pair needs peer access, and one kernel
per device runs that device's executors (``exec_base``). A persistent kernel
whose blocks cannot all be resident deadlocks, so the grid is checked
against the device's occupancy first. Timing follows nccl-tests
(``common.cu``): warm-up launches, then ``iters`` timed launches with CUDA
events; the median is reported with algbw = size / time and busbw = algbw ×
the collective's bus factor.
"""

from __future__ import annotations

import importlib.util
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from simcoll.errors import GpuUnavailableError, InterpreterDeadlockError
from simcoll.program import Program

from . import reference
from .host import CORE_HEADER, KERNEL_SOURCE, STATUS_HEADER, STATUS_WORDS, ScTable, describe_status, fifo_bytes, tiling
from .table import InstructionTable, protocol_code, to_table

KERNEL_NAME = "sc_interp_kernel"


def kernel_source() -> str:
    """The kernel with ``interp_core.h`` inlined: one self-contained translation
    unit (what NVRTC and ``nvcc -cubin`` compile)."""
    core = CORE_HEADER.read_text()
    return KERNEL_SOURCE.read_text().replace('#include "interp_core.h"', core)


def table_source(table: InstructionTable) -> str:
    """:func:`kernel_source` plus the table as ``__device__`` arrays, so a
    single ``nvcc -cubin`` builds everything a launcher needs."""
    parts = [kernel_source(), f"\n// instruction table of {table.name!r} (simcoll.gpu.table)\n"]
    for name, array in table.arrays().items():
        values = ", ".join(str(int(v)) for v in array.ravel()) or "0"
        parts.append(f'extern "C" __device__ const int sc_table_{name}[] = {{{values}}};\n')
    parts.append(
        f"// rows: executors {table.num_executors}, instructions {table.instructions.shape[0]}, "
        f"connections {table.connections.shape[0]}; tile_bytes {table.tile_bytes}, fifo_slots {table.fifo_slots}\n"
    )
    return "".join(parts)


def _cupy() -> Any:
    if importlib.util.find_spec("cupy") is None:
        raise GpuUnavailableError("simcoll gpu needs CuPy (pip install -e .[gpu]); it is not installed")
    import cupy

    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # CuPy raises CUDARuntimeError subclasses without a driver
        raise GpuUnavailableError(f"no CUDA device is usable: {exc}") from None
    if count < 1:
        raise GpuUnavailableError("no CUDA device found")
    return cupy


def device_name(device: int = 0) -> str:
    """The CUDA device's name (e.g. ``"NVIDIA H100 80GB HBM3"``)."""
    cupy = _cupy()
    name = cupy.cuda.runtime.getDeviceProperties(device)["name"]
    return name.decode() if isinstance(name, bytes) else str(name)


@dataclass(frozen=True)
class GpuRunResult:
    """Times in seconds (one per timed iteration), bandwidths in GB/s."""

    program: str
    size_bytes: int
    dtype: str
    devices: tuple[int, ...]
    times_s: tuple[float, ...]
    verified: bool
    problems: list[str] = field(default_factory=list)
    busbw_factor: float = 1.0

    @property
    def time_s(self) -> float:
        return statistics.median(self.times_s)

    @property
    def algbw_GBps(self) -> float:
        return self.size_bytes / self.time_s / 1e9

    @property
    def busbw_GBps(self) -> float:
        return self.algbw_GBps * self.busbw_factor

    def to_dict(self) -> dict[str, Any]:
        return {
            "program": self.program,
            "size_bytes": self.size_bytes,
            "dtype": self.dtype,
            "devices": list(self.devices),
            "time_us": self.time_s * 1e6,
            "algbw_GBps": self.algbw_GBps,
            "busbw_GBps": self.busbw_GBps,
            "verified": self.verified,
            "problems": self.problems,
        }


def check_occupancy(cupy: Any, kernel: Any, device: int, blocks: int, threads: int) -> None:
    """Refuse a grid that cannot be co-resident on ``device``."""
    props = cupy.cuda.runtime.getDeviceProperties(device)
    sms = int(props["multiProcessorCount"])
    try:
        per_sm = cupy.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(kernel.kernel.ptr, threads, 0)
    except AttributeError:  # older CuPy: estimate from registers
        regs = max(1, int(kernel.num_regs)) * threads
        per_sm = min(int(props["maxBlocksPerMultiProcessor"]), int(props["regsPerMultiprocessor"]) // regs)
    if blocks > per_sm * sms:
        raise GpuUnavailableError(
            f"{blocks} executors need {blocks} co-resident thread blocks of {threads} threads on device {device}, "
            f"which holds {per_sm} per SM x {sms} SMs; use fewer threads or a Program with fewer executors"
        )


def run(
    program: Program,
    size_bytes: int,
    devices: Sequence[int] = (0,),
    *,
    iters: int = 20,
    warmup: int = 5,
    dtype: str = "float32",
    threads: int = 256,
    timeout_s: float = 10.0,
    table: InstructionTable | None = None,
) -> GpuRunResult:
    """Run ``program`` on the GPU(s); see the module docstring.

    Raises
    ------
    GpuUnavailableError
        Without CuPy or a device, when a device pair lacks peer access, or
        when the grid cannot be co-resident.
    InterpreterDeadlockError
        When the first (verified) run does not finish.
    """
    cupy = _cupy()
    devices = tuple(int(d) for d in devices)
    table = table or to_table(program)
    elems = reference.chunk_elems(table, size_bytes, dtype)
    code, _, width = reference.dtype_info(dtype)
    tile, tiles = tiling(table, elems, width)
    for a in devices:
        for b in devices:
            if a != b and not cupy.cuda.runtime.deviceCanAccessPeer(a, b):
                raise GpuUnavailableError(f"device {a} cannot access device {b} (no peer access)")
    rank_device = [devices[r * len(devices) // table.num_ranks] for r in range(table.num_ranks)]
    golden = reference.run_reference(table, size_bytes, dtype)
    if golden.problems:
        raise InterpreterDeadlockError(table.name, "NumPy reference executor", golden.problems[:8])
    host_init = reference.allocate(table, elems, dtype, golden.inputs)
    keep: list[Any] = []
    per_dev: dict[int, dict[str, Any]] = {}
    for d in devices:
        with cupy.cuda.Device(d):
            if len(devices) > 1:
                for other in devices:
                    if other != d:
                        try:
                            cupy.cuda.runtime.deviceEnablePeerAccess(other)
                        except cupy.cuda.runtime.CUDARuntimeError:
                            pass  # already enabled
            per_dev[d] = {"module": cupy.RawModule(code=kernel_source(), options=("-std=c++14",))}
    # buffers on their rank's device (aliases are views of their targets)
    dev_bufs: list[list[Any]] = []
    nb = len(table.buffer_names)
    ptrs = np.zeros(table.num_ranks * nb, dtype=np.uint64)
    for r in range(table.num_ranks):
        with cupy.cuda.Device(rank_device[r]):
            row = []
            alias, target, offset = (int(v) for v in table.aliases[r])
            for b, a in enumerate(host_init.data[r]):
                row.append(None if a is None or b == alias else cupy.asarray(a))
            if alias >= 0:
                length = host_init.data[r][alias].size
                row[alias] = row[target][offset * elems : offset * elems + length]
            for b, a in enumerate(row):
                ptrs[r * nb + b] = a.data.ptr if a is not None and a.size else 0
            dev_bufs.append(row)
    conns = table.connections
    fifos, fifo_ptrs = [], np.zeros(max(1, len(conns)), dtype=np.uint64)
    with cupy.cuda.Device(devices[0]):  # flags: peers reach them through peer access
        heads = cupy.zeros(max(1, len(conns)), dtype=cupy.uint64)
        tails = cupy.zeros(max(1, len(conns)), dtype=cupy.uint64)
    for c, row in enumerate(conns):
        with cupy.cuda.Device(rank_device[int(row[1])]):  # the receiver's memory
            fifos.append(cupy.zeros(-(-max(8, fifo_bytes(table, c, tile, width)) // 8), dtype=cupy.uint64))
            fifo_ptrs[c] = fifos[-1].data.ptr
    keep += [fifos, heads, tails, dev_bufs]
    for d in devices:
        with cupy.cuda.Device(d):
            mine = np.flatnonzero([rank_device[int(r)] == d for r in table.executors[:, 0]])
            state = per_dev[d]
            kernel = state["module"].get_function(KERNEL_NAME)
            check_occupancy(cupy, kernel, d, len(mine), threads)
            # a launch runs executors base .. base + blocks - 1 (rank-major rows)
            arrays = {k: cupy.asarray(np.ascontiguousarray(v, dtype=np.int32)) for k, v in table.arrays().items()}
            state.update(
                kernel=kernel,
                arrays=arrays,
                bufs=cupy.asarray(ptrs),
                fifos=cupy.asarray(fifo_ptrs),
                steps=cupy.zeros(max(1, table.num_executors), dtype=cupy.uint64),
                status=cupy.zeros(STATUS_HEADER + STATUS_WORDS * table.num_executors, dtype=cupy.int32),
                base=int(mine[0]) if len(mine) else 0,
                blocks=len(mine),
            )

    for d in devices:
        with cupy.cuda.Device(d):
            a = per_dev[d]["arrays"]
            pointers = [a[k].data.ptr for k in ("executors", "instructions", "deps", "sources", "connections")]
            pointers += [per_dev[d][k].data.ptr for k in ("bufs", "fifos", "steps")] + [heads.data.ptr, tails.data.ptr]
            # the ScTable descriptor (same layout as the host driver's, LP64), copied to the device
            descriptor = ScTable(
                *pointers, per_dev[d]["status"].data.ptr,
                elems, tile, tiles, int(timeout_s * 2e9),
                table.num_ranks, nb, table.num_executors, per_dev[d]["base"], code, width, protocol_code(table),
            )  # fmt: skip
            # passed by value as one structured scalar (CuPy >= 13 packs a NumPy structured scalar as one
            # kernel parameter; numpy mirrors the ctypes layout, offsets and padding included)
            per_dev[d]["descriptor"] = np.frombuffer(bytes(descriptor), dtype=np.dtype(ScTable))[0]

    def launch(d: int, state: dict[str, Any]) -> None:
        state["kernel"]((max(1, state["blocks"]),), (threads,), (state["descriptor"],))

    def reset() -> None:
        for d in devices:
            with cupy.cuda.Device(d):
                per_dev[d]["steps"].fill(0)
                per_dev[d]["status"].fill(0)
        heads.fill(0)
        tails.fill(0)
        for f in fifos:  # LL flags restart at 1 with the counters (interp_core.h)
            f.fill(0)

    times: list[float] = []
    for i in range(warmup + iters + 1):
        reset()
        if i == 0:
            for r in range(table.num_ranks):
                for b, a in enumerate(host_init.data[r]):
                    if a is not None and dev_bufs[r][b] is not None and b != int(table.aliases[r, 0]):
                        dev_bufs[r][b].set(a)
        for d in devices:
            cupy.cuda.Device(d).synchronize()
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        with cupy.cuda.Device(devices[0]):
            start.record()
        for d in devices:
            with cupy.cuda.Device(d):
                launch(d, per_dev[d])
        with cupy.cuda.Device(devices[0]):
            stop.record()
        for d in devices:
            cupy.cuda.Device(d).synchronize()
        if i == 0:
            status = np.concatenate([cupy.asnumpy(per_dev[d]["status"]) for d in devices[:1]])
            if status[0]:
                raise InterpreterDeadlockError(table.name, "GPU interpreter", describe_status(table, status))
            got = reference.Buffers([[None if a is None else cupy.asnumpy(a) for a in row] for row in dev_bufs],
                                    elems, dtype)  # fmt: skip
            problems = reference.same_bits(golden.buffers, got)
        elif i > warmup:
            times.append(cupy.cuda.get_elapsed_time(start, stop) / 1e3)
    return GpuRunResult(
        program=table.name,
        size_bytes=size_bytes,
        dtype=dtype,
        devices=devices,
        times_s=tuple(times),
        verified=not problems,
        problems=problems,
        busbw_factor=table.collective.busbw_factor,
    )

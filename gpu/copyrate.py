"""The issue's copy-rate target: a one-executor copy Program
(:func:`simcoll.gpu.calibrate.copy_program`) against ``cudaMemcpy``
device-to-device on the same GPU in the same run (target: at least 70 %)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from .calibrate import copy_program
from .runner import _cupy, run

#: The target ratio stated in issue 17 and the README.
TARGET_RATIO = 0.70


@dataclass(frozen=True)
class CopyRate:
    """Bytes per second of the one-executor copy and of ``cudaMemcpy`` D2D."""

    size_bytes: int
    executor_Bps: float
    memcpy_Bps: float

    @property
    def ratio(self) -> float:
        return self.executor_Bps / self.memcpy_Bps


def measure_copy_rate(size_bytes: int = 256 << 20, device: int = 0, *, iters: int = 20) -> CopyRate:
    """Time both copies of ``size_bytes`` (median of ``iters``, CUDA events).

    Raises
    ------
    GpuUnavailableError
        Without CuPy or a device.
    """
    cupy = _cupy()
    result = run(copy_program(), size_bytes, [device], iters=iters)
    with cupy.cuda.Device(device):
        src = cupy.ones(size_bytes, dtype=cupy.uint8)
        dst = cupy.empty_like(src)
        times = []
        for i in range(iters + 5):
            start, stop = cupy.cuda.Event(), cupy.cuda.Event()
            start.record()
            cupy.cuda.runtime.memcpy(dst.data.ptr, src.data.ptr, size_bytes, cupy.cuda.runtime.memcpyDeviceToDevice)
            stop.record()
            stop.synchronize()
            if i >= 5:
                times.append(cupy.cuda.get_elapsed_time(start, stop) / 1e3)
    return CopyRate(size_bytes, size_bytes / result.time_s, size_bytes / statistics.median(times))


__all__ = ["TARGET_RATIO", "CopyRate", "measure_copy_rate"]

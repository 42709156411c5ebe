"""Compile the interpreter kernel with NVRTC (no GPU and no ``nvcc`` needed).

Uses NVIDIA's ``cuda-bindings`` Python package (``cuda.bindings.nvrtc``) and
the NVRTC runtime library of the ``nvidia-cuda-nvrtc-cu12`` wheel, both of
which install on machines without a GPU; CI compiles the kernel this way when
they are installed (``pip install -e .[dev]``).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from simcoll.errors import BuildError, GpuUnavailableError


@dataclass(frozen=True)
class NvrtcResult:
    """A compiled kernel: ``cubin`` bytes (for a real ``sm_XX`` architecture)
    and NVRTC's log (with ``-Xptxas -v`` figures: registers, spills)."""

    arch: str
    cubin: bytes
    log: str
    version: tuple[int, int]


def nvrtc_available() -> bool:
    """True when ``cuda.bindings.nvrtc`` imports and finds the NVRTC library."""
    if importlib.util.find_spec("cuda") is None or importlib.util.find_spec("cuda.bindings") is None:
        return False
    try:
        from cuda.bindings import nvrtc

        err, _, _ = nvrtc.nvrtcVersion()
        return err == nvrtc.nvrtcResult.NVRTC_SUCCESS
    except Exception:  # the bindings raise various errors when libnvrtc is missing
        return False


def compile_source(source: str, arch: str = "sm_80", *, name: str = "kernel.cu") -> NvrtcResult:
    """Compile ``source`` (self-contained: see :func:`simcoll.gpu.runner.kernel_source`) to a cubin.

    Raises
    ------
    GpuUnavailableError
        When NVRTC is not installed.
    BuildError
        When compilation fails (with NVRTC's log).
    """
    if not nvrtc_available():
        raise GpuUnavailableError("NVRTC is not installed (pip install cuda-bindings nvidia-cuda-nvrtc-cu12)")
    from cuda.bindings import nvrtc

    ok = nvrtc.nvrtcResult.NVRTC_SUCCESS

    def check(result: tuple, what: str) -> tuple:
        if result[0] != ok:
            raise BuildError(f"NVRTC {what} failed: {result[0]}")
        return result[1:]

    version = tuple(int(v) for v in check(nvrtc.nvrtcVersion(), "version"))
    (prog,) = check(nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], []), "program creation")
    try:
        options = [f"--gpu-architecture={arch}".encode(), b"--std=c++14", b"--ptxas-options=-v"]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(options), options)
        (size,) = check(nvrtc.nvrtcGetProgramLogSize(prog), "log size")
        buf = b" " * size
        check(nvrtc.nvrtcGetProgramLog(prog, buf), "log")
        log = buf.rstrip(b"\0 ").decode(errors="replace")
        if err != ok:
            raise BuildError(f"NVRTC could not compile {name} for {arch}: {log.strip()[:2000]}")
        (size,) = check(nvrtc.nvrtcGetCUBINSize(prog), "cubin size")
        cubin = b" " * size
        check(nvrtc.nvrtcGetCUBIN(prog, cubin), "cubin")
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    return NvrtcResult(arch, cubin, log, (version[0], version[1]))


__all__ = ["NvrtcResult", "compile_source", "nvrtc_available"]

"""simcoll.gpu — lowering of Programs to CUDA kernels (installed from ``gpu/``).

This subpackage imports cleanly on machines without a GPU; every GPU path is
guarded by :func:`cuda_available`, and tests that need a GPU skip without one.
"""

from __future__ import annotations

import importlib.util


def cuda_available() -> bool:
    """True when CuPy is installed and sees at least one CUDA device."""
    if importlib.util.find_spec("cupy") is None:
        return False
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # CuPy raises various CUDA errors when no driver is present
        return False

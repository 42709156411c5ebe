"""Resource usage of simcoll's interpreter kernel: ``nvcc -cubin -Xptxas -v``
and NVRTC (``cuda-bindings``) for sm_80 and sm_90 (registers, spills), and
the co-residency it implies at 256 and 512 threads per block (registers only).

    .venv/bin/python benchmarks/gpu_kernel.py
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from simcoll.gpu.runner import kernel_source

REGISTERS_PER_SM = 65536  # sm_70 .. sm_90 (CUDA C Programming Guide, compute capabilities table)


def report(label: str, log: str) -> None:
    regs = int(re.search(r"Used (\d+) registers", log).group(1))
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    stores, loads = sum(int(a) for a, _ in spills), sum(int(b) for _, b in spills)
    blocks = ", ".join(f"{REGISTERS_PER_SM // (regs * t)} of {t} threads" for t in (256, 512))
    print(f"{label}: {regs} registers/thread, spill stores {stores} B, loads {loads} B, "
          f"blocks per SM by registers: {blocks}")  # fmt: skip


def main() -> int:
    from simcoll.gpu import nvrtc

    if nvrtc.nvrtc_available():
        for arch in ("sm_80", "sm_90"):
            report(f"NVRTC {arch}", nvrtc.compile_source(kernel_source(), arch).log)
    else:
        print("NVRTC not installed (cuda-bindings, nvidia-cuda-nvrtc-cu12)")
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        print("nvcc not found")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "k.cu"
        src.write_text(kernel_source())
        for arch in ("sm_80", "sm_90"):  # CUDA 13 dropped sm_70
            proc = subprocess.run([nvcc, "-cubin", f"-arch={arch}", "-Xptxas", "-v", "-o", str(Path(tmp) / "k.cubin"),
                                   str(src)], capture_output=True, text=True, check=False)  # fmt: skip
            if proc.returncode != 0:
                print(f"{arch}: failed: {proc.stderr.strip()[:300]}")
                continue
            report(f"nvcc {arch}", proc.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

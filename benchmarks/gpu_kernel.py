"""Resource usage of simcoll's interpreter kernel: ``nvcc -cubin -Xptxas -v``
for sm_80 and sm_90 (registers, spills, shared memory), and the
co-residency it implies at 512 threads per block (registers only).

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


def main() -> int:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        print("nvcc not found; nothing to measure")
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
            regs = int(re.search(r"Used (\d+) registers", proc.stderr).group(1))
            spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", proc.stderr).groups()
            print(f"{arch}: {regs} registers/thread, spill stores {spills[0]} B, loads {spills[1]} B, "
                  f"blocks of 512 threads per SM by registers: {REGISTERS_PER_SM // (regs * 512)}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())

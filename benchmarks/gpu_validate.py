"""The issue's GPU targets, measured when a GPU is present (prints a line and
exits 0 otherwise): bit-identical results of a ring Allreduce (Simple and
LL), copies of one executor and of one per SM against cudaMemcpy D2D (target
>= 70 % for one per SM), and
measured vs simulated time of the ring Allreduce over 1 KB - 1 GB.

    .venv/bin/python benchmarks/gpu_validate.py [--model models/mybox.yaml]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

from simcoll.gpu import cuda_available

from simcoll import load_machine, load_topology
from simcoll.algorithms import applicable
from simcoll.compiler import lower_algorithm


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="cost model for the simulation (default: the topology's)")
    parser.add_argument("--iters", type=int, default=20)
    args = parser.parse_args()
    if not cuda_available():
        print("no CUDA GPU available; nothing to measure")
        return 0
    from simcoll.gpu import copyrate, runner, validate

    topo = load_topology("fully-connected:4")
    ring = lower_algorithm(applicable(load_machine(topo), "allreduce")["ring"], machine=load_machine(topo))
    for prog in (ring, dataclasses.replace(ring, protocol="LL")):
        for dtype in ("float32", "float16", "bfloat16"):
            r = runner.run(prog, 1 << 22, iters=3, dtype=dtype)
            print(f"{prog.name} {prog.protocol} {dtype}: {'bit-identical' if r.verified else 'DIFFERS'}")
    for executors in (1, 0):  # one thread block, then one per SM (the target's; simcoll.gpu.copyrate)
        rate = copyrate.measure_copy_rate(iters=args.iters, executors=executors)
        print(f"{rate.executors}-executor copy {rate.executor_Bps / 1e9:.1f} GB/s vs cudaMemcpy D2D "
              f"{rate.memcpy_Bps / 1e9:.1f} GB/s: {100 * rate.ratio:.0f}% (target {100 * copyrate.TARGET_RATIO:.0f}% "
              f"for one executor per SM)")  # fmt: skip
    result = validate.validate(ring, load_machine(topo, args.model), [1 << k for k in range(10, 31, 2)],
                               validate.gpu_measure(iters=args.iters))  # fmt: skip
    print("\n".join(result.lines()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What pricing each call by how its run launched changes in the shipped models' fidelity.

For every healthy published log (``benchmarks/fidelity.py``'s selection) that
launched one process per GPU or CUDA graphs (``NcclTestsLog.launch``, read from
its header), this validates the shipped model twice: with the call cost of the
log's own launch mode (what ``simcoll validate`` does) and with the thread-mode
cost every call paid before launch modes existed (the floor of nccl-tests
``-g 8`` runs). It prints the geometric-mean busbw error of sizes <= 64 KB and
>= 64 MB both ways, and the median over the logs.

Usage: ``python benchmarks/launch_modes.py [--measurements DIR] [--max-ranks N]``
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fidelity import DEFAULT_DIR, _healthy, topology_for  # noqa: E402

from simcoll.calibration.calibrate import error_summary, validate  # noqa: E402
from simcoll.calibration.nccl_tests import read_nccl_tests  # noqa: E402
from simcoll.cost_model import model_from_dict, model_to_dict  # noqa: E402
from simcoll.errors import SimcollError  # noqa: E402
from simcoll.machines import Machine, load_machine  # noqa: E402


def thread_mode_everywhere(machine: Machine) -> Machine:
    """``machine`` whose model charges its thread-mode call cost whatever a log's launch."""
    data = model_to_dict(machine.model)
    call = data.get("call") or {}
    if isinstance(call.get("overhead_s"), dict) and "threads" in call["overhead_s"]:
        data["call"] = {"overhead_s": call["overhead_s"]["threads"], "source": call["source"]}
    return Machine(machine.topology, model_from_dict(data))


def _pct(x: float) -> str:
    return "     -" if x is None or math.isnan(x) else f"{100 * x:6.1f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--measurements", type=Path, default=DEFAULT_DIR)
    parser.add_argument("--max-ranks", type=int, default=32, help="leave out machines with more ranks (time)")
    args = parser.parse_args(argv)
    if not args.measurements.is_dir():
        print(f"no measurements at {args.measurements}", file=sys.stderr)
        return 2
    print("log | launch | topology | <=64KB: own launch, thread-mode cost | >=64MB: own launch, thread-mode cost")
    small: dict[str, list[float]] = {"own": [], "threads": []}
    for path in sorted(args.measurements.glob("*.log")):
        spec, _ = topology_for(path)
        if spec is None or not _healthy(path):
            continue
        launch = read_nccl_tests(path).launch
        if launch not in ("processes", "graphs"):
            continue
        machine = load_machine(spec)
        if machine.num_ranks > args.max_ranks:
            continue
        try:
            own = error_summary(validate(path, machine))
            threads = error_summary(validate(path, thread_mode_everywhere(machine)))
        except SimcollError as exc:
            print(f"{path.name} | {launch} | {spec} | not validated: {exc}")
            continue
        if not math.isnan(own["small"]):
            small["own"].append(own["small"])
            small["threads"].append(threads["small"])
        print(
            f"{path.name} | {launch} | {spec} | {_pct(own['small'])} % {_pct(threads['small'])} % | "
            f"{_pct(own['large'])} % {_pct(threads['large'])} %",
            flush=True,
        )
    if small["own"]:
        print(
            f"median <=64KB error over {len(small['own'])} logs: {_pct(statistics.median(small['own']))} % with "
            f"each log's own launch, {_pct(statistics.median(small['threads']))} % with the thread-mode cost"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

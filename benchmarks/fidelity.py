"""How close the simulated NCCL baseline comes to published nccl-tests runs.

For every healthy log in ``../shared/reference/measurements/`` (see its
README: ``_degraded``, ``_incomplete``, ``nvls-inactive``, ``_bad_`` and the
logs flagged as slow for their hardware are left out) whose machine simcoll
can describe, this calibrates the machine's model on the log
(:func:`simcoll.calibration.calibrate.calibrate`) and prints the geometric-mean
error ``exp(mean |ln(sim / measured)|) - 1`` of busbw for sizes >= 64 MB and
<= 64 KB, before (shipped model) and after calibration. For a multi-node log
it also applies the model calibrated on the same GPUs' one-node allreduce logs
(all of them, fitted together). Logs on more than ``--max-ranks`` ranks
(default 80: every log here; on the 2-core machine the 8-node H100 runs, 64
ranks, calibrate in 25-45 s, NVLS-tree being timed without running its
schedule, and the 10-node ones, 80 ranks, in 15 s to 5 min) are too slow to
calibrate: up to ``--validate-max-ranks`` they get the shipped model and that
cross-check.
Logs without a matching topology are listed with the reason.

Usage: ``python benchmarks/fidelity.py [--measurements DIR] [--max-ranks N]
[--validate-max-ranks N] [--only SUBSTRING] [--shard K/N]``. ``--shard K/N``
runs the K-th of N disjoint parts (all logs of one node kind in one part, so
that each one-node model is fitted in one part only), e.g. ``0/2`` and ``1/2`` in
two processes on a 2-core machine.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
import time
from pathlib import Path

from simcoll.calibration.calibrate import CalibrationError, calibrate, error_summary, validate
from simcoll.errors import SimcollError
from simcoll.machines import load_machine

DEFAULT_DIR = Path(__file__).resolve().parents[2] / "shared" / "reference" / "measurements"
#: (GPU name prefix of the file name, GPUs per node) -> simcoll topology of one node.
NODE_TOPOLOGIES = {
    ("a100-sxm4-40gb", 8): "dgx-a100",
    ("a100-sxm4-80gb", 8): "dgx-a100",
    ("h100-80gb-hbm3", 8): "dgx-h100",
    ("h100-80gb", 8): "dgx-h100",
    ("h100", 8): "dgx-h100",
    ("v100-sxm2-16gb", 8): "dgx1",
    ("a100-sxm4-80gb", 4): "hgx-a100-4",  # HGX A100 4-GPU board: 4 NVLink3 links per GPU pair
    ("h100", 4): "hgx-h100-4",  # Snellius: HGX H100 4-GPU board, 4x NDR200
    ("gh200", 4): "alps-gh200",  # CSCS Alps: 4 GH200 all-to-all, 4x Slingshot-11
    ("b200", 8): "dgx-b200",
    ("h100-80gb", 1): "h100-nic",  # one GPU (and its NIC) per node
    ("h200", 1): "h100-nic",
    ("mi300x", 8): "mi300x",  # AMD MI300X platform: Infinity Fabric full mesh, a NIC per GPU
    ("mi300x-vf", 8): "mi300x",  # the same platform's GPUs as SR-IOV virtual functions
    ("mi355x", 8): "mi355x",  # AMD MI355X platform: the MI300X mesh at 153.6 GB/s a link, a Pollara 400 NIC per GPU
    ("h200", 8): "dgx-h200",  # the DGX H100 fabric with H200 GPUs
    ("l40s", 4): "l40s-pcie",  # PCIe only
    ("l40s", 2): "l40s-pcie[0,1]",  # two of the same node's GPUs (NODE[...] keeps those GPUs)
    ("a100-sxm-64gb", 2): "hgx-a100-4[0,1]",  # two of a 4-GPU A100 board's, 4 NVLink3 links per pair
    ("v100-pcie-32gb", 4): "v100-pcie",
    ("rtx5090", 8): "rtx5090-pcie",
    ("mi250x", 8): "frontier",  # HPE Cray EX235a blade: 4 MI250X = 8 GCDs, 4 Slingshot-11 NICs
}
#: Not accuracy targets (measurements README).
#: Logs whose machine is not the one their GPU and count name (the per-file header says which).
FILE_TOPOLOGIES = {
    "h100-80gb-x8-n2_all_reduce_a3mega.log": "a3-mega*2",  # Google Cloud A3 Mega, TCPXO NICs
    "l40s-x1-n2_all_reduce_socket_nvidiatools.log": "l40s-socket*2",  # NCCL's TCP socket transport
    # GPUs 1 and 0 (CUDA_VISIBLE_DEVICES=1,0) of an 8-GPU H20 board (NV18: NVLink4 through NVSwitch, as on a
    # DGX H100) in each of two VMs, with the two NICs beside them (the VM's two bonded HCAs; speed not stated)
    "h20-3e-x2-n2_alltoall_vm_nccltests321.log": "dgx-h100[1,0]*2",
}
UNHEALTHY = ("_degraded", "_incomplete", "nvls-inactive", "_bad_", "a100-sxm4-40gb-x8_all_reduce_cs244c", "kalavai")
UNHEALTHY_FILES = ("a100-sxm4-80gb-x8-n16_all_reduce_coreweave.log",)
#: Rows a log's own header marks as the usable ones (bytes, ends included; None: open), e.g.
#: b200-x8-n2_all_gather_dranet: "usable for bandwidth from about 512 MiB on" (smaller sizes are noisy).
#: mi250x-x8-n4_all_gather_rccl1490: the 2-8 MiB rows take tens of ms (the thread's subject), "use >= 16 MiB".
USABLE_ROWS = {
    "b200-x8-n2_all_gather_dranet.log": (512 << 20, None),
    "mi250x-x8-n4_all_gather_rccl1490.log": (16 << 20, None),
}
NAME = re.compile(r"^(?P<gpu>.+?)-x(?P<g>\d+)(?:-n(?P<nodes>\d+))?_")


def topology_for(path: Path) -> tuple[str | None, str]:
    """The topology spec of a log's machine, or None and why."""
    if path.name in FILE_TOPOLOGIES:
        return FILE_TOPOLOGIES[path.name], ""
    match = NAME.match(path.name)
    if not match:
        return None, "file name does not give GPUs per node"
    gpu, g, nodes = match["gpu"], int(match["g"]), int(match["nodes"] or 1)
    node = NODE_TOPOLOGIES.get((gpu, g))
    if node is None:
        return None, f"no simcoll topology for {g}x {gpu} per node"
    if nodes == 1:
        return node, ""
    # a run with IB SHARP (NCCL's CollNet) needs a fabric whose switches reduce
    return f"{node}*{nodes}" + ("/fat-tree:sharp=on" if "_sharp" in path.name else ""), ""


def _healthy(path: Path) -> bool:
    return not any(u in path.name for u in UNHEALTHY) and path.name not in UNHEALTHY_FILES


def one_node_allreduce_logs(directory: Path) -> dict[str, list[Path]]:
    """Every healthy one-node allreduce log in ``directory``, by its node's
    topology spec: what a node's one-node model is fitted on, the same
    whichever logs a run validates (``--only``, ``--shard``) and in whatever
    order."""
    logs: dict[str, list[Path]] = {}
    for path in sorted(directory.glob("*.log")):
        spec, _ = topology_for(path)
        if spec is not None and "*" not in spec and "_all_reduce" in path.name and _healthy(path):
            logs.setdefault(spec, []).append(path)
    return logs


def _shard_of(path: Path, parts: int) -> int:
    """The part (of ``parts``) a log runs in: by its node kind, so that a
    node's one-node model is fitted in one part only; stable across runs."""
    spec, _ = topology_for(path)
    node = (spec or path.name).split("*")[0]
    return sum(node.encode()) % parts


def _pct(x: float) -> str:
    return "    -" if x is None or math.isnan(x) else f"{100 * x:5.1f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--measurements", type=Path, default=DEFAULT_DIR)
    parser.add_argument("--max-ranks", type=int, default=80, help="calibrate on machines up to this size")
    parser.add_argument(
        "--validate-max-ranks", type=int, default=80, help="larger machines: shipped model and cross-check only"
    )
    parser.add_argument("--only", help="only logs whose name contains this")
    parser.add_argument("--shard", help="K/N: only the K-th of N parts (whole node kinds), 0 <= K < N")
    args = parser.parse_args(argv)
    if not args.measurements.is_dir():
        print(f"no measurements at {args.measurements}")
        return 0
    logs = sorted(p for p in args.measurements.glob("*.log") if not args.only or args.only in p.name)
    if args.shard:
        try:
            k, n = (int(v) for v in args.shard.split("/"))
            if not 0 <= k < n:
                raise ValueError
        except ValueError:
            parser.error(f"--shard: expected K/N with 0 <= K < N, got {args.shard!r}")
        logs = [p for p in logs if _shard_of(p, n) == k]
    one_node_logs = one_node_allreduce_logs(args.measurements)
    one_node_models: dict[str, object] = {}
    print(f"{'log':<58} {'topology':<12} {'base>=64MB':>10} {'base<=64KB':>10} {'cal>=64MB':>9} {'cal<=64KB':>9}")
    unmatched = []
    for path in logs:
        if not _healthy(path):
            unmatched.append((path.name, "not an accuracy target (measurements README)"))
            continue
        spec, why = topology_for(path)
        if spec is None:
            unmatched.append((path.name, why))
            continue
        try:
            machine = load_machine(spec)
            limit = max(args.max_ranks, args.validate_max_ranks)
            if machine.num_ranks > limit:
                unmatched.append((path.name, f"{spec}: {machine.num_ranks} ranks > {limit} (simulation time)"))
                continue
            started = time.time()
            rows = USABLE_ROWS.get(path.name)
            base = error_summary(validate(path, machine, size_range=rows))
            if machine.num_ranks <= args.max_ranks:
                model, _ = calibrate([path], machine, size_range=rows)
                cal = error_summary(validate(path, machine, model, size_range=rows))
            else:
                cal = {"large": math.nan, "small": math.nan}
        except (CalibrationError, SimcollError) as exc:
            unmatched.append((path.name, str(exc)))
            continue
        if rows:
            print(f"  ({path.name}: rows {rows[0] or 0} B and up, as its header says)")
        print(
            f"{path.name:<58} {spec:<12} {_pct(base['large']):>10} {_pct(base['small']):>10}"
            f" {_pct(cal['large']):>9} {_pct(cal['small']):>9}   ({time.time() - started:.0f} s)",
            flush=True,
        )
        node_spec = spec.split("*")[0]
        if "*" in spec and node_spec in one_node_logs:
            from simcoll.machines import Machine

            try:
                if node_spec not in one_node_models:
                    # one model from all of the node's one-node allreduce logs, fitted together, as a user would
                    one_node_models[node_spec] = calibrate(one_node_logs[node_spec], load_machine(node_spec))[0]
                cross = error_summary(
                    validate(path, Machine(machine.topology, one_node_models[node_spec]), size_range=rows)
                )
                text = _pct(cross["large"])
            except SimcollError as exc:
                text = f"failed: {exc}"
            print(f"{'  ^ with the 1-node-calibrated ' + node_spec + ' model':<71} {'':>21} {text:>9}")
    print("errors: geometric-mean |ln(sim/measured)| as exp(.)-1, percent")
    for name, why in unmatched:
        print(f"not run: {name}: {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

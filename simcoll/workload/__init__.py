"""Workloads: whole training steps, many collectives sharing one machine with compute.

A workload gives each rank its operations - compute, collectives on process
groups, point-to-point sends - with dependencies and streams (:mod:`.ops`);
it is written as YAML/JSON (:mod:`.files`), read from or written as a
Chakra execution trace (:mod:`.chakra`), or generated for the jobs
frameworks run (:mod:`.generators`: data, tensor and pipeline parallelism),
and one step of it is simulated on a machine (:mod:`.run`), every
collective on the shared network of :mod:`simcoll.simulator.concurrent`,
giving the step time, exposed communication, a timeline and throughput
(:mod:`.results`).

>>> from simcoll.workload import data_parallel, run_workload
>>> result = run_workload(data_parallel("resnet50", ranks=8, batch_per_gpu=64), "dgx-h100")
>>> result.throughput_per_s > 0, len(result.communication())
(True, 1)
"""

from .chakra import load_chakra, save_chakra
from .files import load_workload, save_workload, workload_from_dict, workload_to_dict
from .generators import GENERATORS, data_parallel, generate_workload, network_layers, transformer
from .ops import CollectiveOp, Compute, Recv, Send, Workload, check_workload, with_schedule
from .results import WorkloadResult
from .run import run_workload

__all__ = [
    "GENERATORS",
    "CollectiveOp",
    "Compute",
    "Recv",
    "Send",
    "Workload",
    "WorkloadResult",
    "check_workload",
    "data_parallel",
    "generate_workload",
    "load_chakra",
    "load_workload",
    "network_layers",
    "run_workload",
    "save_chakra",
    "save_workload",
    "transformer",
    "with_schedule",
    "workload_from_dict",
    "workload_to_dict",
]

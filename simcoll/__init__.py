"""simcoll: simulator-first research framework for collective communication on GPU clusters.

Quick start::

    from simcoll import load_machine, make_collective, generate, verify, critical_path_time_s
    machine = load_machine("dgx1")
    algo = generate("ring", machine.topology, "allreduce")
    verify(algo, machine.topology)
    critical_path_time_s(algo, machine, 1 << 20)
"""

from .algorithm import Algorithm, BandwidthConstraint, Transfer
from .algorithms import REGISTRY as ALGORITHMS
from .algorithms import applicable, generate
from .analytic import (
    algbw_GBps,
    algorithm_time_s,
    busbw_GBps,
    critical_path_time_s,
    k_synchronous_time_s,
    step_time_s,
)
from .bounds import Bounds, lower_bounds, min_rounds_per_chunk, min_steps, time_lower_bound_s
from .collectives import (
    Collective,
    custom_collective,
    make_collective,
    relation_all,
    relation_root,
    relation_scattered,
    relation_transpose,
)
from .compare import compare, plot_comparison
from .compiler import lower_algorithm
from .cost_model import CostModel
from .errors import (
    AlgorithmError,
    CollectiveError,
    ModelError,
    NotApplicableError,
    SimcollError,
    SynthesisError,
    TopologyError,
    VerificationError,
)
from .interop import (
    export_msccl_xml,
    load_schedule,
    load_schedules,
    parse_msccl_xml,
    read_msccl_xml,
    read_msccl_xml_all,
    read_sccl_json,
    save_schedule,
)
from .machines import Machine, builtin_models, builtin_topologies, load_machine, load_model, load_topology
from .program import Executor, Instruction, Program, RankProgram, Ref
from .routes import Routes, bandwidth_relation
from .simulator import SimulationResult, simulate
from .topology import Topology
from .verify import check, verify

__version__ = "0.1.0"

__all__ = [
    "ALGORITHMS",
    "Algorithm",
    "AlgorithmError",
    "BandwidthConstraint",
    "Bounds",
    "Collective",
    "CollectiveError",
    "CostModel",
    "Executor",
    "Instruction",
    "Machine",
    "ModelError",
    "NotApplicableError",
    "Program",
    "RankProgram",
    "Ref",
    "Routes",
    "SimcollError",
    "SimulationResult",
    "SynthesisError",
    "Topology",
    "TopologyError",
    "Transfer",
    "VerificationError",
    "algbw_GBps",
    "algorithm_time_s",
    "applicable",
    "bandwidth_relation",
    "builtin_models",
    "builtin_topologies",
    "busbw_GBps",
    "check",
    "compare",
    "critical_path_time_s",
    "export_msccl_xml",
    "custom_collective",
    "generate",
    "k_synchronous_time_s",
    "load_machine",
    "load_model",
    "load_schedule",
    "load_schedules",
    "load_topology",
    "lower_algorithm",
    "parse_msccl_xml",
    "read_msccl_xml",
    "read_msccl_xml_all",
    "read_sccl_json",
    "save_schedule",
    "lower_bounds",
    "make_collective",
    "min_rounds_per_chunk",
    "min_steps",
    "plot_comparison",
    "relation_all",
    "relation_root",
    "relation_scattered",
    "relation_transpose",
    "simulate",
    "step_time_s",
    "time_lower_bound_s",
    "verify",
]

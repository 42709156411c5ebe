"""simcoll: simulator-first research framework for collective communication on GPU clusters.

Every function that needs a machine takes a :class:`Machine` or a topology
spec such as ``"dgx1"`` or ``"ring:8"`` (:func:`simcoll.machines.as_machine`).

Quick start (the README's):

>>> from simcoll import check, critical_path_time_s, generate, load_machine, lower_bounds
>>> from simcoll import lower_algorithm, make_collective, simulate
>>> machine = load_machine("dgx1")  # a topology and its cost model
>>> algo = generate("ring", machine, "allreduce")  # an Algorithm; the spec "dgx1" works too
>>> check(algo, machine)  # independent symbolic verifier: no problems
[]
>>> round(critical_path_time_s(algo, machine, 1 << 20) * 1e6, 1)  # analytic α-β time, microseconds
49.6
>>> result = simulate(algo, machine, 1 << 20)  # .time_s, .busbw_GBps, .timeline, .utilisation
>>> round(result.busbw_GBps, 1)
37.0
>>> program = lower_algorithm(algo, machine=machine)  # thread blocks, channels, fused instructions
>>> round(simulate(program, machine, 1 << 20).time_s * 1e6, 1)  # .save_chrome_trace(path) for a timeline
109.6
>>> lower_bounds(make_collective("allgather", 8), machine, 1 << 30).min_rounds_per_chunk
Fraction(7, 6)

The package imports lazily (PEP 562): ``import simcoll`` loads no submodule,
and a name of ``__all__`` imports its module on first use, so that the CLI
starts without pandas, matplotlib, the solvers or the simulator.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

#: Each public name: (submodule, attribute).
_EXPORTS: dict[str, tuple[str, str]] = {
    # -- machines: topologies, cost models, and the two together ----------------------
    "Machine": ("machines", "Machine"),
    "Topology": ("topology", "Topology"),
    "CostModel": ("cost_model", "CostModel"),
    "Routes": ("routes", "Routes"),
    "as_machine": ("machines", "as_machine"),
    "bandwidth_relation": ("routes", "bandwidth_relation"),
    "builtin_models": ("machines", "builtin_models"),
    "builtin_topologies": ("machines", "builtin_topologies"),
    "load_machine": ("machines", "load_machine"),
    "load_model": ("machines", "load_model"),
    "load_topology": ("machines", "load_topology"),
    "save_model": ("cost_model", "save_model"),
    "save_topology": ("topology", "save_topology"),
    # -- collectives ------------------------------------------------------------------
    "Collective": ("collectives", "Collective"),
    "custom_collective": ("collectives", "custom_collective"),
    "make_collective": ("collectives", "make_collective"),
    "relation_all": ("collectives", "relation_all"),
    "relation_root": ("collectives", "relation_root"),
    "relation_scattered": ("collectives", "relation_scattered"),
    "relation_transpose": ("collectives", "relation_transpose"),
    # -- schedules: Algorithms, Programs and their files ------------------------------
    "Algorithm": ("algorithm", "Algorithm"),
    "BandwidthConstraint": ("algorithm", "BandwidthConstraint"),
    "Transfer": ("algorithm", "Transfer"),
    "Executor": ("program", "Executor"),
    "Instruction": ("program", "Instruction"),
    "Program": ("program", "Program"),
    "RankProgram": ("program", "RankProgram"),
    "Ref": ("program", "Ref"),
    "export_msccl_xml": ("interop", "export_msccl_xml"),
    "load_schedule": ("interop", "load_schedule"),
    "load_schedules": ("interop", "load_schedules"),
    "parse_msccl_xml": ("interop", "parse_msccl_xml"),
    "read_msccl_xml": ("interop", "read_msccl_xml"),
    "read_msccl_xml_all": ("interop", "read_msccl_xml_all"),
    "read_sccl_json": ("interop", "read_sccl_json"),
    "save_schedule": ("interop", "save_schedule"),
    # -- producers: generators, the compiler ------------------------------------------
    "ALGORITHMS": ("algorithms", "REGISTRY"),
    "applicable": ("algorithms", "applicable"),
    "generate": ("algorithms", "generate"),
    "lower_algorithm": ("compiler", "lower_algorithm"),
    # -- consumers: verifier, costs, bounds, simulator, comparison --------------------
    "Bounds": ("bounds", "Bounds"),
    "SimulationResult": ("simulator", "SimulationResult"),
    "algbw_GBps": ("analytic", "algbw_GBps"),
    "algorithm_time_s": ("analytic", "algorithm_time_s"),
    "busbw_GBps": ("analytic", "busbw_GBps"),
    "check": ("verify", "check"),
    "compare": ("compare", "compare"),
    "critical_path_time_s": ("analytic", "critical_path_time_s"),
    "k_synchronous_time_s": ("analytic", "k_synchronous_time_s"),
    "lower_bounds": ("bounds", "lower_bounds"),
    "min_rounds_per_chunk": ("bounds", "min_rounds_per_chunk"),
    "min_steps": ("bounds", "min_steps"),
    "plot_comparison": ("compare_plot", "plot_comparison"),
    "simulate": ("simulator", "simulate"),
    "step_time_s": ("analytic", "step_time_s"),
    "time_lower_bound_s": ("bounds", "time_lower_bound_s"),
    "verify": ("verify", "verify"),
    # -- errors -----------------------------------------------------------------------
    "SimcollError": ("errors", "SimcollError"),
    "AlgorithmError": ("errors", "AlgorithmError"),
    "CollectiveError": ("errors", "CollectiveError"),
    "CompileError": ("errors", "CompileError"),
    "DSLError": ("errors", "DSLError"),
    "ModelError": ("errors", "ModelError"),
    "NotApplicableError": ("errors", "NotApplicableError"),
    "ProgramDeadlockError": ("errors", "ProgramDeadlockError"),
    "SimulationError": ("errors", "SimulationError"),
    "SizeError": ("errors", "SizeError"),
    "SynthesisError": ("errors", "SynthesisError"),
    "TimeLimitError": ("errors", "TimeLimitError"),
    "TopologyError": ("errors", "TopologyError"),
    "VerificationError": ("errors", "VerificationError"),
}

#: The public names: those of :data:`_EXPORTS`, in its order (nothing is imported eagerly).
__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    """Import the submodule behind a public name on first use (PEP 562)."""
    if name not in _EXPORTS:
        raise AttributeError(f"module 'simcoll' has no attribute {name!r}")
    module_name, attribute = _EXPORTS[name]
    value = getattr(importlib.import_module(f".{module_name}", __name__), attribute)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

"""The package's public names: ``simcoll.__all__`` is derived from the lazy
export table, so each name is written once; the set must not change by
accident, and ``from simcoll import *`` and ``dir(simcoll)`` give them all."""

from __future__ import annotations

import simcoll

#: ``simcoll.__all__`` as it was when it was still written out by hand (issue 48).
PUBLIC_NAMES = [
    # machines
    "Machine", "Topology", "CostModel", "Routes", "as_machine", "bandwidth_relation", "builtin_models",
    "builtin_topologies", "load_machine", "load_model", "load_topology", "save_model", "save_topology",
    # collectives
    "Collective", "custom_collective", "make_collective", "relation_all", "relation_root", "relation_scattered",
    "relation_transpose",
    # schedules
    "Algorithm", "BandwidthConstraint", "Transfer", "Executor", "Instruction", "Program", "RankProgram", "Ref",
    "export_msccl_xml", "load_schedule", "load_schedules", "parse_msccl_xml", "read_msccl_xml",
    "read_msccl_xml_all", "read_sccl_json", "save_schedule",
    # producers
    "ALGORITHMS", "applicable", "generate", "lower_algorithm",
    # consumers
    "Bounds", "SimulationResult", "algbw_GBps", "algorithm_time_s", "busbw_GBps", "check", "compare",
    "critical_path_time_s", "k_synchronous_time_s", "lower_bounds", "min_rounds_per_chunk", "min_steps",
    "plot_comparison", "simulate", "step_time_s", "time_lower_bound_s", "verify",
    # errors
    "SimcollError", "AlgorithmError", "CollectiveError", "CompileError", "DSLError", "ModelError",
    "NotApplicableError", "ProgramDeadlockError", "SimulationError", "SizeError", "SynthesisError",
    "TimeLimitError", "TopologyError", "VerificationError",
]  # fmt: skip


def test_all_is_the_export_table_and_has_not_changed():
    assert simcoll.__all__ == list(simcoll._EXPORTS)
    assert sorted(simcoll.__all__) == sorted(PUBLIC_NAMES)
    assert len(set(simcoll.__all__)) == len(simcoll.__all__)


def test_star_import_and_dir_give_every_public_name():
    namespace: dict[str, object] = {}
    exec("from simcoll import *", namespace)
    assert set(PUBLIC_NAMES) <= set(namespace)
    assert set(PUBLIC_NAMES) <= set(dir(simcoll))
    assert namespace["Algorithm"] is simcoll.Algorithm

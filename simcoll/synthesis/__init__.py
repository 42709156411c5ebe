"""Synthesizers: algorithms found by solvers rather than written by hand.

- :mod:`~simcoll.synthesis.sccl`: SCCL (PPoPP'21), Pareto-optimal
  k-synchronous algorithms, with a Z3 and an OR-Tools CP-SAT backend.
- :mod:`~simcoll.synthesis.taccl`: TACCL (NSDI'23), communication sketches and
  the routing / ordering / contiguity synthesizer on CP-SAT.

Synthesizers produce :class:`~simcoll.algorithm.Algorithm` s and never import
the simulator.
"""

from .instance import Instance, reversed_relation
from .result import SolverOutcome, SynthesisResult
from .sccl import (
    BACKENDS,
    ParetoPoint,
    bandwidth_bound,
    inverse_collective,
    latency_bound,
    make_target,
    pareto_synthesize,
    synthesize,
)
from .taccl import Sketch, TacclResult, builtin_sketches, load_sketch, taccl_synthesize

__all__ = [
    "BACKENDS",
    "Instance",
    "ParetoPoint",
    "Sketch",
    "SolverOutcome",
    "SynthesisResult",
    "TacclResult",
    "bandwidth_bound",
    "builtin_sketches",
    "inverse_collective",
    "latency_bound",
    "load_sketch",
    "make_target",
    "pareto_synthesize",
    "reversed_relation",
    "synthesize",
    "taccl_synthesize",
]

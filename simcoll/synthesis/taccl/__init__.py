"""TACCL synthesis (Shah et al., NSDI'23): communication sketches and the
three-stage routing / ordering / contiguity synthesizer on OR-Tools CP-SAT.

- :mod:`.sketch`: sketch JSON (Appendix A) and the logical topology;
- :mod:`.routing`: stage 1 (B.1), :mod:`.ordering`: stage 2 (B.2, plus a
  forward-backward improvement of its greedy schedule, not in TACCL),
  :mod:`.contiguity`: stage 3 (B.3);
- :mod:`.combining`: plans, ReduceScatter by inversion, Allreduce (§5.3);
- :mod:`.synthesizer`: :func:`taccl_synthesize`, the whole pipeline;
- ``simcoll synth taccl``: :mod:`simcoll.cli.synth`.
"""

from .sketch import LogicalTopology, Sketch, builtin_sketches, load_sketch, logical_topology, sketch_from_dict
from .synthesizer import SUPPORTED, TacclResult, taccl_collective, taccl_synthesize

__all__ = [
    "SUPPORTED",
    "LogicalTopology",
    "Sketch",
    "TacclResult",
    "builtin_sketches",
    "load_sketch",
    "logical_topology",
    "sketch_from_dict",
    "taccl_collective",
    "taccl_synthesize",
]

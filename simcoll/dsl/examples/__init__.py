"""The GC3 paper's programs, written in the DSL (GC3 §2, §7). Each function
takes sizes and options and returns a compiled, checked Program; the
``*_program`` variants return the traced :class:`~simcoll.dsl.DSLProgram`.

>>> from simcoll.dsl.examples import ring_allreduce
>>> ring_allreduce(4).instruction_counts()["rrs"]   # P(P-2), as the real ring XML
8
"""

from .allpairs_allreduce import allpairs_allreduce, allpairs_allreduce_program
from .alltoall_two_step import alltoall_two_step, alltoall_two_step_program
from .alltonext import alltonext, alltonext_program
from .hierarchical_allreduce import hierarchical_allreduce, hierarchical_allreduce_program
from .ring_allreduce import ring_allreduce, ring_allreduce_program
from .rings import allgather_ring, reduce_scatter_ring

__all__ = [
    "allgather_ring",
    "allpairs_allreduce",
    "allpairs_allreduce_program",
    "alltonext",
    "alltonext_program",
    "alltoall_two_step",
    "alltoall_two_step_program",
    "hierarchical_allreduce",
    "hierarchical_allreduce_program",
    "reduce_scatter_ring",
    "ring_allreduce",
    "ring_allreduce_program",
]

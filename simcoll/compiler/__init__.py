"""Compiler from traced DSL programs and Algorithms to Programs (GC3 §4–§5,
TACCL §6.2). :func:`compile_trace` runs the passes (listed in
:mod:`simcoll.compiler.pipeline`); :func:`lower_algorithm` lowers an
:class:`~simcoll.algorithm.Algorithm` through the same back half."""

from .checks import check_compiled, check_fifo_bound, verify_compiled
from .lower import algorithm_trace, lower_algorithm
from .pipeline import compile_trace
from .trace import CompileError, Loc, Op, Trace

__all__ = [
    "CompileError",
    "Loc",
    "Op",
    "Trace",
    "algorithm_trace",
    "check_compiled",
    "check_fifo_bound",
    "compile_trace",
    "lower_algorithm",
    "verify_compiled",
]

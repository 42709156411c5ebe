"""GC3/MSCCLang-style chunk DSL embedded in Python (GC3 §3, §5.1).

``with program(name, collective, ...) as prog:`` (or the decorator
:func:`dsl_program`) traces ``chunk(...)``,
``.copy(...)``, ``.reduce(...)`` and ``parallelize(n)``; ``prog.compile()``
runs the compiler (:mod:`simcoll.compiler`) and returns a checked
:class:`~simcoll.program.Program`. The GC3 paper's programs are in
:mod:`simcoll.dsl.examples`.
"""

from .core import ChunkRef, DSLError, DSLProgram, chunk, dsl_program, parallelize, program

__all__ = ["ChunkRef", "DSLError", "DSLProgram", "chunk", "dsl_program", "parallelize", "program"]

"""How the command line ends when the user presses Ctrl-C: one line on
stderr and exit code 130, whatever the interrupt landed in.

Two places where it can land need care:

- An extension module's initialisation (NumPy's, OR-Tools'...): the
  interpreter turns the KeyboardInterrupt into ``ImportError:
  initialization failed``, with the interrupt as its context
  (:func:`caused_by_ctrl_c` finds it).
- An ``exec`` or ``eval`` of source text (dataclasses and named tuples are
  built that way): CPython records that a KeyboardInterrupt left it and,
  under ``python -m``, kills the process with SIGINT once it has exited
  (``Py_RunMain`` in Modules/main.c) even when the interrupt was caught, so
  the caller saw -2 instead of 130. The record is cleared at the start of
  every such ``exec`` (``run_eval_code_obj`` in Python/pythonrun.c), so
  :func:`report_interrupt` runs an empty one.
"""

from __future__ import annotations

import sys

#: The exit code of an interrupted command (128 + SIGINT, as shells report it).
INTERRUPTED = 130


def caused_by_ctrl_c(exc: BaseException) -> bool:
    """Whether ``exc`` is, or was raised while handling, a KeyboardInterrupt.

    >>> try:
    ...     try:
    ...         raise KeyboardInterrupt
    ...     except KeyboardInterrupt:
    ...         raise ImportError("initialization failed")
    ... except ImportError as exc:
    ...     caused_by_ctrl_c(exc)
    True
    >>> caused_by_ctrl_c(ImportError("no module named 'z3'"))
    False
    """
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        if isinstance(link, KeyboardInterrupt):
            return True
        seen.add(id(link))
        link = link.__cause__ or link.__context__
    return False


def report_interrupt() -> int:
    """Print that the command was interrupted and return :data:`INTERRUPTED`.

    Every write is atomic, so nothing half-written is left behind.
    """
    print("simcoll: interrupted", file=sys.stderr)
    exec("")  # clears CPython's record of an interrupt that left an exec (module docstring)
    return INTERRUPTED

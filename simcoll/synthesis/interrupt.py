"""Ctrl-C during a solver run: stop the solver, then raise KeyboardInterrupt.

Both solvers swallow Ctrl-C by default and return as if their time limit had
run out: CP-SAT (``catch_sigint_signal``) stops with its best solution, Z3
answers "unknown" ("interrupted from keyboard"). A caller would then report a
wrong reason or, worse, write that partial result as if it were the answer
(issue 14). Here CP-SAT runs in a worker thread with its own SIGINT handling
off, while the main thread waits in short slices so that Python delivers
KeyboardInterrupt; the handler stops the search and waits for the worker to
return, so no solver callback outlives the interrupt. A Z3 answer
"interrupted from keyboard" is turned back into KeyboardInterrupt.
"""

from __future__ import annotations

import threading
from typing import Any

#: How often (s) the waiting main thread lets Python deliver a pending Ctrl-C.
_POLL_S = 0.05


def solve_interruptibly(solver: Any, model: Any, callback: Any = None) -> int:
    """``solver.solve(model, callback)``, interruptible by Ctrl-C.

    Parameters
    ----------
    solver : ortools.sat.python.cp_model.CpSolver
        The solver, its parameters set.
    model : ortools.sat.python.cp_model.CpModel
        The model.
    callback : CpSolverSolutionCallback, optional
        Called on each solution (in the solver's threads).

    Returns
    -------
    int
        The CP-SAT status.

    Raises
    ------
    KeyboardInterrupt
        After the search has stopped, when Ctrl-C came during it.

    Examples
    --------
    >>> from ortools.sat.python import cp_model
    >>> model = cp_model.CpModel()
    >>> x = model.new_int_var(0, 3, "x")
    >>> model.maximize(x)
    >>> solver = cp_model.CpSolver()
    >>> solve_interruptibly(solver, model) == cp_model.OPTIMAL, solver.value(x)
    (True, 3)
    """
    solver.parameters.catch_sigint_signal = False
    outcome: dict[str, Any] = {}
    done = threading.Event()

    def run() -> None:
        try:
            outcome["status"] = solver.solve(model, callback) if callback is not None else solver.solve(model)
        except BaseException as exc:  # handed to the caller's thread below
            outcome["error"] = exc
        finally:
            done.set()

    threading.Thread(target=run, name="cp-sat", daemon=True).start()
    try:
        # Event.wait, not Thread.join: a join interrupted by Ctrl-C can report a live thread as finished (< 3.13)
        while not done.wait(_POLL_S):
            pass
    except KeyboardInterrupt:
        solver.stop_search()
        done.wait()
        raise
    if "error" in outcome:
        raise outcome["error"]
    return outcome["status"]


def raise_if_interrupted(reason_unknown: str) -> None:
    """Raise KeyboardInterrupt when a Z3 "unknown" came from Ctrl-C.

    Parameters
    ----------
    reason_unknown : str
        ``z3.Solver.reason_unknown()`` after an "unknown" answer.

    Raises
    ------
    KeyboardInterrupt
        When the reason is Z3's for Ctrl-C.

    Examples
    --------
    >>> raise_if_interrupted("timeout")
    >>> try:
    ...     raise_if_interrupted("interrupted from keyboard")
    ... except KeyboardInterrupt:
    ...     print("interrupted")
    interrupted
    """
    if "interrupted" in reason_unknown or "canceled" in reason_unknown:
        raise KeyboardInterrupt

"""The wall-clock limit of a check: :func:`~simcoll.verify.check` sets one
(its ``time_limit_s``) for the context it runs in, and every verifier's long
loop calls :func:`_on_time`, which raises once the limit has passed."""

from __future__ import annotations

import contextvars
import time
from dataclasses import dataclass, field

from ..errors import TimeLimitError


@dataclass
class _Deadline:
    """A check's wall-clock limit (:func:`check`'s ``time_limit_s``)."""

    what: str
    time_limit_s: float
    started_s: float = field(default_factory=time.perf_counter)


#: The limit of the check running in this context, if it has one.
_DEADLINE: contextvars.ContextVar[_Deadline | None] = contextvars.ContextVar("simcoll_verify_deadline", default=None)


def _on_time(where: str, at: object) -> None:
    """Raise :class:`TimeLimitError` once the running check is past its limit
    (the message says it was ``where`` ``at``); nothing without a limit."""
    deadline = _DEADLINE.get()
    if deadline is not None and time.perf_counter() - deadline.started_s > deadline.time_limit_s:
        raise TimeLimitError(
            f"{deadline.what}: wall-clock limit of {deadline.time_limit_s:g} s reached {where} {at} "
            "(raise time_limit_s, or skip the check: verify=False, --no-verify)"
        )

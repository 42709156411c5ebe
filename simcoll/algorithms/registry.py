"""The registry types: a :class:`Generator` names an algorithm family, the
collectives it implements and its options; :class:`Option` turns a CLI
``k=v`` string into the generator's keyword argument.

Each family module exports ``GENERATORS``, a tuple of Generators;
:mod:`simcoll.algorithms` collects them into ``REGISTRY``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..algorithm import Algorithm
from ..arguments import positive_int as positive_int  # re-exported: the families take their options with it
from ..errors import OptionError
from ..topology import Topology


@dataclass(frozen=True)
class Option:
    """A generator option: ``help`` for ``simcoll algo list``, ``parse`` from
    the CLI string (it raises ValueError on bad input, as ``int`` does, and
    :meth:`Generator.parse_options` turns that into an
    :class:`~simcoll.errors.OptionError` naming the option)."""

    help: str
    parse: Callable[[str], Any] = str


@dataclass(frozen=True)
class Generator:
    """A registered algorithm family.

    ``function(topology, collective, **options) -> Algorithm`` raises
    :class:`~simcoll.errors.NotApplicableError` where it does not apply.
    ``collectives`` is ``function.collectives``, which the function declares
    with :func:`~simcoll.algorithms.common.implements` (the one place that
    says, and enforces, what it implements).
    ``chunks(collective_name, topology, **options)`` is the chunk factor
    used when the user gives none, for the generator's options (default: P
    for Allreduce, one block per rank; else 1).
    """

    name: str
    function: Callable[..., Algorithm]
    collectives: tuple[str, ...]
    summary: str
    options: dict[str, Option] = field(default_factory=dict)
    chunks: Callable[..., int] | None = None

    def __post_init__(self) -> None:
        # what the function implements is declared once, by @implements on it; the entry must say the same
        declared = getattr(self.function, "collectives", None)
        if declared is not None and tuple(self.collectives) != tuple(declared):
            raise OptionError(
                f"registry entry {self.name!r} lists {self.collectives} but its function implements {declared}: "
                "pass function.collectives"
            )

    def default_chunks(self, collective: str, topology: Topology, **options: Any) -> int:
        """The chunk factor when the user gives none, for these generator
        ``options`` (a hierarchy's groups decide how many chunks make its
        blocks equal)."""
        if self.chunks is not None:
            return self.chunks(collective, topology, **options)
        return topology.num_ranks if collective == "allreduce" else 1

    def parse_options(self, options: dict[str, str]) -> dict[str, Any]:
        """CLI ``k=v`` strings to keyword arguments, naming the bad one."""
        parsed: dict[str, Any] = {}
        for key, value in options.items():
            if key not in self.options:
                known = ", ".join(self.options) or "none"
                raise OptionError(f"{self.name} has no option {key!r} (options: {known})")
            try:
                parsed[key] = self.options[key].parse(value)
            except ValueError as exc:
                raise OptionError(f"{self.name}: option {key}={value!r}: {exc}") from None
        return parsed


# -- option parsers -------------------------------------------------------------
def int_list(text: str) -> list[int]:
    """``"0,3,2,1"`` -> ``[0, 3, 2, 1]``."""
    try:
        return [int(x) for x in text.split(",")]
    except ValueError:
        raise ValueError("expected comma-separated integers") from None


def choice(*values: str) -> Callable[[str], str]:
    """A parser accepting only ``values``."""

    def parse(text: str) -> str:
        if text not in values:
            raise ValueError(f"expected one of {', '.join(values)}")
        return text

    return parse

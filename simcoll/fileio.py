"""Reading schedules from files: Algorithm or Program JSON, told apart by
their ``format`` field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .errors import AlgorithmError, SimcollError


def read_text(path: str | Path) -> str:
    try:
        return Path(path).read_text()
    except OSError as exc:
        raise SimcollError(f"{path}: cannot read: {exc.strerror}") from None


def parse_json(text: str, where: str = "input") -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise AlgorithmError(f"{where}: not valid JSON: {exc}") from None


def load_schedule(path: str | Path):
    """Load an Algorithm or a Program from a simcoll JSON file."""
    from .algorithm import Algorithm
    from .program import Program

    data = parse_json(read_text(path), str(path))
    kind = data.get("format") if isinstance(data, dict) else None
    if kind == "simcoll.algorithm":
        return Algorithm.from_dict(data)
    if kind == "simcoll.program":
        return Program.from_dict(data)
    raise AlgorithmError(f'{path}: not a simcoll Algorithm or Program (its "format" is {kind!r})')

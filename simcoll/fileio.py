"""Reading schedules from files: simcoll Algorithm or Program JSON (told apart
by their ``format`` field), MSCCL XML (by content: an ``<algo`` element) and
SCCL synthesizer JSON (by its keys: ``sccl_type``/``msccl_type`` or
``steps``/``input_map``/``output_map``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .errors import AlgorithmError, SimcollError


def read_text(path: str | Path) -> str:
    """The text of ``path`` (UTF-8), or a SimcollError naming the file."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise SimcollError(f"{path}: cannot read: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise SimcollError(f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason})") from None


def parse_json(text: str, where: str = "input") -> Any:
    """``text`` parsed as JSON, or an AlgorithmError naming ``where``."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise AlgorithmError(f"{where}: not valid JSON: {exc}") from None


def load_schedules(path: str | Path) -> list:
    """Every schedule in a file: one for JSON, one per ``<algo>`` for MSCCL XML.

    MSCCL XML gives Programs (:func:`simcoll.interop.import_msccl_xml_all`),
    SCCL JSON an Algorithm (:func:`simcoll.interop.import_sccl_json`).
    """
    from .algorithm import Algorithm
    from .program import Program

    text = read_text(path)
    head = text.lstrip()
    if head.startswith("<"):
        if "<algo" not in text:
            raise AlgorithmError(f"{path}: XML without an <algo> element is not MSCCL XML")
        from .interop.msccl_xml import import_msccl_xml_all

        return list(import_msccl_xml_all(Path(path)))
    data = parse_json(text, str(path))
    kind = data.get("format") if isinstance(data, dict) else None
    if kind == "simcoll.algorithm":
        return [Algorithm.from_dict(data)]
    if kind == "simcoll.program":
        return [Program.from_dict(data)]
    from .interop.sccl_json import is_sccl_json

    if is_sccl_json(data):
        return [_sccl(data, path)]
    raise AlgorithmError(
        f'{path}: not a simcoll Algorithm or Program (its "format" is {kind!r}), MSCCL XML or SCCL JSON'
    )


def _sccl(data: Any, path: str | Path):
    from .interop.sccl_json import import_sccl_json

    try:
        return import_sccl_json(data)
    except AlgorithmError as exc:
        message = str(exc).removeprefix("SCCL JSON: ")
        raise AlgorithmError(f"{path}: {message}") from None


def load_schedule(path: str | Path):
    """Load one Algorithm or Program from a file in any format
    :func:`load_schedules` reads; an MSCCL XML file with several ``<algo>``
    elements is an error (use :func:`load_schedules`)."""
    schedules = load_schedules(path)
    if len(schedules) != 1:
        raise AlgorithmError(f"{path}: holds {len(schedules)} programs (<algo> elements); load them all instead")
    return schedules[0]

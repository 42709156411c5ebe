"""Schedules in files: the one place that tells file formats apart.

simcoll reads four formats of schedule and writes three:

======================  ==========================  ======================  ============
format                  holds                       recognised by           written as
======================  ==========================  ======================  ============
simcoll JSON            one Algorithm or Program    ``"format"`` field      ``.json``
simcoll columns (npz)   one Algorithm               a zip archive           ``.npz``
MSCCL XML (GC3-IR)      Programs, one per ``<algo>``  an ``<algo`` element    ``.xml``
SCCL synthesizer JSON   one Algorithm               its keys                (read only)
======================  ==========================  ======================  ============

Reading goes by content (:func:`parse_schedules`), so a file's extension does
not matter, except that a ``.xml`` file that is not XML is refused as "not
MSCCL XML" (not told apart as JSON); writing goes by the extension of the
target (or ``format=``).
Reading a file and parsing text are separate verbs, as in networkx
(``read_graphml`` / ``parse_graphml``): :func:`load_schedules` reads a file,
:func:`parse_schedules` parses text. Saves are atomic
(:func:`simcoll.files.atomic_output`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..algorithm import NPZ_MAGIC, NPZ_SUFFIX, Algorithm
from ..algorithm.schedule import warn_json_size
from ..compiler import lower_algorithm
from ..errors import AlgorithmError
from ..files import atomic_output, parse_json, read_text, write_atomic
from ..program import Program
from .msccl_xml import DEFAULT_DIALECT, export_msccl_xml, parse_msccl_xml_all
from .sccl_json import algorithm_from_sccl_dict, is_sccl_json

#: Formats :func:`save_schedule` writes, by the file extension that selects them.
SAVE_FORMATS = {".json": "simcoll-json", ".xml": "msccl-xml", NPZ_SUFFIX: "simcoll-npz"}

Schedule = Algorithm | Program


def guess_format(text: str, where: str = "input") -> str:
    """Which format schedule text is in: ``"msccl-xml"``, ``"simcoll-json"``
    or ``"sccl-json"``, by content.

    MSCCL XML starts with ``<`` and has an ``<algo`` element; simcoll JSON has
    ``"format": "simcoll.algorithm"`` or ``"simcoll.program"``; SCCL JSON is
    recognised by :func:`simcoll.interop.sccl_json.is_sccl_json`.

    Raises
    ------
    AlgorithmError
        Naming ``where`` when the text is none of them.

    Examples
    --------
    >>> guess_format('<algo name="x"/>'), guess_format('{"format": "simcoll.program"}')
    ('msccl-xml', 'simcoll-json')
    >>> guess_format('{"format": "other"}', "x.json")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    simcoll.errors.AlgorithmError: x.json: not a simcoll Algorithm or Program (its "format" is 'other'), ...
    """
    return _classify(text, where)[0]


def _classify(text: str, where: str) -> tuple[str, Any]:
    """(format, decoded JSON or None)."""
    if text.lstrip().startswith("<"):
        if "<algo" not in text:
            raise AlgorithmError(f"{where}: XML without an <algo> element is not MSCCL XML")
        return "msccl-xml", None
    data = parse_json(text, where, error=AlgorithmError)
    kind = data.get("format") if isinstance(data, dict) else None
    if kind in ("simcoll.algorithm", "simcoll.program"):
        return "simcoll-json", data
    if is_sccl_json(data):
        return "sccl-json", data
    raise AlgorithmError(
        f'{where}: not a simcoll Algorithm or Program (its "format" is {kind!r}), MSCCL XML or SCCL JSON'
    )


def parse_schedules(text: str, where: str = "input") -> list[Schedule]:
    """Every schedule in text of any format this module reads (table above).

    Parameters
    ----------
    text : str
        simcoll JSON, MSCCL XML or SCCL synthesizer JSON.
    where : str
        What the text is (a file name), the prefix of error messages.

    Returns
    -------
    list of Algorithm or Program
        One for JSON; one Program per ``<algo>`` for MSCCL XML.

    Raises
    ------
    AlgorithmError
        Naming ``where`` (and the field, line or element) for text in no
        known format or malformed in its own.

    Examples
    --------
    >>> from simcoll import make_collective
    >>> from simcoll.algorithm import steps_from_lists
    >>> swap = steps_from_lists("swap", make_collective("allgather", 2, 1), [[(0, 0, 1, "copy"), (1, 1, 0, "copy")]])
    >>> parse_schedules(swap.to_json()) == [swap]
    True
    """
    kind, data = _classify(text, where)
    if kind == "msccl-xml":
        return list(parse_msccl_xml_all(text, where))
    if kind == "sccl-json":
        return [algorithm_from_sccl_dict(data, where)]
    if data["format"] == "simcoll.algorithm":
        return [Algorithm.from_dict(data, where)]
    return [Program.from_dict(data, where)]


def load_schedules(path: str | Path) -> list[Schedule]:
    """Every schedule in a file: one for JSON, one Program per ``<algo>`` of
    MSCCL XML (:func:`parse_schedules`).

    Parameters
    ----------
    path : str or Path
        The file.

    Returns
    -------
    list of Algorithm or Program

    Raises
    ------
    AlgorithmError
        Naming the file when it cannot be read, is in no known format or is
        malformed in its own.

    Examples
    --------
    >>> import tempfile
    >>> from simcoll import make_collective
    >>> from simcoll.algorithm import steps_from_lists
    >>> swap = steps_from_lists("swap", make_collective("allgather", 2, 1), [[(0, 0, 1, "copy"), (1, 1, 0, "copy")]])
    >>> path = Path(tempfile.mkdtemp()) / "swap.json"
    >>> save_schedule(swap, path)
    >>> load_schedules(path) == [swap]
    True
    """
    if _is_npz(path):
        return [Algorithm.from_npz(path)]
    text = read_text(path, error=AlgorithmError)
    if Path(path).suffix.lower() == ".xml" and not text.lstrip().startswith("<"):
        # by content it would be read as JSON, and its fault told as JSON's: say what its name promises
        what = "the file is empty" if not text.strip() else "it does not start with an XML element"
        raise AlgorithmError(f"{path}: not MSCCL XML: {what}")
    return parse_schedules(text, str(path))


def _is_npz(path: str | Path) -> bool:
    """Whether the file starts as a zip archive (the ``.npz`` column format)."""
    try:
        with open(path, "rb") as handle:
            return handle.read(len(NPZ_MAGIC)) == NPZ_MAGIC
    except OSError:
        return False  # read_text reports it


def load_schedule(path: str | Path) -> Schedule:
    """The one Algorithm or Program in a file of any format
    :func:`load_schedules` reads.

    Parameters
    ----------
    path : str or Path
        The file.

    Returns
    -------
    Algorithm or Program

    Raises
    ------
    AlgorithmError
        As :func:`load_schedules`, and for an MSCCL XML file holding several
        ``<algo>`` elements (use :func:`load_schedules`).

    Examples
    --------
    >>> import tempfile
    >>> from simcoll import make_collective
    >>> from simcoll.algorithm import steps_from_lists
    >>> swap = steps_from_lists("swap", make_collective("allgather", 2, 1), [[(0, 0, 1, "copy"), (1, 1, 0, "copy")]])
    >>> path = Path(tempfile.mkdtemp()) / "swap.xml"
    >>> save_schedule(swap, path)               # lowered to a Program first
    >>> program = load_schedule(path)
    >>> type(program).__name__, program.collective == swap.collective
    ('Program', True)
    """
    schedules = load_schedules(path)
    if len(schedules) != 1:
        raise AlgorithmError(f"{path}: holds {len(schedules)} programs (<algo> elements); load them all instead")
    return schedules[0]


def save_schedule(
    schedule: Schedule, path: str | Path, format: str | None = None, *, dialect: str = DEFAULT_DIALECT
) -> None:
    """Write an Algorithm or Program to a file, atomically.

    Parameters
    ----------
    schedule : Algorithm or Program
        What to write.
    path : str or Path
        The file; its extension selects the format unless ``format`` is given:
        ``.json`` simcoll JSON, ``.xml`` MSCCL XML, ``.npz`` the compact
        column format of :meth:`simcoll.algorithm.Algorithm.write_npz`
        (NumPy arrays and a JSON header; Algorithms only).
    format : {"simcoll-json", "msccl-xml", "simcoll-npz"}, optional
        The format, whatever the extension. MSCCL XML holds Programs: an
        Algorithm is first lowered with
        :func:`simcoll.compiler.lower_algorithm` (default options).
    dialect : {"classic", "newer"}
        The MSCCL XML dialect (:func:`simcoll.interop.export_msccl_xml`).

    Raises
    ------
    AlgorithmError
        For an unknown format or extension, a schedule the format cannot
        express, or naming the file when it cannot be written (the previous
        file, if any, is then unchanged).

    Examples
    --------
    >>> import tempfile
    >>> from simcoll import make_collective
    >>> from simcoll.algorithm import steps_from_lists
    >>> swap = steps_from_lists("swap", make_collective("allgather", 2, 1), [[(0, 0, 1, "copy"), (1, 1, 0, "copy")]])
    >>> folder = Path(tempfile.mkdtemp())
    >>> save_schedule(swap, folder / "swap.json")
    >>> load_schedule(folder / "swap.json") == swap
    True
    >>> save_schedule(swap, "swap.txt")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    simcoll.errors.AlgorithmError: swap.txt: cannot tell the format from the extension '.txt': use .json ...
    """
    if not isinstance(schedule, (Algorithm, Program)):
        raise AlgorithmError(f"{path}: can save an Algorithm or a Program, not {type(schedule).__name__}")
    if format is None:
        suffix = Path(path).suffix.lower()
        if suffix not in SAVE_FORMATS:
            known = " or ".join(f"{ext} ({name})" for ext, name in SAVE_FORMATS.items())
            raise AlgorithmError(
                f"{path}: cannot tell the format from the extension {suffix!r}: use {known}, or pass format="
            )
        format = SAVE_FORMATS[suffix]
    if format == "simcoll-npz":
        if not isinstance(schedule, Algorithm):
            raise AlgorithmError(f"{path}: the {NPZ_SUFFIX} format holds Algorithms; save a Program as .json or .xml")
        with atomic_output(path, "wb", error=AlgorithmError) as handle:
            schedule.write_npz(handle)
        return
    if format == "simcoll-json":
        if isinstance(schedule, Algorithm):
            warn_json_size(schedule, path)
        text = schedule.to_json()
    elif format == "msccl-xml":
        program = lower_algorithm(schedule) if isinstance(schedule, Algorithm) else schedule
        text = export_msccl_xml(program, dialect)
    else:
        raise AlgorithmError(f"{path}: unknown format {format!r}; known: {', '.join(SAVE_FORMATS.values())}")
    write_atomic(path, text, error=AlgorithmError)

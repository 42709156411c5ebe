"""Reading and writing files: the few helpers every simcoll format uses.

Reading a file and parsing text are separate verbs, as in networkx
(``read_graphml`` reads a path, ``parse_graphml`` parses a string):
:func:`read_text` reads, :func:`parse_json` and :func:`parse_yaml` parse,
:func:`load_yaml` does both. Writing goes through :func:`atomic_output` (or
:func:`write_atomic`), which writes a temporary file next to the target and
renames it into place only once it is complete, so an interrupted or failed
save leaves the previous file as it was (POSIX ``rename(2)`` replaces a file
atomically within one file system; ``os.replace`` is Python's portable form).

Every helper raises ``error`` (a :class:`~simcoll.errors.SimcollError`
subclass the caller chooses, so that a topology file's fault is a
``TopologyError``; :class:`~simcoll.errors.FileError` by default) with a
one-line message naming the file. This module
imports nothing else from simcoll, so any module may use it.
"""

from __future__ import annotations

import csv
import io
import json
import os
import secrets
import shutil
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import yaml

from .errors import FileError, OptionError, SimcollError


def read_text(path: str | Path, *, error: type[SimcollError] = FileError) -> str:
    """The text of a UTF-8 file.

    Parameters
    ----------
    path : str or Path
        The file to read.
    error : type
        The :class:`SimcollError` subclass to raise (default :class:`FileError`).

    Returns
    -------
    str

    Raises
    ------
    FileError
        (or the ``error`` given) naming the file when it cannot be read or is not UTF-8.

    Examples
    --------
    >>> read_text("/nonexistent/a.json")
    Traceback (most recent call last):
    simcoll.errors.FileError: /nonexistent/a.json: cannot read: No such file or directory
    """
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise error(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise error(f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason})") from None


def read_csv_rows(
    path: str | Path, columns: Sequence[str], what: str, *, error: type[SimcollError] = FileError
) -> list[tuple[int, dict[str, str | None]]]:
    """The rows of a CSV file with a header, each as (line number, {column:
    text}); a column a short row lacks reads ``None``.

    Raises
    ------
    FileError
        (or the ``error`` given) naming the file when it cannot be read (:func:`read_text`)
        or its header lacks one of ``columns`` ("not a ``what``").

    Examples
    --------
    >>> import tempfile
    >>> path = Path(tempfile.mkdtemp()) / "t.csv"
    >>> _ = path.write_text("size,time\\n1024,5.0\\n")
    >>> read_csv_rows(path, ["size"], "size table")
    [(2, {'size': '1024', 'time': '5.0'})]
    """
    reader = csv.DictReader(io.StringIO(read_text(path, error=error), newline=""))
    if not set(columns) <= set(reader.fieldnames or ()):
        raise error(f"{path}: not a {what} (needs the columns {', '.join(columns)})")
    return [(reader.line_num, row) for row in reader]


def parse_json(text: str, where: str = "input", *, error: type[SimcollError] = FileError) -> Any:
    """``text`` parsed as JSON.

    Parameters
    ----------
    text : str
        JSON text.
    where : str
        What the text is (usually its file), the prefix of error messages.
    error : type
        The :class:`SimcollError` subclass to raise (default :class:`FileError`).

    Raises
    ------
    FileError
        (or the ``error`` given) naming ``where`` and the position of a syntax error.

    Examples
    --------
    >>> parse_json('{"a": [1, 2]}')
    {'a': [1, 2]}
    >>> parse_json('{"a": ', "x.json")
    Traceback (most recent call last):
    simcoll.errors.FileError: x.json: not valid JSON: Expecting value: line 1 column 7 (char 6)
    """
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(f"{where}: not valid JSON: {exc}") from None


def parse_yaml(text: str, where: str = "input", *, error: type[SimcollError] = FileError) -> Any:
    """``text`` parsed as YAML (``yaml.safe_load``: plain data, no Python objects).

    Parameters
    ----------
    text : str
        YAML text.
    where : str
        What the text is (usually its file), the prefix of error messages.
    error : type
        The :class:`SimcollError` subclass to raise (default :class:`FileError`).

    Raises
    ------
    FileError
        (or the ``error`` given) naming ``where`` and the position of a syntax error.

    Examples
    --------
    >>> parse_yaml("name: ring\\ngpus: 4")
    {'name': 'ring', 'gpus': 4}
    >>> parse_yaml("a: [1", "t.yaml")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    simcoll.errors.FileError: t.yaml: not valid YAML: ...
    """
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        message = " ".join(str(exc).split())
        raise error(f"{where}: not valid YAML: {message}") from None


def load_yaml(path: str | Path, *, error: type[SimcollError] = FileError) -> Any:
    """The data of a YAML file: :func:`read_text` then :func:`parse_yaml`.

    Parameters
    ----------
    path : str or Path
        The file to read.
    error : type
        The :class:`SimcollError` subclass to raise (default :class:`FileError`).

    Raises
    ------
    FileError
        (or the ``error`` given) naming the file when it cannot be read or parsed.

    Examples
    --------
    >>> import tempfile
    >>> path = Path(tempfile.mkdtemp()) / "t.yaml"
    >>> write_atomic(path, "name: ring\\n")
    >>> load_yaml(path)
    {'name': 'ring'}
    """
    return parse_yaml(read_text(path, error=error), str(path), error=error)


@contextmanager
def atomic_output(path: str | Path, mode: str = "w", *, error: type[SimcollError] = FileError) -> Iterator[IO]:
    """A file to write ``path`` through, put in place only when complete.

    The data goes to a new temporary file in the target's directory (so the
    final rename stays within one file system); when the ``with`` block ends
    normally the file is flushed, ``fsync``-ed and renamed over ``path``
    (``os.replace``), keeping an existing file's permission bits. When the
    block raises, the temporary file is removed and ``path`` is left as it
    was.

    Parameters
    ----------
    path : str or Path
        The file to write.
    mode : {"w", "wb"}
        Text (UTF-8) or binary.
    error : type
        The :class:`SimcollError` subclass to raise (default :class:`FileError`).

    Yields
    ------
    file object

    Raises
    ------
    FileError
        (or the ``error`` given) ``"<path>: cannot write: <reason>"`` for an operating
        system error (no such directory, disk full, file too large ...);
        other exceptions raised in the block propagate unchanged.
    OptionError
        For a ``mode`` other than ``"w"`` and ``"wb"``.

    Examples
    --------
    >>> import tempfile
    >>> path = Path(tempfile.mkdtemp()) / "out.txt"
    >>> with atomic_output(path) as f:
    ...     _ = f.write("complete")
    >>> path.read_text()
    'complete'
    >>> with atomic_output(path) as f:
    ...     _ = f.write("half")
    ...     raise RuntimeError("interrupted")
    Traceback (most recent call last):
    RuntimeError: interrupted
    >>> path.read_text(), sorted(p.name for p in path.parent.iterdir())
    ('complete', ['out.txt'])
    """
    if mode not in ("w", "wb"):
        raise OptionError(f"atomic_output: mode must be 'w' or 'wb', got {mode!r}")
    target = Path(path)
    with _complete_temp(path, mode, error) as (handle, temp):
        yield handle
    try:
        os.replace(temp, target)
    except BaseException as exc:
        _remove(temp)
        if isinstance(exc, OSError):
            raise error(f"{path}: cannot write: {exc.strerror or exc}") from None
        raise


@contextmanager
def _complete_temp(path: str | Path, mode: str, error: type[SimcollError]) -> Iterator[tuple[IO, Path]]:
    """A new temporary file beside ``path`` to write through (the handle and
    its path): when the block ends normally it is flushed, ``fsync``-ed,
    closed and given ``path``'s permission bits, ready to be renamed over it;
    when the block raises it is removed (an operating system error becomes
    ``error`` naming ``path`` as the caller gave it)."""
    target = Path(path)
    try:
        fd, temp = _create_temp(target)
    except OSError as exc:
        raise error(f"{path}: cannot write: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, mode, **({"encoding": "utf-8"} if mode == "w" else {})) as handle:
            yield handle, temp
            handle.flush()
            os.fsync(handle.fileno())
        if target.exists():
            shutil.copymode(target, temp)
    except BaseException as exc:
        _remove(temp)
        if isinstance(exc, OSError):
            raise error(f"{path}: cannot write: {exc.strerror or exc}") from None
        raise


def _remove(temp: Path) -> None:
    try:
        os.unlink(temp)
    except FileNotFoundError:
        pass


def _create_temp(target: Path) -> tuple[int, Path]:
    """A new file ``.<name>.<random>.tmp`` beside ``target``, created with the
    permissions a new file gets (0666 less the umask), as an open descriptor."""
    while True:
        temp = target.with_name(f".{target.name}.{secrets.token_hex(4)}.tmp")
        try:
            return os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), temp
        except FileExistsError:
            continue


def write_atomic(path: str | Path, data: str | bytes, *, error: type[SimcollError] = FileError) -> None:
    """Write ``data`` (text as UTF-8, or bytes) to ``path`` through :func:`atomic_output`.

    Parameters
    ----------
    path : str or Path
        The file to write.
    data : str or bytes
        Its whole content.
    error : type
        The :class:`SimcollError` subclass to raise (default :class:`FileError`).

    Raises
    ------
    FileError
        (or the ``error`` given) naming the file when it cannot be written; the previous
        file, if any, is then unchanged.

    Examples
    --------
    >>> import tempfile
    >>> path = Path(tempfile.mkdtemp()) / "out.json"
    >>> write_atomic(path, '{"a": 1}')
    >>> path.read_text()
    '{"a": 1}'
    >>> write_atomic("/nonexistent/out.json", "{}")
    Traceback (most recent call last):
    simcoll.errors.FileError: /nonexistent/out.json: cannot write: No such file or directory
    """
    with atomic_output(path, "wb" if isinstance(data, bytes) else "w", error=error) as handle:
        handle.write(data)


def write_atomic_together(
    files: Sequence[tuple[str | Path, str | bytes]], *, error: type[SimcollError] = FileError
) -> None:
    """Write several files that belong together (a topology and its model):
    all of them, or none.

    Every file is first written whole to a temporary beside its target
    (flushed and ``fsync``-ed); only when all are complete are they renamed
    into place, one after the other. A failure while writing (no space,
    file too large, an interrupt) removes the temporaries and leaves every
    old file as it was. (Renames within a directory do not fail once the
    temporaries exist there, so the window where one file is new and the
    other old is the few microseconds between two renames.)

    Parameters
    ----------
    files : sequence of (path, data)
        Each target and its whole content (text as UTF-8, or bytes); the
        targets must be distinct (:func:`check_distinct_outputs`).
    error : type
        The :class:`SimcollError` subclass to raise (default :class:`FileError`).

    Raises
    ------
    FileError
        (or the ``error`` given) naming the file that cannot be written.

    Examples
    --------
    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> write_atomic_together([(folder / "a.yaml", "a: 1\\n"), (folder / "b.yaml", "b: 2\\n")])
    >>> sorted(p.name for p in folder.iterdir())
    ['a.yaml', 'b.yaml']
    >>> write_atomic_together([(folder / "a.yaml", "a: 3\\n"), (folder / "no" / "b.yaml", "b: 4\\n")])
    Traceback (most recent call last):
    simcoll.errors.FileError: ... cannot write: No such file or directory
    >>> (folder / "a.yaml").read_text(), sorted(p.name for p in folder.iterdir())
    ('a: 1\\n', ['a.yaml', 'b.yaml'])
    """
    check_distinct_outputs({str(path): path for path, _ in files}, error=error)
    written: list[tuple[Path, Path]] = []  # (temporary, target), each complete
    try:
        for path, data in files:
            with _complete_temp(path, "wb" if isinstance(data, bytes) else "w", error) as (handle, temp):
                handle.write(data)
            written.append((temp, Path(path)))
        for index, (temp, target) in enumerate(written):
            try:
                os.replace(temp, target)
            except OSError as exc:
                written = written[index:]
                raise error(f"{target}: cannot write: {exc.strerror or exc}") from None
        written = []
    finally:
        for temp, _ in written:  # what was not renamed into place: the old files stay
            _remove(temp)


def check_distinct_outputs(outputs: dict[str, str | Path], *, error: type[SimcollError] = FileError) -> None:
    """Refuse, before any work starts, two outputs of one command at one path
    (the second would silently replace the first).

    Parameters
    ----------
    outputs : dict
        Each output's name as the user gives it (an option such as
        ``--model-output``) and its path; unset outputs (None, "") are skipped.
    error : type
        The :class:`SimcollError` subclass to raise (default :class:`FileError`).

    Raises
    ------
    FileError
        (or the ``error`` given) naming both outputs and the path.

    Examples
    --------
    >>> check_distinct_outputs({"-o": "m.yaml", "--model-output": "./m.yaml"})
    Traceback (most recent call last):
    simcoll.errors.FileError: ./m.yaml: both -o and --model-output would be written there (give them different paths)
    """
    seen: dict[Path, str] = {}
    for name, path in outputs.items():
        if not path:
            continue
        resolved = Path(path).resolve()  # ./m.yaml, dir/../m.yaml and a link to m.yaml are m.yaml
        if resolved in seen:
            raise error(f"{path}: both {seen[resolved]} and {name} would be written there (give them different paths)")
        seen[resolved] = name


def check_output_path(
    path: str | Path, *, inputs: tuple[str | Path, ...] = (), error: type[SimcollError] = FileError
) -> None:
    """Refuse, before any work starts, an output that cannot be written.

    Parameters
    ----------
    path : str or Path
        The file a command will write.
    inputs : tuple of str or Path
        Files the command reads: writing over one of them is refused.
    error : type
        The :class:`SimcollError` subclass to raise (default :class:`FileError`).

    Raises
    ------
    FileError
        (or the ``error`` given) naming the file when its directory is missing or not
        writable (a file cannot be created there), when it is a directory, or when it
        is one of ``inputs``.

    Examples
    --------
    >>> check_output_path("/nonexistent/out.json")
    Traceback (most recent call last):
    simcoll.errors.FileError: /nonexistent/out.json: cannot write: no directory /nonexistent
    """
    target = Path(path)
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.is_dir():
        raise error(f"{path}: cannot write: no directory {parent}")
    if target.is_dir():
        raise error(f"{path}: cannot write: it is a directory")
    if not os.access(parent, os.W_OK):
        raise error(f"{path}: cannot write: directory {parent} is not writable")
    # access() says yes to root, and knows nothing of /proc or a read-only mount: create (and remove)
    # the temporary file the write will use, so that what fails after the work fails now
    try:
        fd, temp = _create_temp(target)
    except OSError as exc:
        raise error(f"{path}: cannot write: {exc.strerror or exc}") from None
    os.close(fd)
    os.unlink(temp)
    resolved = target.resolve()
    for source in inputs:
        if Path(source).exists() and Path(source).resolve() == resolved:
            raise error(f"{path}: refusing to write over an input file (choose another output name)")


def check_image_path(path: str | Path, *, error: type[SimcollError] = FileError) -> None:
    """Refuse an image file name whose extension matplotlib cannot write.

    Parameters
    ----------
    path : str or Path
        The image a command will write (``.png``, ``.pdf``, ``.svg``...).
    error : type
        The :class:`SimcollError` subclass to raise (default :class:`FileError`).

    Raises
    ------
    FileError
        (or the ``error`` given) naming the file and the formats that are supported.

    Examples
    --------
    >>> check_image_path("plot.xyz")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    simcoll.errors.FileError: plot.xyz: unsupported image format 'xyz' (use one of: ..., pdf, ..., png, ...)
    """
    from matplotlib.backend_bases import FigureCanvasBase  # only commands that plot pay for matplotlib

    supported = sorted(FigureCanvasBase.get_supported_filetypes())
    suffix = Path(path).suffix.lower().lstrip(".")
    if suffix not in supported:
        what = f"unsupported image format {suffix!r}" if suffix else "no image extension"
        raise error(f"{path}: {what} (use one of: {', '.join(supported)})")


def save_figure(fig: Any, path: str | Path, *, dpi: int = 120, error: type[SimcollError] = FileError) -> None:
    """Save a matplotlib figure atomically (rendered in memory, then :func:`write_atomic`).

    Parameters
    ----------
    fig : matplotlib.figure.Figure
        The figure.
    path : str or Path
        The image file; its extension chooses the format (:func:`check_image_path`).
    dpi : int
        Resolution of raster formats.
    error : type
        The :class:`SimcollError` subclass to raise (default :class:`FileError`).

    Examples
    --------
    >>> import tempfile
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> from matplotlib.figure import Figure
    >>> path = Path(tempfile.mkdtemp()) / "f.png"
    >>> save_figure(Figure(), path)
    >>> path.read_bytes()[:4]
    b'\\x89PNG'
    """
    import io

    check_image_path(path, error=error)
    buffer = io.BytesIO()
    fig.savefig(buffer, format=Path(path).suffix.lower().lstrip("."), dpi=dpi)
    write_atomic(path, buffer.getvalue(), error=error)


def write_csv(frame: Any, path: str | Path, *, error: type[SimcollError] = FileError) -> None:
    """Write a pandas DataFrame as CSV (no index) atomically.

    Parameters
    ----------
    frame : pandas.DataFrame
        The table.
    path : str or Path
        The CSV file.
    error : type
        The :class:`SimcollError` subclass to raise (default :class:`FileError`).

    Examples
    --------
    >>> import tempfile
    >>> import pandas as pd
    >>> path = Path(tempfile.mkdtemp()) / "t.csv"
    >>> write_csv(pd.DataFrame({"a": [1, 2]}), path)
    >>> path.read_text().split()
    ['a', '1', '2']
    """
    write_atomic(path, frame.to_csv(index=False), error=error)

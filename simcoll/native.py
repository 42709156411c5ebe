"""Building C++ sources into shared libraries on first use, for ctypes.

simcoll ships C++ sources, not binaries: the simulator's compiled event core
(:mod:`simcoll.simulator.compiled`) and the GPU interpreter's host driver
(:mod:`simcoll.gpu.host`) are compiled here the first time they are needed,
with the host C++ compiler, and cached in a directory of the user's own in
the temporary directory, under a name derived from the sources and flags
(a changed source builds anew). The library is written to a temporary name
and renamed into place, so processes building at once (``compare --jobs``)
never load a half-written file.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from .errors import BuildError


def compiler() -> str | None:
    """The host C++ compiler (``g++`` or ``c++``), or None."""
    return shutil.which("g++") or shutil.which("c++")


def build_shared_library(
    stem: str,
    source: Path,
    flags: Sequence[str],
    *,
    what: str,
    depends: Sequence[Path] = (),
    include: Path | None = None,
) -> Path:
    """Compile ``source`` (and the headers it ``depends`` on) with ``flags``
    into ``lib<stem>_<hash>.so`` in the user's cache directory
    (:func:`_cache_dir`), unless built already; returns its path. ``what``
    names the library in errors.

    Raises
    ------
    BuildError
        When no C++ compiler is found, or compilation fails (with the
        compiler's output).
    """
    cxx = compiler()
    if cxx is None:
        raise BuildError(f"no C++ compiler (g++) found to build {what}")
    flags = [*flags, "-fPIC", "-shared"]
    digest = hashlib.sha256()
    for part in (*(p.read_bytes() for p in (source, *depends)), " ".join([cxx, *flags]).encode()):
        digest.update(part)
    out = _cache_dir() / f"lib{stem}_{digest.hexdigest()[:16]}.so"
    if out.exists():
        return out
    tmp = out.with_name(f"{out.name}.{os.getpid()}.tmp")
    command = [cxx, *flags, *([f"-I{include}"] if include else []), "-o", str(tmp), str(source)]
    proc = subprocess.run(command, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise BuildError(f"building {what} failed: {proc.stderr.strip()[:2000]}")
    tmp.replace(out)
    return out


def load_checked(path: Path, struct: type[ctypes.Structure], size_function: str, what: str) -> ctypes.CDLL:
    """Load the library at ``path`` and check that its C struct has the size
    of ``struct``, its ctypes mirror (``size_function`` returns the C size):
    a library built from other sources than the mirror is refused."""
    lib = ctypes.CDLL(str(path))
    size = getattr(lib, size_function)
    size.restype = ctypes.c_int
    if size() != ctypes.sizeof(struct):
        name = f"{struct.__module__}.{struct.__qualname__}"
        raise BuildError(f"{what}'s {struct.__name__} layout differs from {name}")
    return lib


def _cache_dir() -> Path:
    """The user's own directory for built libraries in the temporary
    directory (``simcoll-native-<uid>``, mode 0700): a library is loaded
    into the process, so none that another user could have put there is.

    Raises
    ------
    BuildError
        When the directory exists but belongs to another user or others may
        write to it.
    """
    uid = os.getuid() if hasattr(os, "getuid") else None
    folder = Path(tempfile.gettempdir()) / ("simcoll-native" if uid is None else f"simcoll-native-{uid}")
    folder.mkdir(mode=0o700, exist_ok=True)
    if uid is not None:
        info = folder.stat()
        if info.st_uid != uid or info.st_mode & 0o022:
            raise BuildError(
                f"{folder} belongs to another user or others may write to it: not loading libraries from it"
            )
    return folder

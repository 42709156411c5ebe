"""Building C++ sources into shared libraries on first use, for ctypes.

simcoll ships C++ sources, not binaries: the simulator's compiled event core
(:mod:`simcoll.simulator.compiled`) and the GPU interpreter's host driver
(:mod:`simcoll.gpu.host`) are compiled here the first time they are needed,
with the host C++ compiler, and cached in the temporary directory under a
name derived from the sources and flags (a changed source builds anew). The
library is written to a temporary name and renamed into place, so processes
building at once (``compare --jobs``) never load a half-written file.
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

from .errors import SimcollError


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
    into ``<tmp>/simcoll-native/lib<stem>_<hash>.so``, unless built already;
    returns its path. ``what`` names the library in errors.

    Raises
    ------
    SimcollError
        When no C++ compiler is found, or compilation fails (with the
        compiler's output).
    """
    cxx = compiler()
    if cxx is None:
        raise SimcollError(f"no C++ compiler (g++) found to build {what}")
    flags = [*flags, "-fPIC", "-shared"]
    digest = hashlib.sha256()
    for part in (*(p.read_bytes() for p in (source, *depends)), " ".join([cxx, *flags]).encode()):
        digest.update(part)
    out = Path(tempfile.gettempdir()) / "simcoll-native" / f"lib{stem}_{digest.hexdigest()[:16]}.so"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f"{out.name}.{os.getpid()}.tmp")
    command = [cxx, *flags, *([f"-I{include}"] if include else []), "-o", str(tmp), str(source)]
    proc = subprocess.run(command, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise SimcollError(f"building {what} failed: {proc.stderr.strip()[:2000]}")
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
        raise SimcollError(f"{what}'s {struct.__name__} layout differs from {name}")
    return lib

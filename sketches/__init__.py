"""TACCL communication sketches shipped with simcoll (JSON files).

``load_sketch("ndv2-sk-1")`` parses one by name (or a path); the format is
described in :mod:`simcoll.synthesis.taccl.sketch`.
"""

from pathlib import Path


def sketch_path(name: str) -> Path:
    """Path of the built-in sketch ``name`` (which may not exist)."""
    return Path(__file__).resolve().parent / f"{name}.json"


def load_sketch(spec):
    """A parsed :class:`~simcoll.synthesis.taccl.Sketch` by built-in name or path."""
    from simcoll.synthesis.taccl import load_sketch as _load

    return _load(spec)

"""NCCL releases simcoll can stand in for, and the environment a baseline runs with.

Each paper compared against the NCCL of its day (SCCL: 2.7.8, GC3 and
TACCL: 2.8.4, NV-Group: 2.6, HiCCL: today's), and the
releases differ in which algorithms and protocols exist, in their tuning
constants and in when each protocol is enabled. :data:`VERSIONS` maps a
release to its constants file; :class:`NcclSetup` is a release plus the
environment variables a paper set (``NCCL_PROTO``, ``NCCL_ALGO``), parsed as
NCCL parses them.

>>> setup = NcclSetup.parse("2.7", {"NCCL_PROTO": "Simple"})
>>> setup.describe(), setup.protocols()
('NCCL 2.7.8, NCCL_PROTO=Simple', ('simple',))
>>> NcclSetup.parse("2.30", ["NCCL_ALGO=^tree"]).algorithms()
('ring', 'collnet_direct', 'collnet_chain', 'nvls', 'nvls_tree', 'pat')
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ..errors import OptionError
from .constants import ALGORITHMS, PROTOCOLS, TunerConstants, load_constants

_HERE = Path(__file__).parent
#: NCCL release (major.minor) -> its constants file, oldest first.
VERSIONS = {
    "2.4": _HERE / "nccl_2_4.yaml",
    "2.6": _HERE / "nccl_2_6.yaml",
    "2.7": _HERE / "nccl_2_7.yaml",
    "2.8": _HERE / "nccl_2_8.yaml",
    "2.12": _HERE / "nccl_2_12.yaml",
    "2.30": _HERE / "nccl_2_30.yaml",
}
#: The release used where none is named.
DEFAULT_VERSION = "2.30"
#: The environment variables a baseline may set: the tuner's (``NCCL_PROTO``, ``NCCL_ALGO``) and the
#: Simple protocol's buffer per connection (``NCCL_BUFFSIZE``, bytes; NCCL moves it in 8 steps,
#: ``NCCL_STEPS``, which set the size of the pieces NCCL's pipelines move: :meth:`NcclSetup.buffer_bytes`).
ENV_KEYS = ("NCCL_PROTO", "NCCL_ALGO", "NCCL_BUFFSIZE", "NCCL_NVLS_ENABLE")
#: Steps per connection buffer (NCCL_STEPS, src/include/device.h; 8 in every modelled release).
NCCL_STEPS = 8
#: NCCL's spellings (any case) -> simcoll's; ``CollNet`` is the older releases' single CollNet algorithm.
_PROTOCOL_NAMES = {"ll": "ll", "ll128": "ll128", "simple": "simple"}
_ALGORITHM_NAMES = {
    "tree": ("tree",),
    "ring": ("ring",),
    "collnetdirect": ("collnet_direct",),
    "collnetchain": ("collnet_chain",),
    "collnet": ("collnet_direct", "collnet_chain"),
    "nvls": ("nvls",),
    "nvlstree": ("nvls_tree",),
    "pat": ("pat",),
}


def release(version: str | None) -> str:
    """The release key of ``version`` (``"2.7"``, ``"2.7.8"``, ``"v2.7.8-1"`` -> ``"2.7"``).

    >>> release("v2.12.12-1"), release(None)
    ('2.12', '2.30')
    """
    if version is None:
        return DEFAULT_VERSION
    text = str(version).strip().lstrip("vV")
    parts = text.split("-")[0].split(".")
    key = ".".join(parts[:2])
    if key not in VERSIONS:
        raise OptionError(f"unknown NCCL version {version!r}; simcoll models NCCL {', '.join(VERSIONS)}")
    return key


def constants_for(version: str | None = None) -> TunerConstants:
    """The tuning constants of an NCCL release (default :data:`DEFAULT_VERSION`)."""
    return load_constants(VERSIONS[release(version)])


def _parse_list(
    text: str, names: Mapping[str, tuple[str, ...]], universe: tuple[str, ...], key: str
) -> tuple[str, ...]:
    """NCCL's list syntax (``parseList``, tuning.cc): names separated by commas,
    any case; a leading ``^`` keeps every name but those."""
    exclude = text.startswith("^")
    chosen: list[str] = []
    for token in (t.strip() for t in text.lstrip("^").split(",")):
        if not token:
            continue
        if token.lower() not in names:
            known = ", ".join(sorted({n for n in names}))
            raise OptionError(f"{key}={text}: unknown name {token!r} (known, any case: {known})")
        chosen += names[token.lower()]
    if exclude:
        return tuple(name for name in universe if name not in chosen)
    if not chosen:
        raise OptionError(f"{key}={text}: names nothing")
    return tuple(name for name in universe if name in chosen)


@dataclass(frozen=True)
class NcclSetup:
    """An NCCL release and the tuner's environment variables (:data:`ENV_KEYS`), as a paper ran its baseline."""

    version: str = DEFAULT_VERSION
    env: tuple[tuple[str, str], ...] = ()

    @classmethod
    def parse(cls, version: str | None = None, env: Mapping[str, str] | Iterable[str] | None = None) -> NcclSetup:
        """From a version (any spelling :func:`release` takes) and an environment:
        a mapping or ``KEY=VALUE`` strings; other keys than :data:`ENV_KEYS` are refused."""
        pairs: dict[str, str] = {}
        items = (
            env.items() if isinstance(env, Mapping) else ((e.partition("=")[0], e.partition("=")[2]) for e in env or ())
        )
        for key, value in items:
            key = str(key).strip()
            if key not in ENV_KEYS:
                raise OptionError(f"NCCL environment: {key!r} is not one simcoll models ({', '.join(ENV_KEYS)})")
            pairs[key] = str(value).strip()
        setup = cls(release(version), tuple(sorted(pairs.items())))
        setup.protocols(), setup.algorithms(), setup.buffer_bytes(), setup.nvls_enabled()  # refuse bad values now
        return setup

    @property
    def constants(self) -> TunerConstants:
        return constants_for(self.version)

    def _get(self, key: str) -> str | None:
        return dict(self.env).get(key)

    def protocols(self) -> tuple[str, ...] | None:
        """The protocols ``NCCL_PROTO`` leaves (None: not set)."""
        text = self._get("NCCL_PROTO")
        return (
            None
            if text is None
            else _parse_list(text, {k: (v,) for k, v in _PROTOCOL_NAMES.items()}, PROTOCOLS, "NCCL_PROTO")
        )

    def algorithms(self) -> tuple[str, ...] | None:
        """The algorithms ``NCCL_ALGO`` leaves (None: not set)."""
        text = self._get("NCCL_ALGO")
        return None if text is None else _parse_list(text, _ALGORITHM_NAMES, ALGORITHMS, "NCCL_ALGO")

    def buffer_bytes(self) -> int | None:
        """``NCCL_BUFFSIZE``: the Simple buffer of a connection, in bytes (None: not set, NCCL's 4 MiB).

        >>> NcclSetup.parse(None, {"NCCL_BUFFSIZE": "8388608"}).buffer_bytes()
        8388608
        """
        text = self._get("NCCL_BUFFSIZE")
        if text is None:
            return None
        try:
            value = int(text, 0)
        except ValueError:
            value = 0
        if value < NCCL_STEPS:
            raise OptionError(f"NCCL_BUFFSIZE={text!r}: expected a buffer size in bytes, at least {NCCL_STEPS}")
        return value

    def nvls_enabled(self) -> bool | None:
        """``NCCL_NVLS_ENABLE``: 0 takes NVLink SHARP away (NVLS and NVLS-tree
        are then no candidates, as NCCL gives such a communicator no NVLS
        support: src/transport/nvls.cc, ncclNvlsInit); 1 or unset leave it to
        the machine (None: not set).

        >>> NcclSetup.parse(None, {"NCCL_NVLS_ENABLE": "0"}).nvls_enabled()
        False
        """
        text = self._get("NCCL_NVLS_ENABLE")
        if text is None:
            return None
        if text.strip() not in ("0", "1"):
            raise OptionError(f"NCCL_NVLS_ENABLE={text!r}: expected 0 or 1")
        return text.strip() == "1"

    @property
    def is_default(self) -> bool:
        return self.version == DEFAULT_VERSION and not self.env

    def describe(self) -> str:
        """E.g. ``NCCL 2.7.8, NCCL_PROTO=Simple``."""
        return ", ".join([f"NCCL {self.constants.version}", *(f"{k}={v}" for k, v in self.env)])


def as_setup(nccl: NcclSetup | str | Mapping | None) -> NcclSetup:
    """An :class:`NcclSetup` from itself, a version string, a mapping with
    ``version`` and ``env`` (a study's ``nccl:`` entry), or None (the default)."""
    if isinstance(nccl, NcclSetup):
        return nccl
    if nccl is None:
        return NcclSetup()
    if isinstance(nccl, str):
        return NcclSetup.parse(nccl)
    if isinstance(nccl, Mapping):
        unknown = sorted(set(nccl) - {"version", "env"})
        if unknown:
            raise OptionError(f"NCCL baseline: unknown field(s) {unknown} (allowed: version, env)")
        return NcclSetup.parse(nccl.get("version"), nccl.get("env") or {})
    raise OptionError(f"NCCL baseline: expected a version, a mapping or an NcclSetup, got {nccl!r}")


__all__ = ["DEFAULT_VERSION", "ENV_KEYS", "NCCL_STEPS", "VERSIONS", "NcclSetup", "as_setup", "constants_for", "release"]

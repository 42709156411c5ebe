"""What a simulation returns: completion time, the per-transfer timeline, the
per-resource utilisation, nccl-tests bandwidths and a Chrome trace.

:class:`Timeline` and :class:`Utilisation` are append-only columnar recorders
(``array`` columns, so millions of rows stay small); the simulator fills them
and :class:`SimulationResult` turns them into DataFrames.
"""

from __future__ import annotations

import functools
import json
import math
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..analytic import algbw_GBps
from ..files import write_atomic

if TYPE_CHECKING:
    import pandas as pd

#: Columns of :attr:`SimulationResult.timeline`, one row per transfer or executor op.
TIMELINE_COLUMNS = ["kind", "track", "src", "dst", "chunk", "bytes", "start_s", "end_s", "label"]
#: Columns of :attr:`SimulationResult.utilisation`, one row per interval of constant rate.
UTILISATION_COLUMNS = ["resource", "start_s", "end_s", "rate_Bps", "capacity_Bps", "flows"]


class _Strings:
    """Interns strings to small integer codes (timeline kinds, tracks, labels)."""

    def __init__(self) -> None:
        self.codes: dict[str, int] = {}
        self.values: list[str] = []

    def code(self, value: str) -> int:
        code = self.codes.get(value)
        if code is None:
            code = self.codes[value] = len(self.values)
            self.values.append(value)
        return code


def _np(column: array, dtype) -> np.ndarray:
    """A numpy copy of an ``array`` column."""
    return np.frombuffer(column, dtype=dtype).copy() if len(column) else np.empty(0, dtype=dtype)


class Timeline:
    """Rows of the timeline: ``kind`` (``"send"``, ``"reduce"``, ``"copy"``,
    ``"launch"``, ``"wait"``, ...), ``track`` (the executor or connection that
    did it), ``src``/``dst`` ranks (-1 when not applicable), ``chunk`` (-1 when
    none), payload ``bytes``, ``start_s``, ``end_s`` and a free ``label``."""

    def __init__(self) -> None:
        self._strings = _Strings()
        self.kind = array("i")
        self.track = array("i")
        self.src = array("i")
        self.dst = array("i")
        self.chunk = array("i")
        self.bytes = array("d")
        self.start_s = array("d")
        self.end_s = array("d")
        self.label = array("i")

    def __len__(self) -> int:
        return len(self.start_s)

    def add(
        self,
        kind: str,
        track: str,
        start_s: float,
        end_s: float,
        *,
        src: int = -1,
        dst: int = -1,
        chunk: int | None = -1,
        size_bytes: float = 0.0,
        label: str = "",
    ) -> None:
        """Append one row (see the class docstring)."""
        code = self._strings.code
        self.kind.append(code(kind))
        self.track.append(code(track))
        self.src.append(src)
        self.dst.append(dst)
        self.chunk.append(-1 if chunk is None else chunk)
        self.bytes.append(size_bytes)
        self.start_s.append(start_s)
        self.end_s.append(end_s)
        self.label.append(code(label))

    def append(
        self,
        kind: str,
        track: str,
        src: int,
        dst: int,
        chunk: int,
        size_bytes: float,
        start_s: float,
        end_s: float,
        label: str,
    ) -> None:
        """Positional, faster form of :meth:`add` (``chunk`` -1 for none)."""
        codes = self._strings.codes
        k = codes.get(kind)
        if k is None:
            k = self._strings.code(kind)
        tr = codes.get(track)
        if tr is None:
            tr = self._strings.code(track)
        lb = codes.get(label)
        if lb is None:
            lb = self._strings.code(label)
        self.kind.append(k)
        self.track.append(tr)
        self.src.append(src)
        self.dst.append(dst)
        self.chunk.append(chunk)
        self.bytes.append(size_bytes)
        self.start_s.append(start_s)
        self.end_s.append(end_s)
        self.label.append(lb)

    def to_frame(self) -> pd.DataFrame:
        import pandas as pd

        categories = pd.Index(self._strings.values, dtype=object)  # unique: _Strings interns

        def decode(column: array):
            return pd.Categorical.from_codes(np.frombuffer(column, dtype=np.int32), categories=categories)

        data = {
            "kind": decode(self.kind),
            "track": decode(self.track),
            "src": _np(self.src, np.int32),
            "dst": _np(self.dst, np.int32),
            "chunk": _np(self.chunk, np.int32),
            "bytes": _np(self.bytes, np.float64),
            "start_s": _np(self.start_s, np.float64),
            "end_s": _np(self.end_s, np.float64),
            "label": decode(self.label),
        }
        return pd.DataFrame(data, columns=TIMELINE_COLUMNS)


class Utilisation:
    """Intervals during which a resource carried a constant total rate."""

    def __init__(self) -> None:
        self.resource = array("i")
        self.start_s = array("d")
        self.end_s = array("d")
        self.rate_Bps = array("d")
        self.capacity_Bps = array("d")
        self.flows = array("i")

    def add(self, resource: int, start_s: float, end_s: float, rate_Bps: float, capacity_Bps: float, flows: int):
        self.resource.append(resource)
        self.start_s.append(start_s)
        self.end_s.append(end_s)
        self.rate_Bps.append(rate_Bps)
        self.capacity_Bps.append(capacity_Bps)
        self.flows.append(flows)

    def extend(self, resource, start_s, end_s, rate_Bps, capacity_Bps, flows) -> None:
        """Add many intervals at once (numpy arrays of equal length) and keep
        the rows in order of their end (stable: existing rows first on ties),
        the order in which a running simulation closes them."""
        old_end = _np(self.end_s, np.float64)
        columns = (
            (self.resource, resource, np.int32),
            (self.start_s, start_s, np.float64),
            (self.end_s, end_s, np.float64),
            (self.rate_Bps, rate_Bps, np.float64),
            (self.capacity_Bps, capacity_Bps, np.float64),
            (self.flows, flows, np.int32),
        )
        order = np.argsort(np.concatenate([old_end, np.asarray(end_s, dtype=np.float64)]), kind="stable")
        for column, new, dtype in columns:
            merged = np.concatenate([_np(column, dtype), np.asarray(new, dtype=dtype)])[order]
            del column[:]
            column.frombytes(merged.tobytes())

    def to_frame(self, names: list[str]) -> pd.DataFrame:
        import pandas as pd

        return pd.DataFrame(
            {
                "resource": pd.Categorical.from_codes(
                    np.frombuffer(self.resource, dtype=np.int32), categories=pd.Index(names, dtype=object)
                ),
                "start_s": _np(self.start_s, np.float64),
                "end_s": _np(self.end_s, np.float64),
                "rate_Bps": _np(self.rate_Bps, np.float64),
                "capacity_Bps": _np(self.capacity_Bps, np.float64),
                "flows": _np(self.flows, np.int32),
            },
            columns=UTILISATION_COLUMNS,
        )


@dataclass
class SimulationResult:
    """One simulated run.

    ``time_s`` is the completion time (the last byte of the last transfer or
    op); ``timeline`` has the columns :data:`TIMELINE_COLUMNS`; ``utilisation``
    the columns :data:`UTILISATION_COLUMNS` (empty when recording was turned
    off). ``stats`` holds counters (transfers, events, wall time, the largest
    number of flows that shared one resource).
    """

    name: str
    collective: str
    machine: str
    model: str
    size_bytes: float
    mode: str
    time_s: float
    busbw_factor: float
    #: The timeline and utilisation DataFrames, or what builds them on first use (so that a run
    #: whose caller reads only its time does not import pandas: issue 51's start-up).
    timeline_frame: pd.DataFrame | Callable[[], pd.DataFrame] = field(repr=False)
    utilisation_frame: pd.DataFrame | Callable[[], pd.DataFrame] = field(repr=False)
    contention: bool = True
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def timeline(self) -> pd.DataFrame:
        """One row per transfer or op (:data:`TIMELINE_COLUMNS`)."""
        if callable(self.timeline_frame):
            self.timeline_frame = self.timeline_frame()
        return self.timeline_frame

    @property
    def utilisation(self) -> pd.DataFrame:
        """One row per resource interval of constant rate (:data:`UTILISATION_COLUMNS`)."""
        if callable(self.utilisation_frame):
            self.utilisation_frame = self.utilisation_frame()
        return self.utilisation_frame

    @property
    def transfers(self) -> int:
        """Number of network messages simulated.

        Returns
        -------
        int
            Messages sent over the network (a TACCL contiguity group is one).

        Examples
        --------
        >>> from simcoll import load_machine, simulate
        >>> from simcoll.algorithms import generate
        >>> m = load_machine("ring:4")
        >>> r = simulate(generate("ring", m, "allgather"), m, 4e6)
        >>> r.transfers  # 3 steps × 4 ranks
        12
        """
        return int(self.stats.get("transfers", 0))

    @property
    def algbw_GBps(self) -> float:
        """nccl-tests algorithm bandwidth: ``size_bytes / time_s`` in GB/s.

        Returns
        -------
        float
            The algorithm bandwidth (``inf`` for a zero time).

        Examples
        --------
        >>> from simcoll import load_machine, simulate
        >>> from simcoll.algorithms import generate
        >>> m = load_machine("ring:4")
        >>> r = simulate(generate("ring", m, "allgather"), m, 4e6)
        >>> round(r.algbw_GBps, 2)  # 4 MB in 122.1 us
        32.76

        References
        ----------
        .. [1] NVIDIA nccl-tests, doc/PERFORMANCE.md, "Algorithm bandwidth".
        """
        return algbw_GBps(self.size_bytes, self.time_s) if self.time_s > 0 else math.inf

    @property
    def busbw_GBps(self) -> float:
        """nccl-tests bus bandwidth: :attr:`algbw_GBps` × the collective's
        factor (``(n-1)/n`` for Allgather, ``2(n-1)/n`` for Allreduce), in GB/s.

        Returns
        -------
        float
            The bus bandwidth, comparable with the links' bandwidth.

        Examples
        --------
        >>> from simcoll import load_machine, simulate
        >>> from simcoll.algorithms import generate
        >>> m = load_machine("ring:4")
        >>> r = simulate(generate("ring", m, "allgather"), m, 4e6)
        >>> round(r.busbw_GBps, 2)  # algbw × 3/4: near the 25 GB/s of a ring link
        24.57

        References
        ----------
        .. [1] NVIDIA nccl-tests, doc/PERFORMANCE.md, "Bus bandwidth".
        """
        return self.algbw_GBps * self.busbw_factor

    def to_dict(self) -> dict[str, Any]:
        """Summary of the run without the timeline: the JSON the CLI prints.

        Returns
        -------
        dict
            ``name``, ``collective``, ``topology``, ``model``, ``size_bytes``,
            ``mode``, ``contention``, ``time_s``, ``algbw_GBps``,
            ``busbw_GBps``, ``transfers`` and ``stats``.

        Examples
        --------
        >>> from simcoll import load_machine, simulate
        >>> from simcoll.algorithms import generate
        >>> m = load_machine("ring:4")
        >>> r = simulate(generate("ring", m, "allgather"), m, 4e6)
        >>> d = r.to_dict()
        >>> d["topology"], d["mode"], d["transfers"]
        ('ring:4', 'algorithm', 12)
        """
        return {
            "name": self.name,
            "collective": self.collective,
            "topology": self.machine,
            "model": self.model,
            "size_bytes": self.size_bytes,
            "mode": self.mode,
            "contention": self.contention,
            "time_s": self.time_s,
            "algbw_GBps": self.algbw_GBps,
            "busbw_GBps": self.busbw_GBps,
            "transfers": self.transfers,
            "stats": dict(self.stats),
        }

    def to_chrome_trace(self) -> dict[str, Any]:
        """The run as a Chrome trace (opens in Perfetto or chrome://tracing).

        Process 1 holds one thread per executor or connection track with its
        timeline rows, process 2 one thread per network resource with its
        busy intervals; rows are complete events (``ph: "X"``), times in µs.

        Returns
        -------
        dict
            ``{"traceEvents": [...], "displayTimeUnit": "ns", "otherData": to_dict()}``.

        Examples
        --------
        >>> from simcoll import load_machine, simulate
        >>> from simcoll.algorithms import generate
        >>> m = load_machine("ring:4")
        >>> r = simulate(generate("ring", m, "allgather"), m, 4e6)
        >>> trace = r.to_chrome_trace()
        >>> sum(e["ph"] == "X" for e in trace["traceEvents"]) == len(r.timeline) + len(r.utilisation)
        True

        References
        ----------
        .. [1] "Trace Event Format", Google (the JSON Chrome and Perfetto read).
        """
        events: list[dict[str, Any]] = [
            {"name": "process_name", "ph": "M", "pid": 1, "tid": 0, "args": {"name": "executors"}},
            {"name": "process_name", "ph": "M", "pid": 2, "tid": 0, "args": {"name": "links"}},
        ]
        tids: dict[tuple[int, str], int] = {}

        def tid(pid: int, name: str) -> int:
            key = (pid, name)
            if key not in tids:
                tids[key] = len(tids) + 1
                events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tids[key], "args": {"name": name}})
            return tids[key]

        t = self.timeline
        for row in t.itertuples(index=False):
            args = {"bytes": row.bytes}
            if row.src >= 0:
                args["src"] = int(row.src)
            if row.dst >= 0:
                args["dst"] = int(row.dst)
            if row.chunk >= 0:
                args["chunk"] = int(row.chunk)
            name = str(row.kind) + (f" {row.label}" if row.label else "")
            events.append(
                {
                    "name": name,
                    "cat": str(row.kind),
                    "ph": "X",
                    "pid": 1,
                    "tid": tid(1, str(row.track)),
                    "ts": row.start_s * 1e6,
                    "dur": (row.end_s - row.start_s) * 1e6,
                    "args": args,
                }
            )
        for row in self.utilisation.itertuples(index=False):
            events.append(
                {
                    "name": f"{row.rate_Bps / 1e9:.3g} GB/s",
                    "cat": "link",
                    "ph": "X",
                    "pid": 2,
                    "tid": tid(2, str(row.resource)),
                    "ts": row.start_s * 1e6,
                    "dur": (row.end_s - row.start_s) * 1e6,
                    "args": {
                        "rate_Bps": row.rate_Bps,
                        "utilisation": row.rate_Bps / row.capacity_Bps if row.capacity_Bps else 0.0,
                        "flows": int(row.flows),
                    },
                }
            )
        return {"traceEvents": events, "displayTimeUnit": "ns", "otherData": self.to_dict()}

    def save_chrome_trace(self, path: str | Path) -> Path:
        """Write :meth:`to_chrome_trace` to ``path`` as JSON.

        Parameters
        ----------
        path : str or pathlib.Path
            The file to write.

        Returns
        -------
        pathlib.Path
            ``path``.

        Raises
        ------
        SimcollError
            When the file cannot be written.

        Examples
        --------
        >>> from simcoll import load_machine, simulate
        >>> from simcoll.algorithms import generate
        >>> m = load_machine("ring:4")
        >>> r = simulate(generate("ring", m, "allgather"), m, 4e6)
        >>> import tempfile, pathlib
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     r.save_chrome_trace(pathlib.Path(tmp) / "ring.json").stat().st_size > 0
        True
        """
        path = Path(path)
        write_atomic(path, json.dumps(self.to_chrome_trace()))
        return path


def make_result(
    network,
    *,
    name: str,
    collective,
    size_bytes: float,
    mode: str,
    time_s: float,
    stats: dict[str, Any] | None = None,
    timeline: pd.DataFrame | None = None,
) -> SimulationResult:
    """Build a :class:`SimulationResult` from a finished
    :class:`~simcoll.simulator.network.FluidNetwork` (closes its open
    utilisation intervals); ``collective`` is a
    :class:`~simcoll.collectives.Collective`; ``timeline`` replaces the
    network's recorded timeline when given."""
    network.finish()
    machine = network.machine
    base = {
        "transfers": network.transfers,
        "max_sharing": network.max_sharing,
        "recomputes": network.recomputes,
        "recomputes_remembered": network.recomputes_remembered,
        "handovers": network.handovers,
        "resources": len(network.resources),
    }
    return SimulationResult(
        name=name,
        collective=collective.name,
        machine=machine.name,
        model=machine.model.name,
        size_bytes=size_bytes,
        mode=mode,
        time_s=time_s,
        busbw_factor=collective.busbw_factor,
        timeline_frame=network.timeline.to_frame if timeline is None else timeline,
        utilisation_frame=functools.partial(network.utilisation.to_frame, network.resource_names()),
        contention=network.contention,
        stats={**base, **(stats or {})},
    )

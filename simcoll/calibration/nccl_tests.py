"""Read nccl-tests / rccl-tests output as those tools print it.

The ``*_perf`` tools of NVIDIA's nccl-tests (``all_reduce_perf``,
``all_gather_perf``, ``reduce_scatter_perf``, ``alltoall_perf``,
``broadcast_perf``, ``reduce_perf``, ``sendrecv_perf``, ...) and AMD's
rccl-tests print a few ``#`` header lines (``# nThread 1 nGpus 8 ...``, one
``#  Rank  r Group g Pid p on host device d [bus] name`` line per rank, the
library version), a two- or three-line column header::

    #                                                     out-of-place                       in-place
    #       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
    #        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)

one row per message size, and a footer (``# Avg bus bandwidth : x``). Older
releases print ``error`` instead of ``#wrong`` and leave out the ``root``
column (all_reduce) or the ``redop`` column (broadcast); the column header
names the columns, so this reader follows it rather than a fixed layout.

nccl-tests defines ``algbw = size / time`` and ``busbw = algbw * factor`` with
factor ``2(n-1)/n`` for all_reduce, ``(n-1)/n`` for all_gather,
reduce_scatter and alltoall, and 1 for broadcast, reduce and sendrecv
(nccl-tests ``doc/PERFORMANCE.md``); :func:`bus_factor` gives it.

The output does not name the collective; it is taken, in order, from the
caller, a ``# Collective test starting: all_reduce_perf`` line (nccl-tests >=
2.17), a ``# Collective: all_reduce, ...`` provenance line, or the file name.
The rank count is taken from the caller, the ``Rank`` lines, a provenance line
``# Machine: ... n=8``, or the busbw/algbw ratio of the table (which fixes n
for every collective whose factor depends on n).

How the run launched its calls (:attr:`NcclTestsLog.launch`, which prices the
per-call cost: :mod:`simcoll.cost_model`) is read, in order, from the header's
``graph: N`` (or a ``-G N`` option) with N > 0 (``graphs``), its ``nThread T
nGpus G`` (``threads`` where one process drives several GPUs, T x G > 1, else
``processes``), the ``Rank`` lines' process ids (one per rank: ``processes``;
one for all: ``threads``), and a command line's ``-g N`` option or launcher
(``mpirun``, ``srun``: ``processes``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

import pandas as pd

from ..collectives import canonical_name
from ..errors import CollectiveError, NcclTestsLogError, OptionError
from ..nccl.tuner import ChannelLimits

#: nccl-tests binary stems -> simcoll collective names.
_PERF_NAMES = {
    "all_reduce": "allreduce",
    "all_gather": "allgather",
    "reduce_scatter": "reducescatter",
    "alltoall": "alltoall",
    "broadcast": "broadcast",
    "reduce": "reduce",
    "sendrecv": "sendrecv",
    "gather": "gather",
    "scatter": "scatter",
    "hypercube": "hypercube",
}

#: Algorithm and protocol names NCCL accepts in NCCL_ALGO / NCCL_PROTO (NCCL
#: ``src/graph/tuning.cc``, ``ncclAlgoStr`` / ``ncclProtoStr``), lower case.
_ALGOS = ("tree", "ring", "collnetdirect", "collnetchain", "nvls", "nvlstree", "pat", "collnet")
_PROTOS = ("ll", "ll128", "simple")


def bus_factor(collective: str, num_ranks: int) -> float:
    """busbw / algbw as nccl-tests defines it (nccl-tests ``doc/PERFORMANCE.md``).

    Parameters
    ----------
    collective : str
        A simcoll or nccl-tests collective name (``allreduce``, ``all_gather``...).
    num_ranks : int
        Total number of ranks ``n``.

    Returns
    -------
    float
        ``2(n-1)/n`` for Allreduce; ``(n-1)/n`` for Allgather, ReduceScatter,
        Alltoall, Gather and Scatter; 1 for Broadcast, Reduce and SendRecv.
    """
    name = _collective_name(collective)
    if num_ranks < 1:
        raise OptionError(f"bus_factor: num_ranks must be >= 1, got {num_ranks}")
    n = num_ranks
    if name == "allreduce":
        return 2.0 * (n - 1) / n
    if name in ("allgather", "reducescatter", "alltoall", "gather", "scatter", "hypercube"):
        return (n - 1) / n
    return 1.0


@dataclass(frozen=True)
class NcclTestsRow:
    """One table row: a message size and its out-of-place / in-place timings.

    ``size_bytes`` is the ``size`` column as printed (for all_gather the
    gathered output, for reduce_scatter the input of one rank). ``wrong`` is
    the ``#wrong`` / ``error`` column (None where it prints ``N/A``). The
    in-place fields are None when the tool printed no in-place columns.
    """

    line: int
    size_bytes: int
    count: int
    dtype: str
    redop: str | None
    root: int | None
    time_us: float
    algbw_GBps: float
    busbw_GBps: float
    wrong: float | None
    inplace_time_us: float | None = None
    inplace_algbw_GBps: float | None = None
    inplace_busbw_GBps: float | None = None
    inplace_wrong: float | None = None


@dataclass(frozen=True)
class NcclTestsLog:
    """A parsed nccl-tests / rccl-tests run.

    Attributes
    ----------
    path : str
        Where it was read from (``"<string>"`` for text).
    collective : str
        simcoll name (``allreduce``...; ``sendrecv`` stays as is).
    num_ranks : int or None
        Total ranks, None where nothing in the log fixes it.
    ranks_from : str
        How ``num_ranks`` was found: ``given``, ``rank lines``, ``header``,
        ``busbw/algbw`` or ``unknown``.
    nodes, gpus_per_node : int or None
        From the Rank lines' host names or a provenance ``# Machine:`` line.
    devices : tuple of str
        Device names of the Rank lines, in rank order.
    library, version : str or None
        ``NCCL`` or ``RCCL`` and its version, where printed.
    algo, proto : str or None
        NCCL_ALGO / NCCL_PROTO where the log shows them set (environment
        lines, ``NCCL INFO ... set by environment`` lines, command lines).
    collnet : bool
        Whether the log shows NCCL_COLLNET_ENABLE=1 set the same way (CollNet,
        e.g. IB SHARP, is then among NCCL's choices).
    channel_limits : ChannelLimits or None
        NCCL_MIN_CTAS / NCCL_MAX_CTAS / NCCL_MIN_NCHANNELS / NCCL_MAX_NCHANNELS
        (or NCCL's older NCCL_MIN_NRINGS / NCCL_MAX_NRINGS, which the
        NCHANNELS names override) where set the same way
        (:class:`simcoll.nccl.tuner.ChannelLimits`); None where none is.
    avg_busbw_GBps : float or None
        The ``Avg bus bandwidth`` footer.
    rows : tuple of NcclTestsRow
    machine : str or None
        The provenance ``# Machine:`` line's first item (the GPU, e.g.
        ``NVIDIA A100-SXM4-40GB``), where the log has one.
    launch : str or None
        How the run launched its calls: ``threads``, ``processes`` or
        ``graphs`` (module docstring); None where the log does not say.
    buffsize : int or None
        NCCL_BUFFSIZE (bytes) where the log shows it set, as NCCL_ALGO is read.
    nvls : bool or None
        NCCL_NVLS_ENABLE where the log shows it set (0: no NVLS or NVLS-tree).
    """

    path: str
    collective: str
    num_ranks: int | None
    ranks_from: str
    nodes: int | None
    gpus_per_node: int | None
    devices: tuple[str, ...]
    library: str | None
    version: str | None
    algo: str | None
    proto: str | None
    avg_busbw_GBps: float | None
    rows: tuple[NcclTestsRow, ...] = field(repr=False)
    collnet: bool = False
    channel_limits: ChannelLimits | None = None
    machine: str | None = None
    launch: str | None = None
    buffsize: int | None = None
    nvls: bool | None = None

    def nccl_env(self) -> dict[str, str]:
        """The variables the log sets that :class:`~simcoll.nccl.versions.NcclSetup`
        applies beside NCCL_ALGO / NCCL_PROTO: NCCL_BUFFSIZE (the pieces NCCL's
        pipelines move) and NCCL_NVLS_ENABLE."""
        env = {"NCCL_BUFFSIZE": self.buffsize, "NCCL_NVLS_ENABLE": None if self.nvls is None else int(self.nvls)}
        return {key: str(value) for key, value in env.items() if value is not None}

    def within(self, min_bytes: int | None = None, max_bytes: int | None = None) -> NcclTestsLog:
        """The same log with only the rows of sizes in ``[min_bytes, max_bytes]``
        (None: unbounded), e.g. to leave out rows its author marks unusable.

        Raises
        ------
        NcclTestsLogError
            When no nonzero size is left.
        """
        for bound in (min_bytes, max_bytes):
            if bound is not None and (not isinstance(bound, int) or isinstance(bound, bool) or bound < 0):
                raise NcclTestsLogError(
                    f"{self.path}: a size bound must be a whole number of bytes or None, got {bound!r}"
                )
        lo = 0 if min_bytes is None else min_bytes
        hi = math.inf if max_bytes is None else max_bytes
        shown = f"{lo}..{'inf' if max_bytes is None else max_bytes} B"
        if lo > hi:
            raise NcclTestsLogError(f"{self.path}: the size range {shown} is empty")
        rows = tuple(r for r in self.rows if r.size_bytes > 0 and lo <= r.size_bytes <= hi)
        if not rows:
            raise NcclTestsLogError(f"{self.path}: no size of the log lies in {shown}")
        return replace(self, rows=rows)

    def frame(self, *, nonzero: bool = True) -> pd.DataFrame:
        """A tidy table: one row per (size, placement) with ``size_bytes``,
        ``placement`` (``out-of-place`` / ``in-place``), ``time_us``,
        ``algbw_GBps``, ``busbw_GBps``, ``wrong`` and the source ``line``.
        ``nonzero`` drops nccl-tests' size-0 placeholder rows."""
        records = []
        for row in self.rows:
            if nonzero and row.size_bytes == 0:
                continue
            common = {"size_bytes": row.size_bytes, "count": row.count, "dtype": row.dtype, "line": row.line}
            records.append(
                {
                    **common,
                    "placement": "out-of-place",
                    "time_us": row.time_us,
                    "algbw_GBps": row.algbw_GBps,
                    "busbw_GBps": row.busbw_GBps,
                    "wrong": row.wrong,
                }
            )
            if row.inplace_time_us is not None:
                records.append(
                    {
                        **common,
                        "placement": "in-place",
                        "time_us": row.inplace_time_us,
                        "algbw_GBps": row.inplace_algbw_GBps,
                        "busbw_GBps": row.inplace_busbw_GBps,
                        "wrong": row.inplace_wrong,
                    }
                )
        columns = ["size_bytes", "count", "dtype", "placement", "time_us", "algbw_GBps", "busbw_GBps", "wrong", "line"]
        return pd.DataFrame.from_records(records, columns=columns)


# -- reading -------------------------------------------------------------------
_TASK_LABEL = re.compile(r"^\s*\d+:\s")  # srun --label / mpirun tag prefix "0: "
_RANK_LINE = re.compile(
    r"^#\s*Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+(\d+)\s+\[[^\]]*\]\s*(.*)$"
)
_NTHREAD = re.compile(r"nThread\s+(\d+),?\s+nGpus\s+(\d+)")
_PID = re.compile(r"\bPid\s+(\d+)")
_GRAPH = re.compile(r"\bgraph:?\s+(\d+)|(?:^|[\s(])(?:-G|--cudagraph)\s*(\d+)")
_GPUS_OPTION = re.compile(r"(?:^|\s)(?:-g|--ngpus)\s*(\d+)\b")
_LAUNCHER = re.compile(r"\b(?:mpirun|mpiexec|srun|torchrun|one (?:rank|process|GPU) per (?:GPU|task|rank))\b")
_VERSION = re.compile(r"\b(NCCL|RCCL)\s+version\s+(\d+\.\d+[\w.+\-:]*)", re.IGNORECASE)
_PROVENANCE_VERSION = re.compile(r"^(NCCL|RCCL):\s*(?:NCCL\s+|RCCL\s+)?(\d+\.\d+\.\d+[\w.+\-:]*)")
_TESTS_VERSION = re.compile(r"nccl-library=(\d+)")
_STARTING = re.compile(r"Collective test starting:\s*(\w+?)(?:_perf\w*)?\s*$")
_AVG = re.compile(r"Avg bus bandwidth\s*:\s*(\S+)")
_ENV = re.compile(
    r"\b(NCCL_ALGO|NCCL_PROTO|NCCL_COLLNET_ENABLE|NCCL_NVLS_ENABLE|NCCL_BUFFSIZE|NCCL_(?:MIN|MAX)_(?:CTAS|NCHANNELS|NRINGS))"
    r"\s*(?:=|\s+set by environment to\s+)\s*([A-Za-z0-9_,^:;]+)"
)
#: Channel-count variables -> ChannelLimits fields, in increasing precedence: NCCL_MIN_NRINGS /
#: NCCL_MAX_NRINGS are NCCL's older names of NCCL_MIN_NCHANNELS / NCCL_MAX_NCHANNELS, still read
#: but overridden by the new ones (src/graph/connect.cc, ncclMinNchannels / ncclMaxNchannels).
_CHANNEL_VARIABLES = {
    "NCCL_MIN_NRINGS": "min_channels",
    "NCCL_MAX_NRINGS": "max_channels",
    "NCCL_MIN_NCHANNELS": "min_channels",
    "NCCL_MAX_NCHANNELS": "max_channels",
    "NCCL_MIN_CTAS": "min_ctas",
    "NCCL_MAX_CTAS": "max_ctas",
}
_MACHINE_N = re.compile(r"\bn\s*=\s*(\d+)")
_MACHINE_GPN = re.compile(r"(\d+)\s+GPUs?\s+per\s+node")
_MACHINE_NODES = re.compile(r"(\d+)\s+nodes?\b")
_KEY_COLUMNS = ("size", "count", "type", "redop", "root")
_GROUP = ("time", "algbw", "busbw", "wrong")


def read_nccl_tests(path: str | Path, *, collective: str | None = None, num_ranks: int | None = None) -> NcclTestsLog:
    """Read an nccl-tests / rccl-tests log file; see :func:`parse_nccl_tests`."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise NcclTestsLogError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return parse_nccl_tests(text, path=str(path), collective=collective, num_ranks=num_ranks)


def parse_nccl_tests(
    text: str, *, path: str = "<string>", collective: str | None = None, num_ranks: int | None = None
) -> NcclTestsLog:
    """Parse nccl-tests / rccl-tests output.

    Parameters
    ----------
    text : str
        The tool's output (interleaved ``NCCL INFO`` lines and ``0: `` task
        labels are tolerated).
    path : str
        Named in error messages.
    collective : str, optional
        Overrides the collective found in the log.
    num_ranks : int, optional
        Overrides the rank count found in the log.

    Raises
    ------
    NcclTestsLogError
        ``path:line: problem`` for a log with no table, a column header with
        no rows, a row with missing or extra columns (a truncated table) or a
        non-numeric field, or when the collective cannot be determined.
    """
    columns: list[str] | None = None
    header_line = 0
    rows: list[NcclTestsRow] = []
    machine_text: str | None = None
    ranks: dict[int, tuple[str, str]] = {}
    library = version = algo = proto = None
    buffsize: int | None = None
    nvls: bool | None = None
    collnet = False
    channel_counts: dict[str, int] = {}
    started: str | None = None
    provenance_collective: str | None = None
    machine_n = machine_gpn = machine_nodes = None
    avg: float | None = None
    launch_hints: dict[str, str] = {}
    pids: set[str] = set()

    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = _TASK_LABEL.sub("", raw, count=1).rstrip()
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("#"):
            body = stripped.lstrip("#").strip()
            tokens = body.split()
            if tokens[:1] == ["size"] and "time" in tokens:
                if columns is not None:
                    where = f"line {header_line}" if not rows else f"rows from line {rows[0].line}"
                    raise NcclTestsLogError(
                        f"{path}:{lineno}: a second table starts here ({where} already read); split the log, one run per file"
                    )
                columns = _column_names(tokens, path, lineno)
                header_line = lineno
                continue
            if m := _RANK_LINE.match(stripped):
                ranks[int(m.group(1))] = (m.group(2), m.group(4).strip())
                pids.update(_PID.findall(stripped))
                continue
            _launch_hints(body, launch_hints)
            if m := _AVG.search(body):
                avg = _number(m.group(1), "Avg bus bandwidth", path, lineno)
                continue
            if m := _STARTING.search(body):
                started = m.group(1)
                continue
            if body.startswith("Machine:"):
                machine_text = body.split(":", 1)[1].split(",")[0].strip() or None
                machine_n = _int_or_none(_MACHINE_N.search(body))
                machine_gpn = _int_or_none(_MACHINE_GPN.search(body))
                machine_nodes = _int_or_none(_MACHINE_NODES.search(body))
            if (m := _PROVENANCE_VERSION.match(body)) and version is None:
                library, version = m.group(1), m.group(2)
            if body.startswith("Collective:") and provenance_collective is None:
                provenance_collective = body.split(":", 1)[1].split(",")[0].strip()
        # version and environment lines may be comments or plain output
        if m := _VERSION.search(line):
            library, version = m.group(1).upper(), m.group(2)
        elif m := _TESTS_VERSION.search(line):
            code = int(m.group(1))
            library = library or "NCCL"
            version = version or f"{code // 10000}.{code // 100 % 100}.{code % 100}"
        if _is_env_line(stripped):
            for key, value in _ENV.findall(line):
                if key == "NCCL_ALGO" and _known(value, _ALGOS):
                    algo = value
                elif key == "NCCL_PROTO" and _known(value, _PROTOS):
                    proto = value
                elif key == "NCCL_COLLNET_ENABLE":
                    collnet = value.strip(",;:") == "1"
                elif key == "NCCL_NVLS_ENABLE" and value.strip(",;:.") in ("0", "1"):
                    nvls = value.strip(",;:.") == "1"
                elif key == "NCCL_BUFFSIZE":
                    buffsize = int(value.strip(",;:")) if value.strip(",;:").isdigit() else buffsize
                elif (count := value.strip(",;:")).isdigit():
                    channel_counts[key] = int(count)
        if stripped.startswith("#"):
            continue
        first = stripped.split(None, 1)[0]
        if not first.isdigit():
            continue  # NCCL INFO lines, warnings, prompts
        if columns is None:
            raise NcclTestsLogError(f"{path}:{lineno}: a table row before any column header ('# size count type ...')")
        rows.append(_parse_row(stripped.split(), columns, path, lineno))

    if columns is None:
        raise NcclTestsLogError(f"{path}:1: no nccl-tests table (no column header line '#  size  count  type ...')")
    if not rows:
        raise NcclTestsLogError(f"{path}:{header_line}: the table has a column header but no rows (truncated log?)")

    name = _resolve_collective(path, collective, started, provenance_collective)
    n, source = _resolve_ranks(num_ranks, ranks, machine_n, rows, name)
    nodes, gpn = _resolve_shape(n, ranks, machine_nodes, machine_gpn)
    devices = tuple(ranks[r][1] for r in sorted(ranks))
    return NcclTestsLog(
        path=path,
        collective=name,
        num_ranks=n,
        ranks_from=source,
        nodes=nodes,
        gpus_per_node=gpn,
        devices=devices,
        library=library,
        version=version,
        algo=algo,
        proto=proto,
        avg_busbw_GBps=avg,
        rows=tuple(rows),
        collnet=collnet,
        channel_limits=_channel_limits(channel_counts),
        machine=machine_text,
        launch=_launch(launch_hints, pids, len(ranks)),
        buffsize=buffsize,
        nvls=nvls,
    )


def _launch_hints(body: str, hints: dict[str, str]) -> None:
    """Note what a header line says of how the run launched (module docstring);
    the first line to say each kind of thing wins."""
    if (m := _GRAPH.search(body)) and int(m.group(1) or m.group(2)) > 0:
        hints.setdefault("graph", "graphs")
    if m := _NTHREAD.search(body):
        hints.setdefault("nthread", "threads" if int(m.group(1)) * int(m.group(2)) > 1 else "processes")
    if m := _GPUS_OPTION.search(body):
        hints.setdefault("option", "threads" if int(m.group(1)) > 1 else "processes")
    if _LAUNCHER.search(body):
        hints.setdefault("launcher", "processes")


def _launch(hints: dict[str, str], pids: set[str], rank_lines: int) -> str | None:
    """The launch mode from the header's hints and the Rank lines' process ids."""
    if "graph" in hints:
        return "graphs"
    if "nthread" in hints:
        return hints["nthread"]
    if rank_lines > 1 and pids:
        return "processes" if len(pids) == rank_lines else "threads"
    return hints.get("option") or hints.get("launcher")


# -- helpers -------------------------------------------------------------------
def _column_names(tokens: list[str], path: str, lineno: int) -> list[str]:
    names = ["wrong" if t in ("#wrong", "error", "wrong") else t for t in tokens]
    first_time = names.index("time")
    keys, groups = names[:first_time], names[first_time:]
    unknown = [k for k in keys if k not in _KEY_COLUMNS]
    if keys[:3] != ["size", "count", "type"] or unknown:
        raise NcclTestsLogError(f"{path}:{lineno}: unrecognised column header {' '.join(tokens)!r}")
    if len(groups) not in (4, 8) or any(tuple(groups[i : i + 4]) != _GROUP for i in range(0, len(groups), 4)):
        raise NcclTestsLogError(
            f"{path}:{lineno}: expected 'time algbw busbw #wrong' once or twice after {' '.join(keys)!r}, got {' '.join(tokens[first_time:])!r}"
        )
    return keys + [("" if i < 4 else "inplace_") + g for i, g in enumerate(groups)]


def _parse_row(tokens: list[str], columns: list[str], path: str, lineno: int) -> NcclTestsRow:
    if len(tokens) == len(columns) - 1 and "redop" in columns:
        # old nccl-tests print a blank redop for non-reducing collectives (alltoall)
        at = columns.index("redop")
        if _looks_numeric(tokens[at]) and not (len(columns) > at + 1 and columns[at + 1] == "root"):
            tokens = [*tokens[:at], "", *tokens[at:]]
    if len(tokens) != len(columns):
        what = "missing" if len(tokens) < len(columns) else "extra"
        raise NcclTestsLogError(
            f"{path}:{lineno}: row has {len(tokens)} fields, the column header has {len(columns)} ({what} columns; truncated table?)"
        )
    cell = dict(zip(columns, tokens, strict=True))
    size = _integer(cell["size"], "size", path, lineno)
    count = _integer(cell["count"], "count", path, lineno)
    root = _integer(cell["root"], "root", path, lineno, signed=True) if "root" in cell else None
    values: dict[str, float | None] = {}
    for prefix in ("", "inplace_"):
        if prefix + "time" not in cell:
            continue
        for key in ("time", "algbw", "busbw"):
            values[prefix + key] = _number(cell[prefix + key], prefix + key, path, lineno)
        wrong = cell[prefix + "wrong"]
        values[prefix + "wrong"] = None if wrong.upper() == "N/A" else _number(wrong, prefix + "#wrong", path, lineno)
    return NcclTestsRow(
        line=lineno,
        size_bytes=size,
        count=count,
        dtype=cell["type"],
        redop=cell.get("redop") or None,
        root=root,
        time_us=values["time"],
        algbw_GBps=values["algbw"],
        busbw_GBps=values["busbw"],
        wrong=values["wrong"],
        inplace_time_us=values.get("inplace_time"),
        inplace_algbw_GBps=values.get("inplace_algbw"),
        inplace_busbw_GBps=values.get("inplace_busbw"),
        inplace_wrong=values.get("inplace_wrong"),
    )


def _channel_limits(counts: dict[str, int]) -> ChannelLimits | None:
    """The channel counts a log's environment sets (by variable name)."""
    fields = {_CHANNEL_VARIABLES[name]: counts[name] for name in _CHANNEL_VARIABLES if name in counts}
    return ChannelLimits(**fields) if fields else None


def _number(text: str, column: str, path: str, lineno: int) -> float:
    try:
        value = float(text)
    except ValueError:
        raise NcclTestsLogError(f"{path}:{lineno}: column {column!r} is {text!r}, not a number") from None
    if not math.isfinite(value) or value < 0:
        raise NcclTestsLogError(f"{path}:{lineno}: column {column!r} is {text!r}, not a finite non-negative number")
    return value


def _integer(text: str, column: str, path: str, lineno: int, signed: bool = False) -> int:
    try:
        value = int(text)
    except ValueError:
        raise NcclTestsLogError(f"{path}:{lineno}: column {column!r} is {text!r}, not an integer") from None
    if value < 0 and not signed:
        raise NcclTestsLogError(f"{path}:{lineno}: column {column!r} is {text!r}, negative")
    return value


def _looks_numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _int_or_none(match: re.Match[str] | None) -> int | None:
    return int(match.group(1)) if match else None


def _known(value: str, names: tuple[str, ...]) -> bool:
    """NCCL_ALGO / NCCL_PROTO values: a list of names, optionally negated ``^``
    or per-collective ``allreduce:tree,ring``; accept when every name is known."""
    words = [w for w in re.split(r"[,;:^]", value.lower()) if w]
    collectives = set(_PERF_NAMES) | set(_PERF_NAMES.values())
    return bool(words) and all(w in names or w in collectives for w in words)


def _is_env_line(line: str) -> bool:
    """Lines that set variables (not prose that mentions them)."""
    body = line.lstrip("#").strip()
    return (
        body.startswith(("Env:", "Run:", "export ", "$", "mpirun", "srun", "env "))
        or "NCCL INFO" in line
        or "set by environment" in line
        # a command quoted inside a description: "... runs it as env NCCL_ALGO=RING ..."
        or re.search(r"\benv\s+(?:-u\s+\S+\s+)*NCCL_\w+=", body) is not None
    )


def _collective_name(name: str) -> str:
    key = name.strip().lower().removesuffix("_perf").removesuffix("_mpi")
    if key in _PERF_NAMES:
        return _PERF_NAMES[key]
    return canonical_name(key)


def _resolve_collective(path: str, given: str | None, started: str | None, provenance: str | None) -> str:
    candidates = [given, started, provenance]
    stem = Path(path).name.lower()
    for perf in sorted(_PERF_NAMES, key=len, reverse=True):
        if re.search(rf"(^|[_\-.]){perf}([_\-.]|$)", stem):
            candidates.append(perf)
            break
    for candidate in candidates:
        if not candidate:
            continue
        try:
            return _collective_name(candidate)
        except CollectiveError:
            if candidate is given:
                raise NcclTestsLogError(f"{path}:1: unknown collective {given!r}") from None
    raise NcclTestsLogError(
        f"{path}:1: cannot tell which collective this log measured (no 'Collective test starting' line and no"
        " collective in the file name); pass collective="
    )


def _resolve_ranks(
    given: int | None, ranks: dict[int, tuple[str, str]], machine_n: int | None, rows: list[NcclTestsRow], name: str
) -> tuple[int | None, str]:
    if given is not None:
        return given, "given"
    if ranks:
        return len(ranks), "rank lines"
    if machine_n is not None:
        return machine_n, "header"
    inferred = _ranks_from_ratio(rows, name)
    return (inferred, "busbw/algbw") if inferred else (None, "unknown")


def _ranks_from_ratio(rows: list[NcclTestsRow], name: str) -> int | None:
    """The one n for which busbw = factor(n) * algbw holds on every row within
    print rounding (0.005 GB/s on each), or None when none or several do."""
    if bus_factor(name, 2) == bus_factor(name, 3):
        return None  # the factor does not depend on n
    usable = [r for r in rows if r.algbw_GBps >= 1.0]
    if not usable:
        return None
    best = max(usable, key=lambda r: r.algbw_GBps)
    ratio = best.busbw_GBps / best.algbw_GBps
    scale = 2.0 if name == "allreduce" else 1.0
    if ratio >= scale:
        return None
    estimate = round(scale / (scale - ratio))
    fits = [
        n
        for n in range(max(2, estimate - 8), estimate + 9)
        if all(abs(bus_factor(name, n) * r.algbw_GBps - r.busbw_GBps) <= 0.005 * (1 + scale) for r in usable)
    ]
    return fits[0] if len(fits) == 1 else None


def _resolve_shape(
    n: int | None, ranks: dict[int, tuple[str, str]], machine_nodes: int | None, machine_gpn: int | None
) -> tuple[int | None, int | None]:
    if ranks:
        hosts = {host for host, _ in ranks.values()}
        nodes = len(hosts)
        return nodes, (len(ranks) // nodes if len(ranks) % nodes == 0 else None)
    nodes, gpn = machine_nodes, machine_gpn
    if n is not None:
        if nodes is None and gpn:
            nodes = n // gpn if n % gpn == 0 else None
        if gpn is None and nodes:
            gpn = n // nodes if n % nodes == 0 else None
    return nodes, gpn

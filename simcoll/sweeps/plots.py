"""Figures from sweep results and simulations, one function each.

Every function returns a :class:`matplotlib.figure.Figure` built without
pyplot (no global state, safe on workers and in notebooks, where a returned
figure is displayed) and, given ``path``, writes it atomically
(:func:`simcoll.files.write_atomic`: a failed save leaves the previous file);
the format follows the suffix (``.png``, ``.svg``, ``.pdf``).

- :func:`plot_bandwidth`: busbw or algbw against size, one line per algorithm,
  the max-flow bound dashed (nccl-tests conventions, as SCCL Figs. 4-6).
- :func:`plot_speedup`: time of a baseline over each algorithm's time, per size.
- :func:`plot_fraction_of_bound`: heatmap of the best algbw over the bound,
  hardware variant × size (the what-if studies).
- :func:`plot_pareto`: synthesized (steps, rounds/chunk) points, frontier
  joined, coloured by time (SCCL Algorithm 1's output).
- :func:`plot_link_utilisation`: heatmap of each resource's rate over its
  capacity in time bins, from :attr:`SimulationResult.utilisation`.
- :func:`plot_gantt`: a simulated timeline, one row per track, from
  :attr:`SimulationResult.timeline`.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.colors import Normalize
from matplotlib.figure import Figure

from ..errors import FileError, OptionError
from ..files import write_atomic
from ..units import format_size


def save_figure(fig: Figure, path: str | Path, dpi: int = 110) -> None:
    """Write ``fig`` to ``path`` atomically, in the format of its suffix."""
    fmt = Path(path).suffix.lstrip(".").lower() or "png"
    buffer = io.BytesIO()
    try:
        fig.savefig(buffer, format=fmt, dpi=dpi, bbox_inches="tight")
    except ValueError as exc:
        raise FileError(f"{path}: cannot write a figure in this format ({exc})") from None
    write_atomic(path, buffer.getvalue())


def _finish(fig: Figure, path: str | Path | None) -> Figure:
    if path is not None:
        save_figure(fig, path)
    return fig


def _ok_rows(df: pd.DataFrame, needed: Iterable[str]) -> pd.DataFrame:
    missing = [c for c in needed if c not in df.columns]
    if missing:
        raise OptionError(f"results have no column {missing[0]!r} (give the DataFrame of load_results)")
    rows = df[df["status"] == "ok"] if "status" in df.columns else df
    if rows.empty:
        raise OptionError("no successful rows to plot")
    return rows


def _single(rows: pd.DataFrame, columns: Iterable[str]) -> None:
    for column in columns:
        if column in rows.columns and rows[column].nunique(dropna=False) > 1:
            values = ", ".join(map(str, sorted(rows[column].astype(str).unique())[:4]))
            raise OptionError(f"rows mix several {column} values ({values}...): select one first")


def _size_axis(ax, sizes: Iterable[int]) -> None:
    ticks = sorted(set(int(s) for s in sizes))
    step = max(1, len(ticks) // 8)
    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks[::step], [format_size(s) for s in ticks[::step]])
    ax.set_xlabel("buffer size")


def plot_bandwidth(
    df: pd.DataFrame, path: str | Path | None = None, *, metric: str = "busbw", title: str | None = None
) -> Figure:
    """``metric`` (``busbw`` or ``algbw``, GB/s) against size, one line per
    algorithm, and the max-flow bound dashed. The rows must share one
    machine, collective, mode and contention setting."""
    if metric not in ("busbw", "algbw"):
        raise OptionError(f"metric must be 'busbw' or 'algbw', got {metric!r}")
    value, bound = f"{metric}_GBps", f"{metric}_bound_GBps"
    rows = _ok_rows(df, ["algorithm", "size_bytes", value])
    _single(rows, ["machine", "collective", "mode", "contention"])
    fig = Figure(figsize=(7, 4.5))
    ax = fig.add_subplot()
    for name, group in rows.groupby("algorithm", sort=True):
        group = group.sort_values("size_bytes")
        ax.plot(group.size_bytes, group[value], marker="o", markersize=3, label=str(name))
    if bound in rows.columns and rows[bound].notna().any():
        b = rows.dropna(subset=[bound]).groupby("size_bytes")[bound].first()
        ax.plot(b.index, b.values, "k--", label="bound (max-flow)")
    _size_axis(ax, rows.size_bytes)
    ax.set_ylabel(f"{metric} (GB/s)")
    first = rows.iloc[0]
    ax.set_title(title or f"{first.get('collective', '')} on {first.get('machine', '')}")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return _finish(fig, path)


def plot_speedup(
    df: pd.DataFrame, baseline: str, path: str | Path | None = None, *, title: str | None = None
) -> Figure:
    """Speed-up of each algorithm over ``baseline`` (baseline time / time)
    against size, a line per algorithm, 1 marked. One machine and collective."""
    rows = _ok_rows(df, ["algorithm", "size_bytes", "time_s"])
    _single(rows, ["machine", "collective", "mode", "contention"])
    base = rows[rows.algorithm == baseline].groupby("size_bytes").time_s.min()
    if base.empty:
        known = ", ".join(sorted(rows.algorithm.unique()))
        raise OptionError(f"baseline {baseline!r} has no successful rows (algorithms: {known})")
    fig = Figure(figsize=(7, 4.5))
    ax = fig.add_subplot()
    for name, group in rows[rows.algorithm != baseline].groupby("algorithm", sort=True):
        group = group.groupby("size_bytes").time_s.min()
        common = group.index.intersection(base.index)
        if len(common):
            ax.plot(common, base[common] / group[common], marker="o", markersize=3, label=str(name))
    ax.axhline(1.0, color="k", linewidth=0.8, linestyle=":")
    _size_axis(ax, rows.size_bytes)
    ax.set_ylabel(f"speed-up over {baseline}")
    ax.set_title(title or f"speed-up over {baseline}")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return _finish(fig, path)


def plot_fraction_of_bound(
    df: pd.DataFrame,
    path: str | Path | None = None,
    *,
    variant: str = "machine",
    algorithm: str | None = None,
    title: str | None = None,
) -> Figure:
    """Heatmap of algbw over the max-flow bound: a row per value of
    ``variant`` (the hardware variant), a column per size; each cell is the
    best algorithm's fraction, or ``algorithm``'s. One collective."""
    rows = _ok_rows(df, [variant, "size_bytes", "algbw_GBps", "algbw_bound_GBps"])
    _single(rows, ["collective", "mode", "contention"])
    if algorithm is not None:
        rows = rows[rows.algorithm == algorithm]
        if rows.empty:
            raise OptionError(f"algorithm {algorithm!r} has no successful rows")
    fraction = (rows.algbw_GBps / rows.algbw_bound_GBps).rename("fraction")
    table = rows.assign(fraction=fraction).pivot_table(
        index=variant, columns="size_bytes", values="fraction", aggfunc="max"
    )
    fig = Figure(figsize=(1.2 + 0.55 * table.shape[1], 1.2 + 0.45 * table.shape[0]))
    ax = fig.add_subplot()
    image = ax.imshow(table.values, aspect="auto", cmap="viridis", norm=Normalize(0, 1))
    ax.set_xticks(range(table.shape[1]), [format_size(s) for s in table.columns], rotation=60, fontsize=7)
    ax.set_yticks(range(table.shape[0]), [str(v) for v in table.index], fontsize=7)
    for (i, j), v in np.ndenumerate(table.values):
        if np.isfinite(v):
            ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=6, color="w" if v < 0.6 else "k")
    ax.set_xlabel("buffer size")
    ax.set_ylabel(variant)
    fig.colorbar(image, ax=ax, label="algbw / bound")
    ax.set_title(title or f"fraction of the bound ({algorithm or 'best algorithm'})")
    return _finish(fig, path)


def plot_pareto(
    points: pd.DataFrame | Iterable[Mapping[str, Any]],
    path: str | Path | None = None,
    *,
    time_column: str = "time_s",
    title: str | None = None,
) -> Figure:
    """Synthesized algorithms as (steps S, rounds per chunk R/C) points
    coloured by ``time_column`` (solver or simulated seconds); the points
    with ``optimal`` true (the Pareto frontier) are joined.

    ``points`` has columns ``chunks``, ``steps``, ``rounds``, ``time_column``
    and optionally ``optimal`` and ``status`` (only ``sat`` points are drawn
    filled; others hollow)."""
    frame = pd.DataFrame(list(points)) if not isinstance(points, pd.DataFrame) else points
    missing = [c for c in ("chunks", "steps", "rounds", time_column) if c not in frame.columns]
    if missing:
        raise OptionError(f"Pareto points need a {missing[0]!r} column")
    if frame.empty:
        raise OptionError("no synthesis points to plot")
    frame = frame.assign(rpc=frame.rounds.astype(float) / frame.chunks.astype(float))
    sat = frame[frame.status == "sat"] if "status" in frame.columns else frame
    other = frame.drop(sat.index)
    fig = Figure(figsize=(6, 4.5))
    ax = fig.add_subplot()
    scatter = ax.scatter(sat.steps, sat.rpc, c=sat[time_column], cmap="plasma", s=40, label="sat", zorder=3)
    if not other.empty:
        ax.scatter(other.steps, other.rpc, facecolors="none", edgecolors="grey", s=40, label="unsat / unknown")
    if "optimal" in sat.columns and sat.optimal.any():
        front = sat[sat.optimal.astype(bool)].sort_values("steps")
        ax.plot(front.steps, front.rpc, "k-", linewidth=1, label="Pareto frontier")
    fig.colorbar(scatter, ax=ax, label=time_column)
    ax.set_xlabel("steps S")
    ax.set_ylabel("rounds per chunk R/C")
    ax.set_title(title or "synthesis: latency (S) vs bandwidth (R/C)")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return _finish(fig, path)


def _frame(source: Any, attribute: str) -> pd.DataFrame:
    frame = getattr(source, attribute, source)
    if not isinstance(frame, pd.DataFrame):
        raise OptionError(f"expected a SimulationResult or its {attribute} DataFrame, got {type(source).__name__}")
    if frame.empty:
        raise OptionError(f"the {attribute} is empty (was it recorded?)")
    return frame


def plot_link_utilisation(
    result: Any, path: str | Path | None = None, *, bins: int = 60, title: str | None = None
) -> Figure:
    """Heatmap of each resource's mean utilisation (rate / capacity) in
    ``bins`` equal time bins: a row per resource that carried traffic."""
    util = _frame(result, "utilisation")
    end = float(util.end_s.max())
    if not end > 0:
        raise OptionError("the utilisation covers no time")
    edges = np.linspace(0.0, end, bins + 1)
    resources = sorted(util.resource.unique(), key=str)
    grid = np.zeros((len(resources), bins))
    index = {r: i for i, r in enumerate(resources)}
    for row in util.itertuples(index=False):
        if row.capacity_Bps <= 0 or row.end_s <= row.start_s:
            continue
        share = row.rate_Bps / row.capacity_Bps
        overlap = np.clip(np.minimum(edges[1:], row.end_s) - np.maximum(edges[:-1], row.start_s), 0, None)
        grid[index[row.resource]] += share * overlap
    grid /= np.diff(edges)
    fig = Figure(figsize=(8, 1.5 + 0.18 * len(resources)))
    ax = fig.add_subplot()
    image = ax.imshow(
        grid,
        aspect="auto",
        cmap="magma",
        norm=Normalize(0, 1),
        extent=(0, end * 1e6, len(resources), 0),
        interpolation="nearest",
    )
    ax.set_yticks(np.arange(len(resources)) + 0.5, [str(r) for r in resources], fontsize=6)
    ax.set_xlabel("time (µs)")
    ax.set_ylabel("resource")
    fig.colorbar(image, ax=ax, label="utilisation (rate / capacity)")
    ax.set_title(title or "per-link utilisation")
    return _finish(fig, path)


def plot_gantt(
    result: Any, path: str | Path | None = None, *, max_tracks: int = 64, title: str | None = None
) -> Figure:
    """Gantt chart of a simulated timeline: a row per track (executor or
    connection), a bar per operation coloured by kind; the first
    ``max_tracks`` tracks by start time."""
    timeline = _frame(result, "timeline")
    first_start = timeline.groupby("track").start_s.min().sort_values()
    tracks = list(first_start.index[:max_tracks])
    shown = timeline[timeline.track.isin(tracks)]
    kinds = sorted(shown.kind.astype(str).unique())
    colours = {k: f"C{i % 10}" for i, k in enumerate(kinds)}
    row_of = {t: i for i, t in enumerate(tracks)}
    fig = Figure(figsize=(9, 1.5 + 0.2 * len(tracks)))
    ax = fig.add_subplot()
    for kind, group in shown.groupby(shown.kind.astype(str)):
        ys = group.track.map(row_of).to_numpy()
        ax.barh(
            ys,
            (group.end_s - group.start_s).to_numpy() * 1e6,
            left=group.start_s.to_numpy() * 1e6,
            height=0.8,
            color=colours[kind],
            label=kind,
        )
    ax.set_yticks(range(len(tracks)), [str(t) for t in tracks], fontsize=6)
    ax.invert_yaxis()
    ax.set_xlabel("time (µs)")
    ax.set_ylabel("track")
    ax.legend(fontsize=7, loc="upper right")
    ax.set_title(title or "simulated timeline")
    return _finish(fig, path)

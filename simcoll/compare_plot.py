"""The main job's figure: :func:`simcoll.compare.compare`'s rows as algbw
against buffer size, on log axes, one line per algorithm (a colour and a
marker each, no two alike), NCCL's baseline thick black, the bandwidth bound
dashed.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from .compare import NCCL_ROW
from .files import save_figure
from .units import format_size

#: Line colours of :func:`comparison_figure`, one per algorithm in the order drawn: distinct
#: hues, none of them black (black is NCCL's baseline and the bandwidth bound).
PLOT_COLOURS = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf",
    "#bcbd22", "#7f7f7f", "#000080", "#b8860b", "#008080", "#ff00ff", "#800000", "#32cd32",
)  # fmt: skip
#: Markers of :func:`comparison_figure`: 13, prime to the 16 colours, so the first 208 lines
#: differ in (colour, marker); each block of 208 after that has its own line style.
PLOT_MARKERS = ("o", "s", "^", "v", "D", "P", "X", "*", "<", ">", "h", "p", "8")
_LINE_STYLES = ("-", "-.", ":", (0, (5, 1, 1, 1, 1, 1)))  # ("--" is a Program row's, and the bound's)
#: The label of NCCL's row in the plot's legend.
NCCL_LABEL = f"{NCCL_ROW} (baseline)"


def comparison_figure(df: pd.DataFrame):
    """The figure of :func:`plot_comparison` (a matplotlib Figure, not
    registered with pyplot): algbw against buffer size, both axes
    logarithmic, x ticks labelled by :func:`simcoll.units.format_size`. Each
    algorithm has its own colour, marker and line style (:data:`PLOT_COLOURS`,
    :data:`PLOT_MARKERS`), its Program-mode rows the same, dashed; NCCL's row
    is the reference, thick black (:data:`NCCL_LABEL`); the algbw bound is
    thin, black and dashed.

    >>> from simcoll.compare import compare
    >>> df, _ = compare("ring:4", "allgather", [1024, 1 << 20], method="analytic")
    >>> ax = comparison_figure(df).axes[0]
    >>> [t.get_text() for t in ax.get_xticklabels()], ax.get_yscale()
    (['1KB', '1MB'], 'log')
    """
    import math

    from matplotlib.figure import Figure
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    fig = Figure(figsize=(10, 5), layout="constrained")
    ax = fig.add_subplot()
    order = list(dict.fromkeys(n for n in df["algorithm"] if n != NCCL_ROW))
    lines = sorted(df.groupby(["algorithm", "method"], sort=False), key=lambda g: g[0][0] != NCCL_ROW)  # NCCL first
    for (name, how), group in lines:
        group, program, i = group.sort_values("size_bytes"), how == "program", order.index(name) if name in order else 0
        if name == NCCL_ROW:  # the reference, drawn over the others
            style = {"color": "black", "linewidth": 2.8, "linestyle": ":" if program else "-", "zorder": 4}
        else:
            style = {"color": PLOT_COLOURS[i % len(PLOT_COLOURS)], "marker": PLOT_MARKERS[i % len(PLOT_MARKERS)]}
            style["linestyle"] = "--" if program else _LINE_STYLES[i // len(PLOT_COLOURS) // len(PLOT_MARKERS) % 4]
            style.update(linewidth=1.4, markersize=4, zorder=3)
        label = (NCCL_LABEL if name == NCCL_ROW else name) + (" (program)" if program else "")
        ax.plot(group["size_bytes"], group["algbw_GBps"], label=label, **style)
    bound = df.drop_duplicates("size_bytes").sort_values("size_bytes")
    bound = bound[bound["algbw_bound_GBps"].map(math.isfinite)]
    ax.plot(bound["size_bytes"], bound["algbw_bound_GBps"], "k--", linewidth=1, label="algbw bound (max-flow cuts)")
    sizes = sorted(int(s) for s in df["size_bytes"].unique())
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.xaxis.set_major_locator(FixedLocator(_size_ticks(sizes)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: format_size(x)))
    ax.xaxis.set_minor_locator(FixedLocator(sizes))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}"))
    ax.set_xlabel("buffer size")
    ax.set_ylabel("algbw (GB/s, log scale)")
    first = df.iloc[0]
    how = "analytic α-β" if first["method"] == "analytic" else "simulated"
    ax.set_title(f"{first['collective']} on {first['topology']} (model {first['model']}, {how})")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small")
    return fig


def _size_ticks(sizes: list[int], most: int = 11) -> list[int]:
    """The x ticks: every size where they are few, else every k-th power of two between them."""
    if len(sizes) <= most:
        return sizes
    low, high = (int(s).bit_length() - 1 for s in (min(sizes), max(sizes)))  # floor(log2)
    return [1 << k for k in range(low, high + 1, -(-(high - low + 1) // most)) if min(sizes) <= 1 << k]


def plot_comparison(df: pd.DataFrame, path: str | Path) -> None:
    """Plot algbw against buffer size (:func:`comparison_figure`: log axes,
    one line per algorithm, NCCL's baseline thick black, the bandwidth bound
    dashed) and save the figure.

    Parameters
    ----------
    df : pandas.DataFrame
        Rows from :func:`~simcoll.compare.compare` (columns :data:`~simcoll.compare.COLUMNS`); Program-mode rows
        are drawn dashed and labelled ``"<name> (program)"``.
    path : str or pathlib.Path
        Where to write the image; the format follows the suffix (``.png``,
        ``.svg``, ``.pdf``).

    Raises
    ------
    OSError
        When ``path`` cannot be written.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> from simcoll.compare import compare
    >>> df, _ = compare("ring:4", "allgather", [1024, 1 << 20], method="analytic")
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     out = pathlib.Path(tmp) / "allgather.png"
    ...     plot_comparison(df, out)
    ...     out.stat().st_size > 0
    True
    """
    save_figure(comparison_figure(df), path, dpi=120)
